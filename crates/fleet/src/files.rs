//! The load's big files (a `--urls` or `--body-lines` pool, a targets file) travel apart from
//! its options, by their SHA-256: the coordinator sends the options without them, an agent
//! takes each from its own store (`$QPSLAB_AGENT_DIR/files`, else `~/.cache/qpslab/files`)
//! when an earlier run left it there, and asks for the others, which then come once and are
//! kept. A pool of a million lines goes to an agent once, not with every run, and never inside
//! the per-second messages.
//!
//! Does not speak the protocol (the coordinator and the agent do); here the options are taken
//! apart, put together, and the store is read and written.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use qpslab_load::options::FileText;
use qpslab_load::LoadOptions;

/// A file taken out of a load's options: which option it was, its name, its digest, its size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detached {
    /// The option's flag without dashes: `urls`, `body-lines`, `data-file` or `targets`.
    pub option: String,
    pub name: String,
    pub sha256: String,
    pub bytes: u64,
}

/// The options that may hold a big file, by flag.
fn slot<'a>(o: &'a mut LoadOptions, option: &str) -> Option<&'a mut Option<FileText>> {
    match option {
        "urls" => Some(&mut o.urls_file),
        "body-lines" => Some(&mut o.body_lines),
        "data-file" => Some(&mut o.data_file),
        "targets" => Some(&mut o.targets),
        _ => None,
    }
}

/// SHA-256 of `text`, hex.
pub fn digest(text: &str) -> String {
    sha2::Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Takes the big files out of `o` (their text left empty): what was taken, and each text by
/// its digest.
pub fn detach(o: &mut LoadOptions) -> (Vec<Detached>, Vec<(String, String)>) {
    let (mut taken, mut texts) = (Vec::new(), Vec::new());
    for option in ["urls", "body-lines", "data-file", "targets"] {
        let Some(Some(f)) = slot(o, option) else { continue };
        let text = std::mem::take(&mut f.text);
        let sha256 = digest(&text);
        taken.push(Detached {
            option: option.into(),
            name: f.name.clone(),
            sha256: sha256.clone(),
            bytes: text.len() as u64,
        });
        texts.push((sha256, text));
    }
    (taken, texts)
}

/// Puts `text` back into `o` where `d` was taken from; refuses a text whose digest is not
/// `d`'s (a damaged transfer or store).
pub fn attach(o: &mut LoadOptions, d: &Detached, text: String) -> Result<(), String> {
    if digest(&text) != d.sha256 {
        return Err(format!("{} ({}): its SHA-256 does not match", d.name, d.option));
    }
    match slot(o, &d.option) {
        Some(s) => {
            *s = Some(FileText { name: d.name.clone(), text });
            Ok(())
        }
        None => Err(format!("--{} is not an option that takes a file", d.option)),
    }
}

/// Where an agent keeps the files it got.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// `$QPSLAB_AGENT_DIR/files`, else `$HOME/.cache/qpslab/files` (where the executable is
    /// kept too), else none.
    pub fn of_environment() -> Option<Store> {
        let base = match std::env::var_os("QPSLAB_AGENT_DIR") {
            Some(d) => PathBuf::from(d),
            None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/qpslab"),
        };
        Some(Store { dir: base.join("files") })
    }

    /// The text kept under `sha256`, when it is there and still has that digest.
    pub fn get(&self, sha256: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.dir.join(sha256)).ok()?;
        (digest(&text) == sha256).then_some(text)
    }

    /// Keeps `text` (written aside, then renamed: a reader never sees half of it). A store
    /// that cannot be written is not an error: the file is asked for again next time.
    pub fn put(&self, sha256: &str, text: &str) {
        let tmp = self.dir.join(format!(".{sha256}.{}", std::process::id()));
        let kept = std::fs::create_dir_all(&self.dir)
            .and_then(|()| std::fs::write(&tmp, text))
            .and_then(|()| std::fs::rename(&tmp, self.dir.join(sha256)));
        if kept.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn files_come_apart_and_back_whole_and_are_kept_by_digest() {
        let file = |name: &str, text: &str| FileText { name: name.into(), text: text.into() };
        let given = LoadOptions {
            urls_file: Some(file("pool.txt", "/a\n/b\n")),
            targets: Some(file("t.txt", "GET http://127.0.0.1:1/\n")),
            ..LoadOptions::default()
        };
        let mut o = given.clone();
        let (taken, texts) = detach(&mut o);
        assert_eq!(
            taken.iter().map(|d| d.option.as_str()).collect::<Vec<_>>(),
            ["urls", "targets"]
        );
        assert_eq!(o.urls_file.as_ref().unwrap().text, "", "the options travel without it");
        assert_eq!(taken[0].bytes, 6);
        let dir = tempfile::tempdir().unwrap();
        let store = Store { dir: dir.path().join("files") };
        assert_eq!(store.get(&taken[0].sha256), None);
        for (sha, text) in &texts {
            store.put(sha, text);
        }
        for d in &taken {
            attach(&mut o, d, store.get(&d.sha256).unwrap()).unwrap();
        }
        assert_eq!(o, given);
        let e = attach(&mut o, &taken[0], "/c\n".into()).unwrap_err();
        assert!(e.contains("pool.txt") && e.contains("does not match"), "{e}");
        // A kept file that changed is not taken.
        std::fs::write(dir.path().join("files").join(&taken[0].sha256), "/x\n").unwrap();
        assert_eq!(store.get(&taken[0].sha256), None);
    }
}
