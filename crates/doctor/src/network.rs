//! The network interfaces as resources of the request path: a link or a shaper used to its
//! capacity bounds the rate (`link-saturated`); packets an interface, its qdisc or its driver
//! dropped are its errors (`interface-drops`); a cloud NIC's own allowance counters are its
//! limit (`nic-limit`). Only interfaces that carried traffic in the window are judged.

use super::explain::{fmt_bits, Explanation};
use super::summary::{pct, per_s, Summary};
use super::{Cause, Context, Finding, Severity, BUSY_NIC_PPS, DROPS_CRITICAL_PER_S};
use qpslab_host::links::is_allowance_counter;

/// The interface that bounds the rate, when the explanation's bound is a link or a shaper.
pub(super) fn link_saturated(s: &Summary, ctx: &Context, ex: &Explanation) -> Option<Finding> {
    let r = ex.bound_resource().filter(|r| r.kind == "link" || r.kind == "shaper")?;
    let iface = r.iface.as_deref().unwrap_or("?");
    let mut evidence =
        vec![format!("{}: {} of its capacity ({})", r.name, pct(r.utilization), r.used)];
    evidence.extend(r.saturation.iter().map(|w| format!("{iface}: {w} (saturation)")));
    evidence.extend(r.errors.iter().map(|e| format!("{iface}: {e} (errors)")));
    if let Some(i) = s.interfaces.iter().find(|i| i.name == iface) {
        evidence.push(format!(
            "{iface}: rx {:.0} packets/s {}, tx {:.0} packets/s {}",
            i.rx_pps,
            fmt_bits(i.rx_bytes_per_s * 8.0),
            i.tx_pps,
            fmt_bits(i.tx_bytes_per_s * 8.0)
        ));
        if let Some(l) = ctx.load.as_ref().filter(|l| l.responses > 0) {
            let per = i.rx_bytes_per_s.max(i.tx_bytes_per_s) / l.rate().max(1e-9);
            evidence.push(format!(
                "{:.0} bytes on the wire per response: {} / {:.0} bytes = {:.0} responses/s at most",
                per,
                r.used.split(',').next().unwrap_or(""),
                per,
                l.rate() / r.utilization.max(1e-9)
            ));
        }
    }
    let sides: Vec<String> = s
        .processes
        .iter()
        .map(|p| format!("{} (pid {}) {} of its capacity", p.comm, p.pid, pct(p.busy_ratio)))
        .collect();
    if !sides.is_empty() {
        evidence.push(format!(
            "{}: more CPUs, RPS or more workers would not raise the rate",
            sides.join(", ")
        ));
    }
    Some(Finding {
        name: "link-saturated",
        severity: Severity::Warning,
        summary: format!(
            "the network is the bound: {} carried {} of what it can: the rate measures the link, not the server",
            r.name,
            pct(r.utilization)
        ),
        evidence,
        remedy: format!(
            "a faster link or more of them (bonding, more NICs or ENIs, load machines on other links), smaller responses (compression), or{} a higher shaping rate",
            if r.kind == "shaper" { format!(" on {iface}'s {} qdisc,", s.qdiscs.iter().find(|q| q.iface == iface && q.rate_bytes_per_s.is_some()).map_or("shaping", |q| q.kind.as_str())) } else { String::new() }
        ),
        cause: Some(Cause::Network),
    })
}

/// Drops on interfaces that carried traffic: qdisc drops, the interface's own drop counts
/// (/proc/net/dev) and the driver's loss counters; and a cloud NIC's allowance counters.
pub(super) fn drops(s: &Summary, ctx: &Context, ex: &Explanation, out: &mut Vec<Finding>) {
    // A shaper at its rate drops by design: those drops are the bound's evidence
    // (link-saturated), not an error of their own.
    let bound = ex.bound_resource().filter(|r| r.kind == "shaper").and_then(|r| r.iface.clone());
    let busy = |iface: &str| {
        ctx.on_path(iface)
            && s.interfaces.iter().any(|i| i.name == iface && i.rx_pps + i.tx_pps >= BUSY_NIC_PPS)
    };
    let mut evidence = Vec::new();
    let mut lost = 0;
    let at_rate = |q: &super::summary::QdiscRate| {
        q.rate_bytes_per_s.is_some() && bound.as_deref() == Some(q.iface.as_str())
    };
    for q in s.qdiscs.iter().filter(|q| q.drops > 0 && busy(&q.iface) && !at_rate(q)) {
        lost += q.drops;
        evidence.push(format!(
            "{} qdisc {}: {} packets dropped, held back {} times, backlog up to {} bytes",
            q.iface, q.kind, q.drops, q.overlimits, q.backlog_max
        ));
    }
    for i in s.interfaces.iter().filter(|i| i.rx_drop + i.tx_drop > 0 && busy(&i.name)) {
        lost += i.rx_drop + i.tx_drop;
        evidence.push(format!(
            "{}: rx dropped +{}, tx dropped +{} (/proc/net/dev)",
            i.name, i.rx_drop, i.tx_drop
        ));
    }
    let (allowance, driver): (Vec<_>, Vec<_>) = s
        .nic_counters
        .iter()
        .filter(|c| busy(&c.iface))
        .partition(|c| is_allowance_counter(&c.name));
    for c in &driver {
        lost += c.delta;
        evidence.push(format!("{} driver counter {} +{}", c.iface, c.name, c.delta));
    }
    if !evidence.is_empty() {
        let rate = per_s(lost, s.duration_s);
        out.push(Finding {
            name: "interface-drops",
            severity: if rate >= DROPS_CRITICAL_PER_S { Severity::Critical } else { Severity::Warning },
            summary: format!("interfaces that carried the run dropped packets ({lost} in the window, {rate:.1}/s): each is a retransmission and a stalled request"),
            evidence,
            remedy: "find where: a shaper's queue (its limit or rate), the interface's ring (ethtool -G), the driver's buffers; a link at its capacity drops by design (see link-saturated)".into(),
            cause: Some(Cause::Network),
        });
    }
    if !allowance.is_empty() {
        out.push(Finding {
            name: "nic-limit",
            severity: Severity::Warning,
            summary: format!("the NIC's own limits were hit ({}): the cloud instance's allowance, not this host's settings, held packets back", allowance.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")),
            evidence: allowance.iter().map(|c| format!("{} {} +{} ({:.1}/s)", c.iface, c.name, c.delta, per_s(c.delta, s.duration_s))).collect(),
            remedy: "a larger instance type or more network interfaces (ENIs) with the load spread over them; fewer packets per request (keep-alive, larger responses per packet); no host setting lifts this limit".into(),
            cause: Some(Cause::Network),
        });
    }
}
