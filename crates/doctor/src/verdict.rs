//! The verdict: what bounded the rate. A side (server or generator) is saturated when its
//! processes use at least [`SATURATED`] of the CPUs their busy threads may run on, or when those
//! CPUs are that busy whoever uses them. When no side is saturated, the rate is explained by
//! Little's law ([`super::explain`]): a closed loop is latency-bound, an open loop paced by its
//! schedule. Other work on the CPUs, or a CPU full of it, is the headline only when it explains
//! the rate: a side held back by CPUs full of other work, or tasks waiting for a CPU (PSI) for
//! [`CPU_WAITS`] of the window or more, unless the run's own threads' waits (schedstat) are too
//! short to have made the rate; otherwise it is said as `info`. A run with no response,
//! too short, or failed gets no bound at all.

use super::explain::{
    fmt_ms, Explanation, FlowFacts, LoadFacts, StallFacts, StreamLimit, IN_SERVICE_LOW,
};
use super::summary::{pct, CpuShare, ProcSummary, Summary};
use super::{
    Cause, Context, Finding, Generator, Severity, CONTENDED_CPU, CONTENDED_SHARE, CPU_WAITS,
    FLAT_CV, HEADROOM_IDLE, MIN_INTERVALS, MIN_WINDOW_S, SATURATED,
};
use qpslab_host::cpuset::CpuSet;
use qpslab_host::sample::Role;

/// Adds the verdict findings: the bound first, then what did not explain the rate.
pub(super) fn bound(s: &Summary, ctx: &Context, ex: &Explanation, out: &mut Vec<Finding>) {
    if let Some(f) = unjudgeable(s, ctx) {
        out.push(f);
        return;
    }
    // A limit that answered the rest is the headline: not a failure, and when most answers
    // were its, no bound either (the rate of its fast answers measures nothing).
    if let Some(f) = rate_limited(ctx) {
        out.push(f);
        if ctx.load.as_ref().is_some_and(|l| l.failed_run()) {
            return;
        }
    } else if let Some(f) = failed_run(s, ctx) {
        out.push(f);
        return;
    }
    // A quota that held a side back heads that side's verdict: it is the cause.
    out.extend(throttled(s));
    let sides = Sides::new(s, ctx);
    let waits = cpu_waits(s, &sides) && !waits_too_short(&sides);
    let explains = sides.contended && (sides.held_by_cpus(s) || (!sides.any_sat() && waits));
    if explains {
        out.extend(contention(s, &sides, Severity::Warning));
    }
    if waits || sides.any_sat() {
        out.extend(shared_cpus(s, &sides));
    }
    out.extend(saturation(s, &sides, ctx));
    let link = if sides.any_sat() { None } else { super::network::link_saturated(s, ctx, ex) };
    let bound_by_link = link.is_some();
    out.extend(link);
    if !sides.any_sat() && !explains && !bound_by_link {
        let hot = hot_cpus(s, &sides);
        if !hot.is_empty() && waits {
            out.push(cpu_saturated(&hot, &sides, Severity::Warning));
        } else {
            let throttled = out.iter().any(|f| matches!(f.cause, Some(Cause::Throttled)));
            out.extend(neither_saturated(s, ctx, ex, &sides, throttled));
            if !hot.is_empty() {
                out.push(cpu_saturated(&hot, &sides, Severity::Info));
            }
        }
    }
    if sides.contended && !explains {
        out.extend(contention(s, &sides, Severity::Info));
    }
    out.extend(out_of_service(s, ctx, ex, sides.client_sat));
    out.extend(behind_schedule(ctx, ex));
    out.extend(stopped(ctx, out, sides.client_sat));
}

/// The share of the window the server's stops took past which they are what the rate is
/// made of (a closed loop completes nothing while stopped): the headline when nothing is
/// saturated.
const STALLED: f64 = 0.1;

/// The share past which the stops are said beside another headline.
const STALLS_SAID: f64 = 0.02;

/// What the server's stops cost and what stops a whole server.
const STALL_REMEDY: &str = "find what stops the whole server this long: a garbage collection, a blocking call in an event loop, a lock held across requests, a fork or a synchronous write (its logs, and a profile of the run: doctor --profile); closed-loop percentiles hide the stops (only the requests in flight wait), an open-loop run (-R) shows what they cost every request due meanwhile";

/// latency-bound by the server's stops: for [`STALLED`] of the window or more nothing was
/// answered on any connection while requests waited, and nothing was saturated.
fn stalled(l: &LoadFacts, ex: &Explanation, st: &StallFacts, evidence: Vec<String>) -> Finding {
    let gain = 1.0 / (1.0 - st.share).max(0.05);
    Finding {
        name: "latency-bound",
        severity: Severity::Info,
        summary: format!(
            "no resource is saturated: the server stopped answering as a whole {} time(s), for up to {} ({} of the window): nothing came back on any connection while {} request(s) waited; without the stops the rate would be about {gain:.2}x",
            st.count,
            fmt_ms(st.longest_s * 1e3),
            pct(st.share),
            l.concurrency
        ),
        evidence,
        remedy: format!("{STALL_REMEDY}; between the stops, {}", latency_remedy(ex)),
        cause: Some(Cause::Stalls { count: st.count, share: st.share, longest_ms: st.longest_s * 1e3 }),
    }
}

/// The server's stops beside a headline that is not them: a warning from [`STALLED`] of the
/// window, info from [`STALLS_SAID`]. A CPU quota that held a side back stops it each period,
/// which the finding says. A saturated generator says nothing of them: a busy thread reads
/// no response either, so the stretches may be its own.
fn stopped(ctx: &Context, found: &[Finding], client_sat: bool) -> Option<Finding> {
    let st = ctx.load.as_ref()?.stalls.filter(|s| s.share >= STALLS_SAID && !client_sat)?;
    if found.iter().any(|f| matches!(f.cause, Some(Cause::Stalls { .. }))) {
        return None;
    }
    let mut evidence = vec![st.describe()];
    if found.iter().any(|f| matches!(f.cause, Some(Cause::Throttled))) {
        evidence.push("a cgroup CPU quota held a side back in the window: each period it spends its quota, it stops until the next (these stops may be its)".into());
    }
    Some(Finding {
        name: "stalls",
        severity: if st.share >= STALLED { Severity::Warning } else { Severity::Info },
        summary: format!(
            "nothing was answered on any connection for {} of the window, in {} stop(s) of up to {}, while requests waited",
            pct(st.share),
            st.count,
            fmt_ms(st.longest_s * 1e3)
        ),
        evidence,
        remedy: STALL_REMEDY.into(),
        cause: Some(Cause::Stalls { count: st.count, share: st.share, longest_ms: st.longest_s * 1e3 }),
    })
}

/// An open loop that fell behind its schedule: said beside the bound (which Little's law
/// found, the run having been paced by its connections), never hidden behind `paced`.
fn behind_schedule(ctx: &Context, ex: &Explanation) -> Option<Finding> {
    let b = ctx.load.as_ref()?.behind_schedule()?;
    let (who, remedy) = if b.connections_free {
        (
            "the generator",
            "more generator threads (-t) or load machines (--agents), or a lower rate",
        )
    } else {
        (
            "the load's connections (every one busy waiting on the target)",
            "more connections (-c) if the target has room, or a lower rate; run closed loop to find the target's own bound",
        )
    };
    let mut evidence = vec![format!(
        "{:.0} requests a second asked, {:.0} sent, {} due and never sent; send lag p50 {}",
        b.target_rps,
        b.achieved_rps,
        b.due_unsent,
        fmt_ms(b.lag_p50_ms)
    )];
    evidence.extend(ex.chain.first().cloned());
    Some(Finding {
        name: "behind-schedule",
        severity: Severity::Warning,
        summary: format!(
            "the open loop fell behind: {:.0} responses/s where {:.0} a second were asked; {who} set the pace, not the schedule",
            ex.rate, b.target_rps
        ),
        evidence,
        remedy: remedy.into(),
        cause: Some(Cause::BehindSchedule {
            asked_rps: b.target_rps,
            achieved_rps: b.achieved_rps,
            connections_free: b.connections_free,
        }),
    })
}

/// Whether the run's own processes waited too little for a CPU to explain its rate: PSI counts
/// any task's waits (a CPU hog's own among them), schedstat each thread's. Each second a thread
/// of the server or the generator waited delays at most every request in flight by that much:
/// when even that bound, per response, is under [`CPU_WAITS`] of the response time, the waits
/// did not make the rate (a 20 ms server beside a hog on its CPU: 0.1 ms of 20 ms). False
/// when the waits or the load's figures are not known.
fn waits_too_short(sides: &Sides) -> bool {
    sides.wait_share.is_some_and(|w| w < CPU_WAITS)
}

/// That bound as a share of the response time ([`waits_too_short`]); None when the waits or
/// the load's figures are not known.
fn wait_share(servers: &[&ProcSummary], clients: &[&ProcSummary], ctx: &Context) -> Option<f64> {
    let load = ctx.load.as_ref().filter(|l| l.responses > 0 && l.mean_latency_s > 0.0)?;
    let watched: Vec<&&ProcSummary> = servers.iter().chain(clients).collect();
    let waits: f64 = watched.iter().map(|p| p.run_wait_s).sum::<Option<f64>>()?;
    let per_response = waits * load.concurrency.max(1) as f64 / load.responses as f64;
    (!watched.is_empty()).then(|| per_response / load.mean_latency_s)
}

/// Whether tasks waited for a CPU: PSI's share at [`CPU_WAITS`] or more; without PSI, a
/// saturated CPU that a side may run on stands in for it.
fn cpu_waits(s: &Summary, sides: &Sides) -> bool {
    match s.cpu_pressure {
        Some(p) => p >= CPU_WAITS,
        None => !hot_cpus(s, sides).is_empty(),
    }
}

/// No responses, or a window too short: one finding instead of a verdict.
fn unjudgeable(s: &Summary, ctx: &Context) -> Option<Finding> {
    if ctx.load.as_ref().is_some_and(|l| l.responses == 0) {
        let mut f = Finding {
            name: "no-responses",
            severity: Severity::Critical,
            summary: "no responses: the load got no response in the window, so there is no rate to explain".into(),
            evidence: vec![format!("0 responses in a {:.1} s window", s.duration_s)],
            remedy: "check the target (URL, port, the server's log) and the load's errors; then run again".into(),
            cause: Some(Cause::Failed),
        };
        // The server's log or its configured limits may say why.
        if let Some(k) = super::server_log::known(ctx, s.cpus.len()) {
            f.summary = format!("no responses in the window: {}", k.what);
            f.evidence.extend(super::server_log::with_stub(ctx, k.evidence));
            f.remedy = k.remedy;
            f.cause = Some(k.cause);
        }
        return Some(f);
    }
    let intervals = s.samples.saturating_sub(1);
    (s.duration_s < MIN_WINDOW_S || intervals < MIN_INTERVALS).then(|| Finding {
        name: "run-too-short",
        severity: Severity::Info,
        summary: "run too short to judge what bounds the rate".into(),
        evidence: vec![format!(
            "a {:.2} s window with {intervals} sampling interval(s); the verdict needs at least {MIN_WINDOW_S} s and {MIN_INTERVALS} intervals",
            s.duration_s
        )],
        remedy: "run for longer (-d), or sample more often (--interval)".into(),
        cause: Some(Cause::TooShort { window_s: s.duration_s }),
    })
}

/// Most responses were errors or bad statuses: the run failed, and its rate measures the
/// failure, not the server.
fn failed_run(s: &Summary, ctx: &Context) -> Option<Finding> {
    let l = ctx.load.as_ref().filter(|l| l.failed_run())?;
    let total = l.ok + l.failed + l.bad_status;
    // The statuses the client read: HTTP's from 400, or a gRPC run's other than OK.
    let mut codes: Vec<(String, u64)> = match &l.grpc_statuses {
        Some(g) => g
            .iter()
            .filter(|(c, _)| *c != "OK")
            .map(|(c, n)| (format!("grpc-status {c}"), *n))
            .collect(),
        None => l
            .statuses
            .iter()
            .filter(|(c, _)| c.as_str() >= "400")
            .map(|(c, n)| (c.clone(), *n))
            .collect(),
    };
    codes.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    let codes: Vec<String> = codes.iter().take(3).map(|(c, n)| format!("{c}: {n}")).collect();
    let mut evidence = vec![format!(
        "{} ok of {total} requests answered or failed: {} failed (transport, timeout, parse), {} bad status{}",
        l.ok,
        l.failed,
        l.bad_status,
        if codes.is_empty() { String::new() } else { format!(" ({})", codes.join(", ")) }
    )];
    if l.responses > 0 {
        evidence.push(format!(
            "{:.0} responses/s, {:.0} of them ok: that rate is of the failure",
            l.rate(),
            l.ok as f64 / l.duration_s.max(1e-9)
        ));
    }
    let failed = pct((l.failed + l.bad_status) as f64 / total.max(1) as f64);
    // The server's own log may say why: then the headline names it, with its remedy.
    if let Some(k) = super::server_log::known(ctx, s.cpus.len()) {
        evidence.extend(super::server_log::with_stub(ctx, k.evidence));
        return Some(Finding {
            name: "run-failed",
            severity: Severity::Critical,
            summary: format!(
                "the run failed: {failed} of its requests got an error or a bad status; {}",
                k.what
            ),
            evidence,
            remedy: k.remedy,
            cause: Some(k.cause),
        });
    }
    Some(Finding {
        name: "run-failed",
        severity: Severity::Critical,
        summary: format!(
            "the run failed: {failed} of its requests got an error or a bad status, so its rate measures the failure, not what the server can do"
        ),
        evidence,
        remedy: "fix the target or the URL first (the load's errors and statuses say what went wrong); if these statuses are what the server should answer, name them with --accept-status".into(),
        cause: Some(Cause::Failed),
    })
}

/// Statuses a server answers when it turns a request away on purpose (a rate or connection
/// limit, load shedding).
const LIMIT_STATUSES: [&str; 2] = ["429", "503"];
/// The same for gRPC: a limit's own status, and an overloaded server's or proxy's.
const GRPC_LIMIT_STATUSES: [&str; 2] = ["RESOURCE_EXHAUSTED", "UNAVAILABLE"];
/// Share of the answers a limit status must reach to be called a limit.
const LIMITED_SHARE: f64 = 0.10;

/// A limit set the ok rate: some requests were answered ok and a share of them with a limit
/// status (429, 503), few failed outright. Not a broken target: the ok rate is the limit's.
fn rate_limited(ctx: &Context) -> Option<Finding> {
    let l = ctx.load.as_ref().filter(|l| l.ok > 0 && l.duration_s > 0.0)?;
    // A gRPC run's calls are turned away by a gRPC status (their HTTP status is 200).
    let (statuses, names) = match &l.grpc_statuses {
        Some(g) => (g, &GRPC_LIMIT_STATUSES),
        None => (&l.statuses, &LIMIT_STATUSES),
    };
    let grpc = l.grpc_statuses.is_some();
    let (code, limited) = names
        .iter()
        .map(|c| (*c, statuses.get(*c).copied().unwrap_or(0)))
        .max_by_key(|(_, n)| *n)?;
    let answered_with = if grpc { format!("grpc-status {code}") } else { code.to_string() };
    let answered = l.ok + l.bad_status;
    let all = answered + l.failed;
    if (limited as f64) < LIMITED_SHARE * answered as f64
        || l.failed as f64 > LIMITED_SHARE * all as f64
    {
        return None;
    }
    let ok_per_s = l.ok as f64 / l.duration_s;
    let zones = ctx.nginx.as_ref().filter(|n| n.limit_req).map(|n| n.limit_req_zones.join("; "));
    let configured = zones.filter(|z| !z.is_empty());
    let mut evidence = vec![format!(
        "{} ok ({ok_per_s:.0}/s), {limited} answered {answered_with} ({}), {} other bad status, {} failed, over {:.1} s",
        l.ok,
        pct(limited as f64 / answered.max(1) as f64),
        l.bad_status - limited.min(l.bad_status),
        l.failed,
        l.duration_s
    )];
    if let Some(z) = &configured {
        evidence.push(format!("nginx's configuration: limit_req_zone {z}"));
    }
    evidence.extend(
        super::server_log::said(ctx)
            .iter()
            .filter(|(_, m)| m.example.starts_with("limiting "))
            .map(|(w, m)| {
                format!(
                    "{}: \"{}\" {} time(s) in the window ({})",
                    m.level, m.example, m.count, w.path
                )
            }),
    );
    Some(Finding {
        name: "rate-limited",
        severity: Severity::Warning,
        summary: format!(
            "a limit set the rate: {ok_per_s:.0} ok responses/s, and the requests over it answered {answered_with} ({} of the answers): the ok rate is the limit's, not what the server can do{}",
            pct(limited as f64 / answered.max(1) as f64),
            configured.as_ref().map(|z| format!(" (limit_req_zone {z})")).unwrap_or_default()
        ),
        evidence,
        remedy: format!(
            "lift the limit for the benchmark{}, or measure below it (an open loop: -R {:.0}){}",
            if configured.is_some() { " (nginx's limit_req)" } else { "" },
            (ok_per_s * 0.9).floor(),
            if grpc {
                String::new()
            } else {
                format!("; --accept-status {code} counts the limit's answers as served")
            }
        ),
        cause: Some(Cause::RateLimit {
            status: if grpc { 200 } else { code.parse().unwrap_or(0) },
            grpc_status: grpc.then(|| code.to_string()),
            ok_per_s,
            configured,
        }),
    })
}

/// Fewer requests in service than the load kept in flight (Little's law): connections spent
/// the window without an answer (unserved, reconnecting, timing out).
///
/// A saturated generator leaves requests unsent between responses, which Little's law counts
/// as out of service too: then only connections the load saw unanswered for the whole window
/// (which no generator lag explains) are said.
fn out_of_service(
    s: &Summary,
    ctx: &Context,
    ex: &Explanation,
    client_sat: bool,
) -> Option<Finding> {
    let l = ctx.load.as_ref().filter(|l| l.mode == "closed")?;
    let share = ex.in_service_share()?;
    let low = share < IN_SERVICE_LOW && !client_sat;
    if !low && l.unanswered == 0 {
        return None;
    }
    let n = ex.in_service?;
    let mut evidence = vec![format!(
        "{:.0} responses/s x {} mean latency = {n:.1} requests in service on average, of {} the load kept in flight ({})",
        ex.rate,
        ex.latency_ms.map_or("-".into(), fmt_ms),
        l.concurrency,
        pct(share)
    )];
    if l.reconnects > 0 {
        evidence.push(format!(
            "{} reconnects ({:.0}/s): connections the server closed, or errors closed, were opened again",
            l.reconnects,
            l.reconnects as f64 / l.duration_s.max(1e-9)
        ));
    }
    if l.failed > 0 {
        evidence.push(format!("{} requests failed (errors or timeouts)", l.failed));
    }
    if l.starved > 0 {
        evidence.push(format!(
            "{} of {} connections still waited at the stop longer than the answered requests' p99.9, {} of them without any response in the window",
            l.starved, l.connections, l.unanswered
        ));
    }
    // The server's side: what held connections it did not serve.
    for q in &s.listen_queues {
        evidence.push(format!(
            "listener {} ({}): {} connections waiting in its accept queue of {} at the end: completed by the kernel, not accepted",
            q.local,
            if q.holders.is_empty() { "holder unknown".to_string() } else { q.holders.join(", ") },
            q.queued,
            q.backlog
        ));
    }
    for p in s.processes.iter().filter(|p| p.role == qpslab_host::sample::Role::Server) {
        if let (Some(open), Some(limit)) = (p.open_fds, p.nofile_soft) {
            evidence.push(format!(
                "server {} (pid {}): {open} descriptors open of its limit of {limit} (ulimit -n)",
                p.comm, p.pid
            ));
        }
    }
    Some(Finding {
        name: "connections-out-of-service",
        severity: if share < 0.5 { Severity::Critical } else { Severity::Warning },
        summary: format!(
            "only {} of the load's connections had a request being answered on average: the others waited for an answer that did not come, or reconnected",
            pct(share)
        ),
        evidence,
        remedy: "check what the server can hold: its connection and descriptor limits (ulimit -n, nginx worker_connections), its accept queue, and whether it closes connections (nginx keepalive_requests); the load's errors say which".into(),
        cause: Some(Cause::Failed),
    })
}

/// The watched processes by side, and whether each side is saturated.
struct Sides<'a> {
    servers: Vec<&'a ProcSummary>,
    clients: Vec<&'a ProcSummary>,
    /// Generators on other hosts.
    remote: &'a [Generator],
    server_sat: bool,
    client_sat: bool,
    /// Other processes took a large share of the CPUs.
    contended: bool,
    /// Busy CPUs in all, and the shares of the watched processes and interrupt work.
    busy: f64,
    watched: f64,
    interrupts: f64,
    /// Other processes' CPU.
    other: f64,
    /// At most this share of each response's time went to the sides' threads waiting for a
    /// CPU ([`wait_share`]).
    wait_share: Option<f64>,
}

impl<'a> Sides<'a> {
    fn new(s: &'a Summary, ctx: &'a Context) -> Self {
        let side = |r: Role| s.processes.iter().filter(|p| p.role == r).collect::<Vec<_>>();
        let (servers, clients) = (side(Role::Server), side(Role::Client));
        let remote = ctx.generators.as_slice();
        let (server_sat, client_sat) = (
            side_held(&servers, s).is_some(),
            side_held(&clients, s).is_some() || remote.iter().any(|g| g.bound),
        );
        // CPU time spent neither in the watched processes nor in interrupt work: other processes.
        let busy: f64 = s.cpus.iter().map(CpuShare::busy).sum();
        let interrupts: f64 = s.cpus.iter().map(|c| c.softirq + c.irq).sum();
        let watched: f64 = s.processes.iter().map(|p| p.cpu).sum();
        // Interrupt work done in a process's system call is in its time too, so the remainder
        // runs low; the other processes' own time, when it was counted, is the better figure.
        let counted: f64 = s.others.iter().map(|o| o.cpu).sum();
        let other = (busy - watched - interrupts).max(counted);
        let contended = !s.processes.is_empty()
            && other >= CONTENDED_CPU
            && other >= CONTENDED_SHARE * busy
            && !(server_sat && client_sat);
        let wait_share = wait_share(&servers, &clients, ctx);
        Sides {
            servers,
            clients,
            remote,
            server_sat,
            client_sat,
            contended,
            busy,
            watched,
            interrupts,
            other,
            wait_share,
        }
    }

    fn any_sat(&self) -> bool {
        self.server_sat || self.client_sat
    }

    /// A saturated side was held back by CPUs full of work not its own.
    fn held_by_cpus(&self, s: &Summary) -> bool {
        side_held(&self.servers, s) == Some(Held::Cpus)
            || side_held(&self.clients, s) == Some(Held::Cpus)
    }

    /// The server's and then the generator's processes, described; a side's idle processes
    /// (nginx's master) are left out when it has busy ones.
    fn evidence(&self, server_first: bool) -> Vec<String> {
        let whole = as_a_whole("the server", &self.servers);
        let servers = working(&self.servers).into_iter().map(describe).chain(whole);
        let clients = working(&self.clients).into_iter().map(describe);
        let remote = self.remote.iter().map(|g| {
            format!(
                "load generator on {}: busy {}{}",
                g.host,
                pct(g.busy_ratio),
                if g.bound { ", generator-bound by its own account" } else { "" }
            )
        });
        let clients: Vec<String> = clients.chain(remote).collect();
        if server_first {
            servers.chain(clients).collect()
        } else {
            clients.into_iter().chain(servers).collect()
        }
    }
}

/// What held a saturated process back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Held {
    /// Its threads used all the CPUs they may run on.
    Own,
    /// Its threads took turns on one CPU, others idle ([`ProcSummary::serial`]).
    Serial,
    /// It used all of its cgroup's CPU quota.
    Quota,
    /// Its CPUs were full, mostly with work not its own.
    Cpus,
}

/// A process whose busy threads use all the CPU they may have: their CPUs, or its quota.
fn held_own(p: &ProcSummary) -> Option<Held> {
    if p.busy_ratio >= SATURATED {
        return Some(if p.quota_bound() { Held::Quota } else { Held::Own });
    }
    p.serial.then_some(Held::Serial)
}

/// How a side is held, judged as a whole (a proxy and the application behind it, a master and
/// its workers are one server): a process of it at its own limit, by its most direct cause
/// (its threads before a quota); else the CPUs its working processes may run on, saturated:
/// by the side's own work when it alone used [`SATURATED`] of them (three processes of one
/// server filling a CPU between them), else by work not its own. An idle process (nginx's
/// master) on busy CPUs holds nothing.
fn side_held(procs: &[&ProcSummary], s: &Summary) -> Option<Held> {
    if let Some(h) = procs.iter().filter_map(|p| held_own(p)).min() {
        return Some(h);
    }
    let busy_procs: Vec<&ProcSummary> =
        procs.iter().copied().filter(|p| p.busy_threads > 0).collect();
    let cpus = reach(&busy_procs)?;
    let shares: Vec<&CpuShare> = s.cpus.iter().filter(|c| cpus.contains(c.cpu)).collect();
    if shares.is_empty() {
        return None;
    }
    let busy: f64 = shares.iter().map(|c| c.busy()).sum();
    if busy < SATURATED * shares.len() as f64 {
        return None;
    }
    let own: f64 = busy_procs.iter().map(|p| p.cpu).sum();
    Some(if own >= SATURATED * shares.len() as f64 { Held::Own } else { Held::Cpus })
}

/// `the server as a whole (3 processes): 1.00 CPUs of the 1 CPU they may use, 100% of
/// capacity`, for a side of several working processes; None for one.
fn as_a_whole(name: &str, procs: &[&ProcSummary]) -> Option<String> {
    let busy = working(procs);
    if busy.len() < 2 {
        return None;
    }
    let cpus = reach(&busy)?;
    let own: f64 = busy.iter().map(|p| p.cpu).sum();
    Some(format!(
        "{name} as a whole ({} processes): {own:.2} CPUs of the {} CPU{} they may use, {} of capacity",
        busy.len(),
        cpus.len(),
        if cpus.len() == 1 { "" } else { "s" },
        pct(own / cpus.len() as f64)
    ))
}

/// A side held back by its cgroup's CPU quota in at least [`qpslab_sys::cgroup::THROTTLED_SHARE`]
/// of the window's periods, once per cgroup.
fn throttled(s: &Summary) -> Vec<Finding> {
    let mut seen = std::collections::BTreeSet::new();
    s.processes
        .iter()
        .filter_map(|p| {
            let t = p.throttling.as_ref().filter(|t| t.bounds())?;
            if !seen.insert(t.cgroup.clone()) {
                return None;
            }
            let side = match p.role {
                Role::Server => "the server",
                Role::Client => "the load generator",
            };
            Some(Finding {
                name: "cpu-throttled",
                severity: Severity::Warning,
                summary: format!(
                    "{side} ({}, pid {}) was held back by its cgroup's CPU quota of {:.2} CPUs: the rate measures the quota, not what the host can do",
                    p.comm, p.pid, t.quota_cpus
                ),
                evidence: vec![t.describe(), describe(p)],
                remedy: "lift or raise the CPU limit for the benchmark (Kubernetes resources.limits.cpu, docker --cpus, systemd CPUQuota=, the cgroup's cpu.max or cpu.cfs_quota_us), or take the rate as what that limit allows".into(),
                cause: Some(Cause::Throttled),
            })
        })
        .collect()
}

/// The processes of a side that did work, or all of them when none did.
fn working<'a>(side: &[&'a ProcSummary]) -> Vec<&'a ProcSummary> {
    let busy: Vec<&ProcSummary> = side.iter().copied().filter(|p| p.busy_threads > 0).collect();
    if busy.is_empty() {
        side.to_vec()
    } else {
        busy
    }
}

fn describe(p: &ProcSummary) -> String {
    let cpus = match (&p.cpus, p.cpus_busy) {
        (Some(set), Some(busy)) => format!(
            "; its {} {} {} busy",
            set.named(),
            if set.len() == 1 { "was" } else { "were" },
            pct(busy)
        ),
        _ => String::new(),
    };
    let quota = match &p.throttling {
        Some(t) if p.quota_bound() => format!(" (its cgroup's quota of {:.2} CPUs)", t.quota_cpus),
        _ => String::new(),
    };
    // A thread is busy from a tenth of a CPU: a process below has none to count.
    let threads = match p.busy_threads {
        0 => ", no thread busy".to_string(),
        n => format!(" over {n} busy thread(s)"),
    };
    format!(
        "{} (pid {}): {:.2} CPUs{threads}, {} of capacity{quota}{cpus}",
        p.comm,
        p.pid,
        p.cpu,
        pct(p.busy_ratio)
    )
}

/// The CPUs any of `procs` may use; None when a process's are unknown or there is none.
pub(super) fn reach(procs: &[&ProcSummary]) -> Option<CpuSet> {
    let mut all = CpuSet::new();
    for p in procs {
        all = all.union(p.cpus.as_ref()?);
    }
    (!procs.is_empty()).then_some(all)
}

fn contention(s: &Summary, sides: &Sides, severity: Severity) -> Option<Finding> {
    if !sides.contended {
        return None;
    }
    let other = sides.other;
    let mut evidence = vec![format!(
        "CPUs busy {:.2} CPUs in all; the watched processes {:.2}, interrupt work {:.2}, other work {other:.2}",
        sides.busy, sides.watched, sides.interrupts
    )];
    if !s.others.is_empty() {
        let named: Vec<String> = s
            .others
            .iter()
            .map(|o| format!("{} (pid {}) {:.2} CPUs", o.comm, o.pid, o.cpu))
            .collect();
        evidence.push(format!("busiest other processes: {}", named.join(", ")));
    }
    evidence.extend(sides.evidence(true));
    let who = s.others.first().map_or(String::new(), |o| {
        format!(", above all {} (pid {}, {:.2} CPUs)", o.comm, o.pid, o.cpu)
    });
    if let Some(p) = s.cpu_pressure {
        evidence.push(format!("tasks waited for a CPU {} of the window (PSI)", pct(p)));
    }
    if let Some(w) = sides.wait_share {
        evidence.push(format!(
            "the run's own threads waited for a CPU at most {} of each response's time (schedstat)",
            pct(w.min(1.0))
        ));
    }
    let summary = if severity == Severity::Info {
        format!("the host was busy with other processes during the run{who}; it does not explain the rate: no side was short of CPU and tasks rarely waited for one")
    } else {
        format!("the host was busy with other processes during the run{who}: the figures are lower than this host can do")
    };
    Some(Finding {
        name: "cpu-contention",
        severity,
        summary,
        evidence,
        remedy: "stop the other work (builds, other benchmarks) or pin it away from the benchmark's CPUs, and run again".into(),
        cause: Some(Cause::Contention { share: sides.wait_share }),
    })
}

/// The two sides ran on CPUs they share, and those CPUs were saturated.
/// CPUs a side must use to have taken a share worth naming from the other on CPUs they share.
const SHARED_TAKES: f64 = 0.05;

fn shared_cpus(s: &Summary, sides: &Sides) -> Option<Finding> {
    // A side's idle processes (nginx's master, free to run anywhere) take no CPU from the
    // other: the CPUs of its working processes decide.
    let both = reach(&working(&sides.servers))?.intersection(&reach(&working(&sides.clients))?);
    let shares: Vec<&CpuShare> = s.cpus.iter().filter(|c| both.contains(c.cpu)).collect();
    if shares.is_empty() {
        return None;
    }
    let busy = shares.iter().map(|c| c.busy()).sum::<f64>() / shares.len() as f64;
    // A side that used next to no CPU took next to none from the other (a generator at 3% of
    // a CPU beside a server worker filling it): the rate is not both sides' together.
    let used = |procs: &[&ProcSummary]| procs.iter().map(|p| p.cpu).sum::<f64>();
    if busy < SATURATED || used(&sides.servers).min(used(&sides.clients)) < SHARED_TAKES {
        return None;
    }
    // Sharing takes from a side only when it waited for the CPU: the sides' own threads'
    // waits (schedstat), when read, under a tenth of the response time say neither did (a
    // generator at 5% of a CPU beside an nginx worker filling it, each on its own CPU mostly).
    if waits_too_short(sides) {
        return None;
    }
    let mut evidence = vec![format!(
        "{}, open to both sides, {} {} busy",
        both.named(),
        if both.len() == 1 { "was" } else { "were" },
        pct(busy)
    )];
    evidence.extend(sides.evidence(true));
    Some(Finding {
        name: "shared-cpus",
        severity: Severity::Warning,
        summary: format!("the server and the load generator ran on the same CPUs ({both}), saturated: each side took CPU from the other, so the rate measures both together"),
        evidence,
        remedy: "pin the two sides to separate CPUs (qpslab bench does when it can; qpslab load --cpus, qpslab serve --cpus, taskset), or put the generator on another machine".into(),
        cause: Some(Cause::Contention { share: sides.wait_share }),
    })
}

/// client-bound, both-saturated or server-bound, each said as what held the side: its own
/// threads, its cgroup's quota, or CPUs full of other work; with a profile, where the
/// saturated sides' CPU went.
fn saturation(s: &Summary, sides: &Sides, ctx: &Context) -> Option<Finding> {
    let server = side_held(&sides.servers, s);
    let client =
        side_held(&sides.clients, s).or(sides.remote.iter().any(|g| g.bound).then_some(Held::Own));
    let (name, (summary, remedy), server_first) = match (server, client) {
        (None, Some(h)) => ("client-bound", client_bound(h), false),
        (Some(_), Some(_)) => (
            "both-saturated",
            (
                "the server and the load generator both use all the CPU they have: the rate is bounded by both",
                "give each side more CPUs (more server workers, more generator threads) or put the generator on another machine",
            ),
            true,
        ),
        (Some(h), None) => ("server-bound", server_bound(h), true),
        (None, None) => return None,
    };
    let mut evidence = sides.evidence(server_first);
    if server == Some(Held::Serial) {
        evidence.extend(serial_evidence(s, sides));
    }
    // More workers need CPU to run on: the remedy says so only when the CPUs the server may
    // use had some idle, whoever shares them.
    let remedy = if name == "server-bound" && server == Some(Held::Own) {
        match headroom(s, sides) {
            Some((cpus, idle)) if idle >= HEADROOM_CPU => format!(
                "give the server more workers: the {} it may use had {idle:.2} CPUs idle (`qpslab serve -w`, nginx worker_processes, gunicorn --workers); or move interrupt work off its CPUs (`qpslab tune plan`)",
                cpus.named()
            ),
            _ => "no CPU is idle for more workers: less work per request on the server (its configuration: see nginx-config when it is nginx), or more CPUs or server hosts; moving interrupt work off its CPUs helps when they take it (`qpslab tune plan`)".to_string(),
        }
    } else if name == "client-bound" && matches!(client, Some(Held::Own | Held::Serial)) {
        // With a profile, where the generator's CPU went is what less of it needs.
        match super::profiled::bound_by(s, ctx, "generator") {
            Some((finding, r)) => format!("{r} (see {finding}); or {remedy}"),
            None => remedy.to_string(),
        }
    } else {
        remedy.to_string()
    };
    if sides.client_sat {
        let went = super::profiled::where_it_went(ctx, "generator");
        if went.is_empty() {
            // Without a profile: the ports its connects had to search, when it closed
            // connections in the window (the profile tells whether its CPU went there).
            evidence.extend(super::profiled::time_wait_held(s).map(|t| {
                format!("{t}: a connect whose port the kernel picks searches the range past them (`--profile` shows whether the generator's CPU went there)")
            }));
        }
        evidence.extend(went);
    }
    if sides.server_sat {
        evidence.extend(super::profiled::where_it_went(ctx, "server"));
    }
    let (side, held) = match (server, client) {
        (Some(_), Some(_)) => ("both", None),
        (Some(h), None) => ("server", Some(h)),
        _ => ("generator", client),
    };
    let held = match held {
        Some(Held::Quota) => "quota",
        Some(Held::Cpus) => "cpus",
        Some(Held::Serial) => "serial",
        _ => "own",
    };
    Some(Finding {
        name,
        severity: if name == "client-bound" { Severity::Warning } else { Severity::Info },
        summary: summary.into(),
        evidence,
        remedy,
        cause: Some(Cause::Saturated { side: side.into(), held: held.into() }),
    })
}

/// What shows a serialized server: its threads' shares, each interval at one CPU, and the
/// idle CPU beside it.
fn serial_evidence(s: &Summary, sides: &Sides) -> Option<String> {
    let p = sides.servers.iter().find(|p| p.serial)?;
    // Each interval of half a second or more (the stop's short one is noise of ticks).
    let mut before = 0.0;
    let per: Vec<String> = s
        .intervals
        .iter()
        .filter(|i| {
            let long = i.t_s - before >= 0.5;
            before = i.t_s;
            long
        })
        .map(|i| format!("{:.2}", i.server_cpu))
        .collect();
    let idle = headroom(s, sides).map_or(0.0, |(_, idle)| idle);
    Some(format!(
        "{} (pid {}): {:.2} CPUs over {} busy threads, the busiest {:.2}; the server's CPU each interval of the window {}; {idle:.2} CPUs idle where it may run: its threads wanted the CPU, one at a time",
        p.comm,
        p.pid,
        p.cpu,
        p.busy_threads,
        p.busiest_thread,
        per.join(", ")
    ))
}

/// Idle CPU in which more workers can help: a third of a CPU (one more gunicorn worker on two
/// CPUs 69% busy, 0.62 CPUs idle, measured 1.40x).
const HEADROOM_CPU: f64 = 0.3;

/// The CPUs the server's processes may run on and how much of them was idle in all (CPUs),
/// whoever shares them; None when the server's CPUs are not known.
fn headroom(s: &Summary, sides: &Sides) -> Option<(CpuSet, f64)> {
    let cpus = reach(&sides.servers)?;
    let idle = s.cpus.iter().filter(|c| cpus.contains(c.cpu)).map(|c| c.idle).sum();
    Some((cpus, idle))
}

/// The server-bound headline and its remedy, by what held the server.
fn server_bound(h: Held) -> (&'static str, &'static str) {
    match h {
        Held::Own => (
            "the server's threads are saturated: the rate is what this server configuration can do",
            "give the server more workers on idle CPUs (`qpslab serve -w`, nginx worker_processes), or move interrupt work off its CPUs (`qpslab tune plan`)",
        ),
        Held::Serial => (
            "the server's threads take turns on one CPU: together they used one CPU's worth, steadily, with CPUs idle beside them, so a lock held across the work (a global interpreter lock, a global mutex) lets one run at a time: the server is saturated at one CPU",
            "more processes, not threads: worker processes (gunicorn --workers, uWSGI processes, Node cluster, one server per CPU behind SO_REUSEPORT), or a runtime or code without the global lock; more connections only queue at the lock",
        ),
        Held::Quota => (
            "the server used all of its cgroup's CPU quota: the rate is what that quota allows",
            "lift or raise the server's CPU limit (cpu-throttled names its cgroup); more workers under the same quota share the same CPU time",
        ),
        Held::Cpus => (
            "the server's CPUs were saturated, mostly with work not its own (interrupts, other processes): the rate is what the server could get there",
            "move the other work off the server's CPUs (interrupts: `qpslab tune plan`; processes: taskset), or give the server CPUs of its own",
        ),
    }
}

/// The client-bound headline and its remedy, by what held the generator.
fn client_bound(h: Held) -> (&'static str, &'static str) {
    match h {
        // Only a server is judged serialized; a generator's own saturation reads the same.
        Held::Own | Held::Serial => (
            "the load generator is saturated while the server has headroom: this measures the client, not the server",
            "add generator threads (`qpslab load -t`) on free CPUs, or more client machines",
        ),
        Held::Quota => (
            "the load generator used all of its cgroup's CPU quota while the server has headroom: this measures the quota, not the server",
            "lift or raise the generator's CPU limit (cpu-throttled names its cgroup), or run it outside that cgroup",
        ),
        Held::Cpus => (
            "the load generator's CPUs were saturated, mostly with work not its own, while the server has headroom: this measures the client, not the server",
            "move the other work off the generator's CPUs, or give the generator CPUs of its own (`qpslab load --cpus`)",
        ),
    }
}

/// Saturated CPUs that a side may run on (any CPU when the server is not known: on this host it
/// may run anywhere).
fn hot_cpus<'a>(s: &'a Summary, sides: &Sides) -> Vec<&'a CpuShare> {
    let watched = (|| {
        let mut set = reach(&working(&sides.servers))?;
        if !sides.clients.is_empty() {
            set = set.union(&reach(&working(&sides.clients))?);
        }
        Some(set)
    })();
    s.cpus
        .iter()
        .filter(|c| watched.as_ref().is_none_or(|set| set.contains(c.cpu)) && c.busy() >= SATURATED)
        .collect()
}

fn cpu_saturated(hot: &[&CpuShare], sides: &Sides, severity: Severity) -> Finding {
    let list: CpuSet = hot.iter().map(|c| c.cpu).collect();
    let mut evidence: Vec<String> = hot
        .iter()
        .map(|c| {
            format!(
                "CPU {}: user {} sys {} softirq {} irq {} idle {}",
                c.cpu,
                pct(c.user),
                pct(c.system),
                pct(c.softirq),
                pct(c.irq),
                pct(c.idle)
            )
        })
        .collect();
    evidence.extend(sides.evidence(true));
    if sides.servers.is_empty() {
        evidence
            .push("the server's process is not known: give --server-pid (doctor: --pid)".into());
    }
    let tail = if severity == Severity::Info {
        "; no task waited for it long enough to explain the rate"
    } else {
        ""
    };
    Finding {
        name: "cpu-saturated",
        severity,
        summary: format!("{}, which the benchmark may run on, {} saturated while neither side's processes were: its time went to other work, interrupts or a side not followed{tail}", list.named(), if list.len() == 1 { "was" } else { "were" }),
        evidence,
        remedy: "pin the server, the generator and interrupt work to separate CPUs (qpslab tune plan, --cpus, taskset) and name the server (--server-pid) so its CPU is counted".into(),
        cause: Some(Cause::Contention { share: sides.wait_share }),
    }
}

/// The share of the responses' time request bodies were held by the server's HTTP/2 window
/// past which the window is what the latency is made of: a window that grants a body only
/// after a round trip of its own holds it about half a call.
const FLOW_HELD: f64 = 1.0 / 3.0;

/// latency-bound by the server's HTTP/2 flow control: request bodies waited for its window
/// a third of the responses' time or more ([`FLOW_HELD`]).
fn flow_held(l: &LoadFacts, ex: &Explanation, f: &FlowFacts, evidence: Vec<String>) -> Finding {
    let connection = f.by_connection();
    let raise = if connection {
        "raise the server's HTTP/2 connection window (a WINDOW_UPDATE on stream 0 at the start: grpc-go InitialConnWindowSize, nginx sends its own)"
    } else {
        "raise the server's HTTP/2 stream window (SETTINGS_INITIAL_WINDOW_SIZE: grpc-go InitialWindowSize, gRPC core grpc.http2.lookahead_bytes or its BDP probing left on, nginx http2_body_preread_size)"
    };
    Finding {
        name: "latency-bound",
        severity: Severity::Info,
        summary: format!(
            "no resource is saturated: {} held the request bodies {} of the responses' time: {} request(s) in flight over {} each (Little's law), each body waited for the server's WINDOW_UPDATEs",
            f.holder(),
            pct(f.held_share),
            l.concurrency,
            ex.latency_ms.map_or("-".into(), fmt_ms)
        ),
        evidence,
        remedy: format!(
            "{raise} to at least a body's size; or more connections (-c) or streams for more bodies in flight at once"
        ),
        cause: Some(Cause::FlowControl { window: f.server_window, share: f.held_share, connection }),
    }
}

/// latency-bound under the server's HTTP/2 stream limit: connections x its limit is the
/// concurrency Little's law relates to the latency.
fn stream_limited(
    l: &LoadFacts,
    ex: &Explanation,
    k: StreamLimit,
    evidence: Vec<String>,
) -> Finding {
    Finding {
        name: "latency-bound",
        severity: Severity::Info,
        summary: format!(
            "no resource is saturated: the server's HTTP/2 stream limit set the concurrency: {} request(s) in flight ({} connection(s) x {} stream(s) it allows, of the {} asked) over {} each (Little's law)",
            l.concurrency,
            l.connections,
            k.server,
            k.asked,
            ex.latency_ms.map_or("-".into(), fmt_ms)
        ),
        evidence,
        remedy: format!(
            "more connections (-c): the server allows {} concurrent stream(s) per connection (SETTINGS_MAX_CONCURRENT_STREAMS), so streams past it add nothing; or raise its limit (nginx: http2_max_concurrent_streams)",
            k.server
        ),
        cause: Some(Cause::StreamLimit { server: k.server, asked: k.asked }),
    }
}

/// latency-bound (a closed loop: Little's law explains the rate), paced (an open loop: the
/// schedule set it), or, without the load's facts, latency-bound or no-single-bottleneck by how
/// flat the packet rate was.
fn neither_saturated(
    s: &Summary,
    ctx: &Context,
    ex: &Explanation,
    sides: &Sides,
    throttled: bool,
) -> Option<Finding> {
    if sides.servers.is_empty() && sides.clients.is_empty() && sides.remote.is_empty() {
        return None;
    }
    let mut evidence = sides.evidence(false);
    let idle = s.cpus.iter().filter(|c| c.idle >= HEADROOM_IDLE).count();
    evidence.push(format!(
        "{idle} CPU(s) at least {} idle; no side at {} of its capacity",
        pct(HEADROOM_IDLE),
        pct(SATURATED)
    ));
    if let Some(l) = &ctx.load {
        evidence.extend(ex.chain.iter().cloned());
        if l.paced() {
            return Some(Finding {
                name: "paced",
                severity: Severity::Info,
                summary: format!("the load's schedule set the rate ({:.0} requests/s, open loop) and no resource was saturated: the target kept up", ex.rate),
                evidence,
                remedy: "raise the rate (-R) to find where the target stops keeping up, or run closed loop for its maximum".into(),
                cause: Some(Cause::Paced),
            });
        }
        if let Some(st) = l.stalls.filter(|s| s.share >= STALLED && !throttled) {
            return Some(stalled(l, ex, &st, evidence));
        }
        if let Some(f) = l.flow.filter(|f| f.held > 0 && f.held_share >= FLOW_HELD) {
            return Some(flow_held(l, ex, &f, evidence));
        }
        if let Some(k) = l.stream_limit {
            return Some(stream_limited(l, ex, k, evidence));
        }
        return Some(Finding {
            name: "latency-bound",
            severity: Severity::Info,
            summary: format!(
                "no resource is saturated: the rate is {} request(s) in flight over {} each (Little's law), bound by round trips, not CPU",
                l.concurrency,
                ex.latency_ms.map_or("-".into(), fmt_ms)
            ),
            evidence,
            remedy: latency_remedy(ex),
            cause: Some(Cause::RoundTrips),
        });
    }
    let rates: Vec<f64> = s.intervals.iter().map(|i| i.pps).collect();
    let what = "packets/s";
    let cv = coefficient_of_variation(&rates)?;
    let mean = rates.iter().sum::<f64>() / rates.len() as f64;
    if cv <= FLAT_CV && mean > 0.0 {
        evidence.push(format!(
            "{what} flat at {mean:.0} (variation {:.1}% over {} intervals)",
            cv * 100.0,
            rates.len()
        ));
        Some(Finding {
            name: "latency-bound",
            severity: Severity::Info,
            summary: "neither side is saturated and the rate is flat: the load is limited by round trips, not CPU".into(),
            evidence,
            remedy: "add connections (`qpslab load -c`) or pipeline; each connection carries one request per round trip".into(),
            cause: Some(Cause::RoundTrips),
        })
    } else {
        evidence.push(format!(
            "{what} averaged {mean:.0} and varied {:.1}% over {} intervals",
            cv * 100.0,
            rates.len()
        ));
        Some(Finding {
            name: "no-single-bottleneck",
            severity: Severity::Info,
            summary: "neither side is saturated and the rate was not steady: no single bottleneck stands out".into(),
            evidence,
            remedy: "run longer, or look at the per-interval rows for stalls (timeouts, retransmits, other load)".into(),
            cause: Some(Cause::Unexplained),
        })
    }
}

/// More requests in flight, and the part of the round trip that is longest: the server's own
/// time or the path's, when the load measured the path.
fn latency_remedy(ex: &Explanation) -> String {
    let more = "more requests in flight (`qpslab load -c`, --pipeline, --streams) raise the rate until a resource saturates";
    let (Some(ms), Some(w), Some(path)) = (ex.latency_ms, ex.waiting_ms, ex.path_ms) else {
        return format!(
            "{more}; a shorter round trip (the server's own waits) raises it per connection"
        );
    };
    let server = (w - path).max(0.0);
    if server >= 0.5 * ms {
        format!("{more}; per connection, the server's own time is {} of the {} round trip: what it waits on (a backend, a lock, a disk, a sleep) sets the rate", fmt_ms(server), fmt_ms(ms))
    } else if path >= 0.5 * ms {
        format!("{more}; per connection, the path's round trip is {} of the {}: a shorter path (the generator nearer the server) raises it", fmt_ms(path), fmt_ms(ms))
    } else {
        format!("{more}; the round trip ({}) is the sides' work in turn", fmt_ms(ms))
    }
}

fn coefficient_of_variation(v: &[f64]) -> Option<f64> {
    if v.len() < 2 {
        return None;
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    if mean <= 0.0 {
        return None;
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
    Some(var.sqrt() / mean)
}
