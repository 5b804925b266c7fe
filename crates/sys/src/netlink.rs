//! The queueing disciplines of this network namespace, from rtnetlink (`RTM_GETQDISC`, what
//! `tc -s qdisc show` prints): each one's counters (bytes, packets, drops, overlimits,
//! requeues, backlog) and, for a token bucket (`tbf`), the rate it shapes to. The doctor reads
//! them as an interface's capacity and its saturation and errors. The dump's bytes are parsed
//! apart from the socket ([`parse_dump`]), so the parser is tested without one.
//!
//! Also the TCP listeners of the namespace, from sock_diag (`SOCK_DIAG_BY_FAMILY` with the
//! listening state only, what `ss -ltn` asks): each one's accept queue and backlog, cheap to
//! read however many connections are established (the socket tables list them all).
//!
//! And the TCP connections (every state but listening and TIME_WAIT), each with what it lost:
//! the segments it retransmitted (`tcp_info`'s `tcpi_total_retrans`) and the packets dropped
//! on their way into it (the socket's `sk_drops`: a full receive buffer or backlog). Read at a
//! run's start and end, they say whether the host's counters of losses were the run's. With
//! them, TCP's account of each: its queues, bytes held unsent, windows, round trip, delayed-ACK
//! timeout and the time it spent limited by the peer's window or its own send buffer.
//!
//! Owns no policy: which qdisc, listener or connection bounds what is the doctor's.

use std::io;

use serde::{Deserialize, Serialize};

/// One qdisc at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Qdisc {
    pub ifindex: i32,
    pub handle: u32,
    pub parent: u32,
    /// `tbf`, `fq_codel`, `noqueue`, `mq`, ...
    pub kind: String,
    pub bytes: u64,
    pub packets: u64,
    /// Packets dropped (a full queue, or the policy's own drops).
    pub drops: u64,
    /// Times the qdisc held a packet back because it was over its limit (a shaper's rate).
    pub overlimits: u64,
    pub requeues: u64,
    /// Bytes and packets queued at this instant.
    pub backlog: u64,
    pub qlen: u64,
    /// The rate a token bucket shapes to, in bytes per second.
    pub rate_bytes_per_s: Option<u64>,
}

impl Qdisc {
    /// The root qdisc of its interface (its parent is TC_H_ROOT).
    pub fn is_root(&self) -> bool {
        self.parent == TC_H_ROOT
    }
}

const TC_H_ROOT: u32 = 0xFFFF_FFFF;
const RTM_NEWQDISC: u16 = 36;
const RTM_GETQDISC: u16 = 38;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_HDRLEN: usize = 16;
const TCMSG_LEN: usize = 20;
const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
const TCA_STATS: u16 = 3;
const TCA_STATS2: u16 = 7;
const TCA_STATS_BASIC: u16 = 1;
const TCA_STATS_QUEUE: u16 = 3;
const TCA_STATS_PKT64: u16 = 8;
const TCA_TBF_PARMS: u16 = 1;
const TCA_TBF_RATE64: u16 = 4;
/// A nested attribute's type carries this flag; the type is the rest.
const NLA_TYPE_MASK: u16 = 0x3FFF;

/// Every qdisc of this network namespace.
pub fn qdiscs() -> io::Result<Vec<Qdisc>> {
    let mut req = [0u8; NLMSG_HDRLEN + TCMSG_LEN];
    header(&mut req, RTM_GETQDISC);
    let mut out = Vec::new();
    dump(libc::NETLINK_ROUTE, &req, |b| parse_dump(b, &mut out))?;
    Ok(out)
}

/// A dump request's netlink header: its length, `kind`, request and dump flags, sequence 1.
fn header(req: &mut [u8], kind: u16) {
    let len = req.len() as u32;
    req[0..4].copy_from_slice(&len.to_ne_bytes());
    req[4..6].copy_from_slice(&kind.to_ne_bytes());
    req[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
}

/// Sends the dump request `req` on a netlink socket of `protocol` and hands each datagram of
/// the answer to `parse` until it says the dump is done.
pub(crate) fn dump(
    protocol: libc::c_int,
    req: &[u8],
    mut parse: impl FnMut(&[u8]) -> io::Result<Dump>,
) -> io::Result<()> {
    // SAFETY: socket(2) with constant arguments; the descriptor is owned at once.
    let fd =
        unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by socket(2) and nothing else owns it.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    // SAFETY: a zeroed sockaddr_nl is the kernel as destination; the pointers and lengths are
    // of live locals.
    let sent = unsafe {
        let mut to: libc::sockaddr_nl = std::mem::zeroed();
        to.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        libc::sendto(
            raw,
            req.as_ptr().cast(),
            req.len(),
            0,
            (&raw const to).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: buf is a live, writable buffer of buf.len() bytes.
        let n = unsafe { libc::recv(raw, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Ok(());
        }
        match parse(&buf[..n as usize])? {
            Dump::More => continue,
            Dump::Done => return Ok(()),
        }
    }
}

/// Walks the messages of one netlink datagram: `body` gets each message's type and payload;
/// the dump's end and errors are handled here.
pub(crate) fn messages(
    mut b: &[u8],
    what: &str,
    mut body: impl FnMut(u16, &[u8]),
) -> io::Result<Dump> {
    let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidData, format!("{what}: {m}"));
    while b.len() >= NLMSG_HDRLEN {
        let len = u32_at(b, 0) as usize;
        let kind = u16_at(b, 4);
        if len < NLMSG_HDRLEN || len > b.len() {
            return Err(bad("a message longer than its datagram"));
        }
        let payload = &b[NLMSG_HDRLEN..len];
        match kind {
            NLMSG_DONE => return Ok(Dump::Done),
            NLMSG_ERROR => {
                let code =
                    if payload.len() >= 4 { i32::from_ne_bytes(arr(payload, 0)) } else { -1 };
                if code != 0 {
                    return Err(io::Error::from_raw_os_error(-code));
                }
            }
            _ => body(kind, payload),
        }
        b = &b[align(len).min(b.len())..];
    }
    Ok(Dump::More)
}

/// A TCP listener at one instant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listener {
    pub local: std::net::SocketAddr,
    /// Connections completed by the kernel, waiting in the accept queue.
    pub queued: u32,
    /// The accept queue's limit (the listen backlog, capped by net.core.somaxconn).
    pub backlog: u32,
    pub inode: u64,
}

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const TCP_LISTEN: u8 = 10;
/// struct inet_diag_req_v2: family, protocol, ext, pad, states, then the socket id.
const DIAG_REQ_LEN: usize = 56;
/// struct inet_diag_msg: family, state, timer, retrans, the socket id (48 bytes), expires,
/// rqueue, wqueue, uid, inode.
const DIAG_MSG_LEN: usize = 72;

/// Every TCP listener of this network namespace, IPv4 and IPv6.
pub fn listeners() -> io::Result<Vec<Listener>> {
    let mut out = Vec::new();
    tcp_dump(1 << TCP_LISTEN, 0, |b| parse_listeners(b, &mut out))?;
    Ok(out)
}

/// A sock_diag dump of the TCP sockets in `states` (a bit per state), IPv4 then IPv6, with the
/// extensions `ext` asks for; `parse` reads each datagram.
fn tcp_dump(
    states: u32,
    ext: u8,
    mut parse: impl FnMut(&[u8]) -> io::Result<Dump>,
) -> io::Result<()> {
    for family in [libc::AF_INET, libc::AF_INET6] {
        let mut req = [0u8; NLMSG_HDRLEN + DIAG_REQ_LEN];
        header(&mut req, SOCK_DIAG_BY_FAMILY);
        let r = &mut req[NLMSG_HDRLEN..];
        r[0] = family as u8;
        r[1] = libc::IPPROTO_TCP as u8;
        r[2] = ext;
        r[4..8].copy_from_slice(&states.to_ne_bytes());
        dump(libc::NETLINK_SOCK_DIAG, &req, &mut parse)?;
    }
    Ok(())
}

/// The TCP sockets of this network namespace in `states` (a bit per TCP state number, as
/// /proc/net/tcp numbers them), IPv4 and IPv6, as the socket table describes them (without
/// timers). A filtered dump skips the states not asked for in the kernel: tens of thousands
/// of TIME_WAIT sockets cost nothing here, where /proc/net/tcp formats each one as text.
pub fn tcp_sockets(states: u32) -> io::Result<Vec<crate::sockets::TcpSocket>> {
    let mut out = Vec::new();
    tcp_dump(states, 0, |b| parse_sockets(b, &mut out))?;
    Ok(out)
}

/// Parses one datagram of a sock_diag dump into socket-table rows.
pub fn parse_sockets(b: &[u8], out: &mut Vec<crate::sockets::TcpSocket>) -> io::Result<Dump> {
    messages(b, "sock_diag", |kind, m| {
        if kind != SOCK_DIAG_BY_FAMILY || m.len() < DIAG_MSG_LEN {
            return;
        }
        let v6 = i32::from(m[0]) == libc::AF_INET6;
        let addr = |at: usize, port_at: usize| {
            let ip: std::net::IpAddr = if v6 {
                std::net::Ipv6Addr::from(arr::<16>(m, at)).into()
            } else {
                std::net::Ipv4Addr::from(arr::<4>(m, at)).into()
            };
            std::net::SocketAddr::new(ip, u16::from_be_bytes(arr(m, port_at)))
        };
        out.push(crate::sockets::TcpSocket {
            local: addr(8, 4),
            remote: addr(24, 6),
            state: m[1],
            inode: u64::from(u32_at(m, 68)),
            timer: m[2],
            timer_left: 0,
            rx_queue: u64::from(u32_at(m, 56)),
            tx_queue: u64::from(u32_at(m, 60)),
        });
    })
}

/// Parses one datagram of a sock_diag dump of listeners into `out`.
pub fn parse_listeners(b: &[u8], out: &mut Vec<Listener>) -> io::Result<Dump> {
    messages(b, "sock_diag", |kind, m| {
        if kind != SOCK_DIAG_BY_FAMILY || m.len() < DIAG_MSG_LEN || m[1] != TCP_LISTEN {
            return;
        }
        // The ports and addresses are in network byte order.
        let port = u16::from_be_bytes(arr(m, 4));
        let ip: std::net::IpAddr = if i32::from(m[0]) == libc::AF_INET6 {
            std::net::Ipv6Addr::from(arr::<16>(m, 8)).into()
        } else {
            std::net::Ipv4Addr::from(arr::<4>(m, 8)).into()
        };
        out.push(Listener {
            local: std::net::SocketAddr::new(ip, port),
            queued: u32_at(m, 56),
            backlog: u32_at(m, 60),
            inode: u64::from(u32_at(m, 68)),
        });
    })
}

/// A TCP connection at one instant: its losses, and TCP's own account of who waits for whom
/// (`tcp_info`, what `ss -ti` prints).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Connection {
    pub local_port: u16,
    pub remote_port: u16,
    /// The kernel's cookie: the same connection in two dumps.
    pub cookie: u64,
    /// Segments retransmitted over its life.
    pub retrans: u32,
    /// Packets dropped on their way into it over its life.
    pub drops: u32,
    /// Bytes received and not read by its process (`Recv-Q`), and bytes in its send queue,
    /// sent and not acknowledged or not sent yet (`Send-Q`).
    pub rqueue: u32,
    pub wqueue: u32,
    /// Segments sent and not acknowledged.
    pub unacked: u32,
    /// Bytes its process wrote that TCP has not sent yet (held by Nagle, the congestion
    /// window or the peer's window).
    pub notsent: u32,
    /// The largest segment it sends, in bytes.
    pub mss: u32,
    /// The congestion window, in segments, and the peer's receive window, in bytes.
    pub cwnd: u32,
    pub snd_wnd: u32,
    /// Smoothed round trip and its variation, and the delayed-ACK timeout, in microseconds.
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub ato_us: u32,
    /// Over its life, in microseconds: time with data in flight, and of that, time limited by
    /// the peer's receive window and by its own send buffer (the kernel's chrono stats).
    pub busy_us: u64,
    pub rwnd_limited_us: u64,
    pub sndbuf_limited_us: u64,
}

/// States of a connection that holds `tcp_info`: all but TCP_TIME_WAIT (6), TCP_CLOSE (7)
/// and TCP_LISTEN (10).
const CONNECTED_STATES: u32 = (1 << 1)
    | (1 << 2)
    | (1 << 3)
    | (1 << 4)
    | (1 << 5)
    | (1 << 8)
    | (1 << 9)
    | (1 << 11)
    | (1 << 12);
/// Extensions asked for: INET_DIAG_INFO (2) and INET_DIAG_SKMEMINFO (7), each as 1 << (n - 1).
const EXT_INFO_MEMINFO: u8 = (1 << 1) | (1 << 6);
const INET_DIAG_INFO: u16 = 2;
const INET_DIAG_SKMEMINFO: u16 = 7;
/// struct tcp_info (include/uapi/linux/tcp.h): the offsets of the fields read.
const TCPI_ATO: usize = 12;
const TCPI_SND_MSS: usize = 16;
const TCPI_UNACKED: usize = 24;
const TCPI_RTT: usize = 68;
const TCPI_RTTVAR: usize = 72;
const TCPI_SND_CWND: usize = 80;
const TCPI_TOTAL_RETRANS: usize = 100;
const TCPI_NOTSENT_BYTES: usize = 144;
const TCPI_BUSY_TIME: usize = 168;
const TCPI_RWND_LIMITED: usize = 176;
const TCPI_SNDBUF_LIMITED: usize = 184;
const TCPI_SND_WND: usize = 228;
/// The sk_meminfo array: SK_MEMINFO_DROPS's index.
const SK_MEMINFO_DROPS: usize = 8;

/// Every TCP connection of this network namespace, IPv4 and IPv6, with its losses.
pub fn connections() -> io::Result<Vec<Connection>> {
    let mut out = Vec::new();
    tcp_dump(CONNECTED_STATES, EXT_INFO_MEMINFO, |b| parse_connections(b, &mut out))?;
    Ok(out)
}

/// Parses one datagram of a sock_diag dump of connections into `out`.
pub fn parse_connections(b: &[u8], out: &mut Vec<Connection>) -> io::Result<Dump> {
    messages(b, "sock_diag", |kind, m| {
        if kind != SOCK_DIAG_BY_FAMILY || m.len() < DIAG_MSG_LEN {
            return;
        }
        let mut c = Connection {
            local_port: u16::from_be_bytes(arr(m, 4)),
            remote_port: u16::from_be_bytes(arr(m, 6)),
            cookie: u64::from(u32_at(m, 44)) | (u64::from(u32_at(m, 48)) << 32),
            rqueue: u32_at(m, 56),
            wqueue: u32_at(m, 60),
            ..Connection::default()
        };
        for (kind, value) in attrs(&m[DIAG_MSG_LEN..]) {
            match kind {
                // A field past what this kernel's tcp_info holds reads as 0.
                INET_DIAG_INFO => {
                    c.retrans = u32_at(value, TCPI_TOTAL_RETRANS);
                    c.ato_us = u32_at(value, TCPI_ATO);
                    c.unacked = u32_at(value, TCPI_UNACKED);
                    c.mss = u32_at(value, TCPI_SND_MSS);
                    c.rtt_us = u32_at(value, TCPI_RTT);
                    c.rttvar_us = u32_at(value, TCPI_RTTVAR);
                    c.cwnd = u32_at(value, TCPI_SND_CWND);
                    c.notsent = u32_at(value, TCPI_NOTSENT_BYTES);
                    c.busy_us = u64_at(value, TCPI_BUSY_TIME);
                    c.rwnd_limited_us = u64_at(value, TCPI_RWND_LIMITED);
                    c.sndbuf_limited_us = u64_at(value, TCPI_SNDBUF_LIMITED);
                    c.snd_wnd = u32_at(value, TCPI_SND_WND);
                }
                INET_DIAG_SKMEMINFO => c.drops = u32_at(value, SK_MEMINFO_DROPS * 4),
                _ => {}
            }
        }
        out.push(c);
    })
}

/// Whether a dump goes on after this datagram.
#[derive(Debug, PartialEq, Eq)]
pub enum Dump {
    More,
    Done,
}

/// Parses one datagram of an `RTM_GETQDISC` dump into `out`.
pub fn parse_dump(b: &[u8], out: &mut Vec<Qdisc>) -> io::Result<Dump> {
    messages(b, "rtnetlink", |kind, body| {
        if kind == RTM_NEWQDISC && body.len() >= TCMSG_LEN {
            out.push(qdisc(body));
        }
    })
}

fn qdisc(body: &[u8]) -> Qdisc {
    let mut q = Qdisc {
        ifindex: i32::from_ne_bytes(arr(body, 4)),
        handle: u32_at(body, 8),
        parent: u32_at(body, 12),
        ..Qdisc::default()
    };
    let mut options = None;
    let mut legacy = None;
    for (kind, value) in attrs(&body[TCMSG_LEN..]) {
        match kind {
            TCA_KIND => {
                q.kind = String::from_utf8_lossy(value.split(|&c| c == 0).next().unwrap_or(&[]))
                    .into_owned();
            }
            TCA_OPTIONS => options = Some(value),
            TCA_STATS => legacy = Some(value),
            TCA_STATS2 => stats2(value, &mut q),
            _ => {}
        }
    }
    // struct tc_stats: u64 bytes, then u32 packets, drops, overlimits, bps, pps, qlen, backlog.
    if let Some(s) = legacy.filter(|s| s.len() >= 36 && q.bytes == 0 && q.packets == 0) {
        q.bytes = u64::from_ne_bytes(arr(s, 0));
        q.packets = u64::from(u32_at(s, 8));
        q.drops = u64::from(u32_at(s, 12));
        q.overlimits = u64::from(u32_at(s, 16));
        q.qlen = u64::from(u32_at(s, 28));
        q.backlog = u64::from(u32_at(s, 32));
    }
    if q.kind == "tbf" {
        q.rate_bytes_per_s = options.and_then(tbf_rate);
    }
    q
}

/// TCA_STATS2's basic (bytes, packets) and queue (qlen, backlog, drops, requeues, overlimits).
fn stats2(value: &[u8], q: &mut Qdisc) {
    for (kind, v) in attrs(value) {
        match kind {
            TCA_STATS_BASIC if v.len() >= 12 => {
                q.bytes = u64::from_ne_bytes(arr(v, 0));
                q.packets = q.packets.max(u64::from(u32_at(v, 8)));
            }
            TCA_STATS_PKT64 if v.len() >= 8 => q.packets = u64::from_ne_bytes(arr(v, 0)),
            TCA_STATS_QUEUE if v.len() >= 20 => {
                q.qlen = u64::from(u32_at(v, 0));
                q.backlog = u64::from(u32_at(v, 4));
                q.drops = u64::from(u32_at(v, 8));
                q.requeues = u64::from(u32_at(v, 12));
                q.overlimits = u64::from(u32_at(v, 16));
            }
            _ => {}
        }
    }
}

/// A token bucket's rate in bytes per second: TCA_TBF_RATE64 when the kernel sent it (rates
/// of 4 GB/s and more), else the 32-bit rate of TCA_TBF_PARMS' struct tc_ratespec (cell_log
/// u8, linklayer u8, overhead u16, cell_align i16, mpu u16, rate u32).
fn tbf_rate(options: &[u8]) -> Option<u64> {
    let mut rate = None;
    for (kind, v) in attrs(options) {
        match kind {
            TCA_TBF_RATE64 if v.len() >= 8 => return Some(u64::from_ne_bytes(arr(v, 0))),
            TCA_TBF_PARMS if v.len() >= 12 => rate = Some(u64::from(u32_at(v, 8))),
            _ => {}
        }
    }
    rate
}

/// The attributes in `b`, as (type, value).
fn attrs(mut b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while b.len() >= 4 {
        let len = usize::from(u16_at(b, 0));
        if len < 4 || len > b.len() {
            break;
        }
        out.push((u16_at(b, 2) & NLA_TYPE_MASK, &b[4..len]));
        b = &b[align(len).min(b.len())..];
    }
    out
}

fn align(len: usize) -> usize {
    (len + 3) & !3
}

fn arr<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    if let Some(s) = b.get(at..at + N) {
        a.copy_from_slice(s);
    }
    a
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(arr(b, at))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(arr(b, at))
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes(arr(b, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(value);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    /// This namespace's listeners, as `ss -ltn` lists them: a listener of this test's is
    /// found with its backlog, and its accept queue grows by the connections nobody accepted.
    #[test]
    fn a_listener_reads_with_its_accept_queue() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let find = || listeners().unwrap().into_iter().find(|x| x.local == addr).unwrap();
        let before = find();
        assert_eq!(before.queued, 0);
        assert!(before.backlog > 0, "{before:?}");
        let held: Vec<_> = (0..3).map(|_| std::net::TcpStream::connect(addr).unwrap()).collect();
        assert_eq!(find().queued, 3);
        drop(held);
    }

    /// The socket table of the states asked for, as /proc/net/tcp has it: a listener with its
    /// inode and both ends of a connection to it with their addresses; a connection in
    /// TIME_WAIT is left out when only the listening and established states are asked for.
    #[test]
    fn the_states_asked_for_read_as_the_socket_table_has_them() {
        use crate::sockets::{ESTABLISHED, LISTEN};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let c = std::net::TcpStream::connect(addr).unwrap();
        let (accepted, _) = l.accept().unwrap();
        let mine = |v: &[crate::sockets::TcpSocket]| -> Vec<crate::sockets::TcpSocket> {
            v.iter().filter(|s| s.local == addr || s.remote == addr).cloned().collect()
        };
        let table = mine(&tcp_sockets(1 << ESTABLISHED | 1 << LISTEN).unwrap());
        let text = mine(&crate::sockets::tcp_sockets(&crate::root::Root::live()));
        assert_eq!(table.len(), 3, "{table:?}");
        for s in &table {
            let row = text.iter().find(|t| t.local == s.local && t.remote == s.remote).unwrap();
            assert_eq!((s.state, s.inode), (row.state, row.inode), "{s:?} {row:?}");
        }
        assert!(table.iter().any(|s| s.state == LISTEN && s.local == addr));
        assert!(table.iter().any(|s| s.remote == addr && s.local == c.local_addr().unwrap()));
        // The accepted end closes first: it stays in TIME_WAIT, not asked for.
        drop(accepted);
        drop(c);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let after = mine(&tcp_sockets(1 << ESTABLISHED | 1 << LISTEN).unwrap());
        assert_eq!(after.len(), 1, "the listener only: {after:?}");
    }

    /// This namespace's connections, as `ss -tni` lists them: both ends of a connection of
    /// this test's, by their ports, with nothing lost on loopback; the same cookie read twice.
    #[test]
    fn a_connection_reads_with_its_losses() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (_s, _) = l.accept().unwrap();
        let mine = |all: Vec<Connection>| -> Vec<Connection> {
            all.into_iter().filter(|x| x.local_port == port || x.remote_port == port).collect()
        };
        let first = mine(connections().unwrap());
        assert_eq!(first.len(), 2, "{first:?}");
        let client = c.local_addr().unwrap().port();
        assert!(first.iter().any(|x| x.local_port == client && x.remote_port == port));
        assert!(first.iter().all(|x| x.retrans == 0 && x.drops == 0), "{first:?}");
        let again = mine(connections().unwrap());
        let cookies = |v: &[Connection]| {
            let mut k: Vec<u64> = v.iter().map(|x| x.cookie).collect();
            k.sort_unstable();
            k
        };
        assert_eq!(cookies(&first), cookies(&again));
        assert!(first[0].cookie != first[1].cookie);
    }

    /// TCP's account, as `ss -ti` shows it: bytes the server wrote and the client has not
    /// read wait in the client's receive queue; the round trip, the congestion window and the
    /// delayed-ACK timeout are the kernel's own.
    #[test]
    fn a_connection_reads_with_tcps_account() {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (mut s, _) = l.accept().unwrap();
        s.write_all(&[7u8; 1000]).unwrap();
        let client = c.local_addr().unwrap().port();
        let started = std::time::Instant::now();
        let read = loop {
            let all = connections().unwrap();
            let mine = all.into_iter().find(|x| x.local_port == client && x.remote_port == port);
            match mine {
                Some(x) if x.rqueue == 1000 => break x,
                _ if started.elapsed() > std::time::Duration::from_secs(2) => panic!("{mine:?}"),
                _ => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        };
        assert!(read.rtt_us > 0 && read.cwnd >= 10 && read.ato_us > 0, "{read:?}");
        assert!(read.mss >= 536, "{read:?}");
        assert_eq!((read.wqueue, read.notsent, read.unacked), (0, 0, 0), "{read:?}");
        drop(c);
    }

    /// A connection's message as the kernel lays it out, with 3 segments retransmitted and 5
    /// packets dropped.
    #[test]
    fn a_connections_losses_are_read_where_the_kernel_puts_them() {
        let mut m = vec![0u8; DIAG_MSG_LEN];
        m[0] = libc::AF_INET as u8;
        m[1] = 1;
        m[4..6].copy_from_slice(&8080u16.to_be_bytes());
        m[6..8].copy_from_slice(&40000u16.to_be_bytes());
        m[44..48].copy_from_slice(&7u32.to_ne_bytes());
        let mut info = vec![0u8; 232];
        info[TCPI_TOTAL_RETRANS..TCPI_TOTAL_RETRANS + 4].copy_from_slice(&3u32.to_ne_bytes());
        m.extend(attr(INET_DIAG_INFO, &info));
        let meminfo: Vec<u8> =
            (0..9u32).flat_map(|i| if i == 8 { 5u32 } else { 0 }.to_ne_bytes()).collect();
        m.extend(attr(INET_DIAG_SKMEMINFO, &meminfo));
        let mut b = Vec::new();
        b.extend_from_slice(&((NLMSG_HDRLEN + m.len()) as u32).to_ne_bytes());
        b.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        b.extend_from_slice(&[0u8; 10]);
        b.extend(m);
        let mut out = Vec::new();
        assert_eq!(parse_connections(&b, &mut out).unwrap(), Dump::More);
        assert_eq!(
            out,
            [Connection {
                local_port: 8080,
                remote_port: 40000,
                cookie: 7,
                retrans: 3,
                drops: 5,
                ..Connection::default()
            }]
        );
    }

    /// A tbf qdisc at 1.25 MB/s (10 Mbit) on ifindex 7, with its queue counters, the way the
    /// kernel lays out the message; then the dump's end.
    #[test]
    fn a_token_bucket_reads_with_its_rate_and_counters() {
        let mut tcmsg = vec![0u8; TCMSG_LEN];
        tcmsg[4..8].copy_from_slice(&7i32.to_ne_bytes());
        tcmsg[8..12].copy_from_slice(&0x8001_0000u32.to_ne_bytes());
        tcmsg[12..16].copy_from_slice(&TC_H_ROOT.to_ne_bytes());
        let mut parms = vec![0u8; 36];
        parms[8..12].copy_from_slice(&1_250_000u32.to_ne_bytes());
        let mut basic = 5_000_000u64.to_ne_bytes().to_vec();
        basic.extend_from_slice(&4000u32.to_ne_bytes());
        basic.extend_from_slice(&[0; 4]);
        let queue: Vec<u8> =
            [2u32, 3000, 17, 1, 900].iter().flat_map(|x| x.to_ne_bytes()).collect();
        let mut body = tcmsg;
        body.extend(attr(TCA_KIND, b"tbf\0"));
        body.extend(attr(TCA_OPTIONS | 0x8000, &attr(TCA_TBF_PARMS, &parms)));
        let mut s2 = attr(TCA_STATS_BASIC, &basic);
        s2.extend(attr(TCA_STATS_QUEUE, &queue));
        body.extend(attr(TCA_STATS2 | 0x8000, &s2));
        let mut msg = Vec::new();
        msg.extend_from_slice(&((NLMSG_HDRLEN + body.len()) as u32).to_ne_bytes());
        msg.extend_from_slice(&RTM_NEWQDISC.to_ne_bytes());
        msg.extend_from_slice(&[0; 10]);
        msg.extend(body);
        let mut done = vec![0u8; 20];
        done[0..4].copy_from_slice(&20u32.to_ne_bytes());
        done[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
        msg.extend(done);
        let mut out = Vec::new();
        assert_eq!(parse_dump(&msg, &mut out).unwrap(), Dump::Done);
        assert_eq!(
            out,
            vec![Qdisc {
                ifindex: 7,
                handle: 0x8001_0000,
                parent: TC_H_ROOT,
                kind: "tbf".into(),
                bytes: 5_000_000,
                packets: 4000,
                drops: 17,
                overlimits: 900,
                requeues: 1,
                backlog: 3000,
                qlen: 2,
                rate_bytes_per_s: Some(1_250_000),
            }]
        );
        assert!(out[0].is_root());
        // A truncated datagram is an error, not a panic.
        assert!(parse_dump(&msg[..30], &mut Vec::new()).is_err());
    }

    /// This namespace's qdiscs, live: lo has one (noqueue at least) on every kernel here.
    #[test]
    fn this_namespace_dumps() {
        let q = qdiscs().unwrap();
        assert!(!q.is_empty(), "{q:?}");
        assert!(q.iter().all(|x| !x.kind.is_empty()), "{q:?}");
    }
}
