//! A server that closes the connection after (nearly) every response in a run that keeps its
//! connections alive: each request pays a TCP handshake and the server's accept, so the run
//! measures a connection per request (an HTTP/1.0 server, `Connection: close` on every
//! answer, nginx's `keepalive_timeout 0`). nginx's `keepalive_requests` closing after many
//! requests is `nginx-config`'s, not this.

use super::summary::pct;
use super::{Cause, Context, Finding, Severity};

/// Reconnects per response from which the server is said to close after each: half.
const CLOSED_PER_RESPONSE: f64 = 0.5;

pub(super) fn closes_each(ctx: &Context, out: &mut Vec<Finding>) {
    let Some(l) = ctx.load.as_ref().filter(|l| l.mode != "conn-per-request" && l.responses > 0)
    else {
        return;
    };
    let per = l.reconnects as f64 / l.responses as f64;
    // Reconnects after errors are the errors' (the failed-run and out-of-service findings).
    if per < CLOSED_PER_RESPONSE || l.failed * 2 > l.reconnects {
        return;
    }
    let mut evidence = vec![format!(
        "{} reconnects for {} responses ({per:.2} a response), {} failed requests: the server closed the connections, not errors",
        l.reconnects, l.responses, l.failed
    )];
    if l.mean_connect_s > 0.0 {
        evidence.push(format!(
            "each new connection took {:.3} ms to open (the load's mean connect time)",
            l.mean_connect_s * 1e3
        ));
    }
    out.push(Finding {
        name: "no-keep-alive",
        severity: Severity::Warning,
        summary: format!(
            "the server closed the connection after {} of its responses: each request paid a TCP handshake and the server's accept, so the run measured a connection per request, not kept-alive connections",
            pct(per.min(1.0))
        ),
        evidence,
        remedy: "keep connections alive on the server: HTTP/1.1 persistent connections, no `Connection: close` (Python's http.server: protocol_version = \"HTTP/1.1\"; nginx: keepalive_timeout above 0); or measure this on purpose with --conn-per-request".into(),
        cause: Some(Cause::KeepAliveOff { per_response: per }),
    });
}
