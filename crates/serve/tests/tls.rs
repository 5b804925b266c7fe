//! The server over HTTPS on each event loop: a rustls client for what needs byte-level control
//! (pipelining, a request a record per byte, the close_notify after an error, large bodies),
//! real clients for the counts (curl, h2load, qpslab load), and plain HTTP sent to the TLS
//! port.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use qpslab_serve::tls::TlsSource;
use qpslab_serve::{IoChoice, ServeOptions};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use support::{opts_on, read_all, TestServer};

/// A server with a certificate for `localhost` written to a temporary directory, and a client
/// set-up that trusts it.
struct Https {
    server: TestServer,
    client: Arc<ClientConfig>,
    _dir: tempfile::TempDir,
    ca: PathBuf,
}

fn https(io: IoChoice, tune: impl FnOnce(&mut ServeOptions)) -> Https {
    let dir = tempfile::tempdir().unwrap();
    let made = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.key_pair.serialize_pem()).unwrap();
    let mut o = opts_on(io);
    o.tls = Some(TlsSource::Files { cert: cert.clone(), key });
    tune(&mut o);
    let mut roots = RootCertStore::empty();
    roots.add(CertificateDer::from(made.cert.der().to_vec())).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Https { server: TestServer::start(o), client: Arc::new(client), _dir: dir, ca: cert }
}

type Stream = StreamOwned<ClientConnection, TcpStream>;

impl Https {
    fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.addr().port())
    }

    fn connect(&self) -> Stream {
        let sock = TcpStream::connect(self.addr()).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        sock.set_nodelay(true).unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        StreamOwned::new(ClientConnection::new(self.client.clone(), name).unwrap(), sock)
    }
}

/// What a TLS connection brought back: the plaintext, and how it ended (`close_notify`: the
/// server said goodbye in TLS; false: it closed without one, or timed out).
struct Got {
    bytes: Vec<u8>,
    close_notify: bool,
}

impl Got {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    fn statuses(&self) -> Vec<u16> {
        let t = self.text();
        t.match_indices("HTTP/1.1 ")
            .filter_map(|(i, _)| t.get(i + 9..i + 12)?.parse().ok())
            .collect()
    }
}

/// Reads until the server ends the connection (or 5 s without data).
fn read_to_end(s: &mut Stream) -> Got {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Got { bytes, close_notify: true },
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(_) => return Got { bytes, close_notify: false },
        }
    }
}

/// Reads until `n` responses of the identical small kind (`GET /?c=...`) are in.
fn read_responses(s: &mut Stream, n: usize) -> Got {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 65536];
    while String::from_utf8_lossy(&bytes).matches("HTTP/1.1 ").count() < n
        || !bytes.ends_with(b"ok\n")
    {
        let got = s.read(&mut buf).unwrap();
        assert!(got > 0, "the server closed early: {}", String::from_utf8_lossy(&bytes));
        bytes.extend_from_slice(&buf[..got]);
    }
    Got { bytes, close_notify: false }
}

/// Sixteen pipelined requests in one record come back in order; a request sent a TLS record
/// per byte is answered; a bad request gets its 400, then the server's close_notify (sent
/// before its writing side shuts down) ends the connection.
fn pipelined_trickled_and_a_400_with_close_notify(io: IoChoice) {
    let h = https(io, |_| {});
    let mut s = h.connect();
    let mut req = Vec::new();
    for i in 0..16 {
        req.extend_from_slice(
            format!("GET /?c={} HTTP/1.1\r\nHost: t\r\n\r\n", 200 + i).as_bytes(),
        );
    }
    s.write_all(&req).unwrap();
    s.flush().unwrap();
    let got = read_responses(&mut s, 16);
    assert_eq!(got.statuses(), (200..216).collect::<Vec<u16>>());
    for b in b"GET /?c=299 HTTP/1.1\r\nHost: t\r\n\r\n" {
        // Each write is a record of its own.
        s.write_all(&[*b]).unwrap();
        s.flush().unwrap();
    }
    assert_eq!(read_responses(&mut s, 1).statuses(), vec![299]);
    s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n").unwrap();
    s.flush().unwrap();
    let end = read_to_end(&mut s);
    assert_eq!(end.statuses(), vec![400], "{}", end.text());
    assert!(end.close_notify, "the server ended TLS with close_notify");
    let totals = h.server.stop();
    assert_eq!((totals.requests, totals.rejected, totals.tls_failures), (17, 1, 0));
}

/// A 5 MB body and a chunked one arrive intact through TLS records.
fn large_bodies_stream_intact(io: IoChoice) {
    let h = https(io, |_| {});
    for (q, len) in [("s=5000000", 5_000_000usize), ("s=100000&chunked=1", 100_000)] {
        let mut s = h.connect();
        s.write_all(
            format!("GET /?{q} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
        s.flush().unwrap();
        let got = read_to_end(&mut s);
        support::assert_large_body(&got.bytes, q, len);
    }
}

/// curl, h2load and qpslab load (keep-alive, and a connection per request with resumption)
/// against one server: every request each client counts is one the server counts, exactly.
fn real_clients_counts_match(io: IoChoice) {
    let h = https(io, |o| o.workers = Some(2));
    let ca = h.ca.to_str().unwrap();
    let out = Command::new("timeout")
        .args(["20", "curl", "-s", "--cacert", ca, "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(h.url("/"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
    let out = Command::new("timeout")
        .args(["30", "h2load", "--h1", "-n", "1000", "-c", "10"])
        .arg(h.url("/"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("1000 succeeded, 0 failed"), "{text}");
    for (requests, per_request) in [(3000, false), (400, true)] {
        let mut o = qpslab_load::LoadOptions {
            urls: vec![h.url("/")],
            threads: Some(1),
            connections: Some(20),
            requests: Some(requests),
            conn_per_request: per_request,
            ..qpslab_load::LoadOptions::default()
        };
        o.tls.cacert = Some(qpslab_load::options::FileText {
            name: ca.into(),
            text: std::fs::read_to_string(ca).unwrap(),
        });
        o.tls.reuse = per_request;
        let cfg = qpslab_load::LoadConfig::from_options(&o).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let r = qpslab_load::run(&cfg, &stop, &mut qpslab_load::feed::Unwatched).unwrap();
        assert_eq!((r.rec.ok, r.rec.failed), (requests, 0), "per request: {per_request}");
    }
    let totals = h.server.stop();
    assert_eq!(totals.requests, 1 + 1000 + 3000 + 400);
    assert_eq!(totals.tls_failures, 0);
}

/// Plain HTTP sent to the HTTPS port: a TLS alert comes back, the connection is closed and
/// counted as a TLS failure, and HTTPS is still served.
fn plain_http_to_the_https_port_gets_an_alert(io: IoChoice) {
    let h = https(io, |_| {});
    let mut s = TcpStream::connect(h.addr()).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let e = read_all(&mut s, Duration::from_secs(3));
    assert!(e.closed, "closed");
    assert_eq!(e.bytes.first(), Some(&0x15), "an alert record: {:?}", e.bytes);
    let mut s = h.connect();
    s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
    s.flush().unwrap();
    assert_eq!(read_to_end(&mut s).statuses(), vec![200]);
    let totals = h.server.stop();
    assert_eq!((totals.requests, totals.tls_failures), (1, 1));
}

qpslab_testkit::on_both_loops!(
    pipelined_trickled_and_a_400_with_close_notify,
    large_bodies_stream_intact,
    real_clients_counts_match,
    plain_http_to_the_https_port_gets_an_alert,
);
