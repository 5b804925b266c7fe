//! What nginx does per request, from its effective configuration: the dump of `nginx -T`
//! (every file it includes, as it parsed them), read from the binary of a running nginx with
//! the configuration and prefix it was started with. The doctor weighs these as evidence: an
//! access log written per request, `keepalive_requests` against the run's reconnects, the
//! workers against the CPUs, `accept_mutex`, `reuseport`. The parser works on text and knows
//! nothing of processes ([`parse`]); [`read`] finds the text.

use serde::{Deserialize, Serialize};

use qpslab_sys::root::Root;

/// The directives of an nginx configuration that set its cost per request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NginxConf {
    /// `access_log` directives that write (not `off`), as written; nginx logs to
    /// `logs/access.log` when the configuration names none.
    pub access_logs: Vec<String>,
    /// Some `access_log` writes without `buffer=`: a write(2) per request.
    pub access_log_unbuffered: bool,
    /// `keepalive_requests` (the largest given), or nginx's default (1000 since 1.19.10).
    pub keepalive_requests: u64,
    /// `worker_processes` as written (`auto` or a number); None: nginx's default of 1.
    pub worker_processes: Option<String>,
    pub worker_cpu_affinity: Option<String>,
    /// `accept_mutex on` (off by default since 1.11.3).
    pub accept_mutex: bool,
    /// A `listen` with `reuseport`.
    pub reuseport: bool,
    /// `open_file_cache` set (off by default: every file served is opened, stat'ed and closed
    /// per request).
    pub open_file_cache: bool,
    /// It serves files: a `root` or `alias` and no `return` anywhere (a guess at what the run
    /// asked for: the configuration does not say which location a URL takes).
    pub serves_files: bool,
    /// Where it passes requests on (`proxy_pass`, `fastcgi_pass`, `uwsgi_pass`, `scgi_pass`,
    /// `grpc_pass`, and the `server`s of `upstream` blocks): (directive, address as written).
    pub upstreams: Vec<(String, String)>,
    /// `error_log` files as written (relative ones are the prefix's), `stderr`, `syslog:` and
    /// `memory:` left out; empty: nginx's compiled-in default.
    #[serde(default)]
    pub error_logs: Vec<String>,
    /// `worker_connections` (None: nginx's default, 512) and `worker_rlimit_nofile`.
    #[serde(default)]
    pub worker_connections: Option<u64>,
    #[serde(default)]
    pub worker_rlimit_nofile: Option<u64>,
    /// `limit_req_zone`s as written after the key: `zone=one:10m rate=200r/s`; and whether any
    /// `limit_req` applies one.
    #[serde(default)]
    pub limit_req_zones: Vec<String>,
    #[serde(default)]
    pub limit_req: bool,
    /// The ports its `listen`s name (80 for a listen of an address alone).
    #[serde(default)]
    pub listen_ports: Vec<u16>,
    /// `http2_max_concurrent_streams` (None: nginx's default, 128).
    #[serde(default)]
    pub http2_max_concurrent_streams: Option<u64>,
    /// A `keepalive_timeout 0`: it closes every connection after its response.
    #[serde(default)]
    pub keepalive_off: bool,
    /// The smallest listen queue its `listen`s ask for: `backlog=N`, or nginx's default of
    /// [`LISTEN_BACKLOG`] for a listen without it (None: no listen).
    #[serde(default)]
    pub listen_backlog: Option<u64>,
}

/// nginx's listen queue on Linux when a `listen` names no `backlog=` (NGX_LISTEN_BACKLOG).
pub const LISTEN_BACKLOG: u64 = 511;

/// nginx's default `worker_connections`.
pub const DEFAULT_WORKER_CONNECTIONS: u64 = 512;

/// nginx's default `keepalive_requests` since 1.19.10.
pub const DEFAULT_KEEPALIVE_REQUESTS: u64 = 1000;

/// Parses the text of `nginx -T` (or one configuration file): directives, comments removed,
/// whatever their block.
pub fn parse(text: &str) -> NginxConf {
    let mut c = NginxConf { keepalive_requests: 0, ..NginxConf::default() };
    let mut saw_access_log = false;
    let (mut files, mut returns) = (false, false);
    for stmt in statements(text) {
        let words: Vec<&str> = stmt.split_whitespace().collect();
        let Some((&name, args)) = words.split_first() else { continue };
        match name {
            "access_log" => {
                saw_access_log = true;
                if args.first() != Some(&"off") {
                    c.access_logs.push(args.join(" "));
                    c.access_log_unbuffered |= !args.iter().any(|a| a.starts_with("buffer="));
                }
            }
            "keepalive_requests" => {
                if let Some(n) = args.first().and_then(|n| n.parse().ok()) {
                    c.keepalive_requests = c.keepalive_requests.max(n);
                }
            }
            "worker_processes" => c.worker_processes = args.first().map(|s| s.to_string()),
            "worker_cpu_affinity" => c.worker_cpu_affinity = Some(args.join(" ")),
            "accept_mutex" => c.accept_mutex = args.first() == Some(&"on"),
            "listen" => {
                c.reuseport |= args.contains(&"reuseport");
                let port = args.first().filter(|a| !a.starts_with("unix:")).map(|a| {
                    let p = a.rsplit_once(':').map_or(*a, |(_, p)| p);
                    p.parse().unwrap_or(if a.chars().all(|c| c.is_ascii_digit()) { 0 } else { 80 })
                });
                c.listen_ports.extend(port.filter(|p| *p != 0));
                let backlog = args
                    .iter()
                    .find_map(|a| a.strip_prefix("backlog=")?.parse().ok())
                    .unwrap_or(LISTEN_BACKLOG);
                c.listen_backlog = Some(c.listen_backlog.map_or(backlog, |b| b.min(backlog)));
            }
            "open_file_cache" => c.open_file_cache = args.first() != Some(&"off"),
            "root" | "alias" => files = true,
            "proxy_pass" | "fastcgi_pass" | "uwsgi_pass" | "scgi_pass" | "grpc_pass" => {
                if let Some(a) = args.first() {
                    c.upstreams.push((name.to_string(), a.to_string()));
                }
            }
            // `server ADDRESS ...;` is an upstream block's member (`server {` has no argument).
            "server" => {
                if let Some(a) = args.first() {
                    c.upstreams.push(("upstream server".to_string(), a.to_string()));
                }
            }
            "return" => returns = true,
            "error_log" => {
                let to = args.first().copied().unwrap_or_default();
                let elsewhere = ["stderr", "syslog:", "memory:", "/dev/null"];
                if !to.is_empty() && !elsewhere.iter().any(|e| to.starts_with(e)) {
                    c.error_logs.push(to.to_string());
                }
            }
            "worker_connections" => {
                c.worker_connections = args.first().and_then(|n| n.parse().ok())
            }
            "worker_rlimit_nofile" => {
                c.worker_rlimit_nofile = args.first().and_then(|n| n.parse().ok());
            }
            "limit_req_zone" => {
                let zone: Vec<&str> = args.iter().skip(1).copied().collect();
                c.limit_req_zones.push(zone.join(" "));
            }
            "limit_req" => c.limit_req = true,
            "keepalive_timeout" => {
                c.keepalive_off |= matches!(args.first().copied(), Some("0" | "0s" | "0ms"));
            }
            "http2_max_concurrent_streams" => {
                c.http2_max_concurrent_streams = args.first().and_then(|n| n.parse().ok());
            }
            _ => {}
        }
    }
    c.serves_files = files && !returns;
    if !saw_access_log {
        c.access_logs.push("logs/access.log (nginx's default)".into());
        c.access_log_unbuffered = true;
    }
    if c.keepalive_requests == 0 {
        c.keepalive_requests = DEFAULT_KEEPALIVE_REQUESTS;
    }
    c
}

/// The statements of a configuration: text up to each `;`, `{` or `}`, comments (`#` to the
/// end of the line, outside quotes) removed. Good enough for the directives above, whose
/// arguments hold no braces.
fn statements(text: &str) -> Vec<String> {
    nested_statements(text).into_iter().map(|s| s.text).collect()
}

/// A statement with the blocks it is in ([`nested_statements`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Statement {
    /// Its words joined by single spaces (a block's head: `location = /status`).
    pub text: String,
    /// The blocks around it, outermost first: each one's number (in order of opening over the
    /// whole text) and head.
    pub within: Vec<(usize, String)>,
}

/// Every statement and block head of a configuration, with the blocks around it.
pub(crate) fn nested_statements(text: &str) -> Vec<Statement> {
    let mut out = Vec::new();
    let mut within: Vec<(usize, String)> = Vec::new();
    let mut opened = 0;
    let mut cur = String::new();
    for line in text.lines() {
        // `nginx -T` heads each file with `# configuration file PATH:`.
        let mut quoted = None;
        for ch in line.chars() {
            match (quoted, ch) {
                (None, '#') => break,
                (None, '"' | '\'') => {
                    quoted = Some(ch);
                    cur.push(ch);
                }
                (Some(q), c) if c == q => {
                    quoted = None;
                    cur.push(c);
                }
                (None, ';' | '{' | '}') => {
                    let s = cur.split_whitespace().collect::<Vec<_>>().join(" ");
                    if !s.is_empty() {
                        out.push(Statement { text: s.clone(), within: within.clone() });
                    }
                    match ch {
                        '{' => {
                            within.push((opened, s));
                            opened += 1;
                        }
                        '}' => {
                            within.pop();
                        }
                        _ => {}
                    }
                    cur.clear();
                }
                (_, c) => cur.push(c),
            }
        }
        cur.push(' ');
    }
    out
}

/// The configuration of the nginx whose master or worker is `pid`: its binary asked for its
/// effective configuration (`nginx -T`, with the `-c` and `-p` it was started with). None when
/// `pid` is not nginx, the root is not the live one, or nginx refuses.
pub fn read(root: &Root, pid: u32) -> Option<NginxConf> {
    if !crate::is_live(root.dir()) {
        return root.read_opt("qpslab/nginx-T.txt").map(|t| parse(&t));
    }
    master(root, pid)?.dump().map(|t| parse(&t))
}

/// A running nginx's master: its PID, its binary and the `-c`/`-p` it was started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Master {
    pub pid: u32,
    pub exe: std::path::PathBuf,
    /// `-c FILE` and `-p DIR` as given to it (relative paths are the prefix's).
    pub flags: Vec<String>,
}

impl Master {
    /// Its binary with its `-c` and `-p`, to which a caller adds `-T`, `-t`.
    pub fn command(&self) -> std::process::Command {
        let mut c = std::process::Command::new(&self.exe);
        c.args(&self.flags);
        c
    }

    /// The files its `error_log`s write to: relative paths joined to its prefix (`-p`, else
    /// the compiled one), nginx's compiled default when the configuration names none.
    pub fn error_log_paths(&self, conf: &NginxConf) -> Vec<std::path::PathBuf> {
        let built = self.build_options();
        let flag_prefix =
            self.flags.iter().position(|f| f == "-p").and_then(|i| self.flags.get(i + 1));
        let prefix =
            flag_prefix.cloned().or_else(|| built.get("--prefix").cloned()).unwrap_or_default();
        let names: Vec<String> = if conf.error_logs.is_empty() {
            built.get("--error-log-path").cloned().into_iter().collect()
        } else {
            conf.error_logs.clone()
        };
        names
            .iter()
            .map(|n| {
                let p = std::path::Path::new(n);
                if p.is_absolute() {
                    p.to_path_buf()
                } else {
                    std::path::Path::new(&prefix).join(p)
                }
            })
            .collect()
    }

    /// `nginx -V`'s configure options (`--prefix=/usr/share/nginx` ...), by name.
    fn build_options(&self) -> std::collections::BTreeMap<String, String> {
        let Ok(out) = std::process::Command::new(&self.exe).arg("-V").output() else {
            return Default::default();
        };
        configure_options(&String::from_utf8_lossy(&out.stderr))
    }

    /// `nginx -T`: its effective configuration, every file in turn. None when it refuses.
    pub fn dump(&self) -> Option<String> {
        let out =
            self.command().arg("-T").arg("-q").stderr(std::process::Stdio::null()).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// The master of the nginx whose master or worker is `pid`; None when it is not nginx.
pub fn master(root: &Root, pid: u32) -> Option<Master> {
    let comm = root.read_opt(&format!("proc/{pid}/comm"))?;
    if comm.trim() != "nginx" {
        return None;
    }
    // A worker's command line is "nginx: worker process": the master's holds the flags.
    let stat = crate::parse::task_stat(&root.read_opt(&format!("proc/{pid}/stat"))?)?;
    let master = if cmdline(root, pid).first().is_some_and(|a| a.starts_with("nginx:")) {
        let parent = root.read_opt(&format!("proc/{}/cmdline", stat.ppid));
        if parent.is_some_and(|p| p.starts_with("nginx: master")) {
            stat.ppid
        } else {
            pid
        }
    } else {
        pid
    };
    let exe = root.read_link(&format!("proc/{master}/exe"))?;
    let args = cmdline(root, master);
    // The master's title is "nginx: master process /usr/sbin/nginx -c FILE -p DIR".
    let words: Vec<String> =
        args.iter().flat_map(|a| a.split_whitespace()).map(String::from).collect();
    let flag = |f: &str| words.iter().position(|w| w == f).and_then(|i| words.get(i + 1).cloned());
    let mut flags = Vec::new();
    for f in ["-c", "-p"] {
        if let Some(v) = flag(f) {
            flags.extend([f.to_string(), v]);
        }
    }
    Some(Master { pid: master, exe, flags })
}

/// The main configuration file of an `nginx -T` dump: the first `# configuration file PATH:`.
pub fn main_file(dump: &str) -> Option<&str> {
    dump.lines().find_map(|l| l.strip_prefix("# configuration file ")?.strip_suffix(':'))
}

/// An error log line's level and message: `2026/11/27 10:00:00 [alert] 7#7: *99 MESSAGE`
/// gives `alert` and `MESSAGE` (the connection number `*99` dropped).
pub fn error_line(line: &str) -> Option<(&str, &str)> {
    let open = line.find(" [")?;
    let rest = &line[open + 2..];
    let close = rest.find("] ")?;
    let level = &rest[..close];
    // "PID#TID: " then, for a connection's message, "*N ".
    let after = &rest[close + 2..];
    let msg = after.split_once(": ").map_or(after, |(_, m)| m);
    let msg = match msg.strip_prefix('*') {
        Some(m) => m.split_once(' ').map_or(m, |(_, m)| m),
        None => msg,
    };
    Some((level, msg))
}

/// The `--name=value` options of `nginx -V`'s "configure arguments:" line.
pub fn configure_options(text: &str) -> std::collections::BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("configure arguments:"))
        .flat_map(|l| l.split_whitespace())
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn cmdline(root: &Root, pid: u32) -> Vec<String> {
    root.read_opt(&format!("proc/{pid}/cmdline"))
        .map(|t| t.split('\0').filter(|s| !s.is_empty()).map(String::from).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of Debian's nginx -T: the main file, then an included site.
    #[test]
    fn the_costs_are_read_from_every_block() {
        let text = "# configuration file /etc/nginx/nginx.conf:\nuser www-data;\nworker_processes auto; # one per CPU\nevents { worker_connections 768; accept_mutex on; }\nhttp {\n  access_log /var/log/nginx/access.log;\n  keepalive_requests 100;\n  include /etc/nginx/sites-enabled/*;\n}\n# configuration file /etc/nginx/sites-enabled/default:\nserver { listen 80 reuseport; location / { return 200 \"ok;#\"; } }\n";
        let c = parse(text);
        assert_eq!(c.access_logs, vec!["/var/log/nginx/access.log"]);
        assert!(c.access_log_unbuffered);
        assert_eq!(c.keepalive_requests, 100);
        assert_eq!(c.worker_processes.as_deref(), Some("auto"));
        assert!(c.accept_mutex && c.reuseport);
        assert_eq!(c.listen_ports, vec![80]);
        let ports = parse("server { listen 127.0.0.1:8080; listen [::]:8443 ssl; listen localhost; listen unix:/s; }");
        assert_eq!(ports.listen_ports, vec![8080, 8443, 80]);
    }

    /// The limits a load can run into, and where nginx says so.
    #[test]
    fn the_limits_and_the_error_logs_are_read() {
        let c = parse(
            "error_log /var/log/nginx/error.log warn; error_log stderr;\nevents { worker_connections 256; }\nworker_rlimit_nofile 4096;\nhttp { limit_req_zone $binary_remote_addr zone=one:10m rate=200r/s; http2_max_concurrent_streams 1; server { error_log logs/site.log; location / { limit_req zone=one; } } }",
        );
        assert_eq!(c.error_logs, vec!["/var/log/nginx/error.log", "logs/site.log"]);
        assert_eq!((c.worker_connections, c.worker_rlimit_nofile), (Some(256), Some(4096)));
        assert_eq!(c.limit_req_zones, vec!["zone=one:10m rate=200r/s"]);
        assert!(c.limit_req);
        assert!(!c.keepalive_off);
        assert!(parse("http { keepalive_timeout 0; }").keepalive_off);
        let b = parse("http { server { listen 80 backlog=4096; } server { listen 81; } }");
        assert_eq!(b.listen_backlog, Some(LISTEN_BACKLOG));
        assert_eq!(parse("http { server { listen 80 backlog=4096; } }").listen_backlog, Some(4096));
        assert_eq!(c.http2_max_concurrent_streams, Some(1));
        let v = configure_options("nginx version: nginx/1.22.1\nconfigure arguments: --with-cc-opt='-g' --prefix=/usr/share/nginx --error-log-path=/var/log/nginx/error.log\n");
        assert_eq!(v.get("--prefix").map(String::as_str), Some("/usr/share/nginx"));
        assert_eq!(v.get("--error-log-path").map(String::as_str), Some("/var/log/nginx/error.log"));
    }

    #[test]
    fn the_main_file_is_the_dumps_first() {
        let dump = "# configuration file /etc/nginx/nginx.conf:\nhttp {}\n# configuration file /etc/nginx/b.conf:\n";
        assert_eq!(main_file(dump), Some("/etc/nginx/nginx.conf"));
        assert_eq!(main_file("http {}"), None);
    }

    #[test]
    fn defaults_apply_where_nothing_is_said() {
        let c = parse("events {}\nhttp { server { listen 8080; return 200; } }\n");
        assert_eq!(c.access_logs, vec!["logs/access.log (nginx's default)"]);
        assert_eq!(c.keepalive_requests, DEFAULT_KEEPALIVE_REQUESTS);
        assert!(!c.accept_mutex && !c.reuseport);
        let off = parse("http { access_log off; keepalive_requests 100000; }");
        assert!(off.access_logs.is_empty() && !off.access_log_unbuffered);
        let buffered = parse("http { access_log /l buffer=64k flush=1s; }");
        assert!(!buffered.access_log_unbuffered);
    }

    #[test]
    fn a_site_of_files_without_a_cache_is_told_apart_from_one_that_returns() {
        let debian = parse(
            "http { server { root /var/www/html; location / { try_files $uri $uri/ =404; } } }",
        );
        assert!(debian.serves_files && !debian.open_file_cache);
        let returns = parse("http { server { root /srv; location / { return 200; } } }");
        assert!(!returns.serves_files);
        let cached = parse("http { open_file_cache max=1000; server { root /srv; } }");
        assert!(cached.serves_files && cached.open_file_cache);
        assert!(!parse("http { open_file_cache off; }").open_file_cache);
    }
}
