//! The result of a run as users and scripts see it: the typed JSON contract of the design brief
//! (`qpslab load --json`), the human summary, and the pass/fail check behind the exit code.
//!
//! Does not measure anything: it only arranges a [`RunResult`].

use std::collections::BTreeMap;
use std::fmt::Write as _;

use base64::Engine as _;
use hdrhistogram::serialization::{Serializer as _, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::config::LoadConfig;
use crate::source::{PortBudget, SourceRange};
use crate::stats::ErrorClass;
use crate::RunResult;

mod pool;
pub use crate::units::fmt_us;
pub use pool::{PoolGroup, PoolReport};
mod text;

/// Busy share of the generator's threads at or above which the generator, not the target, may
/// have set the rate.
pub const GENERATOR_BOUND_RATIO: f64 = 0.9;
/// A measured window shorter than this is too short to say whether the generator set the rate
/// (its threads' start and stop weigh too much).
pub const MIN_JUDGED_S: f64 = 0.2;

/// Provenance the caller supplies (so rendering stays deterministic in tests).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunMeta {
    pub version: String,
    pub command: Vec<String>,
    pub host: HostInfo,
}

/// Where the generator ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HostInfo {
    pub kernel: String,
    pub cpu_model: String,
    pub online_cpus: usize,
}

/// One row per second of measurement.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct IntervalRow {
    /// End of the interval, in seconds since the start of measurement.
    pub t_s: f64,
    pub completed: u64,
    pub failed: u64,
    /// Responses per second within the interval.
    pub rps: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub version: String,
    pub command: Vec<String>,
    pub started_at: String,
    pub host: HostInfo,
    pub duration_s: f64,
    pub targets: Vec<String>,
    pub config: ConfigReport,
    pub requests: Requests,
    pub retries: Retries,
    pub status: BTreeMap<String, u64>,
    pub errors: BTreeMap<&'static str, u64>,
    pub error_examples: BTreeMap<&'static str, String>,
    pub throughput_rps: f64,
    pub bytes: Bytes,
    pub connections: Connections,
    /// HTTP/3 (`--h3`): streams, and what QUIC and UDP did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub h3: Option<H3Report>,
    /// HTTP/2 (`--h2`): streams, header compression, what the server announced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub h2: Option<H2Report>,
    /// gRPC (`--grpc`): the calls by status code, and what was found wrong with responses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc: Option<GrpcReport>,
    /// Keep-alive runs: the connections opened before the measured window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setup: Option<SetupReport>,
    /// From each request's intended send time: its schedule slot in open loop (corrected for
    /// coordinated omission), the write in closed loop.
    pub latency_us: Latency,
    /// Open loop only: from the actual write; a stall hides here and shows in `latency_us`.
    /// Stretches with no response on any connection while requests waited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stalls: Option<StallReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_uncorrected_us: Option<Latency>,
    /// Open loop only: actual write minus intended send time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_lag_us: Option<Latency>,
    /// Open loop only: the schedule and how well it was kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateReport>,
    /// The latency histogram, HdrHistogram V2 compressed and base64-encoded.
    pub latency_hdr: String,
    /// Requests by target, in the order given (command-line URLs, then `--targets` lines;
    /// the `--urls` pool's lines are in `pool`, by group).
    pub per_target: Vec<TargetReport>,
    /// The `--urls` pool: what it was and its requests by group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<pool::PoolReport>,
    /// Source tuples against the run's needs, for the tightest destination.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port_budget: Option<PortBudget>,
    pub generator: Generator,
    pub check: Check,
    /// `--threshold`: each check on the finished run and its outcome.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub thresholds: Vec<crate::threshold::Outcome>,
    /// Per-second rows beside the summary.
    pub intervals: Vec<IntervalRow>,
    /// Stopped by SIGINT before the configured duration or request count.
    pub stopped_early: bool,
    /// A load over agents (`--agents`): one row per agent; the figures above are their sum.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<AgentRow>>,
    /// A load over agents that did not all finish: the totals are of those that did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partial: Option<bool>,
    /// A load over agents: how closely they started together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<StartSync>,
    /// A load over agents: what the coordinator cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coordinator: Option<CoordinatorCost>,
}

/// A gRPC run's calls by how they ended.
#[derive(Debug, Clone, Serialize)]
pub struct GrpcReport {
    /// The method called, `/SERVICE/METHOD`.
    pub method: String,
    /// Calls answered (= `requests.completed`); `requests.ok` is those with status OK.
    pub calls: u64,
    /// Calls by status code name (`OK`, `UNAVAILABLE`, ...; a code past 16 by its number):
    /// the server's `grpc-status`, or for a response found wrong the code a gRPC client
    /// reports for it (see `faults`).
    pub status: BTreeMap<String, u64>,
    /// Responses found wrong, by kind: no-status (no grpc-status: no trailers), http-status
    /// (none, and HTTP status not 200), bad-status, status-twice (in headers and trailers),
    /// compressed (flag set, no compression agreed), bad-flag, too-large (over
    /// `--max-message-size`), truncated, message-count (OK with other than one message).
    pub faults: BTreeMap<&'static str, u64>,
    /// The first one found, described.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault_example: Option<String>,
    /// `--max-message-size`.
    pub max_message_size: u32,
    /// `--check-response`: the first OK answer against the expected message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check_response: Option<ResponseCheckReport>,
    /// Streaming calls: their messages apart from the calls (whose latency, in `latency_us`,
    /// is each stream's lifetime).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub streams: Option<GrpcStreams>,
}

/// A streaming gRPC run's messages.
#[derive(Debug, Clone, Serialize)]
pub struct GrpcStreams {
    /// Request messages each call sends (`--stream-messages`).
    pub request_messages_per_call: u32,
    /// Request messages of the calls answered, and per second.
    pub request_messages: u64,
    pub request_messages_per_s: f64,
    /// Response messages of the calls answered, per call, and per second.
    pub response_messages: u64,
    pub response_messages_per_call: f64,
    pub response_messages_per_s: f64,
    /// From the request to a call's first response message, and from each to the next.
    pub message_gap_us: Latency,
}

/// The first OK answer against `--check-response`'s message.
#[derive(Debug, Clone, Serialize)]
pub struct ResponseCheckReport {
    /// The file of the expected message, as given.
    pub file: String,
    pub passed: bool,
    /// The answer as JSON (protobuf's JSON mapping), or why it did not decode; None when no
    /// call was answered OK.
    pub got: Option<String>,
}

impl ResponseCheckReport {
    /// Why the run fails, if it does: `the first OK answer is not FILE's message: got JSON`.
    pub fn failure(&self) -> Option<String> {
        match (&self.got, self.passed) {
            (_, true) => None,
            (None, _) => Some(format!("--check-response {}: no call was answered OK", self.file)),
            (Some(got), false) => Some(format!(
                "--check-response: the first OK answer is not {}'s message: got {got}",
                self.file
            )),
        }
    }
}

/// A gRPC run that answered no call.
static NO_CALLS: crate::stats::GrpcCounts = crate::stats::GrpcCounts {
    codes: [0; qpslab_http::grpc::CODES.len()],
    other_codes: 0,
    faults: [0; qpslab_http::grpc::FAULTS],
    fault_example: None,
    first_response: None,
    messages_in: 0,
};

impl GrpcReport {
    fn new(
        cfg: &LoadConfig,
        c: &crate::stats::GrpcCounts,
        gaps: &Histogram<u64>,
        secs: f64,
    ) -> Option<Self> {
        let g = cfg.h2.and_then(|h| h.grpc)?;
        let mut status = BTreeMap::new();
        for (code, &n) in c.codes.iter().enumerate().filter(|(_, n)| **n > 0) {
            status.insert(qpslab_http::grpc::CODES[code].to_string(), n);
        }
        if c.other_codes > 0 {
            status.insert("other".to_string(), c.other_codes);
        }
        let faults = (c.faults.iter().enumerate())
            .filter(|(_, n)| **n > 0)
            .map(|(i, &n)| (qpslab_http::grpc::Fault::NAMES[i], n))
            .collect();
        let method = cfg.grpc_method.clone().unwrap_or_default();
        Some(GrpcReport {
            method,
            calls: c.calls(),
            status,
            faults,
            fault_example: c.fault_example.clone(),
            max_message_size: g.max_message,
            streams: g.streaming.then(|| {
                let per_call = cfg.grpc_messages_per_call;
                let calls = c.calls();
                let per_s = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
                GrpcStreams {
                    request_messages_per_call: per_call,
                    request_messages: calls * u64::from(per_call),
                    request_messages_per_s: per_s(calls * u64::from(per_call)),
                    response_messages: c.messages_in,
                    response_messages_per_call: c.messages_in as f64 / calls.max(1) as f64,
                    response_messages_per_s: per_s(c.messages_in),
                    message_gap_us: Latency::from_histogram(gaps),
                }
            }),
            check_response: cfg.grpc_check.as_ref().map(|check| {
                let judged = c.first_response.as_deref().map(|m| check.judge(m));
                ResponseCheckReport {
                    file: check.file.clone(),
                    passed: judged.as_ref().is_some_and(|(ok, _)| *ok),
                    got: judged.map(|(_, got)| got),
                }
            }),
        })
    }
}

/// What HTTP/2 connections saw while measuring (the server's SETTINGS whenever they came).
#[derive(Debug, Clone, Serialize)]
pub struct H2Report {
    pub streams_per_connection: usize,
    /// Responses whose header block was decoded.
    pub responses: u64,
    /// Mean header block bytes per response on the wire.
    pub header_bytes_per_response: f64,
    /// 1 - block bytes / decoded header list bytes (h2load's "space savings"; the list size
    /// counts 32 bytes per field, as SETTINGS_MAX_HEADER_LIST_SIZE does).
    pub hpack_space_savings: f64,
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS (None: unlimited, not sent).
    pub server_max_concurrent_streams: Option<u32>,
    /// The server's SETTINGS_INITIAL_WINDOW_SIZE (None: the default 65,535).
    pub server_initial_window: Option<u32>,
    /// GOAWAY frames received, and the last one's error code.
    pub goaways: u64,
    pub last_goaway: Option<&'static str>,
    /// Streams the server refused (REFUSED_STREAM), sent again on the same connection.
    pub refused_streams: u64,
    /// Request bodies the server's flow-control window held back (none: absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bodies_held: Option<BodiesHeld>,
    /// The window this side grants each stream (--window-bits), and the responses larger
    /// than it: the server needed this side's WINDOW_UPDATEs to finish those.
    pub client_window: u32,
    pub responses_past_client_window: u64,
}

/// Request bodies that stopped on the server's flow-control window before they were all sent:
/// how many, how many stopped first on the connection's window (else their stream's), and
/// the time held, from the first stop to the last byte sent (or the response): each on
/// average, and in all as a share of all responses' latency.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct BodiesHeld {
    pub requests: u64,
    pub on_connection_window: u64,
    pub mean_ms: f64,
    pub share_of_latency: f64,
}

impl BodiesHeld {
    /// `latency_total_us`: the counted responses' latency, from their write, summed.
    fn new(c: &crate::session::h2::H2Counts, latency_total_us: f64) -> Option<Self> {
        (c.bodies_held > 0).then(|| BodiesHeld {
            requests: c.bodies_held,
            on_connection_window: c.held_on_connection,
            mean_ms: c.held_us as f64 / c.bodies_held as f64 / 1e3,
            share_of_latency: (c.held_us as f64 / latency_total_us.max(1.0)).min(1.0),
        })
    }
}

impl H2Report {
    fn new(cfg: &LoadConfig, c: &crate::session::h2::H2Counts, latency_total_us: f64) -> Self {
        let n = c.responses.max(1) as f64;
        let savings = if c.decoded_bytes > 0 {
            1.0 - c.header_bytes as f64 / c.decoded_bytes as f64
        } else {
            0.0
        };
        H2Report {
            streams_per_connection: cfg.pipeline,
            responses: c.responses,
            header_bytes_per_response: c.header_bytes as f64 / n,
            hpack_space_savings: savings,
            server_max_concurrent_streams: c.max_streams,
            server_initial_window: c.window,
            goaways: c.goaways,
            last_goaway: c.goaway_code.map(qpslab_http::h2::frame::code::name),
            refused_streams: c.refused,
            bodies_held: BodiesHeld::new(c, latency_total_us),
            client_window: cfg.h2.map_or(0, |h| h.window),
            responses_past_client_window: c.past_client_window,
        }
    }
}

/// What an HTTP/3 run's transport did, from the connect phase to the closes: UDP datagrams
/// per system call each way and the kernel's offloads used (a fast QUIC stack reads and sends
/// many per call), the connections' losses and acknowledgements.
#[derive(Debug, Clone, Serialize)]
pub struct H3Report {
    pub streams_per_connection: usize,
    /// Which QUIC client ran (`--quic`): "quinn" (quinn-proto's) or "own" (qpslab's).
    pub quic: &'static str,
    pub datagrams_in: u64,
    pub datagrams_out: u64,
    pub datagrams_per_recv_call: f64,
    pub datagrams_per_send_call: f64,
    /// Reads that held several coalesced datagrams (GRO), and buffers sent as several (GSO).
    pub gro_reads: u64,
    pub gso_sends: u64,
    /// Datagrams the socket's send buffer did not take.
    pub send_dropped: u64,
    pub lost_packets: u64,
    pub lost_bytes: u64,
    pub congestion_events: u64,
    pub acks_sent: u64,
    pub acks_received: u64,
    /// The datagrams a GRO read held, on average (0 without GRO reads).
    pub segments_per_gro_read: f64,
    /// Datagrams received per ACK frame sent (how often this side acknowledges).
    pub datagrams_per_ack: f64,
    /// The generator's CPU time per completed handshake, in microseconds: starting it, and
    /// the turns that read and answer the server's handshake packets (0 without handshakes).
    pub handshake_cpu_us: f64,
    /// The largest datagram a connection sent once path MTU discovery was done (1,200 until
    /// it finds more).
    pub datagram_size: u64,
}

impl H3Report {
    fn new(cfg: &LoadConfig, c: &crate::stats::QuicCounts, handshakes: u64) -> Self {
        let per = |n: u64, calls: u64| if calls == 0 { 0.0 } else { n as f64 / calls as f64 };
        H3Report {
            streams_per_connection: cfg.pipeline,
            quic: if cfg.h3.as_ref().is_some_and(|h| h.own) { "own" } else { "quinn" },
            datagrams_in: c.datagrams_in,
            datagrams_out: c.datagrams_out,
            datagrams_per_recv_call: per(c.datagrams_in, c.recv_calls),
            datagrams_per_send_call: per(c.datagrams_out, c.send_calls),
            gro_reads: c.gro_reads,
            gso_sends: c.gso_sends,
            send_dropped: c.send_dropped,
            lost_packets: c.lost_packets,
            lost_bytes: c.lost_bytes,
            congestion_events: c.congestion_events,
            acks_sent: c.acks_sent,
            acks_received: c.acks_received,
            segments_per_gro_read: per(c.gro_segments, c.gro_reads),
            datagrams_per_ack: per(c.datagrams_in, c.acks_sent),
            handshake_cpu_us: per(c.handshake_cpu_ns, handshakes) / 1000.0,
            datagram_size: c.datagram_size,
        }
    }
}

/// One load agent's share of a run.
#[derive(Debug, Clone, Serialize)]
pub struct AgentRow {
    /// As given (`user@host`, `local`).
    pub host: String,
    /// What the agent's machine calls itself.
    pub hostname: String,
    pub weight: u32,
    /// `done`, `stopped` (by Ctrl-C), `lost` (died or went silent) or `failed` (an error).
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub threads: usize,
    pub connections: usize,
    pub sent: u64,
    pub completed: u64,
    /// Unknown for a lost agent (it sent counts, not statuses).
    pub ok: Option<u64>,
    pub failed: u64,
    pub throughput_rps: f64,
    pub duration_s: f64,
    /// The agent's own generator figures (absent for a lost agent).
    pub busy_ratio: Option<f64>,
    pub verdict: Option<String>,
    /// The agent's clock minus the coordinator's, and the round trip it was measured over.
    /// Each clock counts from its own process's start, so this is mostly the gap between the
    /// two starts, not a drift of one clock against the other: it converts the start instant
    /// into the agent's clock.
    pub clock_offset_ms: f64,
    pub rtt_ms: f64,
    /// How long after the agreed instant the agent began its run, in its own clock (the text's
    /// `late` column; its error is at most half the round trip).
    pub started_late_ms: f64,
    /// Bytes of the load's files (a pool, a targets file) sent to it before the run: none
    /// when it kept them from an earlier run.
    pub file_bytes: u64,
    /// The agent's corrected latency (HdrHistogram V2, base64; absent for a lost agent): the
    /// totals' `latency_hdr` is the exact merge of those of the agents that finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_hdr: Option<String>,
}

/// How closely the agents started.
#[derive(Debug, Clone, Serialize)]
pub struct StartSync {
    /// No two agents' run clocks started further apart than this.
    pub skew_bound_ms: f64,
    /// How far ahead the start instant was set.
    pub lead_ms: f64,
}

/// What the coordinator itself cost during the run (the ssh clients, separate processes, not
/// counted).
#[derive(Debug, Clone, Serialize)]
pub struct CoordinatorCost {
    /// CPU time of the coordinator process from the start instant to the last result.
    pub cpu_s: f64,
    /// `cpu_s` over that time: the share of one core.
    pub cpu_share: f64,
    /// Per-second histograms received and merged (one per agent and second).
    pub intervals: u64,
    /// Mean time to decode one and add it to the second's merge.
    pub merge_us_per_interval: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConfigReport {
    pub threads: usize,
    pub connections: usize,
    pub mode: &'static str,
    pub duration_s: Option<f64>,
    pub requests: Option<u64>,
    pub timeout_s: f64,
    pub warmup_s: f64,
    pub pipeline: usize,
    pub cpus: Option<Vec<usize>>,
    pub conn_per_request: bool,
    pub rst_close: bool,
    pub source: Option<SourceRange>,
    /// `--poll`: auto, spin or sleep.
    pub poll: &'static str,
    /// The event loop: `epoll` or `uring`.
    pub io: &'static str,
    /// The longest a turn held out for a batch of answers (`--linger`; 0 in an open loop,
    /// which never does).
    pub linger_us: u64,
    /// `http/1.1`, or `h2` (`--h2`: `pipeline` is then the streams per connection).
    pub protocol: &'static str,
    /// `--unix-socket`: the path every connection went to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unix_socket: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TargetReport {
    pub url: String,
    pub method: String,
    /// A targets-file line's `name=`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub weight: u32,
    /// `completed + failed + in_flight_at_stop` for this target.
    pub sent: u64,
    pub completed: u64,
    pub ok: u64,
    pub failed: u64,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Requests {
    /// Issued: committed to a connection (including ones whose connect then failed) in the
    /// measured window, plus `from_warmup`.
    pub sent: u64,
    /// Of `sent`: issued in the warm-up and still outstanding when the window opened; their
    /// responses count when they complete in the window (the window counts every response
    /// that completes in it, whenever its request went).
    pub from_warmup: u64,
    /// Final responses, any status: `ok + bad_status`.
    pub completed: u64,
    /// Status < 400, or listed in `--accept-status`.
    pub ok: u64,
    /// Ended without a response (connect, read, write, timeout, parse): the sum of `errors`.
    pub failed: u64,
    /// Responses >= 400 not accepted by `--accept-status`; they count against the error rate.
    pub bad_status: u64,
    pub in_flight_at_stop: u64,
    /// Requests written a second time on a new connection (each is still one request in
    /// `sent`): the sum of `retries`' request counts.
    pub retried: u64,
}

/// Why requests were written a second time.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Retries {
    /// Pipelined behind a response that announced the close (RFC 9112 9.3.2, 9.6): never
    /// processed by the server.
    pub after_announced_close: u64,
    /// On a reused keep-alive connection the server closed before any byte of their response
    /// (the close race of RFC 9112 9.3.1); idempotent requests only, once each; `--no-retry`
    /// counts them as failures instead.
    pub closed_before_response: u64,
    /// The reused connections behind `closed_before_response`.
    pub connections_closed_before_response: u64,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Bytes {
    pub read: u64,
    pub written: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Connections {
    pub connects: u64,
    pub reconnects: u64,
    /// Successful connects per second of measurement (the figure of `--conn-per-request`).
    pub connects_per_s: f64,
    /// From connect() to the connection being writable (the TCP handshake), per connect.
    pub connect_us: Latency,
    /// https runs only: the TLS handshakes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsReport>,
    /// Connections left waiting for an answer at the stop.
    pub starved: Starved,
    /// The path's own round trip: the kernel's smallest RTT of each connection open at the
    /// stop (its handshake included), without the server's time. None without TCP connections.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_rtt_us: Option<PathRtt>,
}

/// The spread of the connections' smallest round trips, in µs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PathRtt {
    pub min: u32,
    pub median: u32,
    pub max: u32,
    /// Connections measured.
    pub connections: u64,
}

impl PathRtt {
    fn new(rtts: &[u32]) -> Option<Self> {
        let mut v = rtts.to_vec();
        v.sort_unstable();
        Some(PathRtt {
            min: *v.first()?,
            median: v[v.len() / 2],
            max: *v.last()?,
            connections: v.len() as u64,
        })
    }
}

/// Connections whose oldest outstanding request, at the stop, had waited longer than the
/// run's p99.9 latency: the percentiles are of answered requests only, and these were not
/// answered. A run with unanswered ones fails its check.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Starved {
    /// Connections with a request outstanding at the stop.
    pub waiting_at_stop: u64,
    /// Of them, waiting longer than the p99.9 of the answered requests.
    pub waited_over_p999: u64,
    /// Of those, connections that had completed no response in the whole measured window.
    pub unanswered: u64,
    /// The longest wait at the stop, in µs.
    pub longest_wait_us: u64,
}

impl Starved {
    fn new(w: &crate::Waiting, p999_us: u64) -> Self {
        let over = |v: &[u64]| v.iter().filter(|&&us| us > p999_us).count() as u64;
        let unanswered = over(&w.unanswered_us);
        Starved {
            waiting_at_stop: (w.unanswered_us.len() + w.answered_us.len()) as u64,
            waited_over_p999: unanswered + over(&w.answered_us),
            unanswered,
            longest_wait_us: w
                .unanswered_us
                .iter()
                .chain(&w.answered_us)
                .copied()
                .max()
                .unwrap_or(0),
        }
    }
}

/// Stretches of the window in which no response came on any connection while requests
/// waited: the server stopped as a whole. Each is `threshold_ms` long at least (10 ms and four
/// times the median latency) and held two requests at least. The percentiles hide them in a
/// closed loop (only the requests in flight wait); these do not.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StallReport {
    pub count: u64,
    pub total_ms: f64,
    pub longest_ms: f64,
    /// When the longest began, in seconds from the start of measurement.
    pub longest_at_s: f64,
    /// `total_ms` over the window: about the share of the rate they cost a closed loop.
    pub share_of_window: f64,
    /// Requests out through a whole stall, summed over the stalls.
    pub requests_held: u64,
    pub threshold_ms: f64,
}

impl StallReport {
    fn new(result: &RunResult, median_us: u64) -> Option<Self> {
        let (threshold, stalls) = crate::stalls::stalls(&result.stalls, median_us);
        let longest = stalls.iter().max_by_key(|g| g.len_us())?;
        let total_us: u64 = stalls.iter().map(crate::stalls::Gap::len_us).sum();
        let window_us = result.duration.as_micros().max(1) as f64;
        Some(StallReport {
            count: stalls.len() as u64,
            total_ms: total_us as f64 / 1e3,
            longest_ms: longest.len_us() as f64 / 1e3,
            longest_at_s: longest.begin_us as f64 / 1e6,
            share_of_window: (total_us as f64 / window_us).min(1.0),
            requests_held: stalls.iter().map(|g| g.held).sum(),
            threshold_ms: threshold as f64 / 1e3,
        })
    }
}

/// The TLS handshakes of an https run.
#[derive(Debug, Clone, Serialize)]
pub struct TlsReport {
    /// Handshakes done in full (certificate, key exchange).
    pub full_handshakes: u64,
    /// Handshakes that resumed an earlier session (`--tls-reuse`).
    pub resumed: u64,
    /// Completed handshakes per second of measurement.
    pub handshakes_per_s: f64,
    /// From the TCP connection being open to the end of the TLS handshake, apart from the
    /// request latency.
    pub handshake_us: Latency,
    /// The version and cipher suite the server chose (on the first handshake).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub negotiated: Option<String>,
    /// `--tls-version`, if the run was held to one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<&'static str>,
    /// `--tls-reuse`: sessions were offered for resumption.
    pub reuse: bool,
    /// `--insecure`: server certificates were not verified.
    pub insecure: bool,
    /// HTTP/3 with `--0rtt`: what became of the early data of resumed handshakes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub early_data: Option<EarlyData>,
}

/// `--0rtt`: resumed handshakes that sent their first requests in the first flight.
#[derive(Debug, Clone, Serialize)]
pub struct EarlyData {
    /// The server took them: answered a round trip sooner.
    pub accepted: u64,
    /// The server refused them: they went again once the handshake was done.
    pub refused: u64,
}

/// The connect phase of a keep-alive run, before the measured window.
#[derive(Debug, Clone, Serialize)]
pub struct SetupReport {
    pub connections: usize,
    pub opened: usize,
    /// Not open when the run started (failed once, closed by the server, or still connecting
    /// at a stop); reopened during the run.
    pub failed: usize,
    /// Of `failed`: opened, then closed by the server (its idle timeout) before the run.
    pub closed_by_server: usize,
    pub duration_s: f64,
    /// Connections opened per second of the phase.
    pub connects_per_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_example: Option<String>,
    /// Why opening was slow, when the ephemeral port range was crowded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port_search: Option<String>,
}

/// A connect phase at least this long gets the port-search hint when the range is crowded.
const SLOW_SETUP_S: f64 = 1.0;
/// Share of a destination's source ports in use from which connects slow down visibly.
const PORT_SEARCH_CROWDED: f64 = 0.5;

impl SetupReport {
    fn new(s: &crate::Setup, budget: Option<&PortBudget>) -> Self {
        let secs = s.duration.as_secs_f64();
        // The kernel looks for a free ephemeral port on every connect; with most of the range
        // taken to one destination the search, not the server, sets the connect rate.
        let crowded = budget.filter(|b| {
            secs >= SLOW_SETUP_S && b.concurrent as f64 >= PORT_SEARCH_CROWDED * b.tuples as f64
        });
        Self {
            connections: s.connections,
            opened: s.opened,
            failed: s.failed,
            closed_by_server: s.closed_by_server,
            port_search: crowded.map(|b| {
                format!(
                    "{} connections to {} hold {:.0}% of the {} source ports: the kernel's \
                     search for a free port slows every connect as the range fills; add source \
                     addresses (--source 127.0.0.2-127.0.0.254 on loopback) or widen \
                     net.ipv4.ip_local_port_range",
                    b.concurrent,
                    b.destination,
                    100.0 * b.concurrent as f64 / b.tuples.max(1) as f64,
                    b.tuples
                )
            }),
            duration_s: secs,
            connects_per_s: if secs > 0.0 { s.opened as f64 / secs } else { 0.0 },
            error_example: s.example.clone(),
        }
    }

    /// What to check when connections could not open, from what went wrong.
    fn advice(&self) -> &'static str {
        let e = self.error_example.as_deref().unwrap_or("");
        if e.contains("open files") {
            "raise the descriptor limit (ulimit -n) or use fewer connections per process \
             (--agents local,local splits them over processes)"
        } else if e.contains("timed out") {
            "the target did not complete handshakes in time: check its accept backlog (the \
             listen backlog, net.core.somaxconn), whether it accepts at all (its connection \
             limit), and --connect-timeout, or give --warmup"
        } else if e.contains("cannot assign") {
            "the source ports to this destination are used up: add source addresses \
             (--source) or widen net.ipv4.ip_local_port_range"
        } else if self.closed_by_server > 0 {
            "the server closed idle connections before the run began (its idle timeout): give \
             --warmup or fewer connections"
        } else {
            "check that the target accepts this many connections (its backlog, connection \
             limit and idle timeout), and --connect-timeout, or give --warmup"
        }
    }

    /// The summary line, with a hint when connections could not open or opened slowly.
    fn text(&self) -> String {
        let took = fmt_us(self.duration_s * 1e6);
        let mut line = if self.failed == 0 {
            format!(
                "Setup: {} connections opened in {took} ({:.0}/s) before the measured window",
                self.opened, self.connects_per_s
            )
        } else {
            let mut why = Vec::new();
            if self.closed_by_server > 0 {
                why.push(format!("{} closed by the server while waiting", self.closed_by_server));
            }
            if let Some(e) = &self.error_example {
                why.push(format!("first error: {e}"));
            }
            let why = if why.is_empty() { String::new() } else { format!(" ({})", why.join("; ")) };
            format!(
                "Setup: {} of {} connections open after {took} ({:.0}/s); {} were not{why} and \
                 were reopened during the run: {}",
                self.opened,
                self.connections,
                self.connects_per_s,
                self.failed,
                self.advice(),
            )
        };
        if let Some(hint) = &self.port_search {
            line += &format!("\nSetup was slow: {hint}");
        }
        line
    }
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    pub min: u64,
    pub mean: f64,
    pub stdev: f64,
    pub p50: u64,
    pub p75: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub p9999: u64,
    pub max: u64,
    /// Share of samples within one standard deviation of the mean (wrk's `+/- Stdev`).
    pub within_stdev: f64,
}

/// An open-loop run's schedule against what was sent.
#[derive(Debug, Clone, Serialize)]
pub struct RateReport {
    /// Requests/s at the start of the ramp and at its end (equal without a ramp).
    pub start_rps: f64,
    /// The rate at the end of the ramp or the last stage, kept for the rest of the run.
    pub target_rps: f64,
    /// Length of the ramp or of all stages.
    pub ramp_s: f64,
    /// Stages (segments) before the final rate: 1 for `--ramp`, 0 for a constant rate.
    pub stages: usize,
    /// Requests the schedule had due during measurement.
    pub scheduled: u64,
    /// Counted requests sent per second of measurement.
    pub achieved_rps: f64,
    /// At least 98% of the scheduled requests were sent.
    pub kept: bool,
    /// Requests due but not sent when the run stopped.
    pub due_unsent: u64,
    /// Counted requests that found every connection busy when they fell due and waited for
    /// one to free (the wait is in their latency and send lag): the target, or too few
    /// connections, set their pace, not the generator.
    pub waited_for_connection: u64,
    /// Connections free when the run stopped (none free: every connection was waiting on the
    /// target, so it, or too few connections, set the pace).
    pub idle_at_stop: usize,
}

/// Share of the scheduled requests that must go out for the schedule to count as kept.
pub const SCHEDULE_KEPT: f64 = 0.98;

#[derive(Debug, Clone, Serialize)]
pub struct Generator {
    pub threads: usize,
    pub cpu_user_s: f64,
    pub cpu_sys_s: f64,
    /// Time (summed over threads) in turns of the event loop that polled (`--poll`) and found
    /// nothing to do: waiting, not work.
    pub poll_s: f64,
    /// Time (summed over threads) in turns that could hold out for answers (`--linger`, where
    /// a trial found that it kept the server's rate).
    pub linger_s: f64,
    /// Share of the load threads' wall time they worked: their CPU time over their wall time,
    /// times the share of it not spent polling.
    pub busy_ratio: f64,
    /// `ok`, `generator-bound`, or `not-judged` (no response, or a window under 0.2 s).
    pub verdict: &'static str,
    /// Why the verdict is `not-judged`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict_reason: Option<String>,
    /// A cgroup CPU quota over the generator and how often it held the run back; with
    /// [`qpslab_sys::cgroup::Throttling::bounds`] the verdict is `generator-bound` whatever the
    /// busy share (throttled threads wait, they do not look busy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throttled: Option<qpslab_sys::cgroup::Throttling>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub passed: bool,
    /// `(failed + bad_status) / sent`.
    pub error_rate: f64,
    pub max_error_rate: f64,
    /// The first failure: the run's own, else a threshold's.
    pub reason: Option<String>,
    /// The run's own failure (nothing sent or answered, connections starved, the error rate),
    /// apart from the thresholds', which are in `thresholds`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_failure: Option<String>,
}

impl Latency {
    /// The percentile lines of the text summaries: `      50%  128.00us` ... `      max  ...`.
    pub fn write_distribution(&self, s: &mut String) {
        for (label, v) in [
            ("50%", self.p50),
            ("75%", self.p75),
            ("90%", self.p90),
            ("99%", self.p99),
            ("99.9%", self.p999),
            ("99.99%", self.p9999),
            ("max", self.max),
        ] {
            let _ = writeln!(s, "  {label:>7}  {}", fmt_us(v as f64));
        }
    }

    pub fn from_histogram(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        let (mean, stdev) = (h.mean(), h.stdev());
        let within: u64 = h
            .iter_recorded()
            .filter(|v| (v.value_iterated_to() as f64 - mean).abs() <= stdev)
            .map(|v| v.count_at_value())
            .sum();
        Self {
            min: h.min(),
            mean,
            stdev,
            p50: h.value_at_quantile(0.5),
            p75: h.value_at_quantile(0.75),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            p9999: h.value_at_quantile(0.9999),
            max: h.max(),
            within_stdev: within as f64 / h.len() as f64,
        }
    }
}

/// Encodes a histogram the way HdrHistogram tools exchange them: V2, deflate, base64.
pub fn encode_histogram(h: &Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    match V2DeflateSerializer::new().serialize(h, &mut bytes) {
        Ok(_) => base64::engine::general_purpose::STANDARD.encode(bytes),
        Err(_) => String::new(),
    }
}

impl Report {
    pub fn new(cfg: &LoadConfig, result: &RunResult, meta: &RunMeta) -> Self {
        let rec = &result.rec;
        let secs = result.duration.as_secs_f64();
        let per_sec = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        let requests = Requests {
            sent: rec.sent,
            from_warmup: rec.from_warmup,
            completed: rec.completed,
            ok: rec.ok,
            failed: rec.failed,
            bad_status: rec.bad_status(),
            in_flight_at_stop: result.in_flight_at_stop,
            retried: rec.retried + rec.race_retried,
        };
        let rate = RateReport::new(cfg, result);
        let open = cfg.rate.is_some();
        let (errors, error_examples) = errors(rec);
        let latency_us = Latency::from_histogram(&rec.latency);
        let starved = Starved::new(&result.waiting, latency_us.p999);
        let generator = Generator::new(cfg, result, rate.as_ref());
        let facts = crate::threshold::Facts {
            latency: &rec.latency,
            rps: per_sec(rec.completed),
            sent: requests.sent,
            errors: requests.failed + requests.bad_status,
            gen_busy: generator.busy_ratio,
            quic: rec.quic.map(|q| (q.lost_packets, q.datagrams_out)),
            grpc: rec.grpc.as_ref().or(cfg.h2.and_then(|h| h.grpc).map(|_| &NO_CALLS)),
        };
        let thresholds: Vec<_> = cfg.thresholds.iter().map(|t| t.check(&facts)).collect();
        let grpc =
            GrpcReport::new(cfg, rec.grpc.as_ref().unwrap_or(&NO_CALLS), &rec.message_gaps, secs);
        let response_check = grpc.as_ref().and_then(|g| g.check_response.as_ref());
        let wrong_answer = response_check.and_then(ResponseCheckReport::failure);
        Self {
            version: meta.version.clone(),
            command: meta.command.clone(),
            started_at: humantime::format_rfc3339_millis(result.started_at).to_string(),
            host: meta.host.clone(),
            duration_s: secs,
            targets: pool::shown_targets(cfg),
            config: ConfigReport::new(cfg),
            requests,
            retries: Retries {
                after_announced_close: rec.retried,
                closed_before_response: rec.race_retried,
                connections_closed_before_response: rec.race_closes,
            },
            status: rec.statuses().map(|(c, n)| (c.to_string(), n)).collect(),
            errors,
            error_examples,
            throughput_rps: per_sec(rec.completed),
            bytes: Bytes { read: rec.bytes_read, written: rec.bytes_written },
            connections: Connections {
                connects: rec.connects,
                reconnects: rec.reconnects,
                connects_per_s: per_sec(rec.connects),
                connect_us: Latency::from_histogram(&rec.connect_latency),
                tls: cfg.tls.as_ref().map(|t| TlsReport {
                    full_handshakes: rec.tls_full,
                    resumed: rec.tls_resumed,
                    handshakes_per_s: per_sec(rec.tls_full + rec.tls_resumed),
                    handshake_us: Latency::from_histogram(&rec.handshake_latency),
                    negotiated: rec.tls_negotiated.clone(),
                    version: t.version.map(crate::tls::TlsVersion::name),
                    reuse: t.reuse,
                    insecure: t.insecure,
                    early_data: cfg.h3.as_ref().filter(|h| h.zero_rtt).map(|_| EarlyData {
                        accepted: rec.early_accepted,
                        refused: rec.early_refused,
                    }),
                }),
                starved: starved.clone(),
                path_rtt_us: PathRtt::new(&result.waiting.min_rtt_us),
            },
            h2: cfg.h2.map(|_| {
                // From each request's write: what a body's hold is a part of.
                let from_write = if open { &rec.latency_uncorrected } else { &rec.latency };
                let total = from_write.mean() * from_write.len() as f64;
                H2Report::new(cfg, &rec.h2.unwrap_or_default(), total)
            }),
            grpc,
            h3: cfg.h3.as_ref().map(|_| {
                H3Report::new(cfg, &rec.quic.unwrap_or_default(), rec.tls_full + rec.tls_resumed)
            }),
            setup: result.setup.as_ref().map(|s| SetupReport::new(s, result.port_budget.as_ref())),
            stalls: StallReport::new(result, latency_us.p50),
            latency_us,
            latency_uncorrected_us: open.then(|| Latency::from_histogram(&rec.latency_uncorrected)),
            send_lag_us: open.then(|| Latency::from_histogram(&rec.send_lag)),
            generator,
            rate,
            latency_hdr: encode_histogram(&rec.latency),
            per_target: per_target(cfg, result),
            pool: pool::PoolReport::new(cfg, result),
            port_budget: result.port_budget.clone(),
            check: check(
                &requests,
                cfg,
                result.setup.as_ref(),
                &starved,
                &thresholds,
                wrong_answer,
            ),
            thresholds,
            intervals: interval_rows(&result.intervals),
            stopped_early: result.stopped_early,
            agents: None,
            partial: None,
            start: None,
            coordinator: None,
        }
    }

    /// The wrk-style summary block.
    pub fn render_text(&self) -> String {
        text::render(self)
    }
}

impl ConfigReport {
    fn new(cfg: &LoadConfig) -> Self {
        Self {
            threads: cfg.threads,
            connections: cfg.connections,
            mode: cfg.mode(),
            duration_s: cfg.duration.map(|d| d.as_secs_f64()),
            requests: cfg.requests,
            timeout_s: cfg.timeout.as_secs_f64(),
            warmup_s: cfg.warmup.as_secs_f64(),
            pipeline: cfg.pipeline,
            cpus: cfg.cpus.clone(),
            conn_per_request: cfg.conn_per_request,
            rst_close: cfg.rst_close,
            source: cfg.source,
            poll: cfg.poll.name(),
            io: cfg.io.name(),
            linger_us: if cfg.rate.is_none() {
                u64::try_from(cfg.linger.as_micros()).unwrap_or(u64::MAX)
            } else {
                0
            },
            protocol: if cfg.h3.is_some() {
                "h3"
            } else if cfg.h2.is_some() {
                "h2"
            } else {
                "http/1.1"
            },
            unix_socket: cfg.unix_socket.as_ref().map(|p| p.display().to_string()),
        }
    }
}

impl RateReport {
    /// Open loop: the schedule over the measured window against what was sent.
    fn new(cfg: &LoadConfig, result: &RunResult) -> Option<Self> {
        let r = cfg.rate.as_ref()?;
        let rec = &result.rec;
        let secs = result.duration.as_secs_f64();
        let run = cfg.warmup + result.duration;
        let scheduled = (r.due_by(run) - r.due_by(cfg.warmup)).round().max(0.0) as u64;
        // The warm-up's requests carried into the window were not sent in it.
        let in_window = rec.sent - rec.from_warmup;
        Some(RateReport {
            start_rps: r.start_rps(),
            target_rps: r.hold_rps,
            ramp_s: r.staged().as_secs_f64(),
            stages: r.segments.len(),
            scheduled,
            achieved_rps: if secs > 0.0 { in_window as f64 / secs } else { 0.0 },
            kept: in_window as f64 >= SCHEDULE_KEPT * scheduled as f64,
            due_unsent: result.due_unsent,
            waited_for_connection: rec.waited_for_connection,
            idle_at_stop: result.idle_at_stop,
        })
    }
}

impl Generator {
    /// The load threads' CPU, busy share and verdict.
    fn new(cfg: &LoadConfig, result: &RunResult, rate: Option<&RateReport>) -> Self {
        let secs = result.duration.as_secs_f64();
        let busy_ratio = if secs > 0.0 {
            // Polling is timed by the clock, which runs on while the thread is preempted; taking
            // its share of the wall time (not subtracting it from the CPU time) keeps the
            // figure right on a busy machine too.
            let wall = secs * cfg.threads as f64;
            let cpu_share = result.cpu.total().as_secs_f64() / wall;
            let poll_share = (result.polled.as_secs_f64() / wall).min(1.0);
            cpu_share * (1.0 - poll_share)
        } else {
            0.0
        };
        // Open loop: behind schedule with connections free means the generator did not send
        // in time; behind with every connection busy means the target set the pace.
        let behind_with_free_connections = rate.is_some_and(|r| !r.kept && r.idle_at_stop > 0);
        let (verdict, verdict_reason) = if result.rec.completed == 0 {
            ("not-judged", Some("no response was received".to_string()))
        } else if secs < MIN_JUDGED_S {
            let why =
                format!("the run was too short ({secs:.2} s) to tell whether it set the rate");
            ("not-judged", Some(why))
        } else if busy_ratio >= GENERATOR_BOUND_RATIO
            || behind_with_free_connections
            || result.throttling.as_ref().is_some_and(qpslab_sys::cgroup::Throttling::bounds)
        {
            ("generator-bound", None)
        } else {
            ("ok", None)
        };
        Generator {
            threads: cfg.threads,
            cpu_user_s: result.cpu.user.as_secs_f64(),
            cpu_sys_s: result.cpu.sys.as_secs_f64(),
            poll_s: result.polled.as_secs_f64(),
            linger_s: result.lingered.as_secs_f64(),
            busy_ratio,
            verdict,
            verdict_reason,
            throttled: result.throttling.clone(),
        }
    }
}

/// Failures by class, and one example message of each class that occurred.
fn errors(rec: &crate::Recorder) -> (BTreeMap<&'static str, u64>, BTreeMap<&'static str, String>) {
    let mut errors = BTreeMap::new();
    let mut examples = BTreeMap::new();
    for class in ErrorClass::ALL {
        errors.insert(class.name(), rec.errors[class as usize]);
        if let Some(ex) = &rec.examples[class as usize] {
            examples.insert(class.name(), ex.clone());
        }
    }
    (errors, examples)
}

/// Every target's counts as CSV, a line per target (a pool's lines included), in the order of
/// the configuration: `line,url,method,sent,completed,ok,failed`, where `line` is the
/// target's line in its file (`--urls`, `--body-lines`, `--targets`; empty for a URL of the
/// command line), which tells apart the lines of `--body-lines` (one URL, many bodies).
pub fn per_request_csv(cfg: &LoadConfig, result: &RunResult) -> String {
    let mut out = String::from("line,url,method,sent,completed,ok,failed\n");
    let v = &cfg.variants;
    for i in 0..v.len() {
        let c = result.rec.per_target.get(i).copied().unwrap_or_default();
        let in_flight = result.in_flight_by_target.get(i).copied().unwrap_or(0);
        // A URL holds no comma or quote unescaped; quoted all the same.
        let url = v.url(i).replace('"', "\"\"");
        let line = match v.line(i) {
            0 => String::new(),
            n => n.to_string(),
        };
        out.push_str(&format!(
            "{line},\"{url}\",{},{},{},{},{}\n",
            v.method(i),
            c.completed + c.failed + in_flight,
            c.completed,
            c.ok,
            c.failed
        ));
    }
    out
}

/// Requests by target, in the order of the configuration.
fn per_target(cfg: &LoadConfig, result: &RunResult) -> Vec<TargetReport> {
    let v = &cfg.variants;
    (0..v.len())
        .filter(|&i| !v.pool(i))
        .map(|i| {
            let c = result.rec.per_target.get(i).copied().unwrap_or_default();
            let in_flight = result.in_flight_by_target.get(i).copied().unwrap_or(0);
            TargetReport {
                url: v.url(i).to_string(),
                method: v.method(i).to_string(),
                name: v.name(i).map(String::from),
                weight: v.weight(i),
                sent: c.completed + c.failed + in_flight,
                completed: c.completed,
                ok: c.ok,
                failed: c.failed,
            }
        })
        .collect()
}

fn interval_rows(samples: &[crate::Interval]) -> Vec<IntervalRow> {
    let mut prev = crate::Interval { elapsed_s: 0.0, sent: 0, completed: 0, failed: 0 };
    samples
        .iter()
        .map(|s| {
            let dt = s.elapsed_s - prev.elapsed_s;
            let done = s.completed - prev.completed.min(s.completed);
            let row = IntervalRow {
                t_s: s.elapsed_s,
                completed: done,
                failed: s.failed - prev.failed.min(s.failed),
                rps: if dt > 0.0 { done as f64 / dt } else { 0.0 },
            };
            prev = *s;
            row
        })
        .collect()
}

fn check(
    r: &Requests,
    cfg: &LoadConfig,
    setup: Option<&crate::Setup>,
    starved: &Starved,
    thresholds: &[crate::threshold::Outcome],
    wrong_answer: Option<String>,
) -> Check {
    let max_error_rate = cfg.max_error_rate;
    let bad = r.failed + r.bad_status;
    let error_rate = if r.sent > 0 { bad as f64 / r.sent as f64 } else { 0.0 };
    let unopened = setup.filter(|s| s.failed > 0).map_or(String::new(), |s| {
        format!(
            "; {} of {} connections could not open before the run{} (see the Setup line)",
            s.failed,
            s.connections,
            s.example.as_ref().map_or(String::new(), |e| format!(": {e}"))
        )
    });
    let run_failure = if r.sent == 0 {
        Some(format!("no request was sent{unopened}"))
    } else if r.completed == 0 {
        Some(format!("no response was received{unopened}"))
    } else if starved.unanswered > 0 {
        Some(format!(
            "{} of {} connections got no response in the measured window (their requests waited up to {}); the percentiles are of the answered ones only",
            starved.unanswered,
            cfg.connections,
            fmt_us(starved.longest_wait_us as f64)
        ))
    } else if error_rate > max_error_rate && !cfg.thresholds.iter().any(|t| t.on_errors()) {
        Some(format!(
            "error rate {:.4}% ({bad} of {} requests) is above --max-error-rate {}",
            error_rate * 100.0,
            r.sent,
            max_error_rate
        ))
    } else {
        wrong_answer
    };
    let reason = run_failure.clone().or_else(|| failed_thresholds(thresholds));
    Check { passed: reason.is_none(), error_rate, max_error_rate, reason, run_failure }
}

/// `threshold p99<2ms failed (p99 3.10ms)`, or how many failed and the first.
fn failed_thresholds(outcomes: &[crate::threshold::Outcome]) -> Option<String> {
    let failed: Vec<_> = outcomes.iter().filter(|o| !o.passed).collect();
    let first = failed.first()?;
    let more = match failed.len() {
        1 => String::new(),
        n => format!(" and {} more (see the threshold lines)", n - 1),
    };
    Some(format!("threshold {} failed ({}){more}", first.threshold, first.shown))
}

fn plural(n: u64, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 {
        one
    } else {
        many
    }
}

fn fmt_secs(s: f64) -> String {
    format!("{s:.2}s")
}

fn fmt_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.2}{}", UNITS[i])
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::config::LoadOptions;
    use crate::stats::Recorder;
    use crate::CpuTime;

    fn failed_setup(example: &str) -> String {
        SetupReport {
            connections: 100,
            opened: 60,
            failed: 40,
            closed_by_server: 0,
            duration_s: 5.0,
            connects_per_s: 12.0,
            error_example: Some(example.into()),
            port_search: None,
        }
        .text()
    }

    /// The Setup line's advice follows the failure: a connect that timed out is not a
    /// descriptor shortage (it blamed ulimit -n for every failure).
    #[test]
    fn setup_advice_names_what_the_failure_points_at() {
        let timed_out = failed_setup("connect timed out after 5s");
        assert!(timed_out.contains("did not complete handshakes in time"), "{timed_out}");
        assert!(!timed_out.contains("ulimit"), "{timed_out}");
        let fds = failed_setup("too many open files");
        assert!(fds.contains("ulimit -n"), "{fds}");
        assert!(!fds.contains("backlog"), "{fds}");
        let ports = failed_setup("cannot assign requested address");
        assert!(ports.contains("--source"), "{ports}");
    }

    /// A run with fixed numbers: 1000 requests, 990 answered (980 ok, 10 bad), 8 failed, 2 in
    /// flight; latencies 100..=1079 us.
    fn fixed_result(cpu_secs: f64) -> (LoadConfig, RunResult) {
        let opts = LoadOptions {
            urls: vec!["http://127.0.0.1:8080/".into()],
            threads: Some(2),
            connections: Some(100),
            duration: Some(Duration::from_secs(10)),
            // Explicit: auto depends on the machine, the snapshot must not.
            io: crate::IoChoice::Epoll,
            ..LoadOptions::default()
        };
        let cfg = LoadConfig::from_options(&opts).unwrap();
        let mut rec = Recorder { sent: 1000, ..Recorder::default() };
        for i in 0..990u64 {
            let status = if i < 980 { 200 } else { 503 };
            rec.response(status, status < 400, 100 + i);
        }
        rec.failure(ErrorClass::Read, 5, || "connection reset by peer".into());
        rec.failure(ErrorClass::Timeout, 3, || "no response within 5s".into());
        rec.bytes_read = 150_000;
        rec.bytes_written = 41_000;
        rec.connects = 103;
        rec.reconnects = 3;
        for us in 20..123 {
            rec.connect_latency.record(us).unwrap();
        }
        rec.per_target = vec![crate::stats::TargetCounts { completed: 990, ok: 980, failed: 8 }];
        let half = Duration::from_secs_f64(cpu_secs / 2.0);
        let result = RunResult {
            rec,
            in_flight_at_stop: 2,
            duration: Duration::from_secs(10),
            cpu: CpuTime { user: half, sys: half },
            polled: Duration::ZERO,
            lingered: Duration::ZERO,
            started_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000),
            intervals: vec![
                crate::Interval { elapsed_s: 1.0, sent: 100, completed: 99, failed: 1 },
                crate::Interval { elapsed_s: 2.001, sent: 300, completed: 297, failed: 2 },
            ],
            stopped_early: false,
            due_unsent: 0,
            idle_at_stop: 0,
            in_flight_by_target: vec![2],
            log_error: None,
            port_budget: None,
            setup: Some(crate::Setup {
                connections: 100,
                opened: 100,
                failed: 0,
                closed_by_server: 0,
                duration: Duration::from_millis(4),
                example: None,
            }),
            throttling: None,
            waiting: crate::Waiting::default(),
            stalls: Vec::new(),
        };
        (cfg, result)
    }

    fn meta() -> RunMeta {
        RunMeta {
            version: "0.1.0 (test)".into(),
            command: vec!["qpslab".into(), "load".into()],
            host: HostInfo { kernel: "6.1.0".into(), cpu_model: "Test CPU".into(), online_cpus: 2 },
        }
    }

    #[test]
    fn text_summary() {
        let (cfg, result) = fixed_result(4.0);
        let report = Report::new(&cfg, &result, &meta());
        insta::assert_snapshot!(report.render_text());
    }

    #[test]
    fn json_contract() {
        let (cfg, result) = fixed_result(4.0);
        let report = Report::new(&cfg, &result, &meta());
        insta::assert_json_snapshot!(report);
    }

    /// The stretches long enough to be stalls are reported, with what they cost the window;
    /// a shorter one, and one that held a single request, are not.
    #[test]
    fn stalls_are_the_long_stretches_that_held_requests() {
        let (cfg, mut result) = fixed_result(4.0);
        let gap = |b: u64, e: u64, held: u64| crate::stalls::Gap { begin_us: b, end_us: e, held };
        result.stalls = vec![
            gap(1_000_000, 1_200_000, 20),
            gap(2_000_000, 2_004_000, 20),
            gap(3_000_000, 3_100_000, 1),
            gap(5_000_000, 5_300_000, 20),
        ];
        let report = Report::new(&cfg, &result, &meta());
        let st = report.stalls.as_ref().unwrap();
        assert_eq!((st.count, st.requests_held), (2, 40), "{st:?}");
        assert_eq!((st.total_ms, st.longest_ms, st.longest_at_s), (500.0, 300.0, 5.0));
        assert!((st.share_of_window - 0.05).abs() < 1e-9, "{st:?}");
        let text = report.render_text();
        assert!(
            text.contains("Stalls: 2 stretches without a response on any connection"),
            "{text}"
        );
        result.stalls.truncate(0);
        assert!(Report::new(&cfg, &result, &meta()).stalls.is_none());
    }

    #[test]
    fn busy_generator_is_called_generator_bound() {
        // 2 threads x 10 s = 20 CPU-seconds available; 18.5 used is 92.5% busy.
        let (cfg, result) = fixed_result(18.5);
        let report = Report::new(&cfg, &result, &meta());
        assert_eq!(report.generator.verdict, "generator-bound");
        assert!(report.render_text().contains("generator-bound, the rate is only a lower bound"));
        let (cfg, result) = fixed_result(17.0);
        assert_eq!(Report::new(&cfg, &result, &meta()).generator.verdict, "ok");
    }

    /// A generator held back by its cgroup's CPU quota waits instead of running: its busy share
    /// looks idle, and the verdict says generator-bound with the quota.
    #[test]
    fn a_throttled_generator_is_generator_bound_whatever_its_busy_share() {
        let (cfg, mut result) = fixed_result(2.0);
        result.throttling = Some(qpslab_sys::cgroup::Throttling {
            cgroup: "/sys/fs/cgroup/cpu/gen".into(),
            quota_cpus: 0.2,
            quota: "20000/100000".into(),
            periods: 100,
            throttled_periods: 95,
            throttled_s: 7.9,
        });
        let report = Report::new(&cfg, &result, &meta());
        assert!(report.generator.busy_ratio < 0.2);
        assert_eq!(report.generator.verdict, "generator-bound");
        let text = report.render_text();
        assert!(
            text.contains(
                "generator-bound, held back by its cgroup's CPU quota (/sys/fs/cgroup/cpu/gen: \
                 CPU quota 20000/100000 us (0.20 CPUs), throttled in 95% of 100 periods"
            ),
            "{text}"
        );
        // Throttled now and then: the busy share decides, as before.
        result.throttling.as_mut().unwrap().throttled_periods = 5;
        assert_eq!(Report::new(&cfg, &result, &meta()).generator.verdict, "ok");
    }

    /// Regression: a run with no response was called generator-bound.
    #[test]
    fn no_response_or_a_short_window_is_not_judged() {
        let (cfg, mut result) = fixed_result(19.0);
        result.rec = Recorder { sent: 10, ..Recorder::default() };
        result.rec.failure(ErrorClass::Connect, 10, || "connection refused".into());
        let report = Report::new(&cfg, &result, &meta());
        assert_eq!(report.generator.verdict, "not-judged");
        assert_eq!(report.generator.verdict_reason.as_deref(), Some("no response was received"));
        assert!(report.render_text().contains(": not judged, no response was received"));
        let (cfg, mut result) = fixed_result(0.1);
        result.duration = Duration::from_millis(50);
        let report = Report::new(&cfg, &result, &meta());
        assert_eq!(report.generator.verdict, "not-judged");
        assert!(report.generator.verdict_reason.unwrap().contains("too short (0.05 s)"));
    }

    #[test]
    fn polling_is_waiting_not_work() {
        // 20 CPU-seconds used of 20 available, 8 of them polling for events: 60% busy.
        let (cfg, mut result) = fixed_result(20.0);
        result.polled = Duration::from_secs(8);
        let report = Report::new(&cfg, &result, &meta());
        assert!((report.generator.busy_ratio - 0.6).abs() < 1e-9);
        assert_eq!(report.generator.verdict, "ok");
        assert_eq!(report.generator.poll_s, 8.0);
        assert!(report.render_text().contains("busy 60.0% (+40.0% polling for events)"));
    }

    #[test]
    fn check_thresholds() {
        let (mut cfg, result) = fixed_result(1.0);
        // 8 failed + 10 bad statuses of 1000 sent: 1.8%.
        let failing = Report::new(&cfg, &result, &meta());
        assert!(!failing.check.passed);
        assert!((failing.check.error_rate - 0.018).abs() < 1e-12);
        cfg.max_error_rate = 0.02;
        assert!(Report::new(&cfg, &result, &meta()).check.passed);
    }
}
