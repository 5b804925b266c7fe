//! QPACK (RFC 9204) with the dynamic table off: this side announces
//! SETTINGS_QPACK_MAX_TABLE_CAPACITY 0 and no blocked streams, so a field section holds only
//! static-table references and literals, decodes on its own and never waits for an encoder
//! stream. A section that refers to a dynamic table is a decompression failure.

use crate::h2::hpack::{integer, put_integer};
use crate::h2::huffman;

/// RFC 9204 appendix A: the static table, indexed from 0.
pub const STATIC: [(&[u8], &[u8]); 99] = [
    (b":authority", b""),
    (b":path", b"/"),
    (b"age", b"0"),
    (b"content-disposition", b""),
    (b"content-length", b"0"),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"referer", b""),
    (b"set-cookie", b""),
    (b":method", b"CONNECT"),
    (b":method", b"DELETE"),
    (b":method", b"GET"),
    (b":method", b"HEAD"),
    (b":method", b"OPTIONS"),
    (b":method", b"POST"),
    (b":method", b"PUT"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"103"),
    (b":status", b"200"),
    (b":status", b"304"),
    (b":status", b"404"),
    (b":status", b"503"),
    (b"accept", b"*/*"),
    (b"accept", b"application/dns-message"),
    (b"accept-encoding", b"gzip, deflate, br"),
    (b"accept-ranges", b"bytes"),
    (b"access-control-allow-headers", b"cache-control"),
    (b"access-control-allow-headers", b"content-type"),
    (b"access-control-allow-origin", b"*"),
    (b"cache-control", b"max-age=0"),
    (b"cache-control", b"max-age=2592000"),
    (b"cache-control", b"max-age=604800"),
    (b"cache-control", b"no-cache"),
    (b"cache-control", b"no-store"),
    (b"cache-control", b"public, max-age=31536000"),
    (b"content-encoding", b"br"),
    (b"content-encoding", b"gzip"),
    (b"content-type", b"application/dns-message"),
    (b"content-type", b"application/javascript"),
    (b"content-type", b"application/json"),
    (b"content-type", b"application/x-www-form-urlencoded"),
    (b"content-type", b"image/gif"),
    (b"content-type", b"image/jpeg"),
    (b"content-type", b"image/png"),
    (b"content-type", b"text/css"),
    (b"content-type", b"text/html; charset=utf-8"),
    (b"content-type", b"text/plain"),
    (b"content-type", b"text/plain;charset=utf-8"),
    (b"range", b"bytes=0-"),
    (b"strict-transport-security", b"max-age=31536000"),
    (b"strict-transport-security", b"max-age=31536000; includesubdomains"),
    (b"strict-transport-security", b"max-age=31536000; includesubdomains; preload"),
    (b"vary", b"accept-encoding"),
    (b"vary", b"origin"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-xss-protection", b"1; mode=block"),
    (b":status", b"100"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"302"),
    (b":status", b"400"),
    (b":status", b"403"),
    (b":status", b"421"),
    (b":status", b"425"),
    (b":status", b"500"),
    (b"accept-language", b""),
    (b"access-control-allow-credentials", b"FALSE"),
    (b"access-control-allow-credentials", b"TRUE"),
    (b"access-control-allow-headers", b"*"),
    (b"access-control-allow-methods", b"get"),
    (b"access-control-allow-methods", b"get, post, options"),
    (b"access-control-allow-methods", b"options"),
    (b"access-control-expose-headers", b"content-length"),
    (b"access-control-request-headers", b"content-type"),
    (b"access-control-request-method", b"get"),
    (b"access-control-request-method", b"post"),
    (b"alt-svc", b"clear"),
    (b"authorization", b""),
    (b"content-security-policy", b"script-src 'none'; object-src 'none'; base-uri 'none'"),
    (b"early-data", b"1"),
    (b"expect-ct", b""),
    (b"forwarded", b""),
    (b"if-range", b""),
    (b"origin", b""),
    (b"purpose", b"prefetch"),
    (b"server", b""),
    (b"timing-allow-origin", b"*"),
    (b"upgrade-insecure-requests", b"1"),
    (b"user-agent", b""),
    (b"x-forwarded-for", b""),
    (b"x-frame-options", b"deny"),
    (b"x-frame-options", b"sameorigin"),
];

/// Why a field section did not decode: a QPACK_DECOMPRESSION_FAILED for the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QpackError {
    #[error("the field section ends inside a field line")]
    Truncated,
    #[error("an integer in the field section does not fit")]
    Integer,
    #[error("static table index {0} is past its 99 entries")]
    Index(usize),
    #[error("the field section refers to a dynamic table, which this side set to 0 bytes")]
    Dynamic,
    #[error("a Huffman-coded string does not decode")]
    Huffman,
    #[error("the decoded field section exceeds {0} bytes")]
    TooLarge(usize),
}

impl From<crate::h2::hpack::HpackError> for QpackError {
    fn from(e: crate::h2::hpack::HpackError) -> Self {
        match e {
            crate::h2::hpack::HpackError::Truncated => QpackError::Truncated,
            _ => QpackError::Integer,
        }
    }
}

/// A field section decoder. Holds scratch space only: with no dynamic table, sections are
/// independent.
#[derive(Debug)]
pub struct Decoder {
    /// The most a section may decode to (names and values, 32 more per field), as
    /// SETTINGS_MAX_FIELD_SECTION_SIZE counts.
    max: usize,
    name: Vec<u8>,
    value: Vec<u8>,
}

/// Where a string landed: in the section itself, or decoded into a scratch buffer.
#[derive(Clone, Copy)]
enum Str {
    Raw(usize, usize),
    Scratch,
}

impl Decoder {
    pub fn new(max: usize) -> Decoder {
        Decoder { max, name: Vec::new(), value: Vec::new() }
    }

    /// Decodes one field section, calling `field` with each name and value in order; returns
    /// its size as SETTINGS_MAX_FIELD_SECTION_SIZE counts it.
    pub fn decode(
        &mut self,
        section: &[u8],
        field: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, QpackError> {
        self.decode_some(section, &|_| true, field)
    }

    /// [`Decoder::decode`] for the fields whose names `want` takes: the others' values are
    /// stepped over without their Huffman coding undone (a client that needs `:status` alone
    /// spent a tenth of its time decoding dates), counted against the limit by their coded
    /// length. The section's structure is checked whole.
    pub fn decode_some(
        &mut self,
        section: &[u8],
        want: &dyn Fn(&[u8]) -> bool,
        field: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, QpackError> {
        // The prefix: the Required Insert Count, then the Base; with no dynamic table the
        // count must be 0 (RFC 9204 section 4.5.1.1), and the Base is then unused.
        let (required, a) = integer(section, 8)?;
        if required != 0 {
            return Err(QpackError::Dynamic);
        }
        let (_, b) = integer(section.get(a..).ok_or(QpackError::Truncated)?, 7)?;
        let mut at = a + b;
        let mut total = 0usize;
        while at < section.len() {
            let first = section[at];
            let (name, value): (Str, Str);
            let ni: Option<usize>;
            if first & 0x80 != 0 {
                // Indexed field line: 1 T index(6).
                if first & 0x40 == 0 {
                    return Err(QpackError::Dynamic);
                }
                let (i, n) = integer(&section[at..], 6)?;
                at += n;
                let (nm, v) = *STATIC.get(i).ok_or(QpackError::Index(i))?;
                total = self.count(total, nm.len() + v.len())?;
                if want(nm) {
                    field(nm, v);
                }
                continue;
            } else if first & 0x40 != 0 {
                // Literal with name reference: 01 N T index(4), then the value.
                if first & 0x10 == 0 {
                    return Err(QpackError::Dynamic);
                }
                let (i, n) = integer(&section[at..], 4)?;
                at += n;
                let wanted = want(STATIC.get(i).ok_or(QpackError::Index(i))?.0);
                ni = Some(i);
                name = Str::Raw(0, 0);
                value = self.string(section, &mut at, 7, false, wanted)?;
            } else if first & 0x20 != 0 {
                // Literal with literal name: 001 N H len(3), then the value.
                ni = None;
                name = self.string(section, &mut at, 3, true, true)?;
                let nm: &[u8] = match name {
                    Str::Raw(s, e) => &section[s..e],
                    Str::Scratch => &self.name,
                };
                let wanted = want(nm);
                value = self.string(section, &mut at, 7, false, wanted)?;
            } else {
                // Post-base forms (0001 and 0000) refer to the dynamic table.
                return Err(QpackError::Dynamic);
            }
            let nm: &[u8] = match (ni, name) {
                (Some(i), _) => STATIC[i].0,
                (None, Str::Raw(s, e)) => &section[s..e],
                (None, Str::Scratch) => &self.name,
            };
            let v: &[u8] = match value {
                Str::Raw(s, e) => &section[s..e],
                Str::Scratch => &self.value,
            };
            total = count(self.max, total, nm.len() + v.len())?;
            if want(nm) {
                field(nm, v);
            }
        }
        Ok(total)
    }

    fn count(&self, total: usize, len: usize) -> Result<usize, QpackError> {
        count(self.max, total, len)
    }

    /// A string literal at `at` whose length has a `prefix`-bit integer after the Huffman
    /// flag (the bit just above it); `is_name` decodes into the name's scratch buffer; a
    /// string not `wanted` is left coded (its bytes as they are in the section).
    fn string(
        &mut self,
        section: &[u8],
        at: &mut usize,
        prefix: u8,
        is_name: bool,
        wanted: bool,
    ) -> Result<Str, QpackError> {
        let b = section.get(*at..).ok_or(QpackError::Truncated)?;
        let huff = b.first().ok_or(QpackError::Truncated)? & (1 << prefix) != 0;
        let (len, n) = integer(b, prefix)?;
        let start = *at + n;
        let end = start.checked_add(len).ok_or(QpackError::Integer)?;
        if end > section.len() {
            return Err(QpackError::Truncated);
        }
        *at = end;
        if !huff || !wanted {
            if len > self.max {
                return Err(QpackError::TooLarge(self.max));
            }
            return Ok(Str::Raw(start, end));
        }
        let out = if is_name { &mut self.name } else { &mut self.value };
        out.clear();
        huffman::decode(&section[start..end], out).map_err(|_| QpackError::Huffman)?;
        if out.len() > self.max {
            return Err(QpackError::TooLarge(self.max));
        }
        Ok(Str::Scratch)
    }
}

fn count(max: usize, total: usize, len: usize) -> Result<usize, QpackError> {
    let t = total + len + 32;
    if t > max {
        return Err(QpackError::TooLarge(max));
    }
    Ok(t)
}

/// The static table's index of a whole field, if it has one.
pub fn static_field(name: &[u8], value: &[u8]) -> Option<usize> {
    STATIC.iter().position(|&(n, v)| n == name && v == value)
}

/// The static table's index of a field's name, if it has one.
pub fn static_name(name: &[u8]) -> Option<usize> {
    STATIC.iter().position(|(n, _)| *n == name)
}

/// Appends a field section's prefix: no dynamic table referred to.
pub fn put_prefix(out: &mut Vec<u8>) {
    out.extend_from_slice(&[0, 0]);
}

/// Appends one field line: a static reference when the table has the field, else a literal
/// (with the table's name when it has that), strings Huffman-coded when shorter.
pub fn put_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    put_field_as(out, name, value, true);
}

/// [`put_field`], strings Huffman-coded only when `huffman` (else as they are: a value's
/// bytes then stand in the section as written, where an ID's digits can be written in place).
fn put_field_as(out: &mut Vec<u8>, name: &[u8], value: &[u8], huffman: bool) {
    if let Some(i) = static_field(name, value) {
        put_integer(out, 0xc0, 6, i);
        return;
    }
    if let Some(i) = static_name(name) {
        put_integer(out, 0x50, 4, i);
    } else {
        put_string(out, 0x20, 3, name, huffman);
    }
    put_string(out, 0, 7, value, huffman);
}

/// A string literal whose Huffman flag sits just above a `prefix`-bit length.
fn put_string(out: &mut Vec<u8>, flags: u8, prefix: u8, s: &[u8], huffman: bool) {
    let coded = huffman::encoded_len(s);
    if huffman && coded < s.len() {
        put_integer(out, flags | (1 << prefix), prefix, coded);
        huffman::encode(s, out);
    } else {
        put_integer(out, flags, prefix, s.len());
        out.extend_from_slice(s);
    }
}

/// A whole field section of `fields`.
pub fn encode<'a>(fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Vec<u8> {
    encode_as(fields, true)
}

/// A whole field section of `fields`, its strings Huffman-coded only when `huffman`.
pub fn encode_as<'a>(
    fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    huffman: bool,
) -> Vec<u8> {
    let mut out = Vec::new();
    put_prefix(&mut out);
    for (n, v) in fields {
        put_field_as(&mut out, n, v, huffman);
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    fn decoded(section: &[u8]) -> Result<Vec<(String, String)>, QpackError> {
        let mut out = Vec::new();
        Decoder::new(4096).decode(section, &mut |n, v| {
            out.push((String::from_utf8_lossy(n).into(), String::from_utf8_lossy(v).into()));
        })?;
        Ok(out)
    }

    #[test]
    fn only_the_wanted_fields_are_decoded() {
        let section = encode([
            (&b":status"[..], &b"503"[..]),
            (b"date", b"Sun, 06 Dec 2026 02:30:49 GMT"),
            (b"x-long-header-name", b"a value coded with huffman"),
        ]);
        let mut got = Vec::new();
        let mut dec = Decoder::new(4096);
        let want = |n: &[u8]| n == b":status";
        dec.decode_some(&section, &want, &mut |n, v| got.push((n.to_vec(), v.to_vec()))).unwrap();
        assert_eq!(got, [(b":status".to_vec(), b"503".to_vec())]);
        // The others are stepped over, their coding not undone: a broken one passes unseen,
        // as the whole decode refuses it.
        let mut broken = encode([(&b":status"[..], &b"200"[..])]);
        let at = broken.len();
        put_field(&mut broken, b"date", b"Sun, 06 Dec 2026 02:30:49 GMT");
        let last = broken.len() - 1;
        broken[last] = 0x00;
        assert!(broken[at + 1] & 0x80 != 0, "the value is Huffman-coded");
        let mut st = None;
        dec.decode_some(&broken, &want, &mut |_, v| st = Some(v.to_vec())).unwrap();
        assert_eq!(st.as_deref(), Some(&b"200"[..]));
        assert_eq!(decoded(&broken), Err(QpackError::Huffman));
        // A truncated section is refused either way.
        let cut = &section[..section.len() - 3];
        assert_eq!(dec.decode_some(cut, &want, &mut |_, _| {}), Err(QpackError::Truncated));
    }

    #[test]
    fn the_static_table_is_the_rfcs() {
        assert_eq!(STATIC[0], (&b":authority"[..], &b""[..]));
        assert_eq!(STATIC[17], (&b":method"[..], &b"GET"[..]));
        assert_eq!(STATIC[25], (&b":status"[..], &b"200"[..]));
        assert_eq!(STATIC[31], (&b"accept-encoding"[..], &b"gzip, deflate, br"[..]));
        assert_eq!(STATIC[63], (&b":status"[..], &b"100"[..]));
        assert_eq!(STATIC[71], (&b":status"[..], &b"500"[..]));
        assert_eq!(STATIC[98], (&b"x-frame-options"[..], &b"sameorigin"[..]));
    }

    /// RFC 9204 appendix B.1: a literal with a static name reference (:path /index.html),
    /// as the example's encoder sends it with no dynamic table.
    #[test]
    fn the_rfc_example_decodes() {
        let section = b"\x00\x00\x51\x0b/index.html";
        assert_eq!(decoded(section).unwrap(), [(":path".into(), "/index.html".into())]);
    }

    #[test]
    fn encoded_fields_decode_to_themselves() {
        let fields: [(&[u8], &[u8]); 6] = [
            (b":method", b"GET"),
            (b":scheme", b"https"),
            (b":authority", b"127.0.0.1:8443"),
            (b":path", b"/a/long/path?with=query&and=more"),
            (b"x-custom-header", b"value"),
            (b"user-agent", b"qpslab"),
        ];
        let s = encode(fields);
        let want: Vec<(String, String)> = fields
            .iter()
            .map(|(n, v)| (String::from_utf8_lossy(n).into(), String::from_utf8_lossy(v).into()))
            .collect();
        assert_eq!(decoded(&s).unwrap(), want);
        assert_eq!(&s[..3], &[0, 0, 0xc0 | 17], "GET by static index");
    }

    #[test]
    fn dynamic_references_and_bad_sections_are_refused() {
        assert_eq!(decoded(b"\x01\x00"), Err(QpackError::Dynamic), "a required insert count");
        assert_eq!(decoded(b"\x00\x00\x80"), Err(QpackError::Dynamic), "indexed, dynamic");
        assert_eq!(decoded(b"\x00\x00\x10"), Err(QpackError::Dynamic), "post-base");
        assert_eq!(decoded(b"\x00\x00\xff\x30"), Err(QpackError::Index(111)));
        assert_eq!(decoded(b"\x00\x00\x51\x0b/index"), Err(QpackError::Truncated));
        assert_eq!(decoded(b"\x00"), Err(QpackError::Truncated));
        let mut big = vec![0, 0];
        put_field(&mut big, b"x", &[b'a'; 5000]);
        assert_eq!(decoded(&big), Err(QpackError::TooLarge(4096)));
    }
}
