//! The runs store from the command line: opening it (`--store`, `QPSLAB_STORE`), `qpslab runs`
//! (list, show, sweeps, export, rm), `qpslab compare` and `qpslab report`.

use std::io::Write as _;
use std::time::SystemTime;

use anyhow::Context as _;
use qpslab_runs::compare::{self, Comparison, Group};
use qpslab_runs::report;
use qpslab_runs::select::{self, SelectError, Selector};
use qpslab_runs::store::{RunFilter, RunRow, Store, StoreError, StoredRun, SweepRow};

use crate::args::{CompareArgs, ReportArgs, RunsArgs, RunsCommand, RunsFilter, StoreArg};
use crate::{output, Outcome, UsageError};

/// Opens the store `--store` names, or the default one; its problems are the user's to fix.
pub fn open(arg: &StoreArg) -> anyhow::Result<Store> {
    let path = arg.store.clone().unwrap_or_else(Store::default_path);
    Store::open(&path).map_err(store_error)
}

pub fn store_error(e: StoreError) -> anyhow::Error {
    match e {
        StoreError::Usage(m) => UsageError(m).into(),
        other => other.into(),
    }
}

fn select_error(e: SelectError) -> anyhow::Error {
    match e {
        SelectError::Usage(m) => UsageError(m).into(),
        SelectError::Store(s) => store_error(s),
    }
}

pub fn runs(a: RunsArgs) -> anyhow::Result<Outcome> {
    match a.command {
        None => {
            let store = open(&a.store)?;
            let rows = store.runs(&filter(&a.filter)?).map_err(store_error)?;
            output::emit(a.json, &rows, || runs_text(&rows))?;
        }
        Some(RunsCommand::Show(s)) => {
            let store = open(&s.store)?;
            let run = store.run(s.id).map_err(store_error)?.ok_or_else(|| {
                UsageError(format!(
                    "run {}: no such run in {} (see `qpslab runs`)",
                    s.id,
                    store.path().display()
                ))
            })?;
            let whole = run_json(&run, false);
            output::emit(s.json, &whole, || format!("{}\n{}", run_heading(&run.row), run.text))?;
        }
        Some(RunsCommand::Sweeps(s)) => {
            let store = open(&s.store)?;
            let sweeps = store.sweeps().map_err(store_error)?;
            output::emit(s.json, &sweeps, || sweeps_text(&sweeps))?;
        }
        Some(RunsCommand::Export(e)) => {
            let store = open(&e.store)?;
            let rows = store.runs(&filter(&e.filter)?).map_err(store_error)?;
            let mut out: Box<dyn std::io::Write> = match &e.output {
                Some(p) => Box::new(std::io::BufWriter::new(
                    std::fs::File::create(p)
                        .map_err(|err| UsageError(format!("--output {}: {err}", p.display())))?,
                )),
                None => Box::new(std::io::stdout().lock()),
            };
            for row in rows {
                let Some(run) = store.run(row.id).map_err(store_error)? else { continue };
                let line = run_json(&run, true);
                writeln!(out, "{line}")?;
            }
            out.flush()?;
        }
        Some(RunsCommand::Rm(r)) => {
            let mut store = open(&r.store)?;
            let mut ids = r.ids.clone();
            if let Some(s) = r.sweep {
                let rows = store
                    .runs(&RunFilter { sweep: Some(s), ..RunFilter::default() })
                    .map_err(store_error)?;
                if rows.is_empty() {
                    return Err(UsageError(format!(
                        "--sweep {s}: no runs of this sweep are stored (see `qpslab runs sweeps`)"
                    ))
                    .into());
                }
                ids.extend(rows.iter().map(|r| r.id));
            }
            let known = store
                .runs(&RunFilter { ids: ids.clone(), ..RunFilter::default() })
                .map_err(store_error)?;
            if let Some(missing) = ids.iter().find(|i| !known.iter().any(|r| r.id == **i)) {
                return Err(UsageError(format!(
                    "run {missing}: no such run in {} (nothing removed)",
                    store.path().display()
                ))
                .into());
            }
            let n = store.remove(&ids).map_err(store_error)?;
            output::print(&format!("removed {n} run(s)\n"))?;
        }
    }
    Ok(Outcome::Passed)
}

/// A stored run as JSON: its row, report and provenance; `whole` adds the figures and the
/// histogram (for export).
fn run_json(run: &StoredRun, whole: bool) -> serde_json::Value {
    let mut v = serde_json::json!({
        "id": run.row.id,
        "kind": run.row.kind,
        "sweep": run.row.sweep,
        "variant": run.row.variant,
        "repeat": run.row.repeat,
        "label": run.row.label,
        "started_at": run.row.started_at,
        "config": run.row.config,
        "throughput_rps": run.row.throughput_rps,
        "report": run.report,
        "provenance": run.provenance,
    });
    if whole {
        v["facts"] = serde_json::to_value(&run.facts).unwrap_or_default();
        v["histogram"] = run.histogram.clone().into();
    }
    v
}

fn filter(f: &RunsFilter) -> anyhow::Result<RunFilter> {
    let since = f.since.as_deref().map(since).transpose()?;
    Ok(RunFilter { sweep: f.sweep, label: f.label.clone(), since, ids: Vec::new() })
}

/// `--since`: an RFC 3339 time or an age, as the stored form (RFC 3339, UTC, milliseconds).
fn since(s: &str) -> anyhow::Result<String> {
    let at = match humantime::parse_rfc3339_weak(s) {
        Ok(t) => t,
        Err(_) => {
            let age = humantime::parse_duration(s).map_err(|_| {
                UsageError(format!(
                    "--since {s:?}: give a time (2026-11-22T10:00:00Z) or an age (2h, 3d)"
                ))
            })?;
            SystemTime::now().checked_sub(age).unwrap_or(SystemTime::UNIX_EPOCH)
        }
    };
    Ok(humantime::format_rfc3339_millis(at).to_string())
}

fn runs_text(rows: &[RunRow]) -> String {
    use std::fmt::Write as _;
    if rows.is_empty() {
        return "no runs stored (qpslab bench and qpslab sweep store theirs)\n".into();
    }
    let width =
        rows.iter().filter_map(|r| r.variant.as_ref().map(String::len)).max().unwrap_or(7).max(7);
    let tw = rows.iter().map(|r| r.target.len()).max().unwrap_or(6).max(6);
    let mut o = format!(
        "{:>5}  {:<5}  {:>5}  {:<width$}  {:>6}  {:<24}  {:>10}  {:<tw$}  label\n",
        "id", "kind", "sweep", "variant", "repeat", "started", "req/s", "target"
    );
    for r in rows {
        let line = format!(
            "{:>5}  {:<5}  {:>5}  {:<width$}  {:>6}  {:<24}  {:>10.0}  {:<tw$}  {}",
            r.id,
            r.kind,
            r.sweep.map_or("-".into(), |s| s.to_string()),
            r.variant.as_deref().unwrap_or("-"),
            r.repeat.map_or("-".into(), |s| s.to_string()),
            r.started_at,
            r.throughput_rps,
            if r.target.is_empty() { "-" } else { &r.target },
            match (r.label.as_deref(), r.stopped_early) {
                (Some(l), true) => format!("{l} (stopped early)"),
                (None, true) => "(stopped early)".into(),
                (l, false) => l.unwrap_or("").to_string(),
            }
        );
        let _ = writeln!(o, "{}", line.trim_end());
    }
    o
}

fn sweeps_text(sweeps: &[SweepRow]) -> String {
    use std::fmt::Write as _;
    if sweeps.is_empty() {
        return "no sweeps stored\n".into();
    }
    let mut o = format!("{:>5}  {:<24}  {:<11}  {:>4}  name\n", "id", "started", "status", "runs");
    for s in sweeps {
        let _ = writeln!(
            o,
            "{:>5}  {:<24}  {:<11}  {:>4}  {}",
            s.id, s.started_at, s.status, s.runs, s.name
        );
    }
    o
}

fn run_heading(r: &RunRow) -> String {
    let place = match (&r.sweep, &r.variant) {
        (Some(s), Some(v)) => {
            format!(" \u{b7} sweep {s}, variant {v:?}, repeat {}", r.repeat.unwrap_or(1))
        }
        _ => String::new(),
    };
    let label = r.label.as_ref().map_or(String::new(), |l| format!(" \u{b7} label {l}"));
    format!("run {} ({}){place}{label} \u{b7} started {}", r.id, r.kind, r.started_at)
}

/// One named set of runs, as one group.
fn one_group(store: &Store, text: &str, side: &str) -> anyhow::Result<(Group, String)> {
    let sel: Selector = text.parse().map_err(|m: String| UsageError(format!("{side}: {m}")))?;
    let groups = select::groups(store, &sel).map_err(select_error)?;
    let runs: Vec<_> = groups.into_iter().flat_map(|g| g.runs).collect();
    let ids: Vec<String> = runs.iter().map(|r| r.row.id.to_string()).collect();
    let what = describe(&runs, text);
    Ok((Group { name: text.to_string(), runs }, format!("{what}: run(s) {}", ids.join(", "))))
}

fn describe(runs: &[StoredRun], text: &str) -> String {
    let variants: std::collections::BTreeSet<_> =
        runs.iter().filter_map(|r| r.row.variant.clone()).collect();
    match variants.len() {
        1 => format!("{text} (variant {:?})", variants.first().cloned().unwrap_or_default()),
        _ => text.to_string(),
    }
}

pub fn compare_cmd(a: CompareArgs) -> anyhow::Result<Outcome> {
    let store = open(&a.store)?;
    let (ga, what_a) = one_group(&store, &a.a, "A")?;
    let (gb, what_b) = one_group(&store, &a.b, "B")?;
    let mut c: Comparison = compare::compare(&ga, &gb)
        .ok_or_else(|| UsageError("compare: a side has no runs".into()))?;
    // As given: 0.07 * 100 is 7.000000000000001 in f64.
    let pct = |share: f64| (share * 1e11).round() / 1e9;
    c.gate = a.gate.map(|share| compare::Gate::of(c.verdict.as_ref(), pct(share)));
    output::emit(a.json, &c, || compare::render_comparison(&c, &what_a, &what_b))?;
    Ok(if c.gate.as_ref().is_some_and(|g| g.failed) {
        Outcome::ChecksFailed
    } else {
        Outcome::Passed
    })
}

pub fn report_cmd(a: ReportArgs) -> anyhow::Result<Outcome> {
    if a.what.is_empty() && !a.last {
        return Err(UsageError(
            "report: which runs? give --last (the latest sweep, or the latest run), a sweep \
             (sweep:3), runs (12 15), a variant (3/NAME) or a label (label:NAME); `qpslab runs` \
             lists them"
                .into(),
        )
        .into());
    }
    let store = open(&a.store)?;
    let texts: Vec<String> = if a.last { vec!["last".into()] } else { a.what.clone() };
    let mut sels = Vec::new();
    for t in texts.iter().flat_map(|t| t.split_whitespace()) {
        sels.push(t.parse::<Selector>().map_err(UsageError)?);
    }
    // Several plain run ids are one set of runs.
    let ids: Vec<i64> = sels
        .iter()
        .filter_map(|s| match s {
            Selector::Runs(v) => Some(v.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    let mut sels: Vec<Selector> =
        sels.into_iter().filter(|s| !matches!(s, Selector::Runs(_))).collect();
    if !ids.is_empty() {
        sels.push(Selector::Runs(ids));
    }
    let mut groups: Vec<Group> = Vec::new();
    for s in &sels {
        for g in select::groups(&store, s).map_err(select_error)? {
            match groups.iter_mut().find(|x| x.name == g.name) {
                Some(x) => x.runs.extend(
                    g.runs
                        .into_iter()
                        .filter(|r| !x.runs.iter().any(|y| y.row.id == r.row.id))
                        .collect::<Vec<_>>(),
                ),
                None => groups.push(g),
            }
        }
    }
    let sweep_ids: std::collections::BTreeSet<i64> =
        groups.iter().flat_map(|g| g.runs.iter().filter_map(|r| r.row.sweep)).collect();
    let all_in_sweep = groups.iter().all(|g| g.runs.iter().all(|r| r.row.sweep.is_some()));
    let sweeps = store.sweeps().map_err(store_error)?;
    let sweep = match (sweep_ids.len(), all_in_sweep) {
        (1, true) => sweeps.iter().find(|s| sweep_ids.contains(&s.id)),
        _ => None,
    };
    let title = sweep.map_or_else(
        || format!("qpslab: {} run(s)", groups.iter().map(|g| g.runs.len()).sum::<usize>()),
        |s| format!("qpslab sweep: {}", s.name),
    );
    let climb = sweep.and_then(|s| report::stairs::of_sweep(&store, s));
    let html = report::render(&report::Input { title, sweep, groups: &groups, climb });
    match &a.output {
        Some(p) => {
            std::fs::write(p, &html)
                .map_err(|e| UsageError(format!("--output {}: cannot write: {e}", p.display())))?;
            eprintln!(
                "qpslab: wrote {} ({} KiB, {} run(s)); open it in a browser",
                p.display(),
                html.len().div_ceil(1024),
                groups.iter().map(|g| g.runs.len()).sum::<usize>()
            );
        }
        None => output::print(&html).context("writing the report")?,
    }
    Ok(Outcome::Passed)
}
