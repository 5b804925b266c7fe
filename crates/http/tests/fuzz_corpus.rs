//! The fuzz targets' committed corpus (fuzz/corpus/, grown by `scripts/fuzz` and minimised),
//! replayed through the same bodies the fuzzer runs: every input that once found a bug, or
//! that reaches code no other reaches, runs on stable Rust in every test run.

use qpslab_testkit::replay_corpus;

#[test]
fn responses() {
    replay_corpus("response", 5, qpslab_http::fuzzing::response);
}

#[test]
fn request_heads() {
    replay_corpus("request_head", 20, qpslab_http::fuzzing::request_head);
}

#[test]
fn chunked_bodies() {
    replay_corpus("chunked", 5, qpslab_http::fuzzing::chunked);
}

#[test]
fn hpack_blocks() {
    replay_corpus("hpack", 3, qpslab_http::fuzzing::hpack);
}

#[test]
fn h2_frames() {
    replay_corpus("h2_frames", 5, qpslab_http::fuzzing::h2_frames);
}

#[test]
fn qpack_sections() {
    replay_corpus("qpack", 3, qpslab_http::fuzzing::qpack);
}

#[test]
fn h3_frames() {
    replay_corpus("h3_frames", 3, qpslab_http::fuzzing::h3_frames);
}

#[test]
fn grpc_messages() {
    replay_corpus("grpc_messages", 5, qpslab_http::fuzzing::grpc_messages);
}
