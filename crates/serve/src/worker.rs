//! One server worker: an epoll loop over its listeners and connections.
//!
//! Owns the connection life cycle: accept (with EMFILE back-off and the per-worker connection
//! cap), reading into the connection's buffer, parsing pipelined requests in order, reading and
//! discarding request bodies within limits, delayed responses (`t=`), writing every response a
//! read produced in one write, bounded output (reading pauses while too much is pending), the
//! header, body, idle and write deadlines, lingering close after errors, and draining on stop.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Read};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use qpslab_http::{parse_request, BodyFraming, ChunkedDecoder};
use socket2::Socket;

use crate::config::ServeConfig;
use crate::date::{imf_fixdate, now_secs, DATE_LEN};
use crate::inbuf::InBuf;
use crate::respond::{ErrorReply, Plan, Template};
use qpslab_sys::epoll::{self as poll, Epoll};

mod accept;
mod output;

/// Tokens with this bit are listeners; the rest are connection slots.
const LISTENER: u64 = 1 << 63;
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
}

#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    requests: u64,
    accepted: u64,
    rejected: u64,
    timeouts: u64,
    accept_errors: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Between requests or reading a head.
    Head,
    /// Reading (and discarding) a request body; the plan waits for its end.
    Body,
    /// Waiting for a `t=` delay to pass before answering.
    Delayed,
    /// Response sent, write side shut: draining input until EOF or the linger deadline.
    Lingering,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deadline {
    Idle,
    Header,
    Body,
    Write,
    Linger,
}

#[derive(Debug)]
enum BodyLeft {
    Length(u64),
    Chunked(ChunkedDecoder),
}

#[derive(Debug, Clone, Copy)]
struct Stream {
    left: u64,
    sent: u64,
    chunked: bool,
}

#[derive(Debug, Default)]
struct Conn {
    sock: Option<TcpStream>,
    gen: u32,
    inbuf: InBuf,
    out: Vec<u8>,
    out_pos: usize,
    phase: PhaseCell,
    plan: Option<Plan>,
    body: Option<BodyLeft>,
    stream: Option<Stream>,
    requests: u64,
    close_after: bool,
    /// Error response: linger after it instead of closing at once.
    linger_after: bool,
    deadline: Option<(Instant, Deadline)>,
    /// Edge-triggered readiness: data may be waiting (cleared by a short read or EAGAIN).
    readable: bool,
    /// Used its write budget; waits in the worker's yielded list for its next turn.
    yielded: bool,
    /// The peer shut down its writing side: read on to EOF instead of stopping at a short read.
    peer_closed: bool,
    /// EOF was read: answer what is buffered, then close.
    eof: bool,
    cache_bytes: Vec<u8>,
    cache_plan: Option<Plan>,
}

/// `Phase` with a default, so a slot can be `Default`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PhaseCell(Phase);

impl Default for PhaseCell {
    fn default() -> Self {
        PhaseCell(Phase::Head)
    }
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
}

impl WorkerCounters {
    /// The counters of several workers added up.
    pub fn sum(workers: &[WorkerCounters]) -> WorkerCounters {
        workers.iter().fold(WorkerCounters::default(), |a, w| WorkerCounters {
            requests: a.requests + w.requests,
            open: a.open + w.open,
            accepted: a.accepted + w.accepted,
            rejected: a.rejected + w.rejected,
            timeouts: a.timeouts + w.timeouts,
            accept_errors: a.accept_errors + w.accept_errors,
        })
    }
}

pub(crate) struct Worker<'a> {
    cfg: &'a ServeConfig,
    listeners: &'a [Socket],
    stop: &'a AtomicBool,
    stats: &'a WorkerStats,
    epoll: Epoll,
    conns: Vec<Conn>,
    free: Vec<usize>,
    open: usize,
    delays: BinaryHeap<Reverse<(Instant, usize, u32)>>,
    template: Template,
    date: [u8; DATE_LEN],
    date_secs: u64,
    counters: Counters,
    accepting: bool,
    accept_resume: Option<Instant>,
    draining_since: Option<Instant>,
    last_accept_log: Option<Instant>,
    /// Connections that used their write budget, to be driven again after this batch; the
    /// second vector keeps the first one's capacity across batches.
    yielded: Vec<(usize, u32)>,
    yielded_next: Vec<(usize, u32)>,
    /// Taken once per epoll batch: deadlines need no finer clock, and it saves a clock read
    /// per request.
    now: Instant,
}

impl<'a> Worker<'a> {
    pub(crate) fn new(
        cfg: &'a ServeConfig,
        listeners: &'a [Socket],
        stop: &'a AtomicBool,
        stats: &'a WorkerStats,
    ) -> io::Result<Self> {
        let date_secs = now_secs();
        let date = imf_fixdate(date_secs);
        let mut w = Self {
            cfg,
            listeners,
            stop,
            stats,
            epoll: Epoll::new()?,
            conns: Vec::new(),
            free: Vec::new(),
            open: 0,
            delays: BinaryHeap::new(),
            template: Template::new(cfg, &date),
            date,
            date_secs,
            counters: Counters::default(),
            accepting: false,
            accept_resume: None,
            draining_since: None,
            last_accept_log: None,
            now: Instant::now(),
            yielded: Vec::new(),
            yielded_next: Vec::new(),
        };
        w.set_accepting(true)?;
        Ok(w)
    }

    pub(crate) fn run(mut self) -> io::Result<WorkerCounters> {
        let mut events = vec![poll::empty_event(); 512];
        let mut now = Instant::now();
        self.now = now;
        let mut next_tick = now + TICK;
        loop {
            let mut wake = next_tick;
            if let Some(Reverse((t, _, _))) = self.delays.peek() {
                wake = wake.min(*t);
            }
            let timeout = if self.yielded.is_empty() { ms_until(now, wake) } else { 0 };
            let n = self.epoll.wait(&mut events, timeout)?;
            now = Instant::now();
            self.now = now;
            for ev in &events[..n] {
                let (token, flags) = (ev.u64, ev.events);
                if token & LISTENER != 0 {
                    self.accept((token & !LISTENER) as usize);
                } else {
                    self.on_event(token, flags);
                }
            }
            self.resume_yielded();
            self.fire_delays(now);
            if now >= next_tick {
                self.on_tick(now);
                next_tick = now + TICK;
            }
            if let Some(since) = self.draining_since {
                if self.open == 0 || now.duration_since(since) >= DRAIN {
                    break;
                }
            }
        }
        for idx in 0..self.conns.len() {
            self.close(idx);
        }
        self.publish();
        let c = self.counters;
        Ok(WorkerCounters {
            requests: c.requests,
            open: 0,
            accepted: c.accepted,
            rejected: c.rejected,
            timeouts: c.timeouts,
            accept_errors: c.accept_errors,
        })
    }

    fn on_event(&mut self, token: u64, flags: u32) {
        let idx = (token & 0xffff_ffff) as usize;
        let gen = (token >> 32) as u32;
        let live = |w: &Self| w.conns.get(idx).is_some_and(|c| c.gen == gen && c.sock.is_some());
        if !live(self) {
            return;
        }
        if flags & (poll::IN | poll::ERR | poll::RDHUP) != 0 {
            self.conns[idx].readable = true;
        }
        if flags & (poll::RDHUP | poll::ERR) != 0 {
            // Data and FIN can arrive in one edge: a short read is then not "drained".
            self.conns[idx].peer_closed = true;
        }
        if flags & poll::OUT != 0 {
            let c = &self.conns[idx];
            if c.out_pos < c.out.len() || c.stream.is_some() {
                self.flush(idx);
            }
        }
        if live(self) {
            self.drive(idx);
        }
    }

    /// Reads what the socket has, while input may be taken. Returns the bytes read; closes the
    /// connection on EOF or error.
    fn read_input(&mut self, idx: usize) -> usize {
        let max_head =
            self.cfg.settings.limits.max_request_line + self.cfg.settings.limits.max_header_bytes;
        let mut total = 0;
        loop {
            let c = &mut self.conns[idx];
            let Some(sock) = c.sock.as_ref() else { return total };
            if c.phase.0 == Phase::Lingering {
                c.inbuf.clear();
            }
            // Never hold more than a maximal head plus a read: the parser rejects larger heads.
            // Readiness stays set, so the rest is read once the buffer is consumed.
            if c.inbuf.len() > max_head + READ_CHUNK {
                return total;
            }
            let spare = c.inbuf.spare(READ_CHUNK);
            let room = spare.len();
            match (&*sock).read(spare) {
                Ok(0) => {
                    c.eof = true;
                    c.readable = false;
                    return total;
                }
                Ok(n) => {
                    c.inbuf.filled_by(n);
                    total += n;
                    if n < room && !c.peer_closed {
                        // A short read drained the socket: the next arrival is a new edge.
                        c.readable = false;
                        return total;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    c.readable = false;
                    return total;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.close(idx);
                    return total;
                }
            }
        }
    }

    /// Reads, parses, answers and writes until the connection waits for the network; closes it
    /// once the peer has closed and everything buffered was answered.
    fn drive(&mut self, idx: usize) {
        loop {
            let c = &self.conns[idx];
            if c.sock.is_none() {
                return;
            }
            if c.phase.0 == Phase::Lingering {
                if c.readable {
                    self.read_input(idx);
                    self.conns[idx].inbuf.clear();
                }
                break;
            }
            let mut progress = 0;
            if c.readable && !self.paused(idx) {
                progress += self.read_input(idx);
            }
            progress += self.consume(idx);
            self.flush(idx);
            let c = &self.conns[idx];
            if progress == 0 || c.sock.is_none() || self.paused(idx) {
                break;
            }
            if !c.readable && c.inbuf.is_empty() {
                break;
            }
        }
        self.close_if_finished(idx);
    }

    /// After EOF: close once every buffered request is answered and written. A request cut
    /// short by the EOF can never complete, so it does not hold the connection open.
    fn close_if_finished(&mut self, idx: usize) {
        let c = &self.conns[idx];
        let written = c.out_pos == c.out.len() && c.stream.is_none();
        if c.sock.is_some() && c.eof && written && c.phase.0 != Phase::Delayed {
            self.close(idx);
        }
    }

    /// Whether the connection must not take more input now.
    fn paused(&self, idx: usize) -> bool {
        let c = &self.conns[idx];
        c.close_after
            || c.stream.is_some()
            || c.out.len() - c.out_pos > OUT_HIGH
            || matches!(c.phase.0, Phase::Delayed | Phase::Lingering)
    }

    /// Parses and answers buffered requests in order. Returns how many steps it made.
    fn consume(&mut self, idx: usize) -> usize {
        let now = self.now;
        let mut steps = 0;
        while !self.conns[idx].inbuf.is_empty() && !self.paused(idx) {
            match self.conns[idx].phase.0 {
                Phase::Body => {
                    if !self.read_body(idx, now) {
                        break;
                    }
                }
                Phase::Head => match self.next_request(idx, now) {
                    Ok(Some(plan)) => self.start_request(idx, plan, now),
                    Ok(None) => break,
                    Err(e) => {
                        self.reject(idx, e);
                        break;
                    }
                },
                Phase::Delayed | Phase::Lingering => break,
            }
            steps += 1;
        }
        steps
    }

    /// The plan of the next complete request head, consuming it; `None` if incomplete.
    fn next_request(&mut self, idx: usize, now: Instant) -> Result<Option<Plan>, ErrorReply> {
        let cfg = self.cfg;
        let c = &mut self.conns[idx];
        if !matches!(c.deadline, Some((_, Deadline::Header))) {
            // One total deadline per head, from its first byte; not reset per byte.
            c.deadline = Some((now + cfg.settings.header_timeout, Deadline::Header));
        }
        if let Some(plan) = c.cache_plan {
            let n = c.cache_bytes.len();
            if c.inbuf.filled().starts_with(&c.cache_bytes) {
                c.inbuf.consume(n);
                return Ok(Some(plan));
            }
        }
        let parsed = match parse_request(c.inbuf.filled_mut(), &cfg.settings.limits) {
            Ok(None) => return Ok(None),
            Ok(Some((n, head))) => (n, Plan::new(&head, cfg)),
            Err(r) => return Err(ErrorReply { status: r.status, reason: r.reason }),
        };
        let (n, plan) = parsed;
        let plan = plan?;
        c.cache_plan = None;
        if n <= CACHED_HEAD_MAX {
            c.cache_bytes.clear();
            c.cache_bytes.extend_from_slice(&c.inbuf.filled()[..n]);
            c.cache_plan = Some(plan);
        }
        c.inbuf.consume(n);
        Ok(Some(plan))
    }

    fn start_request(&mut self, idx: usize, plan: Plan, now: Instant) {
        self.counters.requests += 1;
        let cfg = self.cfg;
        let c = &mut self.conns[idx];
        c.requests += 1;
        if plan.expect_continue {
            c.out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        match plan.request_body {
            BodyFraming::None => self.respond(idx, plan, now),
            BodyFraming::Length(n) => {
                c.plan = Some(plan);
                c.body = Some(BodyLeft::Length(n));
                c.phase = PhaseCell(Phase::Body);
                c.deadline = Some((now + cfg.settings.body_timeout, Deadline::Body));
            }
            BodyFraming::Chunked => {
                c.plan = Some(plan);
                c.body = Some(BodyLeft::Chunked(ChunkedDecoder::new()));
                c.phase = PhaseCell(Phase::Body);
                c.deadline = Some((now + cfg.settings.body_timeout, Deadline::Body));
            }
        }
    }

    /// Discards buffered body bytes; answers when the body is complete. False: need more.
    fn read_body(&mut self, idx: usize, now: Instant) -> bool {
        let max_body = self.cfg.settings.max_body;
        let c = &mut self.conns[idx];
        let data = c.inbuf.filled();
        let (used, done) = match c.body.as_mut() {
            Some(BodyLeft::Length(left)) => {
                let take = (*left).min(data.len() as u64);
                *left -= take;
                (take as usize, *left == 0)
            }
            Some(BodyLeft::Chunked(dec)) => match dec.decode(data) {
                Ok(p) if dec.data_bytes() > max_body => {
                    let _ = p;
                    let e = ErrorReply { status: 413, reason: "request body too large" };
                    self.reject(idx, e);
                    return false;
                }
                Ok(p) => (p.consumed, p.done),
                Err(_) => {
                    let e = ErrorReply { status: 400, reason: "malformed chunked body" };
                    self.reject(idx, e);
                    return false;
                }
            },
            None => (0, true),
        };
        c.inbuf.consume(used);
        if !done {
            return false;
        }
        c.body = None;
        c.phase = PhaseCell(Phase::Head);
        if let Some(plan) = c.plan.take() {
            self.respond(idx, plan, now);
        }
        true
    }

    fn fire_delays(&mut self, now: Instant) {
        while let Some(&Reverse((t, idx, gen))) = self.delays.peek() {
            if t > now {
                break;
            }
            self.delays.pop();
            let c = &mut self.conns[idx];
            if c.gen != gen || c.sock.is_none() || c.phase.0 != Phase::Delayed {
                continue;
            }
            c.phase = PhaseCell(Phase::Head);
            if let Some(plan) = c.plan.take() {
                self.respond(idx, plan, now);
            }
            self.drive(idx);
        }
    }

    fn on_tick(&mut self, now: Instant) {
        let secs = now_secs();
        if secs != self.date_secs {
            self.date_secs = secs;
            self.date = imf_fixdate(secs);
            self.template.set_date(&self.date);
        }
        if self.accept_resume.is_some_and(|t| now >= t) && self.draining_since.is_none() {
            self.accept_resume = None;
            let _ = self.set_accepting(true);
        }
        if !self.accepting
            && self.accept_resume.is_none()
            && self.draining_since.is_none()
            && self.open < self.cfg.settings.max_conns
        {
            let _ = self.set_accepting(true);
        }
        for idx in 0..self.conns.len() {
            let c = &self.conns[idx];
            if c.sock.is_none() {
                continue;
            }
            if let Some((t, kind)) = c.deadline {
                if now >= t {
                    if matches!(kind, Deadline::Header | Deadline::Body | Deadline::Write) {
                        self.counters.timeouts += 1;
                    }
                    self.close(idx);
                }
            }
        }
        if self.draining_since.is_none() && self.stop.load(Ordering::Relaxed) {
            self.start_draining(now);
        }
        self.publish();
    }

    /// Stop accepting; close idle connections; let the others finish their responses.
    fn start_draining(&mut self, now: Instant) {
        self.draining_since = Some(now);
        let _ = self.set_accepting(false);
        for idx in 0..self.conns.len() {
            let c = &mut self.conns[idx];
            if c.sock.is_none() {
                continue;
            }
            let busy = c.out_pos < c.out.len()
                || c.stream.is_some()
                || matches!(c.phase.0, Phase::Body | Phase::Delayed);
            if busy {
                c.close_after = true;
            } else {
                self.close(idx);
            }
        }
    }

    fn close(&mut self, idx: usize) {
        let c = &mut self.conns[idx];
        if c.sock.take().is_none() {
            return;
        }
        c.gen = c.gen.wrapping_add(1);
        c.inbuf.clear();
        c.out.clear();
        c.out_pos = 0;
        c.phase = PhaseCell(Phase::Head);
        c.plan = None;
        c.body = None;
        c.stream = None;
        c.requests = 0;
        c.close_after = false;
        c.linger_after = false;
        c.deadline = None;
        c.readable = false;
        c.yielded = false;
        c.peer_closed = false;
        c.eof = false;
        self.open -= 1;
        self.free.push(idx);
    }

    fn publish(&self) {
        let c = &self.counters;
        self.stats.requests.store(c.requests, Ordering::Relaxed);
        self.stats.accepted.store(c.accepted, Ordering::Relaxed);
        self.stats.rejected.store(c.rejected, Ordering::Relaxed);
        self.stats.timeouts.store(c.timeouts, Ordering::Relaxed);
        self.stats.accept_errors.store(c.accept_errors, Ordering::Relaxed);
        self.stats.open.store(self.open as u64, Ordering::Relaxed);
    }
}

fn token(idx: usize, gen: u32) -> u64 {
    (u64::from(gen) << 32) | idx as u64
}

fn ms_until(now: Instant, wake: Instant) -> i32 {
    let d = wake.saturating_duration_since(now);
    d.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
}
