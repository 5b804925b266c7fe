//! What a finding found, typed: the kind of bottleneck, the resource and its numbers. The
//! climb and compare act on these, never on a finding's name or prose; a remedy's value comes
//! from tune's one table ([`qpslab_tune::remedy`]).

use serde::{Deserialize, Serialize};

/// A cause, with the numbers a consumer acts on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Cause {
    /// A side's small writes were held by Nagle until the peer's delayed ACK came: every
    /// response waited about the peer's delayed-ACK timeout.
    DelayedAck {
        /// `server` or `generator`: whose writes were held.
        side: String,
        /// The peer's delayed-ACK timeout, and the mean latency, in ms.
        timer_ms: f64,
        latency_ms: f64,
    },
    /// nginx ran out of worker connections (its error log says so).
    WorkerConnections {
        /// `worker_connections` as configured, and what the run needed at least (the load's
        /// connections, and as many again to an upstream when it proxies).
        limit: u64,
        wanted: u64,
    },
    /// A rate limit answered the requests over it with a fast error status.
    RateLimit {
        /// The status it answered (503, 429; 200 for a gRPC status).
        status: u16,
        /// A gRPC limit: the gRPC status it answered (RESOURCE_EXHAUSTED, UNAVAILABLE).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grpc_status: Option<String>,
        /// Ok responses a second, the limit's rate in this run.
        ok_per_s: f64,
        /// The limit as configured, when the server's configuration says (`limit_req_zone
        /// ... rate=200r/s`).
        configured: Option<String>,
    },
    /// The server's HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS set the concurrency below the
    /// streams the load asked for.
    StreamLimit { server: u64, asked: u64 },
    /// The server's HTTP/2 flow-control window held request bodies back this share of the
    /// responses' time: its stream window of `window` bytes, or its connection's
    /// (`connection`).
    FlowControl { window: u64, share: f64, connection: bool },
    /// The server stopped as a whole `count` times (no response on any connection while
    /// requests waited), `share` of the window, the longest `longest_ms`.
    Stalls { count: u64, share: f64, longest_ms: f64 },
    /// The server's requests spent this share of their time at a block device (its queue
    /// over the requests in service, or its threads' uninterruptible sleep); the device.
    DiskWait { share: f64, device: Option<String> },
    /// The server's own log named what went wrong, this many times in the window.
    ServerLog { message: String, count: u64 },
    /// Host settings below what tune sets: each sysctl and the value from tune's table; on
    /// the generator's side (`client_side`) or the server's.
    HostSettings { settings: Vec<(String, String)>, client_side: bool },
    /// An interface's receive work on one CPU (one queue without RPS, every queue's IRQ on one
    /// CPU, softirq concentrated): its steering (RPS/RFS/XPS) spreads it; the interface when
    /// the finding names one.
    Steering { iface: Option<String> },
    /// A side at the CPU it may have: `side` is `server`, `generator` or `both`; `held` is
    /// `own` (its threads on all their CPUs), `quota` (a cgroup's) or `cpus` (CPUs full of
    /// other work).
    Saturated { side: String, held: String },
    /// No resource saturated: the rate is the requests in flight over their latency.
    RoundTrips,
    /// An open loop kept its schedule: the schedule set the rate.
    Paced,
    /// A cgroup CPU quota held a side back.
    Throttled,
    /// Other work shared the benchmark's CPUs; `share`: at most this share of each response's
    /// time went to the run's own threads waiting for a CPU (schedstat), when known.
    Contention { share: Option<f64> },
    /// The run failed or got no answers: its rate measures the failure.
    Failed,
    /// The network (a link, a shaper, a NIC's own limits) bounds the rate.
    Network,
    /// Counters of the host's that this run's own connections did not show: another
    /// program's, nothing for this run to change.
    NotTheRuns,
    /// A share of the responses (or connects) waited for one of TCP's timers: `timer` names
    /// it (`retransmission timeout`, `SYN retransmission`), `ms` its value.
    KernelTimer { timer: String, ms: f64, share: f64 },
    /// The hypervisor gave this share of the run's CPUs' time to other guests.
    Steal { share: f64 },
    /// Tasks waited for memory (reclaim, faults from storage) this share of the window.
    MemoryPressure { share: f64 },
    /// A followed process's cgroup memory limit (`limit` bytes) was hit `hits` times in the
    /// window (and killed `oom_kills`).
    MemoryLimit { pid: u32, cgroup: String, limit: u64, hits: u64, oom_kills: u64 },
    /// TCP's socket buffers reached net.ipv4.tcp_mem's pressure mark (pages), or past it:
    /// the kernel shrank buffers or dropped connections.
    TcpMemory { pages: u64, pressure: u64 },
    /// nginx's per-request costs this run shows, each one that applies.
    NginxCosts { access_log: bool, keepalive_requests: bool, workers: bool, accept_mutex: bool },
    /// An open loop fell behind its schedule; `connections_free` when connections were idle
    /// (the generator set the pace) rather than all busy on the target.
    BehindSchedule { asked_rps: f64, achieved_rps: f64, connections_free: bool },
    /// The window was too short, or had too few samples, for a verdict.
    TooShort { window_s: f64 },
    /// The target was still busy with an earlier load's requests when the run began.
    Undrained,
    /// Neither side saturated and the round trips do not explain the rate.
    Unexplained,
    /// A process (`pid`) near its descriptor limit, or the host (no pid) near fs.file-max.
    Descriptors { pid: Option<u32>, open: u64, limit: u64 },
    /// Segments lost and sent again: their share of the segments sent, and the
    /// retransmission timeouts among them.
    Loss { share: f64, timeouts: u64 },
    /// A socket's backlog dropped packets while its owner held the socket (the receiving
    /// process behind its sockets), per second.
    SocketBacklog { per_s: f64 },
    /// UDP datagrams dropped for a full socket buffer: `direction` is `receive` (a reader
    /// behind its datagrams) or `send` (a writer ahead of its buffer), per second.
    UdpBuffer { direction: String, per_s: f64 },
    /// irqbalance (`pid`) rewrote IRQ affinities that were set by hand.
    IrqBalance { pid: u32 },
    /// A side's written bytes waited for a window: `window` is `receive` (the peer's) or
    /// `congestion`; `share` of the side's readings.
    WindowWait { side: String, window: String, share: f64 },
    /// A side's CPU went to one kind of work the profile names: `work` is `syscall`, `copy`
    /// or `lock` (spinning under socket wake-ups); `share` of its samples.
    CpuWork { side: String, work: String, share: f64 },
    /// One of the server's `workers` did the work (`busiest`, in CPUs) while the others idled
    /// (`others`, their mean), with the load's `connections`.
    WorkerImbalance { workers: u64, busiest: f64, others: f64, connections: u64 },
    /// Full TLS handshakes, this many per response (and `resumed` ones in the window).
    TlsHandshakes { per_response: f64, resumed: u64 },
    /// The server closed the connection after most responses of a kept-alive run:
    /// `per_response` reconnects a response.
    KeepAliveOff { per_response: f64 },
    /// The server counted more requests than the run sent: `share` of them were other
    /// clients' (nginx's stub_status).
    OtherTraffic { share: f64, server_per_s: f64, run_per_s: f64 },
    /// The clocksource (`current`) makes clock reads expensive; `tsc` when it is offered.
    Clocksource { current: String, tsc: bool },
}

impl Cause {
    /// The nginx limit (`limit_req`, `limit_conn`) the server's log says turned requests
    /// away, when this is that log's cause.
    pub fn log_limit(&self) -> Option<&'static str> {
        match self {
            Cause::ServerLog { message, .. } => crate::server_log::limit_named(message),
            _ => None,
        }
    }
}
