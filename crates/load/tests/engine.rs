//! The load engine against real servers on loopback: nginx for exact counts, scripted servers
//! for every way a response can go wrong.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod support;

use std::io::Write;
use std::time::{Duration, Instant};

use qpslab_load::config::PollMode;
use qpslab_load::IoChoice;
use support::nginx::Nginx;
use support::scripted::{trickle, After, Scripted};
use support::{opts_on, run};

fn exact_request_count_matches_nginx_access_log(io: IoChoice) {
    let nginx = Nginx::start();
    let mut o = opts_on(io, &nginx.url("/"));
    o.requests = Some(20_000);
    o.connections = Some(10);
    o.threads = Some(2);
    let report = run(&o);
    assert_eq!(report.requests.completed, 20_000);
    assert_eq!(report.requests.ok, 20_000);
    assert_eq!(report.status.get("200"), Some(&20_000));
    let log = nginx.access_log(20_000);
    assert_eq!(log.len(), 20_000, "nginx saw exactly the requests we sent");
    // nginx closes a keep-alive connection after 1000 requests (keepalive_requests): with 10
    // connections and 20000 requests every connection is reopened at least once.
    assert!(report.connections.reconnects >= 10, "{:?}", report.connections);
    assert_eq!(report.errors.values().sum::<u64>(), 0);
}

fn status_counts_match_nginx_for_a_mix_of_200_and_404(io: IoChoice) {
    let nginx = Nginx::start();
    let mut o = opts_on(io, &nginx.url("/mix"));
    o.requests = Some(3000);
    o.max_error_rate = 1.0;
    let report = run(&o);
    let log = nginx.access_log(3000);
    assert_eq!(log.len(), 3000);
    let count = |code: &str| log.iter().filter(|l| l.starts_with(code)).count() as u64;
    let (n200, n404) = (count("200 "), count("404 "));
    assert!(n200 > 0 && n404 > 0, "the mix has both: {n200} {n404}");
    assert_eq!(report.status.get("200").copied().unwrap_or(0), n200);
    assert_eq!(report.status.get("404").copied().unwrap_or(0), n404);
    assert_eq!(report.requests.ok, n200);
    assert_eq!(report.requests.bad_status, n404);
    assert!(!report.check.passed || report.check.error_rate > 0.0);
}

fn accepted_status_counts_as_ok_and_passes_the_check(io: IoChoice) {
    let nginx = Nginx::start();
    let mut o = opts_on(io, &nginx.url("/404"));
    o.requests = Some(500);
    let failing = run(&o);
    assert_eq!(failing.requests.bad_status, 500);
    assert!(!failing.check.passed);
    o.accept_status = Some("404".into());
    let passing = run(&o);
    assert_eq!(passing.requests.ok, 500);
    assert!(passing.check.passed, "{:?}", passing.check);
}

fn one_kib_bodies_and_head_requests(io: IoChoice) {
    let nginx = Nginx::start();
    let mut o = opts_on(io, &nginx.url("/1k"));
    o.requests = Some(1000);
    let get = run(&o);
    assert_eq!(get.requests.ok, 1000);
    assert!(get.bytes.read >= 1000 * 1024, "{:?}", get.bytes);
    // HEAD responses carry Content-Length: 1024 but no body; a parser waiting for the body
    // would time out here.
    o.method = "HEAD".into();
    let head = run(&o);
    assert_eq!(head.requests.ok, 1000);
    assert!(head.bytes.read < 1000 * 1024, "{:?}", head.bytes);
    let log = nginx.access_log(2000);
    assert_eq!(log.iter().filter(|l| l.contains(" HEAD ")).count(), 1000);
}

fn post_body_reaches_the_server(io: IoChoice) {
    let server = Scripted::start(|_, s| {
        write(s, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        After::Continue
    });
    let mut o = opts_on(io, &server.url());
    o.requests = Some(100);
    o.method = "POST".into();
    o.body = Some(qpslab_load::options::Body("x".repeat(300).into_bytes()));
    let report = run(&o);
    assert_eq!(report.requests.ok, 100);
    assert_eq!(server.requests(), 100);
    assert_eq!(server.body_bytes(), 100 * 300);
}

fn duration_run_ends_on_time_and_warmup_is_excluded(io: IoChoice) {
    let nginx = Nginx::start();
    let mut o = opts_on(io, &nginx.url("/"));
    o.duration = Some(Duration::from_millis(800));
    o.warmup = Some(Duration::from_millis(400));
    let started = Instant::now();
    let report = run(&o);
    let wall = started.elapsed();
    assert!(wall >= Duration::from_millis(1200), "{wall:?}");
    assert!(wall < Duration::from_millis(2500), "{wall:?}");
    assert!((report.duration_s - 0.8).abs() < 0.2, "{}", report.duration_s);
    let log = nginx.access_log(0);
    // The server also answered the warm-up requests (and some in flight at stop).
    assert!(
        (log.len() as u64) > report.requests.completed,
        "log {} completed {}",
        log.len(),
        report.requests.completed
    );
    assert!(report.requests.completed > 0);
    // The first connects happened during warm-up; the ones measured are nginx's reconnects
    // after its keepalive_requests limit.
    assert_eq!(report.connections.connects, report.connections.reconnects);
}

/// The window counts every response that completes in it: the requests a warm-up left
/// outstanding are carried into it (counted as sent, and answered), and
/// `--exclude-warmup-latency` keeps their latency out while they still count in the rate.
fn warmup_requests_answered_in_the_window_count(io: IoChoice) {
    // 20 ms an answer: a request is out on every connection as the window opens.
    let server = Scripted::start(|_, s| {
        std::thread::sleep(Duration::from_millis(20));
        write(s, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        After::Continue
    });
    let mut o = opts_on(io, &server.url());
    o.connections = Some(8);
    o.duration = Some(Duration::from_millis(500));
    o.warmup = Some(Duration::from_millis(200));
    for exclude in [false, true] {
        o.exclude_warmup_latency = exclude;
        let cfg = qpslab_load::LoadConfig::from_options(&o).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let result = qpslab_load::run(&cfg, &stop, &mut qpslab_load::feed::Unwatched).unwrap();
        let rec = &result.rec;
        // Each connection had its one request out as the window opened.
        assert_eq!(rec.from_warmup, 8);
        assert_eq!(rec.failed, 0);
        let unmeasured = rec.completed - rec.latency.len();
        assert_eq!(unmeasured, if exclude { rec.from_warmup } else { 0 }, "exclude {exclude}");
        // The support's identities hold too.
        run(&o);
    }
}

/// The per-second rows add up to the run's totals exactly, the last row ending with the run
/// (they were sampled from the live progress a second apart on the wall clock: their sum
/// missed the tail after the last sample, 340,983 of 341,700 in one run).
fn per_second_rows_add_up_to_the_totals(io: IoChoice) {
    let nginx = Nginx::start();
    let mut o = opts_on(io, &nginx.url("/"));
    o.threads = Some(2);
    o.connections = Some(10);
    o.duration = Some(Duration::from_millis(2500));
    o.warmup = Some(Duration::from_millis(300));
    let report = run(&o);
    let rows = &report.intervals;
    let t: Vec<f64> = rows.iter().map(|r| r.t_s).collect();
    assert_eq!(t.len(), 3, "{t:?}");
    assert_eq!(&t[..2], &[1.0, 2.0]);
    assert!((t[2] - report.duration_s).abs() < 1e-9, "{t:?} {}", report.duration_s);
    let completed: u64 = rows.iter().map(|r| r.completed).sum();
    assert_eq!(completed, report.requests.completed);
    assert!(rows.iter().all(|r| r.completed > 0), "{rows:?}");

    // Failures too: every 10th request stalls past the timeout.
    let server = every_tenth_stalls();
    let mut o = opts_on(io, &server.url());
    o.duration = Some(Duration::from_millis(1500));
    o.timeout = Duration::from_millis(200);
    let report = run(&o);
    let rows = &report.intervals;
    assert_eq!(rows.iter().map(|r| r.failed).sum::<u64>(), report.requests.failed);
    assert_eq!(rows.iter().map(|r| r.completed).sum::<u64>(), report.requests.completed);
    assert!(report.requests.failed > 0);
}

fn write(stream: &mut std::net::TcpStream, bytes: &[u8]) {
    let _ = stream.write_all(bytes);
}

fn chunked_responses_written_a_few_bytes_at_a_time(io: IoChoice) {
    let server = Scripted::start(|_, s| {
        let body = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n";
        let _ = trickle(s, body, 3);
        After::Continue
    });
    let mut o = opts_on(io, &server.url());
    o.requests = Some(40);
    let report = run(&o);
    assert_eq!(report.requests.ok, 40);
    assert_eq!(server.requests(), 40);
    assert_eq!(report.requests.failed, 0, "{:?}", report.error_examples);
}

fn close_delimited_bodies_reconnect_transparently(io: IoChoice) {
    let server = Scripted::start(|_, s| {
        write(s, b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nbody until close");
        After::Close
    });
    let mut o = opts_on(io, &server.url());
    o.requests = Some(60);
    let report = run(&o);
    assert_eq!(report.requests.ok, 60, "{:?}", report.error_examples);
    assert_eq!(server.requests(), 60);
    assert_eq!(report.connections.connects, 60);
    assert_eq!(report.connections.reconnects, 60 - 4);
}

fn connection_close_header_reconnects_transparently(io: IoChoice) {
    let server = Scripted::start(|_, s| {
        write(s, b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok");
        After::Close
    });
    let mut o = opts_on(io, &server.url());
    o.requests = Some(50);
    let report = run(&o);
    assert_eq!(report.requests.ok, 50);
    assert_eq!(server.connections(), 50);
    assert_eq!(report.connections.reconnects, 50 - 4);
}

fn reset_after_request_counts_read_errors(io: IoChoice) {
    let server = Scripted::start(|_, _| After::Reset);
    let mut o = opts_on(io, &server.url());
    o.requests = Some(30);
    let report = run(&o);
    assert_eq!(report.errors["read"], 30, "{:?}", report.error_examples);
    assert_eq!(report.requests.failed, 30);
    // The first request on each of the 4 connections opened before the run met a reset on an
    // idle kept-alive connection, the close race: it went once more, on a new connection, and
    // failed there. Nothing is retried twice.
    assert_eq!(report.retries.closed_before_response, 4);
    assert_eq!(server.requests(), 34);
    assert_eq!(report.error_examples["read"], "connection reset by peer");
    assert!(!report.check.passed);
}

fn stalled_requests_time_out_at_expiry(io: IoChoice) {
    let server = Scripted::start(|_, _| After::Stall);
    let mut o = opts_on(io, &server.url());
    o.requests = Some(4);
    o.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let report = run(&o);
    let wall = started.elapsed();
    assert_eq!(report.errors["timeout"], 4);
    assert_eq!(report.error_examples["timeout"], "no response within 300ms");
    // Counted when the timeout expires, not whenever a late reply might come.
    assert!(wall >= Duration::from_millis(300), "{wall:?}");
    assert!(wall < Duration::from_millis(900), "{wall:?}");
}

/// A server that answers every request but each 10th, which it never answers.
fn every_tenth_stalls() -> Scripted {
    Scripted::start(|n, s| {
        if n % 10 == 9 {
            return After::Stall;
        }
        write(s, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        After::Continue
    })
}

fn some_stalls_in_a_timed_run(io: IoChoice) {
    // Every 10th request stalls: those time out, the rest complete, the run ends on time.
    let server = every_tenth_stalls();
    let mut o = opts_on(io, &server.url());
    o.duration = Some(Duration::from_millis(1000));
    o.timeout = Duration::from_millis(200);
    let started = Instant::now();
    let report = run(&o);
    assert!(started.elapsed() < Duration::from_millis(1800), "{:?}", started.elapsed());
    let stalled = server.requests() / 10;
    let r = &report.requests;
    assert!(report.errors["timeout"] > 0);
    // Every stalled request either timed out or was still in flight at stop.
    assert!(report.errors["timeout"] <= stalled, "{} > {stalled}", report.errors["timeout"]);
    assert!(report.errors["timeout"] + r.in_flight_at_stop >= stalled);
    assert_eq!(r.ok, r.completed);
}

fn garbage_status_lines_are_parse_errors(io: IoChoice) {
    let server = Scripted::start(|_, s| {
        write(s, b"HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n");
        After::Continue
    });
    let mut o = opts_on(io, &server.url());
    o.requests = Some(20);
    let report = run(&o);
    assert_eq!(report.errors["parse"], 20);
    assert_eq!(server.requests(), 20);
    assert!(report.error_examples["parse"].contains("invalid response head"));
}

fn eof_mid_body_is_a_read_error(io: IoChoice) {
    let server = Scripted::start(|_, s| {
        write(s, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly a few bytes");
        After::Close
    });
    let mut o = opts_on(io, &server.url());
    o.requests = Some(25);
    let report = run(&o);
    assert_eq!(report.errors["read"], 25);
    assert_eq!(report.error_examples["read"], "connection closed in the response body");
}

fn interim_responses_are_not_counted(io: IoChoice) {
    let server = Scripted::start(|_, s| {
        write(s, b"HTTP/1.1 100 Continue\r\n\r\n");
        std::thread::sleep(Duration::from_millis(2));
        write(s, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        After::Continue
    });
    let mut o = opts_on(io, &server.url());
    o.requests = Some(20);
    let report = run(&o);
    assert_eq!(report.requests.completed, 20);
    assert_eq!(report.status.len(), 1);
}

fn unreachable_target_fails_preflight_at_once(io: IoChoice) {
    let port = support::free_port();
    let cfg =
        qpslab_load::LoadConfig::from_options(&opts_on(io, &format!("http://127.0.0.1:{port}/")))
            .unwrap();
    let started = Instant::now();
    let err = qpslab_load::preflight(&cfg).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(err.to_string().contains("connection refused"), "{err}");
}

fn target_going_away_counts_connect_errors_with_backoff(io: IoChoice) {
    // Nothing listens: without preflight, every request fails to connect, and the backoff keeps
    // the failure rate bounded (about 100/s per connection).
    let port = support::free_port();
    let mut o = opts_on(io, &format!("http://127.0.0.1:{port}/"));
    o.duration = Some(Duration::from_millis(300));
    let report = run(&o);
    let connect = report.errors["connect"];
    assert!(connect > 0);
    assert!(connect < 4 * 60, "backoff limits retries: {connect}");
    assert_eq!(report.error_examples["connect"], "connection refused");
}

fn threads_are_pinned_to_the_listed_cpus(io: IoChoice) {
    let nginx = Nginx::start();
    let mut o = opts_on(io, &nginx.url("/"));
    o.threads = Some(2);
    o.cpus = Some("1,0".into());
    o.duration = Some(Duration::from_millis(600));
    let runner = std::thread::spawn(move || run(&o));
    // Every CPU list each thread name showed: tests running beside this one in the process
    // have unpinned threads of the same names, and a thread is named before it pins itself.
    let mut seen: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        std::collections::BTreeMap::new();
    let deadline = Instant::now() + Duration::from_millis(500);
    let showed = |seen: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
                  name: &str,
                  cpus: &str| seen.get(name).is_some_and(|s| s.contains(cpus));
    while Instant::now() < deadline && !(showed(&seen, "0", "1") && showed(&seen, "1", "0")) {
        for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            let allowed = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|v| v.trim().to_string());
            if let (Some(name), Some(allowed)) = (comm.trim().strip_prefix("qpslab-load-"), allowed)
            {
                seen.entry(name.to_string()).or_default().insert(allowed);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    runner.join().unwrap();
    assert!(showed(&seen, "0", "1"), "thread 0 on CPU 1: {seen:?}");
    assert!(showed(&seen, "1", "0"), "thread 1 on CPU 0: {seen:?}");
}

fn open_loop_keeps_5000_per_second_within_2_percent_over_10_seconds(io: IoChoice) {
    let nginx = Nginx::start();
    let mut o = opts_on(io, &nginx.url("/"));
    o.rate = Some("5000".into());
    o.duration = Some(Duration::from_secs(10));
    o.connections = Some(20);
    let report = run(&o);
    let rate = report.rate.as_ref().expect("open loop reports its rate");
    let err = |v: f64, want: f64| (v - want).abs() / want;
    assert!(err(report.requests.sent as f64, 50_000.0) < 0.02, "{:?}", report.requests);
    assert!(err(rate.achieved_rps, 5000.0) < 0.02, "{rate:?}");
    assert!(err(report.throughput_rps, 5000.0) < 0.02, "{}", report.throughput_rps);
    assert!(rate.kept && rate.scheduled.abs_diff(50_000) <= 50, "{rate:?}");
    assert_eq!(report.config.mode, "rate");
    // Every full second of the run is on the rate, not just the total.
    for row in &report.intervals[..9] {
        assert!(err(row.rps, 5000.0) < 0.05, "{row:?}");
    }
    assert_eq!(report.generator.verdict, "ok");
    let logged = nginx.access_log(report.requests.completed as usize).len() as u64;
    assert!(logged >= report.requests.completed && logged <= report.requests.sent, "{logged}");
}

fn a_one_second_stall_shows_in_corrected_latency_and_hides_in_uncorrected(io: IoChoice) {
    // Every response written between 2 s and 3 s after the start waits until 3 s.
    let start = Instant::now();
    let server = Scripted::start(move |_, s| {
        let t = start.elapsed();
        if t >= Duration::from_secs(2) && t < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_secs(3) - t);
        }
        write(s, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        After::Continue
    });
    let mut o = opts_on(io, &server.url());
    o.rate = Some("1000".into());
    o.duration = Some(Duration::from_secs(5));
    o.connections = Some(10);
    let report = run(&o);
    let corrected = report.latency_us;
    let uncorrected = report.latency_uncorrected_us.expect("open loop");
    // About 1000 of 5000 requests were due during the stall and waited up to 1 s.
    assert!(corrected.p99 >= 500_000, "corrected {corrected:?}");
    assert!(corrected.max >= 900_000, "corrected {corrected:?}");
    // Only the 10 requests on the wire saw the stall from their write.
    assert!(uncorrected.p99 < 100_000, "uncorrected {uncorrected:?}");
    assert!(uncorrected.max >= 900_000, "uncorrected {uncorrected:?}");
    let lag = report.send_lag_us.expect("open loop");
    assert!(lag.max >= 900_000, "requests queued behind the stall were sent late: {lag:?}");
    let rate = report.rate.unwrap();
    assert!(rate.kept, "the backlog was sent once the stall ended");
    // About 1000 requests fell due while all 10 connections were held by the stall.
    assert!((800..=1100).contains(&rate.waited_for_connection), "{rate:?}");
}

fn requests_pipelined_behind_a_close_are_written_again_on_a_new_connection(io: IoChoice) {
    let nginx = Nginx::start();
    let mut o = opts_on(io, &nginx.url("/close10"));
    // nginx answers 10 requests per connection, the 10th with Connection: close, and drops
    // the 6 pipelined behind it unread; they go again on the next connection.
    o.pipeline = 16;
    o.requests = Some(2_000);
    o.connections = Some(4);
    let report = run(&o);
    assert_eq!(report.requests.ok, 2_000, "{:?} {:?}", report.requests, report.error_examples);
    assert_eq!(report.requests.failed, 0);
    assert!(report.requests.retried >= 1_000, "{:?}", report.requests);
    assert!(report.connections.reconnects >= 190, "{:?}", report.connections);
    let log = nginx.access_log(2_000);
    assert_eq!(log.len(), 2_000, "nginx processed each request exactly once");
    // Field 5 is $connection_requests: never past the 10th.
    assert!(log
        .iter()
        .all(|l| l.split(' ').nth(4).is_some_and(|n| n.parse::<u32>().unwrap() <= 10)));
}

/// A server that answers a request's head at once, refusing its body, and closes with the
/// body unread (the kernel then resets the connection), as a server does with a 413 or 401
/// and no lingering close. Returns its port and the answers it wrote.
fn early_answers() -> (u16, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    use std::io::Read;
    use std::sync::atomic::{AtomicU64, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let answered = std::sync::Arc::new(AtomicU64::new(0));
    let count = answered.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(100) {
            let Ok(mut s) = stream else { return };
            let mut head = Vec::new();
            let mut chunk = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut chunk) {
                    Ok(n) if n > 0 => head.extend_from_slice(&chunk[..n]),
                    _ => break,
                }
            }
            let answer = b"HTTP/1.1 413 Payload Too Large\r\nConnection: close\r\n\
                           Content-Length: 0\r\n\r\n";
            if s.write_all(answer).is_ok() {
                count.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    (port, answered)
}

fn an_answer_before_the_body_was_taken_counts_though_the_write_then_fails(io: IoChoice) {
    // The request's 8 MiB body is still going out when the answer and the reset come: the
    // write fails, and the answer read after it is the request's (not a broken write).
    let (port, answered) = early_answers();
    let mut o = opts_on(io, &format!("http://127.0.0.1:{port}/"));
    o.requests = Some(20);
    o.connections = Some(1);
    o.method = "POST".into();
    o.body = Some(qpslab_load::options::Body(vec![b'x'; 8 << 20]));
    o.max_error_rate = 1.0;
    let report = run(&o);
    let r = &report.requests;
    assert_eq!(r.failed, 0, "{r:?} {:?}", report.error_examples);
    assert_eq!((r.completed, r.bad_status), (20, 20), "{r:?}");
    assert_eq!(report.status.get("413"), Some(&20));
    let written = answered.load(std::sync::atomic::Ordering::SeqCst);
    assert!(written >= 20, "the server answered {written} times");
}

fn pipelined_requests_are_counted_exactly(io: IoChoice) {
    let nginx = Nginx::start();
    let mut o = opts_on(io, &nginx.url("/"));
    // 20 connections x about 250 requests: below nginx's keepalive_requests (1000), so no
    // connection closes (that case has its own test).
    o.pipeline = 16;
    o.requests = Some(5_000);
    o.connections = Some(20);
    let report = run(&o);
    assert_eq!(report.requests.ok, 5_000, "{:?}", report.error_examples);
    assert_eq!(report.config.pipeline, 16);
    assert_eq!(nginx.access_log(5_000).len(), 5_000, "nginx saw exactly the requests sent");
}

fn open_loop_starts_its_schedule_once_the_connections_are_open(io: IoChoice) {
    // Two connects complete at once; the others' SYNs are dropped and resent after 1 s. Were
    // the schedule running meanwhile, its first requests would go out up to a second late.
    let server = Scripted::start_late(Duration::from_millis(300), |_, s| {
        write(s, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        After::Continue
    });
    let mut o = opts_on(io, &server.url());
    o.rate = Some("200".into());
    o.duration = Some(Duration::from_secs(1));
    o.connections = Some(10);
    o.timeout = Duration::from_secs(5);
    let report = run(&o);
    let connect = &report.connections.connect_us;
    assert_eq!(report.connections.connects, 10, "{:?}", report.connections);
    assert!(connect.max >= 900_000, "some connects waited for a resent SYN: {connect:?}");
    let lag = report.send_lag_us.expect("open loop");
    assert!(lag.max < 100_000, "the schedule began after the connects: {lag:?}");
    assert!(
        report.duration_s < 1.5,
        "the connect phase is not part of the run: {}",
        report.duration_s
    );
    assert_eq!(report.requests.ok, 200, "{:?}", report.requests);
}

fn polling_time_is_reported_apart_from_work(io: IoChoice) {
    let nginx = Nginx::start();
    let mut o = opts_on(io, &nginx.url("/"));
    o.rate = Some("2000".into());
    o.duration = Some(Duration::from_secs(1));
    o.poll = PollMode::Spin;
    let spin = run(&o);
    assert_eq!(spin.config.poll, "spin");
    // A spinning thread is on its CPU the whole second (less what other tests take); at 2000
    // requests/s much of it is waiting for slots, which is not counted as busy.
    let g = &spin.generator;
    assert!(g.poll_s > 0.3 && g.poll_s < spin.duration_s, "{g:?}");
    let d = spin.duration_s;
    let busy = (g.cpu_user_s + g.cpu_sys_s) / d * (1.0 - g.poll_s / d);
    assert!((g.busy_ratio - busy).abs() < 1e-6, "busy excludes polling: {g:?}");
    o.poll = PollMode::Sleep;
    let sleep = run(&o);
    assert_eq!(sleep.config.poll, "sleep");
    assert_eq!(sleep.generator.poll_s, 0.0, "{:?}", sleep.generator);
    for r in [&spin, &sleep] {
        assert!(r.rate.as_ref().unwrap().kept, "{:?}", r.rate);
    }
}

/// A server that answers every even-numbered request and closes the connection on every
/// odd-numbered one without a byte of response (`close`: FIN; else a reset): with one
/// connection, each close hits a reused connection, as a keep-alive timeout racing the next
/// request does.
fn closes_reused_connections(reset: bool) -> Scripted {
    Scripted::start(move |n, s| {
        if n % 2 == 0 {
            write(s, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
            After::Continue
        } else if reset {
            After::Reset
        } else {
            After::Close
        }
    })
}

fn keepalive_close_race_is_retried_once_and_counted_apart(io: IoChoice) {
    for reset in [false, true] {
        let server = closes_reused_connections(reset);
        let mut o = opts_on(io, &server.url());
        o.connections = Some(1);
        o.requests = Some(20);
        let report = run(&o);
        let r = &report.requests;
        assert_eq!((r.ok, r.failed), (20, 0), "reset {reset}: {r:?} {:?}", report.error_examples);
        // Requests 1..19 each met one close on a reused connection and went again.
        let retries = &report.retries;
        assert_eq!(retries.closed_before_response, 19, "{retries:?}");
        assert_eq!(retries.connections_closed_before_response, 19, "{retries:?}");
        assert_eq!(r.retried, 19);
        assert_eq!(server.requests(), 39, "the server saw each retried request twice");
        assert!(report.check.passed);
        assert!(report.render_text().contains(
            "Retried: the server closed 19 reused connections before responding (the keep-alive \
             close race); 19 requests were sent again"
        ));
    }
}

fn no_retry_counts_the_close_race_as_failures(io: IoChoice) {
    let server = closes_reused_connections(false);
    let mut o = opts_on(io, &server.url());
    o.connections = Some(1);
    o.requests = Some(20);
    o.no_retry = true;
    let report = run(&o);
    assert_eq!(report.requests.failed, 10, "{:?}", report.requests);
    assert_eq!(report.errors["read"], 10);
    assert_eq!(
        report.error_examples["read"],
        "connection closed by the server before the response"
    );
    assert_eq!(report.retries.closed_before_response, 0);
}

fn a_post_is_not_sent_twice(io: IoChoice) {
    let server = closes_reused_connections(false);
    let mut o = opts_on(io, &server.url());
    o.connections = Some(1);
    o.requests = Some(20);
    o.method = "POST".into();
    let report = run(&o);
    assert_eq!(report.requests.failed, 10, "{:?}", report.requests);
    assert_eq!(server.requests(), 20, "each POST reached the server once");
    assert_eq!(report.retries.closed_before_response, 0);
}

// Every behaviour above, on each event loop (epoll and io_uring).
qpslab_testkit::on_both_loops!(
    exact_request_count_matches_nginx_access_log,
    status_counts_match_nginx_for_a_mix_of_200_and_404,
    accepted_status_counts_as_ok_and_passes_the_check,
    one_kib_bodies_and_head_requests,
    post_body_reaches_the_server,
    duration_run_ends_on_time_and_warmup_is_excluded,
    warmup_requests_answered_in_the_window_count,
    per_second_rows_add_up_to_the_totals,
    chunked_responses_written_a_few_bytes_at_a_time,
    close_delimited_bodies_reconnect_transparently,
    connection_close_header_reconnects_transparently,
    reset_after_request_counts_read_errors,
    stalled_requests_time_out_at_expiry,
    some_stalls_in_a_timed_run,
    garbage_status_lines_are_parse_errors,
    eof_mid_body_is_a_read_error,
    interim_responses_are_not_counted,
    unreachable_target_fails_preflight_at_once,
    target_going_away_counts_connect_errors_with_backoff,
    threads_are_pinned_to_the_listed_cpus,
    open_loop_keeps_5000_per_second_within_2_percent_over_10_seconds,
    a_one_second_stall_shows_in_corrected_latency_and_hides_in_uncorrected,
    requests_pipelined_behind_a_close_are_written_again_on_a_new_connection,
    an_answer_before_the_body_was_taken_counts_though_the_write_then_fails,
    pipelined_requests_are_counted_exactly,
    open_loop_starts_its_schedule_once_the_connections_are_open,
    polling_time_is_reported_apart_from_work,
    keepalive_close_race_is_retried_once_and_counted_apart,
    no_retry_counts_the_close_race_as_failures,
    a_post_is_not_sent_twice,
);
