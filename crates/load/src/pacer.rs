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
    pub start: Instant,
    pub rate: Rate,
}

impl Schedule {
    /// Requests due by `t` seconds after the start (slot 0 is due at t = 0).
    fn due_by(&self, t: f64) -> f64 {
        if t < 0.0 {
            return 0.0;
        }
        self.rate.due_by(Duration::from_secs_f64(t))
    }

    /// Seconds after the start at which slot `k` is due.
    fn slot_secs(&self, k: u64) -> f64 {
        self.rate.time_of(k as f64)
    }

    /// When slot `k` is due.
    pub fn slot_time(&self, k: u64) -> Instant {
        self.start + Duration::from_secs_f64(self.slot_secs(k).max(0.0))
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

    /// Requests due at `now` and not yet granted (always "unlimited" for closed loop).
    pub(crate) fn due(&self, now: Instant) -> u64 {
        match self {
            Pacer::Closed { remaining } => remaining.unwrap_or(u64::MAX),
            Pacer::Open { schedule, next, remaining } => {
                let t = now.saturating_duration_since(schedule.start).as_secs_f64();
                let due = (schedule.due_by(t).floor() as u64 + 1).saturating_sub(*next);
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

    /// When slot `k` was meant to go: its schedule time, or `now` in closed loop.
    #[inline]
    pub(crate) fn slot_time(&self, k: u64, now: Instant) -> Instant {
        match self {
            Pacer::Closed { .. } => now,
            Pacer::Open { schedule, .. } => schedule.slot_time(k),
        }
    }

    /// When the next request falls due (None in closed loop or when the budget is spent).
    pub(crate) fn next_due(&self) -> Option<Instant> {
        match self {
            Pacer::Open { schedule, next, remaining } if remaining != &Some(0) => {
                Some(schedule.slot_time(*next))
            }
            _ => None,
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

    fn schedule(rps: f64) -> Schedule {
        Schedule { start: Instant::now(), rate: Rate::constant(rps) }
    }

    #[test]
    fn constant_rate_slots_are_evenly_spaced() {
        let s = schedule(1000.0);
        let mut p = Pacer::open(s.clone(), None);
        assert_eq!(p.grant(10, s.start), (1, 0), "slot 0 is due at the start");
        let at = s.start + Duration::from_micros(4_500);
        assert_eq!(p.due(at), 4);
        assert_eq!(p.grant(2, at), (2, 1));
        assert_eq!(p.grant(9, at), (2, 3), "the backlog keeps its slots");
        assert_eq!(p.slot_time(3, at), s.start + Duration::from_millis(3));
        assert_eq!(p.next_due(), Some(s.start + Duration::from_millis(5)));
        let later = s.start + Duration::from_secs(10);
        assert_eq!(p.due(later), 10_001 - 5);
    }

    #[test]
    fn open_budget_ends_the_schedule() {
        let s = schedule(100.0);
        let mut p = Pacer::open(s.clone(), Some(3));
        assert_eq!(p.grant(10, s.start + Duration::from_secs(1)), (3, 0));
        assert!(p.exhausted());
        assert_eq!(p.next_due(), None);
    }
}
