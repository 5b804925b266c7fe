//! The h3 crate's HTTP/3 server over quinn on one tokio thread, answering every request with
//! 200 and "ok\n": the peer server for qpslab's HTTP/3 measurements. A self-signed certificate
//! for 127.0.0.1 is made at start (clients take it with -k). Prints "ready PORT".
//! Usage: h3-server [PORT]

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;

fn main() {
    let port: u16 = std::env::args().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(serve(port));
}

async fn serve(port: u16) {
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
        .expect("params")
        .self_signed(&key)
        .expect("cert");
    // ring, as qpslab uses (this rustls deprecates it for lacking post-quantum key exchange).
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("tls 1.3")
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .expect("certificate");
    tls.alpn_protocols = vec![b"h3".to_vec()];
    tls.max_early_data_size = u32::MAX;
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls).expect("quic tls");
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport.max_concurrent_bidi_streams(1024u32.into());
    config.transport_config(Arc::new(transport));
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let endpoint = quinn::Endpoint::server(config, addr).expect("bind");
    println!("ready {}", endpoint.local_addr().expect("addr").port());
    while let Some(incoming) = endpoint.accept().await {
        tokio::spawn(async move {
            let Ok(conn) = incoming.await else { return };
            let Ok(mut h3) =
                h3::server::Connection::<_, Bytes>::new(h3_quinn::Connection::new(conn)).await
            else {
                return;
            };
            while let Ok(Some(resolver)) = h3.accept().await {
                tokio::spawn(async move {
                    let Ok((_req, mut stream)) = resolver.resolve_request().await else { return };
                    let resp = http::Response::builder().status(200).body(()).expect("response");
                    if stream.send_response(resp).await.is_ok()
                        && stream.send_data(Bytes::from_static(b"ok\n")).await.is_ok()
                    {
                        let _ = stream.finish().await;
                    }
                });
            }
        });
    }
}
