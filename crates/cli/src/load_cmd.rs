//! `qpslab load`: options in, report out.

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Context;
use qpslab_host::{facts, Root};
use qpslab_load::config::PollMode;
use qpslab_load::report::{encode_histogram, HostInfo, RunMeta};
use qpslab_load::{LoadConfig, LoadError, LoadOptions, Progress, Report};

use crate::args::{LoadArgs, PollArg};
use crate::{output, Outcome, UsageError};

pub fn run(a: LoadArgs) -> anyhow::Result<Outcome> {
    let opts = LoadOptions {
        urls: a.urls,
        threads: a.threads,
        connections: Some(a.connections),
        duration: a.duration,
        requests: a.requests,
        headers: a.headers,
        method: a.method,
        body: a.body,
        timeout: a.timeout,
        connect_timeout: a.connect_timeout,
        no_retry: a.no_retry,
        warmup: a.warmup,
        cpus: a.cpus,
        accept_status: a.accept_status,
        max_error_rate: a.max_error_rate,
        rate: a.rate,
        ramp: a.ramp,
        pipeline: a.pipeline,
        stages: a.stages,
        schedule: None,
        targets_file: a.targets,
        conn_per_request: a.conn_per_request,
        rst_close: a.rst_close,
        source: a.source,
        log: a.log,
        poll: match a.poll {
            PollArg::Auto => PollMode::Auto,
            PollArg::Spin => PollMode::Spin,
            PollArg::Sleep => PollMode::Sleep,
        },
    };
    let cfg = LoadConfig::from_options(&opts).map_err(|e| UsageError(e.to_string()))?;
    for note in &cfg.notes {
        eprintln!("qpslab: note: {note}");
    }
    qpslab_load::preflight(&cfg).map_err(|e| UsageError(e.to_string()))?;
    if let Some(w) = cfg.port_budgets().first().and_then(|b| b.warning()) {
        eprintln!("qpslab: warning: {w}");
    }
    let mut store = if a.save { Some(crate::store_cmd::open(&a.store)?) } else { None };
    let stop = qpslab_sys::signals::stop_flag()?;
    let mut progress = ProgressLine::new();
    let result =
        qpslab_load::run(&cfg, stop, &mut |p| progress.update(p)).map_err(|e| match e {
            LoadError::Config(_) | LoadError::Unreachable { .. } => {
                anyhow::Error::new(UsageError(e.to_string()))
            }
            other => anyhow::Error::new(other),
        })?;
    progress.finish();
    let meta = run_meta();
    let report = Report::new(&cfg, &result, &meta);
    if let Some(path) = &a.hdr_out {
        std::fs::write(path, encode_histogram(&result.rec.latency) + "\n")
            .with_context(|| format!("--hdr-out: cannot write {}", path.display()))?;
    }
    if let Some(store) = &mut store {
        let provenance = qpslab_lab::record::Provenance::read(&meta, None);
        let id = qpslab_lab::record::store_load(
            store,
            &report,
            &report.render_text(),
            a.label.as_deref(),
            &provenance,
        )
        .map_err(crate::store_cmd::store_error)?;
        eprintln!(
            "qpslab: stored as run {id} in {} (qpslab runs show {id})",
            store.path().display()
        );
    }
    output::emit(a.json, &report, || report.render_text())?;
    if let (Some(e), Some(path)) = (&result.log_error, &cfg.log) {
        eprintln!("qpslab: error: --log: writing {} failed: {e}", path.display());
        return Ok(Outcome::ChecksFailed);
    }
    Ok(if report.check.passed { Outcome::Passed } else { Outcome::ChecksFailed })
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

    /// Clears the line before the results are printed.
    pub fn finish(&self) {
        if self.tty {
            eprint!("\r\x1b[K");
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
