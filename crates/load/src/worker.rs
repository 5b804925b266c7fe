//! One load thread: an event loop (epoll or io_uring, behind the one interface of [`io`])
//! over the thread's own connections.
//!
//! Owns the connection state machine (closed -> connecting -> open), the exact accounting of each
//! request from commit to response, failure or stop, per-request timeouts (counted when they
//! expire), and reconnects. The pacer decides when a free slot may take a request; the connection
//! policy (keep-alive, or a connection per request) decides what happens after a response; the
//! target groups decide where a connection goes and which request it sends next. Steady state per
//! request: one read, one parse, one histogram record, one write; no allocation, lock or log.

mod engine;
mod epoll;
mod handler;
mod io;
pub(crate) mod linger;
mod transport;
mod uring;

use std::collections::VecDeque;
use std::io as stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::Histogram;
use qpslab_http::Response;
use socket2::{Protocol, SockAddr, Socket, Type};

use engine::Io;
use io::Op;
use linger::Linger;
use transport::Transport;

use crate::config::{LoadConfig, PollMode, SPIN_WINDOW};
use crate::pacer::{Pacer, Schedule};
use crate::session::{Absorbed, Ended, Req, Session};
use crate::stats::{ErrorClass, Recorder};
use crate::targets::Group;
use qpslab_sys::net::message as io_message;
use qpslab_sys::thread::CpuTime;

/// Pause before reopening a connection whose connect failed, so a dead target is not hammered.
const CONNECT_BACKOFF: Duration = Duration::from_millis(10);
/// Connects under way at once per thread while connections open before the run (see
/// [`Worker::connect_phase`]).
const CONNECT_WINDOW: usize = 256;
/// Longest gap between timer checks; timeouts fire within this much of their expiry.
const MAX_TICK: Duration = Duration::from_millis(10);
/// Per-thread read buffer. Responses are parsed in place; only a split head is copied.
const READ_BUF: usize = 64 * 1024;
/// Connections whose timers are checked on every tick when there are no more than this many;
/// above, each tick checks a window so that all are checked within [`MAX_SWEEP`].
const FULL_SCAN: usize = 1000;
/// Longest time for the timer scan to go round all connections of a thread.
const MAX_SWEEP: Duration = Duration::from_secs(1);
/// Length of one `--log` interval.
const LOG_INTERVAL: Duration = Duration::from_secs(1);

/// Counters a thread publishes for live progress, at most once per tick.
#[derive(Debug, Default)]
pub struct ThreadProgress {
    pub sent: AtomicU64,
    pub completed: AtomicU64,
    pub failed: AtomicU64,
    pub ok: AtomicU64,
    pub errors: [AtomicU64; crate::stats::CLASSES],
    pub open: AtomicU64,
    pub reconnects: AtomicU64,
    pub lag_us: AtomicU64,
    pub lagged: AtomicU64,
    /// Open loop: requests the schedule had due so far, and those not yet sent.
    pub scheduled: AtomicU64,
    pub due_unsent: AtomicU64,
    pub connected: AtomicBool,
    /// HTTP/3: datagrams read and sent, QUIC packets declared lost.
    pub datagrams_in: AtomicU64,
    pub datagrams_out: AtomicU64,
    pub lost_packets: AtomicU64,
    /// gRPC: calls by status code 0-16.
    pub grpc: [AtomicU64; qpslab_http::grpc::CODES.len()],
}

/// When the run started, when measuring starts (after warm-up) and when it stops (`-d`): set
/// once every load thread is ready, the same for all.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    pub start: Instant,
    pub started_at: SystemTime,
    pub measure_start: Instant,
    pub stop_at: Option<Instant>,
}

impl Clock {
    /// The clock of a run of `cfg` starting now.
    pub fn now(cfg: &LoadConfig) -> Self {
        let start = Instant::now();
        let measure_start = start + cfg.warmup;
        Clock {
            start,
            started_at: SystemTime::now(),
            measure_start,
            stop_at: cfg.duration.map(|d| measure_start + d),
        }
    }
}

/// What a thread hands back when it stops.
#[derive(Debug)]
pub(crate) struct ThreadOutcome {
    pub rec: Recorder,
    /// Counted requests still unreused when the run stopped.
    pub in_flight: u64,
    pub cpu: CpuTime,
    pub ended: Instant,
    /// Of `cpu`: time spent polling for events instead of sleeping (`--poll`), not work.
    pub polled: Duration,
    /// Measured time in turns that could hold out for answers (`--linger`).
    pub lingered: Duration,
    /// Open loop: requests due but not sent when the run stopped.
    pub due_unsent: u64,
    /// Open loop: connections free (waiting for the schedule) when the run stopped.
    pub idle_at_stop: usize,
    /// `in_flight` by target.
    pub in_flight_by_target: Vec<u64>,
    /// The connections opened before the run's clock started.
    pub setup: SetupCounts,
    /// The connections with a counted request outstanding at the stop.
    pub waiting: crate::Waiting,
}

/// How the connections opened before the run's clock started.
#[derive(Debug, Clone, Default)]
pub(crate) struct SetupCounts {
    pub opened: usize,
    pub failed: usize,
    /// Opened, then closed by the server (its idle timeout) before the run started.
    pub closed_by_server: usize,
    /// The first failure's message.
    pub example: Option<String>,
}

/// What threads tell the thread that watches them.
#[derive(Debug)]
pub(crate) enum Msg {
    /// `--log`: the corrected latency of interval `index` (seconds since the start of
    /// measurement) on the sending thread.
    Interval { index: u32, hist: Histogram<u64> },
}

/// Run-wide, read-only inputs of every thread.
#[derive(Debug)]
pub(crate) struct Shared<'a> {
    pub cfg: &'a LoadConfig,
    /// Variants by address, with their requests laid out in cycle order.
    pub groups: &'a [Group],
    /// Group of each connection, by global connection number.
    pub conn_groups: Vec<usize>,
    /// Per target: a HEAD request (its responses have no body).
    pub heads: Vec<bool>,
    /// Per target: its method may be sent again after a connection failure.
    pub idempotent: Vec<bool>,
    pub stop_flag: &'a AtomicBool,
    /// Set once, by the first thread that finds the server speaking another protocol (the
    /// target's URL and why): every thread stops, and the run is a set-up error.
    pub wrong_protocol: std::sync::OnceLock<(String, String)>,
    /// Threads hand over a latency histogram per second (`--log`, or an observer wants them).
    pub intervals: bool,
    /// Per target: its group of the `--urls` pool (none: [`crate::pool::NO_GROUP`], or empty).
    pub target_group: Vec<u32>,
    /// HTTP/3: per group, per position of its request cycle, the request's HEADERS frame (its
    /// QPACK section) and its body in a DATA frame, built once for every load thread.
    pub h3_wires: Vec<Vec<crate::quic::wire::Wire>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Closed,
    Connecting,
    /// https: TCP is open, the TLS handshake is under way.
    Handshaking,
    Open,
}

impl Phase {
    /// A connect or a TLS handshake is under way.
    fn is_opening(self) -> bool {
        matches!(self, Phase::Connecting | Phase::Handshaking)
    }
}

#[derive(Debug)]
struct Conn {
    sock: Option<Socket>,
    /// What carries the session's bytes over `sock` (TLS for https), driven by this thread's
    /// loop.
    t: Transport,
    /// A buffer back from a send (HTTP/2 frames or TLS records), for the next.
    spare: Vec<u8>,
    /// Bumped on every close, so events of a closed socket are not taken for its successor's.
    gen: u32,
    phase: Phase,
    /// The connection's HTTP/1.1 or HTTP/2: requests to write, responses to read, what to
    /// retry.
    s: Session,
    /// Requests committed while the connection was being opened.
    waiting: u64,
    waiting_counted: bool,
    /// They were granted in the warm-up (see [`Req::warm`]).
    waiting_warm: bool,
    /// Open loop: the slot time of the request waiting for the connect.
    waiting_intended: Option<Instant>,
    /// In the worker's idle list (open loop: free, waiting for the schedule).
    idle: bool,
    /// A send is under way (one at a time; the loop's [`io::Event::Sent`] ends it).
    sending: bool,
    /// A send found the server's end of the connection gone (EPIPE, ECONNRESET): nothing more
    /// is written, and what the server answered before it closed is read to the end, which
    /// then judges the requests in flight (a close it announced sends them again).
    send_error: Option<stdio::Error>,
    opened_at: Instant,
    retry_at: Option<Instant>,
    /// Connects in a row that found the port of our choosing taken.
    port_tries: u32,
    ever_connected: bool,
    /// Bytes arrived since the connection opened (its first tell the server's protocol).
    heard: bool,
    /// Responses to counted requests this connection slot completed in the measured window.
    answered: u32,
}

/// When the requests of one write were meant to go.
#[derive(Debug, Clone, Copy)]
enum Due {
    /// Closed loop: when they go; whether they count, and whether they were granted in the
    /// warm-up, was decided when they were granted.
    Now { counted: bool, warm: bool },
    /// One open-loop request granted before its connection was open.
    At(Instant),
    /// Open loop: consecutive schedule slots from this one.
    Slots(u64),
}

/// Open loop: the shortest sleep between sends; a request waits at most this long past its
/// slot for the wake-up (its latency still counts from the slot).
const WAKE_QUANTUM: Duration = Duration::from_micros(50);
/// Open loop: events handled between two checks of the schedule within one batch.
const SEND_DUE_EVERY: usize = 16;

pub(crate) struct Worker<'a> {
    shared: &'a Shared<'a>,
    progress: &'a ThreadProgress,
    /// Out of its slot while it runs a turn (it hands events to the worker).
    io: Option<Io>,
    /// Operations for the loop, carried out in order after the event being handled (or
    /// with the next wait).
    ops: Vec<Op>,
    /// Events handled, for the open loop's checks of the schedule within a batch.
    events: usize,
    conns: Vec<Conn>,
    pacer: Pacer,
    rec: Recorder,
    /// https: where decrypted responses land before the session parses them.
    plain: Box<[u8]>,
    /// Requests committed and not yet reused or failed.
    outstanding: u64,
    /// The requests in flight when the current turn of the loop began, and the responses it
    /// has seen (see [`io::Handler::holds_out`]).
    turn_in_flight: u64,
    turn_answers: u64,
    /// How long the current turn may hold out for more completions, and whether it did;
    /// the waits' pace.
    turn_linger: Duration,
    turn_lingered: bool,
    turn_behind: bool,
    /// Connections with requests in flight at the turn's start (counted when it may linger).
    turn_busy: usize,
    linger: Linger,
    /// [`Linger::held_for`] when measuring began.
    held_from: Duration,
    /// Connections open now (TCP established), for the live feed.
    open: u64,
    /// Open loop: connections that can take a request when one falls due, oldest first.
    idle: VecDeque<usize>,
    /// Open loop: slots below this one fell due while every connection was busy.
    waiting_below: u64,
    measuring: bool,
    /// When measuring starts (after warm-up); set by [`Worker::run`] (before it, in the
    /// connect phase, nothing is sent, so it is not read).
    measure_start: Instant,
    /// Polling time while measuring (see [`ThreadOutcome::polled`]).
    polled: Duration,
    tick: Duration,
    index: usize,
    /// Where the timer scan resumes, and how many connections each tick checks.
    scan_pos: usize,
    scan_per_tick: usize,
    /// `--source`: this thread's first pick and how many connects it has made.
    source_start: u64,
    source_n: u64,
    /// `--log`: hands a finished interval's histogram to the thread that writes the log.
    send_interval: &'a dyn Fn(u32, Histogram<u64>),
    /// `--log`: the current interval and when it ends.
    log_index: u32,
    log_next: Instant,
    /// The run's clock has started: requests may be issued (not during the connect phase).
    started: bool,
    setup: SetupCounts,
    /// Per group, the position in its request cycle of this thread's next request: its
    /// connections take requests from it in turn, so together they walk the cycle in order.
    cursors: Vec<usize>,
    /// The numbers of this thread's requests (their `{seq}` and `{rand}` IDs).
    ids: crate::template::Ids,
}

impl<'a> Worker<'a> {
    pub(crate) fn new(
        shared: &'a Shared<'a>,
        index: usize,
        progress: &'a ThreadProgress,
        send_interval: &'a dyn Fn(u32, Histogram<u64>),
    ) -> stdio::Result<Self> {
        let cfg = shared.cfg;
        let now = Instant::now();
        let first_conn: usize = (0..index).map(|i| cfg.connections_of(i)).sum();
        let n_conns = cfg.connections_of(index);
        let tick = (cfg.timeout / 10).clamp(Duration::from_millis(1), MAX_TICK);
        let sweep_ticks = ((cfg.timeout / 10).min(MAX_SWEEP).as_nanos() / tick.as_nanos()).max(1);
        let conns = (0..n_conns)
            .map(|i| Conn {
                sock: None,
                t: Transport::Plain,
                spare: Vec::new(),
                gen: 0,
                phase: Phase::Closed,
                s: Session::new(shared.conn_groups[first_conn + i], cfg.h2, cfg.pipeline),
                waiting: 0,
                waiting_counted: false,
                waiting_warm: false,
                waiting_intended: None,
                idle: false,
                sending: false,
                send_error: None,
                opened_at: now,
                retry_at: None,
                port_tries: 0,
                ever_connected: false,
                heard: false,
                answered: 0,
            })
            .collect();
        Ok(Self {
            shared,
            progress,
            io: Some(Io::new(cfg.io, n_conns)?),
            ops: Vec::new(),
            events: 0,
            conns,
            pacer: match cfg.thread_rate() {
                // Every thread's schedule starts with the run's clock (warm-up included).
                Some(rate) => Pacer::open(Schedule { start: None, rate }, cfg.requests_of(index)),
                None => Pacer::closed(cfg.requests_of(index)),
            },
            rec: Recorder::new(
                cfg.variants.len(),
                // With one group (`--group-by none`) the run's latency is the group's.
                cfg.pool.as_ref().filter(|p| p.group_by.is_some()).map_or(0, |p| p.groups.len()),
                shared.intervals,
            ),
            plain: if cfg.tls.is_some() {
                vec![0u8; READ_BUF].into_boxed_slice()
            } else {
                Box::default()
            },
            outstanding: 0,
            turn_in_flight: 0,
            turn_answers: 0,
            turn_linger: Duration::ZERO,
            turn_lingered: false,
            turn_behind: false,
            turn_busy: 0,
            linger: Linger::new(if cfg.rate.is_none() { cfg.linger } else { Duration::ZERO }),
            held_from: Duration::ZERO,
            open: 0,
            idle: VecDeque::new(),
            waiting_below: 0,
            measuring: false,
            measure_start: now,
            polled: Duration::ZERO,
            tick,
            index,
            scan_pos: 0,
            scan_per_tick: n_conns.div_ceil(sweep_ticks as usize).max(FULL_SCAN),
            source_start: first_conn as u64,
            source_n: 0,
            send_interval,
            log_index: 0,
            log_next: now,
            started: false,
            setup: SetupCounts::default(),
            cursors: shared
                .groups
                .iter()
                .map(|g| first_position(cfg, index, g.cycle.len()))
                .collect(),
            ids: crate::template::Ids::new(index, cfg.threads, cfg.lane.0, cfg.lane.1),
        })
    }

    /// Keep-alive connections (closed or open loop): opens every connection before the run's
    /// clock starts, and returns when each is open or has failed once (a failed one is retried
    /// in the run), or on stop, so connection setup is not measured as load. The connects count
    /// in the run's connection figures unless there is a warm-up. With a connection per request
    /// nothing is done: connects are part of each request.
    ///
    /// At most [`CONNECT_WINDOW`] connects are under way at once, each timed from its own
    /// start: thousands of SYNs in one burst overflow the target's accept queue (a dropped SYN
    /// is sent again only after 1 s, then 3 s) and, on io_uring, the completion queue, and a
    /// connect queued behind thousands of others would time out before it was even sent.
    pub(crate) fn connect_phase(&mut self) -> stdio::Result<()> {
        if !self.shared.cfg.opens_first() {
            return Ok(());
        }
        self.measuring = self.shared.cfg.warmup.is_zero();
        let n = self.conns.len();
        // Connections below `oldest` are open or failed; from `next` on they are not started.
        let (mut oldest, mut next) = (0, 0);
        let mut now = Instant::now();
        let mut next_tick = now + self.tick;
        while !self.shared.stopping() {
            while oldest < next && !self.conns[oldest].phase.is_opening() {
                oldest += 1;
            }
            let under_way = self.conns[oldest..next].iter().filter(|c| c.phase.is_opening());
            let room = CONNECT_WINDOW.saturating_sub(under_way.count());
            let end = (next + room).min(n);
            for idx in next..end {
                self.connect(idx, now);
            }
            next = end;
            if oldest == n {
                break;
            }
            self.wait(next_tick.saturating_duration_since(now))?;
            now = Instant::now();
            if now >= next_tick {
                // Connect timeouts.
                self.on_tick(now);
                next_tick = now + self.tick;
            }
        }
        for c in &mut self.conns {
            // Idle since it opened, as a kept-alive connection is between requests.
            c.s.set_reused(c.phase == Phase::Open);
        }
        self.setup.opened = self.conns.iter().filter(|c| c.phase == Phase::Open).count();
        self.setup.failed = self.conns.len() - self.setup.opened;
        Ok(())
    }

    pub(crate) fn run(mut self, clock: Clock) -> stdio::Result<ThreadOutcome> {
        let mut cpu_start = CpuTime::of_current_thread();
        let mut now = self.begin(&clock);
        let open = self.pacer.is_open();
        let mut next_tick = now + self.tick;
        loop {
            let (timeout, spin) = self.next_wait(now, &clock, next_tick);
            let polled_at = spin.then(Instant::now);
            let granted = self.pacer.next_slot();
            let n = self.wait(timeout)?;
            now = Instant::now();
            if !self.measuring && now >= clock.measure_start {
                self.open_window();
                cpu_start = CpuTime::of_current_thread();
                self.polled = Duration::ZERO;
            }
            let timed_out = clock.stop_at.is_some_and(|s| now >= s);
            if open && !timed_out {
                // A slot at or past the stop would go out only to be in flight at the stop.
                self.send_due(now);
            }
            if let (Some(t), 0, true) = (polled_at, n, self.measuring) {
                if self.pacer.next_slot() == granted {
                    // A turn of the loop that found nothing to do: waiting, not work.
                    self.polled += now.saturating_duration_since(t);
                }
            }
            if now >= self.log_next {
                self.rotate_interval(now);
            }
            if now >= next_tick {
                self.on_tick(now);
                next_tick = now + self.tick;
            }
            let drained = self.pacer.exhausted() && self.outstanding == 0;
            if timed_out || drained || self.shared.stopping() {
                break;
            }
        }
        Ok(self.finish(now, CpuTime::of_current_thread().since(cpu_start)))
    }

    /// The warm-up is over: from now every response that completes counts, whenever its
    /// request was sent (as wrk, hey and oha count a window). The requests still outstanding
    /// from the warm-up are carried into the window: counted as sent, so the accounting
    /// (sent = completed + failed + in flight at the stop) stays exact, and marked warm.
    /// Counting only requests sent in the window would drop one response per connection
    /// from a window of responses that each took a latency: a bias of latency / duration.
    fn open_window(&mut self) {
        self.measuring = true;
        self.held_from = self.linger.held_for();
        let mut carried = 0;
        for c in &mut self.conns {
            c.s.each_request_mut(|r| {
                if !r.counted {
                    r.counted = true;
                    carried += 1;
                }
            });
            if c.waiting > 0 && !c.waiting_counted {
                c.waiting_counted = true;
                carried += c.waiting;
            }
            c.s.window_opened();
        }
        self.rec.sent += carried;
        self.rec.from_warmup += carried;
    }

    /// The run's clock has started: requests may go on every open connection.
    fn begin(&mut self, clock: &Clock) -> Instant {
        let now = Instant::now();
        self.measure_start = clock.measure_start;
        self.rec.stalls.open(clock.measure_start);
        self.pacer.begin(clock.start);
        self.log_next = clock.measure_start + LOG_INTERVAL;
        self.measuring = now >= clock.measure_start;
        if self.pacer.is_open() {
            // The kernel lets a timed wait run up to the thread's timer slack (50 us by default)
            // late; a schedule wants its wake-ups on time.
            qpslab_sys::thread::set_timer_slack(1);
        }
        self.started = true;
        for idx in 0..self.conns.len() {
            if !matches!(self.conns[idx].phase, Phase::Connecting | Phase::Handshaking) {
                self.issue(idx, now);
            }
        }
        if self.pacer.is_open() {
            self.send_due(now);
        }
        now
    }

    /// How long this turn may wait for events, and whether it polls instead of sleeping.
    #[inline]
    fn next_wait(&self, now: Instant, clock: &Clock, next_tick: Instant) -> (Duration, bool) {
        let mut wake = clock.stop_at.map_or(next_tick, |s| s.min(next_tick));
        if !self.measuring {
            // The window opens on time: responses from then on count.
            wake = wake.min(clock.measure_start);
        }
        let next_due = self.pacer.next_due();
        if let (Some(due), false) = (next_due, self.idle.is_empty()) {
            // Requests due within one quantum go in one wake-up: at high rates a wake-up per
            // request would cost more CPU than the requests.
            wake = wake.min(due.max(now + WAKE_QUANTUM));
        }
        let cfg = self.shared.cfg;
        let spin = match cfg.poll {
            PollMode::Spin => true,
            PollMode::Sleep => false,
            PollMode::Auto => cfg.auto_poll && next_due.is_some_and(|due| due <= now + SPIN_WINDOW),
        };
        let timeout = if spin { Duration::ZERO } else { wake.saturating_duration_since(now) };
        (timeout, spin)
    }

    /// What the thread hands back when it stops.
    fn finish(mut self, now: Instant, cpu: CpuTime) -> ThreadOutcome {
        self.settle();
        self.publish();
        if let Some(h) = self.rec.take_interval() {
            // The last, partial interval.
            (self.send_interval)(self.log_index, h);
        }
        let mut in_flight_by_target = vec![0; self.shared.cfg.variants.len()];
        let mut waiting = crate::Waiting::default();
        for c in &mut self.conns {
            if let Some(m) = c.s.take_first_message() {
                let g = self.rec.grpc.get_or_insert_with(Default::default);
                g.first_response.get_or_insert(m);
            }
        }
        for c in &self.conns {
            if let Some(rtt) = c.sock.as_ref().and_then(qpslab_sys::net::min_rtt_us) {
                waiting.min_rtt_us.push(rtt);
            }
            if let Some(since) = c.oldest_counted_outstanding() {
                let us = now.saturating_duration_since(since).as_micros() as u64;
                match c.answered {
                    0 => waiting.unanswered_us.push(us),
                    _ => waiting.answered_us.push(us),
                }
            }
            c.add_counted_outstanding(self.next_target(c.s.group()), &mut in_flight_by_target);
            if let Some(counts) = c.s.h2_counts() {
                self.rec.h2.get_or_insert_with(Default::default).merge(counts);
            }
        }
        ThreadOutcome {
            in_flight: in_flight_by_target.iter().sum(),
            cpu,
            polled: self.polled,
            lingered: self.linger.held_for().saturating_sub(self.held_from),
            ended: now,
            due_unsent: if self.pacer.is_open() { self.pacer.due(now) } else { 0 },
            idle_at_stop: self.idle.len(),
            in_flight_by_target,
            setup: self.setup,
            rec: self.rec,
            waiting,
        }
    }

    /// A second of measurement ended: notes its counts and (`--log`) hands its histogram to
    /// the watcher.
    fn rotate_interval(&mut self, now: Instant) {
        rotate_seconds(
            &mut self.rec,
            self.send_interval,
            (&mut self.log_index, &mut self.log_next),
            now,
        );
    }

    /// Gives the connection as many requests as the pacer allows (none before the run's clock
    /// starts).
    fn issue(&mut self, idx: usize, now: Instant) {
        if !self.started {
            return;
        }
        let measure_start = self.measure_start;
        let depth = self.shared.cfg.pipeline as u64;
        let c = &mut self.conns[idx];
        match c.phase {
            Phase::Connecting | Phase::Handshaking => {}
            Phase::Closed => {
                if c.s.in_flight() > 0 {
                    // Requests to write again once the new connection is open.
                    return self.connect(idx, now);
                }
                if c.retry_at.is_some_and(|t| now < t) {
                    return;
                }
                let (k, slot) = self.pacer.grant(1, now);
                if k == 0 {
                    return self.mark_idle(idx);
                }
                let intended = self.pacer.is_open().then(|| self.pacer.slot_time(slot, now));
                let warm = intended.unwrap_or(now) < measure_start;
                let counted = self.measuring || !warm;
                if counted && intended.is_some() {
                    self.rec.waited_for_connection += u64::from(slot < self.waiting_below);
                }
                let c = &mut self.conns[idx];
                c.retry_at = None;
                c.waiting = k;
                c.waiting_counted = counted;
                c.waiting_warm = warm;
                c.waiting_intended = intended;
                self.commit(k, u64::from(counted));
                self.connect(idx, now);
            }
            Phase::Open if c.send_error.is_some() => {}
            Phase::Open => {
                if c.s.writing() {
                    // A batch partly written, or (HTTP/2) acknowledgements queued by a read:
                    // HTTP/2's requests join them in the same send.
                    self.flush(idx);
                    let c = &self.conns[idx];
                    if c.phase != Phase::Open || (c.s.writing() && !c.s.appends()) {
                        return;
                    }
                }
                let c = &self.conns[idx];
                let free = c.s.capacity(depth as usize).saturating_sub(c.s.in_flight()) as u64;
                if free == 0 {
                    return;
                }
                let (k, first) = self.pacer.grant(free, now);
                if k == 0 {
                    return self.mark_idle(idx);
                }
                let due = if self.pacer.is_open() {
                    Due::Slots(first)
                } else {
                    let warm = now < measure_start;
                    Due::Now { counted: self.measuring || !warm, warm }
                };
                let counted = self.start_write(idx, k, due, now);
                self.commit(k, counted);
                self.flush(idx);
            }
        }
    }

    /// Open loop: remembers a connection that could take a request when one falls due.
    fn mark_idle(&mut self, idx: usize) {
        if self.pacer.is_open() && !self.pacer.exhausted() && !self.conns[idx].idle {
            self.conns[idx].idle = true;
            self.idle.push_back(idx);
        }
    }

    /// Open loop: hands due requests to idle connections. Each connection is tried once per
    /// call, so a connection that cannot take one (still writing) does not spin the loop.
    fn send_due(&mut self, now: Instant) {
        for _ in 0..self.idle.len() {
            if self.pacer.due(now) == 0 {
                return;
            }
            let Some(idx) = self.idle.pop_front() else { break };
            self.conns[idx].idle = false;
            self.issue(idx, now);
        }
        if self.idle.is_empty() {
            // Every connection is busy: the requests due now wait for one to free.
            let due = self.pacer.due(now);
            if due > 0 {
                self.waiting_below = self.waiting_below.max(self.pacer.next_slot() + due);
            }
        }
    }

    /// The target of this thread's next request of group `g`.
    fn next_target(&self, g: usize) -> usize {
        self.shared.groups[g].cycle.variant(self.cursors[g]) as usize
    }

    fn commit(&mut self, k: u64, counted: u64) {
        self.outstanding += k;
        self.rec.sent += counted;
    }

    /// Queues `k` requests on the connection; returns how many count (meant to go after
    /// warm-up).
    fn start_write(&mut self, idx: usize, k: u64, due: Due, now: Instant) -> u64 {
        let (measure_start, measuring) = (self.measure_start, self.measuring);
        let c = &mut self.conns[idx];
        let group = &self.shared.groups[c.s.group()];
        let (pacer, rec, waiting_below) = (&self.pacer, &mut self.rec, self.waiting_below);
        let mut counted_n = 0;
        let cursor = &mut self.cursors[c.s.group()];
        let ids = &mut self.ids;
        c.s.queue(group, cursor, k as usize, ids, |i, target, pos| {
            let i = i as u64;
            let (intended, counted, warm) = match due {
                Due::Now { counted, warm } => (now, counted, warm),
                Due::At(t) => (t, measuring || t >= measure_start, t < measure_start),
                Due::Slots(first) => {
                    let t = pacer.slot_time(first + i, now);
                    (t, measuring || t >= measure_start, t < measure_start)
                }
            };
            if counted {
                counted_n += 1;
                if !matches!(due, Due::Now { .. }) {
                    rec.lag(now.saturating_duration_since(intended).as_micros() as u64);
                }
                if let Due::Slots(first) = due {
                    rec.waited_for_connection += u64::from(first + i < waiting_below);
                }
            }
            Req { sent_at: now, intended, counted, warm, retried: false, target, pos, id: 0 }
        });
        counted_n
    }

    fn connect(&mut self, idx: usize, now: Instant) {
        let cfg = self.shared.cfg;
        let peer = &self.shared.groups[self.conns[idx].s.group()].peer;
        // A port another socket holds (a listener, a connection without SO_REUSEADDR) is
        // skipped for the next one of the thread's share.
        let mut tries = 0;
        let opened = loop {
            let local = self.pick_local();
            match open_socket(cfg, peer, local) {
                Err(e)
                    if local.is_some_and(|l| l.port() != 0)
                        && port_taken(&e)
                        && tries < PORT_TRIES =>
                {
                    tries += 1;
                }
                r => break r,
            }
        };
        let sock = match opened {
            Ok(s) => s,
            Err(e) => return self.fail(idx, ErrorClass::Connect, &e, now),
        };
        let c = &mut self.conns[idx];
        c.sock = Some(sock);
        c.phase = Phase::Connecting;
        c.opened_at = now;
        self.ops.push(Op::Connect(self.conn_id(idx)));
    }

    /// The local address the next connection binds to: the next of `--source`; None: the
    /// kernel chooses at connect.
    fn pick_local(&mut self) -> Option<std::net::SocketAddr> {
        let cfg = self.shared.cfg;
        let range = cfg.source?;
        self.source_n += 1;
        Some(range.pick(self.index, cfg.threads, self.source_start, self.source_n - 1))
    }

    /// A connect to a port of our choosing found its tuple taken (a TIME_WAIT that may not be
    /// reused yet, or another socket's): opened again on the next port, up to [`PORT_TRIES`]
    /// times in a row. Whether it was.
    fn connect_on_next_port(&mut self, idx: usize, e: &stdio::Error, now: Instant) -> bool {
        let cfg = self.shared.cfg;
        let chosen = cfg.source.is_some_and(|r| r.ports.is_some());
        let c = &mut self.conns[idx];
        if !chosen || !port_taken(e) || c.port_tries >= PORT_TRIES {
            return false;
        }
        c.port_tries += 1;
        self.drop_socket(idx);
        let c = &mut self.conns[idx];
        c.gen = c.gen.wrapping_add(1);
        c.phase = Phase::Closed;
        self.connect(idx, now);
        true
    }

    /// A connect finished with `status`.
    fn connected(&mut self, idx: usize, status: stdio::Result<()>) {
        let now = Instant::now();
        if let Err(e) = status {
            if self.connect_on_next_port(idx, &e, now) {
                return;
            }
            self.conns[idx].port_tries = 0;
            return self.fail(idx, ErrorClass::Connect, &e, now);
        }
        self.conns[idx].port_tries = 0;
        self.conns[idx].phase = Phase::Open;
        self.open += 1;
        self.ops.push(Op::Receive(self.conn_id(idx)));
        let c = &mut self.conns[idx];
        if self.measuring {
            self.rec.connects += 1;
            self.rec.reconnects += u64::from(c.ever_connected);
            let us = now.saturating_duration_since(c.opened_at).as_micros() as u64;
            self.rec.connect_latency.saturating_record(us.max(1));
        }
        let group = &self.shared.groups[c.s.group()];
        if let (Some(tls), Some(name)) = (&self.shared.cfg.tls, &group.endpoint.tls_name) {
            match rustls::ClientConnection::new(tls.config.clone(), name.clone()) {
                Ok(t) => {
                    let c = &mut self.conns[idx];
                    c.t = Transport::tls(t, now);
                    c.phase = Phase::Handshaking;
                    return self.push(idx);
                }
                Err(e) => {
                    return self.fail_with(idx, ErrorClass::Tls, crate::tls::describe(&e), now)
                }
            }
        }
        self.ready(idx, now);
    }

    /// https: the TLS handshake is done (counted by kind, timed apart from requests).
    fn handshake_done(&mut self, idx: usize, now: Instant) {
        let c = &mut self.conns[idx];
        let Some(h) = c.t.handshake() else { return self.ready(idx, now) };
        if let Err(msg) = c.s.speaks(h.conn.alpn_protocol()) {
            return self.wrong_protocol(idx, ErrorClass::Tls, msg, now);
        }
        c.phase = Phase::Open;
        if self.measuring {
            if h.resumed() {
                self.rec.tls_resumed += 1;
            } else {
                self.rec.tls_full += 1;
            }
            let us = now.saturating_duration_since(h.began).as_micros() as u64;
            self.rec.handshake_latency.saturating_record(us.max(1));
            if self.rec.tls_negotiated.is_none() {
                // Once per run and thread: what the server chose.
                self.rec.tls_negotiated = Some(h.negotiated());
            }
        }
        self.ready(idx, now);
    }

    /// The connection can take requests (TCP open, and the TLS handshake done for https).
    fn ready(&mut self, idx: usize, now: Instant) {
        let c = &mut self.conns[idx];
        // With a connection per request, a new connection is the plan, not a reconnect.
        c.ever_connected = !self.shared.cfg.conn_per_request;
        self.progress.connected.store(true, Ordering::Relaxed);
        if c.s.in_flight() > 0 {
            return self.resend(idx, now);
        }
        let waiting = std::mem::take(&mut c.waiting);
        let now_due = Due::Now { counted: c.waiting_counted, warm: c.waiting_warm };
        let due = c.waiting_intended.take().map_or(now_due, Due::At);
        if waiting > 0 {
            self.start_write(idx, waiting, due, now);
            self.flush(idx);
        }
        if self.conns[idx].phase == Phase::Open {
            self.issue(idx, now);
        }
    }

    /// Parses bytes that arrived on the connection; false when that failed it (handled).
    fn take_bytes(&mut self, idx: usize, data: &[u8], now: Instant) -> bool {
        if self.measuring {
            self.rec.bytes_read += data.len() as u64;
        }
        if !std::mem::replace(&mut self.conns[idx].heard, true) {
            if let Some(why) = self.conns[idx].s.other_protocol(data) {
                self.wrong_protocol(idx, ErrorClass::Parse, why, now);
                return false;
            }
        }
        match self.absorb(idx, data, now) {
            Ok(Absorbed::Keep) => true,
            Ok(Absorbed::Close) => {
                self.close_after_response(idx);
                true
            }
            Err(msg) => {
                self.fail_with(idx, ErrorClass::Parse, msg, now);
                false
            }
        }
    }

    /// Parses `data` and records every complete response.
    fn absorb(&mut self, idx: usize, data: &[u8], now: Instant) -> Result<Absorbed, String> {
        let (shared, rec, outstanding) = (self.shared, &mut self.rec, &mut self.outstanding);
        let turn_answers = &mut self.turn_answers;
        let c = &mut self.conns[idx];
        let group = &shared.groups[c.s.group()];
        let mut answered = 0;
        let absorbed =
            c.s.absorb(data, group, &shared.heads, shared.cfg.conn_per_request, |req, resp| {
                *outstanding -= 1;
                *turn_answers += 1;
                answered += u32::from(req.counted);
                shared.record(rec, req, resp, now);
            });
        c.answered = c.answered.saturating_add(answered);
        c.s.take_message_gaps(|us| rec.message_gap(us));
        while let Some((req, msg)) = c.s.take_reset() {
            // One stream failed; the connection goes on.
            *outstanding -= 1;
            if req.counted {
                if let Some(t) = rec.per_target.get_mut(req.target as usize) {
                    t.failed += 1;
                }
                rec.failure(ErrorClass::Reset, 1, || msg);
            }
        }
        absorbed
    }

    fn on_eof(&mut self, idx: usize) {
        let now = Instant::now();
        let (shared, rec, outstanding) = (self.shared, &mut self.rec, &mut self.outstanding);
        let c = &mut self.conns[idx];
        let mut answered = 0;
        let ended = c.s.eof(|req, resp| {
            *outstanding -= 1;
            answered += u32::from(req.counted);
            shared.record(rec, req, resp, now);
        });
        c.answered = c.answered.saturating_add(answered);
        match ended {
            Ok(Ended::Response) => self.close_after_response(idx),
            Ok(Ended::Idle) if c.waiting == 0 => {
                // The server closed an idle keep-alive connection: reopen, nothing failed.
                self.close(idx);
                self.setup.closed_by_server += usize::from(!self.started);
            }
            Ok(_) if c.send_error.is_some() => {
                let e = c.send_error.take().unwrap_or_else(|| stdio::ErrorKind::BrokenPipe.into());
                return self.closed_before_response(idx, ErrorClass::Write, &e, now);
            }
            Ok(_) => {
                let closed = stdio::Error::new(
                    stdio::ErrorKind::UnexpectedEof,
                    "connection closed by the server before the response",
                );
                return self.closed_before_response(idx, ErrorClass::Read, &closed, now);
            }
            Err(e) => return self.fail_with(idx, ErrorClass::Read, e, now),
        }
        self.issue(idx, now);
    }

    /// The server announced the close (`Connection: close`, or a close-delimited body).
    /// Requests pipelined behind that response were not processed (RFC 9112, 9.6): they are
    /// written again, in order, on a new connection (9.3.2), keeping their schedule slots, so
    /// their latency includes the reconnect.
    fn close_after_response(&mut self, idx: usize) {
        let k = self.rewind_and_close(idx);
        if self.measuring {
            self.rec.retried += k;
        }
    }

    /// Closes the socket, keeping its unreused requests to be written again on the next
    /// connection; returns how many there are.
    fn rewind_and_close(&mut self, idx: usize) -> u64 {
        let k = self.conns[idx].s.unanswered();
        self.close_socket(idx);
        k as u64
    }

    /// The connection failed with requests written and no byte of their response read. On a
    /// reused keep-alive connection this is the race RFC 9112 9.3.1 describes: the server closed
    /// the idle connection as the requests went out, so they were not processed. Idempotent
    /// requests are then sent again, once, on a new connection (as browsers and curl do) and
    /// counted apart; anything else fails them.
    fn closed_before_response(
        &mut self,
        idx: usize,
        class: ErrorClass,
        err: &stdio::Error,
        now: Instant,
    ) {
        let shared = self.shared;
        let c = &mut self.conns[idx];
        let race =
            shared.cfg.retry_closed && c.waiting == 0 && c.s.retry_after_race(&shared.idempotent);
        if !race {
            return self.fail(idx, class, err, now);
        }
        let k = self.rewind_and_close(idx);
        if self.measuring {
            self.rec.race_retried += k;
            self.rec.race_closes += 1;
        }
        self.issue(idx, now);
    }

    /// Writes the connection's unreused requests again, on its new connection.
    fn resend(&mut self, idx: usize, now: Instant) {
        let c = &mut self.conns[idx];
        c.s.resend(&self.shared.groups[c.s.group()], now);
        self.flush(idx);
    }

    fn fail(&mut self, idx: usize, class: ErrorClass, err: &stdio::Error, now: Instant) {
        self.fail_with(idx, class, io_message(err), now);
    }

    /// Fails every request on the connection, closes it and opens it again when there is work.
    fn fail_with(&mut self, idx: usize, class: ErrorClass, msg: String, now: Instant) {
        if !self.started && self.setup.example.is_none() {
            self.setup.example = Some(msg.clone());
        }
        let c = &self.conns[idx];
        let mut by_target = std::mem::take(&mut self.rec.per_target);
        let mut counted = 0;
        let mut add = |t: usize, n: u64| {
            if let Some(tc) = by_target.get_mut(t) {
                tc.failed += n;
            }
            counted += n;
        };
        c.each_counted_outstanding(self.next_target(c.s.group()), &mut add);
        self.rec.per_target = by_target;
        self.outstanding -= c.s.in_flight() as u64 + c.waiting;
        self.rec.failure(class, counted, || msg);
        self.close(idx);
        if matches!(class, ErrorClass::Connect | ErrorClass::Tls) {
            self.conns[idx].retry_at = Some(now + CONNECT_BACKOFF);
        }
        self.issue(idx, now);
    }

    /// The server speaks another protocol than the run's: the connection fails as any other
    /// would, and the run ends (every thread stops at its next turn) as a set-up error.
    fn wrong_protocol(&mut self, idx: usize, class: ErrorClass, why: String, now: Instant) {
        let group = self.conns[idx].s.group();
        let url = self.shared.groups[group]
            .cycle
            .variants
            .first()
            .map_or("", |&v| self.shared.cfg.variants.url(v as usize));
        let _ = self.shared.wrong_protocol.set((url.to_string(), why.clone()));
        self.fail_with(idx, class, why, now);
    }

    /// Closes the connection and forgets its requests (reused, failed or never sent).
    fn close(&mut self, idx: usize) {
        self.close_socket(idx);
        let c = &mut self.conns[idx];
        c.s.forget();
        c.waiting = 0;
        c.waiting_intended = None;
    }

    /// Closes the socket; requests still in flight stay (to be written again).
    fn close_socket(&mut self, idx: usize) {
        self.drop_socket(idx);
        let c = &mut self.conns[idx];
        c.gen = c.gen.wrapping_add(1);
        c.phase = Phase::Closed;
        c.heard = false;
        c.send_error = None;
        c.t = Transport::Plain;
        c.s.closed();
    }

    /// Timer work: expired requests and connects, connect retries, progress. Up to
    /// [`FULL_SCAN`] connections every connection is checked on every tick; above, a window
    /// moves round so that each is checked at least every `timeout / 10` (at most 1 s): a
    /// timeout then fires within that much of its expiry, and a tick stays cheap with 50,000
    /// connections.
    fn on_tick(&mut self, now: Instant) {
        let timeout = self.shared.cfg.timeout;
        let n = self.conns.len();
        for step in 0..self.scan_per_tick.min(n) {
            let idx = (self.scan_pos + step) % n;
            let c = &self.conns[idx];
            match c.phase {
                Phase::Open => {
                    if c.s.oldest_sent().is_some_and(|t| now.duration_since(t) >= timeout) {
                        let mut msg = format!("no response within {}", fmt_duration(timeout));
                        if c.s.flow_stalled(&self.shared.groups[c.s.group()]) {
                            msg.push_str(
                                "; a request body was still waiting for the server's HTTP/2 \
                                 flow-control window (a flow-control stall)",
                            );
                        }
                        self.fail_with(idx, ErrorClass::Timeout, msg, now);
                    }
                }
                Phase::Connecting => {
                    let limit = self.shared.cfg.connect_timeout;
                    if now.duration_since(c.opened_at) >= limit {
                        let msg = format!("connect timed out after {}", fmt_duration(limit));
                        self.fail_with(idx, ErrorClass::Connect, msg, now);
                    }
                }
                Phase::Handshaking => {
                    let limit = self.shared.cfg.connect_timeout;
                    let began = c.t.handshake().map_or(c.opened_at, |h| h.began);
                    if now.duration_since(began) >= limit {
                        let msg = format!(
                            "TLS handshake failure: no handshake within {} (the server stalled)",
                            fmt_duration(limit)
                        );
                        self.fail_with(idx, ErrorClass::Tls, msg, now);
                    }
                }
                Phase::Closed => {
                    if c.retry_at.is_some_and(|t| now >= t) {
                        self.issue(idx, now);
                    }
                }
            }
        }
        if n > 0 {
            self.scan_pos = (self.scan_pos + self.scan_per_tick) % n;
        }
        self.publish();
    }

    fn publish(&self) {
        self.progress.sent.store(self.rec.sent, Ordering::Relaxed);
        self.progress.completed.store(self.rec.completed, Ordering::Relaxed);
        self.progress.failed.store(self.rec.failed, Ordering::Relaxed);
        self.progress.ok.store(self.rec.ok, Ordering::Relaxed);
        for (a, e) in self.progress.errors.iter().zip(self.rec.errors) {
            a.store(e, Ordering::Relaxed);
        }
        if let Some(g) = &self.rec.grpc {
            for (a, n) in self.progress.grpc.iter().zip(g.codes) {
                a.store(n, Ordering::Relaxed);
            }
        }
        self.progress.open.store(self.open, Ordering::Relaxed);
        self.progress.reconnects.store(self.rec.reconnects, Ordering::Relaxed);
        self.progress.lag_us.store(self.rec.lag_total_us, Ordering::Relaxed);
        self.progress.lagged.store(self.rec.send_lag.len(), Ordering::Relaxed);
        if let Some((scheduled, unsent)) = self.pacer.owed(Instant::now()) {
            self.progress.scheduled.store(scheduled, Ordering::Relaxed);
            self.progress.due_unsent.store(unsent, Ordering::Relaxed);
        }
    }
}

impl Conn {
    /// Calls `f(target, n)` for the counted requests still unreused on the connection: those
    /// written, and the ones waiting for the connect (counted to `next`, the target of the
    /// thread's next request of the group).
    fn each_counted_outstanding(&self, next: usize, f: &mut impl FnMut(usize, u64)) {
        self.s.each_request(|r| {
            if r.counted {
                f(r.target as usize, 1);
            }
        });
        if self.waiting_counted && self.waiting > 0 {
            f(next, self.waiting);
        }
    }

    /// When the oldest counted request this connection still waits for was due: its
    /// intended send time, or, for requests committed while it was opening, when it began
    /// to open (its scheduled slot, open loop).
    fn oldest_counted_outstanding(&self) -> Option<Instant> {
        let mut oldest: Option<Instant> = None;
        self.s.each_request(|r| {
            if r.counted {
                oldest = Some(oldest.map_or(r.intended, |o| o.min(r.intended)));
            }
        });
        if oldest.is_none() && self.waiting_counted && self.waiting > 0 {
            oldest = Some(self.waiting_intended.unwrap_or(self.opened_at));
        }
        oldest
    }

    fn add_counted_outstanding(&self, next: usize, by_target: &mut [u64]) {
        self.each_counted_outstanding(next, &mut |t, n| by_target[t] += n);
    }
}

/// Where thread `index` starts in a request cycle of `len`: with a `-n` budget, after the
/// requests of the threads before it, so the threads' requests are the cycle's positions
/// from 0 in turn and every position is requested equally often when the budget is a multiple
/// of the cycle; without one, spread evenly over the cycle.
pub(crate) fn first_position(cfg: &LoadConfig, index: usize, len: usize) -> usize {
    let before: u64 = match cfg.requests {
        Some(_) => (0..index).filter_map(|i| cfg.requests_of(i)).sum(),
        None => (index * len / cfg.threads.max(1)) as u64,
    };
    (before % len.max(1) as u64) as usize
}

/// A new socket for a connection to `peer`, bound to `local` when given.
fn open_socket(
    cfg: &LoadConfig,
    peer: &SockAddr,
    local: Option<std::net::SocketAddr>,
) -> stdio::Result<Socket> {
    let tcp = !peer.is_unix();
    let protocol = tcp.then_some(Protocol::TCP);
    let sock = Socket::new(peer.domain(), Type::STREAM.nonblocking().cloexec(), protocol)?;
    if !tcp {
        // A unix socket: no Nagle, no handshake, no TIME_WAIT, no source address.
        return Ok(sock);
    }
    sock.set_nodelay(true)?;
    if cfg.conn_per_request {
        // The handshake's last ACK waits for the request and leaves with it: one packet
        // fewer per connection for both sides (h1load's -F).
        sock.set_quickack(false)?;
    }
    if cfg.rst_close {
        // Closing sends a reset instead of a FIN: no TIME_WAIT on this side.
        sock.set_linger(Some(Duration::ZERO))?;
    }
    if let Some(local) = local {
        bind_source(&sock, local)?;
    }
    Ok(sock)
}

/// Tries in a row for a port of our choosing before the connect fails: the ports a thread
/// takes in turn are the ones longest since their last use, so more than a few taken in a
/// row means the range is used up.
const PORT_TRIES: u32 = 16;

/// The error of a bind or connect whose port or tuple is taken.
fn port_taken(e: &stdio::Error) -> bool {
    matches!(e.kind(), stdio::ErrorKind::AddrInUse | stdio::ErrorKind::AddrNotAvailable)
}

/// Binds a socket to its `--source` address; port 0 leaves the port to connect(), which picks
/// one free for this destination (IP_BIND_ADDRESS_NO_PORT), so each source address gives the
/// whole ephemeral range to every destination.
fn bind_source(sock: &Socket, local: std::net::SocketAddr) -> stdio::Result<()> {
    if local.port() == 0 {
        qpslab_sys::net::bind_address_no_port(sock)?;
    } else {
        // The port may still be in TIME_WAIT from an earlier connection of this run.
        sock.set_reuse_address(true)?;
    }
    sock.bind(&SockAddr::from(local))
        .map_err(|e| stdio::Error::new(e.kind(), format!("bind {local}: {}", io_message(&e))))
}

impl Shared<'_> {
    /// The run ends now: a stop was asked for, or the server speaks another protocol.
    pub(crate) fn stopping(&self) -> bool {
        self.stop_flag.load(Ordering::Relaxed) || self.wrong_protocol.get().is_some()
    }

    /// Records a response to a counted request: status, ok-ness, latency from its intended
    /// send time and, in open loop, from the write. A method of the run-wide inputs (not of the
    /// worker), so it can be called while a connection is borrowed.
    #[inline]
    pub(crate) fn record(&self, rec: &mut Recorder, req: Req, resp: Response, now: Instant) {
        if req.counted {
            let ok = match resp.grpc {
                // A call succeeds with OK alone, whatever the HTTP status.
                Some(o) => {
                    let g = rec.grpc.get_or_insert_with(Default::default);
                    g.call(o);
                    g.messages_in += resp.messages;
                    o.code() == 0
                }
                None => resp.status < 400 || self.cfg.accept_status.contains(resp.status),
            };
            rec.target_response(req.target as usize, ok);
            if req.warm && self.cfg.exclude_warmup_latency {
                rec.response_unmeasured(resp.status, ok);
                return;
            }
            let us = now.saturating_duration_since(req.intended).as_micros() as u64;
            rec.response(resp.status, ok, us);
            if let Some(&g) = self.target_group.get(req.target as usize) {
                rec.group_latency(g as usize, us);
            }
            // A closed loop's request is due when written: its latency is from the write.
            let from_sent = if self.cfg.rate.is_some() {
                let u = now.saturating_duration_since(req.sent_at).as_micros() as u64;
                rec.uncorrected(u);
                u
            } else {
                us
            };
            rec.stalls.response(now, req.sent_at, from_sent);
        }
    }
}

/// The seconds of measurement that ended by `now`: each one's counts noted and (`--log`) its
/// histogram handed to the watcher; `at` is the current second's index and when it ends. Both
/// loops (TCP and QUIC) keep their seconds this way.
pub(crate) fn rotate_seconds(
    rec: &mut Recorder,
    send: &dyn Fn(u32, Histogram<u64>),
    at: (&mut u32, &mut Instant),
    now: Instant,
) {
    let (index, next) = at;
    while now >= *next {
        rec.end_second();
        if let Some(hist) = rec.take_interval() {
            send(*index, hist);
        }
        *index += 1;
        *next += LOG_INTERVAL;
    }
}

pub(crate) fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}
