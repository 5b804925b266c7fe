//! A receive stream read as far as it goes: the one loop each side runs over quinn-proto's
//! chunks, with how the read ended.

use quinn_proto::{Connection, ReadError, StreamId, VarInt};

/// How a read of a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// Everything that has arrived was read (or the stream is gone): more may come.
    Blocked,
    /// The peer finished the stream and all of it was read.
    Ended,
    /// The peer reset the stream, with this code.
    Reset(VarInt),
    /// The reader asked to stop (it returned `Ok(false)`).
    Stopped,
}

/// Reads what stream `id` holds, each chunk to `each` (which returns whether to read on),
/// until nothing is left, the stream ends or is reset, or `each` stops or fails.
pub fn drain<E>(
    conn: &mut Connection,
    id: StreamId,
    mut each: impl FnMut(&[u8]) -> Result<bool, E>,
) -> Result<Drained, E> {
    let mut recv = conn.recv_stream(id);
    let Ok(mut chunks) = recv.read(true) else { return Ok(Drained::Blocked) };
    let end = loop {
        match chunks.next(usize::MAX) {
            Ok(Some(chunk)) => match each(&chunk.bytes) {
                Ok(true) => {}
                Ok(false) => break Ok(Drained::Stopped),
                Err(e) => break Err(e),
            },
            Ok(None) => break Ok(Drained::Ended),
            Err(ReadError::Blocked) => break Ok(Drained::Blocked),
            Err(ReadError::Reset(code)) => break Ok(Drained::Reset(code)),
        }
    };
    // What was read is acknowledged to the peer's flow control.
    let _ = chunks.finalize();
    end
}
