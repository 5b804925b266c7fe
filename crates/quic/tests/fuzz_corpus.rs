//! The QUIC fuzz targets' committed corpora (fuzz/corpus/quic_packets and quic_client, grown
//! by `scripts/fuzz` and minimised), replayed through the bodies the fuzzer runs.

use qpslab_testkit::replay_corpus;

#[test]
fn quic_packets() {
    replay_corpus("quic_packets", 20, qpslab_quic::fuzzing::packets);
}

#[test]
fn quic_client() {
    replay_corpus("quic_client", 20, qpslab_quic::fuzzing::client);
}
