//! qpslab's HTTP/1.1 load engine.
//!
//! Owns: running a validated [`LoadConfig`] on per-thread event loops ([`run`]), exact request
//! accounting and latency recording ([`stats`]), and turning the merged result into the report
//! users and scripts read ([`report`]). Does not own flag parsing, printing or exit codes: the
//! CLI does.

pub mod config;
mod gate;
pub mod hlog;
mod pacer;
pub mod rate;
pub mod report;
pub mod source;
pub mod stats;
pub mod targets;
mod worker;

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::Histogram;
use thiserror::Error;

use worker::Msg;

pub use config::{ConfigError, LoadConfig, LoadOptions, Target};
pub use report::Report;
pub use stats::{ErrorClass, Recorder};
pub use worker::{CpuTime, ThreadProgress};

/// Why a run could not start or ran into trouble outside the request accounting.
#[derive(Debug, Error)]
pub enum LoadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot connect to {url} ({addr}): {reason}; is a server listening there?")]
    Unreachable { url: String, addr: std::net::SocketAddr, reason: String },
    #[error("thread {thread}: {source}")]
    Thread { thread: usize, source: std::io::Error },
}

/// Live counters, summed over threads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Since the start of measurement (zero during warm-up).
    pub elapsed: Duration,
    pub warming_up: bool,
    pub sent: u64,
    pub completed: u64,
    pub failed: u64,
}

/// Counters at one per-second sample, summed over threads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    /// Seconds since the start of measurement.
    pub elapsed_s: f64,
    pub sent: u64,
    pub completed: u64,
    pub failed: u64,
}

/// Everything a run measured, merged over threads.
#[derive(Debug)]
pub struct RunResult {
    pub rec: Recorder,
    pub in_flight_at_stop: u64,
    /// From the end of warm-up to the last thread's stop.
    pub duration: Duration,
    /// Worker threads' CPU time during measurement.
    pub cpu: CpuTime,
    /// Of `cpu`: time spent polling for events instead of sleeping (`--poll`).
    pub polled: Duration,
    pub started_at: SystemTime,
    /// Cumulative counters once a second during measurement (from the live progress counters,
    /// which threads publish every 10 ms or so).
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
    pub log_error: Option<String>,
    /// Source tuples against the run's needs, for the tightest destination.
    pub port_budget: Option<source::PortBudget>,
    /// Keep-alive runs: the connections opened before the run's clock started.
    pub setup: Option<Setup>,
}

/// The connect phase before a keep-alive run: every connection is opened (or has failed once)
/// before the measured window, so connection setup is not measured as load.
#[derive(Debug, Clone, Default, PartialEq)]
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

static STOP: AtomicBool = AtomicBool::new(false);

/// Asks a running [`run`] to stop early, as at the end of its duration. Async-signal-safe: a
/// SIGINT handler may call it.
pub fn request_stop() {
    STOP.store(true, Ordering::Relaxed);
}

/// Checks that the run can start: the descriptor limit fits the connections, and every target
/// accepts a TCP connection, so a wrong port fails in milliseconds instead of after the whole
/// duration.
pub fn preflight(cfg: &LoadConfig) -> Result<(), LoadError> {
    ensure_fd_limit(cfg.connections, cfg.threads)?;
    if let Some(msg) = cfg.port_budgets().first().and_then(source::PortBudget::error) {
        let flag = if cfg.source.is_some() { "--source" } else { "--connections" };
        return Err(ConfigError::new(flag, msg).into());
    }
    let wait = cfg.timeout.min(Duration::from_secs(3));
    for t in &cfg.targets {
        TcpStream::connect_timeout(&t.addr, wait).map_err(|e| LoadError::Unreachable {
            url: t.url.clone(),
            addr: t.addr,
            reason: stats::io_message(&e),
        })?;
    }
    Ok(())
}

/// Runs the load and returns the merged measurements. `on_progress` is called about once a
/// second from the calling thread; it sees the same counters whatever it does with them.
pub fn run(
    cfg: &LoadConfig,
    on_progress: &mut dyn FnMut(&Progress),
) -> Result<RunResult, LoadError> {
    ensure_fd_limit(cfg.connections, cfg.threads)?;
    STOP.store(false, Ordering::Relaxed);
    let mut intervals = Vec::new();
    let mut log = match &cfg.log {
        None => None,
        Some(path) => Some(IntervalLog::new(
            hlog::HlogWriter::create(path).map_err(|e| {
                ConfigError::new("--log", format!("cannot create {}: {e}", path.display()))
            })?,
            cfg.threads,
        )),
    };
    let groups = cfg.groups();
    let shared = worker::Shared {
        cfg,
        conn_groups: cfg.connection_groups(&groups),
        groups,
        heads: cfg.targets.iter().map(|t| t.head).collect(),
        idempotent: cfg.targets.iter().map(|t| config::idempotent(&t.method)).collect(),
        stop_flag: &STOP,
    };
    let gate = gate::StartGate::default();
    let progress: Vec<ThreadProgress> =
        (0..cfg.threads).map(|_| ThreadProgress::default()).collect();
    let (done_tx, done_rx) = mpsc::channel();
    let spawned = Instant::now();
    let (outcomes, clock) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..cfg.threads)
            .map(|i| {
                let (shared, gate, progress, done) =
                    (&shared, &gate, &progress[i], done_tx.clone());
                std::thread::Builder::new()
                    .name(format!("qpslab-load-{i}"))
                    .spawn_scoped(scope, move || {
                        let result = run_thread(shared, gate, i, progress, done.clone());
                        let _ = done.send(Msg::Done);
                        result
                    })
                    .map_err(|source| LoadError::Thread { thread: i, source })
            })
            .collect();
        let running = handles.iter().filter(|h| h.is_ok()).count();
        drop(done_tx);
        let started = gate.open(running, || {
            let start = Instant::now();
            let measure_start = start + cfg.warmup;
            gate::Clock {
                start,
                started_at: SystemTime::now(),
                measure_start,
                stop_at: cfg.duration.map(|d| measure_start + d),
            }
        });
        if let Some(log) = &mut log {
            log.begin(started.started_at + cfg.warmup);
        }
        intervals =
            watch(&done_rx, running, &progress, started.measure_start, on_progress, &mut log);
        let outcomes = handles
            .into_iter()
            .enumerate()
            .map(|(i, h)| match h?.join() {
                Ok(r) => r.map_err(|source| LoadError::Thread { thread: i, source }),
                Err(_) => Err(LoadError::Thread {
                    thread: i,
                    source: std::io::Error::other("load thread panicked"),
                }),
            })
            .collect::<Result<Vec<_>, _>>();
        (outcomes, started)
    });
    let outcomes = outcomes?;
    let (started_at, measure_start) = (clock.started_at, clock.measure_start);
    let mut rec = Recorder::default();
    let mut in_flight_at_stop = 0;
    let mut cpu = CpuTime::default();
    let mut polled = Duration::ZERO;
    let mut ended = measure_start;
    let (mut due_unsent, mut idle_at_stop) = (0, 0);
    let mut in_flight_by_target = vec![0; cfg.targets.len()];
    let mut setup = Setup {
        connections: cfg.connections,
        duration: clock.start.saturating_duration_since(spawned),
        ..Setup::default()
    };
    for o in &outcomes {
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
        cpu = cpu + o.cpu;
        polled += o.polled;
        ended = ended.max(o.ended);
        for (a, b) in in_flight_by_target.iter_mut().zip(&o.in_flight_by_target) {
            *a += b;
        }
    }
    let duration = ended.saturating_duration_since(measure_start);
    let log_error = log.map(|l| l.finish(duration)).and_then(Result::err);
    Ok(RunResult {
        rec,
        in_flight_at_stop,
        duration,
        cpu,
        polled,
        started_at,
        intervals,
        stopped_early: STOP.load(Ordering::Relaxed),
        due_unsent,
        idle_at_stop,
        in_flight_by_target,
        log_error,
        port_budget: cfg.port_budgets().into_iter().next(),
        setup: cfg.opens_first().then_some(setup),
    })
}

/// `--log`: per-interval histograms as threads hand them over, merged over threads, written
/// once every thread has moved past an interval (the rest when the run ends).
struct IntervalLog {
    writer: hlog::HlogWriter,
    pending: BTreeMap<u32, Histogram<u64>>,
    /// Per thread, the highest interval it has handed over.
    reported: Vec<Option<u32>>,
    error: Option<String>,
}

impl IntervalLog {
    fn new(writer: hlog::HlogWriter, threads: usize) -> Self {
        Self { writer, pending: BTreeMap::new(), reported: vec![None; threads], error: None }
    }

    fn add(&mut self, thread: usize, index: u32, hist: &Histogram<u64>) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.pending.entry(index).or_insert_with(stats::new_histogram).add(hist);
        self.reported[thread] = self.reported[thread].max(Some(index));
        let done_below = self.reported.iter().map(|r| r.unwrap_or(0)).min().unwrap_or(0);
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() >= done_below {
                break;
            }
            let (i, h) = entry.remove_entry();
            self.write(&h, i, Duration::from_secs(1));
        }
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

    /// Writes what is left; the last interval ends with the run.
    fn finish(mut self, run: Duration) -> Result<(), String> {
        let last = self.pending.keys().next_back().copied();
        for (i, h) in std::mem::take(&mut self.pending) {
            let start = Duration::from_secs(u64::from(i));
            let length =
                if Some(i) == last { run.saturating_sub(start) } else { Duration::from_secs(1) };
            if h.is_empty() && length < Duration::from_millis(1) {
                continue; // the run ended on the interval boundary
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

/// Waits for `running` threads to report done; once a second, samples their counters for the
/// progress callback and the per-second interval rows.
fn watch(
    msgs: &mpsc::Receiver<Msg>,
    mut running: usize,
    progress: &[ThreadProgress],
    measure_start: Instant,
    on_progress: &mut dyn FnMut(&Progress),
    log: &mut Option<IntervalLog>,
) -> Vec<Interval> {
    let mut intervals = Vec::new();
    let mut next = Instant::now() + Duration::from_secs(1);
    while running > 0 {
        match msgs.recv_timeout(next.saturating_duration_since(Instant::now())) {
            Ok(Msg::Done) => running -= 1,
            Ok(Msg::Interval { thread, index, hist }) => {
                if let Some(l) = log {
                    l.add(thread, index, &hist);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let p = sum_progress(progress, measure_start);
                if !p.warming_up {
                    intervals.push(Interval {
                        elapsed_s: p.elapsed.as_secs_f64(),
                        sent: p.sent,
                        completed: p.completed,
                        failed: p.failed,
                    });
                }
                on_progress(&p);
                next += Duration::from_secs(1);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    intervals
}

/// One load thread: builds its event loop (open loop: opens its connections), waits at the
/// start line for the others, runs. It reaches the start line even when it fails before it,
/// so the others are not held.
fn run_thread(
    shared: &worker::Shared<'_>,
    gate: &gate::StartGate,
    i: usize,
    progress: &ThreadProgress,
    msgs: mpsc::Sender<Msg>,
) -> std::io::Result<worker::ThreadOutcome> {
    let ready = (|| {
        if let Some(cpus) = &shared.cfg.cpus {
            qpslab_sys::cpus::pin_current_thread(cpus[i % cpus.len()])?;
        }
        let mut w = worker::Worker::new(shared, i, progress, msgs)?;
        w.connect_phase()?;
        Ok::<_, std::io::Error>(w)
    })();
    let clock = gate.arrive();
    ready?.run(clock)
}

fn sum_progress(threads: &[ThreadProgress], measure_start: Instant) -> Progress {
    let now = Instant::now();
    let mut p = Progress {
        elapsed: now.saturating_duration_since(measure_start),
        warming_up: now < measure_start,
        ..Progress::default()
    };
    for t in threads {
        p.sent += t.sent.load(Ordering::Relaxed);
        p.completed += t.completed.load(Ordering::Relaxed);
        p.failed += t.failed.load(Ordering::Relaxed);
    }
    p
}
