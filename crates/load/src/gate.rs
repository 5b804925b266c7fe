//! The start line of a run. Every load thread builds its event loop (and, in open loop, opens
//! its connections) first; the run's clock starts when the last thread is ready, so an
//! open-loop schedule does not begin while connections are still being opened and the
//! connect burst does not show up as send lag.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Instant, SystemTime};

/// When the run started, when measuring starts (after warm-up) and when it stops (`-d`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    pub start: Instant,
    pub started_at: SystemTime,
    pub measure_start: Instant,
    pub stop_at: Option<Instant>,
}

#[derive(Debug, Default)]
pub(crate) struct StartGate {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    ready: usize,
    clock: Option<Clock>,
}

impl StartGate {
    /// A load thread is ready; returns the run's clock once every thread is.
    pub fn arrive(&self) -> Clock {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.ready += 1;
        self.changed.notify_all();
        loop {
            if let Some(clock) = s.clock {
                return clock;
            }
            s = self.changed.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Waits until `threads` threads are ready, then starts the clock made by `make` (called
    /// at that moment) and releases them.
    pub fn open(&self, threads: usize, make: impl FnOnce() -> Clock) -> Clock {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        while s.ready < threads {
            s = self.changed.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
        let clock = make();
        s.clock = Some(clock);
        self.changed.notify_all();
        clock
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn threads_leave_together_with_the_clock_made_after_the_last_arrives() {
        let gate = StartGate::default();
        let arrived_last = Mutex::new(None);
        let clocks = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..3u64)
                .map(|i| {
                    let (gate, arrived_last) = (&gate, &arrived_last);
                    scope.spawn(move || {
                        std::thread::sleep(Duration::from_millis(20 * i));
                        *arrived_last.lock().unwrap() = Some(Instant::now());
                        gate.arrive().start
                    })
                })
                .collect();
            let opened = gate.open(3, || {
                let now = Instant::now();
                Clock {
                    start: now,
                    started_at: SystemTime::now(),
                    measure_start: now,
                    stop_at: None,
                }
            });
            let mut starts: Vec<Instant> = handles.into_iter().map(|h| h.join().unwrap()).collect();
            starts.push(opened.start);
            starts
        });
        assert!(clocks.windows(2).all(|w| w[0] == w[1]), "one clock for all");
        assert!(clocks[0] >= arrived_last.lock().unwrap().unwrap());
    }
}
