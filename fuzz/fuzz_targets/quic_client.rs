#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| qpslab_quic::fuzzing::client(data));
