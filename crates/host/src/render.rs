//! Text rendering of the host model (`qpslab host`).

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
