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

/// How the server's workers share the listening socket. The built-in server takes
/// `reuseport`, `shared` and `exclusive` (`qpslab serve --accept`); nginx takes `reuseport`
/// (`listen ... reuseport`), `shared` (one socket, `accept_mutex off`: the kernel wakes one
/// worker, EPOLLEXCLUSIVE) and `mutex` (one socket, `accept_mutex on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Accept {
    Reuseport,
    Shared,
    Exclusive,
    Mutex,
}

impl Accept {
    pub fn name(self) -> &'static str {
        match self {
            Self::Reuseport => "reuseport",
            Self::Shared => "shared",
            Self::Exclusive => "exclusive",
            Self::Mutex => "mutex",
        }
    }
}

/// The server bench starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    pub kind: TargetKind,
    /// Worker threads (builtin) or processes (nginx); default: one per server CPU.
    pub workers: Option<usize>,
    /// The server's CPUs; default: the first half of the cores.
    pub cpus: Option<Vec<usize>>,
    pub accept: Accept,
}

/// What to bench, as the user gave it (the long options of `qpslab bench`).
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// An external target: load + doctor only.
    pub url: Option<String>,
    /// The server to start without a URL: `builtin` or `nginx`.
    pub target: String,
    /// The server behind `url`, when the user names it (children and threads included);
    /// otherwise it is looked up in the kernel's socket table.
    pub server_pids: Vec<u32>,
    /// Server workers [default: one per server CPU].
    pub workers: Option<usize>,
    /// The server's CPUs, a cpulist [default: the first half of the cores].
    pub server_cpus: Option<String>,
    /// How the server's workers accept connections [default: reuseport].
    pub accept: Option<String>,
    pub duration: Duration,
    pub warmup: Duration,
    /// Load threads [default: one per generator CPU].
    pub threads: Option<usize>,
    /// Total connections [default: 100 per generator thread].
    pub connections: Option<usize>,
    /// Requests in flight per connection.
    pub pipeline: usize,
    /// Open loop at this rate (`N` or `A:B` as `qpslab load -R`).
    pub rate: Option<String>,
    pub conn_per_request: bool,
    /// Doctor sampling interval.
    pub interval: Duration,
    /// The qpslab executable, started as `serve` for the built-in target.
    pub serve_exe: PathBuf,
    pub meta: RunMeta,
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self {
            url: None,
            target: "builtin".into(),
            server_pids: Vec::new(),
            workers: None,
            server_cpus: None,
            accept: None,
            duration: Duration::from_secs(10),
            warmup: Duration::from_secs(1),
            threads: None,
            connections: None,
            pipeline: 1,
            rate: None,
            conn_per_request: false,
            interval: Duration::from_secs(1),
            serve_exe: PathBuf::from("qpslab"),
            meta: RunMeta::default(),
        }
    }
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
    /// A server bench started: its workers and accept mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accept: Option<&'static str>,
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
    pub fn validate(&self) -> Result<Option<ServerSpec>, BenchError> {
        let usage = |m: String| Err(BenchError::Usage(m));
        let kind = match self.target.as_str() {
            "builtin" => TargetKind::Builtin,
            "nginx" => TargetKind::Nginx,
            other => return usage(format!("--target {other:?}: use builtin or nginx")),
        };
        if self.duration.is_zero() {
            return usage("--duration must be more than 0 (e.g. 10s)".into());
        }
        if self.interval.is_zero() {
            return usage("--interval must be more than 0 (e.g. 1s)".into());
        }
        if self.url.is_some() {
            let server_flag = [
                (kind != TargetKind::Builtin, "--target"),
                (self.workers.is_some(), "--workers"),
                (self.server_cpus.is_some(), "--server-cpus"),
                (self.accept.is_some(), "--accept"),
            ];
            if let Some((_, flag)) = server_flag.iter().find(|(given, _)| *given) {
                return usage(format!(
                    "{flag} sets up the server bench starts; it cannot be combined with a URL"
                ));
            }
            return Ok(None);
        }
        if !self.server_pids.is_empty() {
            return usage("--server-pid names the server behind a URL; give the URL too (bench starts its own server otherwise)".into());
        }
        if self.workers == Some(0) {
            return usage("--workers must be at least 1".into());
        }
        let accept = match (kind, self.accept.as_deref().unwrap_or("reuseport")) {
            (_, "reuseport") => Accept::Reuseport,
            (_, "shared") => Accept::Shared,
            (TargetKind::Builtin, "exclusive") => Accept::Exclusive,
            (TargetKind::Nginx, "mutex") => Accept::Mutex,
            (TargetKind::Builtin, other) => {
                return usage(format!(
                    "--accept {other:?}: the built-in server takes reuseport, shared or exclusive"
                ))
            }
            (TargetKind::Nginx, other) => {
                return usage(format!("--accept {other:?}: nginx takes reuseport, shared or mutex"))
            }
        };
        let cpus = self
            .server_cpus
            .as_deref()
            .map(|l| qpslab_sys::cpus::usable_list(l, "--server-cpus"))
            .transpose()
            .map_err(|e| BenchError::Usage(e.to_string()))?;
        Ok(Some(ServerSpec { kind, workers: self.workers, cpus, accept }))
    }
}

/// Runs a bench until its duration, or until `stop` is set (a SIGINT handler may set it).
/// `on_progress` sees the measured run's progress about once a second.
pub fn bench(
    opts: &BenchOptions,
    stop: &AtomicBool,
    on_progress: &mut dyn FnMut(&Progress),
) -> Result<BenchReport, BenchError> {
    let server = opts.validate()?;
    let root = Root::live();
    let mut exam = Examination::new(&root, opts.interval)?;
    let placed = match (&opts.url, &server) {
        (Some(url), _) => place::for_url(&root, exam.host(), url, &opts.server_pids)?,
        (None, Some(spec)) => place::start_target(&opts.serve_exe, spec, exam.host())?,
        (None, None) => return Err(BenchError::Usage("no target".into())),
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
        workers: placed.workers,
        accept: placed.accept,
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

/// The load: one thread per generator CPU (or `--threads`), pinned, 100 connections each
/// unless given.
fn load_config(
    opts: &BenchOptions,
    placed: &Placement,
    duration: Duration,
) -> Result<LoadConfig, BenchError> {
    let threads = opts.threads.unwrap_or(placed.generator_cpus.len()).max(1);
    let list: Vec<String> = placed.generator_cpus.iter().map(ToString::to_string).collect();
    let load_opts = LoadOptions {
        urls: vec![placed.url.clone()],
        threads: Some(threads),
        connections: Some(opts.connections.unwrap_or(100 * threads)),
        duration: Some(duration),
        cpus: Some(list.join(",")),
        pipeline: opts.pipeline,
        rate: opts.rate.clone(),
        conn_per_request: opts.conn_per_request,
        ..LoadOptions::default()
    };
    LoadConfig::from_options(&load_opts).map_err(|e| BenchError::Usage(e.to_string()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    fn opts() -> BenchOptions {
        BenchOptions::default()
    }

    fn refusal(o: BenchOptions) -> String {
        match o.validate() {
            Err(BenchError::Usage(m)) => m,
            other => panic!("expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn options_that_exclude_each_other_are_refused_by_name() {
        let builtin = opts().validate().unwrap().unwrap();
        assert_eq!((builtin.kind, builtin.accept), (TargetKind::Builtin, Accept::Reuseport));
        let url = Some("http://127.0.0.1:8080/".to_string());
        assert!(matches!(BenchOptions { url: url.clone(), ..opts() }.validate(), Ok(None)));
        let with_url = |o: BenchOptions| refusal(BenchOptions { url: url.clone(), ..o });
        assert!(with_url(BenchOptions { workers: Some(2), ..opts() }).starts_with("--workers"));
        assert!(with_url(BenchOptions { accept: Some("shared".into()), ..opts() })
            .starts_with("--accept"));
        let nginx =
            |a: &str| BenchOptions { target: "nginx".into(), accept: Some(a.into()), ..opts() };
        assert_eq!(nginx("mutex").validate().unwrap().unwrap().accept, Accept::Mutex);
        assert!(refusal(nginx("exclusive")).contains("nginx takes reuseport, shared or mutex"));
        let cpus = BenchOptions { server_cpus: Some("100000".into()), ..opts() };
        assert!(refusal(cpus).starts_with("--server-cpus"));
        assert!(refusal(BenchOptions { workers: Some(0), ..opts() }).starts_with("--workers"));
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
