//! `qpslab merge`: histograms from several runs or machines in, one exact summary out.

use anyhow::Context;
use qpslab_load::hlog;

use crate::args::MergeArgs;
use crate::{output, Outcome, UsageError};

pub fn run(a: MergeArgs) -> anyhow::Result<Outcome> {
    let (files, total) = hlog::merge(&a.files).map_err(|e| UsageError(format!("merge: {e}")))?;
    let merged = hlog::MergeReport::new(&files, &total);
    if let Some(path) = &a.hdr_out {
        std::fs::write(path, merged.latency_hdr.clone() + "\n")
            .with_context(|| format!("--hdr-out: cannot write {}", path.display()))?;
    }
    output::emit(a.json, &merged, || merged.render_text())?;
    Ok(Outcome::Passed)
}
