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
pub mod stub_status;
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

/// The TCP sockets in `states` (a bit per TCP state number): on a live host from a sock_diag
/// dump of those states, which skips the others in the kernel (a connection per request
/// leaves tens of thousands of TIME_WAIT sockets, each formatted as text by /proc/net/tcp
/// and parsed, for half a CPU during a run); from the socket tables of a fixture tree.
pub fn tcp_sockets_in(root: &Root, states: u32) -> Vec<qpslab_sys::sockets::TcpSocket> {
    if is_live(root.dir()) {
        if let Ok(v) = qpslab_sys::netlink::tcp_sockets(states) {
            return v;
        }
    }
    qpslab_sys::sockets::tcp_sockets(root)
        .into_iter()
        .filter(|s| s.state < 32 && states & (1 << s.state) != 0)
        .collect()
}
