//! A load thread's UDP socket as QUIC wants it: datagrams read in batches (recvmmsg, and GRO
//! where the kernel coalesces them), the turn's datagrams of every connection queued and sent
//! together (sendmmsg, each connection's run of equal-sized datagrams as one GSO buffer), and
//! the counts of what each system call carried, for the report.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::Instant;

use qpslab_sys::udp::{self, Datagram, Outgoing, RecvBatch, SendBatch};
use quinn_proto::Connection;

/// Datagrams read per recvmmsg.
const RECV_SLOTS: usize = 32;
/// The room for one read: a whole GRO batch.
const SLOT_LEN: usize = 64 * 1024;
/// Datagrams a connection may hand over in one GSO buffer.
const GSO_MAX: usize = 16;
/// The socket buffers asked for: a burst of every connection's window must not be dropped.
const SOCKET_BUFFER: usize = 4 << 20;

/// A UDP socket with its batches and counts.
#[derive(Debug)]
pub struct Udp {
    pub sock: UdpSocket,
    recv: RecvBatch,
    got: Vec<Datagram>,
    send: SendBatch,
    /// The turn's datagrams, queued; where each is in `out`.
    out: Vec<u8>,
    queued: Vec<Outgoing>,
    tx: Vec<u8>,
    max_datagrams: usize,
    pub counts: QuicCounts,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

impl Udp {
    /// A socket on the wildcard address of the family of the targets.
    pub fn new(v6: bool) -> io::Result<Udp> {
        let any =
            if v6 { SocketAddr::from(([0u16; 8], 0)) } else { SocketAddr::from(([0, 0, 0, 0], 0)) };
        Udp::from_socket(UdpSocket::bind(any)?)
    }

    /// `sock` made non-blocking, its buffers sized, GRO asked for.
    pub fn from_socket(sock: UdpSocket) -> io::Result<Udp> {
        sock.set_nonblocking(true)?;
        udp::set_buffers(&sock, SOCKET_BUFFER);
        let gro = udp::enable_gro(&sock);
        let gso = udp::gso_supported(&sock);
        Ok(Udp {
            sock,
            recv: RecvBatch::new(RECV_SLOTS, if gro { SLOT_LEN } else { 2048 }),
            got: Vec::new(),
            send: SendBatch::default(),
            out: Vec::with_capacity(64 * 1024),
            queued: Vec::new(),
            tx: Vec::with_capacity(GSO_MAX * 1500),
            max_datagrams: if gso { GSO_MAX } else { 1 },
            counts: QuicCounts::default(),
            bytes_read: 0,
            bytes_written: 0,
        })
    }

    /// Reads one batch; calls `each` with every datagram (GRO batches split); false when the
    /// socket had none.
    pub fn read(&mut self, each: &mut dyn FnMut(SocketAddr, &[u8])) -> bool {
        if self.recv.recv(&self.sock, &mut self.got).is_err() || self.got.is_empty() {
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
        }
        true
    }

    /// Queues every datagram `conn` has ready for this turn's send.
    pub fn queue(&mut self, conn: &mut Connection, now: Instant) {
        loop {
            self.tx.clear();
            let Some(t) = conn.poll_transmit(now, self.max_datagrams, &mut self.tx) else { break };
            self.push(t.destination, t.size, t.segment_size);
        }
    }

    /// Queues the `len` bytes an endpoint wrote into [`Udp::scratch`] (a stateless answer).
    pub fn queue_scratch(&mut self, to: SocketAddr, len: usize) {
        self.push(to, len, None);
    }

    fn push(&mut self, to: SocketAddr, len: usize, segment: Option<usize>) {
        let at = self.out.len();
        self.out.extend_from_slice(&self.tx[..len]);
        self.queued.push(Outgoing { to, at, len, segment });
    }

    /// The room `Endpoint::handle` writes a stateless answer into.
    pub fn scratch(&mut self) -> &mut Vec<u8> {
        self.tx.clear();
        &mut self.tx
    }

    /// Sends what the turn queued; what the socket does not take is dropped and counted.
    pub fn flush(&mut self) {
        if self.queued.is_empty() {
            return;
        }
        let (sent, calls) = self.send.send(&self.sock, &self.out, &self.queued).unwrap_or((0, 1));
        self.counts.send_calls += calls as u64;
        for o in &self.queued[..sent] {
            self.bytes_written += o.len as u64;
            let n = o.segment.map_or(1, |s| o.len.div_ceil(s.max(1)));
            self.counts.datagrams_out += n as u64;
            self.counts.gso_sends += u64::from(n > 1);
        }
        for o in &self.queued[sent..] {
            self.counts.send_dropped += o.segment.map_or(1, |s| o.len.div_ceil(s.max(1))) as u64;
        }
        self.queued.clear();
        self.out.clear();
    }
}

/// What an HTTP/3 run's QUIC connections and UDP sockets did: datagrams per system call each
/// way, the kernel's offloads used, and the transport's own losses and acknowledgements.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QuicCounts {
    /// recvmmsg calls that read something, the datagrams they held (a GRO read's segments
    /// counted one by one), and reads of more than one coalesced datagram.
    pub recv_calls: u64,
    pub datagrams_in: u64,
    pub gro_reads: u64,
    /// sendmmsg calls, the datagrams they sent, and buffers sent with GSO.
    pub send_calls: u64,
    pub datagrams_out: u64,
    pub gso_sends: u64,
    /// Datagrams the socket's send buffer did not take (dropped, as a full path would).
    pub send_dropped: u64,
    /// From each connection's own count: packets and bytes declared lost (and sent again),
    /// congestion events, ACK frames sent and received.
    pub lost_packets: u64,
    pub lost_bytes: u64,
    pub congestion_events: u64,
    pub acks_sent: u64,
    pub acks_received: u64,
}

impl QuicCounts {
    pub fn merge(&mut self, o: &QuicCounts) {
        self.recv_calls += o.recv_calls;
        self.datagrams_in += o.datagrams_in;
        self.gro_reads += o.gro_reads;
        self.send_calls += o.send_calls;
        self.datagrams_out += o.datagrams_out;
        self.gso_sends += o.gso_sends;
        self.send_dropped += o.send_dropped;
        self.lost_packets += o.lost_packets;
        self.lost_bytes += o.lost_bytes;
        self.congestion_events += o.congestion_events;
        self.acks_sent += o.acks_sent;
        self.acks_received += o.acks_received;
    }
}

/// Adds a connection's own counts (losses, congestion events, ACK frames) to `counts`, once,
/// as it is let go.
pub fn count_connection(counts: &mut QuicCounts, conn: &Connection) {
    let s = conn.stats();
    counts.lost_packets += s.path.lost_packets;
    counts.lost_bytes += s.path.lost_bytes;
    counts.congestion_events += s.path.congestion_events;
    counts.acks_sent += s.frame_tx.acks;
    counts.acks_received += s.frame_rx.acks;
}
