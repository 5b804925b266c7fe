//! One QUIC connection's HTTP/3, server side (RFC 9114), over quinn-proto's connection state:
//! the sibling of the HTTP/1.1 and HTTP/2 sessions for the worker's QUIC endpoint
//! ([`super::quic`]). A request per bidirectional stream: its HEADERS decoded (QPACK with the
//! dynamic table off) and checked field by field as HTTP/2's are, its body read and
//! discarded, and once the client finished the stream, the answer of the same query controls
//! (`s`, `c`, `t`, `k`) in a HEADERS frame and one DATA frame, the body written as flow
//! control takes it.
//!
//! Bounded: streams at once by QUIC's stream limit (`--h2-streams`), a request's field section
//! to the request-head limit, request bodies to `--max-body`; a malformed request is reset
//! with H3_MESSAGE_ERROR, what breaks the protocol closes the connection with the code RFC
//! 9114 names.

use std::io::Write as _;
use std::time::{Duration, Instant};

use qpslab_http::h3::frame::{self, code, kind, Event, FrameError, On};
use qpslab_http::h3::qpack;
use qpslab_http::{BodyFraming, Method, RequestHead};
use qpslab_quic::conn::{Conn, Drained};
use qpslab_quic::peer::{ConnError, Peer, Streams, MAX_SECTION};
use quinn_proto::{Connection, Dir, StreamEvent, StreamId, VarInt, WriteError};

use super::fields::FieldCheck;
use super::Shared;
use crate::date::DATE_LEN;
use crate::respond::{push_body, ErrorReply, Plan, BODY_PIECE};

#[derive(Debug)]
enum State {
    /// Reading the request: its HEADERS (the plan, once decoded), then its body, discarded.
    Request { plan: Option<Result<Plan, ErrorReply>>, expect: Option<u64>, got: u64 },
    /// A `t=` delay runs until the instant.
    Delayed(Plan, Instant),
    /// Writing the response: `out` from `at`, then `left` body bytes from body offset `sent`.
    Sending { at: usize, left: u64, sent: u64 },
}

#[derive(Debug)]
struct Stream {
    id: StreamId,
    reader: frame::Reader,
    state: State,
    /// The response bytes being written.
    out: Vec<u8>,
}

/// What the worker's HTTP/3 connections share: the common response's bytes, made again when
/// the date changes.
#[derive(Debug, Default)]
pub(super) struct Scratch {
    path: String,
    authority: Vec<u8>,
    host: Vec<u8>,
    section: Vec<u8>,
    /// The response to the configured status and body (HEADERS and DATA), for the date.
    common: Vec<u8>,
    common_date: Vec<u8>,
}

/// One connection's HTTP/3 exchange.
#[derive(Debug)]
pub(super) struct H3 {
    peer: Streams,
    streams: Vec<Stream>,
    /// Each stream's id, in the order of `streams`.
    ids: Vec<StreamId>,
    dec: qpack::Decoder,
    /// Readers and buffers of ended streams, for the next.
    spare: Vec<(frame::Reader, Vec<u8>)>,
    /// A GOAWAY went (`k=0`, or the server stops): new streams are refused.
    pub going_away: bool,
    /// The lowest request stream not yet accepted: what a GOAWAY names.
    next_id: u64,
    /// Streams waiting for a `t=` delay.
    pub delayed: usize,
    /// Responses written whole whose last bytes the client has not acknowledged yet: a
    /// connection going away closes only once they are (a close drops what is unsent).
    pub unacked: usize,
}

impl H3 {
    pub fn new() -> H3 {
        H3 {
            peer: Streams::new(Peer::Client),
            streams: Vec::new(),
            ids: Vec::new(),
            dec: qpack::Decoder::new(MAX_SECTION),
            spare: Vec::new(),
            going_away: false,
            next_id: 0,
            delayed: 0,
            unacked: 0,
        }
    }

    /// The connection may close once its requests are answered: this side sent GOAWAY, or
    /// the client did (a client done with the connection says so, and waits for the close).
    pub fn closing(&self) -> bool {
        self.going_away || self.peer.goaway.is_some()
    }

    /// Requests being read, delayed or answered.
    pub fn in_flight(&self) -> usize {
        self.streams.len()
    }

    /// The handshake is done: this side's control stream and SETTINGS go out.
    pub fn connected(&mut self, conn: &mut Connection) -> Result<(), ConnError> {
        self.peer.open_control(conn)
    }

    /// One of the connection's stream events, to what it concerns.
    pub fn stream_event(
        &mut self,
        conn: &mut Connection,
        ev: StreamEvent,
        sh: &mut Shared<'_>,
        now: Instant,
    ) -> Result<(), ConnError> {
        match ev {
            StreamEvent::Opened { .. } => self.accept(conn, sh, now)?,
            StreamEvent::Readable { id } => self.read(conn, id, sh, now)?,
            StreamEvent::Writable { id } => self.writable(conn, id),
            StreamEvent::Stopped { id, .. } => self.stopped(conn, id),
            StreamEvent::Finished { .. } => self.unacked = self.unacked.saturating_sub(1),
            StreamEvent::Available { .. } => {}
        }
        Ok(())
    }

    /// Streams the client opened: unidirectional ones to the peer's reader, request streams
    /// taken (refused once going away) and read.
    fn accept(
        &mut self,
        conn: &mut Connection,
        sh: &mut Shared<'_>,
        now: Instant,
    ) -> Result<(), ConnError> {
        self.peer.accept(conn)?;
        while let Some(id) = conn.streams().accept(Dir::Bi) {
            self.next_id = id.index() * 4 + 4;
            if self.going_away {
                let refused = VarInt::from_u32(code::REQUEST_REJECTED as u32);
                let _ = conn.recv_stream(id).stop(refused);
                let _ = conn.send_stream(id).reset(refused);
                continue;
            }
            let (reader, out) = self.spare.pop().unwrap_or_else(|| {
                let limits = &sh.cfg.settings.limits;
                (frame::Reader::new(limits.max_request_line + limits.max_header_bytes), Vec::new())
            });
            let state = State::Request { plan: None, expect: None, got: 0 };
            self.streams.push(Stream { id, reader, state, out });
            self.ids.push(id);
            self.read(conn, id, sh, now)?;
        }
        Ok(())
    }

    /// A stream has bytes, its end or a reset to read.
    fn read(
        &mut self,
        conn: &mut Connection,
        id: StreamId,
        sh: &mut Shared<'_>,
        now: Instant,
    ) -> Result<(), ConnError> {
        if id.dir() == Dir::Uni {
            return self.peer.read(conn, u64::from(id));
        }
        let Some(i) = self.find(id) else { return Ok(()) };
        let how = conn.read(u64::from(id), |b| self.absorb(i, b, sh).map(|()| !self.refused(i)))?;
        if let Drained::Reset(_) = how {
            // The client gave up on the request: nothing to answer.
            self.remove(i);
            let _ = conn.send_stream(id).reset(VarInt::from_u32(code::REQUEST_CANCELLED as u32));
            return Ok(());
        }
        if how == Drained::Ended {
            self.request_ended(conn, i, sh, now)?;
        }
        if how == Drained::Stopped {
            // The answer does not depend on the rest (a body past `--max-body`, a malformed
            // head): the client is asked to stop sending (H3_NO_ERROR, RFC 9114 section 4.1)
            // and answered now. An endless body is not read to its end that never comes.
            let _ = conn.recv_stream(id).stop(VarInt::from_u32(code::NO_ERROR as u32));
            let State::Request { plan, .. } = &mut self.streams[i].state else { return Ok(()) };
            if let Some(plan) = plan.take() {
                self.answer(conn, i, plan, sh, now);
            }
        }
        Ok(())
    }

    /// Stream `i`'s request is refused already (its answer is an error reply).
    fn refused(&self, i: usize) -> bool {
        matches!(self.streams[i].state, State::Request { plan: Some(Err(_)), .. })
    }

    /// The client finished stream `i`: its request is answered (or found incomplete).
    fn request_ended(
        &mut self,
        conn: &mut Connection,
        i: usize,
        sh: &mut Shared<'_>,
        now: Instant,
    ) -> Result<(), ConnError> {
        let s = &mut self.streams[i];
        let State::Request { plan, expect, got } = &mut s.state else { return Ok(()) };
        if !s.reader.between_frames() {
            return Err(FrameError::Truncated.into());
        }
        let plan = plan.take();
        let short = expect.is_some_and(|n| n != *got);
        match plan {
            None => {
                // No HEADERS before the end (RFC 9114 section 4.1.2).
                sh.counters.rejected += 1;
                self.reset(conn, i, code::REQUEST_INCOMPLETE);
            }
            Some(_) if short => {
                sh.counters.rejected += 1;
                self.reset(conn, i, code::MESSAGE_ERROR);
            }
            Some(plan) => self.answer(conn, i, plan, sh, now),
        }
        Ok(())
    }

    /// A request stream's bytes: its HEADERS decoded into a plan, its body counted.
    fn absorb(&mut self, i: usize, b: &[u8], sh: &mut Shared<'_>) -> Result<(), ConnError> {
        let s = &mut self.streams[i];
        let State::Request { plan, expect, got } = &mut s.state else {
            // The answer is under way: what else comes is not needed.
            return Ok(());
        };
        let dec = &mut self.dec;
        let max_body = sh.cfg.settings.max_body;
        s.reader.feed::<ConnError>(
            b,
            &mut |t| {
                if t == kind::PUSH_PROMISE {
                    return Err(FrameError::Unexpected {
                        kind: frame::kind_name(t),
                        on: "request",
                    });
                }
                frame::allowed(On::Request, t)
            },
            &mut |e| {
                match e {
                    Event::Frame { kind: kind::HEADERS, payload } if plan.is_none() => {
                        let (p, length) = decode_head(dec, payload, sh)?;
                        *plan = Some(p);
                        *expect = length;
                        sh.counters.requests += 1;
                    }
                    // Trailers: decoded for their validity, then left.
                    Event::Frame { kind: kind::HEADERS, payload } => {
                        dec.decode(payload, &mut |_, _| {}).map_err(|e| {
                            ConnError::new(
                                code::QPACK_DECOMPRESSION_FAILED,
                                format!("{e} (QPACK_DECOMPRESSION_FAILED)"),
                            )
                        })?;
                    }
                    Event::Frame { .. } => {}
                    Event::DataStart(_) if plan.is_none() => {
                        return Err(ConnError::new(
                            code::FRAME_UNEXPECTED,
                            "DATA before the request's HEADERS (H3_FRAME_UNEXPECTED)",
                        ));
                    }
                    Event::DataStart(_) => {}
                    Event::Data(d) => {
                        *got += d.len() as u64;
                        if *got > max_body && plan.as_ref().is_some_and(Result::is_ok) {
                            *plan = Some(Err(ErrorReply {
                                status: 413,
                                reason: "request body too large",
                            }));
                        }
                    }
                }
                Ok(())
            },
        )
    }

    /// Answers stream `i` (its request was read).
    fn answer(
        &mut self,
        conn: &mut Connection,
        i: usize,
        plan: Result<Plan, ErrorReply>,
        sh: &mut Shared<'_>,
        now: Instant,
    ) {
        let s = &mut self.streams[i];
        s.out.clear();
        let plan = match plan {
            Ok(plan) => plan,
            Err(e) => {
                sh.counters.rejected += 1;
                let mut text = Vec::with_capacity(e.reason.len() + 1);
                let _ = writeln!(text, "{}", e.reason);
                head(&mut s.out, &mut sh.h3.section, e.status, Some(text.len() as u64), &sh.date);
                frame::put_head(&mut s.out, kind::DATA, text.len());
                s.out.extend_from_slice(&text);
                s.state = State::Sending { at: 0, left: 0, sent: 0 };
                return self.write(conn, i);
            }
        };
        if plan.delay_ms > 0 {
            let until = now + Duration::from_millis(u64::from(plan.delay_ms));
            s.state = State::Delayed(Plan { delay_ms: 0, ..plan }, until);
            self.delayed += 1;
            return;
        }
        if !plan.keep_alive && !self.going_away {
            self.go_away(conn);
        }
        let s = &mut self.streams[i];
        let no_body = matches!(plan.status, 204 | 304);
        let body = if plan.head_only || no_body { 0 } else { plan.body_len };
        let length = (!no_body).then_some(plan.body_len);
        let sc = &mut sh.h3;
        let common = plan.status == sh.cfg.settings.status
            && plan.body_len == sh.cfg.settings.body_size
            && body == plan.body_len
            && body <= BODY_PIECE as u64;
        if common {
            if sc.common_date != sh.date {
                sc.common.clear();
                head(&mut sc.common, &mut sc.section, plan.status, length, &sh.date);
                frame::put_head(&mut sc.common, kind::DATA, body as usize);
                push_body(&mut sc.common, body as usize, 0);
                sc.common_date.clear();
                sc.common_date.extend_from_slice(&sh.date);
            }
            s.out.extend_from_slice(&sc.common);
            s.state = State::Sending { at: 0, left: 0, sent: body };
        } else {
            head(&mut s.out, &mut sc.section, plan.status, length, &sh.date);
            if body > 0 {
                frame::put_head(&mut s.out, kind::DATA, body as usize);
            }
            s.state = State::Sending { at: 0, left: body, sent: 0 };
        }
        self.write(conn, i);
    }

    /// Answers the streams whose `t=` delay ended by `now`; the earliest still waiting.
    pub fn fire_delays(
        &mut self,
        conn: &mut Connection,
        sh: &mut Shared<'_>,
        now: Instant,
    ) -> Option<Instant> {
        let mut next = None::<Instant>;
        let mut i = 0;
        while i < self.streams.len() {
            if let State::Delayed(plan, until) = self.streams[i].state {
                if until <= now {
                    self.delayed -= 1;
                    let before = self.streams.len();
                    self.answer(conn, i, Ok(plan), sh, now);
                    if self.streams.len() < before {
                        // Answered and gone: the stream now at `i` is another.
                        continue;
                    }
                } else {
                    next = Some(next.map_or(until, |n| n.min(until)));
                }
            }
            i += 1;
        }
        next
    }

    /// The client's flow control opened on stream `id`: its response goes on.
    fn writable(&mut self, conn: &mut Connection, id: StreamId) {
        if self.peer.is_control(u64::from(id)) {
            return self.peer.write_control(conn, &[]);
        }
        if let Some(i) = self.find(id) {
            self.write(conn, i);
        }
    }

    /// The client stopped stream `id`: its response is not wanted.
    fn stopped(&mut self, conn: &mut Connection, id: StreamId) {
        let Some(i) = self.find(id) else {
            // A response written whole, which no acknowledgement will finish now.
            self.unacked = self.unacked.saturating_sub(1);
            return;
        };
        {
            if matches!(self.streams[i].state, State::Delayed(..)) {
                self.delayed -= 1;
            }
            self.remove(i);
            let _ = conn.send_stream(id).reset(VarInt::from_u32(code::REQUEST_CANCELLED as u32));
        }
    }

    /// Writes stream `i`'s response as far as flow control lets it; finishes the stream when
    /// all went.
    fn write(&mut self, conn: &mut Connection, i: usize) {
        let s = &mut self.streams[i];
        let State::Sending { at, left, sent } = &mut s.state else { return };
        let mut send = conn.send_stream(s.id);
        loop {
            if *at == s.out.len() {
                if *left == 0 {
                    if send.finish().is_ok() {
                        self.unacked += 1;
                    }
                    self.remove(i);
                    return;
                }
                s.out.clear();
                *at = 0;
                let n = (*left).min(BODY_PIECE as u64) as usize;
                push_body(&mut s.out, n, *sent);
                *sent += n as u64;
                *left -= n as u64;
            }
            match send.write(&s.out[*at..]) {
                Ok(0) | Err(WriteError::Blocked) => return,
                Ok(n) => *at += n,
                Err(_) => {
                    // Stopped or closed by the client.
                    self.remove(i);
                    return;
                }
            }
        }
    }

    /// Tells the client no new request will be taken (GOAWAY with the first stream not yet
    /// accepted); those in flight are answered.
    pub fn go_away(&mut self, conn: &mut Connection) {
        self.going_away = true;
        let mut f = Vec::new();
        frame::put_goaway(&mut f, self.next_id);
        self.peer.write_control(conn, &f);
    }

    fn reset(&mut self, conn: &mut Connection, i: usize, c: u64) {
        let id = self.streams[i].id;
        let code = VarInt::from_u64(c).unwrap_or_default();
        let _ = conn.send_stream(id).reset(code);
        let _ = conn.recv_stream(id).stop(code);
        self.remove(i);
    }

    fn find(&self, id: StreamId) -> Option<usize> {
        self.ids.iter().position(|&x| x == id)
    }

    fn remove(&mut self, i: usize) {
        self.ids.swap_remove(i);
        let s = self.streams.swap_remove(i);
        // A reader left mid-frame is not reused.
        if s.reader.between_frames() && self.spare.len() < 64 {
            self.spare.push((s.reader, s.out));
        }
    }
}

/// Decodes a request's field section into its plan and declared length, checking every field
/// as HTTP/2's are (RFC 9114 section 4.3); a malformed request gets a 400 answer.
fn decode_head(
    dec: &mut qpack::Decoder,
    section: &[u8],
    sh: &mut Shared<'_>,
) -> Result<(Result<Plan, ErrorReply>, Option<u64>), ConnError> {
    let sc = &mut sh.h3;
    let (path, authority, host) = (&mut sc.path, &mut sc.authority, &mut sc.host);
    path.clear();
    authority.clear();
    host.clear();
    let mut method = None;
    let mut length = None;
    let mut check = FieldCheck::default();
    dec.decode(section, &mut |name, value| {
        check.field(name, value, false);
        match name {
            b":method" => method = std::str::from_utf8(value).ok().and_then(Method::parse),
            b":path" => path.push_str(std::str::from_utf8(value).unwrap_or("")),
            b":authority" => authority.extend_from_slice(value),
            b"host" => host.extend_from_slice(value),
            b"content-length" => {
                length = std::str::from_utf8(value).ok().and_then(|v| v.parse::<u64>().ok());
            }
            _ => {}
        }
    })
    .map_err(|e| {
        ConnError::new(
            code::QPACK_DECOMPRESSION_FAILED,
            format!("{e} (QPACK_DECOMPRESSION_FAILED)"),
        )
    })?;
    let mismatch = check.has_host && !authority.is_empty() && host != authority;
    let Some(method) = method.filter(|_| check.complete() && !check.malformed && !mismatch) else {
        return Ok((Err(ErrorReply { status: 400, reason: "malformed request" }), None));
    };
    let head = RequestHead {
        method,
        minor: 1,
        target: path,
        keep_alive: true,
        body: length.map_or(BodyFraming::None, BodyFraming::Length),
        expect_continue: false,
    };
    Ok((Plan::new(&head, sh.cfg), length))
}

/// A response's HEADERS frame: `:status`, server, date, content-type and content-length.
fn head(
    out: &mut Vec<u8>,
    section: &mut Vec<u8>,
    status: u16,
    length: Option<u64>,
    date: &[u8; DATE_LEN],
) {
    section.clear();
    qpack::put_prefix(section);
    let digits =
        [b'0' + (status / 100) as u8, b'0' + (status / 10 % 10) as u8, b'0' + (status % 10) as u8];
    qpack::put_field(section, b":status", &digits);
    qpack::put_field(section, b"server", b"qpslab");
    qpack::put_field(section, b"date", date);
    qpack::put_field(section, b"content-type", b"text/plain");
    if let Some(n) = length {
        let mut buf = [0u8; 20];
        let mut w = &mut buf[..];
        let _ = write!(w, "{n}");
        let len = 20 - w.len();
        qpack::put_field(section, b"content-length", &buf[..len]);
    }
    frame::put_head(out, kind::HEADERS, section.len());
    out.extend_from_slice(section);
}
