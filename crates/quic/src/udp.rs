//! UDP sockets as QUIC wants them: datagrams read in batches (recvmmsg, and GRO where the
//! kernel coalesces them), the turn's datagrams of every connection queued and sent together
//! (sendmmsg per socket, each connection's run of equal-sized datagrams as one GSO buffer),
//! and the counts of what each system call carried, for the report. A server worker has one
//! socket per address; a load thread has several (one per connection, up to
//! [`MAX_SOCKETS`]), so that its connections come from several ports, as separate clients
//! do, and a server's `SO_REUSEPORT` sockets (one per worker) share them out. The sockets
//! share one batch each way: only one is read or written at a time.
//!
//! On an io_uring loop the same sockets are read by a multishot recvmsg each into the ring's
//! datagram buffers ([`Udp::arm`], [`Udp::take`]) and the turn's datagrams go as one sendmsg
//! request each ([`Udp::flush_to`]), all in the loop's one system call per turn; the counts
//! then say how many datagrams each turn carried.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Instant;

pub use crate::counts::{count_connection, QuicCounts};
use crate::stack::Link;
use qpslab_sys::udp::{self, Datagram, Outgoing, RecvBatch, SendBatch};
use qpslab_sys::uring::{Completion, Failure, Received, Submit};

/// Datagrams read per recvmmsg.
const RECV_SLOTS: usize = 32;
/// The room for one read: a whole GRO batch.
const SLOT_LEN: usize = 64 * 1024;
/// Datagrams a connection may hand over in one GSO buffer.
const GSO_MAX: usize = 16;
/// The socket buffers asked for: a burst of every connection's window must not be dropped.
const SOCKET_BUFFER: usize = 4 << 20;
/// Sockets a load thread opens at most (its connections beyond share them in turn).
pub const MAX_SOCKETS: usize = 64;

/// UDP sockets with their batches and counts.
#[derive(Debug)]
pub struct Udp {
    socks: Vec<UdpSocket>,
    recv: RecvBatch,
    got: Vec<Datagram>,
    send: SendBatch,
    /// The turn's datagrams, queued, per socket; where each is in `out`.
    out: Vec<u8>,
    queued: Vec<Vec<Outgoing>>,
    /// Each socket's connected peer, if it has one.
    peers: Vec<Option<SocketAddr>>,
    tx: Vec<u8>,
    max_datagrams: usize,
    /// On a ring: datagrams were taken since the last flush.
    took: bool,
    pub counts: QuicCounts,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

impl Udp {
    /// A socket bound to each local address (port 0: one the kernel picks).
    pub fn bind(locals: &[SocketAddr]) -> io::Result<Udp> {
        let socks = locals
            .iter()
            .map(|a| {
                UdpSocket::bind(a)
                    .map_err(|e| io::Error::new(e.kind(), format!("binding {a}: {e}")))
            })
            .collect::<io::Result<_>>()?;
        Udp::from_sockets(socks)
    }

    /// One socket (a server's), made ready as [`Udp::from_sockets`] does.
    pub fn from_socket(sock: UdpSocket) -> io::Result<Udp> {
        Udp::from_sockets(vec![sock])
    }

    /// The sockets made non-blocking, their buffers sized, GRO asked for.
    pub fn from_sockets(socks: Vec<UdpSocket>) -> io::Result<Udp> {
        let mut gro = true;
        let mut gso = true;
        for sock in &socks {
            sock.set_nonblocking(true)?;
            udp::set_buffers(sock, SOCKET_BUFFER);
            udp::set_dont_fragment(sock);
            gro &= udp::enable_gro(sock);
            gso &= udp::gso_supported(sock);
        }
        Ok(Udp {
            queued: socks.iter().map(|_| Vec::new()).collect(),
            peers: socks.iter().map(|_| None).collect(),
            socks,
            recv: RecvBatch::new(RECV_SLOTS, if gro { SLOT_LEN } else { 2048 }),
            got: Vec::new(),
            send: SendBatch::default(),
            out: Vec::with_capacity(64 * 1024),
            tx: Vec::with_capacity(GSO_MAX * 1500),
            max_datagrams: if gso { GSO_MAX } else { 1 },
            took: false,
            counts: QuicCounts::default(),
            bytes_read: 0,
            bytes_written: 0,
        })
    }

    /// How many sockets there are.
    pub fn len(&self) -> usize {
        self.socks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.socks.is_empty()
    }

    /// Socket `i`'s descriptor (for the event loop to wait on).
    pub fn fd(&self, i: usize) -> RawFd {
        self.socks[i].as_raw_fd()
    }

    /// Connects socket `i` to `peer` (the only address its datagrams go to and come from):
    /// its sends then skip the kernel's route lookup.
    pub fn connect(&mut self, i: usize, peer: SocketAddr) -> io::Result<()> {
        self.socks[i].connect(peer)?;
        self.peers[i] = Some(peer);
        Ok(())
    }

    /// Socket `i`'s local address.
    pub fn local_addr(&self, i: usize) -> io::Result<SocketAddr> {
        self.socks[i].local_addr()
    }

    /// Reads one batch from socket `i`; calls `each` with every datagram (GRO batches split);
    /// whether more may wait (the batch was full). A batch less than full left the socket
    /// empty: asking again would cost a system call to learn it.
    pub fn read(&mut self, i: usize, each: &mut dyn FnMut(SocketAddr, &[u8])) -> bool {
        if self.recv.recv(&self.socks[i], &mut self.got).is_err() || self.got.is_empty() {
            return false;
        }
        self.counts.recv_calls += 1;
        for d in &self.got {
            self.bytes_read += d.len as u64;
            let data = self.recv.data(d);
            let mut n = 0;
            for seg in data.chunks(d.segment) {
                each(d.from, seg);
                n += 1;
            }
            self.counts.datagrams_in += n;
            self.counts.gro_reads += u64::from(n > 1);
            self.counts.gro_segments += if n > 1 { n } else { 0 };
        }
        self.got.len() == RECV_SLOTS
    }

    /// Arms a multishot receive on every socket (on a ring made with datagram buffers),
    /// socket `i`'s with the token `tag << 8 | i`: the caller's tag tells its sockets apart
    /// from other users of the ring, [`Udp::socket_of`] gives `i` back.
    pub fn arm(&self, sub: &mut Submit<'_>, tag: u32) {
        for (i, sock) in self.socks.iter().enumerate() {
            sub.recv_datagrams(sock.as_raw_fd(), tag << 8 | i as u32);
        }
    }

    /// The socket a receive's token names, and the caller's tag.
    pub fn socket_of(token: u32) -> (usize, u32) {
        ((token & 0xff) as usize, token >> 8)
    }

    /// A receive's completion on one of these sockets (see [`Udp::arm`]): calls `each` with every datagram (GRO
    /// batches split) and arms the receive again if the kernel ended it (it found no buffer,
    /// or the socket's queue overflowed). An error other than those is returned: the ring
    /// cannot receive here.
    pub fn take(
        &mut self,
        c: &Completion<'_>,
        sub: &mut Submit<'_>,
        each: &mut dyn FnMut(SocketAddr, &[u8]),
    ) -> io::Result<()> {
        let (i, _) = Udp::socket_of(c.token);
        if let Some(Received { from, data, segment, truncated: false }) = c.datagram {
            self.took = true;
            self.bytes_read += data.len() as u64;
            let mut n = 0;
            for seg in data.chunks(segment.max(1)) {
                each(from, seg);
                n += 1;
            }
            self.counts.datagrams_in += n;
            self.counts.gro_reads += u64::from(n > 1);
            self.counts.gro_segments += if n > 1 { n } else { 0 };
        }
        match c.failure() {
            Some(Failure::Cancelled) => return Ok(()),
            Some(Failure::Other(e) | Failure::OutOfResources(e)) => return Err(e),
            None | Some(Failure::NoBuffers | Failure::Retry) => {}
        }
        if !c.more && i < self.socks.len() {
            sub.recv_datagrams(self.socks[i].as_raw_fd(), c.token);
        }
        Ok(())
    }

    /// A send's completion: its datagrams (the token's count, see [`Udp::flush_to`]) went,
    /// or were dropped.
    pub fn sent(&mut self, c: &Completion<'_>) {
        let n = u64::from(c.token & 0xff);
        if c.result >= 0 {
            self.bytes_written += c.result as u64;
            self.counts.datagrams_out += n;
            self.counts.gso_sends += u64::from(n > 1);
        } else {
            self.counts.send_dropped += n;
        }
    }

    /// Sends what the turn queued as one request per datagram (or GSO run), submitted with
    /// the loop's next turn; a turn that read or sent datagrams counts as a call each way.
    /// Each request's token is `tag << 8` and its count of datagrams.
    pub fn flush_to(&mut self, sub: &mut Submit<'_>, tag: u32) {
        self.counts.recv_calls += u64::from(std::mem::take(&mut self.took));
        let mut any = false;
        for i in 0..self.socks.len() {
            let fd = self.socks[i].as_raw_fd();
            for o in &self.queued[i] {
                let to = if self.peers[i] == Some(o.to) { None } else { Some(o.to) };
                let segment = o.segment.filter(|s| *s < o.len);
                let n = segment.map_or(1, |s| o.len.div_ceil(s.max(1))).min(255);
                let seg = segment.and_then(|s| u16::try_from(s).ok());
                let token = tag << 8 | n as u32;
                sub.send_datagram(fd, to, &self.out[o.at..o.at + o.len], seg, token);
                any = true;
            }
            self.queued[i].clear();
        }
        self.counts.send_calls += u64::from(any);
        self.out.clear();
    }

    /// Queues every datagram `conn` has ready for this turn's send, on socket `i`.
    pub fn queue<L: Link>(&mut self, i: usize, conn: &mut L, now: Instant) {
        loop {
            if L::APPENDS {
                let at = self.out.len();
                let Some(t) = conn.transmit(now, self.max_datagrams, &mut self.out) else { break };
                let o = Outgoing { to: t.to, at, len: t.size, segment: t.segment };
                self.queued[i].push(o);
                continue;
            }
            self.tx.clear();
            let Some(t) = conn.transmit(now, self.max_datagrams, &mut self.tx) else { break };
            self.push(i, t.to, t.size, t.segment);
        }
    }

    /// Queues on socket `i` the `len` bytes an endpoint wrote into [`Udp::scratch`] (a
    /// stateless answer).
    pub fn queue_scratch(&mut self, i: usize, to: SocketAddr, len: usize) {
        self.push(i, to, len, None);
    }

    fn push(&mut self, i: usize, to: SocketAddr, len: usize, segment: Option<usize>) {
        let at = self.out.len();
        self.out.extend_from_slice(&self.tx[..len]);
        self.queued[i].push(Outgoing { to, at, len, segment });
    }

    /// The room `Endpoint::handle` writes a stateless answer into.
    pub fn scratch(&mut self) -> &mut Vec<u8> {
        self.tx.clear();
        &mut self.tx
    }

    /// Sends what the turn queued, a sendmmsg per socket that has any; what a socket does not
    /// take is dropped and counted.
    pub fn flush(&mut self) {
        for i in 0..self.socks.len() {
            if self.queued[i].is_empty() {
                continue;
            }
            let queued = &self.queued[i];
            let named = self.peers[i].is_none_or(|p| queued.iter().any(|o| o.to != p));
            let sock = &self.socks[i];
            let (sent, calls) = self.send.send(sock, &self.out, queued, named).unwrap_or((0, 1));
            self.counts.send_calls += calls as u64;
            for o in &queued[..sent] {
                self.bytes_written += o.len as u64;
                let n = o.segment.map_or(1, |s| o.len.div_ceil(s.max(1)));
                self.counts.datagrams_out += n as u64;
                self.counts.gso_sends += u64::from(n > 1);
            }
            for o in &queued[sent..] {
                self.counts.send_dropped +=
                    o.segment.map_or(1, |s| o.len.div_ceil(s.max(1))) as u64;
            }
            self.queued[i].clear();
        }
        self.out.clear();
    }
}
