//! `tune apply`, `tune revert` and `tune status`: the only code in qpslab that writes to /proc
//! and /sys. Every write is journaled first ([`super::journal`]); files go through the [`Files`]
//! seam so tests can fail the k-th write.

use super::journal::{Entry, Journal, JournalError};
use super::plan::Plan;
use qpslab_host::cpuset::CpuSet;
use qpslab_sys::root::Root;
use serde::Serialize;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

/// Reads and writes files under a root.
pub trait Files {
    /// The contents of `rel`, untrimmed.
    fn read(&mut self, rel: &str) -> io::Result<String>;
    /// Replaces the contents of the existing file `rel` with `text` in one write, as
    /// `echo text > file` does; never creates a file.
    fn write(&mut self, rel: &str, text: &str) -> io::Result<()>;
    /// The full path of `rel`, for messages.
    fn path(&self, rel: &str) -> PathBuf;
}

/// [`Files`] on a real directory tree (`/` on a live host).
#[derive(Debug, Clone)]
pub struct RootFiles(pub Root);

impl Files for RootFiles {
    fn read(&mut self, rel: &str) -> io::Result<String> {
        std::fs::read_to_string(self.0.path(rel))
    }

    fn write(&mut self, rel: &str, text: &str) -> io::Result<()> {
        let mut f =
            std::fs::OpenOptions::new().write(true).truncate(true).open(self.0.path(rel))?;
        // /proc and /sys take a value in one write(2); write_all issues exactly one for these
        // short texts unless the kernel rejects it.
        f.write_all(text.as_bytes())
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.0.path(rel)
    }
}

/// Why tune stopped.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// Not started: the user must act first (exit 2).
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// A read or write failed during apply; what was written before it has been rolled back
    /// (exit 1).
    #[error("cannot {op} {}: {source}; {rollback}", path.display())]
    Write {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
        rollback: String,
    },
}

/// How apply runs.
#[derive(Debug, Clone)]
pub struct ApplyOptions {
    pub journal: PathBuf,
    /// Stop a running irqbalance (journaled, restarted by revert) instead of refusing.
    pub stop_irqbalance: bool,
    /// The root is the live host (`/`): needs root, and irqbalance is a real process.
    pub live: bool,
    /// Recorded in the journal.
    pub command: String,
}

/// One value as apply or revert left it.
#[derive(Debug, Clone, Serialize)]
pub struct Item {
    pub setting: String,
    pub path: String,
    pub before: String,
    /// What apply left (read back after the write).
    pub applied: String,
    /// What the file holds now.
    pub now: String,
}

/// What apply did.
#[derive(Debug, Clone, Serialize)]
pub struct ApplyReport {
    pub journal: PathBuf,
    pub written: Vec<Item>,
    /// irqbalance's PID when it was stopped (or, on a fixture root, would have been).
    pub irqbalance_stopped: Option<u32>,
}

/// Refuses unless apply may start: root on a live host, no active journal, irqbalance handled.
pub fn check_apply(plan: &Plan, opts: &ApplyOptions) -> Result<(), TuneError> {
    if opts.live && !qpslab_sys::process::is_root() {
        return Err(TuneError::Refused(
            "tune apply writes /proc and /sys: run it as root (or rehearse on a copy with --root DIR)"
                .into(),
        ));
    }
    if let Some(j) = Journal::load(&opts.journal)? {
        return Err(TuneError::Refused(format!(
            "a tune journal is already active at {} ({} changes by `{}`): run `qpslab tune revert` first",
            opts.journal.display(),
            j.entries.len(),
            j.command
        )));
    }
    if let Some(pid) = plan.irqbalance_pid.filter(|_| plan.moves_irqs() && !opts.stop_irqbalance) {
        return Err(TuneError::Refused(format!(
            "irqbalance (pid {pid}) is running and would move the IRQs back: pass \
             --stop-irqbalance (journaled; revert starts it again) or stop it yourself"
        )));
    }
    Ok(())
}

/// Applies `plan`: journal first, then the write, then the value read back. On a failed write
/// everything written before it is restored and the journal removed.
pub fn apply(
    files: &mut dyn Files,
    root: &Path,
    plan: &Plan,
    opts: &ApplyOptions,
) -> Result<ApplyReport, TuneError> {
    check_apply(plan, opts)?;
    let mut report =
        ApplyReport { journal: opts.journal.clone(), written: vec![], irqbalance_stopped: None };
    if plan.changes.is_empty() {
        return Ok(report);
    }
    let mut journal = Journal::new(root, opts.command.clone());
    if let Some(pid) = plan.irqbalance_pid.filter(|_| plan.moves_irqs() && opts.stop_irqbalance) {
        let (unit, cmdline) = if opts.live { service::describe(pid) } else { (None, vec![]) };
        journal.entries.push(Entry::StopIrqbalance {
            pid,
            unit: unit.clone(),
            cmdline,
            stopped: false,
            restarted: false,
        });
        journal.save(&opts.journal)?;
        if opts.live {
            service::stop(pid, unit.as_deref()).map_err(|e| {
                TuneError::Refused(format!("--stop-irqbalance: cannot stop pid {pid}: {e}"))
            })?;
            if let Some(Entry::StopIrqbalance { stopped, .. }) = journal.entries.last_mut() {
                *stopped = true;
            }
        }
        report.irqbalance_stopped = Some(pid);
    }
    for change in &plan.changes {
        let before = match files.read(&change.path) {
            Ok(b) => b,
            Err(source) => {
                return Err(roll_back(files, &mut journal, opts, "read", &change.path, source))
            }
        };
        journal.entries.push(Entry::Write {
            setting: change.setting.clone(),
            path: change.path.clone(),
            before: before.clone(),
            written: change.write.clone(),
            after: None,
        });
        journal.save(&opts.journal)?;
        if let Err(source) = files.write(&change.path, &change.write) {
            return Err(roll_back(files, &mut journal, opts, "write", &change.path, source));
        }
        let after = files.read(&change.path).unwrap_or_else(|_| change.write.clone());
        if let Some(Entry::Write { after: a, .. }) = journal.entries.last_mut() {
            *a = Some(after.clone());
        }
        journal.save(&opts.journal)?;
        report.written.push(Item {
            setting: change.setting.clone(),
            path: change.path.clone(),
            before,
            applied: after.clone(),
            now: after,
        });
    }
    journal.complete = true;
    journal.save(&opts.journal)?;
    Ok(report)
}

/// Restores what apply wrote before a failure and builds the error.
fn roll_back(
    files: &mut dyn Files,
    journal: &mut Journal,
    opts: &ApplyOptions,
    op: &'static str,
    failed: &str,
    source: io::Error,
) -> TuneError {
    let path = files.path(failed);
    let rollback = match undo(files, journal, false, opts.live) {
        Ok(r) if r.clean() => match Journal::remove(&opts.journal) {
            Ok(()) => format!("the {} values written before it were restored", r.restored.len()),
            Err(e) => format!("the values written before it were restored, but {e}"),
        },
        Ok(r) => {
            let _ = journal.save(&opts.journal);
            format!(
                "{} values could not be restored (see `qpslab tune status`); the journal {} stays \
                 active for `qpslab tune revert`",
                r.kept.len() + r.failed.len(),
                opts.journal.display()
            )
        }
        Err(e) => format!("rolling back failed too: {e}"),
    };
    TuneError::Write { op, path, source, rollback }
}

/// What revert did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RevertReport {
    /// No journal was active: nothing to do.
    pub no_journal: bool,
    pub restored: Vec<Item>,
    /// Already at the value before apply.
    pub unchanged: Vec<Item>,
    /// Changed by someone else since apply and kept (no --force).
    pub kept: Vec<Item>,
    /// (value, error) for writes or reads that failed.
    pub failed: Vec<(Item, String)>,
    /// irqbalance started again (unit or command).
    pub irqbalance_restarted: Option<String>,
}

impl RevertReport {
    /// Every value is back where it was before apply.
    pub fn clean(&self) -> bool {
        self.kept.is_empty() && self.failed.is_empty()
    }
}

/// Restores every journaled value, newest first. A value changed since apply is kept and
/// reported unless `force`. The journal is removed when everything is restored; otherwise it
/// stays active so a second revert (or one with --force) can finish. Running it again is
/// harmless: restored values are seen as unchanged.
pub fn revert(
    files: &mut dyn Files,
    journal_path: &Path,
    force: bool,
    live: bool,
) -> Result<RevertReport, TuneError> {
    let Some(mut journal) = Journal::load(journal_path)? else {
        return Ok(RevertReport { no_journal: true, ..RevertReport::default() });
    };
    if live && !qpslab_sys::process::is_root() {
        return Err(TuneError::Refused("tune revert writes /proc and /sys: run it as root".into()));
    }
    let report = undo(files, &mut journal, force, live)?;
    if report.clean() {
        Journal::remove(journal_path)?;
    } else {
        journal.save(journal_path)?;
    }
    Ok(report)
}

fn undo(
    files: &mut dyn Files,
    journal: &mut Journal,
    force: bool,
    live: bool,
) -> Result<RevertReport, TuneError> {
    let mut report = RevertReport::default();
    for entry in journal.entries.iter_mut().rev() {
        match entry {
            Entry::Write { setting, path, before, written, after } => {
                let mut item = Item {
                    setting: setting.clone(),
                    path: path.clone(),
                    before: before.clone(),
                    applied: after.clone().unwrap_or_else(|| written.clone()),
                    now: String::new(),
                };
                match files.read(path) {
                    Err(e) => report.failed.push((item, format!("cannot read it: {e}"))),
                    Ok(now) => {
                        item.now = now.clone();
                        let ours = same(path, &now, written)
                            || after.as_ref().is_some_and(|a| same(path, &now, a));
                        if same(path, &now, before) {
                            report.unchanged.push(item);
                        } else if ours || force {
                            match files.write(path, before) {
                                Ok(()) => report.restored.push(item),
                                Err(e) => report.failed.push((item, e.to_string())),
                            }
                        } else {
                            report.kept.push(item);
                        }
                    }
                }
            }
            Entry::StopIrqbalance { unit, cmdline, stopped, restarted, .. } => {
                if *stopped && !*restarted && live {
                    match service::start(unit.as_deref(), cmdline) {
                        Ok(what) => {
                            *restarted = true;
                            report.irqbalance_restarted = Some(what);
                        }
                        Err(e) => report.failed.push((
                            Item {
                                setting: "irqbalance".into(),
                                path: String::new(),
                                before: "running".into(),
                                applied: "stopped".into(),
                                now: "stopped".into(),
                            },
                            e,
                        )),
                    }
                }
            }
        }
    }
    Ok(report)
}

/// Whether `path` holds a CPU mask (IRQ affinity, RPS, XPS).
pub(crate) fn is_mask_file(path: &str) -> bool {
    ["smp_affinity", "rps_cpus", "xps_cpus"].iter().any(|m| path.ends_with(m))
}

/// Whether two contents of `path` mean the same value: equal apart from whitespace, and for
/// CPU masks equal as sets (`00000003` and `3`).
pub fn same(path: &str, a: &str, b: &str) -> bool {
    let words = |s: &str| s.split_ascii_whitespace().collect::<Vec<_>>().join(" ");
    if words(a) == words(b) {
        return true;
    }
    let is_mask = ["smp_affinity", "rps_cpus", "xps_cpus"].iter().any(|m| path.ends_with(m));
    is_mask && matches!((CpuSet::parse_mask(a), CpuSet::parse_mask(b)), (Ok(x), Ok(y)) if x == y)
}

/// One journaled value as it stands now.
#[derive(Debug, Clone, Serialize)]
pub struct StatusEntry {
    #[serde(flatten)]
    pub item: Item,
    /// applied (as apply left it), reverted (back to before), changed (someone else's value),
    /// unwritten (journaled, but apply stopped before writing it), unreadable.
    pub state: &'static str,
}

/// The active journal and its values.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub journal: PathBuf,
    pub started: u64,
    pub command: String,
    pub complete: bool,
    pub irqbalance_stopped: Option<u32>,
    pub entries: Vec<StatusEntry>,
}

/// The active journal at `journal_path` compared with the files, or None when none is active.
pub fn status(files: &mut dyn Files, journal_path: &Path) -> Result<Option<Status>, TuneError> {
    let Some(journal) = Journal::load(journal_path)? else { return Ok(None) };
    let mut entries = Vec::new();
    let mut irqbalance_stopped = None;
    for entry in &journal.entries {
        match entry {
            Entry::Write { setting, path, before, written, after } => {
                let now = files.read(path);
                let applied = after.clone().unwrap_or_else(|| written.clone());
                let state = match &now {
                    Err(_) => "unreadable",
                    Ok(n) if same(path, n, &applied) => "applied",
                    Ok(n) if same(path, n, before) && after.is_none() => "unwritten",
                    Ok(n) if same(path, n, before) => "reverted",
                    Ok(_) => "changed",
                };
                entries.push(StatusEntry {
                    item: Item {
                        setting: setting.clone(),
                        path: path.clone(),
                        before: before.clone(),
                        applied,
                        now: now.unwrap_or_default(),
                    },
                    state,
                });
            }
            Entry::StopIrqbalance { pid, restarted, .. } => {
                irqbalance_stopped = (!restarted).then_some(*pid);
            }
        }
    }
    Ok(Some(Status {
        journal: journal_path.to_path_buf(),
        started: journal.started,
        command: journal.command,
        complete: journal.complete,
        irqbalance_stopped,
        entries,
    }))
}

/// Stopping and starting irqbalance on the live host.
mod service {
    use qpslab_sys::root::Root;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    const UNIT: &str = "irqbalance.service";

    fn systemctl(args: &[&str]) -> bool {
        Command::new("systemctl")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The systemd unit irqbalance runs as, or its command line when it runs outside systemd.
    pub fn describe(pid: u32) -> (Option<String>, Vec<String>) {
        if systemctl(&["is-active", "--quiet", UNIT]) {
            return (Some(UNIT.into()), vec![]);
        }
        let cmdline = Root::live().read_opt(&format!("proc/{pid}/cmdline")).unwrap_or_default();
        let args = cmdline.split('\0').filter(|a| !a.is_empty()).map(str::to_string).collect();
        (None, args)
    }

    /// Stops it through systemd, or with SIGTERM, and waits up to 5 s for it to exit.
    pub fn stop(pid: u32, unit: Option<&str>) -> Result<(), String> {
        if let Some(unit) = unit {
            return if systemctl(&["stop", unit]) {
                Ok(())
            } else {
                Err(format!("systemctl stop {unit} failed"))
            };
        }
        // The PID was read from /proc just now, and the user asked for it (--stop-irqbalance).
        qpslab_sys::process::terminate(pid).map_err(|e| e.to_string())?;
        let deadline = Instant::now() + Duration::from_secs(5);
        while Root::live().exists(&format!("proc/{pid}")) {
            if Instant::now() > deadline {
                return Err("still running 5 s after SIGTERM".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Starts it again as it ran before; says how.
    pub fn start(unit: Option<&str>, cmdline: &[String]) -> Result<String, String> {
        if let Some(unit) = unit {
            return if systemctl(&["start", unit]) {
                Ok(format!("systemctl start {unit}"))
            } else {
                Err(format!("systemctl start {unit} failed; start irqbalance by hand"))
            };
        }
        let (exe, args) = cmdline.split_first().ok_or("its command line was not recorded")?;
        Command::new(exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(|_| cmdline.join(" "))
            .map_err(|e| format!("cannot start {exe}: {e}"))
    }
}
