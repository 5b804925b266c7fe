//! The tune plan: the host model in, a list of file writes out, each with the value it replaces,
//! a one-sentence reason and the source of the rule. Planning reads nothing itself and writes
//! nothing; [`super::apply`] owns writes.

use super::place::Topology;
use super::remedy::{floor, NR_OPEN, PORT_RANGE};
use qpslab_host::cpuset::CpuSet;
use qpslab_host::host::Host;
use qpslab_host::nic::Nic;
use qpslab_host::sample::Role;
use serde::Serialize;

// Sources, named briefly by title in the output; docs/tune.md lists them in full: the public
// write-ups "1M QPS with nginx and Ubuntu 12.04 on EC2" (the RPS bitmask table), a 10 Gbps nginx
// tuning write-up (the IRQ/worker split by package and SMT thread) and "Hitting Network Limits"
// (one ksoftirqd at 95%, fixed by RPS/RFS); the kernel's documents under Documentation/:
// networking/scaling.rst, networking/ip-sysctl.rst, admin-guide/sysctl/net.rst,
// admin-guide/sysctl/fs.rst.
const EC2_1M_QPS: &str = "1M QPS on EC2";
const NGINX_10GBPS: &str = "10 Gbps nginx tuning";
const NETWORK_LIMITS: &str = "Hitting Network Limits";
const SCALING: &str = "kernel scaling.rst";
const IP_SYSCTL: &str = "kernel ip-sysctl.rst";
const NET_SYSCTL: &str = "kernel sysctl/net.rst";
const FS_SYSCTL: &str = "kernel sysctl/fs.rst";

/// RFS socket flow table size (scaling.rst's suggestion for a moderately loaded server).
pub const RPS_SOCK_FLOW_ENTRIES: u64 = 32768;

/// What the user asked of the plan.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    /// Interfaces to tune; empty: every NIC backed by a device (every non-loopback interface
    /// when there is none, as in a network namespace with veths).
    pub ifaces: Vec<String>,
    /// CPUs for interrupt work (IRQs and RPS) instead of the computed ones.
    pub irq_cpus: Option<CpuSet>,
    /// Number of worker CPUs; the rest goes to interrupt work.
    pub workers: Option<usize>,
    /// Server (qpslab serve / nginx) or client (load generator: also widens the port range).
    pub role: Role,
}

/// A plan option that cannot work on this host.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

/// What a change touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    IrqAffinity,
    Rps,
    RpsFlowCnt,
    Xps,
    Sysctl,
    Clocksource,
}

/// One planned write.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    pub kind: Kind,
    /// What it is, for people: `eth0 rx-1 IRQ 101 affinity`, `net.core.somaxconn`.
    pub setting: String,
    /// The file under the root, e.g. `proc/irq/101/smp_affinity`.
    pub path: String,
    /// Current and planned value as people read them (CPU lists for masks).
    pub current: String,
    pub planned: String,
    /// The exact text written to `path`.
    pub write: String,
    pub reason: String,
    pub source: String,
}

/// A setting deliberately left as it is, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Kept {
    pub setting: String,
    pub reason: String,
}

/// The computed target state.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub role: Role,
    /// `net:[ID]` when planning inside a network namespace (only its own settings are planned).
    pub net_namespace: Option<String>,
    pub interfaces: Vec<String>,
    /// CPUs that take NIC IRQs.
    pub irq_cpus: CpuSet,
    /// CPUs for the server's workers (or the generator's threads with role client).
    pub worker_cpus: CpuSet,
    /// Workers share their CPUs with interrupt work (no CPU was left for them alone).
    pub workers_shared: bool,
    pub changes: Vec<Change>,
    pub kept: Vec<Kept>,
    /// `qpslab serve ...` (or `qpslab load ...` with role client) matching the plan.
    pub command: String,
    /// nginx configuration snippet matching the plan.
    pub nginx: String,
    pub irqbalance_pid: Option<u32>,
}

impl Plan {
    /// Whether any change touches IRQ affinity (which irqbalance would undo).
    pub fn moves_irqs(&self) -> bool {
        self.changes.iter().any(|c| c.kind == Kind::IrqAffinity)
    }
}

/// One rx queue being planned.
struct Queue<'a> {
    nic: &'a Nic,
    index: usize,
    irq: Option<u32>,
    irq_cpu: Option<usize>,
}

/// Computes the plan for `host`.
pub fn plan(host: &Host, opts: &PlanOptions) -> Result<Plan, PlanError> {
    let topo = Topology::new(host);
    let online = host.online.clone();
    let in_netns = host.net_namespace.is_some();
    let nics = select_nics(host, &opts.ifaces)?;
    let nic_nodes: Vec<usize> = nics.iter().filter_map(|n| n.numa_node).collect();
    let (pool, explicit_workers) = split_cpus(&topo, &online, opts, &nic_nodes)?;
    let mut kept = Vec::new();
    let mut changes = Vec::new();

    let queues = assign_irq_cpus(&topo, &pool, &nics, in_netns, &mut kept);
    let irq_cpus: CpuSet = queues.iter().filter_map(|q| q.irq_cpu).collect();
    for q in &queues {
        irq_changes(host, &topo, q, &mut changes);
    }
    // RPS/RFS where a NIC has fewer queues than cores; both sides of the split get it.
    let rps_pool = if explicit_workers { &pool } else { &online };
    let groups = plan_rps(host, &topo, &queues, rps_pool, &irq_cpus, &mut changes, &mut kept);
    xps_changes(host, &groups, &mut changes);
    let (worker_cpus, workers_shared) =
        worker_cpus(&topo, &online, &pool, &irq_cpus, explicit_workers);

    plan_sysctls(host, opts.role, &mut changes, &mut kept);
    plan_clocksource(host, &mut changes);
    kept.extend(never_changed(host));
    if in_netns {
        kept.push(Kept {
            setting: "host-wide settings".into(),
            reason: "inside a network namespace only its own settings are planned (rps/xps of \
                     its interfaces, somaxconn, tcp_max_syn_backlog, ip_local_port_range); IRQs, \
                     netdev_*, rps_sock_flow_entries, fs.* and the clocksource belong to the host"
                .into(),
        });
    }

    let nofile = nofile_target(host);
    Ok(Plan {
        role: opts.role,
        net_namespace: host.net_namespace.clone(),
        interfaces: nics.iter().map(|n| n.name.clone()).collect(),
        command: command_line(opts.role, &worker_cpus),
        nginx: super::emit::nginx_snippet(&worker_cpus, nofile, backlog_target(host)),
        irq_cpus,
        worker_cpus,
        workers_shared,
        changes,
        kept,
        irqbalance_pid: host.irqbalance_pid,
    })
}

/// IRQ CPUs: one per rx queue, distinct while the pool lasts (none inside a namespace: /proc/irq
/// belongs to the host).
fn assign_irq_cpus<'a>(
    topo: &Topology,
    pool: &CpuSet,
    nics: &[&'a Nic],
    in_netns: bool,
    kept: &mut Vec<Kept>,
) -> Vec<Queue<'a>> {
    let mut queues: Vec<Queue> = Vec::new();
    let mut used = CpuSet::new();
    let mut overflow = 0usize;
    for nic in nics {
        let order = topo.irq_order(pool, nic.numa_node);
        for q in &nic.rx {
            let irq = q.irq.as_ref().map(|i| i.number).filter(|_| !in_netns);
            let irq_cpu = irq.and_then(|_| {
                let free = order.iter().copied().find(|c| !used.contains(*c));
                let cpu = free.or_else(|| {
                    overflow += 1;
                    order.get((overflow - 1) % order.len().max(1)).copied()
                })?;
                used.insert(cpu);
                Some(cpu)
            });
            queues.push(Queue { nic, index: q.index, irq, irq_cpu });
        }
    }
    if overflow > 0 {
        kept.push(Kept {
            setting: "IRQ CPUs".into(),
            reason: format!(
                "{} queues share {} interrupt CPUs: there are more queues than CPUs for interrupt \
                 work, so {overflow} IRQs double up (fewer channels with `ethtool -L` would avoid it)",
                queues.iter().filter(|q| q.irq.is_some()).count(),
                pool.len()
            ),
        });
    }
    if in_netns && nics.iter().any(|n| n.physical) {
        kept.push(Kept {
            setting: "IRQ affinity".into(),
            reason: "not planned inside a network namespace: /proc/irq belongs to the host".into(),
        });
    }
    queues
}

/// RPS and RFS for the queues of NICs with fewer queues than cores; returns each queue's group
/// (its IRQ CPU and RPS CPUs), which XPS follows.
fn plan_rps<'q, 'a>(
    host: &Host,
    topo: &Topology,
    queues: &'q [Queue<'a>],
    pool: &CpuSet,
    irq_cpus: &CpuSet,
    changes: &mut Vec<Change>,
    kept: &mut Vec<Kept>,
) -> Vec<(&'q Queue<'a>, CpuSet)> {
    let cores = topo.cores();
    let rps_queues: Vec<&Queue> = queues.iter().filter(|q| q.nic.rx.len() < cores).collect();
    let rps =
        topo.rps_sets(&rps_queues.iter().map(|q| q.irq_cpu).collect::<Vec<_>>(), pool, irq_cpus);
    let mut groups = Vec::new();
    for q in queues {
        let set = rps_queues.iter().position(|r| std::ptr::eq(*r, q)).map(|i| rps[i].clone());
        rps_changes(host, q, set.as_ref(), cores, changes);
        let group = set.unwrap_or_default().union(&q.irq_cpu.into_iter().collect());
        groups.push((q, group));
    }
    if rps.iter().any(|s| !s.is_empty()) {
        sysctl_change(
            host,
            "net.core.rps_sock_flow_entries",
            RPS_SOCK_FLOW_ENTRIES,
            "RFS needs a global socket flow table; 32768 entries suit a moderately loaded server",
            SCALING,
            changes,
            kept,
        );
    }
    groups
}

/// Workers: the CPUs not given to interrupt work, whole cores; whether they had to share the
/// interrupt CPUs (nothing else was left).
fn worker_cpus(
    topo: &Topology,
    online: &CpuSet,
    pool: &CpuSet,
    irq_cpus: &CpuSet,
    explicit_workers: bool,
) -> (CpuSet, bool) {
    let (cpus, shared) = if explicit_workers {
        (online.difference(pool), false)
    } else {
        let irq_cores = irq_cpus.iter().fold(CpuSet::new(), |acc, c| acc.union(&topo.siblings(c)));
        let rest = online.difference(&irq_cores);
        if rest.is_empty() {
            (online.clone(), true)
        } else {
            (rest, false)
        }
    };
    if cpus.is_empty() {
        (online.clone(), shared)
    } else {
        (cpus, shared)
    }
}

/// The interfaces to tune: the named ones, or every NIC with a device, or (none, e.g. in a
/// namespace) every non-loopback interface.
fn select_nics<'a>(host: &'a Host, names: &[String]) -> Result<Vec<&'a Nic>, PlanError> {
    if names.is_empty() {
        let physical: Vec<&Nic> = host.nics.iter().filter(|n| n.physical).collect();
        if !physical.is_empty() {
            return Ok(physical);
        }
        return Ok(host.nics.iter().filter(|n| n.name != "lo").collect());
    }
    names
        .iter()
        .map(|name| {
            if name == "lo" {
                // Loopback has no queue or interrupt: a packet sent on it is received in the
                // sender's own context. RPS there only hands every packet to another CPU.
                return Err(PlanError(
                    "--iface lo: loopback has no receive queue or IRQ (its packets are received on the sending CPU), so RPS, XPS and IRQ affinity do not apply; name a NIC that carries the traffic".into(),
                ));
            }
            host.nics.iter().find(|n| &n.name == name).ok_or_else(|| {
                let have: Vec<&str> = host.nics.iter().map(|n| n.name.as_str()).collect();
                PlanError(format!(
                    "--iface {name}: no such interface (this host has: {})",
                    have.join(", ")
                ))
            })
        })
        .collect()
}

/// The interrupt-work pool and whether the user split the CPUs (then workers get the rest).
fn split_cpus(
    topo: &Topology,
    online: &CpuSet,
    opts: &PlanOptions,
    nic_nodes: &[usize],
) -> Result<(CpuSet, bool), PlanError> {
    if let Some(irq) = &opts.irq_cpus {
        if irq.is_empty() {
            return Err(PlanError("--irq-cpus: the list is empty; give CPUs such as 0-3".into()));
        }
        let offline = irq.difference(online);
        if !offline.is_empty() {
            return Err(PlanError(format!(
                "--irq-cpus: CPU {offline} is not online (online: {online})"
            )));
        }
        let rest = online.difference(irq);
        return match opts.workers {
            Some(n) if n == 0 || n > rest.len() => Err(PlanError(format!(
                "--workers {n}: --irq-cpus {irq} leaves {} CPUs for workers; give 1 to {}",
                rest.len(),
                rest.len()
            ))),
            Some(n) => {
                // Workers get n of the rest; the others stay idle for whatever else runs.
                let workers = topo.pick_workers(&rest, n, nic_nodes);
                Ok((online.difference(&workers), true))
            }
            None => Ok((irq.clone(), true)),
        };
    }
    match opts.workers {
        Some(n) if n == 0 || n >= online.len() => Err(PlanError(format!(
            "--workers {n}: this host has {} online CPUs and interrupt work needs at least one; \
             give 1 to {}",
            online.len(),
            online.len().saturating_sub(1)
        ))),
        Some(n) => {
            let workers = topo.pick_workers(online, n, nic_nodes);
            Ok((online.difference(&workers), true))
        }
        None => Ok((online.clone(), false)),
    }
}

/// The text a mask file gets, as wide as the kernel prints masks for the online CPUs
/// (`00000000,00010000` on a 64-CPU host), so the file reads back the same way. (The kernel
/// pads to nr_cpu_ids, the possible CPUs; a narrower mask is accepted all the same.)
pub(crate) fn mask_text(set: &CpuSet, host: &Host) -> String {
    let bits = host.online.iter().max().map_or(1, |m| m + 1);
    format!("{}\n", set.to_mask(bits))
}

fn irq_changes(host: &Host, topo: &Topology, q: &Queue, out: &mut Vec<Change>) {
    let (Some(irq), Some(cpu)) = (q.irq, q.irq_cpu) else { return };
    let want: CpuSet = std::iter::once(cpu).collect();
    let node_note = match q.nic.numa_node {
        Some(n) if topo.node(cpu) == n => format!("on the NIC's node {n}"),
        Some(_) => format!("on node {} to spread the NIC's queues over nodes", topo.node(cpu)),
        None => "the NIC's node is unknown".to_string(),
    };
    // The rx vector, and the tx vector of the same queue when it has its own.
    let rx = q.nic.rx.iter().find(|r| r.index == q.index).and_then(|r| r.irq.as_ref());
    let tx = q.nic.tx.iter().find(|t| t.index == q.index).and_then(|t| t.irq.as_ref());
    for (dir, vector) in [("rx", rx), ("tx", tx)] {
        let Some(vector) = vector else { continue };
        if dir == "tx" && vector.number == irq {
            continue;
        }
        if vector.affinity.as_ref() == Some(&want) {
            continue;
        }
        let path = format!("proc/irq/{}/smp_affinity", vector.number);
        out.push(Change {
            kind: Kind::IrqAffinity,
            setting: format!("{} {dir}-{} IRQ {} affinity", q.nic.name, q.index, vector.number),
            current: vector.affinity.as_ref().map_or("?".into(), CpuSet::to_list),
            planned: want.to_list(),
            write: mask_text(&want, host),
            reason: if dir == "rx" {
                format!(
                    "one CPU per queue, no CPU shared by two queues, {node_note}, physical cores \
                     before SMT siblings"
                )
            } else {
                format!("the queue's transmit vector goes where its receive IRQ goes (CPU {cpu})")
            },
            path,
            source: format!("{EC2_1M_QPS}; {NGINX_10GBPS}"),
        });
    }
}

fn rps_changes(host: &Host, q: &Queue, set: Option<&CpuSet>, cores: usize, out: &mut Vec<Change>) {
    let Some(rx) = q.nic.rx.iter().find(|r| r.index == q.index) else { return };
    let Some(current) = rx.rps_cpus.as_ref() else { return };
    let dir = format!("sys/class/net/{}/queues/rx-{}", q.nic.name, q.index);
    let (want, reason, source) = match set {
        Some(set) if !set.is_empty() => (
            set.clone(),
            match q.irq_cpu {
                Some(cpu) => format!(
                    "{} for {cores} cores: spread protocol work over the node of IRQ CPU {cpu}, \
                     leaving out every IRQ CPU, no CPU shared with another queue",
                    queues(q.nic.rx.len())
                ),
                None => format!(
                    "a virtual interface without an IRQ: spread its receive work over {} CPUs \
                     not taking NIC interrupts",
                    set.len()
                ),
            },
            format!("{EC2_1M_QPS}; {NETWORK_LIMITS}; {SCALING}"),
        ),
        Some(_) => (
            CpuSet::new(),
            "no CPU left for RPS beside the IRQ CPUs in this queue's share of interrupt CPUs"
                .to_string(),
            SCALING.to_string(),
        ),
        None => (
            CpuSet::new(),
            format!(
                "{} for {cores} cores: RSS already spreads the work, RPS is redundant",
                queues(q.nic.rx.len())
            ),
            SCALING.to_string(),
        ),
    };
    if &want != current {
        out.push(Change {
            kind: Kind::Rps,
            setting: format!("{} rx-{} rps_cpus", q.nic.name, q.index),
            path: format!("{dir}/rps_cpus"),
            current: list_or_off(current),
            planned: list_or_off(&want),
            write: mask_text(&want, host),
            reason,
            source,
        });
    }
    let flows = RPS_SOCK_FLOW_ENTRIES / q.nic.rx.len().max(1) as u64;
    if !want.is_empty() && rx.rps_flow_cnt.is_some_and(|c| c < flows) {
        out.push(Change {
            kind: Kind::RpsFlowCnt,
            setting: format!("{} rx-{} rps_flow_cnt", q.nic.name, q.index),
            path: format!("{dir}/rps_flow_cnt"),
            current: rx.rps_flow_cnt.unwrap_or(0).to_string(),
            planned: flows.to_string(),
            write: format!("{flows}\n"),
            reason: format!(
                "RFS steers each flow to the CPU of the thread reading it: {RPS_SOCK_FLOW_ENTRIES} \
                 flow entries / {}",
                queues(q.nic.rx.len())
            ),
            source: format!("{NETWORK_LIMITS}; {SCALING}"),
        });
    }
}

fn queues(n: usize) -> String {
    if n == 1 {
        "1 queue".into()
    } else {
        format!("{n} queues")
    }
}

/// A CPU set as people read it: a list, or "off" when empty (RPS/XPS disabled).
pub(crate) fn list_or_off(set: &CpuSet) -> String {
    if set.is_empty() {
        "off".into()
    } else {
        set.to_list()
    }
}

/// XPS: tx queue i sends from the CPUs of rx queue i's group (its IRQ CPU and RPS CPUs).
fn xps_changes(host: &Host, groups: &[(&Queue, CpuSet)], out: &mut Vec<Change>) {
    for (q, group) in groups {
        if group.is_empty() || q.irq.is_none() {
            continue;
        }
        let Some(tx) = q.nic.tx.iter().find(|t| t.index == q.index) else { continue };
        let Some(current) = tx.xps_cpus.as_ref() else { continue };
        if current == group {
            continue;
        }
        out.push(Change {
            kind: Kind::Xps,
            setting: format!("{} tx-{} xps_cpus", q.nic.name, q.index),
            path: format!("sys/class/net/{}/queues/tx-{}/xps_cpus", q.nic.name, q.index),
            current: list_or_off(current),
            planned: group.to_list(),
            write: mask_text(group, host),
            reason: format!(
                "CPUs of rx-{}'s group send on tx-{} so a flow's transmit completions stay on the \
                 CPUs that received it",
                q.index, q.index
            ),
            source: SCALING.into(),
        });
    }
}

/// Whether a sysctl is the network namespace's own (the rest are host-wide).
fn per_netns(name: &str) -> bool {
    matches!(
        name,
        "net.core.somaxconn"
            | "net.ipv4.tcp_max_syn_backlog"
            | "net.ipv4.ip_local_port_range"
            | "net.ipv4.tcp_tw_reuse"
    )
}

/// Plans `name` raised to `target` (never lowered); skipped when absent or host-wide inside a
/// namespace.
fn sysctl_change(
    host: &Host,
    name: &str,
    target: u64,
    reason: &str,
    source: &str,
    out: &mut Vec<Change>,
    kept: &mut Vec<Kept>,
) {
    if host.net_namespace.is_some() && !per_netns(name) {
        return;
    }
    let Some(current) = host.sysctl(name) else { return };
    match current.parse::<u64>() {
        Ok(v) if v >= target => {}
        Ok(_) => out.push(Change {
            kind: Kind::Sysctl,
            setting: name.into(),
            path: format!("proc/sys/{}", name.replace('.', "/")),
            current: current.into(),
            planned: target.to_string(),
            write: format!("{target}\n"),
            reason: reason.into(),
            source: source.into(),
        }),
        Err(_) => kept.push(Kept {
            setting: name.into(),
            reason: format!("current value {current:?} is not a number; left as is"),
        }),
    }
}

/// The accept backlog the plan leaves: somaxconn after the plan.
fn backlog_target(host: &Host) -> u64 {
    host.sysctl("net.core.somaxconn")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
        .max(floor("net.core.somaxconn"))
}

/// The per-process descriptor ceiling after the plan.
fn nofile_target(host: &Host) -> u64 {
    host.sysctl("fs.nr_open").and_then(|v| v.parse().ok()).unwrap_or(0).max(NR_OPEN)
}

fn plan_sysctls(host: &Host, role: Role, out: &mut Vec<Change>, kept: &mut Vec<Kept>) {
    let list: [(&str, u64, &str, String); 6] = [
        (
            "net.core.somaxconn",
            floor("net.core.somaxconn"),
            "caps every listen backlog: a burst of connects beyond it overflows the accept queue \
             (ListenOverflows) and clients wait a SYN retry",
            format!("{NGINX_10GBPS}; {NET_SYSCTL}"),
        ),
        (
            "net.ipv4.tcp_max_syn_backlog",
            floor("net.ipv4.tcp_max_syn_backlog"),
            "half-open connections beyond it are dropped or answered with syncookies (\"Possible \
             SYN flooding\" in the 10 Gbps nginx tuning)",
            format!("{NGINX_10GBPS}; {IP_SYSCTL}"),
        ),
        (
            "net.core.netdev_max_backlog",
            floor("net.core.netdev_max_backlog"),
            "the per-CPU input queue RPS fills; when full, packets drop (softnet_stat column 2)",
            format!("{NGINX_10GBPS}; {NET_SYSCTL}"),
        ),
        (
            "net.core.netdev_budget",
            floor("net.core.netdev_budget"),
            "packets one softirq round may take before yielding; a larger budget cuts \
             time_squeeze (softnet_stat column 3) at high packet rates",
            NET_SYSCTL.to_string(),
        ),
        (
            "fs.nr_open",
            floor("fs.nr_open"),
            "the ceiling for RLIMIT_NOFILE: a server with a million connections needs a million \
             descriptors (accept4() failing with EMFILE in the 10 Gbps nginx tuning)",
            format!("{NGINX_10GBPS}; {FS_SYSCTL}"),
        ),
        (
            "fs.file-max",
            floor("fs.file-max"),
            "system-wide open files: room for two processes at the per-process ceiling",
            FS_SYSCTL.to_string(),
        ),
    ];
    for (name, target, reason, source) in list {
        sysctl_change(host, name, target, reason, &source, out, kept);
    }
    if role == Role::Client {
        plan_port_range(host, out);
        plan_tw_reuse(host, out);
    }
}

/// With role client: let new connects reuse source ports in TIME_WAIT (tcp_tw_reuse = 1).
fn plan_tw_reuse(host: &Host, out: &mut Vec<Change>) {
    let name = "net.ipv4.tcp_tw_reuse";
    let Some(current) = host.sysctl(name) else { return };
    if current == "1" {
        return;
    }
    out.push(Change {
        kind: Kind::Sysctl,
        setting: name.into(),
        path: format!("proc/sys/{}", name.replace('.', "/")),
        current: current.into(),
        planned: "1".into(),
        write: "1\n".into(),
        reason: format!(
            "a connect may take a source port whose earlier connection to the same destination \
             has been in TIME_WAIT for over 1 s (TCP timestamps tell its segments apart), so \
             closed connections stop holding ports for 60 s; {current} allows it {}; outgoing \
             connections only, the server side is unchanged",
            if current == "2" { "for loopback destinations only" } else { "nowhere" }
        ),
        source: IP_SYSCTL.to_string(),
    });
}

/// With role client: widen ip_local_port_range to 1024-65535 (never narrow it).
fn plan_port_range(host: &Host, out: &mut Vec<Change>) {
    let name = "net.ipv4.ip_local_port_range";
    let Some(current) = host.sysctl(name) else { return };
    let mut it = current.split_ascii_whitespace().filter_map(|v| v.parse::<u32>().ok());
    let (Some(lo), Some(hi)) = (it.next(), it.next()) else { return };
    let (new_lo, new_hi) = (lo.min(PORT_RANGE.0), hi.max(PORT_RANGE.1));
    if (new_lo, new_hi) == (lo, hi) {
        return;
    }
    let ports = |a: u32, b: u32| u64::from(b.saturating_sub(a) + 1);
    out.push(Change {
        kind: Kind::Sysctl,
        setting: name.into(),
        path: format!("proc/sys/{}", name.replace('.', "/")),
        current: format!("{lo} {hi}"),
        planned: format!("{new_lo} {new_hi}"),
        write: format!("{new_lo}\t{new_hi}\n"),
        reason: format!(
            "each connection to one server address needs its own source port, and a closed one \
             holds it 60 s in TIME_WAIT: {} ports allow {} new connections/s per destination, {} \
             allow {}",
            ports(lo, hi),
            ports(lo, hi) / 60,
            ports(new_lo, new_hi),
            ports(new_lo, new_hi) / 60
        ),
        source: format!("{NGINX_10GBPS}; {IP_SYSCTL}"),
    });
}

/// Clocksources whose reads are slow (no vDSO, or an I/O port): seed 000 saw xen clock reads
/// in its profiles.
const SLOW_CLOCKSOURCES: &[&str] = &["xen", "hpet", "acpi_pm", "jiffies", "refined-jiffies"];

fn plan_clocksource(host: &Host, out: &mut Vec<Change>) {
    if host.net_namespace.is_some() {
        return;
    }
    let Some(current) = host.clocksource.as_deref() else { return };
    if !SLOW_CLOCKSOURCES.contains(&current)
        || !host.clocksources_available.iter().any(|c| c == "tsc")
    {
        return;
    }
    out.push(Change {
        kind: Kind::Clocksource,
        setting: "clocksource".into(),
        path: "sys/devices/system/clocksource/clocksource0/current_clocksource".into(),
        current: current.into(),
        planned: "tsc".into(),
        write: "tsc\n".into(),
        reason: format!(
            "{current} reads are slow (every request reads the clock several times); the kernel \
             lists tsc as available, so it considers the TSC stable here"
        ),
        source: EC2_1M_QPS.into(),
    });
}

/// Settings the seeds changed that the plan leaves alone, with the reason.
fn never_changed(host: &Host) -> Vec<Kept> {
    let timestamps = host.sysctl("net.ipv4.tcp_timestamps").unwrap_or("?");
    vec![
        Kept {
            setting: "net.ipv4.tcp_tw_recycle".into(),
            reason: "never set: removed in Linux 4.12 because it dropped connections from \
                     clients behind NAT (the 10 Gbps nginx tuning set it on a 2013 kernel)"
                .into(),
        },
        Kept {
            setting: "net.ipv4.tcp_timestamps".into(),
            reason: format!(
                "left at {timestamps}: turning them off gained 5% in the 10 Gbps nginx tuning but loses PAWS \
                 protection against wrapped sequence numbers and RTT measurement, and \
                 tcp_tw_reuse needs them"
            ),
        },
        Kept {
            setting: "net.ipv4.tcp_syncookies".into(),
            reason: "left as is: with the raised SYN backlog cookies are sent only under a real \
                     flood, and 0 (as the 10 Gbps nginx tuning set it) removes the protection"
                .into(),
        },
    ]
}

/// The command line matching the plan's worker CPUs.
fn command_line(role: Role, cpus: &CpuSet) -> String {
    match role {
        Role::Server => format!("qpslab serve --workers {} --cpus {}", cpus.len(), cpus.to_list()),
        Role::Client => {
            format!("qpslab load --threads {} --cpus {} URL", cpus.len(), cpus.to_list())
        }
    }
}
