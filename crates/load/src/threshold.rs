//! Pass/fail checks on a finished run (`--threshold`): `p99<2ms`, `p99.9<=10ms`, `mean<1ms`,
//! `rps>50000`, `errors<0.1%` (a share of the requests sent), `errors<10` (a count),
//! `gen-busy<0.9` (the generator's busy share); gRPC calls ending with a status code
//! (`grpc-status:14<10`, `grpc-status:UNAVAILABLE<0.1%`, a count or a share of the calls); over HTTP/3, `lost-packets<10` (QUIC packets
//! declared lost, a count) and `packet-loss<0.1%` (their share of the datagrams sent). Percentiles come from the run's exact latency
//! histogram, not from the rounded figures of the summary.

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::units::fmt_us;

/// One check, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    /// As the user wrote it, spaces removed.
    pub expr: String,
    metric: Metric,
    op: Op,
    /// In the metric's own unit: microseconds, requests/s, a share 0-1, a count.
    limit: f64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Metric {
    /// `pN`: the latency at percentile N (0-100].
    Percentile(f64),
    Mean,
    Max,
    Rps,
    /// Failed requests and bad statuses over requests sent.
    ErrorRate,
    /// Failed requests and bad statuses.
    Errors,
    GenBusy,
    /// HTTP/3: QUIC packets declared lost (and sent again), a count.
    LostPackets,
    /// HTTP/3: lost packets over the datagrams sent.
    PacketLoss,
    /// gRPC: calls that ended with this status code, a count.
    GrpcStatus(u32),
    /// gRPC: their share of the calls answered.
    GrpcStatusRate(u32),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Lt,
    Le,
    Gt,
    Ge,
}

/// What a threshold is checked against: the run's figures.
#[derive(Debug)]
pub struct Facts<'a> {
    pub latency: &'a Histogram<u64>,
    pub rps: f64,
    pub sent: u64,
    /// Failed requests and bad statuses.
    pub errors: u64,
    pub gen_busy: f64,
    /// HTTP/3: QUIC packets declared lost, and the datagrams sent.
    pub quic: Option<(u64, u64)>,
    /// gRPC: the calls by how they ended.
    pub grpc: Option<&'a crate::stats::GrpcCounts>,
}

/// A threshold checked: in the report's JSON and its text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub threshold: String,
    pub passed: bool,
    /// What was measured, in the metric's unit (`unit`).
    pub value: f64,
    pub unit: &'static str,
    /// The metric and its value as the text shows them: `p99 3.10ms`.
    pub shown: String,
}

impl Outcome {
    /// `threshold p99<2ms: failed, p99 3.10ms`.
    pub fn line(&self) -> String {
        format!("threshold {}", self.verdict())
    }

    /// `p99<2ms: failed, p99 3.10ms`.
    pub fn verdict(&self) -> String {
        let verdict = if self.passed { "passed" } else { "failed" };
        format!("{}: {verdict}, {}", self.threshold, self.shown)
    }
}

const FORMS: &str = "pN<TIME (p99<2ms, p99.9<10ms), mean<TIME, max<TIME, rps>N, errors<P% or \
                     errors<N, gen-busy<R, with --grpc grpc-status:CODE<N or <P% (CODE a number or a \
                     name: 14, UNAVAILABLE), and with --h3 lost-packets<N or packet-loss<P% (TIME \
                     in us, ms or s; <, <=, > or >=)";

impl Threshold {
    /// Parses `expr`; an error names it, says what is wrong and gives the forms there are.
    pub fn parse(expr: &str) -> Result<Threshold, String> {
        let text: String = expr.chars().filter(|c| !c.is_whitespace()).collect();
        let bad = |why: &str| format!("{expr:?}: {why}; the forms are {FORMS}");
        let at = text.find(['<', '>']).ok_or_else(|| bad("no comparison (<, <=, > or >=)"))?;
        let (name, rest) = text.split_at(at);
        let (op, value) = match rest.as_bytes() {
            [b'<', b'=', ..] => (Op::Le, &rest[2..]),
            [b'>', b'=', ..] => (Op::Ge, &rest[2..]),
            [b'<', ..] => (Op::Lt, &rest[1..]),
            _ => (Op::Gt, &rest[1..]),
        };
        let metric = match name.to_ascii_lowercase().as_str() {
            "mean" => Metric::Mean,
            "max" => Metric::Max,
            "rps" => Metric::Rps,
            "errors" if value.ends_with('%') => Metric::ErrorRate,
            "errors" => Metric::Errors,
            "gen-busy" => Metric::GenBusy,
            "lost-packets" => Metric::LostPackets,
            "packet-loss" if value.ends_with('%') => Metric::PacketLoss,
            "packet-loss" => return Err(bad("packet-loss is a share: give it in %, e.g. 0.1%")),
            g if g.starts_with("grpc-status:") => {
                let code = &name["grpc-status:".len()..];
                match qpslab_http::grpc::code_of(code) {
                    Some(c) if value.ends_with('%') => Metric::GrpcStatusRate(c),
                    Some(c) => Metric::GrpcStatus(c),
                    None => {
                        return Err(bad(&format!(
                            "{code:?} is not a gRPC status code: give a number or a name \
                             (OK, UNAVAILABLE, RESOURCE_EXHAUSTED, ...)"
                        )))
                    }
                }
            }
            p if p.starts_with('p') => match p[1..].parse::<f64>() {
                Ok(q) if q > 0.0 && q <= 100.0 => Metric::Percentile(q),
                _ => return Err(bad(&format!("{name}: a percentile is p followed by 0-100"))),
            },
            "" => return Err(bad("no metric before the comparison")),
            _ => return Err(bad(&format!("unknown metric {name:?}"))),
        };
        let limit = match metric {
            Metric::Percentile(_) | Metric::Mean | Metric::Max => time_us(value),
            Metric::ErrorRate | Metric::PacketLoss | Metric::GrpcStatusRate(_) => {
                number(&value[..value.len() - 1]).map(|p| p / 100.0)
            }
            Metric::Rps => rate(value),
            Metric::Errors | Metric::GenBusy | Metric::LostPackets | Metric::GrpcStatus(_) => {
                number(value)
            }
        }
        .map_err(|why| bad(&why))?;
        Ok(Threshold { expr: text, metric, op, limit })
    }

    /// Whether this threshold is on the error count or share (which then replaces
    /// `--max-error-rate`).
    pub fn on_errors(&self) -> bool {
        matches!(self.metric, Metric::ErrorRate | Metric::Errors)
    }

    /// Whether this threshold is on a figure only gRPC runs have.
    pub fn on_grpc(&self) -> bool {
        matches!(self.metric, Metric::GrpcStatus(_) | Metric::GrpcStatusRate(_))
    }

    /// Whether this threshold is on a figure only HTTP/3 runs have.
    pub fn on_quic(&self) -> bool {
        matches!(self.metric, Metric::LostPackets | Metric::PacketLoss)
    }

    /// This threshold checked against a run's figures.
    pub fn check(&self, f: &Facts) -> Outcome {
        let share = |n: u64| if f.sent > 0 { n as f64 / f.sent as f64 } else { 0.0 };
        let (value, unit, shown) = match self.metric {
            Metric::Percentile(q) => {
                // 99.9 / 100 is 0.9990000000000001 in f64, one more sample than 0.999 asks
                // for among 1000: the quantile as its decimal would be written.
                let quantile = (q * 1e6).round() / 1e8;
                let v = f.latency.value_at_quantile(quantile) as f64;
                (v, "us", format!("p{} {}", fmt_q(q), fmt_us(v)))
            }
            Metric::Mean => (f.latency.mean(), "us", format!("mean {}", fmt_us(f.latency.mean()))),
            Metric::Max => {
                let v = f.latency.max() as f64;
                (v, "us", format!("max {}", fmt_us(v)))
            }
            Metric::Rps => (f.rps, "requests/s", format!("rps {:.0}", f.rps)),
            Metric::ErrorRate => {
                let v = share(f.errors);
                (v, "share", format!("errors {:.3}% ({} of {})", v * 100.0, f.errors, f.sent))
            }
            Metric::Errors => (f.errors as f64, "count", format!("errors {}", f.errors)),
            Metric::GenBusy => (f.gen_busy, "share", format!("gen-busy {:.2}", f.gen_busy)),
            Metric::LostPackets => {
                let lost = f.quic.map_or(0, |q| q.0);
                (lost as f64, "count", format!("lost-packets {lost}"))
            }
            Metric::PacketLoss => {
                let (lost, out) = f.quic.unwrap_or((0, 0));
                let v = if out > 0 { lost as f64 / out as f64 } else { 0.0 };
                (v, "share", format!("packet-loss {:.3}% ({lost} of {out})", v * 100.0))
            }
            Metric::GrpcStatus(c) | Metric::GrpcStatusRate(c) => {
                let calls = f.grpc.map_or(0, |g| g.calls());
                let n = f.grpc.map_or(0, |g| g.with_code(c));
                let name = qpslab_http::grpc::code_name(c).map_or(c.to_string(), String::from);
                if matches!(self.metric, Metric::GrpcStatus(_)) {
                    (n as f64, "count", format!("grpc-status {name} {n}"))
                } else {
                    let v = if calls > 0 { n as f64 / calls as f64 } else { 0.0 };
                    (v, "share", format!("grpc-status {name} {:.3}% ({n} of {calls})", v * 100.0))
                }
            }
        };
        // No response: no latency to judge, so a latency threshold cannot pass; no QUIC, no
        // packet loss to judge.
        let measured = (!f.latency.is_empty() || !self.on_latency())
            && (f.quic.is_some() || !self.on_quic())
            && (f.grpc.is_some() || !self.on_grpc());
        let passed = measured
            && match self.op {
                Op::Lt => value < self.limit,
                Op::Le => value <= self.limit,
                Op::Gt => value > self.limit,
                Op::Ge => value >= self.limit,
            };
        let shown = match measured {
            true => shown,
            false if self.on_quic() => "not an HTTP/3 run: no QUIC packets to judge".into(),
            false if self.on_grpc() => "no gRPC call answered".into(),
            false => "no response to measure".into(),
        };
        Outcome { threshold: self.expr.clone(), passed, value, unit, shown }
    }

    fn on_latency(&self) -> bool {
        matches!(self.metric, Metric::Percentile(_) | Metric::Mean | Metric::Max)
    }
}

/// `99`, `99.9`, `99.99`.
fn fmt_q(q: f64) -> String {
    let s = format!("{q:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn number(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a number (0 or more)")),
    }
}

/// `50000`, `50k`, `1.2M`.
fn rate(s: &str) -> Result<f64, String> {
    let (digits, scale) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1e3),
        Some(b'M') => (&s[..s.len() - 1], 1e6),
        _ => (s, 1.0),
    };
    number(digits).map(|v| v * scale)
}

/// `2ms`, `500us`, `1.5s` in microseconds; a time needs its unit.
fn time_us(s: &str) -> Result<f64, String> {
    let split = s.find(|c: char| c.is_ascii_alphabetic() || c == 'µ').unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let scale = match unit {
        "us" | "µs" => 1.0,
        "ms" => 1e3,
        "s" => 1e6,
        "" => return Err(format!("{s:?} has no unit: give us, ms or s (e.g. {s}ms)")),
        _ => return Err(format!("unknown time unit {unit:?}: give us, ms or s")),
    };
    number(digits).map(|v| v * scale)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    fn facts(h: &Histogram<u64>) -> Facts<'_> {
        Facts {
            latency: h,
            rps: 51_000.0,
            sent: 10_000,
            errors: 12,
            gen_busy: 0.42,
            quic: None,
            grpc: None,
        }
    }

    #[test]
    fn grpc_status_codes_are_judged_by_count_or_share_of_the_calls() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        h.record(1000).unwrap();
        let mut g = crate::stats::GrpcCounts::default();
        for _ in 0..990 {
            g.call(qpslab_http::grpc::Outcome::Status(0));
        }
        for _ in 0..10 {
            g.call(qpslab_http::grpc::Outcome::Status(14));
        }
        let f = Facts { grpc: Some(&g), ..facts(&h) };
        let line = |e: &str, f: &Facts| Threshold::parse(e).unwrap().check(f).line();
        assert_eq!(
            line("grpc-status:14<10", &f),
            "threshold grpc-status:14<10: failed, grpc-status UNAVAILABLE 10"
        );
        assert_eq!(
            line("grpc-status:unavailable<=1%", &f),
            "threshold grpc-status:unavailable<=1%: passed, grpc-status UNAVAILABLE 1.000% (10 of 1000)"
        );
        assert_eq!(
            line("grpc-status:OK>=990", &f),
            "threshold grpc-status:OK>=990: passed, grpc-status OK 990"
        );
        assert_eq!(
            line("grpc-status:8<1", &facts(&h)),
            "threshold grpc-status:8<1: failed, no gRPC call answered"
        );
        let e = Threshold::parse("grpc-status:NOPE<1").unwrap_err();
        assert!(e.contains("\"NOPE\" is not a gRPC status code"), "{e}");
    }

    #[test]
    fn quic_losses_are_judged_on_http3_runs_only() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        h.record(1000).unwrap();
        let f = Facts { quic: Some((3, 20_000)), ..facts(&h) };
        let line = |e: &str, f: &Facts| Threshold::parse(e).unwrap().check(f).line();
        assert_eq!(
            line("lost-packets<10", &f),
            "threshold lost-packets<10: passed, lost-packets 3"
        );
        assert_eq!(
            line("packet-loss<0.01%", &f),
            "threshold packet-loss<0.01%: failed, packet-loss 0.015% (3 of 20000)"
        );
        assert_eq!(
            line("lost-packets<10", &facts(&h)),
            "threshold lost-packets<10: failed, not an HTTP/3 run: no QUIC packets to judge"
        );
        assert!(Threshold::parse("packet-loss<1").unwrap_err().contains("give it in %"));
        assert!(Threshold::parse("lost-packets<1").unwrap().on_quic());
    }

    #[test]
    fn each_form_is_checked_on_the_exact_figures() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        // 990 at 1ms, 9 at 3.1ms, 1 at 20ms: p99 = 1ms, p99.9 = 3.1ms, max 20ms.
        h.record_n(1000, 990).unwrap();
        h.record_n(3100, 9).unwrap();
        h.record(20_000).unwrap();
        let f = facts(&h);
        let lines: Vec<String> = [
            "p99<2ms",
            "p99.9 < 2ms",
            "p99.9<=3101us",
            "max<1s",
            "mean<1ms",
            "rps>50k",
            "rps>=0.06M",
            "errors<0.1%",
            "errors<0.2%",
            "errors<=12",
            "gen-busy<0.9",
            "P50>1ms",
        ]
        .iter()
        .map(|e| Threshold::parse(e).unwrap().check(&f).line())
        .collect();
        let h_mean = fmt_us(h.mean());
        assert_eq!(
            lines,
            [
                "threshold p99<2ms: passed, p99 1.00ms".to_string(),
                "threshold p99.9<2ms: failed, p99.9 3.10ms".into(),
                "threshold p99.9<=3101us: passed, p99.9 3.10ms".into(),
                "threshold max<1s: passed, max 20.02ms".into(),
                format!("threshold mean<1ms: failed, mean {h_mean}"),
                "threshold rps>50k: passed, rps 51000".into(),
                "threshold rps>=0.06M: failed, rps 51000".into(),
                "threshold errors<0.1%: failed, errors 0.120% (12 of 10000)".into(),
                "threshold errors<0.2%: passed, errors 0.120% (12 of 10000)".into(),
                "threshold errors<=12: passed, errors 12".into(),
                "threshold gen-busy<0.9: passed, gen-busy 0.42".into(),
                "threshold P50>1ms: failed, p50 1.00ms".into(),
            ]
        );
        // The same samples the summary's percentiles take.
        for (p, q) in
            [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999), ("p99.99", 0.9999)]
        {
            let o = Threshold::parse(&format!("{p}<1s")).unwrap().check(&f);
            assert_eq!(o.value, h.value_at_quantile(q) as f64, "{p}");
        }
        assert!(Threshold::parse("errors<1%").unwrap().on_errors());
        assert!(!Threshold::parse("p99<1ms").unwrap().on_errors());
    }

    #[test]
    fn a_latency_threshold_without_a_response_fails() {
        let h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        let o = Threshold::parse("p99<1s").unwrap().check(&facts(&h));
        assert_eq!(o.line(), "threshold p99<1s: failed, no response to measure");
        assert!(Threshold::parse("rps<1M").unwrap().check(&facts(&h)).passed);
    }

    #[test]
    fn malformed_ones_are_named_with_the_reason() {
        for (bad, says) in [
            ("p99", "no comparison"),
            ("<2ms", "no metric"),
            ("p99<2", "has no unit"),
            ("p99<2min", "unknown time unit \"min\""),
            ("p101<2ms", "p followed by 0-100"),
            ("px<2ms", "p followed by 0-100"),
            ("latency<2ms", "unknown metric \"latency\""),
            ("rps>fast", "\"fast\" is not a number"),
            ("errors<-1%", "\"-1\" is not a number"),
            ("gen-busy<", "\"\" is not a number"),
        ] {
            let e = Threshold::parse(bad).unwrap_err();
            assert!(e.starts_with(&format!("{bad:?}: ")), "{e}");
            assert!(e.contains(says), "{bad}: {e}");
            assert!(e.contains("the forms are pN<TIME"), "{e}");
        }
    }
}
