//! Unix domain sockets end to end: `serve --listen unix:PATH` on both loops, plain and HTTPS,
//! loaded by `qpslab load --unix-socket` over HTTP/1.1 and HTTP/2 on both loops, with exact
//! counts on both sides; the socket file removed when the server exits, a second server on the
//! same path refused, a stale file replaced; `bench` finds the server behind the socket by the
//! socket's inode.

use std::time::Duration;

use crate::common::{json_of, qpslab_command, ServeChild};

/// `qpslab load` over the socket at `sock`: its JSON report.
fn load_over(sock: &std::path::Path, url: &str, extra: &[&str]) -> serde_json::Value {
    let out = qpslab_command()
        .args(["load", "-n", "2000", "-c", "4", "-t", "1", "--json", "--unix-socket"])
        .arg(sock)
        .args(extra)
        .arg(url)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    json_of(&out)
}

#[test]
fn serve_and_load_over_a_unix_socket_count_exactly_on_both_loops() {
    let dir = tempfile::tempdir().unwrap();
    for (serve_io, tls) in [("epoll", false), ("uring", false), ("epoll", true), ("uring", true)] {
        let sock = dir.path().join(format!("{serve_io}-{tls}.sock"));
        let listen = format!("unix:{}", sock.display());
        let mut args = vec!["-w", "1", "--io", serve_io, "-l", "127.0.0.1:0", "-l", &listen];
        args.extend(["--json"]);
        if tls {
            args.push("--tls-self-signed");
        }
        let server = ServeChild::start(&[], &args);
        assert!(server.startup.contains(&listen), "{}", server.startup);
        let (url, insecure) = if tls {
            ("https://localhost/", &["--insecure"][..])
        } else {
            ("http://localhost/", &[][..])
        };
        for (load_io, h2) in [("epoll", false), ("uring", true)] {
            let mut extra = vec!["--io", load_io];
            extra.extend(insecure);
            if h2 {
                extra.push("--h2");
            }
            let v = load_over(&sock, url, &extra);
            let what = format!("serve {serve_io} tls {tls}, load {load_io} h2 {h2}");
            assert_eq!(v["requests"]["ok"], 2000, "{what}: {}", v["requests"]);
            assert_eq!(v["config"]["unix_socket"], sock.display().to_string(), "{what}");
        }
        server.signal(libc::SIGTERM);
        let (code, out, _) = server.wait(Duration::from_secs(3));
        assert_eq!(code, Some(0));
        let totals: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(totals["totals"]["requests"], 4000, "{serve_io} {tls}: {totals}");
        assert!(totals["listen"].as_array().unwrap().iter().any(|l| l == listen.as_str()));
        assert!(!sock.exists(), "the socket file goes with the server");
    }
}

/// A second server on a socket one already listens on is refused, naming the path; a socket
/// file left by a server that is gone is taken over.
#[test]
fn a_socket_in_use_is_refused_and_a_stale_one_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(sock.exists(), "a stale socket file");
    let listen = format!("unix:{}", sock.display());
    let server = ServeChild::start(&[], &["-w", "1", "-l", "127.0.0.1:0", "-l", &listen]);
    let out = qpslab_command().args(["serve", "-l", &listen]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&listen) && err.contains("already listens"), "{err}");
    let file = dir.path().join("plain");
    std::fs::write(&file, "x").unwrap();
    let out = qpslab_command()
        .args(["serve", "-l", &format!("unix:{}", file.display())])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("is not a socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x", "a file that is not a socket stays");
    server.signal(libc::SIGTERM);
    let (code, _, _) = server.wait(Duration::from_secs(3));
    assert_eq!(code, Some(0));
    let out = qpslab_command()
        .args(["load", "-n", "1", "--unix-socket"])
        .arg(&sock)
        .arg("http://localhost/")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("unix:{}", sock.display())), "{err}");
}

/// `bench` on a URL over a unix socket finds the server holding the socket (by the inode the
/// kernel's unix table gives for the path) and counts its CPU.
#[test]
fn bench_finds_the_server_behind_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("b.sock");
    let listen = format!("unix:{}", sock.display());
    let server = ServeChild::start(&[], &["-w", "1", "-l", "127.0.0.1:0", "-l", &listen]);
    let out = qpslab_command()
        .args(["bench", "http://localhost/", "-d", "1s", "--warmup", "0s", "--interval"])
        .args(["250ms", "--json", "--unix-socket"])
        .arg(&sock)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json_of(&out);
    let pid = u64::from(server.pid());
    assert_eq!(v["target"]["pids"], serde_json::json!([pid]), "{}", v["target"]);
    assert_eq!(v["target"]["found_by"], "listening");
    assert!(v["server_cpu"].as_f64().unwrap() > 0.0, "{}", v["server_cpu"]);
}

/// `bench --unix-socket PATH` on the server it starts, built-in or nginx: the server listens
/// on the socket beside TCP (a socket file left by a server that is gone is replaced), the
/// load goes over it (every response counted), and the socket file is gone once bench is done
/// (nginx's fast shutdown removes it too).
#[test]
fn bench_starts_its_server_on_a_unix_socket() {
    for target in ["builtin", "nginx"] {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join(format!("{target}.sock"));
        // A stale socket: bound, then its listener gone.
        drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
        assert!(sock.exists());
        let out = qpslab_command()
            .args(["bench", "--target", target, "-d", "1s", "--warmup", "0s", "--json"])
            .args(["--interval", "250ms", "--unix-socket"])
            .arg(&sock)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{target}: {stderr}");
        let v = json_of(&out);
        assert_eq!(v["target"]["found_by"], "started", "{}", v["target"]);
        assert_eq!(v["target"]["kind"], target, "{}", v["target"]);
        let load = &v["load"];
        let path = sock.display().to_string();
        assert_eq!(load["config"]["unix_socket"], path, "{}", load["config"]);
        assert!(load["requests"]["ok"].as_u64().unwrap() > 1_000, "{}", load["requests"]);
        assert_eq!(load["requests"]["failed"], 0, "{}", load["requests"]);
        assert!(v["server_cpu"].as_f64().unwrap() > 0.0, "{target}: {}", v["server_cpu"]);
        assert!(!sock.exists(), "{target}: the server removed its socket");
    }
}

/// What cannot work with a unix socket is refused before anything runs, naming the flag.
#[test]
fn unix_socket_misuse_is_a_usage_error() {
    let long = format!("/tmp/{}.sock", "x".repeat(120));
    crate::usage_error(&["load", "--unix-socket", &long, "http://localhost/"], "--unix-socket");
    crate::usage_error(
        &["load", "--unix-socket", "/tmp/a.sock", "--source", "127.0.0.2", "http://localhost/"],
        "--source",
    );
    // A file that is not a socket is not replaced: the nginx bench names it before starting.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain");
    std::fs::write(&file, "keep me").unwrap();
    let file = file.to_str().unwrap();
    crate::usage_error(&["bench", "--target", "nginx", "--unix-socket", file], "--unix-socket");
    assert_eq!(std::fs::read_to_string(file).unwrap(), "keep me");
    crate::usage_error(&["serve", "-l", "unix:"], "--listen");
    crate::usage_error(&["serve", "-l", &format!("unix:{long}")], "--listen");
}
