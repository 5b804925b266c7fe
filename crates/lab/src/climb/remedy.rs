//! A finding turned into typed changes of the run, or into "not applicable here" with why.
//! The doctor's remedies are prose for a person; the climb needs an action with its
//! parameters, made only where this run may make it: the load's connections and threads, the
//! workers of a server the bench itself started, with `--apply-server` directives of the
//! user's own nginx, and with `--apply-host` a setting of the server's host (this one, or
//! `--server HOST`: a sysctl, an interface's receive steering), planned and journaled as
//! `qpslab tune` does.

use qpslab_doctor::{Cause, Finding};
use serde::Serialize;

use super::server::{Edit, Vars};
use crate::bench::{BenchOptions, BenchReport};

/// The most connections the climb raises a run to (each doubling measured on its own).
pub const MAX_CONNECTIONS: usize = 10_000;
/// The most workers the climb gives a user's server through its template when it waits on
/// something other than CPU (a CPU-bound one gets one per CPU at most).
pub const MAX_TEMPLATE_WORKERS: usize = 64;
/// The most threads per worker the climb gives a user's server through its template (each
/// step doubles them).
pub const MAX_TEMPLATE_THREADS: usize = 256;
/// The most connections the climb raises a CPU-bound run to for batching alone (more requests
/// per wake-up): past a few hundred per thread the queues only add latency.
pub const MAX_BATCHING: usize = 1024;
/// nginx's `keepalive_requests` as the climb raises it: a connection closed every 100,000
/// requests costs one handshake per 100,000.
pub const KEEPALIVE_REQUESTS: u64 = 100_000;

/// The share of a run's requests failed past which the run fails, when the server's log says
/// why (a stray line in a run that answered is not a failed start).
pub const FAILING_SHARE: f64 = 0.01;

/// One change of the run's own knobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "knob", rename_all = "kebab-case")]
pub enum Change {
    /// The load's connections (requests in flight in a closed loop).
    Connections { from: usize, to: usize },
    /// The load's threads.
    Threads { from: usize, to: usize },
    /// The load machines (`--agents`): the first `to` of the climb's pool.
    Agents { from: usize, to: usize },
    /// The workers of the server the bench starts.
    Workers { from: usize, to: usize },
    /// The workers of the user's server, through its configuration template.
    ServerWorkers { from: usize, to: usize },
    /// The threads in each worker of the user's server, through its configuration template.
    ServerThreads { from: usize, to: usize },
    /// The descriptor limit of the user's server (soft RLIMIT_NOFILE), through its
    /// configuration template (`{{nofile}}`).
    ServerNofile { from: u64, to: u64 },
    /// The user's nginx: `access_log off;` everywhere in its main configuration file.
    NginxAccessLogOff,
    /// The user's nginx: `keepalive_requests`.
    NginxKeepaliveRequests { from: u64, to: u64 },
    /// The user's nginx: `worker_processes`, each worker bound to a CPU of the server's own
    /// (`worker_cpu_affinity auto MASK`, as the field reports set it).
    NginxWorkers { from: usize, to: usize, affinity: String },
    /// The user's nginx: `worker_connections` raised, with `worker_rlimit_nofile` to hold them
    /// (tune's values, as the doctor names them).
    NginxWorkerConnections { from: u64, to: u64 },
    /// The user's nginx: `worker_rlimit_nofile` raised (its workers ran out of descriptors).
    NginxRlimitNofile { from: u64, to: u64 },
    /// The user's nginx: `backlog=` on every `listen`, the listen queue it asks the kernel for
    /// (nginx's default is 511, whatever `net.core.somaxconn` allows).
    NginxListenBacklog { from: u64, to: u64 },
    /// The user's nginx: `keepalive_timeout 75s` where it had 0 (a connection per request).
    NginxKeepaliveOn,
    /// The user's nginx: every `limit_req` of its main file removed, with `--allow-limits`
    /// (the benchmark measures the server, not the limit).
    NginxLimitReqOff,
    /// The user's nginx: `accept_mutex off;` (the workers no longer take turns to accept).
    NginxAcceptMutexOff,
    /// The user's nginx: `reuseport` on every `listen` of its main file (a listen queue per
    /// worker, new connections spread by the kernel).
    NginxReuseport,
    /// A sysctl of the server's host (this one or `--server HOST`; of its network namespace,
    /// inside one).
    Sysctl { name: String, from: String, to: String },
    /// An interface's receive steering (RPS, RFS, XPS) as `qpslab tune plan --iface` plans it.
    Steering { iface: String },
}

impl Change {
    /// The options with the change made (a change of the server leaves them as they are).
    pub fn apply(&self, o: &BenchOptions) -> BenchOptions {
        let mut o = o.clone();
        match *self {
            Change::Connections { to, .. } => o.load.connections = Some(to),
            Change::Threads { to, .. } => o.load.threads = Some(to),
            Change::Workers { to, .. } => o.workers = Some(to),
            // The server's and the host's changes leave the options as they are; the pool's
            // names are the climb's: it sets `agents` itself.
            _ => {}
        }
        o
    }

    /// The nginx directives the change sets: each one's name, value and the block it goes in
    /// when the file has none (`http`, `events`, or "" for the main context). `reuseport` is
    /// not a directive (it is an option of `listen`): see [`Change::NginxReuseport`].
    pub fn directives(&self) -> Vec<(&'static str, String, &'static str)> {
        match self {
            Change::NginxAccessLogOff => vec![("access_log", "off".into(), "http")],
            Change::NginxKeepaliveRequests { to, .. } => {
                vec![("keepalive_requests", to.to_string(), "http")]
            }
            Change::NginxWorkers { to, affinity, .. } => vec![
                ("worker_processes", to.to_string(), ""),
                ("worker_cpu_affinity", affinity.clone(), ""),
            ],
            Change::NginxAcceptMutexOff => vec![("accept_mutex", "off".into(), "events")],
            Change::NginxWorkerConnections { to, .. } => vec![
                ("worker_connections", to.to_string(), "events"),
                ("worker_rlimit_nofile", (to * 2).to_string(), ""),
            ],
            Change::NginxRlimitNofile { to, .. } => {
                vec![("worker_rlimit_nofile", to.to_string(), "")]
            }
            Change::NginxKeepaliveOn => vec![("keepalive_timeout", "75s".into(), "http")],
            _ => Vec::new(),
        }
    }

    /// The edit of nginx's main file that makes it (None: not an nginx change).
    pub fn nginx_edit(&self) -> Option<Edit> {
        match self {
            Change::NginxReuseport => Some(Edit::ListenOption("reuseport")),
            Change::NginxLimitReqOff => Some(Edit::Remove("limit_req")),
            Change::NginxListenBacklog { to, .. } => {
                Some(Edit::ListenParam("backlog", to.to_string()))
            }
            c if c.is_nginx() => Some(Edit::Set(c.directives())),
            _ => None,
        }
    }

    /// Whether it lifts a limit a failing run can hit: connections, descriptors, listen
    /// queues, keep-alive, a rate limit. Only such a change is measured from a run that fails.
    pub fn lifts_limit(&self) -> bool {
        matches!(
            self,
            Change::NginxWorkerConnections { .. }
                | Change::ServerNofile { .. }
                | Change::NginxRlimitNofile { .. }
                | Change::NginxListenBacklog { .. }
                | Change::NginxKeepaliveOn
                | Change::NginxLimitReqOff
        ) || self.is_listen()
    }

    /// Whether it edits the user's nginx.
    pub fn is_nginx(&self) -> bool {
        matches!(
            self,
            Change::NginxAccessLogOff
                | Change::NginxKeepaliveRequests { .. }
                | Change::NginxWorkerConnections { .. }
                | Change::NginxRlimitNofile { .. }
                | Change::NginxListenBacklog { .. }
                | Change::NginxKeepaliveOn
                | Change::NginxLimitReqOff
                | Change::NginxWorkers { .. }
                | Change::NginxAcceptMutexOff
                | Change::NginxReuseport
        )
    }

    /// Whether it sizes listen queues: it applies to a socket when the server calls listen()
    /// (nginx on a reload; a server the bench starts, at each run).
    pub fn is_listen(&self) -> bool {
        matches!(self, Change::Sysctl { name, .. }
            if name == "net.core.somaxconn" || name == "net.ipv4.tcp_max_syn_backlog")
    }

    /// Whether it changes the host (`--apply-host`).
    pub fn is_host(&self) -> bool {
        matches!(self, Change::Sysctl { .. } | Change::Steering { .. })
    }

    /// `connections 1 -> 2`.
    pub fn describe(&self) -> String {
        let (what, from, to) = match self {
            Change::Connections { from, to } => ("connections", *from as u64, *to as u64),
            Change::Threads { from, to } => ("generator threads", *from as u64, *to as u64),
            Change::Agents { from, to } => ("load machines", *from as u64, *to as u64),
            Change::Workers { from, to } => ("server workers", *from as u64, *to as u64),
            Change::ServerWorkers { from, to } => {
                ("server workers (its template)", *from as u64, *to as u64)
            }
            Change::ServerThreads { from, to } => {
                ("server threads per worker (its template)", *from as u64, *to as u64)
            }
            Change::ServerNofile { from, to } => {
                ("server descriptor limit (its template)", *from, *to)
            }
            Change::NginxAccessLogOff => return "nginx access_log off".into(),
            Change::NginxKeepaliveRequests { from, to } => ("nginx keepalive_requests", *from, *to),
            Change::NginxWorkerConnections { from, to } => ("nginx worker_connections", *from, *to),
            Change::NginxRlimitNofile { from, to } => ("nginx worker_rlimit_nofile", *from, *to),
            Change::NginxListenBacklog { from, to } => ("nginx listen ... backlog", *from, *to),
            Change::NginxKeepaliveOn => return "nginx keepalive_timeout 0 -> 75s".into(),
            Change::NginxLimitReqOff => return "nginx limit_req off (--allow-limits)".into(),
            Change::NginxWorkers { from, to, affinity } => {
                return format!(
                    "nginx worker_processes {from} -> {to}, worker_cpu_affinity {affinity}"
                )
            }
            Change::NginxAcceptMutexOff => return "nginx accept_mutex off".into(),
            Change::NginxReuseport => return "nginx listen ... reuseport".into(),
            Change::Sysctl { name, from, to } => return format!("{name} {from} -> {to}"),
            Change::Steering { iface } => return format!("{iface} receive steering (RPS/RFS/XPS)"),
        };
        format!("{what} {from} -> {to}")
    }

    /// What makes the state: a bench flag (`-c 2`), or the directive in nginx's configuration.
    pub fn flag(&self) -> String {
        match self {
            Change::Connections { to, .. } => format!("-c {to}"),
            Change::Threads { to, .. } => format!("-t {to}"),
            Change::Agents { to, .. } => format!("--agents (the first {to} of the pool)"),
            Change::Workers { to, .. } => format!("-w {to}"),
            Change::ServerWorkers { to, .. } => format!("server: {{{{workers}}}} = {to}"),
            Change::ServerThreads { to, .. } => format!("server: {{{{threads}}}} = {to}"),
            Change::ServerNofile { to, .. } => format!("server: {{{{nofile}}}} = {to}"),
            Change::NginxReuseport => "nginx: listen ... reuseport;".into(),
            Change::NginxLimitReqOff => "nginx: no limit_req;".into(),
            Change::NginxListenBacklog { to, .. } => format!("nginx: listen ... backlog={to};"),
            Change::NginxAccessLogOff
            | Change::NginxKeepaliveRequests { .. }
            | Change::NginxWorkerConnections { .. }
            | Change::NginxRlimitNofile { .. }
            | Change::NginxKeepaliveOn
            | Change::NginxWorkers { .. }
            | Change::NginxAcceptMutexOff => {
                let set: Vec<String> =
                    self.directives().iter().map(|(n, v, _)| format!("{n} {v};")).collect();
                format!("nginx: {}", set.join(" "))
            }
            Change::Sysctl { name, to, .. } => format!("host: sysctl -w {name}='{to}'"),
            Change::Steering { iface } => {
                format!("host: qpslab tune apply --iface {iface} (its rps/rfs/xps lines)")
            }
        }
    }

    /// Sets its value in `v` when it is a variable of the server's template, and says so.
    pub fn in_template(&self, v: &mut Vars) -> bool {
        match *self {
            Change::ServerWorkers { to, .. } => v.workers = Some(to),
            Change::ServerThreads { to, .. } => v.threads = Some(to),
            Change::ServerNofile { to, .. } => v.nofile = Some(to),
            _ => return false,
        }
        true
    }

    /// The same knob: a later change of it replaces an earlier one in the final state.
    pub fn same_knob(&self, other: &Change) -> bool {
        match (self, other) {
            (Change::Sysctl { name: a, .. }, Change::Sysctl { name: b, .. }) => a == b,
            (Change::Steering { iface: a }, Change::Steering { iface: b }) => a == b,
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }
}

/// What a finding asks of this state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remedy {
    Change(Change),
    /// Nothing the climb may change: why, and what would.
    NotApplicable(String),
    /// The run itself fails: no change is worth measuring until the target answers.
    Stop(String),
}

/// The state's knobs as its last run had them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Knobs {
    pub connections: usize,
    pub threads: usize,
    /// CPUs the generator's threads may use.
    pub generator_cpus: usize,
    /// The server's workers, when the bench started it.
    pub workers: Option<usize>,
    /// CPUs the server may use (0: not known).
    pub server_cpus: usize,
    /// The user's nginx in the climb's hands (`--apply-server`): its settings in this state.
    /// None: not nginx, or not ours to change.
    pub nginx: Option<NginxKnobs>,
    /// The server's CPUs as a mask (bit N: CPU N; 0: not known, or past CPU 63).
    pub server_mask: u64,
    /// The climb may change this host's settings (`--apply-host`).
    pub apply_host: bool,
    /// The user's server in the climb's hands through its template: its workers, threads per
    /// worker and descriptor limit in this state (each None: not templated, or the template
    /// does not name it).
    pub template: Vars,
    /// The server runs on this host (not on `--server HOST`): the load's side's settings are
    /// the climb's to change too.
    pub server_here: bool,
    /// More than [`FAILING_SHARE`] of the run's requests failed.
    pub failing: bool,
    /// The load machines in use and in the climb's pool (`--agents`).
    pub agents: Option<(usize, usize)>,
    /// The climb may lift the server's rate limits (`--allow-limits`).
    pub allow_limits: bool,
}

impl Knobs {
    pub fn of(r: &BenchReport) -> Knobs {
        Knobs {
            connections: r.load.config.connections,
            threads: r.load.config.threads,
            generator_cpus: r.generator_cpus.len(),
            workers: r.target.workers,
            // A user's server's CPUs are its affinity's; when not known, every CPU here.
            server_cpus: match r.target.cpus.len() {
                0 => std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
                n => n,
            },
            nginx: None,
            server_mask: r
                .target
                .cpus
                .iter()
                .try_fold(0u64, |m, &c| (c < 64).then(|| m | 1 << c))
                .unwrap_or(0),
            apply_host: false,
            template: Vars::default(),
            server_here: r.server_host.is_none(),
            failing: {
                let q = &r.load.requests;
                let bad = q.failed + q.bad_status;
                bad as f64 > FAILING_SHARE * (q.ok + bad) as f64
            },
            agents: None,
            allow_limits: false,
        }
    }

    /// `worker_cpu_affinity`'s value for nginx's workers on the server's CPUs: `auto`, with
    /// the mask of those CPUs when they are not all of this host's.
    pub fn affinity(&self) -> String {
        let all = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        if self.server_mask == 0 || self.server_mask.count_ones() as usize >= all {
            return "auto".into();
        }
        format!("auto {:b}", self.server_mask)
    }
}

/// The user's nginx's settings the climb changes, as its configuration has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NginxKnobs {
    pub keepalive_requests: u64,
    /// `worker_processes` as a number (1 when not set); None: `auto`, one per CPU already.
    pub workers: Option<usize>,
    pub accept_mutex: bool,
    pub reuseport: bool,
    pub worker_connections: u64,
    pub worker_rlimit_nofile: Option<u64>,
    /// `keepalive_timeout 0`.
    pub keepalive_off: bool,
    /// Some `limit_req` applies a rate limit.
    pub limit_req: bool,
    /// The smallest listen queue its `listen`s ask for.
    pub listen_backlog: u64,
}

impl NginxKnobs {
    pub fn of(c: &qpslab_host::nginx::NginxConf) -> NginxKnobs {
        NginxKnobs {
            keepalive_requests: c.keepalive_requests,
            workers: match c.worker_processes.as_deref() {
                None => Some(1),
                Some(w) => w.parse().ok(),
            },
            accept_mutex: c.accept_mutex,
            reuseport: c.reuseport,
            // nginx's default.
            worker_connections: c.worker_connections.unwrap_or(512),
            worker_rlimit_nofile: c.worker_rlimit_nofile,
            keepalive_off: c.keepalive_off,
            limit_req: c.limit_req,
            listen_backlog: c.listen_backlog.unwrap_or(qpslab_host::nginx::LISTEN_BACKLOG),
        }
    }
}

/// The changes `f` asks for in state `k`, most telling first: one remedy for most findings,
/// one per cost named for nginx's configuration or per setting of a host finding. `sysctl`
/// reads the current value of a setting on the host it would change; `server_pids` are the
/// target's processes. Read from the finding's typed cause alone.
pub fn remedies(
    f: &Finding,
    k: &Knobs,
    sysctl: &dyn Fn(&str) -> Option<String>,
    server_pids: &[u32],
) -> Vec<Remedy> {
    match &f.cause {
        // The server's own processes out of descriptors: nginx's limit, or its template's,
        // when it is in hand. Room for two descriptors a connection (a proxied request holds
        // two).
        Some(Cause::Descriptors { pid: Some(p), limit, .. }) if server_pids.contains(p) => {
            use qpslab_tune::remedy::rlimit_nofile;
            match (k.nginx, k.template.nofile) {
                (Some(n), _) => vec![Remedy::Change(Change::NginxRlimitNofile {
                    from: n.worker_rlimit_nofile.unwrap_or(*limit),
                    to: rlimit_nofile(*limit, n.worker_connections * 2),
                })],
                (None, Some(from)) => vec![Remedy::Change(Change::ServerNofile {
                    from,
                    to: rlimit_nofile(*limit, k.connections as u64 * 2),
                })],
                (None, None) => vec![remedy(f, k)],
            }
        }
        Some(Cause::KeepAliveOff { .. }) => match k.nginx {
            Some(n) if n.keepalive_off => vec![Remedy::Change(Change::NginxKeepaliveOn)],
            _ => vec![remedy(f, k)],
        },
        Some(Cause::HostSettings { settings, client_side }) => {
            let mut out = host_remedies(settings, *client_side, k, sysctl);
            // nginx asks for its own queue: 511 unless a listen says `backlog=`, whatever
            // the host allows. After the host's cap, its own.
            let queue = settings.iter().find(|(n, _)| n == "net.core.somaxconn");
            if let (false, Some((_, to)), Some(n)) = (*client_side, queue, k.nginx) {
                let to: u64 = to.parse().unwrap_or(0);
                if n.listen_backlog < to {
                    let c = Change::NginxListenBacklog { from: n.listen_backlog, to };
                    out.retain(|r| matches!(r, Remedy::Change(_)));
                    out.push(Remedy::Change(c));
                }
            }
            out
        }
        Some(Cause::Steering { iface }) => steering(iface.as_deref(), k),
        Some(Cause::NginxCosts { access_log, keepalive_requests, workers, accept_mutex }) => {
            nginx_remedies([*access_log, *keepalive_requests, *workers, *accept_mutex], k)
        }
        Some(Cause::RoundTrips | Cause::StreamLimit { .. } | Cause::FlowControl { .. }) => {
            // Requests wait in the server as well as on the path: when more of them in
            // flight gain nothing, a server that takes fewer at once needs more threads (the
            // cheaper way to wait on a database or a file: gunicorn's gthread, puma), then
            // more workers.
            let mut out = vec![remedy(f, k)];
            if let Some(t) = k.template.threads.filter(|t| *t < MAX_TEMPLATE_THREADS) {
                out.push(Remedy::Change(Change::ServerThreads { from: t, to: t * 2 }));
            }
            if let Some(w) = k.template.workers.filter(|w| *w < MAX_TEMPLATE_WORKERS) {
                out.push(Remedy::Change(Change::ServerWorkers { from: w, to: w + 1 }));
            }
            out
        }
        _ => vec![remedy(f, k)],
    }
}

/// nginx's costs (an unbuffered access log, keepalive_requests behind the reconnects, workers
/// short of the idle CPUs, accept_mutex), each a change with the server in the climb's hands.
fn nginx_remedies([access_log, keepalive, workers, mutex]: [bool; 4], k: &Knobs) -> Vec<Remedy> {
    let Some(n) = k.nginx else {
        return vec![Remedy::NotApplicable(
            "a change to the user's nginx: pass --apply-server to let the climb edit its configuration (the original is kept and restored)".into(),
        )];
    };
    let c = |c: Change| Remedy::Change(c);
    let mut out = Vec::new();
    if access_log {
        out.push(c(Change::NginxAccessLogOff));
    }
    if keepalive && n.keepalive_requests < KEEPALIVE_REQUESTS {
        out.push(c(Change::NginxKeepaliveRequests {
            from: n.keepalive_requests,
            to: KEEPALIVE_REQUESTS,
        }));
    }
    if workers {
        out.extend(nginx_workers(&n, k).map(c));
    }
    if mutex {
        out.extend(n.accept_mutex.then_some(Change::NginxAcceptMutexOff).map(c));
        out.extend((!n.reuseport).then_some(Change::NginxReuseport).map(c));
    }
    if out.is_empty() {
        out.push(Remedy::NotApplicable(
            "its costs named here are not ones the climb edits (open_file_cache), or are set already".into(),
        ));
    }
    out
}

/// One nginx worker more, bound with the others to the server's CPUs, while it has fewer
/// workers than CPUs.
fn nginx_workers(n: &NginxKnobs, k: &Knobs) -> Option<Change> {
    let w = n.workers.filter(|w| *w < k.server_cpus.max(1))?;
    Some(Change::NginxWorkers { from: w, to: w + 1, affinity: k.affinity() })
}

fn na(why: &str) -> Vec<Remedy> {
    vec![Remedy::NotApplicable(why.to_string())]
}

/// An interface's receive steering, with --apply-host, on the host the climb runs on.
fn steering(iface: Option<&str>, k: &Knobs) -> Vec<Remedy> {
    if !k.apply_host {
        return na("a host change: pass --apply-host to let the climb make it (journaled as `qpslab tune apply` does, reverted at the end unless --keep)");
    }
    match iface {
        Some(i) => vec![Remedy::Change(Change::Steering { iface: i.to_string() })],
        None => na("names no interface: its receive steering is planned where single-rx-queue or irqs-on-one-cpu names one (or `qpslab tune plan`)"),
    }
}

/// The host settings a finding asks for (each at the value of tune's table), raised only where
/// they are below it; a setting already there is not a change.
fn host_remedies(
    settings: &[(String, String)],
    client_side: bool,
    k: &Knobs,
    sysctl: &dyn Fn(&str) -> Option<String>,
) -> Vec<Remedy> {
    if !k.apply_host {
        return na("a host change: pass --apply-host to let the climb make it (journaled as `qpslab tune apply` does, reverted at the end unless --keep)");
    }
    if client_side && !k.server_here {
        return na(
            "a setting of the load's host: with --server the climb changes the server host's settings only",
        );
    }
    let mut out = Vec::new();
    for (name, to) in settings {
        match sysctl(name) {
            None => out.push(Remedy::NotApplicable(format!(
                "{name} is not this host's to set here (inside a network namespace only its own settings are)"
            ))),
            Some(from) if !below(&from, to) => {}
            Some(from) => {
                let from = from.split_whitespace().collect::<Vec<_>>().join(" ");
                out.push(Remedy::Change(Change::Sysctl { name: name.clone(), from, to: to.clone() }));
            }
        }
    }
    if out.is_empty() {
        return na("its settings are already at what tune plans");
    }
    out
}

/// Whether a sysctl's value `from` is short of `to`: numbers compared field by field (a port
/// range is short when it is narrower).
fn below(from: &str, to: &str) -> bool {
    let nums = |s: &str| s.split_whitespace().map(str::parse::<u64>).collect::<Result<Vec<_>, _>>();
    match (nums(from), nums(to)) {
        (Ok(a), Ok(b)) if a.len() == 2 && b.len() == 2 => a[1] - a[0].min(a[1]) < b[1] - b[0],
        (Ok(a), Ok(b)) if a.len() == 1 && b.len() == 1 => {
            // tcp_tw_reuse: 2 (loopback only) is not 1.
            if to == "1" {
                a[0] != 1
            } else {
                a[0] < b[0]
            }
        }
        _ => from.trim() != to.trim(),
    }
}

/// When no finding names a change left to try and the headline says a side is short of CPU
/// (its own, not a quota's): more connections, for batching alone (a side short of CPU
/// spends less of it per request with more requests per wake-up and system call).
pub fn batching(headline: &Finding, k: &Knobs) -> Option<Change> {
    let cpu_bound =
        matches!(&headline.cause, Some(Cause::Saturated { held, .. }) if held != "quota");
    (cpu_bound && k.connections < MAX_BATCHING).then(|| Change::Connections {
        from: k.connections,
        to: (k.connections * 2).min(MAX_BATCHING),
    })
}

/// The change `f` asks for in state `k`. Only a cause that bounds the rate, or a condition
/// that explains it, names a change; the rest are not applicable, with why.
fn remedy(f: &Finding, k: &Knobs) -> Remedy {
    let na = |why: &str| Remedy::NotApplicable(why.to_string());
    let Some(cause) = &f.cause else {
        return na("no change of the climb's answers it: see the finding's remedy");
    };
    match cause {
        Cause::RoundTrips | Cause::StreamLimit { .. } | Cause::FlowControl { .. } if k.connections < MAX_CONNECTIONS => {
            Remedy::Change(Change::Connections {
                from: k.connections,
                to: (k.connections * 2).min(MAX_CONNECTIONS),
            })
        }
        Cause::RoundTrips | Cause::StreamLimit { .. } | Cause::FlowControl { .. } => {
            na("the load keeps the most connections the climb opens")
        }
        Cause::WorkerImbalance { workers, .. }
            if (k.connections as u64) < 2 * *workers && k.connections < MAX_CONNECTIONS =>
        {
            Remedy::Change(Change::Connections {
                from: k.connections,
                to: (k.connections * 2).min(MAX_CONNECTIONS),
            })
        }
        Cause::WorkerImbalance { .. } => na(
            "connections are spread unevenly over the server's workers: SO_REUSEPORT (nginx `listen ... reuseport`)",
        ),
        Cause::Saturated { side, held } => saturated(side, held, k),
        Cause::Throttled => {
            na("a cgroup CPU quota holds a side: raise it; qpslab does not change cgroups")
        }
        Cause::Contention { .. } => na(
            "other work shares the benchmark's CPUs: stop or move it; not a change to measure",
        ),
        Cause::Failed => {
            Remedy::Stop(format!("the run fails ({}): fix the target first", f.summary))
        }
        // nginx's own word for its limit_req (the headline when the load's statuses did not
        // make the rate-limited finding).
        c @ Cause::ServerLog { .. }
            if c.log_limit() == Some("limit_req") && k.nginx.is_some_and(|n| n.limit_req) =>
        {
            rate_limit(f, k)
        }
        // The server's log names what went wrong: the climb stops only when the run failed
        // by it (a line or two of an upstream's hiccup in a run that answered is not a start
        // to fix first).
        Cause::ServerLog { .. } if k.failing => {
            Remedy::Stop(format!("the run fails ({}): fix the target first", f.summary))
        }
        Cause::ServerLog { .. } => na(
            "the server's log named errors, but the run answered: read them; not a change to measure",
        ),
        // The fix is the user's nginx's: in the climb's hands with --apply-server, a step from
        // the failing start measured on its ok responses.
        Cause::WorkerConnections { limit, wanted } if k.nginx.is_some() => {
            let (to, _) = qpslab_tune::remedy::nginx_worker_connections(*wanted, *limit);
            Remedy::Change(Change::NginxWorkerConnections { from: *limit, to })
        }
        Cause::WorkerConnections { limit, wanted } => Remedy::Stop(format!(
            "nginx holds {limit} connections per worker and the run needs {wanted}: raise worker_connections first (pass --apply-server to let the climb raise it in nginx's configuration)"
        )),
        Cause::RateLimit { .. } => rate_limit(f, k),
        other => Remedy::NotApplicable(no_knob(other).to_string()),
    }
}

/// A rate limit sets the rate: nginx's `limit_req` removed with `--allow-limits`, else the
/// climb stops (the benchmark should measure the server, not the limit).
fn rate_limit(f: &Finding, k: &Knobs) -> Remedy {
    match k.nginx.filter(|n| n.limit_req) {
        Some(_) if k.allow_limits => Remedy::Change(Change::NginxLimitReqOff),
        Some(_) => Remedy::Stop(format!(
            "a limit sets the rate ({}): lift it for the benchmark first (--allow-limits lets the climb remove nginx's limit_req for its runs)",
            f.summary
        )),
        None => Remedy::Stop(format!(
            "a limit sets the rate ({}): lift it for the benchmark first",
            f.summary
        )),
    }
}

/// Why a cause names no change the climb makes, and what would lift it.
fn no_knob(cause: &Cause) -> &'static str {
    match cause {
        Cause::Network => "the network is the bound: a faster link, more of them, or smaller responses; no setting here lifts it",
        Cause::Paced => "an open loop: the schedule (-R) sets the rate, not a knob",
        Cause::DelayedAck { .. } => {
            "TCP_NODELAY or one write per response, in the server's code: not a knob"
        }
        Cause::DiskWait { .. } => "the disk on the request path: the server's code or its disk",
        Cause::NotTheRuns => "the host's, not this run's",
        Cause::KernelTimer { .. } => "a TCP timer: find the loss or the dropped connection attempts it waits out; not a knob",
        Cause::Steal { .. } => "the hypervisor gives the CPUs to other guests: a dedicated host or instance; no setting here lifts it",
        Cause::MemoryPressure { .. } => {
            "the host is short of memory: less of it in use, or more of it; not a knob"
        }
        Cause::TcpMemory { .. } => "TCP's buffers are at net.ipv4.tcp_mem: smaller buffers per connection, fewer connections, or a larger tcp_mem for the host's memory",
        Cause::HostSettings { .. } | Cause::Steering { .. } | Cause::NginxCosts { .. } => {
            "see the finding's settings"
        }
        Cause::BehindSchedule { .. } => {
            "an open loop behind its schedule: the climb measures closed loops"
        }
        Cause::TooShort { .. } => "the window is too short to judge: a longer --duration",
        Cause::Undrained => "the target was busy before the run: a longer --drain",
        Cause::Unexplained => "no single bottleneck to change",
        Cause::Descriptors { .. } => {
            "a descriptor limit: raise RLIMIT_NOFILE or fs.file-max; not measured here"
        }
        Cause::Loss { .. } | Cause::SocketBacklog { .. } => {
            "packets lost on the path: find where they drop; not a knob"
        }
        Cause::IrqBalance { .. } => "irqbalance moves pinned IRQs: stop it while pinning",
        Cause::WindowWait { .. } => "TCP's windows: the finding names the side and the buffer",
        Cause::CpuWork { .. } => "where a side's CPU goes: the code's, not a knob",
        Cause::TlsHandshakes { .. } => {
            "TLS handshakes per response: keep-alive or session resumption (--tls-reuse)"
        }
        Cause::Clocksource { .. } => "the clocksource is the host's: `qpslab tune apply`",
        Cause::Stalls { .. } => "the server stops as a whole (a pause in its code or runtime: a collection, a blocking call, a lock): its code, not a knob",
        _ => "no change of the climb's answers it: see the finding's remedy",
    }
}

/// A side at its CPU: more generator threads, server workers (the bench's server, a
/// template's, nginx's), or why not.
fn saturated(side: &str, held: &str, k: &Knobs) -> Remedy {
    let na = |why: &str| Remedy::NotApplicable(why.to_string());
    match (side, held) {
        (_, "quota") => {
            na("a cgroup CPU quota holds the side: raise it; qpslab does not change cgroups")
        }
        ("generator", _) if k.threads < k.generator_cpus => {
            Remedy::Change(Change::Threads { from: k.threads, to: k.threads + 1 })
        }
        ("generator", _) if k.agents.is_some_and(|(n, pool)| n < pool) => {
            let n = k.agents.map_or(0, |a| a.0);
            Remedy::Change(Change::Agents { from: n, to: n + 1 })
        }
        ("generator", _) if k.agents.is_some() => na(
            "every load machine of the pool (--agents) runs the load: more of them, or more CPUs for each",
        ),
        ("generator", _) => na(
            "the generator runs a thread on each CPU it has: more load machines (--agents) or more CPUs for it",
        ),
        ("both", _) => na(
            "both sides use all the CPU they have on this host: more CPUs, or the generator on another machine (--agents)",
        ),
        _ => match k.workers {
            Some(w) if w < k.server_cpus => {
                Remedy::Change(Change::Workers { from: w, to: w + 1 })
            }
            Some(_) => na(
                "every server CPU runs a worker: more CPUs for the server (--server-cpus) or less work per request",
            ),
            None => match k.template.workers {
                Some(w) if w < k.server_cpus.max(1) => {
                    Remedy::Change(Change::ServerWorkers { from: w, to: w + 1 })
                }
                None if k.nginx.is_some() => match k.nginx.and_then(|n| nginx_workers(&n, k)) {
                    Some(c) => Remedy::Change(c),
                    None => na(
                        "nginx runs a worker on every CPU it may use (worker_processes): more CPUs for it, or less work per request",
                    ),
                },
                Some(_) => na(
                    "every CPU the server may use runs a worker: more CPUs for it, or less work per request",
                ),
                None => na(
                    "the server is the user's own: --apply-server with --server-config TEMPLATE:FILE and --server-reload CMD lets the climb change its workers",
                ),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;
    use qpslab_doctor::Severity;

    /// A finding as the doctor makes it, with its typed cause (what the climb reads).
    fn finding(name: &'static str, cause: Cause) -> Finding {
        Finding {
            name,
            severity: Severity::Info,
            summary: String::new(),
            evidence: Vec::new(),
            remedy: String::new(),
            cause: Some(cause),
        }
    }

    fn saturated(side: &str, held: &str) -> Cause {
        Cause::Saturated { side: side.into(), held: held.into() }
    }

    fn settings(names: &[(&str, &str)], client_side: bool) -> Cause {
        let settings = names.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
        Cause::HostSettings { settings, client_side }
    }

    const ONE_EACH: Knobs = Knobs {
        connections: 1,
        threads: 1,
        generator_cpus: 1,
        workers: Some(1),
        server_cpus: 1,
        nginx: None,
        server_mask: 0,
        apply_host: false,
        template: Vars { workers: None, threads: None, nofile: None },
        server_here: true,
        failing: false,
        agents: None,
        allow_limits: false,
    };

    #[test]
    fn each_bound_names_its_knob_or_why_not() {
        let k = ONE_EACH;
        assert_eq!(
            remedy(&finding("latency-bound", Cause::RoundTrips), &k),
            Remedy::Change(Change::Connections { from: 1, to: 2 })
        );
        // A server's HTTP/2 window holding the bodies: more of them in flight at once (the
        // window itself is the server's to raise, said by the finding).
        let window = Cause::FlowControl { window: 16_384, share: 0.5, connection: false };
        assert_eq!(
            remedy(&finding("latency-bound", window), &k),
            Remedy::Change(Change::Connections { from: 1, to: 2 })
        );
        // One CPU each: neither side can get another thread.
        assert!(matches!(
            remedy(&finding("client-bound", saturated("generator", "own")), &k),
            Remedy::NotApplicable(_)
        ));
        assert!(matches!(
            remedy(&finding("server-bound", saturated("server", "own")), &k),
            Remedy::NotApplicable(_)
        ));
        let roomy = Knobs { generator_cpus: 2, server_cpus: 4, ..k };
        assert_eq!(
            remedy(&finding("client-bound", saturated("generator", "own")), &roomy),
            Remedy::Change(Change::Threads { from: 1, to: 2 })
        );
        // Over load machines: the next of the pool, until every one runs.
        let agents = Knobs { generator_cpus: 0, agents: Some((1, 3)), ..k };
        let client = finding("client-bound", saturated("generator", "own"));
        assert_eq!(remedy(&client, &agents), Remedy::Change(Change::Agents { from: 1, to: 2 }));
        let all = Knobs { agents: Some((3, 3)), ..agents };
        assert!(matches!(remedy(&client, &all), Remedy::NotApplicable(_)));
        assert_eq!(
            remedy(&finding("server-bound", saturated("server", "own")), &roomy),
            Remedy::Change(Change::Workers { from: 1, to: 2 })
        );
        // A quota is not a worker count; a user's server is not ours to change.
        let quota = finding("server-bound", saturated("server", "quota"));
        assert!(matches!(remedy(&quota, &roomy), Remedy::NotApplicable(_)));
        let theirs = Knobs { workers: None, ..roomy };
        assert!(matches!(
            remedy(&finding("server-bound", saturated("server", "own")), &theirs),
            Remedy::NotApplicable(_)
        ));
        assert!(matches!(remedy(&finding("run-failed", Cause::Failed), &k), Remedy::Stop(_)));
        // The server's log stops the climb when the run failed by it, not for a line or two.
        let log = finding(
            "server-log",
            Cause::ServerLog { message: "upstream timed out".into(), count: 2 },
        );
        assert!(matches!(remedy(&log, &k), Remedy::NotApplicable(_)));
        assert!(matches!(remedy(&log, &Knobs { failing: true, ..k }), Remedy::Stop(_)));
        // A user's server in hand through its template: more connections first, then workers.
        let tmpl =
            Knobs { template: Vars { workers: Some(1), ..Vars::default() }, workers: None, ..k };
        assert_eq!(
            remedies(&finding("latency-bound", Cause::RoundTrips), &tmpl, &|_| None, &[])[1],
            Remedy::Change(Change::ServerWorkers { from: 1, to: 2 })
        );
        let roomy_tmpl = Knobs { server_cpus: 2, ..tmpl };
        assert_eq!(
            remedy(&finding("server-bound", saturated("server", "own")), &roomy_tmpl),
            Remedy::Change(Change::ServerWorkers { from: 1, to: 2 })
        );
        assert!(matches!(
            remedy(&finding("server-bound", saturated("server", "own")), &tmpl),
            Remedy::NotApplicable(_)
        ));
        assert_eq!(Change::ServerWorkers { from: 1, to: 2 }.flag(), "server: {{workers}} = 2");
        // A template with a thread pool (gunicorn's gthread, puma): a server that waits gets
        // twice the threads before another worker.
        let pool = Knobs { template: Vars { threads: Some(4), ..tmpl.template }, ..tmpl };
        let r = remedies(&finding("latency-bound", Cause::RoundTrips), &pool, &|_| None, &[]);
        assert_eq!(r[1], Remedy::Change(Change::ServerThreads { from: 4, to: 8 }));
        assert_eq!(r[2], Remedy::Change(Change::ServerWorkers { from: 1, to: 2 }));
        assert_eq!(Change::ServerThreads { from: 4, to: 8 }.flag(), "server: {{threads}} = 8");
        // Short of CPU with nothing else to try: batching.
        let both = finding("both-saturated", saturated("both", "own"));
        assert_eq!(batching(&both, &k), Some(Change::Connections { from: 1, to: 2 }));
        let batched = Knobs { connections: MAX_BATCHING, ..k };
        assert_eq!(batching(&both, &batched), None);
        assert_eq!(batching(&finding("server-bound", saturated("server", "quota")), &k), None);
        assert_eq!(batching(&finding("latency-bound", Cause::RoundTrips), &k), None);
        let most = Knobs { connections: MAX_CONNECTIONS, ..k };
        assert!(matches!(
            remedy(&finding("latency-bound", Cause::RoundTrips), &most),
            Remedy::NotApplicable(_)
        ));
    }

    /// nginx's costs become one change each, only with the server in the climb's hands.
    #[test]
    fn nginx_costs_are_changes_only_with_apply_server() {
        let costs = |access_log, keepalive_requests, workers, accept_mutex| Cause::NginxCosts {
            access_log,
            keepalive_requests,
            workers,
            accept_mutex,
        };
        let mut f = finding("nginx-config", costs(true, true, false, false));
        let theirs = Knobs { workers: None, ..ONE_EACH };
        assert!(matches!(remedies(&f, &theirs, &|_| None, &[])[..], [Remedy::NotApplicable(_)]));
        let nginx = NginxKnobs {
            keepalive_requests: 100,
            workers: Some(1),
            accept_mutex: false,
            reuseport: false,
            worker_connections: 768,
            worker_rlimit_nofile: None,
            keepalive_off: false,
            limit_req: false,
            listen_backlog: 511,
        };
        let ours = Knobs { nginx: Some(nginx), ..theirs };
        assert_eq!(
            remedies(&f, &ours, &|_| None, &[]),
            [
                Remedy::Change(Change::NginxAccessLogOff),
                Remedy::Change(Change::NginxKeepaliveRequests { from: 100, to: 100_000 })
            ]
        );
        let c = Change::NginxKeepaliveRequests { from: 100, to: 100_000 };
        assert_eq!(c.describe(), "nginx keepalive_requests 100 -> 100000");
        assert_eq!(c.flag(), "nginx: keepalive_requests 100000;");
        assert_eq!(Change::NginxAccessLogOff.directives(), [("access_log", "off".into(), "http")]);
        // Idle CPUs and one worker: a worker more, bound to the server's CPUs; workers taking
        // turns to accept: accept_mutex off, then a listen queue each.
        f.cause = Some(costs(false, false, true, true));
        let four = Knobs { server_cpus: 4, server_mask: 0b1111, ..ours };
        let mutex = Knobs { nginx: Some(NginxKnobs { accept_mutex: true, ..nginx }), ..four };
        let workers = Change::NginxWorkers { from: 1, to: 2, affinity: four.affinity() };
        assert_eq!(
            remedies(&f, &mutex, &|_| None, &[]),
            [
                Remedy::Change(workers.clone()),
                Remedy::Change(Change::NginxAcceptMutexOff),
                Remedy::Change(Change::NginxReuseport)
            ]
        );
        assert_eq!(
            remedy(&finding("server-bound", saturated("server", "own")), &four),
            Remedy::Change(workers)
        );
        // At one worker per CPU, or `auto`: none more.
        let full = Knobs { server_cpus: 1, ..ours };
        assert!(matches!(
            remedy(&finding("server-bound", saturated("server", "own")), &full),
            Remedy::NotApplicable(_)
        ));
        let auto = Knobs { nginx: Some(NginxKnobs { workers: None, ..nginx }), ..four };
        assert!(matches!(
            remedy(&finding("server-bound", saturated("server", "own")), &auto),
            Remedy::NotApplicable(_)
        ));
        let two_of_four = Knobs { server_mask: 0b0110, ..four };
        if std::thread::available_parallelism().map_or(1, std::num::NonZero::get) > 2 {
            assert_eq!(two_of_four.affinity(), "auto 110");
        }
        let c = Change::NginxWorkers { from: 1, to: 2, affinity: "auto 110".into() };
        assert_eq!(c.flag(), "nginx: worker_processes 2; worker_cpu_affinity auto 110;");
        assert_eq!(Change::NginxReuseport.flag(), "nginx: listen ... reuseport;");
    }

    #[test]
    fn a_change_is_made_on_a_copy_and_said_as_a_flag() {
        let o = BenchOptions::default();
        let c = Change::Connections { from: 1, to: 2 };
        assert_eq!(c.apply(&o).load.connections, Some(2));
        assert_eq!(o.load.connections, None);
        assert_eq!(c.describe(), "connections 1 -> 2");
        assert_eq!(c.flag(), "-c 2");
        assert!(c.same_knob(&Change::Connections { from: 2, to: 4 }));
        assert!(!c.same_knob(&Change::Workers { from: 1, to: 2 }));
    }

    /// Host findings become one setting each, only with --apply-host, only where the setting
    /// is below what tune plans and only on the server's host (and the load's, when both are
    /// here).
    #[test]
    fn host_findings_are_settings_only_with_apply_host() {
        let read = |name: &str| match name {
            "net.ipv4.tcp_tw_reuse" => Some("0".to_string()),
            "net.ipv4.ip_local_port_range" => Some("20000\t20999".to_string()),
            "net.core.somaxconn" => Some("65535".to_string()),
            _ => None,
        };
        let ports = finding(
            "ephemeral-ports",
            settings(
                &[("net.ipv4.tcp_tw_reuse", "1"), ("net.ipv4.ip_local_port_range", "1024 65535")],
                true,
            ),
        );
        assert!(matches!(remedies(&ports, &ONE_EACH, &read, &[])[..], [Remedy::NotApplicable(_)]));
        let host = Knobs { apply_host: true, ..ONE_EACH };
        let sysctl = |name: &str, from: &str, to: &str| {
            Remedy::Change(Change::Sysctl { name: name.into(), from: from.into(), to: to.into() })
        };
        assert_eq!(
            remedies(&ports, &host, &read, &[]),
            [
                sysctl("net.ipv4.tcp_tw_reuse", "0", "1"),
                sysctl("net.ipv4.ip_local_port_range", "20000 20999", "1024 65535"),
            ]
        );
        // Already at what tune plans: nothing to measure.
        let overflow =
            finding("accept-queue-overflow", settings(&[("net.core.somaxconn", "65535")], false));
        assert!(matches!(remedies(&overflow, &host, &read, &[])[..], [Remedy::NotApplicable(_)]));
        // With --server HOST the server's side is that host's (its value read there) and the
        // load's side is not the climb's.
        let far = Knobs { server_here: false, ..host };
        let low = |_: &str| Some("128".to_string());
        assert_eq!(
            remedies(&overflow, &far, &low, &[]),
            [sysctl("net.core.somaxconn", "128", "65535")]
        );
        assert!(matches!(remedies(&ports, &far, &read, &[])[..], [Remedy::NotApplicable(_)]));
        assert_eq!(
            remedies(&overflow, &host, &low, &[]),
            [sysctl("net.core.somaxconn", "128", "65535")]
        );
        // A namespace hides the host-wide ones.
        let drops = finding(
            "softnet-backlog-drops",
            settings(&[("net.core.netdev_max_backlog", "65536")], false),
        );
        assert!(matches!(remedies(&drops, &host, &|_| None, &[])[..], [Remedy::NotApplicable(_)]));
        let queue = finding("single-rx-queue", Cause::Steering { iface: Some("qvb".into()) });
        assert_eq!(
            remedies(&queue, &host, &read, &[]),
            [Remedy::Change(Change::Steering { iface: "qvb".into() })]
        );
        assert!(below("0", "1") && below("2", "1") && !below("1", "1"));
        assert!(below("32768 60999", "1024 65535") && !below("1024 65535", "1024 65535"));
        assert!(below("4096", "65535") && !below("65535", "65535"));
    }

    /// A failing start's limits in nginx's hands: its descriptors (only for the target's own
    /// processes; a templated server's through `{{nofile}}`), keep-alive off, and a rate limit
    /// only with --allow-limits.
    #[test]
    fn nginx_limits_are_changes_where_the_climb_may_make_them() {
        let nginx = NginxKnobs::of(&qpslab_host::nginx::parse(
            "events { worker_connections 768; }\nhttp { keepalive_timeout 0; limit_req_zone $binary_remote_addr zone=one:10m rate=200r/s; server { location / { limit_req zone=one; } } }",
        ));
        let k = Knobs { nginx: Some(nginx), ..ONE_EACH };
        let fds =
            finding("fd-limit-close", Cause::Descriptors { pid: Some(7), open: 40, limit: 40 });
        assert_eq!(
            remedies(&fds, &k, &|_| None, &[6, 7]),
            [Remedy::Change(Change::NginxRlimitNofile { from: 40, to: 8192 })]
        );
        // The generator's table is not nginx's.
        assert!(matches!(remedies(&fds, &k, &|_| None, &[6])[..], [Remedy::NotApplicable(_)]));
        // A server of the user's kind whose template names its limit: the template's.
        let t = Knobs { template: Vars { nofile: Some(48), ..Vars::default() }, ..ONE_EACH };
        let c = Change::ServerNofile { from: 48, to: 8192 };
        assert_eq!(remedies(&fds, &t, &|_| None, &[7]), [Remedy::Change(c.clone())]);
        assert!(c.lifts_limit());
        assert_eq!(c.flag(), "server: {{nofile}} = 8192");
        let mut v = Vars::default();
        assert!(c.in_template(&mut v) && v.nofile == Some(8192));
        assert!(!Change::NginxAccessLogOff.in_template(&mut v));
        // Not named by the template: nothing to change.
        let untemplated = remedies(&fds, &ONE_EACH, &|_| None, &[7]);
        assert!(matches!(untemplated[..], [Remedy::NotApplicable(_)]), "{untemplated:?}");
        let closes = finding("no-keep-alive", Cause::KeepAliveOff { per_response: 1.0 });
        assert_eq!(
            remedies(&closes, &k, &|_| None, &[]),
            [Remedy::Change(Change::NginxKeepaliveOn)]
        );
        let limit = finding(
            "rate-limited",
            Cause::RateLimit { status: 503, grpc_status: None, ok_per_s: 200.0, configured: None },
        );
        let Remedy::Stop(why) = remedy(&limit, &k) else { panic!("a limit stops the climb") };
        assert!(why.contains("--allow-limits"), "{why}");
        let allowed = Knobs { allow_limits: true, ..k };
        assert_eq!(remedy(&limit, &allowed), Remedy::Change(Change::NginxLimitReqOff));
        // nginx's log in its own words, when it heads: the same limit.
        let said = finding(
            "server-log",
            Cause::ServerLog {
                message: "limiting requests, excess: 0.920 by zone \"one\", client: 127.0.0.1"
                    .into(),
                count: 24244,
            },
        );
        let failing = Knobs { failing: true, ..k };
        let Remedy::Stop(why) = remedy(&said, &failing) else { panic!("the limit stops it") };
        assert!(why.contains("--allow-limits"), "{why}");
        let failing_allowed = Knobs { allow_limits: true, ..failing };
        assert_eq!(remedy(&said, &failing_allowed), Remedy::Change(Change::NginxLimitReqOff));
        // A full listen queue with the host's cap at tune's value: nginx's own, 511.
        let overflow =
            finding("accept-queue-overflow", settings(&[("net.core.somaxconn", "65535")], false));
        let host = Knobs { apply_host: true, ..k };
        let at = |_: &str| Some("65535".to_string());
        assert_eq!(
            remedies(&overflow, &host, &at, &[]),
            [Remedy::Change(Change::NginxListenBacklog { from: 511, to: 65535 })]
        );
        // The host's cap first, when it is below, then nginx's.
        let low = |_: &str| Some("4096".to_string());
        assert_eq!(remedies(&overflow, &host, &low, &[]).len(), 2);
        let edit = Change::NginxLimitReqOff.nginx_edit().unwrap();
        let edited = crate::climb::server::edit(
            "http { limit_req_zone $a zone=one:10m rate=1r/s; server { location / { limit_req zone=one; return 200; } } }",
            &edit,
        )
        .unwrap();
        assert_eq!(
            edited,
            "http { limit_req_zone $a zone=one:10m rate=1r/s; server { location / {  return 200; } } }"
        );
    }
}
