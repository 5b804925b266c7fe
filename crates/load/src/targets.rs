//! Many targets: how requests are spread over them.
//!
//! Targets that share an address form a group. Connections are dealt to groups in proportion to
//! the groups' weights (every group gets at least one); on a connection, requests cycle through
//! its group's targets in smooth weighted round-robin order (nginx's upstream algorithm), each
//! connection starting at a different point of the cycle. A group's requests are laid out once,
//! in cycle order, in one buffer, so k consecutive requests are one contiguous slice to write.
//!
//! Does not read the `--targets` file (`targets_file` does) nor resolve URLs and encode requests
//! (`target` does).

use crate::seed::SplitMix;
use crate::variants::{Arena, Endpoint, Variants};
use std::net::SocketAddr;

/// `weights.len()` items dealt in smooth weighted round-robin order: over `sum(weights)` picks,
/// item i is picked exactly `weights[i]` times, as evenly spread as the weights allow.
pub fn smooth_order(weights: &[u64]) -> Vec<usize> {
    let total: u64 = weights.iter().sum();
    let mut current = vec![0i64; weights.len()];
    let mut out = Vec::with_capacity(total as usize);
    for _ in 0..total {
        for (c, &w) in current.iter_mut().zip(weights) {
            *c += w as i64;
        }
        let Some(best) = (0..weights.len()).max_by_key(|&i| (current[i], std::cmp::Reverse(i)))
        else {
            break;
        };
        current[best] -= total as i64;
        out.push(best);
    }
    out
}

/// Variants sharing one address, with their requests laid out in cycle order: where its
/// connections go ([`Endpoint`]), which requests they send in which order ([`Cycle`]), and
/// each protocol's encoding of that cycle, built once ([`H1Wire`], [`H2Blocks`]). A protocol
/// added later brings an encoding of its own; the endpoint and the cycle stay.
#[derive(Debug, Clone)]
pub struct Group {
    /// Its address, and with https the TLS server name of its connections (its variants
    /// agree: [`check_schemes`]).
    pub endpoint: Endpoint,
    /// Where its connections go: the endpoint's address, or the `--unix-socket`.
    pub peer: socket2::SockAddr,
    pub cycle: Cycle,
    pub h1: H1Wire,
    pub h2: H2Blocks,
}

/// A group's request cycle: the variant at each position, their IDs, their weight.
#[derive(Debug, Clone)]
pub struct Cycle {
    /// Variant index at each position.
    pub variants: Vec<u32>,
    /// `{seq}`/`{rand}` IDs of position p's request (empty: the group has none, and every
    /// request goes from its encoding as it is).
    pub templates: Vec<Option<std::sync::Arc<crate::template::Template>>>,
    /// Sum of the weights of its variants.
    pub weight: u64,
}

impl Cycle {
    /// Positions in the cycle.
    #[inline]
    pub fn len(&self) -> usize {
        self.variants.len()
    }

    pub fn is_empty(&self) -> bool {
        self.variants.is_empty()
    }

    /// The variant at position `pos`.
    #[inline]
    pub fn variant(&self, pos: usize) -> u32 {
        self.variants[pos]
    }
}

/// HTTP/1.1's encoding of a cycle.
#[derive(Debug, Clone)]
pub struct H1Wire {
    /// Requests of the cycle followed by the first `pipeline` again, so any run of up to
    /// `pipeline` consecutive requests is one slice. Shared: an io_uring send holds a reference
    /// until the kernel is done with it.
    pub wire: std::sync::Arc<[u8]>,
    /// Start of position p's request in `wire` (`cycle.len() + pipeline + 1` entries).
    pub offsets: Vec<usize>,
    /// The longest request's bytes, for a connection that writes its own copies.
    pub longest: usize,
}

/// HTTP/2's encoding of a cycle.
#[derive(Debug, Clone)]
pub struct H2Blocks {
    /// The header block of position p's request.
    blocks: Arena,
    /// Position p's body in `bodies` (sent in DATA frames; HTTP/1.1's is in its wire).
    body_of: Vec<u32>,
    bodies: Arena,
    /// Some request of the group has a body (else HTTP/2 never looks for one to send).
    pub has_body: bool,
    /// The common case of IDs: where position p's header block has its one `{seq}` and how
    /// wide it is (width 0: not that case; empty without IDs).
    seq: Vec<(u32, u8)>,
    /// The same, when every position has its `{seq}` at the same place (one lookup less).
    seq_all: Option<(usize, usize)>,
}

impl Group {
    /// Its requests carry IDs: each is written from a copy of its own.
    #[inline]
    pub fn templated(&self) -> bool {
        !self.cycle.templates.is_empty()
    }

    /// The HTTP/1.1 bytes of `k` requests from cycle position `pos`.
    #[inline]
    pub fn slice(&self, pos: usize, k: usize) -> (usize, usize) {
        (self.h1.offsets[pos], self.h1.offsets[pos + k])
    }

    /// The HTTP/2 header block of position `pos`'s request.
    #[inline]
    pub fn h2_block(&self, pos: usize) -> &[u8] {
        self.h2.blocks.get(pos)
    }

    /// The body of position `pos`'s request.
    #[inline]
    pub fn body(&self, pos: usize) -> &[u8] {
        self.h2.bodies.get(self.h2.body_of[pos] as usize)
    }

    /// The IDs of position `pos`'s request.
    #[inline]
    pub fn template(&self, pos: usize) -> Option<&crate::template::Template> {
        self.cycle.templates.get(pos).and_then(Option::as_deref)
    }

    /// Where every position's HTTP/2 header block has its one `{seq}` (no other ID), and its
    /// width, when all agree.
    #[inline]
    pub fn h2_seq_all(&self) -> Option<(usize, usize)> {
        self.h2.seq_all
    }

    /// Where position `pos`'s HTTP/2 header block has its one `{seq}` (no other ID), and
    /// its width.
    #[inline]
    pub fn h2_seq(&self, pos: usize) -> Option<(usize, usize)> {
        if self.h2.seq_all.is_some() {
            return self.h2.seq_all;
        }
        let &(at, width) = self.h2.seq.get(pos)?;
        (width > 0).then_some((at as usize, usize::from(width)))
    }

    /// Bytes its requests take (HTTP/1.1 and HTTP/2 encodings, bodies, the cycle).
    pub fn footprint(&self) -> usize {
        self.h1.wire.len()
            + self.h1.offsets.capacity() * std::mem::size_of::<usize>()
            + self.cycle.variants.capacity() * 4
            + self.h2.blocks.footprint()
            + self.h2.body_of.capacity() * 4
            + self.h2.bodies.footprint()
            + self.cycle.templates.capacity() * std::mem::size_of::<usize>()
            + self.h2.seq.capacity() * std::mem::size_of::<(u32, u8)>()
    }
}

/// The order of a group's request cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(tag = "order", rename_all = "kebab-case")]
pub enum Order {
    /// As given (weights in smooth round-robin order).
    #[default]
    Seq,
    /// The cycle shuffled with this seed: the same seed, the same order.
    Random { seed: u64 },
}

impl Order {
    /// `seq`, `random` (a seed picked now) or `random:SEED`.
    pub fn parse(text: &str) -> Result<Order, String> {
        match text.split_once(':') {
            None if text == "seq" => Ok(Order::Seq),
            None if text == "random" => Ok(Order::Random { seed: crate::seed::fresh_seed() }),
            Some(("random", seed)) => seed
                .parse()
                .map(|seed| Order::Random { seed })
                .map_err(|_| format!("{text:?}: the seed is a whole number, e.g. random:42")),
            _ => Err(format!("{text:?}: give seq, random or random:SEED")),
        }
    }

    /// As `--order` takes it back.
    pub fn flag(&self) -> String {
        match self {
            Order::Seq => "seq".into(),
            Order::Random { seed } => format!("random:{seed}"),
        }
    }
}

/// `v` shuffled (Fisher-Yates) by a generator seeded with `seed`.
fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut rng = SplitMix(seed);
    for i in (1..v.len()).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

/// Groups variants by address, in order of first appearance, each group's requests in
/// `order`.
pub fn groups(
    v: &Variants,
    pipeline: usize,
    order: Order,
    unix: Option<&socket2::SockAddr>,
) -> Vec<Group> {
    let mut addrs: Vec<SocketAddr> = Vec::new();
    let mut of_endpoint = Vec::new();
    for (e, _) in v.endpoints() {
        let g = addrs.iter().position(|a| *a == e.addr).unwrap_or_else(|| {
            addrs.push(e.addr);
            addrs.len() - 1
        });
        of_endpoint.push(g);
    }
    let mut members: Vec<Vec<u32>> = vec![Vec::new(); addrs.len()];
    for i in 0..v.len() {
        members[of_endpoint[v.endpoint_of(i)]].push(i as u32);
    }
    addrs
        .into_iter()
        .zip(members)
        .map(|(addr, members)| {
            let weights: Vec<u64> =
                members.iter().map(|&i| u64::from(v.weight(i as usize))).collect();
            let g = weights.iter().copied().fold(0, gcd);
            // Equal weights (a pool's lines) are the members in turn: no need to deal them.
            let mut cycle: Vec<u32> = if weights.iter().all(|w| *w == g) {
                members.clone()
            } else {
                let reduced: Vec<u64> = weights.iter().map(|w| w / g).collect();
                smooth_order(&reduced).into_iter().map(|m| members[m]).collect()
            };
            if let Order::Random { seed } = order {
                shuffle(&mut cycle, seed);
            }
            lay_out(v, addr, cycle, pipeline, unix, weights.iter().sum())
        })
        .collect()
}

/// One address's group: its requests encoded in `cycle` order.
fn lay_out(
    v: &Variants,
    addr: SocketAddr,
    cycle: Vec<u32>,
    pipeline: usize,
    unix: Option<&socket2::SockAddr>,
    weight: u64,
) -> Group {
    let at = |p: usize| cycle[p % cycle.len()] as usize;
    let n = cycle.len() + pipeline;
    // Sized exactly: this is when the run holds the most (the variants' encodings too).
    let size = (0..n).map(|p| v.h1(at(p)).len()).sum();
    let mut wire: std::sync::Arc<[u8]> = std::iter::repeat_n(0u8, size).collect();
    let mut offsets = Vec::with_capacity(n + 1);
    offsets.push(0);
    if let Some(out) = std::sync::Arc::get_mut(&mut wire) {
        let mut end = 0;
        for p in 0..n {
            let r = v.h1(at(p));
            out[end..end + r.len()].copy_from_slice(r);
            end += r.len();
            offsets.push(end);
        }
    }
    let h2_size = cycle.iter().map(|&t| v.h2(t as usize).len()).sum();
    let mut h2 = Arena::with_capacity(cycle.len(), h2_size);
    let (mut bodies, mut body_of) = (Arena::default(), Vec::with_capacity(cycle.len()));
    for &t in &cycle {
        h2.push(v.h2(t as usize));
        let body = v.body(t as usize);
        if bodies.is_empty() || bodies.get(bodies.len() - 1) != body {
            bodies.push(body);
        }
        body_of.push(bodies.len() as u32 - 1);
    }
    let has_body = (0..bodies.len()).any(|b| !bodies.get(b).is_empty());
    let templates = if cycle.iter().any(|&t| v.template(t as usize).is_some()) {
        cycle.iter().map(|&t| v.template(t as usize).cloned()).collect()
    } else {
        Vec::new()
    };
    let h2_seq: Vec<(u32, u8)> =
        templates.iter().map(|t| t.as_deref().map_or((0, 0), one_seq)).collect();
    let h2_seq_all = match h2_seq.first() {
        Some(&(at, w)) if w > 0 && h2_seq.iter().all(|&s| s == (at, w)) => {
            Some((at as usize, usize::from(w)))
        }
        _ => None,
    };
    let longest = cycle.iter().map(|&t| v.h1(t as usize).len()).max().unwrap_or(0);
    let tls_name = v.endpoint(cycle[0] as usize).tls_name.clone();
    Group {
        endpoint: Endpoint { addr, tls_name },
        peer: unix.cloned().unwrap_or_else(|| socket2::SockAddr::from(addr)),
        cycle: Cycle { variants: cycle, templates, weight },
        h1: H1Wire { wire, offsets, longest },
        h2: H2Blocks { blocks: h2, body_of, bodies, has_body, seq: h2_seq, seq_all: h2_seq_all },
    }
}

/// The one `{seq}` of a template's HTTP/2 header block, when it has no other ID.
fn one_seq(t: &crate::template::Template) -> (u32, u8) {
    match t.h2.as_slice() {
        [s] if s.kind == (crate::template::Kind::Seq { start: 0 }) => {
            u32::try_from(s.at).map_or((0, 0), |at| (at, s.width))
        }
        _ => (0, 0),
    }
}

/// Variants that share an address share their connections, so they must agree on http or
/// https and on the TLS server name; the first pair of URLs that does not.
pub fn check_schemes(v: &Variants) -> Result<(), (String, String)> {
    // Endpoints differ in address or TLS name: a second endpoint of one address disagrees.
    let mut first: std::collections::HashMap<SocketAddr, &str> = std::collections::HashMap::new();
    for (e, url) in v.endpoints() {
        if let Some(a) = first.insert(e.addr, url) {
            return Err((a.to_string(), url.to_string()));
        }
    }
    Ok(())
}

/// The group of each of `connections` connections: in proportion to the groups' weights, at
/// least one each (the caller checks `connections >= groups`), interleaved.
pub fn deal_connections(weights: &[u64], connections: usize) -> Vec<usize> {
    let total: u64 = weights.iter().sum();
    let n = weights.len();
    let spare = connections.saturating_sub(n) as u64;
    // One each, then the rest by largest remainder of the weighted share.
    let mut counts: Vec<u64> = weights.iter().map(|w| 1 + spare * w / total).collect();
    let mut left = connections as u64 - counts.iter().sum::<u64>().min(connections as u64);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(spare * weights[i] % total));
    for &i in order.iter().cycle().take(n * 2) {
        if left == 0 {
            break;
        }
        counts[i] += 1;
        left -= 1;
    }
    smooth_order(&counts)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same seed gives the same order, another seed another; every position stays.
    #[test]
    fn a_seeded_shuffle_is_reproducible_and_loses_nothing() {
        let shuffled = |seed| {
            let mut v: Vec<u32> = (0..1000).collect();
            shuffle(&mut v, seed);
            v
        };
        assert_eq!(shuffled(42), shuffled(42));
        assert_ne!(shuffled(42), shuffled(43));
        let mut sorted = shuffled(42);
        assert_ne!(sorted, (0..1000).collect::<Vec<u32>>());
        sorted.sort_unstable();
        assert_eq!(sorted, (0..1000).collect::<Vec<u32>>());
        assert_eq!(Order::parse("random:42"), Ok(Order::Random { seed: 42 }));
        assert_eq!(Order::parse("seq"), Ok(Order::Seq));
        assert!(matches!(Order::parse("random"), Ok(Order::Random { .. })));
        assert!(Order::parse("random:x").unwrap_err().contains("random:42"));
        assert!(Order::parse("shuffle").unwrap_err().contains("seq, random"));
        assert_eq!(Order::Random { seed: 7 }.flag(), "random:7");
    }

    #[test]
    fn smooth_order_picks_each_by_weight_spread_out() {
        let order = smooth_order(&[5, 1, 1]);
        assert_eq!(order.len(), 7);
        assert_eq!(order.iter().filter(|&&i| i == 0).count(), 5);
        assert_eq!(order, vec![0, 0, 1, 0, 2, 0, 0]);
        assert_eq!(smooth_order(&[1, 1]), vec![0, 1]);
    }

    #[test]
    fn connections_follow_weights_with_one_each_at_least() {
        let count = |d: &[usize], g: usize| d.iter().filter(|&&x| x == g).count();
        let d = deal_connections(&[1, 1000], 10);
        assert_eq!(d.len(), 10);
        assert_eq!((count(&d, 0), count(&d, 1)), (1, 9));
        let d = deal_connections(&[1, 1, 2], 100);
        assert_eq!((count(&d, 0), count(&d, 1), count(&d, 2)), (25, 25, 50));
        let d = deal_connections(&[3, 3, 3], 4);
        assert_eq!(d.len(), 4);
        assert!((0..3).all(|g| count(&d, g) >= 1));
    }
}
