//! `qpslab serve`: options in, server run, totals out.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use qpslab_serve::{ServeConfig, ServeReport, Server, WorkerCounters};
use qpslab_sys::root::Root;

use crate::args::ServeArgs;
use crate::{output, Outcome, UsageError};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

pub fn run(a: ServeArgs) -> anyhow::Result<Outcome> {
    let opts = a.to_options().map_err(UsageError)?;
    let cfg = ServeConfig::from_options(&opts).map_err(|e| UsageError(e.to_string()))?;
    let server = Server::bind(cfg).map_err(|e| UsageError(e.to_string()))?;
    let cfg = server.config();
    // Before the "listening" line: whoever reads it may signal at once.
    // SAFETY: the handler only stores an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    for w in server.warnings(&Root::live()) {
        eprintln!("qpslab serve: warning: {w}");
    }
    let addrs: Vec<String> = server.local_addrs().iter().map(ToString::to_string).collect();
    let shared: Vec<String> = server.shared_with().iter().map(ToString::to_string).collect();
    eprintln!(
        "qpslab serve: listening on {} ({} {}, accept {}{}{})",
        addrs.join(", "),
        cfg.workers,
        if cfg.workers == 1 { "worker" } else { "workers" },
        cfg.accept.name(),
        cfg.cpus.as_ref().map_or(String::new(), |c| format!(", pinned to {c:?}")),
        if cfg.share_port {
            format!(
                ", sharing the port with {}: the servers split the connections",
                if shared.is_empty() {
                    "no other server yet".to_string()
                } else {
                    shared.join(", ")
                }
            )
        } else {
            String::new()
        }
    );
    let started = Instant::now();
    let mut last: Option<(Instant, Vec<WorkerCounters>)> = None;
    let per_worker = a.per_worker;
    let mut print_stats = |snap: &[WorkerCounters]| {
        let now = Instant::now();
        let prev = last.take().unwrap_or((started, vec![WorkerCounters::default(); snap.len()]));
        let secs = now.duration_since(prev.0).as_secs_f64().max(1e-3);
        let line = |label: String, s: &WorkerCounters, p: &WorkerCounters| {
            format!(
                "{label} open {} req/s {:.0} requests {} rejected {} timeouts {}",
                s.open,
                (s.requests - p.requests) as f64 / secs,
                s.requests,
                s.rejected,
                s.timeouts
            )
        };
        let t = now.duration_since(started).as_secs_f64();
        eprintln!(
            "{}",
            line(format!("[{t:>6.1}s]"), &WorkerCounters::sum(snap), &WorkerCounters::sum(&prev.1))
        );
        if per_worker {
            for (i, (s, p)) in snap.iter().zip(&prev.1).enumerate() {
                eprintln!("{}", line(format!("  worker {i}"), s, p));
            }
        }
        last = Some((now, snap.to_vec()));
    };
    let totals = server.run(&STOP, a.stats_every, &mut print_stats)?;
    let elapsed = started.elapsed();
    let all = WorkerCounters::sum(&totals);
    let report = ServeReport {
        version: format!("{} ({})", env!("CARGO_PKG_VERSION"), env!("QPSLAB_GIT_COMMIT")),
        listen: addrs,
        workers: cfg.workers,
        accept: cfg.accept.name(),
        duration_s: elapsed.as_secs_f64(),
        totals: all,
        per_worker: totals,
    };
    output::emit(a.json, &report, || serve_text(&report))?;
    Ok(Outcome::Passed)
}

/// The totals line, and a line per worker when there are several.
fn serve_text(r: &ServeReport) -> String {
    let t = &r.totals;
    let mut o = format!(
        "served {} requests in {:.2}s on {} connections; rejected {}, timeouts {}, accept errors {}\n",
        t.requests, r.duration_s, t.accepted, t.rejected, t.timeouts, t.accept_errors
    );
    if r.per_worker.len() > 1 {
        for (i, w) in r.per_worker.iter().enumerate() {
            o += &format!("  worker {i}: {} requests, {} connections\n", w.requests, w.accepted);
        }
    }
    o
}
