//! Per-worker balance: a server whose work all went to one of its workers while the others
//! idled is bound by that worker, whatever its average says ("the server used 1.0 of its 2
//! CPUs"). The workers are a master's child processes (nginx's, gunicorn's) or a numbered pool
//! of threads (`qpslab-serve-0`, ...). A connection is served by one worker for its life, so
//! fewer connections than workers (one HTTP/2 connection carrying every stream) or an accept
//! that hands them unevenly leaves workers with nothing to do.

use super::summary::{ProcSummary, Summary};
use super::{Cause, Context, Finding, Severity, SATURATED};
use qpslab_host::cpuset::CpuSet;
use qpslab_host::sample::Role;

/// The other workers' mean, as a share of the busiest's, under which they idled.
const IDLE_OTHERS: f64 = 0.3;
/// Idle CPU, in CPUs, on the workers' CPUs that another worker could have used.
const ROOM: f64 = 0.3;
/// Connections per worker under which too few connections explain the imbalance.
const CONNECTIONS_PER_WORKER: u64 = 2;

/// One server's workers: what they are, each one's CPU (busiest first), the CPUs they may run on.
struct Pool {
    what: String,
    cpus: Vec<f64>,
    reach: Option<CpuSet>,
}

fn pools(s: &Summary) -> Vec<Pool> {
    let servers: Vec<&ProcSummary> =
        s.processes.iter().filter(|p| p.role == Role::Server).collect();
    let mut out = Vec::new();
    // A master's children: its worker processes.
    for master in &servers {
        let workers: Vec<&&ProcSummary> = servers.iter().filter(|p| p.ppid == master.pid).collect();
        if workers.len() < 2 {
            continue;
        }
        let mut cpus: Vec<f64> = workers.iter().map(|p| p.cpu).collect();
        cpus.sort_by(|a, b| b.total_cmp(a));
        let reach = super::verdict::reach(&workers.iter().map(|p| **p).collect::<Vec<_>>());
        out.push(Pool {
            what: format!(
                "{}'s {} worker processes (master pid {})",
                master.comm,
                workers.len(),
                master.pid
            ),
            cpus,
            reach,
        });
    }
    // A numbered pool of threads in one process.
    for p in servers.iter().filter(|p| p.pool.len() >= 2) {
        out.push(Pool {
            what: format!("{} (pid {})'s {} worker threads", p.comm, p.pid, p.pool.len()),
            cpus: p.pool.clone(),
            reach: p.cpus.clone(),
        });
    }
    out
}

/// `worker-imbalance`: one worker saturated, the others idle, with CPU free for them.
pub(super) fn imbalance(s: &Summary, ctx: &Context, out: &mut Vec<Finding>) {
    let connections = ctx.load.as_ref().map(|l| l.connections);
    for pool in pools(s) {
        let (busiest, others) = (pool.cpus[0], &pool.cpus[1..]);
        let mean = others.iter().sum::<f64>() / others.len() as f64;
        let room: f64 = s
            .cpus
            .iter()
            .filter(|c| pool.reach.as_ref().is_none_or(|r| r.contains(c.cpu)))
            .map(|c| c.idle)
            .sum();
        if busiest < SATURATED || mean >= IDLE_OTHERS * busiest || room < ROOM {
            continue;
        }
        let workers = pool.cpus.len() as u64;
        let few = connections.is_some_and(|c| c < CONNECTIONS_PER_WORKER * workers);
        let mut evidence = vec![
            format!(
                "{}: {} CPUs each over the window",
                pool.what,
                pool.cpus.iter().map(|c| format!("{c:.2}")).collect::<Vec<_>>().join(", ")
            ),
            format!("{room:.2} CPUs idle where the idle workers may run"),
        ];
        if let Some(c) = connections {
            evidence.push(format!(
                "the load kept {c} connection(s) for {workers} workers: a worker serves a connection for its life"
            ));
        }
        let remedy = if few {
            format!("more connections than workers (at least {}: `-c`), so each worker has some; an HTTP/2 load's streams ride its connections, so more connections, not more streams", CONNECTIONS_PER_WORKER * workers)
        } else {
            "spread the connections over the workers: SO_REUSEPORT hashes each to one (nginx `listen ... reuseport`), or let one worker take fewer at a time (nginx `multi_accept off`, `accept_mutex on`)".to_string()
        };
        let summary = format!(
            "one of the server's {workers} workers did the work ({busiest:.2} CPUs) while the others idled ({mean:.2} CPUs each on average): the rate is one worker's, not the server's"
        );
        out.push(Finding {
            name: "worker-imbalance",
            severity: Severity::Warning,
            summary,
            evidence,
            remedy: remedy.clone(),
            cause: Some(Cause::WorkerImbalance {
                workers,
                busiest,
                others: mean,
                connections: connections.unwrap_or(0),
            }),
        });
        // More workers is the saturated server's usual remedy, and wrong here: it has idle ones.
        for f in out.iter_mut() {
            if matches!(&f.cause, Some(Cause::Saturated { side, held }) if side == "server" && held == "own")
            {
                f.remedy = format!("not more workers: one of {workers} did all the work (worker-imbalance): {remedy}");
            }
        }
    }
}
