//! io_uring, behind a safe API for one event loop per thread: a ring set up for a single
//! issuer with deferred task work (completions are posted only when this thread asks, in its
//! one `io_uring_enter` per loop turn that also submits), multishot accept, multishot receive
//! into a ring of provided buffers, and sends of buffers this module owns until the kernel's
//! completion (so no buffer can be freed or reused while the kernel reads it).
//!
//! Each request carries a `user_data` of the operation's kind (4 bits), the send slot (28
//! bits, sends only) and the caller's 32-bit token; a [`Completion`] gives them back, with the
//! received bytes (lent for the duration of the callback, then the buffer goes back to the
//! ring) or the send's buffer (returned for reuse).
//!
//! [`probe`] tells whether this kernel (and any seccomp filter or `kernel.io_uring_disabled`)
//! allows everything used here.

use std::io;
use std::os::fd::{IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::types::{BufRingEntry, Timespec};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use socket2::SockAddr;

/// What a request was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Accept,
    Recv,
    Send,
    Cancel,
    Close,
    Shutdown,
    Connect,
    /// A datagram (or a GRO batch of them) received by a multishot recvmsg into the ring's
    /// datagram buffers: [`Completion::datagram`].
    Datagram,
    /// A datagram (or a GSO batch) sent from a message this module owned until now.
    SendTo,
    /// The loop's own wake-ups (a timeout, or a no-op for a turn that must not wait); never
    /// handed to the caller.
    Timer,
}

impl Op {
    fn bits(self) -> u64 {
        match self {
            Op::Accept => 1,
            Op::Recv => 2,
            Op::Send => 3,
            Op::Cancel => 4,
            Op::Close => 5,
            Op::Shutdown => 6,
            Op::Timer => 7,
            Op::Connect => 8,
            Op::Datagram => 10,
            Op::SendTo => 11,
        }
    }

    fn of(bits: u64) -> Option<Op> {
        Some(match bits {
            1 => Op::Accept,
            2 => Op::Recv,
            3 => Op::Send,
            4 => Op::Cancel,
            5 => Op::Close,
            6 => Op::Shutdown,
            7 => Op::Timer,
            8 => Op::Connect,
            10 => Op::Datagram,
            11 => Op::SendTo,
            _ => return None,
        })
    }
}

fn user_data(op: Op, slot: u32, token: u32) -> u64 {
    (op.bits() << 60) | (u64::from(slot & 0x0fff_ffff) << 32) | u64::from(token)
}

/// One completion, as the loop sees it.
#[derive(Debug)]
pub struct Completion<'a> {
    pub op: Op,
    pub token: u32,
    /// The result: a byte count or a descriptor, or `-errno`.
    pub result: i32,
    /// A multishot request stays armed: more completions will come for it.
    pub more: bool,
    /// A receive's bytes (empty otherwise).
    pub data: &'a [u8],
    /// A send's buffer, back from the kernel, and where the send began in it.
    pub sent: Option<(Vec<u8>, usize)>,
    /// An accepted connection (a successful accept).
    pub sock: Option<Sock>,
    /// A received datagram (see [`Op::Datagram`]).
    pub datagram: Option<Received<'a>>,
}

/// A datagram a multishot recvmsg received: its sender, its bytes (lent for the callback),
/// and, when the kernel coalesced several of one flow (GRO), each one's size.
#[derive(Debug, Clone, Copy)]
pub struct Received<'a> {
    pub from: std::net::SocketAddr,
    pub data: &'a [u8],
    /// The size of each coalesced datagram (the last may be shorter); the length when the
    /// kernel did not coalesce.
    pub segment: usize,
    /// It did not fit its buffer (cut short: the caller should drop it).
    pub truncated: bool,
}

/// A socket as the ring names it: a descriptor, or a slot of the ring's table of registered
/// (direct) descriptors, which requests use without the per-request descriptor lookup and
/// reference count, and which exists nowhere but in the ring (closed by [`Submit::close`], or
/// when the ring goes).
#[derive(Debug)]
pub enum Sock {
    /// Closed on drop unless handed to [`Submit::close`].
    Fd(OwnedFd),
    Direct(u32),
}

impl Sock {
    /// What requests on this socket name.
    pub fn target(&self) -> Target {
        match self {
            Sock::Fd(fd) => Target::Fd(std::os::fd::AsRawFd::as_raw_fd(fd)),
            Sock::Direct(i) => Target::Direct(*i),
        }
    }
}

impl From<OwnedFd> for Sock {
    fn from(fd: OwnedFd) -> Sock {
        Sock::Fd(fd)
    }
}

/// The socket a request is for: a descriptor, or a slot of the ring's registered ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Fd(RawFd),
    Direct(u32),
}

impl From<RawFd> for Target {
    fn from(fd: RawFd) -> Target {
        Target::Fd(fd)
    }
}

impl Target {
    /// The request's descriptor field, and the flag that makes it a slot number.
    fn parts(self) -> (types::Fd, squeue::Flags) {
        match self {
            Target::Fd(fd) => (types::Fd(fd), squeue::Flags::empty()),
            Target::Direct(i) => (types::Fd(i as RawFd), squeue::Flags::FIXED_FILE),
        }
    }
}

/// Why a request failed, in the classes a loop acts on.
#[derive(Debug)]
pub enum Failure {
    /// Cancelled (by a cancel request, or at close).
    Cancelled,
    /// A receive found no provided buffer (they come back at the end of the turn).
    NoBuffers,
    /// Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM): back off.
    OutOfResources(io::Error),
    /// Try again (EAGAIN, EINTR).
    Retry,
    /// Anything else: the connection is done.
    Other(io::Error),
}

impl Completion<'_> {
    /// The failure, when the result is an error.
    pub fn failure(&self) -> Option<Failure> {
        let errno = self.result.checked_neg().filter(|e| *e > 0)?;
        Some(match errno {
            libc::ECANCELED => Failure::Cancelled,
            libc::ENOBUFS if matches!(self.op, Op::Recv | Op::Datagram) => Failure::NoBuffers,
            libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM => {
                Failure::OutOfResources(io::Error::from_raw_os_error(errno))
            }
            libc::EAGAIN | libc::EINTR => Failure::Retry,
            _ => Failure::Other(io::Error::from_raw_os_error(errno)),
        })
    }
}

/// ENFILE: for an accept into registered descriptors it means the ring's table is full, not
/// the system's file table.
pub fn is_enfile(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENFILE)
}

/// `--io`: the event loop a command asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoChoice {
    /// io_uring where it runs and was measured faster for this use, else epoll.
    #[default]
    Auto,
    Epoll,
    Uring,
}

/// The event loop in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Epoll,
    Uring,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Epoll => "epoll",
            Engine::Uring => "uring",
        }
    }
}

impl IoChoice {
    /// `auto`, `epoll` or `uring` (`--io`).
    pub fn parse(s: &str) -> Result<IoChoice, crate::config_error::ConfigError> {
        match s {
            "auto" => Ok(IoChoice::Auto),
            "epoll" => Ok(IoChoice::Epoll),
            "uring" | "io_uring" => Ok(IoChoice::Uring),
            _ => Err(crate::config_error::ConfigError::new(
                "--io",
                format!("{s:?} is not an event loop; use auto, epoll or uring"),
            )),
        }
    }

    /// The engine to run, and a note when `auto` fell back to epoll. `uring_faster`: io_uring
    /// was measured faster than epoll for this use (what `auto` prefers where it runs).
    pub fn resolve(
        self,
        uring_faster: bool,
    ) -> Result<(Engine, Option<String>), crate::config_error::ConfigError> {
        match self {
            IoChoice::Epoll => Ok((Engine::Epoll, None)),
            IoChoice::Uring => match probe() {
                Ok(()) => Ok((Engine::Uring, None)),
                Err(why) => Err(crate::config_error::ConfigError::new(
                    "--io",
                    format!("uring cannot run here: {why}; use --io epoll"),
                )),
            },
            IoChoice::Auto if !uring_faster => Ok((Engine::Epoll, None)),
            IoChoice::Auto => match probe() {
                Ok(()) => Ok((Engine::Uring, None)),
                Err(why) => {
                    Ok((Engine::Epoll, Some(format!("io_uring unavailable ({why}): using epoll"))))
                }
            },
        }
    }
}

/// The ring's size and its receive buffers.
#[derive(Debug, Clone, Copy)]
pub struct RingOptions {
    /// Submission queue entries (a power of two).
    pub entries: u32,
    /// Completion queue entries: at least four times `entries`, and room for a completion of
    /// every connection in one turn (a multishot receive per connection) so that completions
    /// do not spill into the kernel's slower overflow list; 0 takes four times `entries`.
    /// Rounded up to a power of two, at most [`MAX_COMPLETIONS`].
    pub completions: u32,
    /// Provided receive buffers (a power of two, at most 32768) and the size of each.
    pub buffers: u16,
    pub buffer_size: usize,
    /// Buffers provided at the start (0: all of `buffers`); each time a receive finds none,
    /// the ring provides twice as many, up to `buffers`. The kernel takes buffers in ring
    /// order, so every provided buffer is touched in turn: a ring that grows with its work
    /// keeps a quiet loop's memory to what it used.
    pub start_buffers: u16,
    /// A kernel thread polls the submission queue (`IORING_SETUP_SQPOLL`): no system call to
    /// submit, at the price of a thread that spins for [`SQPOLL_IDLE`] after the last
    /// request. It runs on the calling thread's CPU when that thread is pinned to one.
    pub sqpoll: bool,
    /// Slots of registered (direct) descriptors for accepted connections (0: none; accepted
    /// sockets are then plain descriptors). Without the room for the table (it may not exceed
    /// RLIMIT_NOFILE) the ring works without one: see [`Uring::direct`].
    pub direct: u32,
    /// Buffers for received datagrams (a power of two; 0: none, the ring receives no
    /// datagrams), each [`DATAGRAM_BUFFER`] bytes (a whole GRO batch with its sender and
    /// control message), provided as they are needed as the receive buffers are.
    pub datagrams: u16,
}

/// The size of a datagram buffer: the kernel's header, the sender's address, the control
/// message, and a GRO batch of up to 64 KiB.
pub const DATAGRAM_BUFFER: usize = 65536 + 256;

/// Control-message room of a received datagram (GRO's segment size, an `int`).
const DATAGRAM_CONTROL: usize = 32;

/// The kernel's largest completion queue (IORING_MAX_CQ_ENTRIES): 1 MiB of entries.
pub const MAX_COMPLETIONS: u32 = 65536;

/// How long an idle submission-polling thread spins before it sleeps.
pub const SQPOLL_IDLE: Duration = Duration::from_millis(50);

impl Default for RingOptions {
    fn default() -> Self {
        RingOptions {
            entries: 1024,
            completions: 0,
            buffers: 1024,
            buffer_size: 4096,
            start_buffers: 0,
            sqpoll: false,
            direct: 0,
            datagrams: 0,
        }
    }
}

/// The buffer group of the provided receive buffers.
const GROUP: u16 = 0;
/// The buffer group of the datagram buffers.
const DATAGRAM_GROUP: u16 = 1;

/// An anonymous, page-aligned memory mapping, unmapped on drop.
#[derive(Debug)]
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(len: usize) -> io::Result<Mapping> {
        // SAFETY: an anonymous private mapping; no file, no address hint.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { ptr: ptr.cast(), len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping this value created, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// The provided receive buffers: a ring of entries the kernel takes buffers from, and the
/// buffers' memory. A buffer the kernel filled is ours until [`BufRing::give_back`].
#[derive(Debug)]
struct BufRing {
    entries: Mapping,
    data: Mapping,
    count: u16,
    size: usize,
    /// Buffers provided so far (ids below it); the rest of the data mapping is untouched.
    provided: u16,
    /// Our next tail (entries published up to it by [`BufRing::publish`]).
    tail: u16,
}

impl BufRing {
    fn new(count: u16, size: usize, start: u16) -> io::Result<BufRing> {
        let entries = Mapping::new(usize::from(count) * std::mem::size_of::<BufRingEntry>())?;
        let data = Mapping::new(usize::from(count) * size)?;
        let mut ring = BufRing { entries, data, count, size, provided: 0, tail: 0 };
        ring.provide(if start == 0 { count } else { start.min(count) });
        ring.publish();
        Ok(ring)
    }

    /// Registers the ring of entries with `ring` as buffer group `group`. The entries mapping
    /// must outlive the registration: the [`Uring`] that owns both drops the ring first (its
    /// fields drop in order).
    fn register(&self, ring: &IoUring, group: u16) -> io::Result<()> {
        // SAFETY: the mapping holds `count` entries and lives as long as the ring (above).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                self.entries.ptr as u64,
                self.count,
                group,
                0,
            )
        }
    }

    /// Provides buffers up to `n` (seen by the kernel after the next publish).
    fn provide(&mut self, n: u16) {
        for bid in self.provided..n {
            self.give_back(bid);
        }
        self.provided = self.provided.max(n);
    }

    /// A receive found no buffer: twice as many are provided, if the ring has room. Returns
    /// whether it grew.
    fn grow(&mut self) -> bool {
        if self.provided == self.count {
            return false;
        }
        self.provide(self.provided.saturating_mul(2).clamp(1, self.count));
        true
    }

    fn base(&self) -> *mut BufRingEntry {
        self.entries.ptr.cast()
    }

    /// Puts buffer `bid` at the tail (seen by the kernel after the next publish).
    fn give_back(&mut self, bid: u16) {
        let slot = usize::from(self.tail & (self.count - 1));
        // SAFETY: `slot` < count entries of the mapping; the kernel reads an entry only below
        // the published tail, and this one is at or above it.
        let e = unsafe { &mut *self.base().add(slot) };
        // SAFETY: `bid` < count, so the buffer lies inside the data mapping.
        e.set_addr(unsafe { self.data.ptr.add(usize::from(bid) * self.size) } as u64);
        e.set_len(self.size as u32);
        e.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Makes the given-back buffers visible to the kernel.
    fn publish(&self) {
        // SAFETY: the tail field of the first entry of our mapping, a u16 the kernel reads
        // atomically; the release store orders the entries' writes before it.
        let tail = unsafe { AtomicU16::from_ptr(BufRingEntry::tail(self.base()).cast_mut()) };
        tail.store(self.tail, Ordering::Release);
    }

    /// Buffer `bid`'s first `len` bytes, which the kernel filled.
    fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        let len = len.min(self.size);
        // SAFETY: the buffer lies inside the data mapping; the kernel wrote it before posting
        // the completion and does not touch it again until it is given back, which needs
        // `&mut self` while this borrow lives.
        unsafe {
            std::slice::from_raw_parts(
                self.data.ptr.add(usize::from(bid) % usize::from(self.count) * self.size),
                len,
            )
        }
    }
}

/// Memory a request in flight points to, kept here until its completion.
#[derive(Debug)]
enum Held {
    /// A send's own buffer and where the send began in it (given back with the completion).
    Owned(Vec<u8>, usize),
    /// A send from bytes shared for the run (the load's requests).
    Shared(
        #[allow(dead_code, reason = "held only to keep the bytes alive until the completion")]
        Arc<[u8]>,
    ),
    /// A connect's address.
    Addr(Box<SockAddr>),
    /// A datagram's message: header, address, control message and bytes.
    Msg(Box<OutMsg>),
    /// A timeout's duration (with a polling thread the kernel reads it after the enter).
    Time(
        #[allow(dead_code, reason = "held only to keep the timespec alive until the completion")]
        Box<Timespec>,
    ),
}

/// What requests in flight point to, by slot.
#[derive(Debug, Default)]
struct Sends {
    slots: Vec<Option<Held>>,
    free: Vec<u32>,
    /// Address boxes of finished connects, reused (a connection per request connects once a
    /// request).
    #[allow(
        clippy::vec_box,
        reason = "the boxes move into requests, whose pointers must not move"
    )]
    addrs: Vec<Box<SockAddr>>,
    /// Timespec boxes of fired timeouts, reused (no allocation per armed timer).
    #[allow(
        clippy::vec_box,
        reason = "the boxes move into requests, whose pointers must not move"
    )]
    times: Vec<Box<Timespec>>,
    /// Messages of sent datagrams, reused (no allocation per datagram once warm).
    #[allow(
        clippy::vec_box,
        reason = "the boxes move into requests, whose pointers must not move"
    )]
    msgs: Vec<Box<OutMsg>>,
}

/// A datagram being sent: the message header points into the same box (its address, its
/// one iovec over `bytes`, its GSO control message), which does not move until the
/// completion.
struct OutMsg {
    hdr: libc::msghdr,
    iov: libc::iovec,
    name: SockAddr,
    control: [u64; 4],
    bytes: Vec<u8>,
}

impl std::fmt::Debug for OutMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OutMsg({} bytes)", self.bytes.len())
    }
}

impl OutMsg {
    fn new() -> Box<OutMsg> {
        Box::new(OutMsg {
            // SAFETY: all-zero is a valid msghdr and iovec (null pointers, zero lengths).
            hdr: unsafe { std::mem::zeroed() },
            // SAFETY: as above.
            iov: unsafe { std::mem::zeroed() },
            name: SockAddr::from(std::net::SocketAddr::from(([0; 4], 0))),
            control: [0; 4],
            bytes: Vec::new(),
        })
    }

    /// Points the header at this box's fields: `bytes`, the address unless `to` is None
    /// (a connected socket's peer), and a UDP_SEGMENT control message with `segment`.
    fn aim(&mut self, to: Option<std::net::SocketAddr>, segment: Option<u16>) {
        self.iov =
            libc::iovec { iov_base: self.bytes.as_mut_ptr().cast(), iov_len: self.bytes.len() };
        self.hdr.msg_iov = &mut self.iov;
        self.hdr.msg_iovlen = 1;
        self.hdr.msg_flags = 0;
        match to {
            Some(to) => {
                self.name = SockAddr::from(to);
                self.hdr.msg_name = self.name.as_ptr().cast_mut().cast();
                self.hdr.msg_namelen = self.name.len();
            }
            None => {
                self.hdr.msg_name = std::ptr::null_mut();
                self.hdr.msg_namelen = 0;
            }
        }
        match segment {
            Some(seg) => {
                self.hdr.msg_control = self.control.as_mut_ptr().cast();
                // SAFETY: CMSG_SPACE is arithmetic.
                self.hdr.msg_controllen =
                    unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as usize;
                // SAFETY: the control room (32 bytes, aligned as u64) holds CMSG_SPACE(2);
                // CMSG_FIRSTHDR is non-null for a non-empty control buffer.
                unsafe {
                    let c = libc::CMSG_FIRSTHDR(&self.hdr);
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = libc::UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as usize;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
                }
            }
            None => {
                self.hdr.msg_control = std::ptr::null_mut();
                self.hdr.msg_controllen = 0;
            }
        }
    }
}

impl Sends {
    fn insert(&mut self, v: Held) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(v);
                i
            }
            None => {
                self.slots.push(Some(v));
                (self.slots.len() - 1) as u32
            }
        }
    }

    fn take(&mut self, slot: u32) -> Option<Held> {
        let v = self.slots.get_mut(slot as usize)?.take();
        if v.is_some() {
            self.free.push(slot);
        }
        v
    }

    /// A completion's held memory: an owned buffer goes back to the caller, the rest is
    /// dropped (an address box is kept for the next connect).
    fn release(&mut self, slot: u32) -> Option<(Vec<u8>, usize)> {
        match self.take(slot)? {
            Held::Owned(buf, from) => Some((buf, from)),
            Held::Shared(_) => None,
            Held::Time(b) => {
                self.times.push(b);
                None
            }
            Held::Addr(b) => {
                self.addrs.push(b);
                None
            }
            Held::Msg(b) => {
                self.msgs.push(b);
                None
            }
        }
    }
}

/// A thread's ring.
pub struct Uring {
    ring: IoUring,
    bufs: BufRing,
    /// The datagram buffers, if the ring receives datagrams, and the message header its
    /// receives are made from (only its name and control lengths are read).
    dgrams: Option<BufRing>,
    recv_hdr: Box<libc::msghdr>,
    sends: Sends,
    /// The wake-up armed in the ring: its number and when it fires. A turn waits for a
    /// completion with a timeout request in the ring rather than the enter's own timeout
    /// argument, which tools such as valgrind do not pass on (an idle loop then never woke).
    timer: Option<(u32, Instant)>,
    timers: u32,
    /// Accepts go to the registered descriptor table.
    direct: bool,
    /// How many completions a turn holds out for, and for how long at most (microseconds)
    /// before it takes what has come: see [`Uring::batch`].
    batch: (u32, u32),
    /// The kernel waits for a batch with a bound (`IORING_FEAT_MIN_TIMEOUT`, Linux 6.12), and
    /// the enter's argument reached it (a tool that drops it turns this off).
    min_wait: bool,
    /// How long the last turn took to submit and wait.
    entered: Duration,
}

impl std::fmt::Debug for Uring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uring").field("sends", &self.sends.slots.len()).finish()
    }
}

impl Uring {
    /// A ring for this thread only (single issuer, deferred task work; with `sqpoll` the
    /// polling thread takes the task work) with its provided receive buffers registered.
    pub fn new(o: &RingOptions) -> io::Result<Uring> {
        let mut b = IoUring::builder();
        let cq = o.completions.max(o.entries * 4).next_power_of_two().min(MAX_COMPLETIONS);
        b.setup_single_issuer().setup_cqsize(cq);
        if o.sqpoll {
            b.setup_sqpoll(SQPOLL_IDLE.as_millis() as u32);
            // The calling thread's mask (pid 0 is this thread): pinned to one CPU, the polling
            // thread shares it rather than take a core the other side of a benchmark needs.
            if let [cpu] = crate::cpus::allowed_cpus()[..] {
                b.setup_sqpoll_cpu(cpu as u32);
            }
        } else {
            b.setup_defer_taskrun();
        }
        let ring = b.build(o.entries)?;
        let bufs = BufRing::new(o.buffers, o.buffer_size, o.start_buffers)?;
        bufs.register(&ring, GROUP)?;
        let dgrams = if o.datagrams == 0 {
            None
        } else {
            let d = BufRing::new(o.datagrams, DATAGRAM_BUFFER, 16.min(o.datagrams))?;
            d.register(&ring, DATAGRAM_GROUP)?;
            Some(d)
        };
        // SAFETY: all-zero is a valid msghdr.
        let mut recv_hdr: Box<libc::msghdr> = Box::new(unsafe { std::mem::zeroed() });
        recv_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in6>() as u32;
        recv_hdr.msg_controllen = DATAGRAM_CONTROL;
        // A table the limit refuses (EMFILE) leaves accepted sockets as plain descriptors.
        let direct = o.direct > 0 && ring.submitter().register_files_sparse(o.direct).is_ok();
        let min_wait = ring.params().is_feature_min_timeout();
        Ok(Uring {
            ring,
            bufs,
            dgrams,
            recv_hdr,
            sends: Sends::default(),
            timer: None,
            timers: 0,
            direct,
            batch: (1, 0),
            min_wait,
            entered: Duration::ZERO,
        })
    }

    /// From the next turn on, a turn waits for `want` completions but no longer than `linger`
    /// past its start: then the ones that came (at least one) are handled, so a pipeline of
    /// many small answers costs one wake-up per batch, not one per answer, and no answer is
    /// held past `linger`. `want` 1 (or a kernel without a bounded batch wait) wakes on the
    /// first completion.
    pub fn batch(&mut self, want: usize, linger: Duration) {
        let want = u32::try_from(want).unwrap_or(u32::MAX).max(1);
        self.batch = (want, u32::try_from(linger.as_micros()).unwrap_or(u32::MAX));
    }

    /// Whether a turn can hold out for a batch here (see [`Uring::batch`]).
    pub fn batches(&self) -> bool {
        self.min_wait
    }

    /// Accepted connections are registered (direct) descriptors.
    pub fn direct(&self) -> bool {
        self.direct
    }

    /// Queues requests outside a turn (they are submitted by the next turn).
    pub fn queue(&mut self, f: impl FnOnce(&mut Submit<'_>)) {
        let (submitter, sq, _) = self.ring.split();
        let mut submit = Submit {
            sq,
            submitter: &submitter,
            sends: &mut self.sends,
            direct: self.direct,
            recv_hdr: &*self.recv_hdr,
        };
        f(&mut submit);
        submit.sq.sync();
    }

    /// Submits what was queued and waits up to `timeout` for a completion (none: do not
    /// wait), then hands each completion to `f`, which may queue more requests.
    pub fn turn(
        &mut self,
        timeout: Duration,
        f: impl FnMut(Completion<'_>, &mut Submit<'_>),
    ) -> io::Result<()> {
        self.round(Wait::Timer(timeout), f)
    }

    /// A turn whose wait the enter itself bounds (no timer request outlives it): for the short
    /// waits that follow a turn's first while it holds out for a batch, each of which would
    /// otherwise leave a timer in flight. Where the kernel cannot bound a batch wait, a
    /// [`Uring::turn`].
    pub fn turn_within(
        &mut self,
        timeout: Duration,
        f: impl FnMut(Completion<'_>, &mut Submit<'_>),
    ) -> io::Result<()> {
        if !self.min_wait {
            return self.turn(timeout, f);
        }
        self.round(Wait::Bounded(timeout), f)
    }

    /// A turn: submits, waits as `wait` says, hands the completions to `f`.
    fn round(
        &mut self,
        wait: Wait,
        f: impl FnMut(Completion<'_>, &mut Submit<'_>),
    ) -> io::Result<()> {
        let Uring {
            ring,
            bufs,
            dgrams,
            recv_hdr,
            sends,
            timer,
            timers,
            direct,
            batch,
            min_wait,
            entered,
        } = self;
        let (submitter, sq, mut cq) = ring.split();
        let mut submit =
            Submit { sq, submitter: &submitter, sends, direct: *direct, recv_hdr: &**recv_hdr };
        let now = Instant::now();
        let bound = match wait {
            Wait::Timer(timeout) => {
                arm(&mut submit, timer, timers, now, timeout);
                None
            }
            Wait::Bounded(t) => Some(Timespec::new().sec(t.as_secs()).nsec(t.subsec_nanos())),
        };
        submit.sq.sync();
        enter(&submitter, *batch, min_wait, bound.as_ref())?;
        *entered = now.elapsed();
        cq.sync();
        drain(&mut cq, (bufs, dgrams.as_mut()), timer, &mut submit, f);
        submit.sq.sync();
        Ok(())
    }

    /// How long the last turn spent submitting and waiting (not handling completions).
    pub fn entered(&self) -> Duration {
        self.entered
    }
}

/// How a turn waits: with a timeout request in the ring (armed unless an earlier one fires in
/// time), or bounded by the enter's own argument.
#[derive(Debug, Clone, Copy)]
enum Wait {
    Timer(Duration),
    Bounded(Duration),
}

/// The turn's wake-up: a timeout request, unless one armed earlier fires in time; a no-op
/// when the turn must not wait. Its timespec is read by the kernel when the enter submits it.
fn arm(
    submit: &mut Submit<'_>,
    timer: &mut Option<(u32, Instant)>,
    timers: &mut u32,
    now: Instant,
    timeout: Duration,
) {
    let wake = now + timeout;
    if timeout.is_zero() {
        let e = opcode::Nop::new().build().user_data(user_data(Op::Timer, 0, 0));
        // SAFETY: no memory.
        unsafe { submit.push(&e) }
    } else if timer.is_none_or(|(_, at)| at > wake) {
        *timers = timers.wrapping_add(1).max(1);
        *timer = Some((*timers, wake));
        let value = Timespec::new().sec(timeout.as_secs()).nsec(timeout.subsec_nanos());
        let ts = match submit.sends.times.pop() {
            Some(mut b) => {
                *b = value;
                b
            }
            None => Box::new(value),
        };
        let ptr: *const Timespec = &*ts;
        let slot = submit.sends.insert(Held::Time(ts));
        let e = opcode::Timeout::new(ptr).build().user_data(user_data(Op::Timer, slot, *timers));
        // SAFETY: the boxed timespec stays in the slab until this request's completion.
        unsafe { submit.push(&e) }
    }
}

/// Submits and waits: for `want` completions up to `linger` microseconds when the kernel can
/// bound a batch wait (`min_wait`, cleared when the argument does not reach it), otherwise
/// for the first one.
fn enter(
    submitter: &io_uring::Submitter<'_>,
    batch: (u32, u32),
    min_wait: &mut bool,
    timeout: Option<&Timespec>,
) -> io::Result<()> {
    let (want, linger) = batch;
    let mut waited = match timeout {
        Some(ts) if *min_wait && want > 1 && linger > 0 => {
            let args = types::SubmitArgs::new().min_wait_usec(linger).timespec(ts);
            submitter.submit_with_args(want as usize, &args)
        }
        Some(ts) => submitter.submit_with_args(1, &types::SubmitArgs::new().timespec(ts)),
        None if *min_wait && want > 1 && linger > 0 => {
            let args = types::SubmitArgs::new().min_wait_usec(linger);
            submitter.submit_with_args(want as usize, &args)
        }
        None => submitter.submit_and_wait(1),
    };
    if let Err(e) = &waited {
        if want > 1 && matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EFAULT)) {
            // The batch wait's argument did not reach the kernel as given: wake on the
            // first completion from now on.
            *min_wait = false;
            waited = submitter.submit_and_wait(1);
        }
    }
    match waited {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY)) => {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Hands each completion to `f` (timer completions are the ring's own); receive buffers go
/// back to the ring after their completion, and it grows when a receive found none.
fn drain(
    cq: &mut io_uring::CompletionQueue<'_>,
    (bufs, mut dgrams): (&mut BufRing, Option<&mut BufRing>),
    timer: &mut Option<(u32, Instant)>,
    submit: &mut Submit<'_>,
    mut f: impl FnMut(Completion<'_>, &mut Submit<'_>),
) {
    let mut gave_back = false;
    let mut starved = false;
    let (mut dgram_back, mut dgram_starved) = (false, false);
    for cqe in cq {
        let ud = cqe.user_data();
        let Some(op) = Op::of(ud >> 60) else { continue };
        let slot = ((ud >> 32) & 0x0fff_ffff) as u32;
        if op == Op::Timer {
            if ud as u32 != 0 {
                submit.sends.release(slot);
            }
            if timer.is_some_and(|(n, _)| n == ud as u32) {
                *timer = None;
            }
            continue;
        }
        let result = cqe.result();
        let flags = cqe.flags();
        let bid = cqueue::buffer_select(flags);
        let data = match (op, bid) {
            (Op::Recv, Some(b)) if result > 0 => bufs.bytes(b, result as usize),
            _ => &[],
        };
        let datagram = match (op, bid, dgrams.as_deref()) {
            (Op::Datagram, Some(b), Some(d)) if result > 0 => {
                received(d.bytes(b, result as usize), submit.recv_hdr)
            }
            _ => None,
        };
        let sent = if matches!(op, Op::Send | Op::Connect | Op::SendTo) {
            submit.sends.release(slot)
        } else {
            None
        };
        let sock = (op == Op::Accept && result >= 0).then(|| {
            if submit.direct {
                Sock::Direct(result as u32)
            } else {
                // SAFETY: a successful accept's result is a descriptor the kernel just
                // created for this process, owned by nobody yet.
                Sock::Fd(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(result) })
            }
        });
        starved |= op == Op::Recv && result == -libc::ENOBUFS;
        dgram_starved |= op == Op::Datagram && result == -libc::ENOBUFS;
        let more = cqueue::more(flags);
        f(Completion { op, token: ud as u32, result, more, data, sent, sock, datagram }, submit);
        match (op, bid, dgrams.as_deref_mut()) {
            (Op::Datagram, Some(b), Some(d)) => {
                d.give_back(b);
                dgram_back = true;
            }
            (_, Some(b), _) => {
                bufs.give_back(b);
                gave_back = true;
            }
            _ => {}
        }
    }
    if starved {
        gave_back |= bufs.grow();
    }
    if gave_back {
        bufs.publish();
    }
    if let Some(d) = dgrams {
        if dgram_starved {
            dgram_back |= d.grow();
        }
        if dgram_back {
            d.publish();
        }
    }
}

/// A datagram buffer's contents, as the kernel laid them out for a multishot recvmsg made
/// from `hdr`: its header, the sender's address, the control messages, the bytes.
fn received<'a>(buf: &'a [u8], hdr: *const libc::msghdr) -> Option<Received<'a>> {
    // SAFETY: the ring's own header, alive as long as the ring.
    let hdr = unsafe { &*hdr };
    let out = io_uring::types::RecvMsgOut::parse(buf, hdr).ok()?;
    let name = out.name_data();
    // SAFETY: all-zero is a valid sockaddr_storage; the kernel's address is copied into it
    // (at most its size), and its length says how much of it is the address.
    let from = unsafe {
        let mut storage: libc::sockaddr_storage = std::mem::zeroed();
        let n = name.len().min(std::mem::size_of::<libc::sockaddr_storage>());
        std::ptr::copy_nonoverlapping(name.as_ptr(), (&raw mut storage).cast::<u8>(), n);
        SockAddr::new(storage, n as libc::socklen_t).as_socket()?
    };
    // The payload is a slice of `buf` (borrowed here from `out`): taken again from `buf`.
    let payload = out.payload_data();
    let at = (payload.as_ptr() as usize).checked_sub(buf.as_ptr() as usize)?;
    let data = buf.get(at..at + payload.len())?;
    let mut segment = data.len();
    let control = out.control_data();
    // Walks the control messages by their own lengths (cmsghdr, then the data, aligned).
    let mut at = 0;
    let head = std::mem::size_of::<libc::cmsghdr>();
    while at + head <= control.len() {
        // SAFETY: `head` bytes from `at` are inside `control`; read unaligned (bytes).
        let c: libc::cmsghdr = unsafe { std::ptr::read_unaligned(control[at..].as_ptr().cast()) };
        let len = c.cmsg_len as usize;
        if len < head || at + len > control.len() {
            break;
        }
        if c.cmsg_level == libc::SOL_UDP && c.cmsg_type == libc::UDP_GRO && len >= head + 4 {
            let v = i32::from_ne_bytes(control[at + head..at + head + 4].try_into().ok()?);
            segment = usize::try_from(v).unwrap_or(segment).max(1);
        }
        at += (len + 7) & !7;
    }
    Some(Received {
        from,
        data,
        segment,
        truncated: out.is_payload_truncated() || out.is_name_data_truncated(),
    })
}

/// Queues requests during a turn (submitted at the next turn's enter, or at once when the
/// queue is full).
pub struct Submit<'a> {
    sq: io_uring::SubmissionQueue<'a>,
    submitter: &'a io_uring::Submitter<'a>,
    sends: &'a mut Sends,
    direct: bool,
    recv_hdr: *const libc::msghdr,
}

impl std::fmt::Debug for Submit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Submit").field("queued", &self.sq.len()).finish()
    }
}

impl Submit<'_> {
    /// # Safety
    /// Whatever memory `e` points to stays valid until its completion.
    unsafe fn push(&mut self, e: &squeue::Entry) {
        loop {
            // SAFETY: the caller's promise about the memory `e` refers to.
            if unsafe { self.sq.push(e) }.is_ok() {
                return;
            }
            self.sq.sync();
            let _ = self.submitter.submit();
            self.sq.sync();
        }
    }

    /// Accepts on `listener` until cancelled or an error ends it (then `more` is false);
    /// into the registered descriptor table when the ring has one. A full table fails the
    /// accept with ENFILE after the connection left the backlog (the kernel closes it), so a
    /// table needs room beyond the connections the loop keeps.
    pub fn accept_multi(&mut self, listener: RawFd, token: u32) {
        let accept = opcode::AcceptMulti::new(types::Fd(listener));
        // Direct descriptors have no close-on-exec flag (the kernel refuses one).
        let accept = if self.direct {
            accept.allocate_file_index(true)
        } else {
            accept.flags(libc::SOCK_CLOEXEC)
        };
        let e = accept.build().user_data(user_data(Op::Accept, 0, token));
        // SAFETY: no memory besides the descriptor.
        unsafe { self.push(&e) }
    }

    /// Receives on `fd` into provided buffers until cancelled, EOF or an error.
    pub fn recv_multi(&mut self, sock: impl Into<Target>, token: u32) {
        let (fd, fixed) = sock.into().parts();
        let e = opcode::RecvMulti::new(fd, GROUP).build().flags(fixed).user_data(user_data(
            Op::Recv,
            0,
            token,
        ));
        // SAFETY: the buffers are the registered group's, owned by the ring.
        unsafe { self.push(&e) }
    }

    /// Sends `buf[from..]` on `fd`; the buffer comes back with the completion.
    pub fn send(&mut self, sock: impl Into<Target>, buf: Vec<u8>, from: usize, token: u32) {
        let (fd, fixed) = sock.into().parts();
        let len = buf.len().saturating_sub(from);
        // The heap block of `buf` does not move when the Vec value moves into the slab.
        let ptr = buf[from.min(buf.len())..].as_ptr();
        let slot = self.sends.insert(Held::Owned(buf, from));
        let e = opcode::Send::new(fd, ptr, len.min(u32::MAX as usize) as u32)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .flags(fixed)
            .user_data(user_data(Op::Send, slot, token));
        // SAFETY: the buffer stays in `sends`, unmodified, until this request's completion
        // takes it out.
        unsafe { self.push(&e) }
    }

    /// Receives datagrams on `fd` into the ring's datagram buffers until cancelled or an error
    /// ends it (then `more` is false; a receive that found no buffer ends it too, and the
    /// caller arms it again: the datagram waits in the socket). The ring must have been made
    /// with [`RingOptions::datagrams`].
    pub fn recv_datagrams(&mut self, fd: RawFd, token: u32) {
        let e = opcode::RecvMsgMulti::new(types::Fd(fd), self.recv_hdr, DATAGRAM_GROUP)
            .build()
            .user_data(user_data(Op::Datagram, 0, token));
        // SAFETY: the header is the ring's (it lives as long as the ring), the buffers are
        // the registered group's.
        unsafe { self.push(&e) }
    }

    /// Sends `bytes` on the UDP socket `fd` as one datagram, or with `segment` as datagrams
    /// of that size (GSO), to `to` (None: the socket's connected peer). The bytes are copied
    /// into a message this module keeps until the completion.
    pub fn send_datagram(
        &mut self,
        fd: RawFd,
        to: Option<std::net::SocketAddr>,
        bytes: &[u8],
        segment: Option<u16>,
        token: u32,
    ) {
        let mut m = self.sends.msgs.pop().unwrap_or_else(OutMsg::new);
        m.bytes.clear();
        m.bytes.extend_from_slice(bytes);
        m.aim(to, segment);
        let ptr: *const libc::msghdr = &m.hdr;
        let slot = self.sends.insert(Held::Msg(m));
        let e = opcode::SendMsg::new(types::Fd(fd), ptr).build().user_data(user_data(
            Op::SendTo,
            slot,
            token,
        ));
        // SAFETY: the boxed message (header, iovec, address, control, bytes) stays in the
        // slab, unmoved and unmodified, until this request's completion.
        unsafe { self.push(&e) }
    }

    /// Sends `bytes[range]` on `fd`; the bytes are shared for the run (held until the
    /// completion, which reports how many went).
    pub fn send_shared(
        &mut self,
        fd: RawFd,
        bytes: &Arc<[u8]>,
        from: usize,
        to: usize,
        token: u32,
    ) {
        let part = &bytes[from.min(to)..to.min(bytes.len())];
        let (ptr, len) = (part.as_ptr(), part.len());
        let slot = self.sends.insert(Held::Shared(Arc::clone(bytes)));
        let e = opcode::Send::new(types::Fd(fd), ptr, len.min(u32::MAX as usize) as u32)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(user_data(Op::Send, slot, token));
        // SAFETY: the slab holds a reference to the bytes until this request's completion;
        // shared bytes are never written.
        unsafe { self.push(&e) }
    }

    /// Connects `fd` (a new, non-blocking stream socket) to `addr`.
    pub fn connect(&mut self, fd: RawFd, addr: &SockAddr, token: u32) {
        let boxed = match self.sends.addrs.pop() {
            Some(mut b) => {
                *b = addr.clone();
                b
            }
            None => Box::new(addr.clone()),
        };
        let (ptr, len) = (boxed.as_ptr(), boxed.len());
        let slot = self.sends.insert(Held::Addr(boxed));
        let e = opcode::Connect::new(types::Fd(fd), ptr.cast(), len).build().user_data(user_data(
            Op::Connect,
            slot,
            token,
        ));
        // SAFETY: the boxed address stays in the slab (the box does not move) until this
        // request's completion.
        unsafe { self.push(&e) }
    }

    /// Cancels the requests of kind `op` with `token` (a multishot receive or accept).
    pub fn cancel(&mut self, op: Op, token: u32) {
        let e = opcode::AsyncCancel::new(user_data(op, 0, token)).build().user_data(user_data(
            Op::Cancel,
            0,
            token,
        ));
        // SAFETY: no memory.
        unsafe { self.push(&e) }
    }

    /// Shuts down the writing side of `fd`.
    pub fn shutdown_write(&mut self, sock: impl Into<Target>, token: u32) {
        let (fd, fixed) = sock.into().parts();
        let e = opcode::Shutdown::new(fd, libc::SHUT_WR).build().flags(fixed).user_data(user_data(
            Op::Shutdown,
            0,
            token,
        ));
        // SAFETY: no memory.
        unsafe { self.push(&e) }
    }

    /// Closes `sock` (after the requests queued before it on it); a direct descriptor's slot
    /// is free once this completes.
    pub fn close(&mut self, sock: impl Into<Sock>, token: u32) {
        let close = match sock.into() {
            Sock::Fd(fd) => opcode::Close::new(types::Fd(fd.into_raw_fd())),
            Sock::Direct(i) => opcode::Close::new(types::Fixed(i)),
        };
        let e = close.build().user_data(user_data(Op::Close, 0, token));
        // SAFETY: no memory; the descriptor was ours and is now the request's.
        unsafe { self.push(&e) }
    }
}

/// Whether io_uring can run here as this module uses it; the reason when it cannot (an old
/// kernel, `kernel.io_uring_disabled`, a seccomp filter, a container's policy). Tried once per
/// process, on a thread of its own: the kernel tears a ring down asynchronously and then queues
/// work on the thread that created it, which interrupts that thread's next blocking call that
/// has a timeout (a read with `SO_RCVTIMEO` returned `EINTR` in a test that probed first).
pub fn probe() -> Result<(), String> {
    static PROBED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    PROBED
        .get_or_init(|| {
            std::thread::Builder::new()
                .name("qpslab-probe".into())
                .spawn(try_ring)
                .map_err(|e| format!("cannot start a thread to probe io_uring: {e}"))?
                .join()
                .unwrap_or_else(|_| Err("the io_uring probe panicked".into()))
        })
        .clone()
}

fn try_ring() -> Result<(), String> {
    let o = RingOptions { entries: 8, buffers: 8, buffer_size: 64, ..RingOptions::default() };
    let ring = Uring::new(&o).map_err(|e| {
        let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
            .map(|v| format!(" (kernel.io_uring_disabled is {})", v.trim()))
            .unwrap_or_default();
        format!("io_uring_setup: {e}{disabled}")
    })?;
    let mut p = io_uring::Probe::new();
    ring.ring.submitter().register_probe(&mut p).map_err(|e| format!("io_uring probe: {e}"))?;
    let needed = [
        ("accept", opcode::AcceptMulti::CODE),
        ("recv", opcode::RecvMulti::CODE),
        ("send", opcode::Send::CODE),
        ("recvmsg", opcode::RecvMsgMulti::CODE),
        ("sendmsg", opcode::SendMsg::CODE),
        ("async cancel", opcode::AsyncCancel::CODE),
        ("close", opcode::Close::CODE),
        ("shutdown", opcode::Shutdown::CODE),
        ("timeout", opcode::Timeout::CODE),
        ("connect", opcode::Connect::CODE),
        ("nop", opcode::Nop::CODE),
    ];
    match needed.iter().find(|(_, code)| !p.is_supported(*code)) {
        Some((name, _)) => Err(format!("io_uring lacks the {name} operation on this kernel")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    #[test]
    fn user_data_carries_the_op_the_slot_and_the_token() {
        let ud = user_data(Op::Send, 0x0abc_def1, 0xdead_beef);
        assert_eq!(Op::of(ud >> 60), Some(Op::Send));
        assert_eq!(((ud >> 32) & 0x0fff_ffff) as u32, 0x0abc_def1);
        assert_eq!(ud as u32, 0xdead_beef);
    }

    /// A real round trip: accept, receive into a provided buffer, send back, close; on a
    /// ring this thread submits to and on one a kernel thread polls (whose timeouts are read
    /// after the enter returned).
    #[test]
    fn accepts_receives_and_sends_over_loopback() {
        for (sqpoll, direct) in [(false, 0), (true, 0), (false, 8), (true, 8)] {
            round_trip(sqpoll, direct);
        }
    }

    fn round_trip(sqpoll: bool, direct: u32) {
        probe().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let o = RingOptions {
            entries: 64,
            buffers: 16,
            buffer_size: 256,
            sqpoll,
            direct,
            ..RingOptions::default()
        };
        let mut ring = Uring::new(&o).unwrap();
        assert_eq!(ring.direct(), direct > 0);
        ring.queue(|s| s.accept_multi(listener.as_raw_fd(), 7));
        let mut client = TcpStream::connect(addr).unwrap();
        client.write_all(b"ping").unwrap();
        let mut conn: Option<Sock> = None;
        let mut got = Vec::new();
        let mut echoed = false;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !echoed {
            assert!(std::time::Instant::now() < deadline, "no echo; got {got:?}");
            ring.turn(Duration::from_millis(50), |c, s| match c.op {
                Op::Accept => {
                    assert_eq!(c.token, 7);
                    assert!(c.more, "multishot accept stays armed");
                    let sock = c.sock.unwrap();
                    assert_eq!(matches!(sock, Sock::Direct(_)), direct > 0);
                    s.recv_multi(sock.target(), 9);
                    conn = Some(sock);
                }
                Op::Recv if c.result > 0 => {
                    got.extend_from_slice(c.data);
                    if got == b"ping" {
                        s.send(conn.as_ref().unwrap().target(), b"xxpong".to_vec(), 2, 11);
                    }
                }
                Op::Send => {
                    let (buf, from) = c.sent.unwrap();
                    assert_eq!((buf.as_slice(), from, c.result), (&b"xxpong"[..], 2, 4));
                    echoed = true;
                }
                _ => {}
            })
            .unwrap();
        }
        let mut back = [0u8; 4];
        client.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"pong");
        let fd = conn.take().unwrap();
        let mut closed = false;
        ring.queue(|s| {
            s.cancel(Op::Recv, 9);
            s.close(fd, 9);
        });
        while !closed {
            assert!(std::time::Instant::now() < deadline);
            ring.turn(Duration::from_millis(50), |c, _| closed |= c.op == Op::Close).unwrap();
        }
        assert_eq!(client.read(&mut back).unwrap(), 0, "the server's side closed");
    }

    /// A full table of direct descriptors fails the next accept with ENFILE (which the server
    /// takes as a shortage: it pauses accepting) after the kernel took the connection from the
    /// backlog, so that connection is closed: the table needs room beyond the connections a
    /// loop keeps. A slot closed is taken again.
    #[test]
    fn a_full_direct_table_refuses_accepts_until_a_slot_is_closed() {
        probe().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let o = RingOptions {
            entries: 16,
            buffers: 8,
            buffer_size: 64,
            direct: 1,
            ..Default::default()
        };
        let mut ring = Uring::new(&o).unwrap();
        assert!(ring.direct());
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut events: Vec<(Option<u32>, Option<i32>)> = Vec::new();
        let turn_until = |ring: &mut Uring, n: usize, events: &mut Vec<_>| {
            while events.len() < n {
                assert!(std::time::Instant::now() < deadline, "accepts seen: {events:?}");
                ring.turn(Duration::from_millis(50), |c, s| {
                    if c.op != Op::Accept {
                        return;
                    }
                    let slot = match &c.sock {
                        Some(Sock::Direct(i)) => Some(*i),
                        _ => None,
                    };
                    events.push((slot, c.failure().map(|_| -c.result)));
                    if !c.more {
                        s.accept_multi(listener.as_raw_fd(), 1);
                    }
                    if let Some(sock) = c.sock {
                        if events.len() == 1 {
                            std::mem::forget(sock); // kept: the table is full now
                        } else {
                            s.close(sock, 2);
                        }
                    }
                })
                .unwrap();
            }
        };
        ring.queue(|s| s.accept_multi(listener.as_raw_fd(), 1));
        let _a = TcpStream::connect(addr).unwrap();
        turn_until(&mut ring, 1, &mut events);
        assert_eq!(events[0], (Some(0), None), "the first connection takes slot 0");
        let mut b = TcpStream::connect(addr).unwrap();
        turn_until(&mut ring, 2, &mut events);
        assert_eq!(events[1], (None, Some(libc::ENFILE)), "no slot left: {events:?}");
        b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut byte = [0u8; 1];
        assert!(!matches!(b.read(&mut byte), Ok(1..)), "the refused connection is closed");
        // Slot 0 closed: the next connection gets it.
        ring.queue(|s| s.close(Sock::Direct(0), 3));
        // Submits the close (and the accept armed again) before the next connection comes.
        ring.turn(Duration::ZERO, |_, _| {}).unwrap();
        let _c = TcpStream::connect(addr).unwrap();
        turn_until(&mut ring, 3, &mut events);
        assert_eq!(events[2], (Some(0), None), "{events:?}");
    }

    /// A ring that starts with one provided buffer: a receive larger than it runs out, the
    /// ring provides more (twice as many each time) and the rest of the data arrives intact.
    #[test]
    fn datagrams_go_and_come_back_with_their_sender_and_gso_segments() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let gro = crate::udp::enable_gro(&rx);
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let o = RingOptions { entries: 16, datagrams: 4, ..RingOptions::default() };
        let mut ring = Uring::new(&o).unwrap();
        ring.queue(|sub| {
            sub.recv_datagrams(rx.as_raw_fd(), 7);
            // Three datagrams of 1,200 bytes and one of 100 in one GSO send, to the
            // connected peer; then one named datagram.
            let run: Vec<u8> = (0..3700u32).map(|i| i as u8).collect();
            sub.send_datagram(tx.as_raw_fd(), None, &run, Some(1200), 4);
            sub.send_datagram(tx.as_raw_fd(), rx.local_addr().ok(), b"alone", None, 1);
        });
        let (mut got, mut sent, mut rounds) = (Vec::new(), Vec::new(), 0);
        while (got.iter().map(|(n, _): &(usize, usize)| n).sum::<usize>() < 3705 || sent.len() < 2)
            && rounds < 100
        {
            rounds += 1;
            ring.turn(Duration::from_millis(20), |c, sub| match c.op {
                Op::Datagram => {
                    assert_eq!(c.token, 7);
                    let d = c.datagram.expect("a datagram");
                    assert_eq!(d.from, tx.local_addr().unwrap());
                    assert!(!d.truncated);
                    got.push((d.data.len(), d.segment));
                    if !c.more {
                        sub.recv_datagrams(rx.as_raw_fd(), 7);
                    }
                }
                Op::SendTo => sent.push((c.token, c.result)),
                _ => {}
            })
            .unwrap();
        }
        sent.sort_unstable();
        assert_eq!(sent, [(1, 5), (4, 3700)]);
        let total: usize = got.iter().map(|(n, _)| n).sum();
        assert_eq!(total, 3705, "{got:?}");
        // Each read is one datagram, or (GRO) a batch of 1,200-byte ones.
        for (n, seg) in &got {
            assert!(*n == 5 || *seg == 1200 || *n == 100, "{got:?}");
        }
        if gro {
            assert!(got.iter().any(|(n, seg)| *n > *seg), "no GRO batch: {got:?}");
        }
    }

    #[test]
    fn a_receive_that_finds_no_buffer_makes_the_ring_provide_more() {
        probe().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let o = RingOptions {
            entries: 16,
            buffers: 8,
            buffer_size: 64,
            start_buffers: 1,
            ..Default::default()
        };
        let mut ring = Uring::new(&o).unwrap();
        assert_eq!(ring.bufs.provided, 1);
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let sent: Vec<u8> = (0..=255).collect();
        client.write_all(&sent).unwrap();
        let fd = server.as_raw_fd();
        ring.queue(|s| s.recv_multi(fd, 1));
        let (mut got, mut starved) = (Vec::new(), 0);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while got.len() < sent.len() {
            assert!(std::time::Instant::now() < deadline, "received {} bytes", got.len());
            ring.turn(Duration::from_millis(50), |c, s| {
                got.extend_from_slice(c.data);
                starved += usize::from(matches!(c.failure(), Some(Failure::NoBuffers)));
                if !c.more {
                    s.recv_multi(fd, 1);
                }
            })
            .unwrap();
        }
        assert_eq!(got, sent);
        assert!(starved > 0, "one buffer of 64 bytes cannot take 256");
        assert!((2..=8).contains(&ring.bufs.provided), "provided {}", ring.bufs.provided);
    }
}
