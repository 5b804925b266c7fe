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
