//! Where interrupt work and workers go: the CPU-placement rules of the tune planner, as pure
//! functions of the topology. No file is read or written here.
//!
//! The rules come from the seeds: one CPU per queue's IRQ, spread over NUMA nodes (the NIC's
//! own first) and over physical cores before SMT siblings (seed 000 put queue 0 on node 0 and
//! queue 1 on node 1); RPS on CPUs of the IRQ CPU's node with every IRQ CPU left out (seed 000's
//! table: 590k with the IRQ CPU excluded vs 300k with it); interrupt work and workers split by
//! whole cores, workers on the nodes without NICs first (seed 001: IRQs on both threads of four
//! cores of package 0, workers on the rest, 219k vs 153k hits/s with threads of one core split).

use qpslab_host::cpuset::CpuSet;
use qpslab_host::host::{Cpu, Host};
use std::collections::BTreeMap;

/// The topology facts placement needs, per online CPU.
#[derive(Debug, Clone)]
pub struct Topology {
    cpus: Vec<Cpu>,
}

impl Topology {
    pub fn new(host: &Host) -> Self {
        Self { cpus: host.cpus.clone() }
    }

    fn cpu(&self, id: usize) -> Option<&Cpu> {
        self.cpus.iter().find(|c| c.id == id)
    }

    /// NUMA node of a CPU (0 when the host has no node information).
    pub fn node(&self, id: usize) -> usize {
        self.cpu(id).and_then(|c| c.node).unwrap_or(0)
    }

    /// (package, core) identifying the physical core of a CPU.
    fn core(&self, id: usize) -> (usize, usize) {
        self.cpu(id).map_or((0, id), |c| (c.package.unwrap_or(0), c.core.unwrap_or(id)))
    }

    /// 0 for a core's first hardware thread, 1 for its second.
    fn rank(&self, id: usize) -> usize {
        self.cpu(id).map_or(0, |c| c.siblings.iter().position(|s| s == id).unwrap_or(0))
    }

    /// The CPU's SMT siblings, itself included.
    pub fn siblings(&self, id: usize) -> CpuSet {
        self.cpu(id).map_or_else(|| std::iter::once(id).collect(), |c| c.siblings.clone())
    }

    /// Physical cores count.
    pub fn cores(&self) -> usize {
        let mut cores: Vec<_> = self.cpus.iter().map(|c| self.core(c.id)).collect();
        cores.sort_unstable();
        cores.dedup();
        cores.len().max(1)
    }

    /// CPUs of `pool` in the order IRQs take them: first hardware threads before second ones,
    /// nodes interleaved starting at `first_node`, cores in order within a node.
    pub fn irq_order(&self, pool: &CpuSet, first_node: Option<usize>) -> Vec<usize> {
        let mut by_rank_node: BTreeMap<usize, BTreeMap<usize, Vec<usize>>> = BTreeMap::new();
        for id in pool.iter() {
            by_rank_node
                .entry(self.rank(id))
                .or_default()
                .entry(self.node(id))
                .or_default()
                .push(id);
        }
        let mut order = Vec::with_capacity(pool.len());
        for nodes in by_rank_node.values_mut() {
            let mut keys: Vec<usize> = nodes.keys().copied().collect();
            if let Some(pos) = first_node.and_then(|f| keys.iter().position(|&n| n == f)) {
                keys.rotate_left(pos);
            }
            for list in nodes.values_mut() {
                list.sort_by_key(|&id| (self.core(id), id));
            }
            let longest = nodes.values().map(Vec::len).max().unwrap_or(0);
            for i in 0..longest {
                order.extend(keys.iter().filter_map(|k| nodes[k].get(i).copied()));
            }
        }
        order
    }

    /// The physical cores of `set` as CPU sets, in core order.
    fn cores_of(&self, set: &CpuSet) -> Vec<CpuSet> {
        let mut cores: BTreeMap<(usize, usize), CpuSet> = BTreeMap::new();
        for id in set.iter() {
            cores.entry(self.core(id)).or_default().insert(id);
        }
        cores.into_values().collect()
    }

    /// `n` worker CPUs from `avail`, by whole cores: nodes without a NIC first, then the highest
    /// cores of the NICs' nodes, so the cores nearest the NICs stay for interrupt work. When `n`
    /// is odd on an SMT machine one core is split (its first thread goes to the workers).
    pub fn pick_workers(&self, avail: &CpuSet, n: usize, nic_nodes: &[usize]) -> CpuSet {
        let mut cores = self.cores_of(avail);
        cores.sort_by_key(|c| {
            let first = c.first().unwrap_or(0);
            (nic_nodes.contains(&self.node(first)), std::cmp::Reverse(self.core(first)))
        });
        let mut picked = CpuSet::new();
        for core in cores {
            for id in core.iter() {
                if picked.len() < n {
                    picked.insert(id);
                }
            }
        }
        picked
    }

    /// Disjoint RPS sets for queues whose IRQs are on `irq_cpus` (one entry per queue, in queue
    /// order; None for a queue without an IRQ). Candidates are `pool` minus every CPU in
    /// `all_irq_cpus`; a queue with an IRQ gets only CPUs of its IRQ CPU's node, the IRQ CPU's
    /// own SMT sibling first, then whole cores dealt in turn. Queues without an IRQ (veth, ifb)
    /// share the candidates of every node the same way.
    pub fn rps_sets(
        &self,
        irq_cpus: &[Option<usize>],
        pool: &CpuSet,
        all_irq_cpus: &CpuSet,
    ) -> Vec<CpuSet> {
        let mut sets = vec![CpuSet::new(); irq_cpus.len()];
        let mut free = pool.difference(all_irq_cpus);
        for (i, cpu) in irq_cpus.iter().enumerate() {
            if let Some(cpu) = cpu {
                let own = self.siblings(*cpu).intersection(&free);
                free = free.difference(&own);
                sets[i] = own;
            }
        }
        // Group queues by the node their candidates come from (None: any node).
        let mut groups: BTreeMap<Option<usize>, Vec<usize>> = BTreeMap::new();
        for (i, cpu) in irq_cpus.iter().enumerate() {
            groups.entry(cpu.map(|c| self.node(c))).or_default().push(i);
        }
        for (node, queues) in groups {
            let candidates: CpuSet = match node {
                Some(n) => free.iter().filter(|&c| self.node(c) == n).collect(),
                None => free.clone(),
            };
            for (k, core) in self.cores_of(&candidates).into_iter().enumerate() {
                let q = queues[k % queues.len()];
                sets[q] = sets[q].union(&core);
            }
            free = free.difference(&candidates);
        }
        sets
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qpslab_sys::root::Root;
    use qpslab_testkit::Shape;

    fn topo(shape: &Shape) -> Topology {
        let dir = tempfile::tempdir().unwrap();
        shape.write(dir.path()).unwrap();
        Topology::new(&Host::read(&Root::new(dir.path())).unwrap())
    }

    #[test]
    fn irq_order_interleaves_nodes_and_takes_first_threads_first() {
        // 2 packages x 8 cores x 2 threads: node 0 = 0-7,16-23, node 1 = 8-15,24-31.
        let t = topo(&Shape::two_nodes_two_nics());
        let all: CpuSet = (0..32).collect();
        let order = t.irq_order(&all, Some(1));
        assert_eq!(&order[..4], &[8, 0, 9, 1]);
        assert_eq!(&order[16..18], &[24, 16]);
    }

    #[test]
    fn workers_take_whole_cores_away_from_the_nic_node() {
        // Seed 001's best split on 24 CPUs (NIC on node 0): workers 4-11,16-23.
        let t = topo(&Shape::two_packages_24_queues());
        let w = t.pick_workers(&(0..24).collect(), 16, &[0]);
        assert_eq!(w.to_list(), "4-11,16-23");
    }

    #[test]
    fn rps_sets_are_disjoint_same_node_and_skip_irq_cpus() {
        let t = topo(&Shape::two_nodes_two_nics());
        let all: CpuSet = (0..32).collect();
        let irq: CpuSet = [0, 1, 8, 9].into_iter().collect();
        let sets = t.rps_sets(&[Some(0), Some(8), Some(9), Some(1)], &all, &irq);
        assert_eq!(sets[0].to_list(), "2,4,6,16,18,20,22");
        assert_eq!(sets[3].to_list(), "3,5,7,17,19,21,23");
        assert_eq!(sets[1].to_list(), "10,12,14,24,26,28,30");
    }
}
