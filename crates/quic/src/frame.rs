//! QUIC frames (RFC 9000 section 19) read from a packet's payload without copying (stream and
//! crypto data are slices of it) and written into a packet being built. With
//! [`crate::packet`], the layers a QUIC transport of qpslab's own stands on.

use qpslab_http::h3::varint;

/// One frame of a packet's payload; data borrows the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A run of PADDING bytes.
    Padding,
    Ping,
    Ack(Ack<'a>),
    ResetStream {
        id: u64,
        code: u64,
        final_size: u64,
    },
    StopSending {
        id: u64,
        code: u64,
    },
    Crypto {
        offset: u64,
        data: &'a [u8],
    },
    NewToken(&'a [u8]),
    Stream {
        id: u64,
        offset: u64,
        data: &'a [u8],
        fin: bool,
    },
    MaxData(u64),
    MaxStreamData {
        id: u64,
        max: u64,
    },
    MaxStreams {
        bidi: bool,
        max: u64,
    },
    DataBlocked(u64),
    StreamDataBlocked {
        id: u64,
        max: u64,
    },
    StreamsBlocked {
        bidi: bool,
        max: u64,
    },
    NewConnectionId {
        seq: u64,
        retire_prior_to: u64,
        id: &'a [u8],
        reset_token: &'a [u8],
    },
    RetireConnectionId(u64),
    PathChallenge(&'a [u8]),
    PathResponse(&'a [u8]),
    /// `app`: the application's code (0x1d), else the transport's (0x1c) with the frame
    /// type that caused it.
    ConnectionClose {
        app: bool,
        code: u64,
        frame: u64,
        reason: &'a [u8],
    },
    HandshakeDone,
}

/// An ACK frame: the largest acknowledged, its delay and the ranges below it, read as they
/// are needed ([`Ack::ranges`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack<'a> {
    pub largest: u64,
    pub delay: u64,
    first: u64,
    /// The (gap, range length) pairs after the first range, still encoded.
    rest: &'a [u8],
    count: u64,
    /// ECN counts (ECT0, ECT1, CE) of an ACK_ECN frame.
    pub ecn: Option<[u64; 3]>,
}

impl Ack<'_> {
    /// The acknowledged packet numbers as inclusive ranges, largest first.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut hi = Some(self.largest);
        let mut lo = self.largest.checked_sub(self.first);
        let mut first = true;
        let mut b = self.rest;
        let mut left = self.count;
        std::iter::from_fn(move || {
            if first {
                first = false;
                return Some((lo?, hi?));
            }
            if left == 0 {
                return None;
            }
            left -= 1;
            let (gap, n) = varint::read(b)?;
            let (len, m) = varint::read(&b[n..])?;
            b = &b[n + m..];
            hi = lo?.checked_sub(gap + 2);
            lo = hi?.checked_sub(len);
            Some((lo?, hi?))
        })
    }
}

/// A payload that does not read as frames (FRAME_ENCODING_ERROR), with the offending type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed(pub u64);

/// The frames of `payload`, in order; a malformed one ends them with an error.
pub fn frames(payload: &[u8]) -> impl Iterator<Item = Result<Frame<'_>, Malformed>> {
    let mut r = R { b: payload };
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || r.b.is_empty() {
            return None;
        }
        let f = r.frame();
        failed = f.is_err();
        Some(f)
    })
}

struct R<'a> {
    b: &'a [u8],
}

impl<'a> R<'a> {
    fn v(&mut self, ty: u64) -> Result<u64, Malformed> {
        let (v, n) = varint::read(self.b).ok_or(Malformed(ty))?;
        self.b = &self.b[n..];
        Ok(v)
    }

    fn bytes(&mut self, n: u64, ty: u64) -> Result<&'a [u8], Malformed> {
        let n = usize::try_from(n).map_err(|_| Malformed(ty))?;
        let (d, rest) = (self.b.get(..n).ok_or(Malformed(ty))?, &self.b[n.min(self.b.len())..]);
        self.b = rest;
        Ok(d)
    }

    fn frame(&mut self) -> Result<Frame<'a>, Malformed> {
        let ty = self.v(0)?;
        Ok(match ty {
            0x00 => {
                let n = self.b.iter().take_while(|&&x| x == 0).count();
                self.b = &self.b[n..];
                Frame::Padding
            }
            0x01 => Frame::Ping,
            0x02 | 0x03 => {
                let (largest, delay, count, first) =
                    (self.v(ty)?, self.v(ty)?, self.v(ty)?, self.v(ty)?);
                let start = self.b;
                for _ in 0..count {
                    self.v(ty)?;
                    self.v(ty)?;
                }
                let rest = &start[..start.len() - self.b.len()];
                let ecn =
                    if ty == 0x03 { Some([self.v(ty)?, self.v(ty)?, self.v(ty)?]) } else { None };
                if first > largest {
                    return Err(Malformed(ty));
                }
                Frame::Ack(Ack { largest, delay, first, rest, count, ecn })
            }
            0x04 => {
                Frame::ResetStream { id: self.v(ty)?, code: self.v(ty)?, final_size: self.v(ty)? }
            }
            0x05 => Frame::StopSending { id: self.v(ty)?, code: self.v(ty)? },
            0x06 => {
                let offset = self.v(ty)?;
                let len = self.v(ty)?;
                Frame::Crypto { offset, data: self.bytes(len, ty)? }
            }
            0x07 => {
                let len = self.v(ty)?;
                Frame::NewToken(self.bytes(len, ty)?)
            }
            0x08..=0x0f => {
                let id = self.v(ty)?;
                let offset = if ty & 0x04 != 0 { self.v(ty)? } else { 0 };
                let data = if ty & 0x02 != 0 {
                    let len = self.v(ty)?;
                    self.bytes(len, ty)?
                } else {
                    std::mem::take(&mut self.b)
                };
                if offset + data.len() as u64 > varint::MAX {
                    return Err(Malformed(ty));
                }
                Frame::Stream { id, offset, data, fin: ty & 0x01 != 0 }
            }
            0x10 => Frame::MaxData(self.v(ty)?),
            0x11 => Frame::MaxStreamData { id: self.v(ty)?, max: self.v(ty)? },
            0x12 | 0x13 => Frame::MaxStreams { bidi: ty == 0x12, max: self.v(ty)? },
            0x14 => Frame::DataBlocked(self.v(ty)?),
            0x15 => Frame::StreamDataBlocked { id: self.v(ty)?, max: self.v(ty)? },
            0x16 | 0x17 => Frame::StreamsBlocked { bidi: ty == 0x16, max: self.v(ty)? },
            0x18 => {
                let (seq, retire_prior_to) = (self.v(ty)?, self.v(ty)?);
                let len = self.bytes(1, ty)?[0];
                if !(1..=20).contains(&len) || retire_prior_to > seq {
                    return Err(Malformed(ty));
                }
                let id = self.bytes(u64::from(len), ty)?;
                Frame::NewConnectionId {
                    seq,
                    retire_prior_to,
                    id,
                    reset_token: self.bytes(16, ty)?,
                }
            }
            0x19 => Frame::RetireConnectionId(self.v(ty)?),
            0x1a => Frame::PathChallenge(self.bytes(8, ty)?),
            0x1b => Frame::PathResponse(self.bytes(8, ty)?),
            0x1c | 0x1d => {
                let app = ty == 0x1d;
                let code = self.v(ty)?;
                let frame = if app { 0 } else { self.v(ty)? };
                let len = self.v(ty)?;
                Frame::ConnectionClose { app, code, frame, reason: self.bytes(len, ty)? }
            }
            0x1e => Frame::HandshakeDone,
            _ => return Err(Malformed(ty)),
        })
    }
}

/// Appends an ACK frame for `ranges` (inclusive, largest first, not touching), with the
/// delay already scaled by the ack_delay_exponent.
pub fn put_ack(out: &mut Vec<u8>, ranges: &[(u64, u64)], delay: u64) {
    let Some(&(lo, hi)) = ranges.first() else { return };
    out.push(0x02);
    for v in [hi, delay, ranges.len() as u64 - 1, hi - lo] {
        varint::put(out, v);
    }
    let mut below = lo;
    for &(lo, hi) in &ranges[1..] {
        varint::put(out, below - hi - 2);
        varint::put(out, hi - lo);
        below = lo;
    }
}

/// Appends a CRYPTO frame.
pub fn put_crypto(out: &mut Vec<u8>, offset: u64, data: &[u8]) {
    out.push(0x06);
    varint::put(out, offset);
    varint::put(out, data.len() as u64);
    out.extend_from_slice(data);
}

/// Appends a STREAM frame with its offset and length.
pub fn put_stream(out: &mut Vec<u8>, id: u64, offset: u64, data: &[u8], fin: bool) {
    out.push(0x08 | 0x04 | 0x02 | u8::from(fin));
    varint::put(out, id);
    varint::put(out, offset);
    varint::put(out, data.len() as u64);
    out.extend_from_slice(data);
}

/// Appends a frame of a type and varint fields only (PING, MAX_DATA, MAX_STREAM_DATA,
/// MAX_STREAMS, STOP_SENDING, RESET_STREAM, HANDSHAKE_DONE...).
pub fn put_simple(out: &mut Vec<u8>, ty: u8, fields: &[u64]) {
    out.push(ty);
    for &f in fields {
        varint::put(out, f);
    }
}

/// Appends a CONNECTION_CLOSE frame: the application's (`app`) or the transport's.
pub fn put_close(out: &mut Vec<u8>, app: bool, code: u64, reason: &[u8]) {
    out.push(if app { 0x1d } else { 0x1c });
    varint::put(out, code);
    if !app {
        varint::put(out, 0);
    }
    varint::put(out, reason.len() as u64);
    out.extend_from_slice(reason);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn written_frames_read_back() {
        let mut b = Vec::new();
        put_ack(&mut b, &[(90, 100), (70, 80), (5, 5)], 7);
        put_crypto(&mut b, 3, b"hello");
        put_stream(&mut b, 4, 1000, b"GET", true);
        put_simple(&mut b, 0x12, &[100]);
        put_simple(&mut b, 0x01, &[]);
        put_close(&mut b, true, 0x100, b"bye");
        b.extend_from_slice(&[0, 0, 0]);
        let got: Vec<Frame<'_>> = frames(&b).map(Result::unwrap).collect();
        let Frame::Ack(ack) = got[0] else { panic!("{got:?}") };
        assert_eq!((ack.largest, ack.delay), (100, 7));
        assert_eq!(ack.ranges().collect::<Vec<_>>(), [(90, 100), (70, 80), (5, 5)]);
        assert_eq!(got[1], Frame::Crypto { offset: 3, data: b"hello" });
        assert_eq!(got[2], Frame::Stream { id: 4, offset: 1000, data: b"GET", fin: true });
        assert_eq!(got[3], Frame::MaxStreams { bidi: true, max: 100 });
        assert_eq!(got[4], Frame::Ping);
        assert_eq!(
            got[5],
            Frame::ConnectionClose { app: true, code: 0x100, frame: 0, reason: b"bye" }
        );
        assert_eq!(got[6], Frame::Padding);
        assert_eq!(got.len(), 7);
    }

    #[test]
    fn malformed_frames_end_the_payload_with_their_type() {
        // A STREAM frame whose length runs past the payload; an unknown type; an ACK whose
        // first range is below zero.
        for (b, ty) in [
            (&[0x0a, 0x04, 0x05, b'x'][..], 0x0a),
            (&[0x3f][..], 0x3f),
            (&[0x02, 3, 0, 0, 9][..], 0x02),
        ] {
            let got: Vec<_> = frames(b).collect();
            assert_eq!(got.last(), Some(&Err(Malformed(ty))), "{b:x?}");
        }
        // A STREAM frame without a length runs to the end.
        let got: Vec<_> = frames(&[0x08, 0x04, b'a', b'b']).collect();
        assert_eq!(got, [Ok(Frame::Stream { id: 4, offset: 0, data: b"ab", fin: false })]);
    }
}
