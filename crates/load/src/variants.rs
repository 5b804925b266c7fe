//! A run's requests, each line of a pool or a targets file and each URL a variant: where it
//! goes (an [`Endpoint`], shared by every variant of one address), what it is for the report
//! (URL, method, weight, pool membership) and its encodings, held in a few arenas instead of a
//! value per variant, so that a pool of a million lines costs its bytes and a few offsets.
//! The encodings are laid out again in each address's cycle ([`crate::targets::Group`]) and
//! then dropped here: the run reads them there.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::ServerName;

use crate::template::Template;

/// The most bytes an arena holds: its offsets are 32-bit.
pub const ARENA_MAX: usize = u32::MAX as usize;

/// Byte strings one after the other in one buffer (at most [`ARENA_MAX`] bytes).
#[derive(Debug, Clone, Default)]
pub struct Arena {
    bytes: Vec<u8>,
    /// End of string i in `bytes` (its start is the end of i - 1).
    ends: Vec<u32>,
}

impl Arena {
    /// An arena with room for `n` strings of `bytes` bytes in all.
    pub fn with_capacity(n: usize, bytes: usize) -> Arena {
        Arena { bytes: Vec::with_capacity(bytes), ends: Vec::with_capacity(n) }
    }

    /// Past [`ARENA_MAX`] bytes the offsets wrap: the caller checks [`Arena::bytes`] first.
    pub fn push(&mut self, s: &[u8]) {
        self.bytes.extend_from_slice(s);
        self.ends.push(self.bytes.len() as u32);
    }

    #[inline]
    pub fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.bytes[start..self.ends[i] as usize]
    }

    /// Bytes of its strings.
    pub fn bytes(&self) -> usize {
        self.bytes.len()
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Bytes held, offsets included.
    pub fn footprint(&self) -> usize {
        self.bytes.capacity() + self.ends.capacity() * 4
    }

    fn shrink(&mut self) {
        self.bytes.shrink_to_fit();
        self.ends.shrink_to_fit();
    }
}

/// One variant as the builder hands it over: where to connect and the bytes of its request.
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
    /// `{seq}` and `{rand:...}` IDs: where each request writes its digits.
    pub template: Option<std::sync::Arc<Template>>,
    /// A targets-file line's `name=`.
    pub name: Option<String>,
    /// Its line in its file (`--urls`, `--body-lines`, `--targets`; from 1), 0 for a URL of
    /// the command line.
    pub line: u32,
}

/// Whether a request with `method` may be sent again after its connection failed (RFC 9110
/// 9.2.2: safe methods, PUT and DELETE).
pub fn idempotent(method: &str) -> bool {
    matches!(method, "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE")
}

/// Where requests go: an address, and with https the name its connections send and verify.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub addr: SocketAddr,
    pub tls_name: Option<ServerName<'static>>,
}

const HEAD: u8 = 1;
const POOL: u8 = 2;
const IDEMPOTENT: u8 = 4;
const NO_NAME: u32 = u32::MAX;

/// Every request variant of a run, in the order given (command-line URLs or the pool, then the
/// targets file).
#[derive(Debug, Clone, Default)]
pub struct Variants {
    endpoints: Vec<Endpoint>,
    /// The first URL of each endpoint, to name it in messages.
    endpoint_urls: Vec<String>,
    endpoint_index: HashMap<Endpoint, u32>,
    endpoint: Vec<u32>,
    urls: Arena,
    methods: Vec<String>,
    method: Vec<u8>,
    weight: Vec<u32>,
    flags: Vec<u8>,
    /// The encodings, until the groups took them ([`Variants::drop_encodings`]).
    h1: Arena,
    h2: Arena,
    /// Each variant's body in `bodies` (a body equal to the previous one is not kept twice).
    body_of: Vec<u32>,
    bodies: Arena,
    /// Each variant's IDs; empty while no variant has any.
    templates: Vec<Option<Arc<Template>>>,
    /// Each variant's name in `names` ([`NO_NAME`]: none); empty while no variant has one.
    name_of: Vec<u32>,
    names: Vec<String>,
    name_index: HashMap<String, u32>,
    /// Each variant's line in its file.
    line: Vec<u32>,
    /// Encoded bytes of every variant (HTTP/1.1 request, HTTP/2 header block, a body of its
    /// own), kept after the encodings go.
    encoded: usize,
}

impl Variants {
    pub fn push(&mut self, t: Target) {
        let ep = Endpoint { addr: t.addr, tls_name: t.tls_name };
        let e = match self.endpoint_index.get(&ep) {
            Some(&e) => e,
            None => {
                let e = self.endpoints.len() as u32;
                self.endpoint_index.insert(ep.clone(), e);
                self.endpoints.push(ep);
                self.endpoint_urls.push(t.url.clone());
                e
            }
        };
        self.endpoint.push(e);
        self.urls.push(t.url.as_bytes());
        let m = match self.methods.iter().position(|m| *m == t.method) {
            Some(m) => m,
            None => {
                self.methods.push(t.method.clone());
                self.methods.len() - 1
            }
        };
        // More than 256 distinct methods: the rest share the last slot's name (never seen).
        self.method.push(m.min(255) as u8);
        self.weight.push(t.weight);
        self.line.push(t.line);
        let idem = idempotent(&t.method);
        self.flags.push(
            (u8::from(t.head) * HEAD) | (u8::from(t.pool) * POOL) | (u8::from(idem) * IDEMPOTENT),
        );
        self.encoded += t.request.len() + t.h2_block.len();
        self.h1.push(&t.request);
        self.h2.push(&t.h2_block);
        let last = self.bodies.len().checked_sub(1);
        match last.filter(|&b| self.bodies.get(b) == &t.body[..]) {
            Some(b) => self.body_of.push(b as u32),
            None => {
                self.encoded += t.body.len();
                self.bodies.push(&t.body);
                self.body_of.push(self.bodies.len() as u32 - 1);
            }
        }
        if t.template.is_some() || !self.templates.is_empty() {
            // The first with IDs: every variant before it has none.
            self.templates.resize(self.endpoint.len() - 1, None);
            self.templates.push(t.template);
        }
        if t.name.is_some() || !self.name_of.is_empty() {
            self.name_of.resize(self.endpoint.len() - 1, NO_NAME);
            let n = t.name.map_or(NO_NAME, |name| {
                let next = self.names.len() as u32;
                let at = *self.name_index.entry(name.clone()).or_insert(next);
                if at == next {
                    self.names.push(name);
                }
                at
            });
            self.name_of.push(n);
        }
    }

    /// A targets-file line's `name=`.
    pub fn name(&self, i: usize) -> Option<&str> {
        let n = *self.name_of.get(i)?;
        self.names.get(n as usize).map(String::as_str)
    }

    /// Variant `i` as a target again.
    #[cfg(test)]
    pub fn target(&self, i: usize) -> Target {
        let ep = self.endpoint(i);
        Target {
            url: self.url(i).to_string(),
            method: self.method(i).to_string(),
            addr: ep.addr,
            request: self.h1(i).to_vec(),
            h2_block: self.h2(i).to_vec(),
            body: self.body(i).into(),
            head: self.head(i),
            weight: self.weight(i),
            tls_name: ep.tls_name.clone(),
            pool: self.pool(i),
            template: self.template(i).cloned(),
            name: self.name(i).map(String::from),
            line: self.line(i),
        }
    }

    /// Its line in its file (from 1), 0 for a URL of the command line.
    pub fn line(&self, i: usize) -> u32 {
        self.line[i]
    }

    pub fn len(&self) -> usize {
        self.endpoint.len()
    }

    pub fn is_empty(&self) -> bool {
        self.endpoint.is_empty()
    }

    pub fn url(&self, i: usize) -> &str {
        std::str::from_utf8(self.urls.get(i)).unwrap_or("")
    }

    pub fn method(&self, i: usize) -> &str {
        &self.methods[usize::from(self.method[i])]
    }

    pub fn weight(&self, i: usize) -> u32 {
        self.weight[i]
    }

    /// A HEAD request: its response has no body.
    pub fn head(&self, i: usize) -> bool {
        self.flags[i] & HEAD != 0
    }

    /// A line of the pool: reported with its group, not on a row of its own.
    pub fn pool(&self, i: usize) -> bool {
        self.flags[i] & POOL != 0
    }

    /// May be sent again after its connection failed ([`idempotent`]).
    pub fn idempotent(&self, i: usize) -> bool {
        self.flags[i] & IDEMPOTENT != 0
    }

    pub fn endpoint_of(&self, i: usize) -> usize {
        self.endpoint[i] as usize
    }

    pub fn endpoint(&self, i: usize) -> &Endpoint {
        &self.endpoints[self.endpoint[i] as usize]
    }

    pub fn addr(&self, i: usize) -> SocketAddr {
        self.endpoint(i).addr
    }

    /// Every endpoint, with the first URL that named it.
    pub fn endpoints(&self) -> impl Iterator<Item = (&Endpoint, &str)> {
        self.endpoints.iter().zip(self.endpoint_urls.iter().map(String::as_str))
    }

    /// Its HTTP/1.1 request (empty once the groups took the encodings).
    pub fn h1(&self, i: usize) -> &[u8] {
        if self.h1.is_empty() {
            return &[];
        }
        self.h1.get(i)
    }

    /// Its HTTP/2 header block (empty once the groups took the encodings).
    pub fn h2(&self, i: usize) -> &[u8] {
        if self.h2.is_empty() {
            return &[];
        }
        self.h2.get(i)
    }

    pub fn body(&self, i: usize) -> &[u8] {
        if self.bodies.is_empty() {
            return &[];
        }
        self.bodies.get(self.body_of[i] as usize)
    }

    pub fn template(&self, i: usize) -> Option<&Arc<Template>> {
        self.templates.get(i).and_then(Option::as_ref)
    }

    /// Some variant carries `{seq}`/`{rand}` IDs.
    pub fn templated(&self) -> bool {
        self.templates.iter().any(Option::is_some)
    }

    /// Encoded bytes of every variant (HTTP/1.1 request and HTTP/2 header block each, a body
    /// once however many variants in a row send it).
    pub fn encoded_bytes(&self) -> usize {
        self.encoded
    }

    /// The most bytes one of its arenas holds (at most [`ARENA_MAX`]).
    pub fn largest_arena(&self) -> usize {
        self.urls.bytes().max(self.h1.bytes()).max(self.h2.bytes()).max(self.bodies.bytes())
    }

    /// Gives back the room its arenas grew into and did not use (before the groups are laid
    /// out, which is when the run holds the most).
    pub fn shrink(&mut self) {
        for a in [&mut self.urls, &mut self.h1, &mut self.h2, &mut self.bodies] {
            a.shrink();
        }
        for v in [&mut self.endpoint, &mut self.weight, &mut self.body_of, &mut self.line] {
            v.shrink_to_fit();
        }
        self.method.shrink_to_fit();
        self.flags.shrink_to_fit();
        self.templates.shrink_to_fit();
    }

    /// The encodings go: the groups hold them in their cycles now.
    pub fn drop_encodings(&mut self) {
        self.h1 = Arena::default();
        self.h2 = Arena::default();
        self.bodies = Arena::default();
        self.body_of = Vec::new();
        self.endpoint_index = HashMap::new();
        self.name_index = HashMap::new();
    }
}
