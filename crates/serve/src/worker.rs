//! One server worker: an event loop over its listeners and connections, on epoll
//! ([`epoll`]) or io_uring ([`uring`]); both drive the same connection protocol
//! ([`session`]), so every behaviour is written once.
//!
//! The loops own the connection life cycle: accept (with EMFILE back-off and the per-worker
//! connection cap), reading into the connection's buffer, writing what the session produced
//! (every response a read produced in one write), bounded output (input pauses while too much
//! is pending), the deadlines' timer, lingering close after errors, and draining on stop.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use qpslab_quic::udp::QuicCounts;

use crate::bufpool::BufPool;
use crate::config::ServeConfig;
use crate::date::{imf_fixdate, now_secs, DATE_LEN};
use crate::reqcache::RequestCache;
use crate::respond::Template;

pub(crate) mod epoll;
mod fields;
pub mod fuzzing;
mod h2;
mod h3;
pub(crate) mod quic;
mod session;
mod transport;
pub(crate) mod uring;

/// Tokens with this bit are listeners; the rest are connection slots.
const LISTENER: u64 = 1 << 63;
/// With [`LISTENER`]: a QUIC endpoint's UDP socket.
const QUIC: u64 = 1 << 62;
/// Timer granularity for deadlines (delays have their own exact timer).
const TICK: Duration = Duration::from_millis(100);
/// Pending output above which a connection's input is not read.
const OUT_HIGH: usize = 256 * 1024;
/// Read size; also the least free space offered to a read.
const READ_CHUNK: usize = 4096;
/// Connections accepted per readiness event, so one busy listener cannot starve the rest.
const ACCEPT_BATCH: usize = 64;
/// How long accepting pauses after EMFILE/ENFILE.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// How long a closing connection's input is drained so the error response is not lost to a
/// reset.
const LINGER: Duration = Duration::from_secs(2);
/// How long a stopping worker lets in-flight responses finish.
const DRAIN: Duration = Duration::from_millis(1500);
/// Bytes one connection may write per turn; then it yields so that a fast reader of a huge
/// body cannot stall the worker's other connections.
const FLUSH_BUDGET: usize = 256 * 1024;
/// Request heads up to this size are remembered for the identical-request fast path.
const CACHED_HEAD_MAX: usize = 512;

/// What every connection of a worker shares: the configuration, the response template and
/// the date in it, the counters, the delayed responses, whether the worker is draining, the
/// spare buffers and the remembered request heads.
#[derive(Debug)]
struct Shared<'a> {
    pub cfg: &'a ServeConfig,
    pub template: Template,
    pub date: [u8; DATE_LEN],
    pub counters: Counters,
    /// Delayed responses: (when, connection slot, its generation).
    pub delays: BinaryHeap<Reverse<(Instant, usize, u32)>>,
    pub draining: bool,
    pub pool: BufPool,
    pub cache: RequestCache,
    pub h2: h2::Scratch,
    pub h3: h3::Scratch,
}

impl Shared<'_> {
    /// When the loop must wake: at `tick`, or earlier for a delayed response.
    pub fn wake(&self, tick: Instant) -> Instant {
        self.delays.peek().map_or(tick, |Reverse((t, _, _))| tick.min(*t))
    }

    /// The next delayed response due by `now`, taken off the heap: (slot, generation).
    pub fn next_due(&mut self, now: Instant) -> Option<(usize, u32)> {
        let &Reverse((t, slot, gen)) = self.delays.peek()?;
        if t > now {
            return None;
        }
        self.delays.pop();
        Some((slot, gen))
    }
}

/// Counters a worker publishes every tick, read by the stats printer and at exit.
#[derive(Debug, Default)]
pub struct WorkerStats {
    pub requests: AtomicU64,
    pub open: AtomicU64,
    pub accepted: AtomicU64,
    /// Requests refused with an error status (400, 413, 414, 431, 501, 505, ...).
    pub rejected: AtomicU64,
    /// Connections closed at a header, body, idle or write deadline.
    pub timeouts: AtomicU64,
    /// accept() failures other than EAGAIN (EMFILE, ENFILE, ...).
    pub accept_errors: AtomicU64,
    /// HTTPS: connections closed because their TLS failed (a bad handshake, an alert, a
    /// record that does not decrypt).
    pub tls_failures: AtomicU64,
    /// HTTP/3: UDP datagrams read and sent, and QUIC packets lost on connections gone.
    pub datagrams_in: AtomicU64,
    pub datagrams_out: AtomicU64,
    pub lost_packets: AtomicU64,
}

#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counters {
    requests: u64,
    accepted: u64,
    rejected: u64,
    timeouts: u64,
    accept_errors: u64,
    pub(crate) tls_failures: u64,
}

/// A worker's counters: sampled live for `--stats-every`, and returned when it stops.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct WorkerCounters {
    pub requests: u64,
    /// Connections open (at the sample; 0 once the worker has stopped).
    pub open: u64,
    pub accepted: u64,
    pub rejected: u64,
    pub timeouts: u64,
    pub accept_errors: u64,
    pub tls_failures: u64,
    /// HTTP/3: what the worker's UDP sockets and QUIC connections did (at the end).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quic: Option<QuicCounts>,
}

impl WorkerCounters {
    /// The counters of several workers added up.
    pub fn sum(workers: &[WorkerCounters]) -> WorkerCounters {
        workers.iter().fold(WorkerCounters::default(), |a, w| WorkerCounters {
            quic: match (a.quic, w.quic) {
                (Some(mut x), Some(y)) => {
                    x.merge(&y);
                    Some(x)
                }
                (x, y) => x.or(y),
            },
            requests: a.requests + w.requests,
            open: a.open + w.open,
            accepted: a.accepted + w.accepted,
            rejected: a.rejected + w.rejected,
            timeouts: a.timeouts + w.timeouts,
            accept_errors: a.accept_errors + w.accept_errors,
            tls_failures: a.tls_failures + w.tls_failures,
        })
    }
}

impl Counters {
    fn publish(&self, stats: &WorkerStats, open: usize) {
        stats.requests.store(self.requests, Ordering::Relaxed);
        stats.accepted.store(self.accepted, Ordering::Relaxed);
        stats.rejected.store(self.rejected, Ordering::Relaxed);
        stats.timeouts.store(self.timeouts, Ordering::Relaxed);
        stats.accept_errors.store(self.accept_errors, Ordering::Relaxed);
        stats.tls_failures.store(self.tls_failures, Ordering::Relaxed);
        stats.open.store(open as u64, Ordering::Relaxed);
    }

    /// HTTP/3: what the worker's QUIC endpoints did so far, for `--stats-every`.
    fn publish_quic(stats: &WorkerStats, endpoints: &[quic::Quic]) {
        let mut c = QuicCounts::default();
        for q in endpoints {
            c.merge(&q.counts());
        }
        stats.datagrams_in.store(c.datagrams_in, Ordering::Relaxed);
        stats.datagrams_out.store(c.datagrams_out, Ordering::Relaxed);
        stats.lost_packets.store(c.lost_packets, Ordering::Relaxed);
    }

    /// What a stopped worker reports.
    fn final_counts(&self) -> WorkerCounters {
        WorkerCounters {
            requests: self.requests,
            open: 0,
            accepted: self.accepted,
            rejected: self.rejected,
            timeouts: self.timeouts,
            accept_errors: self.accept_errors,
            tls_failures: self.tls_failures,
            quic: None,
        }
    }
}

/// The date in responses, refreshed when the second changes.
fn refresh_date(sh: &mut Shared<'_>, secs: &mut u64) {
    let now = now_secs();
    if now != *secs {
        *secs = now;
        sh.date = imf_fixdate(now);
        sh.template.set_date(&sh.date);
    }
}

/// A worker's shared state at its start.
fn shared(cfg: &crate::config::ServeConfig) -> (Shared<'_>, u64) {
    let secs = now_secs();
    let date = imf_fixdate(secs);
    let sh = Shared {
        cfg,
        template: crate::respond::Template::new(cfg, &date),
        date,
        counters: Counters::default(),
        delays: std::collections::BinaryHeap::new(),
        draining: false,
        pool: crate::bufpool::BufPool::default(),
        cache: crate::reqcache::RequestCache::default(),
        h2: h2::Scratch::new(cfg.alt_svc.clone()),
        h3: h3::Scratch::default(),
    };
    (sh, secs)
}

/// Milliseconds from `now` to `wake`, rounded up (an epoll timeout).
fn ms_until(now: Instant, wake: Instant) -> i32 {
    let d = wake.saturating_duration_since(now);
    d.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
}
