//! A minimal level-triggered epoll wrapper: the only readiness API the engine and server need.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub const IN: u32 = libc::EPOLLIN as u32;
pub const OUT: u32 = libc::EPOLLOUT as u32;
pub const ERR: u32 = (libc::EPOLLERR | libc::EPOLLHUP) as u32;
/// The peer shut down its writing side (half-close or close).
pub const RDHUP: u32 = libc::EPOLLRDHUP as u32;
/// Edge-triggered: report a change of readiness once.
pub const EDGE: u32 = libc::EPOLLET as u32;
/// Wake one waiter only (for a listener shared by several epoll sets).
pub const EXCLUSIVE: u32 = libc::EPOLLEXCLUSIVE as u32;

pub type Event = libc::epoll_event;

/// An epoll set owned by one thread.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    pub fn new() -> io::Result<Self> {
        // SAFETY: epoll_create1 takes no pointers.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor owned by nobody else.
        Ok(Self { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` lives across the call; the kernel copies it.
        let rc = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    pub fn add(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, events)
    }

    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    pub fn modify(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, events)
    }

    /// Waits up to `timeout_ms`; returns how many entries of `events` were filled.
    pub fn wait(&self, events: &mut [Event], timeout_ms: i32) -> io::Result<usize> {
        let max = events.len().min(i32::MAX as usize) as i32;
        // SAFETY: the kernel writes at most `max` entries into `events`.
        let n =
            unsafe { libc::epoll_wait(self.fd.as_raw_fd(), events.as_mut_ptr(), max, timeout_ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted { Ok(0) } else { Err(e) };
        }
        Ok(n as usize)
    }
}

impl Epoll {
    /// Waits up to `timeout` with nanosecond resolution (epoll_pwait2, Linux 5.11), so an
    /// open-loop schedule is kept to well under a millisecond; on older kernels it falls back to
    /// epoll_wait with the timeout rounded up to whole milliseconds.
    pub fn wait_for(
        &self,
        events: &mut [Event],
        timeout: std::time::Duration,
    ) -> io::Result<usize> {
        let max = events.len().min(i32::MAX as usize) as i32;
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        // SAFETY: the kernel writes at most `max` entries into `events` and reads `ts`, both
        // alive across the call; a null sigmask means "leave the mask alone".
        let n = unsafe {
            libc::syscall(
                libc::SYS_epoll_pwait2,
                self.fd.as_raw_fd(),
                events.as_mut_ptr(),
                max,
                &ts as *const libc::timespec,
                std::ptr::null::<libc::sigset_t>(),
                0usize,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOSYS) => {
                    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
                    self.wait(events, ms)
                }
                Some(libc::EINTR) => Ok(0),
                _ => Err(e),
            };
        }
        Ok(n as usize)
    }
}

pub fn empty_event() -> Event {
    libc::epoll_event { events: 0, u64: 0 }
}
