//! A climb as a staircase: the rate of the state kept after each step (the stair), each step's
//! current state measured again (grey) and its candidate (green when kept, red when put back),
//! median and range, with a table naming each step's finding and change. Drawn from what the
//! climb keeps as its sweep's file (`{"climb": {"start", "steps"}}`), so a climb that did not
//! end draws as far as it got.

use std::fmt::Write as _;

use serde::Deserialize;

use super::esc;
use super::svg::{si, Axis, Chart};

/// Ok responses per second over a state's runs in one step.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct Level {
    pub rps: f64,
    pub min: f64,
    pub max: f64,
}

/// One step as the climb decided it.
#[derive(Debug, Clone, Deserialize)]
pub struct Stair {
    pub finding: String,
    pub change: Option<String>,
    pub before: Option<Level>,
    pub after: Option<Level>,
    pub ratio: Option<f64>,
    pub verdict: String,
}

/// The climb to draw.
#[derive(Debug, Clone, Deserialize)]
pub struct Staircase {
    pub start: Level,
    pub steps: Vec<Stair>,
}

#[derive(Deserialize)]
struct File {
    climb: Staircase,
}

/// The staircase of a stored climb (None: the sweep is no climb, or kept no step yet).
pub fn of_sweep(store: &crate::store::Store, sweep: &crate::store::SweepRow) -> Option<Staircase> {
    if sweep.name != "climb" {
        return None;
    }
    of_file(&store.sweep_file(sweep.id).ok()??)
}

/// The staircase a climb's sweep file holds (None: not a climb's, or no step yet).
pub fn of_file(text: &str) -> Option<Staircase> {
    serde_json::from_str::<File>(text).ok().map(|f| f.climb)
}

const KEPT: &str = "#2ca02c";
const REVERTED: &str = "#d62728";
const CURRENT: &str = "#888888";

/// The chart and the table of steps.
pub fn render(s: &Staircase) -> String {
    let n = s.steps.len();
    let top = s
        .steps
        .iter()
        .flat_map(|st| [st.before, st.after])
        .flatten()
        .chain([s.start])
        .map(|l| l.max)
        .fold(0.0, f64::max);
    let mut ticks = vec![(0.0, "start".to_string())];
    ticks.extend((1..=n).map(|k| (k as f64, k.to_string())));
    let x = Axis { min: -0.5, max: n as f64 + 0.5, log: false, ticks, title: "step".into() };
    let y = Axis::linear_from_zero(top * 1.05, "ok req/s", si);
    let mut c = Chart::new(960.0, 340.0, x, y);
    let whisker = |c: &mut Chart, at: f64, l: Level, colour: &str, class: &str, title: &str| {
        c.segment((at, l.min), (at, l.max), colour, 2.0);
        c.dot(at, l.rps, colour, class, title);
    };
    whisker(&mut c, 0.0, s.start, CURRENT, "stair-start", &level_title("start", s.start));
    let mut level = s.start.rps;
    let mut stair = vec![(-0.5, level), (0.0, level)];
    for (i, st) in s.steps.iter().enumerate() {
        let k = (i + 1) as f64;
        let change = st.change.as_deref().unwrap_or("no change");
        if let Some(b) = st.before {
            let t = level_title(&format!("step {}: the current state", i + 1), b);
            whisker(&mut c, k - 0.12, b, CURRENT, "stair-current", &t);
            level = b.rps;
        }
        if let Some(a) = st.after {
            let (colour, class) = if st.verdict == "kept" {
                (KEPT, "stair-kept")
            } else {
                (REVERTED, "stair-reverted")
            };
            let t = level_title(&format!("step {}: {change} ({})", i + 1, st.verdict), a);
            whisker(&mut c, k + 0.12, a, colour, class, &t);
        }
        // Flat at the current state (as measured again in this step) up to the step, and up
        // (or down) to the candidate there when it was kept.
        stair.push((k - 0.5, stair.last().map_or(level, |p| p.1)));
        stair.push((k - 0.5, level));
        stair.push((k, level));
        if let (Some(a), "kept") = (st.after, st.verdict.as_str()) {
            level = a.rps;
            stair.push((k, level));
        }
    }
    stair.push((n as f64 + 0.5, level));
    c.line(&stair, "#1f77b4", "stair", "the state kept after each step");
    let mut o = c.finish("staircase", "ok requests per second after each step of the climb");
    o.push_str(
        "<table id=\"steps\"><thead><tr><th>step</th><th>finding</th><th>change</th><th>before req/s</th><th>after req/s</th><th>ratio</th><th>verdict</th></tr></thead><tbody>\n",
    );
    let fmt = |l: Option<Level>| {
        l.map_or("-".into(), |l| format!("{:.0} ({:.0}-{:.0})", l.rps, l.min, l.max))
    };
    for (i, st) in s.steps.iter().enumerate() {
        let _ = writeln!(
            o,
            "<tr data-verdict=\"{v}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{v}</td></tr>",
            i + 1,
            esc(&st.finding),
            esc(st.change.as_deref().unwrap_or("-")),
            fmt(st.before),
            fmt(st.after),
            st.ratio.map_or("-".into(), |r| format!("{r:.2}x")),
            v = esc(&st.verdict)
        );
    }
    o.push_str("</tbody></table>\n");
    o
}

fn level_title(what: &str, l: Level) -> String {
    format!("{what}: {:.0} ok req/s ({:.0}-{:.0})", l.rps, l.min, l.max)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    /// A climb's file draws a dot per state, coloured by verdict, and a row per step; other
    /// sweeps' files draw nothing.
    #[test]
    fn a_climbs_file_draws_its_steps_and_nothing_else_does() {
        let file = r#"{"climb": {"start": {"rps": 100, "min": 95, "max": 105}, "steps": [
            {"finding": "latency-bound", "change": "connections 1 -> 2", "before": {"rps": 100, "min": 96, "max": 104},
             "after": {"rps": 200, "min": 190, "max": 210}, "ratio": 2.0, "verdict": "kept"},
            {"finding": "client-bound", "change": "connections 2 -> 4", "before": {"rps": 201, "min": 199, "max": 205},
             "after": {"rps": 190, "min": 180, "max": 199}, "ratio": 0.95, "verdict": "reverted"},
            {"finding": "both-saturated", "change": null, "before": {"rps": 201, "min": 199, "max": 205},
             "after": null, "ratio": null, "verdict": "not-applicable"}]}}"#;
        let s = of_file(file).unwrap();
        let html = render(&s);
        assert_eq!(html.matches("class=\"stair-kept\"").count(), 1);
        assert_eq!(html.matches("class=\"stair-reverted\"").count(), 1);
        assert_eq!(html.matches("class=\"stair-current\"").count(), 3);
        assert_eq!(html.matches("<tr data-verdict=").count(), 3);
        assert!(html.contains("step 1: connections 1 -&gt; 2 (kept): 200 ok req/s (190-210)"));
        assert!(of_file("name = \"knee\"\n[base]\n").is_none());
        assert!(of_file("climb from builtin; repeats 3").is_none());
    }
}
