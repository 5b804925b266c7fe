//! Server configuration in two stages: [`ServeOptions`] as the user gave it, [`ServeConfig`]
//! validated. Errors name the flag and the fix.

use std::net::SocketAddr;
use std::time::Duration;

use qpslab_http::request_head::HEADER_SLOTS;
use qpslab_http::RequestLimits;

pub use qpslab_sys::config_error::ConfigError;

/// How workers share the listening sockets (nginx's choices, seed 001).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptMode {
    /// One SO_REUSEPORT listener per worker and address: the kernel spreads connections.
    Reuseport,
    /// One listener in every worker's epoll set: all wake, one wins (nginx, accept_mutex off).
    Shared,
    /// The shared listener with EPOLLEXCLUSIVE: the kernel wakes one worker.
    Exclusive,
}

impl AcceptMode {
    pub fn parse(s: &str) -> Result<Self, ConfigError> {
        match s {
            "reuseport" => Ok(Self::Reuseport),
            "shared" => Ok(Self::Shared),
            "exclusive" => Ok(Self::Exclusive),
            _ => Err(ConfigError::new(
                "--accept",
                format!("{s:?} is not an accept mode; use reuseport, shared or exclusive"),
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Reuseport => "reuseport",
            Self::Shared => "shared",
            Self::Exclusive => "exclusive",
        }
    }
}

/// Largest body `s=` or `--body-size` may ask for.
pub const MAX_BODY_SIZE: u64 = 1 << 30;
/// Longest delay `t=` may ask for, in milliseconds.
pub const MAX_DELAY_MS: u64 = 60_000;

/// Options as given.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub listen: Vec<String>,
    /// `None`: one worker per CPU this process may use.
    pub workers: Option<usize>,
    /// Worker i pinned to the i-th CPU of this cpulist (`0-3,8`).
    pub cpus: Option<String>,
    pub accept: AcceptMode,
    /// `None`: [`DEFAULT_BACKLOG`], capped by the kernel without a warning.
    pub backlog: Option<u32>,
    /// Listen on a port another socket already listens on (SO_REUSEPORT splits the
    /// connections between the servers); refused otherwise.
    pub share_port: bool,
    pub max_conns: usize,
    pub keepalive_requests: u64,
    pub idle_timeout: Duration,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub limits: RequestLimits,
    pub max_body: u64,
    pub body_size: u64,
    pub status: u16,
}

/// The listen backlog asked for when `--backlog` is not given; the kernel caps it at
/// `net.core.somaxconn`.
pub const DEFAULT_BACKLOG: u32 = 65535;

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            listen: vec!["127.0.0.1:8080".into()],
            workers: None,
            cpus: None,
            accept: AcceptMode::Reuseport,
            backlog: None,
            share_port: false,
            max_conns: 65536,
            keepalive_requests: u64::MAX,
            idle_timeout: Duration::from_secs(60),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            limits: RequestLimits::default(),
            max_body: 1 << 20,
            body_size: 3,
            status: 200,
        }
    }
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub listen: Vec<SocketAddr>,
    pub workers: usize,
    pub cpus: Option<Vec<usize>>,
    pub accept: AcceptMode,
    pub backlog: u32,
    /// The user asked for this backlog (`--backlog`): say so when the kernel caps it.
    pub backlog_requested: bool,
    pub share_port: bool,
    pub max_conns: usize,
    pub keepalive_requests: u64,
    pub idle_timeout: Duration,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub limits: RequestLimits,
    pub max_body: u64,
    pub body_size: u64,
    pub status: u16,
}

impl ServeConfig {
    pub fn from_options(o: &ServeOptions) -> Result<Self, ConfigError> {
        if o.listen.is_empty() {
            return Err(ConfigError::new("--listen", "give at least one ADDR:PORT"));
        }
        let listen = o
            .listen
            .iter()
            .map(|l| {
                l.parse::<SocketAddr>().map_err(|_| {
                    ConfigError::new(
                        "--listen",
                        format!("{l:?} is not ADDR:PORT; e.g. 127.0.0.1:8080 or [::1]:8080"),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let workers = match o.workers {
            Some(0) => return Err(ConfigError::new("--workers", "must be at least 1, or auto")),
            Some(n) => n,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let cpus = o.cpus.as_deref().map(validate_cpus).transpose()?;
        let positive = |d: Duration, flag: &'static str| {
            if d.is_zero() {
                Err(ConfigError::new(flag, "must be greater than zero, e.g. 10s"))
            } else {
                Ok(d)
            }
        };
        if o.backlog == Some(0) {
            return Err(ConfigError::new("--backlog", "must be at least 1"));
        }
        if o.share_port && o.accept != AcceptMode::Reuseport {
            return Err(ConfigError::new(
                "--share-port",
                "needs --accept reuseport: the kernel shares a port only between SO_REUSEPORT \
                 listeners",
            ));
        }
        if o.max_conns == 0 {
            return Err(ConfigError::new("--max-conns", "must be at least 1"));
        }
        if o.keepalive_requests == 0 {
            return Err(ConfigError::new("--keepalive-requests", "must be at least 1"));
        }
        let l = o.limits;
        if l.max_request_line < 64 {
            return Err(ConfigError::new("--max-request-line", "must be at least 64 bytes"));
        }
        if l.max_header_bytes < 64 {
            return Err(ConfigError::new("--max-header-bytes", "must be at least 64 bytes"));
        }
        if l.max_headers == 0 || l.max_headers > HEADER_SLOTS {
            return Err(ConfigError::new(
                "--max-headers",
                format!("must be between 1 and {HEADER_SLOTS}"),
            ));
        }
        if o.body_size > MAX_BODY_SIZE {
            return Err(ConfigError::new("--body-size", format!("at most {MAX_BODY_SIZE} bytes")));
        }
        if !(200..=599).contains(&o.status) {
            return Err(ConfigError::new("--status", "must be a final status, 200 to 599"));
        }
        Ok(Self {
            listen,
            workers,
            cpus,
            accept: o.accept,
            backlog: o.backlog.unwrap_or(DEFAULT_BACKLOG),
            backlog_requested: o.backlog.is_some(),
            share_port: o.share_port,
            max_conns: o.max_conns,
            keepalive_requests: o.keepalive_requests,
            idle_timeout: positive(o.idle_timeout, "--idle-timeout")?,
            header_timeout: positive(o.header_timeout, "--header-timeout")?,
            body_timeout: positive(o.body_timeout, "--body-timeout")?,
            limits: l,
            max_body: o.max_body,
            body_size: o.body_size,
            status: o.status,
        })
    }
}

/// A cpulist of CPUs this process may use.
fn validate_cpus(list: &str) -> Result<Vec<usize>, ConfigError> {
    let cpus = qpslab_sys::cpus::parse_cpu_list(list).map_err(|e| ConfigError::new("--cpus", e))?;
    if cpus.is_empty() {
        return Err(ConfigError::new("--cpus", "empty CPU list; write e.g. 0-3,8"));
    }
    let allowed = qpslab_sys::cpus::allowed_cpus();
    if let Some(bad) = cpus.iter().find(|c| !allowed.contains(c)) {
        return Err(ConfigError::new(
            "--cpus",
            format!("CPU {bad} is not available to this process (allowed: {allowed:?})"),
        ));
    }
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_are_checked_against_this_process() {
        let with = |cpus: &str| ServeOptions { cpus: Some(cpus.into()), ..ServeOptions::default() };
        let flag = |o: ServeOptions| ServeConfig::from_options(&o).map(|_| ()).unwrap_err().flag;
        assert_eq!(flag(with("100000")), "--cpus");
        assert_eq!(flag(with("")), "--cpus");
        assert_eq!(flag(with("3-1")), "--cpus");
        let first = qpslab_sys::cpus::allowed_cpus()[0];
        let cfg = ServeConfig::from_options(&with(&first.to_string()));
        assert_eq!(cfg.map(|c| c.cpus), Ok(Some(vec![first])));
    }
}
