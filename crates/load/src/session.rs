//! One connection's HTTP/1.1, client side, without its socket (sans-I/O, as serve's session
//! is for the server side): which requests go next (a slice of the target group's pre-encoded
//! request bytes, several when pipelining), what a read completes (responses parsed in place,
//! a split head carried to the next read), what the end of the input means, and which
//! requests to write again on a new connection. The load thread's loop (epoll or io_uring,
//! plain or TLS underneath) moves the bytes; the engine does the accounting with what this
//! hands back. Its sibling [`h2::Http2`] gives the engine the same answers for HTTP/2;
//! [`Session`] is either.

pub mod fuzzing;
pub(crate) mod h2;
pub(crate) mod h3;

use std::collections::VecDeque;
use std::time::Instant;

use qpslab_http::{Response, ResponseParser};

use crate::targets::Group;
use crate::template::Ids;
use h2::Http2;

/// A request written on the connection (or to be written), waiting for its response.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Req {
    pub sent_at: Instant,
    /// When it was meant to go: its open-loop slot, else `sent_at`. Latency counts from here.
    pub intended: Instant,
    /// Counts in every figure: issued in the measured window, or issued in the warm-up and
    /// still outstanding when the window opened (its response completes in the window).
    pub counted: bool,
    /// Issued in the warm-up (its intended send time before the window): its response counts
    /// in the rate when it completes in the window; `--exclude-warmup-latency` keeps it out of
    /// the latency figures.
    pub warm: bool,
    /// Sent again once already, after its reused connection closed before responding.
    pub retried: bool,
    pub target: u32,
    /// Its position in the group's request cycle (its bytes, its header block).
    pub pos: u32,
    /// Its number, from which its `{seq}` and `{rand}` IDs are written (see
    /// [`crate::template::Ids`]; 0 in a group without them); kept when it is sent again.
    pub id: u64,
}

/// What parsing a read's worth of bytes left the connection in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Absorbed {
    Keep,
    /// The server ends the connection after this response.
    Close,
}

/// What the end of the server's input means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// It ended a close-delimited response, which was handed over.
    Response,
    /// Nothing was waiting: the server closed an idle connection.
    Idle,
    /// Requests were waiting for a response that will not come.
    Unanswered,
}

/// One connection's HTTP/1.1 exchange.
#[derive(Debug)]
pub(crate) struct Http1 {
    /// The target group the connection belongs to (its address).
    pub group: usize,
    parser: ResponseParser,
    /// Unconsumed bytes of a response head split across reads.
    carry: Vec<u8>,
    inflight: VecDeque<Req>,
    /// The part of the group's request bytes still to write.
    write_pos: usize,
    write_end: usize,
    /// Requests written again on a new connection: the ranges of the group's request bytes
    /// to write after this one, last first.
    runs: Vec<(usize, usize)>,
    /// A group whose requests carry IDs: the requests being written, copied from the group's
    /// bytes with their IDs in place (the write range is in here then). Shared like the
    /// group's bytes, so an io_uring send can hold it; written only when nothing else does.
    own: Option<std::sync::Arc<[u8]>>,
    /// `own` holds this position's request alone, with an earlier request's IDs.
    own_pos: Option<u32>,
    own_len: usize,
    depth: usize,
    /// A response has arrived on the current connection, or it was opened before the run and
    /// waited idle for its first request.
    pub reused: bool,
}

impl Http1 {
    /// The exchange of a connection of `group`.
    pub fn new(group: usize, depth: usize) -> Self {
        Http1 {
            group,
            parser: ResponseParser::default(),
            carry: Vec::new(),
            inflight: VecDeque::with_capacity(depth),
            write_pos: 0,
            write_end: 0,
            runs: Vec::new(),
            own: None,
            own_pos: None,
            own_len: 0,
            depth,
            reused: false,
        }
    }

    /// The bytes the write range is in: the group's, or with IDs this connection's copy.
    #[inline]
    pub fn bytes<'a>(&'a self, group: &'a Group) -> &'a std::sync::Arc<[u8]> {
        match &self.own {
            Some(own) if group.templated() => own,
            _ => &group.h1.wire,
        }
    }

    /// With IDs, the common case: the last request alone is the one the connection's copy
    /// holds already, and only needs its digits (a single send at a time: nothing else holds
    /// the copy by now). False when it is not.
    #[inline(always)]
    fn rewrite_last(&mut self, group: &Group, ids: &Ids) -> bool {
        let Some(r) = self.inflight.back() else { return false };
        if self.own_pos != Some(r.pos) {
            return false;
        }
        let buf = self.own.as_mut().and_then(std::sync::Arc::get_mut);
        let (Some(buf), Some(t)) = (buf, group.template(r.pos as usize)) else { return false };
        crate::template::Template::write(&t.h1, r.id, Some(ids.digits()), buf);
        (self.write_pos, self.write_end) = (0, self.own_len);
        true
    }

    /// With IDs: the requests in flight from the `from`-th on, copied into the connection's
    /// buffer with their IDs written in place, become the write range.
    #[inline(never)]
    fn render(&mut self, group: &Group, from: usize, ids: Option<&Ids>) {
        let most = group.h1.longest * (self.inflight.len() - from);
        let free = self
            .own
            .as_mut()
            .is_some_and(|b| b.len() >= most && std::sync::Arc::get_mut(b).is_some());
        if !free {
            // First use, or a send of the closed connection still holds the old copy.
            self.own = Some(vec![0u8; most.max(group.h1.longest * self.depth)].into());
            self.own_pos = None;
        }
        let Some(buf) = self.own.as_mut().and_then(std::sync::Arc::get_mut) else { return };
        let single = from + 1 == self.inflight.len();
        if let (true, Some(r)) = (single, self.inflight.back()) {
            let n = copy_request(group, r, ids, buf);
            (self.own_pos, self.own_len) = (Some(r.pos), n);
            (self.write_pos, self.write_end) = (0, n);
            return;
        }
        self.own_pos = None;
        let mut at = 0;
        for r in self.inflight.range(from..) {
            at += copy_request(group, r, ids, &mut buf[at..]);
        }
        (self.write_pos, self.write_end) = (0, at);
    }

    /// Requests written and not answered yet.
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    pub fn requests(&self) -> impl Iterator<Item = &Req> {
        self.inflight.iter()
    }

    pub fn requests_mut(&mut self) -> impl Iterator<Item = &mut Req> {
        self.inflight.iter_mut()
    }

    /// When the oldest request unanswered was written.
    pub fn oldest_sent(&self) -> Option<Instant> {
        self.inflight.front().map(|r| r.sent_at)
    }

    /// Part of a batch is still to be written.
    pub fn writing(&self) -> bool {
        self.write_pos != self.write_end
    }

    /// What to write next: a range of the group's request bytes.
    pub fn to_write(&self) -> (usize, usize) {
        (self.write_pos, self.write_end)
    }

    /// `n` bytes of the batch went out.
    pub fn wrote(&mut self, n: usize) {
        self.write_pos += n;
        if self.write_pos >= self.write_end {
            (self.write_pos, self.write_end) = self.runs.pop().unwrap_or((0, 0));
        }
    }

    /// The next `k` requests of the group's cycle from `cursor` (which moves past them) go out
    /// as one write (a pipelined batch); `make(i, target, pos)` gives the i-th its timing and
    /// accounting, `ids` its number.
    pub fn queue(
        &mut self,
        group: &Group,
        cursor: &mut usize,
        k: usize,
        ids: &mut Ids,
        make: impl FnMut(usize, u32, u32) -> Req,
    ) {
        let from = *cursor;
        each_request(group, cursor, k, ids, make, |_, req, _| self.inflight.push_back(req));
        if !group.templated() {
            (self.write_pos, self.write_end) = group.slice(from, k);
        } else if k != 1 || !self.rewrite_last(group, ids) {
            self.render(group, self.inflight.len() - k, Some(ids));
        }
    }

    /// On a new connection: the requests the old one did not answer go again, in order, as
    /// they were (their intended times kept, `now` as their write); requests next to each
    /// other in the cycle in one range.
    pub fn resend(&mut self, group: &Group, now: Instant) {
        if group.templated() {
            for r in &mut self.inflight {
                r.sent_at = now;
            }
            // With the IDs they had.
            return self.render(group, 0, None);
        }
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for r in &mut self.inflight {
            r.sent_at = now;
            let pos = r.pos as usize;
            match runs.last_mut() {
                Some((start, n)) if *start + *n == pos => *n += 1,
                _ => runs.push((pos, 1)),
            }
        }
        self.runs = runs.into_iter().rev().map(|(pos, n)| group.slice(pos, n)).collect();
        (self.write_pos, self.write_end) = self.runs.pop().unwrap_or((0, 0));
    }

    /// Parses `data` (after any carried head bytes); each complete response is handed to
    /// `answered` with its request. `heads` says which targets are HEAD requests (their
    /// responses have no body); with `one_request` the connection ends after a response.
    pub fn absorb(
        &mut self,
        data: &[u8],
        heads: &[bool],
        one_request: bool,
        mut answered: impl FnMut(Req, Response),
    ) -> Result<Absorbed, String> {
        let mut carry = std::mem::take(&mut self.carry);
        let outcome = with_carry(&mut carry, data, |data| {
            let mut off = 0;
            while off < data.len() {
                let head = self.inflight.front().is_some_and(|r| heads[r.target as usize]);
                let step = match self.parser.feed(&data[off..], head) {
                    Ok(step) => step,
                    Err(e) => return (off, Err(e.to_string())),
                };
                off += step.consumed;
                let Some(resp) = step.response else { break };
                let Some(req) = self.inflight.pop_front() else {
                    return (off, Err("response received with no request in flight".into()));
                };
                self.reused = true;
                answered(req, resp);
                if !resp.keep_alive || one_request {
                    return (off, Ok(Absorbed::Close));
                }
            }
            (off, Ok(Absorbed::Keep))
        });
        self.carry = carry;
        outcome
    }

    /// The server's input ended; a close-delimited response it completes is handed to
    /// `answered`.
    pub fn eof(&mut self, answered: impl FnOnce(Req, Response)) -> Result<Ended, String> {
        match self.parser.eof(self.carry.len()).map_err(|e| e.to_string())? {
            Some(resp) => {
                if let Some(req) = self.inflight.pop_front() {
                    answered(req, resp);
                }
                Ok(Ended::Response)
            }
            None if self.inflight.is_empty() => Ok(Ended::Idle),
            None => Ok(Ended::Unanswered),
        }
    }

    /// The connection closed before any byte of the responses to its requests, which are
    /// all `idempotent` and never sent again: on a reused connection this is the keep-alive
    /// close race (RFC 9112 9.3.1), and they may go again, once. Marks them as sent again.
    pub fn retry_after_race(&mut self, idempotent: &[bool]) -> bool {
        let race = self.reused
            && self.carry.is_empty()
            && self.parser.at_boundary()
            && !self.inflight.is_empty()
            && self.inflight.iter().all(|r| !r.retried && idempotent[r.target as usize]);
        if race {
            for r in &mut self.inflight {
                r.retried = true;
            }
        }
        race
    }

    /// The connection closes with requests unanswered that will be written again on the next
    /// one (each keeps its position in the cycle): how many there are.
    pub fn unanswered(&self) -> usize {
        self.inflight.len()
    }

    /// The connection is gone: nothing half-read or half-written is kept (requests in
    /// flight stay, for [`Http1::resend`] or [`Http1::forget`]).
    pub fn closed(&mut self) {
        self.parser.reset();
        self.carry.clear();
        self.write_pos = 0;
        self.write_end = 0;
        self.runs.clear();
        self.reused = false;
    }

    /// Drops the requests in flight (failed, or reused).
    pub fn forget(&mut self) {
        self.inflight.clear();
    }
}

/// Runs `parse` over the input not yet parsed (what an earlier read left in `carry`, then
/// `data`) and keeps what it did not consume (`parse` returns how much it did) for the next
/// read: a response head or frame split across reads. Nothing is copied when nothing was left.
pub(crate) fn with_carry<R>(
    carry: &mut Vec<u8>,
    data: &[u8],
    parse: impl FnOnce(&[u8]) -> (usize, R),
) -> R {
    if carry.is_empty() {
        let (off, r) = parse(data);
        carry.extend_from_slice(&data[off..]);
        return r;
    }
    carry.extend_from_slice(data);
    let (off, r) = parse(carry);
    carry.drain(..off);
    r
}

/// Bytes for a connection's transport to send.
#[derive(Debug)]
pub(crate) enum Out<'a> {
    /// `bytes[from..to]`, unchanged until the send ends (the run's requests, or a
    /// connection's copy of them).
    Shared(&'a std::sync::Arc<[u8]>, usize, usize),
    /// Bytes for the call only: what a loop that sends at once is given.
    Lent(&'a [u8]),
    /// A buffer the send takes from `from` on, handed back when it ends.
    Owned(Vec<u8>, usize),
}

/// One connection's protocol: HTTP/1.1 or HTTP/2, the same answers to the engine.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "HTTP/1.1, the common and cheapest exchange, stays inline; HTTP/2's is boxed"
)]
pub(crate) enum Session {
    H1(Http1),
    H2(Box<Http2>),
}

/// Calls the same method on either session.
macro_rules! either {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            Session::H1($s) => $e,
            Session::H2($s) => $e,
        }
    };
}

impl Session {
    /// The run's protocol on a connection of `group`: HTTP/2 with its settings, else HTTP/1.1
    /// pipelined `depth` deep.
    pub fn new(group: usize, h2: Option<h2::H2Settings>, depth: usize) -> Session {
        match h2 {
            Some(h2) => Session::H2(Box::new(Http2::new(group, h2))),
            None => Session::H1(Http1::new(group, depth)),
        }
    }

    /// Whether the protocol a TLS handshake settled on (ALPN) is this session's: HTTP/2 must
    /// have been chosen; HTTP/1.1 is what a server that chose nothing speaks.
    pub fn speaks(&self, alpn: Option<&[u8]>) -> Result<(), String> {
        match self {
            Session::H2(_) if alpn != Some(b"h2") => Err(crate::tls::not_h2(alpn)),
            _ => Ok(()),
        }
    }

    /// Why the first bytes a server sent say it speaks another protocol, if they do.
    pub fn other_protocol(&self, first: &[u8]) -> Option<String> {
        other_protocol(first, matches!(self, Session::H2(_)))
    }

    /// The measured window opens: HTTP/2's counts of the warm-up go, what the server
    /// announced stays.
    pub fn window_opened(&mut self) {
        if let Session::H2(h) = self {
            h.counts = h2::H2Counts {
                max_streams: h.counts.max_streams,
                window: h.counts.window,
                ..Default::default()
            };
        }
    }

    /// Streaming gRPC calls: the gaps between response messages since the last call, each
    /// handed to `f`.
    pub fn take_message_gaps(&mut self, f: impl FnMut(u64)) {
        if let Session::H2(h) = self {
            h.take_message_gaps().for_each(f);
        }
    }

    /// gRPC with `--check-response`: the first OK answer's message on this connection, once.
    pub fn take_first_message(&mut self) -> Option<Vec<u8>> {
        match self {
            Session::H1(_) => None,
            Session::H2(h) => h.take_first_message(),
        }
    }

    /// HTTP/2's counts (frames, resets, the server's settings).
    pub fn h2_counts(&self) -> Option<&h2::H2Counts> {
        match self {
            Session::H1(_) => None,
            Session::H2(h) => Some(&h.counts),
        }
    }

    /// What to send next, if anything: HTTP/1.1's range of the group's requests (shared, so
    /// a send that outlives the call holds them), HTTP/2's own frames lent for a send made
    /// within the call (`at_once`) or handed over (`spare` takes their place).
    #[inline]
    pub fn output<'a>(
        &'a mut self,
        group: &'a Group,
        spare: &mut Vec<u8>,
        at_once: bool,
    ) -> Option<Out<'a>> {
        match self {
            Session::H1(s) if s.writing() => {
                let (from, to) = s.to_write();
                Some(Out::Shared(s.bytes(group), from, to))
            }
            Session::H2(s) if s.writing() => {
                if at_once {
                    Some(Out::Lent(s.pending()))
                } else {
                    let (buf, from) = s.take_output(std::mem::take(spare));
                    Some(Out::Owned(buf, from))
                }
            }
            _ => None,
        }
    }

    /// A send of what [`Session::output`] gave ended with `n` bytes written (`buf`: the
    /// buffer it was handed, and where the send began; it becomes `spare`).
    #[inline]
    pub fn sent(&mut self, n: usize, buf: Option<(Vec<u8>, usize)>, spare: &mut Vec<u8>) {
        match (self, buf) {
            (Session::H2(s), Some((b, from))) => *spare = s.sent(b, from, n),
            (s, _) => s.wrote(n),
        }
    }

    #[inline]
    pub fn group(&self) -> usize {
        either!(self, s => s.group)
    }

    #[inline]
    pub fn in_flight(&self) -> usize {
        either!(self, s => s.in_flight())
    }

    /// Calls `f` with each request in flight.
    pub fn each_request(&self, mut f: impl FnMut(&Req)) {
        match self {
            Session::H1(s) => s.requests().for_each(&mut f),
            Session::H2(s) => s.requests().for_each(&mut f),
        }
    }

    pub fn each_request_mut(&mut self, mut f: impl FnMut(&mut Req)) {
        match self {
            Session::H1(s) => s.requests_mut().for_each(&mut f),
            Session::H2(s) => s.requests_mut().for_each(&mut f),
        }
    }

    pub fn oldest_sent(&self) -> Option<Instant> {
        either!(self, s => s.oldest_sent())
    }

    /// Requests the connection may have in flight at once: `depth`, within what an HTTP/2
    /// server allows.
    #[inline]
    pub fn capacity(&self, depth: usize) -> usize {
        match self {
            Session::H1(_) => depth,
            Session::H2(s) => s.capacity(depth),
        }
    }

    #[inline]
    pub fn writing(&self) -> bool {
        either!(self, s => s.writing())
    }

    /// Whether new requests may be queued behind bytes still waiting to be sent: HTTP/2's
    /// output is a buffer of its own that the next send takes whole; HTTP/1.1's is a range of
    /// the group's requests, written to its end first.
    #[inline]
    pub fn appends(&self) -> bool {
        matches!(self, Session::H2(_))
    }

    /// The bytes to write next: HTTP/1.1's from the group's requests, HTTP/2's its own.
    #[inline]
    pub fn pending<'a>(&'a self, group: &'a Group) -> &'a [u8] {
        match self {
            Session::H1(s) => {
                let (from, to) = s.to_write();
                &s.bytes(group)[from..to]
            }
            Session::H2(s) => s.pending(),
        }
    }

    #[inline]
    pub fn wrote(&mut self, n: usize) {
        either!(self, s => s.wrote(n))
    }

    /// The next `k` requests of the group's cycle from `cursor` (the worker's, shared by its
    /// connections of the group, so together they walk the cycle in order).
    #[inline]
    pub fn queue(
        &mut self,
        group: &Group,
        cursor: &mut usize,
        k: usize,
        ids: &mut Ids,
        make: impl FnMut(usize, u32, u32) -> Req,
    ) {
        either!(self, s => s.queue(group, cursor, k, ids, make))
    }

    pub fn resend(&mut self, group: &Group, now: Instant) {
        either!(self, s => s.resend(group, now))
    }

    #[inline]
    pub fn absorb(
        &mut self,
        data: &[u8],
        group: &Group,
        heads: &[bool],
        one_request: bool,
        answered: impl FnMut(Req, Response),
    ) -> Result<Absorbed, String> {
        match self {
            Session::H1(s) => s.absorb(data, heads, one_request, answered),
            Session::H2(s) => s.absorb(data, group, one_request, answered),
        }
    }

    pub fn eof(&mut self, answered: impl FnOnce(Req, Response)) -> Result<Ended, String> {
        match self {
            Session::H1(s) => s.eof(answered),
            Session::H2(s) => Ok(s.eof()),
        }
    }

    pub fn retry_after_race(&mut self, idempotent: &[bool]) -> bool {
        either!(self, s => s.retry_after_race(idempotent))
    }

    /// Requests unanswered that go again on the next connection.
    pub fn unanswered(&self) -> usize {
        either!(self, s => s.unanswered())
    }

    pub fn closed(&mut self) {
        either!(self, s => s.closed())
    }

    pub fn forget(&mut self) {
        either!(self, s => s.forget())
    }

    pub fn set_reused(&mut self, reused: bool) {
        either!(self, s => s.reused = reused)
    }

    /// HTTP/2: a request body waits for the server's flow-control window.
    pub fn flow_stalled(&self, group: &Group) -> bool {
        match self {
            Session::H1(_) => false,
            Session::H2(s) => s.flow_stalled(group),
        }
    }

    /// HTTP/2: a stream the server reset, with why.
    #[inline]
    pub fn take_reset(&mut self) -> Option<(Req, String)> {
        match self {
            Session::H1(_) => None,
            Session::H2(s) => s.take_reset(),
        }
    }
}

/// Why a server whose connection began with `first` speaks another protocol than the run's
/// (HTTP/2 with `h2`, else HTTP/1.1), or None when it may speak the run's. A retry cannot
/// change that, so the run ends on it (a set-up error) instead of counting it on every
/// connection until its end.
pub(crate) fn other_protocol(first: &[u8], h2: bool) -> Option<String> {
    // A TLS record's header: an alert (21) or a handshake (22), version 3.x. A TLS server
    // answers plain text with an alert.
    if matches!(first, [21 | 22, 3, 0..=4, ..]) {
        let expected = if h2 { "HTTP/2 frames were" } else { "an HTTP response was" };
        return Some(format!(
            "the server answered with TLS where {expected} expected: use an https:// URL"
        ));
    }
    if h2 && first.starts_with(b"HTTP/1.") {
        return Some(
            "the server answered HTTP/2's connection preface in HTTP/1.1: it does not serve \
             HTTP/2 over plain TCP (h2c) here; drop --h2, or use an https:// URL if it offers \
             h2 over TLS"
                .into(),
        );
    }
    // A SETTINGS frame on stream 0 (what an HTTP/2 server sends first), where an HTTP/1.1
    // response begins "HTTP/".
    let settings = |b: &[u8]| {
        let len = u32::from_be_bytes([0, b[0], b[1], b[2]]);
        b[3] == 4 && b[5..9] == [0; 4] && len.is_multiple_of(6)
    };
    if !h2 && first.len() >= 9 && settings(first) {
        return Some(
            "the server answered an HTTP/1.1 request with HTTP/2 frames: it speaks only HTTP/2 \
             here; add --h2"
                .into(),
        );
    }
    None
}

/// Request `r` of `group` copied to the start of `out` with its IDs written; its length.
fn copy_request(group: &Group, r: &Req, ids: Option<&Ids>, out: &mut [u8]) -> usize {
    let (a, b) = group.slice(r.pos as usize, 1);
    let out = &mut out[..b - a];
    out.copy_from_slice(&group.h1.wire[a..b]);
    if let Some(t) = group.template(r.pos as usize) {
        let digits = ids.and_then(|i| i.digits_of(r.id));
        crate::template::Template::write(&t.h1, r.id, digits, out);
    }
    b - a
}

/// The next `k` requests of `group`'s cycle from `cursor` (which moves past them), in order:
/// `make(i, target, pos)` gives the i-th its timing and accounting, `ids` its number when the
/// group has IDs, and `take(pos, req, ids)` gets it (HTTP/1.1 and HTTP/2 alike).
#[inline(always)]
fn each_request(
    group: &Group,
    cursor: &mut usize,
    k: usize,
    ids: &mut Ids,
    mut make: impl FnMut(usize, u32, u32) -> Req,
    mut take: impl FnMut(u32, Req, &Ids),
) {
    let (len, templated) = (group.cycle.len(), group.templated());
    for i in 0..k {
        let pos = (*cursor + i) % len;
        let mut req = make(i, group.cycle.variant(pos), pos as u32);
        if templated {
            req.id = ids.take();
        }
        take(pos as u32, req, ids);
    }
    *cursor = (*cursor + k) % len;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    /// A group of one target (GET /x), laid out for pipelines of up to 4.
    fn group() -> Group {
        group_of(&["/x"])
    }

    fn group_of(paths: &[&str]) -> Group {
        let o = crate::LoadOptions {
            urls: paths.iter().map(|p| format!("http://127.0.0.1:1{p}")).collect(),
            connections: Some(1),
            pipeline: 4,
            ..crate::LoadOptions::default()
        };
        let cfg = crate::LoadConfig::from_options(&o).unwrap();
        cfg.groups()[0].clone()
    }

    fn req(now: Instant, pos: u32) -> Req {
        Req {
            sent_at: now,
            intended: now,
            counted: true,
            warm: false,
            retried: false,
            target: 0,
            pos,
            id: 0,
        }
    }

    const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

    /// No socket anywhere: bytes in, responses and requests out.
    #[test]
    fn a_pipelined_batch_is_written_once_and_answered_across_split_reads() {
        let (g, now) = (group(), Instant::now());
        let mut s = Http1::new(0, 4);
        s.queue(&g, &mut 0, 3, &mut Ids::new(0, 1, 0, 1), |_, _, pos| req(now, pos));
        let (from, to) = s.to_write();
        let wire = &g.h1.wire[from..to];
        assert_eq!(wire.windows(5).filter(|w| w == b"GET /").count(), 3, "three requests");
        s.wrote(to - from - 1);
        assert!(s.writing());
        s.wrote(1);
        assert!(!s.writing());
        let all = [OK, OK, OK].concat();
        let (a, b) = all.split_at(50); // a head split across reads
        let mut answered = 0;
        assert_eq!(s.absorb(a, &[false], false, |_, _| answered += 1).unwrap(), Absorbed::Keep);
        assert_eq!(answered, 1);
        s.absorb(b, &[false], false, |_, _| answered += 1).unwrap();
        assert_eq!((answered, s.in_flight()), (3, 0));
        assert!(s.reused);
    }

    #[test]
    fn the_end_of_input_and_the_close_race() {
        let (g, now) = (group(), Instant::now());
        let mut s = Http1::new(0, 4);
        assert_eq!(s.eof(|_, _| {}).unwrap(), Ended::Idle);
        s.queue(&g, &mut 0, 1, &mut Ids::new(0, 1, 0, 1), |_, _, pos| req(now, pos));
        // Not reused yet: a close before any byte is a failure, not the race.
        assert!(!s.retry_after_race(&[true]));
        s.absorb(OK, &[false], false, |_, _| {}).unwrap();
        s.queue(&g, &mut 0, 2, &mut Ids::new(0, 1, 0, 1), |_, _, pos| req(now, pos));
        assert!(!s.retry_after_race(&[false]), "not idempotent: never sent twice");
        assert!(s.retry_after_race(&[true]));
        assert!(!s.retry_after_race(&[true]), "once only");
        // The two go again.
        assert_eq!(s.unanswered(), 2);
        s.closed();
        s.resend(&g, now);
        assert!(s.writing() && s.in_flight() == 2);
        assert_eq!(s.eof(|_, _| {}).unwrap(), Ended::Unanswered);
        // A close-delimited body ends with the input.
        let mut d = Http1::new(0, 1);
        d.queue(&g, &mut 0, 1, &mut Ids::new(0, 1, 0, 1), |_, _, pos| req(now, pos));
        d.absorb(b"HTTP/1.1 200 OK\r\n\r\nbody", &[false], false, |_, _| {}).unwrap();
        let mut got = 0;
        assert_eq!(d.eof(|_, _| got += 1).unwrap(), Ended::Response);
        assert_eq!(got, 1);
    }

    #[test]
    fn connection_close_and_one_request_end_the_connection() {
        let (g, now) = (group(), Instant::now());
        let mut s = Http1::new(0, 4);
        s.queue(&g, &mut 0, 2, &mut Ids::new(0, 1, 0, 1), |_, _, pos| req(now, pos));
        let close = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        assert_eq!(s.absorb(close, &[false], false, |_, _| {}).unwrap(), Absorbed::Close);
        assert_eq!(s.in_flight(), 1, "the second was not answered: it goes again");
        let mut one = Http1::new(0, 1);
        one.queue(&g, &mut 0, 1, &mut Ids::new(0, 1, 0, 1), |_, _, pos| req(now, pos));
        assert_eq!(one.absorb(OK, &[false], true, |_, _| {}).unwrap(), Absorbed::Close);
    }

    /// The first bytes of a connection tell a server of another protocol; the run's own, or
    /// too few bytes to tell, do not.
    #[test]
    fn the_first_bytes_tell_another_protocol() {
        let alert = [0x15, 3, 3, 0, 2, 2, 40];
        let settings = [0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100];
        for h2 in [false, true] {
            let e = other_protocol(&alert, h2).unwrap();
            assert!(e.contains("answered with TLS") && e.contains("https://"), "{e}");
        }
        assert!(other_protocol(OK, true).unwrap().contains("drop --h2"));
        assert!(other_protocol(&settings, false).unwrap().contains("add --h2"));
        assert_eq!(other_protocol(OK, false), None);
        assert_eq!(other_protocol(&settings, true), None);
        assert_eq!(other_protocol(&settings[..8], false), None);
        assert_eq!(other_protocol(b"HTTP/", true), None);
        assert_eq!(other_protocol(b"SSH-2.0-x\r\n", false), None, "a parse error, not this");
    }

    /// The connections of a thread take requests from its cursor in turn; requests a closed
    /// connection did not get answers to go again as they were, each from its own bytes, even
    /// when others were taken between them.
    #[test]
    fn connections_share_the_cursor_and_resend_their_own_requests() {
        let (g, now) = (group_of(&["/a", "/b", "/c"]), Instant::now());
        let (mut x, mut y) = (Http1::new(0, 4), Http1::new(0, 4));
        let mut cursor = 0;
        let written = |s: &mut Http1| {
            let mut out = Vec::new();
            while s.writing() {
                let (from, to) = s.to_write();
                out.extend_from_slice(&g.h1.wire[from..to]);
                s.wrote(to - from);
            }
            String::from_utf8(out).unwrap()
        };
        x.queue(&g, &mut cursor, 1, &mut Ids::new(0, 1, 0, 1), |_, _, pos| req(now, pos));
        assert!(written(&mut x).starts_with("GET /a "));
        y.queue(&g, &mut cursor, 1, &mut Ids::new(0, 1, 0, 1), |_, _, pos| req(now, pos));
        assert!(written(&mut y).starts_with("GET /b "));
        x.queue(&g, &mut cursor, 2, &mut Ids::new(0, 1, 0, 1), |_, _, pos| req(now, pos));
        let two = written(&mut x);
        assert!(two.starts_with("GET /c ") && two.matches("GET /a ").count() == 1, "{two}");
        assert_eq!(cursor, 1);
        // x's three unanswered (/a, then /c /a) go again as they were: two ranges.
        x.closed();
        x.resend(&g, now);
        let again = written(&mut x);
        let order: Vec<&str> = again.split("GET ").skip(1).map(|r| &r[..2]).collect();
        assert_eq!(order, ["/a", "/c", "/a"], "{again}");
    }
}
