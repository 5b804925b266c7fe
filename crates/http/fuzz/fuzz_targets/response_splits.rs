//! Differential fuzzing of the response parser: the same bytes fed whole, split in two at a
//! fuzzer-chosen point, and one byte at a time must give the same responses or the same error.
//! Run: `cd crates/http && RUSTC_BOOTSTRAP=1 cargo fuzz run response_splits -- -max_total_time=60`
#![no_main]

use libfuzzer_sys::fuzz_target;
use qpslab_http::{ParseError, Response, ResponseParser};

fn parse(chunks: &[&[u8]]) -> Result<Vec<Response>, ParseError> {
    let mut parser = ResponseParser::default();
    let mut carry: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    for chunk in chunks {
        carry.extend_from_slice(chunk);
        let mut off = 0;
        while off < carry.len() {
            let step = parser.feed(&carry[off..], false)?;
            off += step.consumed;
            match step.response {
                Some(r) => out.push(r),
                None => break,
            }
        }
        carry.drain(..off);
    }
    if let Some(r) = parser.eof(carry.len())? {
        out.push(r);
    }
    Ok(out)
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, input)) = data.split_first() else { return };
    let split = usize::from(split).min(input.len());
    let whole = parse(&[input]);
    let halves = parse(&[&input[..split], &input[split..]]);
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    let bytewise = parse(&bytes);
    assert_eq!(whole, halves);
    assert_eq!(whole, bytewise);
});
