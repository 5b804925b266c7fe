//! The kernel's TCP socket tables (`/proc/net/tcp` and `tcp6`) and its unix socket table
//! (`/proc/net/unix`): which sockets listen on an address or a path, and which processes hold
//! them (`/proc/PID/fd` links to `socket:[INODE]`), as `ss -ltnp` and `ss -lxp` show them. Used
//! to name the server behind a URL (or a unix socket) on this host and the owner of a port
//! that is already taken.
//!
//! Unit trap: the tables print each address as the 32-bit words of its network-order bytes, in
//! the printing machine's byte order (`0100007F` is 127.0.0.1 on x86), and the port in host
//! order (`1F90` is 8080).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::root::Root;

/// `st` of an established connection.
pub const ESTABLISHED: u8 = 0x01;
/// `st` of a listening socket.
pub const LISTEN: u8 = 0x0A;
/// `st` of a socket in TIME_WAIT.
pub const TIME_WAIT: u8 = 0x06;
/// How long a socket stays in TIME_WAIT (the kernel's fixed TCP_TIMEWAIT_LEN).
pub const TIME_WAIT_LEN: std::time::Duration = std::time::Duration::from_secs(60);

/// One row of a TCP socket table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSocket {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// The kernel's TCP state number (`LISTEN` = 0x0A).
    pub state: u8,
    pub inode: u64,
    /// The socket's timer (`tr`: 3 for TIME_WAIT's) and what is left of it in clock ticks
    /// (`tm->when`, USER_HZ).
    pub timer: u8,
    pub timer_left: u64,
    /// `rx_queue`: for a listener, the connections waiting in its accept queue.
    pub rx_queue: u64,
    /// `tx_queue`: for a listener, the accept queue's length limit (its backlog).
    pub tx_queue: u64,
}

/// A process holding a socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    /// `/proc/PID/comm`, empty when unreadable.
    pub comm: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.comm.is_empty() {
            write!(f, "pid {}", self.pid)
        } else {
            write!(f, "{} (pid {})", self.comm, self.pid)
        }
    }
}

/// Parses the text of `/proc/net/tcp` or `/proc/net/tcp6`; malformed rows are skipped, and a
/// row seen again is taken once. The kernel writes a large table a read at a time and resumes
/// each read at its place in a hash bucket, counted in rows: sockets opened meanwhile shift the
/// rows, and some come twice (one Python read listed 8,989 rows for 2,000 held connections
/// while others opened and closed; see the test below for 400).
pub fn parse_table(text: &str) -> Vec<TcpSocket> {
    let mut seen = std::collections::HashSet::new();
    text.lines()
        .skip(1)
        .filter_map(parse_row)
        .filter(|s| seen.insert((s.local, s.remote, s.inode)))
        .collect()
}

fn parse_row(line: &str) -> Option<TcpSocket> {
    let f: Vec<&str> = line.split_ascii_whitespace().collect();
    let (timer, left) = f.get(5)?.split_once(':')?;
    let (tx, rx) = f.get(4)?.split_once(':')?;
    Some(TcpSocket {
        tx_queue: u64::from_str_radix(tx, 16).ok()?,
        rx_queue: u64::from_str_radix(rx, 16).ok()?,
        local: parse_addr(f.get(1)?)?,
        remote: parse_addr(f.get(2)?)?,
        state: u8::from_str_radix(f.get(3)?, 16).ok()?,
        inode: f.get(9)?.parse().ok()?,
        timer: u8::from_str_radix(timer, 16).ok()?,
        timer_left: u64::from_str_radix(left, 16).ok()?,
    })
}

/// `0100007F:1F90` or a 32-digit IPv6 form, as the tables print them.
fn parse_addr(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        Some(u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16).ok()?.to_ne_bytes())
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Every TCP socket of the network namespace `root` shows, IPv4 and IPv6.
pub fn tcp_sockets(root: &Root) -> Vec<TcpSocket> {
    ["proc/net/tcp", "proc/net/tcp6"]
        .iter()
        .filter_map(|rel| root.read_opt(rel))
        .flat_map(|text| parse_table(&text))
        .collect()
}

/// Whether a socket listening on `local` takes connections made to `target`: same port, and
/// the same address or a wildcard one (`0.0.0.0` for IPv4 targets; `::`, which also takes IPv4
/// unless the socket is IPv6-only, which the tables do not say).
pub fn accepts(local: SocketAddr, target: SocketAddr) -> bool {
    if local.port() != target.port() {
        return false;
    }
    let mapped = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let (l, t) = (mapped(local.ip()), mapped(target.ip()));
    l == t
        || match local.ip() {
            IpAddr::V4(v4) => v4.is_unspecified() && t.is_ipv4(),
            IpAddr::V6(v6) => v6.is_unspecified(),
        }
}

/// Whether sockets bound to `a` and `b` compete for the same port: one takes connections meant
/// for the other (a wildcard address covers every specific one).
pub fn overlap(a: SocketAddr, b: SocketAddr) -> bool {
    accepts(a, b) || accepts(b, a)
}

/// The processes holding listening sockets that a listener on `addr` would compete with.
pub fn competing_holders(root: &Root, addr: SocketAddr) -> Vec<Holder> {
    let inodes = tcp_sockets(root)
        .into_iter()
        .filter(|s| s.state == LISTEN && overlap(s.local, addr))
        .map(|s| s.inode)
        .collect();
    holders(root, &inodes)
}

/// The listening sockets that take connections made to `target`.
pub fn listeners_for(root: &Root, target: SocketAddr) -> Vec<TcpSocket> {
    tcp_sockets(root)
        .into_iter()
        .filter(|s| s.state == LISTEN && accepts(s.local, target))
        .collect()
}

/// The processes holding any of the sockets `inodes`, by PID (a socket passed to children is
/// held by each of them, as nginx's master and workers hold its listeners).
pub fn holders(root: &Root, inodes: &BTreeSet<u64>) -> Vec<Holder> {
    if inodes.is_empty() {
        return Vec::new();
    }
    root.pids()
        .into_iter()
        .filter(|pid| {
            root.list(&format!("proc/{pid}/fd")).iter().any(|fd| {
                root.read_link(&format!("proc/{pid}/fd/{fd}"))
                    .and_then(|l| socket_inode(&l.to_string_lossy()))
                    .is_some_and(|i| inodes.contains(&i))
            })
        })
        .map(|pid| Holder {
            pid,
            comm: root.read_opt(&format!("proc/{pid}/comm")).unwrap_or_default(),
        })
        .collect()
}

/// Of the processes `pids`, those holding any of the sockets `inodes`: (PID, inode) pairs.
/// Reads only their descriptors.
pub fn holders_among(root: &Root, pids: &[u32], inodes: &BTreeSet<u64>) -> Vec<(u32, u64)> {
    let mut out = Vec::new();
    for &pid in pids {
        for fd in root.list(&format!("proc/{pid}/fd")) {
            let inode = root
                .read_link(&format!("proc/{pid}/fd/{fd}"))
                .and_then(|l| socket_inode(&l.to_string_lossy()));
            if let Some(i) = inode.filter(|i| inodes.contains(i)) {
                if !out.contains(&(pid, i)) {
                    out.push((pid, i));
                }
            }
        }
    }
    out
}

/// The processes listening where `target` connects, e.g. the server behind a URL on this host.
pub fn listener_holders(root: &Root, target: SocketAddr) -> Vec<Holder> {
    let inodes = listeners_for(root, target).iter().map(|s| s.inode).collect();
    holders(root, &inodes)
}

/// Whether `ip` is an address of this host (loopback, or one the kernel lets a socket bind to),
/// so a server there can be seen from here.
pub fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback() || std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// `Flags` of a listening unix socket in `/proc/net/unix` (`__SO_ACCEPTCON`).
const UNIX_ACCEPTCON: u32 = 0x0001_0000;

/// The inodes of the unix sockets listening on `path`, from the text of `/proc/net/unix`
/// (`Num RefCount Protocol Flags Type St Inode Path`). The table shows a path as it was bound;
/// one bound relative to a server's working directory is not matched.
pub fn parse_unix_listeners(text: &str, path: &std::path::Path) -> BTreeSet<u64> {
    let path = path.to_string_lossy();
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_ascii_whitespace().collect();
            let flags = u32::from_str_radix(f.get(3)?, 16).ok()?;
            let listening = flags & UNIX_ACCEPTCON != 0;
            (listening && *f.get(7)? == path).then(|| f.get(6)?.parse().ok())?
        })
        .collect()
}

/// The processes listening on the unix socket `path`, e.g. the server behind `--unix-socket`.
pub fn unix_listener_holders(root: &Root, path: &std::path::Path) -> Vec<Holder> {
    let text = root.read_opt("proc/net/unix").unwrap_or_default();
    let mut inodes = parse_unix_listeners(&text, path);
    if inodes.is_empty() {
        // Bound by another spelling of the same path (`./x.sock`, a symlinked directory).
        if let Ok(real) = std::fs::canonicalize(path) {
            inodes = parse_unix_listeners(&text, &real);
        }
    }
    holders(root, &inodes)
}

/// `socket:[12345]` -> 12345.
pub fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    /// Rows captured from Linux 6.18 on x86_64 (a VM of this project's CI): a listener on
    /// 127.0.0.1:8080, one on 0.0.0.0:22 and an established connection; tcp6 with `::`:80 and
    /// `::1`:8081.
    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 40123 1 0000000000000000 100 0 0 10 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 18344 1 0000000000000000 100 0 0 10 0
   2: 0100007F:1F90 0100007F:D2A4 01 00000000:00000000 00:00000000 00000000     0        0 40999 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:D1B2 0100007F:B687 06 00000000:00000000 03:0000176E 00000000     0        0 0 3 0000000079328004
";
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5150 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:1F91 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5151 1 0000000000000000 100 0 0 10 0
";

    #[test]
    fn addresses_decode_in_host_order() {
        let t = parse_table(TCP);
        assert_eq!(t.len(), 4);
        // TIME_WAIT, 59.98 s (5998 ticks at USER_HZ 100) left.
        assert_eq!((t[3].state, t[3].timer, t[3].timer_left), (TIME_WAIT, 3, 5998));
        assert_eq!(t[3].local.port(), 53682);
        assert_eq!(t[0].local, "127.0.0.1:8080".parse().unwrap());
        assert_eq!((t[0].state, t[0].inode), (LISTEN, 40123));
        assert_eq!(t[2].remote, "127.0.0.1:53924".parse().unwrap());
        let t6 = parse_table(TCP6);
        assert_eq!(t6[0].local, "[::]:80".parse().unwrap());
        assert_eq!(t6[1].local, "[::1]:8081".parse().unwrap());
    }

    #[test]
    fn wildcards_take_connections_to_any_local_address() {
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(accepts(at("127.0.0.1:8080"), at("127.0.0.1:8080")));
        assert!(!accepts(at("127.0.0.1:8080"), at("127.0.0.2:8080")));
        assert!(!accepts(at("127.0.0.1:8080"), at("127.0.0.1:8081")));
        assert!(accepts(at("0.0.0.0:22"), at("10.1.2.3:22")));
        assert!(!accepts(at("0.0.0.0:22"), at("[::1]:22")));
        assert!(accepts(at("[::]:80"), at("127.0.0.1:80")));
        assert!(accepts(at("[::ffff:127.0.0.1]:80"), at("127.0.0.1:80")));
        assert!(overlap(at("127.0.0.1:80"), at("0.0.0.0:80")));
        assert!(overlap(at("127.0.0.1:80"), at("[::]:80")));
        assert!(!overlap(at("127.0.0.1:80"), at("127.0.0.2:80")));
    }

    /// Rows captured from Linux 6.18 (this project's CI VM): a socket listening on
    /// /tmp/cap.sock and a connection to it not accepted yet (inode 0), and an unnamed socket.
    #[test]
    fn unix_listeners_are_found_by_path() {
        const UNIX: &str = "Num       RefCount Protocol Flags    Type St Inode Path
00000000d84e54fb: 00000002 00000000 00010000 0001 01 28457492 /tmp/cap.sock
00000000ff467a7e: 00000003 00000000 00000000 0001 02     0 /tmp/cap.sock
00000000c2778827: 00000003 00000000 00000000 0001 03   666
";
        let found = parse_unix_listeners(UNIX, std::path::Path::new("/tmp/cap.sock"));
        assert_eq!(found.into_iter().collect::<Vec<_>>(), [28457492]);
        assert!(parse_unix_listeners(UNIX, std::path::Path::new("/tmp/other.sock")).is_empty());
    }

    #[test]
    fn holders_found_through_fd_links() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let root = Root::new(dir);
        std::fs::create_dir_all(dir.join("proc/net")).unwrap();
        std::fs::write(dir.join("proc/net/tcp"), TCP).unwrap();
        for (pid, comm, links) in [
            (41, "nginx", vec!["socket:[40123]", "/dev/null"]),
            (42, "nginx", vec!["socket:[40123]"]),
            (77, "sshd", vec!["socket:[18344]"]),
        ] {
            let fd = dir.join(format!("proc/{pid}/fd"));
            std::fs::create_dir_all(&fd).unwrap();
            std::fs::write(dir.join(format!("proc/{pid}/comm")), format!("{comm}\n")).unwrap();
            for (i, l) in links.iter().enumerate() {
                std::os::unix::fs::symlink(l, fd.join(i.to_string())).unwrap();
            }
        }
        let found = listener_holders(&root, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(
            found,
            vec![
                Holder { pid: 41, comm: "nginx".into() },
                Holder { pid: 42, comm: "nginx".into() }
            ]
        );
        assert_eq!(found[0].to_string(), "nginx (pid 41)");
        assert!(listener_holders(&root, "127.0.0.1:9999".parse().unwrap()).is_empty());
    }

    #[test]
    fn local_addresses() {
        assert!(is_local("127.0.0.1".parse().unwrap()));
        assert!(is_local("127.0.0.53".parse().unwrap()));
        assert!(is_local("::1".parse().unwrap()));
        // TEST-NET-3 (RFC 5737) is never assigned to a host.
        assert!(!is_local("203.0.113.9".parse().unwrap()));
    }

    /// 400 connections held while a thread opens and resets others on loopback: every read of
    /// the live table shows each of the 400 at most once (2,091 were listed in one read before
    /// repeated rows were dropped).
    #[test]
    fn a_socket_is_listed_once_while_others_open_and_close() {
        use std::net::{TcpListener, TcpStream};
        use std::sync::atomic::{AtomicBool, Ordering};
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let held: Vec<(TcpStream, TcpStream)> =
            (0..400).map(|_| (TcpStream::connect(addr).unwrap(), l.accept().unwrap().0)).collect();
        let stop = AtomicBool::new(false);
        let most = std::thread::scope(|scope| {
            scope.spawn(|| {
                let other = TcpListener::bind("127.0.0.1:0").unwrap();
                let to = other.local_addr().unwrap();
                let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
                while !stop.load(Ordering::Relaxed) && std::time::Instant::now() < end {
                    let pairs: Vec<_> = (0..50)
                        .map(|_| (TcpStream::connect(to).unwrap(), other.accept().unwrap()))
                        .collect();
                    // Reset, not closed: no TIME_WAIT left behind for a minute.
                    for (c, _) in &pairs {
                        socket2::SockRef::from(c).set_linger(Some(Default::default())).unwrap();
                    }
                    drop(pairs);
                }
            });
            let root = Root::live();
            let most = (0..30)
                .map(|_| {
                    let ours = tcp_sockets(&root).into_iter().filter(|s| s.local == addr);
                    ours.filter(|s| s.state == ESTABLISHED).count()
                })
                .max();
            stop.store(true, Ordering::Relaxed);
            most
        });
        assert_eq!(most, Some(held.len()));
    }

    #[test]
    fn the_live_table_shows_a_listener_of_this_process() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let found = listener_holders(&Root::live(), addr);
        assert!(found.iter().any(|h| h.pid == std::process::id()), "{found:?}");
    }
}
