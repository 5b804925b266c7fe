//! HTTP/3 frames (RFC 9114 section 7): a type and a length as varints, then the payload. A
//! [`Reader`] takes a stream's bytes as they come, hands over each whole control frame
//! (bounded) and passes DATA payloads through as they arrive, skipping reserved and unknown
//! types unbuffered.

use super::varint;

/// Frame types.
pub mod kind {
    pub const DATA: u64 = 0x00;
    pub const HEADERS: u64 = 0x01;
    pub const CANCEL_PUSH: u64 = 0x03;
    pub const SETTINGS: u64 = 0x04;
    pub const PUSH_PROMISE: u64 = 0x05;
    pub const GOAWAY: u64 = 0x07;
    pub const MAX_PUSH_ID: u64 = 0x0d;
}

/// Settings identifiers (RFC 9114 section 7.2.4.1, RFC 9204 section 5).
pub mod setting {
    pub const QPACK_MAX_TABLE_CAPACITY: u64 = 0x01;
    pub const MAX_FIELD_SECTION_SIZE: u64 = 0x06;
    pub const QPACK_BLOCKED_STREAMS: u64 = 0x07;
}

/// Unidirectional stream types (RFC 9114 section 6.2, RFC 9204 section 4.2).
pub mod stream_type {
    pub const CONTROL: u64 = 0x00;
    pub const PUSH: u64 = 0x01;
    pub const QPACK_ENCODER: u64 = 0x02;
    pub const QPACK_DECODER: u64 = 0x03;
}

/// Error codes (RFC 9114 section 8.1, RFC 9204 section 6).
pub mod code {
    pub const NO_ERROR: u64 = 0x100;
    pub const GENERAL_PROTOCOL_ERROR: u64 = 0x101;
    pub const INTERNAL_ERROR: u64 = 0x102;
    pub const STREAM_CREATION_ERROR: u64 = 0x103;
    pub const CLOSED_CRITICAL_STREAM: u64 = 0x104;
    pub const FRAME_UNEXPECTED: u64 = 0x105;
    pub const FRAME_ERROR: u64 = 0x106;
    pub const EXCESSIVE_LOAD: u64 = 0x107;
    pub const ID_ERROR: u64 = 0x108;
    pub const SETTINGS_ERROR: u64 = 0x109;
    pub const MISSING_SETTINGS: u64 = 0x10a;
    pub const REQUEST_REJECTED: u64 = 0x10b;
    pub const REQUEST_CANCELLED: u64 = 0x10c;
    pub const REQUEST_INCOMPLETE: u64 = 0x10d;
    pub const MESSAGE_ERROR: u64 = 0x10e;
    pub const CONNECT_ERROR: u64 = 0x10f;
    pub const VERSION_FALLBACK: u64 = 0x110;
    pub const QPACK_DECOMPRESSION_FAILED: u64 = 0x200;
    pub const QPACK_ENCODER_STREAM_ERROR: u64 = 0x201;
    pub const QPACK_DECODER_STREAM_ERROR: u64 = 0x202;

    /// The code's name as the RFCs spell it; one they do not name, by its value.
    pub fn name(code: u64) -> String {
        const NAMES: [&str; 17] = [
            "H3_NO_ERROR",
            "H3_GENERAL_PROTOCOL_ERROR",
            "H3_INTERNAL_ERROR",
            "H3_STREAM_CREATION_ERROR",
            "H3_CLOSED_CRITICAL_STREAM",
            "H3_FRAME_UNEXPECTED",
            "H3_FRAME_ERROR",
            "H3_EXCESSIVE_LOAD",
            "H3_ID_ERROR",
            "H3_SETTINGS_ERROR",
            "H3_MISSING_SETTINGS",
            "H3_REQUEST_REJECTED",
            "H3_REQUEST_CANCELLED",
            "H3_REQUEST_INCOMPLETE",
            "H3_MESSAGE_ERROR",
            "H3_CONNECT_ERROR",
            "H3_VERSION_FALLBACK",
        ];
        match code {
            NO_ERROR..=VERSION_FALLBACK => NAMES[(code - NO_ERROR) as usize].to_string(),
            QPACK_DECOMPRESSION_FAILED => "QPACK_DECOMPRESSION_FAILED".into(),
            QPACK_ENCODER_STREAM_ERROR => "QPACK_ENCODER_STREAM_ERROR".into(),
            QPACK_DECODER_STREAM_ERROR => "QPACK_DECODER_STREAM_ERROR".into(),
            _ => format!("error code {code:#x}"),
        }
    }
}

/// A frame type's name, for messages.
pub fn kind_name(t: u64) -> String {
    match t {
        kind::DATA => "DATA".into(),
        kind::HEADERS => "HEADERS".into(),
        kind::CANCEL_PUSH => "CANCEL_PUSH".into(),
        kind::SETTINGS => "SETTINGS".into(),
        kind::PUSH_PROMISE => "PUSH_PROMISE".into(),
        kind::GOAWAY => "GOAWAY".into(),
        kind::MAX_PUSH_ID => "MAX_PUSH_ID".into(),
        0x02 | 0x06 | 0x08 | 0x09 => format!("HTTP/2-only frame type {t:#x}"),
        _ => format!("frame type {t:#x}"),
    }
}

/// Why a stream's frames are refused; each maps to the connection error [`FrameError::code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("a {kind} frame of {len} bytes, over the {max} taken")]
    TooLarge { kind: String, len: u64, max: usize },
    #[error("a {kind} frame on a {on} stream")]
    Unexpected { kind: String, on: &'static str },
    #[error("the control stream begins with a {0} frame, not SETTINGS")]
    MissingSettings(String),
    #[error("a malformed {0} frame")]
    Malformed(&'static str),
    #[error("the stream ends inside a frame")]
    Truncated,
    #[error("setting {0:#x} twice in one SETTINGS frame")]
    DuplicateSetting(u64),
    #[error("setting {0:#x}, which is HTTP/2's")]
    H2Setting(u64),
}

impl FrameError {
    /// The HTTP/3 error code the connection closes with.
    pub fn code(&self) -> u64 {
        match self {
            FrameError::TooLarge { .. } => code::EXCESSIVE_LOAD,
            FrameError::Unexpected { .. } => code::FRAME_UNEXPECTED,
            FrameError::MissingSettings(_) => code::MISSING_SETTINGS,
            FrameError::Malformed(_) | FrameError::Truncated => code::FRAME_ERROR,
            FrameError::DuplicateSetting(_) | FrameError::H2Setting(_) => code::SETTINGS_ERROR,
        }
    }
}

/// The kinds of stream a frame can arrive on, for [`allowed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum On {
    /// The peer's control stream, its first frame.
    ControlFirst,
    /// The peer's control stream after its SETTINGS.
    Control,
    /// A request stream (bidirectional).
    Request,
}

/// Whether a frame of type `t` may arrive on a stream (RFC 9114 section 7.2 and its table in
/// appendix A.2); reserved and unknown types may, anywhere but first on the control stream.
pub fn allowed(on: On, t: u64) -> Result<(), FrameError> {
    let unexpected = |on| Err(FrameError::Unexpected { kind: kind_name(t), on });
    if matches!(t, 0x02 | 0x06 | 0x08 | 0x09) {
        return unexpected(if on == On::Request { "request" } else { "control" });
    }
    match on {
        On::ControlFirst if t != kind::SETTINGS => Err(FrameError::MissingSettings(kind_name(t))),
        On::ControlFirst => Ok(()),
        On::Control => match t {
            kind::DATA | kind::HEADERS | kind::PUSH_PROMISE | kind::SETTINGS => {
                unexpected("control")
            }
            _ => Ok(()),
        },
        On::Request => match t {
            kind::SETTINGS | kind::GOAWAY | kind::MAX_PUSH_ID | kind::CANCEL_PUSH => {
                unexpected("request")
            }
            _ => Ok(()),
        },
    }
}

/// What a [`Reader`] hands over.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// A whole frame other than DATA, of a type [`Reader::feed`] was told to keep.
    Frame { kind: u64, payload: &'a [u8] },
    /// A DATA frame begins, of this many bytes.
    DataStart(u64),
    /// Part of a DATA frame's payload, as it arrived.
    Data(&'a [u8]),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Gathering a frame's type and length (up to 16 bytes).
    Head,
    /// Passing `left` DATA bytes through.
    Data { left: u64 },
    /// Gathering `len` payload bytes of a frame of type `kind`.
    Payload { kind: u64, len: usize },
    /// Dropping `left` bytes of a reserved or unknown frame.
    Skip { left: u64 },
}

/// One stream's frames, read as they arrive.
#[derive(Debug)]
pub struct Reader {
    state: State,
    head: [u8; 16],
    head_len: usize,
    payload: Vec<u8>,
    /// The largest non-DATA frame taken.
    max: usize,
}

/// Whether a frame type is one an endpoint acts on (the rest are skipped, RFC 9114 section 9).
fn known(t: u64) -> bool {
    matches!(t, 0x00..=0x09 | kind::MAX_PUSH_ID)
}

impl Reader {
    /// A reader that takes non-DATA frames of up to `max` bytes.
    pub fn new(max: usize) -> Reader {
        Reader { state: State::Head, head: [0; 16], head_len: 0, payload: Vec::new(), max }
    }

    /// Whether the stream is between frames: where it may end.
    pub fn between_frames(&self) -> bool {
        self.state == State::Head && self.head_len == 0
    }

    /// Reads `input`, calling `event` for each whole frame and each piece of DATA; `check`
    /// is asked of each frame's type as its head is read (the stream's rules, [`allowed`]).
    /// Stops at the first error, from either the framing or `event`.
    pub fn feed<E: From<FrameError>>(
        &mut self,
        mut input: &[u8],
        check: &mut dyn FnMut(u64) -> Result<(), FrameError>,
        event: &mut dyn FnMut(Event<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        while !input.is_empty() {
            match self.state {
                State::Head => {
                    let take = input.len().min(self.head.len() - self.head_len);
                    self.head[self.head_len..self.head_len + take].copy_from_slice(&input[..take]);
                    let have = &self.head[..self.head_len + take];
                    let Some((t, a)) = varint::read(have) else {
                        self.head_len += take;
                        return Ok(());
                    };
                    let Some((len, b)) = varint::read(&have[a..]) else {
                        self.head_len += take;
                        return Ok(());
                    };
                    // Of the bytes just copied, those past the head belong to the payload.
                    let used = a + b - self.head_len;
                    input = &input[used..];
                    self.head_len = 0;
                    check(t)?;
                    self.state = if t == kind::DATA {
                        event(Event::DataStart(len))?;
                        State::Data { left: len }
                    } else if !known(t) {
                        State::Skip { left: len }
                    } else if len > self.max as u64 {
                        let e = FrameError::TooLarge { kind: kind_name(t), len, max: self.max };
                        return Err(e.into());
                    } else {
                        self.payload.clear();
                        State::Payload { kind: t, len: len as usize }
                    };
                    self.finish_empty(event)?;
                }
                State::Data { left } => {
                    let n = input.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    event(Event::Data(&input[..n]))?;
                    input = &input[n..];
                    let left = left - n as u64;
                    self.state = if left == 0 { State::Head } else { State::Data { left } };
                }
                State::Skip { left } => {
                    let n = input.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    input = &input[n..];
                    let left = left - n as u64;
                    self.state = if left == 0 { State::Head } else { State::Skip { left } };
                }
                State::Payload { kind, len } => {
                    let n = input.len().min(len - self.payload.len());
                    self.payload.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    if self.payload.len() == len {
                        self.state = State::Head;
                        event(Event::Frame { kind, payload: &self.payload })?;
                    }
                }
            }
        }
        Ok(())
    }

    /// A frame whose payload is empty is whole as soon as its head is.
    fn finish_empty<E>(
        &mut self,
        event: &mut dyn FnMut(Event<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        match self.state {
            State::Payload { kind, len: 0 } => {
                self.state = State::Head;
                event(Event::Frame { kind, payload: &[] })
            }
            State::Data { left: 0 } | State::Skip { left: 0 } => {
                self.state = State::Head;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// A SETTINGS payload's identifiers and values; a duplicate or an HTTP/2 identifier is a
/// SETTINGS_ERROR (RFC 9114 section 7.2.4).
pub fn settings(payload: &[u8]) -> Result<Vec<(u64, u64)>, FrameError> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut at = 0;
    while at < payload.len() {
        let (id, a) = varint::read(&payload[at..]).ok_or(FrameError::Malformed("SETTINGS"))?;
        let (v, b) = varint::read(&payload[at + a..]).ok_or(FrameError::Malformed("SETTINGS"))?;
        at += a + b;
        if matches!(id, 0x02..=0x05) {
            return Err(FrameError::H2Setting(id));
        }
        if out.iter().any(|&(i, _)| i == id) {
            return Err(FrameError::DuplicateSetting(id));
        }
        out.push((id, v));
    }
    Ok(out)
}

/// A GOAWAY's identifier (a stream id from a server, a push id from a client).
pub fn goaway(payload: &[u8]) -> Result<u64, FrameError> {
    match varint::read(payload) {
        Some((id, n)) if n == payload.len() => Ok(id),
        _ => Err(FrameError::Malformed("GOAWAY")),
    }
}

/// Appends a frame's head.
pub fn put_head(out: &mut Vec<u8>, t: u64, len: usize) {
    varint::put(out, t);
    varint::put(out, len as u64);
}

/// Appends a SETTINGS frame.
pub fn put_settings(out: &mut Vec<u8>, values: &[(u64, u64)]) {
    let len = values.iter().map(|&(i, v)| varint::len(i) + varint::len(v)).sum();
    put_head(out, kind::SETTINGS, len);
    for &(i, v) in values {
        varint::put(out, i);
        varint::put(out, v);
    }
}

/// Appends a GOAWAY frame.
pub fn put_goaway(out: &mut Vec<u8>, id: u64) {
    put_head(out, kind::GOAWAY, varint::len(id));
    varint::put(out, id);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[derive(Debug, PartialEq)]
    enum Seen {
        Frame(u64, Vec<u8>),
        DataStart(u64),
        Data(Vec<u8>),
    }

    fn read_in(pieces: &[&[u8]], on: On) -> Result<Vec<Seen>, FrameError> {
        let mut r = Reader::new(64);
        let mut seen = Vec::new();
        let mut first = on == On::ControlFirst;
        for p in pieces {
            r.feed::<FrameError>(
                p,
                &mut |t| {
                    let on = match on {
                        On::ControlFirst if !first => On::Control,
                        on => on,
                    };
                    first = false;
                    allowed(on, t)
                },
                &mut |e| {
                    seen.push(match e {
                        Event::Frame { kind, payload } => Seen::Frame(kind, payload.to_vec()),
                        Event::DataStart(n) => Seen::DataStart(n),
                        Event::Data(d) => Seen::Data(d.to_vec()),
                    });
                    Ok(())
                },
            )?;
        }
        if !r.between_frames() {
            return Err(FrameError::Truncated);
        }
        Ok(seen)
    }

    fn joined(seen: Vec<Seen>) -> Vec<Seen> {
        let mut out: Vec<Seen> = Vec::new();
        for s in seen {
            match (out.last_mut(), s) {
                (Some(Seen::Data(a)), Seen::Data(b)) => a.extend(b),
                (_, s) => out.push(s),
            }
        }
        out
    }

    #[test]
    fn frames_read_alike_whole_and_byte_by_byte() {
        let mut wire = Vec::new();
        put_head(&mut wire, kind::HEADERS, 3);
        wire.extend_from_slice(b"abc");
        put_head(&mut wire, 0x21, 2); // reserved: skipped
        wire.extend_from_slice(b"zz");
        put_head(&mut wire, kind::DATA, 5);
        wire.extend_from_slice(b"hello");
        put_head(&mut wire, kind::DATA, 0);
        put_head(&mut wire, kind::HEADERS, 0);
        let want = vec![
            Seen::Frame(kind::HEADERS, b"abc".to_vec()),
            Seen::DataStart(5),
            Seen::Data(b"hello".to_vec()),
            Seen::DataStart(0),
            Seen::Frame(kind::HEADERS, vec![]),
        ];
        assert_eq!(read_in(&[&wire], On::Request).unwrap(), want);
        let bytes: Vec<&[u8]> = wire.chunks(1).collect();
        assert_eq!(joined(read_in(&bytes, On::Request).unwrap()), want);
    }

    #[test]
    fn the_per_stream_rules_hold() {
        let mut s = Vec::new();
        put_settings(&mut s, &[(setting::QPACK_MAX_TABLE_CAPACITY, 0)]);
        let mut h = Vec::new();
        put_head(&mut h, kind::HEADERS, 0);
        let e = read_in(&[&h], On::ControlFirst).unwrap_err();
        assert_eq!(e.code(), code::MISSING_SETTINGS);
        let e = read_in(&[&s, &s], On::ControlFirst).unwrap_err();
        assert_eq!(e.code(), code::FRAME_UNEXPECTED, "a second SETTINGS");
        let e = read_in(&[&s], On::Request).unwrap_err();
        assert_eq!(e.code(), code::FRAME_UNEXPECTED);
        let mut h2 = Vec::new();
        put_head(&mut h2, 0x06, 0); // HTTP/2's PING
        assert_eq!(read_in(&[&h2], On::Request).unwrap_err().code(), code::FRAME_UNEXPECTED);
        assert!(read_in(&[&s, &h], On::ControlFirst).is_err(), "HEADERS on control");
    }

    #[test]
    fn a_frame_over_the_bound_and_a_cut_frame_are_refused() {
        let mut big = Vec::new();
        put_head(&mut big, kind::HEADERS, 65);
        assert_eq!(read_in(&[&big], On::Request).unwrap_err().code(), code::EXCESSIVE_LOAD);
        // Unknown frames of any length are skipped, not gathered.
        let mut unknown = Vec::new();
        put_head(&mut unknown, 0x5e, 1 << 20);
        unknown.extend(std::iter::repeat_n(0u8, 1 << 20));
        assert_eq!(read_in(&[&unknown], On::Request).unwrap(), vec![]);
        let mut cut = Vec::new();
        put_head(&mut cut, kind::DATA, 10);
        cut.extend_from_slice(b"short");
        assert_eq!(read_in(&[&cut], On::Request).unwrap_err(), FrameError::Truncated);
    }

    #[test]
    fn settings_refuse_duplicates_and_http2_identifiers() {
        let payload = |v: &[(u64, u64)]| {
            let mut f = Vec::new();
            put_settings(&mut f, v);
            f[2..].to_vec()
        };
        assert_eq!(settings(&payload(&[(1, 0), (6, 16_384)])).unwrap(), [(1, 0), (6, 16_384)]);
        assert_eq!(settings(&payload(&[(6, 1), (6, 2)])), Err(FrameError::DuplicateSetting(6)));
        assert_eq!(settings(&payload(&[(4, 1)])), Err(FrameError::H2Setting(4)));
        assert_eq!(settings(&[0x40]), Err(FrameError::Malformed("SETTINGS")));
        assert_eq!(goaway(&[0x04]), Ok(4));
        assert!(goaway(&[0x04, 0x00]).is_err());
    }

    #[test]
    fn codes_are_named_and_unknown_ones_shown_by_value() {
        assert_eq!(code::name(code::REQUEST_REJECTED), "H3_REQUEST_REJECTED");
        assert_eq!(code::name(code::QPACK_DECOMPRESSION_FAILED), "QPACK_DECOMPRESSION_FAILED");
        assert_eq!(code::name(0x1234), "error code 0x1234");
    }
}
