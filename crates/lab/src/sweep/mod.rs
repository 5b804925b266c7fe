//! `qpslab sweep`: a matrix of bench variants, each repeated, run interleaved (A B C A B C, so
//! drift hits every variant alike), every finished run stored at once in a transaction of its
//! own. A variant's host settings are applied through the tune journal before each of its runs
//! and reverted after it, whether the run succeeded, failed or was stopped by a signal; when a
//! variant cannot be applied the sweep ends there, with everything reverted.
//!
//! [`file`] reads the sweep file; this module checks every variant before the first run (a
//! misspelt option or an interface that is not there fails at once, not an hour in) and runs.

pub mod file;

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use qpslab_host::sample::Role;
use qpslab_host::tune::{self, ApplyOptions, Explicit, Plan, PlanOptions, RootFiles, TuneError};
use qpslab_host::{CpuSet, Host, Root};
use qpslab_load::Progress;

pub use file::{FileError, Sweep, TuneSpec, Variant};

use crate::bench::{bench, BenchError, BenchOptions};
use crate::record::{store_bench, InSweep, Provenance};
use crate::store::{Store, StoreError};

/// How a sweep runs, beyond its file.
#[derive(Debug, Clone)]
pub struct SweepOptions {
    /// Overrides the file's `repeat`.
    pub repeat: Option<u32>,
    /// Host variants may change the live host (as `tune apply --yes`).
    pub yes: bool,
    /// The tune journal [default: tune's].
    pub journal: Option<PathBuf>,
    /// Stored with every run.
    pub label: Option<String>,
    /// What the file does not set (and the qpslab executable, the run's metadata).
    pub defaults: BenchOptions,
}

/// Why a sweep could not start or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// The user's to fix before any run (exit 2): the file, an option, a host setting.
    #[error("{0}")]
    Usage(String),
    #[error("variant {variant:?}, repeat {repeat}: {source}")]
    Run { variant: String, repeat: u32, source: BenchError },
    /// A variant's host settings could not be applied or reverted.
    #[error("variant {variant:?}: {message}")]
    Tune { variant: String, message: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How a sweep ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Done,
    /// A signal stopped it; the finished runs are stored.
    Stopped,
    Failed,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::Stopped => "stopped",
            Self::Failed => "failed",
        }
    }
}

/// What happened, for the progress display.
#[derive(Debug)]
pub enum Event<'a> {
    /// A run begins: `run` of `runs` (from 1), variant `variant` of `variants` (from 1).
    RunStart {
        run: usize,
        runs: usize,
        variant: usize,
        variants: usize,
        name: &'a str,
        repeat: u32,
        repeats: u32,
        eta: Duration,
    },
    /// The measured window's progress, about once a second.
    Progress(&'a Progress),
    /// A run is stored.
    Stored { id: i64, throughput_rps: f64 },
    /// Something the user should know (a stopped run not stored, a revert that kept a value).
    Note(String),
}

/// The sweep as it ended.
#[derive(Debug)]
pub struct Outcome {
    pub sweep: i64,
    pub status: Status,
    /// Stored runs, in the order they ran.
    pub runs: Vec<i64>,
    /// Why it failed.
    pub error: Option<SweepError>,
}

/// A variant checked and ready to run.
#[derive(Debug)]
struct Ready {
    variant: Variant,
    opts: BenchOptions,
    host: Option<HostChange>,
}

/// A variant's host settings in the tune planner's terms.
#[derive(Debug, Clone)]
enum HostChange {
    Planned(PlanOptions),
    Explicit(Explicit),
}

/// Checks every variant: its options, its host settings against this host, and the rights
/// host settings need. Nothing is changed.
fn prepare(sweep: &Sweep, o: &SweepOptions) -> Result<Vec<Ready>, SweepError> {
    let usage = SweepError::Usage;
    let root = Root::live();
    let mut out = Vec::new();
    let mut plans = Vec::new();
    let mut current = None;
    for v in &sweep.variants {
        let named = |m: String| usage(format!("variant {:?}: {m}", v.name));
        let opts = v.settings.apply_to(&o.defaults).map_err(named)?;
        opts.validate().map_err(|e| named(e.to_string()))?;
        let host = v.tune.as_ref().map(host_change).transpose().map_err(named)?;
        if let Some(change) = &host {
            let h = match &current {
                Some(h) => h,
                None => current.insert(
                    Host::read(&root).map_err(|e| usage(format!("cannot read the host: {e}")))?,
                ),
            };
            plans.push(plan_for(&root, h, change).map_err(named)?);
        }
        out.push(Ready { variant: v.clone(), opts, host });
    }
    if !plans.is_empty() && !o.yes {
        return Err(usage(
            "this sweep changes host settings (tune): pass --yes, as to `qpslab tune apply \
             --yes` (each change is journaled and reverted after its run)"
                .into(),
        ));
    }
    let journal = tune::journal_path(&root, o.journal.as_deref());
    for plan in &plans {
        tune::apply::check_apply(plan, &apply_options(&journal))
            .map_err(|e| usage(format!("sweep: {e}")))?;
    }
    Ok(out)
}

fn host_change(spec: &TuneSpec) -> Result<HostChange, String> {
    if !spec.is_explicit() {
        let irq_cpus = spec
            .irq_cpus
            .as_deref()
            .map(|l| CpuSet::parse_list(l).map_err(|e| format!("tune.irq-cpus {l:?}: {e}")))
            .transpose()?;
        return Ok(HostChange::Planned(PlanOptions {
            ifaces: spec.iface.clone(),
            irq_cpus,
            workers: spec.workers,
            role: if spec.role.as_deref() == Some("client") { Role::Client } else { Role::Server },
        }));
    }
    let mut x = Explicit::default();
    for (queue, list) in &spec.rps {
        let cpus = CpuSet::parse_list(list)
            .map_err(|e| format!("tune.rps {queue:?} = {list:?}: {e}; give a CPU list, e.g. \"0-1\" (\"\" turns RPS off)"))?;
        x.rps.insert(queue.clone(), cpus);
    }
    for (irq, list) in &spec.irq {
        let n: u32 =
            irq.parse().map_err(|_| format!("tune.irq {irq:?}: name an IRQ by its number"))?;
        let cpus =
            CpuSet::parse_list(list).map_err(|e| format!("tune.irq {irq:?} = {list:?}: {e}"))?;
        x.irq.insert(n, cpus);
    }
    for (name, value) in &spec.sysctl {
        let text = match value {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Array(a) => a
                .iter()
                .map(|v| v.to_string().trim_matches('"').to_string())
                .collect::<Vec<_>>()
                .join("\t"),
            other => {
                return Err(format!("tune.sysctl {name:?} = {other}: give a number or a string"))
            }
        };
        x.sysctl.insert(name.clone(), text);
    }
    Ok(HostChange::Explicit(x))
}

fn plan_for(root: &Root, host: &Host, change: &HostChange) -> Result<Plan, String> {
    match change {
        HostChange::Planned(p) => tune::plan(host, p).map_err(|e| format!("tune: {e}")),
        HostChange::Explicit(x) => {
            tune::explicit_plan(root, host, x).map_err(|e| format!("tune: {e}"))
        }
    }
}

fn apply_options(journal: &std::path::Path) -> ApplyOptions {
    ApplyOptions {
        journal: journal.to_path_buf(),
        stop_irqbalance: false,
        live: true,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    }
}

/// Runs `sweep`: checks it, records it in `store`, and runs every variant `repeat` times,
/// interleaved. Returns how it ended; an error before the first run is `Err`.
pub fn run(
    sweep: &Sweep,
    o: &SweepOptions,
    store: &mut Store,
    stop: &AtomicBool,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<Outcome, SweepError> {
    let ready = prepare(sweep, o)?;
    let repeats = o.repeat.unwrap_or(sweep.repeat).max(1);
    let started = now();
    let id = store.begin_sweep(&sweep.name, &started, &sweep.text)?;
    let mut outcome = Outcome { sweep: id, status: Status::Done, runs: Vec::new(), error: None };
    let total = ready.len() * repeats as usize;
    let clock = Instant::now();
    'all: for repeat in 1..=repeats {
        for (i, r) in ready.iter().enumerate() {
            let run_no = (repeat as usize - 1) * ready.len() + i + 1;
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                outcome.status = Status::Stopped;
                break 'all;
            }
            on_event(Event::RunStart {
                run: run_no,
                runs: total,
                variant: i + 1,
                variants: ready.len(),
                name: &r.variant.name,
                repeat,
                repeats,
                eta: eta(clock.elapsed(), run_no - 1, total, &r.opts),
            });
            match visit(r, repeat, id, o, store, stop, on_event) {
                Ok(Some(run)) => outcome.runs.push(run),
                Ok(None) => {
                    outcome.status = Status::Stopped;
                    break 'all;
                }
                Err(e) => {
                    outcome.status = Status::Failed;
                    outcome.error = Some(e);
                    break 'all;
                }
            }
        }
    }
    store.end_sweep(id, &now(), outcome.status.name())?;
    Ok(outcome)
}

/// The time left: the mean of the runs so far, or the runs' own length before the first ends.
fn eta(elapsed: Duration, done: usize, total: usize, opts: &BenchOptions) -> Duration {
    let per_run = if done == 0 {
        opts.warmup + opts.duration + Duration::from_secs(1)
    } else {
        elapsed / u32::try_from(done).unwrap_or(u32::MAX)
    };
    per_run * u32::try_from(total - done).unwrap_or(u32::MAX)
}

/// One run of a variant: its host settings applied, the bench, the settings reverted (always),
/// the run stored. None: a signal stopped the run (it is not stored).
fn visit(
    r: &Ready,
    repeat: u32,
    sweep: i64,
    o: &SweepOptions,
    store: &mut Store,
    stop: &AtomicBool,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<Option<i64>, SweepError> {
    let tune_err = |message: String| SweepError::Tune { variant: r.variant.name.clone(), message };
    let root = Root::live();
    let journal = tune::journal_path(&root, o.journal.as_deref());
    let applied = match &r.host {
        None => None,
        Some(change) => Some(Applied::new(&root, &journal, change).map_err(tune_err)?),
    };
    let mut provenance = Provenance::read(&o.defaults.meta, o.journal.as_deref());
    provenance.tune_asked = r.variant.tune.as_ref().and_then(|t| serde_json::to_value(t).ok());
    let result = bench(&r.opts, stop, &mut |p| on_event(Event::Progress(p)));
    let reverted = applied.map(Applied::revert).transpose().map_err(tune_err)?;
    if let Some(note) = reverted.flatten() {
        on_event(Event::Note(note));
    }
    let report = result.map_err(|source| SweepError::Run {
        variant: r.variant.name.clone(),
        repeat,
        source,
    })?;
    if report.load.stopped_early {
        on_event(Event::Note(format!(
            "run of {:?} (repeat {repeat}) stopped by a signal: not stored",
            r.variant.name
        )));
        return Ok(None);
    }
    let in_sweep = InSweep { sweep, variant: &r.variant.name, repeat };
    let id = store_bench(store, &r.opts, &report, Some(in_sweep), o.label.as_deref(), &provenance)?;
    on_event(Event::Stored { id, throughput_rps: report.load.throughput_rps });
    Ok(Some(id))
}

/// A variant's host settings in force; reverted by [`Applied::revert`] or, failing that, on
/// drop (an early return), so no path leaves them behind short of the process being killed,
/// which leaves the journal for `qpslab tune revert`.
#[derive(Debug)]
struct Applied {
    root: Root,
    journal: PathBuf,
    done: bool,
}

impl Applied {
    fn new(root: &Root, journal: &std::path::Path, change: &HostChange) -> Result<Self, String> {
        let host = Host::read(root).map_err(|e| format!("cannot read the host: {e}"))?;
        let plan = plan_for(root, &host, change)?;
        tune::apply(&mut RootFiles(root.clone()), root.dir(), &plan, &apply_options(journal))
            .map_err(|e| format!("cannot apply its host settings: {}", tune_message(&e)))?;
        Ok(Applied { root: root.clone(), journal: journal.to_path_buf(), done: false })
    }

    /// Reverts; Some(note) when a value someone else changed meanwhile was kept.
    fn revert(mut self) -> Result<Option<String>, String> {
        self.done = true;
        let report = tune::revert(&mut RootFiles(self.root.clone()), &self.journal, false, true)
            .map_err(|e| {
                format!(
                    "cannot revert its host settings: {}; run `qpslab tune revert`",
                    tune_message(&e)
                )
            })?;
        if !report.failed.is_empty() {
            return Err(format!(
                "cannot revert {}: {}; the journal {} stays for `qpslab tune revert`",
                report.failed[0].0.setting,
                report.failed[0].1,
                self.journal.display()
            ));
        }
        Ok((!report.kept.is_empty()).then(|| {
            format!(
                "{} changed by someone else during the run and kept; the journal {} stays for `qpslab tune revert --force`",
                report.kept.iter().map(|i| i.setting.as_str()).collect::<Vec<_>>().join(", "),
                self.journal.display()
            )
        }))
    }
}

impl Drop for Applied {
    fn drop(&mut self) {
        if !self.done {
            let _ = tune::revert(&mut RootFiles(self.root.clone()), &self.journal, false, true);
        }
    }
}

fn tune_message(e: &TuneError) -> String {
    e.to_string()
}

/// Now, RFC 3339 in UTC with milliseconds.
pub fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}
