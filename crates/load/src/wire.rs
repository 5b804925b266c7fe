//! A run's measurements as they travel between machines: a [`RunResult`] serializes itself
//! (serde), with its histograms as HdrHistogram V2 (deflate, base64, [`histogram`]) and its
//! statuses as (code, count) pairs ([`statuses`]), so a load agent can send what it measured
//! and a coordinator can add the results of several agents into one exactly
//! ([`merge_parts`]): counts add, histograms add bucket by bucket, per-second rows add by
//! second. Nothing is averaged.

use std::time::{Duration, SystemTime};

use crate::stats::Recorder;
use crate::{CpuTime, Interval, RunResult, Setup};

/// A latency histogram on the wire: HdrHistogram V2 (deflate, base64), read back into the
/// engine's own bounds so that later merges add like for like (values above them saturate).
pub(crate) mod histogram {
    use hdrhistogram::Histogram;
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(h: &Histogram<u64>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::report::encode_histogram(h))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Histogram<u64>, D::Error> {
        let b64 = String::deserialize(d)?;
        let read = crate::hlog::decode(&b64)
            .map_err(|reason| D::Error::custom(format!("a histogram is not readable: {reason}")))?;
        let mut h = crate::stats::new_histogram();
        crate::hlog::add(&mut h, &read).map_err(D::Error::custom)?;
        Ok(h)
    }
}

/// Several histograms on the wire, each as [`histogram`] writes one.
pub(crate) mod histograms {
    use hdrhistogram::Histogram;
    use serde::ser::SerializeSeq;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(v: &[Histogram<u64>], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(v.len()))?;
        for h in v {
            seq.serialize_element(&crate::report::encode_histogram(h))?;
        }
        seq.end()
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<Histogram<u64>>, D::Error> {
        use serde::de::{Error, IntoDeserializer};
        Vec::<String>::deserialize(d)?
            .into_iter()
            .map(|b64| {
                let d: serde::de::value::StringDeserializer<D::Error> = b64.into_deserializer();
                super::histogram::deserialize(d).map_err(D::Error::custom)
            })
            .collect()
    }
}

/// The status counts on the wire: (code, count) pairs, non-zero only, instead of a slot for
/// every code.
pub(crate) mod statuses {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    type Slots = Box<[u64; crate::stats::STATUS_SLOTS]>;

    pub(crate) fn serialize<S: Serializer>(slots: &Slots, s: S) -> Result<S::Ok, S::Error> {
        let pairs = slots.iter().enumerate().filter(|(_, &n)| n > 0);
        s.collect_seq(pairs.map(|(code, &n)| (code as u16, n)))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Slots, D::Error> {
        let mut slots = Box::new([0; crate::stats::STATUS_SLOTS]);
        for (code, n) in Vec::<(u16, u64)>::deserialize(d)? {
            let slot = slots
                .get_mut(usize::from(code))
                .ok_or_else(|| D::Error::custom(format!("status {code} is not an HTTP status")))?;
            *slot += n;
        }
        Ok(slots)
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

/// The stretches with no response that every agent saw, on the clock of the first to start:
/// each agent's are shifted by how much later it started (wall clocks; agents on machines
/// whose clocks disagree see fewer common stretches, never invented ones).
fn common_stalls(parts: &[RunResult], start: SystemTime) -> Vec<crate::stalls::Gap> {
    let shifted: Vec<Vec<crate::stalls::Gap>> = parts
        .iter()
        .filter(|p| p.rec.completed > 0)
        .map(|p| {
            let by = p.started_at.duration_since(start).unwrap_or_default().as_micros() as u64;
            let shift = |g: &crate::stalls::Gap| crate::stalls::Gap {
                begin_us: g.begin_us + by,
                end_us: g.end_us + by,
                held: g.held,
            };
            p.stalls.iter().map(shift).collect()
        })
        .collect();
    crate::stalls::common(shifted.iter().map(Vec::as_slice))
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
        lingered: Duration::ZERO,
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
        waiting: crate::Waiting::default(),
        stalls: Vec::new(),
    };
    out.stalls = common_stalls(parts, out.started_at);
    for p in parts {
        rec.merge(&p.rec);
        out.waiting.absorb(&p.waiting);
        // The agent a quota held back most speaks for the merged run.
        if p.throttling
            .as_ref()
            .is_some_and(|t| out.throttling.as_ref().is_none_or(|o| t.share() > o.share()))
        {
            out.throttling.clone_from(&p.throttling);
        }
        cpu = cpu + p.cpu;
        out.polled += p.polled;
        out.lingered += p.lingered;
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
        let mut rec = Recorder::new(1, 2, false);
        rec.sent = sent;
        for &l in latencies {
            rec.response(200, true, l);
            rec.target_response(0, true);
            rec.group_latency(1, l);
        }
        rec.failure(ErrorClass::Timeout, sent - latencies.len() as u64, || "late".into());
        RunResult {
            rec,
            in_flight_at_stop: 0,
            duration: Duration::from_secs(2),
            cpu: CpuTime { user: Duration::from_millis(100), sys: Duration::from_millis(300) },
            polled: Duration::ZERO,
            lingered: Duration::ZERO,
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
            waiting: crate::Waiting::default(),
            stalls: Vec::new(),
        }
    }

    #[test]
    fn a_part_travels_whole_and_parts_add_exactly() {
        let a = result(4, &[100, 200, 300], 1000);
        let json = serde_json::to_string(&a).unwrap();
        let back: RunResult = serde_json::from_str(&json).unwrap();
        assert_eq!(back, a, "nothing lost on the way");

        let b = result(3, &[1000, 2000], 1000);
        let m = merge_parts(&[back, b]);
        assert_eq!((m.rec.sent, m.rec.completed, m.rec.failed), (7, 5, 2));
        assert_eq!(m.rec.errors[ErrorClass::Timeout as usize], 2);
        assert_eq!(m.rec.latency.len(), 5);
        assert_eq!(m.rec.latency.max(), m.rec.latency.highest_equivalent(2000));
        assert_eq!(m.rec.statuses().collect::<Vec<_>>(), vec![(200, 5)]);
        assert_eq!(m.rec.per_target[0].completed, 5);
        assert_eq!((m.rec.per_group[0].len(), m.rec.per_group[1].len()), (0, 5), "a pool's groups");
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
