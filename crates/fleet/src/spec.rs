//! One agent's share of a load: [`split`] divides the user's load options over agents by
//! weight: connections, threads, the rate (every stage of a schedule, built once here), `-n`
//! and source address ranges; every other option goes to each agent as given. Counts are split
//! exactly: the shares add up to the whole. The options are self-contained (files travel as
//! their contents), so each share is sent to its agent as it is.

use std::net::IpAddr;

use qpslab_load::rate::Rate;
use qpslab_load::source::SourceRange;
use qpslab_load::LoadOptions;

/// Why the load cannot be split: a flag and a message, as the user wrote it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag}: {message}")]
pub struct SplitError {
    pub flag: &'static str,
    pub message: String,
}

fn err(flag: &'static str, message: impl Into<String>) -> SplitError {
    SplitError { flag, message: message.into() }
}

/// `total` divided in proportion to `weights`, largest remainders first: the parts add up to
/// `total` exactly.
pub fn apportion(total: u64, weights: &[u32]) -> Vec<u64> {
    let sum: u64 = weights.iter().map(|&w| u64::from(w)).sum::<u64>().max(1);
    let mut parts: Vec<u64> = weights.iter().map(|&w| total * u64::from(w) / sum).collect();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    // Remainder of each exact share, largest first (ties: the earlier agent).
    order.sort_by_key(|&i| std::cmp::Reverse((total * u64::from(weights[i])) % sum));
    let mut left = total - parts.iter().sum::<u64>();
    for i in order {
        if left == 0 {
            break;
        }
        parts[i] += 1;
        left -= 1;
    }
    parts
}

/// The user's load, split over agents of `weights`.
pub fn split(o: &LoadOptions, weights: &[u32]) -> Result<Vec<LoadOptions>, SplitError> {
    let n = weights.len();
    if n == 0 {
        return Err(err("--agents", "no agent given"));
    }
    if weights.contains(&0) {
        return Err(err("--agents", "a weight of 0 gives an agent nothing to do; drop it"));
    }
    if o.log.is_some() {
        return Err(err("--log", "is written by one process; not with --agents"));
    }
    let total_w: f64 = weights.iter().map(|&w| f64::from(w)).sum();
    let connections = o.connections_or_default();
    let conns = apportion(connections as u64, weights);
    if conns.contains(&0) {
        return Err(err(
            "--connections",
            format!("{connections} connections cannot be spread over {n} agents; give at least one per agent"),
        ));
    }
    let threads = match o.threads {
        None => vec![None; n],
        Some(t) => {
            let t = apportion(t as u64, weights);
            if t.contains(&0) {
                return Err(err("--threads", format!("give at least one thread per agent ({n})")));
            }
            t.into_iter().map(|x| Some(x as usize)).collect()
        }
    };
    let requests: Vec<Option<u64>> = match o.requests {
        None => vec![None; n],
        Some(r) => apportion(r, weights).into_iter().map(Some).collect(),
    };
    if requests.contains(&Some(0)) {
        return Err(err("--requests", format!("give at least one request per agent ({n})")));
    }
    let schedule = match &o.schedule {
        Some(r) => Some(r.clone()),
        None => Rate::from_options(o.rate.as_deref(), o.ramp, o.stages.as_ref())
            .map_err(|e| err("--rate", e.to_string()))?,
    };
    let sources = match &o.source {
        None => vec![None; n],
        Some(text) => split_source(text, weights)?.into_iter().map(Some).collect(),
    };
    Ok((0..n)
        .map(|i| LoadOptions {
            threads: threads[i],
            connections: Some(conns[i] as usize),
            requests: requests[i],
            // The agent's share of the schedule, built here once for every stage.
            schedule: schedule.as_ref().map(|r| r.share(total_w / f64::from(weights[i]))),
            rate: None,
            ramp: None,
            stages: None,
            source: sources[i].clone(),
            lane: Some((i as u32, n as u32)),
            ..o.clone()
        })
        .collect())
}

/// A source range cut into consecutive address ranges (or, with fewer addresses than agents,
/// port ranges) by weight.
fn split_source(text: &str, weights: &[u32]) -> Result<Vec<String>, SplitError> {
    let range = SourceRange::parse(text).map_err(|e| err("--source", e.message))?;
    let n = weights.len() as u64;
    let fmt_ip = |ip: IpAddr| match ip {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
    };
    let nth = |k: u64| match range.first {
        IpAddr::V4(a) => IpAddr::V4((u32::from(a) + k as u32).into()),
        IpAddr::V6(a) => IpAddr::V6((u128::from(a) + u128::from(k)).into()),
    };
    let ports = |p: Option<(u16, u16)>| p.map_or(String::new(), |(lo, hi)| format!(":{lo}-{hi}"));
    if range.count >= n {
        let mut start = 0;
        return Ok(apportion(range.count, weights)
            .into_iter()
            .map(|c| {
                let s = format!(
                    "{}-{}{}",
                    fmt_ip(nth(start)),
                    fmt_ip(nth(start + c - 1)),
                    ports(range.ports)
                );
                start += c;
                s
            })
            .collect());
    }
    let Some((lo, hi)) = range.ports else {
        return Err(err(
            "--source",
            format!("{} address(es) cannot be split over {n} agents; give at least one per agent, or a port range", range.count),
        ));
    };
    let counts = apportion(u64::from(hi - lo) + 1, weights);
    if counts.contains(&0) {
        return Err(err("--source", format!("ports {lo}-{hi} are too few for {n} agents")));
    }
    let mut next = u64::from(lo);
    Ok(counts
        .into_iter()
        .map(|c| {
            let s = format!(
                "{}-{}:{next}-{}",
                fmt_ip(range.first),
                fmt_ip(nth(range.count - 1)),
                next + c - 1
            );
            next += c;
            s
        })
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn shares_add_up_to_the_whole() {
        assert_eq!(apportion(30_000, &[1, 1, 1]), [10_000, 10_000, 10_000]);
        assert_eq!(apportion(100, &[1, 1, 1]), [34, 33, 33]);
        assert_eq!(apportion(10, &[1, 2, 2]), [2, 4, 4]);
        assert_eq!(apportion(7, &[3, 1]), [5, 2]);
        assert_eq!(apportion(2, &[1, 1, 1]), [1, 1, 0]);
    }

    #[test]
    fn a_load_splits_by_weight_and_checks_what_cannot() {
        let o = LoadOptions {
            urls: vec!["http://10.0.0.1/".into()],
            connections: Some(300),
            threads: Some(6),
            requests: Some(30_001),
            rate: Some("6000".into()),
            source: Some("10.1.0.1-10.1.0.10:2000-2999".into()),
            ..LoadOptions::default()
        };
        let s = split(&o, &[1, 1, 1]).unwrap();
        assert_eq!(s.iter().map(|x| x.connections.unwrap()).sum::<usize>(), 300);
        assert_eq!(s.iter().map(|x| x.requests.unwrap()).sum::<u64>(), 30_001);
        assert_eq!(s[0].threads, Some(2));
        assert_eq!(s[0].schedule.as_ref().unwrap().hold_rps, 2000.0);
        assert_eq!(
            s.iter().map(|x| x.source.clone().unwrap()).collect::<Vec<_>>(),
            [
                "10.1.0.1-10.1.0.4:2000-2999",
                "10.1.0.5-10.1.0.7:2000-2999",
                "10.1.0.8-10.1.0.10:2000-2999"
            ]
        );
        let weighted = split(&LoadOptions { threads: None, ..o.clone() }, &[2, 1]).unwrap();
        assert_eq!(weighted[0].connections, Some(200));
        assert!((weighted[1].schedule.as_ref().unwrap().hold_rps - 2000.0).abs() < 1e-6);
        let one = LoadOptions { source: Some("10.1.0.1:2000-2099".into()), ..o.clone() };
        let ports: Vec<String> =
            split(&one, &[1, 1]).unwrap().into_iter().map(|x| x.source.unwrap()).collect();
        assert_eq!(ports, ["10.1.0.1-10.1.0.1:2000-2049", "10.1.0.1-10.1.0.1:2050-2099"]);
        let few = LoadOptions { connections: Some(2), threads: None, ..o.clone() };
        assert_eq!(split(&few, &[1, 1, 1]).unwrap_err().flag, "--connections");
        assert_eq!(split(&o, &[1, 0]).unwrap_err().flag, "--agents");
    }

    /// A share travels whole: files as their contents, the schedule built, every option as
    /// the user gave it.
    #[test]
    fn a_share_travels_whole_with_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let body = dir.path().join("in.bin");
        std::fs::write(&body, b"\xff\x00{\"x\":1}").unwrap();
        let stages = dir.path().join("stages");
        std::fs::write(&stages, "2s 100:1000\n5s 1000\n").unwrap();
        let o = LoadOptions {
            urls: vec!["http://127.0.0.1:1/".into()],
            body: Some(
                qpslab_load::options::Body::from_arg(&format!("@{}", body.display())).unwrap(),
            ),
            stages: Some(
                qpslab_load::options::FileText::from_arg(stages.to_str().unwrap()).unwrap(),
            ),
            headers: vec!["X-A: 1".into()],
            ..LoadOptions::default()
        };
        let share = &split(&o, &[1, 1]).unwrap()[1];
        let json = serde_json::to_string(share).unwrap();
        let back: LoadOptions = serde_json::from_str(&json).unwrap();
        assert_eq!(&back, share);
        assert_eq!(back.body.unwrap().0, b"\xff\x00{\"x\":1}", "bytes that are not text, whole");
        assert_eq!(back.schedule.unwrap().hold_rps, 500.0, "half of the last stage");
        assert_eq!(back.stages, None, "the schedule replaces the file");
        assert_eq!(back.headers, ["X-A: 1"]);
    }
}
