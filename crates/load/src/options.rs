//! `qpslab load`'s options as one type: the command line fills it (its flags are this type's
//! clap attributes, flattened into `qpslab load` and `qpslab bench`), the agents receive it
//! (serde; self-contained: files the user named travel as their contents), and sweep files
//! name its fields as keys (serde, kebab-case). A field added here is a flag of both commands,
//! a key of sweep files and part of what agents receive, with nothing else to edit but the
//! engine that uses it. `LoadConfig` (config.rs) validates it.
//!
//! Defaults, one per meaning: [`DEFAULT_CONNECTIONS`] connections in total (spread over the
//! threads, or over the agents), one load thread per CPU the generator may use (at most one
//! per connection), [`DEFAULT_DURATION`] unless `-n` is given, no warm-up for `load` and
//! [`BENCH_WARMUP`] for `bench`.

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

pub use crate::file_text::FileText;
use crate::rate::Rate;
use crate::tls::TlsOptions;
use qpslab_sys::uring::IoChoice;

/// Connections in total when `-c` is not given: for `load`, `bench` and a load over agents
/// alike (the design brief's reference runs use 100).
pub const DEFAULT_CONNECTIONS: usize = 100;
/// Run length when neither `-d` nor `-n` is given (wrk's default).
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);
/// Per-request timeout when `--timeout` is not given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// `--linger`'s default. Holding out for up to 500us cut the generator's CPU per response
/// 1.2-5.2x against nginx over HTTP/2; where it lowered the server's rate (h2o at one
/// connection x 100 streams, nginx at 10 HTTP/1.1 connections) the rate trial turns it off
/// (docs/performance.md).
pub const DEFAULT_LINGER: Duration = Duration::from_micros(500);
/// `bench`'s warm-up when `--warmup` is not given (`load` has none).
pub const BENCH_WARMUP: Duration = Duration::from_secs(1);

/// Which QUIC carries `--h3` (`--quic`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum QuicImpl {
    /// quinn-proto's client: path MTU discovery, delayed acknowledgements.
    Quinn,
    /// qpslab's own QUIC client (the default): 1.35-1.44x quinn-proto's responses per CPU-second
    /// here; 1,200-byte datagrams.
    #[default]
    Own,
}

/// How gRPC messages are compressed (`--grpc-encoding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum GrpcEncoding {
    /// gzip, which every gRPC implementation has.
    Gzip,
}

/// How a load thread waits for its next event (`--poll`).
///
/// Sleeping in `epoll_wait` costs a wake-up per event: on the VM these figures come from that
/// is tens of microseconds (an interrupt to a halted CPU, a context switch), which lands in
/// the measured latency and, in open loop, in the send lag. Polling with a zero timeout
/// instead keeps the thread on its CPU: exact timing for a whole CPU per thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum PollMode {
    /// Open loop: poll while the next send slot is within `SPIN_WINDOW` (config.rs),
    /// sleep otherwise (so low rates cost little CPU), where polling takes no CPU a server
    /// needs (`auto_polls`, config.rs); closed loop: sleep.
    #[default]
    Auto,
    /// Never sleep while the run lasts (both loops).
    Spin,
    /// Always sleep; open loop sends requests due within 50 us in one wake-up.
    Sleep,
}

impl PollMode {
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Spin => "spin",
            Self::Sleep => "sleep",
        }
    }
}

/// Fields that stay on this machine: not sent to agents, not sweep keys (`--log` writes a
/// file here). The round-trip test holds every other flag to a key that travels.
pub const LOCAL_ONLY: &[&str] = &["log"];

/// Flags whose key is not their own name: `urls` is the command line's URLs; `--threshold`,
/// repeatable, is the list `thresholds`.
pub const KEY_OF: &[(&str, &str)] = &[("urls", "urls-file"), ("threshold", "thresholds")];

/// The load's options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default, rename_all = "kebab-case")]
pub struct LoadOptions {
    /// Target URLs (the commands take them as their positional arguments).
    #[arg(skip)]
    pub urls: Vec<String>,

    /// More targets from FILE, one request per line: METHOD URL [Name: value]...
    /// [body=TEXT|body=@FILE] [weight=N]
    #[arg(long, value_name = "FILE", value_parser = FileText::from_arg)]
    pub targets: Option<FileText>,

    /// A pool of requests from FILE, encoded once before the run: a URL, or a path on URL's
    /// host, per line (blank lines and # comments skipped), each with -X, -H and -d; with it,
    /// URL is only the base for the paths. Reported by --group-by, not per line
    #[arg(long = "urls", value_name = "FILE", value_parser = FileText::from_arg)]
    pub urls_file: Option<FileText>,

    /// A pool of bodies from FILE, one per line (blank lines skipped), each sent to the URL
    /// with -X and -H, as oha's -Z: encoded once before the run, like --urls
    #[arg(long = "body-lines", value_name = "FILE", value_parser = FileText::from_arg)]
    pub body_lines: Option<FileText>,

    /// The order of the requests: seq (as given: a thread's connections take the next in
    /// turn), or random[:SEED] (a seeded shuffle, the seed printed and stored so a run can be
    /// replayed request for request) [default: seq]
    #[arg(long, value_name = "ORDER")]
    pub order: Option<String>,

    /// Report the --urls or --body-lines pool by the first N segments of each path, or none
    /// (one row); name: a --targets file's lines by their name= [default: 1]
    #[arg(long, value_name = "N|none|name")]
    pub group_by: Option<String>,

    /// Load threads, one event loop each [default: one per CPU the generator may use, at most
    /// -c]
    #[arg(short, long, value_name = "N", value_parser = parse_count, allow_hyphen_values = true)]
    pub threads: Option<usize>,

    /// Total keep-alive connections, spread over the threads (and over the agents) [default:
    /// 100]
    #[arg(short, long, value_name = "N", value_parser = parse_count, allow_hyphen_values = true)]
    pub connections: Option<usize>,

    /// Run length after warm-up, e.g. 10s, 2m (-z as oha and hey name it) [default: 10s unless
    /// -n is given]
    #[arg(short, long, short_alias = 'z', value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true)]
    #[serde(with = "dur::opt")]
    pub duration: Option<Duration>,

    /// Send exactly N requests (after warm-up), then stop when they are answered
    #[arg(short = 'n', long, value_name = "N", value_parser = parse_count_u64, allow_hyphen_values = true)]
    pub requests: Option<u64>,

    /// Extra request header 'Name: value' (repeatable); replaces a default of the same name
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    #[serde(rename = "header")]
    pub headers: Vec<String>,

    /// Request method
    #[arg(short, long, value_name = "METHOD", default_value = "GET")]
    pub method: String,

    /// Send 'User-Agent: NAME' with every request, as curl -A does (a -H User-Agent wins)
    #[arg(short = 'A', long, value_name = "NAME")]
    pub user_agent: Option<String>,

    /// Request body: a literal string, or @FILE to read it from a file
    #[arg(long, value_name = "STRING|@FILE", value_parser = Body::from_arg)]
    pub body: Option<Body>,

    /// Open loop: total requests/s spread evenly (e.g. 5000), or A:B with --ramp; latency
    /// counts from each request's scheduled time, so a stall cannot hide (coordinated omission)
    #[arg(short = 'R', long, value_name = "N|A:B")]
    pub rate: Option<String>,

    /// With --rate A:B: the time to go linearly from A to B requests/s, then stay at B
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true)]
    #[serde(with = "dur::opt")]
    pub ramp: Option<Duration>,

    /// Open loop from a stage file: one 'DURATION RATE' or 'DURATION A:B' (linear) per line;
    /// the run lasts as long as the stages unless -d or -n is given
    #[arg(long, value_name = "FILE", value_parser = FileText::from_arg)]
    pub stages: Option<FileText>,

    /// Open loop: a schedule already built (a coordinator's share for one agent), instead of
    /// `rate`, `ramp` and `stages`.
    #[arg(skip)]
    pub schedule: Option<Rate>,

    /// With agents: this process's place among them (index, count), so that the numbers its
    /// requests' `{seq}` and `{rand}` IDs come from are its own.
    #[arg(skip)]
    pub lane: Option<(u32, u32)>,

    /// The seed of every `{rand:WIDTH}` that names none: decided once by whoever splits a run
    /// (see [`LoadOptions::with_seeds`]), else picked by the process.
    #[arg(skip)]
    pub rand_seed: Option<u64>,

    /// Requests kept in flight per connection (HTTP/1.1 pipelining); latency per request
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub pipeline: usize,

    /// Open a new connection for every request (sent with 'Connection: close') and close it
    /// after the response; reports connects/s and connect latency apart
    #[arg(long)]
    pub conn_per_request: bool,

    /// With --conn-per-request: close with a reset (SO_LINGER 0) so the generator keeps no
    /// TIME_WAIT; the server sees a reset instead of an orderly close
    #[arg(long)]
    pub rst_close: bool,

    /// HTTP/2: h2c with prior knowledge on http:// (as h2load and oha), h2 by ALPN on https://
    /// (refused when the server picks http/1.1)
    #[arg(long)]
    pub h2: bool,

    /// HTTP/3 over QUIC on https:// (ALPN h3; UDP to the URL's port)
    #[arg(long)]
    pub h3: bool,

    /// gRPC: calls to SERVICE/METHOD (e.g. helloworld.Greeter/SayHello) over HTTP/2 at the
    /// URL's server; the message from --data or --data-file (JSON, with --proto, --protoset or
    /// --reflect), --binary, --body or --body-lines, framed once; a call succeeds only with
    /// grpc-status 0 and well-formed messages
    #[arg(long, value_name = "SERVICE/METHOD")]
    pub grpc: Option<String>,

    /// With --grpc: the request message, serialized (protobuf bytes), from FILE
    #[arg(long, value_name = "FILE", value_parser = Body::from_file)]
    pub binary: Option<Body>,

    /// With --grpc: the request message as JSON (protobuf's JSON mapping), encoded once by the
    /// schema (--proto or --protoset), e.g. '{"name": "x"}'
    #[arg(long, value_name = "JSON")]
    pub data: Option<String>,

    /// With --grpc: a pool of request messages from FILE, one JSON message per line (blank
    /// lines skipped), each encoded once by the schema, as --body-lines
    #[arg(long = "data-file", value_name = "FILE", value_parser = FileText::from_arg)]
    pub data_file: Option<FileText>,

    /// With --grpc and a schema: the message (JSON) the first OK answer must be; the run fails
    /// (exit 1) when it is not, the answer shown as JSON
    #[arg(long = "check-response", value_name = "FILE", value_parser = FileText::from_arg)]
    pub check_response: Option<FileText>,

    /// With --grpc: a .proto file defining the service (repeatable), compiled at start (no
    /// protoc needed)
    #[arg(long, value_name = "FILE")]
    pub proto: Vec<String>,

    /// With --proto: a directory its imports are found under (repeatable) [default: each
    /// file's own directory]
    #[arg(long = "import-path", value_name = "DIR")]
    pub import_path: Vec<String>,

    /// With --grpc: the schema as a descriptor set (repeatable), as `protoc -o FILE
    /// --include_imports` or `buf build -o FILE` write it
    #[arg(long, value_name = "FILE")]
    pub protoset: Vec<String>,

    /// With --grpc: the schema from the server's reflection service (grpc.reflection.v1, else
    /// v1alpha), asked once before the run
    #[arg(long)]
    pub reflect: bool,

    /// The --proto and --protoset schema compiled (a descriptor set), as a coordinator ships
    /// it to agents on hosts without those files.
    #[arg(skip)]
    pub grpc_schema: Option<Body>,

    /// With --grpc and --data-file: each line's message encoded, with its line number (made
    /// from the file and the schema where the run is configured, never shipped).
    #[arg(skip)]
    #[serde(skip)]
    pub grpc_messages: Vec<(u32, Body)>,

    /// With --grpc: request messages each call sends (a client-streaming or bidirectional
    /// call): the message N times, or N consecutive messages of the pool; response messages
    /// are then counted, any number of them (one for a client stream), their rate and the
    /// gaps between them reported
    #[arg(long, value_name = "N")]
    pub stream_messages: Option<u32>,

    /// With --grpc: each call's deadline, sent as grpc-timeout (the server gives up after it)
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true)]
    #[serde(with = "dur::opt")]
    pub grpc_timeout: Option<Duration>,

    /// With --grpc: the largest response message taken; a larger one fails its call as
    /// RESOURCE_EXHAUSTED, as gRPC's clients do [default: 4194304]
    #[arg(long, value_name = "BYTES")]
    pub max_message_size: Option<u32>,

    /// With --grpc: request messages compressed (once, before the run; grpc-encoding) and
    /// compressed answers taken (grpc-accept-encoding); templated IDs cannot be written into
    /// compressed messages
    #[arg(long, value_enum, value_name = "gzip")]
    pub grpc_encoding: Option<GrpcEncoding>,

    /// With --h3: which QUIC client carries it
    #[arg(long, value_enum, value_name = "IMPL", default_value_t = QuicImpl::Own)]
    pub quic: QuicImpl,

    /// With --h2 or --h3: concurrent streams per connection (h2load's -m); -c stays the
    /// number of connections
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub streams: usize,

    /// With --h2: each stream's flow-control window, 2^N-1 bytes (h2load's -w) [16-31]
    #[arg(long, value_name = "N", default_value_t = 30)]
    pub window_bits: u8,

    /// With --h2: the connection's flow-control window, 2^N-1 bytes (h2load's -W) [16-31]
    #[arg(long, value_name = "N", default_value_t = 30)]
    pub conn_window_bits: u8,

    /// With --h2: the HPACK dynamic table the server may use for response headers
    /// (SETTINGS_HEADER_TABLE_SIZE)
    #[arg(long, value_name = "BYTES", default_value_t = 4096)]
    pub header_table_size: u32,

    /// Bind connections to source addresses FIRST-LAST, spread evenly, e.g.
    /// 127.0.0.2-127.0.0.254; add :LO-HI to bind ports from that range too
    #[arg(long, value_name = "RANGE")]
    pub source: Option<String>,

    /// Connect to this unix domain socket instead of the URL's host and port, as curl's
    /// --unix-socket does: the URL still gives the scheme (https: TLS over the socket), the
    /// Host header and the path
    #[arg(long, value_name = "PATH")]
    pub unix_socket: Option<std::path::PathBuf>,

    /// Write per-second HdrHistogram interval logs of corrected latency (.hlog) to FILE (a
    /// file of this machine: not sent to agents, not a sweep key)
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub log: Option<PathBuf>,

    /// The event loop: epoll, uring (io_uring: connects, sends and multishot receives as ring
    /// requests, one system call per loop turn), or auto (the faster one here where io_uring
    /// runs; on an agent, the agent's machine decides)
    #[arg(long, value_name = "auto|epoll|uring", default_value = "auto", value_parser = IoChoice::parse)]
    pub io: IoChoice,

    /// Closed loop: a turn holds out for a batch of responses for up to this long
    /// while the server is busy with the rest of the pipeline (fewer than half the requests
    /// in flight answered), then sends the next requests together: a wake-up, a read and a
    /// send per batch rather than per answer, when the server is the bound. The wait adapts:
    /// shorter when the server runs dry during it or the worker falls behind, none below
    /// 16us. A response can be seen up to this much later than it came, and its latency
    /// includes that. Short trials alternating with and without the wait keep it only where
    /// it costs the server no rate (within 3%). 0: wake on every completion. An open loop
    /// never waits
    #[arg(long, value_name = "DUR", default_value = "500us", value_parser = parse_duration_or_zero)]
    #[serde(with = "dur")]
    pub linger: Duration,

    /// https: verification, SNI, version, suites, session reuse.
    #[command(flatten)]
    #[serde(flatten)]
    pub tls: TlsOptions,

    /// How threads wait for events: auto (open loop polls instead of sleeping when the next
    /// send is due within 100 us, if each thread has a CPU of its own and, for a loopback
    /// target, the generator is confined to part of the machine; closed loop sleeps), spin
    /// (never sleeps: exact timing for a whole CPU per thread), sleep (always sleeps: least
    /// CPU). Polling time is not counted as busy
    #[arg(long, value_name = "MODE", value_enum, default_value_t = PollMode::Auto)]
    pub poll: PollMode,

    /// Per-request timeout; an unanswered request counts as a timeout when it expires
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = parse_duration, allow_hyphen_values = true)]
    #[serde(with = "dur")]
    pub timeout: Duration,

    /// How long a connect may take before it counts as a connect error [default: --timeout]
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true)]
    #[serde(with = "dur::opt")]
    pub connect_timeout: Option<Duration>,

    /// Count a request as failed when a reused keep-alive connection closes before any byte of
    /// its response, instead of sending it again once on a new connection (the default for
    /// GET, HEAD, PUT, DELETE, OPTIONS and TRACE, as browsers and curl do)
    #[arg(long)]
    pub no_retry: bool,

    /// Warm-up before measuring: what completes in it is not counted; every response that
    /// completes after it is, whenever its request was sent (as wrk and oha count a window)
    /// [default: none for load, 1s for bench]
    #[arg(long, value_name = "DUR", value_parser = parse_duration_or_zero, allow_hyphen_values = true)]
    #[serde(with = "dur::opt")]
    pub warmup: Option<Duration>,

    /// Keep responses to requests sent in the warm-up out of the latency figures (they still
    /// count in the rate and the status mix)
    #[arg(long)]
    pub exclude_warmup_latency: bool,

    /// Pin load thread i to the i-th CPU of this list (e.g. 2-3 or 1,3,5)
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,

    /// Highest tolerated share of failed requests and bad statuses before exit code 1
    #[arg(long, value_name = "R", default_value_t = 0.0)]
    pub max_error_rate: f64,

    /// Status codes >= 400 that count as success, e.g. 404,500-599
    #[arg(long, value_name = "LIST")]
    pub accept_status: Option<String>,

    /// A check on the finished run, repeatable: p99<2ms, p99.9<=10ms, mean<1ms, max<1s,
    /// rps>50000, errors<0.1% (or a count: errors<10), gen-busy<0.9. A failed one exits 1; one
    /// on errors replaces --max-error-rate
    #[arg(long = "threshold", value_name = "EXPR")]
    pub thresholds: Vec<String>,
}

impl LoadOptions {
    /// These options with the run's seeds decided (`--order random` with the seed it picks,
    /// the seed of an unseeded `{rand:WIDTH}`), so that every process of a run (its agents,
    /// the coordinator's report) uses the same and prints the one that replays it.
    pub fn with_seeds(&self) -> LoadOptions {
        let order = match self.order.as_deref() {
            Some("random") => Some(format!("random:{}", crate::seed::fresh_seed())),
            other => other.map(String::from),
        };
        let rand_seed = Some(self.rand_seed.unwrap_or_else(crate::seed::fresh_seed));
        LoadOptions { order, rand_seed, ..self.clone() }
    }
}

/// `--group-by name`: a targets file's lines by their `name=`.
pub const GROUP_BY_NAME: &str = "name";

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            targets: None,
            urls_file: None,
            body_lines: None,
            order: None,
            group_by: None,
            threads: None,
            connections: None,
            duration: None,
            requests: None,
            headers: Vec::new(),
            method: "GET".into(),
            user_agent: None,
            body: None,
            rate: None,
            ramp: None,
            stages: None,
            schedule: None,
            lane: None,
            rand_seed: None,
            pipeline: 1,
            conn_per_request: false,
            rst_close: false,
            h2: false,
            h3: false,
            grpc: None,
            binary: None,
            data: None,
            data_file: None,
            check_response: None,
            proto: Vec::new(),
            import_path: Vec::new(),
            protoset: Vec::new(),
            reflect: false,
            grpc_schema: None,
            grpc_messages: Vec::new(),
            stream_messages: None,
            grpc_timeout: None,
            max_message_size: None,
            grpc_encoding: None,
            quic: QuicImpl::Own,
            streams: 1,
            window_bits: 30,
            conn_window_bits: 30,
            header_table_size: 4096,
            source: None,
            unix_socket: None,
            log: None,
            io: IoChoice::Auto,
            linger: DEFAULT_LINGER,
            tls: TlsOptions::default(),
            poll: PollMode::Auto,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: None,
            no_retry: false,
            warmup: None,
            exclude_warmup_latency: false,
            cpus: None,
            max_error_rate: 0.0,
            accept_status: None,
            thresholds: Vec::new(),
        }
    }
}

impl LoadOptions {
    /// The connections asked for, or the default.
    pub fn connections_or_default(&self) -> usize {
        self.connections.unwrap_or(DEFAULT_CONNECTIONS)
    }
}

/// A request body: the bytes given literally, or read from `@FILE` when the options are made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Body(pub Vec<u8>);

impl Body {
    /// The bytes of the file at `path`.
    pub fn from_file(path: &str) -> Result<Body, String> {
        std::fs::read(path)
            .map(Body)
            .map_err(|e| format!("cannot read {path:?}: {e}; give an existing file"))
    }

    /// A literal, or `@FILE`.
    pub fn from_arg(arg: &str) -> Result<Body, String> {
        match arg.strip_prefix('@') {
            Some(path) => std::fs::read(path).map(Body).map_err(|e| {
                format!("cannot read body file {path:?}: {e}; give an existing file after @")
            }),
            None => Ok(Body(arg.as_bytes().to_vec())),
        }
    }
}

/// `base64:` marks bytes that are not plain text on the wire.
const BASE64: &str = "base64:";

impl TryFrom<String> for Body {
    type Error = String;
    fn try_from(s: String) -> Result<Body, String> {
        match s.strip_prefix(BASE64) {
            Some(b64) => base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map(Body)
                .map_err(|e| format!("body: bad base64: {e}")),
            None => Body::from_arg(&s),
        }
    }
}

impl From<Body> for String {
    fn from(b: Body) -> String {
        match String::from_utf8(b.0) {
            Ok(s) if !s.starts_with('@') && !s.starts_with(BASE64) => s,
            Ok(s) => format!("{BASE64}{}", base64::engine::general_purpose::STANDARD.encode(s)),
            Err(e) => {
                format!(
                    "{BASE64}{}",
                    base64::engine::general_purpose::STANDARD.encode(e.as_bytes())
                )
            }
        }
    }
}

/// A count of at least 1 (threads, connections).
pub fn parse_count(s: &str) -> Result<usize, String> {
    parse_count_u64(s).and_then(|n| usize::try_from(n).map_err(|_| format!("{s:?} is too large")))
}

/// A count of at least 1 (requests).
pub fn parse_count_u64(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) if s.trim().starts_with('-') => Err("must be a positive whole number".into()),
        Err(_) => Err(format!("{s:?} is not a whole number, e.g. 100")),
    }
}

/// `10s`, `2m`, `1h30m`, `500ms`; a bare number means seconds. Zero is rejected.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration_or_zero(s)?;
    if d.is_zero() {
        return Err("must be greater than zero, e.g. 10s".into());
    }
    Ok(d)
}

/// [`parse_duration`], zero allowed (a warm-up of `0s`).
pub fn parse_duration_or_zero(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.starts_with('-') {
        return Err("must be a positive duration, e.g. 10s".into());
    }
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(Duration::from_secs_f64(secs));
        }
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration ({e}); write e.g. 10s, 2m or 500ms"))
}

/// Durations as people write them (`"5s"`, `"1m 30s"`; a bare number is seconds), both ways.
pub mod dur {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Given {
        Text(String),
        Seconds(f64),
    }

    fn of(g: Given) -> Result<Duration, String> {
        match g {
            Given::Text(t) => super::parse_duration_or_zero(&t),
            Given::Seconds(s) if s.is_finite() && s >= 0.0 => Ok(Duration::from_secs_f64(s)),
            Given::Seconds(s) => Err(format!("{s} is not a duration; write e.g. \"10s\"")),
        }
    }

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        of(Given::deserialize(d)?).map_err(serde::de::Error::custom)
    }

    /// The same for an optional duration.
    pub mod opt {
        use std::time::Duration;

        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
            match d {
                Some(d) => super::serialize(d, s),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            Option::<super::Given>::deserialize(d)?
                .map(super::of)
                .transpose()
                .map_err(serde::de::Error::custom)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("ten").is_err());
        assert_eq!(parse_duration_or_zero("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("-1"), Err("must be a positive duration, e.g. 10s".into()));
        assert_eq!(parse_duration("-5s"), Err("must be a positive duration, e.g. 10s".into()));
    }

    #[test]
    fn counts() {
        assert_eq!(parse_count("100"), Ok(100));
        assert_eq!(parse_count("0"), Err("must be at least 1".into()));
        assert_eq!(parse_count("-5"), Err("must be a positive whole number".into()));
        assert!(parse_count("many").is_err());
    }

    /// A sample value for a flag, by its value name: a flag whose value name is new here
    /// needs one (the test says which).
    fn sample(value_name: &str, dir: &std::path::Path) -> Option<String> {
        let file = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p.display().to_string()
        };
        Some(match value_name {
            "N" => "7".into(),
            "DUR" => "3s".into(),
            "R" => "0.5".into(),
            "LIST" => "1".into(),
            "RANGE" => "127.0.0.2-127.0.0.3".into(),
            "auto|epoll|uring" => "epoll".into(),
            "MODE" => "spin".into(),
            "IMPL" => "quinn".into(),
            "gzip" => "gzip".into(),
            "1.2|1.3" => "1.3".into(),
            "METHOD" => "PUT".into(),
            "HEADER" => "X-T: 1".into(),
            "STRING|@FILE" => format!("@{}", file("body", "\u{1}binary\u{0}")),
            "N|A:B" => "500".into(),
            "NAME" => "example.com".into(),
            "BYTES" => "8192".into(),
            "FILE" => file("f", "GET http://127.0.0.1:1/\n"),
            "ORDER" => "random:7".into(),
            "N|none|name" => "none".into(),
            "PATH" => "/tmp/qpslab-test.sock".into(),
            "EXPR" => "p99<2ms".into(),
            "SERVICE/METHOD" => "helloworld.Greeter/SayHello".into(),
            "JSON" => "{\"name\": \"x\"}".into(),
            "DIR" => dir.display().to_string(),
            _ => return None,
        })
    }

    /// A run split over agents decides its seeds once: `--order random` gets its seed, an
    /// unseeded `{rand}` its own, and deciding again keeps them.
    #[test]
    fn seeds_are_decided_once_for_every_process_of_a_run() {
        let o = LoadOptions { order: Some("random".into()), ..LoadOptions::default() };
        let s = o.with_seeds();
        let seed = s.order.as_deref().and_then(|x| x.strip_prefix("random:")).unwrap();
        assert!(seed.parse::<u64>().is_ok(), "{seed}");
        assert!(s.rand_seed.is_some());
        assert_eq!(s.with_seeds(), s, "decided once");
        let seq = LoadOptions { order: Some("seq".into()), ..LoadOptions::default() };
        assert_eq!(seq.with_seeds().order.as_deref(), Some("seq"));
    }

    /// Every flag of the load's options is a key that reaches the agents and the sweep files:
    /// set every flag (each to something not its default), and each must change the serialized
    /// options, which must then come back whole from JSON (the agent wire) and TOML (sweep
    /// files). A flag without a key, or whose value does not survive, fails here.
    #[test]
    fn every_flag_is_a_key_that_survives_the_wire() {
        use clap::{Args, FromArgMatches};
        let dir = tempfile::tempdir().unwrap();
        let cmd = LoadOptions::augment_args(clap::Command::new("t").no_binary_name(true));
        let mut argv: Vec<String> = Vec::new();
        let mut flags = Vec::new();
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            flags.push(long.to_string());
            argv.push(format!("--{long}"));
            if arg.get_action().takes_values() {
                let name = arg.get_value_names().and_then(|v| v.first()).map(|s| s.to_string());
                let name = name.unwrap_or_default();
                let v = sample(&name, dir.path())
                    .unwrap_or_else(|| panic!("--{long}: give a sample for value name {name:?}"));
                argv.push(v);
            }
        }
        let m = cmd.try_get_matches_from(&argv).unwrap();
        let given = LoadOptions::from_arg_matches(&m).unwrap();
        let json = serde_json::to_value(&given).unwrap();
        let plain = serde_json::to_value(LoadOptions::default()).unwrap();
        for long in &flags {
            if LOCAL_ONLY.contains(&long.as_str()) {
                continue;
            }
            let key = KEY_OF.iter().find(|(f, _)| f == long).map_or(long.as_str(), |(_, k)| k);
            assert!(json.get(key).is_some(), "--{long} has no key {key}");
            assert_ne!(json[key], plain[key], "--{long} did not change its key");
        }
        let back: LoadOptions = serde_json::from_value(json).unwrap();
        assert_eq!(back, LoadOptions { log: None, ..given.clone() }, "the JSON round trip");
        let toml_text = toml::to_string(&given).unwrap();
        let back: LoadOptions = toml::from_str(&toml_text).unwrap();
        assert_eq!(back, LoadOptions { log: None, ..given }, "the TOML round trip");
    }
}
