//! Latency at a kernel timer. A tail that stands at one of TCP's timers while the body of the
//! distribution is far below it is the timer's doing, and an engineer knows the number: 200
//! ms is the minimum retransmission timeout (a lost segment nothing else recovered), 1 s (then
//! 3 s) the SYN retransmission timeout (a dropped connection attempt). Each is named only with
//! the counters that show its mechanism; the delayed-ACK timer (40 ms) has its own finding,
//! from TCP's account of the connections.

use super::explain::{fmt_ms, Explanation};
use super::summary::{pct, Summary};
use super::{Cause, Context, Finding, Severity};

struct Timer {
    name: &'static str,
    /// Its value, and as said.
    at_s: f64,
    label: &'static str,
    /// The timer delays connects (the handshake), not requests on open connections.
    connects: bool,
    what: &'static str,
    remedy: &'static str,
}

const TIMERS: [Timer; 2] = [
    Timer {
        name: "retransmission timeout",
        at_s: 0.2,
        label: "200 ms",
        connects: false,
        what: "TCP's minimum retransmission timeout (200 ms): a lost segment that only the timer recovered (a lone segment in flight gets no duplicate ACKs to retransmit it sooner)",
        remedy: "find the loss (the retransmissions and drops findings: a full queue, a shaper, a lossy link); where some loss cannot be helped, a lower minimum on the routes the server answers over (`ip route change ... rto_min 10ms`)",
    },
    Timer {
        name: "SYN retransmission",
        at_s: 1.0,
        label: "1 s",
        connects: true,
        what: "the SYN retransmission timeout (1 s, then 3 s): a connection attempt was dropped and tried again",
        remedy: "find where the SYNs were dropped (the listen-queue, SYN-queue and conntrack findings): a longer listen backlog with net.core.somaxconn, or fewer new connections (keep-alive)",
    },
];

/// From this share of each response's time spent at the timer (its share of the responses
/// times the timer, over the mean), the timer is a warning; below it, info.
const TIMER_SHARE_WARN: f64 = 0.1;

/// The first quantile of `tail` at the timer `t` (from 0.9 of it up to 1.6 of it: its first
/// firing; or within 15% of two to four times it: as many firings, as when a request and its
/// response were each lost, or a segment lost again, a later firing a little past the
/// minimum when the first one's wait entered the round-trip estimate), when the median is
/// under a quarter of it and that quantile is p99.9 or below (a few responses in a run prove
/// nothing): the quantile, its value, and the quantile below it.
fn at_timer(tail: &[(f64, f64)], t: f64) -> Option<(f64, f64, f64)> {
    let median = tail.iter().find(|(q, _)| *q == 0.5)?.1;
    if median > t / 4.0 {
        return None;
    }
    let i = tail.iter().position(|(_, v)| *v >= 0.9 * t)?;
    let (q, v) = tail[i];
    let below = if i == 0 { 0.0 } else { tail[i - 1].0 };
    let n = (v / t).round();
    let firings = v <= 1.6 * t || ((2.0..=4.0).contains(&n) && (v - n * t).abs() <= 0.15 * n * t);
    (q <= 0.999 && firings).then_some((q, v, below))
}

/// A share of the responses: 1% and up as the doctor says shares, under it to a tenth.
fn share_text(share: f64) -> String {
    if share >= 0.01 {
        pct(share)
    } else {
        format!("{:.1}%", share * 100.0)
    }
}

/// Seconds as the doctor says milliseconds.
fn ms(s: f64) -> String {
    fmt_ms(s * 1e3)
}

fn quantile_name(q: f64) -> String {
    let p = format!("{:.2}", q * 100.0);
    format!("p{}", p.trim_end_matches('0').trim_end_matches('.'))
}

pub(super) fn kernel_timers(s: &Summary, ctx: &Context, ex: &Explanation, out: &mut Vec<Finding>) {
    let Some(load) = ctx.load.as_ref() else { return };
    // A link at its capacity drops what it cannot send: its timeouts are the bound's doing,
    // said under it.
    let link_bound = ex.bound_resource().is_some_and(|r| r.kind == "link" || r.kind == "shaper");
    let d = |k: &str| s.tcp.get(k).copied().unwrap_or(0).max(0);
    for t in &TIMERS {
        let tail = if t.connects { &load.connect_tail } else { &load.latency_tail };
        let Some((q, v, below)) = at_timer(tail, t.at_s) else { continue };
        let median = tail.iter().find(|(q, _)| *q == 0.5).map_or(0.0, |m| m.1);
        // The mechanism, in the counters: without it, a server that takes as long (a sleep,
        // a lock) is not the timer.
        let mechanism = if t.connects {
            // This host sent SYNs again (its connects), or dropped attempts (its listeners).
            let keys = ["TCPSynRetrans", "ListenOverflows", "ListenDrops", "TCPReqQFullDrop"];
            keys.iter().any(|k| d(k) > 0).then(|| {
                let counts: Vec<String> = keys.iter().map(|k| format!("{k} +{}", d(k))).collect();
                format!("TcpExt {} in the window", counts.join(", "))
            })
        } else {
            (d("RetransSegs") > 0 || d("TCPTimeouts") > 0).then(|| {
                format!(
                    "Tcp RetransSegs +{}, TcpExt TCPTimeouts +{} in the window",
                    d("RetransSegs"),
                    d("TCPTimeouts")
                )
            })
        };
        let Some(mechanism) = mechanism else { continue };
        let share = 1.0 - q;
        // A connect's wait counts against a response's time when each response pays one
        // (a connection per request); else against the responses' mean.
        let mean = if t.connects && load.mean_connect_s > 0.0 {
            load.mean_connect_s
        } else {
            load.mean_latency_s
        };
        let of_time = share * t.at_s / mean.max(1e-9);
        let whose = if t.connects { "connects" } else { "responses" };
        out.push(Finding {
            name: "kernel-timer",
            severity: if (t.connects || !link_bound) && of_time >= TIMER_SHARE_WARN {
                Severity::Warning
            } else {
                Severity::Info
            },
            summary: format!(
                "{} or more of the {whose} waited for the {} ({}): {} at {} against a median of {}",
                share_text(share),
                t.name,
                t.label,
                quantile_name(q),
                ms(v),
                ms(median)
            ),
            evidence: vec![
                format!(
                    "{whose}: {} {}, {} {}, median {}: the tail stands at the timer, the body far below it",
                    quantile_name(below),
                    ms(tail.iter().find(|x| x.0 == below).map_or(0.0, |x| x.1)),
                    quantile_name(q),
                    ms(v),
                    ms(median)
                ),
                mechanism,
                t.what.to_string(),
            ],
            remedy: t.remedy.to_string(),
            cause: Some(Cause::KernelTimer {
                timer: t.name.to_string(),
                ms: t.at_s * 1e3,
                share,
            }),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tail(v: [f64; 6]) -> Vec<(f64, f64)> {
        [0.5, 0.9, 0.99, 0.999, 0.9999, 1.0].into_iter().zip(v).collect()
    }

    #[test]
    fn a_tail_standing_at_the_timer_is_found_and_a_long_tail_is_not() {
        let rto = tail([0.0003, 0.0009, 0.205, 0.21, 0.41, 0.42]);
        assert_eq!(at_timer(&rto, 0.2), Some((0.99, 0.205, 0.9)));
        // A slow body: the median is a quarter of the timer or more.
        assert_eq!(at_timer(&tail([0.06, 0.1, 0.2, 0.3, 0.4, 0.5]), 0.2), None);
        // Two firings (a request and its response each lost once): p99 at 2 x 200 ms.
        let twice = tail([0.0005, 0.0006, 0.414, 0.45, 0.45, 0.45]);
        assert_eq!(at_timer(&twice, 0.2), Some((0.99, 0.414, 0.9)));
        // 200 ms and then 246 (a run on a lossy namespace: p99 at 446 ms).
        let later = tail([0.000068, 0.000154, 0.446, 0.4506, 0.4506, 0.4506]);
        assert_eq!(at_timer(&later, 0.2), Some((0.99, 0.446, 0.9)));
        // Past the first firing at once, at no multiple of it: a slow server, not a timer.
        assert_eq!(at_timer(&tail([0.001, 0.002, 0.5, 0.6, 0.7, 0.8]), 0.2), None);
        // Only the few slowest: not evidence.
        assert_eq!(at_timer(&tail([0.001, 0.002, 0.003, 0.004, 0.2, 0.2]), 0.2), None);
        assert_eq!(quantile_name(0.99), "p99");
        assert_eq!(quantile_name(0.999), "p99.9");
        assert_eq!(quantile_name(0.9), "p90");
    }
}
