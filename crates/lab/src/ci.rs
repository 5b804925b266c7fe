//! What a CI job reads of a run: JUnit XML (a test suite per run, a test case per check) and
//! a Markdown summary (what GitHub Actions shows from `$GITHUB_STEP_SUMMARY`).

use std::fmt::Write as _;

use qpslab_load::report::fmt_us;
use qpslab_load::Report;

/// One run's checks, as a test suite: the run itself (it completed, within its error rate,
/// every connection answered) and each `--threshold`.
#[derive(Debug, Clone, PartialEq)]
pub struct Suite {
    pub name: String,
    pub seconds: f64,
    pub timestamp: String,
    pub cases: Vec<Case>,
    /// The run's text summary, as the suite's output.
    pub output: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    pub name: String,
    /// Why it failed: a short message and the whole line.
    pub failure: Option<(String, String)>,
}

impl Suite {
    /// `name`'s run as a suite.
    pub fn of(name: &str, r: &Report, output: String) -> Suite {
        let own = r.check.run_failure.as_ref().map(|m| (m.clone(), format!("FAILED: {m}")));
        let mut cases = vec![Case { name: "run".into(), failure: own }];
        cases.extend(r.thresholds.iter().map(|t| Case {
            name: format!("threshold {}", t.threshold),
            failure: (!t.passed).then(|| (t.shown.clone(), t.line())),
        }));
        Suite {
            name: name.into(),
            seconds: r.duration_s,
            timestamp: r.started_at.clone(),
            cases,
            output,
        }
    }

    fn failures(&self) -> usize {
        self.cases.iter().filter(|c| c.failure.is_some()).count()
    }
}

/// The suites of a `command` (`load`, `bench`, `sweep`) as one JUnit XML document (the
/// schema Jenkins, GitLab and GitHub's test reporters read: testsuites > testsuite > testcase
/// > failure; the class name `qpslab.COMMAND`).
pub fn junit(command: &str, suites: &[Suite]) -> String {
    let tests: usize = suites.iter().map(|s| s.cases.len()).sum();
    let failures: usize = suites.iter().map(Suite::failures).sum();
    let seconds: f64 = suites.iter().map(|s| s.seconds).sum();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        x,
        "<testsuites name=\"qpslab\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" \
         time=\"{seconds:.3}\">"
    );
    for s in suites {
        let _ = writeln!(
            x,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\" \
             time=\"{:.3}\" timestamp=\"{}\">",
            escape(&s.name),
            s.cases.len(),
            s.failures(),
            s.seconds,
            escape(&s.timestamp)
        );
        for c in &s.cases {
            let head = format!(
                "    <testcase name=\"{}\" classname=\"qpslab.{}\" time=\"0\"",
                escape(&c.name),
                escape(command)
            );
            match &c.failure {
                None => x += &format!("{head}/>\n"),
                Some((message, text)) => {
                    let _ = writeln!(
                        x,
                        "{head}>\n      <failure message=\"{}\" type=\"{}\">{}</failure>\n    \
                         </testcase>",
                        escape(message),
                        if c.name == "run" { "run" } else { "threshold" },
                        escape(text)
                    );
                }
            }
        }
        let _ = writeln!(x, "    <system-out>{}</system-out>", escape(&s.output));
        x += "  </testsuite>\n";
    }
    x += "</testsuites>\n";
    x
}

/// XML text and attribute values: markup characters as entities, and the control characters
/// XML 1.0 cannot hold dropped.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out += "&amp;",
            '<' => out += "&lt;",
            '>' => out += "&gt;",
            '"' => out += "&quot;",
            '\'' => out += "&apos;",
            '\n' | '\t' | '\r' => out.push(c),
            c if (c as u32) < 0x20 => {}
            c => out.push(c),
        }
    }
    out
}

/// The Markdown summary of runs by name: a table of their figures, then each check that
/// failed.
pub fn markdown(title: &str, runs: &[(String, &Report)]) -> String {
    let mut m = format!("### {title}\n\n");
    m += "| run | requests/s | p50 | p99 | p99.9 | errors | checks |\n";
    m += "|---|---:|---:|---:|---:|---:|---|\n";
    for (name, r) in runs {
        let l = &r.latency_us;
        let passed = r.thresholds.iter().filter(|t| t.passed).count();
        let checks = match (&r.check.run_failure, r.thresholds.len()) {
            (Some(_), _) => "❌ run failed".to_string(),
            (None, 0) => "✅".to_string(),
            (None, n) if passed == n => format!("✅ {n} of {n} thresholds"),
            (None, n) => format!("❌ {passed} of {n} thresholds"),
        };
        let _ = writeln!(
            m,
            "| {} | {:.0} | {} | {} | {} | {:.3}% | {checks} |",
            cell(name),
            r.throughput_rps,
            fmt_us(l.p50 as f64),
            fmt_us(l.p99 as f64),
            fmt_us(l.p999 as f64),
            r.check.error_rate * 100.0,
        );
    }
    let failed: Vec<String> =
        runs.iter()
            .flat_map(|(name, r)| {
                let own = r.check.run_failure.as_ref().map(|m| format!("- {}: {m}", cell(name)));
                let th = r.thresholds.iter().filter(|t| !t.passed).map(move |t| {
                    format!("- {}: `{}` failed, {}", cell(name), t.threshold, t.shown)
                });
                own.into_iter().chain(th)
            })
            .collect();
    if !failed.is_empty() {
        m += "\n**Failed**\n\n";
        for f in failed {
            m += &f;
            m += "\n";
        }
    }
    m
}

/// A table cell's text: its own pipes escaped, on one line.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}
