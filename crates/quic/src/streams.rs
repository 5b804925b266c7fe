//! The streams of [`crate::client::Client`]: the ones it opens (bidirectional, and
//! unidirectional for HTTP/3's control streams), the unidirectional ones the server opens,
//! their bytes each way in order, and both levels of flow control (RFC 9000 sections 2-4):
//! what the server lets this side send, and the windows this side gives back as the
//! application reads.
//!
//! Bytes sent are kept until acknowledged, and sent again when their packet is lost
//! ([`crate::recovery`] says which). A stream's sending side may be reset and its receiving
//! side stopped (RESET_STREAM, STOP_SENDING, each sent until acknowledged); those the server
//! sends end the stream's side.

use std::collections::VecDeque;

use crate::frame;
use crate::recovery::Retx;

/// The window this side gives each stream and the connection, and what it gives back once
/// half of it was read.
pub const STREAM_WINDOW: u64 = 1 << 20;
pub const CONN_WINDOW: u64 = 1 << 24;
/// Unidirectional streams the server may open (HTTP/3 opens three).
pub const PEER_UNI: u64 = 100;
/// Out-of-order bytes held per stream at most, beyond its window's bound.
const HELD_CHUNKS: usize = 64;

/// What the server's transport parameters allow this side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerLimits {
    pub max_data: u64,
    /// For the streams this side opens: bidirectional (the server's
    /// initial_max_stream_data_bidi_remote) and unidirectional.
    pub stream_bidi: u64,
    pub stream_uni: u64,
    pub max_bidi: u64,
    pub max_uni: u64,
    /// Its max_idle_timeout in milliseconds (0: none).
    pub idle_ms: u64,
    /// Its max_udp_payload_size: the largest datagram it takes (0: not said, 65527).
    pub max_udp_payload: u64,
}

/// One stream's state.
#[derive(Debug, Default)]
struct Stream {
    /// Bytes written and not yet acknowledged, from offset `base`; the next offset not yet
    /// sent; ranges acknowledged above `base`, and ranges lost, to send again (with whether
    /// the FIN went with them). A FIN after the written bytes.
    out: Vec<u8>,
    base: u64,
    sent: u64,
    acked: Vec<(u64, u64)>,
    lost: VecDeque<(u64, u64, bool)>,
    fin: bool,
    fin_sent: bool,
    fin_acked: bool,
    /// What the server lets this side send on it.
    send_max: u64,
    /// Bytes received in order and not yet read, up to offset `recv`; later ones held.
    ready: Vec<u8>,
    recv: u64,
    held: Vec<(u64, Vec<u8>)>,
    /// The final size, once a FIN or a reset said it.
    final_size: Option<u64>,
    /// Offset read by the application; the window given (offset it may send up to).
    read: u64,
    recv_max: u64,
    window_owed: bool,
    /// The server reset it (its code), or asked this side to stop sending.
    reset: Option<u64>,
    stopped: bool,
    /// The application read its end, or stopped reading (what comes after is dropped).
    ended: bool,
    /// This side reset its sending (the code, until the RESET_STREAM is acknowledged), or
    /// asked the server to stop (until the STOP_SENDING is acknowledged).
    reset_owed: Option<u64>,
    reset_sent: bool,
    reset_acked: bool,
    stop_owed: Option<u64>,
    stop_sent: bool,
    /// The highest offset received, counted against the connection's window.
    counted: u64,
    /// On the list of streams with something to send, and on the list of readable ones.
    queued: bool,
    listed: bool,
}

impl Stream {
    fn receives(id: u64) -> bool {
        // Not this side's own unidirectional streams (id & 3 == 2).
        id & 3 != 2
    }

    fn sends(id: u64) -> bool {
        // Not the server's unidirectional streams (id & 3 == 3).
        id & 3 != 3
    }

    /// Both directions done: the stream can go.
    fn done(&self, id: u64) -> bool {
        let all_acked = self.fin_acked && self.out.is_empty();
        let send_done = !Stream::sends(id) || all_acked || self.stopped || self.reset_acked;
        // A reset counts once the application read it.
        let recv_done = !Stream::receives(id) || self.ended;
        send_done && recv_done
    }
}

/// The connection's streams.
#[derive(Debug, Default)]
pub struct Streams {
    map: Table,
    opened_bidi: u64,
    opened_uni: u64,
    /// Server-opened unidirectional streams seen (their count), and handed to the
    /// application by [`Streams::accept_uni`].
    peer_uni: u64,
    accepted_uni: u64,
    pub peer: PeerLimits,
    /// Connection-level: bytes this side sent (stream offsets), bytes received (highest
    /// offsets), bytes read, and the window given.
    sent: u64,
    received: u64,
    read: u64,
    max_data: u64,
    max_data_owed: bool,
    readable: Vec<u64>,
    /// Streams with bytes, an end or a window update to send, in the order they got them.
    pending: VecDeque<u64>,
}

/// A breach by the server: a transport error code and what it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breach(pub u64, pub String);

const FLOW_CONTROL_ERROR: u64 = 0x03;
const STREAM_LIMIT_ERROR: u64 = 0x04;
const STREAM_STATE_ERROR: u64 = 0x05;
const FINAL_SIZE_ERROR: u64 = 0x06;

impl Streams {
    pub fn new() -> Streams {
        Streams { max_data: CONN_WINDOW, ..Streams::default() }
    }

    /// Opens a stream of this side's, bidirectional or not; None while the server's limit
    /// holds it.
    pub fn open(&mut self, bidi: bool) -> Option<u64> {
        let (n, max, kind, send_max) = if bidi {
            (&mut self.opened_bidi, self.peer.max_bidi, 0, self.peer.stream_bidi)
        } else {
            (&mut self.opened_uni, self.peer.max_uni, 2, self.peer.stream_uni)
        };
        if *n >= max {
            return None;
        }
        let id = *n * 4 + kind;
        *n += 1;
        let recv_max = if bidi { STREAM_WINDOW } else { 0 };
        if let Some(s) = self.map.open(id) {
            (s.send_max, s.recv_max) = (send_max, recv_max);
        }
        Some(id)
    }

    /// Streams open now.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Queues `data` (and the stream's end, with `fin`) on stream `id`; false when it is not
    /// open for sending.
    pub fn write(&mut self, id: u64, data: &[u8], fin: bool) -> bool {
        match self.map.get_mut(id) {
            Some(s) if Stream::sends(id) && !s.fin && !s.stopped => {
                s.out.extend_from_slice(data);
                s.fin = fin;
                if !s.queued {
                    s.queued = true;
                    self.pending.push_back(id);
                }
                true
            }
            _ => false,
        }
    }

    /// Whether stream `id` takes more bytes (open, not finished, reset or stopped).
    pub fn is_open_for_sending(&self, id: u64) -> bool {
        self.map.get(id).is_some_and(|s| !s.fin && !s.stopped && s.reset_owed.is_none())
    }

    /// Whether streams have frames to send.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty() || self.max_data_owed
    }

    /// Whether the server opened streams not yet handed out.
    pub fn has_unaccepted(&self) -> bool {
        self.accepted_uni < self.peer_uni
    }

    /// The next unidirectional stream the server opened, not yet handed out.
    pub fn accept_uni(&mut self) -> Option<u64> {
        (self.accepted_uni < self.peer_uni).then(|| {
            self.accepted_uni += 1;
            (self.accepted_uni - 1) * 4 + 3
        })
    }

    /// Resets stream `id`'s sending side with `code` (RESET_STREAM, its final size what was
    /// sent): what was written and not sent is dropped, nothing is sent again.
    pub fn reset(&mut self, id: u64, code: u64) {
        let Some(s) = self.map.get_mut(id) else { return };
        if !Stream::sends(id) || s.reset_owed.is_some() || s.fin_acked || s.stopped {
            return;
        }
        s.reset_owed = Some(code);
        s.fin = true;
        s.lost.clear();
        s.out.truncate((s.sent - s.base) as usize);
        self.queue(id);
    }

    /// Stops reading stream `id` (STOP_SENDING with `code`): what it has and what comes is
    /// dropped.
    pub fn stop(&mut self, id: u64, code: u64) {
        let Some(s) = self.map.get_mut(id) else { return };
        if !Stream::receives(id) || s.ended || s.reset.is_some() || s.stop_owed.is_some() {
            return;
        }
        s.stop_owed = Some(code);
        s.ended = true;
        s.ready.clear();
        s.held.clear();
        self.queue(id);
    }

    fn queue(&mut self, id: u64) {
        if let Some(s) = self.map.get_mut(id) {
            if !s.queued {
                s.queued = true;
                self.pending.push_back(id);
            }
        }
    }

    /// The streams with something new to read (data, an end or a reset) since last asked.
    pub fn readable(&mut self) -> Vec<u64> {
        let mut ids = Vec::new();
        self.take_readable(&mut ids);
        ids
    }

    /// As [`Streams::readable`], into `ids` (its old contents dropped, its buffer kept).
    pub fn take_readable(&mut self, ids: &mut Vec<u64>) {
        ids.clear();
        std::mem::swap(ids, &mut self.readable);
        for id in ids.iter() {
            if let Some(s) = self.map.get_mut(*id) {
                s.listed = false;
            }
        }
    }

    /// Reads what stream `id` has in order into `into`; Some(code) as the second value when
    /// the server reset it. True in the first when its end was read (the stream then goes,
    /// once its sending side is done too).
    pub fn read(&mut self, id: u64, into: &mut Vec<u8>) -> (bool, Option<u64>) {
        self.read_with(id, |b| into.extend_from_slice(b))
    }

    /// As [`Streams::read`], handing the bytes in order to `each` (called once, and not
    /// when there are none) rather than copying them.
    pub fn read_with(&mut self, id: u64, each: impl FnOnce(&[u8])) -> (bool, Option<u64>) {
        let Some(s) = self.map.get_mut(id) else { return (false, None) };
        if let Some(code) = s.reset {
            s.ended = true;
            self.forget(id);
            return (false, Some(code));
        }
        if !s.ready.is_empty() {
            each(&s.ready);
        }
        let n = s.ready.len() as u64;
        s.ready.clear();
        s.read += n;
        self.read += n;
        let ended = s.final_size == Some(s.read);
        s.ended = ended;
        // Windows given back once half is used.
        if !ended && s.recv_max - s.read < STREAM_WINDOW / 2 {
            s.recv_max = s.read + STREAM_WINDOW;
            s.window_owed = true;
            if !s.queued {
                s.queued = true;
                self.pending.push_back(id);
            }
        }
        if self.max_data - self.read < CONN_WINDOW / 2 {
            self.max_data = self.read + CONN_WINDOW;
            self.max_data_owed = true;
        }
        self.forget(id);
        (ended, None)
    }

    fn forget(&mut self, id: u64) {
        if self.map.get(id).is_some_and(|s| s.done(id)) {
            self.map.remove(id);
        }
    }

    /// A STREAM frame from the server.
    pub fn on_stream(
        &mut self,
        id: u64,
        offset: u64,
        data: &[u8],
        fin: bool,
    ) -> Result<(), Breach> {
        if !Stream::receives(id) {
            return Err(Breach(STREAM_STATE_ERROR, format!("STREAM on our send-only stream {id}")));
        }
        let Some(s) = self.stream_to_read(id)? else { return Ok(()) };
        let end = offset + data.len() as u64;
        if end > s.recv_max {
            return Err(Breach(FLOW_CONTROL_ERROR, format!("stream {id} past its window")));
        }
        if let Some(size) = s.final_size {
            if end > size || (fin && end != size) {
                return Err(Breach(FINAL_SIZE_ERROR, format!("stream {id} past its end")));
            }
        }
        if fin {
            if end < s.recv {
                return Err(Breach(FINAL_SIZE_ERROR, format!("stream {id} ended below its data")));
            }
            s.final_size = Some(end);
        }
        if s.ended {
            // Stopped by this side: only counted against the windows.
            s.recv = s.recv.max(end);
        } else if offset <= s.recv {
            if end > s.recv {
                s.ready.extend_from_slice(&data[(s.recv - offset) as usize..]);
                s.recv = end;
            }
            while let Some(i) = s.held.iter().position(|(o, _)| *o <= s.recv) {
                let (o, d) = s.held.swap_remove(i);
                let e = o + d.len() as u64;
                if e > s.recv {
                    s.ready.extend_from_slice(&d[(s.recv - o) as usize..]);
                    s.recv = e;
                }
            }
        } else if !data.is_empty() {
            if s.held.len() >= HELD_CHUNKS {
                return Err(Breach(FLOW_CONTROL_ERROR, format!("stream {id}: too many gaps")));
            }
            s.held.push((offset, data.to_vec()));
        }
        // Connection-level: each stream's highest offset counts once.
        let grew = end.saturating_sub(s.counted);
        s.counted += grew;
        let list = (!s.ready.is_empty() || s.final_size == Some(s.recv)) && !s.listed && !s.ended;
        s.listed |= list;
        self.received += grew;
        if self.received > self.max_data {
            return Err(Breach(FLOW_CONTROL_ERROR, "past the connection's window".into()));
        }
        if list {
            self.readable.push(id);
        }
        Ok(())
    }

    /// The stream a frame from the server names, for reading: opened by the server now if it
    /// is a new one of its own, None if it was one of ours already done.
    fn stream_to_read(&mut self, id: u64) -> Result<Option<&mut Stream>, Breach> {
        if self.map.get(id).is_none() {
            if id & 1 == 0 {
                // One of ours: done (forgotten), or never opened.
                let (n, kind) =
                    if id & 2 == 0 { (self.opened_bidi, 0) } else { (self.opened_uni, 2) };
                if id >= n * 4 + kind {
                    return Err(Breach(
                        STREAM_STATE_ERROR,
                        format!("stream {id} was never opened"),
                    ));
                }
                return Ok(None);
            }
            if id & 3 == 1 {
                return Err(Breach(
                    STREAM_LIMIT_ERROR,
                    format!("a bidirectional stream {id} from the server"),
                ));
            }
            // The server's unidirectional streams open in order; a new one opens those below.
            let n = id / 4 + 1;
            if n > PEER_UNI {
                return Err(Breach(
                    STREAM_LIMIT_ERROR,
                    format!("unidirectional stream {id} past the limit"),
                ));
            }
            if n <= self.peer_uni {
                return Ok(None);
            }
            for k in self.peer_uni..n {
                if let Some(s) = self.map.open(k * 4 + 3) {
                    s.recv_max = STREAM_WINDOW;
                }
            }
            self.peer_uni = n;
        }
        Ok(self.map.get_mut(id))
    }

    /// RESET_STREAM from the server: the stream's receiving side ends with `code`.
    pub fn on_reset(&mut self, id: u64, code: u64, final_size: u64) -> Result<(), Breach> {
        let Some(s) = self.stream_to_read(id)? else { return Ok(()) };
        if s.final_size.is_some_and(|f| f != final_size) || final_size < s.recv {
            return Err(Breach(FINAL_SIZE_ERROR, format!("stream {id} reset at another size")));
        }
        s.reset = Some(code);
        if s.ended {
            // Stopped by this side: the reset is the answer to its STOP_SENDING.
            self.forget(id);
            return Ok(());
        }
        if !s.listed {
            s.listed = true;
            self.readable.push(id);
        }
        Ok(())
    }

    /// STOP_SENDING from the server: nothing more is sent on the stream.
    pub fn on_stop(&mut self, id: u64) {
        if let Some(s) = self.map.get_mut(id) {
            s.stopped = true;
            s.lost.clear();
        }
        self.forget(id);
    }

    pub fn on_max_data(&mut self, max: u64) {
        self.peer.max_data = self.peer.max_data.max(max);
    }

    pub fn on_max_stream_data(&mut self, id: u64, max: u64) {
        if let Some(s) = self.map.get_mut(id) {
            s.send_max = s.send_max.max(max);
            let unsent = s.base + s.out.len() as u64 > s.sent || (s.fin && !s.fin_sent);
            if !s.queued && unsent {
                s.queued = true;
                self.pending.push_back(id);
            }
        }
    }

    /// A packet that carried `r` was acknowledged.
    pub fn on_acked(&mut self, r: &Retx) {
        if let Retx::Reset(id) | Retx::Stop(id) = *r {
            if let Some(s) = self.map.get_mut(id) {
                if *r == Retx::Reset(id) {
                    s.reset_acked = true;
                } else {
                    s.stop_owed = None;
                }
            }
            return self.forget(id);
        }
        let Retx::Stream { id, offset, len, fin } = *r else { return };
        let Some(s) = self.map.get_mut(id) else { return };
        s.fin_acked |= fin;
        let end = offset + len;
        if offset > s.base {
            s.acked.push((offset, end));
            return;
        }
        let mut base = s.base.max(end);
        // Ranges acknowledged earlier that now touch the base.
        while let Some(i) = s.acked.iter().position(|&(o, _)| o <= base) {
            base = base.max(s.acked.swap_remove(i).1);
        }
        let drop = (base - s.base) as usize;
        s.out.drain(..drop.min(s.out.len()));
        s.base = base;
        self.forget(id);
    }

    /// A packet that carried `r` was lost: what it carried goes again.
    pub fn on_lost(&mut self, r: &Retx) {
        match *r {
            Retx::Stream { id, offset, len, fin } => {
                let Some(s) = self.map.get_mut(id) else { return };
                if s.reset_owed.is_some() {
                    return;
                }
                let start = offset.max(s.base);
                let end = offset + len;
                if start < end || (fin && !s.fin_acked) {
                    s.lost.push_back((start, end.max(start), fin && !s.fin_acked));
                    if !s.queued {
                        s.queued = true;
                        self.pending.push_back(id);
                    }
                }
            }
            Retx::MaxData => self.max_data_owed = true,
            Retx::MaxStreamData(id) => {
                if let Some(s) = self.map.get_mut(id) {
                    s.window_owed = true;
                    if !s.queued {
                        s.queued = true;
                        self.pending.push_back(id);
                    }
                }
            }
            Retx::Reset(id) => {
                if let Some(s) = self.map.get_mut(id) {
                    s.reset_sent = false;
                    self.queue(id);
                }
            }
            Retx::Stop(id) => {
                if let Some(s) = self.map.get_mut(id) {
                    s.stop_sent = false;
                    self.queue(id);
                }
            }
            Retx::Crypto { .. } | Retx::MtuProbe(_) => {}
        }
    }

    pub fn on_max_streams(&mut self, bidi: bool, max: u64) {
        let limit = if bidi { &mut self.peer.max_bidi } else { &mut self.peer.max_uni };
        *limit = (*limit).max(max);
    }

    /// Writes the frames the streams have to send into `frames`, in at most `room` bytes,
    /// each recorded in `carried` (for loss recovery): windows given back first, then bytes
    /// lost and due again, then new bytes as flow control lets them go, the streams in the
    /// order they had something to send.
    pub fn write_frames(&mut self, frames: &mut Vec<u8>, room: usize, carried: &mut Vec<Retx>) {
        let start = frames.len();
        if self.max_data_owed && room >= 9 {
            frame::put_simple(frames, 0x10, &[self.max_data]);
            self.max_data_owed = false;
            carried.push(Retx::MaxData);
        }
        while let Some(&id) = self.pending.front() {
            // Header: type, id, offset, length (at most 8 each), and a window update.
            if frames.len() - start + 50 >= room {
                break;
            }
            self.pending.pop_front();
            let Some(s) = self.map.get_mut(id) else { continue };
            s.queued = false;
            if s.window_owed && !s.ended {
                frame::put_simple(frames, 0x11, &[id, s.recv_max]);
                s.window_owed = false;
                carried.push(Retx::MaxStreamData(id));
            }
            if let (Some(code), false) = (s.stop_owed, s.stop_sent) {
                frame::put_simple(frames, 0x05, &[id, code]);
                s.stop_sent = true;
                carried.push(Retx::Stop(id));
            }
            if let Some(code) = s.reset_owed {
                if !s.reset_sent {
                    frame::put_simple(frames, 0x04, &[id, code, s.sent]);
                    s.reset_sent = true;
                    carried.push(Retx::Reset(id));
                }
                continue;
            }
            // Bytes lost, sent again (already counted against flow control).
            let mut full = false;
            while let Some((off, end, fin)) = s.lost.pop_front() {
                let left = room.saturating_sub(frames.len() - start + 25) as u64;
                let off = off.max(s.base);
                if left == 0 && (off < end || !fin) {
                    s.lost.push_front((off, end, fin));
                    full = true;
                    break;
                }
                let n = (end.saturating_sub(off)).min(left);
                let fin_now = fin && off + n == end;
                let at = (off - s.base) as usize;
                frame::put_stream(frames, id, off, &s.out[at..at + n as usize], fin_now);
                carried.push(Retx::Stream { id, offset: off, len: n, fin: fin_now });
                if off + n < end || (fin && !fin_now) {
                    s.lost.push_front((off + n, end, fin));
                    full = true;
                    break;
                }
            }
            if full {
                s.queued = true;
                self.pending.push_front(id);
                break;
            }
            let written = s.base + s.out.len() as u64;
            let fin_due = s.fin && !s.fin_sent;
            if s.sent == written && !fin_due {
                continue;
            }
            let left = room.saturating_sub(frames.len() - start + 25) as u64;
            let by_stream = s.send_max.saturating_sub(s.sent);
            let by_conn = self.peer.max_data.saturating_sub(self.sent);
            let n = (written - s.sent).min(by_stream).min(by_conn).min(left);
            let fin = fin_due && s.sent + n == written;
            if n == 0 && !fin {
                // No room left in this packet (what was lost took it): next packet. Held by
                // flow control: queued again when the server's MAX_STREAM_DATA comes, or (the
                // connection's limit) at the next send after its MAX_DATA.
                if left == 0 || (by_conn == 0 && by_stream > 0) {
                    s.queued = true;
                    self.pending.push_front(id);
                    break;
                }
                continue;
            }
            let at = (s.sent - s.base) as usize;
            frame::put_stream(frames, id, s.sent, &s.out[at..at + n as usize], fin);
            carried.push(Retx::Stream { id, offset: s.sent, len: n, fin });
            s.sent += n;
            self.sent += n;
            s.fin_sent |= fin;
            if s.sent < written {
                // More than this packet took: its turn comes again after the others'.
                s.queued = true;
                self.pending.push_back(id);
            }
        }
    }
}

/// The streams by id: for each of the three kinds a client meets (its bidirectional and
/// unidirectional ones, the server's unidirectional ones), a window of slots from the oldest
/// still open. Streams open in order and mostly end in order, so the window stays about as
/// long as the streams in flight, with no hashing and no tree; the byte buffers of streams
/// that ended are kept for the next ones.
#[derive(Debug, Default)]
struct Table {
    kinds: [Slots; 3],
    len: usize,
    spare: Vec<(Vec<u8>, Vec<u8>)>,
}

#[derive(Debug, Default)]
struct Slots {
    /// The sequence number (id / 4) of the first slot.
    base: u64,
    slots: VecDeque<Option<Stream>>,
}

/// Spare buffer pairs kept at most.
const SPARE: usize = 256;

impl Table {
    fn kind(id: u64) -> Option<usize> {
        match id & 3 {
            0 => Some(0),
            2 => Some(1),
            3 => Some(2),
            _ => None,
        }
    }

    fn get(&self, id: u64) -> Option<&Stream> {
        let k = &self.kinds[Table::kind(id)?];
        k.slots.get(usize::try_from((id >> 2).checked_sub(k.base)?).ok()?)?.as_ref()
    }

    fn get_mut(&mut self, id: u64) -> Option<&mut Stream> {
        let k = &mut self.kinds[Table::kind(id)?];
        k.slots.get_mut(usize::try_from((id >> 2).checked_sub(k.base)?).ok()?)?.as_mut()
    }

    /// Opens `id`'s slot (ids past the window's end open the slots before them) with a new
    /// stream's state, its buffers from one that ended if any: the state, to fill in. Made
    /// where it stays (a stream's state is a few hundred bytes: moving it in and out was a
    /// tenth of the own client's instructions per response).
    fn open(&mut self, id: u64) -> Option<&mut Stream> {
        let k = &mut self.kinds[Table::kind(id)?];
        let i = usize::try_from((id >> 2).checked_sub(k.base)?).ok()?;
        while k.slots.len() <= i {
            k.slots.push_back(None);
        }
        let (out, ready) = self.spare.pop().unwrap_or_default();
        let slot = &mut k.slots[i];
        if slot.is_none() {
            self.len += 1;
        }
        *slot = Some(Stream { out, ready, ..Stream::default() });
        slot.as_mut()
    }

    /// Closes `id`'s slot, its buffers kept for the next stream (its state is not moved out).
    fn remove(&mut self, id: u64) {
        let Some(kind) = Table::kind(id) else { return };
        let k = &mut self.kinds[kind];
        let Some(i) = (id >> 2).checked_sub(k.base).and_then(|i| usize::try_from(i).ok()) else {
            return;
        };
        let Some(slot) = k.slots.get_mut(i) else { return };
        let Some(s) = slot.as_mut() else { return };
        if self.spare.len() < SPARE {
            let (mut out, mut ready) = (std::mem::take(&mut s.out), std::mem::take(&mut s.ready));
            out.clear();
            ready.clear();
            self.spare.push((out, ready));
        }
        *slot = None;
        self.len -= 1;
        while matches!(k.slots.front(), Some(None)) {
            k.slots.pop_front();
            k.base += 1;
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    fn streams() -> Streams {
        let mut s = Streams::new();
        let big = 1 << 30;
        s.peer = PeerLimits {
            max_data: big,
            stream_bidi: big,
            stream_uni: big,
            max_bidi: 2,
            max_uni: 1,
            idle_ms: 0,
            max_udp_payload: 0,
        };
        s
    }

    #[test]
    fn bytes_out_of_order_are_read_in_order_and_the_end_once() {
        let mut s = streams();
        let id = s.open(true).unwrap();
        s.on_stream(id, 5, b"world", true).unwrap();
        assert!(s.readable().is_empty(), "nothing in order yet");
        s.on_stream(id, 0, b"hello", false).unwrap();
        assert_eq!(s.readable(), [id]);
        let mut got = Vec::new();
        assert_eq!(s.read(id, &mut got), (true, None));
        assert_eq!(got, b"helloworld");
        // Still open for sending: the stream stays until its FIN goes.
        assert_eq!(s.len(), 1);
        assert!(s.write(id, b"x", true));
        let (mut frames, mut carried) = (Vec::new(), Vec::new());
        s.write_frames(&mut frames, 1200, &mut carried);
        assert_eq!(s.len(), 1, "until its FIN is acknowledged");
        carried.iter().for_each(|r| s.on_acked(r));
        assert!(s.is_empty(), "both sides ended");
    }

    #[test]
    fn the_servers_breaches_are_named_with_their_codes() {
        let mut s = streams();
        let id = s.open(true).unwrap();
        let past = s.on_stream(id, STREAM_WINDOW, b"x", false).unwrap_err();
        assert_eq!(past.0, FLOW_CONTROL_ERROR);
        s.on_stream(id, 0, b"abc", true).unwrap();
        assert_eq!(s.on_stream(id, 3, b"d", false).unwrap_err().0, FINAL_SIZE_ERROR);
        let uni = s.open(false).unwrap();
        assert_eq!(uni, 2);
        assert_eq!(s.on_stream(uni, 0, b"x", false).unwrap_err().0, STREAM_STATE_ERROR);
        assert_eq!(
            s.on_stream(8, 0, b"x", false).unwrap_err().0,
            STREAM_STATE_ERROR,
            "never opened"
        );
        assert_eq!(s.on_stream(1, 0, b"x", false).unwrap_err().0, STREAM_LIMIT_ERROR);
        let far = PEER_UNI * 4 + 3;
        assert_eq!(s.on_stream(far, 0, b"x", false).unwrap_err().0, STREAM_LIMIT_ERROR);
        // Opening a server stream opens those below it; each reads on its own.
        s.on_stream(11, 0, b"third", false).unwrap();
        s.on_stream(3, 0, b"first", false).unwrap();
        assert_eq!(s.readable(), [id, 11, 3]);
    }

    #[test]
    fn the_servers_limits_hold_what_is_sent() {
        let mut s = streams();
        s.peer.max_data = 10;
        s.peer.stream_bidi = 6;
        let (a, b) = (s.open(true).unwrap(), s.open(true).unwrap());
        assert_eq!(s.open(true), None, "two bidirectional streams at most");
        s.on_max_streams(true, 3);
        assert!(s.open(true).is_some());
        s.write(a, b"0123456789", true);
        s.write(b, b"abcdefghij", true);
        let mut frames = Vec::new();
        s.write_frames(&mut frames, 1200, &mut Vec::new());
        let sent: usize = crate::frame::frames(&frames)
            .map(|f| match f.unwrap() {
                crate::frame::Frame::Stream { data, .. } => data.len(),
                _ => 0,
            })
            .sum();
        assert_eq!(sent, 10, "the connection's limit: 6 on the first, 4 on the second");
        s.on_max_data(100);
        s.on_max_stream_data(a, 100);
        s.on_max_stream_data(b, 100);
        let mut more = Vec::new();
        s.write_frames(&mut more, 1200, &mut Vec::new());
        let fins = crate::frame::frames(&more)
            .filter(|f| matches!(f, Ok(crate::frame::Frame::Stream { fin: true, .. })))
            .count();
        assert_eq!(fins, 2, "the rest, each with its end");
    }

    /// Bytes sent again after a loss can fill a packet to within a frame header of its room,
    /// with new bytes of the same stream still to go: whatever the room, the stream keeps its
    /// turn and its last bytes and end go in a later packet (a stream once dropped from the
    /// queue here sent nothing more and its request hung).
    #[test]
    fn a_stream_whose_lost_bytes_fill_a_packet_keeps_its_turn() {
        for room in 60..1300 {
            let mut s = streams();
            let id = s.open(true).unwrap();
            s.write(id, &[b'x'; 5000], true);
            let mut first = Vec::new();
            s.write_frames(&mut Vec::new(), 1200, &mut first);
            first.iter().for_each(|r| s.on_lost(r));
            let mut fin = false;
            for _ in 0..200 {
                let mut frames = Vec::new();
                s.write_frames(&mut frames, room, &mut Vec::new());
                fin |= crate::frame::frames(&frames)
                    .any(|f| matches!(f, Ok(crate::frame::Frame::Stream { fin: true, .. })));
                if fin {
                    break;
                }
            }
            assert!(fin, "room {room}: the stream's end never went");
        }
    }

    /// The frames `write_frames` writes now, read back.
    fn sent(s: &mut Streams, carried: &mut Vec<Retx>) -> Vec<String> {
        let mut frames = Vec::new();
        s.write_frames(&mut frames, 1200, carried);
        crate::frame::frames(&frames).map(|f| format!("{:?}", f.unwrap())).collect()
    }

    #[test]
    fn a_reset_sends_its_final_size_once_acknowledged_and_nothing_after() {
        let mut s = streams();
        let id = s.open(true).unwrap();
        s.write(id, b"hello", false);
        let mut carried = Vec::new();
        assert_eq!(sent(&mut s, &mut carried).len(), 1);
        s.write(id, b" world", false);
        s.reset(id, 0x10c);
        let mut more = Vec::new();
        let frames = sent(&mut s, &mut more);
        assert_eq!(frames, ["ResetStream { id: 0, code: 268, final_size: 5 }"], "no data after");
        assert!(!s.is_open_for_sending(id) && !s.write(id, b"x", false));
        // Its packet lost: the reset goes again; the data lost before it does not.
        carried.iter().for_each(|r| s.on_lost(r));
        more.iter().for_each(|r| s.on_lost(r));
        assert_eq!(sent(&mut s, &mut Vec::new()).len(), 1);
        more.iter().for_each(|r| s.on_acked(r));
        s.on_stream(id, 0, b"", true).unwrap();
        s.read(id, &mut Vec::new());
        assert!(s.is_empty(), "reset acknowledged and the answer read: gone");
    }

    #[test]
    fn a_stopped_stream_asks_once_and_drops_what_comes() {
        let mut s = streams();
        let id = s.open(true).unwrap();
        s.write(id, b"x", true);
        let mut carried = Vec::new();
        sent(&mut s, &mut carried);
        s.stop(id, 0x10c);
        let frames = sent(&mut s, &mut carried);
        assert_eq!(frames, ["StopSending { id: 0, code: 268 }"]);
        s.on_stream(id, 0, b"late bytes", false).unwrap();
        assert!(s.readable().is_empty(), "nothing read after a stop");
        s.on_reset(id, 0x10c, 10).unwrap();
        assert!(s.readable().is_empty());
        carried.iter().for_each(|r| s.on_acked(r));
        assert!(s.is_empty(), "both sides done");
        // A server's streams are handed out once each, in order.
        s.on_stream(7, 0, b"x", false).unwrap();
        assert!(s.has_unaccepted());
        assert_eq!((s.accept_uni(), s.accept_uni(), s.accept_uni()), (Some(3), Some(7), None));
    }

    /// The server resets a stream, then acknowledges the request on it: the reset is still
    /// there to read (the stream went at the acknowledgement once, its reset lost).
    #[test]
    fn a_reset_waits_to_be_read_when_the_request_is_acknowledged_after_it() {
        let mut s = streams();
        let id = s.open(true).unwrap();
        s.write(id, b"GET", true);
        let mut carried = Vec::new();
        sent(&mut s, &mut carried);
        s.on_reset(id, 0x10b, 0).unwrap();
        carried.iter().for_each(|r| s.on_acked(r));
        assert_eq!(s.readable(), [id]);
        assert_eq!(s.read(id, &mut Vec::new()), (false, Some(0x10b)));
        assert!(s.is_empty());
    }

    #[test]
    fn a_reset_is_read_as_one() {
        let mut s = streams();
        let id = s.open(true).unwrap();
        s.on_stream(id, 0, b"par", false).unwrap();
        s.on_reset(id, 0x10c, 3).unwrap();
        let mut got = Vec::new();
        assert_eq!(s.read(id, &mut got), (false, Some(0x10c)));
        assert_eq!(s.on_reset(id, 0x10c, 3), Ok(()), "the same reset again");
        assert_eq!(s.on_reset(id, 0x10c, 2).unwrap_err().0, FINAL_SIZE_ERROR, "at another size");
    }
}
