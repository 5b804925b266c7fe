//! HPACK (RFC 7541): header blocks decoded with a dynamic table, and the pieces to encode
//! them.
//!
//! The decoder is complete (every representation, Huffman strings, dynamic table size
//! updates) and bounded: the table never outgrows the size this side announced, a block's
//! decoded size is capped (an HPACK bomb is an error, not memory), and integers that do not
//! fit are refused. Steady state does not allocate: Huffman strings decode into two scratch
//! buffers kept by the decoder, and an evicted table entry's buffer is reused for the next.
//!
//! Encoding is left to the caller's plan: the load generator encodes a request's block once
//! (and a second time for the requests after the first, which refer to the table) and the
//! server its few response fields, with [`indexed`], [`literal`] and [`string`].
//!
//! Written here rather than taken from a crate: the HPACK crates on crates.io are either
//! unmaintained forks or allocate per header, and the decoder sits on the generator's path
//! for every response.

use std::collections::VecDeque;

use super::huffman;

/// RFC 7541 Appendix A.
pub const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// The table size both sides start with (SETTINGS_HEADER_TABLE_SIZE's default).
pub const DEFAULT_TABLE_SIZE: usize = 4096;

/// An entry's size counts 32 octets beyond its name and value (RFC 7541 section 4.1).
const ENTRY_OVERHEAD: usize = 32;

/// Why a header block did not decode. Every one is a COMPRESSION_ERROR for the connection
/// (RFC 9113 section 4.3): the table may now differ from the peer's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HpackError {
    #[error("the header block ends inside a field")]
    Truncated,
    #[error("an integer in the header block does not fit")]
    Integer,
    #[error("index {0} is in neither the static nor the dynamic table")]
    Index(usize),
    #[error("{0}")]
    Huffman(#[from] huffman::HuffmanError),
    #[error("a table size update to {0} exceeds the {1} this side allows")]
    TableSize(usize, usize),
    #[error("a table size update after the first field of the block")]
    LateSizeUpdate,
    #[error("the decoded header list exceeds {0} bytes")]
    ListTooLarge(usize),
}

/// The dynamic table: newest entry first.
#[derive(Debug, Default)]
struct Table {
    /// Each entry's name and value in one buffer, and where the name ends.
    entries: VecDeque<(Vec<u8>, usize)>,
    size: usize,
    max: usize,
    /// Buffers of evicted entries, for the next ones.
    spare: Vec<Vec<u8>>,
    /// Changes so far (inserts and size updates): a block that left it alone decodes the same
    /// again.
    changes: u64,
}

impl Table {
    fn get(&self, i: usize) -> Option<(&[u8], &[u8])> {
        self.entries.get(i).map(|(b, n)| b.split_at(*n))
    }

    fn evict_to(&mut self, max: usize) {
        while self.size > max {
            let Some((b, _)) = self.entries.pop_back() else { break };
            self.size -= b.len() + ENTRY_OVERHEAD;
            if self.spare.len() < 8 {
                self.spare.push(b);
            }
        }
    }

    fn resize(&mut self, max: usize) {
        self.changes += 1;
        self.max = max;
        self.evict_to(max);
    }

    /// Adds a field; one larger than the table empties it (RFC 7541 section 4.4).
    fn insert(&mut self, name: &[u8], value: &[u8]) {
        self.changes += 1;
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.max {
            self.evict_to(0);
            return;
        }
        self.evict_to(self.max - size);
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(name);
        b.extend_from_slice(value);
        self.entries.push_front((b, name.len()));
        self.size += size;
    }
}

/// A header block decoder: one per connection and direction.
#[derive(Debug)]
pub struct Decoder {
    table: Table,
    /// The largest table size the peer may set (what this side announced).
    allowed: usize,
    /// The most a block may decode to (names and values, 32 more per field), as
    /// SETTINGS_MAX_HEADER_LIST_SIZE counts.
    max_list: usize,
    name: Vec<u8>,
    value: Vec<u8>,
    /// Huffman strings decoded lately, as coded and decoded: a peer sends the same few
    /// values in every block (a server its name, the date, the content type), and most of
    /// them without indexing, so each is decoded once and then compared.
    memo: Vec<(Vec<u8>, Vec<u8>)>,
    memo_next: usize,
}

/// How many decoded Huffman strings a decoder remembers, and the longest coded one it keeps.
const MEMO: usize = 8;
const MEMO_LEN: usize = 64;

/// Where a string of the block ended up: in the block itself or in a scratch buffer.
#[derive(Clone, Copy)]
enum Str {
    Raw(usize, usize),
    Name,
    Value,
}

impl Decoder {
    /// A decoder whose peer may use a table of up to `table_size` bytes, and whose blocks may
    /// decode to at most `max_list` bytes.
    pub fn new(table_size: usize, max_list: usize) -> Decoder {
        Decoder {
            table: Table { max: table_size, ..Table::default() },
            allowed: table_size,
            max_list,
            name: Vec::new(),
            value: Vec::new(),
            memo: Vec::new(),
            memo_next: 0,
        }
    }

    /// How many times the dynamic table changed (inserts and size updates): a block decoded
    /// without changing it decodes the same again while it stays unchanged.
    pub fn table_changes(&self) -> u64 {
        self.table.changes
    }

    /// The dynamic table's size now (for tests and reports).
    pub fn table_size(&self) -> usize {
        self.table.size
    }

    /// Decodes one whole header block (HEADERS and its CONTINUATIONs, joined), calling `field`
    /// with each name and value in order. Returns the decoded size (as the header list size
    /// counts it).
    pub fn decode(
        &mut self,
        block: &[u8],
        field: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, HpackError> {
        let mut at = 0;
        let mut total = 0;
        let mut first = true;
        while at < block.len() {
            let b = block[at];
            if b & 0x80 != 0 {
                let (i, n) = integer(&block[at..], 7)?;
                at += n;
                let (name, value) = self.lookup(i)?;
                total = self.count(total, name.len() + value.len())?;
                field(name, value);
            } else if b & 0xe0 == 0x20 {
                if !first {
                    return Err(HpackError::LateSizeUpdate);
                }
                let (size, n) = integer(&block[at..], 5)?;
                at += n;
                if size > self.allowed {
                    return Err(HpackError::TableSize(size, self.allowed));
                }
                self.table.resize(size);
                continue;
            } else {
                // Literal: with incremental indexing (01), without (0000) or never (0001).
                let (prefix, index) = if b & 0xc0 == 0x40 { (6, true) } else { (4, false) };
                let (i, n) = integer(&block[at..], prefix)?;
                at += n;
                let name = if i == 0 {
                    let (s, n) = self.string(&block[at..], at, true)?;
                    at += n;
                    Some(s)
                } else {
                    None
                };
                let (value, n) = self.string(&block[at..], at, false)?;
                at += n;
                let name_bytes: &[u8] = match name {
                    Some(s) => self.resolve(block, &s),
                    None => self.lookup(i)?.0,
                };
                let value_bytes = self.resolve(block, &value);
                total = self.count(total, name_bytes.len() + value_bytes.len())?;
                field(name_bytes, value_bytes);
                if index {
                    // A name by index may be the table's own: copied into the name scratch
                    // (kept across blocks, so no allocation) before the table changes.
                    if name.is_none() {
                        let src: &[u8] = match i {
                            1..=61 => STATIC[i - 1].0,
                            _ => self.table.get(i - 62).ok_or(HpackError::Index(i))?.0,
                        };
                        self.name.clear();
                        self.name.extend_from_slice(src);
                    }
                    let value_bytes: &[u8] = match value {
                        Str::Raw(a, b) => &block[a..b],
                        _ => &self.value,
                    };
                    match name {
                        Some(Str::Raw(a, b)) => self.table.insert(&block[a..b], value_bytes),
                        _ => self.table.insert(&self.name, value_bytes),
                    }
                }
            }
            first = false;
        }
        Ok(total)
    }

    fn count(&self, total: usize, field: usize) -> Result<usize, HpackError> {
        let total = total + field + ENTRY_OVERHEAD;
        if total > self.max_list {
            return Err(HpackError::ListTooLarge(self.max_list));
        }
        Ok(total)
    }

    fn lookup(&self, i: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match i {
            0 => Err(HpackError::Index(0)),
            1..=61 => Ok(STATIC[i - 1]),
            _ => self.table.get(i - 62).ok_or(HpackError::Index(i)),
        }
    }

    fn resolve<'a>(&'a self, block: &'a [u8], s: &Str) -> &'a [u8] {
        match *s {
            Str::Raw(a, b) => &block[a..b],
            Str::Name => &self.name,
            Str::Value => &self.value,
        }
    }

    /// A string literal at the start of `b` (which is the block from `base` on): where it is,
    /// and how many bytes it took.
    fn string(&mut self, b: &[u8], base: usize, is_name: bool) -> Result<(Str, usize), HpackError> {
        let first = *b.first().ok_or(HpackError::Truncated)?;
        let (len, n) = integer(b, 7)?;
        let end = n.checked_add(len).filter(|&e| e <= b.len()).ok_or(HpackError::Truncated)?;
        if first & 0x80 == 0 {
            return Ok((Str::Raw(base + n, base + end), end));
        }
        // A Huffman string decodes to at most 8/5 of its length; more than the list may hold
        // is refused before it is decoded.
        if len > self.max_list {
            return Err(HpackError::ListTooLarge(self.max_list));
        }
        let coded = &b[n..end];
        let out = if is_name { &mut self.name } else { &mut self.value };
        out.clear();
        if let Some((_, plain)) = self.memo.iter().find(|(c, _)| c.as_slice() == coded) {
            out.extend_from_slice(plain);
        } else {
            huffman::decode(coded, out)?;
            if len <= MEMO_LEN {
                let entry = (coded.to_vec(), out.clone());
                if self.memo.len() < MEMO {
                    self.memo.push(entry);
                } else {
                    self.memo[self.memo_next] = entry;
                    self.memo_next = (self.memo_next + 1) % MEMO;
                }
            }
        }
        Ok((if is_name { Str::Name } else { Str::Value }, end))
    }
}

/// An integer with an N-bit prefix (RFC 7541 section 5.1) at the start of `b`: its value and
/// the bytes it took. Values past 2^28 are refused (no header field is that large).
pub fn integer(b: &[u8], prefix: u8) -> Result<(usize, usize), HpackError> {
    let max = (1usize << prefix) - 1;
    let first = usize::from(*b.first().ok_or(HpackError::Truncated)?) & max;
    if first < max {
        return Ok((first, 1));
    }
    let mut value = max;
    let mut shift = 0;
    for (i, &byte) in b.iter().enumerate().skip(1) {
        value += usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok((value, i + 1));
        }
        shift += 7;
        if shift > 21 {
            return Err(HpackError::Integer);
        }
    }
    Err(HpackError::Truncated)
}

/// Appends `value` with an N-bit prefix, the prefix byte's high bits being `flags`.
pub fn put_integer(out: &mut Vec<u8>, flags: u8, prefix: u8, value: usize) {
    let max = (1usize << prefix) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    let mut rest = value - max;
    while rest >= 0x80 {
        out.push((rest & 0x7f) as u8 | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// Appends a string literal, Huffman-coded when that is shorter.
pub fn string(out: &mut Vec<u8>, s: &[u8]) {
    let coded = huffman::encoded_len(s);
    if coded < s.len() {
        put_integer(out, 0x80, 7, coded);
        huffman::encode(s, out);
    } else {
        put_integer(out, 0, 7, s.len());
        out.extend_from_slice(s);
    }
}

/// Appends an indexed field (a whole field from the static or dynamic table).
pub fn indexed(out: &mut Vec<u8>, index: usize) {
    put_integer(out, 0x80, 7, index);
}

/// How a literal field is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Indexing {
    /// Added to the dynamic table: later blocks refer to it by index.
    Incremental,
    /// Not added.
    Without,
    /// Not added, here or by any intermediary (credentials).
    Never,
}

/// Appends a literal field; `name_index` is the table index of its name, or 0 for a literal
/// name.
pub fn literal(
    out: &mut Vec<u8>,
    indexing: Indexing,
    name_index: usize,
    name: &[u8],
    value: &[u8],
) {
    literal_with(out, indexing, name_index, name, value, true);
}

/// As [`literal`], with strings Huffman-coded only when `huffman` (and shorter so): a raw
/// value keeps each of its bytes at a fixed place in the block.
pub fn literal_with(
    out: &mut Vec<u8>,
    indexing: Indexing,
    name_index: usize,
    name: &[u8],
    value: &[u8],
    huffman: bool,
) {
    let (flags, prefix) = match indexing {
        Indexing::Incremental => (0x40, 6),
        Indexing::Without => (0x00, 4),
        Indexing::Never => (0x10, 4),
    };
    put_integer(out, flags, prefix, name_index);
    let put = |out: &mut Vec<u8>, s: &[u8]| {
        if huffman {
            string(out, s);
        } else {
            put_integer(out, 0, 7, s.len());
            out.extend_from_slice(s);
        }
    };
    if name_index == 0 {
        put(out, name);
    }
    put(out, value);
}

/// The static table's index of a field's name (the first such entry), if it has one.
pub fn static_name(name: &[u8]) -> Option<usize> {
    STATIC.iter().position(|(n, _)| *n == name).map(|i| i + 1)
}

/// The static table's index of a whole field, if it has one.
pub fn static_field(name: &[u8], value: &[u8]) -> Option<usize> {
    STATIC.iter().position(|&(n, v)| n == name && v == value).map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    fn fields(d: &mut Decoder, block: &[u8]) -> Vec<(String, String)> {
        let mut got = Vec::new();
        d.decode(block, &mut |n, v| {
            got.push((String::from_utf8_lossy(n).into(), String::from_utf8_lossy(v).into()));
        })
        .unwrap();
        got
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter().map(|(n, v)| ((*n).into(), (*v).into())).collect()
    }

    #[test]
    fn integers_as_in_the_rfc() {
        // RFC 7541 C.1: 10 in a 5-bit prefix, 1337 in a 5-bit prefix, 42 at an octet boundary.
        for (value, prefix, coded) in [(10, 5, "0a"), (1337, 5, "1f9a0a"), (42, 8, "2a")] {
            let mut out = Vec::new();
            put_integer(&mut out, 0, prefix, value);
            assert_eq!(out, hex(coded));
            assert_eq!(integer(&out, prefix).unwrap(), (value, out.len()));
        }
        assert_eq!(integer(&hex("1f ff ff ff ff 0f"), 5), Err(HpackError::Integer));
        assert_eq!(integer(&hex("1f ff"), 5), Err(HpackError::Truncated));
    }

    /// RFC 7541 C.3 and C.4: three requests on one connection, without and with Huffman
    /// coding; the dynamic table carries fields from one block to the next.
    #[test]
    fn the_rfc_request_examples_decode_with_their_table() {
        let requests = [
            (
                vec![
                    ("method", "GET"),
                    ("scheme", "http"),
                    ("path", "/"),
                    ("authority", "www.example.com"),
                ],
                57,
            ),
            (
                vec![
                    ("method", "GET"),
                    ("scheme", "http"),
                    ("path", "/"),
                    ("authority", "www.example.com"),
                    ("cache-control", "no-cache"),
                ],
                110,
            ),
            (
                vec![
                    ("method", "GET"),
                    ("scheme", "https"),
                    ("path", "/index.html"),
                    ("authority", "www.example.com"),
                    ("custom-key", "custom-value"),
                ],
                164,
            ),
        ];
        let plain = [
            "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
            "8286 84be 5808 6e6f 2d63 6163 6865",
            "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
        ];
        let huff = [
            "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
            "8286 84be 5886 a8eb 1064 9cbf",
            "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
        ];
        for blocks in [plain, huff] {
            let mut d = Decoder::new(DEFAULT_TABLE_SIZE, 1 << 16);
            for ((want, size), block) in requests.iter().zip(blocks) {
                let want: Vec<(String, String)> = want
                    .iter()
                    .map(|(n, v)| {
                        let n = if ["method", "scheme", "path", "authority"].contains(n) {
                            format!(":{n}")
                        } else {
                            (*n).to_string()
                        };
                        (n, (*v).to_string())
                    })
                    .collect();
                assert_eq!(fields(&mut d, &hex(block)), want);
                assert_eq!(d.table_size(), *size);
            }
        }
    }

    /// RFC 7541 C.5: responses with a 256-byte table, so entries are evicted.
    #[test]
    fn the_rfc_response_examples_evict_as_the_rfc_says() {
        let mut d = Decoder::new(256, 1 << 16);
        let first = "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 \
                     3230 3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 \
                     7777 2e65 7861 6d70 6c65 2e63 6f6d";
        let got = fields(&mut d, &hex(first));
        assert_eq!(
            got,
            pairs(&[
                (":status", "302"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
                ("location", "https://www.example.com"),
            ])
        );
        assert_eq!(d.table_size(), 222);
        let got = fields(&mut d, &hex("4803 3330 37c1 c0bf"));
        assert_eq!(got[0], (":status".into(), "307".into()));
        assert_eq!(got[3], ("location".into(), "https://www.example.com".into()));
        assert_eq!(d.table_size(), 222, "307 went in, 302 went out");
    }

    #[test]
    fn what_the_encoder_writes_decodes() {
        let mut block = Vec::new();
        indexed(&mut block, static_field(b":method", b"GET").unwrap());
        literal(
            &mut block,
            Indexing::Incremental,
            static_name(b":authority").unwrap(),
            b"",
            b"127.0.0.1:8080",
        );
        literal(&mut block, Indexing::Without, 0, b"x-test", b"yes");
        literal(
            &mut block,
            Indexing::Never,
            static_name(b"authorization").unwrap(),
            b"",
            b"Basic eA==",
        );
        indexed(&mut block, 62);
        let mut d = Decoder::new(DEFAULT_TABLE_SIZE, 1 << 16);
        assert_eq!(
            fields(&mut d, &block),
            pairs(&[
                (":method", "GET"),
                (":authority", "127.0.0.1:8080"),
                ("x-test", "yes"),
                ("authorization", "Basic eA=="),
                (":authority", "127.0.0.1:8080"),
            ])
        );
    }

    #[test]
    fn huffman_strings_seen_before_decode_as_the_first_time() {
        // A server's block: the same values in every response, one of them changing (the
        // date), more distinct strings than the decoder remembers, names new and indexed.
        let block = |date: &str, extra: usize| {
            let mut b = Vec::new();
            indexed(&mut b, static_field(b":status", b"200").unwrap());
            literal(
                &mut b,
                Indexing::Without,
                static_name(b"server").unwrap(),
                b"",
                b"nginx/1.22.1",
            );
            literal(
                &mut b,
                Indexing::Incremental,
                static_name(b"date").unwrap(),
                b"",
                date.as_bytes(),
            );
            for i in 0..extra {
                let v = format!("value-{i}-{date}");
                literal(&mut b, Indexing::Without, 0, format!("x-h{i}").as_bytes(), v.as_bytes());
            }
            b
        };
        let mut d = Decoder::new(DEFAULT_TABLE_SIZE, 1 << 16);
        for (round, date) in ["Sat, 28 Nov 2026 12:47:16 GMT", "Sat, 28 Nov 2026 12:47:17 GMT"]
            .iter()
            .cycle()
            .take(6)
            .enumerate()
        {
            let extra = round * 3;
            let mut want = vec![(":status", "200".to_string()), ("server", "nginx/1.22.1".into())];
            want.push(("date", date.to_string()));
            let names: Vec<String> = (0..extra).map(|i| format!("x-h{i}")).collect();
            for (i, n) in names.iter().enumerate() {
                want.push((n, format!("value-{i}-{date}")));
            }
            let want: Vec<(String, String)> =
                want.into_iter().map(|(n, v)| (n.to_string(), v)).collect();
            assert_eq!(fields(&mut d, &block(date, extra)), want, "round {round}");
        }
    }

    #[test]
    fn bad_blocks_are_errors_not_panics_or_memory() {
        let mut d = Decoder::new(DEFAULT_TABLE_SIZE, 1000);
        let mut cb = |_: &[u8], _: &[u8]| {};
        assert_eq!(d.decode(&[0x80], &mut cb), Err(HpackError::Index(0)));
        assert_eq!(d.decode(&[0xbe], &mut cb), Err(HpackError::Index(62)));
        assert_eq!(d.decode(&[0x40, 0x05, b'a'], &mut cb), Err(HpackError::Truncated));
        assert!(d.decode(&[0x3f, 0xe1, 0x1f], &mut cb).is_ok(), "a size update to 4096");
        assert_eq!(d.decode(&[0x3f, 0xe2, 0x1f], &mut cb), Err(HpackError::TableSize(4097, 4096)));
        assert_eq!(d.decode(&[0x82, 0x20], &mut cb), Err(HpackError::LateSizeUpdate));
        // An HPACK bomb: one 500-byte field indexed, then referred to again and again.
        let mut bomb = Vec::new();
        literal(&mut bomb, Indexing::Incremental, 0, b"x", &[b'a'; 500]);
        let mut d = Decoder::new(DEFAULT_TABLE_SIZE, 1000);
        assert!(d.decode(&bomb, &mut cb).is_ok());
        let refs = vec![0xbe; 100];
        assert_eq!(d.decode(&refs, &mut cb), Err(HpackError::ListTooLarge(1000)));
    }

    proptest::proptest! {
        #[test]
        fn any_block_decodes_or_fails_without_panic(data in proptest::collection::vec(proptest::num::u8::ANY, 0..128)) {
            let mut d = Decoder::new(256, 4096);
            let _ = d.decode(&data, &mut |_, _| {});
            let _ = d.decode(&data, &mut |_, _| {});
        }

        #[test]
        fn encoded_fields_decode_to_themselves(
            fields in proptest::collection::vec((proptest::collection::vec(proptest::num::u8::ANY, 1..20), proptest::collection::vec(proptest::num::u8::ANY, 0..40), 0..3u8), 0..12)
        ) {
            let mut block = Vec::new();
            for (n, v, how) in &fields {
                let indexing = [Indexing::Incremental, Indexing::Without, Indexing::Never][usize::from(*how)];
                literal(&mut block, indexing, 0, n, v);
            }
            let mut d = Decoder::new(DEFAULT_TABLE_SIZE, 1 << 20);
            let mut got = Vec::new();
            d.decode(&block, &mut |n, v| got.push((n.to_vec(), v.to_vec()))).unwrap();
            let want: Vec<(Vec<u8>, Vec<u8>)> = fields.iter().map(|(n, v, _)| (n.clone(), v.clone())).collect();
            proptest::prop_assert_eq!(got, want);
        }
    }
}
