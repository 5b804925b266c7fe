//! Waiting for a target to finish the work a run left it before the next run starts.
//!
//! A run against an application that queues ends with requests still queued: the load's
//! connections close, but the application answers every request it holds (nginx logs them as
//! 499), and a run started at once measures that backlog (12 req/s instead of 61, with a
//! 1.6 s max, against a Flask app behind nginx). So a bench probes its target, one request at
//! a time, before its run and after it, until a probe answers in the target's normal time:
//! within [`SETTLED`] of the fastest probe and [`SETTLED_MS`], after at least two probes. A
//! probe waits behind whatever is queued, so the first one's time is the backlog's; on an idle
//! target two probes cost two round trips.
//!
//! The probe is the load engine's own single request (`-n 1 -c 1`): every protocol, TLS and
//! socket the run uses, with no client of its own.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use qpslab_load::{LoadConfig, LoadOptions};
use serde::{Deserialize, Serialize};

/// A probe within this factor of the fastest (and [`SETTLED_MS`] of it) is the target's normal
/// time.
const SETTLED: f64 = 1.5;
const SETTLED_MS: f64 = 2.0;
/// Probes after which a target whose times never settle is left as it is.
const MAX_PROBES: u32 = 50;
/// A wait shorter than this is a round trip, not a backlog: not said.
pub const NOTABLE: Duration = Duration::from_millis(200);

/// What probing the target found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Drain {
    /// Probes sent.
    pub probes: u32,
    /// From the first probe to the answer of the one that settled.
    pub waited_s: f64,
    /// The first probe's time and the settled one's, in ms.
    pub first_ms: f64,
    pub settled_ms: f64,
    /// A probe answered in the target's normal time before the bound.
    pub drained: bool,
    /// Why probing stopped short (a probe failed, the bound passed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Drain {
    /// Worth saying: the wait was a backlog's, or the target did not drain.
    pub fn notable(&self) -> bool {
        !self.drained || self.waited_s >= NOTABLE.as_secs_f64()
    }
}

/// Probes the target of `load` (its URL, protocol and request) until it answers in its normal
/// time, for at most `bound`, or until `stop` is set.
pub fn drain(load: &LoadOptions, bound: Duration, stop: &AtomicBool) -> Drain {
    let started = Instant::now();
    let mut out = Drain {
        probes: 0,
        waited_s: 0.0,
        first_ms: 0.0,
        settled_ms: 0.0,
        drained: false,
        note: None,
    };
    let mut fastest = f64::INFINITY;
    while out.probes < MAX_PROBES && !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let left = bound.saturating_sub(started.elapsed());
        if left.is_zero() {
            out.note = Some(format!("no probe answered in its normal time within {bound:?}"));
            break;
        }
        let ms = match probe(load, left, stop) {
            Ok(ms) => ms,
            Err(why) => {
                out.note = Some(why);
                break;
            }
        };
        out.probes += 1;
        if out.probes == 1 {
            out.first_ms = ms;
        }
        fastest = fastest.min(ms);
        out.settled_ms = ms;
        out.waited_s = started.elapsed().as_secs_f64();
        if out.probes >= 2 && ms <= (fastest * SETTLED).max(fastest + SETTLED_MS) {
            out.drained = true;
            break;
        }
    }
    out
}

/// One request to the target, as the run makes it; its time in ms.
fn probe(load: &LoadOptions, timeout: Duration, stop: &AtomicBool) -> Result<f64, String> {
    let o = LoadOptions {
        threads: Some(1),
        connections: Some(1),
        requests: Some(1),
        duration: None,
        warmup: Some(Duration::ZERO),
        rate: None,
        ramp: None,
        stages: None,
        schedule: None,
        lane: None,
        pipeline: 1,
        conn_per_request: false,
        rst_close: false,
        streams: 1,
        log: None,
        cpus: None,
        thresholds: Vec::new(),
        max_error_rate: 1.0,
        timeout,
        connect_timeout: Some(timeout.min(Duration::from_secs(2))),
        poll: qpslab_load::config::PollMode::Sleep,
        // The target's own URL: a pool is not read again for one request.
        urls_file: None,
        body_lines: None,
        targets: None,
        ..load.clone()
    };
    let cfg = LoadConfig::from_options(&o).map_err(|e| format!("the probe: {e}"))?;
    let result = qpslab_load::run(&cfg, stop, &mut qpslab_load::feed::Unwatched)
        .map_err(|e| format!("the probe: {e}"))?;
    if result.rec.completed == 0 {
        let why = result.rec.examples.iter().flatten().next().cloned();
        return Err(format!("a probe got no answer ({})", why.unwrap_or_else(|| "none".into())));
    }
    Ok(result.rec.latency.max() as f64 / 1e3)
}
