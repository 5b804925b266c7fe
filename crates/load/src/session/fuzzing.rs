//! The generator's HTTP/2 connection fed any server bytes, without a socket: a fuzz target's
//! body (`fuzz/fuzz_targets/` calls it; the committed corpus is replayed through it as an
//! ordinary test). Streams are opened as the load opens them (a GET and a POST with a body,
//! so that flow control is exercised), the server's bytes arrive in reads of a size the first
//! byte gives, and what the connection writes is taken as a socket would take it.

use std::time::Instant;

use super::h2::Http2;
use super::{Absorbed, Req};
use crate::template::Ids;
use crate::{LoadConfig, LoadOptions};

/// Streams a connection keeps open.
const STREAMS: usize = 4;

pub fn h2_client(data: &[u8]) {
    let o = LoadOptions {
        urls: vec!["http://127.0.0.1:1/a".into()],
        h2: true,
        streams: STREAMS,
        connections: Some(1),
        method: "POST".into(),
        body: Some(crate::options::Body(vec![b'x'; 70_000])),
        ..LoadOptions::default()
    };
    h2_session(data, &o);
}

/// [`h2_client`] making gRPC calls: streaming ones (four request messages, any number of
/// answers, each counted with its gap), whose answers the connection judges by their
/// messages (prefixes, a 1 KiB limit) and status (headers, trailers, Trailers-Only), keeping
/// the first OK message.
pub fn h2_grpc_client(data: &[u8]) {
    let o = LoadOptions {
        urls: vec!["http://127.0.0.1:1".into()],
        grpc: Some("a.B/C".into()),
        stream_messages: Some(4),
        max_message_size: Some(1024),
        streams: STREAMS,
        connections: Some(1),
        body: Some(crate::options::Body(vec![b'x'; 20_000])),
        ..LoadOptions::default()
    };
    h2_session(data, &o);
}

fn h2_session(data: &[u8], o: &LoadOptions) {
    let Some((&size, input)) = data.split_first() else { return };
    let Ok(cfg) = LoadConfig::from_options(o) else { panic!("the fuzz target's options") };
    let (Some(settings), Some(group)) = (cfg.h2, cfg.groups().first()) else {
        panic!("an HTTP/2 group")
    };
    let mut s = Http2::new(0, settings);
    let (mut ids, mut cursor, mut opened, mut answered) = (Ids::new(0, 1, 0, 1), 0, 0, 0);
    let now = Instant::now();
    let make = |_, target, pos| Req {
        sent_at: now,
        intended: now,
        counted: true,
        warm: false,
        retried: false,
        target,
        pos,
        id: 0,
    };
    for read in input.chunks(usize::from(size) + 1) {
        let room = s.capacity(STREAMS).saturating_sub(s.in_flight());
        s.queue(group, &mut cursor, room, &mut ids, make);
        opened += room;
        let n = s.pending().len();
        s.wrote(n);
        match s.absorb(read, group, false, |_, _| answered += 1) {
            Ok(Absorbed::Keep) => {}
            // The connection ends (a GOAWAY, or an error it names): the load reconnects.
            Ok(Absorbed::Close) | Err(_) => return,
        }
        while s.take_reset().is_some() {
            answered += 1;
        }
        let _ = s.take_message_gaps().count();
        let _ = s.take_first_message();
        assert!(answered <= opened, "{answered} answers to {opened} requests");
        assert!(s.in_flight() <= STREAMS);
    }
    let _ = s.eof();
}

/// Rounds of datagrams and events a step may take before the driver calls it endless.
const SETTLE_ROUNDS: usize = 1_000;

/// The generator's HTTP/3 connection fed a server's bytes over QUIC (in memory: the streams
/// carry them with their flow control, resets and limits, as from a real peer). The bytes
/// are a script of what the server does, each step an operation byte, a length byte and
/// that many bytes of payload ([`pair::steps`]); by the byte's value modulo 8: write the
/// payload on the oldest request stream; finish it; reset it (the payload's first byte the
/// code); open a unidirectional stream and write it (the server's control or QPACK streams,
/// or any); write it on the last unidirectional stream; stop reading the oldest request
/// stream; a datagram of the payload's bytes; let time pass (the length in tens of
/// milliseconds). The client keeps [`STREAMS`] requests (a POST with a body, so that flow
/// control is exercised) open on the connection, as the load does.
///
/// [`pair::steps`]: qpslab_quic::pair::steps
pub fn h3_client(data: &[u8]) {
    let _ = h3_script(data);
}

/// What an HTTP/3 script came to: requests sent, answered (responses and resets), the
/// HTTP/3 error the client closed the connection with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct H3Outcome {
    opened: usize,
    answered: usize,
    error: Option<u64>,
}

fn h3_script(data: &[u8]) -> H3Outcome {
    use qpslab_quic::pair::{self, Act, Pair, Side};
    use quinn_proto::Dir;

    let o = LoadOptions {
        urls: vec!["https://localhost:1/a".into()],
        h3: true,
        streams: STREAMS,
        connections: Some(1),
        method: "POST".into(),
        body: Some(crate::options::Body(vec![b'x'; 70_000])),
        tls: crate::tls::TlsOptions { insecure: true, ..Default::default() },
        ..LoadOptions::default()
    };
    let Ok(cfg) = LoadConfig::from_options(&o) else { panic!("the fuzz target's options") };
    let (Some(h3), Some(group)) = (cfg.h3.as_ref(), cfg.groups().first()) else {
        panic!("an HTTP/3 group")
    };
    let Ok(wires) = crate::quic::wire::wires(group) else { panic!("the request's frames") };
    let (Some((_, server)), Some(wire)) = (pair::configs(), wires.first()) else {
        panic!("the pair's configurations")
    };
    let Some(mut p) = Pair::new(h3.client.clone(), server) else { panic!("a pair") };
    let mut c = H3Client {
        s: super::h3::Http3::new(0),
        connected: false,
        ended: false,
        error: None,
        opened: 0,
        answered: 0,
    };
    let (mut requests, mut uni) = (Vec::new(), None);
    c.settle(&mut p, &wire.bytes, &mut requests);
    for (op, payload) in pair::steps(data) {
        if c.ended {
            break;
        }
        let srv = &mut p.server;
        let oldest = requests.first().copied();
        match op % 8 {
            0 => _ = pair::act(srv, oldest, Act::Write(payload)),
            1 => {
                if pair::act(srv, oldest, Act::Finish) {
                    requests.remove(0);
                }
            }
            2 => {
                if pair::act(srv, oldest, Act::Reset(payload)) {
                    requests.remove(0);
                }
            }
            3 => uni = pair::open(srv, Dir::Uni, payload),
            4 => _ = pair::act(srv, uni, Act::Write(payload)),
            5 => _ = pair::act(srv, oldest, Act::Stop(payload)),
            6 => p.deliver(Side::Client, payload),
            _ => p.advance(std::time::Duration::from_millis(10 * payload.len() as u64)),
        }
        c.settle(&mut p, &wire.bytes, &mut requests);
    }
    H3Outcome { opened: c.opened, answered: c.answered, error: c.error }
}

/// The client's side of the in-memory pair, driven as the QUIC load loop drives a
/// connection, and the server's reads of what it sends.
struct H3Client {
    s: super::h3::Http3,
    connected: bool,
    /// The connection failed or was lost.
    ended: bool,
    /// The HTTP/3 code it closed the connection with.
    error: Option<u64>,
    opened: usize,
    answered: usize,
}

impl H3Client {
    fn settle(
        &mut self,
        p: &mut qpslab_quic::pair::Pair,
        wire: &[u8],
        requests: &mut Vec<quinn_proto::StreamId>,
    ) {
        use qpslab_quic::stack::{Event, Link};
        for _ in 0..SETTLE_ROUNDS {
            let mut moved = p.exchange();
            while let Some(ev) = p.client.poll_event() {
                moved += 1;
                let result = match ev {
                    Event::Connected => {
                        self.connected = true;
                        self.s.connected(&mut p.client)
                    }
                    Event::Lost(_) => {
                        self.ended = true;
                        return;
                    }
                    ev => self.s.stream_event(&mut p.client, ev),
                };
                if let Err(e) = result {
                    Link::close(&mut p.client, p.now, e.code, e.msg.as_bytes());
                    self.ended = true;
                    self.error = Some(e.code);
                    return;
                }
            }
            self.answered += self.s.answered.drain(..).count() + self.s.reset.drain(..).count();
            assert!(self.answered <= self.opened, "{} answers to {}", self.answered, self.opened);
            assert!(self.s.in_flight() <= STREAMS);
            while self.connected && self.s.in_flight() < STREAMS && !self.s.going_away() {
                let now = p.now;
                let req = Req {
                    sent_at: now,
                    intended: now,
                    counted: true,
                    warm: false,
                    retried: false,
                    target: 0,
                    pos: 0,
                    id: 0,
                };
                if !self.s.send(&mut p.client, req, wire) {
                    break;
                }
                self.opened += 1;
                moved += 1;
            }
            moved += qpslab_quic::pair::read_all(&mut p.server, requests).0;
            if moved == 0 {
                return;
            }
        }
        panic!("the connection kept making progress without end");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(op: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![op, payload.len() as u8];
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn a_scripted_server_answers_and_resets_over_quic() {
        // Its control stream and SETTINGS; a 200 with a body on one request, a reset of the
        // next, a 404 without a body on the third.
        let script = [
            step(3, b"\x00\x04\x00"),
            step(0, b"\x01\x03\x00\x00\xd9\x00\x05hello"),
            step(1, b""),
            step(2, b"\x0c"),
            step(0, b"\x01\x03\x00\x00\xdc"),
            step(1, b""),
        ]
        .concat();
        let got = h3_script(&script);
        assert_eq!((got.answered, got.error), (3, None), "{got:?}");
        // Every request answered was replaced: the connection keeps its streams open.
        assert_eq!(got.opened, STREAMS + 3, "{got:?}");
    }

    #[test]
    fn a_scripted_server_that_breaks_http3_is_closed() {
        // DATA before HEADERS.
        let got = h3_script(&step(0, b"\x00\x02ab"));
        assert_eq!(got.error, Some(0x105), "{got:?}");
        // A push stream, which this client never allowed (no MAX_PUSH_ID): H3_ID_ERROR.
        assert_eq!(h3_script(&step(3, b"\x01")).error, Some(0x108));
    }
}
