//! Agent processes started and introduced: a [`Session`] spawns `qpslab agent` on each host
//! (through ssh, or as a local child), waits for every agent's hello, checks its protocol and
//! build, copies this build over when the remote one is missing or another build (unless
//! `--agent-exe` names one), and then carries messages both ways. The load coordinator and the
//! server host (bench's doctor and target on another machine) both start their agents here; a
//! host that cannot start stops everything before any request, with the flag that named it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use crate::protocol::{Command, Event, PROTOCOL};
use crate::transport::{self, AgentHost, Exe, Incoming, Link, Message, Place};

/// How long an agent has to introduce itself (ssh login included).
pub const HELLO_WAIT: Duration = Duration::from_secs(30);

/// Where and how to run agents.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    pub hosts: Vec<AgentHost>,
    /// The ssh command, split (`--ssh`, `QPSLAB_SSH`).
    pub ssh: Vec<String>,
    /// `--agent-exe`: the remote executable; else this build's copy, copied over when needed.
    pub agent_exe: Option<String>,
    /// This build: its version and executable hash, which agents must match.
    pub version: String,
    pub hash: String,
}

/// Why the run did not happen, or did not finish anywhere.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// The user's to fix (a host, a key, a flag): exit 2, before any request.
    #[error("{0}")]
    Usage(String),
    /// The run failed (every agent was lost): exit 1.
    #[error("{0}")]
    Failed(String),
}

/// What an agent said of itself.
#[derive(Debug, Clone)]
pub struct Hello {
    pub version: String,
    pub hash: String,
    pub hostname: String,
    pub cpus: usize,
    /// The address of its host that the ssh connection reached, when it came over ssh.
    pub ssh_addr: Option<String>,
}

/// One agent process as the session keeps it.
#[derive(Debug)]
pub struct Member {
    pub host: AgentHost,
    link: Option<Link>,
    /// Which spawn of this agent is current (a copy respawns it).
    generation: usize,
    copied: bool,
    pub hello: Option<Hello>,
}

/// Agents started and introduced, with one channel for everything they say.
#[derive(Debug)]
pub struct Session<'a> {
    fleet: &'a FleetOptions,
    /// The flag that named the hosts (`--agents`, `--server`), for messages.
    flag: &'static str,
    stop: &'a AtomicBool,
    pub members: Vec<Member>,
    tx: Sender<Message>,
    rx: Receiver<Message>,
    calls: u32,
}

impl<'a> Session<'a> {
    /// Starts an agent on every host of `fleet` and waits until each has introduced itself
    /// as this build (copying it over where needed). `stop` (Ctrl-C) ends the wait.
    pub fn open(
        fleet: &'a FleetOptions,
        flag: &'static str,
        stop: &'a AtomicBool,
    ) -> Result<Self, FleetError> {
        let (tx, rx) = mpsc::channel();
        let members = fleet
            .hosts
            .iter()
            .map(|h| Member {
                host: h.clone(),
                link: None,
                generation: 0,
                copied: false,
                hello: None,
            })
            .collect();
        let mut s = Session { fleet, flag, stop, members, tx, rx, calls: 0 };
        for i in 0..s.members.len() {
            s.spawn(i)?;
        }
        s.await_hellos()?;
        Ok(s)
    }

    fn exe(&self) -> Exe {
        match &self.fleet.agent_exe {
            Some(p) => Exe::Path(p.clone()),
            None => Exe::Auto { hash: self.fleet.hash.clone() },
        }
    }

    /// Link ids: member index plus a multiple of the member count per respawn.
    fn spawn(&mut self, i: usize) -> Result<(), FleetError> {
        let n = self.members.len();
        let exe = self.exe();
        let flag = self.flag;
        let m = &mut self.members[i];
        let id = i + n * m.generation;
        let link =
            Link::spawn(id, &m.host.place, &self.fleet.ssh, &exe, &self.tx).map_err(|e| {
                FleetError::Usage(format!(
                    "{flag} {}: cannot run {}: {e} (see --ssh)",
                    m.host.name,
                    match m.host.place {
                        Place::Local { .. } => "this executable",
                        Place::Ssh(_) => self.fleet.ssh[0].as_str(),
                    }
                ))
            })?;
        m.link = Some(link);
        Ok(())
    }

    /// The next message of a current link, as (member, time, what); None at the deadline or
    /// once `stop` is set.
    pub fn next(&mut self, deadline: Instant) -> Option<(usize, Instant, Incoming)> {
        loop {
            let wait = deadline.saturating_duration_since(Instant::now());
            match self.recv(wait.min(Duration::from_millis(100))) {
                Some(m) => return Some(m),
                None if Instant::now() < deadline => {
                    if self.stop.load(Ordering::Relaxed) {
                        return None;
                    }
                }
                None => return None,
            }
        }
    }

    /// The next message of a current link within `wait`; messages of replaced links (an
    /// agent respawned after a copy) are dropped.
    pub fn recv(&mut self, wait: Duration) -> Option<(usize, Instant, Incoming)> {
        let n = self.members.len();
        let until = Instant::now() + wait;
        loop {
            let m = match self.rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            };
            let i = m.link % n;
            if m.link / n == self.members[i].generation {
                return Some((i, m.at, m.what));
            }
        }
    }

    /// Sends a command to member `i`; false when its pipe is closed.
    pub fn send(&mut self, i: usize, c: &Command) -> bool {
        self.members[i].link.as_mut().is_some_and(|l| l.send(c))
    }

    /// Ends member `i`'s process at once.
    pub fn kill(&mut self, i: usize) {
        if let Some(l) = &mut self.members[i].link {
            l.kill();
        }
    }

    /// Closes every member's input (each agent stops and exits) and waits up to `grace` for
    /// each, then kills it.
    pub fn close_all(&mut self, grace: Duration) {
        for m in &mut self.members {
            if let Some(l) = &mut m.link {
                l.close(grace);
            }
        }
    }

    /// Stop asked (Ctrl-C) before the run started.
    pub fn stopped(&self) -> Result<(), FleetError> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(FleetError::Failed("stopped before the load started".into()));
        }
        Ok(())
    }

    /// Why member `i`'s process ended, from its exit code and stderr.
    pub fn why_closed(&mut self, i: usize) -> String {
        let m = &mut self.members[i];
        let Some(l) = &mut m.link else { return "not running".into() };
        std::thread::sleep(Duration::from_millis(50));
        let code = l.exit_code();
        let tail = l.stderr_tail();
        match (tail.is_empty(), code) {
            (false, _) => tail,
            (true, Some(255)) => "ssh failed (exit 255)".into(),
            (true, Some(c)) => format!("the agent exited with code {c}"),
            (true, None) => "the connection closed".into(),
        }
    }

    /// A member that cannot start: exit 2, naming the flag and the host.
    pub fn start_error(&self, i: usize, why: &str) -> FleetError {
        let name = &self.members[i].host.name;
        FleetError::Usage(format!("{} {name}: cannot start the agent: {why}", self.flag))
    }

    /// A member's error, or its end, before the run: the run cannot start.
    pub fn start_fault(&mut self, i: usize, what: &Incoming) -> Option<FleetError> {
        match what {
            Incoming::Event(Event::Error { message, .. }) => Some(self.start_error(i, message)),
            Incoming::Closed => {
                let why = self.why_closed(i);
                Some(self.start_error(i, &why))
            }
            _ => None,
        }
    }

    fn await_hellos(&mut self) -> Result<(), FleetError> {
        let deadline = Instant::now() + HELLO_WAIT;
        while self.members.iter().any(|m| m.hello.is_none()) {
            let Some((i, _, what)) = self.next(deadline) else {
                self.stopped()?;
                let late = self.members.iter().position(|m| m.hello.is_none()).unwrap_or(0);
                let tail = self.members[late].link.as_ref().map(Link::stderr_tail);
                let why = format!(
                    "no answer in {} s{}",
                    HELLO_WAIT.as_secs(),
                    tail.filter(|t| !t.is_empty()).map_or(String::new(), |t| format!(": {t}"))
                );
                return Err(self.start_error(late, &why));
            };
            match what {
                Incoming::Event(Event::Hello {
                    protocol,
                    version,
                    hash,
                    hostname,
                    cpus,
                    ssh_addr,
                }) => {
                    self.hello(i, protocol, Hello { version, hash, hostname, cpus, ssh_addr })?;
                }
                Incoming::Event(Event::Error { message, .. }) => {
                    return Err(self.start_error(i, &message));
                }
                Incoming::Event(_) | Incoming::Garbage(_) => {}
                Incoming::Closed => {
                    let why = self.why_closed(i);
                    if why.contains(transport::MISSING) && self.fleet.agent_exe.is_none() {
                        self.copy(i)?;
                    } else {
                        return Err(self.start_error(i, &why));
                    }
                }
                Incoming::Copied(Ok(())) => {
                    self.members[i].copied = true;
                    self.spawn(i)?;
                }
                Incoming::Copied(Err(e)) => return Err(self.start_error(i, &e)),
            }
        }
        Ok(())
    }

    /// Checks an agent's build against this one's; copies this build over when it differs
    /// and `--agent-exe` was not given.
    fn hello(&mut self, i: usize, protocol: u32, h: Hello) -> Result<(), FleetError> {
        let same_build = h.hash == self.fleet.hash;
        if protocol == PROTOCOL && same_build {
            self.members[i].hello = Some(h);
            return Ok(());
        }
        let auto = self.fleet.agent_exe.is_none();
        if auto && !self.members[i].copied && matches!(self.members[i].host.place, Place::Ssh(_)) {
            return self.copy(i);
        }
        if protocol == PROTOCOL && h.version == self.fleet.version {
            // The same version built apart (`--agent-exe`): the same code, as far as it says.
            self.members[i].hello = Some(h);
            return Ok(());
        }
        let fix = if auto {
            "the copy of this build did not take its place; check the agent directory"
        } else {
            "install this version there, or drop --agent-exe to copy this build over"
        };
        Err(self.start_error(
            i,
            &format!(
                "its qpslab is {} (protocol {protocol}), this is {} (protocol {PROTOCOL}); {fix}",
                h.version, self.fleet.version
            ),
        ))
    }

    /// Copies this executable to member `i`'s host in the background; [`Incoming::Copied`]
    /// tells when it is done.
    fn copy(&mut self, i: usize) -> Result<(), FleetError> {
        let n = self.members.len();
        let m = &mut self.members[i];
        let Place::Ssh(dest) = m.host.place.clone() else {
            return Err(self.start_error(i, "a local agent is this executable; nothing to copy"));
        };
        if m.copied {
            let why = format!("still {} after copying this build there", transport::MISSING);
            return Err(self.start_error(i, &why));
        }
        if let Some(l) = &mut m.link {
            l.kill();
        }
        // The old link's last words are stale from here; the copy's message and the respawn
        // come under the new generation.
        m.generation += 1;
        let id = i + n * m.generation;
        let (ssh, hash, tx) = (self.fleet.ssh.clone(), self.fleet.hash.clone(), self.tx.clone());
        std::thread::spawn(move || {
            let r = transport::copy_self(&dest, &ssh, &hash);
            let _ = tx.send(Message { link: id, at: Instant::now(), what: Incoming::Copied(r) });
        });
        Ok(())
    }

    /// Asks member `i` to do `method` on its host (see [`crate::agent::HostSide`]) and waits
    /// up to `limit` for the answer. Other messages that arrive meanwhile are dropped.
    pub fn call(
        &mut self,
        i: usize,
        method: &str,
        params: serde_json::Value,
        limit: Duration,
    ) -> Result<serde_json::Value, CallError> {
        self.calls += 1;
        let id = self.calls;
        if !self.send(i, &Command::Call { id, method: method.into(), params }) {
            return Err(CallError::Lost(format!("{method}: the agent's input is closed")));
        }
        let deadline = Instant::now() + limit;
        loop {
            let Some((from, _, what)) =
                self.recv(deadline.saturating_duration_since(Instant::now()))
            else {
                return Err(CallError::Lost(format!(
                    "{method}: no answer in {} s",
                    limit.as_secs()
                )));
            };
            if from != i {
                continue;
            }
            match what {
                Incoming::Event(Event::Reply { id: got, result, error }) if got == id => {
                    return match error {
                        Some(e) => Err(CallError::Failed(e)),
                        None => Ok(result.unwrap_or(serde_json::Value::Null)),
                    };
                }
                Incoming::Closed => {
                    let why = self.why_closed(i);
                    return Err(CallError::Lost(format!("{method}: the agent ended: {why}")));
                }
                _ => {}
            }
        }
    }
}

/// Why a [`Session::call`] has no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The agent answered with this error: the call ran there and failed as a whole.
    Failed(String),
    /// No answer came (the agent or its session ended, or the time ran out): the call may
    /// have done part or all of its work there.
    Lost(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Failed(e) | CallError::Lost(e) => f.write_str(e),
        }
    }
}

impl From<CallError> for String {
    fn from(e: CallError) -> String {
        e.to_string()
    }
}
