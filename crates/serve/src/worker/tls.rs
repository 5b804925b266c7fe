//! HTTPS on either loop: each connection's TLS is a [`Pump`] (rustls' records through plain
//! buffers), the transport under the HTTP session. The loop hands the records that arrived
//! (epoll: what `recv` read; io_uring: a receive completion's bytes) to [`take_records`],
//! which puts the plaintext into the session's input; the session's output is sealed into
//! records by [`seal`], and the loop sends them (epoll: `send` at once, the rest when the
//! socket is writable; io_uring: one owned buffer at a time).

use std::time::Instant;

use qpslab_tls::{Pump, Received};

use super::session::Session;
use crate::config::ServeConfig;

/// A connection's TLS.
pub(super) type Tls = Pump<rustls::ServerConnection>;

/// Plaintext a worker decrypts into at a time (a record's most).
pub(super) const PLAIN_CHUNK: usize = 16 * 1024;

/// Plaintext sealed into records at a time: they are sent before more is taken, so a large
/// body is never held encrypted in memory at once.
pub(super) const SEAL_CHUNK: usize = 16 * 1024;

/// A new connection's TLS (None: rustls refused to start one).
pub(super) fn accept(cfg: &ServeConfig) -> Option<Option<Box<Tls>>> {
    match &cfg.tls {
        None => Some(None),
        Some(t) => rustls::ServerConnection::new(t.config.clone())
            .ok()
            .map(|conn| Some(Box::new(Pump::new(conn)))),
    }
}

/// Takes the records in `data`: the plaintext they carry goes to the session's input (`plain`
/// is the worker's buffer for it), and the peer's close_notify is its end of input. On an
/// error, the alert rustls queued for the client is in the output.
pub(super) fn take_records(
    tls: &mut Tls,
    s: &mut Session,
    data: &[u8],
    plain: &mut [u8],
) -> Result<Received, rustls::Error> {
    let r = tls.received(data, plain, &mut |p| {
        s.inbuf.extend(p);
        true
    })?;
    if r.closed {
        s.eof = true;
    }
    Ok(r)
}

/// Moves the session's pending output into TLS, a piece at a time, until `budget` bytes or
/// none is left; returns how many it moved. The records are then in [`Pump::output`].
pub(super) fn seal(
    tls: &mut Tls,
    s: &mut Session,
    budget: usize,
    now: Instant,
    cfg: &ServeConfig,
) -> usize {
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
