//! The server answers gRPC calls (HTTP/2 requests with content-type application/grpc): any
//! method, with one empty message (valid for every message type) and grpc-status 0 in the
//! trailers, or, when the call asks for another status, a Trailers-Only response; asked by
//! its metadata, with its own messages back (echo, unary or bidirectional), a message of a
//! size, or several (a server stream). The client is grpcio (PyPI: gRPC's own C core), which
//! checks all of it.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod support;

use std::process::Command;

use qpslab_serve::IoChoice;
use support::{opts_on, TestServer};

fn python() -> String {
    qpslab_testkit::venv_python()
}

/// grpcio's client: `ok` calls, then `unavailable` calls asking for status 14.
fn grpcio(server: &TestServer, method: &str, ok: u32, unavailable: u32) -> serde_json::Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/grpc_client.py");
    let port = server.addr().port().to_string();
    let out = Command::new("timeout")
        .args(["60", &python(), script, &port, method, &ok.to_string(), &unavailable.to_string()])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (scripts/test installs grpcio)", python()));
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{e}: {text} {}", String::from_utf8_lossy(&out.stderr)))
}

fn every_call_is_answered_with_its_status(io: IoChoice) {
    let server = TestServer::start(opts_on(io));
    let got = grpcio(&server, "/echo.Echo/Say", 40, 5);
    assert_eq!(got["ok_empty"], 40, "{got}");
    assert_eq!(got["codes"], serde_json::json!({"UNAVAILABLE": 5}), "{got}");
    let got = grpcio(&server, "/helloworld.Greeter/SayHello", 3, 0);
    assert_eq!(got["ok_empty"], 3, "{got}");
    // The status asked for in the path's query, as curl sees the Trailers-Only answer; a
    // delay (`t=`) with the call's trailers after its message.
    let curl = |query: &str| {
        let url = format!("http://{}/echo.Echo/Say?{query}", server.addr());
        let started = std::time::Instant::now();
        let out = Command::new("curl")
            .args(["-sS", "--http2-prior-knowledge", "-D", "-", "--max-time", "5"])
            .args(["-H", "content-type: application/grpc", "-H", "te: trailers"])
            .args(["--data-binary", "@-", &url])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("curl");
        (out.stdout, started.elapsed())
    };
    let (out, _) = curl("grpc-status=8");
    let head = String::from_utf8_lossy(&out).to_lowercase();
    assert!(head.starts_with("http/2 200"), "{head}");
    assert!(head.contains("content-type: application/grpc"), "{head}");
    assert!(head.contains("grpc-status: 8"), "{head}");
    let (out, took) = curl("t=200");
    assert!(took >= std::time::Duration::from_millis(200), "{took:?}");
    // Headers, a blank line, the empty message (five zero bytes), the trailers.
    let at = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(&out[at..at + 5], [0u8; 5], "{}", String::from_utf8_lossy(&out));
    assert!(String::from_utf8_lossy(&out[at + 5..]).contains("grpc-status: 0"));
    // Echo, a sized message, a server stream, a bidirectional echo: as grpcio reads them.
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/grpc_replies.py");
    let out = Command::new("timeout")
        .args(["60", &python(), script, &server.addr().port().to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let got: serde_json::Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{e}: {text} {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        got,
        serde_json::json!({"echo": true, "size": [1000, "0ae507"], "stream": [3, 3, 3, 3, 3], "bidi": true})
    );
    let t = server.stop();
    assert_eq!((t.requests, t.rejected), (54, 0));
}

#[test]
fn every_grpc_call_is_answered_with_its_status_on_epoll() {
    every_call_is_answered_with_its_status(IoChoice::Epoll);
}

#[test]
fn every_grpc_call_is_answered_with_its_status_on_io_uring() {
    if qpslab_sys::uring::probe().is_ok() {
        every_call_is_answered_with_its_status(IoChoice::Uring);
    }
}
