//! One connection's HTTP/2, server side, without its socket: the sibling of the HTTP/1.1
//! session, driven through it by the same loops. A connection becomes HTTP/2 when its first
//! bytes are the client preface (h2c with prior knowledge, or h2 chosen by ALPN over TLS).
//!
//! Frames come out of the session's input buffer and responses go into its output buffer:
//! each request's query controls are HTTP/1.1's (`s`, `c`, `t`, `k`), answered with a HEADERS
//! frame and DATA within the client's flow-control windows; bodies the windows hold back wait
//! for WINDOW_UPDATE. Request bodies are read and discarded, their windows returned at once.
//!
//! Bounded: at most `--h2-streams` streams at once (more are refused with REFUSED_STREAM),
//! header blocks and their CONTINUATIONs to the request-head limit, HPACK's table and decoded
//! size capped, and a connection whose client resets streams as fast as it opens them (rapid
//! reset) or floods control frames (PING, SETTINGS) without requests gets GOAWAY
//! ENHANCE_YOUR_CALM. Input stops while the output backlog is high, so ACKs cannot pile up.

use std::io::Write as _;
use std::time::{Duration, Instant};

use qpslab_http::grpc::PREFIX;
use qpslab_http::h2::frame::{self, code, flag, kind, setting, Header};
use qpslab_http::h2::hpack::{self, Indexing};
use qpslab_http::{BodyFraming, Method, RequestHead};

use crate::config::ServeConfig;
use crate::inbuf::InBuf;
use crate::respond::{push_body, ErrorReply, Plan};

use super::fields::FieldCheck;
use super::Shared;

/// The largest frame this side takes (SETTINGS_MAX_FRAME_SIZE's default).
const MAX_FRAME: usize = frame::DEFAULT_MAX_FRAME;
/// The connection's receive window is topped up to this (request bodies are discarded, so
/// the client is never held back by the server's window).
const RECV_WINDOW: u32 = frame::MAX_WINDOW;
/// Control frames (PING, SETTINGS, PRIORITY, RST_STREAM, empty DATA, unknown types) in a row
/// without a request before the connection is told to calm down.
const CONTROL_FLOOD: u32 = 10_000;
/// Resets by the client beyond this many, and beyond half of its streams: rapid reset.
const RESET_FLOOD: u32 = 100;

/// What a request head said, as far as the server needs it.
#[derive(Debug, Clone, Copy)]
struct Head {
    method: Option<Method>,
    has_path: bool,
    length: Option<u64>,
    malformed: bool,
    complete: bool,
    mismatch: bool,
    /// A gRPC call (content-type application/grpc): how to answer it (see [`GrpcAnswer`]).
    grpc: Option<GrpcAnswer>,
}

/// How a gRPC call is answered, as the call's controls ask: the path's query (`grpc-status=N`,
/// `grpc-reply=echo|BYTES`, `grpc-messages=K`), else its metadata (`qpslab-grpc-status`,
/// `qpslab-grpc-reply`, `qpslab-grpc-messages`); by default one empty message and OK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GrpcAnswer {
    status: u8,
    reply: Reply,
    /// Response messages (a server-streaming answer when more than one), 1 to
    /// [`MAX_GRPC_MESSAGES`].
    messages: u32,
}

/// Each response message of a gRPC answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    /// An empty message (valid for every message type).
    Empty,
    /// The request's messages, as they came.
    Echo,
    /// A message of this many bytes (a bytes field 1 of the length that makes it so), up to
    /// gRPC's default limit, 4 MiB.
    Size(u32),
}

/// The most response messages a call may ask for.
const MAX_GRPC_MESSAGES: u32 = 100_000;

/// A gRPC call's controls as its metadata gave them (`qpslab-grpc-status`,
/// `qpslab-grpc-reply`, `qpslab-grpc-messages`).
#[derive(Debug, Clone, Copy, Default)]
struct Controls {
    status: Option<u8>,
    reply: Option<Reply>,
    messages: Option<u32>,
}

impl Controls {
    /// Takes the field if it is a control.
    fn field(&mut self, name: &[u8], value: &[u8]) {
        match name {
            b"qpslab-grpc-status" => self.status = parse_code(value),
            b"qpslab-grpc-reply" => self.reply = Reply::parse(value),
            b"qpslab-grpc-messages" => self.messages = parse_number(value),
            _ => {}
        }
    }
}

fn parse_number(v: &[u8]) -> Option<u32> {
    std::str::from_utf8(v).ok().and_then(|v| v.parse().ok())
}

impl Reply {
    /// `echo`, or a message size in bytes (up to 4 MiB).
    fn parse(v: &[u8]) -> Option<Reply> {
        match v {
            b"echo" => Some(Reply::Echo),
            _ => parse_number(v).filter(|&n| n <= 4 << 20).map(Reply::Size),
        }
    }
}

impl GrpcAnswer {
    /// The answer the controls ask for: the path's `query` first, then the metadata's.
    fn asked(query: &str, meta: Controls) -> GrpcAnswer {
        let get = |key: &str| {
            let v = query.split('&').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='));
            v.map(str::as_bytes)
        };
        GrpcAnswer {
            status: get("grpc-status").and_then(parse_code).or(meta.status).unwrap_or(0),
            reply: get("grpc-reply").and_then(Reply::parse).or(meta.reply).unwrap_or(Reply::Empty),
            messages: get("grpc-messages")
                .and_then(parse_number)
                .or(meta.messages)
                .map_or(1, |n| n.clamp(1, MAX_GRPC_MESSAGES)),
        }
    }

    /// The response's DATA bytes (framed messages), None for the one empty message (its
    /// five zero bytes go without a buffer); `kept`: the request's body (for echo).
    fn body(&self, kept: &[u8]) -> Option<Box<[u8]>> {
        let one: Vec<u8> = match self.reply {
            Reply::Empty if self.messages == 1 => return None,
            Reply::Empty => vec![0; PREFIX],
            Reply::Echo => kept.to_vec(),
            Reply::Size(n) => {
                let mut m = Vec::with_capacity(PREFIX + n as usize);
                qpslab_http::grpc::put_message(&mut m, &sized_message(n as usize));
                m
            }
        };
        Some(one.repeat(self.messages as usize).into_boxed_slice())
    }
}

/// A protobuf message of `n` bytes: field 1 (bytes) filled with 'x' (under 2 bytes, 'x's).
fn sized_message(n: usize) -> Vec<u8> {
    let mut m = Vec::with_capacity(n);
    // The field's length L and its varint's own length v: 1 + v + L = n.
    let varint_len = |l: usize| {
        if l < 128 {
            1
        } else if l < 16384 {
            2
        } else if l < 2_097_152 {
            3
        } else {
            4
        }
    };
    let body = (1..=4).map(|v| n.saturating_sub(1 + v)).find(|&l| 1 + varint_len(l) + l == n);
    match body {
        Some(mut l) if n >= 2 => {
            m.push(0x0a);
            loop {
                let b = (l & 0x7f) as u8;
                l >>= 7;
                if l == 0 {
                    m.push(b);
                    break;
                }
                m.push(b | 0x80);
            }
            m.resize(n, b'x');
        }
        _ => m.resize(n, b'x'),
    }
    m
}

/// Why the connection ends: the GOAWAY's code, and for the log, why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ConnError {
    pub code: u32,
    pub reason: &'static str,
}

fn fail<T>(code: u32, reason: &'static str) -> Result<T, ConnError> {
    Err(ConnError { code, reason })
}

#[derive(Debug)]
enum StreamState {
    /// Reading the request's body (discarded); the plan waits for END_STREAM. `expect`: the
    /// content-length the request declared, which its DATA must add up to.
    Body { plan: Result<Plan, ErrorReply>, left: u64, expect: Option<u64>, got: u64 },
    /// A `t=` delay runs until the instant.
    Delayed(Plan, Instant),
    /// Response body bytes still to send (flow control held them back); a gRPC call's
    /// messages (`bytes`, or zeros: one empty message) end with trailers carrying the status
    /// instead of END_STREAM on its DATA.
    Sending { left: u64, sent: u64, grpc: Option<u8>, bytes: Option<Box<[u8]>> },
}

#[derive(Debug)]
struct Stream {
    id: u32,
    /// What the client lets this side send on the stream.
    window: i64,
    state: StreamState,
    /// A gRPC call, and how it is answered.
    grpc: Option<GrpcAnswer>,
    /// A gRPC call answered by echo: the request's body so far.
    kept: Vec<u8>,
}

/// A header block being gathered (HEADERS, then CONTINUATIONs until END_HEADERS).
#[derive(Debug, Default)]
struct Gathering {
    stream: u32,
    end_stream: bool,
    /// Its priority makes the stream depend on itself: a stream error (RFC 9113 5.3.1),
    /// once the block is decoded (the HPACK table must see it).
    self_dependent: bool,
    block: Vec<u8>,
}

/// One HTTP/2 connection's state.
#[derive(Debug)]
pub(super) struct H2 {
    dec: hpack::Decoder,
    streams: Vec<Stream>,
    max_streams: usize,
    /// The client's SETTINGS: the window each new stream starts with, its largest frame.
    peer_window: i64,
    peer_max_frame: usize,
    /// What the client lets this side send on the connection.
    conn_window: i64,
    /// Request body bytes received since the connection's window was last topped up.
    received: u32,
    gathering: Option<Gathering>,
    last_stream: u32,
    opened: u32,
    resets: u32,
    controls: u32,
    /// GOAWAY sent: no new streams; close once the last response is out.
    pub going_away: bool,
    /// The connection's generation, for its delayed responses on the worker's heap.
    gen: u32,
    /// The request's path (kept for its capacity, and read again for a remembered head).
    path: String,
    /// Stream ids the client skipped (never opened, so implicitly closed), a few ranges: a
    /// HEADERS on one is a PROTOCOL_ERROR, on a stream it closed a STREAM_CLOSED.
    skipped: Vec<(u32, u32)>,
    /// The last request head's block and what it said, with the table's changes count: see
    /// [`H2::decode_head`].
    last_block: Vec<u8>,
    last_head: Option<(u64, Head)>,
}

/// Emptied stream lists an idle connection gave back, kept for the next requests.
const SPARE_STREAM_LISTS: usize = 256;

/// What a worker's HTTP/2 connections share, so that an idle one holds none of it: the
/// :authority and Host of the head being decoded, the response fields that change once a
/// second at most, encoded, with their date, and spare stream lists.
#[derive(Debug, Default)]
pub(super) struct Scratch {
    streams: Vec<Vec<Stream>>,
    authority: Vec<u8>,
    host: Vec<u8>,
    fields: Vec<u8>,
    fields_date: Vec<u8>,
    /// `--h3`: the Alt-Svc field value every response carries.
    alt_svc: Option<String>,
}

impl Scratch {
    pub(super) fn new(alt_svc: Option<String>) -> Scratch {
        Scratch { alt_svc, ..Scratch::default() }
    }

    /// A response's HEADERS frame: the status, the fields every response has, the length.
    fn write_headers(
        &mut self,
        out: &mut Vec<u8>,
        id: u32,
        status: u16,
        length: Option<u64>,
        date: &[u8],
        end_stream: bool,
    ) {
        let at = out.len();
        frame::put_header(out, 0, kind::HEADERS, flag::END_HEADERS, id);
        let start = out.len();
        let digits = [
            b'0' + (status / 100) as u8,
            b'0' + (status / 10 % 10) as u8,
            b'0' + (status % 10) as u8,
        ];
        // The statuses the static table has (RFC 7541 Appendix A, entries 8 to 14).
        match status {
            200 => hpack::indexed(out, 8),
            204 => hpack::indexed(out, 9),
            206 => hpack::indexed(out, 10),
            304 => hpack::indexed(out, 11),
            400 => hpack::indexed(out, 12),
            404 => hpack::indexed(out, 13),
            500 => hpack::indexed(out, 14),
            _ => hpack::literal(out, Indexing::Without, 8, b"", &digits),
        }
        if self.fields_date != date {
            // The fields every response has, encoded once a second (Huffman coding costs a
            // thousand instructions a response).
            self.fields.clear();
            hpack::literal(&mut self.fields, Indexing::Without, 54, b"", b"qpslab");
            hpack::literal(&mut self.fields, Indexing::Without, 33, b"", date);
            hpack::literal(&mut self.fields, Indexing::Without, 31, b"", b"text/plain");
            if let Some(v) = &self.alt_svc {
                hpack::literal(&mut self.fields, Indexing::Without, 0, b"alt-svc", v.as_bytes());
            }
            self.fields_date.clear();
            self.fields_date.extend_from_slice(date);
        }
        out.extend_from_slice(&self.fields);
        if let Some(n) = length {
            // content-length, its digits as they are.
            let mut digits = [0u8; 20];
            let mut at = digits.len();
            let mut v = n;
            loop {
                at -= 1;
                digits[at] = b'0' + (v % 10) as u8;
                v /= 10;
                if v == 0 {
                    break;
                }
            }
            hpack::put_integer(out, 0x00, 4, 28);
            hpack::put_integer(out, 0x00, 7, digits.len() - at);
            out.extend_from_slice(&digits[at..]);
        }
        let len = (out.len() - start).to_be_bytes();
        out[at..at + 3].copy_from_slice(&len[len.len() - 3..]);
        if end_stream {
            out[at + 4] |= flag::END_STREAM;
        }
    }
}

impl H2 {
    /// A connection whose client preface arrived: this side's SETTINGS go out first.
    pub fn start(cfg: &ServeConfig, out: &mut Vec<u8>, gen: u32) -> H2 {
        let limits = &cfg.settings.limits;
        let max_list = limits.max_request_line + limits.max_header_bytes;
        frame::put_settings(
            out,
            &[
                (setting::MAX_CONCURRENT_STREAMS, cfg.settings.h2_streams as u32),
                (setting::INITIAL_WINDOW_SIZE, RECV_WINDOW),
                (setting::MAX_HEADER_LIST_SIZE, max_list as u32),
                (setting::ENABLE_PUSH, 0),
            ],
        );
        frame::put_window_update(out, 0, RECV_WINDOW - frame::DEFAULT_WINDOW);
        H2 {
            dec: hpack::Decoder::new(hpack::DEFAULT_TABLE_SIZE, max_list),
            streams: Vec::new(),
            max_streams: cfg.settings.h2_streams,
            peer_window: i64::from(frame::DEFAULT_WINDOW),
            peer_max_frame: frame::DEFAULT_MAX_FRAME,
            conn_window: i64::from(frame::DEFAULT_WINDOW),
            received: 0,
            gathering: None,
            last_stream: 0,
            opened: 0,
            resets: 0,
            controls: 0,
            going_away: false,
            gen,
            path: String::new(),
            skipped: Vec::new(),
            last_block: Vec::new(),
            last_head: None,
        }
    }

    /// Streams in progress (reading a body, delayed or sending).
    pub fn busy(&self) -> bool {
        !self.streams.is_empty()
    }

    /// No stream open and no header block half gathered: the connection waits for the
    /// client's next request.
    pub fn idle(&self) -> bool {
        self.streams.is_empty() && self.gathering.is_none()
    }

    /// An idle connection's stream slots go to the worker's spares (its next request takes
    /// them or others back: no allocation per request).
    pub fn release(&mut self, scratch: &mut Scratch) {
        if self.streams.capacity() > 0 && scratch.streams.len() < SPARE_STREAM_LISTS {
            scratch.streams.push(std::mem::take(&mut self.streams));
        } else {
            self.streams = Vec::new();
        }
    }

    /// Opens a stream, in slots from the worker's spares if the connection gave its own back.
    fn open(&mut self, stream: Stream, scratch: &mut Scratch) {
        if self.streams.capacity() == 0 {
            self.streams = scratch.streams.pop().unwrap_or_default();
        }
        self.streams.push(stream);
    }

    /// Response bytes wait for the client's window.
    pub fn can_send(&self) -> bool {
        self.conn_window > 0
            && self
                .streams
                .iter()
                .any(|s| matches!(s.state, StreamState::Sending { .. }) && s.window > 0)
    }

    /// The earliest `t=` delay's end, if a stream waits for one.
    pub fn next_delay(&self) -> Option<Instant> {
        self.streams
            .iter()
            .filter_map(|s| match s.state {
                StreamState::Delayed(_, t) => Some(t),
                _ => None,
            })
            .min()
    }

    /// Ends the connection politely: no new streams after those it has.
    pub fn goaway(&mut self, out: &mut Vec<u8>, error: u32) {
        if !self.going_away {
            frame::put_goaway(out, self.last_stream, error);
            self.going_away = true;
        }
    }

    /// Handles every whole frame in `inbuf`, answering into `out`; returns how many. An error
    /// is the connection's end: the GOAWAY is written, and the caller closes after the output.
    pub fn consume(
        &mut self,
        inbuf: &mut InBuf,
        out: &mut Vec<u8>,
        sh: &mut Shared<'_>,
        slot: usize,
        now: Instant,
    ) -> Result<usize, ConnError> {
        let mut frames = 0;
        while let Some(h) = Header::parse(inbuf.filled()) {
            if h.len > MAX_FRAME {
                return fail(code::FRAME_SIZE_ERROR, "a frame larger than SETTINGS_MAX_FRAME_SIZE");
            }
            if inbuf.len() < frame::HEADER_LEN + h.len {
                break;
            }
            let payload = &inbuf.filled()[frame::HEADER_LEN..frame::HEADER_LEN + h.len];
            self.frame(&h, payload, out, sh, slot, now)?;
            inbuf.consume(frame::HEADER_LEN + h.len);
            frames += 1;
            if out.len() > super::OUT_HIGH {
                // The rest waits until the client has read the answers (a PING flood cannot
                // grow the output without bound).
                break;
            }
        }
        Ok(frames)
    }

    fn frame(
        &mut self,
        h: &Header,
        payload: &[u8],
        out: &mut Vec<u8>,
        sh: &mut Shared<'_>,
        slot: usize,
        now: Instant,
    ) -> Result<(), ConnError> {
        if self.gathering.is_some() && h.kind != kind::CONTINUATION {
            return fail(code::PROTOCOL_ERROR, "a frame inside a header block");
        }
        // WINDOW_UPDATEs come with every large response, so they are not counted.
        let work = matches!(h.kind, kind::HEADERS | kind::CONTINUATION | kind::WINDOW_UPDATE);
        if !(work || h.kind == kind::DATA && h.len > 0) {
            self.controls += 1;
            if self.controls > CONTROL_FLOOD {
                return fail(code::ENHANCE_YOUR_CALM, "control frames without requests");
            }
        }
        let bad = |e: frame::FrameError| ConnError { code: e.code(), reason: "a malformed frame" };
        match h.kind {
            kind::HEADERS => {
                if h.stream == 0 || h.stream.is_multiple_of(2) {
                    return fail(code::PROTOCOL_ERROR, "HEADERS on stream 0 or an even stream");
                }
                let fragment = frame::unpadded(h, payload).map_err(bad)?;
                let g = Gathering {
                    stream: h.stream,
                    end_stream: h.has(flag::END_STREAM),
                    self_dependent: frame::dependency(h, payload) == Some(h.stream),
                    block: Vec::new(),
                };
                self.gather(g, fragment, h.has(flag::END_HEADERS), out, sh, slot, now)
            }
            kind::CONTINUATION => {
                let Some(g) = self.gathering.take() else {
                    return fail(code::PROTOCOL_ERROR, "CONTINUATION without HEADERS");
                };
                if g.stream != h.stream {
                    return fail(code::PROTOCOL_ERROR, "CONTINUATION on another stream");
                }
                self.gather(g, payload, h.has(flag::END_HEADERS), out, sh, slot, now)
            }
            kind::DATA => self.data(h, payload, out, sh, slot, now),
            kind::SETTINGS => {
                if h.has(flag::ACK) {
                    return frame::settings(h, payload).map(|_| ()).map_err(bad);
                }
                let values = frame::settings(h, payload).map_err(bad)?;
                self.settings(&values, out);
                Ok(())
            }
            kind::PING => {
                if h.stream != 0 {
                    return fail(code::PROTOCOL_ERROR, "a PING on a stream");
                }
                if payload.len() != 8 {
                    return fail(code::FRAME_SIZE_ERROR, "a PING not of 8 bytes");
                }
                if !h.has(flag::ACK) {
                    let mut data = [0; 8];
                    data.copy_from_slice(payload);
                    frame::put_ping(out, true, data);
                }
                Ok(())
            }
            kind::WINDOW_UPDATE => {
                let inc = frame::window_increment(payload).map_err(bad)?;
                self.window_update(h.stream, inc, out)
            }
            kind::RST_STREAM => {
                frame::rst_code(h, payload).map_err(bad)?;
                self.stream_reset(h.stream)
            }
            kind::GOAWAY => {
                // The client opens no more streams; those open are still answered, and the
                // connection ends when it closes (an unknown error code is no error here).
                frame::goaway(h, payload).map_err(bad)?;
                Ok(())
            }
            kind::PRIORITY => {
                if h.stream == 0 {
                    return fail(code::PROTOCOL_ERROR, "a PRIORITY on stream 0");
                }
                if payload.len() != 5 {
                    // A stream error (RFC 9113 6.3).
                    frame::put_rst_stream(out, h.stream, code::FRAME_SIZE_ERROR);
                } else if frame::dependency(h, payload) == Some(h.stream) {
                    // A stream that depends on itself: a stream error (RFC 9113 5.3.1).
                    frame::put_rst_stream(out, h.stream, code::PROTOCOL_ERROR);
                }
                Ok(())
            }
            kind::PUSH_PROMISE => fail(code::PROTOCOL_ERROR, "PUSH_PROMISE from a client"),
            // Unknown types are ignored (RFC 9113 section 4.1).
            _ => Ok(()),
        }
    }

    /// The client reset a stream: it goes, and rapid reset (CVE-2023-44487) is bounded.
    fn stream_reset(&mut self, stream: u32) -> Result<(), ConnError> {
        if stream > self.last_stream {
            return fail(code::PROTOCOL_ERROR, "a RST_STREAM on an idle stream");
        }
        if let Some(i) = self.streams.iter().position(|s| s.id == stream) {
            self.streams.swap_remove(i);
            self.resets += 1;
            if self.resets > RESET_FLOOD && self.resets * 2 > self.opened {
                return fail(code::ENHANCE_YOUR_CALM, "streams reset as fast as they open");
            }
        }
        Ok(())
    }

    /// The client's SETTINGS: its windows and frame size taken, acknowledged.
    fn settings(&mut self, values: &[(u16, u32)], out: &mut Vec<u8>) {
        for &(id, v) in values {
            match id {
                setting::INITIAL_WINDOW_SIZE => {
                    let windows = self.streams.iter_mut().map(|s| &mut s.window);
                    frame::initial_window_changed(&mut self.peer_window, v, windows);
                }
                setting::MAX_FRAME_SIZE => self.peer_max_frame = v as usize,
                _ => {}
            }
        }
        frame::put_settings_ack(out);
        self.send_bodies(out);
    }

    /// A WINDOW_UPDATE for the connection (stream 0) or a stream: held bodies may go on.
    fn window_update(&mut self, stream: u32, inc: u32, out: &mut Vec<u8>) -> Result<(), ConnError> {
        if stream > self.last_stream {
            return fail(code::PROTOCOL_ERROR, "a WINDOW_UPDATE on an idle stream");
        }
        if stream == 0 {
            if inc == 0 {
                return fail(code::PROTOCOL_ERROR, "a zero WINDOW_UPDATE");
            }
            self.conn_window += i64::from(inc);
            if self.conn_window > i64::from(frame::MAX_WINDOW) {
                return fail(code::FLOW_CONTROL_ERROR, "the connection window overflowed");
            }
        } else if let Some(s) = self.streams.iter_mut().find(|s| s.id == stream) {
            s.window += i64::from(inc);
            if inc == 0 || s.window > i64::from(frame::MAX_WINDOW) {
                let id = s.id;
                let why = if inc == 0 { code::PROTOCOL_ERROR } else { code::FLOW_CONTROL_ERROR };
                self.reset(out, id, why);
            }
        }
        self.send_bodies(out);
        Ok(())
    }

    #[allow(clippy::too_many_arguments, reason = "the frame's parts and the loop's context")]
    fn gather(
        &mut self,
        mut g: Gathering,
        fragment: &[u8],
        end_headers: bool,
        out: &mut Vec<u8>,
        sh: &mut Shared<'_>,
        slot: usize,
        now: Instant,
    ) -> Result<(), ConnError> {
        let limits = &sh.cfg.settings.limits;
        if g.block.len() + fragment.len() > limits.max_request_line + limits.max_header_bytes {
            return fail(code::ENHANCE_YOUR_CALM, "a header block over the request-head limit");
        }
        let refuse = g.self_dependent;
        if end_headers && g.block.is_empty() {
            return self.headers((g.stream, g.end_stream, refuse), fragment, out, sh, slot, now);
        }
        g.block.extend_from_slice(fragment);
        if !end_headers {
            self.gathering = Some(g);
            return Ok(());
        }
        let block = std::mem::take(&mut g.block);
        self.headers((g.stream, g.end_stream, refuse), &block, out, sh, slot, now)
    }

    /// A whole request head: a new stream (or trailers of one reading its body); `refuse`:
    /// reset it as malformed once decoded.
    #[allow(clippy::too_many_arguments, reason = "the frame's parts and the loop's context")]
    fn headers(
        &mut self,
        (id, end_stream, refuse): (u32, bool, bool),
        block: &[u8],
        out: &mut Vec<u8>,
        sh: &mut Shared<'_>,
        slot: usize,
        now: Instant,
    ) -> Result<(), ConnError> {
        let trailers = self.streams.iter().any(|s| s.id == id);
        let changes = self.dec.table_changes();
        let cached = self.last_head.filter(|&(c, _)| c == changes && block == self.last_block);
        let head = match cached {
            // The same block as the last request's, the table as it left it: the same request.
            Some((_, head)) if !trailers => head,
            _ => self.decode_head(block, trailers, &mut sh.h2)?,
        };
        let Head { method, has_path, length, malformed, complete, mismatch, grpc } = head;
        let malformed = malformed || refuse;
        if let Some(i) = self.streams.iter().position(|s| s.id == id) {
            // Trailers end a body.
            if !end_stream {
                return fail(code::PROTOCOL_ERROR, "a second header block without END_STREAM");
            }
            let s = self.streams.swap_remove(i);
            if malformed {
                sh.counters.rejected += 1;
                frame::put_rst_stream(out, id, code::PROTOCOL_ERROR);
            } else if let StreamState::Body { plan, expect, got, .. } = s.state {
                if expect.is_some_and(|n| n != got) {
                    sh.counters.rejected += 1;
                    frame::put_rst_stream(out, id, code::PROTOCOL_ERROR);
                } else {
                    self.answer(id, plan, (s.grpc, s.kept), out, sh, slot, now);
                }
            }
            return Ok(());
        }
        if id <= self.last_stream {
            if self.skipped.iter().any(|&(a, b)| (a..=b).contains(&id)) {
                return fail(code::PROTOCOL_ERROR, "a new stream below one already opened");
            }
            return fail(code::STREAM_CLOSED, "HEADERS on a closed stream");
        }
        if id > self.last_stream + 2 {
            // Ids skipped are closed without ever opening (RFC 9113 5.1.1); a few ranges kept.
            if self.skipped.len() == 8 {
                self.skipped.remove(0);
            }
            self.skipped.push((self.last_stream + 2, id - 2));
        }
        self.last_stream = id;
        self.controls = 0;
        if self.going_away {
            return Ok(());
        }
        if self.streams.len() >= self.max_streams {
            frame::put_rst_stream(out, id, code::REFUSED_STREAM);
            return Ok(());
        }
        self.opened += 1;
        sh.counters.requests += 1;
        let (Some(method), true, false) = (method, has_path && complete, malformed || mismatch)
        else {
            sh.counters.rejected += 1;
            self.reset(out, id, code::PROTOCOL_ERROR);
            return Ok(());
        };
        if end_stream && length.is_some_and(|n| n > 0) {
            // A declared body that never came.
            sh.counters.rejected += 1;
            self.reset(out, id, code::PROTOCOL_ERROR);
            return Ok(());
        }
        let body = match length {
            Some(n) => BodyFraming::Length(n),
            None if end_stream => BodyFraming::None,
            // A body without a length: discarded until END_STREAM, counted against the limit.
            None => BodyFraming::Length(sh.cfg.settings.max_body),
        };
        let head = RequestHead {
            method,
            minor: 1,
            target: &self.path,
            keep_alive: true,
            body,
            expect_continue: false,
        };
        let plan = Plan::new(&head, sh.cfg);
        if end_stream {
            self.answer(id, plan, (grpc, Vec::new()), out, sh, slot, now);
        } else {
            let left = sh.cfg.settings.max_body;
            let window = self.peer_window;
            let state = StreamState::Body { plan, left, expect: length, got: 0 };
            self.open(Stream { id, window, state, grpc, kept: Vec::new() }, &mut sh.h2);
        }
        Ok(())
    }

    /// Decodes a header block into what the request needs (the path into the kept buffer),
    /// checking every field; a request head that left the table unchanged is remembered with
    /// its bytes, so the same block next time is not decoded again.
    fn decode_head(
        &mut self,
        block: &[u8],
        trailers: bool,
        scratch: &mut Scratch,
    ) -> Result<Head, ConnError> {
        let changes = self.dec.table_changes();
        let mut method = None;
        let mut has_path = false;
        let mut length = None;
        let mut grpc = false;
        let mut controls = Controls::default();
        let mut check = FieldCheck::default();
        // The path goes into a buffer the connection keeps, authority and Host into the
        // worker's, so a request allocates nothing. Trailers leave the path alone (and forget
        // the remembered head).
        let mut spare = String::new();
        let (authority, host) = (&mut scratch.authority, &mut scratch.host);
        let path = if trailers { &mut spare } else { &mut self.path };
        path.clear();
        authority.clear();
        host.clear();
        let decoded = self.dec.decode(block, &mut |name, value| {
            check.field(name, value, trailers);
            match name {
                b":method" => method = std::str::from_utf8(value).ok().and_then(Method::parse),
                b":path" => {
                    if let Ok(p) = std::str::from_utf8(value) {
                        path.push_str(p);
                        has_path = true;
                    }
                }
                b":authority" => authority.extend_from_slice(value),
                b"host" => host.extend_from_slice(value),
                b"content-length" => {
                    length = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok())
                }
                b"content-type" => grpc = value.starts_with(b"application/grpc"),
                n if n.starts_with(b"qpslab-grpc-") => controls.field(n, value),
                _ => {}
            }
        });
        if decoded.is_err() {
            return fail(code::COMPRESSION_ERROR, "a header block that does not decode");
        }
        let head = Head {
            method,
            has_path,
            length,
            malformed: check.malformed,
            complete: check.complete(),
            // Host and :authority, when both are given, must name the same (8.3.1).
            mismatch: check.has_host && !authority.is_empty() && host != authority,
            grpc: grpc
                .then(|| GrpcAnswer::asked(path.split_once('?').map_or("", |(_, q)| q), controls)),
        };
        self.last_head = None;
        if !trailers && self.dec.table_changes() == changes {
            self.last_block.clear();
            self.last_block.extend_from_slice(block);
            self.last_head = Some((changes, head));
        }
        Ok(head)
    }

    /// Request body bytes: discarded, their window returned.
    fn data(
        &mut self,
        h: &Header,
        payload: &[u8],
        out: &mut Vec<u8>,
        sh: &mut Shared<'_>,
        slot: usize,
        now: Instant,
    ) -> Result<(), ConnError> {
        if h.stream == 0 {
            return fail(code::PROTOCOL_ERROR, "DATA on stream 0");
        }
        let data = frame::unpadded(h, payload)
            .map_err(|e| ConnError { code: e.code(), reason: "a malformed DATA frame" })?;
        // The whole frame counts against the window, padding included.
        self.received += payload.len() as u32;
        if self.received >= RECV_WINDOW / 2 {
            frame::put_window_update(out, 0, self.received);
            self.received = 0;
        }
        let Some(i) = self.streams.iter().position(|s| s.id == h.stream) else {
            if h.stream > self.last_stream {
                return fail(code::PROTOCOL_ERROR, "DATA on an idle stream");
            }
            // A stream closed (answered, reset, or its request ended): a stream error.
            self.controls += 1;
            frame::put_rst_stream(out, h.stream, code::STREAM_CLOSED);
            return Ok(());
        };
        let StreamState::Body { left, expect, got, .. } = &mut self.streams[i].state else {
            self.reset(out, h.stream, code::STREAM_CLOSED);
            return Ok(());
        };
        *got += data.len() as u64;
        let short = h.has(flag::END_STREAM) && expect.is_some_and(|n| *got < n);
        if expect.is_some_and(|n| *got > n) || short {
            // The body does not add up to its content-length: malformed (8.1.1).
            sh.counters.rejected += 1;
            self.reset(out, h.stream, code::PROTOCOL_ERROR);
            return Ok(());
        }
        if data.len() as u64 > *left {
            let e = ErrorReply { status: 413, reason: "request body too large" };
            self.streams.swap_remove(i);
            sh.counters.rejected += 1;
            self.answer(h.stream, Err(e), (None, Vec::new()), out, sh, slot, now);
            frame::put_rst_stream(out, h.stream, code::NO_ERROR);
            return Ok(());
        }
        *left -= data.len() as u64;
        let s = &mut self.streams[i];
        if s.grpc.is_some_and(|g| g.reply == Reply::Echo) {
            s.kept.extend_from_slice(data);
        }
        if h.has(flag::END_STREAM) {
            let s = self.streams.swap_remove(i);
            if let StreamState::Body { plan, .. } = s.state {
                self.answer(h.stream, plan, (s.grpc, s.kept), out, sh, slot, now);
            }
        }
        Ok(())
    }

    /// Answers a request: the HEADERS, and as much of the body as the windows allow; a gRPC
    /// call (`grpc`, with the request body it kept) the gRPC way ([`H2::answer_grpc`]).
    #[allow(clippy::too_many_arguments, reason = "the stream, its answer, and the connection's")]
    fn answer(
        &mut self,
        id: u32,
        plan: Result<Plan, ErrorReply>,
        (grpc, kept): (Option<GrpcAnswer>, Vec<u8>),
        out: &mut Vec<u8>,
        sh: &mut Shared<'_>,
        slot: usize,
        now: Instant,
    ) {
        let plan = match plan {
            Ok(plan) => plan,
            Err(e) => {
                sh.counters.rejected += 1;
                let body = e.reason.len() as u64 + 1;
                sh.h2.write_headers(out, id, e.status, Some(body), &sh.date, false);
                let mut text = Vec::with_capacity(e.reason.len() + 1);
                let _ = writeln!(text, "{}", e.reason);
                frame::put_header(out, text.len(), kind::DATA, flag::END_STREAM, id);
                out.extend_from_slice(&text);
                return;
            }
        };
        if plan.delay_ms > 0 {
            let until = now + Duration::from_millis(u64::from(plan.delay_ms));
            let plan = Plan { delay_ms: 0, ..plan };
            let window = self.peer_window;
            let state = StreamState::Delayed(plan, until);
            self.open(Stream { id, window, state, grpc, kept }, &mut sh.h2);
            sh.delays.push(std::cmp::Reverse((until, slot, self.gen)));
            return;
        }
        if !plan.keep_alive {
            self.goaway(out, code::NO_ERROR);
        }
        if let Some(g) = grpc {
            return self.answer_grpc(id, g, &kept, out, &mut sh.h2);
        }
        let body =
            if plan.head_only || matches!(plan.status, 204 | 304) { 0 } else { plan.body_len };
        let length = (!matches!(plan.status, 204 | 304)).then_some(plan.body_len);
        sh.h2.write_headers(out, id, plan.status, length, &sh.date, body == 0);
        if body > 0 {
            let window = self.peer_window;
            let state = StreamState::Sending { left: body, sent: 0, grpc: None, bytes: None };
            self.open(Stream { id, window, state, grpc: None, kept: Vec::new() }, &mut sh.h2);
            self.send_bodies(out);
        }
    }

    /// Answers a gRPC call: with status OK, its response headers, its messages (by default
    /// one empty message, valid for every message type) and trailers with grpc-status 0;
    /// with another status, a Trailers-Only response (one HEADERS carrying the status, ending
    /// the stream).
    fn answer_grpc(
        &mut self,
        id: u32,
        g: GrpcAnswer,
        kept: &[u8],
        out: &mut Vec<u8>,
        scratch: &mut Scratch,
    ) {
        if g.status != 0 {
            write_grpc_headers(out, id, Some(g.status), true);
            return;
        }
        write_grpc_headers(out, id, None, false);
        let window = self.peer_window;
        let bytes = g.body(kept);
        let left = bytes.as_ref().map_or(PREFIX, |b| b.len()) as u64;
        let state = StreamState::Sending { left, sent: 0, grpc: Some(0), bytes };
        self.open(Stream { id, window, state, grpc: Some(g), kept: Vec::new() }, scratch);
        self.send_bodies(out);
    }

    /// Answers the streams whose `t=` delay ended by `now`.
    pub fn fire_delays(
        &mut self,
        out: &mut Vec<u8>,
        sh: &mut Shared<'_>,
        slot: usize,
        now: Instant,
    ) {
        while let Some(i) = self
            .streams
            .iter()
            .position(|s| matches!(s.state, StreamState::Delayed(_, t) if t <= now))
        {
            let s = self.streams.swap_remove(i);
            if let StreamState::Delayed(plan, _) = s.state {
                self.answer(s.id, Ok(plan), (s.grpc, s.kept), out, sh, slot, now);
            }
        }
    }

    /// Sends what the windows allow of the bodies waiting; a stream whose body is all out
    /// ends.
    fn send_bodies(&mut self, out: &mut Vec<u8>) {
        let max = self.peer_max_frame;
        let mut i = 0;
        while i < self.streams.len() && self.conn_window > 0 {
            let s = &mut self.streams[i];
            let StreamState::Sending { left, sent, grpc, bytes } = &mut s.state else {
                i += 1;
                continue;
            };
            while *left > 0 && s.window > 0 && self.conn_window > 0 {
                let n = (*left).min(max as u64).min(s.window as u64).min(self.conn_window as u64);
                let last = n == *left;
                let end = if last && grpc.is_none() { flag::END_STREAM } else { 0 };
                frame::put_header(out, n as usize, kind::DATA, end, s.id);
                match (grpc.is_some(), bytes.as_deref()) {
                    (_, Some(b)) => {
                        out.extend_from_slice(&b[*sent as usize..(*sent + n) as usize]);
                    }
                    // An empty message's prefix: all zeros.
                    (true, None) => out.resize(out.len() + n as usize, 0),
                    (false, None) => push_body(out, n as usize, *sent),
                }
                if let (true, Some(code)) = (last, *grpc) {
                    write_grpc_trailers(out, s.id, code);
                }
                *left -= n;
                *sent += n;
                s.window -= n as i64;
                self.conn_window -= n as i64;
                if out.len() > super::OUT_HIGH {
                    break;
                }
            }
            if *left == 0 {
                self.streams.swap_remove(i);
            } else {
                i += 1;
            }
            if out.len() > super::OUT_HIGH {
                break;
            }
        }
    }

    /// Sends more of the bodies once the output was written (the backlog bound paused them).
    pub fn refill(&mut self, out: &mut Vec<u8>) {
        self.send_bodies(out);
    }

    fn reset(&mut self, out: &mut Vec<u8>, id: u32, error: u32) {
        self.streams.retain(|s| s.id != id);
        frame::put_rst_stream(out, id, error);
    }
}

/// A status code as a control gives it: 0 to 16 (gRPC's codes).
fn parse_code(value: &[u8]) -> Option<u8> {
    qpslab_http::grpc::parse_status(value).filter(|&c| c <= 16).map(|c| c as u8)
}

/// A gRPC response's HEADERS: :status 200, the server, content-type application/grpc, and
/// with `status` the grpc-status of a Trailers-Only response.
fn write_grpc_headers(out: &mut Vec<u8>, id: u32, status: Option<u8>, end_stream: bool) {
    let at = out.len();
    let flags = flag::END_HEADERS | if end_stream { flag::END_STREAM } else { 0 };
    frame::put_header(out, 0, kind::HEADERS, flags, id);
    let start = out.len();
    hpack::indexed(out, 8);
    hpack::literal(out, Indexing::Without, 54, b"", b"qpslab");
    hpack::literal(out, Indexing::Without, 31, b"", b"application/grpc");
    if let Some(code) = status {
        hpack::literal(out, Indexing::Without, 0, b"grpc-status", code_digits(code).as_ref());
    }
    let len = (out.len() - start).to_be_bytes();
    out[at..at + 3].copy_from_slice(&len[len.len() - 3..]);
}

/// A status code's digits (0 to 16), without a formatted string per response.
fn code_digits(code: u8) -> Digits {
    if code < 10 {
        Digits([b'0' + code, 0], 1)
    } else {
        Digits([b'0' + code / 10, b'0' + code % 10], 2)
    }
}

/// One or two digits.
struct Digits([u8; 2], usize);

impl AsRef<[u8]> for Digits {
    fn as_ref(&self) -> &[u8] {
        &self.0[..self.1]
    }
}

/// A gRPC call's trailers: its grpc-status, ending the stream.
fn write_grpc_trailers(out: &mut Vec<u8>, id: u32, code: u8) {
    let at = out.len();
    frame::put_header(out, 0, kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, id);
    let start = out.len();
    hpack::literal(out, Indexing::Without, 0, b"grpc-status", code_digits(code).as_ref());
    let len = (out.len() - start).to_be_bytes();
    out[at..at + 3].copy_from_slice(&len[len.len() - 3..]);
}

/// Whether `data` (a connection's first bytes) is or may become the HTTP/2 client preface:
/// Some(true) it is, Some(false) not yet known, None it is not.
pub(super) fn preface(data: &[u8]) -> Option<bool> {
    let n = data.len().min(frame::PREFACE.len());
    if data[..n] != frame::PREFACE[..n] {
        return None;
    }
    Some(n == frame::PREFACE.len())
}
