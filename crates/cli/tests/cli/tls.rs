//! `serve` over HTTPS, seen by real clients: curl, h2load, openssl s_client and qpslab load;
//! a client stalling mid-handshake closed at the header deadline while others are served.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::ServeChild;
use crate::{qpslab, usage_error};

fn https(server: &ServeChild, path: &str) -> String {
    format!("https://{}{path}", server.addr)
}

/// The fingerprint serve printed at start.
fn printed_fingerprint(startup: &str) -> String {
    let at = startup.find("SHA-256 fingerprint ").expect("the fingerprint is printed") + 20;
    startup[at..].split_whitespace().next().unwrap().to_string()
}

#[test]
fn tls_self_signed_serves_curl_h2load_openssl_and_qpslab_load() {
    let server = ServeChild::start(&[], &["-w", "1", "--tls-self-signed", "--json"]);
    assert!(server.startup.contains("for https"), "{}", server.startup);
    let url = https(&server, "/");

    let out = Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", &url])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");

    let out =
        Command::new("h2load").args(["--h1", "-n", "1000", "-c", "10", &url]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("1000 succeeded, 0 failed"), "{text}");

    // openssl s_client: a request by hand, and the certificate's fingerprint is the one printed.
    let mut s = Command::new("openssl")
        .args(["s_client", "-connect", &server.addr, "-alpn", "http/1.1", "-quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    s.stdin
        .take()
        .unwrap()
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    s.stdout.take().unwrap().read_to_string(&mut answer).unwrap();
    let _ = s.wait();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let pem = Command::new("sh")
        .args([
            "-c",
            &format!(
                "openssl s_client -connect {} </dev/null 2>/dev/null | openssl x509 -noout \
                 -fingerprint -sha256",
                server.addr
            ),
        ])
        .output()
        .unwrap();
    let seen = String::from_utf8_lossy(&pem.stdout);
    assert!(seen.contains(&printed_fingerprint(&server.startup)), "{seen} vs {}", server.startup);

    // qpslab load: a connection per request, sessions resumed: after the first 40 (no ticket
    // yet), every handshake resumes, whatever the concurrency (each TLS 1.3 ticket is used once).
    let out = qpslab(&[
        "load",
        "-k",
        "-n",
        "800",
        "-c",
        "40",
        "--conn-per-request",
        "--tls-reuse",
        "--json",
        &url,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["requests"]["ok"], 800);
    let tls = &v["connections"]["tls"];
    assert_eq!(tls["full_handshakes"].as_u64().unwrap() + tls["resumed"].as_u64().unwrap(), 800);
    assert!(tls["full_handshakes"].as_u64().unwrap() <= 45, "{tls}");
    assert_eq!(tls["insecure"], true);

    server.signal(libc::SIGTERM);
    let (code, out, err) = server.wait(Duration::from_secs(5));
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // curl 1 + h2load 1000 + s_client 1 + load 800 (the fingerprint check sends no request).
    assert_eq!(v["totals"]["requests"], 1802, "{out}");
    assert_eq!(v["tls"]["self_signed"], true);
}

#[test]
fn a_handshake_stalled_halfway_is_closed_at_the_header_deadline_and_others_are_served() {
    for io in ["epoll", "uring"] {
        a_handshake_stalled_halfway_on(io);
    }
}

fn a_handshake_stalled_halfway_on(io: &str) {
    let server = ServeChild::start(
        &[],
        &["-w", "1", "--io", io, "--tls-self-signed", "--header-timeout", "1s", "--json"],
    );
    let mut stalled = std::net::TcpStream::connect(&server.addr).unwrap();
    // The first bytes of a ClientHello record, and then nothing.
    stalled.write_all(&[0x16, 0x03, 0x01, 0x00, 0xc8, 0x01, 0x00]).unwrap();
    stalled.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let started = Instant::now();
    let out = Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", &https(&server, "/")])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200", "served while one stalls");
    let mut byte = [0u8; 1];
    let closed = matches!(stalled.read(&mut byte), Ok(0) | Err(_));
    let took = started.elapsed();
    assert!(closed, "the stalled connection is closed");
    assert!(took >= Duration::from_millis(800) && took < Duration::from_secs(4), "{took:?}");
    server.signal(libc::SIGTERM);
    let (code, out, err) = server.wait(Duration::from_secs(5));
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["totals"]["timeouts"], 1, "{out}");
    assert_eq!(v["totals"]["requests"], 1, "{out}");
}

#[test]
fn tls_flags_are_checked_naming_the_flag() {
    usage_error(
        &[
            "serve",
            "-l",
            "127.0.0.1:0",
            "--tls-cert",
            "/nonexistent.pem",
            "--tls-key",
            "/nonexistent.key",
        ],
        "--tls-cert",
    );
    let out = qpslab(&["serve", "-l", "127.0.0.1:0", "--tls-cert", "/x.pem"]);
    assert_eq!(out.status.code(), Some(2), "--tls-cert needs --tls-key");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tls-key"));
}

/// `bench --target nginx --h2`: the nginx bench starts serves HTTP/2 (h2c with prior
/// knowledge; h2 by ALPN with `--tls`), every request answered, and the summary says HTTP/2.
#[test]
fn bench_h2_configures_the_nginx_it_starts_for_http2() {
    for tls in [false, true] {
        let mut args = vec!["bench", "--target", "nginx", "--h2", "-d", "1s", "--warmup", "0s"];
        args.extend(["-c", "4", "--interval", "250ms", "--json", "--no-save"]);
        if tls {
            args.push("--tls");
        }
        let out = qpslab(&args);
        assert_eq!(out.status.code(), Some(0), "{tls}: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let load = &v["load"];
        assert_eq!(load["config"]["protocol"], "h2", "{}", load["config"]);
        assert!(load["requests"]["ok"].as_u64().unwrap() > 100, "{tls}: {}", load["requests"]);
        assert_eq!(load["requests"]["failed"], 0, "{tls}: {}", load["error_examples"]);
    }
    let args = ["bench", "--target", "nginx", "--h2", "-d", "1s", "--warmup", "0s", "--no-save"];
    let out = qpslab(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let generator = text.lines().find(|l| l.starts_with("generator")).unwrap_or_default();
    assert!(generator.contains("HTTP/2 (1 stream each)"), "{text}");
}

/// `bench --tls` on both targets: HTTPS, one full handshake per connection of a keep-alive run,
/// and with a connection per request a handshake per request.
#[test]
fn bench_tls_runs_https_on_the_builtin_server_and_on_nginx() {
    for target in ["builtin", "nginx"] {
        let out = qpslab(&[
            "bench",
            "--tls",
            "--target",
            target,
            "-d",
            "1s",
            "--warmup",
            "0s",
            "-c",
            "20",
            "--interval",
            "250ms",
            "--json",
            "--no-save",
        ]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{target}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let load = &v["load"];
        assert!(
            load["targets"][0].as_str().unwrap().starts_with("https://"),
            "{}",
            load["targets"]
        );
        assert!(load["requests"]["ok"].as_u64().unwrap() > 100, "{target}: {}", load["requests"]);
        assert_eq!(load["requests"]["failed"], 0, "{target}: {}", load["error_examples"]);
        let tls = &load["connections"]["tls"];
        assert_eq!(tls["full_handshakes"], 20, "{target}: {tls}");
        assert_eq!(tls["insecure"], true, "a certificate made at start is not verified");
    }
    let out = qpslab(&[
        "bench",
        "--tls",
        "--conn-per-request",
        "-d",
        "1s",
        "--warmup",
        "0s",
        "-c",
        "5",
        "--interval",
        "250ms",
        "--json",
        "--no-save",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let load = &v["load"];
    let tls = &load["connections"]["tls"];
    let handshakes = tls["full_handshakes"].as_u64().unwrap() + tls["resumed"].as_u64().unwrap();
    // Connections still in their handshake at the stop (at most -c) are connected, not shaken.
    let connects = load["connections"]["connects"].as_u64().unwrap();
    assert!(handshakes <= connects && handshakes + 5 >= connects, "{connects}: {tls}");
    assert!(handshakes > 50, "{tls}");
    usage_error(&["bench", "--tls", "http://127.0.0.1:1/"], "--tls");
}

/// The two scheme mistakes, as a user makes them: an https:// URL whose certificate cannot be
/// verified is refused before the run with exit 2 and the way out (it was retried for the
/// whole run); an http:// URL to a TLS port ends the run at once, exit 2, saying so (it gave
/// parse errors and no hint, then a hint on every connection for the whole run).
#[test]
fn a_certificate_that_cannot_verify_and_http_to_a_tls_port_are_named() {
    let server = ServeChild::start(&[], &["-w", "1", "--tls-self-signed"]);
    let started = Instant::now();
    let out = qpslab(&["load", "-d", "5s", &https(&server, "/")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("TLS certificate: unknown issuer"), "{stderr}");
    assert!(stderr.contains("--cacert FILE") && stderr.contains("--insecure"), "{stderr}");

    // A retry cannot change the protocol a server speaks: the run ends at once (it was
    // retried for the whole run), exit 2 and one line.
    let plain = format!("http://{}/", server.addr);
    let started = Instant::now();
    let out = qpslab(&["load", "-d", "10s", "-c", "2", "--json", &plain]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("the server answered with TLS") && stderr.contains("https://"));
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
}

/// A CA, a server certificate for localhost, a client certificate it signed and one of
/// another CA, made with openssl in `dir`: (ca, server cert, server key, client cert, client
/// key, other cert, other key) paths.
fn mtls_files(dir: &std::path::Path) -> [String; 7] {
    let p = |name: &str| dir.join(name).display().to_string();
    let sh = |script: &str| {
        let out = Command::new("sh").arg("-c").arg(script).current_dir(dir).output().unwrap();
        assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    };
    sh("openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=ca");
    for (name, ext) in [
        ("server", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
        ("client", "extendedKeyUsage=clientAuth"),
    ] {
        sh(&format!(
            "openssl req -newkey rsa:2048 -nodes -keyout {name}.key -out {name}.csr -subj /CN={name} && \
             printf '{ext}\\n' > {name}.ext && \
             openssl x509 -req -in {name}.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out {name}.pem -days 2 -extfile {name}.ext"
        ));
    }
    sh("openssl req -x509 -newkey rsa:2048 -nodes -keyout other.key -out other.pem -days 2 -subj /CN=other");
    ["ca.pem", "server.pem", "server.key", "client.pem", "client.key", "other.pem", "other.key"]
        .map(p)
}

/// Mutual TLS on both sides of qpslab: `serve --tls-client-ca` takes the client certificate
/// its CA signed (exact counts) and refuses, in the handshake, a client without one or with
/// another CA's; `load` names each refusal before the run (exit 2), and a key that is not the
/// certificate's at once.
#[test]
fn client_certificates_are_required_presented_and_refusals_named() {
    let dir = tempfile::tempdir().unwrap();
    let [ca, cert, key, client, client_key, other, other_key] = mtls_files(dir.path());
    let server = ServeChild::start(
        &[],
        &["-w", "1", "--tls-cert", &cert, "--tls-key", &key, "--tls-client-ca", &ca],
    );
    let port = server.addr.rsplit(':').next().unwrap();
    let url = format!("https://localhost:{port}/");
    let load = |extra: &[&str]| {
        let mut args = vec!["load", "-n", "2000", "-c", "4", "-t", "1", "--json", "--cacert", &ca];
        args.extend_from_slice(extra);
        args.push(&url);
        qpslab(&args)
    };
    let out = load(&["--cert", &client, "--key", &client_key]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["requests"]["ok"], 2000, "{v}");
    assert_eq!(v["connections"]["tls"]["full_handshakes"], 4, "{v}");
    for (extra, said) in [
        (vec![], "does the server ask for a client certificate? give --cert FILE --key FILE"),
        (
            vec!["--cert", &other, "--key", &other_key],
            "the server refused the client certificate (--cert)",
        ),
    ] {
        let out = load(&extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(said) && err.lines().count() == 1, "{err}");
    }
    let out = load(&["--cert", &client, "--key", &other_key]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--key") && err.contains("is not the key of --cert"), "{err}");
    usage_error(&["serve", "-l", "127.0.0.1:0", "--tls-client-ca", &ca], "--tls-client-ca");
    usage_error(
        &["serve", "-l", "127.0.0.1:0", "--tls-self-signed", "--tls-client-ca", "/nonexistent.pem"],
        "--tls-client-ca",
    );
}

/// `bench --h3`: the built-in server serves HTTP/3 beside HTTPS (a certificate made at start),
/// every request answered over QUIC; nginx, which has no HTTP/3 here, is refused by name, as
/// is `serve --h3` without a certificate.
#[test]
fn bench_h3_runs_http3_on_the_builtin_server() {
    let args = ["bench", "--h3", "-d", "1s", "--warmup", "0s", "-c", "4", "--streams", "10"];
    let out = qpslab(&[&args[..], &["--interval", "250ms", "--json", "--no-save"]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let load = &v["load"];
    assert_eq!(load["config"]["protocol"], "h3", "{}", load["config"]);
    assert!(load["targets"][0].as_str().unwrap().starts_with("https://"), "{}", load["targets"]);
    assert!(load["requests"]["ok"].as_u64().unwrap() > 100, "{}", load["requests"]);
    assert_eq!(load["requests"]["failed"], 0, "{}", load["error_examples"]);
    let out = qpslab(&[&args[..], &["--no-save"]].concat());
    let text = String::from_utf8_lossy(&out.stdout);
    let generator = text.lines().find(|l| l.starts_with("generator")).unwrap_or_default();
    assert!(generator.contains("HTTP/3 (10 streams each)"), "{text}");
    assert_eq!(load["h3"]["quic"], "own", "{}", load["h3"]);
    // quinn-proto's QUIC client, through bench as through load.
    let out = qpslab(&[&args[..], &["--quic", "quinn", "--json", "--no-save"]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let load = &v["load"];
    assert_eq!(load["h3"]["quic"], "quinn", "{}", load["h3"]);
    assert!(load["requests"]["ok"].as_u64().unwrap() > 100, "{}", load["requests"]);
    assert_eq!(load["requests"]["failed"], 0, "{}", load["error_examples"]);
    usage_error(&["bench", "--h3", "--target", "nginx", "-d", "1s", "--no-save"], "--h3");
    usage_error(&["serve", "--h3", "-l", "127.0.0.1:0"], "--tls-self-signed");
    let serve = ["serve", "--tls-self-signed", "-l", "127.0.0.1:0"];
    usage_error(&[&serve[..], &["--h3", "--h3-retry", "soon"]].concat(), "--h3-retry");
    usage_error(&[&serve[..], &["--h3-retry", "always"]].concat(), "--h3");
    // QUIC's own figures as thresholds: judged on HTTP/3 runs, refused on others.
    let checked = [&args[..], &["--threshold", "lost-packets<1000000", "--json", "--no-save"]];
    let out = qpslab(&checked.concat());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &v["load"]["thresholds"][0];
    assert_eq!(t["passed"], true, "{t}");
    assert!(t["shown"].as_str().unwrap().starts_with("lost-packets "), "{t}");
    usage_error(&["bench", "-d", "1s", "--threshold", "packet-loss<1%", "--no-save"], "--h3");
}

/// Stored HTTP/3 runs carry their transport's figures into `compare` (a QUIC line) and the
/// sweep-style table; a stored run over TCP is said not to be HTTP/3.
#[test]
fn compare_shows_the_quic_figures_of_stored_http3_runs() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    let store = store.to_str().unwrap();
    for h3 in [true, false] {
        let mut args = vec!["bench", "-d", "1s", "--warmup", "0s", "-c", "2", "--store", store];
        if h3 {
            args.push("--h3");
        }
        let out = qpslab(&args);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let out = qpslab(&["compare", "1", "2", "--store", store]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("QUIC ")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.starts_with("QUIC           A ") && line.contains("% packets lost ("), "{line}");
    assert!(
        line.contains(" datagrams per send call, ") && line.ends_with("B not HTTP/3"),
        "{line}"
    );
}

/// `serve --h3 --stats-every`: each line carries the interval's UDP datagrams a second each
/// way (a server without HTTP/3 prints none: `serve_stats_lines`); with `--h3-retry always`
/// every connection was asked for a Retry, as its summary says.
#[test]
fn serve_stats_lines_carry_http3_datagrams() {
    let server = ServeChild::start(
        &[],
        &["-w", "1", "--tls-self-signed", "--h3", "--stats-every", "200ms", "--h3-retry", "always"],
    );
    let url = format!("https://{}/", server.addr);
    let out = qpslab(&["load", "--h3", "-k", "-c", "2", "--streams", "4", "-n", "3000", &url]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    std::thread::sleep(Duration::from_millis(450));
    server.signal(libc::SIGINT);
    let (code, out, err) = server.wait(Duration::from_secs(3));
    assert_eq!(code, Some(0), "{err}");
    let busy = err
        .lines()
        .filter_map(|l| l.split_once(" datagrams/s in ").map(|(_, r)| r))
        .filter_map(|r| r.split(' ').next()?.parse::<f64>().ok())
        .fold(0.0, f64::max);
    assert!(busy > 100.0, "{err}");
    // The load's two connections and its handshake before the run, each asked once.
    assert!(out.contains("on 3 connections;") && out.contains("; Retry packets 3\n"), "{out}");
}

/// The transport's own figures of an HTTP/3 run: large answers (which the server sends as GSO
/// runs) arrive in GRO reads of several datagrams, how often the client acknowledges, and the
/// CPU its handshakes took, which is most of a run that handshakes for every request.
#[test]
fn http3_runs_report_gro_batches_ack_frequency_and_handshake_cpu() {
    let server = ServeChild::start(&[], &["-w", "1", "--tls-self-signed", "--h3"]);
    let json = |args: &[&str], path: &str| {
        let load = [&["load", "--h3", "-k", "--json", "-t", "1"][..], args].concat();
        let out = qpslab(&[&load[..], &[&https(&server, path)]].concat());
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let cpu_us = |v: &serde_json::Value| {
        let g = &v["generator"];
        (g["cpu_user_s"].as_f64().unwrap() + g["cpu_sys_s"].as_f64().unwrap()) * 1e6
    };
    let v = json(&["-c", "1", "--streams", "4", "-n", "40"], "/?s=100000");
    let h3 = &v["h3"];
    assert_eq!(v["requests"]["ok"], 40, "{}", v["error_examples"]);
    assert!(h3["gro_reads"].as_u64().unwrap() > 0, "{h3}");
    assert!(h3["segments_per_gro_read"].as_f64().unwrap() > 1.0, "{h3}");
    assert!(h3["datagrams_per_ack"].as_f64().unwrap() > 1.0, "{h3}");
    let one = h3["handshake_cpu_us"].as_f64().unwrap();
    assert!(one > 0.0 && one < cpu_us(&v), "{h3}");

    // A handshake per request: the handshakes are most of the generator's CPU (the rest is
    // the run's preflight handshake, the requests, the process).
    let v = json(&["-c", "1", "--conn-per-request", "-n", "100"], "/");
    let h3 = &v["h3"];
    assert_eq!(v["requests"]["ok"], 100, "{}", v["error_examples"]);
    let tls = &v["connections"]["tls"];
    let handshakes = tls["full_handshakes"].as_u64().unwrap() + tls["resumed"].as_u64().unwrap();
    let spent = h3["handshake_cpu_us"].as_f64().unwrap() * handshakes as f64;
    let share = spent / cpu_us(&v);
    assert!((0.3..=1.0).contains(&share), "{share}: {h3} {}", v["generator"]);
}

/// Path MTU discovery over a path narrower than Ethernet: the loopback of a network namespace
/// of the test's own set to an MTU of 1,300 bytes (1,272 bytes of UDP payload over IPv4). The
/// own client's datagrams go with the don't-fragment bit, so its larger probes fail, and it
/// settles within 20 bytes under the path's limit; uploads in datagrams of that size all
/// arrive, on both event loops.
#[test]
fn http3_finds_the_datagram_size_a_narrow_path_carries() {
    let ns = crate::common::Netns::create("qmtu");
    for args in
        [&["ip", "link", "set", "lo", "up"][..], &["ip", "link", "set", "lo", "mtu", "1300"]]
    {
        let out = Command::new("ip").args(["netns", "exec", &ns.name]).args(args).output();
        assert!(out.expect("ip (iproute2)").status.success(), "{args:?}");
    }
    let netns = ["ip", "netns", "exec", ns.name.as_str()];
    let server = ServeChild::start(&netns, &["-w", "1", "--tls-self-signed", "--h3"]);
    let body = "b".repeat(20_000);
    for io in ["epoll", "uring"] {
        let load = ["load", "--h3", "-k", "--json", "-t", "1", "-c", "2", "--streams", "4"];
        let post = ["-d", "1s", "-m", "POST", "--body", &body, "--io", io];
        let out = ns.exec(&[&load[..], &post[..], &[&https(&server, "/")]].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{io}: {err}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v["requests"]["ok"].as_u64().unwrap() > 10, "{io}: {}", v["requests"]);
        assert_eq!(v["requests"]["failed"], 0, "{io}: {}", v["error_examples"]);
        let size = v["h3"]["datagram_size"].as_u64().unwrap();
        assert!((1252..=1272).contains(&size), "{io}: {size} {}", v["h3"]);
    }
}

/// HTTP/3 over a path that drops datagrams: an nftables rule in a network namespace of the
/// test's own drops 5% of the 1-RTT packets (short header: the first byte's top bit clear) on
/// its loopback, both ways. Both QUIC clients recover every loss and count every request
/// exactly, GETs and 50 kB POSTs (whose bodies take many packets each), by the server's own
/// count; the losses are counted. (Handshake packets are spared: the run's preflight gives a
/// handshake 3 s, which quinn-proto's probe timeouts, 1 s and then 2 s, can miss.)
#[test]
fn http3_over_a_lossy_path_counts_every_request_exactly() {
    let ns = crate::common::Netns::create("qlos");
    let in_ns = |args: &[&str]| {
        let out = Command::new("ip").args(["netns", "exec", &ns.name]).args(args).output();
        let out = out.expect("ip (iproute2)");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    in_ns(&["ip", "link", "set", "lo", "up"]);
    in_ns(&["nft", "add", "table", "inet", "qpslab"]);
    in_ns(&["nft", "add chain inet qpslab in { type filter hook input priority 0; }"]);
    let drop = "meta l4proto udp @th,64,1 0 numgen random mod 100 < 5 drop";
    in_ns(&["nft", &format!("add rule inet qpslab in {drop}")]);
    let netns = ["ip", "netns", "exec", ns.name.as_str()];
    let server = ServeChild::start(&netns, &["-w", "1", "--tls-self-signed", "--h3", "--json"]);
    let url = https(&server, "/");
    let body = "b".repeat(50_000);
    let mut answered = 0;
    let mut lost = 0;
    // Each QUIC client; the own one on both loops (io_uring: receives and sends as ring
    // requests).
    for (quic, io) in [("own", "epoll"), ("quinn", "epoll"), ("own", "uring")] {
        let get = ["-c", "4", "--streams", "8", "-n", "2000"];
        let post = ["-c", "2", "--streams", "4", "-n", "100", "-m", "POST", "--body", &body];
        for (what, args) in [("GET", &get[..]), ("POST", &post[..])] {
            let load = [&["load", "--h3", "-k", "--json", "-t", "1", "--quic", quic][..], args];
            let load = [&load.concat()[..], &["--io", io]].concat();
            let out = ns.exec(&[&load[..], &[&url]].concat());
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "{quic} {io} {what}: {err}");
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["config"]["io"], io, "{quic} {what}");
            let n = if what == "GET" { 2000 } else { 100 };
            assert_eq!(v["requests"]["ok"], n, "{quic} {what}: {}", v["error_examples"]);
            assert_eq!(v["requests"]["failed"], 0, "{quic} {what}: {}", v["error_examples"]);
            lost += v["h3"]["lost_packets"].as_u64().unwrap();
            answered += n;
        }
    }
    assert!(lost > 0, "5% of the datagrams dropped: losses counted");
    server.signal(libc::SIGTERM);
    let (code, out, _) = server.wait(Duration::from_secs(3));
    assert_eq!(code, Some(0));
    let totals: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(totals["totals"]["requests"], answered, "{totals}");
}
