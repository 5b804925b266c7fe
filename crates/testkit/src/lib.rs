//! Test support, kept out of the shipped binary. Synthetic /proc and /sys trees of machines
//! bigger than the one at hand, for tests of `host`,
//! `doctor` and `tune` with `--root`. CPUs are numbered as Linux numbers them on common two-socket
//! x86 machines: all first hardware threads (package by package), then all second threads, so
//! CPU 0's SMT sibling is CPU `packages * cores_per_package`.

/// Each named test function `fn NAME(io: IoChoice)` becomes two tests, `epoll::NAME` and
/// `uring::NAME`: the same behaviour on both event loops. `IoChoice` is the caller's (the load
/// engine's or the server's), in scope where the macro is used.
#[macro_export]
macro_rules! on_both_loops {
    ($($name:ident),* $(,)?) => {
        mod epoll {
            $(#[test]
            fn $name() {
                super::$name(super::IoChoice::Epoll)
            })*
        }
        mod uring {
            $(#[test]
            fn $name() {
                super::$name(super::IoChoice::Uring)
            })*
        }
    };
}

pub mod delay;
pub mod grpcio;

use qpslab_host::cpuset::CpuSet;
use qpslab_host::parse::{CpuTimes, SockStat};
use std::collections::BTreeMap;
use std::io;
use std::path::Path;

/// How a NIC names its IRQ vectors in /proc/interrupts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IrqNaming {
    /// `IF-TxRx-N` (i40e, ixgbe, ice).
    TxRx,
    /// `mlx5_compN@pci:ADDR` plus one `mlx5_async` vector.
    Mlx5,
    /// `virtioX-input.N` / `virtioX-output.N` plus a config vector.
    Virtio,
}

/// A NIC of the synthetic machine.
#[derive(Debug, Clone)]
pub struct NicSpec {
    pub name: String,
    pub driver: String,
    pub node: Option<usize>,
    pub queues: usize,
    pub naming: IrqNaming,
}

/// The synthetic machine.
#[derive(Debug, Clone)]
pub struct Shape {
    pub packages: usize,
    pub cores_per_package: usize,
    pub threads_per_core: usize,
    /// One NUMA node per package when true, else a single node.
    pub node_per_package: bool,
    pub nics: Vec<NicSpec>,
}

impl Shape {
    /// 2 NUMA nodes x 16 CPUs (8 cores x 2 threads each), NICs eth0 (node 0) and eth1 (node 1)
    /// with 2 combined queues each.
    pub fn two_nodes_two_nics() -> Shape {
        Shape {
            packages: 2,
            cores_per_package: 8,
            threads_per_core: 2,
            node_per_package: true,
            nics: vec![
                NicSpec {
                    name: "eth0".into(),
                    driver: "i40e".into(),
                    node: Some(0),
                    queues: 2,
                    naming: IrqNaming::TxRx,
                },
                NicSpec {
                    name: "eth1".into(),
                    driver: "mlx5_core".into(),
                    node: Some(1),
                    queues: 2,
                    naming: IrqNaming::Mlx5,
                },
            ],
        }
    }

    /// 24 CPUs in 2 packages with SMT (6 cores x 2 threads each), one NIC with 24 queues.
    pub fn two_packages_24_queues() -> Shape {
        Shape {
            packages: 2,
            cores_per_package: 6,
            threads_per_core: 2,
            node_per_package: true,
            nics: vec![NicSpec {
                name: "eth0".into(),
                driver: "ixgbe".into(),
                node: Some(0),
                queues: 24,
                naming: IrqNaming::TxRx,
            }],
        }
    }

    /// 2 CPUs, no SMT, one virtio NIC with one queue (like the machine the tests run on).
    pub fn small_virtio() -> Shape {
        Shape {
            packages: 1,
            cores_per_package: 2,
            threads_per_core: 1,
            node_per_package: true,
            nics: vec![NicSpec {
                name: "eth0".into(),
                driver: "virtio_net".into(),
                node: None,
                queues: 1,
                naming: IrqNaming::Virtio,
            }],
        }
    }

    /// Number of logical CPUs.
    pub fn cpus(&self) -> usize {
        self.packages * self.cores_per_package * self.threads_per_core
    }

    /// (package, core, thread) of a CPU number.
    pub fn place(&self, cpu: usize) -> (usize, usize, usize) {
        let per_thread = self.packages * self.cores_per_package;
        let thread = cpu / per_thread;
        let rest = cpu % per_thread;
        (rest / self.cores_per_package, rest % self.cores_per_package, thread)
    }

    fn node_of(&self, cpu: usize) -> usize {
        if self.node_per_package {
            self.place(cpu).0
        } else {
            0
        }
    }

    /// The IRQ vectors: (irq number, action name, NIC index) in /proc/interrupts order.
    pub fn irqs(&self) -> Vec<(u32, String, usize)> {
        let mut out = Vec::new();
        let mut irq = 100u32;
        for (n, nic) in self.nics.iter().enumerate() {
            let pci = format!("0000:{:02x}:00.0", 0x3b + n);
            let mut push = |name: String| {
                out.push((irq, name, n));
                irq += 1;
            };
            match nic.naming {
                IrqNaming::TxRx => {
                    (0..nic.queues).for_each(|q| push(format!("{}-TxRx-{q}", nic.name)))
                }
                IrqNaming::Mlx5 => {
                    push(format!("mlx5_async0@pci:{pci}"));
                    (0..nic.queues).for_each(|q| push(format!("mlx5_comp{q}@pci:{pci}")));
                }
                IrqNaming::Virtio => {
                    push(format!("virtio{n}-config"));
                    for q in 0..nic.queues {
                        push(format!("virtio{n}-input.{q}"));
                        push(format!("virtio{n}-output.{q}"));
                    }
                }
            }
        }
        out
    }

    /// Writes the static part of the tree (topology, NICs, IRQ affinities: every NIC IRQ
    /// allowed on all CPUs and delivered to CPU 0, RPS and XPS off, kernel-default sysctls) and
    /// idle counters.
    pub fn write(&self, dir: &Path) -> io::Result<()> {
        let n = self.cpus();
        let all: CpuSet = (0..n).collect();
        let w = |rel: &str, text: &str| write(dir, rel, text);
        w("sys/devices/system/cpu/online", &format!("{}\n", all.to_list()))?;
        w("sys/devices/system/cpu/possible", &format!("{}\n", all.to_list()))?;
        for cpu in 0..n {
            let (p, c, _) = self.place(cpu);
            let siblings: CpuSet =
                (0..n).filter(|&o| self.place(o).0 == p && self.place(o).1 == c).collect();
            let t = format!("sys/devices/system/cpu/cpu{cpu}/topology");
            w(&format!("{t}/physical_package_id"), &format!("{p}\n"))?;
            w(&format!("{t}/core_id"), &format!("{c}\n"))?;
            w(&format!("{t}/thread_siblings_list"), &format!("{}\n", siblings.to_list()))?;
        }
        let nodes = if self.node_per_package { self.packages } else { 1 };
        for node in 0..nodes {
            let cpus: CpuSet = (0..n).filter(|&c| self.node_of(c) == node).collect();
            w(
                &format!("sys/devices/system/node/node{node}/cpulist"),
                &format!("{}\n", cpus.to_list()),
            )?;
        }
        w("sys/devices/system/clocksource/clocksource0/current_clocksource", "tsc\n")?;
        w(
            "sys/devices/system/clocksource/clocksource0/available_clocksource",
            "tsc hpet acpi_pm \n",
        )?;
        for (name, value) in [
            ("net/core/somaxconn", "4096"),
            ("net/core/netdev_max_backlog", "1000"),
            ("net/core/netdev_budget", "300"),
            ("net/core/netdev_budget_usecs", "2000"),
            ("net/core/rps_sock_flow_entries", "0"),
            ("net/core/busy_poll", "0"),
            ("net/core/busy_read", "0"),
            ("net/ipv4/tcp_max_syn_backlog", "1024"),
            ("net/ipv4/tcp_syncookies", "1"),
            ("net/ipv4/tcp_tw_reuse", "2"),
            ("net/ipv4/tcp_fin_timeout", "60"),
            ("net/ipv4/tcp_timestamps", "1"),
            ("net/ipv4/tcp_max_tw_buckets", "131072"),
            ("net/ipv4/tcp_mem", "287901\t383869\t575802"),
            ("net/ipv4/ip_local_port_range", "32768\t60999"),
            ("fs/file-max", "9223372036854775807"),
            ("fs/nr_open", "1048576"),
        ] {
            w(&format!("proc/sys/{name}"), &format!("{value}\n"))?;
        }
        let irqs = self.irqs();
        for (irq, _, _) in &irqs {
            w(&format!("proc/irq/{irq}/smp_affinity"), &format!("{}\n", all.to_mask(n)))?;
            w(
                &format!("proc/irq/{irq}/effective_affinity"),
                &format!("{}\n", CpuSet::from_iter([0]).to_mask(n)),
            )?;
        }
        for (i, nic) in self.nics.iter().enumerate() {
            let base = format!("sys/class/net/{}", nic.name);
            w(&format!("{base}/operstate"), "up\n")?;
            w(&format!("{base}/mtu"), "1500\n")?;
            w(&format!("{base}/speed"), "25000\n")?;
            w(&format!("{base}/device/uevent"), &format!("DRIVER={}\n", nic.driver))?;
            w(
                &format!("{base}/device/numa_node"),
                &format!("{}\n", nic.node.map_or(-1, |n| n as i64)),
            )?;
            for (irq, _, _) in irqs.iter().filter(|(_, _, n)| *n == i) {
                w(&format!("{base}/device/msi_irqs/{irq}"), "msix\n")?;
            }
            for q in 0..nic.queues {
                w(
                    &format!("{base}/queues/rx-{q}/rps_cpus"),
                    &format!("{}\n", CpuSet::new().to_mask(n)),
                )?;
                w(&format!("{base}/queues/rx-{q}/rps_flow_cnt"), "0\n")?;
                w(
                    &format!("{base}/queues/tx-{q}/xps_cpus"),
                    &format!("{}\n", CpuSet::new().to_mask(n)),
                )?;
            }
        }
        Counters::idle(self).write(self, dir)
    }
}

/// Counter files of a synthetic machine at one instant; tests edit one and write it again to
/// make the counters move between two samples.
#[derive(Debug, Clone, Default)]
pub struct Counters {
    pub cpu: Vec<CpuTimes>,
    pub net_rx: Vec<u64>,
    pub net_tx: Vec<u64>,
    /// Interrupt count per CPU for each IRQ number.
    pub irq_counts: BTreeMap<u32, Vec<u64>>,
    /// (processed, dropped, time_squeeze) per CPU.
    pub softnet: Vec<(u64, u64, u64)>,
    pub tcpext: BTreeMap<&'static str, i64>,
    /// /proc/net/snmp's `Udp` counters and /proc/net/snmp6's `Udp6` ones, by name.
    pub udp: BTreeMap<&'static str, i64>,
    pub udp6: BTreeMap<&'static str, i64>,
    pub retrans_segs: i64,
    pub out_segs: i64,
    pub sockstat: SockStat,
    /// Per interface: (rx_bytes, rx_packets, tx_bytes, tx_packets).
    pub dev: BTreeMap<String, (u64, u64, u64, u64)>,
    /// /proc/pressure/memory's `some total=` (written only when not zero: a kernel without
    /// PSI has no such file).
    pub memory_pressure_us: u64,
    pub vm: qpslab_host::parse::VmStat,
    /// The conntrack table (not written when None: the module is not loaded).
    pub conntrack: Option<qpslab_host::parse::Conntrack>,
}

use qpslab_host::sample::{TCPEXT, UDP};

impl Counters {
    /// All counters zero.
    pub fn idle(shape: &Shape) -> Counters {
        let n = shape.cpus();
        let mut dev: BTreeMap<String, (u64, u64, u64, u64)> =
            shape.nics.iter().map(|nic| (nic.name.clone(), (0, 0, 0, 0))).collect();
        dev.insert("lo".into(), (0, 0, 0, 0));
        Counters {
            cpu: (0..n).map(|cpu| CpuTimes { cpu, ..CpuTimes::default() }).collect(),
            net_rx: vec![0; n],
            net_tx: vec![0; n],
            irq_counts: shape.irqs().iter().map(|(irq, _, _)| (*irq, vec![0; n])).collect(),
            softnet: vec![(0, 0, 0); n],
            tcpext: TCPEXT.iter().map(|k| (*k, 0)).collect(),
            udp: UDP.iter().map(|k| (*k, 0)).collect(),
            udp6: UDP.iter().map(|k| (*k, 0)).collect(),
            retrans_segs: 0,
            out_segs: 0,
            sockstat: SockStat::default(),
            dev,
            memory_pressure_us: 0,
            vm: qpslab_host::parse::VmStat::default(),
            conntrack: None,
        }
    }

    /// Adds `ticks` to every CPU with the split given per CPU by `f(cpu) -> (user, system,
    /// softirq, idle)` shares of 100.
    pub fn advance_cpus(&mut self, ticks: u64, f: impl Fn(usize) -> (u64, u64, u64, u64)) {
        for t in &mut self.cpu {
            let (u, s, si, i) = f(t.cpu);
            t.user += ticks * u / 100;
            t.system += ticks * s / 100;
            t.softirq += ticks * si / 100;
            t.idle += ticks * i / 100;
        }
    }

    /// Writes memory pressure, /proc/vmstat and the conntrack table's files.
    fn write_host_limits(&self, dir: &Path) -> io::Result<()> {
        if self.memory_pressure_us > 0 {
            write(
                dir,
                "proc/pressure/memory",
                &format!(
                    "some avg10=0.00 avg60=0.00 avg300=0.00 total={}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
                    self.memory_pressure_us
                ),
            )?;
        }
        let v = &self.vm;
        write(
            dir,
            "proc/vmstat",
            &format!(
                "allocstall_normal {}\npgmajfault {}\npgscan_direct {}\n",
                v.alloc_stalls, v.major_faults, v.direct_scans
            ),
        )?;
        if let Some(c) = &self.conntrack {
            write(dir, "proc/sys/net/netfilter/nf_conntrack_count", &format!("{}\n", c.entries))?;
            write(dir, "proc/sys/net/netfilter/nf_conntrack_max", &format!("{}\n", c.max))?;
            write(
                dir,
                "proc/net/stat/nf_conntrack",
                &format!(
                    "entries insert_failed drop early_drop\n{:08x} 00000000 {:08x} 00000000\n",
                    c.entries, c.dropped
                ),
            )?;
        }
        Ok(())
    }

    /// Writes the counter files.
    pub fn write(&self, shape: &Shape, dir: &Path) -> io::Result<()> {
        let n = shape.cpus();
        let header: String = (0..n).map(|c| format!("{:>11}", format!("CPU{c}"))).collect();
        let mut stat = String::from("cpu  0 0 0 0 0 0 0 0 0 0\n");
        for t in &self.cpu {
            stat += &format!(
                "cpu{} {} {} {} {} {} {} {} {} 0 0\n",
                t.cpu, t.user, t.nice, t.system, t.idle, t.iowait, t.irq, t.softirq, t.steal
            );
        }
        write(dir, "proc/stat", &(stat + "intr 0\nctxt 0\n"))?;
        let row = |v: &[u64]| v.iter().map(|x| format!("{x:>11}")).collect::<String>();
        write(
            dir,
            "proc/softirqs",
            &format!(
                "      {header}\n          HI:{}\n      NET_TX:{}\n      NET_RX:{}\n",
                row(&vec![0; n]),
                row(&self.net_tx),
                row(&self.net_rx)
            ),
        )?;
        let mut ints = format!("      {header}\n");
        for (irq, name, _) in shape.irqs() {
            let counts = self.irq_counts.get(&irq).cloned().unwrap_or_else(|| vec![0; n]);
            ints += &format!(
                "{irq:>4}:{} IR-PCI-MSIX-0000:3b:00.0 {}-edge      {name}\n",
                row(&counts),
                irq - 100
            );
        }
        ints += &format!(" LOC:{}   Local timer interrupts\n", row(&vec![0; n]));
        write(dir, "proc/interrupts", &ints)?;
        let softnet: String = self
            .softnet
            .iter()
            .enumerate()
            .map(|(cpu, (p, d, s))| format!("{p:08x} {d:08x} {s:08x} 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 {cpu:08x} 00000000 00000000\n"))
            .collect();
        write(dir, "proc/net/softnet_stat", &softnet)?;
        let names: Vec<&str> = self.tcpext.keys().copied().collect();
        let values: Vec<String> = self.tcpext.values().map(|v| v.to_string()).collect();
        write(
            dir,
            "proc/net/netstat",
            &format!(
                "TcpExt: SyncookiesSent {}\nTcpExt: 0 {}\n",
                names.join(" "),
                values.join(" ")
            ),
        )?;
        write(
            dir,
            "proc/net/snmp",
            &format!(
                "Tcp: RtoAlgorithm OutSegs RetransSegs\nTcp: 1 {} {}\nUdp: {}\nUdp: {}\n",
                self.out_segs,
                self.retrans_segs,
                self.udp.keys().copied().collect::<Vec<_>>().join(" "),
                self.udp.values().map(ToString::to_string).collect::<Vec<_>>().join(" "),
            ),
        )?;
        let udp6: String = self.udp6.iter().map(|(k, v)| format!("Udp6{k:<24}\t{v}\n")).collect();
        write(dir, "proc/net/snmp6", &format!("Ip6InReceives                   \t0\n{udp6}"))?;
        let s = &self.sockstat;
        write(
            dir,
            "proc/net/sockstat",
            &format!(
                "sockets: used 10\nTCP: inuse {} orphan {} tw {} alloc {} mem {}\n",
                s.tcp_inuse,
                s.tcp_orphan,
                s.tcp_tw,
                s.tcp_alloc,
                s.tcp_mem.max(1)
            ),
        )?;
        self.write_host_limits(dir)?;
        let mut dev = String::from("Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame compressed multicast|bytes packets errs drop fifo colls carrier compressed\n");
        for (name, (rb, rp, tb, tp)) in &self.dev {
            dev += &format!("{name:>6}: {rb} {rp} 0 0 0 0 0 0 {tb} {tp} 0 0 0 0 0 0\n");
        }
        write(dir, "proc/net/dev", &dev)
    }
}

/// Every file under `dir` with its bytes: tests compare two of these to show that a tree is
/// byte-identical after apply and revert.
pub fn snapshot(dir: &Path) -> io::Result<BTreeMap<std::path::PathBuf, Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p)?);
            }
        }
    }
    Ok(out)
}

fn write(dir: &Path, rel: &str, text: &str) -> io::Result<()> {
    let path = dir.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text)
}

/// Writes (or rewrites) a process under `proc/PID`: its threads' CPU ticks, `fds` open
/// descriptors and a soft RLIMIT_NOFILE of `nofile`.
pub fn write_process(
    dir: &Path,
    pid: u32,
    comm: &str,
    threads: &[(u32, u64)],
    fds: usize,
    nofile: u64,
) -> io::Result<()> {
    let base = format!("proc/{pid}");
    write(dir, &format!("{base}/comm"), &format!("{comm}\n"))?;
    for (tid, ticks) in threads {
        write(
            dir,
            &format!("{base}/task/{tid}/stat"),
            &format!("{tid} ({comm}) S 1 1 1 0 -1 0 0 0 0 0 {ticks} 0 0 0 20 0 1 0 1 0 0\n"),
        )?;
    }
    let total: u64 = threads.iter().map(|t| t.1).sum();
    write(
        dir,
        &format!("{base}/stat"),
        &format!("{pid} ({comm}) S 1 1 1 0 -1 0 0 0 0 0 {total} 0 0 0 20 0 1 0 1 0 0\n"),
    )?;
    let fd_dir = dir.join(format!("{base}/fd"));
    let _ = std::fs::remove_dir_all(&fd_dir);
    std::fs::create_dir_all(&fd_dir)?;
    for fd in 0..fds {
        std::fs::write(fd_dir.join(fd.to_string()), "")?;
    }
    write(
        dir,
        &format!("{base}/limits"),
        &format!("Limit                     Soft Limit           Hard Limit           Units\nMax open files            {nofile}                 {nofile}                 files\n"),
    )
}

/// Replays the committed fuzz corpus of `target` (every file of `fuzz/corpus/TARGET`) through
/// `f`, the body the fuzzer runs; at least `min` inputs. A failing input is named.
pub fn replay_corpus(target: &str, min: usize, f: fn(&[u8])) {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut n = 0;
    for entry in entries {
        let path = entry.unwrap_or_else(|e| panic!("{}: {e}", dir.display())).path();
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if std::panic::catch_unwind(|| f(&data)).is_err() {
            panic!("{} fails the {target} target", path.display());
        }
        n += 1;
    }
    assert!(n >= min, "{target}: {n} inputs in {}, expected {min} or more", dir.display());
}

/// The python of the venv scripts/test makes (aioquic, grpcio, grpcio-reflection):
/// `QPSLAB_AIOQUIC_PYTHON`, else ~/.cache/qpslab/aioquic/bin/python.
pub fn venv_python() -> String {
    std::env::var("QPSLAB_AIOQUIC_PYTHON").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!("{home}/.cache/qpslab/aioquic/bin/python")
    })
}
