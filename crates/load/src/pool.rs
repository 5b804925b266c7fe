//! The `--urls` pool's report groups: each line's group named by a prefix of its path (with
//! its origin when the pool spans several), decided before the run so that each group's
//! latency is recorded as responses arrive. At most [`MAX_GROUPS`]: past that the groups with
//! the fewest lines are folded into one.

use qpslab_sys::config_error::ConfigError;

use crate::options::{LoadOptions, GROUP_BY_NAME};
use crate::variants::Variants;

/// The `--urls` pool's default grouping: by its paths' first segment.
pub const DEFAULT_GROUP_BY: usize = 1;

/// How a pool's lines are grouped in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    /// By the first N segments of each path.
    Segments(usize),
    /// A targets file's lines by their `name=` (a line without one: by its method and URL).
    Name,
}

impl serde::Serialize for GroupBy {
    /// The JSON's `group_by`: N, or `"name"`.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            GroupBy::Segments(n) => s.serialize_u64(*n as u64),
            GroupBy::Name => s.serialize_str(GROUP_BY_NAME),
        }
    }
}

impl GroupBy {
    /// `--group-by` against the pool given: a number of path segments or none for `--urls` and
    /// `--body-lines`, name (or none) for a targets file's lines; None: one group.
    pub fn from_options(o: &LoadOptions) -> Result<Option<GroupBy>, ConfigError> {
        let pool = o.urls_file.is_some() || o.body_lines.is_some();
        let err = |m: &str| ConfigError::new("--group-by", m.to_string());
        match o.group_by.as_deref() {
            None => Ok(Some(GroupBy::Segments(DEFAULT_GROUP_BY))),
            Some(GROUP_BY_NAME) if pool => Err(err(
                "name groups a targets file's lines by their name=; a --urls or --body-lines pool \
                 is grouped by path segments (a number) or none",
            )),
            Some(GROUP_BY_NAME) if o.targets.is_none() => {
                Err(err("name groups a targets file's lines by their name=; give --targets FILE"))
            }
            Some(GROUP_BY_NAME) => Ok(Some(GroupBy::Name)),
            Some(_) if !pool => Err(err(
                "it groups a pool: give --urls FILE or --body-lines FILE (or --targets FILE with \
                 --group-by name)",
            )),
            Some("none") => Ok(None),
            Some(n) => n
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .map(|n| Some(GroupBy::Segments(n)))
                .ok_or_else(|| {
                    ConfigError::new(
                        "--group-by",
                        format!("{n:?}: give a number of path segments (1 or more), none, or name"),
                    )
                }),
        }
    }
}

/// Groups past this many are folded into one (those with the fewest lines).
pub const MAX_GROUPS: usize = 50;

/// The group of a target that is not a line of the pool.
pub const NO_GROUP: u32 = u32::MAX;

/// The pool's groups by the first `by` path segments (None: one group, `all`): their names,
/// and each target's group ([`NO_GROUP`] for targets outside the pool).
pub fn groups(v: &Variants, by: Option<GroupBy>) -> (Vec<String>, Vec<u32>) {
    let in_pool = || (0..v.len()).filter(|&i| v.pool(i));
    let first = in_pool().next().map(|f| origin(v.url(f)));
    let several = first.is_some_and(|f| in_pool().any(|i| origin(v.url(i)) != f));
    let mut names: Vec<String> = Vec::new();
    let mut lines: Vec<usize> = Vec::new();
    let mut index = std::collections::HashMap::new();
    let mut member = vec![NO_GROUP; v.len()];
    for i in in_pool() {
        let url = v.url(i);
        let name = match by {
            None => "all".to_string(),
            Some(GroupBy::Name) => {
                v.name(i).map_or_else(|| format!("{} {url}", v.method(i)), String::from)
            }
            Some(GroupBy::Segments(n)) if several => format!("{}{}", origin(url), prefix(url, n)),
            Some(GroupBy::Segments(n)) => prefix(url, n),
        };
        let g = *index.entry(name.clone()).or_insert_with(|| {
            names.push(name);
            lines.push(0);
            names.len() - 1
        });
        lines[g] += 1;
        member[i] = g as u32;
    }
    if names.len() <= MAX_GROUPS {
        return (names, member);
    }
    // Keep the groups with the most lines, in their order; the rest become the last group.
    let mut by_lines: Vec<usize> = (0..names.len()).collect();
    by_lines.sort_by_key(|&g| std::cmp::Reverse(lines[g]));
    let kept: std::collections::HashSet<usize> =
        by_lines[..MAX_GROUPS - 1].iter().copied().collect();
    let mut renumber = vec![0u32; names.len()];
    let mut out = Vec::with_capacity(MAX_GROUPS);
    for (g, name) in names.iter().enumerate() {
        if kept.contains(&g) {
            renumber[g] = out.len() as u32;
            out.push(name.clone());
        }
    }
    let rest = out.len() as u32;
    for (g, r) in renumber.iter_mut().enumerate() {
        if !kept.contains(&g) {
            *r = rest;
        }
    }
    out.push(format!("({} other groups)", names.len() - kept.len()));
    for m in member.iter_mut().filter(|m| **m != NO_GROUP) {
        *m = renumber[*m as usize];
    }
    (out, member)
}

/// `http://host:port` of a URL.
pub fn origin(url: &str) -> String {
    let after = url.find("://").map_or(0, |i| i + 3);
    let end = url[after..].find('/').map_or(url.len(), |i| after + i);
    url[..end].to_string()
}

/// The first `n` segments of a URL's path (`/item/42?x` by 1: `/item`).
fn prefix(url: &str, n: usize) -> String {
    let o = origin(url).len();
    let path = url[o..].split(['?', '#']).next().unwrap_or("");
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).take(n).collect();
    format!("/{}", segs.join("/"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    fn variants(urls: &[(String, bool)]) -> Variants {
        let mut v = Variants::default();
        for (url, pool) in urls {
            let o = crate::LoadOptions { urls: vec![url.clone()], ..crate::LoadOptions::default() };
            let mut t = crate::target::build(&o).unwrap().0.target(0);
            t.pool = *pool;
            v.push(t);
        }
        v
    }

    #[test]
    fn a_group_is_named_by_its_path_prefix_and_many_are_folded() {
        assert_eq!(prefix("http://h:1/item/42?x=1", 1), "/item");
        assert_eq!(prefix("http://h:1/item/42?x=1", 2), "/item/42");
        assert_eq!(prefix("http://h:1/item/42", 5), "/item/42");
        assert_eq!(prefix("http://h:1/", 1), "/");
        assert_eq!(origin("https://h:1/a/b"), "https://h:1");
        let ts = variants(&[
            ("http://127.0.0.1:1/x".into(), false),
            ("http://127.0.0.1:1/a/1".into(), true),
            ("http://127.0.0.1:1/b/2".into(), true),
            ("http://127.0.0.1:1/a/3".into(), true),
        ]);
        let (names, member) = groups(&ts, Some(GroupBy::Segments(1)));
        assert_eq!(names, ["/a", "/b"]);
        assert_eq!(member, [NO_GROUP, 0, 1, 0]);
        assert_eq!(groups(&ts, None).0, ["all"]);
        // 60 groups, group i with i+1 lines: the 11 smallest are folded.
        let mut many = Vec::new();
        for g in 0..60 {
            for l in 0..=g {
                many.push((format!("http://127.0.0.1:1/g{g}/{l}"), true));
            }
        }
        let many = variants(&many);
        let (names, member) = groups(&many, Some(GroupBy::Segments(1)));
        assert_eq!(names.len(), MAX_GROUPS);
        assert_eq!(names[0], "/g11", "the rest keep their order");
        assert_eq!(names[MAX_GROUPS - 1], "(11 other groups)");
        assert_eq!(
            member.iter().filter(|&&m| m == (MAX_GROUPS - 1) as u32).count(),
            (1..=11).sum::<usize>()
        );
    }
}
