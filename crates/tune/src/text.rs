//! Text output of `tune plan`, `apply`, `revert` and `status`.

use super::apply::{ApplyReport, Item, RevertReport, Status};
use super::plan::Plan;
use std::fmt::Write as _;

/// One line per value: `current -> planned` (shortened when long, such as a 64-CPU list).
fn arrow(from: &str, to: &str) -> String {
    let short = |s: &str| {
        let s = s.trim();
        if s.chars().count() > 40 {
            format!("{}...", s.chars().take(37).collect::<String>())
        } else {
            s.to_string()
        }
    };
    format!("{} -> {}", short(from), short(to))
}

/// The plan: every change with its reason and source, what is left alone and why, the matching
/// server command.
pub fn plan_text(plan: &Plan) -> String {
    let mut s = String::new();
    let role = match plan.role {
        qpslab_host::sample::Role::Server => "server",
        qpslab_host::sample::Role::Client => "client",
    };
    let scope = plan
        .net_namespace
        .as_ref()
        .map_or(String::new(), |ns| format!(" in network namespace {ns}"));
    let ifaces =
        if plan.interfaces.is_empty() { "no interface".into() } else { plan.interfaces.join(", ") };
    let _ = writeln!(s, "tune plan ({role}{scope}) for {ifaces}");
    if !plan.irq_cpus.is_empty() {
        let _ = writeln!(s, "  IRQ CPUs      {}", plan.irq_cpus);
    }
    let shared = if plan.workers_shared { ", shared with interrupt work" } else { "" };
    let _ = writeln!(
        s,
        "  worker CPUs   {} ({} CPU{}{shared})",
        plan.worker_cpus,
        plan.worker_cpus.len(),
        if plan.worker_cpus.len() == 1 { "" } else { "s" }
    );
    s.push('\n');
    if plan.changes.is_empty() {
        s.push_str("Nothing to change: this host already matches the plan.\n");
    } else {
        let _ = writeln!(s, "{} changes (current -> planned):", plan.changes.len());
        let width = plan.changes.iter().map(|c| c.setting.len()).max().unwrap_or(0);
        for c in &plan.changes {
            let _ = writeln!(s, "  {:<width$}  {}", c.setting, arrow(&c.current, &c.planned));
            let _ = writeln!(s, "      {} [{}]", c.reason, c.source);
        }
    }
    if let Some(pid) = plan.irqbalance_pid.filter(|_| plan.moves_irqs()) {
        let _ = writeln!(
            s,
            "\nirqbalance (pid {pid}) is running: it would move these IRQs back. `tune apply` \
             refuses unless --stop-irqbalance."
        );
    }
    if !plan.kept.is_empty() {
        s.push_str("\nLeft as is:\n");
        for k in &plan.kept {
            let _ = writeln!(s, "  {}: {}", k.setting, k.reason);
        }
    }
    if plan.command.is_empty() {
        return s;
    }
    let _ = writeln!(s, "\nRun the workers with:\n  {}", plan.command);
    if plan.role == qpslab_host::sample::Role::Server {
        s.push_str(
            "  (nginx: `qpslab tune plan --emit nginx` prints the matching configuration)\n",
        );
    }
    s
}

/// A file's content as people read it: CPU masks as lists ("off" when empty), others trimmed.
fn value(path: &str, text: &str) -> String {
    match qpslab_host::cpuset::CpuSet::parse_mask(text) {
        Ok(set) if super::apply::is_mask_file(path) => super::plan::list_or_off(&set),
        _ => text.split_ascii_whitespace().collect::<Vec<_>>().join(" "),
    }
}

fn items(s: &mut String, title: &str, list: &[&Item], show: impl Fn(&Item) -> String) {
    if list.is_empty() {
        return;
    }
    let _ = writeln!(s, "{title}:");
    let width = list.iter().map(|i| i.setting.len()).max().unwrap_or(0);
    for i in list {
        let _ = writeln!(s, "  {:<width$}  {}", i.setting, show(i));
    }
}

/// What apply wrote.
pub fn apply_text(report: &ApplyReport) -> String {
    let mut s = String::new();
    if report.written.is_empty() && report.irqbalance_stopped.is_none() {
        return "Nothing to change: this host already matches the plan; no journal written.\n"
            .into();
    }
    if let Some(pid) = report.irqbalance_stopped {
        let _ = writeln!(s, "irqbalance (pid {pid}) stopped; revert starts it again.");
    }
    let list: Vec<&Item> = report.written.iter().collect();
    items(&mut s, &format!("Applied {} changes", list.len()), &list, |i| {
        arrow(&value(&i.path, &i.before), &value(&i.path, &i.applied))
    });
    let _ = writeln!(
        s,
        "Journal: {} (`qpslab tune revert` restores every value).",
        report.journal.display()
    );
    s
}

/// What revert did.
pub fn revert_text(report: &RevertReport, journal: &std::path::Path) -> String {
    if report.no_journal {
        return format!("No active tune journal at {}: nothing to revert.\n", journal.display());
    }
    let mut s = String::new();
    items(&mut s, "Restored", &report.restored.iter().collect::<Vec<_>>(), |i| {
        arrow(&value(&i.path, &i.now), &value(&i.path, &i.before))
    });
    if !report.unchanged.is_empty() {
        let _ = writeln!(
            s,
            "{} values were already back at their value before apply.",
            report.unchanged.len()
        );
    }
    items(
        &mut s,
        "Changed by someone else since apply, kept (--force restores them)",
        &report.kept.iter().collect::<Vec<_>>(),
        |i| format!("apply left {}, now {}", value(&i.path, &i.applied), value(&i.path, &i.now)),
    );
    if !report.failed.is_empty() {
        s.push_str("Failed:\n");
        for (i, e) in &report.failed {
            let _ = writeln!(s, "  {} ({}): {e}", i.setting, i.path);
        }
    }
    if let Some(how) = &report.irqbalance_restarted {
        let _ = writeln!(s, "irqbalance started again ({how}).");
    }
    if report.clean() {
        let _ = writeln!(s, "Every value is back; journal {} removed.", journal.display());
    } else {
        let _ = writeln!(s, "Journal {} stays active.", journal.display());
    }
    s
}

/// The active journal and which values still match it.
pub fn status_text(status: Option<&Status>, journal: &std::path::Path) -> String {
    let Some(st) = status else {
        return format!(
            "No active tune journal at {}: the host runs as tune found it.\n",
            journal.display()
        );
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Active tune journal {}: {} values by `{}`{}",
        st.journal.display(),
        st.entries.len(),
        st.command,
        if st.complete { "" } else { " (apply did not finish: revert it)" }
    );
    if let Some(pid) = st.irqbalance_stopped {
        let _ = writeln!(s, "irqbalance (pid {pid}) was stopped by apply.");
    }
    let width = st.entries.iter().map(|e| e.item.setting.len()).max().unwrap_or(0);
    for e in &st.entries {
        let (path, now) = (&e.item.path, value(&e.item.path, &e.item.now));
        let detail = match e.state {
            "changed" => format!("apply left {}, now {now}", value(path, &e.item.applied)),
            _ => now,
        };
        let _ = writeln!(s, "  {:<width$}  {:<10} {detail}", e.item.setting, e.state);
    }
    s
}
