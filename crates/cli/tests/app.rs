//! Real applications: a server that answers in milliseconds and queues, as the applications
//! users point a load tool at do. Each test compares what qpslab reports with what the server
//! itself counted.
//!
//! A test binary of its own, one test at a time: the servers' rates are their ground truth and
//! must not share the CPUs with another test's load.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

#[path = "common/mod.rs"]
mod common;

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{free_port, json_of, qpslab_command};
use serde_json::Value;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One worker that serves the requests of every connection in arrival order, `argv[2]` ms
/// each (a sleep, as a database call is), and appends the wall-clock time of each answer to
/// the file `argv[3]`: the server's own count, to hold the load's figures against. Its rate is
/// 1000 / ms answers a second whatever the connections. [`common::QUEUE_READER`] completes it.
const FIXED_SERVICE: &str = r#"
import queue, selectors, socket, sys, threading, time
port, ms, log = int(sys.argv[1]), float(sys.argv[2]), open(sys.argv[3], 'w', buffering=1)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', port)); s.listen(1024)
work = queue.Queue()
def worker():
    while True:
        c = work.get()
        time.sleep(ms / 1000)
        try:
            c.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok')
            log.write('%.6f\n' % time.time())
        except OSError:
            pass
threading.Thread(target=worker, daemon=True).start()
print('ready', flush=True)
"#;

/// [`FIXED_SERVICE`] on a free port, `ms` per answer; killed on drop.
struct FixedService {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl FixedService {
    fn start(ms: f64) -> FixedService {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("answers");
        let port = free_port();
        let mut child = Command::new("python3")
            .args(["-c", &format!("{FIXED_SERVICE}{}", common::QUEUE_READER)])
            .args([&port.to_string(), &ms.to_string()])
            .arg(&log)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let mut ready = String::new();
        let out = child.stdout.take().unwrap();
        std::io::BufReader::new(out).read_line(&mut ready).unwrap();
        assert_eq!(ready.trim(), "ready");
        FixedService { child, port, log, _dir: dir }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    /// Answers the server wrote between `from` and `to` (seconds since the epoch).
    fn answered_between(&self, from: f64, to: f64) -> usize {
        let text = std::fs::read_to_string(&self.log).unwrap();
        text.lines().filter_map(|l| l.parse::<f64>().ok()).filter(|t| *t >= from && *t < to).count()
    }

    /// Waits until the server has answered everything queued (no answer for 3 service times).
    fn settle(&self, ms: f64) {
        let quiet = Duration::from_secs_f64(3.0 * ms / 1000.0).max(Duration::from_millis(50));
        let mut last = 0;
        for _ in 0..200 {
            std::thread::sleep(quiet);
            let n = std::fs::metadata(&self.log).map_or(0, |m| m.len());
            if n == last {
                return;
            }
            last = n;
        }
    }
}

impl Drop for FixedService {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The measured window of a `load --json` run, in seconds since the epoch: from the end of
/// its warm-up, for its duration.
fn window(v: &Value) -> (f64, f64) {
    let started = v["started_at"].as_str().unwrap();
    let started = humantime::parse_rfc3339(started).unwrap();
    let t0 = started.duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    let from = t0 + v["config"]["warmup_s"].as_f64().unwrap();
    (from, from + v["duration_s"].as_f64().unwrap())
}

/// The warm-up's ground truth: against one worker that takes 4 ms an answer (250 a second),
/// the rate `load` reports is within 1% of the server's own count of answers in the window,
/// whatever the warm-up (none, under one latency, several latencies) and the connections (1,
/// 10, 100: latencies from 4 to 400 ms). Counting only requests sent in the window lost one
/// response a connection: 100 of 500 at 100 connections.
#[test]
fn the_rate_after_a_warmup_is_the_servers_own_count() {
    let _one = one_at_a_time();
    let ms = 4.0;
    let server = FixedService::start(ms);
    let cases: [(u32, &[&str]); 3] = [
        (1, &["0s", "3ms", "12ms"]),
        (10, &["0s", "30ms", "120ms"]),
        (100, &["0s", "300ms", "1200ms"]),
    ];
    let mut runs = 0;
    for (c, warmups) in cases {
        for warmup in warmups {
            let io = if runs % 2 == 0 { "epoll" } else { "uring" };
            runs += 1;
            let started = SystemTime::now();
            let out = qpslab_command()
                .args(["load", "--json", "-t", "1", "-c", &c.to_string(), "-d", "2s"])
                .args(["--warmup", warmup, "--io", io, &server.url()])
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
            let v = json_of(&out);
            server.settle(ms);
            let (from, to) = window(&v);
            let truth = server.answered_between(from, to) as f64;
            let q = &v["requests"];
            let ok = q["ok"].as_u64().unwrap() as f64;
            let what = format!("-c {c} --warmup {warmup} --io {io}: {q} truth {truth}");
            // 500 at its rate; fewer when Python's sleeps ran long on a busy machine.
            assert!(truth > 250.0, "the server ran: {what}");
            assert!((ok - truth).abs() <= truth * 0.01, "{what}");
            let rate = v["throughput_rps"].as_f64().unwrap();
            let true_rate = truth / (to - from);
            assert!((rate - true_rate).abs() <= true_rate * 0.01, "{rate} vs {true_rate}: {what}");
            // The accounting is exact, with the warm-up's requests carried into the window.
            let n = |k: &str| q[k].as_u64().unwrap();
            assert_eq!(n("sent"), n("completed") + n("failed") + n("in_flight_at_stop"), "{what}");
            if *warmup == "0s" {
                assert_eq!(n("from_warmup"), 0, "{what}");
            } else {
                // Connections had a request out when the window opened (one each at most:
                // a connection between a response and its next request had none, which a
                // lone connection can be: 0 of 1 in a CI run).
                let least = u64::from(c > 1);
                assert!((least..=u64::from(c)).contains(&n("from_warmup")), "{what}");
            }
            assert!(started.elapsed().unwrap() < Duration::from_secs(10), "{what}");
        }
    }
}

/// A Flask application under gunicorn (`workers` sync workers; `/slow` sleeps 15 ms as a
/// database call does, `/` answers at once) behind nginx as a reverse proxy, each on a free
/// port: what users most often point a load tool at. nginx logs each answer's wall-clock time
/// and status. Both are stopped on drop (gunicorn by SIGQUIT, its quick shutdown; nginx by
/// SIGTERM, which takes its workers with it).
struct AppBehindNginx {
    gunicorn: Child,
    nginx: Child,
    dir: tempfile::TempDir,
    port: u16,
}

const FLASK_APP: &str = "import time\nfrom flask import Flask\napp = Flask(__name__)\n\
    @app.route('/slow')\ndef slow():\n    time.sleep(0.015)\n    return 'ok'\n\
    @app.route('/')\ndef fast():\n    return 'ok'\n";

impl AppBehindNginx {
    fn start(workers: u32) -> AppBehindNginx {
        Self::start_with(&["-w", &workers.to_string()])
    }

    /// With gunicorn's own arguments (`-c FILE`: its configuration file).
    fn start_with(args: &[&str]) -> AppBehindNginx {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("app.py"), FLASK_APP).unwrap();
        let (port, app_port) = (free_port(), free_port());
        let gunicorn = Command::new("gunicorn")
            .args(args)
            .args(["-b", &format!("127.0.0.1:{app_port}")])
            .arg("--chdir")
            .arg(d)
            .arg("app:app")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("gunicorn (scripts/test installs it)");
        let conf = format!(
            "worker_processes 1;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  log_format t '$msec $status';\n  access_log {d}/access.log t;\n\
             server {{ listen 127.0.0.1:{port};\n\
             location / {{ proxy_pass http://127.0.0.1:{app_port}; }} }}\n}}\n",
            d = d.display()
        );
        std::fs::write(d.join("nginx.conf"), conf).unwrap();
        let nginx = Command::new("nginx")
            .arg("-p")
            .arg(d)
            .arg("-c")
            .arg(d.join("nginx.conf"))
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx (scripts/test installs nginx-light)");
        let app = AppBehindNginx { gunicorn, nginx, dir, port };
        app.wait_answering();
        app
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Until the application answers through nginx (gunicorn takes a second to start).
    fn wait_answering(&self) {
        use std::io::{Read, Write};
        for _ in 0..100 {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
                let mut got = String::new();
                let _ = s.read_to_string(&mut got);
                if got.starts_with("HTTP/1.1 200") {
                    let _ = std::fs::write(self.dir.path().join("access.log"), "");
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the application did not answer through nginx on {}", self.port);
    }

    /// nginx's answers of `status` logged between `from` and `to` (seconds since the epoch).
    fn logged_between(&self, status: &str, from: f64, to: f64) -> usize {
        let log = std::fs::read_to_string(self.dir.path().join("access.log")).unwrap();
        log.lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(t, s)| *s == status && t.parse::<f64>().is_ok_and(|t| t >= from && t < to))
            .count()
    }
}

impl Drop for AppBehindNginx {
    fn drop(&mut self) {
        for (child, sig) in [(&mut self.nginx, "-TERM"), (&mut self.gunicorn, "-QUIT")] {
            let _ = Command::new("kill").args([sig, &child.id().to_string()]).status();
            for _ in 0..100 {
                if child.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(30));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The warm-up's replay against a real application: 100 connections to a Flask route of
/// 15 ms under one gunicorn worker, behind nginx, 1 s of warm-up. The rate is nginx's own
/// count of answers in the window (it was 28 a second where nginx logged 62: every response to
/// a request of the warm-up was dropped, and at 1.6 s a response, that was most of them).
#[test]
fn an_application_behind_nginx_is_counted_as_nginx_logs_it() {
    let _one = one_at_a_time();
    let app = AppBehindNginx::start(1);
    let out = qpslab_command()
        .args(["load", "--json", "-c", "100", "-d", "3s", "--warmup", "1s", &app.url("/slow")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json_of(&out);
    let (from, to) = window(&v);
    let truth = app.logged_between("200", from, to) as f64;
    let ok = v["requests"]["ok"].as_f64().unwrap();
    assert!(truth > 100.0, "the application ran: {truth}");
    // An answer logged at an edge of the window reaches the generator a moment later.
    assert!((ok - truth).abs() <= 2.0_f64.max(truth * 0.01), "ok {ok}, nginx logged {truth}");
    assert_eq!(v["requests"]["from_warmup"], 100, "{}", v["requests"]);
}

/// An open loop the application cannot keep (1,000 a second asked of one 4 ms worker, 10
/// connections): bench says it fell behind and who set the pace, in the throughput line, the
/// rate's explanation and a finding; it never says the rate is what was asked (it did, while
/// its own JSON said 2,823 of 4,000 a second).
#[test]
fn an_open_loop_the_application_cannot_keep_is_said_to_fall_behind() {
    let _one = one_at_a_time();
    let server = FixedService::start(4.0);
    let args = ["bench", "-R", "1000", "-c", "10", "-d", "2s", "--warmup", "300ms", "--no-save"];
    let out = qpslab_command().args(args).arg("--json").arg(server.url()).output().unwrap();
    let v = json_of(&out);
    common::show(&v);
    let f = v["doctor"]["findings"].as_array().unwrap();
    assert!(f.iter().all(|x| x["name"] != "paced"), "{f:#?}");
    let behind = f.iter().find(|x| x["name"] == "behind-schedule").expect("behind-schedule");
    assert_eq!(behind["severity"], "warning");
    let summary = behind["summary"].as_str().unwrap();
    assert!(summary.contains("where 1000 a second were asked"), "{summary}");
    assert!(summary.contains("the load's connections (every one busy"), "{summary}");
    server.settle(4.0);
    let out = qpslab_command().args(args).arg(server.url()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("BEHIND ITS SCHEDULE: 1000 a second asked"), "{text}");
    assert!(text.contains("the schedule was not met"), "{text}");
    assert!(!text.contains("the rate is what was asked"), "{text}");
}

/// Runs poison the next one no more: a run of 100 connections against one gunicorn worker
/// ends with ~100 requests queued (1.6 s of its work; nginx logs them 499). bench waits after
/// its run until a probe answers in the application's normal time, and says how long; a bench
/// right after it then measures the application (60 a second at one connection; it measured
/// 12 a second with a max of 1.6 s, the backlog). A backlog some other load left is waited
/// for before the run, and said.
#[test]
fn a_bench_waits_for_the_application_to_drain() {
    let _one = one_at_a_time();
    let app = AppBehindNginx::start(1);
    let bench = |c: &str| {
        let out = qpslab_command()
            .args(["bench", "-c", c, "-d", "1s", "--warmup", "0s", "--no-save", "--json"])
            .arg(app.url("/slow"))
            .output()
            .unwrap();
        json_of(&out)
    };
    let first = bench("100");
    let after = &first["drain_after"];
    assert_eq!(after["drained"], true, "{after}");
    let waited = after["waited_s"].as_f64().unwrap();
    assert!((0.8..5.0).contains(&waited), "the backlog was about 1.6 s of work: {after}");
    let next = bench("1");
    let before = &next["drain_before"];
    assert!(before["waited_s"].as_f64().unwrap() < 0.3, "drained already: {before}");
    let rps = next["load"]["throughput_rps"].as_f64().unwrap();
    let max_ms = next["load"]["latency_us"]["max"].as_f64().unwrap() / 1e3;
    assert!(rps > 45.0 && max_ms < 200.0, "{rps} req/s, max {max_ms} ms");
    // A load that does not drain, then a bench: the bench waits before its run, and says so.
    let out = qpslab_command()
        .args(["load", "-c", "100", "-d", "1s", &app.url("/slow")])
        .output()
        .unwrap();
    // Most of its connections got no answer in so short a window: its check fails (exit 1).
    assert!(matches!(out.status.code(), Some(0 | 1)), "{out:?}");
    let out = qpslab_command()
        .args(["bench", "-c", "1", "-d", "1s", "--warmup", "0s", "--no-save"])
        .arg(app.url("/slow"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("drain ")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("before the run: waited"), "{line}");
    assert!(line.contains("an earlier load's queued requests"), "{line}");
    assert!(text.contains("p99.9"), "{text}");
}

/// The application behind the proxy is part of the server: bench at nginx's URL follows
/// gunicorn too (nginx's proxy_pass names its address), counts its CPU as the server's and
/// never calls it other work: the headline is never `cpu-contention` (it was `cpu-contention:
/// ... above all gunicorn`, with the remedy "stop the other work", and requests per server
/// CPU-second counted nginx alone). One sync worker answering `/` at once is near its CPU
/// here, on CPUs it shares with the generator: the headline is the server or the sharing.
#[test]
fn the_application_behind_nginx_is_part_of_the_server() {
    let _one = one_at_a_time();
    let app = AppBehindNginx::start(1);
    let out = qpslab_command()
        .args(["bench", "-c", "10", "-d", "2s", "--warmup", "300ms", "--no-save", "--json"])
        .arg(app.url("/"))
        .output()
        .unwrap();
    let v = json_of(&out);
    let path = v["target"]["path"].as_array().unwrap_or_else(|| panic!("no path: {v:#}"));
    assert_eq!(path.len(), 1, "{path:?}");
    assert_eq!(path[0]["comm"], "gunicorn", "{path:?}");
    assert_eq!(path[0]["found_by"], "nginx proxy_pass", "{path:?}");
    let gunicorn: Vec<u64> =
        path[0]["pids"].as_array().unwrap().iter().map(|p| p.as_u64().unwrap()).collect();
    assert_eq!(gunicorn.len(), 2, "master and worker: {path:?}");
    let procs = v["doctor"]["summary"]["processes"].as_array().unwrap();
    let cpu_of = |pred: &dyn Fn(&Value) -> bool| -> f64 {
        procs.iter().filter(|p| pred(p)).map(|p| p["cpu"].as_f64().unwrap()).sum()
    };
    let app_cpu = cpu_of(&|p| gunicorn.contains(&p["pid"].as_u64().unwrap()));
    assert!(app_cpu > 0.3, "gunicorn followed as the server: {procs:#?}");
    assert!(procs.iter().all(|p| p["role"] == "server" || p["comm"] == "qpslab"), "{procs:#?}");
    let server_cpu = v["server_cpu"].as_f64().unwrap();
    let all = cpu_of(&|p| p["role"] == "server");
    assert!((server_cpu - all).abs() < 1e-6 && server_cpu > app_cpu, "{server_cpu} {all}");
    common::show(&v);
    let f = v["doctor"]["findings"].as_array().unwrap();
    for x in f {
        let text = format!("{} {}", x["summary"], x["evidence"]);
        assert!(!(x["name"] == "cpu-contention" && text.contains("gunicorn")), "{x:#}");
    }
    assert_ne!(f[0]["name"], "cpu-contention", "{f:#?}");
    let others = v["doctor"]["summary"]["others"].as_array().map_or(0, Vec::len);
    let named_other = (0..others)
        .any(|i| v["doctor"]["summary"]["others"][i]["comm"].as_str() == Some("gunicorn"));
    assert!(!named_other, "gunicorn is not other work: {:#}", v["doctor"]["summary"]["others"]);
    // The text says what is behind nginx.
    let out = qpslab_command()
        .args(["bench", "-c", "10", "-d", "1s", "--warmup", "0s", "--no-save"])
        .arg(app.url("/"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line =
        text.lines().find(|l| l.starts_with("behind it")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("gunicorn") && line.contains("from nginx proxy_pass"), "{line}");
}

/// Routes of an application: a pool of its URLs (`--urls`), and bench's summary has a line per
/// route, slowest first. A pool of whole URLs to a server other than bench's target is refused
/// before anything is measured (the load went there while the doctor watched the server bench
/// had started).
#[test]
fn a_pool_of_routes_is_summarised_route_by_route() {
    let _one = one_at_a_time();
    let app = AppBehindNginx::start(2);
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("routes.txt");
    std::fs::write(&pool, "/slow\n/\n").unwrap();
    let out = qpslab_command()
        .args(["bench", "-c", "4", "-d", "1s", "--warmup", "0s", "--no-save", "--urls"])
        .arg(&pool)
        .arg(app.url("/"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let routes: Vec<&str> = text.lines().filter(|l| l.starts_with("route ")).collect();
    assert_eq!(routes.len(), 2, "{text}");
    assert!(routes[0].starts_with("route       /slow: "), "slowest first: {routes:?}");
    assert!(routes.iter().all(|r| r.contains(" p99 ")), "{routes:?}");
    std::fs::write(&pool, format!("{}\n{}\n", app.url("/slow"), app.url("/"))).unwrap();
    let out = qpslab_command()
        .args(["bench", "-d", "1s", "--no-save", "--urls"])
        .arg(&pool)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--urls: ") && err.contains("not to the target bench examines"), "{err}");
    assert!(out.stdout.is_empty());
}

/// The climb against the commonest application: Flask under one gthread gunicorn worker of
/// one thread, behind nginx, its pool in the user's gunicorn.conf.py through a template
/// (`workers = {{workers}}`, `threads = {{threads}}`) and reloaded by SIGHUP. Each /slow answer
/// waits 15 ms as on a database. 32 connections leave a queue behind each run that the drain
/// waits out: no run starts on a busy application (the start measured 0 ok req/s at -c 100,
/// "fix the target first"). The app is the server (never other work, no cpu-contention); the
/// server waits, so after more connections gain nothing the climb doubles its threads, which
/// doubles the rate, and keeps it. At the end the user's file is back byte for byte.
#[test]
fn the_climb_gives_a_waiting_application_threads_through_its_template() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let (template, file) = (dir.path().join("gunicorn.tmpl"), dir.path().join("gunicorn.conf.py"));
    let pool = "worker_class = 'gthread'\nworkers = {{workers}}\nthreads = {{threads}}\n";
    std::fs::write(&template, pool).unwrap();
    let original = "worker_class = 'gthread'\nworkers = 1\nthreads = 1  # mine\n";
    std::fs::write(&file, original).unwrap();
    let app = AppBehindNginx::start_with(&["-c", file.to_str().unwrap()]);
    let reload = format!("kill -HUP {}", app.gunicorn.id());
    let config = format!("{}:{}", template.display(), file.display());
    let out = qpslab_command()
        .args(["climb", "--json", "--no-save", "-d", "1s", "--warmup", "300ms", "-c", "32"])
        .args(["--steps", "2", "--budget", "120s", "--apply-server", "-w", "1"])
        .args(["--server-config", &config, "--server-reload", &reload])
        .arg(app.url("/slow"))
        .output()
        .unwrap();
    let v = json_of(&out);
    assert_eq!(out.status.code(), Some(0), "{v:#}");
    assert!(v["start"]["rps"].as_f64().unwrap() > 30.0, "a drained start: {}", v["start"]);
    let steps = v["steps"].as_array().unwrap();
    let text = v.to_string();
    assert!(!text.contains("cpu-contention"), "the application is not other work: {v:#}");
    let threads =
        steps.iter().find(|s| s["knob"]["knob"] == "server-threads").unwrap_or_else(|| {
            let rows: Vec<String> = steps
                .iter()
                .map(|s| format!("{} {} {}", s["finding"], s["verdict"], s["why"]))
                .collect();
            panic!("a step of the server's threads; ended {}, steps {rows:#?}: {v:#}", v["ended"])
        });
    assert_eq!(threads["change"], "server threads per worker (its template) 1 -> 2", "{threads}");
    assert_eq!(threads["verdict"], "kept", "{threads}");
    let ratio = threads["ratio"].as_f64().unwrap();
    assert!((1.6..=2.3).contains(&ratio), "a second thread doubles a waiting app: {threads}");
    assert!(
        v["plan"].as_array().unwrap().iter().any(|p| p == "server: {{threads}} = 2"),
        "{}",
        v["plan"]
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), original, "the user's file back");
}
