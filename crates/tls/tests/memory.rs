//! What one TLS connection keeps on the heap once its handshake is done and its first request
//! answered, counted by an allocator that tracks the bytes live: the figure a server pays per
//! idle HTTPS connection on top of its plain connection state.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use qpslab_tls::Pump;
use rustls::pki_types::ServerName;
use rustls::{ClientConnection, ServerConnection};

mod common;

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; the counter only adds.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: a pointer this allocator gave out, with its layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        // SAFETY: a pointer this allocator gave out, its layout, the caller's new size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Moves `from`'s records to `to`; returns the plaintext they carried.
fn deliver<A, B, DA, DB>(from: &mut Pump<A>, to: &mut Pump<B>) -> Vec<u8>
where
    A: std::ops::DerefMut<Target = rustls::ConnectionCommon<DA>>,
    B: std::ops::DerefMut<Target = rustls::ConnectionCommon<DB>>,
{
    let bytes = from.take_output(Vec::new());
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    to.received(&bytes, &mut buf, &mut |p| {
        got.extend_from_slice(p);
        true
    })
    .unwrap();
    got
}

/// A server connection after its handshake (TLS 1.3, ECDSA P-256) and one request and answer,
/// with no output buffer of ours left (as an idle server connection gives it back): rustls
/// keeps its record buffer (4 KiB: rustls 0.23 sizes its deframer buffer for the next read and
/// never frees it while the connection lives; only its unbuffered API would let the caller
/// lend one), the connection state (1.2 KiB, in the Pump) and the record keys. Measured 6,583
/// bytes; the bound fails if rustls starts keeping more (a second record buffer).
#[test]
fn an_idle_server_connection_keeps_under_eight_kib() {
    const CONNS: usize = 50;
    let (client_cfg, server_cfg) = common::configs(qpslab_tls::provider());
    let mut servers = Vec::with_capacity(CONNS);
    let before = LIVE.load(Ordering::Relaxed);
    for _ in 0..CONNS {
        let name = ServerName::try_from("localhost").unwrap();
        let mut c = Pump::new(ClientConnection::new(client_cfg.clone(), name).unwrap());
        let mut s = Pump::new(ServerConnection::new(server_cfg.clone()).unwrap());
        while c.is_handshaking() || s.is_handshaking() {
            deliver(&mut c, &mut s);
            deliver(&mut s, &mut c);
        }
        c.write(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n");
        assert_eq!(deliver(&mut c, &mut s), b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n");
        s.write(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n");
        assert!(deliver(&mut s, &mut c).ends_with(b"ok\n"));
        assert!(s.take_idle_output().is_none(), "the records went out with take_output");
        drop(c);
        servers.push(s);
    }
    let per = (LIVE.load(Ordering::Relaxed) - before) / CONNS as isize;
    let vec_of_them = (std::mem::size_of::<Pump<ServerConnection>>() * CONNS) as isize;
    eprintln!(
        "rustls server connection: {per} bytes live each ({} in the Pump itself)",
        vec_of_them / CONNS as isize
    );
    assert!(per < 8 * 1024, "{per} bytes per idle TLS connection");
    assert!(per > 4096, "{per}: rustls' 4 KiB record buffer is counted");
}
