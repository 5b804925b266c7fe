//! The host's shared limits that no process owns: the hypervisor's share of the CPUs (steal),
//! memory short of demand, and the kernel's tables that fill under connection churn
//! (TIME_WAIT buckets, TCP's buffer memory, conntrack). Each is read over the window; a
//! table is named when it refused something in it, or stood at its limit.

use qpslab_host::Host;

use super::summary::{pct, per_s, Summary};
use super::{host_settings, Cause, Context, Finding, Severity};
use qpslab_host::sample::Role;

/// Steal from which the hypervisor is named, as a share of the CPUs' time: a warning from
/// [`STEAL_WARN`] when a side was short of CPU, else info from [`STEAL_INFO`]. This VM shows 2-9% under load on both CPUs and
/// none idle: a neighbour's share that runs here pay, said, not an alarm.
const STEAL_WARN: f64 = 0.20;
const STEAL_INFO: f64 = 0.02;
/// PSI memory `some` from which tasks waiting for memory are named: a warning from
/// [`MEMORY_WARN`], info from [`MEMORY_INFO`].
const MEMORY_WARN: f64 = 0.10;
const MEMORY_INFO: f64 = 0.01;
/// Major faults a second that, with allocations stalling, name memory without PSI.
const MAJOR_FAULTS_PER_S: f64 = 100.0;
/// A conntrack table this full is named before it refuses anything.
const CONNTRACK_FULL: f64 = 0.9;

pub(super) fn limits(host: &Host, s: &Summary, ctx: &Context, out: &mut Vec<Finding>) {
    // Steal takes CPU from a side only when the side wanted all of it.
    let cpu_bound = out
        .iter()
        .any(|f| matches!(f.cause, Some(Cause::Saturated { .. } | Cause::Contention { .. })));
    steal(s, cpu_bound, out);
    let limited = out.iter().any(|f| {
        matches!(&f.cause, Some(Cause::MemoryLimit { hits, oom_kills, .. }) if hits + oom_kills > 0)
    });
    memory(s, limited, out);
    time_wait(host, s, ctx, out);
    tcp_memory(host, s, out);
    conntrack(s, out);
}

/// The hypervisor ran other guests while this one's CPUs had work.
fn steal(s: &Summary, cpu_bound: bool, out: &mut Vec<Finding>) {
    if s.cpus.is_empty() {
        return;
    }
    let mean = s.cpus.iter().map(|c| c.steal).sum::<f64>() / s.cpus.len() as f64;
    if mean < STEAL_INFO {
        return;
    }
    let worst = s.cpus.iter().max_by(|a, b| a.steal.total_cmp(&b.steal)).map_or(0, |c| c.cpu);
    let per_cpu: Vec<String> =
        s.cpus.iter().map(|c| format!("cpu{} {}", c.cpu, pct(c.steal))).collect();
    out.push(Finding {
        name: "cpu-steal",
        severity: if mean >= STEAL_WARN && cpu_bound { Severity::Warning } else { Severity::Info },
        summary: format!(
            "the hypervisor gave {} of this host's CPU time to other guests while its tasks were runnable (most on CPU {worst}): the run had less CPU than it saw",
            pct(mean)
        ),
        evidence: vec![format!("/proc/stat steal over the window: {}", per_cpu.join(", "))],
        remedy: "a host or instance whose CPUs are not shared (dedicated, or a larger size), or measure when the neighbours are quiet; no setting of this host lifts it".into(),
        cause: Some(Cause::Steal { share: mean }),
    });
}

/// A followed process's storage reads a second from which its cgroup's memory limit is named
/// as what it waits on (what the limit evicted, read again).
const REREAD_PER_S: f64 = 1048576.0;

/// A followed process's cgroup memory limit hit in the window: the kernel reclaims its page
/// cache and memory within the cgroup whatever the host has free (a container's limit). A
/// warning when it read from storage at [`REREAD_PER_S`] or tasks waited for memory (PSI) at
/// [`MEMORY_INFO`] or more; critical when the OOM killer ended a process there; else info.
/// Said before the disk's findings, which take it as their cause.
pub(super) fn memory_limit(s: &Summary, out: &mut Vec<Finding>) {
    let secs = s.duration_s.max(1e-9);
    for p in &s.processes {
        let Some(m) = p.memory_limit.as_ref().filter(|m| m.hits + m.oom_kills > 0) else {
            continue;
        };
        let read_per_s = p.storage_read.unwrap_or(0) as f64 / secs;
        let own_waits = m.pressure_s.map(|w| w / secs);
        let costs = read_per_s >= REREAD_PER_S
            || own_waits.or(s.memory_pressure).is_some_and(|x| x >= MEMORY_INFO);
        let severity = match (m.oom_kills > 0, costs) {
            (true, _) => Severity::Critical,
            (false, true) => Severity::Warning,
            (false, false) => Severity::Info,
        };
        let mib = |b: u64| format!("{:.1} MiB", b as f64 / 1048576.0);
        let side = if p.role == Role::Server { "the server" } else { "the load generator" };
        let mut evidence = vec![format!(
            "{}: limit {}, {} charged at the window's end, limit hit +{} ({:.0}/s){}",
            m.cgroup,
            mib(m.limit),
            mib(m.usage),
            m.hits,
            m.hits as f64 / secs,
            if m.oom_kills > 0 {
                format!(", {} process(es) killed by the OOM killer", m.oom_kills)
            } else {
                String::new()
            }
        )];
        if read_per_s > 0.0 {
            evidence.push(format!(
                "{} (pid {}) read {} from storage in the window ({}/s, /proc/PID/io): what the limit evicted, read again",
                p.comm,
                p.pid,
                mib(p.storage_read.unwrap_or(0)),
                mib(read_per_s as u64)
            ));
        }
        if let Some(x) = own_waits {
            evidence.push(format!(
                "its cgroup's tasks waited for memory {} of the window (memory.pressure some)",
                pct(x)
            ));
        }
        if let Some(x) = s.memory_pressure {
            evidence.push(format!(
                "tasks waited for memory {} of the window (PSI memory some, host-wide)",
                pct(x)
            ));
        }
        out.push(Finding {
            name: "memory-limit",
            severity,
            summary: format!(
                "{side} ({}, pid {}) is held to its cgroup's memory limit of {}: it hit it {} times in the window, and the kernel reclaimed its page cache and memory within the cgroup whatever the host had free",
                p.comm,
                p.pid,
                mib(m.limit),
                m.hits
            ),
            evidence,
            remedy: format!(
                "a larger memory limit for {} (`docker --memory`, Kubernetes resources.limits.memory, systemd MemoryMax=, the cgroup's memory.max or memory.limit_in_bytes), or a working set that fits in it (smaller caches, fewer workers)",
                m.cgroup
            ),
            cause: Some(Cause::MemoryLimit {
                pid: p.pid,
                cgroup: m.cgroup.clone(),
                limit: m.limit,
                hits: m.hits,
                oom_kills: m.oom_kills,
            }),
        });
    }
}

/// Tasks waited for memory: reclaim in the allocating task, faults served from storage. When a
/// followed process's cgroup hit its memory limit (`limited`), the waits are said as that
/// limit's, at info: the host was not short of memory.
fn memory(s: &Summary, limited: bool, out: &mut Vec<Finding>) {
    let vm = s.vm.unwrap_or_default();
    let faulting = vm.alloc_stalls > 0 && vm.major_faults_per_s >= MAJOR_FAULTS_PER_S;
    let share = s.memory_pressure;
    let severity = match share {
        Some(p) if p >= MEMORY_WARN => Severity::Warning,
        Some(p) if p >= MEMORY_INFO => Severity::Info,
        None if faulting => Severity::Warning,
        _ => return,
    };
    let mut evidence = Vec::new();
    if let Some(p) = share {
        evidence.push(format!(
            "tasks waited for memory {} of the window (PSI memory some, host-wide)",
            pct(p)
        ));
    }
    evidence.push(format!(
        "{:.0} major faults/s (pages read back from storage), {:.0} pages/s scanned by allocating tasks (direct reclaim), {} allocation stalls (/proc/vmstat)",
        vm.major_faults_per_s, vm.direct_scans_per_s, vm.alloc_stalls
    ));
    let waited = share.map(|p| format!(" {} of the window", pct(p))).unwrap_or_default();
    out.push(Finding {
        name: "memory-pressure",
        severity: if limited { Severity::Info } else { severity },
        summary: if limited {
            format!("tasks waited for memory{waited}: in a cgroup at its memory limit (memory-limit), not for want of the host's memory")
        } else {
            format!("the host is short of memory: tasks waited for it{waited}")
        },
        evidence,
        remedy: if limited {
            "none of its own: the cgroup's memory limit (memory-limit)".into()
        } else {
            "less memory in use on the host (the server's caches and workers, other work), or more memory; a server's files it reads again and again belong in memory".into()
        },
        cause: Some(Cause::MemoryPressure { share: share.unwrap_or(0.0) }),
    });
}

/// The TIME_WAIT table overflowed: the kernel closed sockets without their TIME_WAIT.
fn time_wait(host: &Host, s: &Summary, ctx: &Context, out: &mut Vec<Finding>) {
    let overflows = s.tcp.get("TCPTimeWaitOverflow").copied().unwrap_or(0);
    if overflows <= 0 {
        return;
    }
    let buckets = host.sysctl("net.ipv4.tcp_max_tw_buckets").unwrap_or("?");
    let mine = super::rules::opened_connections(ctx);
    out.push(Finding {
        name: "time-wait-overflow",
        severity: if mine { Severity::Warning } else { Severity::Info },
        summary: format!(
            "the TIME_WAIT table was full: {overflows} closed connection(s) skipped TIME_WAIT ({:.0}/s){}",
            per_s(overflows as u64, s.duration_s),
            if mine { "" } else { "; the run opened no connection in its window, so not its own" }
        ),
        evidence: vec![
            format!("TcpExt TCPTimeWaitOverflow +{overflows} (dmesg: \"TCP: time wait bucket table overflow\")"),
            format!("{} sockets in TIME_WAIT at most (sockstat tw), net.ipv4.tcp_max_tw_buckets = {buckets}", s.tcp_tw_max),
        ],
        remedy: format!(
            "keep connections alive (each close leaves a socket in TIME_WAIT for 60 s), or raise net.ipv4.tcp_max_tw_buckets (to {}): without TIME_WAIT a late segment of an old connection can corrupt a new one on the same ports",
            qpslab_tune::remedy::sysctl("net.ipv4.tcp_max_tw_buckets").unwrap_or_default()
        ),
        cause: host_settings("time-wait-overflow"),
    });
}

/// TCP's buffers reached net.ipv4.tcp_mem's pressure mark: the kernel shrank every socket's
/// buffers, or dropped connections past its limit.
fn tcp_memory(host: &Host, s: &Summary, out: &mut Vec<Finding>) {
    let d = |k: &str| s.tcp.get(k).copied().unwrap_or(0).max(0) as u64;
    let marks: Vec<u64> = host
        .sysctl("net.ipv4.tcp_mem")
        .map(|v| v.split_ascii_whitespace().filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_default();
    let pressure = marks.get(1).copied();
    let at_mark = pressure.is_some_and(|p| p > 0 && s.tcp_mem_max >= p);
    let (entered, aborted) = (d("TCPMemoryPressures"), d("TCPAbortOnMemory"));
    if entered == 0 && aborted == 0 && !at_mark {
        return;
    }
    let marks_text = marks.iter().map(u64::to_string).collect::<Vec<_>>().join(" ");
    out.push(Finding {
        name: "tcp-memory-pressure",
        severity: if aborted > 0 { Severity::Critical } else { Severity::Warning },
        summary: if aborted > 0 {
            format!("TCP ran out of buffer memory: {aborted} connection(s) were dropped for it")
        } else {
            "TCP's buffers reached the host's pressure mark (net.ipv4.tcp_mem): every socket's buffers were shrunk".into()
        },
        evidence: vec![
            format!(
                "TcpExt TCPMemoryPressures +{entered} ({} ms under pressure), TCPAbortOnMemory +{aborted}",
                d("TCPMemoryPressuresChrono")
            ),
            format!("TCP buffers at most {} pages (sockstat mem) against net.ipv4.tcp_mem = {marks_text} (pages: low, pressure, high)", s.tcp_mem_max),
        ],
        remedy: "smaller buffers per connection (net.ipv4.tcp_rmem / tcp_wmem's maximum, the server's own buffer sizes), fewer connections, or a larger net.ipv4.tcp_mem where the host has the memory".into(),
        cause: Some(Cause::TcpMemory { pages: s.tcp_mem_max, pressure: pressure.unwrap_or(0) }),
    });
}

/// The conntrack table refused entries, or stood near its size.
fn conntrack(s: &Summary, out: &mut Vec<Finding>) {
    let Some(c) = s.conntrack.filter(|c| c.max > 0) else { return };
    let full = c.peak as f64 >= CONNTRACK_FULL * c.max as f64;
    if c.dropped == 0 && !full {
        return;
    }
    out.push(Finding {
        name: "conntrack-full",
        severity: if c.dropped > 0 { Severity::Critical } else { Severity::Warning },
        summary: if c.dropped > 0 {
            format!("the conntrack table was full: {} packet(s) of new connections were dropped, and their SYNs retried after 1 s", c.dropped)
        } else {
            format!("the conntrack table stood at {} of its size: new connections are dropped once it fills", pct(c.peak as f64 / c.max as f64))
        },
        evidence: vec![
            format!("{} entries at most of net.netfilter.nf_conntrack_max = {}", c.peak, c.max),
            format!("drop, early_drop and insert_failed +{} (/proc/net/stat/nf_conntrack; dmesg: \"nf_conntrack: table full, dropping packet\")", c.dropped),
        ],
        remedy: format!(
            "raise net.netfilter.nf_conntrack_max (to {}) with nf_conntrack_buckets, or take the benchmark's port out of tracking (a `notrack` rule in the raw table)",
            qpslab_tune::remedy::sysctl("net.netfilter.nf_conntrack_max").unwrap_or_default()
        ),
        cause: host_settings("conntrack-full"),
    });
}
