//! The user's own server as a climb changes it (`--apply-server`): its configuration file
//! written state by state, put in force, and the original restored byte for byte at the end.
//! Before the first write the original is copied beside the file (`FILE.qpslab-original`), so
//! a climb killed mid-step leaves what restores it.
//!
//! Two kinds: the user's nginx, whose main configuration file is edited one directive at a
//! time, checked by `nginx -t` and reloaded by SIGHUP to its master (what `nginx -s reload`
//! sends); and any server (`--server-config TEMPLATE:FILE --server-reload CMD`), whose file is
//! the template with `{{workers}}` and `{{threads}}` filled in (gunicorn's, puma's, uvicorn's
//! pool: processes and threads in each) and `{{nofile}}` (its descriptor limit: a start
//! script's `ulimit -n`, a unit's `LimitNOFILE=`, a server's own setting), put in force by the
//! user's command.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use qpslab_host::nginx::{self, Master};
use qpslab_host::Root;

/// How long a reload may take to have new workers serving.
const RELOAD_PATIENCE: Duration = Duration::from_secs(10);

/// The variables a template names for the climb to set: the server's worker processes, the
/// threads in each, and its descriptor limit (soft RLIMIT_NOFILE).
pub const WORKERS: &str = "{{workers}}";
pub const THREADS: &str = "{{threads}}";
pub const NOFILE: &str = "{{nofile}}";

/// The values a template is filled in with; each None where the template does not name it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Vars {
    pub workers: Option<usize>,
    pub threads: Option<usize>,
    pub nofile: Option<u64>,
}

impl Vars {
    /// Whether the template names none of them (then it is not a template).
    pub fn is_empty(&self) -> bool {
        *self == Vars::default()
    }
}

/// How a written configuration is put in force.
#[derive(Debug)]
enum Reload {
    /// `nginx -t`, then SIGHUP to the master and a wait for new workers.
    Nginx(Master),
    /// The user's command through `sh -c`; it must exit 0.
    Command(String),
}

/// A server whose configuration file the climb may write.
#[derive(Debug)]
pub struct UserServer {
    how: Reload,
    /// Its configuration file.
    pub file: PathBuf,
    /// The file's bytes as found.
    pub original: String,
    /// The text in force now.
    in_force: String,
    /// `--server-config`'s template.
    template: Option<String>,
}

impl UserServer {
    /// The nginx among `pids` (a master or a worker), and its main configuration file. None
    /// when none of them is nginx; an error when it is and its file cannot be read.
    pub fn nginx(pids: &[u32]) -> Result<Option<UserServer>, String> {
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
        let how = Reload::Nginx(master);
        let server = UserServer { how, file, in_force: original.clone(), original, template: None };
        server.no_leftover()?;
        Ok(Some(server))
    }

    /// Refuses a file with an original still kept beside it: a climb or sweep killed midway
    /// left it there, and the file holds one of its states, not the user's configuration.
    fn no_leftover(&self) -> Result<(), String> {
        let backup = self.backup();
        if backup.exists() {
            return Err(format!(
                "{} exists: a climb or sweep that was killed left the original there; copy it back over {} (and reload the server) first",
                backup.display(),
                self.file.display()
            ));
        }
        Ok(())
    }

    /// Any server: `template` (with `{{workers}}` where its worker count goes, `{{threads}}`
    /// where its threads per worker go, `{{nofile}}` where its descriptor limit goes, any of
    /// them) written to `file` and put in force by `reload`.
    pub fn template(template: &Path, file: &Path, reload: &str) -> Result<UserServer, String> {
        let text = std::fs::read_to_string(template).map_err(|e| {
            format!("--server-config {}: cannot read the template: {e}", template.display())
        })?;
        if ![WORKERS, THREADS, NOFILE].iter().any(|v| text.contains(v)) {
            return Err(format!(
                "--server-config {}: the template has no {WORKERS}, {THREADS} or {NOFILE}, so there is nothing for the climb to change; put them where the server's worker count, threads per worker and descriptor limit go",
                template.display()
            ));
        }
        let original = std::fs::read_to_string(file).map_err(|e| {
            format!("--server-config {}: cannot read the server's file: {e}", file.display())
        })?;
        let server = UserServer {
            how: Reload::Command(reload.to_string()),
            file: file.to_path_buf(),
            in_force: original.clone(),
            original,
            template: Some(text),
        };
        server.render(&server.named(Vars {
            workers: Some(1),
            threads: Some(1),
            nofile: Some(1),
        }))?;
        server.no_leftover()?;
        Ok(server)
    }

    pub fn is_nginx(&self) -> bool {
        matches!(self.how, Reload::Nginx(_))
    }

    /// The template filled in with `v` (None: no template); an error names a variable the
    /// template has and `v` has no value for, or a `{{...}}` the climb does not set.
    pub fn render(&self, v: &Vars) -> Result<Option<String>, String> {
        let Some(t) = &self.template else { return Ok(None) };
        let mut text = t.clone();
        let values = [
            (WORKERS, v.workers.map(|n| n as u64)),
            (THREADS, v.threads.map(|n| n as u64)),
            (NOFILE, v.nofile),
        ];
        for (name, value) in values {
            if !text.contains(name) {
                continue;
            }
            let value = value.ok_or_else(|| {
                format!("--server-config: the template names {name} and no value is given for it (the climb's --server-nofile N, the server's limit now)")
            })?;
            text = text.replace(name, &value.to_string());
        }
        if let Some(at) = text.find("{{") {
            let name: String = text[at..].chars().take_while(|c| *c != '\n').take(40).collect();
            return Err(format!(
                "--server-config: the template names {name}, which the climb does not set; it sets {WORKERS}, {THREADS} and {NOFILE} only"
            ));
        }
        Ok(Some(text))
    }

    /// `v` with only the variables the template names (all None: no template).
    pub fn named(&self, v: Vars) -> Vars {
        let Some(t) = self.template.as_deref() else { return Vars::default() };
        Vars {
            workers: v.workers.filter(|_| t.contains(WORKERS)),
            threads: v.threads.filter(|_| t.contains(THREADS)),
            nofile: v.nofile.filter(|_| t.contains(NOFILE)),
        }
    }

    /// Where the original is kept while the climb runs.
    pub fn backup(&self) -> PathBuf {
        let mut p = self.file.clone().into_os_string();
        p.push(".qpslab-original");
        PathBuf::from(p)
    }

    /// Puts `text` in force: the original kept aside first (once), the file written, checked
    /// (nginx: `nginx -t`; the previous text back when it fails), and the server reloaded.
    /// Nothing is done when `text` is already in force.
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
        if let Reload::Nginx(master) = &self.how {
            let check = master.command().arg("-t").arg("-q").output();
            let refused = match check {
                Ok(o) if o.status.success() => None,
                Ok(o) => Some(String::from_utf8_lossy(&o.stderr).trim().to_string()),
                Err(e) => Some(e.to_string()),
            };
            if let Some(why) = refused {
                write(&self.file, &self.in_force)?;
                return Err(format!("nginx -t refused the change: {why}"));
            }
        }
        if let Err(e) = self.reload() {
            write(&self.file, &self.in_force)?;
            let _ = self.reload();
            return Err(e);
        }
        self.in_force = text.to_string();
        Ok(())
    }

    /// Whether the server would take `text` (nginx: `nginx -t` on a copy beside the file, so
    /// its relative includes resolve the same; any other server: yes). Err: its refusal.
    pub fn check(&self, text: &str) -> Result<(), String> {
        let Reload::Nginx(master) = &self.how else { return Ok(()) };
        let mut candidate = self.file.clone().into_os_string();
        candidate.push(".qpslab-candidate");
        let candidate = PathBuf::from(candidate);
        write(&candidate, text)?;
        let mut flags = master.flags.clone();
        match flags.iter().position(|f| f == "-c") {
            Some(i) if i + 1 < flags.len() => flags[i + 1] = candidate.display().to_string(),
            _ => flags.extend(["-c".to_string(), candidate.display().to_string()]),
        }
        let out = std::process::Command::new(&master.exe).args(&flags).args(["-t", "-q"]).output();
        let _ = std::fs::remove_file(&candidate);
        match out {
            Ok(o) if o.status.success() => Ok(()),
            Ok(o) => {
                // `nginx: [emerg] unknown directive "x" in FILE:1`, then "test failed".
                let err = String::from_utf8_lossy(&o.stderr);
                let why = err.lines().find(|l| l.contains("[emerg]")).or(err.lines().next());
                Err(format!("nginx -t refused it: {}", why.unwrap_or("").trim()))
            }
            Err(e) => Err(format!("cannot run nginx -t: {e}")),
        }
    }

    /// The original back, byte for byte, reloaded; the copy aside removed.
    pub fn restore(&mut self) -> Result<(), String> {
        let original = self.original.clone();
        if self.in_force != original {
            write(&self.file, &original)?;
            // In force once the new workers run; the old ones are given the reload's
            // patience to leave, not more: they may hold a slow application's queue for
            // longer, and nothing is measured after a restore.
            self.reload_with(Drain::NotAwaited)?;
            self.in_force = original;
        }
        let _ = std::fs::remove_file(self.backup());
        Ok(())
    }

    /// What reloads it, for messages.
    pub fn reload_hint(&self) -> String {
        match &self.how {
            Reload::Nginx(_) => "reload nginx".into(),
            Reload::Command(c) => format!("run `{c}`"),
        }
    }

    /// nginx re-listens: a reload calls listen() again on its sockets, so a listen queue
    /// setting changed since (`net.core.somaxconn`) takes effect. Other servers: nothing.
    pub fn relisten(&self) -> Result<(), String> {
        match &self.how {
            Reload::Nginx(master) => reload_nginx(master.pid),
            Reload::Command(_) => Ok(()),
        }
    }

    /// [`UserServer::relisten`] at the climb's end: nothing is measured after it, so the old
    /// workers are not waited for.
    pub fn relisten_at_end(&self) -> Result<(), String> {
        match &self.how {
            Reload::Nginx(master) => reload_nginx_with(master.pid, Drain::NotAwaited),
            Reload::Command(_) => Ok(()),
        }
    }

    fn reload(&self) -> Result<(), String> {
        self.reload_with(Drain::Awaited)
    }

    fn reload_with(&self, drain: Drain) -> Result<(), String> {
        match &self.how {
            Reload::Nginx(master) => reload_nginx_with(master.pid, drain),
            Reload::Command(cmd) => {
                let out = std::process::Command::new("sh")
                    .args(["-c", cmd])
                    .stdin(std::process::Stdio::null())
                    .output()
                    .map_err(|e| format!("--server-reload `{cmd}`: cannot run sh: {e}"))?;
                if out.status.success() {
                    return Ok(());
                }
                let err = String::from_utf8_lossy(&out.stderr);
                Err(format!(
                    "--server-reload `{cmd}` failed ({}): {}",
                    out.status,
                    err.lines().last().unwrap_or("").trim()
                ))
            }
        }
    }
}

/// Whether a reload must see nginx's old workers leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drain {
    /// A measurement follows: the old workers must not share the CPU with it.
    Awaited,
    /// Waited for as long as the reload's patience, then the new workers running is enough.
    NotAwaited,
}

/// SIGHUP to nginx's master, then waits until every worker is one it started after it: the
/// old ones finish their requests and leave.
fn reload_nginx(master: u32) -> Result<(), String> {
    reload_nginx_with(master, Drain::Awaited)
}

fn reload_nginx_with(master: u32, drain: Drain) -> Result<(), String> {
    let before = workers(master);
    qpslab_sys::process::hang_up(master)
        .map_err(|e| format!("cannot reload nginx (pid {master}): {e}"))?;
    let t = Instant::now();
    let mut started = false;
    while t.elapsed() < RELOAD_PATIENCE {
        let now = workers(master);
        started |= now.iter().any(|w| !before.contains(w));
        if started && now.iter().all(|w| !before.contains(w)) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if started && drain == Drain::NotAwaited {
        return Ok(());
    }
    Err(format!(
        "nginx (pid {master}) did not replace its workers within {RELOAD_PATIENCE:?} of a reload"
    ))
}

impl Drop for UserServer {
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

/// An edit of nginx's main configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// Directives set ([`set_directive`]): each one's name, value and the block it goes in
    /// when the file has none.
    Set(Vec<(&'static str, String, &'static str)>),
    /// An option added to every `listen` that lacks it (`reuseport`).
    ListenOption(&'static str),
    /// Every directive of the name removed (`limit_req`).
    Remove(&'static str),
    /// A `NAME=VALUE` parameter set on every `listen` (`backlog=65535`), replacing one there.
    ListenParam(&'static str, String),
}

/// `text` with `e` made. Err: why it cannot be made in this file.
pub fn edit(text: &str, e: &Edit) -> Result<String, String> {
    let only_main = "(the climb edits that file only, not the ones it includes)";
    match e {
        Edit::Remove(name) => remove_directive(text, name)
            .ok_or_else(|| format!("no `{name}` in nginx's main configuration file {only_main}")),
        Edit::ListenOption(option) => listen_option(text, option)
            .ok_or_else(|| format!("no `listen` in nginx's main configuration file {only_main}")),
        Edit::ListenParam(name, value) => listen_param(text, name, value)
            .ok_or_else(|| format!("no `listen` in nginx's main configuration file {only_main}")),
        Edit::Set(directives) => {
            let mut out = text.to_string();
            for (name, value, block) in directives {
                out = set_directive(&out, name, value, block).ok_or_else(|| {
                    format!(
                        "no `{name}` and no {block} block in nginx's main configuration file to set it in"
                    )
                })?;
            }
            Ok(out)
        }
    }
}

/// `text` with every `name ...;` directive set to `name value;`, or, when it has none, with
/// `name value;` as the first directive of its `block` (`http`, `events`), or of the file
/// for the main context (""). None when it has neither.
pub fn set_directive(text: &str, name: &str, value: &str, block: &str) -> Option<String> {
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
    if block.is_empty() {
        return Some(format!("{name} {value};\n{text}"));
    }
    let at = find_directive(text, block)?;
    let brace = text[at..].find('{')? + at + 1;
    Some(format!("{}\n    {name} {value};{}", &text[..brace], &text[brace..]))
}

/// `text` without any `name ...;` directive; None when it has none.
fn remove_directive(text: &str, name: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut found = false;
    while let Some(at) = find_directive(rest, name) {
        let end = rest[at..].find(';')? + at + 1;
        out.push_str(&rest[..at]);
        rest = &rest[end..];
        found = true;
    }
    out.push_str(rest);
    found.then_some(out)
}

/// `text` with `option` added to every `listen` directive that lacks it; None when it has no
/// `listen`.
fn listen_option(text: &str, option: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len() + 32);
    let mut rest = text;
    let mut found = false;
    while let Some(at) = find_directive(rest, "listen") {
        let end = rest[at..].find(';')? + at;
        out.push_str(&rest[..end]);
        if !rest[at..end].split_whitespace().any(|w| w == option) {
            out.push(' ');
            out.push_str(option);
        }
        rest = &rest[end..];
        found = true;
    }
    out.push_str(rest);
    found.then_some(out)
}

/// `text` with `name=value` on every `listen` directive, in place of the one it has; None
/// when it has no `listen`.
fn listen_param(text: &str, name: &str, value: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len() + 32);
    let mut rest = text;
    let mut found = false;
    let prefix = format!("{name}=");
    while let Some(at) = find_directive(rest, "listen") {
        let end = rest[at..].find(';')? + at;
        out.push_str(&rest[..at]);
        let words: Vec<&str> =
            rest[at..end].split_whitespace().filter(|w| !w.starts_with(&prefix)).collect();
        out.push_str(&words.join(" "));
        out.push_str(&format!(" {prefix}{value}"));
        rest = &rest[end..];
        found = true;
    }
    out.push_str(rest);
    found.then_some(out)
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
        let off = set_directive(CONF, "access_log", "off", "http").unwrap();
        assert_eq!(
            off,
            CONF.replace("access_log /var/log/a.log main", "access_log off")
                .replace("access_log /var/log/b.log", "access_log off")
        );
        assert!(off.contains("# access_log in a comment;"), "comments stay");
        let k = set_directive(CONF, "keepalive_requests", "100000", "http").unwrap();
        assert!(k.contains("keepalive_requests 100000;") && !k.contains("keepalive_requests 100;"));
    }

    #[test]
    fn a_directive_not_there_goes_first_in_http() {
        let text = "events {}\nhttp {\n  server { listen 80; }\n}\n";
        let k = set_directive(text, "keepalive_requests", "100000", "http").unwrap();
        assert_eq!(
            k,
            "events {}\nhttp {\n    keepalive_requests 100000;\n  server { listen 80; }\n}\n"
        );
        // Neither the directive nor an http block: nothing to edit.
        assert_eq!(set_directive("events {}\n", "access_log", "off", "http"), None);
        // A longer name is another directive.
        assert!(find_directive("access_log_x 1;", "access_log").is_none());
        // The main context: first in the file; events: first in its block.
        let w = set_directive(text, "worker_processes", "2", "").unwrap();
        assert_eq!(w, format!("worker_processes 2;\n{text}"));
        let m = set_directive(text, "accept_mutex", "off", "events").unwrap();
        assert!(m.starts_with("events {\n    accept_mutex off;}"), "{m}");
    }

    /// The workers with their affinity, accept_mutex, and reuseport on every listen of the
    /// file that lacks it.
    #[test]
    fn nginx_changes_edit_their_directives_and_listens() {
        let w = Edit::Set(vec![
            ("worker_processes", "2".into(), ""),
            ("worker_cpu_affinity", "auto 10".into(), ""),
        ]);
        let e = edit(CONF, &w).unwrap();
        assert!(e.starts_with("worker_cpu_affinity auto 10;\nworker_processes 2;\n"), "{e}");
        assert_eq!(edit(&e, &w).unwrap(), e, "made twice, the same text");
        let text = "http {\n  server { listen 80; listen [::]:80 reuseport; }\n  server { listen 8080 backlog=512; }\n}\n";
        let r = edit(text, &Edit::ListenOption("reuseport")).unwrap();
        assert_eq!(
            r,
            "http {\n  server { listen 80 reuseport; listen [::]:80 reuseport; }\n  server { listen 8080 backlog=512 reuseport; }\n}\n"
        );
        let b = edit(text, &Edit::ListenParam("backlog", "65535".into())).unwrap();
        assert_eq!(
            b,
            "http {\n  server { listen 80 backlog=65535; listen [::]:80 reuseport backlog=65535; }\n  server { listen 8080 backlog=65535; }\n}\n"
        );
        let e = edit("http { include sites/*; }\n", &Edit::ListenOption("reuseport")).unwrap_err();
        assert!(e.contains("no `listen`"), "{e}");
        let m = edit(CONF, &Edit::Set(vec![("accept_mutex", "off".into(), "events")])).unwrap();
        assert!(m.contains("events {\n    accept_mutex off; worker_connections 64; }"), "{m}");
    }

    /// A template fills in {{workers}}, {{threads}} and {{nofile}} and nothing else; one
    /// naming another variable, or none, is refused with the flag named, and so is one
    /// naming {{nofile}} without the server's limit to start from.
    #[test]
    fn a_template_fills_in_its_workers_and_refuses_what_it_cannot() {
        let dir = tempfile::tempdir().unwrap();
        let (t, f) = (dir.path().join("app.tmpl"), dir.path().join("app.conf"));
        std::fs::write(&f, "workers = 3\n").unwrap();
        std::fs::write(&t, "workers = {{workers}}\n").unwrap();
        let s = UserServer::template(&t, &f, "true").unwrap();
        let all = Vars { workers: Some(2), threads: Some(8), nofile: Some(64) };
        assert_eq!(s.render(&all).unwrap().as_deref(), Some("workers = 2\n"));
        assert_eq!(s.original, "workers = 3\n");
        assert!(!s.is_nginx());
        assert_eq!(s.named(all), Vars { workers: Some(2), ..Vars::default() });
        std::fs::write(&t, "workers = {{workers}}\nthreads = {{threads}}\n").unwrap();
        let s = UserServer::template(&t, &f, "true").unwrap();
        assert_eq!(s.render(&all).unwrap().as_deref(), Some("workers = 2\nthreads = 8\n"));
        assert_eq!(s.named(all), Vars { nofile: None, ..all });
        std::fs::write(&t, "ulimit -n {{nofile}}\nexec app -w {{workers}}\n").unwrap();
        let s = UserServer::template(&t, &f, "true").unwrap();
        assert_eq!(s.render(&all).unwrap().as_deref(), Some("ulimit -n 64\nexec app -w 2\n"));
        assert_eq!(s.named(all), Vars { threads: None, ..all });
        let e = s.render(&Vars { nofile: None, ..all }).unwrap_err();
        assert!(e.contains("names {{nofile}}") && e.contains("--server-nofile"), "{e}");
        std::fs::write(&t, "bind = 1\n").unwrap();
        let e = UserServer::template(&t, &f, "true").unwrap_err();
        assert!(
            e.starts_with("--server-config")
                && e.contains("has no {{workers}}, {{threads}} or {{nofile}}"),
            "{e}"
        );
        std::fs::write(&t, "workers = {{workers}}\nport = {{port}}\n").unwrap();
        let e = UserServer::template(&t, &f, "true").unwrap_err();
        assert!(e.contains("names {{port}}"), "{e}");
        let gone = dir.path().join("none.conf");
        assert!(UserServer::template(&t, &gone, "true").unwrap_err().contains("none.conf"));
        // An original left beside the file by a killed climb: the file is not the user's.
        std::fs::write(&t, "workers = {{workers}}\n").unwrap();
        std::fs::write(dir.path().join("app.conf.qpslab-original"), "workers = 3\n").unwrap();
        let e = UserServer::template(&t, &f, "true").unwrap_err();
        assert!(e.contains("app.conf.qpslab-original exists") && e.contains("copy it back"), "{e}");
    }

    /// A reload that fails puts the previous text back and says which command failed; the
    /// original comes back byte for byte with nothing left beside it.
    #[test]
    fn a_failed_reload_keeps_the_file_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let (t, f) = (dir.path().join("app.tmpl"), dir.path().join("app.conf"));
        std::fs::write(&f, "workers = 3 # mine\n").unwrap();
        std::fs::write(&t, "workers = {{workers}}\n").unwrap();
        let flag = dir.path().join("fail");
        let cmd = format!("test ! -e {}", flag.display());
        let mut s = UserServer::template(&t, &f, &cmd).unwrap();
        s.put("workers = 1\n").unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "workers = 1\n");
        assert!(s.backup().exists());
        std::fs::write(&flag, "").unwrap();
        let e = s.put("workers = 2\n").unwrap_err();
        assert!(e.starts_with("--server-reload `test ! -e"), "{e}");
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "workers = 1\n");
        std::fs::remove_file(&flag).unwrap();
        s.restore().unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "workers = 3 # mine\n");
        assert!(!s.backup().exists());
    }
}
