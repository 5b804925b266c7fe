//! Other processes: whether a child has exited (without reaping it, so its final CPU total can
//! still be read), asking a process we started to stop, and whether we run as root.

use std::io;

/// Whether child `pid` has exited, leaving it unreaped (`waitid` with WNOWAIT) so that
/// `/proc/PID/stat` still shows its final CPU total. An error (no such child) counts as exited.
pub fn exited(pid: u32) -> bool {
    // SAFETY: siginfo_t is plain data; zeroed is valid and waitid fills it.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a valid, writable siginfo_t; the flags do not reap the child.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: si_pid is valid to read after a successful waitid; 0 means no child changed state.
    rc != 0 || unsafe { info.si_pid() } != 0
}

/// Sends SIGTERM to `pid`: a process this program started, identified by its PID (never by
/// name).
pub fn terminate(pid: u32) -> io::Result<()> {
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: kill() takes plain integers.
    if unsafe { libc::kill(pid, libc::SIGTERM) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether the effective user is root.
pub fn is_root() -> bool {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn a_child_is_seen_exiting_and_stays_unreaped() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        assert!(!exited(child.id()));
        terminate(child.id()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        while !exited(child.id()) {
            assert!(std::time::Instant::now() < deadline, "sleep did not end on SIGTERM");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Still there to be reaped, and killed by the signal.
        assert!(std::path::Path::new(&format!("/proc/{}", child.id())).exists());
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGTERM));
    }
}
