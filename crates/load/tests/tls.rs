//! HTTPS against real nginx with test-made certificates: exact counts against its access log,
//! full and resumed handshakes counted on both sides (`$ssl_session_reused`), and each kind of
//! TLS failure in the `tls` error class with its reason, within the timeout.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use qpslab_load::options::FileText;
use qpslab_load::tls::{TlsOptions, TlsVersion};
use qpslab_load::IoChoice;
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};
use support::nginx::Nginx;
use support::{opts_on, run};

/// A CA and a server certificate it signed.
struct Pki {
    ca_pem: String,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
        Pki::named("qpslab test CA")
    }

    fn named(name: &str) -> Pki {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(rcgen::DnType::CommonName, name);
        let ca_key = KeyPair::generate().unwrap();
        let ca = p.self_signed(&ca_key).unwrap();
        Pki { ca_pem: ca.pem(), ca, ca_key, dir: tempfile::tempdir().unwrap() }
    }

    /// A certificate for `localhost` and 127.0.0.1 (expired long ago when `expired`), and its
    /// key, both PEM.
    fn server(&self, expired: bool) -> (String, String) {
        let mut p = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        p.subject_alt_names.push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
        if expired {
            p.not_before = rcgen::date_time_ymd(2019, 1, 1);
            p.not_after = rcgen::date_time_ymd(2020, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// A client certificate (CN client, for client authentication) and its key, PEM.
    fn client(&self) -> (String, String) {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, "client");
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// `text` in a file of the PKI's directory, as `--cert`/`--key` read it.
    fn file(&self, name: &str, text: &str) -> FileText {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        FileText::from_arg(path.to_str().unwrap()).unwrap()
    }

    /// A PKI and an nginx asking for client certificates signed by its CA.
    fn with_mtls_nginx() -> (Pki, Nginx) {
        let pki = Pki::new();
        let (cert, key) = pki.server(false);
        let nginx = Nginx::start_mtls(&cert, &key, &pki.ca_pem);
        (pki, nginx)
    }

    /// The client's TLS options: this CA trusted, a client certificate of it given.
    fn client_tls(&self) -> TlsOptions {
        let (client, client_key) = self.client();
        TlsOptions {
            cacert: Some(self.ca_file()),
            cert: Some(self.file("client.pem", &client)),
            key: Some(self.file("client.key", &client_key)),
            ..TlsOptions::default()
        }
    }

    fn ca_file(&self) -> FileText {
        let path = self.dir.path().join("ca.pem");
        std::fs::write(&path, &self.ca_pem).unwrap();
        FileText::from_arg(path.to_str().unwrap()).unwrap()
    }
}

fn tls_opts(url: &str, tls: TlsOptions) -> qpslab_load::LoadOptions {
    tls_on(IoChoice::Auto, url, tls)
}

fn tls_on(io: IoChoice, url: &str, tls: TlsOptions) -> qpslab_load::LoadOptions {
    qpslab_load::LoadOptions { tls, ..opts_on(io, url) }
}

/// nginx asking for client certificates (`ssl_verify_client on`): with `--cert` every request
/// is answered and nginx logs each as verified; without one nginx answers every request 400
/// after a good handshake (its way: the refusal is a status, so the run counts bad statuses,
/// not a set-up error).
fn client_certificates_count_exactly_against_nginx(io: IoChoice) {
    let (pki, nginx) = Pki::with_mtls_nginx();
    let with = pki.client_tls();
    let mut o = tls_on(io, &nginx.https_url("/"), with.clone());
    o.requests = Some(1000);
    let report = run(&o);
    assert_eq!(report.requests.ok, 1000);
    let log = nginx.access_log(1000);
    assert_eq!(log.len(), 1000);
    assert!(log.iter().all(|l| l.ends_with(" SUCCESS")), "{:?}", log.first());
    let without = TlsOptions { cert: None, key: None, ..with };
    let mut o = tls_on(io, &nginx.https_url("/"), without);
    o.requests = Some(100);
    let report = run(&o);
    assert_eq!((report.requests.ok, report.status.get("400")), (0, Some(&100)));
    let log = nginx.access_log(1100);
    assert!(
        log[1000..].iter().all(|l| l.starts_with("400 ") && l.ends_with(" NONE")),
        "{:?}",
        log.last()
    );
}

/// A client certificate made the common way, `openssl x509 -req` without extensions (an
/// X.509 v1 certificate, which nginx with `ssl_verify_client on` and curl accept), is sent as
/// given: every request answered, nginx logging each as verified (it was refused before the run
/// with `UnsupportedCertVersion`, blamed on a key that matched). A key that is not the
/// certificate's names both files; a certificate that is not X.509 names its file.
fn an_openssl_v1_client_certificate_is_sent_as_given(io: IoChoice) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl").current_dir(d).args(args).output();
        let out = out.expect("openssl (scripts/test installs it)");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    fn key(name: &str) -> [&str; 6] {
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", name]
    }
    openssl(
        &[&key("ca.key")[..], &["-x509", "-out", "ca.pem", "-subj", "/CN=ca", "-days", "2"]]
            .concat(),
    );
    openssl(&[&key("c.key")[..], &["-out", "c.csr", "-subj", "/CN=client"]].concat());
    openssl(&[
        "x509", "-req", "-in", "c.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-out", "c.pem",
    ]);
    openssl(&[&key("other.key")[..], &["-out", "other.csr", "-subj", "/CN=other"]].concat());
    let text = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(d.join("c.pem"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("Version: 1 (0x0)"), "an X.509 v1 certificate: {text}");
    let pki = Pki::new();
    let (server_cert, server_key) = pki.server(false);
    let ca = std::fs::read_to_string(d.join("ca.pem")).unwrap();
    let nginx = Nginx::start_mtls(&server_cert, &server_key, &ca);
    let file = |name: &str| FileText::from_arg(d.join(name).to_str().unwrap()).unwrap();
    let tls = TlsOptions {
        cacert: Some(pki.ca_file()),
        cert: Some(file("c.pem")),
        key: Some(file("c.key")),
        ..TlsOptions::default()
    };
    let mut o = tls_on(io, &nginx.https_url("/"), tls.clone());
    o.requests = Some(200);
    let report = run(&o);
    assert_eq!(report.requests.ok, 200);
    let log = nginx.access_log(200);
    assert!(log.iter().all(|l| l.ends_with(" SUCCESS")), "{:?}", log.first());

    let refused = |tls: TlsOptions| {
        let o = tls_on(io, &nginx.https_url("/"), tls);
        qpslab_load::LoadConfig::from_options(&o).unwrap_err().to_string()
    };
    let e = refused(TlsOptions { key: Some(file("other.key")), ..tls.clone() });
    assert!(e.contains("--key") && e.contains("other.key is not the key of --cert"), "{e}");
    assert!(e.contains("c.pem"), "{e}");
    std::fs::write(
        d.join("junk.pem"),
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let e = refused(TlsOptions { cert: Some(file("junk.pem")), ..tls });
    assert!(e.contains("--cert") && e.contains("junk.pem") && e.contains("not X.509"), "{e}");
}

/// `--unix-socket`: nginx listening on `unix:` serves HTTP/1.1, HTTP/2 (h2c) and HTTPS with
/// client certificates over it, with exact counts, and logs every request as from `unix:`
/// (none reached its TCP port).
fn over_a_unix_socket_h1_h2_and_mtls_count_exactly_against_nginx(io: IoChoice) {
    let from_unix = |log: &[String]| log.iter().all(|l| l.split(' ').nth(5) == Some("unix:"));
    let plain = Nginx::start();
    let mut o = opts_on(io, "http://localhost/");
    (o.unix_socket, o.requests, o.pipeline) = (Some(plain.unix_socket()), Some(3000), 4);
    let report = run(&o);
    assert_eq!((report.requests.ok, report.requests.failed), (3000, 0));
    assert_eq!(report.config.unix_socket, Some(plain.unix_socket().display().to_string()));
    let log = plain.access_log(3000);
    assert!(log.len() == 3000 && from_unix(&log), "{} {:?}", log.len(), log.first());

    let h2 = Nginx::start_h2(None);
    let mut o = opts_on(io, "http://localhost/");
    (o.unix_socket, o.requests, o.h2, o.streams) = (Some(h2.unix_socket()), Some(3000), true, 8);
    let report = run(&o);
    assert_eq!((report.requests.ok, report.requests.failed), (3000, 0));
    let log = h2.access_log(3000);
    assert!(log.len() == 3000 && from_unix(&log), "{} {:?}", log.len(), log.first());

    let (pki, mtls) = Pki::with_mtls_nginx();
    let mut o = tls_on(io, "https://localhost/", pki.client_tls());
    (o.unix_socket, o.requests) = (Some(mtls.unix_socket()), Some(1000));
    let report = run(&o);
    assert_eq!(report.requests.ok, 1000);
    let log = mtls.access_log(1000);
    assert!(log.len() == 1000 && from_unix(&log), "{:?}", log.first());
    assert!(log.iter().all(|l| l.ends_with(" SUCCESS")), "{:?}", log.first());
}

/// The last field of nginx's TLS access log: `r` resumed, `.` full handshake.
fn resumed_in_log(log: &[String]) -> usize {
    log.iter().filter(|l| l.ends_with(" r")).count()
}

fn keep_alive_over_https_counts_exactly_with_one_full_handshake_per_connection(io: IoChoice) {
    let pki = Pki::new();
    let (cert, key) = pki.server(false);
    let nginx = Nginx::start_tls(&cert, &key);
    let mut o = tls_on(
        io,
        &nginx.https_url("/"),
        TlsOptions { cacert: Some(pki.ca_file()), ..TlsOptions::default() },
    );
    o.connections = Some(10);
    o.requests = Some(3000);
    let r = run(&o);
    assert_eq!((r.requests.ok, r.requests.failed), (3000, 0), "{:?}", r.error_examples);
    let log = nginx.access_log(3000);
    assert_eq!(log.len(), 3000, "nginx saw exactly the requests sent");
    let tls = r.connections.tls.expect("an https run reports its handshakes");
    assert_eq!((tls.full_handshakes, tls.resumed), (10, 0), "one handshake per connection");
    assert_eq!(resumed_in_log(&log), 0);
    assert!(
        tls.handshake_us.min > 0 && tls.handshake_us.max >= tls.handshake_us.min,
        "{:?}",
        tls.handshake_us
    );
    assert!(!tls.insecure);
    assert!(tls.negotiated.as_deref().is_some_and(|n| n.starts_with("TLSv1_3 TLS13_")), "{tls:?}");
}

fn ciphers_and_versions_are_what_the_server_is_offered(io: IoChoice) {
    let pki = Pki::new();
    let (cert, key) = pki.server(false);
    let nginx = Nginx::start_tls(&cert, &key);
    for (version, ciphers, expect) in [
        (None, Some("TLS13_CHACHA20_POLY1305_SHA256"), "TLSv1_3 TLS13_CHACHA20_POLY1305_SHA256"),
        (
            Some(TlsVersion::V1_2),
            Some("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"),
            "TLSv1_2 TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        ),
        (
            Some(TlsVersion::V1_2),
            Some("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"),
            "TLSv1_2 TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        ),
        // By default AES-128-GCM comes first, as browsers offer it; nginx follows the
        // client's order (ssl_prefer_server_ciphers off).
        (None, None, "TLSv1_3 TLS13_AES_128_GCM_SHA256"),
        (Some(TlsVersion::V1_2), None, "TLSv1_2 TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"),
    ] {
        let tls = TlsOptions {
            cacert: Some(pki.ca_file()),
            version,
            ciphers: ciphers.map(Into::into),
            ..TlsOptions::default()
        };
        let mut o = tls_on(io, &nginx.https_url("/"), tls);
        o.requests = Some(50);
        let r = run(&o);
        assert_eq!(r.requests.ok, 50, "{:?}", r.error_examples);
        assert_eq!(r.connections.tls.unwrap().negotiated.as_deref(), Some(expect));
    }
}

fn a_connection_per_request_resumes_sessions_only_with_tls_reuse(io: IoChoice) {
    let pki = Pki::new();
    let (cert, key) = pki.server(false);
    let nginx = Nginx::start_tls(&cert, &key);
    for (version, reuse) in [
        (None, false),
        (None, true),
        (Some(TlsVersion::V1_2), true),
        (Some(TlsVersion::V1_3), true),
    ] {
        let before = nginx.access_log(0).len();
        let tls =
            TlsOptions { cacert: Some(pki.ca_file()), reuse, version, ..TlsOptions::default() };
        let mut o = tls_on(io, &nginx.https_url("/"), tls);
        o.connections = Some(4);
        o.requests = Some(300);
        o.conn_per_request = true;
        let r = run(&o);
        assert_eq!(r.requests.ok, 300, "{version:?} {reuse}: {:?}", r.error_examples);
        let t = r.connections.tls.unwrap();
        assert_eq!(t.full_handshakes + t.resumed, 300, "a handshake per request");
        assert_eq!(r.connections.connects, 300);
        let log = nginx.access_log(before + 300);
        let log = &log[before..];
        assert_eq!(log.len(), 300);
        // The server agrees on which handshakes resumed.
        assert_eq!(resumed_in_log(log) as u64, t.resumed, "{version:?} reuse {reuse}");
        if reuse {
            assert!(t.resumed >= 250, "{version:?}: most handshakes resume: {t:?}");
        } else {
            assert_eq!(t.resumed, 0);
        }
        assert_eq!(t.version, version.map(TlsVersion::name));
    }
}

/// Runs one request against `url` and returns the tls error count, its example and how long
/// the run took.
fn failing(
    io: IoChoice,
    url: &str,
    tls: TlsOptions,
    connect_timeout: Duration,
) -> (u64, String, Duration) {
    let mut o = tls_on(io, url, tls);
    o.connections = Some(1);
    o.requests = Some(1);
    o.connect_timeout = Some(connect_timeout);
    let started = Instant::now();
    let r = run(&o);
    let took = started.elapsed();
    let n = r.errors.get("tls").copied().unwrap_or(0);
    (n, r.error_examples.get("tls").cloned().unwrap_or_default(), took)
}

fn certificate_and_handshake_failures_land_in_the_tls_class_with_their_reason(io: IoChoice) {
    let pki = Pki::new();
    let (cert, key) = pki.server(false);
    let good = Nginx::start_tls(&cert, &key);
    let quick = Duration::from_secs(2);

    // A CA that did not sign the server's certificate.
    let other = Pki::named("another CA");
    let wrong_ca = TlsOptions { cacert: Some(other.ca_file()), ..TlsOptions::default() };
    let (n, why, _) = failing(io, &good.https_url("/"), wrong_ca, quick);
    assert_eq!(n, 1, "{why}");
    assert!(why.starts_with("TLS certificate: unknown issuer"), "{why}");

    // A name the certificate is not for.
    let trusted = || TlsOptions { cacert: Some(pki.ca_file()), ..TlsOptions::default() };
    let sni = TlsOptions { sni: Some("other.example".into()), ..trusted() };
    let (n, why, _) = failing(io, &good.https_url("/"), sni, quick);
    assert_eq!(n, 1, "{why}");
    assert!(why.starts_with("TLS certificate: name mismatch"), "{why}");

    // --insecure takes that same certificate and says so.
    let insecure = TlsOptions { insecure: true, sni: Some("other.example".into()), ..trusted() };
    let mut o = tls_on(io, &good.https_url("/"), insecure);
    o.requests = Some(10);
    let r = run(&o);
    assert_eq!(r.requests.ok, 10);
    assert!(r.connections.tls.unwrap().insecure);

    // An expired certificate.
    let (old_cert, old_key) = pki.server(true);
    let expired = Nginx::start_tls(&old_cert, &old_key);
    let (n, why, _) = failing(io, &expired.https_url("/"), trusted(), quick);
    assert_eq!(n, 1, "{why}");
    assert!(why.starts_with("TLS certificate: expired"), "{why}");

    // A plain-HTTP server on an https URL: a hint, not a parse error.
    let plain = Nginx::start();
    let url = format!("https://localhost:{}/", plain.port);
    let (n, why, _) = failing(io, &url, trusted(), quick);
    assert_eq!(n, 1, "{why}");
    assert!(why.contains("is this an http:// server on an https:// URL?"), "{why}");

    // A server that takes the connection and never answers the handshake: failed at the
    // connect timeout, in the tls class.
    let stall = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://localhost:{}/", stall.local_addr().unwrap().port());
    let (n, why, took) = failing(io, &url, trusted(), Duration::from_millis(300));
    assert_eq!(n, 1, "{why}");
    assert!(why.contains("no handshake within 300ms"), "{why}");
    assert!(took < Duration::from_secs(3), "{took:?}");
}

/// The first handshake happens before the run: a certificate that does not verify, plain
/// HTTP on an https:// URL, or a server that never answers the handshake is a set-up error,
/// said at once (it was retried for the whole run: 2,960 TLS errors over 10 s, with generic
/// advice about descriptors and backlogs).
#[test]
fn a_handshake_that_fails_before_the_run_is_a_setup_error() {
    let pki = Pki::new();
    let (cert, key) = pki.server(false);
    let good = Nginx::start_tls(&cert, &key);
    let trusted = || TlsOptions { cacert: Some(pki.ca_file()), ..TlsOptions::default() };
    let preflight = |url: &str, tls: TlsOptions, wait: Duration| {
        let mut o = tls_opts(url, tls);
        o.timeout = wait;
        let cfg = qpslab_load::LoadConfig::from_options(&o).unwrap();
        let started = Instant::now();
        let r = qpslab_load::preflight(&cfg);
        (r, started.elapsed())
    };
    let (ok, _) = preflight(&good.https_url("/"), trusted(), Duration::from_secs(2));
    ok.unwrap();

    let other = Pki::named("another CA");
    let wrong = TlsOptions { cacert: Some(other.ca_file()), ..TlsOptions::default() };
    let (e, took) = preflight(&good.https_url("/"), wrong, Duration::from_secs(2));
    let e = e.unwrap_err();
    assert!(e.is_setup(), "{e}");
    assert!(e.to_string().contains("TLS certificate: unknown issuer"), "{e}");
    assert!(took < Duration::from_secs(1), "{took:?}");

    let plain = Nginx::start();
    let url = format!("https://localhost:{}/", plain.port);
    let e = preflight(&url, trusted(), Duration::from_secs(2)).0.unwrap_err();
    assert!(e.to_string().contains("is this an http:// server on an https:// URL?"), "{e}");

    let stall = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://localhost:{}/", stall.local_addr().unwrap().port());
    let (e, took) = preflight(&url, trusted(), Duration::from_millis(300));
    assert!(e.unwrap_err().to_string().contains("no handshake within 300ms"));
    assert!(took < Duration::from_secs(2), "{took:?}");
}

/// A self-signed certificate made as most tutorials make one (`openssl req -x509`, which
/// marks it CA:TRUE) and given with `--cacert` is trusted, as `curl --cacert` trusts it (it
/// was refused as "a CA certificate served as the server's own"); its name is still checked.
#[test]
fn a_self_signed_ca_certificate_given_with_cacert_is_trusted_as_curl_does() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])
        .args(["-nodes", "-days", "2", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl runs");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let text = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&cert)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("CA:TRUE"), "a CA certificate");
    let pem = |p: &PathBuf| std::fs::read_to_string(p).unwrap();
    let nginx = Nginx::start_tls(&pem(&cert), &pem(&key));
    let url = nginx.https_url("/");
    // The ground truth: curl takes it.
    let curl = std::process::Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
        .arg(&cert)
        .arg(&url)
        .output()
        .expect("curl runs");
    assert_eq!(String::from_utf8_lossy(&curl.stdout), "200", "{curl:?}");

    let given = || TlsOptions {
        cacert: Some(FileText::from_arg(cert.to_str().unwrap()).unwrap()),
        ..TlsOptions::default()
    };
    let mut o = tls_opts(&url, given());
    o.requests = Some(20);
    let cfg = qpslab_load::LoadConfig::from_options(&o).unwrap();
    qpslab_load::preflight(&cfg).unwrap();
    let r = run(&o);
    assert_eq!(r.requests.ok, 20, "{:?}", r.error_examples);

    let (n, why, _) = failing(
        IoChoice::Auto,
        &url,
        TlsOptions { sni: Some("other.example".into()), ..given() },
        Duration::from_secs(2),
    );
    assert_eq!(n, 1, "{why}");
    assert!(why.starts_with("TLS certificate: name mismatch"), "{why}");
}

// Every behaviour above that has the connections' loop in it, on each event loop (epoll and
// io_uring): the TLS transport is the same under both.
qpslab_testkit::on_both_loops!(
    client_certificates_count_exactly_against_nginx,
    an_openssl_v1_client_certificate_is_sent_as_given,
    keep_alive_over_https_counts_exactly_with_one_full_handshake_per_connection,
    ciphers_and_versions_are_what_the_server_is_offered,
    a_connection_per_request_resumes_sessions_only_with_tls_reuse,
    certificate_and_handshake_failures_land_in_the_tls_class_with_their_reason,
    over_a_unix_socket_h1_h2_and_mtls_count_exactly_against_nginx,
);
