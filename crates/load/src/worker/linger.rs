//! How long a turn of the io_uring loop holds out for more completions in a closed loop,
//! adapted to the server's pace.
//!
//! A worker that wakes on every answer spends a system call and a context switch on each,
//! and so does the server that then gets one request at a time: against a server that is
//! the bound, the generator should sleep while the server works. A turn that holds out
//! lets answers gather and sends the requests they free together. It pays while the server
//! stays busy with the rest of the pipeline; once the server has answered everything it
//! was given, it idles while the worker waits. So the wait aims between the two: after two
//! turns in a row whose waits saw every request of their start answered, or found many more
//! answers than they held out for (the worker is behind a faster server), the next waits are
//! half as long; after a wait that saw fewer than half answered, twice as long (up to the
//! run's `--linger`). Below [`FLOOR`] waiting no longer pays (the server answers faster than
//! a wake-up costs): the turns after it do not hold out, twice as many each time this
//! repeats (up to [`MAX_BACKOFF`]), and a wait that left the server busy ends that.

use std::time::Duration;

/// The shortest wait worth holding out for.
const FLOOR: Duration = Duration::from_micros(16);

/// The most turns in a row that do not hold out after waits at the floor idled the server.
const MAX_BACKOFF: u32 = 1024;

#[derive(Debug, Clone)]
pub(super) struct Linger {
    /// The run's `--linger`: the longest wait (zero: never).
    most: Duration,
    /// What a turn holds out for now.
    now: Duration,
    /// Turns left that do not hold out, and how many the last waits at the floor earned.
    off: u32,
    backoff: u32,
    /// Waits in a row that saw every request answered.
    dry: u32,
}

impl Linger {
    pub(super) fn new(most: Duration) -> Linger {
        Linger { most, now: most, off: 0, backoff: 0, dry: 0 }
    }

    /// At a turn's start: how long it may hold out for more completions (zero: not at all).
    pub(super) fn turn(&mut self) -> Duration {
        if self.off > 0 {
            self.off -= 1;
            return Duration::ZERO;
        }
        self.now
    }

    /// After a turn that held out: `answers` of the `in_flight` requests of its start came;
    /// `behind`: a wait found many more completions than it held out for (they were there
    /// before it began), so the server is ahead of the worker, as when it ran dry.
    pub(super) fn held(&mut self, in_flight: u64, answers: u64, behind: bool) {
        if behind || answers >= in_flight {
            self.dry += 1;
            if self.dry < 2 {
                return;
            }
            self.dry = 0;
            let shorter = self.now / 2;
            if shorter < FLOOR {
                self.backoff = (self.backoff * 2).clamp(1, MAX_BACKOFF);
                self.off = self.backoff;
                self.now = FLOOR.min(self.most);
            } else {
                self.now = shorter;
            }
            return;
        }
        self.dry = 0;
        self.backoff = 0;
        if answers * 2 < in_flight {
            self.now = (self.now * 2).min(self.most);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOST: Duration = Duration::from_micros(500);

    /// The turns of a closed loop of `in_flight` requests against a server that answers
    /// one each `cost` (none while the worker has not sent them): what each wait sees.
    fn run(l: &mut Linger, in_flight: u64, cost: Duration, turns: usize) -> Vec<Duration> {
        (0..turns)
            .map(|_| {
                let wait = l.turn();
                if !wait.is_zero() {
                    let answers = (wait.as_nanos() / cost.as_nanos()) as u64;
                    l.held(in_flight, answers.min(in_flight), false);
                }
                wait
            })
            .collect()
    }

    #[test]
    fn a_busy_server_is_waited_for_between_half_and_all_of_what_it_holds() {
        // 100 in flight at 4us each: the whole pipeline is 400us of the server's work.
        let mut l = Linger::new(MOST);
        let waits = run(&mut l, 100, Duration::from_micros(4), 20);
        assert_eq!(waits[0], MOST);
        assert_eq!(*waits.last().unwrap(), Duration::from_micros(250));
        // A slow server (10 ms a request): the longest wait, every turn.
        let mut l = Linger::new(MOST);
        let waits = run(&mut l, 100, Duration::from_millis(10), 20);
        assert!(waits.iter().all(|w| *w == MOST), "{waits:?}");
    }

    #[test]
    fn a_server_faster_than_a_wake_up_is_not_waited_for_but_retried_ever_more_rarely() {
        // 100 in flight at 0.1us each: everything is answered within any wait.
        let mut l = Linger::new(MOST);
        let waits = run(&mut l, 100, Duration::from_nanos(100), 10_000);
        let held: Vec<usize> = (0..waits.len()).filter(|&i| !waits[i].is_zero()).collect();
        // 500, 250, 125, 62, 31 (two turns each), 16, then one retry at the floor per
        // backoff.
        assert!(held.len() < 60, "{held:?}");
        // Each retry is two turns (two dry waits in a row) and then a longer pause.
        let gaps: Vec<usize> =
            held.windows(2).map(|w| w[1] - w[0] - 1).filter(|&g| g > 0).collect();
        assert_eq!(gaps[..11], [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], "{gaps:?}");
        assert!(gaps[11..].iter().all(|&g| g == 1024), "{gaps:?}");
        // A wait that leaves the server busy ends the backoff.
        while l.turn().is_zero() {}
        l.held(100, 10, false);
        assert_eq!(l.turn(), Duration::from_micros(32));
    }

    #[test]
    fn no_linger_never_holds_out() {
        let mut l = Linger::new(Duration::ZERO);
        assert_eq!(run(&mut l, 100, Duration::from_micros(4), 100), vec![Duration::ZERO; 100]);
    }
}
