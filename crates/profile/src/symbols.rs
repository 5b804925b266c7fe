//! Addresses to names, after the run: kernel frames from `kallsyms` (under the root, so a
//! captured file stands in for a kernel in tests), user frames from the file behind their
//! mapping, by file offset (so a process that exited is still named, as long as its files
//! remain). Each distinct address is looked up once; names come demangled.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::MaybeDefault;

use crate::maps;
use crate::sampler::RawProfile;

/// The name of a frame no symbol covers.
pub const UNKNOWN: &str = "[unknown]";

/// The names of every frame of a profile.
#[derive(Debug, Default)]
pub struct Symbols {
    kernel: HashMap<u64, String>,
    user: HashMap<(u32, u64), String>,
}

impl Symbols {
    /// Looks up every kernel address in `kallsyms` and every user address in its process's
    /// files.
    pub fn resolve(raw: &RawProfile, kallsyms: &Path) -> Symbols {
        let sym = Symbolizer::builder().enable_code_info(false).enable_inlined_fns(false).build();
        let mut out = Symbols::default();
        let mut kernel: Vec<u64> =
            raw.stacks.keys().flat_map(|s| s.kernel.iter().copied()).collect();
        kernel.sort_unstable();
        kernel.dedup();
        let src = Source::Kernel(Kernel {
            kallsyms: MaybeDefault::Some(kallsyms.to_path_buf()),
            vmlinux: MaybeDefault::None,
            debug_syms: false,
            ..Kernel::default()
        });
        out.kernel = names(&sym, &src, Input::AbsAddr(&kernel), &kernel, None);
        // User addresses by the file behind them, each file looked up once for all processes.
        let mut by_file: BTreeMap<&str, Vec<(u32, u64, u64)>> = BTreeMap::new();
        for s in raw.stacks.keys() {
            let Some(p) = raw.processes.get(&s.pid) else { continue };
            for &addr in &s.user {
                match maps::locate(&p.maps, addr) {
                    Some((file, offset)) => {
                        by_file.entry(file).or_default().push((s.pid, addr, offset))
                    }
                    None => {
                        out.user.insert((s.pid, addr), UNKNOWN.into());
                    }
                }
            }
        }
        for (file, mut list) in by_file {
            list.sort_unstable();
            list.dedup();
            let offsets: Vec<u64> = list.iter().map(|x| x.2).collect();
            let src = Source::Elf(Elf { debug_syms: false, ..Elf::new(file) });
            let base = Path::new(file).file_name().map(|f| f.to_string_lossy().into_owned());
            let found = names(&sym, &src, Input::FileOffset(&offsets), &offsets, base.as_deref());
            for (pid, addr, offset) in list {
                let name = found.get(&offset).cloned().unwrap_or_else(|| UNKNOWN.into());
                out.user.insert((pid, addr), name);
            }
        }
        out
    }

    /// A kernel frame's name.
    pub fn kernel(&self, addr: u64) -> &str {
        self.kernel.get(&addr).map_or(UNKNOWN, String::as_str)
    }

    /// A user frame's name.
    pub fn user(&self, pid: u32, addr: u64) -> &str {
        self.user.get(&(pid, addr)).map_or(UNKNOWN, String::as_str)
    }
}

/// Names of `keys` (the addresses or offsets in `input`), `[unknown]` or `[unknown in FILE]`
/// for those no symbol covers; an unreadable source names none.
fn names(
    sym: &Symbolizer,
    src: &Source<'_>,
    input: Input<&[u64]>,
    keys: &[u64],
    file: Option<&str>,
) -> HashMap<u64, String> {
    let unknown = || file.map_or(UNKNOWN.to_string(), |f| format!("[unknown in {f}]"));
    let Ok(found) = sym.symbolize(src, input) else {
        return keys.iter().map(|&k| (k, unknown())).collect();
    };
    keys.iter()
        .zip(found)
        .map(|(&k, s)| match s {
            Symbolized::Sym(s) => (k, s.name.into_owned()),
            Symbolized::Unknown(_) => (k, unknown()),
        })
        .collect()
}
