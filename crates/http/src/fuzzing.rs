//! The fuzz targets' bodies (`fuzz/fuzz_targets/` calls them; the committed corpus is replayed
//! through them as ordinary tests on stable Rust). Each takes any bytes and panics only on a
//! bug: a parser that panics, or answers differently when the same bytes arrive in other
//! pieces.

use crate::h2::{frame, hpack};
use crate::{parse_request, ChunkedDecoder, RequestLimits};

/// The first byte picks a split point in the rest.
fn split(data: &[u8]) -> Option<(usize, &[u8])> {
    let (&at, input) = data.split_first()?;
    Some((usize::from(at).min(input.len()), input))
}

/// HTTP/1.1 responses (the load generator's side): the same bytes whole, split in two and one
/// byte at a time give the same responses, or the same error.
pub fn response(data: &[u8]) {
    let Some((at, input)) = split(data) else { return };
    let whole = crate::response::parse_reads(&[input], false);
    let halves = crate::response::parse_reads(&[&input[..at], &input[at..]], false);
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    assert_eq!(whole, halves);
    assert_eq!(whole, crate::response::parse_reads(&bytes, false));
    // A HEAD's responses have no body, whatever their head says: never a panic.
    let _ = crate::response::parse_reads(&[input], true);
}

/// HTTP/1.1 request heads (the server's side), with its limits and smuggling rules: a head
/// found in the buffer is found the same in the buffer cut right after it, and in no shorter
/// prefix, which says "read more" or refuses it.
pub fn request_head(data: &[u8]) {
    let limits = RequestLimits { max_request_line: 256, max_header_bytes: 512, max_headers: 8 };
    let mut whole = data.to_vec();
    let found = match parse_request(&mut whole, &limits) {
        Ok(Some((n, head))) => Some((n, format!("{head:?}"))),
        Ok(None) | Err(_) => None,
    };
    let Some((n, shown)) = found else { return };
    assert!(n <= data.len());
    let mut cut = data[..n].to_vec();
    match parse_request(&mut cut, &limits) {
        Ok(Some((m, head))) => {
            assert_eq!(m, n);
            assert_eq!(format!("{head:?}"), shown);
        }
        other => panic!("the head of {n} bytes is not found alone: {other:?}"),
    }
    if n > 0 {
        let mut short = data[..n - 1].to_vec();
        assert!(!matches!(parse_request(&mut short, &limits), Ok(Some(_))));
    }
}

/// Chunked bodies (both sides): whole, split in two and byte by byte, the decoder consumes
/// the same bytes, counts the same data and ends (or fails) the same.
pub fn chunked(data: &[u8]) {
    let Some((at, input)) = split(data) else { return };
    let whole = decode_pieces(&[input]);
    assert_eq!(whole, decode_pieces(&[&input[..at], &input[at..]]));
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    assert_eq!(whole, decode_pieces(&bytes));
}

/// (bytes consumed, data bytes, done) or the error, after feeding `pieces` in turn.
fn decode_pieces(pieces: &[&[u8]]) -> Result<(usize, u64, bool), crate::ChunkError> {
    let mut d = ChunkedDecoder::new();
    let mut consumed = 0;
    for p in pieces {
        let step = d.decode(p)?;
        consumed += step.consumed;
        if step.done {
            break;
        }
        assert_eq!(step.consumed, p.len(), "a body not done takes its whole input");
    }
    Ok((consumed, d.data_bytes(), d.is_done()))
}

/// HPACK (both sides): header blocks decoded in turn by one decoder (the first byte of each
/// piece gives the next block's length) never decode past the list size, grow the table past
/// what was allowed, or panic; a block that leaves the table unchanged decodes the same again.
pub fn hpack(data: &[u8]) {
    let mut d = hpack::Decoder::new(256, 1024);
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let (block, next) = tail.split_at(usize::from(len).min(tail.len()));
        rest = next;
        let before = d.table_changes();
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let decoded = d.decode(block, &mut |n, v| fields.push((n.to_vec(), v.to_vec())));
        assert!(d.table_size() <= 256);
        let Ok(size) = decoded else { continue };
        assert!(size <= 1024);
        let listed: usize = fields.iter().map(|(n, v)| n.len() + v.len() + 32).sum();
        assert_eq!(size, listed, "the decoded size is the list's");
        if d.table_changes() == before {
            let mut again: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            let decoded = d.decode(block, &mut |n, v| again.push((n.to_vec(), v.to_vec())));
            assert_eq!(decoded.ok(), Some(size));
            assert_eq!(again, fields);
        }
    }
}

/// HTTP/2 frames (both sides): every frame in the bytes, through each payload reader that its
/// type has; a reader answers or names what is wrong, never panics.
pub fn h2_frames(data: &[u8]) {
    let mut at = 0;
    while let Some(h) = frame::Header::parse(&data[at..]) {
        let end = (at + frame::HEADER_LEN + h.len).min(data.len());
        let payload = &data[at + frame::HEADER_LEN..end];
        let _ = frame::unpadded(&h, payload);
        let _ = frame::dependency(&h, payload);
        let _ = frame::settings(&h, payload);
        let _ = frame::window_increment(payload);
        let _ = frame::rst_code(&h, payload);
        let _ = frame::goaway(&h, payload);
        if let Ok(inner) = frame::unpadded(&h, payload) {
            assert!(inner.len() <= payload.len());
        }
        at = end;
    }
}

/// QPACK field sections (both sides): sections in turn (the first byte of each piece gives the
/// next one's length) decode within the size bound or are refused, never panic; what decodes
/// encodes again to a section that decodes to the same fields.
pub fn qpack(data: &[u8]) {
    let mut d = crate::h3::qpack::Decoder::new(1024);
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let (section, next) = tail.split_at(usize::from(len).min(tail.len()));
        rest = next;
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let Ok(size) = d.decode(section, &mut |n, v| fields.push((n.to_vec(), v.to_vec()))) else {
            continue;
        };
        assert!(size <= 1024);
        let listed: usize = fields.iter().map(|(n, v)| n.len() + v.len() + 32).sum();
        assert_eq!(size, listed, "the decoded size is the section's");
        let again = crate::h3::qpack::encode(fields.iter().map(|(n, v)| (&n[..], &v[..])));
        let mut back: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let decoded = d.decode(&again, &mut |n, v| back.push((n.to_vec(), v.to_vec())));
        assert_eq!(decoded.ok(), Some(size));
        assert_eq!(back, fields);
    }
}

/// HTTP/3 frames on a request stream and on a control stream (the first byte picks a split
/// point): the same bytes whole, in two pieces and a byte at a time give the same frames and
/// DATA, or the same error; every control frame's payload goes through the SETTINGS and
/// GOAWAY readers.
pub fn h3_frames(data: &[u8]) {
    use crate::h3::frame::{self, allowed, Event, FrameError, On, Reader};
    let Some((at, input)) = split(data) else { return };
    type Seen = Vec<(u64, Vec<u8>)>;
    let read = |pieces: &[&[u8]], control: bool| -> (Seen, Result<bool, FrameError>) {
        let mut r = Reader::new(256);
        let mut seen: Seen = Vec::new();
        let mut first = control;
        let mut result = Ok(());
        for p in pieces {
            result = r.feed(
                p,
                &mut |t| {
                    let on = match (control, first) {
                        (true, true) => On::ControlFirst,
                        (true, false) => On::Control,
                        (false, _) => On::Request,
                    };
                    first = false;
                    allowed(on, t)
                },
                &mut |e| {
                    match e {
                        Event::Frame { kind, payload } => {
                            assert!(payload.len() <= 256);
                            let _ = frame::settings(payload);
                            let _ = frame::goaway(payload);
                            seen.push((kind, payload.to_vec()));
                        }
                        Event::DataStart(n) => seen.push((u64::MAX, n.to_be_bytes().to_vec())),
                        Event::Data(d) => match seen.last_mut() {
                            Some((u64::MAX, _)) | None => seen.push((0, d.to_vec())),
                            Some((0, b)) => b.extend_from_slice(d),
                            Some(_) => seen.push((0, d.to_vec())),
                        },
                    }
                    Ok::<(), FrameError>(())
                },
            );
            if result.is_err() {
                break;
            }
        }
        (seen, result.map(|()| r.between_frames()))
    };
    for control in [false, true] {
        let whole = read(&[input], control);
        assert_eq!(whole, read(&[&input[..at], &input[at..]], control));
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(whole, read(&bytes, control));
    }
}

/// gRPC messages in a stream's DATA bytes (the generator's side): the first byte sets the
/// size of the pieces the rest is fed in; each piece reads or names what is wrong, never
/// panics, and no more is kept than the limit allows.
pub fn grpc_messages(data: &[u8]) {
    let Some((&piece, rest)) = data.split_first() else { return };
    let mut m = crate::grpc::Messages::new(256).keep_first();
    for chunk in rest.chunks(usize::from(piece).max(1)) {
        if m.feed(chunk).is_err() {
            return;
        }
    }
    assert!(m.count <= rest.len() as u64 / crate::grpc::PREFIX as u64);
    assert!(m.first().is_none_or(|f| f.len() <= 256));
    let _ = m.finish();
}
