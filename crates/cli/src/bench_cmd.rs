//! `qpslab bench`: target + load + doctor in one command.

use qpslab_lab::{bench, render_text, BenchError, BenchOptions, TargetKind};

use crate::args::BenchArgs;
use crate::load_cmd::{run_meta, ProgressLine};
use crate::{output, Outcome, UsageError};

pub fn run(a: BenchArgs) -> anyhow::Result<Outcome> {
    let target = match a.target.as_str() {
        "builtin" => TargetKind::Builtin,
        "nginx" => TargetKind::Nginx,
        other => return Err(UsageError(format!("--target {other:?}: use builtin or nginx")).into()),
    };
    if a.url.is_some() && a.target != "builtin" {
        return Err(UsageError(
            "--target starts a server; it cannot be combined with a URL".into(),
        )
        .into());
    }
    if !a.server_pid.is_empty() && a.url.is_none() {
        return Err(UsageError(
            "--server-pid names the server behind a URL; give the URL too (bench starts its own server otherwise)".into(),
        )
        .into());
    }
    if a.duration.is_zero() {
        return Err(UsageError("--duration must be more than 0 (e.g. 10s)".into()).into());
    }
    if a.interval.is_zero() {
        return Err(UsageError("--interval must be more than 0 (e.g. 1s)".into()).into());
    }
    let opts = BenchOptions {
        url: a.url,
        target,
        server_pids: a.server_pid,
        duration: a.duration,
        connections: a.connections,
        warmup: a.warmup,
        interval: a.interval,
        serve_exe: std::env::current_exe()?,
        meta: run_meta(),
    };
    let mut progress = ProgressLine::new();
    let report = bench(&opts, &mut |p| progress.update(p)).map_err(|e| match e {
        BenchError::Usage(m) => anyhow::Error::new(UsageError(m)),
        other => anyhow::Error::new(other),
    })?;
    progress.finish();
    output::emit(a.json, &report, || render_text(&report))?;
    Ok(if report.load.check.passed { Outcome::Passed } else { Outcome::ChecksFailed })
}
