//! HTTPS for `serve`: the server's TLS set-up, from certificate and key files or a
//! certificate made in memory at start (`--tls-self-signed`), shared by every worker. Each
//! connection's TLS runs inside its worker's loop (epoll or io_uring), through the transport
//! both sides share (`qpslab_tls::Pump`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::ServerSessionMemoryCache;
use rustls::ServerConfig;
use sha2::{Digest, Sha256};

use qpslab_sys::config_error::ConfigError;

/// Where the server's certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsSource {
    /// PEM files: the certificate chain (server first) and its private key.
    Files { cert: PathBuf, key: PathBuf },
    /// Made at start for `localhost` and the listen addresses; its fingerprint is printed.
    SelfSigned,
}

/// The server's TLS set-up.
#[derive(Debug, Clone)]
pub struct ServerTls {
    pub config: Arc<ServerConfig>,
    /// SHA-256 of the server certificate (DER), `AB:CD:...`: what a client pins.
    pub fingerprint: String,
    pub self_signed: bool,
    /// The names the self-signed certificate is for.
    pub names: Vec<String>,
}

/// Sessions a worker remembers for resumption by session ID (TLS 1.2); tickets need no memory.
const SESSION_CACHE: usize = 65536;

impl ServerTls {
    /// With `client_ca`, every client must present a certificate signed by a CA of that PEM
    /// file (mutual TLS); one without, or with another, is refused in the handshake.
    pub fn new(
        source: &TlsSource,
        listen: &[SocketAddr],
        client_ca: Option<&Path>,
    ) -> Result<ServerTls, ConfigError> {
        let (chain, key, names) = match source {
            TlsSource::Files { cert, key } => (read_chain(cert)?, read_key(key)?, Vec::new()),
            TlsSource::SelfSigned => self_signed(listen)?,
        };
        let fingerprint = fingerprint(&chain[0]);
        let flag = if matches!(source, TlsSource::Files { .. }) {
            "--tls-key"
        } else {
            "--tls-self-signed"
        };
        let provider = Arc::new(qpslab_tls::provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| ConfigError::new(flag, e.to_string()))?;
        let builder = match client_ca {
            Some(ca) => builder.with_client_cert_verifier(client_verifier(ca, provider)?),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_single_cert(chain, key).map_err(|e| {
            ConfigError::new(flag, format!("{e}; give the private key of the certificate"))
        })?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        config.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE);
        config.ticketer = rustls::crypto::ring::Ticketer::new()
            .map_err(|e| ConfigError::new(flag, format!("session tickets: {e}")))?;
        Ok(ServerTls {
            config: Arc::new(config),
            fingerprint,
            self_signed: *source == TlsSource::SelfSigned,
            names,
        })
    }
}

impl ServerTls {
    /// `--h3`: QUIC's server set-up from the HTTPS one (ALPN `h3`, TLS 1.3, tickets that
    /// allow 0-RTT early data), with the stream
    /// limits (`streams` request streams: `--h2-streams`; the peer's unidirectional streams)
    /// and `idle` (`--idle-timeout`) as QUIC's idle timeout.
    pub fn quic(
        &self,
        streams: usize,
        idle: std::time::Duration,
    ) -> Result<Arc<quinn_proto::ServerConfig>, ConfigError> {
        let mut tls = (*self.config).clone();
        tls.alpn_protocols = vec![b"h3".to_vec()];
        // 0-RTT: a resuming client's first requests are taken with its first flight (QUIC
        // allows all or nothing here). rustls takes early data only with sessions kept here
        // (each resumed once), not in tickets the client holds. A benchmark target answers
        // replays as any request.
        tls.max_early_data_size = u32::MAX;
        tls.ticketer = Arc::new(NoTickets);
        let crypto = quinn_proto::crypto::rustls::QuicServerConfig::try_from(Arc::new(tls))
            .map_err(|e| ConfigError::new("--h3", format!("QUIC needs TLS 1.3: {e}")))?;
        let mut transport = quinn_proto::TransportConfig::default();
        let streams =
            quinn_proto::VarInt::from_u64(streams as u64).unwrap_or(quinn_proto::VarInt::MAX);
        transport.max_concurrent_bidi_streams(streams);
        let uni = quinn_proto::VarInt::from_u64(qpslab_quic::peer::MAX_UNI).unwrap_or_default();
        transport.max_concurrent_uni_streams(uni);
        transport.max_idle_timeout(quinn_proto::IdleTimeout::try_from(idle).ok());
        let mut config = quinn_proto::ServerConfig::with_crypto(Arc::new(crypto));
        config.transport_config(Arc::new(transport));
        Ok(Arc::new(config))
    }
}

/// Sessions are resumed from the server's own cache, not from tickets the client keeps.
#[derive(Debug)]
struct NoTickets;

impl rustls::server::ProducesTickets for NoTickets {
    fn enabled(&self) -> bool {
        false
    }

    fn lifetime(&self) -> u32 {
        0
    }

    fn encrypt(&self, _plain: &[u8]) -> Option<Vec<u8>> {
        None
    }

    fn decrypt(&self, _cipher: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

/// Clients must present a certificate chained to a CA of the PEM file at `ca`.
fn client_verifier(
    ca: &Path,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, ConfigError> {
    let err = |what: String| {
        ConfigError::new(
            "--tls-client-ca",
            format!(
                "{}: {what}; give a PEM file of the CA certificates clients' certificates chain to",
                ca.display()
            ),
        )
    };
    let mut roots = rustls::RootCertStore::empty();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(ca)
        .map_err(|e| err(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| err(e.to_string()))?;
    if certs.is_empty() {
        return Err(err("no certificate in it".into()));
    }
    for c in certs {
        roots.add(c).map_err(|e| err(e.to_string()))?;
    }
    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| err(e.to_string()))
}

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let err = |what: String| {
        ConfigError::new(
            "--tls-cert",
            format!("{}: {what}; give a PEM certificate file", path.display()),
        )
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| err(e.to_string()))?;
    if chain.is_empty() {
        return Err(err("no certificate in it".into()));
    }
    Ok(chain)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, ConfigError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| {
        ConfigError::new(
            "--tls-key",
            format!("{}: {e}; give the certificate's private key in PEM", path.display()),
        )
    })
}

type Made = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>, Vec<String>);

fn self_signed(listen: &[SocketAddr]) -> Result<Made, ConfigError> {
    let mut names = vec!["localhost".to_string()];
    for a in listen {
        let ip = a.ip();
        if !ip.is_unspecified() && !names.contains(&ip.to_string()) {
            names.push(ip.to_string());
        }
    }
    let made = rcgen::generate_simple_self_signed(names.clone())
        .map_err(|e| ConfigError::new("--tls-self-signed", e.to_string()))?;
    let key = PrivateKeyDer::try_from(made.key_pair.serialize_der())
        .map_err(|e| ConfigError::new("--tls-self-signed", e.to_string()))?;
    Ok((vec![made.cert.der().clone()], key, names))
}

fn fingerprint(cert: &CertificateDer<'_>) -> String {
    let digest = Sha256::digest(cert.as_ref());
    digest.iter().map(|b| format!("{b:02X}")).collect::<Vec<_>>().join(":")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn a_self_signed_certificate_names_localhost_and_the_listen_addresses() {
        let listen = ["127.0.0.2:8443".parse().unwrap(), "0.0.0.0:443".parse().unwrap()];
        let t = ServerTls::new(&TlsSource::SelfSigned, &listen, None).unwrap();
        assert_eq!(t.names, ["localhost", "127.0.0.2"]);
        assert_eq!(t.fingerprint.len(), 32 * 3 - 1, "{}", t.fingerprint);
        assert!(t.self_signed);
    }

    #[test]
    fn unreadable_or_mismatched_files_name_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let missing =
            TlsSource::Files { cert: dir.path().join("c.pem"), key: dir.path().join("k.pem") };
        assert_eq!(ServerTls::new(&missing, &[], None).unwrap_err().flag, "--tls-cert");
        let a = rcgen::generate_simple_self_signed(vec!["a".into()]).unwrap();
        let b = rcgen::generate_simple_self_signed(vec!["b".into()]).unwrap();
        std::fs::write(dir.path().join("c.pem"), a.cert.pem()).unwrap();
        std::fs::write(dir.path().join("k.pem"), "nothing").unwrap();
        let files =
            TlsSource::Files { cert: dir.path().join("c.pem"), key: dir.path().join("k.pem") };
        assert_eq!(ServerTls::new(&files, &[], None).unwrap_err().flag, "--tls-key");
        std::fs::write(dir.path().join("k.pem"), b.key_pair.serialize_pem()).unwrap();
        let e = ServerTls::new(&files, &[], None).unwrap_err();
        assert_eq!(e.flag, "--tls-key", "a key of another certificate: {e}");
        std::fs::write(dir.path().join("k.pem"), a.key_pair.serialize_pem()).unwrap();
        assert!(ServerTls::new(&files, &[], None).is_ok());
    }
}
