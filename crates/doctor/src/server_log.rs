//! The server's own word: what its error log gained over the window (nginx's, found from its
//! configuration), folded into messages with counts. Any message at `warn` or worse is
//! evidence, named with its count whether or not it is known here; the ones an engineer
//! recognises at once are typed causes with a concrete remedy: out of worker connections, out
//! of descriptors, a rate or connection limit, an upstream that failed or timed out.

use qpslab_host::logs::{LogWindow, Message};

use super::{Cause, Context, Finding, Severity};

/// nginx's levels from `warn` up: what an error log says when something went wrong.
const WORSE_THAN_NOTICE: [&str; 5] = ["warn", "error", "crit", "alert", "emerg"];

/// A message at `warn` or worse, with the log that said it.
pub(super) fn said(ctx: &Context) -> Vec<(&LogWindow, &Message)> {
    let mut v: Vec<(&LogWindow, &Message)> = ctx
        .server_logs
        .iter()
        .flat_map(|w| w.messages.iter().map(move |m| (w, m)))
        .filter(|(_, m)| WORSE_THAN_NOTICE.contains(&m.level.as_str()))
        .collect();
    v.sort_by_key(|(_, m)| std::cmp::Reverse(m.count));
    v
}

/// A known message of the server's log, read as a cause: what it means and the remedy.
pub(super) struct Known {
    pub cause: Cause,
    /// What happened, in a few words ("nginx ran out of worker connections").
    pub what: String,
    /// The log's own words, with the count and the file.
    pub evidence: String,
    pub remedy: String,
    /// A limit's message (a rate or connection limit turned requests away).
    pub limit: bool,
}

/// The most frequent known message, as a cause; else the server's configured connection
/// limit when the load's connections exceed it (nginx logs running out only at `warn`, below
/// its default level, when it can close idle keep-alive connections instead).
pub(super) fn known(ctx: &Context, cpus: usize) -> Option<Known> {
    said(ctx)
        .into_iter()
        .find_map(|(w, m)| recognise(ctx, w, m))
        .or_else(|| unhandled_limit(ctx))
        .or_else(|| configured_limit(ctx, cpus))
}

/// nginx closed connections it had accepted (its stub_status: `handled` behind `accepts`):
/// it had no worker connection for them, whatever its log's level let it say.
fn unhandled_limit(ctx: &Context) -> Option<Known> {
    let (n, w) = super::stub::unhandled(ctx)?;
    let per = ctx
        .nginx
        .as_ref()
        .and_then(|c| c.worker_connections)
        .unwrap_or(qpslab_host::nginx::DEFAULT_WORKER_CONNECTIONS);
    let proxies = ctx.nginx.as_ref().is_some_and(|c| !c.upstreams.is_empty());
    let wanted = ctx.load.as_ref().map_or(0, |l| l.connections) * if proxies { 2 } else { 1 };
    Some(Known {
        cause: Cause::WorkerConnections { limit: per, wanted },
        what: format!(
            "nginx closed {n} connection(s) it had accepted: no worker connection was free ({per} per worker)"
        ),
        evidence: w.evidence(),
        remedy: worker_connections_remedy(wanted, per, proxies),
        limit: false,
    })
}

/// nginx's connections at most (worker_connections x workers; `auto` is a worker per CPU of
/// `cpus`) below the load's connections (twice them when it proxies: a request holds one to
/// the upstream too).
fn configured_limit(ctx: &Context, cpus: usize) -> Option<Known> {
    let (n, l) = (ctx.nginx.as_ref()?, ctx.load.as_ref()?);
    let per = n.worker_connections.unwrap_or(qpslab_host::nginx::DEFAULT_WORKER_CONNECTIONS);
    let workers = match n.worker_processes.as_deref() {
        Some("auto") => cpus as u64,
        Some(w) => w.parse().unwrap_or(1),
        None => 1,
    }
    .max(1);
    let proxies = !n.upstreams.is_empty();
    let wanted = l.connections * if proxies { 2 } else { 1 };
    if wanted <= per * workers {
        return None;
    }
    Some(Known {
        cause: Cause::WorkerConnections { limit: per, wanted },
        what: format!(
            "nginx holds at most {} connections (worker_connections {per} x {workers} worker(s)) and the run needed {wanted}",
            per * workers
        ),
        evidence: format!(
            "nginx's configuration: worker_connections {per}, worker_processes {}; the load kept {} connections{}",
            n.worker_processes.as_deref().unwrap_or("1"),
            l.connections,
            if proxies { ", each request holding a second one to the upstream" } else { "" }
        ),
        remedy: worker_connections_remedy(wanted, per, proxies),
        limit: false,
    })
}

fn worker_connections_remedy(wanted: u64, limit: u64, proxies: bool) -> String {
    let (to, nofile) = qpslab_tune::remedy::nginx_worker_connections(wanted, limit);
    format!(
        "in nginx's configuration: `events {{ worker_connections {to}; }}` and `worker_rlimit_nofile {nofile};` (each worker needs a descriptor per connection{}), then `nginx -s reload`; fewer connections (-c) also fit",
        if proxies { ", and a proxied request holds two" } else { "" }
    )
}

fn quote(w: &LogWindow, m: &Message) -> String {
    format!("{}: \"{}\" {} time(s) in the window ({})", m.level, m.example, m.count, w.path)
}

/// The log's own words when the server said it ran out of file descriptors in the window
/// (nginx's accept4() or open() failing with EMFILE), with the count and the file.
pub(super) fn out_of_descriptors(ctx: &Context) -> Option<String> {
    said(ctx)
        .into_iter()
        .find(|(_, m)| m.example.contains("Too many open files"))
        .map(|(w, m)| quote(w, m))
}

/// The nginx limit a message of its log says turned requests away: `limit_req`
/// ("limiting requests, excess: ...") or `limit_conn` ("limiting connections by zone ...").
pub(crate) fn limit_named(message: &str) -> Option<&'static str> {
    if message.starts_with("limiting requests") {
        Some("limit_req")
    } else if message.starts_with("limiting connections") {
        Some("limit_conn")
    } else {
        None
    }
}

fn recognise(ctx: &Context, w: &LogWindow, m: &Message) -> Option<Known> {
    let e = m.example.as_str();
    let evidence = quote(w, m);
    let conns = ctx.load.as_ref().map_or(0, |l| l.connections);
    let proxies = ctx.nginx.as_ref().is_some_and(|n| !n.upstreams.is_empty());
    if e.contains("worker_connections are not enough") {
        let limit = e
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .or_else(|| ctx.nginx.as_ref().and_then(|n| n.worker_connections))
            .unwrap_or(qpslab_host::nginx::DEFAULT_WORKER_CONNECTIONS);
        // A proxied request holds a second connection, to the upstream.
        let wanted = conns * if proxies { 2 } else { 1 };
        return Some(Known {
            cause: Cause::WorkerConnections { limit, wanted },
            what: format!("nginx ran out of worker connections ({limit} per worker)"),
            evidence,
            remedy: worker_connections_remedy(wanted, limit, proxies),
            limit: false,
        });
    }
    if e.contains("Too many open files") {
        return Some(Known {
            cause: Cause::ServerLog { message: m.example.clone(), count: m.count },
            what: "the server ran out of file descriptors".into(),
            evidence,
            remedy: "raise the server's descriptor limit: nginx's `worker_rlimit_nofile` (and `worker_connections` to match), LimitNOFILE= for a systemd service, `ulimit -n` for one started by hand".into(),
            limit: false,
        });
    }
    if let Some(what) = limit_named(e) {
        let zone = e.split("by zone ").nth(1).map(|z| z.split(',').next().unwrap_or(z).to_string());
        return Some(Known {
            cause: Cause::ServerLog { message: m.example.clone(), count: m.count },
            what: format!(
                "nginx's {what} turned requests away{}",
                zone.map(|z| format!(" (zone {z})")).unwrap_or_default()
            ),
            evidence,
            remedy: format!("lift nginx's {what} for the benchmark, or measure below its limit"),
            limit: true,
        });
    }
    let upstream = [
        "while connecting to upstream",
        "upstream timed out",
        "no live upstreams",
        "upstream prematurely closed",
        "while reading response header from upstream",
    ];
    if upstream.iter().any(|u| e.contains(u)) {
        return Some(Known {
            cause: Cause::ServerLog { message: m.example.clone(), count: m.count },
            what: "the proxy's upstream failed or was too slow".into(),
            evidence,
            remedy: "the application behind the proxy: its workers, its listen backlog, its timeouts (proxy_read_timeout), or fewer connections".into(),
            limit: false,
        });
    }
    None
}

/// The server's connection limit below what the run needed, when the run did not fail (a
/// failed run names it in its headline): the connections past it wait in the listen queue or
/// are closed, which the queue findings show as their consequence.
fn connection_limit(ctx: &Context, cpus: usize, out: &mut Vec<Finding>) {
    let Some(k) = known(ctx, cpus).filter(|k| matches!(k.cause, Cause::WorkerConnections { .. }))
    else {
        return;
    };
    if out.iter().any(|f| f.cause.as_ref() == Some(&k.cause)) {
        return;
    }
    out.push(Finding {
        name: "server-connection-limit",
        // The run measures the limit, whatever else it shows (a generator busy reconnecting).
        severity: Severity::Critical,
        summary: format!(
            "{}: the connections past it wait in the listen queue or are closed",
            k.what
        ),
        evidence: with_stub(ctx, k.evidence),
        remedy: k.remedy,
        cause: Some(k.cause),
    });
}

/// `first`, then nginx's stub_status when it shows connections closed for want of a worker
/// connection and is not `first` already.
pub(super) fn with_stub(ctx: &Context, first: String) -> Vec<String> {
    let stub = super::stub::unhandled(ctx).map(|(_, w)| w.evidence()).filter(|e| *e != first);
    std::iter::once(first).chain(stub).collect()
}

/// The server's log said something at `warn` or worse in the window: a warning when it said
/// it at `error` or worse, info when only warnings (or when the headline already is it).
pub(super) fn finding(ctx: &Context, cpus: usize, out: &mut Vec<Finding>) {
    connection_limit(ctx, cpus, out);
    let said = said(ctx);
    let Some((w, top)) = said.first() else { return };
    let serious = said.iter().any(|(_, m)| m.level != "warn");
    let known = said.iter().find_map(|(w, m)| recognise(ctx, w, m));
    let limit_named = out.iter().any(|f| matches!(f.cause, Some(Cause::RateLimit { .. })));
    let headline_has_it = known.as_ref().is_some_and(|k| {
        out.iter().any(|f| f.cause.as_ref() == Some(&k.cause)) || (limit_named && k.limit)
    });
    let total: u64 = said.iter().map(|(_, m)| m.count).sum();
    out.push(Finding {
        name: "server-log",
        severity: if serious && !headline_has_it { Severity::Warning } else { Severity::Info },
        summary: match &known {
            Some(k) => format!("the server's error log says what went wrong: {} ({} line(s) at warn or worse in the window)", k.what, total),
            None => format!("the server's error log said \"{}\" {} time(s) in the window ({} line(s) at warn or worse)", top.example, top.count, total),
        },
        evidence: said.iter().take(3).map(|(w, m)| quote(w, m)).collect(),
        remedy: known.as_ref().map_or_else(|| format!("read {}: the server says why in its own words", w.path), |k| k.remedy.clone()),
        cause: Some(known.map_or_else(
            || Cause::ServerLog { message: top.example.clone(), count: top.count },
            |k| k.cause,
        )),
    });
}
