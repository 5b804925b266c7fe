//! aioquic's HTTP/3 server (PyPI, in the venv scripts/test makes; QPSLAB_AIOQUIC_PYTHON names
//! its python) on a free loopback UDP port, with a self-signed certificate for 127.0.0.1 and
//! localhost, and an access log of what it answered. See h3_server.py for its controls.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Aioquic {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
    /// The certificate (PEM) it serves, to give as --cacert.
    pub cert: std::path::PathBuf,
}

/// The python that has aioquic.
pub fn python() -> String {
    qpslab_testkit::venv_python()
}

impl Aioquic {
    pub fn start() -> Aioquic {
        Aioquic::start_with(&[])
    }

    /// With the script's further arguments (`forget-half`).
    pub fn start_with(args: &[&str]) -> Aioquic {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        p.subject_alt_names.push(rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap()));
        let cert = p.self_signed(&key).unwrap();
        let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/h3_server.py");
        let mut child = Command::new(python())
            .args([script, cert_path.to_str().unwrap(), key_path.to_str().unwrap()])
            .arg(dir.path().join("access.log"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e} (scripts/test installs aioquic)", python()));
        let mut line = String::new();
        let out = child.stdout.take().unwrap();
        let ready = std::thread::spawn(move || {
            BufReader::new(out).read_line(&mut line).ok();
            line
        });
        let started = Instant::now();
        while !ready.is_finished() {
            if started.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                panic!("aioquic's server did not start within 20 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let line = ready.join().unwrap();
        let port = line.trim().strip_prefix("ready ").and_then(|p| p.parse().ok());
        let Some(port) = port else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("aioquic's server said {line:?}");
        };
        Aioquic { child, port, dir, cert: cert_path }
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// The access log's lines, once it has `n` (or after 2 s, what it has).
    pub fn log(&self, n: usize) -> Vec<String> {
        self.lines("access.log", n)
    }

    /// Where each connection came from (`HOST:PORT`), once there are `n` (or after 2 s).
    pub fn peers(&self, n: usize) -> Vec<String> {
        self.lines("access.log.peers", n)
    }

    fn lines(&self, file: &str, n: usize) -> Vec<String> {
        let path = self.dir.path().join(file);
        let started = Instant::now();
        loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<String> = text.lines().map(str::to_string).collect();
            if lines.len() >= n || started.elapsed() > Duration::from_secs(2) {
                return lines;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Aioquic {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
