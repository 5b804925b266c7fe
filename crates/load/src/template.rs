//! Templated IDs in a request, without a template engine: `{seq}`, `{seq:START}`,
//! `{rand:WIDTH}` and `{rand:WIDTH:SEED}` in a URL's path or query, a header value or the body.
//!
//! A template is found once, before the run, and each of its IDs becomes a slot of fixed width
//! in the encoded request (the HTTP/1.1 bytes, the HTTP/2 header block, the body): the request
//! is encoded with every slot's digits at 0, then once more per slot with that slot's digits
//! at 1, and the bytes that differ are where the slot lies, whatever the encoder did around
//! it. A request then writes its digits in place: no formatting, no allocation, and the length
//! (so `Content-Length`) never changes.
//!
//! The number a request's IDs derive from is its own: each thread (and each agent) numbers its
//! requests in a residue class of its own ([`Ids`]), so `{seq}` never repeats within a run and
//! a request sent again after a reconnect keeps its IDs.
//!
//! Does not choose the request's number (the worker does) nor encode requests (`target`).

/// Digits of `{seq}`: zero-padded to this width, or to START's digits when it has more.
pub const SEQ_WIDTH: usize = 12;
/// `{rand:WIDTH}` takes up to this many digits (a u64's full decimal digits).
pub const MAX_RAND_WIDTH: usize = 19;

/// What a slot's digits are, from the request's number `n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// START + n.
    Seq { start: u64 },
    /// A number uniform in [0, 10^width), the same for the same seed and `n`.
    Rand { seed: u64 },
}

/// One `{...}` of a text: where it is, how wide its digits are, what they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    pub range: (usize, usize),
    pub width: usize,
    pub kind: Kind,
}

/// Where a token's digits lie in an encoded request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub at: usize,
    pub width: u8,
    pub kind: Kind,
}

/// A request's slots in each of its encodings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Template {
    /// In the HTTP/1.1 bytes (body included), from the request's first byte.
    pub h1: Vec<Slot>,
    /// In the HTTP/2 header block.
    pub h2: Vec<Slot>,
    /// In the body, as HTTP/2 sends it in DATA frames.
    pub body: Vec<Slot>,
}

/// The tokens of `text` in order. Braces that do not start `{seq` or `{rand` are left as
/// they are; a `{seq...}` or `{rand...}` that does not parse is an error naming it.
pub fn scan(text: &[u8], unseeded: u64) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(off) = text[i..].iter().position(|&b| b == b'{') {
        let start = i + off;
        let rest = &text[start + 1..];
        if !(rest.starts_with(b"seq") || rest.starts_with(b"rand")) {
            i = start + 1;
            continue;
        }
        let Some(len) = rest.iter().position(|&b| b == b'}') else {
            return Err(format!(
                "{:?} has no closing brace; write {{seq}}, {{seq:START}}, {{rand:WIDTH}} or \
                 {{rand:WIDTH:SEED}}",
                String::from_utf8_lossy(&rest[..rest.len().min(20)])
            ));
        };
        let inner = String::from_utf8_lossy(&rest[..len]);
        let (width, kind) = token(&inner, unseeded)?;
        out.push(Token { range: (start, start + len + 2), width, kind });
        i = start + len + 2;
    }
    Ok(out)
}

/// `seq`, `seq:START`, `rand:WIDTH`, `rand:WIDTH:SEED`.
fn token(inner: &str, unseeded: u64) -> Result<(usize, Kind), String> {
    let bad = |why: &str| format!("{{{inner}}}: {why}");
    let num = |s: &str, what: &str| {
        s.parse::<u64>().map_err(|_| bad(&format!("{what} {s:?} is not a whole number")))
    };
    let parts: Vec<&str> = inner.split(':').collect();
    match parts.as_slice() {
        ["seq"] => Ok((SEQ_WIDTH, Kind::Seq { start: 0 })),
        ["seq", start] => {
            let start = num(start, "START")?;
            Ok((SEQ_WIDTH.max(digits(start)), Kind::Seq { start }))
        }
        ["rand", width] | ["rand", width, _] => {
            let w = num(width, "WIDTH")? as usize;
            if !(1..=MAX_RAND_WIDTH).contains(&w) {
                return Err(bad(&format!("WIDTH is 1 to {MAX_RAND_WIDTH} digits")));
            }
            let seed = match parts.get(2) {
                Some(s) => num(s, "SEED")?,
                None => unseeded,
            };
            Ok((w, Kind::Rand { seed }))
        }
        _ => Err(bad("write {seq}, {seq:START}, {rand:WIDTH} or {rand:WIDTH:SEED}")),
    }
}

fn digits(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 10 {
        v /= 10;
        n += 1;
    }
    n
}

/// `text` with each token replaced by its width of `fill(token index)`, tokens numbered from
/// `first`.
pub fn fill(text: &[u8], tokens: &[Token], first: usize, fill: impl Fn(usize) -> u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut at = 0;
    for (k, t) in tokens.iter().enumerate() {
        out.extend_from_slice(&text[at..t.range.0]);
        out.extend(std::iter::repeat_n(fill(first + k), t.width));
        at = t.range.1;
    }
    out.extend_from_slice(&text[at..]);
    out
}

/// An ID whose digits the encoding did not keep together (or whose length it changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scattered;

/// Where token `kind` of `width` digits lies, from the encoding with all digits 0 (`base`) and
/// the one with its digits 1 (`marked`): none when the encoding does not hold it, an error
/// when it is not one run of its width.
pub fn locate(
    base: &[u8],
    marked: &[u8],
    width: usize,
    kind: Kind,
) -> Result<Option<Slot>, Scattered> {
    if base.len() != marked.len() {
        return Err(Scattered);
    }
    let mut diff = base.iter().zip(marked).enumerate().filter(|(_, (a, b))| a != b).map(|(i, _)| i);
    let Some(first) = diff.next() else { return Ok(None) };
    let last = diff.next_back().unwrap_or(first);
    let whole = last + 1 - first == width
        && base[first..=last].iter().all(|&b| b == b'0')
        && marked[first..=last].iter().all(|&b| b == b'1');
    if !whole {
        return Err(Scattered);
    }
    Ok(Some(Slot { at: first, width: width as u8, kind }))
}

impl Template {
    /// Writes the digits of request number `n` into `req`, the request's bytes encoded with
    /// `slots`: as encoded (zeros), or as an earlier request of the connection wrote them.
    ///
    /// `digits`, `n`'s 20 decimal digits when at hand ([`Ids::digits`]): a `{seq}` slot copies
    /// them instead of dividing `n` down.
    #[inline(always)]
    pub fn write(slots: &[Slot], n: u64, digits: Option<&[u8; 20]>, req: &mut [u8]) {
        // The common case, one `{seq}`, as a copy of the digits at hand.
        if let ([s], Some(all)) = (slots, digits) {
            if s.kind == (Kind::Seq { start: 0 }) {
                return copy_digits(req, s.at, s.width as usize, all);
            }
        }
        Self::write_each(slots, n, digits, req);
    }

    /// [`Template::write`] slot by slot: `{seq}` copied when the digits are at hand, else
    /// divided down from `n`.
    #[inline(never)]
    fn write_each(slots: &[Slot], n: u64, digits: Option<&[u8; 20]>, req: &mut [u8]) {
        for s in slots {
            match (s.kind, digits) {
                (Kind::Seq { start: 0 }, Some(all)) => {
                    copy_digits(req, s.at, s.width as usize, all);
                }
                (kind, _) => {
                    if let Some(d) = req.get_mut(s.at..s.at + s.width as usize) {
                        put(d, kind, n);
                    }
                }
            }
        }
    }

    /// Writes the digits of request number `n` that fall in `chunk`, which holds the body
    /// from byte `from` (a DATA frame's part of it).
    pub fn write_part(&self, n: u64, from: usize, chunk: &mut [u8]) {
        for s in &self.body {
            let (lo, hi) = (s.at, s.at + s.width as usize);
            if hi <= from || lo >= from + chunk.len() {
                continue;
            }
            let mut d = [b'0'; 20];
            let d = &mut d[..s.width as usize];
            put(d, s.kind, n);
            for (i, &b) in d.iter().enumerate() {
                if let Some(x) = (lo + i).checked_sub(from).and_then(|j| chunk.get_mut(j)) {
                    *x = b;
                }
            }
        }
    }
}

/// The last `w` (at most 20) of `all` into `req[at..at + w]`, as two fixed-size copies that
/// overlap (no call to memcpy for a dozen bytes).
#[inline(always)]
pub(crate) fn copy_digits(req: &mut [u8], at: usize, w: usize, all: &[u8; 20]) {
    let Some(d) = req.get_mut(at..at + w) else { return };
    if (8..=16).contains(&w) {
        // Its first 8 digits, and its last 8 (which overlap when it has fewer than 16).
        d[..8].copy_from_slice(&all[20 - w..28 - w]);
        d[w - 8..].copy_from_slice(&all[12..]);
    } else if w <= 20 {
        d.copy_from_slice(&all[20 - w..]);
    }
}

/// Two-digit groups, "00" to "99": a slot's digits are written two per division.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// 10^i, and u64::MAX for 10^20 (past a u64).
const POW10: [u64; 21] = {
    let mut t = [u64::MAX; 21];
    let mut i = 0;
    let mut v = 1u64;
    while i < 20 {
        t[i] = v;
        v = v.wrapping_mul(10);
        i += 1;
    }
    t
};

/// A slot's digits for request number `n`, right-aligned, modulo its width, into `d`.
///
/// `{seq}` writes only its significant digits: `d` holds zeros there, or the digits of an
/// earlier request of the same connection, whose number was smaller and so had no more
/// digits (numbers only grow: [`Ids`]). Past its width it wraps and writes every digit, as
/// `{rand}` always does.
#[inline(always)]
fn put(d: &mut [u8], kind: Kind, n: u64) {
    let (v, all) = match kind {
        Kind::Seq { start } => {
            let v = start.wrapping_add(n);
            (v, v >= POW10[d.len().min(20)])
        }
        Kind::Rand { seed } => (mix(seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15)), true),
    };
    let mut v = v;
    let mut rest = d;
    while let [head @ .., hi, lo] = rest {
        if v < 10 && !all {
            break;
        }
        let p = (v % 100) as usize * 2;
        v /= 100;
        (*hi, *lo) = (PAIRS[p], PAIRS[p + 1]);
        rest = head;
    }
    if let [.., last] = rest {
        if v > 0 || all {
            *last = b'0' + (v % 10) as u8;
        }
    }
}

/// SplitMix64's finaliser: a well-mixed u64 from any input.
#[inline]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The numbers one thread gives its requests: `offset`, `offset + stride`, ... where every
/// thread of every agent has an offset of its own below the same stride, so no two requests
/// of a run share one (with `-n`, they stay close to 0..N).
///
/// It keeps the last number it gave in decimal too, advanced by adding the stride's digits (a
/// digit or two a request), so that writing it is a copy. (After 2^64 numbers, far past any
/// run, the numbers wrap and the digits would not.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ids {
    next: u64,
    stride: u64,
    /// The decimal digits of the number given last, ASCII; before the first, those of
    /// `next - stride` modulo 10^20, so that every `take` is the same addition.
    digits: [u8; 20],
    /// The stride's digits, right-aligned, as numbers 0-9; those before `lowest` are 0.
    stride_digits: [u8; 20],
    lowest: usize,
    /// What `take` adds to the last digit without a carry: the stride's last digit when the
    /// stride has one digit, else 10 (never without a carry).
    last_step: u8,
}

impl Ids {
    /// Thread `thread` of `threads`, in agent `lane` of `lanes`.
    pub fn new(thread: usize, threads: usize, lane: u32, lanes: u32) -> Self {
        let lanes = u64::from(lanes.max(1));
        let next = thread as u64 * lanes + u64::from(lane);
        let stride = threads.max(1) as u64 * lanes;
        let mut digits = [b'0'; 20];
        put(&mut digits, Kind::Seq { start: next }, 0);
        let mut stride_digits = [b'0'; 20];
        put(&mut stride_digits, Kind::Seq { start: stride }, 0);
        let lowest = stride_digits.iter().take_while(|&&d| d == b'0').count().min(19);
        for d in &mut stride_digits {
            *d -= b'0';
        }
        // One stride back, borrowing across all 20 digits.
        let mut borrow = 0;
        for (d, s) in digits.iter_mut().zip(stride_digits).rev() {
            let v = i16::from(*d - b'0') - i16::from(s) - borrow;
            borrow = i16::from(v < 0);
            *d = b'0' + (v + 10 * borrow) as u8;
        }
        let last_step = if lowest == 19 { stride_digits[19] } else { 10 };
        Ids { next, stride, digits, stride_digits, lowest, last_step }
    }

    #[inline(always)]
    pub fn take(&mut self) -> u64 {
        let n = self.next;
        self.next = n.wrapping_add(self.stride);
        // One more stride: most often one digit changes, without a carry.
        let d = self.digits[19] + self.last_step;
        if d <= b'9' {
            self.digits[19] = d;
        } else {
            self.add_stride();
        }
        n
    }

    /// Adds the stride's digits to `digits` from the right, carrying (past the first digit
    /// the carry is dropped: modulo 10^20).
    #[inline(never)]
    fn add_stride(&mut self) {
        let mut i = 19;
        let mut carry = 0;
        loop {
            let d = self.digits[i] + self.stride_digits[i] + carry;
            carry = u8::from(d > b'9');
            self.digits[i] = d - 10 * carry;
            if i == 0 || (i <= self.lowest && carry == 0) {
                break;
            }
            i -= 1;
        }
    }

    /// The decimal digits of the number `take` gave last.
    #[inline]
    pub fn digits(&self) -> &[u8; 20] {
        &self.digits
    }

    /// The decimal digits of `n`, if it is the number given last.
    #[inline]
    pub fn digits_of(&self, n: u64) -> Option<&[u8; 20]> {
        (self.next.wrapping_sub(self.stride) == n).then_some(&self.digits)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn tokens_are_found_and_bad_ones_named() {
        let t = scan(b"/u/{seq}?k={rand:4:7}&x={seq:1000000000000}&{other}", 9).unwrap();
        let w: Vec<(usize, Kind)> = t.iter().map(|t| (t.width, t.kind)).collect();
        assert_eq!(
            w,
            [
                (12, Kind::Seq { start: 0 }),
                (4, Kind::Rand { seed: 7 }),
                (13, Kind::Seq { start: 1_000_000_000_000 })
            ]
        );
        assert_eq!(scan(b"{rand:3}", 9).unwrap()[0].kind, Kind::Rand { seed: 9 });
        assert!(scan(b"{}{x}{ seq}", 0).unwrap().is_empty());
        for (bad, says) in [
            ("{seq", "no closing brace"),
            ("{seq:x}", "START \"x\""),
            ("{rand}", "write {seq}"),
            ("{rand:0}", "WIDTH is 1 to 19"),
            ("{rand:20}", "WIDTH is 1 to 19"),
            ("{rand:3:-1}", "SEED"),
            ("{sequence}", "write {seq}"),
        ] {
            let e = scan(bad.as_bytes(), 0).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let f =
            fill(b"a{seq}b{rand:2}", &scan(b"a{seq}b{rand:2}", 0).unwrap(), 0, |k| b'0' + k as u8);
        assert_eq!(f, b"a000000000000b11");
    }

    #[test]
    fn decimal_ids_follow_their_numbers() {
        for (thread, threads, lane, lanes) in
            [(0, 1, 0, 1), (1, 3, 0, 1), (2, 3, 1, 4), (5, 8, 99, 125)]
        {
            let mut ids = Ids::new(thread, threads, lane, lanes);
            for _ in 0..30_000 {
                let n = ids.take();
                assert_eq!(ids.digits_of(n).unwrap(), format!("{n:020}").as_bytes(), "{n}");
                assert!(ids.digits_of(n + 1).is_none());
            }
        }
        // Written from the digits or divided down: the same bytes, wrapping at the width too.
        let slots = [Slot { at: 1, width: 4, kind: Kind::Seq { start: 0 } }];
        let mut ids = Ids::new(0, 1, 0, 1);
        let n = (0..=123_456).map(|_| ids.take()).last().unwrap();
        let (mut a, mut b) = (*b"x0000y", *b"x0000y");
        Template::write(&slots, n, ids.digits_of(n), &mut a);
        Template::write(&slots, n, None, &mut b);
        assert_eq!((&a, &b), (b"x3456y", b"x3456y"));
        for w in 1..=20u8 {
            let slots = [Slot { at: 2, width: w, kind: Kind::Seq { start: 0 } }];
            let (mut a, mut b) = ([b'-'; 24], [b'-'; 24]);
            b[2..2 + usize::from(w)].fill(b'0');
            Template::write(&slots, n, Some(ids.digits()), &mut a);
            Template::write(&slots, n, None, &mut b);
            assert_eq!(a, b, "width {w}");
        }
    }

    #[test]
    fn digits_are_written_in_place_and_in_parts() {
        let slots = [
            Slot { at: 1, width: 4, kind: Kind::Seq { start: 5 } },
            Slot { at: 6, width: 2, kind: Kind::Seq { start: 0 } },
        ];
        let mut req = *b"x0000-00y";
        Template::write(&slots, 123, None, &mut req);
        assert_eq!(&req, b"x0128-23y", "modulo the width");
        for (n, want) in [(0, b"0005"), (5, b"0010"), (95, b"0100"), (9_999_995, b"0000")] {
            let mut d = *b"0000";
            put(&mut d, Kind::Seq { start: 5 }, n);
            assert_eq!(&d, want, "{n}");
        }
        let mut odd = *b"000";
        put(&mut odd, Kind::Seq { start: 0 }, 98_765);
        assert_eq!(&odd, b"765");
        // Over an earlier, smaller number: its digits are all replaced.
        let mut d = *b"0000";
        for n in [7, 99, 100, 4321] {
            put(&mut d, Kind::Seq { start: 0 }, n);
            assert_eq!(std::str::from_utf8(&d).unwrap(), format!("{n:04}"));
        }
        // Past the width every digit is written, over anything.
        put(&mut d, Kind::Seq { start: 0 }, 10_005);
        assert_eq!(&d, b"0005");
        let mut r = *b"99999";
        put(&mut r, Kind::Rand { seed: 3 }, 1);
        let mut z = *b"00000";
        put(&mut z, Kind::Rand { seed: 3 }, 1);
        assert_eq!(r, z, "rand writes every digit");
        let t = Template { body: slots.to_vec(), ..Template::default() };
        // The body split in DATA frames at 3 and 7: each part gets its own digits.
        let mut body = *b"x0000-00y";
        let (a, rest) = body.split_at_mut(3);
        let (b, c) = rest.split_at_mut(4);
        t.write_part(123, 0, a);
        t.write_part(123, 3, b);
        t.write_part(123, 7, c);
        assert_eq!(&body, b"x0128-23y");
        let rand = |n| {
            let mut d = [b'0'; 6];
            put(&mut d, Kind::Rand { seed: 1 }, n);
            d
        };
        assert_eq!(rand(7), rand(7));
        assert_ne!(rand(7), rand(8));
    }

    #[test]
    fn a_slot_is_located_whatever_surrounds_it() {
        let k = Kind::Seq { start: 0 };
        assert_eq!(locate(b"ab000c", b"ab111c", 3, k), Ok(Some(Slot { at: 2, width: 3, kind: k })));
        assert_eq!(locate(b"abc", b"abc", 3, k), Ok(None));
        assert_eq!(locate(b"a0b0", b"a1b1", 2, k), Err(Scattered), "split");
        assert_eq!(locate(b"a0", b"a11", 1, k), Err(Scattered), "length changed");
    }

    /// Threads and agents number their requests apart: no number twice.
    #[test]
    fn ids_never_repeat_across_threads_and_agents() {
        let mut seen = std::collections::HashSet::new();
        for lane in 0..3 {
            for thread in 0..4 {
                let mut ids = Ids::new(thread, 4, lane, 3);
                for _ in 0..1000 {
                    assert!(seen.insert(ids.take()));
                }
            }
        }
        assert_eq!(seen.iter().max(), Some(&11_999), "dense when all went at the same pace");
    }
}
