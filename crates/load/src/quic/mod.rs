//! HTTP/3 load threads: QUIC connections on a [`Stack`] (quinn-proto's, or qpslab's own with
//! `--quic own`; both state machines without I/O), each thread with its UDP sockets on its own
//! epoll loop, the same pacer, recorder, per-second rows
//! and interval histograms as the TCP loops, so a run over HTTP/3 reads as any other in text,
//! JSON, thresholds and compare. Each connection's HTTP/3 is [`Http3`]; this file moves
//! datagrams, timers and the accounting.
//!
//! Connections open (handshake included) before the run's clock starts, as keep-alive TCP
//! connections do; a connection lost in the run fails its requests by what ended it (a TLS
//! alert, the server's close with its code, an idle timeout) and is opened again.

mod preflight;
pub(crate) mod wire;

pub(crate) use preflight::{handshake_once, Preflight};

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use hdrhistogram::Histogram;
use qpslab_http::h3::frame::code;
use qpslab_quic::stack::{Event, Link, Lost, Own, Quinn, Routed, Stack};
use qpslab_quic::udp::{Udp, MAX_SOCKETS};
use qpslab_sys::crew::Hand;
use qpslab_sys::epoll::{self, Epoll};
use qpslab_sys::thread::{thread_cpu_ns, CpuTime};
use qpslab_sys::uring::{Engine, Op, RingOptions, Uring};

use crate::pacer::{Pacer, Schedule};
use crate::session::h3::{ConnError, Http3};
use crate::session::Req;
use crate::stats::{ErrorClass, Recorder};
use crate::template;
use crate::worker::linger::Linger;
use crate::worker::{self, Clock, Msg, SetupCounts, Shared, ThreadOutcome, ThreadProgress};

/// The largest UDP datagram the preflight reads.
const RECV_BUF: usize = 64 * 1024;
/// The allocation received datagrams are copied into (a new one when the last is used up and
/// still referenced).
const RX_ARENA: usize = 256 * 1024;
/// Open loop: the shortest sleep between sends.
const WAKE_QUANTUM: Duration = Duration::from_micros(50);
/// recvmmsg calls per turn before the connections get their turn.
const RECV_BATCHES: usize = 8;
/// Length of one `--log` interval and of a progress tick.
const SECOND: Duration = Duration::from_secs(1);
/// How long a failed connection waits before it is opened again.
const BACKOFF: Duration = Duration::from_millis(100);
/// How long the connections' closes may take to go out at the end of the run.
const CLOSE_WAIT: Duration = Duration::from_millis(100);
/// The least an answered connection waits for a session ticket (see `ticket_wait`).
const TICKET_WAIT_MIN: Duration = Duration::from_millis(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Closed,
    Handshaking,
    Open,
}

struct QConn<L> {
    /// The thread's socket its datagrams go out on.
    sock: usize,
    handle: Option<usize>,
    conn: Option<Box<L>>,
    h3: Http3,
    phase: Phase,
    opened_at: Instant,
    retry_at: Option<Instant>,
    ever_connected: bool,
    /// `--0rtt`: its handshake resumes a session with early data, and its first requests go
    /// before the handshake is done (it counts as open from its connect).
    early: bool,
    /// Its handshake checked the server's certificate (so it was done in full).
    cert_checked: bool,
    /// A session ticket came on it (`--tls-reuse`).
    ticket_came: bool,
    /// How long its handshake took.
    handshake: Duration,
    /// A connection per request: when its request was answered (it takes no other).
    answered_at: Option<Instant>,
    /// In the turn's ready list.
    ready: bool,
    /// When its connection's next timer fires (read after each drive).
    timer: Option<Instant>,
}

/// How a connection's events left it.
enum Ended {
    No,
    /// The HTTP/3 session found the server breaking the protocol: close with this.
    Failed(ConnError),
    Lost(Lost),
}

/// Who a connection handle's datagrams go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    None,
    Conn(usize),
    /// Closed, draining: its last packets are answered until the endpoint lets it go.
    Closing,
}

/// What a thread waits on: epoll, then it reads and sends with recvmmsg and sendmmsg; or a
/// ring, whose one system call per turn submits the turn's sends and takes what came.
enum Io {
    Epoll(Epoll),
    Ring(Box<Uring>),
}

struct Thread<'a, S: Stack> {
    shared: &'a Shared<'a>,
    progress: &'a ThreadProgress,
    send_interval: &'a dyn Fn(u32, Histogram<u64>),
    udp: Udp,
    io: Io,
    /// Connections to drive this turn: datagrams came, a timer fired, a retry is due.
    ready: Vec<usize>,
    /// Where received datagrams are copied for the stack (see [`Thread::receive`]), and the
    /// datagrams routed to their connections, kept for the next turn.
    rx: BytesMut,
    events: Vec<(usize, S::Input)>,
    /// Stateless answers to send, by socket.
    stateless: Vec<(usize, SocketAddr, Vec<u8>)>,
    stack: S,
    conns: Vec<QConn<S::Link>>,
    owners: Vec<Owner>,
    /// Closed connections draining, with their sockets.
    closing: Vec<(usize, Box<S::Link>, usize)>,
    /// Sockets epoll found readable this turn.
    readable: Vec<usize>,
    cursors: Vec<usize>,
    /// Templated IDs: this thread's request numbers, and the copy a request's IDs are
    /// written into.
    ids: template::Ids,
    scratch: Vec<u8>,
    pacer: Pacer,
    /// Open loop: requests the schedule made due that no stream could take yet, by their
    /// slot time (their latency counts from it, so the wait counts), and where the next
    /// search for a free stream starts.
    due: std::collections::VecDeque<Instant>,
    next_conn: usize,
    measure_start: Instant,
    rec: Recorder,
    outstanding: u64,
    /// Requests answered or reset so far (a turn's answers are the difference).
    answers: u64,
    /// How long a closed loop's turn sleeps before it reads, to take the answers of a busy
    /// server in fewer wake-ups (`--linger`), and its time when the window opened.
    linger: Linger,
    held_from: Duration,
    started: bool,
    measuring: bool,
    log_index: u32,
    log_next: Instant,
    open: u64,
    setup: SetupCounts,
}

/// One HTTP/3 load thread: opens its connections, waits at the start line, runs.
pub(crate) fn run_thread(
    shared: &Shared<'_>,
    hand: &Hand<'_, Msg, Clock>,
    progress: &ThreadProgress,
) -> io::Result<ThreadOutcome> {
    let send = |index: u32, hist: Histogram<u64>| hand.send(Msg::Interval { index, hist });
    let Some(h3) = &shared.cfg.h3 else {
        return Err(io::Error::other("an HTTP/3 thread without --h3"));
    };
    // The one place the QUIC is chosen: the thread below drives either the same way.
    if h3.own {
        let stack = Own::new(h3.tls.clone());
        let mut t = Thread::new(shared, hand.index(), progress, &send, stack)?;
        t.connect_phase()?;
        t.run(hand.ready())
    } else {
        let stack = Quinn::new(h3.client.clone());
        let mut t = Thread::new(shared, hand.index(), progress, &send, stack)?;
        t.connect_phase()?;
        t.run(hand.ready())
    }
}

impl<'a, S: Stack> Thread<'a, S> {
    fn new(
        shared: &'a Shared<'a>,
        index: usize,
        progress: &'a ThreadProgress,
        send_interval: &'a dyn Fn(u32, Histogram<u64>),
        stack: S,
    ) -> io::Result<Self> {
        let cfg = shared.cfg;
        let first_conn: usize = (0..index).map(|i| cfg.connections_of(i)).sum();
        let now = Instant::now();
        let v6 = shared.groups.iter().any(|g| g.endpoint.addr.is_ipv6());
        // A socket per connection (up to MAX_SOCKETS): separate ports, as separate clients,
        // each on its `--source` address when there is one.
        let any = if v6 { SocketAddr::from(([0u16; 8], 0)) } else { SocketAddr::from(([0; 4], 0)) };
        let locals: Vec<SocketAddr> = (0..cfg.connections_of(index).clamp(1, MAX_SOCKETS))
            .map(|i| {
                cfg.source.map_or(any, |r| r.pick(index, cfg.threads, first_conn as u64, i as u64))
            })
            .collect();
        let mut udp = Udp::bind(&locals)?;
        let socks = udp.len();
        // A socket whose connections all go to one server is connected to it (as shb's are):
        // the kernel keeps the route instead of finding it for every datagram.
        for sock in 0..socks {
            let mut peers = (0..cfg.connections_of(index))
                .filter(|i| i % socks == sock)
                .map(|i| shared.groups[shared.conn_groups[first_conn + i]].endpoint.addr);
            let Some(first) = peers.next() else { continue };
            if peers.all(|a| a == first) {
                // Left unconnected when the kernel refuses (sends then name their peer).
                let _ = udp.connect(sock, first);
            }
        }
        let io = if cfg.io == Engine::Uring {
            let o = RingOptions {
                entries: 1024,
                buffers: 2,
                buffer_size: 64,
                datagrams: 256,
                ..RingOptions::default()
            };
            let mut ring = Box::new(Uring::new(&o)?);
            ring.queue(|sub| udp.arm(sub, 0));
            Io::Ring(ring)
        } else {
            let epoll = Epoll::new()?;
            for i in 0..udp.len() {
                epoll.add(udp.fd(i), i as u64, epoll::IN)?;
            }
            Io::Epoll(epoll)
        };
        let conns = (0..cfg.connections_of(index))
            .map(|i| QConn {
                sock: i % socks,
                handle: None,
                conn: None,
                h3: Http3::new(shared.conn_groups[first_conn + i]),
                phase: Phase::Closed,
                opened_at: now,
                retry_at: None,
                ever_connected: false,
                early: false,
                cert_checked: false,
                ticket_came: false,
                handshake: Duration::ZERO,
                answered_at: None,
                ready: false,
                timer: None,
            })
            .collect();
        Ok(Thread {
            shared,
            progress,
            send_interval,
            udp,
            io,
            ready: Vec::new(),
            rx: BytesMut::with_capacity(RX_ARENA),
            events: Vec::new(),
            stateless: Vec::new(),
            stack,
            conns,
            owners: Vec::new(),
            closing: Vec::new(),
            readable: Vec::new(),
            cursors: shared
                .groups
                .iter()
                .map(|g| worker::first_position(cfg, index, g.cycle.len()))
                .collect(),
            ids: template::Ids::new(index, cfg.threads, cfg.lane.0, cfg.lane.1),
            scratch: Vec::new(),
            pacer: match cfg.thread_rate() {
                // Every thread's schedule starts with the run's clock (warm-up included).
                Some(rate) => Pacer::open(Schedule { start: None, rate }, cfg.requests_of(index)),
                None => Pacer::closed(cfg.requests_of(index)),
            },
            due: std::collections::VecDeque::new(),
            next_conn: 0,
            measure_start: now,
            rec: Recorder::new(cfg.variants.len(), 0, shared.intervals),
            outstanding: 0,
            answers: 0,
            linger: Linger::new(if cfg.rate.is_none() { cfg.linger } else { Duration::ZERO }),
            held_from: Duration::ZERO,
            started: false,
            measuring: false,
            log_index: 0,
            log_next: now,
            open: 0,
            setup: SetupCounts::default(),
        })
    }

    /// Opens every connection (its handshake done) before the run's clock starts, or until
    /// each has failed once or the connect timeout passed.
    fn connect_phase(&mut self) -> io::Result<()> {
        if !self.shared.cfg.opens_first() {
            // A connection per request: each opens with its request, in the run.
            return Ok(());
        }
        let now = Instant::now();
        for idx in 0..self.conns.len() {
            self.connect(idx, now);
        }
        let deadline = now + self.shared.cfg.connect_timeout;
        loop {
            let opening = self.conns.iter().any(|c| c.phase == Phase::Handshaking);
            if !opening || self.shared.stopping() {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                self.connect_timeouts(now);
                break;
            }
            self.turn(deadline.min(now + Duration::from_millis(10)))?;
        }
        self.setup.opened = self.conns.iter().filter(|c| c.phase == Phase::Open).count();
        self.setup.failed = self.conns.len() - self.setup.opened;
        Ok(())
    }

    fn run(mut self, clock: Clock) -> io::Result<ThreadOutcome> {
        let mut cpu_start = CpuTime::of_current_thread();
        self.started = true;
        self.measuring = Instant::now() >= clock.measure_start;
        self.measure_start = clock.measure_start;
        self.rec.stalls.open(clock.measure_start);
        self.pacer.begin(clock.start);
        if self.pacer.is_open() {
            // The kernel lets a timed wait run up to the thread's timer slack late; a schedule
            // wants its wake-ups on time.
            qpslab_sys::thread::set_timer_slack(1);
        }
        self.log_next = clock.measure_start + SECOND;
        let mut now = Instant::now();
        for idx in 0..self.conns.len() {
            self.issue(idx, now);
            self.transmit(idx, now);
        }
        let tick = (self.shared.cfg.timeout / 10).clamp(Duration::from_millis(1), SECOND / 10);
        let mut next_tick = now + tick;
        loop {
            let mut wake = clock.stop_at.map_or(next_tick, |s| s.min(next_tick));
            wake = wake.min(self.log_next);
            if !self.measuring {
                wake = wake.min(clock.measure_start);
            }
            if let Some(due) = self.pacer.next_due() {
                // Requests due within a quantum go in one wake-up.
                wake = wake.min(due.max(Instant::now() + WAKE_QUANTUM));
            }
            self.hold_out(wake)?;
            now = Instant::now();
            if self.pacer.is_open() && clock.stop_at.is_none_or(|s| now < s) {
                self.send_due(now);
            }
            if !self.measuring && now >= clock.measure_start {
                self.open_window();
                cpu_start = CpuTime::of_current_thread();
            }
            if now >= self.log_next {
                self.rotate_interval(now);
            }
            if now >= next_tick {
                self.on_tick(now);
                next_tick = now + tick;
            }
            let timed_out = clock.stop_at.is_some_and(|s| now >= s);
            let drained = self.pacer.exhausted() && self.outstanding == 0 && self.due.is_empty();
            if timed_out || drained || self.shared.stopping() {
                break;
            }
        }
        let cpu = CpuTime::of_current_thread().since(cpu_start);
        Ok(self.finish(now, cpu))
    }

    /// The warm-up is over: every response from now on counts, and the requests still in
    /// flight from the warm-up are carried into the window (counted as sent, marked warm), as
    /// the TCP loops do.
    fn open_window(&mut self) {
        self.measuring = true;
        self.held_from = self.linger.held_for();
        let mut carried = 0;
        for c in &mut self.conns {
            for r in c.h3.requests_mut() {
                if !r.counted {
                    r.counted = true;
                    carried += 1;
                }
            }
        }
        self.rec.sent += carried;
        self.rec.from_warmup += carried;
    }

    /// A closed loop's turn with requests in flight may first sleep through the linger, so
    /// that the answers of a server busy with the rest come in one read and the requests they
    /// free go out together ([`Linger`]: how long adapts to the server's pace, and a trial
    /// keeps it only where the server's rate holds); then the turn. A socket's readiness
    /// does not say how many datagrams wait, so the sleep is not cut short by the first.
    fn hold_out(&mut self, wake: Instant) -> io::Result<()> {
        let in_flight = self.outstanding;
        let before = self.answers;
        let hold = if in_flight == 0 { Duration::ZERO } else { self.linger.turn() };
        let room = wake.saturating_duration_since(Instant::now());
        let held = !hold.is_zero() && hold < room;
        if held {
            std::thread::sleep(hold);
        }
        self.turn(wake)?;
        let answers = self.answers - before;
        self.linger.answered(answers);
        if held {
            self.linger.held(in_flight, answers, false);
        }
        Ok(())
    }

    /// One turn: waits for datagrams or the earliest timer (until `wake` at the latest), reads
    /// what came, lets the connections it concerns (and those whose timers fired) act on it,
    /// and sends what they queued in one go.
    fn turn(&mut self, wake: Instant) -> io::Result<()> {
        let mut wake = wake;
        for c in &self.conns {
            if let Some(t) = c.timer.or(c.retry_at) {
                wake = wake.min(t);
            }
        }
        for (_, c, _) in &mut self.closing {
            if let Some(t) = c.timeout() {
                wake = wake.min(t);
            }
        }
        let timeout = wake.saturating_duration_since(Instant::now());
        let now = match &mut self.io {
            Io::Epoll(epoll) => {
                // Which sockets have datagrams (without waiting when something is due now).
                let mut events = [epoll::Event { events: 0, u64: 0 }; MAX_SOCKETS];
                let n = epoll.wait_for(&mut events, timeout)?;
                self.readable.clear();
                self.readable.extend(events[..n].iter().map(|e| e.u64 as usize));
                let now = Instant::now();
                self.receive(now);
                now
            }
            Io::Ring(ring) => {
                // The previous turn's sends go, what came is routed as it is taken.
                let mut now = None;
                let mut failed = None;
                let (udp, stack, rx) = (&mut self.udp, &mut self.stack, &mut self.rx);
                let (events, answers) = (&mut self.events, &mut self.stateless);
                ring.turn(timeout, |c, sub| {
                    let now = *now.get_or_insert_with(Instant::now);
                    match c.op {
                        Op::Datagram => {
                            let (sock, _) = Udp::socket_of(c.token);
                            let r = udp.take(&c, sub, &mut |from, data| {
                                route(stack, rx, events, answers, now, sock, from, data);
                            });
                            if let Err(e) = r {
                                failed.get_or_insert(e);
                            }
                        }
                        Op::SendTo => udp.sent(&c),
                        _ => {}
                    }
                })?;
                if let Some(e) = failed {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("io_uring cannot receive datagrams here ({e}): use --io epoll"),
                    ));
                }
                let now = now.unwrap_or_else(Instant::now);
                self.deliver(now);
                now
            }
        };
        for idx in 0..self.conns.len() {
            let c = &self.conns[idx];
            if c.timer.or(c.retry_at).is_some_and(|t| t <= now) {
                self.mark(idx);
            }
        }
        let mut ready = std::mem::take(&mut self.ready);
        for &idx in &ready {
            self.conns[idx].ready = false;
            self.drive(idx, now);
        }
        ready.clear();
        self.ready = ready;
        self.drive_closing(now);
        self.flush();
        Ok(())
    }

    /// Sends what the turn queued: at once on epoll, with the next turn's enter on a ring.
    fn flush(&mut self) {
        match &mut self.io {
            Io::Epoll(_) => self.udp.flush(),
            Io::Ring(ring) => {
                let udp = &mut self.udp;
                ring.queue(|sub| udp.flush_to(sub, 0));
            }
        }
    }

    /// Puts connection `idx` on the turn's ready list.
    fn mark(&mut self, idx: usize) {
        if !self.conns[idx].ready {
            self.conns[idx].ready = true;
            self.ready.push(idx);
        }
    }

    /// Reads the datagrams waiting on the readable sockets, each to its connection.
    fn receive(&mut self, now: Instant) {
        let readable = std::mem::take(&mut self.readable);
        for &sock in &readable {
            self.receive_on(sock, now);
        }
        self.readable = readable;
    }

    /// Reads socket `sock`'s datagrams, a few batches at most.
    fn receive_on(&mut self, sock: usize, now: Instant) {
        for _ in 0..RECV_BATCHES {
            let (stack, rx) = (&mut self.stack, &mut self.rx);
            let (events, answers) = (&mut self.events, &mut self.stateless);
            let more = self.udp.read(sock, &mut |from, data| {
                route(stack, rx, events, answers, now, sock, from, data);
            });
            self.deliver(now);
            if !more {
                break;
            }
        }
    }

    /// Hands the routed datagrams to their connections, and queues the stateless answers.
    fn deliver(&mut self, now: Instant) {
        let mut events = std::mem::take(&mut self.events);
        for (h, ev) in events.drain(..) {
            match self.owner(h) {
                Owner::Conn(idx) => {
                    let qc = &mut self.conns[idx];
                    if let Some(c) = qc.conn.as_mut() {
                        // The server's certificate, if it is checked, is checked in here.
                        let checked = crate::tls::certificates_checked();
                        let tickets = crate::tls::tickets_received();
                        let t0 = (qc.phase == Phase::Handshaking).then(thread_cpu_ns);
                        S::deliver(c, ev, now);
                        if let Some(t0) = t0 {
                            self.udp.counts.handshake_cpu_ns += thread_cpu_ns().saturating_sub(t0);
                        }
                        qc.cert_checked |= crate::tls::certificates_checked() != checked;
                        qc.ticket_came |= crate::tls::tickets_received() != tickets;
                        self.mark(idx);
                    }
                }
                Owner::Closing => {
                    if let Some((_, c, _)) = self.closing.iter_mut().find(|(x, ..)| *x == h) {
                        S::deliver(c, ev, now);
                    }
                }
                Owner::None => {}
            }
        }
        self.events = events;
        let mut stateless = std::mem::take(&mut self.stateless);
        for (sock, to, data) in stateless.drain(..) {
            self.udp.scratch().extend_from_slice(&data);
            self.udp.queue_scratch(sock, to, data.len());
        }
        self.stateless = stateless;
    }

    fn owner(&self, h: usize) -> Owner {
        self.owners.get(h).copied().unwrap_or(Owner::None)
    }

    fn set_owner(&mut self, h: usize, o: Owner) {
        if self.owners.len() <= h {
            self.owners.resize(h + 1, Owner::None);
        }
        self.owners[h] = o;
    }

    /// Opens connection `idx` (its QUIC handshake begins).
    fn connect(&mut self, idx: usize, now: Instant) {
        let g = &self.shared.groups[self.conns[idx].h3.group];
        let name = g
            .endpoint
            .tls_name
            .as_ref()
            .map_or_else(|| g.endpoint.addr.ip().to_string(), crate::tls::name_text);
        let Some(h3) = &self.shared.cfg.h3 else { return };
        let addr = g.endpoint.addr;
        let c = &mut self.conns[idx];
        c.opened_at = now;
        c.retry_at = None;
        c.h3 = Http3::new(c.h3.group);
        c.cert_checked = false;
        c.ticket_came = false;
        c.answered_at = None;
        c.early = false;
        // A handshake's CPU: this start (the ClientHello's key share), then the turns that
        // read and answer the server's handshake packets ([`Thread::drive`]).
        let t0 = thread_cpu_ns();
        let made = self.stack.connect(now, addr, &name);
        self.udp.counts.handshake_cpu_ns += thread_cpu_ns().saturating_sub(t0);
        match made {
            Ok((h, mut conn)) => {
                c.handle = Some(h);
                c.phase = Phase::Handshaking;
                // A ticket that allows early data: the control stream and the first requests
                // go with the handshake's first flight.
                if h3.zero_rtt && conn.has_0rtt() && c.h3.connected(&mut conn).is_ok() {
                    c.early = true;
                    c.phase = Phase::Open;
                    self.open += 1;
                }
                c.conn = Some(Box::new(conn));
                // Its Initial goes out at the next turn.
                c.timer = Some(now);
                self.rec.connects += 1;
                if c.ever_connected && !self.shared.cfg.conn_per_request {
                    self.rec.reconnects += 1;
                }
                self.set_owner(h, Owner::Conn(idx));
            }
            Err(msg) => self.fail_all(idx, ErrorClass::Connect, msg, now),
        }
    }

    /// Lets connection `idx` act on what came and on its timers, then sends what it has; the
    /// CPU time of a handshaking connection's turn is counted as its handshake's.
    fn drive(&mut self, idx: usize, now: Instant) {
        if self.conns[idx].phase != Phase::Handshaking {
            return self.drive_now(idx, now);
        }
        let t0 = thread_cpu_ns();
        self.drive_now(idx, now);
        self.udp.counts.handshake_cpu_ns += thread_cpu_ns().saturating_sub(t0);
    }

    fn drive_now(&mut self, idx: usize, now: Instant) {
        let Some(mut conn) = self.conns[idx].conn.take() else {
            let c = &self.conns[idx];
            if c.phase == Phase::Closed && c.retry_at.is_some_and(|t| now >= t) {
                self.issue(idx, now);
            }
            return;
        };
        if conn.timeout().is_some_and(|t| t <= now) {
            conn.handle_timeout(now);
        }
        let h = self.conns[idx].handle.unwrap_or(usize::MAX);
        self.stack.sync(h, &mut conn);
        let ended = self.events(idx, &mut conn, now);
        let answered = self.hand_over(idx, now);
        let c = &mut self.conns[idx];
        if answered && self.shared.cfg.conn_per_request && c.h3.in_flight() == 0 {
            c.answered_at.get_or_insert(now);
        }
        match ended {
            Ended::No if c.answered_at.is_some() => {
                // Its one request is answered: closed (H3_NO_ERROR) and opened again for the
                // next, once it may go.
                if let Some(wait) = self.ticket_wait(idx, now) {
                    self.conns[idx].conn = Some(conn);
                    self.transmit(idx, now);
                    let c = &mut self.conns[idx];
                    c.timer = Some(c.timer.map_or(wait, |t| t.min(wait)));
                    return;
                }
                conn.close(now, code::NO_ERROR, b"");
                self.retire(idx, conn, now);
                return self.issue(idx, now);
            }
            Ended::No => {}
            Ended::Failed(e) => {
                conn.close(now, e.code, e.msg.as_bytes());
                self.retire(idx, conn, now);
                return self.fail_all(idx, ErrorClass::Parse, e.msg, now);
            }
            Ended::Lost(reason) => {
                self.retire(idx, conn, now);
                if let Some((class, msg)) = self.lost_because(idx, &reason) {
                    self.fail_all(idx, class, msg, now);
                }
                return;
            }
        }
        self.conns[idx].conn = Some(conn);
        self.issue(idx, now);
        self.transmit(idx, now);
    }

    /// Hands connection `idx`'s events to its HTTP/3 session, until they run out or the
    /// connection ends.
    fn events(&mut self, idx: usize, conn: &mut S::Link, now: Instant) -> Ended {
        while let Some(ev) = conn.poll_event() {
            let c = &mut self.conns[idx];
            let result = match ev {
                Event::Connected => {
                    let early = std::mem::take(&mut c.early);
                    if !early {
                        c.phase = Phase::Open;
                        self.open += 1;
                    }
                    c.ever_connected = true;
                    // QUIC's handshake is TLS 1.3's: in full, or resuming a session
                    // (`--tls-reuse`, `--0rtt`), when no certificate came to be checked.
                    if c.cert_checked {
                        self.rec.tls_full += 1;
                    } else {
                        self.rec.tls_resumed += 1;
                    }
                    c.handshake = now.saturating_duration_since(c.opened_at);
                    let us = c.handshake.as_micros() as u64;
                    self.rec.handshake_latency.saturating_record(us.max(1));
                    // A QUIC connection is open when its handshake is done.
                    self.rec.connect_latency.saturating_record(us.max(1));
                    if self.rec.tls_negotiated.is_none() {
                        self.rec.tls_negotiated = Some("TLSv1_3 (QUIC)".into());
                    }
                    match early {
                        false => c.h3.connected(conn),
                        true if conn.accepted_0rtt() => {
                            self.rec.early_accepted += 1;
                            Ok(())
                        }
                        true => {
                            self.rec.early_refused += 1;
                            self.send_again(idx, conn)
                        }
                    }
                }
                Event::Lost(reason) => return Ended::Lost(reason),
                ev => c.h3.stream_event(conn, ev),
            };
            if let Err(e) = result {
                return Ended::Failed(e);
            }
        }
        Ended::No
    }

    /// The server refused a handshake's early data: QUIC forgot every stream sent in it, so
    /// the session starts again (its control stream) and the requests go again, as they
    /// were (their numbers too), on new streams. A request no stream can take now fails.
    fn send_again(&mut self, idx: usize, conn: &mut S::Link) -> Result<(), ConnError> {
        let c = &mut self.conns[idx];
        let reqs = c.h3.take_requests();
        c.h3 = Http3::new(c.h3.group);
        c.h3.connected(conn)?;
        let wires = &self.shared.h3_wires[c.h3.group];
        for req in reqs {
            let bytes = wires[req.pos as usize].numbered(req.id, &self.ids, &mut self.scratch);
            if !c.h3.send(conn, req, bytes) {
                c.h3.reset.push((req, "0-RTT refused, and no stream to send it again".into()));
            }
        }
        Ok(())
    }

    /// A connection per request with `--tls-reuse`, answered, waits before it closes for a
    /// session ticket when none is held for the next connection (the server sends its
    /// tickets once the handshake is done, which with 0-RTT is after the answer): until one
    /// comes or for four times as long as its handshake took, at least 5 ms (the ticket is
    /// a round trip and the server's turn away, and a busy server's turn comes late: with
    /// once the handshake's time, a CI run's loaded aioquic missed a third). Without the
    /// wait, every connection after a 0-RTT one went in full. When it may close: None.
    fn ticket_wait(&self, idx: usize, now: Instant) -> Option<Instant> {
        let c = &self.conns[idx];
        let tls = self.shared.cfg.tls.as_ref().filter(|t| t.reuse)?;
        if c.ticket_came || tls.tickets_held() > 0 {
            return None;
        }
        let until = c.answered_at? + (c.handshake * 4).max(TICKET_WAIT_MIN);
        (now < until).then_some(until)
    }

    /// Sends what connection `idx` has queued.
    fn transmit(&mut self, idx: usize, now: Instant) {
        let c = &mut self.conns[idx];
        let Some(conn) = c.conn.as_mut() else {
            c.timer = None;
            return;
        };
        self.udp.queue(c.sock, &mut **conn, now);
        c.timer = conn.timeout();
    }

    /// Responses and failed streams the session handed back, into the record; whether there
    /// were any.
    fn hand_over(&mut self, idx: usize, now: Instant) -> bool {
        let c = &mut self.conns[idx];
        let any = !c.h3.answered.is_empty() || !c.h3.reset.is_empty();
        for (req, resp) in c.h3.answered.drain(..) {
            self.outstanding -= 1;
            self.answers += 1;
            self.shared.record(&mut self.rec, req, resp, now);
        }
        for (req, why) in c.h3.reset.drain(..) {
            self.outstanding -= 1;
            self.answers += 1;
            if req.counted {
                self.rec.target_failed(req.target as usize, 1);
                self.rec.failure(ErrorClass::Reset, 1, || why);
            }
        }
        any
    }

    /// Why a lost connection's requests failed; None when this side closed it.
    fn lost_because(&self, idx: usize, reason: &Lost) -> Option<(ErrorClass, String)> {
        let c = &self.conns[idx];
        let handshaking = !c.ever_connected || c.phase != Phase::Open || c.early;
        let crypto = |c: u64| (0x100..0x200).contains(&c);
        Some(match reason {
            Lost::Local => return None,
            Lost::Closed { app: false, code, text } if crypto(*code) => {
                (ErrorClass::Tls, format!("the server's TLS alert: {text}"))
            }
            Lost::Broken { code, text } if crypto(*code) => {
                (ErrorClass::Tls, format!("TLS: {text}"))
            }
            Lost::TimedOut if handshaking => (
                ErrorClass::Connect,
                "no QUIC handshake: the server sent nothing back (UDP) before the idle timeout"
                    .into(),
            ),
            Lost::TimedOut => {
                (ErrorClass::Timeout, "the QUIC connection went idle past its timeout".into())
            }
            Lost::Closed { app: true, code, text } => (
                ErrorClass::Read,
                format!(
                    "the server closed the connection ({}{})",
                    code::name(*code),
                    reason_text(text)
                ),
            ),
            Lost::Closed { text, .. } => {
                (ErrorClass::Read, format!("the server closed the QUIC connection: {text}"))
            }
            Lost::Reset => {
                (ErrorClass::Read, "the server reset the QUIC connection (stateless reset)".into())
            }
            Lost::Broken { text, .. } | Lost::Other(text) if handshaking => {
                (ErrorClass::Connect, text.clone())
            }
            Lost::Broken { text, .. } | Lost::Other(text) => (ErrorClass::Parse, text.clone()),
        })
    }

    /// A connection is done with: it drains apart, its slot is closed.
    fn retire(&mut self, idx: usize, conn: Box<S::Link>, now: Instant) {
        let c = &mut self.conns[idx];
        if c.phase == Phase::Open {
            self.open -= 1;
        }
        c.phase = Phase::Closed;
        c.timer = None;
        if let Some(h) = c.handle.take() {
            self.set_owner(h, Owner::Closing);
            let sock = self.conns[idx].sock;
            let mut conn = conn;
            self.udp.queue(sock, &mut *conn, now);
            conn.count(&mut self.udp.counts);
            self.closing.push((h, conn, sock));
        }
    }

    /// Fails every request of connection `idx` (its connection is gone) and schedules it to
    /// open again.
    fn fail_all(&mut self, idx: usize, class: ErrorClass, msg: String, now: Instant) {
        if !self.started && self.setup.example.is_none() {
            self.setup.example = Some(msg.clone());
        }
        let reqs = self.conns[idx].h3.take_requests();
        self.outstanding -= reqs.len() as u64;
        let mut counted = 0;
        for r in reqs.iter().filter(|r| r.counted) {
            self.rec.target_failed(r.target as usize, 1);
            counted += 1;
        }
        // A connect that failed with no request on it yet (a reconnect, or a connection per
        // request) fails the request it was opened for, as the TCP loops fail the requests
        // that wait for a connect: counted, with its class and example.
        let connecting = matches!(class, ErrorClass::Connect | ErrorClass::Tls);
        if reqs.is_empty() && connecting && self.measuring && self.pacer.grant(1, now).0 == 1 {
            let g = self.conns[idx].h3.group;
            let target = self.shared.groups[g].cycle.variant(self.cursors[g]) as usize;
            self.rec.sent += 1;
            self.rec.target_failed(target, 1);
            counted += 1;
        }
        self.rec.failure(class, counted, || msg);
        self.conns[idx].retry_at = Some(now + BACKOFF);
    }

    /// Connections that are closed and drain: their timers run, their packets go, and the
    /// endpoint lets them go once drained.
    fn drive_closing(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.closing.len() {
            let (h, c, sock) = &mut self.closing[i];
            if c.timeout().is_some_and(|t| t <= now) {
                c.handle_timeout(now);
            }
            self.stack.sync(*h, c);
            while c.poll_event().is_some() {}
            self.udp.queue(*sock, &mut **c, now);
            if c.is_drained() {
                let h = *h;
                self.closing.swap_remove(i);
                self.set_owner(h, Owner::None);
                self.stack.forget(h);
            } else {
                i += 1;
            }
        }
    }

    /// Gives connection `idx` as many requests as its streams and the pacer allow; opens it
    /// again when it is closed and has waited out its back-off.
    fn issue(&mut self, idx: usize, now: Instant) {
        if !self.started {
            return;
        }
        let depth = self.shared.cfg.pipeline;
        let per_request = self.shared.cfg.conn_per_request;
        let c = &mut self.conns[idx];
        match c.phase {
            Phase::Handshaking => {}
            Phase::Closed => {
                if c.retry_at.is_some_and(|t| now < t) || self.pacer.exhausted() {
                    return;
                }
                if per_request && !self.pacer.is_open() {
                    // A connection per request opens only for a request left to send: the
                    // last ones of a -n budget do not each make every connection handshake.
                    let opening = self.conns.iter().filter(|c| c.phase == Phase::Handshaking);
                    if self.pacer.due(now) <= opening.count() as u64 {
                        return;
                    }
                }
                self.connect(idx, now);
            }
            Phase::Open if self.pacer.is_open() => {}
            Phase::Open => {
                if c.h3.going_away() || c.answered_at.is_some() {
                    return;
                }
                let free = depth.saturating_sub(c.h3.in_flight()) as u64;
                if free == 0 {
                    return;
                }
                let g = c.h3.group;
                let group = &self.shared.groups[g];
                let Some(conn) = c.conn.as_mut() else { return };
                let mut sent = 0;
                for _ in 0..free {
                    if self.pacer.grant(1, now).0 == 0 {
                        break;
                    }
                    let pos = self.cursors[g];
                    let req = Req {
                        sent_at: now,
                        // A connection per request: its latency counts the handshake too.
                        intended: if per_request { c.opened_at } else { now },
                        counted: self.measuring,
                        warm: !self.measuring,
                        retried: false,
                        target: group.cycle.variant(pos),
                        pos: pos as u32,
                        id: 0,
                    };
                    let wire = &self.shared.h3_wires[g][pos];
                    let (id, bytes) = wire.next(&mut self.ids, &mut self.scratch);
                    if !c.h3.send(&mut **conn, Req { id, ..req }, bytes) {
                        // The server's stream limit: the grant goes back.
                        self.pacer.give_back(1);
                        break;
                    }
                    self.cursors[g] = (pos + 1) % group.cycle.len();
                    sent += 1;
                }
                self.outstanding += sent;
                if self.measuring {
                    self.rec.sent += sent;
                }
            }
        }
    }

    /// Open loop: hands the requests due by now to connections with a free stream, in turn;
    /// what none can take waits, its latency counting from its slot.
    fn send_due(&mut self, now: Instant) {
        let (k, first) = self.pacer.grant(u64::MAX, now);
        for i in 0..k {
            self.due.push_back(self.pacer.slot_time(first + i, now));
        }
        let n = self.conns.len();
        let depth = self.shared.cfg.pipeline;
        let mut tried = 0;
        while !self.due.is_empty() && tried < n {
            let idx = self.next_conn;
            let c = &mut self.conns[idx];
            let free = c.phase == Phase::Open
                && !c.h3.going_away()
                && c.answered_at.is_none()
                && c.h3.in_flight() < depth
                && c.conn.is_some();
            if !free {
                self.next_conn = (idx + 1) % n;
                tried += 1;
                continue;
            }
            let g = c.h3.group;
            let group = &self.shared.groups[g];
            let Some(conn) = c.conn.as_mut() else { continue };
            let Some(&intended) = self.due.front() else { break };
            let pos = self.cursors[g];
            let warm = intended < self.measure_start;
            let req = Req {
                sent_at: now,
                intended,
                counted: self.measuring || !warm,
                warm,
                retried: false,
                target: group.cycle.variant(pos),
                pos: pos as u32,
                id: 0,
            };
            let wire = &self.shared.h3_wires[g][pos];
            let (id, bytes) = wire.next(&mut self.ids, &mut self.scratch);
            let req = Req { id, ..req };
            if !c.h3.send(&mut **conn, req, bytes) {
                // The server's stream limit: the next connection.
                self.next_conn = (idx + 1) % n;
                tried += 1;
                continue;
            }
            self.due.pop_front();
            self.cursors[g] = (pos + 1) % group.cycle.len();
            self.outstanding += 1;
            if req.counted {
                self.rec.sent += 1;
                self.rec.lag(now.saturating_duration_since(intended).as_micros() as u64);
            }
            if !self.conns[idx].ready {
                // Not to be driven this turn: marked only so it is sent below once.
                self.conns[idx].ready = true;
                self.ready.push(idx);
            }
            tried = 0;
            self.next_conn = (idx + 1) % n;
        }
        // The requests go now, not at the next wake-up.
        let mut ready = std::mem::take(&mut self.ready);
        for &idx in &ready {
            self.conns[idx].ready = false;
            self.transmit(idx, now);
        }
        ready.clear();
        self.ready = ready;
        self.udp.flush();
    }

    /// Handshakes past the connect timeout fail.
    fn connect_timeouts(&mut self, now: Instant) {
        let limit = self.shared.cfg.connect_timeout;
        for idx in 0..self.conns.len() {
            let c = &self.conns[idx];
            if c.phase != Phase::Handshaking || now.saturating_duration_since(c.opened_at) < limit {
                continue;
            }
            if let Some(mut conn) = self.conns[idx].conn.take() {
                conn.close(now, 0, b"");
                self.retire(idx, conn, now);
            }
            let msg = format!(
                "no QUIC handshake within {} (the server did not answer over UDP)",
                worker::fmt_duration(limit)
            );
            self.fail_all(idx, ErrorClass::Connect, msg, now);
        }
    }

    /// Requests past the timeout fail (their streams cancelled), handshakes past theirs too;
    /// the live counters are published.
    fn on_tick(&mut self, now: Instant) {
        self.connect_timeouts(now);
        let Some(before) = now.checked_sub(self.shared.cfg.timeout) else { return };
        for idx in 0..self.conns.len() {
            let c = &mut self.conns[idx];
            let Some(conn) = c.conn.as_mut() else { continue };
            let late = c.h3.cancel_older(&mut **conn, before);
            if late.is_empty() {
                continue;
            }
            self.outstanding -= late.len() as u64;
            let counted = late.iter().filter(|r| r.counted).count() as u64;
            for r in late.iter().filter(|r| r.counted) {
                self.rec.target_failed(r.target as usize, 1);
            }
            let t = worker::fmt_duration(self.shared.cfg.timeout);
            self.rec.failure(ErrorClass::Timeout, counted, || {
                format!("no response within {t} (the stream was cancelled)")
            });
            if self.shared.cfg.conn_per_request {
                // Its one request is over: the connection goes, the next request opens its own
                // (a server gone silent is then found by the handshakes that fail).
                if let Some(mut conn) = self.conns[idx].conn.take() {
                    conn.close(now, code::REQUEST_CANCELLED, b"");
                    self.retire(idx, conn, now);
                }
            }
            self.issue(idx, now);
            self.transmit(idx, now);
        }
        self.publish();
    }

    fn rotate_interval(&mut self, now: Instant) {
        let at = (&mut self.log_index, &mut self.log_next);
        worker::rotate_seconds(&mut self.rec, self.send_interval, at, now);
    }

    fn publish(&self) {
        let p = self.progress;
        p.sent.store(self.rec.sent, Ordering::Relaxed);
        p.completed.store(self.rec.completed, Ordering::Relaxed);
        p.failed.store(self.rec.failed, Ordering::Relaxed);
        p.ok.store(self.rec.ok, Ordering::Relaxed);
        for (a, e) in p.errors.iter().zip(self.rec.errors) {
            a.store(e, Ordering::Relaxed);
        }
        p.open.store(self.open, Ordering::Relaxed);
        p.reconnects.store(self.rec.reconnects, Ordering::Relaxed);
        let c = &self.udp.counts;
        p.datagrams_in.store(c.datagrams_in, Ordering::Relaxed);
        p.datagrams_out.store(c.datagrams_out, Ordering::Relaxed);
        // Those of connections let go, and the open ones' own count so far.
        let open = self.conns.iter().filter_map(|c| c.conn.as_ref());
        let lost = open.map(|c| c.lost_packets()).sum::<u64>();
        p.lost_packets.store(c.lost_packets + lost, Ordering::Relaxed);
        p.lag_us.store(self.rec.lag_total_us, Ordering::Relaxed);
        p.lagged.store(self.rec.send_lag.len(), Ordering::Relaxed);
        if let Some((scheduled, unsent)) = self.pacer.owed(Instant::now()) {
            p.scheduled.store(scheduled, Ordering::Relaxed);
            p.due_unsent.store(unsent + self.due.len() as u64, Ordering::Relaxed);
        }
    }

    /// Closes every connection (H3_NO_ERROR), lets the closes go out, and hands back the
    /// thread's figures.
    fn finish(mut self, now: Instant, cpu: CpuTime) -> ThreadOutcome {
        self.publish();
        if let Some(h) = self.rec.take_interval() {
            (self.send_interval)(self.log_index, h);
        }
        let mut in_flight_by_target = vec![0; self.shared.cfg.variants.len()];
        let mut waiting = crate::Waiting::default();
        for c in &self.conns {
            let counted: Vec<&Req> = c.h3.requests().filter(|r| r.counted).collect();
            for r in &counted {
                in_flight_by_target[r.target as usize] += 1;
            }
            if let Some(oldest) = counted.iter().map(|r| r.intended).min() {
                let us = now.saturating_duration_since(oldest).as_micros() as u64;
                waiting.answered_us.push(us);
            }
        }
        for idx in 0..self.conns.len() {
            if let Some(mut conn) = self.conns[idx].conn.take() {
                conn.close(now, code::NO_ERROR, b"");
                self.retire(idx, conn, now);
            }
        }
        let end = Instant::now() + CLOSE_WAIT;
        while !self.closing.is_empty() && Instant::now() < end {
            let _ = self.turn(end.min(Instant::now() + Duration::from_millis(5)));
        }
        self.flush();
        if let Io::Ring(ring) = &mut self.io {
            // The last sends (the closes) are submitted, and the completions that came taken.
            let udp = &mut self.udp;
            let _ = ring.turn(Duration::ZERO, |c, _| {
                if c.op == Op::SendTo {
                    udp.sent(&c);
                }
            });
        }
        self.rec.bytes_read = self.udp.bytes_read;
        self.rec.bytes_written = self.udp.bytes_written;
        self.rec.quic = Some(self.udp.counts);
        ThreadOutcome {
            in_flight: in_flight_by_target.iter().sum(),
            cpu,
            polled: Duration::ZERO,
            lingered: self.linger.held_for().saturating_sub(self.held_from),
            ended: now,
            due_unsent: if self.pacer.is_open() {
                self.pacer.due(now) + self.due.len() as u64
            } else {
                0
            },
            idle_at_stop: 0,
            in_flight_by_target,
            setup: self.setup,
            rec: self.rec,
            waiting,
        }
    }
}

/// A close's reason phrase, for a message (empty when none).
fn reason_text(reason: &str) -> String {
    if reason.is_empty() {
        return String::new();
    }
    format!(": {reason}")
}

/// A datagram `sock` received from `from`, routed by the stack: an input for a connection
/// (delivered by [`Thread::deliver`]), or a stateless answer to send back.
#[allow(clippy::too_many_arguments, reason = "the thread's fields a read borrows apart")]
fn route<S: Stack>(
    stack: &mut S,
    rx: &mut BytesMut,
    events: &mut Vec<(usize, S::Input)>,
    answers: &mut Vec<(usize, SocketAddr, Vec<u8>)>,
    now: Instant,
    sock: usize,
    from: SocketAddr,
    data: &[u8],
) {
    let mut scratch = Vec::new();
    // Datagrams share one allocation until every piece of it was read: quinn-proto keeps a
    // packet's stream data as slices of it.
    rx.extend_from_slice(data);
    let data = rx.split();
    match stack.route(now, from, data, &mut scratch) {
        Routed::To(h, input) => events.push((h, input)),
        Routed::Answer(to, len) => {
            scratch.truncate(len);
            answers.push((sock, to, scratch));
        }
        Routed::None => {}
    }
}
