//! `--apply-host`: a state's host settings in force for each of its runs and reverted after
//! it, through tune's journal (each previous value written down before its write), so a
//! signal, an error or a kill -9 leaves nothing `qpslab tune revert` cannot undo. Settings are
//! planned against the host as it is before each run: between runs it is back as it was.
//!
//! The host is the server's: this one, or with `--server HOST` that host, where an agent
//! (the one a sweep's server variants use) plans, applies and reverts them, journaled there,
//! and reverts them by itself when this process dies (its pipe closes).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use qpslab_fleet::session::FleetOptions;
use qpslab_host::{Host, Root};
use qpslab_tune::{self as tune, explicit::Explicit, Plan};

use super::remedy::Change;
use crate::hostset::{self, Applied};
use crate::kinds::{SysctlValue, TuneSpec};
use crate::remote::{InForce, ServerHost, TuneCall};

/// The server's host in the climb's hands and its journal.
#[derive(Debug)]
pub enum HostSide {
    /// This host (its network namespace, inside one).
    Here { root: Root, journal: PathBuf },
    /// `--server HOST`, through an agent there; the journal is that host's (`--journal`, or
    /// tune's default there).
    Server { fleet: FleetOptions, journal: Option<PathBuf> },
}

/// The reads and plans on the server host are short calls no signal needs to cut: the
/// settings must be reverted whatever happens.
static NEVER: AtomicBool = AtomicBool::new(false);

impl HostSide {
    /// Checks that the climb may change this host: root, and no tune journal active.
    pub fn here(journal: Option<&Path>) -> Result<HostSide, String> {
        let root = Root::live();
        let journal = tune::journal_path(&root, journal);
        let plan = plan_here(&root, &[])?;
        hostset::check_plan(&plan, &journal).map_err(|e| format!("--apply-host: {e}"))?;
        Ok(HostSide::Here { root, journal })
    }

    /// The same check on the server host, through its agent.
    pub fn server(fleet: FleetOptions, journal: Option<&Path>) -> Result<HostSide, String> {
        let side = HostSide::Server { fleet, journal: journal.map(Path::to_path_buf) };
        side.changes(&[]).map_err(|e| format!("--apply-host: {e}"))?;
        Ok(side)
    }

    /// Where the settings go, for a reader: `this host` or `root@S`.
    pub fn name(&self) -> String {
        match self {
            HostSide::Here { .. } => "this host".into(),
            HostSide::Server { fleet, .. } => fleet.hosts[0].name.clone(),
        }
    }

    /// The journal left in force with `--keep` (this host's only).
    pub fn journal(&self) -> Option<&Path> {
        match self {
            HostSide::Here { journal, .. } => Some(journal),
            HostSide::Server { .. } => None,
        }
    }

    /// Sysctls' values on that host now (whitespace as one space); None where absent, or
    /// when the server host cannot be read.
    pub fn sysctls(&self, names: &[String]) -> Vec<Option<String>> {
        match self {
            HostSide::Here { root, .. } => {
                names.iter().map(|n| qpslab_host::host::read_sysctl(root, n)).collect()
            }
            HostSide::Server { fleet, .. } => {
                let read = ServerHost::connect(fleet, &NEVER).map_err(|e| e.to_string());
                let values = read.and_then(|mut far| {
                    let v = far.sysctls(names);
                    far.close();
                    v
                });
                values.unwrap_or_else(|_| vec![None; names.len()])
            }
        }
    }

    /// How many settings putting `changes` (the host changes among them) in force on that host
    /// as it is now would change, checked as applying them will be; a setting written twice
    /// keeps its last value.
    pub fn changes(&self, changes: &[Change]) -> Result<usize, String> {
        match self {
            HostSide::Here { root, journal } => {
                let plan = plan_here(root, changes)?;
                hostset::check_plan(&plan, journal)?;
                Ok(plan.changes.len())
            }
            HostSide::Server { fleet, journal } => {
                let mut far = ServerHost::connect(fleet, &NEVER).map_err(|e| e.to_string())?;
                let call = TuneCall { tune: spec(changes), journal: journal.clone() };
                let n = far.tune_plan(&call).map_err(|e| format!("on {}: {e}", far.name));
                far.close();
                n
            }
        }
    }

    /// Puts `changes` in force (None: no host change among them); reverted by
    /// [`InForce::revert`] or on drop (here), or when the agent's pipe closes (there).
    pub fn apply(&self, changes: &[Change]) -> Result<Option<InForce<'_>>, String> {
        if !changes.iter().any(Change::is_host) {
            return Ok(None);
        }
        match self {
            HostSide::Here { root, journal } => {
                let plan = plan_here(root, changes)?;
                Ok(Some(InForce::Here(Some(Applied::of_plan(root, journal, &plan)?))))
            }
            HostSide::Server { fleet, journal } => {
                let call = TuneCall { tune: spec(changes), journal: journal.clone() };
                InForce::there(fleet, &NEVER, Some(&call)).map(Some)
            }
        }
    }

    /// Puts `changes` in force and leaves them (`--keep`, this host only).
    pub fn keep(&self, changes: &[Change]) -> Result<(), String> {
        match self.apply(changes)? {
            Some(InForce::Here(Some(applied))) => applied.keep(),
            Some(other) => {
                other.revert()?;
                return Err("--keep leaves settings in force on this host only".into());
            }
            None => {}
        }
        Ok(())
    }
}

/// The plan that puts `changes` in force on this host as it is now.
fn plan_here(root: &Root, changes: &[Change]) -> Result<Plan, String> {
    let host = Host::read(root).map_err(|e| format!("cannot read the host: {e}"))?;
    tune::explicit_plan(root, &host, &settings(changes)).map_err(|e| e.0)
}

/// The host changes among `changes` as settings named outright: what `qpslab tune apply
/// --from FILE` reads back from a climb's final state.
pub fn settings(changes: &[Change]) -> Explicit {
    let mut x = Explicit::default();
    for c in changes {
        match c {
            Change::Sysctl { name, to, .. } => {
                x.sysctl.insert(name.clone(), to.clone());
            }
            Change::Steering { iface } if !x.steer.contains(iface) => x.steer.push(iface.clone()),
            _ => {}
        }
    }
    x
}

/// The host changes among `changes` as a tune table (a sweep variant's `tune`, a state file).
pub fn spec(changes: &[Change]) -> TuneSpec {
    let x = settings(changes);
    TuneSpec {
        sysctl: x.sysctl.into_iter().map(|(k, v)| (k, SysctlValue::Text(v))).collect(),
        steer: x.steer,
        ..TuneSpec::default()
    }
}
