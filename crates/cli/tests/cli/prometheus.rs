//! Debian's Prometheus (2.42), started here on loopback with its remote-write receiver and
//! native histograms, receives a run both ways: pushed by `--prometheus-rw` (classic and
//! native histogram) and scraped from `--live`'s `/metrics`. Its query API must return the
//! run's exact counts.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{self, free_port, ServeChild};

struct Prometheus {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Scrapes `scrape` (host:port) every second.
    fn start(scrape: &str) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: qpslab\n    \
                 static_configs:\n      - targets: ['{scrape}']\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .args(["--web.enable-remote-write-receiver", "--enable-feature=native-histograms"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (Debian's package) runs");
        let p = Prometheus { child, port, _dir: dir };
        // Ready, and scraping the target already (it takes up targets every 5 s): a run's
        // linger is then enough for scrapes to see it.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !p.get("/api/v1/targets").1.contains("\"health\":\"down\"") {
            assert!(Instant::now() < deadline, "prometheus did not start scraping");
            std::thread::sleep(Duration::from_millis(200));
        }
        p
    }

    fn get(&self, path: &str) -> (String, String) {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return (String::new(), String::new());
        };
        let _ = write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        let mut t = String::new();
        let _ = s.read_to_string(&mut t);
        let (h, b) = t.split_once("\r\n\r\n").unwrap_or(("", ""));
        (h.to_string(), b.to_string())
    }

    /// The one value a PromQL query gives now.
    fn value(&self, query: &str) -> Option<f64> {
        let q: String = query
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        let (_, body) = self.get(&format!("/api/v1/query?query={q}"));
        let body = body.trim();
        // The body may be chunked; the JSON is the line that starts with '{'.
        let json = body.lines().find(|l| l.starts_with('{')).unwrap_or(body);
        let v: Value = serde_json::from_str(json).unwrap_or(Value::Null);
        let r = v["data"]["result"].as_array()?;
        assert!(r.len() <= 1, "{query}: {r:?}");
        r.first()?["value"][1].as_str()?.parse().ok()
    }

    fn wait_value(&self, query: &str, want: f64) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let got = self.value(query);
            if got == Some(want) {
                return;
            }
            assert!(Instant::now() < deadline, "{query}: {got:?}, want {want}");
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

#[test]
fn prometheus_receives_a_run_exactly_by_remote_write_and_by_scrape() {
    let server = ServeChild::start(&[], &["-w", "1"]);
    let live_port = free_port();
    let live = format!("127.0.0.1:{live_port}");
    let prom = Prometheus::start(&live);
    let rw = format!("http://127.0.0.1:{}/api/v1/write", prom.port);
    let out = common::qpslab_command()
        .args(["load", &server.url("/"), "-n", "20000", "-c", "10", "--json"])
        .args(["--prometheus-rw", &rw, "--prometheus-native"])
        .arg(format!("--live={live}"))
        .args(["--live-linger", "3s"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["requests"]["ok"], 20000);
    let target = server.url("/");
    // Pushed: no job label (the scrape adds job="qpslab").
    let pushed = format!("job=\"\",target=\"{target}\"");
    prom.wait_value(&format!("qpslab_requests_total{{outcome=\"ok\",{pushed}}}"), 20000.0);
    prom.wait_value(&format!("qpslab_requests_total{{outcome=\"failed\",{pushed}}}"), 0.0);
    prom.wait_value(&format!("qpslab_request_duration_seconds_count{{{pushed}}}"), 20000.0);
    prom.wait_value(
        &format!("qpslab_request_duration_seconds_bucket{{le=\"+Inf\",{pushed}}}"),
        20000.0,
    );
    prom.wait_value(
        &format!("histogram_count(qpslab_request_duration_seconds{{{pushed}}})"),
        20000.0,
    );
    // Scraped from /metrics during the linger; the last scrape's values (once qpslab has
    // exited, Prometheus marks the series stale, so an instant query no longer sees them).
    let scraped = format!("job=\"qpslab\",target=\"{target}\"");
    let last = |m: &str, more: &str| format!("last_over_time({m}{{{more}{scraped}}}[5m])");
    prom.wait_value(&last("qpslab_requests_total", "outcome=\"ok\","), 20000.0);
    prom.wait_value(&last("qpslab_request_duration_seconds_count", ""), 20000.0);
    // The native histogram's median sits where the run's does (within a schema-3 bucket).
    let p50_pushed = prom
        .value(&format!("histogram_quantile(0.5, qpslab_request_duration_seconds{{{pushed}}})"))
        .unwrap();
    let p50_run = v["latency_us"]["p50"].as_f64().unwrap() / 1e6;
    assert!((p50_pushed / p50_run - 1.0).abs() < 0.1, "{p50_pushed} vs {p50_run}");
}

/// A receiver that is not there: the run still completes, and says the push failed.
#[test]
fn a_failed_push_is_told_and_loses_nothing_else() {
    let server = ServeChild::start(&[], &["-w", "1"]);
    let nobody = format!("http://127.0.0.1:{}/api/v1/write", free_port());
    let out = common::qpslab_command()
        .args(["load", &server.url("/"), "-n", "2000", "-c", "4", "--json"])
        .args(["--prometheus-rw", &nobody])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("--prometheus-rw: the final push failed"), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["requests"]["ok"], 2000);
}

/// A sweep pushes each run as its own series (`variant`, `repeat`), with that run's exact
/// final counts: the stored runs' own.
#[test]
fn a_sweep_pushes_each_run_under_its_variant() {
    let dir = tempfile::tempdir().unwrap();
    let (file, store) = crate::live::connections_sweep(dir.path(), "pushed", "1s", [2, 8]);
    let prom = Prometheus::start(&format!("127.0.0.1:{}", free_port()));
    let rw = format!("http://127.0.0.1:{}/api/v1/write", prom.port);
    let run = |args: &[&str]| {
        let out = common::qpslab_command().env("QPSLAB_STORE", &store).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("warning: --prometheus-rw"), "{err}");
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let sweep = run(&["sweep", file.to_str().unwrap(), "--json", "--prometheus-rw", &rw]);
    let id = sweep["sweep"].as_i64().unwrap().to_string();
    let runs = run(&["runs", "--json", "--sweep", &id]);
    assert_eq!(runs.as_array().unwrap().len(), 2);
    for r in runs.as_array().unwrap() {
        let shown = run(&["runs", "show", &r["id"].as_i64().unwrap().to_string(), "--json"]);
        let ok = shown["report"]["load"]["requests"]["ok"].as_f64().unwrap();
        assert!(ok > 0.0);
        let variant = r["variant"].as_str().unwrap();
        let labels = format!("variant=\"{variant}\",repeat=\"1\",target=\"pushed\"");
        prom.wait_value(&format!("qpslab_requests_total{{outcome=\"ok\",{labels}}}"), ok);
    }
}

/// Over two local agents the counters are per agent (named apart), summing to the run; the
/// histogram is the merged run's.
#[test]
fn over_agents_the_counters_are_per_agent_and_sum_to_the_run() {
    let server = ServeChild::start(&[], &["-w", "1"]);
    let prom = Prometheus::start(&format!("127.0.0.1:{}", free_port()));
    let rw = format!("http://127.0.0.1:{}/api/v1/write", prom.port);
    let target = server.url("/");
    let out = common::qpslab_command()
        .args(["load", "--agents", "local,local", &target, "-n", "20000", "-c", "8", "--json"])
        .args(["--prometheus-rw", &rw])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["requests"]["ok"], 20000);
    let ok = format!("qpslab_requests_total{{outcome=\"ok\",target=\"{target}\"}}");
    prom.wait_value(&format!("sum({ok})"), 20000.0);
    prom.wait_value(&format!("count({ok})"), 2.0);
    // -n is split by weight: 10000 each, under names told apart.
    for agent in ["local", "local#2"] {
        let one = format!(
            "qpslab_requests_total{{outcome=\"ok\",agent=\"{agent}\",target=\"{target}\"}}"
        );
        prom.wait_value(&one, 10000.0);
    }
    prom.wait_value(
        &format!("qpslab_request_duration_seconds_count{{agent=\"all\",target=\"{target}\"}}"),
        20000.0,
    );
}
