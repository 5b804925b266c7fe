//! The tune journal: every write `tune apply` makes, recorded before it happens, so that
//! `tune revert` can restore the previous values even after a crash mid-way.
//!
//! Durability: the journal is rewritten whole to `FILE.tmp`, fsync'd, renamed over `FILE`, and
//! the directory fsync'd, before each write to /proc or /sys. A crash leaves either the old or
//! the new journal, never a torn one. A journal exists only while changes are applied: a full
//! revert (or the roll-back of a failed apply) removes it, which is what "active" means.

use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Bumped when the format changes incompatibly.
pub const VERSION: u32 = 1;

/// The journal file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Journal {
    pub version: u32,
    /// The root the paths are relative to (`/` on a live host).
    pub root: PathBuf,
    /// Seconds since the Unix epoch when apply started.
    pub started: u64,
    /// The command line that applied it.
    pub command: String,
    /// False until apply finished every write.
    pub complete: bool,
    pub entries: Vec<Entry>,
}

/// One journaled action, in the order applied.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Entry {
    /// A file write.
    Write {
        setting: String,
        /// Relative to the journal's root.
        path: String,
        /// The file's content before the write, as read.
        before: String,
        /// What was written.
        written: String,
        /// The content read back after the write (the kernel may normalise it); None when the
        /// write did not complete.
        after: Option<String>,
    },
    /// irqbalance stopped by `--stop-irqbalance`.
    StopIrqbalance {
        pid: u32,
        /// systemd unit it ran as, restarted by revert.
        unit: Option<String>,
        /// Its command line when it ran outside systemd, restarted by revert.
        cmdline: Vec<String>,
        /// False when the root is not the live host (nothing was stopped).
        stopped: bool,
        /// Set once revert started it again.
        #[serde(default)]
        restarted: bool,
    },
}

/// The journal could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("tune journal {}: {source} (use --journal FILE for another location)", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("tune journal {}: not a qpslab journal: {detail} (restore values by hand from it, then remove it)", path.display())]
    Format { path: PathBuf, detail: String },
}

impl Journal {
    /// A new, empty journal.
    pub fn new(root: &Path, command: String) -> Journal {
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Journal {
            version: VERSION,
            root: root.to_path_buf(),
            started,
            command,
            complete: false,
            entries: vec![],
        }
    }

    /// The journal at `path`, or None when there is none (no changes applied).
    pub fn load(path: &Path) -> Result<Option<Journal>, JournalError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(JournalError::Io { path: path.into(), source }),
        };
        let journal: Journal = serde_json::from_str(&text)
            .map_err(|e| JournalError::Format { path: path.into(), detail: e.to_string() })?;
        if journal.version != VERSION {
            return Err(JournalError::Format {
                path: path.into(),
                detail: format!("version {} (this qpslab reads {VERSION})", journal.version),
            });
        }
        Ok(Some(journal))
    }

    /// Writes the journal durably (see the module doc).
    pub fn save(&self, path: &Path) -> Result<(), JournalError> {
        let io = |source| JournalError::Io { path: path.into(), source };
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(io)?;
        let tmp = path.with_extension("json.tmp");
        let text = serde_json::to_vec_pretty(self).map_err(|e| io(e.into()))?;
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        f.write_all(&text).map_err(io)?;
        f.write_all(b"\n").map_err(io)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)?;
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)
    }

    /// Removes the journal (all changes reverted).
    pub fn remove(path: &Path) -> Result<(), JournalError> {
        match std::fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(JournalError::Io { path: path.into(), source }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_survives_a_round_trip_and_a_missing_one_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("var/lib/qpslab/journal.json");
        assert!(Journal::load(&path).unwrap().is_none());
        let mut j = Journal::new(Path::new("/"), "qpslab tune apply".into());
        j.entries.push(Entry::Write {
            setting: "net.core.somaxconn".into(),
            path: "proc/sys/net/core/somaxconn".into(),
            before: "4096\n".into(),
            written: "65535\n".into(),
            after: None,
        });
        j.save(&path).unwrap();
        let back = Journal::load(&path).unwrap().unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), serde_json::to_string(&j).unwrap());
        std::fs::write(&path, "{}").unwrap();
        assert!(matches!(Journal::load(&path), Err(JournalError::Format { .. })));
    }
}
