//! Decoder for the chunked transfer coding (RFC 9112 section 7.1), fed any split of the input.
//!
//! It consumes framing and data without copying the data anywhere: both the load generator (which
//! only counts body bytes) and the server (which discards request bodies) need the boundaries, not
//! the payload. Line ends must be CRLF; bare LF or CR is rejected, as request smuggling defences
//! require.

use thiserror::Error;

/// Most hex digits a chunk size may have: 16 fills a `u64`.
const MAX_SIZE_DIGITS: u8 = 16;

/// Why a chunked body is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ChunkError {
    #[error("chunk size has no hex digits")]
    EmptySize,
    #[error("chunk size has more than 16 hex digits")]
    SizeTooLong,
    #[error("invalid byte {0:#04x} in chunk size line")]
    SizeByte(u8),
    #[error("invalid byte {0:#04x} in chunk extension")]
    ExtensionByte(u8),
    #[error("chunk line not terminated by CRLF")]
    LineEnd,
    #[error("chunk data not followed by CRLF")]
    DataEnd,
    #[error("invalid byte {0:#04x} in trailer section")]
    TrailerByte(u8),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading hex digits of a chunk size; `digits` so far.
    Size {
        value: u64,
        digits: u8,
    },
    /// Blanks after the size: only more blanks or `;` may follow (BWS before an extension).
    SizeWs {
        value: u64,
    },
    /// Inside `;ext`, up to CR.
    Extension {
        value: u64,
    },
    /// Saw CR ending the size line.
    SizeLf {
        value: u64,
    },
    Data {
        remaining: u64,
    },
    DataCr,
    DataLf,
    /// At the start of a trailer line (or of the final empty line).
    TrailerStart,
    TrailerLine,
    TrailerLf,
    FinalLf,
    Done,
}

/// Incremental chunked-body decoder; one per message.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    data_bytes: u64,
}

/// Result of one [`ChunkedDecoder::decode`] call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkProgress {
    /// Bytes of the input that belong to this body.
    pub consumed: usize,
    /// The last chunk and the trailer section have been read.
    pub done: bool,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    pub fn new() -> Self {
        Self { state: State::Size { value: 0, digits: 0 }, data_bytes: 0 }
    }

    /// Payload bytes seen so far (framing excluded).
    pub fn data_bytes(&self) -> u64 {
        self.data_bytes
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes as much of `buf` as belongs to the body. Stops right after the final CRLF, so
    /// bytes of a following message are left unconsumed.
    pub fn decode(&mut self, buf: &[u8]) -> Result<ChunkProgress, ChunkError> {
        let mut i = 0;
        while i < buf.len() {
            if let State::Data { remaining } = self.state {
                let take = remaining.min((buf.len() - i) as u64);
                i += take as usize;
                self.data_bytes += take;
                let left = remaining - take;
                self.state =
                    if left == 0 { State::DataCr } else { State::Data { remaining: left } };
                continue;
            }
            if self.state == State::Done {
                break;
            }
            self.state = self.step(buf[i])?;
            i += 1;
            if self.state == State::Done {
                break;
            }
        }
        Ok(ChunkProgress { consumed: i, done: self.state == State::Done })
    }

    fn step(&self, b: u8) -> Result<State, ChunkError> {
        Ok(match self.state {
            State::Size { value, digits } => match hex_value(b) {
                Some(v) => {
                    if digits == MAX_SIZE_DIGITS {
                        return Err(ChunkError::SizeTooLong);
                    }
                    State::Size { value: (value << 4) | u64::from(v), digits: digits + 1 }
                }
                None if digits == 0 => return Err(ChunkError::EmptySize),
                None => match b {
                    b'\r' => State::SizeLf { value },
                    b';' => State::Extension { value },
                    b' ' | b'\t' => State::SizeWs { value },
                    _ => return Err(ChunkError::SizeByte(b)),
                },
            },
            State::SizeWs { value } => match b {
                b' ' | b'\t' => State::SizeWs { value },
                b';' => State::Extension { value },
                _ => return Err(ChunkError::SizeByte(b)),
            },
            State::Extension { value } => match b {
                b'\r' => State::SizeLf { value },
                b'\t' | b' '..=b'~' | 0x80..=0xff => State::Extension { value },
                _ => return Err(ChunkError::ExtensionByte(b)),
            },
            State::SizeLf { value } => match b {
                b'\n' if value == 0 => State::TrailerStart,
                b'\n' => State::Data { remaining: value },
                _ => return Err(ChunkError::LineEnd),
            },
            State::DataCr => match b {
                b'\r' => State::DataLf,
                _ => return Err(ChunkError::DataEnd),
            },
            State::DataLf => match b {
                b'\n' => State::Size { value: 0, digits: 0 },
                _ => return Err(ChunkError::DataEnd),
            },
            State::TrailerStart => match b {
                b'\r' => State::FinalLf,
                b'\n' => return Err(ChunkError::LineEnd),
                _ => check_trailer_byte(b, State::TrailerLine)?,
            },
            State::TrailerLine => match b {
                b'\r' => State::TrailerLf,
                _ => check_trailer_byte(b, State::TrailerLine)?,
            },
            State::TrailerLf | State::FinalLf => match b {
                b'\n' if self.state == State::FinalLf => State::Done,
                b'\n' => State::TrailerStart,
                _ => return Err(ChunkError::LineEnd),
            },
            State::Data { .. } | State::Done => self.state,
        })
    }
}

fn check_trailer_byte(b: u8, next: State) -> Result<State, ChunkError> {
    match b {
        b'\t' | b' '..=b'~' | 0x80..=0xff => Ok(next),
        _ => Err(ChunkError::TrailerByte(b)),
    }
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(input: &[u8]) -> Result<(usize, bool, u64), ChunkError> {
        let mut d = ChunkedDecoder::new();
        let p = d.decode(input)?;
        Ok((p.consumed, p.done, d.data_bytes()))
    }

    #[test]
    fn simple_body_with_extension_and_trailers() {
        let body = b"5;name=\"v\"\r\nhello\r\n3 ; a=b\r\nabc\r\n0\r\nX-Sum: 1\r\nY: 2\r\n\r\nNEXT";
        let (consumed, done, data) = decode_all(body).unwrap();
        assert!(done);
        assert_eq!(data, 8);
        assert_eq!(&body[consumed..], b"NEXT");
    }

    #[test]
    fn byte_at_a_time_equals_whole() {
        let body = b"A\r\n0123456789\r\n0\r\n\r\n";
        let mut d = ChunkedDecoder::new();
        let mut total = 0;
        for b in body.iter() {
            let p = d.decode(std::slice::from_ref(b)).unwrap();
            total += p.consumed;
        }
        assert!(d.is_done());
        assert_eq!(total, body.len());
        assert_eq!(d.data_bytes(), 10);
    }

    #[test]
    fn rejects_bad_framing() {
        let cases: &[(&[u8], ChunkError)] = &[
            (b"\r\n", ChunkError::EmptySize),
            (b"0x5\r\n", ChunkError::SizeByte(b'x')),
            (b"+5\r\n", ChunkError::EmptySize),
            (b"-5\r\n", ChunkError::EmptySize),
            (b"1_0\r\n", ChunkError::SizeByte(b'_')),
            (b"1 0\r\n", ChunkError::SizeByte(b'0')),
            (b"5 \r\n", ChunkError::SizeByte(b'\r')),
            (b"11111111111111111\r\n", ChunkError::SizeTooLong),
            (b"5\nhello", ChunkError::SizeByte(b'\n')),
            (b"5\r\rhello", ChunkError::LineEnd),
            (b"2\r\nabc\r\n", ChunkError::DataEnd),
            (b"2\r\nab\n", ChunkError::DataEnd),
            (b"0\r\n\n", ChunkError::LineEnd),
            (b"1;a\x00\r\n", ChunkError::ExtensionByte(0)),
            (b"0\r\nX: \x01\r\n\r\n", ChunkError::TrailerByte(1)),
        ];
        for (input, want) in cases {
            assert_eq!(decode_all(input), Err(*want), "input {:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn sixteen_digit_size_is_accepted() {
        let mut d = ChunkedDecoder::new();
        let p = d.decode(b"ffffffffffffffff\r\nab").unwrap();
        assert_eq!(p.consumed, 20);
        assert!(!p.done);
        assert_eq!(d.data_bytes(), 2);
    }
}
