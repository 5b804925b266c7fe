//! Socket calls that `std` and `socket2` do not cover: accepting without the address (and
//! non-blocking, close-on-exec, in one call), binding an address whose port `connect()` picks,
//! and telling apart the errors the accept and connect paths act on.

use std::io;
use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd, FromRawFd};

/// Reads what `sock` has into `buf` (0 at EOF): recv(2) as a direct system call. The C
/// library's `recv` wraps every call in thread-cancellation bookkeeping, about 60 user-space
/// instructions per request on the server's epoll loop.
pub fn recv(sock: &impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    match rustix::net::recv(sock, buf, rustix::net::RecvFlags::empty()) {
        Ok((n, _)) => Ok(n),
        Err(e) => Err(e.into()),
    }
}

/// Writes what `sock` takes of `buf`, without SIGPIPE: send(2) as a direct system call (see
/// [`recv`]).
pub fn send(sock: &impl AsFd, buf: &[u8]) -> io::Result<usize> {
    Ok(rustix::net::send(sock, buf, rustix::net::SendFlags::NOSIGNAL)?)
}

/// What an accept error means for the accept loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptError {
    /// No connection is waiting.
    Empty,
    /// The connection went away before it was taken, or a signal interrupted: take the next.
    Retry,
    /// Out of descriptors or memory: pause accepting for a while.
    OutOfResources,
    Other,
}

/// A socket as `Read` and `Write` through [`recv`] and [`send`]: what a TLS library moves its
/// records through.
#[derive(Debug)]
pub struct SockIo<'a, S: AsFd>(pub &'a S);

impl<S: AsFd> io::Read for SockIo<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        recv(self.0, buf)
    }
}

impl<S: AsFd> io::Write for SockIo<'_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        send(self.0, buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Takes a waiting connection from `listener`, non-blocking and close-on-exec.
pub fn accept(listener: &impl AsRawFd) -> Result<TcpStream, (AcceptError, io::Error)> {
    // SAFETY: accept4 with null address pointers only returns a descriptor.
    let fd = unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        let kind = match e.raw_os_error() {
            Some(libc::EAGAIN) => AcceptError::Empty,
            Some(libc::EINTR | libc::ECONNABORTED | libc::EPROTO) => AcceptError::Retry,
            Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
                AcceptError::OutOfResources
            }
            _ => AcceptError::Other,
        };
        return Err((kind, e));
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    Ok(unsafe { TcpStream::from_raw_fd(fd) })
}

/// Lets `connect()` choose the port of a socket bound to an address (IP_BIND_ADDRESS_NO_PORT):
/// the port is then picked per destination, so one source address serves the whole ephemeral
/// range to every destination.
pub fn bind_address_no_port(sock: &impl AsRawFd) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: a valid socket, option and int-sized value.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            std::ptr::addr_of!(one).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The smallest round trip the kernel has seen on a TCP connection (`tcpi_min_rtt` of
/// TCP_INFO, in µs), its handshake included: the path's own round trip, without a peer's
/// delayed acknowledgements or time spent answering (which the smoothed RTT takes in). None
/// for a socket that is not TCP or has no sample yet.
pub fn min_rtt_us(sock: &impl AsRawFd) -> Option<u32> {
    // SAFETY: tcp_info is plain integers; all zeroes is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: a valid descriptor; the kernel writes at most `len` bytes into `info`.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            std::ptr::addr_of_mut!(info).cast(),
            &mut len,
        )
    };
    // Kernels before 4.6 return a shorter struct without tcpi_min_rtt.
    let end = std::mem::offset_of!(libc::tcp_info, tcpi_min_rtt) + 4;
    let known = rc == 0 && len as usize >= end;
    // The kernel's "no sample" is ~0U.
    (known && info.tcpi_min_rtt != 0 && info.tcpi_min_rtt != u32::MAX).then_some(info.tcpi_min_rtt)
}

/// A non-blocking `connect()` that has started and will finish later.
pub fn connect_in_progress(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINPROGRESS)
}

/// An I/O error the way reports show it: `connection reset by peer`, without the
/// `(os error 104)` suffix and with a lower-case first letter.
pub fn message(e: &io::Error) -> String {
    let text = e.to_string();
    let text = match text.find(" (os error") {
        Some(i) => &text[..i],
        None => &text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => text.to_string(),
    }
}

/// Makes room for a unix socket to listen on at `path`: a socket file left by a server that
/// is gone (nothing accepts on it) is removed, as nginx's restarts need; a socket a server
/// still listens on, or a file that is not a socket, is refused with why.
pub fn clear_stale_unix_socket(path: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else { return Ok(()) };
    if !meta.file_type().is_socket() {
        return Err("exists and is not a socket; pick another path".into());
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err("a server already listens on this socket; stop it or pick another path".into());
    }
    std::fs::remove_file(path).map_err(|e| format!("cannot replace it: {e}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn accept_takes_a_waiting_connection_non_blocking() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        assert_eq!(accept(&listener).unwrap_err().0, AcceptError::Empty);
        let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let taken = accept(&listener).unwrap();
        let mut buf = [0u8; 1];
        let e = std::io::Read::read(&mut &taken, &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "non-blocking");
    }

    #[test]
    fn a_connections_min_rtt_is_its_round_trip_on_loopback() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let rtt = min_rtt_us(&client).expect("the handshake is a sample");
        assert!((1..10_000).contains(&rtt), "loopback round trip {rtt} us");
        // Not TCP: no figure.
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(min_rtt_us(&a), None);
    }

    #[test]
    fn messages_read_like_the_reports() {
        let e = io::Error::from_raw_os_error(libc::ECONNRESET);
        assert_eq!(message(&e), "connection reset by peer");
        assert!(connect_in_progress(&io::Error::from_raw_os_error(libc::EINPROGRESS)));
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        bind_address_no_port(&sock).unwrap();
    }
}
