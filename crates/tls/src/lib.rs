//! The TLS transport both sides drive: one connection's rustls state machine with its records
//! moved through plain buffers, so the loop that owns the socket (epoll: `recv` and `send`;
//! io_uring: receive completions and owned send buffers) does every system call, and the
//! HTTP session above sees only plaintext. The same for the generator (a client connection)
//! and the server (a server connection).
//!
//! Records that arrive are given to [`Pump::received`], which hands the plaintext they carry
//! to a callback; plaintext to send is given to [`Pump::write`], and what rustls has to say
//! (handshake messages, alerts, encrypted data) is taken with [`Pump::output`] (borrowed, for
//! a `send` that may take part of it) or [`Pump::take_output`] (owned, for a ring's send).

use std::io::{self, Read, Write};
use std::ops::DerefMut;

use rustls::ConnectionCommon;

/// The crypto both sides build their TLS on: ring, with the key exchanges in a fixed order,
/// X25519 first. rustls sets the order per release (0.23.48 puts P-384 first, which made a QUIC
/// handshake cost 4 times the CPU in `bench/quic-libs`: 528 handshakes a CPU-second against
/// 2,261), and a handshake-rate figure must not move with a dependency update.
pub fn provider() -> rustls::crypto::CryptoProvider {
    use rustls::crypto::ring::kx_group;
    #[allow(
        deprecated,
        reason = "ring builds with a C compiler only; the key exchanges are pinned here"
    )]
    let mut p = rustls::crypto::ring::default_provider();
    p.kx_groups = vec![kx_group::X25519, kx_group::SECP256R1, kx_group::SECP384R1];
    p
}

/// What a batch of received records came to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Received {
    /// The handshake ended with these records.
    pub handshake_done: bool,
    /// The peer closed its side (close_notify, or the records ended without one).
    pub closed: bool,
    /// The plaintext callback asked to stop (the connection was closed above).
    pub stopped: bool,
}

/// One connection's TLS: a rustls connection and the records it has to send.
#[derive(Debug)]
pub struct Pump<C> {
    conn: C,
    out: Vec<u8>,
    sent: usize,
}

impl<C, D> Pump<C>
where
    C: DerefMut<Target = ConnectionCommon<D>>,
{
    /// Wraps a new connection; a client's first flight (its ClientHello) is in the output.
    pub fn new(conn: C) -> Self {
        Pump { conn, out: Vec::new(), sent: 0 }
    }

    /// The rustls connection (the negotiated version, suite, handshake kind).
    pub fn conn(&self) -> &C {
        &self.conn
    }

    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// Takes the records in `data`, and hands each piece of plaintext they carry to `plain`
    /// (which returns false to stop: the connection was closed above), using `buf` for it.
    /// On an error the alert rustls queued for the peer is in the output.
    pub fn received(
        &mut self,
        mut data: &[u8],
        buf: &mut [u8],
        plain: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Received, rustls::Error> {
        let was_handshaking = self.conn.is_handshaking();
        let mut r = Received::default();
        while !data.is_empty() {
            // Reading from a slice cannot fail; rustls takes at most what its buffer holds.
            let n = self.conn.read_tls(&mut data).unwrap_or(0);
            let state = self.conn.process_new_packets()?;
            r.closed |= state.peer_has_closed();
            if !self.drain_plaintext(buf, plain, &mut r) {
                return Ok(r);
            }
            if n == 0 {
                break;
            }
        }
        r.handshake_done = was_handshaking && !self.conn.is_handshaking();
        Ok(r)
    }

    /// Hands the plaintext rustls decrypted to `plain`; false when it asked to stop.
    fn drain_plaintext(
        &mut self,
        buf: &mut [u8],
        plain: &mut dyn FnMut(&[u8]) -> bool,
        r: &mut Received,
    ) -> bool {
        loop {
            match self.conn.reader().read(buf) {
                Ok(0) => {
                    r.closed = true;
                    return true;
                }
                Ok(n) => {
                    if !plain(&buf[..n]) {
                        r.stopped = true;
                        return false;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                // The records ended without close_notify: an end of input as plain HTTP
                // has it.
                Err(_) => {
                    r.closed = true;
                    return true;
                }
            }
        }
    }

    /// The peer's input ended (the socket's EOF) without a close_notify in the records.
    pub fn eof(&mut self) {
        let mut none: &[u8] = &[];
        let _ = self.conn.read_tls(&mut none);
    }

    /// Encrypts `plain` (rustls takes it whole, into records it holds); returns how much was
    /// taken.
    pub fn write(&mut self, plain: &[u8]) -> usize {
        self.conn.writer().write(plain).unwrap_or(0)
    }

    /// Says goodbye to the peer (close_notify), into the output.
    pub fn close_notify(&mut self) {
        self.conn.send_close_notify();
    }

    /// What there is to send: the records rustls has, after any not yet sent.
    pub fn output(&mut self) -> &[u8] {
        while self.conn.wants_write() {
            if self.conn.write_tls(&mut self.out).is_err() {
                break;
            }
        }
        &self.out[self.sent..]
    }

    /// There is something to send.
    pub fn wants_write(&self) -> bool {
        self.sent < self.out.len() || self.conn.wants_write()
    }

    /// `n` bytes of [`Pump::output`] were sent.
    pub fn sent(&mut self, n: usize) {
        self.sent += n;
        if self.sent >= self.out.len() {
            self.out.clear();
            self.sent = 0;
        }
    }

    /// The output buffer, when everything in it was sent (an idle connection gives it back
    /// to its owner's pool; the next output takes a new one); None while records wait.
    pub fn take_idle_output(&mut self) -> Option<Vec<u8>> {
        (!self.wants_write() && self.out.capacity() > 0).then(|| std::mem::take(&mut self.out))
    }

    /// What there is to send, as a buffer of its own (for a send that holds it until it
    /// completes); `spare` (a buffer back from an earlier send) takes the output's place.
    pub fn take_output(&mut self, spare: Vec<u8>) -> Vec<u8> {
        self.output();
        let mut out = std::mem::replace(&mut self.out, spare);
        self.out.clear();
        if self.sent > 0 {
            out.drain(..self.sent);
            self.sent = 0;
        }
        out
    }
}

#[cfg(test)]
#[path = "../tests/common/mod.rs"]
mod common;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;
    use rustls::pki_types::ServerName;
    use rustls::{ClientConnection, ServerConnection};

    fn pair() -> (Pump<ClientConnection>, Pump<ServerConnection>) {
        let (client, server) = crate::common::configs(provider());
        let name = ServerName::try_from("localhost").unwrap();
        (
            Pump::new(ClientConnection::new(client, name).unwrap()),
            Pump::new(ServerConnection::new(server).unwrap()),
        )
    }

    /// Moves `from`'s output into `to`, a byte at a time or whole; returns the plaintext `to`
    /// got and what the records came to.
    fn deliver<A, B, DA, DB>(
        from: &mut Pump<A>,
        to: &mut Pump<B>,
        piecemeal: bool,
    ) -> (Vec<u8>, Received)
    where
        A: DerefMut<Target = ConnectionCommon<DA>>,
        B: DerefMut<Target = ConnectionCommon<DB>>,
    {
        let bytes = from.take_output(Vec::new());
        let (mut got, mut all) = (Vec::new(), Received::default());
        let mut buf = [0u8; 64];
        let chunks: Vec<&[u8]> = if piecemeal { bytes.chunks(1).collect() } else { vec![&bytes] };
        for c in chunks {
            let r = to.received(c, &mut buf, &mut |p| {
                got.extend_from_slice(p);
                true
            });
            let r = r.unwrap();
            all.handshake_done |= r.handshake_done;
            all.closed |= r.closed;
        }
        (got, all)
    }

    /// Sockets nowhere: a handshake, data both ways (records split a byte at a time), and a
    /// close, all through plain buffers.
    #[test]
    fn a_handshake_data_and_a_close_through_buffers() {
        let (mut c, mut s) = pair();
        assert!(c.wants_write(), "the ClientHello is waiting");
        let mut rounds = 0;
        while c.is_handshaking() || s.is_handshaking() {
            deliver(&mut c, &mut s, rounds == 0);
            deliver(&mut s, &mut c, false);
            rounds += 1;
            assert!(rounds < 5);
        }
        assert_eq!(c.write(b"GET / HTTP/1.1\r\n\r\n"), 18);
        let (got, _) = deliver(&mut c, &mut s, true);
        assert_eq!(got, b"GET / HTTP/1.1\r\n\r\n");
        let long = vec![b'x'; 200];
        s.write(&long);
        let (got, _) = deliver(&mut s, &mut c, false);
        assert_eq!(got, long, "more than the plaintext buffer, in pieces");
        // A partial send keeps the rest for the next.
        s.write(b"abc");
        let n = s.output().len();
        s.sent(n - 2);
        assert_eq!(s.output().len(), 2);
        assert!(s.take_idle_output().is_none(), "records still wait");
        s.sent(2);
        assert!(!s.wants_write());
        assert!(s.take_idle_output().is_some_and(|b| b.capacity() >= n), "all sent: it goes");
        assert!(s.take_idle_output().is_none(), "nothing held any more");
        s.write(b"def");
        let n = s.output().len();
        assert!(n > 0, "the next output takes a new buffer");
        s.sent(n);
        c.close_notify();
        let (_, r) = deliver(&mut c, &mut s, false);
        assert!(r.closed);
    }

    #[test]
    fn the_key_exchange_is_x25519_whatever_rustls_puts_first() {
        let (mut c, mut s) = pair();
        deliver(&mut c, &mut s, true);
        deliver(&mut s, &mut c, true);
        let group = |g: Option<&'static dyn rustls::crypto::SupportedKxGroup>| g.map(|g| g.name());
        assert_eq!(
            group(c.conn().negotiated_key_exchange_group()),
            Some(rustls::NamedGroup::X25519)
        );
        assert_eq!(
            group(s.conn().negotiated_key_exchange_group()),
            Some(rustls::NamedGroup::X25519)
        );
    }

    #[test]
    fn garbage_is_an_error_with_an_alert_to_send() {
        let (_, mut s) = pair();
        let mut buf = [0u8; 64];
        let e = s.received(b"GET / HTTP/1.1\r\n\r\n", &mut buf, &mut |_| true).unwrap_err();
        assert!(matches!(e, rustls::Error::InvalidMessage(_)), "{e:?}");
        assert!(!s.output().is_empty(), "the alert");
    }
}
