//! What carries a connection's bytes under its HTTP session: the socket itself (TCP or a unix
//! socket), or TLS over it (rustls' records through plain buffers, a [`Pump`]). The worker
//! hands it what arrived and asks it what to send, and never asks which one it holds; the
//! protocol above it is the [`Session`]'s business. What arrives goes in through
//! [`Transport::input`], which hands the session's bytes (TLS: decrypted) to the worker's
//! parser; what the session has to send goes out through [`Transport::output`] (TLS: sealed
//! into records first by [`Transport::seal`]), along with what TLS has to say of its own
//! (handshake messages; an alert telling the server why the client gave up, as the socket
//! closes). A TLS handshake runs between the TCP connect and the first request.

use std::mem;
use std::time::Instant;

use qpslab_tls::Pump;

use crate::session::{Out, Session};
use crate::targets::Group;
use crate::tls::describe;

/// A connection's transport.
#[derive(Debug, Default)]
pub(super) enum Transport {
    /// The socket carries the session's bytes as they are.
    #[default]
    Plain,
    Tls(Box<TlsLink>),
}

/// A connection's TLS.
#[derive(Debug)]
pub(super) struct TlsLink {
    pump: Pump<rustls::ClientConnection>,
    /// Records a send did not take all of, from where it stopped; they go first.
    unsent: Option<(Vec<u8>, usize)>,
    /// An alert to send as the socket closes (why the client gave up).
    last_words: Vec<u8>,
    /// When the handshake began.
    began: Instant,
}

/// What the bytes that arrived did to the connection.
pub(super) enum Input {
    /// It goes on (its bytes, if any, went to the session).
    Open,
    /// The TLS handshake ended with them: requests may go.
    HandshakeDone,
    /// The server ended the connection (`handshaking`: before TLS was set up).
    Ended { handshaking: bool },
    /// TLS failed, and why (the alert for the server is kept for the close).
    Failed(String),
}

/// A finished TLS handshake, as the run reports it.
pub(super) struct Handshake<'a> {
    pub conn: &'a rustls::ClientConnection,
    pub began: Instant,
}

impl Handshake<'_> {
    pub fn resumed(&self) -> bool {
        self.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed)
    }

    /// The version and cipher suite the server chose.
    pub fn negotiated(&self) -> String {
        let version = self.conn.protocol_version().map(|v| format!("{v:?}")).unwrap_or_default();
        let suite = self.conn.negotiated_cipher_suite().map(|s| format!("{:?}", s.suite()));
        format!("{version} {}", suite.unwrap_or_default())
    }
}

impl Transport {
    /// TLS over a socket just connected: the handshake begins with the client's first
    /// flight (see [`Transport::wants_send`]).
    pub fn tls(conn: rustls::ClientConnection, now: Instant) -> Transport {
        Transport::Tls(Box::new(TlsLink {
            pump: Pump::new(conn),
            unsent: None,
            last_words: Vec::new(),
            began: now,
        }))
    }

    /// Whether it has bytes to send: the session's, or TLS records.
    #[inline]
    pub fn wants_send(&self, s: &Session) -> bool {
        match self {
            Transport::Plain => s.writing(),
            Transport::Tls(t) => t.unsent.is_some() || t.pump.wants_write(),
        }
    }

    /// TLS: the session's pending bytes go into records (rustls takes them whole); returns
    /// how many it took (the session has written them). The plain transport sends the
    /// session's bytes as they are: 0.
    #[inline]
    pub fn seal(&mut self, s: &Session, group: &Group) -> usize {
        match self {
            Transport::Tls(t) if s.writing() => t.pump.write(s.pending(group)),
            _ => 0,
        }
    }

    /// The bytes to send next, if any (see [`Session::output`]; `spare`: an owned buffer to
    /// hand over in place of the one a send takes).
    #[inline]
    pub fn output<'a>(
        &'a mut self,
        s: &'a mut Session,
        group: &'a Group,
        spare: &mut Vec<u8>,
        at_once: bool,
    ) -> Option<Out<'a>> {
        let t = match self {
            Transport::Plain => return s.output(group, spare, at_once),
            Transport::Tls(t) => t,
        };
        if let Some((buf, from)) = t.unsent.take() {
            Some(Out::Owned(buf, from))
        } else if !t.pump.wants_write() {
            None
        } else if at_once {
            Some(Out::Lent(t.pump.output()))
        } else {
            Some(Out::Owned(t.pump.take_output(mem::take(spare)), 0))
        }
    }

    /// A send of what [`Transport::output`] gave ended with `n` bytes sent (`buf`: the owned
    /// buffer it took, and where the send began; it becomes `spare` once sent whole). Returns
    /// how many of them were the session's own bytes (TLS: none; [`Transport::seal`] counted
    /// what the records carry).
    #[inline]
    pub fn sent(
        &mut self,
        s: &mut Session,
        n: usize,
        buf: Option<(Vec<u8>, usize)>,
        spare: &mut Vec<u8>,
    ) -> usize {
        let t = match self {
            Transport::Plain => {
                s.sent(n, buf, spare);
                return n;
            }
            Transport::Tls(t) => t,
        };
        match buf {
            Some((buf, from)) if from + n < buf.len() => {
                // The rest of the records go first, in order.
                t.unsent = Some((buf, from + n));
            }
            Some((buf, _)) => {
                *spare = buf;
                spare.clear();
            }
            None => t.pump.sent(n),
        }
        0
    }

    /// Bytes arrived (empty: the socket's end). The session's bytes go to `deliver` (TLS:
    /// decrypted into `plain`), which returns false once the connection is no longer the one
    /// they came on (closed or failed by what they said).
    pub fn input(
        &mut self,
        data: &[u8],
        plain: &mut [u8],
        deliver: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Input {
        let t = match self {
            Transport::Plain if data.is_empty() => return Input::Ended { handshaking: false },
            Transport::Plain => {
                deliver(data);
                return Input::Open;
            }
            Transport::Tls(t) => t,
        };
        if data.is_empty() {
            t.pump.eof();
        }
        let handshaking = t.pump.is_handshaking();
        match t.pump.received(data, plain, deliver) {
            Err(e) => {
                // The alert rustls queued tells the server why, as the socket closes.
                if t.pump.wants_write() {
                    t.last_words = t.pump.take_output(mem::take(&mut t.last_words));
                }
                Input::Failed(describe(&e))
            }
            Ok(r) if r.closed || data.is_empty() => Input::Ended { handshaking },
            Ok(r) if r.handshake_done => Input::HandshakeDone,
            Ok(_) => Input::Open,
        }
    }

    /// The handshake, once TLS has one.
    pub fn handshake(&self) -> Option<Handshake<'_>> {
        match self {
            Transport::Plain => None,
            Transport::Tls(t) => Some(Handshake { conn: t.pump.conn(), began: t.began }),
        }
    }

    /// The socket closes: what to send as it goes (a TLS alert), and what was unsent is
    /// dropped.
    pub fn closing(&mut self) -> Vec<u8> {
        match self {
            Transport::Plain => Vec::new(),
            Transport::Tls(t) => {
                t.unsent = None;
                mem::take(&mut t.last_words)
            }
        }
    }
}
