//! The accept path of a worker: taking connections from its listeners, the per-worker
//! connection cap, and the pause after EMFILE/ENFILE.

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::Duration;

use qpslab_sys::epoll as poll;
use qpslab_sys::net::AcceptError;

use super::{
    token, Conn, Deadline, Phase, PhaseCell, Worker, ACCEPT_BATCH, ACCEPT_PAUSE, LISTENER,
};

impl Worker<'_> {
    pub(super) fn set_accepting(&mut self, on: bool) -> io::Result<()> {
        if self.accepting == on {
            return Ok(());
        }
        for (i, l) in self.listeners.iter().enumerate() {
            let fd = l.as_raw_fd();
            if on {
                let exclusive = self.cfg.accept == crate::config::AcceptMode::Exclusive;
                let flags = poll::IN | if exclusive { poll::EXCLUSIVE } else { 0 };
                self.epoll.add(fd, LISTENER | i as u64, flags)?;
            } else {
                self.epoll.delete(fd)?;
            }
        }
        self.accepting = on;
        Ok(())
    }

    pub(super) fn accept(&mut self, li: usize) {
        let Some(listener) = self.listeners.get(li) else { return };
        for _ in 0..ACCEPT_BATCH {
            if self.open >= self.cfg.settings.max_conns {
                // Leave further connections in the kernel's queue (or to other workers) until
                // a slot frees up.
                let _ = self.set_accepting(false);
                self.log_accept("--max-conns reached; not accepting until a connection closes");
                return;
            }
            let sock = match qpslab_sys::net::accept(listener) {
                Ok(sock) => sock,
                Err((AcceptError::Empty, _)) => return,
                Err((AcceptError::Retry, _)) => continue,
                Err((AcceptError::OutOfResources, e)) => {
                    self.counters.accept_errors += 1;
                    let _ = self.set_accepting(false);
                    self.accept_resume = Some(self.now + ACCEPT_PAUSE);
                    self.log_accept(&format!(
                        "accept: {e}; pausing accepts for 100 ms, open connections are served"
                    ));
                    return;
                }
                Err((AcceptError::Other, _)) => {
                    self.counters.accept_errors += 1;
                    return;
                }
            };
            let _ = sock.set_nodelay(true);
            self.counters.accepted += 1;
            self.add_conn(sock);
        }
    }

    /// At most one accept message per second, so a descriptor shortage cannot flood stderr.
    fn log_accept(&mut self, msg: &str) {
        let now = self.now;
        if self.last_accept_log.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1)) {
            self.last_accept_log = Some(now);
            eprintln!("qpslab serve: {msg}");
        }
    }

    fn add_conn(&mut self, sock: TcpStream) {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.conns.push(Conn::default());
                self.conns.len() - 1
            }
        };
        let token = token(idx, self.conns[idx].gen);
        // Registered once, edge-triggered for both directions (as nginx does): no epoll_ctl per
        // request, and no re-poll of every ready socket on each epoll_wait.
        let events = poll::IN | poll::OUT | poll::RDHUP | poll::EDGE;
        if self.epoll.add(sock.as_raw_fd(), token, events).is_err() {
            self.free.push(idx);
            return;
        }
        let now = self.now;
        let c = &mut self.conns[idx];
        c.sock = Some(sock);
        c.phase = PhaseCell(Phase::Head);
        c.readable = false;
        // A connection that sends nothing is closed at the header deadline.
        c.deadline = Some((now + self.cfg.settings.header_timeout, Deadline::Header));
        self.open += 1;
    }
}
