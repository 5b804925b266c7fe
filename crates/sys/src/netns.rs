//! Another process's network namespace (a container's, a pod's): work done on a thread that
//! joined it (`setns(CLONE_NEWNET)` on `/proc/PID/ns/net`), so that its rtnetlink and
//! sock_diag dumps and interface names are that namespace's. The calling thread never changes
//! namespace; the helper thread ends with the call.

use std::io;
use std::os::fd::AsRawFd;

/// The namespace of `pid` as the kernel names it (`net:[4026531840]`); None when unreadable.
pub fn of(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/ns/net")).ok().map(|p| p.display().to_string())
}

/// Runs `f` on a thread inside `pid`'s network namespace and returns what it returned.
pub fn run_in<T: Send + 'static>(
    pid: u32,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<T> {
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/net"))?;
    std::thread::Builder::new()
        .name("qpslab-netns".into())
        .spawn(move || {
            // SAFETY: setns only changes this helper thread's network namespace; `ns` is an
            // open descriptor of a namespace file for the call's duration.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(f())
        })?
        .join()
        .map_err(|_| io::Error::other("the namespace thread panicked"))?
}

/// The name of interface `index` in the calling thread's namespace.
pub fn if_name(index: i32) -> Option<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    let i = u32::try_from(index).ok()?;
    // SAFETY: `buf` holds IF_NAMESIZE bytes, as if_indextoname requires; on success it writes a
    // NUL-terminated name there.
    let p = unsafe { libc::if_indextoname(i, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: if_indextoname succeeded, so `buf` holds a NUL-terminated string.
    let name = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    Some(name.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process's own namespace: the same name, and its loopback found by index.
    #[test]
    fn a_thread_in_our_own_namespace_sees_what_we_see() {
        let me = std::process::id();
        assert!(of(me).is_some_and(|n| n.starts_with("net:[")));
        let lo = run_in(me, || if_name(1)).unwrap();
        assert_eq!(lo.as_deref(), Some("lo"));
    }
}
