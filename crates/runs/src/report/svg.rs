//! Charts as inline SVG: a plot area with linear or log axes, tick labels, lines and dots. No
//! script and no external file, so the report opens from disk anywhere and prints as it shows.

use std::fmt::Write as _;

/// Colours for series, in order (Tableau 10: distinct, and readable on white).
pub const PALETTE: [&str; 10] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

/// The colour of series `i`.
pub fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// An axis: its range, scale and labelled ticks.
#[derive(Debug, Clone)]
pub struct Axis {
    pub min: f64,
    pub max: f64,
    pub log: bool,
    pub ticks: Vec<(f64, String)>,
    pub title: String,
}

impl Axis {
    /// 0 to a little above `max`, with round ticks labelled by `label`.
    pub fn linear_from_zero(max: f64, title: &str, label: fn(f64) -> String) -> Axis {
        let step = nice_step(max.max(1e-9) / 5.0);
        let top = (max / step).ceil().max(1.0) * step;
        let ticks = (0..)
            .map(|i| f64::from(i) * step)
            .take_while(|v| *v <= top + step * 1e-9)
            .map(|v| (v, label(v)))
            .collect();
        Axis { min: 0.0, max: top, log: false, ticks, title: title.into() }
    }

    /// Powers of ten around `[min, max]` (with 2 and 5 between when the span is short).
    pub fn log10(min: f64, max: f64, title: &str, label: fn(f64) -> String) -> Axis {
        let lo = min.max(1e-9).log10().floor();
        let hi = max.max(min.max(1e-9) * 10.0).log10().ceil();
        let mut ticks = Vec::new();
        let mut e = lo;
        while e <= hi {
            let p = 10f64.powf(e);
            ticks.push((p, label(p)));
            if hi - lo <= 2.0 && e < hi {
                ticks.push((2.0 * p, label(2.0 * p)));
                ticks.push((5.0 * p, label(5.0 * p)));
            }
            e += 1.0;
        }
        Axis { min: 10f64.powf(lo), max: 10f64.powf(hi), log: true, ticks, title: title.into() }
    }

    /// Where `v` falls, from 0 (min) to 1 (max).
    pub fn frac(&self, v: f64) -> f64 {
        let f = if self.log {
            (v.max(self.min).log10() - self.min.log10()) / (self.max.log10() - self.min.log10())
        } else {
            (v - self.min) / (self.max - self.min)
        };
        if f.is_finite() {
            f.clamp(0.0, 1.0)
        } else {
            0.0
        }
    }
}

/// 1, 2, 2.5 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0].into_iter().map(|m| m * p).find(|s| *s >= raw).unwrap_or(10.0 * p)
}

/// A plot: axes in a box of `width` x `height` pixels, with room for the labels.
#[derive(Debug)]
pub struct Chart {
    pub width: f64,
    pub height: f64,
    pub x: Axis,
    pub y: Axis,
    body: String,
}

const LEFT: f64 = 64.0;
const RIGHT: f64 = 34.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 40.0;

impl Chart {
    pub fn new(width: f64, height: f64, x: Axis, y: Axis) -> Chart {
        Chart { width, height, x, y, body: String::new() }
    }

    /// Pixel position of a data point.
    pub fn at(&self, x: f64, y: f64) -> (f64, f64) {
        let w = self.width - LEFT - RIGHT;
        let h = self.height - TOP - BOTTOM;
        (LEFT + self.x.frac(x) * w, TOP + (1.0 - self.y.frac(y)) * h)
    }

    /// A line through `points` (data coordinates); `class` names it in the DOM.
    pub fn line(&mut self, points: &[(f64, f64)], colour: &str, class: &str, title: &str) {
        if points.is_empty() {
            return;
        }
        let mut d = String::new();
        for &(x, y) in points {
            let (px, py) = self.at(x, y);
            let _ = write!(d, "{px:.1},{py:.1} ");
        }
        let _ = write!(
            self.body,
            r#"<polyline class="{class}" fill="none" stroke="{colour}" stroke-width="1.8" points="{}"><title>{}</title></polyline>"#,
            d.trim_end(),
            super::esc(title)
        );
    }

    /// A dot at a data point.
    pub fn dot(&mut self, x: f64, y: f64, colour: &str, class: &str, title: &str) {
        let (px, py) = self.at(x, y);
        let _ = write!(
            self.body,
            r#"<circle class="{class}" cx="{px:.1}" cy="{py:.1}" r="4" fill="{colour}" fill-opacity="0.75"><title>{}</title></circle>"#,
            super::esc(title)
        );
    }

    /// A segment between two data points.
    pub fn segment(&mut self, a: (f64, f64), b: (f64, f64), colour: &str, width: f64) {
        let (x1, y1) = self.at(a.0, a.1);
        let (x2, y2) = self.at(b.0, b.1);
        let _ = write!(
            self.body,
            r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" stroke="{colour}" stroke-width="{width}"/>"#
        );
    }

    /// The whole `<svg>`, with grid, ticks and axis titles; `id` names it.
    pub fn finish(self, id: &str, aria: &str) -> String {
        let mut s = format!(
            r#"<svg id="{id}" class="chart" role="img" aria-label="{}" width="{w}" height="{h}" viewBox="0 0 {w} {h}" xmlns="http://www.w3.org/2000/svg">"#,
            super::esc(aria),
            w = self.width,
            h = self.height
        );
        let (x0, y0) = (LEFT, self.height - BOTTOM);
        let (x1, y1) = (self.width - RIGHT, TOP);
        for (v, label) in &self.y.ticks {
            let (_, py) = self.at(self.x.min, *v);
            let _ = write!(
                s,
                r##"<line x1="{x0}" y1="{py:.1}" x2="{x1}" y2="{py:.1}" stroke="#e4e4e4"/><text x="{:.1}" y="{:.1}" text-anchor="end" class="tick">{}</text>"##,
                x0 - 4.0,
                py + 4.0,
                super::esc(label)
            );
        }
        for (v, label) in &self.x.ticks {
            let (px, _) = self.at(*v, self.y.min);
            let _ = write!(
                s,
                r##"<line x1="{px:.1}" y1="{y0}" x2="{px:.1}" y2="{y1}" stroke="#efefef"/><text x="{px:.1}" y="{:.1}" text-anchor="middle" class="tick">{}</text>"##,
                y0 + 14.0,
                super::esc(label)
            );
        }
        let _ = write!(
            s,
            r##"<rect x="{x0}" y="{y1}" width="{:.1}" height="{:.1}" fill="none" stroke="#999"/>"##,
            x1 - x0,
            y0 - y1
        );
        s.push_str(&self.body);
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="axis">{}</text>"#,
            (x0 + x1) / 2.0,
            self.height - 6.0,
            super::esc(&self.x.title)
        );
        let _ = write!(
            s,
            r#"<text transform="translate(12,{:.1}) rotate(-90)" text-anchor="middle" class="axis">{}</text>"#,
            (y0 + y1) / 2.0,
            super::esc(&self.y.title)
        );
        s.push_str("</svg>");
        s
    }
}

/// `950`, `12k`, `1.2M`.
pub fn si(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        trim(format!("{:.1}", v / 1e6)) + "M"
    } else if a >= 1e3 {
        trim(format!("{:.1}", v / 1e3)) + "k"
    } else {
        trim(format!("{v:.1}"))
    }
}

/// Microseconds as `250us`, `1ms`, `1.5s`.
pub fn micros(v: f64) -> String {
    if v >= 1e6 {
        trim(format!("{:.1}", v / 1e6)) + "s"
    } else if v >= 1e3 {
        trim(format!("{:.1}", v / 1e3)) + "ms"
    } else {
        trim(format!("{v:.1}")) + "us"
    }
}

/// `0` ... `3` on the log-nines axis as `0%`, `90%`, `99%`, `99.9%`.
pub fn nines(v: f64) -> String {
    let p = 100.0 * (1.0 - 10f64.powf(-v));
    let digits = (v.round() as usize).saturating_sub(2);
    format!("{p:.digits$}%")
}

/// Seconds as `5s`.
pub fn seconds(v: f64) -> String {
    trim(format!("{v:.1}")) + "s"
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_and_labels_read_as_a_person_would_write_them() {
        let a = Axis::linear_from_zero(123_000.0, "req/s", si);
        assert_eq!(a.max, 125_000.0);
        let labels: Vec<&str> = a.ticks.iter().map(|t| t.1.as_str()).collect();
        assert_eq!(labels, ["0", "25k", "50k", "75k", "100k", "125k"]);
        let l = Axis::log10(80.0, 25_000.0, "latency", micros);
        assert_eq!((l.min, l.max), (10.0, 100_000.0));
        assert_eq!(l.ticks[0].1, "10us");
        assert!((l.frac(1000.0) - 0.5).abs() < 1e-9);
        assert_eq!(nines(0.0), "0%");
        assert_eq!(nines(1.0), "90%");
        assert_eq!(nines(2.0), "99%");
        assert_eq!(nines(3.0), "99.9%");
        assert_eq!(nines(5.0), "99.999%");
        assert_eq!(micros(1500.0), "1.5ms");
        assert_eq!(si(1_364_000.0), "1.4M");
    }
}
