//! The lab's vocabulary: what bench starts ([`ServerSpec`], [`TargetKind`], [`Accept`]), why a
//! bench fails ([`BenchError`]), and a variant's host settings ([`TuneSpec`]). Every module of
//! the lab (bench, the placement, the server host, the sweep) speaks these; none of them
//! depends on the modules that use it, so the lab has no import circle.

use std::collections::BTreeMap;

use qpslab_load::LoadError;
use serde::{Deserialize, Serialize};

/// Why a bench could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The user's to fix (exit 2): a bad flag, nginx missing, target unreachable.
    #[error("{0}")]
    Usage(String),
    /// The target failed to start or died.
    #[error("{0}")]
    Target(String),
    #[error(transparent)]
    Load(LoadError),
    #[error("doctor: {0}")]
    Doctor(#[from] qpslab_host::ReadError),
    /// The load over agents failed (every agent was lost).
    #[error("{0}")]
    Agents(String),
}

impl From<LoadError> for BenchError {
    /// The user's to fix when the load says so (exit 2), else the load's failure.
    fn from(e: LoadError) -> Self {
        if e.is_setup() {
            BenchError::Usage(e.to_string())
        } else {
            BenchError::Load(e)
        }
    }
}

/// Which server `bench` starts when no URL is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    Builtin,
    Nginx,
}

/// How the server's workers share the listening socket. The built-in server takes
/// `reuseport`, `shared` and `exclusive` (`qpslab serve --accept`); nginx takes `reuseport`
/// (`listen ... reuseport`), `shared` (one socket, `accept_mutex off`: the kernel wakes one
/// worker, EPOLLEXCLUSIVE) and `mutex` (one socket, `accept_mutex on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accept {
    Reuseport,
    Shared,
    Exclusive,
    Mutex,
}

impl Accept {
    pub fn name(self) -> &'static str {
        match self {
            Self::Reuseport => "reuseport",
            Self::Shared => "shared",
            Self::Exclusive => "exclusive",
            Self::Mutex => "mutex",
        }
    }
}

/// The server bench starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerSpec {
    pub kind: TargetKind,
    /// Worker threads (builtin) or processes (nginx); default: one per server CPU.
    pub workers: Option<usize>,
    /// The server's CPUs; default: the first half of the cores.
    pub cpus: Option<Vec<usize>>,
    pub accept: Accept,
    /// HTTPS, with a certificate made at start (the load does not verify it).
    #[serde(default)]
    pub tls: bool,
    /// The load speaks HTTP/2 (`--h2`): nginx is configured for it (h2c with prior
    /// knowledge, or h2 by ALPN with TLS); the built-in server takes either protocol as is.
    #[serde(default)]
    pub h2: bool,
    /// The load speaks HTTP/3 (`--h3`): the built-in server serves it too (over HTTPS).
    #[serde(default)]
    pub h3: bool,
}

/// Host settings of a variant: the tune planner's flags, or settings named outright.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TuneSpec {
    /// `qpslab tune plan --workers N`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<usize>,
    /// `qpslab tune plan --irq-cpus LIST`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub irq_cpus: Option<String>,
    /// `qpslab tune plan --iface IF`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub iface: Vec<String>,
    /// `server` or `client`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// `"IFACE/rx-N" = "CPU list"` (empty: RPS off).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rps: BTreeMap<String, String>,
    /// `"IRQ" = "CPU list"`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub irq: BTreeMap<String, String>,
    /// `"net.core.somaxconn" = 4096`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sysctl: BTreeMap<String, SysctlValue>,
    /// Interfaces whose receive steering (IRQ affinity, RPS, RFS, XPS) the planner lays out,
    /// without its sysctls: a climb's steering change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steer: Vec<String>,
}

impl TuneSpec {
    /// Settings named outright (`rps`, `irq`, `sysctl`) rather than planned.
    pub fn is_explicit(&self) -> bool {
        !(self.rps.is_empty()
            && self.irq.is_empty()
            && self.sysctl.is_empty()
            && self.steer.is_empty())
    }

    pub fn is_planned(&self) -> bool {
        self.workers.is_some()
            || self.irq_cpus.is_some()
            || !self.iface.is_empty()
            || self.role.is_some()
    }
}

/// A target bench started on the server host is up: where it listens, its processes, its
/// CPUs and workers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TargetUp {
    pub addr: std::net::SocketAddr,
    pub pids: Vec<u32>,
    pub cpus: Vec<usize>,
    pub workers: usize,
}

/// A sysctl's value as a sweep file writes it: a number, a string, or a list (the fields of
/// `ip_local_port_range`); plain data, so it crosses the agent wire as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SysctlValue {
    Number(i64),
    Text(String),
    List(Vec<SysctlValue>),
}

impl SysctlValue {
    /// As written to /proc/sys (list fields separated by tabs).
    pub fn text(&self) -> String {
        match self {
            SysctlValue::Number(n) => n.to_string(),
            SysctlValue::Text(s) => s.clone(),
            SysctlValue::List(v) => v.iter().map(SysctlValue::text).collect::<Vec<_>>().join("\t"),
        }
    }
}
