//! The server's known costs per request, from its own configuration (nginx today): an access
//! log written per request, `keepalive_requests` against the run's reconnects, the workers
//! against the idle CPUs, `accept_mutex`, `open_file_cache` where it serves files. Always info, below the bound: when the server's CPU
//! is the bound they are what it spends that CPU on (said so), otherwise they cost nothing
//! this run measured. Each cost is said only when this run's evidence shows it applies; the
//! remedy lists only those.

use super::explain::Explanation;
use super::summary::{pct, Summary};
use super::{Cause, Context, Finding, Severity, HEADROOM_IDLE, SATURATED};
use qpslab_host::sample::Role;

/// Reconnects per second, as a share of the rate, from which closing connections is a cost.
const RECONNECT_SHARE: f64 = 0.001;

pub(super) fn nginx(s: &Summary, ctx: &Context, ex: &Explanation, out: &mut Vec<Finding>) {
    let Some(conf) = &ctx.nginx else { return };
    let mut evidence = Vec::new();
    let mut changes = Vec::new();
    let mut costs = (false, false, false, false);
    if conf.access_log_unbuffered {
        costs.0 = true;
        evidence.push(format!(
            "access_log {}: a log line written per request, unbuffered",
            conf.access_logs.join("; ")
        ));
        changes.push("`access_log off;` (or `buffer=64k flush=1s`)");
    }
    if let Some(l) = ctx.load.as_ref().filter(|l| l.duration_s > 0.0) {
        let rate = l.rate();
        let reconnects = l.reconnects as f64 / l.duration_s;
        // Each connection closes after keepalive_requests requests: rate / that many
        // reconnects per second are its doing.
        let closes = rate / conf.keepalive_requests.max(1) as f64;
        if rate > 0.0 && reconnects >= RECONNECT_SHARE * rate && closes >= 0.5 * reconnects {
            evidence.push(format!(
                "keepalive_requests {}: nginx closes a connection after that many requests; the run reconnected {reconnects:.0}/s at {rate:.0} requests/s ({} reconnects in {:.1} s), a TCP handshake for every {:.0} requests",
                conf.keepalive_requests,
                l.reconnects,
                l.duration_s,
                rate / reconnects.max(1e-9)
            ));
            changes.push("a higher `keepalive_requests` (100000)");
            costs.1 = true;
        }
    }
    let workers =
        s.processes.iter().filter(|p| p.role == Role::Server && p.busy_threads > 0).count();
    // Workers it has, busy or not (a master's children): idle ones as many as the CPUs want
    // no more of them (worker-imbalance says why they idle).
    let server = |pid: u32| s.processes.iter().any(|m| m.pid == pid && m.role == Role::Server);
    let have = s.processes.iter().filter(|p| p.role == Role::Server && server(p.ppid)).count();
    let idle: Vec<usize> =
        s.cpus.iter().filter(|c| c.idle >= HEADROOM_IDLE).map(|c| c.cpu).collect();
    if workers > 0 && workers.max(have) < s.cpus.len() && !idle.is_empty() {
        evidence.push(format!(
            "worker_processes {}: {workers} busy worker(s) on {} CPUs, CPU(s) {} at least {} idle",
            conf.worker_processes.as_deref().unwrap_or("1 (default)"),
            s.cpus.len(),
            idle.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
            pct(HEADROOM_IDLE)
        ));
        changes.push("more workers on the idle CPUs (`worker_processes`, `worker_cpu_affinity`)");
        costs.2 = true;
    }
    if conf.accept_mutex && workers > 1 {
        evidence.push("accept_mutex on: the workers take turns to accept".into());
        changes.push("`accept_mutex off;` (the default), or `listen ... reuseport`");
        costs.3 = true;
    }
    if conf.serves_files && !conf.open_file_cache {
        evidence.push("open_file_cache off, and the configuration serves files (a root or alias, no return): each request opens, stats and closes its file (a guess: which location the run's URL took is not known)".into());
        changes.push("`open_file_cache max=10000 inactive=30s;` when the run serves files");
    }
    if evidence.is_empty() {
        return;
    }
    let bound = ex.resources.iter().any(|r| r.kind == "server-cpu" && r.utilization >= SATURATED);
    // Info either way: the headline is the resource that bounds the rate (the server's CPU),
    // and this says what nginx spends it on.
    out.push(Finding {
        name: "nginx-config",
        severity: Severity::Info,
        summary: if bound {
            "nginx's configuration spends the CPU that bounds the rate on work a benchmark does not need".into()
        } else {
            "nginx's configuration has per-request costs; its CPU was not the bound in this run".into()
        },
        evidence,
        remedy: format!("in nginx's configuration: {} (then `nginx -s reload`)", changes.join("; ")),
        cause: Some(Cause::NginxCosts {
            access_log: costs.0,
            keepalive_requests: costs.1,
            workers: costs.2,
            accept_mutex: costs.3,
        }),
    });
}
