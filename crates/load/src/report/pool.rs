//! The `--urls` pool in the report: what it was (its file's digest, its size, its order and
//! seed, what a variant costs in memory) and its requests by group (a path prefix), not by
//! line, so a pool of 10,000 URLs makes a readable report.

use serde::Serialize;

use crate::config::LoadConfig;
use crate::targets::Order;
use crate::RunResult;

/// Groups past this many are folded into one row (the smallest first).
pub const MAX_GROUPS: usize = 50;

#[derive(Debug, Clone, Serialize)]
pub struct PoolReport {
    pub file: String,
    /// Its requests (lines).
    pub size: usize,
    /// sha256 of the file, hex.
    pub digest: String,
    /// `seq` or `random`.
    pub order: &'static str,
    /// `random`: its seed (`--order random:SEED` replays the run's order).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Encoded bytes per variant: its HTTP/1.1 request as written, its HTTP/2 header block and
    /// its place in the cycle, as held through the run.
    pub bytes_per_variant: f64,
    /// The path segments a group is named by (null: one group).
    pub group_by: Option<usize>,
    pub groups: Vec<PoolGroup>,
}

/// The requests of the pool's lines that share a group.
#[derive(Debug, Clone, Serialize)]
pub struct PoolGroup {
    /// `/item` (its path prefix; with the origin when the pool has several), or `all`.
    pub name: String,
    /// Its lines.
    pub variants: usize,
    pub sent: u64,
    pub completed: u64,
    pub ok: u64,
    pub failed: u64,
}

impl PoolReport {
    pub fn new(cfg: &LoadConfig, result: &RunResult) -> Option<PoolReport> {
        let pool = cfg.pool.as_ref()?;
        let members: Vec<usize> = (0..cfg.targets.len()).filter(|&i| cfg.targets[i].pool).collect();
        let origins = members.iter().map(|&i| origin(&cfg.targets[i].url)).collect::<Vec<_>>();
        let several = origins.iter().any(|o| *o != origins[0]);
        let mut groups: Vec<PoolGroup> = Vec::new();
        let mut index = std::collections::HashMap::new();
        for (&i, o) in members.iter().zip(&origins) {
            let name = match pool.group_by {
                None => "all".to_string(),
                Some(n) if several => format!("{o}{}", prefix(&cfg.targets[i].url, n)),
                Some(n) => prefix(&cfg.targets[i].url, n),
            };
            let g = *index.entry(name.clone()).or_insert_with(|| {
                groups.push(PoolGroup {
                    name,
                    variants: 0,
                    sent: 0,
                    completed: 0,
                    ok: 0,
                    failed: 0,
                });
                groups.len() - 1
            });
            let c = result.rec.per_target.get(i).copied().unwrap_or_default();
            let in_flight = result.in_flight_by_target.get(i).copied().unwrap_or(0);
            let row = &mut groups[g];
            row.variants += 1;
            row.sent += c.completed + c.failed + in_flight;
            row.completed += c.completed;
            row.ok += c.ok;
            row.failed += c.failed;
        }
        let bytes: usize = members
            .iter()
            .map(|&i| cfg.targets[i].request.len() + cfg.targets[i].h2_block.len() + 4)
            .sum();
        let (order, seed) = match cfg.order {
            Order::Seq => ("seq", None),
            Order::Random { seed } => ("random", Some(seed)),
        };
        Some(PoolReport {
            file: pool.file.clone(),
            size: pool.size,
            digest: pool.digest.clone(),
            order,
            seed,
            bytes_per_variant: bytes as f64 / members.len().max(1) as f64,
            group_by: pool.group_by,
            groups: fold(groups),
        })
    }
}

/// At most [`MAX_GROUPS`] rows: the busiest kept in their order, the rest summed in one.
fn fold(groups: Vec<PoolGroup>) -> Vec<PoolGroup> {
    if groups.len() <= MAX_GROUPS {
        return groups;
    }
    let mut by_sent: Vec<usize> = (0..groups.len()).collect();
    by_sent.sort_by_key(|&i| std::cmp::Reverse(groups[i].sent));
    let keep: std::collections::HashSet<usize> =
        by_sent[..MAX_GROUPS - 1].iter().copied().collect();
    let folded = groups.len() - keep.len();
    let mut rest = PoolGroup {
        name: format!("({folded} other groups)"),
        variants: 0,
        sent: 0,
        completed: 0,
        ok: 0,
        failed: 0,
    };
    let mut out = Vec::with_capacity(MAX_GROUPS);
    for (i, g) in groups.into_iter().enumerate() {
        if keep.contains(&i) {
            out.push(g);
        } else {
            rest.variants += g.variants;
            rest.sent += g.sent;
            rest.completed += g.completed;
            rest.ok += g.ok;
            rest.failed += g.failed;
        }
    }
    out.push(rest);
    out
}

/// `http://host:port` of a URL.
fn origin(url: &str) -> String {
    let after = url.find("://").map_or(0, |i| i + 3);
    let end = url[after..].find('/').map_or(url.len(), |i| after + i);
    url[..end].to_string()
}

/// The first `n` segments of a URL's path (`/item/42?x` by 1: `/item`).
fn prefix(url: &str, n: usize) -> String {
    let o = origin(url).len();
    let path = url[o..].split(['?', '#']).next().unwrap_or("");
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).take(n).collect();
    format!("/{}", segs.join("/"))
}

/// The targets as the report heads them: each URL given, and the pool as its file and size.
pub fn shown_targets(cfg: &LoadConfig) -> Vec<String> {
    let mut out: Vec<String> =
        cfg.targets.iter().filter(|t| !t.pool).map(|t| t.url.clone()).collect();
    if let Some(p) = &cfg.pool {
        let first = cfg.targets.iter().find(|t| t.pool).map(|t| origin(&t.url)).unwrap_or_default();
        out.insert(0, format!("{first} ({} requests from {})", p.size, p.file));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_named_by_its_path_prefix() {
        assert_eq!(prefix("http://h:1/item/42?x=1", 1), "/item");
        assert_eq!(prefix("http://h:1/item/42?x=1", 2), "/item/42");
        assert_eq!(prefix("http://h:1/item/42", 5), "/item/42");
        assert_eq!(prefix("http://h:1/", 1), "/");
        assert_eq!(origin("https://h:1/a/b"), "https://h:1");
        let g = |name: &str, sent| PoolGroup {
            name: name.into(),
            variants: 1,
            sent,
            completed: sent,
            ok: sent,
            failed: 0,
        };
        let many: Vec<PoolGroup> = (0..60).map(|i| g(&format!("/{i}"), i)).collect();
        let folded = fold(many);
        assert_eq!(folded.len(), MAX_GROUPS);
        let rest = folded.last().unwrap();
        assert_eq!((rest.name.as_str(), rest.variants), ("(11 other groups)", 11));
        assert_eq!(rest.sent, (0..11).sum::<u64>(), "the smallest folded");
        assert_eq!(folded[0].name, "/11", "the rest keep their order");
    }
}
