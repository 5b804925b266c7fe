//! Where each side of a bench runs: the server bench starts (on half of the CPUs) or the one
//! behind a URL (found in the kernel's socket table, or named), or the server on the server
//! host (`--server`), and the generator's CPUs.

use qpslab_host::{CpuSet, Host, Root};
use qpslab_load::{LoadConfig, LoadOptions};

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;

use crate::kinds::{Accept, BenchError, ServerSpec, TargetKind, TargetUp};
use crate::{split, target};

/// Where bench's own target listens.
const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Where each side runs: the server's processes and CPUs, the generator's CPUs.
pub(crate) struct Placement {
    /// The kind of target bench started (here or on the server host); None: a URL.
    pub started: Option<&'static str>,
    /// A target started on this host.
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
    /// The listeners behind the server (a proxy's application), whose processes are in
    /// `server_pids` too.
    pub path: Vec<qpslab_host::upstream::Upstream>,
}

impl Placement {
    /// A target at `url` with one generator CPU: what checking the load's options before
    /// anything runs needs to know of a placement.
    pub(crate) fn stand_in(url: String) -> Placement {
        Placement {
            started: None,
            running: None,
            url,
            server_pids: Vec::new(),
            found_by: None,
            server_cpus: Vec::new(),
            generator_cpus: vec![0],
            shared: false,
            notes: Vec::new(),
            workers: None,
            accept: None,
            path: Vec::new(),
        }
    }
}

/// Starts the built-in server (`serve_exe serve`) or nginx on its CPUs (by default the first
/// half of the cores); the generator gets the others.
pub(crate) fn start_target(
    serve_exe: &Path,
    spec: &ServerSpec,
    host: &Host,
    unix: Option<&Path>,
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
        TargetKind::Builtin => {
            let how = (spec.accept, spec.tls, spec.h3);
            target::builtin(serve_exe, LOOPBACK, &cpus.server, workers, how, unix)?
        }
        TargetKind::Nginx => {
            let how = target::NginxHow { accept: spec.accept, tls: spec.tls, h2: spec.h2 };
            target::nginx(LOOPBACK, &cpus.server, workers, how, unix)?
        }
    };
    let notes = if cpus.shared {
        vec!["the server and the generator share CPUs, so the figures compete".into()]
    } else {
        Vec::new()
    };
    Ok(Placement {
        started: Some(running.kind),
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
        path: Vec::new(),
    })
}

/// The server behind an address, as this host sees it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Found {
    /// Its processes, children and threads included (empty when none was found).
    pub pids: Vec<u32>,
    /// `listening` (found in the kernel's socket table) or `--server-pid`.
    pub found_by: Option<&'static str>,
    /// The CPUs it may run on.
    pub cpus: Vec<usize>,
    pub notes: Vec<String>,
}

/// The server's processes: those `given` (`--server-pid`), else the one holding the listening
/// socket of `addr` when that address is this host's; with the CPUs they may run on.
pub(crate) fn find_server(
    root: &Root,
    host: &Host,
    addr: Option<SocketAddr>,
    given: &[u32],
) -> Result<Found, BenchError> {
    if let Some(bad) = given.iter().find(|p| !root.exists(&format!("proc/{p}"))) {
        return Err(BenchError::Usage(format!("--server-pid {bad}: no such process")));
    }
    let mut notes = Vec::new();
    let local = addr.is_some_and(|a| qpslab_sys::sockets::is_local(a.ip()));
    let (pids, found_by) = match addr {
        _ if !given.is_empty() => (given.to_vec(), Some("--server-pid")),
        Some(a) if local => {
            let holders = qpslab_sys::sockets::listener_holders(root, a);
            (holders.iter().map(|h| h.pid).collect(), Some("listening"))
        }
        _ => (Vec::new(), None),
    };
    let pids = qpslab_host::procs::with_descendants(root, &pids);
    match addr {
        Some(a) if pids.is_empty() && local => notes.push(format!("no process visible here listens on {a}: the server's CPU is not counted; name it with --server-pid")),
        _ => {}
    }
    let cpus = qpslab_host::procs::server_cpus(root, &pids, &host.online).unwrap_or_default();
    Ok(Found {
        found_by: found_by.filter(|_| !pids.is_empty()),
        pids,
        cpus: cpus.iter().collect(),
        notes,
    })
}

/// The server listening on the unix socket `path` (or the `--server-pid` given): the
/// processes holding the socket whose inode the kernel's unix table gives for the path.
fn find_unix_server(
    root: &Root,
    host: &Host,
    path: &std::path::Path,
    given: &[u32],
) -> Result<Found, BenchError> {
    if !given.is_empty() {
        return find_server(root, host, None, given);
    }
    let holders = qpslab_sys::sockets::unix_listener_holders(root, path);
    let pids: Vec<u32> = holders.iter().map(|h| h.pid).collect();
    let pids = qpslab_host::procs::with_descendants(root, &pids);
    let mut notes = Vec::new();
    if pids.is_empty() {
        notes.push(format!("no process visible here listens on unix:{}: the server's CPU is not counted; name it with --server-pid", path.display()));
    }
    let cpus = qpslab_host::procs::server_cpus(root, &pids, &host.online).unwrap_or_default();
    Ok(Found {
        found_by: (!pids.is_empty()).then_some("listening"),
        pids,
        cpus: cpus.iter().collect(),
        notes,
    })
}

/// A URL: finds the server behind it on this host (or takes `--server-pid`) and puts the
/// generator on the CPUs the server does not use.
pub(crate) fn for_url(
    root: &Root,
    host: &Host,
    url: &str,
    unix: Option<&std::path::Path>,
    given: &[u32],
) -> Result<Placement, BenchError> {
    let (addr, url, mut notes) = resolve(url)?;
    let mut found = match unix {
        Some(path) => find_unix_server(root, host, path, given)?,
        None => find_server(root, host, Some(addr), given)?,
    };
    notes.extend(std::mem::take(&mut found.notes));
    // The processes behind it (a proxy's application) are the server too: their CPU is the
    // server's, and the generator keeps off their CPUs as well.
    let path = qpslab_host::upstream::upstreams(root, &found.pids);
    if !path.is_empty() {
        found.pids.extend(path.iter().flat_map(|u| u.pids.iter().copied()));
        let cpus = qpslab_host::procs::server_cpus(root, &found.pids, &host.online);
        found.cpus = cpus.unwrap_or_default().iter().collect();
    }
    if unix.is_none() && !qpslab_sys::sockets::is_local(addr.ip()) && given.is_empty() {
        notes.push(format!("{url} is on another host: the doctor sees only this host (the generator's side); give --server HOST to run it there"));
    }
    let server: CpuSet = found.cpus.iter().copied().collect();
    let allowed: CpuSet = qpslab_sys::cpus::allowed_cpus().into_iter().collect();
    let free = allowed.difference(&server);
    let shared = !server.is_empty() && free.is_empty();
    if shared {
        notes.push(format!("the server may run on every CPU the generator may use ({allowed}): both share them, so the figures compete; pin the server (taskset, its own CPU settings) to leave CPUs to the generator"));
    }
    let generator = if free.is_empty() { allowed } else { free };
    Ok(Placement {
        started: None,
        running: None,
        url,
        found_by: found.found_by,
        server_pids: found.pids,
        server_cpus: found.cpus,
        generator_cpus: generator.iter().collect(),
        shared,
        notes,
        workers: None,
        accept: None,
        path,
    })
}

/// The URL's address (resolved here), the URL as the load writes it, and the load's notes.
pub(crate) fn resolve(url: &str) -> Result<(SocketAddr, String, Vec<String>), BenchError> {
    let probe =
        LoadConfig::from_options(&LoadOptions { urls: vec![url.into()], ..LoadOptions::default() })
            .map_err(|e| BenchError::Usage(e.to_string()))?;
    Ok((probe.variants.addr(0), probe.variants.url(0).to_string(), probe.notes.clone()))
}

/// The server on the server host (`--server`): bench started it there (`up`), or it is behind
/// the URL; the generator (or the agents) has every CPU it may use here.
pub(crate) fn for_server_host(
    url: String,
    started: Option<(&'static str, &TargetUp, Accept)>,
) -> Placement {
    let (pids, cpus, workers, accept) = match started {
        Some((_, up, accept)) => {
            (up.pids.clone(), up.cpus.clone(), Some(up.workers), Some(accept.name()))
        }
        None => (Vec::new(), Vec::new(), None, None),
    };
    Placement {
        started: started.map(|s| s.0),
        running: None,
        url,
        found_by: started.map(|_| "started"),
        server_pids: pids,
        server_cpus: cpus,
        generator_cpus: qpslab_sys::cpus::allowed_cpus(),
        shared: false,
        notes: Vec::new(),
        workers,
        accept,
        path: Vec::new(),
    }
}
