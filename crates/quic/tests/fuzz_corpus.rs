//! The quic_packets fuzz target's committed corpus (fuzz/corpus/quic_packets, grown by
//! `scripts/fuzz` and minimised), replayed through the body the fuzzer runs.

use qpslab_testkit::replay_corpus;

#[test]
fn quic_packets() {
    replay_corpus("quic_packets", 20, qpslab_quic::fuzzing::packets);
}
