//! A run's measurements as they travel between machines: [`RunPart`] is a [`RunResult`] with
//! its histograms as HdrHistogram V2 (deflate, base64) and its times in plain numbers, so a
//! load agent can send what it measured and a coordinator can add the parts of several agents
//! into one result exactly ([`merge_parts`]): counts add, histograms add bucket by bucket,
//! per-second rows add by second. Nothing is averaged.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::report::encode_histogram;
use crate::stats::{Recorder, TargetCounts};
use crate::{hlog, CpuTime, Interval, RunResult, Setup};

/// A [`Recorder`] on the wire.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecorderPart {
    pub sent: u64,
    pub completed: u64,
    pub ok: u64,
    pub failed: u64,
    pub errors: [u64; crate::stats::CLASSES],
    pub examples: [Option<String>; crate::stats::CLASSES],
    /// (status code, count), non-zero only.
    pub status: Vec<(u16, u64)>,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub connects: u64,
    pub reconnects: u64,
    pub retried: u64,
    pub race_retried: u64,
    pub race_closes: u64,
    pub waited_for_connection: u64,
    pub latency: String,
    pub latency_uncorrected: String,
    pub send_lag: String,
    pub connect_latency: String,
    pub tls_full: u64,
    pub tls_resumed: u64,
    #[serde(default)]
    pub tls_negotiated: Option<String>,
    pub handshake_latency: String,
    /// (completed, ok, failed) per target.
    pub per_target: Vec<(u64, u64, u64)>,
}

/// One per-second row on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct IntervalPart {
    pub elapsed_s: f64,
    pub sent: u64,
    pub completed: u64,
    pub failed: u64,
}

/// The connect phase on the wire.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SetupPart {
    pub connections: usize,
    pub opened: usize,
    pub failed: usize,
    pub closed_by_server: usize,
    pub duration_s: f64,
    pub example: Option<String>,
}

/// A [`RunResult`] on the wire.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunPart {
    pub rec: RecorderPart,
    pub in_flight_at_stop: u64,
    pub duration_s: f64,
    pub cpu_user_s: f64,
    pub cpu_sys_s: f64,
    pub polled_s: f64,
    /// Unix time of the run's start, in nanoseconds.
    /// Nanoseconds since the Unix epoch (u64: until the year 2554; JSON inside a tagged
    /// message cannot carry a u128).
    pub started_at_ns: u64,
    pub intervals: Vec<IntervalPart>,
    pub stopped_early: bool,
    pub due_unsent: u64,
    pub idle_at_stop: usize,
    pub in_flight_by_target: Vec<u64>,
    pub setup: Option<SetupPart>,
    #[serde(default)]
    pub throttling: Option<qpslab_sys::cgroup::Throttling>,
}

/// Why a part could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a run part's {what} histogram is not readable: {reason}")]
pub struct PartError {
    pub what: &'static str,
    pub reason: String,
}

impl RunPart {
    pub fn of(r: &RunResult) -> RunPart {
        let rec = &r.rec;
        RunPart {
            rec: RecorderPart {
                sent: rec.sent,
                completed: rec.completed,
                ok: rec.ok,
                failed: rec.failed,
                errors: rec.errors,
                examples: rec.examples.clone(),
                status: rec.statuses().collect(),
                bytes_read: rec.bytes_read,
                bytes_written: rec.bytes_written,
                connects: rec.connects,
                reconnects: rec.reconnects,
                retried: rec.retried,
                race_retried: rec.race_retried,
                race_closes: rec.race_closes,
                waited_for_connection: rec.waited_for_connection,
                latency: encode_histogram(&rec.latency),
                latency_uncorrected: encode_histogram(&rec.latency_uncorrected),
                send_lag: encode_histogram(&rec.send_lag),
                connect_latency: encode_histogram(&rec.connect_latency),
                tls_full: rec.tls_full,
                tls_resumed: rec.tls_resumed,
                tls_negotiated: rec.tls_negotiated.clone(),
                handshake_latency: encode_histogram(&rec.handshake_latency),
                per_target: rec.per_target.iter().map(|t| (t.completed, t.ok, t.failed)).collect(),
            },
            in_flight_at_stop: r.in_flight_at_stop,
            duration_s: r.duration.as_secs_f64(),
            cpu_user_s: r.cpu.user.as_secs_f64(),
            cpu_sys_s: r.cpu.sys.as_secs_f64(),
            polled_s: r.polled.as_secs_f64(),
            started_at_ns: r
                .started_at
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            intervals: r
                .intervals
                .iter()
                .map(|i| IntervalPart {
                    elapsed_s: i.elapsed_s,
                    sent: i.sent,
                    completed: i.completed,
                    failed: i.failed,
                })
                .collect(),
            stopped_early: r.stopped_early,
            due_unsent: r.due_unsent,
            idle_at_stop: r.idle_at_stop,
            in_flight_by_target: r.in_flight_by_target.clone(),
            setup: r.setup.as_ref().map(|s| SetupPart {
                connections: s.connections,
                opened: s.opened,
                failed: s.failed,
                closed_by_server: s.closed_by_server,
                duration_s: s.duration.as_secs_f64(),
                example: s.example.clone(),
            }),
            throttling: r.throttling.clone(),
        }
    }

    /// The result again (the port budget, a local matter, is not carried).
    pub fn to_result(&self) -> Result<RunResult, PartError> {
        let p = &self.rec;
        let hist = |what: &'static str, b64: &str| {
            hlog::decode(b64).map_err(|reason| PartError { what, reason })
        };
        let mut rec = Recorder {
            sent: p.sent,
            completed: p.completed,
            ok: p.ok,
            failed: p.failed,
            errors: p.errors,
            examples: p.examples.clone(),
            bytes_read: p.bytes_read,
            bytes_written: p.bytes_written,
            connects: p.connects,
            reconnects: p.reconnects,
            retried: p.retried,
            race_retried: p.race_retried,
            race_closes: p.race_closes,
            waited_for_connection: p.waited_for_connection,
            tls_full: p.tls_full,
            tls_resumed: p.tls_resumed,
            tls_negotiated: p.tls_negotiated.clone(),
            per_target: p
                .per_target
                .iter()
                .map(|&(completed, ok, failed)| TargetCounts { completed, ok, failed })
                .collect(),
            ..Recorder::default()
        };
        // Into the engine's own histograms, so later merges add like for like.
        let _ = rec.latency.add(hist("latency", &p.latency)?);
        let _ = rec.latency_uncorrected.add(hist("uncorrected latency", &p.latency_uncorrected)?);
        let _ = rec.send_lag.add(hist("send lag", &p.send_lag)?);
        let _ = rec.connect_latency.add(hist("connect latency", &p.connect_latency)?);
        let _ = rec.handshake_latency.add(hist("handshake latency", &p.handshake_latency)?);
        for &(code, n) in &p.status {
            if let Some(slot) = rec.status.get_mut(usize::from(code)) {
                *slot += n;
            }
        }
        let secs = |s: f64| Duration::from_secs_f64(s.max(0.0));
        Ok(RunResult {
            rec,
            in_flight_at_stop: self.in_flight_at_stop,
            duration: secs(self.duration_s),
            cpu: CpuTime { user: secs(self.cpu_user_s), sys: secs(self.cpu_sys_s) },
            polled: secs(self.polled_s),
            started_at: SystemTime::UNIX_EPOCH + Duration::from_nanos(self.started_at_ns),
            intervals: self
                .intervals
                .iter()
                .map(|i| Interval {
                    elapsed_s: i.elapsed_s,
                    sent: i.sent,
                    completed: i.completed,
                    failed: i.failed,
                })
                .collect(),
            stopped_early: self.stopped_early,
            due_unsent: self.due_unsent,
            idle_at_stop: self.idle_at_stop,
            in_flight_by_target: self.in_flight_by_target.clone(),
            log_error: None,
            port_budget: None,
            setup: self.setup.as_ref().map(|s| Setup {
                connections: s.connections,
                opened: s.opened,
                failed: s.failed,
                closed_by_server: s.closed_by_server,
                duration: secs(s.duration_s),
                example: s.example.clone(),
            }),
            throttling: self.throttling.clone(),
        })
    }
}

/// An agent's cumulative (sent, completed, failed) at `t` seconds into its window: on the
/// straight line between its own rows around `t` (from zero at the start), its final counts
/// from its end on.
fn counts_at(p: &RunResult, t: f64) -> [f64; 3] {
    let fin = (p.duration.as_secs_f64(), [p.rec.sent, p.rec.completed, p.rec.failed]);
    let rows = p.intervals.iter().map(|i| (i.elapsed_s, [i.sent, i.completed, i.failed]));
    let mut prev = (0.0, [0.0; 3]);
    for (at, c) in rows.chain(std::iter::once(fin)) {
        let c = c.map(|x| x as f64);
        if at <= prev.0 {
            continue;
        }
        if t <= at {
            let f = (t - prev.0) / (at - prev.0);
            let from = prev.1;
            return std::array::from_fn(|k| from[k] + f * (c[k] - from[k]));
        }
        prev = (at, c);
    }
    prev.1
}

/// Adds the results of several agents that ran the same load together: counts and histograms
/// add; the run lasts as long as the longest agent's window; the per-second rows are the
/// agents' counts read at the same whole seconds, added.
pub fn merge_parts(parts: &[RunResult]) -> RunResult {
    let mut rec = Recorder::default();
    let mut cpu = CpuTime::default();
    let mut out = RunResult {
        rec: Recorder::default(),
        in_flight_at_stop: 0,
        duration: Duration::ZERO,
        cpu,
        polled: Duration::ZERO,
        started_at: parts.iter().map(|p| p.started_at).min().unwrap_or(SystemTime::UNIX_EPOCH),
        intervals: Vec::new(),
        stopped_early: false,
        due_unsent: 0,
        idle_at_stop: 0,
        in_flight_by_target: Vec::new(),
        log_error: None,
        port_budget: None,
        setup: None,
        throttling: None,
    };
    for p in parts {
        rec.merge(&p.rec);
        // The agent a quota held back most speaks for the merged run.
        if p.throttling
            .as_ref()
            .is_some_and(|t| out.throttling.as_ref().is_none_or(|o| t.share() > o.share()))
        {
            out.throttling.clone_from(&p.throttling);
        }
        cpu = cpu + p.cpu;
        out.polled += p.polled;
        out.in_flight_at_stop += p.in_flight_at_stop;
        out.due_unsent += p.due_unsent;
        out.idle_at_stop += p.idle_at_stop;
        out.stopped_early |= p.stopped_early;
        // Agents start together (within the skew the coordinator reports) on machines whose
        // wall clocks may differ by far more: the window is the longest agent's.
        out.duration = out.duration.max(p.duration);
        if out.in_flight_by_target.len() < p.in_flight_by_target.len() {
            out.in_flight_by_target.resize(p.in_flight_by_target.len(), 0);
        }
        for (a, b) in out.in_flight_by_target.iter_mut().zip(&p.in_flight_by_target) {
            *a += b;
        }
        if let Some(s) = &p.setup {
            let m = out.setup.get_or_insert_with(Setup::default);
            m.connections += s.connections;
            m.opened += s.opened;
            m.failed += s.failed;
            m.closed_by_server += s.closed_by_server;
            m.duration = m.duration.max(s.duration);
            if m.example.is_none() {
                m.example.clone_from(&s.example);
            }
        }
    }
    // The rows: every agent's cumulative counts read at the same whole seconds of the common
    // clock, so that a row adds counts of one instant (each agent takes its own rows about a
    // second apart, a few milliseconds off the second; adding those as they are made a
    // steady 6000/s read 2% high in one second and low in the next). The end is a row of its
    // own with the exact totals.
    let end = out.duration.as_secs_f64();
    let mut t = 1.0;
    while t < end - 0.1 {
        let mut sum = [0.0; 3];
        for p in parts {
            for (s, c) in sum.iter_mut().zip(counts_at(p, t)) {
                *s += c;
            }
        }
        // Rounding a sum of rising lines keeps the rows rising.
        let [sent, completed, failed] = sum.map(|x| x.round() as u64);
        out.intervals.push(Interval { elapsed_s: t, sent, completed, failed });
        t += 1.0;
    }
    if end > 0.0 {
        out.intervals.push(Interval {
            elapsed_s: end,
            sent: rec.sent,
            completed: rec.completed,
            failed: rec.failed,
        });
    }
    out.rec = rec;
    out.cpu = cpu;
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;
    use crate::stats::ErrorClass;

    fn result(sent: u64, latencies: &[u64], start_s: u64) -> RunResult {
        let mut rec = Recorder::new(1, false);
        rec.sent = sent;
        for &l in latencies {
            rec.response(200, true, l);
            rec.target_response(0, true);
        }
        rec.failure(ErrorClass::Timeout, sent - latencies.len() as u64, || "late".into());
        RunResult {
            rec,
            in_flight_at_stop: 0,
            duration: Duration::from_secs(2),
            cpu: CpuTime { user: Duration::from_millis(100), sys: Duration::from_millis(300) },
            polled: Duration::ZERO,
            started_at: SystemTime::UNIX_EPOCH + Duration::from_secs(start_s),
            intervals: vec![
                Interval { elapsed_s: 1.0, sent: sent / 2, completed: 1, failed: 0 },
                Interval { elapsed_s: 2.0, sent, completed: latencies.len() as u64, failed: 1 },
            ],
            stopped_early: false,
            due_unsent: 0,
            idle_at_stop: 0,
            in_flight_by_target: vec![0],
            log_error: None,
            port_budget: None,
            setup: None,
            throttling: None,
        }
    }

    #[test]
    fn a_part_travels_whole_and_parts_add_exactly() {
        let a = result(4, &[100, 200, 300], 1000);
        let back = RunPart::of(&a).to_result().unwrap();
        assert_eq!(RunPart::of(&back), RunPart::of(&a), "nothing lost on the way");
        let json = serde_json::to_string(&RunPart::of(&a)).unwrap();
        let parsed: RunPart = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed, RunPart::of(&a));

        let b = result(3, &[1000, 2000], 1000);
        let m = merge_parts(&[back, b]);
        assert_eq!((m.rec.sent, m.rec.completed, m.rec.failed), (7, 5, 2));
        assert_eq!(m.rec.errors[ErrorClass::Timeout as usize], 2);
        assert_eq!(m.rec.latency.len(), 5);
        assert_eq!(m.rec.latency.max(), m.rec.latency.highest_equivalent(2000));
        assert_eq!(m.rec.statuses().collect::<Vec<_>>(), vec![(200, 5)]);
        assert_eq!(m.rec.per_target[0].completed, 5);
        assert_eq!(m.cpu.total(), Duration::from_millis(800));
        assert_eq!(m.intervals[1].completed, 5);
        assert_eq!(m.duration, Duration::from_secs(2));
    }

    #[test]
    fn an_agent_short_of_rows_counts_whole_in_the_later_seconds() {
        let a = result(4, &[100, 200, 300], 1000);
        let mut b = result(3, &[1000, 2000], 1000);
        // Its second row was never taken, and it ended half a second later.
        b.intervals.truncate(1);
        b.duration = Duration::from_millis(2500);
        let m = merge_parts(&[a, b]);
        let rows: Vec<(f64, u64)> =
            m.intervals.iter().map(|i| (i.elapsed_s, i.completed)).collect();
        assert_eq!(rows, [(1.0, 2), (2.0, 5), (2.5, 5)]);
        assert_eq!(m.duration, Duration::from_millis(2500));
    }

    /// Two agents at a steady 1000/s each, one taking its rows 50 ms early and the other 50 ms
    /// late: added as taken, the first second read 2000 in 1.05 s (5% low); read at the same
    /// instants, every second holds 2000.
    #[test]
    fn rows_add_the_agents_counts_at_the_same_instants() {
        let steady = |offset: f64| {
            let mut r = result(0, &[], 1000);
            r.rec.sent = 3000;
            r.rec.completed = 3000;
            r.rec.failed = 0;
            r.duration = Duration::from_secs(3);
            r.intervals = (1..=2)
                .map(|k| {
                    let at = k as f64 + offset;
                    let n = (at * 1000.0) as u64;
                    Interval { elapsed_s: at, sent: n, completed: n, failed: 0 }
                })
                .collect();
            r
        };
        let m = merge_parts(&[steady(-0.05), steady(0.05)]);
        let rows: Vec<(f64, u64)> =
            m.intervals.iter().map(|i| (i.elapsed_s, i.completed)).collect();
        assert_eq!(rows, [(1.0, 2000), (2.0, 4000), (3.0, 6000)]);
    }
}
