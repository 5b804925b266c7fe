//! `qpslab bench`: target + load + doctor in one command.

use qpslab_lab::record::{store_bench, Provenance};
use qpslab_lab::{bench, render_text, BenchError, BenchOptions};

use qpslab_live::RunInfo;
use qpslab_load::feed::Feed;
use qpslab_runs::select::Selector;

use crate::args::BenchArgs;
use crate::load_cmd::{run_meta, ProgressLine};
use crate::{live_cmd, output, store_cmd, Outcome, UsageError};

/// The bench's own target as the `target` label: an external URL, or the server it starts.
fn a_url(opts: &BenchOptions) -> Option<&String> {
    opts.load.urls.is_empty().then_some(&opts.target)
}

/// The bench's options from its flags (`climb` starts from them too).
pub fn options(a: &BenchArgs) -> anyhow::Result<BenchOptions> {
    Ok(BenchOptions {
        target: a.url.clone().or(a.target.clone()).unwrap_or_else(|| "builtin".into()),
        server_pids: a.server_pid.clone(),
        workers: a.workers,
        server_cpus: a.server_cpus.clone(),
        accept: a.accept.clone(),
        tls: a.tls,
        interval: a.interval,
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
    })
}

pub fn run(a: BenchArgs) -> anyhow::Result<Outcome> {
    let opts = options(&a)?;
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
    output::emit(a.json, &report, || render_text(&report))?;
    let html = live.as_ref().and_then(|l| l.url()).and_then(|_| {
        let title = "qpslab: 1 run(s)".to_string();
        match (&store, id) {
            (Some(store), Some(id)) => live_cmd::report_of(store, &Selector::Runs(vec![id]), title),
            _ => {
                let mut scratch = live_cmd::scratch_store()?;
                let p = Provenance::read(&opts.meta, None);
                let id = store_bench(&mut scratch, &opts, &report, None, None, &p).ok()?;
                live_cmd::report_of(&scratch, &Selector::Runs(vec![id]), title)
            }
        }
    });
    live_cmd::finish(live, report.load.check.passed, live_cmd::summary(&report.load), html);
    Ok(if report.load.check.passed { Outcome::Passed } else { Outcome::ChecksFailed })
}
