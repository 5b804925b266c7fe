//! `qpslab bench`: the options and their rules, the run (target, warm-up, load and doctor
//! together) and the report.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use qpslab_host::doctor::Context;
use qpslab_host::sample::Role;
use qpslab_host::{Diagnosis, Examination, Root};
use qpslab_load::report::RunMeta;
use qpslab_load::{LoadConfig, LoadError, LoadOptions, Progress, Report};
use serde::Serialize;

use crate::place::{self, Placement};

/// Why a bench could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The user's to fix (exit 2): a bad flag, nginx missing, target unreachable.
    #[error("{0}")]
    Usage(String),
    /// The target failed to start or died.
    #[error("{0}")]
    Target(String),
    #[error(transparent)]
    Load(LoadError),
    #[error("doctor: {0}")]
    Doctor(#[from] qpslab_host::ReadError),
}

/// Which server `bench` starts when no URL is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    Builtin,
    Nginx,
}

/// What to bench, as the user gave it.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// An external target: load + doctor only.
    pub url: Option<String>,
    /// The server to start without a URL: `builtin` or `nginx`.
    pub target: String,
    /// The server behind `url`, when the user names it (children and threads included);
    /// otherwise it is looked up in the kernel's socket table.
    pub server_pids: Vec<u32>,
    pub duration: Duration,
    /// Total connections [default: 100 per generator thread].
    pub connections: Option<usize>,
    pub warmup: Duration,
    /// Doctor sampling interval.
    pub interval: Duration,
    /// The qpslab executable, started as `serve` for the built-in target.
    pub serve_exe: PathBuf,
    pub meta: RunMeta,
}

/// The target side of a bench.
#[derive(Debug, Clone, Serialize)]
pub struct TargetReport {
    /// builtin, nginx or url.
    pub kind: &'static str,
    pub url: String,
    /// The server's processes followed by the doctor (empty when none was found).
    pub pids: Vec<u32>,
    /// How they were found: `started` (bench started the server), `listening` (the process
    /// holding the listening socket, from the kernel's socket table) or `--server-pid`.
    pub found_by: Option<&'static str>,
    /// CPUs the server's workers may run on (empty when not known).
    pub cpus: Vec<usize>,
}

/// Everything a bench measured.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub target: TargetReport,
    /// CPUs the generator threads are pinned to.
    pub generator_cpus: Vec<usize>,
    /// Server and generator share CPUs: the figures compete.
    pub cpus_shared: bool,
    /// CPUs used by the server processes and by this process (1.0 = one CPU), from the doctor.
    pub server_cpu: Option<f64>,
    pub generator_cpu: f64,
    /// Requests per server CPU-second.
    pub requests_per_server_cpu_s: Option<f64>,
    /// What the user should know about how the run was set up.
    pub notes: Vec<String>,
    /// The load result (the design brief's fields).
    pub load: Report,
    pub doctor: Diagnosis,
}

impl BenchOptions {
    /// Checks the options against each other; returns the server to start (None: a URL).
    pub fn validate(&self) -> Result<Option<TargetKind>, BenchError> {
        let usage = |m: &str| Err(BenchError::Usage(m.into()));
        let kind = match self.target.as_str() {
            "builtin" => TargetKind::Builtin,
            "nginx" => TargetKind::Nginx,
            other => return usage(&format!("--target {other:?}: use builtin or nginx")),
        };
        if self.url.is_some() && kind != TargetKind::Builtin {
            return usage("--target starts a server; it cannot be combined with a URL");
        }
        if self.url.is_none() && !self.server_pids.is_empty() {
            return usage("--server-pid names the server behind a URL; give the URL too (bench starts its own server otherwise)");
        }
        if self.duration.is_zero() {
            return usage("--duration must be more than 0 (e.g. 10s)");
        }
        if self.interval.is_zero() {
            return usage("--interval must be more than 0 (e.g. 1s)");
        }
        Ok(self.url.is_none().then_some(kind))
    }
}

/// Runs a bench until its duration, or until `stop` is set (a SIGINT handler may set it).
/// `on_progress` sees the measured run's progress about once a second.
pub fn bench(
    opts: &BenchOptions,
    stop: &AtomicBool,
    on_progress: &mut dyn FnMut(&Progress),
) -> Result<BenchReport, BenchError> {
    let kind = opts.validate()?;
    let root = Root::live();
    let mut exam = Examination::new(&root, opts.interval)?;
    let placed = match (&opts.url, kind) {
        (Some(url), _) => place::for_url(&root, exam.host(), url, &opts.server_pids)?,
        (None, kind) => {
            place::start_target(&opts.serve_exe, kind.unwrap_or(TargetKind::Builtin), exam.host())?
        }
    };
    let cfg = load_config(opts, &placed, opts.duration)?;
    qpslab_load::preflight(&cfg).map_err(|e| match e {
        LoadError::Config(_) | LoadError::Unreachable { .. } => BenchError::Usage(e.to_string()),
        other => BenchError::Load(other),
    })?;
    if !opts.warmup.is_zero() {
        let warm = load_config(opts, &placed, opts.warmup)?;
        qpslab_load::run(&warm, stop, &mut |_| {}).map_err(BenchError::Load)?;
    }
    for &pid in &placed.server_pids {
        exam.follow(pid, Role::Server);
    }
    exam.follow(std::process::id(), Role::Client);
    let done = AtomicBool::new(false);
    let (samples, result) = std::thread::scope(|s| {
        let sampler = s.spawn(|| exam.record(|| done.load(Ordering::Relaxed)));
        let result = qpslab_load::run(&cfg, stop, on_progress);
        done.store(true, Ordering::Relaxed);
        let samples = sampler.join().unwrap_or_else(|_| Ok(Vec::new()));
        (samples, result)
    });
    let (samples, result) = (samples?, result.map_err(BenchError::Load)?);
    if let Some(r) = &placed.running {
        // A target that died mid-run makes every figure meaningless.
        if !placed.server_pids.iter().all(|p| root.exists(&format!("proc/{p}"))) {
            return Err(BenchError::Target(format!("the {} target exited during the run", r.kind)));
        }
    }
    let load = Report::new(&cfg, &result, &opts.meta);
    let doctor = exam.diagnose(&samples, doctor_context(&load));
    Ok(report(placed, load, doctor))
}

/// What the load tells the doctor.
fn doctor_context(load: &Report) -> Context {
    let no_port =
        load.error_examples.get("connect").is_some_and(|m| m.contains("assign requested address"));
    Context {
        request_rates: Some(load.intervals.iter().map(|i| i.rps).collect()),
        responses: Some(load.requests.completed),
        addr_not_available: if no_port {
            load.errors.get("connect").copied().unwrap_or(0)
        } else {
            0
        },
        ..Context::default()
    }
}

fn report(placed: Placement, load: Report, doctor: Diagnosis) -> BenchReport {
    let side = |r: Role| {
        doctor.summary.processes.iter().filter(|p| p.role == r).map(|p| p.cpu).sum::<f64>()
    };
    let server_cpu = (!placed.server_pids.is_empty()).then(|| side(Role::Server));
    let window = doctor.summary.duration_s.max(1e-9);
    let target = TargetReport {
        kind: placed.running.as_ref().map_or("url", |r| r.kind),
        url: placed.url,
        pids: placed.server_pids,
        found_by: placed.found_by,
        cpus: placed.server_cpus,
    };
    if let Some(r) = placed.running {
        r.stop();
    }
    BenchReport {
        requests_per_server_cpu_s: server_cpu
            .filter(|&c| c > 0.0)
            .map(|c| load.requests.completed as f64 / (c * window)),
        server_cpu,
        generator_cpu: side(Role::Client),
        generator_cpus: placed.generator_cpus,
        cpus_shared: placed.shared,
        notes: placed.notes,
        target,
        load,
        doctor,
    }
}

/// The load: one thread per generator CPU, pinned, 100 connections each unless given.
fn load_config(
    opts: &BenchOptions,
    placed: &Placement,
    duration: Duration,
) -> Result<LoadConfig, BenchError> {
    let threads = placed.generator_cpus.len().max(1);
    let list: Vec<String> = placed.generator_cpus.iter().map(ToString::to_string).collect();
    let load_opts = LoadOptions {
        urls: vec![placed.url.clone()],
        threads: Some(threads),
        connections: Some(opts.connections.unwrap_or(100 * threads)),
        duration: Some(duration),
        cpus: Some(list.join(",")),
        ..LoadOptions::default()
    };
    LoadConfig::from_options(&load_opts).map_err(|e| BenchError::Usage(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> BenchOptions {
        BenchOptions {
            url: None,
            target: "builtin".into(),
            server_pids: Vec::new(),
            duration: Duration::from_secs(10),
            connections: None,
            warmup: Duration::from_secs(1),
            interval: Duration::from_secs(1),
            serve_exe: PathBuf::from("qpslab"),
            meta: RunMeta::default(),
        }
    }

    fn refusal(o: BenchOptions) -> String {
        match o.validate() {
            Err(BenchError::Usage(m)) => m,
            other => panic!("expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn options_that_exclude_each_other_are_refused_by_name() {
        assert!(matches!(opts().validate(), Ok(Some(TargetKind::Builtin))));
        let url = Some("http://127.0.0.1:8080/".to_string());
        assert!(matches!(BenchOptions { url: url.clone(), ..opts() }.validate(), Ok(None)));
        assert!(refusal(BenchOptions { target: "apache".into(), ..opts() }).starts_with("--target"));
        let both = BenchOptions { url: url.clone(), target: "nginx".into(), ..opts() };
        assert!(refusal(both).contains("cannot be combined with a URL"));
        let pid_alone = BenchOptions { server_pids: vec![1], ..opts() };
        assert!(refusal(pid_alone).starts_with("--server-pid names the server behind a URL"));
        assert!(
            refusal(BenchOptions { duration: Duration::ZERO, ..opts() }).starts_with("--duration")
        );
        assert!(
            refusal(BenchOptions { interval: Duration::ZERO, ..opts() }).starts_with("--interval")
        );
    }
}
