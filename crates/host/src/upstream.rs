//! The request path behind a server: the processes a proxy passes requests to (an application
//! under gunicorn behind nginx, php-fpm behind nginx, a database behind the application). They
//! are found two ways: from what nginx's configuration names (`proxy_pass`, `fastcgi_pass`,
//! `uwsgi_pass`, `scgi_pass`, `grpc_pass`, the `server`s of `upstream` blocks), and, for any
//! server, from the connections its processes hold to other listeners of this host. A process
//! on the path is part of the server (its CPU is the server's), never other work.
//!
//! Owns no policy: who is followed, and how, is the caller's.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use qpslab_sys::sockets::{self, ESTABLISHED, LISTEN};
use serde::{Deserialize, Serialize};

use crate::Root;

/// A listener on the request path, and who holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upstream {
    /// Where the server reaches it: `127.0.0.1:8081` or `unix:/run/app.sock`.
    pub addr: String,
    /// Its processes: the listener's holders and their descendants (gunicorn's master and
    /// workers).
    pub pids: Vec<u32>,
    /// Their name (the first holder's `comm`).
    pub comm: String,
    /// How it was found: the directive that names it (`nginx proxy_pass`), or `connections`
    /// (the server held connections to it).
    pub found_by: String,
}

/// How deep the path is followed: proxy, application, what the application calls.
const DEPTH: usize = 3;

/// The listeners behind the processes `server` on this host, followed up to [`DEPTH`] hops:
/// from nginx's configuration when a process is nginx, and from the connections the
/// processes hold now.
pub fn upstreams(root: &Root, server: &[u32]) -> Vec<Upstream> {
    let mut known: BTreeSet<u32> = server.iter().copied().collect();
    let mut out: Vec<Upstream> = Vec::new();
    let mut hop: Vec<u32> = server.to_vec();
    for depth in 0..DEPTH {
        let mut found = Vec::new();
        if depth == 0 {
            found.extend(configured(root, &hop));
        }
        found.extend(connected(root, &hop));
        let mut next = Vec::new();
        for mut u in found {
            u.pids.retain(|p| !known.contains(p));
            if u.pids.is_empty() || out.iter().any(|o| o.addr == u.addr) {
                continue;
            }
            known.extend(&u.pids);
            next.extend(&u.pids);
            out.push(u);
        }
        if next.is_empty() {
            break;
        }
        hop = next;
    }
    out
}

/// The listeners nginx's configuration passes requests to, when a process of `pids` is nginx.
fn configured(root: &Root, pids: &[u32]) -> Vec<Upstream> {
    let Some(conf) = pids.iter().find_map(|&p| crate::nginx::read(root, p)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (directive, written) in &conf.upstreams {
        let holders = match address(written) {
            Some(Addr::Tcp(a)) if sockets::is_local(a.ip()) => sockets::listener_holders(root, a),
            Some(Addr::Unix(path)) => sockets::unix_listener_holders(root, &path),
            _ => continue,
        };
        if let Some(u) =
            upstream(root, address_text(written), holders, &format!("nginx {directive}"))
        {
            out.push(u);
        }
    }
    out
}

/// The other listeners of this host that the processes `pids` hold connections to.
fn connected(root: &Root, pids: &[u32]) -> Vec<Upstream> {
    let mine: BTreeSet<u64> = pids.iter().flat_map(|p| socket_inodes(root, *p)).collect();
    if mine.is_empty() {
        return Vec::new();
    }
    let table = crate::tcp_sockets_in(root, 1 << ESTABLISHED | 1 << LISTEN);
    let listeners: Vec<&sockets::TcpSocket> = table.iter().filter(|s| s.state == LISTEN).collect();
    // A connection the server accepted has one of its own listening ports on its side; one it
    // made (to what is behind it) has an ephemeral port there, and a listener at the far end.
    let own_ports: BTreeSet<u16> =
        listeners.iter().filter(|l| mine.contains(&l.inode)).map(|l| l.local.port()).collect();
    let made = |s: &&sockets::TcpSocket| {
        s.state == ESTABLISHED && mine.contains(&s.inode) && !own_ports.contains(&s.local.port())
    };
    let mut out: Vec<Upstream> = Vec::new();
    for s in table.iter().filter(made) {
        let Some(l) = listeners.iter().find(|l| sockets::accepts(l.local, s.remote)) else {
            continue;
        };
        if mine.contains(&l.inode) || out.iter().any(|o| o.addr == s.remote.to_string()) {
            continue;
        }
        let holders = sockets::holders(root, &BTreeSet::from([l.inode]));
        if let Some(u) = upstream(root, s.remote.to_string(), holders, "connections") {
            out.push(u);
        }
    }
    out
}

fn upstream(
    root: &Root,
    addr: String,
    holders: Vec<sockets::Holder>,
    found_by: &str,
) -> Option<Upstream> {
    let comm = holders.first()?.comm.trim().to_string();
    let pids: Vec<u32> = holders.iter().map(|h| h.pid).collect();
    Some(Upstream {
        addr,
        pids: crate::procs::with_descendants(root, &pids),
        comm,
        found_by: found_by.to_string(),
    })
}

/// The socket inodes process `pid` holds.
fn socket_inodes(root: &Root, pid: u32) -> Vec<u64> {
    root.list(&format!("proc/{pid}/fd"))
        .iter()
        .filter_map(|fd| {
            let link = root.read_link(&format!("proc/{pid}/fd/{fd}"))?;
            let link = link.to_string_lossy();
            link.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// An upstream address as nginx takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Addr {
    Tcp(SocketAddr),
    Unix(std::path::PathBuf),
}

/// `http://127.0.0.1:8081/x`, `127.0.0.1:9000`, `localhost:8000`, `unix:/run/php.sock`,
/// `http://unix:/tmp/app.sock:/` -> the address; a name other than localhost (a named
/// upstream, or a host to resolve) -> None: named upstreams are read from their `server`s,
/// and no name is looked up.
fn address(written: &str) -> Option<Addr> {
    let rest = written.split_once("://").map_or(written, |(_, r)| r);
    if let Some(path) = rest.strip_prefix("unix:") {
        // `unix:/tmp/app.sock:/uri`: the path ends at the colon before the URI.
        let path = path.split(':').next().unwrap_or(path);
        return Some(Addr::Unix(path.into()));
    }
    let authority = rest.split('/').next().unwrap_or(rest);
    let default_port = if written.starts_with("https://") { 443 } else { 80 };
    if let Ok(a) = authority.parse::<SocketAddr>() {
        return Some(Addr::Tcp(a));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (h, p.parse().ok()?),
        None => (authority, default_port),
    };
    let ip = match host {
        "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
        h => h.trim_start_matches('[').trim_end_matches(']').parse().ok()?,
    };
    Some(Addr::Tcp(SocketAddr::new(ip, port)))
}

/// The address as it is shown: `127.0.0.1:8081` or `unix:/run/app.sock`.
fn address_text(written: &str) -> String {
    match address(written) {
        Some(Addr::Tcp(a)) => a.to_string(),
        Some(Addr::Unix(p)) => format!("unix:{}", p.display()),
        None => written.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nginx_upstream_addresses_read_as_nginx_takes_them() {
        let tcp = |s: &str| Some(Addr::Tcp(s.parse().unwrap_or_else(|_| unreachable!())));
        assert_eq!(address("http://127.0.0.1:8081/x"), tcp("127.0.0.1:8081"));
        assert_eq!(address("127.0.0.1:9000"), tcp("127.0.0.1:9000"));
        assert_eq!(address("http://localhost:8000"), tcp("127.0.0.1:8000"));
        assert_eq!(address("http://127.0.0.1"), tcp("127.0.0.1:80"));
        assert_eq!(address("https://[::1]:8443/"), tcp("[::1]:8443"));
        assert_eq!(address("unix:/run/php.sock"), Some(Addr::Unix("/run/php.sock".into())));
        assert_eq!(
            address("http://unix:/tmp/app.sock:/api"),
            Some(Addr::Unix("/tmp/app.sock".into()))
        );
        assert_eq!(address("http://backend"), None, "a named upstream: its servers say");
        assert_eq!(address("http://app.internal:8080"), None, "no name is looked up");
    }

    #[test]
    fn the_configuration_names_its_upstreams() {
        let conf = crate::nginx::parse(
            "upstream app { server 127.0.0.1:8081 weight=2; server unix:/run/a.sock; }\n\
             server { listen 80; location / { proxy_pass http://app; }\n\
             location ~ \\.php$ { fastcgi_pass 127.0.0.1:9000; } }\n",
        );
        let names: Vec<(&str, &str)> =
            conf.upstreams.iter().map(|(d, a)| (d.as_str(), a.as_str())).collect();
        assert_eq!(
            names,
            [
                ("upstream server", "127.0.0.1:8081"),
                ("upstream server", "unix:/run/a.sock"),
                ("proxy_pass", "http://app"),
                ("fastcgi_pass", "127.0.0.1:9000"),
            ]
        );
    }
}
