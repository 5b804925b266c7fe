//! RFC 9113 conformance: every case of the `httpwg` crate (a Rust port of h2spec, 100-odd
//! cases from the preface to HTTP semantics) against the server on each event loop, h2c with
//! prior knowledge, one server per case.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod support;

use std::rc::Rc;
use std::time::Duration;

use support::{opts_on, TestServer};

/// Runs one case against a fresh server on `io`.
fn check<F, Fut>(io: qpslab_serve::IoChoice, case: F)
where
    F: FnOnce(httpwg::Conn<buffet::net::TcpStream>) -> Fut,
    Fut: std::future::Future<Output = eyre::Result<()>>,
{
    // One case at a time: the cases' own io_uring runtime (buffet) lost frames now and then
    // when several ran on parallel test threads (about one run in four; none in 6 runs of
    // one at a time).
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    // The deadlines of a server in production, not the tests' short ones: the cases are about
    // the protocol, and a slow turn of a busy test machine must not close their connection.
    let mut opts = opts_on(io);
    opts.settings.header_timeout = Duration::from_secs(10);
    opts.settings.body_timeout = Duration::from_secs(10);
    let server = TestServer::start(opts);
    let addr = server.addr();
    let config = Rc::new(httpwg::Config {
        host: addr.ip().to_string(),
        port: addr.port(),
        // A body of 64 bytes: one case needs at least 5 (qpslab's default is 3).
        path: "/?s=64".into(),
        tls: false,
        timeout: Duration::from_secs(2),
        max_header_len: 4000,
    });
    // Shown with a failure the case itself panics on (the io is not in its message).
    eprintln!("on {io:?}");
    buffet::start(async move {
        let stream = buffet::net::TcpStream::connect(addr).await.unwrap();
        let conn = httpwg::Conn::new(config, stream);
        case(conn).await.unwrap_or_else(|e| panic!("{io:?}: {e:?}"));
    });
}

httpwg_macros::tests! {{
    crate::check(qpslab_serve::IoChoice::Epoll, test);
    crate::check(qpslab_serve::IoChoice::Uring, test);
}}
