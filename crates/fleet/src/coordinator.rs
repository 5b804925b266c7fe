//! The coordinator: one load over several agents. It starts every agent (copying itself over
//! when the remote one is missing or another build), splits the load, waits until every agent
//! is ready, measures each agent's clock, starts them all at one instant, follows them live
//! (progress, each second's histogram, silence), and merges their results exactly: counts and
//! histograms add, nothing is averaged. Any agent that cannot start stops the run before any
//! request; an agent lost mid-run leaves the others running and the result partial.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use qpslab_load::feed::{AgentLive, Event as FeedEvent, Feed};
use qpslab_load::report::{AgentRow, CoordinatorCost, RunMeta, StartSync};
use qpslab_load::wire::merge_parts;
use qpslab_load::{LoadConfig, LoadOptions, Progress, Report, RunResult};
use qpslab_sys::thread::CpuTime;

use crate::clock::{self, Exchange, Offset};
use crate::protocol::{Command, Event};
pub use crate::session::{FleetError, FleetOptions};
use crate::session::{Session, HELLO_WAIT};
use crate::spec;
use crate::transport::{Incoming, Place};

/// An agent silent this long during the run is lost.
pub const SILENCE: Duration = Duration::from_secs(3);
/// Ping rounds per agent for its clock offset.
pub const PINGS: u32 = 8;
/// How long stopped agents get to send their results before they are ended.
pub const STOP_GRACE: Duration = Duration::from_secs(3);

/// The merged run.
#[derive(Debug)]
pub struct Outcome {
    /// The totals over the agents that finished, with a row per agent.
    pub report: Report,
    /// The merged result (for `--hdr-out`).
    pub result: RunResult,
    /// Some agent did not finish: the totals are of the others.
    pub partial: bool,
    /// `--log` could not be written.
    pub log_error: Option<String>,
}

#[derive(Debug)]
enum State {
    Starting,
    Running,
    Done(Box<RunResult>, serde_json::Value),
    Lost(String),
    Failed(String),
}

/// One agent's run as the coordinator follows it (its process is the session's member of the
/// same index).
#[derive(Debug)]
struct Agent {
    ready: Option<(usize, usize)>,
    notes: Vec<String>,
    exchanges: Vec<Exchange>,
    offset: Option<Offset>,
    late_ns: Option<u64>,
    last_heard: Instant,
    progress: Progress,
    intervals: u32,
    state: State,
    /// Bytes of the load's files sent to it (none when it kept them from an earlier run).
    file_bytes: u64,
}

/// Runs `opts` over the agents of `fleet`. `stop` (Ctrl-C) stops every agent and keeps their
/// results.
pub fn run_load(
    opts: &LoadOptions,
    fleet: &FleetOptions,
    meta: &RunMeta,
    stop: &AtomicBool,
    feed: &mut dyn Feed,
) -> Result<Outcome, FleetError> {
    // Seeds picked once: every agent shuffles the same way and writes the same {rand}.
    let opts = &opts.with_seeds();
    // A gRPC schema goes compiled: the agents' hosts need not have its files.
    let opts = &qpslab_load::grpc::portable(opts).map_err(|e| FleetError::Usage(e.to_string()))?;
    // The totals' configuration, checked here first: a bad flag fails before any ssh. CPU
    // lists are the agents' machines' to check.
    let total_opts = LoadOptions { cpus: None, log: None, ..opts.clone() };
    let mut total =
        LoadConfig::from_options(&total_opts).map_err(|e| FleetError::Usage(e.to_string()))?;
    let weights: Vec<u32> = fleet.hosts.iter().map(|h| h.weight).collect();
    let mut specs = spec::split(opts, &weights).map_err(|e| FleetError::Usage(e.to_string()))?;
    for (s, h) in specs.iter_mut().zip(&fleet.hosts) {
        if let Place::Local { cpus: Some(c) } = &h.place {
            s.cpus = Some(c.clone());
        }
    }
    feed.event(&FeedEvent::Phase(&format!("starting {} agents", fleet.hosts.len())));
    let session = Session::open(fleet, "--agents", stop)?;
    let mut c = Coordinator::new(session, stop);
    for (i, mut s) in specs.into_iter().enumerate() {
        // The big files go apart, and only to the agents that ask for them.
        let (files, texts) = crate::files::detach(&mut s);
        c.files.extend(texts);
        c.session.send(i, &Command::Load { spec: Box::new(s), files });
    }
    feed.event(&FeedEvent::Phase("agents preparing (resolving, opening connections)"));
    c.await_ready(opts)?;
    c.measure_clocks()?;
    let lead = c.start()?;
    // The measured window begins after the agents' warm-up.
    feed.event(&FeedEvent::Starting { lead: lead + opts.warmup.unwrap_or_default() });
    let (cpu0, t0) = (CpuTime::of_current_process(), Instant::now() + lead);
    let merged = c.follow(feed);
    let wall = t0.elapsed().as_secs_f64();
    let cpu = CpuTime::of_current_process().since(cpu0).total().as_secs_f64();
    c.cost = Some(CoordinatorCost {
        cpu_s: cpu,
        cpu_share: if wall > 0.0 { cpu / wall } else { 0.0 },
        intervals: c.merges,
        merge_us_per_interval: if c.merges > 0 {
            c.merge_time.as_secs_f64() * 1e6 / c.merges as f64
        } else {
            0.0
        },
    });
    c.session.close_all(Duration::from_secs(2));
    c.finish(opts, &mut total, meta, lead, merged)
}

struct Coordinator<'a> {
    session: Session<'a>,
    stop: &'a AtomicBool,
    agents: Vec<Agent>,
    epoch: Instant,
    merges: u64,
    merge_time: Duration,
    cost: Option<CoordinatorCost>,
    /// The load's files taken out of the agents' options, by digest.
    files: BTreeMap<String, String>,
}

impl<'a> Coordinator<'a> {
    fn new(session: Session<'a>, stop: &'a AtomicBool) -> Self {
        let now = Instant::now();
        let agents = session
            .members
            .iter()
            .map(|_| Agent {
                ready: None,
                notes: Vec::new(),
                exchanges: Vec::new(),
                offset: None,
                late_ns: None,
                last_heard: now,
                progress: Progress::default(),
                intervals: 0,
                state: State::Starting,
                file_bytes: 0,
            })
            .collect();
        Self {
            session,
            stop,
            agents,
            epoch: now,
            merges: 0,
            merge_time: Duration::ZERO,
            cost: None,
            files: BTreeMap::new(),
        }
    }

    fn await_ready(&mut self, opts: &LoadOptions) -> Result<(), FleetError> {
        // Opening every connection may take up to the connect timeout, and then some.
        let connect = opts.connect_timeout.unwrap_or(opts.timeout);
        let mut deadline = Instant::now() + connect + HELLO_WAIT;
        while self.agents.iter().any(|a| a.ready.is_none()) {
            let Some((i, _, what)) = self.session.next(deadline) else {
                self.session.stopped()?;
                let late = self.agents.iter().position(|a| a.ready.is_none()).unwrap_or(0);
                return Err(self.session.start_error(late, "it did not get ready in time"));
            };
            match what {
                Incoming::Event(Event::Ready { threads, connections, notes }) => {
                    let a = &mut self.agents[i];
                    a.ready = Some((threads, connections));
                    a.notes = notes;
                }
                Incoming::Event(Event::Need { sha256 }) => {
                    for sha in sha256 {
                        let Some(text) = self.files.get(&sha) else { continue };
                        self.agents[i].file_bytes += text.len() as u64;
                        let file = Command::File { sha256: sha, text: text.clone() };
                        self.session.send(i, &file);
                    }
                    // The transfer is not the agent's set-up time.
                    deadline = Instant::now() + connect + HELLO_WAIT;
                }
                other => {
                    if let Some(e) = self.session.start_fault(i, &other) {
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }

    fn now_ns(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// [`PINGS`] rounds to every agent at once; each agent's offset from its tightest round.
    fn measure_clocks(&mut self) -> Result<(), FleetError> {
        for round in 0..PINGS {
            // Each agent's own send time: a ping written after others' is not a longer trip.
            let epoch = self.epoch;
            let mut sent_at = Vec::with_capacity(self.agents.len());
            for i in 0..self.agents.len() {
                sent_at.push(Instant::now().saturating_duration_since(epoch));
                self.session.send(i, &Command::Ping { id: round });
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            let mut answered = vec![false; self.agents.len()];
            while answered.iter().any(|x| !x) {
                let Some((i, at, what)) = self.session.next(deadline) else {
                    self.session.stopped()?;
                    let late = answered.iter().position(|x| !x).unwrap_or(0);
                    return Err(self.session.start_error(late, "no answer to a ping in 5 s"));
                };
                match what {
                    Incoming::Event(Event::Pong { id, clock_ns }) if id == round => {
                        answered[i] = true;
                        let received_ns = self.now_ns(at);
                        let sent_ns = u64::try_from(sent_at[i].as_nanos()).unwrap_or(u64::MAX);
                        let e = Exchange { sent_ns, agent_ns: clock_ns, received_ns };
                        self.agents[i].exchanges.push(e);
                    }
                    other => {
                        if let Some(e) = self.session.start_fault(i, &other) {
                            return Err(e);
                        }
                    }
                }
            }
        }
        for a in &mut self.agents {
            a.offset = clock::estimate(&a.exchanges);
        }
        Ok(())
    }

    /// Sends the start instant, far enough ahead for every agent to get it in time.
    fn start(&mut self) -> Result<Duration, FleetError> {
        self.session.stopped()?;
        let max_rtt = self.agents.iter().filter_map(|a| a.offset).map(|o| o.rtt_ns).max();
        let lead = Duration::from_millis(200).max(Duration::from_nanos(max_rtt.unwrap_or(0) * 4));
        let at = self.now_ns(Instant::now() + lead);
        let now = Instant::now();
        for (i, a) in self.agents.iter_mut().enumerate() {
            let at_ns = a.offset.map_or(at, |o| o.to_agent(at));
            self.session.send(i, &Command::Start { at_ns });
            a.state = State::Running;
            // Silence counts from the start instant.
            a.last_heard = now + lead;
        }
        Ok(lead)
    }

    /// Follows the run to its end; returns each second's latency merged over agents.
    fn follow(&mut self, feed: &mut dyn Feed) -> BTreeMap<u32, Histogram<u64>> {
        let mut merged: BTreeMap<u32, Histogram<u64>> = BTreeMap::new();
        // Seconds merged over every agent and told to the feed, from 0.
        let mut told = 0u32;
        let mut stop_sent: Option<Instant> = None;
        let mut shown = Instant::now();
        while self.agents.iter().any(|a| matches!(a.state, State::Running)) {
            if stop_sent.is_none() && self.stop.load(Ordering::Relaxed) {
                for i in 0..self.agents.len() {
                    self.session.send(i, &Command::Stop);
                }
                stop_sent = Some(Instant::now());
            }
            let now = Instant::now();
            for i in 0..self.agents.len() {
                let a = &mut self.agents[i];
                let silent = now.saturating_duration_since(a.last_heard);
                let late_stop = stop_sent.is_some_and(|s| now.duration_since(s) > STOP_GRACE);
                if matches!(a.state, State::Running) && (silent > SILENCE || late_stop) {
                    let why = if late_stop {
                        format!("no result {} s after the stop", STOP_GRACE.as_secs())
                    } else {
                        format!("silent for {} s", SILENCE.as_secs())
                    };
                    a.state = State::Lost(why);
                    self.session.kill(i);
                }
            }
            if now.duration_since(shown) >= Duration::from_secs(1) {
                shown = now;
                feed.event(&FeedEvent::Progress(&self.summed()));
                feed.event(&FeedEvent::Agents(&self.live()));
                told = self.tell_seconds(&merged, told, feed);
            }
            let Some((i, at, what)) = self.session.recv(Duration::from_millis(100)) else {
                continue;
            };
            let a = &mut self.agents[i];
            a.last_heard = at;
            match what {
                Incoming::Event(Event::Started { late_ns }) => a.late_ns = Some(late_ns),
                Incoming::Event(Event::Progress { progress }) => a.progress = *progress,
                Incoming::Event(Event::Interval { index, hist }) => {
                    let t = Instant::now();
                    if let Ok(h) = qpslab_load::hlog::decode(&hist) {
                        let slot =
                            merged.entry(index).or_insert_with(qpslab_load::stats::new_histogram);
                        let _ = slot.add(&h);
                    }
                    a.intervals = a.intervals.max(index + 1);
                    self.merges += 1;
                    self.merge_time += t.elapsed();
                }
                Incoming::Event(Event::Done { part, report }) => {
                    a.state = State::Done(part, report);
                }
                Incoming::Event(Event::Error { message, .. }) => {
                    if matches!(a.state, State::Running) {
                        a.state = State::Failed(message);
                    }
                }
                Incoming::Closed => {
                    if matches!(a.state, State::Running) {
                        let why = self.session.why_closed(i);
                        self.agents[i].state = State::Lost(why);
                    }
                }
                _ => {}
            }
        }
        // The agents' final counters (each sends them before its result), and their rows.
        feed.event(&FeedEvent::Progress(&self.summed()));
        feed.event(&FeedEvent::Agents(&self.live()));
        if feed.wants_seconds() {
            for (index, hist) in merged.range(told..) {
                feed.event(&FeedEvent::Second { index: *index, hist });
            }
        }
        merged
    }

    /// Tells the feed the seconds every agent still running has handed over (merged over all
    /// agents), from `told`; returns the next second to tell.
    fn tell_seconds(
        &self,
        merged: &BTreeMap<u32, Histogram<u64>>,
        mut told: u32,
        feed: &mut dyn Feed,
    ) -> u32 {
        if !feed.wants_seconds() {
            return told;
        }
        let done_below = self
            .agents
            .iter()
            .filter(|a| matches!(a.state, State::Running))
            .map(|a| a.intervals)
            .min()
            .unwrap_or(u32::MAX);
        while told < done_below {
            let Some(hist) = merged.get(&told) else { break };
            feed.event(&FeedEvent::Second { index: told, hist });
            told += 1;
        }
        told
    }

    /// Where each agent is.
    fn live(&self) -> Vec<AgentLive> {
        self.agents
            .iter()
            .zip(&self.session.members)
            .map(|(a, m)| AgentLive {
                host: m.host.name.clone(),
                state: match a.state {
                    State::Starting => "preparing",
                    State::Running => "running",
                    State::Done(..) => "done",
                    State::Lost(_) => "lost",
                    State::Failed(_) => "failed",
                },
                progress: a.progress,
            })
            .collect()
    }

    /// The live counters of all agents, summed (the elapsed time is the furthest along).
    fn summed(&self) -> Progress {
        let mut p = Progress::default();
        for a in &self.agents {
            p.absorb(&a.progress);
        }
        p
    }

    fn finish(
        &mut self,
        opts: &LoadOptions,
        total: &mut LoadConfig,
        meta: &RunMeta,
        lead: Duration,
        merged: BTreeMap<u32, Histogram<u64>>,
    ) -> Result<Outcome, FleetError> {
        let rows: Vec<AgentRow> =
            self.agents.iter().zip(&self.session.members).map(|(a, m)| row(a, m)).collect();
        let partial = !self.agents.iter().all(|a| matches!(a.state, State::Done(..)));
        let done = self.agents.iter().filter(|a| matches!(a.state, State::Done(..)));
        total.threads = done.clone().filter_map(|a| a.ready).map(|r| r.0).sum();
        total.connections = done.filter_map(|a| a.ready).map(|r| r.1).sum();
        let synced: Vec<(Offset, u64)> =
            self.agents.iter().filter_map(|a| Some((a.offset?, a.late_ns?))).collect();
        let mut parts = Vec::new();
        for a in &mut self.agents {
            if let State::Done(r, _) = std::mem::replace(&mut a.state, State::Starting) {
                parts.push(*r);
            }
        }
        if parts.is_empty() {
            let why: Vec<String> = rows
                .iter()
                .map(|r| format!("{}: {}", r.host, r.error.as_deref().unwrap_or(r.status)))
                .collect();
            return Err(FleetError::Failed(format!("no agent finished ({})", why.join("; "))));
        }
        let result = merge_parts(&parts);
        let mut report = Report::new(total, &result, meta);
        if rows.iter().any(|r| r.verdict.as_deref() == Some("generator-bound")) {
            report.generator.verdict = "generator-bound";
        }
        report.start =
            Some(StartSync { skew_bound_ms: ms(clock::skew_bound(&synced)), lead_ms: ms(lead) });
        report.agents = Some(rows);
        report.coordinator = self.cost.take();
        report.partial = Some(partial);
        if partial {
            report.check.passed = false;
            report.check.reason = Some("partial: not every agent finished".into());
        }
        let log_error = match &opts.log {
            Some(path) => write_log(path, &result, merged).err(),
            None => None,
        };
        Ok(Outcome { report, result, partial, log_error })
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// An agent's row: from its result when it finished, else from its last progress.
fn row(a: &Agent, m: &crate::session::Member) -> AgentRow {
    let (threads, connections) = a.ready.unwrap_or((0, 0));
    let offset = a.offset.unwrap_or(Offset { offset_ns: 0, rtt_ns: 0 });
    let mut r = AgentRow {
        host: m.host.name.clone(),
        hostname: m.hello.as_ref().map_or(String::new(), |h| h.hostname.clone()),
        weight: m.host.weight,
        status: "done",
        error: None,
        threads,
        connections,
        sent: a.progress.sent,
        completed: a.progress.completed,
        ok: None,
        failed: a.progress.failed,
        throughput_rps: 0.0,
        duration_s: a.progress.elapsed.as_secs_f64(),
        busy_ratio: None,
        verdict: None,
        clock_offset_ms: offset.offset_ns as f64 / 1e6,
        rtt_ms: offset.rtt_ns as f64 / 1e6,
        started_late_ms: a.late_ns.map_or(0.0, |l| l as f64 / 1e6),
        file_bytes: a.file_bytes,
        latency_hdr: None,
    };
    match &a.state {
        State::Done(res, report) => {
            r.status = if res.stopped_early { "stopped" } else { "done" };
            r.sent = res.rec.sent;
            r.completed = res.rec.completed;
            r.ok = Some(res.rec.ok);
            r.failed = res.rec.failed;
            r.duration_s = res.duration.as_secs_f64();
            let g = &report["generator"];
            r.busy_ratio = g["busy_ratio"].as_f64();
            r.verdict = g["verdict"].as_str().map(str::to_string);
            r.latency_hdr = report["latency_hdr"].as_str().map(str::to_string);
        }
        State::Lost(why) => {
            r.status = "lost";
            r.error = Some(why.clone());
        }
        State::Failed(why) => {
            r.status = "failed";
            r.error = Some(why.clone());
        }
        State::Starting | State::Running => r.status = "lost",
    }
    if r.duration_s > 0.0 {
        r.throughput_rps = r.completed as f64 / r.duration_s;
    }
    r
}

/// `--log` over agents: each second's histogram merged over agents, the last one as long as
/// the merged run.
fn write_log(
    path: &Path,
    result: &RunResult,
    merged: BTreeMap<u32, Histogram<u64>>,
) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut w = qpslab_load::hlog::HlogWriter::create(path).map_err(fail)?;
    w.begin(result.started_at).map_err(fail)?;
    let last = merged.keys().next_back().copied();
    for (i, h) in merged {
        let start = Duration::from_secs(u64::from(i));
        let length = if Some(i) == last {
            result.duration.saturating_sub(start).max(Duration::from_millis(1))
        } else {
            Duration::from_secs(1)
        };
        w.write(&h, start, length).map_err(fail)?;
    }
    w.finish().map_err(fail)
}
