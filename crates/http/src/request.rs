//! Request encoding: a request is turned into bytes once, before the run, and written as is.
//!
//! Owns the validation of user-supplied methods and header lines (no CR, LF or NUL can reach the
//! wire) and the defaults: `Host` from the URL and `Content-Length` when there is a body, each
//! replaced when the user gives the same header.

use thiserror::Error;

/// Why a request cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RequestError {
    #[error("method {0:?} is not an HTTP token (letters, digits and !#$%&'*+-.^_`|~ only)")]
    Method(String),
    #[error("header {0:?} has no ':' between name and value; write it as 'Name: value'")]
    HeaderNoColon(String),
    #[error("header name {0:?} is not an HTTP token")]
    HeaderName(String),
    #[error("header {0:?} has a CR, LF or NUL byte in its value")]
    HeaderValue(String),
}

/// One `Name: value` header given by the user (`-H`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderArg {
    pub name: String,
    pub value: String,
}

impl HeaderArg {
    /// Parses `Name: value`; the value is trimmed of surrounding blanks.
    pub fn parse(line: &str) -> Result<Self, RequestError> {
        let (name, value) =
            line.split_once(':').ok_or_else(|| RequestError::HeaderNoColon(line.to_string()))?;
        if name.is_empty() || !name.bytes().all(crate::is_tchar) {
            return Err(RequestError::HeaderName(name.to_string()));
        }
        let value = value.trim_matches(|c| c == ' ' || c == '\t');
        if value.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
            return Err(RequestError::HeaderValue(line.to_string()));
        }
        Ok(Self { name: name.to_string(), value: value.to_string() })
    }
}

/// Everything that makes up one request on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestSpec {
    pub method: String,
    /// Origin-form target: path and optional `?query`.
    pub target: String,
    /// Default `Host` value, normally the URL's authority.
    pub host: String,
    pub headers: Vec<HeaderArg>,
    pub body: Vec<u8>,
}

impl RequestSpec {
    /// Whether responses to this request never carry a body (RFC 9110 section 9.3.2).
    pub fn is_head(&self) -> bool {
        self.method == "HEAD"
    }

    /// Validates the method and encodes the request as HTTP/1.1 bytes.
    pub fn encode(&self) -> Result<Vec<u8>, RequestError> {
        if self.method.is_empty() || !self.method.bytes().all(crate::is_tchar) {
            return Err(RequestError::Method(self.method.clone()));
        }
        let has = |name: &str| self.headers.iter().any(|h| h.name.eq_ignore_ascii_case(name));
        let mut out = Vec::with_capacity(64 + self.target.len() + self.body.len());
        let mut line = |parts: &[&[u8]]| {
            for p in parts {
                out.extend_from_slice(p);
            }
            out.extend_from_slice(b"\r\n");
        };
        line(&[self.method.as_bytes(), b" ", self.target.as_bytes(), b" HTTP/1.1"]);
        if !has("host") {
            line(&[b"Host: ", self.host.as_bytes()]);
        }
        for h in &self.headers {
            line(&[h.name.as_bytes(), b": ", h.value.as_bytes()]);
        }
        let wants_length = !self.body.is_empty() || matches!(self.method.as_str(), "POST" | "PUT");
        if wants_length && !has("content-length") && !has("transfer-encoding") {
            let len = self.body.len().to_string();
            line(&[b"Content-Length: ", len.as_bytes()]);
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        Ok(out)
    }

    /// The HTTP/2 header block of the request (RFC 9113 8.3): the pseudo-header fields, then
    /// the user's headers with lower-case names, encoded once with static-table indices and
    /// literals that are never added to the dynamic table, so the block is the same for every
    /// request of a connection. A `Host` header becomes `:authority`; the fields HTTP/2 forbids
    /// (`Connection`, `Keep-Alive`, `Proxy-Connection`, `Transfer-Encoding`, `Upgrade`) are left
    /// out; a body gets `content-length` unless the user gave one.
    pub fn encode_h2(&self, https: bool) -> Result<Vec<u8>, RequestError> {
        self.encode_h2_with(https, true)
    }

    /// As [`RequestSpec::encode_h2`], every string raw (no Huffman coding): a value's bytes
    /// are in the block as written, so a request can write digits into them in place.
    pub fn encode_h2_raw(&self, https: bool) -> Result<Vec<u8>, RequestError> {
        self.encode_h2_with(https, false)
    }

    fn encode_h2_with(&self, https: bool, huffman: bool) -> Result<Vec<u8>, RequestError> {
        use crate::h2::hpack::{indexed, literal_with, static_field, static_name, Indexing};
        if self.method.is_empty() || !self.method.bytes().all(crate::is_tchar) {
            return Err(RequestError::Method(self.method.clone()));
        }
        let mut out = Vec::with_capacity(32 + self.target.len() + self.host.len());
        let field = |out: &mut Vec<u8>, name: &[u8], value: &[u8]| match static_field(name, value) {
            Some(i) => indexed(out, i),
            None => {
                let at = static_name(name).unwrap_or(0);
                literal_with(out, Indexing::Without, at, name, value, huffman);
            }
        };
        let host = self.headers.iter().find(|h| h.name.eq_ignore_ascii_case("host"));
        let authority = host.map_or(self.host.as_str(), |h| h.value.as_str());
        field(&mut out, b":method", self.method.as_bytes());
        field(&mut out, b":scheme", if https { b"https" } else { b"http" });
        field(&mut out, b":path", self.target.as_bytes());
        field(&mut out, b":authority", authority.as_bytes());
        const FORBIDDEN: [&str; 6] = [
            "host",
            "connection",
            "keep-alive",
            "proxy-connection",
            "transfer-encoding",
            "upgrade",
        ];
        let mut has_length = false;
        for h in &self.headers {
            let name = h.name.to_ascii_lowercase();
            if FORBIDDEN.contains(&name.as_str()) {
                continue;
            }
            has_length |= name == "content-length";
            field(&mut out, name.as_bytes(), h.value.as_bytes());
        }
        let wants_length = !self.body.is_empty() || matches!(self.method.as_str(), "POST" | "PUT");
        if wants_length && !has_length {
            field(&mut out, b"content-length", self.body.len().to_string().as_bytes());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(method: &str, headers: &[&str], body: &[u8]) -> RequestSpec {
        RequestSpec {
            method: method.into(),
            target: "/a?b=1".into(),
            host: "127.0.0.1:8080".into(),
            headers: headers.iter().map(|h| HeaderArg::parse(h).unwrap()).collect(),
            body: body.to_vec(),
        }
    }

    #[test]
    fn get_has_only_host() {
        let bytes = spec("GET", &[], b"").encode().unwrap();
        assert_eq!(bytes, b"GET /a?b=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n");
    }

    #[test]
    fn user_headers_replace_defaults() {
        let bytes = spec("POST", &["host: example", "Content-Length: 2"], b"hi").encode().unwrap();
        assert_eq!(bytes, b"POST /a?b=1 HTTP/1.1\r\nhost: example\r\nContent-Length: 2\r\n\r\nhi");
    }

    #[test]
    fn body_gets_content_length() {
        let bytes = spec("PATCH", &["X-A:  v "], b"abc").encode().unwrap();
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.contains("X-A: v\r\n"), "{text}");
        assert!(text.ends_with("Content-Length: 3\r\n\r\nabc"), "{text}");
    }

    /// The block decodes (by the HPACK decoder) to the pseudo-header fields first, the host as
    /// :authority, lower-case names, no connection-specific field, and a content-length.
    #[test]
    fn the_h2_block_decodes_to_the_request() {
        let s = spec("POST", &["Host: example", "Connection: close", "X-Tag: v"], b"hi");
        let block = s.encode_h2(true).unwrap();
        let mut d = crate::h2::hpack::Decoder::new(4096, 1 << 16);
        let mut fields = Vec::new();
        d.decode(&block, &mut |n, v| {
            fields.push(format!("{}={}", String::from_utf8_lossy(n), String::from_utf8_lossy(v)))
        })
        .unwrap();
        assert_eq!(
            fields,
            [
                ":method=POST",
                ":scheme=https",
                ":path=/a?b=1",
                ":authority=example",
                "x-tag=v",
                "content-length=2"
            ]
        );
        // GET / over http is three static-table indices and the authority.
        let mut get = spec("GET", &[], b"");
        get.target = "/".into();
        let block = get.encode_h2(false).unwrap();
        assert_eq!(&block[..3], &[0x82, 0x86, 0x84]);
        assert_eq!(d.table_size(), 0, "nothing went into the dynamic table");
    }

    #[test]
    fn bad_header_lines_are_rejected() {
        assert!(matches!(HeaderArg::parse("NoColon"), Err(RequestError::HeaderNoColon(_))));
        assert!(matches!(HeaderArg::parse(": v"), Err(RequestError::HeaderName(_))));
        assert!(matches!(HeaderArg::parse("A B: v"), Err(RequestError::HeaderName(_))));
        assert!(matches!(HeaderArg::parse("A: v\r\nX: y"), Err(RequestError::HeaderValue(_))));
        assert_eq!(spec("G T", &[], b"").encode(), Err(RequestError::Method("G T".into())));
    }
}
