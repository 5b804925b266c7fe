//! Where agents run and the pipes to them. An agent is `qpslab agent` started through the
//! user's own `ssh` (`--ssh`, `QPSLAB_SSH`: their keys, `~/.ssh/config`, jump hosts and
//! ControlMaster work as they do for ssh) with `BatchMode=yes`, or a local child process
//! (`local`, `local:CPUS`). Each pipe gets a reader thread that turns the agent's lines into
//! events on one channel shared by all agents, and keeps the tail of its stderr for messages.
//! Children get SIGTERM if the coordinator dies (`PR_SET_PDEATHSIG`), which closes the ssh
//! channel, which stops the remote agent.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, ChildStdin, Command as Process, Stdio};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::protocol::{self, Command, Event};

/// Where an agent runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// A child process here, its load pinned to `cpus` when given.
    Local { cpus: Option<String> },
    /// Through ssh to this destination (`user@host`, an alias of ~/.ssh/config).
    Ssh(String),
}

/// One agent as the user named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentHost {
    pub name: String,
    pub place: Place,
    pub weight: u32,
}

/// `--agents`: a comma-separated list, or a file with one host per line and an optional weight
/// (`user@h1 2` or `user@h1 weight=2`; `#` starts a comment).
pub fn parse_agents(arg: &str) -> Result<Vec<AgentHost>, String> {
    let path = Path::new(arg);
    let (entries, from_file): (Vec<(usize, String)>, bool) = if path.is_file() {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--agents {arg}: cannot read: {e}"))?;
        let lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.split('#').next().unwrap_or("").trim().to_string()))
            .filter(|(_, l)| !l.is_empty())
            .collect();
        (lines, true)
    } else {
        (arg.split(',').map(|h| (0, h.trim().to_string())).collect(), false)
    };
    let at = |line: usize| {
        if from_file {
            format!("--agents {arg} line {line}")
        } else {
            format!("--agents {arg:?}")
        }
    };
    let mut out = Vec::new();
    for (line, entry) in entries {
        let mut words = entry.split_whitespace();
        let Some(name) = words.next() else {
            return Err(format!("{}: an empty host; give user@host, host or local", at(line)));
        };
        let weight = match words.next() {
            None => 1,
            Some(w) => {
                w.trim_start_matches("weight=").parse::<u32>().ok().filter(|w| *w > 0).ok_or_else(
                    || format!("{}: weight {w:?} is not a whole number above 0", at(line)),
                )?
            }
        };
        if words.next().is_some() {
            return Err(format!("{}: give a host and at most a weight, e.g. user@h1 2", at(line)));
        }
        if name.starts_with('-') {
            return Err(format!("{}: {name:?} is not a host name", at(line)));
        }
        let place = match name.split_once(':') {
            _ if name == "local" => Place::Local { cpus: None },
            Some(("local", cpus)) => Place::Local { cpus: Some(cpus.to_string()) },
            _ => Place::Ssh(name.to_string()),
        };
        out.push(AgentHost { name: name.to_string(), place, weight });
    }
    if out.is_empty() {
        return Err(format!("--agents {arg:?}: no host given"));
    }
    Ok(out)
}

/// The ssh command: `--ssh`, else `QPSLAB_SSH`, else `ssh`, split as a shell would.
pub fn ssh_command(flag: Option<&str>) -> Result<Vec<String>, String> {
    let env = std::env::var("QPSLAB_SSH").ok().filter(|s| !s.trim().is_empty());
    let (text, name) = match (flag, env.as_deref()) {
        (Some(f), _) => (f.to_string(), "--ssh"),
        (None, Some(e)) => (e.to_string(), "QPSLAB_SSH"),
        (None, None) => ("ssh".to_string(), "--ssh"),
    };
    match shlex::split(&text) {
        Some(w) if !w.is_empty() => Ok(w),
        _ => Err(format!("{name} {text:?}: not a command; write e.g. 'ssh -p 2222 -i KEY'")),
    }
}

/// Which agent executable to run on a remote host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exe {
    /// This build's copy in the agent directory, else `qpslab` from PATH.
    Auto { hash: String },
    /// Exactly this path.
    Path(String),
}

/// The remote agent directory: `$QPSLAB_AGENT_DIR`, else `~/.cache/qpslab`.
const AGENT_DIR: &str = "d=\"${QPSLAB_AGENT_DIR:-$HOME/.cache/qpslab}\"";

/// Printed on stderr by the remote command when no agent executable is there.
pub const MISSING: &str = "qpslab-agent-missing";

fn remote_command(exe: &Exe) -> String {
    match exe {
        Exe::Path(p) => format!("{} agent", shlex::try_quote(p).map_or_else(|_| p.clone(), |q| q.into_owned())),
        Exe::Auto { hash } => format!(
            "sh -c '{AGENT_DIR}; x=\"$d/qpslab-{hash}\"; if [ -x \"$x\" ]; then exec \"$x\" agent; fi; \
             if command -v qpslab >/dev/null 2>&1; then exec qpslab agent; fi; echo {MISSING} >&2; exit 127'"
        ),
    }
}

/// What a pipe brought.
#[derive(Debug)]
pub enum Incoming {
    Event(Event),
    /// A line that is not a message of the protocol.
    Garbage(String),
    /// The agent's output ended (it exited, or the connection dropped).
    Closed,
    /// A copy of this executable to the agent's host finished (see [`copy_self`]).
    Copied(Result<(), String>),
}

/// One thing from one link, stamped when its reader thread got it (clock offsets use the
/// stamp, so time spent in the channel does not count as network round trip).
#[derive(Debug)]
pub struct Message {
    pub link: usize,
    pub at: Instant,
    pub what: Incoming,
}

/// A running agent process and its pipe.
#[derive(Debug)]
pub struct Link {
    pub index: usize,
    child: Child,
    stdin: Option<ChildStdin>,
    stderr: Arc<Mutex<String>>,
}

/// After the user's own options (ssh keeps the first value given for an option, so theirs
/// win): never ask for a password, no terminal, give up on a host that does not answer.
const SSH_OPTIONS: [&str; 5] = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-T"];

fn process(place: &Place, ssh: &[String], exe: &Exe) -> std::io::Result<Process> {
    Ok(match place {
        // A local agent is this executable, or the one `--agent-exe` names.
        Place::Local { .. } => {
            let mut p = match exe {
                Exe::Path(path) => Process::new(path),
                Exe::Auto { .. } => Process::new(std::env::current_exe()?),
            };
            p.arg("agent");
            p
        }
        Place::Ssh(dest) => {
            let mut p = Process::new(&ssh[0]);
            p.args(&ssh[1..]).args(SSH_OPTIONS).args(["--", dest]).arg(remote_command(exe));
            p
        }
    })
}

impl Link {
    /// Starts the agent; what it says arrives on `events` as [`Message`]s marked `index`.
    pub fn spawn(
        index: usize,
        place: &Place,
        ssh: &[String],
        exe: &Exe,
        events: &Sender<Message>,
    ) -> std::io::Result<Link> {
        let mut p = process(place, ssh, exe)?;
        p.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        // Its own process group: Ctrl-C on the terminal reaches the coordinator alone, which
        // stops the agents through the protocol and still gets their results.
        p.process_group(0);
        qpslab_sys::process::die_with_parent(&mut p, qpslab_sys::process::SIGTERM);
        let mut child = p.spawn()?;
        let stdout = child.stdout.take();
        let stderr_pipe = child.stderr.take();
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(out) = stdout {
            let tx = events.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    let msg = match serde_json::from_str::<Event>(&line) {
                        Ok(e) => Incoming::Event(e),
                        Err(e) => Incoming::Garbage(format!("{e}: {line}")),
                    };
                    if tx.send(Message { link: index, at: Instant::now(), what: msg }).is_err() {
                        return;
                    }
                }
                let _ =
                    tx.send(Message { link: index, at: Instant::now(), what: Incoming::Closed });
            });
        }
        if let Some(mut err) = stderr_pipe {
            let tail = stderr.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = err.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let mut t = tail.lock().unwrap_or_else(PoisonError::into_inner);
                    t.push_str(&String::from_utf8_lossy(&buf[..n]));
                    if t.len() > 8192 {
                        let cut = t.len() - 4096;
                        let cut = (cut..t.len()).find(|&i| t.is_char_boundary(i)).unwrap_or(cut);
                        t.drain(..cut);
                    }
                }
            });
        }
        let stdin = child.stdin.take();
        Ok(Link { index, child, stdin, stderr })
    }

    /// Sends a command; false when the pipe is closed.
    pub fn send(&mut self, c: &Command) -> bool {
        self.stdin.as_mut().is_some_and(|s| protocol::send(s, c).is_ok())
    }

    /// What the process said on stderr, its last lines, one line.
    pub fn stderr_tail(&self) -> String {
        let t = self.stderr.lock().unwrap_or_else(PoisonError::into_inner);
        let lines: Vec<&str> = t.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        lines[lines.len().saturating_sub(3)..].join("; ")
    }

    /// Closes its input (the agent stops and exits) and waits up to `grace`, then kills it.
    pub fn close(&mut self, grace: Duration) {
        self.stdin = None;
        let start = Instant::now();
        while start.elapsed() < grace {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
    }

    /// Ends the process (ssh or the local agent) at once.
    pub fn kill(&mut self) {
        self.stdin = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The exit code, once it exited.
    pub fn exit_code(&mut self) -> Option<i32> {
        self.child.try_wait().ok().flatten().and_then(|s| s.code())
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.kill();
        }
    }
}

/// Copies this executable to the remote agent directory as `qpslab-HASH` (written under a
/// temporary name, then renamed, so agents starting at once never run half a file).
pub fn copy_self(dest: &str, ssh: &[String], hash: &str) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let file =
        std::fs::File::open(&exe).map_err(|e| format!("cannot read {}: {e}", exe.display()))?;
    let script = format!(
        "sh -c '{AGENT_DIR}; t=\"$d/.qpslab-{hash}.$$\"; mkdir -p \"$d\" && cat > \"$t\" && \
         chmod 755 \"$t\" && mv -f \"$t\" \"$d/qpslab-{hash}\"'"
    );
    let mut p = Process::new(&ssh[0]);
    p.args(&ssh[1..]).args(SSH_OPTIONS).args(["--", dest]).arg(script);
    p.stdin(Stdio::from(file)).stdout(Stdio::null()).stderr(Stdio::piped());
    let out = p.output().map_err(|e| format!("cannot run {}: {e}", ssh[0]))?;
    if out.status.success() {
        return Ok(());
    }
    let why = String::from_utf8_lossy(&out.stderr).trim().replace('\n', "; ");
    Err(format!("copying qpslab there failed: {why}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn agents_come_as_a_list_or_a_file_with_weights() {
        let a = parse_agents("root@10.0.0.1, h2,local,local:2-3").unwrap();
        assert_eq!(a.len(), 4);
        assert_eq!(a[0].place, Place::Ssh("root@10.0.0.1".into()));
        assert_eq!(a[2].place, Place::Local { cpus: None });
        assert_eq!(a[3].place, Place::Local { cpus: Some("2-3".into()) });
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("agents");
        std::fs::write(&f, "# load machines\nroot@h1 2\nroot@h2 weight=1  # the small one\n\n")
            .unwrap();
        let a = parse_agents(f.to_str().unwrap()).unwrap();
        assert_eq!(a.iter().map(|h| h.weight).collect::<Vec<_>>(), [2, 1]);
        std::fs::write(&f, "root@h1 two\n").unwrap();
        let e = parse_agents(f.to_str().unwrap()).unwrap_err();
        assert!(e.ends_with("line 1: weight \"two\" is not a whole number above 0"), "{e}");
        assert!(parse_agents("-oProxyCommand=x").unwrap_err().contains("is not a host name"));
        assert!(parse_agents(",").unwrap_err().contains("an empty host"));
    }

    #[test]
    fn the_ssh_command_is_split_as_a_shell_would() {
        assert_eq!(
            ssh_command(Some("ssh -F '/a b' -p 2222")).unwrap(),
            ["ssh", "-F", "/a b", "-p", "2222"]
        );
        assert!(ssh_command(Some("ssh 'unclosed")).is_err());
        assert!(remote_command(&Exe::Auto { hash: "ab".into() }).contains("qpslab-ab"));
        assert_eq!(remote_command(&Exe::Path("/opt/q pslab".into())), "'/opt/q pslab' agent");
    }
}
