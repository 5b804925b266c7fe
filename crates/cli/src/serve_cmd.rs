//! `qpslab serve`: options in, server run, totals out.

use std::time::Instant;

use qpslab_serve::{ServeConfig, ServeReport, Server, WorkerCounters};
use qpslab_sys::root::Root;

use crate::args::ServeArgs;
use crate::{output, Outcome, UsageError};

pub fn run(a: ServeArgs) -> anyhow::Result<Outcome> {
    let usage = |e: &dyn std::fmt::Display| UsageError(e.to_string());
    let opts = a.to_options().map_err(|e| usage(&e))?;
    let cfg = ServeConfig::from_options(&opts).map_err(|e| usage(&e))?;
    let ready_fd_error = |fd: i32, e: std::io::Error| {
        let e = qpslab_sys::net::message(&e);
        UsageError(format!(
            "--ready-fd {fd}: {e}; give a descriptor open for writing that serve inherited (3 or more)"
        ))
    };
    if let Some(fd) = a.ready_fd {
        qpslab_sys::fd::check_ready(fd).map_err(|e| ready_fd_error(fd, e))?;
    }
    if let Some(note) = &cfg.io_note {
        eprintln!("qpslab serve: note: {note}");
    }
    let server = Server::bind(cfg).map_err(|e| usage(&e))?;
    // Before the "listening" line and the readiness line: whoever reads them may signal at once.
    let stop = qpslab_sys::signals::stop_flag()?;
    for w in server.warnings(&Root::live()) {
        eprintln!("qpslab serve: warning: {w}");
    }
    eprintln!("qpslab serve: {}", startup_line(&server));
    if let Some(t) = &server.config().tls {
        let made = if t.self_signed {
            format!("self-signed certificate for {} made at start", t.names.join(", "))
        } else {
            "certificate from --tls-cert".into()
        };
        eprintln!("qpslab serve: https: {made}; SHA-256 fingerprint {}", t.fingerprint);
    }
    if let Some(fd) = a.ready_fd {
        let ready = serde_json::json!({
            "ready": true,
            "pid": std::process::id(),
            "listen": server.local_addrs(),
            "unix": server.unix_paths(),
            "workers": server.config().workers,
            "io": server.config().io.name(),
            "h3": server.config().h3.is_some(),
        });
        qpslab_sys::fd::notify_ready(fd, &ready.to_string()).map_err(|e| ready_fd_error(fd, e))?;
    }
    let started = Instant::now();
    let mut stats = StatsLines { started, last: None, per_worker: a.per_worker };
    let totals = server.run(stop, a.stats_every, &mut |snap| stats.print(snap))?;
    let cfg = server.config();
    let report = ServeReport {
        version: format!("{} ({})", env!("CARGO_PKG_VERSION"), env!("QPSLAB_GIT_COMMIT")),
        listen: server.listen_names(),
        workers: cfg.workers,
        accept: cfg.accept.name(),
        io: cfg.io.name(),
        sqpoll: cfg.sqpoll,
        tls: cfg.tls.as_ref().map(|t| qpslab_serve::TlsReport {
            fingerprint_sha256: t.fingerprint.clone(),
            self_signed: t.self_signed,
        }),
        duration_s: started.elapsed().as_secs_f64(),
        totals: WorkerCounters::sum(&totals),
        per_worker: totals,
    };
    output::emit(a.json, &report, || serve_text(&report))?;
    Ok(Outcome::Passed)
}

/// `listening on ADDR (N workers, accept MODE, pinned to [..], sharing the port with ...)`.
fn startup_line(server: &Server) -> String {
    let cfg = server.config();
    let addrs = server.listen_names();
    let shared: Vec<String> = server.shared_with().iter().map(ToString::to_string).collect();
    let sharing = match (cfg.share_port, shared.is_empty()) {
        (false, _) => String::new(),
        (true, true) => ", sharing the port with no other server yet".into(),
        (true, false) => {
            format!(
                ", sharing the port with {}: the servers split the connections",
                shared.join(", ")
            )
        }
    };
    format!(
        "listening on {}{} ({} {}, accept {}, io {}{}{}{sharing})",
        addrs.join(", "),
        match (&cfg.tls, &cfg.h3) {
            (Some(_), Some(_)) => " for https, and HTTP/3 on UDP at the same ports",
            (Some(_), None) => " for https",
            _ => "",
        },
        cfg.workers,
        if cfg.workers == 1 { "worker" } else { "workers" },
        // A unix socket alone is one socket every worker accepts from, whatever the mode.
        if cfg.listen.is_empty() { "shared" } else { cfg.accept.name() },
        cfg.io.name(),
        if cfg.sqpoll { " with submission polling" } else { "" },
        cfg.cpus.as_ref().map_or(String::new(), |c| format!(", pinned to {c:?}")),
    )
}

/// `--stats-every`: a line of totals (and one per worker with `--per-worker`) each interval.
struct StatsLines {
    started: Instant,
    last: Option<(Instant, Vec<WorkerCounters>)>,
    per_worker: bool,
}

impl StatsLines {
    fn print(&mut self, snap: &[WorkerCounters]) {
        let now = Instant::now();
        let prev =
            self.last.take().unwrap_or((self.started, vec![WorkerCounters::default(); snap.len()]));
        let secs = now.duration_since(prev.0).as_secs_f64().max(1e-3);
        let line = |label: String, s: &WorkerCounters, p: &WorkerCounters| {
            let mut l = format!(
                "{label} open {} req/s {:.0} requests {} rejected {} timeouts {}",
                s.open,
                (s.requests - p.requests) as f64 / secs,
                s.requests,
                s.rejected,
                s.timeouts
            );
            // HTTP/3: the UDP datagrams of the interval, a second, each way.
            if let Some(q) = &s.quic {
                let pq = p.quic.unwrap_or_default();
                let rate = |a: u64, b: u64| a.saturating_sub(b) as f64 / secs;
                l += &format!(
                    " datagrams/s in {:.0} out {:.0} lost packets {}",
                    rate(q.datagrams_in, pq.datagrams_in),
                    rate(q.datagrams_out, pq.datagrams_out),
                    q.lost_packets
                );
            }
            l
        };
        let t = now.duration_since(self.started).as_secs_f64();
        let (all, before) = (WorkerCounters::sum(snap), WorkerCounters::sum(&prev.1));
        eprintln!("{}", line(format!("[{t:>6.1}s]"), &all, &before));
        if self.per_worker {
            for (i, (s, p)) in snap.iter().zip(&prev.1).enumerate() {
                eprintln!("{}", line(format!("  worker {i}"), s, p));
            }
        }
        self.last = Some((now, snap.to_vec()));
    }
}

/// The totals line, and a line per worker when there are several.
fn serve_text(r: &ServeReport) -> String {
    let t = &r.totals;
    let tls =
        if r.tls.is_some() { format!(", TLS failures {}", t.tls_failures) } else { String::new() };
    let mut o = format!(
        "served {} requests in {:.2}s on {} connections; rejected {}, timeouts {}, accept errors {}{tls}\n",
        t.requests, r.duration_s, t.accepted, t.rejected, t.timeouts, t.accept_errors
    );
    if let Some(q) = &t.quic {
        // What the QUIC side's system calls carried, as `load --h3` reports it.
        let per = |n: u64, calls: u64| n as f64 / calls.max(1) as f64;
        o += &format!(
            "HTTP/3: datagrams {} in ({:.1} per recvmmsg, {} GRO reads), {} out ({:.1} per \
             sendmmsg, {} GSO sends, {} dropped); lost packets {}; Retry packets {}\n",
            q.datagrams_in,
            per(q.datagrams_in, q.recv_calls),
            q.gro_reads,
            q.datagrams_out,
            per(q.datagrams_out, q.send_calls),
            q.gso_sends,
            q.send_dropped,
            q.lost_packets,
            q.retries,
        );
    }
    if r.per_worker.len() > 1 {
        for (i, w) in r.per_worker.iter().enumerate() {
            o += &format!("  worker {i}: {} requests, {} connections\n", w.requests, w.accepted);
        }
    }
    o
}
