//! The `qpslab` binary: exit codes, one-line errors naming the flag, and the JSON contract.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod agents;
mod browser;
mod ci;
#[path = "../common/mod.rs"]
mod common;
mod feed;
mod grpc;
mod lab;
mod live;
mod load_models;
mod memory;
mod profile;
mod prometheus;
mod source_ports;
mod tls;
mod tune;
mod unix;

use common::ServeChild;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn qpslab(args: &[&str]) -> Output {
    common::qpslab_command().args(args).output().expect("run qpslab")
}

/// Asserts exit code 2 and a single stderr line that mentions `needle`.
fn usage_error(args: &[&str], needle: &str) {
    let out = qpslab(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "args {args:?}: {stderr}");
    assert!(stderr.contains(needle), "args {args:?}: {stderr:?} lacks {needle:?}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr:?}");
    assert!(out.stdout.is_empty());
}

/// Runs qpslab, asserts exit 0, and parses its stdout as one JSON object.
fn json_ok(args: &[&str]) -> serde_json::Value {
    let out = qpslab(args);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON object")
}

/// The top-level fields of a load report that the design brief makes a contract.
fn assert_load_contract(v: &serde_json::Value) {
    for key in [
        "version",
        "command",
        "started_at",
        "duration_s",
        "targets",
        "config",
        "requests",
        "status",
        "errors",
        "error_examples",
        "throughput_rps",
        "bytes",
        "latency_us",
        "generator",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
}

/// The URL of a fresh [`tiny_server`].
fn tiny_server_url() -> String {
    format!("http://127.0.0.1:{}/", tiny_server())
}

/// A loopback server answering keep-alive requests with 200 (enough for the tests here).
fn tiny_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = stream;
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..i + 4);
                        if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").is_err() {
                            return;
                        }
                    }
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    port
}

/// Every bad input to `load` is refused at once, with exit 2 and one line naming the flag (or
/// the URL) and the fix.
#[test]
fn load_refuses_bad_input_in_one_line_naming_the_flag() {
    let any = "http://127.0.0.1:1/";
    let cases: &[(&[&str], &str)] = &[
        (&["-n", "1", "not a url"], "URL"),
        (&["-n", "1", "http://"], "URL"),
        (&["-n", "1", "--tls-version", "1.1", "https://127.0.0.1/"], "--tls-version"),
        (&["-n", "1", "--cacert", "/nonexistent.pem", "https://127.0.0.1/"], "--cacert"),
        (&["-n", "1", "--sni", "bad name!", "https://127.0.0.1/"], "--sni"),
        (&["-n", "1", "ftp://127.0.0.1/"], "unsupported scheme"),
        (&["-t", "4", "-c", "2", any], "--connections"),
        (&["-d", "0s", any], "--duration"),
        (&["-d", "0", any], "--duration"),
        (
            &["--body", "@/nonexistent/body.json", any],
            "'--body <STRING|@FILE>': cannot read body file",
        ),
        (&["-H", "NoColon", any], "--header"),
        (&["--accept-status", "4xx", any], "--accept-status"),
        (&["--cpus", "100000", any], "--cpus"),
        (&["--timeout", "soon", any], "--timeout"),
        (&["-m", "GE T", any], "method"),
        (&["-R", "0", any], "--rate"),
        (&["-R", "fast", any], "--rate"),
        (&["-R", "100:1000", any], "--ramp"),
        (&["-R", "100", "--ramp", "5s", any], "--ramp"),
        (&["--ramp", "5s", any], "--ramp"),
        (&["--pipeline", "0", any], "--pipeline"),
    ];
    for (args, needle) in cases {
        let all: Vec<&str> = ["load"].iter().chain(args.iter()).copied().collect();
        usage_error(&all, needle);
    }
}

#[test]
fn unreachable_target_fails_at_once() {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}/");
    let started = Instant::now();
    usage_error(&["load", "-d", "30s", &url], "connection refused");
    assert!(started.elapsed() < Duration::from_secs(5), "not after the whole duration");
}

#[test]
fn open_loop_json_reports_both_latencies_send_lag_and_the_schedule() {
    let server = ServeChild::start(&[], &["-w", "1"]);
    let v = json_ok(&[
        "load",
        "-R",
        "500:1500",
        "--ramp",
        "1s",
        "-d",
        "2s",
        "-c",
        "8",
        "-t",
        "1",
        "--json",
        &server.url("/"),
    ]);
    assert_load_contract(&v);
    assert_eq!(v["config"]["mode"], "rate");
    // 1000 requests in the ramp (average 1000/s over 1 s), then 1500/s over the rest of the
    // measured window: 2,500 in 2 s. The window is the run's own (the workers see the end a
    // little late under load: 2,515 once in CI, with the tests four at a time).
    let secs = v["duration_s"].as_f64().unwrap();
    assert!((2.0..2.5).contains(&secs), "{secs}");
    let scheduled = v["rate"]["scheduled"].as_u64().unwrap() as f64;
    let due = 1000.0 + 1500.0 * (secs - 1.0);
    assert!((scheduled - due).abs() <= 2.0, "{due:.1} due in {secs} s: {}", v["rate"]);
    assert_eq!(v["rate"]["kept"], true, "{}", v["rate"]);
    for key in ["latency_uncorrected_us", "send_lag_us"] {
        assert!(v[key]["p99"].as_u64().is_some(), "{key}: {}", v[key]);
    }
    let closed = qpslab(&["load", "-n", "100", "-c", "2", "-t", "1", "--json", &server.url("/")]);
    let v: serde_json::Value = serde_json::from_slice(&closed.stdout).unwrap();
    assert!(v.get("rate").is_none() && v.get("send_lag_us").is_none(), "closed loop: no rate");
}

#[test]
fn json_output_follows_the_contract() {
    let url = tiny_server_url();
    let out = qpslab(&["load", "-n", "500", "-c", "5", "-t", "1", "--json", &url]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    assert_load_contract(&v);
    assert_eq!(v["requests"]["sent"], 500);
    assert_eq!(v["requests"]["completed"], 500);
    assert_eq!(v["requests"]["ok"], 500);
    assert_eq!(v["requests"]["failed"], 0);
    assert_eq!(v["requests"]["in_flight_at_stop"], 0);
    assert_eq!(v["status"]["200"], 500);
    assert_eq!(v["config"]["mode"], "closed");
    assert_eq!(v["config"]["threads"], 1);
    assert_eq!(v["config"]["connections"], 5);
    for key in ["connect", "read", "write", "timeout", "parse"] {
        assert_eq!(v["errors"][key], 0, "{key}");
    }
    for key in ["min", "mean", "stdev", "p50", "p75", "p90", "p99", "p999", "p9999", "max"] {
        assert!(v["latency_us"][key].is_number(), "{key}");
    }
    // 500 requests take a few milliseconds: too short to judge the generator.
    assert_eq!(v["generator"]["verdict"], "not-judged");
    assert!(v["generator"]["verdict_reason"].as_str().unwrap().contains("too short"));
    assert!(v["generator"]["busy_ratio"].as_f64().unwrap() >= 0.0);
}

#[test]
fn hdr_out_writes_a_v2_histogram() {
    let url = tiny_server_url();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lat.hdr");
    let out = qpslab(&["load", "-n", "200", "-c", "2", "--hdr-out", path.to_str().unwrap(), &url]);
    assert_eq!(out.status.code(), Some(0));
    let text = std::fs::read_to_string(&path).unwrap();
    // "HISTFAAA" is the base64 of the V2 deflate cookie every HdrHistogram tool recognises.
    assert!(text.starts_with("HISTFAAA"), "{text}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("Requests/sec:"), "{text}");
    assert!(text.contains("TOTALS:  2 connect, 200 requests, 200 success, 0 fail"), "{text}");
}

#[test]
fn failed_checks_exit_1() {
    // A server that resets every connection: the run completes, its checks fail.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut s = stream;
            let _ = s.read(&mut [0u8; 1024]);
            let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
        }
    });
    let url = format!("http://127.0.0.1:{port}/");
    let out = qpslab(&["load", "-n", "20", "-c", "2", &url]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("FAILED: "), "{text}");
    assert!(text.contains("read: "), "{text}");
}

#[test]
fn descriptor_limit_is_raised_to_the_hard_limit() {
    let url = tiny_server_url();
    let out = Command::new("prlimit")
        .env("QPSLAB_STORE", common::TEST_STORE)
        .args(["--nofile=100:4096", env!("CARGO_BIN_EXE_qpslab"), "load", "-t1", "-c300"])
        .args(["-n", "600", &url])
        .output()
        .expect("prlimit (util-linux) runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("TOTALS:  300 connect, 600 requests, 600 success, 0 fail"), "{text}");
}

#[test]
fn descriptor_limit_too_low_is_a_usage_error() {
    // As nobody, the hard limit cannot be raised: the run must refuse at once, with the numbers.
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["prlimit", "--nofile=100:100", env!("CARGO_BIN_EXE_qpslab"), "load", "-c", "500"])
        .args(["-n", "1", "http://127.0.0.1:9/"])
        .output()
        .expect("setpriv and prlimit (util-linux) run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("Permission denied") {
        eprintln!("skipped: the test binary is not executable by nobody here: {stderr}");
        return;
    }
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--connections: 500 connections need about"), "{stderr}");
    assert!(stderr.contains("file descriptors but the limit is 100 (hard 100)"), "{stderr}");
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    // utime and stime are fields 14 and 15 of stat; 12 and 13 after the command name.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Ten thousand connections on each event loop, the server's and the generator's.
#[test]
fn ten_thousand_keep_alive_connections() {
    for io in ["epoll", "uring"] {
        let server = ServeChild::start(&[], &["-w", "2", "--io", io, "--json"]);
        let url = server.url("/");
        let args = ["load", "-t", "2", "-c", "10000", "-n", "40000", "--io", io, "--json", &url];
        let out = qpslab(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{io}: {stderr}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["config"]["io"], io);
        assert_eq!(v["requests"]["ok"], 40000, "{io}");
        assert_eq!(v["requests"]["failed"], 0, "{io}");
        assert_eq!(v["connections"]["connects"], 10000, "{io}");
        server.signal(libc::SIGTERM);
        let (code, out, _) = server.wait(Duration::from_secs(3));
        assert_eq!(code, Some(0), "{io}");
        let totals: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(totals["io"], io);
        assert_eq!(totals["totals"]["requests"], 40000, "{io}");
        // The generator's preflight reachability check is one more connection.
        assert_eq!(totals["totals"]["accepted"], 10001, "{io}");
    }
}

#[test]
fn sigterm_finishes_in_flight_responses_and_exits_quickly() {
    let server = ServeChild::start(&[], &["-w", "1"]);
    let addr: std::net::SocketAddr = server.addr.parse().unwrap();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /?t=400 HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    server.signal(libc::SIGTERM);
    let mut got = Vec::new();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let _ = s.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200 OK"), "in-flight response finished: {text:?}");
    assert!(text.contains("Connection: close"), "{text}");
    let (code, out, _) = server.wait(Duration::from_secs(2));
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(code, Some(0));
    assert!(out.starts_with("served 1 requests"), "{out}");
}

#[test]
fn descriptor_exhaustion_does_not_spin() {
    // 40 descriptors: a few for the process, the rest for connections. Opening 80 connections
    // hits EMFILE; the server must pause accepting, not spin, and keep serving.
    let server = ServeChild::start(&["prlimit", "--nofile=40:40"], &["-w", "1"]);
    let addr: std::net::SocketAddr = server.addr.parse().unwrap();
    let mut first = std::net::TcpStream::connect(addr).unwrap();
    first.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut buf = [0u8; 512];
    assert!(first.read(&mut buf).unwrap() > 0);
    let _held: Vec<_> = (0..80).filter_map(|_| std::net::TcpStream::connect(addr).ok()).collect();
    std::thread::sleep(Duration::from_millis(300));
    let before = cpu_ticks(server.child.id());
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_ticks(server.child.id()) - before;
    // 100 ticks per second on Linux: spinning would show ~100.
    assert!(used < 20, "server used {used} ticks in 1 s while out of descriptors");
    first.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let n = first.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"), "still serving");
    server.signal(libc::SIGINT);
    let (code, _, err) = server.wait(Duration::from_secs(3));
    assert_eq!(code, Some(0));
    // epoll runs out of descriptors (EMFILE); io_uring fills its table of registered
    // descriptors, which the kernel holds to the same limit.
    let paused = err.matches("pausing accepts").count() + err.matches("not accepting").count();
    assert!(paused > 0, "{err}");
    assert!(paused <= 3, "logged once per interval: {err}");
}

/// io_uring: connections beyond the worker's table of registered descriptors wait in the
/// kernel's queue, and the log says which table is full and how to size it (it said "Too
/// many open files in system", the system's file table, which was nowhere near full).
#[test]
fn a_full_table_of_registered_descriptors_is_named_with_its_size() {
    let server =
        ServeChild::start(&["prlimit", "--nofile=2000:2000"], &["-w", "1", "--io", "uring"]);
    let out = qpslab(&["load", "-c", "2500", "-d", "1s", "--timeout", "500ms", &server.url("/")]);
    assert_eq!(out.status.code(), Some(1), "the connections left waiting time out");
    server.signal(libc::SIGTERM);
    let (code, out, err) = server.wait(Duration::from_secs(5));
    assert_eq!(code, Some(0), "{err}");
    // The worker stops accepting when its open connections fill the table but for room for
    // closes under way; a burst of accepts completed in one turn can still overrun that room,
    // and then the accept that found no slot is named the same way.
    assert!(err.contains("table of registered descriptors"), "{err}");
    assert!(err.contains("(2000 slots") && err.contains("ulimit -n 2000"), "{err}");
    assert!(!err.contains("Too many open files in system"), "{err}");
    let errors: u64 = out.split("accept errors ").nth(1).unwrap().trim().parse().unwrap();
    assert!(errors <= 5, "{out}");
}

#[test]
fn serve_bad_flags() {
    usage_error(&["serve", "--accept", "herd"], "--accept");
    usage_error(&["serve", "--workers", "many"], "--workers");
    usage_error(&["serve", "--listen", "localhost"], "--listen");
    usage_error(&["serve", "--status", "99"], "--status");
    usage_error(&["serve", "--max-header-bytes", "8XB"], "--max-header-bytes");
    usage_error(&["serve", "--cpus", "100000"], "--cpus");
    usage_error(
        &["serve", "-l", "127.0.0.1:0", "--ready-fd", "99"],
        "--ready-fd 99: bad file descriptor",
    );
    usage_error(
        &["serve", "-l", "127.0.0.1:0", "--ready-fd", "1"],
        "--ready-fd 1: not stdin, stdout or stderr",
    );
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let me = format!("(pid {})", std::process::id());
    usage_error(
        &["serve", "--accept", "shared", "--listen", &addr],
        "the port is already in use by",
    );
    usage_error(&["serve", "--accept", "shared", "--listen", &addr], &me);
    usage_error(
        &["serve", "--accept", "exclusive", "--share-port"],
        "--share-port: needs --accept reuseport",
    );
}

/// Regression: a second `qpslab serve` on a port in use started silently (SO_REUSEPORT) and
/// the two servers split the traffic. It is refused now, naming the first; `--share-port`
/// shares on purpose and says so.
#[test]
fn a_port_in_use_is_refused_unless_shared_on_purpose() {
    let first = ServeChild::start(&[], &["-w", "1"]);
    let pid = first.child.id();
    usage_error(
        &["serve", "-l", &first.addr, "-w", "1"],
        &format!("--listen {}: the port is already in use by qpslab (pid {pid}); stop it or pick another port (--share-port", first.addr),
    );
    let wildcard = format!("0.0.0.0:{}", first.addr.rsplit(':').next().unwrap());
    usage_error(&["serve", "-l", &wildcard], &format!("qpslab (pid {pid})"));
    let second = ServeChild::start(&[], &["-l", &first.addr, "-w", "1", "--share-port"]);
    assert!(
        second.startup.contains(&format!(
            "sharing the port with qpslab (pid {pid}): the servers split the connections"
        )),
        "{}",
        second.startup
    );
    assert!(
        !first.startup.contains("backlog"),
        "no backlog warning unless asked: {}",
        first.startup
    );
    second.signal(libc::SIGTERM);
    let (code, _, _) = second.wait(Duration::from_secs(3));
    assert_eq!(code, Some(0));
}

/// The kernel caps the listen backlog at net.core.somaxconn; serve says so only when the user
/// asked for more.
#[test]
fn a_capped_backlog_is_mentioned_only_when_asked_for() {
    let cap: u32 =
        std::fs::read_to_string("/proc/sys/net/core/somaxconn").unwrap().trim().parse().unwrap();
    let quiet = ServeChild::start(&[], &["-w", "1"]);
    assert!(!quiet.startup.contains("backlog"), "{}", quiet.startup);
    let asked = (cap + 1).to_string();
    let told = ServeChild::start(&[], &["-w", "1", "--backlog", &asked]);
    assert!(
        told.startup
            .contains(&format!("--backlog {asked} is capped by net.core.somaxconn = {cap}")),
        "{}",
        told.startup
    );
}

#[test]
fn serve_stats_lines() {
    let server = ServeChild::start(&[], &["-w", "2", "--stats-every", "200ms", "--per-worker"]);
    let out = qpslab(&["load", "-n", "2000", "-c", "4", &server.url("/")]);
    assert_eq!(out.status.code(), Some(0));
    std::thread::sleep(Duration::from_millis(450));
    server.signal(libc::SIGINT);
    let (code, out, err) = server.wait(Duration::from_secs(3));
    assert_eq!(code, Some(0));
    assert!(err.contains(" open ") && err.contains(" req/s "), "{err}");
    assert!(err.contains("  worker 1 open "), "{err}");
    assert!(!err.contains("datagrams"), "no HTTP/3, no datagrams: {err}");
    assert!(out.contains("served 2000 requests"), "{out}");
}

#[test]
fn sigint_stops_a_load_run_early_with_results() {
    let url = tiny_server_url();
    let child = common::qpslab_command()
        .args(["load", "-c", "4", "-t", "1", "-d", "30s", "--json", &url])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let started = Instant::now();
    // SAFETY: kill() on the PID of our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stopped_early"], true);
    assert!(v["duration_s"].as_f64().unwrap() < 5.0);
    assert!(v["requests"]["completed"].as_u64().unwrap() > 0);
}

fn fixture_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../host/tests/fixtures/linux-6.18-virtio-2cpu")
}

#[test]
fn host_reads_a_captured_tree_and_the_live_host() {
    let root = fixture_root();
    let out = qpslab(&["host", "--root", root.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("rx-0   irq 38 virtio2-input.0  affinity 0-1 effective 1"), "{text}");
    let out = qpslab(&["host", "--json", "--all"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["online"].as_str().is_some_and(|s| !s.is_empty()));
    assert!(v["nics"].as_array().unwrap().iter().any(|n| n["name"] == "lo"), "--all includes lo");
    usage_error(&["host", "--root", "/nonexistent-root"], "--root /nonexistent-root");
}

/// Every rule says what it means, when it fires and what to do.
#[test]
fn doctor_explains_its_rules() {
    let out = qpslab(&["doctor", "--rules", "softnet-time-squeeze"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("fires at:  10 time squeezes/s or more over the window"), "{text}");
    let all = qpslab(&["doctor", "--rules"]);
    let text = String::from_utf8_lossy(&all.stdout);
    for name in ["latency-bound", "shared-cpus", "no-responses", "single-rx-queue"] {
        assert!(text.lines().any(|l| l == name), "{name} in {text}");
    }
    usage_error(&["doctor", "--rules", "slowness"], "--rules \"slowness\": no such rule");
}

#[test]
fn doctor_bad_flags() {
    usage_error(&["doctor"], "--duration");
    usage_error(&["doctor", "-d", "1s", "--", "true"], "exclude each other");
    usage_error(&["doctor", "-d", "1s", "--pid", "999999999"], "--pid 999999999");
    usage_error(&["doctor", "-d", "1s", "--interval", "0s"], "--interval");
    usage_error(&["doctor", "--", "/nonexistent/command"], "cannot run");
}

/// Counters that change between samples while the command runs: the command itself rewrites
/// the fixture's netstat with 40 more listen overflows.
#[test]
fn doctor_on_a_tree_that_changes_while_a_command_runs() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    qpslab_testkit::Shape::small_virtio().write(root).unwrap();
    let mut later = qpslab_testkit::Counters::idle(&qpslab_testkit::Shape::small_virtio());
    *later.tcpext.get_mut("ListenOverflows").unwrap() = 40;
    let staged = tempfile::tempdir().unwrap();
    later.write(&qpslab_testkit::Shape::small_virtio(), staged.path()).unwrap();
    // A listener at its backlog (129 waiting of 128): where the overflows happened.
    std::fs::write(
        root.join("proc/net/tcp"),
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 00000000:0000 0A 00000080:00000081 00:00000000 00000000     0        0 777 1 0000000000000000\n",
    )
    .unwrap();
    let script = format!(
        "sleep 0.3; cp {}/proc/net/netstat {}/proc/net/netstat; sleep 0.3; exit 7",
        staged.path().display(),
        root.display()
    );
    let out = qpslab(&[
        "doctor",
        "--root",
        root.to_str().unwrap(),
        "--interval",
        "100ms",
        "--json",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert_eq!(out.status.code(), Some(7), "the command's exit code passes through");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["command_exit_code"], 7);
    assert_eq!(v["summary"]["tcp"]["ListenOverflows"], 40);
    let names: Vec<&str> =
        v["findings"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(names[0], "accept-queue-overflow", "{names:?}");
}

/// A real run: qpslab serve pinned to CPU 0, `qpslab load` pinned to CPU 1 as the command.
#[test]
fn doctor_follows_a_real_server_and_load() {
    let server = ServeChild::start(&["taskset", "-c", "0"], &["-w", "1"]);
    let pid = server.child.id().to_string();
    let url = server.url("/");
    let v = json_ok(&[
        "doctor",
        "--interval",
        "250ms",
        "--pid",
        &pid,
        "--json",
        "--",
        "taskset",
        "-c",
        "1",
        env!("CARGO_BIN_EXE_qpslab"),
        "load",
        "-t1",
        "-c20",
        "-d1500ms",
        &url,
    ]);
    let procs = v["summary"]["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 2, "{procs:?}");
    for p in procs {
        assert!(p["cpu"].as_f64().unwrap() > 0.2, "each side used CPU: {p}");
    }
    let lo =
        v["summary"]["interfaces"].as_array().unwrap().iter().find(|i| i["name"] == "lo").unwrap();
    assert!(lo["rx_pps"].as_f64().unwrap() > 1000.0, "{lo}");
    assert!(v["summary"]["intervals"].as_array().unwrap().len() >= 5);
    let names: Vec<&str> =
        v["findings"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert!(
        names.iter().any(|n| [
            "server-bound",
            "client-bound",
            "both-saturated",
            "latency-bound",
            "cpu-contention",
            "no-single-bottleneck"
        ]
        .contains(n)),
        "a verdict on the bottleneck: {names:?}"
    );
}

/// The main job end to end, short: the built-in server on one CPU, the generator on the other.
#[test]
fn bench_builtin_end_to_end_json() {
    let out =
        qpslab(&["bench", "-d", "1500ms", "--warmup", "200ms", "--interval", "250ms", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let load = &v["load"];
    assert_load_contract(load);
    let r = &load["requests"];
    assert!(r["ok"].as_u64().unwrap() > 1000, "{r}");
    assert_eq!(r["failed"], 0);
    assert_eq!(
        r["sent"].as_u64().unwrap(),
        r["completed"].as_u64().unwrap()
            + r["failed"].as_u64().unwrap()
            + r["in_flight_at_stop"].as_u64().unwrap()
    );
    assert_eq!(v["target"]["kind"], "builtin");
    // Measured, not a share: with the other tests running, the server got 0.09 of a CPU once.
    assert!(v["server_cpu"].as_f64().unwrap() > 0.0, "server CPU measured: {}", v["server_cpu"]);
    assert!(v["generator_cpu"].as_f64().unwrap() > 0.0);
    assert!(v["requests_per_server_cpu_s"].as_f64().unwrap() > 1000.0);
    let server: Vec<u64> =
        v["target"]["cpus"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).collect();
    let generator: Vec<u64> =
        v["generator_cpus"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).collect();
    assert!(!server.is_empty() && !generator.is_empty());
    if std::thread::available_parallelism().unwrap().get() > 1 {
        assert!(
            server.iter().all(|c| !generator.contains(c)),
            "disjoint CPUs: {server:?} {generator:?}"
        );
    }
    let findings = v["doctor"]["findings"].as_array().unwrap();
    assert!(findings.iter().all(
        |f| f["evidence"].as_array().is_some_and(|e| !e.is_empty()) && f["remedy"].is_string()
    ));
    // The built-in server was stopped by PID.
    let pid = v["target"]["pids"][0].as_u64().unwrap();
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "server {pid} still running");
}

#[test]
fn bench_nginx_and_url_and_text() {
    let v = json_ok(&[
        "bench",
        "--target",
        "nginx",
        "-d",
        "1s",
        "--warmup",
        "0s",
        "--interval",
        "250ms",
        "--json",
    ]);
    assert_eq!(v["target"]["kind"], "nginx");
    assert!(v["target"]["pids"].as_array().unwrap().len() >= 2, "master and worker followed");
    assert!(v["load"]["requests"]["ok"].as_u64().unwrap() > 1000);
    for pid in v["target"]["pids"].as_array().unwrap() {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "nginx {pid} still running"
        );
    }

    let server = ServeChild::start(&[], &["-w", "1"]);
    let out = qpslab(&["bench", &server.url("/"), "-d", "1s", "--warmup", "0s", "-c", "10"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("target      {}", server.url("/"))), "{text}");
    assert!(
        text.contains("throughput")
            && text.contains("latency     p50")
            && text.contains("findings"),
        "{text}"
    );
}

#[test]
fn bench_bad_flags() {
    usage_error(&["bench", "--target", "apache"], "--target");
    usage_error(&["bench", "http://127.0.0.1:1/", "--target", "nginx"], "--target");
    usage_error(&["bench", "-d", "0s"], "--duration");
    usage_error(&["bench", "http://127.0.0.1:1/", "-d", "1s"], "127.0.0.1:1");
    let out = common::qpslab_command()
        .args(["bench", "--target", "nginx"])
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nginx is not on PATH"));
}

/// The habits users bring from wrk and curl: a URL without a scheme, `--latency`, negative
/// values named by their flag, a mistyped subcommand or flag with a suggestion and the help of
/// the subcommand being parsed.
#[test]
fn wrk_and_curl_habits() {
    let port = tiny_server();
    let out = qpslab(&[
        "load",
        "-n",
        "50",
        "-c",
        "2",
        "-t",
        "1",
        "--latency",
        &format!("127.0.0.1:{port}"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim(),
        format!(
            "qpslab: note: \"127.0.0.1:{port}\" has no scheme: taken as http://127.0.0.1:{port}"
        )
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("test @ http://127.0.0.1:{port}/")), "{text}");
    assert!(text.contains("  Latency Distribution\n      50%"), "{text}");
    usage_error(
        &["load", "-d", "-1", "http://127.0.0.1:1/"],
        "--duration <DUR>': must be a positive duration",
    );
    usage_error(&["load", "-c", "-5", "http://127.0.0.1:1/"], "must be a positive whole number");
    usage_error(&["bench", "--warmup", "-2s"], "must be a positive duration");
    usage_error(
        &["lod", "http://127.0.0.1:1/"],
        "unrecognized subcommand 'lod'; did you mean 'load'? (see 'qpslab --help')",
    );
    usage_error(
        &["load", "--latncy", "http://127.0.0.1:1/"],
        "did you mean '--latency'? (see 'qpslab load --help')",
    );
    usage_error(&["tune", "aply"], "did you mean 'apply'? (see 'qpslab tune --help')");
    usage_error(&["tune", "plan", "--bogus"], "(see 'qpslab tune plan --help')");
}

/// `qpslab host --json | head -c 10`: a closed stdout ends the command quietly, as Unix tools
/// do. The pipe's reading end is closed before qpslab writes, so the write must fail.
#[test]
fn closed_stdout_exits_quietly() {
    for args in [&["host", "--json"][..], &["host"], &["tune", "plan", "--json"]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = common::qpslab_command()
            .args(args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{args:?}");
    }
}

/// Ten thousand keep-alive connections are opened before the one-second window starts: the
/// window measures load, not connection setup, and the summary says how setup went.
#[test]
fn setup_stays_outside_the_measured_window() {
    let server = ServeChild::start(&[], &["-w", "2", "--json"]);
    let v = json_ok(&["load", "-t", "1", "-c", "10000", "-d", "1", "--json", &server.url("/")]);
    let duration = v["duration_s"].as_f64().unwrap();
    assert!((0.99..1.3).contains(&duration), "measured window {duration}");
    let setup = &v["setup"];
    assert_eq!(setup["connections"], 10000, "{setup}");
    assert_eq!(setup["opened"], 10000, "{setup}");
    assert_eq!(setup["failed"], 0, "{setup}");
    assert!(setup["duration_s"].as_f64().unwrap() > 0.0);
    assert!(v["requests"]["ok"].as_u64().unwrap() > 0, "{}", v["requests"]);
    assert_eq!(v["connections"]["connects"], 10000);
    server.signal(libc::SIGTERM);
    let (code, out, _) = server.wait(Duration::from_secs(5));
    assert_eq!(code, Some(0));
    let totals: serde_json::Value = serde_json::from_str(&out).unwrap();
    // The preflight's reachability check is one more connection.
    assert_eq!(totals["totals"]["accepted"], 10001);
}

fn findings(v: &serde_json::Value) -> Vec<String> {
    v["doctor"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect()
}

/// Regression: with `qpslab serve -w 1 --cpus 0` running, `qpslab bench URL` ran the generator
/// on CPUs 0 and 1, did not follow the server, and called a full CPU 0 "latency-bound". Bench
/// now finds the server from the kernel's socket table, counts its CPU, and keeps the
/// generator off the server's CPU.
#[test]
fn bench_finds_a_pinned_local_server_it_did_not_start() {
    if std::thread::available_parallelism().unwrap().get() < 2 {
        eprintln!("skipped: needs two CPUs");
        return;
    }
    let server = ServeChild::start(&[], &["-w", "1", "--cpus", "0"]);
    let pid = u64::from(server.child.id());
    let v = json_ok(&[
        "bench",
        &server.url("/"),
        "-d",
        "2s",
        "--warmup",
        "0s",
        "--interval",
        "250ms",
        "--json",
    ]);
    assert_eq!(v["target"]["pids"], serde_json::json!([pid]), "{}", v["target"]);
    assert_eq!(v["target"]["found_by"], "listening");
    assert_eq!(v["target"]["cpus"], serde_json::json!([0]));
    assert_eq!(v["generator_cpus"], serde_json::json!([1]));
    assert_eq!(v["cpus_shared"], false);
    // Counted at all (the regression counted none); how much depends on what else runs.
    assert!(v["server_cpu"].as_f64().unwrap() > 0.05, "server CPU counted: {}", v["server_cpu"]);
    assert!(v["requests_per_server_cpu_s"].as_f64().unwrap() > 1000.0);
    let names = findings(&v);
    assert!(
        !names.iter().any(|n| n == "latency-bound" || n == "no-single-bottleneck"),
        "{names:?}"
    );
    let procs = v["doctor"]["summary"]["processes"].as_array().unwrap();
    let serve = procs.iter().find(|p| p["pid"] == pid).expect("the server is followed");
    assert_eq!(serve["role"], "server");
    assert_eq!(serve["cpus"], "0", "{serve}");

    // Named by the user instead: the same, found_by says so.
    let v = json_ok(&[
        "bench",
        &server.url("/"),
        "--server-pid",
        &pid.to_string(),
        "-d",
        "1s",
        "--warmup",
        "0s",
        "--json",
    ]);
    assert_eq!(v["target"]["found_by"], "--server-pid");
    assert_eq!(v["target"]["pids"], serde_json::json!([pid]));
    usage_error(
        &["bench", &server.url("/"), "--server-pid", "999999999"],
        "--server-pid 999999999: no such process",
    );
    usage_error(&["bench", "--server-pid", "1"], "--server-pid names the server behind a URL");
}

/// A server on another host (a network namespace with its own address): bench says in one line
/// that the doctor sees only this host, and follows no server.
#[test]
fn bench_of_another_host_says_the_doctor_sees_only_this_one() {
    let ns = common::Netns::create("bench");
    let id = std::process::id() % 250 + 1;
    let (host_ip, ns_ip) = (format!("10.201.{id}.1"), format!("10.201.{id}.2"));
    ns.address(&host_ip, &ns_ip);
    let netns = ["ip", "netns", "exec", ns.name.as_str()];
    let listen = format!("{ns_ip}:8080");
    let server = ServeChild::start(&netns, &["-w", "1", "-l", &listen]);
    let url = format!("http://{ns_ip}:8080/");
    let v = json_ok(&["bench", &url, "-d", "1s", "--warmup", "0s", "-c", "10", "--json"]);
    assert_eq!(v["target"]["pids"], serde_json::json!([]));
    assert!(v["server_cpu"].is_null());
    let notes = v["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0]
        .as_str()
        .unwrap()
        .contains("is on another host: the doctor sees only this host"));
    assert!(v["load"]["requests"]["ok"].as_u64().unwrap() > 100);
    drop(server);
}

/// One stop signal for every command: the first SIGINT stops the run cleanly (the doctor asks
/// its command to stop too), a second one ends the process at once with 130, as users expect
/// of long-running tools. Here the command ignores SIGINT and SIGTERM, so only the second
/// signal can end the wait for it.
#[test]
fn a_second_ctrl_c_ends_at_once_with_130() {
    let mut child = common::qpslab_command()
        .args(["doctor", "--interval", "100ms", "--", "sh", "-c", "trap '' INT TERM; sleep 3"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill() on the PID of our own child.
    unsafe { libc::kill(pid, libc::SIGINT) };
    std::thread::sleep(Duration::from_millis(500));
    assert!(child.try_wait().unwrap().is_none(), "still waiting for its command");
    let started = Instant::now();
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(status.code(), Some(130));
}

/// io_uring forbidden (a seccomp filter on this child only, as a container's policy would;
/// this host's `kernel.io_uring_disabled` is not touched): `--io auto` falls back to epoll with
/// a one-line note, `--io uring` is refused naming the flag.
#[test]
fn without_io_uring_serve_falls_back_to_epoll_with_a_note() {
    use std::os::unix::process::CommandExt as _;
    fn no_io_uring(cmd: &mut Command) {
        // SAFETY: between fork and exec only async-signal-safe calls (prctl) on data built
        // before the fork.
        unsafe {
            cmd.pre_exec(|| {
                // A = syscall number; io_uring_setup (425) fails with ENOSYS, all else passes.
                let filter = [
                    libc::sock_filter { code: 0x20, jt: 0, jf: 0, k: 0 },
                    libc::sock_filter { code: 0x15, jt: 0, jf: 1, k: 425 },
                    libc::sock_filter {
                        code: 0x06,
                        jt: 0,
                        jf: 0,
                        k: 0x0005_0000 | libc::ENOSYS as u32,
                    },
                    libc::sock_filter { code: 0x06, jt: 0, jf: 0, k: 0x7fff_0000 },
                ];
                let prog = libc::sock_fprog {
                    len: filter.len() as u16,
                    filter: filter.as_ptr().cast_mut(),
                };
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                    || libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut cmd = common::qpslab_command();
    cmd.args(["serve", "-l", "127.0.0.1:0", "-w", "1", "--io", "uring"]);
    cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    no_io_uring(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("serve --io uring ran despite io_uring being forbidden");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--io: uring cannot run here: io_uring_setup:")
            && err.contains("use --io epoll"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");

    let mut cmd = common::qpslab_command();
    cmd.args(["serve", "-l", "127.0.0.1:0", "-w", "1"]).stderr(std::process::Stdio::piped());
    no_io_uring(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !seen.contains("listening on") && Instant::now() < deadline {
        let mut buf = [0u8; 512];
        let n = stderr.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    // SAFETY: kill() on the PID of this test's own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    assert!(
        seen.contains(
            "qpslab serve: note: io_uring unavailable (io_uring_setup: Function not implemented"
        ),
        "{seen}"
    );
    assert!(seen.contains("accept reuseport, io epoll)"), "{seen}");

    // The generator: --io uring refused by name, auto on epoll with the note, and it runs.
    let server = ServeChild::start(&[], &["-w", "1", "--io", "epoll"]);
    let url = server.url("/");
    let mut cmd = common::qpslab_command();
    cmd.args(["load", "-n", "200", "-c", "4", "--io", "uring", &url]);
    no_io_uring(&mut cmd);
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--io: uring cannot run here") && err.contains("use --io epoll"), "{err}");
    let mut cmd = common::qpslab_command();
    cmd.args(["load", "-n", "200", "-c", "4", "--json", &url]);
    no_io_uring(&mut cmd);
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("note: io_uring unavailable (io_uring_setup: Function not implemented"));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["config"]["io"].as_str(), v["requests"]["ok"].as_u64()),
        (Some("epoll"), Some(200))
    );
}

/// `serve --sqpoll`: a kernel thread polls the worker's ring (it is in the process, on the
/// worker's CPU); the requests are served and counted; without io_uring the flag is refused.
/// io_uring workers keep connections as registered (direct) descriptors, which never enter the
/// process's descriptor table; epoll workers hold one descriptor per connection. Both answer.
#[test]
fn io_uring_connections_live_in_the_ring_not_the_descriptor_table() {
    let sockets = |pid: u32| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .flatten()
            .filter(|e| {
                std::fs::read_link(e.path())
                    .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
            })
            .count()
    };
    for (io, direct) in [("uring", true), ("epoll", false)] {
        let server = ServeChild::start(&[], &["-w", "1", "--io", io]);
        let addr = server.url("/").trim_start_matches("http://").trim_end_matches('/').to_string();
        let mut conns = Vec::new();
        for _ in 0..100 {
            let mut c = std::net::TcpStream::connect(&addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut buf = [0u8; 256];
            let n = c.read(&mut buf).unwrap();
            assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{io}: {:?}", &buf[..n]);
            conns.push(c);
        }
        let held = sockets(server.pid());
        if direct {
            assert!(held < 20, "{io}: {held} sockets in the descriptor table for 100 connections");
        } else {
            assert!(held >= 100, "{io}: {held} sockets for 100 connections");
        }
        drop(conns);
        server.signal(libc::SIGTERM);
        let (code, _, err) = server.wait(Duration::from_secs(3));
        assert_eq!(code, Some(0), "{io}: {err}");
    }
}

#[test]
fn sqpoll_serves_on_its_polling_thread() {
    let cpu = qpslab_sys::cpus::allowed_cpus()[0].to_string();
    let server =
        ServeChild::start(&[], &["-w", "1", "--cpus", &cpu, "--io", "uring", "--sqpoll", "--json"]);
    let url = server.url("/");
    let out = qpslab(&["load", "-t", "1", "-c", "20", "-n", "5000", "--json", &url]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let threads: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", server.pid()))
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .collect();
    assert!(threads.iter().any(|c| c.starts_with("iou-sqp-")), "{threads:?}");
    assert!(server.startup.contains("io uring with submission polling"), "{}", server.startup);
    server.signal(libc::SIGTERM);
    let (code, out, err) = server.wait(Duration::from_secs(3));
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v["io"].as_str(), v["sqpoll"].as_bool()), (Some("uring"), Some(true)));
    assert_eq!(v["totals"]["requests"], 5000);

    let out = qpslab(&["serve", "-l", "127.0.0.1:0", "--io", "epoll", "--sqpoll"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.starts_with("qpslab: error: --sqpoll: ") && err.contains("--io uring"), "{err}");
}

/// What `--help` and `--version` say, as a user reads them: bench's --no-save has its own
/// text and --server its own (a doc comment sat on the wrong field), load takes https URLs,
/// `load --version` prints the version (it suggested --tls-version), and `report` without
/// runs points at --last.
#[test]
fn help_version_and_a_report_without_runs_say_what_they_should() {
    let help = |args: &[&str]| {
        let out = qpslab(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let bench = help(&["bench", "--help"]);
    // A flag's line and the next (clap puts the text under the flag when the flags are many).
    let line = |text: &str, flag: &str| {
        let lines: Vec<&str> = text.lines().collect();
        let at = lines.iter().position(|l| l.trim_start().starts_with(flag)).unwrap_or(0);
        lines[at..(at + 2).min(lines.len())].join(" ")
    };
    assert!(line(&bench, "--no-save").contains("Do not keep the run in the runs store"), "{bench}");
    assert!(line(&bench, "--server <HOST>").contains("Run the target and the doctor"), "{bench}");
    let load = help(&["load", "--help"]);
    assert!(load.contains("https://") && !load.contains("http only"), "{load}");
    for args in [&["--version"][..], &["load", "--version"], &["bench", "--version"]] {
        let v = help(args);
        assert!(v.contains(env!("CARGO_PKG_VERSION")), "{args:?}: {v}");
    }
    usage_error(&["report", "-o", "/tmp/qpslab-never-written.html"], "give --last");
}
