//! Everything the commands print on stdout goes through here: a report as JSON or text, written
//! whole. A closed stdout (`qpslab host --json | head -c 10`) comes back as a `BrokenPipe` I/O
//! error, which `main` turns into a quiet exit 0, as Unix tools do.

use std::io::Write;

use serde::Serialize;

/// Prints `report` as one pretty JSON object, or the text `text` renders.
pub fn emit<T: Serialize + ?Sized>(
    json: bool,
    report: &T,
    text: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    let body = if json { serde_json::to_string_pretty(report)? + "\n" } else { text() };
    print(&body)
}

/// Writes `text` to stdout and flushes it.
pub fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// `--profile-out FILE`: writes the diagnosis's folded stacks there and drops them from the
/// report (they are for flame graph tools, not for the JSON).
pub fn folded_out(
    d: &mut qpslab_doctor::Diagnosis,
    path: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let Some(path) = path else { return Ok(()) };
    let Some(p) = d.profile.as_mut() else { return Ok(()) };
    if !p.available {
        eprintln!("qpslab: note: no profile, so --profile-out {} was not written", path.display());
        return Ok(());
    }
    std::fs::write(path, p.folded_text())
        .map_err(|e| anyhow::anyhow!("--profile-out: cannot write {}: {e}", path.display()))?;
    p.folded.clear();
    Ok(())
}
