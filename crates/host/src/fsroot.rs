//! The one place where /proc and /sys paths meet the injectable root directory.

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
