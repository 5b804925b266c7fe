//! Bench targets: the built-in server (`qpslab serve` as a child process,
//! which says where it listens on a readiness descriptor) and nginx from PATH with a generated
//! configuration, on loopback (or, on a bench's server host, the address the load reaches).
//! Each is stopped by its PID.

use std::io::{BufRead, BufReader, Read};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use qpslab_host::Root;
use serde::Deserialize;

use crate::kinds::{Accept, BenchError};

/// A running target.
#[derive(Debug)]
pub struct Running {
    pub kind: &'static str,
    pub addr: SocketAddr,
    /// Every process of the target (nginx: master and workers).
    pub pids: Vec<u32>,
    child: Child,
    /// nginx's prefix directory (config, pid, logs), removed on drop.
    _dir: Option<tempfile::TempDir>,
    /// HTTPS.
    pub tls: bool,
}

impl Running {
    /// `http://ADDR/`, or `https://` for a TLS target.
    pub fn url(&self) -> String {
        format!("{}://{}/", if self.tls { "https" } else { "http" }, self.addr)
    }

    /// SIGTERM to our child, then wait (SIGKILL after 3 s).
    pub fn stop(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        let _ = qpslab_sys::process::terminate(self.child.id());
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(3) {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.terminate();
        }
    }
}

/// What `qpslab serve --ready-fd N` writes once it listens.
#[derive(Debug, Deserialize)]
struct Ready {
    listen: Vec<SocketAddr>,
}

/// Starts `serve_exe serve` on `ip` (a free port; bench uses 127.0.0.1 on its own host), and on
/// the unix socket `unix` too when given, with `workers` workers pinned over `cpus`, and waits
/// for its readiness line: the addresses it bound, as JSON on a pipe it inherits. The server
/// gets SIGKILL if this thread ends first, however it ends.
pub fn builtin(
    serve_exe: &Path,
    ip: IpAddr,
    cpus: &[usize],
    workers: usize,
    (accept, tls, h3): (Accept, bool, bool),
    unix: Option<&Path>,
) -> Result<Running, BenchError> {
    let failed = |e: std::io::Error| {
        BenchError::Target(format!("cannot start {} serve: {e}", serve_exe.display()))
    };
    let list: Vec<String> = cpus.iter().map(ToString::to_string).collect();
    let (ready, writer) = std::io::pipe().map_err(failed)?;
    qpslab_sys::fd::inheritable(&writer).map_err(failed)?;
    let mut cmd = Command::new(serve_exe);
    qpslab_sys::process::die_with_parent(&mut cmd, qpslab_sys::process::SIGKILL);
    // Its own process group: a terminal's Ctrl-C (sent to the whole foreground group) reaches
    // the bench, which ends the run with its report and stops the server itself.
    cmd.process_group(0);
    let mut child = cmd
        .args(["serve", "-l", &SocketAddr::new(ip, 0).to_string()])
        .args(unix.map(|p| format!("unix:{}", p.display())).iter().flat_map(|l| ["-l", l.as_str()]))
        .args(["-w", &workers.to_string(), "--cpus"])
        .arg(list.join(","))
        .args(["--accept", accept.name()])
        .args(if tls { &["--tls-self-signed"][..] } else { &[] })
        .args(if h3 { &["--h3"][..] } else { &[] })
        .arg("--ready-fd")
        .arg(writer.as_raw_fd().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(failed)?;
    // Only the child holds the writing end now: EOF means it exited without being ready.
    drop(writer);
    let mut line = String::new();
    let _ = BufReader::new(ready).read_line(&mut line);
    let mut stderr = child.stderr.take();
    let parsed: Option<Ready> = serde_json::from_str(&line).ok();
    let Some(addr) = parsed.and_then(|r| r.listen.first().copied()) else {
        let mut why = String::new();
        if let Some(e) = &mut stderr {
            let _ = e.read_to_string(&mut why);
        }
        let _ = child.kill();
        let _ = child.wait();
        return Err(BenchError::Target(format!(
            "the built-in server did not start: {}",
            why.trim()
        )));
    };
    // Drain stderr so the server never blocks on a full pipe.
    if let Some(mut e) = stderr {
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = e.read_to_end(&mut sink);
        });
    }
    let pid = child.id();
    Ok(Running { kind: "builtin", addr, pids: vec![pid], child, _dir: None, tls })
}

/// The nginx executable on PATH.
pub fn find_nginx() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("nginx")).find(|p| p.is_file())
}

/// How the nginx bench starts serves.
#[derive(Debug, Clone, Copy)]
pub struct NginxHow {
    pub accept: Accept,
    /// HTTPS, with a certificate made at start.
    pub tls: bool,
    /// HTTP/2 on its listeners: h2c with prior knowledge (no HTTP/1.1 on them then), or h2
    /// by ALPN with TLS (HTTP/1.1 still offered).
    pub h2: bool,
}

/// The generated nginx configuration: `return 200` on `addr` (and on the unix socket `unix`
/// when given), `workers` worker processes pinned over `cpus`, the accept mode, access_log
/// off, keepalive_requests high; with `tls`, HTTPS with `cert.pem` and `key.pem` of `dir`,
/// TLS 1.2 and 1.3, session tickets and a shared session cache; with `h2`, HTTP/2 on the
/// listeners (`listen ... http2`, which nginx 1.22 of Debian 12 takes, and later ones with a
/// warning).
pub fn nginx_config(
    dir: &Path,
    (addr, unix): (SocketAddr, Option<&Path>),
    cpus: &[usize],
    workers: usize,
    how: NginxHow,
) -> String {
    let NginxHow { accept, tls, h2 } = how;
    let d = dir.display();
    let pinned: Vec<usize> = (0..workers).map(|i| cpus[i % cpus.len().max(1)]).collect();
    let (reuseport, mutex) = match accept {
        Accept::Reuseport => (" reuseport", "off"),
        Accept::Mutex => ("", "on"),
        Accept::Shared | Accept::Exclusive => ("", "off"),
    };
    format!(
        "worker_processes {workers};\nworker_cpu_affinity {affinity};\nworker_rlimit_nofile 65536;\n\
         pid {d}/nginx.pid;\nerror_log {d}/error.log warn;\ndaemon off;\n\
         events {{ worker_connections 16384; accept_mutex {mutex}; }}\n\
         http {{\n  access_log off;\n  keepalive_requests 1000000000;\n  keepalive_timeout 300s;\n\
         \x20 client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n\
         \x20 uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
         \x20 server {{\n    listen {addr}{reuseport}{ssl}{http2} backlog=4096;\n{unix_listen}{ssl_conf}\
         \x20   location / {{ default_type text/plain; return 200 \"ok\\n\"; }}\n  }}\n}}\n",
        affinity = qpslab_tune::emit::nginx_affinity(&pinned),
        ssl = if tls { " ssl" } else { "" },
        http2 = if h2 { " http2" } else { "" },
        // A unix socket has no SO_REUSEPORT: one socket, whatever the accept mode.
        unix_listen = unix.map_or(String::new(), |p| {
            let ssl = if tls { " ssl" } else { "" };
            let http2 = if h2 { " http2" } else { "" };
            format!("    listen unix:{}{ssl}{http2} backlog=4096;\n", p.display())
        }),
        ssl_conf = if tls {
            format!(
                "    ssl_certificate {d}/cert.pem;\n    ssl_certificate_key {d}/key.pem;\n\
                 \x20   ssl_protocols TLSv1.2 TLSv1.3;\n    ssl_session_tickets on;\n\
                 \x20   ssl_session_cache shared:qpslab:10m;\n"
            )
        } else {
            String::new()
        },
    )
}

/// Starts nginx from PATH on a free port of `ip` (and on the unix socket `unix` when given; a
/// socket file left by a server that is gone is replaced) with the generated configuration.
/// Its master gets SIGTERM (nginx's fast shutdown, which stops its workers and removes its
/// unix socket) if this thread ends first, however it ends.
pub fn nginx(
    ip: IpAddr,
    cpus: &[usize],
    workers: usize,
    how: NginxHow,
    unix: Option<&Path>,
) -> Result<Running, BenchError> {
    let tls = how.tls;
    let exe = find_nginx().ok_or_else(|| {
        BenchError::Usage(
            "--target nginx: nginx is not on PATH (install it, e.g. apt-get install nginx-light)"
                .into(),
        )
    })?;
    let dir =
        tempfile::tempdir().map_err(|e| BenchError::Target(format!("temporary directory: {e}")))?;
    let addr = TcpListener::bind(SocketAddr::new(ip, 0))
        .and_then(|l| l.local_addr())
        .map_err(|e| BenchError::Target(format!("no free port on {ip}: {e}")))?;
    if tls {
        // A certificate made now, as `serve --tls-self-signed` makes its own.
        let made = rcgen::generate_simple_self_signed(vec!["localhost".into(), ip.to_string()])
            .map_err(|e| BenchError::Target(format!("certificate for nginx: {e}")))?;
        let write = |name: &str, pem: String| {
            std::fs::write(dir.path().join(name), pem)
                .map_err(|e| BenchError::Target(format!("{name}: {e}")))
        };
        write("cert.pem", made.cert.pem())?;
        write("key.pem", made.key_pair.serialize_pem())?;
    }
    let conf = dir.path().join("nginx.conf");
    if let Some(path) = unix {
        qpslab_sys::net::clear_stale_unix_socket(path)
            .map_err(|why| BenchError::Usage(format!("--unix-socket {}: {why}", path.display())))?;
    }
    let listen = (addr, unix);
    std::fs::write(&conf, nginx_config(dir.path(), listen, cpus, workers, how))
        .map_err(|e| BenchError::Target(format!("{}: {e}", conf.display())))?;
    let mut cmd = Command::new(&exe);
    qpslab_sys::process::die_with_parent(&mut cmd, qpslab_sys::process::SIGTERM);
    // As the built-in server's: a Ctrl-C to the bench's group is the bench's to handle.
    cmd.process_group(0);
    let child = cmd
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&conf)
        .arg("-e")
        .arg(dir.path().join("error.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| BenchError::Target(format!("cannot start {}: {e}", exe.display())))?;
    let mut running =
        Running { kind: "nginx", addr, pids: vec![child.id()], child, _dir: None, tls };
    let start = Instant::now();
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            let family = qpslab_host::procs::with_descendants(&Root::live(), &[running.child.id()]);
            if family.len() > workers {
                running.pids = family;
                break;
            }
        }
        if let Ok(Some(status)) = running.child.try_wait() {
            let log = std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default();
            return Err(BenchError::Target(format!("nginx exited ({status}): {}", log.trim())));
        }
        if start.elapsed() > Duration::from_secs(5) {
            return Err(BenchError::Target(format!("nginx did not listen on {addr} within 5 s")));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    running._dir = Some(dir);
    Ok(running)
}
