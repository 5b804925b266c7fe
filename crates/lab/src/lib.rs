//! qpslab's experiment orchestration. [`bench`] is the main job: start a target on loopback (the
//! built-in server or nginx) on half of the CPUs, warm up, run the load pinned to the other
//! half while the doctor samples, and return one report: the load result, each side's CPU and
//! the findings. With a URL, only load + doctor. Sweeps and the results store are planned.

pub mod split;
pub mod target;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use qpslab_host::doctor::{diagnose, summarize, Context, Finding, Summary};
use qpslab_host::sample::{sample_until, ticks_per_second, Role, Watch};
use qpslab_host::{Host, Root};
use qpslab_load::report::RunMeta;
use qpslab_load::{LoadConfig, LoadError, LoadOptions, Progress, Report};
use serde::Serialize;

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

/// What to bench.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// An external target: load + doctor only.
    pub url: Option<String>,
    pub target: TargetKind,
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
    pub pids: Vec<u32>,
    /// CPUs the server workers are pinned to (empty for an external URL).
    pub cpus: Vec<usize>,
}

/// Everything a bench measured.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub target: TargetReport,
    /// CPUs the generator threads are pinned to.
    pub generator_cpus: Vec<usize>,
    /// Server and generator share CPUs (one usable CPU): the figures compete.
    pub cpus_shared: bool,
    /// CPUs used by the server processes and by this process (1.0 = one CPU), from the doctor.
    pub server_cpu: Option<f64>,
    pub generator_cpu: f64,
    /// Requests per server CPU-second.
    pub requests_per_server_cpu_s: Option<f64>,
    /// The load result (the design brief's fields).
    pub load: Report,
    pub doctor: DoctorReport,
}

/// The doctor's part of a bench.
#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    pub summary: Summary,
    pub findings: Vec<Finding>,
}

/// Runs a bench. `on_progress` sees the measured run's progress about once a second.
pub fn bench(
    opts: &BenchOptions,
    on_progress: &mut dyn FnMut(&Progress),
) -> Result<BenchReport, BenchError> {
    let root = Root::live();
    let host = Host::read(&root)?;
    let allowed = qpslab_sys::cpus::allowed_cpus();
    let (running, cpus) = match &opts.url {
        Some(_) => {
            (None, split::Split { server: Vec::new(), generator: allowed.clone(), shared: false })
        }
        None => {
            let cpus = split::split(&allowed, Some(&host));
            let running = match opts.target {
                TargetKind::Builtin => target::builtin(&opts.serve_exe, &cpus.server)?,
                TargetKind::Nginx => target::nginx(&cpus.server)?,
            };
            (Some(running), cpus)
        }
    };
    let url = match (&opts.url, &running) {
        (Some(u), _) => u.clone(),
        (None, Some(r)) => r.url(),
        (None, None) => return Err(BenchError::Usage("no target".into())),
    };
    let threads = cpus.generator.len().max(1);
    let list: Vec<String> = cpus.generator.iter().map(ToString::to_string).collect();
    let load_opts = |duration: Duration| LoadOptions {
        urls: vec![url.clone()],
        threads: Some(threads),
        connections: Some(opts.connections.unwrap_or(100 * threads)),
        duration: Some(duration),
        cpus: Some(list.join(",")),
        ..LoadOptions::default()
    };
    let cfg = LoadConfig::from_options(&load_opts(opts.duration))
        .map_err(|e| BenchError::Usage(e.to_string()))?;
    qpslab_load::preflight(&cfg).map_err(|e| match e {
        LoadError::Config(_) | LoadError::Unreachable { .. } => BenchError::Usage(e.to_string()),
        other => BenchError::Load(other),
    })?;
    if !opts.warmup.is_zero() {
        let warm = LoadConfig::from_options(&load_opts(opts.warmup))
            .map_err(|e| BenchError::Usage(e.to_string()))?;
        qpslab_load::run(&warm, &mut |_| {}).map_err(BenchError::Load)?;
    }
    let server_pids = running.as_ref().map(|r| r.pids.clone()).unwrap_or_default();
    let mut watch: Vec<Watch> =
        server_pids.iter().map(|&pid| Watch { pid, role: Role::Server }).collect();
    watch.push(Watch { pid: std::process::id(), role: Role::Client });
    let irqs = host.nics.iter().flat_map(|n| n.irq_numbers()).collect();
    let done = AtomicBool::new(false);
    let (samples, result) = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            sample_until(&root, &irqs, &watch, opts.interval, || done.load(Ordering::Relaxed))
        });
        let result = qpslab_load::run(&cfg, on_progress);
        done.store(true, Ordering::Relaxed);
        let samples = sampler.join().unwrap_or_else(|_| Ok(Vec::new()));
        (samples, result)
    });
    let (samples, result) = (samples?, result.map_err(BenchError::Load)?);
    if let Some(r) = running.as_ref() {
        // A target that died mid-run makes every figure meaningless.
        if !server_pids.iter().all(|p| std::path::Path::new(&format!("/proc/{p}")).exists()) {
            return Err(BenchError::Target(format!("the {} target exited during the run", r.kind)));
        }
    }
    let load = Report::new(&cfg, &result, &opts.meta);
    let roles: BTreeMap<u32, Role> = watch.iter().map(|w| (w.pid, w.role)).collect();
    let summary = summarize(&samples, &roles, ticks_per_second());
    let ctx = Context {
        request_rates: Some(load.intervals.iter().map(|i| i.rps).collect()),
        addr_not_available: if load
            .error_examples
            .get("connect")
            .is_some_and(|m| m.contains("assign requested address"))
        {
            load.errors.get("connect").copied().unwrap_or(0)
        } else {
            0
        },
        journal_active: root.path(qpslab_host::doctor::JOURNAL).exists(),
    };
    let findings = diagnose(&host, &samples, &summary, &ctx);
    let side =
        |r: Role| summary.processes.iter().filter(|p| p.role == r).map(|p| p.cpu).sum::<f64>();
    let server_cpu = running.as_ref().map(|_| side(Role::Server));
    let target = TargetReport {
        kind: running.as_ref().map_or("url", |r| r.kind),
        url,
        pids: server_pids,
        cpus: cpus.server.clone(),
    };
    if let Some(r) = running {
        r.stop();
    }
    Ok(BenchReport {
        requests_per_server_cpu_s: server_cpu
            .filter(|&c| c > 0.0)
            .map(|c| load.requests.completed as f64 / (c * summary.duration_s.max(1e-9))),
        server_cpu,
        generator_cpu: side(Role::Client),
        generator_cpus: cpus.generator,
        cpus_shared: cpus.shared,
        target,
        load,
        doctor: DoctorReport { summary, findings },
    })
}

/// The one-screen summary of a bench.
pub fn render_text(r: &BenchReport) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let l = &r.load;
    let ms = |us: u64| {
        if us >= 1000 {
            format!("{:.2}ms", us as f64 / 1000.0)
        } else {
            format!("{us}us")
        }
    };
    let list = |v: &[usize]| v.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
    let target = match r.target.kind {
        "url" => r.target.url.clone(),
        kind => format!(
            "{kind} server on {} ({} worker(s) on CPU {})",
            r.target.url,
            r.target.cpus.len(),
            list(&r.target.cpus)
        ),
    };
    let _ = writeln!(o, "target      {target}");
    let _ = writeln!(
        o,
        "generator   qpslab load, {} thread(s) on CPU {}, {} connections, {:.1}s{}",
        l.config.threads,
        list(&r.generator_cpus),
        l.config.connections,
        l.duration_s,
        if r.cpus_shared { " (sharing the server's CPU: figures compete)" } else { "" }
    );
    let _ = writeln!(
        o,
        "throughput  {:.0} requests/s ({} ok, {} failed, {} bad status)",
        l.throughput_rps, l.requests.ok, l.requests.failed, l.requests.bad_status
    );
    let lat = &l.latency_us;
    let _ = writeln!(
        o,
        "latency     p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
        ms(lat.p50),
        ms(lat.p90),
        ms(lat.p99),
        ms(lat.p999),
        ms(lat.max)
    );
    let server = r.server_cpu.map_or("-".to_string(), |c| format!("{c:.2} CPUs"));
    let _ = writeln!(o, "cpu         server {server}, generator {:.2} CPUs", r.generator_cpu);
    if let Some(per) = r.requests_per_server_cpu_s {
        let _ = writeln!(o, "efficiency  {per:.0} requests per server CPU-second");
    }
    o.push_str(&qpslab_host::render::findings_text(&r.doctor.findings));
    o
}
