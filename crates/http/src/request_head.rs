//! Request-head parsing for the server: httparse for the syntax, then the limits and the
//! framing and smuggling rules of RFC 9112 that httparse leaves to its caller (the rows of
//! `shared/http-bad-inputs.md`).
//!
//! Owns: the request line and header limits (414, 431), version handling (505; `HTTP/1.2` is
//! served as 1.1), Host rules, Content-Length and Transfer-Encoding validation, connection
//! persistence and `Expect`. Does not own reading bodies (see [`crate::chunked`]) or responses.

use std::mem::MaybeUninit;

/// Most headers the parser can hold; `--max-headers` may not exceed it.
pub const HEADER_SLOTS: usize = 256;
/// Longest method accepted before answering 501 and closing.
const MAX_METHOD: usize = 32;

/// Size limits of a request head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimits {
    pub max_request_line: usize,
    /// Header section, request line excluded.
    pub max_header_bytes: usize,
    pub max_headers: usize,
}

impl Default for RequestLimits {
    fn default() -> Self {
        Self { max_request_line: 8 * 1024, max_header_bytes: 16 * 1024, max_headers: 100 }
    }
}

/// Methods the server answers; any other token gets 501.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Options,
    Patch,
    Trace,
}

impl Method {
    /// The method named `s` (case-sensitive, as RFC 9110 has it), if it is one of these.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "GET" => Self::Get,
            "HEAD" => Self::Head,
            "POST" => Self::Post,
            "PUT" => Self::Put,
            "DELETE" => Self::Delete,
            "OPTIONS" => Self::Options,
            "PATCH" => Self::Patch,
            "TRACE" => Self::Trace,
            _ => return None,
        })
    }
}

/// How the request body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    None,
    Length(u64),
    Chunked,
}

/// A valid request head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHead<'a> {
    pub method: Method,
    /// HTTP/1.x minor version as served: 0 or 1.
    pub minor: u8,
    pub target: &'a str,
    pub keep_alive: bool,
    pub body: BodyFraming,
    pub expect_continue: bool,
}

/// A request to refuse: the status to answer and why. The connection is closed after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reject {
    pub status: u16,
    pub reason: &'static str,
}

const fn reject(status: u16, reason: &'static str) -> Reject {
    Reject { status, reason }
}

/// Parses one request head at the start of `buf`. `Ok(None)`: incomplete, read more.
/// `buf` is mutable so that an `HTTP/1.2`+ version can be served as 1.1 in place.
pub fn parse_request<'a>(
    buf: &'a mut [u8],
    limits: &RequestLimits,
) -> Result<Option<(usize, RequestHead<'a>)>, Reject> {
    let start = skip_empty_lines(buf)?;
    let line = &buf[start..];
    let Some(nl) = line.iter().position(|&b| b == b'\n') else {
        // Garbage (a TLS ClientHello, binary) is refused at once, not at the header deadline.
        let method = line.iter().take_while(|&&b| b != b' ');
        if method.clone().any(|&b| !crate::is_tchar(b)) {
            return Err(reject(400, "malformed request line"));
        }
        if line.len() > limits.max_request_line {
            return Err(reject(414, "request line too long"));
        }
        return Ok(None);
    };
    let line_len = if nl > 0 && line[nl - 1] == b'\r' { nl - 1 } else { nl };
    if line_len > limits.max_request_line {
        return Err(reject(414, "request line too long"));
    }
    check_method_length(&line[..line_len])?;
    if let Some(minor_at) = check_version(&line[..line_len])? {
        buf[start + minor_at] = b'1';
    }
    let buf: &'a [u8] = buf;
    let head_end_limit = start + nl + 1 + limits.max_header_bytes;
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; HEADER_SLOTS];
    let max = limits.max_headers.min(HEADER_SLOTS);
    let mut req = httparse::Request::new(&mut []);
    let n = match httparse::ParserConfig::default().parse_request_with_uninit_headers(
        &mut req,
        buf,
        &mut slots[..max],
    ) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > head_end_limit => {
            return Err(reject(431, "header section too large"));
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(reject(431, "too many headers")),
        Err(e) => return Err(reject(400, httparse_reason(e))),
    };
    if n > head_end_limit {
        return Err(reject(431, "header section too large"));
    }
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(reject(400, "malformed request line"));
    };
    let method = Method::parse(method).ok_or(reject(501, "method not implemented"))?;
    let h = inspect_headers(req.headers, minor)?;
    let body = match (h.chunked, h.length) {
        (Some(_), Some(_)) => return Err(reject(400, "both Content-Length and Transfer-Encoding")),
        (Some(_), None) if minor == 0 => {
            return Err(reject(400, "Transfer-Encoding in an HTTP/1.0 request"))
        }
        (Some(_), None) => BodyFraming::Chunked,
        (None, Some(0)) | (None, None) => BodyFraming::None,
        (None, Some(n)) => BodyFraming::Length(n),
    };
    let keep_alive = if minor == 0 { h.keep_alive && !h.close } else { !h.close };
    let expect_continue = h.expect_continue && minor == 1 && body != BodyFraming::None;
    Ok(Some((n, RequestHead { method, minor, target, keep_alive, body, expect_continue })))
}

/// Skips empty lines before the request line (RFC 9112 section 2.2); a bare CR is an error.
fn skip_empty_lines(buf: &[u8]) -> Result<usize, Reject> {
    let mut i = 0;
    loop {
        match buf.get(i..i + 2) {
            Some(b"\r\n") => i += 2,
            _ if buf.get(i) == Some(&b'\n') => i += 1,
            Some([b'\r', _]) => return Err(reject(400, "bare CR")),
            _ => return Ok(i),
        }
    }
}

fn check_method_length(line: &[u8]) -> Result<(), Reject> {
    let method_len = line.iter().position(|&b| b == b' ').unwrap_or(line.len());
    if method_len > MAX_METHOD {
        return Err(reject(501, "method not implemented"));
    }
    Ok(())
}

/// Checks `HTTP/d.d` at the end of the request line. Returns the offset of the minor digit to
/// rewrite when a 1.2+ version is to be served as 1.1.
fn check_version(line: &[u8]) -> Result<Option<usize>, Reject> {
    let Some(sp) = line.iter().rposition(|&b| b == b' ') else {
        return Err(reject(400, "malformed request line"));
    };
    let v = &line[sp + 1..];
    match v {
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            if *major != b'1' {
                return Err(reject(505, "HTTP version not supported"));
            }
            Ok((*minor > b'1').then_some(sp + 1 + 7))
        }
        _ => Err(reject(400, "malformed HTTP version")),
    }
}

fn httparse_reason(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "invalid header name",
        httparse::Error::HeaderValue => "invalid header value",
        httparse::Error::NewLine => "invalid line ending",
        httparse::Error::Token => "invalid token in request line",
        httparse::Error::Version => "malformed HTTP version",
        _ => "malformed request",
    }
}

#[derive(Debug, Default)]
struct HeaderFacts {
    hosts: u32,
    length: Option<u64>,
    /// Transfer-Encoding seen; its codings validated to end in exactly one `chunked`.
    chunked: Option<()>,
    close: bool,
    keep_alive: bool,
    expect_continue: bool,
}

fn inspect_headers(headers: &[httparse::Header<'_>], minor: u8) -> Result<HeaderFacts, Reject> {
    let mut f = HeaderFacts::default();
    let mut codings_seen = false;
    for h in headers {
        let name = h.name.as_bytes();
        match name.len() {
            4 if name.eq_ignore_ascii_case(b"host") => {
                f.hosts += 1;
                check_host(h.value)?;
            }
            6 if name.eq_ignore_ascii_case(b"expect") => {
                if h.value.eq_ignore_ascii_case(b"100-continue") {
                    f.expect_continue = true;
                } else {
                    return Err(reject(417, "unsupported expectation"));
                }
            }
            10 if name.eq_ignore_ascii_case(b"connection") => {
                for item in h.value.split(|&b| b == b',') {
                    let item = trim_ows(item);
                    f.close |= item.eq_ignore_ascii_case(b"close");
                    f.keep_alive |= item.eq_ignore_ascii_case(b"keep-alive");
                }
            }
            14 if name.eq_ignore_ascii_case(b"content-length") => {
                let n = parse_length(h.value)?;
                if f.length.is_some_and(|old| old != n) {
                    return Err(reject(400, "conflicting Content-Length"));
                }
                f.length = Some(n);
            }
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                check_codings(h.value, &mut codings_seen, &mut f.chunked)?;
            }
            _ => {}
        }
    }
    if minor == 1 && f.hosts == 0 {
        return Err(reject(400, "missing Host header"));
    }
    if f.hosts > 1 {
        return Err(reject(400, "more than one Host header"));
    }
    if codings_seen && f.chunked.is_none() {
        return Err(reject(501, "transfer coding not implemented"));
    }
    Ok(f)
}

/// Host = uri-host [ ":" port ]: no userinfo, path, list or blanks; not empty.
fn check_host(value: &[u8]) -> Result<(), Reject> {
    let bad = |b: &u8| matches!(b, b'@' | b'/' | b',' | b' ' | b'\t' | b'?' | b'#' | b'\\');
    if value.is_empty() || value.iter().any(bad) {
        return Err(reject(400, "invalid Host header"));
    }
    Ok(())
}

/// Content-Length = 1*DIGIT (a list of identical values is accepted, RFC 9110 section 8.6).
fn parse_length(value: &[u8]) -> Result<u64, Reject> {
    const BAD: Reject = reject(400, "invalid Content-Length");
    let mut result: Option<u64> = None;
    for item in value.split(|&b| b == b',') {
        let item = trim_ows(item);
        if item.is_empty() || !item.iter().all(u8::is_ascii_digit) {
            return Err(BAD);
        }
        let mut n: u64 = 0;
        for &d in item {
            n = n.checked_mul(10).and_then(|n| n.checked_add(u64::from(d - b'0'))).ok_or(BAD)?;
        }
        if result.is_some_and(|r| r != n) {
            return Err(reject(400, "conflicting Content-Length"));
        }
        result = Some(n);
    }
    result.ok_or(BAD)
}

/// Validates Transfer-Encoding codings across all its header lines: tokens only, exactly one
/// `chunked`, and it must come last. Anything after `chunked` is an error.
fn check_codings(value: &[u8], seen: &mut bool, chunked: &mut Option<()>) -> Result<(), Reject> {
    let mut any = false;
    for item in value.split(|&b| b == b',') {
        let item = trim_ows(item);
        if item.is_empty() {
            continue;
        }
        any = true;
        if !item.iter().all(|&b| crate::is_tchar(b)) {
            return Err(reject(400, "invalid Transfer-Encoding"));
        }
        if chunked.is_some() {
            return Err(reject(400, "transfer coding after chunked"));
        }
        *seen = true;
        if item.eq_ignore_ascii_case(b"chunked") {
            *chunked = Some(());
        }
    }
    if !any {
        return Err(reject(400, "empty Transfer-Encoding"));
    }
    Ok(())
}

fn trim_ows(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&b| b != b' ' && b != b'\t').unwrap_or(s.len());
    let end = s.iter().rposition(|&b| b != b' ' && b != b'\t').map_or(start, |e| e + 1);
    &s[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(input: &[u8]) -> Result<Option<(usize, RequestHead<'static>)>, Reject> {
        let buf: &'static mut [u8] = Box::leak(input.to_vec().into_boxed_slice());
        parse_request(buf, &RequestLimits::default())
    }

    fn status(input: &[u8]) -> u16 {
        match parse(input) {
            Ok(Some(_)) => 200,
            Ok(None) => 0,
            Err(r) => r.status,
        }
    }

    #[test]
    fn plain_get() {
        let (n, h) = parse(b"GET /x?s=1 HTTP/1.1\r\nHost: a\r\n\r\nNEXT").unwrap().unwrap();
        assert_eq!(n, 32);
        assert_eq!(h.method, Method::Get);
        assert_eq!(h.target, "/x?s=1");
        assert!(h.keep_alive);
        assert_eq!(h.body, BodyFraming::None);
    }

    #[test]
    fn partial_heads_ask_for_more() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\nHost: a\r\n").unwrap(), None);
        assert_eq!(parse(b"GET / HT").unwrap(), None);
        assert_eq!(parse(b"\r\n").unwrap(), None);
    }

    /// Each request head and the status it must get (200: accepted).
    fn expect_statuses(cases: &[(&[u8], u16)]) {
        for (head, code) in cases {
            assert_eq!(status(head), *code, "{}", String::from_utf8_lossy(head));
        }
    }

    #[test]
    fn versions() {
        expect_statuses(&[
            (b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505),
            (b"GET / HTTP/3.0\r\nHost: a\r\n\r\n", 505),
            (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),
            (b"GET / http/1.1\r\nHost: a\r\n\r\n", 400),
            (b"GET / HTTP/1\r\nHost: a\r\n\r\n", 400),
            (b"GET / HTTP/01.1\r\nHost: a\r\n\r\n", 400),
            (b"GET /\r\n\r\n", 400),
        ]);
        let (_, h) = parse(b"GET / HTTP/1.2\r\nHost: a\r\n\r\n").unwrap().unwrap();
        assert_eq!(h.minor, 1);
    }

    #[test]
    fn hosts() {
        expect_statuses(&[
            (b"GET / HTTP/1.1\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a, b\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a/p\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost:\r\n\r\n", 400),
            (b"GET / HTTP/1.0\r\n\r\n", 200),
            (b"GET http://h/ HTTP/1.1\r\nHost: h\r\n\r\n", 200),
            (b"GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", 200),
        ]);
    }

    #[test]
    fn header_syntax() {
        for bad in [
            &b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length : 5\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n",
            b"GET /\x00 HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\n[x]: b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX\tY: b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n",
            b"GET / HTTP/1.1\r\n Host: a\r\n\r\n",
            b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET /a\tb HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET HTTP/1.1\r\nHost: a\r\n\r\n",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
        ] {
            let got = status(bad);
            assert_eq!(got, 400, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn methods() {
        assert_eq!(status(b"FOO / HTTP/1.1\r\nHost: a\r\n\r\n"), 501);
        let long = [&b"A".repeat(100)[..], b" / HTTP/1.1\r\nHost: a\r\n\r\n"].concat();
        assert_eq!(status(&long), 501);
        assert_eq!(status(b"G(T / HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
    }

    #[test]
    fn content_length_rules() {
        let cl = |v: &str| {
            status(format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {v}\r\n\r\n").as_bytes())
        };
        for bad in ["+5", "-1", "0x5", "1_0", "1 0", "", "99999999999999999999999", "5, 6"] {
            assert_eq!(cl(bad), 400, "{bad:?}");
        }
        assert_eq!(cl("5, 5"), 200);
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"),
            400
        );
        let (_, h) =
            parse(b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n").unwrap().unwrap();
        assert_eq!(h.body, BodyFraming::Length(3));
    }

    #[test]
    fn transfer_encoding_rules() {
        let te = |v: &str| {
            status(
                format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: {v}\r\n\r\n").as_bytes(),
            )
        };
        assert_eq!(te("chunked"), 200);
        assert_eq!(te("Chunked"), 200);
        assert_eq!(te("gzip, chunked"), 200);
        assert_eq!(te("identity"), 501);
        assert_eq!(te("gzip"), 501);
        assert_eq!(te("xchunked"), 501);
        assert_eq!(te("chunked, gzip"), 400);
        assert_eq!(te("chunked, chunked"), 400);
        assert_eq!(te(""), 400);
        assert_eq!(te("chu nked"), 400);
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \x0bchunked\r\n\r\n"),
            400
        );
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"),
            400
        );
        assert_eq!(status(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
    }

    #[test]
    fn limits() {
        let long_line =
            [&b"GET /"[..], &b"a".repeat(9000), b" HTTP/1.1\r\nHost: a\r\n\r\n"].concat();
        assert_eq!(status(&long_line), 414);
        assert_eq!(status(&long_line[..8500]), 414, "detected before the line ends");
        let ok_line = [&b"GET /"[..], &b"a".repeat(8000), b" HTTP/1.1\r\nHost: a\r\n\r\n"].concat();
        assert_eq!(status(&ok_line), 200, "8000-octet request lines are supported");
        let big =
            [&b"GET / HTTP/1.1\r\nHost: a\r\nX: "[..], &b"v".repeat(17000), b"\r\n\r\n"].concat();
        assert_eq!(status(&big), 431);
        assert_eq!(status(&big[..17020]), 431, "detected before the section ends");
        let many =
            [&b"GET / HTTP/1.1\r\nHost: a\r\n"[..], &b"X: y\r\n".repeat(100), b"\r\n"].concat();
        assert_eq!(status(&many), 431);
    }

    #[test]
    fn persistence_and_expect() {
        let h = |input: &[u8]| parse(input).unwrap().unwrap().1;
        assert!(!h(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").keep_alive);
        assert!(!h(b"GET / HTTP/1.0\r\n\r\n").keep_alive);
        assert!(h(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
        assert!(
            h(b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n")
                .expect_continue
        );
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nHost: a\r\nExpect: tea\r\nContent-Length: 1\r\n\r\n"),
            417
        );
        assert_eq!(
            status(b"\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"),
            200,
            "leading empty lines"
        );
        assert!(
            h(b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n")
                .keep_alive
        );
    }
}
