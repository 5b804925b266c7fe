//! A sweep variant's host settings (the `[tune]` table) in the tune planner's terms: planned
//! against the host they will change, checked, applied through the tune journal and reverted
//! after the run. The sweep does this on its own host, and the server-host agent on the
//! server's (`server` in a sweep file).

use std::path::PathBuf;

use qpslab_host::sample::Role;
use qpslab_host::{CpuSet, Host, Root};
use qpslab_tune::{self as tune, ApplyOptions, Explicit, Plan, PlanOptions, RootFiles, TuneError};

use crate::kinds::TuneSpec;

/// A variant's host settings in the tune planner's terms.
#[derive(Debug, Clone)]
pub enum HostChange {
    Planned(PlanOptions),
    Explicit(Explicit),
}

pub fn host_change(spec: &TuneSpec) -> Result<HostChange, String> {
    if !spec.is_explicit() {
        let irq_cpus = spec
            .irq_cpus
            .as_deref()
            .map(|l| CpuSet::parse_list(l).map_err(|e| format!("tune.irq-cpus {l:?}: {e}")))
            .transpose()?;
        return Ok(HostChange::Planned(PlanOptions {
            ifaces: spec.iface.clone(),
            irq_cpus,
            workers: spec.workers,
            role: if spec.role.as_deref() == Some("client") { Role::Client } else { Role::Server },
        }));
    }
    let mut x = Explicit::default();
    for (queue, list) in &spec.rps {
        let cpus = CpuSet::parse_list(list)
            .map_err(|e| format!("tune.rps {queue:?} = {list:?}: {e}; give a CPU list, e.g. \"0-1\" (\"\" turns RPS off)"))?;
        x.rps.insert(queue.clone(), cpus);
    }
    for (irq, list) in &spec.irq {
        let n: u32 =
            irq.parse().map_err(|_| format!("tune.irq {irq:?}: name an IRQ by its number"))?;
        let cpus =
            CpuSet::parse_list(list).map_err(|e| format!("tune.irq {irq:?} = {list:?}: {e}"))?;
        x.irq.insert(n, cpus);
    }
    for (name, value) in &spec.sysctl {
        x.sysctl.insert(name.clone(), value.text());
    }
    x.steer.clone_from(&spec.steer);
    Ok(HostChange::Explicit(x))
}

pub fn plan_for(root: &Root, host: &Host, change: &HostChange) -> Result<Plan, String> {
    match change {
        HostChange::Planned(p) => tune::plan(host, p).map_err(|e| format!("tune: {e}")),
        HostChange::Explicit(x) => {
            tune::explicit_plan(root, host, x).map_err(|e| format!("tune: {e}"))
        }
    }
}

/// Whether `plan` can be applied here, through the journal at `journal` (rights, paths), as
/// `tune apply` would check it; nothing is changed.
pub fn check_plan(plan: &Plan, journal: &std::path::Path) -> Result<(), String> {
    tune::apply::check_apply(plan, &apply_options(journal)).map_err(|e| e.to_string())
}

/// A variant's host settings planned against this host and checked as [`check_plan`] does:
/// what the server host's agent answers for a sweep, and what a sweep here does.
pub fn check(root: &Root, change: &HostChange, journal: &std::path::Path) -> Result<(), String> {
    let host = Host::read(root).map_err(|e| format!("cannot read the host: {e}"))?;
    check_plan(&plan_for(root, &host, change)?, journal)
}

pub fn apply_options(journal: &std::path::Path) -> ApplyOptions {
    ApplyOptions {
        journal: journal.to_path_buf(),
        stop_irqbalance: false,
        live: true,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    }
}

/// A variant's host settings in force; reverted by [`Applied::revert`] or, failing that, on
/// drop (an early return), so no path leaves them behind short of the process being killed,
/// which leaves the journal for `qpslab tune revert`.
#[derive(Debug)]
pub struct Applied {
    root: Root,
    journal: PathBuf,
    done: bool,
}

impl Applied {
    pub fn new(
        root: &Root,
        journal: &std::path::Path,
        change: &HostChange,
    ) -> Result<Self, String> {
        let host = Host::read(root).map_err(|e| format!("cannot read the host: {e}"))?;
        Applied::of_plan(root, journal, &plan_for(root, &host, change)?)
    }

    /// `plan` applied through the journal at `journal`.
    pub fn of_plan(root: &Root, journal: &std::path::Path, plan: &Plan) -> Result<Self, String> {
        tune::apply(&mut RootFiles(root.clone()), root.dir(), plan, &apply_options(journal))
            .map_err(|e| format!("cannot apply its host settings: {}", tune_message(&e)))?;
        Ok(Applied { root: root.clone(), journal: journal.to_path_buf(), done: false })
    }

    /// Leaves the settings in force and the journal active (for `qpslab tune revert`).
    pub fn keep(mut self) {
        self.done = true;
    }

    /// Reverts; Some(note) when a value someone else changed meanwhile was kept.
    pub fn revert(mut self) -> Result<Option<String>, String> {
        self.done = true;
        let report = tune::revert(&mut RootFiles(self.root.clone()), &self.journal, false, true)
            .map_err(|e| {
                format!(
                    "cannot revert its host settings: {}; run `qpslab tune revert`",
                    tune_message(&e)
                )
            })?;
        if !report.failed.is_empty() {
            return Err(format!(
                "cannot revert {}: {}; the journal {} stays for `qpslab tune revert`",
                report.failed[0].0.setting,
                report.failed[0].1,
                self.journal.display()
            ));
        }
        Ok((!report.kept.is_empty()).then(|| {
            format!(
                "{} changed by someone else during the run and kept; the journal {} stays for `qpslab tune revert --force`",
                report.kept.iter().map(|i| i.setting.as_str()).collect::<Vec<_>>().join(", "),
                self.journal.display()
            )
        }))
    }
}

impl Drop for Applied {
    fn drop(&mut self) {
        if !self.done {
            let _ = tune::revert(&mut RootFiles(self.root.clone()), &self.journal, false, true);
        }
    }
}

fn tune_message(e: &TuneError) -> String {
    e.to_string()
}
