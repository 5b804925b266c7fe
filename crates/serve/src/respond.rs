//! What to answer and the bytes of the answer.
//!
//! Owns: the [`Plan`] derived from a request head and its query controls (`s`, `c`, `t`, `k`,
//! `chunked`, as httpterm has them), and writing responses into a connection's output buffer.
//! The common response (the configured status and body, keep-alive, HTTP/1.1, GET) is a
//! precomputed template whose `Date` is patched once a second; every other response is
//! formatted into the same buffer without allocating.

use std::io::Write as _;

use qpslab_http::{BodyFraming, Method, RequestHead};

use crate::config::{ServeConfig, MAX_BODY_SIZE, MAX_DELAY_MS};
use crate::date::DATE_LEN;

/// Body bytes are this pattern repeated: the default 3-byte body is `ok\n`.
const PATTERN: &[u8] = b"ok\n";
/// Bytes of body produced per step when streaming a large body; a multiple of the pattern.
pub(crate) const BODY_PIECE: usize = 16 * 1024 - (16 * 1024) % 3;

/// How to answer one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    pub status: u16,
    pub body_len: u64,
    pub head_only: bool,
    pub chunked: bool,
    /// The request allows the connection to stay open (before `--keepalive-requests`).
    pub keep_alive: bool,
    /// HTTP/1.0 keep-alive: echo `Connection: keep-alive`.
    pub echo_keep_alive: bool,
    pub delay_ms: u32,
    /// The request body to read and discard first.
    pub request_body: BodyFraming,
    pub expect_continue: bool,
}

/// A request that gets an error response; the connection closes after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ErrorReply {
    pub status: u16,
    pub reason: &'static str,
}

impl Plan {
    /// A keep-alive request without a body, answered with `status` and `body_len` bytes.
    pub(crate) fn plain(status: u16, body_len: u64) -> Self {
        Plan {
            status,
            body_len,
            head_only: false,
            chunked: false,
            keep_alive: true,
            echo_keep_alive: false,
            delay_ms: 0,
            request_body: BodyFraming::None,
            expect_continue: false,
        }
    }

    pub(crate) fn new(head: &RequestHead<'_>, cfg: &ServeConfig) -> Result<Self, ErrorReply> {
        let mut plan = Plan {
            status: cfg.settings.status,
            body_len: cfg.settings.body_size,
            head_only: head.method == Method::Head,
            chunked: false,
            keep_alive: head.keep_alive,
            echo_keep_alive: head.minor == 0 && head.keep_alive,
            delay_ms: 0,
            request_body: head.body,
            expect_continue: head.expect_continue,
        };
        if let Some((_, query)) = head.target.split_once('?') {
            apply_controls(&mut plan, query)?;
        }
        // HTTP/1.0 clients get no chunked coding (RFC 9112 section 7).
        if head.minor == 0 {
            plan.chunked = false;
        }
        if matches!(plan.status, 204 | 304) {
            plan.chunked = false;
            plan.body_len = 0;
        }
        if let BodyFraming::Length(n) = plan.request_body {
            if n > cfg.settings.max_body {
                return Err(ErrorReply { status: 413, reason: "request body too large" });
            }
        }
        Ok(plan)
    }

    /// Whether the body is streamed in pieces after the head instead of written with it.
    pub(crate) fn streams_body(&self) -> bool {
        !self.head_only && self.body_len > BODY_PIECE as u64
    }
}

/// Applies `s=SIZE`, `c=CODE`, `t=MS`, `k=0`, `chunked=1`; unknown keys are ignored.
fn apply_controls(plan: &mut Plan, query: &str) -> Result<(), ErrorReply> {
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let num = |max: u64, reason: &'static str| match value.parse::<u64>() {
            Ok(v) if v <= max => Ok(v),
            _ => Err(ErrorReply { status: 400, reason }),
        };
        match key {
            "s" => plan.body_len = num(MAX_BODY_SIZE, "s= must be a size from 0 to 1073741824")?,
            "c" => {
                let code = num(599, "c= must be a status from 200 to 599")?;
                if code < 200 {
                    return Err(ErrorReply {
                        status: 400,
                        reason: "c= must be a status from 200 to 599",
                    });
                }
                plan.status = code as u16;
            }
            "t" => {
                plan.delay_ms = num(MAX_DELAY_MS, "t= must be a delay from 0 to 60000 ms")? as u32
            }
            "k" => match value {
                "0" => plan.keep_alive = false,
                "1" => {}
                _ => return Err(ErrorReply { status: 400, reason: "k= must be 0 or 1" }),
            },
            "chunked" => match value {
                "1" => plan.chunked = true,
                "0" => plan.chunked = false,
                _ => return Err(ErrorReply { status: 400, reason: "chunked= must be 0 or 1" }),
            },
            _ => {}
        }
    }
    Ok(())
}

/// Reason phrases for the statuses the server sends.
pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        413 => "Content Too Large",
        414 => "URI Too Long",
        417 => "Expectation Failed",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Status",
    }
}

/// The precomputed common response, and where its date sits.
#[derive(Debug, Clone)]
pub(crate) struct Template {
    pub bytes: Vec<u8>,
    date_at: usize,
    /// The plan it answers; other plans take the general path.
    pub plan_status: u16,
    pub plan_body: u64,
}

impl Template {
    pub(crate) fn new(cfg: &ServeConfig, date: &[u8; DATE_LEN]) -> Self {
        let mut bytes = Vec::new();
        let plan = Plan::plain(cfg.settings.status, cfg.settings.body_size);
        let inline = cfg.settings.body_size <= BODY_PIECE as u64;
        write_head(&mut bytes, &plan, false, date, cfg.alt_svc.as_deref());
        if inline {
            push_body(&mut bytes, cfg.settings.body_size as usize, 0);
        }
        let date_at = bytes
            .windows(DATE_LEN)
            .position(|w| w == date)
            .unwrap_or_else(|| unreachable!("the date was just written"));
        Self {
            bytes,
            date_at,
            // A body too big to inline never matches, so it takes the streaming path.
            plan_status: if inline { cfg.settings.status } else { 0 },
            plan_body: cfg.settings.body_size,
        }
    }

    pub(crate) fn set_date(&mut self, date: &[u8; DATE_LEN]) {
        self.bytes[self.date_at..self.date_at + DATE_LEN].copy_from_slice(date);
    }

    pub(crate) fn matches(&self, plan: &Plan, close: bool) -> bool {
        plan.status == self.plan_status
            && plan.body_len == self.plan_body
            && !plan.head_only
            && !plan.chunked
            && !plan.echo_keep_alive
            && !close
    }
}

/// Writes the status line and headers (and the chunk header of a chunked body); `alt_svc`:
/// where HTTP/3 is served (`--h3`).
pub(crate) fn write_head(
    out: &mut Vec<u8>,
    plan: &Plan,
    close: bool,
    date: &[u8; DATE_LEN],
    alt_svc: Option<&str>,
) {
    let _ = write!(out, "HTTP/1.1 {} {}\r\n", plan.status, reason(plan.status));
    out.extend_from_slice(b"Server: qpslab\r\nDate: ");
    out.extend_from_slice(date);
    out.extend_from_slice(b"\r\nContent-Type: text/plain\r\n");
    if let Some(v) = alt_svc {
        out.extend_from_slice(b"Alt-Svc: ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if plan.chunked {
        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    } else if !matches!(plan.status, 204 | 304) {
        let _ = write!(out, "Content-Length: {}\r\n", plan.body_len);
    }
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if plan.echo_keep_alive {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends `len` body bytes starting at body offset `from` (so streamed pieces continue the
/// pattern).
pub(crate) fn push_body(out: &mut Vec<u8>, len: usize, from: u64) {
    let mut phase = (from % PATTERN.len() as u64) as usize;
    let mut left = len;
    while left > 0 {
        let take = (PATTERN.len() - phase).min(left);
        out.extend_from_slice(&PATTERN[phase..phase + take]);
        left -= take;
        phase = 0;
    }
}

/// Appends one chunk of a chunked body (`len` > 0) or the last chunk (`len` == 0).
pub(crate) fn push_chunk(out: &mut Vec<u8>, len: usize, from: u64) {
    if len == 0 {
        out.extend_from_slice(b"0\r\n\r\n");
        return;
    }
    let _ = write!(out, "{len:x}\r\n");
    push_body(out, len, from);
    out.extend_from_slice(b"\r\n");
}

/// Writes an error response: the reason as the body, and `Connection: close`.
pub(crate) fn write_error(out: &mut Vec<u8>, status: u16, why: &str, date: &[u8; DATE_LEN]) {
    let plan = Plan {
        status,
        body_len: why.len() as u64 + 1,
        head_only: false,
        chunked: false,
        keep_alive: false,
        echo_keep_alive: false,
        delay_ms: 0,
        request_body: BodyFraming::None,
        expect_continue: false,
    };
    write_head(out, &plan, true, date, None);
    out.extend_from_slice(why.as_bytes());
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServeOptions;

    fn cfg() -> ServeConfig {
        ServeConfig::from_options(&ServeOptions::default()).unwrap()
    }

    fn head(target: &str, minor: u8) -> RequestHead<'_> {
        RequestHead {
            method: Method::Get,
            minor,
            target,
            keep_alive: true,
            body: BodyFraming::None,
            expect_continue: false,
        }
    }

    const DATE: &[u8; DATE_LEN] = b"Sun, 06 Nov 1994 08:49:37 GMT";

    #[test]
    fn template_is_the_plaintext_response() {
        let t = Template::new(&cfg(), DATE);
        assert_eq!(
            String::from_utf8(t.bytes.clone()).unwrap(),
            "HTTP/1.1 200 OK\r\nServer: qpslab\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
             Content-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n"
        );
        let mut t = t;
        t.set_date(b"Mon, 07 Nov 1994 08:49:37 GMT");
        assert!(String::from_utf8(t.bytes).unwrap().contains("Date: Mon, 07 Nov"));
    }

    #[test]
    fn controls() {
        let p = Plan::new(&head("/x?s=10&c=404&t=5&k=0&chunked=1", 1), &cfg()).unwrap();
        assert_eq!(
            (p.status, p.body_len, p.delay_ms, p.keep_alive, p.chunked),
            (404, 10, 5, false, true)
        );
        let p = Plan::new(&head("/?chunked=1", 0), &cfg()).unwrap();
        assert!(!p.chunked, "no chunked coding for HTTP/1.0");
        let p = Plan::new(&head("/?c=204&s=100", 1), &cfg()).unwrap();
        assert_eq!(p.body_len, 0);
        for bad in [
            "/?s=-1",
            "/?s=x",
            "/?s=1073741825",
            "/?c=99",
            "/?c=600",
            "/?t=60001",
            "/?k=2",
            "/?chunked=yes",
        ] {
            let e = Plan::new(&head(bad, 1), &cfg()).unwrap_err();
            assert_eq!(e.status, 400, "{bad}");
        }
        assert!(Plan::new(&head("/?other=1&s=0", 1), &cfg()).is_ok());
    }

    #[test]
    fn bodies_continue_the_pattern() {
        let mut whole = Vec::new();
        push_body(&mut whole, 10, 0);
        let mut pieces = Vec::new();
        push_body(&mut pieces, 4, 0);
        push_body(&mut pieces, 6, 4);
        assert_eq!(whole, pieces);
        assert_eq!(&whole, b"ok\nok\nok\no");
        let mut c = Vec::new();
        push_chunk(&mut c, 3, 0);
        push_chunk(&mut c, 0, 3);
        assert_eq!(&c, b"3\r\nok\n\r\n0\r\n\r\n");
    }

    #[test]
    fn error_responses_close() {
        let mut out = Vec::new();
        write_error(&mut out, 431, "too many headers", DATE);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
        assert!(text.contains("Content-Length: 17\r\nConnection: close\r\n\r\ntoo many headers\n"));
    }
}
