//! The human summary of a load report, in wrk's layout, section by section.

use std::fmt::Write as _;

use super::{
    fmt_bytes, fmt_secs, fmt_us, plural, GrpcReport, H2Report, H3Report, Report, TlsReport,
};
use crate::config::GroupBy;

/// The whole summary.
pub(super) fn render(r: &Report) -> String {
    let mut s = String::new();
    header(r, &mut s);
    latency(r, &mut s);
    totals(r, &mut s);
    connections(r, &mut s);
    targets(r, &mut s);
    pool(r, &mut s);
    errors(r, &mut s);
    rate(r, &mut s);
    generator(r, &mut s);
    agents(r, &mut s);
    for t in &r.thresholds {
        let _ = writeln!(s, "{}", t.line());
    }
    if let Some(reason) = &r.check.reason {
        let _ = writeln!(s, "FAILED: {reason}");
    }
    s
}

/// `10.00s test @ URL` and the threads, connections and load model.
fn header(r: &Report, s: &mut String) {
    let c = &r.config;
    let _ = writeln!(
        s,
        "{} test @ {}{}{}",
        match c.requests {
            Some(n) => format!("{n}-request"),
            None => fmt_secs(c.duration_s.unwrap_or(r.duration_s)),
        },
        r.targets.join(", "),
        c.unix_socket.as_ref().map_or(String::new(), |p| format!(" via unix:{p}")),
        if r.stopped_early {
            format!(" (stopped early, after {})", fmt_secs(r.duration_s))
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        s,
        "  {} {} and {} connections, {}, {}{}{}",
        c.threads,
        plural(c.threads as u64, "thread", "threads"),
        c.connections,
        if r.rate.is_some() { "open loop" } else { "closed loop" },
        match (c.conn_per_request, c.rst_close) {
            (false, _) => "keep-alive",
            (true, false) => "a connection per request",
            (true, true) => "a connection per request, reset on close",
        },
        match (c.protocol, c.pipeline) {
            ("h2", n) => format!(", HTTP/2 with {n} {}", plural(n as u64, "stream", "streams")),
            ("h3", n) => format!(", HTTP/3 with {n} {}", plural(n as u64, "stream", "streams")),
            (_, 1) => String::new(),
            (_, n) => format!(", pipelined {n} deep"),
        },
        match c.linger_us {
            0 => String::new(),
            us if us % 1000 == 0 => format!(", answers batched for up to {}ms", us / 1000),
            us => format!(", answers batched for up to {us}us"),
        }
    );
}

/// The latency line and distribution.
fn latency(r: &Report, s: &mut String) {
    let l = &r.latency_us;
    let _ = writeln!(s, "  Latency     Avg       Stdev     Min       Max       +/- Stdev");
    let _ = writeln!(
        s,
        "            {:<9} {:<9} {:<9} {:<9} {:.2}%",
        fmt_us(l.mean),
        fmt_us(l.stdev),
        fmt_us(l.min as f64),
        fmt_us(l.max as f64),
        l.within_stdev * 100.0
    );
    let _ = writeln!(s, "  Latency Distribution");
    l.write_distribution(s);
    if let Some(st) = &r.stalls {
        let _ = writeln!(
            s,
            "  Stalls: {} {} without a response on any connection (each {} or longer) while requests waited: {} in all, {:.1}% of the run, the longest {} at {:.1}s; {} requests held through them",
            st.count,
            plural(st.count, "stretch", "stretches"),
            fmt_us(st.threshold_ms * 1e3),
            fmt_us(st.total_ms * 1e3),
            st.share_of_window * 100.0,
            fmt_us(st.longest_ms * 1e3),
            st.longest_at_s,
            st.requests_held
        );
    }
}

/// Requests and bytes, the rates, TOTALS, retries, setup and statuses.
fn totals(r: &Report, s: &mut String) {
    let q = &r.requests;
    let _ = writeln!(
        s,
        "  {} requests in {}, {} read, {} written",
        q.completed,
        fmt_secs(r.duration_s),
        fmt_bytes(r.bytes.read as f64),
        fmt_bytes(r.bytes.written as f64)
    );
    let _ = writeln!(s, "Requests/sec: {:.2}", r.throughput_rps);
    let transfer = if r.duration_s > 0.0 { r.bytes.read as f64 / r.duration_s } else { 0.0 };
    let _ = writeln!(s, "Transfer/sec: {}", fmt_bytes(transfer));
    let retried = if r.retries.after_announced_close > 0 {
        let why = if r.h2.is_some() { "after a GOAWAY" } else { "pipelined" };
        let n = r.retries.after_announced_close;
        if r.h2.is_some() {
            format!(", {n} requests retried {why}")
        } else {
            format!(", {n} {why} requests retried")
        }
    } else {
        String::new()
    };
    let carried = match q.from_warmup {
        0 => String::new(),
        n => format!(" ({n} sent in the warm-up)"),
    };
    let _ = writeln!(
        s,
        "TOTALS:  {} connect, {} requests{carried}, {} success, {} fail, {} in flight ({} reconnects{})",
        r.connections.connects,
        q.sent,
        q.ok,
        q.failed + q.bad_status,
        q.in_flight_at_stop,
        r.connections.reconnects,
        retried
    );
    let st = &r.connections.starved;
    if st.waited_over_p999 > 0 {
        let _ = writeln!(
            s,
            "Starved: {} connections waited longer than p99.9 ({}) for an answer at the stop, up to {}; {} of them got no response in the whole run",
            st.waited_over_p999,
            fmt_us(r.latency_us.p999 as f64),
            fmt_us(st.longest_wait_us as f64),
            st.unanswered
        );
    }
    if let Some(t) = &r.connections.tls {
        tls_lines(t, s);
    }
    if let Some(h) = &r.h2 {
        h2_lines(h, s);
    }
    if let Some(g) = &r.grpc {
        grpc_lines(g, s);
    }
    if let Some(h) = &r.h3 {
        h3_line(h, s);
    }
    let race = &r.retries;
    if race.closed_before_response > 0 {
        let _ = writeln!(
            s,
            "Retried: the server closed {} reused {} before responding (the keep-alive close \
             race); {} {} sent again on new connections, not counted as failed (--no-retry \
             counts them)",
            race.connections_closed_before_response,
            plural(race.connections_closed_before_response, "connection", "connections"),
            race.closed_before_response,
            plural(race.closed_before_response, "request was", "requests were"),
        );
    }
    if let Some(setup) = &r.setup {
        let _ = writeln!(s, "{}", setup.text());
    }
    if !r.status.is_empty() {
        let parts: Vec<String> = r.status.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        let _ = writeln!(s, "Status:  {}", parts.join(", "));
    }
}

/// The TLS line, and early data's when there was any.
fn tls_lines(t: &TlsReport, s: &mut String) {
    let _ = writeln!(
        s,
        "TLS:     {}{} full handshakes, {} resumed ({:.2}/s), handshake mean {}, p99 {}{}",
        t.negotiated.as_deref().map(|n| format!("{n}; ")).unwrap_or_default(),
        t.full_handshakes,
        t.resumed,
        t.handshakes_per_s,
        fmt_us(t.handshake_us.mean),
        fmt_us(t.handshake_us.p99 as f64),
        if t.insecure { "; certificates NOT verified (--insecure)" } else { "" }
    );
    if let Some(e) = &t.early_data {
        let _ = writeln!(
            s,
            "0-RTT:   early data taken on {} resumed handshakes, refused on {} (their requests \
             went again after the handshake)",
            e.accepted, e.refused
        );
    }
}

/// The HTTP/2 line, and what the flow-control windows held when they held anything.
fn h2_lines(h: &H2Report, s: &mut String) {
    let _ = writeln!(
        s,
        "HTTP/2:  {} {} per connection; header blocks {:.1} bytes per response, space \
         savings {:.1}%; server max streams {}, window {}; {} {}{}, {} refused streams",
        h.streams_per_connection,
        plural(h.streams_per_connection as u64, "stream", "streams"),
        h.header_bytes_per_response,
        h.hpack_space_savings * 100.0,
        h.server_max_concurrent_streams.map_or("unlimited".into(), |n| n.to_string()),
        h.server_initial_window.unwrap_or(qpslab_http::h2::frame::DEFAULT_WINDOW),
        h.goaways,
        plural(h.goaways, "GOAWAY", "GOAWAYs"),
        h.last_goaway.map(|c| format!(" (last {c})")).unwrap_or_default(),
        h.refused_streams,
    );
    if let Some(b) = &h.bodies_held {
        let _ = writeln!(
            s,
            "         request bodies held by the server's flow-control window: {} ({} first \
             on the connection's), {:.2} ms each, {:.1}% of the responses' time",
            b.requests,
            b.on_connection_window,
            b.mean_ms,
            b.share_of_latency * 100.0
        );
    }
    if h.responses_past_client_window > 0 {
        let _ = writeln!(
            s,
            "         responses larger than the window this side grants ({} bytes, \
             --window-bits): {}",
            h.client_window, h.responses_past_client_window
        );
    }
}

/// The gRPC line: calls by status and faults; the streams' messages; the checked answer.
fn grpc_lines(g: &GrpcReport, s: &mut String) {
    let codes: Vec<String> = g.status.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let faults: Vec<String> = g.faults.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(
        s,
        "gRPC:    {} {} {}: {}{}",
        g.calls,
        plural(g.calls, "call", "calls"),
        g.method,
        if codes.is_empty() { "none answered".into() } else { codes.join(", ") },
        if faults.is_empty() {
            String::new()
        } else {
            format!(
                "; found wrong here: {} (first: {})",
                faults.join(", "),
                g.fault_example.as_deref().unwrap_or("")
            )
        }
    );
    if let Some(st) = &g.streams {
        let _ = writeln!(
            s,
            "         streams: {} request {} a call ({:.0}/s), {} response messages ({:.1} a \
             call, {:.0}/s); between messages mean {}, p99 {}",
            st.request_messages_per_call,
            plural(u64::from(st.request_messages_per_call), "message", "messages"),
            st.request_messages_per_s,
            st.response_messages,
            st.response_messages_per_call,
            st.response_messages_per_s,
            fmt_us(st.message_gap_us.mean),
            fmt_us(st.message_gap_us.p99 as f64),
        );
    }
    if let Some(c) = &g.check_response {
        let verdict = match c.failure() {
            None => format!("the first OK answer is {}'s message", c.file),
            Some(why) => why,
        };
        let _ = writeln!(s, "         {verdict}");
    }
}

/// The HTTP/3 line: UDP's batching, loss, ACKs and the handshakes' CPU.
fn h3_line(h: &H3Report, s: &mut String) {
    let _ = writeln!(
        s,
        "HTTP/3:  {} {} per connection; UDP {:.1} datagrams per read call ({} GRO{}), {:.1} \
         per send call ({} GSO), {} dropped, datagrams of up to {} bytes; {} packets lost \
         ({} bytes), {} congestion \
         events; {} ACKs sent (one per {:.1} datagrams in), {} received{}",
        h.streams_per_connection,
        plural(h.streams_per_connection as u64, "stream", "streams"),
        h.datagrams_per_recv_call,
        h.gro_reads,
        if h.gro_reads > 0 {
            format!(", {:.1} datagrams each", h.segments_per_gro_read)
        } else {
            String::new()
        },
        h.datagrams_per_send_call,
        h.gso_sends,
        h.send_dropped,
        h.datagram_size,
        h.lost_packets,
        h.lost_bytes,
        h.congestion_events,
        h.acks_sent,
        h.datagrams_per_ack,
        h.acks_received,
        if h.handshake_cpu_us > 0.0 {
            format!("; handshake CPU {:.0}us each", h.handshake_cpu_us)
        } else {
            String::new()
        },
    );
}

/// A connection per request: connects per second and their latency; the port budget.
fn connections(r: &Report, s: &mut String) {
    let k = &r.connections;
    if r.config.conn_per_request {
        let _ = writeln!(
            s,
            "Connects/sec: {:.2}; connect latency p50 {} p99 {} max {} (apart from the request \
             latency above)",
            k.connects_per_s,
            fmt_us(k.connect_us.p50 as f64),
            fmt_us(k.connect_us.p99 as f64),
            fmt_us(k.connect_us.max as f64)
        );
    }
    let Some(b) = &r.port_budget else { return };
    if let Some(limit) = b.sustainable_cps.filter(|&l| k.connects_per_s > 0.8 * l) {
        let _ = writeln!(
            s,
            "Port budget: {:.0} connects/s to {} is near the {limit:.0}/s that {} source tuples \
             sustain with {:.0} s of TIME_WAIT; use --rst-close or a wider --source",
            k.connects_per_s, b.destination, b.tuples, b.hold_s
        );
    }
}

/// Per target, when there are several.
fn targets(r: &Report, s: &mut String) {
    if r.per_target.len() <= 1 {
        return;
    }
    let _ = writeln!(s, "Targets:");
    for t in &r.per_target {
        let _ = writeln!(
            s,
            "  {:>9} sent {:>9} ok {:>7} failed  {}{} {}{}",
            t.sent,
            t.ok,
            t.failed,
            t.name.as_ref().map_or(String::new(), |n| format!("{n}: ")),
            t.method,
            t.url,
            if t.weight != 1 { format!(" (weight {})", t.weight) } else { String::new() }
        );
    }
}

/// The `--urls` pool and its groups.
fn pool(r: &Report, s: &mut String) {
    let Some(p) = &r.pool else { return };
    let order = match p.seed {
        Some(seed) => format!("random:{seed} (--order random:{seed} replays it)"),
        None => p.order.to_string(),
    };
    let _ = writeln!(
        s,
        "Pool: {} requests from {} (sha256 {}), order {order}, {:.0} bytes encoded per request",
        p.size,
        p.file,
        &p.digest[..16.min(p.digest.len())],
        p.bytes_per_variant
    );
    let by = match p.group_by {
        None => "one group".to_string(),
        Some(GroupBy::Segments(n)) => format!("the first {n} path segment(s)"),
        Some(GroupBy::Name) => "name".to_string(),
    };
    let _ = writeln!(s, "  by {by}:");
    for g in &p.groups {
        let latency =
            g.latency_us.as_ref().filter(|_| g.completed > 0).map_or(String::new(), |l| {
                format!("  p50 {} p99 {}", fmt_us(l.p50 as f64), fmt_us(l.p99 as f64))
            });
        let _ = writeln!(
            s,
            "  {:>9} sent {:>9} ok {:>7} failed{latency}  {} ({} request(s))",
            g.sent, g.ok, g.failed, g.name, g.variants
        );
    }
}

/// Each error class that occurred, with its example.
fn errors(r: &Report, s: &mut String) {
    let errs: Vec<String> = r
        .errors
        .iter()
        .filter(|(_, &n)| n > 0)
        .map(|(k, n)| match r.error_examples.get(k) {
            Some(ex) => format!("{k}: {n} ({ex})"),
            None => format!("{k}: {n}"),
        })
        .collect();
    if !errs.is_empty() {
        let _ = writeln!(s, "Errors:  {}", errs.join(", "));
    }
}

/// Open loop: the schedule against what went, waits, both latencies and the send lag.
fn rate(r: &Report, s: &mut String) {
    let (Some(rate), Some(u), Some(lag)) = (&r.rate, &r.latency_uncorrected_us, &r.send_lag_us)
    else {
        return;
    };
    let target = if rate.ramp_s > 0.0 {
        format!("{:.0} -> {:.0}/s over {}", rate.start_rps, rate.target_rps, fmt_secs(rate.ramp_s))
    } else {
        format!("{:.0}/s", rate.target_rps)
    };
    let _ = writeln!(
        s,
        "Rate: target {target}, achieved {:.0}/s ({} of {} scheduled sent){}",
        rate.achieved_rps,
        r.requests.sent,
        rate.scheduled,
        if rate.kept {
            ""
        } else if rate.idle_at_stop > 0 {
            "; behind schedule with connections free: the generator could not keep up"
        } else {
            "; behind schedule with every connection busy: the target (or too few -c) set the pace"
        }
    );
    if rate.waited_for_connection > 0 {
        let _ = writeln!(
            s,
            "Waited for a free connection: {} of {} requests ({:.2}%) fell due with all {} \
             connections busy{}; their wait is in the latency and send lag (more -c keeps the \
             schedule through target stalls)",
            rate.waited_for_connection,
            r.requests.sent,
            100.0 * rate.waited_for_connection as f64 / r.requests.sent.max(1) as f64,
            r.config.connections,
            if r.h2.is_some() { " (every stream of each in use)" } else { "" }
        );
    }
    let _ = writeln!(
        s,
        "Latency corrected above; uncorrected (from the actual write): p50 {} p99 {} max {}",
        fmt_us(u.p50 as f64),
        fmt_us(u.p99 as f64),
        fmt_us(u.max as f64)
    );
    let _ = writeln!(
        s,
        "Send lag (write after its slot): p50 {} p90 {} p99 {} max {}",
        fmt_us(lag.p50 as f64),
        fmt_us(lag.p90 as f64),
        fmt_us(lag.p99 as f64),
        fmt_us(lag.max as f64)
    );
}

/// The generator's CPU, its busy and polling shares, and the verdict.
fn generator(r: &Report, s: &mut String) {
    let g = &r.generator;
    let _ = write!(
        s,
        "Generator: {:.2}s user + {:.2}s sys on {} {}, busy {:.1}%",
        g.cpu_user_s,
        g.cpu_sys_s,
        g.threads,
        plural(g.threads as u64, "thread", "threads"),
        g.busy_ratio * 100.0
    );
    if g.poll_s > 0.0 && r.duration_s > 0.0 {
        let share = g.poll_s / (r.duration_s * g.threads as f64);
        let _ = write!(s, " (+{:.1}% polling for events)", share * 100.0);
    }
    if r.config.linger_us > 0 && r.duration_s > 0.0 {
        let share = (g.linger_s / (r.duration_s * g.threads as f64)).min(1.0);
        let _ = write!(s, ", batching answers {:.0}% of the time", share * 100.0);
    }
    if let Some(why) = &g.verdict_reason {
        let _ = write!(s, ": not judged, {why}");
    } else if let Some(t) = g.throttled.as_ref().filter(|t| t.bounds()) {
        let _ = write!(
            s,
            ": generator-bound, held back by its cgroup's CPU quota ({}); the rate is only a \
             lower bound of the target's capacity: lift the limit, or add machines",
            t.describe()
        );
    } else if g.verdict == "generator-bound" {
        let _ = write!(
            s,
            ": generator-bound, the rate is only a lower bound of the target's capacity; add \
             generator threads (-t) or machines"
        );
    }
    s.push('\n');
}

/// A load over agents: a row per agent, how closely they started, and what is missing.
fn agents(r: &Report, s: &mut String) {
    let Some(rows) = &r.agents else { return };
    let skew = r.start.as_ref().map_or(String::new(), |t| {
        format!(", started within {:.2} ms of each other", t.skew_bound_ms)
    });
    let _ = writeln!(s, "Agents: {}{skew}", rows.len());
    let width = rows.iter().map(|a| a.host.len()).max().unwrap_or(4).max(4);
    let _ = writeln!(
        s,
        "  {:<width$}  {:<7} {:>7} {:>6} {:>12} {:>10} {:>8} {:>6}  {:<15} {:>9} {:>7}",
        "host",
        "status",
        "threads",
        "conns",
        "requests/s",
        "completed",
        "failed",
        "busy",
        "verdict",
        "late",
        "rtt"
    );
    for a in rows {
        let _ = writeln!(
            s,
            "  {:<width$}  {:<7} {:>7} {:>6} {:>12.1} {:>10} {:>8} {:>6}  {:<15} {:>7.2}ms {:>5.2}ms",
            a.host,
            a.status,
            a.threads,
            a.connections,
            a.throughput_rps,
            a.completed,
            a.failed,
            a.busy_ratio.map_or("-".into(), |b| format!("{:.1}%", b * 100.0)),
            a.verdict.as_deref().unwrap_or("-"),
            a.started_late_ms,
            a.rtt_ms
        );
    }
    if let Some(c) = &r.coordinator {
        let _ = writeln!(
            s,
            "Coordinator: {:.2}s CPU ({:.1}% of a core), {} per-second histograms merged, {:.0}us each",
            c.cpu_s,
            c.cpu_share * 100.0,
            c.intervals,
            c.merge_us_per_interval
        );
    }
    for a in rows.iter().filter(|a| a.status == "lost" || a.status == "failed") {
        let what = a.error.as_deref().unwrap_or("no word from it");
        let _ = writeln!(
            s,
            "PARTIAL: {} {} after {}: {what}; its {} responses up to then are not in the totals",
            a.host,
            a.status,
            fmt_secs(a.duration_s),
            a.completed
        );
    }
}
