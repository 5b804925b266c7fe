//! `qpslab doctor`: sample while a duration passes or a command runs, then print findings.

use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use qpslab_host::doctor::{rule, Context, RULES};
use qpslab_host::render::doctor_text;
use qpslab_host::sample::Role;
use qpslab_host::{Examination, Root};

use crate::args::DoctorArgs;
use crate::{output, Outcome, UsageError};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

pub fn run(a: DoctorArgs) -> anyhow::Result<Outcome> {
    if let Some(name) = &a.explain {
        return explain(name);
    }
    let root = Root::new(&a.root);
    match (&a.duration, a.command.is_empty()) {
        (None, true) => {
            return Err(UsageError(
                "give --duration DUR, or a command to run after -- (e.g. -- qpslab load URL)"
                    .into(),
            )
            .into())
        }
        (Some(_), false) => return Err(UsageError(
            "--duration and a command exclude each other: sampling lasts as long as the command"
                .into(),
        )
        .into()),
        _ => {}
    }
    if a.interval.is_zero() {
        return Err(UsageError("--interval must be more than 0 (e.g. 1s or 200ms)".into()).into());
    }
    for pid in &a.pid {
        if !root.path(&format!("proc/{pid}")).exists() {
            return Err(UsageError(format!(
                "--pid {pid}: no such process under {}",
                root.path("proc").display()
            ))
            .into());
        }
    }
    let mut exam = Examination::new(&root, a.interval)
        .map_err(|e| UsageError(format!("--root {}: {e}", a.root.display())))?;
    for pid in qpslab_host::procs::with_descendants(&root, &a.pid) {
        exam.follow(pid, Role::Server);
    }
    // SAFETY: the handler only stores an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let mut child = match a.command.split_first() {
        Some((prog, args)) => {
            let mut cmd = Command::new(prog);
            cmd.args(args);
            if a.json {
                // Keep stdout one JSON object: the command's output goes to stderr.
                cmd.stdout(Stdio::from(std::io::stderr().as_fd().try_clone_to_owned()?));
            }
            let child = cmd.spawn().map_err(|e| UsageError(format!("cannot run {prog:?}: {e}")))?;
            exam.follow(child.id(), Role::Client);
            Some(child)
        }
        None => None,
    };
    let start = Instant::now();
    let samples = exam.record(|| {
        if STOP.load(Ordering::Relaxed) {
            return true;
        }
        match (&mut child, a.duration) {
            (Some(c), _) => exited_unreaped(c.id()),
            (None, Some(d)) => start.elapsed() >= d,
            (None, None) => true,
        }
    })?;
    let status = child.as_mut().map(|c| c.wait()).transpose()?;
    let diagnosis = exam.diagnose(&samples, Context::default());
    let (summary, findings) = (&diagnosis.summary, &diagnosis.findings);
    let code = status.map(|s| s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)));
    let doc = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "command": std::env::args().collect::<Vec<_>>(),
        "interval_s": a.interval.as_secs_f64(),
        "summary": summary,
        "findings": findings,
        "command_exit_code": code,
    });
    output::emit(a.json, &doc, || doctor_text(summary, findings))?;
    Ok(match code {
        Some(c) => Outcome::Code(u8::try_from(c).unwrap_or(1)),
        None => Outcome::Passed,
    })
}

/// Whether the child has exited, leaving it unreaped (WNOWAIT) so the last sample still reads
/// its final CPU total from /proc/PID/stat.
fn exited_unreaped(pid: u32) -> bool {
    // SAFETY: siginfo_t is plain data; zeroed is valid and waitid fills it.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a valid, writable siginfo_t; the flags do not reap the child.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: si_pid is valid to read after a successful waitid; 0 means no child changed state.
    rc != 0 || unsafe { info.si_pid() } != 0
}

/// `doctor --explain [RULE]`: what a finding means, when it fires and what to do.
fn explain(name: &str) -> anyhow::Result<Outcome> {
    let chosen: Vec<_> = if name == "all" {
        RULES.iter().collect()
    } else {
        let r = rule(name).ok_or_else(|| {
            let names: Vec<&str> = RULES.iter().map(|r| r.name).collect();
            UsageError(format!(
                "--explain {name:?}: no such rule; the rules are {}",
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
