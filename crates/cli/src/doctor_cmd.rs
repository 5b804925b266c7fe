//! `qpslab doctor`: sample while a duration passes or a command runs, then print findings.

use qpslab_doctor::render::doctor_text;
use qpslab_doctor::{rule, RULES};
use qpslab_lab::doctor::{doctor, DoctorError, DoctorOptions};

use crate::args::DoctorArgs;
use crate::{output, Outcome, UsageError};

pub fn run(a: DoctorArgs) -> anyhow::Result<Outcome> {
    if let Some(name) = &a.rules {
        return rules(name);
    }
    let opts = DoctorOptions {
        root: a.root,
        interval: a.interval,
        duration: a.duration,
        pids: a.pid,
        command: a.command,
        // Keep stdout one JSON object: the command's output goes to stderr.
        command_stdout_to_stderr: a.json,
        profile: a.profile.options(),
    };
    let stop = qpslab_sys::signals::stop_flag()?;
    let mut done = doctor(&opts, stop).map_err(|e| match e {
        DoctorError::Usage(m) => anyhow::Error::new(UsageError(m)),
        other => anyhow::Error::new(other),
    })?;
    output::folded_out(&mut done.diagnosis, a.profile.profile_out.as_deref())?;
    let d = &done.diagnosis;
    let mut doc = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "command": std::env::args().collect::<Vec<_>>(),
        "interval_s": a.interval.as_secs_f64(),
        "summary": d.summary,
        "findings": d.findings,
        "explanation": d.explanation,
        "command_exit_code": done.command_exit_code,
    });
    if let Some(p) = &d.profile {
        doc["profile"] = serde_json::to_value(p)?;
    }
    output::emit(a.json, &doc, || doctor_text(d, a.explain))?;
    Ok(match done.command_exit_code {
        Some(c) => Outcome::Code(u8::try_from(c).unwrap_or(1)),
        None => Outcome::Passed,
    })
}

/// `doctor --rules [RULE]`: what a finding means, when it fires and what to do.
fn rules(name: &str) -> anyhow::Result<Outcome> {
    let chosen: Vec<_> = if name == "all" {
        RULES.iter().collect()
    } else {
        let r = rule(name).ok_or_else(|| {
            let names: Vec<&str> = RULES.iter().map(|r| r.name).collect();
            UsageError(format!(
                "--rules {name:?}: no such rule; the rules are {}",
                names.join(", ")
            ))
        })?;
        vec![r]
    };
    let mut text = String::new();
    for r in chosen {
        text += &format!(
            "{}\n  means:     {}\n  fires at:  {}\n  remedy:    {}\n",
            r.name, r.catches, r.threshold, r.remedy
        );
    }
    output::print(&text)?;
    Ok(Outcome::Passed)
}
