//! The verdict: what bounded the rate. A side (server or generator) is saturated when its
//! processes use at least [`SATURATED`] of the CPUs their busy threads may run on, or when those
//! CPUs are that busy whoever uses them. "Neither side is saturated" is only said when no CPU
//! either side may run on is saturated either; a run with no response, or too short, gets no
//! verdict at all.

use super::summary::{pct, CpuShare, ProcSummary, Summary};
use super::{
    Context, Finding, Generator, Severity, CONTENDED_CPU, CONTENDED_SHARE, FLAT_CV, HEADROOM_IDLE,
    MIN_INTERVALS, MIN_WINDOW_S, SATURATED,
};
use crate::cpuset::CpuSet;
use crate::sample::Role;

/// Adds the verdict findings.
pub(super) fn bound(s: &Summary, ctx: &Context, out: &mut Vec<Finding>) {
    if let Some(f) = unjudgeable(s, ctx) {
        out.push(f);
        return;
    }
    // A quota that held a side back heads that side's verdict: it is the cause.
    out.extend(throttled(s));
    let sides = Sides::new(s, ctx);
    out.extend(contention(s, &sides));
    out.extend(shared_cpus(s, &sides));
    out.extend(saturation(&sides, ctx));
    if !sides.server_sat && !sides.client_sat && !sides.contended {
        match hot_cpus(s, &sides) {
            hot if !hot.is_empty() => out.push(cpu_saturated(&hot, &sides)),
            _ => out.extend(neither_saturated(s, ctx, &sides)),
        }
    }
}

/// No responses, or a window too short: one finding instead of a verdict.
fn unjudgeable(s: &Summary, ctx: &Context) -> Option<Finding> {
    if ctx.responses == Some(0) {
        return Some(Finding {
            name: "no-responses",
            severity: Severity::Critical,
            summary: "no responses: the load got no response in the window, so there is no rate to explain".into(),
            evidence: vec![format!("0 responses in a {:.1} s window", s.duration_s)],
            remedy: "check the target (URL, port, the server's log) and the load's errors; then run again".into(),
        });
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
}

impl<'a> Sides<'a> {
    fn new(s: &'a Summary, ctx: &'a Context) -> Self {
        let side = |r: Role| s.processes.iter().filter(|p| p.role == r).collect::<Vec<_>>();
        let (servers, clients) = (side(Role::Server), side(Role::Client));
        let remote = ctx.generators.as_slice();
        let (server_sat, client_sat) = (
            servers.iter().any(|p| saturated(p)),
            clients.iter().any(|p| saturated(p)) || remote.iter().any(|g| g.bound),
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
        }
    }

    /// The server's and then the generator's processes, described; a side's idle processes
    /// (nginx's master) are left out when it has busy ones.
    fn evidence(&self, server_first: bool) -> Vec<String> {
        let servers = working(&self.servers).into_iter().map(describe);
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

/// A process that wants CPU (a busy thread) and cannot get more: its own share, or its CPUs
/// full. An idle process (nginx's master) on busy CPUs is not saturated.
fn saturated(p: &ProcSummary) -> bool {
    held(p).is_some()
}

/// What held a saturated process back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Held {
    /// Its threads used all the CPUs they may run on.
    Own,
    /// It used all of its cgroup's CPU quota.
    Quota,
    /// Its CPUs were full, mostly with work not its own.
    Cpus,
}

fn held(p: &ProcSummary) -> Option<Held> {
    if p.busy_ratio >= SATURATED {
        Some(if p.quota_bound() { Held::Quota } else { Held::Own })
    } else if p.busy_threads > 0 && p.cpus_busy.is_some_and(|b| b >= SATURATED) {
        Some(Held::Cpus)
    } else {
        None
    }
}

/// How a side is held: by its most direct cause (its own threads before a quota before full
/// CPUs).
fn side_held(procs: &[&ProcSummary]) -> Option<Held> {
    procs.iter().filter_map(|p| held(p)).min()
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
    format!(
        "{} (pid {}): {:.2} CPUs over {} busy thread(s), {} of capacity{quota}{cpus}",
        p.comm,
        p.pid,
        p.cpu,
        p.busy_threads,
        pct(p.busy_ratio)
    )
}

/// The CPUs any of `procs` may use; None when a process's are unknown or there is none.
fn reach(procs: &[&ProcSummary]) -> Option<CpuSet> {
    let mut all = CpuSet::new();
    for p in procs {
        all = all.union(p.cpus.as_ref()?);
    }
    (!procs.is_empty()).then_some(all)
}

fn contention(s: &Summary, sides: &Sides) -> Option<Finding> {
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
    Some(Finding {
        name: "cpu-contention",
        severity: Severity::Warning,
        summary: format!("the host was busy with other processes during the run{who}: the figures are lower than this host can do"),
        evidence,
        remedy: "stop the other work (builds, other benchmarks) or pin it away from the benchmark's CPUs, and run again".into(),
    })
}

/// The two sides ran on CPUs they share, and those CPUs were saturated.
fn shared_cpus(s: &Summary, sides: &Sides) -> Option<Finding> {
    // A side's idle processes (nginx's master, free to run anywhere) take no CPU from the
    // other: the CPUs of its working processes decide.
    let both = reach(&working(&sides.servers))?.intersection(&reach(&working(&sides.clients))?);
    let shares: Vec<&CpuShare> = s.cpus.iter().filter(|c| both.contains(c.cpu)).collect();
    if shares.is_empty() {
        return None;
    }
    let busy = shares.iter().map(|c| c.busy()).sum::<f64>() / shares.len() as f64;
    if busy < SATURATED {
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
    })
}

/// client-bound, both-saturated or server-bound, each said as what held the side: its own
/// threads, its cgroup's quota, or CPUs full of other work; with a profile, where the
/// saturated sides' CPU went.
fn saturation(sides: &Sides, ctx: &Context) -> Option<Finding> {
    let server = side_held(&sides.servers);
    let client =
        side_held(&sides.clients).or(sides.remote.iter().any(|g| g.bound).then_some(Held::Own));
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
    if sides.client_sat {
        evidence.extend(super::profiled::where_it_went(ctx, "generator"));
    }
    if sides.server_sat {
        evidence.extend(super::profiled::where_it_went(ctx, "server"));
    }
    Some(Finding {
        name,
        severity: if name == "client-bound" { Severity::Warning } else { Severity::Info },
        summary: summary.into(),
        evidence,
        remedy: remedy.into(),
    })
}

/// The server-bound headline and its remedy, by what held the server.
fn server_bound(h: Held) -> (&'static str, &'static str) {
    match h {
        Held::Own => (
            "the server's threads are saturated: the rate is what this server configuration can do",
            "give the server more workers on idle CPUs (`qpslab serve -w`, nginx worker_processes), or move interrupt work off its CPUs (`qpslab tune plan`)",
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
        Held::Own => (
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

fn cpu_saturated(hot: &[&CpuShare], sides: &Sides) -> Finding {
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
    Finding {
        name: "cpu-saturated",
        severity: Severity::Warning,
        summary: format!("{}, which the benchmark may run on, {} saturated while neither side's processes were: its time went to other work, interrupts or a side not followed", list.named(), if list.len() == 1 { "was" } else { "were" }),
        evidence,
        remedy: "pin the server, the generator and interrupt work to separate CPUs (qpslab tune plan, --cpus, taskset) and name the server (--server-pid) so its CPU is counted".into(),
    }
}

/// latency-bound or no-single-bottleneck.
fn neither_saturated(s: &Summary, ctx: &Context, sides: &Sides) -> Option<Finding> {
    if sides.servers.is_empty() && sides.clients.is_empty() && sides.remote.is_empty() {
        return None;
    }
    let (rates, what) = match &ctx.request_rates {
        Some(r) => (r.clone(), "requests/s"),
        None => (s.intervals.iter().map(|i| i.pps).collect(), "packets/s"),
    };
    let cv = coefficient_of_variation(&rates)?;
    let mean = rates.iter().sum::<f64>() / rates.len() as f64;
    let mut evidence = sides.evidence(false);
    let idle = s.cpus.iter().filter(|c| c.idle >= HEADROOM_IDLE).count();
    evidence.push(format!(
        "{idle} CPU(s) at least {} idle; none at {} busy or more",
        pct(HEADROOM_IDLE),
        pct(SATURATED)
    ));
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
        })
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
