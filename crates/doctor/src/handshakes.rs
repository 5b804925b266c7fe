//! TLS handshakes as each response's cost: an https run that opens connections (one per
//! request, or reconnects) pays a full handshake for each, a key exchange on both sides and a
//! signature on the server's, which costs more CPU than the request itself. A saturated side
//! then spends its CPU on handshakes, and more workers buy less than keeping connections or
//! resuming sessions would. Said at info: it explains the rate and is not a fault of the host.

use super::explain::fmt_ms;
use super::{Cause, Context, Finding, Severity};

/// Full handshakes per response from which they are named.
const PER_RESPONSE: f64 = 0.2;

pub(super) fn tls_handshakes(ctx: &Context, out: &mut Vec<Finding>) {
    let Some(load) = ctx.load.as_ref().filter(|l| l.responses > 0) else { return };
    let Some(t) = load.tls.filter(|t| t.full > 0) else { return };
    let per = t.full as f64 / load.responses as f64;
    if per < PER_RESPONSE {
        return;
    }
    let saturated = out.iter().find_map(|f| match &f.cause {
        Some(Cause::Saturated { side, .. }) => Some(side.clone()),
        _ => None,
    });
    let summary = match saturated.as_deref() {
        Some("both") => format!("the server and the generator spend their CPU on TLS handshakes: {per:.2} full handshake(s) per response, each a key exchange on both sides and a signature on the server's"),
        Some(side) => format!("the {side} spends its CPU on TLS handshakes: {per:.2} full handshake(s) per response, each a key exchange on both sides and a signature on the server's"),
        None => format!(
            "each response waits for a TLS handshake first: {per:.2} full handshake(s) per response, {} each",
            fmt_ms(t.mean_s * 1e3)
        ),
    };
    out.push(Finding {
        name: "tls-handshakes",
        severity: Severity::Info,
        summary,
        evidence: vec![
            format!(
                "{} full handshakes and {} resumed for {} responses in the window",
                t.full, t.resumed, load.responses
            ),
            format!(
                "a handshake took {} on average (from the TCP connection to the end of TLS), a response {}",
                fmt_ms(t.mean_s * 1e3),
                fmt_ms(load.mean_latency_s * 1e3)
            ),
        ],
        remedy: "keep connections alive (no --conn-per-request; the server's keep-alive limits), or resume sessions (`qpslab load --tls-reuse`; the server's session tickets or cache): a resumed handshake skips the certificate and its signature; an ECDSA certificate signs far cheaper than an RSA one".into(),
        cause: Some(Cause::TlsHandshakes { per_response: per, resumed: t.resumed }),
    });
}
