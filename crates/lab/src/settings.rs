//! `qpslab bench`'s options as a sweep file and the runs store name them: the long options,
//! same names (`connections`, `server-cpus`, `conn-per-request`, ...), every one optional, so
//! that a sweep's base, its axes and its variants layer over each other, and a stored run's
//! `config` says exactly what was asked.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::bench::BenchOptions;

/// The bench options, each optional; `target` is `builtin`, `nginx` or a URL.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct BenchSettings {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warmup: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conn_per_request: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cpus: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accept: Option<String>,
    /// `--server`: the target and the doctor on this host, through ssh.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_addr: Option<String>,
    /// `--agents`: the load on these hosts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agents: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssh: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_exe: Option<String>,
    /// `--profile`: profile the server's host during each run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile_freq: Option<u64>,
}

/// Every key of [`BenchSettings`], for messages.
pub const KEYS: &[&str] = &[
    "target",
    "duration",
    "warmup",
    "interval",
    "connections",
    "threads",
    "pipeline",
    "rate",
    "conn-per-request",
    "workers",
    "server-cpus",
    "accept",
    "server",
    "server-addr",
    "agents",
    "ssh",
    "agent-exe",
    "profile",
    "profile-freq",
];

impl BenchSettings {
    /// `self` with every option `over` sets replaced.
    pub fn layered(&self, over: &BenchSettings) -> BenchSettings {
        macro_rules! pick {
            ($($f:ident),*) => { BenchSettings { $($f: over.$f.clone().or_else(|| self.$f.clone())),* } };
        }
        pick!(
            target,
            duration,
            warmup,
            interval,
            connections,
            threads,
            pipeline,
            rate,
            conn_per_request,
            workers,
            server_cpus,
            accept,
            server,
            server_addr,
            agents,
            ssh,
            agent_exe,
            profile,
            profile_freq
        )
    }

    /// The options of a bench with these settings over `defaults`; an error names the key.
    pub fn apply_to(&self, defaults: &BenchOptions) -> Result<BenchOptions, String> {
        let mut o = defaults.clone();
        match self.target.as_deref() {
            None => {}
            Some(kind @ ("builtin" | "nginx")) => {
                o.target = kind.into();
                o.url = None;
            }
            Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                o.url = Some(url.into());
            }
            Some(other) => {
                return Err(format!(
                    "target = {other:?}: use \"builtin\", \"nginx\" or a URL \
                     (\"http://HOST:PORT/PATH\")"
                ))
            }
        }
        for (key, v) in [
            ("connections", self.connections),
            ("threads", self.threads),
            ("pipeline", self.pipeline),
            ("workers", self.workers),
        ] {
            if v == Some(0) {
                return Err(format!("{key} = 0: it must be at least 1"));
            }
        }
        let dur = |key: &str,
                   v: &Option<String>,
                   zero_ok: bool|
         -> Result<Option<Duration>, String> {
            let Some(text) = v else { return Ok(None) };
            let d = humantime::parse_duration(text)
                .or_else(|_| text.parse::<f64>().map(Duration::from_secs_f64).map_err(|_| ()))
                .map_err(|()| format!("{key} = {text:?} is not a duration; write e.g. \"10s\""))?;
            if d.is_zero() && !zero_ok {
                return Err(format!("{key} must be more than 0"));
            }
            Ok(Some(d))
        };
        o.duration = dur("duration", &self.duration, false)?.unwrap_or(o.duration);
        o.warmup = dur("warmup", &self.warmup, true)?.unwrap_or(o.warmup);
        o.interval = dur("interval", &self.interval, false)?.unwrap_or(o.interval);
        o.connections = self.connections.or(o.connections);
        o.threads = self.threads.or(o.threads);
        o.pipeline = self.pipeline.unwrap_or(o.pipeline);
        o.rate = self.rate.clone().or(o.rate);
        o.conn_per_request = self.conn_per_request.unwrap_or(o.conn_per_request);
        o.workers = self.workers.or(o.workers);
        o.server_cpus = self.server_cpus.clone().or(o.server_cpus);
        o.accept = self.accept.clone().or(o.accept);
        o.server_host = self.server.clone().or(o.server_host);
        o.server_addr = self.server_addr.clone().or(o.server_addr);
        o.agents = self.agents.clone().or(o.agents);
        o.ssh = self.ssh.clone().or(o.ssh);
        o.agent_exe = self.agent_exe.clone().or(o.agent_exe);
        match (self.profile, self.profile_freq) {
            (Some(false), _) => o.profile = None,
            (Some(true), _) | (None, Some(_)) => {
                let hz = self
                    .profile_freq
                    .unwrap_or(qpslab_profile::ProfileOptions::default().frequency_hz);
                if !(1..=100_000).contains(&hz) {
                    return Err(format!(
                        "profile-freq = {hz}: give 1 to 100000 samples per second"
                    ));
                }
                o.profile = Some(qpslab_profile::ProfileOptions {
                    frequency_hz: hz,
                    ..qpslab_profile::ProfileOptions::default()
                });
            }
            (None, None) => {}
        }
        Ok(o)
    }

    /// The settings a bench ran with, as the store keeps them.
    pub fn of_options(o: &BenchOptions) -> BenchSettings {
        let secs = |d: Duration| humantime::format_duration(d).to_string();
        BenchSettings {
            target: Some(o.url.clone().unwrap_or_else(|| o.target.clone())),
            duration: Some(secs(o.duration)),
            warmup: Some(secs(o.warmup)),
            interval: Some(secs(o.interval)),
            connections: o.connections,
            threads: o.threads,
            pipeline: Some(o.pipeline),
            rate: o.rate.clone(),
            conn_per_request: Some(o.conn_per_request),
            workers: o.workers,
            server_cpus: o.server_cpus.clone(),
            accept: o.accept.clone(),
            server: o.server_host.clone(),
            server_addr: o.server_addr.clone(),
            agents: o.agents.clone(),
            ssh: o.ssh.clone(),
            agent_exe: o.agent_exe.clone(),
            profile: o.profile.is_some().then_some(true),
            profile_freq: o.profile.as_ref().map(|p| p.frequency_hz),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn layers_override_in_order_and_map_onto_bench_options() {
        let base = BenchSettings {
            target: Some("nginx".into()),
            duration: Some("5s".into()),
            connections: Some(10),
            ..BenchSettings::default()
        };
        let over = BenchSettings { connections: Some(100), ..BenchSettings::default() };
        let s = base.layered(&over);
        assert_eq!((s.target.as_deref(), s.connections), (Some("nginx"), Some(100)));
        let o = s.apply_to(&BenchOptions::default()).unwrap();
        assert_eq!(
            (o.target.as_str(), o.duration, o.connections),
            ("nginx", Duration::from_secs(5), Some(100))
        );
        let url = BenchSettings { target: Some("http://127.0.0.1:8080/".into()), ..s };
        assert_eq!(
            url.apply_to(&BenchOptions::default()).unwrap().url.as_deref(),
            Some("http://127.0.0.1:8080/")
        );
        let bad = BenchSettings { duration: Some("soon".into()), ..BenchSettings::default() };
        assert!(bad
            .apply_to(&BenchOptions::default())
            .unwrap_err()
            .starts_with("duration = \"soon\""));
        let zero = BenchSettings { duration: Some("0s".into()), ..BenchSettings::default() };
        assert!(zero.apply_to(&BenchOptions::default()).is_err());
        let json = serde_json::to_value(&base).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"target": "nginx", "duration": "5s", "connections": 10})
        );
    }
}
