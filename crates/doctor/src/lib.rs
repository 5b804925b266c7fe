//! The doctor: turns a series of samples into a summary (rates and shares over the window,
//! [`summary`]) and findings, each with its evidence (numbers from the samples) and the remedy:
//! first the verdict on what bounds the rate ([`verdict`]), then the kernel-side rules
//! ([`rules`]).
//!
//! Every rule, its threshold and its remedy are listed in [`RULES`], which `qpslab doctor
//! --rules RULE` prints. Counter rules judge rates over the window, never a single event,
//! except where one event is already a loss (a dropped packet or connection attempt).

mod balance;
pub mod cause;
mod disk;
pub mod exam;
pub mod explain;
mod handshakes;
mod keepalive;
mod kernel;
mod losses;
mod network;
mod profiled;
pub mod render;
mod rules;
mod server;
mod server_log;
mod stub;
pub mod summary;
mod tcp;
mod timers;
mod verdict;

use serde::{Deserialize, Serialize};

pub use cause::Cause;
pub use exam::{Diagnosis, Examination};
pub use explain::{
    Explanation, FlowFacts, LoadFacts, QuicFacts, Resource, Schedule, StallFacts, StreamLimit,
    TlsFacts,
};
use qpslab_host::host::Host;
use qpslab_host::sample::Sample;
pub use summary::{summarize, CpuShare, IfRate, IntervalRow, IrqRate, ProcSummary, Summary};

/// Softirq share of one CPU above which receive processing is called concentrated (one
/// ksoftirqd at 95% while the server's workers idle is the classic picture).
pub const SOFTIRQ_HOT: f64 = 0.80;
/// Idle share above which another CPU counts as headroom.
pub const HEADROOM_IDLE: f64 = 0.25;
/// A process busy at this share of the CPUs it can use, or whose CPUs are this busy, is
/// saturated; a CPU this busy is saturated.
pub const SATURATED: f64 = 0.85;
/// Other processes' CPU (in CPUs, and as a share of all busy time) from which the CPUs are
/// called contended.
pub const CONTENDED_CPU: f64 = 0.3;
pub const CONTENDED_SHARE: f64 = 0.2;
/// Share of the window in which tasks waited for a CPU (PSI `some`) from which other work on
/// the CPUs, or a saturated CPU, explains the rate; below it no one waited long enough.
pub const CPU_WAITS: f64 = 0.10;
/// Packets per second below which an interface's queue layout is not worth a finding.
pub const BUSY_NIC_PPS: f64 = 1000.0;
/// Descriptor use at which the limit is close.
pub const FD_CLOSE: f64 = 0.80;
/// TIME_WAIT sockets, as a share of the ephemeral port range, that mean port pressure.
pub const TW_PRESSURE: f64 = 0.50;
/// Coefficient of variation of the per-interval rate below which the rate is flat.
pub const FLAT_CV: f64 = 0.10;
/// Time squeezes per second (a softirq round ending with packets left: deferred, not lost)
/// from which the receive budget is called short.
pub const SQUEEZE_PER_S: f64 = 10.0;
/// Retransmitted share of the segments sent, and retransmissions per second, from which
/// retransmissions are reported (both must hold).
pub const RETRANS_SHARE: f64 = 0.01;
pub const RETRANS_PER_S: f64 = 10.0;
/// SYN cookies per second from which a full SYN queue is reported (cookies still connect).
pub const COOKIES_PER_S: f64 = 1.0;
/// Drops (packets, connection attempts) per second from which a drop finding is critical;
/// below it, any drop is a warning.
pub const DROPS_CRITICAL_PER_S: f64 = 1.0;
/// The shortest window, and fewest intervals, from which the verdict judges a run.
pub const MIN_WINDOW_S: f64 = 1.0;
pub const MIN_INTERVALS: usize = 2;
/// Share of a busy CPU's profile samples spinning on a lock under a socket wake-up from which
/// lock contention is reported.
pub const LOCK_SHARE: f64 = 0.10;
/// Share of a busy CPU's samples reading the clock, with a clocksource other than tsc, from
/// which the clocksource is called slow.
pub const CLOCK_SHARE: f64 = 0.05;
/// Share of a followed process's samples entering and leaving system calls from which it is
/// called syscall-bound.
pub const SYSCALL_SHARE: f64 = 0.25;
/// Share of a followed process's samples copying memory from which it is called copy-bound.
pub const COPY_SHARE: f64 = 0.20;
/// Share of a followed process's samples opening and closing connections from which it is
/// called connection-bound.
pub const CONNECTION_SHARE: f64 = 0.25;
/// A CPU this busy (1 - idle) has a profile worth reading.
pub const PROFILE_BUSY: f64 = 0.50;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    /// As the JSON and the runs store spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Info => "info",
            Self::Warning => "warning",
            Self::Critical => "critical",
        }
    }
}

/// One finding.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// Stable machine name, e.g. `softirq-concentrated` (one of [`RULES`]).
    pub name: &'static str,
    pub severity: Severity,
    /// One sentence.
    pub summary: String,
    /// Numbers from the samples.
    pub evidence: Vec<String>,
    /// What to change: a `qpslab tune` step or an option.
    pub remedy: String,
    /// What it found, typed, where a consumer acts on it (the climb, compare).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
}

/// A finding read back (a diagnosis made on another host), before its name is matched to the
/// catalogue's: names stay the [`RULES`]' own; a name this build does not know is refused.
#[derive(Deserialize)]
struct FindingText {
    name: String,
    severity: Severity,
    summary: String,
    evidence: Vec<String>,
    remedy: String,
    #[serde(default)]
    cause: Option<Cause>,
}

// By hand: a derived impl would borrow the `&'static str` name from the input.
impl<'de> Deserialize<'de> for Finding {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let f = FindingText::deserialize(d)?;
        let name = rule(&f.name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown finding {:?}", f.name)))?
            .name;
        Ok(Finding {
            name,
            severity: f.severity,
            summary: f.summary,
            evidence: f.evidence,
            remedy: f.remedy,
            cause: f.cause,
        })
    }
}

/// What else the caller knows about the run.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// What the load measured, when it ran in-process (`bench`); otherwise the packet rate
    /// stands in for "the rate" and there is no latency to explain it by.
    pub load: Option<LoadFacts>,
    /// Connect errors meaning no local port was free (EADDRNOTAVAIL), from the load.
    pub addr_not_available: u64,
    /// Whether a qpslab tune journal is active (hand pinning in force).
    pub journal_active: bool,
    /// Load generators that ran on other hosts (load agents, or the coordinator when the
    /// doctor runs on the server host), by their own account: the generator side of the
    /// verdict when no generator process runs here.
    pub generators: Vec<Generator>,
    /// The interfaces that carry the run's traffic (the route to the target), when the target
    /// is known: only they are judged. None: every interface that carried traffic is.
    pub path: Option<Vec<String>>,
    /// The server's configuration, when it is nginx and could be read (`nginx -T`).
    pub nginx: Option<qpslab_host::nginx::NginxConf>,
    /// What the server's error logs gained over the window (nginx's, found from its
    /// configuration), each with its messages.
    pub server_logs: Vec<qpslab_host::logs::LogWindow>,
    /// nginx's stub_status page at the window's start and end, where its configuration has
    /// one.
    pub stub_status: Option<qpslab_host::stub_status::Window>,
    /// The profile of the run, when one was taken: evidence for the rules that read it.
    pub profile: Option<qpslab_profile::Profile>,
    /// The ports the run's server listens on and those of what is behind it: connections to
    /// or from them are the run's, and the host-wide counters of losses (retransmissions,
    /// drops) are the run's only when its connections show them. Empty: not known, the
    /// counters are said as the host's and never as critical.
    pub ports: Vec<u16>,
}

/// A load generator on another host, as its report tells it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Generator {
    /// The host it ran on, as the user named it.
    pub host: String,
    /// Share of its threads' time spent working (the load report's `busy_ratio`).
    pub busy_ratio: f64,
    /// Its own verdict was `generator-bound`.
    pub bound: bool,
}

/// A rule as `qpslab doctor --rules` describes it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Rule {
    pub name: &'static str,
    /// What the finding means.
    pub catches: &'static str,
    /// When it fires, with the numbers.
    pub threshold: &'static str,
    pub remedy: &'static str,
}

/// What a finding says of its run as a measurement, when it says something: `disturbed`
/// (something outside the benchmark held the run back: other processes' CPU, when it explains
/// the rate; a target still busy with an earlier load's requests), or `behind-schedule` (an
/// open loop that did not send what was asked). A compare leaves disturbed runs out of its
/// verdict; sweep tables, the climb's rows and reports mark both. `severity` as stored
/// (`info`, `warning`, `critical`).
pub fn run_mark(name: &str, severity: &str) -> Option<&'static str> {
    match (name, severity) {
        ("cpu-contention" | "other-traffic", "warning" | "critical") | ("undrained-start", _) => {
            Some("disturbed")
        }
        ("behind-schedule", _) => Some("behind-schedule"),
        _ => None,
    }
}

/// The marks of a run's findings, given as (name, severity), each once.
pub fn run_marks<'a>(findings: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<&'static str> {
    let mut out = Vec::new();
    for m in findings.into_iter().filter_map(|(name, severity)| run_mark(name, severity)) {
        if !out.contains(&m) {
            out.push(m);
        }
    }
    out
}

/// Every finding the doctor can give.
/// The findings only a profile gives (`--profile`): a run without one cannot have them, so
/// comparing it with a profiled run says nothing of them.
pub const PROFILE_FINDINGS: [&str; 5] =
    ["lock-contention", "slow-clocksource", "syscall-bound", "copy-bound", "connection-bound"];

pub const RULES: &[Rule] = &[
    Rule {
        name: "no-responses",
        catches: "the load got no response in the window: there is no rate to explain",
        threshold: "0 responses in a run the doctor followed (bench); no other verdict is given",
        remedy: "check the target (URL, port, the server's log) and the load's errors",
    },
    Rule {
        name: "run-failed",
        catches: "most requests got an error or a bad status: the rate measures the failure, not the server",
        threshold: "failed and bad-status requests outnumber ok ones (bench); no bound is given",
        remedy: "fix the target or the URL (the load's errors and statuses say what went wrong); name expected statuses with --accept-status",
    },
    Rule {
        name: "run-too-short",
        catches: "the window is too short to tell what bounds the rate",
        threshold: "a window under 1 s or with fewer than 2 sampling intervals; no other verdict is given",
        remedy: "run for longer (-d), or sample more often (--interval)",
    },
    Rule {
        name: "server-bound",
        catches: "the server is saturated: its threads, its threads taking turns on one CPU (a global lock), its cgroup's CPU quota, or its CPUs full of other work (the headline says which); the rate is what it could get",
        threshold: "a server process at 85% or more of the CPUs its busy threads may use (or of its cgroup's CPU quota when smaller), or two busy threads or more using one CPU's worth (within 10%, every interval within 20%) with two CPUs or more to run on, or those CPUs at 85% busy or more; the generator not saturated",
        remedy: "by what held it: more server workers on idle CPUs; more processes, not threads, for a global lock; the CPU limit lifted or raised; the other work moved off its CPUs",
    },
    Rule {
        name: "cpu-throttled",
        catches: "a side was held back by its cgroup's CPU quota (a container's CPU limit): its threads waited for the next period instead of running, so the rate measures the quota",
        threshold: "the quota of its cgroup (or an ancestor's) ran out in 20% or more of the window's scheduling periods (cpu.stat nr_throttled over nr_periods; cgroup v1 and v2)",
        remedy: "lift or raise the CPU limit for the benchmark (resources.limits.cpu, docker --cpus, CPUQuota=, cpu.max or cpu.cfs_quota_us), or take the rate as what the limit allows",
    },
    Rule {
        name: "client-bound",
        catches: "the load generator is saturated (its threads, its cgroup's CPU quota, or its CPUs full of other work) while the server has headroom: the run measures the client",
        threshold: "a generator process saturated as above, the server not",
        remedy: "by what held it: more generator threads on free CPUs or more client machines; the CPU limit lifted; the other work moved off its CPUs",
    },
    Rule {
        name: "both-saturated",
        catches: "server and generator both use all the CPU they have",
        threshold: "both sides saturated as above",
        remedy: "more CPUs for each side, or the generator on another machine",
    },
    Rule {
        name: "shared-cpus",
        catches: "the server and the generator ran on the same CPUs, which were saturated: each took CPU from the other",
        threshold: "CPUs in both sides' sets at 85% busy or more on average",
        remedy: "pin the sides apart (bench does when it can; qpslab load --cpus, taskset)",
    },
    Rule {
        name: "cpu-saturated",
        catches: "a CPU that can run the server was saturated while neither side's processes were: the CPU went to other work",
        threshold: "a CPU the server may use (any CPU when the server is not known) at 85% busy or more, neither side saturated; a warning when tasks waited for a CPU 10% of the window or more (PSI) and the run's own threads' waits count (as for cpu-contention), else info",
        remedy: "find the other work on that CPU; pin the server, the generator and interrupt work apart; name the server (--server-pid, doctor --pid)",
    },
    Rule {
        name: "cpu-contention",
        catches: "other processes used the CPUs during the run (the busiest are named); a warning when it explains the rate, else info",
        threshold: "other processes' CPU time (counted per process, or what the watched processes and interrupt work leave) of 0.3 CPU or more and at least a fifth of all busy time; a warning when a side was held by CPUs full of it, or no side was saturated and tasks waited for a CPU 10% of the window or more (PSI) while the run's own threads' waits (schedstat), counted against every request in flight, come to 10% of the response time or more",
        remedy: "stop the other work or pin it away from the benchmark's CPUs",
    },
    Rule {
        name: "latency-bound",
        catches: "no resource is saturated: the rate is the requests in flight over their latency (Little's law), bound by round trips, not CPU",
        threshold: "a closed loop (bench), no side saturated and no CPU that tasks waited for; without the load's figures (doctor -- COMMAND), a packet rate varying under 10%",
        remedy: "more requests in flight (-c, --pipeline, --streams), or a shorter round trip",
    },
    Rule {
        name: "worker-imbalance",
        catches: "one of the server's workers did the work while the others idled: the rate is one worker's (too few connections for the workers, or an accept that hands them unevenly)",
        threshold: "a master's worker processes or a numbered pool of threads: the busiest at 85% of a CPU or more, the others' mean under 30% of it, and 0.3 CPUs idle where they may run",
        remedy: "more connections than workers; else spread them (SO_REUSEPORT, nginx `listen ... reuseport`)",
    },
    Rule {
        name: "tls-handshakes",
        catches: "an https run pays a full TLS handshake for many of its responses: a saturated side spends its CPU on key exchanges and signatures, or each response waits for one",
        threshold: "full handshakes at 0.2 per response or more in the window (bench over https); info: it explains the rate",
        remedy: "keep connections alive, or resume sessions (--tls-reuse; the server's session tickets or cache); an ECDSA certificate signs cheaper than RSA",
    },
    Rule {
        name: "memory-limit",
        catches: "a followed process's cgroup (a container's) holds it to a memory limit it hit: the kernel reclaims its page cache and memory within the cgroup whatever the host has free, and what it evicts is read again",
        threshold: "the limit hit in the window (v1 memory.failcnt, v2 memory.events max and high); a warning when the process read 1 MiB/s or more from storage or tasks waited for memory 1% of the window, critical on an OOM kill, else info; a disk wait of its reads is then said as its consequence",
        remedy: "a larger memory limit (docker --memory, Kubernetes resources.limits.memory, systemd MemoryMax=), or a working set that fits in it",
    },
    Rule {
        name: "no-keep-alive",
        catches: "the server closed the connection after most responses of a run that keeps connections alive: each request paid a TCP handshake and the server's accept, and the run measured a connection per request",
        threshold: "0.5 reconnects a response or more, not after errors (failed requests under half the reconnects), without --conn-per-request; the connections out of service it leaves are said as its consequence",
        remedy: "keep connections alive on the server (HTTP/1.1, no Connection: close, nginx keepalive_timeout above 0), or measure it on purpose with --conn-per-request",
    },
    Rule {
        name: "other-traffic",
        catches: "nginx served requests the run did not send: other clients shared the server, and the rate measured is the part they left (the run is marked disturbed)",
        threshold: "nginx's stub_status counted 50 requests/s or more beyond the run's responses, and 20% of its requests or more (not when nginx proxies to its own ports)",
        remedy: "measure a server that serves nothing else (out of rotation), or read the result as the run's share of a busy server",
    },
    Rule {
        name: "behind-schedule",
        catches: "an open loop fell behind its schedule: the rate is what the target (or too few connections), or the generator, allowed, not what was asked",
        threshold: "an open-loop run (-R) that sent under 98% of the requests due in its window",
        remedy: "when every connection was busy: more connections (-c) or a lower rate, or the target's own bound (closed loop finds it); when connections were free: more generator threads or machines",
    },
    Rule {
        name: "undrained-start",
        catches: "the target was still answering an earlier load's requests when the run began: the run measured that backlog too (bench, before its run)",
        threshold: "no probe answered in the target's normal time within --drain before the run",
        remedy: "wait for the target to drain (a longer --drain), or find what keeps it busy",
    },
    Rule {
        name: "paced",
        catches: "an open loop's schedule set the rate and no resource was saturated: the target kept up",
        threshold: "an open-loop run (-R) with no side saturated and no CPU that tasks waited for",
        remedy: "raise the rate (-R) to find where the target stops keeping up, or run closed loop",
    },
    Rule {
        name: "no-single-bottleneck",
        catches: "neither side is saturated and the rate was not steady",
        threshold: "without the load's figures (doctor -- COMMAND): no side and no CPU saturated; packet rate varying 10% or more",
        remedy: "run longer, or look at the per-interval rows for stalls",
    },
    Rule {
        name: "stalls",
        catches: "the server stopped as a whole: stretches with no response on any connection while requests waited (a garbage collection, a blocking call in an event loop, a lock, a fork, a synchronous write, a CPU quota's periods); closed-loop percentiles hide them",
        threshold: "stretches of 10 ms and 4x the median latency or longer, holding two requests or more, seen by every load thread, the generator not saturated: 2% of the window (info), a warning from 10%; the headline (latency-bound) from 10% when nothing is saturated and no quota held a side",
        remedy: "find what stops the server (its logs, doctor --profile); an open-loop run (-R) shows what the stops cost",
    },
    Rule {
        name: "connections-out-of-service",
        catches: "fewer requests were being answered than the load kept in flight (Little's law): connections waited for answers that did not come, or reconnected",
        threshold: "a closed loop whose rate x mean latency is under 75% of connections x streams, or with connections that got no response in the window, the generator not saturated; critical under 50%",
        remedy: "check the server's connection and descriptor limits, its accept queue, and whether it closes connections (keepalive_requests)",
    },
    Rule {
        name: "link-saturated",
        catches: "an interface carried what it can (its link speed, or the rate a shaping qdisc allows): the rate measures the network, not the server",
        threshold: "an interface's bytes/s at 85% or more of its link speed (sysfs), or a shaping qdisc's (tbf) at 85% or more of its configured rate",
        remedy: "a faster link or more links (bonding, more NICs or ENIs), smaller responses, or a higher shaping rate; more CPUs or RPS do not help",
    },
    Rule {
        name: "interface-drops",
        catches: "an interface that carried the run dropped packets: in its qdisc, its own counters, or its driver's",
        threshold: "any drop on an interface at 1000 packets/s or more (qdisc drops, /proc/net/dev drops, driver drop/miss/discard counters); critical from 1/s",
        remedy: "find where: the shaper's queue, the interface's ring (ethtool -G), the driver's buffers",
    },
    Rule {
        name: "nic-limit",
        catches: "the NIC's own limits were hit (a cloud NIC's bandwidth, packet or connection allowance, e.g. ENA's bw_out_allowance_exceeded)",
        threshold: "a driver `*_allowance_exceeded` counter moved in the window, on an interface at 1000 packets/s or more",
        remedy: "a larger instance or more network interfaces with the load spread over them; no host setting lifts it",
    },
    Rule {
        name: "nginx-config",
        catches: "the server is nginx and its configuration has per-request costs this run shows: an unbuffered access log, keepalive_requests behind the run's reconnects, idle CPUs with few workers, accept_mutex, open_file_cache off where it serves files",
        threshold: "the server process is nginx and `nginx -T` could be read; each cost only when it applies (reconnects at 0.1% of the rate or more explained by keepalive_requests; a CPU 25% idle); always info, below the bound (saying when nginx's CPU is the bound they spend)",
        remedy: "the directives named: access_log off or buffered, keepalive_requests higher, worker_processes and worker_cpu_affinity, accept_mutex off, open_file_cache",
    },
    Rule {
        name: "softirq-concentrated",
        catches: "receive processing is concentrated on one CPU while others idle",
        threshold: "one CPU's softirq share at 80% or more while another CPU is at least 25% idle",
        remedy: "one IRQ per queue on its own CPU and RPS over the node's other CPUs (qpslab tune plan)",
    },
    Rule {
        name: "single-rx-queue",
        catches: "an interface with one rx queue and RPS off: one CPU does all its receive work",
        threshold: "the interface carried 1000 packets/s or more in the window; a warning only when a CPU its interrupts land on was 85% busy or more, else info",
        remedy: "RPS on the node's other CPUs (qpslab tune plan), or more queues (ethtool -L)",
    },
    Rule {
        name: "irqs-on-one-cpu",
        catches: "every rx queue interrupt of an interface lands on one CPU and RPS is off",
        threshold: "the interface carried 1000 packets/s or more in the window; a warning only when that CPU was 85% busy or more, else info",
        remedy: "pin each queue's IRQ to its own CPU (qpslab tune plan)",
    },
    Rule {
        name: "irqbalance-vs-pinning",
        catches: "irqbalance rewrites IRQ affinities that were set by hand",
        threshold: "irqbalance running and an IRQ's affinity changed in the window, or a qpslab tune journal active",
        remedy: "qpslab tune apply --stop-irqbalance, or ban the NIC IRQs in irqbalance's config",
    },
    Rule {
        name: "accept-queue-overflow",
        catches: "listen queues overflowed: connection attempts were dropped before the server accepted them",
        threshold: "any ListenOverflows or ListenDrops (each is a dropped attempt the client retries after 1 s or more) while a listener of the server was seen at its backlog and the load opened connections in its window; critical from 1/s",
        remedy: "raise net.core.somaxconn and the server's backlog; accept faster (more workers, reuseport)",
    },
    Rule {
        name: "host-listen-overflows",
        catches: "listen queues on this host overflowed during the run, but none of the run's: another program's listener, or one the run did not reach (the counters are host-wide)",
        threshold: "ListenOverflows or ListenDrops moved while no listener of the server was seen at its backlog, or while the load opened no connection in its window; always info",
        remedy: "none for this run; name the server (--server-pid) if it was not followed, or look at the host's other listeners (ss -ltn)",
    },
    Rule {
        name: "syn-queue-full",
        catches: "the SYN queue filled: SYN cookies were sent or SYNs dropped",
        threshold: "1 SYN cookie/s or more, or any SYN dropped for a full queue (critical); info when the load opened no connection in its window (the counters are host-wide)",
        remedy: "raise net.ipv4.tcp_max_syn_backlog and net.core.somaxconn with the listen backlog",
    },
    Rule {
        name: "socket-backlog-drop",
        catches: "packets dropped because a socket's backlog was full while its owner held it",
        threshold: "any TCPBacklogDrop (each is a dropped packet); critical from 1/s when the run's own connections dropped packets, info when they (all kept open) dropped none, at most a warning when that is not known",
        remedy: "more workers, or workers pinned away from interrupt CPUs",
    },
    Rule {
        name: "udp-buffer-drops",
        catches: "UDP datagrams dropped for a full socket buffer, receiving or sending: what HTTP/3 (QUIC) loses in the host",
        threshold: "any Udp RcvbufErrors or SndbufErrors (IPv4 and IPv6); critical from 1/s when the followed processes' own sockets dropped datagrams (/proc/PID/net/udp), info when they dropped none or the run spoke TCP (the counters are host-wide), at most a warning when that is not known",
        remedy: "read faster (workers, batched reads, GRO) or raise net.core.rmem_max / wmem_max and the socket's buffers",
    },
    Rule {
        name: "retransmissions",
        catches: "TCP segments were retransmitted: closed-loop load stalls on each",
        threshold: "1% or more of the segments sent, and 10/s or more; info when the run's own connections (all kept open) retransmitted none, or when a saturated link explains them",
        remedy: "look for drops on the path (softnet, NIC, the peer's queues)",
    },
    Rule {
        name: "softnet-backlog-drops",
        catches: "packets dropped because a CPU's input backlog was full",
        threshold: "any softnet drop (each is a lost packet); critical from 1/s when the run's own connections retransmitted, info when they (all kept open) retransmitted none, at most a warning when that is not known",
        remedy: "raise net.core.netdev_max_backlog and spread RPS over more CPUs",
    },
    Rule {
        name: "softnet-time-squeeze",
        catches: "receive processing ran out of budget with packets left (they wait for the next round)",
        threshold: "10 time squeezes/s or more over the window",
        remedy: "raise net.core.netdev_budget, or spread the receive work over more CPUs",
    },
    Rule {
        name: "fd-limit-close",
        catches: "a watched process is close to its descriptor limit",
        threshold: "80% or more of its soft RLIMIT_NOFILE open at the peak (critical from 95%); critical for the fullest server process when the server's log says it ran out",
        remedy: "raise RLIMIT_NOFILE (ulimit -n, LimitNOFILE=, worker_rlimit_nofile) and fs.nr_open",
    },
    Rule {
        name: "file-max-close",
        catches: "the system-wide file handle limit is close",
        threshold: "80% or more of fs.file-max allocated",
        remedy: "raise fs.file-max (qpslab tune plan)",
    },
    Rule {
        name: "ephemeral-ports",
        catches: "the client is running out of ephemeral ports to one destination (the budget is per destination address and port; closed connections hold theirs 60 s in TIME_WAIT)",
        threshold: "sockets from ephemeral ports to one destination (open, and in TIME_WAIT unless tcp_tw_reuse lets it be reused) at 50% or more of ip_local_port_range, with connections to it closed in the window; or connects failing with EADDRNOTAVAIL (critical)",
        remedy: "keep connections alive, add source addresses (load --source), widen the port range and set tcp_tw_reuse = 1 (tune plan --role client)",
    },
    Rule {
        name: "lock-contention",
        catches: "CPU time spinning on a lock while waking a socket's waiters (`_raw_spin_unlock_irqrestore` under `__wake_up_sync_key` <- `sock_def_readable`): many threads wait on one socket, or all receive work lands on one CPU",
        threshold: "with --profile: 10% or more of a CPU's samples (a CPU at least 50% busy) in a spinlock under a socket wake-up",
        remedy: "what fits the run: RPS for an interface on its path that carries the traffic (never loopback, whose receive work runs in the sender's context), SO_REUSEPORT for a server with several workers, else fewer wake-ups per request",
    },
    Rule {
        name: "slow-clocksource",
        catches: "time reads are expensive: the clocksource is not tsc and clock reads show in the profile",
        threshold: "with --profile: a clocksource other than tsc, and 5% or more of a busy CPU's samples reading the clock",
        remedy: "switch the clocksource to tsc where it is stable (`qpslab tune plan` proposes it when tsc is available)",
    },
    Rule {
        name: "rate-limited",
        catches: "a limit set the ok rate: the requests over it were answered with a limit status (503, 429; a gRPC run's calls with grpc-status RESOURCE_EXHAUSTED or UNAVAILABLE) at once; not a failed run, and the ok rate is the limit's, not the server's capacity",
        threshold: "some responses ok, 10% or more of the answers 503 or 429 (gRPC: RESOURCE_EXHAUSTED or UNAVAILABLE), under 10% failed outright (transport, timeout); named with nginx's limit_req_zone and its log lines when it is nginx; when most answers were the limit's, no bound is given",
        remedy: "lift the limit for the benchmark, or measure below it (an open loop at 90% of the ok rate); --accept-status counts an HTTP limit's answers as served",
    },
    Rule {
        name: "server-connection-limit",
        catches: "the server holds fewer connections than the run needed (nginx's worker_connections x its workers): the others wait in the listen queue or are closed",
        threshold: "the load's connections (twice them when nginx proxies) over nginx's worker_connections x worker_processes, or its error log saying worker_connections are not enough; a failed run names it in its headline instead; critical: the run measures the limit",
        remedy: "raise nginx's worker_connections (and worker_rlimit_nofile to twice it), or fewer connections",
    },
    Rule {
        name: "server-log",
        catches: "the server's own error log said something at warn or worse in the window: its most frequent messages with their counts, and what a known one means (out of worker connections, out of descriptors, a rate or connection limit, an upstream that failed)",
        threshold: "lines at warn or worse appended to nginx's error logs (found from its configuration) during the window; a warning at error or worse, info when only warnings or when the headline already names it",
        remedy: "by message: the known ones have a concrete remedy; the others are the server's own words on what went wrong",
    },
    Rule {
        name: "disk-wait",
        catches: "the server waits on the disk: its requests spend a share of their time at a block device (an fsync or a synchronous write per request) while its CPU idles",
        threshold: "the server moved bytes to or from storage (/proc/PID/io), at least 20% of a device's, and that device's mean queue (/proc/diskstats) is 20% or more of the requests in service (Little's law: the share of each response's time at the disk); or 20% of 12 or more of the server's thread readings in D; flushes against responses and PSI io as evidence",
        remedy: "no fsync per request (group commit, an asynchronous or buffered log), scratch files on tmpfs, or a faster disk",
    },
    Rule {
        name: "delayed-ack",
        catches: "a side writes each response (or request) in pieces with Nagle on: the second piece waits for the peer's delayed ACK, so every exchange takes about the delayed-ACK timer (40 ms on Linux) while nothing is busy",
        threshold: "20% or more of a side's connection readings (sock_diag tcp_info at each sample) hold less than a segment written and unsent with a segment unacknowledged and both windows open, and the mean latency at least half the peer's delayed-ACK timeout",
        remedy: "TCP_NODELAY on that side's sockets, or each message written in one call (writev)",
    },
    Rule {
        name: "tcp-waits",
        catches: "TCP's account of the run's connections: writes held for the peer's receive window or for the congestion window",
        threshold: "20% or more of a side's connection readings (sock_diag at each sample of the window but its start and stop, at least 4) in that state; info",
        remedy: "by state: the peer's reading and its receive buffer; loss or the path for the congestion window",
    },
    Rule {
        name: "kernel-timer",
        catches: "a share of the responses (or connects) waited for one of TCP's timers: the minimum retransmission timeout (200 ms, a lost segment only the timer recovered) or the SYN retransmission timeout (1 s, a dropped connection attempt)",
        threshold: "a quantile from p99.9 down at 0.9-1.6 times the timer with the median under a quarter of it, and the mechanism in the window's counters (retransmissions or timeouts; for connects, SYNs sent again or attempts a listener dropped); a warning when the timer is 10% or more of the mean time",
        remedy: "find the loss or the dropped SYNs (the retransmissions, drops and queue findings); a lower rto_min on the server's routes where loss cannot be helped",
    },
    Rule {
        name: "cpu-steal",
        catches: "the hypervisor gave this host's CPUs to other guests while its tasks were runnable: the run had less CPU than it saw",
        threshold: "/proc/stat steal at 2% of the CPUs' time over the window (info), a warning from 20% when a side was short of CPU",
        remedy: "a host or instance whose CPUs are not shared, or measure when the neighbours are quiet",
    },
    Rule {
        name: "memory-pressure",
        catches: "the host is short of memory: tasks waited for reclaim or for pages read back from storage",
        threshold: "PSI memory some at 1% of the window (info), a warning from 10%; without PSI, allocation stalls with 100 major faults/s or more",
        remedy: "less memory in use on the host, or more memory",
    },
    Rule {
        name: "time-wait-overflow",
        catches: "the TIME_WAIT table was full: closed connections skipped TIME_WAIT, so a late segment can reach a new connection on the same ports",
        threshold: "any TcpExt TCPTimeWaitOverflow in the window; a warning when the run opened connections in it, else info",
        remedy: "keep connections alive, or raise net.ipv4.tcp_max_tw_buckets",
    },
    Rule {
        name: "tcp-memory-pressure",
        catches: "TCP's socket buffers reached net.ipv4.tcp_mem's pressure mark: the kernel shrank every socket's buffers, or dropped connections",
        threshold: "TcpExt TCPMemoryPressures or TCPAbortOnMemory moved, or sockstat's mem at tcp_mem's pressure mark; critical when connections were dropped",
        remedy: "smaller buffers per connection, fewer connections, or a larger net.ipv4.tcp_mem",
    },
    Rule {
        name: "conntrack-full",
        catches: "netfilter's connection tracking table refused new entries (their packets dropped, SYNs retried after 1 s) or stood near its size",
        threshold: "drop, early_drop or insert_failed moved in /proc/net/stat/nf_conntrack (critical), or the entries at 90% of nf_conntrack_max",
        remedy: "raise net.netfilter.nf_conntrack_max, or take the benchmark's port out of tracking",
    },
    Rule {
        name: "syscall-bound",
        catches: "a side spends its CPU entering and leaving the kernel: many small reads and writes per request",
        threshold: "with --profile: 25% or more of a followed process's samples in system call entry and exit",
        remedy: "by side: the generator pipelines or uses io_uring; the server keeps connections alive, buffers its log, or uses an io_uring engine where it has one",
    },
    Rule {
        name: "copy-bound",
        catches: "a side spends its CPU copying memory between the kernel and user space: large bodies",
        threshold: "with --profile: 20% or more of a followed process's samples copying memory",
        remedy: "copy less: sendfile or splice for static bodies, MSG_ZEROCOPY, smaller responses, or more CPUs for that side",
    },
    Rule {
        name: "connection-bound",
        catches: "a side spends its CPU opening and closing connections: socket setup, accept, close, and a connect's search for a source port among the TIME_WAIT sockets the side that closes first holds",
        threshold: "with --profile: 25% or more of a followed process's samples in connection setup and teardown; the generator's connects searched when 10% of its samples are the port search (`__inet_hash_connect`, `__inet_check_established`, `tcp_twsk_unique`) and connections it closed in the window hold ephemeral ports in TIME_WAIT",
        remedy: "keep connections alive; a generator whose connects searched the port range binds ports outside the ephemeral range (--source ADDR:LO-HI), closes with a reset (--rst-close) or spreads its connects over more source addresses (--source); the server spreads accepts (SO_REUSEPORT) and resumes TLS sessions",
    },
];

impl Context {
    /// Whether interface `name` is on the run's path (every interface is, when it is not
    /// known; those of the followed processes' own namespaces are, their side of the path).
    pub fn on_path(&self, name: &str) -> bool {
        name.ends_with(qpslab_host::links::SERVER_NS)
            || name.ends_with(qpslab_host::links::GENERATOR_NS)
            || self.path.as_ref().is_none_or(|p| p.iter().any(|i| i == name))
    }
}

/// The rule called `name`.
pub fn rule(name: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.name == name)
}

/// Explains the rate and applies every rule.
pub fn diagnose(
    host: &Host,
    samples: &[Sample],
    summary: &Summary,
    ctx: &Context,
) -> (Vec<Finding>, Explanation) {
    let explanation = explain::explain(host, summary, ctx);
    let mut out = Vec::new();
    // The verdict first (a quota that held a side back before it): among findings of equal
    // severity it is the headline.
    verdict::bound(summary, ctx, &explanation, &mut out);
    balance::imbalance(summary, ctx, &mut out);
    handshakes::tls_handshakes(ctx, &mut out);
    rules::softirq_concentrated(summary, ctx, &mut out);
    profiled::rules(host, summary, ctx, &mut out);
    rules::nic_layout(host, summary, ctx, &mut out);
    network::drops(summary, ctx, &explanation, &mut out);
    server::nginx(summary, ctx, &explanation, &mut out);
    server_log::finding(ctx, summary.cpus.len(), &mut out);
    stub::other_traffic(ctx, &mut out);
    keepalive::closes_each(ctx, &mut out);
    kernel::memory_limit(summary, &mut out);
    disk::disk_wait(summary, ctx, &explanation, &mut out);
    tcp::delayed_ack(samples, ctx, &mut out);
    tcp::waits(samples, ctx, &mut out);
    tcp::application_limited(samples, ctx, &mut out);
    rules::irqbalance(host, samples, ctx, &mut out);
    let losses = losses::run_losses(samples, ctx);
    rules::tcp_queues(host, summary, ctx, &explanation, losses.as_ref(), &mut out);
    rules::udp_buffers(summary, ctx, &mut out);
    rules::softnet(host, summary, losses.as_ref(), &mut out);
    rules::descriptors(samples, summary, server_log::out_of_descriptors(ctx).as_deref(), &mut out);
    rules::ports(host, summary, ctx, &mut out);
    kernel::limits(host, summary, ctx, &mut out);
    timers::kernel_timers(summary, ctx, &explanation, &mut out);
    consequences(ctx, &mut out);
    debug_assert!(
        out.iter().all(|f| f.cause.is_some()),
        "a finding without a typed cause: {:?}",
        out.iter().filter(|f| f.cause.is_none()).map(|f| f.name).collect::<Vec<_>>()
    );
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    headline_by_time(&mut out);
    (out, explanation)
}

/// The share of each response's time a cause accounts for, where it says one.
fn time_share(c: &Cause) -> Option<f64> {
    match c {
        Cause::DiskWait { share, .. } => Some(*share),
        Cause::Contention { share } => *share,
        Cause::DelayedAck { timer_ms, latency_ms, .. } if *latency_ms > 0.0 => {
            Some((timer_ms / latency_ms).min(1.0))
        }
        _ => None,
    }
}

/// Two findings of the headline's severity that each account for a share of the response
/// time: the larger share heads (a server at its disk 60% of each response, beside a hog that
/// cost its threads 12% of it in CPU waits, is the disk's).
fn headline_by_time(out: &mut [Finding]) {
    let Some(head) = out.first().and_then(|f| time_share(f.cause.as_ref()?)) else { return };
    let top = out[0].severity;
    let larger = out
        .iter()
        .enumerate()
        .take_while(|(_, f)| f.severity == top)
        .filter_map(|(i, f)| Some((i, time_share(f.cause.as_ref()?)?)))
        .filter(|(_, s)| *s > head)
        .max_by(|a, b| a.1.total_cmp(&b.1));
    if let Some((i, _)) = larger {
        out[..=i].rotate_right(1);
    }
}

/// The host settings a finding of the kernel's queues and ports asks for, at the values of
/// tune's one table.
pub(crate) fn host_settings(name: &str) -> Option<Cause> {
    let (names, client_side): (&[&str], bool) = match name {
        "accept-queue-overflow" => (&["net.core.somaxconn"], false),
        // somaxconn caps the listen backlog, and the SYN queue with it: the first to raise.
        "syn-queue-full" => (&["net.core.somaxconn", "net.ipv4.tcp_max_syn_backlog"], false),
        "ephemeral-ports" => (&["net.ipv4.tcp_tw_reuse", "net.ipv4.ip_local_port_range"], true),
        "softnet-backlog-drops" => (&["net.core.netdev_max_backlog"], false),
        "softnet-time-squeeze" => (&["net.core.netdev_budget"], false),
        "time-wait-overflow" => (&["net.ipv4.tcp_max_tw_buckets"], false),
        "conntrack-full" => (&["net.netfilter.nf_conntrack_max"], false),
        _ => return None,
    };
    let settings = names
        .iter()
        .filter_map(|n| Some((n.to_string(), qpslab_tune::remedy::sysctl(n)?)))
        .collect();
    Some(Cause::HostSettings { settings, client_side })
}

/// A connection limit of the server's makes the queue findings its consequence: nginx out of
/// worker connections leaves the rest in its accept queue (which overflows, and SYNs wait) or
/// closes idle ones, so connections are out of service; raising somaxconn would not help.
fn consequences(ctx: &Context, out: &mut [Finding]) {
    keep_alive_consequences(ctx, out);
    let Some(limit) = out
        .iter()
        .find(|f| matches!(f.cause, Some(Cause::WorkerConnections { .. })))
        .and_then(|f| f.cause.clone())
    else {
        return;
    };
    // The listen queue it left full, and the connects that waited for their SYN to be sent
    // again after it dropped them; with the accept queue overflowing, also the requests sent
    // on connections the server had dropped at the handshake's last step (the client thinks
    // them open, so its data waits for the retransmission timer).
    // The kernel's listen counters moved: said as the server's when a sample saw its
    // listener full, as the host's when none did (a short overflow falls between samples).
    let overflowed =
        out.iter().any(|f| matches!(f.name, "accept-queue-overflow" | "host-listen-overflows"));
    let queues = |f: &&mut Finding| {
        matches!(f.name, "accept-queue-overflow" | "syn-queue-full" | "connections-out-of-service")
            || matches!(&f.cause, Some(Cause::KernelTimer { timer, .. })
                if timer.starts_with("SYN") || overflowed)
    };
    for f in out.iter_mut().filter(queues) {
        f.severity = Severity::Info;
        f.summary = format!("a consequence, not a cause: {}", f.summary);
        f.evidence.push("nginx had no worker connection left for the others: they waited in its listen queue, or it closed idle ones to make room".into());
        f.remedy = "none of its own: nginx's worker_connections (the headline)".into();
        f.cause = Some(limit.clone());
    }
}

/// Connections out of service while the server closed them after each response: the
/// reconnecting is the no-keep-alive's doing (unless some never got an answer).
fn keep_alive_consequences(ctx: &Context, out: &mut [Finding]) {
    if ctx.load.as_ref().is_some_and(|l| l.unanswered > 0) {
        return;
    }
    let Some(c) = out
        .iter()
        .find(|f| matches!(f.cause, Some(Cause::KeepAliveOff { .. })))
        .and_then(|f| f.cause.clone())
    else {
        return;
    };
    for f in out.iter_mut().filter(|f| f.name == "connections-out-of-service") {
        f.severity = Severity::Info;
        f.summary = format!("a consequence, not a cause: {}", f.summary);
        f.remedy = "none of its own: the server's keep-alive (no-keep-alive)".into();
        f.cause = Some(c.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nginx out of worker connections: a retransmission-timer tail is its consequence when
    /// the listen counters moved, whether or not a sample caught the listener full (the
    /// overflow then said as the host's); without any overflow it stands as found.
    #[test]
    fn a_timer_tail_under_a_worker_connection_limit_is_its_consequence() {
        let finding = |name, severity, cause| Finding {
            name,
            severity,
            summary: String::new(),
            evidence: Vec::new(),
            remedy: String::new(),
            cause,
        };
        let timer = || Cause::KernelTimer {
            timer: "retransmission timeout".into(),
            ms: 200.0,
            share: 0.01,
        };
        let limit = Cause::WorkerConnections { limit: 256, wanted: 1000 };
        for (overflow, demoted) in [(Some("host-listen-overflows"), true), (None, false)] {
            let mut out = vec![
                finding("server-connection-limit", Severity::Critical, Some(limit.clone())),
                finding("kernel-timer", Severity::Warning, Some(timer())),
            ];
            out.extend(overflow.map(|n| finding(n, Severity::Info, None)));
            consequences(&Context::default(), &mut out);
            assert_eq!(out[1].severity == Severity::Info, demoted, "{overflow:?}: {:?}", out[1]);
        }
    }

    /// The list of profile-only findings is the catalog's rules that need a profile.
    #[test]
    fn the_profile_findings_are_the_rules_that_need_a_profile() {
        let need: Vec<&str> = RULES
            .iter()
            .filter(|r| r.threshold.starts_with("with --profile"))
            .map(|r| r.name)
            .collect();
        assert_eq!(need, PROFILE_FINDINGS);
    }

    #[test]
    fn rule_names_are_unique_and_explained() {
        let mut names: Vec<&str> = RULES.iter().map(|r| r.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), RULES.len());
        assert!(RULES.iter().all(|r| !r.threshold.is_empty() && !r.remedy.is_empty()));
        assert!(rule("latency-bound").is_some() && rule("nonsense").is_none());
    }

    /// The user documentation lists every rule as the code has it.
    #[test]
    fn the_docs_list_every_rule_with_its_threshold() {
        let doc = include_str!("../../../docs/doctor.md");
        for r in RULES {
            let row = format!("| `{}` | {} | {} | {} |", r.name, r.catches, r.threshold, r.remedy);
            assert!(doc.contains(&row), "docs/doctor.md lacks or differs on: {row}");
        }
    }

    fn with(name: &'static str, severity: Severity, cause: Cause) -> Finding {
        Finding {
            name,
            severity,
            summary: String::new(),
            evidence: Vec::new(),
            remedy: String::new(),
            cause: Some(cause),
        }
    }

    /// Of two warnings that each account for a share of the response time, the larger heads;
    /// a headline with no such share keeps its place.
    #[test]
    fn the_larger_share_of_the_response_time_heads() {
        let contention =
            |x| with("cpu-contention", Severity::Warning, Cause::Contention { share: Some(x) });
        let disk =
            |x| with("disk-wait", Severity::Warning, Cause::DiskWait { share: x, device: None });
        let log = with("server-log", Severity::Info, Cause::Undrained);
        let order = |mut v: Vec<Finding>| {
            headline_by_time(&mut v);
            v.iter().map(|f| f.name).collect::<Vec<_>>()
        };
        assert_eq!(
            order(vec![contention(0.12), disk(0.6), log.clone()]),
            ["disk-wait", "cpu-contention", "server-log"]
        );
        assert_eq!(order(vec![contention(0.7), disk(0.2)]), ["cpu-contention", "disk-wait"]);
        let imbalance = with(
            "worker-imbalance",
            Severity::Warning,
            Cause::WorkerImbalance { workers: 2, busiest: 1.0, others: 0.0, connections: 1 },
        );
        assert_eq!(order(vec![imbalance, disk(0.6)]), ["worker-imbalance", "disk-wait"]);
        // A share in a finding of lower severity does not head.
        let info = with("disk-wait", Severity::Info, Cause::DiskWait { share: 0.9, device: None });
        assert_eq!(order(vec![contention(0.1), info]), ["cpu-contention", "disk-wait"]);
    }
}
