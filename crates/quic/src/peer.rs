//! The HTTP/3 streams each side keeps besides requests (RFC 9114 section 6.2): this side's
//! control stream with its SETTINGS, and the peer's unidirectional streams read and checked
//! (its control stream: SETTINGS first, then GOAWAY and the rest; its QPACK streams, which
//! with a dynamic table of 0 bytes may carry nothing but a capacity of 0). What breaks the
//! rules is a [`ConnError`] with the code RFC 9114 names, which the side closes with.

use crate::conn::{Conn, Drained};
use qpslab_http::h3::frame::{self, code, kind, setting, stream_type, Event, FrameError, On};
use qpslab_http::h3::varint;

/// The largest control frame (SETTINGS, GOAWAY, HEADERS) taken.
pub const MAX_FRAME: usize = 64 * 1024;
/// The most a field section may decode to (announced as SETTINGS_MAX_FIELD_SECTION_SIZE).
pub const MAX_SECTION: usize = 64 * 1024;
/// Unidirectional streams of the peer's a connection reads at once (control, QPACK encoder
/// and decoder, and a few it does not know, which it stops): the limit given to QUIC.
pub const MAX_UNI: u64 = 16;

/// A connection-level error: the HTTP/3 code to close with and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnError {
    pub code: u64,
    pub msg: String,
}

impl ConnError {
    pub fn new(code: u64, msg: impl Into<String>) -> ConnError {
        ConnError { code, msg: msg.into() }
    }
}

impl From<FrameError> for ConnError {
    fn from(e: FrameError) -> Self {
        ConnError::new(e.code(), format!("{e} ({})", code::name(e.code())))
    }
}

/// Which side the peer is: it decides what the peer may open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    Client,
    Server,
}

impl Peer {
    fn name(self) -> &'static str {
        match self {
            Peer::Client => "the client",
            Peer::Server => "the server",
        }
    }
}

/// One of the peer's unidirectional streams.
#[derive(Debug)]
struct Uni {
    id: u64,
    /// Its type, once its first varint arrived; the bytes of that varint so far.
    kind: Option<u64>,
    head: Vec<u8>,
    reader: frame::Reader,
    settings_seen: bool,
}

/// This side's control stream and the peer's unidirectional streams.
#[derive(Debug)]
pub struct Streams {
    peer: Peer,
    /// Our control stream's bytes not yet taken (its SETTINGS, written once it opens).
    control: Option<(u64, Vec<u8>)>,
    uni: Vec<Uni>,
    /// The peer's control stream was seen (a second is an error).
    peer_control: bool,
    /// The peer's GOAWAY: the lowest identifier it sent.
    pub goaway: Option<u64>,
}

impl Streams {
    pub fn new(peer: Peer) -> Streams {
        Streams { peer, control: None, uni: Vec::new(), peer_control: false, goaway: None }
    }

    /// The connection is up: opens this side's control stream with its SETTINGS (no dynamic
    /// table, no blocked streams, field sections up to [`MAX_SECTION`]).
    pub fn open_control(&mut self, conn: &mut impl Conn) -> Result<(), ConnError> {
        let id = conn.open(false).ok_or_else(|| {
            ConnError::new(
                code::STREAM_CREATION_ERROR,
                format!(
                    "{} allows no unidirectional stream for the control stream",
                    self.peer.name()
                ),
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
        self.write_control(conn, &[]);
        Ok(())
    }

    /// Appends `bytes` (a frame) to the control stream and writes what flow control takes.
    pub fn write_control(&mut self, conn: &mut impl Conn, bytes: &[u8]) {
        if let Some((id, out)) = &mut self.control {
            out.extend_from_slice(bytes);
            let n = conn.write(*id, out);
            out.drain(..n);
        }
    }

    /// Whether `id` is our control stream (its writes resume when it is writable).
    pub fn is_control(&self, id: u64) -> bool {
        self.control.as_ref().is_some_and(|(c, _)| *c == id)
    }

    /// Takes the unidirectional streams the peer opened and reads what they hold.
    pub fn accept(&mut self, conn: &mut impl Conn) -> Result<(), ConnError> {
        while let Some(id) = conn.accept(false) {
            self.uni.push(Uni {
                id,
                kind: None,
                head: Vec::new(),
                reader: frame::Reader::new(MAX_FRAME),
                settings_seen: false,
            });
            self.read(conn, id)?;
        }
        Ok(())
    }

    /// Reads what unidirectional stream `id` of the peer's has.
    pub fn read(&mut self, conn: &mut impl Conn, id: u64) -> Result<(), ConnError> {
        let Some(i) = self.uni.iter().position(|u| u.id == id) else { return Ok(()) };
        let how = conn.read(id, |b| self.bytes(i, b))?;
        let u = &self.uni[i];
        if how == Drained::Stopped {
            conn.stop(id, code::STREAM_CREATION_ERROR);
            self.uni.remove(i);
            return Ok(());
        }
        if matches!(how, Drained::Ended | Drained::Reset(_)) {
            if matches!(
                u.kind,
                Some(
                    stream_type::CONTROL | stream_type::QPACK_ENCODER | stream_type::QPACK_DECODER
                )
            ) {
                return Err(ConnError::new(
                    code::CLOSED_CRITICAL_STREAM,
                    format!(
                        "{} closed its control or QPACK stream (H3_CLOSED_CRITICAL_STREAM)",
                        self.peer.name()
                    ),
                ));
            }
            self.uni.remove(i);
        }
        Ok(())
    }

    /// Bytes of unidirectional stream `i`; Ok(false) when the stream is one to stop reading
    /// (a type this side does not know).
    fn bytes(&mut self, i: usize, mut b: &[u8]) -> Result<bool, ConnError> {
        let peer = self.peer.name();
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
                        format!("{peer} opened a second control stream (H3_STREAM_CREATION_ERROR)"),
                    ));
                }
                stream_type::CONTROL => self.peer_control = true,
                // Only a server pushes (RFC 9114 section 6.2.2).
                stream_type::PUSH if self.peer == Peer::Client => {
                    return Err(ConnError::new(
                        code::STREAM_CREATION_ERROR,
                        "the client opened a push stream (H3_STREAM_CREATION_ERROR)",
                    ));
                }
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
                        format!(
                            "{peer}'s QPACK encoder stream uses a dynamic table this side set \
                             to 0 bytes (QPACK_ENCODER_STREAM_ERROR)"
                        ),
                    ));
                }
                Ok(true)
            }
            _ => Ok(true),
        }
    }
}

/// The peer's control stream's bytes: its SETTINGS first (checked), then what may follow;
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
