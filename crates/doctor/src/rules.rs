//! The kernel-side rules: where receive work runs (softirq, queues, IRQs, irqbalance), TCP's
//! queues and retransmissions, softnet, descriptors and ephemeral ports. Each rule's threshold
//! is in the catalogue ([`super::RULES`]).

use super::explain::Explanation;
use super::losses::{attribute, not_this_runs, RunLosses};
use super::summary::{pct, per_s, share, CpuShare, ListenFull, Summary};
use super::{
    host_settings, Cause, Context, Finding, Severity, BUSY_NIC_PPS, COOKIES_PER_S,
    DROPS_CRITICAL_PER_S, FD_CLOSE, HEADROOM_IDLE, RETRANS_PER_S, RETRANS_SHARE, SOFTIRQ_HOT,
    SQUEEZE_PER_S, TW_PRESSURE,
};
use qpslab_host::host::Host;
use qpslab_host::sample::Sample;

pub(super) fn softirq_concentrated(s: &Summary, ctx: &Context, out: &mut Vec<Finding>) {
    let Some(hot) = s
        .cpus
        .iter()
        .filter(|c| c.softirq >= SOFTIRQ_HOT)
        .max_by(|a, b| a.softirq.total_cmp(&b.softirq))
    else {
        return;
    };
    let idle: Vec<&CpuShare> =
        s.cpus.iter().filter(|c| c.cpu != hot.cpu && c.idle >= HEADROOM_IDLE).collect();
    if idle.is_empty() {
        return;
    }
    let rx_total: f64 = s.net_rx_per_s.values().sum();
    let rx_hot = s.net_rx_per_s.get(&hot.cpu).copied().unwrap_or(0.0);
    let idle_list: qpslab_host::CpuSet = idle.iter().map(|c| c.cpu).collect();
    let mean_idle = idle.iter().map(|c| c.idle).sum::<f64>() / idle.len() as f64;
    let mut evidence = vec![
        format!("CPU {} softirq {} idle {}", hot.cpu, pct(hot.softirq), pct(hot.idle)),
        format!(
            "NET_RX on CPU {}: {:.0}/s of {:.0}/s on all CPUs ({})",
            hot.cpu,
            rx_hot,
            rx_total,
            pct(share(rx_hot as u64, rx_total as u64))
        ),
        format!("CPUs {} idle {} on average", idle_list, pct(mean_idle)),
    ];
    evidence.extend(super::profiled::net_rx_evidence(ctx, hot.cpu));
    out.push(Finding {
        name: "softirq-concentrated",
        severity: Severity::Critical,
        summary: format!("receive processing is concentrated on CPU {}: its softirq share is {} while CPUs {} have headroom", hot.cpu, pct(hot.softirq), idle_list),
        evidence,
        remedy: "spread receive work: one IRQ per queue on its own CPU and RPS over the other CPUs of the node (`qpslab tune plan`, then `qpslab tune apply`)".into(),
        cause: Some(Cause::Steering { iface: None }),
    });
}

pub(super) fn nic_layout(host: &Host, s: &Summary, ctx: &Context, out: &mut Vec<Finding>) {
    let judged = |n: &&qpslab_host::nic::Nic| {
        n.name != "lo" && n.state == "up" && !n.rx.is_empty() && ctx.on_path(&n.name)
    };
    for nic in host.nics.iter().filter(judged) {
        let pps =
            s.interfaces.iter().find(|i| i.name == nic.name).map_or(0.0, |i| i.rx_pps + i.tx_pps);
        // An interface that carried (almost) nothing has no receive work to spread.
        if nic.rps_on() || pps < BUSY_NIC_PPS {
            continue;
        }
        // A queue layout is a smell, not a bound: a warning only when a CPU its interrupts
        // land on (where they were routed, when none landed) was saturated in this window.
        let irq_cpus = {
            let numbers = nic.irq_numbers();
            let mut landed = qpslab_host::CpuSet::new();
            for r in s.irqs.iter().filter(|r| numbers.contains(&r.irq)) {
                r.per_cpu_per_s.iter().filter(|(_, &v)| v > 0.0).for_each(|(c, _)| {
                    landed.insert(*c);
                });
            }
            if landed.is_empty() {
                nic.rx_irq_cpus()
            } else {
                landed
            }
        };
        let hot = s.cpus.iter().find(|c| irq_cpus.contains(c.cpu) && c.busy() >= super::SATURATED);
        let severity = if hot.is_some() { Severity::Warning } else { Severity::Info };
        let traffic = match hot {
            Some(c) => format!(
                "{} carried {:.0} packets/s during the window; CPU {} that takes its interrupts was {} busy",
                nic.name, pps, c.cpu, pct(c.busy())
            ),
            None => format!(
                "{} carried {:.0} packets/s during the window; no CPU taking its interrupts was saturated, so this does not bound the rate",
                nic.name, pps
            ),
        };
        if nic.rx.len() == 1 {
            out.push(Finding {
                name: "single-rx-queue",
                severity,
                summary: format!("{} has a single rx queue and RPS is off: one CPU does all its receive work", nic.name),
                evidence: vec![format!("{}: 1 rx queue, rps_cpus empty", nic.name), traffic],
                remedy: "enable RPS on the CPUs of the NIC's node other than the IRQ CPU (`qpslab tune plan`), or more queues (`ethtool -L`)".into(),
                cause: Some(Cause::Steering { iface: Some(nic.name.clone()) }),
            });
            continue;
        }
        // Where the queue interrupts landed during the window, else where they are routed.
        let irq_numbers = nic.irq_numbers();
        let mut landed = qpslab_host::CpuSet::new();
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
                cause: Some(Cause::Steering { iface: Some(nic.name.clone()) }),
            });
        }
    }
}

pub(super) fn irqbalance(host: &Host, samples: &[Sample], ctx: &Context, out: &mut Vec<Finding>) {
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
        cause: Some(Cause::IrqBalance { pid }),
    });
}

pub(super) fn tcp_queues(
    host: &Host,
    s: &Summary,
    ctx: &Context,
    ex: &Explanation,
    losses: Option<&RunLosses>,
    out: &mut Vec<Finding>,
) {
    let d = |k: &str| s.tcp.get(k).copied().unwrap_or(0);
    let somaxconn = host.sysctl("net.core.somaxconn").unwrap_or("?");
    let syn_backlog = host.sysctl("net.ipv4.tcp_max_syn_backlog").unwrap_or("?");
    let rate = |k: &str| per_s(d(k).max(0) as u64, s.duration_s);
    let drop_severity = |per_s: f64| {
        if per_s >= DROPS_CRITICAL_PER_S {
            Severity::Critical
        } else {
            Severity::Warning
        }
    };
    if d("ListenOverflows") > 0 || d("ListenDrops") > 0 {
        out.push(listen_overflows(s, ctx, somaxconn, d("ListenOverflows"), d("ListenDrops")));
    }
    if rate("TCPReqQFullDoCookies") >= COOKIES_PER_S || d("TCPReqQFullDrop") > 0 {
        let f = Finding {
            name: "syn-queue-full",
            severity: if d("TCPReqQFullDrop") > 0 { Severity::Critical } else { Severity::Warning },
            summary: "the SYN queue filled: SYN cookies were sent or SYNs dropped (dmesg: \"Possible SYN flooding\")".into(),
            evidence: vec![
                format!("TcpExt TCPReqQFullDoCookies +{} ({:.1}/s), TCPReqQFullDrop +{}", d("TCPReqQFullDoCookies"), rate("TCPReqQFullDoCookies"), d("TCPReqQFullDrop")),
                format!("net.ipv4.tcp_max_syn_backlog = {syn_backlog}, net.core.somaxconn = {somaxconn}"),
            ],
            remedy: "raise net.ipv4.tcp_max_syn_backlog and net.core.somaxconn with the listen backlog (`qpslab tune plan`)".into(),
            cause: host_settings("syn-queue-full"),
        };
        out.push(syn_queue_whose(f, ctx));
    }
    if d("TCPBacklogDrop") > 0 {
        let f = Finding {
            name: "socket-backlog-drop",
            severity: drop_severity(rate("TCPBacklogDrop")),
            summary: "packets were dropped because a socket's backlog was full while its owner held it".into(),
            evidence: vec![format!("TcpExt TCPBacklogDrop +{} ({:.1}/s), {}", d("TCPBacklogDrop"), rate("TCPBacklogDrop"), s.counted())],
            remedy: "the receiving process is too slow for its sockets: more workers, or pin them away from interrupt CPUs".into(),
            cause: Some(Cause::SocketBacklog { per_s: rate("TCPBacklogDrop") }),
        };
        out.push(attribute(f, losses, |l| l.drops, "packets dropped on their way in"));
    }
    let (retrans, outs) = (d("RetransSegs"), d("OutSegs"));
    if outs > 0
        && retrans as f64 / outs as f64 >= RETRANS_SHARE
        && rate("RetransSegs") >= RETRANS_PER_S
    {
        // A link at its capacity drops what it cannot send: the retransmissions are the
        // bound's doing, said under it.
        let link = ex.bound_resource().filter(|r| r.kind == "link" || r.kind == "shaper");
        let f = Finding {
            name: "retransmissions",
            severity: if link.is_some() { Severity::Info } else { Severity::Warning },
            summary: match link {
                Some(r) => format!("{} of TCP segments were retransmitted, dropped where {} is at its capacity (link-saturated)", pct(retrans as f64 / outs as f64), r.name),
                None => format!("{} of TCP segments were retransmitted", pct(retrans as f64 / outs as f64)),
            },
            evidence: vec![format!("Tcp RetransSegs +{retrans} of OutSegs +{outs} ({:.0}/s), {}", rate("RetransSegs"), s.counted()), format!("TcpExt TCPTimeouts +{}", d("TCPTimeouts"))],
            remedy: "look for drops on the path (softnet, NIC rx_missed, the peer's queues); retransmits stall closed-loop load".into(),
            cause: Some(Cause::Loss { share: retrans as f64 / outs as f64, timeouts: d("TCPTimeouts").max(0) as u64 }),
        };
        out.push(attribute(f, losses, |l| l.retrans, "segments retransmitted"));
    }
}

/// UDP datagrams dropped for a full socket buffer (Udp RcvbufErrors, SndbufErrors; IPv4 and
/// IPv6): what an HTTP/3 run loses in the host. The counters are host-wide; the followed
/// processes' own sockets' drops (/proc/PID/net/udp) say whose a receive drop was: the run's
/// when they moved, another program's when they did not. Without them, a run that spoke TCP
/// sent no datagram to lose (another's), and otherwise it is not known (at most a warning).
pub(super) fn udp_buffers(s: &Summary, ctx: &Context, out: &mut Vec<Finding>) {
    let d = |k: &str| s.tcp.get(k).copied().unwrap_or(0).max(0) as u64;
    for (counter, direction, sysctl) in [
        ("UdpRcvbufErrors", "receive", "net.core.rmem_max"),
        ("UdpSndbufErrors", "send", "net.core.wmem_max"),
    ] {
        let dropped = d(counter);
        if dropped == 0 {
            continue;
        }
        let rate = per_s(dropped, s.duration_s);
        let (what, remedy) = if direction == "receive" {
            (
                "UDP datagrams were dropped because a socket's receive buffer was full: its reader fell behind",
                format!("read the socket faster (more workers, batched reads, GRO) or give it a larger buffer: raise {sysctl} and the socket's SO_RCVBUF (QUIC stacks ask for MiBs)"),
            )
        } else {
            (
                "UDP datagrams were dropped because a socket's send buffer was full: its writer got ahead of it",
                format!("pace the sends, or give the socket a larger buffer: raise {sysctl} and its SO_SNDBUF"),
            )
        };
        let mut f = Finding {
            name: "udp-buffer-drops",
            severity: if rate >= DROPS_CRITICAL_PER_S { Severity::Critical } else { Severity::Warning },
            summary: what.into(),
            evidence: vec![
                format!("Udp {counter} +{dropped} ({rate:.1}/s) of InDatagrams +{} and OutDatagrams +{}, {}", d("UdpInDatagrams"), d("UdpOutDatagrams"), s.counted()),
            ],
            remedy,
            cause: Some(Cause::UdpBuffer { direction: direction.into(), per_s: rate }),
        };
        let own = s.udp_own_drops.filter(|_| direction == "receive");
        match (own, ctx.load.as_ref().map(|l| l.quic)) {
            (Some(mine), _) if mine > 0 => {
                f.evidence.push(format!(
                    "{mine} of them at the followed processes' own UDP sockets (/proc/PID/net/udp drops)"
                ));
            }
            (Some(_), _) => {
                let why = "the followed processes' own UDP sockets dropped none (/proc/PID/net/udp drops): the counters are host-wide".into();
                f = not_this_runs(
                    f,
                    why,
                    "the host's other UDP traffic lost them (ss -uamp shows each socket's drops)",
                );
            }
            (None, Some(None)) => {
                let why = "the run spoke TCP: it sent and received no UDP datagram (the counters are host-wide)".into();
                f = not_this_runs(
                    f,
                    why,
                    "the host's other UDP traffic lost them (ss -uanp shows each socket's queue)",
                );
            }
            (None, Some(Some(q))) => {
                f.severity = f.severity.min(Severity::Warning);
                f.evidence.push(format!(
                    "the run spoke HTTP/3: its generator counted {} datagrams in and {} out, {} its own send buffer did not take; the counters are host-wide",
                    q.datagrams_in, q.datagrams_out, q.send_dropped
                ));
            }
            (None, None) => f.severity = f.severity.min(Severity::Warning),
        }
        out.push(f);
    }
}

/// Whether the load opened connections in its window (not only kept-alive ones, with no
/// reconnects): only then can a listen or SYN queue have dropped one of the run's. True when
/// the load is not known.
pub(super) fn opened_connections(ctx: &Context) -> bool {
    ctx.load.as_ref().is_none_or(|l| l.mode != "closed" || l.reconnects > 0)
}

/// The SYN queue's counters are host-wide: a run that opened no connection in its window
/// (kept-alive connections, no reconnects) sent no SYN to be queued or dropped.
fn syn_queue_whose(f: Finding, ctx: &Context) -> Finding {
    let connected = opened_connections(ctx);
    if connected {
        return f;
    }
    let why = "the load opened no connection in its window (kept-alive connections, no reconnects): the counters are host-wide";
    not_this_runs(f, why.into(), "look at the host's other listeners (ss -ltn)")
}

/// Listen overflows are counted host-wide: they are the run's only when a listener of the
/// server was seen at its backlog and the load opened connections in the window (a run of
/// kept-alive connections makes no connection attempt to drop). Else they are said as the
/// host's, as info.
fn listen_overflows(
    s: &Summary,
    ctx: &Context,
    somaxconn: &str,
    overflows: i64,
    drops: i64,
) -> Finding {
    let per_s = per_s(overflows.max(drops).max(0) as u64, s.duration_s);
    let counters = format!(
        "TcpExt ListenOverflows +{overflows}, ListenDrops +{drops} ({per_s:.1}/s), {}",
        s.counted()
    );
    let servers: Vec<u32> = s
        .processes
        .iter()
        .filter(|p| p.role == qpslab_host::sample::Role::Server)
        .map(|p| p.pid)
        .collect();
    // With the server unknown, any listener seen full may be its (the evidence names it).
    let ours: Vec<&ListenFull> = s
        .listen_full
        .iter()
        .filter(|l| servers.is_empty() || l.holders.iter().any(|(pid, _)| servers.contains(pid)))
        .collect();
    let connected = opened_connections(ctx);
    let seen = |l: &ListenFull| {
        let who: Vec<String> = l.holders.iter().map(|(p, c)| format!("{c} {p}")).collect();
        format!(
            "listener {} ({}): accept queue at its backlog of {} in {} of {} samples",
            l.local,
            if who.is_empty() { "holder unknown".to_string() } else { who.join(", ") },
            l.backlog,
            l.full,
            l.samples
        )
    };
    if ours.is_empty() || !connected {
        let mut evidence = vec![counters];
        evidence.extend(s.listen_full.iter().map(seen));
        evidence.push(if !connected {
            "the load opened no connection in its window (kept-alive connections, no reconnects): no attempt of this run's could be dropped".into()
        } else if servers.is_empty() {
            "no listener was seen at its backlog in the window's samples".into()
        } else {
            "no listener of the server was seen at its backlog in the window's samples".into()
        });
        return Finding {
            name: "host-listen-overflows",
            severity: Severity::Info,
            summary: "listen queues on this host overflowed during the run, but none of this run's: the counters are host-wide".into(),
            evidence,
            remedy: "none for this run; name the server (--server-pid) if it was not followed, or look at the host's other listeners (ss -ltn)".into(),
            cause: Some(Cause::NotTheRuns),
        };
    }
    let mut evidence = vec![counters];
    evidence.extend(ours.iter().map(|l| seen(l)));
    let capped = somaxconn.parse::<u32>().ok();
    let remedy = match capped {
        Some(max) if ours.iter().all(|l| l.backlog < max) => format!(
            "raise the server's listen backlog (nginx `listen ... backlog=`, `qpslab serve --backlog`): it is {} while net.core.somaxconn allows {max}; accept faster (more workers, reuseport)",
            ours.iter().map(|l| l.backlog.to_string()).collect::<Vec<_>>().join(", ")
        ),
        _ => "raise net.core.somaxconn (`qpslab tune plan`) with the server's listen backlog (nginx `listen ... backlog=`, `qpslab serve --backlog`); accept faster (more workers, reuseport)".into(),
    };
    evidence.push(format!("net.core.somaxconn = {somaxconn}"));
    Finding {
        name: "accept-queue-overflow",
        severity: if per_s >= DROPS_CRITICAL_PER_S {
            Severity::Critical
        } else {
            Severity::Warning
        },
        summary:
            "the server's listen queue overflowed: connections were dropped before it accepted them"
                .into(),
        evidence,
        remedy,
        cause: host_settings("accept-queue-overflow"),
    }
}

pub(super) fn softnet(
    host: &Host,
    s: &Summary,
    losses: Option<&RunLosses>,
    out: &mut Vec<Finding>,
) {
    if s.softnet_dropped > 0 {
        let rate = per_s(s.softnet_dropped, s.duration_s);
        let f = Finding {
            name: "softnet-backlog-drops",
            severity: if rate >= DROPS_CRITICAL_PER_S { Severity::Critical } else { Severity::Warning },
            summary: "packets were dropped because a CPU's input backlog was full".into(),
            evidence: vec![
                format!("softnet_stat dropped +{} ({rate:.1}/s)", s.softnet_dropped),
                format!("net.core.netdev_max_backlog = {}", host.sysctl("net.core.netdev_max_backlog").unwrap_or("?")),
            ],
            remedy: "raise net.core.netdev_max_backlog (`qpslab tune plan`) and spread RPS over more CPUs".into(),
            cause: host_settings("softnet-backlog-drops"),
        };
        // A TCP segment of the run's dropped there is sent again: its retransmissions say.
        out.push(attribute(f, losses, |l| l.retrans, "segments retransmitted"));
    }
    if per_s(s.softnet_time_squeeze, s.duration_s) >= SQUEEZE_PER_S {
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
            cause: host_settings("softnet-time-squeeze"),
        });
    }
}

/// A process near its descriptor limit: a warning, critical at 95%. When a server's log
/// said it ran out in the window (`ran_out`, the log's words), the server process whose table
/// was seen fullest is the one (not its master, which holds a few descriptors), critical
/// however full the samples saw it: they see the table between the failures, when closed
/// connections have freed some of it.
pub(super) fn descriptors(
    samples: &[Sample],
    s: &Summary,
    ran_out: Option<&str>,
    out: &mut Vec<Finding>,
) {
    // Each process's peak descriptor count seen in any sample, with its limit.
    let tables: Vec<(&super::ProcSummary, usize, u64)> = s
        .processes
        .iter()
        .filter_map(|p| {
            let peak = samples.iter().filter_map(|x| x.procs.get(&p.pid)?.open_fds).max()?;
            Some((p, peak, p.nofile_soft?))
        })
        .collect();
    let fullest_server = tables
        .iter()
        .filter(|(p, ..)| p.role == qpslab_host::sample::Role::Server)
        .max_by(|a, b| share(a.1 as u64, a.2).total_cmp(&share(b.1 as u64, b.2)))
        .map(|(p, ..)| p.pid);
    for &(p, open, limit) in &tables {
        let used = share(open as u64, limit);
        let said = ran_out.filter(|_| fullest_server == Some(p.pid));
        if used >= FD_CLOSE || said.is_some() {
            let mut evidence = vec![format!(
                "pid {}: {} descriptors open at peak, soft RLIMIT_NOFILE {}",
                p.pid, open, limit
            )];
            evidence.extend(said.map(|l| format!("the server's log: {l}")));
            out.push(Finding {
                name: "fd-limit-close",
                severity: if used >= 0.95 || said.is_some() { Severity::Critical } else { Severity::Warning },
                summary: match said {
                    Some(_) => format!("{} (pid {}) ran out of descriptors: {} of its limit in use at the peak sampled, and its log says \"Too many open files\"", p.comm, p.pid, pct(used)),
                    None => format!("{} (pid {}) uses {} of its descriptor limit (\"Too many open files\" next)", p.comm, p.pid, pct(used)),
                },
                evidence,
                remedy: "raise RLIMIT_NOFILE (`ulimit -n`, systemd LimitNOFILE=, nginx worker_rlimit_nofile; qpslab raises its own) and fs.nr_open if needed".into(),
                cause: Some(Cause::Descriptors { pid: Some(p.pid), open: open as u64, limit }),
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
                cause: Some(Cause::Descriptors { pid: None, open: allocated, limit: max }),
            });
        }
    }
}

pub(super) fn ports(host: &Host, s: &Summary, ctx: &Context, out: &mut Vec<Finding>) {
    let range_text = host.sysctl("net.ipv4.ip_local_port_range").unwrap_or("?");
    let range = host.sysctl("net.ipv4.ip_local_port_range").and_then(|r| {
        let v: Vec<u64> = r.split_ascii_whitespace().filter_map(|x| x.parse().ok()).collect();
        Some(v.get(1)?.saturating_sub(*v.first()?) + 1)
    });
    // 1: TIME_WAIT ports over 1 s old are reused for new connects; 2 (the default): only to
    // loopback destinations.
    let reuse = host.sysctl("net.ipv4.tcp_tw_reuse").unwrap_or("0").to_string();
    let reused = |d: &qpslab_host::sample::DestPorts| {
        reuse == "1" || (reuse == "2" && d.dest.ip().is_loopback())
    };
    // Ports a new connect to the destination cannot take, and whether someone connects to it
    // now: connections to it closed during the window, or connects failing for want of a port
    // (once the range is used up, nothing new closes until TIME_WAIT ends).
    let pressed = range.and_then(|r| {
        s.dest_ports
            .iter()
            .map(|d| {
                let blocked = d.open + if reused(d) { d.tw_young } else { d.time_wait };
                (d, blocked, share(blocked, r))
            })
            .filter(|(d, _, sh)| {
                *sh >= TW_PRESSURE && (d.tw_in_window > 0 || ctx.addr_not_available > 0)
            })
            .max_by(|a, b| a.2.total_cmp(&b.2))
    });
    if pressed.is_none() && ctx.addr_not_available == 0 {
        return;
    }
    let mut evidence = Vec::new();
    if let (Some((d, blocked, sh)), Some(r)) = (pressed, range) {
        evidence.push(format!(
            "{}: {blocked} of the {r} ports of net.ipv4.ip_local_port_range = {range_text} held ({}): {} open, {} in TIME_WAIT ({} closed within the window)",
            d.dest, pct(sh), d.open, d.time_wait, d.tw_in_window
        ));
        evidence.push(if reused(d) {
            format!("net.ipv4.tcp_tw_reuse = {reuse}: ports in TIME_WAIT for over 1 s are reused for new connects to it; the {} younger are counted", d.tw_young)
        } else {
            format!("net.ipv4.tcp_tw_reuse = {reuse}: every port in TIME_WAIT to it is held for 60 s")
        });
    }
    if ctx.addr_not_available > 0 {
        evidence.push(format!(
            "{} connects failed with \"Cannot assign requested address\"",
            ctx.addr_not_available
        ));
    }
    let to = pressed.map_or(String::new(), |(d, _, _)| format!(" to {}", d.dest));
    out.push(Finding {
        name: "ephemeral-ports",
        severity: if ctx.addr_not_available > 0 { Severity::Critical } else { Severity::Warning },
        summary: format!("the client is running out of ephemeral ports{to}: each connection to one destination needs its own source port, held 60 s in TIME_WAIT after the close"),
        evidence,
        remedy: "keep connections alive; add source addresses (`qpslab load --source`, each adds a port range); widen the port range and reuse TIME_WAIT ports (`qpslab tune plan --role client`: ip_local_port_range, tcp_tw_reuse = 1)".into(),
        cause: host_settings("ephemeral-ports"),
    });
}
