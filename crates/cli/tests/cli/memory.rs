//! Memory a hostile peer cannot inflate: the io_uring generator's receive buffers under a
//! server that floods every connection with data it never stops sending.

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

/// The peak resident memory of `qpslab ARGS` in KiB, from its own rusage (wait4).
#[allow(clippy::zombie_processes, reason = "wait4 reaps it, with its rusage")]
fn peak_kib(args: &[&str]) -> i64 {
    let child = super::common::qpslab_command()
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: rusage is plain integers and timevals; all zeros is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on the PID of our own child, with pointers to locals.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t);
    usage.ru_maxrss
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
