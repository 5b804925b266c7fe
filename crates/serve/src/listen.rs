//! Listening sockets for the three accept modes, the guard against sharing a port by accident,
//! unix domain sockets (one socket that every worker accepts from: the kernel has no
//! SO_REUSEPORT for them), and the backlog check against `net.core.somaxconn`.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use qpslab_sys::root::Root;
use qpslab_sys::sockets::{self, Holder};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::config::{AcceptMode, ServeConfig};

/// Why the listeners could not be bound.
#[derive(Debug)]
pub(crate) enum BindError {
    /// `--h3`: the UDP port beside a TCP listener could not be bound.
    Udp {
        addr: SocketAddr,
        source: io::Error,
    },
    /// Another socket listens there already (the processes holding it, where visible).
    InUse {
        addr: SocketAddr,
        holders: Vec<Holder>,
    },
    Os {
        addr: SocketAddr,
        source: io::Error,
    },
    /// A unix socket path that cannot be listened on (a server listens there already, or it
    /// is not a socket, or the directory refuses it).
    Unix {
        path: PathBuf,
        why: String,
    },
}

/// The listeners of a server: one set per worker (reuseport) or one set shared by all.
#[derive(Debug)]
pub(crate) enum Listeners {
    PerWorker(Vec<Vec<Socket>>),
    Shared(Vec<Socket>),
}

impl Listeners {
    /// Listeners worker `i` polls.
    pub(crate) fn of_worker(&self, i: usize) -> &[Socket] {
        match self {
            Listeners::PerWorker(v) => &v[i],
            Listeners::Shared(v) => v,
        }
    }
}

fn listener(addr: SocketAddr, reuseport: bool, backlog: u32) -> io::Result<Socket> {
    let sock = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )?;
    sock.set_reuse_address(true)?;
    if reuseport {
        sock.set_reuse_port(true)?;
    }
    // Accepted connections inherit TCP_NODELAY: a response leaves at once, without a
    // setsockopt per connection (and direct descriptors of an io_uring worker have no
    // descriptor to call it on).
    sock.set_nodelay(true)?;
    sock.bind(&SockAddr::from(addr))?;
    sock.listen(backlog.min(i32::MAX as u32) as i32)?;
    Ok(sock)
}

/// `--h3`: per worker, a UDP socket on each TCP address bound (the same port), all with
/// SO_REUSEPORT so the kernel keeps each client's datagrams on one worker's endpoint.
pub(crate) fn bind_udp(
    addrs: &[SocketAddr],
    workers: usize,
) -> Result<Vec<Vec<std::net::UdpSocket>>, BindError> {
    (0..workers)
        .map(|_| {
            addrs
                .iter()
                .map(|&addr| {
                    let udp = |addr: SocketAddr| -> io::Result<std::net::UdpSocket> {
                        let sock = Socket::new(
                            Domain::for_address(addr),
                            Type::DGRAM.nonblocking().cloexec(),
                            Some(Protocol::UDP),
                        )?;
                        if addr.is_ipv6() {
                            sock.set_only_v6(true)?;
                        }
                        sock.set_reuse_port(true)?;
                        sock.bind(&SockAddr::from(addr))?;
                        Ok(sock.into())
                    };
                    udp(addr).map_err(|source| BindError::Udp { addr, source })
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .collect()
}

/// A listening unix domain socket at `path`. A socket file left by a server that is gone
/// (nothing accepts on it) is replaced, as nginx's restarts need; one a server still listens
/// on, or a file that is not a socket, is refused.
fn unix_listener(path: &Path, backlog: u32) -> Result<Socket, BindError> {
    let refuse = |why: String| BindError::Unix { path: path.to_path_buf(), why };
    let addr = SockAddr::unix(path).map_err(|e| refuse(e.to_string()))?;
    qpslab_sys::net::clear_stale_unix_socket(path).map_err(refuse)?;
    let sock = Socket::new(Domain::UNIX, Type::STREAM.nonblocking().cloexec(), None)
        .map_err(|e| refuse(e.to_string()))?;
    sock.bind(&addr).map_err(|e| refuse(qpslab_sys::net::message(&e)))?;
    sock.listen(backlog.min(i32::MAX as u32) as i32).map_err(|e| refuse(e.to_string()))?;
    Ok(sock)
}

/// Whether a socket already listens where `addr` would: a bind without SO_REUSEPORT fails
/// then (SO_REUSEADDR lets it pass a port held only by TIME_WAIT connections).
fn taken(addr: SocketAddr) -> bool {
    let probe = || -> io::Result<()> {
        let sock = Socket::new(Domain::for_address(addr), Type::STREAM.cloexec(), None)?;
        sock.set_reuse_address(true)?;
        sock.bind(&SockAddr::from(addr))
    };
    probe().is_err_and(|e| e.kind() == io::ErrorKind::AddrInUse)
}

fn os_error(addr: SocketAddr, source: io::Error) -> BindError {
    if source.kind() == io::ErrorKind::AddrInUse {
        BindError::InUse { addr, holders: sockets::competing_holders(&Root::live(), addr) }
    } else {
        BindError::Os { addr, source }
    }
}

/// The listeners, their bound addresses (port 0 resolved: all workers' reuseport sockets share
/// the port the first one got), and the processes already listening on a shared port.
pub(crate) struct Bound {
    pub listeners: Listeners,
    pub addrs: Vec<SocketAddr>,
    pub shared_with: Vec<Holder>,
}

/// Binds every address. A port another socket listens on is refused unless `share_port`: with
/// SO_REUSEPORT the kernel would otherwise let a second server in silently, and the two would
/// split the connections.
pub(crate) fn bind(cfg: &ServeConfig) -> Result<Bound, BindError> {
    let mut bound = Vec::with_capacity(cfg.listen.len());
    let mut first = Vec::with_capacity(cfg.listen.len());
    let mut shared_with = Vec::new();
    let reuseport = cfg.accept == AcceptMode::Reuseport;
    for &addr in &cfg.listen {
        if reuseport && addr.port() != 0 && taken(addr) {
            let holders = sockets::competing_holders(&Root::live(), addr);
            if !cfg.share_port {
                return Err(BindError::InUse { addr, holders });
            }
            shared_with.extend(holders);
        }
        let sock = listener(addr, reuseport, cfg.backlog).map_err(|e| os_error(addr, e))?;
        let local = sock.local_addr().ok().and_then(|a| a.as_socket()).unwrap_or(addr);
        bound.push(local);
        first.push(sock);
    }
    shared_with.sort_by_key(|h| h.pid);
    shared_with.dedup();
    let mut unix = Vec::with_capacity(cfg.unix.len());
    for path in &cfg.unix {
        match unix_listener(path, cfg.backlog) {
            Ok(sock) => unix.push(sock),
            Err(e) => {
                // The ones bound before it go with it.
                cfg.unix.iter().take(unix.len()).for_each(|p| drop(std::fs::remove_file(p)));
                return Err(e);
            }
        }
    }
    let unix_err = |path: &Path, e: io::Error| BindError::Unix {
        path: path.to_path_buf(),
        why: e.to_string(),
    };
    if !reuseport {
        first.extend(unix);
        return Ok(Bound { listeners: Listeners::Shared(first), addrs: bound, shared_with });
    }
    let mut per_worker = Vec::with_capacity(cfg.workers);
    for w in 0..cfg.workers {
        let mut set = if w == 0 {
            std::mem::take(&mut first)
        } else {
            bound
                .iter()
                .map(|&a| listener(a, true, cfg.backlog).map_err(|e| os_error(a, e)))
                .collect::<Result<Vec<_>, _>>()?
        };
        // A unix socket has no SO_REUSEPORT: every worker accepts from the same one.
        for (sock, path) in unix.iter().zip(&cfg.unix) {
            set.push(sock.try_clone().map_err(|e| unix_err(path, e))?);
        }
        per_worker.push(set);
    }
    Ok(Bound { listeners: Listeners::PerWorker(per_worker), addrs: bound, shared_with })
}

/// A warning when `net.core.somaxconn` (under `root`) caps the requested backlog.
pub fn backlog_warning(root: &Root, backlog: u32) -> Option<String> {
    let cap: u32 = root.read_opt("proc/sys/net/core/somaxconn")?.parse().ok()?;
    (backlog > cap).then(|| {
        format!(
            "--backlog {backlog} is capped by net.core.somaxconn = {cap}: the kernel uses {cap}, \
             {} less; raise it with 'sysctl -w net.core.somaxconn={backlog}'",
            backlog - cap
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_connections_inherit_nodelay_from_the_listener() {
        let l = listener("127.0.0.1:0".parse().unwrap(), false, 16).unwrap();
        let addr = l.local_addr().unwrap().as_socket().unwrap();
        let _client = std::net::TcpStream::connect(addr).unwrap();
        l.set_nonblocking(false).unwrap();
        let (conn, _) = l.accept().unwrap();
        assert!(conn.nodelay().unwrap(), "TCP_NODELAY is inherited from the listener");
    }

    #[test]
    fn somaxconn_cap_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("proc/sys/net/core");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("somaxconn"), "4096\n").unwrap();
        let root = Root::new(dir.path());
        let w = backlog_warning(&root, 65535).unwrap();
        assert!(w.contains("capped by net.core.somaxconn = 4096"), "{w}");
        assert!(w.contains("61439 less"), "{w}");
        assert_eq!(backlog_warning(&root, 4096), None);
        assert_eq!(backlog_warning(&Root::new("/nonexistent"), 65535), None);
    }
}
