//! The host model: CPUs and their topology, NUMA nodes, clocksource, NICs with queues and IRQs,
//! the sysctls that matter at high request rates, the descriptor limit, and irqbalance.

use crate::cpuset::CpuSet;
use crate::nic::{read_nic, Nic};
use crate::parse;
use qpslab_sys::root::{ReadError, Root};
use serde::Serialize;

/// Sysctls read by `qpslab host`, as paths under /proc/sys.
pub const SYSCTLS: &[&str] = &[
    "net.core.somaxconn",
    "net.core.netdev_max_backlog",
    "net.core.netdev_budget",
    "net.core.netdev_budget_usecs",
    "net.core.rps_sock_flow_entries",
    "net.core.busy_poll",
    "net.core.busy_read",
    "net.ipv4.tcp_max_syn_backlog",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.tcp_tw_reuse",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_timestamps",
    "net.ipv4.tcp_max_tw_buckets",
    "net.ipv4.tcp_mem",
    "net.ipv4.ip_local_port_range",
    "fs.file-max",
    "fs.nr_open",
];

/// One logical CPU.
#[derive(Debug, Clone, Serialize)]
pub struct Cpu {
    pub id: usize,
    pub package: Option<usize>,
    pub core: Option<usize>,
    /// SMT siblings including this CPU.
    pub siblings: CpuSet,
    pub node: Option<usize>,
}

/// A NUMA node.
#[derive(Debug, Clone, Serialize)]
pub struct Node {
    pub id: usize,
    pub cpus: CpuSet,
}

/// A sysctl and its value (None when absent on this kernel).
#[derive(Debug, Clone, Serialize)]
pub struct Sysctl {
    pub name: String,
    pub value: Option<String>,
}

/// Everything `qpslab host` shows.
#[derive(Debug, Clone, Serialize)]
pub struct Host {
    pub online: CpuSet,
    pub cpus: Vec<Cpu>,
    pub packages: usize,
    pub cores: usize,
    pub nodes: Vec<Node>,
    pub clocksource: Option<String>,
    pub clocksources_available: Vec<String>,
    pub isolcpus: Option<CpuSet>,
    pub nohz_full: Option<CpuSet>,
    pub nics: Vec<Nic>,
    pub sysctls: Vec<Sysctl>,
    /// RLIMIT_NOFILE of this process (soft, hard).
    pub nofile: (u64, u64),
    /// PID of a running irqbalance.
    pub irqbalance_pid: Option<u32>,
    /// The reading process's network namespace when it is not the initial one (`net:[ID]`):
    /// there, /sys/class/net and net.* sysctls are the namespace's own, the rest is the host's.
    pub net_namespace: Option<String>,
}

impl Host {
    /// Reads the host under `root`. Only the online CPU list is required; everything else is
    /// optional and absent values are shown as unknown.
    pub fn read(root: &Root) -> Result<Host, ReadError> {
        let online =
            CpuSet::parse_list(&root.read("sys/devices/system/cpu/online")?).unwrap_or_default();
        let nodes: Vec<Node> = root
            .list("sys/devices/system/node")
            .iter()
            .filter_map(|n| n.strip_prefix("node")?.parse::<usize>().ok())
            .map(|id| Node {
                id,
                cpus: root
                    .read_opt(&format!("sys/devices/system/node/node{id}/cpulist"))
                    .and_then(|l| CpuSet::parse_list(&l).ok())
                    .unwrap_or_default(),
            })
            .collect();
        let cpus: Vec<Cpu> = online
            .iter()
            .map(|id| {
                let topo = |f: &str| {
                    root.read_opt(&format!("sys/devices/system/cpu/cpu{id}/topology/{f}"))
                };
                Cpu {
                    id,
                    package: topo("physical_package_id").and_then(|v| v.parse().ok()),
                    core: topo("core_id").and_then(|v| v.parse().ok()),
                    siblings: topo("thread_siblings_list")
                        .and_then(|l| CpuSet::parse_list(&l).ok())
                        .unwrap_or_else(|| std::iter::once(id).collect()),
                    node: nodes.iter().find(|n| n.cpus.contains(id)).map(|n| n.id),
                }
            })
            .collect();
        let mut packages: Vec<usize> = cpus.iter().filter_map(|c| c.package).collect();
        packages.sort_unstable();
        packages.dedup();
        let mut cores: Vec<(Option<usize>, Option<usize>)> =
            cpus.iter().map(|c| (c.package, c.core)).collect();
        cores.sort_unstable();
        cores.dedup();
        let cs = "sys/devices/system/clocksource/clocksource0";
        let cpu_set = |rel: &str| {
            root.read_opt(rel).filter(|s| !s.is_empty()).and_then(|l| CpuSet::parse_list(&l).ok())
        };
        let irqs =
            root.read_opt("proc/interrupts").map(|t| parse::interrupts(&t)).unwrap_or_default();
        let nics =
            root.list("sys/class/net").iter().map(|name| read_nic(root, name, &irqs)).collect();
        Ok(Host {
            packages: packages.len().max(1),
            cores: cores.len(),
            cpus,
            nodes,
            online,
            clocksource: root.read_opt(&format!("{cs}/current_clocksource")),
            clocksources_available: root
                .read_opt(&format!("{cs}/available_clocksource"))
                .map(|s| s.split_ascii_whitespace().map(str::to_string).collect())
                .unwrap_or_default(),
            isolcpus: cpu_set("sys/devices/system/cpu/isolated"),
            nohz_full: cpu_set("sys/devices/system/cpu/nohz_full"),
            nics,
            sysctls: SYSCTLS
                .iter()
                .map(|name| Sysctl { name: name.to_string(), value: read_sysctl(root, name) })
                .collect(),
            nofile: qpslab_sys::nofile::limits(),
            irqbalance_pid: find_process(root, "irqbalance"),
            net_namespace: net_namespace(root),
        })
    }

    /// The value of a sysctl read by [`Host::read`].
    pub fn sysctl(&self, name: &str) -> Option<&str> {
        self.sysctls.iter().find(|s| s.name == name)?.value.as_deref()
    }

    /// Interfaces other than loopback (and, unless `all`, other than down virtual ones without a
    /// device).
    pub fn nics_shown(&self, all: bool) -> impl Iterator<Item = &Nic> {
        self.nics.iter().filter(move |n| all || n.name != "lo")
    }
}

/// A sysctl by dotted name (`net.core.somaxconn`), whitespace collapsed (`32768\t60999` becomes
/// `32768 60999`).
pub fn read_sysctl(root: &Root, name: &str) -> Option<String> {
    let v = root.read_opt(&format!("proc/sys/{}", name.replace('.', "/")))?;
    Some(v.split_ascii_whitespace().collect::<Vec<_>>().join(" "))
}

/// `net:[ID]` of `proc/self/ns/net` when it is not the initial network namespace; None in the
/// initial one and in fixture trees without the link. The reference is PID 1's namespace; where
/// that link is unreadable (a sandbox whose init is not dumpable), the host-wide net.core
/// sysctls decide: the kernel registers them in the initial namespace only.
pub fn net_namespace(root: &Root) -> Option<String> {
    let link = |rel: &str| std::fs::read_link(root.path(rel)).ok();
    let own = link("proc/self/ns/net")?;
    let initial = match link("proc/1/ns/net") {
        Some(init) => init == own,
        None => root.path("proc/sys/net/core/netdev_max_backlog").exists(),
    };
    (!initial).then(|| own.to_string_lossy().into_owned())
}

/// The PID of a process whose `comm` is `name`, scanning `proc/[0-9]*/comm`.
pub fn find_process(root: &Root, name: &str) -> Option<u32> {
    root.list("proc")
        .iter()
        .filter_map(|p| p.parse::<u32>().ok())
        .find(|pid| root.read_opt(&format!("proc/{pid}/comm")).as_deref() == Some(name))
}
