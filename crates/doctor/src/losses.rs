//! Whose the host's losses are. TCP's counters of retransmissions and drops and softnet's
//! drops count every socket and packet of the network namespace: another program's losses show
//! in them as much as the run's. The run's own connections (to or from its server's ports, read
//! by sock_diag at the window's start and end) say what the run lost; a host-wide count is the
//! run's only when they show losses, another's when they lost none while every connection of
//! the run stayed open to be read, and else not known: then it is said as the host's and never
//! as critical.

use std::collections::HashMap;

use qpslab_sys::netlink::Connection;

use super::{Context, Finding, Severity};
use qpslab_host::sample::Sample;

/// What the run's connections lost over the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RunLosses {
    /// The run's connections seen in the window (read at each sample).
    pub connections: usize,
    /// Segments they retransmitted in the window.
    pub retrans: u64,
    /// Packets dropped on their way into them in the window.
    pub drops: u64,
    /// Every connection of the run stayed open to the end (no reconnects): the counts are
    /// all of the run's, and zero means none.
    pub complete: bool,
}

/// The run's losses from the first and last samples' connections; None when the run's ports
/// are not known or the connections were not read (a fixture tree, no sock_diag).
pub(super) fn run_losses(samples: &[Sample], ctx: &Context) -> Option<RunLosses> {
    let ports = &ctx.ports;
    if ports.is_empty() {
        return None;
    }
    let first = samples.first()?.connections.as_ref()?;
    let last = samples.last()?.connections.as_ref()?;
    let ours = |c: &&Connection| ports.contains(&c.local_port) || ports.contains(&c.remote_port);
    let before: HashMap<u64, &Connection> =
        first.iter().filter(ours).map(|c| (c.cookie, c)).collect();
    let kept_open =
        ctx.load.as_ref().is_some_and(|l| l.mode != "conn-per-request" && l.reconnects == 0);
    let mut l = RunLosses { connections: 0, retrans: 0, drops: 0, complete: kept_open };
    for c in last.iter().filter(ours) {
        let (r, d) = before.get(&c.cookie).map_or((0, 0), |b| (b.retrans, b.drops));
        l.connections += 1;
        l.retrans += u64::from(c.retrans.saturating_sub(r));
        l.drops += u64::from(c.drops.saturating_sub(d));
    }
    // None of the run's connections seen: nothing to say of them.
    (l.connections > 0).then_some(l)
}

/// Says a finding made of a host-wide count as the run's, another's or the host's: `mine` is
/// the run's own count of the same loss (`what`, e.g. "segments retransmitted").
pub(super) fn attribute(
    mut f: Finding,
    losses: Option<&RunLosses>,
    mine: impl Fn(&RunLosses) -> u64,
    what: &str,
) -> Finding {
    match losses {
        Some(l) if mine(l) > 0 => {
            f.evidence.push(format!(
                "{} {what} on the run's own {} connection(s) in the window (sock_diag)",
                mine(l),
                l.connections
            ));
        }
        Some(l) if l.complete => {
            let why = format!(
                "the run's {} connection(s), open throughout, had no {what} in the window (sock_diag): the counters are host-wide",
                l.connections
            );
            f = not_this_runs(f, why, "the host's other traffic lost them (ss -ti shows whose)");
        }
        _ => {
            f.severity = f.severity.min(Severity::Warning);
            f.evidence.push(
                "host-wide counters: the run's own connections could not be told apart (they were not all open to be read), so this may be another program's".into(),
            );
        }
    }
    f
}

/// A finding of host-wide counters said as the host's, not the run's: info, `why` as its
/// evidence, and no remedy for this run but where to look.
pub(super) fn not_this_runs(mut f: Finding, why: String, look: &str) -> Finding {
    f.severity = Severity::Info;
    f.cause = Some(super::Cause::NotTheRuns);
    f.summary = format!("on this host but not in this run: {}", f.summary);
    f.evidence.push(why);
    f.remedy = format!("none for this run; {look}");
    f
}
