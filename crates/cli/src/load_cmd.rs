//! `qpslab load`: options in, report out.

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Context;
use qpslab_host::{facts, Root};

use qpslab_load::feed::{Event, Feed};
use qpslab_load::report::{encode_histogram, HostInfo, RunMeta};
use qpslab_load::{LoadConfig, LoadOptions, Progress, Report, RunResult};

use qpslab_live::{Live, RunInfo};
use qpslab_runs::select::Selector;

use crate::args::LoadArgs;
use crate::{live_cmd, output, Outcome, UsageError};

pub fn run(a: LoadArgs) -> anyhow::Result<Outcome> {
    let keep = Keep::of(&a);
    let (agents, ssh, agent_exe) = (a.agents.clone(), a.ssh.clone(), a.agent_exe.clone());
    let live_args = a.live.clone();
    let opts = LoadOptions { urls: a.urls, ..a.load };
    let per_request = a.per_request.clone();
    if let Some(path) = &per_request {
        if agents.is_some() {
            return Err(UsageError(
                "--per-request: not with --agents yet (each agent counts its own); drop one".into(),
            )
            .into());
        }
        // Before the run: a file that cannot be written must not cost the run.
        std::fs::File::create(path).map_err(|e| {
            UsageError(format!(
                "--per-request {}: cannot write it ({e}); name a writable file",
                path.display()
            ))
        })?;
    }
    let ci = crate::ci_out::CiOut::open(&a.ci)?;
    if let Some(list) = &agents {
        return over_agents(list, ssh.as_deref(), agent_exe, &opts, (&keep, ci), &live_args);
    }
    let cfg = LoadConfig::from_options(&opts).map_err(|e| UsageError(e.to_string()))?;
    // A taken --live address is refused before the target is even contacted.
    let live = live_cmd::start(&live_args, RunInfo::new("load", &opts.urls, false))?;
    qpslab_load::preflight(&cfg).map_err(|e| UsageError(e.to_string()))?;
    // Notes once the run will go: a refusal is its one line.
    for note in &cfg.notes {
        eprintln!("qpslab: note: {note}");
    }
    if let Some(w) = cfg.port_budgets().first().and_then(|b| b.warning()) {
        eprintln!("qpslab: warning: {w}");
    }
    let mut store = keep.open()?;
    let stop = qpslab_sys::signals::stop_flag()?;
    let mut progress = ProgressLine::new();
    let result = {
        let mut tee = live.as_ref().map(|l| l.tee(&mut progress));
        let feed: &mut dyn Feed = match &mut tee {
            Some(t) => t,
            None => &mut progress,
        };
        qpslab_load::run(&cfg, stop, feed)
    };
    let result = result.map_err(|e| {
        if e.is_setup() {
            anyhow::Error::new(UsageError(e.to_string()))
        } else {
            anyhow::Error::new(e)
        }
    })?;
    progress.finish();
    let meta = run_meta();
    let report = Report::new(&cfg, &result, &meta);
    if let Some(path) = &per_request {
        std::fs::write(path, qpslab_load::report::per_request_csv(&cfg, &result))
            .map_err(|e| anyhow::anyhow!("--per-request {}: {e}", path.display()))?;
    }
    let id = keep.finish(&mut store, &report, &result, &meta)?;
    ci_write(ci, &report)?;
    let html = live_report(live.as_ref(), store.as_ref(), id, &report, &meta);
    live_cmd::finish(live, report.check.passed, live_cmd::summary(&report), html);
    if let (Some(e), Some(path)) = (&result.log_error, &cfg.log) {
        eprintln!("qpslab: error: --log: writing {} failed: {e}", path.display());
        return Ok(Outcome::ChecksFailed);
    }
    Ok(if report.check.passed { Outcome::Passed } else { Outcome::ChecksFailed })
}

/// The run's checks to `--junit` and the Markdown summaries.
fn ci_write(ci: crate::ci_out::CiOut, r: &Report) -> anyhow::Result<()> {
    let name = r.targets.join(" ");
    ci.write(("load", &name), &[(name.clone(), r, r.render_text())])
}

/// What becomes of a finished run: `--hdr-out`, the store, the summary.
struct Keep {
    hdr_out: Option<std::path::PathBuf>,
    save: bool,
    store: crate::args::StoreArg,
    label: Option<String>,
    json: bool,
}

impl Keep {
    fn of(a: &LoadArgs) -> Self {
        Self {
            hdr_out: a.hdr_out.clone(),
            save: a.save,
            store: crate::args::StoreArg { store: a.store.store.clone() },
            label: a.label.clone(),
            json: a.json,
        }
    }

    /// The store, opened before the run so that a store that cannot be opened costs no run.
    fn open(&self) -> anyhow::Result<Option<qpslab_runs::store::Store>> {
        Ok(if self.save { Some(crate::store_cmd::open(&self.store)?) } else { None })
    }

    fn finish(
        &self,
        store: &mut Option<qpslab_runs::store::Store>,
        report: &Report,
        result: &RunResult,
        meta: &RunMeta,
    ) -> anyhow::Result<Option<i64>> {
        if let Some(path) = &self.hdr_out {
            std::fs::write(path, encode_histogram(&result.rec.latency) + "\n")
                .with_context(|| format!("--hdr-out: cannot write {}", path.display()))?;
        }
        let mut id = None;
        if let Some(store) = store {
            let stored = store_run(store, report, meta, self.label.as_deref())
                .map_err(crate::store_cmd::store_error)?;
            eprintln!(
                "qpslab: stored as run {stored} in {} (qpslab runs show {stored})",
                store.path().display()
            );
            id = Some(stored);
        }
        output::emit(self.json, report, || report.render_text())?;
        Ok(id)
    }
}

fn store_run(
    store: &mut qpslab_runs::store::Store,
    report: &Report,
    meta: &RunMeta,
    label: Option<&str>,
) -> Result<i64, qpslab_runs::store::StoreError> {
    let provenance = qpslab_lab::record::Provenance::read(meta, None);
    qpslab_lab::record::store_load(store, report, &report.render_text(), label, &provenance)
}

/// With a live page: the run's report, as `qpslab report` draws it (from the store when the
/// run was kept, else from a store in memory).
fn live_report(
    live: Option<&Live>,
    store: Option<&qpslab_runs::store::Store>,
    id: Option<i64>,
    report: &Report,
    meta: &RunMeta,
) -> Option<String> {
    live?.url()?;
    let title = "qpslab: 1 run(s)".to_string();
    if let (Some(store), Some(id)) = (store, id) {
        return live_cmd::report_of(store, &Selector::Runs(vec![id]), title);
    }
    let mut scratch = live_cmd::scratch_store()?;
    let id = store_run(&mut scratch, report, meta, None).ok()?;
    live_cmd::report_of(&scratch, &Selector::Runs(vec![id]), title)
}

/// `load --agents`: the same load over agents, merged.
fn over_agents(
    list: &str,
    ssh: Option<&str>,
    agent_exe: Option<String>,
    opts: &LoadOptions,
    (keep, ci): (&Keep, crate::ci_out::CiOut),
    live_args: &crate::args::LiveArgs,
) -> anyhow::Result<Outcome> {
    use qpslab_fleet::coordinator::{self, FleetError, FleetOptions};
    let meta = run_meta();
    let fleet = FleetOptions {
        hosts: qpslab_fleet::transport::parse_agents(list).map_err(UsageError)?,
        ssh: qpslab_fleet::transport::ssh_command(ssh).map_err(UsageError)?,
        agent_exe,
        version: meta.version.clone(),
        hash: qpslab_fleet::identity::own_hash(),
    };
    let mut store = keep.open()?;
    let live = live_cmd::start(live_args, RunInfo::new("load", &opts.urls, true))?;
    let stop = qpslab_sys::signals::stop_flag()?;
    let mut progress = ProgressLine::new();
    let outcome = {
        let mut tee = live.as_ref().map(|l| l.tee(&mut progress));
        let feed: &mut dyn Feed = match &mut tee {
            Some(t) => t,
            None => &mut progress,
        };
        coordinator::run_load(opts, &fleet, &meta, stop, feed)
    };
    progress.finish();
    let outcome = outcome.map_err(|e| match e {
        FleetError::Usage(m) => anyhow::Error::new(UsageError(m)),
        FleetError::Failed(m) => anyhow::anyhow!(m),
    })?;
    let r = &outcome.report;
    let id = keep.finish(&mut store, r, &outcome.result, &meta)?;
    ci_write(ci, r)?;
    let html = live_report(live.as_ref(), store.as_ref(), id, r, &meta);
    live_cmd::finish(live, r.check.passed, live_cmd::summary(r), html);
    if let (Some(e), Some(_)) = (&outcome.log_error, &opts.log) {
        eprintln!("qpslab: error: --log: writing {e} failed");
        return Ok(Outcome::ChecksFailed);
    }
    Ok(if outcome.report.check.passed { Outcome::Passed } else { Outcome::ChecksFailed })
}

/// `qpslab agent`: serves one coordinator on stdin and stdout.
pub fn agent() -> anyhow::Result<Outcome> {
    let ssh_addr =
        std::env::var("SSH_CONNECTION").ok().and_then(|c| qpslab_fleet::agent::ssh_server_addr(&c));
    let info = qpslab_fleet::agent::AgentInfo {
        meta: run_meta(),
        hostname: qpslab_sys::system::hostname(),
        ssh_addr: ssh_addr.clone(),
    };
    // On a bench's server host the same agent starts the target and runs the doctor.
    let mut host = qpslab_lab::remote::HostAgent::new(std::env::current_exe()?, ssh_addr);
    let mut input = std::io::stdin().lock();
    qpslab_fleet::agent::serve(&info, &mut input, Box::new(std::io::stdout()), &mut host);
    Ok(Outcome::Passed)
}

/// Provenance for reports: version, git commit, command line, kernel, CPU.
pub fn run_meta() -> RunMeta {
    RunMeta {
        version: format!("{} ({})", env!("CARGO_PKG_VERSION"), env!("QPSLAB_GIT_COMMIT")),
        command: std::env::args().collect(),
        host: HostInfo {
            kernel: qpslab_sys::system::kernel_release(),
            cpu_model: facts::cpu_model(&Root::live()),
            online_cpus: qpslab_sys::system::online_cpus(),
        },
    }
}

/// The one-line progress display on stderr, shown only when stderr is a terminal.
pub struct ProgressLine {
    tty: bool,
    last: Progress,
}

impl ProgressLine {
    pub fn new() -> Self {
        Self { tty: std::io::stderr().is_terminal(), last: Progress::default() }
    }

    /// Redraws the line with the rate since the previous update.
    pub fn update(&mut self, p: &Progress) {
        if self.tty {
            print_progress(p, &self.last);
        }
        self.last = *p;
    }

    /// A phase before the run (agents starting, preparing).
    pub fn phase(&self, what: &str) {
        if self.tty {
            eprint!("\r\x1b[K{what}...");
        }
    }

    /// Clears the line before the results are printed.
    pub fn finish(&self) {
        if self.tty {
            eprint!("\r\x1b[K");
        }
    }
}

/// The progress line watches a load (here or over agents) or a bench.
impl Feed for ProgressLine {
    fn event(&mut self, e: &Event<'_>) {
        match e {
            Event::Phase(p) => self.phase(p),
            Event::Starting { lead } if !lead.is_zero() => {
                self.phase(&format!("starting in {} ms", lead.as_millis()));
            }
            Event::Progress(p) => self.update(p),
            _ => {}
        }
    }
}

fn print_progress(p: &Progress, last: &Progress) {
    if p.warming_up {
        eprint!("\r\x1b[Kwarming up...");
        return;
    }
    let rate = (p.completed.saturating_sub(last.completed)) as f64
        / (p.elapsed.saturating_sub(last.elapsed).max(Duration::from_millis(1))).as_secs_f64();
    eprint!(
        "\r\x1b[K[{:>4.0}s] sent {}  completed {}  rate {:.0}/s  errors {}",
        p.elapsed.as_secs_f64(),
        p.sent,
        p.completed,
        rate,
        p.failed
    );
}
