//! `--apply-host`: a state's host settings in force for each of its runs and reverted after
//! it, through tune's journal (each previous value written down before its write), so a
//! signal, an error or a kill -9 leaves nothing `qpslab tune revert` cannot undo. Settings are
//! planned against the host as it is before each run: between runs it is back as it was.

use std::path::{Path, PathBuf};

use qpslab_host::{Host, Root};
use qpslab_tune::{self as tune, explicit::Explicit, Plan};

use super::remedy::Change;
use crate::hostset::{self, Applied};

/// The host the climb runs on (its network namespace, inside one) and its journal.
#[derive(Debug)]
pub struct HostSide {
    root: Root,
    pub journal: PathBuf,
}

impl HostSide {
    /// Checks that the climb may change this host: root, and no tune journal active.
    pub fn new(journal: Option<&Path>) -> Result<HostSide, String> {
        let root = Root::live();
        let journal = tune::journal_path(&root, journal);
        let side = HostSide { root, journal };
        hostset::check_plan(&side.plan(&[])?, &side.journal)
            .map_err(|e| format!("--apply-host: {e}"))?;
        Ok(side)
    }

    /// A sysctl's value on this host now (whitespace as one space).
    pub fn sysctl(&self, name: &str) -> Option<String> {
        qpslab_host::host::read_sysctl(&self.root, name)
    }

    /// The plan that puts `changes` (the host changes among them) in force on this host as it
    /// is now; a setting written twice keeps its last value.
    pub fn plan(&self, changes: &[Change]) -> Result<Plan, String> {
        let host = Host::read(&self.root).map_err(|e| format!("cannot read the host: {e}"))?;
        tune::explicit_plan(&self.root, &host, &settings(changes)).map_err(|e| e.0)
    }

    /// Puts `changes` in force (None: no host change among them); reverted by
    /// [`Applied::revert`] or on drop.
    pub fn apply(&self, changes: &[Change]) -> Result<Option<Applied>, String> {
        if !changes.iter().any(Change::is_host) {
            return Ok(None);
        }
        let plan = self.plan(changes)?;
        Applied::of_plan(&self.root, &self.journal, &plan).map(Some)
    }
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
