//! `qpslab tune`: plan, apply and exactly revert the host changes the seeds made by hand (IRQ
//! affinity, RPS/RFS/XPS, sysctls, clocksource).
//!
//! [`plan`] computes the target state from the host model ([`place`] holds the CPU-placement
//! rules), [`apply`] writes it through a journal ([`journal`]) and reverts it, [`text`] renders
//! it, [`emit`] turns it into server configuration. This is the only crate that writes to
//! /proc and /sys, and only through [`apply::Files`]. It reads the host through `qpslab-host`
//! and knows nothing of the doctor's verdicts.

pub mod apply;
pub mod emit;
pub mod explicit;
pub mod journal;
pub mod place;
pub mod plan;
pub mod remedy;
pub mod text;

pub use apply::{apply, revert, status, ApplyOptions, Files, RootFiles, TuneError};
pub use explicit::{explicit_plan, Explicit};
pub use plan::{plan, Plan, PlanError, PlanOptions};

use std::path::{Path, PathBuf};

use qpslab_sys::root::Root;

/// Where a qpslab tune journal lives under the root; its presence means IRQs were pinned by hand.
pub const JOURNAL: &str = "var/lib/qpslab/journal.json";

/// The journal to use: `flag` when given, else `ROOT/var/lib/qpslab/journal.json`; inside a
/// network namespace the namespace's own (`journal-net-ID.json`), since the filesystem is shared
/// with the host and a namespace's changes must not block the host's.
pub fn journal_path(root: &Root, flag: Option<&Path>) -> PathBuf {
    if let Some(path) = flag {
        return path.to_path_buf();
    }
    let default = root.path(JOURNAL);
    match qpslab_host::host::net_namespace(root) {
        Some(ns) => {
            let id: String = ns.chars().filter(char::is_ascii_digit).collect();
            default.with_file_name(format!("journal-net-{id}.json"))
        }
        None => default,
    }
}

pub use qpslab_host::is_live;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn the_journal_lives_under_the_root_unless_named() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        assert_eq!(journal_path(&root, None), dir.path().join("var/lib/qpslab/journal.json"));
        assert_eq!(
            journal_path(&root, Some(Path::new("/tmp/j.json"))),
            PathBuf::from("/tmp/j.json")
        );
        assert!(is_live(Path::new("/")) && !is_live(dir.path()));
    }
}
