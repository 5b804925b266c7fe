//! `tune` on synthetic trees: the plan's rules hold on the applied files, apply then revert is
//! byte-identical, a failure at any write rolls back to a byte-identical tree, and a value
//! changed between apply and revert is reported and kept.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use qpslab_host::cpuset::CpuSet;
use qpslab_host::sample::Role;
use qpslab_host::{Host, Root};
use qpslab_testkit::Shape;
use qpslab_tune::{
    self as tune, apply::Files, ApplyOptions, Plan, PlanOptions, RootFiles, TuneError,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn server() -> PlanOptions {
    PlanOptions { ifaces: vec![], irq_cpus: None, workers: None, role: Role::Server }
}

fn tree(shape: &Shape) -> (tempfile::TempDir, Root) {
    let dir = tempfile::tempdir().unwrap();
    shape.write(dir.path()).unwrap();
    let root = Root::new(dir.path());
    (dir, root)
}

fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    qpslab_testkit::snapshot(dir).unwrap()
}

fn opts(journal: &Path) -> ApplyOptions {
    ApplyOptions {
        journal: journal.to_path_buf(),
        stop_irqbalance: false,
        live: false,
        command: "test".into(),
    }
}

fn plan_for(root: &Root, o: &PlanOptions) -> Plan {
    tune::plan(&Host::read(root).unwrap(), o).unwrap()
}

/// Checks every placement rule of the issue on the host as read after apply.
fn assert_rules(shape: &Shape, after: &Host, plan: &Plan) {
    let node_of = |cpu: usize| after.cpus.iter().find(|c| c.id == cpu).unwrap().node.unwrap();
    let first_threads: CpuSet =
        after.cpus.iter().filter(|c| c.siblings.first() == Some(c.id)).map(|c| c.id).collect();
    let cores = after.cores;
    let total_queues: usize = shape.nics.iter().map(|n| n.queues).sum();
    let mut irq_cpus = Vec::new();
    let mut rps_sets = Vec::new();
    for spec in &shape.nics {
        let nic = after.nics.iter().find(|n| n.name == spec.name).unwrap();
        let mut nodes = Vec::new();
        for q in &nic.rx {
            let irq = q.irq.as_ref().unwrap();
            let aff = irq.affinity.clone().unwrap();
            assert_eq!(
                aff.len(),
                1,
                "{} rx-{}: IRQ on exactly one CPU, got {aff}",
                nic.name,
                q.index
            );
            let cpu = aff.first().unwrap();
            irq_cpus.push(cpu);
            nodes.push(node_of(cpu));
            if total_queues <= first_threads.len() {
                assert!(first_threads.contains(cpu), "cores before SMT siblings: CPU {cpu}");
            }
            let rps = q.rps_cpus.clone().unwrap();
            if nic.rx.len() < cores {
                assert!(
                    !rps.is_empty(),
                    "{} rx-{}: RPS on with fewer queues than cores",
                    nic.name,
                    q.index
                );
                assert!(
                    rps.iter().all(|c| node_of(c) == node_of(cpu)),
                    "RPS on the IRQ CPU's node"
                );
                assert_eq!(q.rps_flow_cnt, Some(32768 / nic.rx.len() as u64));
            } else {
                assert!(rps.is_empty(), "RPS off when queues >= cores");
            }
            rps_sets.push(rps.clone());
            let tx = nic.tx.iter().find(|t| t.index == q.index).unwrap();
            let group = rps.union(&aff);
            assert_eq!(
                tx.xps_cpus.as_ref(),
                Some(&group),
                "XPS: tx-{} sends from its group",
                q.index
            );
        }
        if let (Some(own), true) = (spec.node, nic.rx.len() > 1 && after.nodes.len() > 1) {
            assert_eq!(nodes[0], own, "{}: first queue on the NIC's own node", nic.name);
            assert!(nodes.iter().any(|&n| n != own), "{}: queues spread over nodes", nic.name);
        }
    }
    let distinct: CpuSet = irq_cpus.iter().copied().collect();
    assert_eq!(distinct.len(), irq_cpus.len(), "IRQ CPUs distinct: {irq_cpus:?}");
    for (i, a) in rps_sets.iter().enumerate() {
        assert!(a.intersection(&distinct).is_empty(), "RPS leaves out every IRQ CPU: {a}");
        for b in &rps_sets[i + 1..] {
            assert!(a.intersection(b).is_empty(), "RPS masks disjoint: {a} / {b}");
        }
    }
    if !plan.workers_shared {
        for cpu in distinct.iter() {
            for s in after.cpus.iter().find(|c| c.id == cpu).unwrap().siblings.iter() {
                assert!(
                    !plan.worker_cpus.contains(s),
                    "both threads of an IRQ core stay off workers"
                );
            }
        }
    }
    if rps_sets.iter().any(|s| !s.is_empty()) {
        assert_eq!(after.sysctl("net.core.rps_sock_flow_entries"), Some("32768"));
    }
    assert_eq!(after.sysctl("net.core.somaxconn"), Some("65535"));
    assert_eq!(after.sysctl("net.ipv4.tcp_max_syn_backlog"), Some("65535"));
    assert_eq!(after.sysctl("net.core.netdev_max_backlog"), Some("65536"));
    assert_eq!(after.sysctl("net.core.netdev_budget"), Some("600"));
}

fn apply_check_revert(shape: &Shape) {
    let (dir, root) = tree(shape);
    let journal_dir = tempfile::tempdir().unwrap();
    let journal = journal_dir.path().join("journal.json");
    let before = snapshot(dir.path());
    let plan = plan_for(&root, &server());
    assert!(!plan.changes.is_empty());
    let mut files = RootFiles(root.clone());
    let report = tune::apply(&mut files, dir.path(), &plan, &opts(&journal)).unwrap();
    assert_eq!(report.written.len(), plan.changes.len());
    assert!(journal.exists());
    assert_rules(shape, &Host::read(&root).unwrap(), &plan);
    // Applied: a new plan has nothing left to do.
    let again = plan_for(&root, &server());
    assert!(again.changes.is_empty(), "{:#?}", again.changes);
    let r = tune::revert(&mut files, &journal, false, false).unwrap();
    assert!(r.clean() && r.restored.len() == plan.changes.len(), "{r:#?}");
    assert!(!journal.exists());
    assert!(snapshot(dir.path()) == before, "apply then revert is byte-identical");
    // Idempotent.
    let r = tune::revert(&mut files, &journal, false, false).unwrap();
    assert!(r.no_journal);
    assert!(snapshot(dir.path()) == before);
}

#[test]
fn two_nodes_with_smt_and_two_nics_of_two_queues() {
    apply_check_revert(&Shape::two_nodes_two_nics());
}

#[test]
fn twenty_four_cpus_in_two_packages_with_24_queues() {
    apply_check_revert(&Shape::two_packages_24_queues());
}

#[test]
fn two_cpus_with_one_queue() {
    apply_check_revert(&Shape::small_virtio());
}

#[test]
fn the_seed_000_layout_on_two_nodes() {
    let (_dir, root) = tree(&Shape::two_nodes_two_nics());
    let plan = plan_for(&root, &server());
    assert_eq!(plan.irq_cpus.to_list(), "0-1,8-9");
    let rps: Vec<&str> = plan
        .changes
        .iter()
        .filter(|c| c.setting.ends_with("rps_cpus"))
        .map(|c| c.planned.as_str())
        .collect();
    // 7 CPUs per queue on its IRQ CPU's node, the IRQ CPUs left out (seed 000's best row).
    assert_eq!(
        rps,
        ["2,4,6,16,18,20,22", "10,12,14,24,26,28,30", "11,13,15,25,27,29,31", "3,5,7,17,19,21,23"]
    );
    assert_eq!(plan.worker_cpus.to_list(), "2-7,10-15,18-23,26-31");
    assert_eq!(plan.command, "qpslab serve --workers 24 --cpus 2-7,10-15,18-23,26-31");
}

#[test]
fn workers_flag_gives_interrupt_work_whole_cores_as_in_seed_001() {
    let (_dir, root) = tree(&Shape::two_packages_24_queues());
    let plan = plan_for(&root, &PlanOptions { workers: Some(16), ..server() });
    assert_eq!(plan.worker_cpus.to_list(), "4-11,16-23");
    assert_eq!(plan.irq_cpus.to_list(), "0-3,12-15");
    assert!(plan.kept.iter().any(|k| k.reason.contains("24 queues share 8 interrupt CPUs")));
    assert!(!plan.changes.iter().any(|c| c.setting.ends_with("rps_cpus")), "24 queues >= 12 cores");
    let nginx = &plan.nginx;
    assert!(nginx.contains("worker_processes 16;"), "{nginx}");
}

#[test]
fn irq_cpus_flag_is_validated_and_used() {
    let (_dir, root) = tree(&Shape::two_nodes_two_nics());
    let host = Host::read(&root).unwrap();
    let list = |s: &str| Some(CpuSet::parse_list(s).unwrap());
    let plan = tune::plan(&host, &PlanOptions { irq_cpus: list("0-3,16-19"), ..server() }).unwrap();
    assert!(plan.irq_cpus.iter().all(|c| [0, 1, 2, 3, 16, 17, 18, 19].contains(&c)));
    assert!(plan.worker_cpus.intersection(&list("0-3,16-19").unwrap()).is_empty());
    let err = tune::plan(&host, &PlanOptions { irq_cpus: list("0,40"), ..server() }).unwrap_err();
    assert!(err.to_string().starts_with("--irq-cpus: CPU 40 is not online"), "{err}");
    let err = tune::plan(&host, &PlanOptions { workers: Some(32), ..server() }).unwrap_err();
    assert!(err.to_string().starts_with("--workers 32:"), "{err}");
    let err =
        tune::plan(&host, &PlanOptions { ifaces: vec!["eth9".into()], ..server() }).unwrap_err();
    assert_eq!(err.to_string(), "--iface eth9: no such interface (this host has: eth0, eth1)");
    // Regression: RPS was planned on lo, which has no queue to spread (0.66x in a namespace).
    let err =
        tune::plan(&host, &PlanOptions { ifaces: vec!["lo".into()], ..server() }).unwrap_err();
    assert!(err.to_string().starts_with("--iface lo: loopback has no receive queue"), "{err}");
}

/// Fails the k-th write (1-based), passing everything else through.
struct FailAt {
    inner: RootFiles,
    k: usize,
    writes: usize,
}

impl Files for FailAt {
    fn read(&mut self, rel: &str) -> std::io::Result<String> {
        self.inner.read(rel)
    }
    fn write(&mut self, rel: &str, text: &str) -> std::io::Result<()> {
        self.writes += 1;
        if self.writes == self.k {
            return Err(std::io::Error::from_raw_os_error(libc_eio()));
        }
        self.inner.write(rel, text)
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.inner.path(rel)
    }
}

fn libc_eio() -> i32 {
    5
}

#[test]
fn a_failure_at_any_write_leaves_the_tree_byte_identical() {
    for shape in [Shape::two_nodes_two_nics(), Shape::small_virtio()] {
        let (dir, root) = tree(&shape);
        let journal_dir = tempfile::tempdir().unwrap();
        let journal = journal_dir.path().join("journal.json");
        let before = snapshot(dir.path());
        let plan = plan_for(&root, &server());
        for k in 1..=plan.changes.len() {
            let mut files = FailAt { inner: RootFiles(root.clone()), k, writes: 0 };
            let err = tune::apply(&mut files, dir.path(), &plan, &opts(&journal)).unwrap_err();
            let TuneError::Write { op, path, rollback, .. } = &err else { panic!("{err}") };
            assert_eq!(*op, "write");
            assert_eq!(path, &dir.path().join(&plan.changes[k - 1].path));
            assert!(
                rollback.contains(&format!("the {} values written before it were restored", k - 1)),
                "{err}"
            );
            assert!(err.to_string().contains("Input/output error"), "{err}");
            assert!(!journal.exists(), "k={k}: the journal is removed after a full roll-back");
            assert!(snapshot(dir.path()) == before, "k={k}: tree byte-identical");
        }
    }
}

#[test]
fn a_value_changed_after_apply_is_reported_and_kept_unless_forced() {
    let (dir, root) = tree(&Shape::two_nodes_two_nics());
    let journal_dir = tempfile::tempdir().unwrap();
    let journal = journal_dir.path().join("journal.json");
    let before = snapshot(dir.path());
    let plan = plan_for(&root, &server());
    let mut files = RootFiles(root.clone());
    tune::apply(&mut files, dir.path(), &plan, &opts(&journal)).unwrap();
    let somaxconn = dir.path().join("proc/sys/net/core/somaxconn");
    std::fs::write(&somaxconn, "70000\n").unwrap();

    let st = tune::status(&mut files, &journal).unwrap().unwrap();
    let entry = st.entries.iter().find(|e| e.item.setting == "net.core.somaxconn").unwrap();
    assert_eq!(entry.state, "changed");
    assert!(st.entries.iter().filter(|e| e.state == "applied").count() == plan.changes.len() - 1);

    let r = tune::revert(&mut files, &journal, false, false).unwrap();
    assert_eq!(r.kept.len(), 1);
    assert_eq!(r.kept[0].now, "70000\n");
    assert_eq!(std::fs::read_to_string(&somaxconn).unwrap(), "70000\n");
    assert!(journal.exists(), "the journal stays active while a value is kept");
    // A second revert changes nothing and reports the same value again.
    let r = tune::revert(&mut files, &journal, false, false).unwrap();
    assert_eq!((r.kept.len(), r.restored.len()), (1, 0));
    assert_eq!(r.unchanged.len(), plan.changes.len() - 1);
    // Apply refuses while the journal is active.
    let err = tune::apply(&mut files, dir.path(), &plan, &opts(&journal)).unwrap_err();
    assert!(matches!(err, TuneError::Refused(ref m) if m.contains("already active")), "{err}");
    let r = tune::revert(&mut files, &journal, true, false).unwrap();
    assert!(r.clean() && r.restored.len() == 1);
    assert!(!journal.exists());
    assert!(snapshot(dir.path()) == before);
}

#[test]
fn a_running_irqbalance_is_refused_or_journaled() {
    let (dir, root) = tree(&Shape::two_nodes_two_nics());
    std::fs::create_dir_all(dir.path().join("proc/4242")).unwrap();
    std::fs::write(dir.path().join("proc/4242/comm"), "irqbalance\n").unwrap();
    let journal_dir = tempfile::tempdir().unwrap();
    let journal = journal_dir.path().join("journal.json");
    let plan = plan_for(&root, &server());
    assert_eq!(plan.irqbalance_pid, Some(4242));
    let mut files = RootFiles(root.clone());
    let err = tune::apply(&mut files, dir.path(), &plan, &opts(&journal)).unwrap_err();
    assert!(
        matches!(err, TuneError::Refused(ref m) if m.contains("irqbalance (pid 4242)")),
        "{err}"
    );
    assert!(!journal.exists());
    let o = ApplyOptions { stop_irqbalance: true, ..opts(&journal) };
    let report = tune::apply(&mut files, dir.path(), &plan, &o).unwrap();
    assert_eq!(report.irqbalance_stopped, Some(4242));
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(
        text.contains("\"kind\": \"stop-irqbalance\"") && text.contains("\"stopped\": false"),
        "{text}"
    );
    assert!(tune::revert(&mut files, &journal, false, false).unwrap().clean());
}

#[test]
fn masks_over_32_cpus_are_written_in_32_bit_groups_and_read_back() {
    let shape = Shape { cores_per_package: 16, ..Shape::two_nodes_two_nics() };
    assert_eq!(shape.cpus(), 64);
    let (dir, root) = tree(&shape);
    let journal_dir = tempfile::tempdir().unwrap();
    let plan = plan_for(&root, &server());
    let mut files = RootFiles(root.clone());
    tune::apply(&mut files, dir.path(), &plan, &opts(&journal_dir.path().join("j.json"))).unwrap();
    let rps = std::fs::read_to_string(dir.path().join("sys/class/net/eth0/queues/rx-1/rps_cpus"))
        .unwrap();
    let irq = std::fs::read_to_string(dir.path().join("proc/irq/101/smp_affinity")).unwrap();
    // eth0 rx-1's IRQ is on node 1 (CPU 16): RPS on node 1's CPUs, written as two groups.
    assert_eq!(irq, "00000000,00010000\n");
    assert!(rps.trim().len() == 17 && rps.contains(','), "{rps:?}");
    let after = Host::read(&root).unwrap();
    let planned =
        plan.changes.iter().find(|c| c.path.ends_with("eth0/queues/rx-1/rps_cpus")).unwrap();
    let read_back = after.nics[0].rx[1].rps_cpus.clone().unwrap();
    assert_eq!(read_back.to_list(), planned.planned);
    assert!(read_back.iter().any(|c| c >= 32), "{read_back}");
    assert_rules(&shape, &after, &plan);
}

#[test]
fn client_role_widens_the_port_range_reuses_time_wait_and_slow_clocksources_go_to_tsc() {
    let (dir, root) = tree(&Shape::small_virtio());
    std::fs::write(
        dir.path().join("sys/devices/system/clocksource/clocksource0/current_clocksource"),
        "hpet\n",
    )
    .unwrap();
    let plan = plan_for(&root, &PlanOptions { role: Role::Client, ..server() });
    let range = plan.changes.iter().find(|c| c.setting == "net.ipv4.ip_local_port_range").unwrap();
    assert_eq!((range.current.as_str(), range.planned.as_str()), ("32768 60999", "1024 65535"));
    assert!(range.reason.contains("28232 ports allow 470 new connections/s"), "{}", range.reason);
    // The doctor's ephemeral-ports remedy names this plan for TIME_WAIT reuse.
    let reuse = plan.changes.iter().find(|c| c.setting == "net.ipv4.tcp_tw_reuse").unwrap();
    assert_eq!((reuse.current.as_str(), reuse.planned.as_str()), ("2", "1"));
    assert_eq!(reuse.path, "proc/sys/net/ipv4/tcp_tw_reuse");
    assert!(reuse.reason.contains("for loopback destinations only"), "{}", reuse.reason);
    let clock = plan.changes.iter().find(|c| c.setting == "clocksource").unwrap();
    assert_eq!(clock.write, "tsc\n");
    assert!(plan.command.starts_with("qpslab load --threads 1 --cpus 1 "), "{}", plan.command);
    let server_plan = plan_for(&root, &server());
    assert!(!server_plan.changes.iter().any(|c| c.setting == "net.ipv4.ip_local_port_range"));
    assert!(!server_plan.changes.iter().any(|c| c.setting == "net.ipv4.tcp_tw_reuse"));
    for never in ["net.ipv4.tcp_tw_recycle", "net.ipv4.tcp_timestamps"] {
        assert!(plan.kept.iter().any(|k| k.setting == never));
        assert!(!plan.changes.iter().any(|c| c.setting == never));
    }
}

#[test]
fn sysctls_are_only_raised() {
    let (dir, root) = tree(&Shape::small_virtio());
    std::fs::write(dir.path().join("proc/sys/net/core/somaxconn"), "1000000\n").unwrap();
    let plan = plan_for(&root, &server());
    assert!(!plan.changes.iter().any(|c| c.setting == "net.core.somaxconn"));
    assert!(plan.nginx.contains("backlog=1000000;"), "{}", plan.nginx);
}

/// Dies (panics) at the k-th write, before or after the file changes: what a crash or a kill
/// leaves behind is the journal on disk and the files as they are.
struct CrashAt {
    inner: RootFiles,
    k: usize,
    after_write: bool,
    writes: usize,
}

impl Files for CrashAt {
    fn read(&mut self, rel: &str) -> std::io::Result<String> {
        self.inner.read(rel)
    }
    fn write(&mut self, rel: &str, text: &str) -> std::io::Result<()> {
        self.writes += 1;
        if self.writes == self.k {
            if self.after_write {
                self.inner.write(rel, text)?;
            }
            panic!("simulated crash at write {}", self.k);
        }
        self.inner.write(rel, text)
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.inner.path(rel)
    }
}

#[test]
fn a_crash_at_any_point_of_apply_is_reverted_from_the_journal() {
    let (dir, root) = tree(&Shape::two_nodes_two_nics());
    let journal_dir = tempfile::tempdir().unwrap();
    let journal = journal_dir.path().join("journal.json");
    let before = snapshot(dir.path());
    let plan = plan_for(&root, &server());
    for k in 1..=plan.changes.len() {
        for after_write in [false, true] {
            let mut files = CrashAt { inner: RootFiles(root.clone()), k, after_write, writes: 0 };
            let crashed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                tune::apply(&mut files, dir.path(), &plan, &opts(&journal))
            }));
            assert!(crashed.is_err());
            let st = tune::status(&mut RootFiles(root.clone()), &journal).unwrap().unwrap();
            assert!(!st.complete && st.entries.len() == k);
            assert_eq!(st.entries[k - 1].state, if after_write { "applied" } else { "unwritten" });
            let r = tune::revert(&mut RootFiles(root.clone()), &journal, false, false).unwrap();
            assert!(r.clean(), "k={k}: {r:#?}");
            assert_eq!(r.restored.len(), if after_write { k } else { k - 1 });
            assert!(snapshot(dir.path()) == before, "k={k} after_write={after_write}");
            assert!(!journal.exists());
        }
    }
}

/// Settings named outright (a sweep's host variant): written exactly, reverted exactly, and a
/// queue or sysctl that does not exist is refused by name.
#[test]
fn explicit_settings_apply_and_revert_exactly() {
    let (dir, root) = tree(&Shape::two_nodes_two_nics());
    let before = snapshot(dir.path());
    let host = Host::read(&root).unwrap();
    let mut x = tune::Explicit::default();
    x.rps.insert("eth0/rx-1".into(), [2, 3, 18].into_iter().collect());
    x.irq.insert(100, [5].into_iter().collect());
    x.sysctl.insert("net.core.somaxconn".into(), "8192".into());
    let plan = tune::explicit_plan(&root, &host, &x).unwrap();
    assert_eq!(plan.changes.len(), 3, "{:?}", plan.changes);
    let journal = dir.path().join("j.json");
    let mut files = RootFiles(root.clone());
    tune::apply(&mut files, dir.path(), &plan, &opts(&journal)).unwrap();
    let after = Host::read(&root).unwrap();
    let eth0 = after.nics.iter().find(|n| n.name == "eth0").unwrap();
    assert_eq!(eth0.rx[1].rps_cpus.as_ref().unwrap().to_list(), "2-3,18");
    assert_eq!(eth0.rx[0].irq.as_ref().unwrap().affinity.as_ref().unwrap().to_list(), "5");
    assert_eq!(after.sysctl("net.core.somaxconn"), Some("8192"));
    // Already in place: nothing to write.
    assert!(tune::explicit_plan(&root, &after, &x).unwrap().changes.is_empty());
    let report = tune::revert(&mut files, &journal, false, false).unwrap();
    assert!(report.clean());
    assert_eq!(snapshot(dir.path()), before, "byte-identical after revert");

    let refuse = |x: tune::Explicit| tune::explicit_plan(&root, &host, &x).unwrap_err().0;
    let mut bad = tune::Explicit::default();
    bad.rps.insert("eth9/rx-0".into(), CpuSet::new());
    assert!(refuse(bad).contains("no interface eth9"));
    let mut bad = tune::Explicit::default();
    bad.rps.insert("eth0-rx-0".into(), CpuSet::new());
    assert!(refuse(bad).contains("IFACE/rx-N"));
    let mut bad = tune::Explicit::default();
    bad.sysctl.insert("net.core.nonsense".into(), "1".into());
    assert!(refuse(bad).contains("no such setting"));
}
