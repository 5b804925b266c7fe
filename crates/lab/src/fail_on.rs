//! `--fail-on`: what the doctor may find that fails a run's checks (exit 1), for CI: a finding
//! at a severity or worse, a mark the findings give the run, or a finding by name.

use std::fmt;
use std::str::FromStr;

use qpslab_doctor::{run_mark, Finding, Severity, RULES};

use crate::BenchReport;

/// One thing that fails a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOn {
    /// A finding at this severity or worse.
    AtLeast(Severity),
    /// A finding that marks the run `disturbed` or `behind-schedule`.
    Mark(&'static str),
    /// A finding of this name, at any severity.
    Finding(&'static str),
}

const MARKS: [&str; 2] = ["disturbed", "behind-schedule"];

impl FromStr for FailOn {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let severity = [Severity::Info, Severity::Warning, Severity::Critical]
            .into_iter()
            .find(|v| v.name() == s);
        if let Some(v) = severity {
            return Ok(FailOn::AtLeast(v));
        }
        if let Some(m) = MARKS.iter().find(|m| **m == s) {
            return Ok(FailOn::Mark(m));
        }
        match RULES.iter().find(|r| r.name == s) {
            Some(r) => Ok(FailOn::Finding(r.name)),
            None => Err(format!(
                "{s:?} is not a severity (info, warning, critical), a mark (disturbed, \
                 behind-schedule) or a finding's name (qpslab doctor --rules lists them)"
            )),
        }
    }
}

impl fmt::Display for FailOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailOn::AtLeast(v) => f.write_str(v.name()),
            FailOn::Mark(m) | FailOn::Finding(m) => f.write_str(m),
        }
    }
}

impl FailOn {
    fn catches(&self, f: &Finding) -> bool {
        match self {
            FailOn::AtLeast(v) => f.severity >= *v,
            FailOn::Mark(m) => run_mark(f.name, f.severity.name()) == Some(*m),
            FailOn::Finding(name) => f.name == *name,
        }
    }
}

/// Fails the run's checks on the first finding (the worst: the doctor sorts them) that any of
/// `on` catches, naming it and the flag's value as the reason.
pub fn apply(r: &mut BenchReport, on: &[FailOn]) {
    let Some((f, what)) =
        r.doctor.findings.iter().find_map(|f| on.iter().find(|w| w.catches(f)).map(|w| (f, w)))
    else {
        return;
    };
    let why = format!("the doctor found {} (--fail-on {what}): {}", f.name, f.summary);
    let c = &mut r.load.check;
    c.passed = false;
    c.reason.get_or_insert_with(|| why.clone());
    c.run_failure.get_or_insert(why);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn severities_marks_and_finding_names_are_read_and_the_rest_refused() {
        assert_eq!("warning".parse(), Ok(FailOn::AtLeast(Severity::Warning)));
        assert_eq!("disturbed".parse(), Ok(FailOn::Mark("disturbed")));
        assert_eq!(" cpu-contention".parse(), Ok(FailOn::Finding("cpu-contention")));
        let e = "warnings".parse::<FailOn>().unwrap_err();
        assert!(e.starts_with("\"warnings\" is not a severity"), "{e}");
    }

    fn finding(name: &'static str, severity: Severity) -> Finding {
        Finding {
            name,
            severity,
            summary: format!("{name} here"),
            evidence: Vec::new(),
            remedy: String::new(),
            cause: None,
        }
    }

    #[test]
    fn what_is_caught_and_what_is_not() {
        let contention = finding("cpu-contention", Severity::Warning);
        let info = finding("cpu-contention", Severity::Info);
        assert!(FailOn::AtLeast(Severity::Warning).catches(&contention));
        assert!(!FailOn::AtLeast(Severity::Critical).catches(&contention));
        assert!(FailOn::Mark("disturbed").catches(&contention));
        // Contention said as info did not explain the rate: not disturbed.
        assert!(!FailOn::Mark("disturbed").catches(&info));
        assert!(FailOn::Finding("cpu-contention").catches(&info));
        assert!(!FailOn::Finding("run-too-short").catches(&info));
    }
}
