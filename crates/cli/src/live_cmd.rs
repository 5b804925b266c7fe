//! `--live` and `--prometheus-rw` on load, bench and sweep: started before the run (a taken
//! address is exit 2 before any load), told the end and the report after it.

use qpslab_live::{End, Live, RunInfo};
use qpslab_runs::report;
use qpslab_runs::select::{self, Selector};
use qpslab_runs::store::Store;

use crate::args::LiveArgs;
use crate::UsageError;

/// Starts the live view when asked; prints where the page is.
pub fn start(a: &LiveArgs, info: RunInfo) -> anyhow::Result<Option<Live>> {
    let opts = a.options();
    if !opts.is_on() {
        return Ok(None);
    }
    let live = Live::start(&opts, info).map_err(|e| UsageError(e.to_string()))?;
    if let Some(url) = live.url() {
        eprintln!("qpslab: live page at {url} (Prometheus metrics at {url}metrics)");
        if !is_loopback(&url) {
            eprintln!(
                "qpslab: warning: --live: the page is served beyond loopback; anyone who can \
                 reach {url} can read the run"
            );
        }
    }
    Ok(Some(live))
}

fn is_loopback(url: &str) -> bool {
    let host = url.trim_start_matches("http://").rsplit_once(':').map_or("", |(h, _)| h);
    host.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Tells the page the run ended (with the report of `runs` in `store`, as `qpslab report`
/// draws it) and waits for the exporter's last push.
pub fn finish(live: Option<Live>, passed: bool, summary: String, report_html: Option<String>) {
    let Some(live) = live else { return };
    // Ctrl-C ends the wait for pages and the linger (the run's own flag).
    let never = std::sync::atomic::AtomicBool::new(false);
    let stop = qpslab_sys::signals::stop_flag().unwrap_or(&never);
    let end = End { passed, summary };
    if let Some(trouble) = live.finish(end, report_html, stop) {
        eprintln!("qpslab: warning: --prometheus-rw: {trouble}");
    }
}

/// The report of stored runs (a sweep, or run ids), as `qpslab report` draws it.
pub fn report_of(store: &Store, sel: &Selector, title: String) -> Option<String> {
    let groups = select::groups(store, sel).ok()?;
    let sweeps = store.sweeps().ok()?;
    let sweep = match sel {
        Selector::Sweep(id) => sweeps.iter().find(|s| s.id == *id),
        _ => None,
    };
    let climb = sweep.and_then(|s| report::stairs::of_sweep(store, s));
    Some(report::render(&report::Input { title, sweep, groups: &groups, climb }))
}

/// A store in memory, for the report of a run the user did not keep.
pub fn scratch_store() -> Option<Store> {
    Store::open(std::path::Path::new(":memory:")).ok()
}

/// One line for the end banner.
pub fn summary(r: &qpslab_load::Report) -> String {
    format!(
        "{} requests in {:.1} s, {:.0} requests/s, p99 {}, {} failed",
        r.requests.completed,
        r.duration_s,
        r.throughput_rps,
        qpslab_runs::compare::fmt_us(r.latency_us.p99),
        r.requests.failed
    )
}
