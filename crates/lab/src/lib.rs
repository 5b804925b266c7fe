//! qpslab's experiment orchestration. [`bench`] is the main job: start a target on loopback (the
//! built-in server or nginx) on half of the CPUs, or take a URL and find the server behind it,
//! warm up, run the load on CPUs the server does not use while the doctor samples, and return
//! one report: the load result, each side's CPU and the findings. Sweeps and the results store
//! are planned.

pub mod split;
pub mod target;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use qpslab_host::doctor::Context;
use qpslab_host::sample::Role;
use qpslab_host::{CpuSet, Diagnosis, Examination, Host, Root};
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
    pub serve_exe: std::path::PathBuf,
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

/// Where each side runs: the server's processes and CPUs, the generator's CPUs.
struct Placement {
    running: Option<target::Running>,
    url: String,
    server_pids: Vec<u32>,
    found_by: Option<&'static str>,
    server_cpus: Vec<usize>,
    generator_cpus: Vec<usize>,
    shared: bool,
    notes: Vec<String>,
}

/// Runs a bench. `on_progress` sees the measured run's progress about once a second.
pub fn bench(
    opts: &BenchOptions,
    on_progress: &mut dyn FnMut(&Progress),
) -> Result<BenchReport, BenchError> {
    let root = Root::live();
    let mut exam = Examination::new(&root, opts.interval)?;
    let placed = match &opts.url {
        Some(url) => place_for_url(&root, exam.host(), url, &opts.server_pids)?,
        None => start_target(opts, exam.host())?,
    };
    let cfg = load_config(opts, &placed, opts.duration)?;
    qpslab_load::preflight(&cfg).map_err(|e| match e {
        LoadError::Config(_) | LoadError::Unreachable { .. } => BenchError::Usage(e.to_string()),
        other => BenchError::Load(other),
    })?;
    if !opts.warmup.is_zero() {
        let warm = load_config(opts, &placed, opts.warmup)?;
        qpslab_load::run(&warm, &mut |_| {}).map_err(BenchError::Load)?;
    }
    for &pid in &placed.server_pids {
        exam.follow(pid, Role::Server);
    }
    exam.follow(std::process::id(), Role::Client);
    let done = AtomicBool::new(false);
    let (samples, result) = std::thread::scope(|s| {
        let sampler = s.spawn(|| exam.record(|| done.load(Ordering::Relaxed)));
        let result = qpslab_load::run(&cfg, on_progress);
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

/// Starts the built-in server or nginx on half of the CPUs; the generator gets the others.
fn start_target(opts: &BenchOptions, host: &Host) -> Result<Placement, BenchError> {
    let cpus = split::split(&qpslab_sys::cpus::allowed_cpus(), Some(host));
    let running = match opts.target {
        TargetKind::Builtin => target::builtin(&opts.serve_exe, &cpus.server)?,
        TargetKind::Nginx => target::nginx(&cpus.server)?,
    };
    let notes = if cpus.shared {
        vec!["one CPU only: the server and the generator share it, so the figures compete".into()]
    } else {
        Vec::new()
    };
    Ok(Placement {
        url: running.url(),
        server_pids: running.pids.clone(),
        running: Some(running),
        found_by: Some("started"),
        server_cpus: cpus.server,
        generator_cpus: cpus.generator,
        shared: cpus.shared,
        notes,
    })
}

/// A URL: finds the server behind it on this host (or takes `--server-pid`) and puts the
/// generator on the CPUs the server does not use.
fn place_for_url(
    root: &Root,
    host: &Host,
    url: &str,
    given: &[u32],
) -> Result<Placement, BenchError> {
    let probe =
        LoadConfig::from_options(&LoadOptions { urls: vec![url.into()], ..LoadOptions::default() })
            .map_err(|e| BenchError::Usage(e.to_string()))?;
    let mut notes = probe.notes.clone();
    let (addr, url) = (probe.targets[0].addr, probe.targets[0].url.clone());
    if let Some(bad) = given.iter().find(|p| !root.exists(&format!("proc/{p}"))) {
        return Err(BenchError::Usage(format!("--server-pid {bad}: no such process")));
    }
    let local = qpslab_sys::sockets::is_local(addr.ip());
    let (pids, found_by) = if !given.is_empty() {
        (given.to_vec(), Some("--server-pid"))
    } else if local {
        let holders = qpslab_sys::sockets::listener_holders(root, addr);
        (holders.iter().map(|h| h.pid).collect(), Some("listening"))
    } else {
        (Vec::new(), None)
    };
    let pids = qpslab_host::procs::with_descendants(root, &pids);
    if !local && given.is_empty() {
        notes.push(format!("{url} is on another host: the doctor sees only this host (the generator's side); run `qpslab doctor` there for the server's"));
    } else if pids.is_empty() {
        notes.push(format!("no process visible here listens on {addr}: the server's CPU is not counted; name it with --server-pid"));
    }
    let server = qpslab_host::procs::server_cpus(root, &pids, &host.online).unwrap_or_default();
    let allowed: CpuSet = qpslab_sys::cpus::allowed_cpus().into_iter().collect();
    let free = allowed.difference(&server);
    let shared = !server.is_empty() && free.is_empty();
    if shared {
        notes.push(format!("the server may run on every CPU the generator may use ({allowed}): both share them, so the figures compete; pin the server (taskset, its own CPU settings) to leave CPUs to the generator"));
    }
    let generator = if free.is_empty() { allowed } else { free };
    Ok(Placement {
        running: None,
        url,
        found_by: found_by.filter(|_| !pids.is_empty()),
        server_pids: pids,
        server_cpus: server.iter().collect(),
        generator_cpus: generator.iter().collect(),
        shared,
        notes,
    })
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
    let _ = writeln!(o, "target      {}", target_line(r));
    let _ = writeln!(
        o,
        "generator   qpslab load, {} thread(s) on CPU {}, {} connections, {:.1}s{}",
        l.config.threads,
        list(&r.generator_cpus),
        l.config.connections,
        l.duration_s,
        if r.cpus_shared { " (sharing the server's CPUs: figures compete)" } else { "" }
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
    let server = r.server_cpu.map_or("not followed".to_string(), |c| format!("{c:.2} CPUs"));
    let _ = writeln!(o, "cpu         server {server}, generator {:.2} CPUs", r.generator_cpu);
    if let Some(per) = r.requests_per_server_cpu_s {
        let _ = writeln!(o, "efficiency  {per:.0} requests per server CPU-second");
    }
    for note in &r.notes {
        let _ = writeln!(o, "note        {note}");
    }
    o.push_str(&qpslab_host::render::findings_text(&r.doctor.findings));
    o
}

/// `builtin server on URL (1 worker(s) on CPU 0)`, or the URL and the server found behind it.
fn target_line(r: &BenchReport) -> String {
    let t = &r.target;
    let list = |v: &[usize]| CpuSet::from_iter(v.iter().copied()).to_list();
    let comm =
        |pid: u32| r.doctor.summary.processes.iter().find(|p| p.pid == pid).map(|p| p.comm.clone());
    match (t.kind, t.found_by) {
        ("url", None) => t.url.clone(),
        ("url", Some(how)) => {
            let procs: Vec<String> = t
                .pids
                .iter()
                .map(|&p| comm(p).map_or(format!("pid {p}"), |c| format!("{c} {p}")))
                .collect();
            let how = if how == "listening" { "found listening" } else { "given" };
            let on = if t.cpus.is_empty() {
                String::new()
            } else {
                format!(", on CPU {}", list(&t.cpus))
            };
            format!("{} (server {how}: {}{on})", t.url, procs.join(", "))
        }
        (kind, _) => format!(
            "{kind} server on {} ({} worker(s) on CPU {})",
            t.url,
            t.cpus.len(),
            list(&t.cpus)
        ),
    }
}
