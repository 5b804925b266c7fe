//! The run supervisor: spawns a crew of named worker threads (pinned when asked), optionally
//! holds them at a start line until every one is ready, passes their messages and an interval
//! tick to a supervisor on the calling thread, and returns each worker's result, a panic or a
//! failed pin included as that worker's error. The load engine and the server run on it.
//!
//! The start line: a worker calls [`Hand::ready`] when it is prepared (its event loop built, its
//! connections open) and waits there; once every worker is ready or has ended, the supervisor's
//! [`Supervise::start`] runs on the calling thread and its value (a run's clock) is handed to
//! every worker at once. A worker that fails before the line does not hold the others.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The crew to run.
#[derive(Debug, Clone)]
pub struct Crew<'a> {
    /// Thread names are `NAME-0`, `NAME-1`, ...
    pub name: &'a str,
    pub workers: usize,
    /// Worker i is pinned to `cpus[i % len]`.
    pub cpus: Option<&'a [usize]>,
    /// How often [`Supervise::tick`] runs (from the start, when there is a start line).
    pub every: Option<Duration>,
    /// Workers meet at a start line ([`Hand::ready`]); without one, [`Supervise::start`] runs as
    /// soon as the crew is spawned.
    pub start_line: bool,
}

/// What the calling thread does while the crew runs.
pub trait Supervise<M, S> {
    /// Every worker is ready or has ended (or, without a start line, every worker was spawned):
    /// returns what the workers start with. Ticks are counted from here.
    fn start(&mut self) -> S;

    /// A worker sent `message`.
    fn message(&mut self, _worker: usize, _message: M) {}

    /// `every` has passed.
    fn tick(&mut self) {}
}

/// Why a worker gave no result.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError<E> {
    #[error("cannot start thread {name}: {source}")]
    Spawn { name: String, source: std::io::Error },
    #[error("cannot pin {name} to CPU {cpu}: {source}")]
    Pin { name: String, cpu: usize, source: std::io::Error },
    #[error("{name} panicked")]
    Panicked { name: String },
    #[error("{name}: {error}")]
    Failed { name: String, error: E },
}

/// A worker's side of the crew.
#[derive(Debug)]
pub struct Hand<'a, M, S> {
    index: usize,
    events: Sender<Event<M>>,
    line: &'a StartLine<S>,
}

impl<M, S: Clone> Hand<'_, M, S> {
    /// This worker's number, from 0.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Sends `message` to the supervisor.
    pub fn send(&self, message: M) {
        let _ = self.events.send(Event::Message(self.index, message));
    }

    /// Waits at the start line until every worker is ready; returns what the supervisor started
    /// them with.
    pub fn ready(&self) -> S {
        let _ = self.events.send(Event::Ready(self.index));
        self.line.wait()
    }
}

#[derive(Debug)]
enum Event<M> {
    Ready(usize),
    Message(usize, M),
    Done(usize),
}

#[derive(Debug)]
struct StartLine<S> {
    value: Mutex<Option<S>>,
    set: Condvar,
}

impl<S: Clone> StartLine<S> {
    fn open(&self, value: S) {
        *self.value.lock().unwrap_or_else(PoisonError::into_inner) = Some(value);
        self.set.notify_all();
    }

    fn wait(&self) -> S {
        let mut v = self.value.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(s) = v.as_ref() {
                return s.clone();
            }
            v = self.set.wait(v).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Sends `Done` when the worker's closure ends, returned or panicked.
struct DoneGuard<M> {
    index: usize,
    events: Sender<Event<M>>,
}

impl<M> Drop for DoneGuard<M> {
    fn drop(&mut self) {
        let _ = self.events.send(Event::Done(self.index));
    }
}

/// Runs the crew: `work` on every worker thread, `supervisor` on the calling one, until every
/// worker has ended. Returns each worker's result in order.
pub fn run<M, S, T, E>(
    crew: &Crew<'_>,
    work: impl Fn(&Hand<'_, M, S>) -> Result<T, E> + Sync,
    supervisor: &mut dyn Supervise<M, S>,
) -> Vec<Result<T, WorkerError<E>>>
where
    M: Send,
    S: Clone + Send + Sync,
    T: Send,
    E: Send,
{
    let line = StartLine { value: Mutex::new(None), set: Condvar::new() };
    let (tx, rx) = mpsc::channel();
    let name = |i: usize| format!("{}-{i}", crew.name);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..crew.workers)
            .map(|i| {
                let (events, line, work) = (tx.clone(), &line, &work);
                let cpu = crew.cpus.filter(|c| !c.is_empty()).map(|c| c[i % c.len()]);
                std::thread::Builder::new()
                    .name(name(i))
                    .spawn_scoped(scope, move || {
                        let _done = DoneGuard { index: i, events: events.clone() };
                        if let Some(cpu) = cpu {
                            crate::cpus::pin_current_thread(cpu).map_err(|source| {
                                WorkerError::Pin { name: name(i), cpu, source }
                            })?;
                        }
                        work(&Hand { index: i, events, line })
                            .map_err(|error| WorkerError::Failed { name: name(i), error })
                    })
                    .map_err(|source| WorkerError::Spawn { name: name(i), source })
            })
            .collect();
        drop(tx);
        let spawned = handles.iter().filter(|h| h.is_ok()).count();
        supervise(crew, spawned, &rx, &line, supervisor);
        handles
            .into_iter()
            .enumerate()
            .map(|(i, h)| match h?.join() {
                Ok(result) => result,
                Err(_) => Err(WorkerError::Panicked { name: name(i) }),
            })
            .collect()
    })
}

/// The calling thread's loop: the start line, messages and ticks, until every worker is done.
fn supervise<M, S: Clone>(
    crew: &Crew<'_>,
    spawned: usize,
    rx: &mpsc::Receiver<Event<M>>,
    line: &StartLine<S>,
    supervisor: &mut dyn Supervise<M, S>,
) {
    let (mut running, mut waiting) = (spawned, spawned);
    let mut arrived = vec![false; crew.workers];
    let mut next_tick = None;
    let mut started = false;
    loop {
        if !started && (!crew.start_line || waiting == 0) {
            line.open(supervisor.start());
            next_tick = crew.every.map(|e| Instant::now() + e);
            started = true;
        }
        if running == 0 {
            return;
        }
        let wait = next_tick.map_or(Duration::from_secs(3600), |t: Instant| {
            t.saturating_duration_since(Instant::now())
        });
        let mut arrive = |i: usize| {
            if !std::mem::replace(&mut arrived[i], true) {
                waiting -= 1;
            }
        };
        match rx.recv_timeout(wait) {
            Ok(Event::Ready(i)) => arrive(i),
            Ok(Event::Done(i)) => {
                running -= 1;
                arrive(i);
            }
            Ok(Event::Message(i, m)) => supervisor.message(i, m),
            Err(RecvTimeoutError::Timeout) => {
                supervisor.tick();
                next_tick = next_tick.zip(crew.every).map(|(t, e)| t + e);
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts what it was told; starts the workers with the instant it was called.
    #[derive(Default)]
    struct Tally {
        started: Option<Instant>,
        messages: Vec<(usize, u32)>,
        ticks: usize,
    }

    impl Supervise<u32, Instant> for Tally {
        fn start(&mut self) -> Instant {
            let now = Instant::now();
            self.started = Some(now);
            now
        }
        fn message(&mut self, worker: usize, m: u32) {
            self.messages.push((worker, m));
        }
        fn tick(&mut self) {
            self.ticks += 1;
        }
    }

    #[test]
    fn workers_leave_the_start_line_together_after_the_last_is_ready() {
        let crew = Crew { name: "t", workers: 3, cpus: None, every: None, start_line: true };
        let mut tally = Tally::default();
        let last_ready = Mutex::new(None);
        let results = run(
            &crew,
            |hand: &Hand<'_, u32, Instant>| {
                std::thread::sleep(Duration::from_millis(20 * hand.index() as u64));
                *last_ready.lock().unwrap() = Some(Instant::now());
                let start = hand.ready();
                hand.send(hand.index() as u32 * 10);
                Ok::<_, String>((start, std::thread::current().name().map(str::to_string)))
            },
            &mut tally,
        );
        let ok: Vec<_> = results.into_iter().map(Result::unwrap).collect();
        assert!(ok.iter().all(|(s, _)| *s == tally.started.unwrap()), "one start for all");
        assert!(tally.started.unwrap() >= last_ready.lock().unwrap().unwrap());
        assert_eq!(ok[2].1.as_deref(), Some("t-2"), "named threads");
        let mut m = tally.messages.clone();
        m.sort_unstable();
        assert_eq!(m, vec![(0, 0), (1, 10), (2, 20)]);
    }

    #[test]
    fn a_worker_that_fails_or_panics_before_the_line_holds_nobody() {
        let crew = Crew { name: "w", workers: 3, cpus: None, every: None, start_line: true };
        let results = run(
            &crew,
            |hand: &Hand<'_, u32, Instant>| match hand.index() {
                0 => Err("no luck".to_string()),
                1 => panic!("on purpose"),
                _ => Ok(hand.ready()),
            },
            &mut Tally::default(),
        );
        assert_eq!(results[0].as_ref().unwrap_err().to_string(), "w-0: no luck");
        assert_eq!(results[1].as_ref().unwrap_err().to_string(), "w-1 panicked");
        assert!(results[2].is_ok());
    }

    #[test]
    fn without_a_start_line_ticks_run_from_the_spawn() {
        let crew = Crew {
            name: "s",
            workers: 2,
            cpus: Some(&[0]),
            every: Some(Duration::from_millis(20)),
            start_line: false,
        };
        let mut tally = Tally::default();
        let seen = AtomicUsize::new(0);
        let results = run(
            &crew,
            |_: &Hand<'_, u32, Instant>| {
                std::thread::sleep(Duration::from_millis(110));
                seen.fetch_add(1, Ordering::Relaxed);
                Ok::<_, ()>(crate::cpus::allowed_cpus())
            },
            &mut tally,
        );
        assert_eq!(seen.load(Ordering::Relaxed), 2);
        assert!((3..=6).contains(&tally.ticks), "{} ticks in 110 ms at 20 ms", tally.ticks);
        for r in results {
            assert_eq!(r.unwrap(), vec![0], "pinned to CPU 0");
        }
        let bad = Crew { cpus: Some(&[100_000]), ..crew };
        let r = run(&bad, |_: &Hand<'_, u32, Instant>| Ok::<_, ()>(()), &mut Tally::default());
        assert!(matches!(&r[0], Err(WorkerError::Pin { cpu: 100_000, .. })), "{:?}", r[0]);
    }
}
