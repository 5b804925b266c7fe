//! Helpers for the engine's integration tests: a real nginx on a free loopback port, scripted
//! misbehaving servers, and one-call runs of the engine.

#![allow(dead_code, reason = "each test uses a subset of the helpers")]

pub mod httpd;
pub mod nginx;
pub mod scripted;

use std::time::Duration;

use qpslab_load::report::RunMeta;
use qpslab_load::{LoadConfig, LoadOptions, Report};

/// Options for `url` with small, fast defaults for tests.
pub fn opts(url: &str) -> LoadOptions {
    LoadOptions {
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
    let result = qpslab_load::run(&cfg, &std::sync::atomic::AtomicBool::new(false), &mut |_| {})
        .expect("run completes");
    let report = Report::new(&cfg, &result, &RunMeta::default());
    let r = &report.requests;
    assert_eq!(r.sent, r.completed + r.failed + r.in_flight_at_stop, "sent identity: {r:?}");
    assert_eq!(r.completed, r.ok + r.bad_status, "completed identity: {r:?}");
    assert_eq!(r.failed, report.errors.values().sum::<u64>(), "failed = sum of errors: {r:?}");
    assert_eq!(r.completed, report.status.values().sum::<u64>(), "status counts: {r:?}");
    assert_eq!(r.completed, result.rec.latency.len(), "one latency sample per response");
    let t = &report.per_target;
    assert_eq!(t.iter().map(|t| t.sent).sum::<u64>(), r.sent, "per-target sent: {t:?}");
    assert_eq!(t.iter().map(|t| t.completed).sum::<u64>(), r.completed, "per-target: {t:?}");
    assert_eq!(t.iter().map(|t| t.ok).sum::<u64>(), r.ok, "per-target ok: {t:?}");
    assert_eq!(t.iter().map(|t| t.failed).sum::<u64>(), r.failed, "per-target failed: {t:?}");
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
