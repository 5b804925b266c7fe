//! `qpslab agent`: the agent's side of the protocol, on any byte pipe (stdin and stdout). It
//! introduces itself, runs the load it is sent on its own threads, holds the run's clock at
//! the start line until the coordinator's instant, streams progress and each second's
//! histogram, and sends its whole result at the end. It answers pings at any time. When its
//! input closes (the coordinator or the ssh channel went away) it stops the load and exits: no
//! load outlives its coordinator.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use qpslab_load::feed::{Event as LoadEvent, Feed};
use qpslab_load::report::{encode_histogram, RunMeta};
use qpslab_load::{LoadConfig, LoadOptions, Report};

use crate::protocol::{self, Command, Event, PROTOCOL};

/// How long a prepared agent waits for the start instant before giving up.
pub const START_WAIT: Duration = Duration::from_secs(120);

/// What the agent says of itself.
#[derive(Debug, Clone)]
pub struct AgentInfo {
    /// Its version, command line, kernel and CPU, for its reports.
    pub meta: RunMeta,
    pub hostname: String,
    /// The address of this host that the ssh connection reached ([`ssh_server_addr`]).
    pub ssh_addr: Option<String>,
}

/// The server's address in an `SSH_CONNECTION` value (`client port server port`): the
/// address of this host that the coordinator's ssh reached, so also one the agents can reach.
pub fn ssh_server_addr(ssh_connection: &str) -> Option<String> {
    let words: Vec<&str> = ssh_connection.split_whitespace().collect();
    match words.as_slice() {
        [_, _, server, _] => server.parse::<std::net::IpAddr>().ok().map(|a| a.to_string()),
        _ => None,
    }
}

/// What an agent on a bench's server host does besides load: start the target, examine the
/// host, change its settings. The lab implements it; the agent only passes calls through.
/// Dropping it (when the coordinator's pipe closes) must undo what it started.
pub trait HostSide {
    /// Does `method` with `params`; the value or a one-line reason goes back in the reply.
    /// Runs on the agent's input thread: pings wait meanwhile.
    fn call(
        &mut self,
        method: &str,
        params: serde_json::Value,
    ) -> Result<serde_json::Value, String>;
}

type Out = Arc<Mutex<Box<dyn Write + Send>>>;

fn say(out: &Out, e: &Event) {
    let mut o = out.lock().unwrap_or_else(PoisonError::into_inner);
    // A closed pipe means the coordinator is gone: the input's end stops the agent.
    let _ = protocol::send(&mut **o, e);
}

/// Serves one coordinator on `input` and `output` until the input ends; calls go to `host`.
pub fn serve(
    info: &AgentInfo,
    input: &mut dyn BufRead,
    output: Box<dyn Write + Send>,
    host: &mut dyn HostSide,
) {
    let epoch = Instant::now();
    let out: Out = Arc::new(Mutex::new(output));
    say(
        &out,
        &Event::Hello {
            protocol: PROTOCOL,
            version: info.meta.version.clone(),
            hash: crate::identity::own_hash(),
            hostname: info.hostname.clone(),
            cpus: info.meta.host.online_cpus,
            ssh_addr: info.ssh_addr.clone(),
        },
    );
    let mut loads = Loads {
        out: out.clone(),
        stop: Arc::new(AtomicBool::new(false)),
        epoch,
        meta: info.meta.clone(),
        store: crate::files::Store::of_environment(),
        pending: None,
        start: None,
        load: None,
    };
    let mut line = String::new();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Command>(&line) {
            Err(e) => {
                say(&out, &Event::Error { message: format!("not a command: {e}"), usage: false });
            }
            Ok(Command::Ping { id }) => {
                let clock_ns = u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
                say(&out, &Event::Pong { id, clock_ns });
            }
            Ok(Command::Load { spec, files }) => loads.load(spec, files),
            Ok(Command::File { sha256, text }) => loads.file(sha256, text),
            Ok(Command::Start { at_ns }) => {
                if let Some(tx) = &loads.start {
                    let _ = tx.send(Some(at_ns));
                }
            }
            Ok(Command::Stop) => loads.stop(),
            Ok(Command::Call { id, method, params }) => {
                let (result, error) = match host.call(&method, params) {
                    Ok(v) => (Some(v), None),
                    Err(e) => (None, Some(e)),
                };
                say(&out, &Event::Reply { id, result, error });
            }
        }
    }
    loads.stop();
    if let Some(h) = loads.load {
        let _ = h.join();
    }
}

/// The agent's load: waiting for its files, then running on a thread of its own.
struct Loads {
    out: Out,
    stop: Arc<AtomicBool>,
    epoch: Instant,
    meta: RunMeta,
    store: Option<crate::files::Store>,
    /// A load waiting for files it asked for.
    pending: Option<(Box<LoadOptions>, Vec<crate::files::Detached>)>,
    start: Option<Sender<Option<u64>>>,
    load: Option<std::thread::JoinHandle<()>>,
}

impl Loads {
    fn error(&self, message: String) {
        say(&self.out, &Event::Error { message, usage: false });
    }

    /// A load's options: its files from the store, the others asked for; it starts once it
    /// has them all.
    fn load(&mut self, mut spec: Box<LoadOptions>, files: Vec<crate::files::Detached>) {
        if self.load.is_some() || self.pending.is_some() {
            return self.error("a load is already running".into());
        }
        let mut missing = Vec::new();
        for d in files {
            match self.store.as_ref().and_then(|s| s.get(&d.sha256)) {
                Some(text) => {
                    if let Err(message) = crate::files::attach(&mut spec, &d, text) {
                        self.error(message);
                    }
                }
                None => missing.push(d),
            }
        }
        if missing.is_empty() {
            return self.begin(spec);
        }
        let sha256 = missing.iter().map(|d| d.sha256.clone()).collect();
        say(&self.out, &Event::Need { sha256 });
        self.pending = Some((spec, missing));
    }

    /// A file asked for: kept, put in its place, and the load started when it was the last.
    fn file(&mut self, sha256: String, text: String) {
        let Some((spec, missing)) = &mut self.pending else {
            return self.error("a file came with no load waiting for it".into());
        };
        let Some(k) = missing.iter().position(|d| d.sha256 == sha256) else { return };
        let d = missing.remove(k);
        if let (Some(s), true) = (&self.store, crate::files::digest(&text) == sha256) {
            s.put(&sha256, &text);
        }
        if let Err(message) = crate::files::attach(spec, &d, text) {
            return self.error(message);
        }
        if missing.is_empty() {
            if let Some((spec, _)) = self.pending.take() {
                self.begin(spec);
            }
        }
    }

    fn begin(&mut self, spec: Box<LoadOptions>) {
        let (tx, rx) = mpsc::channel();
        self.start = Some(tx);
        let job = Job {
            out: self.out.clone(),
            stop: self.stop.clone(),
            epoch: self.epoch,
            meta: self.meta.clone(),
        };
        self.load = Some(std::thread::spawn(move || job.run(&spec, rx)));
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(tx) = &self.start {
            let _ = tx.send(None);
        }
    }
}

/// One load: its options, the run, the result.
struct Job {
    out: Out,
    stop: Arc<AtomicBool>,
    epoch: Instant,
    meta: RunMeta,
}

impl Job {
    fn run(self, opts: &LoadOptions, start: Receiver<Option<u64>>) {
        let usage = |message: String| Event::Error { message, usage: true };
        let cfg = match LoadConfig::from_options(opts) {
            Ok(c) => c,
            Err(e) => return say(&self.out, &usage(e.to_string())),
        };
        if let Err(e) = qpslab_load::preflight(&cfg) {
            return say(&self.out, &usage(e.to_string()));
        }
        let mut obs = Watch { job: &self, cfg: &cfg, start };
        match qpslab_load::run(&cfg, &self.stop, &mut obs) {
            Ok(result) => {
                let report = Report::new(&cfg, &result, &self.meta);
                say(
                    &self.out,
                    &Event::Done {
                        part: Box::new(result),
                        report: serde_json::to_value(&report).unwrap_or_default(),
                    },
                );
            }
            Err(e) => {
                let usage = e.is_setup();
                say(&self.out, &Event::Error { message: e.to_string(), usage });
            }
        }
    }
}

/// The run as the agent sees it: ready, started, each second.
struct Watch<'a> {
    job: &'a Job,
    cfg: &'a LoadConfig,
    start: Receiver<Option<u64>>,
}

impl Feed for Watch<'_> {
    fn event(&mut self, e: &LoadEvent<'_>) {
        match e {
            LoadEvent::Ready => self.ready(),
            LoadEvent::Progress(p) => {
                say(&self.job.out, &Event::Progress { progress: Box::new(**p) })
            }
            LoadEvent::Second { index, hist } => {
                say(
                    &self.job.out,
                    &Event::Interval { index: *index, hist: encode_histogram(hist) },
                );
            }
            _ => {}
        }
    }

    fn wants_seconds(&self) -> bool {
        true
    }
}

impl Watch<'_> {
    /// Says the connections are open, then holds the start until the coordinator's instant.
    fn ready(&mut self) {
        let j = self.job;
        say(
            &j.out,
            &Event::Ready {
                threads: self.cfg.threads,
                connections: self.cfg.connections,
                notes: self.cfg.notes.clone(),
            },
        );
        match self.start.recv_timeout(START_WAIT) {
            Ok(Some(at_ns)) => {
                let at = j.epoch + Duration::from_nanos(at_ns);
                wait_until(at);
                let late = Instant::now().saturating_duration_since(at);
                let late_ns = u64::try_from(late.as_nanos()).unwrap_or(u64::MAX);
                say(&j.out, &Event::Started { late_ns });
            }
            // Stopped, or the coordinator never said when: the run ends as it starts.
            Ok(None) | Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                j.stop.store(true, Ordering::Relaxed);
            }
        }
    }
}

/// Sleeps until a millisecond before `at`, then spins to it: a start within microseconds.
fn wait_until(at: Instant) {
    let now = Instant::now();
    if at > now + Duration::from_millis(1) {
        std::thread::sleep(at - now - Duration::from_millis(1));
    }
    while Instant::now() < at {
        std::hint::spin_loop();
    }
}
