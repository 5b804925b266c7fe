//! Text rendering of doctor reports: the summary, the resources, the profile and the findings.

use std::fmt::Write as _;

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
                crate::explain::fmt_bits(r as f64 * 8.0)
            )),
            crate::explain::fmt_bits(q.bytes_per_s * 8.0),
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
                qpslab_host::sample::Role::Server => "server",
                qpslab_host::sample::Role::Client => "client",
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
pub fn resources_text(e: &crate::Explanation) -> String {
    let mut o = String::from(
        "resources  use  (saturation: work that waited for it; errors: what it dropped)\n",
    );
    if e.resources.is_empty() {
        o.push_str("           none measured\n");
    }
    for r in &e.resources {
        let _ = write!(o, "         {:>4.0}%  {}: {}", r.utilization * 100.0, r.name, r.used);
        if let Some(ms) = r.ms_per_request {
            let _ = write!(o, ", {} per response", crate::explain::fmt_ms(ms));
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
        cpus.iter().filter(|c| c.busy() >= crate::SATURATED).map(|c| c.cpu).collect();
    if detail.is_empty() {
        detail.extend(cpus.iter().max_by(|a, b| a.busy().total_cmp(&b.busy())).map(|c| c.cpu));
    }
    format!("\n{}", p.render_text(&detail))
}

pub fn findings_text(findings: &[crate::Finding]) -> String {
    let mut o = String::new();
    if findings.is_empty() {
        let _ = writeln!(o, "\nfindings: none");
    } else {
        let _ = writeln!(o, "\nfindings:");
    }
    for f in findings {
        let sev = match f.severity {
            crate::Severity::Info => "info",
            crate::Severity::Warning => "warning",
            crate::Severity::Critical => "critical",
        };
        let _ = writeln!(o, "  [{sev}] {}: {}", f.name, f.summary);
        for e in &f.evidence {
            let _ = writeln!(o, "      evidence: {e}");
        }
        let _ = writeln!(o, "      remedy:   {}", f.remedy);
    }
    o
}
