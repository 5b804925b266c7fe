//! qpslab's own QUIC client (`qpslab_quic::client`) against quinn-proto's server: the client's
//! side of the same exchanges and handshakes, to set its CPU beside quinn-proto's client's.
//! It has no loss recovery or congestion control yet (nothing is lost in memory), so its
//! figure is a floor for what those add.

use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use qpslab_quic::client::Client;
use quinn_proto::{
    Connection, ConnectionHandle, DatagramEvent, Dir, Endpoint, EndpointConfig, EndpointEvent,
    Event, StreamEvent, StreamId,
};

use crate::{client_addr, fail, Cert, Lib, ANSWER, REQUEST, STREAMS};

pub struct Own {
    tls: Arc<rustls::ClientConfig>,
    server: Endpoint,
    next_id: u64,
    buf: Vec<u8>,
}

type Server = Option<(ConnectionHandle, Connection)>;

impl Own {
    pub fn new(cert: &Cert) -> Own {
        let (tls, server_config) = crate::quinn_side::configs(cert);
        let config = Arc::new(EndpointConfig::default());
        Own {
            tls: Arc::new(tls),
            server: Endpoint::new(config, Some(server_config), false, None),
            next_id: 0,
            buf: Vec::new(),
        }
    }

    fn connect(&mut self) -> Client {
        self.next_id += 1;
        let mut dcid = [0u8; 8];
        dcid.copy_from_slice(&self.next_id.to_le_bytes());
        let name = "localhost".try_into().unwrap_or_else(|_| fail("server name"));
        Client::new(self.tls.clone(), name, &dcid, &[9, 9, 9, 9])
            .unwrap_or_else(|e| fail(&format!("connect: {e:?}")))
    }

    /// Moves every datagram each side has ready to the other, both ways, until neither has
    /// any; each side's work timed apart.
    fn exchange(&mut self, c: &mut Client, s: &mut Server, now: Instant) {
        let mut datagrams: Vec<Vec<u8>> = Vec::new();
        loop {
            let t = crate::cpu();
            while c.poll_transmit(&mut self.buf, now) {
                datagrams.push(self.buf.clone());
            }
            crate::client_time(t);
            let moved = !datagrams.is_empty();
            crate::DATAGRAMS.with(|d| d.set(d.get() + datagrams.len() as u64));
            for d in datagrams.drain(..) {
                let mut answer = Vec::new();
                let data = BytesMut::from(&d[..]);
                match self.server.handle(now, client_addr(), None, None, data, &mut answer) {
                    Some(DatagramEvent::NewConnection(incoming)) => {
                        let accepted = self
                            .server
                            .accept(incoming, now, &mut answer, None)
                            .unwrap_or_else(|e| fail(&format!("accept: {:?}", e.cause)));
                        *s = Some(accepted);
                    }
                    Some(DatagramEvent::ConnectionEvent(h, ev)) => {
                        if let Some(s) = s.as_mut().filter(|s| s.0 == h) {
                            s.1.handle_event(ev);
                        }
                    }
                    _ => {}
                }
            }
            if let Some((h, conn)) = s.as_mut() {
                if conn.poll_timeout().is_some_and(|t| t <= now) {
                    conn.handle_timeout(now);
                }
                while let Some(ev) = conn.poll_endpoint_events() {
                    if let Some(back) = self.server.handle_event(*h, ev) {
                        conn.handle_event(back);
                    }
                }
                loop {
                    self.buf.clear();
                    let Some(t) = conn.poll_transmit(now, 1, &mut self.buf) else { break };
                    datagrams.push(self.buf[..t.size].to_vec());
                }
            }
            let answered = !datagrams.is_empty();
            crate::DATAGRAMS.with(|d| d.set(d.get() + datagrams.len() as u64));
            let t = crate::cpu();
            for mut d in datagrams.drain(..) {
                c.recv(&mut d, now);
            }
            crate::client_time(t);
            if let Some(e) = c.failure() {
                fail(&format!("our client failed: {e:?}"));
            }
            if !moved && !answered {
                break;
            }
        }
    }

    /// Handshakes until both sides are up; true when they are.
    fn handshake(&mut self, c: &mut Client, s: &mut Server) -> bool {
        let mut connected = false;
        for _ in 0..64 {
            self.exchange(c, s, Instant::now());
            if let Some((_, conn)) = s.as_mut() {
                while let Some(e) = conn.poll() {
                    connected |= matches!(e, Event::Connected);
                }
            }
            if connected && c.is_confirmed() {
                return true;
            }
        }
        false
    }
}

/// The server reads every readable stream to its end and answers it.
fn serve(conn: &mut Connection, ids: &mut Vec<StreamId>) {
    ids.clear();
    while let Some(e) = conn.poll() {
        match e {
            Event::Stream(StreamEvent::Readable { id }) => ids.push(id),
            Event::Stream(StreamEvent::Opened { dir: Dir::Bi }) => {
                ids.extend(std::iter::from_fn(|| conn.streams().accept(Dir::Bi)))
            }
            Event::ConnectionLost { reason } => fail(&format!("connection lost: {reason}")),
            _ => {}
        }
    }
    for &id in ids.iter() {
        let mut stream = conn.recv_stream(id);
        let Ok(mut chunks) = stream.read(true) else { continue };
        let ended = loop {
            match chunks.next(usize::MAX) {
                Ok(Some(_)) => {}
                Ok(None) => break true,
                Err(_) => break false,
            }
        };
        let _ = chunks.finalize();
        if ended {
            let mut send = conn.send_stream(id);
            if send.write(ANSWER).is_err() || send.finish().is_err() {
                fail("the server could not answer");
            }
        }
    }
}

/// Opens a stream with a finished request on it.
fn request(c: &mut Client) -> bool {
    match c.streams.open(true) {
        Some(id) => c.streams.write(id, REQUEST, true),
        None => false,
    }
}

impl Lib for Own {
    fn exchanges(&mut self, deadline: Instant) -> u64 {
        let mut c = self.connect();
        let mut s: Server = None;
        if !self.handshake(&mut c, &mut s) {
            fail("our client's handshake did not complete");
        }
        let mut owed = 0;
        for _ in 0..STREAMS {
            if !request(&mut c) {
                owed += 1;
            }
        }
        let (mut done, mut ids, mut read) = (0u64, Vec::new(), Vec::new());
        while Instant::now() < deadline {
            let now = Instant::now();
            self.exchange(&mut c, &mut s, now);
            if let Some((_, conn)) = s.as_mut() {
                serve(conn, &mut ids);
            }
            self.exchange(&mut c, &mut s, now);
            let t = crate::cpu();
            for id in c.streams.readable() {
                read.clear();
                if c.streams.read(id, &mut read).0 {
                    done += 1;
                    owed += 1;
                }
            }
            // Streams the server's limit lets through (its MAX_STREAMS comes as streams end).
            while owed > 0 && request(&mut c) {
                owed -= 1;
            }
            crate::client_time(t);
        }
        done
    }

    fn handshakes(&mut self, deadline: Instant) -> u64 {
        let mut done = 0u64;
        while Instant::now() < deadline {
            let mut c = self.connect();
            let mut s: Server = None;
            if !self.handshake(&mut c, &mut s) {
                fail("our client's handshake did not complete");
            }
            if let Some((h, _)) = s.take() {
                self.server.handle_event(h, EndpointEvent::drained());
            }
            done += 1;
        }
        done
    }
}
