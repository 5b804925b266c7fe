//! UDP as the fast QUIC stacks drive it: many datagrams per system call each way (recvmmsg,
//! sendmmsg) and the kernel's segmentation offloads: GSO on send (one buffer of equal-sized
//! segments leaves as many datagrams, UDP_SEGMENT) and GRO on receive (datagrams of one flow
//! arrive coalesced in one read, UDP_GRO, with the segment size beside them). What a QUIC
//! library reads and writes stays the caller's; this moves it.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use socket2::SockAddr;

/// Control-message room per datagram: one `int` (GRO's segment size) or one `u16` (GSO's).
const CMSG_ROOM: usize = 64;

/// A datagram (or, with GRO, several of one size coalesced) read by [`RecvBatch::recv`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram {
    pub from: SocketAddr,
    /// Where it is in the batch's buffer, and its length.
    pub at: usize,
    pub len: usize,
    /// The size of each coalesced datagram in it (the last may be shorter); `len` when the
    /// kernel did not coalesce.
    pub segment: usize,
}

/// Turns on GRO for `sock` (Linux 5.0); false where the kernel does not have it.
pub fn enable_gro(sock: &impl AsRawFd) -> bool {
    setsockopt_int(sock, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok()
}

/// Whether `sock` can send with GSO (Linux 4.18): the option reads back.
pub fn gso_supported(sock: &impl AsRawFd) -> bool {
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` live across the call; the kernel writes at most `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    rc == 0
}

/// Sets the don't-fragment bit on every datagram and keeps the kernel's own path MTU guess
/// out of it (`IP_PMTUDISC_PROBE`, and the IPv6 one on a socket that has IPv6): QUIC's
/// datagrams must not be fragmented (RFC 9000 section 14), and its own path MTU discovery
/// needs a datagram too large for the path dropped, not split (a send larger than the
/// interface fails with EMSGSIZE).
pub fn set_dont_fragment(sock: &impl AsRawFd) {
    let _ = setsockopt_int(sock, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_PROBE);
    let v6 = libc::IPV6_PMTUDISC_PROBE;
    let _ = setsockopt_int(sock, libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, v6);
}

/// Sets the socket's receive and send buffers (the kernel doubles what is asked, capped by
/// net.core.rmem_max/wmem_max unless the caller may force it).
pub fn set_buffers(sock: &impl AsRawFd, bytes: usize) {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    for (force, plain) in
        [(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF), (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)]
    {
        if setsockopt_int(sock, libc::SOL_SOCKET, force, v).is_err() {
            let _ = setsockopt_int(sock, libc::SOL_SOCKET, plain, v);
        }
    }
}

fn setsockopt_int(sock: &impl AsRawFd, level: i32, name: i32, v: libc::c_int) -> io::Result<()> {
    // SAFETY: `v` lives across the call; the kernel reads `size_of::<c_int>()` bytes of it.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Buffers for reading up to `slots` datagrams (or GRO batches) per recvmmsg.
pub struct RecvBatch {
    buf: Vec<u8>,
    slot_len: usize,
    names: Vec<libc::sockaddr_storage>,
    iovs: Vec<libc::iovec>,
    ctrl: Vec<u8>,
    msgs: Vec<libc::mmsghdr>,
}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RecvBatch({} slots of {} bytes)", self.msgs.len(), self.slot_len)
    }
}

impl RecvBatch {
    /// `slots` reads of up to `slot_len` bytes each (64 KiB takes a whole GRO batch).
    pub fn new(slots: usize, slot_len: usize) -> RecvBatch {
        let slots = slots.max(1);
        RecvBatch {
            buf: vec![0; slots * slot_len],
            slot_len,
            names: vec![empty_storage(); slots],
            iovs: vec![empty_iovec(); slots],
            ctrl: vec![0; slots * CMSG_ROOM],
            msgs: vec![empty_mmsghdr(); slots],
        }
    }

    /// The bytes of a datagram this batch read.
    pub fn data(&self, d: &Datagram) -> &[u8] {
        &self.buf[d.at..d.at + d.len]
    }

    /// One non-blocking recvmmsg: the datagrams waiting (none when the socket has none), in
    /// `out`, which is cleared first.
    pub fn recv(&mut self, sock: &impl AsRawFd, out: &mut Vec<Datagram>) -> io::Result<()> {
        out.clear();
        let n = self.msgs.len();
        for i in 0..n {
            self.iovs[i] = libc::iovec {
                iov_base: self.buf[i * self.slot_len..].as_mut_ptr().cast(),
                iov_len: self.slot_len,
            };
            let h = &mut self.msgs[i].msg_hdr;
            h.msg_name = (&mut self.names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut self.iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = self.ctrl[i * CMSG_ROOM..].as_mut_ptr().cast();
            h.msg_controllen = CMSG_ROOM;
            h.msg_flags = 0;
            self.msgs[i].msg_len = 0;
        }
        // SAFETY: every header points into buffers of this batch (names, iovecs, data and
        // control space), which outlive the call and are as long as the header says.
        let got = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                self.msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if got < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(()),
                _ => Err(e),
            };
        }
        for i in 0..got as usize {
            let m = &self.msgs[i];
            let len = m.msg_len as usize;
            // SAFETY: the kernel wrote a socket address of `msg_namelen` bytes into names[i].
            let from = unsafe { SockAddr::new(self.names[i], m.msg_hdr.msg_namelen) };
            let Some(from) = from.as_socket() else { continue };
            let segment = gro_segment(&m.msg_hdr).unwrap_or(len).max(1);
            out.push(Datagram { from, at: i * self.slot_len, len, segment });
        }
        Ok(())
    }
}

fn empty_iovec() -> libc::iovec {
    libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }
}

fn empty_mmsghdr() -> libc::mmsghdr {
    // SAFETY: all-zero is a valid mmsghdr (null pointers, zero lengths); it is filled before
    // the kernel sees it.
    unsafe { zeroed() }
}

fn empty_storage() -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage (family AF_UNSPEC).
    unsafe { zeroed() }
}

/// The GRO segment size a read's control messages carry, if any.
fn gro_segment(h: &libc::msghdr) -> Option<usize> {
    // SAFETY: `h` is a header the kernel filled; CMSG_FIRSTHDR/NXTHDR stay within its
    // `msg_controllen` bytes and CMSG_DATA points at a message's payload, which for
    // SOL_UDP/UDP_GRO is a c_int (read unaligned: the buffer is bytes).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return usize::try_from(v).ok();
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}

/// A datagram to send (or, with `segment`, a GSO batch of datagrams of that size): its
/// destination and where its bytes are in the buffer handed to [`send_batch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outgoing {
    pub to: SocketAddr,
    pub at: usize,
    pub len: usize,
    pub segment: Option<usize>,
}

/// Reusable room for [`send_batch`]'s headers.
#[derive(Default)]
pub struct SendBatch {
    names: Vec<SockAddr>,
    iovs: Vec<libc::iovec>,
    ctrl: Vec<u8>,
    msgs: Vec<libc::mmsghdr>,
}

impl std::fmt::Debug for SendBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SendBatch({} slots)", self.msgs.len())
    }
}

impl SendBatch {
    /// Points one header per datagram of `batch` at its bytes in `buf`, its destination and
    /// (GSO) its segment size.
    fn fill(&mut self, buf: &[u8], batch: &[Outgoing], named: bool) {
        let n = batch.len();
        self.names.clear();
        self.names.extend(batch.iter().map(|o| SockAddr::from(o.to)));
        self.iovs.resize(n, empty_iovec());
        self.msgs.resize(n, empty_mmsghdr());
        self.ctrl.clear();
        self.ctrl.resize(n * CMSG_ROOM, 0);
        for (i, o) in batch.iter().enumerate() {
            self.iovs[i] = libc::iovec {
                // The kernel only reads through it (sendmmsg).
                iov_base: buf[o.at..].as_ptr().cast_mut().cast(),
                iov_len: o.len,
            };
            let h = &mut self.msgs[i].msg_hdr;
            if named {
                h.msg_name = self.names[i].as_ptr().cast_mut().cast();
                h.msg_namelen = self.names[i].len();
            } else {
                h.msg_name = std::ptr::null_mut();
                h.msg_namelen = 0;
            }
            h.msg_iov = &mut self.iovs[i];
            h.msg_iovlen = 1;
            h.msg_flags = 0;
            match o.segment {
                Some(seg) if seg < o.len => {
                    h.msg_control = self.ctrl[i * CMSG_ROOM..].as_mut_ptr().cast();
                    // SAFETY: CMSG_SPACE is arithmetic.
                    h.msg_controllen =
                        unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) } as usize;
                    // SAFETY: the control room is CMSG_ROOM bytes, more than CMSG_SPACE(2);
                    // CMSG_FIRSTHDR is non-null for a non-empty control buffer.
                    unsafe {
                        let c = libc::CMSG_FIRSTHDR(h);
                        (*c).cmsg_level = libc::SOL_UDP;
                        (*c).cmsg_type = libc::UDP_SEGMENT;
                        (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
                        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg as u16);
                    }
                }
                _ => {
                    h.msg_control = std::ptr::null_mut();
                    h.msg_controllen = 0;
                }
            }
        }
    }

    /// Sends `batch` (slices of `buf`) with sendmmsg calls until all went or the socket would
    /// block; returns how many went and the system calls made. A datagram the kernel refuses
    /// for itself (an unreachable destination) is skipped, as the network would drop it.
    /// Without `named`, the datagrams go to the socket's connected peer (their `to` unused):
    /// the kernel then keeps its route rather than looking it up for each.
    pub fn send(
        &mut self,
        sock: &impl AsRawFd,
        buf: &[u8],
        batch: &[Outgoing],
        named: bool,
    ) -> io::Result<(usize, usize)> {
        self.fill(buf, batch, named);
        let n = batch.len();
        let (mut sent, mut calls) = (0, 0);
        while sent < n {
            calls += 1;
            // SAFETY: headers sent..n point at this batch's names, iovecs and control room
            // and into `buf`, all alive across the call.
            let rc = unsafe {
                libc::sendmmsg(
                    sock.as_raw_fd(),
                    self.msgs[sent..].as_mut_ptr(),
                    (n - sent) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if rc < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) => break,
                    Some(libc::EINTR) => continue,
                    // This datagram only: the next may go.
                    Some(
                        libc::ECONNREFUSED
                        | libc::EHOSTUNREACH
                        | libc::ENETUNREACH
                        | libc::EMSGSIZE
                        | libc::EIO,
                    ) => {
                        sent += 1;
                        continue;
                    }
                    _ => return Err(e),
                }
            }
            sent += rc as usize;
        }
        Ok((sent, calls))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;
    use std::net::UdpSocket;

    /// Ten datagrams out in one GSO batch and two plain ones, read back in one recvmmsg each
    /// way; with GRO the kernel may hand them back coalesced, by segment size.
    #[test]
    fn batches_go_and_come_back_whole() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let gro = enable_gro(&rx);
        let to = rx.local_addr().unwrap();
        let mut buf = Vec::new();
        for i in 0..10u8 {
            buf.extend(std::iter::repeat_n(i, 1000));
        }
        buf.extend_from_slice(b"hello");
        buf.extend_from_slice(b"world!");
        let gso = gso_supported(&tx);
        let mut batch = vec![Outgoing { to, at: 0, len: 10_000, segment: Some(1000) }];
        if !gso {
            batch =
                (0..10).map(|i| Outgoing { to, at: i * 1000, len: 1000, segment: None }).collect();
        }
        batch.push(Outgoing { to, at: 10_000, len: 5, segment: None });
        batch.push(Outgoing { to, at: 10_005, len: 6, segment: None });
        let (sent, calls) = SendBatch::default().send(&tx, &buf, &batch, true).unwrap();
        assert_eq!((sent, calls), (batch.len(), 1));
        let mut r = RecvBatch::new(16, 65_536);
        let mut got: Vec<Vec<u8>> = Vec::new();
        let mut out = Vec::new();
        for _ in 0..100 {
            r.recv(&rx, &mut out).unwrap();
            for d in &out {
                assert_eq!(d.from, tx.local_addr().unwrap());
                got.extend(r.data(d).chunks(d.segment).map(<[u8]>::to_vec));
            }
            if got.len() >= 12 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(got.len(), 12, "gro {gro}, gso {gso}");
        for (i, d) in got[..10].iter().enumerate() {
            assert_eq!(d, &vec![i as u8; 1000]);
        }
        assert_eq!(got[10], b"hello");
        assert_eq!(got[11], b"world!");
    }
}
