//! The `--urls` pool in the report: what it was (its file's digest, its size, its order and
//! seed, what a variant costs in memory) and its requests by group (a path prefix), not by
//! line, so a pool of 10,000 URLs makes a readable report.

use serde::Serialize;

use super::Latency;
use crate::config::LoadConfig;
use crate::pool::origin;
use crate::targets::Order;
use crate::RunResult;

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
    /// The path segments a group is named by, or `"name"` (a targets file's `name=`); null:
    /// one group.
    pub group_by: Option<crate::config::GroupBy>,
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
    /// Its responses' latency, as the run's `latency_us`.
    pub latency_us: Option<Latency>,
}

impl PoolReport {
    pub fn new(cfg: &LoadConfig, result: &RunResult) -> Option<PoolReport> {
        let pool = cfg.pool.as_ref()?;
        let mut groups: Vec<PoolGroup> = pool
            .groups
            .iter()
            .enumerate()
            .map(|(g, name)| PoolGroup {
                name: name.clone(),
                variants: 0,
                sent: 0,
                completed: 0,
                ok: 0,
                failed: 0,
                // One group (`--group-by none`): the run's own latency, recorded once.
                latency_us: match pool.group_by {
                    None => Some(Latency::from_histogram(&result.rec.latency)),
                    Some(_) => result.rec.per_group.get(g).map(Latency::from_histogram),
                },
            })
            .collect();
        for i in 0..cfg.variants.len() {
            let Some(row) = pool.member_group.get(i).and_then(|&g| groups.get_mut(g as usize))
            else {
                continue;
            };
            let c = result.rec.per_target.get(i).copied().unwrap_or_default();
            let in_flight = result.in_flight_by_target.get(i).copied().unwrap_or(0);
            row.variants += 1;
            row.sent += c.completed + c.failed + in_flight;
            row.completed += c.completed;
            row.ok += c.ok;
            row.failed += c.failed;
        }
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
            bytes_per_variant: pool.bytes_per_variant,
            group_by: pool.group_by,
            groups,
        })
    }
}

/// The targets as the report heads them: each URL given, and the pool as its file and size.
pub fn shown_targets(cfg: &LoadConfig) -> Vec<String> {
    let v = &cfg.variants;
    let mut out: Vec<String> =
        (0..v.len()).filter(|&i| !v.pool(i)).map(|i| v.url(i).to_string()).collect();
    if let Some(p) = &cfg.pool {
        let first = (0..v.len()).find(|&i| v.pool(i)).map(|i| origin(v.url(i))).unwrap_or_default();
        out.insert(0, format!("{first} ({} requests from {})", p.size, p.file));
    }
    out
}
