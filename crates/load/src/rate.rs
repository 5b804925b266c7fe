//! Open-loop schedules: a piecewise-linear rate in requests/s over time, from `--rate N`,
//! `--rate A:B --ramp DUR` or a stage file, with the two functions the pacer needs: how many
//! requests are due by a time (the integral of the rate) and its inverse, when request `k` is due.
//!
//! Does not keep time or grant requests: the pacer does.

use std::time::Duration;

use qpslab_sys::config_error::ConfigError;

/// One stretch of a schedule: the rate goes linearly from `start_rps` to `end_rps` over `dur`
/// (equal rates: constant).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Segment {
    pub dur: Duration,
    pub start_rps: f64,
    pub end_rps: f64,
}

impl Segment {
    /// Requests due within the segment's first `t` seconds.
    fn due_by(&self, t: f64) -> f64 {
        let (r0, r1, d) = (self.start_rps, self.end_rps, self.dur.as_secs_f64());
        r0 * t + (r1 - r0) * t * t / (2.0 * d)
    }

    /// Requests due over the whole segment.
    fn total(&self) -> f64 {
        (self.start_rps + self.end_rps) * self.dur.as_secs_f64() / 2.0
    }

    /// Seconds into the segment at which request `k` (counted from the segment's start) is due.
    fn time_of(&self, k: f64) -> f64 {
        let (r0, r1, d) = (self.start_rps, self.end_rps, self.dur.as_secs_f64());
        let a = (r1 - r0) / d;
        if a.abs() < 1e-9 {
            k / r0
        } else {
            // k = r0 t + a t^2 / 2, the root that is >= 0.
            (-r0 + (r0 * r0 + 2.0 * a * k).max(0.0).sqrt()) / a
        }
    }
}

/// A whole-run open-loop rate (all threads together): `segments` one after the other, then
/// `hold_rps` for as long as the run lasts.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(from = "RateWire", into = "RateWire")]
pub struct Rate {
    pub segments: Vec<Segment>,
    pub hold_rps: f64,
    /// Requests due before each segment (same length as `segments`).
    before: Vec<f64>,
}

/// A schedule as it travels (to a load agent): its segments and hold; the rest is derived.
#[derive(serde::Serialize, serde::Deserialize)]
struct RateWire {
    segments: Vec<Segment>,
    hold_rps: f64,
}

impl From<RateWire> for Rate {
    fn from(w: RateWire) -> Rate {
        Rate::new(w.segments, w.hold_rps)
    }
}

impl From<Rate> for RateWire {
    fn from(r: Rate) -> RateWire {
        RateWire { segments: r.segments, hold_rps: r.hold_rps }
    }
}

impl Rate {
    /// A schedule of `segments` then `hold_rps`.
    pub fn new(segments: Vec<Segment>, hold_rps: f64) -> Self {
        let mut before = Vec::with_capacity(segments.len());
        let mut sum = 0.0;
        for s in &segments {
            before.push(sum);
            sum += s.total();
        }
        Self { segments, hold_rps, before }
    }

    /// A constant rate.
    pub fn constant(rps: f64) -> Self {
        Self::new(Vec::new(), rps)
    }

    /// Parses `--rate N` or `--rate A:B` with `--ramp DUR`.
    /// The open-loop schedule of `--rate N|A:B` (with `--ramp`) or `--stages FILE`; None for
    /// closed loop.
    pub fn from_options(
        rate: Option<&str>,
        ramp: Option<Duration>,
        stages: Option<&crate::file_text::FileText>,
    ) -> Result<Option<Rate>, ConfigError> {
        match (rate, ramp, stages) {
            (Some(_), _, Some(_)) => Err(ConfigError::new(
                "--stages",
                "gives the rate itself; drop --rate (or drop --stages)",
            )),
            (None, Some(_), Some(_)) => {
                Err(ConfigError::new("--ramp", "a stage file has its own ramps; drop --ramp"))
            }
            (Some(r), ramp, None) => Rate::parse(r, ramp).map(Some),
            (None, None, Some(file)) => Rate::from_stage_file(file).map(Some),
            (None, Some(_), None) => Err(ConfigError::new(
                "--ramp",
                "needs --rate A:B, e.g. --rate 1000:50000 --ramp 30s",
            )),
            (None, None, None) => Ok(None),
        }
    }

    pub fn parse(text: &str, ramp: Option<Duration>) -> Result<Rate, ConfigError> {
        let number = |s: &str| positive(s, "--rate", "e.g. 5000 or 1000:50000");
        match (text.split_once(':'), ramp) {
            (None, None) => Ok(Rate::constant(number(text)?)),
            (None, Some(_)) => Err(ConfigError::new(
                "--ramp",
                "needs a rate range to ramp over, e.g. --rate 1000:50000 --ramp 30s",
            )),
            (Some(_), None) => Err(ConfigError::new(
                "--rate",
                format!("{text:?} is a range: give --ramp DUR, the time to go from one rate to the other"),
            )),
            (Some(_), Some(d)) if d.is_zero() => {
                Err(ConfigError::new("--ramp", "must be greater than zero, e.g. 30s"))
            }
            (Some((a, b)), Some(dur)) => {
                let (start_rps, end_rps) = (number(a)?, number(b)?);
                Ok(Rate::new(vec![Segment { dur, start_rps, end_rps }], end_rps))
            }
        }
    }

    /// Reads a stage file: one stage per line, `DURATION RATE` (constant) or `DURATION A:B`
    /// (linear from A to B requests/s); blank lines and `#` comments are skipped. After the
    /// last stage the rate stays at its end rate.
    pub fn from_stage_file(file: &crate::file_text::FileText) -> Result<Rate, ConfigError> {
        Self::parse_stages(&file.text).map_err(|(line, msg)| {
            ConfigError::new("--stages", format!("{} line {line}: {msg}", file.name))
        })
    }

    /// Parses stage-file text; errors carry the 1-based line number.
    pub fn parse_stages(text: &str) -> Result<Rate, (usize, String)> {
        let mut segments = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let err = |m: String| (i + 1, m);
            let mut words = line.split_whitespace();
            let (Some(dur), Some(rate), None) = (words.next(), words.next(), words.next()) else {
                return Err(err(format!(
                    "{line:?}: write DURATION RATE or DURATION A:B, e.g. '30s 1000:50000'"
                )));
            };
            let dur = humantime::parse_duration(dur)
                .map_err(|e| err(format!("{dur:?} is not a duration ({e}); e.g. 30s")))?;
            if dur.is_zero() {
                return Err(err("a stage must last longer than zero".into()));
            }
            let rps = |s: &str| positive(s, "--stages", "e.g. 5000").map_err(|e| err(e.message));
            let (start_rps, end_rps) = match rate.split_once(':') {
                Some((a, b)) => (rps(a)?, rps(b)?),
                None => (rps(rate)?, rps(rate)?),
            };
            segments.push(Segment { dur, start_rps, end_rps });
        }
        let Some(last) = segments.last() else {
            return Err((0, "no stage in the file; write e.g. '30s 1000:50000'".into()));
        };
        let hold = last.end_rps;
        Ok(Rate::new(segments, hold))
    }

    /// Rate at the start of the schedule.
    pub fn start_rps(&self) -> f64 {
        self.segments.first().map_or(self.hold_rps, |s| s.start_rps)
    }

    /// Length of the segments before the final hold.
    pub fn staged(&self) -> Duration {
        self.segments.iter().map(|s| s.dur).sum()
    }

    /// The same schedule divided by `n` (each of `n` threads takes an equal share).
    pub fn share(&self, n: f64) -> Rate {
        let segments = self
            .segments
            .iter()
            .map(|s| Segment { dur: s.dur, start_rps: s.start_rps / n, end_rps: s.end_rps / n })
            .collect();
        Rate::new(segments, self.hold_rps / n)
    }

    /// Requests due in the first `t` of the run: the integral of the rate.
    pub fn due_by(&self, t: Duration) -> f64 {
        let mut t = t.as_secs_f64();
        for (s, before) in self.segments.iter().zip(&self.before) {
            let d = s.dur.as_secs_f64();
            if t < d {
                return before + s.due_by(t);
            }
            t -= d;
        }
        self.in_segments() + self.hold_rps * t
    }

    /// Seconds into the run at which request `k` is due (slot 0 at 0): the inverse of
    /// [`Self::due_by`].
    pub fn time_of(&self, k: f64) -> f64 {
        let mut start = 0.0;
        for (s, before) in self.segments.iter().zip(&self.before) {
            if k < before + s.total() {
                return start + s.time_of(k - before);
            }
            start += s.dur.as_secs_f64();
        }
        start + (k - self.in_segments()) / self.hold_rps
    }

    /// Requests due during the segments.
    fn in_segments(&self) -> f64 {
        match (self.segments.last(), self.before.last()) {
            (Some(s), Some(b)) => b + s.total(),
            _ => 0.0,
        }
    }
}

fn positive(s: &str, flag: &'static str, example: &str) -> Result<f64, ConfigError> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(ConfigError::new(
            flag,
            format!("{s:?} is not a positive number of requests/s; write {example}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_linear_ramp_integrates_and_inverts() {
        // 1000/s rising to 3000/s over 10 s: 20,000 requests in the ramp, then 3000/s.
        let r = Rate::parse("1000:3000", Some(secs(10))).unwrap();
        assert!((r.due_by(secs(10)) - 20_000.0).abs() < 1e-6);
        assert!((r.due_by(secs(11)) - 23_000.0).abs() < 1e-6);
        assert!((r.due_by(secs(5)) - 7_500.0).abs() < 1e-6);
        for k in [0.0, 1.0, 999.0, 7_500.0, 19_999.0, 20_000.0, 25_000.0] {
            let t = r.time_of(k);
            assert!((r.due_by(Duration::from_secs_f64(t)) - k).abs() < 1e-3, "slot {k} at {t}");
        }
    }

    #[test]
    fn stages_chain_segments_and_hold_the_last_rate() {
        let text = "# warm up\n10s 100\n\n10s 100:300  # climb\n5s 300\n";
        let r = Rate::parse_stages(text).unwrap();
        assert_eq!(r.staged(), secs(25));
        assert_eq!(r.hold_rps, 300.0);
        // 1000 + 2000 + 1500 in the stages, then 300/s.
        assert!((r.due_by(secs(10)) - 1000.0).abs() < 1e-6);
        assert!((r.due_by(secs(20)) - 3000.0).abs() < 1e-6);
        assert!((r.due_by(secs(25)) - 4500.0).abs() < 1e-6);
        assert!((r.due_by(secs(27)) - 5100.0).abs() < 1e-6);
        for k in [0.0, 999.0, 1000.0, 2500.0, 4499.0, 4500.0, 5000.0] {
            let t = r.time_of(k);
            assert!((r.due_by(Duration::from_secs_f64(t)) - k).abs() < 1e-3, "slot {k} at {t}");
        }
        let half = r.share(2.0);
        assert!((half.due_by(secs(25)) - 2250.0).abs() < 1e-6);
    }

    #[test]
    fn stage_file_errors_name_the_line() {
        assert_eq!(Rate::parse_stages("10s 100\nbogus\n").unwrap_err().0, 2);
        assert_eq!(Rate::parse_stages("10x 100").unwrap_err().0, 1);
        assert_eq!(Rate::parse_stages("10s -5").unwrap_err().0, 1);
        assert_eq!(Rate::parse_stages("0s 5").unwrap_err().0, 1);
        assert_eq!(Rate::parse_stages("# only a comment\n").unwrap_err().0, 0);
    }
}
