//! Test configurations: a self-signed ECDSA P-256 certificate for localhost, and a client that
//! trusts it, both on the crypto provider given (shared by the unit tests, through a path module, and the memory test).

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

#[allow(clippy::unwrap_used, reason = "tests fail loudly")]
pub fn configs(provider: rustls::crypto::CryptoProvider) -> (Arc<ClientConfig>, Arc<ServerConfig>) {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let cert =
        rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap().self_signed(&key).unwrap();
    let der = CertificateDer::from(cert.der().to_vec());
    let provider = Arc::new(provider);
    let server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![der.clone()], PrivateKeyDer::try_from(key.serialize_der()).unwrap())
        .unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(der).unwrap();
    let client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (Arc::new(client), Arc::new(server))
}
