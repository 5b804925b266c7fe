//! `qpslab load` models on the command line: flag errors, several URLs, and `qpslab merge`.

use super::{qpslab, usage_error, ServeChild};

#[test]
fn load_model_flags_name_the_flag() {
    let url = "http://127.0.0.1:1/";
    usage_error(&["load", "--rst-close", url], "--rst-close");
    usage_error(&["load", "--conn-per-request", "--pipeline", "2", url], "--pipeline");
    usage_error(&["load", "--source", "127.0.0.9-127.0.0.2", url], "--source");
    usage_error(&["load", "--source", "::1", url], "--source: \"::1\" and the target");
    usage_error(
        &["load", "-t", "4", "-c", "4", "--source", "127.0.0.2:40000-40001", url],
        "--source",
    );
    // 20 connections to one destination from 10 (address, port) pairs: refused before the run.
    let server = ServeChild::start(&[], &["-w", "1"]);
    usage_error(
        &["load", "-c", "20", "-t", "1", "--source", "127.0.0.2:40000-40009", &server.url("/")],
        "--source: 20 connections to 127.0.0.1",
    );
    // An address this host does not have: no retry binds to it (it was retried for the whole
    // run, blamed on used-up ports).
    usage_error(
        &["load", "-d", "10s", "--source", "198.51.100.1-198.51.100.9", &server.url("/")],
        "--source: 198.51.100.1 is not an address of this host",
    );
    let dir = tempfile::tempdir().unwrap();
    let stages = dir.path().join("stages");
    std::fs::write(&stages, "10s 100\n5 fast\n").unwrap();
    let s = stages.to_str().unwrap();
    usage_error(&["load", "--stages", s, url], "--stages: ");
    usage_error(&["load", "--stages", s, url], "line 2");
    usage_error(&["load", "--stages", s, "-R", "100", url], "--stages");
    usage_error(&["load", "--stages", "/nonexistent/stages", url], "--stages");
    let targets = dir.path().join("targets");
    std::fs::write(&targets, "GET http://127.0.0.1:1/\nGET http://127.0.0.1:2/ weight=x\n")
        .unwrap();
    usage_error(&["load", "--targets", targets.to_str().unwrap()], "line 2");
    std::fs::write(&targets, "GET ftp://x/\n").unwrap();
    usage_error(&["load", "--targets", targets.to_str().unwrap()], "--targets");
    usage_error(&["load", "-c", "1", "http://127.0.0.1:1/", "http://127.0.0.1:2/"], "-c 2");
    usage_error(&["load", "--poll", "busy", url], "--poll");
    usage_error(
        &["load", "--log", "/nonexistent/dir/x.hlog", "-n", "1", &server.url("/")],
        "--log",
    );
    usage_error(&["merge", "/nonexistent/a.hlog"], "/nonexistent/a.hlog");
    usage_error(&["merge", stages.to_str().unwrap()], "stages");
}

#[test]
fn several_urls_on_the_command_line_get_per_target_counts() {
    let server = ServeChild::start(&[], &["-w", "1"]);
    let (a, b) = (server.url("/a"), server.url("/b"));
    let out = qpslab(&["load", "-c", "4", "-t", "1", "-n", "4000", "--json", &a, &b]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["targets"].as_array().unwrap().len(), 2);
    let t = v["per_target"].as_array().unwrap();
    assert_eq!(t[0]["url"], a.as_str());
    assert_eq!(t[0]["completed"].as_u64().unwrap() + t[1]["completed"].as_u64().unwrap(), 4000);
    // One address: every connection alternates the two, so each gets half within one request
    // per connection.
    let first = t[0]["completed"].as_u64().unwrap();
    assert!((1996..=2004).contains(&first), "{first}");
    let text = qpslab(&["load", "-c", "2", "-n", "100", &a, &b]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("Targets:"));
}

#[test]
fn merge_of_a_split_interval_log_equals_the_runs_histogram() {
    let server = ServeChild::start(&[], &["-w", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let (log, hdr) = (dir.path().join("run.hlog"), dir.path().join("run.hdr"));
    let out = qpslab(&[
        "load",
        "-t",
        "1",
        "-c",
        "10",
        "-R",
        "3000",
        "-d",
        "4",
        "--log",
        log.to_str().unwrap(),
        "--hdr-out",
        hdr.to_str().unwrap(),
        &server.url("/"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&log).unwrap();
    let (head, rows): (Vec<&str>, Vec<&str>) =
        text.lines().partition(|l| l.starts_with('#') || l.starts_with('"'));
    assert_eq!(rows.len(), 4, "{text}");
    let part = |r: &[&str], name: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, [head.clone(), r.to_vec()].concat().join("\n") + "\n").unwrap();
        p.to_str().unwrap().to_string()
    };
    let (first, second) = (part(&rows[..2], "first.hlog"), part(&rows[2..], "second.hlog"));
    let merged = qpslab(&["merge", "--json", &first, &second]);
    assert_eq!(merged.status.code(), Some(0));
    let halves: serde_json::Value = serde_json::from_slice(&merged.stdout).unwrap();
    let whole = qpslab(&["merge", "--json", hdr.to_str().unwrap()]);
    let whole: serde_json::Value = serde_json::from_slice(&whole.stdout).unwrap();
    assert!(whole["count"].as_u64().unwrap() > 10_000);
    assert_eq!(halves["count"], whole["count"]);
    assert_eq!(halves["latency_us"], whole["latency_us"], "same percentiles, exactly");
    assert_eq!(halves["files"][0]["intervals"], 2);
    let text = qpslab(&["merge", &first, &second]);
    assert!(String::from_utf8_lossy(&text.stdout).starts_with("Merged 2 files:"));
}

/// A pool of whole URLs needs no URL of its own; `--per-request` writes a CSV line per line of
/// the pool with its exact counts (100 lines, 300 requests in order: 3 each); the JSON names
/// the pool, and `bench` says it too.
#[test]
fn a_pool_of_urls_is_counted_line_by_line_on_request() {
    let server = ServeChild::start(&[], &["-w", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool.txt");
    let lines: String = (0..100).map(|i| format!("{}\n", server.url(&format!("/p/{i}")))).collect();
    std::fs::write(&pool, lines).unwrap();
    let csv = dir.path().join("counts.csv");
    let (pool, csv_s) = (pool.to_str().unwrap(), csv.to_str().unwrap());
    let v = super::json_ok(&[
        "load",
        "--urls",
        pool,
        "-n",
        "300",
        "-c",
        "3",
        "-t",
        "1",
        "--json",
        "--per-request",
        csv_s,
    ]);
    assert_eq!((v["pool"]["size"].as_u64(), v["requests"]["ok"].as_u64()), (Some(100), Some(300)));
    assert_eq!(v["pool"]["groups"][0]["name"], "/p", "{v}");
    let text = std::fs::read_to_string(&csv).unwrap();
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows[0], "line,url,method,sent,completed,ok,failed");
    assert_eq!(rows.len(), 101, "{text}");
    assert!(rows[1..].iter().all(|r| r.ends_with(",GET,3,3,3,0")), "{text}");
    assert!(rows[1].starts_with(&format!("1,\"{}\"", server.url("/p/0"))), "{text}");
    usage_error(
        &["load", "--urls", pool, "-n", "1", "--per-request", "/nonexistent/c.csv"],
        "--per-request",
    );
    usage_error(&["load", "--urls", "/nonexistent/pool.txt"], "--urls");
    // Latency by group, against the truth the server's delay sets: /slow answers in 20 ms.
    let mixed = dir.path().join("mixed.txt");
    let lines: String = (0..20).map(|i| format!("/fast/{i}\n/slow/{i}?t=20\n")).collect();
    std::fs::write(&mixed, lines).unwrap();
    let v = super::json_ok(&[
        "load",
        "--urls",
        mixed.to_str().unwrap(),
        "-n",
        "40",
        "-c",
        "1",
        "-t",
        "1",
        "--json",
        &server.url("/"),
    ]);
    let group = |name: &str| {
        let gs = v["pool"]["groups"].as_array().unwrap();
        gs.iter().find(|g| g["name"] == name).unwrap_or_else(|| panic!("{v}")).clone()
    };
    let (fast, slow) = (group("/fast"), group("/slow"));
    assert_eq!((fast["ok"].as_u64(), slow["ok"].as_u64()), (Some(20), Some(20)), "{v}");
    let p50 = |g: &serde_json::Value| g["latency_us"]["p50"].as_u64().unwrap();
    assert!(p50(&slow) >= 20_000 && p50(&slow) < 40_000, "{slow}");
    assert!(p50(&fast) < 10_000, "{fast}");
    // Paths: on bench's own server.
    let paths = dir.path().join("paths.txt");
    std::fs::write(&paths, "/a/1\n/a/2\n/b/3\n").unwrap();
    let paths = paths.to_str().unwrap();
    let out = qpslab(&["bench", "--target", "builtin", "--urls", paths, "-d", "1s", "--no-save"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("pool        3 requests from") && text.contains("in 2 group(s)"),
        "{text}"
    );
}

/// `--body-lines`: one URL, a body per line; the CSV's `line` column tells the lines apart
/// (a blank line is skipped, so the bodies are on lines 1, 3 and 4), each with its counts.
#[test]
fn body_lines_are_counted_by_their_line_in_the_file() {
    let server = ServeChild::start(&[], &["-w", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let bodies = dir.path().join("bodies.txt");
    std::fs::write(&bodies, "{\"id\":1}\n\n{\"id\":2}\n{\"id\":3}\n").unwrap();
    let csv = dir.path().join("counts.csv");
    let url = server.url("/api");
    let args = [
        "load",
        "--body-lines",
        bodies.to_str().unwrap(),
        "-m",
        "POST",
        "-n",
        "6",
        "-c",
        "1",
        "-t",
        "1",
        "--json",
        "--per-request",
        csv.to_str().unwrap(),
        url.as_str(),
    ];
    let v = super::json_ok(&args);
    assert_eq!(v["requests"]["ok"].as_u64(), Some(6), "{v}");
    let text = std::fs::read_to_string(&csv).unwrap();
    let rows: Vec<&str> = text.lines().collect();
    let want: Vec<String> =
        [1, 3, 4].iter().map(|l| format!("{l},\"{url}\",POST,2,2,2,0")).collect();
    assert_eq!(rows[1..], want, "{text}");
}

/// `--linger` (500us by default): a closed loop that gathers answers while the server is busy
/// with the rest of the pipeline still counts every request exactly, on the client and on the
/// server (HTTP/2 with 100 streams on one connection, where a server writes its answers apart,
/// and HTTP/1.1 over 16 connections), and reports the time its turns could hold out within the
/// window; `--linger 0` and an open loop never linger, and the open loop keeps its schedule. A
/// duration that is not one is refused, naming the flag.
#[test]
fn a_lingering_loop_counts_every_request_exactly() {
    use std::time::Duration;
    let server = ServeChild::start(&[], &["-w", "1", "--io", "uring", "--json"]);
    let url = server.url("/");
    let load = |io: &str, extra: &[&str]| {
        let out =
            qpslab(&[&["load", "--json", "-t", "1", "--io", io][..], extra, &[&url]].concat());
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let mut answered = 0;
    for io in ["uring", "epoll"] {
        let h2 = load(io, &["--h2", "--streams", "100", "-c", "1", "-n", "20000"]);
        assert_eq!(h2["requests"]["ok"], 20000, "{io}: {}", h2["requests"]);
        assert_eq!(h2["config"]["linger_us"], 500, "{io}: {}", h2["config"]);
        let held = h2["generator"]["linger_s"].as_f64().unwrap();
        assert!(held <= h2["duration_s"].as_f64().unwrap(), "{io}: {}", h2["generator"]);
        let h1 = load(io, &["-c", "16", "-n", "5000", "--linger", "0"]);
        let open = load(io, &["-c", "16", "--rate", "2000", "-d", "1s"]);
        answered += 20000 + never_held(io, &h1, &open);
    }
    server.signal(libc::SIGTERM);
    let (code, out, _) = server.wait(Duration::from_secs(3));
    assert_eq!(code, Some(0));
    let totals: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(totals["totals"]["requests"], answered, "{totals}");
    usage_error(&["load", "--linger", "soon", &url], "--linger");
}

/// The runs of a lingering test that never hold out: `off` (`--linger 0`, 5,000 requests, all
/// answered) and `open` (2,000 a second for 1 s, its schedule kept); the requests they sent.
fn never_held(what: &str, off: &serde_json::Value, open: &serde_json::Value) -> u64 {
    assert_eq!(off["requests"]["ok"], 5000, "{what}: {}", off["requests"]);
    assert_eq!(off["config"]["linger_us"], 0, "{what}: {}", off["config"]);
    assert_eq!(off["generator"]["linger_s"], 0.0, "{what}: {}", off["generator"]);
    let sent = open["requests"]["sent"].as_u64().unwrap();
    assert!((1900..=2100).contains(&sent), "{what}: the schedule kept: {}", open["requests"]);
    assert_eq!(open["config"]["linger_us"], 0, "{what}: an open loop never lingers");
    assert_eq!(open["generator"]["linger_s"], 0.0, "{what}: {}", open["generator"]);
    5000 + sent
}

/// The same over HTTP/3 on both QUIC clients: a closed loop of 100 streams on one connection
/// that sleeps through its linger before it reads (qpslab's own client) still counts every
/// request exactly, on the client and on the server, and reports its time holding out within
/// the window; quinn-proto's client, `--linger 0` and an open loop never hold out.
#[test]
fn a_lingering_http3_loop_counts_every_request_exactly() {
    use std::time::Duration;
    let server = ServeChild::start(&[], &["-w", "1", "--tls-self-signed", "--h3", "--json"]);
    let url = format!("https://{}/", server.addr);
    let load = |quic: &str, extra: &[&str]| {
        let args =
            [&["load", "--h3", "-k", "--json", "-t", "1", "--quic", quic][..], extra, &[&url]];
        let out = qpslab(&args.concat());
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let mut answered = 0;
    for quic in ["quinn", "own"] {
        let run = load(quic, &["--streams", "100", "-c", "1", "-n", "20000"]);
        assert_eq!(run["requests"]["ok"], 20000, "{quic}: {}", run["requests"]);
        // quinn-proto's client does not hold out (it paid nothing there, docs/load.md).
        let linger = if quic == "own" { 500 } else { 0 };
        assert_eq!(run["config"]["linger_us"], linger, "{quic}: {}", run["config"]);
        let held = run["generator"]["linger_s"].as_f64().unwrap();
        assert!(held <= run["duration_s"].as_f64().unwrap(), "{quic}: {}", run["generator"]);
        assert!(quic == "own" || held == 0.0, "{quic}: {}", run["generator"]);
        let off = load(quic, &["--streams", "10", "-c", "4", "-n", "5000", "--linger", "0"]);
        let open = load(quic, &["-c", "4", "--rate", "2000", "-d", "1s"]);
        answered += 20000 + never_held(quic, &off, &open);
    }
    server.signal(libc::SIGTERM);
    let (code, out, _) = server.wait(Duration::from_secs(3));
    assert_eq!(code, Some(0));
    let totals: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(totals["totals"]["requests"], answered, "{totals}");
}
