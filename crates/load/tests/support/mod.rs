//! Helpers for the engine's integration tests: a real nginx on a free loopback port, scripted
//! misbehaving servers, and one-call runs of the engine.

#![allow(dead_code, reason = "each test uses a subset of the helpers")]

pub mod aioquic;
pub mod h2_script;
pub mod h2o;
pub mod httpd;
pub mod nginx;
pub mod scripted;

use std::time::Duration;

use qpslab_load::report::RunMeta;
use qpslab_load::{LoadConfig, LoadOptions, Report};

/// Options for `url` with small, fast defaults for tests, on event loop `io`.
pub fn opts_on(io: qpslab_load::IoChoice, url: &str) -> LoadOptions {
    LoadOptions {
        io,
        urls: vec![url.to_string()],
        threads: Some(1),
        connections: Some(4),
        timeout: Duration::from_secs(2),
        ..LoadOptions::default()
    }
}

/// Validates, runs and reports, asserting the accounting identities every run must satisfy.
pub fn run(opts: &LoadOptions) -> Report {
    let cfg = LoadConfig::from_options(opts).expect("valid options");
    let result = qpslab_load::run(
        &cfg,
        &std::sync::atomic::AtomicBool::new(false),
        &mut qpslab_load::feed::Unwatched,
    )
    .expect("run completes");
    let report = Report::new(&cfg, &result, &RunMeta::default());
    let r = &report.requests;
    assert_eq!(r.sent, r.completed + r.failed + r.in_flight_at_stop, "sent identity: {r:?}");
    assert_eq!(r.completed, r.ok + r.bad_status, "completed identity: {r:?}");
    assert_eq!(r.failed, report.errors.values().sum::<u64>(), "failed = sum of errors: {r:?}");
    assert_eq!(r.completed, report.status.values().sum::<u64>(), "status counts: {r:?}");
    let measured = result.rec.latency.len();
    if opts.exclude_warmup_latency {
        // Responses to requests sent in the warm-up have none.
        assert!(measured <= r.completed && r.completed - measured <= r.from_warmup, "{r:?}");
    } else {
        assert_eq!(r.completed, measured, "one latency sample per response");
    }
    // Every request is on a target's row or in a group of the pool.
    let t = &report.per_target;
    let groups = report.pool.as_ref().map_or(&[][..], |p| p.groups.as_slice());
    let sum = |f: &dyn Fn(u64, u64, u64, u64) -> u64| -> u64 {
        t.iter().map(|t| f(t.sent, t.completed, t.ok, t.failed)).sum::<u64>()
            + groups.iter().map(|g| f(g.sent, g.completed, g.ok, g.failed)).sum::<u64>()
    };
    assert_eq!(sum(&|s, _, _, _| s), r.sent, "per-target sent: {t:?} {groups:?}");
    assert_eq!(sum(&|_, c, _, _| c), r.completed, "per-target: {t:?} {groups:?}");
    assert_eq!(sum(&|_, _, o, _| o), r.ok, "per-target ok: {t:?} {groups:?}");
    assert_eq!(sum(&|_, _, _, f| f), r.failed, "per-target failed: {t:?} {groups:?}");
    if let Some(n) = opts.requests {
        if opts.duration.is_none() {
            assert_eq!(r.sent, n, "-n sends exactly n");
            assert_eq!(r.in_flight_at_stop, 0, "-n runs drain");
        }
    }
    report
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts a server with `spawn(port)` on a free loopback port until it listens (5 tries: a port
/// may be taken between finding it free and the server binding it); None when every try exited
/// or did not listen within 15 s (CI runs many tests at once).
pub fn start_listening(
    mut spawn: impl FnMut(u16) -> std::process::Child,
) -> Option<(std::process::Child, u16)> {
    for _attempt in 0..5 {
        let port = free_port();
        let mut child = spawn(port);
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while std::time::Instant::now() < deadline {
            if child_listens(child.id(), port) {
                return Some((child, port));
            }
            if child.try_wait().unwrap().is_some() {
                break; // port taken meanwhile, or a config error: try again
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    None
}

/// Whether process `pid` holds a socket listening on loopback port `port`. A connect alone is
/// not proof: while a slow server (Apache takes a second) starts, another test's server may take
/// the same port, and the run would then load, and lose, someone else's server.
fn child_listens(pid: u32, port: u16) -> bool {
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let local = format!("0100007F:{port:04X}");
    let inodes: Vec<String> = tcp
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() > 9 && f[1] == local && f[3] == "0A")
        .map(|f| format!("socket:[{}]", f[9]))
        .collect();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|l| inodes.iter().any(|i| l.as_os_str() == i.as_str()))
    })
}

/// The lines of a server's access log, once there are `expect` of them or `patience` has passed
/// (servers log a request after its response, some in batches); read again a moment later so
/// that extra lines would show too.
pub fn log_lines(path: &std::path::Path, expect: usize, patience: Duration) -> Vec<String> {
    let read = || -> Vec<String> {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        text.lines().map(str::to_string).collect()
    };
    let deadline = std::time::Instant::now() + patience;
    while read().len() < expect && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    read()
}
