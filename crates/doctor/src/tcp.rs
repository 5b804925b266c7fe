//! TCP's own account of the run's connections, summed over the window's samples: at each, how
//! many of the server's and the generator's connections held written bytes unsent and why
//! (Nagle waiting for an ACK, the congestion window, the peer's receive window), held received
//! bytes unread, and their round trips and delayed-ACK timeouts. Who waited for whom, read as
//! `ss -ti` shows it, is evidence no CPU counter gives: a server idle while every response
//! waits 40 ms is waiting on a timer, not on work.

use super::explain::fmt_ms;
use super::summary::pct;
use super::{Cause, Context, Finding, Severity};
use qpslab_host::sample::{Sample, TcpTally};

/// Readings (connections x samples) of a side below which its account says nothing.
const MIN_READINGS: u64 = 4;
/// Share of a side's readings with a small write held for an ACK from which Nagle is named.
const NAGLE_HELD: f64 = 0.2;
/// Share of readings in a waiting state from which it is said.
const WAITING: f64 = 0.2;
/// Linux's delayed-ACK timeout when the account has none (TCP_ATO_MIN, HZ/25).
const DEFAULT_ATO_MS: f64 = 40.0;

/// The sides' tallies summed over the samples after the first (the first is the window's
/// start, before the load's requests are in flight) and before the stop (the sampler tallies
/// none there: the load has ended).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Account {
    pub server: TcpTally,
    pub client: TcpTally,
}

pub(super) fn account(samples: &[Sample]) -> Option<Account> {
    let mut a = Account::default();
    let mut any = false;
    for t in samples.iter().skip(1).filter_map(|s| s.tcp.as_ref()) {
        a.server.absorb(&t.server);
        a.client.absorb(&t.client);
        any = true;
    }
    any.then_some(a)
}

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
pub(super) fn waits(samples: &[Sample], out: &mut Vec<Finding>) {
    let Some(a) = account(samples) else { return };
    let mut evidence = Vec::new();
    let mut remedies = Vec::new();
    let mut most: Option<Cause> = None;
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
                if !matches!(most, Some(Cause::WindowWait { share, .. }) if share >= s) {
                    most = Some(Cause::WindowWait {
                        side: side.into(),
                        window: window.into(),
                        share: s,
                    });
                }
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
