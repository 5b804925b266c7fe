//! The rate explained: the request path as an inventory of resources, each with its use over
//! the window (a share of its capacity) and what one request cost it, and the operational laws
//! that tie them to the rate the load measured.
//!
//! - Little's law, in a closed loop: rate = requests in service / latency. The load knows how
//!   many requests it kept in flight (connections x streams or pipeline depth) and their mean
//!   latency; rate x latency says how many were in service on average. Fewer in service than
//!   the load kept open means connections spent the window without a request being answered
//!   (unserved, reconnecting, timing out).
//! - The utilization law: a resource's use = rate x its demand per request. The resource used
//!   closest to its capacity bounds the rate (1 / demand per unit of capacity); when none is
//!   near capacity, the latency does: the time a request spends that no resource's work
//!   accounts for is waiting (in the server, on the path, in queues).
//!
//! This module computes the figures and the chain of sentences that `doctor` and `bench` print;
//! the verdict ([`super::verdict`]) names the headline from the same figures. It owns no
//! threshold of its own beyond [`super::SATURATED`].

use serde::{Deserialize, Serialize};

use super::summary::{pct, Summary};
use super::{CPU_WAITS, SATURATED};
use qpslab_host::host::Host;
use qpslab_host::sample::Role;

/// What the load tells the doctor about the run it measured (`bench` knows it; `doctor --
/// COMMAND` does not, and explains by the counters alone).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadFacts {
    /// `closed`, `rate` (open loop) or `conn-per-request`.
    pub mode: String,
    /// Requests the load kept in flight at most: connections x streams or pipeline depth.
    pub concurrency: u64,
    /// Responses received in the window (ok and bad status).
    pub responses: u64,
    /// Responses with a status under 400 (or one `--accept-status` lists).
    pub ok: u64,
    /// Transport errors, timeouts and parse errors.
    pub failed: u64,
    /// Responses with a status of 400 or more that were not accepted.
    pub bad_status: u64,
    /// Responses by status code.
    #[serde(default)]
    pub statuses: std::collections::BTreeMap<String, u64>,
    /// A gRPC run: its calls by status name (`OK`, `UNAVAILABLE`, ...), the statuses its
    /// client read (their HTTP status is 200 whatever they say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_statuses: Option<std::collections::BTreeMap<String, u64>>,
    /// Mean latency of a response, in seconds.
    pub mean_latency_s: f64,
    /// Mean time to open a connection, in seconds (a connection per request pays it each time).
    #[serde(default)]
    pub mean_connect_s: f64,
    /// Connections opened again during the window (the server closed them, or errors did).
    pub reconnects: u64,
    /// Connections left waiting at the stop longer than the answered requests' p99.9, and of
    /// them those that got no response in the whole window.
    #[serde(default)]
    pub starved: u64,
    #[serde(default)]
    pub unanswered: u64,
    /// Connections the load kept.
    #[serde(default)]
    pub connections: u64,
    /// The path's own round trip, in seconds: the median over the load's connections of the
    /// kernel's smallest RTT (handshake included), without the server's time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_rtt_s: Option<f64>,
    /// The window's length, in seconds.
    pub duration_s: f64,
    /// Open loop: the schedule against what went out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// HTTP/2: the server's SETTINGS_MAX_CONCURRENT_STREAMS when it was below the streams
    /// asked per connection; `concurrency` is then connections x the server's limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_limit: Option<StreamLimit>,
    /// HTTP/2: the flow-control windows each side granted and what they held back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<FlowFacts>,
    /// Stretches with no response on any connection while requests waited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stalls: Option<StallFacts>,
    /// The responses' latency at its quantiles (0.5, 0.9, 0.99, 0.999, 0.9999, 1 for the
    /// maximum), in seconds: where a tail stands at a kernel timer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latency_tail: Vec<(f64, f64)>,
    /// The same of the connects made in the window (a handshake's SYN retransmitted waits 1 s).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connect_tail: Vec<(f64, f64)>,
    /// An https run's TLS handshakes in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsFacts>,
    /// An HTTP/3 run's datagrams (the run spoke UDP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic: Option<QuicFacts>,
}

/// An HTTP/3 run's own datagrams, as its generator counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuicFacts {
    pub datagrams_in: u64,
    pub datagrams_out: u64,
    /// Datagrams the generator's socket did not take (its send buffer full).
    pub send_dropped: u64,
}

/// The TLS handshakes of an https run, in the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TlsFacts {
    /// Handshakes done in full (certificate, key exchange) and resumed ones.
    pub full: u64,
    pub resumed: u64,
    /// The mean handshake, from the TCP connection open to the TLS handshake's end, in seconds.
    pub mean_s: f64,
}

/// An HTTP/2 run's flow control: the windows each side granted, and the request bodies the
/// server's held back before they were all sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowFacts {
    /// The server's SETTINGS_INITIAL_WINDOW_SIZE: what each stream may send it unasked.
    pub server_window: u64,
    /// Request bodies held, those first held by the connection's window (not their
    /// stream's), and their time held, as a share of all the responses' time from their write.
    pub held: u64,
    pub held_on_connection: u64,
    pub held_share: f64,
    /// The window the generator grants each stream, and the responses larger than it (the
    /// server needed the generator's WINDOW_UPDATEs to finish them).
    pub client_window: u64,
    pub past_client_window: u64,
}

impl FlowFacts {
    /// Whether the connection's window, not the streams', held most of the bodies held.
    pub fn by_connection(&self) -> bool {
        self.held_on_connection * 2 > self.held
    }

    /// The window that held the bodies, in words.
    pub fn holder(&self) -> String {
        if self.by_connection() {
            "the server's HTTP/2 connection window".into()
        } else {
            format!("the server's HTTP/2 stream window ({} bytes)", self.server_window)
        }
    }
}

/// Stretches of the window in which no response came on any connection while requests
/// waited (each at least `threshold_s`, holding two requests at least): the server stopped
/// as a whole.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StallFacts {
    pub count: u64,
    pub total_s: f64,
    pub longest_s: f64,
    /// `total_s` over the window.
    pub share: f64,
    /// Requests out through a whole stall, summed over the stalls.
    pub held: u64,
    pub threshold_s: f64,
}

impl StallFacts {
    /// `7 stops of 10 ms or longer with no response on any connection while requests waited:
    /// 1.41 s, 28% of the window, the longest 201 ms; 20 requests held through each`.
    pub fn describe(&self) -> String {
        format!(
            "{} stop{} of {} or longer with no response on any connection while requests waited: {:.2} s in all, {} of the window, the longest {}; {:.0} request(s) held through each",
            self.count,
            if self.count == 1 { "" } else { "s" },
            fmt_ms(self.threshold_s * 1e3),
            self.total_s,
            pct(self.share),
            fmt_ms(self.longest_s * 1e3),
            self.held as f64 / self.count.max(1) as f64
        )
    }
}

/// A server's HTTP/2 stream limit below the streams the load asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamLimit {
    /// Streams per connection the server allowed, and those asked.
    pub server: u64,
    pub asked: u64,
}

/// An open loop's schedule over the window: what was asked, what went out, and, when it fell
/// behind, who set the pace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// Requests a second asked for (at the end of a ramp).
    pub target_rps: f64,
    /// Requests a second sent in the window.
    pub achieved_rps: f64,
    /// At least 98% of the requests due were sent.
    pub kept: bool,
    /// Requests due and never sent when the run stopped.
    pub due_unsent: u64,
    /// The median delay of a send after its slot, in ms.
    pub lag_p50_ms: f64,
    /// Connections were free at the stop: the generator, not the target, fell behind.
    pub connections_free: bool,
}

impl LoadFacts {
    /// Responses per second over the window.
    pub fn rate(&self) -> f64 {
        if self.duration_s > 0.0 {
            self.responses as f64 / self.duration_s
        } else {
            0.0
        }
    }

    /// More responses failed or came back with a bad status than came back ok.
    pub fn failed_run(&self) -> bool {
        let bad = self.failed + self.bad_status;
        bad > 0 && bad > self.ok
    }

    /// The load paced itself (open loop) and kept its schedule: the schedule, not the path,
    /// set the rate.
    pub fn paced(&self) -> bool {
        self.mode == "rate" && self.schedule.as_ref().is_none_or(|s| s.kept)
    }

    /// An open loop that fell behind its schedule: the rate is not what was asked.
    pub fn behind_schedule(&self) -> Option<&Schedule> {
        self.schedule.as_ref().filter(|s| self.mode == "rate" && !s.kept)
    }
}

/// One resource on the request path over the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resource {
    /// What it is, e.g. `server CPU (qpslab pid 4242, CPU 0)`, `CPU 1`, `eth0 bandwidth`.
    pub name: String,
    /// `server-cpu`, `generator-cpu`, `cpu`, `link` (an interface's link speed) or `shaper`
    /// (a qdisc's configured rate).
    pub kind: String,
    /// The interface, for `link` and `shaper`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iface: Option<String>,
    /// The share of its capacity used over the window (1 = all of it).
    pub utilization: f64,
    /// The units of capacity (CPUs, bytes/s), for the text.
    pub used: String,
    /// What one response cost it, in milliseconds of its time (None when it has no
    /// per-request cost that adds to the latency, e.g. a link's capacity in bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ms_per_request: Option<f64>,
    /// Its saturation over the window, in words: work that had to wait for it (a quota's
    /// throttled periods, tasks waiting for a CPU, a queue's backlog). None when nothing
    /// waited that the samples show.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saturation: Option<String>,
    /// Its errors over the window: what it dropped or refused. None when nothing was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<String>,
}

impl Resource {
    /// Whether requests' work passes through it, so that its saturation can bound the rate
    /// (a CPU, a link, a shaper); a table that fills (descriptors, an accept queue) limits
    /// connections, not the rate, and has findings of its own.
    pub fn carries_work(&self) -> bool {
        !matches!(self.kind.as_str(), "descriptors" | "accept-queue")
    }
}

/// The rate explained, in numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    /// Responses per second.
    pub rate: f64,
    /// Requests the load kept in flight at most (closed loop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u64>,
    /// Mean latency, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
    /// Little's law: rate x latency, the requests in service on average.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_service: Option<f64>,
    /// Every resource measured, most used first.
    pub resources: Vec<Resource>,
    /// The resource used closest to its capacity, when it is saturated: it bounds the rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<String>,
    /// Of the mean latency, the milliseconds no measured resource's work accounts for: waiting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_ms: Option<f64>,
    /// Of the mean latency, the path's own round trip (the load's connections' smallest RTT),
    /// in milliseconds; the rest of the waiting is in the server and its queues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_ms: Option<f64>,
    /// The chain from the rate to the resource, one sentence a line.
    pub chain: Vec<String>,
}

/// The share of the load's concurrency below which connections were out of service.
pub const IN_SERVICE_LOW: f64 = 0.75;

impl Explanation {
    /// The resource that bounds the rate, when one is saturated.
    pub fn bound_resource(&self) -> Option<&Resource> {
        let name = self.bound.as_ref()?;
        self.resources.iter().find(|r| &r.name == name)
    }

    /// Requests in service as a share of the load's concurrency (closed loop only).
    pub fn in_service_share(&self) -> Option<f64> {
        Some(self.in_service? / self.concurrency.filter(|&n| n > 0)? as f64)
    }
}

/// The inventory of this run's resources, with their use: each followed side's CPU (against
/// what it may use), each CPU, and each interface with a known capacity that carried traffic.
pub fn inventory(
    host: &Host,
    s: &Summary,
    ctx: &super::Context,
    rate: Option<f64>,
) -> Vec<Resource> {
    let mut out = Vec::new();
    sides(s, rate, &mut out);
    for c in &s.cpus {
        out.push(Resource {
            name: format!("CPU {}", c.cpu),
            kind: "cpu".into(),
            iface: None,
            utilization: c.busy(),
            used: format!("softirq {}, irq {}", pct(c.softirq), pct(c.irq)),
            ms_per_request: None,
            saturation: s
                .cpu_pressure
                .filter(|&p| p >= 0.01)
                .map(|p| format!("tasks waited for a CPU {} of the window (all CPUs)", pct(p))),
            errors: None,
        });
    }
    links(host, s, ctx, &mut out);
    shapers(s, ctx, &mut out);
    accept_queues(s, &mut out);
    out.sort_by(|a, b| b.utilization.total_cmp(&a.utilization));
    out
}

/// Each followed side's CPU against what it may use (its busiest process speaks for it), what
/// a response cost it, the periods its quota held it back; and its descriptor table.
fn sides(s: &Summary, rate: Option<f64>, out: &mut Vec<Resource>) {
    let per_request = |cpus: f64| rate.filter(|&r| r > 0.0).map(|r| cpus / r * 1e3);
    for role in [Role::Server, Role::Client] {
        let procs: Vec<_> = s.processes.iter().filter(|p| p.role == role).collect();
        let busiest = procs.iter().max_by(|a, b| a.busy_ratio.total_cmp(&b.busy_ratio));
        let Some(p) = busiest else { continue };
        let cpu: f64 = procs.iter().map(|p| p.cpu).sum();
        let side = if role == Role::Server { "server" } else { "generator" };
        let on = p.cpus.as_ref().map_or(String::new(), |c| format!(", {}", c.named()));
        let throttled =
            procs.iter().filter_map(|p| p.throttling.as_ref()).find(|t| t.throttled_periods > 0);
        out.push(Resource {
            name: format!("{side} CPU ({} pid {}{on})", p.comm, p.pid),
            kind: format!("{side}-cpu"),
            iface: None,
            utilization: p.busy_ratio,
            used: format!("{cpu:.2} CPUs"),
            ms_per_request: per_request(cpu),
            saturation: throttled.map(|t| {
                format!(
                    "held back by its CPU quota ({}) in {} of periods, {:.2} s",
                    t.quota,
                    pct(t.share()),
                    t.throttled_s
                )
            }),
            errors: None,
        });
        descriptors(&procs, side, out);
    }
}

/// Each interface on the path with a known link speed that carried traffic.
fn links(host: &Host, s: &Summary, ctx: &super::Context, out: &mut Vec<Resource>) {
    for i in s.interfaces.iter().filter(|i| ctx.on_path(&i.name)) {
        let Some(nic) = host.nics.iter().find(|n| n.name == i.name) else { continue };
        let Some(mbps) = nic.speed_mbps.filter(|&m| m > 0) else { continue };
        let cap = mbps as f64 * 1e6 / 8.0;
        let bytes = i.rx_bytes_per_s.max(i.tx_bytes_per_s);
        if bytes <= 0.0 {
            continue;
        }
        out.push(Resource {
            name: format!("{} link ({mbps} Mb/s)", i.name),
            kind: "link".into(),
            iface: Some(i.name.clone()),
            utilization: bytes / cap,
            used: format!("{:.1} MB/s", bytes / 1e6),
            ms_per_request: None,
            saturation: s
                .qdiscs
                .iter()
                .find(|q| q.iface == i.name && q.root && q.backlog_max > 0)
                .map(|q| format!("its {} queue held up to {} bytes", q.kind, q.backlog_max)),
            errors: (i.rx_drop + i.tx_drop > 0)
                .then(|| format!("{} received and {} sent packets dropped", i.rx_drop, i.tx_drop)),
        });
    }
}

/// Each shaping qdisc on the path that passed traffic: its rate is its interface's capacity
/// on the way out.
fn shapers(s: &Summary, ctx: &super::Context, out: &mut Vec<Resource>) {
    for q in s.qdiscs.iter().filter(|q| ctx.on_path(&q.iface)) {
        let Some(rate) = q.rate_bytes_per_s.filter(|&r| r > 0) else { continue };
        if q.bytes_per_s <= 0.0 {
            continue;
        }
        out.push(Resource {
            name: format!(
                "{} egress, shaped by {} to {}",
                q.iface,
                q.kind,
                fmt_bits(rate as f64 * 8.0)
            ),
            kind: "shaper".into(),
            iface: Some(q.iface.clone()),
            utilization: q.bytes_per_s / rate as f64,
            used: fmt_bits(q.bytes_per_s * 8.0),
            ms_per_request: None,
            saturation: (q.overlimits > 0 || q.backlog_max > 0).then(|| {
                format!(
                    "held packets back {} times, backlog up to {} bytes",
                    q.overlimits, q.backlog_max
                )
            }),
            errors: (q.drops > 0).then(|| format!("{} packets dropped", q.drops)),
        });
    }
}

/// Each side's descriptor table against its limit (the fullest process of the side).
fn descriptors(procs: &[&super::ProcSummary], side: &str, out: &mut Vec<Resource>) {
    let fullest = procs
        .iter()
        .filter_map(|p| Some((p, p.open_fds? as f64 / p.nofile_soft.filter(|&n| n > 0)? as f64)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let Some((p, used)) = fullest else { return };
    out.push(Resource {
        name: format!("{side} descriptors ({} pid {})", p.comm, p.pid),
        kind: "descriptors".into(),
        iface: None,
        utilization: used,
        used: format!(
            "{} open of {}",
            p.open_fds.unwrap_or(0),
            p.nofile_soft.map_or("-".into(), |n| n.to_string())
        ),
        ms_per_request: None,
        saturation: None,
        errors: None,
    });
}

/// Listeners whose accept queue held connections at the window's end, with the host's
/// dropped connection attempts as their errors.
fn accept_queues(s: &Summary, out: &mut Vec<Resource>) {
    let d = |k: &str| s.tcp.get(k).copied().unwrap_or(0).max(0);
    let dropped = d("ListenOverflows").max(d("ListenDrops"));
    for q in &s.listen_queues {
        out.push(Resource {
            name: format!("accept queue of {} ({})", q.local, q.holders.join(", ")),
            kind: "accept-queue".into(),
            iface: None,
            utilization: q.queued as f64 / q.backlog.max(1) as f64,
            used: format!("{} of {} waiting to be accepted", q.queued, q.backlog),
            ms_per_request: None,
            saturation: (q.queued > 0)
                .then(|| format!("{} connections waited to be accepted at the end", q.queued)),
            errors: (dropped > 0)
                .then(|| format!("{dropped} connection attempts dropped (host-wide)")),
        });
    }
}

/// The rate explained from the summary and, when the load ran in-process, its facts.
pub fn explain(host: &Host, s: &Summary, ctx: &super::Context) -> Explanation {
    let load = ctx.load.as_ref();
    // A CPU busy with work nobody waited behind (PSI) bounds nothing on the request path.
    let waited = s.cpu_pressure.is_none_or(|p| p >= CPU_WAITS);
    let rate = load.map_or_else(
        || s.intervals.iter().map(|i| i.pps).sum::<f64>() / s.intervals.len().max(1) as f64,
        LoadFacts::rate,
    );
    let resources = inventory(host, s, ctx, load.map(|_| rate));
    if let Some(l) = load.filter(|l| l.failed_run()) {
        // The rate of errors is not the target's: nothing to explain it by.
        return Explanation {
            rate,
            concurrency: None,
            latency_ms: None,
            in_service: None,
            resources,
            bound: None,
            waiting_ms: None,
            path_ms: None,
            chain: vec![format!(
                "the run failed: {rate:.0} responses/s, {:.0} of them ok; a rate of errors and bad statuses is not explained",
                l.ok as f64 / l.duration_s.max(1e-9)
            )],
        };
    }
    let bound = resources.iter().find(|r| bounds(r, waited)).map(|r| r.name.clone());
    let what = if load.is_some() { "responses/s" } else { "packets/s (no load facts)" };
    let mut chain = Vec::new();
    if let Some(b) = load.and_then(LoadFacts::behind_schedule) {
        chain.push(behind_line(rate, b));
    }
    // An open loop behind its schedule with every connection busy ran as a closed loop does:
    // Little's law explains its rate (from the latency of the sends, not of the slots).
    let closed = load.filter(|l| !l.paced() && l.mean_latency_s > 0.0);
    let latency_ms = load.map(|l| (l.mean_latency_s + l.mean_connect_s) * 1e3);
    let in_service = closed.map(|l| rate * (l.mean_latency_s + l.mean_connect_s));
    match (closed, in_service, latency_ms) {
        (Some(l), Some(n), Some(ms)) => chain.push(format!(
            "{rate:.0} {what} = {n:.1} requests in service / {} (Little's law); the load kept {} in flight{}{}",
            fmt_ms(ms),
            l.concurrency,
            l.stream_limit.map(|k| format!(" (the server's HTTP/2 limit: {} stream(s) per connection of the {} asked)", k.server, k.asked)).unwrap_or_default(),
            if l.concurrency > 0 { format!(", {} of them in service", pct(n / l.concurrency as f64)) } else { String::new() }
        )),
        _ => match load {
            Some(l) if l.paced() => chain.push(format!(
                "{rate:.0} {what}, paced by the load's schedule (open loop): the rate is what was asked, the latency {} what it cost",
                latency_ms.map_or("-".into(), fmt_ms)
            )),
            _ => chain.push(format!("{rate:.0} {what} over {:.1} s", s.duration_s)),
        },
    }
    let spent: f64 = resources.iter().filter_map(|r| r.ms_per_request).sum();
    let waiting_ms = closed.and(latency_ms).map(|ms| (ms - spent).max(0.0));
    let path_ms = load.and_then(|l| l.path_rtt_s).map(|s| s * 1e3);
    chain.extend(costs_line(&resources));
    chain.extend(load.and_then(|l| flow_line(l, latency_ms)));
    // A saturated generator reads no response while it is busy elsewhere (connecting,
    // sending): its own turns read as stops, which are then not the server's to claim.
    let generator_bound = resources.iter().any(|r| r.kind == "generator-cpu" && bounds(r, waited));
    chain.extend(load.and_then(|l| l.stalls).map(|s| match generator_bound {
        false => format!("the server stopped: {}", s.describe()),
        true => format!(
            "stretches without a response, the generator saturated (its own busy turns read so; the server's stops cannot be told from them): {}",
            s.describe()
        ),
    }));
    chain.push(match &bound {
        Some(_) => bound_line(&resources, waited),
        None => {
            // Of the waiting, request bodies held by the server's HTTP/2 window.
            let held_ms = load.and_then(|l| l.flow).map(|f| f.held_share).zip(latency_ms);
            let waits = Waits { waiting_ms, path_ms, held_ms: held_ms.map(|(h, ms)| h * ms) };
            unsaturated_line(s, &resources, spent, latency_ms, waits)
        }
    });
    Explanation {
        rate,
        concurrency: closed.map(|l| l.concurrency),
        latency_ms,
        in_service,
        resources,
        bound,
        waiting_ms,
        path_ms,
        chain,
    }
}

/// `2823 responses/s where 4000 a second were asked (open loop): the schedule was not met ...`
fn behind_line(rate: f64, b: &Schedule) -> String {
    format!(
        "{rate:.0} responses/s where {:.0} a second were asked (open loop): the schedule was not met ({:.0} sent a second, {} due and never sent, send lag p50 {}); {}",
        b.target_rps,
        b.achieved_rps,
        b.due_unsent,
        fmt_ms(b.lag_p50_ms),
        if b.connections_free {
            "connections were free: the generator did not keep up"
        } else {
            "every connection was busy waiting on the target: it, or too few connections (-c), set the pace"
        }
    )
}

/// A resource that bounds the rate: saturated, carrying requests' work, and, for a CPU, with
/// tasks that waited for it.
fn bounds(r: &Resource, waited: bool) -> bool {
    r.utilization >= SATURATED && r.carries_work() && (waited || r.kind != "cpu")
}

/// `per response: server CPU (...) 0.007 ms (96% of its capacity), ...`, when a resource has a
/// cost per response.
fn costs_line(resources: &[Resource]) -> Option<String> {
    let parts: Vec<String> = resources
        .iter()
        .filter_map(|r| {
            let ms = r.ms_per_request?;
            Some(format!("{} {} ({} of its capacity)", r.name, fmt_ms(ms), pct(r.utilization)))
        })
        .collect();
    (!parts.is_empty()).then(|| format!("per response: {}", parts.join(", ")))
}

/// The saturated resources, named as the bound.
fn bound_line(resources: &[Resource], waited: bool) -> String {
    let saturated: Vec<String> = resources
        .iter()
        .filter(|r| bounds(r, waited))
        .map(|r| {
            let extra: Vec<&str> =
                [&r.saturation, &r.errors].into_iter().flatten().map(String::as_str).collect();
            let extra =
                if extra.is_empty() { String::new() } else { format!("; {}", extra.join("; ")) };
            format!("{} at {} of its capacity ({}{extra})", r.name, pct(r.utilization), r.used)
        })
        .collect();
    format!(
        "the bound: {}: more of {} is what more rate needs",
        saturated.join("; "),
        if saturated.len() == 1 { "it" } else { "them" }
    )
}

/// No resource saturated: where the latency went (the sides' CPU work in turn, or waiting).
/// What a response's time went to besides the resources' work: the waiting in all, the
/// path's own round trip, and request bodies held by the server's HTTP/2 window (ms).
struct Waits {
    waiting_ms: Option<f64>,
    path_ms: Option<f64>,
    held_ms: Option<f64>,
}

fn unsaturated_line(
    s: &Summary,
    resources: &[Resource],
    spent: f64,
    latency_ms: Option<f64>,
    waits: Waits,
) -> String {
    let Waits { waiting_ms, path_ms, held_ms } = waits;
    let top = resources.iter().find(|r| r.carries_work()).map_or("nothing measured".into(), |r| {
        format!("the most used, {}, at {}", r.name, pct(r.utilization))
    });
    match (waiting_ms, latency_ms) {
        (Some(w), Some(ms)) if ms > 0.0 && w < 0.1 * ms => format!(
            "no resource saturated ({top}): the CPU work per response, {} in all, covers the whole {} round trip: the sides work in turn, each waiting for the other, so more requests in flight, not faster CPUs, raise the rate",
            fmt_ms(spent),
            fmt_ms(ms)
        ),
        (Some(w), Some(ms)) if ms > 0.0 => format!(
            "no resource saturated ({top}): of {} per response, {} is no measured resource's work but waiting{}{}",
            fmt_ms(ms),
            fmt_ms(w),
            where_waited(w, path_ms, held_ms.filter(|h| *h > 0.0)),
            s.cpu_pressure.map_or(String::new(), |p| format!("; tasks waited for a CPU {} of the window", pct(p)))
        ),
        _ => format!("no resource saturated ({top})"),
    }
}

/// Where the waiting went: request bodies held by the server's HTTP/2 window (when any
/// were), the path's own round trip (when measured) and the rest, in the server and its
/// queues.
fn where_waited(waiting_ms: f64, path_ms: Option<f64>, held_ms: Option<f64>) -> String {
    let held = held_ms.map_or(0.0, |h| h.min(waiting_ms));
    let window = held_ms.map_or(String::new(), |_| {
        format!("{} request bodies held by the server's HTTP/2 window, ", fmt_ms(held))
    });
    match path_ms {
        Some(p) => {
            let path = p.min(waiting_ms - held);
            format!(
                ": {window}{} on the path (its round trip, the smallest the kernel saw on the load's connections), {} in the server and its queues",
                fmt_ms(path),
                fmt_ms(waiting_ms - held - path)
            )
        }
        None if held_ms.is_some() => {
            format!(": {window}{} in the server, on the path, in queues", fmt_ms(waiting_ms - held))
        }
        None => " (in the server, on the path, in queues)".into(),
    }
}

/// HTTP/2's flow control as evidence, when a window held anything back: `request bodies
/// were held by the server's HTTP/2 stream window (65535 bytes) 93% of the responses' time
/// (...)`, and responses past the window the generator grants.
fn flow_line(l: &LoadFacts, latency_ms: Option<f64>) -> Option<String> {
    let f = l.flow?;
    let mut parts = Vec::new();
    if f.held > 0 {
        parts.push(format!(
            "{} request bod{} held by {} before all was sent: {} of the responses' time{}",
            f.held,
            if f.held == 1 { "y was" } else { "ies were" },
            f.holder(),
            pct(f.held_share),
            latency_ms.map_or(String::new(), |ms| format!(
                " ({} of the {} per response)",
                fmt_ms(ms * f.held_share),
                fmt_ms(ms)
            ))
        ));
    }
    if f.past_client_window > 0 {
        parts.push(format!(
            "{} response(s) were larger than the {} bytes a stream the generator grants (--window-bits): the server needed its WINDOW_UPDATEs to finish them (a wait, when they came later than a round trip)",
            f.past_client_window, f.client_window
        ));
    }
    (!parts.is_empty()).then(|| format!("HTTP/2 flow control: {}", parts.join("; ")))
}

/// Bits per second as a link is named: `10.0 Mbit/s`, `1.00 Gbit/s`.
pub fn fmt_bits(bits: f64) -> String {
    if bits >= 1e9 {
        format!("{:.2} Gbit/s", bits / 1e9)
    } else if bits >= 1e6 {
        format!("{:.1} Mbit/s", bits / 1e6)
    } else {
        format!("{:.0} kbit/s", bits / 1e3)
    }
}

/// Milliseconds with the precision a reader wants: `20.3 ms`, `0.045 ms`.
pub fn fmt_ms(ms: f64) -> String {
    if ms >= 10.0 {
        format!("{ms:.1} ms")
    } else if ms >= 0.1 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.3} ms")
    }
}
