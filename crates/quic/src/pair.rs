//! Two quinn-proto endpoints joined in memory, a client and a server on made-up addresses:
//! one side's HTTP/3 driven by bytes the other side writes, without sockets or clocks. The
//! fuzz targets and their corpus replays use it: QUIC carries the fuzzer's bytes onto real
//! streams (with their flow control, resets and limits) exactly as a peer's would arrive.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use quinn_proto::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn_proto::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Dir, Endpoint, EndpointConfig,
    Event, ServerConfig, StreamEvent, StreamId, VarInt,
};
use rustls::pki_types::PrivateKeyDer;

/// Rounds of datagrams one [`Pair::exchange`] moves at most (a handshake takes a few).
const ROUNDS: usize = 64;

/// A client's and a server's connection, and the endpoints that carry datagrams to them.
#[derive(Debug)]
pub struct Pair {
    pub client: Connection,
    pub server: Connection,
    /// The pair's own clock: it moves only when [`Pair::advance`] says so.
    pub now: Instant,
    ends: [End; 2],
    buf: Vec<u8>,
}

/// One side's endpoint, its connection's handle there and its address.
#[derive(Debug)]
struct End {
    endpoint: Endpoint,
    handle: ConnectionHandle,
    addr: SocketAddr,
}

/// Which side a datagram goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
}

impl Pair {
    /// The client's first flight sent and the server's connection accepted; the handshake
    /// goes on as [`Pair::exchange`] moves datagrams. None when either configuration is
    /// refused.
    pub fn new(client: ClientConfig, server: Arc<ServerConfig>) -> Option<Pair> {
        let now = Instant::now();
        let (caddr, saddr) =
            (SocketAddr::from(([10, 0, 0, 1], 4433)), SocketAddr::from(([10, 0, 0, 2], 443)));
        let config = Arc::new(EndpointConfig::default());
        let mut cep = Endpoint::new(config.clone(), None, false, None);
        let mut sep = Endpoint::new(config, Some(server), false, None);
        let (ch, mut cconn) = cep.connect(now, client, saddr, "localhost").ok()?;
        let mut buf = Vec::new();
        let t = cconn.poll_transmit(now, 1, &mut buf)?;
        let data = BytesMut::from(&buf[..t.size]);
        let mut answer = Vec::new();
        let Some(DatagramEvent::NewConnection(incoming)) =
            sep.handle(now, caddr, None, None, data, &mut answer)
        else {
            return None;
        };
        let (sh, sconn) = sep.accept(incoming, now, &mut answer, None).ok()?;
        Some(Pair {
            client: cconn,
            server: sconn,
            now,
            ends: [
                End { endpoint: cep, handle: ch, addr: caddr },
                End { endpoint: sep, handle: sh, addr: saddr },
            ],
            buf,
        })
    }

    /// Moves the datagrams both sides have ready to the other, round after round, until
    /// neither has any (or [`ROUNDS`] passed); their timers due at `now` fire first. The
    /// number of datagrams moved.
    pub fn exchange(&mut self) -> usize {
        let mut moved = 0;
        for _ in 0..ROUNDS {
            let before = moved;
            for from in [Side::Client, Side::Server] {
                self.fire(from);
                let mut buf = std::mem::take(&mut self.buf);
                loop {
                    buf.clear();
                    let now = self.now;
                    let Some(t) = self.conn(from).poll_transmit(now, 1, &mut buf) else { break };
                    self.deliver(from.other(), &buf[..t.size]);
                    moved += 1;
                }
                self.buf = buf;
            }
            if moved == before {
                break;
            }
        }
        moved
    }

    /// Time passes by `d`: each side's timers that fall due fire (the next
    /// [`Pair::exchange`] sends what they made).
    pub fn advance(&mut self, d: Duration) {
        self.now += d;
        self.fire(Side::Client);
        self.fire(Side::Server);
    }

    /// A datagram of any bytes arrives at `to`, as if from the other side's address.
    pub fn deliver(&mut self, to: Side, data: &[u8]) {
        let from = self.ends[to.other() as usize].addr;
        let (end, conn) = match to {
            Side::Client => (&mut self.ends[0], &mut self.client),
            Side::Server => (&mut self.ends[1], &mut self.server),
        };
        let mut answer = Vec::new();
        let event =
            end.endpoint.handle(self.now, from, None, None, BytesMut::from(data), &mut answer);
        // A stateless answer (a reset, a version negotiation) and a second connection are
        // left out: the pair is one connection.
        if let Some(DatagramEvent::ConnectionEvent(h, ev)) = event {
            if h == end.handle {
                conn.handle_event(ev);
            }
        }
    }

    fn conn(&mut self, side: Side) -> &mut Connection {
        match side {
            Side::Client => &mut self.client,
            Side::Server => &mut self.server,
        }
    }

    /// `side`'s due timers fire and its endpoint takes what its connection tells it.
    fn fire(&mut self, side: Side) {
        let (end, conn) = match side {
            Side::Client => (&mut self.ends[0], &mut self.client),
            Side::Server => (&mut self.ends[1], &mut self.server),
        };
        if conn.poll_timeout().is_some_and(|t| t <= self.now) {
            conn.handle_timeout(self.now);
        }
        while let Some(ev) = conn.poll_endpoint_events() {
            if let Some(back) = end.endpoint.handle_event(end.handle, ev) {
                conn.handle_event(back);
            }
        }
    }
}

impl Side {
    fn other(self) -> Side {
        match self {
            Side::Client => Side::Server,
            Side::Server => Side::Client,
        }
    }
}

/// A made-up certificate for `localhost`: the server's configuration over it (ALPN `h3`,
/// quinn-proto's transport defaults) and a client's that trusts it. Made once per process
/// (a key pair costs more than a fuzz run).
pub fn configs() -> Option<(ClientConfig, Arc<ServerConfig>)> {
    static MADE: std::sync::OnceLock<Option<(ClientConfig, Arc<ServerConfig>)>> =
        std::sync::OnceLock::new();
    MADE.get_or_init(make_configs).clone()
}

fn make_configs() -> Option<(ClientConfig, Arc<ServerConfig>)> {
    let (client, server) = tls_configs()?;
    let server = QuicServerConfig::try_from(Arc::new(server)).ok()?;
    let client = QuicClientConfig::try_from(client).ok()?;
    Some((
        ClientConfig::new(Arc::new(client)),
        Arc::new(ServerConfig::with_crypto(Arc::new(server))),
    ))
}

/// The TLS under [`configs`]: a made-up certificate for `localhost` (TLS 1.3, ALPN `h3`), a
/// client's configuration that trusts it and the server's over it.
pub fn tls_configs() -> Option<(rustls::ClientConfig, rustls::ServerConfig)> {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).ok()?;
    let cert = made.cert.der().clone();
    let key = PrivateKeyDer::try_from(made.key_pair.serialize_der()).ok()?;
    let provider = Arc::new(qpslab_tls::provider());
    let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .ok()?
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .ok()?;
    server.alpn_protocols = vec![b"h3".to_vec()];
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).ok()?;
    let mut client = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .ok()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"h3".to_vec()];
    Some((client, server))
}

/// What a script does to one of a connection's streams.
#[derive(Debug, Clone, Copy)]
pub enum Act<'a> {
    /// Writes the bytes (what flow control does not take now is dropped).
    Write(&'a [u8]),
    Finish,
    /// Resets the stream, the first byte the code.
    Reset(&'a [u8]),
    /// Stops reading it (STOP_SENDING), the first byte the code.
    Stop(&'a [u8]),
}

/// Does `act` to stream `id` of `conn`'s; false when there is no stream to act on.
pub fn act(conn: &mut Connection, id: Option<StreamId>, act: Act<'_>) -> bool {
    let Some(id) = id else { return false };
    let code = |b: &[u8]| VarInt::from(b.first().copied().unwrap_or(0));
    let _ = match act {
        Act::Write(b) => conn.send_stream(id).write(b).map(drop).map_err(drop),
        Act::Finish => conn.send_stream(id).finish().map_err(drop),
        Act::Reset(b) => conn.send_stream(id).reset(code(b)).map_err(drop),
        Act::Stop(b) => conn.recv_stream(id).stop(code(b)).map_err(drop),
    };
    true
}

/// Opens a stream (when the peer's limit allows one) and writes `b` on it.
pub fn open(conn: &mut Connection, dir: Dir, b: &[u8]) -> Option<StreamId> {
    let id = conn.streams().open(dir);
    act(conn, id, Act::Write(b));
    id
}

/// The peer's side of a script, reading as a real peer would: takes the streams the other
/// side opened (the bidirectional ones' ids pushed to `opened`, in order) and reads all that
/// every stream carries, dropping it. The events seen and the bytes read.
pub fn read_all(conn: &mut Connection, opened: &mut Vec<StreamId>) -> (usize, u64) {
    let (mut events, mut bytes) = (0, 0);
    let mut ids = Vec::new();
    while let Some(ev) = conn.poll() {
        events += 1;
        match ev {
            Event::Stream(StreamEvent::Readable { id }) => ids.push(id),
            Event::Stream(StreamEvent::Opened { dir }) => {
                for id in std::iter::from_fn(|| conn.streams().accept(dir)) {
                    if dir == Dir::Bi {
                        opened.push(id);
                    }
                    ids.push(id);
                }
            }
            _ => {}
        }
    }
    for id in ids {
        let _ = crate::conn::Conn::read(conn, u64::from(id), |b| {
            bytes += b.len() as u64;
            Ok::<_, ()>(true)
        });
    }
    (events, bytes)
}

/// A fuzz input read as a script of steps: an operation byte, a length byte, then that many
/// bytes of payload (fewer at the end of the input).
pub fn steps(mut data: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    std::iter::from_fn(move || {
        let (&op, rest) = data.split_first()?;
        let (&len, rest) = rest.split_first().unwrap_or((&0, rest));
        let (payload, rest) = rest.split_at(usize::from(len).min(rest.len()));
        data = rest;
        Some((op, payload))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;

    #[test]
    fn the_pair_shakes_hands_and_carries_a_stream_both_ways() {
        let (client, server) = configs().unwrap();
        let mut p = Pair::new(client, server).unwrap();
        assert!(p.exchange() > 2);
        let connected = |c: &mut Connection| {
            std::iter::from_fn(|| c.poll()).any(|e| matches!(e, Event::Connected))
        };
        assert!(connected(&mut p.client) && connected(&mut p.server));
        let id = p.client.streams().open(Dir::Bi).unwrap();
        p.client.send_stream(id).write(b"ping").unwrap();
        p.client.send_stream(id).finish().unwrap();
        p.exchange();
        assert_eq!(p.server.streams().accept(Dir::Bi), Some(id));
        let mut got = Vec::new();
        let how = crate::conn::Conn::read(&mut p.server, u64::from(id), |b| {
            got.extend_from_slice(b);
            Ok::<_, ()>(true)
        });
        assert_eq!((how, &got[..]), (Ok(crate::conn::Drained::Ended), &b"ping"[..]));
    }

    #[test]
    fn a_script_is_steps_of_an_operation_and_its_bytes() {
        let got: Vec<_> = steps(&[1, 2, b'a', b'b', 7, 5, b'c']).collect();
        assert_eq!(got, [(1, &b"ab"[..]), (7, &b"c"[..])]);
        assert_eq!(steps(&[9]).collect::<Vec<_>>(), [(9, &b""[..])]);
    }
}
