//! The steady state allocates nothing per request. A separate test binary (the only exception
//! to one per crate) because it installs a counting global allocator and must run alone in its
//! process for the count to mean anything.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_for(io: qpslab_load::IoChoice, url: &str, requests: u64) -> u64 {
    allocations_with(support::opts_on(io, url), requests)
}

fn allocations_with(mut o: qpslab_load::LoadOptions, requests: u64) -> u64 {
    o.requests = Some(requests);
    o.connections = Some(20);
    let cfg = qpslab_load::LoadConfig::from_options(&o).unwrap();
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let result = qpslab_load::run(
        &cfg,
        &std::sync::atomic::AtomicBool::new(false),
        &mut qpslab_load::feed::Unwatched,
    )
    .unwrap();
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    assert_eq!(result.rec.ok, requests);
    after - before
}

/// One test function: `cargo test` runs the tests of a binary on parallel threads, and the
/// counter is process-wide.
#[test]
fn allocations_per_request() {
    no_allocation_per_request();
    no_allocation_per_request_over_h2();
    two_allocations_per_request_over_tls_and_none_of_our_own();
}

/// HTTP/2 with 10 streams per connection: frames written into the connection's buffer,
/// responses decoded by the HPACK decoder's kept scratch. nginx ends each connection after 1,000
/// requests with a GOAWAY, so the 38 further connections (a decoder, the server's SETTINGS
/// each) are the only allocations allowed beyond the short run's.
fn no_allocation_per_request_over_h2() {
    let nginx = support::nginx::Nginx::start_h2(None);
    for io in [qpslab_load::IoChoice::Epoll, qpslab_load::IoChoice::Uring] {
        let o = || {
            let mut o = support::opts_on(io, &nginx.url("/1k"));
            o.h2 = true;
            o.streams = 10;
            o
        };
        let short = allocations_with(o(), 2_000);
        let long = allocations_with(o(), 40_000);
        let extra = long.saturating_sub(short);
        assert!(
            extra < 1_000,
            "{io:?}: 38,000 more requests made {extra} more allocations ({short} vs {long})"
        );
    }
}

/// Also with a `{seq}` ID in the path: each connection writes its digits into a copy of its
/// own, made once.
fn no_allocation_per_request() {
    let nginx = support::nginx::Nginx::start();
    // nginx closes each connection after 1000 requests, so reconnects are part of the steady
    // state being checked too.
    for url in [nginx.url("/1k"), nginx.url("/t/{seq}")] {
        for io in [qpslab_load::IoChoice::Epoll, qpslab_load::IoChoice::Uring] {
            let short = allocations_for(io, &url, 2_000);
            let long = allocations_for(io, &url, 40_000);
            let extra = long.saturating_sub(short);
            assert!(
                extra < 100,
                "{io:?} {url}: 38,000 more requests made {extra} more allocations ({short} vs \
                 {long})"
            );
        }
    }
}

/// HTTPS keep-alive: every request encrypted and every response decrypted. rustls 0.23 holds
/// each record it encrypts and each record it decrypts in a buffer of its own (its
/// `ChunkVecBuffer`; the unbuffered API still copies each received record into one, by its
/// own note), so TLS costs exactly two allocations per request, and no more: a guard against
/// anything of qpslab's own on this path.
fn two_allocations_per_request_over_tls_and_none_of_our_own() {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let nginx = support::nginx::Nginx::start_tls(&made.cert.pem(), &made.key_pair.serialize_pem());
    let o = || {
        let mut o = support::opts_on(qpslab_load::IoChoice::Auto, &nginx.https_url("/1k"));
        o.tls.insecure = true;
        o
    };
    let short = allocations_with(o(), 2_000);
    let long = allocations_with(o(), 40_000);
    let extra = long.saturating_sub(short);
    assert!(
        extra < 2 * 38_000 + 100,
        "38,000 more requests made {extra} more allocations ({short} vs {long})"
    );
}
