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

use qpslab_host::{Host, Root};
use qpslab_load::feed::{Event, Feed};
use qpslab_tune as tune;

pub use file::{FileError, Sweep, TuneSpec, Variant};

use crate::bench::{BenchError, BenchOptions};
use crate::climb::server::{UserServer, Vars};
use crate::hostset::{self, host_change, plan_for, Applied, HostChange};
use crate::record::Provenance;
use crate::remote::{InForce, ServerHost, TuneCall};
use crate::trial::{self, Trial, TrialError};
use qpslab_fleet::session::FleetOptions;
use qpslab_runs::store::{Store, StoreError};

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

/// A finished run of a sweep, for its checks.
#[derive(Debug)]
pub struct Finished {
    pub variant: String,
    pub repeat: u32,
    pub load: qpslab_load::Report,
    pub text: String,
}

/// The sweep as it ended.
#[derive(Debug)]
pub struct Outcome {
    pub sweep: i64,
    pub status: Status,
    /// Stored runs, in the order they ran.
    pub runs: Vec<i64>,
    /// The same runs' checks: variant, repeat, load report and text summary.
    pub finished: Vec<Finished>,
    /// Why it failed.
    pub error: Option<SweepError>,
}

/// A variant checked and ready to run.
#[derive(Debug)]
struct Ready {
    variant: Variant,
    opts: BenchOptions,
    /// Its host settings, for this host (None: none, or they are the server host's).
    host: Option<HostChange>,
    /// The server host (`server`), where its host settings apply and its provenance is read.
    server: Option<FleetOptions>,
}

/// A variant as `--dry-run` shows it, checked as a real run would check it.
#[derive(Debug)]
pub struct Checked {
    pub variant: Variant,
    pub opts: BenchOptions,
}

/// `--dry-run`: checks every variant as [`run`] does before its first run (the options as
/// bench checks them, the host settings planned against the host they change and the rights
/// to apply them), without asking for `--yes`: nothing is changed and nothing runs.
pub fn check(
    sweep: &Sweep,
    o: &SweepOptions,
    stop: &AtomicBool,
) -> Result<Vec<Checked>, SweepError> {
    Ok(prepare(sweep, o, stop, false)?
        .into_iter()
        .map(|r| Checked { variant: r.variant, opts: r.opts })
        .collect())
}

/// Checks every variant: its options, its host settings against the host they change (this
/// one, or the server host), and the rights host settings need (and `--yes` for them when
/// `for_real`). Nothing is changed.
fn prepare(
    sweep: &Sweep,
    o: &SweepOptions,
    stop: &AtomicBool,
    for_real: bool,
) -> Result<Vec<Ready>, SweepError> {
    let usage = SweepError::Usage;
    let root = Root::live();
    let mut out = Vec::new();
    let mut plans = Vec::new();
    let mut current = None;
    let mut far_tunes = 0;
    for v in &sweep.variants {
        let named = |m: String| usage(format!("variant {:?}: {m}", v.name));
        let opts = v.settings.apply_to(&o.defaults).map_err(named)?;
        opts.validate().map_err(|e| named(e.to_string()))?;
        let server = opts.remote().map_err(|e| named(e.to_string()))?.server;
        let host = v.tune.as_ref().map(host_change).transpose().map_err(named)?;
        if let (Some(fleet), Some(tune)) = (&server, &v.tune) {
            // Planned and checked there, against that host; applied there before each run.
            let mut far = ServerHost::connect(fleet, stop).map_err(|e| named(e.to_string()))?;
            let checked =
                far.tune_check(&TuneCall { tune: tune.clone(), journal: o.journal.clone() });
            far.close();
            checked.map_err(|e| named(format!("on {}: tune: {e}", fleet.hosts[0].name)))?;
            far_tunes += 1;
            out.push(Ready { variant: v.clone(), opts, host: None, server });
            continue;
        }
        if let Some(change) = &host {
            let h = match &current {
                Some(h) => h,
                None => current.insert(
                    Host::read(&root).map_err(|e| usage(format!("cannot read the host: {e}")))?,
                ),
            };
            plans.push(plan_for(&root, h, change).map_err(named)?);
        }
        out.push(Ready { variant: v.clone(), opts, host, server });
    }
    if (!plans.is_empty() || far_tunes > 0) && !o.yes && for_real {
        return Err(usage(
            "this sweep changes host settings (tune): pass --yes, as to `qpslab tune apply \
             --yes` (each change is journaled and reverted after its run)"
                .into(),
        ));
    }
    let journal = tune::journal_path(&root, o.journal.as_deref());
    for plan in &plans {
        hostset::check_plan(plan, &journal).map_err(|e| usage(format!("sweep: {e}")))?;
    }
    user_server(sweep)?;
    Ok(out)
}

/// `[server-config]`'s server in hand: its template read and checked, its file's original
/// read (nothing written yet).
fn user_server(sweep: &Sweep) -> Result<Option<UserServer>, SweepError> {
    sweep
        .server_config
        .as_ref()
        .map(|c| UserServer::template(&c.template, &c.file, &c.reload))
        .transpose()
        .map_err(|e| SweepError::Usage(format!("[server-config]: {e}")))
}

/// Runs `sweep`: checks it, records it in `store`, and runs every variant `repeat` times,
/// interleaved. Returns how it ended; an error before the first run is `Err`.
pub fn run(
    sweep: &Sweep,
    o: &SweepOptions,
    store: &mut Store,
    stop: &AtomicBool,
    feed: &mut dyn Feed,
) -> Result<Outcome, SweepError> {
    let ready = prepare(sweep, o, stop, true)?;
    // Restored byte for byte at the end, and on any early return (its drop).
    let mut server = user_server(sweep)?;
    let repeats = o.repeat.unwrap_or(sweep.repeat).max(1);
    let started = now();
    let id = store.begin_sweep(&sweep.name, &started, &sweep.text)?;
    let mut outcome = Outcome {
        sweep: id,
        status: Status::Done,
        runs: Vec::new(),
        finished: Vec::new(),
        error: None,
    };
    let total = ready.len() * repeats as usize;
    let clock = Instant::now();
    'all: for repeat in 1..=repeats {
        for (i, r) in ready.iter().enumerate() {
            let run_no = (repeat as usize - 1) * ready.len() + i + 1;
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                outcome.status = Status::Stopped;
                break 'all;
            }
            feed.event(&Event::RunStart {
                run: run_no,
                runs: total,
                variant: i + 1,
                variants: ready.len(),
                name: &r.variant.name,
                repeat,
                repeats,
                eta: eta(clock.elapsed(), run_no - 1, total, &r.opts),
            });
            if let Err(e) = put_server(server.as_mut(), &r.variant) {
                outcome.status = Status::Failed;
                outcome.error = Some(e);
                break 'all;
            }
            match visit(r, repeat, id, o, store, stop, feed) {
                Ok(Some((run, finished))) => {
                    outcome.runs.push(run);
                    outcome.finished.push(finished);
                }
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
    if let Some(s) = server.as_mut() {
        if let Err(e) = s.restore() {
            outcome.status = Status::Failed;
            outcome.error = Some(SweepError::Usage(format!(
                "{e}; the original is kept at {}: copy it back over {} and {}",
                s.backup().display(),
                s.file.display(),
                s.reload_hint()
            )));
        }
    }
    store.end_sweep(id, &now(), outcome.status.name())?;
    Ok(outcome)
}

/// The variant's text of `[server-config]`'s template in force before its run.
fn put_server(server: Option<&mut UserServer>, v: &Variant) -> Result<(), SweepError> {
    let Some(s) = server.filter(|_| v.server_workers.is_some() || v.server_threads.is_some())
    else {
        return Ok(());
    };
    let tune = |message: String| SweepError::Tune { variant: v.name.clone(), message };
    let vars = Vars {
        workers: Some(v.server_workers.unwrap_or(1)),
        threads: Some(v.server_threads.unwrap_or(1)),
        nofile: None,
    };
    if let Some(text) = s.render(&vars).map_err(tune)? {
        s.put(&text).map_err(tune)?;
    }
    Ok(())
}

/// The time left: the mean of the runs so far, or the runs' own length before the first ends.
fn eta(elapsed: Duration, done: usize, total: usize, opts: &BenchOptions) -> Duration {
    let per_run = if done == 0 {
        opts.warmup() + opts.duration() + Duration::from_secs(1)
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
    feed: &mut dyn Feed,
) -> Result<Option<(i64, Finished)>, SweepError> {
    let tune_err = |message: String| SweepError::Tune { variant: r.variant.name.clone(), message };
    let root = Root::live();
    let journal = tune::journal_path(&root, o.journal.as_deref());
    let settings = match (&r.host, &r.server, &r.variant.tune) {
        (Some(change), _, _) => {
            InForce::Here(Some(Applied::new(&root, &journal, change).map_err(tune_err)?))
        }
        (None, Some(fleet), tune) => {
            let call =
                tune.as_ref().map(|t| TuneCall { tune: t.clone(), journal: o.journal.clone() });
            InForce::there(fleet, stop, call.as_ref()).map_err(tune_err)?
        }
        (None, None, _) => InForce::Here(None),
    };
    let mut provenance = Provenance::read(&o.defaults.meta, o.journal.as_deref());
    provenance.tune_asked = r.variant.tune.as_ref().and_then(|t| serde_json::to_value(t).ok());
    let trial =
        Trial { opts: &r.opts, variant: &r.variant.name, repeat, label: o.label.as_deref() };
    let (report, id) =
        match trial::run(trial, settings, Some((store, sweep)), provenance, stop, feed) {
            Ok(Some((report, Some(id)))) => (report, id),
            Ok(_) => return Ok(None),
            Err(TrialError::Settings(message)) => return Err(tune_err(message)),
            Err(TrialError::Run(source)) => {
                return Err(SweepError::Run { variant: r.variant.name.clone(), repeat, source })
            }
            Err(TrialError::Store(e)) => return Err(e.into()),
        };
    let text = crate::render_text(&report);
    let finished = Finished { variant: r.variant.name.clone(), repeat, load: report.load, text };
    Ok(Some((id, finished)))
}

/// Now, RFC 3339 in UTC with milliseconds.
pub fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}
