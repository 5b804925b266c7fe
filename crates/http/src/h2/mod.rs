//! HTTP/2 (RFC 9113) wire pieces: frames ([`frame`]) and header compression ([`hpack`],
//! [`huffman`]). No connection state: the sessions of the generator and the server keep it.

pub mod frame;
pub mod hpack;
pub mod huffman;
mod huffman_codes;
