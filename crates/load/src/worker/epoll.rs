//! The epoll loop: readiness. A connect starts at once with read and write interest; its
//! writability ends it. A send goes at once, as far as the socket takes it; when it takes
//! nothing, write interest is armed and the send goes when the socket is writable. Reads
//! follow readability into the loop's buffer, where the worker parses them in place.

use std::io;
use std::mem;
use std::os::fd::AsRawFd;
use std::time::Duration;

use qpslab_sys::epoll::{self as poll, Epoll};
use qpslab_sys::net;
use socket2::Socket;

use super::io::{ConnId, Event, Handler, Loop, Op, Out};
use super::READ_BUF;

/// What the loop keeps of a connection.
#[derive(Debug, Default, Clone, Copy)]
struct State {
    /// A connect is under way.
    connecting: bool,
    /// Write interest is armed.
    out: bool,
    /// A send waits for the socket to take more.
    blocked: bool,
}

#[derive(Debug)]
pub(super) struct EpollLoop {
    epoll: Epoll,
    events: Vec<poll::Event>,
    /// Where responses are read to.
    buf: Box<[u8]>,
    conns: Vec<State>,
    /// An owned buffer whose send the socket did not take, by connection (rare: the worker
    /// lends its bytes to this loop).
    held: Vec<Option<(Vec<u8>, usize)>>,
    ops: Vec<Op>,
}

fn token(conn: ConnId) -> u64 {
    (u64::from(conn.gen) << 32) | conn.idx as u64
}

fn conn_of(token: u64) -> ConnId {
    ConnId { idx: (token & 0xffff_ffff) as usize, gen: (token >> 32) as u32 }
}

impl EpollLoop {
    pub(super) fn new(conns: usize) -> io::Result<EpollLoop> {
        Ok(EpollLoop {
            epoll: Epoll::new()?,
            events: vec![poll::empty_event(); 1024],
            buf: vec![0u8; READ_BUF].into_boxed_slice(),
            conns: vec![State::default(); conns],
            held: (0..conns).map(|_| None).collect(),
            ops: Vec::new(),
        })
    }

    /// Carries out the operations queued, and those they lead to, until there are none.
    #[inline]
    fn run_ops<H: Handler>(&mut self, h: &mut H) {
        let mut ops = mem::take(&mut self.ops);
        while h.take_ops(&mut ops) {
            for op in ops.drain(..) {
                self.run(op, h);
            }
        }
        self.ops = ops;
    }

    #[inline]
    fn run<H: Handler>(&mut self, op: Op, h: &mut H) {
        match op {
            Op::Connect(conn) => self.connect(conn, h),
            // Read interest is armed from the connect on.
            Op::Receive(_) => {}
            Op::Send(conn) => self.send(conn, h),
            Op::Close { conn, sock, last } => {
                if !last.is_empty() {
                    let _ = net::send(&sock, &last);
                }
                // Closing the socket also takes it out of the epoll set.
                drop(sock);
                self.conns[conn.idx] = State::default();
                self.held[conn.idx] = None;
            }
        }
    }

    fn connect<H: Handler>(&mut self, conn: ConnId, h: &mut H) {
        let Some(sock) = h.socket(conn) else { return };
        let started = match sock.connect(h.peer(conn)) {
            Ok(()) => Ok(()),
            Err(e) if net::connect_in_progress(&e) => Ok(()),
            Err(e) => Err(e),
        };
        let started = started
            .and_then(|()| self.epoll.add(sock.as_raw_fd(), token(conn), poll::IN | poll::OUT));
        match started {
            Ok(()) => self.conns[conn.idx] = State { connecting: true, out: true, blocked: false },
            Err(e) => h.event(conn, Event::Connected(Err(e))),
        }
    }

    /// Sends what the connection has, as far as the socket takes it.
    fn send<H: Handler>(&mut self, conn: ConnId, h: &mut H) {
        let (sent, back) = {
            let out = match self.held[conn.idx].take() {
                Some((buf, from)) => h.socket(conn).map(|s| (s, Out::Owned(buf, from))),
                None => h.output(conn, true),
            };
            let Some((sock, out)) = out else { return self.interest(conn, h, false) };
            let bytes = match &out {
                Out::Shared(b, from, to) => &b[*from..*to],
                Out::Lent(b) => b,
                Out::Owned(b, from) => &b[*from..],
            };
            let sent = loop {
                match net::send(sock, bytes) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    r => break r,
                }
            };
            (sent, if let Out::Owned(b, from) = out { Some((b, from)) } else { None })
        };
        match sent {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.conns[conn.idx].blocked = true;
                self.held[conn.idx] = back;
                self.interest(conn, h, true);
            }
            sent => {
                if self.conns[conn.idx].out {
                    self.interest(conn, h, false);
                }
                h.event(conn, Event::Sent(sent, back));
            }
        }
    }

    /// Arms or disarms write interest, when it changes.
    fn interest<H: Handler>(&mut self, conn: ConnId, h: &H, out: bool) {
        let st = &mut self.conns[conn.idx];
        if st.out == out {
            return;
        }
        let Some(sock) = h.socket(conn) else { return };
        let events = if out { poll::IN | poll::OUT } else { poll::IN };
        if self.epoll.modify(sock.as_raw_fd(), token(conn), events).is_ok() {
            st.out = out;
        }
    }

    /// The socket of `conn` is ready for `events`.
    fn ready<H: Handler>(&mut self, conn: ConnId, events: u32, h: &mut H) {
        if h.socket(conn).is_none() {
            return;
        }
        let st = self.conns[conn.idx];
        if st.connecting {
            if events & (poll::OUT | poll::ERR) != 0 {
                let status = match h.socket(conn).map(Socket::take_error) {
                    Some(Ok(None)) | None => Ok(()),
                    Some(Ok(Some(e)) | Err(e)) => Err(e),
                };
                self.conns[conn.idx].connecting = false;
                h.event(conn, Event::Connected(status));
                // What the connect let go (the requests waiting for it) goes now; write
                // interest stays only if the socket did not take it all.
                self.run_ops(h);
                if !self.conns[conn.idx].blocked {
                    self.interest(conn, h, false);
                }
            }
            return;
        }
        if events & poll::OUT != 0 {
            if st.blocked {
                self.conns[conn.idx].blocked = false;
                self.send(conn, h);
            } else if st.out {
                self.interest(conn, h, false);
            }
        }
        if events & (poll::IN | poll::ERR) != 0 {
            self.read(conn, h);
        }
    }

    /// Reads what the socket has.
    fn read<H: Handler>(&mut self, conn: ConnId, h: &mut H) {
        loop {
            let got = match h.socket(conn) {
                Some(sock) => net::recv(sock, &mut self.buf),
                None => return,
            };
            match got {
                Ok(0) => return h.event(conn, Event::Eof),
                Ok(n) => {
                    h.event(conn, Event::Data(&self.buf[..n]));
                    if n < self.buf.len() {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return h.event(conn, Event::ReadFailed(e)),
            }
        }
    }
}

impl EpollLoop {
    /// While the server is busy with the pipeline ([`Handler::holds_out`]), a turn does not
    /// wake on the first readiness: what is ready already is taken if it is a batch (the
    /// worker is behind when it is half as many again), otherwise the turn sleeps through its
    /// linger (readiness has no bounded batch wait) and takes what came, every connection's
    /// arrivals in one read. Returns the ready events found (none: wait as usual).
    fn hold_out<H: Handler>(
        &mut self,
        list: &mut [poll::Event],
        timeout: Duration,
        h: &mut H,
    ) -> io::Result<usize> {
        let linger = h.linger().min(timeout);
        let Some(want) = h.holds_out().filter(|_| !linger.is_zero()) else { return Ok(0) };
        h.lingering();
        let n = self.epoll.wait_for(list, Duration::ZERO)?;
        if n >= want + want.div_ceil(2) {
            h.behind();
            return Ok(n);
        }
        std::thread::sleep(linger);
        self.epoll.wait_for(list, Duration::ZERO)
    }
}

impl Loop for EpollLoop {
    fn wait<H: Handler>(&mut self, timeout: Duration, h: &mut H) -> io::Result<usize> {
        self.run_ops(h);
        let mut list = mem::take(&mut self.events);
        let n = self.hold_out(&mut list, timeout, h).and_then(|n| match n {
            0 => self.epoll.wait_for(&mut list, timeout),
            n => Ok(n),
        });
        if let Ok(n) = n {
            for ev in &list[..n] {
                self.ready(conn_of(ev.u64), ev.events, h);
                self.run_ops(h);
            }
        }
        self.events = list;
        n
    }

    fn settle<H: Handler>(&mut self, h: &mut H) {
        self.run_ops(h);
    }
}
