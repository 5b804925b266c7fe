//! `--prometheus-rw URL`: Prometheus remote write 1.0, every second while the run measures and
//! once more when it ends (the final counters), from a thread of its own. A push that fails
//! is counted and the next one carries the newer values (counters are cumulative, so nothing
//! is lost but resolution); the last failure is told when the run ends.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use prost::Message as _;

use crate::prom;
use crate::server::Shared;
use crate::LiveError;

const INTERVAL: Duration = Duration::from_secs(1);
const TIMEOUT: Duration = Duration::from_secs(5);

/// Where to push.
#[derive(Debug, Clone)]
pub struct Target {
    url: String,
    native: bool,
}

impl Target {
    pub fn parse(url: &str, native: bool) -> Result<Target, LiveError> {
        let ok = url.starts_with("http://") || url.starts_with("https://");
        if !ok || url.len() <= "https://".len() {
            return Err(LiveError {
                flag: "--prometheus-rw",
                message: format!(
                    "'{url}' is not an http(s) URL; give the receiver's write endpoint, e.g. \
                     http://127.0.0.1:9090/api/v1/write"
                ),
            });
        }
        Ok(Target { url: url.to_string(), native })
    }
}

/// The pushing thread.
#[derive(Debug)]
pub struct Pusher {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<Tally>,
}

/// How the pushes went.
#[derive(Debug, Default)]
struct Tally {
    pushed: u64,
    failed: u64,
    last_error: Option<String>,
    final_error: Option<String>,
}

impl Pusher {
    pub fn start(target: Target, shared: Arc<Shared>) -> std::io::Result<Pusher> {
        let (stop, stopped) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("qpslab-rw".into())
            .spawn(move || run(&target, &shared, &stopped))?;
        Ok(Pusher { stop, thread })
    }

    /// Pushes the final values; returns what went wrong, in one line.
    pub fn finish(self) -> Option<String> {
        let _ = self.stop.send(());
        let t = self.thread.join().ok()?;
        if let Some(e) = t.final_error {
            return Some(format!(
                "the final push failed: {e} (the run's last values are not stored there)"
            ));
        }
        t.last_error.map(|e| {
            format!("{} of {} pushes failed, the last with: {e}", t.failed, t.pushed + t.failed)
        })
    }
}

fn run(target: &Target, shared: &Shared, stopped: &mpsc::Receiver<()>) -> Tally {
    let agent = ureq::AgentBuilder::new().timeout(TIMEOUT).build();
    let mut tally = Tally::default();
    loop {
        let last = match stopped.recv_timeout(INTERVAL) {
            Err(RecvTimeoutError::Timeout) => false,
            Ok(()) | Err(RecvTimeoutError::Disconnected) => true,
        };
        let (finished, current) = {
            let mut b = shared.board();
            let view = b.view();
            // Nothing to say before the measured window (or between a sweep's runs).
            let quiet = view.progress.warming_up || view.progress.elapsed.is_zero();
            (b.take_finished(), (last || !quiet).then_some(view))
        };
        for view in finished.iter().chain(&current) {
            let req = prom::write_request(view, now_ms(), target.native);
            match push(&agent, &target.url, &req) {
                Ok(()) => tally.pushed += 1,
                Err(e) => {
                    tally.failed += 1;
                    if last {
                        tally.final_error = Some(e.clone());
                    }
                    tally.last_error = Some(e);
                }
            }
        }
        if last || shared.closing.load(Ordering::Relaxed) {
            return tally;
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_millis() as i64
}

/// One POST as remote write 1.0 asks: protobuf, snappy block format, the version header.
fn push(agent: &ureq::Agent, url: &str, req: &prom::wire::WriteRequest) -> Result<(), String> {
    let raw = req.encode_to_vec();
    let body = snap::raw::Encoder::new().compress_vec(&raw).map_err(|e| e.to_string())?;
    let sent = agent
        .post(url)
        .set("Content-Type", "application/x-protobuf")
        .set("Content-Encoding", "snappy")
        .set("X-Prometheus-Remote-Write-Version", "0.1.0")
        .set("User-Agent", concat!("qpslab/", env!("CARGO_PKG_VERSION")))
        .send_bytes(&body);
    match sent {
        Ok(_) => Ok(()),
        Err(ureq::Error::Status(code, r)) => {
            let text = r.into_string().unwrap_or_default();
            Err(format!("{url} answered {code}: {}", text.trim()))
        }
        Err(e) => Err(format!("{url}: {e}")),
    }
}
