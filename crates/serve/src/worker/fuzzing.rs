//! The server's connection, fed any client bytes without a socket: the fuzz targets' bodies
//! (`fuzz/fuzz_targets/` calls them; the committed corpus is replayed through them as
//! ordinary tests). HTTP/1.1 heads, bodies and chunked bodies, pipelining, and HTTP/2 after
//! the client preface, as the event loops drive a session: read, answer, write, delays
//! fired when their time comes, then the end of input.

use std::time::{Duration, Instant};

use super::session::{AfterOutput, Phase, Session};
use crate::config::{ServeConfig, ServeOptions};

/// Output a run may produce before the driver stops reading it (a `?s=` body can be 1 GiB).
const MAX_OUT: usize = 1 << 20;

/// Client bytes as a connection to `qpslab serve` would read them. The first byte sizes the
/// reads (1 to 256 bytes each); the rest is what the client sent.
pub fn session(data: &[u8]) {
    drive(data, false);
}

/// The same over HTTP/2: the client preface comes first, then the bytes.
pub fn h2_session(data: &[u8]) {
    drive(data, true);
}

/// HTTPS: the bytes are TLS records from a client (rustls parses them: the ClientHello, then
/// whatever a handshake that cannot finish leaves), read as the loops read them, the
/// server's own records taken as a socket would take them; what plaintext arrives goes to the
/// session.
pub fn tls_session(data: &[u8]) {
    static CFG: std::sync::OnceLock<ServeConfig> = std::sync::OnceLock::new();
    let cfg = CFG.get_or_init(|| {
        let opts = ServeOptions {
            listen: vec!["127.0.0.1:1".into()],
            tls: Some(crate::tls::TlsSource::SelfSigned),
            ..ServeOptions::default()
        };
        ServeConfig::from_options(&opts).unwrap_or_else(|e| panic!("self-signed TLS: {e}"))
    });
    let Some((&size, input)) = data.split_first() else { return };
    let Some(mut t) = super::transport::Transport::accept(cfg) else { panic!("a TLS connection") };
    let (mut sh, _) = super::shared(cfg);
    let mut s = Session::default();
    let mut now = Instant::now();
    s.open(now, cfg);
    let (_, mut plain) = super::transport::Transport::buffers(cfg);
    let mut out = 0;
    for piece in input.chunks(usize::from(size) + 1) {
        if t.input(&mut s, piece, &mut plain).is_err() {
            return;
        }
        t.take_records(Vec::new());
        if !turn(&mut s, &mut sh, &mut now, &mut out) || s.eof {
            return;
        }
    }
}

fn drive(data: &[u8], h2: bool) {
    let Some((&size, input)) = data.split_first() else { return };
    let opts = ServeOptions { listen: vec!["127.0.0.1:1".into()], ..ServeOptions::default() };
    let Ok(cfg) = ServeConfig::from_options(&opts) else { panic!("the default configuration") };
    let (mut sh, _) = super::shared(&cfg);
    let mut s = Session::default();
    let mut now = Instant::now();
    s.open(now, &cfg);
    let preface: &[u8] = if h2 { qpslab_http::h2::frame::PREFACE } else { b"" };
    let bytes: Vec<u8> = preface.iter().chain(input).copied().collect();
    let mut out = 0;
    for piece in bytes.chunks(usize::from(size) + 1) {
        if s.phase == Phase::Lingering {
            return;
        }
        s.inbuf.extend(piece);
        if !turn(&mut s, &mut sh, &mut now, &mut out) {
            return;
        }
    }
    s.eof = true;
    let _ = turn(&mut s, &mut sh, &mut now, &mut out);
}

/// Answers what is buffered and writes it all, firing delays as their time comes, until
/// nothing moves. False once the connection closes (or its output passed [`MAX_OUT`]).
fn turn(
    s: &mut Session,
    sh: &mut super::session::Shared<'_>,
    now: &mut Instant,
    out: &mut usize,
) -> bool {
    let cfg = sh.cfg;
    for _ in 0..100_000 {
        let mut progress = s.consume(sh, 0, 0, *now);
        loop {
            let n = s.pending().len();
            if n == 0 {
                break;
            }
            s.wrote(n, *now, cfg);
            *out += n;
            progress += 1;
            if *out > MAX_OUT {
                return false;
            }
        }
        match s.output_done(*now, cfg) {
            AfterOutput::Close => return false,
            AfterOutput::Linger => return true,
            AfterOutput::Keep => {}
        }
        // A delay's time comes (they are at most 60 s).
        if let Some((_, gen)) = sh.next_due(*now + Duration::from_secs(61)) {
            *now += Duration::from_secs(61);
            if gen == s.gen && s.fire_delay(sh, 0, *now) {
                progress += 1;
            }
        }
        if progress == 0 || s.finished(0) {
            return true;
        }
    }
    panic!("the session kept making progress without end");
}
