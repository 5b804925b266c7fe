//! The board: what the live feed has told so far, kept as the page and the exporter read it.
//! Fed on the run's calling thread (about once a second); read by the page's and the
//! exporter's threads under one lock, briefly.

use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;
use qpslab_load::feed::{AgentLive, Event};
use qpslab_load::stats::{self, ErrorClass};
use qpslab_load::Progress;
use serde::Serialize;

/// What the run is, for the page's title and the metrics' labels.
#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    /// `load`, `bench` or `sweep`.
    pub kind: &'static str,
    /// A name unique to this run (its start time and process): the `run` label.
    pub run: String,
    /// The command line.
    pub command: String,
    /// The first target (and how many more): the `target` label.
    pub target: String,
    /// `local`, or `all` for a load over agents (the merged run): the `agent` label.
    pub agent: String,
}

impl RunInfo {
    /// The run of this process starting now.
    pub fn new(kind: &'static str, urls: &[String], over_agents: bool) -> Self {
        let secs =
            SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
        let target = match urls {
            [] => "(built-in server)".to_string(),
            [one] => one.clone(),
            [first, rest @ ..] => format!("{first} (+{})", rest.len()),
        };
        Self {
            kind,
            run: format!("{secs}-{}", std::process::id()),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            target,
            agent: if over_agents { "all" } else { "local" }.into(),
        }
    }
}

/// One progress sample: rates over the time since the one before.
#[derive(Debug, Clone, Serialize)]
pub struct Tick {
    /// Seconds since the start of measurement.
    pub t: f64,
    pub rps: f64,
    pub ok_ps: f64,
    pub failed_ps: f64,
    pub open: u64,
    pub reconnects: u64,
    /// Open loop: the mean lateness of the writes of the interval, milliseconds.
    pub lag_ms: Option<f64>,
    /// The generator's CPU over the interval / (wall x load threads).
    pub busy: Option<f64>,
    /// Open loop: the schedule's rate over the interval, the requests due and not sent now,
    /// and whether the load is behind its schedule (more than 2% of what it had due in the
    /// window unsent: the rate is then not what was asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub asked_ps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub due_unsent: Option<u64>,
    pub behind: bool,
    /// HTTP/3: UDP datagrams per second each way over the interval, and the QUIC packets
    /// declared lost so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quic: Option<QuicTick>,
}

/// An HTTP/3 run's transport in a progress sample.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct QuicTick {
    pub datagrams_in_ps: f64,
    pub datagrams_out_ps: f64,
    pub lost_packets: u64,
}

/// One complete second: exact percentiles of its merged histogram, in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Second {
    pub i: u32,
    #[serde(flatten)]
    pub q: Percentiles,
}

/// The percentiles of a histogram, in microseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Percentiles {
    pub n: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Self {
        let q = |p: f64| if h.is_empty() { 0 } else { h.value_at_quantile(p) };
        Self { n: h.len(), p50: q(0.5), p90: q(0.9), p99: q(0.99), p999: q(0.999), max: h.max() }
    }
}

/// A sweep's run, as the table shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SweepRun {
    pub run: usize,
    pub variant: String,
    pub repeat: u32,
    /// `running`, `stored` or `not stored`.
    pub state: &'static str,
    pub rps: Option<f64>,
    pub id: Option<i64>,
}

/// A doctor's finding.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// A sweep's run it belongs to (`variant #repeat`).
    pub run: Option<String>,
    pub name: String,
    pub severity: String,
    pub summary: String,
}

/// An agent's row.
#[derive(Debug, Clone, Serialize)]
pub struct AgentRow {
    pub host: String,
    pub state: &'static str,
    pub sent: u64,
    pub completed: u64,
    pub failed: u64,
    pub rps: f64,
}

/// How the run ended.
#[derive(Debug, Clone, Serialize)]
pub struct End {
    /// Passed its checks.
    pub passed: bool,
    /// One line: requests, rate, p99.
    pub summary: String,
}

/// The current run of the job (a sweep has several, one after the other).
#[derive(Debug)]
struct Current {
    /// Counts from 1; the page starts its charts over when it changes.
    no: u32,
    /// Sweep labels: the variant's name and the repeat.
    variant: Option<String>,
    repeat: Option<u32>,
    progress: Progress,
    ticks: Vec<Tick>,
    seconds: Vec<Second>,
    /// Every second so far, merged: the whole run's percentiles.
    whole: Histogram<u64>,
    /// Open loop: what the schedule had due when the window opened.
    scheduled_at_open: Option<u64>,
}

impl Current {
    fn new(no: u32) -> Self {
        Self {
            no,
            variant: None,
            repeat: None,
            progress: Progress::default(),
            ticks: Vec::new(),
            seconds: Vec::new(),
            whole: stats::new_histogram(),
            scheduled_at_open: None,
        }
    }
}

/// Everything told so far.
#[derive(Debug)]
pub struct Board {
    pub info: RunInfo,
    /// Bumped on every change: readers wait for it to move.
    pub seq: u64,
    phase: String,
    cur: Current,
    agents: Vec<AgentRow>,
    agent_progress: Vec<Progress>,
    findings: Vec<Finding>,
    sweep: Vec<SweepRun>,
    sweep_runs: usize,
    notes: Vec<String>,
    /// Per-CPU busy share of this host over the last second (user+nice, system, softirq+irq).
    cpus: Vec<[f64; 3]>,
    end: Option<End>,
    report_html: Option<String>,
    /// A sweep's runs that ended since the exporter last looked (their final values).
    finished: Vec<View>,
}

/// One run's values as the exporter writes them.
#[derive(Debug, Clone)]
pub struct View {
    pub info: RunInfo,
    pub variant: Option<(String, u32)>,
    pub progress: Progress,
    pub whole: Histogram<u64>,
    pub busy: Option<f64>,
    /// Over agents: each agent's counters, under a name unique within the run (its host, and
    /// `#2`, `#3`... for a host named again).
    pub agents: Vec<(String, Progress)>,
}

impl Board {
    pub fn new(info: RunInfo) -> Self {
        Self {
            info,
            seq: 0,
            phase: "starting".into(),
            cur: Current::new(1),
            agents: Vec::new(),
            agent_progress: Vec::new(),
            findings: Vec::new(),
            sweep: Vec::new(),
            sweep_runs: 0,
            notes: Vec::new(),
            cpus: Vec::new(),
            end: None,
            report_html: None,
            finished: Vec::new(),
        }
    }

    /// Takes in one event of the feed.
    pub fn event(&mut self, e: &Event<'_>) {
        match e {
            Event::Phase(p) => self.phase = (*p).to_string(),
            Event::Ready => self.phase = "ready".into(),
            Event::Starting { lead } => {
                self.phase = if lead.is_zero() {
                    "running".into()
                } else {
                    format!("starting in {} ms", lead.as_millis())
                };
            }
            Event::Progress(p) => self.progress(p),
            Event::Second { index, hist } => self.second(*index, hist),
            Event::Agents(rows) => self.agents(rows),
            Event::Finding { name, severity, summary } => self.findings.push(Finding {
                run: self
                    .cur
                    .variant
                    .as_ref()
                    .zip(self.cur.repeat)
                    .map(|(v, r)| format!("{v} #{r}")),
                name: (*name).into(),
                severity: (*severity).into(),
                summary: (*summary).into(),
            }),
            Event::RunStart { run, runs, name, repeat, .. } => {
                self.run_start(*run, *runs, name, *repeat)
            }
            Event::Stored { id, throughput_rps } => {
                if let Some(r) = self.sweep.last_mut() {
                    r.state = "stored";
                    r.id = Some(*id);
                    r.rps = Some(*throughput_rps);
                }
            }
            Event::Note(n) => self.notes.push((*n).to_string()),
        }
        self.seq += 1;
    }

    fn progress(&mut self, p: &Progress) {
        let mut p = *p;
        if p.scheduled == 0 {
            // The run's final counters do not keep the schedule's count: the last one stands.
            p.scheduled = self.cur.progress.scheduled;
        }
        let p = &p;
        if p.warming_up {
            self.phase = "warming up".into();
        } else {
            self.phase = "running".into();
            let last = &self.cur.progress;
            let at_open = *self.cur.scheduled_at_open.get_or_insert(last.scheduled);
            let dt = p.elapsed.saturating_sub(last.elapsed).as_secs_f64();
            if dt > 0.0 {
                let t = tick(p, last, dt, p.scheduled.saturating_sub(at_open));
                self.cur.ticks.push(t);
            }
        }
        self.cur.progress = *p;
    }

    fn second(&mut self, index: u32, hist: &Histogram<u64>) {
        self.cur.seconds.push(Second { i: index, q: Percentiles::of(hist) });
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.cur.whole.add(hist);
    }

    fn agents(&mut self, rows: &[AgentLive]) {
        self.agent_progress.resize(rows.len(), Progress::default());
        let before = std::mem::take(&mut self.agents);
        self.agents = rows
            .iter()
            .zip(&mut self.agent_progress)
            .map(|(r, last)| {
                let dt = r.progress.elapsed.saturating_sub(last.elapsed).as_secs_f64();
                let rps = if dt > 0.0 {
                    r.progress.completed.saturating_sub(last.completed) as f64 / dt
                } else {
                    // Its progress did not move: its last rate stays.
                    before.iter().find(|a| a.host == r.host).map_or(0.0, |a| a.rps)
                };
                *last = r.progress;
                AgentRow {
                    host: r.host.clone(),
                    state: r.state,
                    sent: r.progress.sent,
                    completed: r.progress.completed,
                    failed: r.progress.failed,
                    rps,
                }
            })
            .collect();
    }

    fn run_start(&mut self, run: usize, runs: usize, name: &str, repeat: u32) {
        self.sweep_runs = runs;
        if !self.cur.ticks.is_empty() {
            let view = self.view();
            self.finished.push(view);
        }
        self.cur = Current::new(self.cur.no + u32::from(!self.cur.ticks.is_empty() || run > 1));
        self.cur.variant = Some(name.to_string());
        self.cur.repeat = Some(repeat);
        self.agents.clear();
        self.agent_progress.clear();
        if let Some(r) = self.sweep.last_mut().filter(|r| r.state == "running") {
            r.state = "not stored";
        }
        self.sweep.push(SweepRun {
            run,
            variant: name.to_string(),
            repeat,
            state: "running",
            rps: None,
            id: None,
        });
    }

    /// The host's per-CPU busy shares over the last second.
    pub fn set_cpus(&mut self, cpus: Vec<[f64; 3]>) {
        self.cpus = cpus;
        self.seq += 1;
    }

    /// The run is over.
    pub fn finish(&mut self, end: End, report_html: Option<String>) {
        if let Some(r) = self.sweep.last_mut().filter(|r| r.state == "running") {
            r.state = "not stored";
        }
        self.phase = "ended".into();
        self.end = Some(end);
        self.report_html = report_html;
        self.seq += 1;
    }

    pub fn ended(&self) -> bool {
        self.end.is_some()
    }

    pub fn report_html(&self) -> Option<&str> {
        self.report_html.as_deref()
    }

    /// The current run's values, as the exporter writes them.
    pub fn view(&self) -> View {
        View {
            info: self.info.clone(),
            variant: self.cur.variant.clone().zip(self.cur.repeat),
            progress: self.cur.progress,
            whole: self.cur.whole.clone(),
            busy: self.cur.ticks.last().and_then(|t| t.busy),
            agents: self
                .agents
                .iter()
                .zip(&self.agent_progress)
                .enumerate()
                .map(|(i, (row, p))| {
                    let before = self.agents[..i].iter().filter(|a| a.host == row.host).count();
                    let name = if before == 0 {
                        row.host.clone()
                    } else {
                        format!("{}#{}", row.host, before + 1)
                    };
                    (name, *p)
                })
                .collect(),
        }
    }

    /// The runs that ended since the last call (a sweep's), oldest first.
    pub fn take_finished(&mut self) -> Vec<View> {
        std::mem::take(&mut self.finished)
    }

    /// What the page needs after it has seen `seen` (the run number, ticks and seconds it
    /// has): the scalars in full, the series from where it stopped.
    pub fn update(&self, seen: &Seen) -> (serde_json::Value, Seen) {
        let same = seen.run == self.cur.no;
        let ticks_from = if same { seen.ticks.min(self.cur.ticks.len()) } else { 0 };
        let seconds_from = if same { seen.seconds.min(self.cur.seconds.len()) } else { 0 };
        let p = &self.cur.progress;
        let mut errors: serde_json::Map<String, serde_json::Value> = ErrorClass::ALL
            .iter()
            .zip(p.errors)
            .filter(|(_, n)| *n > 0)
            .map(|(c, n)| (c.name().to_string(), n.into()))
            .collect();
        // gRPC calls that ended with a status other than OK, by its name.
        let codes = qpslab_load::stats::GRPC_CODES.iter().zip(p.grpc).skip(1);
        errors.extend(codes.filter(|(_, n)| *n > 0).map(|(c, n)| (c.to_string(), n.into())));
        let v = serde_json::json!({
            "info": self.info,
            "seq": self.seq,
            "run": self.cur.no,
            "variant": self.cur.variant,
            "repeat": self.cur.repeat,
            "phase": self.phase,
            "elapsed_s": p.elapsed.as_secs_f64(),
            "totals": {
                "sent": p.sent, "completed": p.completed, "ok": p.ok,
                "failed": failed(p), "errors": errors,
                "open": p.open, "reconnects": p.reconnects,
            },
            "whole": Percentiles::of(&self.cur.whole),
            "ticks_from": ticks_from,
            "ticks": &self.cur.ticks[ticks_from..],
            "seconds_from": seconds_from,
            "seconds": &self.cur.seconds[seconds_from..],
            "agents": self.agents,
            "findings": self.findings,
            "sweep": self.sweep,
            "sweep_runs": self.sweep_runs,
            "notes": self.notes,
            "cpus": self.cpus,
            // `report`: the report is at `/report`.
            "end": self.end.as_ref().map(|e| serde_json::json!({
                "passed": e.passed, "summary": e.summary, "report": self.report_html.is_some(),
            })),
        });
        let now =
            Seen { run: self.cur.no, ticks: self.cur.ticks.len(), seconds: self.cur.seconds.len() };
        (v, now)
    }
}

/// What a page has of the series.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    pub run: u32,
    pub ticks: usize,
    pub seconds: usize,
}

/// Requests that failed as the report counts them: rejected statuses and transport errors.
pub fn failed(p: &Progress) -> u64 {
    p.completed.saturating_sub(p.ok) + p.failed
}

/// The share of the window's scheduled requests that may be late before the load is behind
/// its schedule (the report's rule).
const BEHIND_SHARE: f64 = 1.0 - qpslab_load::report::SCHEDULE_KEPT;

/// `owed`: in open loop, the requests the schedule had due since the window opened.
fn tick(p: &Progress, last: &Progress, dt: f64, owed: u64) -> Tick {
    let open_loop = p.scheduled > 0;
    let d = |a: u64, b: u64| a.saturating_sub(b) as f64 / dt;
    let lagged = p.lagged.saturating_sub(last.lagged);
    let wall = p.elapsed.saturating_sub(last.elapsed);
    let cpu = p.cpu.saturating_sub(last.cpu);
    let busy = (p.threads > 0 && last.cpu > Duration::ZERO && wall > Duration::ZERO)
        .then(|| cpu.as_secs_f64() / (wall.as_secs_f64() * f64::from(p.threads)));
    Tick {
        t: p.elapsed.as_secs_f64(),
        rps: d(p.completed, last.completed),
        ok_ps: d(p.ok, last.ok),
        failed_ps: d(failed(p), failed(last)),
        open: p.open,
        reconnects: p.reconnects,
        lag_ms: (lagged > 0)
            .then(|| p.lag_us.saturating_sub(last.lag_us) as f64 / lagged as f64 / 1000.0),
        busy,
        asked_ps: (open_loop && last.scheduled > 0).then(|| d(p.scheduled, last.scheduled)),
        due_unsent: open_loop.then_some(p.due_unsent),
        behind: open_loop && p.due_unsent as f64 > (BEHIND_SHARE * owed as f64).max(1.0),
        quic: (p.datagrams_in + p.datagrams_out > 0).then(|| QuicTick {
            datagrams_in_ps: d(p.datagrams_in, last.datagrams_in),
            datagrams_out_ps: d(p.datagrams_out, last.datagrams_out),
            lost_packets: p.lost_packets,
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    fn info() -> RunInfo {
        RunInfo::new("sweep", &["http://127.0.0.1:1/".into()], false)
    }

    fn at(s: u64, completed: u64, ok: u64) -> Progress {
        Progress {
            elapsed: Duration::from_secs(s),
            sent: completed,
            completed,
            ok,
            cpu: Duration::from_millis(500 * s),
            threads: 1,
            ..Progress::default()
        }
    }

    fn second(b: &mut Board, i: u32, values: &[u64]) {
        let mut h = stats::new_histogram();
        for v in values {
            h.record(*v).unwrap();
        }
        b.event(&Event::Second { index: i, hist: &h });
    }

    #[test]
    fn rates_are_differences_and_seconds_merge_into_the_whole_run() {
        let mut b = Board::new(info());
        b.event(&Event::Progress(&at(1, 1000, 1000)));
        b.event(&Event::Progress(&at(2, 3000, 2990)));
        second(&mut b, 0, &[100, 200]);
        second(&mut b, 1, &[300]);
        let (v, seen) = b.update(&Seen::default());
        let ticks = v["ticks"].as_array().unwrap();
        assert_eq!(ticks.len(), 2);
        assert_eq!(ticks[1]["rps"], 2000.0);
        assert_eq!(ticks[1]["failed_ps"], 10.0, "rejected statuses count as failed");
        assert_eq!(ticks[1]["busy"], 0.5);
        assert_eq!(v["whole"]["n"], 3);
        assert_eq!(v["seconds"][1]["p99"], 300);
        // Only what is new goes again.
        second(&mut b, 2, &[400]);
        let (v, _) = b.update(&seen);
        assert_eq!((v["ticks_from"].as_u64(), v["seconds_from"].as_u64()), (Some(2), Some(2)));
        assert_eq!(v["seconds"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn a_sweep_starts_its_charts_over_and_keeps_each_runs_last_values() {
        let mut b = Board::new(info());
        let start = |run, name| Event::RunStart {
            run,
            runs: 2,
            variant: run,
            variants: 2,
            name,
            repeat: 1,
            repeats: 1,
            eta: Duration::ZERO,
        };
        b.event(&start(1, "c=4"));
        b.event(&Event::Progress(&at(1, 500, 500)));
        second(&mut b, 0, &[100]);
        b.event(&Event::Stored { id: 7, throughput_rps: 500.0 });
        let (_, seen) = b.update(&Seen::default());
        b.event(&start(2, "c=16"));
        let done = b.take_finished();
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].variant, Some(("c=4".into(), 1)));
        assert_eq!((done[0].progress.ok, done[0].whole.len()), (500, 1));
        let (v, _) = b.update(&seen);
        assert_eq!(v["run"], 2);
        assert_eq!(v["ticks_from"], 0, "a new run's series start over");
        assert_eq!(v["whole"]["n"], 0);
        let states: Vec<&str> =
            v["sweep"].as_array().unwrap().iter().map(|r| r["state"].as_str().unwrap()).collect();
        assert_eq!(states, ["stored", "running"]);
        assert_eq!(v["sweep"][0]["id"], 7);
    }

    /// An open loop asked 1,000 requests a second: on schedule with a few due at a time, then
    /// falling behind (every connection busy, 300 due and unsent). The run's final counters,
    /// which do not keep the schedule's count, leave the last one standing.
    #[test]
    fn an_open_loop_behind_its_schedule_is_said() {
        let mut b = Board::new(info());
        let open = |s: u64, sent: u64, scheduled: u64, due_unsent: u64| Progress {
            scheduled,
            due_unsent,
            ..at(s, sent, sent)
        };
        b.event(&Event::Progress(&open(1, 1000, 1000, 3)));
        b.event(&Event::Progress(&open(2, 2000, 2001, 1)));
        let (v, _) = b.update(&Seen::default());
        let t = &v["ticks"][1];
        assert_eq!((t["asked_ps"].as_f64(), t["due_unsent"].as_u64()), (Some(1001.0), Some(1)));
        assert_eq!(t["behind"], false, "{t}");
        b.event(&Event::Progress(&open(3, 2700, 3000, 300)));
        b.event(&Event::Progress(&Progress { due_unsent: 310, ..at(4, 3690, 3690) }));
        let (v, _) = b.update(&Seen::default());
        assert_eq!(v["ticks"][2]["behind"], true, "{}", v["ticks"][2]);
        let last = &v["ticks"][3];
        assert_eq!(
            (last["behind"].as_bool(), last["due_unsent"].as_u64()),
            (Some(true), Some(310))
        );
        // A closed loop says nothing of a schedule.
        let mut c = Board::new(info());
        c.event(&Event::Progress(&at(1, 1000, 1000)));
        let (v, _) = c.update(&Seen::default());
        assert!(v["ticks"][0].get("asked_ps").is_none() && v["ticks"][0]["behind"] == false);
    }
}
