//! The sweep file: a base, axes whose cartesian product gives variants, and/or an explicit
//! list of variants, each with host settings of its own. Every key is checked: an unknown or
//! malformed key is an error that names it, its line and the fix, never ignored.
//!
//! ```toml
//! name = "knee"
//! repeat = 3
//! [base]
//! target = "builtin"
//! duration = "5s"
//! [axes]
//! connections = [10, 100, 1000]
//! [[variant]]
//! name = "rps on"
//! tune = { rps = { "veth1/rx-0" = "1" } }
//! ```

use std::path::Path;

use serde::Deserialize;

pub use crate::kinds::TuneSpec;
use crate::settings::BenchSettings;

/// A sweep file that is not right; the message names the file, the line and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FileError(pub String);

/// One variant: its name, its bench settings (base, variant and axis values layered) and its
/// host settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    pub name: String,
    pub settings: BenchSettings,
    pub tune: Option<TuneSpec>,
    /// The workers and threads per worker `[server-config]`'s template is filled in with for
    /// its runs (`server-workers`, `server-threads`; one each when not given).
    pub server_workers: Option<usize>,
    pub server_threads: Option<usize>,
}

/// `[server-config]`: the user's server, through a template of its configuration with
/// `{{workers}}` and `{{threads}}` in it, written to `file` and put in force by `reload` before
/// each run.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfigSpec {
    pub template: std::path::PathBuf,
    pub file: std::path::PathBuf,
    pub reload: String,
}

/// A sweep, read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    pub name: String,
    pub repeat: u32,
    pub variants: Vec<Variant>,
    /// The user's server's template, when its variants set `server-workers`.
    pub server_config: Option<ServerConfigSpec>,
    /// The file as given (kept with the sweep in the store).
    pub text: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    name: String,
    repeat: Option<u32>,
    description: Option<String>,
    #[serde(default)]
    base: toml::Table,
    #[serde(default)]
    axes: toml::Table,
    #[serde(default)]
    variant: Vec<toml::Spanned<toml::Table>>,
    #[serde(rename = "server-config")]
    server_config: Option<ServerConfigSpec>,
}

/// Reads and checks the sweep file at `path`.
pub fn read(path: &Path) -> Result<Sweep, FileError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        FileError(format!(
            "{}: cannot read: {e}; give the path of a sweep file (.toml)",
            path.display()
        ))
    })?;
    let mut sweep = parse(&path.display().to_string(), &text)?;
    // The template and the server's file are named relative to the sweep file.
    if let (Some(c), Some(dir)) = (&mut sweep.server_config, path.parent()) {
        c.template = dir.join(&c.template);
        c.file = dir.join(&c.file);
    }
    Ok(sweep)
}

/// Parses and checks sweep-file text; `file` names it in messages.
pub fn parse(file: &str, text: &str) -> Result<Sweep, FileError> {
    let at = |line: usize, msg: String| FileError(format!("{file} line {line}: {msg}"));
    let raw: Raw = toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(1, |s| line_of(text, s.start));
        at(line, format!("{}{}", e.message().trim(), hint(e.message())))
    })?;
    let _ = raw.description;
    if raw.repeat == Some(0) {
        return Err(at(key_line(text, "repeat"), "repeat must be at least 1".into()));
    }
    let mut explicit = Vec::new();
    for spanned in &raw.variant {
        let line = line_of(text, spanned.span().start);
        explicit.push(variant_of(spanned.get_ref()).map_err(|m| at(line, m))?);
    }
    let axes = axes(&raw.axes).map_err(|(key, m)| at(key_line(text, &key), m))?;
    let base = BenchSettings::parse(raw.base.clone()).map_err(|m| {
        let key = raw
            .base
            .keys()
            .find(|k| {
                m.starts_with(&format!("unknown field `{k}`")) || m.starts_with(&format!("{k} "))
            })
            .cloned()
            .unwrap_or_default();
        at(key_line(text, &key), format!("{m}{}", hint(&m)))
    })?;
    let variants = expand(&base, explicit, &axes);
    let mut seen = std::collections::BTreeSet::new();
    if let Some(dup) = variants.iter().find(|v| !seen.insert(v.name.clone())) {
        return Err(FileError(format!(
            "{file}: two variants are named {:?}; give each its own name",
            dup.name
        )));
    }
    let pooled = |v: &Variant| v.server_workers.is_some() || v.server_threads.is_some();
    let workers = variants.iter().filter(|v| pooled(v)).count();
    match (&raw.server_config, workers) {
        (None, n) if n > 0 => {
            return Err(FileError(format!(
                "{file}: server-workers and server-threads fill in a server's template: add a [server-config] table with template, file and reload"
            )))
        }
        (Some(_), n) if n < variants.len() => {
            let v = variants.iter().find(|v| !pooled(v)).map(|v| v.name.clone());
            return Err(FileError(format!(
                "{file}: variant {:?} has no server-workers or server-threads; with [server-config] every variant says what its server runs (an axis server-workers = [1, 2] or server-threads = [1, 8], or a key per variant)",
                v.unwrap_or_default()
            )));
        }
        _ => {}
    }
    Ok(Sweep {
        name: raw.name,
        repeat: raw.repeat.unwrap_or(3),
        variants,
        server_config: raw.server_config,
        text: text.to_string(),
    })
}

/// A `[[variant]]` table: `name`, `tune`, and bench settings.
fn variant_of(table: &toml::Table) -> Result<Variant, String> {
    let mut rest = table.clone();
    let name = match rest.remove("name") {
        Some(toml::Value::String(n)) if !n.trim().is_empty() => n,
        Some(_) => return Err("a variant's name must be a non-empty string".into()),
        None => return Err("a [[variant]] needs a name, e.g. name = \"16 workers\"".into()),
    };
    let tune = rest
        .remove("tune")
        .map(|t| tune_of(t).map_err(|m| format!("variant {name:?}: {m}")))
        .transpose()?;
    let mut count = |key: &str| {
        rest.remove(key)
            .map(|v| count_of(key, &v).map_err(|m| format!("variant {name:?}: {m}")))
            .transpose()
    };
    let server_workers = count(SERVER_WORKERS)?;
    let server_threads = count(SERVER_THREADS)?;
    let settings = settings_of(rest).map_err(|m| format!("variant {name:?}: {m}"))?;
    Ok(Variant { name, settings, tune, server_workers, server_threads })
}

/// The keys that fill in `[server-config]`'s `{{workers}}` and `{{threads}}`.
const SERVER_WORKERS: &str = "server-workers";
const SERVER_THREADS: &str = "server-threads";

fn count_of(key: &str, v: &toml::Value) -> Result<usize, String> {
    v.as_integer()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| *n >= 1)
        .ok_or_else(|| format!("{key} = {v}: give a whole number of at least 1"))
}

fn settings_of(table: toml::Table) -> Result<BenchSettings, String> {
    BenchSettings::parse(table).map_err(|m| format!("{m}{}", hint(&m)))
}

/// Host settings in a file of their own (a climb's final state), as a sweep's `tune` table.
pub fn tune_file(text: &str) -> Result<TuneSpec, String> {
    let value: toml::Value = text.parse().map_err(|e: toml::de::Error| {
        let line = e.span().map_or(0, |s| text[..s.start.min(text.len())].lines().count().max(1));
        format!("line {line}: {}", e.message().split_whitespace().collect::<Vec<_>>().join(" "))
    })?;
    tune_of(value)
}

/// Host settings as a sweep's `tune` table gives them.
fn tune_of(value: toml::Value) -> Result<TuneSpec, String> {
    let spec: TuneSpec = value.try_into().map_err(|e: toml::de::Error| {
        format!(
            "tune: {}; the tune keys are workers, irq-cpus, iface, role (planned) or rps, irq, \
             sysctl, steer (named outright)",
            e.message().trim()
        )
    })?;
    if spec.is_explicit() && spec.is_planned() {
        return Err("tune: give planner flags (workers, irq-cpus, iface, role) or settings \
                    named outright (rps, irq, sysctl, steer), not both"
            .into());
    }
    Ok(spec)
}

/// One axis value: the bench settings it sets, or the host settings (`tune`).
#[derive(Debug, Clone)]
enum Step {
    Bench(Box<BenchSettings>),
    Tune(TuneSpec),
    ServerWorkers(usize),
    ServerThreads(usize),
}

/// An axis: each value's label and what it sets.
type Axis = Vec<(String, Step)>;

/// `[axes]`: each key with its values, in file order; an error is (key, message).
fn axes(table: &toml::Table) -> Result<Vec<Axis>, (String, String)> {
    let mut out = Vec::new();
    for (key, values) in table {
        let err = |m: String| (key.clone(), format!("axes.{key}: {m}"));
        let toml::Value::Array(values) = values else {
            return Err(err("give a list of values, e.g. [10, 100]".into()));
        };
        if values.is_empty() {
            return Err(err("the list is empty; give at least one value".into()));
        }
        let own = [SERVER_WORKERS, SERVER_THREADS].contains(&key.as_str());
        if key != "tune" && !own && !crate::settings::keys().contains(key) {
            return Err(err(format!(
                "not an option of a sweep; the options are {}, tune, server-workers, server-threads",
                crate::settings::keys().join(", ")
            )));
        }
        let mut steps = Vec::new();
        for v in values {
            let label = format!("{key}={}", v.to_string().trim_matches('"'));
            let step = if key == "tune" {
                Step::Tune(tune_of(v.clone()).map_err(err)?)
            } else if key == SERVER_WORKERS {
                Step::ServerWorkers(count_of(key, v).map_err(err)?)
            } else if key == SERVER_THREADS {
                Step::ServerThreads(count_of(key, v).map_err(err)?)
            } else {
                let mut one = toml::Table::new();
                one.insert(key.clone(), v.clone());
                Step::Bench(Box::new(settings_of(one).map_err(err)?))
            };
            steps.push((label, step));
        }
        out.push(steps);
    }
    Ok(out)
}

/// Every variant with every combination of axis values, explicit variants first in file order.
fn expand(
    base: &BenchSettings,
    explicit: Vec<Variant>,
    axes: &[Vec<(String, Step)>],
) -> Vec<Variant> {
    let implicit = explicit.is_empty();
    let variants = if implicit {
        vec![Variant {
            name: "base".into(),
            settings: BenchSettings::default(),
            tune: None,
            server_workers: None,
            server_threads: None,
        }]
    } else {
        explicit
    };
    let mut combos: Vec<Vec<&(String, Step)>> = vec![Vec::new()];
    for axis in axes {
        combos = combos
            .into_iter()
            .flat_map(|c| axis.iter().map(move |v| [c.clone(), vec![v]].concat()))
            .collect();
    }
    let mut out = Vec::new();
    for v in &variants {
        for combo in &combos {
            let mut settings = base.layered(&v.settings);
            let mut tune = v.tune.clone();
            let (mut server_workers, mut server_threads) = (v.server_workers, v.server_threads);
            for (_, step) in combo {
                match step {
                    Step::Bench(s) => settings = settings.layered(s),
                    Step::Tune(t) => tune = Some(t.clone()),
                    Step::ServerWorkers(n) => server_workers = Some(*n),
                    Step::ServerThreads(n) => server_threads = Some(*n),
                }
            }
            let labels: Vec<&str> = combo.iter().map(|(l, _)| l.as_str()).collect();
            let name = match (implicit, labels.is_empty()) {
                (true, true) => v.name.clone(),
                (true, false) => labels.join(" "),
                (false, true) => v.name.clone(),
                (false, false) => format!("{} {}", v.name, labels.join(" ")),
            };
            out.push(Variant { name, settings, tune, server_workers, server_threads });
        }
    }
    out
}

/// 1-based line of byte offset `at`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].matches('\n').count() + 1
}

/// The first line that sets `key` (`key =` at the start of a line), or 1.
fn key_line(text: &str, key: &str) -> usize {
    text.lines()
        .position(|l| {
            let l = l.trim_start().trim_start_matches('"');
            l.starts_with(key)
                && l[key.len()..].trim_start().trim_start_matches('"').trim_start().starts_with('=')
        })
        .map_or(1, |i| i + 1)
}

/// What to do about a serde message.
fn hint(message: &str) -> &'static str {
    if message.contains("unknown field") {
        "; remove it or correct its spelling"
    } else if message.contains("missing field `name`") {
        "; give the sweep a name, e.g. name = \"knee\""
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn axes_multiply_and_variants_layer_over_the_base() {
        let s = parse(
            "t.toml",
            r#"name = "matrix"
repeat = 2
[base]
duration = "2s"
connections = 5
[axes]
target = ["builtin", "nginx"]
connections = [10, 100]
"#,
        )
        .unwrap();
        assert_eq!(s.repeat, 2);
        let names: Vec<&str> = s.variants.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "target=builtin connections=10",
                "target=builtin connections=100",
                "target=nginx connections=10",
                "target=nginx connections=100"
            ]
        );
        let o = s.variants[3].settings.apply_to(&crate::BenchOptions::default()).unwrap();
        assert_eq!(o.load.connections, Some(100));
        assert_eq!(o.duration(), std::time::Duration::from_secs(2));

        let steps = parse(
            "t.toml",
            r#"name = "steps"
[base]
target = "nginx"
[[variant]]
name = "4 workers"
workers = 4
[[variant]]
name = "rps"
workers = 4
tune = { rps = { "eth0/rx-0" = "1-3" } }
"#,
        )
        .unwrap();
        assert_eq!(steps.repeat, 3, "the default");
        assert_eq!(steps.variants.len(), 2);
        assert_eq!(steps.variants[1].tune.as_ref().unwrap().rps["eth0/rx-0"], "1-3");
        assert_eq!(steps.variants[1].settings.get("target").unwrap().as_str(), Some("nginx"));
    }

    /// A server's pool through its template: workers and threads as axes multiply; a variant
    /// may give threads alone (its workers are then one); with the table, a variant giving
    /// neither is refused.
    #[test]
    fn a_servers_workers_and_threads_are_axes() {
        let conf = "[server-config]\ntemplate = \"t\"\nfile = \"f\"\nreload = \"true\"\n";
        let s = parse(
            "p.toml",
            &format!(
                "name = \"p\"\n{conf}[axes]\nserver-workers = [1, 2]\nserver-threads = [1, 8]\n"
            ),
        )
        .unwrap();
        let pools: Vec<(Option<usize>, Option<usize>)> =
            s.variants.iter().map(|v| (v.server_workers, v.server_threads)).collect();
        assert_eq!(
            pools,
            [(Some(1), Some(1)), (Some(1), Some(8)), (Some(2), Some(1)), (Some(2), Some(8))]
        );
        assert_eq!(s.variants[1].name, "server-workers=1 server-threads=8");
        let s = parse(
            "p.toml",
            &format!("name = \"p\"\n{conf}[[variant]]\nname = \"eight\"\nserver-threads = 8\n"),
        )
        .unwrap();
        assert_eq!((s.variants[0].server_workers, s.variants[0].server_threads), (None, Some(8)));
        let e = parse(
            "p.toml",
            &format!("name = \"p\"\n{conf}[[variant]]\nname = \"a\"\nserver-threads = 8\n[[variant]]\nname = \"b\"\n"),
        )
        .unwrap_err()
        .0;
        assert!(e.contains("variant \"b\" has no server-workers or server-threads"), "{e}");
        let e = parse("p.toml", "name = \"p\"\n[axes]\nserver-threads = [0]\n").unwrap_err().0;
        assert!(e.contains("server-threads = 0: give a whole number of at least 1"), "{e}");
    }

    #[test]
    fn bad_keys_name_the_key_the_line_and_the_fix() {
        let err = |text: &str| parse("s.toml", text).unwrap_err().0;
        let e = err("name = \"x\"\n[base]\nconnectons = 10\n");
        assert!(e.starts_with("s.toml line 3: unknown field `connectons`"), "{e}");
        assert!(e.ends_with("remove it or correct its spelling"), "{e}");
        let e = err("name = \"x\"\nrepet = 3\n");
        assert!(e.starts_with("s.toml line 2: unknown field `repet`"), "{e}");
        let e = err("name = \"x\"\n[axes]\n\nconnections = 10\n");
        assert_eq!(e, "s.toml line 4: axes.connections: give a list of values, e.g. [10, 100]");
        let e = err("name = \"x\"\n[axes]\nspeed = [1]\n");
        assert!(e.starts_with("s.toml line 3: axes.speed: not an option of a sweep"), "{e}");
        let e = err("name = \"x\"\n[axes]\nconnections = [\"many\"]\n");
        assert!(
            e.starts_with(
                "s.toml line 3: axes.connections: connections = \"many\": invalid type: string \"many\""
            ),
            "{e}"
        );
        let e = err("name = \"x\"\n\n[[variant]]\nworkers = 2\n");
        assert_eq!(e, "s.toml line 3: a [[variant]] needs a name, e.g. name = \"16 workers\"");
        let e = err("name = \"x\"\n[[variant]]\nname = \"a\"\ntune = { cpus = 1 }\n");
        assert!(e.contains("variant \"a\": tune: unknown field `cpus`"), "{e}");
        let e = err("name = \"x\"\n[[variant]]\nname = \"a\"\n[[variant]]\nname = \"a\"\n");
        assert!(e.contains("two variants are named \"a\""), "{e}");
        let e = err("[base]\n");
        assert!(e.contains("missing field `name`"), "{e}");
        let e = err("name = \"x\"\nrepeat = 0\n");
        assert_eq!(e, "s.toml line 2: repeat must be at least 1");
        let e = err("name = \"x\"\n[base\n");
        assert!(e.starts_with("s.toml line 2: "), "{e}");
    }
}
