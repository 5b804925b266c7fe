//! What an HTTP/3 run's QUIC connections and UDP sockets did, counted by the sockets
//! ([`crate::udp`]) and by each connection ([`crate::stack::Link::count`]).

use quinn_proto::Connection;

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
    /// A server's Retry packets: new clients asked to prove their address first.
    #[serde(default)]
    pub retries: u64,
    /// The datagrams that came in GRO reads (of several).
    #[serde(default)]
    pub gro_segments: u64,
    /// A client's CPU time spent on its handshakes (starting them, and reading and answering
    /// the server's handshake packets), in nanoseconds.
    #[serde(default)]
    pub handshake_cpu_ns: u64,
    /// The largest datagram size a connection used (what path MTU discovery found; the
    /// largest over the connections).
    #[serde(default)]
    pub datagram_size: u64,
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
        self.retries += o.retries;
        self.gro_segments += o.gro_segments;
        self.handshake_cpu_ns += o.handshake_cpu_ns;
        self.datagram_size = self.datagram_size.max(o.datagram_size);
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
    counts.datagram_size = counts.datagram_size.max(u64::from(s.path.current_mtu));
}
