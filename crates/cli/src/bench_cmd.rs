//! `qpslab bench`: target + load + doctor in one command.

use qpslab_lab::{bench, render_text, BenchError, BenchOptions};

use crate::args::BenchArgs;
use crate::load_cmd::{run_meta, ProgressLine};
use crate::{output, Outcome, UsageError};

pub fn run(a: BenchArgs) -> anyhow::Result<Outcome> {
    let opts = BenchOptions {
        url: a.url,
        target: a.target,
        server_pids: a.server_pid,
        workers: a.workers,
        server_cpus: a.server_cpus,
        accept: a.accept,
        duration: a.duration,
        warmup: a.warmup,
        threads: a.threads,
        connections: a.connections,
        pipeline: a.pipeline,
        rate: a.rate,
        conn_per_request: a.conn_per_request,
        interval: a.interval,
        serve_exe: std::env::current_exe()?,
        meta: run_meta(),
    };
    let stop = qpslab_sys::signals::stop_flag()?;
    let mut progress = ProgressLine::new();
    let report = bench(&opts, stop, &mut |p| progress.update(p)).map_err(|e| match e {
        BenchError::Usage(m) => anyhow::Error::new(UsageError(m)),
        other => anyhow::Error::new(other),
    })?;
    progress.finish();
    output::emit(a.json, &report, || render_text(&report))?;
    Ok(if report.load.check.passed { Outcome::Passed } else { Outcome::ChecksFailed })
}
