//! The disk on the request path. A server that writes (or reads) storage while it answers
//! puts the device in the request's path: the device's own queue, by Little's law, is how
//! many of the requests in service are at the disk at once, so the device's mean queue over
//! the requests in service is the share of each response's time spent there. The server's
//! threads in uninterruptible sleep (`D`) at the samples, its block I/O (/proc/PID/io), the
//! device's flushes against the responses (one per response is an fsync per request) and
//! the host's I/O pressure (PSI) are the evidence.

use super::explain::{fmt_ms, Explanation};
use super::summary::{pct, DiskRate, ProcSummary, Summary};
use super::{Cause, Context, Finding, Severity};
use qpslab_host::sample::Role;

/// Share of each response's time at the disk from which it is named.
const AT_DISK: f64 = 0.2;
/// Share of the device's bytes the server must have moved for the device's queue to be its.
const SERVER_SHARE: f64 = 0.2;
/// Share of the server's thread readings in `D` that names the disk by itself, with at least
/// [`MIN_READINGS`] readings.
const BLOCKED: f64 = 0.2;
const MIN_READINGS: usize = 12;

fn bytes(n: f64) -> String {
    match n {
        n if n >= 10.0 * 1048576.0 => format!("{:.0} MiB", n / 1048576.0),
        n if n >= 10.0 * 1024.0 => format!("{:.0} KiB", n / 1024.0),
        n => format!("{n:.0} bytes"),
    }
}

pub(super) fn disk_wait(s: &Summary, ctx: &Context, ex: &Explanation, out: &mut Vec<Finding>) {
    let servers: Vec<_> = s.processes.iter().filter(|p| p.role == Role::Server).collect();
    let readings: usize = servers.iter().map(|p| p.thread_readings).sum();
    let blocked: f64 = servers.iter().map(|p| p.blocked_share * p.thread_readings as f64).sum();
    let blocked_share = blocked / readings.max(1) as f64;
    let secs = s.duration_s.max(1e-9);
    let moved: u64 =
        servers.iter().map(|p| p.storage_written.unwrap_or(0) + p.storage_read.unwrap_or(0)).sum();
    let moved_per_s = moved as f64 / secs;
    // The device that queued most, and the server's share of what it moved.
    let device: Option<(&DiskRate, f64)> = s
        .disks
        .iter()
        .map(|d| (d, (moved_per_s / (d.written_per_s + d.read_per_s).max(1.0)).min(1.0)))
        .filter(|(_, mine)| *mine >= SERVER_SHARE)
        .max_by(|a, b| a.0.queue.total_cmp(&b.0.queue));
    let at_disk = match (device, ex.in_service) {
        (Some((d, _)), Some(n)) if n > 0.0 => Some((d.queue / n).min(1.0)),
        _ => None,
    };
    let by_queue = at_disk.is_some_and(|a| a >= AT_DISK);
    let by_state = readings >= MIN_READINGS && blocked_share >= BLOCKED;
    if moved == 0 || !(by_queue || by_state) {
        return;
    }
    let mut evidence = Vec::new();
    let responses = ctx.load.as_ref().map_or(0, |l| l.responses);
    let per = (moved as f64 / responses.max(1) as f64).round();
    evidence.push(format!(
        "the server moved {} to and from storage in the window{} (/proc/PID/io)",
        bytes(moved as f64),
        if responses > 0 { format!(", {} per response", bytes(per)) } else { String::new() }
    ));
    if let (Some((d, mine)), Some(n)) = (device, ex.in_service) {
        evidence.push(format!(
            "{}: {:.2} I/Os in flight on average (iostat's aqu-sz), the server's {} of its bytes: of the {n:.1} requests in service, {:.2} were at the disk (Little's law)",
            d.name,
            d.queue,
            pct(mine),
            d.queue.min(n)
        ));
        let rate = ex.rate;
        evidence.push(format!(
            "{}: busy {} of the window, {:.0} writes/s of {} each, {:.0} flushes/s of {} each{}",
            d.name,
            pct(d.busy),
            d.writes_per_s,
            fmt_ms(d.write_ms),
            d.flushes_per_s,
            fmt_ms(d.flush_ms),
            if rate > 0.0 && d.flushes_per_s >= 0.5 * rate {
                format!(
                    " against {rate:.0} responses/s: a flush per response (an fsync per request)"
                )
            } else {
                String::new()
            }
        ));
    }
    if readings > 0 {
        evidence.push(format!(
            "{} of {readings} readings of the server's threads in uninterruptible sleep (D: waiting on a block device)",
            pct(blocked_share)
        ));
    }
    if let Some(p) = s.io_pressure {
        evidence.push(format!(
            "tasks waited for I/O {} of the window (PSI io some, host-wide)",
            pct(p)
        ));
    }
    let name = device.map(|(d, _)| d.name.clone());
    let share = at_disk.unwrap_or(blocked_share);
    let read: u64 = servers.iter().map(|p| p.storage_read.unwrap_or(0)).sum();
    let evicted = evicted_by(out, &servers, read, moved);
    let at = name.as_deref().unwrap_or("a block device");
    let f = match evicted {
        Some(cause) => Finding {
            name: "disk-wait",
            severity: Severity::Info,
            summary: format!(
                "a consequence, not a cause: the server waits on the disk, {} of each response's time at {at}, reading what its cgroup's memory limit evicted",
                pct(share)
            ),
            evidence,
            remedy: "none of its own: the cgroup's memory limit (memory-limit)".into(),
            cause: Some(cause),
        },
        None => Finding {
            name: "disk-wait",
            severity: Severity::Warning,
            summary: format!(
                "the server waits on the disk: {} of each response's time is spent at {at}",
                pct(share)
            ),
            evidence,
            remedy: "take the disk off the request path: no fsync per request (group commit, an asynchronous or buffered log), scratch files on tmpfs; or a faster disk".into(),
            cause: Some(Cause::DiskWait { share, device: name }),
        },
    };
    out.push(f);
}

/// The memory limit a server's reads come from: when it reads more than it writes (`read` of
/// the `moved` bytes) in a cgroup at its memory limit, it reads again what the limit evicted,
/// and the limit's cause is the disk wait's.
fn evicted_by(out: &[Finding], servers: &[&ProcSummary], read: u64, moved: u64) -> Option<Cause> {
    if read * 2 < moved {
        return None;
    }
    out.iter()
        .filter_map(|f| f.cause.as_ref())
        .find(|c| {
            matches!(c, Cause::MemoryLimit { pid, hits, .. }
                if *hits > 0 && servers.iter().any(|p| p.pid == *pid))
        })
        .cloned()
}
