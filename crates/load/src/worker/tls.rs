//! https on either loop: each connection's TLS is a [`Pump`] (rustls' records through plain
//! buffers), the transport under the HTTP session. The loop brings the records that arrived
//! (epoll: what `recv` read; io_uring: a receive completion's bytes) to [`Worker::tls_input`],
//! which hands the plaintext to the session; what TLS has to send (handshake messages,
//! encrypted requests, alerts) leaves through [`Worker::send_tls`]: `send` at once on epoll
//! (the rest when the socket is writable), an owned buffer on io_uring, one send at a time.
//! The handshake runs between the TCP connect and the first request.

use std::io;
use std::time::Instant;

use qpslab_sys::net;
use qpslab_tls::Pump;

use super::io::{Io, Request};
use super::{Phase, Worker};
use crate::stats::ErrorClass;
use crate::tls::describe;

/// A connection's TLS.
pub(super) type Tls = Pump<rustls::ClientConnection>;

/// What sending the pending records came to.
enum Sent {
    /// All sent (epoll), or a send is on its way (io_uring).
    Done,
    /// The socket took no more: wait until it is writable (epoll).
    Blocked,
    Failed(io::Error),
}

impl Worker<'_> {
    /// TCP is open: the handshake begins with the client's first flight.
    pub(super) fn start_handshake(&mut self, idx: usize, tls: Tls, now: Instant) {
        let c = &mut self.conns[idx];
        c.tls = Some(Box::new(tls));
        c.phase = Phase::Handshaking;
        c.handshake_at = now;
        self.push_tls(idx, now);
    }

    /// Sends what TLS has to send; a failure fails the connection (a handshake's as `tls`).
    fn push_tls(&mut self, idx: usize, now: Instant) {
        match self.send_tls(idx) {
            Sent::Done | Sent::Blocked => {}
            Sent::Failed(e) if self.conns[idx].phase == Phase::Handshaking => {
                let msg = format!("TLS handshake failure: {}", net::message(&e));
                self.fail_with(idx, ErrorClass::Tls, msg, now);
            }
            Sent::Failed(e) => self.closed_before_response(idx, ErrorClass::Write, &e, now),
        }
    }

    /// Sends the connection's pending records: on epoll as far as the socket takes them
    /// (write interest armed for the rest), on io_uring as one owned buffer unless a send is
    /// on its way.
    fn send_tls(&mut self, idx: usize) -> Sent {
        let uring = matches!(self.io, Io::Uring { .. });
        let c = &mut self.conns[idx];
        let (Some(sock), Some(tls)) = (&c.sock, c.tls.as_mut()) else { return Sent::Done };
        if uring {
            if !c.sending && tls.wants_write() {
                let buf = tls.take_output(std::mem::take(&mut c.spare));
                c.sending = true;
                self.queue_request(Request::SendOwned { idx, buf, from: 0 });
            }
            return Sent::Done;
        }
        loop {
            let out = tls.output();
            if out.is_empty() {
                self.set_interest(idx, false);
                return Sent::Done;
            }
            match net::send(sock, out) {
                Ok(n) => tls.sent(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.set_interest(idx, true);
                    return Sent::Blocked;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Sent::Failed(e),
            }
        }
    }

    /// Writes the pending requests into TLS and sends the records.
    pub(super) fn flush_tls(&mut self, idx: usize) {
        let c = &mut self.conns[idx];
        let Some(tls) = c.tls.as_mut() else { return };
        if c.s.writing() {
            // rustls takes the plaintext whole (encrypted into records it holds).
            let taken = tls.write(c.s.pending(&self.shared.groups[c.s.group()]));
            if taken > 0 {
                self.wrote(idx, taken);
            }
        }
        self.push_tls(idx, Instant::now());
    }

    /// epoll: the socket is writable during the handshake, or with records left to send.
    pub(super) fn tls_writable(&mut self, idx: usize) {
        self.push_tls(idx, Instant::now());
    }

    /// io_uring: a send of records completed; `buf[from..]` was what it carried.
    pub(super) fn tls_sent(&mut self, idx: usize, result: i32, buf: Vec<u8>, from: usize) {
        let now = Instant::now();
        let c = &mut self.conns[idx];
        c.sending = false;
        if result < 0 {
            let e = io::Error::from_raw_os_error(-result);
            return match c.phase {
                Phase::Handshaking => {
                    let msg = format!("TLS handshake failure: {}", net::message(&e));
                    self.fail_with(idx, ErrorClass::Tls, msg, now)
                }
                _ => self.closed_before_response(idx, ErrorClass::Write, &e, now),
            };
        }
        let end = from + result as usize;
        if end < buf.len() {
            // The rest of the records go first, in order.
            c.sending = true;
            return self.queue_request(Request::SendOwned { idx, buf, from: end });
        }
        c.spare = buf;
        c.spare.clear();
        if c.phase == Phase::Open {
            self.flush_tls(idx);
            if !self.conns[idx].s.writing() {
                self.issue(idx, now);
            }
        } else {
            self.push_tls(idx, now);
        }
    }

    /// Records arrived on the connection (`data`; empty: the socket's end): the plaintext
    /// they carry goes to the session, the handshake goes on, and what TLS has to answer is
    /// sent. Returns false when the connection was closed or failed (handled).
    pub(super) fn tls_input(&mut self, idx: usize, data: &[u8]) -> bool {
        let now = Instant::now();
        let Some(mut tls) = self.conns[idx].tls.take() else { return false };
        let gen = self.conns[idx].gen;
        let mut plain = std::mem::take(&mut self.plain);
        if data.is_empty() {
            tls.eof();
        }
        let handshaking = tls.is_handshaking();
        let got = tls.received(data, &mut plain, &mut |p| {
            self.take_bytes(idx, p, Instant::now()) && self.conns[idx].gen == gen
        });
        self.plain = plain;
        if self.conns[idx].gen != gen {
            // Closed above (after a response announcing it: the next connection takes the
            // next request; or failed, already handled).
            self.issue(idx, now);
            return false;
        }
        self.conns[idx].tls = Some(tls);
        match got {
            Err(e) => {
                // The alert rustls queued tells the server why.
                let _ = self.send_tls(idx);
                self.fail_with(idx, ErrorClass::Tls, describe(&e), now);
                false
            }
            Ok(r) if r.closed || data.is_empty() => {
                if handshaking {
                    let msg = "TLS handshake failure: the server closed the connection during \
                               the handshake";
                    self.fail_with(idx, ErrorClass::Tls, msg.into(), now);
                } else {
                    self.on_eof(idx);
                }
                false
            }
            Ok(r) => {
                self.push_tls(idx, now);
                if r.handshake_done && self.conns[idx].gen == gen {
                    self.handshake_done(idx, now);
                }
                self.conns[idx].gen == gen
            }
        }
    }

    /// epoll: reads what the socket has and takes it as records.
    pub(super) fn on_readable_tls(&mut self, idx: usize) {
        let mut buf = std::mem::take(&mut self.buf);
        while let Some(sock) = &self.conns[idx].sock {
            match net::recv(sock, &mut buf) {
                Ok(0) => {
                    self.tls_input(idx, &[]);
                    break;
                }
                Ok(n) => {
                    if !self.tls_input(idx, &buf[..n]) {
                        break;
                    }
                    if n < buf.len() {
                        let now = Instant::now();
                        self.buf = buf;
                        return self.issue(idx, now);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let now = Instant::now();
                    self.buf = buf;
                    return self.issue(idx, now);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.buf = buf;
                    let now = Instant::now();
                    return self.closed_before_response(idx, ErrorClass::Read, &e, now);
                }
            }
        }
        self.buf = buf;
    }
}
