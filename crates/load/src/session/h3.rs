//! One QUIC connection's HTTP/3, client side (RFC 9114), over any QUIC's streams ([`Conn`]):
//! the control stream and its SETTINGS, a request per bidirectional stream (its HEADERS and
//! DATA frames written from the group's encoding, the stream finished), responses read as
//! their frames arrive, the server's unidirectional streams (control, QPACK) checked. QPACK
//! runs with the dynamic table off, so a response's field section decodes on its own.
//!
//! A stream reset or stopped by the server fails its request as `reset`, with its HTTP/3
//! code; what breaks the protocol (a malformed frame, a field section that does not decode,
//! a push, a second control stream) fails the connection with the code RFC 9114 names, which
//! the thread's loop closes it with.

use std::collections::VecDeque;
use std::time::Instant;

use qpslab_http::h3::frame::{self, code, kind, Event, FrameError, On};
use qpslab_http::h3::qpack;
use qpslab_http::Response;
use qpslab_quic::conn::{Conn, Drained};
pub(crate) use qpslab_quic::peer::{ConnError, MAX_UNI};
use qpslab_quic::peer::{Peer, Streams, MAX_FRAME, MAX_SECTION};
use qpslab_quic::stack::Event as Quic;

use super::Req;

/// What a request stream carries back.
#[derive(Debug)]
struct Stream {
    id: u64,
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

/// One connection's HTTP/3 exchange.
#[derive(Debug)]
pub(crate) struct Http3 {
    pub group: usize,
    /// The request streams by their sequence (id / 4) from `base`, the oldest still open
    /// first (they open in order and mostly end in order: the window stays about as long as
    /// the streams in flight, and a stream is found without a search); `live` of them open.
    streams: VecDeque<Option<Stream>>,
    base: u64,
    live: usize,
    /// Our control stream and the server's unidirectional streams (its GOAWAY among them:
    /// streams from its id on will not be processed).
    peer: Streams,
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
            streams: VecDeque::new(),
            base: 0,
            live: 0,
            peer: Streams::new(Peer::Server),
            dec: qpack::Decoder::new(MAX_SECTION),
            reset: Vec::new(),
            answered: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// Requests on streams, waiting for their responses.
    pub fn in_flight(&self) -> usize {
        self.live
    }

    pub fn requests(&self) -> impl Iterator<Item = &Req> {
        self.streams.iter().flatten().map(|s| &s.req)
    }

    pub fn requests_mut(&mut self) -> impl Iterator<Item = &mut Req> {
        self.streams.iter_mut().flatten().map(|s| &mut s.req)
    }

    /// Takes every request off the connection (it failed or closed).
    pub fn take_requests(&mut self) -> Vec<Req> {
        self.live = 0;
        self.base += self.streams.len() as u64;
        self.streams.drain(..).flatten().map(|s| s.req).collect()
    }

    /// No more requests may go on this connection (the server's GOAWAY).
    pub fn going_away(&self) -> bool {
        self.peer.goaway.is_some()
    }

    /// The handshake is done: opens the control stream and queues its SETTINGS.
    pub fn connected(&mut self, conn: &mut impl Conn) -> Result<(), ConnError> {
        self.peer.open_control(conn)
    }

    /// Opens a stream for `req` and writes its bytes (`wire`: its HEADERS frame, and DATA
    /// when it has a body); false when the server's stream limit allows none now.
    pub fn send(&mut self, conn: &mut impl Conn, req: Req, wire: &[u8]) -> bool {
        let Some(id) = conn.open(true) else { return false };
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
        let n = conn.write(id, wire);
        if n == wire.len() {
            s.finished = conn.finish(id);
        } else {
            s.pending.extend_from_slice(&wire[n..]);
        }
        if self.live == 0 {
            // The window starts again at this stream (after a refused 0-RTT, far on).
            self.streams.clear();
            self.base = s.id >> 2;
        }
        // Streams open in order: never below the window.
        let Some(at) = (s.id >> 2).checked_sub(self.base) else { return false };
        while self.streams.len() as u64 <= at {
            self.streams.push_back(None);
        }
        self.streams[at as usize] = Some(s);
        self.live += 1;
        true
    }

    /// One of the connection's stream events, to what it concerns (the handshake's end and
    /// the connection's loss are the loop's).
    pub fn stream_event(&mut self, conn: &mut impl Conn, ev: Quic) -> Result<(), ConnError> {
        match ev {
            Quic::Opened => self.accept(conn)?,
            Quic::Readable(id) => self.readable(conn, id)?,
            Quic::Writable(id) => self.writable(conn, id),
            Quic::Stopped(id) => self.stopped(id),
            Quic::Connected | Quic::Lost(_) => {}
        }
        Ok(())
    }

    /// A stream the flow control held may take more.
    fn writable(&mut self, conn: &mut impl Conn, id: u64) {
        if self.peer.is_control(id) {
            return self.peer.write_control(conn, &[]);
        }
        let Some(i) = self.find(id) else { return };
        let Some(s) = self.streams[i].as_mut() else { return };
        if s.finished {
            return;
        }
        s.pending_at += conn.write(id, &s.pending[s.pending_at..]);
        if s.pending_at == s.pending.len() {
            s.pending = Vec::new();
            s.finished = conn.finish(id);
        }
    }

    /// The server opened streams: its unidirectional ones are read for their type.
    fn accept(&mut self, conn: &mut impl Conn) -> Result<(), ConnError> {
        self.peer.accept(conn)?;
        if conn.accept(true).is_some() {
            return Err(ConnError::new(
                code::STREAM_CREATION_ERROR,
                "the server opened a bidirectional stream (H3_STREAM_CREATION_ERROR)",
            ));
        }
        Ok(())
    }

    /// A stream has bytes (or its end, or a reset) to read.
    fn readable(&mut self, conn: &mut impl Conn, id: u64) -> Result<(), ConnError> {
        if id & 2 != 0 {
            // A unidirectional stream: the server's.
            return self.peer.read(conn, id);
        }
        let Some(i) = self.find(id) else { return Ok(()) };
        let Some(s) = self.streams[i].as_mut() else { return Ok(()) };
        let dec = &mut self.dec;
        let how = conn.read(id, |b| absorb(s, dec, b).map(|()| true))?;
        if let Drained::Reset(c) = how {
            let Some(s) = self.take(i) else { return Ok(()) };
            let why = format!("the server reset the stream ({})", code::name(c));
            self.reset.push((s.req, why));
            return Ok(());
        }
        if how == Drained::Ended {
            let Some(s) = self.take(i) else { return Ok(()) };
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
                conn.reset(id, code::NO_ERROR);
            }
            self.keep_reader(s.reader);
            let resp = Response {
                status: s.status,
                keep_alive: true,
                interim: s.interim,
                body_bytes: s.body,
                grpc: None,
                messages: 0,
            };
            self.answered.push((s.req, resp));
        }
        Ok(())
    }

    fn find(&self, id: u64) -> Option<usize> {
        let i = usize::try_from((id >> 2).checked_sub(self.base)?).ok()?;
        self.streams.get(i)?.as_ref().filter(|s| s.id == id).map(|_| i)
    }

    /// Takes stream `i` off the connection (the last takes its place).
    fn take(&mut self, i: usize) -> Option<Stream> {
        let s = self.streams.get_mut(i)?.take()?;
        self.live -= 1;
        while matches!(self.streams.front(), Some(None)) {
            self.streams.pop_front();
            self.base += 1;
        }
        Some(s)
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
    fn stopped(&mut self, id: u64) {
        if let Some(i) = self.find(id) {
            if let Some(s) = self.streams[i].as_mut() {
                s.finished = true;
                s.pending = Vec::new();
            }
        }
    }

    /// A request timed out: its stream is cancelled both ways and the request handed back.
    pub fn cancel_older(&mut self, conn: &mut impl Conn, before: Instant) -> Vec<Req> {
        let mut out = Vec::new();
        let cancelled = code::REQUEST_CANCELLED;
        let late: Vec<u64> = self
            .streams
            .iter()
            .flatten()
            .filter(|s| s.req.sent_at < before)
            .map(|s| s.id)
            .collect();
        for id in late {
            let Some(s) = self.find(id).and_then(|i| self.take(i)) else { continue };
            conn.reset(s.id, cancelled);
            conn.stop(s.id, cancelled);
            out.push(s.req);
        }
        out
    }
}

/// A request stream's bytes: frames of its response.
fn absorb(s: &mut Stream, dec: &mut qpack::Decoder, b: &[u8]) -> Result<(), ConnError> {
    let (status, interim, body) = (&mut s.status, &mut s.interim, &mut s.body);
    s.reader.feed::<ConnError>(b, &mut |t| frame::allowed(On::Request, t), &mut |e| {
        match e {
            Event::Frame { kind: kind::HEADERS, payload } => {
                let mut st = None;
                // The status alone is read: the other fields' values stay Huffman-coded.
                let status_only = |n: &[u8]| n == b":status";
                dec.decode_some(payload, &status_only, &mut |_, v| {
                    st = std::str::from_utf8(v).ok().and_then(|v| v.parse::<u16>().ok());
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
