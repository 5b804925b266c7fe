#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| qpslab_load::fuzzing::h2_grpc_client(data));
