//! Other processes: whether a child has exited (without reaping it, so its final CPU total can
//! still be read), asking a process we started to stop, tying a child's life to ours, and
//! whether we run as root.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

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

/// Whether a process `pid` exists (any process, not only a child): signal 0 checks without
/// sending; EPERM means it exists but is not ours.
pub fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: kill() with signal 0 sends nothing; it only checks the PID.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
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

/// Sends SIGHUP to `pid`: a server's "reload your configuration" (nginx's master), sent only
/// where the user let a command change that server.
pub fn hang_up(pid: u32) -> io::Result<()> {
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: kill() takes plain integers.
    if unsafe { libc::kill(pid, libc::SIGHUP) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes the child that `cmd` starts receive `signal` when the thread that starts it ends, even
/// when this process is killed with SIGKILL (PR_SET_PDEATHSIG): a server a benchmark started
/// does not outlive it. (The setting survives `exec` but not the child's own forks: nginx's
/// master gets it, and stops its workers on SIGTERM.)
pub fn die_with_parent(cmd: &mut Command, signal: i32) -> &mut Command {
    // SAFETY: getpid takes no arguments.
    let parent = unsafe { libc::getpid() };
    let hook = move || {
        // SAFETY: prctl and getppid are async-signal-safe system calls taking plain integers;
        // nothing is allocated between fork and exec.
        unsafe {
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before the setting took effect.
            if libc::getppid() != parent {
                libc::raise(signal);
            }
        }
        Ok(())
    };
    // SAFETY: the hook only makes async-signal-safe system calls (see above).
    unsafe { cmd.pre_exec(hook) }
}

/// SIGTERM, for [`die_with_parent`].
pub const SIGTERM: i32 = libc::SIGTERM;
/// SIGKILL, for [`die_with_parent`].
pub const SIGKILL: i32 = libc::SIGKILL;

/// Whether the effective user is root.
pub fn is_root() -> bool {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    /// A child of a thread that ends gets the signal: here the thread stands in for a process
    /// that is killed.
    #[test]
    fn a_child_dies_with_the_thread_that_started_it() {
        let pid = std::thread::spawn(|| {
            let mut cmd = Command::new("sleep");
            cmd.arg("30");
            die_with_parent(&mut cmd, SIGKILL).spawn().unwrap().id()
        })
        .join()
        .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        // Zombie (`Z`) or gone: either way it is not running.
        let running = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit(')').next().is_some_and(|r| !r.trim_start().starts_with('Z'))
            })
        };
        while running() {
            assert!(std::time::Instant::now() < deadline, "sleep outlived the thread");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

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
