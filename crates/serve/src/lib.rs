//! qpslab's benchmark target: a fast HTTP/1.1 and HTTP/2 server that no client can crash or
//! stall.
//!
//! Owns: binding listeners in nginx's accept modes ([`config::AcceptMode`]), one worker per
//! thread (optionally pinned) on epoll or io_uring, plain or over TLS (through `qpslab-tls`),
//! the responses (plaintext by default, httpterm-style controls in the query string),
//! robustness limits and deadlines, live counters and a drain on stop.
//! Does not own flag parsing or printing: the CLI does.

mod bufpool;
pub mod config;
pub mod date;
mod inbuf;
pub mod listen;
mod reqcache;
mod respond;
pub mod tls;
mod worker;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use qpslab_quic::udp::QuicCounts;
use qpslab_sys::crew::{self, Crew, Hand, Supervise, WorkerError};
use thiserror::Error;

pub use config::{AcceptMode, ConfigError, Engine, IoChoice, ServeConfig, ServeOptions};
pub use qpslab_sys::sockets::Holder;
/// The fuzz targets' bodies: the server's connection fed any client bytes.
#[doc(hidden)]
pub use worker::fuzzing;
pub use worker::{WorkerCounters, WorkerStats};

/// Why the server could not start or a worker failed.
#[derive(Debug, Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("--listen {addr}: cannot listen there: {}", qpslab_sys::net::message(source))]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("--listen {addr}: the port is already in use by {}; stop it or pick another port (--share-port shares it on purpose: the servers then split the connections)", holders_text(holders))]
    PortInUse { addr: SocketAddr, holders: Vec<Holder> },
    #[error(
        "--h3: cannot bind UDP {addr} beside its TCP listener: {}; pick another port in --listen",
        qpslab_sys::net::message(source)
    )]
    BindUdp { addr: SocketAddr, source: std::io::Error },
    #[error("--listen unix:{}: {why}", path.display())]
    Unix { path: std::path::PathBuf, why: String },
    /// A worker could not start, be pinned (`--cpus`), or run (a panic included).
    #[error(transparent)]
    Worker(#[from] WorkerError<std::io::Error>),
}

fn holders_text(holders: &[Holder]) -> String {
    if holders.is_empty() {
        return "another process (not visible to this user)".into();
    }
    holders.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// The socket files a server made are removed with it, as nginx removes its own.
impl Drop for Server {
    fn drop(&mut self) {
        for p in &self.cfg.unix {
            let _ = std::fs::remove_file(p);
        }
    }
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
    /// `--h3`: each worker's UDP sockets, one per TCP address.
    udp: Vec<Vec<std::net::UdpSocket>>,
}

fn bind_error(e: listen::BindError) -> ServeError {
    match e {
        listen::BindError::InUse { addr, holders } => ServeError::PortInUse { addr, holders },
        listen::BindError::Os { addr, source } => ServeError::Bind { addr, source },
        listen::BindError::Udp { addr, source } => ServeError::BindUdp { addr, source },
        listen::BindError::Unix { path, why } => ServeError::Unix { path, why },
    }
}

impl Server {
    /// Binds every listen address (port 0 picks a free port, shared by all workers). Raises the
    /// descriptor limit towards what `--max-conns` allows, as far as the hard limit permits.
    pub fn bind(mut cfg: ServeConfig) -> Result<Self, ServeError> {
        let wanted = (cfg.settings.max_conns as u64).saturating_mul(cfg.workers as u64) + FD_MARGIN;
        qpslab_sys::nofile::raise_towards(wanted);
        let bound = listen::bind(&cfg).map_err(bind_error)?;
        let udp = match cfg.h3 {
            Some(_) => listen::bind_udp(&bound.addrs, cfg.workers).map_err(bind_error)?,
            None => Vec::new(),
        };
        if cfg.h3.is_some() {
            // A day, as sites advertise it; every port, since UDP is bound beside each.
            let mut ports: Vec<u16> = bound.addrs.iter().map(SocketAddr::port).collect();
            ports.dedup();
            let each: Vec<String> =
                ports.iter().map(|p| format!("h3=\":{p}\"; ma=86400")).collect();
            cfg.alt_svc = Some(each.join(", "));
        }
        Ok(Self {
            cfg,
            listeners: bound.listeners,
            addrs: bound.addrs,
            shared_with: bound.shared_with,
            udp,
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

    /// The addresses actually bound, in `--listen` order (unix sockets apart).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The unix sockets listened on.
    pub fn unix_paths(&self) -> &[std::path::PathBuf] {
        &self.cfg.unix
    }

    /// Every listener as `--listen` names it: `ADDR:PORT`, then `unix:PATH`.
    pub fn listen_names(&self) -> Vec<String> {
        let tcp = self.addrs.iter().map(ToString::to_string);
        tcp.chain(self.cfg.unix.iter().map(|p| format!("unix:{}", p.display()))).collect()
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
        let crew = Crew {
            name: "qpslab-serve",
            workers: cfg.workers,
            cpus: cfg.cpus.as_deref(),
            every: interval,
            start_line: false,
        };
        let mut ticker = Ticker { stats: &stats, on_interval, h3: cfg.h3.is_some() };
        crew::run(
            &crew,
            |hand: &Hand<'_, (), ()>| {
                let (i, listeners) = (hand.index(), self.listeners.of_worker(hand.index()));
                match cfg.io {
                    Engine::Epoll => {
                        let quic = self.quic_of(i)?;
                        worker::epoll::Worker::new(cfg, listeners, stop, &stats[i], quic)?.run()
                    }
                    Engine::Uring => {
                        let quic = self.quic_of(i)?;
                        worker::uring::Worker::new(cfg, listeners, stop, &stats[i], quic)?.run()
                    }
                }
            },
            &mut ticker,
        )
        .into_iter()
        .map(|r| r.map_err(ServeError::from))
        .collect()
    }
}

impl Server {
    /// Worker `i`'s QUIC endpoints, on its own copies of its UDP sockets.
    fn quic_of(&self, i: usize) -> std::io::Result<Vec<worker::quic::Quic>> {
        let (Some(config), Some(socks)) = (&self.cfg.h3, self.udp.get(i)) else {
            return Ok(Vec::new());
        };
        socks.iter().map(|s| worker::quic::Quic::new(s.try_clone()?, config.clone())).collect()
    }
}

/// The calling thread while the server runs: hands the live counters out every interval.
struct Ticker<'a> {
    stats: &'a [WorkerStats],
    on_interval: &'a mut dyn FnMut(&[WorkerCounters]),
    h3: bool,
}

impl Supervise<(), ()> for Ticker<'_> {
    fn start(&mut self) {}

    fn tick(&mut self) {
        (self.on_interval)(&snapshot(self.stats, self.h3));
    }
}

fn snapshot(stats: &[WorkerStats], h3: bool) -> Vec<WorkerCounters> {
    stats
        .iter()
        .map(|s| WorkerCounters {
            requests: s.requests.load(Ordering::Relaxed),
            open: s.open.load(Ordering::Relaxed),
            accepted: s.accepted.load(Ordering::Relaxed),
            rejected: s.rejected.load(Ordering::Relaxed),
            timeouts: s.timeouts.load(Ordering::Relaxed),
            accept_errors: s.accept_errors.load(Ordering::Relaxed),
            tls_failures: s.tls_failures.load(Ordering::Relaxed),
            quic: h3.then(|| QuicCounts {
                datagrams_in: s.datagrams_in.load(Ordering::Relaxed),
                datagrams_out: s.datagrams_out.load(Ordering::Relaxed),
                lost_packets: s.lost_packets.load(Ordering::Relaxed),
                ..QuicCounts::default()
            }),
        })
        .collect()
}

/// The TLS part of [`ServeReport`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct TlsReport {
    pub fingerprint_sha256: String,
    pub self_signed: bool,
}

/// What `qpslab serve --json` prints when the server stops.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ServeReport {
    pub version: String,
    pub listen: Vec<String>,
    pub workers: usize,
    pub accept: &'static str,
    /// The event loop: `epoll` or `uring`.
    pub io: &'static str,
    /// io_uring submissions polled by a kernel thread (`--sqpoll`).
    pub sqpoll: bool,
    /// HTTPS: the certificate's SHA-256 fingerprint and whether it was made at start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsReport>,
    pub duration_s: f64,
    pub totals: WorkerCounters,
    pub per_worker: Vec<WorkerCounters>,
}
