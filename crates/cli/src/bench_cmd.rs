//! `qpslab bench`: target + load + doctor in one command.

use std::io::Write;

use qpslab_lab::{bench, render_text, BenchError, BenchOptions, TargetKind};

use crate::args::BenchArgs;
use crate::load_cmd::{run_meta, ProgressLine};
use crate::{Outcome, UsageError};

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
    if a.duration.is_zero() {
        return Err(UsageError("--duration must be more than 0 (e.g. 10s)".into()).into());
    }
    if a.interval.is_zero() {
        return Err(UsageError("--interval must be more than 0 (e.g. 1s)".into()).into());
    }
    let opts = BenchOptions {
        url: a.url,
        target,
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
    let mut out = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        out.write_all(render_text(&report).as_bytes())?;
    }
    Ok(if report.load.check.passed { Outcome::Passed } else { Outcome::ChecksFailed })
}
