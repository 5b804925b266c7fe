//! TCP's own account of the run's connections, summed over the window's samples: at each, how
//! many of the server's and the generator's connections held written bytes unsent and why
//! (Nagle waiting for an ACK, the congestion window, the peer's receive window), held received
//! bytes unread, and their round trips and delayed-ACK timeouts. Who waited for whom, read as
//! `ss -ti` shows it, is evidence no CPU counter gives: a server idle while every response
//! waits 40 ms is waiting on a timer, not on work. Over the window, the kernel's own clocks of
//! each connection (tcp_info's busy, receive-window-limited and send-buffer-limited times)
//! say how long each side was sending, what held it, and so how long it had nothing to send
//! (application-limited: the time is its program's).

use super::explain::fmt_ms;
use super::summary::pct;
use super::{Cause, Context, Finding, Severity};
use qpslab_host::sample::{Sample, TcpSides, TcpTally};

/// Readings (connections x samples) of a side below which its account says nothing.
const MIN_READINGS: u64 = 4;
/// Share of a side's readings with a small write held for an ACK from which Nagle is named.
const NAGLE_HELD: f64 = 0.2;
/// Share of readings in a waiting state from which it is said.
const WAITING: f64 = 0.2;
/// Linux's delayed-ACK timeout when the account has none (TCP_ATO_MIN, HZ/25).
const DEFAULT_ATO_MS: f64 = 40.0;

/// The sides' tallies over the window ([`TcpSides::over_window`]).
fn account(samples: &[Sample]) -> Option<TcpSides> {
    TcpSides::over_window(samples)
}

/// A side's connections over the window by the kernel's clocks: how many, and their time
/// sending (data in flight or queued), limited by the peer's receive window, and limited by
/// their own send buffer, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Sending {
    pub connections: u64,
    pub busy_us: u64,
    pub rwnd_us: u64,
    pub sndbuf_us: u64,
}

impl Sending {
    /// The share of the connections' time in the window spent sending.
    pub fn busy_share(&self, window_s: f64) -> f64 {
        self.busy_us as f64 / 1e6 / (self.connections as f64 * window_s).max(1e-9)
    }
}

/// The server's and the generator's [`Sending`] from the window's first and last dumps (a
/// connection's clocks at its last reading, less those at the first when it was open then);
/// None without the dumps or the run's ports, or when connections came and went (a connection
/// per request: most lived between two readings and were never read).
pub(super) fn sending(samples: &[Sample], ctx: &Context) -> Option<(Sending, Sending)> {
    let load = ctx.load.as_ref()?;
    if ctx.ports.is_empty() || load.mode == "conn-per-request" || load.reconnects > 0 {
        return None;
    }
    let first: std::collections::HashMap<u64, &qpslab_sys::netlink::Connection> =
        samples.first()?.connections.as_ref()?.iter().map(|c| (c.cookie, c)).collect();
    let last = samples.last()?.connections.as_ref()?;
    let mut sides = (Sending::default(), Sending::default());
    for c in last {
        let side = if ctx.ports.contains(&c.local_port) {
            &mut sides.0
        } else if ctx.ports.contains(&c.remote_port) {
            &mut sides.1
        } else {
            continue;
        };
        let b = first.get(&c.cookie).map_or_else(Default::default, |b| **b);
        side.connections += 1;
        side.busy_us += c.busy_us.saturating_sub(b.busy_us);
        side.rwnd_us += c.rwnd_limited_us.saturating_sub(b.rwnd_limited_us);
        side.sndbuf_us += c.sndbuf_limited_us.saturating_sub(b.sndbuf_limited_us);
    }
    (sides.0.connections > 0 || sides.1.connections > 0).then_some(sides)
}

/// The window's length, from its first sample to its last.
fn window_s(samples: &[Sample]) -> f64 {
    match (samples.first(), samples.last()) {
        (Some(a), Some(b)) => (b.at - a.at).as_secs_f64(),
        _ => 0.0,
    }
}

/// Application-limited: when no resource bounds the rate (latency-bound), how little of the
/// window the server's connections were sending says the waiting was its program's, not
/// TCP's; a window or a send buffer that held them is said by [`waits`].
pub(super) fn application_limited(samples: &[Sample], ctx: &Context, out: &mut [Finding]) {
    let Some((server, _)) = sending(samples, ctx).filter(|s| s.0.connections > 0) else { return };
    let window = window_s(samples);
    let Some(f) = out.iter_mut().find(|f| matches!(f.cause, Some(Cause::RoundTrips))) else {
        return;
    };
    let busy = server.busy_share(window);
    let limited = (server.rwnd_us + server.sndbuf_us) as f64 / server.busy_us.max(1) as f64;
    if busy < APP_LIMITED && limited < WAITING {
        f.evidence.push(format!(
            "the server's {} connection(s) were sending {} of the window (tcp_info busy time): the rest of the time it had nothing to send, so the waiting was its program's, not TCP's (application-limited)",
            server.connections,
            pct(busy)
        ));
    }
}

/// Share of the window under which a side's connections sending says it was
/// application-limited.
const APP_LIMITED: f64 = 0.5;

fn share(n: u64, t: &TcpTally) -> f64 {
    n as f64 / t.connections.max(1) as f64
}

/// The delayed-ACK timeout a side's peer used, in ms (the kernel's, averaged).
fn ato_ms(t: &TcpTally) -> f64 {
    if t.connections == 0 || t.ato_us == 0 {
        return DEFAULT_ATO_MS;
    }
    t.ato_us as f64 / t.connections as f64 / 1e3
}

/// A side's small writes held by Nagle until the peer's delayed ACK: the latency sits at the
/// peer's delayed-ACK timer while no resource is busy.
pub(super) fn delayed_ack(samples: &[Sample], ctx: &Context, out: &mut Vec<Finding>) {
    let (Some(a), Some(load)) = (account(samples), ctx.load.as_ref()) else { return };
    let latency_ms = load.mean_latency_s * 1e3;
    for (side, held, peer) in [("server", a.server, a.client), ("generator", a.client, a.server)] {
        let s = share(held.nagle_held, &held);
        let timer_ms = ato_ms(&peer);
        if held.connections < MIN_READINGS || s < NAGLE_HELD || latency_ms < 0.5 * timer_ms {
            continue;
        }
        let (what, remedy) = if side == "server" {
            (
                "responses",
                "TCP_NODELAY on the server's sockets (setsockopt IPPROTO_TCP TCP_NODELAY; nginx's `tcp_nodelay on`, its default; Python's StreamRequestHandler.disable_nagle_algorithm = True), or each response written in one call (writev, one buffer)",
            )
        } else {
            (
                "requests",
                "TCP_NODELAY on the generator's sockets, or each request written in one call",
            )
        };
        out.push(Finding {
            name: "delayed-ack",
            severity: Severity::Warning,
            summary: format!(
                "{what} wait for the delayed-ACK timer: the {side} writes each in pieces with Nagle on, and the second piece waits for the peer's ACK, which the peer delays up to {}",
                fmt_ms(timer_ms)
            ),
            evidence: vec![
                format!(
                    "{} of {} readings of the {side}'s connections held written bytes unsent with a segment unacknowledged while the congestion and receive windows had room (Nagle's algorithm)",
                    pct(s),
                    held.connections
                ),
                format!(
                    "mean latency {} per response; the peer's delayed-ACK timeout {} (tcp_info ato)",
                    fmt_ms(latency_ms),
                    fmt_ms(timer_ms)
                ),
            ],
            remedy: remedy.into(),
            cause: Some(Cause::DelayedAck { side: side.into(), timer_ms, latency_ms }),
        });
    }
}

/// Who waited for whom on the run's connections, when a state held a share of the readings:
/// bytes unsent for the congestion window or for the peer's receive window. Bytes received
/// and unread are tallied but not said: a reading a second catches them in healthy runs too
/// (a server that answers after a delay left 35% of its readings with input waiting), so
/// they are no evidence of a side behind its input at this rate of sampling.
pub(super) fn waits(samples: &[Sample], ctx: &Context, out: &mut Vec<Finding>) {
    let Some(a) = account(samples) else { return };
    let mut evidence = Vec::new();
    let mut remedies = Vec::new();
    let mut most: Option<Cause> = None;
    let mut keep = |side: &str, window: &str, s: f64| {
        if !matches!(most, Some(Cause::WindowWait { share, .. }) if share >= s) {
            most = Some(Cause::WindowWait { side: side.into(), window: window.into(), share: s });
        }
    };
    // The kernel's clocks: time sending that a window or the send buffer held.
    if let Some((server, client)) = sending(samples, ctx) {
        let window = window_s(samples);
        for (side, t, peer) in [("server", server, "generator"), ("generator", client, "server")] {
            if t.connections == 0 || t.busy_share(window) < WAITING {
                continue;
            }
            for (us, what, name, remedy) in [
                (t.rwnd_us, format!("the {peer}'s receive window"), "receive", format!("the {peer} reads slowly or its receive buffer is small (net.ipv4.tcp_rmem)")),
                (t.sndbuf_us, "its own send buffer".to_string(), "send-buffer", format!("a larger send buffer for the {side}: net.ipv4.tcp_wmem's maximum, or its SO_SNDBUF (nginx `listen ... sndbuf=`)")),
            ] {
                let s = us as f64 / t.busy_us.max(1) as f64;
                if s >= WAITING {
                    evidence.push(format!(
                        "the {side}'s {} connection(s) were sending {} of the window, held by {what} {} of that (tcp_info)",
                        t.connections,
                        pct(t.busy_share(window)),
                        pct(s)
                    ));
                    remedies.push(remedy);
                    keep(side, name, s);
                }
            }
        }
    }
    for (side, t, peer) in [("server", a.server, "generator"), ("generator", a.client, "server")] {
        if t.connections < MIN_READINGS {
            continue;
        }
        let states = [
            (
                t.rwnd_full,
                "receive",
                format!("held written bytes for the {peer}'s receive window"),
                format!(
                    "the {peer} reads slowly or its receive buffer is small (net.ipv4.tcp_rmem)"
                ),
            ),
            (
                t.cwnd_full,
                "congestion",
                "held written bytes for the congestion window".into(),
                "loss or a long path holds the congestion window small (see retransmissions)"
                    .into(),
            ),
        ];
        for (n, window, what, remedy) in states {
            let s = share(n, &t);
            if s >= WAITING {
                keep(side, window, s);
                evidence.push(format!(
                    "{} of {} readings of the {side}'s connections {what}",
                    pct(s),
                    t.connections
                ));
                remedies.push(remedy);
            }
        }
    }
    if evidence.is_empty() {
        return;
    }
    out.push(Finding {
        name: "tcp-waits",
        severity: Severity::Info,
        summary: "TCP's account of the run's connections shows who waited for whom".into(),
        evidence,
        remedy: remedies.join("; "),
        cause: most,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::LoadFacts;
    use qpslab_host::sample::TcpSides;
    use qpslab_sys::netlink::Connection;
    use std::time::Duration;

    /// A connection of the server's port 8080 (`server`) or to it, with its clocks in ms.
    fn conn(server: bool, cookie: u64, busy: u64, rwnd: u64, sndbuf: u64) -> Connection {
        let (local_port, remote_port) = if server { (8080, 40000) } else { (40000, 8080) };
        Connection {
            local_port,
            remote_port,
            cookie,
            busy_us: busy * 1000,
            rwnd_limited_us: rwnd * 1000,
            sndbuf_limited_us: sndbuf * 1000,
            ..Connection::default()
        }
    }

    /// A 4 s window whose first and last dumps hold `first` and `last`.
    fn window(first: Vec<Connection>, last: Vec<Connection>) -> Vec<Sample> {
        [(0, first), (4, last)]
            .into_iter()
            .map(|(at, c)| Sample {
                at: Duration::from_secs(at),
                connections: Some(c),
                tcp: Some(TcpSides::default()),
                ..Sample::default()
            })
            .collect()
    }

    fn ctx(mode: &str) -> Context {
        let load = LoadFacts { mode: mode.into(), responses: 100, ..LoadFacts::default() };
        Context { load: Some(load), ports: vec![8080], ..Context::default() }
    }

    /// The server's two connections sent for 3 of the window's 4 s each, their send buffer
    /// holding them 2 s of it: tcp-waits names the send buffer with its share; the clocks
    /// before the window (at the first dump) are left out.
    #[test]
    fn a_send_buffer_that_held_the_server_is_said() {
        let first = vec![conn(true, 1, 500, 0, 100), conn(true, 2, 500, 0, 100)];
        let last = vec![conn(true, 1, 3500, 0, 2100), conn(true, 2, 3500, 0, 2100)];
        let mut out = Vec::new();
        waits(&window(first, last), &ctx("closed"), &mut out);
        let f = out.first().expect("tcp-waits");
        assert_eq!(
            f.cause,
            Some(Cause::WindowWait {
                side: "server".into(),
                window: "send-buffer".into(),
                share: 2.0 / 3.0
            })
        );
        assert!(f.evidence[0].contains("sending 75% of the window"), "{:?}", f.evidence);
        assert!(f.remedy.contains("tcp_wmem"), "{}", f.remedy);
        // A connection per request: most connections were never read; nothing is said.
        let first = vec![conn(true, 1, 500, 0, 100)];
        let last = vec![conn(true, 1, 3500, 0, 2100)];
        let mut out = Vec::new();
        waits(&window(first, last), &ctx("conn-per-request"), &mut out);
        assert!(out.is_empty(), "{out:?}");
    }

    /// A latency-bound run whose server connections sent for 5% of the window: the waiting
    /// was the server program's; one held by the peer's window is not called so.
    #[test]
    fn a_server_with_nothing_to_send_is_application_limited() {
        let latency_bound = || Finding {
            name: "latency-bound",
            severity: Severity::Info,
            summary: String::new(),
            evidence: Vec::new(),
            remedy: String::new(),
            cause: Some(Cause::RoundTrips),
        };
        let mut out = vec![latency_bound()];
        let last = vec![conn(true, 1, 200, 0, 0), conn(false, 1, 100, 0, 0)];
        application_limited(&window(Vec::new(), last), &ctx("closed"), &mut out);
        assert!(
            out[0].evidence.iter().any(
                |e| e.contains("sending 5% of the window") && e.contains("application-limited")
            ),
            "{:?}",
            out[0].evidence
        );
        let mut out = vec![latency_bound()];
        let last = vec![conn(true, 1, 1000, 800, 0)];
        application_limited(&window(Vec::new(), last), &ctx("closed"), &mut out);
        assert!(out[0].evidence.is_empty(), "{:?}", out[0].evidence);
    }
}
