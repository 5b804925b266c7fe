//! One run of a state, made the same way by the sweep (a variant) and the climb (a state of
//! its walk): its host settings in force for the run (here, or on the server host through its
//! agent), the bench, the settings reverted after it whatever the bench did, and the run
//! stored in its sweep with the provenance read while the settings were in force.

use std::sync::atomic::AtomicBool;

use qpslab_load::feed::{Event, Feed};
use qpslab_runs::store::{Store, StoreError};

use crate::bench::{bench, BenchError, BenchOptions, BenchReport};
use crate::record::{store_bench, InSweep, Provenance};
use crate::remote::InForce;

/// The run: its options, and its place in the sweep.
#[derive(Debug, Clone, Copy)]
pub struct Trial<'a> {
    pub opts: &'a BenchOptions,
    pub variant: &'a str,
    pub repeat: u32,
    pub label: Option<&'a str>,
}

/// Why a run did not end stored.
#[derive(Debug)]
pub enum TrialError {
    /// Its host settings could not be reverted.
    Settings(String),
    Run(BenchError),
    Store(StoreError),
}

/// A run made: its report, and its id when stored.
pub type Made = (BenchReport, Option<i64>);

/// Runs `t` with `settings` in force (applied by the caller, here or there: [`InForce`]),
/// reverts them, and stores the run in `store`'s sweep (None: not stored) with `provenance`,
/// the server host's read into it while the settings hold. None: a signal stopped the run
/// (it is not stored).
pub fn run(
    t: Trial<'_>,
    mut settings: InForce<'_>,
    store: Option<(&mut Store, i64)>,
    mut provenance: Provenance,
    stop: &AtomicBool,
    feed: &mut dyn Feed,
) -> Result<Option<Made>, TrialError> {
    if let (InForce::There(far, _), Some(_)) = (&mut settings, &store) {
        provenance.server_host = far.host_json().ok();
    }
    let result = bench(t.opts, stop, feed);
    if let Some(note) = settings.revert().map_err(TrialError::Settings)? {
        feed.event(&Event::Note(&note));
    }
    // A signal stops a run early, or before its load started (an error then, from agents).
    let stopped = match &result {
        Ok(r) => r.load.stopped_early,
        Err(_) => stop.load(std::sync::atomic::Ordering::Relaxed),
    };
    if stopped {
        feed.event(&Event::Note(&format!(
            "run of {:?} (repeat {}) stopped by a signal: not stored",
            t.variant, t.repeat
        )));
        return Ok(None);
    }
    let report = result.map_err(TrialError::Run)?;
    let id = match store {
        Some((store, sweep)) => {
            let in_sweep = InSweep { sweep, variant: t.variant, repeat: t.repeat };
            let id = store_bench(store, t.opts, &report, Some(in_sweep), t.label, &provenance)
                .map_err(TrialError::Store)?;
            feed.event(&Event::Stored { id, throughput_rps: report.load.throughput_rps });
            Some(id)
        }
        None => None,
    };
    Ok(Some((report, id)))
}
