//! Load configuration in two stages: [`LoadOptions`] holds what the user typed (the CLI fills it
//! from flags), [`LoadConfig`] is the validated, resolved form the engine runs. Every validation
//! error names the flag and the fix.
//!
//! Does not own flag parsing (the CLI does) nor any I/O beyond resolving host names and reading
//! the `--body @FILE`.

use std::path::PathBuf;
use std::time::Duration;

use qpslab_sys::cpus::{allowed_cpus, usable_list};
use qpslab_sys::root::Root;
use qpslab_sys::uring::{Engine, IoChoice};

use crate::options::GROUP_BY_NAME;
pub use crate::pool::{GroupBy, DEFAULT_GROUP_BY};
pub use crate::rate::Rate;
use crate::source::{self, PortBudget, SourceRange};
use crate::target as target_mod;
use crate::targets;
use crate::variants::Variants;
pub use crate::variants::{idempotent, Target};
pub use qpslab_sys::config_error::ConfigError;

pub use crate::options::{
    LoadOptions, PollMode, DEFAULT_CONNECTIONS, DEFAULT_DURATION, DEFAULT_TIMEOUT,
};

/// Whether the load threads do more requests per CPU-second on io_uring than on epoll here
/// (docs/performance.md: 1.27x connections per CPU-second with a connection per request,
/// 1.02x keep-alive): what `--io auto` goes by.
pub const URING_MEASURED_FASTER: bool = true;

/// The same for HTTP/3's loop (datagrams received and sent as ring requests).
pub const H3_URING_MEASURED_FASTER: bool = false;

/// `--poll auto`: the next send slot closer than this is waited for by polling, not sleeping.
/// About twice the cost of one sleep-and-wake measured on the reference VM
/// (docs/performance.md), so a sleep would end too late to be worth it.
pub const SPIN_WINDOW: Duration = Duration::from_micros(100);

/// Where `--poll auto` may poll: every load thread has a CPU of its own (no more threads than
/// CPUs it may use), and, when a target is on this host (loopback), the generator was confined
/// to part of the machine (taskset, cgroup or `--cpus`), leaving the rest to the server. A
/// generator sharing all CPUs with a local server would otherwise take CPU the server needs.
pub fn auto_polls(threads: usize, usable_cpus: usize, online_cpus: usize, local: bool) -> bool {
    threads <= usable_cpus && (!local || usable_cpus < online_cpus)
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
    /// Every request variant: its URL, method and weight for the report (its encodings are in
    /// `groups`).
    pub variants: Variants,
    /// The variants by address, each group's requests encoded in cycle order.
    groups: Vec<targets::Group>,
    /// The order of each address's requests (`--order`).
    pub order: targets::Order,
    /// The `--urls` pool, when there is one.
    pub pool: Option<Pool>,
    /// This process's place among the run's agents (index, count); (0, 1) alone.
    pub lane: (u32, u32),
    pub threads: usize,
    pub connections: usize,
    /// Stop after this long (measured from the end of warm-up).
    pub duration: Option<Duration>,
    /// Send exactly this many requests (after warm-up), then stop once they are answered.
    pub requests: Option<u64>,
    pub timeout: Duration,
    /// How long a connect may take before it counts as a connect error.
    pub connect_timeout: Duration,
    pub warmup: Duration,
    /// Responses to requests issued in the warm-up count in the rate, not in the latency.
    pub exclude_warmup_latency: bool,
    /// Thread i is pinned to `cpus[i % len]`.
    pub cpus: Option<Vec<usize>>,
    pub accept_status: StatusSet,
    pub max_error_rate: f64,
    /// `--threshold`: checks on the finished run.
    pub thresholds: Vec<crate::threshold::Threshold>,
    /// Requests kept in flight per connection (1: no pipelining; with HTTP/2, its streams).
    pub pipeline: usize,
    /// HTTP/2 (`--h2`): what the connections announce.
    pub h2: Option<crate::session::h2::H2Settings>,
    /// HTTP/3 (`--h3`): the QUIC connections' configuration.
    pub h3: Option<H3Config>,
    /// Open loop at this rate; None: closed loop.
    pub rate: Option<Rate>,
    pub conn_per_request: bool,
    pub rst_close: bool,
    pub source: Option<SourceRange>,
    /// `--unix-socket`: every connection goes to this path instead of its target's address.
    pub unix_socket: Option<std::path::PathBuf>,
    /// Its socket address.
    pub unix_peer: Option<socket2::SockAddr>,
    pub log: Option<PathBuf>,
    pub poll: PollMode,
    /// `--poll auto` may poll here ([`auto_polls`]).
    pub auto_poll: bool,
    /// Send again, once, idempotent requests whose reused connection closed before any byte of
    /// their response (the keep-alive close race, RFC 9112 9.3.1).
    pub retry_closed: bool,
    /// What the user should know about how the options were read (a URL taken as `http://`).
    pub notes: Vec<String>,
    /// The event loop the threads run.
    pub io: Engine,
    /// How long a closed loop's turn may hold out for a batch of completions (`--linger`;
    /// zero: none, and over HTTP/3 on a QUIC stack that does not hold out,
    /// `Stack::HOLDS_OUT`).
    pub linger: Duration,
    /// https targets: the client set-up every connection shares (None: no https target).
    pub tls: Option<crate::tls::TlsClient>,
    /// gRPC's `--check-response`: the message the first OK answer must be.
    pub grpc_check: Option<crate::grpc::ResponseCheck>,
    /// gRPC: the method called, `/SERVICE/METHOD`.
    pub grpc_method: Option<String>,
    /// gRPC: the request messages each call sends (`--stream-messages`, else 1).
    pub grpc_messages_per_call: u32,
    /// See [`LoadConfig::port_budgets`].
    port_budgets: Vec<PortBudget>,
}

/// The `--urls` pool as the run knows it: where it came from, how big, and how its report
/// groups its lines.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    pub file: String,
    /// Its lines (requests).
    pub size: usize,
    /// sha256 of the file's text, hex: the same digest, the same pool.
    pub digest: String,
    /// How its lines are grouped; None: one group.
    pub group_by: Option<GroupBy>,
    /// The report groups' names ([`crate::pool::groups`]).
    pub groups: Vec<String>,
    /// Each variant's group ([`crate::pool::NO_GROUP`] for a variant outside the pool).
    pub member_group: Vec<u32>,
    /// Encoded bytes per line (HTTP/1.1 request, HTTP/2 header block, a body of its own).
    pub bytes_per_variant: f64,
}

impl Pool {
    /// Each target's group as the run records latency by: none with one group (`--group-by
    /// none`: the run's own latency is that group's, recorded once, not twice).
    pub fn recorded_groups(&self) -> Vec<u32> {
        if self.group_by.is_none() {
            return Vec::new();
        }
        self.member_group.clone()
    }

    fn of(
        f: &crate::options::FileText,
        v: &Variants,
        o: &LoadOptions,
    ) -> Result<Pool, ConfigError> {
        use sha2::Digest as _;
        let group_by = GroupBy::from_options(o)?;
        let digest = sha2::Sha256::digest(f.text.as_bytes());
        let (groups, member_group) = crate::pool::groups(v, group_by);
        let size = (0..v.len()).filter(|&i| v.pool(i)).count();
        Ok(Pool {
            groups,
            member_group,
            file: f.name.clone(),
            size,
            bytes_per_variant: v.encoded_bytes() as f64 / size.max(1) as f64,
            digest: digest.iter().map(|b| format!("{b:02x}")).collect(),
            group_by,
        })
    }
}

/// The loop of an HTTP/3 run (others keep `io`): io_uring when asked for; `auto` goes by what
/// was measured for QUIC.
fn quic_io(opts: &LoadOptions, io: Engine) -> Engine {
    match (opts.h3, opts.io) {
        (false, _) => io,
        (true, IoChoice::Uring) => Engine::Uring,
        (true, _) if H3_URING_MEASURED_FASTER && io == Engine::Uring => Engine::Uring,
        (true, _) => Engine::Epoll,
    }
}

/// The run's thresholds, each on a figure the run has: QUIC's need --h3, gRPC statuses --grpc.
fn run_thresholds(opts: &LoadOptions) -> Result<Vec<crate::threshold::Threshold>, ConfigError> {
    let t = thresholds(&opts.thresholds)?;
    if let Some(q) = t.iter().find(|t| t.on_quic() && !opts.h3) {
        return Err(ConfigError::new(
            "--threshold",
            format!("{}: a QUIC figure, which only --h3 runs have: add --h3 or drop it", q.expr),
        ));
    }
    if let Some(g) = t.iter().find(|t| t.on_grpc() && opts.grpc.is_none()) {
        return Err(ConfigError::new(
            "--threshold",
            format!(
                "{}: a gRPC status, which only --grpc runs have: add --grpc SERVICE/METHOD or \
                 drop it",
                g.expr
            ),
        ));
    }
    Ok(t)
}

impl LoadConfig {
    /// Validates and resolves user options.
    pub fn from_options(opts: &LoadOptions) -> Result<Self, ConfigError> {
        // A gRPC run is the HTTP/2 run its calls are.
        let (opts, grpc) = crate::grpc::configure(opts)?;
        let opts = &opts;
        if opts.group_by.is_some() {
            GroupBy::from_options(opts)?;
        }
        let (mut variants, notes) = target_mod::build(opts)?;
        let mut notes = notes;
        let (io, tls) = io_and_tls(opts, &variants, &mut notes)?;
        let io = quic_io(opts, io);
        let connections = opts.connections.unwrap_or(DEFAULT_CONNECTIONS);
        let threads = threads(opts.threads, connections)?;
        check_limits(opts)?;
        check_connection_model(opts)?;
        let distinct = target_mod::distinct_addresses(&variants);
        if distinct > connections {
            return Err(ConfigError::new(
                "--connections",
                format!(
                    "{distinct} target addresses need at least {distinct} connections (each \
                     connection stays with one address); give -c {distinct} or more"
                ),
            ));
        }
        let rate = match &opts.schedule {
            Some(r) => Some(r.clone()),
            None => Rate::from_options(opts.rate.as_deref(), opts.ramp, opts.stages.as_ref())?,
        };
        let cpus = opts.cpus.as_deref().map(|l| usable_list(l, "--cpus")).transpose()?;
        let unix_peer = unix_peer(opts)?;
        let source = opts
            .source
            .as_deref()
            .map(|text| SourceRange::for_targets(text, &variants, threads))
            .transpose()?;
        let auto_poll = auto_polls(
            threads,
            cpus.as_ref().map_or_else(|| allowed_cpus().len(), |c| distinct_cpus(c)),
            qpslab_sys::system::online_cpus(),
            // A unix socket's server is on this host too.
            opts.unix_socket.is_some()
                || variants.endpoints().any(|(e, _)| e.addr.ip().is_loopback()),
        );
        let order = targets::Order::parse(opts.order.as_deref().unwrap_or("seq"))
            .map_err(|e| ConfigError::new("--order", e))?;
        let by_name = opts.group_by.as_deref() == Some(GROUP_BY_NAME);
        let pool_file = opts.urls_file.as_ref().or(opts.body_lines.as_ref());
        let pool_file = pool_file.or(opts.targets.as_ref().filter(|_| by_name));
        let pool = pool_file.map(|f| Pool::of(f, &variants, opts)).transpose()?;
        let h3 = if opts.h3 { Some(H3Config::new(opts, &variants, tls.as_ref())?) } else { None };
        let linger =
            if h3.as_ref().is_some_and(|h| !h.holds_out()) { Duration::ZERO } else { opts.linger };
        let pipeline = if opts.h2 || opts.h3 { opts.streams } else { opts.pipeline };
        variants.shrink();
        let groups = targets::groups(&variants, pipeline, order, unix_peer.as_ref());
        variants.drop_encodings();
        Ok(Self {
            duration: run_length(opts, rate.as_ref()),
            order,
            pool,
            lane: opts.lane.unwrap_or((0, 1)),
            variants,
            groups,
            threads,
            connections,
            requests: opts.requests,
            timeout: opts.timeout,
            connect_timeout: opts.connect_timeout.unwrap_or(opts.timeout),
            warmup: opts.warmup.unwrap_or(Duration::ZERO),
            exclude_warmup_latency: opts.exclude_warmup_latency,
            cpus,
            accept_status: opts
                .accept_status
                .as_deref()
                .map(StatusSet::parse)
                .transpose()?
                .unwrap_or_default(),
            max_error_rate: opts.max_error_rate,
            thresholds: run_thresholds(opts)?,
            pipeline,
            h3,
            h2: opts.h2.then(|| crate::session::h2::H2Settings {
                streams: opts.streams as u32,
                window: (1u32 << opts.window_bits) - 1,
                conn_window: (1u32 << opts.conn_window_bits) - 1,
                table: opts.header_table_size,
                grpc: grpc.as_ref().map(|g| g.settings),
            }),
            rate,
            conn_per_request: opts.conn_per_request,
            rst_close: opts.rst_close,
            source,
            unix_socket: opts.unix_socket.clone(),
            unix_peer,
            log: opts.log.clone(),
            poll: opts.poll,
            auto_poll,
            retry_closed: !opts.no_retry,
            notes,
            io,
            linger,
            tls,
            port_budgets: Vec::new(),
            grpc_method: grpc.as_ref().map(|g| g.method.clone()),
            grpc_check: grpc.and_then(|g| g.check),
            grpc_messages_per_call: opts.stream_messages.unwrap_or(1),
        }
        .with_port_budgets(&Root::live()))
    }

    fn with_port_budgets(mut self, root: &Root) -> Self {
        self.port_budgets = self.compute_port_budgets(root);
        // A port bound by hand leaves a bucket the kernel's own choice skips until its last
        // socket is gone: a minute of TIME_WAIT after the run, when the generator closed.
        if let Some((lo, hi)) = self.source.and_then(|r| r.ports) {
            let (elo, ehi) = source::ephemeral_range(root);
            if lo <= ehi && elo <= hi {
                self.notes.push(format!(
                    "--source ports {lo}-{hi} overlap the kernel's ephemeral range {elo}-{ehi}: \
                     while this run's closed connections are in TIME_WAIT (a minute), other \
                     programs' connects on this host skip those ports and may find none; ports \
                     below {elo} or above {ehi} avoid that"
                ));
            }
        }
        self
    }

    /// Connections owned by thread `i`: the total spread as evenly as possible.
    pub fn connections_of(&self, i: usize) -> usize {
        share(self.connections as u64, self.threads, i) as usize
    }

    /// Request budget of thread `i` under `-n`; `None` when unbounded.
    pub fn requests_of(&self, i: usize) -> Option<u64> {
        self.requests.map(|n| share(n, self.threads, i))
    }

    /// Keep-alive connections are opened before the run's clock starts (every mode but a
    /// connection per request, whose connects are part of what it measures).
    pub fn opens_first(&self) -> bool {
        !self.conn_per_request
    }

    /// Short name of the load model, as reported in `config.mode`.
    pub fn mode(&self) -> &'static str {
        match (self.conn_per_request, self.rate.is_some()) {
            (true, true) => "conn-per-request-rate",
            (true, false) => "conn-per-request",
            (false, true) => "rate",
            (false, false) => "closed",
        }
    }

    /// Each thread's share of the open-loop rate (threads take equal shares).
    pub fn thread_rate(&self) -> Option<Rate> {
        self.rate.as_ref().map(|r| r.share(self.threads as f64))
    }

    /// The variants by address, requests laid out for `pipeline`.
    pub fn groups(&self) -> &[targets::Group] {
        &self.groups
    }

    /// The group (index into `groups`, from [`Self::groups`]) of each connection, by global
    /// connection number.
    pub fn connection_groups(&self, groups: &[targets::Group]) -> Vec<usize> {
        let weights: Vec<u64> = groups.iter().map(|g| g.cycle.weight).collect();
        targets::deal_connections(&weights, self.connections)
    }

    /// Source tuples against what the run needs, for each destination; the first entry is the
    /// tightest. Read from the kernel once, when the options were validated.
    pub fn port_budgets(&self) -> &[PortBudget] {
        &self.port_budgets
    }

    fn compute_port_budgets(&self, root: &Root) -> Vec<PortBudget> {
        if self.unix_socket.is_some() || self.h3.is_some() {
            // No ports spent: a unix socket's connections are not 4-tuples, and QUIC's share
            // the thread's UDP sockets (no TIME_WAIT).
            return Vec::new();
        }
        let groups = self.groups();
        let dealt = self.connection_groups(groups);
        let ephemeral = source::ephemeral_ports(root);
        let mut out: Vec<PortBudget> = groups
            .iter()
            .enumerate()
            .map(|(g, group)| {
                let concurrent = dealt.iter().filter(|&&x| x == g).count() as u64;
                let tuples = match &self.source {
                    Some(r) => r.count.saturating_mul(r.ports_per_addr(ephemeral)),
                    None => ephemeral,
                };
                let hold_s = if !self.conn_per_request || self.rst_close {
                    0.0
                } else if source::tw_reuse_applies(root, &group.endpoint.addr) {
                    source::TW_REUSE_S
                } else {
                    source::TIME_WAIT_S
                };
                let share = concurrent as f64 / self.connections as f64;
                PortBudget {
                    destination: group.endpoint.addr,
                    tuples,
                    concurrent,
                    hold_s,
                    sustainable_cps: (hold_s > 0.0).then(|| tuples as f64 / hold_s),
                    planned_cps: match (&self.rate, self.conn_per_request) {
                        (Some(r), true) => Some(
                            r.segments
                                .iter()
                                .map(|s| s.start_rps.max(s.end_rps))
                                .fold(r.hold_rps, f64::max)
                                * share,
                        ),
                        _ => None,
                    },
                }
            })
            .collect();
        let slack = |b: &PortBudget| {
            let need = b.planned_cps.map_or(0.0, |p| p * b.hold_s).max(b.concurrent as f64);
            b.tuples as f64 - need
        };
        out.sort_by(|a, b| slack(a).total_cmp(&slack(b)));
        out
    }
}

/// The event loop and, with an https target, the TLS set-up (either loop drives TLS). Targets
/// sharing an address must agree on the scheme.
fn io_and_tls(
    opts: &LoadOptions,
    variants: &Variants,
    notes: &mut Vec<String>,
) -> Result<(Engine, Option<crate::tls::TlsClient>), ConfigError> {
    if let Err((a, b)) = targets::check_schemes(variants) {
        return Err(ConfigError::new(
            "URL",
            format!(
                "{a} and {b} are one address with different schemes or TLS names; their \
                 connections are shared, so give one of them"
            ),
        ));
    }
    if !variants.endpoints().any(|(e, _)| e.tls_name.is_some()) {
        if opts.tls.given() {
            notes.push("TLS options have no effect: no https:// target".into());
        }
        let (io, note) = opts.io.resolve(URING_MEASURED_FASTER)?;
        notes.extend(note);
        return Ok((io, None));
    }
    let tls = crate::tls::TlsClient::new(&opts.tls, opts.h2)?;
    let (io, note) = opts.io.resolve(URING_MEASURED_FASTER)?;
    notes.extend(note);
    Ok((io, Some(tls)))
}

/// HTTP/3's QUIC client: TLS 1.3 with ALPN h3 over the run's TLS options, the server's
/// unidirectional streams bounded, none of its bidirectional ones allowed.
#[derive(Debug, Clone)]
pub struct H3Config {
    pub streams: usize,
    pub client: quinn_proto::ClientConfig,
    /// `--quic own`: qpslab's own QUIC client, with this TLS configuration (ALPN h3).
    pub own: bool,
    pub tls: std::sync::Arc<rustls::ClientConfig>,
    /// `--0rtt`: a resumed connection's first requests go in its first flight.
    pub zero_rtt: bool,
}

impl H3Config {
    /// Whether the chosen QUIC client's loop holds out for a batch of answers (measured per
    /// stack: see `Stack::HOLDS_OUT`).
    pub fn holds_out(&self) -> bool {
        use qpslab_quic::stack::{Own, Quinn, Stack};
        if self.own {
            Own::HOLDS_OUT
        } else {
            Quinn::HOLDS_OUT
        }
    }

    fn new(
        opts: &LoadOptions,
        variants: &Variants,
        tls: Option<&crate::tls::TlsClient>,
    ) -> Result<H3Config, ConfigError> {
        check_h3(opts, variants)?;
        let Some(tls) = tls else {
            return Err(ConfigError::new("--h3", "HTTP/3 runs over TLS: give an https:// URL"));
        };
        let mut rustls = (*tls.config).clone();
        rustls.alpn_protocols = vec![b"h3".to_vec()];
        rustls.enable_early_data = opts.tls.zero_rtt;
        let own_tls = std::sync::Arc::new(rustls.clone());
        let quic =
            quinn_proto::crypto::rustls::QuicClientConfig::try_from(rustls).map_err(|e| {
                ConfigError::new("--ciphers", format!("{e}: QUIC needs TLS_AES_128_GCM_SHA256"))
            })?;
        let mut transport = quinn_proto::TransportConfig::default();
        transport.max_concurrent_bidi_streams(quinn_proto::VarInt::from_u32(0));
        let uni = quinn_proto::VarInt::from_u64(crate::session::h3::MAX_UNI).unwrap_or_default();
        transport.max_concurrent_uni_streams(uni);
        let mut client = quinn_proto::ClientConfig::new(std::sync::Arc::new(quic));
        client.transport_config(std::sync::Arc::new(transport));
        let own = opts.quic == crate::options::QuicImpl::Own;
        Ok(H3Config {
            streams: opts.streams,
            client,
            own,
            tls: own_tls,
            zero_rtt: opts.tls.zero_rtt,
        })
    }
}

/// What this HTTP/3 client does not do yet, refused by name rather than ignored.
fn check_h3(opts: &LoadOptions, variants: &Variants) -> Result<(), ConfigError> {
    if opts.conn_per_request && opts.streams > 1 {
        return Err(ConfigError::new(
            "--streams",
            "a connection per request carries one request: drop --streams or --conn-per-request",
        ));
    }
    if opts.rst_close {
        return Err(ConfigError::new(
            "--rst-close",
            "QUIC closes with its own CONNECTION_CLOSE, there is no TCP reset: drop it",
        ));
    }
    if opts.pipeline > 1 {
        return Err(ConfigError::new(
            "--pipeline",
            "HTTP/3 keeps requests in flight as streams: use --streams with --h3",
        ));
    }
    if opts.unix_socket.is_some() {
        return Err(ConfigError::new("--unix-socket", "HTTP/3 runs over UDP, not a unix socket"));
    }
    if opts.tls.version == Some(crate::tls::TlsVersion::V1_2) {
        return Err(ConfigError::new("--tls-version", "QUIC runs TLS 1.3 only: drop 1.2"));
    }
    if variants.endpoints().any(|(e, _)| e.tls_name.is_none()) {
        return Err(ConfigError::new("--h3", "HTTP/3 runs over TLS: give https:// URLs"));
    }
    Ok(())
}

/// Load threads: `-t`, or one per CPU this process may use, at most one per connection.
fn threads(given: Option<usize>, connections: usize) -> Result<usize, ConfigError> {
    if connections == 0 {
        return Err(ConfigError::new("--connections", "must be at least 1"));
    }
    match given {
        Some(0) => Err(ConfigError::new("--threads", "must be at least 1")),
        Some(t) if t > connections => Err(ConfigError::new(
            "--connections",
            format!(
                "{connections} connections cannot be spread over {t} threads; \
                 give -c >= -t (each thread needs at least one connection)"
            ),
        )),
        Some(t) => Ok(t),
        None => Ok(online_cpus().min(connections)),
    }
}

/// The run's length, request count, timeouts and error budget.
fn check_limits(opts: &LoadOptions) -> Result<(), ConfigError> {
    let positive = "must be greater than zero, e.g. 5s";
    if opts.duration == Some(Duration::ZERO) {
        return Err(ConfigError::new("--duration", "must be greater than zero, e.g. 10s"));
    }
    if opts.requests == Some(0) {
        return Err(ConfigError::new("--requests", "must be at least 1"));
    }
    if opts.timeout.is_zero() {
        return Err(ConfigError::new("--timeout", positive));
    }
    if opts.connect_timeout.is_some_and(|d| d.is_zero()) {
        return Err(ConfigError::new("--connect-timeout", positive));
    }
    if !(0.0..=1.0).contains(&opts.max_error_rate) {
        return Err(ConfigError::new(
            "--max-error-rate",
            "must be a fraction between 0 and 1, e.g. 0.01 for 1%",
        ));
    }
    Ok(())
}

/// Pipelining, a connection per request and reset-on-close against each other.
fn check_connection_model(opts: &LoadOptions) -> Result<(), ConfigError> {
    if opts.pipeline == 0 || opts.pipeline > 1024 {
        return Err(ConfigError::new("--pipeline", "must be between 1 and 1024"));
    }
    if opts.conn_per_request && opts.pipeline > 1 {
        return Err(ConfigError::new(
            "--pipeline",
            "cannot pipeline with --conn-per-request (one request per connection); drop one",
        ));
    }
    check_h2(opts)?;
    if opts.rst_close && !opts.conn_per_request {
        return Err(ConfigError::new(
            "--rst-close",
            "applies to --conn-per-request (keep-alive connections are not closed); add it",
        ));
    }
    Ok(())
}

/// The HTTP/2 flags: only with `--h2`, in range, and what HTTP/2 here does not do.
fn check_h2(opts: &LoadOptions) -> Result<(), ConfigError> {
    let d = LoadOptions::default();
    if opts.h3 && opts.h2 {
        return Err(ConfigError::new("--h3", "HTTP/3 and HTTP/2 are two protocols: drop --h2"));
    }
    if opts.quic != d.quic && !opts.h3 {
        return Err(ConfigError::new("--quic", "chooses HTTP/3's QUIC client: add --h3"));
    }
    if opts.tls.zero_rtt && !opts.h3 {
        return Err(ConfigError::new(
            "--0rtt",
            "early data is sent over HTTP/3 only (TLS over TCP sends none here): add --h3, or \
             use --tls-reuse for resumption without it",
        ));
    }
    if !opts.h2 {
        if opts.h3 && (opts.streams == 0 || opts.streams > 1024) {
            return Err(ConfigError::new("--streams", "must be between 1 and 1024"));
        }
        let given = [
            ("--streams", opts.streams != d.streams && !opts.h3),
            ("--window-bits", opts.window_bits != d.window_bits),
            ("--conn-window-bits", opts.conn_window_bits != d.conn_window_bits),
            ("--header-table-size", opts.header_table_size != d.header_table_size),
        ];
        if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
            return Err(ConfigError::new(flag, "applies to HTTP/2; add --h2"));
        }
        return Ok(());
    }
    if opts.streams == 0 || opts.streams > 1024 {
        return Err(ConfigError::new("--streams", "must be between 1 and 1024"));
    }
    for (flag, bits) in
        [("--window-bits", opts.window_bits), ("--conn-window-bits", opts.conn_window_bits)]
    {
        if !(16..=31).contains(&bits) {
            return Err(ConfigError::new(
                flag,
                "must be between 16 and 31 (a window of 2^N-1 bytes)",
            ));
        }
    }
    if opts.header_table_size > 1 << 20 {
        return Err(ConfigError::new("--header-table-size", "must be at most 1048576 bytes"));
    }
    if opts.pipeline > 1 {
        return Err(ConfigError::new(
            "--pipeline",
            "HTTP/2 keeps requests in flight as streams: use --streams with --h2",
        ));
    }
    Ok(())
}

/// `-d`, or 10 s when neither `-d` nor `-n` is given; a stage file sets the length unless one
/// of them does.
fn run_length(opts: &LoadOptions, rate: Option<&Rate>) -> Option<Duration> {
    match (rate, &opts.stages, opts.duration, opts.requests) {
        (Some(r), Some(_), None, None) => Some(r.staged()),
        (_, _, None, None) => Some(DEFAULT_DURATION),
        (_, _, d, _) => d,
    }
}

/// Part `i` of `total` split over `parts`, the remainder going to the first parts.
/// `--unix-socket`: its socket address (a path too long for one is refused), and no
/// `--source` with it.
fn unix_peer(opts: &LoadOptions) -> Result<Option<socket2::SockAddr>, ConfigError> {
    let Some(path) = opts.unix_socket.as_deref() else { return Ok(None) };
    if opts.source.is_some() {
        return Err(ConfigError::new(
            "--source",
            "binds TCP source addresses; a unix socket has none: drop it or --unix-socket",
        ));
    }
    socket2::SockAddr::unix(path)
        .map(Some)
        .map_err(|e| ConfigError::new("--unix-socket", format!("{}: {e}", path.display())))
}

fn share(total: u64, parts: usize, i: usize) -> u64 {
    let parts = parts as u64;
    let i = i as u64;
    total / parts + u64::from(i < total % parts)
}

/// CPUs this process may use (its affinity), the default thread count.
pub(crate) fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn distinct_cpus(cpus: &[usize]) -> usize {
    cpus.iter().collect::<std::collections::BTreeSet<_>>().len()
}

/// `--threshold`s, parsed; the first malformed one is the error.
pub fn thresholds(exprs: &[String]) -> Result<Vec<crate::threshold::Threshold>, ConfigError> {
    exprs
        .iter()
        .map(|e| {
            crate::threshold::Threshold::parse(e).map_err(|m| ConfigError::new("--threshold", m))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(url: &str) -> LoadOptions {
        LoadOptions { urls: vec![url.into()], ..LoadOptions::default() }
    }

    #[test]
    fn order_and_group_by_are_checked() {
        let o = |order: Option<&str>, group_by: Option<&str>, pool: bool| LoadOptions {
            urls: vec!["http://127.0.0.1:1/".into()],
            urls_file: pool.then(|| crate::options::FileText {
                name: "p.txt".into(),
                text: "/a/1\n/b/2\n".into(),
            }),
            order: order.map(String::from),
            group_by: group_by.map(String::from),
            ..LoadOptions::default()
        };
        let flag = |o: LoadOptions| LoadConfig::from_options(&o).unwrap_err().flag;
        assert_eq!(flag(o(Some("sorted"), None, false)), "--order");
        assert_eq!(flag(o(None, Some("1"), false)), "--group-by");
        assert_eq!(flag(o(None, Some("0"), true)), "--group-by");
        assert_eq!(flag(o(None, Some("x"), true)), "--group-by");
        assert_eq!(flag(o(None, Some("name"), true)), "--group-by");
        assert_eq!(flag(o(None, Some("name"), false)), "--group-by");
        let c = LoadConfig::from_options(&o(Some("random:9"), Some("none"), true)).unwrap();
        assert_eq!(c.order, targets::Order::Random { seed: 9 });
        let p = c.pool.unwrap();
        assert_eq!((p.size, p.group_by, p.digest.len()), (2, None, 64));
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
        assert_eq!(cfg.variants.addr(0), "127.0.0.1:9".parse().unwrap());
        assert_eq!(
            &cfg.groups()[0].h1.wire[..cfg.groups()[0].h1.offsets[1]],
            b"GET /x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n"
        );
        let cfg = LoadConfig::from_options(&opts("http://[::1]/")).unwrap();
        assert_eq!(cfg.variants.addr(0), "[::1]:80".parse().unwrap());
        assert!(cfg.groups()[0].h1.wire.ends_with(b"Host: [::1]\r\n\r\n"));
    }

    #[test]
    fn a_url_without_scheme_is_http_with_a_note() {
        let cfg = LoadConfig::from_options(&opts("127.0.0.1:9/x")).unwrap();
        assert_eq!(cfg.variants.url(0), "http://127.0.0.1:9/x");
        assert_eq!(
            cfg.notes,
            vec!["\"127.0.0.1:9/x\" has no scheme: taken as http://127.0.0.1:9/x"]
        );
        assert!(LoadConfig::from_options(&opts("http://127.0.0.1:9/")).unwrap().notes.is_empty());
    }

    #[test]
    fn errors_name_the_flag() {
        let flag = |o: LoadOptions| LoadConfig::from_options(&o).unwrap_err().flag;
        assert_eq!(flag(opts("ftp://x/")), "URL");
        assert_eq!(flag(opts("ftp://127.0.0.1/")), "URL");
        // https runs on either loop.
        let https_on_uring =
            LoadOptions { io: qpslab_sys::uring::IoChoice::Uring, ..opts("https://127.0.0.1/") };
        assert!(LoadConfig::from_options(&https_on_uring).is_ok());
        let mixed = LoadOptions {
            urls: vec!["http://127.0.0.1:9/".into(), "https://127.0.0.1:9/x".into()],
            ..LoadOptions::default()
        };
        assert_eq!(flag(mixed), "URL");
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

    #[test]
    fn auto_polls_only_where_it_takes_no_cpu_a_server_needs() {
        // taskset -c 1 on a 2-CPU machine, target on loopback: the server has CPU 0.
        assert!(auto_polls(1, 1, 2, true));
        // The whole machine, target on loopback: the server would share the polled CPUs.
        assert!(!auto_polls(2, 2, 2, true));
        assert!(!auto_polls(1, 2, 2, true));
        // The whole machine, target elsewhere: poll.
        assert!(auto_polls(2, 2, 2, false));
        // More threads than CPUs: pollers would take turns on a CPU.
        assert!(!auto_polls(3, 2, 2, false));
        assert!(!auto_polls(2, 1, 2, true));
    }
}
