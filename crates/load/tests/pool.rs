//! Requests from a pool (`--urls`) against a real nginx, whose access log is the ground truth:
//! in order, every line is requested equally often across threads and connections; a seed
//! replays the same sequence; HTTP/2 walks the pool as HTTP/1.1 does; the report counts by
//! group and names the pool by its digest.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod support;

use std::collections::BTreeMap;

use qpslab_load::options::FileText;
use qpslab_load::IoChoice;
use support::nginx::Nginx;
use support::{opts_on, run};

/// `n` distinct paths under `/t/` (nginx answers them all), one per line.
fn pool(n: usize) -> FileText {
    let text: String = (0..n).map(|i| format!("/t/{}/{i}\n", ["a", "b"][i % 2])).collect();
    FileText { name: "pool.txt".into(), text }
}

/// How many times nginx's log shows each URI (its last field).
fn times(log: &[String]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for l in log {
        *m.entry(l.split_whitespace().last().unwrap().to_string()).or_default() += 1;
    }
    m
}

/// 10,000 paths, 30,000 requests over 2 threads and 8 connections, in order: nginx logs each
/// path exactly 3 times (the threads take the pool's positions in turn, and the requests a
/// reconnect sends again keep theirs), and the report counts them by their first segment.
fn in_order_every_path_is_requested_equally_often(io: IoChoice) {
    let nginx = Nginx::start();
    let mut o = opts_on(io, &nginx.url("/"));
    o.urls_file = Some(pool(10_000));
    o.requests = Some(30_000);
    (o.threads, o.connections) = (Some(2), Some(8));
    let report = run(&o);
    assert_eq!(report.requests.ok, 30_000);
    let seen = times(&nginx.access_log(30_000));
    assert_eq!(seen.len(), 10_000, "every path");
    assert!(
        seen.values().all(|n| *n == 3),
        "each 3 times: {:?}",
        seen.iter().find(|(_, n)| **n != 3)
    );
    assert!(
        report.connections.reconnects >= 8,
        "nginx closed after 1000: {:?}",
        report.connections
    );
    let p = report.pool.as_ref().unwrap();
    assert_eq!(
        (p.size, p.order, p.seed, p.group_by),
        (10_000, "seq", None, Some(qpslab_load::config::GroupBy::Segments(1)))
    );
    assert_eq!(p.groups.len(), 1);
    assert_eq!((p.groups[0].name.as_str(), p.groups[0].variants), ("/t", 10_000));
    assert_eq!(p.groups[0].ok, 30_000);
    assert!(report.per_target.is_empty(), "the pool's lines are not rows of their own");
    assert!((40.0..80.0).contains(&p.bytes_per_variant), "{}", p.bytes_per_variant);
}

/// One connection, a shuffled order: the same seed twice gives the same sequence in nginx's
/// log (every path once in the first lap), another seed another; grouped by two segments.
fn a_seed_replays_the_same_sequence(io: IoChoice) {
    let sequence = |order: &str| {
        let nginx = Nginx::start();
        let mut o = opts_on(io, &nginx.url("/"));
        o.urls_file = Some(pool(2_000));
        o.order = Some(order.into());
        o.group_by = Some("2".into());
        o.requests = Some(2_000);
        (o.threads, o.connections) = (Some(1), Some(1));
        let report = run(&o);
        let log = nginx.access_log(2_000);
        let uris: Vec<String> =
            log.iter().map(|l| l.split_whitespace().last().unwrap().to_string()).collect();
        (uris, report)
    };
    let (a, report) = sequence("random:42");
    let (b, _) = sequence("random:42");
    let (c, _) = sequence("random:43");
    assert_eq!(a, b, "the same seed, the same sequence");
    assert_ne!(a, c);
    assert_eq!(times(&a.iter().map(|u| format!("x {u}")).collect::<Vec<_>>()).len(), 2_000);
    let in_order: Vec<String> =
        (0..2_000).map(|i| format!("/t/{}/{i}", ["a", "b"][i % 2])).collect();
    assert_ne!(a, in_order, "shuffled");
    let p = report.pool.unwrap();
    assert_eq!((p.order, p.seed), ("random", Some(42)));
    let names: Vec<&str> = p.groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&"/t/a") && names.contains(&"/t/b"), "{names:?}");
    assert_eq!(p.groups.iter().map(|g| g.ok).sum::<u64>(), 2_000);
}

/// HTTP/2 (h2c) walks the pool the same way: 5,000 paths, 10,000 requests on 4 connections of
/// 8 streams, each path exactly twice.
fn http2_walks_the_pool_too(io: IoChoice) {
    let nginx = Nginx::start_h2(None);
    let mut o = opts_on(io, &nginx.url("/"));
    o.urls_file = Some(pool(5_000));
    o.requests = Some(10_000);
    o.h2 = true;
    o.streams = 8;
    let report = run(&o);
    assert_eq!(report.requests.ok, 10_000);
    let seen = times(
        &nginx
            .access_log(10_000)
            .iter()
            .map(|l| {
                // The protocol is the last field here: the URI is the one before.
                let mut w: Vec<&str> = l.split_whitespace().collect();
                assert_eq!(w.pop(), Some("HTTP/2.0"));
                w.join(" ")
            })
            .collect::<Vec<_>>(),
    );
    assert_eq!(seen.len(), 5_000);
    assert!(seen.values().all(|n| *n == 2), "{:?}", seen.iter().find(|(_, n)| **n != 2));
}

/// `{seq}` in the path, a header and the body, `{rand}` in the query: nginx logs 20,000
/// requests of 2 threads and 8 connections (nginx closing each after 1,000, so requests go
/// again on new connections; HTTP/1.1 pipelined by 2) with every ID distinct, and the three `{seq}` of a request are
/// the same number (the body's fixed length is its Content-Length).
fn seq_ids_are_distinct_and_agree_within_a_request(io: IoChoice, h2: bool) {
    let nginx = if h2 { Nginx::start_h2(None) } else { Nginx::start() };
    let mut o = opts_on(io, &nginx.url("/id/{seq}?r={rand:6:42}"));
    o.headers = vec!["X-Id: {seq:5000}".into()];
    o.method = "POST".into();
    o.body = Some(qpslab_load::options::Body(br#"{"n":{seq}}"#.to_vec()));
    o.requests = Some(20_000);
    (o.threads, o.connections) = (Some(2), Some(8));
    if h2 {
        (o.h2, o.streams) = (true, 4);
    } else {
        o.pipeline = 2;
    }
    let report = run(&o);
    assert_eq!(report.requests.ok, 20_000);
    let log = nginx.ids_log(20_000);
    assert_eq!(log.len(), 20_000);
    let mut seen = std::collections::HashSet::new();
    for line in &log {
        let f: Vec<&str> = line.split('|').collect();
        let (path, query) = f[0].split_once('?').unwrap();
        let n: u64 = path.strip_prefix("/id/").unwrap().parse().unwrap();
        assert_eq!(path.len(), 4 + 12, "12 digits: {line}");
        let r = query.strip_prefix("r=").unwrap();
        assert!(r.len() == 6 && r.bytes().all(|b| b.is_ascii_digit()), "{line}");
        assert_eq!(f[1].parse::<u64>().unwrap(), 5000 + n, "{line}");
        assert_eq!(f[2], format!(r#"{{\x22n\x22:{n:012}}}"#), "{line}");
        assert!(seen.insert(n), "{n} twice");
    }
    assert!(seen.iter().all(|n| *n < 20_100), "close to 0..N: {:?}", seen.iter().max());
    if !h2 {
        assert!(report.connections.reconnects >= 8, "{:?}", report.connections);
    }
}

fn seq_ids_over_http1(io: IoChoice) {
    seq_ids_are_distinct_and_agree_within_a_request(io, false);
}

fn seq_ids_over_http2(io: IoChoice) {
    seq_ids_are_distinct_and_agree_within_a_request(io, true);
}

/// `--body-lines`: every line of the file is a body of its own, in order, each sent equally
/// often (one with a `{seq}` ID in it); a targets file's `body=` gives each line its body,
/// literal or from a file, by weight. nginx's log of the bodies it read is the ground truth.
fn bodies_from_lines_and_from_a_targets_file(io: IoChoice) {
    let nginx = Nginx::start();
    let mut o = opts_on(io, &nginx.url("/id/b"));
    o.body_lines =
        Some(FileText { name: "bodies.txt".into(), text: "a=1\n\nb=2\nc={seq}\n".into() });
    o.method = "POST".into();
    o.requests = Some(3_000);
    (o.threads, o.connections) = (Some(2), Some(6));
    let report = run(&o);
    assert_eq!(report.requests.ok, 3_000);
    assert_eq!(report.pool.as_ref().map(|p| p.size), Some(3));
    let bodies: Vec<String> =
        nginx.ids_log(3_000).iter().map(|l| l.rsplit('|').next().unwrap().to_string()).collect();
    let count = |b: &str| bodies.iter().filter(|x| *x == b).count();
    assert_eq!((bodies.len(), count("a=1"), count("b=2")), (3_000, 1_000, 1_000));
    let seqs: std::collections::HashSet<&String> =
        bodies.iter().filter(|b| b.starts_with("c=")).collect();
    assert_eq!(seqs.len(), 1_000, "every {{seq}} body distinct");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("put.json");
    std::fs::write(&file, r#"{"from":"file"}"#).unwrap();
    let targets = format!(
        "POST {} body=k=1 weight=2\nPUT {} X-Id: 7 body=@{}\n",
        nginx.url("/id/t"),
        nginx.url("/id/u"),
        file.display()
    );
    let mut o = opts_on(io, &nginx.url("/"));
    (o.urls, o.targets) = (Vec::new(), Some(FileText { name: "t.txt".into(), text: targets }));
    o.requests = Some(300);
    let report = run(&o);
    assert_eq!(report.requests.ok, 300);
    let log = nginx.ids_log(3_300);
    let rows = |want: &str| log[3_000..].iter().filter(|l| l.as_str() == want).count();
    assert_eq!(rows("/id/t|-|k=1"), 200, "{:?}", &log[3_000..3_003]);
    assert_eq!(rows(r#"/id/u|7|{\x22from\x22:\x22file\x22}"#), 100, "{:?}", &log[3_000..3_003]);
}

/// `--group-by name`: a targets file's lines reported by their `name=` (a line without one by
/// its method and URL), each group's counts what nginx logged for its lines; without it, each
/// line is a row of its own, its name on it.
fn a_targets_file_grouped_by_name(io: IoChoice) {
    let nginx = Nginx::start();
    let targets = format!(
        "GET {} name=home\nGET {} name=home\nGET {} weight=2 name=cart\nGET {}\n",
        nginx.url("/id/h1"),
        nginx.url("/id/h2"),
        nginx.url("/id/c"),
        nginx.url("/id/x"),
    );
    let mut o = opts_on(io, &nginx.url("/"));
    (o.urls, o.targets) = (Vec::new(), Some(FileText { name: "t.txt".into(), text: targets }));
    o.requests = Some(500);
    o.group_by = Some("name".into());
    let report = run(&o);
    assert_eq!(report.requests.ok, 500);
    assert!(report.per_target.is_empty(), "{:?}", report.per_target);
    let p = report.pool.as_ref().unwrap();
    assert_eq!((p.file.as_str(), p.size), ("t.txt", 4));
    let groups: Vec<(&str, usize, u64)> =
        p.groups.iter().map(|g| (g.name.as_str(), g.variants, g.ok)).collect();
    let x = format!("GET {}", nginx.url("/id/x"));
    assert_eq!(groups, [("home", 2, 200), ("cart", 1, 200), (x.as_str(), 1, 100)]);
    assert!(p.groups.iter().all(|g| g.latency_us.as_ref().is_some_and(|l| l.p50 > 0)));
    let log = nginx.ids_log(500);
    let path = |l: &String| l.split('|').next().unwrap().to_string();
    let count = |want: &str| log.iter().filter(|l| path(l) == want).count();
    assert_eq!(count("/id/h1") + count("/id/h2"), 200);
    assert_eq!((count("/id/c"), count("/id/x")), (200, 100));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["pool"]["group_by"], "name");

    o.group_by = None;
    let report = run(&o);
    let names: Vec<Option<&str>> = report.per_target.iter().map(|t| t.name.as_deref()).collect();
    assert_eq!(names, [Some("home"), Some("home"), Some("cart"), None]);
    assert!(report.pool.is_none());
}

qpslab_testkit::on_both_loops!(
    a_targets_file_grouped_by_name,
    bodies_from_lines_and_from_a_targets_file,
    in_order_every_path_is_requested_equally_often,
    a_seed_replays_the_same_sequence,
    http2_walks_the_pool_too,
    seq_ids_over_http1,
    seq_ids_over_http2,
);
