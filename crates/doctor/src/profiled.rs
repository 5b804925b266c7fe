//! The rules that read the profile (`--profile`): spinlocks under socket wake-ups (the `perf
//! top` of "1M QPS with nginx and Ubuntu 12.04 on EC2"), clock reads with a slow clocksource,
//! and a side whose CPU goes to system call entry and exit or to copies. Each names the
//! symbols and shares it saw. Without a profile they say nothing.

use qpslab_profile::{Category, CpuProfile, ProcessProfile, Profile, Share};

use super::summary::{pct, CpuShare, Summary};
use super::{
    Cause, Context, Finding, Severity, CLOCK_SHARE, CONNECTION_SHARE, COPY_SHARE, LOCK_SHARE,
    PROFILE_BUSY, SYSCALL_SHARE,
};
use qpslab_host::host::Host;

/// Profile samples a process needs before its shares are judged.
const MIN_SAMPLES: u64 = 50;

pub(super) fn rules(host: &Host, s: &Summary, ctx: &Context, out: &mut Vec<Finding>) {
    let Some(p) = ctx.profile.as_ref().filter(|p| p.available) else { return };
    lock_contention(host, s, ctx, p, out);
    slow_clocksource(host, s, p, out);
    for proc in p.processes.iter().filter(|x| x.role == "server" || x.role == "generator") {
        side_bound(s, proc, out);
    }
}

/// The CPUs busy enough to read, with their profiles.
fn busy<'a>(
    s: &'a Summary,
    p: &'a Profile,
) -> impl Iterator<Item = (&'a CpuShare, &'a CpuProfile)> {
    s.cpus
        .iter()
        .filter(|c| c.busy() >= PROFILE_BUSY)
        .filter_map(|c| p.cpus.iter().find(|x| x.cpu == c.cpu && x.samples > 0).map(|x| (c, x)))
}

/// The leaf symbols of `shares` that fall in category `c`.
fn symbols_of(shares: &[Share], c: Category) -> String {
    let v: Vec<String> = shares
        .iter()
        .filter(|s| qpslab_profile::category::classify(&[s.name.as_str()], None) == c)
        .take(3)
        .map(|s| format!("{} {}", s.name, pct(s.share)))
        .collect();
    if v.is_empty() {
        "-".into()
    } else {
        v.join(", ")
    }
}

fn lock_contention(host: &Host, s: &Summary, ctx: &Context, p: &Profile, out: &mut Vec<Finding>) {
    let hot: Vec<(&CpuShare, &CpuProfile)> =
        busy(s, p).filter(|(_, x)| x.wakeup_lock_share >= LOCK_SHARE).collect();
    if hot.is_empty() {
        return;
    }
    let mut evidence = Vec::new();
    for (c, x) in &hot {
        let top = x
            .wakeup_lock_stacks
            .first()
            .map_or(String::new(), |t| format!(": {} ({} of the CPU)", t.name, pct(t.share)));
        evidence.push(format!(
            "CPU {} ({} busy): {} of its samples spinning on a lock under a socket wake-up{top}",
            c.cpu,
            pct(c.busy()),
            pct(x.wakeup_lock_share)
        ));
        if x.net_rx_share > 0.0 {
            evidence.push(format!(
                "CPU {}: {} of its samples in the NET_RX softirq",
                c.cpu,
                pct(x.net_rx_share)
            ));
        }
    }
    out.push(Finding {
        name: "lock-contention",
        severity: Severity::Warning,
        summary: format!(
            "{} spent a large share waking sockets' waiters under a spinlock: threads contend for one socket, or receive work is concentrated",
            if hot.len() == 1 { format!("CPU {}", hot[0].0.cpu) } else { format!("{} CPUs", hot.len()) }
        ),
        evidence,
        remedy: lock_remedy(host, s, ctx),
        cause: Some(Cause::CpuWork {
            side: "cpus".into(),
            work: "lock".into(),
            share: hot.iter().map(|(_, x)| x.wakeup_lock_share).fold(0.0, f64::max),
        }),
    });
}

/// What reduces socket wake-up contention here: RPS only for an interface on the run's path
/// that carries traffic with RPS off (loopback traffic is received in the sender's own
/// context, where RPS does not apply); SO_REUSEPORT only for a server with several workers.
fn lock_remedy(host: &Host, s: &Summary, ctx: &Context) -> String {
    let mut parts = Vec::new();
    let rps: Vec<&str> = host
        .nics
        .iter()
        .filter(|n| n.name != "lo" && ctx.on_path(&n.name) && !n.rps_on())
        .filter(|n| {
            s.interfaces.iter().any(|i| i.name == n.name && i.rx_pps >= super::BUSY_NIC_PPS)
        })
        .map(|n| n.name.as_str())
        .collect();
    if !rps.is_empty() {
        parts.push(format!(
            "spread {}'s receive work over CPUs (RPS: `qpslab tune plan --iface {}`)",
            rps.join(", "),
            rps[0]
        ));
    }
    let workers = s
        .processes
        .iter()
        .filter(|p| p.role == qpslab_host::sample::Role::Server)
        .map(|p| p.busy_threads)
        .sum::<usize>();
    if workers > 1 && !ctx.nginx.as_ref().is_some_and(|n| n.reuseport) {
        parts.push("one listening socket per worker (SO_REUSEPORT: `qpslab serve --accept reuseport`, nginx `listen ... reuseport`)".into());
    }
    if parts.is_empty() {
        "fewer wake-ups per request (pipelining, HTTP/2 streams, larger batches): with one server worker and loopback traffic (received in the sender's context), neither RPS nor SO_REUSEPORT applies here".into()
    } else {
        parts.join("; ")
    }
}

fn slow_clocksource(host: &Host, s: &Summary, p: &Profile, out: &mut Vec<Finding>) {
    let Some(cs) = host.clocksource.as_deref().filter(|c| *c != "tsc") else { return };
    let hot: Vec<(&CpuShare, &CpuProfile)> =
        busy(s, p).filter(|(c, _)| p.cpu_share(c.cpu, Category::Clock) >= CLOCK_SHARE).collect();
    if hot.is_empty() {
        return;
    }
    let available = if host.clocksources_available.is_empty() {
        "not listed".to_string()
    } else {
        host.clocksources_available.join(" ")
    };
    let mut evidence = vec![format!("clocksource {cs} (available: {available})")];
    for (c, x) in &hot {
        evidence.push(format!(
            "CPU {}: {} of its samples reading the clock ({})",
            c.cpu,
            pct(p.cpu_share(c.cpu, Category::Clock)),
            symbols_of(&x.top_kernel, Category::Clock)
        ));
    }
    let tsc = host.clocksources_available.iter().any(|c| c == "tsc");
    out.push(Finding {
        name: "slow-clocksource",
        severity: Severity::Warning,
        summary: format!("clock reads are expensive with the {cs} clocksource and show in the profile"),
        evidence,
        remedy: if tsc {
            "switch the clocksource to tsc (`qpslab tune plan` proposes it; `qpslab tune apply` writes it)".into()
        } else {
            "tsc is not offered here; a newer hypervisor or instance type may offer it (or kvm-clock/hyperv with the vDSO)".into()
        },
        cause: Some(Cause::Clocksource { current: cs.to_string(), tsc }),
    });
}

/// A category that, past its share of a followed process's samples, is a finding:
/// (category, share, finding, what the process does, what its evidence lists).
const SIDE_RULES: [(Category, f64, &str, &str, &str); 3] = [
    (
        Category::Syscall,
        SYSCALL_SHARE,
        "syscall-bound",
        "entering and leaving system calls",
        "its top kernel symbols there",
    ),
    (Category::Copy, COPY_SHARE, "copy-bound", "copying memory", "its top copy symbols"),
    (
        Category::Connection,
        CONNECTION_SHARE,
        "connection-bound",
        "opening and closing connections",
        "its top connection symbols",
    ),
];

/// The remedy that fits the side and the program: a generator flag only for the generator,
/// an engine only where the server has one; `searched`: the generator's connects searched
/// the port range past the TIME_WAIT sockets it held.
fn side_remedy(finding: &str, x: &ProcessProfile, searched: bool) -> &'static str {
    match (finding, x.role.as_str(), x.comm.as_str()) {
        ("connection-bound", "generator", _) if !searched => {
            "keep connections alive where the test allows (drop --conn-per-request); a connection per request costs the generator this much of its CPU on its own: more generator threads on free CPUs, or more client machines"
        }
        ("syscall-bound", "generator", _) => {
            "fewer system calls per request on the generator: pipelining (`qpslab load --pipeline`), `--io uring`, or HTTP/2 streams (`--h2 --streams`)"
        }
        ("syscall-bound", _, "qpslab") => {
            "fewer system calls per request: `qpslab serve --io uring` (the kernel batches them)"
        }
        ("syscall-bound", _, "nginx") => {
            "fewer system calls per request in nginx: access_log off or buffered (a write each), a higher keepalive_requests (an accept and a close each); nginx has no io_uring engine"
        }
        ("syscall-bound", _, _) => {
            "fewer system calls per request in the server: keep-alive, batched writes, an io_uring engine where the server has one"
        }
        ("connection-bound", "generator", _) => {
            "keep connections alive where the test allows (drop --conn-per-request); with a connection per request the generator closes first (always on HTTP/2, where the server keeps the connection), holds the TIME_WAIT sockets and its connects search the port range past them: bind ports outside the kernel's ephemeral range (`--source 127.0.0.1:10000-32767`: a bound port's tuple in TIME_WAIT is taken again at once), close with a reset (`--rst-close`: no TIME_WAIT, the server sees a reset), or spread the connects over more source addresses (`--source 127.0.0.2-127.0.0.254` on loopback)"
        }
        ("connection-bound", _, _) => {
            "keep connections alive (keep-alive, a higher keepalive_requests, HTTP/2); for the accepts themselves, a listening socket per worker (SO_REUSEPORT) and TLS session resumption"
        }
        ("copy-bound", "generator", _) => {
            "the generator copies what it reads: smaller responses, or more generator CPUs"
        }
        _ => {
            "copy less in the server: sendfile or splice for static bodies (nginx `sendfile on`), smaller responses, or more CPUs for it"
        }
    }
}

/// syscall-bound, copy-bound and connection-bound for one followed process.
fn side_bound(s: &Summary, x: &ProcessProfile, out: &mut Vec<Finding>) {
    if x.samples < MIN_SAMPLES {
        return;
    }
    let cats: Vec<String> =
        x.categories.iter().take(4).map(|s| format!("{} {}", s.name, pct(s.share))).collect();
    for (cat, threshold, name, doing, listed) in SIDE_RULES {
        let share = x.categories.iter().find(|s| s.name == cat.name()).map_or(0.0, |s| s.share);
        if share < threshold {
            continue;
        }
        let mut evidence =
            vec![format!("{} (pid {}, {}): {}", x.comm, x.pid, x.role, cats.join(", "))];
        let searched = cat == Category::Connection && searched(s, x);
        if searched {
            let (share, symbols) = port_search(x);
            evidence.push(format!(
                "its connects searched for a free source port: {symbols} ({} of its samples)",
                pct(share)
            ));
            evidence.extend(time_wait_held(s));
        } else {
            evidence.push(format!("{listed}: {}", symbols_of(&x.top_kernel, cat)));
        }
        out.push(Finding {
            name,
            severity: Severity::Info,
            summary: format!("the {} spends {} of its CPU {doing}", x.role, pct(share)),
            evidence,
            remedy: side_remedy(name, x, searched).into(),
            cause: Some(Cause::CpuWork {
                side: x.role.clone(),
                work: match cat {
                    Category::Copy => "copy",
                    Category::Connection => "connection",
                    _ => "syscall",
                }
                .into(),
                share,
            }),
        });
    }
}

/// The side rule a followed side of `role` passes (`connection-bound`, ...) and its remedy,
/// for the verdict: where its CPU went is what less of it needs.
pub(super) fn bound_by(
    s: &Summary,
    ctx: &Context,
    role: &str,
) -> Option<(&'static str, &'static str)> {
    let p = ctx.profile.as_ref().filter(|p| p.available)?;
    p.with_role(role).filter(|x| x.samples >= MIN_SAMPLES).find_map(|x| {
        SIDE_RULES.iter().find_map(|&(cat, threshold, name, _, _)| {
            let share = x.categories.iter().find(|s| s.name == cat.name()).map_or(0.0, |s| s.share);
            // A connection's own cost is the headline's remedy already (more generator CPU).
            let searched = cat == Category::Connection && searched(s, x);
            let own_cost = cat == Category::Connection && !searched;
            (share >= threshold && !own_cost).then(|| (name, side_remedy(name, x, searched)))
        })
    })
}

/// The kernel's search for a free source port at connect (`__inet_hash_connect` walks the
/// range, `__inet_check_established` and `tcp_twsk_unique` test each port's tuples).
const PORT_SEARCH: [&str; 3] =
    ["__inet_hash_connect", "__inet_check_established", "tcp_twsk_unique"];

/// Share of a followed generator's samples in the port search from which its connects are
/// said to have searched.
const PORT_SEARCH_SHARE: f64 = 0.10;

/// The share of `x`'s samples whose leaf is the port search, and those leaves.
fn port_search(x: &ProcessProfile) -> (f64, String) {
    let hits: Vec<&Share> =
        x.top_kernel.iter().filter(|k| PORT_SEARCH.contains(&k.name.as_str())).collect();
    let listed: Vec<String> = hits.iter().map(|k| format!("{} {}", k.name, pct(k.share))).collect();
    (hits.iter().map(|k| k.share).sum(), listed.join(", "))
}

/// The generator's connects searched the port range past TIME_WAIT sockets of its own: the
/// profile has the search, and connections it closed in the window hold ports in TIME_WAIT.
fn searched(s: &Summary, x: &ProcessProfile) -> bool {
    x.role == "generator" && port_search(x).0 >= PORT_SEARCH_SHARE && time_wait_held(s).is_some()
}

/// The destination whose ephemeral ports were most held in TIME_WAIT by connections closed
/// within the window: `127.0.0.1:80: 28190 of the source ports to it in TIME_WAIT at most
/// (9120 of them under 1 s old, ...), 0 open`.
pub(super) fn time_wait_held(s: &Summary) -> Option<String> {
    let d = s.dest_ports.iter().filter(|d| d.tw_in_window > 0).max_by_key(|d| d.time_wait)?;
    Some(format!(
        "{}: {} of the ephemeral ports to it in TIME_WAIT at most ({} of them under 1 s old, {} closed within the window), {} open",
        d.dest, d.time_wait, d.tw_young, d.tw_in_window, d.open
    ))
}

/// Where a followed side's CPU went, for the verdict's evidence: `generator qpslab (pid 7):
/// tcp-transmit 31%, syscall 22%, ... (top user: ...)`.
pub(super) fn where_it_went(ctx: &Context, role: &str) -> Vec<String> {
    let Some(p) = ctx.profile.as_ref().filter(|p| p.available) else { return Vec::new() };
    p.with_role(role)
        .filter(|x| x.samples >= MIN_SAMPLES)
        .map(|x| {
            let cats: Vec<String> = x
                .categories
                .iter()
                .take(4)
                .map(|s| format!("{} {}", s.name, pct(s.share)))
                .collect();
            let user = x.top_user.first().map_or(String::new(), |u| {
                format!("; top user symbol {} {}", u.name, pct(u.share))
            });
            format!(
                "profile: the {role} {} (pid {}) spent its samples on {}{user}",
                x.comm,
                x.pid,
                cats.join(", ")
            )
        })
        .collect()
}

/// The softirq CPU's profile, for softirq-concentrated's evidence.
pub(super) fn net_rx_evidence(ctx: &Context, cpu: usize) -> Option<String> {
    let p = ctx.profile.as_ref().filter(|p| p.available)?;
    let x = p.cpus.iter().find(|c| c.cpu == cpu && c.samples > 0)?;
    let top: Vec<String> =
        x.top_kernel.iter().take(3).map(|s| format!("{} {}", s.name, pct(s.share))).collect();
    Some(format!(
        "profile: {} of CPU {cpu}'s samples in the NET_RX softirq (top: {})",
        pct(x.net_rx_share),
        top.join(", ")
    ))
}
