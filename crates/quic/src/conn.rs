//! What HTTP/3 needs of a QUIC connection's streams, whichever QUIC carries them: open and
//! accept streams, write with flow control, finish, reset, stop, and read what arrived. Both
//! quinn-proto's connection and qpslab's own client ([`crate::client::Client`]) have it, so
//! one HTTP/3 session runs over either. Streams are named by their QUIC stream ID.

use quinn_proto::{Connection, Dir, ReadError, StreamId, VarInt};

use crate::client::Client;

/// How a read of a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// Everything that has arrived was read (or the stream is gone): more may come.
    Blocked,
    /// The peer finished the stream and all of it was read.
    Ended,
    /// The peer reset the stream, with this code.
    Reset(u64),
    /// The reader asked to stop (it returned `Ok(false)`).
    Stopped,
}

/// A QUIC connection's streams.
pub trait Conn {
    /// Opens a stream of this side's, bidirectional or not; None while the peer's limit
    /// holds it.
    fn open(&mut self, bidi: bool) -> Option<u64>;
    /// A stream the peer opened that was not yet taken.
    fn accept(&mut self, bidi: bool) -> Option<u64>;
    /// Writes what flow control takes of `data` on stream `id`: the bytes taken.
    fn write(&mut self, id: u64, data: &[u8]) -> usize;
    /// Ends stream `id`'s sending side after what was written; false when it is not open.
    fn finish(&mut self, id: u64) -> bool;
    /// Abandons stream `id`'s sending side with an application error code.
    fn reset(&mut self, id: u64, code: u64);
    /// Asks the peer to stop sending on stream `id`.
    fn stop(&mut self, id: u64, code: u64);
    /// Reads what stream `id` holds, each chunk to `each` (which returns whether to read on),
    /// until nothing is left, the stream ends or is reset, or `each` stops or fails.
    fn read<E>(
        &mut self,
        id: u64,
        each: impl FnMut(&[u8]) -> Result<bool, E>,
    ) -> Result<Drained, E>;
}

fn sid(id: u64) -> StreamId {
    StreamId::from(VarInt::from_u64(id).unwrap_or_default())
}

fn varint(code: u64) -> VarInt {
    VarInt::from_u64(code).unwrap_or_default()
}

fn dir(bidi: bool) -> Dir {
    if bidi {
        Dir::Bi
    } else {
        Dir::Uni
    }
}

impl Conn for Connection {
    fn open(&mut self, bidi: bool) -> Option<u64> {
        self.streams().open(dir(bidi)).map(u64::from)
    }

    fn accept(&mut self, bidi: bool) -> Option<u64> {
        self.streams().accept(dir(bidi)).map(u64::from)
    }

    fn write(&mut self, id: u64, data: &[u8]) -> usize {
        self.send_stream(sid(id)).write(data).unwrap_or(0)
    }

    fn finish(&mut self, id: u64) -> bool {
        self.send_stream(sid(id)).finish().is_ok()
    }

    fn reset(&mut self, id: u64, code: u64) {
        let _ = self.send_stream(sid(id)).reset(varint(code));
    }

    fn stop(&mut self, id: u64, code: u64) {
        let _ = self.recv_stream(sid(id)).stop(varint(code));
    }

    fn read<E>(
        &mut self,
        id: u64,
        mut each: impl FnMut(&[u8]) -> Result<bool, E>,
    ) -> Result<Drained, E> {
        let mut recv = self.recv_stream(sid(id));
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
                Err(ReadError::Reset(code)) => break Ok(Drained::Reset(code.into_inner())),
            }
        };
        // What was read is acknowledged to the peer's flow control.
        let _ = chunks.finalize();
        end
    }
}

impl Conn for Client {
    fn open(&mut self, bidi: bool) -> Option<u64> {
        self.streams.open(bidi)
    }

    fn accept(&mut self, bidi: bool) -> Option<u64> {
        // A server opens no bidirectional stream to a client here (its limit is 0).
        if bidi {
            return None;
        }
        self.streams.accept_uni()
    }

    fn write(&mut self, id: u64, data: &[u8]) -> usize {
        // Written whole: flow control holds what is sent, not what is written.
        if self.streams.write(id, data, false) {
            data.len()
        } else {
            0
        }
    }

    fn finish(&mut self, id: u64) -> bool {
        self.streams.write(id, &[], true)
    }

    fn reset(&mut self, id: u64, code: u64) {
        self.streams.reset(id, code);
    }

    fn stop(&mut self, id: u64, code: u64) {
        self.streams.stop(id, code);
    }

    fn read<E>(
        &mut self,
        id: u64,
        mut each: impl FnMut(&[u8]) -> Result<bool, E>,
    ) -> Result<Drained, E> {
        let mut went = Ok(true);
        let (ended, reset) = self.streams.read_with(id, |b| went = each(b));
        match (reset, went) {
            (Some(code), _) => Ok(Drained::Reset(code)),
            (None, Ok(false)) => Ok(Drained::Stopped),
            (None, Err(e)) => Err(e),
            (None, Ok(true)) if ended => Ok(Drained::Ended),
            (None, Ok(true)) => Ok(Drained::Blocked),
        }
    }
}
