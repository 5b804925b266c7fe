//! One doctor pipeline for every command that examines a run (`qpslab doctor`, `qpslab
//! bench`): read the host, follow the server's and the generator's processes, sample the
//! kernel's counters until told to stop, then summarise and diagnose. The caller only decides
//! when to stop and what else it knows about the run ([`Context`]). Asked to, it also profiles
//! every CPU while it samples ([`qpslab_profile`]), and the rules read the profile as evidence.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use qpslab_profile::{Profile, ProfileError, ProfileOptions, RawProfile, Sampler, Symbols};

use serde::{Deserialize, Serialize};

use crate::{diagnose, summarize, Context, Explanation, Finding, Summary};
use qpslab_host::host::Host;
use qpslab_host::logs::{group, LogWindow, Tail};
use qpslab_host::sample::{sample_until, Role, Sample, Watch};
use qpslab_host::stub_status::{
    Location as StubLocation, Reading as StubReading, Window as StubWindow,
};
use qpslab_sys::root::{ReadError, Root};

/// What a log gained over the window, as messages (nginx's error log lines).
fn read_window(t: &Tail) -> Option<LogWindow> {
    let (text, bytes) = t.appended()?;
    let messages = group(&text, qpslab_host::nginx::error_line);
    Some(LogWindow { path: t.path().display().to_string(), bytes, messages })
}
use qpslab_tune::JOURNAL;

/// What the doctor says about a run: the summary and the findings, worst first, and the
/// profile when one was asked for (`available: false` with the reason when it could not be
/// taken).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Diagnosis {
    pub summary: Summary,
    pub findings: Vec<Finding>,
    /// The rate explained: the resources measured and the chain from the rate to the bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<Explanation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<Profile>,
}

/// An examination of the host under a root, following some processes.
#[derive(Debug)]
pub struct Examination {
    root: Root,
    host: Host,
    irqs: BTreeSet<u32>,
    watch: Vec<Watch>,
    /// The run's ports (its server's and those behind it), whose connections are tallied.
    ports: Vec<u16>,
    interval: Duration,
    profile: Option<ProfileOptions>,
    profiled: Option<Result<RawProfile, ProfileError>>,
    /// The followed nginx's configuration, read when recording starts.
    nginx: Option<qpslab_host::nginx::NginxConf>,
    /// What its error logs gained over the recording.
    logs: Vec<qpslab_host::logs::LogWindow>,
    /// Its stub_status page, where its configuration has one that answered when recording
    /// started (with the master's PID, whose namespace it answers in), and the page over the
    /// recording.
    stub_at: Option<(u32, StubLocation)>,
    stub: Option<StubWindow>,
}

/// How long a read of nginx's stub_status page may take.
const STUB_TIMEOUT: Duration = Duration::from_millis(300);

impl Examination {
    /// Reads the host under `root`; samples will be `interval` apart.
    pub fn new(root: &Root, interval: Duration) -> Result<Self, ReadError> {
        let host = Host::read(root)?;
        let irqs = host.nics.iter().flat_map(|n| n.irq_numbers()).collect();
        Ok(Self {
            root: root.clone(),
            host,
            irqs,
            watch: Vec::new(),
            ports: Vec::new(),
            interval,
            profile: None,
            profiled: None,
            nginx: None,
            logs: Vec::new(),
            stub_at: None,
            stub: None,
        })
    }

    /// The host as read at the start.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// Follows process `pid` (all its threads) as one side of the run.
    pub fn follow(&mut self, pid: u32, role: Role) {
        if !self.watch.iter().any(|w| w.pid == pid) {
            self.watch.push(Watch { pid, role });
        }
    }

    /// The run's ports: TCP's account of their connections is read at each sample.
    pub fn watch_ports(&mut self, ports: &[u16]) {
        self.ports = ports.to_vec();
    }

    /// The processes followed, by PID.
    pub fn followed(&self) -> BTreeMap<u32, Role> {
        self.watch.iter().map(|w| (w.pid, w.role)).collect()
    }

    /// Profiles every online CPU while recording.
    pub fn profile(&mut self, o: ProfileOptions) {
        self.profile = Some(o);
    }

    /// Samples at once, then every interval until `stop()` says so (checked every 20 ms), then
    /// once more; profiles meanwhile when asked to (a profile that cannot be taken is not an
    /// error: the diagnosis says why there is none).
    pub fn record(&mut self, stop: impl FnMut() -> bool) -> Result<Vec<Sample>, ReadError> {
        let cpus: Vec<usize> = self.host.online.iter().collect();
        let tails = self.server_log_tails();
        let stub_first = self.stub_at.as_ref().map(|(_, at)| at.clone()).zip(self.read_stub());
        let began = std::time::Instant::now();
        let sampler = self.profile.as_ref().map(|o| Sampler::start(&self.root, &cpus, o));
        let samples =
            sample_until(&self.root, &self.irqs, &self.watch, &self.ports, self.interval, stop);
        self.profiled = sampler.map(|s| s.map(Sampler::stop));
        self.logs = tails.iter().filter_map(read_window).collect();
        let secs = began.elapsed().as_secs_f64();
        self.stub = stub_first.zip(self.read_stub()).map(|((at, first), last)| StubWindow {
            at,
            first,
            last,
            secs,
        });
        samples
    }

    fn read_stub(&self) -> Option<StubReading> {
        let (pid, at) = self.stub_at.as_ref()?;
        qpslab_host::stub_status::read_from(*pid, at, STUB_TIMEOUT)
    }

    /// The followed server's error logs, noted where they end (nginx's, from its
    /// configuration, on a live host); its configuration is kept for the diagnosis.
    fn server_log_tails(&mut self) -> Vec<Tail> {
        let servers = self.watch.iter().filter(|w| w.role == Role::Server);
        let live = qpslab_host::is_live(self.root.dir());
        let Some(master) =
            servers.filter(|_| live).find_map(|w| qpslab_host::nginx::master(&self.root, w.pid))
        else {
            return Vec::new();
        };
        let Some(dump) = master.dump() else {
            return Vec::new();
        };
        let conf = qpslab_host::nginx::parse(&dump);
        // The first page that answers is the one read.
        self.stub_at = qpslab_host::stub_status::locations(&dump)
            .into_iter()
            .find(|at| qpslab_host::stub_status::read_from(master.pid, at, STUB_TIMEOUT).is_some())
            .map(|at| (master.pid, at));
        let mut paths = master.error_log_paths(&conf);
        paths.sort();
        paths.dedup();
        self.nginx = Some(conf);
        paths.iter().filter_map(|p| Tail::start(p)).collect()
    }

    /// Summarises the samples and applies every rule; whether a tune journal is active is
    /// read from the root. The profile, if one was taken, is symbolized here, after the run.
    pub fn diagnose(&self, samples: &[Sample], mut ctx: Context) -> Diagnosis {
        let summary = summarize(samples, &self.followed(), qpslab_sys::system::clock_ticks());
        ctx.journal_active = self.root.exists(JOURNAL);
        if ctx.server_logs.is_empty() {
            ctx.server_logs = self.logs.clone();
        }
        if ctx.nginx.is_none() {
            ctx.nginx = self.nginx.clone();
        }
        if ctx.stub_status.is_none() {
            ctx.stub_status = self.stub.clone();
        }
        if ctx.nginx.is_none() {
            ctx.nginx = self
                .watch
                .iter()
                .filter(|w| w.role == Role::Server)
                .find_map(|w| qpslab_host::nginx::read(&self.root, w.pid));
        }
        ctx.profile = self.profiled.as_ref().map(|r| self.build_profile(r));
        let (findings, explanation) = diagnose(&self.host, samples, &summary, &ctx);
        Diagnosis { summary, findings, explanation: Some(explanation), profile: ctx.profile }
    }

    fn build_profile(&self, raw: &Result<RawProfile, ProfileError>) -> Profile {
        let raw = match raw {
            Ok(r) => r,
            Err(e) => return Profile::unavailable(e.to_string()),
        };
        let symbols = Symbols::resolve(raw, &self.root.path("proc/kallsyms"));
        let roles: HashMap<u32, &str> = self
            .watch
            .iter()
            .map(|w| (w.pid, if w.role == Role::Server { "server" } else { "generator" }))
            .collect();
        let folded = self.profile.as_ref().is_some_and(|o| o.folded);
        Profile::build(raw, &symbols, &roles, folded)
    }
}
