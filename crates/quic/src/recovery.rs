//! Loss detection and congestion control for [`crate::client::Client`] (RFC 9002): the
//! packets in flight per space with what each carried, the round-trip estimate, packets
//! declared lost by the packet and time thresholds, the probe timeout, and NewReno's window.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// What a packet carried that must go again if it is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retx {
    Crypto {
        offset: u64,
        len: u64,
    },
    Stream {
        id: u64,
        offset: u64,
        len: u64,
        fin: bool,
    },
    MaxData,
    MaxStreamData(u64),
    /// A RESET_STREAM or STOP_SENDING this side sent for the stream.
    Reset(u64),
    Stop(u64),
    /// A PING padded to a larger datagram than the path is known to carry (RFC 8899): its
    /// acknowledgement says the path carries the size, its loss says nothing of congestion.
    MtuProbe(u16),
}

/// A packet sent and not yet acknowledged or declared lost.
#[derive(Debug)]
pub struct Sent {
    pub pn: u64,
    pub at: Instant,
    pub size: usize,
    pub eliciting: bool,
    pub frames: Vec<Retx>,
}

/// RFC 9002's constants.
const PACKET_THRESHOLD: u64 = 3;
const INITIAL_RTT: Duration = Duration::from_millis(333);
const GRANULARITY: Duration = Duration::from_millis(1);
/// The largest datagram here; windows count in it.
pub const MAX_DATAGRAM: usize = 1200;
const INITIAL_WINDOW: usize = 10 * MAX_DATAGRAM;
const MIN_WINDOW: usize = 2 * MAX_DATAGRAM;

/// The round-trip estimate.
#[derive(Debug, Clone, Copy)]
pub struct Rtt {
    pub latest: Duration,
    pub smoothed: Duration,
    pub var: Duration,
    pub min: Duration,
    sampled: bool,
}

impl Default for Rtt {
    fn default() -> Rtt {
        Rtt {
            latest: INITIAL_RTT,
            smoothed: INITIAL_RTT,
            var: INITIAL_RTT / 2,
            min: Duration::ZERO,
            sampled: false,
        }
    }
}

impl Rtt {
    /// A sample: `latest` from the largest newly acknowledged packet, less the peer's
    /// `ack_delay` where it applies (RFC 9002 section 5).
    pub fn sample(&mut self, latest: Duration, ack_delay: Duration) {
        self.latest = latest;
        if !self.sampled {
            self.sampled = true;
            self.min = latest;
            self.smoothed = latest;
            self.var = latest / 2;
            return;
        }
        self.min = self.min.min(latest);
        let adjusted = if latest >= self.min + ack_delay { latest - ack_delay } else { latest };
        let diff = self.smoothed.abs_diff(adjusted);
        self.var = (self.var * 3 + diff) / 4;
        self.smoothed = (self.smoothed * 7 + adjusted) / 8;
    }

    /// How long after a packet without an acknowledgement the probe timer fires.
    pub fn pto(&self, max_ack_delay: Duration) -> Duration {
        self.smoothed + (self.var * 4).max(GRANULARITY) + max_ack_delay
    }

    /// How long after a later packet was acknowledged an earlier one is lost.
    fn loss_delay(&self) -> Duration {
        (self.latest.max(self.smoothed) * 9 / 8).max(GRANULARITY)
    }
}

/// One space's packets in flight.
#[derive(Debug, Default)]
pub struct Flight {
    pub sent: VecDeque<Sent>,
    pub largest_acked: Option<u64>,
    /// When the earliest packet not yet lost by count will be lost by time.
    pub loss_time: Option<Instant>,
    /// The last ack-eliciting packet's send time.
    pub last_eliciting: Option<Instant>,
}

/// The connection's congestion window and what is in flight (NewReno, RFC 9002 section 7).
#[derive(Debug)]
pub struct Congestion {
    pub window: usize,
    pub in_flight: usize,
    threshold: usize,
    recovery_since: Option<Instant>,
    /// Packets and bytes declared lost, and congestion events.
    pub lost: u64,
    pub lost_bytes: u64,
    pub events: u64,
    /// Packets larger than [`MAX_DATAGRAM`] lost since one of them was last acknowledged: a
    /// path that stopped carrying them (a black hole for the datagram size path MTU discovery
    /// found) shows as a run of them.
    pub large_lost_run: u32,
}

impl Default for Congestion {
    fn default() -> Congestion {
        Congestion {
            window: INITIAL_WINDOW,
            in_flight: 0,
            threshold: usize::MAX,
            recovery_since: None,
            lost: 0,
            lost_bytes: 0,
            events: 0,
            large_lost_run: 0,
        }
    }
}

impl Congestion {
    /// Room for a new packet of new data.
    pub fn room(&self) -> bool {
        self.in_flight + MAX_DATAGRAM <= self.window
    }

    fn acked(&mut self, p: &Sent) {
        self.in_flight = self.in_flight.saturating_sub(p.size);
        if p.size > MAX_DATAGRAM {
            self.large_lost_run = 0;
        }
        if self.recovery_since.is_some_and(|t| p.at <= t) {
            return;
        }
        if self.window < self.threshold {
            self.window += p.size;
        } else {
            self.window += MAX_DATAGRAM * p.size / self.window.max(1);
        }
    }

    fn lost(&mut self, p: &Sent, now: Instant) {
        self.in_flight = self.in_flight.saturating_sub(p.size);
        if p.size > MAX_DATAGRAM {
            self.large_lost_run += 1;
        }
        self.lost += 1;
        self.lost_bytes += p.size as u64;
        if self.recovery_since.is_some_and(|t| p.at <= t) {
            return;
        }
        self.recovery_since = Some(now);
        self.events += 1;
        self.window = (self.window / 2).max(MIN_WINDOW);
        self.threshold = self.window;
    }
}

/// Pacing (RFC 9002 section 7.7): new data leaves at 1.25 times the congestion window per
/// smoothed round trip, in bursts of at most what that rate sends in [`BURST_TIME`] (10 to 256
/// datagrams). Where the round trip is shorter than that (loopback, a LAN) a burst holds the
/// whole window and nothing waits; over a long path a window leaves spread over the round trip
/// instead of at once into the path's queues.
#[derive(Debug, Clone)]
pub struct Pacer {
    tokens: usize,
    last: Option<Instant>,
}

const BURST_TIME: Duration = Duration::from_millis(2);
const MIN_BURST: usize = 10 * MAX_DATAGRAM;
const MAX_BURST: usize = 256 * MAX_DATAGRAM;

impl Default for Pacer {
    fn default() -> Pacer {
        Pacer { tokens: MIN_BURST, last: None }
    }
}

impl Pacer {
    fn burst(window: usize, rtt: Duration) -> usize {
        let rtt = rtt.as_nanos().max(1);
        let b = window as u128 * BURST_TIME.as_nanos() / rtt;
        (b.min(MAX_BURST as u128) as usize).max(MIN_BURST)
    }

    /// Whether a datagram of new data may leave at `now` (None), or when it may.
    pub fn delay(&mut self, now: Instant, window: usize, rtt: Duration) -> Option<Instant> {
        let window = window.max(1);
        let burst = Pacer::burst(window, rtt);
        // The bytes earned in `d` at 1.25 windows per round trip.
        let rate = |d: Duration| (d.as_nanos() * window as u128 * 5 / 4) / rtt.as_nanos().max(1);
        self.tokens = match self.last {
            // The first data goes as a whole burst.
            None => burst,
            Some(last) => {
                let earned = rate(now.saturating_duration_since(last));
                (self.tokens as u128 + earned).min(burst as u128) as usize
            }
        };
        self.last = Some(now);
        if self.tokens >= MAX_DATAGRAM {
            return None;
        }
        let owed = (MAX_DATAGRAM - self.tokens) as u128;
        let nanos = (owed * rtt.as_nanos() * 4).div_ceil(window as u128 * 5);
        Some(now + Duration::from_nanos(nanos.min(u64::MAX as u128) as u64))
    }

    /// A datagram of `size` bytes of new data left.
    pub fn sent(&mut self, size: usize) {
        self.tokens = self.tokens.saturating_sub(size);
    }
}

impl Flight {
    pub fn on_sent(&mut self, p: Sent, cc: &mut Congestion) {
        if p.eliciting {
            self.last_eliciting = Some(p.at);
            cc.in_flight += p.size;
        }
        self.sent.push_back(p);
    }

    /// An ACK frame's ranges (largest first): the packets they acknowledge are taken out
    /// (their frames handed to `acked`), the round trip sampled, and the packets it shows
    /// lost handed to `lost`. True when it acknowledged something new.
    #[allow(clippy::too_many_arguments, reason = "the ACK and the state it updates")]
    pub fn on_ack(
        &mut self,
        ranges: impl Iterator<Item = (u64, u64)>,
        ack_delay: Duration,
        now: Instant,
        rtt: &mut Rtt,
        cc: &mut Congestion,
        acked: &mut dyn FnMut(&Retx),
        lost: &mut dyn FnMut(&Retx),
    ) -> bool {
        let mut newest: Option<(u64, Instant, bool)> = None;
        for (lo, hi) in ranges {
            // Packets are in order of their numbers: take out those in [lo, hi].
            let start = self.sent.partition_point(|p| p.pn < lo);
            let end = self.sent.partition_point(|p| p.pn <= hi);
            for p in self.sent.drain(start..end) {
                if newest.is_none_or(|(pn, ..)| p.pn > pn) {
                    newest = Some((p.pn, p.at, p.eliciting));
                }
                if p.eliciting {
                    cc.acked(&p);
                }
                p.frames.iter().for_each(&mut *acked);
            }
        }
        let Some((pn, at, eliciting)) = newest else { return false };
        if self.largest_acked.is_none_or(|l| pn > l) {
            self.largest_acked = Some(pn);
            if eliciting {
                rtt.sample(now.saturating_duration_since(at), ack_delay);
            }
        }
        self.detect_lost(now, rtt, cc, lost);
        true
    }

    /// Packets below the largest acknowledged that are lost by count or by time.
    pub fn detect_lost(
        &mut self,
        now: Instant,
        rtt: &Rtt,
        cc: &mut Congestion,
        lost: &mut dyn FnMut(&Retx),
    ) {
        self.loss_time = None;
        let Some(largest) = self.largest_acked else { return };
        let delay = rtt.loss_delay();
        let mut i = 0;
        while i < self.sent.len() && self.sent[i].pn < largest {
            let p = &self.sent[i];
            let by_count = largest - p.pn >= PACKET_THRESHOLD;
            let by_time = now.saturating_duration_since(p.at) >= delay;
            if by_count || by_time {
                if let Some(p) = self.sent.remove(i) {
                    if p.frames.iter().any(|f| matches!(f, Retx::MtuProbe(_))) {
                        cc.in_flight = cc.in_flight.saturating_sub(p.size);
                    } else if p.eliciting {
                        cc.lost(&p, now);
                    }
                    p.frames.iter().for_each(&mut *lost);
                }
                continue;
            }
            let at = p.at + delay;
            self.loss_time = Some(self.loss_time.map_or(at, |t| t.min(at)));
            i += 1;
        }
    }

    /// Whether ack-eliciting packets are in flight (the probe timer runs for them).
    pub fn eliciting_in_flight(&self) -> bool {
        self.sent.iter().any(|p| p.eliciting)
    }

    /// The oldest ack-eliciting packet's frames, to send again as a probe.
    pub fn probe_frames(&self) -> Vec<Retx> {
        self.sent.iter().find(|p| p.eliciting).map(|p| p.frames.clone()).unwrap_or_default()
    }

    /// Everything in flight is forgotten (its space's keys are gone).
    pub fn discard(&mut self, cc: &mut Congestion) {
        self.forget(cc, &mut |_| {});
    }

    /// Everything in flight is forgotten without counting as lost, its frames handed to
    /// `each` (to send again: the peer dropped the packets unread, as after a Retry).
    pub fn forget(&mut self, cc: &mut Congestion, each: &mut dyn FnMut(&Retx)) {
        for p in self.sent.drain(..) {
            if p.eliciting {
                cc.in_flight = cc.in_flight.saturating_sub(p.size);
            }
            p.frames.iter().for_each(&mut *each);
        }
        self.loss_time = None;
        self.last_eliciting = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(pn: u64, at: Instant) -> Sent {
        Sent { pn, at, size: 1200, eliciting: true, frames: vec![Retx::MaxData] }
    }

    /// Packets 0-9 sent; 5 and 9 acknowledged: those 3 or more below 9 are lost by count (the
    /// window, grown by the two acknowledged, halved once for all of them); 7 and 8 by time.
    #[test]
    fn lost_by_count_then_by_time() {
        let t0 = Instant::now();
        let (mut f, mut rtt, mut cc) = (Flight::default(), Rtt::default(), Congestion::default());
        for pn in 0..10 {
            f.on_sent(sent(pn, t0), &mut cc);
        }
        assert_eq!(cc.in_flight, 12_000);
        let now = t0 + Duration::from_millis(10);
        let (mut acked, mut lost) = (0, 0);
        let ranges = [(9, 9), (5, 5)];
        let got = f.on_ack(
            ranges.into_iter(),
            Duration::ZERO,
            now,
            &mut rtt,
            &mut cc,
            &mut |_| acked += 1,
            &mut |_| lost += 1,
        );
        assert!(got);
        assert_eq!(rtt.smoothed, Duration::from_millis(10));
        // Below 9 by 3 or more: 0-4 and 6; 7 and 8 wait.
        assert_eq!((acked, lost), (2, 6));
        assert_eq!(f.sent.iter().map(|p| p.pn).collect::<Vec<_>>(), [7, 8]);
        assert_eq!((cc.events, cc.window), (1, (INITIAL_WINDOW + 2_400) / 2));
        let later = f.loss_time.unwrap();
        assert_eq!(later, t0 + Duration::from_micros(11_250));
        f.detect_lost(later, &rtt, &mut cc, &mut |_| lost += 1);
        assert_eq!(lost, 8);
        assert!(f.sent.is_empty());
        assert_eq!(cc.events, 1, "one congestion event for one recovery period");
        assert_eq!(cc.in_flight, 0);
    }

    /// Over a 50 ms path with a 120 kB window: a burst of 10 datagrams, then one every 400 us
    /// (1.25 windows a round trip); over loopback's 100 us a burst holds the whole window.
    #[test]
    fn new_data_is_paced_over_a_long_path_and_not_over_a_short_one() {
        let t = Instant::now();
        let (window, rtt) = (120_000, Duration::from_millis(50));
        let mut p = Pacer::default();
        for _ in 0..10 {
            assert_eq!(p.delay(t, window, rtt), None);
            p.sent(MAX_DATAGRAM);
        }
        let next = p.delay(t, window, rtt).expect("the burst is spent");
        assert_eq!(next - t, Duration::from_micros(400));
        assert_eq!(p.delay(next, window, rtt), None);
        p.sent(MAX_DATAGRAM);
        // A second later the burst is full again, and no more than full.
        let later = next + Duration::from_secs(1);
        let sent = (0..20).take_while(|_| {
            let free = p.delay(later, window, rtt).is_none();
            p.sent(MAX_DATAGRAM);
            free
        });
        assert_eq!(sent.count(), 10);
        let (window, rtt) = (120_000, Duration::from_micros(100));
        let mut p = Pacer::default();
        for _ in 0..100 {
            // Over loopback: the window's 100 datagrams at once.
            assert_eq!(p.delay(t, window, rtt), None);
            p.sent(MAX_DATAGRAM);
        }
    }

    #[test]
    fn the_window_grows_by_what_is_acknowledged() {
        let t0 = Instant::now();
        let (mut f, mut rtt, mut cc) = (Flight::default(), Rtt::default(), Congestion::default());
        for pn in 0..4 {
            f.on_sent(sent(pn, t0), &mut cc);
        }
        let now = t0 + Duration::from_millis(1);
        f.on_ack(
            [(0, 3)].into_iter(),
            Duration::ZERO,
            now,
            &mut rtt,
            &mut cc,
            &mut |_| {},
            &mut |_| {},
        );
        assert_eq!(cc.window, INITIAL_WINDOW + 4_800, "slow start");
        assert_eq!(cc.in_flight, 0);
    }
}
