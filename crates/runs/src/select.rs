//! Naming stored runs on the command line, for `compare` and `report`:
//!
//! - `12`: run 12; `12,15,18`: those runs;
//! - `sweep:3` (or `s3`): every run of sweep 3;
//! - `3/NAME` (or `sweep:3/NAME`): the runs of sweep 3's variant NAME, or its N-th variant when
//!   NAME is a number no variant is called;
//! - `label:NAME`: the runs stored with `--label NAME`;
//! - `last`: the latest sweep, or the latest run when it was no sweep's.

use crate::compare::Group;
use crate::store::{RunFilter, RunRow, Store, StoreError, StoredRun};

/// A set of runs as the user named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    Runs(Vec<i64>),
    Sweep(i64),
    Variant { sweep: i64, variant: String },
    Label(String),
    Last,
}

/// Why runs could not be found.
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    /// The user's to fix (exit 2).
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

const FORMS: &str = "a run id (12), runs (12,15), a sweep (sweep:3), a sweep's variant (3/NAME or \
                     3/2), a label (label:NAME) or last";

impl std::str::FromStr for Selector {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} names no runs: give {FORMS}");
        let id = |t: &str| t.trim().parse::<i64>().ok().filter(|n| *n > 0);
        let s = s.trim();
        if s == "last" {
            return Ok(Selector::Last);
        }
        if let Some(l) = s.strip_prefix("label:") {
            return if l.is_empty() { Err(bad()) } else { Ok(Selector::Label(l.into())) };
        }
        let rest =
            s.strip_prefix("sweep:").or_else(|| s.strip_prefix('s').filter(|r| id(r).is_some()));
        if let Some((sweep, variant)) = rest.unwrap_or(s).split_once('/') {
            let sweep = id(sweep).ok_or_else(bad)?;
            if variant.is_empty() {
                return Err(bad());
            }
            return Ok(Selector::Variant { sweep, variant: variant.into() });
        }
        if let Some(r) = rest {
            return id(r).map(Selector::Sweep).ok_or_else(bad);
        }
        let ids: Option<Vec<i64>> = s.split(',').map(id).collect();
        ids.filter(|v| !v.is_empty()).map(Selector::Runs).ok_or_else(bad)
    }
}

/// The runs `sel` names, grouped: a sweep's runs by variant (in the order they first ran), other
/// runs each by its sweep and variant, or alone. An empty result is an error that says why.
pub fn groups(store: &Store, sel: &Selector) -> Result<Vec<Group>, SelectError> {
    let usage = |m: String| SelectError::Usage(m);
    let rows = match sel {
        Selector::Runs(ids) => {
            let rows = store.runs(&RunFilter { ids: ids.clone(), ..RunFilter::default() })?;
            if let Some(missing) = ids.iter().find(|i| !rows.iter().any(|r| r.id == **i)) {
                return Err(usage(format!(
                    "run {missing}: no such run in {} (see `qpslab runs`)",
                    store.path().display()
                )));
            }
            rows
        }
        Selector::Sweep(id) => sweep_runs(store, *id)?,
        Selector::Variant { sweep, variant } => {
            let rows = sweep_runs(store, *sweep)?;
            let names = variant_order(&rows);
            let name = if names.iter().any(|n| n == variant) {
                variant.clone()
            } else {
                variant
                    .parse::<usize>()
                    .ok()
                    .and_then(|k| names.get(k.checked_sub(1)?).cloned())
                    .ok_or_else(|| {
                        usage(format!(
                            "sweep {sweep} has no variant {variant:?}; its variants are {}",
                            names.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
                        ))
                    })?
            };
            rows.into_iter().filter(|r| r.variant.as_deref() == Some(&name)).collect()
        }
        Selector::Label(l) => {
            let rows = store.runs(&RunFilter { label: Some(l.clone()), ..RunFilter::default() })?;
            if rows.is_empty() {
                return Err(usage(format!("label:{l}: no run has this label (see `qpslab runs`)")));
            }
            rows
        }
        Selector::Last => {
            let all = store.runs(&RunFilter::default())?;
            let Some(last) = all.last() else {
                return Err(usage(format!(
                    "no runs stored in {} yet: run `qpslab bench` or `qpslab sweep` first",
                    store.path().display()
                )));
            };
            match last.sweep {
                Some(s) => sweep_runs(store, s)?,
                None => vec![last.clone()],
            }
        }
    };
    let mut out: Vec<Group> = Vec::new();
    let whole: Vec<StoredRun> = rows
        .iter()
        .map(|r| store.run(r.id)?.ok_or_else(|| usage(format!("run {}: removed meanwhile", r.id))))
        .collect::<Result<_, _>>()?;
    let one_sweep = rows.iter().all(|r| r.sweep.is_some() && r.sweep == rows[0].sweep);
    for run in whole {
        // A label names one set of runs: its runs are the repeats of one variant.
        let name = match (sel, &run.row.variant, run.row.sweep) {
            (Selector::Label(l), _, _) => format!("label:{l}"),
            (_, variant, sweep) => group_name(&run, variant.as_deref(), sweep, one_sweep),
        };
        match out.iter_mut().find(|g| g.name == name) {
            Some(g) => g.runs.push(run),
            None => out.push(Group { name, runs: vec![run] }),
        }
    }
    Ok(out)
}

/// A run's group: its variant (with its sweep when the runs span several), or for a run of no
/// sweep its number, kind, target and label.
fn group_name(
    run: &StoredRun,
    variant: Option<&str>,
    sweep: Option<i64>,
    one_sweep: bool,
) -> String {
    match (variant, sweep) {
        (Some(v), Some(_)) if one_sweep => v.to_string(),
        (Some(v), Some(s)) => format!("{s}/{v}"),
        // A run of no sweep: its number, what it ran against, and its label.
        _ => format!(
            "run {} \u{b7} {} {}{}",
            run.row.id,
            run.row.kind,
            run.facts.target,
            run.row.label.as_ref().map_or(String::new(), |l| format!(" ({l})"))
        ),
    }
}

fn sweep_runs(store: &Store, id: i64) -> Result<Vec<RunRow>, SelectError> {
    let rows = store.runs(&RunFilter { sweep: Some(id), ..RunFilter::default() })?;
    if rows.is_empty() {
        let known = store.sweeps()?.iter().any(|s| s.id == id);
        let why = if known { "has no stored runs" } else { "is not in the store" };
        return Err(SelectError::Usage(format!("sweep {id} {why} (see `qpslab runs sweeps`)")));
    }
    Ok(rows)
}

/// Variant names in the order they first ran.
fn variant_order(rows: &[RunRow]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in rows {
        if let Some(v) = &r.variant {
            if !names.contains(v) {
                names.push(v.clone());
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_parses_and_nonsense_says_what_would() {
        let p = |s: &str| s.parse::<Selector>();
        assert_eq!(p("12"), Ok(Selector::Runs(vec![12])));
        assert_eq!(p("12,15"), Ok(Selector::Runs(vec![12, 15])));
        assert_eq!(p("sweep:3"), Ok(Selector::Sweep(3)));
        assert_eq!(p("s3"), Ok(Selector::Sweep(3)));
        let v = |sweep, variant: &str| Ok(Selector::Variant { sweep, variant: variant.into() });
        assert_eq!(p("3/target=nginx connections=10"), v(3, "target=nginx connections=10"));
        assert_eq!(p("sweep:3/2"), v(3, "2"));
        assert_eq!(p("label:before"), Ok(Selector::Label("before".into())));
        assert_eq!(p("last"), Ok(Selector::Last));
        for bad in ["", "x", "0", "-1", "12,", "sweep:", "3/", "label:", "sweep:x"] {
            let e = p(bad).unwrap_err();
            assert!(e.contains("names no runs: give a run id"), "{bad}: {e}");
        }
    }
}
