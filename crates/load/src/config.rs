//! Load configuration in two stages: [`LoadOptions`] holds what the user typed (the CLI fills it
//! from flags), [`LoadConfig`] is the validated, resolved form the engine runs. Every validation
//! error names the flag and the fix.
//!
//! Does not own flag parsing (the CLI does) nor any I/O beyond resolving host names and reading
//! the `--body @FILE`.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use qpslab_http::{HeaderArg, RequestSpec};

use qpslab_sys::cpus::{allowed_cpus, parse_cpu_list};

pub use qpslab_sys::config_error::ConfigError;

/// Default connection count when `-c` is not given (the design brief's reference runs use 100).
pub const DEFAULT_CONNECTIONS: usize = 100;
/// Default run length when neither `-d` nor `-n` is given (wrk's default).
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);
/// Default per-request timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Options as the user gave them.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub urls: Vec<String>,
    pub threads: Option<usize>,
    pub connections: Option<usize>,
    pub duration: Option<Duration>,
    pub requests: Option<u64>,
    pub headers: Vec<String>,
    pub method: String,
    /// A literal body, or `@path` to read one from a file.
    pub body: Option<String>,
    pub timeout: Duration,
    pub warmup: Duration,
    pub cpus: Option<String>,
    pub accept_status: Option<String>,
    pub max_error_rate: f64,
    /// Open loop: `N` requests/s in total, or `A:B` for a linear ramp from A to B over `ramp`.
    pub rate: Option<String>,
    pub ramp: Option<Duration>,
    /// Requests kept in flight per connection.
    pub pipeline: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            threads: None,
            connections: None,
            duration: None,
            requests: None,
            headers: Vec::new(),
            method: "GET".into(),
            body: None,
            timeout: DEFAULT_TIMEOUT,
            warmup: Duration::ZERO,
            cpus: None,
            accept_status: None,
            max_error_rate: 0.0,
            rate: None,
            ramp: None,
            pipeline: 1,
        }
    }
}

/// An open-loop rate: requests/s for the whole run (all threads), ramping linearly from
/// `start_rps` to `end_rps` over `ramp`, then constant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub start_rps: f64,
    pub end_rps: f64,
    pub ramp: Duration,
}

impl Rate {
    /// Parses `--rate N` or `--rate A:B` with `--ramp DUR`.
    pub fn parse(text: &str, ramp: Option<Duration>) -> Result<Rate, ConfigError> {
        let number = |s: &str| match s.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
            _ => Err(ConfigError::new(
                "--rate",
                format!(
                    "{s:?} is not a positive number of requests/s; write e.g. 5000 or 1000:50000"
                ),
            )),
        };
        match (text.split_once(':'), ramp) {
            (None, None) => {
                let r = number(text)?;
                Ok(Rate { start_rps: r, end_rps: r, ramp: Duration::ZERO })
            }
            (None, Some(_)) => Err(ConfigError::new(
                "--ramp",
                "needs a rate range to ramp over, e.g. --rate 1000:50000 --ramp 30s",
            )),
            (Some(_), None) => Err(ConfigError::new(
                "--rate",
                format!("{text:?} is a range: give --ramp DUR, the time to go from one rate to the other"),
            )),
            (Some(_), Some(d)) if d.is_zero() => {
                Err(ConfigError::new("--ramp", "must be greater than zero, e.g. 30s"))
            }
            (Some((a, b)), Some(d)) => Ok(Rate { start_rps: number(a)?, end_rps: number(b)?, ramp: d }),
        }
    }

    /// Requests due in the first `t` of the run: the integral of the rate.
    pub fn due_by(&self, t: Duration) -> f64 {
        let (t, ramp) = (t.as_secs_f64(), self.ramp.as_secs_f64());
        let (r0, r1) = (self.start_rps, self.end_rps);
        if t < ramp {
            r0 * t + (r1 - r0) * t * t / (2.0 * ramp)
        } else {
            self.in_ramp() + r1 * (t - ramp)
        }
    }

    /// Seconds into the run at which request `k` is due (slot 0 at 0): the inverse of
    /// [`Self::due_by`].
    pub fn time_of(&self, k: f64) -> f64 {
        let ramp = self.ramp.as_secs_f64();
        let (r0, r1) = (self.start_rps, self.end_rps);
        if k < self.in_ramp() {
            let a = (r1 - r0) / ramp;
            if a.abs() < 1e-9 {
                k / r0
            } else {
                // k = r0 t + a t^2 / 2, the root that is >= 0.
                (-r0 + (r0 * r0 + 2.0 * a * k).max(0.0).sqrt()) / a
            }
        } else {
            ramp + (k - self.in_ramp()) / r1
        }
    }

    /// Requests due during the ramp.
    fn in_ramp(&self) -> f64 {
        (self.start_rps + self.end_rps) * self.ramp.as_secs_f64() / 2.0
    }
}

/// One target: where to connect and the bytes of its request.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    pub addr: SocketAddr,
    /// The encoded request, written as is for every request.
    pub request: Vec<u8>,
    /// HEAD requests get responses without a body.
    pub head: bool,
}

/// Status codes >= 400 that count as success (`--accept-status`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusSet {
    bits: [u64; 16],
}

impl StatusSet {
    pub fn contains(&self, code: u16) -> bool {
        let i = usize::from(code);
        i < 1024 && self.bits[i / 64] & (1 << (i % 64)) != 0
    }

    fn insert(&mut self, code: u16) {
        let i = usize::from(code);
        self.bits[i / 64] |= 1 << (i % 64);
    }

    /// Parses `404,500-599`.
    pub fn parse(list: &str) -> Result<Self, ConfigError> {
        let err = |what: &str| {
            ConfigError::new(
                "--accept-status",
                format!("{what:?} is not a status code or range; write e.g. 404,500-599"),
            )
        };
        let code = |s: &str| match s.trim().parse::<u16>() {
            Ok(c) if (100..=999).contains(&c) => Ok(c),
            _ => Err(err(s)),
        };
        let mut set = Self::default();
        for item in list.split(',') {
            let (lo, hi) = match item.split_once('-') {
                Some((a, b)) => (code(a)?, code(b)?),
                None => (code(item)?, code(item)?),
            };
            if lo > hi {
                return Err(err(item));
            }
            (lo..=hi).for_each(|c| set.insert(c));
        }
        Ok(set)
    }
}

/// The validated configuration the engine runs.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub targets: Vec<Target>,
    pub threads: usize,
    pub connections: usize,
    /// Stop after this long (measured from the end of warm-up).
    pub duration: Option<Duration>,
    /// Send exactly this many requests (after warm-up), then stop once they are answered.
    pub requests: Option<u64>,
    pub timeout: Duration,
    pub warmup: Duration,
    /// Thread i is pinned to `cpus[i % len]`.
    pub cpus: Option<Vec<usize>>,
    pub accept_status: StatusSet,
    pub max_error_rate: f64,
    /// Requests kept in flight per connection (1: no pipelining).
    pub pipeline: usize,
    /// Open loop at this rate; None: closed loop.
    pub rate: Option<Rate>,
}

impl LoadConfig {
    /// Validates and resolves user options.
    pub fn from_options(opts: &LoadOptions) -> Result<Self, ConfigError> {
        if opts.urls.is_empty() {
            return Err(ConfigError::new("URL", "no target given; e.g. http://127.0.0.1:8080/"));
        }
        let body = match &opts.body {
            None => Vec::new(),
            Some(b) => read_body(b)?,
        };
        let headers = opts
            .headers
            .iter()
            .map(|h| HeaderArg::parse(h).map_err(|e| ConfigError::new("--header", e.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        let targets = opts
            .urls
            .iter()
            .map(|u| resolve_target(u, &opts.method, &headers, &body))
            .collect::<Result<Vec<_>, _>>()?;

        let connections = opts.connections.unwrap_or(DEFAULT_CONNECTIONS);
        if connections == 0 {
            return Err(ConfigError::new("--connections", "must be at least 1"));
        }
        let threads = match opts.threads {
            Some(0) => return Err(ConfigError::new("--threads", "must be at least 1")),
            Some(t) if t > connections => {
                return Err(ConfigError::new(
                    "--connections",
                    format!(
                        "{connections} connections cannot be spread over {t} threads; \
                         give -c >= -t (each thread needs at least one connection)"
                    ),
                ))
            }
            Some(t) => t,
            None => online_cpus().min(connections),
        };
        if opts.duration == Some(Duration::ZERO) {
            return Err(ConfigError::new("--duration", "must be greater than zero, e.g. 10s"));
        }
        if opts.requests == Some(0) {
            return Err(ConfigError::new("--requests", "must be at least 1"));
        }
        if opts.timeout.is_zero() {
            return Err(ConfigError::new("--timeout", "must be greater than zero, e.g. 5s"));
        }
        if !(0.0..=1.0).contains(&opts.max_error_rate) {
            return Err(ConfigError::new(
                "--max-error-rate",
                "must be a fraction between 0 and 1, e.g. 0.01 for 1%",
            ));
        }
        let duration = match (opts.duration, opts.requests) {
            (None, None) => Some(DEFAULT_DURATION),
            (d, _) => d,
        };
        let cpus = match &opts.cpus {
            None => None,
            Some(list) => Some(validate_cpus(list)?),
        };
        let accept_status = match &opts.accept_status {
            None => StatusSet::default(),
            Some(list) => StatusSet::parse(list)?,
        };
        let rate = match (&opts.rate, opts.ramp) {
            (Some(r), ramp) => Some(Rate::parse(r, ramp)?),
            (None, Some(_)) => {
                return Err(ConfigError::new(
                    "--ramp",
                    "needs --rate A:B, e.g. --rate 1000:50000 --ramp 30s",
                ))
            }
            (None, None) => None,
        };
        if opts.pipeline == 0 || opts.pipeline > 1024 {
            return Err(ConfigError::new("--pipeline", "must be between 1 and 1024"));
        }
        Ok(Self {
            targets,
            threads,
            connections,
            duration,
            requests: opts.requests,
            timeout: opts.timeout,
            warmup: opts.warmup,
            cpus,
            accept_status,
            max_error_rate: opts.max_error_rate,
            pipeline: opts.pipeline,
            rate,
        })
    }

    /// Connections owned by thread `i`: the total spread as evenly as possible.
    pub fn connections_of(&self, i: usize) -> usize {
        share(self.connections as u64, self.threads, i) as usize
    }

    /// Request budget of thread `i` under `-n`; `None` when unbounded.
    pub fn requests_of(&self, i: usize) -> Option<u64> {
        self.requests.map(|n| share(n, self.threads, i))
    }

    /// Short name of the load model, as reported in `config.mode`.
    pub fn mode(&self) -> &'static str {
        if self.rate.is_some() {
            "rate"
        } else {
            "closed"
        }
    }

    /// Each thread's share of the open-loop rate (threads take equal shares).
    pub fn thread_rate(&self) -> Option<Rate> {
        self.rate.map(|r| {
            let n = self.threads as f64;
            Rate { start_rps: r.start_rps / n, end_rps: r.end_rps / n, ramp: r.ramp }
        })
    }
}

/// Part `i` of `total` split over `parts`, the remainder going to the first parts.
fn share(total: u64, parts: usize, i: usize) -> u64 {
    let parts = parts as u64;
    let i = i as u64;
    total / parts + u64::from(i < total % parts)
}

pub(crate) fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn read_body(arg: &str) -> Result<Vec<u8>, ConfigError> {
    match arg.strip_prefix('@') {
        None => Ok(arg.as_bytes().to_vec()),
        Some(path) => std::fs::read(path).map_err(|e| {
            ConfigError::new(
                "--body",
                format!("cannot read body file {path:?}: {e}; give an existing file after @"),
            )
        }),
    }
}

fn validate_cpus(list: &str) -> Result<Vec<usize>, ConfigError> {
    let cpus = parse_cpu_list(list).map_err(|e| ConfigError::new("--cpus", e))?;
    if cpus.is_empty() {
        return Err(ConfigError::new("--cpus", "empty CPU list; write e.g. 0-3,8"));
    }
    let allowed = allowed_cpus();
    if let Some(bad) = cpus.iter().find(|c| !allowed.contains(c)) {
        return Err(ConfigError::new(
            "--cpus",
            format!("CPU {bad} is not available to this process (allowed: {allowed:?})"),
        ));
    }
    Ok(cpus)
}

fn resolve_target(
    raw: &str,
    method: &str,
    headers: &[HeaderArg],
    body: &[u8],
) -> Result<Target, ConfigError> {
    let url = url::Url::parse(raw).map_err(|e| {
        ConfigError::new(
            "URL",
            format!("{raw:?} is not a valid URL ({e}); e.g. http://127.0.0.1:8080/"),
        )
    })?;
    match url.scheme() {
        "http" => {}
        "https" => {
            return Err(ConfigError::new(
                "URL",
                format!("{raw:?}: TLS is not supported yet; use an http:// URL"),
            ))
        }
        other => {
            return Err(ConfigError::new(
                "URL",
                format!("{raw:?}: unsupported scheme {other:?}; only http:// is supported"),
            ))
        }
    }
    let host =
        url.host_str().ok_or_else(|| ConfigError::new("URL", format!("{raw:?} has no host")))?;
    let port = url.port_or_known_default().unwrap_or(80);
    // Host names resolve once, before the run; the first address is used.
    let lookup = host.trim_start_matches('[').trim_end_matches(']');
    let addr = (lookup, port)
        .to_socket_addrs()
        .map_err(|e| ConfigError::new("URL", format!("cannot resolve host {host:?}: {e}")))?
        .next()
        .ok_or_else(|| ConfigError::new("URL", format!("host {host:?} has no address")))?;
    let authority = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    };
    let mut target = url.path().to_string();
    if let Some(q) = url.query() {
        target.push('?');
        target.push_str(q);
    }
    let spec = RequestSpec {
        method: method.to_string(),
        target,
        host: authority,
        headers: headers.to_vec(),
        body: body.to_vec(),
    };
    let request = spec.encode().map_err(|e| ConfigError::new("--method", e.to_string()))?;
    Ok(Target { url: url.to_string(), addr, request, head: spec.is_head() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(url: &str) -> LoadOptions {
        LoadOptions { urls: vec![url.into()], ..LoadOptions::default() }
    }

    #[test]
    fn shares_add_up() {
        for total in [0u64, 1, 7, 100, 20000] {
            for parts in 1..6 {
                let sum: u64 = (0..parts).map(|i| share(total, parts, i)).sum();
                assert_eq!(sum, total);
            }
        }
    }

    #[test]
    fn target_request_bytes() {
        let cfg = LoadConfig::from_options(&opts("http://127.0.0.1:9/x?y=1#frag")).unwrap();
        let t = &cfg.targets[0];
        assert_eq!(t.addr, "127.0.0.1:9".parse().unwrap());
        assert_eq!(t.request, b"GET /x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n");
        let cfg = LoadConfig::from_options(&opts("http://[::1]/")).unwrap();
        assert_eq!(cfg.targets[0].addr, "[::1]:80".parse().unwrap());
        assert!(cfg.targets[0].request.ends_with(b"Host: [::1]\r\n\r\n"));
    }

    #[test]
    fn errors_name_the_flag() {
        let flag = |o: LoadOptions| LoadConfig::from_options(&o).unwrap_err().flag;
        assert_eq!(flag(opts("ftp://x/")), "URL");
        assert_eq!(flag(opts("https://127.0.0.1/")), "URL");
        assert_eq!(flag(opts("not a url")), "URL");
        let o = |f: fn(&mut LoadOptions)| {
            let mut o = opts("http://127.0.0.1:1/");
            f(&mut o);
            o
        };
        assert_eq!(flag(o(|o| o.connections = Some(0))), "--connections");
        assert_eq!(
            flag(o(|o| {
                o.threads = Some(4);
                o.connections = Some(2)
            })),
            "--connections"
        );
        assert_eq!(flag(o(|o| o.duration = Some(Duration::ZERO))), "--duration");
        assert_eq!(flag(o(|o| o.body = Some("@/nonexistent/body".into()))), "--body");
        assert_eq!(flag(o(|o| o.headers = vec!["bad".into()])), "--header");
        assert_eq!(flag(o(|o| o.accept_status = Some("4o4".into()))), "--accept-status");
        assert_eq!(flag(o(|o| o.cpus = Some("9999".into()))), "--cpus");
        assert_eq!(flag(o(|o| o.max_error_rate = 2.0)), "--max-error-rate");
    }

    #[test]
    fn status_set_ranges() {
        let s = StatusSet::parse("404, 500-503").unwrap();
        assert!(s.contains(404) && s.contains(500) && s.contains(503));
        assert!(!s.contains(504) && !s.contains(200));
        assert!(StatusSet::parse("503-500").is_err());
    }
}
