//! The io_uring loop of a server worker: one ring per worker (single issuer, deferred task
//! work), a multishot accept per listener, a multishot receive per connection into the ring's
//! provided buffers, and one send per connection at a time of everything its session produced;
//! every request of a turn goes to the kernel in the one `io_uring_enter` that also waits for
//! the next completions. The protocol is the epoll loop's: [`super::session`].

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use qpslab_quic::udp::QuicCounts;
use qpslab_sys::uring::{Completion, Failure, Op, RingOptions, Sock, Submit, Uring};
use socket2::Socket;

use super::quic::Quic;
use super::session::{AcceptGate, AfterOutput, Phase, Session};
use super::transport::Transport;
use super::Shared;
use super::{
    refresh_date, shared, WorkerCounters, WorkerStats, ACCEPT_PAUSE, DRAIN, FLUSH_BUDGET,
    READ_CHUNK, TICK,
};
use crate::config::ServeConfig;

/// Connection slots fit in 22 bits of a token, their generation in the other 10: a late
/// completion of a closed connection is told apart from the slot's next one.
const SLOT_BITS: u32 = 22;
const SLOT_MASK: u32 = (1 << SLOT_BITS) - 1;

/// Direct descriptor slots beyond `--max-conns`: connections closed but not yet gone from the
/// table, and accepts completed in the turn that reached the limit.
const DIRECT_ROOM: u64 = 1024;

/// The slots of a table held below `--max-conns` + [`DIRECT_ROOM`] (by the descriptor limit)
/// that are kept for closes under way: a 32nd of it (at least 64, or a quarter of a smaller
/// table), so that a 20,000-slot table still keeps 19,375 connections.
fn room_in(table: u32) -> u64 {
    let t = u64::from(table);
    let floor = if t >= 256 { 64 } else { t / 4 };
    (t / 32).max(floor).min(DIRECT_ROOM)
}

fn token(slot: usize, gen: u32) -> u32 {
    (gen << SLOT_BITS) | (slot as u32 & SLOT_MASK)
}

/// A connection slot.
#[derive(Debug, Default)]
struct Conn {
    /// The socket: a registered (direct) descriptor of the ring, or a plain one.
    fd: Option<Sock>,
    s: Session,
    /// The multishot receive is armed.
    receiving: bool,
    /// Input is not taken until the session has caught up (too much buffered).
    recv_paused: bool,
    /// Bytes of the send in flight (0: none); one send per connection at a time keeps the
    /// responses in order.
    in_flight: usize,
    /// An empty buffer that takes the session's output buffer's place during a send.
    spare: Vec<u8>,
    /// Plain or TLS: what the receives and sends carry for the session.
    t: Transport,
    /// HTTPS, lingering: the close_notify is on its way; the writing side is shut down once
    /// it was sent.
    shut_after_send: bool,
    /// A shutdown of the writing side is in flight. The ring runs it on a worker thread and
    /// looks up the registered descriptor only then: closing the descriptor before it ran
    /// would let it shut whichever new connection was accepted into the freed table slot.
    shutting: bool,
}

struct State<'a> {
    sh: Shared<'a>,
    listeners: &'a [Socket],
    stop: &'a AtomicBool,
    stats: &'a WorkerStats,
    conns: Vec<Conn>,
    free: Vec<usize>,
    /// Descriptors whose close waits for their shutdown in flight, by the shutdown's token.
    close_after_shutdown: Vec<(u32, Sock)>,
    open: usize,
    /// Connections this worker keeps: `--max-conns`, or fewer when its table of registered
    /// descriptors is smaller than that plus [`DIRECT_ROOM`].
    max_open: usize,
    /// Slots of the registered descriptor table (0: connections are plain descriptors).
    table: u32,
    date_secs: u64,
    gate: AcceptGate,
    draining_since: Option<Instant>,
    now: Instant,
    /// HTTPS: the plaintext records are decrypted into.
    plain: Vec<u8>,
    /// HTTP/3: a QUIC endpoint per UDP socket, each told by a multishot poll when datagrams
    /// wait (and read in batches with recvmmsg, as on the epoll loop).
    quic: Vec<Quic>,
}

pub(crate) struct Worker<'a> {
    ring: Uring,
    st: State<'a>,
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
        // Direct descriptors for the connections this worker keeps, and room for those whose
        // close is still on its way (a full table would drop a connection it accepted), within
        // the descriptor limit the kernel holds the table to.
        let (soft, _) = qpslab_sys::nofile::limits();
        let direct = (cfg.settings.max_conns as u64 + DIRECT_ROOM).min(soft).min(1 << 20) as u32;
        let ring = Uring::new(&RingOptions {
            entries: 1024,
            // A request on every connection may complete in one turn.
            completions: direct.saturating_mul(2),
            buffers: 2048,
            buffer_size: READ_CHUNK,
            // Grown as receives find none: a worker with few busy connections touches only
            // what they need (from 64 KiB), not the 8 MiB of all 2,048.
            start_buffers: 16,
            sqpoll: cfg.sqpoll,
            direct,
            // Each HTTP/3 socket's datagrams (and GRO batches) land in these.
            datagrams: if quic.is_empty() { 0 } else { 256 },
        })?;
        let table = if ring.direct() { direct } else { 0 };
        let max_open = match table {
            0 => cfg.settings.max_conns,
            t => cfg.settings.max_conns.min(u64::from(t).saturating_sub(room_in(t)) as usize),
        };
        let mut w = Worker {
            ring,
            st: State {
                sh,
                listeners,
                stop,
                stats,
                conns: Vec::new(),
                free: Vec::new(),
                close_after_shutdown: Vec::new(),
                open: 0,
                max_open,
                table,
                date_secs,
                gate: AcceptGate::default(),
                draining_since: None,
                now: Instant::now(),
                plain: Transport::buffers(cfg).1,
                quic,
            },
        };
        let st = &mut w.st;
        w.ring.queue(|sub| {
            st.set_accepting(true, sub);
            for (i, q) in st.quic.iter_mut().enumerate() {
                q.arm(sub, i as u32);
            }
        });
        Ok(w)
    }

    pub(crate) fn run(mut self) -> io::Result<WorkerCounters> {
        let mut next_tick = Instant::now() + TICK;
        loop {
            let st = &mut self.st;
            let mut wake = st.sh.wake(next_tick);
            for q in &st.quic {
                wake = q.wake().map_or(wake, |t| wake.min(t));
            }
            let timeout = wake.saturating_duration_since(st.now);
            // One clock read per turn, as the epoll loop reads it once per batch: deadlines
            // need no finer clock.
            let mut clock_read = false;
            self.ring.turn(timeout, |c, sub| {
                if !clock_read {
                    st.now = Instant::now();
                    clock_read = true;
                }
                st.on_completion(c, sub);
            })?;
            let now = if clock_read { st.now } else { Instant::now() };
            st.now = now;
            for q in &mut st.quic {
                q.run(&mut st.sh, now);
                if let Some(e) = q.failed.take() {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("io_uring cannot receive datagrams here ({e}): use --io epoll"),
                    ));
                }
            }
            self.ring.queue(|sub| {
                for q in &mut st.quic {
                    q.flush_to(sub);
                }
                st.fire_delays(now, sub);
                if now >= next_tick {
                    st.on_tick(now, sub);
                    next_tick = now + TICK;
                }
            });
            if let Some(since) = st.draining_since {
                let quic: usize = st.quic.iter().map(|q| q.open).sum();
                if st.open + quic == 0 || now.duration_since(since) >= DRAIN {
                    break;
                }
            }
        }
        let st = &mut self.st;
        self.ring.queue(|sub| {
            st.set_accepting(false, sub);
            for slot in 0..st.conns.len() {
                st.close(slot, sub);
            }
        });
        // Submits the closes.
        self.ring.turn(Duration::ZERO, |_, _| {})?;
        let now = Instant::now();
        let mut quic = None::<QuicCounts>;
        for q in &mut st.quic {
            q.close_all(now);
            quic.get_or_insert_default().merge(&q.counts());
        }
        st.sh.counters.publish(st.stats, st.open);
        Ok(WorkerCounters { quic, ..st.sh.counters.final_counts() })
    }
}

impl State<'_> {
    fn on_completion(&mut self, c: Completion<'_>, sub: &mut Submit<'_>) {
        match c.op {
            Op::Accept => self.on_accept(c, sub),
            Op::Recv => self.on_recv(&c, sub),
            Op::Send => self.on_send(c, sub),
            Op::Shutdown => self.on_shutdown(c.token, sub),
            Op::Datagram | Op::SendTo => {
                let (_, i) = qpslab_quic::udp::Udp::socket_of(c.token);
                if let Some(q) = self.quic.get_mut(i as usize) {
                    q.on_completion(&c, sub, &mut self.sh, self.now);
                }
            }
            Op::Cancel | Op::Close | Op::Timer | Op::Connect => {}
        }
    }

    /// A shutdown ran: the connection's descriptor may be closed now, if it was waiting.
    fn on_shutdown(&mut self, token: u32, sub: &mut Submit<'_>) {
        if let Some(slot) = self.live(token) {
            self.conns[slot].shutting = false;
        }
        if let Some(i) = self.close_after_shutdown.iter().position(|(t, _)| *t == token) {
            let (t, fd) = self.close_after_shutdown.swap_remove(i);
            sub.close(fd, t);
        }
    }

    /// The live connection a token names, if it is still the one the request was for.
    fn live(&self, token: u32) -> Option<usize> {
        let slot = (token & SLOT_MASK) as usize;
        let c = self.conns.get(slot)?;
        (c.fd.is_some() && (c.s.gen & ((1 << (32 - SLOT_BITS)) - 1)) == token >> SLOT_BITS)
            .then_some(slot)
    }

    fn on_accept(&mut self, c: Completion<'_>, sub: &mut Submit<'_>) {
        if let Some(fd) = c.sock {
            self.sh.counters.accepted += 1;
            if self.sh.draining {
                return;
            }
            self.add_conn(fd, sub);
            if self.open >= self.max_open && self.gate.on {
                self.set_accepting(false, sub);
                let msg = self.full_message();
                self.gate.log(self.now, &msg);
            }
        } else {
            match c.failure() {
                Some(Failure::OutOfResources(e)) => {
                    self.sh.counters.accept_errors += 1;
                    if self.gate.on {
                        self.set_accepting(false, sub);
                        self.gate.resume_at = Some(self.now + ACCEPT_PAUSE);
                        let cause = accept_shortage(&e, self.table);
                        self.gate.log(
                            self.now,
                            &format!(
                                "accept: {cause}; pausing accepts for 100 ms, open connections \
                                 are served"
                            ),
                        );
                    }
                }
                Some(Failure::Other(_)) => self.sh.counters.accept_errors += 1,
                _ => {}
            }
        }
        // A multishot accept that ended by itself is armed again.
        if !c.more && self.gate.on {
            if let Some(l) = self.listeners.get(c.token as usize) {
                sub.accept_multi(l.as_raw_fd(), c.token);
            }
        }
    }

    fn on_recv(&mut self, c: &Completion<'_>, sub: &mut Submit<'_>) {
        let Some(slot) = self.live(c.token) else { return };
        let conn = &mut self.conns[slot];
        if !c.more {
            conn.receiving = false;
        }
        match c.failure() {
            None if c.result > 0 => {
                if conn.s.phase != Phase::Lingering {
                    let limits = &self.sh.cfg.settings.limits;
                    let max_head = limits.max_request_line + limits.max_header_bytes;
                    conn.s.ensure_input(&mut self.sh.pool);
                    if conn.t.input(&mut conn.s, c.data, &mut self.plain).is_err() {
                        self.sh.counters.tls_failures += 1;
                        // The alert rustls queued tells the client why (and no close_notify
                        // follows it).
                        let mut t = std::mem::take(&mut conn.t);
                        if let (Some(fd), 0) = (&conn.fd, conn.in_flight) {
                            sub.send(fd.target(), t.take_records(Vec::new()), 0, c.token);
                        }
                        return self.close(slot, sub);
                    }
                    // More input than a maximal head while the session cannot take it: stop
                    // receiving until it catches up.
                    if conn.s.inbuf.len() > max_head + READ_CHUNK && conn.receiving {
                        sub.cancel(Op::Recv, c.token);
                        conn.receiving = false;
                        conn.recv_paused = true;
                    }
                }
                self.drive(slot, sub);
            }
            None => {
                conn.s.eof = true;
                if conn.s.phase == Phase::Lingering {
                    self.close(slot, sub);
                } else {
                    self.drive(slot, sub);
                }
            }
            // The provided buffers ran out: they come back at the end of this turn.
            Some(Failure::NoBuffers) => self.drive(slot, sub),
            Some(Failure::Cancelled | Failure::Retry) => self.rearm(slot, sub),
            Some(Failure::OutOfResources(_) | Failure::Other(_)) => self.close(slot, sub),
        }
    }

    fn on_send(&mut self, c: Completion<'_>, sub: &mut Submit<'_>) {
        let Some(slot) = self.live(c.token) else { return };
        let (now, cfg) = (self.now, self.sh.cfg);
        let conn = &mut self.conns[slot];
        let Some((mut buf, from)) = c.sent else { return };
        if c.result < 0 {
            conn.in_flight = 0;
            return self.close(slot, sub);
        }
        let end = from + c.result as usize;
        conn.s.progressed(now, cfg);
        if end < buf.len() {
            // A partial send: the rest, from where it stopped.
            conn.in_flight = buf.len() - end;
            conn.s.write_blocked(now, cfg);
            if let Some(fd) = &conn.fd {
                sub.send(fd.target(), buf, end, c.token);
            }
            return;
        }
        conn.in_flight = 0;
        buf.clear();
        conn.spare = buf;
        if std::mem::take(&mut conn.shut_after_send) {
            // The close_notify of a lingering connection went out.
            if let Some(fd) = &conn.fd {
                conn.shutting = true;
                sub.shutdown_write(fd.target(), c.token);
            }
            return;
        }
        if !conn.s.inbuf.is_empty() || conn.recv_paused {
            // Requests waited (pipelined, or input was paused) while this was sent.
            return self.drive(slot, sub);
        }
        // Nothing new to parse: the next output (a streamed body's next piece, records still
        // to send), or what follows the last (keep, close, or linger: shut the write side and
        // drain the input, which may have been paused, until EOF).
        self.send(slot, sub);
        let conn = &self.conns[slot];
        if conn.fd.is_some() && conn.s.finished(conn.in_flight) {
            return self.close(slot, sub);
        }
        if conn.s.phase == Phase::Lingering {
            return self.rearm(slot, sub);
        }
        self.release_if_idle(slot);
    }

    /// Parses and answers what arrived, sends what is ready, closes when finished.
    fn drive(&mut self, slot: usize, sub: &mut Submit<'_>) {
        let now = self.now;
        let conn = &mut self.conns[slot];
        if conn.fd.is_none() {
            return;
        }
        if conn.s.phase == Phase::Lingering {
            // Input is drained and dropped until EOF or the linger deadline.
            conn.s.inbuf.clear();
            return self.rearm(slot, sub);
        }
        conn.s.consume(&mut self.sh, slot, conn.in_flight, now);
        self.send(slot, sub);
        let conn = &mut self.conns[slot];
        if conn.fd.is_some() && conn.s.finished(conn.in_flight) {
            return self.close(slot, sub);
        }
        self.rearm(slot, sub);
        self.release_if_idle(slot);
    }

    /// A connection waiting for its next request gives its buffers back to the pool.
    fn release_if_idle(&mut self, slot: usize) {
        let conn = &mut self.conns[slot];
        if conn.fd.is_some()
            && conn.in_flight == 0
            && conn.s.release_if_idle(&mut self.sh, Some(&mut conn.spare))
        {
            conn.t.release_idle(&mut self.sh.pool);
        }
    }

    /// Receives again once the session has caught up with its input.
    fn rearm(&mut self, slot: usize, sub: &mut Submit<'_>) {
        let conn = &mut self.conns[slot];
        if conn.receiving || conn.s.eof {
            return;
        }
        let caught_up = conn.s.inbuf.len() <= READ_CHUNK && !conn.s.paused(conn.in_flight);
        // A lingering connection drains its input whatever paused it (unread input at the
        // close would make the kernel reset the connection, and the client lose the answer).
        if conn.recv_paused && !caught_up && conn.s.phase != Phase::Lingering {
            return;
        }
        if let Some(fd) = &conn.fd {
            conn.recv_paused = false;
            conn.receiving = true;
            sub.recv_multi(fd.target(), token(slot, conn.s.gen));
        }
    }

    /// Sends the session's output (over TLS, the records it was sealed into), when no send is
    /// in flight; closes or lingers when done.
    fn send(&mut self, slot: usize, sub: &mut Submit<'_>) {
        let (now, cfg) = (self.now, self.sh.cfg);
        let conn = &mut self.conns[slot];
        if conn.in_flight > 0 {
            return;
        }
        let Some(fd) = conn.fd.as_ref().map(Sock::target) else { return };
        let t = token(slot, conn.s.gen);
        let out = conn.t.take_output(&mut conn.s, &mut conn.spare, FLUSH_BUDGET, now, cfg);
        if let Some((buf, from)) = out {
            conn.in_flight = buf.len() - from;
            return sub.send(fd, buf, from, t);
        }
        match conn.s.output_done(now, cfg) {
            AfterOutput::Keep => {}
            AfterOutput::Close => self.close(slot, sub),
            AfterOutput::Linger => {
                if conn.t.lingering() {
                    // The close_notify first, then the shutdown (when its send completes).
                    let buf = conn.t.take_records(std::mem::take(&mut conn.spare));
                    conn.in_flight = buf.len();
                    conn.shut_after_send = true;
                    sub.send(fd, buf, 0, t);
                } else {
                    conn.shutting = true;
                    sub.shutdown_write(fd, t);
                }
            }
        }
    }

    fn fire_delays(&mut self, now: Instant, sub: &mut Submit<'_>) {
        while let Some((slot, gen)) = self.sh.next_due(now) {
            let conn = &mut self.conns[slot];
            if conn.s.gen != gen || conn.fd.is_none() {
                continue;
            }
            if conn.s.fire_delay(&mut self.sh, slot, now) {
                self.drive(slot, sub);
            }
        }
    }

    /// Why the worker stopped accepting at [`State::max_open`] connections.
    fn full_message(&self) -> String {
        let max = self.sh.cfg.settings.max_conns;
        if self.max_open >= max {
            return "--max-conns reached; not accepting until a connection closes".into();
        }
        format!(
            "{} connections open fill this worker's table of registered descriptors ({} slots, \
             {} of them kept for closes under way; the kernel holds a table to the descriptor \
             limit, ulimit -n {}); not accepting until one closes: raise ulimit -n towards \
             --max-conns {max} + {DIRECT_ROOM}, or add workers (-w: a table each)",
            self.open,
            self.table,
            room_in(self.table),
            qpslab_sys::nofile::limits().0,
        )
    }

    fn on_tick(&mut self, now: Instant, sub: &mut Submit<'_>) {
        refresh_date(&mut self.sh, &mut self.date_secs);
        let max = self.max_open;
        if self.gate.reopen(now, self.draining_since.is_some(), self.open, max) {
            self.set_accepting(true, sub);
        }
        for slot in 0..self.conns.len() {
            let conn = &self.conns[slot];
            if conn.fd.is_none() {
                continue;
            }
            if let Some(timeout) = conn.s.expired(now) {
                if timeout {
                    self.sh.counters.timeouts += 1;
                }
                self.close(slot, sub);
            }
        }
        if self.draining_since.is_none() && self.stop.load(Ordering::Relaxed) {
            self.draining_since = Some(now);
            self.sh.draining = true;
            self.set_accepting(false, sub);
            for q in &mut self.quic {
                q.drain();
            }
            for slot in 0..self.conns.len() {
                let conn = &mut self.conns[slot];
                if conn.fd.is_none() {
                    continue;
                }
                if conn.s.drain() {
                    // What drain added (an HTTP/2 GOAWAY) goes out now (send waits for a
                    // send in flight).
                    self.send(slot, sub);
                } else if conn.in_flight == 0 {
                    self.close(slot, sub);
                }
            }
        }
        let quic: usize = self.quic.iter().map(|q| q.open).sum();
        self.sh.counters.publish(self.stats, self.open + quic);
        if !self.quic.is_empty() {
            super::Counters::publish_quic(self.stats, &self.quic);
        }
    }

    fn close(&mut self, slot: usize, sub: &mut Submit<'_>) {
        let conn = &mut self.conns[slot];
        let Some(fd) = conn.fd.take() else { return };
        let t = token(slot, conn.s.gen);
        if conn.receiving {
            sub.cancel(Op::Recv, t);
        }
        // An orderly TLS close (best effort, and never beside a send in flight, which it could
        // overtake). A send holds the descriptor until it completes.
        let mut transport = std::mem::take(&mut conn.t);
        if conn.in_flight == 0 && transport.closing() {
            sub.send(fd.target(), transport.take_records(Vec::new()), 0, t);
        }
        if std::mem::take(&mut conn.shutting) {
            self.close_after_shutdown.push((t, fd));
        } else {
            sub.close(fd, t);
        }
        conn.s.reset(&mut self.sh.pool);
        self.sh.pool.give_output(std::mem::take(&mut conn.spare));
        conn.receiving = false;
        conn.recv_paused = false;
        conn.in_flight = 0;
        conn.shut_after_send = false;
        self.open -= 1;
        self.free.push(slot);
    }

    fn set_accepting(&mut self, on: bool, sub: &mut Submit<'_>) {
        if self.gate.on == on {
            return;
        }
        for (i, l) in self.listeners.iter().enumerate() {
            if on {
                sub.accept_multi(l.as_raw_fd(), i as u32);
            } else {
                sub.cancel(Op::Accept, i as u32);
            }
        }
        self.gate.on = on;
    }

    /// A connection accepted (TCP_NODELAY comes from the listener).
    fn add_conn(&mut self, fd: Sock, sub: &mut Submit<'_>) {
        let slot = match self.free.pop() {
            Some(i) => i,
            None => {
                self.conns.push(Conn::default());
                self.conns.len() - 1
            }
        };
        let (now, cfg) = (self.now, self.sh.cfg);
        let Some(transport) = Transport::accept(cfg) else {
            self.free.push(slot);
            return sub.close(fd, 0);
        };
        let conn = &mut self.conns[slot];
        conn.t = transport;
        // A connection that sends nothing is closed at the header deadline.
        conn.s.open(now, cfg);
        sub.recv_multi(fd.target(), token(slot, conn.s.gen));
        conn.receiving = true;
        conn.fd = Some(fd);
        self.open += 1;
    }
}

/// An accept that failed for want of a descriptor, said as what is full: with registered
/// descriptors ENFILE means this worker's table, not the system's file table.
fn accept_shortage(e: &io::Error, table: u32) -> String {
    if table > 0 && qpslab_sys::uring::is_enfile(e) {
        return format!(
            "this worker's table of registered descriptors is full ({table} slots, held to the \
             descriptor limit, ulimit -n {}; ENFILE here is not the system's file table): \
             raise ulimit -n, lower --max-conns, or add workers (-w: a table each)",
            qpslab_sys::nofile::limits().0
        );
    }
    e.to_string()
}
