//! Scripted HTTP servers that misbehave on purpose. Each connection runs in its own thread,
//! reads requests (head up to CRLFCRLF; test requests carry no body) and lets the script answer.
//! The server counts what it did, so tests compare the generator's counts with the truth.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the script did with a request.
pub enum After {
    /// Keep reading requests on this connection.
    Continue,
    /// Close the connection (normally: FIN).
    Close,
    /// Close with an RST (SO_LINGER 0).
    Reset,
    /// Stop answering and hold the connection open until the test ends.
    Stall,
}

#[derive(Default)]
pub struct Counts {
    /// Requests fully received.
    pub requests: AtomicU64,
    /// Connections on which at least one request arrived.
    pub connections: AtomicU64,
    /// Request body bytes received (Content-Length bodies).
    pub body_bytes: AtomicU64,
}

pub struct Scripted {
    pub port: u16,
    pub counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
}

type Script = dyn Fn(u64, &mut TcpStream) -> After + Send + Sync;

impl Scripted {
    /// Starts a server whose `script` gets the server-wide request number (from 0) and the
    /// stream, writes whatever it likes and says what happens next.
    pub fn start(script: impl Fn(u64, &mut TcpStream) -> After + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        Self::serve_on(listener, Duration::ZERO, script)
    }

    /// Like [`Scripted::start`], but with an accept queue of one and no accepting for
    /// `accept_after`: the kernel completes two handshakes and drops the other SYNs, so
    /// further connects complete only when their SYN is resent (after 1 s).
    pub fn start_late(
        accept_after: Duration,
        script: impl Fn(u64, &mut TcpStream) -> After + Send + Sync + 'static,
    ) -> Self {
        use socket2::{Domain, Socket, Type};
        let sock = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        sock.bind(&"127.0.0.1:0".parse::<std::net::SocketAddr>().unwrap().into()).unwrap();
        sock.listen(1).unwrap();
        Self::serve_on(sock.into(), accept_after, script)
    }

    fn serve_on(
        listener: TcpListener,
        accept_after: Duration,
        script: impl Fn(u64, &mut TcpStream) -> After + Send + Sync + 'static,
    ) -> Self {
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let counts = Arc::new(Counts::default());
        let stop = Arc::new(AtomicBool::new(false));
        let script: Arc<Script> = Arc::new(script);
        let (c, s) = (counts.clone(), stop.clone());
        std::thread::spawn(move || {
            std::thread::sleep(accept_after);
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (c, s, script) = (c.clone(), s.clone(), script.clone());
                        std::thread::spawn(move || serve(stream, &c, &s, &*script));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        });
        Self { port, counts, stop }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    pub fn requests(&self) -> u64 {
        self.counts.requests.load(Ordering::SeqCst)
    }

    pub fn body_bytes(&self) -> u64 {
        self.counts.body_bytes.load(Ordering::SeqCst)
    }

    pub fn connections(&self) -> u64 {
        self.counts.connections.load(Ordering::SeqCst)
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(mut stream: TcpStream, counts: &Counts, stop: &AtomicBool, script: &Script) {
    stream.set_nodelay(true).unwrap();
    stream.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut served_here = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if let Some(end) = find_head_end(&buf) {
            let body = content_length(&buf[..end]);
            if buf.len() < end + body {
                match read_more(&mut stream, &mut buf, &mut chunk) {
                    Some(()) => continue,
                    None => return,
                }
            }
            buf.drain(..end + body);
            counts.body_bytes.fetch_add(body as u64, Ordering::SeqCst);
            let n = counts.requests.fetch_add(1, Ordering::SeqCst);
            if served_here == 0 {
                counts.connections.fetch_add(1, Ordering::SeqCst);
            }
            served_here += 1;
            match script(n, &mut stream) {
                After::Continue => continue,
                After::Close => return,
                After::Reset => {
                    let sock = socket2::SockRef::from(&stream);
                    let _ = sock.set_linger(Some(Duration::ZERO));
                    return;
                }
                After::Stall => {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    return;
                }
            }
        }
        if read_more(&mut stream, &mut buf, &mut chunk).is_none() {
            return;
        }
    }
}

/// One read into `buf`; `None` when the connection is gone.
fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>, chunk: &mut [u8]) -> Option<()> {
    match stream.read(chunk) {
        Ok(0) => None,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Some(())
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Some(())
        }
        Err(_) => None,
    }
}

fn content_length(head: &[u8]) -> usize {
    let text = String::from_utf8_lossy(head);
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// Writes `bytes` in pieces of `piece` bytes with a short pause between, so the client sees
/// them in separate reads.
pub fn trickle(stream: &mut TcpStream, bytes: &[u8], piece: usize) -> std::io::Result<()> {
    for p in bytes.chunks(piece) {
        stream.write_all(p)?;
        std::thread::sleep(Duration::from_micros(300));
    }
    Ok(())
}
