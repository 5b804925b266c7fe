//! Memory per connection: the io_uring generator's receive buffers under a server that floods
//! every connection with data it never stops sending (a hostile peer cannot inflate them), and
//! what the server keeps for each idle keep-alive connection on either loop.

use std::process::Stdio;

/// A server on `port` that answers each connection's request with endless `100 Continue`
/// interim responses, for at most `secs` seconds; prints "ready" once it listens.
const FLOOD: &str = r#"
import socket, sys, threading, time
port, secs = int(sys.argv[1]), float(sys.argv[2])
end = time.time() + secs
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port)); s.listen(1024); s.settimeout(0.2)
print("ready", flush=True)
def flood(c):
    try:
        c.recv(65536)
        chunk = b"HTTP/1.1 100 Continue\r\n\r\n" * 2000
        while time.time() < end:
            c.sendall(chunk)
    except OSError:
        pass
    c.close()
while time.time() < end:
    try:
        c, _ = s.accept()
    except socket.timeout:
        continue
    threading.Thread(target=flood, args=(c,), daemon=True).start()
"#;

/// Forks and execs its arguments, waits, and prints the child's peak resident KiB (wait4).
const PEAK: &str = r#"
import os, sys
pid = os.fork()
if pid == 0:
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, ru = os.wait4(pid, 0)
print(ru.ru_maxrss)
"#;

/// The peak resident memory of `qpslab ARGS` in KiB, from its own rusage. The kernel counts,
/// in a process's peak, the memory it had before its exec: a child spawned from this test
/// binary (with posix_spawn or fork) starts with the harness's resident set, which in CI, four
/// tests at a time, was 143 MiB. So a small python process forks it: at most python's own
/// few MiB carry over.
fn peak_kib(args: &[&str]) -> i64 {
    let out = std::process::Command::new("python3")
        .args(["-c", PEAK, env!("CARGO_BIN_EXE_qpslab")])
        .args(args)
        .env("QPSLAB_STORE", super::common::TEST_STORE)
        .output()
        .expect("python3");
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{text} {}", String::from_utf8_lossy(&out.stderr)))
}

/// One generator thread with 512 connections, each flooded as fast as the server can write:
/// the kernel takes the provided receive buffers in ring order, so a flood touches all of
/// them. The pool is bounded at 1,024 buffers of 16 KiB (16 MiB) per thread; the whole
/// process stays under 60 MiB (about 38 MiB measured: the debug build's 16 MiB with 4
/// connections, the pool, the connections' own buffers). With the 4,096 buffers a thread had
/// before, the pool alone was 64 MiB.
#[test]
fn a_flooding_server_cannot_grow_the_uring_generator_past_its_pool() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut server = std::process::Command::new("python3")
        .args(["-c", FLOOD, &port.to_string(), "6"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut ready = String::new();
    let out = server.stdout.take().unwrap();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut ready).unwrap();
    assert_eq!(ready.trim(), "ready");
    let url = format!("http://127.0.0.1:{port}/");
    let kib = peak_kib(&["load", "--io", "uring", "-t", "1", "-c", "512", "-d", "2s", &url]);
    let _ = server.kill();
    let _ = server.wait();
    assert!(kib > 16 * 1024, "the flood reached the pool: {kib} KiB");
    assert!(kib < 60 * 1024, "{kib} KiB");
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// TCP connections established to local `port` from `peer`, from /proc/net/tcp. The peer
/// matters: another test's client can have `port` as its own ephemeral port.
fn established(port: u16, peer: std::net::Ipv4Addr) -> usize {
    use qpslab_sys::sockets::{tcp_sockets, ESTABLISHED};
    tcp_sockets(&qpslab_sys::root::Root::live())
        .iter()
        .filter(|s| s.local.port() == port && s.remote.ip() == peer && s.state == ESTABLISHED)
        .count()
}

/// The server's resident bytes per idle keep-alive connection: its RSS with 2,000 connections
/// open, each answered at least once and idle between requests (`load -R`: one request per
/// connection every 2 s), less its RSS after serving 10, over 1,990.
fn idle_bytes_per_connection(io: &str, peer: std::net::Ipv4Addr) -> f64 {
    const CONNS: usize = 2000;
    let server = super::ServeChild::start(&[], &["-w", "1", "--io", io, "--idle-timeout", "60s"]);
    let url = format!("http://{}/", server.addr);
    let port: u16 = server.addr.rsplit(':').next().unwrap().parse().unwrap();
    let warm = super::qpslab(&["load", "-c", "10", "-n", "20", &url]);
    assert_eq!(warm.status.code(), Some(0));
    std::thread::sleep(std::time::Duration::from_millis(300));
    let pid = server.child.id();
    let before = rss_kib(pid);
    let mut load = super::common::qpslab_command()
        .args(["load", "-c", &CONNS.to_string(), "-R", "1000", "-d", "8s", "--timeout", "30s"])
        .args(["--source", &format!("{peer}-{peer}")])
        .arg(&url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(6);
    // The most seen in one read: a read can also miss a row (`sockets::parse_table` says why).
    let mut open = 0;
    while open < CONNS && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
        open = open.max(established(port, peer));
    }
    // Every connection has had a request by now (one every 2 s each).
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let after = rss_kib(pid);
    let _ = load.kill();
    let _ = load.wait();
    assert_eq!(open, CONNS, "connections open");
    let per = (after.saturating_sub(before) * 1024) as f64 / (CONNS - 10) as f64;
    eprintln!(
        "serve --io {io}: {before} KiB with 10, {after} KiB with {CONNS}: {per:.0} bytes each"
    );
    per
}

/// An idle connection holds no buffer: its input and output buffers go back to the worker's
/// pool once its request is answered (about 0.3 KiB a connection measured, the slot itself;
/// nginx 0.5 KiB). Before, the epoll loop kept its 4 KiB input buffer (4.6 KiB a connection)
/// and the io_uring loop's 2,048 receive buffers were all touched in turn (8 MiB).
#[test]
fn an_idle_connection_costs_the_epoll_server_under_a_kib() {
    let per = idle_bytes_per_connection("epoll", std::net::Ipv4Addr::new(127, 0, 3, 1));
    assert!(per < 1024.0, "{per:.0} bytes per idle connection");
}

#[test]
fn an_idle_connection_costs_the_uring_server_under_a_kib() {
    let per = idle_bytes_per_connection("uring", std::net::Ipv4Addr::new(127, 0, 3, 2));
    assert!(per < 1024.0, "{per:.0} bytes per idle connection");
}
