//! Differential fuzzing of the response parser: the same bytes fed whole, split in two at a
//! fuzzer-chosen point, and one byte at a time must give the same responses or the same error.
//! Run: `cd crates/http && RUSTC_BOOTSTRAP=1 cargo fuzz run response_splits -- -max_total_time=60`
#![no_main]

use libfuzzer_sys::fuzz_target;
use qpslab_http::response::parse_reads;

fuzz_target!(|data: &[u8]| {
    let Some((&split, input)) = data.split_first() else { return };
    let split = usize::from(split).min(input.len());
    let whole = parse_reads(&[input], false);
    let halves = parse_reads(&[&input[..split], &input[split..]], false);
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    let bytewise = parse_reads(&bytes, false);
    assert_eq!(whole, halves);
    assert_eq!(whole, bytewise);
});
