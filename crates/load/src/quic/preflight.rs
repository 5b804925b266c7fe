//! The preflight: one QUIC handshake per address before the run, so a port without HTTP/3 or
//! a certificate that does not verify fails in milliseconds, named, instead of failing every
//! connection for the whole run.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use qpslab_http::h3::frame::code;
use quinn_proto::{
    Connection, ConnectionError, DatagramEvent, Endpoint, EndpointConfig, Event, VarInt,
};

use super::RECV_BUF;
use crate::worker;

/// Why a preflight handshake failed.
#[derive(Debug)]
pub(crate) enum Preflight {
    /// Nothing answered QUIC there.
    Unreachable(String),
    /// The handshake failed: a certificate, ALPN or TLS alert.
    Tls(String),
}

/// Checks before the run that `addr` answers a QUIC handshake with ALPN h3 for `name`, within
/// `wait`: a wrong port or a server without HTTP/3 fails in milliseconds.
pub(crate) fn handshake_once(
    client: &quinn_proto::ClientConfig,
    addr: SocketAddr,
    name: &str,
    wait: Duration,
) -> Result<(), Preflight> {
    let local: SocketAddr = if addr.is_ipv6() {
        SocketAddr::from(([0u16; 8], 0))
    } else {
        SocketAddr::from(([0, 0, 0, 0], 0))
    };
    let io = |e: io::Error| Preflight::Unreachable(qpslab_sys::net::message(&e));
    let sock = UdpSocket::bind(local).map_err(io)?;
    // Connected, so an ICMP port unreachable comes back as ECONNREFUSED.
    sock.connect(addr).map_err(io)?;
    let mut endpoint =
        Endpoint::new(std::sync::Arc::new(EndpointConfig::default()), None, true, None);
    let start = Instant::now();
    let (h, mut conn) = endpoint
        .connect(start, client.clone(), addr, name)
        .map_err(|e| Preflight::Unreachable(e.to_string()))?;
    let mut tx = Vec::new();
    let mut rx = vec![0u8; RECV_BUF];
    let mut written = 0;
    let deadline = start + wait;
    loop {
        let now = Instant::now();
        while let Some(ev) = conn.poll() {
            match ev {
                Event::Connected => {
                    conn.close(
                        now,
                        VarInt::from_u64(code::NO_ERROR).unwrap_or_default(),
                        bytes::Bytes::new(),
                    );
                    send_all(&mut conn, &sock, &mut tx, &mut written, now);
                    return Ok(());
                }
                Event::ConnectionLost { reason } => {
                    return Err(match reason {
                        ConnectionError::TransportError(e) => {
                            Preflight::Tls(format!("QUIC handshake: {e}"))
                        }
                        ConnectionError::ConnectionClosed(c) => {
                            Preflight::Tls(format!("the server ended the QUIC handshake: {c}"))
                        }
                        e => Preflight::Unreachable(e.to_string()),
                    });
                }
                _ => {}
            }
        }
        while let Some(ev) = conn.poll_endpoint_events() {
            if let Some(back) = endpoint.handle_event(h, ev) {
                conn.handle_event(back);
            }
        }
        send_all(&mut conn, &sock, &mut tx, &mut written, now);
        if now >= deadline {
            return Err(Preflight::Unreachable(format!(
                "no QUIC handshake over UDP within {} (is HTTP/3 on this port?)",
                worker::fmt_duration(wait)
            )));
        }
        let timer = conn.poll_timeout().unwrap_or(deadline).min(deadline);
        let left = timer.saturating_duration_since(now).max(Duration::from_millis(1));
        sock.set_read_timeout(Some(left)).map_err(io)?;
        match sock.recv(&mut rx) {
            Ok(n) => {
                let data = BytesMut::from(&rx[..n]);
                tx.clear();
                if let Some(DatagramEvent::ConnectionEvent(_, ev)) =
                    endpoint.handle(Instant::now(), addr, None, None, data, &mut tx)
                {
                    conn.handle_event(ev);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                return Err(Preflight::Unreachable(
                    "refused over UDP (ICMP port unreachable): nothing listens for QUIC here"
                        .into(),
                ));
            }
            Err(_) => {
                if conn.poll_timeout().is_some_and(|t| t <= Instant::now()) {
                    conn.handle_timeout(Instant::now());
                }
            }
        }
    }
}

/// Sends every datagram the connection has ready; one the socket's buffer cannot take is
/// dropped, as a full path would (QUIC's recovery sends it again).
fn send_all(
    conn: &mut Connection,
    sock: &UdpSocket,
    tx: &mut Vec<u8>,
    sent: &mut u64,
    now: Instant,
) {
    loop {
        tx.clear();
        let Some(t) = conn.poll_transmit(now, 1, tx) else { break };
        if sock.send_to(&tx[..t.size], t.destination).is_ok() {
            *sent += t.size as u64;
        }
    }
}
