//! HTTPS: the client TLS set-up of a run (rustls), built once from the options and shared by
//! every connection, and the classes of TLS failures the report tells apart.
//!
//! The connections themselves drive rustls' sans-I/O state machine inside the load threads'
//! own loops (`worker`); nothing here touches a socket.

use std::collections::{HashMap, VecDeque};

use std::sync::{Arc, Mutex};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{
    ClientSessionStore, Resumption, Tls12ClientSessionValue, Tls13ClientSessionValue,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, NamedGroup, RootCertStore, SignatureScheme};

use qpslab_sys::config_error::ConfigError;

/// A TLS protocol version (`--tls-version`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TlsVersion {
    #[serde(rename = "1.2")]
    V1_2,
    #[serde(rename = "1.3")]
    V1_3,
}

impl TlsVersion {
    pub fn parse(text: &str) -> Result<TlsVersion, ConfigError> {
        match text.trim() {
            "1.2" => Ok(TlsVersion::V1_2),
            "1.3" => Ok(TlsVersion::V1_3),
            other => Err(ConfigError::new(
                "--tls-version",
                format!("{other:?} is not a TLS version qpslab offers; use 1.2 or 1.3"),
            )),
        }
    }

    /// [`TlsVersion::parse`] for the command line.
    pub fn from_arg(text: &str) -> Result<TlsVersion, String> {
        Self::parse(text).map_err(|e| e.message)
    }

    pub fn name(self) -> &'static str {
        match self {
            TlsVersion::V1_2 => "1.2",
            TlsVersion::V1_3 => "1.3",
        }
    }
}

/// The TLS options as the user gave them (part of [`crate::LoadOptions`]).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, clap::Args)]
#[serde(default)]
pub struct TlsOptions {
    /// https: do not verify the server's certificate (the summary says so)
    #[arg(long, short = 'k')]
    pub insecure: bool,

    /// https: trust the CA certificates in this PEM file instead of the system's roots (a
    /// server certificate that is itself in the file is trusted as given, as curl does)
    #[arg(long, value_name = "FILE", value_parser = crate::file_text::FileText::from_arg)]
    pub cacert: Option<crate::file_text::FileText>,

    /// https: the server name to send (SNI) and verify, instead of the URL's host
    #[arg(long, value_name = "NAME")]
    pub sni: Option<String>,

    /// https: hold the connections to one TLS version, 1.2 or 1.3 [default: either, the server
    /// picks]
    #[arg(id = "tls_version", long = "tls-version", value_name = "1.2|1.3", value_parser = TlsVersion::from_arg)]
    #[serde(rename = "tls-version")]
    pub version: Option<TlsVersion>,

    /// https: resume TLS sessions (tickets, PSK) on new connections instead of a full
    /// handshake each; the report counts full and resumed handshakes
    #[arg(id = "tls_reuse", long = "tls-reuse")]
    #[serde(rename = "tls-reuse")]
    pub reuse: bool,

    /// https: only these cipher suites, in this order, comma-separated IANA names (e.g.
    /// TLS13_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256) [default: rustls's,
    /// AES-128-GCM first as browsers offer them]
    #[arg(long, value_name = "LIST")]
    pub ciphers: Option<String>,

    /// https: present this client certificate chain (PEM) when the server asks for one
    /// (mutual TLS, as curl --cert); needs --key
    #[arg(long, value_name = "FILE", requires = "key", value_parser = crate::file_text::FileText::from_arg)]
    pub cert: Option<crate::file_text::FileText>,

    /// https: the private key (PEM) of --cert
    #[arg(long, value_name = "FILE", requires = "cert", value_parser = crate::file_text::FileText::from_arg)]
    pub key: Option<crate::file_text::FileText>,

    /// HTTP/3: send a resumed connection's first requests in its first flight (0-RTT early
    /// data) when the server's ticket allows it; implies --tls-reuse. The report counts the
    /// handshakes whose early data the server took and those it refused (their requests go
    /// again once the handshake is done)
    #[arg(id = "zero_rtt", long = "0rtt")]
    #[serde(rename = "0rtt")]
    pub zero_rtt: bool,
}

impl TlsOptions {
    /// Any TLS option was given.
    pub fn given(&self) -> bool {
        self.insecure
            || self.cacert.is_some()
            || self.sni.is_some()
            || self.version.is_some()
            || self.reuse
            || self.ciphers.is_some()
            || self.cert.is_some()
            || self.zero_rtt
    }
}

/// What the threads share: the client configuration and the name every connection of a target
/// verifies.
#[derive(Debug, Clone)]
pub struct TlsClient {
    pub config: Arc<ClientConfig>,
    pub insecure: bool,
    pub reuse: bool,
    pub version: Option<TlsVersion>,
    /// A client certificate is presented (`--cert`).
    pub client_cert: bool,
    /// `--tls-reuse`: the sessions kept for resumption.
    sessions: Option<Arc<Sessions>>,
}

/// TLS 1.3 tickets kept per server name for `--tls-reuse` (each is used once).
const TICKETS_PER_SERVER: usize = 65536;

/// `--tls-reuse`: what the run's connections remember for resumption, per server name.
/// rustls' own store keeps at most 8 TLS 1.3 tickets per server, and a ticket is single-use:
/// with more connections opening at once than that, handshakes went full for want of one (a
/// third of them at 50 connections against a rustls server). This store keeps up to
/// [`TICKETS_PER_SERVER`], newest used first.
#[derive(Default)]
struct Sessions {
    servers: Mutex<HashMap<ServerName<'static>, Remembered>>,
}

#[derive(Default)]
struct Remembered {
    kx: Option<NamedGroup>,
    tls12: Option<Tls12ClientSessionValue>,
    tls13: VecDeque<Tls13ClientSessionValue>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sessions")
    }
}

impl Sessions {
    fn with<R>(&self, f: impl FnOnce(&mut HashMap<ServerName<'static>, Remembered>) -> R) -> R {
        // A panic elsewhere while holding the lock leaves a map that is still consistent.
        f(&mut self.servers.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

impl ClientSessionStore for Sessions {
    fn set_kx_hint(&self, server: ServerName<'static>, group: NamedGroup) {
        self.with(|m| m.entry(server).or_default().kx = Some(group));
    }

    fn kx_hint(&self, server: &ServerName<'_>) -> Option<NamedGroup> {
        self.with(|m| m.get(&server.to_owned()).and_then(|r| r.kx))
    }

    fn set_tls12_session(&self, server: ServerName<'static>, value: Tls12ClientSessionValue) {
        self.with(|m| m.entry(server).or_default().tls12 = Some(value));
    }

    fn tls12_session(&self, server: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
        self.with(|m| m.get(&server.to_owned()).and_then(|r| r.tls12.clone()))
    }

    fn remove_tls12_session(&self, server: &ServerName<'static>) {
        self.with(|m| {
            if let Some(r) = m.get_mut(server) {
                r.tls12 = None;
            }
        });
    }

    fn insert_tls13_ticket(&self, server: ServerName<'static>, value: Tls13ClientSessionValue) {
        TICKETS_RECEIVED.set(TICKETS_RECEIVED.get() + 1);
        self.with(|m| {
            let tickets = &mut m.entry(server).or_default().tls13;
            if tickets.len() == TICKETS_PER_SERVER {
                tickets.pop_front();
            }
            tickets.push_back(value);
        });
    }

    fn take_tls13_ticket(&self, server: &ServerName<'static>) -> Option<Tls13ClientSessionValue> {
        self.with(|m| m.get_mut(server).and_then(|r| r.tls13.pop_back()))
    }
}

impl TlsClient {
    /// `--tls-reuse`: TLS 1.3 tickets held now for resumption, of every server.
    pub fn tickets_held(&self) -> usize {
        self.sessions.as_ref().map_or(0, |s| s.with(|m| m.values().map(|r| r.tls13.len()).sum()))
    }

    /// The configuration for a run with these options.
    pub fn new(o: &TlsOptions, h2: bool) -> Result<TlsClient, ConfigError> {
        let mut provider = qpslab_tls::provider();
        match &o.ciphers {
            Some(list) => provider.cipher_suites = cipher_suites(list, &provider.cipher_suites)?,
            None => browser_order(&mut provider.cipher_suites),
        }
        let provider = Arc::new(provider);
        let versions: &[&rustls::SupportedProtocolVersion] = match o.version {
            Some(TlsVersion::V1_2) => &[&rustls::version::TLS12],
            Some(TlsVersion::V1_3) => &[&rustls::version::TLS13],
            None => &[&rustls::version::TLS13, &rustls::version::TLS12],
        };
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)
            .map_err(|e| {
                let flag = if o.ciphers.is_some() { "--ciphers" } else { "--tls-version" };
                ConfigError::new(flag, format!("{e}: no cipher suite given fits the TLS version"))
            })?;
        let identity = match (&o.cert, &o.key) {
            (Some(cert), Some(key)) => Some(client_identity(cert, key, &provider)?),
            _ => None,
        };
        let verifier = if o.insecure {
            Verifier { chain: None, given: Vec::new(), provider }
        } else {
            let (store, given) = roots(o.cacert.as_ref())?;
            let chain = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(store),
                provider.clone(),
            )
            .build()
            .map_err(|e| ConfigError::new("--cacert", e.to_string()))?;
            Verifier { chain: Some(chain), given, provider }
        };
        let builder = builder.dangerous().with_custom_certificate_verifier(Arc::new(verifier));
        let mut config = match identity {
            Some(identity) => {
                builder.with_client_cert_resolver(Arc::new(ClientIdentity(Arc::new(identity))))
            }
            None => builder.with_no_client_auth(),
        };
        // With --h2, h2 first (the server's pick is checked after the handshake).
        config.alpn_protocols = if h2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        let sessions = (o.reuse || o.zero_rtt).then(|| Arc::new(Sessions::default()));
        config.resumption = match &sessions {
            Some(s) => Resumption::store(s.clone()),
            None => Resumption::disabled(),
        };
        Ok(TlsClient {
            config: Arc::new(config),
            insecure: o.insecure,
            reuse: o.reuse || o.zero_rtt,
            version: o.version,
            client_cert: o.cert.is_some(),
            sessions,
        })
    }
}

/// The client's certificate, presented whenever the server asks. Whether it is acceptable
/// is the server's call: it is sent as given (an X.509 v1 certificate, as `openssl x509 -req`
/// makes without extensions, included), as curl and browsers send theirs.
#[derive(Debug)]
struct ClientIdentity(Arc<rustls::sign::CertifiedKey>);

impl rustls::client::ResolvesClientCert for ClientIdentity {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// `--cert`'s chain and `--key`'s key, checked to belong together (the key's public half is
/// the certificate's), each refused with its flag named.
fn client_identity(
    cert: &crate::file_text::FileText,
    key: &crate::file_text::FileText,
    provider: &rustls::crypto::CryptoProvider,
) -> Result<rustls::sign::CertifiedKey, ConfigError> {
    let (chain, key_der) = client_pem(cert, key)?;
    let spki = subject_public_key_info(&chain[0]).map_err(|e| {
        ConfigError::new(
            "--cert",
            format!(
                "{}: its first certificate is not X.509 ({e}); give a PEM certificate file",
                cert.name
            ),
        )
    })?;
    let signer = provider.key_provider.load_private_key(key_der).map_err(|e| {
        ConfigError::new(
            "--key",
            format!(
                "{}: {e}; give the certificate's private key (RSA, ECDSA or Ed25519)",
                key.name
            ),
        )
    })?;
    if signer.public_key().is_some_and(|public| public.as_ref() != spki.as_slice()) {
        return Err(ConfigError::new(
            "--key",
            format!(
                "{} is not the key of --cert {} (their public keys differ); give the private \
                 key the certificate was made for",
                key.name, cert.name
            ),
        ));
    }
    Ok(rustls::sign::CertifiedKey::new(chain, signer))
}

/// The DER of a certificate's subjectPublicKeyInfo, read by position (RFC 5280 4.1: the
/// seventh field of the TBSCertificate, after the optional version), so every version reads.
fn subject_public_key_info(cert: &[u8]) -> Result<Vec<u8>, yasna::ASN1Error> {
    yasna::parse_der(cert, |r| {
        r.read_sequence(|r| {
            let spki = r.next().read_sequence(|tbs| {
                tbs.read_optional(|r| r.read_tagged(yasna::Tag::context(0), |r| r.read_der()))?;
                // serialNumber, signature, issuer, validity, subject.
                for _ in 0..5 {
                    tbs.next().read_der()?;
                }
                let spki = tbs.next().read_der()?;
                // issuerUniqueID, subjectUniqueID, extensions.
                while tbs.read_optional(|r| r.read_der())?.is_some() {}
                Ok(spki)
            })?;
            r.next().read_der()?; // signatureAlgorithm
            r.next().read_der()?; // signatureValue
            Ok(spki)
        })
    })
}

/// `--cert`'s chain and `--key`'s key as PEM files hold them, each refused with its flag named.
fn client_pem(
    cert: &crate::file_text::FileText,
    key: &crate::file_text::FileText,
) -> Result<(Vec<CertificateDer<'static>>, rustls::pki_types::PrivateKeyDer<'static>), ConfigError>
{
    use rustls::pki_types::pem::PemObject as _;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.text.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| {
            ConfigError::new("--cert", format!("{}: {e}; give a PEM certificate file", cert.name))
        })?;
    if chain.is_empty() {
        return Err(ConfigError::new(
            "--cert",
            format!("{}: no certificate in it; give a PEM certificate file", cert.name),
        ));
    }
    let key_der =
        rustls::pki_types::PrivateKeyDer::from_pem_slice(key.text.as_bytes()).map_err(|e| {
            ConfigError::new(
                "--key",
                format!("{}: {e}; give the certificate's private key in PEM", key.name),
            )
        })?;
    Ok((chain, key_der))
}

/// How long the preflight waits after its handshake for a server's verdict on the client's
/// certificate (TLS 1.3 servers give it after the client's last handshake message).
const CLIENT_CERT_VERDICT: std::time::Duration = std::time::Duration::from_millis(300);

/// Why `--h2` cannot go on a server that chose `alpn` (not h2) in the TLS handshake.
pub fn not_h2(alpn: Option<&[u8]>) -> String {
    let chose = alpn.map_or("no protocol".into(), |p| String::from_utf8_lossy(p).into_owned());
    format!(
        "the server chose {chose} over ALPN, not h2: it does not serve HTTP/2 over TLS here; \
         drop --h2"
    )
}

/// One full handshake with the run's configuration (no session kept) on `sock`, before the
/// run: a certificate that does not verify, a version or suite the server does not offer,
/// plain HTTP on an https:// URL, or (with `h2`) a server that does not choose h2 over ALPN
/// is a set-up error to say at once, not a failure to count on every connection of the run.
/// Returns the reason, as the report words it.
pub fn handshake_once(
    tls: &TlsClient,
    name: &ServerName<'static>,
    mut sock: socket2::Socket,
    (wait, h2): (std::time::Duration, bool),
) -> Result<(), String> {
    let mut config = (*tls.config).clone();
    config.resumption = Resumption::disabled();
    let mut conn =
        rustls::ClientConnection::new(Arc::new(config), name.clone()).map_err(|e| describe(&e))?;
    let _ = sock.set_read_timeout(Some(wait));
    let _ = sock.set_write_timeout(Some(wait));
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut sock) {
            let tls_error = e.get_ref().and_then(|x| x.downcast_ref::<rustls::Error>());
            return Err(match tls_error {
                Some(t) => describe(t),
                None if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
                {
                    format!(
                        "TLS handshake failure: no handshake within {:?} (is this a TLS server?)",
                        wait
                    )
                }
                None => format!(
                    "TLS handshake failure: {} (the server closed the connection: is this an \
                     http:// server on an https:// URL?)",
                    qpslab_sys::net::message(&e)
                ),
            });
        }
    }
    if conn.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3) {
        // TLS 1.3: a server judges the client's certificate (or its lack) after the client's
        // last handshake message; a refusal is an alert on the first read. A server that
        // takes it sends its session tickets, or nothing.
        let _ = sock.set_read_timeout(Some(CLIENT_CERT_VERDICT.min(wait)));
        if let Err(e) = conn.complete_io(&mut sock) {
            if let Some(t) = e.get_ref().and_then(|x| x.downcast_ref::<rustls::Error>()) {
                return Err(if tls.client_cert {
                    format!("the server refused the client certificate (--cert): {}", describe(t))
                } else {
                    format!("{} (does the server ask for a client certificate? give --cert FILE --key FILE)", describe(t))
                });
            }
        }
    }
    if h2 && conn.alpn_protocol() != Some(b"h2") {
        return Err(not_h2(conn.alpn_protocol()));
    }
    conn.send_close_notify();
    let _ = conn.complete_io(&mut sock);
    Ok(())
}

/// Without `--ciphers`: AES-128-GCM first in each TLS version, as Chrome, Firefox and Go's
/// crypto/tls offer them (rustls offers AES-256-GCM first, as OpenSSL does). A server that
/// follows the client's order (nginx's default, rustls's) then does what browser traffic
/// makes it do, and a QUIC or TLS 1.3 handshake hashes with SHA-256, which this CPU has
/// instructions for (SHA-384 was 14% of `load --h3 --conn-per-request`'s CPU).
fn browser_order(suites: &mut [rustls::SupportedCipherSuite]) {
    use rustls::CipherSuite as C;
    let aes128 = [
        C::TLS13_AES_128_GCM_SHA256,
        C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ];
    suites.sort_by_key(|s| (s.tls13().is_none(), !aes128.contains(&s.suite())));
}

/// The suites of `list` (comma-separated IANA names, as `TLS13_AES_128_GCM_SHA256` or
/// `TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256`), in the order given.
fn cipher_suites(
    list: &str,
    all: &[rustls::SupportedCipherSuite],
) -> Result<Vec<rustls::SupportedCipherSuite>, ConfigError> {
    let name = |s: &rustls::SupportedCipherSuite| format!("{:?}", s.suite());
    list.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| {
            all.iter().find(|s| name(s).eq_ignore_ascii_case(n)).copied().ok_or_else(|| {
                let known: Vec<String> = all.iter().map(name).collect();
                ConfigError::new(
                    "--ciphers",
                    format!(
                        "{n:?} is not a cipher suite qpslab offers; give some of {}",
                        known.join(", ")
                    ),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .and_then(|v| {
            if v.is_empty() {
                Err(ConfigError::new("--ciphers", "no cipher suite given"))
            } else {
                Ok(v)
            }
        })
}

/// A TLS server name as text (a DNS name, or an IP address as written).
pub fn name_text(name: &ServerName<'static>) -> String {
    match name {
        ServerName::DnsName(d) => d.as_ref().to_string(),
        ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
        _ => String::new(),
    }
}

/// The name a target's connections send (SNI) and verify: `--sni`, else the URL's host (an IP
/// address is verified against the certificate's IP addresses and sends no SNI).
pub fn server_name(host: &str, sni: Option<&str>) -> Result<ServerName<'static>, ConfigError> {
    let (flag, name) = match sni {
        Some(s) => ("--sni", s),
        None => ("URL", host.trim_start_matches('[').trim_end_matches(']')),
    };
    ServerName::try_from(name.to_string()).map_err(|e| {
        ConfigError::new(flag, format!("{name:?} is not a valid TLS server name: {e}"))
    })
}

/// The roots to verify against, and the certificates `--cacert` gave (as given).
fn roots(
    cacert: Option<&crate::file_text::FileText>,
) -> Result<(RootCertStore, Vec<CertificateDer<'static>>), ConfigError> {
    let mut store = RootCertStore::empty();
    let mut given = Vec::new();
    match cacert {
        Some(file) => {
            let err = |what: String| {
                ConfigError::new(
                    "--cacert",
                    format!("{}: {what}; give a PEM file of CA certificates", file.name),
                )
            };
            let certs: Vec<CertificateDer<'static>> =
                CertificateDer::pem_slice_iter(file.text.as_bytes())
                    .collect::<Result<_, _>>()
                    .map_err(|e| err(e.to_string()))?;
            if certs.is_empty() {
                return Err(err("no certificate in it".into()));
            }
            for c in &certs {
                store.add(c.clone()).map_err(|e| err(e.to_string()))?;
            }
            given = certs;
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
            if store.is_empty() {
                return Err(ConfigError::new(
                    "--cacert",
                    "no trusted root certificates found on this system (install \
                     ca-certificates); give --cacert FILE or --insecure",
                ));
            }
        }
    }
    Ok((store, given))
}

/// Verification as curl users have it: the chain to a trusted root (webpki), or, when the
/// server's certificate is itself one of those `--cacert` gave (a self-signed test
/// certificate made with `openssl req -x509`, which marks it a CA), that certificate trusted
/// as given, its name and validity still checked. With `--insecure` (no chain) any
/// certificate is taken. The handshake's signature is checked against the certificate's key
/// in every case, so an insecure handshake costs what a verifying one does.
#[derive(Debug)]
struct Verifier {
    chain: Option<Arc<rustls::client::WebPkiServerVerifier>>,
    given: Vec<CertificateDer<'static>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

thread_local! {
    /// Server certificates this thread's handshakes checked: a handshake that resumes a
    /// session gets none, so a connection whose handshake checked none was resumed.
    static CERTIFICATES_CHECKED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

thread_local! {
    /// TLS 1.3 session tickets this thread's connections were given (QUIC: a connection per
    /// request waits for one before it closes when none is held).
    static TICKETS_RECEIVED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many session tickets this thread's connections have been given so far.
pub(crate) fn tickets_received() -> u64 {
    TICKETS_RECEIVED.get()
}

/// How many server certificates this thread's handshakes have checked so far (QUIC's
/// handshakes run inside quinn-proto, which does not say whether a session was resumed: the
/// load loop reads this before and after a connection takes its datagrams).
pub(crate) fn certificates_checked() -> u64 {
    CERTIFICATES_CHECKED.get()
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        CERTIFICATES_CHECKED.set(CERTIFICATES_CHECKED.get() + 1);
        let Some(chain) = &self.chain else { return Ok(ServerCertVerified::assertion()) };
        let chained =
            chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now);
        if chained.is_ok() || !self.given.iter().any(|g| g.as_ref() == end_entity.as_ref()) {
            return chained;
        }
        let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_name(&parsed, server_name)?;
        let (from, until) = validity(end_entity.as_ref())
            .ok_or(rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding))?;
        let t = now.as_secs();
        if t < from {
            return Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidYet));
        }
        if t > until {
            return Err(rustls::Error::InvalidCertificate(rustls::CertificateError::Expired));
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// A certificate's validity (notBefore, notAfter) in Unix seconds, from its DER: Certificate
/// SEQUENCE { TBSCertificate SEQUENCE { [0] version?, serial, signature, issuer, validity
/// SEQUENCE { Time, Time } ... } ... }, each Time a UTCTime or a GeneralizedTime.
fn validity(der: &[u8]) -> Option<(u64, u64)> {
    /// One DER element at the start of `b`: (tag, contents, rest).
    fn element(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let (&tag, b) = b.split_first()?;
        let (&first, b) = b.split_first()?;
        let (len, b) = if first < 0x80 {
            (usize::from(first), b)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || b.len() < n {
                return None;
            }
            (b[..n].iter().fold(0usize, |a, &x| (a << 8) | usize::from(x)), &b[n..])
        };
        (b.len() >= len).then(|| (tag, &b[..len], &b[len..]))
    }
    let (_, cert, _) = element(der)?;
    let (_, tbs, _) = element(cert)?;
    let mut rest = tbs;
    let (tag, _, after) = element(rest)?;
    if tag == 0xa0 {
        rest = after; // the explicit version
    }
    for _ in 0..3 {
        rest = element(rest)?.2; // serial, signature algorithm, issuer
    }
    let (_, validity, _) = element(rest)?;
    let (t1, a, rest) = element(validity)?;
    let (t2, b, _) = element(rest)?;
    Some((asn1_time(t1, a)?, asn1_time(t2, b)?))
}

/// UTCTime (`YYMMDDHHMMSSZ`, years 1950-2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`), in
/// Unix seconds.
fn asn1_time(tag: u8, text: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(text).ok()?.strip_suffix('Z')?;
    let (year, s) = match tag {
        0x17 => {
            let yy: i64 = s.get(..2)?.parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, s.get(2..)?)
        }
        0x18 => (s.get(..4)?.parse().ok()?, s.get(4..)?),
        _ => return None,
    };
    let n = |i: usize| -> Option<i64> { s.get(i..i + 2)?.parse().ok() };
    let (month, day, h, m, sec) = (n(0)?, n(2)?, n(4)?, n(6)?, n(8)?);
    // Days from 1970-01-01 to the date (the proleptic Gregorian calendar).
    let (y, mo) = if month <= 2 { (year - 1, month + 9) } else { (year, month - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * mo + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + h * 3600 + m * 60 + sec).ok()
}

/// A TLS failure as the report words it: the class of problem first (certificate, handshake,
/// alert), then rustls' reason.
pub fn describe(e: &rustls::Error) -> String {
    use rustls::Error as E;
    match e {
        E::InvalidCertificate(c) => format!("TLS certificate: {}", certificate_reason(c)),
        E::AlertReceived(a) => format!("TLS alert received from the server: {a:?}"),
        E::PeerIncompatible(p) => format!("TLS handshake failure: incompatible server ({p:?})"),
        E::InvalidMessage(m) => format!(
            "TLS handshake failure: not a TLS answer ({m:?}); is this an http:// server on an \
             https:// URL?"
        ),
        other => format!("TLS handshake failure: {other}"),
    }
}

fn certificate_reason(c: &rustls::CertificateError) -> String {
    use rustls::CertificateError as C;
    match c {
        C::UnknownIssuer => "unknown issuer (not signed by a trusted root; --cacert FILE to \
                             trust its CA, --insecure to skip verification)"
            .into(),
        C::Expired | C::ExpiredContext { .. } => "expired".into(),
        C::NotValidYet | C::NotValidYetContext { .. } => "not valid yet".into(),
        C::NotValidForName | C::NotValidForNameContext { .. } => {
            "name mismatch (the certificate is not for this host; --sni NAME to ask for \
             another name)"
                .into()
        }
        C::Other(o) if o.to_string() == "CaUsedAsEndEntity" => {
            "a CA certificate served as the server's own (give that very certificate with \
             --cacert to trust it as it is, or give the server one signed by that CA)"
                .into()
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn asn1_times_and_a_certificates_validity() {
        assert_eq!(asn1_time(0x17, b"700101000000Z"), Some(0));
        assert_eq!(asn1_time(0x17, b"491231235959Z"), Some(2_524_607_999));
        assert_eq!(asn1_time(0x18, b"20300101000000Z"), Some(1_893_456_000));
        assert_eq!(asn1_time(0x18, b"2030010100000"), None, "no Z");
        let mut params = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2024, 2, 29);
        params.not_after = rcgen::date_time_ymd(2051, 1, 1);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        // 2051 is past UTCTime's range: GeneralizedTime.
        assert_eq!(validity(cert.der()), Some((1_709_164_800, 2_556_144_000)));
        assert_eq!(validity(b"\x30\x03\x30\x01"), None);
    }

    #[test]
    fn versions_and_names_are_checked_with_the_flag_named() {
        assert_eq!(TlsVersion::parse("1.3").unwrap(), TlsVersion::V1_3);
        let e = TlsVersion::parse("1.1").unwrap_err();
        assert_eq!(e.flag, "--tls-version");
        assert!(server_name("127.0.0.1", None).is_ok());
        assert!(server_name("[::1]", None).is_ok());
        assert!(server_name("example.com", Some("other.example")).is_ok());
        assert_eq!(server_name("x", Some("bad name!")).unwrap_err().flag, "--sni");
    }

    #[test]
    fn cipher_suites_are_chosen_by_name_and_must_fit_the_version() {
        let one = |list: &str, version| {
            TlsClient::new(
                &TlsOptions {
                    insecure: true,
                    ciphers: Some(list.into()),
                    version,
                    ..TlsOptions::default()
                },
                false,
            )
        };
        assert!(one("TLS13_AES_128_GCM_SHA256", None).is_ok());
        assert!(one("tls13_chacha20_poly1305_sha256, TLS13_AES_256_GCM_SHA384", None).is_ok());
        let e = one("RC4-MD5", None).unwrap_err();
        assert_eq!(e.flag, "--ciphers");
        assert!(e.message.contains("TLS13_AES_128_GCM_SHA256"), "lists what is offered: {e}");
        let e = one("TLS13_AES_128_GCM_SHA256", Some(TlsVersion::V1_2)).unwrap_err();
        assert_eq!(e.flag, "--ciphers", "{e}");
    }

    #[test]
    fn without_ciphers_aes_128_gcm_comes_first_in_each_version() {
        let c = TlsClient::new(&TlsOptions { insecure: true, ..TlsOptions::default() }, false);
        let names: Vec<String> = c
            .unwrap()
            .config
            .crypto_provider()
            .cipher_suites
            .iter()
            .map(|s| format!("{:?}", s.suite()))
            .collect();
        assert_eq!(names[0], "TLS13_AES_128_GCM_SHA256", "{names:?}");
        assert_eq!(names[1], "TLS13_AES_256_GCM_SHA384", "{names:?}");
        let first12 = names.iter().position(|n| !n.starts_with("TLS13")).unwrap();
        assert!(names[..first12].iter().all(|n| n.starts_with("TLS13")), "{names:?}");
        assert!(names[first12].contains("AES_128_GCM"), "{names:?}");
        assert_eq!(names.len(), qpslab_tls::provider().cipher_suites.len(), "none lost: {names:?}");
    }

    #[test]
    fn a_cacert_file_without_certificates_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("empty.pem");
        std::fs::write(&p, "not a certificate\n").unwrap();
        let file = crate::file_text::FileText::from_arg(p.to_str().unwrap()).unwrap();
        let o = TlsOptions { cacert: Some(file), ..TlsOptions::default() };
        let e = TlsClient::new(&o, false).unwrap_err();
        assert_eq!(e.flag, "--cacert");
        assert!(e.to_string().contains("empty.pem"), "{e}");
        let missing = dir.path().join("missing.pem");
        let e = crate::file_text::FileText::from_arg(missing.to_str().unwrap()).unwrap_err();
        assert!(e.starts_with("cannot read ") && e.contains("missing.pem"), "{e}");
    }
}
