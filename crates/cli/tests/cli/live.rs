//! `--live`: the page a user opens while a load, a load over agents or a sweep runs, read from a
//! real chromium tab that stays open; and the refusals at start.
//!
//! With `QPSLAB_SCREENSHOTS=DIR` the tests leave their screenshots there (docs/ has them).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::browser::Browser;
use crate::common::{self, ServeChild};

/// A qpslab child with `--live=127.0.0.1:0`; its page's URL read from its stderr.
struct LiveRun {
    child: Child,
    url: String,
    stderr: std::sync::mpsc::Receiver<String>,
}

impl LiveRun {
    fn start(args: &[&str], store: Option<&std::path::Path>) -> LiveRun {
        let mut cmd = common::qpslab_command();
        if let Some(s) = store {
            cmd.env("QPSLAB_STORE", s);
        }
        let mut child = cmd
            .args(args)
            .arg("--live=127.0.0.1:0")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let first = rx.recv_timeout(Duration::from_secs(20)).expect("a first line on stderr");
        let url = first
            .split("live page at ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .unwrap_or_else(|| panic!("no URL in {first:?}"))
            .to_string();
        LiveRun { child, url, stderr: rx }
    }

    /// Exit code, stdout, stderr (after the first line).
    fn wait(mut self) -> (Option<i32>, String, String) {
        let mut out = String::new();
        self.child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        let status = self.child.wait().unwrap();
        let err: Vec<String> = self.stderr.try_iter().collect();
        (status.code(), out, err.join("\n"))
    }
}

fn get(url: &str, path: &str) -> (String, String) {
    let addr = url.trim_start_matches("http://").trim_end_matches('/');
    get_as(addr, addr, path)
}

/// A GET naming `host` in its Host header.
fn get_as(addr: &str, host: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (head.to_string(), body.to_string())
}

fn shot(b: &mut Browser, name: &str) {
    if let Ok(dir) = std::env::var("QPSLAB_SCREENSHOTS") {
        b.screenshot(&std::path::Path::new(&dir).join(name));
    }
}

fn number(s: &str) -> u64 {
    s.trim().parse().unwrap_or_else(|_| panic!("not a number: {s:?}"))
}

/// The tab opened mid-run shows a p99 and numbers that move the next second; a second client
/// that comes and goes and a POST change nothing; after the run the tab shows the end, the
/// report (the same HTML as `qpslab report`) and the run's own totals; no console error.
#[test]
fn a_live_page_follows_a_load_and_shows_its_end() {
    let server = ServeChild::start(&[], &["-w", "1"]);
    let url = server.url("/");
    let run = LiveRun::start(&["load", &url, "-d", "5", "-c", "10", "-R", "2000", "--json"], None);
    let mut b = Browser::start(1280, 1000);
    b.open(&run.url);
    b.wait_for("+document.getElementById('ok').textContent > 0", Duration::from_secs(10));
    b.wait_for("document.getElementById('p99-second').textContent != '-'", Duration::from_secs(5));
    let ok1 = number(&b.text("ok"));
    let p99 = b.text("p99-second");
    assert!(p99.ends_with("ms") || p99.ends_with("\u{b5}s"), "{p99}");
    // Another client comes and goes mid-stream; a write is refused.
    let mut other =
        TcpStream::connect(run.url.trim_start_matches("http://").trim_end_matches('/')).unwrap();
    write!(other, "GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut first = [0u8; 64];
    let _ = other.read(&mut first).unwrap();
    drop(other);
    let (head, _) = {
        let addr = run.url.trim_start_matches("http://").trim_end_matches('/');
        let mut s = TcpStream::connect(addr).unwrap();
        write!(s, "POST /state HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n").unwrap();
        let mut t = String::new();
        s.read_to_string(&mut t).unwrap();
        t.split_once("\r\n\r\n").map(|(h, b)| (h.to_string(), b.to_string())).unwrap()
    };
    assert!(head.starts_with("HTTP/1.1 405"), "{head}");
    // The next second's figures (a second apart; within three on a busy machine).
    b.wait_for(
        &format!("+document.getElementById('ok').textContent > {ok1}"),
        Duration::from_secs(3),
    );
    let rows = b.eval("document.querySelectorAll('#pct-run td').length");
    assert_eq!(rows, 7, "the run's percentiles so far");
    // 2,000 a second, kept: the schedule's card says so (the load's own line below agrees).
    assert_eq!(b.text("sched"), "on schedule");
    let what = b.text("sched-what");
    let asked = what.trim_start_matches("asked ").split('/').next().unwrap();
    assert!((1800..=2200).contains(&number(asked)), "{what}");
    shot(&mut b, "live-load.png");

    b.wait_for("document.getElementById('phase').textContent == 'ended'", Duration::from_secs(15));
    b.wait_for("document.getElementById('report-link').className == ''", Duration::from_secs(5));
    let report =
        b.eval_async("fetch(document.getElementById('report-link').href).then(r => r.text())");
    let report = report.as_str().unwrap();
    assert!(report.contains("<h1>qpslab: 1 run(s)</h1>") && report.contains("id=\"per-second\""));
    let shown_ok = number(&b.text("ok"));
    let (code, out, err) = run.wait();
    assert_eq!(code, Some(0), "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown_ok, v["requests"]["ok"].as_u64().unwrap(), "the page's total is the run's");
    assert!(b.text("summary").starts_with(&format!("{} requests", v["requests"]["completed"])));
    b.drain();
    assert!(b.errors.is_empty(), "{:?}", b.errors);
}

/// An open loop that cannot keep its schedule (200 a second asked of two connections to a
/// server answering in 50 ms: 40 a second at most): the page says BEHIND, in red, with the
/// requests due and unsent, while the run goes on.
#[test]
fn a_live_page_says_when_an_open_loop_falls_behind() {
    let server = ServeChild::start(&[], &["-w", "1"]);
    let url = server.url("/?t=50");
    let run = LiveRun::start(&["load", &url, "-d", "4", "-c", "2", "-R", "200", "--json"], None);
    let mut b = Browser::start(1280, 1000);
    b.open(&run.url);
    b.wait_for("document.getElementById('sched').textContent == 'BEHIND'", Duration::from_secs(10));
    assert_eq!(b.eval("document.getElementById('sched-card').className"), "card hot");
    // The rate asked is known from the second second on (a rate needs two readings).
    b.wait_for(
        "document.getElementById('sched-what').textContent.startsWith('asked ')",
        Duration::from_secs(5),
    );
    let what = b.text("sched-what");
    let unsent = what.rsplit(", ").next().unwrap().trim_end_matches(" due unsent");
    assert!(what.starts_with("asked ") && number(unsent) > 0, "{what}");
    let (code, out, err) = run.wait();
    assert_eq!(code, Some(0), "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["rate"]["kept"], false, "the run's own verdict agrees: {}", v["rate"]);
    b.drain();
    assert!(b.errors.is_empty(), "{:?}", b.errors);
}

/// A load over two local agents: the page lists both agents, running then done, and the
/// merged seconds.
#[test]
fn a_live_page_shows_each_agent() {
    let server = ServeChild::start(&[], &["-w", "1"]);
    let url = server.url("/");
    let args = ["load", "--agents", "local,local", &url, "-d", "6", "-c", "8", "-R", "3000"];
    let run = LiveRun::start(&args, None);
    let mut b = Browser::start(1280, 1200);
    b.open(&run.url);
    b.wait_for(
        "[...document.querySelectorAll('#agents tbody tr td:nth-child(2)')].filter(t => t.textContent == 'running').length == 2",
        Duration::from_secs(20),
    );
    b.wait_for(
        "document.getElementById('pct-second').textContent.includes('(2)')",
        Duration::from_secs(5),
    );
    shot(&mut b, "live-agents.png");
    b.wait_for("document.getElementById('phase').textContent == 'ended'", Duration::from_secs(20));
    let states = b.eval("[...document.querySelectorAll('#agents tbody tr td:nth-child(2)')].map(t => t.textContent)");
    assert_eq!(states, serde_json::json!(["done", "done"]));
    let (code, _, err) = run.wait();
    assert_eq!(code, Some(0), "{err}");
    b.drain();
    assert!(b.errors.is_empty(), "{:?}", b.errors);
}

/// A sweep file of two connection counts, once each, and a store beside it.
pub fn connections_sweep(
    dir: &std::path::Path,
    name: &str,
    duration: &str,
    conns: [u32; 2],
) -> (std::path::PathBuf, std::path::PathBuf) {
    let file = dir.join("conns.toml");
    let [a, b] = conns;
    let text = format!(
        "name = \"{name}\"\nrepeat = 1\n[base]\nduration = \"{duration}\"\nwarmup = \"200ms\"\n\
         [axes]\nconnections = [{a}, {b}]\n"
    );
    std::fs::write(&file, text).unwrap();
    (file, dir.join("runs.sqlite"))
}

/// A sweep: the table fills in variant by variant, each run stored, the current run charted.
#[test]
fn a_live_page_fills_in_a_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let (file, store) = connections_sweep(dir.path(), "connections", "3s", [4, 16]);
    let run = LiveRun::start(&["sweep", file.to_str().unwrap()], Some(&store));
    let mut b = Browser::start(1280, 1300);
    b.open(&run.url);
    b.wait_for("document.querySelectorAll('#sweep tbody tr').length >= 1", Duration::from_secs(30));
    b.wait_for(
        "document.querySelectorAll('#sweep tbody tr').length == 2 && document.getElementById('pct-second').textContent.includes('(2)')",
        Duration::from_secs(30),
    );
    shot(&mut b, "live-sweep.png");
    b.wait_for("document.getElementById('phase').textContent == 'ended'", Duration::from_secs(30));
    let states = b.eval(
        "[...document.querySelectorAll('#sweep tbody tr td:nth-child(4)')].map(t => t.textContent)",
    );
    assert_eq!(states, serde_json::json!(["stored", "stored"]));
    let (code, _, err) = run.wait();
    assert_eq!(code, Some(0), "{err}");
    b.drain();
    assert!(b.errors.is_empty(), "{:?}", b.errors);
}

/// A climb: each state's runs fill the table, each measured step appears as a note as it is
/// decided, and at the end the page's report link serves the climb's staircase. What the climb
/// decides depends on the machine's load (this binary's other tests and the browser run beside
/// it: on a host busy with other work the doctor names that, and the climb measures nothing);
/// the page is checked against the climb's own JSON, step by step.
#[test]
fn a_live_page_fills_in_a_climb() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    let server = ServeChild::start(&[], &["-w", "1", "--cpus", "0"]);
    let url = server.url("/?t=20");
    let args =
        ["climb", "--json", "-c", "1", "-d", "1s", "--warmup", "200ms", "--budget", "40s", &url];
    let run = LiveRun::start(&args, Some(&store));
    let mut b = Browser::start(1280, 1300);
    b.open(&run.url);
    b.wait_for("document.querySelectorAll('#sweep tbody tr').length >= 3", Duration::from_secs(30));
    b.wait_for("document.getElementById('phase').textContent == 'ended'", Duration::from_secs(90));
    shot(&mut b, "live-climb.png");
    let notes = b.text("notes");
    let variants = b.eval(
        "[...new Set([...document.querySelectorAll('#sweep tbody tr td:nth-child(2)')].map(t => t.textContent))]",
    );
    b.wait_for("document.getElementById('report-link').className == ''", Duration::from_secs(5));
    let report =
        b.eval_async("fetch(document.getElementById('report-link').href).then(r => r.text())");
    let report = report.as_str().unwrap().to_string();
    let (code, out, err) = run.wait();
    assert_eq!(code, Some(0), "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(variants[0], "start", "{variants}");
    let steps = v["steps"].as_array().unwrap();
    assert!(!steps.is_empty(), "{v:#}");
    let mut kept = 0;
    for (i, s) in steps.iter().enumerate() {
        let verdict = s["verdict"].as_str().unwrap();
        if verdict != "kept" && verdict != "reverted" {
            continue;
        }
        kept += usize::from(verdict == "kept");
        let change = s["change"].as_str().unwrap();
        let line = format!("step {}: {change}: {verdict}", i + 1);
        assert!(notes.contains(&line), "{line:?} in the notes {notes:?}");
        let state = format!("step {}: {change}", i + 1);
        assert!(variants.as_array().unwrap().iter().any(|x| x == &state), "{state} in {variants}");
    }
    // The report: the staircase, a dot per state measured, a green one per kept step.
    assert!(report.contains("<svg id=\"staircase\""), "{}", &report[..report.len().min(2000)]);
    assert_eq!(report.matches("class=\"stair-current\"").count(), steps.len(), "{v:#}");
    assert_eq!(report.matches("class=\"stair-kept\"").count(), kept, "{v:#}");
    b.drain();
    assert!(b.errors.is_empty(), "{:?}", b.errors);
}

/// `/metrics` mid-run: Prometheus' text format with the run's labels.
#[test]
fn metrics_are_served_beside_the_page() {
    let server = ServeChild::start(&[], &["-w", "1"]);
    let url = server.url("/");
    let run = LiveRun::start(&["load", &url, "-d", "3", "-c", "4", "-R", "2000"], None);
    std::thread::sleep(Duration::from_millis(2200));
    let (head, body) = get(&run.url, "/metrics");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    // A name that is not this machine's (DNS rebinding) is refused.
    let addr = run.url.trim_start_matches("http://").trim_end_matches('/');
    let (refused, _) = get_as(addr, "rebound.example:80", "/metrics");
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    for needle in [
        "# TYPE qpslab_requests_total counter",
        "# TYPE qpslab_request_duration_seconds histogram",
        "qpslab_request_duration_seconds_bucket{",
        "le=\"+Inf\"",
        "qpslab_connections_open{",
        "qpslab_generator_busy_ratio{",
        &format!("target=\"{url}\",agent=\"local\""),
    ] {
        assert!(body.contains(needle), "{needle} in {body}");
    }
    let (code, _, err) = run.wait();
    assert_eq!(code, Some(0), "{err}");
}

/// An HTTP/3 run's `/metrics` carries QUIC's own figures: the datagrams each way and the
/// packets lost, per agent; its page shows the datagrams a second each way and the packets
/// lost on a card of their own. A run over TCP has none of them.
#[test]
fn metrics_of_an_http3_run_carry_its_datagrams() {
    let server = ServeChild::start(&[], &["-w", "1", "--tls-self-signed", "--h3"]);
    let url = format!("https://{}/", server.addr);
    let started = std::time::Instant::now();
    let run =
        LiveRun::start(&["load", "--h3", "-k", &url, "-d", "3", "-c", "2", "-R", "2000"], None);
    let mut b = Browser::start(1280, 1000);
    b.open(&run.url);
    b.wait_for("document.getElementById('quic').textContent != '-'", Duration::from_secs(10));
    assert_eq!(b.eval("document.getElementById('quic-card').className"), "card");
    let shown = b.text("quic");
    let (inbound, outbound) = shown.split_once(" / ").unwrap_or_else(|| panic!("{shown}"));
    // 2,000 requests a second, each a datagram or more each way (the page writes 12.3k).
    for n in [inbound, outbound] {
        let v: f64 = match n.strip_suffix('k') {
            Some(k) => k.parse::<f64>().unwrap() * 1000.0,
            None => number(n) as f64,
        };
        assert!(v >= 500.0, "{shown}");
    }
    assert!(b.text("quic-what").ends_with(" 0 packets lost"), "{}", b.text("quic-what"));
    // Two seconds into the run, whatever the browser took.
    std::thread::sleep(Duration::from_millis(2200).saturating_sub(started.elapsed()));
    let (_, body) = get(&run.url, "/metrics");
    let value = |prefix: &str| -> f64 {
        let line = body
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("{prefix} in {body}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(body.contains("# TYPE qpslab_quic_datagrams_total counter"), "{body}");
    assert!(value("qpslab_quic_datagrams_total{") > 1000.0, "{body}");
    assert!(body.contains("direction=\"out\""), "{body}");
    assert!(body.contains("# TYPE qpslab_quic_lost_packets_total counter"), "{body}");
    let (code, _, err) = run.wait();
    assert_eq!(code, Some(0), "{err}");
    let tcp = ServeChild::start(&[], &["-w", "1"]);
    let run = LiveRun::start(&["load", &tcp.url("/"), "-d", "2", "-c", "2", "-R", "500"], None);
    b.open(&run.url);
    b.wait_for("+document.getElementById('ok').textContent > 0", Duration::from_secs(10));
    assert_eq!(b.eval("document.getElementById('quic-card').className"), "card hidden");
    let (_, body) = get(&run.url, "/metrics");
    assert!(!body.contains("qpslab_quic_"), "{body}");
    let (code, _, err) = run.wait();
    assert_eq!(code, Some(0), "{err}");
}

/// A gRPC run whose server answers UNAVAILABLE: the page's failed card names the status,
/// and `/metrics` counts the calls by status code.
#[test]
fn a_grpc_runs_statuses_are_on_the_page_and_in_the_metrics() {
    let server = ServeChild::start(&[], &["-w", "1"]);
    let url = server.url("");
    let args = ["load", "--grpc", "a.B/C", "-H", "qpslab-grpc-status: 14", &url];
    let run = LiveRun::start(&[&args[..], &["-d", "3", "-c", "2", "-R", "500"]].concat(), None);
    let mut b = Browser::start(1280, 1000);
    b.open(&run.url);
    b.wait_for("+document.getElementById('failed').textContent > 0", Duration::from_secs(10));
    b.wait_for(
        "document.getElementById('errors').textContent.startsWith('UNAVAILABLE ')",
        Duration::from_secs(5),
    );
    assert_eq!(b.text("ok"), "0");
    let (_, body) = get(&run.url, "/metrics");
    assert!(body.contains("# TYPE qpslab_grpc_calls_total counter"), "{body}");
    let count = |code: &str| -> f64 {
        let line = body
            .lines()
            .find(|l| l.starts_with("qpslab_grpc_calls_total{") && l.contains(code))
            .unwrap_or_else(|| panic!("{code} in {body}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(count("code=\"UNAVAILABLE\"") > 0.0, "{body}");
    assert_eq!(count("code=\"OK\""), 0.0, "{body}");
    let (code, _, err) = run.wait();
    assert_eq!(code, Some(1), "every call failed: {err}");
    b.drain();
    assert!(b.errors.is_empty(), "{:?}", b.errors);
}

/// A taken address or a bad URL is refused before any load (exit 2, one line naming the flag).
#[test]
fn a_taken_address_or_a_bad_url_is_refused_at_start() {
    let server = ServeChild::start(&[], &["-w", "1"]);
    let url = server.url("/");
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let live = format!("--live={addr}");
    super::usage_error(&["load", &url, "-d", "1", &live], "--live");
    super::usage_error(&["load", &url, "-d", "1", "--live=nowhere"], "--live");
    super::usage_error(
        &["load", &url, "-d", "1", "--prometheus-rw", "127.0.0.1:9090"],
        "--prometheus-rw",
    );
    super::usage_error(&["bench", "-d", "1", &live], "--live");
}

/// `--live-linger` keeps the page up after the run; Ctrl-C ends the linger at once, and the
/// run's result stands (exit 0).
#[test]
fn ctrl_c_ends_the_linger() {
    let server = ServeChild::start(&[], &["-w", "1"]);
    let url = server.url("/");
    let run =
        LiveRun::start(&["load", &url, "-n", "2000", "-c", "4", "--live-linger", "60s"], None);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (_, body) = get(&run.url, "/state");
        if serde_json::from_str::<Value>(&body).unwrap()["end"].is_object() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the run did not end");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Still lingering: the page answers.
    std::thread::sleep(Duration::from_millis(300));
    assert!(get(&run.url, "/metrics").0.starts_with("HTTP/1.1 200"));
    // SAFETY: kill(2) on our own child's PID.
    unsafe { libc::kill(run.child.id() as i32, libc::SIGINT) };
    let t = std::time::Instant::now();
    let (code, _, err) = run.wait();
    assert_eq!(code, Some(0), "{err}");
    assert!(t.elapsed() < Duration::from_secs(3), "the linger ended at Ctrl-C: {:?}", t.elapsed());
}
