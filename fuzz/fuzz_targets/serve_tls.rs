#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| qpslab_serve::fuzzing::tls_session(data));
