//! `qpslab bench`: target + load + doctor in one command.

use qpslab_lab::record::{store_bench, Provenance};
use qpslab_lab::{bench, render_text, BenchError, BenchOptions, BenchReport};

use qpslab_live::RunInfo;
use qpslab_load::feed::Feed;
use qpslab_runs::select::Selector;

use crate::args::{BenchArgs, BenchCmdArgs};
use crate::load_cmd::{run_meta, ProgressLine};
use crate::{live_cmd, output, store_cmd, Outcome, UsageError};

/// The bench's own target as the `target` label: an external URL, or the server it starts.
fn a_url(opts: &BenchOptions) -> Option<&String> {
    opts.load.urls.is_empty().then_some(&opts.target)
}

/// The bench's options from its flags (`climb` starts from them too).
pub fn options(a: &BenchArgs) -> anyhow::Result<BenchOptions> {
    Ok(BenchOptions {
        target: a
            .url
            .as_deref()
            .or(a.target.as_deref())
            .map_or_else(|| "builtin".into(), qpslab_lab::bench::target_of),
        server_pids: a.server_pid.clone(),
        workers: a.workers,
        server_cpus: a.server_cpus.clone(),
        accept: a.accept.clone(),
        tls: a.tls,
        interval: a.interval,
        drain: a.drain,
        server_host: a.server_host.clone(),
        server_addr: a.server_addr.clone(),
        agents: a.agents.clone(),
        ssh: a.ssh.clone(),
        agent_exe: a.agent_exe.clone(),
        profile: a.profile.profile,
        profile_freq: a.profile.profile.then_some(a.profile.profile_freq),
        folded: a.profile.profile_out.is_some(),
        load: a.load.clone(),
        serve_exe: std::env::current_exe()?,
        meta: run_meta(),
        fail_on: Vec::new(),
    })
}

pub fn run(cmd: BenchCmdArgs) -> anyhow::Result<Outcome> {
    let a = &cmd.bench;
    let opts = BenchOptions { fail_on: cmd.fail_on.list(), ..options(a)? };
    let ci = crate::ci_out::CiOut::open(&cmd.ci)?;
    // The store is opened (and its problems reported) before the run, and written after it.
    let mut store = if a.no_save {
        None
    } else {
        let opened = store_cmd::open(&a.store).map_err(|e| match e.downcast::<UsageError>() {
            Ok(UsageError(m)) => UsageError(format!("{m}, or pass --no-save")).into(),
            Err(other) => other,
        })?;
        Some(opened)
    };
    let provenance = store.as_ref().map(|_| Provenance::read(&opts.meta, None));
    let urls: Vec<String> = opts.load.urls.iter().chain(a_url(&opts)).cloned().collect();
    let live = live_cmd::start(&a.live, RunInfo::new("bench", &urls, opts.agents.is_some()))?;
    let stop = qpslab_sys::signals::stop_flag()?;
    let mut runs: Vec<(BenchReport, Option<i64>)> = Vec::new();
    for i in 1..=cmd.repeat {
        if i > 1 && stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        let mut progress = ProgressLine::new();
        let report = {
            let mut tee = live.as_ref().map(|l| l.tee(&mut progress));
            let feed: &mut dyn Feed = match &mut tee {
                Some(t) => t,
                None => &mut progress,
            };
            bench(&opts, stop, feed)
        };
        let mut report = report.map_err(|e| match e {
            BenchError::Usage(m) => anyhow::Error::new(UsageError(m)),
            other => anyhow::Error::new(other),
        })?;
        progress.finish();
        if report.load.stopped_early && report.load.duration_s < 0.001 {
            // Stopped before the measured window began: nothing was measured to keep.
            break;
        }
        output::folded_out(&mut report.doctor, a.profile.profile_out.as_deref())?;
        let mut id = None;
        if let (Some(store), Some(p)) = (&mut store, &provenance) {
            let stored = store_bench(store, &opts, &report, None, a.label.as_deref(), p)
                .map_err(store_cmd::store_error)?;
            eprintln!(
                "qpslab: stored as run {stored} in {} (qpslab runs show {stored})",
                store.path().display()
            );
            id = Some(stored);
        }
        if cmd.repeat > 1 {
            eprintln!("qpslab: run {i} of {}: {:.0} req/s", cmd.repeat, report.load.throughput_rps);
        }
        runs.push((report, id));
    }
    let passed = runs.iter().all(|(r, _)| r.load.check.passed);
    let Some(median) = median_run(&runs) else {
        return Err(UsageError(
            "stopped by a signal before the first run's measured window began: nothing measured, \
             nothing stored"
                .into(),
        )
        .into());
    };
    let report = &runs[median].0;
    emit(a.json, &runs, median, cmd.repeat > 1)?;
    let named: Vec<(String, &qpslab_load::Report, String)> = runs
        .iter()
        .enumerate()
        .map(|(i, (r, _))| {
            let name = match runs.len() {
                1 => opts.target.clone(),
                n => format!("{} run {} of {n}", opts.target, i + 1),
            };
            (name, &r.load, render_text(r))
        })
        .collect();
    ci.write(("bench", &opts.target), &named)?;
    let ids: Vec<i64> = runs.iter().filter_map(|(_, id)| *id).collect();
    let html = live.as_ref().and_then(|l| l.url()).and_then(|_| {
        let title = format!("qpslab: {} run(s)", runs.len());
        match &store {
            Some(store) if !ids.is_empty() => {
                live_cmd::report_of(store, &Selector::Runs(ids.clone()), title)
            }
            _ => {
                let mut scratch = live_cmd::scratch_store()?;
                let p = Provenance::read(&opts.meta, None);
                let id = store_bench(&mut scratch, &opts, report, None, None, &p).ok()?;
                live_cmd::report_of(&scratch, &Selector::Runs(vec![id]), title)
            }
        }
    });
    live_cmd::finish(live, passed, live_cmd::summary(&report.load), html);
    Ok(if passed { Outcome::Passed } else { Outcome::ChecksFailed })
}

/// Prints the median run (text or JSON) and, for repeats, the spread of all runs.
fn emit(
    json: bool,
    runs: &[(BenchReport, Option<i64>)],
    median: usize,
    repeated: bool,
) -> anyhow::Result<()> {
    let report = &runs[median].0;
    if !repeated {
        return output::emit(json, report, || render_text(report));
    }
    let rates: Vec<f64> = runs.iter().map(|(r, _)| r.load.throughput_rps).collect();
    let s = spread(&rates);
    let doc = serde_json::json!({
        "repeat": runs.len(),
        "median_run": median,
        "throughput_rps": s,
        "runs": runs.iter().map(|(r, id)| serde_json::json!({"id": id, "report": r})).collect::<Vec<_>>(),
    });
    output::emit(json, &doc, || {
        let at = |k: &str| s[k].as_f64().unwrap_or(0.0);
        format!(
            "{}repeats     {} runs: median {:.0} req/s (min {:.0}, max {:.0}); the median run is shown above\n",
            render_text(report),
            rates.len(),
            at("median"),
            at("min"),
            at("max")
        )
    })
}

/// The index of the run whose rate is the median (the lower middle of an even count).
fn median_run(runs: &[(BenchReport, Option<i64>)]) -> Option<usize> {
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|&x, &y| runs[x].0.load.throughput_rps.total_cmp(&runs[y].0.load.throughput_rps));
    order.get(runs.len().saturating_sub(1) / 2).copied()
}

/// `{"median", "min", "max"}` of `rates`.
fn spread(rates: &[f64]) -> serde_json::Value {
    let mut v = rates.to_vec();
    v.sort_by(f64::total_cmp);
    let median = match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    };
    serde_json::json!({
        "median": median,
        "min": v.first().copied().unwrap_or(0.0),
        "max": v.last().copied().unwrap_or(0.0),
    })
}
