//! Helpers shared by the CLI test binaries: a `qpslab serve` child process.

#![allow(dead_code, reason = "each test binary uses a subset")]

use std::io::Read;
use std::process::Command;
use std::time::{Duration, Instant};

/// A `qpslab serve` child on a free port; killed on drop if still running.
pub struct ServeChild {
    pub child: std::process::Child,
    pub addr: String,
    stderr: std::io::BufReader<std::process::ChildStderr>,
}

impl ServeChild {
    #[allow(
        clippy::zombie_processes,
        reason = "the child is owned by ServeChild, whose Drop waits"
    )]
    pub fn start(wrapper: &[&str], args: &[&str]) -> Self {
        use std::io::BufRead;
        let bin = env!("CARGO_BIN_EXE_qpslab");
        let (program, pre): (&str, Vec<&str>) = match wrapper.split_first() {
            Some((p, rest)) => (p, rest.iter().copied().chain([bin]).collect()),
            None => (bin, Vec::new()),
        };
        // A free port unless the caller names the address.
        let listen: &[&str] = if args.contains(&"-l") { &[] } else { &["-l", "127.0.0.1:0"] };
        let mut child = Command::new(program)
            .args(pre)
            .arg("serve")
            .args(listen)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn qpslab serve");
        let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            if stderr.read_line(&mut line).unwrap_or(0) == 0 {
                let _ = child.kill();
                let _ = child.wait();
                panic!("serve exited before listening");
            }
            if let Some(rest) = line.split("listening on ").nth(1) {
                let addr =
                    rest.split_whitespace().next().unwrap().trim_end_matches(',').to_string();
                return Self { child, addr, stderr };
            }
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill() on the PID of our own child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
    }

    /// Waits for exit (at most `limit`); returns the exit code, stdout and the rest of stderr.
    pub fn wait(mut self, limit: Duration) -> (Option<i32>, String, String) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut out = String::new();
                self.child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
                let mut err = String::new();
                let _ = self.stderr.read_to_string(&mut err);
                return (status.code(), out, err);
            }
            assert!(started.elapsed() < limit, "serve did not exit within {limit:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
