//! QUIC and HTTP/3 pieces the load generator and the server share, on quinn-proto or qpslab's
//! own client (QUIC as a state machine without I/O, driven from each side's own UDP loop).
//!
//! Owns: the UDP socket as QUIC wants it ([`udp`]: batched reads and writes, GSO and GRO, the
//! counts of what each system call carried) and the peer's HTTP/3 unidirectional streams
//! ([`peer`]: its control stream and SETTINGS, QPACK streams with the dynamic table off,
//! GOAWAY), with the connection errors RFC 9114 names, over any QUIC with [`conn::Conn`]'s
//! stream operations; a client's QUIC as its loop drives it ([`stack`]: quinn-proto's or the
//! own one, behind one interface). A QUIC client of qpslab's own: packets ([`packet`]:
//! headers, packet numbers, protection with rustls's QUIC keys) and frames ([`frame`]), and
//! a client connection ([`client`]: the handshake, [`streams`], loss recovery and congestion
//! control in [`recovery`]), checked against quinn-proto and aioquic; `load --h3 --quic own`
//! drives it.
//! Does not own requests, responses or the event loops: each side has its own.

pub mod client;
pub mod conn;
pub mod counts;
pub mod frame;
pub mod fuzzing;
pub mod packet;
pub mod pair;
pub mod peer;
pub mod recovery;
pub mod stack;
pub mod streams;
pub mod udp;
