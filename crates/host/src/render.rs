//! Text rendering of the host model (`qpslab host`) and of doctor reports.

use crate::host::Host;
use crate::nic::Irq;
use std::fmt::Write as _;

fn or_dash<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// Counts per CPU, nonzero ones only: `cpu1:3093 cpu4:12`.
fn counts(irq: &Irq) -> String {
    let nonzero: Vec<String> =
        irq.counts.iter().filter(|(_, &n)| n > 0).map(|(c, n)| format!("cpu{c}:{n}")).collect();
    if nonzero.is_empty() {
        "no interrupts yet".to_string()
    } else {
        nonzero.join(" ")
    }
}

fn irq_text(irq: Option<&Irq>) -> String {
    let Some(irq) = irq else { return "irq -".to_string() };
    format!(
        "irq {} {}  affinity {} effective {}  {}",
        irq.number,
        irq.name,
        irq.affinity.as_ref().map_or("-".into(), |s| s.to_list()),
        irq.effective.as_ref().map_or("-".into(), |s| s.to_list()),
        counts(irq)
    )
}

/// `qpslab host` as text; `all` includes loopback.
pub fn host_text(host: &Host, all: bool) -> String {
    let mut o = String::new();
    let smt = host.cpus.iter().map(|c| c.siblings.len()).max().unwrap_or(1);
    let _ = writeln!(
        o,
        "cpus       {} online ({}): {} package(s), {} core(s), {}",
        host.online.len(),
        host.online,
        host.packages,
        host.cores,
        if smt > 1 { format!("SMT {smt} threads per core") } else { "no SMT".to_string() }
    );
    if smt > 1 {
        let mut pairs: Vec<String> = host
            .cpus
            .iter()
            .filter(|c| c.siblings.first() == Some(c.id))
            .map(|c| c.siblings.to_list())
            .collect();
        pairs.dedup();
        let _ = writeln!(o, "siblings   {}", pairs.join("  "));
    }
    let nodes: Vec<String> =
        host.nodes.iter().map(|n| format!("node{} {}", n.id, n.cpus)).collect();
    let _ = writeln!(
        o,
        "numa       {}",
        if nodes.is_empty() { "-".to_string() } else { nodes.join("  ") }
    );
    let _ = writeln!(
        o,
        "clock      {} (available: {})",
        or_dash(host.clocksource.as_deref()),
        if host.clocksources_available.is_empty() {
            "-".to_string()
        } else {
            host.clocksources_available.join(" ")
        }
    );
    if host.isolcpus.is_some() || host.nohz_full.is_some() {
        let _ = writeln!(
            o,
            "isolcpus   {}  nohz_full {}",
            or_dash(host.isolcpus.as_ref()),
            or_dash(host.nohz_full.as_ref())
        );
    }
    let _ = writeln!(
        o,
        "irqbalance {}",
        host.irqbalance_pid.map_or("not running".to_string(), |p| format!("running (pid {p})"))
    );
    for nic in host.nics_shown(all) {
        nic_text(nic, &mut o);
    }
    let _ = writeln!(o, "\nsysctls");
    for s in &host.sysctls {
        let _ = writeln!(o, "  {:<32} {}", s.name, or_dash(s.value.as_deref()));
    }
    let _ = writeln!(
        o,
        "  {:<32} {} soft, {} hard (this process)",
        "RLIMIT_NOFILE", host.nofile.0, host.nofile.1
    );
    o
}

/// One NIC: its line, then a line per rx and tx queue.
fn nic_text(nic: &crate::nic::Nic, o: &mut String) {
    let _ = writeln!(
        o,
        "\nnic {}  driver {}  node {}  {}  mtu {}  speed {}  rx queues {}  tx queues {}",
        nic.name,
        or_dash(nic.driver.as_deref()),
        or_dash(nic.numa_node),
        nic.state,
        or_dash(nic.mtu),
        nic.speed_mbps.map_or("-".to_string(), |s| format!("{s}Mb/s")),
        nic.rx.len(),
        nic.tx.len()
    );
    for q in &nic.rx {
        let rps = match &q.rps_cpus {
            Some(c) if !c.is_empty() => format!("rps {c}"),
            Some(_) => "rps off".to_string(),
            None => "rps -".to_string(),
        };
        let _ = writeln!(
            o,
            "  rx-{:<3} {}  {}  flow_cnt {}",
            q.index,
            irq_text(q.irq.as_ref()),
            rps,
            or_dash(q.rps_flow_cnt)
        );
    }
    for q in &nic.tx {
        let xps = match &q.xps_cpus {
            Some(c) if !c.is_empty() => c.to_list(),
            Some(_) => "off".to_string(),
            None => "-".to_string(),
        };
        let _ = writeln!(o, "  tx-{:<3} {}  xps {}", q.index, irq_text(q.irq.as_ref()), xps);
    }
}

/// A doctor report as text: the summary, then the findings worst first.
/// `explain`: the inventory of resources follows the rate (`doctor --explain`).
pub fn doctor_text(d: &crate::Diagnosis, explain: bool) -> String {
    let (summary, findings) = (&d.summary, &d.findings);
    let p = |x: f64| format!("{:>4.0}%", x * 100.0);
    let mut o = String::new();
    let _ = writeln!(o, "window     {:.1} s, {} samples", summary.duration_s, summary.samples);
    let _ = writeln!(o, "cpu     user   sys  soft   irq  idle   NET_RX/s   NET_TX/s");
    for c in &summary.cpus {
        let _ = writeln!(
            o,
            "  {:<4} {} {} {} {} {} {:>10.0} {:>10.0}",
            c.cpu,
            p(c.user),
            p(c.system),
            p(c.softirq),
            p(c.irq),
            p(c.idle),
            summary.net_rx_per_s.get(&c.cpu).copied().unwrap_or(0.0),
            summary.net_tx_per_s.get(&c.cpu).copied().unwrap_or(0.0)
        );
    }
    for i in summary.interfaces.iter().filter(|i| i.rx_pps + i.tx_pps > 0.0) {
        let _ = writeln!(
            o,
            "net  {:<6} rx {:.0} pkt/s {:.1} MB/s  tx {:.0} pkt/s {:.1} MB/s",
            i.name,
            i.rx_pps,
            i.rx_bytes_per_s / 1e6,
            i.tx_pps,
            i.tx_bytes_per_s / 1e6
        );
    }
    for q in &summary.qdiscs {
        let _ = writeln!(
            o,
            "qdisc {:<6} {}{}: {} passed, {} dropped, held back {} times, backlog up to {} bytes",
            q.iface,
            q.kind,
            q.rate_bytes_per_s.map_or(String::new(), |r| format!(
                " at {}",
                crate::doctor::explain::fmt_bits(r as f64 * 8.0)
            )),
            crate::doctor::explain::fmt_bits(q.bytes_per_s * 8.0),
            q.drops,
            q.overlimits,
            q.backlog_max
        );
    }
    for c in &summary.nic_counters {
        let _ = writeln!(o, "nic  {:<6} {} +{}", c.iface, c.name, c.delta);
    }
    let tcp: Vec<String> = summary.tcp.iter().map(|(k, v)| format!("{k} +{v}")).collect();
    let _ = writeln!(o, "tcp  {}", tcp.join(", "));
    let _ = writeln!(
        o,
        "sock tcp inuse {} (end), time_wait max {}, orphan max {}; softnet dropped +{}, time_squeeze +{}",
        summary.tcp_inuse, summary.tcp_tw_max, summary.tcp_orphan_max, summary.softnet_dropped, summary.softnet_time_squeeze
    );
    for pr in &summary.processes {
        let _ = writeln!(
            o,
            "proc {} (pid {}, {}) {:.2} CPUs, {} busy thread(s), busiest {:.2}, {} of capacity{}{}",
            pr.comm,
            pr.pid,
            match pr.role {
                crate::sample::Role::Server => "server",
                crate::sample::Role::Client => "client",
            },
            pr.cpu,
            pr.busy_threads,
            pr.busiest_thread,
            p(pr.busy_ratio).trim(),
            match (&pr.cpus, pr.cpus_busy) {
                (Some(c), Some(b)) => format!(", on {} ({} busy)", c.named(), p(b).trim()),
                _ => String::new(),
            },
            pr.open_fds.map_or(String::new(), |f| format!(", {f} fds"))
        );
    }
    o.push_str(&explanation_text(d));
    if let Some(e) = d.explanation.as_ref().filter(|_| explain) {
        o.push_str(&resources_text(e));
    }
    o.push_str(&profile_text(d));
    o.push_str(&findings_text(findings));
    o
}

/// Every resource of the inventory with its use, saturation and errors over the window, most
/// used first (the USE method's table): what `doctor --explain` adds.
pub fn resources_text(e: &crate::doctor::Explanation) -> String {
    let mut o = String::from(
        "resources  use  (saturation: work that waited for it; errors: what it dropped)\n",
    );
    if e.resources.is_empty() {
        o.push_str("           none measured\n");
    }
    for r in &e.resources {
        let _ = write!(o, "         {:>4.0}%  {}: {}", r.utilization * 100.0, r.name, r.used);
        if let Some(ms) = r.ms_per_request {
            let _ = write!(o, ", {} per response", crate::doctor::explain::fmt_ms(ms));
        }
        let _ = writeln!(
            o,
            "; saturation: {}; errors: {}",
            r.saturation.as_deref().unwrap_or("none seen"),
            r.errors.as_deref().unwrap_or("none")
        );
    }
    o
}

/// The rate explained, a sentence a line under `rate`; empty without an explanation.
pub fn explanation_text(d: &crate::Diagnosis) -> String {
    let Some(e) = &d.explanation else { return String::new() };
    let mut o = String::new();
    for (i, line) in e.chain.iter().enumerate() {
        let _ = writeln!(o, "{:<11}{line}", if i == 0 { "rate" } else { "" });
    }
    o
}

/// The findings, worst first, with evidence and remedy.
/// The profile's table and the top symbols of the saturated CPUs (or of the busiest one when
/// none is); empty without a profile.
pub fn profile_text(d: &crate::Diagnosis) -> String {
    let Some(p) = &d.profile else { return String::new() };
    let cpus = &d.summary.cpus;
    let mut detail: Vec<usize> =
        cpus.iter().filter(|c| c.busy() >= crate::doctor::SATURATED).map(|c| c.cpu).collect();
    if detail.is_empty() {
        detail.extend(cpus.iter().max_by(|a, b| a.busy().total_cmp(&b.busy())).map(|c| c.cpu));
    }
    format!("\n{}", p.render_text(&detail))
}

pub fn findings_text(findings: &[crate::doctor::Finding]) -> String {
    let mut o = String::new();
    if findings.is_empty() {
        let _ = writeln!(o, "\nfindings: none");
    } else {
        let _ = writeln!(o, "\nfindings:");
    }
    for f in findings {
        let sev = match f.severity {
            crate::doctor::Severity::Info => "info",
            crate::doctor::Severity::Warning => "warning",
            crate::doctor::Severity::Critical => "critical",
        };
        let _ = writeln!(o, "  [{sev}] {}: {}", f.name, f.summary);
        for e in &f.evidence {
            let _ = writeln!(o, "      evidence: {e}");
        }
        let _ = writeln!(o, "      remedy:   {}", f.remedy);
    }
    o
}
