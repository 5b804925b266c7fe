//! One QUIC connection's HTTP/3, client side (RFC 9114), over quinn-proto's connection state:
//! the control stream and its SETTINGS, a request per bidirectional stream (its HEADERS and
//! DATA frames written from the group's encoding, the stream finished), responses read as
//! their frames arrive, the server's unidirectional streams (control, QPACK) checked. QPACK
//! runs with the dynamic table off, so a response's field section decodes on its own.
//!
//! A stream reset or stopped by the server fails its request as `reset`, with its HTTP/3
//! code; what breaks the protocol (a malformed frame, a field section that does not decode,
//! a push, a second control stream) fails the connection with the code RFC 9114 names, which
//! the thread's loop closes it with.

use std::time::Instant;

use qpslab_http::h3::frame::{self, code, kind, setting, stream_type, Event, FrameError, On};
use qpslab_http::h3::{qpack, varint};
use qpslab_http::Response;
use quinn_proto::{Connection, Dir, ReadError, StreamId, VarInt};

use super::Req;

/// The largest control frame (SETTINGS, GOAWAY, HEADERS) taken.
pub(crate) const MAX_FRAME: usize = 64 * 1024;
/// The most a response's field section may decode to (announced as
/// SETTINGS_MAX_FIELD_SECTION_SIZE).
pub(crate) const MAX_SECTION: usize = 64 * 1024;
/// Unidirectional streams of the server's a connection keeps reading (control, QPACK encoder
/// and decoder, and a few it does not know, which it stops).
pub(crate) const MAX_UNI: u64 = 16;

/// A connection-level error: the HTTP/3 code to close with and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConnError {
    pub code: u64,
    pub msg: String,
}

impl ConnError {
    fn new(code: u64, msg: impl Into<String>) -> ConnError {
        ConnError { code, msg: msg.into() }
    }
}

impl From<FrameError> for ConnError {
    fn from(e: FrameError) -> Self {
        ConnError::new(e.code(), format!("{e} ({})", code::name(e.code())))
    }
}

/// What a request stream carries back.
#[derive(Debug)]
struct Stream {
    id: StreamId,
    req: Req,
    reader: frame::Reader,
    status: u16,
    interim: u16,
    body: u64,
    /// Request bytes the stream's flow control has not yet taken, and how far they went.
    pending: Vec<u8>,
    pending_at: usize,
    /// All written and the stream finished.
    finished: bool,
}

/// One of the server's unidirectional streams.
#[derive(Debug)]
struct Uni {
    id: StreamId,
    /// Its type, once its first varint arrived; the bytes of that varint so far.
    kind: Option<u64>,
    head: Vec<u8>,
    reader: frame::Reader,
    settings_seen: bool,
}

/// One connection's HTTP/3 exchange.
#[derive(Debug)]
pub(crate) struct Http3 {
    pub group: usize,
    streams: Vec<Stream>,
    /// Each stream's id, in the order of `streams`: found by a scan of 8-byte ids rather than
    /// of whole streams.
    ids: Vec<StreamId>,
    /// Our control stream's bytes not yet taken (its SETTINGS, written once it opens).
    control: Option<(StreamId, Vec<u8>)>,
    uni: Vec<Uni>,
    /// The server's control stream was seen (a second is an error).
    peer_control: bool,
    /// The server's GOAWAY: streams from this id on will not be processed.
    goaway: Option<u64>,
    dec: qpack::Decoder,
    /// Requests whose streams the server reset or stopped, with why; taken by the loop.
    pub reset: Vec<(Req, String)>,
    /// Responses completed, taken by the loop.
    pub answered: Vec<(Req, Response)>,
    /// Readers of ended streams, for the next (their buffers kept).
    spare: Vec<frame::Reader>,
}

impl Http3 {
    pub fn new(group: usize) -> Self {
        Http3 {
            group,
            streams: Vec::new(),
            ids: Vec::new(),
            control: None,
            uni: Vec::new(),
            peer_control: false,
            goaway: None,
            dec: qpack::Decoder::new(MAX_SECTION),
            reset: Vec::new(),
            answered: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// Requests on streams, waiting for their responses.
    pub fn in_flight(&self) -> usize {
        self.streams.len()
    }

    pub fn requests(&self) -> impl Iterator<Item = &Req> {
        self.streams.iter().map(|s| &s.req)
    }

    pub fn requests_mut(&mut self) -> impl Iterator<Item = &mut Req> {
        self.streams.iter_mut().map(|s| &mut s.req)
    }

    /// Takes every request off the connection (it failed or closed).
    pub fn take_requests(&mut self) -> Vec<Req> {
        self.ids.clear();
        self.streams.drain(..).map(|s| s.req).collect()
    }

    /// No more requests may go on this connection (the server's GOAWAY).
    pub fn going_away(&self) -> bool {
        self.goaway.is_some()
    }

    /// The handshake is done: opens the control stream and queues its SETTINGS.
    pub fn connected(&mut self, conn: &mut Connection) -> Result<(), ConnError> {
        let id = conn.streams().open(Dir::Uni).ok_or_else(|| {
            ConnError::new(
                code::STREAM_CREATION_ERROR,
                "the server allows no unidirectional stream for the control stream",
            )
        })?;
        let mut out = vec![stream_type::CONTROL as u8];
        frame::put_settings(
            &mut out,
            &[
                (setting::QPACK_MAX_TABLE_CAPACITY, 0),
                (setting::QPACK_BLOCKED_STREAMS, 0),
                (setting::MAX_FIELD_SECTION_SIZE, MAX_SECTION as u64),
            ],
        );
        self.control = Some((id, out));
        self.write_control(conn);
        Ok(())
    }

    fn write_control(&mut self, conn: &mut Connection) {
        if let Some((id, out)) = &mut self.control {
            if let Ok(n) = conn.send_stream(*id).write(out) {
                out.drain(..n);
            }
        }
    }

    /// Opens a stream for `req` and writes its bytes (`wire`: its HEADERS frame, and DATA
    /// when it has a body); false when the server's stream limit allows none now.
    pub fn send(&mut self, conn: &mut Connection, req: Req, wire: &[u8]) -> bool {
        let Some(id) = conn.streams().open(Dir::Bi) else { return false };
        let mut s = Stream {
            id,
            req,
            reader: self.spare.pop().unwrap_or_else(|| frame::Reader::new(MAX_FRAME)),
            status: 0,
            interim: 0,
            body: 0,
            pending: Vec::new(),
            pending_at: 0,
            finished: false,
        };
        let mut out = conn.send_stream(id);
        let n = out.write(wire).unwrap_or(0);
        if n == wire.len() {
            s.finished = out.finish().is_ok();
        } else {
            s.pending.extend_from_slice(&wire[n..]);
        }
        self.ids.push(s.id);
        self.streams.push(s);
        true
    }

    /// A stream the flow control held may take more.
    pub fn writable(&mut self, conn: &mut Connection, id: StreamId) {
        if self.control.as_ref().is_some_and(|(c, _)| *c == id) {
            return self.write_control(conn);
        }
        let Some(i) = self.find(id) else { return };
        let s = &mut self.streams[i];
        if s.finished {
            return;
        }
        let mut out = conn.send_stream(id);
        if let Ok(n) = out.write(&s.pending[s.pending_at..]) {
            s.pending_at += n;
        }
        if s.pending_at == s.pending.len() {
            s.pending = Vec::new();
            s.finished = out.finish().is_ok();
        }
    }

    /// The server opened unidirectional streams: each is read for its type.
    pub fn accept_uni(&mut self, conn: &mut Connection) -> Result<(), ConnError> {
        while let Some(id) = conn.streams().accept(Dir::Uni) {
            self.uni.push(Uni {
                id,
                kind: None,
                head: Vec::new(),
                reader: frame::Reader::new(MAX_FRAME),
                settings_seen: false,
            });
            self.read_uni(conn, id)?;
        }
        if conn.streams().accept(Dir::Bi).is_some() {
            return Err(ConnError::new(
                code::STREAM_CREATION_ERROR,
                "the server opened a bidirectional stream (H3_STREAM_CREATION_ERROR)",
            ));
        }
        Ok(())
    }

    /// A stream has bytes (or its end, or a reset) to read.
    pub fn readable(&mut self, conn: &mut Connection, id: StreamId) -> Result<(), ConnError> {
        if id.dir() == Dir::Uni {
            return self.read_uni(conn, id);
        }
        let Some(i) = self.find(id) else { return Ok(()) };
        let mut recv = conn.recv_stream(id);
        let Ok(mut chunks) = recv.read(true) else { return Ok(()) };
        let s = &mut self.streams[i];
        let dec = &mut self.dec;
        let mut ended = false;
        let mut reset = None;
        let mut failed = None;
        loop {
            match chunks.next(usize::MAX) {
                Ok(Some(chunk)) => {
                    if let Err(e) = absorb(s, dec, &chunk.bytes) {
                        failed = Some(e);
                        break;
                    }
                }
                Ok(None) => {
                    ended = true;
                    break;
                }
                Err(ReadError::Blocked) => break,
                Err(ReadError::Reset(code)) => {
                    reset = Some(code);
                    break;
                }
            }
        }
        let _ = chunks.finalize();
        if let Some(e) = failed {
            return Err(e);
        }
        if let Some(c) = reset {
            let s = self.take(i);
            let why = format!("the server reset the stream ({})", code::name(c.into_inner()));
            self.reset.push((s.req, why));
            return Ok(());
        }
        if ended {
            let s = self.take(i);
            if !s.reader.between_frames() {
                return Err(FrameError::Truncated.into());
            }
            if s.status == 0 {
                self.reset.push((
                    s.req,
                    "the stream ended before the response's HEADERS (H3_REQUEST_INCOMPLETE)".into(),
                ));
                return Ok(());
            }
            if !s.finished {
                // Answered before the whole request went: the rest is not needed.
                let _ = conn.send_stream(id).reset(VarInt::from_u32(code::NO_ERROR as u32));
            }
            self.keep_reader(s.reader);
            let resp = Response {
                status: s.status,
                keep_alive: true,
                interim: s.interim,
                body_bytes: s.body,
            };
            self.answered.push((s.req, resp));
        }
        Ok(())
    }

    fn find(&self, id: StreamId) -> Option<usize> {
        self.ids.iter().position(|&x| x == id)
    }

    /// Takes stream `i` off the connection (the last takes its place).
    fn take(&mut self, i: usize) -> Stream {
        self.ids.swap_remove(i);
        self.streams.swap_remove(i)
    }

    /// Keeps an ended stream's reader (between frames) for the next stream.
    fn keep_reader(&mut self, r: frame::Reader) {
        if self.spare.len() < 16 && r.between_frames() {
            self.spare.push(r);
        }
    }

    /// The server no longer reads a stream's request (STOP_SENDING): its response may still
    /// come (RFC 9114 section 4.1: a server may answer before reading the whole request), so
    /// only the writing stops.
    pub fn stopped(&mut self, id: StreamId) {
        if let Some(i) = self.find(id) {
            let s = &mut self.streams[i];
            s.finished = true;
            s.pending = Vec::new();
        }
    }

    /// A request timed out: its stream is cancelled both ways and the request handed back.
    pub fn cancel_older(&mut self, conn: &mut Connection, before: Instant) -> Vec<Req> {
        let mut out = Vec::new();
        let cancelled = VarInt::from_u32(code::REQUEST_CANCELLED as u32);
        let mut i = 0;
        while i < self.streams.len() {
            if self.streams[i].req.sent_at >= before {
                i += 1;
                continue;
            }
            let s = self.take(i);
            let _ = conn.send_stream(s.id).reset(cancelled);
            let _ = conn.recv_stream(s.id).stop(cancelled);
            out.push(s.req);
        }
        out
    }

    /// Reads one of the server's unidirectional streams.
    fn read_uni(&mut self, conn: &mut Connection, id: StreamId) -> Result<(), ConnError> {
        let Some(i) = self.uni.iter().position(|u| u.id == id) else { return Ok(()) };
        let mut recv = conn.recv_stream(id);
        let Ok(mut chunks) = recv.read(true) else { return Ok(()) };
        let mut result = Ok(());
        let mut ended = false;
        let mut stop = false;
        loop {
            match chunks.next(usize::MAX) {
                Ok(Some(chunk)) => match self.uni_bytes(i, &chunk.bytes) {
                    Ok(true) => {}
                    Ok(false) => {
                        stop = true;
                        break;
                    }
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                },
                Ok(None) | Err(ReadError::Reset(_)) => {
                    ended = true;
                    break;
                }
                Err(ReadError::Blocked) => break,
            }
        }
        let _ = chunks.finalize();
        result?;
        let u = &self.uni[i];
        if stop {
            let code = VarInt::from_u32(code::STREAM_CREATION_ERROR as u32);
            let _ = conn.recv_stream(id).stop(code);
            self.uni.remove(i);
            return Ok(());
        }
        if ended {
            if matches!(
                u.kind,
                Some(
                    stream_type::CONTROL | stream_type::QPACK_ENCODER | stream_type::QPACK_DECODER
                )
            ) {
                return Err(ConnError::new(
                    code::CLOSED_CRITICAL_STREAM,
                    "the server closed its control or QPACK stream (H3_CLOSED_CRITICAL_STREAM)",
                ));
            }
            self.uni.remove(i);
        }
        Ok(())
    }

    /// Bytes of unidirectional stream `i`; Ok(false) when the stream is one to stop reading
    /// (a type this side does not know).
    fn uni_bytes(&mut self, i: usize, mut b: &[u8]) -> Result<bool, ConnError> {
        let u = &mut self.uni[i];
        if u.kind.is_none() {
            let take = b.len().min(8 - u.head.len().min(8));
            u.head.extend_from_slice(&b[..take]);
            let Some((t, n)) = varint::read(&u.head) else { return Ok(true) };
            b = &b[take - (u.head.len() - n)..];
            u.kind = Some(t);
            match t {
                stream_type::CONTROL if self.peer_control => {
                    return Err(ConnError::new(
                        code::STREAM_CREATION_ERROR,
                        "the server opened a second control stream (H3_STREAM_CREATION_ERROR)",
                    ));
                }
                stream_type::CONTROL => self.peer_control = true,
                stream_type::PUSH => {
                    return Err(ConnError::new(
                        code::ID_ERROR,
                        "the server pushed, which this client never allowed (H3_ID_ERROR)",
                    ));
                }
                stream_type::QPACK_ENCODER | stream_type::QPACK_DECODER => {}
                _ => return Ok(false),
            }
        }
        let u = &mut self.uni[i];
        match u.kind {
            Some(stream_type::CONTROL) => {
                if let Some(g) = control_bytes(u, b)? {
                    self.goaway = Some(self.goaway.map_or(g, |old| old.min(g)));
                }
                Ok(true)
            }
            Some(stream_type::QPACK_ENCODER) => {
                // With a table capacity of 0 the only instruction the encoder may send is
                // "Set Dynamic Table Capacity" to 0 (0x20).
                if b.iter().any(|&x| x != 0x20) {
                    return Err(ConnError::new(
                        code::QPACK_ENCODER_STREAM_ERROR,
                        "the server's QPACK encoder stream uses a dynamic table this client set \
                         to 0 bytes (QPACK_ENCODER_STREAM_ERROR)",
                    ));
                }
                Ok(true)
            }
            _ => Ok(true),
        }
    }
}

/// The server's control stream's bytes: its SETTINGS first (checked), then what may follow;
/// the identifier of a GOAWAY among them.
fn control_bytes(u: &mut Uni, b: &[u8]) -> Result<Option<u64>, ConnError> {
    let mut goaway = None;
    let settings_seen = &mut u.settings_seen;
    u.reader.feed::<ConnError>(
        b,
        &mut |t| {
            let on = if *settings_seen { On::Control } else { On::ControlFirst };
            *settings_seen = true;
            frame::allowed(on, t)
        },
        &mut |e| {
            match e {
                Event::Frame { kind: kind::SETTINGS, payload } => {
                    frame::settings(payload)?;
                }
                Event::Frame { kind: kind::GOAWAY, payload } => {
                    goaway = Some(frame::goaway(payload)?);
                }
                _ => {}
            }
            Ok(())
        },
    )?;
    Ok(goaway)
}

/// A request stream's bytes: frames of its response.
fn absorb(s: &mut Stream, dec: &mut qpack::Decoder, b: &[u8]) -> Result<(), ConnError> {
    let (status, interim, body) = (&mut s.status, &mut s.interim, &mut s.body);
    s.reader.feed::<ConnError>(b, &mut |t| frame::allowed(On::Request, t), &mut |e| {
        match e {
            Event::Frame { kind: kind::HEADERS, payload } => {
                let mut st = None;
                dec.decode(payload, &mut |n, v| {
                    if n == b":status" {
                        st = std::str::from_utf8(v).ok().and_then(|v| v.parse::<u16>().ok());
                    }
                })
                .map_err(|e| {
                    ConnError::new(
                        code::QPACK_DECOMPRESSION_FAILED,
                        format!("{e} (QPACK_DECOMPRESSION_FAILED)"),
                    )
                })?;
                if *status != 0 {
                    // Trailers.
                    return Ok(());
                }
                match st {
                    Some(100..=199) => *interim += 1,
                    Some(v @ 200..=999) => *status = v,
                    _ => {
                        return Err(ConnError::new(
                            code::MESSAGE_ERROR,
                            "a response without a valid :status (H3_MESSAGE_ERROR)",
                        ))
                    }
                }
            }
            Event::Frame { kind: kind::PUSH_PROMISE, .. } => {
                return Err(ConnError::new(
                    code::ID_ERROR,
                    "a PUSH_PROMISE, which this client never allowed (H3_ID_ERROR)",
                ));
            }
            Event::Frame { .. } => {}
            Event::DataStart(_) => {
                if *status == 0 {
                    return Err(ConnError::new(
                        code::FRAME_UNEXPECTED,
                        "DATA before the response's HEADERS (H3_FRAME_UNEXPECTED)",
                    ));
                }
            }
            Event::Data(d) => *body += d.len() as u64,
        }
        Ok(())
    })
}
