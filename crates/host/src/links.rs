//! What the network interfaces can carry and where they lose packets, at one instant: each
//! interface's queueing disciplines (a shaper's rate is the interface's capacity; drops,
//! overlimits and backlog its saturation and errors) and the driver's own limit and drop
//! counters (`ethtool -S`: a cloud NIC's allowance counters, misses, discards).
//!
//! On the live root they come from rtnetlink and the SIOCETHTOOL ioctl ([`qpslab_sys`]); under
//! another root (a fixture tree, a captured host) from files beside /proc and /sys:
//! `qpslab/tc-qdisc.json` (what `tc -s -j qdisc show` prints) and `qpslab/ethtool/IFACE` (the
//! text of `ethtool -S IFACE`), which `scripts/capture-host` writes.

use std::collections::BTreeMap;

use qpslab_sys::netlink::Qdisc;
use qpslab_sys::root::Root;
use serde::{Deserialize, Serialize};

/// A qdisc with the name of its interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IfQdisc {
    pub iface: String,
    #[serde(flatten)]
    pub qdisc: Qdisc,
}

/// The interfaces' qdiscs and driver counters at one instant.
#[derive(Debug, Clone, Default)]
pub struct Links {
    pub qdiscs: Vec<IfQdisc>,
    /// Per interface, the driver counters that count a limit hit or a packet lost.
    pub nic_counters: BTreeMap<String, BTreeMap<String, u64>>,
}

/// Words in a driver counter's name that mark a limit hit or a loss.
const LIMIT_WORDS: &[&str] =
    &["allowance_exceeded", "drop", "discard", "miss", "no_buf", "nobuf", "fifo", "overrun"];

/// Whether a driver counter counts a limit hit or a lost packet.
pub fn is_limit_counter(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    LIMIT_WORDS.iter().any(|w| n.contains(w))
}

/// A cloud NIC's own limit (ENA's `*_allowance_exceeded`): the instance's allowance, not the
/// host's configuration, held the packets back.
pub fn is_allowance_counter(name: &str) -> bool {
    name.contains("allowance_exceeded")
}

/// Reads the interfaces' qdiscs and driver counters under `root`.
pub fn read(root: &Root) -> Links {
    let live = crate::is_live(root.dir());
    let names = root.list("sys/class/net");
    let qdiscs = if live {
        let index: BTreeMap<i32, &String> = names
            .iter()
            .filter_map(|n| {
                let i = root.read_opt(&format!("sys/class/net/{n}/ifindex"))?;
                Some((i.trim().parse().ok()?, n))
            })
            .collect();
        qpslab_sys::netlink::qdiscs()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|q| Some(IfQdisc { iface: index.get(&q.ifindex)?.to_string(), qdisc: q }))
            .collect()
    } else {
        root.read_opt("qpslab/tc-qdisc.json").map(|t| parse_tc_json(&t)).unwrap_or_default()
    };
    let nic_counters = names
        .iter()
        .filter(|n| n.as_str() != "lo")
        .filter_map(|n| {
            let all = match root.read_opt(&format!("qpslab/ethtool/{n}")) {
                Some(text) => qpslab_sys::ethtool::parse_text(&text),
                None if live => qpslab_sys::ethtool::stats(n).ok()?,
                None => return None,
            };
            let kept: BTreeMap<String, u64> =
                all.into_iter().filter(|(k, _)| is_limit_counter(k)).collect();
            (!kept.is_empty()).then(|| (n.clone(), kept))
        })
        .collect();
    Links { qdiscs, nic_counters }
}

/// What names an interface of the followed server's network namespace (a container's) when
/// it is not this process's: its name, then this.
pub const SERVER_NS: &str = " (the server's namespace)";

/// The same of the followed generator's (a load run with `ip netns exec`).
pub const GENERATOR_NS: &str = " (the generator's namespace)";

/// The qdiscs of `pid`'s network namespace (one other than ours), dumped from a thread that
/// joined it, each interface named with `suffix`. Empty when it cannot be joined.
pub fn namespace_qdiscs(pid: u32, suffix: &'static str) -> Vec<IfQdisc> {
    let dumped = qpslab_sys::netns::run_in(pid, move || {
        let qdiscs = qpslab_sys::netlink::qdiscs().unwrap_or_default();
        qdiscs
            .into_iter()
            .filter_map(|q| {
                let name = qpslab_sys::netns::if_name(q.ifindex)?;
                Some(IfQdisc { iface: format!("{name}{suffix}"), qdisc: q })
            })
            .collect::<Vec<_>>()
    });
    dumped.unwrap_or_default()
}

/// The qdiscs in the JSON of `tc -s -j qdisc show` (iproute2): `dev`, `kind`, `handle`
/// (`8001:`), `root`, `options.rate` (bytes/s, tbf), and the counters.
pub fn parse_tc_json(text: &str) -> Vec<IfQdisc> {
    let Ok(serde_json::Value::Array(rows)) = serde_json::from_str(text) else { return Vec::new() };
    let n =
        |v: &serde_json::Value, k: &str| v.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
    rows.iter()
        .filter_map(|r| {
            let handle = r.get("handle")?.as_str()?.trim_end_matches(':');
            let root = r.get("root").and_then(serde_json::Value::as_bool).unwrap_or(false);
            Some(IfQdisc {
                iface: r.get("dev")?.as_str()?.to_string(),
                qdisc: Qdisc {
                    ifindex: 0,
                    handle: u32::from_str_radix(handle, 16).ok()? << 16,
                    parent: if root { u32::MAX } else { 0 },
                    kind: r.get("kind")?.as_str()?.to_string(),
                    bytes: n(r, "bytes"),
                    packets: n(r, "packets"),
                    drops: n(r, "drops"),
                    overlimits: n(r, "overlimits"),
                    requeues: n(r, "requeues"),
                    backlog: n(r, "backlog"),
                    qlen: n(r, "qlen"),
                    rate_bytes_per_s: r
                        .get("options")
                        .and_then(|o| o.get("rate"))
                        .and_then(serde_json::Value::as_u64),
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// iproute2 6.x, `tc -s -j qdisc show` in a namespace with a tbf on lo.
    #[test]
    fn tc_json_reads_as_the_netlink_dump_does() {
        let text = r#"[{"kind":"tbf","handle":"8004:","dev":"lo","root":true,"refcnt":2,"options":{"rate":1250000,"burst":4095,"lat":50000},"bytes":5000,"packets":9,"drops":2,"overlimits":7,"requeues":0,"backlog":300,"qlen":1}]"#;
        let q = parse_tc_json(text);
        assert_eq!(q.len(), 1);
        assert_eq!(q[0].iface, "lo");
        assert!(q[0].qdisc.is_root());
        assert_eq!(q[0].qdisc.handle, 0x8004_0000);
        assert_eq!(q[0].qdisc.rate_bytes_per_s, Some(1_250_000));
        assert_eq!((q[0].qdisc.drops, q[0].qdisc.overlimits, q[0].qdisc.backlog), (2, 7, 300));
        assert!(parse_tc_json("garbage").is_empty());
    }

    #[test]
    fn limit_counters_are_told_from_the_rest() {
        for n in ["bw_out_allowance_exceeded", "rx_dropped", "rx_missed_errors", "tx_fifo_errors"] {
            assert!(is_limit_counter(n), "{n}");
        }
        for n in ["queue_0_tx_cnt", "rx_bytes", "peer_ifindex"] {
            assert!(!is_limit_counter(n), "{n}");
        }
        assert!(is_allowance_counter("pps_allowance_exceeded"));
        assert!(!is_allowance_counter("rx_dropped"));
    }
}
