//! https on either loop: each connection's TLS is a [`Pump`] (rustls' records through plain
//! buffers), the transport under the HTTP session. Records that arrive (a loop's
//! [`super::io::Event::Data`]) go to [`Worker::tls_input`], which hands the plaintext to the
//! session; what TLS has to send (handshake messages, encrypted requests) leaves through the
//! loop's sends like any connection's bytes ([`super::io::Handler::output`] takes them from
//! the pump), and an alert telling the server why the client gave up goes as the socket
//! closes. The handshake runs between the TCP connect and the first request.

use std::time::Instant;

use qpslab_tls::Pump;

use super::io::Op;
use super::{Phase, Worker};
use crate::stats::ErrorClass;
use crate::tls::describe;

/// A connection's TLS.
pub(super) type Tls = Pump<rustls::ClientConnection>;

impl Worker<'_> {
    /// TCP is open: the handshake begins with the client's first flight.
    pub(super) fn start_handshake(&mut self, idx: usize, tls: Tls, now: Instant) {
        let c = &mut self.conns[idx];
        c.tls = Some(Box::new(tls));
        c.phase = Phase::Handshaking;
        c.handshake_at = now;
        self.push_tls(idx);
    }

    /// Has what TLS holds sent, unless a send is under way (its end sends the rest).
    fn push_tls(&mut self, idx: usize) {
        let conn = self.conn_id(idx);
        let c = &mut self.conns[idx];
        let wants = c.unsent.is_some() || c.tls.as_ref().is_some_and(|t| t.wants_write());
        if c.sock.is_some() && !c.sending && wants {
            c.sending = true;
            self.ops.push(Op::Send(conn));
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
        self.push_tls(idx);
    }

    /// A send of records ended with `n` bytes sent (`buf`: the owned buffer they were in,
    /// and where the send began).
    pub(super) fn tls_sent(
        &mut self,
        idx: usize,
        n: usize,
        buf: Option<(Vec<u8>, usize)>,
        now: Instant,
    ) {
        let c = &mut self.conns[idx];
        match (buf, c.tls.as_mut()) {
            (Some((buf, from)), _) if from + n < buf.len() => {
                // The rest of the records go first, in order.
                c.unsent = Some((buf, from + n));
            }
            (Some((buf, _)), _) => {
                c.spare = buf;
                c.spare.clear();
            }
            (None, Some(tls)) => tls.sent(n),
            (None, None) => {}
        }
        if c.phase == Phase::Open {
            self.flush_tls(idx);
            if !self.conns[idx].s.writing() {
                self.issue(idx, now);
            }
        } else {
            self.push_tls(idx);
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
                // The alert rustls queued tells the server why, as the socket closes.
                let c = &mut self.conns[idx];
                if let Some(tls) = c.tls.as_mut().filter(|t| t.wants_write()) {
                    c.last_words = tls.take_output(std::mem::take(&mut c.last_words));
                }
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
                self.push_tls(idx);
                if r.handshake_done && self.conns[idx].gen == gen {
                    self.handshake_done(idx, now);
                }
                self.conns[idx].gen == gen
            }
        }
    }
}
