//! Load models beyond closed-loop keep-alive, checked on the server side with a real nginx:
//! a connection per request, reset-on-close, source address ranges, many targets with weights,
//! stage files, and interval logs that sum to the whole run.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod support;

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::time::Duration;

use qpslab_load::IoChoice;
use qpslab_load::{hlog, LoadConfig, LoadOptions};
use support::nginx::Nginx;
use support::{opts_on, run};

/// One nginx access-log line, as `support::nginx` formats it.
#[derive(Debug)]
struct Line {
    status: u16,
    method: String,
    connection: u64,
    connection_requests: u64,
    addr: String,
    port: u16,
    uri: String,
}

fn parse(log: &[String]) -> Vec<Line> {
    log.iter()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Line {
                status: f[0].parse().unwrap(),
                method: f[1].to_string(),
                connection: f[3].parse().unwrap(),
                connection_requests: f[4].parse().unwrap(),
                addr: f[5].to_string(),
                port: f[6].parse().unwrap(),
                uri: f[7].to_string(),
            }
        })
        .collect()
}

fn conn_per_request_uses_exactly_one_connection_per_request(io: IoChoice) {
    let nginx = Nginx::start();
    let mut o = opts_on(io, &nginx.url("/"));
    o.requests = Some(3000);
    o.connections = Some(8);
    o.threads = Some(2);
    o.conn_per_request = true;
    let report = run(&o);
    assert_eq!(report.requests.ok, 3000);
    assert_eq!(report.connections.connects, 3000);
    assert_eq!(report.connections.reconnects, 0, "new connections are the plan here");
    assert!(report.connections.connect_us.p50 > 0);
    assert_eq!(report.config.mode, "conn-per-request");
    let lines = parse(&nginx.access_log(3000));
    assert_eq!(lines.len(), 3000);
    let conns: HashSet<u64> = lines.iter().map(|l| l.connection).collect();
    assert_eq!(conns.len(), 3000, "nginx saw 3000 distinct connections");
    assert!(lines.iter().all(|l| l.connection_requests == 1), "one request on each");
}

/// TIME_WAIT sockets on the generator's side: from `src` to nginx's port.
fn client_time_waits(src: &str, port: u16) -> usize {
    let out = Command::new("ss")
        .args(["-Htan", "state", "time-wait", "src", src, "dport", "=", &format!(":{port}")])
        .output()
        .expect("ss (iproute2) runs");
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.trim().is_empty()).count()
}

fn rst_close_leaves_no_time_wait_on_the_generator(io: IoChoice) {
    let nginx = Nginx::start();
    let port: u16 = nginx.url("").rsplit(':').next().unwrap().parse().unwrap();
    let mut o = opts_on(io, &nginx.url("/"));
    o.requests = Some(500);
    o.conn_per_request = true;
    // Keep-alive asked for, so nginx does not close first: the generator closes every connection.
    o.headers = vec!["Connection: keep-alive".into()];
    o.source = Some("127.0.0.77".into());
    let fin = run(&o);
    assert_eq!(fin.requests.ok, 500);
    assert_eq!(client_time_waits("127.0.0.77", port), 500, "an orderly close leaves TIME_WAIT");
    o.rst_close = true;
    o.source = Some("127.0.0.78".into());
    let rst = run(&o);
    assert_eq!(rst.requests.ok, 500);
    assert_eq!(client_time_waits("127.0.0.78", port), 0, "a reset leaves none");
    assert_eq!(nginx.access_log(1000).len(), 1000);
}

fn sources_spread_evenly_over_the_whole_range(io: IoChoice) {
    let nginx = Nginx::start();
    let range: Vec<String> = (2..=254).map(|i| format!("127.0.0.{i}")).collect();
    // A connection per request: every address is used equally often.
    let mut o = opts_on(io, &nginx.url("/"));
    o.requests = Some(2530);
    o.connections = Some(10);
    o.threads = Some(2);
    o.conn_per_request = true;
    o.source = Some("127.0.0.2-127.0.0.254".into());
    let report = run(&o);
    assert_eq!(report.requests.ok, 2530);
    let lines = parse(&nginx.access_log(2530));
    let mut per_addr: HashMap<&str, usize> = HashMap::new();
    for l in &lines {
        *per_addr.entry(l.addr.as_str()).or_default() += 1;
    }
    assert_eq!(per_addr.len(), 253, "every address of the range");
    for a in &range {
        assert_eq!(per_addr.get(a.as_str()), Some(&10), "{a}");
    }

    // Keep-alive: 253 connections, one per address.
    let nginx = Nginx::start();
    let mut o = opts_on(io, &nginx.url("/"));
    o.requests = Some(2530);
    o.connections = Some(253);
    o.threads = Some(2);
    o.source = Some("127.0.0.2-127.0.0.254".into());
    run(&o);
    let lines = parse(&nginx.access_log(2530));
    let mut conns_of: HashMap<&str, HashSet<u64>> = HashMap::new();
    for l in &lines {
        conns_of.entry(l.addr.as_str()).or_default().insert(l.connection);
    }
    assert_eq!(conns_of.len(), 253);
    assert!(conns_of.values().all(|c| c.len() == 1), "one connection per address");
}

/// 50 ports outside the kernel's ephemeral range, so that no connection of a test running
/// alongside (the kernel picks its ports from that range) holds one of them.
fn ports_outside_ephemeral_range() -> std::ops::RangeInclusive<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
    let mut it = range.split_whitespace().map(|p| p.parse::<u16>().unwrap());
    let (lo, hi) = (it.next().unwrap(), it.next().unwrap());
    if hi <= 65535 - 50 {
        hi + 1..=hi + 50
    } else {
        assert!(lo > 1024 + 50, "no room outside the ephemeral range {lo}-{hi}");
        lo - 50..=lo - 1
    }
}

fn a_source_port_range_binds_every_pair_equally(io: IoChoice) {
    let nginx = Nginx::start();
    let mut o = opts_on(io, &nginx.url("/"));
    o.requests = Some(300);
    o.connections = Some(2);
    o.threads = Some(2);
    o.conn_per_request = true;
    o.rst_close = true;
    let ports = ports_outside_ephemeral_range();
    o.source = Some(format!("127.0.0.2-127.0.0.3:{}-{}", ports.start(), ports.end()));
    let report = run(&o);
    assert_eq!(report.requests.ok, 300, "{:?}", report.error_examples);
    let lines = parse(&nginx.access_log(300));
    let mut pairs: HashMap<(String, u16), usize> = HashMap::new();
    for l in &lines {
        assert!(ports.contains(&l.port), "port {} outside the range", l.port);
        *pairs.entry((l.addr.clone(), l.port)).or_default() += 1;
    }
    // 2 addresses x 50 ports, each pair 3 times.
    assert_eq!(pairs.len(), 100);
    assert!(pairs.values().all(|&n| n == 3), "{pairs:?}");
}

fn targets_file_weights_and_per_target_counts_match_nginx(io: IoChoice) {
    let (one, two) = (Nginx::start(), Nginx::start());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("targets");
    std::fs::write(
        &file,
        format!(
            "# paths on the first server\nGET {} weight=3\nHEAD {}\nGET {} X-Test: a b\n\
             GET {} weight=2\n",
            one.url("/k/a"),
            one.url("/k/b"),
            one.url("/k/c"),
            two.url("/k/d"),
        ),
    )
    .unwrap();
    let mut o: LoadOptions = opts_on(io, &one.url("/k/cli"));
    o.targets = Some(qpslab_load::options::FileText::from_arg(file.to_str().unwrap()).unwrap());
    // /k/ has no keepalive_requests limit, so no connection reconnects however the requests
    // fall among them.
    o.requests = Some(4000);
    o.connections = Some(8);
    o.threads = Some(2);
    let report = run(&o);
    assert_eq!(report.requests.ok, 4000);
    let count = |lines: &[Line], uri: &str| lines.iter().filter(|l| l.uri == uri).count() as u64;
    let (l1, l2) = (parse(&one.access_log(1)), parse(&two.access_log(1)));
    assert_eq!(l1.len() + l2.len(), 4000);
    let uris = ["/k/cli", "/k/a", "/k/b", "/k/c", "/k/d"];
    for (t, uri) in report.per_target.iter().zip(uris) {
        let seen = count(&l1, uri) + count(&l2, uri);
        assert_eq!(t.completed, seen, "{uri}: per-target count against nginx's log");
        assert_eq!(t.sent, t.completed);
    }
    assert!(l1.iter().filter(|l| l.uri == "/k/b").all(|l| l.method == "HEAD" && l.status == 200));
    // Within the first server (weights 1, 3, 1, 1), requests follow the weights.
    let first: u64 = report.per_target[..4].iter().map(|t| t.completed).sum();
    for (t, w) in report.per_target[..4].iter().zip([1.0, 3.0, 1.0, 1.0]) {
        let share = t.completed as f64 / first as f64;
        assert!((share - w / 6.0).abs() < 0.01, "{}: share {share}", t.url);
    }
    // Connections follow the address weights (6 : 2 of 8).
    assert_eq!(l2.iter().map(|l| l.connection).collect::<HashSet<_>>().len(), 2);
}

fn stage_file_sets_the_rate_second_by_second(io: IoChoice) {
    let nginx = Nginx::start();
    let dir = tempfile::tempdir().unwrap();
    let stages = dir.path().join("stages");
    std::fs::write(&stages, "1s 500\n1s 500:1500  # climb\n1s 1500\n").unwrap();
    let mut o = opts_on(io, &nginx.url("/"));
    o.stages = Some(qpslab_load::options::FileText::from_arg(stages.to_str().unwrap()).unwrap());
    o.connections = Some(20);
    let report = run(&o);
    let rate = report.rate.as_ref().unwrap();
    // 3000 in the stages, and 1500/s after them for the moment the run overshoots 3 s (up
    // to 10 ms on a busy VM: 3004 in a CI run while the hypervisor took a fifth of the CPUs).
    assert!((3000..=3015).contains(&rate.scheduled), "{rate:?}");
    assert!(rate.kept, "{rate:?}");
    let sent = report.requests.sent as f64;
    assert!((sent - 3000.0).abs() <= 60.0, "sent {sent} of 3000 scheduled");
    let r = &report.requests;
    let logged = nginx.access_log(r.completed as usize).len() as u64;
    assert!((r.completed..=r.completed + r.in_flight_at_stop).contains(&logged), "{logged} {r:?}");
    let rows: Vec<u64> = report.intervals.iter().map(|r| r.completed).collect();
    assert!(rows.len() >= 2, "{rows:?}");
    assert!((450..=550).contains(&rows[0]), "first second ~500: {rows:?}");
    assert!((900..=1100).contains(&rows[1]), "second second ~1000: {rows:?}");
}

fn open_loop_with_a_connection_per_request(io: IoChoice) {
    let nginx = Nginx::start();
    let mut o = opts_on(io, &nginx.url("/"));
    o.rate = Some("1000".into());
    o.duration = Some(Duration::from_secs(2));
    o.connections = Some(20);
    o.conn_per_request = true;
    let report = run(&o);
    assert_eq!(report.config.mode, "conn-per-request-rate");
    assert!(report.rate.as_ref().unwrap().kept);
    let done = report.requests.completed;
    assert!((1960..=2040).contains(&done), "{done}");
    let lines = parse(&nginx.access_log(done as usize));
    let conns: HashSet<u64> = lines.iter().map(|l| l.connection).collect();
    // Said apart (a CI run once saw 1999 connections for 2000 responses): a connection that
    // carried two requests, or a response the load counted and nginx never logged.
    assert_eq!(conns.len(), lines.len(), "every logged request had a connection of its own");
    let at_stop = report.requests.in_flight_at_stop;
    let logged = lines.len() as u64;
    assert!((done..=done + at_stop).contains(&logged), "nginx logged {logged} of {done} responses");
}

fn interval_log_sums_to_the_whole_run_and_halves_merge_exactly(io: IoChoice) {
    let nginx = Nginx::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run.hlog");
    let mut o = opts_on(io, &nginx.url("/"));
    o.rate = Some("2000".into());
    o.duration = Some(Duration::from_secs(4));
    o.threads = Some(2);
    o.log = Some(log.clone());
    let cfg = LoadConfig::from_options(&o).unwrap();
    let result = qpslab_load::run(
        &cfg,
        &std::sync::atomic::AtomicBool::new(false),
        &mut qpslab_load::feed::Unwatched,
    )
    .unwrap();
    assert_eq!(result.log_error, None);
    let whole = hlog::read_file(&log).unwrap();
    assert_eq!(whole.intervals.len(), 4, "{:?}", whole.intervals);
    for (i, (start, len)) in whole.intervals.iter().enumerate() {
        assert_eq!(*start, Duration::from_secs(i as u64));
        assert!(*len <= Duration::from_millis(1020), "{len:?}");
    }
    assert_eq!(whole.total, result.rec.latency, "the intervals add up to the run's histogram");
    assert!(whole.total.len() > 7000);

    // Two halves of the run, as two files (as two machines would write them), merge to it.
    let text = std::fs::read_to_string(&log).unwrap();
    let (head, data): (Vec<&str>, Vec<&str>) =
        text.lines().partition(|l| l.starts_with('#') || l.starts_with('"'));
    let half = |rows: &[&str], name: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, [head.clone(), rows.to_vec()].concat().join("\n") + "\n").unwrap();
        p
    };
    let a = half(&data[..2], "first.hlog");
    let b = half(&data[2..], "second.hlog");
    let (files, merged) = hlog::merge(&[a, b]).unwrap();
    assert_eq!(files.iter().map(|f| f.intervals.len()).sum::<usize>(), 4);
    assert!(files.iter().all(|f| f.total.len() < merged.len()));
    assert_eq!(merged, result.rec.latency);
}

// Every behaviour above, on each event loop (epoll and io_uring).
qpslab_testkit::on_both_loops!(
    conn_per_request_uses_exactly_one_connection_per_request,
    rst_close_leaves_no_time_wait_on_the_generator,
    sources_spread_evenly_over_the_whole_range,
    a_source_port_range_binds_every_pair_equally,
    targets_file_weights_and_per_target_counts_match_nginx,
    stage_file_sets_the_rate_second_by_second,
    open_loop_with_a_connection_per_request,
    interval_log_sums_to_the_whole_run_and_halves_merge_exactly,
);
