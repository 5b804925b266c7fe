//! qpslab's own QUIC packet and frame layers against quinn-proto's real packets: a quinn-proto
//! client's first Initial opened and read; an Initial of ours (rustls's ClientHello in a CRYPTO
//! frame) accepted by a quinn-proto server, whose answer (an Initial with its ServerHello and
//! a Handshake packet coalesced after it) is opened with the keys that ServerHello yields; and
//! our client connection shakes hands with a quinn-proto server to the end.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use qpslab_quic::frame::{self, Frame};
use qpslab_quic::packet::{self, Head, Kind, Long};
use quinn_proto::{DatagramEvent, Endpoint, EndpointConfig, Event};
use rustls::quic::{KeyChange, Keys, Version};
use rustls::Side;

fn initial_keys(dcid: &[u8], side: Side) -> Keys {
    let suite = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256;
    suite.tls13().unwrap().quic_suite().unwrap().keys(dcid, side, Version::V1)
}

/// The CRYPTO frames' data of a payload, in order, and whether an ACK of `acked` came too.
fn crypto_of(payload: &[u8], acked: Option<u64>) -> (Vec<u8>, bool) {
    let (mut data, mut ack) = (Vec::new(), false);
    for f in frame::frames(payload) {
        match f.unwrap() {
            Frame::Crypto { offset, data: d } => {
                assert_eq!(offset as usize, data.len(), "in order");
                data.extend_from_slice(d);
            }
            Frame::Ack(a) => {
                ack |= acked.is_some_and(|pn| a.ranges().any(|(lo, hi)| (lo..=hi).contains(&pn)))
            }
            _ => {}
        }
    }
    (data, ack)
}

#[test]
fn a_quinn_clients_initial_opens_and_carries_its_client_hello() {
    let (client, _) = qpslab_quic::pair::configs().unwrap();
    let mut ep = Endpoint::new(Arc::new(EndpointConfig::default()), None, false, None);
    let server = SocketAddr::from(([10, 0, 0, 2], 443));
    let (_, mut conn) = ep.connect(Instant::now(), client, server, "localhost").unwrap();
    let mut buf = Vec::new();
    let t = conn.poll_transmit(Instant::now(), 1, &mut buf).unwrap();
    let sent = buf[..t.size].to_vec();
    assert!(sent.len() >= 1200, "an Initial's datagram is padded: {}", sent.len());
    let h = packet::parse(&sent, 0).unwrap();
    assert_eq!((h.kind, h.version, h.token), (Kind::Initial, packet::V1, &[][..]));
    let keys = initial_keys(h.dcid, Side::Server);
    let mut d = sent.clone();
    let (pn, payload) = packet::open(&mut d, h.span(), &keys.remote, None).unwrap();
    assert_eq!(pn, 0);
    let (hello, _) = crypto_of(payload, None);
    assert_eq!(hello.first(), Some(&1), "a ClientHello (handshake type 1)");
    // A bit flipped in the protected payload is refused.
    let mut bad = sent.clone();
    bad[h.end - 1] ^= 1;
    assert_eq!(
        packet::open(&mut bad, h.span(), &keys.remote, None),
        Err(packet::Error::Protection)
    );
}

#[test]
fn a_quinn_server_accepts_our_initial_and_its_answer_opens() {
    let (tls_client, tls_server) = qpslab_quic::pair::tls_configs().unwrap();
    let server_config = quinn_proto::ServerConfig::with_crypto(Arc::new(
        quinn_proto::crypto::rustls::QuicServerConfig::try_from(Arc::new(tls_server)).unwrap(),
    ));
    let config = Arc::new(EndpointConfig::default());
    let mut sep = Endpoint::new(config, Some(Arc::new(server_config)), false, None);
    let (dcid, scid) = ([7u8; 8], [9u8; 8]);
    // Transport parameters: initial_source_connection_id (0x0f), as a client must send.
    let mut params = vec![0x0f, 8];
    params.extend_from_slice(&scid);
    let mut tls = rustls::quic::ClientConnection::new(
        Arc::new(tls_client),
        Version::V1,
        "localhost".try_into().unwrap(),
        params,
    )
    .unwrap();
    let mut hello = Vec::new();
    assert!(tls.write_hs(&mut hello).is_none());
    let mut frames = Vec::new();
    frame::put_crypto(&mut frames, 0, &hello);
    let keys = initial_keys(&dcid, Side::Client);
    let long =
        Long { kind: Kind::Initial, version: packet::V1, dcid: &dcid, scid: &scid, token: &[] };
    let mut d = Vec::new();
    packet::seal(&mut d, Head::Long(long), 0, None, &frames, 1200, &keys.local).unwrap();
    assert_eq!(d.len(), 1200);

    let now = Instant::now();
    let from = SocketAddr::from(([10, 0, 0, 1], 4433));
    let mut answer = Vec::new();
    let Some(DatagramEvent::NewConnection(incoming)) =
        sep.handle(now, from, None, None, BytesMut::from(&d[..]), &mut answer)
    else {
        panic!("quinn-proto did not take our Initial as a new connection");
    };
    let (_, mut conn) = sep.accept(incoming, now, &mut answer, None).unwrap();
    let mut buf = Vec::new();
    let t = conn.poll_transmit(now, 1, &mut buf).unwrap();
    let mut d = buf[..t.size].to_vec();
    let h = packet::parse(&d, 0).unwrap();
    assert_eq!((h.kind, h.dcid), (Kind::Initial, &scid[..]), "to the connection ID we chose");
    let (server_scid, span) = (h.scid.to_vec(), h.span());
    let (pn, payload) = packet::open(&mut d, span, &keys.remote, None).unwrap();
    assert_eq!(pn, 0);
    let (server_hello, acked) = crypto_of(payload, Some(0));
    assert!(acked, "our Initial acknowledged");
    assert_eq!(server_hello.first(), Some(&2), "a ServerHello (handshake type 2)");
    tls.read_hs(&server_hello).unwrap();
    let mut none = Vec::new();
    let Some(KeyChange::Handshake { keys: hs }) = tls.write_hs(&mut none) else {
        panic!("no handshake keys from the ServerHello");
    };
    // The Handshake packet coalesced after the Initial.
    let rest = &mut d[span.end..];
    let h = packet::parse(rest, 0).unwrap();
    assert_eq!((h.kind, h.scid), (Kind::Handshake, &server_scid[..]));
    let (_, payload) = packet::open(rest, h.span(), &hs.remote, None).unwrap();
    let (flight, _) = crypto_of(payload, None);
    assert_eq!(flight.first(), Some(&8), "EncryptedExtensions (handshake type 8) first");
    tls.read_hs(&flight).unwrap();
}

#[test]
fn our_client_shakes_hands_with_a_quinn_server() {
    let (tls_client, tls_server) = qpslab_quic::pair::tls_configs().unwrap();
    let server_config = quinn_proto::ServerConfig::with_crypto(Arc::new(
        quinn_proto::crypto::rustls::QuicServerConfig::try_from(Arc::new(tls_server)).unwrap(),
    ));
    let config = Arc::new(EndpointConfig::default());
    let mut sep = Endpoint::new(config, Some(Arc::new(server_config)), false, None);
    let name = "localhost".try_into().unwrap();
    let mut c =
        qpslab_quic::client::Client::new(Arc::new(tls_client), name, &[7; 8], &[9; 4]).unwrap();
    let from = SocketAddr::from(([10, 0, 0, 1], 4433));
    let (mut server, mut connected, mut buf, mut datagrams) = (None, false, Vec::new(), 0);
    for _ in 0..20 {
        let now = Instant::now();
        let mut answer = Vec::new();
        while c.poll_transmit(&mut buf) {
            datagrams += 1;
            match sep.handle(now, from, None, None, BytesMut::from(&buf[..]), &mut answer) {
                Some(DatagramEvent::NewConnection(i)) => {
                    server = Some(sep.accept(i, now, &mut answer, None).unwrap());
                }
                Some(DatagramEvent::ConnectionEvent(h, ev)) => {
                    let (sh, conn) = server.as_mut().unwrap();
                    assert_eq!(h, *sh);
                    conn.handle_event(ev);
                }
                Some(DatagramEvent::Response(_)) => panic!("quinn-proto answered statelessly"),
                None => {}
            }
        }
        let Some((h, conn)) = server.as_mut() else { panic!("no connection accepted") };
        while let Some(ev) = conn.poll_endpoint_events() {
            if let Some(back) = sep.handle_event(*h, ev) {
                conn.handle_event(back);
            }
        }
        let mut out = Vec::new();
        while let Some(t) = conn.poll_transmit(now, 1, &mut out) {
            c.recv(&mut out[..t.size]);
            out.clear();
        }
        while let Some(e) = conn.poll() {
            match e {
                Event::Connected => connected = true,
                Event::ConnectionLost { reason } => {
                    panic!("the server lost the connection: {reason}")
                }
                _ => {}
            }
        }
        if connected && c.is_confirmed() {
            break;
        }
    }
    assert_eq!(c.failure(), None);
    assert!(connected, "quinn-proto's server saw the handshake complete");
    assert!(c.is_confirmed(), "the server's HANDSHAKE_DONE came");
    assert_eq!(c.tls().alpn_protocol(), Some(&b"h3"[..]));
    assert!(!c.tls().is_handshaking());
    assert!(datagrams <= 4, "Initial, then Handshake (Finished) and ACKs: {datagrams} datagrams");
    let (_, conn) = server.as_ref().unwrap();
    assert!(conn.stats().frame_rx.acks > 0, "our ACKs read by the server");
}

/// The server's ServerHello in two CRYPTO frames, the second first, and a CRYPTO frame far
/// past what a handshake needs: our client puts the first in order (and answers with its
/// Finished once the Handshake packet comes), and refuses the second.
#[test]
fn handshake_bytes_out_of_order_are_put_back_and_a_flood_is_refused() {
    let (tls_client, tls_server) = qpslab_quic::pair::tls_configs().unwrap();
    let server_config = quinn_proto::ServerConfig::with_crypto(Arc::new(
        quinn_proto::crypto::rustls::QuicServerConfig::try_from(Arc::new(tls_server)).unwrap(),
    ));
    let config = Arc::new(EndpointConfig::default());
    let mut sep = Endpoint::new(config, Some(Arc::new(server_config)), false, None);
    let name = "localhost".try_into().unwrap();
    let (dcid, scid) = ([7u8; 8], [9u8; 4]);
    let tls_client = Arc::new(tls_client);
    let mut c = qpslab_quic::client::Client::new(tls_client.clone(), name, &dcid, &scid).unwrap();
    let mut buf = Vec::new();
    assert!(c.poll_transmit(&mut buf));
    let (now, from, mut answer) =
        (Instant::now(), SocketAddr::from(([10, 0, 0, 1], 4433)), Vec::new());
    let Some(DatagramEvent::NewConnection(i)) =
        sep.handle(now, from, None, None, BytesMut::from(&buf[..]), &mut answer)
    else {
        panic!("not taken")
    };
    let (_, mut conn) = sep.accept(i, now, &mut answer, None).unwrap();
    let mut out = Vec::new();
    let t = conn.poll_transmit(now, 1, &mut out).unwrap();
    // The server's Initial, opened as the client would; sent again by the server's keys
    // with its ServerHello cut in two and the halves swapped.
    let mut d = out[..t.size].to_vec();
    let h = packet::parse(&d, 0).unwrap();
    let (server_scid, span) = (h.scid.to_vec(), h.span());
    let keys = initial_keys(&dcid, Side::Server);
    let (_, payload) =
        packet::open(&mut d, span, &initial_keys(&dcid, Side::Client).remote, None).unwrap();
    let (hello, _) = crypto_of(payload, None);
    let (a, b) = hello.split_at(hello.len() / 2);
    let mut frames = Vec::new();
    frame::put_crypto(&mut frames, a.len() as u64, b);
    frame::put_crypto(&mut frames, 0, a);
    let long = Long {
        kind: Kind::Initial,
        version: packet::V1,
        dcid: &scid,
        scid: &server_scid,
        token: &[],
    };
    let mut reordered = Vec::new();
    packet::seal(&mut reordered, Head::Long(long), 0, None, &frames, 1200, &keys.local).unwrap();
    // The rest of the server's datagram (its Handshake packet) as sent, and the rest of its
    // flight.
    reordered.extend_from_slice(&out[span.end..t.size]);
    c.recv(&mut reordered);
    let mut more = Vec::new();
    while let Some(t) = conn.poll_transmit(now, 1, &mut more) {
        c.recv(&mut more[..t.size]);
        more.clear();
    }
    assert_eq!(c.failure(), None);
    let mut kinds = Vec::new();
    while c.poll_transmit(&mut buf) {
        let mut at = 0;
        while at < buf.len() {
            let h = packet::parse(&buf[at..], 0).unwrap();
            kinds.push(h.kind);
            at += h.end;
        }
    }
    assert!(kinds.contains(&Kind::Handshake), "its Finished: {kinds:?}");

    // A new client, and a CRYPTO frame 100 KB ahead.
    let mut c =
        qpslab_quic::client::Client::new(tls_client, "localhost".try_into().unwrap(), &dcid, &scid)
            .unwrap();
    let mut frames = Vec::new();
    frame::put_crypto(&mut frames, 100_000, b"far");
    let long = Long {
        kind: Kind::Initial,
        version: packet::V1,
        dcid: &scid,
        scid: &server_scid,
        token: &[],
    };
    let mut far = Vec::new();
    packet::seal(&mut far, Head::Long(long), 0, None, &frames, 1200, &keys.local).unwrap();
    c.recv(&mut far);
    let failed = format!("{:?}", c.failure());
    assert!(failed.contains("CRYPTO_BUFFER_EXCEEDED"), "{failed}");
    assert!(!c.poll_transmit(&mut buf), "a failed connection sends nothing more");
}
