//! quinn-proto: two endpoints (client and server) and their connections, datagrams handed
//! from one endpoint's connection to the other endpoint.

use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use quinn_proto::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn_proto::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Dir, Endpoint, EndpointConfig,
    EndpointEvent, Event, ServerConfig, StreamEvent, StreamId, TransportConfig,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::{client_addr, fail, server_addr, Cert, Lib, ANSWER, MTU, REQUEST, STREAMS};

pub struct Quinn {
    client_config: ClientConfig,
    client: Endpoint,
    server: Endpoint,
    buf: Vec<u8>,
    read: Vec<u8>,
}

/// One connection pair: the client's and the server's side with their handles.
struct Conns {
    client: (ConnectionHandle, Connection),
    server: Option<(ConnectionHandle, Connection)>,
}

/// quinn-proto's transport here: datagrams of [`MTU`] bytes, no path MTU discovery.
fn transport() -> Arc<TransportConfig> {
    let mut t = TransportConfig::default();
    t.mtu_discovery_config(None).initial_mtu(MTU as u16);
    Arc::new(t)
}

/// The TLS every client here uses (quinn-proto's and qpslab's own), and quinn-proto's server
/// configuration.
pub(crate) fn configs(cert: &Cert) -> (rustls::ClientConfig, Arc<ServerConfig>) {
    // ring as qpslab builds rustls, key exchange X25519 as qpslab's rustls (0.23.46) offers
    // first (0.23.48, this build's, puts P-384 first: 4x the CPU of a handshake) and as
    // quiche's BoringSSL does.
    #[allow(deprecated, reason = "ring is the provider qpslab builds with")]
    let mut provider = rustls::crypto::ring::default_provider();
    provider.kx_groups = vec![rustls::crypto::ring::kx_group::X25519];
    let provider = Arc::new(provider);
    let key = PrivateKeyDer::try_from(cert.key_der.clone())
        .unwrap_or_else(|e| fail(&format!("key: {e}")));
    let der = CertificateDer::from(cert.der.clone());
    let mut tls_server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap_or_else(|e| fail(&e.to_string()))
        .with_no_client_auth()
        .with_single_cert(vec![der.clone()], key)
        .unwrap_or_else(|e| fail(&e.to_string()));
    tls_server.alpn_protocols = vec![b"bench".to_vec()];
    let mut roots = rustls::RootCertStore::empty();
    roots.add(der).unwrap_or_else(|e| fail(&e.to_string()));
    let mut tls_client = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap_or_else(|e| fail(&e.to_string()))
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls_client.alpn_protocols = vec![b"bench".to_vec()];
    // The session cache off: every handshake in full, as quiche's here.
    tls_client.resumption = rustls::client::Resumption::disabled();
    let mut server_config = ServerConfig::with_crypto(Arc::new(
        QuicServerConfig::try_from(Arc::new(tls_server)).unwrap_or_else(|e| fail(&e.to_string())),
    ));
    server_config.transport_config(transport());
    (tls_client, Arc::new(server_config))
}

impl Quinn {
    pub fn new(cert: &Cert) -> Quinn {
        let (tls_client, server_config) = configs(cert);
        let mut client_config = ClientConfig::new(Arc::new(
            QuicClientConfig::try_from(tls_client).unwrap_or_else(|e| fail(&e.to_string())),
        ));
        client_config.transport_config(transport());
        let config = Arc::new(EndpointConfig::default());
        Quinn {
            client_config,
            client: Endpoint::new(config.clone(), None, false, None),
            server: Endpoint::new(config, Some(server_config), false, None),
            buf: Vec::with_capacity(MTU),
            read: Vec::new(),
        }
    }
    fn connect(&mut self, now: Instant) -> Conns {
        let client = self
            .client
            .connect(now, self.client_config.clone(), server_addr(), "localhost")
            .unwrap_or_else(|e| fail(&format!("connect: {e}")));
        Conns { client, server: None }
    }

    /// Moves every datagram each side has ready to the other, both ways, until neither has
    /// any; due timers fire first. Each side's work is timed apart ([`crate::client_time`]).
    fn exchange(&mut self, c: &mut Conns, now: Instant) {
        let mut datagrams: Vec<Vec<u8>> = Vec::new();
        loop {
            // The client's datagrams.
            let t = crate::cpu();
            fire(&mut self.client, &mut c.client, now);
            loop {
                self.buf.clear();
                let Some(t) = c.client.1.poll_transmit(now, 1, &mut self.buf) else { break };
                datagrams.push(self.buf[..t.size].to_vec());
            }
            crate::client_time(t);
            let moved = !datagrams.is_empty();
            crate::DATAGRAMS.with(|d| d.set(d.get() + datagrams.len() as u64));
            // The server takes them and answers.
            for d in datagrams.drain(..) {
                let mut answer = Vec::new();
                let data = BytesMut::from(&d[..]);
                match self.server.handle(now, client_addr(), None, None, data, &mut answer) {
                    Some(DatagramEvent::NewConnection(incoming)) => {
                        let accepted = self
                            .server
                            .accept(incoming, now, &mut answer, None)
                            .unwrap_or_else(|e| fail(&format!("accept: {:?}", e.cause)));
                        c.server = Some(accepted);
                    }
                    Some(DatagramEvent::ConnectionEvent(h, ev)) => {
                        if let Some(s) = c.server.as_mut().filter(|s| s.0 == h) {
                            s.1.handle_event(ev);
                        }
                    }
                    _ => {}
                }
            }
            if let Some(s) = c.server.as_mut() {
                fire(&mut self.server, s, now);
                loop {
                    self.buf.clear();
                    let Some(t) = s.1.poll_transmit(now, 1, &mut self.buf) else { break };
                    datagrams.push(self.buf[..t.size].to_vec());
                }
            }
            let answered = !datagrams.is_empty();
            crate::DATAGRAMS.with(|d| d.set(d.get() + datagrams.len() as u64));
            // The client takes the server's.
            let t = crate::cpu();
            for d in datagrams.drain(..) {
                let mut answer = Vec::new();
                let data = BytesMut::from(&d[..]);
                if let Some(DatagramEvent::ConnectionEvent(h, ev)) =
                    self.client.handle(now, server_addr(), None, None, data, &mut answer)
                {
                    if h == c.client.0 {
                        c.client.1.handle_event(ev);
                    }
                }
            }
            crate::client_time(t);
            if !moved && !answered {
                break;
            }
        }
    }
}

/// A connection's due timers fire and its endpoint takes what it tells it.
fn fire(endpoint: &mut Endpoint, (h, conn): &mut (ConnectionHandle, Connection), now: Instant) {
    if conn.poll_timeout().is_some_and(|t| t <= now) {
        conn.handle_timeout(now);
    }
    while let Some(ev) = conn.poll_endpoint_events() {
        if let Some(back) = endpoint.handle_event(*h, ev) {
            conn.handle_event(back);
        }
    }
}

/// Reads stream `id` as far as it goes; true when its end was read.
fn read_to_end(conn: &mut Connection, id: StreamId, sink: &mut Vec<u8>) -> bool {
    let mut stream = conn.recv_stream(id);
    let Ok(mut chunks) = stream.read(true) else { return false };
    let ended = loop {
        match chunks.next(usize::MAX) {
            Ok(Some(chunk)) => sink.extend_from_slice(&chunk.bytes),
            Ok(None) => break true,
            Err(_) => break false,
        }
    };
    let _ = chunks.finalize();
    ended
}

/// Opens a stream and writes a finished request on it.
fn request(conn: &mut Connection) -> bool {
    let Some(id) = conn.streams().open(Dir::Bi) else { return false };
    let mut s = conn.send_stream(id);
    s.write(REQUEST).is_ok() && s.finish().is_ok()
}

/// The stream events a connection has, the readable and newly opened streams' ids.
fn readable(conn: &mut Connection, ids: &mut Vec<StreamId>) -> bool {
    let mut connected = false;
    while let Some(ev) = conn.poll() {
        match ev {
            Event::Connected => connected = true,
            Event::Stream(StreamEvent::Readable { id }) => ids.push(id),
            Event::Stream(StreamEvent::Opened { dir: Dir::Bi }) => {
                ids.extend(std::iter::from_fn(|| conn.streams().accept(Dir::Bi)))
            }
            Event::ConnectionLost { reason } => fail(&format!("connection lost: {reason}")),
            _ => {}
        }
    }
    connected
}

impl Lib for Quinn {
    fn exchanges(&mut self, deadline: Instant) -> u64 {
        let mut c = self.connect(Instant::now());
        let mut ids = Vec::new();
        let mut connected = false;
        while !connected {
            self.exchange(&mut c, Instant::now());
            connected = readable(&mut c.client.1, &mut ids);
        }
        if let Some(s) = c.server.as_mut() {
            readable(&mut s.1, &mut ids);
        }
        for _ in 0..STREAMS {
            request(&mut c.client.1);
        }
        let mut done = 0u64;
        let mut read = std::mem::take(&mut self.read);
        while Instant::now() < deadline {
            let now = Instant::now();
            self.exchange(&mut c, now);
            if let Some(s) = c.server.as_mut() {
                ids.clear();
                readable(&mut s.1, &mut ids);
                for &id in &ids {
                    read.clear();
                    if read_to_end(&mut s.1, id, &mut read) {
                        let mut send = s.1.send_stream(id);
                        if send.write(ANSWER).is_err() || send.finish().is_err() {
                            fail("the server could not answer");
                        }
                    }
                }
            }
            self.exchange(&mut c, now);
            let t = crate::cpu();
            ids.clear();
            readable(&mut c.client.1, &mut ids);
            for &id in &ids {
                read.clear();
                if read_to_end(&mut c.client.1, id, &mut read) {
                    done += 1;
                    request(&mut c.client.1);
                }
            }
            crate::client_time(t);
        }
        self.read = read;
        done
    }

    fn handshakes(&mut self, deadline: Instant) -> u64 {
        let mut done = 0u64;
        let mut ids = Vec::new();
        while Instant::now() < deadline {
            let mut c = self.connect(Instant::now());
            let (mut client_up, mut server_up) = (false, false);
            for _ in 0..64 {
                self.exchange(&mut c, Instant::now());
                client_up |= readable(&mut c.client.1, &mut ids);
                if let Some(s) = c.server.as_mut() {
                    server_up |= readable(&mut s.1, &mut ids);
                }
                if client_up && server_up {
                    break;
                }
            }
            if !(client_up && server_up) {
                fail("a handshake did not complete");
            }
            // Each endpoint forgets the connection, as when it has drained.
            self.client.handle_event(c.client.0, EndpointEvent::drained());
            if let Some(s) = c.server.take() {
                self.server.handle_event(s.0, EndpointEvent::drained());
            }
            done += 1;
        }
        done
    }
}
