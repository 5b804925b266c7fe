//! The loop a load thread runs, as chosen for the run: epoll or io_uring, behind the one
//! interface of [`super::io`].

use std::io;
use std::time::Duration;

use qpslab_sys::uring::Engine;

use super::epoll::EpollLoop;
use super::io::{Handler, Loop};
use super::uring::UringLoop;

/// The thread's loop, as chosen for the run.
#[derive(Debug)]
pub(super) enum Io {
    Epoll(EpollLoop),
    Uring(UringLoop),
}

impl Io {
    /// The loop of a thread with `conns` connections.
    pub(super) fn new(engine: Engine, conns: usize) -> io::Result<Io> {
        Ok(match engine {
            Engine::Epoll => Io::Epoll(EpollLoop::new(conns)?),
            Engine::Uring => Io::Uring(UringLoop::new(conns)?),
        })
    }
}

impl Loop for Io {
    fn wait<H: Handler>(&mut self, timeout: Duration, h: &mut H) -> io::Result<usize> {
        match self {
            Io::Epoll(l) => l.wait(timeout, h),
            Io::Uring(l) => l.wait(timeout, h),
        }
    }

    fn settle<H: Handler>(&mut self, h: &mut H) {
        match self {
            Io::Epoll(l) => l.settle(h),
            Io::Uring(l) => l.settle(h),
        }
    }
}
