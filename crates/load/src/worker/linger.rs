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
//!
//! Whether holding out costs the server rate is measured, not assumed ([`Trial`]): some
//! servers answer a batch of requests more slowly than the same requests one by one (h2o at
//! one connection of 100 streams; nginx at ten HTTP/1.1 connections). A trial alternates
//! short epochs with and without holding out and compares the answers per second of each;
//! the turns after it hold out only if that kept the rate, and the trial is repeated ever
//! more rarely while its verdict stands.

use std::time::{Duration, Instant};

/// The shortest wait worth holding out for.
const FLOOR: Duration = Duration::from_micros(16);

/// The most turns in a row that do not hold out after waits at the floor idled the server.
const MAX_BACKOFF: u32 = 1024;

/// A trial's epochs, holding out or not, in an order that cancels a steady drift of the rate
/// (its first and second powers) between them.
const TRIAL: [bool; 8] = [true, false, false, true, false, true, true, false];

/// An epoch of a trial lasts this long, and until it has seen [`EPOCH_ANSWERS`] answers or
/// lasted ten times as long.
const EPOCH: Duration = Duration::from_millis(5);
const EPOCH_ANSWERS: u64 = 100;

/// Holding out is kept when the rate with it is at least this share of the rate without.
const KEEP: f64 = 0.97;

/// The time between trials: the first, and the most it doubles to while verdicts agree.
const FIRST_HOLD: Duration = Duration::from_secs(1);
const MAX_HOLD: Duration = Duration::from_secs(16);

/// Whether turns hold out now: a trial under way, or the last one's verdict.
#[derive(Debug, Clone)]
pub(super) struct Trial {
    /// Whether turns hold out now; the last trial's verdict, and how long it stands.
    on: bool,
    verdict: Option<bool>,
    hold: Duration,
    /// `Some(epoch)` while a trial runs, `None` while a verdict stands (or before the first
    /// answer, when nothing can be measured yet).
    epoch: Option<usize>,
    /// When the current epoch or verdict began, and the answers since.
    since: Option<Instant>,
    answers: u64,
    /// A trial's answers and time holding out and not.
    with: (u64, Duration),
    without: (u64, Duration),
}

impl Trial {
    fn new() -> Trial {
        Trial {
            on: true,
            verdict: None,
            hold: FIRST_HOLD,
            epoch: None,
            since: None,
            answers: 0,
            with: (0, Duration::ZERO),
            without: (0, Duration::ZERO),
        }
    }

    /// At a turn's start: whether it may hold out.
    fn turn(&mut self, now: Instant) -> bool {
        let Some(since) = self.since else {
            // The first answer starts the first trial.
            if self.answers > 0 {
                self.begin(now);
            }
            return self.on;
        };
        let lasted = now.saturating_duration_since(since);
        match self.epoch {
            None if lasted >= self.hold => self.begin(now),
            Some(i)
                if lasted >= EPOCH * 10 || (lasted >= EPOCH && self.answers >= EPOCH_ANSWERS) =>
            {
                let side = if TRIAL[i] { &mut self.with } else { &mut self.without };
                side.0 += self.answers;
                side.1 += lasted;
                self.answers = 0;
                self.since = Some(now);
                if i + 1 < TRIAL.len() {
                    self.epoch = Some(i + 1);
                    self.on = TRIAL[i + 1];
                } else {
                    self.decide();
                }
            }
            _ => {}
        }
        self.on
    }

    fn begin(&mut self, now: Instant) {
        self.epoch = Some(0);
        self.on = TRIAL[0];
        self.since = Some(now);
        self.answers = 0;
        self.with = (0, Duration::ZERO);
        self.without = (0, Duration::ZERO);
    }

    /// A trial's verdict: hold out if that kept the rate.
    fn decide(&mut self) {
        let rate = |(n, t): (u64, Duration)| n as f64 / t.as_secs_f64().max(1e-9);
        let on = rate(self.with) >= KEEP * rate(self.without);
        self.hold =
            if self.verdict == Some(on) { (self.hold * 2).min(MAX_HOLD) } else { FIRST_HOLD };
        self.verdict = Some(on);
        self.on = on;
        self.epoch = None;
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Linger {
    /// The run's `--linger`: the longest wait (zero: never).
    most: Duration,
    /// What a turn holds out for now.
    now: Duration,
    /// Turns left that do not hold out, and how many the last waits at the floor earned.
    off: u32,
    backoff: u32,
    /// Waits in a row that saw every request answered.
    dry: u32,
    trial: Trial,
    /// The last turn's start and whether it could hold out; the time in turns that could.
    last: Option<(Instant, bool)>,
    held_for: Duration,
}

impl Linger {
    pub(crate) fn new(most: Duration) -> Linger {
        Linger {
            most,
            now: most,
            off: 0,
            backoff: 0,
            dry: 0,
            trial: Trial::new(),
            last: None,
            held_for: Duration::ZERO,
        }
    }

    /// At a turn's start: how long it may hold out for more completions (zero: not at all).
    pub(crate) fn turn(&mut self) -> Duration {
        if self.most.is_zero() {
            return Duration::ZERO;
        }
        self.turn_at(Instant::now())
    }

    fn turn_at(&mut self, now: Instant) -> Duration {
        let wait = if !self.trial.turn(now) {
            Duration::ZERO
        } else if self.off > 0 {
            self.off -= 1;
            Duration::ZERO
        } else {
            self.now
        };
        if let Some((last, true)) = self.last.replace((now, !wait.is_zero())) {
            self.held_for += now.saturating_duration_since(last);
        }
        wait
    }

    /// After every turn: the answers it saw.
    pub(crate) fn answered(&mut self, answers: u64) {
        self.trial.answers += answers;
    }

    /// The time, so far, in turns that could hold out.
    pub(crate) fn held_for(&self) -> Duration {
        self.held_for
    }

    /// After a turn that held out: `answers` of the `in_flight` requests of its start came;
    /// `behind`: a wait found many more completions than it held out for (they were there
    /// before it began), so the server is ahead of the worker, as when it ran dry.
    pub(crate) fn held(&mut self, in_flight: u64, answers: u64, behind: bool) {
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

    /// `secs` of turns 100us apart against a server that answers `with` (holding out) or
    /// `without` requests a second, busy all the while: the time in turns that held out.
    fn trial(with: f64, without: f64, secs: f64) -> (Duration, Linger) {
        let mut l = Linger::new(MOST);
        let step = Duration::from_micros(100);
        let start = Instant::now();
        let (mut now, mut owed) = (start, 0.0);
        while now < start + Duration::from_secs_f64(secs) {
            let held = !l.turn_at(now).is_zero();
            owed += if held { with } else { without } * step.as_secs_f64();
            let answers = owed as u64;
            owed -= answers as f64;
            l.answered(answers);
            if held {
                l.held(100, 10, false);
            }
            now += step;
        }
        (l.held_for(), l)
    }

    #[test]
    fn a_wait_that_costs_the_server_rate_is_dropped_after_a_trial_and_tried_ever_more_rarely() {
        // 30% fewer answers while holding out: only the trials' epochs hold out, half of
        // each 40ms trial, at 0, 1.04, 3.08, 7.12 s.
        let (held, l) = trial(70_000.0, 100_000.0, 10.0);
        assert!(held > Duration::from_millis(75) && held < Duration::from_millis(85), "{held:?}");
        assert_eq!((l.trial.verdict, l.trial.hold), (Some(false), Duration::from_secs(8)));
        // 2% fewer: within what a trial keeps; all but the trials' other half hold out.
        let (held, l) = trial(98_000.0, 100_000.0, 10.0);
        assert!(held > Duration::from_millis(9_900), "{held:?}");
        assert_eq!(l.trial.verdict, Some(true));
    }

    #[test]
    fn nothing_is_tried_before_the_first_answer() {
        let (held, l) = trial(0.0, 0.0, 1.0);
        assert_eq!((l.trial.epoch, l.trial.verdict), (None, None));
        assert!(held > Duration::from_millis(999), "{held:?}");
    }

    #[test]
    fn no_linger_never_holds_out() {
        let mut l = Linger::new(Duration::ZERO);
        assert_eq!(run(&mut l, 100, Duration::from_micros(4), 100), vec![Duration::ZERO; 100]);
    }
}
