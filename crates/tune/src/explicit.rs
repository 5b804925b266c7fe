//! Host settings named outright instead of planned: an RPS mask per queue, an IRQ's CPUs, a
//! sysctl's value. A sweep's host variants use them to compare layouts the planner would not
//! pick (the RPS bitmask table of "1M QPS with nginx on EC2" is such a list), and a climb's
//! final state (its sysctls, and the interfaces whose receive steering it kept). The result is
//! an ordinary [`Plan`], applied and reverted through the journal like any other.

use std::collections::BTreeMap;

use qpslab_sys::root::Root;
use serde::Serialize;

use super::plan::{list_or_off, mask_text, Change, Kind, Plan, PlanError, PlanOptions};
use qpslab_host::cpuset::CpuSet;
use qpslab_host::host::{read_sysctl, Host};
use qpslab_host::sample::Role;

/// The settings, as given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Explicit {
    /// `IFACE/rx-N` -> the CPUs of its RPS mask (empty: RPS off).
    pub rps: BTreeMap<String, CpuSet>,
    /// IRQ number -> its CPUs.
    pub irq: BTreeMap<u32, CpuSet>,
    /// Sysctl (`net.core.somaxconn`) -> value.
    pub sysctl: BTreeMap<String, String>,
    /// Interfaces whose receive steering (IRQ affinity, RPS, RFS, XPS) is planned as
    /// `qpslab tune plan --iface IF` plans it, without its sysctls.
    pub steer: Vec<String>,
}

impl Explicit {
    pub fn is_empty(&self) -> bool {
        self.rps.is_empty()
            && self.irq.is_empty()
            && self.sysctl.is_empty()
            && self.steer.is_empty()
    }
}

const SOURCE: &str = "named outright (a sweep variant, a climb's final state)";
const REASON: &str = "set to the value named";

/// The plan that writes exactly `x` (a setting already in place is left out; a path written
/// twice keeps the later write: steering, then the queues and IRQs named, then sysctls).
pub fn explicit_plan(root: &Root, host: &Host, x: &Explicit) -> Result<Plan, PlanError> {
    let mut changes = steering(host, &x.steer)?;
    let put = |changes: &mut Vec<Change>, c: Change| {
        changes.retain(|have| have.path != c.path);
        changes.push(c);
    };
    for (queue, want) in &x.rps {
        if let Some(c) = rps(host, queue, want)? {
            put(&mut changes, c);
        }
    }
    for (irq, want) in &x.irq {
        if let Some(c) = irq_affinity(root, host, *irq, want)? {
            put(&mut changes, c);
        }
    }
    for (name, value) in &x.sysctl {
        // Inside a network namespace only net.* settings are the namespace's (the kernel
        // hides the host-wide net.* ones there); fs.*, kernel.*, vm.* would change the host.
        if host.net_namespace.is_some() && !name.starts_with("net.") {
            return Err(PlanError(format!(
                "sysctl {name}: host-wide, and this runs inside a network namespace whose \
                 changes must stay in it; set it outside the namespace"
            )));
        }
        let current = read_sysctl(root, name).ok_or_else(|| {
            PlanError(format!(
                "sysctl {name}: no such setting under {}",
                root.path("proc/sys").display()
            ))
        })?;
        if current != *value {
            put(
                &mut changes,
                Change {
                    kind: Kind::Sysctl,
                    setting: name.clone(),
                    path: format!("proc/sys/{}", name.replace('.', "/")),
                    current,
                    planned: value.clone(),
                    write: format!("{value}\n"),
                    reason: REASON.into(),
                    source: SOURCE.into(),
                },
            );
        }
    }
    let mut interfaces: Vec<String> =
        x.rps.keys().filter_map(|q| q.split('/').next()).map(str::to_string).collect();
    interfaces.extend(x.steer.iter().cloned());
    interfaces.dedup();
    Ok(Plan {
        role: Role::Server,
        net_namespace: host.net_namespace.clone(),
        interfaces,
        irq_cpus: x.irq.values().fold(CpuSet::new(), |a, s| a.union(s)),
        worker_cpus: host.online.clone(),
        workers_shared: false,
        changes,
        kept: Vec::new(),
        command: String::new(),
        nginx: String::new(),
        irqbalance_pid: host.irqbalance_pid,
    })
}

/// The receive steering of `ifaces` as the planner lays it out for a server: its IRQ affinity,
/// RPS, RFS and XPS lines only (its sysctls are not steering).
fn steering(host: &Host, ifaces: &[String]) -> Result<Vec<Change>, PlanError> {
    if ifaces.is_empty() {
        return Ok(Vec::new());
    }
    let o =
        PlanOptions { ifaces: ifaces.to_vec(), irq_cpus: None, workers: None, role: Role::Server };
    let p = super::plan::plan(host, &o)?;
    let kinds = [Kind::IrqAffinity, Kind::Rps, Kind::RpsFlowCnt, Kind::Xps];
    Ok(p.changes.into_iter().filter(|c| kinds.contains(&c.kind)).collect())
}

/// `eth0/rx-0` set to `want`.
fn rps(host: &Host, queue: &str, want: &CpuSet) -> Result<Option<Change>, PlanError> {
    let bad = || PlanError(format!("rps {queue:?}: name a queue as IFACE/rx-N, e.g. eth0/rx-0"));
    let (iface, rx) = queue.split_once('/').ok_or_else(bad)?;
    let index: usize = rx.strip_prefix("rx-").and_then(|n| n.parse().ok()).ok_or_else(bad)?;
    let nic =
        host.nics.iter().find(|n| n.name == iface).ok_or_else(|| {
            PlanError(format!("rps {queue:?}: no interface {iface} on this host"))
        })?;
    let q = nic.rx.iter().find(|q| q.index == index).ok_or_else(|| {
        PlanError(format!("rps {queue:?}: {iface} has {} rx queue(s)", nic.rx.len()))
    })?;
    let current = q.rps_cpus.clone().ok_or_else(|| {
        PlanError(format!("rps {queue:?}: the kernel has no rps_cpus for this queue"))
    })?;
    Ok((&current != want).then(|| Change {
        kind: Kind::Rps,
        setting: format!("{iface} rx-{index} rps_cpus"),
        path: format!("sys/class/net/{iface}/queues/rx-{index}/rps_cpus"),
        current: list_or_off(&current),
        planned: list_or_off(want),
        write: mask_text(want, host),
        reason: REASON.into(),
        source: SOURCE.into(),
    }))
}

/// IRQ `irq`'s affinity set to `want`.
fn irq_affinity(
    root: &Root,
    host: &Host,
    irq: u32,
    want: &CpuSet,
) -> Result<Option<Change>, PlanError> {
    let path = format!("proc/irq/{irq}/smp_affinity");
    let text = root.read_opt(&path).ok_or_else(|| {
        PlanError(format!("irq {irq}: no {} on this host", root.path(&path).display()))
    })?;
    let current = CpuSet::parse_mask(&text).map_err(|e| PlanError(format!("irq {irq}: {e}")))?;
    Ok((&current != want).then(|| Change {
        kind: Kind::IrqAffinity,
        setting: format!("IRQ {irq} affinity"),
        path,
        current: current.to_list(),
        planned: want.to_list(),
        write: mask_text(want, host),
        reason: REASON.into(),
        source: SOURCE.into(),
    }))
}
