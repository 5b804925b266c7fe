//! The one place where /proc and /sys paths meet the injectable root directory: every reader of
//! the kernel's file interfaces goes through [`Root`], so it can be tested on a fixture tree.

use std::path::{Path, PathBuf};

/// A file could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {}: {source} (is --root a /proc and /sys tree, such as one from scripts/capture-host?)", path.display())]
pub struct ReadError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// A root directory under which `proc/...` and `sys/...` are read (`/` on a live host).
#[derive(Debug, Clone)]
pub struct Root(PathBuf);

impl Root {
    /// Reads under `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self(dir.into())
    }

    /// The live host.
    pub fn live() -> Self {
        Self::new("/")
    }

    /// The root directory.
    pub fn dir(&self) -> &Path {
        &self.0
    }

    /// `rel` (such as `proc/stat`) joined to the root.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel.trim_start_matches('/'))
    }

    /// The contents of `rel`; an error names the full path.
    pub fn read(&self, rel: &str) -> Result<String, ReadError> {
        let path = self.path(rel);
        std::fs::read_to_string(&path).map_err(|source| ReadError { path, source })
    }

    /// The contents of `rel`, trimmed, or None when it is absent or unreadable (many sysfs files
    /// are optional, or fail with EINVAL such as `speed` of a virtual NIC).
    pub fn read_opt(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.path(rel)).ok().map(|s| s.trim().to_string())
    }

    /// Whether `rel` exists under the root.
    pub fn exists(&self, rel: &str) -> bool {
        self.path(rel).exists()
    }

    /// The target of symbolic link `rel` (such as `proc/self/ns/net` or `proc/1/fd/3`).
    pub fn read_link(&self, rel: &str) -> Option<PathBuf> {
        std::fs::read_link(self.path(rel)).ok()
    }

    /// How many entries directory `rel` has; None when it cannot be read.
    pub fn count(&self, rel: &str) -> Option<usize> {
        std::fs::read_dir(self.path(rel)).ok().map(|d| d.count())
    }

    /// The process IDs under `proc/`, ascending.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = std::fs::read_dir(self.path("proc"))
            .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
            .unwrap_or_default();
        pids.sort_unstable();
        pids
    }

    /// Entry names of directory `rel`, sorted; empty when it is absent.
    pub fn list(&self, rel: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path(rel))
            .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
            .unwrap_or_default();
        names.sort_by_key(|n| natural_key(n));
        names
    }
}

/// Sort key putting `rx-2` before `rx-10`.
fn natural_key(name: &str) -> (String, u64) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (stem, num) = name.split_at(name.len() - digits);
    (stem.to_string(), num.parse().unwrap_or(0))
}
