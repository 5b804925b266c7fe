//! `qpslab bench`: target + load + doctor in one command.

use qpslab_lab::record::{store_bench, Provenance};
use qpslab_lab::{bench, render_text, BenchError, BenchOptions};

use crate::args::BenchArgs;
use crate::load_cmd::{run_meta, ProgressLine};
use crate::{output, store_cmd, Outcome, UsageError};

pub fn run(a: BenchArgs) -> anyhow::Result<Outcome> {
    let opts = BenchOptions {
        target: a.url.or(a.target).unwrap_or_else(|| "builtin".into()),
        server_pids: a.server_pid,
        workers: a.workers,
        server_cpus: a.server_cpus,
        accept: a.accept,
        tls: a.tls,
        interval: a.interval,
        server_host: a.server_host,
        server_addr: a.server_addr,
        agents: a.agents,
        ssh: a.ssh,
        agent_exe: a.agent_exe,
        profile: a.profile.profile,
        profile_freq: a.profile.profile.then_some(a.profile.profile_freq),
        folded: a.profile.profile_out.is_some(),
        load: a.load,
        serve_exe: std::env::current_exe()?,
        meta: run_meta(),
    };
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
    let stop = qpslab_sys::signals::stop_flag()?;
    let mut progress = ProgressLine::new();
    let mut report = bench(&opts, stop, &mut progress).map_err(|e| match e {
        BenchError::Usage(m) => anyhow::Error::new(UsageError(m)),
        other => anyhow::Error::new(other),
    })?;
    progress.finish();
    output::folded_out(&mut report.doctor, a.profile.profile_out.as_deref())?;
    if let (Some(store), Some(p)) = (&mut store, &provenance) {
        let id = store_bench(store, &opts, &report, None, a.label.as_deref(), p)
            .map_err(store_cmd::store_error)?;
        eprintln!(
            "qpslab: stored as run {id} in {} (qpslab runs show {id})",
            store.path().display()
        );
    }
    output::emit(a.json, &report, || render_text(&report))?;
    Ok(if report.load.check.passed { Outcome::Passed } else { Outcome::ChecksFailed })
}
