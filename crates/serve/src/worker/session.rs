//! One connection's HTTP, without its socket: the bytes that arrived go in ([`Session::consume`]
//! parses the pipelined requests in order and answers them), the bytes to send come out
//! ([`Session::pending`]), and the loop tells it what the network did (written, blocked, EOF).
//! Request bodies within limits, delayed responses (`t=`), streamed bodies, error responses
//! with a lingering close, the header, body, idle and write deadlines: all here, once, for
//! every event loop (epoll and io_uring) that drives it. A connection that opens with the
//! HTTP/2 client preface is handed to its HTTP/2 sibling ([`super::h2`]) through the same
//! calls, so the loops do not know which protocol a connection speaks.

use std::cmp::Reverse;
use std::time::{Duration, Instant};

use qpslab_http::{parse_request, BodyFraming, ChunkedDecoder};

use crate::bufpool::BufPool;
use crate::config::ServeConfig;
use crate::inbuf::InBuf;
use crate::respond::{
    push_body, push_chunk, write_error, write_head, ErrorReply, Plan, BODY_PIECE,
};

use super::h2::{self, H2};
use super::{Shared, CACHED_HEAD_MAX, LINGER, OUT_HIGH};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Phase {
    /// Between requests or reading a head.
    #[default]
    Head,
    /// Reading (and discarding) a request body; the plan waits for its end.
    Body,
    /// Waiting for a `t=` delay to pass before answering.
    Delayed,
    /// Response sent, write side shut: draining input until EOF or the linger deadline.
    Lingering,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Deadline {
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

/// A worker's accepting: on or off, when a pause after a descriptor shortage ends, and when an
/// accept problem was last logged (at most once a second, so a shortage cannot flood stderr).
#[derive(Debug, Default)]
pub(super) struct AcceptGate {
    pub on: bool,
    pub resume_at: Option<Instant>,
    last_log: Option<Instant>,
}

impl AcceptGate {
    /// On a tick: whether to accept again, because a pause ended or the worker is below
    /// `--max-conns` again; never while draining.
    pub fn reopen(&mut self, now: Instant, draining: bool, open: usize, max: usize) -> bool {
        if draining {
            return false;
        }
        if self.resume_at.is_some_and(|t| now >= t) {
            self.resume_at = None;
            return true;
        }
        !self.on && self.resume_at.is_none() && open < max
    }

    pub fn log(&mut self, now: Instant, msg: &str) {
        if self.last_log.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1)) {
            self.last_log = Some(now);
            eprintln!("qpslab serve: {msg}");
        }
    }
}

/// What to do once all output is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterOutput {
    /// Keep the connection.
    Keep,
    /// Close it now.
    Close,
    /// Shut down its writing side and drain its input until EOF or the linger deadline.
    Linger,
}

/// One connection's protocol state.
#[derive(Debug, Default)]
pub(super) struct Session {
    /// Bumped on every close, so late events of a previous connection in the slot are ignored.
    pub gen: u32,
    pub inbuf: InBuf,
    /// Response bytes; those from `out_pos` on are still to be sent.
    pub out: Vec<u8>,
    pub out_pos: usize,
    pub phase: Phase,
    plan: Option<Plan>,
    body: Option<BodyLeft>,
    stream: Option<Stream>,
    requests: u64,
    pub close_after: bool,
    /// Error response: linger after it instead of closing at once.
    linger_after: bool,
    pub deadline: Option<(Instant, Deadline)>,
    /// EOF was read: answer what is buffered, then close.
    pub eof: bool,
    /// The worker's request cache entry this connection last used.
    cache_hint: u8,
    /// HTTP/2: the connection began with the client preface.
    h2: Option<Box<H2>>,
}

impl Session {
    /// A new connection: it must send a head before the header deadline.
    pub fn open(&mut self, now: Instant, cfg: &ServeConfig) {
        self.phase = Phase::Head;
        self.deadline = Some((now + cfg.settings.header_timeout, Deadline::Header));
    }

    /// Forgets the connection; its buffers go back to the worker's pool.
    pub fn reset(&mut self, pool: &mut BufPool) {
        self.gen = self.gen.wrapping_add(1);
        self.inbuf.clear();
        self.inbuf.release(pool);
        pool.give_output(std::mem::take(&mut self.out));
        self.out_pos = 0;
        self.phase = Phase::Head;
        self.plan = None;
        self.body = None;
        self.stream = None;
        self.requests = 0;
        self.close_after = false;
        self.linger_after = false;
        self.deadline = None;
        self.eof = false;
        self.h2 = None;
    }

    /// Takes input storage from the worker's pool if the connection gave its own back.
    #[inline]
    pub fn ensure_input(&mut self, pool: &mut BufPool) {
        self.inbuf.ensure(pool);
    }

    /// An idle connection (every request answered and sent, nothing buffered, nothing pending;
    /// over HTTP/2 no stream open) gives its buffers back to the worker's pool; `spare` is the
    /// loop's own output buffer, if it keeps one. Returns whether it did.
    pub fn release_if_idle(&mut self, sh: &mut Shared<'_>, spare: Option<&mut Vec<u8>>) -> bool {
        let idle = self.phase == Phase::Head
            && self.inbuf.is_empty()
            && self.out_pos == self.out.len()
            && self.stream.is_none()
            && self.h2.as_ref().is_none_or(|h| h.idle())
            && !self.close_after;
        if !idle {
            return false;
        }
        let pool = &mut sh.pool;
        self.inbuf.release(pool);
        if let Some(h) = self.h2.as_mut() {
            h.release(&mut sh.h2);
        }
        self.out_pos = 0;
        if self.out.capacity() > 0 {
            pool.give_output(std::mem::take(&mut self.out));
        }
        if let Some(s) = spare.filter(|s| s.capacity() > 0) {
            pool.give_output(std::mem::take(s));
        }
        true
    }

    /// Whether the connection must not take more input now (`in_flight`: bytes the loop is
    /// still sending that are no longer in `out`).
    pub fn paused(&self, in_flight: usize) -> bool {
        self.close_after
            || self.stream.is_some()
            || self.out.len() - self.out_pos + in_flight > OUT_HIGH
            || matches!(self.phase, Phase::Delayed | Phase::Lingering)
    }

    /// Output waits to be sent (buffered, or a streamed body's next pieces).
    pub fn has_output(&self) -> bool {
        self.out_pos < self.out.len()
            || self.stream.is_some()
            || self.h2.as_ref().is_some_and(|h| h.can_send())
    }

    /// After EOF: done once every buffered request is answered and written. A request cut
    /// short by the EOF can never complete, so it does not hold the connection open.
    pub fn finished(&self, in_flight: usize) -> bool {
        self.eof
            && !self.has_output()
            && in_flight == 0
            && self.phase != Phase::Delayed
            && self.h2.as_ref().is_none_or(|h| h.next_delay().is_none())
    }

    /// Parses and answers buffered requests in order. Returns how many steps it made.
    pub fn consume(
        &mut self,
        sh: &mut Shared<'_>,
        slot: usize,
        in_flight: usize,
        now: Instant,
    ) -> usize {
        if self.out.capacity() == 0 {
            self.out = sh.pool.output();
        }
        if self.h2.is_none() && self.requests == 0 && self.phase == Phase::Head {
            match h2::preface(self.inbuf.filled()) {
                Some(true) => {
                    self.inbuf.consume(qpslab_http::h2::frame::PREFACE.len());
                    self.h2 = Some(Box::new(H2::start(sh.cfg, &mut self.out, self.gen)));
                    self.deadline = Some((now + sh.cfg.settings.idle_timeout, Deadline::Idle));
                }
                Some(false) => return 0,
                None => {}
            }
        }
        if self.h2.is_some() {
            return self.consume_h2(sh, slot, in_flight, now);
        }
        let mut steps = 0;
        while !self.inbuf.is_empty() && !self.paused(in_flight) {
            match self.phase {
                Phase::Body => {
                    if !self.read_body(sh, slot, now) {
                        break;
                    }
                }
                Phase::Head => match self.next_request(sh, now) {
                    Ok(Some(plan)) => self.start_request(sh, slot, plan, now),
                    Ok(None) => break,
                    Err(e) => {
                        self.reject(sh, e);
                        break;
                    }
                },
                Phase::Delayed | Phase::Lingering => break,
            }
            steps += 1;
        }
        steps
    }

    /// HTTP/2: every whole frame buffered; an error ends the connection with a GOAWAY.
    fn consume_h2(
        &mut self,
        sh: &mut Shared<'_>,
        slot: usize,
        in_flight: usize,
        now: Instant,
    ) -> usize {
        if self.inbuf.is_empty() || self.paused(in_flight) {
            return 0;
        }
        let Some(h) = self.h2.as_mut() else { return 0 };
        let frames = match h.consume(&mut self.inbuf, &mut self.out, sh, slot, now) {
            Ok(n) => n,
            Err(e) => {
                // A client that broke the protocol is refused, as a malformed HTTP/1.1
                // request is.
                sh.counters.rejected += 1;
                h.goaway(&mut self.out, e.code);
                self.inbuf.clear();
                self.close_after = true;
                self.linger_after = true;
                1
            }
        };
        if h.going_away && !h.busy() {
            self.close_after = true;
        }
        if frames > 0 {
            self.deadline = Some((now + sh.cfg.settings.idle_timeout, Deadline::Idle));
        }
        frames
    }

    /// The plan of the next complete request head, consuming it; `None` if incomplete.
    fn next_request(
        &mut self,
        sh: &mut Shared<'_>,
        now: Instant,
    ) -> Result<Option<Plan>, ErrorReply> {
        let cfg = sh.cfg;
        if !matches!(self.deadline, Some((_, Deadline::Header))) {
            // One total deadline per head, from its first byte; not reset per byte.
            self.deadline = Some((now + cfg.settings.header_timeout, Deadline::Header));
        }
        if let Some((n, plan)) = sh.cache.lookup(self.inbuf.filled(), &mut self.cache_hint) {
            self.inbuf.consume(n);
            return Ok(Some(plan));
        }
        let (n, plan) = match parse_request(self.inbuf.filled_mut(), &cfg.settings.limits) {
            Ok(None) => return Ok(None),
            Ok(Some((n, head))) => (n, Plan::new(&head, cfg)),
            Err(r) => return Err(ErrorReply { status: r.status, reason: r.reason }),
        };
        let plan = plan?;
        if n <= CACHED_HEAD_MAX {
            self.cache_hint = sh.cache.insert(&self.inbuf.filled()[..n], plan);
        }
        self.inbuf.consume(n);
        Ok(Some(plan))
    }

    fn start_request(&mut self, sh: &mut Shared<'_>, slot: usize, plan: Plan, now: Instant) {
        sh.counters.requests += 1;
        self.requests += 1;
        if plan.expect_continue {
            self.out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        let body_deadline = now + sh.cfg.settings.body_timeout;
        match plan.request_body {
            BodyFraming::None => self.respond(sh, slot, plan, now),
            BodyFraming::Length(n) => {
                self.plan = Some(plan);
                self.body = Some(BodyLeft::Length(n));
                self.phase = Phase::Body;
                self.deadline = Some((body_deadline, Deadline::Body));
            }
            BodyFraming::Chunked => {
                self.plan = Some(plan);
                self.body = Some(BodyLeft::Chunked(ChunkedDecoder::new()));
                self.phase = Phase::Body;
                self.deadline = Some((body_deadline, Deadline::Body));
            }
        }
    }

    /// Discards buffered body bytes; answers when the body is complete. False: need more.
    fn read_body(&mut self, sh: &mut Shared<'_>, slot: usize, now: Instant) -> bool {
        let max_body = sh.cfg.settings.max_body;
        let data = self.inbuf.filled();
        let (used, done) = match self.body.as_mut() {
            Some(BodyLeft::Length(left)) => {
                let take = (*left).min(data.len() as u64);
                *left -= take;
                (take as usize, *left == 0)
            }
            Some(BodyLeft::Chunked(dec)) => match dec.decode(data) {
                Ok(_) if dec.data_bytes() > max_body => {
                    let e = ErrorReply { status: 413, reason: "request body too large" };
                    self.reject(sh, e);
                    return false;
                }
                Ok(p) => (p.consumed, p.done),
                Err(_) => {
                    let e = ErrorReply { status: 400, reason: "malformed chunked body" };
                    self.reject(sh, e);
                    return false;
                }
            },
            None => (0, true),
        };
        self.inbuf.consume(used);
        if !done {
            return false;
        }
        self.body = None;
        self.phase = Phase::Head;
        if let Some(plan) = self.plan.take() {
            self.respond(sh, slot, plan, now);
        }
        true
    }

    /// Writes the response into `out` (or schedules it, for `t=`).
    fn respond(&mut self, sh: &mut Shared<'_>, slot: usize, plan: Plan, now: Instant) {
        let cfg = sh.cfg;
        if plan.delay_ms > 0 {
            let until = now + Duration::from_millis(u64::from(plan.delay_ms));
            self.plan = Some(Plan { delay_ms: 0, ..plan });
            self.phase = Phase::Delayed;
            self.deadline = None;
            sh.delays.push(Reverse((until, slot, self.gen)));
            return;
        }
        let close =
            !plan.keep_alive || self.requests >= cfg.settings.keepalive_requests || sh.draining;
        if sh.template.matches(&plan, close) {
            self.out.extend_from_slice(&sh.template.bytes);
        } else {
            write_head(&mut self.out, &plan, close, &sh.date, cfg.alt_svc.as_deref());
            if plan.head_only || matches!(plan.status, 204 | 304) {
            } else if plan.streams_body() {
                self.stream = Some(Stream { left: plan.body_len, sent: 0, chunked: plan.chunked });
            } else if plan.chunked {
                if plan.body_len > 0 {
                    push_chunk(&mut self.out, plan.body_len as usize, 0);
                }
                push_chunk(&mut self.out, 0, 0);
            } else {
                push_body(&mut self.out, plan.body_len as usize, 0);
            }
        }
        self.phase = Phase::Head;
        self.deadline = Some((now + cfg.settings.idle_timeout, Deadline::Idle));
        if close {
            self.close_after = true;
        }
    }

    /// A delayed response's time came: answers it. False when it no longer waits.
    pub fn fire_delay(&mut self, sh: &mut Shared<'_>, slot: usize, now: Instant) -> bool {
        if let Some(h) = self.h2.as_mut() {
            h.fire_delays(&mut self.out, sh, slot, now);
            return true;
        }
        if self.phase != Phase::Delayed {
            return false;
        }
        self.phase = Phase::Head;
        if let Some(plan) = self.plan.take() {
            self.respond(sh, slot, plan, now);
        }
        true
    }

    /// Answers with an error status and closes after it (lingering).
    fn reject(&mut self, sh: &mut Shared<'_>, e: ErrorReply) {
        sh.counters.rejected += 1;
        write_error(&mut self.out, e.status, e.reason, &sh.date);
        self.inbuf.clear();
        self.body = None;
        self.plan = None;
        self.phase = Phase::Head;
        self.close_after = true;
        self.linger_after = true;
    }

    /// The bytes to send next: what is buffered, or the next piece of a streamed body (empty
    /// when nothing waits).
    pub fn pending(&mut self) -> &[u8] {
        let h2_waits = self.h2.as_ref().is_some_and(|h| h.can_send());
        if self.out_pos == self.out.len()
            && (self.out_pos != 0 || self.stream.is_some() || h2_waits)
        {
            self.out.clear();
            self.out_pos = 0;
            match self.h2.as_mut() {
                Some(h) => h.refill(&mut self.out),
                None => {
                    self.next_stream_piece();
                }
            }
        }
        &self.out[self.out_pos..]
    }

    /// Puts the next piece of a streamed body (or its last chunk) into the empty output
    /// buffer. False when no body is streaming.
    fn next_stream_piece(&mut self) -> bool {
        let Some(s) = self.stream.as_mut() else { return false };
        if s.left == 0 {
            if s.chunked {
                push_chunk(&mut self.out, 0, s.sent);
            }
            self.stream = None;
            return true;
        }
        let n = s.left.min(BODY_PIECE as u64) as usize;
        if s.chunked {
            push_chunk(&mut self.out, n, s.sent);
        } else {
            push_body(&mut self.out, n, s.sent);
        }
        s.left -= n as u64;
        s.sent += n as u64;
        true
    }

    /// `n` bytes of the output were sent.
    pub fn wrote(&mut self, n: usize, now: Instant, cfg: &ServeConfig) {
        self.out_pos += n;
        self.progressed(now, cfg);
    }

    /// Output the loop took out of `out` (into a buffer of its own) made progress: the idle
    /// and write deadlines, for a client that stops reading, move with progress.
    pub fn progressed(&mut self, now: Instant, cfg: &ServeConfig) {
        if matches!(self.deadline, Some((_, Deadline::Write | Deadline::Idle))) {
            self.deadline = Some((now + cfg.settings.idle_timeout, Deadline::Write));
        }
    }

    /// Takes the pending output for the loop to send from a buffer of its own: `spare` (an
    /// empty buffer, kept for its capacity) takes `out`'s place. Returns the buffer and where
    /// the pending bytes start in it; None (and `spare` untouched) when nothing waits.
    pub fn take_output(&mut self, spare: &mut Vec<u8>) -> Option<(Vec<u8>, usize)> {
        if self.pending().is_empty() {
            return None;
        }
        let from = std::mem::replace(&mut self.out_pos, 0);
        std::mem::swap(&mut self.out, spare);
        Some((std::mem::take(spare), from))
    }

    /// The socket took no more: the write deadline runs.
    pub fn write_blocked(&mut self, now: Instant, cfg: &ServeConfig) {
        if !matches!(self.deadline, Some((_, Deadline::Write))) {
            self.deadline = Some((now + cfg.settings.idle_timeout, Deadline::Write));
        }
    }

    /// Everything is sent: back to the idle deadline, and whether to close or linger now.
    pub fn output_done(&mut self, now: Instant, cfg: &ServeConfig) -> AfterOutput {
        if matches!(self.deadline, Some((_, Deadline::Write))) {
            self.deadline = Some((now + cfg.settings.idle_timeout, Deadline::Idle));
        }
        if self.h2.as_ref().is_some_and(|h| h.going_away && !h.busy()) {
            self.close_after = true;
        }
        // A response still to come (a delay, a body being read) holds a closing connection.
        if !self.close_after
            || matches!(self.phase, Phase::Lingering | Phase::Delayed | Phase::Body)
        {
            return AfterOutput::Keep;
        }
        if !self.linger_after {
            return AfterOutput::Close;
        }
        self.phase = Phase::Lingering;
        self.inbuf.clear();
        self.deadline = Some((now + LINGER, Deadline::Linger));
        AfterOutput::Linger
    }

    /// A deadline passed at `now`: whether it counts as a timeout (header, body, write; idle
    /// and linger ends do not). None: no deadline passed.
    pub fn expired(&self, now: Instant) -> Option<bool> {
        let (t, kind) = self.deadline?;
        (now >= t).then_some(matches!(kind, Deadline::Header | Deadline::Body | Deadline::Write))
    }

    /// When the worker starts draining: false when the connection is idle and can close now;
    /// otherwise it closes after its current response.
    pub fn drain(&mut self) -> bool {
        if let Some(h) = self.h2.as_mut() {
            // GOAWAY with the last stream taken: the client retries later ones elsewhere.
            h.goaway(&mut self.out, qpslab_http::h2::frame::code::NO_ERROR);
            self.close_after = true;
            return true;
        }
        let busy = self.has_output() || matches!(self.phase, Phase::Body | Phase::Delayed);
        if busy {
            self.close_after = true;
        }
        busy
    }
}
