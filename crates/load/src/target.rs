//! The builder of a run's variants: where each request goes and its bytes, resolved once before
//! the run from the URLs on the command line, a pool file's lines and a targets file's, with the
//! headers and body the user gave (see [`crate::variants`] for how they are held). URLs without
//! a scheme are taken as `http://`, as curl takes them.

use std::net::{SocketAddr, ToSocketAddrs};

use qpslab_http::{HeaderArg, RequestSpec};
use qpslab_sys::config_error::ConfigError;

use crate::options::LoadOptions;
use crate::targets_file::{self, LineBody, TargetLine};
use crate::template::{self, Template, Token};
use crate::variants::{Target, Variants};

/// Builds every variant, command-line URLs first (or the `--urls` pool in their place), then
/// the targets file's; also returns notes for the user (a URL taken as `http://`).
pub fn build(o: &LoadOptions) -> Result<(Variants, Vec<String>), ConfigError> {
    if o.urls_file.is_some() && o.body_lines.is_some() {
        return Err(ConfigError::new(
            "--body-lines",
            "a pool comes from one file: give --urls or --body-lines, not both",
        ));
    }
    if o.urls.is_empty() && o.targets.is_none() && o.urls_file.is_none() {
        return Err(ConfigError::new(
            "URL",
            "no target given; e.g. http://127.0.0.1:8080/ (or --targets FILE, --urls FILE)",
        ));
    }
    let mut b = Builder {
        o,
        headers: headers(o)?,
        body: o.body.as_ref().map_or(&[][..], |b| b.0.as_slice()),
        cache: Resolved { unix: o.unix_socket.is_some(), ..Resolved::default() },
        notes: Vec::new(),
        rand_seed: o.rand_seed.unwrap_or_else(crate::seed::fresh_seed),
        out: Variants::default(),
    };
    match (&o.urls_file, &o.body_lines) {
        (Some(pool), _) => b.pool(pool)?,
        (None, Some(bodies)) => b.bodies(bodies)?,
        (None, None) => {
            let lines: Vec<TargetLine> = o
                .urls
                .iter()
                .map(|u| TargetLine {
                    method: o.method.clone(),
                    url: u.clone(),
                    headers: Vec::new(),
                    weight: 1,
                    body: None,
                    name: None,
                    line: 0,
                })
                .collect();
            b.lines(lines, "URL", false)?;
        }
    }
    if let Some(file) = &o.targets {
        // Grouped by name, the file's lines are reported as a pool's are.
        let pool = o.group_by.as_deref() == Some(crate::options::GROUP_BY_NAME);
        b.lines(targets_file::read_file(file)?, "--targets", pool)?;
    }
    let unseeded = |t: &std::sync::Arc<Template>| {
        t.h1.iter().chain(&t.body).any(|s| s.kind == template::Kind::Rand { seed: b.rand_seed })
    };
    if (0..b.out.len()).any(|i| b.out.template(i).is_some_and(unseeded)) {
        b.notes.push(format!(
            "{{rand:WIDTH}} seed {0}: give {{rand:WIDTH:{0}}} to get the same numbers again",
            b.rand_seed
        ));
    }
    Ok((b.out, b.notes))
}

/// Host names already looked up (a pool names its host on every line); with a unix socket
/// none is: its targets' addresses are only `0.0.0.0:PORT` then, and every connection goes to
/// the socket.
#[derive(Debug, Default)]
struct Resolved {
    names: std::collections::HashMap<(String, u16), SocketAddr>,
    unix: bool,
}

impl Resolved {
    /// The address of `host` (as the URL writes it, IPv6 in brackets) and `port`: the first
    /// the resolver gives, once, before the run.
    fn addr(&mut self, host: &str, port: u16) -> Result<SocketAddr, ConfigError> {
        if self.unix {
            return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
        }
        let lookup = host.trim_start_matches('[').trim_end_matches(']');
        if let Some(a) = self.names.get(&(lookup.to_string(), port)) {
            return Ok(*a);
        }
        let a = (lookup, port)
            .to_socket_addrs()
            .map_err(|e| ConfigError::new("URL", format!("cannot resolve host {host:?}: {e}")))?
            .next()
            .ok_or_else(|| ConfigError::new("URL", format!("host {host:?} has no address")))?;
        self.names.insert((lookup.to_string(), port), a);
        Ok(a)
    }
}

/// What every target is built with: the options' headers and body, the host names resolved so
/// far, and the notes for the user.
struct Builder<'a> {
    o: &'a LoadOptions,
    headers: Vec<HeaderArg>,
    body: &'a [u8],
    cache: Resolved,
    notes: Vec<String>,
    /// The seed of every `{rand:WIDTH}` that names none.
    rand_seed: u64,
    /// The variants built so far.
    out: Variants,
}

impl Builder<'_> {
    /// The variants of `lines` (in the pool when `pool`), errors named after `flag`.
    fn lines(
        &mut self,
        lines: Vec<TargetLine>,
        flag: &'static str,
        pool: bool,
    ) -> Result<(), ConfigError> {
        let sni = self.o.tls.sni.as_deref();
        for mut l in lines {
            if let Some(full) = with_default_scheme(&l.url) {
                self.notes.push(format!("{:?} has no scheme: taken as {full}", l.url));
                l.url = full;
            }
            // A header of the line replaces a -H header of the same name.
            let mut hs: Vec<HeaderArg> = self
                .headers
                .iter()
                .filter(|h| !l.headers.iter().any(|o| o.name.eq_ignore_ascii_case(&h.name)))
                .cloned()
                .collect();
            hs.extend(l.headers.iter().cloned());
            let body = match &l.body {
                None => self.body.to_vec(),
                Some(LineBody::Text(t)) => t.clone().into_bytes(),
                Some(LineBody::File(p)) => std::fs::read(p).map_err(|e| {
                    let why = qpslab_sys::net::message(&e);
                    ConfigError::new(flag, format!("body=@{p}: cannot read it ({why})"))
                })?,
            };
            let grpc = grpc_count(self.o);
            let gzip = self.o.grpc_encoding.is_some();
            let req = Req { url: &l.url, method: &l.method, headers: &hs, body: &body, grpc, gzip };
            let mut t = resolve_target(req, l.weight, sni, self.rand_seed, &mut self.cache)
                .map_err(
                    |e| if e.flag == "--sni" { e } else { ConfigError::new(flag, e.message) },
                )?;
            (t.pool, t.name, t.line) = (pool, l.name, l.line);
            self.add(t, flag)?;
        }
        Ok(())
    }

    /// One more variant, within what the arenas hold.
    fn add(&mut self, t: Target, flag: &'static str) -> Result<(), ConfigError> {
        self.out.push(t);
        if self.out.largest_arena() > crate::variants::ARENA_MAX {
            return Err(ConfigError::new(
                flag,
                format!("{} requests encode to more than 4 GiB; give fewer lines", self.out.len()),
            ));
        }
        Ok(())
    }

    /// The `--body-lines` pool: the one URL, with each line of the file as its body.
    fn bodies(&mut self, file: &crate::file_text::FileText) -> Result<(), ConfigError> {
        let o = self.o;
        let err = |m: String| ConfigError::new("--body-lines", m);
        let [url] = o.urls.as_slice() else {
            return Err(err(format!("give one URL with it, not {}", o.urls.len())));
        };
        let url = with_default_scheme(url).unwrap_or_else(|| url.clone());
        let sni = o.tls.sni.as_deref();
        let before = self.out.len();
        // gRPC messages encoded from the file's JSON lines go in their place.
        let lines: Vec<(usize, &[u8])> = if o.grpc_messages.is_empty() {
            let lines = file.text.lines().enumerate().filter(|(_, l)| !l.is_empty());
            lines.map(|(i, l)| (i, l.as_bytes())).collect()
        } else {
            o.grpc_messages.iter().map(|(n, m)| (*n as usize - 1, m.0.as_slice())).collect()
        };
        let n = grpc_count(o) as usize;
        let gzip = o.grpc_encoding.is_some();
        for (k, &(i, line)) in lines.iter().enumerate() {
            // gRPC calls of N messages: this line's and the next N-1's, each framed.
            let streamed: Vec<u8> = match n {
                0 | 1 => Vec::new(),
                n => (0..n).flat_map(|j| framed(lines[(k + j) % lines.len()].1, gzip)).collect(),
            };
            let (body, grpc) = if n > 1 { (&streamed[..], 0) } else { (line, n as u32) };
            let headers = &self.headers;
            let req = Req { url: &url, method: &o.method, headers, body, grpc, gzip };
            let mut t =
                resolve_target(req, 1, sni, self.rand_seed, &mut self.cache).map_err(|e| {
                    if e.flag == "--sni" {
                        e
                    } else {
                        err(format!("{} line {}: {}", file.name, i + 1, e.message))
                    }
                })?;
            t.pool = true;
            t.line = u32::try_from(i + 1).unwrap_or(u32::MAX);
            self.add(t, "--body-lines")?;
        }
        if self.out.len() == before {
            return Err(err(format!("{} has no body; write one per line", file.name)));
        }
        Ok(())
    }

    /// The `--urls` pool: a URL, or a path on the command line's URL's host, per line; each
    /// with the method, headers and body of the command line.
    fn pool(&mut self, pool: &crate::file_text::FileText) -> Result<(), ConfigError> {
        let o = self.o;
        let err = |m: String| ConfigError::new("--urls", m);
        if o.urls.len() > 1 {
            return Err(err(format!(
                "give one URL with it (the base of the pool's paths), not {}",
                o.urls.len()
            )));
        }
        let base = o.urls.first().map(|u| with_default_scheme(u).unwrap_or_else(|| u.clone()));
        let base = base
            .map(|b| {
                url::Url::parse(&b).map_err(|e| err(format!("the URL {b:?} is not valid ({e})")))
            })
            .transpose()?;
        let mut bare = 0;
        let before = self.out.len();
        for (i, raw) in pool.text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = |m: String| err(format!("{} line {}: {m}", pool.name, i + 1));
            let url = if line.starts_with('/') {
                let base = base.as_ref().ok_or_else(|| {
                at(format!("{line:?} is a path: give a URL for its scheme and host, e.g. http://127.0.0.1:8080/"))
            })?;
                base.join(line).map_err(|e| at(format!("{line:?}: {e}")))?.to_string()
            } else if let Some(full) = with_default_scheme(line) {
                bare += 1;
                full
            } else {
                line.to_string()
            };
            let sni = o.tls.sni.as_deref();
            let (headers, body) = (&self.headers, self.body);
            let req = Req { url: &url, method: &o.method, headers, body, grpc: 0, gzip: false };
            let mut t = resolve_target(req, 1, sni, self.rand_seed, &mut self.cache)
                .map_err(|e| if e.flag == "--sni" { e } else { at(e.message) })?;
            t.pool = true;
            t.line = u32::try_from(i + 1).unwrap_or(u32::MAX);
            self.add(t, "--urls")?;
        }
        if self.out.len() == before {
            return Err(err(format!(
                "{} has no URL or path; write one per line, e.g. /item/1",
                pool.name
            )));
        }
        if bare > 0 {
            self.notes
                .push(format!("{bare} line(s) of {} have no scheme: taken as http://", pool.name));
        }
        Ok(())
    }
}

/// The `-H` headers, with `Connection: close` for a connection per request.
fn headers(o: &LoadOptions) -> Result<Vec<HeaderArg>, ConfigError> {
    let mut headers = o
        .headers
        .iter()
        .map(|h| HeaderArg::parse(h).map_err(|e| ConfigError::new("--header", e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    let given = |name: &str, hs: &[HeaderArg]| hs.iter().any(|h| h.name.eq_ignore_ascii_case(name));
    if let (Some(ua), false) = (&o.user_agent, given("user-agent", &headers)) {
        headers.push(HeaderArg { name: "User-Agent".into(), value: ua.clone() });
    }
    if o.conn_per_request && !given("connection", &headers) {
        // The server closes after the response, as with ab (no -k) or wrk -H 'Connection: close'.
        headers.push(HeaderArg { name: "Connection".into(), value: "close".into() });
    }
    Ok(headers)
}

/// How many distinct addresses the variants have (each needs a connection of its own).
pub fn distinct_addresses(v: &Variants) -> usize {
    let mut addrs: Vec<SocketAddr> = v.endpoints().map(|(e, _)| e.addr).collect();
    addrs.sort();
    addrs.dedup();
    addrs.len()
}

/// `localhost:8080/x` -> `http://localhost:8080/x`, as curl reads a URL without a scheme; None
/// when the URL has one.
pub(crate) fn with_default_scheme(url: &str) -> Option<String> {
    let bare = !url.contains("://") && !url.is_empty() && !url.contains(char::is_whitespace);
    bare.then(|| format!("http://{url}"))
}

/// `user:password@` in the URL: an `Authorization: Basic` header, as curl sends it (the
/// user's own Authorization header, `-H`, wins); the parts are percent-decoded first.
fn basic_auth(url: &url::Url, headers: &[HeaderArg]) -> Option<HeaderArg> {
    use base64::Engine as _;
    if url.username().is_empty() && url.password().is_none() {
        return None;
    }
    if headers.iter().any(|h| h.name.eq_ignore_ascii_case("authorization")) {
        return None;
    }
    let decode = |s: &str| percent_encoding::percent_decode_str(s).collect::<Vec<u8>>();
    let mut pair = decode(url.username());
    pair.push(b':');
    pair.extend(decode(url.password().unwrap_or("")));
    let value = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair));
    Some(HeaderArg { name: "Authorization".into(), value })
}

/// A request as given: URL, method, headers, body (any of them may hold `{seq}` or `{rand}`).
#[derive(Clone, Copy)]
struct Req<'a> {
    url: &'a str,
    method: &'a str,
    headers: &'a [HeaderArg],
    body: &'a [u8],
    /// The body is a gRPC message: it goes framed (its 5-byte prefix before it), this many
    /// times (0: not gRPC's).
    grpc: u32,
    /// gRPC messages go gzip-compressed (`--grpc-encoding`): the body holds no templated ID
    /// (refused before) and, framed already, is not read for one.
    gzip: bool,
}

/// The target of `req`; its `{seq}` and `{rand}` IDs found (see [`template`]): the request is
/// resolved with every ID's digits at 0, then once per ID with its digits at 1, and where the
/// encodings differ is where the ID goes.
fn resolve_target(
    req: Req<'_>,
    weight: u32,
    sni: Option<&str>,
    rand_seed: u64,
    cache: &mut Resolved,
) -> Result<Target, ConfigError> {
    let scan = |flag: &'static str, text: &[u8]| {
        template::scan(text, rand_seed).map_err(|e| ConfigError::new(flag, e))
    };
    let in_url = scan("URL", req.url.as_bytes())?;
    let authority_end = req.url.find("://").map_or(0, |s| {
        s + 3 + req.url[s + 3..].find(['/', '?', '#']).unwrap_or(req.url.len() - s - 3)
    });
    if in_url.iter().any(|t| t.range.0 < authority_end) {
        return Err(ConfigError::new(
            "URL",
            format!(
                "{:?}: {{seq}} and {{rand}} go in the path or the query, not the host",
                req.url
            ),
        ));
    }
    let in_headers = req
        .headers
        .iter()
        .map(|h| scan("--header", h.value.as_bytes()))
        .collect::<Result<Vec<_>, _>>()?;
    let in_body = if req.gzip { Vec::new() } else { scan("--body", req.body)? };
    let tokens: Vec<&Token> =
        in_url.iter().chain(in_headers.iter().flatten()).chain(&in_body).collect();
    if tokens.is_empty() {
        return resolve_plain(req, weight, sni, cache, true);
    }
    // The request with token `marked`'s digits at 1 and every other's at 0.
    let variant = |marked: Option<usize>, cache: &mut Resolved| {
        let digit = |k: usize| if Some(k) == marked { b'1' } else { b'0' };
        let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
        let url = text(template::fill(req.url.as_bytes(), &in_url, 0, digit));
        let mut first = in_url.len();
        let headers: Vec<HeaderArg> = req
            .headers
            .iter()
            .zip(&in_headers)
            .map(|(h, ts)| {
                let value = text(template::fill(h.value.as_bytes(), ts, first, digit));
                first += ts.len();
                HeaderArg { name: h.name.clone(), value }
            })
            .collect();
        let body = template::fill(req.body, &in_body, first, digit);
        let filled = Req { url: &url, method: req.method, headers: &headers, body: &body, ..req };
        resolve_plain(filled, weight, sni, cache, false)
    };
    let flag_of = |k: usize| match k {
        k if k < in_url.len() => "URL",
        k if k < tokens.len() - in_body.len() => "--header",
        _ => "--body",
    };
    let mut base = variant(None, cache)?;
    let mut t = Template::default();
    for (k, token) in tokens.iter().enumerate() {
        let marked = variant(Some(k), cache)?;
        let at = |base: &[u8], marked: &[u8], out: &mut Vec<template::Slot>| {
            let slot = template::locate(base, marked, token.width, token.kind).map_err(|_| {
                ConfigError::new(
                    flag_of(k),
                    format!(
                        "{}: its ID of {} digits is not one run of digits once encoded; put \
                         it where the request carries it as written",
                        req.url, token.width
                    ),
                )
            })?;
            out.extend(slot);
            Ok::<(), ConfigError>(())
        };
        at(&base.request, &marked.request, &mut t.h1)?;
        at(&base.h2_block, &marked.h2_block, &mut t.h2)?;
        at(&base.body, &marked.body, &mut t.body)?;
    }
    // Reports show the URL as written, its IDs as templates.
    base.url = url::Url::parse(req.url).map_or(base.url, |u| {
        let mut shown = u;
        let _ = shown.set_username("");
        let _ = shown.set_password(None);
        shown.to_string().replace("%7B", "{").replace("%7D", "}")
    });
    base.template = Some(t.into());
    Ok(base)
}

/// The messages a gRPC call of `o` sends (0: no gRPC).
fn grpc_count(o: &LoadOptions) -> u32 {
    match o.grpc {
        Some(_) => o.stream_messages.unwrap_or(1),
        None => 0,
    }
}

/// `msg` as one gRPC message: its prefix, then its bytes (templated IDs keep their width, so
/// the length is the same for every request), gzip-compressed when `gzip`.
fn framed(msg: &[u8], gzip: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(qpslab_http::grpc::PREFIX + msg.len());
    if gzip {
        use std::io::Write as _;
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        // Writing into memory does not fail.
        let packed = z.write_all(msg).and_then(|()| z.finish()).unwrap_or_default();
        qpslab_http::grpc::put_framed(&mut out, &packed, true);
    } else {
        qpslab_http::grpc::put_message(&mut out, msg);
    }
    out
}

/// The target of `req` as it is; its HTTP/2 header block Huffman-coded when `huffman`.
fn resolve_plain(
    req: Req<'_>,
    weight: u32,
    sni: Option<&str>,
    cache: &mut Resolved,
    huffman: bool,
) -> Result<Target, ConfigError> {
    let Req { url: raw, method, headers, body, grpc, gzip } = req;
    let url = url::Url::parse(raw).map_err(|e| {
        ConfigError::new(
            "URL",
            format!("{raw:?} is not a valid URL ({e}); e.g. http://127.0.0.1:8080/"),
        )
    })?;
    let https = match url.scheme() {
        "http" => false,
        "https" => true,
        other => {
            return Err(ConfigError::new(
                "URL",
                format!("{raw:?}: unsupported scheme {other:?}; use http:// or https://"),
            ))
        }
    };
    let host =
        url.host_str().ok_or_else(|| ConfigError::new("URL", format!("{raw:?} has no host")))?;
    let tls_name = https.then(|| crate::tls::server_name(host, sni)).transpose()?;
    let port = url.port_or_known_default().unwrap_or(80);
    let addr = cache.addr(host, port)?;
    let authority = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    };
    let mut target = url.path().to_string();
    if let Some(q) = url.query() {
        target.push('?');
        target.push_str(q);
    }
    let mut headers = headers.to_vec();
    if let Some(auth) = basic_auth(&url, &headers) {
        headers.push(auth);
    }
    // The credentials go in the header, not in the reports.
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    let spec = RequestSpec {
        method: method.to_string(),
        target,
        host: authority,
        headers,
        body: if grpc > 0 { framed(body, gzip).repeat(grpc as usize) } else { body.to_vec() },
    };
    let request = spec.encode().map_err(|e| ConfigError::new("--method", e.to_string()))?;
    let h2_block = if huffman { spec.encode_h2(https) } else { spec.encode_h2_raw(https) }
        .map_err(|e| ConfigError::new("--method", e.to_string()))?;
    Ok(Target {
        url: shown.to_string(),
        method: method.to_string(),
        addr,
        request,
        h2_block,
        body: spec.body.clone().into(),
        head: spec.is_head(),
        weight,
        tls_name,
        pool: false,
        template: None,
        name: None,
        line: 0,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    fn request(t: &Target) -> String {
        String::from_utf8(t.request.clone()).unwrap()
    }

    /// `user:password@` is sent as curl sends it (it was dropped in silence), percent-decoded,
    /// and kept out of the URL the reports show; the user's own Authorization header wins.
    #[test]
    fn credentials_in_the_url_become_basic_auth() {
        let get = |url: &str, hs: &[HeaderArg]| {
            let req = Req { url, method: "GET", headers: hs, body: &[], grpc: 0, gzip: false };
            resolve_target(req, 1, None, 0, &mut Resolved::default()).unwrap()
        };
        let t = get("http://alice:s%40cret@127.0.0.1:8080/x", &[]);
        // base64("alice:s@cret")
        assert!(
            request(&t).contains("\r\nAuthorization: Basic YWxpY2U6c0BjcmV0\r\n"),
            "{}",
            request(&t)
        );
        assert_eq!(t.url, "http://127.0.0.1:8080/x");
        let own = [HeaderArg { name: "authorization".into(), value: "Bearer t".into() }];
        let t = get("http://alice:pw@127.0.0.1:8080/", &own);
        assert!(!request(&t).contains("Basic"), "{}", request(&t));
        let t = get("http://127.0.0.1:8080/", &[]);
        assert!(!request(&t).contains("Authorization"));
    }

    #[test]
    fn user_agent_is_sent_unless_a_header_gives_one() {
        let o = |headers: Vec<String>| LoadOptions {
            urls: vec!["http://127.0.0.1:8080/".into()],
            user_agent: Some("probe/1".into()),
            headers,
            ..LoadOptions::default()
        };
        let (t, _) = build(&o(Vec::new())).unwrap();
        let t = t.target(0);
        assert!(request(&t).contains("\r\nUser-Agent: probe/1\r\n"), "{}", request(&t));
        let (t, _) = build(&o(vec!["user-agent: mine".into()])).unwrap();
        let t = t.target(0);
        assert!(!request(&t).contains("probe/1"), "{}", request(&t));
    }

    /// A pool's bad input is named with its flag, file and line, and the fix.
    #[test]
    fn a_pool_refuses_what_it_cannot_request() {
        let file =
            |text: &str| crate::file_text::FileText { name: "p.txt".into(), text: text.into() };
        let o = |urls: &[&str], text: &str| LoadOptions {
            urls: urls.iter().map(|u| u.to_string()).collect(),
            urls_file: Some(file(text)),
            ..LoadOptions::default()
        };
        let err = |o: LoadOptions| build(&o).unwrap_err();
        let e = err(o(&[], "/a\n"));
        assert_eq!(e.flag, "--urls");
        assert!(e.message.contains("p.txt line 1") && e.message.contains("give a URL"), "{e:?}");
        let e = err(o(&["http://127.0.0.1:1/", "http://127.0.0.1:2/"], "/a\n"));
        assert!(e.message.contains("give one URL"), "{e:?}");
        let e = err(o(&["http://127.0.0.1:1/"], "# nothing\n\n"));
        assert!(e.message.contains("p.txt has no URL or path"), "{e:?}");
        let e = err(o(&["http://127.0.0.1:1/"], "/a\nftp://127.0.0.1/x\n"));
        assert!(e.message.contains("p.txt line 2") && e.message.contains("http://"), "{e:?}");
        // Paths on the URL's host, URLs as they are, scheme-less ones as http://; the URL given
        // is the base only.
        let (t, notes) =
            build(&o(&["http://127.0.0.1:1/base"], "/a?x=1\n127.0.0.1:2/b\n# c\n")).unwrap();
        let urls: Vec<&str> = (0..t.len()).map(|i| t.url(i)).collect();
        assert_eq!(urls, ["http://127.0.0.1:1/a?x=1", "http://127.0.0.1:2/b"]);
        assert!((0..t.len()).all(|i| t.pool(i)));
        assert_eq!(notes, ["1 line(s) of p.txt have no scheme: taken as http://"]);
        let first = request(&t.target(0));
        assert!(first.starts_with("GET /a?x=1 HTTP/1.1\r\n"), "{first}");
    }

    /// `{seq}` and `{rand}` become slots where the encodings carry their digits: the path in
    /// the request line and in the raw `:path`, a header value, the body; the host is refused.
    #[test]
    fn ids_are_slots_in_every_encoding() {
        let hs = [HeaderArg { name: "X-Id".into(), value: "k{rand:4:9}".into() }];
        let req = Req {
            url: "http://u:p@127.0.0.1:1/i/{seq}?q=1",
            method: "POST",
            headers: &hs,
            body: b"id={seq:7}",
            grpc: 0,
            gzip: false,
        };
        let t = resolve_target(req, 1, None, 0, &mut Resolved::default()).unwrap();
        let tm = t.template.as_ref().unwrap();
        let text = request(&t);
        let at = |s: &template::Slot| &text[s.at..s.at + s.width as usize];
        assert_eq!(tm.h1.len(), 3, "{tm:?}");
        assert!(tm.h1.iter().all(|s| at(s).bytes().all(|b| b == b'0')), "{text}");
        assert_eq!(&text[tm.h1[0].at - 3..tm.h1[0].at], "/i/");
        assert!(text.contains("Content-Length: 15\r\n"), "{text}");
        assert_eq!(tm.h2.len(), 2, "path and header: {tm:?}");
        assert_eq!(
            tm.body,
            [template::Slot { at: 3, width: 12, kind: template::Kind::Seq { start: 7 } }]
        );
        assert_eq!(t.url, "http://127.0.0.1:1/i/{seq}?q=1", "as written, without credentials");
        let mut one = t.request.clone();
        template::Template::write(&tm.h1, 5, None, &mut one);
        let one = String::from_utf8(one).unwrap();
        assert!(one.starts_with("POST /i/000000000005?q=1 "), "{one}");
        assert!(one.ends_with("id=000000000012"), "{one}");
        let host = Req {
            url: "http://{seq}.x:1/",
            method: "GET",
            headers: &[],
            body: b"",
            grpc: 0,
            gzip: false,
        };
        let e = resolve_target(host, 1, None, 0, &mut Resolved::default()).unwrap_err();
        assert!(e.message.contains("not the host"), "{e:?}");
        let bad = [HeaderArg { name: "X".into(), value: "{rand:99}".into() }];
        let req = Req {
            url: "http://127.0.0.1:1/",
            method: "GET",
            headers: &bad,
            body: b"",
            grpc: 0,
            gzip: false,
        };
        let e = resolve_target(req, 1, None, 0, &mut Resolved::default()).unwrap_err();
        assert_eq!(e.flag, "--header");
        assert!(e.message.contains("WIDTH is 1 to 19"), "{e:?}");
    }

    /// Variants keep what they were given; endpoints and a body repeated in a row are held once.
    #[test]
    fn variants_keep_what_they_were_given_and_share_endpoints_and_bodies() {
        let o = LoadOptions {
            urls: vec![
                "http://127.0.0.1:1/a".into(),
                "http://127.0.0.1:1/b".into(),
                "http://127.0.0.1:2/c".into(),
            ],
            body: Some(crate::options::Body(b"x=1".to_vec())),
            method: "POST".into(),
            ..LoadOptions::default()
        };
        let (v, _) = build(&o).unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v.endpoints().count(), 2);
        assert_eq!(v.endpoint_of(0), v.endpoint_of(1));
        assert_ne!(v.endpoint_of(1), v.endpoint_of(2));
        assert_eq!(v.url(1), "http://127.0.0.1:1/b");
        assert_eq!(v.method(2), "POST");
        assert!(!v.idempotent(0) && !v.head(0) && !v.pool(0));
        assert!(v.h1(2).starts_with(b"POST /c HTTP/1.1\r\n"));
        assert_eq!(v.body(2), b"x=1");
        let encodings: usize = (0..3).map(|i| v.h1(i).len() + v.h2(i).len()).sum();
        assert_eq!(v.encoded_bytes(), encodings + 3, "one body for the three");
        let t = v.target(1);
        assert_eq!((t.url.as_str(), t.weight, &*t.body), ("http://127.0.0.1:1/b", 1, &b"x=1"[..]));
        let mut w = v.clone();
        w.drop_encodings();
        assert_eq!((w.h1(0), w.url(2)), (&[][..], "http://127.0.0.1:2/c"));
        assert_eq!(w.encoded_bytes(), v.encoded_bytes());
    }
}
