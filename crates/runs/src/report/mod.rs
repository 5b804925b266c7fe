//! `qpslab report`: one self-contained HTML file (no script, no fetch: styles, SVG charts and
//! PNG heatmaps are inline) from stored runs:
//!
//! 1. the sweep's table: a row per variant, median and range of throughput over its repeats,
//!    ratio and noise verdict against the first variant, p50/p99, server CPU, requests per
//!    server CPU-second;
//! 2. throughput per variant, every repeat a dot, the median a bar;
//! 3. the latency percentile spectrum per variant (percentile on a log "nines" axis);
//! 4. throughput second by second over each run, a chart per variant, a line per repeat;
//! 5. per-CPU heatmaps over time (user, system, softirq) for every run;
//! 6. every run's findings and provenance;
//!
//! and, first, for a climb, its staircase ([`stairs`]).

mod heat;
pub mod stairs;
pub mod svg;

use std::fmt::Write as _;

use crate::compare::{self, fmt_us, Group, Row};
use crate::store::{StoredRun, SweepRow};
use svg::{Axis, Chart};

/// What to draw.
#[derive(Debug)]
pub struct Input<'a> {
    pub title: String,
    /// The sweep the runs belong to, when they are one sweep's.
    pub sweep: Option<&'a SweepRow>,
    /// The variants (or single runs) in order; the first is the baseline.
    pub groups: &'a [Group],
    /// The climb the sweep is, step by step (`stairs::of_file` of its file).
    pub climb: Option<stairs::Staircase>,
}

/// Escapes text for HTML (and SVG) content and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

const STYLE: &str = "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1180px;padding:0 16px;color:#222}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:32px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:16px 0 6px}.meta{color:#555;margin:0 0 4px}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}th,td{padding:4px 9px;border-bottom:1px solid #e6e6e6;text-align:right;white-space:nowrap}
th:first-child,td:first-child{text-align:left}th{background:#f4f4f4}
.chart{display:block;margin:6px 0}.tick{font-size:11px;fill:#555}.axis{font-size:12px;fill:#333}
.legend span{display:inline-block;margin-right:14px;font-size:12px}.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
.grid{display:flex;flex-wrap:wrap;gap:10px 24px}.heatrow{display:flex;gap:14px;align-items:flex-end;margin:4px 0 10px}
.heatrow .who{width:150px;font-size:12px;color:#333}figure{margin:0}figcaption{font-size:11px;color:#555}
img.heat{image-rendering:pixelated;image-rendering:crisp-edges;border:1px solid #bbb;display:block}
.beyond{color:#0a6}.within{color:#777}.few{color:#b60}
details{margin:4px 0}summary{cursor:pointer}pre{background:#f7f7f7;padding:8px;overflow:auto;max-height:320px;font-size:12px}
.sev-critical{color:#c00;font-weight:600}.sev-warning{color:#b60;font-weight:600}.sev-info{color:#555}";

/// The report.
pub fn render(input: &Input<'_>) -> String {
    let rows = compare::table(input.groups);
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\"><title>{}</title><style>{STYLE}</style></head><body>\n",
        esc(&input.title)
    );
    let _ = writeln!(o, "<h1>{}</h1>", esc(&input.title));
    o.push_str(&header(input));
    if let Some(c) = &input.climb {
        let _ = writeln!(o, "<h2 id=\"climb\">The climb, step by step</h2>\n{}", stairs::render(c));
    }
    let _ = writeln!(o, "<h2 id=\"table\">Variants</h2>\n{}", table_html(&rows));
    o.push_str(&quic_table_html(&rows));
    o.push_str(&legend(input.groups));
    let _ = writeln!(
        o,
        "<h2 id=\"throughput\">Throughput per variant</h2>{}",
        throughput_chart(input.groups)
    );
    let _ = writeln!(
        o,
        "<h2 id=\"latency\">Latency percentile spectrum</h2>{}",
        spectrum_chart(input.groups)
    );
    let _ = writeln!(
        o,
        "<h2 id=\"per-second\">Throughput second by second</h2>{}",
        per_second(input.groups)
    );
    let _ = writeln!(
        o,
        "<h2 id=\"cpus\">CPU time per CPU over each run</h2>{}",
        heatmaps(input.groups)
    );
    let _ =
        writeln!(o, "<h2 id=\"runs\">Findings and provenance</h2>{}", runs_detail(input.groups));
    o.push_str("</body></html>\n");
    o
}

fn header(input: &Input<'_>) -> String {
    let runs: Vec<&StoredRun> = input.groups.iter().flat_map(|g| &g.runs).collect();
    let mut o = String::new();
    if let Some(s) = input.sweep {
        let _ = writeln!(
            o,
            "<p class=\"meta\">sweep {} \u{b7} {} \u{b7} started {} \u{b7} {} run(s) \u{b7} {}</p>",
            s.id,
            esc(&s.name),
            esc(&s.started_at),
            s.runs,
            esc(&s.status)
        );
    }
    if let Some(p) = runs.first().map(|r| &r.provenance) {
        let text = |k: &str| p.get(k).and_then(|v| v.as_str()).unwrap_or("?").to_string();
        let _ = writeln!(
            o,
            "<p class=\"meta\">qpslab {} \u{b7} Linux {} \u{b7} {} \u{b7} {} variant(s), {} run(s)</p>",
            esc(&text("version")),
            esc(&text("kernel")),
            esc(&text("cpu_model")),
            input.groups.len(),
            runs.len()
        );
    }
    o
}

/// Section 1: the table (pinned by a snapshot test).
pub fn table_html(rows: &[Row]) -> String {
    let mut o = String::from(
        "<table id=\"variants\"><thead><tr><th>#</th><th>variant</th><th>runs</th><th>req/s (median)</th><th>min-max</th><th>ratio</th><th>p50</th><th>p99</th><th>server CPU</th><th>req per server CPU-s</th><th>verdict</th></tr></thead><tbody>\n",
    );
    for (i, r) in rows.iter().enumerate() {
        let s = &r.summary;
        let t = &s.throughput_rps;
        let (class, word) = match &r.verdict {
            None => ("base", "baseline".to_string()),
            Some(v) => (
                match v.judgement {
                    "beyond-noise" => "beyond",
                    "within-noise" => "within",
                    _ => "few",
                },
                v.short().to_string(),
            ),
        };
        let word = word + &compare::marks_note(s);
        let _ = writeln!(
            o,
            "<tr data-variant=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{:.0}</td><td>{:.0}-{:.0}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{class}\">{word}</td></tr>",
            esc(&s.name),
            i + 1,
            esc(&s.name),
            s.runs.len(),
            t.median,
            t.min,
            t.max,
            r.ratio.map_or("-".into(), |x| format!("{x:.2}x")),
            fmt_us(s.latency_us.p50),
            fmt_us(s.latency_us.p99),
            s.server_cpu.map_or("-".into(), |c| format!("{c:.2}")),
            s.requests_per_server_cpu_s.map_or("-".into(), |c| format!("{c:.0}")),
        );
    }
    o.push_str("</tbody></table>\n");
    o
}

/// HTTP/3 variants' transport under the table (nothing when no variant spoke HTTP/3).
pub fn quic_table_html(rows: &[Row]) -> String {
    let quic: Vec<(usize, &Row, &crate::store::QuicFacts)> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.summary.quic.as_ref().map(|q| (i, r, q)))
        .collect();
    if quic.is_empty() {
        return String::new();
    }
    let mut o = String::from(
        "<table id=\"quic\"><thead><tr><th>#</th><th>HTTP/3 variant</th><th>packets lost</th><th>loss</th><th>datagrams per send call</th><th>datagrams per read</th></tr></thead><tbody>\n",
    );
    for (i, r, q) in quic {
        let _ = writeln!(
            o,
            "<tr data-variant=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{:.2}%</td><td>{:.1}</td><td>{:.1}</td></tr>",
            esc(&r.summary.name),
            i + 1,
            esc(&r.summary.name),
            q.lost_packets,
            q.packet_loss * 100.0,
            q.datagrams_per_send_call,
            q.datagrams_per_recv_call,
        );
    }
    o.push_str("</tbody></table>\n");
    o
}

fn legend(groups: &[Group]) -> String {
    let mut o = String::from("<p class=\"legend\">");
    for (i, g) in groups.iter().enumerate() {
        let _ = write!(
            o,
            "<span><i style=\"background:{}\"></i>{}</span>",
            svg::colour(i),
            esc(&g.name)
        );
    }
    o.push_str("</p>\n");
    o
}

/// Section 2: a column per variant, a dot per repeat, a bar at the median, a line min to max.
fn throughput_chart(groups: &[Group]) -> String {
    let max = groups
        .iter()
        .flat_map(|g| g.runs.iter().map(|r| r.facts.throughput_rps))
        .fold(0.0, f64::max);
    let n = groups.len() as f64;
    let x = Axis {
        min: 0.0,
        max: n,
        log: false,
        ticks: groups
            .iter()
            .enumerate()
            .map(|(i, _)| (i as f64 + 0.5, format!("{}", i + 1)))
            .collect(),
        title: "variant (numbered as in the table, in its order)".into(),
    };
    let width = (140.0 + 70.0 * n).clamp(420.0, 1150.0);
    let mut c = Chart::new(width, 320.0, x, Axis::linear_from_zero(max, "requests/s", svg::si));
    for (i, g) in groups.iter().enumerate() {
        let col = svg::colour(i);
        let cx = i as f64 + 0.5;
        let v: Vec<f64> = g.runs.iter().map(|r| r.facts.throughput_rps).collect();
        if let Some(s) = compare::Spread::of(&v) {
            c.segment((cx, s.min), (cx, s.max), col, 1.5);
            c.segment((cx - 0.25, s.median), (cx + 0.25, s.median), col, 3.0);
        }
        for r in &g.runs {
            let tip = format!("{}: run {} {:.0} req/s", g.name, r.row.id, r.facts.throughput_rps);
            c.dot(cx, r.facts.throughput_rps, col, "repeat", &tip);
        }
    }
    c.finish("throughput-chart", "throughput per variant")
}

/// Section 3: each variant's histograms merged, percentile on a log-nines axis.
fn spectrum_chart(groups: &[Group]) -> String {
    let mut lines = Vec::new();
    for (i, g) in groups.iter().enumerate() {
        let Ok(h) = compare::merged(&g.runs) else { continue };
        if h.is_empty() {
            continue;
        }
        let top = 1.0 - 1.0 / h.len() as f64;
        let mut pts: Vec<(f64, f64)> = Vec::new();
        for v in h.iter_quantiles(4) {
            let q = v.quantile_iterated_to().min(top);
            let x = -(1.0 - q).log10();
            let y = h.highest_equivalent(v.value_iterated_to()).max(1) as f64;
            if pts.last().is_none_or(|p| x > p.0 + 1e-6 || y > p.1) {
                pts.push((x, y));
            }
        }
        lines.push((i, g.name.clone(), pts));
    }
    if lines.is_empty() {
        return "<p>No latency histogram was stored for these runs.</p>".into();
    }
    let all = lines.iter().flat_map(|l| l.2.iter());
    let (xmax, ymin, ymax) =
        all.fold((1.0f64, f64::MAX, 1.0f64), |(a, b, c), p| (a.max(p.0), b.min(p.1), c.max(p.1)));
    let xtop = xmax.ceil();
    let x = Axis {
        min: 0.0,
        max: xtop,
        log: false,
        ticks: (0..=xtop as usize).map(|k| (k as f64, svg::nines(k as f64))).collect(),
        title: "percentile".into(),
    };
    let mut c = Chart::new(900.0, 360.0, x, Axis::log10(ymin, ymax, "latency", svg::micros));
    for (i, name, pts) in &lines {
        c.line(pts, svg::colour(*i), "spectrum", name);
    }
    c.finish("latency-chart", "latency by percentile")
}

/// Section 4: a chart per variant, a line per repeat.
fn per_second(groups: &[Group]) -> String {
    let max = groups
        .iter()
        .flat_map(|g| g.runs.iter().flat_map(|r| r.facts.rps.iter().copied()))
        .fold(0.0, f64::max);
    let secs =
        groups.iter().flat_map(|g| g.runs.iter().map(|r| r.facts.rps.len())).max().unwrap_or(0);
    if secs == 0 {
        return "<p>No per-second series was stored for these runs.</p>".into();
    }
    let mut o = String::from("<div class=\"grid\">");
    for (i, g) in groups.iter().enumerate() {
        let x = Axis {
            min: 0.0,
            max: secs as f64,
            log: false,
            ticks: (0..=secs)
                .step_by(secs.div_ceil(6).max(1))
                .map(|s| (s as f64, svg::seconds(s as f64)))
                .collect(),
            title: "time into the run".into(),
        };
        let mut c = Chart::new(360.0, 220.0, x, Axis::linear_from_zero(max, "requests/s", svg::si));
        let mut key = String::from("<p class=\"legend\">");
        for (k, r) in g.runs.iter().enumerate() {
            // Repeats of one variant in colours of their own, named below the chart.
            let colour = svg::colour(k);
            let _ = write!(
                key,
                "<span><i style=\"background:{colour}\"></i>repeat {} (run {})</span>",
                r.row.repeat.unwrap_or(1),
                r.row.id
            );
            let pts: Vec<(f64, f64)> =
                r.facts.rps.iter().enumerate().map(|(k, v)| (k as f64 + 1.0, *v)).collect();
            let pts: Vec<(f64, f64)> =
                std::iter::once((0.0, r.facts.rps.first().copied().unwrap_or(0.0)))
                    .chain(pts)
                    .collect();
            let tip = format!("run {} (repeat {})", r.row.id, r.row.repeat.unwrap_or(1));
            c.line(&pts, colour, "per-second", &tip);
            // Seconds with failed requests: a black dot on the line.
            for (k, (&n, &v)) in r.facts.errors.iter().zip(&r.facts.rps).enumerate() {
                if n > 0 {
                    let what = format!("run {}, second {}: {n} failed", r.row.id, k + 1);
                    c.dot(k as f64 + 1.0, v, "#000", "errors", &what);
                }
            }
        }
        key.push_str("</p>");
        let _ = write!(
            o,
            "<div><h3>{}. {}</h3>{}{key}</div>",
            i + 1,
            esc(&g.name),
            c.finish(&format!("per-second-{}", i + 1), &g.name)
        );
    }
    o.push_str("</div>\n");
    o
}

/// Section 5: per run, three heatmaps (user, system, softirq): rows CPUs, columns intervals.
fn heatmaps(groups: &[Group]) -> String {
    let mut o = String::from(
        "<p class=\"meta\">Each image: one row per CPU (lowest number on top), one column per sample interval; the darker, the more of that CPU's time went to user, system or softirq work.</p>\n",
    );
    let mut any = false;
    for (i, g) in groups.iter().enumerate() {
        let _ = write!(o, "<h3>{}. {}</h3>", i + 1, esc(&g.name));
        for r in &g.runs {
            let cpu = &r.facts.cpu;
            let keep = full_intervals(&cpu.t_s);
            let (cols, rows) = (keep.len(), cpu.cpus.len());
            if cols == 0 || rows == 0 {
                let _ = write!(o, "<p class=\"meta\">run {}: no CPU samples stored</p>", r.row.id);
                continue;
            }
            any = true;
            let cell_h = (160 / rows).clamp(3, 16);
            let cell_w = (360 / cols).clamp(4, 24);
            let left_out = cpu.t_s.len() - cols;
            let _ = write!(
                o,
                "<div class=\"heatrow\" data-run=\"{}\"><div class=\"who\">run {} \u{b7} repeat {}<br>CPUs {}<br>{} intervals{}</div>",
                r.row.id,
                r.row.id,
                r.row.repeat.unwrap_or(1),
                esc(&cpu_list(&cpu.cpus)),
                cols,
                if left_out > 0 { format!(" ({left_out} short one(s) left out)") } else { String::new() }
            );
            for ((kind, full), series) in
                heat::KINDS.iter().zip([&cpu.user, &cpu.system, &cpu.softirq])
            {
                let series: Vec<Vec<f64>> =
                    keep.iter().filter_map(|&k| series.get(k).cloned()).collect();
                if let Some(uri) = heat::data_uri(&series, rows, *full) {
                    let peak = series.iter().flatten().fold(0.0f64, |a, b| a.max(*b));
                    let _ = write!(
                        o,
                        "<figure><img class=\"heat\" data-kind=\"{kind}\" src=\"{uri}\" width=\"{}\" height=\"{}\" alt=\"{kind} time per CPU, run {}\"><figcaption>{kind} (peak {:.0}%)</figcaption></figure>",
                        cell_w * cols,
                        cell_h * rows,
                        r.row.id,
                        peak * 100.0
                    );
                }
            }
            o.push_str("</div>\n");
        }
    }
    if !any {
        o.push_str("<p>No CPU samples were stored for these runs (load runs have none).</p>");
    }
    o
}

/// The sample intervals (by index) worth a heatmap column: those at least half the median
/// interval long. The last sample comes when the run stops, often tens of milliseconds after
/// the one before; shares over so short a time are noise, and they set the peak.
fn full_intervals(t_s: &[f64]) -> Vec<usize> {
    let lengths: Vec<f64> =
        t_s.iter().enumerate().map(|(k, t)| t - if k == 0 { 0.0 } else { t_s[k - 1] }).collect();
    let mut sorted = lengths.clone();
    sorted.sort_by(f64::total_cmp);
    let Some(&median) = sorted.get(sorted.len() / 2) else { return Vec::new() };
    (0..lengths.len()).filter(|&k| lengths[k] >= median / 2.0).collect()
}

fn cpu_list(cpus: &[usize]) -> String {
    qpslab_host::CpuSet::from_iter(cpus.iter().copied()).to_list()
}

/// Section 6: per run, its findings and where it came from.
fn runs_detail(groups: &[Group]) -> String {
    let mut o = String::new();
    for (i, g) in groups.iter().enumerate() {
        let _ = write!(o, "<h3>{}. {}</h3>", i + 1, esc(&g.name));
        for r in &g.runs {
            let f = &r.facts;
            let _ = write!(
                o,
                "<details class=\"run\" data-run=\"{}\"><summary>run {} \u{b7} repeat {} \u{b7} {} \u{b7} {:.0} req/s \u{b7} {} finding(s){}</summary>",
                r.row.id,
                r.row.id,
                r.row.repeat.unwrap_or(1),
                esc(&r.row.started_at),
                f.throughput_rps,
                f.findings.len(),
                compare::marks(r).iter().map(|m| format!(" \u{b7} <b class=\"mark\">{m}</b>")).collect::<String>()
            );
            o.push_str("<ul class=\"findings\">");
            for x in &f.findings {
                let _ = write!(
                    o,
                    "<li><span class=\"sev-{}\">[{}] {}</span>: {}<br><small>{}</small><br><small>remedy: {}</small></li>",
                    esc(&x.severity),
                    esc(&x.severity),
                    esc(&x.name),
                    esc(&x.summary),
                    esc(&x.evidence.join("; ")),
                    esc(&x.remedy)
                );
            }
            if f.findings.is_empty() {
                o.push_str("<li>no findings</li>");
            }
            o.push_str("</ul>");
            o.push_str(&profile_table(&f.profile));
            o.push_str(&provenance(r));
            o.push_str("</details>\n");
        }
    }
    o
}

/// A run's profile: each CPU's samples by category, a row per CPU.
fn profile_table(cpus: &[crate::store::CpuCategories]) -> String {
    if cpus.is_empty() {
        return String::new();
    }
    let cats = qpslab_profile::Category::ALL;
    let mut o = String::from("<table class=\"profile\"><caption>where each CPU's time went (profile)</caption><tr><th>CPU</th><th>samples</th>");
    for c in cats {
        let _ = write!(o, "<th>{}</th>", c.name());
    }
    o.push_str("</tr>");
    for c in cpus {
        let _ = write!(o, "<tr><td>{}</td><td>{}</td>", c.cpu, c.samples);
        for cat in cats {
            match c.shares.get(cat.name()) {
                Some(x) => {
                    let _ = write!(o, "<td>{:.1}%</td>", x * 100.0);
                }
                None => o.push_str("<td>-</td>"),
            }
        }
        o.push_str("</tr>");
    }
    o.push_str("</table>");
    o
}

fn provenance(r: &StoredRun) -> String {
    let p = &r.provenance;
    let text = |k: &str| p.get(k).and_then(|v| v.as_str()).unwrap_or("?").to_string();
    let command = p
        .get("command")
        .and_then(|c| c.as_array())
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    let mut o = format!(
        "<p class=\"meta\">config: {}<br>command: {}<br>qpslab {} \u{b7} Linux {} \u{b7} {}</p>",
        esc(&r.row.config.to_string()),
        esc(&command),
        esc(&text("version")),
        esc(&text("kernel")),
        esc(&text("cpu_model"))
    );
    let rps: Vec<String> = p["host"]["nics"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|n| {
            let name = n["name"].as_str().unwrap_or("?").to_string();
            n["rx"].as_array().into_iter().flatten().filter_map(move |q| {
                let cpus = q["rps_cpus"].as_str()?;
                Some(format!(
                    "{name}/rx-{} {}",
                    q["index"],
                    if cpus.is_empty() { "off" } else { cpus }
                ))
            })
        })
        .collect();
    if !rps.is_empty() {
        let _ = write!(o, "<p class=\"meta rps\">RPS during the run: {}</p>", esc(&rps.join(", ")));
    }
    if let Some(entries) = p["tune"]["entries"].as_array() {
        let items: Vec<String> = entries
            .iter()
            .map(|e| {
                format!(
                    "{}: {} \u{2192} {} ({})",
                    e["setting"].as_str().unwrap_or("?"),
                    e["before"].as_str().unwrap_or("?"),
                    e["applied"].as_str().unwrap_or("?"),
                    e["state"].as_str().unwrap_or("?")
                )
            })
            .collect();
        let _ = write!(o, "<p class=\"meta tune\">tune in force: {}</p>", esc(&items.join("; ")));
    }
    let host = &p["host"];
    if host.is_object() {
        let nodes = host["nodes"].as_array().map_or(0, Vec::len);
        let _ = write!(
            o,
            "<p class=\"meta host\">host: CPUs {} ({} core(s), {} NUMA node(s)), clocksource {}</p>",
            esc(host["online"].as_str().unwrap_or("?")),
            host["cores"],
            nodes.max(1),
            esc(host["clocksource"].as_str().unwrap_or("?"))
        );
        let sysctls: Vec<String> = host["sysctls"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| Some(format!("{}={}", s["name"].as_str()?, s["value"].as_str()?)))
            .collect();
        if !sysctls.is_empty() {
            let _ = write!(o, "<p class=\"meta sysctls\">sysctls: {}</p>", esc(&sysctls.join(" ")));
        }
    }
    // The whole record (host model included) stays in the store, not in the page: a 100-run
    // sweep of a big host would otherwise weigh megabytes.
    let _ = write!(
        o,
        "<p class=\"meta\">everything else: <code>qpslab runs show {} --json</code></p>",
        r.row.id
    );
    o
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;
    use crate::store::{RunFacts, RunRow};

    fn run(id: i64, variant: &str, repeat: u32, rps: f64, p50: u64) -> StoredRun {
        StoredRun {
            row: RunRow {
                id,
                kind: "bench".into(),
                sweep: Some(1),
                variant: Some(variant.into()),
                repeat: Some(repeat),
                label: None,
                started_at: format!("2026-11-22T10:00:{id:02}.000Z"),
                config: serde_json::json!({"connections": 10}),
                throughput_rps: rps,
                target: "builtin".into(),
                stopped_early: false,
            },
            facts: RunFacts {
                throughput_rps: rps,
                latency_us: crate::store::Percentiles {
                    p50,
                    p90: p50 * 2,
                    p99: p50 * 4,
                    p999: p50 * 8,
                    max: p50 * 20,
                },
                server_cpu: Some(0.98),
                requests_per_server_cpu_s: Some(rps / 0.98),
                rps: vec![rps; 3],
                ..RunFacts::default()
            },
            report: serde_json::json!({}),
            text: String::new(),
            histogram: String::new(),
            provenance: serde_json::json!({"version": "0.1.0", "kernel": "6.18", "cpu_model": "test <cpu>"}),
        }
    }

    fn groups() -> Vec<Group> {
        let g = |name: &str, base: i64, rps: [f64; 3], p50| Group {
            name: name.into(),
            runs: (0..3)
                .map(|k| run(base + 2 * k, name, k as u32 + 1, rps[k as usize], p50))
                .collect(),
        };
        vec![
            g("builtin", 1, [100_000.0, 101_000.0, 99_500.0], 90),
            g("nginx", 2, [130_000.0, 131_500.0, 129_000.0], 70),
        ]
    }

    #[test]
    fn the_variants_table_is_pinned() {
        insta::assert_snapshot!(table_html(&compare::table(&groups())));
    }

    /// An HTTP/3 variant's transport gets a row of its own under the table; a page without
    /// HTTP/3 has no such table.
    #[test]
    fn http3_variants_get_their_transport_under_the_table() {
        let mut g = groups();
        assert_eq!(quic_table_html(&compare::table(&g)), "");
        for r in &mut g[1].runs {
            r.facts.quic = Some(crate::store::QuicFacts {
                datagrams_per_send_call: 3.25,
                datagrams_per_recv_call: 1.5,
                lost_packets: 7,
                packet_loss: 0.0005,
            });
        }
        let html = render(&Input { title: "h3".into(), sweep: None, groups: &g, climb: None });
        let name = &g[1].name;
        assert!(
            html.contains(&format!(
                "<td>2</td><td>{name}</td><td>7</td><td>0.05%</td><td>3.2</td><td>1.5</td>"
            )),
            "{html}"
        );
        assert_eq!(html.matches("<table id=\"quic\">").count(), 1);
    }

    /// 100 runs of a 64-CPU host, a minute each: the page stays readable and small.
    #[test]
    fn a_hundred_runs_of_a_big_host_stay_under_a_few_megabytes() {
        let groups: Vec<Group> = (0..20)
            .map(|v| Group {
                name: format!("variant {v}"),
                runs: (0..5)
                    .map(|k| {
                        let mut r = run(v * 5 + k + 1, "x", k as u32 + 1, 100_000.0 + v as f64, 90);
                        let shares = |seed: usize| -> Vec<Vec<f64>> {
                            (0..60)
                                .map(|t| {
                                    (0..64)
                                        .map(|c| ((t * 7 + c * 13 + seed) % 100) as f64 / 100.0)
                                        .collect()
                                })
                                .collect()
                        };
                        r.facts.rps =
                            (0..60).map(|t| 100_000.0 + (t % 7) as f64 * 1000.0).collect();
                        r.facts.errors = (0..60).map(|t| u64::from(t == 30)).collect();
                        r.facts.cpu = crate::store::CpuSeries {
                            cpus: (0..64).collect(),
                            t_s: (1..=60).map(f64::from).collect(),
                            user: shares(1),
                            system: shares(2),
                            softirq: shares(3),
                            idle: shares(4),
                        };
                        r
                    })
                    .collect(),
            })
            .collect();
        let html =
            render(&Input { title: "big".into(), sweep: None, groups: &groups, climb: None });
        assert_eq!(html.matches("<img class=\"heat\"").count(), 300);
        assert_eq!(html.matches("class=\"errors\"").count(), 100, "the failed second of each run");
        assert!(html.len() < 3 << 20, "{} bytes", html.len());
    }

    #[test]
    fn the_page_has_every_section_and_escapes_what_it_shows() {
        let g = groups();
        let html =
            render(&Input { title: "knee <1>".into(), sweep: None, groups: &g, climb: None });
        for id in ["variants", "throughput-chart", "per-second-1", "per-second-2"] {
            assert!(html.contains(&format!("id=\"{id}\"")), "{id}");
        }
        assert!(html.contains("<title>knee &lt;1&gt;</title>"));
        assert!(html.contains("test &lt;cpu&gt;"));
        assert!(!html.contains("<script"), "no script");
        assert!(!html.contains("src=\"http") && !html.contains("href=\"http"), "nothing fetched");
        assert_eq!(html.matches("class=\"repeat\"").count(), 6, "a dot per run");
        assert!(!html.contains("class=\"profile\""), "no profile, no table");
    }

    /// The table numbers its rows as the charts' axes number the variants; the repeats of a
    /// variant have colours of their own with a key under its per-second chart; a short last
    /// sample interval gets no heatmap column and no say in the peak.
    #[test]
    fn numbers_colours_and_short_intervals_are_as_the_reader_needs_them() {
        let mut g = groups();
        let html = table_html(&compare::table(&g));
        assert!(
            html.contains("<td>1</td><td>builtin</td>")
                && html.contains("<td>2</td><td>nginx</td>")
        );
        for r in &mut g[0].runs {
            r.facts.cpu = crate::store::CpuSeries {
                cpus: vec![0, 1],
                // Three whole seconds, then a 30 ms tail at 100% busy.
                t_s: vec![1.0, 2.0, 3.0, 3.03],
                user: vec![vec![0.4, 0.2], vec![0.5, 0.2], vec![0.45, 0.2], vec![1.0, 1.0]],
                system: vec![vec![0.1; 2]; 4],
                softirq: vec![vec![0.0; 2]; 4],
                idle: vec![vec![0.5; 2]; 4],
            };
        }
        let page = render(&Input { title: "t".into(), sweep: None, groups: &g, climb: None });
        assert!(page.contains("3 intervals (1 short one(s) left out)"), "the tail");
        assert!(page.contains("user (peak 50%)"), "the tail's 100% is not the peak");
        let chart = &page[page.find("id=\"per-second-1\"").unwrap()..];
        let key = &chart[..chart.find("</p>").unwrap()];
        for (k, run) in g[0].runs.iter().enumerate() {
            let entry = format!(
                "<i style=\"background:{}\"></i>repeat {} (run {})",
                svg::colour(k),
                k + 1,
                run.row.id
            );
            assert!(key.contains(&entry), "{entry} in {key}");
        }
        assert_ne!(svg::colour(0), svg::colour(1));
    }

    #[test]
    fn a_profiled_run_shows_each_cpus_categories() {
        let mut g = groups();
        g[0].runs[0].facts.profile = vec![crate::store::CpuCategories {
            cpu: 0,
            samples: 1500,
            shares: [("tcp-transmit".to_string(), 0.314), ("user".to_string(), 0.148)].into(),
        }];
        let html = render(&Input { title: "p".into(), sweep: None, groups: &g, climb: None });
        assert_eq!(html.matches("<table class=\"profile\">").count(), 1);
        assert!(html.contains("<th>tcp-transmit</th>"), "a column per category");
        assert!(
            html.contains("<tr><td>0</td><td>1500</td><td>-</td><td>-</td><td>31.4%</td>"),
            "{}",
            &html[html.find("class=\"profile\"").unwrap()..][..600]
        );
    }
}
