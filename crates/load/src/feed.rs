//! The one live feed of a run: what a load, a load over agents, a bench and a sweep tell whoever
//! watches them while they run (a progress line, a live page, a metrics exporter), in one
//! shape. Each job emits the events it has and passes on those of the jobs it runs (a sweep
//! passes on its benches', a bench its load's or its agents'), so a watcher subscribes once,
//! whatever it watches.
//!
//! Nothing here is on a load thread's path: events are made on the calling thread, about once
//! a second.

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::Progress;

/// What happened.
#[derive(Debug)]
pub enum Event<'a> {
    /// A phase before the run, in words ("starting 3 agents").
    Phase(&'a str),
    /// Every load thread is ready (its connections open, in keep-alive runs): the run's clock
    /// starts when the handler returns. An agent holds the start here until the instant the
    /// coordinator chose.
    Ready,
    /// The measured window begins `lead` from now (after the warm-up, if any).
    Starting { lead: Duration },
    /// The live counters, summed over threads (and agents), about once a second.
    Progress(&'a Progress),
    /// Second `index` of the measured window is complete: the corrected latency of its
    /// responses, merged over threads (and agents). The last one may be partial. Made only
    /// when the feed [`Feed::wants_seconds`].
    Second { index: u32, hist: &'a Histogram<u64> },
    /// A load over agents: where each agent is, about once a second.
    Agents(&'a [AgentLive]),
    /// A doctor's finding, once it is known.
    Finding { name: &'a str, severity: &'a str, summary: &'a str },
    /// A sweep: run `run` of `runs` begins (variant `variant` of `variants`, repeat `repeat`
    /// of `repeats`), `eta` left.
    RunStart {
        run: usize,
        runs: usize,
        variant: usize,
        variants: usize,
        name: &'a str,
        repeat: u32,
        repeats: u32,
        eta: Duration,
    },
    /// A sweep: a run is stored.
    Stored { id: i64, throughput_rps: f64 },
    /// Something the user should know (a stopped run not stored, a kept revert).
    Note(&'a str),
}

/// One agent of a load over agents, as it is now.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentLive {
    /// As the user named it.
    pub host: String,
    /// `preparing`, `ready`, `running`, `done`, `lost` or `failed`.
    pub state: &'static str,
    pub progress: Progress,
}

/// Whoever watches a run.
pub trait Feed {
    fn event(&mut self, e: &Event<'_>);

    /// Whether [`Event::Second`] should be made (load threads then keep a histogram per
    /// second, a few microseconds of work per second each).
    fn wants_seconds(&self) -> bool {
        false
    }
}

/// A closure watches as a feed that wants no per-second histograms.
impl<F: FnMut(&Event<'_>)> Feed for F {
    fn event(&mut self, e: &Event<'_>) {
        self(e);
    }
}

/// Nobody watches.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unwatched;

impl Feed for Unwatched {
    fn event(&mut self, _: &Event<'_>) {}
}
