//! One agent's share of a load: [`LoadSpec`] is `qpslab load`'s options made self-contained
//! (files read on the coordinator and carried as text, the open-loop schedule already built),
//! and [`split`] divides the user's load over agents by weight: connections, threads, the
//! rate (every stage of a schedule), `-n` and source address ranges. Counts are split exactly:
//! the shares add up to the whole.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use qpslab_load::config::PollMode;
use qpslab_load::rate::Rate;
use qpslab_load::source::SourceRange;
use qpslab_load::LoadOptions;
use serde::{Deserialize, Serialize};

/// The options of one agent's load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadSpec {
    pub urls: Vec<String>,
    /// The `--targets` file's text.
    pub targets_text: Option<String>,
    pub threads: Option<usize>,
    pub connections: usize,
    pub duration: Option<Duration>,
    pub requests: Option<u64>,
    pub headers: Vec<String>,
    pub method: String,
    /// A literal body.
    pub body: Option<String>,
    /// A body read from `@FILE`, base64.
    pub body_file: Option<String>,
    pub timeout: Duration,
    pub connect_timeout: Option<Duration>,
    pub warmup: Duration,
    pub cpus: Option<String>,
    pub accept_status: Option<String>,
    pub max_error_rate: f64,
    /// This agent's share of the open-loop schedule.
    pub schedule: Option<Rate>,
    pub pipeline: usize,
    pub conn_per_request: bool,
    pub rst_close: bool,
    pub source: Option<String>,
    /// `auto`, `spin` or `sleep`.
    pub poll: String,
    /// `auto`, `epoll` or `uring` (`--io`): the agent's machine decides what `auto` means.
    #[serde(default = "auto")]
    pub io: String,
    pub no_retry: bool,
    /// https: `--insecure`, `--sni`, `--tls-version`, `--tls-reuse`.
    #[serde(default)]
    pub tls_insecure: bool,
    #[serde(default)]
    pub tls_sni: Option<String>,
    #[serde(default)]
    pub tls_version: Option<String>,
    #[serde(default)]
    pub tls_reuse: bool,
    #[serde(default)]
    pub tls_ciphers: Option<String>,
}

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
pub fn split(o: &LoadOptions, weights: &[u32]) -> Result<Vec<LoadSpec>, SplitError> {
    let n = weights.len();
    if n == 0 {
        return Err(err("--agents", "no agent given"));
    }
    if weights.contains(&0) {
        return Err(err("--agents", "a weight of 0 gives an agent nothing to do; drop it"));
    }
    if o.tls.cacert.is_some() {
        return Err(err(
            "--cacert",
            "is not sent to agents; install the CA on the agents' machines (their system roots \
             are used) or give --insecure",
        ));
    }
    let total_w: f64 = weights.iter().map(|&w| f64::from(w)).sum();
    let connections = o.connections.unwrap_or(qpslab_load::config::DEFAULT_CONNECTIONS);
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
    let schedule = Rate::from_options(o.rate.as_deref(), o.ramp, o.stages.as_deref())
        .map_err(|e| err("--rate", e.to_string()))?;
    let sources = match &o.source {
        None => vec![None; n],
        Some(text) => split_source(text, weights)?.into_iter().map(Some).collect(),
    };
    let read = |flag: &'static str, p: &Path| {
        std::fs::read(p).map_err(|e| err(flag, format!("cannot read {}: {e}", p.display())))
    };
    let targets_text = match &o.targets_file {
        Some(p) => Some(String::from_utf8_lossy(&read("--targets", p)?).into_owned()),
        None => None,
    };
    let (body, body_file) = match o.body.as_deref() {
        Some(b) if b.starts_with('@') => {
            let bytes = read("--body", Path::new(&b[1..]))?;
            (None, Some(base64::engine::general_purpose::STANDARD.encode(bytes)))
        }
        other => (other.map(str::to_string), None),
    };
    Ok((0..n)
        .map(|i| LoadSpec {
            urls: o.urls.clone(),
            targets_text: targets_text.clone(),
            threads: threads[i],
            connections: conns[i] as usize,
            duration: o.duration,
            requests: requests[i],
            headers: o.headers.clone(),
            method: o.method.clone(),
            body: body.clone(),
            body_file: body_file.clone(),
            timeout: o.timeout,
            connect_timeout: o.connect_timeout,
            warmup: o.warmup,
            cpus: o.cpus.clone(),
            accept_status: o.accept_status.clone(),
            max_error_rate: o.max_error_rate,
            schedule: schedule.as_ref().map(|r| r.share(total_w / f64::from(weights[i]))),
            pipeline: o.pipeline,
            conn_per_request: o.conn_per_request,
            rst_close: o.rst_close,
            source: sources[i].clone(),
            poll: o.poll.name().to_string(),
            io: match o.io {
                qpslab_load::IoChoice::Auto => "auto",
                qpslab_load::IoChoice::Epoll => "epoll",
                qpslab_load::IoChoice::Uring => "uring",
            }
            .to_string(),
            no_retry: o.no_retry,
            tls_insecure: o.tls.insecure,
            tls_sni: o.tls.sni.clone(),
            tls_version: o.tls.version.map(|v| v.name().to_string()),
            tls_reuse: o.tls.reuse,
            tls_ciphers: o.tls.ciphers.clone(),
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

impl LoadSpec {
    /// The options an agent runs: files carried as text are written under `dir`.
    pub fn to_options(&self, dir: &Path) -> Result<LoadOptions, String> {
        let write = |name: &str, bytes: &[u8]| {
            let p = dir.join(name);
            std::fs::write(&p, bytes).map(|()| p).map_err(|e| format!("cannot write {name}: {e}"))
        };
        let targets_file = match &self.targets_text {
            Some(t) => Some(write("targets", t.as_bytes())?),
            None => None,
        };
        let body = match &self.body_file {
            Some(b64) => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|e| format!("body: bad base64: {e}"))?;
                Some(format!("@{}", write("body", &bytes)?.display()))
            }
            None => self.body.clone(),
        };
        Ok(LoadOptions {
            urls: self.urls.clone(),
            threads: self.threads,
            connections: Some(self.connections),
            duration: self.duration,
            requests: self.requests,
            headers: self.headers.clone(),
            method: self.method.clone(),
            body,
            timeout: self.timeout,
            connect_timeout: self.connect_timeout,
            warmup: self.warmup,
            cpus: self.cpus.clone(),
            accept_status: self.accept_status.clone(),
            max_error_rate: self.max_error_rate,
            rate: None,
            ramp: None,
            pipeline: self.pipeline,
            stages: None,
            schedule: self.schedule.clone(),
            targets_file,
            conn_per_request: self.conn_per_request,
            rst_close: self.rst_close,
            source: self.source.clone(),
            log: None,
            poll: match self.poll.as_str() {
                "spin" => PollMode::Spin,
                "sleep" => PollMode::Sleep,
                _ => PollMode::Auto,
            },
            no_retry: self.no_retry,
            io: qpslab_load::IoChoice::parse(&self.io).map_err(|e| e.to_string())?,
            tls: qpslab_load::tls::TlsOptions {
                insecure: self.tls_insecure,
                cacert: None,
                sni: self.tls_sni.clone(),
                version: self
                    .tls_version
                    .as_deref()
                    .map(qpslab_load::tls::TlsVersion::parse)
                    .transpose()
                    .map_err(|e| e.to_string())?,
                reuse: self.tls_reuse,
                ciphers: self.tls_ciphers.clone(),
            },
        })
    }
}

fn auto() -> String {
    "auto".into()
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
        assert_eq!(s.iter().map(|x| x.connections).sum::<usize>(), 300);
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
        assert_eq!(weighted[0].connections, 200);
        assert!((weighted[1].schedule.as_ref().unwrap().hold_rps - 2000.0).abs() < 1e-6);
        let one = LoadOptions { source: Some("10.1.0.1:2000-2099".into()), ..o.clone() };
        let ports: Vec<String> =
            split(&one, &[1, 1]).unwrap().into_iter().map(|x| x.source.unwrap()).collect();
        assert_eq!(ports, ["10.1.0.1-10.1.0.1:2000-2049", "10.1.0.1-10.1.0.1:2050-2099"]);
        let few = LoadOptions { connections: Some(2), threads: None, ..o.clone() };
        assert_eq!(split(&few, &[1, 1, 1]).unwrap_err().flag, "--connections");
        assert_eq!(split(&o, &[1, 0]).unwrap_err().flag, "--agents");
    }

    #[test]
    fn a_spec_becomes_options_with_its_files_written() {
        let dir = tempfile::tempdir().unwrap();
        let body = dir.path().join("in.json");
        std::fs::write(&body, b"{\"x\":1}").unwrap();
        let o = LoadOptions {
            urls: vec!["http://127.0.0.1:1/".into()],
            body: Some(format!("@{}", body.display())),
            ..LoadOptions::default()
        };
        let spec = &split(&o, &[1]).unwrap()[0];
        let json = serde_json::to_string(spec).unwrap();
        let back: LoadSpec = serde_json::from_str(&json).unwrap();
        let out = tempfile::tempdir().unwrap();
        let opts = back.to_options(out.path()).unwrap();
        let path = opts.body.unwrap();
        assert_eq!(std::fs::read(path.trim_start_matches('@')).unwrap(), b"{\"x\":1}");
    }
}
