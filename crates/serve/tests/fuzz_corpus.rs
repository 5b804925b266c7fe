//! The server session's fuzz corpus (fuzz/corpus/serve_session, serve_h2_session, serve_tls and
//! serve_h3), replayed through the bodies `scripts/fuzz` runs: HTTP/1.1, HTTP/2 and TLS client
//! bytes, and scripts of what an HTTP/3 client does over QUIC.

use qpslab_testkit::replay_corpus;

#[test]
fn http1_sessions() {
    replay_corpus("serve_session", 20, qpslab_serve::fuzzing::session);
}

#[test]
fn h2_sessions() {
    replay_corpus("serve_h2_session", 5, qpslab_serve::fuzzing::h2_session);
}

#[test]
fn tls_sessions() {
    replay_corpus("serve_tls", 3, qpslab_serve::fuzzing::tls_session);
}

#[test]
fn h3_sessions() {
    replay_corpus("serve_h3", 3, qpslab_serve::fuzzing::h3_session);
}
