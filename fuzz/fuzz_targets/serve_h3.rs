#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| qpslab_serve::fuzzing::h3_session(data));
