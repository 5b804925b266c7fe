//! Which interface carries the traffic to an address: the longest matching route of the main
//! table (`/proc/net/route` for IPv4, `/proc/net/ipv6_route` for IPv6), or `lo` for an
//! address of this host. The doctor judges only the interfaces on the run's path: a busy veth
//! of another program says nothing about this run.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use qpslab_sys::root::Root;

/// A route: destination, prefix length, interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub dest: IpAddr,
    pub prefix: u8,
    pub iface: String,
}

/// `/proc/net/route`: each address is the network-order value printed as a native u32 (on a
/// little-endian host `0100007F` is 127.0.0.1); a route is up when flag 0x1 is set.
pub fn parse_v4(text: &str) -> Vec<Route> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let flags = u32::from_str_radix(f.get(3)?, 16).ok()?;
            if flags & 1 == 0 {
                return None;
            }
            let dest = u32::from_str_radix(f.get(1)?, 16).ok()?;
            let mask = u32::from_str_radix(f.get(7)?, 16).ok()?;
            Some(Route {
                dest: IpAddr::V4(Ipv4Addr::from(dest.to_ne_bytes())),
                prefix: mask.count_ones() as u8,
                iface: (*f.first()?).to_string(),
            })
        })
        .collect()
}

/// `/proc/net/ipv6_route`: destination (32 hex digits, network order), prefix length (hex),
/// ..., flags (field 8, RTF_UP 0x1), interface (last).
pub fn parse_v6(text: &str) -> Vec<Route> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 10 {
                return None;
            }
            let flags = u32::from_str_radix(f[8], 16).ok()?;
            if flags & 1 == 0 {
                return None;
            }
            let dest = u128::from_str_radix(f[0], 16).ok()?;
            Some(Route {
                dest: IpAddr::V6(Ipv6Addr::from(dest)),
                prefix: u8::from_str_radix(f[1], 16).ok()?,
                iface: f[9].to_string(),
            })
        })
        .collect()
}

fn matches(r: &Route, ip: IpAddr) -> bool {
    match (r.dest, ip) {
        (IpAddr::V4(d), IpAddr::V4(a)) => {
            let mask =
                if r.prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(r.prefix.min(32))) };
            u32::from(d) & mask == u32::from(a) & mask
        }
        (IpAddr::V6(d), IpAddr::V6(a)) => {
            let mask =
                if r.prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(r.prefix.min(128))) };
            u128::from(d) & mask == u128::from(a) & mask
        }
        _ => false,
    }
}

/// The interface the main table sends `ip` out of; `lo` for an address of this host
/// (`local`, which the caller decides: the kernel's local table is not in /proc).
pub fn interface_for(root: &Root, ip: IpAddr, local: bool) -> Option<String> {
    if local || ip.is_loopback() {
        return Some("lo".into());
    }
    let routes = match ip {
        IpAddr::V4(_) => parse_v4(&root.read_opt("proc/net/route")?),
        IpAddr::V6(_) => parse_v6(&root.read_opt("proc/net/ipv6_route")?),
    };
    routes.into_iter().filter(|r| matches(r, ip)).max_by_key(|r| r.prefix).map(|r| r.iface)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This VM (Linux 6.18): a default route through eth0 and its /24.
    const V4: &str = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\neth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\neth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\nveth9\t00004D0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";
    const V6: &str = "fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000001 00000400 00000003 00000000 00000003     eth1\n";

    #[test]
    fn the_longest_prefix_names_the_interface() {
        let r = parse_v4(V4);
        assert_eq!(r[1].dest, "192.0.2.0".parse::<IpAddr>().unwrap());
        assert_eq!(r[1].prefix, 24);
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc/net")).unwrap();
        std::fs::write(dir.path().join("proc/net/route"), V4).unwrap();
        std::fs::write(dir.path().join("proc/net/ipv6_route"), V6).unwrap();
        let root = Root::new(dir.path());
        let at = |ip: &str| interface_for(&root, ip.parse().unwrap(), false);
        assert_eq!(at("10.77.0.2").as_deref(), Some("veth9"));
        assert_eq!(at("192.0.2.7").as_deref(), Some("eth0"));
        assert_eq!(at("203.0.113.9").as_deref(), Some("eth0"), "the default route");
        assert_eq!(at("fd00::5").as_deref(), Some("eth0"));
        assert_eq!(at("2001:db8::1").as_deref(), Some("eth1"), "the default route");
        assert_eq!(at("127.0.0.1").as_deref(), Some("lo"));
        assert_eq!(interface_for(&root, "192.0.2.7".parse().unwrap(), true).as_deref(), Some("lo"));
    }
}
