//! A QUIC client connection as an event loop drives it, whichever QUIC runs it: quinn-proto's
//! ([`Quinn`]) or qpslab's own ([`Own`], [`crate::client::Client`]). The loop hands each
//! datagram to the [`Stack`] (which finds its connection), drives each [`Link`] (its timers,
//! its events, what it has to send) and moves its streams through [`Conn`]; it never asks
//! which QUIC it holds.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use quinn_proto::{
    ClientConfig, Connection, ConnectionError, ConnectionHandle, DatagramEvent, Endpoint,
    EndpointConfig, StreamEvent, VarInt,
};

use crate::client::{self, Client};
use crate::conn::Conn;
use crate::counts::QuicCounts;

/// What a connection has to tell its loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The handshake is done.
    Connected,
    /// The connection is over, and why.
    Lost(Lost),
    /// The peer opened streams ([`Conn::accept`] takes them).
    Opened,
    /// A stream has bytes, its end or a reset to read.
    Readable(u64),
    /// A stream flow control held takes more.
    Writable(u64),
    /// The peer asked this side to stop sending on a stream.
    Stopped(u64),
}

/// Why a connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lost {
    /// This side closed it.
    Local,
    /// The peer closed it: the application's close or the transport's, its code, and the
    /// whole close as text.
    Closed {
        app: bool,
        code: u64,
        text: String,
    },
    /// This side found the peer breaking QUIC or TLS (the transport error code: TLS alerts
    /// are 0x100 and up).
    Broken {
        code: u64,
        text: String,
    },
    /// Nothing came for the idle timeout.
    TimedOut,
    /// The peer's stateless reset.
    Reset,
    Other(String),
}

/// One datagram to send.
#[derive(Debug, Clone, Copy)]
pub struct Transmit {
    pub to: SocketAddr,
    pub size: usize,
    /// Datagrams of this size, one after another (GSO), when there are several.
    pub segment: Option<usize>,
}

/// A client connection as its loop drives it.
pub trait Link: Conn {
    /// The next thing to tell the loop.
    fn poll_event(&mut self) -> Option<Event>;
    /// When [`Link::handle_timeout`] is due.
    fn timeout(&mut self) -> Option<Instant>;
    fn handle_timeout(&mut self, now: Instant);
    /// Whether [`Link::transmit`] appends to a buffer that holds other datagrams already
    /// (so they are written where they are sent from, not copied there).
    const APPENDS: bool = false;
    /// Writes the next datagrams to send (up to `max` of one size) into `buf`: an empty one,
    /// or after what is there when [`Link::APPENDS`]; `size` counts what it wrote.
    fn transmit(&mut self, now: Instant, max: usize, buf: &mut Vec<u8>) -> Option<Transmit>;
    /// Closes with an application error code and reason.
    fn close(&mut self, now: Instant, code: u64, reason: &[u8]);
    /// Closed and nothing left to send or wait for: it can go.
    fn is_drained(&self) -> bool;
    /// A resumed session's early data may go now; the server took it.
    fn has_0rtt(&self) -> bool;
    fn accepted_0rtt(&self) -> bool;
    /// Packets declared lost so far.
    fn lost_packets(&self) -> u64;
    /// Adds its counts (losses, congestion events, ACK frames) to `counts`.
    fn count(&self, counts: &mut QuicCounts);
}

/// Where a datagram went.
#[derive(Debug)]
pub enum Routed<I> {
    /// To connection `handle`'s input.
    To(usize, I),
    /// A stateless answer (`len` bytes in the scratch) to send back.
    Answer(SocketAddr, usize),
    None,
}

/// A client's QUIC: makes connections and finds the connection each datagram is for.
pub trait Stack {
    type Link: Link;
    /// A datagram on its way to its connection.
    type Input;
    /// A connection to `addr` named `name`; its handle and its state.
    fn connect(
        &mut self,
        now: Instant,
        addr: SocketAddr,
        name: &str,
    ) -> Result<(usize, Self::Link), String>;
    /// A datagram from `from` (its bytes in `data`): whose it is.
    fn route(
        &mut self,
        now: Instant,
        from: SocketAddr,
        data: BytesMut,
        scratch: &mut Vec<u8>,
    ) -> Routed<Self::Input>;
    /// Hands a routed datagram to its connection.
    fn deliver(link: &mut Self::Link, input: Self::Input, now: Instant);
    /// What connection `handle` and the stack have to tell each other (quinn-proto's
    /// endpoint events), after the connection acted.
    fn sync(&mut self, handle: usize, link: &mut Self::Link);
    /// Connection `handle` is gone.
    fn forget(&mut self, handle: usize);
    /// Whether a closed loop's turn may sleep before it reads, to take a busy server's
    /// answers in one go (`--linger`): that pays where driving a connection costs little
    /// beside a wake-up (docs/performance.md has both measured).
    const HOLDS_OUT: bool;
}

/// quinn-proto's endpoint and connections.
#[derive(Debug)]
pub struct Quinn {
    endpoint: Endpoint,
    config: ClientConfig,
}

impl Quinn {
    pub fn new(config: ClientConfig) -> Quinn {
        let endpoint = Endpoint::new(Arc::new(EndpointConfig::default()), None, true, None);
        Quinn { endpoint, config }
    }
}

impl Stack for Quinn {
    /// Measured at 1 x 100, 10 x 10 and 100 x 1 against the h3 crate's server: 0.96-1.03x
    /// the CPU per response of not holding out, with p99 latency 20-30% higher.
    const HOLDS_OUT: bool = false;
    type Link = Connection;
    type Input = quinn_proto::ConnectionEvent;

    fn connect(
        &mut self,
        now: Instant,
        addr: SocketAddr,
        name: &str,
    ) -> Result<(usize, Connection), String> {
        match self.endpoint.connect(now, self.config.clone(), addr, name) {
            Ok((h, conn)) => Ok((h.0, conn)),
            Err(quinn_proto::ConnectError::InvalidServerName(n)) => {
                Err(format!("{n:?} is no TLS server name"))
            }
            Err(e) => Err(e.to_string()),
        }
    }

    fn route(
        &mut self,
        now: Instant,
        from: SocketAddr,
        data: BytesMut,
        scratch: &mut Vec<u8>,
    ) -> Routed<Self::Input> {
        match self.endpoint.handle(now, from, None, None, data, scratch) {
            Some(DatagramEvent::ConnectionEvent(h, ev)) => Routed::To(h.0, ev),
            Some(DatagramEvent::Response(t)) => Routed::Answer(t.destination, t.size),
            Some(DatagramEvent::NewConnection(_)) | None => Routed::None,
        }
    }

    fn deliver(link: &mut Connection, input: Self::Input, _now: Instant) {
        link.handle_event(input);
    }

    fn sync(&mut self, handle: usize, link: &mut Connection) {
        while let Some(ev) = link.poll_endpoint_events() {
            if let Some(back) = self.endpoint.handle_event(ConnectionHandle(handle), ev) {
                link.handle_event(back);
            }
        }
    }

    fn forget(&mut self, _handle: usize) {}
}

impl Link for Connection {
    fn poll_event(&mut self) -> Option<Event> {
        loop {
            return Some(match self.poll()? {
                quinn_proto::Event::Connected => Event::Connected,
                quinn_proto::Event::ConnectionLost { reason } => Event::Lost(lost(reason)),
                quinn_proto::Event::Stream(s) => match s {
                    StreamEvent::Opened { .. } => Event::Opened,
                    StreamEvent::Readable { id } => Event::Readable(id.into()),
                    StreamEvent::Writable { id } => Event::Writable(id.into()),
                    StreamEvent::Stopped { id, .. } => Event::Stopped(id.into()),
                    StreamEvent::Finished { .. } | StreamEvent::Available { .. } => continue,
                },
                _ => continue,
            });
        }
    }

    fn timeout(&mut self) -> Option<Instant> {
        self.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        Connection::handle_timeout(self, now);
    }

    fn transmit(&mut self, now: Instant, max: usize, buf: &mut Vec<u8>) -> Option<Transmit> {
        let t = self.poll_transmit(now, max, buf)?;
        Some(Transmit { to: t.destination, size: t.size, segment: t.segment_size })
    }

    fn close(&mut self, now: Instant, code: u64, reason: &[u8]) {
        let code = VarInt::from_u64(code).unwrap_or_default();
        Connection::close(self, now, code, bytes::Bytes::copy_from_slice(reason));
    }

    fn is_drained(&self) -> bool {
        Connection::is_drained(self)
    }

    fn has_0rtt(&self) -> bool {
        Connection::has_0rtt(self)
    }

    fn accepted_0rtt(&self) -> bool {
        Connection::accepted_0rtt(self)
    }

    fn lost_packets(&self) -> u64 {
        self.stats().path.lost_packets
    }

    fn count(&self, counts: &mut QuicCounts) {
        crate::counts::count_connection(counts, self);
    }
}

/// quinn-proto's reason, as [`Lost`].
fn lost(reason: ConnectionError) -> Lost {
    match reason {
        ConnectionError::LocallyClosed => Lost::Local,
        ConnectionError::ConnectionClosed(c) => {
            Lost::Closed { app: false, code: u64::from(c.error_code), text: c.to_string() }
        }
        ConnectionError::ApplicationClosed(a) => Lost::Closed {
            app: true,
            code: a.error_code.into_inner(),
            text: String::from_utf8_lossy(&a.reason).into_owned(),
        },
        ConnectionError::TransportError(e) => {
            Lost::Broken { code: u64::from(e.code), text: e.to_string() }
        }
        ConnectionError::TimedOut => Lost::TimedOut,
        ConnectionError::Reset => Lost::Reset,
        e => Lost::Other(e.to_string()),
    }
}

/// The length of the connection IDs [`Own`] gives its connections: the first 4 bytes are the
/// connection's handle, the rest random.
const CID_LEN: usize = 8;

/// qpslab's own QUIC client connections, found by the connection ID each chose.
#[derive(Debug)]
pub struct Own {
    tls: Arc<rustls::ClientConfig>,
    /// Each handle's connection ID (None: free).
    cids: Vec<Option<[u8; CID_LEN]>>,
    free: Vec<usize>,
}

impl Own {
    /// Connections with `tls` (TLS 1.3, ALPN h3).
    pub fn new(tls: Arc<rustls::ClientConfig>) -> Own {
        Own { tls, cids: Vec::new(), free: Vec::new() }
    }

    fn random(&self, out: &mut [u8]) {
        let _ = self.tls.crypto_provider().secure_random.fill(out);
    }
}

/// An own client connection with what its loop was told.
pub struct OwnLink {
    client: Client,
    to: SocketAddr,
    told_connected: bool,
    told_lost: bool,
    /// Streams found readable, and the next of them to tell.
    readable: Vec<u64>,
    next: usize,
}

impl std::fmt::Debug for OwnLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnLink").field("client", &self.client).finish_non_exhaustive()
    }
}

impl Stack for Own {
    /// Measured as for quinn-proto: 1.21x fewer CPU-seconds per response at 100 x 1 (and the
    /// server 13% faster), the same at 1 x 100 and 10 x 10.
    const HOLDS_OUT: bool = true;
    type Link = OwnLink;
    type Input = BytesMut;

    fn connect(
        &mut self,
        _now: Instant,
        addr: SocketAddr,
        name: &str,
    ) -> Result<(usize, OwnLink), String> {
        let name = rustls::pki_types::ServerName::try_from(name.to_owned())
            .map_err(|_| format!("{name:?} is no TLS server name"))?;
        let h = self.free.pop().unwrap_or(self.cids.len());
        let mut scid = [0u8; CID_LEN];
        self.random(&mut scid);
        scid[..4].copy_from_slice(&(h as u32).to_be_bytes());
        let mut dcid = [0u8; 8];
        self.random(&mut dcid);
        let client = match Client::new(self.tls.clone(), name, &dcid, &scid) {
            Ok(c) => c,
            Err(e) => {
                self.free.push(h);
                return Err(error_text(&e));
            }
        };
        if self.cids.len() <= h {
            self.cids.resize(h + 1, None);
        }
        self.cids[h] = Some(scid);
        let link = OwnLink {
            client,
            to: addr,
            told_connected: false,
            told_lost: false,
            readable: Vec::new(),
            next: 0,
        };
        Ok((h, link))
    }

    fn route(
        &mut self,
        _now: Instant,
        _from: SocketAddr,
        data: BytesMut,
        _scratch: &mut Vec<u8>,
    ) -> Routed<BytesMut> {
        // The destination connection ID: after a long header's version and length byte, or
        // right after a short header's first byte.
        let cid = match data.first() {
            Some(b) if b & 0x80 != 0 => data.get(6..6 + CID_LEN).filter(|_| data[5] == 8),
            Some(_) => data.get(1..1 + CID_LEN),
            None => None,
        };
        let Some(cid) = cid else { return Routed::None };
        let h = u32::from_be_bytes([cid[0], cid[1], cid[2], cid[3]]) as usize;
        match self.cids.get(h) {
            Some(Some(c)) if c[..] == *cid => Routed::To(h, data),
            _ => Routed::None,
        }
    }

    fn deliver(link: &mut OwnLink, mut input: BytesMut, now: Instant) {
        link.client.recv(&mut input, now);
    }

    fn sync(&mut self, _handle: usize, _link: &mut OwnLink) {}

    fn forget(&mut self, handle: usize) {
        if let Some(c) = self.cids.get_mut(handle) {
            if c.take().is_some() {
                self.free.push(handle);
            }
        }
    }
}

impl Conn for OwnLink {
    fn open(&mut self, bidi: bool) -> Option<u64> {
        self.client.open(bidi)
    }

    fn accept(&mut self, bidi: bool) -> Option<u64> {
        self.client.accept(bidi)
    }

    fn write(&mut self, id: u64, data: &[u8]) -> usize {
        self.client.write(id, data)
    }

    fn finish(&mut self, id: u64) -> bool {
        self.client.finish(id)
    }

    fn reset(&mut self, id: u64, code: u64) {
        self.client.reset(id, code);
    }

    fn stop(&mut self, id: u64, code: u64) {
        self.client.stop(id, code);
    }

    fn read<E>(
        &mut self,
        id: u64,
        each: impl FnMut(&[u8]) -> Result<bool, E>,
    ) -> Result<crate::conn::Drained, E> {
        self.client.read(id, each)
    }
}

impl Link for OwnLink {
    fn poll_event(&mut self) -> Option<Event> {
        let c = &mut self.client;
        if !self.told_connected && c.is_established() {
            self.told_connected = true;
            return Some(Event::Connected);
        }
        if let Some(e) = c.failure() {
            if self.told_lost {
                return None;
            }
            self.told_lost = true;
            return Some(Event::Lost(own_lost(e)));
        }
        if c.streams.has_unaccepted() {
            return Some(Event::Opened);
        }
        if self.next == self.readable.len() {
            c.streams.take_readable(&mut self.readable);
            self.next = 0;
        }
        let id = *self.readable.get(self.next)?;
        self.next += 1;
        Some(Event::Readable(id))
    }

    fn timeout(&mut self) -> Option<Instant> {
        self.client.timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.client.handle_timeout(now);
    }

    const APPENDS: bool = true;

    /// A full datagram is followed by as many more as `max` allows while they are full: one
    /// GSO buffer of equal segments, the last of which may be shorter.
    fn transmit(&mut self, now: Instant, max: usize, buf: &mut Vec<u8>) -> Option<Transmit> {
        // A path MTU probe goes alone (a GSO run would cut it into segments).
        let probe = self.client.probe_mtu(buf, now);
        if probe > 0 {
            return Some(Transmit { to: self.to, size: probe, segment: None });
        }
        let first = self.client.append_transmit(buf, now);
        if first == 0 {
            return None;
        }
        let mtu = self.client.mtu();
        let (mut size, mut n, mut last) = (first, 1, first);
        while first == mtu && last == mtu && n < max {
            last = self.client.append_transmit(buf, now);
            if last == 0 {
                break;
            }
            size += last;
            n += 1;
        }
        let segment = (n > 1).then_some(mtu);
        Some(Transmit { to: self.to, size, segment })
    }

    fn close(&mut self, _now: Instant, code: u64, reason: &[u8]) {
        self.client.close(true, code, reason);
    }

    fn is_drained(&self) -> bool {
        self.client.failure().is_some() && !self.client.close_pending()
    }

    fn has_0rtt(&self) -> bool {
        self.client.tried_early()
    }

    fn accepted_0rtt(&self) -> bool {
        self.client.early_accepted()
    }

    fn lost_packets(&self) -> u64 {
        self.client.cc.lost
    }

    fn count(&self, counts: &mut QuicCounts) {
        let c = &self.client;
        counts.lost_packets += c.cc.lost;
        counts.lost_bytes += c.cc.lost_bytes;
        counts.congestion_events += c.cc.events;
        counts.acks_sent += c.counts.acks_out;
        counts.acks_received += c.counts.acks_in;
        counts.datagram_size = counts.datagram_size.max(c.mtu() as u64);
    }
}

/// The own client's error, as [`Lost`].
fn own_lost(e: &client::Error) -> Lost {
    match e {
        client::Error::Local => Lost::Local,
        client::Error::Closed { app, code, reason } => {
            let text = if *app {
                reason.clone()
            } else {
                format!("closed by peer: {code:#x}{}", reason_suffix(reason))
            };
            Lost::Closed { app: *app, code: *code, text }
        }
        client::Error::TimedOut => Lost::TimedOut,
        client::Error::Tls(t) => Lost::Broken { code: 0x100, text: format!("TLS: {t}") },
        client::Error::Protocol(t) => Lost::Broken { code: 0x0a, text: t.clone() },
        client::Error::Version(_) => Lost::Other(error_text(e)),
    }
}

fn reason_suffix(reason: &str) -> String {
    if reason.is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    }
}

fn error_text(e: &client::Error) -> String {
    match e {
        client::Error::Tls(t) | client::Error::Protocol(t) => t.clone(),
        client::Error::Version(offered) => {
            let list: Vec<String> = offered.iter().map(|v| format!("{v:#x}")).collect();
            format!(
                "the server does not speak QUIC version 1 (it offers {})",
                if list.is_empty() { "none".to_string() } else { list.join(", ") }
            )
        }
        e => format!("{e:?}"),
    }
}
