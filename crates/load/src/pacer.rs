//! When requests may be issued. The engine asks the pacer for permission whenever a connection
//! has a free slot; the pacer answers how many requests may go now, and for each the time it was
//! meant to go (its schedule slot).
//!
//! Closed loop (wrk, httpress): as many as there are free slots, until the `-n` budget is spent;
//! a request is meant to go when it goes.
//!
//! Open loop (wrk2): requests are due on a fixed schedule, `rate` per second (or a linear ramp
//! from one rate to another). A due request goes on the first connection that is free; when none
//! is, it waits, keeping its slot time, so its latency (measured from the slot time) includes the
//! wait. A stalled server therefore cannot hide the requests it delayed: coordinated omission is
//! corrected rather than counted apart. The event loop is the same for both.

use crate::rate::Rate;
use std::time::{Duration, Instant};

/// An open-loop schedule for one thread: its share of the rate, from `start`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Schedule {
    /// None until the run's clock starts (open loop first opens its connections): nothing is
    /// due before.
    pub start: Option<Instant>,
    pub rate: Rate,
}

impl Schedule {
    /// Requests due by `now` (slot 0 is due at the start), as a real number.
    fn due_by(&self, now: Instant) -> Option<f64> {
        let start = self.start?;
        if now < start {
            return None;
        }
        Some(self.rate.due_by(now.duration_since(start)))
    }

    /// When slot `k` is due (None before the schedule starts).
    pub fn slot_time(&self, k: u64) -> Option<Instant> {
        let at = Duration::from_secs_f64(self.rate.time_of(k as f64).max(0.0));
        self.start.map(|s| s + at)
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Pacer {
    /// Issue on every free slot; `remaining` is the `-n` budget when there is one.
    Closed { remaining: Option<u64> },
    /// Issue on the schedule; `next` is the first slot not yet granted.
    Open { schedule: Schedule, next: u64, remaining: Option<u64> },
}

impl Pacer {
    pub(crate) fn closed(budget: Option<u64>) -> Self {
        Pacer::Closed { remaining: budget }
    }

    pub(crate) fn open(schedule: Schedule, budget: Option<u64>) -> Self {
        Pacer::Open { schedule, next: 0, remaining: budget }
    }

    pub(crate) fn is_open(&self) -> bool {
        matches!(self, Pacer::Open { .. })
    }

    /// Open loop: the requests the schedule had due by `now` (granted or not) and those of them
    /// not yet granted; None in closed loop.
    pub(crate) fn owed(&self, now: Instant) -> Option<(u64, u64)> {
        match self {
            Pacer::Open { next, .. } => {
                let due = self.due(now);
                Some((next + due, due))
            }
            Pacer::Closed { .. } => None,
        }
    }

    /// Requests due at `now` and not yet granted (always "unlimited" for closed loop).
    pub(crate) fn due(&self, now: Instant) -> u64 {
        match self {
            Pacer::Closed { remaining } => remaining.unwrap_or(u64::MAX),
            Pacer::Open { schedule, next, remaining } => {
                let Some(by) = schedule.due_by(now) else { return 0 };
                let due = (by.floor() as u64 + 1).saturating_sub(*next);
                remaining.map_or(due, |r| due.min(r))
            }
        }
    }

    /// Grants up to `want` requests now; returns how many and the first one's slot (the others
    /// follow consecutively).
    #[inline]
    pub(crate) fn grant(&mut self, want: u64, now: Instant) -> (u64, u64) {
        let n = want.min(self.due(now));
        match self {
            Pacer::Closed { remaining } => {
                if let Some(left) = remaining {
                    *left -= n;
                }
                (n, 0)
            }
            Pacer::Open { next, remaining, .. } => {
                let first = *next;
                *next += n;
                if let Some(left) = remaining {
                    *left -= n;
                }
                (n, first)
            }
        }
    }

    /// Closed loop: `n` granted requests did not go (HTTP/3: the server's stream limit was
    /// reached); the budget takes them back.
    pub(crate) fn give_back(&mut self, n: u64) {
        if let Pacer::Closed { remaining: Some(left) } = self {
            *left += n;
        }
    }

    /// When slot `k` was meant to go: its schedule time, or `now` in closed loop.
    #[inline]
    pub(crate) fn slot_time(&self, k: u64, now: Instant) -> Instant {
        match self {
            Pacer::Closed { .. } => now,
            Pacer::Open { schedule, .. } => schedule.slot_time(k).unwrap_or(now),
        }
    }

    /// When the next request falls due (None in closed loop or when the budget is spent).
    pub(crate) fn next_due(&self) -> Option<Instant> {
        match self {
            Pacer::Open { schedule, next, remaining } if remaining != &Some(0) => {
                schedule.slot_time(*next)
            }
            _ => None,
        }
    }

    /// The first slot not yet granted (0 in closed loop).
    pub(crate) fn next_slot(&self) -> u64 {
        match self {
            Pacer::Closed { .. } => 0,
            Pacer::Open { next, .. } => *next,
        }
    }

    /// Starts an open-loop schedule at `at` (closed loop: nothing to start).
    pub(crate) fn begin(&mut self, at: Instant) {
        if let Pacer::Open { schedule, .. } = self {
            schedule.start = Some(at);
        }
    }

    /// No request will ever be granted again.
    pub(crate) fn exhausted(&self) -> bool {
        matches!(
            self,
            Pacer::Closed { remaining: Some(0) } | Pacer::Open { remaining: Some(0), .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_is_never_exceeded() {
        let now = Instant::now();
        let mut p = Pacer::closed(Some(5));
        assert_eq!(p.grant(3, now).0, 3);
        assert_eq!(p.grant(3, now).0, 2);
        assert_eq!(p.grant(3, now).0, 0);
        assert!(p.exhausted());
        let mut unbounded = Pacer::closed(None);
        assert_eq!(unbounded.grant(7, now).0, 7);
        assert!(!unbounded.exhausted());
    }

    fn schedule(rps: f64) -> (Schedule, Instant) {
        let start = Instant::now();
        (Schedule { start: Some(start), rate: Rate::constant(rps) }, start)
    }

    #[test]
    fn nothing_is_due_before_the_schedule_starts() {
        let mut p = Pacer::open(Schedule { start: None, rate: Rate::constant(1000.0) }, None);
        let now = Instant::now();
        assert_eq!(p.due(now + Duration::from_secs(5)), 0);
        assert_eq!(p.next_due(), None);
        p.begin(now);
        assert_eq!(p.due(now), 1, "slot 0 is due at the start");
        assert_eq!(p.due(now - Duration::from_millis(1)), 0);
        assert_eq!(p.next_due(), Some(now));
    }

    #[test]
    fn constant_rate_slots_are_evenly_spaced() {
        let (s, start) = schedule(1000.0);
        let mut p = Pacer::open(s, None);
        assert_eq!(p.grant(10, start), (1, 0), "slot 0 is due at the start");
        let at = start + Duration::from_micros(4_500);
        assert_eq!(p.due(at), 4);
        assert_eq!(p.grant(2, at), (2, 1));
        assert_eq!(p.grant(9, at), (2, 3), "the backlog keeps its slots");
        assert_eq!(p.slot_time(3, at), start + Duration::from_millis(3));
        assert_eq!(p.next_due(), Some(start + Duration::from_millis(5)));
        let later = start + Duration::from_secs(10);
        assert_eq!(p.due(later), 10_001 - 5);
    }

    #[test]
    fn open_budget_ends_the_schedule() {
        let (s, start) = schedule(100.0);
        let mut p = Pacer::open(s, Some(3));
        assert_eq!(p.grant(10, start + Duration::from_secs(1)), (3, 0));
        assert!(p.exhausted());
        assert_eq!(p.next_due(), None);
    }
}
