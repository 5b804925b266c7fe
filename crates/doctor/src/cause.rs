//! What a finding found, typed: the kind of bottleneck, the resource and its numbers. The
//! climb and compare act on these, never on a finding's name or prose; a remedy's value comes
//! from tune's one table ([`qpslab_tune::remedy`]).

use serde::{Deserialize, Serialize};

/// A cause, with the numbers a consumer acts on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Cause {
    /// A side's small writes were held by Nagle until the peer's delayed ACK came: every
    /// response waited about the peer's delayed-ACK timeout.
    DelayedAck {
        /// `server` or `generator`: whose writes were held.
        side: String,
        /// The peer's delayed-ACK timeout, and the mean latency, in ms.
        timer_ms: f64,
        latency_ms: f64,
    },
    /// nginx ran out of worker connections (its error log says so).
    WorkerConnections {
        /// `worker_connections` as configured, and what the run needed at least (the load's
        /// connections, and as many again to an upstream when it proxies).
        limit: u64,
        wanted: u64,
    },
    /// A rate limit answered the requests over it with a fast error status.
    RateLimit {
        /// The status it answered (503, 429).
        status: u16,
        /// Ok responses a second, the limit's rate in this run.
        ok_per_s: f64,
        /// The limit as configured, when the server's configuration says (`limit_req_zone
        /// ... rate=200r/s`).
        configured: Option<String>,
    },
    /// The server's HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS set the concurrency below the
    /// streams the load asked for.
    StreamLimit { server: u64, asked: u64 },
    /// The server's requests spent this share of their time at a block device (its queue
    /// over the requests in service, or its threads' uninterruptible sleep); the device.
    DiskWait { share: f64, device: Option<String> },
    /// The server's own log named what went wrong, this many times in the window.
    ServerLog { message: String, count: u64 },
    /// Host settings below what tune sets (name and the value from tune's table).
    Sysctls { settings: Vec<(String, String)> },
}
