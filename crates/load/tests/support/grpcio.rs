//! grpcio's gRPC server (PyPI, in the venv scripts/test makes) on a free loopback port, with
//! its own count of the calls it took per method. See grpc_server.py for its methods.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Grpcio {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    pub port: u16,
}

impl Grpcio {
    pub fn start() -> Grpcio {
        Grpcio::start_with(&[])
    }

    /// With the script's arguments (a concurrency limit, a descriptor set to reflect).
    pub fn start_with(args: &[&str]) -> Grpcio {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/grpc_server.py");
        let python = super::aioquic::python();
        let mut child = Command::new(&python)
            .arg(script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{python}: {e} (scripts/test installs grpcio)"));
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let port = line.trim().strip_prefix("ready ").and_then(|p| p.parse().ok());
        let Some(port) = port else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("grpcio's server said {line:?}");
        };
        Grpcio { child, stdin, stdout, port }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The calls the server took per method (`Echo`, `Exhaust`, `Big`), once `method` has
    /// `n` (its handlers count as they run; after 3 s, what it has).
    pub fn calls(&mut self, method: &str, n: u64) -> serde_json::Value {
        let started = Instant::now();
        loop {
            let stdin = self.stdin.as_mut().unwrap();
            stdin.write_all(b"count\n").unwrap();
            stdin.flush().unwrap();
            let mut line = String::new();
            self.stdout.read_line(&mut line).unwrap();
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
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
