//! The one live feed, watched the way a live page or an exporter would: a bench and a load over
//! two local agents each tell one `Feed` their progress, every second's merged histogram (whose
//! counts add up to the run's responses), the agents' rows and the findings.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use qpslab_lab::{bench, BenchOptions};
use qpslab_load::feed::{Event, Feed};
use qpslab_load::LoadOptions;

use crate::common::ServeChild;

/// Everything a feed heard, in order, as plain data.
#[derive(Default)]
struct Heard {
    progress: usize,
    /// The last progress sample: the run's final counters.
    last: qpslab_load::Progress,
    seconds: Vec<(u32, u64)>,
    agents: Vec<Vec<&'static str>>,
    findings: Vec<String>,
    starting: usize,
}

impl Feed for Heard {
    fn event(&mut self, e: &Event<'_>) {
        match e {
            Event::Progress(p) => {
                self.progress += 1;
                self.last = **p;
            }
            Event::Second { index, hist } => self.seconds.push((*index, hist.len())),
            Event::Agents(rows) => self.agents.push(rows.iter().map(|r| r.state).collect()),
            Event::Finding { name, .. } => self.findings.push((*name).to_string()),
            Event::Starting { .. } => self.starting += 1,
            _ => {}
        }
    }

    fn wants_seconds(&self) -> bool {
        true
    }
}

/// The last progress sample holds the run's totals, nothing open.
fn check_last(h: &Heard, r: &qpslab_load::Report) {
    let p = &h.last;
    assert_eq!((p.sent, p.completed, p.ok), (r.requests.sent, r.requests.completed, r.requests.ok));
    assert_eq!(p.completed - p.ok + p.failed, r.requests.failed);
    assert_eq!(p.open, 0);
    assert!(!p.warming_up && p.threads >= 1 && !p.cpu.is_zero(), "{p:?}");
}

/// Seconds in order, each once, and their responses: the run's.
fn check_seconds(h: &Heard, completed: u64) {
    let idx: Vec<u32> = h.seconds.iter().map(|s| s.0).collect();
    assert_eq!(idx, (0..idx.len() as u32).collect::<Vec<_>>(), "each second once, in order");
    assert!(idx.len() >= 2, "{idx:?}");
    assert_eq!(h.seconds.iter().map(|s| s.1).sum::<u64>(), completed, "the seconds add up");
}

#[test]
fn a_bench_tells_one_feed_its_seconds_and_findings() {
    let opts = BenchOptions {
        load: LoadOptions {
            duration: Some(Duration::from_secs(2)),
            warmup: Some(Duration::from_millis(300)),
            connections: Some(10),
            ..LoadOptions::default()
        },
        serve_exe: env!("CARGO_BIN_EXE_qpslab").into(),
        ..BenchOptions::default()
    };
    let mut heard = Heard::default();
    let report = bench(&opts, &AtomicBool::new(false), &mut heard).unwrap();
    assert!(heard.progress >= 1);
    assert_eq!(heard.starting, 1);
    check_seconds(&heard, report.load.requests.completed);
    check_last(&heard, &report.load);
    let names: Vec<&str> = report.doctor.findings.iter().map(|f| f.name).collect();
    assert_eq!(heard.findings, names);
}

#[test]
fn a_load_over_agents_tells_one_feed_its_agents_and_merged_seconds() {
    let server = ServeChild::start(&[], &["-w", "1"]);
    let opts = LoadOptions {
        urls: vec![server.url("/")],
        duration: Some(Duration::from_secs(2)),
        connections: Some(10),
        rate: Some("2000".into()),
        ..LoadOptions::default()
    };
    let fleet = qpslab_fleet::session::FleetOptions {
        hosts: qpslab_fleet::transport::parse_agents("local,local").unwrap(),
        ssh: qpslab_fleet::transport::ssh_command(None).unwrap(),
        agent_exe: Some(env!("CARGO_BIN_EXE_qpslab").into()),
        // The agents are this build's binary, started by path: its version must match.
        version: String::from_utf8_lossy(
            &std::process::Command::new(env!("CARGO_BIN_EXE_qpslab"))
                .arg("--version")
                .output()
                .unwrap()
                .stdout,
        )
        .trim()
        .trim_start_matches("qpslab ")
        .to_string(),
        hash: qpslab_fleet::identity::own_hash(),
    };
    let meta = qpslab_load::report::RunMeta::default();
    let mut heard = Heard::default();
    let stop = AtomicBool::new(false);
    let outcome =
        qpslab_fleet::coordinator::run_load(&opts, &fleet, &meta, &stop, &mut heard).unwrap();
    check_seconds(&heard, outcome.report.requests.completed);
    check_last(&heard, &outcome.report);
    let rows = heard.agents.last().unwrap();
    assert_eq!(rows, &["done", "done"], "the agents' last rows");
    assert!(heard.agents.iter().any(|rows| rows == &["running", "running"]), "{:?}", heard.agents);
    assert_eq!(heard.starting, 1);
}
