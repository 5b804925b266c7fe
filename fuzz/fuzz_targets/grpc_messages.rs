#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| qpslab_http::fuzzing::grpc_messages(data));
