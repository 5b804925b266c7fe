//! The h3 crate's HTTP/3 client over quinn on one tokio thread, a QUIC connection per request:
//! the peer for `load --h3 --conn-per-request` (oha and shb keep their QUIC connections).
//! CONNS tasks each connect to 127.0.0.1:PORT, send GET /, read the answer to its end and
//! close, again and again until SECS pass. The certificate chain is not checked (as `-k`);
//! the server's handshake signature is, as qpslab's `-k` does. With `resume`, rustls's session
//! cache resumes the handshakes (as `--tls-reuse`); without it every one is in full.
//! Prints "RESPONSES FAILED".
//! Usage: h3-client PORT CONNS SECS [resume]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).and_then(|a| a.parse::<u64>().ok());
    let (Some(port), Some(conns), Some(secs)) = (arg(1), arg(2), arg(3)) else {
        eprintln!("usage: h3-client PORT CONNS SECS [resume]");
        std::process::exit(2);
    };
    let resume = args.get(4).is_some_and(|a| a == "resume");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let (ok, failed) = rt.block_on(run(port as u16, conns, Duration::from_secs(secs), resume));
    println!("{ok} {failed}");
}

async fn run(port: u16, conns: u64, secs: Duration, resume: bool) -> (u64, u64) {
    // ring with X25519 first and TLS13_AES_128_GCM_SHA256 first, as qpslab offers them: the
    // comparison is of the clients, not of their suites.
    #[allow(deprecated)]
    let mut provider = rustls::crypto::ring::default_provider();
    provider.kx_groups =
        vec![rustls::crypto::ring::kx_group::X25519, rustls::crypto::ring::kx_group::SECP256R1];
    provider
        .cipher_suites
        .sort_by_key(|s| s.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    let provider = Arc::new(provider);
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("tls 1.3")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Unchecked(provider)))
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    if !resume {
        tls.resumption = rustls::client::Resumption::disabled();
    }
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("quic tls");
    let mut endpoint = quinn::Endpoint::client(([127, 0, 0, 1], 0).into()).expect("bind");
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    let server: SocketAddr = ([127, 0, 0, 1], port).into();
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let end = Instant::now() + secs;
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (endpoint, ok, failed) = (endpoint.clone(), ok.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                let counter = if once(&endpoint, server).await.is_some() { &ok } else { &failed };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    endpoint.wait_idle().await;
    (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed))
}

/// One connection, one request: Some when a 200 came and its body was read to the end.
async fn once(endpoint: &quinn::Endpoint, server: SocketAddr) -> Option<()> {
    let conn = endpoint.connect(server, "localhost").ok()?.await.ok()?;
    let (mut driver, mut send) =
        h3::client::new(h3_quinn::Connection::new(conn.clone())).await.ok()?;
    let drive = tokio::spawn(async move { std::future::poll_fn(|cx| driver.poll_close(cx)).await });
    let req = http::Request::get("https://localhost/").body(()).ok()?;
    let mut stream = send.send_request(req).await.ok()?;
    stream.finish().await.ok()?;
    let resp = stream.recv_response().await.ok()?;
    while stream.recv_data().await.ok()?.is_some() {}
    drop(stream);
    drop(send);
    conn.close(0u32.into(), b"");
    drive.abort();
    (resp.status() == 200).then_some(())
}

/// Accepts any certificate chain; checks the handshake's signature.
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
