//! The user's own nginx as a climb changes it (`--apply-server`): its main configuration file
//! edited one directive at a time, checked by `nginx -t`, put in force by a reload (SIGHUP to
//! its master, what `nginx -s reload` sends), and the original restored byte for byte at the
//! end. Before the first write the original is copied beside the file
//! (`FILE.qpslab-original`), so a climb killed mid-step leaves what restores it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use qpslab_host::nginx::{self, Master};
use qpslab_host::Root;

/// How long a reload may take to have new workers serving.
const RELOAD_PATIENCE: Duration = Duration::from_secs(10);

/// A running nginx whose main configuration file the climb may edit.
#[derive(Debug)]
pub struct Nginx {
    master: Master,
    /// Its main configuration file.
    pub file: PathBuf,
    /// The file's bytes as found.
    pub original: String,
    /// The text in force now.
    in_force: String,
}

impl Nginx {
    /// The nginx among `pids` (a master or a worker), and its main configuration file. None
    /// when none of them is nginx; an error when it is and its file cannot be read.
    pub fn find(pids: &[u32]) -> Result<Option<Nginx>, String> {
        let root = Root::live();
        let Some(master) = pids.iter().find_map(|&p| nginx::master(&root, p)) else {
            return Ok(None);
        };
        let dump = master
            .dump()
            .ok_or_else(|| format!("nginx (pid {}) refused `nginx -T`", master.pid))?;
        let file = PathBuf::from(
            nginx::main_file(&dump)
                .ok_or_else(|| "nginx -T did not name its configuration file".to_string())?,
        );
        let original = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read nginx's configuration {}: {e}", file.display()))?;
        Ok(Some(Nginx { master, file, in_force: original.clone(), original }))
    }

    /// Where the original is kept while the climb runs.
    pub fn backup(&self) -> PathBuf {
        let mut p = self.file.clone().into_os_string();
        p.push(".qpslab-original");
        PathBuf::from(p)
    }

    /// Puts `text` in force: the original kept aside first (once), the file written, checked
    /// with `nginx -t` (the previous text back when it fails), and nginx reloaded. Nothing is
    /// done when `text` is already in force.
    pub fn put(&mut self, text: &str) -> Result<(), String> {
        if text == self.in_force {
            return Ok(());
        }
        let backup = self.backup();
        if !backup.exists() {
            std::fs::write(&backup, &self.original)
                .map_err(|e| format!("cannot keep the original at {}: {e}", backup.display()))?;
        }
        write(&self.file, text)?;
        let check = self.master.command().arg("-t").arg("-q").output();
        let refused = match check {
            Ok(o) if o.status.success() => None,
            Ok(o) => Some(String::from_utf8_lossy(&o.stderr).trim().to_string()),
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = refused {
            write(&self.file, &self.in_force)?;
            return Err(format!("nginx -t refused the change: {why}"));
        }
        self.reload()?;
        self.in_force = text.to_string();
        Ok(())
    }

    /// The original back, byte for byte, reloaded; the copy aside removed.
    pub fn restore(&mut self) -> Result<(), String> {
        let original = self.original.clone();
        if self.in_force != original {
            write(&self.file, &original)?;
            self.reload()?;
            self.in_force = original;
        }
        let _ = std::fs::remove_file(self.backup());
        Ok(())
    }

    /// SIGHUP to the master, then waits until every worker is one it started after it: the old
    /// ones finish their requests and leave.
    fn reload(&self) -> Result<(), String> {
        let before = workers(self.master.pid);
        qpslab_sys::process::hang_up(self.master.pid)
            .map_err(|e| format!("cannot reload nginx (pid {}): {e}", self.master.pid))?;
        let t = Instant::now();
        while t.elapsed() < RELOAD_PATIENCE {
            let now = workers(self.master.pid);
            if !now.is_empty() && now.iter().all(|w| !before.contains(w)) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "nginx (pid {}) did not replace its workers within {RELOAD_PATIENCE:?} of a reload",
            self.master.pid
        ))
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.restore();
    }
}

fn write(file: &Path, text: &str) -> Result<(), String> {
    std::fs::write(file, text).map_err(|e| format!("cannot write {}: {e}", file.display()))
}

/// The children of `master` (its workers).
fn workers(master: u32) -> Vec<u32> {
    Root::live()
        .read_opt(&format!("proc/{master}/task/{master}/children"))
        .map(|t| t.split_whitespace().filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

/// `text` with every `name ...;` directive set to `name value;`, or, when it has none, with
/// `name value;` as the first directive of its `http` block. None when it has neither.
pub fn set_directive(text: &str, name: &str, value: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len() + 32);
    let mut found = false;
    let mut rest = text;
    while let Some(at) = find_directive(rest, name) {
        let end = rest[at..].find(';')? + at;
        out.push_str(&rest[..at]);
        out.push_str(&format!("{name} {value}"));
        rest = &rest[end..];
        found = true;
    }
    out.push_str(rest);
    if found {
        return Some(out);
    }
    let http = find_directive(text, "http")?;
    let brace = text[http..].find('{')? + http + 1;
    Some(format!("{}\n    {name} {value};{}", &text[..brace], &text[brace..]))
}

/// Where directive `name` starts in `text`: at a statement's start (after `;`, `{`, `}` or
/// the start, blanks between), outside comments, followed by a blank or `{`.
fn find_directive(text: &str, name: &str) -> Option<usize> {
    let mut statement_start = true;
    let mut comment = false;
    for (i, c) in text.char_indices() {
        if comment {
            comment = c != '\n';
            continue;
        }
        match c {
            '#' => comment = true,
            ';' | '{' | '}' => statement_start = true,
            c if c.is_whitespace() => {}
            _ if statement_start => {
                let after = text[i..].strip_prefix(name);
                if after.is_some_and(|a| a.starts_with(|c: char| c.is_whitespace() || c == '{')) {
                    return Some(i);
                }
                statement_start = false;
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    const CONF: &str = "worker_processes 1;\n# access_log in a comment;\nevents { worker_connections 64; }\nhttp {\n  access_log /var/log/a.log main;\n  keepalive_requests 100;\n  server { listen 80; access_log /var/log/b.log; location / { return 200; } }\n}\n";

    #[test]
    fn every_directive_of_the_name_is_set_and_nothing_else_moves() {
        let off = set_directive(CONF, "access_log", "off").unwrap();
        assert_eq!(
            off,
            CONF.replace("access_log /var/log/a.log main", "access_log off")
                .replace("access_log /var/log/b.log", "access_log off")
        );
        assert!(off.contains("# access_log in a comment;"), "comments stay");
        let k = set_directive(CONF, "keepalive_requests", "100000").unwrap();
        assert!(k.contains("keepalive_requests 100000;") && !k.contains("keepalive_requests 100;"));
    }

    #[test]
    fn a_directive_not_there_goes_first_in_http() {
        let text = "events {}\nhttp {\n  server { listen 80; }\n}\n";
        let k = set_directive(text, "keepalive_requests", "100000").unwrap();
        assert_eq!(
            k,
            "events {}\nhttp {\n    keepalive_requests 100000;\n  server { listen 80; }\n}\n"
        );
        // Neither the directive nor an http block: nothing to edit.
        assert_eq!(set_directive("events {}\n", "access_log", "off"), None);
        // A longer name is another directive.
        assert!(find_directive("access_log_x 1;", "access_log").is_none());
    }
}
