//! `--junit FILE`, `--summary-md FILE` and `$GITHUB_STEP_SUMMARY`: each opened before the run,
//! so that one that cannot be written costs no run, and written after it.

use std::fs::File;
use std::io::Write as _;
use std::path::PathBuf;

use qpslab_lab::ci::{self, Suite};
use qpslab_load::Report;

use crate::args::CiArgs;
use crate::UsageError;

/// The files a run's checks go to.
pub struct CiOut {
    junit: Option<(PathBuf, File)>,
    /// `--summary-md`'s file, and `$GITHUB_STEP_SUMMARY`'s (appended to), by what names them.
    markdown: Vec<(String, File)>,
}

impl CiOut {
    pub fn open(a: &CiArgs) -> anyhow::Result<CiOut> {
        let cannot = |what: String, e: std::io::Error| {
            UsageError(format!("{what}: cannot write it ({e}); name a writable file"))
        };
        let junit = match &a.junit {
            Some(p) => Some((
                p.clone(),
                File::create(p).map_err(|e| cannot(format!("--junit {}", p.display()), e))?,
            )),
            None => None,
        };
        let mut markdown = Vec::new();
        if let Some(p) = &a.summary_md {
            let what = format!("--summary-md {}", p.display());
            markdown.push((what.clone(), File::create(p).map_err(|e| cannot(what, e))?));
        }
        if let Some(p) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) {
            let what = format!("$GITHUB_STEP_SUMMARY {}", p.to_string_lossy());
            let f = File::options().append(true).create(true).open(&p).map_err(|e| {
                UsageError(format!("{what}: cannot append to it ({e}); unset it to go without"))
            })?;
            markdown.push((what, f));
        }
        Ok(CiOut { junit, markdown })
    }

    /// Writes the runs of `command` (by name, with their text summaries) to every file
    /// opened, the Markdown under `qpslab COMMAND WHAT`.
    pub fn write(
        self,
        (command, what): (&str, &str),
        runs: &[(String, &Report, String)],
    ) -> anyhow::Result<()> {
        if let Some((path, mut f)) = self.junit {
            let suites: Vec<Suite> =
                runs.iter().map(|(name, r, text)| Suite::of(name, r, text.clone())).collect();
            f.write_all(ci::junit(command, &suites).as_bytes())
                .map_err(|e| anyhow::anyhow!("--junit {}: writing failed: {e}", path.display()))?;
        }
        if !self.markdown.is_empty() {
            let named: Vec<(String, &Report)> =
                runs.iter().map(|(name, r, _)| (name.clone(), *r)).collect();
            let text = ci::markdown(&format!("qpslab {command} {what}"), &named);
            for (what, mut f) in self.markdown {
                f.write_all(text.as_bytes())
                    .map_err(|e| anyhow::anyhow!("{what}: writing failed: {e}"))?;
            }
        }
        Ok(())
    }
}
