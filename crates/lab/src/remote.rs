//! A bench's server on another machine (`--server user@S`): one `qpslab agent` on S, reached
//! through the user's ssh like a load agent, that starts the target there, finds the server
//! behind a URL, runs the doctor on S's counters while the load runs elsewhere, and applies and
//! reverts a sweep variant's host settings on S.
//!
//! [`ServerHost`] is the coordinator's side: typed calls over a [`Session`]. [`HostAgent`] is
//! the agent's side ([`HostSide`]): it carries the calls out on its own host, and undoes what
//! it started (the target, the sampling, host settings) when the coordinator's pipe closes,
//! so nothing outlives the run on S.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use qpslab_doctor::{Context, Generator, LoadFacts};
use qpslab_doctor::{Diagnosis, Examination};
use qpslab_fleet::agent::HostSide;
use qpslab_fleet::session::{CallError, FleetOptions, Session};
use qpslab_host::sample::{Role, Sample};
use qpslab_host::Root;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::climb::server::UserServer;
use crate::hostset::{self, Applied};
pub use crate::kinds::TargetUp;
use crate::kinds::TuneSpec;
use crate::kinds::{BenchError, ServerSpec, TargetKind};
use crate::{place, target};

/// How long a call may take: starting nginx, a final sample, a tune plan.
const CALL_LIMIT: Duration = Duration::from_secs(30);

/// Start the target on the server host.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TargetCall {
    /// Its CPUs default to every CPU the agent may use: the load runs elsewhere.
    pub spec: ServerSpec,
    /// The address to listen on [default: the one the ssh connection reached; loopback for
    /// an agent started here].
    pub listen: Option<IpAddr>,
}

/// Start sampling the server host.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExamineCall {
    pub interval: Duration,
    /// Begin this long after the call arrives (the load's start instant).
    pub delay: Duration,
    /// The server's processes, when known (bench started it, or `--server-pid`).
    pub pids: Vec<u32>,
    /// Otherwise: the address the load connects to, to find the server listening there.
    pub listen: Option<SocketAddr>,
    /// Profile that host's CPUs meanwhile.
    pub profile: Option<qpslab_profile::ProfileOptions>,
}

/// The server as the server host sees it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Examining {
    pub pids: Vec<u32>,
    pub found_by: Option<String>,
    pub cpus: Vec<usize>,
    pub notes: Vec<String>,
}

/// End the sampling and diagnose, with what the load knows.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DiagnoseCall {
    pub load: Option<LoadFacts>,
    pub addr_not_available: u64,
    pub generators: Vec<Generator>,
    /// The run's ports ([`Context::ports`]).
    #[serde(default)]
    pub ports: Vec<u16>,
}

impl DiagnoseCall {
    fn context(self) -> Context {
        Context {
            load: self.load,
            addr_not_available: self.addr_not_available,
            generators: self.generators,
            ports: self.ports,
            ..Context::default()
        }
    }
}

/// Plan a variant's host settings against the server host and check they can be applied
/// (`tune-check`), or apply them (`tune-apply`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TuneCall {
    pub tune: TuneSpec,
    pub journal: Option<PathBuf>,
}

/// The user's nginx taken in hand on the server host: its main file there and its text.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NginxHeld {
    pub file: PathBuf,
    pub original: String,
}

/// The coordinator's side: an agent on the server host and the calls it answers.
#[derive(Debug)]
pub struct ServerHost<'a> {
    session: Session<'a>,
    /// As the user named it (`root@S`).
    pub name: String,
    /// As the host names itself.
    pub hostname: String,
    /// The address of the host that ssh reached, where the target listens by default.
    pub ssh_addr: Option<IpAddr>,
}

impl<'a> ServerHost<'a> {
    /// Starts the agent on the server host (copying this build over when needed).
    pub fn connect(fleet: &'a FleetOptions, stop: &'a AtomicBool) -> Result<Self, BenchError> {
        let session =
            Session::open(fleet, "--server", stop).map_err(|e| BenchError::Usage(e.to_string()))?;
        let m = &session.members[0];
        let (hostname, ssh_addr) = m
            .hello
            .as_ref()
            .map_or((String::new(), None), |h| (h.hostname.clone(), h.ssh_addr.clone()));
        Ok(ServerHost {
            name: m.host.name.clone(),
            hostname,
            ssh_addr: ssh_addr.and_then(|a| a.parse().ok()),
            session,
        })
    }

    fn call<T: DeserializeOwned>(
        &mut self,
        method: &str,
        params: impl Serialize,
    ) -> Result<T, String> {
        let params = serde_json::to_value(params).map_err(|e| e.to_string())?;
        let value = self.session.call(0, method, params, CALL_LIMIT)?;
        serde_json::from_value(value)
            .map_err(|e| format!("{method}: an answer of another form: {e}"))
    }

    fn fail(&self, what: &str, e: String) -> BenchError {
        BenchError::Target(format!("--server {}: {what}: {e}", self.name))
    }

    /// Starts the target there.
    pub fn start_target(&mut self, c: &TargetCall) -> Result<TargetUp, BenchError> {
        self.call("target", c).map_err(|e| self.fail("the target did not start", e))
    }

    /// Begins sampling there after `c.delay`.
    pub fn examine(&mut self, c: &ExamineCall) -> Result<Examining, BenchError> {
        self.call("examine", c).map_err(|e| self.fail("the doctor did not start", e))
    }

    /// Ends the sampling and returns the diagnosis of the server host.
    pub fn diagnose(&mut self, c: &DiagnoseCall) -> Result<Diagnosis, BenchError> {
        self.call("diagnose", c).map_err(|e| self.fail("the doctor failed", e))
    }

    /// Stops the target it started.
    pub fn stop_target(&mut self) -> Result<(), BenchError> {
        self.call("stop-target", ()).map_err(|e| self.fail("stopping the target", e))
    }

    /// Checks that a variant's host settings can be applied there (nothing changes).
    pub fn tune_check(&mut self, c: &TuneCall) -> Result<(), String> {
        self.call("tune-check", c)
    }

    /// Applies a variant's host settings there (journaled on the server host).
    /// A lost answer ([`CallError::Lost`]) may leave them applied there, with their journal.
    pub fn tune_apply(&mut self, c: &TuneCall) -> Result<(), CallError> {
        let params = serde_json::to_value(c).map_err(|e| CallError::Failed(e.to_string()))?;
        self.session.call(0, "tune-apply", params, CALL_LIMIT).map(drop)
    }

    /// Reverts them; Some(note) when a value someone else changed meanwhile was kept.
    pub fn tune_revert(&mut self) -> Result<Option<String>, String> {
        self.call("tune-revert", ())
    }

    /// Plans host settings there against the host as it is and checks they can be applied
    /// (`tune-check`'s test): how many settings they would change (0: it has them already).
    pub fn tune_plan(&mut self, c: &TuneCall) -> Result<usize, String> {
        self.call("tune-plan", c)
    }

    /// Sysctls of that host (of its network namespace), by dotted name; None where absent.
    pub fn sysctls(&mut self, names: &[String]) -> Result<Vec<Option<String>>, String> {
        self.call("sysctls", names)
    }

    /// Takes the nginx among `pids` in hand there (`--apply-server`): its main configuration
    /// file and the text found in it; None when none of them is nginx. The agent restores it
    /// when asked, and by itself when this session ends.
    pub fn nginx_take(&mut self, pids: &[u32]) -> Result<Option<NginxHeld>, String> {
        self.call("nginx-take", pids)
    }

    /// Puts `text` in force as nginx's main configuration file there (`nginx -t`, reload).
    pub fn nginx_put(&mut self, text: &str) -> Result<(), String> {
        self.call("nginx-put", text)
    }

    /// Whether nginx there would take `text` (`nginx -t` on a copy).
    pub fn nginx_check(&mut self, text: &str) -> Result<(), String> {
        self.call("nginx-check", text)
    }

    /// nginx there re-listens (a reload), so a listen queue setting changed since applies.
    pub fn nginx_relisten(&mut self) -> Result<(), String> {
        self.call("nginx-relisten", ())
    }

    /// The original back there, byte for byte, reloaded.
    pub fn nginx_restore(&mut self) -> Result<(), String> {
        self.call("nginx-restore", ())
    }

    /// The server host as `qpslab host --json` reads it, for a run's provenance.
    pub fn host_json(&mut self) -> Result<serde_json::Value, String> {
        self.call("host", ())
    }

    /// Closes the pipe: the agent stops what it started and exits.
    pub fn close(mut self) {
        self.session.close_all(Duration::from_secs(5));
    }
}

/// Host settings while a run lasts: applied here, or on the server host through an agent that
/// reverts them by itself if this process dies (its pipe closes). The sweep's variants and the
/// climb's states hold theirs this way.
#[derive(Debug)]
pub enum InForce<'a> {
    Here(Option<Applied>),
    /// The server host, and whether settings were applied there.
    There(ServerHost<'a>, bool),
}

impl<'a> InForce<'a> {
    /// An agent on the server host, with `call`'s settings applied there when given (the
    /// session stays open while the run lasts: closing it reverts them).
    pub fn there(
        fleet: &'a FleetOptions,
        stop: &'a AtomicBool,
        call: Option<&TuneCall>,
    ) -> Result<InForce<'a>, String> {
        let mut far = ServerHost::connect(fleet, stop).map_err(|e| e.to_string())?;
        if let Some(c) = call {
            if let Err(e) = far.tune_apply(c) {
                let name = far.name.clone();
                far.close();
                // An agent that ended mid-apply may have written some: its journal says which.
                let after = match e {
                    CallError::Failed(_) => "",
                    CallError::Lost(_) => "; run `qpslab tune revert` there",
                };
                return Err(format!("cannot apply its host settings on {name}: {e}{after}"));
            }
        }
        Ok(InForce::There(far, call.is_some()))
    }

    /// Reverts; Some(note) when a value someone else changed meanwhile was kept.
    pub fn revert(self) -> Result<Option<String>, String> {
        match self {
            InForce::Here(applied) => Ok(applied.map(Applied::revert).transpose()?.flatten()),
            InForce::There(far, false) => {
                far.close();
                Ok(None)
            }
            InForce::There(mut far, true) => {
                let r = far.tune_revert().map_err(|e| {
                    format!("cannot revert its host settings on {}: {e}; run `qpslab tune revert` there", far.name)
                });
                far.close();
                r
            }
        }
    }
}

/// Sampling in progress on the agent's host.
#[derive(Debug)]
struct Sampling {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<(Examination, Vec<Sample>), String>>,
}

/// The agent's side: the calls carried out on this host.
#[derive(Debug)]
pub struct HostAgent {
    /// This executable, started as `serve` for the built-in target.
    serve_exe: PathBuf,
    /// The address of this host the coordinator's ssh reached.
    ssh_addr: Option<IpAddr>,
    target: Option<target::Running>,
    sampling: Option<Sampling>,
    applied: Option<Applied>,
    /// The user's nginx in a climb's hands (restored on drop).
    nginx: Option<UserServer>,
}

impl HostAgent {
    pub fn new(serve_exe: PathBuf, ssh_addr: Option<String>) -> Self {
        HostAgent {
            serve_exe,
            ssh_addr: ssh_addr.and_then(|a| a.parse().ok()),
            target: None,
            sampling: None,
            applied: None,
            nginx: None,
        }
    }

    fn target(&mut self, c: TargetCall) -> Result<TargetUp, String> {
        if let Some(t) = self.target.take() {
            t.stop();
        }
        // Not reached over ssh: a local pipe, and loopback reaches it.
        let ip = c.listen.or(self.ssh_addr).unwrap_or(IpAddr::from([127, 0, 0, 1]));
        let spec = c.spec;
        let cpus = spec.cpus.unwrap_or_else(qpslab_sys::cpus::allowed_cpus);
        let workers = spec.workers.unwrap_or(cpus.len()).max(1);
        let running = match spec.kind {
            TargetKind::Builtin => target::builtin(
                &self.serve_exe,
                ip,
                &cpus,
                workers,
                (spec.accept, spec.tls, spec.h3),
                None,
            ),
            TargetKind::Nginx => {
                let how = target::NginxHow { accept: spec.accept, tls: spec.tls, h2: spec.h2 };
                target::nginx(ip, &cpus, workers, how, None)
            }
        }
        .map_err(|e| e.to_string())?;
        let up = TargetUp { addr: running.addr, pids: running.pids.clone(), cpus, workers };
        self.target = Some(running);
        Ok(up)
    }

    fn examine(&mut self, c: ExamineCall) -> Result<Examining, String> {
        self.stop_sampling();
        let root = Root::live();
        let mut exam = Examination::new(&root, c.interval).map_err(|e| e.to_string())?;
        if c.pids.is_empty() && c.listen.is_none() {
            return Err("examine: neither the server's PIDs nor its address".into());
        }
        let found =
            place::find_server(&root, exam.host(), c.listen, &c.pids).map_err(|e| e.to_string())?;
        for &pid in &found.pids {
            exam.follow(pid, Role::Server);
        }
        if let Some(o) = c.profile {
            exam.profile(o);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let begin = Instant::now() + c.delay;
        let thread = std::thread::spawn(move || {
            let mut exam = exam;
            while Instant::now() < begin {
                if flag.load(Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5).min(begin - Instant::now()));
            }
            let samples =
                exam.record(|| flag.load(Ordering::Relaxed)).map_err(|e| e.to_string())?;
            Ok((exam, samples))
        });
        self.sampling = Some(Sampling { stop, thread });
        Ok(Examining {
            pids: found.pids,
            found_by: found.found_by.map(str::to_string),
            cpus: found.cpus,
            notes: found.notes,
        })
    }

    fn diagnose(&mut self, c: DiagnoseCall) -> Result<Diagnosis, String> {
        let s = self.sampling.take().ok_or("diagnose: no examination was started")?;
        s.stop.store(true, Ordering::Relaxed);
        let (exam, samples) = s.thread.join().map_err(|_| "the sampling thread panicked")??;
        Ok(exam.diagnose(&samples, c.context()))
    }

    fn stop_sampling(&mut self) {
        if let Some(s) = self.sampling.take() {
            s.stop.store(true, Ordering::Relaxed);
            let _ = s.thread.join();
        }
    }

    /// The number of settings `c` would change here now, checked as `tune-check` checks them.
    /// No settings at all plan nothing (not tune's whole plan): a check of the rights alone.
    fn tune_plan(c: &TuneCall) -> Result<usize, String> {
        let root = Root::live();
        let change = if c.tune.is_explicit() || c.tune.is_planned() {
            hostset::host_change(&c.tune)?
        } else {
            hostset::HostChange::Explicit(qpslab_tune::Explicit::default())
        };
        let journal = qpslab_tune::journal_path(&root, c.journal.as_deref());
        let host =
            qpslab_host::Host::read(&root).map_err(|e| format!("cannot read the host: {e}"))?;
        let plan = hostset::plan_for(&root, &host, &change)?;
        hostset::check_plan(&plan, &journal)?;
        Ok(plan.changes.len())
    }

    fn tune(&mut self, c: TuneCall, apply: bool) -> Result<(), String> {
        let root = Root::live();
        let change = hostset::host_change(&c.tune)?;
        let journal = qpslab_tune::journal_path(&root, c.journal.as_deref());
        if !apply {
            return hostset::check(&root, &change, &journal);
        }
        if self.applied.is_some() {
            return Err("host settings are already applied; revert them first".into());
        }
        self.applied = Some(Applied::new(&root, &journal, &change)?);
        Ok(())
    }
}

impl HostAgent {
    /// The calls on the user's nginx a climb holds here.
    fn nginx_call(
        &mut self,
        method: &str,
        params: serde_json::Value,
    ) -> Result<serde_json::Value, String> {
        let text = || -> Result<String, String> {
            serde_json::from_value(params.clone())
                .map_err(|e| format!("{method}: parameters of another form: {e}"))
        };
        let none = serde_json::Value::Null;
        if method == "nginx-take" {
            let pids: Vec<u32> = serde_json::from_value(params.clone())
                .map_err(|e| format!("{method}: parameters of another form: {e}"))?;
            if let Some(mut held) = self.nginx.take() {
                held.restore()?;
            }
            self.nginx = UserServer::nginx(&pids)?;
            let held = self
                .nginx
                .as_ref()
                .map(|n| NginxHeld { file: n.file.clone(), original: n.original.clone() });
            return serde_json::to_value(held).map_err(|e| e.to_string());
        }
        let n = self.nginx.as_mut().ok_or("no nginx was taken in hand (nginx-take)")?;
        match method {
            "nginx-put" => n.put(&text()?)?,
            "nginx-check" => n.check(&text()?)?,
            "nginx-relisten" => n.relisten()?,
            _ => n.restore()?,
        }
        Ok(none)
    }
}

impl HostSide for HostAgent {
    fn call(
        &mut self,
        method: &str,
        params: serde_json::Value,
    ) -> Result<serde_json::Value, String> {
        fn arg<T: DeserializeOwned>(method: &str, v: serde_json::Value) -> Result<T, String> {
            serde_json::from_value(v)
                .map_err(|e| format!("{method}: parameters of another form: {e}"))
        }
        fn out(v: impl Serialize) -> Result<serde_json::Value, String> {
            serde_json::to_value(v).map_err(|e| e.to_string())
        }
        match method {
            "target" => out(self.target(arg(method, params)?)?),
            "stop-target" => {
                if let Some(t) = self.target.take() {
                    t.stop();
                }
                out(())
            }
            "examine" => out(self.examine(arg(method, params)?)?),
            "diagnose" => out(self.diagnose(arg(method, params)?)?),
            "tune-check" => out(self.tune(arg(method, params)?, false)?),
            "tune-apply" => out(self.tune(arg(method, params)?, true)?),
            "tune-plan" => out(Self::tune_plan(&arg(method, params)?)?),
            "nginx-take" | "nginx-put" | "nginx-check" | "nginx-relisten" | "nginx-restore" => {
                self.nginx_call(method, params)
            }
            "sysctls" => {
                let names: Vec<String> = arg(method, params)?;
                let root = Root::live();
                out(names
                    .iter()
                    .map(|n| qpslab_host::host::read_sysctl(&root, n))
                    .collect::<Vec<_>>())
            }
            "tune-revert" => out(match self.applied.take() {
                Some(a) => a.revert()?,
                None => None,
            }),
            "host" => {
                let host = qpslab_host::Host::read(&Root::live()).map_err(|e| e.to_string())?;
                out(host)
            }
            other => Err(format!("unknown call {other:?} (this agent is another build?)")),
        }
    }
}

impl Drop for HostAgent {
    fn drop(&mut self) {
        self.stop_sampling();
        // The target (its Drop stops it), host settings (Applied's Drop reverts them) and a
        // climb's nginx (UserServer's Drop restores it) go with their fields.
    }
}
