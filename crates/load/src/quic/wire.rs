//! A request's bytes over HTTP/3, built once before the run for every load thread: its
//! HEADERS frame (a QPACK field section from its HTTP/2 header block) and its body in a DATA
//! frame, and where its templated IDs' digits lie in them.

use qpslab_http::h2::hpack;
use qpslab_http::h3::frame::{self, kind};
use qpslab_http::h3::qpack;

use crate::config::ConfigError;
use crate::template;

/// A request position's bytes over HTTP/3: its HEADERS frame and its body in a DATA frame, and
/// where its templated IDs' digits lie in them.
#[derive(Debug)]
pub struct Wire {
    pub bytes: Vec<u8>,
    pub slots: Vec<template::Slot>,
}

/// The HEADERS and DATA frames of a request from its HTTP/2 header block (which uses no
/// dynamic table, so it decodes on its own) turned into a QPACK field section, Huffman-coded
/// unless `huffman` is false.
fn frames(block: &[u8], body: &[u8], huffman: bool) -> Vec<u8> {
    let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut dec = hpack::Decoder::new(hpack::DEFAULT_TABLE_SIZE, usize::MAX);
    // The block was encoded here; it decodes.
    let _ = dec.decode(block, &mut |n, v| fields.push((n.to_vec(), v.to_vec())));
    let section = qpack::encode_as(fields.iter().map(|(n, v)| (&n[..], &v[..])), huffman);
    let mut out = Vec::new();
    frame::put_head(&mut out, kind::HEADERS, section.len());
    out.extend_from_slice(&section);
    if !body.is_empty() {
        frame::put_head(&mut out, kind::DATA, body.len());
        out.extend_from_slice(body);
    }
    out
}

/// Each position's [`Wire`]. A templated request is encoded without Huffman coding (as its
/// HTTP/2 block is), then once more per ID with that ID's digits at 1: where the bytes differ
/// is where its digits lie (as `template` locates them in the other encodings).
pub fn wires(group: &crate::targets::Group) -> Result<Vec<Wire>, ConfigError> {
    (0..group.cycle.len())
        .map(|pos| {
            let (block, body) = (group.h2_block(pos), group.body(pos));
            let Some(t) = group.template(pos) else {
                return Ok(Wire { bytes: frames(block, body, true), slots: Vec::new() });
            };
            let bytes = frames(block, body, false);
            let mut slots = Vec::new();
            let ones = |text: &[u8], s: &template::Slot| {
                let mut marked = text.to_vec();
                if let Some(d) = marked.get_mut(s.at..s.at + usize::from(s.width)) {
                    d.fill(b'1');
                }
                marked
            };
            let marked =
                t.h2.iter()
                    .map(|s| (s, frames(&ones(block, s), body, false)))
                    .chain(t.body.iter().map(|s| (s, frames(block, &ones(body, s), false))));
            for (s, marked) in marked {
                let slot = template::locate(&bytes, &marked, usize::from(s.width), s.kind);
                match slot {
                    Ok(Some(slot)) => slots.push(slot),
                    _ => {
                        return Err(ConfigError::new(
                            "--h3",
                            "a templated ID is not one run of digits in its QPACK field section \
                             (a value the static table holds?); put it where the request carries \
                             it as written",
                        ))
                    }
                }
            }
            Ok(Wire { bytes, slots })
        })
        .collect()
}

impl Wire {
    /// The next request's number and bytes: as encoded (number 0, no ID taken), or with a
    /// templated request's IDs of the next number written into `scratch`, a copy.
    pub fn next<'w>(
        &'w self,
        ids: &mut template::Ids,
        scratch: &'w mut Vec<u8>,
    ) -> (u64, &'w [u8]) {
        if self.slots.is_empty() {
            return (0, &self.bytes);
        }
        let n = ids.take();
        (n, self.numbered(n, ids, scratch))
    }

    /// The bytes of request number `n` (sent once already: its IDs again), in `scratch`
    /// when the request is templated.
    pub fn numbered<'w>(
        &'w self,
        n: u64,
        ids: &template::Ids,
        scratch: &'w mut Vec<u8>,
    ) -> &'w [u8] {
        if self.slots.is_empty() {
            return &self.bytes;
        }
        scratch.clear();
        scratch.extend_from_slice(&self.bytes);
        template::Template::write(&self.slots, n, ids.digits_of(n), scratch);
        scratch
    }
}
