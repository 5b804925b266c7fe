//! Figures as the reports write them.

/// Microseconds in the largest unit that keeps them above 1: `35.2us`, `1.23ms`, `2.50s`.
pub fn fmt_us(us: f64) -> String {
    let (v, unit) = if us >= 1e6 {
        (us / 1e6, "s")
    } else if us >= 1e3 {
        (us / 1e3, "ms")
    } else {
        (us, "us")
    };
    format!("{v:.2}{unit}")
}
