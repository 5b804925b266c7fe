//! The epoll loop of a server worker: listeners level-triggered (nginx's `EPOLLEXCLUSIVE` in
//! the exclusive accept mode), connections registered once, edge-triggered both ways, read
//! until a short read, written until the socket takes no more or the turn's budget is spent.

use std::io;
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use qpslab_sys::epoll::{self as poll, Epoll};
use qpslab_sys::net::AcceptError;
use socket2::Socket;

use super::quic::Quic;
use super::session::{AcceptGate, AfterOutput, Phase, Session};
use super::transport::{Got, Sent, Transport};
use super::Shared;
use super::{
    ms_until, refresh_date, shared, WorkerCounters, WorkerStats, ACCEPT_BATCH, ACCEPT_PAUSE, DRAIN,
    FLUSH_BUDGET, LISTENER, QUIC, READ_CHUNK, TICK,
};
use crate::config::ServeConfig;
use qpslab_quic::udp::QuicCounts;

/// A connection slot: the socket, its readiness, and its session.
#[derive(Debug, Default)]
struct Conn {
    sock: Option<TcpStream>,
    s: Session,
    /// Edge-triggered readiness: data may be waiting (cleared by a short read or EAGAIN).
    readable: bool,
    /// Used its write budget; waits in the worker's yielded list for its next turn.
    yielded: bool,
    /// The peer shut down its writing side: read on to EOF instead of stopping at a short read.
    peer_closed: bool,
    /// Plain or TLS: what moves over `sock` for the session.
    t: Transport,
}

pub(crate) struct Worker<'a> {
    sh: Shared<'a>,
    listeners: &'a [Socket],
    stop: &'a AtomicBool,
    stats: &'a WorkerStats,
    epoll: Epoll,
    conns: Vec<Conn>,
    free: Vec<usize>,
    open: usize,
    date_secs: u64,
    gate: AcceptGate,
    draining_since: Option<Instant>,
    /// Connections that used their write budget, to be driven again after this batch; the
    /// second vector keeps the first one's capacity across batches.
    yielded: Vec<(usize, u32)>,
    yielded_next: Vec<(usize, u32)>,
    /// HTTPS: records read at a time, and the plaintext they are decrypted into.
    records: Vec<u8>,
    plain: Vec<u8>,
    /// HTTP/3: a QUIC endpoint per UDP socket (one per listen address).
    quic: Vec<Quic>,
    /// Taken once per epoll batch: deadlines need no finer clock, and it saves a clock read
    /// per request.
    now: Instant,
}

fn token(idx: usize, gen: u32) -> u64 {
    (u64::from(gen) << 32) | idx as u64
}

impl<'a> Worker<'a> {
    pub(crate) fn new(
        cfg: &'a ServeConfig,
        listeners: &'a [Socket],
        stop: &'a AtomicBool,
        stats: &'a WorkerStats,
        quic: Vec<Quic>,
    ) -> io::Result<Self> {
        let (sh, date_secs) = shared(cfg);
        let (records, plain) = Transport::buffers(cfg);
        let mut w = Self {
            sh,
            listeners,
            stop,
            stats,
            epoll: Epoll::new()?,
            conns: Vec::new(),
            free: Vec::new(),
            open: 0,
            date_secs,
            gate: AcceptGate::default(),
            draining_since: None,
            now: Instant::now(),
            yielded: Vec::new(),
            yielded_next: Vec::new(),
            records,
            plain,
            quic,
        };
        for (i, q) in w.quic.iter().enumerate() {
            w.epoll.add(q.fd(), LISTENER | QUIC | i as u64, poll::IN)?;
        }
        w.set_accepting(true)?;
        Ok(w)
    }

    pub(crate) fn run(mut self) -> io::Result<WorkerCounters> {
        let mut events = vec![poll::empty_event(); 512];
        let mut now = Instant::now();
        self.now = now;
        let mut next_tick = now + TICK;
        loop {
            let mut wake = self.sh.wake(next_tick);
            for q in &self.quic {
                wake = q.wake().map_or(wake, |t| wake.min(t));
            }
            let timeout = if self.yielded.is_empty() { ms_until(now, wake) } else { 0 };
            let n = self.epoll.wait(&mut events, timeout)?;
            now = Instant::now();
            self.now = now;
            for ev in &events[..n] {
                let (token, flags) = (ev.u64, ev.events);
                if token & (LISTENER | QUIC) == LISTENER | QUIC {
                    if let Some(q) = self.quic.get_mut((token & !(LISTENER | QUIC)) as usize) {
                        q.readable(&mut self.sh, now);
                    }
                } else if token & LISTENER != 0 {
                    self.accept((token & !LISTENER) as usize);
                } else {
                    self.on_event(token, flags);
                }
            }
            self.resume_yielded();
            for q in &mut self.quic {
                q.run(&mut self.sh, now);
            }
            self.fire_delays(now);
            if now >= next_tick {
                self.on_tick(now);
                next_tick = now + TICK;
            }
            if let Some(since) = self.draining_since {
                if self.open + self.quic_open() == 0 || now.duration_since(since) >= DRAIN {
                    break;
                }
            }
        }
        for idx in 0..self.conns.len() {
            self.close(idx);
        }
        let mut quic = None::<QuicCounts>;
        for q in &mut self.quic {
            q.close_all(now);
            quic.get_or_insert_default().merge(&q.counts());
        }
        self.sh.counters.publish(self.stats, self.open);
        Ok(WorkerCounters { quic, ..self.sh.counters.final_counts() })
    }

    fn on_event(&mut self, token: u64, flags: u32) {
        let idx = (token & 0xffff_ffff) as usize;
        let gen = (token >> 32) as u32;
        let live = |w: &Self| w.conns.get(idx).is_some_and(|c| c.s.gen == gen && c.sock.is_some());
        if !live(self) {
            return;
        }
        if flags & (poll::IN | poll::ERR | poll::RDHUP) != 0 {
            self.conns[idx].readable = true;
        }
        if flags & (poll::RDHUP | poll::ERR) != 0 {
            // Data and FIN can arrive in one edge: a short read is then not "drained".
            self.conns[idx].peer_closed = true;
        }
        let c = &self.conns[idx];
        if flags & poll::OUT != 0 && (c.s.has_output() || c.t.wants_write()) {
            self.flush(idx);
        }
        if live(self) {
            self.drive(idx);
        }
    }

    /// Reads what the socket has (decrypted, over TLS), while input may be taken. Returns the
    /// bytes read; closes the connection on error.
    fn read_input(&mut self, idx: usize) -> usize {
        let limits = &self.sh.cfg.settings.limits;
        let max_head = limits.max_request_line + limits.max_header_bytes;
        let mut total = 0;
        loop {
            let c = &mut self.conns[idx];
            if c.sock.is_none() {
                return total;
            }
            if c.s.phase == Phase::Lingering {
                c.s.inbuf.clear();
            }
            // Never hold more than a maximal head plus a read: the parser rejects larger heads.
            // Readiness stays set, so the rest is read once the buffer is consumed.
            if c.s.inbuf.len() > max_head + READ_CHUNK {
                return total;
            }
            let Some(sock) = c.sock.as_ref() else { return total };
            let bufs = (&mut self.records[..], &mut self.plain[..]);
            match c.t.recv(sock, &mut c.s, &mut self.sh.pool, bufs, c.peer_closed) {
                Got::Bytes { n, drained } => {
                    total += n;
                    if drained {
                        c.readable = false;
                        return total;
                    }
                }
                Got::Again => {}
                Got::Eof => {
                    c.s.eof = true;
                    c.readable = false;
                    return total;
                }
                Got::Blocked => {
                    c.readable = false;
                    return total;
                }
                Got::Failed { tls } => {
                    self.sh.counters.tls_failures += u64::from(tls);
                    if tls {
                        // Its alert was sent; no close_notify follows it.
                        c.t = Transport::Plain;
                    }
                    self.close(idx);
                    return total;
                }
            }
        }
    }

    /// Reads, parses, answers and writes until the connection waits for the network; closes it
    /// once the peer has closed and everything buffered was answered.
    fn drive(&mut self, idx: usize) {
        loop {
            let c = &self.conns[idx];
            if c.sock.is_none() {
                return;
            }
            if c.s.phase == Phase::Lingering {
                if c.readable {
                    self.read_input(idx);
                    self.conns[idx].s.inbuf.clear();
                }
                break;
            }
            let mut progress = 0;
            if c.readable && !c.s.paused(0) {
                progress += self.read_input(idx);
            }
            let now = self.now;
            let c = &mut self.conns[idx];
            progress += c.s.consume(&mut self.sh, idx, 0, now);
            self.flush(idx);
            let c = &self.conns[idx];
            if progress == 0 || c.sock.is_none() || c.s.paused(0) {
                break;
            }
            if !c.readable && c.s.inbuf.is_empty() {
                break;
            }
        }
        let c = &mut self.conns[idx];
        if c.sock.is_some() && c.s.finished(0) {
            self.close(idx);
        } else if c.sock.is_some() {
            // Waiting for the next request: its buffers go back to the pool.
            if c.s.release_if_idle(&mut self.sh, None) {
                c.t.release_idle(&mut self.sh.pool);
            }
        }
    }

    /// Writes pending output (and pieces of a streamed body); closes or lingers when done.
    fn flush(&mut self, idx: usize) {
        let (now, cfg) = (self.now, self.sh.cfg);
        let c = &mut self.conns[idx];
        let Some(sock) = c.sock.as_ref() else { return };
        if c.yielded {
            return;
        }
        match c.t.send(sock, &mut c.s, FLUSH_BUDGET, now, cfg) {
            Sent::Done => {}
            Sent::Blocked => {
                if c.s.has_output() {
                    c.s.write_blocked(now, cfg);
                }
                return;
            }
            Sent::Budget => {
                c.yielded = true;
                self.yielded.push((idx, c.s.gen));
                return;
            }
            Sent::Failed => return self.close(idx),
        }
        match c.s.output_done(now, cfg) {
            AfterOutput::Keep => {}
            AfterOutput::Close => self.close(idx),
            AfterOutput::Linger => {
                if c.t.lingering() {
                    c.t.send_last(sock);
                }
                let _ = sock.shutdown(Shutdown::Write);
            }
        }
    }

    /// Gives connections that yielded their turn another one.
    fn resume_yielded(&mut self) {
        std::mem::swap(&mut self.yielded, &mut self.yielded_next);
        let mut list = std::mem::take(&mut self.yielded_next);
        for &(idx, gen) in &list {
            if self.conns[idx].s.gen == gen && self.conns[idx].sock.is_some() {
                self.conns[idx].yielded = false;
                self.flush(idx);
                self.drive(idx);
            }
        }
        list.clear();
        self.yielded_next = list;
    }

    fn fire_delays(&mut self, now: Instant) {
        while let Some((idx, gen)) = self.sh.next_due(now) {
            let c = &mut self.conns[idx];
            if c.s.gen != gen || c.sock.is_none() {
                continue;
            }
            if c.s.fire_delay(&mut self.sh, idx, now) {
                self.drive(idx);
            }
        }
    }

    fn on_tick(&mut self, now: Instant) {
        refresh_date(&mut self.sh, &mut self.date_secs);
        let max = self.sh.cfg.settings.max_conns;
        if self.gate.reopen(now, self.draining_since.is_some(), self.open, max) {
            let _ = self.set_accepting(true);
        }
        for idx in 0..self.conns.len() {
            let c = &self.conns[idx];
            if c.sock.is_none() {
                continue;
            }
            if let Some(timeout) = c.s.expired(now) {
                if timeout {
                    self.sh.counters.timeouts += 1;
                }
                self.close(idx);
            }
        }
        if self.draining_since.is_none() && self.stop.load(Ordering::Relaxed) {
            self.start_draining(now);
        }
        self.sh.counters.publish(self.stats, self.open + self.quic_open());
        if !self.quic.is_empty() {
            super::Counters::publish_quic(self.stats, &self.quic);
        }
    }

    /// QUIC connections open on this worker's endpoints.
    fn quic_open(&self) -> usize {
        self.quic.iter().map(|q| q.open).sum()
    }

    /// Stop accepting; close idle connections; let the others finish their responses.
    fn start_draining(&mut self, now: Instant) {
        self.draining_since = Some(now);
        self.sh.draining = true;
        let _ = self.set_accepting(false);
        for q in &mut self.quic {
            q.drain();
        }
        for idx in 0..self.conns.len() {
            let c = &mut self.conns[idx];
            if c.sock.is_some() {
                if c.s.drain() {
                    // What drain added (an HTTP/2 GOAWAY) goes out now.
                    self.flush(idx);
                } else {
                    self.close(idx);
                }
            }
        }
    }

    fn close(&mut self, idx: usize) {
        let c = &mut self.conns[idx];
        if let Some(sock) = c.sock.as_ref() {
            // An orderly TLS close (best effort: the socket may not take it).
            if c.t.closing() {
                c.t.send_last(sock);
            }
        }
        c.t = Transport::Plain;
        if c.sock.take().is_none() {
            return;
        }
        c.s.reset(&mut self.sh.pool);
        c.readable = false;
        c.yielded = false;
        c.peer_closed = false;
        self.open -= 1;
        self.free.push(idx);
    }

    fn set_accepting(&mut self, on: bool) -> io::Result<()> {
        if self.gate.on == on {
            return Ok(());
        }
        for (i, l) in self.listeners.iter().enumerate() {
            let fd = l.as_raw_fd();
            if on {
                let exclusive = self.sh.cfg.accept == crate::config::AcceptMode::Exclusive;
                let flags = poll::IN | if exclusive { poll::EXCLUSIVE } else { 0 };
                self.epoll.add(fd, LISTENER | i as u64, flags)?;
            } else {
                self.epoll.delete(fd)?;
            }
        }
        self.gate.on = on;
        Ok(())
    }

    fn accept(&mut self, li: usize) {
        let Some(listener) = self.listeners.get(li) else { return };
        for _ in 0..ACCEPT_BATCH {
            if self.open >= self.sh.cfg.settings.max_conns {
                // Leave further connections in the kernel's queue (or to other workers) until
                // a slot frees up.
                let _ = self.set_accepting(false);
                let msg = "--max-conns reached; not accepting until a connection closes";
                self.gate.log(self.now, msg);
                return;
            }
            let sock = match qpslab_sys::net::accept(listener) {
                Ok(sock) => sock,
                Err((AcceptError::Empty, _)) => return,
                Err((AcceptError::Retry, _)) => continue,
                Err((AcceptError::OutOfResources, e)) => {
                    self.sh.counters.accept_errors += 1;
                    let _ = self.set_accepting(false);
                    self.gate.resume_at = Some(self.now + ACCEPT_PAUSE);
                    self.gate.log(
                        self.now,
                        &format!(
                            "accept: {e}; pausing accepts for 100 ms, open connections are served"
                        ),
                    );
                    return;
                }
                Err((AcceptError::Other, _)) => {
                    self.sh.counters.accept_errors += 1;
                    return;
                }
            };
            // TCP_NODELAY comes from the listener.
            self.sh.counters.accepted += 1;
            self.add_conn(sock);
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
        let token = token(idx, self.conns[idx].s.gen);
        // Registered once, edge-triggered for both directions (as nginx does): no epoll_ctl per
        // request, and no re-poll of every ready socket on each epoll_wait.
        let events = poll::IN | poll::OUT | poll::RDHUP | poll::EDGE;
        if self.epoll.add(sock.as_raw_fd(), token, events).is_err() {
            self.free.push(idx);
            return;
        }
        let (now, cfg) = (self.now, self.sh.cfg);
        let c = &mut self.conns[idx];
        let Some(t) = Transport::accept(cfg) else {
            self.free.push(idx);
            return;
        };
        c.t = t;
        c.sock = Some(sock);
        c.readable = false;
        // A connection that sends nothing is closed at the header deadline.
        c.s.open(now, cfg);
        self.open += 1;
    }
}
