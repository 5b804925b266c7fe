//! A finding turned into typed changes of the run, or into "not applicable here" with why.
//! The doctor's remedies are prose for a person; the climb needs an action with its
//! parameters, made only where this run may make it: the load's connections and threads, the
//! workers of a server the bench itself started, and, with `--apply-server`, directives of the
//! user's own nginx.

use qpslab_host::doctor::Finding;
use serde::Serialize;

use crate::bench::{BenchOptions, BenchReport};

/// The most connections the climb raises a run to (each doubling measured on its own).
pub const MAX_CONNECTIONS: usize = 10_000;
/// nginx's `keepalive_requests` as the climb raises it: a connection closed every 100,000
/// requests costs one handshake per 100,000.
pub const KEEPALIVE_REQUESTS: u64 = 100_000;

/// One change of the run's own knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "knob", rename_all = "kebab-case")]
pub enum Change {
    /// The load's connections (requests in flight in a closed loop).
    Connections { from: usize, to: usize },
    /// The load's threads.
    Threads { from: usize, to: usize },
    /// The workers of the server the bench starts.
    Workers { from: usize, to: usize },
    /// The user's nginx: `access_log off;` everywhere in its main configuration file.
    NginxAccessLogOff,
    /// The user's nginx: `keepalive_requests`.
    NginxKeepaliveRequests { from: u64, to: u64 },
}

impl Change {
    /// The options with the change made (a change of the server leaves them as they are).
    pub fn apply(&self, o: &BenchOptions) -> BenchOptions {
        let mut o = o.clone();
        match *self {
            Change::Connections { to, .. } => o.load.connections = Some(to),
            Change::Threads { to, .. } => o.load.threads = Some(to),
            Change::Workers { to, .. } => o.workers = Some(to),
            Change::NginxAccessLogOff | Change::NginxKeepaliveRequests { .. } => {}
        }
        o
    }

    /// The nginx directive the change sets, and its value.
    pub fn directive(&self) -> Option<(&'static str, String)> {
        match *self {
            Change::NginxAccessLogOff => Some(("access_log", "off".into())),
            Change::NginxKeepaliveRequests { to, .. } => {
                Some(("keepalive_requests", to.to_string()))
            }
            _ => None,
        }
    }

    /// `connections 1 -> 2`.
    pub fn describe(&self) -> String {
        let (what, from, to) = match *self {
            Change::Connections { from, to } => ("connections", from as u64, to as u64),
            Change::Threads { from, to } => ("generator threads", from as u64, to as u64),
            Change::Workers { from, to } => ("server workers", from as u64, to as u64),
            Change::NginxAccessLogOff => return "nginx access_log off".into(),
            Change::NginxKeepaliveRequests { from, to } => ("nginx keepalive_requests", from, to),
        };
        format!("{what} {from} -> {to}")
    }

    /// What makes the state: a bench flag (`-c 2`), or the directive in nginx's configuration.
    pub fn flag(&self) -> String {
        match *self {
            Change::Connections { to, .. } => format!("-c {to}"),
            Change::Threads { to, .. } => format!("-t {to}"),
            Change::Workers { to, .. } => format!("-w {to}"),
            Change::NginxAccessLogOff | Change::NginxKeepaliveRequests { .. } => {
                let (name, value) = self.directive().unwrap_or_default();
                format!("nginx: {name} {value};")
            }
        }
    }

    /// The same knob: a later change of it replaces an earlier one in the final state.
    pub fn same_knob(&self, other: &Change) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

/// What a finding asks of this state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remedy {
    Change(Change),
    /// Nothing the climb may change: why, and what would.
    NotApplicable(String),
    /// The run itself fails: no change is worth measuring until the target answers.
    Stop(String),
}

/// The state's knobs as its last run had them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Knobs {
    pub connections: usize,
    pub threads: usize,
    /// CPUs the generator's threads may use.
    pub generator_cpus: usize,
    /// The server's workers, when the bench started it.
    pub workers: Option<usize>,
    /// CPUs the server may use (0: not known).
    pub server_cpus: usize,
    /// The user's nginx in the climb's hands (`--apply-server`): its `keepalive_requests` in
    /// this state. None: not nginx, or not ours to change.
    pub nginx_keepalive: Option<u64>,
}

impl Knobs {
    pub fn of(r: &BenchReport) -> Knobs {
        Knobs {
            connections: r.load.config.connections,
            threads: r.load.config.threads,
            generator_cpus: r.generator_cpus.len(),
            workers: r.target.workers,
            server_cpus: r.target.cpus.len(),
            nginx_keepalive: None,
        }
    }
}

/// The changes `f` asks for in state `k`, most telling first: one remedy for most findings,
/// one per cost named for nginx's configuration.
pub fn remedies(f: &Finding, k: &Knobs) -> Vec<Remedy> {
    if f.name != "nginx-config" {
        return vec![remedy(f, k)];
    }
    let Some(keepalive) = k.nginx_keepalive else {
        return vec![Remedy::NotApplicable(
            "a change to the user's nginx: pass --apply-server to let the climb edit its configuration (the original is kept and restored)".into(),
        )];
    };
    let mut out = Vec::new();
    for e in &f.evidence {
        if e.starts_with("access_log ") {
            out.push(Remedy::Change(Change::NginxAccessLogOff));
        } else if e.starts_with("keepalive_requests ") && keepalive < KEEPALIVE_REQUESTS {
            out.push(Remedy::Change(Change::NginxKeepaliveRequests {
                from: keepalive,
                to: KEEPALIVE_REQUESTS,
            }));
        }
    }
    if out.is_empty() {
        out.push(Remedy::NotApplicable(
            "its costs named here are not ones the climb edits (workers, accept_mutex, open_file_cache)".into(),
        ));
    }
    out
}

/// The change `f` asks for in state `k`. Only a headline that bounds the rate, or a condition
/// that explains it, names a change; the rest are not applicable, with why.
fn remedy(f: &Finding, k: &Knobs) -> Remedy {
    let na = |why: &str| Remedy::NotApplicable(why.to_string());
    match f.name {
        "latency-bound" if k.connections < MAX_CONNECTIONS => Remedy::Change(Change::Connections {
            from: k.connections,
            to: (k.connections * 2).min(MAX_CONNECTIONS),
        }),
        "latency-bound" => na("the load keeps the most connections the climb opens"),
        "client-bound" if k.threads < k.generator_cpus => {
            Remedy::Change(Change::Threads { from: k.threads, to: k.threads + 1 })
        }
        "client-bound" => na(
            "the generator runs a thread on each CPU it has: more load machines (--agents) or more CPUs for it",
        ),
        "server-bound" if f.summary.contains("quota") => {
            na("a cgroup CPU quota holds the server: raise it; qpslab does not change cgroups")
        }
        "server-bound" => match k.workers {
            Some(w) if w < k.server_cpus => {
                Remedy::Change(Change::Workers { from: w, to: w + 1 })
            }
            Some(_) => na(
                "every server CPU runs a worker: more CPUs for the server (--server-cpus) or less work per request",
            ),
            None => na("the server is the user's own: changing it is not in this version of climb"),
        },
        "both-saturated" => na(
            "both sides use all the CPU they have on this host: more CPUs, or the generator on another machine (--agents)",
        ),
        "cpu-throttled" => {
            na("a cgroup CPU quota holds a side: raise it; qpslab does not change cgroups")
        }
        "cpu-contention" | "shared-cpus" | "cpu-saturated" => na(
            "other work shares the benchmark's CPUs: stop or move it; not a change to measure",
        ),
        "run-failed" | "no-responses" | "connections-out-of-service" => {
            Remedy::Stop(format!("the run fails ({}): fix the target first", f.summary))
        }
        "link-saturated" | "nic-limit" | "interface-drops" => na(
            "the network is the bound: a faster link, more of them, or smaller responses; no setting here lifts it",
        ),
        "paced" => na("an open loop: the schedule (-R) sets the rate, not a knob"),
        _ => na("a host change (qpslab tune plan): not in this version of climb"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;
    use qpslab_host::doctor::Severity;

    fn finding(name: &'static str, summary: &str) -> Finding {
        Finding {
            name,
            severity: Severity::Info,
            summary: summary.into(),
            evidence: Vec::new(),
            remedy: String::new(),
        }
    }

    const ONE_EACH: Knobs = Knobs {
        connections: 1,
        threads: 1,
        generator_cpus: 1,
        workers: Some(1),
        server_cpus: 1,
        nginx_keepalive: None,
    };

    #[test]
    fn each_bound_names_its_knob_or_why_not() {
        let k = ONE_EACH;
        assert_eq!(
            remedy(&finding("latency-bound", ""), &k),
            Remedy::Change(Change::Connections { from: 1, to: 2 })
        );
        // One CPU each: neither side can get another thread.
        assert!(matches!(remedy(&finding("client-bound", ""), &k), Remedy::NotApplicable(_)));
        assert!(matches!(remedy(&finding("server-bound", ""), &k), Remedy::NotApplicable(_)));
        let roomy = Knobs { generator_cpus: 2, server_cpus: 4, ..k };
        assert_eq!(
            remedy(&finding("client-bound", ""), &roomy),
            Remedy::Change(Change::Threads { from: 1, to: 2 })
        );
        assert_eq!(
            remedy(&finding("server-bound", ""), &roomy),
            Remedy::Change(Change::Workers { from: 1, to: 2 })
        );
        // A quota is not a worker count; a user's server is not ours to change.
        let quota = finding("server-bound", "the server is held by its CPU quota");
        assert!(matches!(remedy(&quota, &roomy), Remedy::NotApplicable(_)));
        let theirs = Knobs { workers: None, ..roomy };
        assert!(matches!(remedy(&finding("server-bound", ""), &theirs), Remedy::NotApplicable(_)));
        assert!(matches!(remedy(&finding("run-failed", "404s"), &k), Remedy::Stop(_)));
        let most = Knobs { connections: MAX_CONNECTIONS, ..k };
        assert!(matches!(remedy(&finding("latency-bound", ""), &most), Remedy::NotApplicable(_)));
    }

    /// nginx's costs become one change each, only with the server in the climb's hands.
    #[test]
    fn nginx_costs_are_changes_only_with_apply_server() {
        let mut f = finding("nginx-config", "");
        f.evidence = vec![
            "access_log /l: a log line written per request, unbuffered".into(),
            "keepalive_requests 100: nginx closes a connection after that many requests".into(),
        ];
        let theirs = Knobs { workers: None, ..ONE_EACH };
        assert!(matches!(remedies(&f, &theirs)[..], [Remedy::NotApplicable(_)]));
        let ours = Knobs { nginx_keepalive: Some(100), ..theirs };
        assert_eq!(
            remedies(&f, &ours),
            [
                Remedy::Change(Change::NginxAccessLogOff),
                Remedy::Change(Change::NginxKeepaliveRequests { from: 100, to: 100_000 })
            ]
        );
        let c = Change::NginxKeepaliveRequests { from: 100, to: 100_000 };
        assert_eq!(c.describe(), "nginx keepalive_requests 100 -> 100000");
        assert_eq!(c.flag(), "nginx: keepalive_requests 100000;");
        assert_eq!(Change::NginxAccessLogOff.directive(), Some(("access_log", "off".into())));
    }

    #[test]
    fn a_change_is_made_on_a_copy_and_said_as_a_flag() {
        let o = BenchOptions::default();
        let c = Change::Connections { from: 1, to: 2 };
        assert_eq!(c.apply(&o).load.connections, Some(2));
        assert_eq!(o.load.connections, None);
        assert_eq!(c.describe(), "connections 1 -> 2");
        assert_eq!(c.flag(), "-c 2");
        assert!(c.same_knob(&Change::Connections { from: 2, to: 4 }));
        assert!(!c.same_knob(&Change::Workers { from: 1, to: 2 }));
    }
}
