//! QUIC's variable-length integers (RFC 9000 section 16): the two high bits of the first byte
//! give the length (1, 2, 4 or 8 bytes), the rest is the value, big-endian, up to 2^62-1.

/// The largest value a varint carries.
pub const MAX: u64 = (1 << 62) - 1;

/// The value at the start of `b` and the bytes it took; None when `b` ends inside it.
pub fn read(b: &[u8]) -> Option<(u64, usize)> {
    let first = *b.first()?;
    let len = 1usize << (first >> 6);
    let bytes = b.get(..len)?;
    let mut v = u64::from(first & 0x3f);
    for &x in &bytes[1..] {
        v = (v << 8) | u64::from(x);
    }
    Some((v, len))
}

/// How many bytes `v` takes, in its shortest form.
pub fn len(v: u64) -> usize {
    match v {
        0..=63 => 1,
        64..=16_383 => 2,
        16_384..=1_073_741_823 => 4,
        _ => 8,
    }
}

/// Appends `v` in its shortest form; values past [`MAX`] are clamped to it (no caller sends
/// one: lengths and ids here are far below).
pub fn put(out: &mut Vec<u8>, v: u64) {
    let v = v.min(MAX);
    match len(v) {
        1 => out.push(v as u8),
        2 => out.extend_from_slice(&(v as u16 | 0x4000).to_be_bytes()),
        4 => out.extend_from_slice(&(v as u32 | 0x8000_0000).to_be_bytes()),
        _ => out.extend_from_slice(&(v | 0xc000_0000_0000_0000).to_be_bytes()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    /// RFC 9000 appendix A.1's examples.
    #[test]
    fn the_rfc_examples_decode() {
        let cases: [(&[u8], u64); 5] = [
            (&[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c], 151_288_809_941_952_652),
            (&[0x9d, 0x7f, 0x3e, 0x7d], 494_878_333),
            (&[0x7b, 0xbd], 15_293),
            (&[0x25], 37),
            (&[0x40, 0x25], 37),
        ];
        for (b, v) in cases {
            assert_eq!(read(b), Some((v, b.len())), "{b:x?}");
        }
    }

    #[test]
    fn a_cut_varint_is_none() {
        assert_eq!(read(&[]), None);
        assert_eq!(read(&[0x9d, 0x7f, 0x3e]), None);
    }

    proptest::proptest! {
        #[test]
        fn every_value_round_trips_in_its_shortest_form(v in 0..=MAX) {
            let mut out = Vec::new();
            put(&mut out, v);
            proptest::prop_assert_eq!(out.len(), len(v));
            proptest::prop_assert_eq!(read(&out), Some((v, out.len())));
        }
    }
}
