//! A real h2o (the Debian package), one thread, started on a free loopback port with a temp
//! config and killed (by its own PID, through the child handle) on drop. It serves HTTP/2 with
//! prior knowledge on plain TCP and h2 by ALPN with TLS; `/` is a 3-byte static file.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct H2o {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl H2o {
    /// Access log fields: status, protocol (`HTTP/2`), method, path.
    pub fn start(tls: Option<(&str, &str)>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_path_buf();
        std::fs::create_dir_all(d.join("www")).unwrap();
        std::fs::write(d.join("www/index.html"), "ok\n").unwrap();
        // h2o drops to `nobody` after start: the files must be readable by it.
        use std::os::unix::fs::PermissionsExt;
        for p in [d.clone(), d.join("www"), d.join("www/index.html")] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let ssl = match tls {
            Some((cert, key)) => {
                std::fs::write(d.join("cert.pem"), cert).unwrap();
                std::fs::write(d.join("key.pem"), key).unwrap();
                format!(
                    "  ssl:\n    certificate-file: {0}/cert.pem\n    key-file: {0}/key.pem\n",
                    d.display()
                )
            }
            None => String::new(),
        };
        let h2o = ["/usr/bin/h2o", "/usr/sbin/h2o", "/usr/local/bin/h2o"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect("h2o is not installed; run scripts/test (it installs h2o)");
        let started = super::start_listening(|port| {
            let conf = format!(
                "listen:\n  host: 127.0.0.1\n  port: {port}\n{ssl}num-threads: 1\nuser: nobody\n\
                 error-log: {d}/error.log\naccess-log:\n  path: {d}/access.log\n  format: \"%s %H %m %U\"\n\
                 hosts:\n  default:\n    paths:\n      /:\n        file.dir: {d}/www\n",
                d = d.display()
            );
            std::fs::write(d.join("h2o.conf"), conf).unwrap();
            Command::new(h2o)
                .arg("-c")
                .arg(d.join("h2o.conf"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn h2o")
        });
        let Some((child, port)) = started else {
            let log = std::fs::read_to_string(d.join("error.log")).unwrap_or_default();
            panic!("h2o did not start: {log}");
        };
        Self { child, port, dir }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    pub fn https_url(&self) -> String {
        format!("https://localhost:{}/", self.port)
    }

    /// Access log lines, once there are `expect` of them or 3 s have passed.
    pub fn access_log(&self, expect: usize) -> Vec<String> {
        super::log_lines(&self.dir.path().join("access.log"), expect, Duration::from_secs(3))
    }
}

impl Drop for H2o {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
