//! qpslab's load engine: HTTP/1.1 and HTTP/2, plain or TLS, over TCP or a unix socket.
//!
//! Owns: running a validated [`LoadConfig`] on per-thread event loops ([`run`]), exact request
//! accounting and latency recording ([`stats`]), and turning the merged result into the report
//! users and scripts read ([`report`]). Does not own flag parsing, printing or exit codes: the
//! CLI does.

pub mod config;
pub mod feed;
mod file_text;
pub mod grpc;
pub mod hlog;
pub mod options;
mod pacer;
pub mod pool;
mod quic;
pub mod rate;
pub mod report;
mod seed;
mod session;
pub mod source;
pub mod stalls;
pub mod stats;
pub mod target;
pub mod targets;
pub mod targets_file;
pub mod template;
pub mod threshold;
pub mod tls;
mod units;
pub mod variants;
pub mod wire;
mod worker;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::Histogram;
use qpslab_sys::crew::{self, Crew, Hand, Supervise, WorkerError};
use qpslab_sys::root::Root;
use thiserror::Error;

use worker::{Clock, Msg};

pub use config::{ConfigError, LoadConfig, LoadOptions, Target};
pub use feed::{Event, Feed};
pub use qpslab_sys::thread::CpuTime;
pub use qpslab_sys::uring::{Engine, IoChoice};
pub use report::Report;
/// The fuzz target's body: the HTTP/2 connection fed any server bytes.
#[doc(hidden)]
pub use session::fuzzing;
pub use stats::{ErrorClass, Recorder};
pub use worker::ThreadProgress;

/// Why a run could not start or ran into trouble outside the request accounting.
#[derive(Debug, Error)]
pub enum LoadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot connect to {url} ({addr}): {reason}; is a server listening there?")]
    Unreachable { url: String, addr: String, reason: String },
    /// The target's TLS handshake failed before the run (a certificate that does not verify,
    /// a version or suite it does not offer, plain HTTP on an https:// URL).
    #[error("{url}: {reason}")]
    Tls { url: String, reason: String },
    /// The server speaks another protocol than the run's (TLS to an http:// URL, HTTP/1.1 to
    /// HTTP/2's preface, HTTP/2 to an HTTP/1.1 request, another ALPN choice than h2), as the
    /// first bytes of a connection showed: the run ended there.
    #[error("{url}: {reason}")]
    WrongProtocol { url: String, reason: String },
    /// A load thread could not start, be pinned, or run (a panic included).
    #[error(transparent)]
    Thread(#[from] WorkerError<std::io::Error>),
}

impl LoadError {
    /// The user's to fix (exit 2): the options, or a target that cannot be reached or
    /// verified or speaks another protocol.
    pub fn is_setup(&self) -> bool {
        !matches!(self, LoadError::Thread(_))
    }
}

/// Live counters, summed over threads (and agents). Cumulative since the start of measurement
/// except `open`, a gauge: a watcher takes the difference of two for a second's rate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Progress {
    /// Since the start of measurement (zero during warm-up).
    pub elapsed: Duration,
    pub warming_up: bool,
    pub sent: u64,
    pub completed: u64,
    /// Requests that ended without a response (the sum of `errors`).
    pub failed: u64,
    /// Responses with status < 400 or listed in `--accept-status`.
    pub ok: u64,
    /// `failed` by error class, in [`stats::ErrorClass::ALL`] order.
    pub errors: [u64; stats::CLASSES],
    /// Connections open now (TCP established).
    pub open: u64,
    pub reconnects: u64,
    /// Open loop: the summed lateness of the writes behind their slots, in microseconds, and
    /// how many writes that is.
    pub lag_us: u64,
    pub lagged: u64,
    /// Open loop: the requests the schedule had due since the run began (warm-up included),
    /// and those of them due and not sent now (0 and 0 in closed loop).
    pub scheduled: u64,
    pub due_unsent: u64,
    /// CPU time of the generator's process so far (user + system, all its threads), and the
    /// load threads it runs: busy = CPU / (wall x threads).
    pub cpu: Duration,
    pub threads: u32,
    /// HTTP/3 runs: datagrams read and sent, QUIC packets declared lost (0 over TCP).
    pub datagrams_in: u64,
    pub datagrams_out: u64,
    pub lost_packets: u64,
    /// gRPC runs: calls by status code 0-16 (all zero otherwise).
    pub grpc: [u64; qpslab_http::grpc::CODES.len()],
}

impl Progress {
    /// Adds another part's counters (an agent's): the gauge and the CPU add up too; the
    /// elapsed time is the furthest along and warming up lasts while any part warms up.
    pub fn absorb(&mut self, o: &Progress) {
        self.elapsed = self.elapsed.max(o.elapsed);
        self.warming_up |= o.warming_up;
        self.sent += o.sent;
        self.completed += o.completed;
        self.failed += o.failed;
        self.ok += o.ok;
        for (sum, e) in self.errors.iter_mut().zip(o.errors) {
            *sum += e;
        }
        self.open += o.open;
        self.reconnects += o.reconnects;
        self.lag_us += o.lag_us;
        self.lagged += o.lagged;
        self.scheduled += o.scheduled;
        self.due_unsent += o.due_unsent;
        self.cpu += o.cpu;
        self.threads += o.threads;
        self.datagrams_in += o.datagrams_in;
        self.datagrams_out += o.datagrams_out;
        self.lost_packets += o.lost_packets;
        for (sum, n) in self.grpc.iter_mut().zip(o.grpc) {
            *sum += n;
        }
    }
}

/// Counters at one per-second sample, summed over threads.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Interval {
    /// Seconds since the start of measurement.
    pub elapsed_s: f64,
    pub sent: u64,
    pub completed: u64,
    pub failed: u64,
}

/// Everything a run measured, merged over threads. It is also what an agent sends back
/// ([`wire`]): the histograms as HdrHistogram V2, without the local matters (a `--log` error,
/// the port budget).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunResult {
    pub rec: Recorder,
    pub in_flight_at_stop: u64,
    /// From the end of warm-up to the last thread's stop.
    pub duration: Duration,
    /// Worker threads' CPU time during measurement.
    pub cpu: CpuTime,
    /// Of `cpu`: time spent polling for events instead of sleeping (`--poll`).
    pub polled: Duration,
    /// Time (summed over threads) in turns that could hold out for answers (`--linger`).
    #[serde(default)]
    pub lingered: Duration,
    pub started_at: SystemTime,
    /// Cumulative counters at the end of each whole second of measurement, and at the end of
    /// the run: the last row holds the run's totals, so the rows add up to them exactly.
    pub intervals: Vec<Interval>,
    /// [`request_stop`] ended the run before its duration or request count.
    pub stopped_early: bool,
    /// Open loop: requests due but never sent when the run stopped.
    pub due_unsent: u64,
    /// Open loop: connections that were free, waiting for the schedule, when the run stopped.
    pub idle_at_stop: usize,
    /// `in_flight_at_stop` by target.
    pub in_flight_by_target: Vec<u64>,
    /// `--log` could not be written completely (the run itself is whole).
    #[serde(skip)]
    pub log_error: Option<String>,
    /// Source tuples against the run's needs, for the tightest destination.
    #[serde(skip)]
    pub port_budget: Option<source::PortBudget>,
    /// Keep-alive runs: the connections opened before the run's clock started.
    pub setup: Option<Setup>,
    /// The connections still waiting for an answer at the stop.
    #[serde(default)]
    pub waiting: Waiting,
    /// A cgroup CPU quota over this process, and how often it held the run back: a throttled
    /// generator's threads wait instead of running, so its busy share alone looks idle.
    pub throttling: Option<qpslab_sys::cgroup::Throttling>,
    /// The stretches of the window with no response on any connection while requests were
    /// out, 2 ms or longer ([`stalls`]); the report keeps those long enough to be stalls.
    #[serde(default)]
    pub stalls: Vec<stalls::Gap>,
}

/// The connect phase before a keep-alive run: every connection is opened (or has failed once)
/// before the measured window, so connection setup is not measured as load.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Setup {
    pub connections: usize,
    pub opened: usize,
    /// Not open when the run started: failed once, closed by the server, or still connecting
    /// at a stop; reopened during the run.
    pub failed: usize,
    /// Of `failed`: opened, then closed by the server (its idle timeout) while the others
    /// were still opening.
    pub closed_by_server: usize,
    /// From the start of the threads to the run's clock.
    pub duration: Duration,
    /// The first failure's message.
    pub example: Option<String>,
}

/// Checks that the run can start: the descriptor limit fits the connections, and every target
/// address accepts a TCP connection (and its TLS handshake), so a wrong port fails in milliseconds instead of after the whole
/// duration.
pub fn preflight(cfg: &LoadConfig) -> Result<(), LoadError> {
    ensure_fd_limit(cfg.connections, cfg.threads)?;
    if let Some(msg) = cfg.port_budgets().first().and_then(source::PortBudget::error) {
        let flag = if cfg.source.is_some() { "--source" } else { "--connections" };
        return Err(ConfigError::new(flag, msg).into());
    }
    if let Some(source) = &cfg.source {
        source.check_local()?;
    }
    let wait = cfg.timeout.min(Duration::from_secs(3));
    // Once per address and TLS name: a pool's thousands of lines share a few.
    for (e, url) in cfg.variants.endpoints() {
        if let Some(h3) = &cfg.h3 {
            let name = e.tls_name.as_ref().map_or_else(|| e.addr.ip().to_string(), tls::name_text);
            quic::handshake_once(&h3.client, e.addr, &name, wait).map_err(|p| match p {
                quic::Preflight::Unreachable(reason) => LoadError::Unreachable {
                    url: url.to_string(),
                    addr: format!("{} over UDP", e.addr),
                    reason,
                },
                quic::Preflight::Tls(reason) => LoadError::Tls { url: url.to_string(), reason },
            })?;
            continue;
        }
        let peer = cfg.unix_peer.clone().unwrap_or_else(|| socket2::SockAddr::from(e.addr));
        let sock = connect_once(&peer, wait).map_err(|err| LoadError::Unreachable {
            url: url.to_string(),
            addr: match &cfg.unix_socket {
                Some(p) => format!("unix:{}", p.display()),
                None => e.addr.to_string(),
            },
            reason: qpslab_sys::net::message(&err),
        })?;
        if let (Some(tls), Some(name)) = (&cfg.tls, &e.tls_name) {
            tls::handshake_once(tls, name, sock, (wait, cfg.h2.is_some()))
                .map_err(|reason| LoadError::Tls { url: url.to_string(), reason })?;
        }
    }
    Ok(())
}

/// A blocking connection to `peer` (a TCP address or a unix socket), within `wait`.
fn connect_once(peer: &socket2::SockAddr, wait: Duration) -> std::io::Result<socket2::Socket> {
    let protocol = (!peer.is_unix()).then_some(socket2::Protocol::TCP);
    let sock = socket2::Socket::new(peer.domain(), socket2::Type::STREAM.cloexec(), protocol)?;
    sock.connect_timeout(peer, wait)?;
    Ok(sock)
}

/// Runs the load and returns the merged measurements. The run ends at its duration or request
/// count, or early when `stop` is set (a SIGINT handler may set it). `feed` hears, on the
/// calling thread, that every thread is ready (and may hold the start there), the live
/// counters about once a second, and each second's merged histogram if it wants them; it
/// sees the same counters whatever it does with them.
pub fn run(
    cfg: &LoadConfig,
    stop: &AtomicBool,
    feed: &mut dyn Feed,
) -> Result<RunResult, LoadError> {
    ensure_fd_limit(cfg.connections, cfg.threads)?;
    let log = match &cfg.log {
        None => None,
        Some(path) => Some(IntervalLog::new(hlog::HlogWriter::create(path).map_err(|e| {
            ConfigError::new("--log", format!("cannot create {}: {e}", path.display()))
        })?)),
    };
    let groups = cfg.groups();
    let shared = worker::Shared {
        cfg,
        conn_groups: cfg.connection_groups(groups),
        groups,
        heads: (0..cfg.variants.len()).map(|i| cfg.variants.head(i)).collect(),
        idempotent: (0..cfg.variants.len()).map(|i| cfg.variants.idempotent(i)).collect(),
        stop_flag: stop,
        wrong_protocol: std::sync::OnceLock::new(),
        intervals: cfg.log.is_some() || feed.wants_seconds(),
        target_group: cfg.pool.as_ref().map_or_else(Vec::new, config::Pool::recorded_groups),
        h3_wires: match cfg.h3 {
            Some(_) => groups.iter().map(quic::wire::wires).collect::<Result<_, _>>()?,
            None => Vec::new(),
        },
    };
    let progress: Vec<ThreadProgress> =
        (0..cfg.threads).map(|_| ThreadProgress::default()).collect();
    let crew = Crew {
        name: "qpslab-load",
        workers: cfg.threads,
        cpus: cfg.cpus.as_deref(),
        every: Some(Duration::from_secs(1)),
        start_line: true,
    };
    let spawned = Instant::now();
    let mut watcher = Watcher {
        cfg,
        progress: &progress,
        feed,
        log,
        merge: IntervalMerge::new(cfg.threads),
        clock: None,
        ready_at: None,
        limits: Vec::new(),
    };
    let outcomes = crew::run(
        &crew,
        |hand: &Hand<'_, Msg, Clock>| run_thread(&shared, hand, &progress[hand.index()]),
        &mut watcher,
    )
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?;
    if let Some((url, reason)) = shared.wrong_protocol.into_inner() {
        return Err(LoadError::WrongProtocol { url, reason });
    }
    let limits = qpslab_sys::cgroup::cpu_limits(&Root::live(), std::process::id());
    let throttling = qpslab_sys::cgroup::throttling(&watcher.limits, &limits);
    let clock = watcher.clock.unwrap_or_else(|| Clock::now(cfg));
    let merged = merge(cfg, &outcomes, clock, spawned, watcher.ready_at.unwrap_or(clock.start));
    // The final counters (the last sample may be a second old), then the intervals every
    // thread had not yet moved past (the last, partial one).
    watcher.feed.event(&Event::Progress(&final_progress(&merged, cfg.threads)));
    let rest = watcher.merge.rest();
    if watcher.feed.wants_seconds() {
        for (i, h) in &rest {
            watcher.feed.event(&Event::Second { index: *i, hist: h });
        }
    }
    let log_error =
        watcher.log.map(|l| l.finish(rest, merged.duration, cfg.duration)).and_then(Result::err);
    Ok(RunResult {
        throttling,
        stopped_early: stop.load(Ordering::Relaxed),
        log_error,
        port_budget: cfg.port_budgets().first().cloned(),
        ..merged
    })
}

/// The connections as the run stopped: those with a counted request outstanding, by how long
/// their oldest one had waited (what a run in which the server never served some connections
/// looks like from the generator; the report compares the waits with the run's p99.9), and
/// each open connection's smallest round trip (the path's own, apart from the server's time).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Waiting {
    /// Connections that had completed no response in the measured window, in µs.
    pub unanswered_us: Vec<u64>,
    /// Connections that had, in µs.
    pub answered_us: Vec<u64>,
    /// The kernel's smallest round trip of each open TCP connection, in µs.
    #[serde(default)]
    pub min_rtt_us: Vec<u32>,
}

impl Waiting {
    pub(crate) fn absorb(&mut self, other: &Waiting) {
        self.unanswered_us.extend_from_slice(&other.unanswered_us);
        self.answered_us.extend_from_slice(&other.answered_us);
        self.min_rtt_us.extend_from_slice(&other.min_rtt_us);
    }
}

/// Adds up what the threads measured.
fn merge(
    cfg: &LoadConfig,
    outcomes: &[worker::ThreadOutcome],
    clock: Clock,
    spawned: Instant,
    ready_at: Instant,
) -> RunResult {
    let mut rec = Recorder::default();
    let (mut in_flight_at_stop, mut due_unsent, mut idle_at_stop) = (0, 0, 0);
    let mut cpu = CpuTime::default();
    let (mut polled, mut lingered) = (Duration::ZERO, Duration::ZERO);
    let mut ended = clock.measure_start;
    let mut in_flight_by_target = vec![0; cfg.variants.len()];
    let mut waiting = Waiting::default();
    let mut setup = Setup {
        connections: cfg.connections,
        duration: ready_at.saturating_duration_since(spawned),
        ..Setup::default()
    };
    for o in outcomes {
        setup.opened += o.setup.opened;
        setup.failed += o.setup.failed;
        setup.closed_by_server += o.setup.closed_by_server;
        if setup.example.is_none() {
            setup.example.clone_from(&o.setup.example);
        }
        due_unsent += o.due_unsent;
        idle_at_stop += o.idle_at_stop;
        rec.merge(&o.rec);
        in_flight_at_stop += o.in_flight;
        waiting.absorb(&o.waiting);
        cpu = cpu + o.cpu;
        polled += o.polled;
        lingered += o.lingered;
        ended = ended.max(o.ended);
        for (a, b) in in_flight_by_target.iter_mut().zip(&o.in_flight_by_target) {
            *a += b;
        }
    }
    let duration = ended.saturating_duration_since(clock.measure_start);
    let logs = outcomes.iter().map(|o| &o.rec.stalls).filter(|l| l.answered());
    RunResult {
        stalls: stalls::common(logs.map(|l| &l.gaps[..])),
        intervals: second_rows(&rec, duration),
        rec,
        in_flight_at_stop,
        duration,
        cpu,
        polled,
        lingered,
        started_at: clock.started_at,
        stopped_early: false,
        due_unsent,
        idle_at_stop,
        in_flight_by_target,
        log_error: None,
        port_budget: None,
        setup: cfg.opens_first().then_some(setup),
        throttling: None,
        waiting,
    }
}

/// A tail shorter than this after the last whole second joins that second's row: its rate
/// over a few milliseconds would be noise.
const SHORT_TAIL_S: f64 = 0.25;

/// The per-second rows of a run that lasted `duration`: the counts at each whole second, and
/// the totals at the end.
fn second_rows(rec: &Recorder, duration: Duration) -> Vec<Interval> {
    let row = |elapsed_s: f64, [sent, completed, failed]: [u64; 3]| Interval {
        elapsed_s,
        sent,
        completed,
        failed,
    };
    let end = duration.as_secs_f64();
    let mut rows: Vec<Interval> =
        rec.seconds.iter().enumerate().map(|(i, c)| row((i + 1) as f64, *c)).collect();
    let totals = rec.totals();
    match rows.last_mut() {
        // Nothing happened after the last whole second.
        Some(last) if [last.sent, last.completed, last.failed] == totals => {
            last.elapsed_s = last.elapsed_s.min(end);
        }
        Some(last) if end - last.elapsed_s < SHORT_TAIL_S => *last = row(end, totals),
        _ if end > 0.0 => rows.push(row(end, totals)),
        _ => {}
    }
    rows
}

/// The calling thread during a run: starts the run's clock when every load thread is ready
/// (and the observer lets it), samples the progress counters once a second (the per-second rows
/// and the observer's progress), and merges the threads' per-second histograms (for `--log`
/// and the observer).
struct Watcher<'a> {
    cfg: &'a LoadConfig,
    progress: &'a [ThreadProgress],
    feed: &'a mut dyn Feed,
    log: Option<IntervalLog>,
    merge: IntervalMerge,
    clock: Option<Clock>,
    ready_at: Option<Instant>,
    /// This process's cgroup CPU limits when the run's clock started.
    limits: Vec<qpslab_sys::cgroup::CpuLimit>,
}

impl Supervise<Msg, Clock> for Watcher<'_> {
    fn start(&mut self) -> Clock {
        // The connections are open now; what the observer holds is not setup.
        self.ready_at = Some(Instant::now());
        self.feed.event(&Event::Ready);
        self.limits = qpslab_sys::cgroup::cpu_limits(&Root::live(), std::process::id());
        let clock = Clock::now(self.cfg);
        if let Some(log) = &mut self.log {
            log.begin(clock.started_at + self.cfg.warmup);
        }
        self.clock = Some(clock);
        clock
    }

    fn message(&mut self, thread: usize, Msg::Interval { index, hist }: Msg) {
        let ended = self.clock.map_or(0, |c| {
            Instant::now().saturating_duration_since(c.measure_start).as_secs() as u32
        });
        for (i, h) in self.merge.add(thread, index, &hist, ended) {
            if let Some(l) = &mut self.log {
                l.write(&h, i, Duration::from_secs(1));
            }
            if self.feed.wants_seconds() {
                self.feed.event(&Event::Second { index: i, hist: &h });
            }
        }
    }

    fn tick(&mut self) {
        let Some(clock) = self.clock else { return };
        let p = sum_progress(self.progress, clock.measure_start);
        self.feed.event(&Event::Progress(&p));
    }
}

/// Per-second histograms as threads hand them over, merged over threads. A thread hands an
/// interval over once it has passed its end, or when it stops (the last, partial one): an
/// interval is complete once every thread has handed it over and the second has ended on the
/// watcher's clock, so a partial last interval waits for [`IntervalMerge::rest`].
struct IntervalMerge {
    pending: BTreeMap<u32, Histogram<u64>>,
    /// Per thread, the highest interval it has handed over.
    reported: Vec<Option<u32>>,
}

impl IntervalMerge {
    fn new(threads: usize) -> Self {
        Self { pending: BTreeMap::new(), reported: vec![None; threads] }
    }

    /// Adds a thread's interval, `ended` whole seconds into measurement; returns the
    /// intervals now complete, in order.
    fn add(
        &mut self,
        thread: usize,
        index: u32,
        hist: &Histogram<u64>,
        ended: u32,
    ) -> Vec<(u32, Histogram<u64>)> {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.pending.entry(index).or_insert_with(stats::new_histogram).add(hist);
        self.reported[thread] = self.reported[thread].max(Some(index));
        let handed_over = self.reported.iter().map(|r| r.map_or(0, |i| i + 1)).min().unwrap_or(0);
        let done_below = handed_over.min(ended);
        let mut out = Vec::new();
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() >= done_below {
                break;
            }
            out.push(entry.remove_entry());
        }
        out
    }

    /// What is left when the run ends.
    fn rest(&mut self) -> Vec<(u32, Histogram<u64>)> {
        std::mem::take(&mut self.pending).into_iter().collect()
    }
}

/// `--log`: the merged per-second histograms, written as they complete (the rest when the run
/// ends).
struct IntervalLog {
    writer: hlog::HlogWriter,
    error: Option<String>,
}

impl IntervalLog {
    fn new(writer: hlog::HlogWriter) -> Self {
        Self { writer, error: None }
    }

    /// Writes the header once the start of measurement is known.
    fn begin(&mut self, base: SystemTime) {
        if let Err(e) = self.writer.begin(base) {
            self.error = Some(e.to_string());
        }
    }

    fn write(&mut self, h: &Histogram<u64>, index: u32, length: Duration) {
        if self.error.is_none() {
            let start = Duration::from_secs(u64::from(index));
            if let Err(e) = self.writer.write(h, start, length) {
                self.error = Some(e.to_string());
            }
        }
    }

    /// Writes what is left; the last interval ends with the run (`run` long). An empty last
    /// interval that starts at or after the configured `planned` length holds nothing of the
    /// run: the threads stopped at the boundary, a few milliseconds late at most.
    fn finish(
        mut self,
        rest: Vec<(u32, Histogram<u64>)>,
        run: Duration,
        planned: Option<Duration>,
    ) -> Result<(), String> {
        let last = rest.last().map(|(i, _)| *i);
        for (i, h) in rest {
            let start = Duration::from_secs(u64::from(i));
            let length =
                if Some(i) == last { run.saturating_sub(start) } else { Duration::from_secs(1) };
            let past_the_end = planned.is_some_and(|p| start >= p);
            if h.is_empty() && (length < Duration::from_millis(1) || past_the_end) {
                continue;
            }
            self.write(&h, i, length);
        }
        match self.error {
            Some(e) => Err(e),
            None => self.writer.finish().map_err(|e| e.to_string()),
        }
    }
}

/// Descriptors a run needs besides one per connection and one epoll set per thread (std
/// streams, the preflight, files the caller has open).
const FD_MARGIN: u64 = 64;

/// Raises the soft RLIMIT_NOFILE (and, with the privilege, the hard one) so that `connections`
/// over `threads` fit; fails with the numbers when they cannot.
pub fn ensure_fd_limit(connections: usize, threads: usize) -> Result<(), ConfigError> {
    let needed = (connections + threads) as u64 + FD_MARGIN;
    qpslab_sys::nofile::raise_to(needed).map_err(|(soft, hard)| {
        ConfigError::new(
            "--connections",
            format!(
                "{connections} connections need about {needed} file descriptors but the limit \
                 is {soft} (hard {hard}); raise it with 'ulimit -n {needed}' (or LimitNOFILE= \
                 for a service) or use fewer connections"
            ),
        )
    })
}

/// One load thread: builds its event loop (in keep-alive runs, opens its connections), waits at
/// the start line for the others, runs. A thread that fails before the line does not hold them.
fn run_thread(
    shared: &worker::Shared<'_>,
    hand: &Hand<'_, Msg, Clock>,
    progress: &ThreadProgress,
) -> std::io::Result<worker::ThreadOutcome> {
    if shared.cfg.h3.is_some() {
        return quic::run_thread(shared, hand, progress);
    }
    let send = |index: u32, hist: Histogram<u64>| hand.send(Msg::Interval { index, hist });
    let mut w = worker::Worker::new(shared, hand.index(), progress, &send)?;
    w.connect_phase()?;
    let clock = hand.ready();
    w.run(clock)
}

/// The run's live counters at its end: its totals, no connection open.
pub fn final_progress(r: &RunResult, threads: usize) -> Progress {
    let cpu = CpuTime::of_current_process();
    Progress {
        elapsed: r.duration,
        warming_up: false,
        sent: r.rec.sent,
        completed: r.rec.completed,
        failed: r.rec.failed,
        ok: r.rec.ok,
        errors: r.rec.errors,
        open: 0,
        reconnects: r.rec.reconnects,
        lag_us: r.rec.lag_total_us,
        lagged: r.rec.send_lag.len(),
        // The schedule's count is not kept to the end: the last live one stands.
        scheduled: 0,
        due_unsent: r.due_unsent,
        cpu: cpu.user + cpu.sys,
        threads: threads as u32,
        datagrams_in: r.rec.quic.map_or(0, |q| q.datagrams_in),
        datagrams_out: r.rec.quic.map_or(0, |q| q.datagrams_out),
        lost_packets: r.rec.quic.map_or(0, |q| q.lost_packets),
        grpc: r.rec.grpc.as_ref().map_or([0; qpslab_http::grpc::CODES.len()], |g| g.codes),
    }
}

fn sum_progress(threads: &[ThreadProgress], measure_start: Instant) -> Progress {
    let now = Instant::now();
    let cpu = CpuTime::of_current_process();
    let mut p = Progress {
        elapsed: now.saturating_duration_since(measure_start),
        warming_up: now < measure_start,
        cpu: cpu.user + cpu.sys,
        threads: threads.len() as u32,
        ..Progress::default()
    };
    for t in threads {
        p.sent += t.sent.load(Ordering::Relaxed);
        p.completed += t.completed.load(Ordering::Relaxed);
        p.failed += t.failed.load(Ordering::Relaxed);
        p.ok += t.ok.load(Ordering::Relaxed);
        for (sum, e) in p.errors.iter_mut().zip(&t.errors) {
            *sum += e.load(Ordering::Relaxed);
        }
        p.open += t.open.load(Ordering::Relaxed);
        p.reconnects += t.reconnects.load(Ordering::Relaxed);
        p.lag_us += t.lag_us.load(Ordering::Relaxed);
        p.lagged += t.lagged.load(Ordering::Relaxed);
        p.scheduled += t.scheduled.load(Ordering::Relaxed);
        p.due_unsent += t.due_unsent.load(Ordering::Relaxed);
        p.datagrams_in += t.datagrams_in.load(Ordering::Relaxed);
        p.datagrams_out += t.datagrams_out.load(Ordering::Relaxed);
        p.lost_packets += t.lost_packets.load(Ordering::Relaxed);
        for (sum, n) in p.grpc.iter_mut().zip(&t.grpc) {
            *sum += n.load(Ordering::Relaxed);
        }
    }
    p
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    /// Regression: a 4 s run whose threads stopped 3 ms late logged a fifth, empty interval.
    #[test]
    fn an_empty_interval_past_the_planned_end_is_not_logged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.hlog");
        let mut log = IntervalLog::new(hlog::HlogWriter::create(&path).unwrap());
        let mut merge = IntervalMerge::new(1);
        log.begin(SystemTime::UNIX_EPOCH);
        for i in 0..5u32 {
            let mut h = stats::new_histogram();
            if i < 4 {
                h.record(100).unwrap();
            }
            // Intervals 0-3 are handed over after their second; 4 when the thread stopped,
            // 3 ms into it.
            let ended = if i < 4 { i + 1 } else { 4 };
            for (k, done) in merge.add(0, i, &h, ended) {
                log.write(&done, k, Duration::from_secs(1));
            }
        }
        let four = Some(Duration::from_secs(4));
        log.finish(merge.rest(), Duration::from_millis(4003), four).unwrap();
        let file = hlog::read_file(&path).unwrap();
        assert_eq!(file.intervals.len(), 4);
        // Without a planned length (a -n run), the trailing interval is the run's own.
        let path = dir.path().join("n.hlog");
        let mut log = IntervalLog::new(hlog::HlogWriter::create(&path).unwrap());
        let mut merge = IntervalMerge::new(1);
        log.begin(SystemTime::UNIX_EPOCH);
        assert!(merge.add(0, 0, &stats::new_histogram(), 0).is_empty());
        log.finish(merge.rest(), Duration::from_millis(500), None).unwrap();
        assert_eq!(hlog::read_file(&path).unwrap().intervals.len(), 1);
    }
}
