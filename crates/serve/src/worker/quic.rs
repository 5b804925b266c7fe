//! A worker's HTTP/3 listener: one UDP socket per listen address (SO_REUSEPORT, so the
//! kernel keeps each client's datagrams on one worker) and a quinn-proto endpoint over it,
//! driven from the worker's own loop: datagrams read in batches (recvmmsg, GRO), each to its
//! connection, only the connections a datagram or timer concerns driven, and the turn's
//! datagrams of every connection sent together (sendmmsg, GSO). On the io_uring loop the
//! socket is read by a multishot recvmsg into the ring's datagram buffers and the turn's
//! datagrams go as ring requests, in the loop's one system call per turn. Each connection's
//! HTTP/3 is [`H3`].
//!
//! Against abuse: connections beyond `--max-conns` are refused (CONNECTION_REFUSED); while
//! `--h3-retry` handshakes (256 by default) are under way, a client whose address is not yet
//! validated gets a Retry first (a token it must echo: a spoofed flood cannot make the
//! server work); QUIC's own limits hold the rest (three times the bytes received before an
//! address is validated, stream counts, flow-control windows).

use std::io;
use std::net::UdpSocket;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use qpslab_http::h3::frame::code;
use qpslab_quic::peer::ConnError;
use qpslab_quic::udp::{count_connection, QuicCounts, Udp};
use qpslab_sys::uring::{Completion, Op, Submit};
use quinn_proto::{
    Connection, ConnectionError, ConnectionEvent, ConnectionHandle, DatagramEvent, Endpoint,
    EndpointConfig, Event, ServerConfig, VarInt,
};

use super::h3::H3;
use super::Shared;

/// recvmmsg calls per readiness before the connections get their turn.
const RECV_BATCHES: usize = 8;
/// The allocation received datagrams are copied into for quinn-proto.
const RX_ARENA: usize = 256 * 1024;

struct QConn {
    conn: Box<Connection>,
    h3: H3,
    /// In the turn's ready list.
    ready: bool,
    /// When its connection's next timer fires, or a delayed response is due.
    timer: Option<Instant>,
    established: bool,
    /// The connection was lost or closed: it drains, then goes.
    closed: bool,
}

/// A worker's QUIC endpoint on one UDP socket.
pub(crate) struct Quic {
    udp: Udp,
    endpoint: Endpoint,
    /// By connection handle (quinn-proto keeps its handles small and reuses them).
    conns: Vec<Option<QConn>>,
    ready: Vec<usize>,
    rx: BytesMut,
    events: Vec<(ConnectionHandle, ConnectionEvent)>,
    answers: Vec<(std::net::SocketAddr, Vec<u8>)>,
    buf: Vec<u8>,
    /// Connections held, open or handshaking (draining ones apart).
    pub open: usize,
    handshaking: usize,
    draining: bool,
    /// On a ring: this endpoint's tag in its requests' tokens, and what stopped its
    /// receives (the worker stops with it).
    ring: Option<u32>,
    pub failed: Option<io::Error>,
}

impl Quic {
    pub(crate) fn new(sock: UdpSocket, config: Arc<ServerConfig>) -> io::Result<Quic> {
        Ok(Quic {
            udp: Udp::from_socket(sock)?,
            endpoint: Endpoint::new(Arc::new(EndpointConfig::default()), Some(config), true, None),
            conns: Vec::new(),
            ready: Vec::new(),
            rx: BytesMut::with_capacity(RX_ARENA),
            events: Vec::new(),
            answers: Vec::new(),
            buf: Vec::new(),
            open: 0,
            handshaking: 0,
            draining: false,
            ring: None,
            failed: None,
        })
    }

    /// Moves this endpoint onto a ring (made with datagram buffers): its socket's receive is
    /// armed with `tag`, and its sends wait for [`Quic::flush_to`].
    pub(super) fn arm(&mut self, sub: &mut Submit<'_>, tag: u32) {
        self.ring = Some(tag);
        self.udp.arm(sub, tag);
    }

    /// A ring completion of this endpoint's: datagrams received (each to its connection), or
    /// a send done.
    pub(super) fn on_completion(
        &mut self,
        c: &Completion<'_>,
        sub: &mut Submit<'_>,
        sh: &mut Shared<'_>,
        now: Instant,
    ) {
        if c.op == Op::SendTo {
            self.udp.sent(c);
            return;
        }
        let mut events = std::mem::take(&mut self.events);
        let mut incoming = Vec::new();
        let (endpoint, rx, answers) = (&mut self.endpoint, &mut self.rx, &mut self.answers);
        let taken = self.udp.take(c, sub, &mut |from, data| {
            route(endpoint, rx, &mut events, &mut incoming, answers, now, from, data);
        });
        if let Err(e) = taken {
            self.failed.get_or_insert(e);
        }
        self.settle(events, incoming, sh, now);
    }

    /// On a ring: queues the turn's datagrams as its requests.
    pub(super) fn flush_to(&mut self, sub: &mut Submit<'_>) {
        if let Some(tag) = self.ring {
            self.udp.flush_to(sub, tag);
        }
    }

    pub(super) fn fd(&self) -> RawFd {
        self.udp.fd(0)
    }

    /// What the socket and the connections let go so far did.
    pub(super) fn counts(&self) -> QuicCounts {
        self.udp.counts
    }

    /// The earliest timer of any connection.
    pub(super) fn wake(&self) -> Option<Instant> {
        self.conns.iter().flatten().filter_map(|c| c.timer).min()
    }

    /// Reads what the socket holds (a few batches; epoll tells again of what is left), lets
    /// the connections it concerns act, sends their datagrams.
    pub(super) fn readable(&mut self, sh: &mut Shared<'_>, now: Instant) {
        for _ in 0..RECV_BATCHES {
            if !self.receive(sh, now) {
                break;
            }
        }
        self.run(sh, now);
    }

    /// Connections whose timers are due act on them; what is queued goes.
    pub(super) fn run(&mut self, sh: &mut Shared<'_>, now: Instant) {
        for h in 0..self.conns.len() {
            if self.conns[h].as_ref().and_then(|c| c.timer).is_some_and(|t| t <= now) {
                self.mark(h);
            }
        }
        let mut ready = std::mem::take(&mut self.ready);
        for &h in &ready {
            if let Some(c) = self.conns[h].as_mut() {
                c.ready = false;
            }
            self.drive(h, sh, now);
        }
        ready.clear();
        self.ready = ready;
        if self.ring.is_none() {
            self.udp.flush();
        }
    }

    /// The server stops: every connection is told (GOAWAY) and closes once its requests are
    /// answered.
    pub(super) fn drain(&mut self) {
        self.draining = true;
        for h in 0..self.conns.len() {
            if let Some(c) = self.conns[h].as_mut() {
                if c.established && !c.closed && !c.h3.going_away {
                    c.h3.go_away(&mut c.conn);
                }
                self.mark(h);
            }
        }
    }

    /// Closes every connection at once (the drain's time is up) and sends the closes.
    pub(super) fn close_all(&mut self, now: Instant) {
        for c in self.conns.iter_mut().flatten() {
            if !c.closed {
                c.conn.close(now, VarInt::from_u32(code::NO_ERROR as u32), bytes::Bytes::new());
                self.udp.queue(0, &mut *c.conn, now);
            }
        }
        self.udp.flush();
    }

    /// One recvmmsg's datagrams, each to its connection; false when the socket had none.
    fn receive(&mut self, sh: &mut Shared<'_>, now: Instant) -> bool {
        let mut events = std::mem::take(&mut self.events);
        let mut incoming = Vec::new();
        let (endpoint, rx, answers) = (&mut self.endpoint, &mut self.rx, &mut self.answers);
        let more = self.udp.read(0, &mut |from, data| {
            route(endpoint, rx, &mut events, &mut incoming, answers, now, from, data);
        });
        self.settle(events, incoming, sh, now);
        more
    }

    /// Hands the routed datagrams to their connections, takes the new ones in, queues the
    /// stateless answers.
    fn settle(
        &mut self,
        mut events: Vec<(ConnectionHandle, ConnectionEvent)>,
        incoming: Vec<quinn_proto::Incoming>,
        sh: &mut Shared<'_>,
        now: Instant,
    ) {
        for (h, ev) in events.drain(..) {
            if let Some(c) = self.conns.get_mut(h.0).and_then(Option::as_mut) {
                c.conn.handle_event(ev);
                self.mark(h.0);
            }
        }
        self.events = events;
        for i in incoming {
            self.incoming(i, sh, now);
        }
        for (to, data) in self.answers.drain(..) {
            self.udp.scratch().extend_from_slice(&data);
            self.udp.queue_scratch(0, to, data.len());
        }
    }

    /// A client's first packet: refused past the connection cap or while stopping, sent a
    /// Retry under a handshake flood, else accepted.
    fn incoming(&mut self, i: quinn_proto::Incoming, sh: &mut Shared<'_>, now: Instant) {
        self.buf.clear();
        let answer = if self.open >= sh.cfg.settings.max_conns || self.draining {
            Some(self.endpoint.refuse(i, &mut self.buf))
        } else if self.handshaking >= sh.cfg.settings.h3_retry_above
            && !i.remote_address_validated()
        {
            let sent = self.endpoint.retry(i, &mut self.buf).ok();
            self.udp.counts.retries += u64::from(sent.is_some());
            sent
        } else {
            match self.endpoint.accept(i, now, &mut self.buf, None) {
                Ok((h, conn)) => {
                    sh.counters.accepted += 1;
                    self.open += 1;
                    self.handshaking += 1;
                    if self.conns.len() <= h.0 {
                        self.conns.resize_with(h.0 + 1, || None);
                    }
                    self.conns[h.0] = Some(QConn {
                        conn: Box::new(conn),
                        h3: H3::new(),
                        ready: false,
                        timer: Some(now),
                        established: false,
                        closed: false,
                    });
                    self.mark(h.0);
                    None
                }
                Err(e) => e.response,
            }
        };
        if let Some(t) = answer {
            let len = t.size.min(self.buf.len());
            self.udp.scratch().extend_from_slice(&self.buf[..len]);
            self.udp.queue_scratch(0, t.destination, len);
        }
    }

    fn mark(&mut self, h: usize) {
        if let Some(c) = self.conns.get_mut(h).and_then(Option::as_mut) {
            if !c.ready {
                c.ready = true;
                self.ready.push(h);
            }
        }
    }

    /// Lets connection `h` act on what came and on its timers, then queues what it sends.
    fn drive(&mut self, h: usize, sh: &mut Shared<'_>, now: Instant) {
        let Some(mut c) = self.conns[h].take() else { return };
        if c.conn.poll_timeout().is_some_and(|t| t <= now) {
            c.conn.handle_timeout(now);
        }
        while let Some(ev) = c.conn.poll_endpoint_events() {
            if let Some(back) = self.endpoint.handle_event(ConnectionHandle(h), ev) {
                c.conn.handle_event(back);
            }
        }
        if let Err(e) = self.events(&mut c, sh, now) {
            let reason = bytes::Bytes::copy_from_slice(e.msg.as_bytes());
            c.conn.close(now, VarInt::from_u64(e.code).unwrap_or_default(), reason);
            sh.counters.rejected += 1;
            self.lose(&mut c);
        }
        let mut delay = None;
        if c.h3.delayed > 0 {
            delay = c.h3.fire_delays(&mut c.conn, sh, now);
        }
        if !c.closed && c.h3.closing() && c.h3.in_flight() == 0 && c.h3.unacked == 0 {
            c.conn.close(now, VarInt::from_u32(code::NO_ERROR as u32), bytes::Bytes::new());
            self.lose(&mut c);
        }
        self.udp.queue(0, &mut *c.conn, now);
        if c.conn.is_drained() {
            count_connection(&mut self.udp.counts, &c.conn);
            return;
        }
        c.timer = match (c.conn.poll_timeout(), delay) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.conns[h] = Some(c);
    }

    /// Hands connection `c`'s events to its HTTP/3 session.
    fn events(
        &mut self,
        c: &mut QConn,
        sh: &mut Shared<'_>,
        now: Instant,
    ) -> Result<(), ConnError> {
        while let Some(ev) = c.conn.poll() {
            match ev {
                Event::Connected => {
                    c.established = true;
                    self.handshaking -= 1;
                    // A client that closed in the datagram that finished its handshake (a
                    // connection per request answered from its 0-RTT flight) is sent no
                    // control stream: nothing would read it, and it is not a refusal.
                    if c.conn.is_closed() {
                        continue;
                    }
                    c.h3.connected(&mut c.conn)?;
                    if self.draining {
                        c.h3.go_away(&mut c.conn);
                    }
                }
                Event::ConnectionLost { reason } => {
                    match reason {
                        ConnectionError::TimedOut => sh.counters.timeouts += 1,
                        ConnectionError::TransportError(e) if crypto(u64::from(e.code)) => {
                            sh.counters.tls_failures += 1;
                        }
                        ConnectionError::ConnectionClosed(e) if crypto(u64::from(e.error_code)) => {
                            sh.counters.tls_failures += 1;
                        }
                        _ => {}
                    }
                    self.lose(c);
                }
                Event::Stream(ev) => c.h3.stream_event(&mut c.conn, ev, sh, now)?,
                _ => {}
            }
        }
        Ok(())
    }

    /// Connection `c` is over (lost, or closed by this side): it no longer counts as open.
    fn lose(&mut self, c: &mut QConn) {
        if !c.closed {
            c.closed = true;
            self.open -= 1;
            if !c.established {
                self.handshaking -= 1;
            }
        }
    }
}

/// QUIC's codes for a TLS alert (RFC 9001 section 4.8).
fn crypto(c: u64) -> bool {
    (0x100..0x200).contains(&c)
}

/// A datagram from `from`, routed by the endpoint: an event of a connection, a new
/// connection, or a stateless answer.
#[allow(clippy::too_many_arguments, reason = "the endpoint's fields a read borrows apart")]
fn route(
    endpoint: &mut Endpoint,
    rx: &mut BytesMut,
    events: &mut Vec<(ConnectionHandle, ConnectionEvent)>,
    incoming: &mut Vec<quinn_proto::Incoming>,
    answers: &mut Vec<(std::net::SocketAddr, Vec<u8>)>,
    now: Instant,
    from: std::net::SocketAddr,
    data: &[u8],
) {
    let mut scratch = Vec::new();
    if rx.capacity() < data.len() {
        *rx = BytesMut::with_capacity(RX_ARENA);
    }
    rx.extend_from_slice(data);
    let data = rx.split();
    match endpoint.handle(now, from, None, None, data, &mut scratch) {
        Some(DatagramEvent::ConnectionEvent(h, ev)) => events.push((h, ev)),
        Some(DatagramEvent::Response(t)) => {
            scratch.truncate(t.size);
            answers.push((t.destination, scratch));
        }
        Some(DatagramEvent::NewConnection(i)) => incoming.push(i),
        None => {}
    }
}
