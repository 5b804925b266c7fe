//! https on the epoll loop: rustls' state machine driven over the connection's socket by the
//! thread's own loop (sans-I/O: rustls never touches the socket; the loop moves its records).
//! The handshake runs between the TCP connect and the first request; then requests are
//! written into the TLS session and its records sent, and records read are decrypted into
//! the same response parser as plain HTTP.

use std::io::{self, Read, Write};
use std::time::Instant;

use qpslab_sys::net::{self, SockIo};
use socket2::Socket;

use super::Worker;
use crate::stats::ErrorClass;
use crate::tls::describe;

/// What sending the session's pending records came to.
enum Sent {
    All,
    /// The socket took no more: wait until it is writable.
    Blocked,
    Failed(io::Error),
}

fn send_records(tls: &mut rustls::ClientConnection, sock: &Socket) -> Sent {
    while tls.wants_write() {
        match tls.write_tls(&mut SockIo(sock)) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Sent::Blocked,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Sent::Failed(e),
        }
    }
    Sent::All
}

impl Worker<'_> {
    /// Moves the handshake on as far as the socket allows; the loop calls it again when the
    /// socket is readable or writable.
    pub(super) fn handshake(&mut self, idx: usize) {
        let now = Instant::now();
        loop {
            let c = &mut self.conns[idx];
            let (Some(sock), Some(tls)) = (&c.sock, c.tls.as_mut()) else { return };
            match send_records(tls, sock) {
                Sent::All => {}
                Sent::Blocked => return self.set_interest(idx, true),
                Sent::Failed(e) => {
                    let msg = format!("TLS handshake failure: {}", net::message(&e));
                    return self.fail_with(idx, ErrorClass::Tls, msg, now);
                }
            }
            if !tls.is_handshaking() {
                self.set_interest(idx, false);
                return self.handshake_done(idx, now);
            }
            match tls.read_tls(&mut SockIo(sock)) {
                Ok(0) => {
                    let msg = "TLS handshake failure: the server closed the connection during \
                               the handshake";
                    return self.fail_with(idx, ErrorClass::Tls, msg.into(), now);
                }
                Ok(_) => {
                    if let Err(e) = tls.process_new_packets() {
                        // The alert rustls queued tells the server why.
                        let _ = send_records(tls, sock);
                        return self.fail_with(idx, ErrorClass::Tls, describe(&e), now);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return self.set_interest(idx, false);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let msg = format!("TLS handshake failure: {}", net::message(&e));
                    return self.fail_with(idx, ErrorClass::Tls, msg, now);
                }
            }
        }
    }

    /// Writes the pending requests into the session and sends its records.
    pub(super) fn flush_tls(&mut self, idx: usize) {
        let c = &mut self.conns[idx];
        let (Some(sock), Some(tls)) = (&c.sock, c.tls.as_mut()) else { return };
        let mut taken = 0;
        if c.s.writing() {
            let (from, to) = c.s.to_write();
            let wire = &self.shared.groups[c.s.group].wire[from..to];
            // rustls takes the plaintext whole (encrypted into records it holds).
            taken = tls.writer().write(wire).unwrap_or(0);
        }
        let sent = send_records(tls, sock);
        if taken > 0 {
            self.wrote(idx, taken);
        }
        match sent {
            Sent::All => self.set_interest(idx, false),
            Sent::Blocked => self.set_interest(idx, true),
            Sent::Failed(e) => {
                self.closed_before_response(idx, ErrorClass::Write, &e, Instant::now());
            }
        }
    }

    /// Reads records, decrypts them and parses the responses.
    pub(super) fn on_readable_tls(&mut self, idx: usize) {
        let mut buf = std::mem::take(&mut self.buf);
        let outcome = self.read_records(idx, &mut buf);
        self.buf = buf;
        let now = Instant::now();
        match outcome {
            ReadEnd::Drained => self.issue(idx, now),
            ReadEnd::Eof => self.on_eof(idx),
            ReadEnd::Handled => {}
        }
    }

    fn read_records(&mut self, idx: usize, buf: &mut [u8]) -> ReadEnd {
        loop {
            let c = &mut self.conns[idx];
            let (Some(sock), Some(tls)) = (&c.sock, c.tls.as_mut()) else {
                return ReadEnd::Handled;
            };
            let mut eof = false;
            match tls.read_tls(&mut SockIo(sock)) {
                Ok(0) => eof = true,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return ReadEnd::Drained,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.closed_before_response(idx, ErrorClass::Read, &e, Instant::now());
                    return ReadEnd::Handled;
                }
            }
            if let Err(e) = tls.process_new_packets() {
                let _ = send_records(tls, sock);
                self.fail_with(idx, ErrorClass::Tls, describe(&e), Instant::now());
                return ReadEnd::Handled;
            }
            loop {
                let Some(tls) = self.conns[idx].tls.as_mut() else { return ReadEnd::Handled };
                match tls.reader().read(&mut *buf) {
                    // The server's close_notify: the end of its responses.
                    Ok(0) => return ReadEnd::Eof,
                    Ok(n) => {
                        if !self.take_bytes(idx, &buf[..n], Instant::now()) {
                            return ReadEnd::Handled;
                        }
                        if self.conns[idx].sock.is_none() {
                            // Closed after a response announcing it (the next connection
                            // takes the next request).
                            return ReadEnd::Drained;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    // Closed without close_notify: an EOF as plain HTTP has it.
                    Err(_) => return ReadEnd::Eof,
                }
            }
            if eof {
                return ReadEnd::Eof;
            }
        }
    }
}

/// Where reading a connection's records ended.
enum ReadEnd {
    /// Nothing more to read now: the connection may take more requests.
    Drained,
    /// The server closed.
    Eof,
    /// Failed or closed, already handled.
    Handled,
}
