//! qpslab's view of the host, the evidence every verdict is made from: pure parsers of /proc and
//! /sys text ([`parse`], [`cpuset`]), the host model read from an injectable root ([`host`],
//! [`nic`], [`links`], [`route`]), counter samples ([`sample`]), the processes on the request
//! path ([`procs`], [`upstream`], [`nginx`]), what the server's own logs gained ([`logs`]) and the
//! host's text ([`render`]). It reads and never
//! judges: the doctor (`qpslab-doctor`) draws the verdicts, `qpslab-tune` makes the changes.

pub mod cpuset;
pub mod facts;
pub mod host;
pub mod links;
pub mod logs;
pub mod nginx;
pub mod nic;
pub mod parse;
pub mod procs;
pub mod render;
pub mod route;
pub mod sample;
pub mod upstream;

use std::path::Path;

pub use cpuset::CpuSet;
pub use host::Host;
pub use qpslab_sys::root::{ReadError, Root};

/// Whether `dir` is this host's own root: writes there change the running kernel, so they need
/// root and, on apply, the user's confirmation; and what the kernel holds outside /proc and /sys
/// (qdiscs over rtnetlink, driver statistics, `nginx -T`) is asked of it only there.
pub fn is_live(dir: &Path) -> bool {
    dir.canonicalize().is_ok_and(|d| d == Path::new("/"))
}
