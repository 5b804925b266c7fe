//! Per-thread recording: request counters, error classes with one example each, status codes
//! and the latency histogram. Recording is a few additions and one histogram increment; merging
//! and summarising happen once, at the end.

use hdrhistogram::Histogram;
use qpslab_http::grpc;
/// gRPC's status code names, by code (the live page and the metrics name calls by them).
pub use qpslab_http::grpc::CODES as GRPC_CODES;
pub use qpslab_quic::udp::QuicCounts;

/// Highest latency the histogram tracks, in microseconds (60 s); larger values saturate.
pub const MAX_LATENCY_US: u64 = 60_000_000;
/// Significant decimal digits the histogram keeps.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// Why a request failed, as reported in `errors`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    Connect = 0,
    Read = 1,
    Write = 2,
    Timeout = 3,
    Parse = 4,
    /// The TLS handshake failed: certificate, protocol or cipher, or an alert from the server.
    Tls = 5,
    /// HTTP/2: the server reset the request's stream (RST_STREAM, other than REFUSED_STREAM,
    /// which is sent again).
    Reset = 6,
}

/// How many error classes there are.
pub const CLASSES: usize = 7;

impl ErrorClass {
    pub const ALL: [ErrorClass; CLASSES] = [
        Self::Connect,
        Self::Read,
        Self::Write,
        Self::Timeout,
        Self::Parse,
        Self::Tls,
        Self::Reset,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Read => "read",
            Self::Write => "write",
            Self::Timeout => "timeout",
            Self::Parse => "parse",
            Self::Tls => "tls",
            Self::Reset => "reset",
        }
    }
}

/// gRPC calls by how they ended: every call by its status code (the server's, or the one a
/// gRPC client reports for what this side found wrong), and those findings by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct GrpcCounts {
    /// Calls by status code 0-16 ([`grpc::CODES`]).
    pub codes: [u64; grpc::CODES.len()],
    /// Calls with a code past 16 (a server may send any number).
    pub other_codes: u64,
    /// Of the calls, those this side found wrong, by [`grpc::Fault::index`].
    pub faults: [u64; grpc::FAULTS],
    /// The first finding, described.
    pub fault_example: Option<String>,
    /// With `--check-response`: the first OK answer's message.
    pub first_response: Option<Vec<u8>>,
    /// Response messages of the calls counted.
    pub messages_in: u64,
}

impl GrpcCounts {
    /// A call that ended with `o`.
    #[inline]
    pub fn call(&mut self, o: grpc::Outcome) {
        match self.codes.get_mut(o.code() as usize) {
            Some(n) => *n += 1,
            None => self.other_codes += 1,
        }
        if let grpc::Outcome::Fault(f) = o {
            self.faults[f.index()] += 1;
            if self.fault_example.is_none() {
                self.fault_example = Some(f.to_string());
            }
        }
    }

    /// Calls that ended with status `code`.
    pub fn with_code(&self, code: u32) -> u64 {
        self.codes.get(code as usize).copied().unwrap_or(0)
    }

    /// Calls counted.
    pub fn calls(&self) -> u64 {
        self.codes.iter().sum::<u64>() + self.other_codes
    }

    pub fn merge(&mut self, o: &GrpcCounts) {
        for (a, b) in self.codes.iter_mut().zip(o.codes) {
            *a += b;
        }
        self.other_codes += o.other_codes;
        for (a, b) in self.faults.iter_mut().zip(o.faults) {
            *a += b;
        }
        if self.fault_example.is_none() {
            self.fault_example.clone_from(&o.fault_example);
        }
        if self.first_response.is_none() {
            self.first_response.clone_from(&o.first_response);
        }
        self.messages_in += o.messages_in;
    }
}

/// Status codes are three digits (httparse rejects others), so a flat array indexes them.
pub(crate) const STATUS_SLOTS: usize = 1000;

pub fn new_histogram() -> Histogram<u64> {
    // 1 us .. 60 s at 3 significant digits: fixed bounds, so recording never allocates.
    Histogram::new_with_bounds(1, MAX_LATENCY_US, SIGNIFICANT_DIGITS)
        .unwrap_or_else(|_| unreachable!("constant histogram bounds are valid"))
}

/// One target's share of the requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TargetCounts {
    pub completed: u64,
    pub ok: u64,
    pub failed: u64,
}

/// Everything one thread measured. Serialized (an agent's result on the wire) with its
/// histograms as HdrHistogram V2 and its statuses as (code, count) pairs; the thread's own
/// interval histogram and second marks stay home.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Recorder {
    /// Requests issued (committed to a connection) in the measured window, plus those issued
    /// in the warm-up that were still outstanding when it opened (`from_warmup`).
    pub sent: u64,
    /// Of `sent`: issued in the warm-up, outstanding when the window opened. Their responses
    /// count when they complete in the window.
    pub from_warmup: u64,
    /// Final responses received (any status).
    pub completed: u64,
    /// Responses with status < 400, or listed in `--accept-status`.
    pub ok: u64,
    /// Requests that ended without a response: sum of `errors`.
    pub failed: u64,
    pub errors: [u64; CLASSES],
    pub examples: [Option<String>; CLASSES],
    #[serde(with = "crate::wire::statuses")]
    pub status: Box<[u64; STATUS_SLOTS]>,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Successful TCP connects.
    pub connects: u64,
    /// Connections reopened after the server closed one or an error.
    pub reconnects: u64,
    /// Pipelined requests written again on a new connection because the server announced the
    /// close before reaching them.
    pub retried: u64,
    /// Requests sent again, once, because their reused keep-alive connection closed before any
    /// byte of their response (the keep-alive close race).
    pub race_retried: u64,
    /// Reused connections the server closed before responding (the race), whose requests were
    /// sent again.
    pub race_closes: u64,
    /// Latency from the request's intended send time (its schedule slot in open loop; the
    /// write in closed loop, where both are the same).
    #[serde(with = "crate::wire::histogram")]
    pub latency: Histogram<u64>,
    /// Open loop only: latency from the actual write, which a stall hides.
    #[serde(with = "crate::wire::histogram")]
    pub latency_uncorrected: Histogram<u64>,
    /// Open loop only: actual write minus intended send time.
    #[serde(with = "crate::wire::histogram")]
    pub send_lag: Histogram<u64>,
    /// Open loop: the sum of the recorded send lags, in microseconds (for the live feed).
    #[serde(skip)]
    pub lag_total_us: u64,
    /// Open loop only: counted requests that found every connection busy when they fell due
    /// and waited for one to free.
    pub waited_for_connection: u64,
    /// From connect() to the connection being writable (the handshake), per connect.
    #[serde(with = "crate::wire::histogram")]
    pub connect_latency: Histogram<u64>,
    /// https: TLS handshakes completed in full, and those that resumed a session.
    pub tls_full: u64,
    pub tls_resumed: u64,
    /// HTTP/3 with `--0rtt`: resumed handshakes whose early data (the first requests) the
    /// server took, and those whose it refused (the requests went again after the handshake).
    #[serde(default)]
    pub early_accepted: u64,
    #[serde(default)]
    pub early_refused: u64,
    /// https: the version and cipher suite of the first handshake (e.g. `TLSv1_3
    /// TLS13_AES_256_GCM_SHA384`).
    pub tls_negotiated: Option<String>,
    /// https: from the TCP connection being open to the TLS handshake's end.
    #[serde(with = "crate::wire::histogram")]
    pub handshake_latency: Histogram<u64>,
    /// Per target, in the order of the configuration.
    pub per_target: Vec<TargetCounts>,
    /// Per group of the `--urls` pool: latency, as `latency` is recorded.
    #[serde(with = "crate::wire::histograms")]
    pub per_group: Vec<Histogram<u64>>,
    /// HTTP/2 (`--h2`): what the connections saw while measuring.
    pub h2: Option<crate::session::h2::H2Counts>,
    /// HTTP/3 (`--h3`): what QUIC and UDP did.
    #[serde(default)]
    pub quic: Option<QuicCounts>,
    /// gRPC (`--grpc`): the calls by status code and what was found wrong.
    #[serde(default)]
    pub grpc: Option<GrpcCounts>,
    /// Streaming gRPC calls: the gaps between a call's response messages (the first from
    /// the request), in microseconds.
    #[serde(default = "new_histogram", with = "crate::wire::histogram")]
    pub message_gaps: Histogram<u64>,
    /// With `--log` or a feed that wants seconds: `latency` as it was when the current
    /// interval began. An interval's histogram is the difference, taken once a second, so a
    /// response is recorded once whether intervals are kept or not.
    #[serde(skip)]
    pub interval_base: Option<Histogram<u64>>,
    /// Cumulative (sent, completed, failed) at the end of each whole second of measurement,
    /// taken by the thread's loop when it passes the second (within a turn of the loop): the
    /// per-second rows, exact because they are this recorder's own counts.
    #[serde(skip)]
    pub seconds: Vec<[u64; 3]>,
    /// The stretches with no response while a request was out (the thread's own; the run
    /// keeps those every thread saw).
    #[serde(skip)]
    pub stalls: crate::stalls::StallLog,
}

impl Default for Recorder {
    fn default() -> Self {
        Self {
            sent: 0,
            from_warmup: 0,
            completed: 0,
            ok: 0,
            failed: 0,
            errors: [0; CLASSES],
            examples: Default::default(),
            status: Box::new([0; STATUS_SLOTS]),
            bytes_read: 0,
            bytes_written: 0,
            connects: 0,
            reconnects: 0,
            retried: 0,
            race_retried: 0,
            race_closes: 0,
            latency: new_histogram(),
            latency_uncorrected: new_histogram(),
            send_lag: new_histogram(),
            lag_total_us: 0,
            waited_for_connection: 0,
            connect_latency: new_histogram(),
            tls_full: 0,
            tls_resumed: 0,
            early_accepted: 0,
            early_refused: 0,
            tls_negotiated: None,
            handshake_latency: new_histogram(),
            per_target: Vec::new(),
            per_group: Vec::new(),
            h2: None,
            quic: None,
            grpc: None,
            message_gaps: new_histogram(),
            interval_base: None,
            seconds: Vec::new(),
            stalls: Default::default(),
        }
    }
}

impl Recorder {
    /// (sent, completed, failed) so far.
    pub fn totals(&self) -> [u64; 3] {
        [self.sent, self.completed, self.failed]
    }

    /// A second of measurement ended: its cumulative counts join [`Recorder::seconds`].
    pub fn end_second(&mut self) {
        let t = self.totals();
        self.seconds.push(t);
    }

    /// A recorder for `targets` targets and `groups` groups of a pool, keeping intervals when
    /// `interval`.
    pub fn new(targets: usize, groups: usize, interval: bool) -> Self {
        Self {
            per_target: vec![TargetCounts::default(); targets],
            per_group: (0..groups).map(|_| new_histogram()).collect(),
            interval_base: interval.then(new_histogram),
            ..Self::default()
        }
    }

    #[inline]
    pub fn response(&mut self, status: u16, ok: bool, latency_us: u64) {
        self.response_unmeasured(status, ok);
        self.latency.saturating_record(latency_us.max(1));
    }

    /// A response counted without its latency (`--exclude-warmup-latency`: a request issued
    /// in the warm-up).
    #[inline]
    pub fn response_unmeasured(&mut self, status: u16, ok: bool) {
        self.completed += 1;
        self.ok += u64::from(ok);
        if let Some(slot) = self.status.get_mut(usize::from(status)) {
            *slot += 1;
        }
    }

    /// When intervals are kept: the corrected latency since the last call (or the start of
    /// measurement).
    pub fn take_interval(&mut self) -> Option<Histogram<u64>> {
        let base = self.interval_base.as_mut()?;
        let mut interval = self.latency.clone();
        // The base is an earlier state of the same histogram: every count of it is within.
        let _ = interval.subtract(&*base);
        base.clone_from(&self.latency);
        Some(interval)
    }

    /// A response's latency in pool group `g` (a group that is not there: nothing).
    #[inline]
    pub fn group_latency(&mut self, g: usize, latency_us: u64) {
        if let Some(h) = self.per_group.get_mut(g) {
            h.saturating_record(latency_us.max(1));
        }
    }

    /// Counts a response (`ok` or not) to target `t`.
    #[inline]
    pub fn target_response(&mut self, t: usize, ok: bool) {
        if let Some(c) = self.per_target.get_mut(t) {
            c.completed += 1;
            c.ok += u64::from(ok);
        }
    }

    /// Counts `n` failed requests to target `t` (the total is counted by [`Self::failure`]).
    pub fn target_failed(&mut self, t: usize, n: u64) {
        if let Some(c) = self.per_target.get_mut(t) {
            c.failed += n;
        }
    }

    /// Streaming gRPC: a gap between a call's response messages.
    #[inline]
    pub fn message_gap(&mut self, us: u64) {
        self.message_gaps.saturating_record(us.max(1));
    }

    /// Open loop: the latency from the actual write beside the corrected one.
    #[inline]
    pub fn uncorrected(&mut self, latency_us: u64) {
        self.latency_uncorrected.saturating_record(latency_us.max(1));
    }

    /// Open loop: how late a request was written after its slot.
    #[inline]
    pub fn lag(&mut self, lag_us: u64) {
        self.send_lag.saturating_record(lag_us.max(1));
        self.lag_total_us += lag_us;
    }

    /// Counts `n` failed requests of `class`; the message is built only for the first one.
    pub fn failure(&mut self, class: ErrorClass, n: u64, message: impl FnOnce() -> String) {
        if n == 0 {
            return;
        }
        self.failed += n;
        self.errors[class as usize] += n;
        let example = &mut self.examples[class as usize];
        if example.is_none() {
            *example = Some(message());
        }
    }

    pub fn merge(&mut self, other: &Recorder) {
        // A recorder whose run ended before the other's holds its totals for the seconds it
        // did not reach.
        let (mine, theirs) = (self.totals(), other.totals());
        if !other.seconds.is_empty() || !self.seconds.is_empty() {
            let n = self.seconds.len().max(other.seconds.len());
            let at = |v: &[[u64; 3]], i: usize, end: [u64; 3]| v.get(i).copied().unwrap_or(end);
            self.seconds = (0..n)
                .map(|i| {
                    let (a, b) = (at(&self.seconds, i, mine), at(&other.seconds, i, theirs));
                    [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
                })
                .collect();
        }
        self.sent += other.sent;
        self.from_warmup += other.from_warmup;
        self.completed += other.completed;
        self.ok += other.ok;
        self.failed += other.failed;
        for i in 0..self.errors.len() {
            self.errors[i] += other.errors[i];
            if self.examples[i].is_none() {
                self.examples[i].clone_from(&other.examples[i]);
            }
        }
        for (a, b) in self.status.iter_mut().zip(other.status.iter()) {
            *a += b;
        }
        self.bytes_read += other.bytes_read;
        self.bytes_written += other.bytes_written;
        self.connects += other.connects;
        self.reconnects += other.reconnects;
        self.retried += other.retried;
        self.race_retried += other.race_retried;
        self.race_closes += other.race_closes;
        self.waited_for_connection += other.waited_for_connection;
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.latency.add(&other.latency);
        while self.per_group.len() < other.per_group.len() {
            self.per_group.push(new_histogram());
        }
        for (a, b) in self.per_group.iter_mut().zip(&other.per_group) {
            let _ = a.add(b);
        }
        let _ = self.latency_uncorrected.add(&other.latency_uncorrected);
        let _ = self.send_lag.add(&other.send_lag);
        self.lag_total_us += other.lag_total_us;
        let _ = self.connect_latency.add(&other.connect_latency);
        if let Some(o) = &other.quic {
            self.quic.get_or_insert_with(Default::default).merge(o);
        }
        if let Some(o) = &other.h2 {
            self.h2.get_or_insert_with(Default::default).merge(o);
        }
        if let Some(o) = &other.grpc {
            self.grpc.get_or_insert_with(Default::default).merge(o);
        }
        let _ = self.message_gaps.add(&other.message_gaps);
        self.tls_full += other.tls_full;
        self.tls_resumed += other.tls_resumed;
        self.early_accepted += other.early_accepted;
        self.early_refused += other.early_refused;
        if self.tls_negotiated.is_none() {
            self.tls_negotiated.clone_from(&other.tls_negotiated);
        }
        let _ = self.handshake_latency.add(&other.handshake_latency);
        if self.per_target.len() < other.per_target.len() {
            self.per_target.resize(other.per_target.len(), TargetCounts::default());
        }
        for (a, b) in self.per_target.iter_mut().zip(&other.per_target) {
            a.completed += b.completed;
            a.ok += b.ok;
            a.failed += b.failed;
        }
    }

    /// Non-zero status counts, by code.
    pub fn statuses(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        self.status.iter().enumerate().filter(|(_, &n)| n > 0).map(|(c, &n)| (c as u16, n))
    }

    /// Responses with a status that is not counted as ok.
    pub fn bad_status(&self) -> u64 {
        self.completed - self.ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each interval is exactly its own responses: counts, min and max, whatever came before.
    #[test]
    fn intervals_are_the_differences_of_the_whole() {
        let mut r = Recorder::new(1, 0, true);
        for us in [5, 900, 40_000] {
            r.response(200, true, us);
        }
        let first = r.take_interval().unwrap();
        for us in [7, 8] {
            r.response(200, true, us);
        }
        let second = r.take_interval().unwrap();
        let third = r.take_interval().unwrap();
        assert_eq!(
            (first.len(), first.min(), first.max()),
            (3, 5, first.highest_equivalent(40_000))
        );
        assert_eq!((second.len(), second.min(), second.max()), (2, 7, 8));
        assert!(third.is_empty());
        assert_eq!(r.latency.len(), 5, "the whole keeps everything");
        assert!(Recorder::new(1, 0, false).take_interval().is_none());
    }

    #[test]
    fn merge_adds_everything() {
        let mut a = Recorder { sent: 3, ..Recorder::default() };
        a.response(200, true, 10);
        a.failure(ErrorClass::Read, 2, || "first".into());
        let mut b = Recorder { sent: 2, ..Recorder::default() };
        b.response(404, false, 20);
        b.failure(ErrorClass::Read, 1, || "second".into());
        b.failure(ErrorClass::Timeout, 1, || "late".into());
        a.merge(&b);
        assert_eq!((a.sent, a.completed, a.ok, a.failed), (5, 2, 1, 4));
        assert_eq!(a.errors, [0, 3, 0, 1, 0, 0, 0]);
        assert_eq!(a.examples[1].as_deref(), Some("first"));
        assert_eq!(a.examples[3].as_deref(), Some("late"));
        assert_eq!(a.statuses().collect::<Vec<_>>(), vec![(200, 1), (404, 1)]);
        assert_eq!(a.latency.len(), 2);
        assert_eq!(a.bad_status(), 1);
    }
}
