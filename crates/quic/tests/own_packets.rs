//! qpslab's own QUIC packet and frame layers against quinn-proto's real packets: a quinn-proto
//! client's first Initial opened and read; an Initial of ours (rustls's ClientHello in a CRYPTO
//! frame) accepted by a quinn-proto server, whose answer (an Initial with its ServerHello and
//! a Handshake packet coalesced after it) is opened with the keys that ServerHello yields; and
//! our client connection shakes hands with a quinn-proto server to the end.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use qpslab_quic::frame::{self, Frame};
use qpslab_quic::packet::{self, Head, Kind, Long};
use quinn_proto::{DatagramEvent, Endpoint, EndpointConfig, Event};
use rustls::quic::{KeyChange, Keys, Version};
use rustls::Side;

/// A quinn-proto server endpoint over `tls` (quinn-proto's transport defaults).
fn quinn_server(tls: rustls::ServerConfig) -> Endpoint {
    let crypto = quinn_proto::crypto::rustls::QuicServerConfig::try_from(Arc::new(tls)).unwrap();
    let server = quinn_proto::ServerConfig::with_crypto(Arc::new(crypto));
    Endpoint::new(Arc::new(EndpointConfig::default()), Some(Arc::new(server)), false, None)
}

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
    let mut sep = quinn_server(tls_server);
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

/// Our client and a quinn-proto server endpoint in memory: datagrams handed across, each
/// side's timers at the real clock.
struct Rig {
    sep: Endpoint,
    server: Option<(quinn_proto::ConnectionHandle, quinn_proto::Connection)>,
    client: qpslab_quic::client::Client,
    /// Datagrams the client sent, and the server's connection events so far.
    datagrams: usize,
    connected: bool,
    /// The rig's clock (each turn is a millisecond), and every Nth datagram dropped on the
    /// way up (client to server) and down.
    now: Instant,
    drop_up: Option<usize>,
    drop_down: Option<usize>,
    down: usize,
    /// The server asks a client whose address it has not validated for a Retry first.
    retry: bool,
    /// The path up carries datagrams of this size at most (larger ones are dropped).
    max_up: Option<usize>,
}

impl Rig {
    fn new() -> Rig {
        let (tls_client, tls_server) = qpslab_quic::pair::tls_configs().unwrap();
        Rig::with(Arc::new(tls_client), quinn_server(tls_server), 7)
    }

    /// A rig whose client connects with `tls` to the server endpoint `sep`, its first
    /// destination connection ID 8 bytes of `id`, its own 4 bytes of `id + 2`.
    fn with(tls: Arc<rustls::ClientConfig>, sep: Endpoint, id: u8) -> Rig {
        let name = "localhost".try_into().unwrap();
        let client = qpslab_quic::client::Client::new(tls, name, &[id; 8], &[id + 2; 4]).unwrap();
        Rig {
            sep,
            server: None,
            client,
            datagrams: 0,
            connected: false,
            now: Instant::now(),
            drop_up: None,
            drop_down: None,
            down: 0,
            retry: false,
            max_up: None,
        }
    }

    /// One round: the client's datagrams to the server, the server's back.
    fn turn(&mut self) {
        self.now += Duration::from_millis(1);
        let now = self.now;
        let from = SocketAddr::from(([10, 0, 0, 1], 4433));
        let (mut buf, mut answer) = (Vec::new(), Vec::new());
        if self.client.timeout().is_some_and(|t| t <= now) {
            self.client.handle_timeout(now);
        }
        // What the endpoint answers without a connection (a Retry), for the client.
        let mut stateless = Vec::new();
        while self.client.poll_transmit(&mut buf, now) {
            self.datagrams += 1;
            if self.drop_up.is_some_and(|n| self.datagrams.is_multiple_of(n))
                || self.max_up.is_some_and(|m| buf.len() > m)
            {
                continue;
            }
            let data = BytesMut::from(&buf[..]);
            answer.clear();
            match self.sep.handle(now, from, None, None, data, &mut answer) {
                Some(DatagramEvent::NewConnection(i))
                    if self.retry && !i.remote_address_validated() =>
                {
                    let t = self.sep.retry(i, &mut answer).unwrap();
                    stateless.push(answer[..t.size].to_vec());
                }
                Some(DatagramEvent::NewConnection(i)) => {
                    self.server = Some(self.sep.accept(i, now, &mut answer, None).unwrap());
                }
                Some(DatagramEvent::ConnectionEvent(h, ev)) => {
                    let (sh, conn) = self.server.as_mut().unwrap();
                    assert_eq!(h, *sh);
                    conn.handle_event(ev);
                }
                Some(DatagramEvent::Response(_)) => panic!("quinn-proto answered statelessly"),
                None => {}
            }
        }
        for mut d in stateless {
            self.client.recv(&mut d, now);
        }
        let Some((h, conn)) = self.server.as_mut() else {
            assert!(self.retry, "no connection accepted");
            return;
        };
        if conn.poll_timeout().is_some_and(|t| t <= now) {
            conn.handle_timeout(now);
        }
        while let Some(ev) = conn.poll_endpoint_events() {
            if let Some(back) = self.sep.handle_event(*h, ev) {
                conn.handle_event(back);
            }
        }
        let mut out = Vec::new();
        while let Some(t) = conn.poll_transmit(now, 1, &mut out) {
            self.down += 1;
            if self.drop_down.is_none_or(|n| !self.down.is_multiple_of(n)) {
                self.client.recv(&mut out[..t.size], now);
            }
            out.clear();
        }
        let failed = self.client.failure();
        assert!(matches!(failed, None | Some(qpslab_quic::client::Error::Local)), "{failed:?}");
    }

    fn conn(&mut self) -> &mut quinn_proto::Connection {
        &mut self.server.as_mut().unwrap().1
    }

    /// The server's events since the last call (Connected noted).
    fn events(&mut self) -> Vec<Event> {
        let mut got = Vec::new();
        while let Some(e) = self.conn().poll() {
            if let Event::ConnectionLost { reason } = &e {
                panic!("the server lost the connection: {reason}");
            }
            self.connected |= matches!(e, Event::Connected);
            got.push(e);
        }
        got
    }

    /// A rig whose handshake is done.
    fn connected() -> Rig {
        Rig::new().handshake()
    }

    /// This rig once its handshake is done.
    fn handshake(self) -> Rig {
        let mut rig = self;
        for _ in 0..20 {
            rig.turn();
            rig.events();
            if rig.connected && rig.client.is_confirmed() {
                return rig;
            }
        }
        panic!("no handshake: {:?}", rig.client.failure());
    }

    /// The server reads every readable stream to its end and answers each bidirectional one
    /// with `answer` (once ended); the streams it ended.
    fn serve(&mut self, answer: &[u8]) -> usize {
        let mut ids = Vec::new();
        for e in self.events() {
            if let Event::Stream(quinn_proto::StreamEvent::Readable { id }) = e {
                ids.push(id);
            }
        }
        let conn = self.conn();
        while let Some(id) = conn.streams().accept(quinn_proto::Dir::Bi) {
            ids.push(id);
        }
        let mut answered = 0;
        for id in ids {
            let mut stream = conn.recv_stream(id);
            let Ok(mut chunks) = stream.read(true) else { continue };
            let ended = loop {
                match chunks.next(usize::MAX) {
                    Ok(Some(_)) => {}
                    Ok(None) => break true,
                    Err(_) => break false,
                }
            };
            let _ = chunks.finalize();
            if ended {
                let mut send = conn.send_stream(id);
                send.write(answer).unwrap();
                send.finish().unwrap();
                answered += 1;
            }
        }
        answered
    }

    /// What the client read from each readable stream, and which ended.
    fn read(&mut self) -> Vec<(u64, Vec<u8>, bool)> {
        let mut got = Vec::new();
        for id in self.client.streams.readable() {
            let mut into = Vec::new();
            let (ended, reset) = self.client.streams.read(id, &mut into);
            assert_eq!(reset, None);
            got.push((id, into, ended));
        }
        got
    }
}

#[test]
fn our_client_shakes_hands_with_a_quinn_server() {
    let rig = Rig::connected();
    let c = &rig.client;
    assert_eq!(c.failure(), None);
    assert_eq!(c.tls().alpn_protocol(), Some(&b"h3"[..]));
    assert!(!c.tls().is_handshaking());
    let n = rig.datagrams;
    assert!(n <= 4, "Initial, then Handshake (Finished) and ACKs: {n} datagrams");
    let (_, conn) = rig.server.as_ref().unwrap();
    assert!(conn.stats().frame_rx.acks > 0, "our ACKs read by the server");
}

/// Streams both ways with a quinn-proto server: a request and its answer; a stream the
/// server opens; 150 exchanges under its limit of 100 streams at once (its MAX_STREAMS lets
/// the rest go); 3 MB on one stream through this side's 1 MB window (MAX_STREAM_DATA as it
/// reads, across the server's key updates); and streams forgotten once both sides ended.
#[test]
fn streams_carry_bytes_both_ways_within_the_limits() {
    let mut rig = Rig::connected();
    let id = rig.client.streams.open(true).unwrap();
    assert!(rig.client.streams.write(id, b"ping", true));
    let mut got = Vec::new();
    for _ in 0..10 {
        rig.turn();
        rig.serve(b"pong");
        rig.turn();
        got.extend(rig.read());
        if !got.is_empty() {
            break;
        }
    }
    assert_eq!(got, [(id, b"pong".to_vec(), true)]);
    assert!(rig.client.streams.is_empty(), "the stream went once both sides ended");

    // A stream the server opens.
    let uni = rig.conn().streams().open(quinn_proto::Dir::Uni).unwrap();
    rig.conn().send_stream(uni).write(b"settings").unwrap();
    rig.conn().send_stream(uni).finish().unwrap();
    rig.turn();
    assert_eq!(rig.read(), [(3, b"settings".to_vec(), true)]);

    // 150 exchanges, 100 streams at most at once.
    let (mut opened, mut answered, mut most) = (0, 0, 0);
    for _ in 0..50 {
        while opened < 150 {
            let Some(id) = rig.client.streams.open(true) else { break };
            assert!(rig.client.streams.write(id, b"GET", true));
            opened += 1;
        }
        most = most.max(rig.client.streams.len());
        rig.turn();
        rig.serve(b"200");
        rig.turn();
        answered += rig.read().iter().filter(|(_, body, ended)| *ended && body == b"200").count();
        if answered == 150 {
            break;
        }
    }
    assert_eq!((opened, answered), (150, 150));
    // The limit of 100, less the first stream's until the server's credit for it came.
    assert!((99..=100).contains(&most), "the server's limit held: {most} at once");
    assert!(rig.client.streams.is_empty());

    // 3 MB on one stream, through a 1 MB window.
    let id = rig.client.streams.open(true).unwrap();
    rig.client.streams.write(id, b"big", true);
    let big: Vec<u8> = (0..3_000_000u32).map(|i| i as u8).collect();
    let (mut read, mut ended, mut written) = (Vec::new(), false, 0);
    for _ in 0..2000 {
        rig.turn();
        for e in rig.events() {
            if let Event::Stream(quinn_proto::StreamEvent::Opened { .. }) = e {
                let sid = rig.conn().streams().accept(quinn_proto::Dir::Bi).unwrap();
                assert_eq!(sid.index(), id / 4);
            }
        }
        let sid =
            quinn_proto::StreamId::new(quinn_proto::Side::Client, quinn_proto::Dir::Bi, id / 4);
        if written < big.len() {
            written += rig.conn().send_stream(sid).write(&big[written..]).unwrap_or(0);
            if written == big.len() {
                rig.conn().send_stream(sid).finish().unwrap();
            }
        }
        rig.turn();
        for (sid, body, end) in rig.read() {
            assert_eq!(sid, id);
            read.extend_from_slice(&body);
            ended |= end;
        }
        if ended {
            break;
        }
    }
    let counts = rig.client.counts;
    assert!(ended, "{} of {} bytes read, written {written}; {counts:?}", read.len(), big.len());
    assert!(read == big, "the bytes, in order");
    // quinn-proto updates its 1-RTT keys after 10 to 1,000 packets, at random: followed.
    assert!(counts.key_updates >= 1, "{counts:?}");
    assert_eq!(counts.undecryptable, 0, "{counts:?}");
}

/// The server's ServerHello in two CRYPTO frames, the second first, and a CRYPTO frame far
/// past what a handshake needs: our client puts the first in order (and answers with its
/// Finished once the Handshake packet comes), and refuses the second.
#[test]
fn handshake_bytes_out_of_order_are_put_back_and_a_flood_is_refused() {
    let (tls_client, tls_server) = qpslab_quic::pair::tls_configs().unwrap();
    let mut sep = quinn_server(tls_server);
    let name = "localhost".try_into().unwrap();
    let (dcid, scid) = ([7u8; 8], [9u8; 4]);
    let tls_client = Arc::new(tls_client);
    let mut c = qpslab_quic::client::Client::new(tls_client.clone(), name, &dcid, &scid).unwrap();
    let mut buf = Vec::new();
    assert!(c.poll_transmit(&mut buf, Instant::now()));
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
    c.recv(&mut reordered, now);
    let mut more = Vec::new();
    while let Some(t) = conn.poll_transmit(now, 1, &mut more) {
        c.recv(&mut more[..t.size], now);
        more.clear();
    }
    assert_eq!(c.failure(), None);
    let mut kinds = Vec::new();
    while c.poll_transmit(&mut buf, now) {
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
    c.recv(&mut far, Instant::now());
    let failed = format!("{:?}", c.failure());
    assert!(failed.contains("CRYPTO_BUFFER_EXCEEDED"), "{failed}");
    assert!(!c.poll_transmit(&mut buf, Instant::now()), "a failed connection sends nothing more");
}

/// A link that drops every 4th datagram up and every 5th down, the handshake's first Initial
/// among them: the client's probe timeout sends its Initial again, and 150 exchanges and a
/// 300 KB answer all arrive whole and once, what was lost sent again.
#[test]
fn lost_datagrams_are_sent_again_and_everything_arrives_once() {
    let mut rig = Rig::new();
    // The first datagram (the Initial) is dropped: only a probe timeout brings it again.
    let mut lost = Vec::new();
    assert!(rig.client.poll_transmit(&mut lost, rig.now));
    assert!(!rig.client.poll_transmit(&mut lost, rig.now));
    let mut turns = 0;
    while !(rig.connected && rig.client.is_confirmed()) {
        turns += 1;
        assert!(turns < 5_000, "no handshake: {:?}", rig.client.counts);
        if rig.server.is_none() {
            // Nothing from the server yet: only the client's timer moves things.
            rig.now += Duration::from_millis(1);
            let now = rig.now;
            if rig.client.timeout().is_some_and(|t| t <= now) {
                rig.client.handle_timeout(now);
            }
            let (mut buf, mut answer) = (Vec::new(), Vec::new());
            let from = SocketAddr::from(([10, 0, 0, 1], 4433));
            while rig.client.poll_transmit(&mut buf, now) {
                if let Some(DatagramEvent::NewConnection(i)) =
                    rig.sep.handle(now, from, None, None, BytesMut::from(&buf[..]), &mut answer)
                {
                    rig.server = Some(rig.sep.accept(i, now, &mut answer, None).unwrap());
                }
            }
            continue;
        }
        rig.turn();
        rig.events();
    }
    assert!(rig.client.counts.probes >= 1, "{:?}", rig.client.counts);

    rig.drop_up = Some(4);
    rig.drop_down = Some(5);
    let (mut opened, mut answered) = (0, 0);
    for _ in 0..20_000 {
        while opened < 150 {
            let Some(id) = rig.client.streams.open(true) else { break };
            assert!(rig.client.streams.write(id, b"GET", true));
            opened += 1;
        }
        rig.turn();
        rig.serve(b"200");
        rig.turn();
        for (_, body, ended) in rig.read() {
            if ended {
                assert_eq!(body, b"200");
                answered += 1;
            }
        }
        if answered == 150 {
            break;
        }
    }
    assert_eq!((opened, answered), (150, 150), "{:?}", rig.client.counts);
    let id = rig.client.streams.open(true).unwrap();
    rig.client.streams.write(id, b"big", true);
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let sid = quinn_proto::StreamId::new(quinn_proto::Side::Client, quinn_proto::Dir::Bi, id / 4);
    let (mut read, mut ended, mut written) = (Vec::new(), false, 0);
    for _ in 0..20_000 {
        rig.turn();
        for e in rig.events() {
            if let Event::Stream(quinn_proto::StreamEvent::Opened { .. }) = e {
                while rig.conn().streams().accept(quinn_proto::Dir::Bi).is_some() {}
            }
        }
        if written < big.len() {
            written += rig.conn().send_stream(sid).write(&big[written..]).unwrap_or(0);
            if written == big.len() {
                rig.conn().send_stream(sid).finish().unwrap();
            }
        }
        rig.turn();
        for (got, body, end) in rig.read() {
            if got == id {
                read.extend_from_slice(&body);
                ended |= end;
            }
        }
        if ended {
            break;
        }
    }
    assert!(ended && read == big, "{} of {} bytes", read.len(), big.len());
    let server_lost = rig.conn().stats().path.lost_packets;
    let counts = rig.client.counts;
    assert!(rig.client.cc.lost > 0, "our client found its own losses: {counts:?}");
    assert!(server_lost > 0, "and the server its");
}

/// Closing sends one CONNECTION_CLOSE, which the server reads as the application's close
/// with its code and reason; then nothing more goes. A connection the server stops answering
/// ends at the idle timeout (30 s, both sides' default), not before.
#[test]
fn a_close_reaches_the_server_and_silence_ends_at_the_idle_timeout() {
    let mut rig = Rig::connected();
    rig.client.close(true, 0x100, b"bye");
    let mut buf = Vec::new();
    let now = rig.now;
    assert!(rig.client.poll_transmit(&mut buf, now), "the close goes");
    let from = SocketAddr::from(([10, 0, 0, 1], 4433));
    let mut answer = Vec::new();
    match rig.sep.handle(now, from, None, None, BytesMut::from(&buf[..]), &mut answer) {
        Some(DatagramEvent::ConnectionEvent(_, ev)) => rig.conn().handle_event(ev),
        _ => panic!("the close was not the connection's"),
    }
    let lost = std::iter::from_fn(|| rig.conn().poll()).find_map(|e| match e {
        Event::ConnectionLost { reason } => Some(reason),
        _ => None,
    });
    match lost {
        Some(quinn_proto::ConnectionError::ApplicationClosed(a)) => {
            assert_eq!((a.error_code.into_inner(), &a.reason[..]), (0x100, &b"bye"[..]));
        }
        other => panic!("{other:?}"),
    }
    assert!(!rig.client.poll_transmit(&mut buf, now), "nothing after the close");
    assert_eq!(rig.client.failure(), Some(&qpslab_quic::client::Error::Local));

    let mut rig = Rig::connected();
    let last = rig.now;
    let mut fired = 0;
    while rig.client.failure().is_none() {
        let t = rig.client.timeout().expect("a timer while the connection lives");
        assert!(t <= last + Duration::from_secs(30), "{:?}", t - last);
        rig.client.handle_timeout(t);
        while rig.client.poll_transmit(&mut buf, t) {}
        fired += 1;
        assert!(fired < 100, "the timers never end the connection");
    }
    assert_eq!(rig.client.failure(), Some(&qpslab_quic::client::Error::TimedOut));
    assert!(rig.client.timeout().is_none());
}

/// A server that asks for a Retry: the client follows it once (the Initial again, with the
/// token, to the Retry's connection ID, under the keys it makes), the handshake completes
/// (the server's transport parameters naming the Retry's ID are accepted) and a request is
/// answered; the server took the client's address as validated.
#[test]
fn a_retry_is_followed_and_the_handshake_completes() {
    let mut rig = Rig::new();
    rig.retry = true;
    for _ in 0..20 {
        rig.turn();
        if rig.server.is_some() {
            rig.events();
        }
        if rig.connected && rig.client.is_confirmed() {
            break;
        }
    }
    assert!(rig.connected && rig.client.is_confirmed(), "{:?}", rig.client.failure());
    assert_eq!(rig.client.counts.retries, 1);
    let id = rig.client.streams.open(true).unwrap();
    rig.client.streams.write(id, b"GET", true);
    let mut answered = 0;
    for _ in 0..10 {
        rig.turn();
        answered += rig.serve(b"ok");
    }
    assert_eq!(answered, 1);
    assert_eq!(rig.read(), [(id, b"ok".to_vec(), true)]);
}

/// The Retry a quinn-proto server makes for our first Initial, with our client and the
/// datagram it came in.
fn a_retry() -> (qpslab_quic::client::Client, Vec<u8>) {
    let mut rig = Rig::new();
    let mut first = Vec::new();
    assert!(rig.client.poll_transmit(&mut first, rig.now));
    let from = SocketAddr::from(([10, 0, 0, 1], 4433));
    let mut answer = Vec::new();
    let Some(DatagramEvent::NewConnection(i)) =
        rig.sep.handle(rig.now, from, None, None, BytesMut::from(&first[..]), &mut answer)
    else {
        panic!("not a new connection");
    };
    let t = rig.sep.retry(i, &mut answer).unwrap();
    (rig.client, answer[..t.size].to_vec())
}

/// Where the client's next Initial goes, and the token it carries.
fn next_initial(client: &mut qpslab_quic::client::Client) -> (Vec<u8>, Vec<u8>) {
    let mut d = Vec::new();
    // The first flight is lost on purpose: its probe sends it again.
    let later = Instant::now() + Duration::from_secs(2);
    client.handle_timeout(later);
    assert!(client.poll_transmit(&mut d, later));
    let h = packet::parse(&d, 4).unwrap();
    assert_eq!(h.kind, Kind::Initial);
    (h.dcid.to_vec(), h.token.to_vec())
}

/// A Retry whose integrity tag does not check, one with another destination and one with an
/// empty token are dropped; a second Retry after one followed is dropped too.
#[test]
fn a_forged_or_second_retry_is_dropped() {
    let (mut client, retry) = a_retry();
    let mut bad = retry.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    client.recv(&mut bad, Instant::now());
    let mut other = retry.clone();
    other[6] ^= 1; // the first byte of the destination connection ID
    client.recv(&mut other, Instant::now());
    assert_eq!(client.counts.retries, 0);
    assert_eq!(next_initial(&mut client), ([7; 8].to_vec(), Vec::new()));

    let (mut client, retry) = a_retry();
    let h = packet::parse(&retry, 4).unwrap();
    let (to, token) = (h.scid.to_vec(), h.token.to_vec());
    client.recv(&mut retry.clone(), Instant::now());
    assert_eq!(client.counts.retries, 1);
    client.recv(&mut retry.clone(), Instant::now());
    assert_eq!(client.counts.retries, 1, "a second Retry is not followed");
    assert_eq!(next_initial(&mut client), (to, token));
    assert_eq!(client.failure(), None);
}

/// A server that does not speak version 1 answers our Initial with a Version Negotiation:
/// the client fails, naming the versions offered. One that lists version 1 is dropped.
#[test]
fn a_version_negotiation_without_version_1_ends_the_connection() {
    let (tls_client, tls_server) = qpslab_quic::pair::tls_configs().unwrap();
    let crypto =
        quinn_proto::crypto::rustls::QuicServerConfig::try_from(Arc::new(tls_server)).unwrap();
    let server = quinn_proto::ServerConfig::with_crypto(Arc::new(crypto));
    let mut config = EndpointConfig::default();
    config.supported_versions(vec![0xff00_001d]);
    let mut sep = Endpoint::new(Arc::new(config), Some(Arc::new(server)), false, None);
    let name = "localhost".try_into().unwrap();
    let mut client =
        qpslab_quic::client::Client::new(Arc::new(tls_client), name, &[7; 8], &[9; 4]).unwrap();
    let now = Instant::now();
    let mut first = Vec::new();
    assert!(client.poll_transmit(&mut first, now));
    let from = SocketAddr::from(([10, 0, 0, 1], 4433));
    let mut answer = Vec::new();
    let Some(DatagramEvent::Response(t)) =
        sep.handle(now, from, None, None, BytesMut::from(&first[..]), &mut answer)
    else {
        panic!("no Version Negotiation");
    };
    let vn = answer[..t.size].to_vec();
    assert_eq!(packet::parse(&vn, 4).unwrap().kind, Kind::VersionNegotiation);
    // The same packet listing version 1 too: forged or stale, dropped.
    let mut with_v1 = vn.clone();
    with_v1.extend_from_slice(&packet::V1.to_be_bytes());
    client.recv(&mut with_v1, now);
    assert_eq!(client.failure(), None);
    client.recv(&mut vn.clone(), now);
    let Some(qpslab_quic::client::Error::Version(offered)) = client.failure() else {
        panic!("not failed on the version: {:?}", client.failure());
    };
    assert!(offered.contains(&0xff00_001d), "{offered:x?}");
    assert!(!offered.contains(&packet::V1));
}

/// The kinds of the packets coalesced in a datagram of the client's.
fn kinds(mut d: &[u8]) -> Vec<Kind> {
    let mut got = Vec::new();
    while let Ok(h) = packet::parse(d, 4) {
        got.push(h.kind);
        if h.end == 0 || h.end >= d.len() {
            break;
        }
        d = &d[h.end..];
    }
    got
}

/// A client config that sends early data and a quinn-proto server that takes it, and a first
/// connection between them run until the server's session ticket came: the next connection
/// of that config resumes.
fn resumable() -> (Arc<rustls::ClientConfig>, rustls::ServerConfig, Endpoint) {
    let (mut tls_client, mut tls_server) = qpslab_quic::pair::tls_configs().unwrap();
    tls_client.enable_early_data = true;
    tls_server.max_early_data_size = u32::MAX;
    let tls_client = Arc::new(tls_client);
    let mut rig = Rig::with(tls_client.clone(), quinn_server(tls_server.clone()), 7).handshake();
    for _ in 0..5 {
        rig.turn();
    }
    assert!(!rig.client.tried_early(), "a first connection has no session to resume");
    (tls_client, tls_server, rig.sep)
}

/// 0-RTT with a quinn-proto server: a resumed session's request goes in a 0-RTT packet of its
/// first flight (under the limits the server gave the session before), the server reads it
/// from that flight and it is answered once. A server that does not know the session (a new one) refuses the early
/// data: the handshake goes in full, the client's streams start over (the stream opened
/// before is forgotten and its ID given again), and the request sent again is answered.
#[test]
fn a_resumed_session_sends_its_request_in_0rtt_and_a_refusal_starts_the_streams_over() {
    let (tls, _, sep) = resumable();
    // Other connection IDs: the endpoint still holds the first connection.
    let mut rig = Rig::with(tls, sep, 17);
    assert!(rig.client.tried_early());
    let id = rig.client.streams.open(true).expect("a stream before the handshake");
    rig.client.streams.write(id, b"GET", true);
    let (mut d, mut sent) = (Vec::new(), Vec::new());
    while rig.client.poll_transmit(&mut d, rig.now) {
        sent.extend(kinds(&d));
        // Handed to the server as the rig's turn would.
        let from = SocketAddr::from(([10, 0, 0, 1], 4433));
        let mut answer = Vec::new();
        match rig.sep.handle(rig.now, from, None, None, BytesMut::from(&d[..]), &mut answer) {
            Some(DatagramEvent::NewConnection(i)) => {
                rig.server = Some(rig.sep.accept(i, rig.now, &mut answer, None).unwrap());
            }
            Some(DatagramEvent::ConnectionEvent(_, ev)) => rig.conn().handle_event(ev),
            _ => {}
        }
    }
    assert_eq!(sent, [Kind::Initial, Kind::ZeroRtt], "the request in the first flight");
    // The server read it from that flight, before the client's Finished.
    assert_eq!(rig.serve(b"ok"), 1);
    let mut answered = 0;
    for _ in 0..10 {
        rig.turn();
        answered += rig.serve(b"ok");
    }
    assert!(rig.client.early_accepted() && rig.client.is_confirmed());
    assert_eq!(answered, 0, "answered once");
    assert_eq!(rig.read(), [(id, b"ok".to_vec(), true)]);

    // A server that never saw the session.
    let (tls, mut tls_server, _) = resumable();
    tls_server.session_storage = rustls::server::ServerSessionMemoryCache::new(16);
    let mut rig = Rig::with(tls, quinn_server(tls_server), 7);
    assert!(rig.client.tried_early());
    let first = rig.client.streams.open(true).unwrap();
    rig.client.streams.write(first, b"GET", true);
    rig = rig.handshake();
    assert!(!rig.client.early_accepted(), "refused");
    assert!(rig.client.streams.readable().is_empty());
    let again = rig.client.streams.open(true).unwrap();
    assert_eq!(again, first, "the streams started over");
    rig.client.streams.write(again, b"GET", true);
    let mut answered = 0;
    for _ in 0..10 {
        rig.turn();
        answered += rig.serve(b"ok");
    }
    assert_eq!(answered, 1, "the refused request was never read; the one sent again was");
    assert_eq!(rig.read(), [(again, b"ok".to_vec(), true)]);
}

/// A client that closes as soon as the server's first flight is read (as a connection per
/// request does when the answer came with it) sends its Finished before the close: the
/// server completes the handshake and reads the application's close, instead of dropping
/// the 1-RTT close unread and holding the connection to its idle timeout.
#[test]
fn a_close_right_after_the_first_flight_finishes_the_handshake_first() {
    let mut rig = Rig::new();
    rig.turn();
    assert!(rig.client.is_established(), "the server's flight read");
    rig.client.close(true, 0x100, b"done");
    rig.turn();
    let mut got = Vec::new();
    while let Some(e) = rig.conn().poll() {
        got.push(e);
    }
    assert!(got.iter().any(|e| matches!(e, Event::Connected)), "{got:?}");
    let closed = got.iter().any(|e| {
        matches!(e, Event::ConnectionLost {
            reason: quinn_proto::ConnectionError::ApplicationClosed(c)
        } if c.error_code.into_inner() == 0x100)
    });
    assert!(closed, "{got:?}");
}

/// A Retry after a resumed session's 0-RTT request: the request goes again at once, in 0-RTT
/// to the Retry's connection ID (the server dropped the first unread), and is answered in a
/// few round trips, not after a probe timeout.
#[test]
fn a_retry_sends_the_0rtt_request_again_at_once() {
    let (tls, _, sep) = resumable();
    let mut rig = Rig::with(tls, sep, 17);
    rig.retry = true;
    let id = rig.client.streams.open(true).unwrap();
    rig.client.streams.write(id, b"GET", true);
    let mut answered = 0;
    for _ in 0..6 {
        rig.turn();
        if rig.server.is_some() {
            answered += rig.serve(b"ok");
        }
    }
    assert_eq!(rig.client.counts.retries, 1);
    assert_eq!(rig.client.counts.probes, 0, "no probe timeout needed");
    assert_eq!(answered, 1);
    assert_eq!(rig.read(), [(id, b"ok".to_vec(), true)]);
    assert!(rig.client.early_accepted());
}

/// Over a long path (a 50 ms round trip, a 120 kB window) new data leaves in a burst of 10
/// datagrams and then one at a time at 1.25 windows a round trip (400 us apart), not the whole
/// window at once; the client's timer says when the next may go.
#[test]
fn new_data_is_paced_over_a_long_round_trip() {
    let mut rig = Rig::connected();
    // The path MTU probe goes (and is answered) first.
    for _ in 0..5 {
        rig.turn();
    }
    rig.client.rtt.smoothed = Duration::from_millis(50);
    rig.client.cc.window = 120_000;
    let id = rig.client.streams.open(true).unwrap();
    assert!(rig.client.streams.write(id, &[7; 100_000], true));
    let now = rig.now;
    let mut buf = Vec::new();
    let mut burst = 0;
    while rig.client.poll_transmit(&mut buf, now) {
        burst += 1;
    }
    assert_eq!(burst, 10, "a burst, not the window's 100 datagrams");
    let next = rig.client.timeout().unwrap();
    assert!(next > now && next - now <= Duration::from_micros(400), "{:?}", next - now);
    rig.client.handle_timeout(next);
    assert!(rig.client.poll_transmit(&mut buf, next), "one datagram earned");
    assert!(!rig.client.poll_transmit(&mut buf, next), "and only one");
}

/// RFC 9000 section 13.2.1: a 1-RTT packet's acknowledgement waits for a packet of the
/// client's own to carry it, for a second packet, or 25 ms; never longer.
#[test]
fn a_lone_acknowledgement_waits_for_a_second_packet_or_the_delay() {
    let mut rig = Rig::connected();
    // Settle what the handshake left owed.
    for _ in 0..30 {
        rig.turn();
    }
    let server_sends = |rig: &mut Rig, what: &[u8]| {
        let uni = rig.conn().streams().open(quinn_proto::Dir::Uni).unwrap();
        rig.conn().send_stream(uni).write(what).unwrap();
        rig.conn().send_stream(uni).finish().unwrap();
        rig.turn();
    };
    let mut buf = Vec::new();
    let acks = |rig: &Rig| rig.client.counts.acks_out;

    // One packet: nothing goes, the ACK waits for its deadline.
    server_sends(&mut rig, b"one");
    let (before, now) = (acks(&rig), rig.now);
    assert!(!rig.client.poll_transmit(&mut buf, now), "a lone ACK waits");
    let due = rig.client.timeout().unwrap();
    assert!(due > now && due - now <= Duration::from_millis(25), "{:?}", due - now);
    rig.client.handle_timeout(due);
    assert!(rig.client.poll_transmit(&mut buf, due), "due: it goes alone");
    assert_eq!(acks(&rig), before + 1);
    assert!(!rig.client.poll_transmit(&mut buf, due));

    // Two packets: it goes at once.
    rig.now = due;
    server_sends(&mut rig, b"two");
    server_sends(&mut rig, b"three");
    let before = acks(&rig);
    assert!(rig.client.poll_transmit(&mut buf, rig.now), "a second packet: the ACK goes");
    assert_eq!(acks(&rig), before + 1);

    // One packet and a request of the client's: the ACK goes with it.
    server_sends(&mut rig, b"four");
    let before = acks(&rig);
    let id = rig.client.streams.open(true).unwrap();
    assert!(rig.client.streams.write(id, b"GET", true));
    assert!(rig.client.poll_transmit(&mut buf, rig.now), "the request goes");
    assert_eq!(acks(&rig), before + 1, "carrying the ACK");
    assert!(!rig.client.poll_transmit(&mut buf, rig.now), "in one packet");
}

/// Path MTU discovery (RFC 8899): once the handshake is confirmed the client probes for
/// larger datagrams, one padded PING at a time, and sends what the path carries: 1,452 bytes
/// (its ceiling) where everything gets through; where the path drops datagrams over 1,300
/// bytes, a size within 20 bytes under that, found without a congestion event. A large
/// upload then goes in datagrams of that size, every byte arriving.
#[test]
fn the_client_finds_the_largest_datagram_the_path_carries() {
    let mut rig = Rig::connected();
    for _ in 0..50 {
        rig.turn();
    }
    let c = &rig.client;
    assert_eq!(c.mtu(), qpslab_quic::client::MTU_CEILING, "{:?} {:?}", c.counts, c.cc);
    assert_eq!(c.counts.mtu_probes, 1);

    let mut rig = Rig::new();
    rig.max_up = Some(1300);
    let mut rig = rig.handshake();
    for _ in 0..300 {
        rig.turn();
    }
    let mtu = rig.client.mtu();
    assert!((1281..=1300).contains(&mtu), "{mtu} ({} probes)", rig.client.counts.mtu_probes);
    assert_eq!(rig.client.cc.events, 0, "a lost probe is not congestion");
    let got = upload(&mut rig, 200_000, 300);
    assert_eq!(got, 200_000, "the upload, in datagrams the path carries");
    assert_eq!(rig.client.cc.lost, 0, "none too large");
}

/// A path that stops carrying the size found (RFC 8899 section 4.3, a black hole): the
/// client's large datagrams go unanswered, it falls back to 1,200 bytes, finds the new limit,
/// and an upload that began at the old size completes.
#[test]
fn a_path_that_narrows_is_noticed_and_the_upload_completes() {
    let mut rig = Rig::connected();
    for _ in 0..50 {
        rig.turn();
    }
    assert_eq!(rig.client.mtu(), qpslab_quic::client::MTU_CEILING);
    rig.max_up = Some(1300);
    let got = upload(&mut rig, 300_000, 3000);
    let c = &rig.client;
    assert_eq!(got, 300_000, "{:?} mtu {}", c.counts, c.mtu());
    assert!(c.counts.black_holes >= 1, "{:?}", c.counts);
    assert!((1200..=1300).contains(&c.mtu()), "{}", c.mtu());
}

/// Uploads `len` bytes on a new stream, the server reading them, for `turns` turns at most;
/// the bytes the server read.
fn upload(rig: &mut Rig, len: usize, turns: usize) -> usize {
    let id = rig.client.streams.open(true).unwrap();
    assert!(rig.client.streams.write(id, &vec![9u8; len], true));
    let sid = quinn_proto::StreamId::new(quinn_proto::Side::Client, quinn_proto::Dir::Bi, id / 4);
    let mut got = 0;
    for _ in 0..turns {
        rig.turn();
        for e in rig.events() {
            if let Event::Stream(quinn_proto::StreamEvent::Opened { .. }) = e {
                rig.conn().streams().accept(quinn_proto::Dir::Bi).unwrap();
            }
        }
        if let Ok(mut chunks) = rig.conn().recv_stream(sid).read(true) {
            while let Ok(Some(c)) = chunks.next(usize::MAX) {
                got += c.bytes.len();
            }
            let _ = chunks.finalize();
        }
        if got == len {
            break;
        }
    }
    got
}
