//! The page's server: a thread that accepts on the `--live` address and a thread per client,
//! GET (and HEAD) only. Nothing a client sends changes the run: the routes read the board.
//!
//! - `/` the page, `/live.js`, `/uplot.js`, `/uplot.css` its parts (served from the binary);
//! - `/events` server-sent events: the board as JSON each time it changes (at most four times
//!   a second), the series from where the client stopped;
//! - `/state` the same JSON once; `/metrics` the Prometheus text format; `/report` the run's
//!   HTML report once the run has ended.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::board::{Board, Seen};
use crate::prom;

const PAGE: &str = include_str!("../assets/live.html");
const SCRIPT: &str = include_str!("../assets/live.js");
const UPLOT_JS: &str = include_str!("../assets/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../assets/uPlot.min.css");

/// Clients served at once; more get 503.
const MAX_CLIENTS: usize = 64;
/// How long a client has to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// The shortest time between two events to one client.
const MIN_GAP: Duration = Duration::from_millis(250);
/// A comment line keeps idle streams open (and finds closed tabs).
const HEARTBEAT: Duration = Duration::from_secs(10);

/// What the run's thread and the page's threads share.
#[derive(Debug)]
pub struct Shared {
    pub board: Mutex<Board>,
    pub changed: Condvar,
    pub closing: AtomicBool,
    pub clients: AtomicUsize,
    /// Bound to a loopback address: answer loopback names only.
    pub loopback: bool,
    /// Pages that were told the run ended, and reports fetched since.
    pub told_end: AtomicUsize,
    pub reports: AtomicUsize,
}

impl Shared {
    pub fn new(board: Board, loopback: bool) -> Self {
        Self {
            loopback,
            board: Mutex::new(board),
            changed: Condvar::new(),
            closing: AtomicBool::new(false),
            clients: AtomicUsize::new(0),
            told_end: AtomicUsize::new(0),
            reports: AtomicUsize::new(0),
        }
    }

    /// The board; a thread that panicked holding it left it whole enough to read.
    pub fn board(&self) -> MutexGuard<'_, Board> {
        self.board.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Accepts until `closing`.
pub fn serve(listener: TcpListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.closing.load(Ordering::Relaxed) {
            break;
        }
        let Ok(stream) = stream else { continue };
        if shared.clients.fetch_add(1, Ordering::Relaxed) >= MAX_CLIENTS {
            shared.clients.fetch_sub(1, Ordering::Relaxed);
            let _ =
                respond(&stream, "503 Service Unavailable", "text/plain", b"too many clients\n");
            continue;
        }
        let s = Arc::clone(&shared);
        let spawned = std::thread::Builder::new().name("qpslab-page".into()).spawn(move || {
            handle(stream, &s);
            s.clients.fetch_sub(1, Ordering::Relaxed);
        });
        if spawned.is_err() {
            shared.clients.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A request's method, path and Host header.
struct Head {
    method: String,
    path: String,
    host: Option<String>,
}

/// Reads the request head; `None` when the client sent nothing, an empty method when it is
/// not a request.
fn read_head(stream: &mut TcpStream) -> Option<Head> {
    stream.set_read_timeout(Some(HEAD_TIMEOUT)).ok()?;
    let mut buf = [0u8; 8192];
    let mut len = 0;
    loop {
        let n = stream.read(&mut buf[len..]).ok()?;
        if n == 0 {
            return None;
        }
        len += n;
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf[..len]) {
            Ok(httparse::Status::Complete(_)) => {
                let host = req.headers.iter().find(|h| h.name.eq_ignore_ascii_case("host"));
                return Some(Head {
                    method: req.method?.to_string(),
                    path: req.path?.to_string(),
                    host: host.map(|h| String::from_utf8_lossy(h.value).into_owned()),
                });
            }
            Ok(httparse::Status::Partial) if len < buf.len() => {}
            _ => return Some(Head { method: String::new(), path: String::new(), host: None }),
        }
    }
}

/// Whether a Host header names this machine by address or as `localhost`. A page bound to
/// loopback answers only those, so a web page elsewhere cannot reach it through a DNS name
/// that rebinds to 127.0.0.1.
fn host_is_local_name(host: Option<&str>) -> bool {
    let Some(host) = host else { return true };
    let port_ok = |p: &str| {
        p.is_empty() || p.strip_prefix(':').is_some_and(|d| d.bytes().all(|b| b.is_ascii_digit()))
    };
    let name = match host.strip_prefix('[') {
        // IPv6 literals are bracketed: "[::1]:5665" or "[::1]".
        Some(rest) => match rest.split_once(']') {
            Some((ip, tail)) if port_ok(tail) => ip,
            _ => return false,
        },
        None => match host.rsplit_once(':') {
            Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => host,
        },
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok()
}

fn handle(mut stream: TcpStream, shared: &Shared) {
    let Some(Head { method, path, host }) = read_head(&mut stream) else { return };
    if method.is_empty() {
        let _ = respond(&stream, "400 Bad Request", "text/plain", b"bad request\n");
        return;
    }
    if shared.loopback && !host_is_local_name(host.as_deref()) {
        let body = b"the live page answers to an address (127.0.0.1, [::1]) or localhost only\n";
        let _ = respond(&stream, "403 Forbidden", "text/plain", body);
        return;
    }
    if method != "GET" && method != "HEAD" {
        let _ = respond(
            &stream,
            "405 Method Not Allowed",
            "text/plain",
            b"the live page only reads: GET\n",
        );
        return;
    }
    let path = path.split('?').next().unwrap_or("");
    let head = method == "HEAD";
    let send = |status: &str, kind: &str, body: &[u8]| {
        let _ = respond_head(&stream, status, kind, body, head);
    };
    match path {
        "/" => send("200 OK", "text/html; charset=utf-8", PAGE.as_bytes()),
        "/live.js" => send("200 OK", "text/javascript; charset=utf-8", SCRIPT.as_bytes()),
        "/uplot.js" => send("200 OK", "text/javascript; charset=utf-8", UPLOT_JS.as_bytes()),
        "/uplot.css" => send("200 OK", "text/css; charset=utf-8", UPLOT_CSS.as_bytes()),
        "/state" => {
            let (v, _) = shared.board().update(&Seen::default());
            send("200 OK", "application/json", v.to_string().as_bytes());
        }
        "/metrics" => {
            let text = prom::text(&shared.board().view());
            send("200 OK", "text/plain; version=0.0.4; charset=utf-8", text.as_bytes());
        }
        "/report" => {
            let html = shared.board().report_html().map(str::to_string);
            match html {
                Some(h) => {
                    shared.reports.fetch_add(1, Ordering::Relaxed);
                    send("200 OK", "text/html; charset=utf-8", h.as_bytes());
                }
                None => {
                    send("404 Not Found", "text/plain", b"the report is made when the run ends\n")
                }
            }
        }
        "/events" if !head => events(stream, shared),
        "/favicon.ico" => send("204 No Content", "text/plain", b""),
        _ => send("404 Not Found", "text/plain", b"not found: the page is at /\n"),
    }
}

fn respond(stream: &TcpStream, status: &str, kind: &str, body: &[u8]) -> std::io::Result<()> {
    respond_head(stream, status, kind, body, false)
}

fn respond_head(
    mut stream: &TcpStream,
    status: &str,
    kind: &str,
    body: &[u8],
    head_only: bool,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    if !head_only {
        stream.write_all(body)?;
    }
    stream.flush()
}

/// Server-sent events until the run ends (its last event sent) or the client goes.
fn events(mut stream: TcpStream, shared: &Shared) {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n";
    if stream.write_all(head.as_bytes()).is_err() {
        return;
    }
    let mut seen = Seen::default();
    let mut last_seq = u64::MAX;
    let mut last_write = Instant::now();
    loop {
        let mut board = shared.board();
        while board.seq == last_seq && !shared.closing.load(Ordering::Relaxed) {
            let (b, timeout) = shared
                .changed
                .wait_timeout(board, HEARTBEAT)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            board = b;
            if timeout.timed_out() {
                break;
            }
        }
        if shared.closing.load(Ordering::Relaxed) {
            return;
        }
        let msg = if board.seq == last_seq {
            ": keep-alive\n\n".to_string()
        } else {
            last_seq = board.seq;
            let (v, now) = board.update(&seen);
            seen = now;
            format!("data: {v}\n\n")
        };
        let ended = board.ended() && last_seq == board.seq;
        drop(board);
        if stream.write_all(msg.as_bytes()).and_then(|()| stream.flush()).is_err() {
            return;
        }
        if ended {
            shared.told_end.fetch_add(1, Ordering::Relaxed);
            return;
        }
        last_write = throttle(last_write);
    }
}

/// Sleeps what is left of [`MIN_GAP`] since `last`; returns now.
fn throttle(last: Instant) -> Instant {
    let since = last.elapsed();
    if since < MIN_GAP {
        std::thread::sleep(MIN_GAP - since);
    }
    Instant::now()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_addresses_and_localhost_are_local_names() {
        for ok in
            ["127.0.0.1:5665", "127.0.0.1", "localhost:5665", "LOCALHOST", "[::1]:5665", "[::1]"]
        {
            assert!(host_is_local_name(Some(ok)), "{ok}");
        }
        for bad in ["evil.example:5665", "evil.example", "127.0.0.1.nip.io:5665", "[::1].x:1"] {
            assert!(!host_is_local_name(Some(bad)), "{bad}");
        }
        assert!(host_is_local_name(None), "HTTP/1.0 without Host");
    }
}
