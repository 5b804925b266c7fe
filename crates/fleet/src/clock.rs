//! Starting agents together. Each agent has its own clock (nanoseconds since it started); the
//! coordinator measures the offset of each as NTP does: it notes when it sent a ping and when
//! the pong came back, the agent notes its clock in between; the exchange with the smallest
//! round trip gives the offset with the smallest error (at most half that round trip). The
//! start instant, set ahead of now, is sent to every agent in its own clock.

use std::time::Duration;

/// One ping: coordinator clock at send and at receipt, agent clock in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exchange {
    pub sent_ns: u64,
    pub agent_ns: u64,
    pub received_ns: u64,
}

/// An agent's clock against the coordinator's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Offset {
    /// Agent clock minus coordinator clock.
    pub offset_ns: i128,
    /// The round trip it was measured over; the offset is off by at most half of it.
    pub rtt_ns: u64,
}

/// The estimate from the exchange with the smallest round trip.
pub fn estimate(exchanges: &[Exchange]) -> Option<Offset> {
    let best = exchanges.iter().min_by_key(|e| e.received_ns.saturating_sub(e.sent_ns))?;
    let mid = (i128::from(best.sent_ns) + i128::from(best.received_ns)) / 2;
    Some(Offset {
        offset_ns: i128::from(best.agent_ns) - mid,
        rtt_ns: best.received_ns.saturating_sub(best.sent_ns),
    })
}

impl Offset {
    /// Coordinator instant `at_ns` in the agent's clock.
    pub fn to_agent(&self, at_ns: u64) -> u64 {
        u64::try_from((i128::from(at_ns) + self.offset_ns).max(0)).unwrap_or(u64::MAX)
    }
}

/// How far apart the agents' run clocks can have started: agent `i` started `late_i` after
/// the instant in its clock, which is within `rtt_i / 2` of the true instant.
pub fn skew_bound(agents: &[(Offset, u64)]) -> Duration {
    let hi = agents.iter().map(|(o, late)| i128::from(*late) + i128::from(o.rtt_ns / 2)).max();
    let lo = agents.iter().map(|(o, late)| i128::from(*late) - i128::from(o.rtt_ns / 2)).min();
    match (hi, lo) {
        (Some(h), Some(l)) => Duration::from_nanos(u64::try_from(h - l).unwrap_or(0)),
        _ => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn the_smallest_round_trip_wins_and_bounds_the_skew() {
        // The agent's clock is 5 ms ahead; the second exchange is the tightest.
        let ex = [
            Exchange { sent_ns: 1_000_000, agent_ns: 6_900_000, received_ns: 3_000_000 },
            Exchange { sent_ns: 10_000_000, agent_ns: 15_100_000, received_ns: 10_200_000 },
            Exchange { sent_ns: 20_000_000, agent_ns: 25_400_000, received_ns: 20_900_000 },
        ];
        let o = estimate(&ex).unwrap();
        assert_eq!(o.rtt_ns, 200_000);
        assert_eq!(o.offset_ns, 5_000_000);
        assert_eq!(o.to_agent(100_000_000), 105_000_000);
        assert!(estimate(&[]).is_none());
        let other = Offset { offset_ns: -3, rtt_ns: 400_000 };
        // Late by 50 us and 10 us, errors up to 100 us and 200 us: the starts lie in
        // [-50, 150] and [-190, 210] us of the true instant: at most 400 us apart.
        assert_eq!(skew_bound(&[(o, 50_000), (other, 10_000)]), Duration::from_micros(400));
    }
}
