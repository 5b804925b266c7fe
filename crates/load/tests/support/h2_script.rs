//! Scripted HTTP/2 servers: frames written after the server's SETTINGS once the client opened
//! stream 1, for tests of what a server may send wrong.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::scripted::{After, Scripted};

/// On every connection: a server's SETTINGS frame, then, once the client opened stream 1
/// (it waits for the server's SETTINGS), the script's frames; the connection stays open after.
pub fn frames_after_settings(frames: Vec<u8>) -> Scripted {
    // Called once per connection (its first head is the preface's "PRI * HTTP/2.0").
    Scripted::start(move |_, s: &mut TcpStream| {
        let _ = s.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        await_stream_1(s);
        let _ = s.write_all(&frames);
        After::Stall
    })
}

/// Reads until the client's HEADERS frame on stream 1 (END_HEADERS, with or without
/// END_STREAM) went by, or 300 ms passed (a client that knew the server's limit from an
/// earlier connection sent it with the preface, which the scripted server has read).
pub fn await_stream_1(s: &mut TcpStream) {
    use std::io::Read;
    let started = Instant::now();
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    let opened =
        |b: &[u8]| b.windows(6).any(|w| w[0] == 1 && (w[1] & !1) == 4 && w[2..] == [0, 0, 0, 1]);
    while !opened(&seen) && started.elapsed() < Duration::from_millis(300) {
        match s.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => seen.extend_from_slice(&chunk[..n]),
            Err(_) => {}
        }
    }
}

pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let l = (payload.len() as u32).to_be_bytes();
    let mut f = vec![l[1], l[2], l[3], kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}
