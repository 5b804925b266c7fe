//! The doctor's summary of a series of samples: each CPU's time split, rates of the kernel's
//! counters over the window, each watched process's CPU use and the CPUs it could use, and a
//! row per interval beside the totals.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use qpslab_host::cpuset::CpuSet;
use qpslab_host::parse::IfCounters;
use qpslab_host::sample::{NetCounters, ProcSample, Role, Sample};

/// One CPU's time split over the window, as shares of 1.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct CpuShare {
    pub cpu: usize,
    pub user: f64,
    pub system: f64,
    pub softirq: f64,
    pub irq: f64,
    pub idle: f64,
    /// Share the hypervisor gave another guest while this CPU had work (`steal`): counted
    /// busy, since none of this host's tasks could run.
    #[serde(default)]
    pub steal: f64,
}

impl CpuShare {
    /// Share of the window the CPU was not idle.
    pub fn busy(&self) -> f64 {
        1.0 - self.idle
    }
}

/// A watched process over the window.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcSummary {
    pub pid: u32,
    pub role: Role,
    pub comm: String,
    /// Its parent: a server's worker processes have its master as theirs.
    #[serde(default)]
    pub ppid: u32,
    /// The busiest thread's pool, when its name is numbered (`qpslab-serve-0`,
    /// `http-nio-exec-3`) and others alive at the end share its name but for the number: each
    /// one's CPU over the window, busiest first. Empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pool: Vec<f64>,
    /// CPU used, in CPUs (1.0 = one CPU fully busy).
    pub cpu: f64,
    /// The busiest thread, in CPUs.
    pub busiest_thread: f64,
    /// Threads that used at least a tenth of a CPU.
    pub busy_threads: usize,
    /// cpu / the CPUs it could use (busy threads, capped by their affinity).
    pub busy_ratio: f64,
    /// Its threads took turns on one CPU: two busy threads or more, CPUs to run more of them
    /// at once, and one CPU's worth in all, steadily (every interval of half a second or more
    /// within [`SERIAL_BAND`] of one CPU): a lock held across the work (a global interpreter
    /// lock, a global mutex) lets one run at a time. Servers only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub serial: bool,
    /// The CPUs its busy threads may run on (all its threads' when none was busy); None when
    /// the affinities could not be read.
    pub cpus: Option<CpuSet>,
    /// Mean busy share (any work, its own or not) of those CPUs over the window: near 1 means
    /// the process could not have had more CPU there, whatever its own share.
    pub cpus_busy: Option<f64>,
    pub open_fds: Option<usize>,
    pub nofile_soft: Option<u64>,
    /// A cgroup CPU quota over it, and how often it held the process back in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttling: Option<qpslab_sys::cgroup::Throttling>,
    /// Its cgroup's memory limit hit most in the window (the tightest when none was), read
    /// at the window's ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<qpslab_sys::memlimit::LimitUse>,
    /// Seconds its threads together spent runnable and waiting for a CPU over the window
    /// (schedstat's run delay); None when the kernel keeps no schedstats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_wait_s: Option<f64>,
    /// Of its threads' readings at the samples, the share in uninterruptible sleep (`D`:
    /// waiting on the disk, mostly), and how many readings that is.
    #[serde(default)]
    pub blocked_share: f64,
    #[serde(default)]
    pub thread_readings: usize,
    /// Bytes it caused to be written to and read from storage in the window (/proc/PID/io).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_written: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_read: Option<u64>,
}

/// Readings of the run's connections by TCP's account ([`Summary::tcp_readings`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpReadings {
    pub server: u64,
    pub generator: u64,
}

/// One block device over the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiskRate {
    pub name: String,
    /// Share of the window it had I/O in flight (iostat's %util).
    pub busy: f64,
    /// Mean I/Os in flight (iostat's aqu-sz).
    pub queue: f64,
    pub writes_per_s: f64,
    pub reads_per_s: f64,
    /// Bytes a second written and read.
    pub written_per_s: f64,
    pub read_per_s: f64,
    /// Cache flushes a second (fsync reaching it), and their mean time in ms.
    pub flushes_per_s: f64,
    pub flush_ms: f64,
    /// Mean time of a write in ms (iostat's w_await).
    pub write_ms: f64,
}

impl ProcSummary {
    /// A cgroup quota smaller than its busy threads set its capacity.
    pub fn quota_bound(&self) -> bool {
        self.throttling.as_ref().is_some_and(|t| t.quota_cpus < self.busy_threads.max(1) as f64)
    }
}

/// One interface's rates.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IfRate {
    pub name: String,
    pub rx_pps: f64,
    pub tx_pps: f64,
    pub rx_bytes_per_s: f64,
    pub tx_bytes_per_s: f64,
    /// Packets the interface dropped in the window (/proc/net/dev), each way.
    #[serde(default)]
    pub rx_drop: u64,
    #[serde(default)]
    pub tx_drop: u64,
}

/// One qdisc over the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QdiscRate {
    pub iface: String,
    pub kind: String,
    /// The root qdisc of its interface (what every packet the interface sends goes through).
    pub root: bool,
    /// A shaper's configured rate, in bytes per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_bytes_per_s: Option<u64>,
    /// Bytes per second it passed.
    pub bytes_per_s: f64,
    /// Deltas over the window.
    pub drops: u64,
    pub overlimits: u64,
    pub requeues: u64,
    /// The largest backlog seen at a sample, in bytes.
    pub backlog_max: u64,
}

/// A driver counter of a limit hit or a loss that moved in the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NicCounter {
    pub iface: String,
    pub name: String,
    pub delta: u64,
}

/// One NIC queue IRQ's rate per CPU.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IrqRate {
    pub irq: u32,
    pub name: String,
    pub per_cpu_per_s: BTreeMap<usize, f64>,
}

/// Per-interval row (provenance: the raw series beside the summary).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IntervalRow {
    pub t_s: f64,
    /// The CPUs of the per-CPU columns below, in order.
    pub cpus: Vec<usize>,
    /// Busy share (1 - idle) per CPU.
    pub cpu_busy: Vec<f64>,
    /// User (with nice), system and softirq shares per CPU.
    pub user: Vec<f64>,
    pub system: Vec<f64>,
    pub softirq: Vec<f64>,
    /// Packets per second, all interfaces, both ways.
    pub pps: f64,
    pub server_cpu: f64,
    pub client_cpu: f64,
}

/// The samples' summary.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Summary {
    pub duration_s: f64,
    pub samples: usize,
    pub cpus: Vec<CpuShare>,
    pub net_rx_per_s: BTreeMap<usize, f64>,
    pub net_tx_per_s: BTreeMap<usize, f64>,
    pub irqs: Vec<IrqRate>,
    pub softnet_processed_per_s: BTreeMap<usize, f64>,
    pub softnet_dropped: u64,
    pub softnet_time_squeeze: u64,
    /// Deltas of the TcpExt counters, and RetransSegs / OutSegs: ours and those of the
    /// [`Summary::server_namespaces`].
    pub tcp: BTreeMap<String, i64>,
    /// Datagrams dropped on arrival at the followed processes' own UDP sockets over the window
    /// (/proc/PID/net/udp's `drops`); None when none of them held a UDP socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_own_drops: Option<u64>,
    /// The network namespaces other than ours that followed servers live in (containers),
    /// and those the followed generators live in (a load run with `ip netns exec`), whose
    /// counters, interfaces and connections were read with ours.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_namespaces: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub generator_namespaces: Vec<String>,
    pub tcp_inuse: u64,
    pub tcp_tw_max: u64,
    pub tcp_orphan_max: u64,
    /// The most pages TCP's buffers held at a sample (sockstat `mem`; net.ipv4.tcp_mem's unit).
    #[serde(default)]
    pub tcp_mem_max: u64,
    pub interfaces: Vec<IfRate>,
    pub processes: Vec<ProcSummary>,
    /// The busiest processes not followed (at least [`OTHER_CPU`] CPUs over the window), most
    /// CPU first: who else used the CPUs.
    #[serde(default)]
    pub others: Vec<OtherProc>,
    /// At the end of the window, the destinations holding most ephemeral ports (read only
    /// when the sockets could fill half the range).
    #[serde(default)]
    pub dest_ports: Vec<qpslab_host::sample::DestPorts>,
    /// Share of the window in which at least one runnable task waited for a CPU (PSI's
    /// `some`, host-wide): the CPUs' saturation, whoever was waiting. None without PSI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_pressure: Option<f64>,
    /// Share of the window in which at least one task waited for I/O (PSI io `some`,
    /// host-wide). None without PSI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_pressure: Option<f64>,
    /// Share of the window in which at least one task waited for memory (PSI memory
    /// `some`, host-wide). None without PSI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_pressure: Option<f64>,
    /// Memory short of demand over the window (/proc/vmstat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<VmRate>,
    /// The conntrack table over the window, where netfilter's conntrack is loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conntrack: Option<ConntrackUse>,
    /// TCP's account of the run's connections: readings (connections x samples) of the
    /// server's side and of the generator's; None when no sample read them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_readings: Option<TcpReadings>,
    /// Block devices that did I/O in the window.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<DiskRate>,
    /// Qdiscs that shape, queued, dropped or held packets back in the window.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub qdiscs: Vec<QdiscRate>,
    /// Driver limit and loss counters that moved in the window.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nic_counters: Vec<NicCounter>,
    /// At the window's end, listeners with connections waiting to be accepted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listen_queues: Vec<qpslab_host::sample::ListenQueue>,
    /// Listeners seen with their accept queue at its backlog in the window's samples.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listen_full: Vec<ListenFull>,
    pub intervals: Vec<IntervalRow>,
}

/// Faults, reclaim and stalls a second over the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct VmRate {
    /// Page faults that had to read from storage.
    pub major_faults_per_s: f64,
    /// Pages scanned by allocating tasks themselves (direct reclaim: the task waits).
    pub direct_scans_per_s: f64,
    /// Allocations that stalled for reclaim, in the window.
    pub alloc_stalls: u64,
}

/// The conntrack table: its entries at the window's start or end, whichever is more, its size,
/// and the packets it refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConntrackUse {
    pub peak: u64,
    pub max: u64,
    pub dropped: u64,
}

/// A listener whose accept queue was seen at its backlog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListenFull {
    pub local: std::net::SocketAddr,
    pub backlog: u32,
    /// Samples that saw it full, of `samples`.
    pub full: usize,
    pub samples: usize,
    /// The processes holding it (PID, comm).
    pub holders: Vec<(u32, String)>,
}

/// The listeners the samples saw full, with their holders (read at the last sample).
fn listen_full(samples: &[Sample]) -> Vec<ListenFull> {
    let Some(last) = samples.last() else { return Vec::new() };
    let mut out: Vec<ListenFull> = Vec::new();
    for l in samples.iter().flat_map(|s| &s.listen_full) {
        match out.iter_mut().find(|o| o.local == l.local) {
            Some(o) => o.full += 1,
            None => out.push(ListenFull {
                local: l.local,
                backlog: l.backlog,
                full: 1,
                samples: samples.len(),
                holders: last.listen_full_holders.get(&l.inode).cloned().unwrap_or_default(),
            }),
        }
    }
    out
}

/// A process the doctor did not follow, by its CPU use over the window.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OtherProc {
    pub pid: u32,
    pub comm: String,
    /// In CPUs.
    pub cpu: f64,
}

/// A process not followed that used at least this many CPUs is named among the others.
pub const OTHER_CPU: f64 = 0.05;

/// The processes in both censuses, not followed, by CPU used between them.
fn others(a: &Sample, b: &Sample, roles: &BTreeMap<u32, Role>, hz: f64) -> Vec<OtherProc> {
    let secs = (b.at - a.at).as_secs_f64().max(1e-9);
    let mut v: Vec<OtherProc> = b
        .census
        .iter()
        .filter(|(pid, _)| !roles.contains_key(pid))
        .filter_map(|(pid, (comm, ticks))| {
            let (_, before) = a.census.get(pid)?;
            let cpu = ticks.saturating_sub(*before) as f64 / hz / secs;
            (cpu >= OTHER_CPU).then(|| OtherProc { pid: *pid, comm: comm.clone(), cpu })
        })
        .collect();
    v.sort_by(|x, y| y.cpu.total_cmp(&x.cpu));
    v.truncate(5);
    v
}

pub(crate) fn per_s(delta: u64, secs: f64) -> f64 {
    delta as f64 / secs.max(1e-9)
}

pub(crate) fn share(part: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        part as f64 / total as f64
    }
}

pub(crate) fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// Summarises the samples (at least two).
pub fn summarize(samples: &[Sample], roles: &BTreeMap<u32, Role>, tick_hz: f64) -> Summary {
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return Summary::default();
    };
    let secs = (last.at - first.at).as_secs_f64();
    let cpus = cpu_shares(first, last);
    let rate_map = |a: &BTreeMap<usize, u64>, b: &BTreeMap<usize, u64>| {
        b.iter()
            .map(|(c, v)| (*c, per_s(v.saturating_sub(a.get(c).copied().unwrap_or(0)), secs)))
            .collect()
    };
    let irqs = last
        .irqs
        .iter()
        .map(|l| {
            let before = first.irqs.iter().find(|f| f.irq == l.irq);
            IrqRate {
                irq: l.irq,
                name: l.name.clone(),
                per_cpu_per_s: l
                    .counts
                    .iter()
                    .map(|(c, v)| {
                        let b = before.and_then(|f| f.counts.get(c)).copied().unwrap_or(0);
                        (*c, per_s(v.saturating_sub(b), secs))
                    })
                    .collect(),
            }
        })
        .collect();
    let softnet_delta = |f: fn(&qpslab_host::parse::SoftnetRow) -> u64| -> BTreeMap<usize, u64> {
        last.softnet
            .iter()
            .map(|r| {
                let b = first.softnet.iter().find(|x| x.cpu == r.cpu).map_or(0, f);
                (r.cpu, f(r).saturating_sub(b))
            })
            .collect()
    };
    let mut tcp: BTreeMap<String, i64> = last
        .tcpext
        .iter()
        .map(|(k, v)| (k.clone(), v - first.tcpext.get(k).copied().unwrap_or(0)))
        .collect();
    tcp.insert("RetransSegs".into(), last.retrans_segs - first.retrans_segs);
    tcp.insert("OutSegs".into(), last.out_segs - first.out_segs);
    add_namespaces(samples, &mut tcp);
    let in_namespaces = |s: &Sample, f: fn(&qpslab_host::parse::SockStat) -> u64| {
        f(&s.sockstat) + s.namespaces.iter().map(|n| f(&n.sockstat)).sum::<u64>()
    };
    let tcp_readings = qpslab_host::sample::TcpSides::over_window(samples)
        .map(|a| TcpReadings { server: a.server.connections, generator: a.client.connections });
    Summary {
        udp_own_drops: last.procs.iter().fold(None, |acc: Option<u64>, (pid, p)| {
            let Some(now) = p.udp_drops else { return acc };
            let before = first.procs.get(pid).and_then(|q| q.udp_drops).unwrap_or(0);
            Some(acc.unwrap_or(0) + now.saturating_sub(before))
        }),
        tcp_readings,
        server_namespaces: namespaces(samples)
            .filter(|(_, b, _)| b.role == Role::Server)
            .map(|(_, b, _)| b.ns.clone())
            .collect(),
        generator_namespaces: namespaces(samples)
            .filter(|(_, b, _)| b.role == Role::Client)
            .map(|(_, b, _)| b.ns.clone())
            .collect(),
        duration_s: secs,
        samples: samples.len(),
        cpus,
        net_rx_per_s: rate_map(&first.net_rx, &last.net_rx),
        net_tx_per_s: rate_map(&first.net_tx, &last.net_tx),
        irqs,
        softnet_processed_per_s: softnet_delta(|r| r.processed)
            .into_iter()
            .map(|(c, d)| (c, per_s(d, secs)))
            .collect(),
        softnet_dropped: softnet_delta(|r| r.dropped).values().sum(),
        softnet_time_squeeze: softnet_delta(|r| r.time_squeeze).values().sum(),
        tcp,
        tcp_inuse: in_namespaces(last, |s| s.tcp_inuse),
        tcp_tw_max: samples.iter().map(|s| in_namespaces(s, |s| s.tcp_tw)).max().unwrap_or(0),
        tcp_orphan_max: samples.iter().map(|s| s.sockstat.tcp_orphan).max().unwrap_or(0),
        tcp_mem_max: samples.iter().map(|s| s.sockstat.tcp_mem).max().unwrap_or(0),
        interfaces: if_rates(samples, secs),
        processes: proc_summaries(&samples.iter().collect::<Vec<_>>(), roles, tick_hz),
        others: others(first, last, roles, tick_hz),
        dest_ports: last.dest_ports.clone(),
        cpu_pressure: pressure(first.cpu_pressure_us, last.cpu_pressure_us, secs),
        io_pressure: pressure(first.io_pressure_us, last.io_pressure_us, secs),
        memory_pressure: pressure(first.memory_pressure_us, last.memory_pressure_us, secs),
        vm: match (first.vm, last.vm) {
            (Some(a), Some(b)) => Some(VmRate {
                major_faults_per_s: per_s(b.major_faults.saturating_sub(a.major_faults), secs),
                direct_scans_per_s: per_s(b.direct_scans.saturating_sub(a.direct_scans), secs),
                alloc_stalls: b.alloc_stalls.saturating_sub(a.alloc_stalls),
            }),
            _ => None,
        },
        conntrack: match (first.conntrack, last.conntrack) {
            (Some(a), Some(b)) => Some(ConntrackUse {
                peak: a.entries.max(b.entries),
                max: b.max,
                dropped: b.dropped.saturating_sub(a.dropped),
            }),
            _ => None,
        },
        disks: disk_rates(first, last, secs),
        qdiscs: qdisc_rates(samples, secs),
        nic_counters: nic_counters(first, last),
        listen_queues: last.listen_queues.clone(),
        listen_full: listen_full(samples),
        intervals: samples.windows(2).map(|w| interval_row(&w[0], &w[1], roles, tick_hz)).collect(),
    }
}

/// A PSI `some` total's share of the window.
fn pressure(first: Option<u64>, last: Option<u64>, secs: f64) -> Option<f64> {
    match (first, last) {
        (Some(a), Some(b)) if secs > 0.0 => {
            Some((b.saturating_sub(a) as f64 / 1e6 / secs).min(1.0))
        }
        _ => None,
    }
}

/// The block devices that did I/O between the first and last sample.
fn disk_rates(first: &Sample, last: &Sample, secs: f64) -> Vec<DiskRate> {
    let secs = secs.max(1e-9);
    last.disks
        .iter()
        .filter_map(|b| {
            let a = first.disks.iter().find(|a| a.name == b.name)?;
            let d = |f: fn(&qpslab_host::parse::DiskStat) -> u64| f(b).saturating_sub(f(a));
            let (writes, flushes) = (d(|x| x.writes), d(|x| x.flushes));
            (d(|x| x.reads) + writes + flushes > 0).then(|| DiskRate {
                name: b.name.clone(),
                busy: (d(|x| x.io_ticks_ms) as f64 / 1e3 / secs).min(1.0),
                queue: d(|x| x.weighted_ms) as f64 / 1e3 / secs,
                writes_per_s: writes as f64 / secs,
                reads_per_s: d(|x| x.reads) as f64 / secs,
                written_per_s: d(|x| x.sectors_written) as f64 * 512.0 / secs,
                read_per_s: d(|x| x.sectors_read) as f64 * 512.0 / secs,
                flushes_per_s: flushes as f64 / secs,
                flush_ms: d(|x| x.flush_ms) as f64 / flushes.max(1) as f64,
                write_ms: d(|x| x.write_ms) as f64 / writes.max(1) as f64,
            })
        })
        .collect()
}

/// Each qdisc in both the first and last sample that shapes, or queued, dropped or held back
/// packets in the window.
fn qdisc_rates(samples: &[Sample], secs: f64) -> Vec<QdiscRate> {
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else { return Vec::new() };
    let key = |q: &qpslab_host::links::IfQdisc| (q.iface.clone(), q.qdisc.handle, q.qdisc.parent);
    last.links
        .qdiscs
        .iter()
        .filter_map(|l| {
            let f = first.links.qdiscs.iter().find(|f| key(f) == key(l))?;
            let (a, b) = (&f.qdisc, &l.qdisc);
            let backlog_max = samples
                .iter()
                .flat_map(|s| s.links.qdiscs.iter().filter(|q| key(q) == key(l)))
                .map(|q| q.qdisc.backlog)
                .max()
                .unwrap_or(0);
            let r = QdiscRate {
                iface: l.iface.clone(),
                kind: b.kind.clone(),
                root: b.is_root(),
                rate_bytes_per_s: b.rate_bytes_per_s,
                bytes_per_s: per_s(b.bytes.saturating_sub(a.bytes), secs),
                drops: b.drops.saturating_sub(a.drops),
                overlimits: b.overlimits.saturating_sub(a.overlimits),
                requeues: b.requeues.saturating_sub(a.requeues),
                backlog_max,
            };
            (r.rate_bytes_per_s.is_some() || r.drops > 0 || r.overlimits > 0 || r.backlog_max > 0)
                .then_some(r)
        })
        .collect()
}

/// The driver counters that moved between the first and the last sample.
fn nic_counters(a: &Sample, b: &Sample) -> Vec<NicCounter> {
    let mut out = Vec::new();
    for (iface, now) in &b.links.nic_counters {
        let Some(before) = a.links.nic_counters.get(iface) else { continue };
        for (name, v) in now {
            let delta = v.saturating_sub(before.get(name).copied().unwrap_or(*v));
            if delta > 0 {
                out.push(NicCounter { iface: iface.clone(), name: name.clone(), delta });
            }
        }
    }
    out
}

pub(crate) fn cpu_shares(a: &Sample, b: &Sample) -> Vec<CpuShare> {
    b.cpu
        .iter()
        .filter_map(|t| {
            let d = t.since(a.cpu.iter().find(|x| x.cpu == t.cpu)?);
            let total = d.total();
            if total == 0 {
                return None; // no ticks in the window: nothing to say about this CPU
            }
            Some(CpuShare {
                cpu: t.cpu,
                user: share(d.user + d.nice, total),
                system: share(d.system, total),
                softirq: share(d.softirq, total),
                irq: share(d.irq, total),
                idle: share(d.idle_all(), total),
                steal: share(d.steal, total),
            })
        })
        .collect()
}

impl Summary {
    /// Where the network counters were counted: "host-wide", with the followed servers' and
    /// generators' namespaces when they live in others.
    pub fn counted(&self) -> &'static str {
        match (self.server_namespaces.is_empty(), self.generator_namespaces.is_empty()) {
            (true, true) => "host-wide",
            (false, true) => "host-wide and in the server's namespace",
            (true, false) => "host-wide and in the generator's namespace",
            (false, false) => "host-wide and in the server's and the generator's namespaces",
        }
    }
}

/// Adds to `tcp` the counters' deltas of the followed processes' namespaces (a container's, a
/// load's): their side of the path counts there.
fn add_namespaces(samples: &[Sample], tcp: &mut BTreeMap<String, i64>) {
    for (a, b, _) in namespaces(samples) {
        for (k, v) in &b.tcpext {
            *tcp.entry(k.clone()).or_default() += v - a.tcpext.get(k).copied().unwrap_or(0);
        }
        *tcp.entry("RetransSegs".into()).or_default() += b.retrans_segs - a.retrans_segs;
        *tcp.entry("OutSegs".into()).or_default() += b.out_segs - a.out_segs;
    }
}

/// The namespaces of followed processes read at two samples or more: each one's counters at
/// its first and last reading, and the seconds between them. A load started by the doctor
/// enters its namespace after the window's first sample, and may leave before its last.
fn namespaces(samples: &[Sample]) -> impl Iterator<Item = (&NetCounters, &NetCounters, f64)> {
    let mut seen: Vec<&str> = Vec::new();
    for n in samples.iter().flat_map(|s| &s.namespaces) {
        if !seen.contains(&n.ns.as_str()) {
            seen.push(&n.ns);
        }
    }
    seen.into_iter().filter_map(move |ns| {
        let mut at = samples
            .iter()
            .filter_map(move |s| Some((s.at, s.namespaces.iter().find(|n| n.ns == ns)?)));
        let (t0, a) = at.next()?;
        let (t1, b) = at.next_back()?;
        Some((a, b, (t1 - t0).as_secs_f64()))
    })
}

/// Each interface's rates over the window: ours, then those of the followed processes'
/// namespaces (over the time they were read), named with their side's suffix
/// ([`Role::ns_suffix`]).
fn if_rates(samples: &[Sample], secs: f64) -> Vec<IfRate> {
    let (Some(a), Some(b)) = (samples.first(), samples.last()) else { return Vec::new() };
    let mut v = dev_rates(&a.dev, &b.dev, "", secs);
    for (x, y, t) in namespaces(samples) {
        v.extend(dev_rates(&x.dev, &y.dev, y.role.ns_suffix(), t));
    }
    v
}

fn dev_rates(a: &[IfCounters], b: &[IfCounters], suffix: &str, secs: f64) -> Vec<IfRate> {
    b.iter()
        .filter_map(|i| {
            let p = a.iter().find(|x| x.name == i.name)?;
            Some(IfRate {
                name: format!("{}{suffix}", i.name),
                rx_pps: per_s(i.rx_packets.saturating_sub(p.rx_packets), secs),
                tx_pps: per_s(i.tx_packets.saturating_sub(p.tx_packets), secs),
                rx_bytes_per_s: per_s(i.rx_bytes.saturating_sub(p.rx_bytes), secs),
                tx_bytes_per_s: per_s(i.tx_bytes.saturating_sub(p.tx_bytes), secs),
                rx_drop: i.rx_drop.saturating_sub(p.rx_drop),
                tx_drop: i.tx_drop.saturating_sub(p.tx_drop),
            })
        })
        .collect()
}

fn proc_summaries(samples: &[&Sample], roles: &BTreeMap<u32, Role>, hz: f64) -> Vec<ProcSummary> {
    roles.iter().filter_map(|(pid, role)| proc_summary(samples, *pid, *role, hz)).collect()
}

/// A process that started late or exited early is summarised over the samples that saw it.
fn proc_summary(samples: &[&Sample], pid: u32, role: Role, hz: f64) -> Option<ProcSummary> {
    let seen: Vec<(&Sample, &ProcSample)> =
        samples.iter().filter_map(|&s| Some((s, s.procs.get(&pid)?))).collect();
    let (&(s0, first), &(s1, last)) = (seen.first()?, seen.last()?);
    let secs = (s1.at - s0.at).as_secs_f64().max(1e-9);
    let cpus_of = |ticks: u64| ticks as f64 / hz / secs;
    // Per thread: ticks at its first and last sight, and its affinity.
    let mut threads: BTreeMap<u32, (u64, u64, Option<CpuSet>)> = BTreeMap::new();
    // Per thread: run delay at its first and last sight.
    let mut delays: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for (_, p) in &seen {
        for t in &p.threads {
            let e = threads.entry(t.tid).or_insert((t.ticks, t.ticks, None));
            e.1 = t.ticks;
            if t.cpus.is_some() {
                e.2.clone_from(&t.cpus);
            }
            if let Some(d) = t.run_delay_ns {
                delays.entry(t.tid).or_insert((d, d)).1 = d;
            }
        }
    }
    let run_wait_s = (!delays.is_empty()).then(|| {
        let ns: u64 = delays
            .iter()
            .map(|(tid, (a, b))| {
                let start = if first.threads.iter().any(|x| x.tid == *tid) { *a } else { 0 };
                b.saturating_sub(start)
            })
            .sum();
        ns as f64 / 1e9
    });
    // A thread first seen after the first sample started from zero.
    let mut used: Vec<(f64, Option<&CpuSet>)> = threads
        .iter()
        .map(|(tid, (a, b, cpus))| {
            let start = if first.threads.iter().any(|x| x.tid == *tid) { *a } else { 0 };
            (cpus_of(b.saturating_sub(start)), cpus.as_ref())
        })
        .collect();
    let cpu = cpus_of(last.ticks.saturating_sub(first.ticks));
    // Threads gone before the last sample (a load's workers, joined at its stop) took their
    // time since their last sight with them; the process's own count still has it: what no
    // surviving thread accounts for was theirs, shared evenly.
    let gone: Vec<usize> = threads
        .keys()
        .enumerate()
        .filter(|(_, tid)| !last.threads.iter().any(|x| x.tid == **tid))
        .map(|(i, _)| i)
        .collect();
    let unaccounted = cpu - used.iter().map(|u| u.0).sum::<f64>();
    if !gone.is_empty() && unaccounted > 0.0 {
        for i in &gone {
            used[*i].0 += unaccounted / gone.len() as f64;
        }
    }
    let pool = pool(last, threads.keys().copied().zip(used.iter().map(|u| u.0)));
    let busy: Vec<&(f64, Option<&CpuSet>)> =
        used.iter().filter(|(c, _)| *c >= BUSY_THREAD).collect();
    let cpus = thread_cpus(if busy.is_empty() { used.iter().collect() } else { busy.clone() });
    let readings: Vec<char> =
        seen.iter().flat_map(|(_, p)| p.threads.iter().map(|t| t.state)).collect();
    let blocked = readings.iter().filter(|&&c| c == 'D').count();
    let io = |f: fn(&qpslab_host::parse::ProcIo) -> u64| {
        Some(f(last.io.as_ref()?).saturating_sub(f(first.io.as_ref()?)))
    };
    let reach = cpus.as_ref().map(CpuSet::len).or(last.allowed.as_ref().map(CpuSet::len));
    let throttling = qpslab_sys::cgroup::throttling(&first.cpu_limits, &last.cpu_limits);
    // A quota caps what the process can use as surely as its affinity: a process held to
    // 0.2 CPUs is saturated at 0.2.
    let capacity = (busy.len().max(1).min(reach.unwrap_or(usize::MAX).max(1)) as f64)
        .min(throttling.as_ref().map_or(f64::MAX, |t| t.quota_cpus.max(0.01)));
    let shares = cpu_shares(s0, s1);
    let cpus_busy = cpus.as_ref().and_then(|set| {
        let on: Vec<f64> =
            shares.iter().filter(|c| set.contains(c.cpu)).map(CpuShare::busy).collect();
        (!on.is_empty()).then(|| on.iter().sum::<f64>() / on.len() as f64)
    });
    Some(ProcSummary {
        pid,
        role,
        comm: last.comm.clone(),
        ppid: last.ppid,
        pool,
        cpu,
        busiest_thread: used.iter().map(|u| u.0).fold(0.0, f64::max),
        busy_threads: busy.len(),
        busy_ratio: cpu / capacity,
        serial: serial(role, cpu, busy.len(), reach, &interval_cpus(&seen, hz)),
        cpus,
        cpus_busy,
        open_fds: seen.iter().filter_map(|(_, p)| p.open_fds).max(),
        nofile_soft: last.nofile_soft,
        throttling,
        memory_limit: qpslab_sys::memlimit::over_window(&first.memory_limits, &last.memory_limits),
        run_wait_s,
        blocked_share: blocked as f64 / readings.len().max(1) as f64,
        thread_readings: readings.len(),
        storage_written: io(|x| x.write_bytes),
        storage_read: io(|x| x.read_bytes),
    })
}

/// The busiest thread's numbered pool among those alive at `last`, busiest first
/// ([`ProcSummary::pool`]): `used` is each thread's CPU by tid.
fn pool(last: &ProcSample, used: impl Iterator<Item = (u32, f64)>) -> Vec<f64> {
    let stem = |name: &str| {
        let bare = name.trim_end_matches(|c: char| c.is_ascii_digit());
        (bare.len() < name.len())
            .then(|| bare.trim_end_matches(['-', '_', ' ', '/', ':', '#']).to_string())
    };
    let alive: Vec<(Option<String>, f64)> = used
        .filter_map(|(tid, cpu)| {
            let t = last.threads.iter().find(|t| t.tid == tid)?;
            Some((stem(&t.name), cpu))
        })
        .collect();
    let Some((Some(busiest), _)) = alive.iter().max_by(|a, b| a.1.total_cmp(&b.1)) else {
        return Vec::new();
    };
    let mut cpus: Vec<f64> =
        alive.iter().filter(|(s, _)| s.as_ref() == Some(busiest)).map(|(_, c)| *c).collect();
    if cpus.len() < 2 {
        return Vec::new();
    }
    cpus.sort_by(|a, b| b.total_cmp(a));
    cpus
}

/// A thread that used at least this much CPU (in CPUs) over the window counts as busy.
pub const BUSY_THREAD: f64 = 0.1;

/// Each interval's CPU of a process seen at these samples, with the interval's length in
/// seconds.
fn interval_cpus(seen: &[(&Sample, &ProcSample)], hz: f64) -> Vec<(f64, f64)> {
    seen.windows(2)
        .map(|w| {
            let t = (w[1].0.at - w[0].0.at).as_secs_f64().max(1e-9);
            (t, w[1].1.ticks.saturating_sub(w[0].1.ticks) as f64 / hz / t)
        })
        .collect()
}

/// How far from one CPU a serialized process's use may be, over the window and in each
/// interval ([`ProcSummary::serial`]).
pub const SERIAL_BAND: f64 = 0.1;

/// Whether a server's threads took turns on one CPU ([`ProcSummary::serial`]): `cpu` over the
/// window, `busy` threads, the CPUs they may `reach`, and each interval's CPU of the process
/// with its length in seconds.
fn serial(
    role: Role,
    cpu: f64,
    busy: usize,
    reach: Option<usize>,
    intervals: &[(f64, f64)],
) -> bool {
    let near_one = |c: f64| (c - 1.0).abs() <= SERIAL_BAND;
    let long: Vec<f64> =
        intervals.iter().filter(|(secs, _)| *secs >= 0.5).map(|(_, c)| *c).collect();
    role == Role::Server
        && busy >= 2
        && reach.is_some_and(|r| r >= 2)
        && near_one(cpu)
        && long.len() >= 2
        && long.iter().all(|c| (c - 1.0).abs() <= 2.0 * SERIAL_BAND)
}

/// The union of the threads' affinities; None when any is unknown.
fn thread_cpus(threads: Vec<&(f64, Option<&CpuSet>)>) -> Option<CpuSet> {
    let mut all = CpuSet::new();
    for (_, cpus) in threads {
        all = all.union((*cpus)?);
    }
    (!all.is_empty()).then_some(all)
}

fn interval_row(a: &Sample, b: &Sample, roles: &BTreeMap<u32, Role>, hz: f64) -> IntervalRow {
    let secs = (b.at - a.at).as_secs_f64();
    let shares = cpu_shares(a, b);
    let theirs = b.namespaces.iter().filter_map(|y| {
        let x = a.namespaces.iter().find(|x| x.ns == y.ns)?;
        Some(dev_rates(&x.dev, &y.dev, "", secs))
    });
    let pps = std::iter::once(dev_rates(&a.dev, &b.dev, "", secs))
        .chain(theirs)
        .flatten()
        .map(|i| i.rx_pps + i.tx_pps)
        .sum();
    let procs = proc_summaries(&[a, b], roles, hz);
    let side = |r: Role| procs.iter().filter(|p| p.role == r).map(|p| p.cpu).sum();
    IntervalRow {
        t_s: b.at.as_secs_f64(),
        cpus: shares.iter().map(|s| s.cpu).collect(),
        cpu_busy: shares.iter().map(|s| 1.0 - s.idle).collect(),
        user: shares.iter().map(|s| s.user).collect(),
        system: shares.iter().map(|s| s.system).collect(),
        softirq: shares.iter().map(|s| s.softirq).collect(),
        pps,
        server_cpu: side(Role::Server),
        client_cpu: side(Role::Client),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One CPU's worth over threads that could run at once, every interval: serialized. One
    /// thread, one CPU to run on, a generator, a swing that averages one, or a short last
    /// interval's noise decide otherwise (the last ignored).
    #[test]
    fn threads_taking_turns_on_one_cpu_are_serial() {
        let steady = [(1.0, 0.98), (1.0, 1.03), (1.0, 0.99), (0.04, 0.5)];
        assert!(serial(Role::Server, 1.0, 8, Some(2), &steady));
        assert!(!serial(Role::Server, 1.0, 1, Some(2), &steady), "one thread");
        assert!(!serial(Role::Server, 1.0, 8, Some(1), &steady), "one CPU to run on");
        assert!(!serial(Role::Client, 1.0, 8, Some(2), &steady), "a generator");
        assert!(!serial(Role::Server, 1.3, 8, Some(2), &steady), "more than one CPU");
        let swing = [(1.0, 1.6), (1.0, 0.4), (1.0, 1.0)];
        assert!(!serial(Role::Server, 1.0, 8, Some(2), &swing), "a swing");
        assert!(!serial(Role::Server, 1.0, 8, Some(2), &[(1.0, 1.0)]), "one interval");
    }
}
