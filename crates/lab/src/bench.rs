//! `qpslab bench`: the options and their rules, the run (target, warm-up, load and doctor
//! together) and the report. The server side (target and doctor) runs here or on a server
//! host (`--server`, through ssh: [`crate::remote`]); the load runs here or on load agents
//! (`--agents`: [`qpslab_fleet`]).

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use qpslab_doctor::{Context, Generator, LoadFacts};
use qpslab_doctor::{Diagnosis, Examination};
use qpslab_fleet::coordinator::{self, FleetError};
use qpslab_fleet::session::FleetOptions;
use qpslab_fleet::transport::{self, AgentHost, Place};
use qpslab_host::sample::Role;
use qpslab_host::Root;
use qpslab_load::feed::{Event, Feed};
use qpslab_load::report::RunMeta;
use qpslab_load::{LoadConfig, LoadOptions, Report};
use serde::{Deserialize, Serialize};

pub use crate::kinds::{Accept, BenchError, ServerSpec, TargetKind};
use crate::place::{self, Placement};
use crate::remote::{DiagnoseCall, ExamineCall, Examining, ServerHost, TargetCall};

/// What to bench, as the user gave it (the long options of `qpslab bench`), and as sweep files
/// name it: bench's own keys and every load option (flattened: `connections`, `rate`,
/// `header`, ...), kebab-case, the same names as the flags.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct BenchOptions {
    /// `builtin` or `nginx` (a server bench starts), or the URL of an external target (load
    /// and doctor only).
    pub target: String,
    /// The server behind a URL, when the user names it (children and threads included);
    /// otherwise it is looked up in the kernel's socket table.
    #[serde(rename = "server-pid")]
    pub server_pids: Vec<u32>,
    /// Server workers [default: one per server CPU].
    pub workers: Option<usize>,
    /// The server's CPUs, a cpulist [default: the first half of the cores].
    pub server_cpus: Option<String>,
    /// How the server's workers accept connections [default: reuseport].
    pub accept: Option<String>,
    /// Start the target with TLS (`--tls`): HTTPS with a certificate made at start.
    pub tls: bool,
    /// Doctor sampling interval.
    #[serde(with = "qpslab_load::options::dur")]
    pub interval: Duration,
    /// How long to wait, before the run and after it, for the target to answer a probe in its
    /// normal time (requests a run left queued answered); zero: not at all.
    #[serde(with = "qpslab_load::options::dur")]
    pub drain: Duration,
    /// The server's host (`--server user@S`): the target and the doctor run there, through
    /// ssh.
    #[serde(rename = "server")]
    pub server_host: Option<String>,
    /// The address on the server host the target listens on [default: the one ssh reached].
    pub server_addr: Option<String>,
    /// Load agents (`--agents`: a list, or a file with weights): the load runs on them.
    pub agents: Option<String>,
    /// The ssh command (`--ssh`) [default: $QPSLAB_SSH, else ssh].
    pub ssh: Option<String>,
    /// The qpslab executable on the other hosts (`--agent-exe`) [default: this build, copied
    /// over when missing].
    pub agent_exe: Option<String>,
    /// Profile the server's host (every CPU) during the measured window (`--profile`), at
    /// `profile_freq` samples per second.
    pub profile: bool,
    pub profile_freq: Option<u64>,
    /// With `profile`: keep the folded stacks (`--profile-out`, a file of this machine).
    #[serde(skip)]
    pub folded: bool,
    /// The load: its options as `qpslab load` takes them (URL and CPUs are bench's to set).
    #[serde(flatten)]
    pub load: LoadOptions,
    /// The qpslab executable, started as `serve` for the built-in target.
    #[serde(skip)]
    pub serve_exe: PathBuf,
    #[serde(skip)]
    pub meta: RunMeta,
    /// What the doctor may find that fails the run's checks (`--fail-on`).
    #[serde(skip)]
    pub fail_on: Vec<crate::fail_on::FailOn>,
}

/// How long a bench waits at most for its target to drain (`--drain`).
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(10);

/// A bench target as given: `builtin`, `nginx`, a URL, or a URL without its scheme
/// (`127.0.0.1:8080/`, as `load` takes one), which is taken as `http://`.
pub fn target_of(given: &str) -> String {
    if !given.contains("://") && given.contains([':', '/', '.']) {
        format!("http://{given}")
    } else {
        given.to_string()
    }
}

impl BenchOptions {
    /// The external target's URL, when the target is one.
    pub fn url(&self) -> Option<&str> {
        let t = self.target.as_str();
        (t.starts_with("http://") || t.starts_with("https://")).then_some(t)
    }

    /// The measured window.
    pub fn duration(&self) -> Duration {
        self.load.duration.unwrap_or(qpslab_load::options::DEFAULT_DURATION)
    }

    /// The warm-up before it.
    pub fn warmup(&self) -> Duration {
        self.load.warmup.unwrap_or(qpslab_load::options::BENCH_WARMUP)
    }

    /// The profiler's options, when asked for.
    pub fn profile_options(&self) -> Option<qpslab_profile::ProfileOptions> {
        self.profile.then(|| qpslab_profile::ProfileOptions {
            frequency_hz: self
                .profile_freq
                .unwrap_or(qpslab_profile::ProfileOptions::default().frequency_hz),
            folded: self.folded,
            ..qpslab_profile::ProfileOptions::default()
        })
    }
}

/// Where the two sides run when not both here: the server host and the load agents.
#[derive(Debug, Clone, Default)]
pub struct Remote {
    pub server: Option<FleetOptions>,
    pub server_addr: Option<IpAddr>,
    pub agents: Option<FleetOptions>,
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self {
            target: "builtin".into(),
            server_pids: Vec::new(),
            workers: None,
            server_cpus: None,
            accept: None,
            tls: false,
            interval: Duration::from_secs(1),
            drain: DEFAULT_DRAIN,
            server_host: None,
            server_addr: None,
            agents: None,
            ssh: None,
            agent_exe: None,
            profile: false,
            profile_freq: None,
            folded: false,
            load: LoadOptions::default(),
            serve_exe: PathBuf::from("qpslab"),
            meta: RunMeta::default(),
            fail_on: Vec::new(),
        }
    }
}

/// The target side of a bench.
#[derive(Debug, Clone, Serialize)]
pub struct TargetReport {
    /// builtin, nginx or url.
    pub kind: &'static str,
    pub url: String,
    /// The server's processes followed by the doctor (empty when none was found).
    pub pids: Vec<u32>,
    /// How they were found: `started` (bench started the server), `listening` (the process
    /// holding the listening socket, from the kernel's socket table) or `--server-pid`.
    pub found_by: Option<&'static str>,
    /// CPUs the server's workers may run on (empty when not known).
    pub cpus: Vec<usize>,
    /// A server bench started: its workers and accept mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accept: Option<&'static str>,
    /// The listeners behind the server on the request path (a proxy's application), each with
    /// its processes (in `pids` too) and how it was found.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub path: Vec<qpslab_host::upstream::Upstream>,
}

/// The server host of a bench.
#[derive(Debug, Clone, Serialize)]
pub struct ServerHostReport {
    /// As the user named it (`root@S`).
    pub name: String,
    /// As the host names itself.
    pub hostname: String,
}

/// Everything a bench measured.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub target: TargetReport,
    /// CPUs the generator threads are pinned to.
    pub generator_cpus: Vec<usize>,
    /// Server and generator share CPUs: the figures compete.
    pub cpus_shared: bool,
    /// The server's host, when the target and the doctor ran there (`--server`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_host: Option<ServerHostReport>,
    /// CPUs used by the server processes and by this process (1.0 = one CPU), from the doctor.
    pub server_cpu: Option<f64>,
    pub generator_cpu: f64,
    /// Requests per server CPU-second.
    pub requests_per_server_cpu_s: Option<f64>,
    /// What the user should know about how the run was set up.
    pub notes: Vec<String>,
    /// The load result (the design brief's fields).
    pub load: Report,
    pub doctor: Diagnosis,
    /// Probing the target before the run (work an earlier run left it) and after it (work this
    /// run left it), when done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain_before: Option<crate::drain::Drain>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain_after: Option<crate::drain::Drain>,
    /// What the doctor's findings say of the run as a measurement: `disturbed` (other work
    /// held it back, or it began on a busy target: compare leaves it out of its verdict),
    /// `behind-schedule` (an open loop that did not send what was asked).
    pub marks: Vec<&'static str>,
}

impl BenchOptions {
    /// Checks the options against each other; returns the server to start (None: a URL).
    pub fn validate(&self) -> Result<Option<ServerSpec>, BenchError> {
        let spec = self.validate_server()?;
        self.validate_load()?;
        Ok(spec)
    }

    /// The load's options as bench would make them, checked as the load checks them, on a
    /// stand-in address for a target bench starts (its port is known only then).
    fn validate_load(&self) -> Result<(), BenchError> {
        let usage = |m: &str| Err(BenchError::Usage(m.into()));
        if self.load.cpus.is_some() {
            return usage(
                "--cpus: bench puts the generator on the CPUs the server does not use; give \
                 --server-cpus for the server's",
            );
        }
        if self.load.targets.is_some() {
            return usage("--targets: bench loads one target, the one it examines; give its URL");
        }
        let scheme = if self.tls || self.load.h3 { "https" } else { "http" };
        let url = self.url().map_or_else(|| format!("{scheme}://127.0.0.1:1/"), str::to_string);
        let placed = Placement::stand_in(url);
        let opts = load_options(self, &placed, self.duration());
        LoadConfig::from_options(&LoadOptions { cpus: None, ..opts })
            .map(drop)
            .map_err(|e| BenchError::Usage(e.to_string()))
    }

    fn validate_server(&self) -> Result<Option<ServerSpec>, BenchError> {
        let usage = |m: String| Err(BenchError::Usage(m));
        let kind = match self.target.as_str() {
            _ if self.url().is_some() => TargetKind::Builtin,
            "builtin" => TargetKind::Builtin,
            "nginx" => TargetKind::Nginx,
            other => {
                return usage(format!(
                "--target {other:?}: use builtin or nginx (or give a URL, http://HOST:PORT/PATH)"
            ))
            }
        };
        if self.duration().is_zero() {
            return usage("--duration must be more than 0 (e.g. 10s)".into());
        }
        if self.interval.is_zero() {
            return usage("--interval must be more than 0 (e.g. 1s)".into());
        }
        self.remote_hosts()?;
        if self.load.unix_socket.is_some() && self.server_host.is_some() {
            return usage("--unix-socket is a socket of this host; the load cannot reach it on --server's: drop one".into());
        }
        if self.url().is_some() {
            let server_flag = [
                (self.workers.is_some(), "--workers"),
                (self.server_cpus.is_some(), "--server-cpus"),
                (self.accept.is_some(), "--accept"),
                (self.tls, "--tls"),
            ];
            if let Some((_, flag)) = server_flag.iter().find(|(given, _)| *given) {
                return usage(format!(
                    "{flag} sets up the server bench starts; it cannot be combined with a URL"
                ));
            }
            return Ok(None);
        }
        if !self.server_pids.is_empty() {
            return usage("--server-pid names the server behind a URL; give the URL too (bench starts its own server otherwise)".into());
        }
        if self.workers == Some(0) {
            return usage("--workers must be at least 1".into());
        }
        let accept = match (kind, self.accept.as_deref().unwrap_or("reuseport")) {
            (_, "reuseport") => Accept::Reuseport,
            (_, "shared") => Accept::Shared,
            (TargetKind::Builtin, "exclusive") => Accept::Exclusive,
            (TargetKind::Nginx, "mutex") => Accept::Mutex,
            (TargetKind::Builtin, other) => {
                return usage(format!(
                    "--accept {other:?}: the built-in server takes reuseport, shared or exclusive"
                ))
            }
            (TargetKind::Nginx, other) => {
                return usage(format!("--accept {other:?}: nginx takes reuseport, shared or mutex"))
            }
        };
        // The server host's CPUs are its own to check.
        let cpus = match (&self.server_cpus, &self.server_host) {
            (None, _) => None,
            (Some(l), Some(_)) => Some(
                qpslab_sys::cpus::parse_cpu_list(l)
                    .map_err(|e| BenchError::Usage(format!("--server-cpus {l:?}: {e}")))?,
            ),
            (Some(l), None) => Some(
                qpslab_sys::cpus::usable_list(l, "--server-cpus")
                    .map_err(|e| BenchError::Usage(e.to_string()))?,
            ),
        };
        let h3 = self.load.h3;
        if h3 && kind == TargetKind::Nginx {
            return usage(
                "--h3 with --target nginx: the nginx bench starts has no HTTP/3 module here; use \
                 the built-in server (--target builtin), or give your HTTP/3 server's URL"
                    .into(),
            );
        }
        // HTTP/3 runs over TLS 1.3: the built-in server gets a certificate made at start.
        let (workers, tls, h2) = (self.workers, self.tls || h3, self.load.h2);
        Ok(Some(ServerSpec { kind, workers, cpus, accept, tls, h2, h3 }))
    }

    /// The server host and the agents as given, checked: (server, agents, ssh command).
    #[allow(clippy::type_complexity, reason = "a private triple, named where it is used")]
    fn remote_hosts(
        &self,
    ) -> Result<(Option<AgentHost>, Option<Vec<AgentHost>>, Vec<String>), BenchError> {
        let usage = |m: String| BenchError::Usage(m);
        if self.server_host.is_none() && self.server_addr.is_some() {
            return Err(usage("--server-addr is where the target listens on the server host; give --server HOST too".into()));
        }
        if self.server_host.is_none() && self.agents.is_none() {
            if let Some(flag) =
                [(self.ssh.is_some(), "--ssh"), (self.agent_exe.is_some(), "--agent-exe")]
                    .iter()
                    .find_map(|(given, f)| given.then_some(f))
            {
                return Err(usage(format!(
                    "{flag} is for other hosts; give --server HOST or --agents HOSTS too"
                )));
            }
        }
        let server = self.server_host.as_deref().map(server_host).transpose().map_err(usage)?;
        let agents =
            self.agents.as_deref().map(transport::parse_agents).transpose().map_err(usage)?;
        let remote_agents =
            agents.as_ref().is_some_and(|a| a.iter().any(|h| matches!(h.place, Place::Ssh(_))));
        if remote_agents && self.url().is_none() && server.is_none() {
            return Err(usage("--agents: agents on other hosts cannot reach a target on this host's loopback; give --server HOST (bench starts the target there) or a URL".into()));
        }
        if let Some(a) = &self.server_addr {
            a.parse::<IpAddr>().map_err(|_| {
                usage(format!("--server-addr {a:?}: not an IP address (e.g. 10.0.0.5)"))
            })?;
            if self.url().is_some() {
                return Err(usage("--server-addr sets where the target bench starts listens; with a URL the server is already listening".into()));
            }
        }
        let ssh = transport::ssh_command(self.ssh.as_deref()).map_err(usage)?;
        Ok((server, agents, ssh))
    }

    /// The server host and the agents, ready to reach (this build's hash read only when one
    /// is given).
    pub fn remote(&self) -> Result<Remote, BenchError> {
        let (server, agents, ssh) = self.remote_hosts()?;
        if server.is_none() && agents.is_none() {
            return Ok(Remote::default());
        }
        let hash = qpslab_fleet::identity::own_hash();
        let fleet = |hosts: Vec<AgentHost>| FleetOptions {
            hosts,
            ssh: ssh.clone(),
            agent_exe: self.agent_exe.clone(),
            version: self.meta.version.clone(),
            hash: hash.clone(),
        };
        Ok(Remote {
            server: server.map(|h| fleet(vec![h])),
            server_addr: self.server_addr.as_deref().and_then(|a| a.parse().ok()),
            agents: agents.map(fleet),
        })
    }
}

/// `--server`: one host, `user@host`, an ssh alias, or `local` (an agent here: tests, or a
/// second view of this host).
fn server_host(arg: &str) -> Result<AgentHost, String> {
    let name = arg.trim();
    if name.is_empty() || name.starts_with('-') || name.contains([',', ' ', '\t']) {
        return Err(format!(
            "--server {arg:?}: give one host, e.g. root@10.0.0.5 or an alias of ~/.ssh/config"
        ));
    }
    let place = if name == "local" { Place::Local { cpus: None } } else { Place::Ssh(name.into()) };
    Ok(AgentHost { name: name.into(), place, weight: 1 })
}

/// Runs a bench until its duration, or until `stop` is set (a SIGINT handler may set it).
/// `feed` hears the measured run as it goes (its load's or its agents' events) and the
/// doctor's findings once they are known.
pub fn bench(
    opts: &BenchOptions,
    stop: &AtomicBool,
    feed: &mut dyn Feed,
) -> Result<BenchReport, BenchError> {
    let server = opts.validate()?;
    let remote = opts.remote()?;
    let result = match &remote.server {
        None => run(opts, server, &remote, None, stop, feed),
        Some(fleet) => {
            let mut far = ServerHost::connect(fleet, stop)?;
            let result = run(opts, server, &remote, Some(&mut far), stop, feed);
            // Closing the pipe stops what the agent started there (target, sampling).
            far.close();
            result
        }
    };
    if let Ok(r) = &result {
        for f in &r.doctor.findings {
            let severity = serde_json::to_value(f.severity).unwrap_or_default();
            feed.event(&Event::Finding {
                name: f.name,
                severity: severity.as_str().unwrap_or(""),
                summary: &f.summary,
            });
        }
    }
    result
}

/// Passes a bench's load events on, and tells `begin` when the measured window starts.
struct Tap<'f, 'b> {
    feed: &'f mut dyn Feed,
    begin: &'b mut dyn FnMut(Duration),
    /// A load here: the measured window begins when its connections are open (`Ready`), so
    /// the doctor's counters leave the connection setup out. Over agents: at the instant the
    /// coordinator gives (`Starting`).
    on_ready: bool,
    /// A load here: its warm-up, after which its window opens.
    warmup: Duration,
}

impl Feed for Tap<'_, '_> {
    fn event(&mut self, e: &Event<'_>) {
        match e {
            // The connections are open; the window opens after the warm-up.
            Event::Ready if self.on_ready => (self.begin)(self.warmup),
            Event::Starting { lead } if !self.on_ready => (self.begin)(*lead),
            _ => {}
        }
        self.feed.event(e);
    }

    fn wants_seconds(&self) -> bool {
        self.feed.wants_seconds()
    }
}

/// Where the doctor samples: this host, or the server host.
enum Doctor<'h, 'a> {
    Here(Box<Examination>),
    There(&'h mut ServerHost<'a>),
}

fn run(
    opts: &BenchOptions,
    server: Option<ServerSpec>,
    remote: &Remote,
    far: Option<&mut ServerHost<'_>>,
    stop: &AtomicBool,
    feed: &mut dyn Feed,
) -> Result<BenchReport, BenchError> {
    let root = Root::live();
    let (mut doctor, mut placed) = match (far, opts.url(), &server) {
        (None, url, server) => {
            let exam = Examination::new(&root, opts.interval)?;
            let placed = match (url, server) {
                (Some(url), _) => {
                    let unix = opts.load.unix_socket.as_deref();
                    place::for_url(&root, exam.host(), url, unix, &opts.server_pids)?
                }
                (None, Some(spec)) => {
                    let unix = opts.load.unix_socket.as_deref();
                    place::start_target(&opts.serve_exe, spec, exam.host(), unix)?
                }
                (None, None) => return Err(BenchError::Usage("no target".into())),
            };
            (Doctor::Here(Box::new(exam)), placed)
        }
        (Some(far), Some(url), _) => {
            let (_, url, notes) = place::resolve(url)?;
            let mut placed = place::for_server_host(url, None);
            placed.notes = notes;
            (Doctor::There(far), placed)
        }
        (Some(far), None, Some(spec)) => {
            let call = TargetCall { spec: spec.clone(), listen: remote.server_addr };
            let up = far.start_target(&call)?;
            let scheme = if spec.tls { "https" } else { "http" };
            let url = format!("{scheme}://{}/", up.addr);
            let kind = if spec.kind == TargetKind::Builtin { "builtin" } else { "nginx" };
            let placed = place::for_server_host(url, Some((kind, &up, spec.accept)));
            (Doctor::There(far), placed)
        }
        (Some(_), None, None) => return Err(BenchError::Usage("no target".into())),
    };
    let here = matches!(doctor, Doctor::Here(_)) && remote.agents.is_none();
    if let Doctor::Here(exam) = &mut doctor {
        if let Some(o) = opts.profile_options() {
            exam.profile(o);
        }
        for &pid in &placed.server_pids {
            exam.follow(pid, Role::Server);
        }
        if here {
            exam.follow(std::process::id(), Role::Client);
        }
        exam.watch_ports(&run_ports(&placed));
    }
    // The load runs here: probe the target from here, before and after, for queued work.
    let drains = remote.agents.is_none() && !opts.drain.is_zero();
    let probe_opts = load_options(opts, &placed, opts.duration());
    one_target(&probe_opts, &placed.url)?;
    let drain_before = drains.then(|| crate::drain::drain(&probe_opts, opts.drain, stop));
    let (load, samples, examining, late) =
        load_while_examined(opts, &placed, remote, &mut doctor, stop, feed)?;
    for u in late {
        placed.server_pids.extend(&u.pids);
        placed.path.push(u);
    }
    let drain_after = drains.then(|| crate::drain::drain(&probe_opts, opts.drain, stop));
    if let Some(r) = &placed.running {
        // A target that died mid-run makes every figure meaningless.
        if !placed.server_pids.iter().all(|p| root.exists(&format!("proc/{p}"))) {
            return Err(BenchError::Target(format!("the {} target exited during the run", r.kind)));
        }
    }
    let ctx = run_context(opts, &placed, &load, remote, here, matches!(doctor, Doctor::Here(_)));
    let (diagnosis, server_host) = match &mut doctor {
        Doctor::Here(exam) => (exam.diagnose(&samples, ctx), None),
        Doctor::There(far) => {
            let call = DiagnoseCall {
                load: ctx.load,
                addr_not_available: ctx.addr_not_available,
                generators: ctx.generators,
                ports: ctx.ports,
            };
            let d = far.diagnose(&call)?;
            if placed.started.is_some() {
                far.stop_target()?;
            }
            let host = ServerHostReport { name: far.name.clone(), hostname: far.hostname.clone() };
            (d, Some(host))
        }
    };
    let r = report(placed, examining, load, diagnosis, server_host, here);
    let mut r = with_drains(r, drain_before, drain_after);
    crate::fail_on::apply(&mut r, &opts.fail_on);
    Ok(r)
}

/// The report with what probing the target found, a start on a busy target as a finding, and
/// the marks its findings give.
fn with_drains(
    mut r: BenchReport,
    before: Option<crate::drain::Drain>,
    after: Option<crate::drain::Drain>,
) -> BenchReport {
    if let Some(f) = before.as_ref().and_then(undrained_start) {
        // Worst first, as the doctor sorts them.
        let at = r.doctor.findings.iter().position(|x| x.severity < f.severity);
        r.doctor.findings.insert(at.unwrap_or(r.doctor.findings.len()), f);
    }
    (r.drain_before, r.drain_after) = (before, after);
    r.marks = marks(&r.doctor.findings);
    r
}

/// A run that began on a target still busy with an earlier load's requests.
fn undrained_start(d: &crate::drain::Drain) -> Option<qpslab_doctor::Finding> {
    (!d.drained).then(|| qpslab_doctor::Finding {
        name: "undrained-start",
        severity: qpslab_doctor::Severity::Warning,
        summary: "the target was still busy with an earlier load's requests when the run began: the run measured that backlog too".into(),
        evidence: vec![format!(
            "{} probe(s) before the run: the first answered in {:.0} ms, the last in {:.0} ms{}",
            d.probes,
            d.first_ms,
            d.settled_ms,
            d.note.as_ref().map_or(String::new(), |n| format!("; {n}"))
        )],
        remedy: "wait for the target to drain (a longer --drain), or find what keeps it busy".into(),
        cause: Some(qpslab_doctor::Cause::Undrained),
    })
}

/// What the findings say of the run as a measurement ([`qpslab_doctor::run_mark`]),
/// each once: `disturbed`, `behind-schedule`.
pub fn marks(findings: &[qpslab_doctor::Finding]) -> Vec<&'static str> {
    qpslab_doctor::run_marks(findings.iter().map(|f| (f.name, f.severity.name())))
}

/// The generators of a run the doctor did not follow: each agent, or this host's load.
fn generators(load: &Report, remote: &Remote) -> Vec<Generator> {
    let bound = |v: Option<&str>| v == Some("generator-bound");
    match (&load.agents, &remote.agents) {
        (Some(rows), _) => rows
            .iter()
            .map(|r| Generator {
                host: r.host.clone(),
                busy_ratio: r.busy_ratio.unwrap_or(0.0),
                bound: bound(r.verdict.as_deref()),
            })
            .collect(),
        _ => vec![Generator {
            host: format!("this host ({})", qpslab_sys::system::hostname()),
            busy_ratio: load.generator.busy_ratio,
            bound: bound(Some(load.generator.verdict)),
        }],
    }
}

/// The load (here or on the agents) while the doctor samples from the load's start instant:
/// the load's report, this host's samples (none when the doctor is on the server host) and
/// what the server host found.
/// The warm-up that leaves time to look for what is behind the server before the window.
const DISCOVERY_LEAD: Duration = Duration::from_millis(100);
/// How much before the load's window the doctor's may open, against late wake-ups.
const WAKE_EARLY: Duration = Duration::from_millis(20);

/// What a bench's run left: the load's report, the doctor's samples, the server host's
/// examination, and the processes found on the request path as the window began.
type Examined = (
    Report,
    Vec<qpslab_host::sample::Sample>,
    Option<Examining>,
    Vec<qpslab_host::upstream::Upstream>,
);

fn load_while_examined(
    opts: &BenchOptions,
    placed: &Placement,
    remote: &Remote,
    doctor: &mut Doctor<'_, '_>,
    stop: &AtomicBool,
    feed: &mut dyn Feed,
) -> Result<Examined, BenchError> {
    let done = AtomicBool::new(false);
    let (go, starts) = mpsc::channel::<Instant>();
    let mut examining = None;
    // What the server host follows: the target bench started there or the --server-pid
    // given, else the process listening on the URL's address.
    let pids = if placed.server_pids.is_empty() {
        opts.server_pids.clone()
    } else {
        placed.server_pids.clone()
    };
    let listen = place::resolve(&placed.url).ok().map(|r| r.0).filter(|_| pids.is_empty());
    let (load, samples, late) = std::thread::scope(|s| {
        let (exam, mut far) = match doctor {
            Doctor::Here(exam) => (Some(&mut **exam), None),
            Doctor::There(far) => (None, Some(far)),
        };
        let done = &done;
        let on_path = &placed.server_pids;
        let sampler = exam.map(|exam| {
            s.spawn(move || {
                let Ok(at) = starts.recv() else { return (Ok(Vec::new()), Vec::new()) };
                // During the warm-up, under load, a proxy holds connections to what is behind
                // it: the processes found there are followed as the server too. The search
                // runs beside the wait and is taken only when done by the window's start,
                // which it never delays (the doctor needs the whole window). Without a
                // warm-up there is no time for it.
                let lead = at.saturating_duration_since(Instant::now());
                let finder = (!on_path.is_empty() && lead >= DISCOVERY_LEAD).then(|| {
                    let pids = on_path.clone();
                    std::thread::spawn(move || {
                        std::thread::sleep(lead / 4);
                        qpslab_host::upstream::upstreams(&Root::live(), &pids)
                    })
                });
                // A sleep can wake late on a busy host: the doctor starts a little early so its
                // window never comes out shorter than the load's (a one-second run then had
                // one sampling interval, and no verdict).
                let early = at.checked_sub(WAKE_EARLY).unwrap_or(at);
                std::thread::sleep(early.saturating_duration_since(Instant::now()));
                let late = match finder {
                    Some(f) if f.is_finished() => f.join().unwrap_or_default(),
                    _ => Vec::new(),
                };
                for &pid in late.iter().flat_map(|u| &u.pids) {
                    exam.follow(pid, Role::Server);
                }
                (exam.record(|| done.load(Ordering::Relaxed)), late)
            })
        });
        let mut failed = None;
        let mut begin = |delay: Duration| match far.as_deref_mut() {
            None => {
                let _ = go.send(Instant::now() + delay);
            }
            Some(far) => {
                let call = ExamineCall {
                    interval: opts.interval,
                    delay,
                    pids: pids.clone(),
                    listen,
                    profile: opts.profile_options(),
                };
                match far.examine(&call) {
                    Ok(e) => examining = Some(e),
                    Err(e) => failed = Some(e),
                }
            }
        };
        let on_ready = remote.agents.is_none();
        let load = generate(
            opts,
            placed,
            remote,
            stop,
            &mut Tap { feed, begin: &mut begin, on_ready, warmup: opts.warmup() },
        );
        drop(go);
        done.store(true, Ordering::Relaxed);
        let (samples, late) = match sampler.map(|t| t.join()) {
            Some(Ok(got)) => got,
            _ => (Ok(Vec::new()), Vec::new()),
        };
        (failed.map_or(load, Err), samples, late)
    });
    Ok((load?, samples?, examining, late))
}

/// Runs the load, here or over the agents; `begin` is told when the measured window starts
/// (from now).
fn generate(
    opts: &BenchOptions,
    placed: &Placement,
    remote: &Remote,
    stop: &AtomicBool,
    tap: &mut Tap<'_, '_>,
) -> Result<Report, BenchError> {
    if let Some(fleet) = &remote.agents {
        let load_opts = LoadOptions {
            cpus: None,
            threads: opts.load.threads,
            warmup: Some(opts.warmup()),
            ..load_options(opts, placed, opts.duration())
        };
        let outcome = coordinator::run_load(&load_opts, fleet, &opts.meta, stop, tap).map_err(
            |e| match e {
                FleetError::Usage(m) => BenchError::Usage(m),
                FleetError::Failed(m) => BenchError::Agents(m),
            },
        )?;
        return Ok(outcome.report);
    }
    // The warm-up is the run's own, on the same connections: a warm-up run of its own left
    // its last requests queued in an application that queues, for the window to wait on, and
    // the window counts every response that completes in it.
    let warmup = opts.warmup();
    let cfg = LoadConfig::from_options(&LoadOptions {
        warmup: Some(warmup),
        ..load_options(opts, placed, opts.duration())
    })
    .map_err(|e| BenchError::Usage(e.to_string()))?;
    qpslab_load::preflight(&cfg)?;
    if !warmup.is_zero() {
        tap.feed.event(&Event::Phase("warming up"));
    }
    tap.event(&Event::Starting { lead: warmup });
    let result = qpslab_load::run(&cfg, stop, tap)?;
    Ok(Report::new(&cfg, &result, &opts.meta))
}

/// The load must go where bench examines: a `--urls` pool of whole URLs to another server
/// would load that one while the doctor watches bench's target.
fn one_target(load: &LoadOptions, url: &str) -> Result<(), BenchError> {
    if load.unix_socket.is_some() {
        return Ok(());
    }
    let cfg = LoadConfig::from_options(load).map_err(|e| BenchError::Usage(e.to_string()))?;
    let Ok((target, ..)) = place::resolve(url) else { return Ok(()) };
    let v = &cfg.variants;
    match (0..v.len()).find(|&i| v.addr(i) != target) {
        None => Ok(()),
        Some(i) => Err(BenchError::Usage(format!(
            "--urls: {} goes to {}, not to the target bench examines ({url}); give that server's URL as bench's target, or paths (/a, /b) in the file",
            v.url(i),
            v.addr(i)
        ))),
    }
}

/// What the doctor is told of the run: the load's figures, the ports of its connections, the
/// generators elsewhere (`here`: none), and, when the doctor runs on this host, the interfaces
/// on the way to the target.
fn run_context(
    opts: &BenchOptions,
    placed: &place::Placement,
    load: &Report,
    remote: &Remote,
    here: bool,
    doctor_here: bool,
) -> Context {
    let mut ctx = doctor_context(load);
    ctx.ports = run_ports(placed);
    if !here {
        ctx.generators = generators(load, remote);
    }
    if doctor_here {
        // The doctor judges the interfaces on the way to the target, not every busy one.
        // Over a unix socket no interface is on the way.
        ctx.path = place::resolve(&placed.url).ok().and_then(|(addr, ..)| {
            if opts.load.unix_socket.is_some() {
                return Some(Vec::new());
            }
            let ip = addr.ip();
            let local = qpslab_sys::sockets::is_local(ip);
            Some(vec![qpslab_host::route::interface_for(&Root::live(), ip, local)?])
        });
    }
    ctx
}

/// The ports of the run's connections: the target's, and those of the listeners behind it.
fn run_ports(placed: &place::Placement) -> Vec<u16> {
    let target = place::resolve(&placed.url).ok().map(|(addr, ..)| addr.port());
    let behind = placed
        .path
        .iter()
        .filter_map(|u| u.addr.rsplit_once(':').and_then(|(_, port)| port.parse::<u16>().ok()));
    let mut ports: Vec<u16> = target.into_iter().chain(behind).collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// What the load tells the doctor.
fn doctor_context(load: &Report) -> Context {
    let no_port =
        load.error_examples.get("connect").is_some_and(|m| m.contains("assign requested address"));
    Context {
        load: Some(load_facts(load)),
        addr_not_available: if no_port {
            load.errors.get("connect").copied().unwrap_or(0)
        } else {
            0
        },
        ..Context::default()
    }
}

/// Requests a connection kept in flight at most: the pipeline depth or streams asked, within
/// the server's HTTP/2 stream limit.
fn in_flight_per_connection(load: &Report) -> usize {
    let asked = load.config.pipeline.max(1);
    match load.h2.as_ref().and_then(|h| h.server_max_concurrent_streams) {
        Some(k) => asked.min((k as usize).max(1)),
        None => asked,
    }
}

/// The load's figures the doctor explains the rate by.
fn load_facts(load: &Report) -> LoadFacts {
    let r = &load.requests;
    let schedule = load.rate.as_ref().map(|s| qpslab_doctor::Schedule {
        target_rps: s.target_rps,
        achieved_rps: s.achieved_rps,
        kept: s.kept,
        due_unsent: s.due_unsent,
        lag_p50_ms: load.send_lag_us.as_ref().map_or(0.0, |l| l.p50 as f64 / 1e3),
        connections_free: s.idle_at_stop > 0,
    });
    LoadFacts {
        mode: load.config.mode.to_string(),
        concurrency: (load.config.connections * in_flight_per_connection(load)) as u64,
        stream_limit: load
            .h2
            .as_ref()
            .and_then(|h| h.server_max_concurrent_streams)
            .map(u64::from)
            .filter(|&k| k < load.config.pipeline as u64)
            .map(|server| qpslab_doctor::StreamLimit {
                server,
                asked: load.config.pipeline as u64,
            }),
        flow: load.h2.as_ref().map(|h| qpslab_doctor::FlowFacts {
            // Not sent: HTTP/2's default (RFC 9113 6.5.2).
            server_window: u64::from(h.server_initial_window.unwrap_or(65_535)),
            held: h.bodies_held.map_or(0, |b| b.requests),
            held_on_connection: h.bodies_held.map_or(0, |b| b.on_connection_window),
            held_share: h.bodies_held.map_or(0.0, |b| b.share_of_latency),
            client_window: u64::from(h.client_window),
            past_client_window: h.responses_past_client_window,
        }),
        stalls: load.stalls.as_ref().map(|st| qpslab_doctor::StallFacts {
            count: st.count,
            total_s: st.total_ms / 1e3,
            longest_s: st.longest_ms / 1e3,
            share: st.share_of_window,
            held: st.requests_held,
            threshold_s: st.threshold_ms / 1e3,
        }),
        responses: r.completed,
        ok: r.ok,
        failed: r.failed,
        bad_status: r.bad_status,
        statuses: load.status.clone(),
        grpc_statuses: load.grpc.as_ref().map(|g| g.status.clone()),
        // Behind its schedule an open loop is paced by its connections: the latency of a send,
        // not of its slot, is what Little's law relates to them.
        mean_latency_s: match (&schedule, &load.latency_uncorrected_us) {
            (Some(s), Some(u)) if !s.kept => u.mean / 1e6,
            _ => load.latency_us.mean / 1e6,
        },
        mean_connect_s: if load.config.conn_per_request {
            load.connections.connect_us.mean / 1e6
        } else {
            0.0
        },
        reconnects: load.connections.reconnects,
        starved: load.connections.starved.waited_over_p999,
        unanswered: load.connections.starved.unanswered,
        connections: load.config.connections as u64,
        path_rtt_s: load.connections.path_rtt_us.map(|r| f64::from(r.median) / 1e6),
        duration_s: load.duration_s,
        schedule,
        latency_tail: tail(&load.latency_us),
        connect_tail: if load.connections.connects > 0 {
            tail(&load.connections.connect_us)
        } else {
            Vec::new()
        },
        tls: load.connections.tls.as_ref().map(|t| qpslab_doctor::TlsFacts {
            full: t.full_handshakes,
            resumed: t.resumed,
            mean_s: t.handshake_us.mean / 1e6,
        }),
        quic: load.h3.as_ref().map(|h| qpslab_doctor::QuicFacts {
            datagrams_in: h.datagrams_in,
            datagrams_out: h.datagrams_out,
            send_dropped: h.send_dropped,
        }),
    }
}

/// A latency's quantiles in seconds, for the doctor's kernel timers.
fn tail(l: &qpslab_load::report::Latency) -> Vec<(f64, f64)> {
    [(0.5, l.p50), (0.9, l.p90), (0.99, l.p99), (0.999, l.p999), (0.9999, l.p9999), (1.0, l.max)]
        .iter()
        .map(|(q, us)| (*q, *us as f64 / 1e6))
        .collect()
}

/// The report; `followed`: the doctor followed the generator's process (else its CPU comes
/// from the load's own account).
fn report(
    placed: Placement,
    examining: Option<Examining>,
    load: Report,
    doctor: Diagnosis,
    server_host: Option<ServerHostReport>,
    followed: bool,
) -> BenchReport {
    let side = |r: Role| {
        doctor.summary.processes.iter().filter(|p| p.role == r).map(|p| p.cpu).sum::<f64>()
    };
    let mut target = TargetReport {
        kind: placed.started.unwrap_or("url"),
        url: placed.url,
        pids: placed.server_pids,
        found_by: placed.found_by,
        cpus: placed.server_cpus,
        workers: placed.workers,
        accept: placed.accept,
        path: placed.path,
    };
    let mut notes = placed.notes;
    if let Some(e) = examining.filter(|_| target.pids.is_empty()) {
        target.found_by = match e.found_by.as_deref() {
            Some("listening") => Some("listening"),
            Some(_) => Some("--server-pid"),
            None => None,
        };
        target.pids = e.pids;
        target.cpus = e.cpus;
        notes.extend(e.notes);
    }
    let server_cpu = (!target.pids.is_empty()).then(|| side(Role::Server));
    let window = doctor.summary.duration_s.max(1e-9);
    if let Some(r) = placed.running {
        r.stop();
    }
    let generator_cpu = if followed {
        side(Role::Client)
    } else {
        let g = &load.generator;
        (g.cpu_user_s + g.cpu_sys_s) / load.duration_s.max(1e-9)
    };
    BenchReport {
        requests_per_server_cpu_s: server_cpu
            .filter(|&c| c > 0.0)
            .map(|c| load.requests.completed as f64 / (c * window)),
        server_cpu,
        generator_cpu,
        generator_cpus: if load.agents.is_some() { Vec::new() } else { placed.generator_cpus },
        cpus_shared: placed.shared,
        server_host,
        notes,
        target,
        load,
        doctor,
        drain_before: None,
        drain_after: None,
        marks: Vec::new(),
    }
}

/// The load's options: the user's, on bench's target, one thread per generator CPU (or
/// `--threads`), pinned there, for `duration` (the warm-up is a run of its own).
fn load_options(opts: &BenchOptions, placed: &Placement, duration: Duration) -> LoadOptions {
    // One thread per generator CPU, at most one per connection (as `qpslab load` defaults).
    let conns = opts.load.connections_or_default();
    let threads = opts.load.threads.unwrap_or(placed.generator_cpus.len().min(conns)).max(1);
    let list: Vec<String> = placed.generator_cpus.iter().map(ToString::to_string).collect();
    let mut tls = opts.load.tls.clone();
    // The target's certificate was made at its start: nothing to verify it against.
    tls.insecure |= placed.url.starts_with("https://") && opts.url().is_none();
    LoadOptions {
        urls: vec![placed.url.clone()],
        threads: Some(threads),
        duration: Some(duration),
        warmup: None,
        cpus: Some(list.join(",")),
        tls,
        ..opts.load.clone()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    fn opts() -> BenchOptions {
        BenchOptions::default()
    }

    fn refusal(o: BenchOptions) -> String {
        match o.validate() {
            Err(BenchError::Usage(m)) => m,
            other => panic!("expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn options_that_exclude_each_other_are_refused_by_name() {
        let builtin = opts().validate().unwrap().unwrap();
        assert_eq!((builtin.kind, builtin.accept), (TargetKind::Builtin, Accept::Reuseport));
        let url = "http://127.0.0.1:8080/".to_string();
        assert!(matches!(BenchOptions { target: url.clone(), ..opts() }.validate(), Ok(None)));
        let with_url = |o: BenchOptions| refusal(BenchOptions { target: url.clone(), ..o });
        assert!(with_url(BenchOptions { workers: Some(2), ..opts() }).starts_with("--workers"));
        assert!(with_url(BenchOptions { accept: Some("shared".into()), ..opts() })
            .starts_with("--accept"));
        let nginx =
            |a: &str| BenchOptions { target: "nginx".into(), accept: Some(a.into()), ..opts() };
        assert_eq!(nginx("mutex").validate().unwrap().unwrap().accept, Accept::Mutex);
        assert!(refusal(nginx("exclusive")).contains("nginx takes reuseport, shared or mutex"));
        let cpus = BenchOptions { server_cpus: Some("100000".into()), ..opts() };
        assert!(refusal(cpus).starts_with("--server-cpus"));
        assert!(refusal(BenchOptions { workers: Some(0), ..opts() }).starts_with("--workers"));
        assert!(refusal(BenchOptions { target: "apache".into(), ..opts() }).starts_with("--target"));
        let tls = BenchOptions { tls: true, ..opts() };
        assert!(with_url(tls).contains("cannot be combined with a URL"));
        let pid_alone = BenchOptions { server_pids: vec![1], ..opts() };
        assert!(refusal(pid_alone).starts_with("--server-pid names the server behind a URL"));
        assert!(refusal(BenchOptions {
            load: LoadOptions { duration: Some(Duration::ZERO), ..LoadOptions::default() },
            ..opts()
        })
        .starts_with("--duration"));
        assert!(
            refusal(BenchOptions { interval: Duration::ZERO, ..opts() }).starts_with("--interval")
        );
    }
}
