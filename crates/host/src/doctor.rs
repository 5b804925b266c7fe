//! The doctor: turns a series of samples into a summary (rates and shares over the window) and
//! findings, each with its evidence (numbers from the samples) and the remedy.
//!
//! Thresholds are named constants below; each rule says which seed symptom it catches.

use crate::host::Host;
use crate::sample::{Role, Sample};
use serde::Serialize;
use std::collections::BTreeMap;

/// Where a qpslab tune journal lives under the root; its presence means IRQs were pinned by hand.
pub const JOURNAL: &str = "var/lib/qpslab/journal.json";

/// Softirq share of one CPU above which receive processing is called concentrated (seed 002:
/// one ksoftirqd at 95%).
pub const SOFTIRQ_HOT: f64 = 0.80;
/// Idle share above which another CPU counts as headroom.
pub const HEADROOM_IDLE: f64 = 0.25;
/// A process busy at this share of the CPUs it can use is saturated.
pub const SATURATED: f64 = 0.85;
/// Packets per second from which a NIC's queue layout matters.
pub const BUSY_NIC_PPS: f64 = 1000.0;
/// Descriptor use at which the limit is close.
pub const FD_CLOSE: f64 = 0.80;
/// TIME_WAIT sockets, as a share of the ephemeral port range, that mean port pressure.
pub const TW_PRESSURE: f64 = 0.50;
/// Coefficient of variation of the per-interval rate below which the rate is flat.
pub const FLAT_CV: f64 = 0.10;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

/// One finding.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// Stable machine name, e.g. `softirq-concentrated`.
    pub name: &'static str,
    pub severity: Severity,
    /// One sentence.
    pub summary: String,
    /// Numbers from the samples.
    pub evidence: Vec<String>,
    /// What to change: a `qpslab tune` step or an option.
    pub remedy: String,
}

/// One CPU's time split over the window, as shares of 1.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CpuShare {
    pub cpu: usize,
    pub user: f64,
    pub system: f64,
    pub softirq: f64,
    pub irq: f64,
    pub idle: f64,
}

/// A watched process over the window.
#[derive(Debug, Clone, Serialize)]
pub struct ProcSummary {
    pub pid: u32,
    pub role: Role,
    pub comm: String,
    /// CPU used, in CPUs (1.0 = one CPU fully busy).
    pub cpu: f64,
    /// The busiest thread, in CPUs.
    pub busiest_thread: f64,
    /// Threads that used at least a tenth of a CPU.
    pub busy_threads: usize,
    /// cpu / the CPUs it could use (busy threads, capped by its affinity).
    pub busy_ratio: f64,
    pub open_fds: Option<usize>,
    pub nofile_soft: Option<u64>,
}

/// One interface's rates.
#[derive(Debug, Clone, Serialize)]
pub struct IfRate {
    pub name: String,
    pub rx_pps: f64,
    pub tx_pps: f64,
    pub rx_bytes_per_s: f64,
    pub tx_bytes_per_s: f64,
}

/// One NIC queue IRQ's rate per CPU.
#[derive(Debug, Clone, Serialize)]
pub struct IrqRate {
    pub irq: u32,
    pub name: String,
    pub per_cpu_per_s: BTreeMap<usize, f64>,
}

/// Per-interval row (provenance: the raw series beside the summary).
#[derive(Debug, Clone, Serialize)]
pub struct IntervalRow {
    pub t_s: f64,
    /// Busy share (1 - idle) per CPU.
    pub cpu_busy: Vec<f64>,
    pub softirq: Vec<f64>,
    /// Packets per second, all interfaces, both ways.
    pub pps: f64,
    pub server_cpu: f64,
    pub client_cpu: f64,
}

/// The samples' summary.
#[derive(Debug, Clone, Default, Serialize)]
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
    /// Deltas of the TcpExt counters, and RetransSegs / OutSegs.
    pub tcp: BTreeMap<String, i64>,
    pub tcp_inuse: u64,
    pub tcp_tw_max: u64,
    pub tcp_orphan_max: u64,
    pub interfaces: Vec<IfRate>,
    pub processes: Vec<ProcSummary>,
    pub intervals: Vec<IntervalRow>,
}

/// What else the caller knows about the run.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// Requests per second per interval, when a load ran in-process (`bench`); otherwise the
    /// packet rate stands in for "the rate".
    pub request_rates: Option<Vec<f64>>,
    /// Connect errors meaning no local port was free (EADDRNOTAVAIL), from the load.
    pub addr_not_available: u64,
    /// Whether a qpslab tune journal is active (hand pinning in force).
    pub journal_active: bool,
}

fn per_s(delta: u64, secs: f64) -> f64 {
    delta as f64 / secs.max(1e-9)
}

fn share(part: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        part as f64 / total as f64
    }
}

fn pct(x: f64) -> String {
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
    let softnet_delta = |f: fn(&crate::parse::SoftnetRow) -> u64| -> BTreeMap<usize, u64> {
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
    Summary {
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
        tcp_inuse: last.sockstat.tcp_inuse,
        tcp_tw_max: samples.iter().map(|s| s.sockstat.tcp_tw).max().unwrap_or(0),
        tcp_orphan_max: samples.iter().map(|s| s.sockstat.tcp_orphan).max().unwrap_or(0),
        interfaces: if_rates(first, last, secs),
        processes: proc_summaries(&samples.iter().collect::<Vec<_>>(), roles, tick_hz),
        intervals: samples.windows(2).map(|w| interval_row(&w[0], &w[1], roles, tick_hz)).collect(),
    }
}

fn cpu_shares(a: &Sample, b: &Sample) -> Vec<CpuShare> {
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
            })
        })
        .collect()
}

fn if_rates(a: &Sample, b: &Sample, secs: f64) -> Vec<IfRate> {
    b.dev
        .iter()
        .filter_map(|i| {
            let p = a.dev.iter().find(|x| x.name == i.name)?;
            Some(IfRate {
                name: i.name.clone(),
                rx_pps: per_s(i.rx_packets.saturating_sub(p.rx_packets), secs),
                tx_pps: per_s(i.tx_packets.saturating_sub(p.tx_packets), secs),
                rx_bytes_per_s: per_s(i.rx_bytes.saturating_sub(p.rx_bytes), secs),
                tx_bytes_per_s: per_s(i.tx_bytes.saturating_sub(p.tx_bytes), secs),
            })
        })
        .collect()
}

fn proc_summaries(samples: &[&Sample], roles: &BTreeMap<u32, Role>, hz: f64) -> Vec<ProcSummary> {
    roles
        .iter()
        .filter_map(|(pid, role)| {
            // A process that started late or exited early is summarised over the samples that
            // saw it.
            let seen: Vec<(&Sample, &crate::sample::ProcSample)> =
                samples.iter().filter_map(|&s| Some((s, s.procs.get(pid)?))).collect();
            let (&(s0, first), &(s1, last)) = (seen.first()?, seen.last()?);
            let secs = (s1.at - s0.at).as_secs_f64().max(1e-9);
            let cpus_of = |ticks: u64| ticks as f64 / hz / secs;
            let mut threads: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
            for (_, p) in &seen {
                for &(tid, t) in &p.threads {
                    threads.entry(tid).and_modify(|e| e.1 = t).or_insert((t, t));
                }
            }
            // A thread first seen after the first sample started from zero.
            let thread_cpu: Vec<f64> = threads
                .iter()
                .map(|(tid, (a, b))| {
                    let start = if first.threads.iter().any(|x| x.0 == *tid) { *a } else { 0 };
                    cpus_of(b.saturating_sub(start))
                })
                .collect();
            let cpu = cpus_of(last.ticks.saturating_sub(first.ticks));
            let busy_threads = thread_cpu.iter().filter(|&&c| c >= 0.1).count();
            let capacity = busy_threads.max(1).min(last.allowed_cpus.unwrap_or(usize::MAX).max(1));
            Some(ProcSummary {
                pid: *pid,
                role: *role,
                comm: last.comm.clone(),
                cpu,
                busiest_thread: thread_cpu.iter().copied().fold(0.0, f64::max),
                busy_threads,
                busy_ratio: cpu / capacity as f64,
                open_fds: seen.iter().filter_map(|(_, p)| p.open_fds).max(),
                nofile_soft: last.nofile_soft,
            })
        })
        .collect()
}

fn interval_row(a: &Sample, b: &Sample, roles: &BTreeMap<u32, Role>, hz: f64) -> IntervalRow {
    let secs = (b.at - a.at).as_secs_f64();
    let shares = cpu_shares(a, b);
    let pps = if_rates(a, b, secs).iter().map(|i| i.rx_pps + i.tx_pps).sum();
    let procs = proc_summaries(&[a, b], roles, hz);
    let side = |r: Role| procs.iter().filter(|p| p.role == r).map(|p| p.cpu).sum();
    IntervalRow {
        t_s: b.at.as_secs_f64(),
        cpu_busy: shares.iter().map(|s| 1.0 - s.idle).collect(),
        softirq: shares.iter().map(|s| s.softirq).collect(),
        pps,
        server_cpu: side(Role::Server),
        client_cpu: side(Role::Client),
    }
}

/// Applies every rule.
pub fn diagnose(host: &Host, samples: &[Sample], summary: &Summary, ctx: &Context) -> Vec<Finding> {
    let mut out = Vec::new();
    // The verdict first: among findings of equal severity it is the headline.
    bound(summary, ctx, &mut out);
    softirq_concentrated(summary, &mut out);
    nic_layout(host, summary, &mut out);
    irqbalance(host, samples, ctx, &mut out);
    tcp_queues(host, summary, &mut out);
    softnet(host, summary, &mut out);
    descriptors(samples, summary, &mut out);
    ports(host, summary, ctx, &mut out);
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

fn softirq_concentrated(s: &Summary, out: &mut Vec<Finding>) {
    let Some(hot) = s
        .cpus
        .iter()
        .filter(|c| c.softirq >= SOFTIRQ_HOT)
        .max_by(|a, b| a.softirq.total_cmp(&b.softirq))
    else {
        return;
    };
    let idle: Vec<&crate::doctor::CpuShare> =
        s.cpus.iter().filter(|c| c.cpu != hot.cpu && c.idle >= HEADROOM_IDLE).collect();
    if idle.is_empty() {
        return;
    }
    let rx_total: f64 = s.net_rx_per_s.values().sum();
    let rx_hot = s.net_rx_per_s.get(&hot.cpu).copied().unwrap_or(0.0);
    let idle_list: crate::CpuSet = idle.iter().map(|c| c.cpu).collect();
    let mean_idle = idle.iter().map(|c| c.idle).sum::<f64>() / idle.len() as f64;
    out.push(Finding {
        name: "softirq-concentrated",
        severity: Severity::Critical,
        summary: format!("receive processing is concentrated on CPU {}: its softirq share is {} while CPUs {} have headroom", hot.cpu, pct(hot.softirq), idle_list),
        evidence: vec![
            format!("CPU {} softirq {} idle {}", hot.cpu, pct(hot.softirq), pct(hot.idle)),
            format!("NET_RX on CPU {}: {:.0}/s of {:.0}/s on all CPUs ({})", hot.cpu, rx_hot, rx_total, pct(share(rx_hot as u64, rx_total as u64))),
            format!("CPUs {} idle {} on average", idle_list, pct(mean_idle)),
        ],
        remedy: "spread receive work: one IRQ per queue on its own CPU and RPS over the other CPUs of the node (`qpslab tune plan`, then `qpslab tune apply`)".into(),
    });
}

fn nic_layout(host: &Host, s: &Summary, out: &mut Vec<Finding>) {
    for nic in host.nics.iter().filter(|n| n.name != "lo" && n.state == "up" && !n.rx.is_empty()) {
        if nic.rps_on() {
            continue;
        }
        let pps =
            s.interfaces.iter().find(|i| i.name == nic.name).map_or(0.0, |i| i.rx_pps + i.tx_pps);
        let severity = if pps >= BUSY_NIC_PPS { Severity::Warning } else { Severity::Info };
        let traffic = format!("{} carried {:.0} packets/s during the window", nic.name, pps);
        if nic.rx.len() == 1 {
            out.push(Finding {
                name: "single-rx-queue",
                severity,
                summary: format!("{} has a single rx queue and RPS is off: one CPU does all its receive work", nic.name),
                evidence: vec![format!("{}: 1 rx queue, rps_cpus empty", nic.name), traffic],
                remedy: "enable RPS on the CPUs of the NIC's node other than the IRQ CPU (`qpslab tune plan`), or more queues (`ethtool -L`)".into(),
            });
            continue;
        }
        // Where the queue interrupts landed during the window, else where they are routed.
        let irq_numbers = nic.irq_numbers();
        let mut landed = crate::CpuSet::new();
        for r in s.irqs.iter().filter(|r| irq_numbers.contains(&r.irq)) {
            r.per_cpu_per_s.iter().filter(|(_, &v)| v > 0.0).for_each(|(c, _)| {
                landed.insert(*c);
            });
        }
        let cpus = if landed.is_empty() { nic.rx_irq_cpus() } else { landed };
        if cpus.len() == 1 {
            out.push(Finding {
                name: "irqs-on-one-cpu",
                severity,
                summary: format!("all {} rx queue IRQs of {} go to CPU {} and RPS is off", nic.rx.len(), nic.name, cpus),
                evidence: vec![format!("{}: {} rx queues, IRQs {:?} delivered to CPU {}", nic.name, nic.rx.len(), irq_numbers, cpus), traffic],
                remedy: "pin each queue's IRQ to its own CPU (`qpslab tune plan`, then `qpslab tune apply`)".into(),
            });
        }
    }
}

fn irqbalance(host: &Host, samples: &[Sample], ctx: &Context, out: &mut Vec<Finding>) {
    let Some(pid) = host.irqbalance_pid else { return };
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else { return };
    let moved: Vec<String> = last
        .irq_affinity
        .iter()
        .filter_map(|(irq, now)| {
            let before = first.irq_affinity.get(irq)?;
            (before != now)
                .then(|| format!("IRQ {irq} moved from CPUs {before} to {now} during the run"))
        })
        .collect();
    if moved.is_empty() && !ctx.journal_active {
        return;
    }
    let mut evidence = vec![format!("irqbalance running (pid {pid})")];
    if ctx.journal_active {
        evidence.push("a qpslab tune journal is active: IRQs were pinned by hand".into());
    }
    evidence.extend(moved);
    out.push(Finding {
        name: "irqbalance-vs-pinning",
        severity: Severity::Warning,
        summary: "irqbalance is running and rewrites IRQ affinities that were set by hand".into(),
        evidence,
        remedy: "stop irqbalance while pinning IRQs (`qpslab tune apply --stop-irqbalance`), or ban the NIC IRQs in its config".into(),
    });
}

fn tcp_queues(host: &Host, s: &Summary, out: &mut Vec<Finding>) {
    let d = |k: &str| s.tcp.get(k).copied().unwrap_or(0);
    let somaxconn = host.sysctl("net.core.somaxconn").unwrap_or("?");
    let syn_backlog = host.sysctl("net.ipv4.tcp_max_syn_backlog").unwrap_or("?");
    if d("ListenOverflows") > 0 || d("ListenDrops") > 0 {
        out.push(Finding {
            name: "accept-queue-overflow",
            severity: Severity::Critical,
            summary: "listen queues overflowed: connections were dropped before the server accepted them".into(),
            evidence: vec![
                format!("TcpExt ListenOverflows +{}, ListenDrops +{}", d("ListenOverflows"), d("ListenDrops")),
                format!("net.core.somaxconn = {somaxconn}"),
            ],
            remedy: "raise net.core.somaxconn (`qpslab tune plan`) and the server's backlog (`qpslab serve --backlog`, nginx `listen ... backlog=`); accept faster (more workers, reuseport)".into(),
        });
    }
    if d("TCPReqQFullDoCookies") > 0 || d("TCPReqQFullDrop") > 0 {
        out.push(Finding {
            name: "syn-queue-full",
            severity: if d("TCPReqQFullDrop") > 0 { Severity::Critical } else { Severity::Warning },
            summary: "the SYN queue filled: SYN cookies were sent or SYNs dropped (dmesg: \"Possible SYN flooding\")".into(),
            evidence: vec![
                format!("TcpExt TCPReqQFullDoCookies +{}, TCPReqQFullDrop +{}", d("TCPReqQFullDoCookies"), d("TCPReqQFullDrop")),
                format!("net.ipv4.tcp_max_syn_backlog = {syn_backlog}, net.core.somaxconn = {somaxconn}"),
            ],
            remedy: "raise net.ipv4.tcp_max_syn_backlog and net.core.somaxconn with the listen backlog (`qpslab tune plan`)".into(),
        });
    }
    if d("TCPBacklogDrop") > 0 {
        out.push(Finding {
            name: "socket-backlog-drop",
            severity: Severity::Warning,
            summary: "packets were dropped because a socket's backlog was full while its owner held it".into(),
            evidence: vec![format!("TcpExt TCPBacklogDrop +{}", d("TCPBacklogDrop"))],
            remedy: "the receiving process is too slow for its sockets: more workers, or pin them away from interrupt CPUs".into(),
        });
    }
    let (retrans, outs) = (d("RetransSegs"), d("OutSegs"));
    if retrans > 0 && outs > 0 && retrans as f64 / outs as f64 >= 0.01 {
        out.push(Finding {
            name: "retransmissions",
            severity: Severity::Warning,
            summary: format!("{} of TCP segments were retransmitted", pct(retrans as f64 / outs as f64)),
            evidence: vec![format!("Tcp RetransSegs +{retrans} of OutSegs +{outs}"), format!("TcpExt TCPTimeouts +{}", d("TCPTimeouts"))],
            remedy: "look for drops on the path (softnet, NIC rx_missed, the peer's queues); retransmits stall closed-loop load".into(),
        });
    }
}

fn softnet(host: &Host, s: &Summary, out: &mut Vec<Finding>) {
    if s.softnet_dropped > 0 {
        out.push(Finding {
            name: "softnet-backlog-drops",
            severity: Severity::Critical,
            summary: "packets were dropped because a CPU's input backlog was full".into(),
            evidence: vec![
                format!("softnet_stat dropped +{}", s.softnet_dropped),
                format!("net.core.netdev_max_backlog = {}", host.sysctl("net.core.netdev_max_backlog").unwrap_or("?")),
            ],
            remedy: "raise net.core.netdev_max_backlog (`qpslab tune plan`) and spread RPS over more CPUs".into(),
        });
    }
    if s.softnet_time_squeeze > 0 {
        out.push(Finding {
            name: "softnet-time-squeeze",
            severity: Severity::Warning,
            summary: "receive processing ran out of budget with packets left (time squeeze)".into(),
            evidence: vec![
                format!("softnet_stat time_squeeze +{} ({:.1}/s)", s.softnet_time_squeeze, per_s(s.softnet_time_squeeze, s.duration_s)),
                format!(
                    "net.core.netdev_budget = {}, netdev_budget_usecs = {}",
                    host.sysctl("net.core.netdev_budget").unwrap_or("?"),
                    host.sysctl("net.core.netdev_budget_usecs").unwrap_or("?")
                ),
            ],
            remedy: "raise net.core.netdev_budget (`qpslab tune plan`), or spread the receive work over more CPUs".into(),
        });
    }
}

fn descriptors(samples: &[Sample], s: &Summary, out: &mut Vec<Finding>) {
    for p in &s.processes {
        // Use the peak descriptor count seen in any sample.
        let peak = samples.iter().filter_map(|x| x.procs.get(&p.pid)?.open_fds).max();
        let (Some(open), Some(limit)) = (peak, p.nofile_soft) else { continue };
        let used = share(open as u64, limit);
        if used >= FD_CLOSE {
            out.push(Finding {
                name: "fd-limit-close",
                severity: if used >= 0.95 { Severity::Critical } else { Severity::Warning },
                summary: format!("{} (pid {}) uses {} of its descriptor limit (\"Too many open files\" next)", p.comm, p.pid, pct(used)),
                evidence: vec![format!("pid {}: {} descriptors open at peak, soft RLIMIT_NOFILE {}", p.pid, open, limit)],
                remedy: "raise RLIMIT_NOFILE (`ulimit -n`, systemd LimitNOFILE=, nginx worker_rlimit_nofile; qpslab raises its own) and fs.nr_open if needed".into(),
            });
        }
    }
    if let Some((allocated, max)) = samples.last().and_then(|x| x.file_nr) {
        if max > 0 && share(allocated, max) >= FD_CLOSE {
            out.push(Finding {
                name: "file-max-close",
                severity: Severity::Critical,
                summary: "the system-wide file handle limit is close".into(),
                evidence: vec![format!("fs.file-nr: {allocated} allocated of {max}")],
                remedy: "raise fs.file-max (`qpslab tune plan`)".into(),
            });
        }
    }
}

fn ports(host: &Host, s: &Summary, ctx: &Context, out: &mut Vec<Finding>) {
    let range = host.sysctl("net.ipv4.ip_local_port_range").and_then(|r| {
        let v: Vec<u64> = r.split_ascii_whitespace().filter_map(|x| x.parse().ok()).collect();
        Some(v.get(1)?.saturating_sub(*v.first()?) + 1)
    });
    let tw_share = range.map_or(0.0, |r| share(s.tcp_tw_max, r));
    if tw_share < TW_PRESSURE && ctx.addr_not_available == 0 {
        return;
    }
    let mut evidence = vec![format!(
        "TIME_WAIT sockets peaked at {} ({} of the {} ports in net.ipv4.ip_local_port_range = {})",
        s.tcp_tw_max,
        pct(tw_share),
        range.unwrap_or(0),
        host.sysctl("net.ipv4.ip_local_port_range").unwrap_or("?")
    )];
    if ctx.addr_not_available > 0 {
        evidence.push(format!(
            "{} connects failed with \"Cannot assign requested address\"",
            ctx.addr_not_available
        ));
    }
    out.push(Finding {
        name: "ephemeral-ports",
        severity: if ctx.addr_not_available > 0 { Severity::Critical } else { Severity::Warning },
        summary: "the client is running out of ephemeral ports (TIME_WAIT pressure)".into(),
        evidence,
        remedy: "keep connections alive, widen the port range and allow TIME_WAIT reuse on the client (`qpslab tune plan --role client`: ip_local_port_range, tcp_tw_reuse), or add source addresses".into(),
    });
}

fn bound(s: &Summary, ctx: &Context, out: &mut Vec<Finding>) {
    let side = |r: Role| s.processes.iter().filter(|p| p.role == r).collect::<Vec<_>>();
    let (servers, clients) = (side(Role::Server), side(Role::Client));
    let saturated =
        |ps: &[&ProcSummary]| !ps.is_empty() && ps.iter().any(|p| p.busy_ratio >= SATURATED);
    let describe = |ps: &[&ProcSummary]| {
        ps.iter()
            .map(|p| {
                format!(
                    "{} (pid {}): {:.2} CPUs over {} busy thread(s), {} of capacity",
                    p.comm,
                    p.pid,
                    p.cpu,
                    p.busy_threads,
                    pct(p.busy_ratio)
                )
            })
            .collect::<Vec<_>>()
    };
    let idle_cpus = s.cpus.iter().filter(|c| c.idle >= HEADROOM_IDLE).count();
    let (server_sat, client_sat) = (saturated(&servers), saturated(&clients));
    // CPU time spent neither in the watched processes nor in interrupt work: other processes.
    let busy: f64 = s.cpus.iter().map(|c| 1.0 - c.idle).sum();
    let interrupts: f64 = s.cpus.iter().map(|c| c.softirq + c.irq).sum();
    let watched: f64 = s.processes.iter().map(|p| p.cpu).sum();
    let other = busy - watched - interrupts;
    let contended = !s.processes.is_empty()
        && other >= 0.5
        && other >= 0.25 * busy
        && !(server_sat && client_sat);
    if contended {
        let mut evidence = vec![format!(
            "CPUs busy {busy:.2} CPUs in all; the watched processes {watched:.2}, interrupt work {interrupts:.2}, other work {other:.2}"
        )];
        evidence.extend(describe(&servers));
        evidence.extend(describe(&clients));
        out.push(Finding {
            name: "cpu-contention",
            severity: Severity::Warning,
            summary: "other processes used the CPUs during the run: the figures are lower than this host can do".into(),
            evidence,
            remedy: "stop the other work (builds, other benchmarks) or pin it away from the benchmark's CPUs, and run again".into(),
        });
    }
    if client_sat && !server_sat {
        let mut evidence = describe(&clients);
        evidence.extend(describe(&servers));
        out.push(Finding {
            name: "client-bound",
            severity: Severity::Warning,
            summary: "the load generator is saturated while the server has headroom: this measures the client, not the server".into(),
            evidence,
            remedy: "add generator threads (`qpslab load -t`) on free CPUs, or more client machines".into(),
        });
    } else if server_sat && client_sat {
        let mut evidence = describe(&servers);
        evidence.extend(describe(&clients));
        out.push(Finding {
            name: "both-saturated",
            severity: Severity::Info,
            summary: "the server and the load generator both use all the CPU they have: the rate is bounded by both".into(),
            evidence,
            remedy: "give each side more CPUs (more server workers, more generator threads) or put the generator on another machine".into(),
        });
    } else if server_sat {
        let mut evidence = describe(&servers);
        evidence.push(format!("{idle_cpus} CPU(s) at least {} idle", pct(HEADROOM_IDLE)));
        out.push(Finding {
            name: "server-bound",
            severity: Severity::Info,
            summary: "the server's threads are saturated: the rate is what this server configuration can do".into(),
            evidence,
            remedy: if idle_cpus > 0 {
                "give the server more workers on the idle CPUs (`qpslab serve -w`, nginx worker_processes)".into()
            } else {
                "every CPU is busy: profile the server, or move interrupt work off its CPUs (`qpslab tune plan`)".into()
            },
        });
    } else if !servers.is_empty() || !clients.is_empty() {
        let (rates, what) = match &ctx.request_rates {
            Some(r) => (r.clone(), "requests/s"),
            None => (s.intervals.iter().map(|i| i.pps).collect(), "packets/s"),
        };
        let Some(cv) = coefficient_of_variation(&rates) else { return };
        let mean = rates.iter().sum::<f64>() / rates.len() as f64;
        if cv <= FLAT_CV && mean > 0.0 && !contended {
            let mut evidence = describe(&clients);
            evidence.extend(describe(&servers));
            evidence.push(format!(
                "{what} flat at {mean:.0} (variation {:.1}% over {} intervals)",
                cv * 100.0,
                rates.len()
            ));
            out.push(Finding {
                name: "latency-bound",
                severity: Severity::Info,
                summary: "neither side is saturated and the rate is flat: the load is limited by round trips, not CPU".into(),
                evidence,
                remedy: "add connections (`qpslab load -c`) or pipeline; each connection carries one request per round trip".into(),
            });
        } else if !contended {
            let mut evidence = describe(&clients);
            evidence.extend(describe(&servers));
            evidence.push(format!(
                "{what} averaged {mean:.0} and varied {:.1}% over {} intervals",
                cv * 100.0,
                rates.len()
            ));
            out.push(Finding {
                name: "no-single-bottleneck",
                severity: Severity::Info,
                summary: "neither side is saturated and the rate was not steady: no single bottleneck stands out".into(),
                evidence,
                remedy: "run longer, or look at the per-interval rows for stalls (timeouts, retransmits, other load)".into(),
            });
        }
    }
}

fn coefficient_of_variation(v: &[f64]) -> Option<f64> {
    if v.len() < 2 {
        return None;
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    if mean <= 0.0 {
        return None;
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
    Some(var.sqrt() / mean)
}
