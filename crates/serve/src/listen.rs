//! Listening sockets for the three accept modes, and the backlog check against
//! `net.core.somaxconn`.

use std::io;
use std::net::SocketAddr;
use std::path::Path;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::config::{AcceptMode, ServeConfig};

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
    sock.bind(&SockAddr::from(addr))?;
    sock.listen(backlog.min(i32::MAX as u32) as i32)?;
    Ok(sock)
}

/// Binds every address; returns the listeners and the bound addresses (port 0 resolved: all
/// workers' reuseport sockets share the port the first one got).
pub(crate) fn bind(
    cfg: &ServeConfig,
) -> Result<(Listeners, Vec<SocketAddr>), (SocketAddr, io::Error)> {
    let mut bound = Vec::with_capacity(cfg.listen.len());
    let mut first = Vec::with_capacity(cfg.listen.len());
    let reuseport = cfg.accept == AcceptMode::Reuseport;
    for &addr in &cfg.listen {
        let sock = listener(addr, reuseport, cfg.backlog).map_err(|e| (addr, e))?;
        let local = sock.local_addr().ok().and_then(|a| a.as_socket()).unwrap_or(addr);
        bound.push(local);
        first.push(sock);
    }
    if !reuseport {
        return Ok((Listeners::Shared(first), bound));
    }
    let mut per_worker = vec![first];
    for _ in 1..cfg.workers {
        let set = bound
            .iter()
            .map(|&a| listener(a, true, cfg.backlog).map_err(|e| (a, e)))
            .collect::<Result<Vec<_>, _>>()?;
        per_worker.push(set);
    }
    Ok((Listeners::PerWorker(per_worker), bound))
}

/// A warning when `net.core.somaxconn` (under `root`) caps the requested backlog.
pub fn backlog_warning(root: &Path, backlog: u32) -> Option<String> {
    let text = std::fs::read_to_string(root.join("proc/sys/net/core/somaxconn")).ok()?;
    let cap: u32 = text.trim().parse().ok()?;
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
    fn somaxconn_cap_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("proc/sys/net/core");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("somaxconn"), "4096\n").unwrap();
        let w = backlog_warning(dir.path(), 65535).unwrap();
        assert!(w.contains("capped by net.core.somaxconn = 4096"), "{w}");
        assert!(w.contains("61439 less"), "{w}");
        assert_eq!(backlog_warning(dir.path(), 4096), None);
        assert_eq!(backlog_warning(Path::new("/nonexistent"), 65535), None);
    }
}
