//! `qpslab tune plan|apply|revert|status`: flags into plan options, library calls, output.

use std::io::BufRead as _;

use qpslab_host::sample::Role;
use qpslab_host::{CpuSet, Host, Root};
use qpslab_tune::{self as tune, text, ApplyOptions, Plan, PlanOptions, RootFiles, TuneError};

use qpslab_lab::hostset;

use crate::args::{PlanSpec, TuneArgs, TuneCommand};
use crate::{output, Outcome, UsageError};

pub fn run(a: TuneArgs) -> anyhow::Result<Outcome> {
    match a.command {
        TuneCommand::Plan(p) => {
            let (_, plan) = build_plan(&p.spec)?;
            match p.emit.as_deref() {
                Some("nginx") => output::print(&plan.nginx)?,
                Some(_) => output::print(&format!("{}\n", plan.command))?,
                None => output::emit(p.json, &plan, || text::plan_text(&plan))?,
            }
            Ok(Outcome::Passed)
        }
        TuneCommand::Apply(a) => {
            let (root, plan) = build_plan(&a.spec)?;
            let opts = ApplyOptions {
                journal: tune::journal_path(&root, a.journal.as_deref()),
                stop_irqbalance: a.stop_irqbalance,
                live: tune::is_live(root.dir()),
                command: std::env::args().collect::<Vec<_>>().join(" "),
            };
            tune::apply::check_apply(&plan, &opts).map_err(usage)?;
            if !a.yes && !plan.changes.is_empty() && !confirm(&plan)? {
                output::print("Not applied.\n")?;
                return Ok(Outcome::Passed);
            }
            let report = tune::apply(&mut RootFiles(root.clone()), root.dir(), &plan, &opts)
                .map_err(usage)?;
            output::emit(a.json, &report, || text::apply_text(&report))?;
            Ok(Outcome::Passed)
        }
        TuneCommand::Revert(r) => {
            let root = Root::new(&r.root);
            let journal = tune::journal_path(&root, r.journal.as_deref());
            let report = tune::revert(
                &mut RootFiles(root.clone()),
                &journal,
                r.force,
                tune::is_live(&r.root),
            )
            .map_err(usage)?;
            output::emit(r.json, &report, || text::revert_text(&report, &journal))?;
            Ok(if report.clean() { Outcome::Passed } else { Outcome::ChecksFailed })
        }
        TuneCommand::Status(s) => {
            let root = Root::new(&s.root);
            let journal = tune::journal_path(&root, s.journal.as_deref());
            let status = tune::status(&mut RootFiles(root), &journal).map_err(usage)?;
            output::emit(s.json, &status, || text::status_text(status.as_ref(), &journal))?;
            Ok(Outcome::Passed)
        }
    }
}

/// Refusals and journal problems are the user's to fix (exit 2); a failed write is exit 1.
fn usage(e: TuneError) -> anyhow::Error {
    match e {
        TuneError::Refused(m) => UsageError(m).into(),
        TuneError::Journal(j) => UsageError(j.to_string()).into(),
        e @ TuneError::Write { .. } => e.into(),
    }
}

fn build_plan(spec: &PlanSpec) -> anyhow::Result<(Root, Plan)> {
    let root = Root::new(&spec.root);
    let host = Host::read(&root)
        .map_err(|e| UsageError(format!("--root {}: {e}", spec.root.display())))?;
    if let Some(file) = &spec.from {
        return Ok((root.clone(), from_file(&root, &host, file)?));
    }
    let irq_cpus = spec
        .irq_cpus
        .as_deref()
        .map(|l| CpuSet::parse_list(l).map_err(|e| UsageError(format!("--irq-cpus {l}: {e}"))))
        .transpose()?;
    let opts = PlanOptions {
        ifaces: spec.ifaces.clone(),
        irq_cpus,
        workers: spec.workers,
        role: if spec.role == "client" { Role::Client } else { Role::Server },
    };
    let plan = tune::plan(&host, &opts).map_err(|e| UsageError(e.0))?;
    Ok((root, plan))
}

/// The plan of the settings `file` names, against this host.
fn from_file(root: &Root, host: &Host, file: &std::path::Path) -> anyhow::Result<Plan> {
    let bad = |e: String| UsageError(format!("--from {}: {e}", file.display()));
    let text = std::fs::read_to_string(file).map_err(|e| bad(e.to_string()))?;
    let spec = qpslab_lab::sweep::file::tune_file(&text).map_err(bad)?;
    let change = hostset::host_change(&spec).map_err(bad)?;
    Ok(hostset::plan_for(root, host, &change).map_err(bad)?)
}

/// Shows the plan and asks; an unanswerable question (stdin closed) is a usage error.
fn confirm(plan: &Plan) -> anyhow::Result<bool> {
    output::print(&text::plan_text(plan))?;
    eprint!("\nApply these {} changes? [y/N] ", plan.changes.len());
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer)? == 0 {
        return Err(UsageError(
            "tune apply: no answer on stdin; pass --yes to apply without asking".into(),
        )
        .into());
    }
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}
