//! The worker's side of the loop interface ([`super::io`]): the operations it queues, the
//! bytes it hands over, and what it does with each event, the same for either loop.

use std::io;
use std::mem;
use std::time::{Duration, Instant};

use socket2::{SockAddr, Socket};

use super::io::{ConnId, Event, Handler, Loop, Op, Out};
use super::transport::Input;
use super::{Phase, Worker, SEND_DUE_EVERY};
use crate::stats::ErrorClass;

/// The most completions one wait of a turn holds out for.
const MAX_BATCH: usize = 8;

impl Worker<'_> {
    pub(super) fn conn_id(&self, idx: usize) -> ConnId {
        ConnId { idx, gen: self.conns[idx].gen }
    }

    /// Waits up to `timeout` and handles what happened; returns how many events or
    /// completions there were.
    pub(super) fn wait(&mut self, timeout: Duration) -> io::Result<usize> {
        let Some(mut io) = self.io.take() else { return Ok(0) };
        self.turn_in_flight = self.outstanding;
        self.turn_answers = 0;
        self.turn_lingered = false;
        self.turn_behind = false;
        self.turn_linger = self.linger.turn();
        if !self.turn_linger.is_zero() {
            self.turn_busy = self.conns.iter().filter(|c| c.s.in_flight() > 0).count();
        }
        let r = io.wait(timeout, self);
        self.io = Some(io);
        self.linger.answered(self.turn_answers);
        if self.turn_lingered {
            self.linger.held(self.turn_in_flight, self.turn_answers, self.turn_behind);
        }
        r
    }

    /// Before the thread stops: what it queued is carried out (closes above all).
    pub(super) fn settle(&mut self) {
        if let Some(mut io) = self.io.take() {
            io.settle(self);
            self.io = Some(io);
        }
    }

    /// Closes a connection's socket (its requests stay for the worker to decide on).
    pub(super) fn drop_socket(&mut self, idx: usize) {
        let conn = self.conn_id(idx);
        let c = &mut self.conns[idx];
        let Some(sock) = c.sock.take() else { return };
        if matches!(c.phase, Phase::Open | Phase::Handshaking) {
            self.open -= 1;
        }
        c.sending = false;
        let last = c.t.closing();
        self.ops.push(Op::Close { conn, sock, last });
    }

    /// Has what is pending of the current batch sent (one send at a time): sealed into TLS
    /// records first where the transport is TLS.
    #[inline]
    pub(super) fn flush(&mut self, idx: usize) {
        let c = &mut self.conns[idx];
        let sealed = c.t.seal(&c.s, &self.shared.groups[c.s.group()]);
        if sealed > 0 {
            self.wrote(idx, sealed);
        }
        self.push(idx);
    }

    /// Has what the transport holds sent, unless a send is under way (its end sends the
    /// rest).
    #[inline]
    pub(super) fn push(&mut self, idx: usize) {
        let c = &mut self.conns[idx];
        if c.sock.is_some() && !c.sending && c.send_error.is_none() && c.t.wants_send(&c.s) {
            c.sending = true;
            self.ops.push(Op::Send(ConnId { idx, gen: c.gen }));
        }
    }

    /// `n` bytes of the current batch went out.
    pub(super) fn wrote(&mut self, idx: usize, n: usize) {
        if self.measuring {
            self.rec.bytes_written += n as u64;
        }
        self.conns[idx].s.wrote(n);
    }

    /// A send ended: `n` bytes went (`buf`: the owned buffer it took them from, and where
    /// it began), or it failed.
    #[inline]
    fn sent(&mut self, idx: usize, sent: io::Result<usize>, buf: Option<(Vec<u8>, usize)>) {
        let c = &mut self.conns[idx];
        c.sending = false;
        let n = match sent {
            Ok(n) => n,
            Err(e) => {
                if let Some((b, _)) = buf {
                    c.spare = b;
                }
                return self.send_failed(idx, e, Instant::now());
            }
        };
        let written = c.t.sent(&mut c.s, n, buf, &mut c.spare);
        if self.measuring {
            self.rec.bytes_written += written as u64;
        }
        if c.phase != Phase::Open {
            // TLS's handshake: its next flight, if it has one.
            return self.push(idx);
        }
        self.flush(idx);
        let c = &self.conns[idx];
        // A response that came while the batch went out freed room for the next (otherwise
        // the response's own turn gave out what there was).
        if !c.s.writing() && c.s.in_flight() < c.s.capacity(self.shared.cfg.pipeline) {
            self.issue(idx, Instant::now());
        }
    }

    /// Bytes arrived (empty: the socket's end): the transport hands the session's to the
    /// parser (decrypted with TLS), and the next requests go.
    #[inline]
    fn data(&mut self, idx: usize, bytes: &[u8]) {
        let now = Instant::now();
        let gen = self.conns[idx].gen;
        let mut t = mem::take(&mut self.conns[idx].t);
        let mut plain = mem::take(&mut self.plain);
        let got = t.input(bytes, &mut plain, &mut |p| {
            self.take_bytes(idx, p, now) && self.conns[idx].gen == gen
        });
        self.plain = plain;
        if self.conns[idx].gen != gen {
            // Closed by what came (after a response announcing it: the next connection takes
            // the next request), or failed; the transport went with the socket.
            return self.issue(idx, now);
        }
        self.conns[idx].t = t;
        match got {
            Input::Open => {
                self.push(idx);
                self.issue(idx, now);
            }
            Input::HandshakeDone => {
                self.push(idx);
                self.handshake_done(idx, now);
                if self.conns[idx].gen == gen {
                    self.issue(idx, now);
                }
            }
            Input::Ended { handshaking: true } => {
                let msg = "TLS handshake failure: the server closed the connection during the \
                           handshake";
                self.fail_with(idx, ErrorClass::Tls, msg.into(), now);
            }
            Input::Ended { handshaking: false } => self.on_eof(idx),
            Input::Failed(msg) => self.fail_with(idx, ErrorClass::Tls, msg, now),
        }
    }

    /// A send failed: during a TLS handshake, the handshake did. When the server's end is
    /// gone (it closed after a response, and the requests pipelined behind it met its reset),
    /// the responses it sent before are still to be read: the connection's end judges them.
    fn send_failed(&mut self, idx: usize, e: io::Error, now: Instant) {
        let c = &mut self.conns[idx];
        if c.phase == Phase::Handshaking {
            let msg = format!("TLS handshake failure: {}", qpslab_sys::net::message(&e));
            self.fail_with(idx, ErrorClass::Tls, msg, now);
        } else if c.phase == Phase::Open && peer_gone(&e) {
            c.send_error = Some(e);
        } else {
            self.closed_before_response(idx, ErrorClass::Write, &e, now);
        }
    }
}

impl Handler for Worker<'_> {
    /// Waiting for more completions pays while the server is busy with the rest of the
    /// pipeline: fewer than half the requests in flight at the turn's start are answered (the
    /// rest keep it busy meanwhile). A wait holds out for a quarter of the requests still
    /// waiting, or half the connections that carry them (a connection's answers come in one
    /// completion however many they are), at most [`MAX_BATCH`]; on a single connection only
    /// the linger's time bounds the wait. Not in an open loop, where a request falling due
    /// must not wait, nor when the turn does not hold out at all
    /// ([`Linger`](super::linger::Linger)).
    fn holds_out(&self) -> Option<usize> {
        let answered = self.turn_answers * 2 >= self.turn_in_flight;
        if self.pacer.is_open() || answered || self.turn_linger.is_zero() {
            return None;
        }
        if self.turn_busy <= 1 {
            return Some(MAX_BATCH);
        }
        let waiting =
            usize::try_from(self.turn_in_flight - self.turn_answers).unwrap_or(usize::MAX);
        Some((waiting / 4).min(self.turn_busy / 2).clamp(1, MAX_BATCH))
    }

    fn linger(&self) -> Duration {
        self.turn_linger
    }

    fn lingering(&mut self) {
        self.turn_lingered = true;
    }

    fn behind(&mut self) {
        self.turn_behind = true;
    }

    #[inline]
    fn take_ops(&mut self, ops: &mut Vec<Op>) -> bool {
        if self.ops.is_empty() {
            return false;
        }
        mem::swap(&mut self.ops, ops);
        true
    }

    fn socket(&self, conn: ConnId) -> Option<&Socket> {
        let c = self.conns.get(conn.idx)?;
        if conn.is(c.gen) {
            c.sock.as_ref()
        } else {
            None
        }
    }

    fn peer(&self, conn: ConnId) -> &SockAddr {
        &self.shared.groups[self.conns[conn.idx].s.group()].peer
    }

    #[inline]
    fn output(&mut self, conn: ConnId, at_once: bool) -> Option<(&Socket, Out<'_>)> {
        let shared = self.shared;
        let c = self.conns.get_mut(conn.idx)?;
        if !conn.is(c.gen) {
            return None;
        }
        let group = &shared.groups[c.s.group()];
        let out = c.t.output(&mut c.s, group, &mut c.spare, at_once);
        match (&c.sock, out) {
            (Some(sock), Some(out)) => Some((sock, out)),
            _ => {
                c.sending = false;
                None
            }
        }
    }

    #[inline(always)]
    fn event(&mut self, conn: ConnId, ev: Event<'_>) {
        let idx = conn.idx;
        match ev {
            Event::Data(bytes) => self.data(idx, bytes),
            Event::Sent(sent, buf) => self.sent(idx, sent, buf),
            Event::Connected(status) => {
                if self.conns[idx].phase == Phase::Connecting {
                    self.connected(idx, status);
                }
            }
            Event::Eof => self.data(idx, &[]),
            Event::ReadFailed(e) => {
                // After a failed send, the reset the read meets is that send's news.
                let (class, e) = match self.conns[idx].send_error.take() {
                    Some(sent) => (ErrorClass::Write, sent),
                    None => (ErrorClass::Read, e),
                };
                self.closed_before_response(idx, class, &e, Instant::now());
            }
        }
        self.events += 1;
        if self.pacer.is_open() && self.events.is_multiple_of(SEND_DUE_EVERY) {
            // A long batch of responses must not hold back requests falling due.
            self.send_due(Instant::now());
        }
    }
}

/// A send's error that says the server's end of the connection is gone, with what it sent
/// before still to be read.
fn peer_gone(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset)
}
