//! The server's own word: the lines a log file gained over a window. A [`Tail`] notes where
//! the file ends when the window opens and reads what was appended when it closes (at most
//! [`MAX_READ`] bytes, the last ones; a file truncated or replaced meanwhile is read from its
//! start). [`group`] folds the lines into messages with counts, numbers and addresses
//! blanked, so that "256 worker_connections are not enough" said 12,000 times is one message.
//!
//! Owns no policy: which message means what is the doctor's.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The most read of a log at the window's end.
pub const MAX_READ: u64 = 4 << 20;
/// The messages kept, most frequent first.
pub const MAX_MESSAGES: usize = 12;

/// A log file and where it ended when the window opened.
#[derive(Debug, Clone)]
pub struct Tail {
    path: PathBuf,
    start: u64,
    inode: u64,
}

impl Tail {
    /// Notes where `path` ends now; None when it cannot be read.
    pub fn start(path: &Path) -> Option<Tail> {
        let m = std::fs::metadata(path).ok()?;
        use std::os::unix::fs::MetadataExt;
        Some(Tail { path: path.to_path_buf(), start: m.len(), inode: m.ino() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What was appended since [`Tail::start`]: the whole lines (at most the last
    /// [`MAX_READ`] bytes of them), and the bytes appended in all.
    pub fn appended(&self) -> Option<(String, u64)> {
        use std::os::unix::fs::MetadataExt;
        let mut f = std::fs::File::open(&self.path).ok()?;
        let m = f.metadata().ok()?;
        let from = if m.ino() != self.inode || m.len() < self.start { 0 } else { self.start };
        let added = m.len() - from;
        let at = from.max(m.len().saturating_sub(MAX_READ));
        f.seek(SeekFrom::Start(at)).ok()?;
        let mut buf = Vec::new();
        f.take(MAX_READ).read_to_end(&mut buf).ok()?;
        let mut text = String::from_utf8_lossy(&buf).into_owned();
        if at > from {
            // Cut into a line: start at the next whole one.
            let cut = text.find('\n').map_or(text.len(), |i| i + 1);
            text.drain(..cut);
        }
        Some((text, added))
    }
}

/// What a server's log gained over a window: the file, the bytes appended, and its messages.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogWindow {
    pub path: String,
    pub bytes: u64,
    pub messages: Vec<Message>,
}

/// One message of a log over a window: how many lines said it, and one of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// The level the line gives (`alert`, `error`, `warn`...), or empty.
    pub level: String,
    /// The line's message, as one line said it (without its timestamp and ids).
    pub example: String,
    pub count: u64,
}

/// The lines of `text` folded into messages, most frequent first (at most [`MAX_MESSAGES`]):
/// `split(line)` gives a line's level and message (None: not a message line). Lines whose
/// messages differ only in numbers, addresses and quoted names are one message.
pub fn group(text: &str, split: impl Fn(&str) -> Option<(&str, &str)>) -> Vec<Message> {
    let mut by_key: std::collections::HashMap<String, Message> = Default::default();
    for line in text.lines() {
        let Some((level, msg)) = split(line) else { continue };
        // Who asked (", client: ...") is not the message.
        let msg = msg.split(", client:").next().unwrap_or(msg);
        let e = by_key.entry(shape(msg)).or_insert_with(|| Message {
            level: level.to_string(),
            example: msg.to_string(),
            count: 0,
        });
        e.count += 1;
    }
    let mut v: Vec<Message> = by_key.into_values().collect();
    v.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.example.cmp(&b.example)));
    v.truncate(MAX_MESSAGES);
    v
}

/// A message's shape: digits blanked.
fn shape(msg: &str) -> String {
    msg.chars().map(|c| if c.is_ascii_digit() { '#' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;
    use std::io::Write;

    fn nginx_split(l: &str) -> Option<(&str, &str)> {
        crate::nginx::error_line(l)
    }

    #[test]
    fn only_what_the_window_added_is_read_and_folded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("error.log");
        std::fs::write(&path, "2026/11/27 10:00:00 [notice] 1#1: start\n").unwrap();
        let tail = Tail::start(&path).unwrap();
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        for i in 0..3 {
            writeln!(f, "2026/11/27 10:00:0{i} [alert] 7#7: 256 worker_connections are not enough")
                .unwrap();
        }
        writeln!(f, "2026/11/27 10:00:05 [error] 7#7: *99 limiting requests, excess: 0.{i}00 by zone \"one\", client: 127.0.0.1, server: , request: \"GET / HTTP/1.1\"", i = 5).unwrap();
        let (text, added) = tail.appended().unwrap();
        assert!(added > 0 && !text.contains("start"));
        let m = group(&text, nginx_split);
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!((m[0].level.as_str(), m[0].count), ("alert", 3));
        assert_eq!(m[0].example, "256 worker_connections are not enough");
        assert!(m[1].example.starts_with("limiting requests, excess: 0.500 by zone \"one\""));
    }

    #[test]
    fn a_replaced_log_is_read_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("error.log");
        std::fs::write(&path, "x".repeat(100)).unwrap();
        let tail = Tail::start(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "2026/11/27 10:00:00 [crit] 7#7: *1 open() failed\n").unwrap();
        let (text, _) = tail.appended().unwrap();
        assert_eq!(group(&text, nginx_split)[0].example, "open() failed");
    }
}
