//! Where each side of a bench runs: the server bench starts (on half of the CPUs) or the one
//! behind a URL (found in the kernel's socket table, or named), and the generator's CPUs.

use qpslab_host::{CpuSet, Host, Root};
use qpslab_load::{LoadConfig, LoadOptions};

use std::path::Path;

use crate::bench::{BenchError, ServerSpec, TargetKind};
use crate::{split, target};

/// Where each side runs: the server's processes and CPUs, the generator's CPUs.
pub(crate) struct Placement {
    pub running: Option<target::Running>,
    pub url: String,
    pub server_pids: Vec<u32>,
    pub found_by: Option<&'static str>,
    pub server_cpus: Vec<usize>,
    pub generator_cpus: Vec<usize>,
    pub shared: bool,
    pub notes: Vec<String>,
    /// A started server's workers and accept mode.
    pub workers: Option<usize>,
    pub accept: Option<&'static str>,
}

/// Starts the built-in server (`serve_exe serve`) or nginx on its CPUs (by default the first
/// half of the cores); the generator gets the others.
pub(crate) fn start_target(
    serve_exe: &Path,
    spec: &ServerSpec,
    host: &Host,
) -> Result<Placement, BenchError> {
    let allowed = qpslab_sys::cpus::allowed_cpus();
    let cpus = match &spec.cpus {
        None => split::split(&allowed, Some(host)),
        Some(server) => {
            let rest: Vec<usize> =
                allowed.iter().copied().filter(|c| !server.contains(c)).collect();
            let shared = rest.is_empty();
            split::Split {
                server: server.clone(),
                generator: if shared { allowed.clone() } else { rest },
                shared,
            }
        }
    };
    let workers = spec.workers.unwrap_or(cpus.server.len()).max(1);
    let running = match spec.kind {
        TargetKind::Builtin => target::builtin(serve_exe, &cpus.server, workers, spec.accept)?,
        TargetKind::Nginx => target::nginx(&cpus.server, workers, spec.accept)?,
    };
    let notes = if cpus.shared {
        vec!["the server and the generator share CPUs, so the figures compete".into()]
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
        workers: Some(workers),
        accept: Some(spec.accept.name()),
    })
}

/// A URL: finds the server behind it on this host (or takes `--server-pid`) and puts the
/// generator on the CPUs the server does not use.
pub(crate) fn for_url(
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
        workers: None,
        accept: None,
    })
}
