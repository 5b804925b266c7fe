//! QUIC packets as a QUIC endpoint of qpslab's own reads and writes them (RFC 9000 section 17,
//! RFC 9001 section 5): headers parsed and built, packet numbers shortened and recovered, and
//! the header and payload protection of rustls's QUIC keys put on and taken off in place.
//!
//! The first layer of a QUIC transport written for the generator: with quinn-proto, its own
//! work and allocations take more CPU per response than shb's whole user space
//! (docs/performance.md), and a transport that keeps no per-stream allocations starts here.
//! Checked against quinn-proto's own packets (tests below).

use qpslab_http::h3::varint;
use rustls::quic::{DirectionalKeys, HeaderProtectionKey, PacketKey};

/// QUIC version 1 (RFC 9000).
pub const V1: u32 = 1;
/// The AEAD tag every protected packet ends with.
pub const TAG: usize = 16;
/// The header protection sample's length, taken 4 bytes after the packet number starts.
const SAMPLE: usize = 16;

/// What kind of packet a header starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Initial,
    ZeroRtt,
    Handshake,
    Retry,
    /// A short header (1-RTT).
    OneRtt,
    VersionNegotiation,
}

/// A packet's header as read before its protection is removed; the packet is
/// `datagram[..end]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    pub kind: Kind,
    pub version: u32,
    pub dcid: &'a [u8],
    /// Long headers only.
    pub scid: &'a [u8],
    /// An Initial's token, or a Retry's.
    pub token: &'a [u8],
    /// Where the protected packet number begins (0 for Retry and Version Negotiation).
    pub pn_at: usize,
    /// Where the packet ends: the next packet coalesced in the datagram starts there.
    pub end: usize,
}

/// Why a packet could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The datagram ends inside the header, or before the length it declares.
    Truncated,
    /// The fixed bit is not set (RFC 9000 section 17.2): not QUIC, or not this version.
    NotQuic,
    /// Too short to sample for header protection, or the AEAD refused it.
    Protection,
    /// Reserved bits set once the protection was removed (PROTOCOL_VIOLATION).
    Reserved,
}

/// Reads the header of the packet that starts `d`; a short header's destination connection
/// ID is `short_dcid` bytes long (the one this endpoint chose).
pub fn parse(d: &[u8], short_dcid: usize) -> Result<Header<'_>, Error> {
    let first = *d.first().ok_or(Error::Truncated)?;
    if first & 0x80 == 0 {
        if first & 0x40 == 0 {
            return Err(Error::NotQuic);
        }
        let dcid = d.get(1..1 + short_dcid).ok_or(Error::Truncated)?;
        let h = Header {
            kind: Kind::OneRtt,
            version: V1,
            dcid,
            scid: &[],
            token: &[],
            pn_at: 0,
            end: 0,
        };
        return Ok(h.at(1 + short_dcid, d.len()));
    }
    let mut r = Reader { d, at: 1 };
    let version = u32::from_be_bytes(r.take(4)?.try_into().map_err(|_| Error::Truncated)?);
    let dcid_len = usize::from(r.take(1)?[0]);
    let dcid = r.take(dcid_len)?;
    let scid_len = usize::from(r.take(1)?[0]);
    let scid = r.take(scid_len)?;
    let h = Header {
        kind: Kind::VersionNegotiation,
        version,
        dcid,
        scid,
        token: &[],
        pn_at: 0,
        end: 0,
    };
    if version == 0 {
        return Ok(h.at(0, d.len()));
    }
    if first & 0x40 == 0 {
        return Err(Error::NotQuic);
    }
    let kind = match (first >> 4) & 0x03 {
        0 => Kind::Initial,
        1 => Kind::ZeroRtt,
        2 => Kind::Handshake,
        _ => Kind::Retry,
    };
    if kind == Kind::Retry {
        // The token runs to the integrity tag (RFC 9001 section 5.8).
        let token = d.get(r.at..d.len().saturating_sub(TAG)).ok_or(Error::Truncated)?;
        return Ok(Header { kind, token, ..h }.at(0, d.len()));
    }
    let token = if kind == Kind::Initial {
        let n = r.varint()?;
        r.take(usize::try_from(n).map_err(|_| Error::Truncated)?)?
    } else {
        &[]
    };
    let len = usize::try_from(r.varint()?).map_err(|_| Error::Truncated)?;
    let end = r.at.checked_add(len).filter(|&e| e <= d.len()).ok_or(Error::Truncated)?;
    Ok(Header { kind, token, ..h }.at(r.at, end))
}

impl<'a> Header<'a> {
    fn at(self, pn_at: usize, end: usize) -> Header<'a> {
        Header { pn_at, end, ..self }
    }

    /// Where its protected part is, for [`open`] (which changes the bytes the header reads).
    pub fn span(&self) -> Span {
        Span { pn_at: self.pn_at, end: self.end }
    }
}

/// Where a packet's packet number starts and where the packet ends, in its datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub pn_at: usize,
    pub end: usize,
}

/// A cursor over a header's bytes.
struct Reader<'a> {
    d: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        let b = self.d.get(self.at..self.at + n).ok_or(Error::Truncated)?;
        self.at += n;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, Error> {
        let (v, n) = varint::read(&self.d[self.at.min(self.d.len())..]).ok_or(Error::Truncated)?;
        self.at += n;
        Ok(v)
    }
}

/// Takes `keys`' protection off the packet at the start of `d` whose header said `span`
/// ([`Header::span`]), in place: its packet number, recovered against the largest one
/// received in its space, and its payload (the frames).
pub fn open<'d>(
    d: &'d mut [u8],
    span: Span,
    keys: &DirectionalKeys,
    largest: Option<u64>,
) -> Result<(u64, &'d [u8]), Error> {
    let packet = &*keys.packet;
    open_phase(d, span, &*keys.header, largest, |_| Some(packet)).map(|(pn, _, p)| (pn, p))
}

/// [`open`] for a short header whose payload key depends on its key phase bit (RFC 9001
/// section 6): `key` picks the packet key for the phase read (None: drop the packet). The
/// packet number, the key phase and the payload.
pub fn open_phase<'d, 'k>(
    d: &'d mut [u8],
    span: Span,
    header_key: &dyn HeaderProtectionKey,
    largest: Option<u64>,
    key: impl FnOnce(bool) -> Option<&'k dyn PacketKey>,
) -> Result<(u64, bool, &'d [u8]), Error> {
    let Span { pn_at, end } = span;
    if pn_at == 0 || end < pn_at + 4 + SAMPLE || end > d.len() {
        return Err(Error::Protection);
    }
    let mut sample = [0u8; SAMPLE];
    sample.copy_from_slice(&d[pn_at + 4..pn_at + 4 + SAMPLE]);
    let (first, rest) = d.split_at_mut(1);
    header_key
        .decrypt_in_place(&sample, &mut first[0], &mut rest[pn_at - 1..pn_at + 3])
        .map_err(|_| Error::Protection)?;
    let long = first[0] & 0x80 != 0;
    let reserved = if long { 0x0c } else { 0x18 };
    let phase = !long && first[0] & 0x04 != 0;
    let packet_key = key(phase).ok_or(Error::Protection)?;
    let pn_len = usize::from(first[0] & 0x03) + 1;
    let truncated = d[pn_at..pn_at + pn_len].iter().fold(0u64, |v, &b| (v << 8) | u64::from(b));
    let pn = decode_pn(largest, truncated, pn_len as u32 * 8);
    // Reserved bits are checked only once the packet is known to be genuine (RFC 9000
    // section 17.2): a forged one is dropped, not a protocol violation.
    let (header, payload) = d[..end].split_at_mut(pn_at + pn_len);
    let frames = packet_key.decrypt_in_place(pn, header, payload).map_err(|_| Error::Protection)?;
    if header[0] & reserved != 0 {
        return Err(Error::Reserved);
    }
    Ok((pn, phase, frames))
}

/// The full packet number from its last `bits` bits, the one nearest to the next expected
/// (RFC 9000 appendix A.3).
pub fn decode_pn(largest: Option<u64>, truncated: u64, bits: u32) -> u64 {
    let expected = largest.map_or(0, |l| l + 1);
    let win = 1u64 << bits;
    let (half, mask) = (win / 2, win - 1);
    let candidate = (expected & !mask) | truncated;
    if candidate + half <= expected && candidate < (1 << 62) - win {
        candidate + win
    } else if candidate > expected + half && candidate >= win {
        candidate - win
    } else {
        candidate
    }
}

/// The bytes to send of packet number `pn` when the peer acknowledged up to `acked`: enough
/// for twice the packets in flight (RFC 9000 appendix A.2), 1 to 4.
pub fn pn_len(pn: u64, acked: Option<u64>) -> usize {
    let unacked = acked.map_or(pn + 1, |a| pn.saturating_sub(a));
    let bits = 64 - (unacked.max(1) * 2).leading_zeros() as usize;
    bits.div_ceil(8).clamp(1, 4)
}

/// What a long-header packet's header carries.
#[derive(Debug, Clone, Copy)]
pub struct Long<'a> {
    pub kind: Kind,
    pub version: u32,
    pub dcid: &'a [u8],
    pub scid: &'a [u8],
    /// An Initial's token (empty for others).
    pub token: &'a [u8],
}

/// Where a packet's header goes: a long header, or a short one to `dcid`.
#[derive(Debug, Clone, Copy)]
pub enum Head<'a> {
    Long(Long<'a>),
    Short { dcid: &'a [u8], key_phase: bool },
}

/// Appends packet number `pn` carrying `frames`, protected with `keys`, to `out`; the
/// payload is padded (PADDING frames) so that the packet is at least `min_len` bytes (an
/// Initial's datagram must be 1,200) and long enough to sample.
pub fn seal(
    out: &mut Vec<u8>,
    head: Head<'_>,
    pn: u64,
    acked: Option<u64>,
    frames: &[u8],
    min_len: usize,
    keys: &DirectionalKeys,
) -> Result<(), Error> {
    seal_with(out, head, pn, acked, frames, min_len, &*keys.header, &*keys.packet)
}

/// [`seal`] with the header protection and packet keys apart (a 1-RTT packet key changes at
/// each key update, its header key does not).
#[allow(clippy::too_many_arguments, reason = "a packet's parts, each needed")]
pub fn seal_with(
    out: &mut Vec<u8>,
    head: Head<'_>,
    pn: u64,
    acked: Option<u64>,
    frames: &[u8],
    min_len: usize,
    header_key: &dyn HeaderProtectionKey,
    packet_key: &dyn PacketKey,
) -> Result<(), Error> {
    let start = out.len();
    let n = pn_len(pn, acked);
    let pn_bits = (n - 1) as u8;
    let len_at;
    match head {
        Head::Long(l) => {
            let kind = match l.kind {
                Kind::Initial => 0,
                Kind::ZeroRtt => 1,
                Kind::Handshake => 2,
                _ => return Err(Error::NotQuic),
            };
            out.push(0xc0 | (kind << 4) | pn_bits);
            out.extend_from_slice(&l.version.to_be_bytes());
            for id in [l.dcid, l.scid] {
                out.push(u8::try_from(id.len()).map_err(|_| Error::NotQuic)?);
                out.extend_from_slice(id);
            }
            if l.kind == Kind::Initial {
                varint::put(out, l.token.len() as u64);
                out.extend_from_slice(l.token);
            }
            // The length, always in two bytes (packets here are far below 16,383 bytes),
            // written once the payload's is known.
            len_at = Some(out.len());
            out.extend_from_slice(&[0x40, 0]);
        }
        Head::Short { dcid, key_phase } => {
            out.push(0x40 | if key_phase { 0x04 } else { 0 } | pn_bits);
            out.extend_from_slice(dcid);
            len_at = None;
        }
    }
    let pn_at = out.len();
    out.extend_from_slice(&pn.to_be_bytes()[8 - n..]);
    let payload_at = out.len();
    out.extend_from_slice(frames);
    // Enough to sample (4 bytes after the packet number starts, 16 of them) and `min_len`.
    let least = (pn_at + 4 + SAMPLE).max(start + min_len).saturating_sub(TAG);
    if out.len() < least {
        out.resize(least, 0);
    }
    if let Some(at) = len_at {
        let len = out.len() - pn_at + TAG;
        let len = u16::try_from(len).ok().filter(|&l| l < 0x4000).ok_or(Error::Protection)?;
        out[at..at + 2].copy_from_slice(&(len | 0x4000).to_be_bytes());
    }
    let (header, payload) = out[start..].split_at_mut(payload_at - start);
    let tag = packet_key.encrypt_in_place(pn, header, payload).map_err(|_| Error::Protection)?;
    out.extend_from_slice(tag.as_ref());
    let mut sample = [0u8; SAMPLE];
    sample.copy_from_slice(&out[pn_at + 4..pn_at + 4 + SAMPLE]);
    let (first, rest) = out[start..].split_at_mut(1);
    header_key
        .encrypt_in_place(&sample, &mut first[0], &mut rest[pn_at - start - 1..][..n])
        .map_err(|_| Error::Protection)
}

/// The key and nonce of a QUIC version 1 Retry packet's integrity tag (RFC 9001 section
/// 5.8): fixed, so that anyone on the path can check a Retry, not forge one it did not see.
const RETRY_KEY: [u8; 16] = [
    0xbe, 0x0c, 0x69, 0x0b, 0x9f, 0x66, 0x57, 0x5a, 0x1d, 0x76, 0x6b, 0x54, 0xe3, 0x68, 0xc8, 0x4e,
];
const RETRY_NONCE: [u8; 12] =
    [0x46, 0x15, 0x99, 0xd3, 0x5d, 0x63, 0x2b, 0xf2, 0x23, 0x98, 0x25, 0xbb];

/// Whether the Retry packet `retry` (the whole datagram) ends in the integrity tag a server
/// makes for a client that first chose `odcid` as its destination (RFC 9001 section 5.8: the
/// AES-128-GCM tag of nothing, over the original connection ID and the packet before the
/// tag).
pub fn retry_is_valid(odcid: &[u8], retry: &[u8]) -> bool {
    use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM};
    let Some(split) = retry.len().checked_sub(TAG) else { return false };
    let (packet, tag) = retry.split_at(split);
    let Ok(odcid_len) = u8::try_from(odcid.len()) else { return false };
    let mut pseudo = Vec::with_capacity(1 + odcid.len() + packet.len());
    pseudo.push(odcid_len);
    pseudo.extend_from_slice(odcid);
    pseudo.extend_from_slice(packet);
    let Ok(key) = UnboundKey::new(&AES_128_GCM, &RETRY_KEY) else { return false };
    let key = LessSafeKey::new(key);
    let nonce = Nonce::assume_unique_for_key(RETRY_NONCE);
    key.seal_in_place_separate_tag(nonce, Aad::from(&pseudo[..]), &mut [])
        .is_ok_and(|t| t.as_ref() == tag)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    /// RFC 9000 appendix A.3's example, and the edges of the window.
    #[test]
    fn packet_numbers_are_recovered_nearest_the_expected() {
        assert_eq!(decode_pn(Some(0xa82f_30ea), 0x9b32, 16), 0xa82f_9b32);
        assert_eq!(decode_pn(None, 0, 8), 0);
        assert_eq!(decode_pn(Some(255), 0x00, 8), 256, "past the wrap");
        assert_eq!(decode_pn(Some(256), 0xff, 8), 255, "a late one before it");
    }

    fn keys(side: rustls::Side) -> rustls::quic::Keys {
        let suite = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256;
        let suite = suite.tls13().unwrap().quic_suite().unwrap();
        suite.keys(&[1, 2, 3, 4], side, rustls::quic::Version::V1)
    }

    /// A short-header packet and a Handshake packet, sealed by one side and opened by the
    /// other: the packet number shortened against the last acknowledged and recovered against
    /// the last received, the payload whole, a small one padded to be sampled.
    #[test]
    fn sealed_packets_open_on_the_other_side() {
        let (client, server) = (keys(rustls::Side::Client), keys(rustls::Side::Server));
        let dcid = [5u8; 8];
        let mut d = Vec::new();
        let short = Head::Short { dcid: &dcid, key_phase: false };
        seal(&mut d, short, 70_000, Some(69_990), &[0x01], 0, &client.local).unwrap();
        let h = parse(&d, 8).unwrap();
        assert_eq!((h.kind, h.dcid, h.end), (Kind::OneRtt, &dcid[..], d.len()));
        let (span, mut opened) = (h.span(), d.clone());
        let (pn, frames) = open(&mut opened, span, &server.remote, Some(69_999)).unwrap();
        assert_eq!(pn, 70_000);
        assert_eq!(frames[0], 0x01, "PING, then the padding that lets it be sampled");
        assert!(frames[1..].iter().all(|&b| b == 0));

        let mut d = Vec::new();
        let long =
            Long { kind: Kind::Handshake, version: V1, dcid: &dcid, scid: &[6; 4], token: &[] };
        seal(&mut d, Head::Long(long), 300, Some(10), &[0x1e; 40], 0, &server.local).unwrap();
        d.extend_from_slice(&[0x40; 30]); // a coalesced packet's bytes after it
        let h = parse(&d, 8).unwrap();
        assert_eq!((h.kind, h.scid, h.end), (Kind::Handshake, &[6u8; 4][..], d.len() - 30));
        let span = h.span();
        let (pn, frames) = open(&mut d, span, &client.remote, Some(299)).unwrap();
        assert_eq!((pn, frames), (300, &[0x1e; 40][..]));
        // Opened with the wrong side's keys: refused.
        let mut d2 = Vec::new();
        seal(&mut d2, short, 1, None, &[0x01; 30], 0, &client.local).unwrap();
        let h = parse(&d2, 8).unwrap();
        assert_eq!(open(&mut d2.clone(), h.span(), &client.remote, None), Err(Error::Protection));
    }

    /// RFC 9001 appendix A.4's Retry: its tag checks against the client's original
    /// connection ID, and not against another, nor with a bit of the token changed.
    #[test]
    fn a_retrys_integrity_tag_is_checked_against_the_original_connection_id() {
        let retry: Vec<u8> = (0..72)
            .step_by(2)
            .map(|i| {
                let hex =
                    "ff000000010008f067a5502a4262b5746f6b656e04a265ba2eff4d829058fb3f0f2496ba";
                u8::from_str_radix(&hex[i..i + 2], 16).unwrap()
            })
            .collect();
        let odcid = [0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08];
        let h = parse(&retry, 0).unwrap();
        assert_eq!((h.kind, h.token), (Kind::Retry, &b"token"[..]));
        assert_eq!(h.scid, [0xf0, 0x67, 0xa5, 0x50, 0x2a, 0x42, 0x62, 0xb5]);
        assert!(retry_is_valid(&odcid, &retry));
        assert!(!retry_is_valid(&[0x83; 8], &retry));
        let mut bad = retry.clone();
        bad[20] ^= 1;
        assert!(!retry_is_valid(&odcid, &bad));
        assert!(!retry_is_valid(&odcid, &retry[..10]));
    }

    /// RFC 9000 appendix A.2's examples: the bytes a packet number needs.
    #[test]
    fn packet_numbers_take_the_bytes_twice_the_unacknowledged_need() {
        assert_eq!(pn_len(0x00ac_5c02, Some(0x00ab_e8b3)), 2);
        assert_eq!(pn_len(0x00ac_e8fe, Some(0x00ab_e8b3)), 3);
        assert_eq!(pn_len(0, None), 1);
        assert_eq!(pn_len(200, Some(190)), 1);
    }
}
