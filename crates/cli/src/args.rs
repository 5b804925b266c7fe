//! Flag definitions. Only parsing lives here; values go into the libraries' option structs.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use qpslab_load::options::{parse_count, parse_duration, parse_duration_or_zero};

#[derive(Debug, Parser)]
#[command(
    name = "qpslab",
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("QPSLAB_GIT_COMMIT"), ")"),
    propagate_version = true,
    about = "Measure how many HTTP requests per second a Linux host can serve, and why not more"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// HTTP/1.1 and HTTP/2 load generator, plain or TLS, over TCP or a unix socket: closed or
    /// open loop, keep-alive or a connection per request, URLs, pools and IDs; exact accounting
    Load(Box<LoadArgs>),
    /// Benchmark target: a fast HTTP/1.1 and HTTP/2 server, plain or TLS (plaintext `ok`,
    /// httpterm-style controls)
    Serve(ServeArgs),
    /// What the host is: CPUs, SMT, NUMA, NICs, queues, IRQs, RPS/XPS, sysctls (read-only)
    Host(HostArgs),
    /// Sample kernel counters while load runs (for a duration or while a command runs) and name
    /// the bottleneck, with evidence and the remedy
    Doctor(DoctorArgs),
    /// The main job: start a target on loopback (or take URL), load it from the other CPUs while
    /// the doctor samples, and print throughput, latency, each side's CPU and the findings
    Bench(Box<BenchCmdArgs>),
    /// Plan, apply and exactly revert IRQ affinity, RPS/RFS/XPS, sysctl and clocksource
    /// changes; every write is journaled first
    Tune(TuneArgs),
    /// Merge latency histograms exactly: interval logs (load --log) and histogram files
    /// (--hdr-out) from several runs or machines; prints the combined summary
    Merge(MergeArgs),
    /// Run a matrix of bench variants from a TOML file, each repeated, interleaved, with host
    /// settings applied and reverted around each run; every run is stored
    Sweep(SweepArgs),
    /// The tuning walk as one command: measure, take the doctor's headline as a change, measure
    /// it against the current state interleaved, keep it only when it is faster beyond noise,
    /// repeat; prints the steps as a table
    Climb(Box<ClimbArgs>),
    /// List, show, export and remove stored runs and sweeps
    Runs(RunsArgs),
    /// Compare two sets of stored runs: throughput ratio with its spread over repeats and a
    /// noise verdict, latency side by side, server CPU, findings that came or went
    Compare(CompareArgs),
    /// Write one self-contained HTML report (table, charts, per-CPU heatmaps, findings) of a
    /// sweep or of runs
    Report(ReportArgs),
    /// A load agent: runs the loads a coordinator (qpslab load --agents) sends on its stdin and
    /// answers on its stdout; exits when its input closes. Started for you over ssh
    Agent(AgentArgs),
}

#[derive(Debug, Args)]
pub struct AgentArgs {}

/// `--profile`: a profile of every CPU beside the doctor's counters.
#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// Profile every CPU during the window (perf_event_open, cpu-clock, kernel and user call
    /// chains): where each CPU's time went, by category and symbol, as evidence for the
    /// findings. Needs root or CAP_PERFMON; without them the run goes on and says why
    #[arg(long)]
    pub profile: bool,

    /// With --profile: samples per second per CPU
    #[arg(long, value_name = "HZ", default_value_t = 499, requires = "profile", value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub profile_freq: u64,

    /// With --profile: write the folded stacks to FILE ('comm;frame;...;frame count' lines, as
    /// flame graph tools read them)
    #[arg(long, value_name = "FILE", requires = "profile")]
    pub profile_out: Option<std::path::PathBuf>,
}

impl ProfileArgs {
    /// The sampler's options, when asked for.
    pub fn options(&self) -> Option<qpslab_profile::ProfileOptions> {
        self.profile.then(|| qpslab_profile::ProfileOptions {
            frequency_hz: self.profile_freq,
            folded: self.profile_out.is_some(),
            ..qpslab_profile::ProfileOptions::default()
        })
    }
}

/// Where runs are kept.
#[derive(Debug, Args)]
pub struct StoreArg {
    /// The runs store [default: $QPSLAB_STORE, else $XDG_DATA_HOME/qpslab/runs.sqlite, else
    /// ~/.local/share/qpslab/runs.sqlite]
    #[arg(long, value_name = "FILE")]
    pub store: Option<std::path::PathBuf>,
}

/// Watching a run as it happens: the live page and the Prometheus export.
#[derive(Debug, Args, Clone, Default)]
pub struct LiveArgs {
    /// Serve a live page of the run (and /metrics for Prometheus) at ADDR, updated every
    /// second; the URL is printed at start [default ADDR: 127.0.0.1:5665, loopback only]
    #[arg(long, value_name = "ADDR", num_args = 0..=1, require_equals = true, default_missing_value = qpslab_live::DEFAULT_ADDR)]
    pub live: Option<String>,

    /// With --live: keep serving the page and /metrics this long after the run ends (for a
    /// last look or a last scrape)
    #[arg(long, value_name = "DUR", value_parser = parse_duration, requires = "live")]
    pub live_linger: Option<Duration>,

    /// Push the run's metrics to this Prometheus remote-write endpoint every second and once
    /// at the end, e.g. http://127.0.0.1:9090/api/v1/write
    #[arg(long, value_name = "URL")]
    pub prometheus_rw: Option<String>,

    /// With --prometheus-rw: also push the latency as a native histogram
    #[arg(long, requires = "prometheus_rw")]
    pub prometheus_native: bool,
}

impl LiveArgs {
    pub fn options(&self) -> qpslab_live::LiveOptions {
        qpslab_live::LiveOptions {
            addr: self.live.clone(),
            linger: self.live_linger.unwrap_or_default(),
            remote_write: self.prometheus_rw.clone(),
            native: self.prometheus_native,
        }
    }
}

/// What a CI job reads of the run.
#[derive(Debug, Args, Clone, Default)]
pub struct CiArgs {
    /// Write the run's checks to FILE as JUnit XML: a test case for the run itself and one
    /// per --threshold (in a sweep, a test suite per run)
    #[arg(long, value_name = "FILE")]
    pub junit: Option<std::path::PathBuf>,

    /// Write a Markdown summary of the run and its checks to FILE (it is also appended to
    /// $GITHUB_STEP_SUMMARY when that is set, as in a GitHub Actions job)
    #[arg(long, value_name = "FILE")]
    pub summary_md: Option<std::path::PathBuf>,
}

/// What the doctor may find that fails a run (bench, sweep).
#[derive(Debug, Args)]
pub struct FailOnArgs {
    /// Fail a run's checks (exit 1) on what the doctor finds: a severity (`warning`: a finding
    /// at warning or worse; `critical`; `info`), a mark (`disturbed`: other work or a target
    /// still busy held the run back; `behind-schedule`: an open loop that did not send what was
    /// asked) or a finding's name (`qpslab doctor --rules` lists them); comma-separated, any
    /// one fails the run
    #[arg(long, value_name = "WHAT[,WHAT]", value_delimiter = ',')]
    pub fail_on: Vec<qpslab_lab::fail_on::FailOn>,

    /// The same as --fail-on warning: fail a run the doctor does not trust or that met a
    /// bottleneck CI should stop on
    #[arg(long)]
    pub fail_on_warning: bool,
}

impl FailOnArgs {
    /// The flags as one list.
    pub fn list(&self) -> Vec<qpslab_lab::fail_on::FailOn> {
        let mut v = self.fail_on.clone();
        if self.fail_on_warning {
            v.push(qpslab_lab::fail_on::FailOn::AtLeast(qpslab_doctor::Severity::Warning));
        }
        v
    }
}

#[derive(Debug, Args)]
pub struct SweepArgs {
    /// The sweep file (TOML: name, repeat, [base], [axes], [[variant]]; see examples/sweeps/)
    #[arg(value_name = "FILE")]
    pub file: std::path::PathBuf,

    /// Runs per variant, instead of the file's `repeat` (default 3)
    #[arg(short, long, value_name = "N", value_parser = parse_count, allow_hyphen_values = true)]
    pub repeat: Option<usize>,

    /// Let host variants (tune) change this host: each change is journaled and reverted after
    /// its run; needs root, as `qpslab tune apply --yes`
    #[arg(short, long)]
    pub yes: bool,

    /// Tune journal for host variants [default: /var/lib/qpslab/journal.json, or the network
    /// namespace's own]
    #[arg(long, value_name = "FILE")]
    pub journal: Option<std::path::PathBuf>,

    /// Store every run with this label (for `compare label:NAME`)
    #[arg(long, value_name = "NAME")]
    pub label: Option<String>,

    /// Only check the file and print the variants it gives (runs nothing)
    #[arg(long)]
    pub dry_run: bool,

    #[command(flatten)]
    pub live: LiveArgs,

    #[command(flatten)]
    pub store: StoreArg,

    #[command(flatten)]
    pub fail_on: FailOnArgs,

    #[command(flatten)]
    pub ci: CiArgs,

    /// Print the sweep's table as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ClimbArgs {
    /// Longest the climb may take: no step starts that could not end within it
    #[arg(long, value_name = "DUR", default_value = "10m", value_parser = parse_duration, allow_hyphen_values = true)]
    pub budget: Duration,

    /// The smallest gain a change must bring to be kept, in percent of the rate
    #[arg(long, value_name = "PCT", default_value = "3%", value_parser = parse_percent)]
    pub min_gain: f64,

    /// Runs of each state per step, interleaved with the candidate's (3 or more)
    #[arg(long, value_name = "N", default_value = "3", value_parser = parse_count, allow_hyphen_values = true)]
    pub repeats: usize,

    /// At most N steps measured (kept or not), e.g. 1 to try only the headline's change
    #[arg(long, value_name = "N", value_parser = parse_count, allow_hyphen_values = true)]
    pub steps: Option<usize>,

    /// Run the starting state once and print the first step's finding and change; nothing
    /// else runs and nothing is stored
    #[arg(long)]
    pub dry_run: bool,

    /// Let the climb edit the target's own server (nginx: its main configuration file, checked
    /// by nginx -t and reloaded); the original is kept beside it and restored byte for byte at
    /// the end
    #[arg(long)]
    pub apply_server: bool,

    /// Any server, with --apply-server: TEMPLATE is its configuration with {{workers}} where
    /// its worker count goes, {{threads}} where its threads per worker go (gunicorn, puma) and
    /// {{nofile}} where its descriptor limit goes (a start script's `ulimit -n`): any of them;
    /// each state's is written to FILE (the original kept beside it and restored at the end)
    /// and put in force by --server-reload; -w, --server-threads and --server-nofile give the
    /// values to start from [default: 1 and 1; the limit has none]
    #[arg(long, value_name = "TEMPLATE:FILE", requires_all = ["server_reload", "apply_server"])]
    pub server_config: Option<String>,

    /// With --apply-server: let the climb remove nginx's rate limits (`limit_req`) for its
    /// runs when the doctor finds one sets the rate (the benchmark then measures the server,
    /// not the limit; the file is restored at the end)
    #[arg(long, requires = "apply_server")]
    pub allow_limits: bool,

    /// With --server-config: the command (run by sh) that makes the server read FILE again,
    /// e.g. `kill -HUP $(cat /run/app.pid)`; it must exit 0
    #[arg(long, value_name = "CMD", requires = "server_config")]
    pub server_reload: Option<String>,

    /// With --server-config: the threads per worker to start from, where the template has
    /// {{threads}}
    #[arg(long, value_name = "N", default_value = "1", value_parser = parse_count, allow_hyphen_values = true, requires = "server_config")]
    pub server_threads: usize,

    /// With --server-config: the server's descriptor limit now, where the template has
    /// {{nofile}} (what `ulimit -n` says in its environment)
    #[arg(long, value_name = "N", value_parser = parse_count, requires = "server_config")]
    pub server_nofile: Option<usize>,

    /// Let the climb change the server host's settings where a finding names one (a sysctl,
    /// an interface's RPS/RFS/XPS): this host's, or with --server HOST that host's through its
    /// agent; journaled before each write as tune apply does, in force only during the runs
    /// that measure it and reverted after each (`qpslab tune revert` there undoes an
    /// interrupted one)
    #[arg(long)]
    pub apply_host: bool,

    /// With --apply-host: leave the host settings the climb kept in force at the end (the
    /// journal stays for `qpslab tune revert`; this host only: with --server, apply the
    /// --state-file there)
    #[arg(long, requires = "apply_host")]
    pub keep: bool,

    /// With --apply-host: the tune journal, on the host changed [default:
    /// /var/lib/qpslab/journal.json, or the network namespace's own]
    #[arg(long, value_name = "FILE", requires = "apply_host")]
    pub journal: Option<std::path::PathBuf>,

    /// Write the final state to FILE: its host settings as `qpslab tune apply --from FILE`
    /// applies them on a host of the same shape, the rest of the state in comments
    #[arg(long, value_name = "FILE")]
    pub state_file: Option<std::path::PathBuf>,

    /// Write the final state to DIR as files that reproduce it elsewhere: server-host.toml
    /// (as --state-file), nginx.conf or server.conf (the server's file in that state, when the
    /// climb changed it), load.txt (the load's options kept) and climb.json
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<std::path::PathBuf>,

    /// The starting state: bench's options
    #[command(flatten)]
    pub bench: BenchArgs,
}

/// `3%` or `3`: a percentage, as a share (0.03).
fn parse_percent(s: &str) -> Result<f64, String> {
    let n = s.trim().trim_end_matches('%');
    match n.parse::<f64>() {
        Ok(v) if (0.0..100.0).contains(&v) => Ok(v / 100.0),
        _ => Err(format!("{s:?}: give a percentage from 0 to under 100, e.g. 3%")),
    }
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct RunsArgs {
    #[command(subcommand)]
    pub command: Option<RunsCommand>,

    #[command(flatten)]
    pub filter: RunsFilter,

    #[command(flatten)]
    pub store: StoreArg,

    /// Print one JSON array
    #[arg(long)]
    pub json: bool,
}

/// Which runs to list or export.
#[derive(Debug, Args)]
pub struct RunsFilter {
    /// Only the runs of sweep ID
    #[arg(long, value_name = "ID")]
    pub sweep: Option<i64>,

    /// Only the runs stored with this label
    #[arg(long, value_name = "NAME")]
    pub label: Option<String>,

    /// Only runs started since this time: RFC 3339 (2026-11-22T10:00:00Z) or an age (2h, 3d)
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// Print one run as bench printed it
    Show(RunsShowArgs),
    /// List the sweeps: name, status, runs
    Sweeps(RunsSweepsArgs),
    /// Write runs whole (report, figures, provenance, histogram) as JSON lines
    Export(RunsExportArgs),
    /// Remove runs (a sweep goes with its last run)
    Rm(RunsRmArgs),
}

#[derive(Debug, Args)]
pub struct RunsShowArgs {
    #[arg(value_name = "ID")]
    pub id: i64,
    #[command(flatten)]
    pub store: StoreArg,
    /// Print the run as JSON (the bench report, figures and provenance)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RunsSweepsArgs {
    #[command(flatten)]
    pub store: StoreArg,
    /// Print one JSON array
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RunsExportArgs {
    #[command(flatten)]
    pub filter: RunsFilter,
    #[command(flatten)]
    pub store: StoreArg,
    /// Write to FILE instead of stdout
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct RunsRmArgs {
    /// Runs to remove
    #[arg(value_name = "ID", required_unless_present = "sweep")]
    pub ids: Vec<i64>,
    /// Remove every run of sweep ID
    #[arg(long, value_name = "ID")]
    pub sweep: Option<i64>,
    #[command(flatten)]
    pub store: StoreArg,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The baseline: a run (12), runs (12,15), a sweep (sweep:3), a sweep's variant (3/NAME
    /// or 3/1), a label (label:NAME) or last
    #[arg(value_name = "A")]
    pub a: String,

    /// The runs compared with A, named the same ways
    #[arg(value_name = "B")]
    pub b: String,

    /// Exit 1 when B is worse than A beyond run-to-run noise and lost at least MIN% of A's ok
    /// responses per second (e.g. 3 or 3%); exit 0 otherwise. Repeat each side 3 or more
    /// times (bench --repeat 3 --label NAME), or the noise rule cannot call it
    #[arg(long, value_name = "MIN%", value_parser = parse_percent)]
    pub gate: Option<f64>,

    #[command(flatten)]
    pub store: StoreArg,

    /// Print the comparison as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// What to report: a sweep (sweep:3), runs (12 15 or 12,15), a variant (3/NAME), a label
    /// (label:NAME); or --last
    #[arg(value_name = "RUNS")]
    pub what: Vec<String>,

    /// The latest sweep, or the latest run if it was no sweep's
    #[arg(long, conflicts_with = "what")]
    pub last: bool,

    /// Write the report to FILE [default: stdout]
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub store: StoreArg,
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Interval logs (.hlog) or --hdr-out files
    #[arg(value_name = "FILE", required = true)]
    pub files: Vec<std::path::PathBuf>,

    /// Print one JSON object instead of the text summary
    #[arg(long)]
    pub json: bool,

    /// Write the merged histogram to FILE (HdrHistogram V2, deflate, base64)
    #[arg(long, value_name = "FILE")]
    pub hdr_out: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct TuneArgs {
    #[command(subcommand)]
    pub command: TuneCommand,
}

#[derive(Debug, Subcommand)]
pub enum TuneCommand {
    /// Print current -> planned for every change with its reason and source (writes nothing)
    Plan(TunePlanArgs),
    /// Apply the plan, journaling every previous value before its write
    Apply(TuneApplyArgs),
    /// Restore every journaled value, newest first; values changed since apply are kept
    Revert(TuneRevertArgs),
    /// Show the active journal and which values still match it
    Status(TuneStatusArgs),
}

/// What the plan is computed from.
#[derive(Debug, Args)]
pub struct PlanSpec {
    /// Read and write DIR/proc and DIR/sys instead of the live host
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: std::path::PathBuf,

    /// Interface to tune (repeatable or comma-separated) [default: every NIC with a device]
    #[arg(long = "iface", value_name = "IF", value_delimiter = ',')]
    pub ifaces: Vec<String>,

    /// CPUs for interrupt work (IRQs and RPS), e.g. 0-3,12-15; workers get the rest
    #[arg(long, value_name = "LIST")]
    pub irq_cpus: Option<String>,

    /// Worker CPUs; interrupt work gets the other CPUs, by whole cores, nearest the NICs
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,

    /// server, or client (a load generator: also widens ip_local_port_range)
    #[arg(long, value_name = "ROLE", default_value = "server", value_parser = ["server", "client"])]
    pub role: String,

    /// Plan the settings a file names instead (a climb's --state-file, or a sweep's tune table
    /// on its own: sysctl, rps, irq, steer)
    #[arg(long, value_name = "FILE", conflicts_with_all = ["ifaces", "irq_cpus", "workers"])]
    pub from: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct TunePlanArgs {
    #[command(flatten)]
    pub spec: PlanSpec,

    /// Print the plan as JSON
    #[arg(long)]
    pub json: bool,

    /// Print only the matching server configuration: nginx (a config snippet) or serve (the
    /// qpslab serve command line)
    #[arg(long, value_name = "WHAT", value_parser = ["nginx", "serve"])]
    pub emit: Option<String>,
}

#[derive(Debug, Args)]
pub struct TuneApplyArgs {
    #[command(flatten)]
    pub spec: PlanSpec,

    /// Journal file [default: ROOT/var/lib/qpslab/journal.json]
    #[arg(long, value_name = "FILE")]
    pub journal: Option<std::path::PathBuf>,

    /// Apply without showing the plan and asking
    #[arg(short, long)]
    pub yes: bool,

    /// Stop a running irqbalance (journaled; revert starts it again) instead of refusing
    #[arg(long)]
    pub stop_irqbalance: bool,

    /// Print what was applied as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TuneRevertArgs {
    /// The root apply wrote under
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: std::path::PathBuf,

    /// Journal file [default: ROOT/var/lib/qpslab/journal.json]
    #[arg(long, value_name = "FILE")]
    pub journal: Option<std::path::PathBuf>,

    /// Also restore values someone else changed since apply
    #[arg(long)]
    pub force: bool,

    /// Print what was restored as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TuneStatusArgs {
    /// The root apply wrote under
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: std::path::PathBuf,

    /// Journal file [default: ROOT/var/lib/qpslab/journal.json]
    #[arg(long, value_name = "FILE")]
    pub journal: Option<std::path::PathBuf>,

    /// Print the status as JSON
    #[arg(long)]
    pub json: bool,
}

/// `qpslab bench`'s own flags beside the options climb shares.
#[derive(Debug, Args)]
pub struct BenchCmdArgs {
    /// Run the bench N times in a row, each run stored (with --label: the label's repeats,
    /// for `qpslab compare label:A label:B` and `qpslab report label:A label:B`), and print
    /// the median run with the spread of all
    #[arg(long, value_name = "N", default_value = "1", value_parser = parse_count, allow_hyphen_values = true)]
    pub repeat: usize,

    #[command(flatten)]
    pub fail_on: FailOnArgs,

    #[command(flatten)]
    pub ci: CiArgs,

    #[command(flatten)]
    pub bench: BenchArgs,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// An external target (load + doctor only); without it a server is started on loopback
    #[arg(value_name = "URL")]
    pub url: Option<String>,

    /// Server to start when no URL is given: builtin (qpslab serve) or nginx (from PATH)
    /// [default: builtin]
    #[arg(long, value_name = "KIND", conflicts_with = "url")]
    pub target: Option<String>,

    /// With a URL: the server's process (repeatable or comma-separated; its children and
    /// threads are followed too) [default: the process listening on the URL's address]
    #[arg(long, value_name = "PID", value_delimiter = ',')]
    pub server_pid: Vec<u32>,

    /// Server workers (threads of the built-in server, nginx worker processes) [default: one
    /// per server CPU]
    #[arg(short, long, value_name = "N", value_parser = parse_count, allow_hyphen_values = true)]
    pub workers: Option<usize>,

    /// The server's CPUs, e.g. 0-3 [default: the first half of the cores]; the generator gets
    /// the others
    #[arg(long, value_name = "LIST")]
    pub server_cpus: Option<String>,

    /// How the server's workers accept: reuseport, shared, exclusive (built-in) or mutex
    /// (nginx's accept_mutex on) [default: reuseport]
    #[arg(long, value_name = "MODE")]
    pub accept: Option<String>,

    /// Start the target with HTTPS (a certificate made at start; TLS 1.2 and 1.3, session
    /// tickets), so TLS cost shows per server CPU-second; with --conn-per-request every
    /// request is a full handshake
    #[arg(long)]
    pub tls: bool,

    /// Doctor sampling interval
    #[arg(long, value_name = "DUR", default_value = "1s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub interval: Duration,

    /// Before the run and after it, wait up to this long for the target to answer a probe in
    /// its normal time: an application still answering requests an earlier run left queued
    /// would slow the next run; 0s: no probe
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_duration_or_zero, allow_hyphen_values = true)]
    pub drain: Duration,

    /// Run the target and the doctor on this host, through ssh (user@host or an alias of
    /// ~/.ssh/config): without a URL bench starts the target there; with one it finds the
    /// server listening there. The doctor reads that host's counters
    #[arg(long = "server", value_name = "HOST")]
    pub server_host: Option<String>,

    /// With --server: the address the target listens on there [default: the address ssh
    /// reached]
    #[arg(long, value_name = "IP", requires = "server_host")]
    pub server_addr: Option<String>,

    /// Run the load on these machines instead of here, started together and merged exactly
    /// (as load --agents): user@host,... or a FILE with one host per line and a weight
    #[arg(long, value_name = "LIST|FILE")]
    pub agents: Option<String>,

    /// With --server or --agents: the ssh command, split as a shell would [default:
    /// $QPSLAB_SSH, else ssh]
    #[arg(long, value_name = "CMD")]
    pub ssh: Option<String>,

    /// With --server or --agents: the qpslab executable on those hosts [default: this build,
    /// copied to ~/.cache/qpslab there when missing or different]
    #[arg(long, value_name = "PATH")]
    pub agent_exe: Option<String>,

    /// Do not keep the run in the runs store
    #[arg(long)]
    pub no_save: bool,

    /// Store the run with this label (for `qpslab compare label:NAME`)
    #[arg(long, value_name = "NAME", conflicts_with = "no_save")]
    pub label: Option<String>,

    #[command(flatten)]
    pub store: StoreArg,

    #[command(flatten)]
    pub profile: ProfileArgs,

    #[command(flatten)]
    pub live: LiveArgs,

    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,

    /// The load's options, as `qpslab load` takes them.
    #[command(flatten)]
    pub load: qpslab_load::LoadOptions,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Read DIR/proc and DIR/sys instead of the live host
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: std::path::PathBuf,

    /// Time between samples
    #[arg(long, value_name = "DUR", default_value = "1s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub interval: Duration,

    /// Sample for this long (or give a command after --)
    #[arg(short, long, value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true)]
    pub duration: Option<Duration>,

    /// Server process to follow (all its threads); repeatable or comma-separated
    #[arg(long, value_name = "PID", value_delimiter = ',')]
    pub pid: Vec<u32>,

    #[command(flatten)]
    pub profile: ProfileArgs,

    /// Print JSON (the command's stdout then goes to stderr)
    #[arg(long)]
    pub json: bool,

    /// After the rate explained, every resource on the request path with its use,
    /// saturation and errors over the window (the JSON has them always, in `explanation`)
    #[arg(long)]
    pub explain: bool,

    /// Print what a finding means, when it fires and its remedy, then exit (all rules
    /// without a name)
    #[arg(long, value_name = "RULE", num_args = 0..=1, default_missing_value = "all")]
    pub rules: Option<String>,

    /// Command to run while sampling (the load generator); its exit code passes through
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct HostArgs {
    /// Read DIR/proc and DIR/sys instead of the live host (a tree from scripts/capture-host)
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: std::path::PathBuf,

    /// Include loopback
    #[arg(long)]
    pub all: bool,

    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (repeatable: several addresses at once), or unix:PATH for a unix
    /// domain socket (every worker accepts from it; the file is removed on exit)
    #[arg(
        short,
        long = "listen",
        value_name = "ADDR:PORT|unix:PATH",
        default_value = "127.0.0.1:8080"
    )]
    pub listen: Vec<String>,

    /// Worker threads, one event loop each; auto = the CPUs this process may use
    #[arg(short, long, value_name = "N|auto", default_value = "auto", value_parser = parse_workers)]
    pub workers: Workers,

    /// Pin worker i to the i-th CPU of this list (e.g. 0 or 0-3)
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,

    /// The event loop: epoll, uring (io_uring: multishot accept and receive, provided buffers,
    /// one system call per loop turn), or auto (the faster one here where io_uring runs)
    #[arg(long, value_name = "auto|epoll|uring", default_value = "auto")]
    pub io: String,

    /// io_uring: a kernel thread per worker polls its submissions (on the worker's CPU when
    /// pinned with --cpus) and spins 50 ms after the last one; no system call to submit, but
    /// the thread's CPU time is the server's too
    #[arg(long)]
    pub sqpoll: bool,

    /// HTTPS with this certificate chain (PEM, the server's certificate first); needs
    /// --tls-key
    #[arg(long, value_name = "FILE", requires = "tls_key", conflicts_with = "tls_self_signed")]
    pub tls_cert: Option<std::path::PathBuf>,

    /// The private key (PEM) of --tls-cert
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,

    /// HTTPS with a certificate made at start for localhost and the listen addresses (its
    /// SHA-256 fingerprint is printed; clients need --insecure or to pin it)
    #[arg(long)]
    pub tls_self_signed: bool,

    /// HTTPS: require a client certificate chained to a CA of this PEM file (mutual TLS); a
    /// client without one, or with another, is refused in the handshake
    #[arg(long, value_name = "FILE")]
    pub tls_client_ca: Option<std::path::PathBuf>,

    /// HTTP/3 over QUIC as well, on UDP at the same addresses and ports as TCP (needs HTTPS:
    /// --tls-cert and --tls-key, or --tls-self-signed)
    #[arg(long)]
    pub h3: bool,

    /// HTTP/3: send a new client a Retry (it must echo a token: its address is proven, at one
    /// round trip more) while N handshakes or more are under way in its worker; `always` asks
    /// every client (nginx's quic_retry on), `never` none [default: 256]
    #[arg(long, value_name = "N|always|never", value_parser = parse_retry, requires = "h3")]
    pub h3_retry: Option<usize>,

    /// How workers share listeners: reuseport (one SO_REUSEPORT socket each), shared (one socket
    /// in every worker: the thundering herd of nginx with accept_mutex off), exclusive (shared
    /// with EPOLLEXCLUSIVE)
    #[arg(long, value_name = "MODE", default_value = "reuseport")]
    pub accept: String,

    /// Listen backlog [default: 65535, capped by net.core.somaxconn]; a value larger than the
    /// cap gets a warning saying by how much
    #[arg(long, value_name = "N")]
    pub backlog: Option<u32>,

    /// Listen on a port another server already listens on; the kernel then splits the
    /// connections between the servers (without it such a port is refused)
    #[arg(long)]
    pub share_port: bool,

    /// Connections per worker; beyond it new connections wait in the kernel's queue
    #[arg(long, value_name = "N", default_value_t = 65536)]
    pub max_conns: usize,

    /// Requests per connection before the server closes it [default: unlimited]
    #[arg(long, value_name = "N")]
    pub keepalive_requests: Option<u64>,

    /// HTTP/2: streams a connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS;
    /// more are refused with REFUSED_STREAM)
    #[arg(long, value_name = "N", default_value_t = 128)]
    pub h2_streams: usize,

    /// Close a keep-alive connection idle this long
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub idle_timeout: Duration,

    /// One total deadline for a request's header section (not reset per byte)
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub header_timeout: Duration,

    /// Deadline for reading a request body
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub body_timeout: Duration,

    /// Longest request line (414 beyond)
    #[arg(long, value_name = "BYTES", default_value = "8KiB", value_parser = parse_size)]
    pub max_request_line: u64,

    /// Largest header section (431 beyond)
    #[arg(long, value_name = "BYTES", default_value = "16KiB", value_parser = parse_size)]
    pub max_header_bytes: u64,

    /// Most header fields (431 beyond)
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub max_headers: usize,

    /// Largest request body (413 beyond)
    #[arg(long, value_name = "BYTES", default_value = "1MiB", value_parser = parse_size)]
    pub max_body: u64,

    /// Response body size in bytes (the body repeats `ok\n`)
    #[arg(long, value_name = "N", default_value = "3", value_parser = parse_size)]
    pub body_size: u64,

    /// Response status
    #[arg(long, value_name = "CODE", default_value_t = 200)]
    pub status: u16,

    /// Print a stats line to stderr every interval (open connections, requests/s)
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true)]
    pub stats_every: Option<Duration>,

    /// With --stats-every, a line per worker too
    #[arg(long)]
    pub per_worker: bool,

    /// Print the totals at exit as JSON
    #[arg(long)]
    pub json: bool,

    /// Once listening, write one JSON line to descriptor N and close it: the bound addresses,
    /// the PID and the worker count (for a supervisor that starts serve on port 0)
    #[arg(long, value_name = "N")]
    pub ready_fd: Option<i32>,
}

/// `--workers`: a count, or `auto` (None).
#[derive(Debug, Clone, Copy)]
pub struct Workers(pub Option<usize>);

fn parse_workers(s: &str) -> Result<Workers, String> {
    match s {
        "auto" => Ok(Workers(None)),
        n => n
            .parse()
            .map(|n| Workers(Some(n)))
            .map_err(|_| format!("{n:?} is not a number; give N or auto")),
    }
}

/// `--h3-retry`: handshakes under way from which a Retry is sent (`always` 0, `never` none).
fn parse_retry(s: &str) -> Result<usize, String> {
    match s {
        "always" => Ok(0),
        "never" => Ok(usize::MAX),
        n => n.parse().map_err(|_| format!("{n:?}: give a number of handshakes, always or never")),
    }
}

impl ServeArgs {
    /// The server's options, as given; the serve crate validates them.
    pub fn to_options(&self) -> Result<qpslab_serve::ServeOptions, qpslab_serve::ConfigError> {
        let (workers, cpus) = (self.workers.0, self.cpus.clone());
        let accept = qpslab_serve::AcceptMode::parse(&self.accept)?;
        let io = qpslab_serve::IoChoice::parse(&self.io)?;
        let usize_of = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        let tls = match (&self.tls_cert, &self.tls_key, self.tls_self_signed) {
            (Some(cert), Some(key), _) => {
                Some(qpslab_serve::tls::TlsSource::Files { cert: cert.clone(), key: key.clone() })
            }
            (_, _, true) => Some(qpslab_serve::tls::TlsSource::SelfSigned),
            _ => None,
        };
        Ok(qpslab_serve::ServeOptions {
            io,
            sqpoll: self.sqpoll,
            tls,
            tls_client_ca: self.tls_client_ca.clone(),
            h3: self.h3,
            listen: self.listen.clone(),
            workers,
            cpus,
            accept,
            backlog: self.backlog,
            share_port: self.share_port,
            settings: qpslab_serve::config::Settings {
                max_conns: self.max_conns,
                keepalive_requests: self.keepalive_requests.unwrap_or(u64::MAX),
                idle_timeout: self.idle_timeout,
                header_timeout: self.header_timeout,
                body_timeout: self.body_timeout,
                limits: qpslab_http::RequestLimits {
                    max_request_line: usize_of(self.max_request_line),
                    max_header_bytes: usize_of(self.max_header_bytes),
                    max_headers: self.max_headers,
                },
                max_body: self.max_body,
                body_size: self.body_size,
                status: self.status,
                h2_streams: self.h2_streams,
                h3_retry_above: self.h3_retry.unwrap_or(256),
            },
        })
    }
}

/// `4096`, `8KiB`, `1MiB`, `2k`, `1G`: bytes with an optional binary suffix.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 =
        num.parse().map_err(|_| format!("{s:?} is not a size; write e.g. 8KiB or 4096"))?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("{s:?}: unknown unit {unit:?}; use KiB, MiB or GiB")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("{s:?} is too large"))
}

#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Target URL(s), e.g. http://127.0.0.1:8080/ or https://example.com/ (without a scheme,
    /// http:// is assumed, as curl does); several spread over the connections. {seq},
    /// {seq:START}, {rand:WIDTH} and {rand:WIDTH:SEED} in a path, a -H value or the body are
    /// IDs written into each request (never the same {seq} twice in a run)
    #[arg(value_name = "URL", required_unless_present_any = ["targets", "urls_file"])]
    pub urls: Vec<String>,

    #[command(flatten)]
    pub load: qpslab_load::LoadOptions,

    /// Print one JSON object (the documented contract) instead of the text summary
    #[arg(long)]
    pub json: bool,

    /// Print the latency distribution, as wrk's flag does (qpslab always prints it)
    #[arg(long)]
    pub latency: bool,

    /// Write the latency histogram to FILE as HdrHistogram V2 (deflate, base64)
    #[arg(long, value_name = "FILE")]
    pub hdr_out: Option<std::path::PathBuf>,

    /// Write every request's counts to FILE as CSV (url, method, sent, completed, ok, failed),
    /// a line per target or per line of the --urls pool
    #[arg(long, value_name = "FILE")]
    pub per_request: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub ci: CiArgs,

    /// Keep the run in the runs store (see qpslab runs)
    #[arg(long)]
    pub save: bool,

    /// With --save: store the run with this label
    #[arg(long, value_name = "NAME", requires = "save")]
    pub label: Option<String>,

    #[command(flatten)]
    pub store: StoreArg,

    /// Run the load on these machines, started together and merged exactly: user@host,... or a
    /// FILE with one host per line and an optional weight ('user@h1 2'); 'local' or
    /// 'local:CPUS' runs an agent here. Connections, threads, -R, -n and --source are split
    /// by weight
    #[arg(long, value_name = "LIST|FILE")]
    pub agents: Option<String>,

    /// With --agents: the ssh command, split as a shell would, e.g. 'ssh -F FILE -p 2222'
    /// [default: $QPSLAB_SSH, else ssh]
    #[arg(long, value_name = "CMD", requires = "agents")]
    pub ssh: Option<String>,

    /// With --agents: the qpslab executable on the agents' hosts, and of local agents
    /// [default: this build, copied to ~/.cache/qpslab there when missing or different]
    #[arg(long, value_name = "PATH", requires = "agents")]
    pub agent_exe: Option<String>,

    #[command(flatten)]
    pub live: LiveArgs,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8KiB"), Ok(8192));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("2k"), Ok(2048));
        assert!(parse_size("8XB").is_err());
        assert!(parse_size("-1").is_err());
    }
}
