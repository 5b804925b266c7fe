//! qpslab's benchmark target: a minimal, fast HTTP/1.1 server that no client can crash or stall.
//!
//! Owns: binding listeners in nginx's accept modes ([`config::AcceptMode`]), one epoll worker
//! per thread (optionally pinned), the responses (plaintext by default, httpterm-style controls
//! in the query string), robustness limits and deadlines, live counters and a drain on stop.
//! Does not own flag parsing or printing: the CLI does.

pub mod config;
pub mod date;
mod inbuf;
pub mod listen;
mod respond;
mod worker;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use thiserror::Error;

pub use config::{AcceptMode, ConfigError, ServeConfig, ServeOptions};
pub use qpslab_sys::sockets::Holder;
pub use worker::{WorkerCounters, WorkerStats};

/// Why the server could not start or a worker failed.
#[derive(Debug, Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("--listen {addr}: cannot listen there: {}", os_message(source))]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("--listen {addr}: the port is already in use by {}; stop it or pick another port (--share-port shares it on purpose: the servers then split the connections)", holders_text(holders))]
    PortInUse { addr: SocketAddr, holders: Vec<Holder> },
    #[error("--cpus: cannot pin worker {worker} to CPU {cpu}: {source}")]
    Pin { worker: usize, cpu: usize, source: std::io::Error },
    #[error("worker {worker}: {source}")]
    Worker { worker: usize, source: std::io::Error },
}

/// `Address already in use`, without the `(os error 98)` suffix.
fn os_message(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

fn holders_text(holders: &[Holder]) -> String {
    if holders.is_empty() {
        return "another process (not visible to this user)".into();
    }
    holders.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// Descriptors kept free besides connections (listeners, epoll sets, std streams).
const FD_MARGIN: u64 = 64;

/// A bound server, ready to run.
#[derive(Debug)]
pub struct Server {
    cfg: ServeConfig,
    listeners: listen::Listeners,
    addrs: Vec<SocketAddr>,
    shared_with: Vec<Holder>,
}

impl Server {
    /// Binds every listen address (port 0 picks a free port, shared by all workers). Raises the
    /// descriptor limit towards what `--max-conns` allows, as far as the hard limit permits.
    pub fn bind(cfg: ServeConfig) -> Result<Self, ServeError> {
        let wanted = (cfg.max_conns as u64).saturating_mul(cfg.workers as u64) + FD_MARGIN;
        qpslab_sys::nofile::raise_towards(wanted);
        let bound = listen::bind(&cfg).map_err(|e| match e {
            listen::BindError::InUse { addr, holders } => ServeError::PortInUse { addr, holders },
            listen::BindError::Os { addr, source } => ServeError::Bind { addr, source },
        })?;
        Ok(Self {
            cfg,
            listeners: bound.listeners,
            addrs: bound.addrs,
            shared_with: bound.shared_with,
        })
    }

    /// With `--share-port`: the processes that were already listening on the port.
    pub fn shared_with(&self) -> &[Holder] {
        &self.shared_with
    }

    /// Things the user should know before the server runs: the kernel capping a backlog the
    /// user asked for.
    pub fn warnings(&self, root: &qpslab_sys::root::Root) -> Vec<String> {
        let backlog = self
            .cfg
            .backlog_requested
            .then(|| listen::backlog_warning(root, self.cfg.backlog))
            .flatten();
        backlog.into_iter().collect()
    }

    /// The addresses actually bound, in `--listen` order.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    pub fn config(&self) -> &ServeConfig {
        &self.cfg
    }

    /// Runs the workers until `stop` is set, then drains (in-flight responses finish, within
    /// 1.5 s) and returns each worker's totals. `on_interval` is called every `interval` from
    /// the calling thread with each worker's live counters.
    pub fn run(
        &self,
        stop: &AtomicBool,
        interval: Option<Duration>,
        on_interval: &mut dyn FnMut(&[WorkerCounters]),
    ) -> Result<Vec<WorkerCounters>, ServeError> {
        let cfg = &self.cfg;
        let stats: Vec<WorkerStats> = (0..cfg.workers).map(|_| WorkerStats::default()).collect();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..cfg.workers)
                .map(|i| {
                    let (listeners, stats, done) =
                        (self.listeners.of_worker(i), &stats[i], done_tx.clone());
                    std::thread::Builder::new()
                        .name(format!("qpslab-serve-{i}"))
                        .spawn_scoped(scope, move || {
                            let r = run_worker(cfg, i, listeners, stop, stats);
                            let _ = done.send(());
                            r
                        })
                        .map_err(|source| ServeError::Worker { worker: i, source })
                })
                .collect();
            let mut running = handles.iter().filter(|h| h.is_ok()).count();
            let mut next = interval.map(|d| Instant::now() + d);
            while running > 0 {
                // Sleeps until a worker ends or the next stats line is due; no polling.
                let wait = next.map_or(Duration::from_secs(3600), |at| {
                    at.saturating_duration_since(Instant::now())
                });
                match done_rx.recv_timeout(wait) {
                    Ok(()) => running -= 1,
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        if let (Some(at), Some(every)) = (next, interval) {
                            on_interval(&snapshot(&stats));
                            next = Some(at + every);
                        }
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
            handles
                .into_iter()
                .enumerate()
                .map(|(i, h)| match h?.join() {
                    Ok(r) => r,
                    Err(_) => Err(ServeError::Worker {
                        worker: i,
                        source: std::io::Error::other("worker panicked"),
                    }),
                })
                .collect()
        })
    }
}

fn snapshot(stats: &[WorkerStats]) -> Vec<WorkerCounters> {
    stats
        .iter()
        .map(|s| WorkerCounters {
            requests: s.requests.load(Ordering::Relaxed),
            open: s.open.load(Ordering::Relaxed),
            accepted: s.accepted.load(Ordering::Relaxed),
            rejected: s.rejected.load(Ordering::Relaxed),
            timeouts: s.timeouts.load(Ordering::Relaxed),
            accept_errors: s.accept_errors.load(Ordering::Relaxed),
        })
        .collect()
}

fn run_worker(
    cfg: &ServeConfig,
    i: usize,
    listeners: &[socket2::Socket],
    stop: &AtomicBool,
    stats: &WorkerStats,
) -> Result<WorkerCounters, ServeError> {
    if let Some(cpus) = &cfg.cpus {
        let cpu = cpus[i % cpus.len()];
        qpslab_sys::cpus::pin_current_thread(cpu).map_err(|source| ServeError::Pin {
            worker: i,
            cpu,
            source,
        })?;
    }
    let worker = worker::Worker::new(cfg, listeners, stop, stats)
        .map_err(|source| ServeError::Worker { worker: i, source })?;
    worker.run().map_err(|source| ServeError::Worker { worker: i, source })
}

/// What `qpslab serve --json` prints when the server stops.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ServeReport {
    pub version: String,
    pub listen: Vec<String>,
    pub workers: usize,
    pub accept: &'static str,
    pub duration_s: f64,
    pub totals: WorkerCounters,
    pub per_worker: Vec<WorkerCounters>,
}
