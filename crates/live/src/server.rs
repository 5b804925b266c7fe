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
    /// Pages that were told the run ended, and reports fetched since.
    pub told_end: AtomicUsize,
    pub reports: AtomicUsize,
}

impl Shared {
    pub fn new(board: Board) -> Self {
        Self {
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

/// Reads the request head; `None` when it is not a request.
fn read_head(stream: &mut TcpStream) -> Option<(String, String)> {
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
                return Some((req.method?.to_string(), req.path?.to_string()));
            }
            Ok(httparse::Status::Partial) if len < buf.len() => {}
            _ => return Some((String::new(), String::new())),
        }
    }
}

fn handle(mut stream: TcpStream, shared: &Shared) {
    let Some((method, path)) = read_head(&mut stream) else { return };
    if method.is_empty() {
        let _ = respond(&stream, "400 Bad Request", "text/plain", b"bad request\n");
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
