//! The server over HTTP/3 (`--h3`): counted exactly by qpslab's own generator and by aioquic's
//! client (PyPI: a QUIC and HTTP/3 stack that is not the one under test), the query controls
//! as over TCP, and clients that break the protocol closed with the code RFC 9114 names while
//! the server goes on serving.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use qpslab_serve::tls::TlsSource;
use qpslab_serve::{IoChoice, ServeConfig, ServeOptions};
use support::{opts_on, TestServer};

fn h3_server(tune: impl FnOnce(&mut ServeOptions)) -> TestServer {
    h3_server_on(IoChoice::Auto, tune)
}

fn h3_server_on(io: IoChoice, tune: impl FnOnce(&mut ServeOptions)) -> TestServer {
    let mut o = opts_on(io);
    o.tls = Some(TlsSource::SelfSigned);
    o.h3 = true;
    tune(&mut o);
    TestServer::start(o)
}

fn python() -> String {
    qpslab_testkit::venv_python()
}

/// aioquic's client against `server`: what it printed (see h3_client.py).
fn client(server: &TestServer, args: &[&str]) -> serde_json::Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/h3_client.py");
    let out = Command::new("timeout")
        .args(["30", &python(), script, &server.addr().port().to_string()])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (scripts/test installs aioquic)", python()));
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{e}: {text} {}", String::from_utf8_lossy(&out.stderr)))
}

/// `load --h3` against the server: (ok, failed, bytes of bodies read).
fn load(server: &TestServer, path: &str, connections: usize, streams: usize, n: u64) -> (u64, u64) {
    load_with(server, path, connections, streams, n, qpslab_load::options::QuicImpl::Quinn)
}

/// [`load`] with the load's QUIC client chosen (`--quic`).
fn load_with(
    server: &TestServer,
    path: &str,
    connections: usize,
    streams: usize,
    n: u64,
    quic: qpslab_load::options::QuicImpl,
) -> (u64, u64) {
    let url = format!("https://127.0.0.1:{}{path}", server.addr().port());
    let mut o = qpslab_load::LoadOptions {
        urls: vec![url],
        threads: Some(1),
        connections: Some(connections),
        requests: Some(n),
        h3: true,
        streams,
        quic,
        ..qpslab_load::LoadOptions::default()
    };
    o.tls.insecure = true;
    let cfg = qpslab_load::LoadConfig::from_options(&o).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let r = qpslab_load::run(&cfg, &stop, &mut qpslab_load::feed::Unwatched).unwrap();
    (r.rec.ok, r.rec.failed)
}

#[test]
fn every_request_is_answered_once_over_http3_on_epoll() {
    every_request_is_answered_once(IoChoice::Epoll);
}

#[test]
fn every_request_is_answered_once_over_http3_on_io_uring() {
    if qpslab_sys::uring::probe().is_ok() {
        every_request_is_answered_once(IoChoice::Uring);
    }
}

fn every_request_is_answered_once(io: IoChoice) {
    let server = h3_server_on(io, |o| o.workers = Some(2));
    let mut total = 0;
    for (c, streams, n) in [(1, 1, 50), (2, 10, 2000), (3, 100, 3000)] {
        assert_eq!(load(&server, "/", c, streams, n), (n, 0), "{c} x {streams}");
        total += n;
    }
    let got = client(&server, &["get", "/?s=70000", "3"]);
    for a in got["answers"].as_array().unwrap() {
        assert_eq!((a["status"].as_u64(), a["body"].as_u64()), (Some(200), Some(70000)), "{got}");
    }
    let got = client(&server, &["get", "/?c=503&s=10", "2"]);
    assert_eq!(got["answers"][1]["status"], 503, "{got}");
    assert_eq!(got["answers"][1]["body"], 10, "{got}");
    let got = client(&server, &["post", "/", "200000"]);
    assert_eq!(got["answers"][0]["status"], 200, "{got}");
    assert!(got["closed"].is_null(), "{got}");
    total += 3 + 2 + 1;
    // libcurl over HTTP/3 (curl_cffi's build, ngtcp2 and nghttp3): 20 GETs of 20 kB on one
    // connection, then 3 POSTs of 50 kB to the same path.
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/curl_h3.py");
    let port = server.addr().port().to_string();
    let out = Command::new("timeout")
        .args(["60", &python(), script, &port, "/?s=20000", "20", "50000", "3"])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (scripts/test installs curl_cffi)", python()));
    let text = String::from_utf8_lossy(&out.stdout);
    let got: serde_json::Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{e}: {text} {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(got["ok"], 23, "{got}");
    assert_eq!(got["versions"], serde_json::json!([30]), "HTTP/3 each time: {got}");
    assert_eq!(got["read"], 23 * 20000, "{got}");
    total += 23;
    let t = server.stop();
    // The generator's preflight handshake per address runs no request.
    assert_eq!((t.requests, t.rejected, t.tls_failures), (total, 0, 0));
    let q = t.quic.expect("QUIC counts");
    assert!(q.datagrams_in > 0 && q.datagrams_out > 0 && q.send_dropped == 0, "{q:?}");
}

#[test]
fn large_bodies_and_delays_follow_flow_control_and_the_clock() {
    // On io_uring: bodies of 2 MB make bursts of ACKs, many datagram completions a turn.
    let io = if qpslab_sys::uring::probe().is_ok() { IoChoice::Uring } else { IoChoice::Auto };
    let server = h3_server_on(io, |_| {});
    // 2 MB bodies: past the client's stream window, written as it opens.
    assert_eq!(load(&server, "/?s=2000000", 2, 4, 24), (24, 0));
    let started = Instant::now();
    assert_eq!(load(&server, "/?t=300", 1, 10, 10), (10, 0));
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(3), "{took:?}");
    assert_eq!(server.stop().requests, 34);
}

#[test]
fn a_request_body_over_the_limit_gets_413() {
    let server = h3_server(|o| o.settings.max_body = 1000);
    let got = client(&server, &["post", "/", "5000"]);
    assert_eq!(got["answers"][0]["status"], 413, "{got}");
    let t = server.stop();
    assert_eq!((t.requests, t.rejected), (1, 1));
}

#[test]
fn clients_that_break_http3_are_closed_with_its_codes_and_the_server_serves_on() {
    let server = h3_server(|_| {});
    // (what is sent, the code expected, a word of the reason)
    let cases: [(&[&str], u64, &str); 4] = [
        // DATA before HEADERS on a request stream.
        (&["raw", "0003616263"], 0x105, "DATA before"),
        // A stream that ends inside a frame (HEADERS of 10 bytes, 3 sent).
        (&["raw", "010a0000d1"], 0x106, "inside a frame"),
        // A push stream opened by a client.
        (&["uni", "01"], 0x103, "push stream"),
        // A QPACK encoder stream inserting into a table of 0 bytes.
        (&["uni", "024161"], 0x201, "dynamic table"),
    ];
    for (args, code, word) in cases {
        let got = client(&server, args);
        let closed = &got["closed"];
        assert_eq!(closed["code"], code, "{args:?}: {got}");
        assert!(closed["reason"].as_str().unwrap().contains(word), "{args:?}: {got}");
    }
    // A client's GOAWAY: it is done, the server closes the connection (H3_NO_ERROR).
    let got = client(&server, &["goaway"]);
    assert_eq!(got["closed"]["code"], 0x100, "{got}");
    // A field section with an upper-case name: malformed, answered 400 (RFC 9114 4.1.2).
    let got = client(&server, &["raw", "010a0000d1d7c12258790131"]);
    assert_eq!(got["answers"][0]["status"], 400, "{got}");
    assert!(got["closed"].is_null(), "{got}");
    assert_eq!(load(&server, "/", 1, 10, 100), (100, 0));
    let t = server.stop();
    assert_eq!((t.requests, t.timeouts), (102, 0));
}

/// One load thread's connections come each from a socket of its own, so a server with a UDP
/// socket per worker (SO_REUSEPORT: the kernel picks a worker by the datagram's addresses)
/// spreads them over its workers. (They came from one socket, and all went to one worker.)
#[test]
fn one_load_threads_connections_spread_over_the_workers() {
    let server = h3_server(|o| o.workers = Some(2));
    assert_eq!(load(&server, "/", 16, 4, 3200), (3200, 0));
    let each = server.stop_each();
    assert_eq!(each.iter().map(|w| w.accepted).sum::<u64>(), 16, "{each:?}");
    assert!(each.iter().all(|w| w.requests >= 50), "{each:?}");
}

/// 0-RTT: a client resuming a session sends its request in its first flight and the server
/// answers it; aioquic's client and qpslab's generator (a connection per request, on both of
/// its QUIC clients) both.
#[test]
fn a_resumed_client_is_answered_from_its_first_flight() {
    let server = h3_server(|_| {});
    let got = client(&server, &["zerortt", "/?s=100"]);
    assert_eq!(got["early_data_accepted"], true, "{got}");
    assert_eq!(
        (&got["answers"][0]["status"], &got["answers"][0]["body"]),
        (&200.into(), &100.into()),
        "{got}"
    );
    let url = format!("https://127.0.0.1:{}/", server.addr().port());
    use qpslab_load::options::QuicImpl;
    for quic in [QuicImpl::Quinn, QuicImpl::Own] {
        let mut o = qpslab_load::LoadOptions {
            urls: vec![url.clone()],
            connections: Some(1),
            requests: Some(30),
            h3: true,
            conn_per_request: true,
            quic,
            ..qpslab_load::LoadOptions::default()
        };
        o.tls.insecure = true;
        o.tls.zero_rtt = true;
        let cfg = qpslab_load::LoadConfig::from_options(&o).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let r = qpslab_load::run(&cfg, &stop, &mut qpslab_load::feed::Unwatched).unwrap();
        assert_eq!((r.rec.ok, r.rec.early_refused), (30, 0), "{quic:?}: {:?}", r.rec.errors);
        assert!(r.rec.early_accepted >= 20, "{quic:?}: {} of 30", r.rec.early_accepted);
    }
    let t = server.stop();
    // Each closed as soon as it was answered: none of them counts as refused.
    assert_eq!((t.requests, t.rejected), (2 + 30 + 30, 0), "{t:?}");
}

/// Hostile clients, each bounded: 40 unidirectional streams of a type the server does not
/// know against a limit of 16, ended or held open (each is stopped and forgotten, its credit
/// given back: the request after them is answered); a HEADERS frame declaring 1 MB (the
/// connection closes with H3_EXCESSIVE_LOAD at its length, without waiting for the bytes);
/// a body of no declared length that never ends (answered 413 once past `--max-body`, not
/// kept). The server serves on.
#[test]
fn hostile_clients_are_bounded_and_the_server_serves_on() {
    let server = h3_server(|o| o.settings.max_body = 4 << 20);
    for end in ["1", "0"] {
        let got = client(&server, &["unis", "40", end]);
        assert_eq!(got["answers"][0]["status"], 200, "ended {end}: {got}");
        assert!(got["closed"].is_null(), "ended {end}: {got}");
    }
    let got = client(&server, &["raw", "01801000000000d1d7"]);
    assert_eq!(got["closed"]["code"], 0x107, "{got}");
    let started = Instant::now();
    let got = client(&server, &["endless", "20"]);
    assert_eq!(got["answers"][0]["status"], 413, "{got}");
    assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
    assert_eq!(load(&server, "/", 1, 10, 100), (100, 0));
    let t = server.stop();
    assert_eq!((t.requests, t.rejected), (2 + 1 + 100, 2), "{t:?}");
}

/// A handshake flood: 400 clients begin a handshake at once and never finish it. The server
/// takes 256 (handshakes under way before it asks for proof of address), answers the rest
/// with a Retry (a token they must echo: a spoofed flood gets no further), and serves on.
#[test]
fn a_handshake_flood_gets_retry_packets_past_256() {
    let server = h3_server(|_| {});
    let got = client(&server, &["flood", "400"]);
    let retries = got["retries"].as_u64().unwrap();
    assert_eq!(retries, 400 - 256, "{got}");
    assert!(got["others"].as_u64().unwrap() >= 256, "the accepted ones' answers: {got}");
    assert_eq!(load(&server, "/", 1, 10, 100), (100, 0));
    let t = server.stop();
    // The 256 flooders and the generator's connection (after its own Retry).
    assert_eq!(t.accepted, 256 + 1, "{t:?}");
    assert_eq!(t.quic.unwrap().retries, 400 - 256 + 1, "the flood's and the generator's: {t:?}");
}

/// `--h3-retry always` proves every new client's address first (nginx's `quic_retry on`):
/// each flooder gets a Retry and no connection, and a real client (which echoes the token:
/// quinn-proto's and qpslab's own) is served; `never` takes the whole flood without one.
#[test]
fn the_retry_threshold_is_the_users_to_set() {
    let server = h3_server(|o| o.settings.h3_retry_above = 0);
    let got = client(&server, &["flood", "30"]);
    assert_eq!((got["retries"].as_u64(), got["others"].as_u64()), (Some(30), Some(0)), "{got}");
    assert_eq!(load(&server, "/", 2, 10, 100), (100, 0));
    // qpslab's own QUIC client follows a Retry too (its preflight is quinn-proto's).
    let own = qpslab_load::options::QuicImpl::Own;
    assert_eq!(load_with(&server, "/", 2, 10, 100, own), (100, 0));
    let t = server.stop();
    assert_eq!((t.accepted, t.quic.unwrap().retries), (4, 30 + 4), "{t:?}");

    let server = h3_server(|o| o.settings.h3_retry_above = usize::MAX);
    let got = client(&server, &["flood", "300"]);
    assert_eq!(got["retries"].as_u64(), Some(0), "{got}");
    assert_eq!(load(&server, "/", 1, 10, 100), (100, 0));
    let t = server.stop();
    assert_eq!((t.accepted, t.quic.unwrap().retries), (300 + 1, 0), "{t:?}");
}

#[test]
fn a_stopping_server_finishes_what_is_in_flight() {
    let server = h3_server(|_| {});
    let port = server.addr().port();
    let py = std::thread::spawn(move || {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/h3_client.py");
        Command::new("timeout")
            .args(["30", &python(), script, &port.to_string(), "get", "/?t=1200", "3"])
            .output()
            .unwrap()
    });
    // The requests are in (aioquic takes a few hundred milliseconds to start), not answered.
    std::thread::sleep(Duration::from_millis(1300));
    // Within 2 s (TestServer::stop checks): the connection closes once its answers are
    // acknowledged, not at the drain's end.
    let t = server.stop();
    let out = py.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let got: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(t.requests, 3, "{got}");
    for a in got["answers"].as_array().unwrap() {
        assert_eq!(a["status"], 200, "{got}");
    }
}

#[test]
fn http3_needs_https_and_a_tcp_address() {
    let flag = |tune: &dyn Fn(&mut ServeOptions)| {
        let mut o = opts_on(IoChoice::Epoll);
        o.h3 = true;
        tune(&mut o);
        ServeConfig::from_options(&o).err().map(|e| (e.flag, e.to_string()))
    };
    let (f, msg) = flag(&|_| {}).unwrap();
    assert_eq!(f, "--h3");
    assert!(msg.contains("--tls-self-signed"), "{msg}");
    let (f, msg) = flag(&|o| {
        o.tls = Some(TlsSource::SelfSigned);
        o.listen = vec!["unix:/tmp/qpslab-h3-test.sock".into()];
    })
    .unwrap();
    assert_eq!(f, "--h3", "{msg}");
    assert!(flag(&|o| o.tls = Some(TlsSource::SelfSigned)).is_none());
}

#[test]
fn https_answers_advertise_http3_with_alt_svc() {
    let server = h3_server(|_| {});
    let url = format!("https://127.0.0.1:{}/", server.addr().port());
    let want = format!("alt-svc: h3=\":{}\"; ma=86400", server.addr().port());
    for (version, query) in [("--http1.1", ""), ("--http1.1", "?c=404"), ("--http2", "")] {
        let out = Command::new("curl")
            .args(["-sk", "-D-", "-o/dev/null", "--max-time", "10", version])
            .arg(format!("{url}{query}"))
            .output()
            .unwrap();
        let head = String::from_utf8_lossy(&out.stdout).to_lowercase();
        assert!(head.contains(&want), "{version} {query}: {head}");
    }
    assert_eq!(server.stop().requests, 3);
    // Without --h3, none.
    let mut o = opts_on(IoChoice::Auto);
    o.tls = Some(TlsSource::SelfSigned);
    let plain = TestServer::start(o);
    let out = Command::new("curl")
        .args(["-sk", "-D-", "-o/dev/null", "--max-time", "10"])
        .arg(format!("https://127.0.0.1:{}/", plain.addr().port()))
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).to_lowercase().contains("alt-svc"));
}
