//! Helpers: an in-process server on a free loopback port, raw exchanges over TCP.

#![allow(dead_code, reason = "each test uses a subset of the helpers")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use qpslab_serve::config::Settings;
use qpslab_serve::{ServeConfig, ServeOptions, Server, WorkerCounters};

pub struct TestServer {
    pub addrs: Vec<SocketAddr>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Vec<WorkerCounters>>>,
}

/// Options for tests: one worker on 127.0.0.1:0 with short deadlines, on event loop `io`.
pub fn opts_on(io: qpslab_serve::IoChoice) -> ServeOptions {
    ServeOptions {
        io,
        listen: vec!["127.0.0.1:0".into()],
        workers: Some(1),
        settings: Settings {
            header_timeout: Duration::from_millis(400),
            body_timeout: Duration::from_millis(400),
            idle_timeout: Duration::from_secs(5),
            ..Settings::default()
        },
        ..ServeOptions::default()
    }
}

impl TestServer {
    pub fn start(opts: ServeOptions) -> Self {
        let cfg = ServeConfig::from_options(&opts).expect("valid options");
        let server = Server::bind(cfg).expect("bind");
        let addrs = server.local_addrs().to_vec();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::spawn(move || server.run(&s, None, &mut |_| {}).expect("run"));
        Self { addrs, stop, handle: Some(handle) }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr())
    }

    /// Stops the server and returns its totals; fails if it takes more than 2 s.
    pub fn stop(self) -> WorkerCounters {
        WorkerCounters::sum(&self.stop_each())
    }

    /// Stops the server: each worker's totals.
    pub fn stop_each(mut self) -> Vec<WorkerCounters> {
        self.stop.store(true, Ordering::Relaxed);
        let started = Instant::now();
        let totals = self.handle.take().unwrap().join().unwrap();
        assert!(started.elapsed() < Duration::from_secs(2), "stopped in {:?}", started.elapsed());
        totals
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// What came back on a connection: the bytes, and whether the server closed it.
pub struct Exchange {
    pub bytes: Vec<u8>,
    pub closed: bool,
}

impl Exchange {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    /// Status codes of the responses, in order (1xx included).
    pub fn statuses(&self) -> Vec<u16> {
        let t = self.text();
        t.match_indices("HTTP/1.1 ")
            .filter_map(|(i, _)| t.get(i + 9..i + 12)?.parse().ok())
            .collect()
    }
}

/// Sends `bytes`, then reads until the server closes or `wait` passes without data.
pub fn exchange(addr: SocketAddr, bytes: &[u8], wait: Duration) -> Exchange {
    let mut s = TcpStream::connect(addr).unwrap();
    let _ = s.write_all(bytes);
    read_all(&mut s, wait)
}

pub fn read_all(s: &mut TcpStream, wait: Duration) -> Exchange {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut bytes = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Exchange { bytes, closed: true },
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Exchange { bytes, closed: true }
            }
            Err(_) => return Exchange { bytes, closed: false },
        }
    }
}

/// A fresh connection still gets 200.
pub fn still_serves(addr: SocketAddr) {
    let e = exchange(
        addr,
        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        Duration::from_secs(2),
    );
    assert_eq!(e.statuses(), vec![200], "server still answers: {}", e.text());
}

/// Checks the response to a `?len=N` request (`chunked` in the query: chunked): N bytes of the
/// `ok\n` pattern, intact.
pub fn assert_large_body(response: &[u8], query: &str, len: usize) {
    let head_end = response.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let body = &response[head_end..];
    let body = if query.contains("chunked") { dechunk(body) } else { body.to_vec() };
    assert_eq!(body.len(), len, "{query}");
    assert!(body.chunks(3).all(|c| b"ok\n".starts_with(c)), "{query}: pattern intact");
}

/// Decodes a chunked body by its framing (sizes and CRLFs).
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let nl = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(std::str::from_utf8(&b[..nl]).unwrap(), 16).unwrap();
        b = &b[nl + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}
