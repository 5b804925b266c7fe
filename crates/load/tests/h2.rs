//! HTTP/2 (`--h2`) against real nginx, h2c and h2 over TLS, on both event loops, with 1, 10 and
//! 100 streams per connection: exact counts against nginx's access log (each line
//! `HTTP/2.0`); and scripted servers that break the protocol, each named in its error class
//! within the timeout (oversized frames, undecodable and endless header blocks, PING and SETTINGS
//! floods, a window overflow, a push, resets, GOAWAYs, a body that never ends).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod support;

use std::time::{Duration, Instant};

use qpslab_load::IoChoice;
use support::h2_script::{frame, frames_after_settings};
use support::h2o::H2o;
use support::nginx::Nginx;
use support::{opts_on, run};

const LOOPS: [IoChoice; 2] = [IoChoice::Epoll, IoChoice::Uring];

fn h2_opts(
    io: IoChoice,
    url: &str,
    connections: usize,
    streams: usize,
    n: u64,
) -> qpslab_load::LoadOptions {
    let mut o = opts_on(io, url);
    o.h2 = true;
    o.streams = streams;
    o.connections = Some(connections);
    o.requests = Some(n);
    o
}

/// A self-signed certificate for `localhost` and 127.0.0.1, and its key (PEM).
fn self_signed() -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    p.subject_alt_names.push(rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let cert = p.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// Every request answered once, as HTTP/2, on nginx's own log.
fn assert_exact(nginx: &Nginx, report: &qpslab_load::Report, n: u64, what: &str) {
    assert_eq!(report.requests.ok, n, "{what}: {:?} {:?}", report.requests, report.error_examples);
    let lines = nginx.access_log(n as usize);
    assert_eq!(lines.len() as u64, n, "{what}: nginx logged {}", lines.len());
    assert!(
        lines.iter().all(|l| l.starts_with("200 GET") && l.ends_with("HTTP/2.0")),
        "{what}: {:?}",
        &lines[..3]
    );
    let h2 = report.h2.as_ref().expect("an h2 section");
    assert_eq!(h2.responses, n, "{what}");
    assert_eq!(h2.server_max_concurrent_streams, Some(128), "nginx's default: {what}");
    assert!(h2.hpack_space_savings > 0.0, "{what}: {h2:?}");
}

#[test]
fn h2c_against_nginx_counts_exactly_with_1_10_and_100_streams_on_both_loops() {
    for io in LOOPS {
        for (connections, streams) in [(4, 1), (2, 10), (1, 100)] {
            let nginx = Nginx::start_h2(None);
            let report = run(&h2_opts(io, &nginx.url("/"), connections, streams, 3000));
            let what = format!("{io:?} {connections}x{streams}");
            assert_exact(&nginx, &report, 3000, &what);
            assert_eq!(report.config.protocol, "h2");
            // nginx ends a connection after 1,000 requests (http2_max_requests) with a GOAWAY:
            // a new one opens when there is more to send, and nothing fails.
            let goaways = report.h2.as_ref().unwrap().goaways;
            let connects = report.connections.connects;
            let (c, g) = (connections as u64, goaways);
            assert!(connects >= c && connects <= c + g, "{what}: {connects} connects, {g} GOAWAYs");
            if 3000 / connections > 1000 {
                assert!(goaways >= connections as u64, "{what}");
            }
        }
    }
}

/// A server that allows one stream at a time, asked for 64: the load opens no more than the
/// server's SETTINGS allow (none before they arrive, then what the last ones said on each new
/// connection), so nothing is refused and nothing fails (it used to open 64 on every new
/// connection: refused streams by the million and 86% of requests failed).
#[test]
fn the_load_honours_the_servers_stream_limit() {
    for io in LOOPS {
        let nginx = Nginx::start_h2_conf("http2_max_concurrent_streams 1; keepalive_requests 100;");
        let report = run(&h2_opts(io, &nginx.url("/"), 2, 64, 2000));
        let what = format!("{io:?}");
        assert_eq!(report.requests.ok, 2000, "{what}: {:?}", report.error_examples);
        assert_eq!(report.requests.failed, 0, "{what}");
        assert_eq!(nginx.access_log(2000).len(), 2000, "{what}");
        let h2 = report.h2.as_ref().unwrap();
        assert_eq!(h2.server_max_concurrent_streams, Some(1), "{what}");
        assert_eq!(h2.refused_streams, 0, "{what}: {h2:?}");
        // keepalive_requests 100: about 20 connections, each limited from its first stream.
        assert!(h2.goaways >= 10, "{what}: {h2:?}");
    }
}

/// h2o, h2c and h2 over TLS: every request once on its access log, as HTTP/2.
#[test]
fn h2o_counts_exactly_in_h2c_and_over_tls_with_1_10_and_100_streams_on_both_loops() {
    let (cert_pem, key_pem) = self_signed();
    for tls in [false, true] {
        // One server for the six runs (it starts in about a second): its log grows by each.
        let h2o = H2o::start(tls.then_some((cert_pem.as_str(), key_pem.as_str())));
        let url = if tls { h2o.https_url() } else { h2o.url() };
        let mut logged = 0;
        for io in LOOPS {
            for (connections, streams) in [(4, 1), (2, 10), (1, 100)] {
                let mut o = h2_opts(io, &url, connections, streams, 2000);
                o.tls.insecure = tls;
                let report = run(&o);
                let what = format!("{io:?} tls {tls} {connections}x{streams}");
                assert_eq!(report.requests.ok, 2000, "{what}: {:?}", report.error_examples);
                logged += 2000;
                let lines = h2o.access_log(logged);
                assert_eq!(lines.len(), logged, "{what}");
                assert!(lines.iter().all(|l| l == "200 HTTP/2 GET /"), "{what}: {:?}", &lines[..2]);
                assert_eq!(report.connections.connects, connections as u64, "{what}");
                let h2 = report.h2.as_ref().unwrap();
                assert_eq!((h2.responses, h2.goaways), (2000, 0), "{what}");
            }
        }
    }
}

/// With --window-bits 16 and --conn-window-bits 16 (64 KiB - 1 each) and a 1 KiB body per
/// response, windows are returned as they fill.
#[test]
fn small_windows_are_returned_as_they_fill() {
    for io in LOOPS {
        let nginx = Nginx::start_h2(None);
        let mut o = h2_opts(io, &nginx.url("/1k"), 1, 10, 2000);
        o.window_bits = 16;
        o.conn_window_bits = 16;
        let report = run(&o);
        assert_eq!(report.requests.ok, 2000, "{io:?} {:?}", report.error_examples);
        assert_eq!(nginx.access_log(2000).len(), 2000);
        // 2000 KiB through a 64 KiB connection window: it was returned many times.
        assert!(report.bytes.read > 2000 * 1024, "{io:?}");
    }
}

#[test]
fn h2_over_tls_by_alpn_and_a_server_without_h2_is_named() {
    let (cert_pem, key_pem) = self_signed();
    for io in LOOPS {
        let nginx = Nginx::start_h2(Some((&cert_pem, &key_pem)));
        let mut o = h2_opts(io, &nginx.https_url("/"), 2, 10, 2000);
        o.tls.insecure = true;
        let report = run(&o);
        let lines = nginx.access_log(2000);
        assert_eq!(
            (report.requests.ok, lines.len()),
            (2000, 2000),
            "{io:?} {:?}",
            report.error_examples
        );
        assert!(lines.iter().all(|l| l.ends_with("HTTP/2.0")), "{io:?}");

        // nginx on TLS without http2 answers ALPN with http/1.1: refused by name.
        let plain = Nginx::start_tls(&cert_pem, &key_pem);
        let mut o = h2_opts(io, &plain.https_url("/"), 1, 1, 5);
        o.tls.insecure = true;
        o.duration = Some(Duration::from_secs(10));
        // Before a run, the check every run makes first names it as a setup error (exit 2
        // in the CLI) instead of a run that fails every connection until its end; should the
        // server choose so only during the run, the run ends there, with the same error.
        let cfg = qpslab_load::LoadConfig::from_options(&o).unwrap();
        let e = qpslab_load::preflight(&cfg).unwrap_err();
        assert!(e.is_setup(), "{e}");
        assert!(e.to_string().contains("chose http/1.1 over ALPN, not h2"), "{e}");
        let e = ended_at_once(&o);
        assert!(e.contains("chose http/1.1 over ALPN, not h2"), "{io:?}: {e}");
    }
}

/// Runs `o` (10 s) and returns the error it ended with, which must be a set-up error, within a
/// second.
fn ended_at_once(o: &qpslab_load::LoadOptions) -> String {
    let cfg = qpslab_load::LoadConfig::from_options(o).unwrap();
    let started = Instant::now();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let e = qpslab_load::run(&cfg, &stop, &mut qpslab_load::feed::Unwatched).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1), "{:?}: {e}", started.elapsed());
    assert!(e.is_setup(), "{e}");
    e.to_string()
}

/// A server that speaks the other HTTP (what a retry cannot change) ends the run at once as a
/// set-up error naming the way out, on both loops: nginx without http2 answers HTTP/2's
/// preface in HTTP/1.1 (it was a frame-size error on every connection for the whole run), and
/// nginx 1.22's plain `listen ... http2` (h2c only) answers an HTTP/1.1 request with frames.
#[test]
fn a_server_of_the_other_http_ends_the_run_at_once() {
    let h1 = Nginx::start();
    let h2c = Nginx::start_h2(None);
    for io in LOOPS {
        let mut o = h2_opts(io, &h1.url("/"), 2, 1, 5);
        (o.requests, o.duration) = (None, Some(Duration::from_secs(10)));
        let e = ended_at_once(&o);
        assert!(e.contains("answered HTTP/2's connection preface in HTTP/1.1"), "{io:?}: {e}");
        assert!(e.contains("drop --h2") && e.contains(&h1.url("/")), "{io:?}: {e}");

        o.urls = vec![h2c.url("/")];
        o.h2 = false;
        let e = ended_at_once(&o);
        assert!(e.contains("with HTTP/2 frames") && e.contains("add --h2"), "{io:?}: {e}");
    }
}

#[test]
fn a_server_that_breaks_http2_is_named_within_the_timeout() {
    let huge = {
        let l = 20_000u32.to_be_bytes();
        let mut f = vec![l[1], l[2], l[3], 0, 0, 0, 0, 0, 1];
        f.extend(vec![0u8; 20_000]);
        f
    };
    let mut continuation = frame(1, 0, 1, &[0x88]);
    for _ in 0..5 {
        continuation.extend(frame(9, 0, 1, &[0u8; 16_000]));
    }
    // The floods owe far more acknowledgements (17 and 18 MB) than the kernel buffers
    // between the two ends (a 4 MB send buffer here, a receive window the stalled server
    // never opens): with less, whether the client ever owes 1 MiB depends on how far the
    // send buffer has grown when the flood arrives.
    let mut pings = Vec::new();
    for _ in 0..1_000_000 {
        pings.extend(frame(6, 0, 0, &[7u8; 8]));
    }
    let mut settings = Vec::new();
    for _ in 0..2_000_000 {
        settings.extend(frame(4, 0, 0, &[]));
    }
    let cases: Vec<(&str, Vec<u8>, &str, &str)> = vec![
        ("SETTINGS flood", settings, "parse", "a flood"),
        (
            "window overflow",
            frame(8, 0, 0, &0x7fff_ffffu32.to_be_bytes()),
            "parse",
            "FLOW_CONTROL_ERROR",
        ),
        ("oversized frame", huge, "parse", "FRAME_SIZE_ERROR"),
        (
            "HPACK garbage",
            frame(1, 0x5, 1, &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
            "parse",
            "COMPRESSION_ERROR",
        ),
        ("CONTINUATION flood", continuation, "parse", "CONTINUATION flood"),
        ("PING flood", pings, "parse", "a flood"),
        ("push", frame(5, 0x4, 1, &[0, 0, 0, 2, 0x88]), "parse", "PUSH_PROMISE"),
        ("reset", frame(3, 0, 1, &2u32.to_be_bytes()), "reset", "INTERNAL_ERROR"),
    ];
    for io in LOOPS {
        for (name, frames, class, says) in &cases {
            let server = frames_after_settings(frames.clone());
            let mut o = h2_opts(io, &server.url(), 1, 1, 1);
            o.timeout = Duration::from_secs(3);
            let started = Instant::now();
            let report = run(&o);
            assert!(
                started.elapsed() < Duration::from_secs(3),
                "{io:?} {name}: took {:?}",
                started.elapsed()
            );
            assert_eq!(report.requests.failed, 1, "{io:?} {name}: {:?}", report.errors);
            let e = report
                .error_examples
                .get(class)
                .unwrap_or_else(|| panic!("{io:?} {name}: {:?}", report.error_examples));
            assert!(e.contains(says), "{io:?} {name}: {e}");
        }
    }
}

/// GOAWAY with last stream 0: the request was not processed, goes once more on a new
/// connection, and fails when that one says the same.
#[test]
fn a_goaway_sends_unprocessed_streams_again_once() {
    for io in LOOPS {
        let goaway = frame(7, 0, 0, &[0, 0, 0, 0, 0, 0, 0, 0]);
        let server = frames_after_settings(goaway);
        let o = h2_opts(io, &server.url(), 1, 1, 1);
        let report = run(&o);
        assert_eq!(report.requests.failed, 1, "{io:?}: {:?}", report.errors);
        let e = report.error_examples.get("reset");
        assert!(
            e.is_some_and(|e| e.contains("GOAWAY twice")),
            "{io:?}: {:?}",
            report.error_examples
        );
        assert_eq!(report.retries.after_announced_close, 1, "{io:?}: sent again once");
        assert_eq!(report.h2.as_ref().unwrap().goaways, 2, "{io:?}");
    }
}

/// Open loop over HTTP/2, two targets on one address (their requests share the connections'
/// streams) and connections bound to two source addresses: the schedule is kept, each target
/// gets its share, and nginx logs every answered request once, from both sources.
#[test]
fn open_loop_many_targets_and_source_addresses_over_h2() {
    for io in LOOPS {
        let nginx = Nginx::start_h2(None);
        let mut o = h2_opts(io, &nginx.url("/"), 4, 10, 0);
        o.requests = None;
        o.urls.push(nginx.url("/t/x"));
        o.rate = Some("2000".into());
        o.duration = Some(Duration::from_secs(2));
        o.source = Some("127.0.0.2-127.0.0.3".into());
        let report = run(&o);
        let q = &report.requests;
        assert!((3900..=4100).contains(&q.sent), "{io:?}: {q:?}");
        assert_eq!((q.failed, q.bad_status), (0, 0), "{io:?}: {:?}", report.error_examples);
        let t = &report.per_target;
        assert_eq!(t[0].completed + t[1].completed, q.completed);
        assert!(t[0].completed.abs_diff(t[1].completed) <= 10, "{io:?}: {t:?}");
        let lines = nginx.access_log(q.completed as usize);
        // In flight at the stop may still reach the log: at most those.
        let logged = lines.len() as u64;
        assert!(logged >= q.completed && logged <= q.sent, "{io:?}: {logged} vs {q:?}");
        for src in ["127.0.0.2", "127.0.0.3"] {
            assert!(lines.iter().any(|l| l.contains(&format!(" {src} "))), "{io:?}: {src}");
        }
        assert!(lines.iter().any(|l| l.contains(" /t/x HTTP/2.0")), "{io:?}");
    }
}

/// A response whose body never ends (a stream of DATA without END_STREAM) ends in a timeout
/// when the request's time is up; nothing of the body is kept.
#[test]
fn an_endless_body_times_out() {
    let mut frames = frame(1, 0x4, 1, &[0x88]); // :status 200, END_HEADERS, no END_STREAM
    for _ in 0..300 {
        frames.extend(frame(0, 0, 1, &[b'x'; 16_000]));
    }
    for io in LOOPS {
        let server = frames_after_settings(frames.clone());
        let mut o = h2_opts(io, &server.url(), 1, 1, 1);
        o.timeout = Duration::from_millis(800);
        let started = Instant::now();
        let report = run(&o);
        assert!(started.elapsed() < Duration::from_secs(3), "{io:?}");
        assert_eq!(report.errors.get("timeout"), Some(&1), "{io:?}: {:?}", report.errors);
        assert!(report.bytes.read > 4_000_000, "{io:?}: the body was read, {}", report.bytes.read);
    }
}

/// Request bodies over HTTP/2: 100 KB each on 10 streams of one connection, so the bodies wait
/// for the server's window updates (the connection starts with 64 KiB): every request is
/// answered and on nginx's log, on both loops.
#[test]
fn request_bodies_go_within_the_servers_windows() {
    for io in LOOPS {
        let nginx = Nginx::start_h2(None);
        let mut o = h2_opts(io, &nginx.url("/"), 1, 10, 300);
        o.method = "POST".into();
        o.body = Some(qpslab_load::options::Body::from_arg(&"b".repeat(100_000)).unwrap());
        let report = run(&o);
        assert_eq!(report.requests.ok, 300, "{io:?}: {:?}", report.error_examples);
        // nginx answers `return 200` without waiting for the whole body (and resets the stream
        // to stop the rest), so not every byte goes; far more than a 64 KiB window did.
        assert!(report.bytes.written > 100 * 100_000, "{io:?}: {}", report.bytes.written);
        let lines = nginx.access_log(300);
        assert_eq!(lines.len(), 300, "{io:?}");
        assert!(lines.iter().all(|l| l.starts_with("200 POST")), "{io:?}: {:?}", &lines[..2]);
    }
}

/// Request bodies the server's windows let through are the client's own output, not
/// acknowledgements owed: a server that opens its windows wide at once and then reads nothing
/// gets 10 MB of bodies queued in one read, and the run ends at the timeout, not on a flood.
#[test]
fn request_bodies_queued_past_a_mebibyte_are_no_flood() {
    for io in LOOPS {
        let max = 0x7fff_ffffu32;
        let mut frames = frame(4, 0, 0, &[&[0u8, 4][..], &max.to_be_bytes()].concat());
        frames.extend(frame(8, 0, 0, &(max - 65_535).to_be_bytes()));
        let server = frames_after_settings(frames);
        let mut o = h2_opts(io, &server.url(), 1, 10, 10);
        o.method = "POST".into();
        o.body = Some(qpslab_load::options::Body::from_arg(&"b".repeat(1_000_000)).unwrap());
        o.timeout = Duration::from_millis(500);
        let report = run(&o);
        let all = format!("{io:?}: {:?}", report.error_examples);
        assert!(!all.contains("flood"), "{all}");
        assert_eq!(report.errors.get("timeout"), Some(&10), "{all}");
    }
}

/// A stream the server refuses (RST_STREAM REFUSED_STREAM) was not processed: it is sent
/// again on the same connection and counted as refused, not failed; this server never
/// answers the second, which then times out.
#[test]
fn a_refused_stream_is_sent_again_and_counted() {
    for io in LOOPS {
        let server = frames_after_settings(frame(3, 0, 1, &7u32.to_be_bytes()));
        let mut o = h2_opts(io, &server.url(), 1, 1, 1);
        o.timeout = Duration::from_millis(500);
        let report = run(&o);
        let h2 = report.h2.as_ref().unwrap();
        assert_eq!(h2.refused_streams, 1, "{io:?}");
        assert_eq!(report.errors.get("timeout"), Some(&1), "{io:?}: {:?}", report.errors);
        assert_eq!(report.errors.get("reset"), Some(&0), "{io:?}");
    }
}

/// A server that never opens its window (SETTINGS_INITIAL_WINDOW_SIZE 0, no WINDOW_UPDATE):
/// the rest of the request body cannot go, and the timeout says it was a flow-control stall.
#[test]
fn a_flow_control_stall_is_named_at_the_timeout() {
    for io in LOOPS {
        let server = frames_after_settings(frame(4, 0, 0, &[0, 4, 0, 0, 0, 0]));
        let mut o = h2_opts(io, &server.url(), 1, 1, 1);
        o.method = "POST".into();
        // More than the 64 KiB a stream may send before the server's SETTINGS arrive.
        o.body = Some(qpslab_load::options::Body::from_arg(&"b".repeat(100_000)).unwrap());
        o.timeout = Duration::from_millis(500);
        let report = run(&o);
        let e = report.error_examples.get("timeout").cloned().unwrap_or_default();
        assert!(e.contains("flow-control stall"), "{io:?}: {:?}", report.error_examples);
    }
}

/// The HTTP/2 counts leave the warm-up out, as every other figure does: the responses decoded
/// are those completed, plus at most the streams in flight when measuring began.
#[test]
fn the_h2_counts_leave_the_warm_up_out() {
    let nginx = Nginx::start_h2(None);
    let mut o = h2_opts(IoChoice::Epoll, &nginx.url("/"), 2, 10, 0);
    o.requests = None;
    o.duration = Some(Duration::from_millis(700));
    o.warmup = Some(Duration::from_millis(500));
    let report = run(&o);
    let (done, seen) = (report.requests.completed, report.h2.as_ref().unwrap().responses);
    assert!(done > 0 && seen >= done && seen <= done + 20, "{done} completed, {seen} decoded");
}
