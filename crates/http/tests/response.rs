//! Response parser: framing cases, and every split of a response stream parses the same.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use proptest::prelude::*;
use qpslab_http::response::parse_reads;
use qpslab_http::{ParseError, Response, ResponseParser};

fn whole(input: &[u8]) -> Result<Vec<Response>, ParseError> {
    parse_reads(&[input], false)
}

fn resp(status: u16, keep_alive: bool, body_bytes: u64) -> Response {
    Response { status, keep_alive, interim: 0, body_bytes, grpc: None, messages: 0 }
}

const NGINX_200: &[u8] = b"HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Sun, 22 Nov 2026 05:00:00 GMT\r\nContent-Type: text/plain\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n";

#[test]
fn content_length_keep_alive() {
    let input = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n";
    assert_eq!(whole(input).unwrap(), vec![resp(200, true, 3), resp(404, true, 0)]);
    assert_eq!(whole(NGINX_200).unwrap(), vec![resp(200, true, 0)]);
}

#[test]
fn chunked_with_extensions_and_trailers() {
    let input = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n4;x=y\r\nabcd\r\n0\r\nT: 1\r\n\r\n";
    assert_eq!(whole(input).unwrap(), vec![resp(200, true, 4)]);
}

#[test]
fn close_delimited_body_ends_at_eof() {
    let input = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nhello world";
    assert_eq!(whole(input).unwrap(), vec![resp(200, false, 11)]);
    // A final coding other than chunked is also read to the close.
    let input = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxyz";
    assert_eq!(whole(input).unwrap(), vec![resp(200, false, 3)]);
}

#[test]
fn interim_responses_are_skipped_and_counted() {
    let input = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n";
    let got = whole(input).unwrap();
    assert_eq!(
        got,
        vec![Response {
            status: 201,
            keep_alive: true,
            interim: 2,
            body_bytes: 0,
            grpc: None,
            messages: 0
        }]
    );
}

#[test]
fn bodiless_responses() {
    let head = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n";
    assert_eq!(parse_reads(&[head], true).unwrap(), vec![resp(200, true, 0)]);
    let input =
        b"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 304 Not Modified\r\nContent-Length: 50\r\n\r\n";
    assert_eq!(whole(input).unwrap(), vec![resp(204, true, 0), resp(304, true, 0)]);
}

#[test]
fn connection_persistence() {
    let close = b"HTTP/1.1 200 OK\r\nConnection: Close\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(whole(close).unwrap(), vec![resp(200, false, 0)]);
    let http10 = b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(whole(http10).unwrap(), vec![resp(200, false, 0)]);
    let http10_ka = b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(whole(http10_ka).unwrap(), vec![resp(200, true, 0)]);
    let both =
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    assert_eq!(whole(both).unwrap(), vec![resp(200, false, 0)]);
}

#[test]
fn malformed_responses() {
    let cases: &[&[u8]] = &[
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTX/1.1 200 OK\r\n\r\n",
        b"garbage\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
    ];
    for input in cases {
        let err = whole(input).unwrap_err();
        assert!(!err.is_eof(), "{:?} gave {err}", String::from_utf8_lossy(input));
    }
    let many: Vec<u8> = [
        &b"HTTP/1.1 200 OK\r\n"[..],
        &b"A: b\r\n".repeat(qpslab_http::response::MAX_HEADERS + 1),
        b"\r\n",
    ]
    .concat();
    assert_eq!(whole(&many), Err(ParseError::TooManyHeaders));
}

#[test]
fn identical_content_length_list_is_accepted() {
    let input = b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\nContent-Length: 2\r\n\r\nok";
    assert_eq!(whole(input).unwrap(), vec![resp(200, true, 2)]);
}

#[test]
fn eof_inside_a_response_is_an_eof_error() {
    let mid_body = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc";
    assert!(whole(mid_body).unwrap_err().is_eof());
    let mid_head = b"HTTP/1.1 200 OK\r\nContent-Le";
    assert!(whole(mid_head).unwrap_err().is_eof());
    let mid_chunk = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab";
    assert!(whole(mid_chunk).unwrap_err().is_eof());
    assert_eq!(whole(b"").unwrap(), vec![]);
}

#[test]
fn oversized_head_is_rejected() {
    let mut parser = ResponseParser::new(100);
    let big = [&b"HTTP/1.1 200 OK\r\nX: "[..], &[b'a'; 200]].concat();
    assert_eq!(parser.feed(&big, false), Err(ParseError::HeadTooLarge(100)));
}

/// A stream mixing every framing, to be cut at random places.
fn stream() -> Vec<u8> {
    [
        NGINX_200,
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n",
        &[b'x'; 1024],
        b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3;a=b\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nTrailer: v\r\n\r\n",
        b"HTTP/1.1 204 No Content\r\nServer: t\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\ntail bytes to the close",
    ]
    .concat()
}

fn expected() -> Vec<Response> {
    vec![
        resp(200, true, 0),
        Response {
            status: 200,
            keep_alive: true,
            interim: 1,
            body_bytes: 1024,
            grpc: None,
            messages: 0,
        },
        resp(404, true, 19),
        resp(204, true, 0),
        resp(200, false, 23),
    ]
}

#[test]
fn whole_stream_parses() {
    assert_eq!(whole(&stream()).unwrap(), expected());
}

#[test]
fn byte_at_a_time() {
    let s = stream();
    let chunks: Vec<&[u8]> = s.chunks(1).collect();
    assert_eq!(parse_reads(&chunks, false).unwrap(), expected());
}

proptest! {
    #[test]
    fn any_split_parses_the_same(mut cuts in proptest::collection::vec(0usize..1400, 0..40)) {
        let s = stream();
        cuts.push(s.len());
        cuts.iter_mut().for_each(|c| *c = (*c).min(s.len()));
        cuts.sort_unstable();
        let mut chunks = Vec::new();
        let mut start = 0;
        for c in cuts {
            chunks.push(&s[start..c]);
            start = c;
        }
        prop_assert_eq!(parse_reads(&chunks, false).unwrap(), expected());
    }

    /// Arbitrary bytes never panic and never report more responses than heads they contain.
    #[test]
    fn arbitrary_input_never_panics(data in proptest::collection::vec(any::<u8>(), 0..512),
                                    split in 0usize..512) {
        let split = split.min(data.len());
        let _ = parse_reads(&[&data[..split], &data[split..]], false);
    }
}
