//! Incremental HTTP/1.1 response parser for the load generator.
//!
//! Owns response framing (RFC 9112 section 6.3): status line and headers (through `httparse`),
//! `Content-Length`, chunked bodies with extensions and trailers, close-delimited bodies, 1xx
//! interim responses (skipped), bodiless responses (HEAD, 204, 304) and connection persistence.
//! It keeps no copy of the input: the caller owns the buffers, feeds whatever arrived, and keeps
//! the unconsumed tail, which is only ever part of a response head, for the next call.

use std::mem::MaybeUninit;

use thiserror::Error;

use crate::chunked::{ChunkError, ChunkedDecoder};

/// Headers a response head may have; more is a parse error.
pub const MAX_HEADERS: usize = 64;
/// Default cap on a response head's size.
pub const DEFAULT_MAX_HEAD: usize = 64 * 1024;

/// Why a response is malformed or incomplete.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ParseError {
    #[error("invalid response head: {0}")]
    Head(httparse::Error),
    #[error("response head has more than {MAX_HEADERS} headers")]
    TooManyHeaders,
    #[error("response head larger than {0} bytes")]
    HeadTooLarge(usize),
    #[error("invalid Content-Length {0:?}")]
    ContentLength(String),
    #[error("conflicting Content-Length values")]
    ConflictingContentLength,
    #[error("malformed chunked body: {0}")]
    Chunk(#[from] ChunkError),
    #[error("unexpected 101 Switching Protocols (no upgrade was requested)")]
    UnexpectedUpgrade,
    /// The connection ended before the response did. A transport failure rather than malformed
    /// input: callers count it as a read error.
    #[error("connection closed {0}")]
    UnexpectedEof(&'static str),
}

impl ParseError {
    /// Whether the error is the peer closing early rather than bad bytes.
    pub fn is_eof(&self) -> bool {
        matches!(self, ParseError::UnexpectedEof(_))
    }
}

/// A complete final response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// The connection may carry another request after this response.
    pub keep_alive: bool,
    /// 1xx interim responses skipped before this one.
    pub interim: u16,
    /// Payload bytes (chunk framing excluded).
    pub body_bytes: u64,
    /// A gRPC call's outcome (HTTP/2 with `--grpc`).
    pub grpc: Option<crate::grpc::Outcome>,
    /// A gRPC call's response messages.
    pub messages: u64,
}

/// Result of one [`ResponseParser::feed`] call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Input bytes used. Unconsumed bytes are either the start of the next response (when
    /// `response` is set: feed them again) or an incomplete head (keep them and append more).
    pub consumed: usize,
    pub response: Option<Response>,
}

#[derive(Debug, Clone)]
enum Body {
    Length(u64),
    Chunked(ChunkedDecoder),
    UntilClose,
}

#[derive(Debug, Clone)]
enum State {
    Head { interim: u16 },
    Body { body: Body, pending: Response },
}

/// Heads up to this size are remembered for the identical-head fast path.
const CACHED_HEAD_MAX: usize = 1024;

/// The last head parsed on the connection, and what it meant.
#[derive(Debug, Clone, Default)]
struct HeadCache {
    bytes: Vec<u8>,
    head: Option<Head>,
}

/// Parses a stream of responses on one connection.
///
/// Benchmark targets send the same head again and again (nginx's changes only with `Date`, once
/// a second). A head byte-identical to the previous one has the same meaning, so it is matched
/// with one comparison instead of being parsed again; any difference takes the full parse.
#[derive(Debug, Clone)]
pub struct ResponseParser {
    state: State,
    max_head: usize,
    cache: HeadCache,
}

impl Default for ResponseParser {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_HEAD)
    }
}

impl ResponseParser {
    pub fn new(max_head: usize) -> Self {
        Self { state: State::Head { interim: 0 }, max_head, cache: HeadCache::default() }
    }

    /// Forgets any partial response (the connection was closed).
    pub fn reset(&mut self) {
        self.state = State::Head { interim: 0 };
    }

    /// True between responses: no byte of a next response has been consumed.
    pub fn at_boundary(&self) -> bool {
        matches!(self.state, State::Head { interim: 0 })
    }

    /// Consumes bytes of at most one final response. `head_request` says the request this
    /// response answers was HEAD, so it has no body whatever its headers say.
    pub fn feed(&mut self, buf: &[u8], head_request: bool) -> Result<Step, ParseError> {
        let mut consumed = 0;
        loop {
            match &mut self.state {
                State::Head { interim } => {
                    let interim = *interim;
                    let Some((n, head)) = self.parse_head(&buf[consumed..])? else {
                        return Ok(Step { consumed, response: None });
                    };
                    consumed += n;
                    if (100..200).contains(&head.status) && head.status != 101 {
                        self.state = State::Head { interim: interim.saturating_add(1) };
                        continue;
                    }
                    if head.status == 101 {
                        return Err(ParseError::UnexpectedUpgrade);
                    }
                    let mut pending = Response {
                        status: head.status,
                        keep_alive: head.keep_alive,
                        interim,
                        body_bytes: 0,
                        grpc: None,
                        messages: 0,
                    };
                    let no_body = head_request || head.status == 204 || head.status == 304;
                    let body = match head.framing {
                        _ if no_body => Body::Length(0),
                        Framing::Chunked => Body::Chunked(ChunkedDecoder::new()),
                        Framing::Length(n) => Body::Length(n),
                        Framing::UntilClose => {
                            pending.keep_alive = false;
                            Body::UntilClose
                        }
                    };
                    if let Body::Length(0) = body {
                        self.state = State::Head { interim: 0 };
                        return Ok(Step { consumed, response: Some(pending) });
                    }
                    self.state = State::Body { body, pending };
                }
                State::Body { body, pending } => {
                    let rest = &buf[consumed..];
                    let finished = match body {
                        Body::Length(remaining) => {
                            let take = (*remaining).min(rest.len() as u64);
                            consumed += take as usize;
                            pending.body_bytes += take;
                            *remaining -= take;
                            *remaining == 0
                        }
                        Body::Chunked(dec) => {
                            let p = dec.decode(rest)?;
                            consumed += p.consumed;
                            pending.body_bytes = dec.data_bytes();
                            p.done
                        }
                        Body::UntilClose => {
                            consumed += rest.len();
                            pending.body_bytes += rest.len() as u64;
                            false
                        }
                    };
                    if !finished {
                        return Ok(Step { consumed, response: None });
                    }
                    let done = *pending;
                    self.state = State::Head { interim: 0 };
                    return Ok(Step { consumed, response: Some(done) });
                }
            }
        }
    }

    /// The peer closed the connection. `buffered` is how many unconsumed bytes the caller still
    /// holds. Completes a close-delimited body; `Ok(None)` for a clean close between responses.
    pub fn eof(&mut self, buffered: usize) -> Result<Option<Response>, ParseError> {
        let state = std::mem::replace(&mut self.state, State::Head { interim: 0 });
        match state {
            State::Head { interim: 0 } if buffered == 0 => Ok(None),
            State::Head { .. } => Err(ParseError::UnexpectedEof("in the response head")),
            State::Body { body: Body::UntilClose, pending } => Ok(Some(pending)),
            State::Body { .. } => Err(ParseError::UnexpectedEof("in the response body")),
        }
    }

    /// Parses one head; `None` when it is not complete yet.
    fn parse_head(&mut self, buf: &[u8]) -> Result<Option<(usize, Head)>, ParseError> {
        if let Some(head) = self.cache.head {
            let n = self.cache.bytes.len();
            if buf.len() >= n && buf[..n] == self.cache.bytes[..] {
                return Ok(Some((n, head)));
            }
        }
        let parsed = self.parse_head_fully(buf)?;
        if let Some((n, head)) = parsed {
            self.cache.head = None;
            if n <= CACHED_HEAD_MAX {
                self.cache.bytes.clear();
                self.cache.bytes.extend_from_slice(&buf[..n]);
                self.cache.head = Some(head);
            }
        }
        Ok(parsed)
    }

    fn parse_head_fully(&self, buf: &[u8]) -> Result<Option<(usize, Head)>, ParseError> {
        let mut storage = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut []);
        let n = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut resp,
            buf,
            &mut storage,
        ) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if buf.len() > self.max_head => {
                return Err(ParseError::HeadTooLarge(self.max_head))
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => return Err(ParseError::TooManyHeaders),
            Err(e) => return Err(ParseError::Head(e)),
        };
        let (Some(version), Some(status)) = (resp.version, resp.code) else {
            return Err(ParseError::Head(httparse::Error::Status));
        };
        let head = Head::from_headers(version, status, resp.headers)?;
        Ok(Some((n, head)))
    }
}

/// Parses a whole connection's worth of reads, the way a caller keeping unconsumed tails does,
/// then the close. The reference driver for tests and fuzzing; the load engine does the same
/// incrementally, without the intermediate copies.
pub fn parse_reads(chunks: &[&[u8]], head_request: bool) -> Result<Vec<Response>, ParseError> {
    let mut parser = ResponseParser::default();
    let mut carry: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    for chunk in chunks {
        carry.extend_from_slice(chunk);
        let mut off = 0;
        while off < carry.len() {
            let step = parser.feed(&carry[off..], head_request)?;
            off += step.consumed;
            match step.response {
                Some(r) => out.push(r),
                None => break,
            }
        }
        carry.drain(..off);
    }
    if let Some(r) = parser.eof(carry.len())? {
        out.push(r);
    }
    Ok(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(u64),
    Chunked,
    UntilClose,
}

#[derive(Debug, Clone, Copy)]
struct Head {
    status: u16,
    keep_alive: bool,
    framing: Framing,
}

impl Head {
    fn from_headers(
        version: u8,
        status: u16,
        headers: &[httparse::Header<'_>],
    ) -> Result<Self, ParseError> {
        let mut length: Option<u64> = None;
        let mut chunked: Option<bool> = None;
        let (mut close, mut keep_alive) = (false, false);
        for h in headers {
            // Length checks first: most headers are skipped by one comparison.
            match h.name.len() {
                14 if h.name.eq_ignore_ascii_case("content-length") => {
                    let v = parse_content_length(h.value)?;
                    if length.is_some_and(|old| old != v) {
                        return Err(ParseError::ConflictingContentLength);
                    }
                    length = Some(v);
                }
                17 if h.name.eq_ignore_ascii_case("transfer-encoding") => {
                    if let Some(last) = list_items(h.value).last() {
                        chunked = Some(last.eq_ignore_ascii_case(b"chunked"));
                    }
                }
                10 if h.name.eq_ignore_ascii_case("connection") => {
                    for item in list_items(h.value) {
                        close |= item.eq_ignore_ascii_case(b"close");
                        keep_alive |= item.eq_ignore_ascii_case(b"keep-alive");
                    }
                }
                _ => {}
            }
        }
        // RFC 9112 section 6.3: Transfer-Encoding overrides Content-Length, and a final coding
        // other than chunked means the body runs to the close.
        let framing = match (chunked, length) {
            (Some(true), _) => Framing::Chunked,
            (Some(false), _) => Framing::UntilClose,
            (None, Some(n)) => Framing::Length(n),
            (None, None) => Framing::UntilClose,
        };
        let persistent = if version == 0 { keep_alive && !close } else { !close };
        // A message carrying both framings is a smuggling vector: never reuse the connection.
        let ambiguous = chunked.is_some() && length.is_some();
        Ok(Head { status, keep_alive: persistent && !ambiguous, framing })
    }
}

/// Items of a comma-separated header value, trimmed of optional whitespace, empty ones skipped.
fn list_items(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(|s| s.trim_ascii()).filter(|s| !s.is_empty())
}

/// `Content-Length = 1*DIGIT`; a list of identical values is accepted (RFC 9110 section 8.6).
fn parse_content_length(value: &[u8]) -> Result<u64, ParseError> {
    let bad = || ParseError::ContentLength(String::from_utf8_lossy(value).into_owned());
    let mut result: Option<u64> = None;
    for item in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
        if item.is_empty() || !item.iter().all(u8::is_ascii_digit) {
            return Err(bad());
        }
        let mut n: u64 = 0;
        for &d in item {
            n = n
                .checked_mul(10)
                .and_then(|n| n.checked_add(u64::from(d - b'0')))
                .ok_or_else(bad)?;
        }
        if result.is_some_and(|r| r != n) {
            return Err(ParseError::ConflictingContentLength);
        }
        result = Some(n);
    }
    result.ok_or_else(bad)
}
