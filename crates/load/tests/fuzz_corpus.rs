//! The generator's HTTP/2, gRPC and HTTP/3 session fuzz corpora (fuzz/corpus/load_h2_client,
//! load_grpc_client and load_h3_client), replayed through the bodies `scripts/fuzz` runs: server bytes, and scripts
//! of what a server does over QUIC.

#[test]
fn h2_client_sessions() {
    qpslab_testkit::replay_corpus("load_h2_client", 5, qpslab_load::fuzzing::h2_client);
}

#[test]
fn grpc_client_sessions() {
    qpslab_testkit::replay_corpus("load_grpc_client", 5, qpslab_load::fuzzing::h2_grpc_client);
}

#[test]
fn h3_client_sessions() {
    qpslab_testkit::replay_corpus("load_h3_client", 5, qpslab_load::fuzzing::h3_client);
}
