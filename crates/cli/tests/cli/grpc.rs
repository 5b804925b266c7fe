//! gRPC runs as a user reads them: `load --grpc` against `qpslab serve` (which answers any
//! unary method), with a .proto schema and JSON data; calls judged by the status the server
//! was made to send (metadata `qpslab-grpc-status`) in the text, the JSON, a threshold on a
//! status code, the JUnit file and `compare` of stored runs; bad input refused with the flag
//! named (exit 2).

use serde_json::Value;

use crate::common::{qpslab_command, ServeChild};

const PROTO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../load/tests/support/proto/echo.proto");

#[test]
fn grpc_calls_are_judged_by_their_status_in_every_output() {
    let server = ServeChild::start(&[], &["-w", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    let store = store.to_str().unwrap();
    let xml = dir.path().join("j.xml");
    let url = server.url("");
    let call = |extra: &[&str]| {
        let mut c = qpslab_command();
        c.args(["load", "--grpc", "test.Echo/Echo", "--proto", PROTO, "--data", r#"{"name":"x"}"#])
            .args(["-n", "2000", "-c", "4", "-t", "1", "--store", store, &url])
            .args(extra);
        c.output().unwrap()
    };
    let out = call(&["--json", "--save", "--label", "fine"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["grpc"]["status"], serde_json::json!({"OK": 2000}), "{}", v["grpc"]);
    assert_eq!(v["grpc"]["method"], "/test.Echo/Echo");
    // The server made to answer UNAVAILABLE: every call fails by that code; the threshold on
    // it fails, in the JSON and the JUnit file; exit 1.
    let junit = xml.to_str().unwrap();
    let out = call(&[
        "-H",
        "qpslab-grpc-status: 14",
        "--threshold",
        "grpc-status:UNAVAILABLE<10",
        "--threshold",
        "errors<=100%",
        "--junit",
        junit,
        "--save",
        "--label",
        "down",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("gRPC:    2000 calls /test.Echo/Echo: UNAVAILABLE 2000\n"), "{text}");
    assert!(
        text.contains("threshold grpc-status:UNAVAILABLE<10: failed, grpc-status UNAVAILABLE 2000"),
        "{text}"
    );
    let j = crate::ci::junit(&xml);
    let cases = j["suites"][0]["cases"].as_array().unwrap();
    let failed: Vec<&Value> = cases.iter().filter(|c| !c[2].is_null()).collect();
    assert_eq!(failed.len(), 1, "{j}");
    assert_eq!(failed[0][0], "threshold grpc-status:UNAVAILABLE<10", "{j}");
    assert_eq!(failed[0][2], "grpc-status UNAVAILABLE 2000", "{j}");
    // compare: B answers, but every call fails: no faster, and the status mix says why.
    let out = qpslab_command()
        .args(["compare", "label:fine", "label:down", "--store", store])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("gRPC status    A OK 100.0%   B UNAVAILABLE 100.0%"), "{text}");
    assert!(text.contains("failed or bad-status requests rose in B (100.0%"), "{text}");
}

#[test]
fn bad_grpc_input_is_refused_with_the_flag_named() {
    let cases: [(&[&str], &str); 6] = [
        (&["--grpc", "Echo"], "--grpc: \"Echo\": give SERVICE/METHOD"),
        (&["--grpc", "test.Echo/Echo", "--data", "{}"], "--data: a JSON message needs the schema"),
        (
            &["--grpc", "test.Echo/Echo", "--proto", PROTO, "--data", "{\"nme\": 1}"],
            "--data: not a test.Hello in JSON",
        ),
        (
            &["--grpc", "test.Echo/Nope", "--proto", PROTO],
            "--grpc: no method \"Nope\" in service test.Echo",
        ),
        (&["--grpc", "a/b", "--h3"], "--h3: gRPC runs over HTTP/2 here"),
        (&["--binary", "/etc/hostname"], "--binary: applies to gRPC calls"),
    ];
    for (args, says) in cases {
        let out =
            qpslab_command().arg("load").args(args).arg("http://127.0.0.1:1").output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.starts_with(&format!("qpslab: error: {says}")), "{args:?}: {err}");
    }
}

/// Streaming calls against `qpslab serve`: a bidirectional echo of four messages a call and
/// a server stream of ten (the server asked by metadata), every message counted; the text
/// says so.
#[test]
fn streaming_calls_against_serve_count_every_message() {
    let server = ServeChild::start(&[], &["-w", "1"]);
    let url = server.url("");
    let load = |args: &[&str]| {
        let out = qpslab_command()
            .args(["load", "-n", "500", "-c", "2", "--streams", "4", &url])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    let out = load(&[
        "--grpc",
        "a.B/Chat",
        "--stream-messages",
        "4",
        "-H",
        "qpslab-grpc-reply: echo",
        "--json",
    ]);
    let v: Value = serde_json::from_slice(&out).unwrap();
    let st = &v["grpc"]["streams"];
    assert_eq!(
        (st["request_messages"].as_u64(), st["response_messages"].as_u64()),
        (Some(2000), Some(2000)),
        "{st}"
    );
    let out = load(&[
        "--grpc",
        "a.B/Updates",
        "--stream-messages",
        "1",
        "-H",
        "qpslab-grpc-messages: 10",
    ]);
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.contains("streams: 1 request message a call (")
            && text.contains("), 5000 response messages (10.0 a call, "),
        "{text}"
    );
}

/// gRPC over TLS (h2 by ALPN) against `qpslab serve --tls-self-signed`, on both event loops;
/// and `bench --grpc` on its built-in server, nothing else installed.
#[test]
fn grpc_over_tls_and_bench_on_the_built_in_server() {
    let server = ServeChild::start(&[], &["-w", "1", "--tls-self-signed"]);
    let url = format!("https://{}", server.addr);
    for io in ["epoll", "uring"] {
        let out = qpslab_command()
            .args(["load", "--grpc", "a.B/C", "-k", "--io", io, "-n", "1000", "-c", "2"])
            .args(["--streams", "4", "--json", &url])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{io}: {}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["grpc"]["status"], serde_json::json!({"OK": 1000}), "{io}");
        assert_eq!(v["config"]["protocol"], "h2", "{io}");
        assert!(v["connections"]["tls"]["negotiated"].as_str().unwrap().starts_with("TLSv1_3"));
    }
    let out = qpslab_command()
        .args(["bench", "--grpc", "a.B/C", "-d", "1s", "--warmup", "200ms", "--no-save", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let g = &v["load"]["grpc"];
    assert!(g["status"]["OK"].as_u64().unwrap() > 0, "{g}");
    assert_eq!(g["calls"], v["load"]["requests"]["ok"], "{g}");
}
