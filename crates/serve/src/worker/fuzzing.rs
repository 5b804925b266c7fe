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
fn turn(s: &mut Session, sh: &mut super::Shared<'_>, now: &mut Instant, out: &mut usize) -> bool {
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

/// Bytes a client's streams may carry back before the HTTP/3 driver stops reading them.
const MAX_H3_IN: u64 = 4 << 20;
/// Rounds of datagrams, events and answers a step may take before the driver calls it
/// endless.
const SETTLE_ROUNDS: usize = 1_000;

/// HTTP/3: the bytes are a script of what a client does over QUIC (in memory: the streams
/// carry them with their flow control, resets and limits, as from a real peer): each step
/// an operation byte, a length byte and that many bytes of payload ([`pair::steps`]).
/// Operations by the byte's value modulo 8: open a request stream and write the payload;
/// write it on the last request stream; finish that stream; open a unidirectional stream
/// and write it; write it on the last unidirectional stream; reset the last request stream
/// (the payload's first byte the code); a datagram of the payload's bytes (anything: the
/// endpoint must drop what is not QUIC); let time pass (the length in tens of
/// milliseconds). The server's connection is the worker's own HTTP/3 ([`H3`]) under the
/// server's QUIC limits; what it answers is read and dropped.
///
/// [`pair::steps`]: qpslab_quic::pair::steps
/// [`H3`]: super::h3::H3
pub fn h3_session(data: &[u8]) {
    let _ = h3_script(data);
}

/// What an HTTP/3 script came to: requests the server answered, bytes the client read back,
/// the HTTP/3 error the server closed the connection with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct H3Outcome {
    requests: u64,
    read: u64,
    error: Option<u64>,
}

fn h3_script(data: &[u8]) -> H3Outcome {
    use qpslab_quic::pair::{self, Act, Pair, Side};
    use quinn_proto::Dir;

    static CFG: std::sync::OnceLock<ServeConfig> = std::sync::OnceLock::new();
    let cfg = CFG.get_or_init(|| {
        let opts = ServeOptions {
            listen: vec!["127.0.0.1:1".into()],
            tls: Some(crate::tls::TlsSource::SelfSigned),
            h3: true,
            settings: crate::config::Settings { h2_streams: 8, ..Default::default() },
            ..ServeOptions::default()
        };
        ServeConfig::from_options(&opts).unwrap_or_else(|e| panic!("HTTP/3's configuration: {e}"))
    });
    let (Some((client, server)), Some(ours)) = (pair::configs(), cfg.h3.as_ref()) else {
        panic!("the pair's configurations")
    };
    let mut server = (*server).clone();
    server.transport = ours.transport.clone();
    let Some(mut p) = Pair::new(client, std::sync::Arc::new(server)) else { panic!("a pair") };
    let (mut sh, _) = super::shared(cfg);
    let mut srv = H3Server { h3: super::h3::H3::new(), closed: false, error: None, read: 0 };
    srv.settle(&mut p, &mut sh);
    let (mut bidi, mut uni) = (None, None);
    for (op, payload) in pair::steps(data) {
        if srv.closed {
            break;
        }
        let c = &mut p.client;
        match op % 8 {
            0 => bidi = pair::open(c, Dir::Bi, payload),
            1 => _ = pair::act(c, bidi, Act::Write(payload)),
            2 => _ = pair::act(c, bidi, Act::Finish),
            3 => uni = pair::open(c, Dir::Uni, payload),
            4 => _ = pair::act(c, uni, Act::Write(payload)),
            5 => _ = pair::act(c, bidi, Act::Reset(payload)),
            6 => p.deliver(Side::Server, payload),
            _ => p.advance(Duration::from_millis(10 * payload.len() as u64)),
        }
        srv.settle(&mut p, &mut sh);
    }
    // The end: delays and timers run out.
    p.advance(Duration::from_secs(61));
    srv.settle(&mut p, &mut sh);
    H3Outcome { requests: sh.counters.requests, read: srv.read, error: srv.error }
}

/// The server's side of the in-memory pair, driven as `worker/quic.rs` drives a connection.
struct H3Server {
    h3: super::h3::H3,
    /// Lost or closed.
    closed: bool,
    /// The HTTP/3 code it closed the connection with.
    error: Option<u64>,
    /// Bytes the client read back.
    read: u64,
}

impl H3Server {
    /// Datagrams, the server's events and answers, and the client's reads, until nothing
    /// moves.
    fn settle(&mut self, p: &mut qpslab_quic::pair::Pair, sh: &mut super::Shared<'_>) {
        use quinn_proto::{Event, VarInt};
        let streams = sh.cfg.settings.h2_streams;
        for _ in 0..SETTLE_ROUNDS {
            let mut moved = p.exchange();
            while let Some(ev) = p.server.poll() {
                moved += 1;
                let result = match ev {
                    Event::Connected => self.h3.connected(&mut p.server),
                    Event::ConnectionLost { .. } => {
                        self.closed = true;
                        Ok(())
                    }
                    Event::Stream(ev) => self.h3.stream_event(&mut p.server, ev, sh, p.now),
                    _ => Ok(()),
                };
                if let Err(e) = result {
                    let reason = bytes::Bytes::copy_from_slice(e.msg.as_bytes());
                    p.server.close(p.now, VarInt::from_u64(e.code).unwrap_or_default(), reason);
                    self.closed = true;
                    self.error = Some(e.code);
                }
                assert!(self.h3.in_flight() <= streams, "{} requests", self.h3.in_flight());
            }
            if self.h3.delayed > 0 {
                let _ = self.h3.fire_delays(&mut p.server, sh, p.now);
            }
            let (events, read) = qpslab_quic::pair::read_all(&mut p.client, &mut Vec::new());
            self.read += read;
            moved += events;
            if moved == 0 || self.read > MAX_H3_IN {
                return;
            }
        }
        panic!("the connection kept making progress without end");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step of an HTTP/3 script.
    fn step(op: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![op, payload.len() as u8];
        out.extend_from_slice(payload);
        out
    }

    /// A HEADERS frame of a GET for `path` (QPACK: static :method GET, :scheme https,
    /// :path and :authority literal with static names).
    fn get(path: &str) -> Vec<u8> {
        let mut section = vec![0, 0, 0xd1, 0xd7, 0x51, path.len() as u8];
        section.extend_from_slice(path.as_bytes());
        section.extend_from_slice(b"\x50\x09localhost");
        let mut out = vec![0x01, section.len() as u8];
        out.extend(section);
        out
    }

    #[test]
    fn a_scripted_client_is_answered_over_quic() {
        let mut script = step(3, b"\x00\x04\x00");
        for _ in 0..3 {
            script.extend(step(0, &get("/?s=3000")));
            script.extend(step(2, b""));
        }
        let got = h3_script(&script);
        assert_eq!((got.requests, got.error), (3, None), "{got:?}");
        assert!(got.read > 3 * 3000, "{got:?}");
        // A delayed answer comes when its time does.
        let mut script = step(0, &get("/?t=300"));
        script.extend(step(2, b""));
        assert_eq!(h3_script(&script).requests, 1);
    }

    #[test]
    fn a_scripted_client_that_breaks_http3_is_closed() {
        // DATA before HEADERS.
        let got = h3_script(&[step(0, b"\x00\x03abc"), step(2, b"")].concat());
        assert_eq!((got.requests, got.error), (0, Some(0x105)), "{got:?}");
        // A push stream opened by a client.
        assert_eq!(h3_script(&step(3, b"\x01")).error, Some(0x103));
    }
}
