//! `/proc/PID/maps`: which file (and where in it) backs a user address, so that a process's
//! samples can be symbolized from its executable and libraries even after it exited.

/// One mapping of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Offset in the file of `start`.
    pub offset: u64,
    pub executable: bool,
    /// The file, for a file mapping (`[vdso]`, `[stack]` and anonymous mappings have none).
    pub path: Option<String>,
}

/// Parses the text of `/proc/PID/maps` (`start-end perms offset dev inode [path]`, addresses
/// and offset in hex); lines of another form are skipped.
pub fn parse(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Mapping> {
    let mut words = line.split_whitespace();
    let (start, end) = words.next()?.split_once('-')?;
    let perms = words.next()?;
    let offset = u64::from_str_radix(words.next()?, 16).ok()?;
    let (_dev, _inode) = (words.next()?, words.next()?);
    // A path may hold spaces: the rest of the line.
    let rest: Vec<&str> = words.collect();
    let path = (!rest.is_empty()).then(|| rest.join(" "));
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        offset,
        executable: perms.as_bytes().get(2) == Some(&b'x'),
        path: path.filter(|p| p.starts_with('/')),
    })
}

/// The file and the offset in it of `addr`, when an executable file mapping holds it.
pub fn locate(maps: &[Mapping], addr: u64) -> Option<(&str, u64)> {
    let m = maps.iter().find(|m| m.executable && m.start <= addr && addr < m.end)?;
    Some((m.path.as_deref()?, addr - m.start + m.offset))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn file_offsets_come_from_executable_file_mappings() {
        // Captured from a `qpslab serve` on Linux 6.18 (trimmed).
        let text = "\
55d0c6a00000-55d0c6b2e000 r--p 00000000 fe:01 1311 /usr/local/bin/qpslab\n\
55d0c6b2e000-55d0c7420000 r-xp 0012e000 fe:01 1311 /usr/local/bin/qpslab\n\
7f3a1c000000-7f3a1c021000 rw-p 00000000 00:00 0 \n\
7f3a1d428000-7f3a1d5a0000 r-xp 00028000 fe:01 2210 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
7ffc2a1f4000-7ffc2a1f6000 r-xp 00000000 00:00 0                          [vdso]\n\
7ffc2a1f6000-7ffc2a1f8000 r-xp 00000000 00:00 0 /tmp/a name with spaces\n";
        let maps = parse(text);
        assert_eq!(maps.len(), 6);
        assert_eq!(locate(&maps, 0x55d0c6b2e010), Some(("/usr/local/bin/qpslab", 0x12e010)));
        assert_eq!(
            locate(&maps, 0x7f3a1d428100),
            Some(("/usr/lib/x86_64-linux-gnu/libc.so.6", 0x28100))
        );
        assert_eq!(locate(&maps, 0x55d0c6a00010), None, "not executable");
        assert_eq!(locate(&maps, 0x7ffc2a1f4010), None, "[vdso] has no file");
        assert_eq!(locate(&maps, 0x7ffc2a1f6001), Some(("/tmp/a name with spaces", 1)));
        assert!(parse("garbage\n").is_empty());
    }
}
