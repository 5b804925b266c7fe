//! The generator's HTTP/2 session fuzz corpus (fuzz/corpus/load_h2_client), replayed through
//! the body `scripts/fuzz` runs: server bytes.

#[test]
fn h2_client_sessions() {
    qpslab_testkit::replay_corpus("load_h2_client", 5, qpslab_load::fuzzing::h2_client);
}
