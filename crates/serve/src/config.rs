//! Server configuration in two stages: [`ServeOptions`] as the user gave it, [`ServeConfig`]
//! validated. Errors name the flag and the fix.

use std::net::SocketAddr;
use std::time::Duration;

use qpslab_http::request_head::HEADER_SLOTS;
use qpslab_http::RequestLimits;

pub use qpslab_sys::config_error::ConfigError;
pub use qpslab_sys::uring::{Engine, IoChoice};

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

/// What every connection gets: the limits, deadlines and the response. The same in the
/// options as given and in the validated configuration (checked in place).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Connections per worker; beyond it new connections wait in the kernel's queue.
    pub max_conns: usize,
    pub keepalive_requests: u64,
    pub idle_timeout: Duration,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub limits: RequestLimits,
    pub max_body: u64,
    pub body_size: u64,
    pub status: u16,
    /// HTTP/2: streams open at once per connection (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub h2_streams: usize,
    /// HTTP/3: handshakes under way in a worker from which a new client whose address is not
    /// yet validated is sent a Retry first (0: every such client; `usize::MAX`: none).
    pub h3_retry_above: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_conns: 65536,
            keepalive_requests: u64::MAX,
            idle_timeout: Duration::from_secs(60),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            limits: RequestLimits::default(),
            max_body: 1 << 20,
            body_size: 3,
            status: 200,
            // nginx's http2_max_concurrent_streams.
            h2_streams: 128,
            h3_retry_above: 256,
        }
    }
}

impl Settings {
    fn check(&self) -> Result<(), ConfigError> {
        let must = |ok: bool, flag: &'static str, what: &str| {
            if ok {
                Ok(())
            } else {
                Err(ConfigError::new(flag, what))
            }
        };
        must(self.max_conns > 0, "--max-conns", "must be at least 1")?;
        must(self.keepalive_requests > 0, "--keepalive-requests", "must be at least 1")?;
        let positive = "must be greater than zero, e.g. 10s";
        must(!self.idle_timeout.is_zero(), "--idle-timeout", positive)?;
        must(!self.header_timeout.is_zero(), "--header-timeout", positive)?;
        must(!self.body_timeout.is_zero(), "--body-timeout", positive)?;
        let l = self.limits;
        must(l.max_request_line >= 64, "--max-request-line", "must be at least 64 bytes")?;
        must(l.max_header_bytes >= 64, "--max-header-bytes", "must be at least 64 bytes")?;
        must(
            (1..=HEADER_SLOTS).contains(&l.max_headers),
            "--max-headers",
            &format!("must be between 1 and {HEADER_SLOTS}"),
        )?;
        must(
            self.body_size <= MAX_BODY_SIZE,
            "--body-size",
            &format!("at most {MAX_BODY_SIZE} bytes"),
        )?;
        must(
            (1..=1 << 20).contains(&self.h2_streams),
            "--h2-streams",
            "must be between 1 and 1048576",
        )?;
        must((200..=599).contains(&self.status), "--status", "must be a final status, 200 to 599")
    }
}

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
    pub settings: Settings,
    /// The event loop (`--io`).
    pub io: IoChoice,
    /// io_uring with a kernel thread polling each ring's submissions (`--sqpoll`).
    pub sqpoll: bool,
    /// HTTPS: where the certificate comes from (`--tls-cert`/`--tls-key`, `--tls-self-signed`).
    pub tls: Option<crate::tls::TlsSource>,
    /// HTTPS: require a client certificate signed by a CA of this PEM file (`--tls-client-ca`).
    pub tls_client_ca: Option<std::path::PathBuf>,
    /// HTTP/3 over QUIC on UDP, on the same addresses and ports as TCP (`--h3`).
    pub h3: bool,
}

/// Whether io_uring serves more requests per CPU-second than epoll here: what `--io auto` goes
/// by. Measured side by side (docs/performance.md): 1.07x and 1.04x with keep-alive (qpslab
/// load and wrk as clients), 1.11x pipelined 16 deep.
pub const URING_MEASURED_FASTER: bool = true;

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
            settings: Settings::default(),
            io: IoChoice::Auto,
            sqpoll: false,
            tls: None,
            tls_client_ca: None,
            h3: false,
        }
    }
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub listen: Vec<SocketAddr>,
    /// `--listen unix:PATH`: unix domain sockets, served by every worker alongside.
    pub unix: Vec<std::path::PathBuf>,
    pub workers: usize,
    pub cpus: Option<Vec<usize>>,
    pub accept: AcceptMode,
    pub backlog: u32,
    /// The user asked for this backlog (`--backlog`): say so when the kernel caps it.
    pub backlog_requested: bool,
    pub share_port: bool,
    pub settings: Settings,
    /// The event loop the workers run.
    pub io: Engine,
    /// Why `--io auto` did not take io_uring, when it could not run.
    pub io_note: Option<String>,
    /// Each io_uring worker's submissions are polled by a kernel thread on the worker's CPU.
    pub sqpoll: bool,
    /// HTTPS: the TLS set-up every worker shares.
    pub tls: Option<crate::tls::ServerTls>,
    /// HTTP/3: QUIC's server set-up, every worker's endpoint shares it.
    pub h3: Option<std::sync::Arc<quinn_proto::ServerConfig>>,
    /// `--h3`: the Alt-Svc value HTTP/1.1 and HTTP/2 answers carry (`h3=":PORT"` for each
    /// port listened on, known once bound).
    pub alt_svc: Option<String>,
}

impl ServeConfig {
    pub fn from_options(o: &ServeOptions) -> Result<Self, ConfigError> {
        if o.listen.is_empty() {
            return Err(ConfigError::new("--listen", "give at least one ADDR:PORT"));
        }
        let unix = unix_paths(&o.listen)?;
        let listen = o
            .listen
            .iter()
            .filter(|l| !l.starts_with("unix:"))
            .map(|l| {
                l.parse::<SocketAddr>().map_err(|_| {
                    ConfigError::new(
                        "--listen",
                        format!(
                            "{l:?} is not ADDR:PORT or unix:PATH; e.g. 127.0.0.1:8080, \
                             [::1]:8080 or unix:/run/qpslab.sock"
                        ),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let workers = match o.workers {
            Some(0) => return Err(ConfigError::new("--workers", "must be at least 1, or auto")),
            Some(n) => n,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let cpus =
            o.cpus.as_deref().map(|l| qpslab_sys::cpus::usable_list(l, "--cpus")).transpose()?;
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
        o.settings.check()?;
        let (io, io_note) = o.io.resolve(URING_MEASURED_FASTER)?;
        if io == Engine::Uring && o.accept == AcceptMode::Exclusive {
            return Err(ConfigError::new(
                "--accept",
                "exclusive is EPOLLEXCLUSIVE, an epoll mode; with --io uring use reuseport or shared",
            ));
        }
        if o.sqpoll && io != Engine::Uring {
            return Err(ConfigError::new(
                "--sqpoll",
                match io_note {
                    Some(_) => "polls io_uring submissions, and io_uring cannot run here; drop it",
                    None => "polls io_uring submissions; use it with --io uring or auto",
                },
            ));
        }
        if o.tls.is_none() && o.tls_client_ca.is_some() {
            return Err(ConfigError::new(
                "--tls-client-ca",
                "client certificates come with HTTPS: give --tls-cert and --tls-key, or --tls-self-signed",
            ));
        }
        let tls = o
            .tls
            .as_ref()
            .map(|t| crate::tls::ServerTls::new(t, &listen, o.tls_client_ca.as_deref()))
            .transpose()?;
        let h3 = o.h3.then(|| check_h3(tls.as_ref(), &listen, &o.settings)).transpose()?;
        Ok(Self {
            listen,
            unix,
            workers,
            cpus,
            accept: o.accept,
            backlog: o.backlog.unwrap_or(DEFAULT_BACKLOG),
            backlog_requested: o.backlog.is_some(),
            share_port: o.share_port,
            settings: o.settings,
            io,
            io_note,
            sqpoll: o.sqpoll,
            tls,
            h3,
            alt_svc: None,
        })
    }
}

/// `--h3`: QUIC's set-up from the HTTPS one, on UDP beside each TCP address.
fn check_h3(
    tls: Option<&crate::tls::ServerTls>,
    listen: &[SocketAddr],
    settings: &Settings,
) -> Result<std::sync::Arc<quinn_proto::ServerConfig>, ConfigError> {
    let Some(tls) = tls else {
        return Err(ConfigError::new(
            "--h3",
            "HTTP/3 runs over QUIC, which is TLS 1.3: give --tls-cert and --tls-key, or \
             --tls-self-signed",
        ));
    };
    if listen.is_empty() {
        return Err(ConfigError::new(
            "--h3",
            "HTTP/3 runs over UDP: give an ADDR:PORT in --listen (a unix socket carries no QUIC)",
        ));
    }
    tls.quic(settings.h2_streams, settings.idle_timeout)
}

/// The `unix:PATH` entries of `--listen`, each a path a socket address can hold.
fn unix_paths(listen: &[String]) -> Result<Vec<std::path::PathBuf>, ConfigError> {
    listen
        .iter()
        .filter_map(|l| l.strip_prefix("unix:"))
        .map(|p| {
            let err = |why: String| ConfigError::new("--listen", format!("unix:{p}: {why}"));
            if p.is_empty() {
                return Err(err("give the socket's path, e.g. unix:/run/qpslab.sock".into()));
            }
            socket2::SockAddr::unix(p).map_err(|e| err(e.to_string()))?;
            Ok(std::path::PathBuf::from(p))
        })
        .collect()
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
