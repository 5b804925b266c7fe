//! A process's memory limit from its control groups: the limit of its cgroup and of every
//! ancestor that has one (v1 `memory.limit_in_bytes`; v2 `memory.max`, and `memory.high`
//! where it throttles first), the memory charged there, and how often the limit was hit (v1
//! `memory.failcnt`: charges that failed and made the cgroup reclaim; v2 `memory.events`:
//! `max` and `high`) and what it killed (`oom_kill`). A container's memory limit (`docker
//! --memory`, Kubernetes `resources.limits.memory`, systemd `MemoryMax=`) is such a limit:
//! page cache and anonymous memory past it are reclaimed from the container alone, whatever
//! the host has free.

use crate::cgroup::ancestors;
use crate::root::Root;

/// One cgroup's memory limit and its counters at one instant.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemoryLimit {
    /// The cgroup's directory, absolute (as a user would `cat` it).
    pub dir: String,
    /// The limit, in bytes (v2: `memory.high` when it is the lower, else `memory.max`).
    pub limit: u64,
    /// Bytes charged to the cgroup now (page cache included).
    pub usage: u64,
    /// Times the limit was hit so far (v1 failcnt; v2 `max` + `high` events).
    pub hits: u64,
    /// Processes the kernel's OOM killer ended in it so far.
    pub oom_kills: u64,
    /// v2: microseconds in which some of its tasks waited for memory (memory.pressure `some
    /// total=`); None on v1, which keeps no pressure of its own.
    #[serde(default)]
    pub pressure_us: Option<u64>,
}

/// A memory limit over a window ([`over_window`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LimitUse {
    pub cgroup: String,
    pub limit: u64,
    /// Bytes charged at the window's end.
    pub usage: u64,
    /// Times the limit was hit in the window, and OOM kills.
    pub hits: u64,
    pub oom_kills: u64,
    /// v2: seconds in which some of its tasks waited for memory in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pressure_s: Option<f64>,
}

/// Of the limits read at both ends of a window, the one hit most in it (the tightest when
/// none was hit); None without a limit.
pub fn over_window(before: &[MemoryLimit], after: &[MemoryLimit]) -> Option<LimitUse> {
    after
        .iter()
        .filter_map(|b| {
            let a = before.iter().find(|a| a.dir == b.dir)?;
            Some(LimitUse {
                cgroup: b.dir.clone(),
                limit: b.limit,
                usage: b.usage,
                hits: b.hits.saturating_sub(a.hits),
                oom_kills: b.oom_kills.saturating_sub(a.oom_kills),
                pressure_s: a
                    .pressure_us
                    .zip(b.pressure_us)
                    .map(|(x, y)| y.saturating_sub(x) as f64 / 1e6),
            })
        })
        .max_by(|x, y| {
            (x.hits, std::cmp::Reverse(x.limit)).cmp(&(y.hits, std::cmp::Reverse(y.limit)))
        })
}

/// No limit: v1 writes the largest page-aligned value, v2 `max`.
const UNLIMITED_V1: u64 = 1 << 62;

/// The memory limits in force on process `pid`: its cgroup's and each ancestor's that has
/// one, innermost first; empty when none is limited or nothing could be read.
pub fn memory_limits(root: &Root, pid: u32) -> Vec<MemoryLimit> {
    let Some((dirs, v2)) = ancestors(root, pid, "memory") else { return Vec::new() };
    dirs.iter().filter_map(|d| read_limit(root, d, v2)).collect()
}

fn read_limit(root: &Root, dir: &str, v2: bool) -> Option<MemoryLimit> {
    let rel = dir.trim_start_matches('/');
    let num =
        |f: &str| -> Option<u64> { root.read_opt(&format!("{rel}/{f}"))?.trim().parse().ok() };
    let pressure_us = v2
        .then(|| root.read_opt(&format!("{rel}/memory.pressure")))
        .flatten()
        .and_then(|t| some_total(&t));
    let (limit, usage, hits, oom_kills) = if v2 {
        // `max` (no limit) does not parse.
        let limit = [num("memory.high"), num("memory.max")].into_iter().flatten().min()?;
        let events = root.read_opt(&format!("{rel}/memory.events")).unwrap_or_default();
        let ev = |k: &str| keyed(&events, k).unwrap_or(0);
        (limit, num("memory.current")?, ev("max") + ev("high"), ev("oom_kill"))
    } else {
        let limit = num("memory.limit_in_bytes").filter(|l| *l < UNLIMITED_V1)?;
        let oom = root.read_opt(&format!("{rel}/memory.oom_control")).unwrap_or_default();
        (
            limit,
            num("memory.usage_in_bytes")?,
            num("memory.failcnt").unwrap_or(0),
            keyed(&oom, "oom_kill").unwrap_or(0),
        )
    };
    Some(MemoryLimit {
        dir: if dir.starts_with('/') { dir.to_string() } else { format!("/{dir}") },
        limit,
        usage,
        hits,
        oom_kills,
        pressure_us,
    })
}

/// The `total=` of a pressure file's `some` line (`some avg10=0.00 avg60=0.00 avg300=0.00
/// total=1234`).
fn some_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace().find_map(|w| w.strip_prefix("total=")?.parse().ok())
}

/// The value of `key` in a file of `key value` lines (memory.events, memory.oom_control).
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    fn write(dir: &std::path::Path, rel: &str, text: &str) {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// A v1 memory cgroup with a 64 MiB limit under an unlimited parent (this machine's
    /// layout), and a v2 one whose memory.high is below its memory.max.
    #[test]
    fn limits_are_read_in_both_versions_innermost_first() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "proc/7/mountinfo",
            "31 30 0:27 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n",
        );
        write(d.path(), "proc/7/cgroup", "4:memory:/box\n0::/\n");
        let m = "sys/fs/cgroup/memory";
        write(d.path(), &format!("{m}/memory.limit_in_bytes"), "9223372036854771712\n");
        write(d.path(), &format!("{m}/memory.usage_in_bytes"), "900000000\n");
        write(d.path(), &format!("{m}/box/memory.limit_in_bytes"), "67108864\n");
        write(d.path(), &format!("{m}/box/memory.usage_in_bytes"), "67000000\n");
        write(d.path(), &format!("{m}/box/memory.failcnt"), "1234\n");
        write(
            d.path(),
            &format!("{m}/box/memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        );
        let root = Root::new(d.path());
        let v1 = memory_limits(&root, 7);
        assert_eq!(
            v1,
            vec![MemoryLimit {
                dir: "/sys/fs/cgroup/memory/box".into(),
                limit: 67_108_864,
                usage: 67_000_000,
                hits: 1234,
                oom_kills: 2,
                pressure_us: None
            }]
        );
        write(
            d.path(),
            "proc/8/mountinfo",
            "35 24 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        );
        write(d.path(), "proc/8/cgroup", "0::/pod\n");
        write(d.path(), "sys/fs/cgroup/pod/memory.max", "134217728\n");
        write(d.path(), "sys/fs/cgroup/pod/memory.high", "100000000\n");
        write(d.path(), "sys/fs/cgroup/pod/memory.current", "99000000\n");
        write(
            d.path(),
            "sys/fs/cgroup/pod/memory.events",
            "low 0\nhigh 40\nmax 3\noom 1\noom_kill 1\n",
        );
        write(d.path(), "sys/fs/cgroup/pod/memory.pressure", "some avg10=1.00 avg60=0.50 avg300=0.10 total=250000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1000\n");
        write(d.path(), "sys/fs/cgroup/memory.max", "max\n");
        let v2 = memory_limits(&root, 8);
        assert_eq!(v2.len(), 1, "{v2:?}");
        assert_eq!(
            (v2[0].limit, v2[0].usage, v2[0].hits, v2[0].oom_kills),
            (100_000_000, 99_000_000, 43, 1)
        );
        assert!(memory_limits(&root, 9).is_empty());
    }
}
