//! One target: where to connect and the bytes of its request, resolved once before the run from
//! the URLs on the command line and the lines of a targets file, with the headers and body the
//! user gave. URLs without a scheme are taken as `http://`, as curl takes them.

use std::net::{SocketAddr, ToSocketAddrs};

use qpslab_http::{HeaderArg, RequestSpec};
use qpslab_sys::config_error::ConfigError;

use crate::options::LoadOptions;
use crate::targets_file::{self, TargetLine};

/// One target: where to connect and the bytes of its request.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    pub method: String,
    pub addr: SocketAddr,
    /// The encoded request, written as is for every request.
    pub request: Vec<u8>,
    /// Its HTTP/2 header block, the same for every request of a connection.
    pub h2_block: Vec<u8>,
    /// Its body (HTTP/2 sends it in DATA frames, as the windows allow).
    pub body: std::sync::Arc<[u8]>,
    /// HEAD requests get responses without a body.
    pub head: bool,
    /// Share of the requests relative to the other targets (`weight=N` in a targets file).
    pub weight: u32,
    /// https: the name its connections send (SNI) and verify the certificate against.
    pub tls_name: Option<rustls::pki_types::ServerName<'static>>,
    /// A line of the `--urls` pool: reported with its group, not on a row of its own.
    pub pool: bool,
}

/// Builds every target, command-line URLs first (or the `--urls` pool in their place), then
/// the targets file's; also returns notes for the user (a URL taken as `http://`).
pub fn build(o: &LoadOptions) -> Result<(Vec<Target>, Vec<String>), ConfigError> {
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
        cache: Resolved::new(),
        notes: Vec::new(),
    };
    let mut targets = match &o.urls_file {
        Some(pool) => b.pool(pool)?,
        None => {
            let lines: Vec<TargetLine> = o
                .urls
                .iter()
                .map(|u| TargetLine {
                    method: o.method.clone(),
                    url: u.clone(),
                    headers: Vec::new(),
                    weight: 1,
                })
                .collect();
            b.lines(lines, "URL")?
        }
    };
    if let Some(file) = &o.targets {
        targets.extend(b.lines(targets_file::read_file(file)?, "--targets")?);
    }
    Ok((targets, b.notes))
}

/// Host names already looked up: a pool names its host on every line.
type Resolved = std::collections::HashMap<(String, u16), SocketAddr>;

/// What every target is built with: the options' headers and body, the host names resolved so
/// far, and the notes for the user.
struct Builder<'a> {
    o: &'a LoadOptions,
    headers: Vec<HeaderArg>,
    body: &'a [u8],
    cache: Resolved,
    notes: Vec<String>,
}

impl Builder<'_> {
    /// The targets of `lines`, errors named after `flag`.
    fn lines(
        &mut self,
        lines: Vec<TargetLine>,
        flag: &'static str,
    ) -> Result<Vec<Target>, ConfigError> {
        let sni = self.o.tls.sni.as_deref();
        lines
            .into_iter()
            .map(|mut l| {
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
                resolve_target(&l.url, &l.method, &hs, self.body, l.weight, sni, &mut self.cache)
                    .map_err(
                        |e| if e.flag == "--sni" { e } else { ConfigError::new(flag, e.message) },
                    )
            })
            .collect()
    }

    /// The `--urls` pool: a URL, or a path on the command line's URL's host, per line; each
    /// with the method, headers and body of the command line.
    fn pool(&mut self, pool: &crate::options::FileText) -> Result<Vec<Target>, ConfigError> {
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
        let mut out = Vec::new();
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
            let mut t =
                resolve_target(&url, &o.method, &self.headers, self.body, 1, sni, &mut self.cache)
                    .map_err(|e| if e.flag == "--sni" { e } else { at(e.message) })?;
            t.pool = true;
            out.push(t);
        }
        if out.is_empty() {
            return Err(err(format!(
                "{} has no URL or path; write one per line, e.g. /item/1",
                pool.name
            )));
        }
        if bare > 0 {
            self.notes
                .push(format!("{bare} line(s) of {} have no scheme: taken as http://", pool.name));
        }
        Ok(out)
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

/// How many distinct addresses the targets have (each needs a connection of its own).
pub fn distinct_addresses(targets: &[Target]) -> usize {
    let mut addrs: Vec<SocketAddr> = targets.iter().map(|t| t.addr).collect();
    addrs.sort();
    addrs.dedup();
    addrs.len()
}

/// Whether a request with `method` may be sent again after its connection failed (RFC 9110
/// 9.2.2: safe methods, PUT and DELETE).
pub fn idempotent(method: &str) -> bool {
    matches!(method, "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE")
}

/// `localhost:8080/x` -> `http://localhost:8080/x`, as curl reads a URL without a scheme; None
/// when the URL has one.
fn with_default_scheme(url: &str) -> Option<String> {
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

fn resolve_target(
    raw: &str,
    method: &str,
    headers: &[HeaderArg],
    body: &[u8],
    weight: u32,
    sni: Option<&str>,
    cache: &mut Resolved,
) -> Result<Target, ConfigError> {
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
    // Host names resolve once, before the run; the first address is used.
    let lookup = host.trim_start_matches('[').trim_end_matches(']');
    let addr = match cache.get(&(lookup.to_string(), port)) {
        Some(a) => *a,
        None => {
            let a = (lookup, port)
                .to_socket_addrs()
                .map_err(|e| ConfigError::new("URL", format!("cannot resolve host {host:?}: {e}")))?
                .next()
                .ok_or_else(|| ConfigError::new("URL", format!("host {host:?} has no address")))?;
            cache.insert((lookup.to_string(), port), a);
            a
        }
    };
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
        body: body.to_vec(),
    };
    let request = spec.encode().map_err(|e| ConfigError::new("--method", e.to_string()))?;
    let h2_block =
        spec.encode_h2(https).map_err(|e| ConfigError::new("--method", e.to_string()))?;
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
            resolve_target(url, "GET", hs, &[], 1, None, &mut Resolved::new()).unwrap()
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
        assert!(request(&t[0]).contains("\r\nUser-Agent: probe/1\r\n"), "{}", request(&t[0]));
        let (t, _) = build(&o(vec!["user-agent: mine".into()])).unwrap();
        assert!(!request(&t[0]).contains("probe/1"), "{}", request(&t[0]));
    }

    /// A pool's bad input is named with its flag, file and line, and the fix.
    #[test]
    fn a_pool_refuses_what_it_cannot_request() {
        let file =
            |text: &str| crate::options::FileText { name: "p.txt".into(), text: text.into() };
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
        let urls: Vec<&str> = t.iter().map(|t| t.url.as_str()).collect();
        assert_eq!(urls, ["http://127.0.0.1:1/a?x=1", "http://127.0.0.1:2/b"]);
        assert!(t.iter().all(|t| t.pool));
        assert_eq!(notes, ["1 line(s) of p.txt have no scheme: taken as http://"]);
        assert!(request(&t[0]).starts_with("GET /a?x=1 HTTP/1.1\r\n"), "{}", request(&t[0]));
    }
}
