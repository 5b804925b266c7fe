//! Stalls: stretches of the window in which no response came on any connection while requests
//! waited. A server that stops as a whole (a garbage collection, a blocking call in its event
//! loop, a lock held, a fork, a synchronous write) holds every request in flight at once; a
//! closed loop then sends nothing new, so only the requests in flight wait and the
//! percentiles hide it (twenty connections make twenty slow responses of hundreds of
//! thousands). The stretches themselves do not hide: each thread notes the gaps in its own
//! responses while one of its requests was out, and the run keeps the stretches every thread
//! saw.

use std::time::Instant;

/// The shortest gap a thread notes at first; each time its list fills, the floor doubles and
/// the gaps under it go (a slow target's every response is a gap of its latency).
const FLOOR_US: u64 = 2_000;

/// Gaps a thread keeps at most.
const KEPT: usize = 1024;

/// A stall is at least this long whatever the latency: shorter gaps are the scheduler's.
pub const STALL_MIN_US: u64 = 10_000;

/// A stall is at least this many times the median latency: a gap a few responses long is how
/// responses come when few are in flight.
pub const STALL_MEDIANS: u64 = 4;

/// A stretch with no response, in microseconds from the start of measurement, and the
/// requests that were out through all of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Gap {
    pub begin_us: u64,
    pub end_us: u64,
    pub held: u64,
}

impl Gap {
    pub fn len_us(&self) -> u64 {
        self.end_us - self.begin_us
    }
}

/// One thread's gaps: stretches in which none of its connections got a response while one
/// of its requests was out. A response answered sooner than the floor after its write can
/// neither end a gap nor have waited through one: it costs a comparison of instants, a store
/// and a comparison of its latency; the rest are looked at closely. Gaps are noted in
/// microseconds from the start of measurement.
#[derive(Debug, Clone)]
pub struct StallLog {
    /// The start of measurement (set when the thread's window opens).
    origin: Option<Instant>,
    floor_us: u64,
    /// The last response's time (the window's start until one came).
    last_end: Instant,
    /// The last gap's beginning: a response to a request written before it was held by it.
    last_begin: Option<Instant>,
    pub gaps: Vec<Gap>,
}

impl Default for StallLog {
    fn default() -> Self {
        StallLog {
            origin: None,
            floor_us: FLOOR_US,
            last_end: Instant::now(),
            last_begin: None,
            gaps: Vec::new(),
        }
    }
}

/// Two logs are the same when they noted the same gaps: the instants they keep are this
/// thread's bookkeeping (a recorder sent by an agent arrives without them).
impl PartialEq for StallLog {
    fn eq(&self, other: &Self) -> bool {
        self.gaps == other.gaps
    }
}

impl StallLog {
    /// Measurement starts at `origin`: responses are noted from now on.
    pub fn open(&mut self, origin: Instant) {
        self.origin = Some(origin);
        self.last_end = origin;
    }

    /// Whether a response came after the window opened.
    pub fn answered(&self) -> bool {
        self.origin.is_some_and(|o| self.last_end > o)
    }

    /// A response at `now` to a request written at `sent`, `from_sent_us` ago: the stretch
    /// since the later of the last response and the write had no response on this thread.
    #[inline]
    pub fn response(&mut self, now: Instant, sent: Instant, from_sent_us: u64) {
        let last = self.last_end;
        if now > last {
            self.last_end = now;
        }
        // A request out through a gap waited at least the gap.
        if from_sent_us >= self.floor_us {
            self.late(last, now, sent);
        }
    }

    /// A response as late as the floor: a gap when no other came meanwhile.
    #[cold]
    fn late(&mut self, last: Instant, now: Instant, sent: Instant) {
        if self.origin.is_none() {
            return;
        }
        let begin = last.max(sent);
        if now.saturating_duration_since(begin).as_micros() as u64 >= self.floor_us {
            self.note(begin, now);
        } else if self.last_begin.is_some_and(|b| sent <= b) {
            self.held();
        }
    }

    /// Out through the whole of the last gap: it held this request too.
    fn held(&mut self) {
        if let Some(g) = self.gaps.last_mut() {
            g.held += 1;
        }
    }

    #[cold]
    fn note(&mut self, begin: Instant, end: Instant) {
        let Some(origin) = self.origin else { return };
        let us = |t: Instant| t.saturating_duration_since(origin).as_micros() as u64;
        let gap = Gap { begin_us: us(begin), end_us: us(end), held: 1 };
        if self.gaps.len() == KEPT {
            self.floor_us *= 2;
            let floor = self.floor_us;
            self.gaps.retain(|g| g.len_us() >= floor);
            self.last_begin = None;
            if gap.len_us() < floor {
                return;
            }
        }
        self.last_begin = Some(begin);
        self.gaps.push(gap);
    }
}

/// The stretches every log saw, of the logs that noted responses: where one thread got a
/// response, the server was not stopped. A stretch's held requests are its logs' together.
pub fn common<'a>(logs: impl IntoIterator<Item = &'a [Gap]>) -> Vec<Gap> {
    let mut logs = logs.into_iter();
    let Some(first) = logs.next() else { return Vec::new() };
    logs.fold(first.to_vec(), |acc, next| intersect(&acc, next))
}

/// The stretches in both sorted, disjoint lists.
fn intersect(a: &[Gap], b: &[Gap]) -> Vec<Gap> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        let (x, y) = (a[i], b[j]);
        let (begin, end) = (x.begin_us.max(y.begin_us), x.end_us.min(y.end_us));
        if begin < end {
            out.push(Gap { begin_us: begin, end_us: end, held: x.held + y.held });
        }
        if x.end_us <= y.end_us {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// The gaps long enough to be stalls: [`STALL_MIN_US`] and [`STALL_MEDIANS`] times the median
/// latency, with two requests held at least (one slow request is a slow request, not a
/// stopped server).
pub fn stalls(gaps: &[Gap], median_us: u64) -> (u64, Vec<Gap>) {
    let threshold = STALL_MIN_US.max(STALL_MEDIANS * median_us);
    (threshold, gaps.iter().copied().filter(|g| g.len_us() >= threshold && g.held >= 2).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(origin: Instant, ms: u64) -> Instant {
        origin + Duration::from_millis(ms)
    }

    /// A response at `end` ms to a request written at `sent` ms.
    fn answer(log: &mut StallLog, o: Instant, end: u64, sent: u64) {
        log.response(at(o, end), at(o, sent), 1000 * (end - sent));
    }

    #[test]
    fn a_stretch_without_responses_is_noted_with_the_requests_it_held() {
        let o = Instant::now();
        let mut log = StallLog::default();
        log.open(o);
        // Responses every millisecond to requests written a millisecond before.
        for ms in 1..100 {
            answer(&mut log, o, ms, ms - 1);
        }
        assert!(log.gaps.is_empty(), "{:?}", log.gaps);
        // Three requests out from 99 ms, answered at 300 ms.
        for _ in 0..3 {
            answer(&mut log, o, 300, 99);
        }
        assert_eq!(log.gaps, [Gap { begin_us: 99_000, end_us: 300_000, held: 3 }]);
        // A request written during the gap did not wait through it.
        answer(&mut log, o, 301, 150);
        assert_eq!(log.gaps[0].held, 3);
    }

    #[test]
    fn nothing_out_is_no_gap_and_a_full_list_raises_its_floor() {
        let o = Instant::now();
        let mut log = StallLog::default();
        log.open(o);
        // An open loop sending once a second: the idle stretches had nothing out.
        for s in 1..5 {
            answer(&mut log, o, s * 1000 + 1, s * 1000);
        }
        assert!(log.gaps.is_empty());
        // A slow target: every response a 3 ms gap, more than the list keeps.
        let mut log = StallLog::default();
        log.open(o);
        for i in 1..=2 * KEPT as u64 {
            answer(&mut log, o, 3 * i, 3 * (i - 1));
        }
        assert_eq!(log.floor_us, 2 * FLOOR_US);
        assert!(log.gaps.is_empty(), "3 ms gaps are under the raised floor");
        answer(&mut log, o, 7000, 6000);
        assert_eq!(log.gaps.len(), 1);
    }

    #[test]
    fn the_run_keeps_what_every_thread_saw() {
        let g = |b: u64, e: u64| Gap { begin_us: b, end_us: e, held: 2 };
        let a = [g(0, 10), g(100, 300), g(500, 600)];
        let b = [g(5, 20), g(150, 350)];
        let c = [g(120, 250), g(550, 560)];
        assert_eq!(common([&a[..], &b[..]]), [g(5, 10), g(150, 300)].map(|x| Gap { held: 4, ..x }));
        assert_eq!(common([&a[..], &b[..], &c[..]]), [Gap { begin_us: 150, end_us: 250, held: 6 }]);
        assert!(common(std::iter::empty::<&[Gap]>()).is_empty());
        let (threshold, kept) =
            stalls(&[g(0, 9_000), g(0, 50_000), Gap { held: 1, ..g(0, 90_000) }], 5_000);
        assert_eq!(threshold, 20_000);
        assert_eq!(kept, [g(0, 50_000)]);
    }
}
