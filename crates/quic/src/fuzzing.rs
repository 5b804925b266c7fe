//! The fuzz target's body for the QUIC packet and frame layers (`fuzz/fuzz_targets/quic_packets.rs`
//! calls it; the committed corpus is replayed through it as an ordinary test on stable Rust).
//! It takes any bytes and panics only on a bug: a parser that panics or loops, or a packet
//! that does not open as it was sealed.

use std::sync::OnceLock;

use rustls::quic::Keys;

use crate::frame::{self, Frame};
use crate::packet::{self, Head, Kind, Long};

/// Initial keys of a fixed connection ID, both sides, made once.
fn keys() -> &'static (Keys, Keys) {
    static KEYS: OnceLock<(Keys, Keys)> = OnceLock::new();
    KEYS.get_or_init(|| {
        let suite = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256;
        let quic = suite.tls13().and_then(|s| s.quic_suite()).map(|s| {
            let id = [0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08];
            let v = rustls::quic::Version::V1;
            (s.keys(&id, rustls::Side::Client, v), s.keys(&id, rustls::Side::Server, v))
        });
        // The suite is compiled in: its QUIC keys always exist.
        #[allow(clippy::expect_used, reason = "a build without AES-128-GCM is not this build")]
        quic.expect("TLS13_AES_128_GCM_SHA256 has QUIC keys")
    })
}

/// The first byte picks what the rest is:
/// - 0-63: a payload of frames, every frame and every ACK range read;
/// - 64-127: a datagram of coalesced packets, each header read and its protection tried
///   (the server's Initial keys), each next packet where the last ended;
/// - 128-255: frames to seal in a packet (its number and the last acknowledged from the next
///   bytes, a short or a long header by the first byte's low bit) and open again: the same
///   number and payload must come back.
pub fn packets(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    match mode {
        0..=63 => read_frames(rest),
        64..=127 => read_datagram(rest),
        _ => round_trip(mode, rest),
    }
}

fn read_frames(payload: &[u8]) {
    for f in frame::frames(payload) {
        if let Ok(Frame::Ack(a)) = f {
            let mut below = u64::MAX;
            for (lo, hi) in a.ranges() {
                assert!(lo <= hi && hi < below, "ACK ranges go down without touching");
                below = lo;
            }
        }
    }
}

fn read_datagram(mut d: &[u8]) {
    let mut buf = d.to_vec();
    let mut at = 0;
    while at < buf.len() {
        let Ok(h) = packet::parse(d, 8) else { return };
        assert!(h.end > 0 && h.end <= d.len(), "a packet ends inside its datagram");
        let (span, end) = (h.span(), h.end);
        if h.pn_at > 0 {
            let _ = packet::open(&mut buf[at..], span, &keys().1.remote, None);
        }
        at += end;
        d = &d[end..];
    }
}

fn round_trip(mode: u8, rest: &[u8]) {
    let Some((head, frames)) = rest.split_at_checked(6) else { return };
    let pn = u64::from(u32::from_be_bytes([head[0], head[1], head[2], head[3]]));
    let acked = pn.checked_sub(u64::from(u16::from_be_bytes([head[4], head[5]])));
    let (client, server) = keys();
    let dcid = [0x83, 0x94, 0xc8, 0xf0];
    let h = if mode & 1 == 0 {
        Head::Short { dcid: &dcid, key_phase: mode & 2 != 0 }
    } else {
        Head::Long(Long {
            kind: Kind::Handshake,
            version: packet::V1,
            dcid: &dcid,
            scid: &[],
            token: &[],
        })
    };
    let mut d = Vec::new();
    if frames.len() > 1_000 || packet::seal(&mut d, h, pn, acked, frames, 0, &client.local).is_err()
    {
        return;
    }
    let Ok(parsed) = packet::parse(&d, dcid.len()) else {
        panic!("a sealed packet's header reads")
    };
    let span = parsed.span();
    // The receiver expects the packet after the last it received, which was at most the
    // last the sender had acknowledged.
    let got = packet::open(&mut d, span, &server.remote, acked);
    let Ok((n, payload)) = got else { panic!("a sealed packet opens: {got:?}") };
    assert_eq!(n, pn, "its number comes back");
    assert_eq!(&payload[..frames.len()], frames, "its payload comes back");
    assert!(payload[frames.len()..].iter().all(|&b| b == 0), "then only padding");
}

/// A server made for the fuzz target [`client`]: rustls's QUIC server handshake carried in
/// packets of this crate's own, so that once the handshake is done the fuzz input's frames go
/// to the client in 1-RTT packets as a server's would (what quinn-proto as the server would
/// never send).
struct Hostile {
    tls: rustls::quic::ServerConnection,
    /// Each space's keys (to send, to read), next packet number and handshake bytes sent.
    keys: [Option<(DirectionalKeys, DirectionalKeys)>; 3],
    pn: [u64; 3],
    crypto_sent: [u64; 3],
    write_space: usize,
    scid: [u8; 8],
    /// The client's connection ID (where the packets go).
    to: Vec<u8>,
}

use rustls::quic::{DirectionalKeys, KeyChange};

/// Client and server TLS configurations, made once (a certificate each time would cost more
/// than the run).
fn configs(
) -> Option<&'static (std::sync::Arc<rustls::ClientConfig>, std::sync::Arc<rustls::ServerConfig>)> {
    static CONFIGS: OnceLock<
        Option<(std::sync::Arc<rustls::ClientConfig>, std::sync::Arc<rustls::ServerConfig>)>,
    > = OnceLock::new();
    CONFIGS
        .get_or_init(|| {
            let (c, s) = crate::pair::tls_configs()?;
            Some((std::sync::Arc::new(c), std::sync::Arc::new(s)))
        })
        .as_ref()
}

impl Hostile {
    fn new(
        config: std::sync::Arc<rustls::ServerConfig>,
        odcid: &[u8],
        client: &[u8],
    ) -> Option<Self> {
        let scid = [0x5e; 8];
        let mut p = crate::client::Params::default();
        p.bytes(0x00, odcid);
        p.bytes(0x0f, &scid);
        p.int(0x04, 1 << 20);
        p.int(0x06, 1 << 16);
        p.int(0x08, 16);
        p.int(0x01, 30_000);
        let p = p.0;
        let tls = rustls::quic::ServerConnection::new(config, rustls::quic::Version::V1, p).ok()?;
        let suite = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256;
        let initial = suite.tls13()?.quic_suite()?.keys(
            odcid,
            rustls::Side::Server,
            rustls::quic::Version::V1,
        );
        Some(Hostile {
            tls,
            keys: [Some((initial.local, initial.remote)), None, None],
            pn: [0; 3],
            crypto_sent: [0; 3],
            write_space: 0,
            scid,
            to: client.to_vec(),
        })
    }

    /// Reads the client's datagram: its CRYPTO frames to rustls (in order, as the client
    /// sends them here).
    fn read(&mut self, mut d: Vec<u8>) {
        let mut at = 0;
        while at < d.len() {
            let Ok(h) = packet::parse(&d[at..], self.scid.len()) else { return };
            let (kind, span, end) = (h.kind, h.span(), h.end);
            let space = match kind {
                Kind::Initial => 0,
                Kind::Handshake => 1,
                Kind::OneRtt => 2,
                _ => return,
            };
            if let Some((_, remote)) = &self.keys[space] {
                if let Ok((_, payload)) = packet::open(&mut d[at..], span, remote, None) {
                    let payload = payload.to_vec();
                    for f in frame::frames(&payload).flatten() {
                        if let Frame::Crypto { data, .. } = f {
                            if self.tls.read_hs(data).is_err() {
                                return;
                            }
                        }
                    }
                }
            }
            at += end;
        }
    }

    /// What rustls has to send, each space's CRYPTO in a packet, coalesced in one datagram.
    fn write(&mut self) -> Vec<u8> {
        let mut by_space: [Vec<u8>; 3] = Default::default();
        loop {
            let mut out = Vec::new();
            let change = self.tls.write_hs(&mut out);
            by_space[self.write_space].extend_from_slice(&out);
            match change {
                Some(KeyChange::Handshake { keys }) => {
                    self.keys[1] = Some((keys.local, keys.remote));
                    self.write_space = 1;
                }
                Some(KeyChange::OneRtt { keys, .. }) => {
                    self.keys[2] = Some((keys.local, keys.remote));
                    self.write_space = 2;
                }
                None => break,
            }
        }
        let mut d = Vec::new();
        for (space, bytes) in by_space.iter().enumerate() {
            if bytes.is_empty() {
                continue;
            }
            let mut frames = Vec::new();
            frame::put_crypto(&mut frames, self.crypto_sent[space], bytes);
            self.crypto_sent[space] += bytes.len() as u64;
            self.seal(&mut d, space, &frames);
        }
        d
    }

    /// Seals `frames` in a packet of `space` onto `d`.
    fn seal(&mut self, d: &mut Vec<u8>, space: usize, frames: &[u8]) {
        let Some((local, _)) = &self.keys[space] else { return };
        let head =
            crate::client::head(crate::client::kind_of(space), &self.to, &self.scid, &[], false);
        let pn = self.pn[space];
        self.pn[space] += 1;
        let _ = packet::seal(d, head, pn, None, frames, 0, local);
    }
}

/// Datagrams a client's [`crate::client::Client::poll_transmit`] may give in a row before
/// the target calls it a loop that never ends.
const TRANSMITS: usize = 10_000;

/// The fuzz target for qpslab's own QUIC client against a hostile server: a real handshake
/// (rustls on both sides), then the input as a script of steps ([`crate::pair::steps`]): the
/// low two bits of each step's operation byte pick
/// - 0: its bytes as frames in a 1-RTT packet from the server (any frame, any stream, any
///   offset, any limit);
/// - 1: its bytes as a datagram as they are (garbage, or a packet of a space without keys);
/// - 2: a request stream opened and its bytes written (finished when bit 2 is set), or a
///   stream reset or stopped (bits 3 and 4);
/// - 3: time moves on by its first byte in milliseconds, and the client's timers fire.
///
/// After each step the client's datagrams are taken (a bounded number: more is a loop) and
/// its readable streams read. It panics only on a bug: a panic inside, a send loop without
/// end, or bytes held past the windows the client gave.
pub fn client(data: &[u8]) {
    let Some((client_tls, server_tls)) = configs() else { return };
    let Ok(name) = rustls::pki_types::ServerName::try_from("localhost") else { return };
    let (odcid, scid) = ([0x0d; 8], [0xc1; 8]);
    let Ok(mut c) = crate::client::Client::new(client_tls.clone(), name, &odcid, &scid) else {
        return;
    };
    let Some(mut s) = Hostile::new(server_tls.clone(), &odcid, &scid) else { return };
    let mut now = std::time::Instant::now();
    let mut buf = Vec::new();
    // The handshake: a few rounds each way.
    for _ in 0..4 {
        while c.poll_transmit(&mut buf, now) {
            s.read(buf.clone());
        }
        let mut d = s.write();
        if !d.is_empty() {
            c.recv(&mut d, now);
        }
    }
    if !c.is_established() || s.keys[2].is_none() {
        panic!("no handshake with the fuzz target's own server: {:?}", c.failure());
    }
    let mut done = Vec::new();
    frame::put_simple(&mut done, 0x1e, &[]);
    let mut d = Vec::new();
    s.seal(&mut d, 2, &done);
    c.recv(&mut d, now);
    let mut opened = Vec::new();
    for (op, payload) in crate::pair::steps(data) {
        match op & 3 {
            0 => {
                let mut d = Vec::new();
                s.seal(&mut d, 2, payload);
                c.recv(&mut d, now);
            }
            1 => c.recv(&mut payload.to_vec(), now),
            2 if op & 0x18 == 0 => {
                if let Some(id) = crate::conn::Conn::open(&mut c, true) {
                    crate::conn::Conn::write(&mut c, id, payload);
                    if op & 4 != 0 {
                        crate::conn::Conn::finish(&mut c, id);
                    }
                    opened.push(id);
                }
            }
            2 => {
                let Some(&id) = opened
                    .get(usize::from(payload.first().copied().unwrap_or(0)) % opened.len().max(1))
                else {
                    continue;
                };
                if op & 8 != 0 {
                    crate::conn::Conn::reset(&mut c, id, 0x10c);
                } else {
                    crate::conn::Conn::stop(&mut c, id, 0x10c);
                }
            }
            _ => {
                let ms = payload.first().copied().unwrap_or(1);
                now += std::time::Duration::from_millis(u64::from(ms));
                if c.timeout().is_some_and(|t| t <= now) {
                    c.handle_timeout(now);
                }
            }
        }
        let mut sent = 0;
        while c.poll_transmit(&mut buf, now) {
            sent += 1;
            assert!(sent < TRANSMITS, "poll_transmit gives datagrams without end");
        }
        for id in c.streams.readable() {
            let _ = crate::conn::Conn::read(&mut c, id, |b| {
                assert!(b.len() as u64 <= crate::streams::CONN_WINDOW, "past the window");
                Ok::<_, ()>(true)
            });
        }
        if c.failure().is_some() {
            // Closed: nothing more it does matters (a close packet, then silence).
            while c.poll_transmit(&mut buf, now) {}
            return;
        }
    }
}
