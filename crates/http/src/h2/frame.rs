//! HTTP/2 frames (RFC 9113 section 4 and 6): the 9-byte header, the payloads' fixed parts
//! (padding, priority), and writers for the frames either side sends. Parsing takes bytes and
//! says what is there or what is wrong with it; nothing here keeps a connection's state.

/// What a client sends first (RFC 9113 section 3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A frame header's length.
pub const HEADER_LEN: usize = 9;

/// SETTINGS_MAX_FRAME_SIZE's default and least value.
pub const DEFAULT_MAX_FRAME: usize = 16_384;

/// The flow-control window both sides start with.
pub const DEFAULT_WINDOW: u32 = 65_535;

/// The largest window (2^31 - 1).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;

/// Frame types.
pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    /// SETTINGS and PING.
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS identifiers.
pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// A peer's new SETTINGS_INITIAL_WINDOW_SIZE: every open stream's send window moves by the
/// change (RFC 9113 section 6.9.2), and `initial` becomes it.
pub fn initial_window_changed<'a>(
    initial: &mut i64,
    value: u32,
    windows: impl IntoIterator<Item = &'a mut i64>,
) {
    let delta = i64::from(value) - *initial;
    *initial = i64::from(value);
    for w in windows {
        *w += delta;
    }
}

/// Error codes (RFC 9113 section 7).
pub mod code {
    pub const NO_ERROR: u32 = 0x0;
    pub const PROTOCOL_ERROR: u32 = 0x1;
    pub const INTERNAL_ERROR: u32 = 0x2;
    pub const FLOW_CONTROL_ERROR: u32 = 0x3;
    pub const SETTINGS_TIMEOUT: u32 = 0x4;
    pub const STREAM_CLOSED: u32 = 0x5;
    pub const FRAME_SIZE_ERROR: u32 = 0x6;
    pub const REFUSED_STREAM: u32 = 0x7;
    pub const CANCEL: u32 = 0x8;
    pub const COMPRESSION_ERROR: u32 = 0x9;
    pub const CONNECT_ERROR: u32 = 0xa;
    pub const ENHANCE_YOUR_CALM: u32 = 0xb;
    pub const INADEQUATE_SECURITY: u32 = 0xc;
    pub const HTTP_1_1_REQUIRED: u32 = 0xd;

    /// The code's name as the RFC spells it, for reports.
    pub fn name(code: u32) -> &'static str {
        const NAMES: [&str; 14] = [
            "NO_ERROR",
            "PROTOCOL_ERROR",
            "INTERNAL_ERROR",
            "FLOW_CONTROL_ERROR",
            "SETTINGS_TIMEOUT",
            "STREAM_CLOSED",
            "FRAME_SIZE_ERROR",
            "REFUSED_STREAM",
            "CANCEL",
            "COMPRESSION_ERROR",
            "CONNECT_ERROR",
            "ENHANCE_YOUR_CALM",
            "INADEQUATE_SECURITY",
            "HTTP_1_1_REQUIRED",
        ];
        usize::try_from(code)
            .ok()
            .and_then(|i| NAMES.get(i))
            .copied()
            .unwrap_or("unknown error code")
    }
}

/// A frame's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub len: usize,
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
}

impl Header {
    /// The header at the start of `b`, if all 9 bytes are there.
    pub fn parse(b: &[u8]) -> Option<Header> {
        let h: &[u8; HEADER_LEN] = b.get(..HEADER_LEN)?.try_into().ok()?;
        Some(Header {
            len: usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]),
            kind: h[3],
            flags: h[4],
            // The reserved bit is ignored on receipt.
            stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & MAX_WINDOW,
        })
    }

    /// Whether `flag` is set.
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// What is wrong with a frame, as the connection error it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("a {kind} frame of {len} bytes, where its type fixes the size")]
    Size { kind: &'static str, len: usize },
    #[error("the padding is longer than the frame")]
    Padding,
    #[error("a {0} frame on stream 0")]
    StreamZero(&'static str),
    #[error("a {0} frame on a stream, where it belongs on stream 0")]
    NotStreamZero(&'static str),
    #[error("a SETTINGS value out of range: {0}")]
    Setting(&'static str),
}

impl FrameError {
    /// The error code a GOAWAY carries for it.
    pub fn code(&self) -> u32 {
        match self {
            FrameError::Size { .. } => code::FRAME_SIZE_ERROR,
            FrameError::Setting("initial window size") => code::FLOW_CONTROL_ERROR,
            _ => code::PROTOCOL_ERROR,
        }
    }
}

/// The type's name, for reports.
pub fn kind_name(kind: u8) -> &'static str {
    const NAMES: [&str; 10] = [
        "DATA",
        "HEADERS",
        "PRIORITY",
        "RST_STREAM",
        "SETTINGS",
        "PUSH_PROMISE",
        "PING",
        "GOAWAY",
        "WINDOW_UPDATE",
        "CONTINUATION",
    ];
    NAMES.get(usize::from(kind)).copied().unwrap_or("unknown")
}

/// The stream a PRIORITY frame, or a HEADERS frame's priority fields, make this one depend
/// on (none without them, or when they are cut short).
pub fn dependency(h: &Header, payload: &[u8]) -> Option<u32> {
    let at = match h.kind {
        kind::PRIORITY => 0,
        kind::HEADERS if h.has(flag::PRIORITY) => usize::from(h.has(flag::PADDED)),
        _ => return None,
    };
    let b = payload.get(at..at + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff)
}

/// A DATA or HEADERS payload without its padding (and, for HEADERS, its priority fields).
pub fn unpadded<'a>(h: &Header, payload: &'a [u8]) -> Result<&'a [u8], FrameError> {
    let mut p = payload;
    let mut pad = 0;
    if h.has(flag::PADDED) {
        let (&n, rest) = p.split_first().ok_or(FrameError::Padding)?;
        pad = usize::from(n);
        p = rest;
    }
    if h.kind == kind::HEADERS && h.has(flag::PRIORITY) {
        p = p.get(5..).ok_or(FrameError::Padding)?;
    }
    p.len().checked_sub(pad).map(|end| &p[..end]).ok_or(FrameError::Padding)
}

/// The (identifier, value) pairs of a SETTINGS payload, each checked against its range.
pub fn settings(h: &Header, payload: &[u8]) -> Result<Vec<(u16, u32)>, FrameError> {
    if h.stream != 0 {
        return Err(FrameError::NotStreamZero("SETTINGS"));
    }
    if !payload.len().is_multiple_of(6) || (h.has(flag::ACK) && !payload.is_empty()) {
        return Err(FrameError::Size { kind: "SETTINGS", len: payload.len() });
    }
    payload
        .chunks_exact(6)
        .map(|c| {
            let id = u16::from_be_bytes([c[0], c[1]]);
            let v = u32::from_be_bytes([c[2], c[3], c[4], c[5]]);
            match id {
                setting::ENABLE_PUSH if v > 1 => Err(FrameError::Setting("enable push")),
                setting::INITIAL_WINDOW_SIZE if v > MAX_WINDOW => {
                    Err(FrameError::Setting("initial window size"))
                }
                setting::MAX_FRAME_SIZE if !(16_384..=16_777_215).contains(&v) => {
                    Err(FrameError::Setting("max frame size"))
                }
                _ => Ok((id, v)),
            }
        })
        .collect()
}

/// A WINDOW_UPDATE's increment (zero is the caller's error to name: on stream 0 it is a
/// connection error, on a stream a stream error).
pub fn window_increment(payload: &[u8]) -> Result<u32, FrameError> {
    let b: [u8; 4] = payload
        .try_into()
        .map_err(|_| FrameError::Size { kind: "WINDOW_UPDATE", len: payload.len() })?;
    Ok(u32::from_be_bytes(b) & MAX_WINDOW)
}

/// A RST_STREAM's error code.
pub fn rst_code(h: &Header, payload: &[u8]) -> Result<u32, FrameError> {
    if h.stream == 0 {
        return Err(FrameError::StreamZero("RST_STREAM"));
    }
    let b: [u8; 4] = payload
        .try_into()
        .map_err(|_| FrameError::Size { kind: "RST_STREAM", len: payload.len() })?;
    Ok(u32::from_be_bytes(b))
}

/// A GOAWAY's last stream id and error code.
pub fn goaway(h: &Header, payload: &[u8]) -> Result<(u32, u32), FrameError> {
    if h.stream != 0 {
        return Err(FrameError::NotStreamZero("GOAWAY"));
    }
    if payload.len() < 8 {
        return Err(FrameError::Size { kind: "GOAWAY", len: payload.len() });
    }
    let last = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & MAX_WINDOW;
    Ok((last, u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]])))
}

/// Appends a frame header.
pub fn put_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    let l = (len as u32).to_be_bytes();
    out.extend_from_slice(&[l[1], l[2], l[3], kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
}

/// Appends a SETTINGS frame.
pub fn put_settings(out: &mut Vec<u8>, values: &[(u16, u32)]) {
    put_header(out, values.len() * 6, kind::SETTINGS, 0, 0);
    for &(id, v) in values {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&v.to_be_bytes());
    }
}

/// Appends a SETTINGS acknowledgement.
pub fn put_settings_ack(out: &mut Vec<u8>) {
    put_header(out, 0, kind::SETTINGS, flag::ACK, 0);
}

/// Appends a WINDOW_UPDATE.
pub fn put_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    put_header(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

/// Appends a PING (or its acknowledgement).
pub fn put_ping(out: &mut Vec<u8>, ack: bool, data: [u8; 8]) {
    put_header(out, 8, kind::PING, if ack { flag::ACK } else { 0 }, 0);
    out.extend_from_slice(&data);
}

/// Appends a GOAWAY.
pub fn put_goaway(out: &mut Vec<u8>, last_stream: u32, error: u32) {
    put_header(out, 8, kind::GOAWAY, 0, 0);
    out.extend_from_slice(&last_stream.to_be_bytes());
    out.extend_from_slice(&error.to_be_bytes());
}

/// Appends a RST_STREAM.
pub fn put_rst_stream(out: &mut Vec<u8>, stream: u32, error: u32) {
    put_header(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&error.to_be_bytes());
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn headers_round_trip_and_the_reserved_bit_is_ignored() {
        let mut out = Vec::new();
        put_header(&mut out, 0x01_02_03, kind::HEADERS, flag::END_HEADERS, 7);
        out[5] |= 0x80;
        let h = Header::parse(&out).unwrap();
        assert_eq!(
            h,
            Header { len: 0x01_02_03, kind: kind::HEADERS, flags: flag::END_HEADERS, stream: 7 }
        );
        assert!(Header::parse(&out[..8]).is_none());
    }

    #[test]
    fn settings_are_read_and_checked() {
        let mut out = Vec::new();
        put_settings(
            &mut out,
            &[(setting::MAX_CONCURRENT_STREAMS, 100), (setting::INITIAL_WINDOW_SIZE, MAX_WINDOW)],
        );
        let h = Header::parse(&out).unwrap();
        assert_eq!(settings(&h, &out[9..]).unwrap(), vec![(3, 100), (4, MAX_WINDOW)]);
        let mut bad = Vec::new();
        put_settings(&mut bad, &[(setting::INITIAL_WINDOW_SIZE, MAX_WINDOW + 1)]);
        let e = settings(&Header::parse(&bad).unwrap(), &bad[9..]).unwrap_err();
        assert_eq!(e.code(), code::FLOW_CONTROL_ERROR);
        let mut bad = Vec::new();
        put_settings(&mut bad, &[(setting::MAX_FRAME_SIZE, 100)]);
        assert!(settings(&Header::parse(&bad).unwrap(), &bad[9..]).is_err());
        let odd = Header { len: 5, kind: kind::SETTINGS, flags: 0, stream: 0 };
        assert_eq!(settings(&odd, &[0; 5]).unwrap_err().code(), code::FRAME_SIZE_ERROR);
    }

    #[test]
    fn padding_and_priority_are_stripped_and_overlong_padding_refused() {
        let h =
            Header { len: 0, kind: kind::HEADERS, flags: flag::PADDED | flag::PRIORITY, stream: 1 };
        let payload = [2, 0, 0, 0, 0, 16, b'a', b'b', 0, 0];
        assert_eq!(unpadded(&h, &payload).unwrap(), b"ab");
        let d = Header { len: 0, kind: kind::DATA, flags: flag::PADDED, stream: 1 };
        assert_eq!(unpadded(&d, &[9, 1, 2]), Err(FrameError::Padding));
        assert_eq!(unpadded(&d, &[]), Err(FrameError::Padding));
    }

    #[test]
    fn the_small_frames_round_trip() {
        let mut out = Vec::new();
        put_goaway(&mut out, 41, code::ENHANCE_YOUR_CALM);
        let h = Header::parse(&out).unwrap();
        assert_eq!(goaway(&h, &out[9..]).unwrap(), (41, code::ENHANCE_YOUR_CALM));
        assert_eq!(code::name(code::ENHANCE_YOUR_CALM), "ENHANCE_YOUR_CALM");
        assert_eq!(code::name(99), "unknown error code");
        let mut out = Vec::new();
        put_rst_stream(&mut out, 3, code::REFUSED_STREAM);
        let h = Header::parse(&out).unwrap();
        assert_eq!(rst_code(&h, &out[9..]).unwrap(), code::REFUSED_STREAM);
        let mut out = Vec::new();
        put_window_update(&mut out, 0, 1 << 30);
        assert_eq!(window_increment(&out[9..]).unwrap(), 1 << 30);
        assert!(window_increment(&out[9..12]).is_err());
        assert_eq!(kind_name(kind::CONTINUATION), "CONTINUATION");
    }
}
