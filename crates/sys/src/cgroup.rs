//! A process's CPU limit from its control groups: the CFS quota (cgroup v1 `cpu.cfs_quota_us`
//! over `cpu.cfs_period_us`; v2 `cpu.max`) of its cgroup and of every ancestor, and how often
//! each held it back (`cpu.stat`: `nr_periods`, `nr_throttled`, and `throttled_time` in
//! nanoseconds on v1, `throttled_usec` in microseconds on v2). A container's CPU limit
//! (Kubernetes `resources.limits.cpu`, `docker --cpus`, systemd `CPUQuota=`) is such a quota:
//! a process held by one is not running while it waits for the next period, so its own CPU
//! time looks idle, not saturated.
//!
//! Where the hierarchies are mounted comes from `/proc/PID/mountinfo`; the cgroup of the
//! process from `/proc/PID/cgroup`. Both are read under a [`Root`], the parsers take text.

use crate::root::Root;

/// A cgroup hierarchy mounted on this host: v1 (with its controllers) or v2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted, absolute.
    pub point: String,
    /// The cgroup at the mount point (`/` unless a cgroup namespace or a bind mount of a
    /// sub-tree).
    pub root: String,
    pub v2: bool,
    /// v1: the controllers in the super options (`cpu`, `cpuacct`, ...).
    pub controllers: Vec<String>,
}

/// One line of `/proc/PID/cgroup`: `ID:CONTROLLERS:PATH` (v2: `0::PATH`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    pub v2: bool,
    pub controllers: Vec<String>,
    pub path: String,
}

/// The CPU limit of one cgroup and its throttling counters at one instant.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CpuLimit {
    /// The cgroup's directory, absolute (as a user would `cat` it).
    pub dir: String,
    /// Quota over period, in CPUs; None when unlimited.
    pub quota_cpus: Option<f64>,
    /// The quota and period as written, for the evidence (`20000/100000`).
    pub quota_text: String,
    pub periods: u64,
    pub throttled_periods: u64,
    pub throttled_ns: u64,
}

/// Share of a window's scheduling periods in which a quota held a process back from which it
/// counts as bounded by that quota (the doctor's `cpu-throttled`, the load's own verdict).
pub const THROTTLED_SHARE: f64 = 0.20;

/// How a quota held a process back over a window: the limit that throttled it most.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Throttling {
    /// The cgroup's directory.
    pub cgroup: String,
    /// The quota in CPUs, and as written (`20000/100000` microseconds).
    pub quota_cpus: f64,
    pub quota: String,
    /// Scheduling periods in the window, and those that ran out of quota.
    pub periods: u64,
    pub throttled_periods: u64,
    /// Time the cgroup's threads waited for their next period, summed over CPUs.
    pub throttled_s: f64,
}

impl Throttling {
    /// Share of the periods that ran out of quota.
    pub fn share(&self) -> f64 {
        if self.periods == 0 {
            0.0
        } else {
            self.throttled_periods as f64 / self.periods as f64
        }
    }

    /// Held back in at least [`THROTTLED_SHARE`] of the periods.
    pub fn bounds(&self) -> bool {
        self.throttled_periods > 0 && self.share() >= THROTTLED_SHARE
    }

    /// `/sys/fs/cgroup/cpu/x: quota 20000/100000 us (0.20 CPUs), throttled in 95% of 30
    /// periods (2.37 s held back)`.
    pub fn describe(&self) -> String {
        format!(
            "{}: CPU quota {} us ({:.2} CPUs), throttled in {:.0}% of {} periods ({:.2} s held back)",
            self.cgroup,
            self.quota,
            self.quota_cpus,
            self.share() * 100.0,
            self.periods,
            self.throttled_s
        )
    }
}

/// The throttling between two readings of a process's limits: of the limits read both times,
/// the one that held it back in most periods (the tightest quota when none did); None without
/// a limit.
pub fn throttling(before: &[CpuLimit], after: &[CpuLimit]) -> Option<Throttling> {
    after
        .iter()
        .filter_map(|a| {
            let b = before.iter().find(|b| b.dir == a.dir)?;
            Some(Throttling {
                cgroup: a.dir.clone(),
                quota_cpus: a.quota_cpus?,
                quota: a.quota_text.clone(),
                periods: a.periods.saturating_sub(b.periods),
                throttled_periods: a.throttled_periods.saturating_sub(b.throttled_periods),
                throttled_s: a.throttled_ns.saturating_sub(b.throttled_ns) as f64 / 1e9,
            })
        })
        .max_by(|x, y| {
            x.throttled_periods
                .cmp(&y.throttled_periods)
                .then(y.quota_cpus.total_cmp(&x.quota_cpus))
        })
}

/// Parses `/proc/PID/mountinfo`: the cgroup and cgroup2 mounts.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            // ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
            let (left, right) = line.split_once(" - ")?;
            let l: Vec<&str> = left.split_ascii_whitespace().collect();
            let r: Vec<&str> = right.split_ascii_whitespace().collect();
            let fstype = *r.first()?;
            let v2 = match fstype {
                "cgroup2" => true,
                "cgroup" => false,
                _ => return None,
            };
            let controllers =
                if v2 { Vec::new() } else { r.get(2)?.split(',').map(str::to_string).collect() };
            Some(Mount { point: unescape(l.get(4)?), root: unescape(l.get(3)?), v2, controllers })
        })
        .collect()
}

/// mountinfo escapes spaces, tabs, newlines and backslashes as octal (`\040`).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let n = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(n);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses `/proc/PID/cgroup`.
pub fn parse_membership(text: &str) -> Vec<Membership> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.splitn(3, ':');
            let id = f.next()?;
            let controllers = f.next()?;
            let path = f.next()?.to_string();
            let v2 = id == "0" && controllers.is_empty();
            let controllers =
                controllers.split(',').filter(|c| !c.is_empty()).map(str::to_string).collect();
            Some(Membership { v2, controllers, path })
        })
        .collect()
}

/// `cpu.max` (v2): `QUOTA PERIOD` or `max PERIOD`, in microseconds.
pub fn parse_cpu_max(text: &str) -> Option<(Option<u64>, u64)> {
    let mut f = text.split_ascii_whitespace();
    let quota = f.next()?;
    let period = f.next()?.parse().ok()?;
    let quota = if quota == "max" { None } else { Some(quota.parse().ok()?) };
    Some((quota, period))
}

/// `cpu.stat`: (periods, throttled periods, throttled nanoseconds), v1 or v2.
pub fn parse_cpu_stat(text: &str) -> (u64, u64, u64) {
    let (mut periods, mut throttled, mut ns) = (0, 0, 0);
    for line in text.lines() {
        let mut f = line.split_ascii_whitespace();
        let (Some(k), Some(v)) = (f.next(), f.next().and_then(|v| v.parse::<u64>().ok())) else {
            continue;
        };
        match k {
            "nr_periods" => periods = v,
            "nr_throttled" => throttled = v,
            // v1, nanoseconds
            "throttled_time" => ns = v,
            // v2, microseconds
            "throttled_usec" => ns = v.saturating_mul(1000),
            _ => {}
        }
    }
    (periods, throttled, ns)
}

/// The directory of the cgroup at `path` in hierarchy `m`, relative to the root directory
/// (mount point joined with the path below the mount's own cgroup).
fn cgroup_dir(m: &Mount, path: &str) -> Option<String> {
    let below = if m.root == "/" {
        path
    } else {
        // A cgroup outside the mounted sub-tree is not reachable through this mount.
        path.strip_prefix(m.root.as_str()).filter(|r| r.is_empty() || r.starts_with('/'))?
    };
    Some(format!("{}{}", m.point.trim_end_matches('/'), below).replace("//", "/"))
}

/// The CPU limits in force on process `pid`: its cgroup's and each ancestor's that has a
/// quota (or throttling counters), innermost first; empty when none is limited or nothing
/// could be read.
pub fn cpu_limits(root: &Root, pid: u32) -> Vec<CpuLimit> {
    let Some((dirs, v2)) = ancestors(root, pid, "cpu") else { return Vec::new() };
    dirs.iter().filter_map(|d| read_limit(root, d, v2)).collect()
}

/// The directories of process `pid`'s cgroup and of each ancestor up to the hierarchy's
/// mount, innermost first, in the v1 hierarchy with `controller` if there is one, else in
/// v2 (whether v2 is the second); None when they cannot be read.
///
/// A process whose mount namespace has no cgroup hierarchy mounted (`ip netns exec` mounts a
/// fresh /sys, without /sys/fs/cgroup's hierarchies) is read through init's: its mounts, and
/// the directories under `/proc/1/root`.
pub(crate) fn ancestors(root: &Root, pid: u32, controller: &str) -> Option<(Vec<String>, bool)> {
    let own = parse_mountinfo(&root.read_opt(&format!("proc/{pid}/mountinfo"))?);
    let (mounts, through) = if own.is_empty() {
        (parse_mountinfo(&root.read_opt("proc/1/mountinfo")?), "/proc/1/root")
    } else {
        (own, "")
    };
    let member = parse_membership(&root.read_opt(&format!("proc/{pid}/cgroup"))?);
    // v1 with the controller if there is one, else v2 (where the controller's files say
    // whether it is enabled).
    let v1 = member
        .iter()
        .find(|m| !m.v2 && m.controllers.iter().any(|c| c == controller))
        .and_then(|m| {
            let mount =
                mounts.iter().find(|x| !x.v2 && x.controllers.iter().any(|c| c == controller))?;
            Some((mount, m.path.as_str()))
        });
    let v2 = || {
        let m = member.iter().find(|m| m.v2)?;
        Some((mounts.iter().find(|x| x.v2)?, m.path.as_str()))
    };
    let (mount, path) = v1.or_else(v2)?;
    let mut dir = cgroup_dir(mount, path)?;
    let top = mount.point.trim_end_matches('/').to_string();
    let mut out = Vec::new();
    loop {
        out.push(dir.clone());
        if dir.len() <= top.len() {
            break;
        }
        match dir.rfind('/') {
            Some(i) if i >= top.len() => dir.truncate(i),
            _ => break,
        }
    }
    Some((out.into_iter().map(|d| format!("{through}{d}")).collect(), mount.v2))
}

/// One cgroup's limit, if it has a quota.
fn read_limit(root: &Root, dir: &str, v2: bool) -> Option<CpuLimit> {
    let rel = dir.trim_start_matches('/');
    let (quota, period) = if v2 {
        parse_cpu_max(&root.read_opt(&format!("{rel}/cpu.max"))?)?
    } else {
        let q: i64 = root.read_opt(&format!("{rel}/cpu.cfs_quota_us"))?.trim().parse().ok()?;
        let p: u64 = root.read_opt(&format!("{rel}/cpu.cfs_period_us"))?.trim().parse().ok()?;
        (u64::try_from(q).ok(), p)
    };
    let quota = quota?;
    let (periods, throttled_periods, throttled_ns) =
        root.read_opt(&format!("{rel}/cpu.stat")).map_or((0, 0, 0), |t| parse_cpu_stat(&t));
    Some(CpuLimit {
        dir: if dir.starts_with('/') { dir.to_string() } else { format!("/{dir}") },
        quota_cpus: (period > 0).then(|| quota as f64 / period as f64),
        quota_text: format!("{quota}/{period}"),
        periods,
        throttled_periods,
        throttled_ns,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    /// Mounts as this machine has them (Linux 6.18, a hybrid layout: v1 controllers each on
    /// its own mount, v2 at /sys/fs/cgroup/unified), and a pure v2 one (Debian 12 default).
    const HYBRID: &str = "\
30 25 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:28 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
40 30 0:36 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const V2: &str = "\
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
";

    fn write(dir: &std::path::Path, rel: &str, text: &str) {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn mounts_and_memberships_parse() {
        let m = parse_mountinfo(HYBRID);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].point, "/sys/fs/cgroup/cpu");
        assert_eq!(m[0].controllers, ["rw", "cpu"]);
        assert!(m[2].v2);
        let c = parse_membership("4:memory:/a\n1:cpu:/qpslab-test\n0::/\n");
        assert_eq!(c[1].controllers, ["cpu"]);
        assert_eq!(c[1].path, "/qpslab-test");
        assert!(c[2].v2);
        assert_eq!(unescape(r"/a\040b"), "/a b");
    }

    #[test]
    fn cpu_max_and_stat_in_both_versions() {
        assert_eq!(parse_cpu_max("20000 100000\n"), Some((Some(20000), 100000)));
        assert_eq!(parse_cpu_max("max 100000\n"), Some((None, 100000)));
        let v1 = "nr_periods 50\nnr_throttled 45\nthrottled_time 3600000000\nnr_bursts 0\n";
        assert_eq!(parse_cpu_stat(v1), (50, 45, 3_600_000_000));
        let v2 = "usage_usec 1\nuser_usec 1\nsystem_usec 0\nnr_periods 10\nnr_throttled 9\n\
                  throttled_usec 700000\n";
        assert_eq!(parse_cpu_stat(v2), (10, 9, 700_000_000));
    }

    /// v1: the process's cgroup and an ancestor each hold a quota; innermost first.
    #[test]
    fn a_v1_quota_and_its_ancestors() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(d, "proc/7/mountinfo", HYBRID);
        write(d, "proc/7/cgroup", "1:cpu:/pod/app\n0::/\n");
        write(d, "sys/fs/cgroup/cpu/pod/app/cpu.cfs_quota_us", "20000\n");
        write(d, "sys/fs/cgroup/cpu/pod/app/cpu.cfs_period_us", "100000\n");
        write(d, "sys/fs/cgroup/cpu/pod/app/cpu.stat", "nr_periods 10\nnr_throttled 9\n");
        write(d, "sys/fs/cgroup/cpu/pod/cpu.cfs_quota_us", "-1\n");
        write(d, "sys/fs/cgroup/cpu/pod/cpu.cfs_period_us", "100000\n");
        write(d, "sys/fs/cgroup/cpu/cpu.cfs_quota_us", "150000\n");
        write(d, "sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
        let l = cpu_limits(&Root::new(d), 7);
        assert_eq!(l.len(), 2, "{l:?}");
        assert_eq!(l[0].dir, "/sys/fs/cgroup/cpu/pod/app");
        assert_eq!(l[0].quota_cpus, Some(0.2));
        assert_eq!(l[0].quota_text, "20000/100000");
        assert_eq!((l[0].periods, l[0].throttled_periods), (10, 9));
        assert_eq!(l[1].dir, "/sys/fs/cgroup/cpu");
        assert_eq!(l[1].quota_cpus, Some(1.5));
    }

    /// Under `ip netns exec` (a fresh /sys, no cgroup mounts of its own) the quota is read
    /// through init's mounts and root.
    #[test]
    fn a_process_without_cgroup_mounts_is_read_through_inits() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(d, "proc/7/mountinfo", "25 1 0:22 / /sys rw - sysfs sysfs rw\n");
        write(d, "proc/7/cgroup", "1:cpu:/agent\n0::/\n");
        write(d, "proc/1/mountinfo", HYBRID);
        write(d, "proc/1/root/sys/fs/cgroup/cpu/agent/cpu.cfs_quota_us", "15000\n");
        write(d, "proc/1/root/sys/fs/cgroup/cpu/agent/cpu.cfs_period_us", "100000\n");
        write(d, "proc/1/root/sys/fs/cgroup/cpu/agent/cpu.stat", "nr_periods 8\nnr_throttled 7\n");
        let l = cpu_limits(&Root::new(d), 7);
        assert_eq!(l.len(), 1, "{l:?}");
        assert_eq!(l[0].dir, "/proc/1/root/sys/fs/cgroup/cpu/agent");
        assert_eq!((l[0].quota_cpus, l[0].throttled_periods), (Some(0.15), 7));
    }

    #[test]
    fn throttling_takes_the_limit_that_held_back_most() {
        let lim = |dir: &str, q: f64, p: u64, t: u64| CpuLimit {
            dir: dir.into(),
            quota_cpus: Some(q),
            quota_text: String::new(),
            periods: p,
            throttled_periods: t,
            throttled_ns: t * 1_000_000,
        };
        let before = [lim("/a/b", 0.2, 100, 10), lim("/a", 1.0, 100, 0)];
        let after = [lim("/a/b", 0.2, 130, 38), lim("/a", 1.0, 130, 0)];
        let t = throttling(&before, &after).unwrap();
        assert_eq!(t.cgroup, "/a/b");
        assert_eq!((t.periods, t.throttled_periods), (30, 28));
        assert!(t.bounds());
        assert!((t.throttled_s - 0.028).abs() < 1e-9);
        let idle = [lim("/a/b", 0.2, 130, 10), lim("/a", 1.0, 130, 0)];
        let t = throttling(&before, &idle).unwrap();
        assert_eq!(t.cgroup, "/a/b", "the tightest when none throttled");
        assert!(!t.bounds());
        assert_eq!(throttling(&[], &after), None, "not read before: no window");
    }

    #[test]
    fn a_v2_cpu_max() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(d, "proc/9/mountinfo", V2);
        write(d, "proc/9/cgroup", "0::/system.slice/web.service\n");
        write(d, "sys/fs/cgroup/system.slice/web.service/cpu.max", "50000 100000\n");
        write(d, "sys/fs/cgroup/system.slice/web.service/cpu.stat", "nr_periods 4\n");
        write(d, "sys/fs/cgroup/system.slice/cpu.max", "max 100000\n");
        let l = cpu_limits(&Root::new(d), 9);
        assert_eq!(l.len(), 1, "{l:?}");
        assert_eq!(l[0].dir, "/sys/fs/cgroup/system.slice/web.service");
        assert_eq!(l[0].quota_cpus, Some(0.5));
        assert!(cpu_limits(&Root::new(d), 10).is_empty(), "no such process");
    }
}
