//! Source addresses for outgoing connections (`--source`) and the port budget: how many
//! (source address, source port) pairs a destination can take, against what the run needs.
//!
//! A TCP connection is one 4-tuple; to one destination, a generator has at most
//! `addresses x ports` of them. inject in seed 001 bound its connections across a /20 of source
//! addresses and all upper ports to get past the ~28k ephemeral ports of one address.
//!
//! Does not open sockets: the worker binds with [`SourceRange::pick`].

use qpslab_sys::root::Root;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use qpslab_sys::config_error::ConfigError;

use crate::variants::Variants;

/// Seconds a closed connection's tuple stays in TIME_WAIT on the side that closed first
/// (Linux's TCP_TIMEWAIT_LEN).
pub const TIME_WAIT_S: f64 = 60.0;
/// With `tcp_tw_reuse`, a TIME_WAIT tuple may be reused for a new outgoing connection after
/// this long (the kernel's check is one second of timestamps).
pub const TW_REUSE_S: f64 = 1.0;

/// `--source FIRST-LAST[:PORTLO-PORTHI]`: every address from FIRST to LAST, and optionally a
/// port range to bind explicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SourceRange {
    pub first: IpAddr,
    pub count: u64,
    pub ports: Option<(u16, u16)>,
}

const FLAG: &str = "--source";
const EXAMPLE: &str = "write e.g. 127.0.0.2-127.0.0.254, 127.0.0.2-127.0.0.9:20000-29999 or \
                       [fd00::1]-[fd00::ff]";

impl SourceRange {
    /// `--source` checked against the targets (one address family) and the threads (each binds
    /// its own ports, so a port range needs at least one per thread).
    pub fn for_targets(
        text: &str,
        variants: &Variants,
        threads: usize,
    ) -> Result<Self, ConfigError> {
        let range = Self::parse(text)?;
        if let Some((e, url)) =
            variants.endpoints().find(|(e, _)| e.addr.is_ipv4() != range.is_ipv4())
        {
            return Err(ConfigError::new(
                FLAG,
                format!(
                    "{text:?} and the target {url} are of different address families; give IPv{} \
                     sources",
                    if e.addr.is_ipv4() { 4 } else { 6 }
                ),
            ));
        }
        if let Some((lo, hi)) = range.ports {
            if usize::from(hi - lo) + 1 < threads {
                return Err(ConfigError::new(
                    FLAG,
                    format!(
                        "port range {lo}-{hi} has fewer ports than the {threads} threads (each \
                         thread binds its own ports); widen it"
                    ),
                ));
            }
        }
        Ok(range)
    }

    /// Parses `A`, `A-B`, `A-B:LO-HI` (IPv6 in brackets: `[A]-[B]:LO-HI`).
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let bad = |what: String| ConfigError::new(FLAG, format!("{what}; {EXAMPLE}"));
        let text = text.trim();
        // IPv6 addresses take brackets when a port range follows: `[A]-[B]:LO-HI`.
        let (addrs, ports) = if let Some(i) = text.rfind("]:") {
            (&text[..=i], Some(&text[i + 2..]))
        } else if text.matches(':').count() == 1 {
            let (a, p) = text.split_once(':').unwrap_or((text, ""));
            (a, Some(p))
        } else {
            (text, None)
        };
        let ip = |s: &str| {
            s.trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
                .map_err(|_| bad(format!("{s:?} is not an IP address")))
        };
        let (first, last) = match split_range(addrs) {
            Some((a, b)) => (ip(a)?, ip(b)?),
            None => (ip(addrs)?, ip(addrs)?),
        };
        let count = match (first, last) {
            (IpAddr::V4(a), IpAddr::V4(b)) if u32::from(a) <= u32::from(b) => {
                u64::from(u32::from(b) - u32::from(a)) + 1
            }
            (IpAddr::V6(a), IpAddr::V6(b)) if u128::from(a) <= u128::from(b) => {
                let n = u128::from(b) - u128::from(a) + 1;
                u64::try_from(n).map_err(|_| bad(format!("{addrs:?} is too large a range")))?
            }
            _ => {
                return Err(bad(format!(
                    "{addrs:?} is not a range from a lower to a higher address of one family"
                )))
            }
        };
        let ports = match ports {
            None => None,
            Some(p) => {
                let port = |s: &str| match s.parse::<u16>() {
                    Ok(n) if n > 0 => Ok(n),
                    _ => Err(bad(format!("{s:?} is not a port from 1 to 65535"))),
                };
                let (lo, hi) = match p.split_once('-') {
                    Some((a, b)) => (port(a)?, port(b)?),
                    None => (port(p)?, port(p)?),
                };
                if lo > hi {
                    return Err(bad(format!("port range {p:?} goes down")));
                }
                Some((lo, hi))
            }
        };
        Ok(Self { first, count, ports })
    }

    /// Address number `i` of the range (wrapping).
    pub fn addr(&self, i: u64) -> IpAddr {
        let i = i % self.count;
        match self.first {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) + i as u32)),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) + u128::from(i))),
        }
    }

    /// Ports per address: the given range, or `ephemeral` (the kernel's ip_local_port_range).
    pub fn ports_per_addr(&self, ephemeral: u64) -> u64 {
        self.ports.map_or(ephemeral, |(lo, hi)| u64::from(hi - lo) + 1)
    }

    /// The local address of the `n`-th connection thread `thread` (of `threads`) opens:
    /// addresses go round first, so consecutive connections spread over the whole range; with
    /// a port range, each thread takes every `threads`-th port so threads never collide.
    /// Port 0 means: let the kernel choose at connect (IP_BIND_ADDRESS_NO_PORT).
    pub fn pick(&self, thread: usize, threads: usize, start: u64, n: u64) -> SocketAddr {
        let j = start + n;
        let ip = self.addr(j);
        let port = match self.ports {
            None => 0,
            Some((lo, hi)) => {
                let span = u64::from(hi - lo) + 1;
                let mine = span.saturating_sub(thread as u64).div_ceil(threads as u64).max(1);
                let k = (j / self.count) % mine;
                (u64::from(lo) + thread as u64 + k * threads as u64).min(u64::from(hi)) as u16
            }
        };
        SocketAddr::new(ip, port)
    }

    pub fn is_ipv4(&self) -> bool {
        self.first.is_ipv4()
    }

    /// Each address of the range (up to [`LOCAL_CHECKS`] of them, spread over it) is one this
    /// host has: a connection cannot bind to another, however often it is retried.
    pub fn check_local(&self) -> Result<(), ConfigError> {
        let step = (self.count / LOCAL_CHECKS).max(1);
        let last = std::iter::once(self.count - 1);
        for i in (0..self.count).step_by(step as usize).chain(last) {
            let ip = self.addr(i);
            let addr = socket2::SockAddr::from(SocketAddr::new(ip, 0));
            let bound = socket2::Socket::new(addr.domain(), socket2::Type::STREAM, None)
                .and_then(|s| s.bind(&addr));
            if let Err(e) = bound {
                return Err(ConfigError::new(
                    FLAG,
                    format!(
                        "{ip} is not an address of this host (bind: {}); give addresses its \
                         interfaces have (`ip -br addr`), e.g. 127.0.0.2-127.0.0.254 for \
                         loopback",
                        qpslab_sys::net::message(&e)
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// How many addresses of a `--source` range are tried before a run.
const LOCAL_CHECKS: u64 = 4096;

/// Splits `A-B` where the '-' is not inside an address (IPv6 addresses hold no '-').
fn split_range(s: &str) -> Option<(&str, &str)> {
    s.split_once('-')
}

/// What the run needs from the source tuples of its busiest destination, and what it has.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PortBudget {
    pub destination: SocketAddr,
    /// Source (address, port) pairs available to that destination.
    pub tuples: u64,
    /// Connections open at once to it.
    pub concurrent: u64,
    /// Seconds a tuple stays unusable after a close on the generator's side (0 with
    /// `--rst-close` or keep-alive).
    pub hold_s: f64,
    /// New connections per second the tuples sustain (None: keep-alive, connections are reused).
    pub sustainable_cps: Option<f64>,
    /// Connections per second the schedule asks for (open loop with connection per request).
    pub planned_cps: Option<f64>,
}

impl PortBudget {
    /// Too few tuples for the connections open at once: the run cannot work.
    pub fn error(&self) -> Option<String> {
        (self.concurrent > self.tuples).then(|| {
            format!(
                "{} connections to {} need {} source (address, port) pairs but only {} are \
                 available; spread them with --source 127.0.0.2-127.0.0.254 (or a port range), \
                 or use fewer connections",
                self.concurrent, self.destination, self.concurrent, self.tuples
            )
        })
    }

    /// An open-loop connection-per-request schedule that asks for more new connections per
    /// second than the tuples sustain if the generator holds each in TIME_WAIT. (Closed loop
    /// has no planned rate; its report compares the achieved one.)
    pub fn warning(&self) -> Option<String> {
        let sustainable = self.sustainable_cps?;
        let planned = self.planned_cps.filter(|&p| p > sustainable)?;
        Some(format!(
            "to {}: {} source tuples / {:.0} s in TIME_WAIT sustain about {:.0} new \
             connections/s and the schedule asks {planned:.0}/s; when the generator closes \
             first, connects fail with 'cannot assign requested address'. Use --rst-close, a \
             wider --source range, or net.ipv4.tcp_tw_reuse=1",
            self.destination, self.tuples, self.hold_s, sustainable
        ))
    }
}

/// The kernel's ephemeral port count (ip_local_port_range under `root`), or Linux's default when
/// unreadable.
pub fn ephemeral_ports(root: &Root) -> u64 {
    let (lo, hi) = ephemeral_range(root);
    u64::from(hi - lo) + 1
}

/// The kernel's ip_local_port_range (its default when unreadable).
pub fn ephemeral_range(root: &Root) -> (u16, u16) {
    let text = root.read_opt("proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let mut it = text.split_whitespace().filter_map(|w| w.parse::<u16>().ok());
    match (it.next(), it.next()) {
        (Some(lo), Some(hi)) if hi >= lo => (lo, hi),
        _ => (32768, 60999),
    }
}

/// Whether the kernel reuses TIME_WAIT tuples for new connections to `dest`
/// (`net.ipv4.tcp_tw_reuse`: 1 everywhere, 2 loopback only, the default).
pub fn tw_reuse_applies(root: &Root, dest: &SocketAddr) -> bool {
    let mode = root.read_opt("proc/sys/net/ipv4/tcp_tw_reuse").unwrap_or_default();
    match mode.trim() {
        "1" => true,
        "2" => dest.ip().is_loopback(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_range_and_tw_reuse_from_a_tree() {
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path().join("proc/sys/net/ipv4");
        std::fs::create_dir_all(&sys).unwrap();
        let root = Root::new(dir.path());
        assert_eq!(ephemeral_ports(&root), 28232, "Linux's default when unreadable");
        std::fs::write(sys.join("ip_local_port_range"), "1024\t65535\n").unwrap();
        assert_eq!(ephemeral_ports(&root), 64512);
        let (lo, remote): (SocketAddr, SocketAddr) =
            ("127.0.0.1:80".parse().unwrap(), "10.0.0.1:80".parse().unwrap());
        std::fs::write(sys.join("tcp_tw_reuse"), "2\n").unwrap();
        assert!(tw_reuse_applies(&root, &lo) && !tw_reuse_applies(&root, &remote));
        std::fs::write(sys.join("tcp_tw_reuse"), "1\n").unwrap();
        assert!(tw_reuse_applies(&root, &remote));
    }

    #[test]
    fn ranges_parse_with_and_without_ports() {
        let r = SourceRange::parse("127.0.0.2-127.0.0.254").unwrap();
        assert_eq!((r.count, r.ports), (253, None));
        assert_eq!(r.addr(0), "127.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(r.addr(252), "127.0.0.254".parse::<IpAddr>().unwrap());
        assert_eq!(r.addr(253), r.addr(0));
        let r = SourceRange::parse("127.0.0.2-127.0.0.3:20000-20999").unwrap();
        assert_eq!((r.count, r.ports), (2, Some((20000, 20999))));
        let r = SourceRange::parse("10.0.0.1").unwrap();
        assert_eq!(r.count, 1);
        let r = SourceRange::parse("::1").unwrap();
        assert_eq!((r.count, r.ports), (1, None));
        let r = SourceRange::parse("[fd00::1]-[fd00::ff]:1024-2047").unwrap();
        assert_eq!((r.count, r.ports), (255, Some((1024, 2047))));
        for bad in ["127.0.0.9-127.0.0.2", "x", "127.0.0.1-::1", "127.0.0.1:9-1", "127.0.0.1:0"] {
            assert_eq!(SourceRange::parse(bad).unwrap_err().flag, "--source", "{bad}");
        }
    }

    #[test]
    fn picks_cover_every_address_and_threads_never_share_a_port() {
        let r = SourceRange::parse("127.0.0.2-127.0.0.5:30000-30009").unwrap();
        let mut seen = std::collections::HashSet::new();
        for thread in 0..2 {
            for n in 0..20 {
                assert!(seen.insert(r.pick(thread, 2, thread as u64 * 7, n)), "{thread} {n}");
            }
        }
        // 4 addresses x 10 ports = 40 distinct pairs, all used once.
        assert_eq!(seen.len(), 40);
        let ips: std::collections::HashSet<_> = seen.iter().map(|a| a.ip()).collect();
        assert_eq!(ips.len(), 4);
        assert!(seen.iter().all(|a| (30000..=30009).contains(&a.port())));
        let no_ports = SourceRange::parse("127.0.0.2-127.0.0.5").unwrap();
        assert_eq!(no_ports.pick(0, 1, 0, 5).port(), 0);
    }

    #[test]
    fn budget_fails_on_too_many_connections_and_warns_on_time_wait() {
        let b = PortBudget {
            destination: "127.0.0.1:80".parse().unwrap(),
            tuples: 28232,
            concurrent: 50_000,
            hold_s: 0.0,
            sustainable_cps: None,
            planned_cps: None,
        };
        assert!(b.error().unwrap().contains("50000 connections"));
        assert_eq!(b.warning(), None);
        let cpr = PortBudget {
            concurrent: 100,
            hold_s: 60.0,
            sustainable_cps: Some(470.5),
            planned_cps: Some(1000.0),
            ..b
        };
        assert_eq!(cpr.error(), None);
        assert!(cpr.warning().unwrap().contains("about 470 new connections/s"));
        let fine = PortBudget { planned_cps: Some(100.0), ..cpr.clone() };
        assert_eq!(fine.warning(), None);
        let closed_loop = PortBudget { planned_cps: None, ..cpr };
        assert_eq!(closed_loop.warning(), None);
    }
}
