//! `qpslab bench`'s options as sweep files and the store name them: [`BenchOptions`] in its
//! serde form, bench's own keys and every load option flattened beside them, kebab-case, the
//! same names as the flags (`connections`, `server-cpus`, `conn-per-request`, `header`, ...).
//! The keys and the check of their values come from the type itself: a field added to the
//! load options is a sweep key with nothing listed here. A sweep's base, its variants and its
//! axes give some keys each, layered over each other ([`BenchSettings::layered`]).

use serde::Serialize;

use crate::bench::BenchOptions;

/// The keys a sweep file gives for one variant (or one layer of it), each checked: its name
/// is a key of [`BenchOptions`] and its value is of that key's type.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct BenchSettings(toml::Table);

/// Fields of [`BenchOptions`] that are not sweep keys, and why: bench sets them itself.
pub const NOT_KEYS: &[(&str, &str)] = &[
    ("urls", "bench's target is `target`"),
    ("cpus", "bench puts the generator on the CPUs the server does not use"),
    ("targets", "bench loads the one target it examines"),
    ("schedule", "a coordinator's share of a rate, for its agents"),
];

/// Every sweep key: the fields of [`BenchOptions`] (the flags' long names), from its
/// serialized form, but [`NOT_KEYS`].
pub fn keys() -> Vec<String> {
    match serde_json::to_value(BenchOptions::default()) {
        Ok(serde_json::Value::Object(m)) => m
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| !NOT_KEYS.iter().any(|(n, _)| n == k))
            .collect(),
        _ => Vec::new(),
    }
}

impl BenchSettings {
    /// The keys of `table`, checked one by one over bench's defaults; an error names the key.
    pub fn parse(table: toml::Table) -> Result<BenchSettings, String> {
        let known = keys();
        for (key, value) in &table {
            if let Some((_, why)) = NOT_KEYS.iter().find(|(n, _)| n == key) {
                return Err(format!("{key} is not a sweep key: {why}"));
            }
            if !known.contains(key) {
                return Err(format!(
                    "unknown field `{key}`, expected one of {}",
                    known.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
                ));
            }
            let mut one = toml::Table::new();
            one.insert(key.clone(), value.clone());
            BenchSettings(one).apply_to(&BenchOptions::default())?;
        }
        Ok(BenchSettings(table))
    }

    /// `self` with every key `over` gives replaced.
    pub fn layered(&self, over: &BenchSettings) -> BenchSettings {
        let mut t = self.0.clone();
        t.extend(over.0.iter().map(|(k, v)| (k.clone(), v.clone())));
        BenchSettings(t)
    }

    /// The value given for `key`, if any.
    pub fn get(&self, key: &str) -> Option<&toml::Value> {
        self.0.get(key)
    }

    /// The options of a bench with these settings over `defaults`; an error names the key.
    pub fn apply_to(&self, defaults: &BenchOptions) -> Result<BenchOptions, String> {
        let mut table = toml::Table::try_from(defaults).map_err(|e| e.to_string())?;
        table.extend(self.0.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut o: BenchOptions =
            toml::Value::Table(table).try_into().map_err(|e: toml::de::Error| {
                let msg = e.message().trim().to_string();
                match self.0.iter().find(|(k, _)| msg.contains(k.as_str())).or(self.0.iter().next())
                {
                    Some((k, v)) if self.0.len() == 1 || msg.contains(k.as_str()) => {
                        format!("{k} = {v}: {msg}")
                    }
                    _ => msg,
                }
            })?;
        o.serve_exe.clone_from(&defaults.serve_exe);
        o.meta.clone_from(&defaults.meta);
        o.fail_on.clone_from(&defaults.fail_on);
        Ok(o)
    }

    /// The settings a bench ran with, as the store keeps them: every key.
    /// A file the options read (a request pool, a targets or stage file, a CA bundle, a client
    /// certificate and its private key) is kept by its path, not its text: a store keeps no
    /// pool of a million lines, and no private key (the report keeps a pool's digest).
    pub fn of_options(o: &BenchOptions) -> serde_json::Value {
        let mut v = serde_json::to_value(o).unwrap_or_default();
        if let serde_json::Value::Object(m) = &mut v {
            for value in m.values_mut() {
                let file = match value {
                    serde_json::Value::Object(f) if f.len() == 2 && f.contains_key("text") => {
                        f.get("file").cloned()
                    }
                    _ => None,
                };
                if let Some(file) = file {
                    *value = file;
                }
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use std::time::Duration;

    use super::*;

    fn table(text: &str) -> toml::Table {
        toml::from_str(text).unwrap()
    }

    /// Files are kept by their paths: no pool's lines, no private key in a stored run.
    #[test]
    fn files_are_kept_by_their_paths_not_their_text() {
        let file = |name: &str, text: &str| qpslab_load::options::FileText {
            name: name.into(),
            text: text.into(),
        };
        let mut o = BenchOptions::default();
        o.load.urls_file = Some(file("pool.txt", "/a\n/b\n"));
        o.load.tls.key = Some(file("client.key", "-----BEGIN PRIVATE KEY-----"));
        let v = BenchSettings::of_options(&o);
        assert_eq!(v["urls-file"], "pool.txt");
        assert_eq!(v["key"], "client.key");
        assert!(!v.to_string().contains("PRIVATE KEY"), "{v}");
    }

    #[test]
    fn layers_override_in_order_and_map_onto_bench_options() {
        let base = BenchSettings::parse(table(
            "target = \"nginx\"\nduration = \"5s\"\nconnections = 10\nheader = [\"X-A: 1\"]",
        ))
        .unwrap();
        let over = BenchSettings::parse(table("connections = 100")).unwrap();
        let o = base.layered(&over).apply_to(&BenchOptions::default()).unwrap();
        assert_eq!(
            (o.target.as_str(), o.duration(), o.load.connections),
            ("nginx", Duration::from_secs(5), Some(100))
        );
        // A load option is a key without being listed anywhere.
        assert_eq!(o.load.headers, ["X-A: 1"]);
        let url = BenchSettings::parse(table("target = \"http://127.0.0.1:8080/\"")).unwrap();
        let o = url.apply_to(&BenchOptions::default()).unwrap();
        assert_eq!(o.url(), Some("http://127.0.0.1:8080/"));
        let bad = BenchSettings::parse(table("duration = \"soon\"")).unwrap_err();
        assert!(bad.starts_with("duration = \"soon\": "), "{bad}");
        let typo = BenchSettings::parse(table("conections = 1")).unwrap_err();
        assert!(typo.starts_with("unknown field `conections`, expected one of "), "{typo}");
        assert!(typo.contains("`connections`") && typo.contains("`tls-reuse`"), "{typo}");
    }

    /// Every key of the load's options is a sweep key, but those bench sets itself (which say
    /// why): a field added to the load options reaches sweep files with nothing listed here.
    #[test]
    fn every_load_option_is_a_sweep_key_or_says_why_not() {
        let load = serde_json::to_value(qpslab_load::LoadOptions::default()).unwrap();
        let keys = keys();
        for key in load.as_object().unwrap().keys() {
            if NOT_KEYS.iter().any(|(n, _)| n == key) {
                assert!(!keys.contains(key), "{key} is marked as not a key");
                continue;
            }
            assert!(keys.contains(key), "the load option {key} is not a sweep key");
        }
        for (n, _) in NOT_KEYS {
            let e = BenchSettings::parse(table(&format!("{n} = \"x\""))).unwrap_err();
            assert!(e.starts_with(&format!("{n} is not a sweep key: ")), "{e}");
        }
    }
}
