//! The one-screen text summary of a bench.

use std::fmt::Write as _;

use qpslab_host::CpuSet;

use crate::bench::BenchReport;

/// The one-screen summary of a bench.
pub fn render_text(r: &BenchReport) -> String {
    let mut o = String::new();
    let l = &r.load;
    let ms = qpslab_runs::compare::fmt_us;
    let _ = writeln!(o, "target      {}", target_line(r));
    o.push_str(&path_lines(r));
    if let Some(h) = &r.server_host {
        let _ = writeln!(
            o,
            "server host {} ({}): the target's host; the doctor ran there",
            h.name, h.hostname
        );
    }
    if let Some(p) = &l.pool {
        let order = p.seed.map_or(p.order.to_string(), |s| format!("random:{s}"));
        let _ = writeln!(
            o,
            "pool        {} requests from {} (sha256 {}), order {order}, in {} group(s)",
            p.size,
            p.file,
            &p.digest[..16.min(p.digest.len())],
            p.groups.len()
        );
        o.push_str(&route_lines(p));
    }
    o.push_str(&generator_lines(r));
    let _ = writeln!(
        o,
        "throughput  {:.0} requests/s ({} ok, {} failed, {} bad status){}",
        l.throughput_rps,
        l.requests.ok,
        l.requests.failed,
        l.requests.bad_status,
        schedule_note(l)
    );
    let lat = &l.latency_us;
    let _ = writeln!(
        o,
        "latency     p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
        ms(lat.p50),
        ms(lat.p90),
        ms(lat.p99),
        ms(lat.p999),
        ms(lat.max)
    );
    o.push_str(&connection_lines(l));
    let server = r.server_cpu.map_or("not followed".to_string(), |c| format!("{c:.2} CPUs"));
    let _ = writeln!(o, "cpu         server {server}, generator {:.2} CPUs", r.generator_cpu);
    if let Some(per) = r.requests_per_server_cpu_s {
        let _ = writeln!(o, "efficiency  {per:.0} requests per server CPU-second");
    }
    for note in &r.notes {
        let _ = writeln!(o, "note        {note}");
    }
    o.push_str(&trust_lines(r));
    o.push_str(&qpslab_doctor::render::explanation_text(&r.doctor));
    o.push_str(&checks_text(l));
    o.push_str(&qpslab_doctor::render::profile_text(&r.doctor));
    o.push_str(&qpslab_doctor::render::findings_text(&r.doctor.findings));
    o
}

/// `behind it` lines: what the server passes requests to, followed as the server.
fn path_lines(r: &BenchReport) -> String {
    let mut o = String::new();
    for u in &r.target.path {
        let pids: Vec<String> = u.pids.iter().map(ToString::to_string).collect();
        let _ = writeln!(
            o,
            "behind it   {} {} on {} ({}): on the request path, counted as the server",
            u.comm,
            pids.join(", "),
            u.addr,
            if u.found_by == "connections" {
                "the server held connections to it".to_string()
            } else {
                format!("from {}", u.found_by)
            }
        );
    }
    o
}

/// The generator's line, and one per agent of a load over agents.
fn generator_lines(r: &BenchReport) -> String {
    let mut o = String::new();
    let l = &r.load;
    let list = |v: &[usize]| v.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
    match &l.agents {
        None => {
            let _ = writeln!(
                o,
                "generator   qpslab load, {} thread(s) on CPU {}, {} connections{}, {:.1}s{}{}",
                l.config.threads,
                list(&r.generator_cpus),
                l.config.connections,
                h2_streams(l),
                l.duration_s,
                stopped(l),
                if r.cpus_shared { " (sharing the server's CPUs: figures compete)" } else { "" }
            );
        }
        Some(rows) => {
            let _ = writeln!(
                o,
                "generator   qpslab load on {} agents, {} thread(s), {} connections{}, {:.1}s{}{}",
                rows.len(),
                l.config.threads,
                l.config.connections,
                h2_streams(l),
                l.duration_s,
                stopped(l),
                l.start.as_ref().map_or(String::new(), |s| format!(
                    ", started within {:.2} ms",
                    s.skew_bound_ms
                ))
            );
            for a in rows {
                let _ = writeln!(
                    o,
                    "  agent     {}: {}, {:.0} requests/s, {} failed, busy {}, {}",
                    a.host,
                    a.status,
                    a.throughput_rps,
                    a.failed,
                    a.busy_ratio.map_or("-".into(), |b| format!("{:.0}%", b * 100.0)),
                    a.verdict.as_deref().or(a.error.as_deref()).unwrap_or("-")
                );
            }
        }
    }
    o
}

/// Routes shown in the summary, slowest first; the JSON has every group.
const ROUTES_SHOWN: usize = 10;

/// A line per group of the pool (a route), slowest p99 first, when there are several: where
/// an application spends its time differs by route.
fn route_lines(p: &qpslab_load::report::PoolReport) -> String {
    if p.groups.len() < 2 {
        return String::new();
    }
    let mut groups: Vec<_> = p.groups.iter().collect();
    let p99 = |g: &qpslab_load::report::PoolGroup| g.latency_us.as_ref().map_or(0, |l| l.p99);
    groups.sort_by_key(|g| std::cmp::Reverse(p99(g)));
    let ms = qpslab_runs::compare::fmt_us;
    let mut o = String::new();
    for g in groups.iter().take(ROUTES_SHOWN) {
        let latency = g
            .latency_us
            .as_ref()
            .filter(|_| g.completed > 0)
            .map_or("no response".to_string(), |l| {
                format!("p50 {}  p99 {}  max {}", ms(l.p50), ms(l.p99), ms(l.max))
            });
        let _ = writeln!(o, "route       {}: {} ok, {} failed, {latency}", g.name, g.ok, g.failed);
    }
    if groups.len() > ROUTES_SHOWN {
        let _ =
            writeln!(o, "route       and {} more (the JSON has them)", groups.len() - ROUTES_SHOWN);
    }
    o
}

/// The `trust` line of a disturbed run, and the `drain` lines worth saying.
fn trust_lines(r: &BenchReport) -> String {
    let mut o = String::new();
    if r.marks.contains(&"disturbed") {
        let _ = writeln!(
            o,
            "trust       DISTURBED: the doctor found the run held back by what is not the benchmark (see the warnings); compare leaves it out of its verdict"
        );
    }
    for (when, d) in [("before the run", &r.drain_before), ("after the run", &r.drain_after)] {
        if let Some(line) = d.as_ref().and_then(|d| drain_line(when, d)) {
            let _ = writeln!(o, "drain       {line}");
        }
    }
    o
}

/// What probing the target found, when worth saying: a backlog waited for, or one that did
/// not clear.
pub fn drain_line(when: &str, d: &crate::drain::Drain) -> Option<String> {
    if !d.notable() {
        return None;
    }
    let probes = format!(
        "{} probe{}: the first answered in {:.0} ms, the last in {:.0} ms",
        d.probes,
        if d.probes == 1 { "" } else { "s" },
        d.first_ms,
        d.settled_ms
    );
    Some(if d.drained {
        let whose = if when.starts_with("before") { "an earlier load's" } else { "this run's" };
        format!(
            "{when}: waited {:.2} s for the target to answer a probe in its normal time (it was answering {whose} queued requests; {probes})",
            d.waited_s
        )
    } else {
        format!(
            "{when}: the target did not answer a probe in its normal time ({}; {probes}){}",
            d.note.as_deref().unwrap_or("it never settled"),
            if when.starts_with("before") { "; the run started on a busy target" } else { "" }
        )
    })
}

/// A line per `--threshold`, then why the run failed its checks.
fn checks_text(l: &qpslab_load::Report) -> String {
    let mut o = String::new();
    for t in &l.thresholds {
        let _ = writeln!(o, "threshold   {}", t.verdict());
    }
    if let Some(reason) = l.check.reason.as_deref().filter(|_| !l.check.passed) {
        let _ = writeln!(o, "FAILED      {reason}");
    }
    o
}

/// The `setup` line (connections opened before the measured window) and the `connections`
/// line (reconnects per second: a server closing connections shows here).
fn connection_lines(l: &qpslab_load::report::Report) -> String {
    use std::fmt::Write as _;
    let ms = qpslab_runs::compare::fmt_us;
    let mut o = String::new();
    if let Some(setup) = &l.setup {
        let _ = writeln!(
            o,
            "setup       {} connections opened in {}, before the measured window (the doctor's counters leave it out){}",
            setup.opened,
            ms((setup.duration_s * 1e6) as u64),
            if setup.failed > 0 { format!("; {} could not open", setup.failed) } else { String::new() }
        );
    }
    let c = &l.connections;
    let _ = writeln!(
        o,
        "connections {} opened, {} reconnects ({:.0}/s){}",
        c.connects,
        c.reconnects,
        c.reconnects as f64 / l.duration_s.max(1e-9),
        if l.config.conn_per_request { ", a connection per request" } else { "" }
    );
    o
}

/// `builtin server on URL (1 worker(s) on CPU 0)`, or the URL and the server found behind it.
/// ` (stopped early by a signal)` when Ctrl-C or SIGTERM ended the measured window.
fn stopped(l: &qpslab_load::report::Report) -> &'static str {
    if l.stopped_early {
        " (stopped early by a signal)"
    } else {
        ""
    }
}

/// `, HTTP/2 (N streams each)` when the load spoke HTTP/2 (HTTP/3 alike).
fn h2_streams(l: &qpslab_load::report::Report) -> String {
    let name = match l.config.protocol {
        "h2" => "HTTP/2",
        "h3" => "HTTP/3",
        _ => return String::new(),
    };
    let n = l.config.pipeline;
    format!(", {name} ({n} stream{} each)", if n == 1 { "" } else { "s" })
}

fn target_line(r: &BenchReport) -> String {
    let t = &r.target;
    let list = |v: &[usize]| CpuSet::from_iter(v.iter().copied()).to_list();
    let comm =
        |pid: u32| r.doctor.summary.processes.iter().find(|p| p.pid == pid).map(|p| p.comm.clone());
    match (t.kind, t.found_by) {
        ("url", None) => t.url.clone(),
        ("url", Some(how)) => {
            let behind: Vec<u32> = t.path.iter().flat_map(|u| u.pids.iter().copied()).collect();
            let procs: Vec<String> = t
                .pids
                .iter()
                .filter(|p| !behind.contains(p))
                .map(|&p| comm(p).map_or(format!("pid {p}"), |c| format!("{c} {p}")))
                .collect();
            let how = if how == "listening" { "found listening" } else { "given" };
            let on = if t.cpus.is_empty() {
                String::new()
            } else {
                format!(", on CPU {}", list(&t.cpus))
            };
            format!("{} (server {how}: {}{on})", t.url, procs.join(", "))
        }
        (kind, _) => format!(
            "{kind} server on {} ({} worker(s) on CPU {}{})",
            t.url,
            t.workers.unwrap_or(t.cpus.len()),
            list(&t.cpus),
            t.accept
                .filter(|a| *a != "reuseport")
                .map_or(String::new(), |a| format!(", accept {a}"))
        ),
    }
}

/// `; behind its schedule: 4000 a second asked, 3303 sent` for an open loop that fell behind.
pub fn schedule_note(l: &qpslab_load::Report) -> String {
    match &l.rate {
        Some(r) if !r.kept => format!(
            "; BEHIND ITS SCHEDULE: {:.0} a second asked, {:.0} sent, {} due never sent",
            r.target_rps, r.achieved_rps, r.due_unsent
        ),
        _ => String::new(),
    }
}
