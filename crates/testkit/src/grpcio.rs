//! grpcio's gRPC server (PyPI: gRPC's C core, in the venv scripts/test makes) with its own
//! count of the calls it took per method. See support/grpc_server.py for its methods and
//! arguments.

#![allow(clippy::expect_used, reason = "test support: a broken set-up fails the test loudly")]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use crate::venv_python;

#[derive(Debug)]
pub struct Grpcio {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    pub port: u16,
    host: String,
}

impl Grpcio {
    /// On a free loopback port, with no limits.
    pub fn start() -> Grpcio {
        Grpcio::start_with(&[])
    }

    /// With the script's arguments (`--limit N`, `--reflect FILE`, `--window BYTES`).
    pub fn start_with(args: &[&str]) -> Grpcio {
        Grpcio::spawn(Command::new(venv_python()), "127.0.0.1", args)
    }

    /// In the network namespace `netns`, listening on `addr` there.
    pub fn start_in(netns: &str, addr: &str, args: &[&str]) -> Grpcio {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", netns, &venv_python()]);
        Grpcio::spawn(cmd, addr, &[&["--bind", addr], args].concat())
    }

    fn spawn(mut cmd: Command, host: &str, args: &[&str]) -> Grpcio {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/support/grpc_server.py");
        let mut child = cmd
            .arg(script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e} (scripts/test installs grpcio)", venv_python()));
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        let _ = stdout.read_line(&mut line);
        let port = line.trim().strip_prefix("ready ").and_then(|p| p.parse().ok());
        let Some(port) = port else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("grpcio's server said {line:?}");
        };
        Grpcio { child, stdin, stdout, port, host: host.to_string() }
    }

    pub fn url(&self) -> String {
        format!("http://{}:{}", self.host, self.port)
    }

    /// The calls the server took per method (`Echo`, `Exhaust`, `Big`, ...), once `method`
    /// has `n` (its handlers count as they run; after 3 s, what it has).
    pub fn calls(&mut self, method: &str, n: u64) -> serde_json::Value {
        let started = Instant::now();
        loop {
            let stdin = self.stdin.as_mut().expect("open until dropped");
            stdin.write_all(b"count\n").expect("the server reads its stdin");
            stdin.flush().expect("the server reads its stdin");
            let mut line = String::new();
            self.stdout.read_line(&mut line).expect("the server answers");
            let v: serde_json::Value = serde_json::from_str(&line).expect("JSON counts");
            if v[method].as_u64() >= Some(n) || started.elapsed() > Duration::from_secs(3) {
                return v;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Grpcio {
    fn drop(&mut self) {
        // Its stdin closed, the server stops; killed if it does not within 2 s.
        drop(self.stdin.take());
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(2) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
