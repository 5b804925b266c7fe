//! qpslab's live view of a run. The one live feed ([`qpslab_load::feed`]) is kept as a
//! [`board::Board`]; `--live` serves it as a page that updates every second (server-sent
//! events, charts by uPlot served from the binary) and as `/metrics` in the Prometheus text
//! format; `--prometheus-rw` pushes the same metrics by remote write every second and once
//! more when the run ends, so a short run's last second is kept.
//!
//! Nothing here is on a load thread's path: the feed's events arrive on the run's calling
//! thread about once a second; the page and the exporter read the board on their own threads.

pub mod board;
pub mod prom;
mod remote;
mod server;

use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use qpslab_load::feed::{Event, Feed};
use thiserror::Error;

pub use board::{Board, End, RunInfo};
use server::Shared;

/// The `--live` address when none is given: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:5665";

/// How the run is watched.
#[derive(Debug, Clone, Default)]
pub struct LiveOptions {
    /// `--live[=ADDR]`: serve the page (and `/metrics`) there.
    pub addr: Option<String>,
    /// `--live-linger`: keep serving this long after the run ends.
    pub linger: Duration,
    /// `--prometheus-rw URL`: push the metrics there every second.
    pub remote_write: Option<String>,
    /// `--prometheus-native`: also push the latency as a native histogram.
    pub native: bool,
}

impl LiveOptions {
    pub fn is_on(&self) -> bool {
        self.addr.is_some() || self.remote_write.is_some()
    }
}

/// A problem with the options, found before the run (exit 2).
#[derive(Debug, Error)]
#[error("{flag}: {message}")]
pub struct LiveError {
    pub flag: &'static str,
    pub message: String,
}

/// A running live view.
#[derive(Debug)]
pub struct Live {
    shared: Arc<Shared>,
    addr: Option<SocketAddr>,
    linger: Duration,
    server: Option<JoinHandle<()>>,
    cpus: Option<JoinHandle<()>>,
    /// Dropped (or sent to) to stop the CPU sampler.
    cpus_stop: std::sync::mpsc::Sender<()>,
    remote: Option<remote::Pusher>,
}

impl Live {
    /// Binds the page's address and starts the exporter, before the run: a taken address or
    /// a bad URL is the user's to fix now, not mid-run.
    pub fn start(opts: &LiveOptions, info: RunInfo) -> Result<Live, LiveError> {
        let listener = opts.addr.as_deref().map(bind).transpose()?;
        let remote = opts
            .remote_write
            .as_deref()
            .map(|url| remote::Target::parse(url, opts.native))
            .transpose()?;
        let addr = listener.as_ref().and_then(|l| l.local_addr().ok());
        let loopback = addr.is_some_and(|a| a.ip().is_loopback());
        let shared = Arc::new(Shared::new(Board::new(info), loopback));
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new().name(name.into()).spawn(f).map_err(|e| LiveError {
                flag: "--live",
                message: format!("cannot start a thread: {e}"),
            })
        };
        let server = match listener {
            Some(l) => {
                let s = Arc::clone(&shared);
                Some(spawn("qpslab-live", Box::new(move || server::serve(l, s)))?)
            }
            None => None,
        };
        let (cpus_stop, cpus_stopped) = std::sync::mpsc::channel();
        let cpus = match server {
            Some(_) => {
                let s = Arc::clone(&shared);
                Some(spawn("qpslab-cpus", Box::new(move || sample_cpus(&s, &cpus_stopped)))?)
            }
            None => None,
        };
        let remote = remote
            .map(|t| remote::Pusher::start(t, Arc::clone(&shared)))
            .transpose()
            .map_err(|e| LiveError {
                flag: "--prometheus-rw",
                message: format!("cannot start a thread: {e}"),
            })?;
        Ok(Live { shared, addr, linger: opts.linger, server, cpus, cpus_stop, remote })
    }

    /// Where the page is.
    pub fn url(&self) -> Option<String> {
        self.addr.map(|a| format!("http://{a}/"))
    }

    /// A feed that tells the board and passes everything on to `inner`.
    pub fn tee<'a>(&'a self, inner: &'a mut dyn Feed) -> Tee<'a> {
        Tee { shared: &self.shared, inner }
    }

    /// The run is over: the page shows `end` (and offers the report); the exporter pushes the
    /// final values. Waits for the push, for pages that were watching to fetch the report (3
    /// s at most) and for `--live-linger`, unless `stop` is set (Ctrl-C). Returns the
    /// exporter's trouble, if any.
    pub fn finish(
        mut self,
        end: End,
        report_html: Option<String>,
        stop: &AtomicBool,
    ) -> Option<String> {
        let ended = Instant::now();
        self.shared.board().finish(end, report_html);
        self.shared.changed.notify_all();
        let trouble = self.remote.take().and_then(remote::Pusher::finish);
        if self.server.is_some() {
            let wait = |until: Instant, done: &dyn Fn() -> bool| {
                while Instant::now() < until && !done() && !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(20));
                }
            };
            wait(ended + Duration::from_secs(3), &|| self.pages_done());
            wait(ended + self.linger, &|| false);
        }
        trouble
    }

    /// Every page told of the end has its report (or there is none to fetch), and none is
    /// still being told.
    fn pages_done(&self) -> bool {
        let s = &self.shared;
        let has_report = s.board().report_html().is_some();
        let watching = s.clients.load(Ordering::Relaxed);
        let told = s.told_end.load(Ordering::Relaxed);
        let fetched = s.reports.load(Ordering::Relaxed);
        watching == 0 && (!has_report || fetched >= told)
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::Relaxed);
        self.shared.changed.notify_all();
        if let Some(addr) = self.addr {
            // Wakes the accept loop so it sees `closing`.
            let _ = TcpStream::connect_timeout(&addr, Duration::from_millis(200));
        }
        if let Some(s) = self.server.take() {
            let _ = s.join();
        }
        let _ = self.cpus_stop.send(());
        if let Some(c) = self.cpus.take() {
            let _ = c.join();
        }
    }
}

fn bind(addr: &str) -> Result<TcpListener, LiveError> {
    let err = |message: String| LiveError { flag: "--live", message };
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| {
            err(format!("'{addr}' is not an address ({e}); give HOST:PORT, e.g. 127.0.0.1:5665"))
        })?
        .collect();
    let first = addrs.first().ok_or_else(|| err(format!("'{addr}' resolves to nothing")))?;
    TcpListener::bind(first).map_err(|e| {
        let fix = if e.kind() == std::io::ErrorKind::AddrInUse {
            "; something else listens there: give another port, e.g. --live=127.0.0.1:0 for any free one"
        } else {
            ""
        };
        err(format!("cannot listen on {first}: {e}{fix}"))
    })
}

/// The page's per-CPU view: this host's /proc/stat, once a second, until `stop` says or goes.
fn sample_cpus(shared: &Shared, stop: &std::sync::mpsc::Receiver<()>) {
    let root = qpslab_host::Root::live();
    let read = || {
        root.read_opt("proc/stat").map(|t| qpslab_host::parse::proc_stat(&t)).unwrap_or_default()
    };
    let mut last = read();
    while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
        stop.recv_timeout(Duration::from_secs(1))
    {
        let now = read();
        let shares = now
            .iter()
            .zip(&last)
            .map(|(n, l)| {
                let d = n.since(l);
                let total = d.total().max(1) as f64;
                [
                    (d.user + d.nice) as f64 / total,
                    d.system as f64 / total,
                    (d.softirq + d.irq) as f64 / total,
                ]
            })
            .collect();
        last = now;
        shared.board().set_cpus(shares);
        shared.changed.notify_all();
    }
}

/// The live board in front of another feed.
pub struct Tee<'a> {
    shared: &'a Shared,
    inner: &'a mut dyn Feed,
}

impl std::fmt::Debug for Tee<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tee")
    }
}

impl Feed for Tee<'_> {
    fn event(&mut self, e: &Event<'_>) {
        self.shared.board().event(e);
        self.shared.changed.notify_all();
        self.inner.event(e);
    }

    fn wants_seconds(&self) -> bool {
        true
    }
}
