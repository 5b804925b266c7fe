//! Exact counts against servers other than nginx, each with its own keep-alive habits: Apache
//! httpd (event MPM: closes a connection after 100 requests, and idle ones under load) and
//! lighttpd. In every load model, `ok` must equal the lines of the server's access log and
//! nothing may fail: connections the server closes as the next request goes out (the
//! keep-alive close race) are retried, not failed.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod support;

use qpslab_load::IoChoice;
use support::httpd::Httpd;
use support::{opts_on, run};

/// Runs every model on event loop `io`; `expected`: the log lines the server had before.
fn exact_counts(server: &Httpd, io: IoChoice, mut expected: usize) -> usize {
    let url = server.url("/index.html");
    for (mode, requests) in
        [("keep-alive", 20_000u64), ("pipelined", 5_000), ("conn-per-request", 2_000)]
    {
        let mut o = opts_on(io, &url);
        o.requests = Some(requests);
        o.connections = Some(50);
        o.threads = Some(2);
        match mode {
            "pipelined" => o.pipeline = 8,
            "conn-per-request" => o.conn_per_request = true,
            _ => {}
        }
        let report = run(&o);
        let r = &report.requests;
        assert_eq!(
            (r.ok, r.failed),
            (requests, 0),
            "{} {mode} ({io:?}): {r:?} {:?} {:?}",
            server.name,
            report.error_examples,
            report.retries
        );
        expected += requests as usize;
        let log = server.access_log(expected);
        // Requests retried after the close race were not processed the first time: each
        // request appears once.
        assert_eq!(log.len(), expected, "{} {mode}: server log lines", server.name);
        assert!(log.iter().all(|l| l.starts_with("200 GET /index.html")), "{} {mode}", server.name);
    }
    expected
}

#[test]
fn apache_counts_are_exact_in_every_model() {
    let server = Httpd::apache();
    let seen = exact_counts(&server, IoChoice::Epoll, 0);
    exact_counts(&server, IoChoice::Uring, seen);
}

#[test]
fn lighttpd_counts_are_exact_in_every_model() {
    let server = Httpd::lighttpd();
    let seen = exact_counts(&server, IoChoice::Epoll, 0);
    exact_counts(&server, IoChoice::Uring, seen);
}
