//! Two QUIC libraries side by side, as qpslab would use them: quinn-proto (sans-I/O, on rustls
//! and ring, what `load --h3` and `serve --h3` drive) and quiche (sans-I/O, on BoringSSL). Each
//! runs a client and a server connection in this one thread, joined in memory (every datagram
//! goes whole from one side's send to the other's receive, nothing lost), so the figure is the
//! library's own work on both sides, without sockets or system calls.
//!
//! `quic-libs LIB MODE SECS`, LIB `quinn` or `quiche`, MODE:
//! - `exchanges`: one connection, 100 streams in flight; each a 40-byte request the client
//!   writes and finishes, the server reads to its end and answers with 40 bytes and a finish,
//!   the client reads to the end and opens the next.
//! - `handshakes`: a new connection each time (full TLS 1.3 handshake, certificate checked by
//!   the client), until both sides are established; then dropped.
//!
//! `own` is qpslab's own QUIC client (`qpslab_quic::client`, no loss recovery yet) against
//! quinn-proto's server: beside `quinn`, the client's share shows what each client costs.
//!
//! Prints one line: `LIB MODE COUNT CPU_SECONDS DATAGRAMS CLIENT_SECONDS` (the thread's CPU
//! time over the measured window only, the datagrams both sides sent, and the CPU time of the
//! client's own work: quinn and own only, each side's work being timed apart).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

mod own_side;
mod quiche_side;
mod quinn_side;

/// Streams a connection keeps in flight in `exchanges`.
const STREAMS: usize = 100;
/// What each request and answer carries.
const REQUEST: &[u8] = &[b'q'; 40];
const ANSWER: &[u8] = &[b'a'; 40];
/// The datagram size both libraries are held to (no path MTU discovery).
const MTU: usize = 1350;

fn client_addr() -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1], 4433))
}

fn server_addr() -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 2], 443))
}

/// The thread's CPU time so far.
fn cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for the call to write.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A made-up certificate for `localhost`: its DER, its key's DER, and both as PEM.
struct Cert {
    der: Vec<u8>,
    key_der: Vec<u8>,
    pem: String,
    key_pem: String,
}

fn cert() -> Cert {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
        .unwrap_or_else(|e| fail(&format!("making a certificate: {e}")));
    Cert {
        der: made.cert.der().to_vec(),
        key_der: made.key_pair.serialize_der(),
        pem: made.cert.pem(),
        key_pem: made.key_pair.serialize_pem(),
    }
}

fn fail(what: &str) -> ! {
    eprintln!("quic-libs: {what}");
    std::process::exit(2)
}

thread_local! {
    /// Datagrams moved between the two sides.
    static DATAGRAMS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// CPU time in the client's own work (its phases of each exchange of datagrams, and its
    /// application's reads and requests).
    static CLIENT: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

/// Adds the CPU time since `since` to the client's.
fn client_time(since: Duration) {
    let d = cpu().saturating_sub(since);
    CLIENT.with(|c| c.set(c.get() + d));
}

/// What each library's bench does.
trait Lib {
    /// Exchanges completed until `deadline`.
    fn exchanges(&mut self, deadline: Instant) -> u64;
    /// Handshakes completed until `deadline`.
    fn handshakes(&mut self, deadline: Instant) -> u64;
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, lib, mode, secs] = &args[..] else {
        fail("usage: quic-libs quinn|quiche|own exchanges|handshakes SECS")
    };
    let secs: f64 = secs.parse().unwrap_or_else(|_| fail(&format!("SECS: not a number: {secs}")));
    let cert = cert();
    let mut bench: Box<dyn Lib> = match lib.as_str() {
        "quinn" => Box::new(quinn_side::Quinn::new(&cert)),
        "quiche" => Box::new(quiche_side::Quiche::new(&cert)),
        "own" => Box::new(own_side::Own::new(&cert)),
        other => fail(&format!("LIB: use quinn, quiche or own, not {other}")),
    };
    let start = cpu();
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let count = match mode.as_str() {
        "exchanges" => bench.exchanges(deadline),
        "handshakes" => bench.handshakes(deadline),
        other => fail(&format!("MODE: use exchanges or handshakes, not {other}")),
    };
    let used = cpu() - start;
    let datagrams = DATAGRAMS.with(|d| d.get());
    let client = CLIENT.with(|c| c.get());
    println!(
        "{lib} {mode} {count} {:.4} {datagrams} {:.4}",
        used.as_secs_f64(),
        client.as_secs_f64()
    );
}
