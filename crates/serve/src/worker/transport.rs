//! The transport under a connection's HTTP session: plain TCP, or TLS over it (a [`Pump`]:
//! rustls' records through plain buffers). Both loops hand it what arrived and take from it
//! what to send; neither asks which transport a connection holds.
//!
//! Input: the epoll loop reads with [`Transport::recv`] (plain: straight into the session's
//! input; TLS: records into the worker's buffer, decrypted into the input); the io_uring loop
//! hands a receive completion's bytes to [`Transport::input`]. Output: the epoll loop sends with
//! [`Transport::send`] (plain: the session's output; TLS: sealed into records a piece at a
//! time, so a large body is never held encrypted at once); the io_uring loop takes one owned
//! buffer at a time with [`Transport::take_output`].

use std::io;
use std::net::TcpStream;
use std::time::Instant;

use qpslab_sys::net;
use qpslab_tls::Pump;

use super::session::Session;
use super::READ_CHUNK;
use crate::bufpool::BufPool;
use crate::config::ServeConfig;

/// A connection's TLS.
type Tls = Pump<rustls::ServerConnection>;

/// Plaintext a worker decrypts into at a time (a record's most), and the records it reads at a
/// time.
pub(super) const PLAIN_CHUNK: usize = 16 * 1024;

/// Plaintext sealed into records at a time: they are sent before more is taken.
const SEAL_CHUNK: usize = 16 * 1024;

/// A connection's transport.
#[derive(Debug, Default)]
pub(super) enum Transport {
    #[default]
    Plain,
    Tls(Box<Tls>),
}

/// The transport failed: TLS refused the peer's records. The alert that tells the peer why is
/// in the output ([`Transport::take_records`]); no close_notify follows it.
#[derive(Debug)]
pub(super) struct Failed;

/// What one read of a connection's input came to.
pub(super) enum Got {
    /// `n` bytes (of plaintext, over TLS) added to the session's input; `drained`: the socket
    /// has no more now.
    Bytes {
        n: usize,
        drained: bool,
    },
    /// Nothing yet; read again (interrupted).
    Again,
    Eof,
    /// Nothing until the next readiness edge.
    Blocked,
    /// The connection is broken (`tls`: its TLS failed, and its alert was sent).
    Failed {
        tls: bool,
    },
}

/// What one send of a connection's output came to.
pub(super) enum Sent {
    /// Everything was sent.
    Done,
    /// The socket takes no more now.
    Blocked,
    /// The turn's budget was spent with output left.
    Budget,
    /// The socket is broken.
    Failed,
}

impl Transport {
    /// A new connection's transport (None: rustls refused to start one).
    pub(super) fn accept(cfg: &ServeConfig) -> Option<Self> {
        match &cfg.tls {
            None => Some(Self::Plain),
            Some(t) => rustls::ServerConnection::new(t.config.clone())
                .ok()
                .map(|conn| Self::Tls(Box::new(Pump::new(conn)))),
        }
    }

    /// The worker's buffers for records read and the plaintext they are decrypted into (empty
    /// when no connection has TLS).
    pub(super) fn buffers(cfg: &ServeConfig) -> (Vec<u8>, Vec<u8>) {
        let len = if cfg.tls.is_some() { PLAIN_CHUNK } else { 0 };
        (vec![0; len], vec![0; len])
    }

    /// Bytes that arrived (a receive completion's): their payload goes to the session's input
    /// (`plain`: the worker's buffer to decrypt into), and the peer's close_notify is its end.
    pub(super) fn input(
        &mut self,
        s: &mut Session,
        data: &[u8],
        plain: &mut [u8],
    ) -> Result<(), Failed> {
        match self {
            Self::Plain => {
                s.inbuf.extend(data);
                Ok(())
            }
            Self::Tls(tls) => {
                let r = tls
                    .received(data, plain, &mut |p| {
                        s.inbuf.extend(p);
                        true
                    })
                    .map_err(|_| Failed)?;
                if r.closed {
                    s.eof = true;
                }
                Ok(())
            }
        }
    }

    /// One read from `sock` into the session's input (its storage taken from `pool` if the
    /// connection was idle); over TLS the records are read into `records` and decrypted
    /// through `plain`. `peer_closed`: the peer shut its side, so a short read is not the end
    /// of what is there.
    pub(super) fn recv(
        &mut self,
        sock: &TcpStream,
        s: &mut Session,
        pool: &mut BufPool,
        (records, plain): (&mut [u8], &mut [u8]),
        peer_closed: bool,
    ) -> Got {
        s.ensure_input(pool);
        let got = match self {
            Self::Plain => {
                let spare = s.inbuf.spare(READ_CHUNK);
                let room = spare.len();
                net::recv(sock, spare).map(|n| {
                    s.inbuf.filled_by(n);
                    (n, n < room)
                })
            }
            Self::Tls(_) => net::recv(sock, records).map(|n| (n, n < records.len())),
        };
        let (n, short) = match got {
            Ok((0, _)) => return Got::Eof,
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Got::Blocked,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Got::Again,
            Err(_) => return Got::Failed { tls: false },
        };
        // A short read drained the socket: the next arrival is a new edge.
        let drained = short && !peer_closed;
        if let Self::Plain = self {
            return Got::Bytes { n, drained };
        }
        let before = s.inbuf.len();
        match self.input(s, &records[..n], plain) {
            // Handshake records leave nothing (their replies go out with the next send).
            Ok(()) => Got::Bytes { n: s.inbuf.len() - before, drained },
            Err(Failed) => {
                let _ = self.send_records(sock);
                Got::Failed { tls: true }
            }
        }
    }

    /// There are records to send (plain: never).
    pub(super) fn wants_write(&self) -> bool {
        match self {
            Self::Plain => false,
            Self::Tls(tls) => tls.wants_write(),
        }
    }

    /// Sends the records waiting; Ok(false) when the socket takes no more now.
    fn send_records(&mut self, sock: &TcpStream) -> io::Result<bool> {
        let Self::Tls(tls) = self else { return Ok(true) };
        loop {
            let out = tls.output();
            if out.is_empty() {
                return Ok(true);
            }
            match net::send(sock, out) {
                Ok(n) => tls.sent(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends the session's output on `sock` until none is left, the socket takes no more, or
    /// `budget` bytes of it were sent.
    pub(super) fn send(
        &mut self,
        sock: &TcpStream,
        s: &mut Session,
        budget: usize,
        now: Instant,
        cfg: &ServeConfig,
    ) -> Sent {
        let mut written = 0;
        loop {
            match self.send_records(sock) {
                Ok(true) => {}
                Ok(false) => return Sent::Blocked,
                Err(_) => return Sent::Failed,
            }
            if written >= budget && s.has_output() {
                return Sent::Budget;
            }
            written += match self {
                Self::Plain => {
                    let out = s.pending();
                    if out.is_empty() {
                        return Sent::Done;
                    }
                    match net::send(sock, out) {
                        Ok(n) => {
                            s.wrote(n, now, cfg);
                            n
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Sent::Blocked,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
                        Err(_) => return Sent::Failed,
                    }
                }
                // Nothing left to seal, and the records before it were sent: done.
                Self::Tls(tls) => match seal(tls, s, SEAL_CHUNK, now, cfg) {
                    0 => return Sent::Done,
                    n => n,
                },
            };
        }
    }

    /// One buffer to send from the session's output (plain: the session's own buffer, with
    /// `spare` in its place; TLS: up to `budget` bytes sealed into records, in `spare`), and
    /// where in it the bytes begin. None: nothing to send.
    pub(super) fn take_output(
        &mut self,
        s: &mut Session,
        spare: &mut Vec<u8>,
        budget: usize,
        now: Instant,
        cfg: &ServeConfig,
    ) -> Option<(Vec<u8>, usize)> {
        match self {
            Self::Plain => s.take_output(spare),
            Self::Tls(tls) => {
                seal(tls, s, budget, now, cfg);
                tls.wants_write().then(|| (tls.take_output(std::mem::take(spare)), 0))
            }
        }
    }

    /// The connection closes in order: TLS queues its close_notify (not mid-handshake, where
    /// there is no session to close). True when there is something to send for it.
    pub(super) fn closing(&mut self) -> bool {
        match self {
            Self::Plain => false,
            Self::Tls(tls) => {
                if !tls.is_handshaking() {
                    tls.close_notify();
                }
                tls.wants_write()
            }
        }
    }

    /// The connection lingers: TLS queues its close_notify, to go before the writing side is
    /// shut. True when there is something to send first.
    pub(super) fn lingering(&mut self) -> bool {
        match self {
            Self::Plain => false,
            Self::Tls(tls) => {
                tls.close_notify();
                true
            }
        }
    }

    /// The records waiting (an alert, a close_notify), in `spare`; the transport is done.
    pub(super) fn take_records(&mut self, spare: Vec<u8>) -> Vec<u8> {
        match self {
            Self::Plain => spare,
            Self::Tls(tls) => tls.take_output(spare),
        }
    }

    /// Sends what is waiting (an alert, a close_notify) as well as the socket takes it now;
    /// best effort, as the connection closes.
    pub(super) fn send_last(&mut self, sock: &TcpStream) {
        let _ = self.send_records(sock);
    }

    /// An idle connection's record buffer goes back to the pool.
    pub(super) fn release_idle(&mut self, pool: &mut BufPool) {
        if let Self::Tls(tls) = self {
            if let Some(out) = tls.take_idle_output() {
                pool.give_output(out);
            }
        }
    }
}

/// Moves the session's pending output into TLS, a piece at a time, until `budget` bytes or
/// none is left; returns how many it moved. The records are then in [`Pump::output`].
fn seal(tls: &mut Tls, s: &mut Session, budget: usize, now: Instant, cfg: &ServeConfig) -> usize {
    let mut moved = 0;
    while moved < budget {
        let out = s.pending();
        if out.is_empty() {
            break;
        }
        let n = tls.write(&out[..out.len().min(SEAL_CHUNK)]);
        if n == 0 {
            break;
        }
        s.wrote(n, now, cfg);
        moved += n;
    }
    moved
}
