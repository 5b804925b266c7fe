//! Apache httpd (event MPM) and lighttpd from Debian's packages, each started on a free loopback
//! port with its own configuration, document root and access log in a temporary directory, and
//! stopped by its own PID on drop. Both serve `/index.html` (3 bytes) with their default
//! keep-alive settings, which close idle and long-lived connections by themselves.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Httpd {
    pub name: &'static str,
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

fn apache_conf(d: &str, port: u16) -> String {
    // Apache drops to www-data for its workers: the document root must be readable by it. The
    // access log is opened by the parent (root) before that.
    format!(
        r#"ServerRoot {d}
LoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so
LoadModule authz_core_module /usr/lib/apache2/modules/mod_authz_core.so
Listen 127.0.0.1:{port}
ServerName localhost
PidFile {d}/httpd.pid
ErrorLog {d}/error.log
User www-data
Group www-data
DocumentRoot {d}/htdocs
LogFormat "%>s %m %U %k" st
CustomLog {d}/access.log st
<Directory {d}/htdocs>
  Require all granted
</Directory>
"#
    )
}

fn lighttpd_conf(d: &str, port: u16) -> String {
    format!(
        r#"server.document-root = "{d}/htdocs"
server.bind = "127.0.0.1"
server.port = {port}
server.pid-file = "{d}/lighttpd.pid"
server.errorlog = "{d}/error.log"
server.modules = ("mod_accesslog")
accesslog.filename = "{d}/access.log"
accesslog.format = "%>s %m %U"
"#
    )
}

impl Httpd {
    /// Apache httpd 2.4, event MPM, in the foreground (`-DFOREGROUND`).
    pub fn apache() -> Self {
        Self::start("apache2", "/usr/sbin/apache2", apache_conf, |conf| {
            vec!["-f".into(), conf.display().to_string(), "-DFOREGROUND".into()]
        })
    }

    /// lighttpd 1.4, in the foreground (`-D`).
    pub fn lighttpd() -> Self {
        Self::start("lighttpd", "/usr/sbin/lighttpd", lighttpd_conf, |conf| {
            vec!["-D".into(), "-f".into(), conf.display().to_string()]
        })
    }

    fn start(
        name: &'static str,
        binary: &str,
        conf: fn(&str, u16) -> String,
        args: fn(&Path) -> Vec<String>,
    ) -> Self {
        assert!(
            Path::new(binary).exists(),
            "{binary} is missing; run scripts/test (it installs apache2 and lighttpd)"
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display().to_string();
        std::fs::create_dir_all(dir.path().join("htdocs")).unwrap();
        std::fs::write(dir.path().join("htdocs/index.html"), "ok\n").unwrap();
        for p in [dir.path().to_path_buf(), dir.path().join("htdocs")] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path = dir.path().join(format!("{name}.conf"));
        let started = super::start_listening(|port| {
            std::fs::write(&path, conf(&d, port)).unwrap();
            Command::new(binary)
                .args(args(&path))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {binary}: {e}"))
        });
        let Some((child, port)) = started else {
            let log = std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default();
            panic!("{name} did not start: {log}");
        };
        Self { name, child, port, dir }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Access log lines (`STATUS METHOD PATH`), once there are `expect` of them or 5 s have
    /// passed (lighttpd writes its log in batches); read again a moment later so that extra
    /// lines would show too.
    pub fn access_log(&self, expect: usize) -> Vec<String> {
        // lighttpd buffers its access log and writes it out on a timer of its own (every 4 s
        // here; a run's last few hundred lines came after 5 s once in CI), or at once on
        // SIGHUP, which reopens its logs: sent to our own child. The wait ends as soon as the
        // lines are all there.
        if self.name == "lighttpd" {
            let _ = Command::new("kill").args(["-HUP", &self.child.id().to_string()]).status();
        }
        super::log_lines(&self.dir.path().join("access.log"), expect, Duration::from_secs(15))
    }
}

impl Drop for Httpd {
    fn drop(&mut self) {
        // SIGTERM to our own child, which stops its workers (apache's master does); SIGKILL if
        // it is still there after 3 s.
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
