//! nginx's own counters (its stub_status page, read at the window's ends) as evidence: the
//! connections it accepted and closed at once for want of a worker connection, and requests
//! it served that the run did not send.

use qpslab_host::stub_status::Window;

use super::summary::pct;
use super::{Cause, Context, Finding, Severity};

/// Other clients' requests count when they are this share of what nginx served or more...
const OTHER_SHARE: f64 = 0.2;
/// ...and this many a second (a health check or a scraper is not a neighbour).
const OTHER_PER_S: f64 = 50.0;

/// The page over the window when nginx closed connections it had accepted.
pub(super) fn unhandled(ctx: &Context) -> Option<(u64, &Window)> {
    let w = ctx.stub_status.as_ref()?;
    let n = w.unhandled();
    (n > 0).then_some((n, w))
}

/// Whether nginx passes requests to one of its own ports (a request then counts twice).
fn proxies_to_itself(ctx: &Context) -> bool {
    ctx.nginx.as_ref().is_some_and(|n| {
        n.upstreams.iter().any(|(_, addr)| {
            let port = addr
                .trim_end_matches('/')
                .rsplit_once(':')
                .and_then(|(_, p)| p.split('/').next().and_then(|p| p.parse::<u16>().ok()));
            port.is_some_and(|p| n.listen_ports.contains(&p))
        })
    })
}

/// nginx counted more requests a second than the run got answers: other clients shared the
/// server, and the run measured what they left it.
pub(super) fn other_traffic(ctx: &Context, out: &mut Vec<Finding>) {
    let (Some(w), Some(l)) = (&ctx.stub_status, &ctx.load) else { return };
    if l.duration_s <= 0.0 || w.secs <= 0.0 || proxies_to_itself(ctx) {
        return;
    }
    let run = l.responses as f64 / l.duration_s;
    let server = w.requests_per_s();
    let others = server - run;
    if others < OTHER_PER_S || others < OTHER_SHARE * server {
        return;
    }
    let share = others / server;
    out.push(Finding {
        name: "other-traffic",
        severity: Severity::Warning,
        summary: format!(
            "nginx served {server:.0} requests/s and the run got {run:.0}/s: {} of the server's requests were other clients', and the rate measured is the part they left",
            pct(share)
        ),
        evidence: vec![
            w.evidence(),
            format!(
                "the load: {} responses in its {:.1} s window ({run:.0}/s)",
                l.responses, l.duration_s
            ),
        ],
        remedy: "measure a server that serves nothing else (out of rotation), or read the result as the run's share of a busy server".into(),
        cause: Some(Cause::OtherTraffic { share, server_per_s: server, run_per_s: run }),
    });
}
