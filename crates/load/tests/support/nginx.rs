//! A real nginx, one worker, started on a free loopback port with a temp config and killed (by
//! its own PID, through the child handle) on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Nginx {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

const BODY_1K: &str = "0123456789abcdef";

fn nginx_binary() -> PathBuf {
    for p in ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"] {
        if Path::new(p).exists() {
            return p.into();
        }
    }
    panic!("nginx is not installed; run scripts/test (it installs nginx-light) or apt-get install nginx-light");
}

impl Nginx {
    /// Locations: `/` returns 200 with no body, `/1k` a 1 KiB body, `/404` a 404, `/t/...` 200,
    /// `/close10` 200 and `Connection: close` on a connection's 10th request, and `/mix` a 404
    /// or a 200 at random (the access log tells which). Access log fields:
    /// status, method, request length, connection serial number, requests on that connection so
    /// far, peer address, peer port, URI.
    pub fn start() -> Self {
        Self::start_with(None, false)
    }

    /// The same server speaking HTTP/2 (h2c with prior knowledge; h2 by ALPN with `tls`); the
    /// access log gains a last field, `$server_protocol` (`HTTP/2.0`).
    pub fn start_h2(tls: Option<(&str, &str)>) -> Self {
        Self::start_with(tls, true)
    }

    /// The same server on HTTPS with this certificate chain and key (PEM), TLS 1.2 and 1.3,
    /// session tickets and a session cache on, a million requests per connection (`/close10`
    /// still closes at 10); the access log gains a last field,
    /// `$ssl_session_reused` (`r` for a resumed session, `.` for a full handshake).
    pub fn start_tls(cert_pem: &str, key_pem: &str) -> Self {
        Self::start_with(Some((cert_pem, key_pem)), false)
    }

    /// HTTPS that asks every client for a certificate signed by `client_ca_pem`
    /// (`ssl_verify_client on`); the access log gains `$ssl_client_verify` last (`SUCCESS`,
    /// `NONE`, `FAILED:...`). nginx answers a client without one with 400, not in the
    /// handshake.
    pub fn start_mtls(cert_pem: &str, key_pem: &str, client_ca_pem: &str) -> Self {
        Self::start_full(Some((cert_pem, key_pem)), false, Some(client_ca_pem), "")
    }

    fn start_with(tls: Option<(&str, &str)>, h2: bool) -> Self {
        Self::start_full(tls, h2, None, "")
    }

    /// HTTP/2 in clear text, with `server_conf` added to the server block.
    pub fn start_h2_conf(server_conf: &str) -> Self {
        Self::start_full(None, true, None, server_conf)
    }

    fn start_full(
        tls: Option<(&str, &str)>,
        h2: bool,
        client_ca: Option<&str>,
        server_conf: &str,
    ) -> Self {
        let (http2, protocol) = if h2 { (" http2", " $server_protocol") } else { ("", "") };
        let dir = tempfile::tempdir().unwrap();
        let (ssl, ssl_conf, reused) = match tls {
            Some((cert, key)) => {
                std::fs::write(dir.path().join("cert.pem"), cert).unwrap();
                std::fs::write(dir.path().join("key.pem"), key).unwrap();
                let d = dir.path().display();
                (
                    " ssl",
                    format!(
                        "ssl_certificate {d}/cert.pem; ssl_certificate_key {d}/key.pem; \
                         ssl_protocols TLSv1.2 TLSv1.3; ssl_session_tickets on; \
                         ssl_session_cache shared:qpslab:1m; keepalive_requests 1000000;"
                    ),
                    " $ssl_session_reused",
                )
            }
            None => ("", String::new(), ""),
        };
        let (ssl_conf, verify) = match client_ca {
            Some(ca) => {
                std::fs::write(dir.path().join("client-ca.pem"), ca).unwrap();
                let d = dir.path().display();
                let more =
                    format!(" ssl_client_certificate {d}/client-ca.pem; ssl_verify_client on;");
                (ssl_conf + &more, " $ssl_client_verify")
            }
            None => (ssl_conf, ""),
        };
        let d = dir.path().display();
        let body = BODY_1K.repeat(64);
        let started = super::start_listening(|port| {
            let conf = format!(
                r#"daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 4096; }}
http {{
log_format st "$status $request_method $request_length $connection $connection_requests $remote_addr $remote_port $uri{reused}{protocol}{verify}";
access_log {d}/access.log st;
log_format ids "$request_uri|$http_x_id|$request_body";
client_body_temp_path {d};
proxy_temp_path {d};
fastcgi_temp_path {d};
uwsgi_temp_path {d};
scgi_temp_path {d};
server {{
    listen 127.0.0.1:{port}{ssl}{http2};
    listen unix:{d}/nginx.sock{ssl}{http2};
    {ssl_conf}
    {server_conf}
    location = / {{ return 200; }}
    location = /1k {{ return 200 "{body}"; }}
    location = /404 {{ return 404; }}
    location /t/ {{ return 200; }}
    # No reconnects under /k/: for tests that count the connections a run opened.
    location /k/ {{ keepalive_requests 1000000; return 200; }}
    location = /close10 {{ keepalive_requests 10; return 200; }}
    # The IDs a request carries: its URI, X-Id header and body (read by the mirror, which
    # runs before the content phase; a POST the static file refuses is answered by @ok).
    location /id/ {{
        access_log {d}/ids.log ids; root {d}; mirror /mirror;
        try_files /ok.txt =404; error_page 405 =200 @ok;
    }}
    location @ok {{ access_log {d}/ids.log ids; return 200; }}
    location = /mirror {{ internal; return 204; }}
    location = /mix {{
        if ($request_id ~ "^[0-7]") {{ return 404; }}
        return 200;
    }}
}}
}}
"#
            );
            std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
            std::fs::write(dir.path().join("ok.txt"), "ok").unwrap();
            Command::new(nginx_binary())
                .arg("-p")
                .arg(dir.path())
                .arg("-c")
                .arg(dir.path().join("nginx.conf"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn nginx")
        });
        let Some((child, port)) = started else {
            let log = std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default();
            panic!("nginx did not start: {log}");
        };
        Self { child, port, dir }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The unix domain socket it also listens on.
    pub fn unix_socket(&self) -> std::path::PathBuf {
        self.dir.path().join("nginx.sock")
    }

    /// The https URL of `path` (host `localhost`, the name test certificates carry).
    pub fn https_url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port)
    }

    /// Access log lines, once there are `expect` of them (nginx logs a request just after
    /// sending its response) or 3 s have passed; read again a moment later so that extra lines
    /// would show too.
    pub fn access_log(&self, expect: usize) -> Vec<String> {
        super::log_lines(&self.dir.path().join("access.log"), expect, Duration::from_secs(3))
    }

    /// The `/id/` requests' log, `URI|X-Id|body` per line (as [`Nginx::access_log`]).
    pub fn ids_log(&self, expect: usize) -> Vec<String> {
        super::log_lines(&self.dir.path().join("ids.log"), expect, Duration::from_secs(3))
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
