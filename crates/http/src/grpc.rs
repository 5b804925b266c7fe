//! gRPC's wire pieces over HTTP/2 (gRPC's PROTOCOL-HTTP2 document): the 5-byte prefix each
//! message carries (a compressed flag and a 4-byte big-endian length), a reader that follows
//! the messages in a stream's DATA bytes within a size limit, the status codes a call ends
//! with (`grpc-status`), `grpc-timeout` values, and `grpc-message`'s percent-encoding.
//!
//! The reader keeps no message bytes unless asked to keep the first: a load generator counts
//! and checks lengths, and a malformed prefix is an error with a name, never a panic or an
//! allocation the peer chose.

use std::time::Duration;

/// The prefix before each message: the compressed flag and the length.
pub const PREFIX: usize = 5;

/// The largest message taken by default: gRPC's own default receive limit, 4 MiB.
pub const DEFAULT_MAX_MESSAGE: usize = 4 << 20;

/// Appends `msg` framed as one uncompressed message.
pub fn put_message(out: &mut Vec<u8>, msg: &[u8]) {
    put_framed(out, msg, false);
}

/// Appends `msg` framed as one message, its compressed flag set when `compressed` (`msg` is
/// then the compressed bytes).
pub fn put_framed(out: &mut Vec<u8>, msg: &[u8], compressed: bool) {
    out.push(u8::from(compressed));
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(msg);
}

/// What is wrong with a stream's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// The compressed flag is set, and no compression was agreed (this side offered none and
    /// the response named none in `grpc-encoding`).
    #[error("a compressed message without grpc-encoding agreed")]
    Compressed,
    /// A flag byte other than 0 or 1.
    #[error("a message prefix with flag {0:#04x} (only 0 and 1 are defined)")]
    BadFlag(u8),
    /// A message longer than the limit (`--max-message-size`).
    #[error("a message of {len} bytes, over the limit of {max}")]
    TooLarge { len: u64, max: usize },
    /// The stream ended inside a message (or its prefix).
    #[error("the stream ended {missing} bytes short of its last message")]
    Truncated { missing: u64 },
}

/// Follows the messages in a stream's DATA bytes, fed in any pieces.
#[derive(Debug, Clone)]
pub struct Messages {
    max: usize,
    /// The prefix being read, and how much of it came.
    prefix: [u8; PREFIX],
    have: usize,
    /// Bytes of the current message still to come (after its prefix).
    remaining: u64,
    /// Messages complete so far.
    pub count: u64,
    /// The first message's bytes, when kept (see [`Messages::keep_first`]), and whether
    /// they are compressed.
    first: Option<Vec<u8>>,
    first_compressed: bool,
    keep_first: bool,
    /// Compressed messages are taken: this side offered an encoding (`grpc-accept-encoding`).
    compressed_ok: bool,
}

impl Messages {
    /// A reader that refuses messages over `max` bytes.
    pub fn new(max: usize) -> Messages {
        Messages {
            max,
            prefix: [0; PREFIX],
            have: 0,
            remaining: 0,
            count: 0,
            first: None,
            first_compressed: false,
            keep_first: false,
            compressed_ok: false,
        }
    }

    /// Takes compressed messages (this side offered their encoding) as messages; their
    /// length is the compressed one.
    pub fn accepting_compressed(mut self) -> Messages {
        self.compressed_ok = true;
        self
    }

    /// The first message was compressed (its bytes, from [`Messages::first`], are).
    pub fn first_compressed(&self) -> bool {
        self.first_compressed
    }

    /// Keeps the first message's bytes (within the limit) for [`Messages::first`].
    pub fn keep_first(mut self) -> Messages {
        self.keep_first = true;
        self
    }

    /// The first message, once it is complete (if kept).
    pub fn first(&self) -> Option<&[u8]> {
        self.first.as_deref().filter(|_| self.count > 0)
    }

    /// Takes the next piece of the stream; the messages it completed.
    pub fn feed(&mut self, mut data: &[u8]) -> Result<u64, MessageError> {
        let before = self.count;
        while !data.is_empty() {
            if self.remaining > 0 {
                let n = (self.remaining.min(data.len() as u64)) as usize;
                if self.keep_first && self.count == 0 {
                    self.first.get_or_insert_with(Vec::new).extend_from_slice(&data[..n]);
                }
                self.remaining -= n as u64;
                data = &data[n..];
                if self.remaining == 0 {
                    self.count += 1;
                }
                continue;
            }
            let n = (PREFIX - self.have).min(data.len());
            self.prefix[self.have..self.have + n].copy_from_slice(&data[..n]);
            self.have += n;
            data = &data[n..];
            if self.have < PREFIX {
                break;
            }
            self.have = 0;
            match self.prefix[0] {
                0 => {}
                1 if self.compressed_ok => {}
                1 => return Err(MessageError::Compressed),
                f => return Err(MessageError::BadFlag(f)),
            }
            let len = u64::from(u32::from_be_bytes([
                self.prefix[1],
                self.prefix[2],
                self.prefix[3],
                self.prefix[4],
            ]));
            if len > self.max as u64 {
                return Err(MessageError::TooLarge { len, max: self.max });
            }
            if self.keep_first && self.count == 0 {
                self.first = Some(Vec::with_capacity(len as usize));
                self.first_compressed = self.prefix[0] == 1;
            }
            if len == 0 {
                self.count += 1;
            } else {
                self.remaining = len;
            }
        }
        Ok(self.count - before)
    }

    /// The stream ended: fine between messages, an error inside one.
    pub fn finish(&self) -> Result<(), MessageError> {
        let missing = if self.have > 0 { (PREFIX - self.have) as u64 } else { self.remaining };
        if missing > 0 {
            return Err(MessageError::Truncated { missing });
        }
        Ok(())
    }
}

/// What this side found wrong with a call's response, whatever its status said: each is the
/// status code a gRPC client reports for it ([`Fault::code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Fault {
    /// The stream ended without a `grpc-status` (no trailers, and no Trailers-Only answer).
    #[error("the stream ended without grpc-status")]
    NoStatus,
    /// No `grpc-status`, and an HTTP status other than 200 (a proxy's answer): mapped as
    /// gRPC's HTTP-to-status table says.
    #[error("HTTP status {0} without grpc-status")]
    Http(u16),
    /// A `grpc-status` that is not a number.
    #[error("a grpc-status that is not a number")]
    BadStatus,
    /// `grpc-status` in the response headers and again in its trailers.
    #[error("grpc-status in both the headers and the trailers")]
    StatusTwice,
    /// The response's messages were malformed or over the size limit.
    #[error("{0}")]
    Message(MessageError),
    /// A unary call answered OK with other than one message.
    #[error("a unary call answered OK with {0} messages")]
    Messages(u64),
}

/// How many kinds of [`Fault`] there are ([`Fault::index`]).
pub const FAULTS: usize = 9;

impl Fault {
    /// The kinds' short names, by [`Fault::index`] (for counts in reports).
    pub const NAMES: [&'static str; FAULTS] = [
        "no-status",
        "http-status",
        "bad-status",
        "status-twice",
        "compressed",
        "bad-flag",
        "too-large",
        "truncated",
        "message-count",
    ];

    /// The kind's place in [`Fault::NAMES`].
    pub fn index(self) -> usize {
        match self {
            Fault::NoStatus => 0,
            Fault::Http(_) => 1,
            Fault::BadStatus => 2,
            Fault::StatusTwice => 3,
            Fault::Message(MessageError::Compressed) => 4,
            Fault::Message(MessageError::BadFlag(_)) => 5,
            Fault::Message(MessageError::TooLarge { .. }) => 6,
            Fault::Message(MessageError::Truncated { .. }) => 7,
            Fault::Messages(_) => 8,
        }
    }

    /// The status code gRPC's clients report for it: RESOURCE_EXHAUSTED for a message over
    /// the limit, an HTTP status by gRPC's mapping table, INTERNAL for the rest.
    pub fn code(self) -> u32 {
        match self {
            Fault::Message(MessageError::TooLarge { .. }) => 8,
            Fault::Http(status) => match status {
                400 => 13,
                401 => 16,
                403 => 7,
                404 => 12,
                429 | 502 | 503 | 504 => 14,
                _ => 2,
            },
            _ => 13,
        }
    }
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The server's `grpc-status`, and nothing wrong found with the response.
    Status(u32),
    /// Something wrong with the response (see [`Fault::code`] for its status code).
    Fault(Fault),
}

impl Outcome {
    /// The call's status code, as a gRPC client would report it.
    pub fn code(self) -> u32 {
        match self {
            Outcome::Status(c) => c,
            Outcome::Fault(f) => f.code(),
        }
    }
}

/// A `grpc-status` field as a header block carried it: absent, not a number, or a code.
pub type StatusField = Option<Option<u32>>;

/// One call's response as it arrives: header blocks' `grpc-status`, the messages, and the
/// outcome once the stream ends.
#[derive(Debug, Clone)]
pub struct Call {
    pub messages: Messages,
    status: StatusField,
    /// A `grpc-status` came in headers that did not end the stream.
    early: bool,
    fault: Option<Fault>,
}

impl Call {
    /// A call whose messages may be up to `max` bytes each.
    pub fn new(max: usize) -> Call {
        Call { messages: Messages::new(max), status: None, early: false, fault: None }
    }

    /// This call keeping its first message ([`Messages::first`]).
    pub fn keeping_first(self) -> Call {
        Call { messages: self.messages.keep_first(), ..self }
    }

    /// This call taking compressed messages ([`Messages::accepting_compressed`]).
    pub fn accepting_compressed(self) -> Call {
        Call { messages: self.messages.accepting_compressed(), ..self }
    }

    /// The response named its messages' encoding (`grpc-encoding`): compressed ones are
    /// messages from here on, as every gRPC client decodes them.
    pub fn encoding_declared(&mut self) {
        self.messages.compressed_ok = true;
    }

    /// A header block of the response with its `grpc-status` (`ends`: it ended the stream:
    /// trailers, or a Trailers-Only answer).
    pub fn block(&mut self, status: StatusField, ends: bool) {
        if status.is_none() {
            return;
        }
        if !ends {
            self.early = true;
        } else if self.early {
            self.fault.get_or_insert(Fault::StatusTwice);
        }
        self.status = status;
    }

    /// DATA bytes of the response (after a fault, not read on).
    pub fn data(&mut self, bytes: &[u8]) {
        if self.fault.is_none() {
            if let Err(e) = self.messages.feed(bytes) {
                self.fault = Some(Fault::Message(e));
            }
        }
    }

    /// The stream ended with HTTP status `http`; `unary`: one message is owed with OK.
    pub fn outcome(&self, http: u16, unary: bool) -> Outcome {
        if let Some(f) = self.fault {
            return Outcome::Fault(f);
        }
        if let Err(e) = self.messages.finish() {
            return Outcome::Fault(Fault::Message(e));
        }
        match self.status {
            Some(Some(0)) if unary && self.messages.count != 1 => {
                Outcome::Fault(Fault::Messages(self.messages.count))
            }
            Some(Some(code)) => Outcome::Status(code),
            Some(None) => Outcome::Fault(Fault::BadStatus),
            None if http != 200 => Outcome::Fault(Fault::Http(http)),
            None => Outcome::Fault(Fault::NoStatus),
        }
    }
}

/// gRPC's status codes (`grpc-status`), by name.
pub const CODES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// A status code's name; `None` past the defined codes (a peer may send any number).
pub fn code_name(code: u32) -> Option<&'static str> {
    CODES.get(code as usize).copied()
}

/// A status code by its name (as in `--threshold grpc-status:UNAVAILABLE<10`), or its number.
pub fn code_of(name: &str) -> Option<u32> {
    if let Ok(n) = name.parse::<u32>() {
        return Some(n);
    }
    CODES.iter().position(|c| c.eq_ignore_ascii_case(name)).map(|i| i as u32)
}

/// A `grpc-status` value: one or more ASCII digits (at most 10, within u32).
pub fn parse_status(value: &[u8]) -> Option<u32> {
    if value.is_empty() || value.len() > 10 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// The units of `grpc-timeout`, finest first, with their length in nanoseconds.
const UNITS: [(u8, u64); 6] = [
    (b'n', 1),
    (b'u', 1_000),
    (b'm', 1_000_000),
    (b'S', 1_000_000_000),
    (b'M', 60_000_000_000),
    (b'H', 3_600_000_000_000),
];

/// `d` as a `grpc-timeout` value: at most 8 digits, in the finest unit that holds it (rounded
/// up, so a deadline is never shorter than asked).
pub fn timeout_value(d: Duration) -> String {
    let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    for (unit, per) in UNITS {
        let n = ns.div_ceil(per);
        if n < 100_000_000 {
            return format!("{n}{}", unit as char);
        }
    }
    "99999999H".into()
}

/// A `grpc-timeout` value (1 to 8 digits and a unit).
pub fn parse_timeout(value: &[u8]) -> Option<Duration> {
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    let (_, per) = UNITS.iter().find(|(u, _)| *u == unit)?;
    Some(Duration::from_nanos(n.checked_mul(*per)?))
}

/// A `grpc-message` value, percent-decoded (a broken escape is kept as it came, as gRPC's
/// clients do).
pub fn decode_message(value: &[u8]) -> String {
    let mut out = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if value[i] == b'%' && i + 2 < value.len() {
            if let (Some(h), Some(l)) = (hex(value[i + 1]), hex(value[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(value[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;
    use proptest::prelude::*;

    fn framed(msgs: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for m in msgs {
            put_message(&mut out, m);
        }
        out
    }

    #[test]
    fn messages_are_counted_and_the_first_kept() {
        let bytes = framed(&[b"hello", b"", b"world!"]);
        assert_eq!(&bytes[..PREFIX], [0, 0, 0, 0, 5]);
        let mut m = Messages::new(100).keep_first();
        assert_eq!(m.feed(&bytes).unwrap(), 3);
        assert_eq!(m.first(), Some(&b"hello"[..]));
        assert_eq!(m.finish(), Ok(()));
    }

    /// A call's outcome from the blocks and DATA a server sent.
    fn call(http: u16, head: StatusField, data: &[u8], trailers: Option<StatusField>) -> Outcome {
        let mut c = Call::new(100);
        c.block(head, trailers.is_none());
        c.data(data);
        if let Some(t) = trailers {
            c.block(t, true);
        }
        c.outcome(http, true)
    }

    #[test]
    fn a_call_is_judged_by_its_status_and_its_messages() {
        let one = framed(&[b"hi"]);
        assert_eq!(call(200, None, &one, Some(Some(Some(0)))), Outcome::Status(0));
        // Trailers-Only: the status in the only block, no message.
        assert_eq!(call(200, Some(Some(14)), b"", None), Outcome::Status(14));
        assert_eq!(call(200, Some(Some(14)), b"", None).code(), 14);
        let fault = |o: Outcome| match o {
            Outcome::Fault(f) => (f, f.code()),
            Outcome::Status(c) => panic!("status {c}, a fault was due"),
        };
        assert_eq!(fault(call(200, None, &one, Some(None))), (Fault::NoStatus, 13));
        assert_eq!(fault(call(200, None, &one, Some(Some(None)))), (Fault::BadStatus, 13));
        assert_eq!(
            fault(call(200, Some(Some(0)), &one, Some(Some(Some(0))))),
            (Fault::StatusTwice, 13)
        );
        assert_eq!(fault(call(503, None, b"", None)), (Fault::Http(503), 14));
        assert_eq!(fault(call(404, None, b"", None)), (Fault::Http(404), 12));
        assert_eq!(fault(call(500, None, b"", None)), (Fault::Http(500), 2));
        assert_eq!(fault(call(200, None, b"", Some(Some(Some(0))))), (Fault::Messages(0), 13));
        let two = framed(&[b"a", b"b"]);
        assert_eq!(fault(call(200, None, &two, Some(Some(Some(0))))), (Fault::Messages(2), 13));
        // A failed call owes no message.
        assert_eq!(call(200, None, b"", Some(Some(Some(8)))), Outcome::Status(8));
        let big = framed(&[&[7u8; 101]]);
        let (f, code) = fault(call(200, None, &big, Some(Some(Some(0)))));
        assert_eq!((f.index(), code), (6, 8), "{f}: RESOURCE_EXHAUSTED");
        let (f, _) = fault(call(200, None, &one[..4], Some(Some(Some(0)))));
        assert_eq!(Fault::NAMES[f.index()], "truncated");
        assert_eq!(fault(call(200, None, &[1, 0, 0, 0, 0], Some(Some(Some(0))))).1, 13);
    }

    #[test]
    fn a_bad_prefix_is_named() {
        let mut m = Messages::new(4);
        assert_eq!(m.feed(&framed(&[b"12345"])), Err(MessageError::TooLarge { len: 5, max: 4 }));
        let mut m = Messages::new(100);
        assert_eq!(m.feed(&[1, 0, 0, 0, 1, 7]), Err(MessageError::Compressed));
        // Offered an encoding, a compressed message is one; the first kept says so.
        let mut m = Messages::new(10).accepting_compressed().keep_first();
        assert_eq!(m.feed(&[1, 0, 0, 0, 2, 7, 8, 0, 0, 0, 0, 0]), Ok(2));
        assert_eq!((m.first(), m.first_compressed()), (Some(&[7u8, 8][..]), true));
        assert_eq!(m.feed(&[2, 0, 0, 0, 0]), Err(MessageError::BadFlag(2)));
        let mut m = Messages::new(100);
        assert_eq!(m.feed(&[2, 0, 0, 0, 1, 7]), Err(MessageError::BadFlag(2)));
        // A length the peer chose is not allocated: 4 GiB less one, refused.
        let mut m = Messages::new(DEFAULT_MAX_MESSAGE).keep_first();
        assert!(matches!(m.feed(&[0, 255, 255, 255, 255]), Err(MessageError::TooLarge { .. })));
    }

    #[test]
    fn a_stream_that_ends_inside_a_message_is_short() {
        let mut m = Messages::new(100);
        m.feed(&framed(&[b"hello"])[..7]).unwrap();
        assert_eq!(m.finish(), Err(MessageError::Truncated { missing: 3 }));
        let mut m = Messages::new(100);
        m.feed(&[0, 0]).unwrap();
        assert_eq!(m.finish(), Err(MessageError::Truncated { missing: 3 }));
        assert_eq!(m.count, 0);
    }

    #[test]
    fn statuses_timeouts_and_messages_read_as_grpc_writes_them() {
        assert_eq!(parse_status(b"0"), Some(0));
        assert_eq!(parse_status(b"14"), Some(14));
        assert_eq!(parse_status(b""), None);
        assert_eq!(parse_status(b"1 4"), None);
        assert_eq!(parse_status(b"99999999999"), None);
        assert_eq!(code_name(14), Some("UNAVAILABLE"));
        assert_eq!(code_name(17), None);
        assert_eq!(code_of("resource_exhausted"), Some(8));
        assert_eq!(code_of("14"), Some(14));
        assert_eq!(timeout_value(Duration::from_millis(250)), "250000u");
        assert_eq!(timeout_value(Duration::from_secs(5)), "5000000u");
        assert_eq!(timeout_value(Duration::from_secs(3600 * 24 * 365)), "31536000S");
        assert_eq!(parse_timeout(b"250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse_timeout(b"1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_timeout(b"123456789S"), None);
        assert_eq!(parse_timeout(b"5x"), None);
        assert_eq!(parse_timeout(b"m"), None);
        assert_eq!(decode_message(b"not%20found%3A%20%E2%9C%93"), "not found: \u{2713}");
        assert_eq!(decode_message(b"50%"), "50%");
        assert_eq!(decode_message(b"%zz%4"), "%zz%4");
    }

    proptest! {
        /// Messages cut at any points read the same as whole: the count, the first message,
        /// and an end between messages.
        #[test]
        fn any_cut_reads_the_same(
            msgs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..6),
            cuts in proptest::collection::vec(0usize..200, 0..8),
        ) {
            let refs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
            let bytes = framed(&refs);
            let mut at: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            at.sort_unstable();
            let mut m = Messages::new(64).keep_first();
            let mut from = 0;
            for c in at.into_iter().chain([bytes.len()]) {
                m.feed(&bytes[from..c]).unwrap();
                from = c;
            }
            prop_assert_eq!(m.count, msgs.len() as u64);
            prop_assert_eq!(m.first(), Some(&msgs[0][..]));
            prop_assert_eq!(m.finish(), Ok(()));
        }

        /// A timeout written and read back is never shorter than asked, and longer by less
        /// than one unit (at most a 100,000th of it, or a microsecond).
        #[test]
        fn timeouts_round_trip_upward(ns in 0u64..(1 << 50)) {
            let d = Duration::from_nanos(ns);
            let back = parse_timeout(timeout_value(d).as_bytes()).unwrap();
            prop_assert!(back >= d);
            prop_assert!(back - d < Duration::from_nanos(ns / 100_000 + 1_000));
        }
    }
}
