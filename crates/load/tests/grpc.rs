//! gRPC calls (`--grpc`) against grpcio's server (gRPC's C core, PyPI) on both event loops:
//! every call counted once on the server's own count and judged by its status (OK, a status
//! the server chose, grpcio's UNIMPLEMENTED, a message over the size limit); and scripted
//! servers whose answers are wrong in each way gRPC's framing allows (no trailers, a status
//! twice or not a number, a compressed or oversized or cut message, a proxy's HTTP error),
//! each a failed call with its code and its kind named.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod support;

use std::time::Duration;

use qpslab_load::IoChoice;
use qpslab_testkit::grpcio::Grpcio;
use support::h2_script::{frame, frames_after_settings};
use support::{opts_on, run};

const LOOPS: [IoChoice; 2] = [IoChoice::Epoll, IoChoice::Uring];

fn grpc_opts(io: IoChoice, url: &str, method: &str, n: u64) -> qpslab_load::LoadOptions {
    let mut o = opts_on(io, url);
    o.grpc = Some(method.into());
    o.connections = Some(2);
    o.requests = Some(n);
    o.timeout = Duration::from_secs(5);
    // A protobuf message: field 1, the string "hello".
    o.body = Some(qpslab_load::options::Body(b"\x0a\x05hello".to_vec()));
    o
}

/// The report's calls by status name.
fn status(r: &qpslab_load::Report) -> Vec<(String, u64)> {
    let g = r.grpc.as_ref().expect("a gRPC section");
    assert_eq!(g.calls, r.requests.completed);
    g.status.iter().map(|(k, v)| (k.clone(), *v)).collect()
}

#[test]
fn every_call_to_grpcio_is_counted_once_and_judged_by_its_status() {
    let mut server = Grpcio::start();
    let mut echoed = 0;
    for io in LOOPS {
        for streams in [1, 10] {
            let what = format!("{io:?} with {streams} streams");
            let mut o = grpc_opts(io, &server.url(), "test.Echo/Echo", 300);
            o.streams = streams;
            let r = run(&o);
            echoed += 300;
            assert_eq!(r.requests.ok, 300, "{what}: {:?} {:?}", r.requests, r.grpc);
            assert_eq!(status(&r), [("OK".to_string(), 300)], "{what}");
            assert_eq!(r.grpc.as_ref().unwrap().method, "/test.Echo/Echo");
            assert_eq!(server.calls("Echo", echoed)["Echo"], echoed, "{what}: the server's count");
            // Each answer is the 7-byte message echoed in its 5-byte frame.
            assert!(r.bytes.read > 300 * 12, "{what}");
        }
        // A status the server chose: a completed call that failed, by its code.
        let mut o = grpc_opts(io, &server.url(), "test.Echo/Exhaust", 40);
        o.thresholds = vec!["grpc-status:RESOURCE_EXHAUSTED<10".into()];
        let cfg = qpslab_load::LoadConfig::from_options(&o).unwrap();
        let r = run(&o);
        assert_eq!((r.requests.completed, r.requests.ok), (40, 0), "{io:?}");
        assert_eq!(status(&r), [("RESOURCE_EXHAUSTED".to_string(), 40)], "{io:?}");
        assert!(r.grpc.as_ref().unwrap().faults.is_empty(), "the server's own status");
        assert!(!r.thresholds[0].passed, "{:?}", r.thresholds);
        assert_eq!(r.thresholds[0].shown, "grpc-status RESOURCE_EXHAUSTED 40");
        assert_eq!(cfg.h2.unwrap().grpc.unwrap().max_message, 4 << 20);
        // A method grpcio does not have: its UNIMPLEMENTED.
        let r = run(&grpc_opts(io, &server.url(), "test.Echo/Nope", 20));
        assert_eq!(status(&r), [("UNIMPLEMENTED".to_string(), 20)], "{io:?}");
        // An answer over --max-message-size: RESOURCE_EXHAUSTED found here, the server
        // having answered OK.
        let mut o = grpc_opts(io, &server.url(), "test.Echo/Big", 30);
        o.max_message_size = Some(4096);
        let r = run(&o);
        assert_eq!(status(&r), [("RESOURCE_EXHAUSTED".to_string(), 30)], "{io:?}");
        let g = r.grpc.as_ref().unwrap();
        assert_eq!(g.faults.get("too-large"), Some(&30), "{g:?}");
        let example = g.fault_example.as_deref().unwrap();
        assert_eq!(example, "a message of 5000 bytes, over the limit of 4096");
        // Within the limit, the same answers are fine.
        let r = run(&grpc_opts(io, &server.url(), "test.Echo/Big", 30));
        assert_eq!(r.requests.ok, 30, "{io:?}: {:?}", r.grpc);
    }
    let calls = server.calls("Big", 120);
    assert_eq!(calls["Exhaust"], 80);
    assert_eq!(calls["Big"], 120);
}

/// Flow control both ways, measured: a server granting each call 16 KiB at first holds every
/// 256 KiB request body (its stream's window, not the connection's) until its WINDOW_UPDATE
/// comes; its default window (4 MiB) holds none. Echoed back, a 256 KiB answer is larger than
/// the 64 KiB a stream this side grants with --window-bits 16, and none is with the default.
#[test]
fn the_windows_each_side_grants_are_measured() {
    let big = vec![7u8; 256 << 10];
    let small = Grpcio::start_with(&["--window", "16384"]);
    let wide = Grpcio::start();
    for io in LOOPS {
        let mut o = grpc_opts(io, &small.url(), "test.Echo/Sink", 40);
        o.body = Some(qpslab_load::options::Body(big.clone()));
        let r = run(&o);
        assert_eq!(r.requests.ok, 40, "{io:?}: {:?}", r.grpc);
        let h2 = r.h2.as_ref().unwrap();
        assert_eq!(h2.server_initial_window, Some(16384));
        let held = h2.bodies_held.expect("bodies held");
        assert_eq!((held.requests, held.on_connection_window), (40, 0), "{io:?}: {held:?}");
        assert!(held.mean_ms > 0.0 && held.share_of_latency > 0.0, "{held:?}");
        assert!(held.share_of_latency <= 1.0, "{held:?}");

        o.urls = vec![wide.url()];
        let r = run(&o);
        assert_eq!(r.requests.ok, 40, "{io:?}");
        let h2 = r.h2.as_ref().unwrap();
        assert!(h2.bodies_held.is_none(), "{io:?}: {:?}", h2.bodies_held);
        assert_eq!(h2.responses_past_client_window, 0);

        let mut o = grpc_opts(io, &wide.url(), "test.Echo/Echo", 40);
        o.body = Some(qpslab_load::options::Body(big.clone()));
        o.window_bits = 16;
        let r = run(&o);
        assert_eq!(r.requests.ok, 40, "{io:?}: {:?}", r.grpc);
        let h2 = r.h2.as_ref().unwrap();
        assert_eq!((h2.client_window, h2.responses_past_client_window), (65_535, 40), "{io:?}");
    }
}

/// grpcio compressing its answers (gzip, named in grpc-encoding; small ones it leaves plain),
/// 3,000-byte messages echoed: its compressed answers are taken as messages whether or not
/// this side offered gzip (as gRPC's clients take them), and the first one, decompressed, is
/// the message sent. With `--grpc-encoding gzip` the requests go compressed too (grpcio
/// decompresses each to echo it). A templated ID cannot go into a compressed message.
#[test]
fn compressed_calls_reach_grpcio_and_its_compressed_answers_are_taken() {
    let mut server = Grpcio::start_with(&["--compress"]);
    let dir = tempfile::tempdir().unwrap();
    let name = "a".repeat(3000);
    let json = format!(r#"{{"name": "{name}"}}"#);
    let expected = dir.path().join("same.json");
    std::fs::write(&expected, &json).unwrap();
    let expected = qpslab_load::options::FileText::from_arg(expected.to_str().unwrap()).unwrap();
    for io in LOOPS {
        let mut o = grpc_opts(io, &server.url(), "test.Echo/Echo", 200);
        o.body = None;
        o.proto = vec![PROTO.into()];
        o.data = Some(json.clone());
        o.check_response = Some(expected.clone());
        let r = run(&o);
        assert_eq!(status(&r), [("OK".to_string(), 200)], "{io:?}: {:?}", r.grpc);
        assert!(r.grpc.as_ref().unwrap().check_response.as_ref().unwrap().passed, "{io:?}");
        assert!(r.bytes.written > 200 * 3000, "sent plain: {:?}", r.bytes);
        assert!(r.bytes.read < 200 * 1000, "answered compressed: {:?}", r.bytes);

        o.grpc_encoding = Some(qpslab_load::options::GrpcEncoding::Gzip);
        let r = run(&o);
        assert_eq!(status(&r), [("OK".to_string(), 200)], "{io:?}: {:?}", r.grpc);
        assert!(r.grpc.as_ref().unwrap().check_response.as_ref().unwrap().passed, "{io:?}");
        assert!(r.bytes.written < 200 * 1000, "sent compressed: {:?}", r.bytes);
        assert!(r.bytes.read < 200 * 1000, "answered compressed: {:?}", r.bytes);

        o.data = Some(r#"{"name": "call-{seq}"}"#.into());
        let e = qpslab_load::LoadConfig::from_options(&o).unwrap_err();
        assert_eq!(e.flag, "--data", "{e}");
        assert!(e.to_string().contains("templated ID"), "{e}");
    }
    assert_eq!(server.calls("Echo", 800)["Echo"], 800, "the server's count");
}

const PROTO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/proto/echo.proto");

/// Messages from JSON through the compiled schema, a pool of them, and the first answer
/// checked against an expected message: grpcio echoes each, and counts them.
#[test]
fn json_messages_from_a_proto_file_reach_the_server_and_the_answer_is_checked() {
    let mut server = Grpcio::start();
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        qpslab_load::options::FileText::from_arg(p.to_str().unwrap()).unwrap()
    };
    let mut echoed = 0;
    for io in LOOPS {
        let mut o = grpc_opts(io, &server.url(), "test.Echo/Echo", 200);
        o.body = None;
        o.proto = vec![PROTO.into()];
        o.data = Some(r#"{"name": "hello", "tags": [{"key": "k"}]}"#.into());
        o.check_response = Some(file("same.json", r#"{"tags": [{"key": "k"}], "name": "hello"}"#));
        let r = run(&o);
        echoed += 200;
        assert_eq!(r.requests.ok, 200, "{io:?}: {:?}", r.grpc);
        let c = r.grpc.as_ref().unwrap().check_response.as_ref().unwrap();
        assert!(c.passed, "{io:?}: {c:?}");
        assert!(r.check.passed, "{io:?}: {:?}", r.check);
        // Another expected message: the run fails, the answer shown.
        o.check_response = Some(file("other.json", r#"{"name": "bye"}"#));
        let r = run(&o);
        echoed += 200;
        let c = r.grpc.as_ref().unwrap().check_response.as_ref().unwrap();
        assert!(!c.passed);
        let reason = r.check.reason.as_deref().unwrap();
        assert!(reason.contains("other.json's message: got {\"name\":\"hello\""), "{reason}");
        // A pool: three messages in turn, every call answered OK.
        let mut o = grpc_opts(io, &server.url(), "test.Echo/Echo", 300);
        o.body = None;
        o.proto = vec![PROTO.into()];
        o.data_file = Some(file("calls.jsonl", "{\"n\": 1}\n{\"n\": 2}\n\n{\"n\": 3}\n"));
        let r = run(&o);
        echoed += 300;
        assert_eq!(r.requests.ok, 300, "{io:?}: {:?}", r.grpc);
        let pool = r.pool.as_ref().unwrap();
        assert!(pool.file.ends_with("/calls.jsonl") && pool.size == 3, "{pool:?}");
        // A templated ID in a JSON string: each call's message differs on the server.
        let mut o = grpc_opts(io, &server.url(), "test.Echo/Distinct", 200);
        o.body = None;
        o.proto = vec![PROTO.into()];
        o.data = Some(format!(r#"{{"name": "{io:?}-{{seq}}"}}"#));
        let r = run(&o);
        assert_eq!(r.requests.ok, 200, "{io:?}: {:?}", r.grpc);
    }
    assert_eq!(server.calls("Echo", echoed)["Echo"], echoed, "the server's count");
    let distinct = server.calls("Distinct", 400);
    let counts = (distinct["Distinct"].as_u64(), distinct["Distinct-seen"].as_u64());
    assert_eq!(counts, (Some(400), Some(400)), "{distinct}");
}

/// Streaming calls by the schema's kinds, each message counted on grpcio's side: a server
/// stream of three answers, a client stream of four requests answered once, a bidirectional
/// echo of four; the response messages counted, their gaps measured.
#[test]
fn streaming_calls_carry_every_message_each_way() {
    let mut server = Grpcio::start();
    let mut seen = std::collections::HashMap::<&str, u64>::new();
    for io in LOOPS {
        for (method, per_call, answers) in [("Updates", 1, 3), ("Upload", 4, 1), ("Chat", 4, 4)] {
            let mut o = grpc_opts(io, &server.url(), &format!("test.Echo/{method}"), 50);
            o.body = None;
            o.proto = vec![PROTO.into()];
            o.data = Some(r#"{"name": "hello"}"#.into());
            o.streams = 4;
            if per_call > 1 {
                o.stream_messages = Some(per_call);
            }
            let r = run(&o);
            let what = format!("{io:?} {method}");
            assert_eq!(r.requests.ok, 50, "{what}: {:?}", r.grpc);
            let st = r.grpc.as_ref().unwrap().streams.as_ref().expect("a streams section");
            assert_eq!(st.request_messages, 50 * u64::from(per_call), "{what}");
            assert_eq!(st.response_messages, 50 * answers, "{what}");
            assert!(st.message_gap_us.min > 0, "{what}");
            *seen.entry(method).or_default() += 50;
            let calls = server.calls(method, seen[method]);
            assert_eq!(calls[method], seen[method], "{what}: calls on the server's count");
            let messages = format!("{method}-messages");
            assert_eq!(calls[&messages], seen[method] * u64::from(per_call), "{what}: {calls}");
        }
    }
}

/// `--reflect`: the schema asked of grpcio's reflection service (given the descriptor set
/// qpslab compiles from echo.proto), then JSON encoded by it as with the file; a server
/// without reflection, and a service it does not have, are named.
#[test]
fn the_schema_is_asked_of_the_servers_reflection() {
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("echo.protoset");
    let files = qpslab_load::LoadOptions { proto: vec![PROTO.into()], ..Default::default() };
    let pool = qpslab_load::grpc::schema::load(&files).unwrap().unwrap();
    std::fs::write(&set, qpslab_load::grpc::schema::compiled(&pool).0).unwrap();
    let mut server = Grpcio::start_with(&["--reflect", set.to_str().unwrap()]);
    for io in LOOPS {
        let mut o = grpc_opts(io, &server.url(), "test.Echo/Echo", 100);
        o.body = None;
        o.reflect = true;
        o.data = Some(r#"{"name": "hello", "tags": [{"key": "k"}]}"#.into());
        let r = run(&o);
        assert_eq!(r.requests.ok, 100, "{io:?}: {:?}", r.grpc);
        // The streaming kind comes from the reflected schema too.
        o.grpc = Some("test.Echo/Chat".into());
        o.stream_messages = Some(3);
        let r = run(&o);
        let st = r.grpc.as_ref().unwrap().streams.as_ref().expect("streams");
        assert_eq!(st.response_messages, 300, "{io:?}");
    }
    assert_eq!(server.calls("Echo", 200)["Echo"], 200);
    let mut o = grpc_opts(IoChoice::Epoll, &server.url(), "test.Nope/Echo", 1);
    o.reflect = true;
    let e = qpslab_load::LoadConfig::from_options(&o).unwrap_err();
    assert_eq!(e.flag, "--reflect");
    assert!(e.message.contains("test.Nope") && e.message.contains("test.Echo"), "{}", e.message);
    // A server without reflection.
    let plain = Grpcio::start();
    let mut o = grpc_opts(IoChoice::Epoll, &plain.url(), "test.Echo/Echo", 1);
    o.reflect = true;
    let e = qpslab_load::LoadConfig::from_options(&o).unwrap_err();
    assert!(e.message.contains("has no reflection service"), "{}", e.message);
}

/// HPACK: a literal field without indexing, its name new (no Huffman).
fn field(name: &str, value: &str) -> Vec<u8> {
    let mut b = vec![0, name.len() as u8];
    b.extend_from_slice(name.as_bytes());
    b.push(value.len() as u8);
    b.extend_from_slice(value.as_bytes());
    b
}

/// Response headers on stream 1: `:status` 200 (static index 8) or another, and fields.
fn headers(status: u16, fields: &[(&str, &str)], end: bool) -> Vec<u8> {
    let mut block = if status == 200 {
        vec![0x88]
    } else {
        let s = status.to_string();
        let mut b = vec![0x08, s.len() as u8];
        b.extend_from_slice(s.as_bytes());
        b
    };
    for (n, v) in fields {
        block.extend(field(n, v));
    }
    frame(1, 0x4 | u8::from(end), 1, &block)
}

fn data(payload: &[u8], end: bool) -> Vec<u8> {
    frame(0, u8::from(end), 1, payload)
}

fn message(m: &[u8]) -> Vec<u8> {
    let mut b = vec![0];
    b.extend_from_slice(&(m.len() as u32).to_be_bytes());
    b.extend_from_slice(m);
    b
}

#[test]
fn a_wrong_answer_fails_its_call_with_its_kind_and_code_named() {
    let ct = ("content-type", "application/grpc");
    let ok = headers(200, &[("grpc-status", "0")], true);
    let cases: Vec<(&str, Vec<u8>, &str, &str)> = vec![
        (
            "no trailers",
            [headers(200, &[ct], false), data(&message(b"hi"), true)].concat(),
            "no-status",
            "INTERNAL",
        ),
        (
            "a status in headers and trailers",
            [
                headers(200, &[ct, ("grpc-status", "0")], false),
                data(&message(b"hi"), false),
                ok.clone(),
            ]
            .concat(),
            "status-twice",
            "INTERNAL",
        ),
        (
            "a status that is no number",
            [
                headers(200, &[ct], false),
                data(&message(b"hi"), false),
                headers(200, &[("grpc-status", "x")], true),
            ]
            .concat(),
            "bad-status",
            "INTERNAL",
        ),
        (
            "a compressed message without grpc-encoding",
            [headers(200, &[ct], false), data(&[1, 0, 0, 0, 2, 7, 7], false), ok.clone()].concat(),
            "compressed",
            "INTERNAL",
        ),
        (
            "a length prefix of 4 GiB",
            [headers(200, &[ct], false), data(&[0, 0xff, 0xff, 0xff, 0xff, 7], false), ok.clone()]
                .concat(),
            "too-large",
            "RESOURCE_EXHAUSTED",
        ),
        (
            "a message cut short",
            [headers(200, &[ct], false), data(&message(b"hello")[..7], false), ok.clone()].concat(),
            "truncated",
            "INTERNAL",
        ),
        (
            "OK without a message",
            [headers(200, &[ct], false), ok.clone()].concat(),
            "message-count",
            "INTERNAL",
        ),
        (
            "a proxy's 503",
            headers(503, &[("content-type", "text/html")], true),
            "http-status",
            "UNAVAILABLE",
        ),
    ];
    for io in LOOPS {
        for (name, frames, kind, code) in &cases {
            let server = frames_after_settings(frames.clone());
            let mut o = grpc_opts(io, &server.url(), "a.B/C", 1);
            o.connections = Some(1);
            o.timeout = Duration::from_secs(3);
            let r = run(&o);
            assert_eq!(
                (r.requests.completed, r.requests.ok),
                (1, 0),
                "{io:?} {name}: {:?}",
                r.errors
            );
            assert_eq!(status(&r), [(code.to_string(), 1)], "{io:?} {name}");
            let g = r.grpc.as_ref().unwrap();
            assert_eq!(g.faults.iter().collect::<Vec<_>>(), [(kind, &1)], "{io:?} {name}: {g:?}");
        }
        // The well-formed answer the cases break passes.
        let good = [headers(200, &[ct], false), data(&message(b"hi"), false), ok.clone()].concat();
        let server = frames_after_settings(good);
        let r = run(&grpc_opts(io, &server.url(), "a.B/C", 1));
        assert_eq!(status(&r), [("OK".to_string(), 1)], "{io:?}: {:?}", r.grpc);
    }
}
