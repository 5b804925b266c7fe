//! `qpslab doctor`: the doctor alone, for a duration or while a command runs (the command is
//! taken as the load generator and followed as the client side; its exit code is kept), with
//! the server's processes (and their children) followed as the server side.

use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use qpslab_doctor::Context;
use qpslab_doctor::{Diagnosis, Examination};
use qpslab_host::sample::Role;
use qpslab_host::{ReadError, Root};

/// What to examine, as the user gave it.
#[derive(Debug, Clone)]
pub struct DoctorOptions {
    /// Read `ROOT/proc` and `ROOT/sys`.
    pub root: PathBuf,
    pub interval: Duration,
    /// Sample for this long; or, with a command, while it runs.
    pub duration: Option<Duration>,
    /// The server's processes.
    pub pids: Vec<u32>,
    /// The command to run while sampling, and its arguments.
    pub command: Vec<String>,
    /// Send the command's stdout to stderr (so that stdout holds only the JSON report).
    pub command_stdout_to_stderr: bool,
    /// Profile every CPU meanwhile (`--profile`).
    pub profile: Option<qpslab_profile::ProfileOptions>,
}

/// Why the doctor could not run.
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    /// The user's to fix (exit 2): options that exclude each other, a missing process or tree.
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// What the doctor found, and the command's exit code (128 + the signal when it was killed).
#[derive(Debug, Clone)]
pub struct DoctorRun {
    pub diagnosis: Diagnosis,
    pub command_exit_code: Option<i32>,
}

impl DoctorOptions {
    /// Checks the options against each other and against the tree under the root.
    pub fn validate(&self) -> Result<Root, DoctorError> {
        let usage = |m: String| Err(DoctorError::Usage(m));
        match (self.duration, self.command.is_empty()) {
            (None, true) => {
                return usage("give --duration DUR, or a command to run after -- (e.g. -- qpslab load URL)".into())
            }
            (Some(_), false) => {
                return usage("--duration and a command exclude each other: sampling lasts as long as the command".into())
            }
            _ => {}
        }
        if self.interval.is_zero() {
            return usage("--interval must be more than 0 (e.g. 1s or 200ms)".into());
        }
        let root = Root::new(&self.root);
        if let Some(pid) = self.pids.iter().find(|p| !root.exists(&format!("proc/{p}"))) {
            return usage(format!(
                "--pid {pid}: no such process under {}",
                root.path("proc").display()
            ));
        }
        Ok(root)
    }
}

/// The TCP ports the processes `pids` listen on: the run's connections are those to them.
fn listening_ports(root: &Root, pids: &[u32]) -> Vec<u16> {
    use qpslab_sys::sockets::{holders_among, LISTEN};
    let listeners = qpslab_host::tcp_sockets_in(root, 1 << LISTEN);
    let inodes = listeners.iter().map(|s| s.inode).collect();
    let held: std::collections::BTreeSet<u64> =
        holders_among(root, pids, &inodes).into_iter().map(|(_, i)| i).collect();
    let mut ports: Vec<u16> =
        listeners.iter().filter(|s| held.contains(&s.inode)).map(|s| s.local.port()).collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// Samples until the duration passes, the command exits or `stop` is set (then the command, a
/// child of this process, is asked to stop with SIGTERM), and diagnoses.
pub fn doctor(opts: &DoctorOptions, stop: &AtomicBool) -> Result<DoctorRun, DoctorError> {
    let root = opts.validate()?;
    let mut exam = Examination::new(&root, opts.interval)
        .map_err(|e| DoctorError::Usage(format!("--root {}: {e}", opts.root.display())))?;
    if let Some(o) = &opts.profile {
        exam.profile(o.clone());
    }
    let servers = qpslab_host::procs::with_descendants(&root, &opts.pids);
    for &pid in &servers {
        exam.follow(pid, Role::Server);
    }
    exam.watch_ports(&listening_ports(&root, &servers));
    let mut child = match opts.command.split_first() {
        Some((prog, args)) => {
            let mut cmd = Command::new(prog);
            cmd.args(args);
            if opts.command_stdout_to_stderr {
                cmd.stdout(Stdio::from(std::io::stderr().as_fd().try_clone_to_owned()?));
            }
            let child =
                cmd.spawn().map_err(|e| DoctorError::Usage(format!("cannot run {prog:?}: {e}")))?;
            exam.follow(child.id(), Role::Client);
            Some(child)
        }
        None => None,
    };
    let start = Instant::now();
    let samples = exam.record(|| {
        if stop.load(Ordering::Relaxed) {
            return true;
        }
        match (&child, opts.duration) {
            // Left unreaped, so the last sample still reads its final CPU total.
            (Some(c), _) => qpslab_sys::process::exited(c.id()),
            (None, Some(d)) => start.elapsed() >= d,
            (None, None) => true,
        }
    })?;
    if let Some(c) = &child {
        if stop.load(Ordering::Relaxed) && !qpslab_sys::process::exited(c.id()) {
            let _ = qpslab_sys::process::terminate(c.id());
        }
    }
    let status = child.as_mut().map(|c| c.wait()).transpose()?;
    Ok(DoctorRun {
        diagnosis: exam.diagnose(&samples, Context::default()),
        command_exit_code: status
            .map(|s| s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> DoctorOptions {
        DoctorOptions {
            root: "/".into(),
            interval: Duration::from_secs(1),
            duration: Some(Duration::from_secs(1)),
            pids: Vec::new(),
            command: Vec::new(),
            command_stdout_to_stderr: false,
            profile: None,
        }
    }

    fn refusal(o: DoctorOptions) -> String {
        match o.validate() {
            Err(DoctorError::Usage(m)) => m,
            other => panic!("expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn options_are_checked_before_anything_runs() {
        assert!(opts().validate().is_ok());
        assert!(refusal(DoctorOptions { duration: None, ..opts() }).starts_with("give --duration"));
        let both = DoctorOptions { command: vec!["true".into()], ..opts() };
        assert!(refusal(both).contains("exclude each other"));
        assert!(
            refusal(DoctorOptions { interval: Duration::ZERO, ..opts() }).starts_with("--interval")
        );
        let gone = DoctorOptions { pids: vec![999_999_999], ..opts() };
        assert!(refusal(gone).starts_with("--pid 999999999: no such process"));
    }
}
