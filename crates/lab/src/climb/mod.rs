//! `qpslab climb`: the tuning walk of the field reports as one command. Measure the starting
//! state, repeated; take the doctor's findings, headline first, and turn the first that names
//! a change this run may make into a typed [`Change`]; measure the candidate against the
//! current state interleaved (A B A B A B, so drift hits both alike); keep it only when the
//! noise rule says better, the gain is at least `min_gain` and one more pair (A B) agrees;
//! otherwise keep the current state. Repeat on the new state until no finding names a change
//! left to try, the budget is spent, or two steps in a row gained nothing.
//!
//! The decision compares ok responses per second (a change that answers faster with errors is
//! never kept; a start that answered nothing climbs by the ranges rule). Every run is made
//! like a sweep's ([`crate::trial`]) and stored like one (the climb is the sweep, each state a
//! variant), so `runs`, `compare` and `report` read it.
//!
//! What it may change ([`remedy`]): the run's own knobs (the load's connections and threads,
//! its load machines from `--agents`, the workers of a server the bench started); with
//! `--apply-server` the user's nginx, here or on `--server HOST` ([`server`], [`held`]); with
//! `--apply-host` the server's host's settings, here or there ([`host`]). Anything else is a
//! row "not applicable", with why.

pub mod held;
pub mod host;
pub mod remedy;
pub mod server;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use qpslab_load::feed::{Event, Feed};
use qpslab_runs::compare::{paired_verdict, Spread, Verdict};
use qpslab_runs::store::{Store, StoreError};
use serde::Serialize;

pub use remedy::{Change, Knobs, Remedy};

use crate::bench::{BenchError, BenchOptions, BenchReport};
use crate::kinds::TuneSpec;
use crate::record::Provenance;
use crate::remote::InForce;
use crate::trial::{self, Trial, TrialError};

/// How a climb runs.
#[derive(Debug, Clone)]
pub struct ClimbOptions {
    /// The starting state: bench's options.
    pub start: BenchOptions,
    /// No step starts that could not end within it.
    pub budget: Duration,
    /// The smallest gain kept (0.03: 3%).
    pub min_gain: f64,
    /// Runs of each state per step.
    pub repeats: u32,
    /// At most this many steps measured (a step found not applicable is not one).
    pub max_steps: Option<usize>,
    /// Stored with every run.
    pub label: Option<String>,
    /// The climb may edit the user's own server's configuration (nginx): the original is kept
    /// aside and restored at the end.
    pub apply_server: bool,
    /// The climb may change this host's settings (journaled, in force only during the runs
    /// of the states that hold them).
    pub apply_host: bool,
    /// With `apply_server`: the climb may remove the server's rate limits (nginx's
    /// `limit_req`) for its runs, when the doctor finds one sets the rate.
    pub allow_limits: bool,
    /// With `apply_host`: leave the final state's host settings in force at the end.
    pub keep: bool,
    /// The tune journal [default: tune's].
    pub journal: Option<std::path::PathBuf>,
    /// Any server, through a template of its configuration (with `apply_server`).
    pub server_config: Option<ServerConfig>,
}

/// `--server-config TEMPLATE:FILE --server-reload CMD`, and `-w` and `--server-threads` as
/// the workers and threads per worker to start from.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub template: std::path::PathBuf,
    pub file: std::path::PathBuf,
    pub reload: String,
    pub workers: usize,
    pub threads: usize,
    /// The server's descriptor limit now, where the template names `{{nofile}}`.
    pub nofile: Option<u64>,
}

/// Why a climb could not start or went wrong.
#[derive(Debug, thiserror::Error)]
pub enum ClimbError {
    /// The user's to fix before any run (exit 2).
    #[error("{0}")]
    Usage(String),
    #[error("{state}: {source}")]
    Run { state: String, source: BenchError },
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The user's server could not be changed or restored.
    #[error("{0}")]
    Server(String),
    /// A host setting could not be applied or reverted.
    #[error("{0}")]
    Host(String),
}

/// Ok responses per second: median and range over a state's runs in one step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rps {
    pub rps: f64,
    pub min: f64,
    pub max: f64,
}

impl Rps {
    fn of(runs: &[BenchReport]) -> Option<Rps> {
        let s = Spread::of(&runs.iter().map(ok_rps).collect::<Vec<_>>())?;
        Some(Rps { rps: s.median, min: s.min, max: s.max })
    }
}

/// One row of the climb, as the field reports wrote them.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    /// The finding that named the change (or, when nothing could change, the headline).
    pub finding: String,
    /// Its summary, and the rate explained in the state it was seen in.
    pub evidence: Vec<String>,
    /// `connections 1 -> 2`; None when no change was made.
    pub change: Option<String>,
    /// The change, typed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub knob: Option<Change>,
    pub before: Option<Rps>,
    pub after: Option<Rps>,
    /// Median after over median before, and its range over every pair of runs.
    pub ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_range: Option<[f64; 2]>,
    /// `kept`, `reverted`, `not-applicable`, `stopped` (the run fails), or, in a dry run,
    /// `planned`.
    pub verdict: &'static str,
    /// Why, in a sentence.
    pub why: String,
    /// Pairs of runs of the step left out of the decision because the doctor found a run of
    /// theirs disturbed (other work held it back, or it began on a busy target), while two
    /// pairs remain.
    #[serde(skip_serializing_if = "is_zero")]
    pub disturbed: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The ok rates of the pairs a decision weighs (A's runs and B's, run in turn): all but those
/// with a disturbed run while two pairs remain.
fn trusted(a: &[BenchReport], b: &[BenchReport]) -> (Vec<f64>, Vec<f64>) {
    let disturbed = |r: &BenchReport| r.marks.contains(&"disturbed");
    let pairs: Vec<(f64, f64, bool)> = a
        .iter()
        .zip(b)
        .map(|(x, y)| (ok_rps(x), ok_rps(y), disturbed(x) || disturbed(y)))
        .collect();
    trusted_rates(&pairs)
}

/// [`trusted`] on (A's ok rate, B's, disturbed) pairs. A failing start against a change that
/// answered in every run is judged on every pair: the from-nothing rule needs three, and
/// leaving a disturbed pair out left two (CI saw "no figures" for a start answering 0 and 993
/// ok/s against a change at 19,000 in every run). Disturbance lowers rates; it does not make
/// a change answer above every run of the start.
fn trusted_rates(pairs: &[(f64, f64, bool)]) -> (Vec<f64>, Vec<f64>) {
    let (a, b): (Vec<f64>, Vec<f64>) =
        qpslab_runs::compare::undisturbed_pairs(pairs).into_iter().unzip();
    let (all_a, all_b): (Vec<f64>, Vec<f64>) = pairs.iter().map(|p| (p.0, p.1)).unzip();
    if !from_nothing(&a, &b) && from_nothing(&all_a, &all_b) {
        return (all_a, all_b);
    }
    (a, b)
}

/// A climb as it ended.
#[derive(Debug, Clone, Serialize)]
pub struct Climb {
    /// The starting state's ok responses per second (median of its repeats).
    pub start_rps: f64,
    /// The final state's, from its last measurement.
    pub final_rps: f64,
    pub start: Rps,
    #[serde(rename = "final")]
    pub last: Rps,
    pub steps: Vec<Step>,
    /// The final state as bench flags over the starting command (the changes kept).
    pub plan: Vec<String>,
    /// The final state's host settings as `qpslab tune plan|apply --from FILE` reads them
    /// (what [`state_file`] writes): its sysctls and the interfaces whose steering it kept.
    pub host_settings: TuneSpec,
    /// The host they were changed on (`this host`, or `--server`'s), with `--apply-host`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_settings_on: Option<String>,
    /// How many load machines (`--agents`) the final state uses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_machines: Option<usize>,
    /// The final state's server configuration file, when the climb changed it (the user's
    /// nginx, or a template's): where it lives (on the server host with `--server`) and its
    /// text in that state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_file: Option<ServerFile>,
    /// Why the climb ended.
    pub ended: String,
    /// The sweep id its runs are stored under, when stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep: Option<i64>,
    /// With `--keep`: the journal of the host settings left in force (`qpslab tune revert`
    /// undoes them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_journal: Option<std::path::PathBuf>,
}

/// A server configuration file and its text in a state.
#[derive(Debug, Clone, Serialize)]
pub struct ServerFile {
    pub path: std::path::PathBuf,
    pub text: String,
}

/// A state of the walk: its options, its name, the user's server configuration in it (when
/// the climb has it in hand) and its last runs.
struct State {
    name: String,
    opts: BenchOptions,
    server: Option<String>,
    /// What its server's template was filled in with (`--server-config`; each None when the
    /// template does not name it).
    template: server::Vars,
    /// The host changes in force for its runs.
    host: Vec<Change>,
    runs: Vec<BenchReport>,
}

impl State {
    /// The starting state: over load machines, the first of the pool.
    fn start(o: &ClimbOptions, pool: &[String]) -> State {
        let mut opts = o.start.clone();
        if let Some(first) = pool.first() {
            opts.agents = Some(first.clone());
        }
        State {
            name: "start".into(),
            opts,
            server: None,
            template: server::Vars::default(),
            host: Vec::new(),
            runs: Vec::new(),
        }
    }

    /// The run whose ok rate is the median: its findings speak for the state.
    fn median_run(&self) -> Option<&BenchReport> {
        let mut v: Vec<&BenchReport> = self.runs.iter().collect();
        v.sort_by(|a, b| ok_rps(a).total_cmp(&ok_rps(b)));
        v.get(v.len() / 2).copied()
    }
}

/// A run's ok responses per second.
pub fn ok_rps(r: &BenchReport) -> f64 {
    if r.load.duration_s > 0.0 {
        r.load.requests.ok as f64 / r.load.duration_s
    } else {
        0.0
    }
}

/// The decision rule: keep B when the noise rule, weighing the runs in pairs (`a[i]` ran just
/// before `b[i]`), says B is faster than A beyond run-to-run noise and by at least `min_gain`.
/// (The re-check pair comes after.)
pub fn better(a: &[f64], b: &[f64], min_gain: f64) -> bool {
    from_nothing(a, b)
        || paired_rule(a, b).is_some_and(|v| {
            v.judgement == "beyond-noise" && v.ratio > 1.0 && v.ratio >= 1.0 + min_gain
        })
}

/// A failing start (no ok response in a run of its, at least) against a change that answered
/// in every one of its, each run above every run of the start: beyond noise by the ranges rule
/// (every B above every A) once there are three pairs, whatever the ratio, which has no value
/// with a zero in it.
pub fn from_nothing(a: &[f64], b: &[f64]) -> bool {
    let most = a.iter().copied().fold(0.0, f64::max);
    a.len() >= 3
        && a.contains(&0.0)
        && b.len() >= a.len()
        && b.iter().all(|x| *x > 0.0 && *x > most)
}

fn paired_rule(a: &[f64], b: &[f64]) -> Option<Verdict> {
    let pairs: Vec<(f64, f64)> = a.iter().copied().zip(b.iter().copied()).collect();
    paired_verdict(&pairs)
}

/// The decision rule, whole: [`better`] on the interleaved runs and then, only when it holds,
/// one more pair from `recheck` (A's ok rate, then B's), in which B must be faster again.
/// `Ok(None)`: the re-check was stopped.
pub fn decide<E>(
    a: &[f64],
    b: &[f64],
    min_gain: f64,
    recheck: impl FnOnce() -> Result<Option<(f64, f64)>, E>,
) -> Result<Option<bool>, E> {
    if !better(a, b, min_gain) {
        return Ok(Some(false));
    }
    Ok(recheck()?.map(|(a2, b2)| b2 > a2))
}

/// The walk: what it runs with and what it has done.
struct Walk<'a> {
    o: &'a ClimbOptions,
    store: Option<(&'a mut Store, i64)>,
    stop: &'a AtomicBool,
    feed: &'a mut dyn Feed,
    clock: Instant,
    /// Runs made so far.
    runs: u32,
    /// The user's server (nginx, here or on the server host, or any through its template),
    /// with `--apply-server`.
    server: Option<held::InHand<'a>>,
    /// The server host (`--server HOST`), where its nginx is taken in hand.
    far: Option<&'a qpslab_fleet::session::FleetOptions>,
    /// The server's host, with `--apply-host`.
    host: Option<host::HostSide>,
    /// The load machines it may use (`--agents`), in order; empty: the load runs here.
    pool: Vec<String>,
    /// The listen queue settings the user's nginx last listened under (none: the host's).
    listened: Vec<Change>,
}

impl Walk<'_> {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// One bench of `st` (its server configuration put in force first), stored; None when a
    /// signal stopped it (not stored).
    fn run(
        &mut self,
        st: &State,
        at: (usize, usize, usize, u32),
    ) -> Result<Option<BenchReport>, ClimbError> {
        let (state, opts) = (st.name.as_str(), &st.opts);
        if let (Some(n), Some(text)) = (&mut self.server, &st.server) {
            n.put(text).map_err(ClimbError::Server)?;
        }
        let (run, runs, variant, repeat) = at;
        self.feed.event(&Event::RunStart {
            run,
            runs,
            variant,
            variants: 2,
            name: state,
            repeat,
            repeats: self.o.repeats,
            eta: self.o.budget.saturating_sub(self.clock.elapsed()),
        });
        let settings = match &self.host {
            Some(h) => h.apply(&st.host).map_err(ClimbError::Host)?,
            None => None,
        };
        relisten(&mut self.server, &mut self.listened, st)?;
        let trial = Trial { opts, variant: state, repeat, label: self.o.label.as_deref() };
        let store = self.store.as_mut().map(|(s, id)| (&mut **s, *id));
        let provenance = match &store {
            Some(_) => Provenance::read(&opts.meta, self.o.journal.as_deref()),
            None => Provenance::default(),
        };
        let settings = settings.unwrap_or(InForce::Here(None));
        let made = trial::run(trial, settings, store, provenance, self.stop, self.feed);
        self.runs += 1;
        match made {
            Ok(made) => Ok(made.map(|(report, _)| report)),
            Err(TrialError::Settings(e)) => Err(ClimbError::Host(e)),
            Err(TrialError::Run(source)) => {
                Err(ClimbError::Run { state: state.to_string(), source })
            }
            Err(TrialError::Store(e)) => Err(e.into()),
        }
    }

    /// The time one run takes: the mean so far, or its warm-up and window and a second before
    /// the first ends.
    fn per_run(&self) -> Duration {
        match self.runs {
            0 => self.o.start.warmup() + self.o.start.duration() + Duration::from_secs(1),
            n => self.clock.elapsed() / n,
        }
    }

    /// Keeps the climb so far with its stored runs (the sweep's file): the report draws its
    /// staircase from it, also of a climb that did not end.
    fn record(&self, climb: &serde_json::Value) -> Result<(), ClimbError> {
        if let Some((store, sweep)) = &self.store {
            store.set_sweep_file(*sweep, &serde_json::json!({ "climb": climb }).to_string())?;
        }
        Ok(())
    }

    /// Whether a step of `runs` runs still ends within the budget.
    fn affords(&self, runs: u32) -> bool {
        self.clock.elapsed() + self.per_run() * runs <= self.o.budget
    }
}

/// The user's nginx re-listens when the state's listen queue settings are not those it
/// last listened under: raising `net.core.somaxconn` sizes no queue until listen() is
/// called again, and a state measured after one that raised it must not keep its queue.
fn relisten(
    server: &mut Option<held::InHand<'_>>,
    listened: &mut Vec<Change>,
    st: &State,
) -> Result<(), ClimbError> {
    let listen: Vec<Change> = st.host.iter().filter(|c| c.is_listen()).cloned().collect();
    if listen == *listened {
        return Ok(());
    }
    if let Some(s) = server.as_mut().filter(|s| s.is_nginx()) {
        s.relisten().map_err(ClimbError::Server)?;
    }
    *listened = listen;
    Ok(())
}

/// Runs the climb; `store`: where its runs go (None: not stored).
pub fn climb(
    o: &ClimbOptions,
    store: Option<&mut Store>,
    stop: &AtomicBool,
    feed: &mut dyn Feed,
) -> Result<Climb, ClimbError> {
    check(o)?;
    let store = match store {
        Some(s) => {
            let text = format!(
                "climb from {}; repeats {}, min gain {:.1}%, budget {:?}",
                o.start.target,
                o.repeats,
                o.min_gain * 100.0,
                o.budget
            );
            let id = s.begin_sweep("climb", &crate::sweep::now(), &text)?;
            Some((s, id))
        }
        None => None,
    };
    let sweep = store.as_ref().map(|s| s.1);
    let host = host_side(o)?;
    let pool = agent_pool(o)?;
    let remote = o.start.remote().map_err(|e| ClimbError::Usage(e.to_string()))?;
    let clock = Instant::now();
    let far = remote.server.as_ref();
    let listened = Vec::new();
    let mut w =
        Walk { o, store, stop, feed, clock, runs: 0, server: None, far, host, pool, listened };
    let mut result = walk(&mut w);
    if let Some(mut n) = w.server.take() {
        // Listening under the host's own settings again (they were reverted after the last
        // run), and the original back, byte for byte, whatever happened.
        let relistened = if w.listened.is_empty() { Ok(()) } else { n.relisten_at_end() };
        match relistened.and_then(|()| n.restore()) {
            Ok(()) => n.close(),
            Err(e) => {
                result = Err(ClimbError::Server(format!(
                    "{e}; the original is kept at {}: copy it back over {} and {}",
                    n.backup().display(),
                    n.file().display(),
                    n.reload_hint()
                )));
                std::mem::forget(n);
            }
        }
    }
    if let Ok(c) = &result {
        w.record(&serde_json::to_value(c).unwrap_or_default())?;
    }
    if let Some((s, id)) = &w.store {
        let status = match &result {
            Ok(c) if c.ended.starts_with("stopped") => "stopped",
            Ok(_) => "done",
            Err(_) => "failed",
        };
        s.end_sweep(*id, &crate::sweep::now(), status)?;
    }
    result.map(|c| Climb { sweep, ..c })
}

/// `--dry-run`: one run of the starting state, and what its findings would change first.
pub fn first_step(
    o: &ClimbOptions,
    stop: &AtomicBool,
    feed: &mut dyn Feed,
) -> Result<(BenchReport, Vec<Step>), ClimbError> {
    check(o)?;
    let host = host_side(o)?;
    let pool = agent_pool(o)?;
    let remote = o.start.remote().map_err(|e| ClimbError::Usage(e.to_string()))?;
    let (clock, far) = (Instant::now(), remote.server.as_ref());
    let listened = Vec::new();
    let mut w = Walk {
        o,
        store: None,
        stop,
        feed,
        clock,
        runs: 0,
        server: None,
        far,
        host,
        pool,
        listened,
    };
    let mut state = State::start(o, &w.pool);
    take_template(&mut w, &mut state)?;
    let Some(r) = w.run(&state, (1, 1, 1, 1))? else {
        return Err(ClimbError::Usage("stopped by a signal before the first run ended".into()));
    };
    state.runs.push(r.clone());
    take_server(&mut w, &mut state)?;
    let rows = match pick(&state, &[], None, &w) {
        (Some((mut s, _)), _) => {
            s.verdict = "planned";
            s.why = "the change the climb would measure first, against this state".into();
            vec![s]
        }
        (None, rows) => rows,
    };
    Ok((r, rows))
}

/// `--agents`: the load machines the climb may use, in order (it starts with the first and
/// adds the next when the generator is the bound). Weights are not the climb's: each machine
/// added takes an equal share.
fn agent_pool(o: &ClimbOptions) -> Result<Vec<String>, ClimbError> {
    let Some(arg) = o.start.agents.as_deref() else { return Ok(Vec::new()) };
    let hosts = qpslab_fleet::transport::parse_agents(arg).map_err(ClimbError::Usage)?;
    if let Some(h) = hosts.iter().find(|h| h.weight != 1) {
        return Err(ClimbError::Usage(format!(
            "--agents {arg}: {} has weight {}: the climb adds load machines one at a time, each an equal share; give them without weights",
            h.name, h.weight
        )));
    }
    Ok(hosts.into_iter().map(|h| h.name).collect())
}

/// The server's host in the climb's hands, with `--apply-host` (checked: root, no journal
/// active).
fn host_side(o: &ClimbOptions) -> Result<Option<host::HostSide>, ClimbError> {
    if o.keep && !o.apply_host {
        return Err(ClimbError::Usage(
            "--keep leaves host changes in force: it needs --apply-host".into(),
        ));
    }
    if !o.apply_host {
        return Ok(None);
    }
    let remote = o.start.remote().map_err(|e| ClimbError::Usage(e.to_string()))?;
    let side = match remote.server {
        Some(_) if o.keep => {
            return Err(ClimbError::Usage(
                "--keep with --server: the server host's settings are reverted at the end; apply the final state there with `qpslab tune apply --from FILE` (--state-file)".into(),
            ))
        }
        Some(fleet) => host::HostSide::server(fleet, o.journal.as_deref()),
        None => host::HostSide::here(o.journal.as_deref()),
    };
    side.map(Some).map_err(ClimbError::Usage)
}

fn check(o: &ClimbOptions) -> Result<(), ClimbError> {
    if o.repeats < 3 {
        return Err(ClimbError::Usage(format!(
            "--repeats {}: the noise rule needs 3 runs of each state or more to call a change better",
            o.repeats
        )));
    }
    if !(0.0..1.0).contains(&o.min_gain) {
        return Err(ClimbError::Usage(format!(
            "--min-gain {}: give a share of the rate under 100%, e.g. 3%",
            o.min_gain * 100.0
        )));
    }
    o.start.validate().map_err(|e| ClimbError::Usage(e.to_string()))?;
    if o.server_config.is_some() && o.start.server_host.is_some() {
        return Err(ClimbError::Usage(
            "--server-config with --server: the template and its file are read and written on this host; run the climb on the server host, or let it edit nginx there (--apply-server)".into(),
        ));
    }
    Ok(())
}

/// With `--apply-server` and a target that is the user's own nginx: takes it in hand (its
/// main configuration file read) and makes its text the state's.
fn take_server(w: &mut Walk<'_>, state: &mut State) -> Result<(), ClimbError> {
    let Some(r) = state.runs.first() else { return Ok(()) };
    if !w.o.apply_server || w.server.is_some() || r.target.found_by == Some("started") {
        return Ok(());
    }
    let held = match w.far {
        Some(fleet) => held::InHand::nginx_there(fleet, &r.target.pids),
        None => server::UserServer::nginx(&r.target.pids).map(|n| n.map(held::InHand::Here)),
    };
    if let Some(n) = held.map_err(ClimbError::Server)? {
        state.server = Some(n.original().to_string());
        w.server = Some(n);
    }
    Ok(())
}

/// With `--server-config`: the user's server in hand through its template, filled in with the
/// starting workers; that text is the start's, in force from its first run.
fn take_template(w: &mut Walk<'_>, state: &mut State) -> Result<(), ClimbError> {
    let Some(c) = &w.o.server_config else { return Ok(()) };
    let s =
        server::UserServer::template(&c.template, &c.file, &c.reload).map_err(ClimbError::Usage)?;
    let start =
        server::Vars { workers: Some(c.workers), threads: Some(c.threads), nofile: c.nofile };
    state.server = s.render(&start).map_err(ClimbError::Usage)?;
    state.template = s.named(start);
    w.server = Some(held::InHand::Here(s));
    Ok(())
}

/// The change to try next in `state`: the next step of the knob kept last when a finding
/// names it, else the first finding, headline first, that names one not yet tried. Without one, the rows say why (the headline's reason, or the run's failure).
fn pick(
    state: &State,
    tried: &[Change],
    last_kept: Option<&Change>,
    w: &Walk<'_>,
) -> (Option<(Step, Change)>, Vec<Step>) {
    let host = w.host.as_ref();
    let Some(r) = state.median_run() else { return (None, Vec::new()) };
    let mut knobs = Knobs::of(r);
    let in_use = state.opts.agents.as_deref().map_or(0, |a| a.split(',').count());
    knobs.agents = (!w.pool.is_empty()).then_some((in_use, w.pool.len()));
    knobs.allow_limits = w.o.allow_limits;
    let nginx = state.template.is_empty();
    knobs.nginx = state
        .server
        .as_deref()
        .filter(|_| nginx)
        .map(|t| remedy::NginxKnobs::of(&qpslab_host::nginx::parse(t)));
    knobs.template = state.template;
    knobs.apply_host = host.is_some();
    // A setting already changed in this state reads as its new value; the rest are read on
    // the host they would change, all at once (there, one call).
    let named = named_sysctls(&r.doctor.findings);
    let values = host.map(|h| h.sysctls(&named)).unwrap_or_default();
    let sysctl = |name: &str| {
        let set = state.host.iter().rev().find_map(|c| match c {
            Change::Sysctl { name: n, to, .. } if n == name => Some(to.clone()),
            _ => None,
        });
        let now = named.iter().position(|n| n == name).and_then(|i| values.get(i).cloned());
        set.or(now.flatten())
    };
    let mut first_na = None;
    // What the doctor saw: the finding, and the rate explained in this state.
    let rate = r.doctor.explanation.as_ref().and_then(|e| e.chain.last().cloned());
    let row = |f: &qpslab_doctor::Finding, verdict: &'static str, why: String| Step {
        finding: f.name.to_string(),
        evidence: std::iter::once(f.summary.clone()).chain(rate.clone()).collect(),
        change: None,
        knob: None,
        before: Rps::of(&state.runs),
        after: None,
        ratio: None,
        ratio_range: None,
        verdict,
        why,
        disturbed: 0,
    };
    let chosen = |f: &qpslab_doctor::Finding, c: Change| {
        let mut s = row(f, "kept", String::new());
        s.change = Some(c.describe());
        s.knob = Some(c.clone());
        (Some((s, c)), Vec::new())
    };
    // The knob that paid last time first: its next step is the likeliest to pay again.
    if let Some(last) = last_kept {
        for f in &r.doctor.findings {
            for remedy in remedy::remedies(f, &knobs, &sysctl, &r.target.pids) {
                if let Remedy::Change(c) = remedy {
                    if c.same_knob(last) && !tried.contains(&c) {
                        return chosen(f, c);
                    }
                }
            }
        }
    }
    // A run that fails is climbed from only by a change that lifts a limit (any finding may
    // name it: the log's line often heads, the full table follows); none: the climb stops.
    let mut stop = None;
    for f in &r.doctor.findings {
        for remedy in remedy::remedies(f, &knobs, &sysctl, &r.target.pids) {
            match remedy {
                Remedy::Change(c) if stop.is_some() && !c.lifts_limit() => {}
                Remedy::Change(c) if !tried.contains(&c) => return chosen(f, c),
                Remedy::Change(c) => {
                    first_na.get_or_insert_with(|| {
                        row(f, "not-applicable", format!("{} was tried already", c.describe()))
                    });
                }
                Remedy::Stop(why) => {
                    stop.get_or_insert_with(|| row(f, "stopped", why));
                }
                Remedy::NotApplicable(why) => {
                    first_na.get_or_insert_with(|| row(f, "not-applicable", why));
                }
            }
        }
    }
    if let Some(row) = stop {
        return (None, vec![row]);
    }
    // Nothing named: a side short of CPU may still gain from batching.
    if let Some(h) = r.doctor.findings.first() {
        if let Some(c) = remedy::batching(h, &knobs).filter(|c| !tried.contains(c)) {
            return chosen(h, c);
        }
    }
    (None, first_na.into_iter().collect())
}

fn walk(w: &mut Walk<'_>) -> Result<Climb, ClimbError> {
    let repeats = w.o.repeats;
    let mut current = State::start(w.o, &w.pool);
    take_template(w, &mut current)?;
    for repeat in 1..=repeats {
        match w.run(&current, (repeat as usize, repeats as usize, 1, repeat))? {
            Some(r) => current.runs.push(r),
            None => return Err(ClimbError::Usage("stopped by a signal during the start".into())),
        }
    }
    take_server(w, &mut current)?;
    let start = Rps::of(&current.runs).unwrap_or(Rps { rps: 0.0, min: 0.0, max: 0.0 });
    let mut steps = Vec::new();
    let mut tried = Vec::new();
    let mut kept = Vec::new();
    let mut idle_steps = 0;
    let mut measured = 0;
    let ended = loop {
        if w.stopped() {
            break "stopped by a signal".to_string();
        }
        if w.o.max_steps.is_some_and(|n| measured >= n) {
            break format!("{measured} step(s) measured, as --steps asked");
        }
        let (candidate, rows) = pick(&current, &tried, kept.last(), w);
        let Some((mut row, change)) = candidate else {
            let why =
                rows.first().map_or("no finding".into(), |r| format!("{}: {}", r.finding, r.why));
            steps.extend(rows);
            break format!("nothing left to change: {why}");
        };
        // A B per repeat, and the re-check pair.
        if !w.affords(2 * repeats + 2) {
            break format!("the budget ({:?}) does not hold another step", w.o.budget);
        }
        let next = match next_state(w, &current, &change, steps.len() + 1) {
            Ok(next) => next,
            Err(why) => {
                tried.push(change);
                row.verdict = "not-applicable";
                row.why = why;
                steps.push(row);
                continue;
            }
        };
        let Some((kept_it, (a, b))) = measure(w, &current, &next, &mut row)? else {
            break "stopped by a signal".to_string();
        };
        measured += 1;
        if kept_it {
            // The bound may have moved: what was tried in the last state is worth measuring
            // again in this one.
            tried.clear();
            kept.retain(|k: &Change| !k.same_knob(&change));
            kept.push(change.clone());
            current = State { runs: b, ..next };
            idle_steps = 0;
        } else {
            current.runs = a;
            idle_steps += 1;
        }
        tried.push(change);
        w.feed.event(&Event::Note(&step_note(steps.len() + 1, &row)));
        steps.push(row);
        w.record(&serde_json::json!({ "start": start, "steps": steps }))?;
        if idle_steps >= 2 {
            break "two steps in a row gained nothing".to_string();
        }
    };
    let last = Rps::of(&current.runs).unwrap_or(start);
    let kept_journal = match (&w.host, w.o.keep && !current.host.is_empty()) {
        (Some(h), true) => {
            h.keep(&current.host).map_err(ClimbError::Host)?;
            h.journal().map(std::path::Path::to_path_buf)
        }
        _ => None,
    };
    Ok(Climb {
        start_rps: start.rps,
        final_rps: last.rps,
        start,
        last,
        steps,
        plan: kept.iter().map(|c| flag(c, &w.pool)).collect(),
        host_settings: tune_spec(&kept),
        host_settings_on: w.host.as_ref().map(host::HostSide::name),
        load_machines: current.opts.agents.as_deref().map(|a| a.split(',').count()),
        server_file: match (&w.server, &current.server) {
            (Some(s), Some(text)) if text != s.original() => {
                Some(ServerFile { path: s.file().to_path_buf(), text: text.clone() })
            }
            _ => None,
        },
        ended,
        sweep: None,
        kept_journal,
    })
}

/// The state `change` makes of `current` (step `n`); Err: why it cannot be made here.
fn next_state(
    w: &mut Walk<'_>,
    current: &State,
    change: &Change,
    n: usize,
) -> Result<State, String> {
    let mut template = current.template;
    let templated = change.in_template(&mut template);
    let server = match (templated, &current.server, &mut w.server) {
        (true, _, Some(s)) => s.render(&template)?,
        (true, _, None) => return Err("the server's template is not in the climb's hands".into()),
        (false, Some(text), Some(s)) if change.is_nginx() => {
            let edit = change.nginx_edit().ok_or("not an edit of nginx's file")?;
            let text = server::edit(text, &edit)?;
            s.check(&text)?;
            Some(text)
        }
        _ => current.server.clone(),
    };
    let mut host = current.host.clone();
    if let (true, Some(h)) = (change.is_host(), &w.host) {
        if h.changes(std::slice::from_ref(change))? == 0 {
            return Err(format!("{}: {} has it already", change.describe(), h.name()));
        }
        host.retain(|c| !c.same_knob(change));
        host.push(change.clone());
        h.changes(&host)?;
    }
    let mut opts = change.apply(&current.opts);
    if let Change::Agents { to, .. } = change {
        opts.agents = Some(w.pool.iter().take(*to).cloned().collect::<Vec<_>>().join(","));
    }
    Ok(State {
        name: format!("step {n}: {}", change.describe()),
        opts,
        server,
        template,
        host,
        runs: Vec::new(),
    })
}

/// A measured step in a line, as it is decided: `step 1: connections 1 -> 2: kept, 2.00x
/// (1.95-2.02)`.
fn step_note(n: usize, row: &Step) -> String {
    let ratio = match (row.ratio, row.ratio_range) {
        (Some(r), Some([lo, hi])) => format!(", {r:.2}x ({lo:.2}-{hi:.2})"),
        _ => String::new(),
    };
    format!("step {n}: {}: {}{ratio}", row.change.as_deref().unwrap_or("-"), row.verdict)
}

/// Both sides' runs of a step.
type StepRuns = (Vec<BenchReport>, Vec<BenchReport>);

/// Measures `next` against `current` (interleaved, then the re-check pair when it looks
/// better) and fills the row's figures, verdict and why. Returns whether it is kept, and both
/// sides' runs; None: a signal stopped it.
fn measure(
    w: &mut Walk<'_>,
    current: &State,
    next: &State,
    row: &mut Step,
) -> Result<Option<(bool, StepRuns)>, ClimbError> {
    let Some((a, b)) = interleaved(w, current, next)? else { return Ok(None) };
    let (oka, okb) = trusted(&a, &b);
    row.disturbed = a.len() - oka.len();
    let v = paired_rule(&oka, &okb);
    row.before = Rps::of(&a);
    row.after = Rps::of(&b);
    row.ratio = v.as_ref().map(|v| v.ratio);
    row.ratio_range = v.as_ref().map(|v| [v.low, v.high]);
    let gain = better(&oka, &okb, w.o.min_gain);
    let Some(confirmed) = decide(&oka, &okb, w.o.min_gain, || recheck(w, current, next))? else {
        return Ok(None);
    };
    let mut verdict_text = match (&v, &row.after) {
        (Some(v), _) => v.sentence("the current state", "the change", (oka.len(), okb.len())),
        (None, Some(after)) if from_nothing(&oka, &okb) => format!(
            "the current state answered no request ok in {} of its {} runs (at most {:.0} ok/s), the change {:.0} ok/s ({:.0}-{:.0}) in every run",
            oka.iter().filter(|x| **x == 0.0).count(),
            oka.len(),
            oka.iter().copied().fold(0.0, f64::max),
            after.rps,
            after.min,
            after.max
        ),
        _ => "no figures".into(),
    };
    if row.disturbed > 0 {
        verdict_text += &format!(
            " ({} pair{} with a disturbed run left out: see its findings)",
            row.disturbed,
            if row.disturbed == 1 { "" } else { "s" }
        );
    }
    row.verdict = if confirmed { "kept" } else { "reverted" };
    row.why = if confirmed {
        format!("{verdict_text}; the re-check pair agreed")
    } else if gain {
        format!("{verdict_text}, but the re-check pair did not agree")
    } else if v.as_ref().is_some_and(|v| v.judgement == "beyond-noise" && v.ratio > 1.0) {
        format!("{verdict_text}, under the {:.1}% asked (--min-gain)", w.o.min_gain * 100.0)
    } else {
        verdict_text
    };
    Ok(Some((confirmed, (a, b))))
}

/// The current state and the candidate, `repeats` runs each, in turn (A B A B ...). None: a
/// signal stopped a run.
fn interleaved(w: &mut Walk<'_>, a: &State, b: &State) -> Result<Option<StepRuns>, ClimbError> {
    let n = w.o.repeats;
    let (mut ra, mut rb) = (Vec::new(), Vec::new());
    for repeat in 1..=n {
        let i = 2 * (repeat as usize - 1);
        let Some(x) = w.run(a, (i + 1, 2 * n as usize, 1, repeat))? else {
            return Ok(None);
        };
        ra.push(x);
        let Some(y) = w.run(b, (i + 2, 2 * n as usize, 2, repeat))? else {
            return Ok(None);
        };
        rb.push(y);
    }
    Ok(Some((ra, rb)))
}

/// One more pair, A then B: their ok rates. None: a signal stopped it.
fn recheck(w: &mut Walk<'_>, a: &State, b: &State) -> Result<Option<(f64, f64)>, ClimbError> {
    let again = w.o.repeats + 1;
    let Some(x) = w.run(a, (1, 2, 1, again))? else { return Ok(None) };
    let Some(y) = w.run(b, (2, 2, 2, again))? else { return Ok(None) };
    Ok(Some((ok_rps(&x), ok_rps(&y))))
}

/// What makes the state, as [`Change::flag`] says it; load machines by their names.
fn flag(c: &Change, pool: &[String]) -> String {
    match c {
        Change::Agents { to, .. } => {
            format!("--agents {}", pool.iter().take(*to).cloned().collect::<Vec<_>>().join(","))
        }
        c => c.flag(),
    }
}

/// The host changes among `kept` as a tune table.
fn tune_spec(kept: &[Change]) -> TuneSpec {
    host::spec(kept)
}

/// The sysctls the findings' host causes name, each once.
fn named_sysctls(findings: &[qpslab_doctor::Finding]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for f in findings {
        if let Some(qpslab_doctor::Cause::HostSettings { settings, .. }) = &f.cause {
            for (name, _) in settings {
                if !out.contains(name) {
                    out.push(name.clone());
                }
            }
        }
    }
    out
}

/// The final state as a file `qpslab tune plan|apply --from FILE` reads on a host of the same
/// shape: its host settings, and in comments the rest of the state (the load's options, the
/// server's configuration) and the rate it reached.
pub fn state_file(c: &Climb) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# The final state of a qpslab climb: {:.0} ok req/s ({:.0}-{:.0}), {:.2}x its start's {:.0}.",
        c.last.rps,
        c.last.min,
        c.last.max,
        if c.start_rps > 0.0 { c.final_rps / c.start_rps } else { 0.0 },
        c.start_rps
    );
    o.push_str(
        "# Its host settings, on a host of the same shape: `qpslab tune plan --from FILE`\n",
    );
    o.push_str("# shows them against that host, `qpslab tune apply --from FILE` applies them\n");
    o.push_str("# (journaled: `qpslab tune revert` undoes them).\n");
    if let Some(on) = &c.host_settings_on {
        let _ = writeln!(o, "# The climb measured them on {on}, the server's host.");
    }
    for p in c.plan.iter().filter(|p| !p.starts_with("host: ")) {
        let _ = writeln!(o, "# Not a host setting, kept too: {p}");
    }
    if c.host_settings == TuneSpec::default() {
        o.push_str("# It kept no host setting: applying this file changes nothing.\n");
    }
    // A table of its own keys after the plain ones: toml writes `steer` before `[sysctl]`.
    o.push_str(&toml::to_string(&c.host_settings).unwrap_or_default());
    o
}

/// The final state as files that reproduce it elsewhere (`--state-dir`), by name:
/// `server-host.toml` ([`state_file`]: `qpslab tune apply --from` on the server's host),
/// `nginx.conf` or `server.conf` (the server's file in that state, when the climb changed it),
/// `load.txt` (the load's options the climb kept, over the starting command) and `climb.json`
/// (the climb, as `--json` prints it).
pub fn state_files(c: &Climb) -> Vec<(&'static str, String)> {
    let mut out = vec![("server-host.toml", state_file(c))];
    if let Some(f) = &c.server_file {
        let name = if c.plan.iter().any(|p| p.starts_with("nginx: ")) {
            "nginx.conf"
        } else {
            "server.conf"
        };
        out.push((name, f.text.clone()));
    }
    let mut load = String::from(
        "# The final state's load: these options over the climb's starting command.\n",
    );
    let flags: Vec<&str> =
        c.plan.iter().filter(|p| p.starts_with('-')).map(String::as_str).collect();
    if flags.is_empty() {
        load.push_str("# The climb kept no change of the load's options.\n");
    } else {
        load.push_str(&flags.join(" "));
        load.push('\n');
    }
    if let Some(n) = c.load_machines {
        load.push_str(&format!("# {n} load machine(s) (--agents).\n"));
    }
    out.push(("load.txt", load));
    out.push(("climb.json", serde_json::to_string_pretty(c).unwrap_or_default() + "\n"));
    out
}

/// The machine role a change is made on: `load`, `server` (its configuration) or `server host`
/// (its settings).
pub fn role(c: &Change) -> &'static str {
    match c {
        Change::Connections { .. } | Change::Threads { .. } | Change::Agents { .. } => "load",
        Change::Sysctl { .. } | Change::Steering { .. } => "server host",
        _ => "server",
    }
}

/// The staircase of each machine role: the changes kept on it, in order, and the load
/// machines the final state uses.
fn by_role(o: &mut String, c: &Climb) {
    use std::fmt::Write as _;
    let mut label = "by role";
    for r in ["load", "server", "server host"] {
        let kept: Vec<String> = c
            .steps
            .iter()
            .filter(|s| s.verdict == "kept")
            .filter_map(|s| s.knob.as_ref().filter(|k| role(k) == r).map(Change::describe))
            .collect();
        let machines = match (r, c.load_machines) {
            ("load", Some(n)) => Some(format!("{n} load machine{}", if n == 1 { "" } else { "s" })),
            _ => None,
        };
        if kept.is_empty() && machines.is_none() {
            continue;
        }
        let on = match (r, &c.host_settings_on) {
            ("server host", Some(on)) => format!(" ({on})"),
            _ => String::new(),
        };
        let kept = if kept.is_empty() { "nothing kept".to_string() } else { kept.join(", ") };
        let machines = machines.map_or(String::new(), |m| format!("; {m}"));
        let _ = writeln!(o, "{label:<11} {r}{on}: {kept}{machines}");
        label = "";
    }
}

/// The climb as the field reports' tables: one row per step, then the final state.
pub fn render_text(c: &Climb) -> String {
    use std::fmt::Write as _;
    let fmt = |r: &Option<Rps>| {
        r.map_or("-".into(), |r| format!("{:.0} ({:.0}-{:.0})", r.rps, r.min, r.max))
    };
    let mut o = String::new();
    let _ = writeln!(
        o,
        "start       {:.0} ok req/s ({:.0}-{:.0})",
        c.start.rps, c.start.min, c.start.max
    );
    let width = c.steps.iter().filter_map(|s| s.change.as_ref()).map(String::len).max();
    let width = width.unwrap_or(0).max(26);
    let _ = writeln!(
        o,
        "{:<4} {:<22} {:<width$} {:<22} {:<22} {:<20} verdict",
        "step", "finding", "change", "before req/s", "after req/s", "ratio"
    );
    for (i, s) in c.steps.iter().enumerate() {
        let ratio = match (s.ratio, s.ratio_range) {
            (Some(r), Some([lo, hi])) => format!("{r:.2}x ({lo:.2}-{hi:.2})"),
            _ => "-".into(),
        };
        let _ = writeln!(
            o,
            "{:<4} {:<22} {:<width$} {:<22} {:<22} {:<20} {}",
            i + 1,
            s.finding,
            s.change.as_deref().unwrap_or("-"),
            fmt(&s.before),
            if s.knob.is_some() { fmt(&s.after) } else { "-".into() },
            ratio,
            s.verdict
        );
        for e in &s.evidence {
            let _ = writeln!(o, "       saw: {e}");
        }
        let _ = writeln!(o, "       why: {}", s.why);
    }
    let against = if c.start.rps > 0.0 {
        format!("{:.2}x the start", c.last.rps / c.start.rps)
    } else {
        "the start answered nothing ok".into()
    };
    let _ = writeln!(
        o,
        "final       {:.0} ok req/s ({:.0}-{:.0}), {against}",
        c.last.rps, c.last.min, c.last.max
    );
    let _ = writeln!(o, "ended       {}", c.ended);
    by_role(&mut o, c);
    // Bench flags on the state line; a server's directive or a host setting on its own.
    let (flags, others): (Vec<&String>, Vec<&String>) =
        c.plan.iter().partition(|p| p.starts_with('-'));
    let flags: Vec<&str> = flags.iter().map(|f| f.as_str()).collect();
    let state = match (flags.is_empty(), others.is_empty()) {
        (true, true) => "as started (no change kept)".to_string(),
        (true, false) => "the start's options, and:".to_string(),
        (false, _) => format!("the start's options with {}", flags.join(" ")),
    };
    let _ = writeln!(o, "state       {state}");
    for p in others {
        match (p.strip_prefix("host: "), &c.host_settings_on) {
            (Some(rest), Some(on)) => {
                let _ = writeln!(o, "            host ({on}): {rest}");
            }
            _ => {
                let _ = writeln!(o, "            {p}");
            }
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The decision rule on series with a known truth: equal rates are never kept (their
    /// ranges overlap), a gain beyond the noise and the minimum is, one under the minimum is
    /// not.
    #[test]
    fn the_rule_keeps_a_clear_gain_and_nothing_else() {
        let a = [100.0, 101.0, 99.0];
        assert!(!better(&a, &[100.5, 99.5, 100.2], 0.03));
        assert!(better(&a, &[110.0, 111.0, 109.5], 0.03));
        // Apart, but 2% is under the 3% asked.
        assert!(!better(&a, &[102.0, 102.5, 101.5], 0.03));
        // Slower is never better.
        assert!(!better(&a, &[90.0, 91.0, 89.0], 0.03));
        // Two repeats cannot say beyond noise.
        assert!(!better(&a[..2], &[110.0, 111.0], 0.03));
        // From a start that answered nothing ok: kept when the change answered in every run
        // of three pairs; not with two, nor when a run of the change answered nothing either.
        assert!(better(&[0.0; 3], &[5.0, 600.0, 7.0], 0.03));
        assert!(!better(&[0.0; 2], &[500.0, 600.0], 0.03));
        assert!(!better(&[0.0; 3], &[500.0, 0.0, 700.0], 0.03));
        // A start that answered a little in one run is still a failing start: every run of
        // the change above every run of it.
        assert!(better(&[0.0, 41.0, 0.0], &[14_000.0, 13_700.0, 14_400.0], 0.03));
        assert!(!better(&[0.0, 900.0, 0.0], &[800.0, 13_700.0, 14_400.0], 0.03));
    }

    /// A failing start (0 and 993 ok/s) against a change answering 19,000 in every run: a
    /// disturbed pair left out would leave two pairs, too few for the from-nothing rule, so
    /// every pair is weighed; between working states a disturbed pair still goes.
    #[test]
    fn a_disturbed_pair_does_not_hide_a_start_that_answered_nothing() {
        let broken = [(0.0, 19_300.0, false), (993.0, 19_400.0, true), (0.0, 21_500.0, false)];
        let (a, b) = trusted_rates(&broken);
        assert_eq!((a.len(), b.len()), (3, 3));
        assert!(better(&a, &b, 0.02));
        let working = [(100.0, 120.0, false), (100.0, 50.0, true), (101.0, 121.0, false)];
        assert_eq!(trusted_rates(&working), (vec![100.0, 101.0], vec![120.0, 121.0]));
    }

    /// A climb from 100 to 200 ok req/s with nothing in it.
    fn a_climb() -> Climb {
        Climb {
            start_rps: 100.0,
            final_rps: 200.0,
            start: Rps { rps: 100.0, min: 99.0, max: 101.0 },
            last: Rps { rps: 200.0, min: 190.0, max: 210.0 },
            steps: Vec::new(),
            plan: Vec::new(),
            host_settings: TuneSpec::default(),
            host_settings_on: None,
            load_machines: None,
            server_file: None,
            ended: String::new(),
            sweep: None,
            kept_journal: None,
        }
    }

    /// A climb over two machines: its kept changes by role (a reverted one not among them),
    /// and its final state as files, each the one a user takes elsewhere.
    #[test]
    fn the_final_state_is_a_staircase_per_role_and_files() {
        let step = |c: Change, verdict: &'static str| Step {
            finding: "f".into(),
            evidence: Vec::new(),
            change: Some(c.describe()),
            knob: Some(c),
            before: None,
            after: None,
            ratio: None,
            ratio_range: None,
            verdict,
            why: String::new(),
            disturbed: 0,
        };
        let wc = Change::NginxWorkerConnections { from: 256, to: 2048 };
        let agents = Change::Agents { from: 1, to: 2 };
        let steer = Change::Steering { iface: "eth0".into() };
        let pool = ["root@a".to_string(), "root@b".to_string(), "root@c".to_string()];
        let c = Climb {
            start: Rps { rps: 0.0, min: 0.0, max: 0.0 },
            start_rps: 0.0,
            steps: vec![
                step(wc.clone(), "kept"),
                step(agents.clone(), "kept"),
                step(steer, "reverted"),
            ],
            plan: vec![flag(&wc, &pool), flag(&agents, &pool)],
            host_settings_on: Some("root@s".into()),
            load_machines: Some(2),
            server_file: Some(ServerFile {
                path: "/etc/nginx/nginx.conf".into(),
                text: "events { worker_connections 2048; }\n".into(),
            }),
            ..a_climb()
        };
        let text = render_text(&c);
        assert!(
            text.contains("by role     load: load machines 1 -> 2; 2 load machines\n"),
            "{text}"
        );
        assert!(
            text.contains("            server: nginx worker_connections 256 -> 2048\n"),
            "{text}"
        );
        assert!(!text.contains("server host (root@s):"), "nothing kept there: {text}");
        assert!(text.contains("the start's options with --agents root@a,root@b"), "{text}");
        let files = state_files(&c);
        let names: Vec<&str> = files.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["server-host.toml", "nginx.conf", "load.txt", "climb.json"]);
        assert!(files[1].1.contains("worker_connections 2048;"));
        assert!(
            files[2].1.contains("--agents root@a,root@b\n# 2 load machine(s)"),
            "{}",
            files[2].1
        );
        let back: serde_json::Value = serde_json::from_str(&files[3].1).unwrap_or_default();
        assert_eq!(back["load_machines"], 2);
    }

    /// The state file says the kept host settings in the terms `tune --from` reads back, and
    /// the rest of the state in comments.
    #[test]
    fn the_state_file_reads_back_as_the_settings_kept() {
        let kept = vec![
            Change::Connections { from: 1, to: 8 },
            Change::Sysctl {
                name: "net.ipv4.ip_local_port_range".into(),
                from: "32768 60999".into(),
                to: "1024 65535".into(),
            },
            Change::Steering { iface: "eth0".into() },
            Change::NginxAccessLogOff,
        ];
        let c = Climb {
            plan: kept.iter().map(Change::flag).collect(),
            host_settings: tune_spec(&kept),
            ..a_climb()
        };
        let text = state_file(&c);
        assert!(text.contains("2.00x its start's 100"), "{text}");
        assert!(text.contains("# Not a host setting, kept too: -c 8"), "{text}");
        assert!(text.contains("# Not a host setting, kept too: nginx: access_log off;"), "{text}");
        let spec = crate::sweep::file::tune_file(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        let crate::hostset::HostChange::Explicit(x) =
            crate::hostset::host_change(&spec).unwrap_or_else(|e| panic!("{e}"))
        else {
            panic!("named outright: {text}")
        };
        assert_eq!(x, host::settings(&kept));
        assert_eq!(x.steer, ["eth0"]);
    }
}
