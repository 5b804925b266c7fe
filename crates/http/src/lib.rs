//! HTTP wire codecs shared by the load generator and the server.
//!
//! Owns: HTTP/1.1 request encoding ([`request`]), request-head parsing with the server's limits
//! and smuggling rules ([`request_head`]), the chunked transfer-coding decoder ([`chunked`]) and
//! the incremental response parser ([`response`]); HTTP/2's frames and HPACK ([`h2`]); HTTP/3's frames and QPACK ([`h3`]); gRPC's message framing, status codes and timeouts
//! ([`grpc`]). Does not own sockets, buffers across reads, timing
//! or statistics: callers feed bytes and act on the events returned.

pub mod chunked;
#[doc(hidden)]
pub mod fuzzing;
pub mod grpc;
pub mod h2;
pub mod h3;
pub mod request;
pub mod request_head;
pub mod response;

pub use chunked::{ChunkError, ChunkedDecoder};
pub use request::{HeaderArg, RequestError, RequestSpec};
pub use request_head::{parse_request, BodyFraming, Method, Reject, RequestHead, RequestLimits};
pub use response::{ParseError, Response, ResponseParser, Step};

/// Whether `b` may appear in an RFC 9110 `token` (method, header name).
pub fn is_tchar(b: u8) -> bool {
    matches!(b,
        b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`'
        | b'|' | b'~' | b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z')
}
