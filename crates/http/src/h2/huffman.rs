//! HPACK's Huffman coding (RFC 7541, section 5.2 and Appendix B).
//!
//! The code is canonical: codes of one length are consecutive, and each length's first code
//! follows from the last code of the shorter lengths. Decoding therefore needs, per length, its
//! first code, how many codes it has and where its symbols start in a list sorted by code;
//! all three are computed at compile time from the RFC's table ([`huffman_codes`]), so there is
//! no tree to build and nothing to allocate.

use super::huffman_codes::CODES;

/// Lengths run from 5 to 30 bits.
const MAX_LEN: usize = 30;
const EOS: u16 = 256;

struct Canonical {
    /// Per length: the first code, the number of codes and the index of the first one's symbol
    /// in `symbols`.
    first: [u32; MAX_LEN + 1],
    count: [u32; MAX_LEN + 1],
    start: [u16; MAX_LEN + 1],
    /// Symbols sorted by (length, code).
    symbols: [u16; 257],
}

static TABLE: Canonical = canonical();

/// Bits the fast table looks at: every code of up to this many bits (the letters, digits and
/// common punctuation of header values) decodes in one lookup.
const FAST_BITS: usize = 9;

/// Per `FAST_BITS`-bit prefix: `len << 9 | symbol` of the code it starts with, when that code
/// is at most `FAST_BITS` long; 0 otherwise (a longer code: the canonical search).
static FAST: [u16; 1 << FAST_BITS] = fast_table();

const fn fast_table() -> [u16; 1 << FAST_BITS] {
    let mut t = [0u16; 1 << FAST_BITS];
    let mut s = 0;
    while s < 257 {
        let (code, len) = CODES[s];
        let len = len as usize;
        if len <= FAST_BITS {
            let spare = FAST_BITS - len;
            let base = (code as usize) << spare;
            let mut suffix = 0;
            while suffix < (1 << spare) {
                t[base | suffix] = ((len as u16) << 9) | s as u16;
                suffix += 1;
            }
        }
        s += 1;
    }
    t
}

const fn canonical() -> Canonical {
    let mut t = Canonical {
        first: [u32::MAX; MAX_LEN + 1],
        count: [0; MAX_LEN + 1],
        start: [0; MAX_LEN + 1],
        symbols: [0; 257],
    };
    let mut s = 0;
    while s < 257 {
        let (code, len) = CODES[s];
        let len = len as usize;
        t.count[len] += 1;
        if code < t.first[len] {
            t.first[len] = code;
        }
        s += 1;
    }
    let mut len = 1;
    let mut at = 0u16;
    while len <= MAX_LEN {
        t.start[len] = at;
        at += t.count[len] as u16;
        len += 1;
    }
    let mut s = 0;
    while s < 257 {
        let (code, len) = CODES[s];
        let len = len as usize;
        let i = t.start[len] as usize + (code - t.first[len]) as usize;
        t.symbols[i] = s as u16;
        s += 1;
    }
    t
}

/// Why a Huffman string did not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HuffmanError {
    #[error("the Huffman string holds the end-of-string symbol")]
    Eos,
    #[error("the Huffman string's padding is longer than 7 bits or not all ones")]
    Padding,
}

/// Appends the decoding of `input` to `out`.
pub fn decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), HuffmanError> {
    // Bits not yet decoded, right-aligned in `acc`: filled a byte at a time up to 56, and
    // decoded while at least 30 remain (a whole code of any length, so the fast table applies),
    // then to the end once the input is used up.
    let mut acc: u64 = 0;
    let mut bits: usize = 0;
    let mut rest = input;
    loop {
        while bits <= 48 {
            let Some((&b, tail)) = rest.split_first() else { break };
            acc = (acc << 8) | u64::from(b);
            bits += 8;
            rest = tail;
        }
        let last = rest.is_empty();
        while bits >= MAX_LEN || (last && bits > 0) {
            let Some((sym, len)) = next_symbol(acc, bits) else { break };
            if sym == EOS {
                return Err(HuffmanError::Eos);
            }
            out.push(sym as u8);
            bits -= len;
            acc &= (1u64 << bits) - 1;
        }
        if last {
            break;
        }
    }
    // What is left is padding: fewer than 8 bits, all ones (the EOS code's prefix).
    if bits > 7 || acc != (1u64 << bits) - 1 {
        return Err(HuffmanError::Padding);
    }
    Ok(())
}

/// The symbol at the top of the `bits` bits in `acc`, and its length, if they hold a whole
/// one.
#[inline]
fn next_symbol(acc: u64, bits: usize) -> Option<(u16, usize)> {
    if bits >= FAST_BITS {
        let hit = FAST[((acc >> (bits - FAST_BITS)) as usize) & ((1 << FAST_BITS) - 1)];
        if hit != 0 {
            return Some((hit & 0x1ff, usize::from(hit >> 9)));
        }
    }
    long_symbol(acc, bits)
}

/// [`next_symbol`] for a code longer than the fast table's, or the last bits of the input: a
/// search by length. Kept out of line: inlined, the compiler computed every length's candidate
/// before the table lookup, a hundred instructions per symbol.
#[cold]
#[inline(never)]
fn long_symbol(acc: u64, bits: usize) -> Option<(u16, usize)> {
    let mut len = 5;
    while len <= bits.min(MAX_LEN) {
        let code = (acc >> (bits - len)) as u32;
        let offset = code.wrapping_sub(TABLE.first[len]);
        if offset < TABLE.count[len] {
            return Some((TABLE.symbols[usize::from(TABLE.start[len]) + offset as usize], len));
        }
        len += 1;
    }
    None
}

/// The length in bytes of `input` Huffman-coded.
pub fn encoded_len(input: &[u8]) -> usize {
    let bits: usize = input.iter().map(|&b| usize::from(CODES[usize::from(b)].1)).sum();
    bits.div_ceil(8)
}

/// Appends `input` Huffman-coded to `out`, padded with the end-of-string code's first bits.
pub fn encode(input: &[u8], out: &mut Vec<u8>) {
    let mut acc: u64 = 0;
    let mut bits = 0;
    for &b in input {
        let (code, len) = CODES[usize::from(b)];
        acc = (acc << len) | u64::from(code);
        bits += usize::from(len);
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
        acc &= (1u64 << bits) - 1;
    }
    if bits > 0 {
        out.push(((acc << (8 - bits)) | ((1u64 << (8 - bits)) - 1)) as u8);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn the_rfc_examples_decode_and_encode() {
        // RFC 7541, Appendix C.4.1 and C.6.1.
        for (text, coded) in [
            ("www.example.com", "f1e3 c2e5 f23a 6ba0 ab90 f4ff"),
            ("no-cache", "a8eb 1064 9cbf"),
            ("custom-key", "25a8 49e9 5ba9 7d7f"),
            ("custom-value", "25a8 49e9 5bb8 e8b4 bf"),
            ("302", "6402"),
            ("private", "aec3 771a 4b"),
            ("https://www.example.com", "9d29 ad17 1863 c78f 0b97 c8e9 ae82 ae43 d3"),
        ] {
            let mut out = Vec::new();
            decode(&hex(coded), &mut out).unwrap();
            assert_eq!(out, text.as_bytes());
            let mut enc = Vec::new();
            encode(text.as_bytes(), &mut enc);
            assert_eq!(enc, hex(coded), "{text}");
            assert_eq!(encoded_len(text.as_bytes()), enc.len());
        }
    }

    #[test]
    fn every_octet_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        let mut enc = Vec::new();
        encode(&all, &mut enc);
        let mut out = Vec::new();
        decode(&enc, &mut out).unwrap();
        assert_eq!(out, all);
    }

    #[test]
    fn bad_padding_and_eos_are_refused() {
        // 'a' is 00011 (5 bits): padded with zeros instead of ones.
        assert_eq!(decode(&[0b0001_1000], &mut Vec::new()), Err(HuffmanError::Padding));
        // A whole byte of padding after a symbol ends on a byte boundary.
        let mut enc = Vec::new();
        encode(b"0", &mut enc); // '0' is 00000, so one byte with 3 padding bits
        enc.push(0xff);
        assert_eq!(decode(&enc, &mut Vec::new()), Err(HuffmanError::Padding));
        // The end-of-string symbol itself (30 ones) followed by padding.
        assert_eq!(decode(&[0xff, 0xff, 0xff, 0xff], &mut Vec::new()), Err(HuffmanError::Eos));
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_round_trip(data in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let mut enc = Vec::new();
            encode(&data, &mut enc);
            let mut out = Vec::new();
            decode(&enc, &mut out).unwrap();
            proptest::prop_assert_eq!(out, data);
        }

        #[test]
        fn any_input_decodes_or_fails_without_panic(data in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let _ = decode(&data, &mut Vec::new());
        }
    }
}
