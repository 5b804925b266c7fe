//! `qpslab serve`: options in, server run, totals out.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use qpslab_serve::{listen::backlog_warning, ServeConfig, ServeReport, Server, WorkerCounters};

use crate::args::ServeArgs;
use crate::{Outcome, UsageError};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

pub fn run(a: ServeArgs) -> anyhow::Result<Outcome> {
    let opts = a.to_options().map_err(UsageError)?;
    let cfg = ServeConfig::from_options(&opts).map_err(|e| UsageError(e.to_string()))?;
    let server = Server::bind(cfg).map_err(|e| UsageError(e.to_string()))?;
    let cfg = server.config();
    if let Some(w) = backlog_warning(Path::new("/"), cfg.backlog) {
        eprintln!("qpslab serve: warning: {w}");
    }
    let addrs: Vec<String> = server.local_addrs().iter().map(ToString::to_string).collect();
    eprintln!(
        "qpslab serve: listening on {} ({} {}, accept {}{})",
        addrs.join(", "),
        cfg.workers,
        if cfg.workers == 1 { "worker" } else { "workers" },
        cfg.accept.name(),
        cfg.cpus.as_ref().map_or(String::new(), |c| format!(", pinned to {c:?}"))
    );
    // SAFETY: the handler only stores an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
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
    let mut out = std::io::stdout().lock();
    if a.json {
        let report = ServeReport {
            version: format!("{} ({})", env!("CARGO_PKG_VERSION"), env!("QPSLAB_GIT_COMMIT")),
            listen: addrs,
            workers: cfg.workers,
            accept: cfg.accept.name(),
            duration_s: elapsed.as_secs_f64(),
            totals: all,
            per_worker: totals,
        };
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "served {} requests in {:.2}s on {} connections; rejected {}, timeouts {}, accept errors {}",
            all.requests,
            elapsed.as_secs_f64(),
            all.accepted,
            all.rejected,
            all.timeouts,
            all.accept_errors
        )?;
        if totals.len() > 1 {
            for (i, w) in totals.iter().enumerate() {
                writeln!(out, "  worker {i}: {} requests, {} connections", w.requests, w.accepted)?;
            }
        }
    }
    Ok(Outcome::Passed)
}
