//! `qpslab sweep FILE`: reads and checks the file, runs the sweep with a progress line on a
//! terminal (variant i/N, repeat j/M, ETA, the live rate), and prints the sweep's table.

use std::io::IsTerminal as _;
use std::time::Duration;

use qpslab_lab::sweep::{self, Status, SweepError, SweepOptions};
use qpslab_lab::BenchOptions;
use qpslab_load::feed::{Event, Feed};
use qpslab_load::Progress;
use qpslab_runs::compare;
use qpslab_runs::select::{self, Selector};

use crate::args::SweepArgs;
use crate::load_cmd::run_meta;
use crate::store_cmd::{open, store_error};
use crate::{live_cmd, output, Outcome, UsageError};
use qpslab_live::RunInfo;

pub fn run(a: SweepArgs) -> anyhow::Result<Outcome> {
    let file = sweep::file::read(&a.file).map_err(|e| UsageError(e.0))?;
    let repeat = a
        .repeat
        .map(|r| u32::try_from(r).map_err(|_| UsageError(format!("--repeat {r}: too many"))))
        .transpose()?;
    let opts = SweepOptions {
        repeat,
        yes: a.yes,
        journal: a.journal.clone(),
        label: a.label.clone(),
        defaults: BenchOptions {
            serve_exe: std::env::current_exe()?,
            meta: run_meta(),
            fail_on: a.fail_on.list(),
            ..BenchOptions::default()
        },
    };
    let stop = qpslab_sys::signals::stop_flag()?;
    if a.dry_run {
        return dry_run(&file, &opts, stop);
    }
    let mut store = open(&a.store)?;
    let ci = crate::ci_out::CiOut::open(&a.ci)?;
    let live =
        live_cmd::start(&a.live, RunInfo::new("sweep", std::slice::from_ref(&file.name), false))?;
    let mut line = Line::new();
    let outcome = {
        let mut tee = live.as_ref().map(|l| l.tee(&mut line));
        let feed: &mut dyn Feed = match &mut tee {
            Some(t) => t,
            None => &mut line,
        };
        sweep::run(&file, &opts, &mut store, stop, feed)
    };
    let outcome = outcome.map_err(|e| match e {
        SweepError::Usage(m) => UsageError(m).into(),
        SweepError::Store(s) => store_error(s),
        other => anyhow::Error::new(other),
    })?;
    line.clear();
    let groups = if outcome.runs.is_empty() {
        Vec::new()
    } else {
        select::groups(&store, &Selector::Sweep(outcome.sweep))
            .map_err(|e| anyhow::anyhow!("{e}"))?
    };
    let rows = compare::table(&groups);
    let failed: Vec<&sweep::Finished> =
        outcome.finished.iter().filter(|c| !c.load.check.passed).collect();
    let summary = serde_json::json!({
        "sweep": outcome.sweep,
        "name": file.name,
        "status": outcome.status.name(),
        "runs": outcome.runs,
        "store": store.path(),
        "variants": rows,
        "checks": checks_json(&outcome),
        "error": outcome.error.as_ref().map(ToString::to_string),
    });
    output::emit(a.json, &summary, || {
        let mut t = format!(
            "sweep {} ({}): {}, {} run(s) stored in {}\n\n",
            outcome.sweep,
            file.name,
            outcome.status.name(),
            outcome.runs.len(),
            store.path().display()
        );
        t += &compare::render_table(&rows);
        t += &checks_text(&outcome.finished, &failed);
        if !outcome.runs.is_empty() {
            t += &format!("\nqpslab report sweep:{} -o report.html   draws it\n", outcome.sweep);
        }
        t
    })?;
    let html = live.as_ref().and_then(|l| l.url()).and_then(|_| {
        let title = format!("qpslab sweep: {}", file.name);
        live_cmd::report_of(&store, &Selector::Sweep(outcome.sweep), title)
    });
    let summary = format!(
        "sweep {} ({}): {}, {} run(s) stored",
        outcome.sweep,
        file.name,
        outcome.status.name(),
        outcome.runs.len()
    );
    ci.write(("sweep", &file.name), &named(&outcome))?;
    let passed = outcome.status == Status::Done && failed.is_empty();
    live_cmd::finish(live, passed, summary, html);
    Ok(ended(outcome.status, outcome.error.as_ref(), failed.is_empty()))
}

/// The exit of a sweep that ended with `status`: passed when every run ran and passed its
/// checks; a stop or a failure is said on stderr.
fn ended(status: Status, error: Option<&SweepError>, checks_passed: bool) -> Outcome {
    match (status, error) {
        (Status::Done, _) if checks_passed => Outcome::Passed,
        (Status::Done, _) => Outcome::ChecksFailed,
        (Status::Stopped, _) => {
            eprintln!("qpslab: sweep stopped by a signal; the finished runs are stored");
            Outcome::ChecksFailed
        }
        (Status::Failed, Some(e)) => {
            eprintln!("qpslab: error: sweep failed: {e}; every host setting is reverted, the finished runs are stored");
            Outcome::ChecksFailed
        }
        (Status::Failed, None) => Outcome::ChecksFailed,
    }
}

/// Each run's checks, for the JSON.
fn checks_json(outcome: &sweep::Outcome) -> Vec<serde_json::Value> {
    let runs = outcome.runs.iter().zip(&outcome.finished);
    runs.map(|(id, c)| {
        serde_json::json!({
            "run": id,
            "variant": c.variant,
            "repeat": c.repeat,
            "passed": c.load.check.passed,
            "reason": c.load.check.reason,
            "thresholds": c.load.thresholds,
        })
    })
    .collect()
}

/// Each run as `VARIANT #REPEAT` with its report and text, for `--junit` and the summaries.
fn named(outcome: &sweep::Outcome) -> Vec<(String, &qpslab_load::Report, String)> {
    let runs = outcome.finished.iter();
    runs.map(|c| (format!("{} #{}", c.variant, c.repeat), &c.load, c.text.clone())).collect()
}

/// How the runs did against their checks: a line for each that failed, and with thresholds,
/// how many passed them all.
fn checks_text(finished: &[sweep::Finished], failed: &[&sweep::Finished]) -> String {
    let mut t = String::new();
    let with = finished.iter().filter(|c| !c.load.thresholds.is_empty()).count();
    if with > 0 {
        let passed =
            finished.iter().filter(|c| c.load.thresholds.iter().all(|th| th.passed)).count();
        t += &format!("\nthresholds: {passed} of {} run(s) passed every one\n", finished.len());
    }
    if !failed.is_empty() {
        t += "\n";
    }
    for c in failed {
        let reason = c.load.check.reason.as_deref().unwrap_or("failed its checks");
        t += &format!("FAILED {} #{}: {reason}\n", c.variant, c.repeat);
        for th in c.load.thresholds.iter().filter(|th| !th.passed) {
            t += &format!("  {}\n", th.line());
        }
    }
    t
}

/// `--dry-run`: the variants the file gives, each checked as a real run checks it before its
/// first run (options, host settings against the host), and how long it takes.
fn dry_run(
    file: &sweep::Sweep,
    opts: &SweepOptions,
    stop: &std::sync::atomic::AtomicBool,
) -> anyhow::Result<Outcome> {
    let repeat = opts.repeat.unwrap_or(file.repeat).max(1);
    let checked = sweep::check(file, opts, stop).map_err(|e| match e {
        SweepError::Usage(m) => UsageError(m).into(),
        other => anyhow::Error::new(other),
    })?;
    let mut text = format!(
        "sweep {:?}: {} variant(s) x {} repeat(s), each checked\n",
        file.name,
        checked.len(),
        repeat
    );
    let mut total = Duration::ZERO;
    for (i, c) in checked.iter().enumerate() {
        total += (c.opts.warmup() + c.opts.duration()) * repeat;
        let settings = serde_json::to_string(&c.variant.settings).unwrap_or_default();
        let tune = c.variant.tune.as_ref().map_or(String::new(), |t| {
            format!(" tune {}", serde_json::to_string(t).unwrap_or_default())
        });
        text += &format!("{:>3}. {}  {settings}{tune}\n", i + 1, c.variant.name);
    }
    text += &format!(
        "at least {} of load (warm-up and measured time, not counting set-up)\n",
        humantime::format_duration(total)
    );
    output::print(&text)?;
    Ok(Outcome::Passed)
}

/// The progress line, on a terminal only.
pub(crate) struct Line {
    tty: bool,
    head: String,
    last: Progress,
}

impl Line {
    pub(crate) fn new() -> Self {
        Line {
            tty: std::io::stderr().is_terminal(),
            head: String::new(),
            last: Progress::default(),
        }
    }

    fn draw(&self, what: &str) {
        if self.tty {
            eprint!("\r\x1b[K{} \u{b7} {what}", self.head);
        }
    }

    pub(crate) fn clear(&self) {
        if self.tty {
            eprint!("\r\x1b[K");
        }
    }
}

/// The sweep's line watches the sweep and the benches it runs.
impl Feed for Line {
    fn event(&mut self, e: &Event<'_>) {
        match e {
            Event::RunStart { run, runs, variant, variants, name, repeat, repeats, eta } => {
                self.head = format!(
                    "run {run}/{runs} \u{b7} variant {variant}/{variants} {name:?} \u{b7} repeat {repeat}/{repeats} \u{b7} ETA {}",
                    short(*eta)
                );
                self.last = Progress::default();
                self.draw("starting");
            }
            Event::Progress(p) => {
                let dt = p.elapsed.saturating_sub(self.last.elapsed).max(Duration::from_millis(1));
                let rate =
                    p.completed.saturating_sub(self.last.completed) as f64 / dt.as_secs_f64();
                let what =
                    if p.warming_up { "warming up".into() } else { format!("{rate:.0} req/s") };
                self.last = **p;
                self.draw(&what);
            }
            Event::Note(n) => {
                self.clear();
                eprintln!("qpslab: note: {n}");
            }
            _ => {}
        }
    }
}

/// `1m05s`.
fn short(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}
