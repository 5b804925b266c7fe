//! nginx's own counters, from its `stub_status` page where its configuration has one: the
//! connections it accepted and handled (fewer handled than accepted: it closed some for want
//! of worker connections), the requests it counted, and at the instant read, the connections
//! reading a request, writing a response (requests in service) and waiting (idle keep-alive).
//! The page's address comes from the configuration ([`locations`]); it is read over plain
//! HTTP/1.0 with a short timeout ([`read`]).

use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::ToSocketAddrs;
use std::time::Duration;

use crate::nginx::nested_statements;

/// Where a `stub_status` answers: an address to connect to, the Host to ask for, the path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    /// `127.0.0.1:8080`, `[::1]:80`, `localhost:80`: the server's `listen`, with a wildcard
    /// address read as loopback.
    pub addr: String,
    pub host: String,
    pub path: String,
}

/// One reading of the page.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reading {
    pub active: u64,
    pub accepts: u64,
    pub handled: u64,
    pub requests: u64,
    pub reading: u64,
    pub writing: u64,
    pub waiting: u64,
}

/// The page read at the window's start and end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Window {
    pub at: Location,
    pub first: Reading,
    pub last: Reading,
    /// Seconds between the two readings.
    pub secs: f64,
}

impl Window {
    /// Requests nginx counted a second over the window.
    pub fn requests_per_s(&self) -> f64 {
        self.last.requests.saturating_sub(self.first.requests) as f64 / self.secs.max(1e-9)
    }

    /// Connections nginx accepted and closed at once in the window: it had no free worker
    /// connection for them (`accepts` - `handled`).
    pub fn unhandled(&self) -> u64 {
        let d = |a: u64, b: u64| b.saturating_sub(a);
        d(self.first.accepts, self.last.accepts)
            .saturating_sub(d(self.first.handled, self.last.handled))
    }

    /// One line of evidence: what nginx counted over the window, and its connections at its
    /// end.
    pub fn evidence(&self) -> String {
        let d = |a: u64, b: u64| b.saturating_sub(a);
        let (a, b) = (&self.first, &self.last);
        format!(
            "nginx's stub_status ({}{}): accepts +{}, handled +{}, requests +{} ({:.0}/s) over {:.1} s; at the end {} connections: reading {}, writing {}, waiting {}",
            self.at.addr,
            self.at.path,
            d(a.accepts, b.accepts),
            d(a.handled, b.handled),
            d(a.requests, b.requests),
            self.requests_per_s(),
            self.secs,
            b.active,
            b.reading,
            b.writing,
            b.waiting
        )
    }
}

/// The `stub_status` locations of a configuration (the text of `nginx -T`), one for each
/// plain-HTTP `listen` of their server (`listen 80` when it has none). Regular-expression
/// locations, TLS and unix-socket listeners are left out.
pub fn locations(text: &str) -> Vec<Location> {
    let all = nested_statements(text);
    let mut out = Vec::new();
    for st in all.iter().filter(|s| s.text == "stub_status" || s.text == "stub_status on") {
        let Some(path) = st.within.iter().rev().find_map(|(_, head)| location_path(head)) else {
            continue;
        };
        let Some(&(server, _)) = st.within.iter().rev().find(|(_, head)| head == "server") else {
            continue;
        };
        // The server block's own directives: those whose innermost block is it.
        let own = |name: &str| {
            all.iter()
                .filter(|s| s.within.last().is_some_and(|(id, _)| *id == server))
                .filter_map(|s| s.text.strip_prefix(name)?.strip_prefix(' ').map(String::from))
                .collect::<Vec<String>>()
        };
        let host = own("server_name")
            .iter()
            .flat_map(|n| n.split_whitespace().map(String::from).collect::<Vec<_>>())
            .find(|n| !n.contains('*') && !n.starts_with('~') && !n.is_empty() && n != "_")
            .unwrap_or_else(|| "localhost".into());
        let listens = own("listen");
        let listens = if listens.is_empty() { vec!["80".to_string()] } else { listens };
        for l in listens {
            let Some(addr) = listen_addr(&l) else { continue };
            out.push(Location { addr, host: host.clone(), path: path.clone() });
        }
    }
    out.sort_by(|a, b| (&a.addr, &a.path).cmp(&(&b.addr, &b.path)));
    out.dedup();
    out
}

/// The path of a prefix or exact `location` head (`location = /status`, `location /s`,
/// `location ^~ /s`); None for a regular expression or a named location.
fn location_path(head: &str) -> Option<String> {
    let words: Vec<&str> = head.split_whitespace().collect();
    match words.as_slice() {
        ["location", p] | ["location", "=" | "^~", p] if p.starts_with('/') => Some(p.to_string()),
        _ => None,
    }
}

/// The address to reach a plain-HTTP `listen` at: `8080` and `*:8080` and `0.0.0.0:8080` are
/// 127.0.0.1:8080, `[::]:80` is [::1]:80; None for `ssl`, `quic` and unix sockets.
fn listen_addr(args: &str) -> Option<String> {
    let words: Vec<&str> = args.split_whitespace().collect();
    let first = *words.first()?;
    if first.starts_with("unix:") || words.iter().any(|w| *w == "ssl" || *w == "quic") {
        return None;
    }
    if first.chars().all(|c| c.is_ascii_digit()) {
        return Some(format!("127.0.0.1:{first}"));
    }
    let (host, port) = match first.rsplit_once(':') {
        Some((h, p)) if !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()) => (h, p),
        _ => (first, "80"),
    };
    let host = match host {
        "*" | "0.0.0.0" => "127.0.0.1",
        "[::]" => "[::1]",
        h => h,
    };
    Some(format!("{host}:{port}"))
}

/// Reads the page at `at` within `timeout` (connect, then the whole answer); None when it
/// cannot be reached, does not answer 200 or does not read as stub_status.
pub fn read(at: &Location, timeout: Duration) -> Option<Reading> {
    let addr = at.addr.to_socket_addrs().ok()?.next()?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.set_write_timeout(Some(timeout)).ok()?;
    let ask = format!(
        "GET {} HTTP/1.0\r\nHost: {}\r\nUser-Agent: qpslab-doctor\r\n\r\n",
        at.path, at.host
    );
    s.write_all(ask.as_bytes()).ok()?;
    let mut answer = Vec::new();
    // The page is a few hundred bytes; a larger answer is not it.
    s.take(16 * 1024).read_to_end(&mut answer).ok()?;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.lines().next()?.split_whitespace().nth(1)?;
    (status == "200").then(|| parse(body)).flatten()
}

/// [`read`] from the network namespace of process `pid` (the nginx master's: its `listen`
/// addresses are that namespace's, a container's loopback included).
pub fn read_from(pid: u32, at: &Location, timeout: Duration) -> Option<Reading> {
    let ns = qpslab_sys::netns::of(pid);
    if ns.is_none() || ns == qpslab_sys::netns::of(std::process::id()) {
        return read(at, timeout);
    }
    let at = at.clone();
    qpslab_sys::netns::run_in(pid, move || read(&at, timeout)).ok().flatten()
}

/// The page's text:
///
/// ```text
/// Active connections: 291
/// server accepts handled requests
///  16630948 16630948 31070465
/// Reading: 6 Writing: 179 Waiting: 106
/// ```
pub fn parse(body: &str) -> Option<Reading> {
    let mut lines = body.lines().map(str::trim).filter(|l| !l.is_empty());
    let active = lines.next()?.strip_prefix("Active connections:")?.trim().parse().ok()?;
    lines.next().filter(|l| l.starts_with("server accepts handled requests"))?;
    let n: Vec<u64> = lines.next()?.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    let [accepts, handled, requests] = n.as_slice() else { return None };
    let rww: Vec<u64> = lines.next()?.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    let [reading, writing, waiting] = rww.as_slice() else { return None };
    Some(Reading {
        active,
        accepts: *accepts,
        handled: *handled,
        requests: *requests,
        reading: *reading,
        writing: *writing,
        waiting: *waiting,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nginx's documentation's example page, and what is not one.
    #[test]
    fn the_page_reads_as_its_counters() {
        let page = "Active connections: 291 \nserver accepts handled requests\n 16630948 16630948 31070465 \nReading: 6 Writing: 179 Waiting: 106 \n";
        let r = parse(page).unwrap();
        assert_eq!(
            (r.active, r.accepts, r.handled, r.requests),
            (291, 16630948, 16630948, 31070465)
        );
        assert_eq!((r.reading, r.writing, r.waiting), (6, 179, 106));
        assert_eq!(parse("<html>ok</html>"), None);
        assert_eq!(parse("Active connections: 1\nserver accepts handled requests\n 1 2\n"), None);
    }

    /// The page's server's listens, with wildcards as loopback and TLS left out; the Host
    /// is its first plain server_name; other servers' listens and regex locations are not it.
    #[test]
    fn the_page_is_found_where_its_server_listens() {
        let conf = "http {\n server { listen 8080; listen [::]:8081; listen 8443 ssl; server_name status.local *.x;\n   location / { return 200; }\n   location = /nginx_status { stub_status; allow 127.0.0.1; deny all; } }\n server { listen 9000; location ~ ^/s$ { stub_status; } location /other { return 204; } }\n server { location /basic_status { stub_status on; } }\n}\n";
        let l = locations(conf);
        let at: Vec<(&str, &str, &str)> =
            l.iter().map(|l| (l.addr.as_str(), l.host.as_str(), l.path.as_str())).collect();
        assert_eq!(
            at,
            vec![
                ("127.0.0.1:80", "localhost", "/basic_status"),
                ("127.0.0.1:8080", "status.local", "/nginx_status"),
                ("[::1]:8081", "status.local", "/nginx_status"),
            ]
        );
        assert!(locations("http { server { listen 80; location / { return 200; } } }").is_empty());
        assert_eq!(listen_addr("10.0.0.5:80 reuseport").as_deref(), Some("10.0.0.5:80"));
        assert_eq!(listen_addr("localhost").as_deref(), Some("localhost:80"));
        assert_eq!(listen_addr("unix:/run/n.sock"), None);
    }
}
