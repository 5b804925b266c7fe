//! quiche: a client and a server connection, datagrams handed from one's `send` to the other's
//! `recv`.

use std::time::Instant;

use crate::{client_addr, fail, server_addr, Cert, Lib, ANSWER, MTU, REQUEST, STREAMS};

pub struct Quiche {
    client_config: quiche::Config,
    server_config: quiche::Config,
    next_id: u64,
    buf: Vec<u8>,
    read: Vec<u8>,
}

struct Conns {
    client: quiche::Connection,
    server: Option<quiche::Connection>,
    /// The client's next bidirectional stream.
    next_stream: u64,
}

fn config(cert: &Cert, dir: &std::path::Path, server: bool) -> quiche::Config {
    let ok = |r: quiche::Result<()>| r.unwrap_or_else(|e| fail(&format!("quiche config: {e}")));
    let mut c = quiche::Config::new(quiche::PROTOCOL_VERSION)
        .unwrap_or_else(|e| fail(&format!("quiche config: {e}")));
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    let path = |p: &std::path::Path| p.to_str().unwrap_or_else(|| fail("temp path")).to_string();
    if server {
        ok(c.load_cert_chain_from_pem_file(&path(&cert_path)));
        ok(c.load_priv_key_from_pem_file(&path(&key_path)));
    } else {
        ok(c.load_verify_locations_from_file(&path(&cert_path)));
        c.verify_peer(true);
    }
    let _ = &cert.pem;
    ok(c.set_application_protos(&[b"bench"]));
    c.set_max_idle_timeout(30_000);
    c.set_max_recv_udp_payload_size(MTU);
    c.set_max_send_udp_payload_size(MTU);
    c.discover_pmtu(false);
    // The flow-control windows and stream limit of quinn-proto's defaults.
    c.set_initial_max_data(10_000_000);
    c.set_initial_max_stream_data_bidi_local(1_250_000);
    c.set_initial_max_stream_data_bidi_remote(1_250_000);
    c.set_initial_max_stream_data_uni(1_250_000);
    c.set_initial_max_streams_bidi(STREAMS as u64);
    c.set_initial_max_streams_uni(100);
    c.set_disable_active_migration(true);
    c
}

impl Quiche {
    pub fn new(cert: &Cert) -> Quiche {
        let dir = std::env::temp_dir().join(format!("quic-libs-{}", std::process::id()));
        let write = |name: &str, body: &str| {
            std::fs::write(dir.join(name), body)
                .unwrap_or_else(|e| fail(&format!("{}: {e}", dir.join(name).display())))
        };
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| fail(&format!("{}: {e}", dir.display())));
        write("cert.pem", &cert.pem);
        write("key.pem", &cert.key_pem);
        let (client_config, server_config) = (config(cert, &dir, false), config(cert, &dir, true));
        let _ = std::fs::remove_dir_all(&dir);
        Quiche {
            client_config,
            server_config,
            next_id: 1,
            buf: vec![0; 65_536],
            read: vec![0; 65_536],
        }
    }

    fn id(&mut self) -> [u8; 16] {
        self.next_id += 1;
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&self.next_id.to_le_bytes());
        id
    }

    fn connect(&mut self) -> Conns {
        let scid = self.id();
        let client = quiche::connect(
            Some("localhost"),
            &quiche::ConnectionId::from_ref(&scid),
            client_addr(),
            server_addr(),
            &mut self.client_config,
        )
        .unwrap_or_else(|e| fail(&format!("connect: {e}")));
        Conns { client, server: None, next_stream: 0 }
    }

    /// Moves every datagram each side has ready to the other, both ways, until neither has
    /// any; due timers fire first.
    fn exchange(&mut self, c: &mut Conns, now: Instant) {
        let to_server = quiche::RecvInfo { from: client_addr(), to: server_addr() };
        let to_client = quiche::RecvInfo { from: server_addr(), to: client_addr() };
        loop {
            let mut moved = false;
            fire(&mut c.client, now);
            loop {
                let n = match c.client.send(&mut self.buf) {
                    Ok((n, _)) => n,
                    Err(quiche::Error::Done) => break,
                    Err(e) => fail(&format!("client send: {e}")),
                };
                moved = true;
                crate::DATAGRAMS.with(|d| d.set(d.get() + 1));
                if c.server.is_none() {
                    let scid = self.id();
                    let accepted = quiche::accept(
                        &quiche::ConnectionId::from_ref(&scid),
                        None,
                        server_addr(),
                        client_addr(),
                        &mut self.server_config,
                    )
                    .unwrap_or_else(|e| fail(&format!("accept: {e}")));
                    c.server = Some(accepted);
                }
                if let Some(s) = c.server.as_mut() {
                    let _ = s.recv(&mut self.buf[..n], to_server);
                }
            }
            if let Some(s) = c.server.as_mut() {
                fire(s, now);
                loop {
                    let n = match s.send(&mut self.buf) {
                        Ok((n, _)) => n,
                        Err(quiche::Error::Done) => break,
                        Err(e) => fail(&format!("server send: {e}")),
                    };
                    moved = true;
                    crate::DATAGRAMS.with(|d| d.set(d.get() + 1));
                    let _ = c.client.recv(&mut self.buf[..n], to_client);
                }
            }
            if !moved {
                break;
            }
        }
    }
}

fn fire(conn: &mut quiche::Connection, now: Instant) {
    if conn.timeout_instant().is_some_and(|t| t <= now) {
        conn.on_timeout();
    }
}

/// Reads stream `id` as far as it goes; true when its end was read.
fn read_to_end(conn: &mut quiche::Connection, id: u64, buf: &mut [u8]) -> bool {
    loop {
        match conn.stream_recv(id, buf) {
            Ok((_, true)) => return true,
            Ok((_, false)) => {}
            Err(_) => return false,
        }
    }
}

/// Opens the client's next stream with a finished request on it.
fn request(c: &mut Conns) -> bool {
    let id = c.next_stream;
    match c.client.stream_send(id, REQUEST, true) {
        Ok(_) => {
            c.next_stream += 4;
            true
        }
        Err(_) => false,
    }
}

impl Lib for Quiche {
    fn exchanges(&mut self, deadline: Instant) -> u64 {
        let mut c = self.connect();
        while !(c.client.is_established() && c.server.as_ref().is_some_and(|s| s.is_established()))
        {
            self.exchange(&mut c, Instant::now());
        }
        let mut owed = 0usize;
        for _ in 0..STREAMS {
            if !request(&mut c) {
                owed += 1;
            }
        }
        let mut done = 0u64;
        let mut read = std::mem::take(&mut self.read);
        let mut ids = Vec::new();
        while Instant::now() < deadline {
            let now = Instant::now();
            self.exchange(&mut c, now);
            if let Some(s) = c.server.as_mut() {
                ids.clear();
                ids.extend(s.readable());
                for &id in &ids {
                    if read_to_end(s, id, &mut read) && s.stream_send(id, ANSWER, true).is_err() {
                        fail("the server could not answer");
                    }
                }
            }
            self.exchange(&mut c, now);
            ids.clear();
            ids.extend(c.client.readable());
            for &id in &ids {
                if read_to_end(&mut c.client, id, &mut read) {
                    done += 1;
                    owed += 1;
                }
            }
            // Streams the peer's limit let through (its MAX_STREAMS comes as streams close).
            while owed > 0 && request(&mut c) {
                owed -= 1;
            }
        }
        self.read = read;
        done
    }

    fn handshakes(&mut self, deadline: Instant) -> u64 {
        let mut done = 0u64;
        while Instant::now() < deadline {
            let mut c = self.connect();
            for _ in 0..64 {
                self.exchange(&mut c, Instant::now());
                if c.client.is_established()
                    && c.server.as_ref().is_some_and(|s| s.is_established())
                {
                    break;
                }
            }
            if !(c.client.is_established() && c.server.as_ref().is_some_and(|s| s.is_established()))
            {
                fail("a handshake did not complete");
            }
            done += 1;
        }
        done
    }
}
