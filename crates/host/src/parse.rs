//! Pure parsers of /proc text. Each takes the file's contents and returns plain data; the paths
//! live in `host.rs` and `sample.rs`. Malformed lines are skipped, not fatal: a counter the
//! kernel renamed or dropped should cost one finding, not the whole report.

use crate::cpuset::CpuSet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One CPU's times from /proc/stat, in clock ticks (USER_HZ).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CpuTimes {
    pub cpu: usize,
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
}

impl CpuTimes {
    /// All ticks, busy or not (guest time is already inside user).
    pub fn total(&self) -> u64 {
        self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
    }

    /// Ticks the CPU was idle (idle + iowait).
    pub fn idle_all(&self) -> u64 {
        self.idle + self.iowait
    }

    /// Field-wise difference `self - earlier` (saturating: a CPU that went offline and came back
    /// restarts its counters).
    pub fn since(&self, earlier: &CpuTimes) -> CpuTimes {
        CpuTimes {
            cpu: self.cpu,
            user: self.user.saturating_sub(earlier.user),
            nice: self.nice.saturating_sub(earlier.nice),
            system: self.system.saturating_sub(earlier.system),
            idle: self.idle.saturating_sub(earlier.idle),
            iowait: self.iowait.saturating_sub(earlier.iowait),
            irq: self.irq.saturating_sub(earlier.irq),
            softirq: self.softirq.saturating_sub(earlier.softirq),
            steal: self.steal.saturating_sub(earlier.steal),
        }
    }
}

/// The per-CPU lines (`cpuN ...`) of /proc/stat; the aggregate `cpu` line is left out.
pub fn proc_stat(text: &str) -> Vec<CpuTimes> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_ascii_whitespace();
        let Some(cpu) =
            fields.next().and_then(|f| f.strip_prefix("cpu")).and_then(|n| n.parse().ok())
        else {
            continue;
        };
        let v: Vec<u64> = fields.map(|f| f.parse().unwrap_or(0)).collect();
        let at = |i: usize| v.get(i).copied().unwrap_or(0);
        out.push(CpuTimes {
            cpu,
            user: at(0),
            nice: at(1),
            system: at(2),
            idle: at(3),
            iowait: at(4),
            irq: at(5),
            softirq: at(6),
            steal: at(7),
        });
    }
    out
}

/// A table with one column per CPU, as in /proc/softirqs and /proc/interrupts: the header
/// names the CPUs (`CPU0 CPU1 ...`; only online CPUs appear, so columns are not CPU numbers).
fn cpu_header(line: &str) -> Vec<usize> {
    line.split_ascii_whitespace().filter_map(|c| c.strip_prefix("CPU")?.parse().ok()).collect()
}

/// /proc/softirqs: per softirq name (`NET_RX`, `NET_TX`, ...), the count on each CPU.
pub fn softirqs(text: &str) -> BTreeMap<String, BTreeMap<usize, u64>> {
    let mut lines = text.lines();
    let cpus = lines.next().map(cpu_header).unwrap_or_default();
    let mut out = BTreeMap::new();
    for line in lines {
        let Some((name, counts)) = line.split_once(':') else { continue };
        let row = cpus
            .iter()
            .zip(counts.split_ascii_whitespace())
            .filter_map(|(&cpu, c)| Some((cpu, c.parse().ok()?)))
            .collect();
        out.insert(name.trim().to_string(), row);
    }
    out
}

/// One numbered line of /proc/interrupts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IrqLine {
    pub irq: u32,
    /// Count per CPU number.
    pub counts: BTreeMap<usize, u64>,
    /// Controller and trigger, e.g. `PCI-MSIX-0000:00:03.0 1-edge`.
    pub chip: String,
    /// The action names, e.g. `virtio2-input.0` or `eth0-TxRx-3` (comma-separated when shared).
    pub name: String,
}

impl IrqLine {
    /// Interrupts on all CPUs.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }
}

/// The numbered IRQ lines of /proc/interrupts (NMI, LOC and the other named rows are skipped).
pub fn interrupts(text: &str) -> Vec<IrqLine> {
    let mut lines = text.lines();
    let cpus = lines.next().map(cpu_header).unwrap_or_default();
    let mut out = Vec::new();
    for line in lines {
        let Some((irq, rest)) = line.split_once(':') else { continue };
        let Ok(irq) = irq.trim().parse::<u32>() else { continue };
        let mut fields = rest.split_ascii_whitespace();
        let counts = cpus
            .iter()
            .zip(fields.by_ref())
            .filter_map(|(&c, n)| Some((c, n.parse().ok()?)))
            .collect();
        let tail: Vec<&str> = fields.collect();
        // The chip is "NAME HWIRQ-TRIGGER" (two tokens) on current kernels; the action names
        // follow, separated by ", " when several handlers share the line.
        let (chip, name) = match tail.iter().position(|t| is_hwirq_trigger(t)) {
            Some(p) => (tail[..=p].join(" "), tail[p + 1..].join(" ")),
            None if tail.len() > 1 => {
                (tail[..tail.len() - 1].join(" "), tail[tail.len() - 1].to_string())
            }
            None => (String::new(), tail.join(" ")),
        };
        out.push(IrqLine { irq, counts, chip, name });
    }
    out
}

/// `5-edge`, `9-fasteoi`, `524288-edge`: the last token of the chip column.
fn is_hwirq_trigger(token: &str) -> bool {
    token.split_once('-').is_some_and(|(n, t)| {
        !n.is_empty()
            && n.bytes().all(|b| b.is_ascii_digit())
            && !t.is_empty()
            && t.bytes().all(|b| b.is_ascii_alphabetic())
    })
}

/// One CPU's row of /proc/net/softnet_stat (hex columns).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SoftnetRow {
    pub cpu: usize,
    /// Packets taken off the backlog and processed.
    pub processed: u64,
    /// Packets dropped because the backlog queue was full (net.core.netdev_max_backlog).
    pub dropped: u64,
    /// Times net_rx_action ran out of budget or time with work left (netdev_budget,
    /// netdev_budget_usecs).
    pub time_squeeze: u64,
}

/// /proc/net/softnet_stat. Rows list online CPUs only; since Linux 5.10 the 13th column is the
/// CPU number, before that the row index is used.
pub fn softnet_stat(text: &str) -> Vec<SoftnetRow> {
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let v: Vec<u64> = line
                .split_ascii_whitespace()
                .map(|f| u64::from_str_radix(f, 16).unwrap_or(0))
                .collect();
            if v.len() < 3 {
                return None;
            }
            let cpu = v.get(12).map_or(i, |&c| c as usize);
            Some(SoftnetRow { cpu, processed: v[0], dropped: v[1], time_squeeze: v[2] })
        })
        .collect()
}

/// /proc/net/netstat and /proc/net/snmp: pairs of lines `Prefix: names...` / `Prefix: values...`,
/// as `prefix -> name -> value` (values can be negative, e.g. Tcp MaxConn -1).
pub fn keyed_counters(text: &str) -> BTreeMap<String, BTreeMap<String, i64>> {
    let mut out: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.chunks(2) {
        let [names, values] = pair else { continue };
        let (Some((p1, names)), Some((p2, values))) =
            (names.split_once(':'), values.split_once(':'))
        else {
            continue;
        };
        if p1 != p2 {
            continue;
        }
        let table = out.entry(p1.to_string()).or_default();
        for (n, v) in names.split_ascii_whitespace().zip(values.split_ascii_whitespace()) {
            if let Ok(v) = v.parse() {
                table.insert(n.to_string(), v);
            }
        }
    }
    out
}

/// The TCP line of /proc/net/sockstat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SockStat {
    pub tcp_inuse: u64,
    pub tcp_orphan: u64,
    pub tcp_tw: u64,
    pub tcp_alloc: u64,
    /// Pages TCP's socket buffers hold (held against net.ipv4.tcp_mem).
    pub tcp_mem: u64,
}

/// /proc/net/sockstat (its `TCP:` line).
pub fn sockstat(text: &str) -> SockStat {
    let mut s = SockStat::default();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("TCP:") else { continue };
        let f: Vec<&str> = rest.split_ascii_whitespace().collect();
        for kv in f.chunks(2) {
            let [k, v] = kv else { continue };
            let v = v.parse().unwrap_or(0);
            match *k {
                "inuse" => s.tcp_inuse = v,
                "orphan" => s.tcp_orphan = v,
                "tw" => s.tcp_tw = v,
                "alloc" => s.tcp_alloc = v,
                "mem" => s.tcp_mem = v,
                _ => {}
            }
        }
    }
    s
}

/// One interface's totals from /proc/net/dev.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct IfCounters {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_drop: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_drop: u64,
}

/// /proc/net/dev.
pub fn net_dev(text: &str) -> Vec<IfCounters> {
    text.lines()
        .skip(2)
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let v: Vec<u64> =
                rest.split_ascii_whitespace().map(|f| f.parse().unwrap_or(0)).collect();
            if v.len() < 16 {
                return None;
            }
            Some(IfCounters {
                name: name.trim().to_string(),
                rx_bytes: v[0],
                rx_packets: v[1],
                rx_drop: v[3],
                tx_bytes: v[8],
                tx_packets: v[9],
                tx_drop: v[11],
            })
        })
        .collect()
}

/// What the doctor reads from `/proc/PID/stat` (or `/proc/PID/task/TID/stat`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskStat {
    pub comm: String,
    /// `R` running, `S` sleeping, `D` uninterruptible (waiting on I/O), ...
    pub state: char,
    /// The parent process.
    pub ppid: u32,
    /// CPU time, utime + stime, in clock ticks (USER_HZ).
    pub ticks: u64,
}

/// Parses `/proc/PID/stat` or `/proc/PID/task/TID/stat`. The name is in parentheses and may
/// itself contain spaces or `)`, so fields are counted from the last `)`.
pub fn task_stat(text: &str) -> Option<TaskStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let f: Vec<&str> = text.get(close + 1..)?.split_ascii_whitespace().collect();
    // After the name: state(0) ppid(1) ... utime(11) stime(12).
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    let state = f.first()?.chars().next()?;
    Some(TaskStat { comm, state, ppid: f.get(1)?.parse().ok()?, ticks: utime + stime })
}

/// What a process caused to be read from and written to storage (`/proc/PID/io`'s
/// `read_bytes` and `write_bytes`: block I/O, not the page cache's hits).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcIo {
    pub read_bytes: u64,
    pub write_bytes: u64,
}

/// Parses `/proc/PID/io`.
pub fn proc_io(text: &str) -> Option<ProcIo> {
    let field =
        |name: &str| text.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok());
    Some(ProcIo { read_bytes: field("read_bytes:")?, write_bytes: field("write_bytes:")? })
}

/// One block device's counters (`/proc/diskstats`, cumulative since boot).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskStat {
    pub name: String,
    pub reads: u64,
    pub writes: u64,
    /// 512-byte sectors read and written.
    pub sectors_read: u64,
    pub sectors_written: u64,
    /// Milliseconds spent on writes (summed over them).
    pub write_ms: u64,
    /// Milliseconds the device had I/O in flight (its busy time), and the time-weighted sum
    /// of I/Os in flight (the queue's length x time).
    pub io_ticks_ms: u64,
    pub weighted_ms: u64,
    /// Cache flushes completed (fsync reaching the device), and the time spent on them (Linux
    /// 5.5 and later; 0 before).
    pub flushes: u64,
    pub flush_ms: u64,
}

/// Parses `/proc/diskstats`: the devices that did any I/O (loop and ram devices that did none
/// left out). Fields after the name, from 0: reads, reads merged, sectors read, ms reading,
/// writes, writes merged, sectors written, ms writing, in flight, ms busy, weighted ms, four
/// discard fields, flushes, ms flushing.
pub fn diskstats(text: &str) -> Vec<DiskStat> {
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_ascii_whitespace().collect();
            let n = |i: usize| w.get(3 + i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            let d = DiskStat {
                name: w.get(2)?.to_string(),
                reads: n(0),
                writes: n(4),
                sectors_read: n(2),
                sectors_written: n(6),
                write_ms: n(7),
                io_ticks_ms: n(9),
                weighted_ms: n(10),
                flushes: n(15),
                flush_ms: n(16),
            };
            (d.reads + d.writes + d.flushes > 0).then_some(d)
        })
        .collect()
}

/// The CPUs a task may run on, from the `Cpus_allowed_list:` line of `/proc/PID/status` (or of
/// a thread's `/proc/PID/task/TID/status`).
pub fn cpus_allowed(status: &str) -> Option<CpuSet> {
    let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    CpuSet::parse_list(list.trim()).ok()
}

/// The soft "Max open files" limit from /proc/PID/limits (None when unlimited or absent).
pub fn max_open_files(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..].split_ascii_whitespace().next()?.parse().ok()
}

/// The `some` line's `total=` of a pressure file (`/proc/pressure/cpu`): microseconds, since
/// boot, in which at least one runnable task waited for the resource.
pub fn pressure_some(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_ascii_whitespace().find_map(|f| f.strip_prefix("total="))?.parse().ok()
}

/// /proc/vmstat's counters of memory short of demand: faults that read from storage, pages
/// scanned by allocating tasks themselves (direct reclaim), and allocations that stalled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VmStat {
    pub major_faults: u64,
    pub direct_scans: u64,
    pub alloc_stalls: u64,
}

pub fn vmstat(text: &str) -> VmStat {
    let mut v = VmStat::default();
    for line in text.lines() {
        let Some((k, n)) = line.split_once(' ') else { continue };
        let n: u64 = n.trim().parse().unwrap_or(0);
        match k {
            "pgmajfault" => v.major_faults = n,
            "pgscan_direct" => v.direct_scans = n,
            k if k.starts_with("allocstall") => v.alloc_stalls += n,
            _ => {}
        }
    }
    v
}

/// The connection tracking table (netfilter's conntrack), where the module is loaded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Conntrack {
    pub entries: u64,
    pub max: u64,
    /// Packets dropped for want of an entry: `drop`, `early_drop` and `insert_failed`
    /// summed over the CPUs (/proc/net/stat/nf_conntrack, hexadecimal).
    pub dropped: u64,
}

/// The sum of the columns that count refused entries in /proc/net/stat/nf_conntrack.
pub fn conntrack_dropped(text: &str) -> u64 {
    let mut lines = text.lines();
    let Some(head) = lines.next() else { return 0 };
    let cols: Vec<usize> = head
        .split_ascii_whitespace()
        .enumerate()
        .filter(|(_, n)| matches!(*n, "drop" | "early_drop" | "insert_failed"))
        .map(|(i, _)| i)
        .collect();
    lines
        .map(|l| {
            let f: Vec<&str> = l.split_ascii_whitespace().collect();
            cols.iter().filter_map(|i| u64::from_str_radix(f.get(*i)?, 16).ok()).sum::<u64>()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Linux 6.18, this VM's /proc/net/stat/nf_conntrack (two CPUs), with drops moved.
    #[test]
    fn conntrack_drops_are_summed_over_the_cpus() {
        let text = "entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart\n\
            00000010  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000001 0000000a 00000000 00000000  00000000 00000000 00000000 00000000\n\
            00000010  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000010 00000002 00000000  00000000 00000000 00000000 00000000\n";
        assert_eq!(conntrack_dropped(text), 1 + 10 + 16 + 2);
        assert_eq!(conntrack_dropped(""), 0);
    }

    #[test]
    fn vmstat_sums_the_allocation_stalls_of_every_zone() {
        let text = "allocstall_dma 0\nallocstall_normal 22\nallocstall_movable 1140\npgmajfault 142967\npgscan_direct 862569\npgscan_kswapd 5\n";
        assert_eq!(
            vmstat(text),
            VmStat { major_faults: 142_967, direct_scans: 862_569, alloc_stalls: 1162 }
        );
    }

    /// Linux 6.18, this VM's /proc/pressure/cpu.
    #[test]
    fn pressure_reads_the_some_total() {
        let text = "some avg10=0.08 avg60=1.04 avg300=0.44 total=1769993\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(pressure_some(text), Some(1_769_993));
        assert_eq!(pressure_some("full avg10=0 total=5\n"), None);
    }

    #[test]
    fn task_stat_handles_odd_names() {
        let text = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 1 0 100 0 0";
        assert_eq!(
            task_stat(text),
            Some(TaskStat { comm: "a) b (c)".to_string(), state: 'S', ppid: 1, ticks: 12 })
        );
        assert_eq!(task_stat("garbage"), None);
    }

    /// Linux 6.18, this VM: a process's /proc/PID/io, and /proc/diskstats with a loop device
    /// that did nothing (left out) and the virtio disk.
    #[test]
    fn block_io_is_read_per_process_and_per_device() {
        let io = "rchar: 6976\nwchar: 0\nsyscr: 10\nsyscw: 0\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n";
        assert_eq!(proc_io(io), Some(ProcIo { read_bytes: 4096, write_bytes: 8192 }));
        let disks = "   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n 254       0 vda 5316 1872 481454 2570 93871 64913 4391584 122342 0 106348 131040 0 0 0 0 20453 6127\n";
        let d = diskstats(disks);
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].name.as_str(), d[0].writes, d[0].io_ticks_ms), ("vda", 93871, 106348));
        assert_eq!((d[0].flushes, d[0].flush_ms, d[0].weighted_ms), (20453, 6127, 131040));
    }

    #[test]
    fn cpus_allowed_from_status() {
        let status =
            "Name:\tqpslab\nCpus_allowed:\t1\nCpus_allowed_list:\t0,2-3\nMems_allowed_list:\t0\n";
        assert_eq!(cpus_allowed(status), Some([0, 2, 3].into_iter().collect()));
        assert_eq!(cpus_allowed("Name:\tx\n"), None);
    }

    #[test]
    fn interrupts_split_chip_and_names() {
        let text = "           CPU0       CPU1\n 38:          0       3093 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0\n 9:  1 2   IO-APIC   9-fasteoi   acpi, eth9\nLOC:  5  6   Local timer interrupts\n";
        let lines = interrupts(text);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].irq, 38);
        assert_eq!(lines[0].counts.get(&1), Some(&3093));
        assert_eq!(lines[0].chip, "PCI-MSIX-0000:00:03.0 1-edge");
        assert_eq!(lines[0].name, "virtio2-input.0");
        assert_eq!(lines[1].name, "acpi, eth9");
    }

    #[test]
    fn softnet_uses_the_cpu_column_when_present() {
        let text = "00000010 00000002 00000003 0 0 0 0 0 0 0 0 0 00000005 0 0\n";
        assert_eq!(
            softnet_stat(text),
            vec![SoftnetRow { cpu: 5, processed: 16, dropped: 2, time_squeeze: 3 }]
        );
        let old = "00000010 00000002 00000003 0 0 0 0 0 0 0 0\n00000001 0 0 0 0 0 0 0 0 0 0\n";
        assert_eq!(softnet_stat(old)[1].cpu, 1);
    }
}
