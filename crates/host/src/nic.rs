//! Network interfaces: driver, NUMA node, queues, and which IRQ serves which queue.
//!
//! Queue-to-IRQ matching goes through the device's MSI vectors (`device/msi_irqs`, or the PCI
//! parent's for virtio) and the action names in /proc/interrupts, whose form depends on the
//! driver: `eth0-TxRx-3` (i40e, ixgbe, ice, bnxt), `eth0-rx-1` / `eth0-tx-1` (igb), `virtio2-input.0`
//! / `virtio2-output.0` (virtio_net), `mlx5_comp3@pci:0000:3b:00.0` (mlx5: one completion vector
//! per channel). Vectors named config, async, ctrl, event, misc or mgmt carry no queue.

use crate::cpuset::CpuSet;
use crate::parse::IrqLine;
use qpslab_sys::root::Root;
use serde::Serialize;

/// One network interface.
#[derive(Debug, Clone, Serialize)]
pub struct Nic {
    pub name: String,
    pub driver: Option<String>,
    pub numa_node: Option<usize>,
    pub state: String,
    pub mtu: Option<u32>,
    pub speed_mbps: Option<u64>,
    /// Backed by a device (`device` link): a NIC, not a veth, bridge or ifb.
    pub physical: bool,
    pub rx: Vec<RxQueue>,
    pub tx: Vec<TxQueue>,
}

/// A receive queue.
#[derive(Debug, Clone, Serialize)]
pub struct RxQueue {
    pub index: usize,
    pub irq: Option<Irq>,
    /// RPS CPUs (empty: RPS off).
    pub rps_cpus: Option<CpuSet>,
    pub rps_flow_cnt: Option<u64>,
}

/// A transmit queue.
#[derive(Debug, Clone, Serialize)]
pub struct TxQueue {
    pub index: usize,
    pub irq: Option<Irq>,
    pub xps_cpus: Option<CpuSet>,
}

/// An interrupt line serving a queue.
#[derive(Debug, Clone, Serialize)]
pub struct Irq {
    pub number: u32,
    pub name: String,
    /// /proc/irq/N/smp_affinity: where the IRQ may go.
    pub affinity: Option<CpuSet>,
    /// /proc/irq/N/effective_affinity: where it actually goes.
    pub effective: Option<CpuSet>,
    /// Interrupts so far per CPU number.
    pub counts: std::collections::BTreeMap<usize, u64>,
}

/// What a vector's action name says it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKind {
    Rx(usize),
    Tx(usize),
    /// One vector for rx and tx queue N (TxRx, mlx5 completion vectors).
    Combined(usize),
}

/// Classifies an IRQ action name of interface `ifname`; None for vectors that serve no queue.
/// A vector named exactly like the interface (single-vector NICs such as e1000) serves queue 0.
pub fn classify_irq_name(name: &str, ifname: &str) -> Option<QueueKind> {
    // The interface's own digits ("eth1") are not a queue number.
    let name = match name.strip_prefix(ifname) {
        Some("") => return Some(QueueKind::Combined(0)),
        Some(rest) => rest,
        None => name,
    };
    // mlx5 appends "@pci:ADDRESS", whose digits are not the queue.
    let base = name.split('@').next().unwrap_or(name).to_ascii_lowercase();
    if ["config", "async", "ctrl", "event", "misc", "mgmt", "lsc", "fdir"]
        .iter()
        .any(|w| base.contains(w))
    {
        return None;
    }
    let digits = base.len() - base.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 {
        return None;
    }
    let index: usize = base[base.len() - digits..].parse().ok()?;
    let stem = &base[..base.len() - digits];
    if stem.contains("txrx")
        || stem.contains("tx-rx")
        || stem.contains("comp")
        || stem.contains("combined")
    {
        Some(QueueKind::Combined(index))
    } else if stem.contains("input") || stem.contains("rx") {
        Some(QueueKind::Rx(index))
    } else if stem.contains("output") || stem.contains("tx") {
        Some(QueueKind::Tx(index))
    } else {
        Some(QueueKind::Combined(index))
    }
}

/// Reads interface `name` under `root`, matching its queues to the lines of /proc/interrupts.
pub fn read_nic(root: &Root, name: &str, irqs: &[IrqLine]) -> Nic {
    let base = format!("sys/class/net/{name}");
    let dev = format!("{base}/device");
    let driver = std::fs::read_link(root.path(&format!("{dev}/driver")))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .or_else(|| {
            let uevent = root.read_opt(&format!("{dev}/uevent"))?;
            uevent.lines().find_map(|l| l.strip_prefix("DRIVER=").map(str::to_string))
        });
    // virtio keeps numa_node and msi_irqs on its PCI parent.
    let numa_node = [format!("{dev}/numa_node"), format!("{dev}/../numa_node")]
        .iter()
        .find_map(|p| root.read_opt(p))
        .and_then(|n| n.parse::<i64>().ok())
        .and_then(|n| usize::try_from(n).ok());
    let mut msi: Vec<u32> =
        root.list(&format!("{dev}/msi_irqs")).iter().filter_map(|n| n.parse().ok()).collect();
    if msi.is_empty() {
        msi = root
            .list(&format!("{dev}/../msi_irqs"))
            .iter()
            .filter_map(|n| n.parse().ok())
            .collect();
    }
    let candidates: Vec<&IrqLine> = irqs
        .iter()
        .filter(
            |l| if msi.is_empty() { names_interface(&l.name, name) } else { msi.contains(&l.irq) },
        )
        .collect();
    let irq_for = |want: fn(QueueKind, usize) -> bool, index: usize| -> Option<Irq> {
        let line = candidates
            .iter()
            .find(|l| classify_irq_name(&l.name, name).is_some_and(|k| want(k, index)))?;
        Some(read_irq(root, line))
    };
    let queues = root.list(&format!("{base}/queues"));
    let rx = queues
        .iter()
        .filter_map(|q| q.strip_prefix("rx-")?.parse::<usize>().ok())
        .map(|index| {
            let q = format!("{base}/queues/rx-{index}");
            RxQueue {
                index,
                irq: irq_for(
                    |k, i| matches!(k, QueueKind::Rx(n) | QueueKind::Combined(n) if n == i),
                    index,
                ),
                rps_cpus: root
                    .read_opt(&format!("{q}/rps_cpus"))
                    .and_then(|m| CpuSet::parse_mask(&m).ok()),
                rps_flow_cnt: root
                    .read_opt(&format!("{q}/rps_flow_cnt"))
                    .and_then(|n| n.parse().ok()),
            }
        })
        .collect();
    let tx = queues
        .iter()
        .filter_map(|q| q.strip_prefix("tx-")?.parse::<usize>().ok())
        .map(|index| TxQueue {
            index,
            irq: irq_for(
                |k, i| matches!(k, QueueKind::Tx(n) | QueueKind::Combined(n) if n == i),
                index,
            ),
            xps_cpus: root
                .read_opt(&format!("{base}/queues/tx-{index}/xps_cpus"))
                .and_then(|m| CpuSet::parse_mask(&m).ok()),
        })
        .collect();
    Nic {
        name: name.to_string(),
        driver,
        numa_node,
        state: root.read_opt(&format!("{base}/operstate")).unwrap_or_else(|| "unknown".into()),
        mtu: root.read_opt(&format!("{base}/mtu")).and_then(|n| n.parse().ok()),
        speed_mbps: root
            .read_opt(&format!("{base}/speed"))
            .and_then(|n| n.parse::<i64>().ok())
            .and_then(|n| u64::try_from(n).ok()),
        physical: root.path(&dev).exists(),
        rx,
        tx,
    }
}

/// Whether an action name is one of `ifname`'s vectors (`eth0-TxRx-0`, not `eth01-...`).
fn names_interface(action: &str, ifname: &str) -> bool {
    action.split(", ").any(|a| {
        a.strip_prefix(ifname).is_some_and(|rest| {
            rest.starts_with('-') || rest.starts_with('_') || rest.starts_with('@')
        })
    })
}

fn read_irq(root: &Root, line: &IrqLine) -> Irq {
    let mask = |f: &str| {
        root.read_opt(&format!("proc/irq/{}/{f}", line.irq))
            .and_then(|m| CpuSet::parse_mask(&m).ok())
    };
    Irq {
        number: line.irq,
        name: line.name.clone(),
        affinity: mask("smp_affinity"),
        effective: mask("effective_affinity"),
        counts: line.counts.clone(),
    }
}

impl Nic {
    /// IRQ numbers of the queues (rx and tx, each once).
    pub fn irq_numbers(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .rx
            .iter()
            .filter_map(|q| q.irq.as_ref().map(|i| i.number))
            .chain(self.tx.iter().filter_map(|q| q.irq.as_ref().map(|i| i.number)))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Whether RPS is on for any rx queue.
    pub fn rps_on(&self) -> bool {
        self.rx.iter().any(|q| q.rps_cpus.as_ref().is_some_and(|c| !c.is_empty()))
    }

    /// The CPUs the rx queues' IRQs are delivered to (effective affinity, else affinity).
    pub fn rx_irq_cpus(&self) -> CpuSet {
        self.rx
            .iter()
            .filter_map(|q| q.irq.as_ref())
            .filter_map(|i| {
                i.effective.clone().filter(|e| !e.is_empty()).or_else(|| i.affinity.clone())
            })
            .fold(CpuSet::new(), |acc, s| acc.union(&s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_names_of_common_drivers() {
        assert_eq!(classify_irq_name("eth0-TxRx-3", "eth0"), Some(QueueKind::Combined(3)));
        assert_eq!(classify_irq_name("enp1s0f0-TxRx-12", "eth0"), Some(QueueKind::Combined(12)));
        assert_eq!(classify_irq_name("eth1-rx-1", "eth0"), Some(QueueKind::Rx(1)));
        assert_eq!(classify_irq_name("eth1-tx-0", "eth0"), Some(QueueKind::Tx(0)));
        assert_eq!(classify_irq_name("virtio3-input.0", "eth0"), Some(QueueKind::Rx(0)));
        assert_eq!(classify_irq_name("virtio3-output.7", "eth0"), Some(QueueKind::Tx(7)));
        assert_eq!(
            classify_irq_name("mlx5_comp3@pci:0000:3b:00.0", "eth0"),
            Some(QueueKind::Combined(3))
        );
        assert_eq!(classify_irq_name("mlx5_async0@pci:0000:3b:00.0", "eth0"), None);
        assert_eq!(classify_irq_name("virtio2-config", "eth0"), None);
        assert_eq!(classify_irq_name("eth0", "eth0"), Some(QueueKind::Combined(0)));
        assert_eq!(classify_irq_name("eth1-rx-1", "eth1"), Some(QueueKind::Rx(1)));
        assert_eq!(classify_irq_name("ens5-Tx-Rx-2", "ens5"), Some(QueueKind::Combined(2)));
    }

    #[test]
    fn interface_names_match_whole() {
        assert!(names_interface("eth0-TxRx-0", "eth0"));
        assert!(!names_interface("eth01-TxRx-0", "eth0"));
        assert!(names_interface("acpi, eth0-rx-0", "eth0"));
    }
}
