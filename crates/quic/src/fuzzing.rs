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
