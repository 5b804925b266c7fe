//! Many targets: the `--targets FILE` format, and how requests are spread over targets.
//!
//! Targets that share an address form a group. Connections are dealt to groups in proportion to
//! the groups' weights (every group gets at least one); on a connection, requests cycle through
//! its group's targets in smooth weighted round-robin order (nginx's upstream algorithm), each
//! connection starting at a different point of the cycle. A group's requests are laid out once,
//! in cycle order, in one buffer, so k consecutive requests are one contiguous slice to write.
//!
//! Does not resolve URLs or encode requests: `config` does.

use std::net::SocketAddr;
use std::path::Path;

use qpslab_http::HeaderArg;

use crate::config::{ConfigError, Target};

/// Highest weight of one target (keeps a group's request cycle small).
pub const MAX_WEIGHT: u32 = 1000;

/// One line of a targets file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetLine {
    pub method: String,
    pub url: String,
    pub headers: Vec<HeaderArg>,
    pub weight: u32,
}

/// Reads a targets file: one request per line, `METHOD URL [Name: value]... [weight=N]`.
/// A header runs from its `Name:` word to the next `Name:` word (values may contain blanks).
/// Blank lines and lines starting with `#` are skipped.
pub fn read_file(path: &Path) -> Result<Vec<TargetLine>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError::new("--targets", format!("cannot read {}: {e}", path.display()))
    })?;
    let lines = parse(&text).map_err(|(line, msg)| {
        ConfigError::new("--targets", format!("{} line {line}: {msg}", path.display()))
    })?;
    if lines.is_empty() {
        return Err(ConfigError::new(
            "--targets",
            format!(
                "{} has no request line; write e.g. 'GET http://127.0.0.1:8080/'",
                path.display()
            ),
        ));
    }
    Ok(lines)
}

/// Parses targets-file text; errors carry the 1-based line number.
pub fn parse(text: &str) -> Result<Vec<TargetLine>, (usize, String)> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |m: String| (i + 1, m);
        let mut words: Vec<&str> = line.split_whitespace().collect();
        let mut weight = 1;
        if let Some(w) = words.last().and_then(|w| w.strip_prefix("weight=")) {
            weight = match w.parse::<u32>() {
                Ok(n) if (1..=MAX_WEIGHT).contains(&n) => n,
                _ => {
                    return Err(err(format!(
                        "weight={w} is not a whole number from 1 to {MAX_WEIGHT}"
                    )))
                }
            };
            words.pop();
        }
        let [method, url, rest @ ..] = words.as_slice() else {
            return Err(err(format!(
                "{line:?}: write METHOD URL [Name: value]... [weight=N], e.g. 'GET http://127.0.0.1:8080/'"
            )));
        };
        let mut headers: Vec<String> = Vec::new();
        for w in rest {
            let starts_header = w.ends_with(':') && w.len() > 1;
            match headers.last_mut() {
                Some(h) if !starts_header => {
                    h.push(' ');
                    h.push_str(w);
                }
                None if !starts_header => {
                    return Err(err(format!(
                        "{w:?} after the URL is not a header; write 'Name: value' or weight=N"
                    )))
                }
                _ => headers.push((*w).to_string()),
            }
        }
        let headers = headers
            .iter()
            .map(|h| HeaderArg::parse(h).map_err(|e| err(e.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        out.push(TargetLine { method: method.to_string(), url: url.to_string(), headers, weight });
    }
    Ok(out)
}

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

/// Targets sharing one address, with their requests laid out in cycle order.
#[derive(Debug, Clone)]
pub struct Group {
    pub addr: SocketAddr,
    /// Target index at each position of the cycle.
    pub cycle: Vec<u32>,
    /// Requests of the cycle followed by the first `pipeline` again, so any run of up to
    /// `pipeline` consecutive requests is one slice.
    pub wire: Vec<u8>,
    /// Start of position p's request in `wire` (`cycle.len() + pipeline + 1` entries).
    pub offsets: Vec<usize>,
    /// Sum of the weights of its targets.
    pub weight: u64,
}

impl Group {
    /// The bytes of `k` requests from cycle position `pos`.
    #[inline]
    pub fn slice(&self, pos: usize, k: usize) -> (usize, usize) {
        (self.offsets[pos], self.offsets[pos + k])
    }
}

/// Groups targets by address, in order of first appearance.
pub fn groups(targets: &[Target], pipeline: usize) -> Vec<Group> {
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for t in targets {
        if !addrs.contains(&t.addr) {
            addrs.push(t.addr);
        }
    }
    addrs
        .into_iter()
        .map(|addr| {
            let members: Vec<usize> =
                (0..targets.len()).filter(|&i| targets[i].addr == addr).collect();
            let weights: Vec<u64> = members.iter().map(|&i| u64::from(targets[i].weight)).collect();
            let g = weights.iter().copied().fold(0, gcd);
            let reduced: Vec<u64> = weights.iter().map(|w| w / g).collect();
            let cycle: Vec<u32> =
                smooth_order(&reduced).into_iter().map(|m| members[m] as u32).collect();
            let mut wire = Vec::new();
            let mut offsets = vec![0];
            for p in 0..cycle.len() + pipeline {
                wire.extend_from_slice(&targets[cycle[p % cycle.len()] as usize].request);
                offsets.push(wire.len());
            }
            Group { addr, cycle, wire, offsets, weight: weights.iter().sum() }
        })
        .collect()
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

    #[test]
    fn target_lines_with_headers_and_weights() {
        let text =
            "# comment\n\nGET http://a/ weight=3\nPOST http://b/x X-A: one two Accept: */*\n";
        let lines = parse(text).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!((lines[0].method.as_str(), lines[0].weight), ("GET", 3));
        assert_eq!(lines[1].headers.len(), 2);
        assert_eq!(lines[1].headers[0].value, "one two");
        assert_eq!(lines[1].headers[1].name, "Accept");
        assert_eq!(parse("GET http://a/ stray").unwrap_err().0, 1);
        assert_eq!(parse("GET\n").unwrap_err().0, 1);
        assert_eq!(parse("\nGET http://a/ weight=0").unwrap_err().0, 2);
        assert_eq!(parse("GET http://a/ Bad Name: x").unwrap_err().0, 1);
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
