//! The board as Prometheus metrics: the text exposition format (`/metrics`) and remote write
//! 1.0 (a snappy-compressed protobuf `WriteRequest`), with Prometheus' own naming.
//!
//! Every series carries the run's labels: `run`, `target`, `agent`, and in a sweep `variant`
//! and `repeat`. Over agents the counters and gauges are per agent (`agent` = its host, so a
//! sum over `agent` is the run) and the histogram and the busy ratio are the merged run's
//! (`agent="all"`); a load here is `agent="local"`. The latency histogram is
//! the run's every complete second merged (the same histograms the page draws), so its count
//! is the responses of the run; bucket counts are exact to the histogram's three significant
//! digits, `_sum` is count x mean.

use std::fmt::Write as _;

use hdrhistogram::Histogram;
use qpslab_load::stats::ErrorClass;
use qpslab_load::Progress;

use crate::board::{self, View};

/// Classic histogram bounds, in seconds.
pub const BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Native histograms' schema: 2^3 = 8 buckets per power of two (each bound 9% above the
/// last).
pub const SCHEMA: i32 = 3;

/// One sample: a metric name, its labels (beyond the run's) and the value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(&'static str, String)>,
    pub value: f64,
}

/// A metric family as the text format declares it.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<Sample>,
}

fn sample(name: &str, labels: &[(&'static str, &str)], value: f64) -> Sample {
    Sample {
        name: name.into(),
        labels: labels.iter().map(|(k, v)| (*k, (*v).to_string())).collect(),
        value,
    }
}

/// The run's labels, in the order they are written (each sample adds its `agent`).
pub fn run_labels(b: &View) -> Vec<(&'static str, String)> {
    let mut l = vec![("run", b.info.run.clone()), ("target", b.info.target.clone())];
    if let Some((variant, repeat)) = &b.variant {
        l.push(("variant", variant.clone()));
        l.push(("repeat", repeat.to_string()));
    }
    l
}

/// The counters' parts: each agent of a load over agents (so summing over `agent` gives the
/// run), else the run itself (`agent="local"`).
fn parts(b: &View) -> Vec<(&str, &Progress)> {
    if b.agents.is_empty() {
        vec![(b.info.agent.as_str(), &b.progress)]
    } else {
        b.agents.iter().map(|(name, p)| (name.as_str(), p)).collect()
    }
}

fn families(b: &View) -> Vec<Family> {
    let parts = parts(b);
    let each = |f: &dyn Fn(&str, &Progress) -> Vec<Sample>| {
        parts.iter().flat_map(|(agent, p)| f(agent, p)).collect::<Vec<_>>()
    };
    let merged = b.info.agent.as_str();
    // A family of one value per part, labelled by its agent.
    let per_agent = |name: &'static str, kind, help, value: fn(&Progress) -> u64| Family {
        name,
        kind,
        help,
        samples: each(&|agent, p| vec![sample(name, &[("agent", agent)], value(p) as f64)]),
    };
    let mut out = vec![
        Family {
            name: "qpslab_requests_total",
            kind: "counter",
            help: "Requests that ended, by outcome (ok: status < 400 or accepted; failed: \
                   rejected status or no response).",
            samples: each(&|agent, p| {
                vec![
                    sample(
                        "qpslab_requests_total",
                        &[("agent", agent), ("outcome", "ok")],
                        p.ok as f64,
                    ),
                    sample(
                        "qpslab_requests_total",
                        &[("agent", agent), ("outcome", "failed")],
                        board::failed(p) as f64,
                    ),
                ]
            }),
        },
        per_agent("qpslab_requests_sent_total", "counter", "Requests written.", |p| p.sent),
        Family {
            name: "qpslab_errors_total",
            kind: "counter",
            help: "Requests that ended without a response, by error class.",
            samples: each(&|agent, p| {
                ErrorClass::ALL
                    .iter()
                    .zip(p.errors)
                    .map(|(c, n)| {
                        let labels = [("agent", agent), ("class", c.name())];
                        sample("qpslab_errors_total", &labels, n as f64)
                    })
                    .collect()
            }),
        },
        Family {
            name: "qpslab_request_duration_seconds",
            kind: "histogram",
            help: "Response latency (corrected for coordinated omission in open loop).",
            samples: classic(&b.whole, merged),
        },
        per_agent("qpslab_connections_open", "gauge", "Connections open now.", |p| p.open),
        per_agent(
            "qpslab_reconnects_total",
            "counter",
            "Connections opened again after a close or an error.",
            |p| p.reconnects,
        ),
    ];
    if parts.iter().any(|(_, p)| p.datagrams_in + p.datagrams_out > 0) {
        out.push(Family {
            name: "qpslab_quic_datagrams_total",
            kind: "counter",
            help: "HTTP/3: UDP datagrams the generator read (in) and sent (out).",
            samples: each(&|agent, p| {
                vec![
                    sample(
                        "qpslab_quic_datagrams_total",
                        &[("agent", agent), ("direction", "in")],
                        p.datagrams_in as f64,
                    ),
                    sample(
                        "qpslab_quic_datagrams_total",
                        &[("agent", agent), ("direction", "out")],
                        p.datagrams_out as f64,
                    ),
                ]
            }),
        });
        out.push(per_agent(
            "qpslab_quic_lost_packets_total",
            "counter",
            "HTTP/3: QUIC packets declared lost (and sent again).",
            |p| p.lost_packets,
        ));
    }
    if parts.iter().any(|(_, p)| p.grpc.iter().any(|n| *n > 0)) {
        out.push(Family {
            name: "qpslab_grpc_calls_total",
            kind: "counter",
            help: "gRPC calls that ended, by status code name (the server's grpc-status, or the \
                   code a gRPC client reports for an answer found wrong).",
            samples: each(&|agent, p| {
                qpslab_load::stats::GRPC_CODES
                    .iter()
                    .zip(p.grpc)
                    .map(|(code, n)| {
                        let labels = [("agent", agent), ("code", *code)];
                        sample("qpslab_grpc_calls_total", &labels, n as f64)
                    })
                    .collect()
            }),
        });
    }
    if let Some(busy) = b.busy {
        out.push(Family {
            name: "qpslab_generator_busy_ratio",
            kind: "gauge",
            help: "The generator's CPU time over the last second / (wall time x load threads).",
            samples: vec![sample("qpslab_generator_busy_ratio", &[("agent", merged)], busy)],
        });
    }
    out
}

/// The classic histogram's series: cumulative buckets, `+Inf`, sum and count.
pub fn classic(h: &Histogram<u64>, agent: &str) -> Vec<Sample> {
    let name = "qpslab_request_duration_seconds";
    let mut out: Vec<Sample> = BUCKETS
        .iter()
        .map(|le| {
            let us = (le * 1e6).round() as u64;
            let n = if h.is_empty() { 0 } else { h.count_between(0, us) };
            sample(
                &format!("{name}_bucket"),
                &[("agent", agent), ("le", &fmt_value(*le))],
                n as f64,
            )
        })
        .collect();
    out.push(sample(
        &format!("{name}_bucket"),
        &[("agent", agent), ("le", "+Inf")],
        h.len() as f64,
    ));
    out.push(sample(&format!("{name}_sum"), &[("agent", agent)], sum_seconds(h)));
    out.push(sample(&format!("{name}_count"), &[("agent", agent)], h.len() as f64));
    out
}

fn sum_seconds(h: &Histogram<u64>) -> f64 {
    if h.is_empty() {
        0.0
    } else {
        h.mean() * h.len() as f64 / 1e6
    }
}

/// Every sample of the board, each with the run's labels first.
pub fn samples(b: &View) -> Vec<Sample> {
    let run = run_labels(b);
    families(b)
        .into_iter()
        .flat_map(|f| f.samples)
        .map(|mut s| {
            let mut l = run.clone();
            l.append(&mut s.labels);
            s.labels = l;
            s
        })
        .collect()
}

/// The text exposition format (version 0.0.4).
pub fn text(b: &View) -> String {
    let run = run_labels(b);
    let mut o = String::new();
    for f in families(b) {
        let _ = writeln!(o, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(o, "# TYPE {} {}", f.name, f.kind);
        for s in f.samples {
            o.push_str(&s.name);
            o.push('{');
            for (i, (k, v)) in run.iter().chain(&s.labels).enumerate() {
                if i > 0 {
                    o.push(',');
                }
                let _ = write!(o, "{k}=\"{}\"", escape_label(v));
            }
            let _ = writeln!(o, "}} {}", fmt_value(s.value));
        }
    }
    o
}

/// Label values escape backslash, double quote and newline.
fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A float as Prometheus writes it: integers without a fraction, `+Inf`.
fn fmt_value(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// A native histogram of the latency: exponential buckets of [`SCHEMA`], counts per bucket,
/// in the spans-and-deltas form of remote write.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Native {
    pub count: u64,
    pub sum: f64,
    /// (offset, length) spans and the bucket counts' deltas.
    pub spans: Vec<(i32, u32)>,
    pub deltas: Vec<i64>,
}

/// The index of the schema-[`SCHEMA`] bucket holding `seconds`: bucket `i` holds
/// (2^((i-1)/8), 2^(i/8)].
pub fn native_index(seconds: f64) -> i32 {
    let scale = f64::from(1 << SCHEMA);
    let mut i = (seconds.log2() * scale).ceil() as i32;
    // log2 rounding: keep the bounds' sides exact.
    let upper = |i: i32| (f64::from(i) / scale).exp2();
    if seconds > upper(i) {
        i += 1;
    } else if i > i32::MIN && seconds <= upper(i - 1) {
        i -= 1;
    }
    i
}

/// The histogram's recorded values, bucketed natively.
pub fn native(h: &Histogram<u64>) -> Native {
    let mut buckets: std::collections::BTreeMap<i32, u64> = std::collections::BTreeMap::new();
    for v in h.iter_recorded() {
        let us = h.median_equivalent(v.value_iterated_to()).max(1);
        *buckets.entry(native_index(us as f64 / 1e6)).or_default() += v.count_at_value();
    }
    let mut n = Native { count: h.len(), sum: sum_seconds(h), ..Native::default() };
    let mut prev_index: Option<i32> = None;
    let mut prev_count = 0i64;
    for (&i, &c) in &buckets {
        match (prev_index, n.spans.last_mut()) {
            (Some(p), Some(span)) if i == p + 1 => span.1 += 1,
            (Some(p), _) => n.spans.push((i - p - 1, 1)),
            (None, _) => n.spans.push((i, 1)),
        }
        n.deltas.push(c as i64 - prev_count);
        prev_count = c as i64;
        prev_index = Some(i);
    }
    n
}

/// The remote write 1.0 messages, declared here (no protoc): field numbers as in
/// prometheus/prompb/types.proto and remote.proto.
pub mod wire {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct WriteRequest {
        #[prost(message, repeated, tag = "1")]
        pub timeseries: Vec<TimeSeries>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TimeSeries {
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<Label>,
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<Sample>,
        #[prost(message, repeated, tag = "4")]
        pub histograms: Vec<Histogram>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub value: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(double, tag = "1")]
        pub value: f64,
        #[prost(int64, tag = "2")]
        pub timestamp: i64,
    }

    /// The integer form: `count_int` and `zero_count_int` of their oneofs.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Histogram {
        #[prost(uint64, optional, tag = "1")]
        pub count_int: Option<u64>,
        #[prost(double, tag = "3")]
        pub sum: f64,
        #[prost(sint32, tag = "4")]
        pub schema: i32,
        #[prost(double, tag = "5")]
        pub zero_threshold: f64,
        #[prost(uint64, optional, tag = "6")]
        pub zero_count_int: Option<u64>,
        #[prost(message, repeated, tag = "11")]
        pub positive_spans: Vec<BucketSpan>,
        #[prost(sint64, repeated, tag = "12")]
        pub positive_deltas: Vec<i64>,
        #[prost(int32, tag = "14")]
        pub reset_hint: i32,
        #[prost(int64, tag = "15")]
        pub timestamp: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct BucketSpan {
        #[prost(sint32, tag = "1")]
        pub offset: i32,
        #[prost(uint32, tag = "2")]
        pub length: u32,
    }
}

/// The board at `ts_ms` as a remote write request: every sample, and with `native` the
/// latency also as one native histogram series (`qpslab_request_duration_seconds`, beside
/// the classic `_bucket`, `_sum` and `_count` series, as Prometheus keeps them).
pub fn write_request(b: &View, ts_ms: i64, with_native: bool) -> wire::WriteRequest {
    let labels = |name: &str, extra: &[(&'static str, String)]| {
        let mut l: Vec<wire::Label> = std::iter::once(("__name__", name.to_string()))
            .chain(extra.iter().cloned())
            .map(|(k, v)| wire::Label { name: k.into(), value: v })
            .collect();
        // Remote write wants labels sorted by name.
        l.sort_by(|a, b| a.name.cmp(&b.name));
        l
    };
    let mut series: Vec<wire::TimeSeries> = samples(b)
        .into_iter()
        .map(|s| wire::TimeSeries {
            labels: labels(&s.name, &s.labels),
            samples: vec![wire::Sample { value: s.value, timestamp: ts_ms }],
            histograms: Vec::new(),
        })
        .collect();
    if with_native {
        let n = native(&b.whole);
        let mut l = run_labels(b);
        l.push(("agent", b.info.agent.clone()));
        series.push(wire::TimeSeries {
            labels: labels("qpslab_request_duration_seconds", &l),
            samples: Vec::new(),
            histograms: vec![wire::Histogram {
                count_int: Some(n.count),
                sum: n.sum,
                schema: SCHEMA,
                zero_threshold: 0.0,
                zero_count_int: Some(0),
                positive_spans: n
                    .spans
                    .iter()
                    .map(|&(offset, length)| wire::BucketSpan { offset, length })
                    .collect(),
                positive_deltas: n.deltas,
                reset_hint: 0,
                timestamp: ts_ms,
            }],
        });
    }
    wire::WriteRequest { timeseries: series }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn native_bucket_bounds_are_upper_inclusive() {
        // 1 s is a bound: bucket 0 holds (2^-1/8, 1].
        assert_eq!(native_index(1.0), 0);
        assert_eq!(native_index(1.0001), 1);
        assert_eq!(native_index(2.0), 8);
        assert_eq!(native_index(0.5), -8);
        assert_eq!(native_index(0.500_001), -7);
    }

    proptest! {
        /// Every bucket's count comes back from the spans and deltas, and they add up to the
        /// histogram's count.
        #[test]
        fn native_spans_and_deltas_decode_to_the_counts(values in proptest::collection::vec(1u64..10_000_000, 1..300)) {
            let mut h = qpslab_load::stats::new_histogram();
            for v in &values {
                h.record(*v).unwrap();
            }
            let n = native(&h);
            let mut idx = 0i32;
            let mut count = 0i64;
            let mut total = 0u64;
            let mut di = 0;
            let mut decoded = Vec::new();
            for (k, &(offset, len)) in n.spans.iter().enumerate() {
                idx += offset + if k == 0 { 0 } else { 1 };
                for j in 0..len {
                    count += n.deltas[di];
                    di += 1;
                    prop_assert!(count > 0);
                    total += count as u64;
                    decoded.push(idx + j as i32);
                }
                idx += len as i32 - 1;
            }
            prop_assert_eq!(total, values.len() as u64);
            prop_assert_eq!(di, n.deltas.len());
            prop_assert!(decoded.windows(2).all(|w| w[0] < w[1]));
        }
    }
}
