//! HTTP/3 (RFC 9114) wire pieces: QUIC varints ([`varint`]), frames and their per-stream rules
//! ([`frame`]) and QPACK field sections with the dynamic table off ([`qpack`]). No connection
//! state: the sessions keep it, over a QUIC library that owns the transport.

pub mod frame;
pub mod qpack;
pub mod varint;
