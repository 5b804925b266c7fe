//! A load thread's I/O, on epoll or io_uring: registering a connect, writing a connection's
//! requests, reading its responses, closing it, and waiting for what happens next. Everything
//! a connection does about what it reads or writes is decided in the worker (the same code for
//! both loops); here the bytes move.
//!
//! On epoll a write happens at once (until the socket takes no more, then write interest is
//! armed) and readiness drives reads. On io_uring a connection's requests go as one send at a
//! time from the run's shared request bytes, responses arrive through a multishot receive into
//! the ring's provided buffers, connects and closes are requests too, and everything a turn
//! queued is submitted by the one `io_uring_enter` that also waits for the next completions.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use qpslab_sys::epoll::{self as poll, Epoll};
use qpslab_sys::net;
use qpslab_sys::uring::{Completion, Engine, Failure, Op, RingOptions, Submit, Uring};
use socket2::Socket;

use super::{Phase, Worker, READ_BUF, SEND_DUE_EVERY};
use crate::session::Session;
use crate::stats::ErrorClass;

/// io_uring tokens: connection slot in 22 bits, its generation's low 10 bits above.
const SLOT_BITS: u32 = 22;
const SLOT_MASK: u32 = (1 << SLOT_BITS) - 1;

/// Requests queued by the worker for the ring, submitted after each batch of completions.
#[derive(Debug)]
pub(super) enum Request {
    /// To its group's peer.
    Connect {
        idx: usize,
        fd: i32,
    },
    Send {
        idx: usize,
    },
    /// https: records in a buffer of the connection's own, from `from`.
    SendOwned {
        idx: usize,
        buf: Vec<u8>,
        from: usize,
    },
    Recv {
        idx: usize,
    },
    Close {
        fd: OwnedFd,
        token: u32,
        receiving: bool,
    },
}

/// The thread's event loop.
pub(super) enum Io {
    Epoll {
        epoll: Epoll,
        events: Vec<poll::Event>,
    },
    /// The ring is out of its slot while a turn runs.
    Uring {
        ring: Option<Box<Uring>>,
        queued: Vec<Request>,
    },
}

impl std::fmt::Debug for Io {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Io::Epoll { .. } => "Io::Epoll",
            Io::Uring { .. } => "Io::Uring",
        })
    }
}

impl Io {
    /// The loop of a thread with `conns` connections.
    pub(super) fn new(engine: Engine, conns: usize) -> io::Result<Io> {
        Ok(match engine {
            Engine::Epoll => {
                Io::Epoll { epoll: Epoll::new()?, events: vec![poll::empty_event(); 1024] }
            }
            Engine::Uring => {
                let o = RingOptions {
                    entries: 1024,
                    // A response (or a connect) on every connection may complete in one turn.
                    completions: u32::try_from(conns.saturating_mul(2)).unwrap_or(u32::MAX),
                    buffers: 4096,
                    buffer_size: 16 * 1024,
                    ..RingOptions::default()
                };
                Io::Uring { ring: Some(Box::new(Uring::new(&o)?)), queued: Vec::new() }
            }
        })
    }
}

impl Worker<'_> {
    fn epoll_token(&self, idx: usize) -> u64 {
        (u64::from(self.conns[idx].gen) << 32) | idx as u64
    }

    fn ring_token(&self, idx: usize) -> u32 {
        (self.conns[idx].gen << SLOT_BITS) | (idx as u32 & SLOT_MASK)
    }

    /// The connection a completion is for, if it is still the one its request was made for.
    fn ring_conn(&self, token: u32) -> Option<usize> {
        let idx = (token & SLOT_MASK) as usize;
        let c = self.conns.get(idx)?;
        let gen_bits = (1 << (32 - SLOT_BITS)) - 1;
        (c.sock.is_some() && c.gen & gen_bits == token >> SLOT_BITS).then_some(idx)
    }

    /// Waits up to `timeout` and handles what happened; returns how many events or completions
    /// there were. In open loop due requests go out every few events of a long batch.
    pub(super) fn wait(&mut self, timeout: Duration) -> io::Result<usize> {
        let open = self.pacer.is_open();
        match &mut self.io {
            Io::Epoll { epoll, events } => {
                let mut list = std::mem::take(events);
                let n = epoll.wait_for(&mut list, timeout);
                let n = match n {
                    Ok(n) => n,
                    Err(e) => {
                        self.io_epoll_events(list);
                        return Err(e);
                    }
                };
                for (i, ev) in list[..n].iter().enumerate() {
                    self.dispatch(ev.u64, ev.events);
                    if open && i % SEND_DUE_EVERY == SEND_DUE_EVERY - 1 {
                        // A long batch of responses must not hold back requests falling due.
                        self.send_due(Instant::now());
                    }
                }
                self.io_epoll_events(list);
                Ok(n)
            }
            Io::Uring { ring, .. } => {
                let Some(mut r) = ring.take() else { return Ok(0) };
                // What was queued since the last turn (due sends, a tick's reconnects) goes
                // with this turn's enter, not after its wait: a request due now must not wait
                // for the next completion or timer.
                r.queue(|sub| self.submit_queued(sub));
                let mut n = 0;
                let turned = r.turn(timeout, |c, sub| {
                    n += 1;
                    self.on_completion(c);
                    if open && n % SEND_DUE_EVERY == 0 {
                        self.send_due(Instant::now());
                    }
                    self.submit_queued(sub);
                });
                if let Io::Uring { ring, .. } = &mut self.io {
                    *ring = Some(r);
                }
                turned.map(|()| n)
            }
        }
    }

    /// Before the thread stops: submits what it queued (closes above all: a close left in the
    /// queue would leave its socket open until the process exits).
    pub(super) fn settle(&mut self) {
        let Io::Uring { ring, .. } = &mut self.io else { return };
        let Some(mut r) = ring.take() else { return };
        r.queue(|sub| self.submit_queued(sub));
        let _ = r.turn(Duration::ZERO, |_, _| {});
        if let Io::Uring { ring, .. } = &mut self.io {
            *ring = Some(r);
        }
    }

    fn io_epoll_events(&mut self, list: Vec<poll::Event>) {
        if let Io::Epoll { events, .. } = &mut self.io {
            *events = list;
        }
    }

    /// Submits what the worker queued for the ring.
    fn submit_queued(&mut self, sub: &mut Submit<'_>) {
        let Io::Uring { queued, .. } = &mut self.io else { return };
        if queued.is_empty() {
            return;
        }
        let mut list = std::mem::take(queued);
        for r in list.drain(..) {
            match r {
                Request::Connect { idx, fd } => {
                    let peer = &self.shared.groups[self.conns[idx].s.group()].peer;
                    sub.connect(fd, peer, self.ring_token(idx));
                }
                Request::Recv { idx } => {
                    if let Some(s) = &self.conns[idx].sock {
                        sub.recv_multi(s.as_raw_fd(), self.ring_token(idx));
                    }
                }
                Request::Send { idx } => {
                    let token = self.ring_token(idx);
                    let c = &mut self.conns[idx];
                    let Some(fd) = c.sock.as_ref().map(|s| s.as_raw_fd()) else { continue };
                    match &mut c.s {
                        Session::H1(s) => {
                            let bytes = s.bytes(&self.shared.groups[s.group]);
                            let (from, to) = s.to_write();
                            sub.send_shared(fd, bytes, from, to, token);
                        }
                        // HTTP/2 writes its own frames: the buffer goes with the send.
                        Session::H2(s) => {
                            let (buf, from) = s.take_output(std::mem::take(&mut c.spare));
                            if buf.len() > from {
                                sub.send(fd, buf, from, token);
                            } else {
                                c.spare = buf;
                                c.sending = false;
                            }
                        }
                    }
                }
                Request::SendOwned { idx, buf, from } => {
                    if let Some(s) = &self.conns[idx].sock {
                        sub.send(s.as_raw_fd(), buf, from, self.ring_token(idx));
                    }
                }
                Request::Close { fd, token, receiving } => {
                    if receiving {
                        sub.cancel(Op::Recv, token);
                    }
                    sub.close(fd, token);
                }
            }
        }
        if let Io::Uring { queued, .. } = &mut self.io {
            *queued = list;
        }
    }

    pub(super) fn queue_request(&mut self, r: Request) {
        if let Io::Uring { queued, .. } = &mut self.io {
            queued.push(r);
        }
    }

    /// Connects a new socket to its group's peer (epoll: now; io_uring: queued).
    pub(super) fn start_connect(&mut self, idx: usize, sock: Socket) -> io::Result<Socket> {
        match &self.io {
            Io::Epoll { epoll, .. } => {
                match sock.connect(&self.shared.groups[self.conns[idx].s.group()].peer) {
                    Ok(()) => {}
                    Err(e) if qpslab_sys::net::connect_in_progress(&e) => {}
                    Err(e) => return Err(e),
                }
                epoll.add(sock.as_raw_fd(), self.epoll_token(idx), poll::IN | poll::OUT)?;
            }
            Io::Uring { .. } => {
                let fd = sock.as_raw_fd();
                self.queue_request(Request::Connect { idx, fd });
            }
        }
        Ok(sock)
    }

    /// Closes a connection's socket (its requests stay for the worker to decide on).
    pub(super) fn drop_socket(&mut self, idx: usize) {
        let token = self.ring_token(idx);
        let c = &mut self.conns[idx];
        let Some(sock) = c.sock.take() else { return };
        if matches!(c.phase, Phase::Open | Phase::Handshaking) {
            self.open -= 1;
        }
        let receiving = std::mem::take(&mut c.receiving);
        c.sending = false;
        match &mut self.io {
            // Dropping the socket closes it, which also removes it from the epoll set.
            Io::Epoll { .. } => drop(sock),
            // Closed by the ring after the requests queued before it, so its number is not
            // reused while one of them may still name it.
            Io::Uring { .. } => {
                self.queue_request(Request::Close { fd: OwnedFd::from(sock), token, receiving })
            }
        }
    }

    fn dispatch(&mut self, token: u64, events: u32) {
        let idx = (token & 0xffff_ffff) as usize;
        let gen = (token >> 32) as u32;
        let Some(c) = self.conns.get(idx) else { return };
        if c.gen != gen {
            return;
        }
        match c.phase {
            Phase::Closed => {}
            Phase::Connecting => {
                if events & (poll::OUT | poll::ERR) != 0 {
                    let status = match self.conns[idx].sock.as_ref().map(Socket::take_error) {
                        Some(Ok(None)) | None => Ok(()),
                        Some(Ok(Some(e)) | Err(e)) => Err(e),
                    };
                    self.connected(idx, status);
                }
            }
            Phase::Handshaking => {
                if events & poll::OUT != 0 {
                    self.tls_writable(idx);
                }
                if events & (poll::IN | poll::ERR) != 0 && self.conns[idx].gen == gen {
                    self.on_readable_tls(idx);
                }
            }
            Phase::Open => {
                if events & poll::OUT != 0 {
                    self.flush(idx);
                }
                if events & (poll::IN | poll::ERR) != 0 && self.conns[idx].gen == gen {
                    self.on_readable(idx);
                }
            }
        }
    }

    fn on_completion(&mut self, c: Completion<'_>) {
        let Some(idx) = self.ring_conn(c.token) else { return };
        match c.op {
            Op::Connect => {
                let status = if c.result < 0 {
                    Err(io::Error::from_raw_os_error(-c.result))
                } else {
                    Ok(())
                };
                if self.conns[idx].phase == Phase::Connecting {
                    self.connected(idx, status);
                }
            }
            Op::Recv => {
                if !c.more {
                    self.conns[idx].receiving = false;
                }
                let now = Instant::now();
                let tls = self.conns[idx].tls.is_some();
                match c.failure() {
                    None if tls => {
                        // Records, or (no bytes) the end of the input.
                        if self.tls_input(idx, c.data) {
                            self.issue(idx, now);
                        }
                    }
                    None if c.result > 0 => {
                        if self.take_bytes(idx, c.data, now) {
                            self.issue(idx, now);
                        }
                    }
                    None => self.on_eof(idx),
                    Some(Failure::NoBuffers | Failure::Cancelled | Failure::Retry) => {}
                    Some(Failure::OutOfResources(e) | Failure::Other(e)) => {
                        return self.closed_before_response(idx, ErrorClass::Read, &e, now);
                    }
                }
                self.rearm(idx);
            }
            Op::Send if c.sent.is_some() && self.conns[idx].tls.is_some() => {
                if let Some((buf, from)) = c.sent {
                    self.tls_sent(idx, c.result, buf, from);
                }
            }
            Op::Send if c.sent.is_some() => {
                if let Some((buf, from)) = c.sent {
                    self.h2_sent(idx, c.result, buf, from);
                }
            }
            Op::Send => {
                self.conns[idx].sending = false;
                if c.result < 0 {
                    let e = io::Error::from_raw_os_error(-c.result);
                    return self.closed_before_response(idx, ErrorClass::Write, &e, Instant::now());
                }
                self.wrote(idx, c.result as usize);
                self.flush(idx);
                if !self.conns[idx].s.writing() {
                    self.issue(idx, Instant::now());
                }
            }
            _ => {}
        }
    }

    /// Receives again on a connection whose multishot receive ended by itself.
    fn rearm(&mut self, idx: usize) {
        let c = &mut self.conns[idx];
        if c.sock.is_some() && matches!(c.phase, Phase::Open | Phase::Handshaking) && !c.receiving {
            c.receiving = true;
            self.queue_request(Request::Recv { idx });
        }
    }

    /// A connect finished: on io_uring the multishot receive starts with the connection.
    pub(super) fn opened(&mut self, idx: usize) {
        if matches!(self.io, Io::Uring { .. }) {
            self.rearm(idx);
        }
    }

    /// Arms or disarms write interest (epoll), only when it changes.
    pub(super) fn set_interest(&mut self, idx: usize, out: bool) {
        let token = self.epoll_token(idx);
        let Io::Epoll { epoll, .. } = &self.io else { return };
        let c = &mut self.conns[idx];
        if c.out_armed == out {
            return;
        }
        let Some(sock) = &c.sock else { return };
        let events = if out { poll::IN | poll::OUT } else { poll::IN };
        if epoll.modify(sock.as_raw_fd(), token, events).is_ok() {
            c.out_armed = out;
        }
    }

    /// Writes what is pending of the current batch (epoll: now; io_uring: one send at a time).
    pub(super) fn flush(&mut self, idx: usize) {
        if self.conns[idx].tls.is_some() {
            return self.flush_tls(idx);
        }
        if matches!(self.io, Io::Uring { .. }) {
            let c = &mut self.conns[idx];
            if c.sock.is_some() && !c.sending && c.s.writing() {
                c.sending = true;
                self.queue_request(Request::Send { idx });
            }
            return;
        }
        loop {
            let c = &mut self.conns[idx];
            let Some(sock) = &c.sock else { return };
            if !c.s.writing() {
                return self.set_interest(idx, false);
            }
            let wire = c.s.pending(&self.shared.groups[c.s.group()]);
            match net::send(sock, wire) {
                Ok(n) => self.wrote(idx, n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return self.set_interest(idx, true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let now = Instant::now();
                    return self.closed_before_response(idx, ErrorClass::Write, &e, now);
                }
            }
        }
    }

    /// io_uring, HTTP/2: a send of `buf[from..]` completed.
    fn h2_sent(&mut self, idx: usize, result: i32, buf: Vec<u8>, from: usize) {
        let c = &mut self.conns[idx];
        c.sending = false;
        if result < 0 {
            c.spare = buf;
            let e = io::Error::from_raw_os_error(-result);
            return self.closed_before_response(idx, ErrorClass::Write, &e, Instant::now());
        }
        let n = result as usize;
        if let Session::H2(s) = &mut c.s {
            c.spare = s.sent(buf, from, n);
        }
        if self.measuring {
            self.rec.bytes_written += n as u64;
        }
        self.flush(idx);
        self.issue(idx, Instant::now());
    }

    /// `n` bytes of the current batch went out.
    pub(super) fn wrote(&mut self, idx: usize, n: usize) {
        if self.measuring {
            self.rec.bytes_written += n as u64;
        }
        self.conns[idx].s.wrote(n);
    }

    /// epoll: reads what the socket has.
    fn on_readable(&mut self, idx: usize) {
        if self.conns[idx].tls.is_some() {
            return self.on_readable_tls(idx);
        }
        let mut buf = std::mem::take(&mut self.buf);
        let mut now;
        while let Some(sock) = &self.conns[idx].sock {
            let n = match net::recv(sock, &mut buf) {
                Ok(0) => {
                    self.buf = buf;
                    return self.on_eof(idx);
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    now = Instant::now();
                    self.buf = buf;
                    return self.issue(idx, now);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.buf = buf;
                    let now = Instant::now();
                    return self.closed_before_response(idx, ErrorClass::Read, &e, now);
                }
            };
            now = Instant::now();
            if !self.take_bytes(idx, &buf[..n], now) {
                self.buf = buf;
                return;
            }
            if n < buf.len() || self.conns[idx].sock.is_none() {
                self.buf = buf;
                return self.issue(idx, now);
            }
        }
        self.buf = buf;
    }
}

/// The read buffer of an epoll thread.
pub(super) fn read_buffer(engine: Engine) -> Box<[u8]> {
    match engine {
        Engine::Epoll => vec![0u8; READ_BUF].into_boxed_slice(),
        // Responses arrive in the ring's buffers.
        Engine::Uring => Box::default(),
    }
}
