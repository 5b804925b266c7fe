//! The io_uring loop: completions. Connects, sends and closes are requests to the ring;
//! responses arrive through a multishot receive into the ring's provided buffers; a send
//! takes its bytes when it is submitted (the run's shared request bytes, or a buffer of the
//! connection's own that the completion hands back). Everything a turn queued is submitted
//! by the one `io_uring_enter` that also waits for the next completions.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use qpslab_sys::uring::{Completion, Failure, Op as RingOp, RingOptions, Submit, Uring};

use super::io::{ConnId, Event, Handler, Loop, Op, Out, GEN_BITS};

/// Tokens: connection slot in the low bits, its generation's low bits above.
const SLOT_BITS: u32 = 32 - GEN_BITS;
const SLOT_MASK: u32 = (1 << SLOT_BITS) - 1;

pub(super) struct UringLoop {
    ring: Box<Uring>,
    /// By connection: its multishot receive is armed.
    receiving: Vec<bool>,
    ops: Vec<Op>,
}

impl std::fmt::Debug for UringLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UringLoop")
    }
}

fn token(conn: ConnId) -> u32 {
    (conn.gen << SLOT_BITS) | (conn.idx as u32 & SLOT_MASK)
}

fn conn_of(token: u32) -> ConnId {
    ConnId { idx: (token & SLOT_MASK) as usize, gen: token >> SLOT_BITS }
}

fn status(result: i32) -> io::Result<usize> {
    if result < 0 {
        Err(io::Error::from_raw_os_error(-result))
    } else {
        Ok(result as usize)
    }
}

/// Size of each provided receive buffer.
const BUFFER_SIZE: usize = 16 * 1024;

/// Receive buffers provided at the start (1 MiB); see [`buffers_for`].
const START_BUFFERS: u16 = 64;

/// Provided receive buffers for a thread's `conns` connections: four each (a 64 KiB response
/// fills four), a power of two from 64 to 1,024. The kernel takes them in ring order, so a
/// fast peer soon touches every one: the bound keeps a thread at 16 MiB of them whatever its
/// peers send (4,096 were 64 MiB). When none is free a receive waits for the next turn. The
/// ring provides [`START_BUFFERS`] of them at first and twice as many each time a receive
/// finds none, so slow traffic (an open loop's idle connections) touches only what it uses.
fn buffers_for(conns: usize) -> u16 {
    let n = conns.saturating_mul(4).clamp(64, 1024).next_power_of_two();
    u16::try_from(n).unwrap_or(1024)
}

impl UringLoop {
    pub(super) fn new(conns: usize) -> io::Result<UringLoop> {
        let o = RingOptions {
            entries: 1024,
            // A response (or a connect) on every connection may complete in one turn.
            completions: u32::try_from(conns.saturating_mul(2)).unwrap_or(u32::MAX),
            buffers: buffers_for(conns),
            buffer_size: BUFFER_SIZE,
            start_buffers: START_BUFFERS,
            ..RingOptions::default()
        };
        Ok(UringLoop {
            ring: Box::new(Uring::new(&o)?),
            receiving: vec![false; conns],
            ops: vec![],
        })
    }
}

/// Submits the operations the worker queued.
fn submit<H: Handler>(sub: &mut Submit<'_>, receiving: &mut [bool], ops: &mut Vec<Op>, h: &mut H) {
    h.take_ops(ops);
    for op in ops.drain(..) {
        match op {
            Op::Connect(conn) => {
                if let Some(sock) = h.socket(conn) {
                    sub.connect(sock.as_raw_fd(), h.peer(conn), token(conn));
                }
            }
            Op::Receive(conn) => receive(sub, receiving, conn, h),
            Op::Send(conn) => match h.output(conn, false) {
                Some((sock, Out::Shared(bytes, from, to))) => {
                    sub.send_shared(sock.as_raw_fd(), bytes, from, to, token(conn));
                }
                Some((sock, Out::Owned(buf, from))) => {
                    sub.send(sock.as_raw_fd(), buf, from, token(conn));
                }
                // Not given to a loop that does not send at once; copied if it were.
                Some((sock, Out::Lent(bytes))) => {
                    sub.send(sock.as_raw_fd(), bytes.to_vec(), 0, token(conn));
                }
                None => {}
            },
            Op::Close { conn, sock, last } => {
                let t = token(conn);
                if mem::take(&mut receiving[conn.idx]) {
                    sub.cancel(RingOp::Recv, t);
                }
                let fd = OwnedFd::from(sock);
                if !last.is_empty() {
                    // Its completion, for a generation gone, is dropped.
                    sub.send(fd.as_raw_fd(), last, 0, t);
                }
                // Closed by the ring after the requests queued before it, so its number is
                // not reused while one of them may still name it.
                sub.close(fd, t);
            }
        }
    }
}

/// Arms the connection's multishot receive unless it is armed.
fn receive<H: Handler>(sub: &mut Submit<'_>, receiving: &mut [bool], conn: ConnId, h: &H) {
    if receiving[conn.idx] {
        return;
    }
    if let Some(sock) = h.socket(conn) {
        receiving[conn.idx] = true;
        sub.recv_multi(sock.as_raw_fd(), token(conn));
    }
}

/// Hands a completion to the worker as an event of its connection.
fn complete<H: Handler>(
    c: Completion<'_>,
    sub: &mut Submit<'_>,
    receiving: &mut [bool],
    h: &mut H,
) {
    let conn = conn_of(c.token);
    if h.socket(conn).is_none() {
        return;
    }
    match c.op {
        RingOp::Connect => h.event(conn, Event::Connected(status(c.result).map(drop))),
        RingOp::Recv => {
            if !c.more {
                receiving[conn.idx] = false;
            }
            match c.failure() {
                None if c.result > 0 => h.event(conn, Event::Data(c.data)),
                None => h.event(conn, Event::Eof),
                Some(Failure::NoBuffers | Failure::Cancelled | Failure::Retry) => {}
                Some(Failure::OutOfResources(e) | Failure::Other(e)) => {
                    return h.event(conn, Event::ReadFailed(e));
                }
            }
            // Again, if the multishot receive ended by itself and the connection goes on.
            receive(sub, receiving, conn, h);
        }
        RingOp::Send => h.event(conn, Event::Sent(status(c.result), c.sent)),
        _ => {}
    }
}

impl Loop for UringLoop {
    fn wait<H: Handler>(&mut self, timeout: Duration, h: &mut H) -> io::Result<usize> {
        let UringLoop { ring, receiving, ops } = self;
        // What was queued since the last turn (due sends, a tick's reconnects, the requests
        // the last batch of responses let go) goes with this turn's enter, not after its
        // wait: a request due now must not wait for the next completion or timer.
        ring.queue(|sub| submit(sub, receiving, ops, h));
        // The turn holds out for a batch of completions while the server is busy with the rest
        // of the pipeline (a send per connection per batch of answers, not one per answer),
        // for no longer than the linger in all; otherwise it wakes on the first completion.
        // The worker's operations wait for the whole turn: a connection's requests freed by
        // several of its completions leave in one send.
        let until = Instant::now() + h.linger();
        let mut n = 0;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let want = h.holds_out().filter(|_| !left.is_zero());
            let asked = match want {
                Some(want) => {
                    h.lingering();
                    let asked = if ring.batches() { want } else { 1 };
                    ring.batch(asked, left);
                    asked
                }
                None if n > 0 => break,
                None => {
                    ring.batch(1, Duration::ZERO);
                    1
                }
            };
            // The first wait is the worker's own; the ones after it end with the linger.
            let before = n;
            let first = n == 0;
            let handle = |c: Completion<'_>, sub: &mut Submit<'_>| {
                n += 1;
                complete(c, sub, receiving, h);
            };
            if first {
                ring.turn(timeout, handle)?;
            } else {
                ring.turn_within(left, handle)?;
            }
            let got = n - before;
            if asked > 1 && got >= asked + asked.div_ceil(2) {
                // Half as many again as it asked for were there: they came while the worker
                // was busy, so it is behind the server and waiting gathers nothing.
                h.behind();
                break;
            }
            if got == 0 {
                break;
            }
        }
        Ok(n)
    }

    fn settle<H: Handler>(&mut self, h: &mut H) {
        let UringLoop { ring, receiving, ops } = self;
        ring.queue(|sub| submit(sub, receiving, ops, h));
        let _ = ring.turn(Duration::ZERO, |_, _| {});
    }
}

#[cfg(test)]
mod tests {
    use super::buffers_for;

    #[test]
    fn the_receive_pool_is_four_buffers_a_connection_within_its_bounds() {
        assert_eq!(buffers_for(0), 64);
        assert_eq!(buffers_for(16), 64);
        assert_eq!(buffers_for(50), 256);
        assert_eq!(buffers_for(100), 512);
        assert_eq!(buffers_for(256), 1024);
        assert_eq!(buffers_for(usize::MAX), 1024);
        for conns in 0..5000 {
            let n = buffers_for(conns);
            assert!(n.is_power_of_two() && (64..=1024).contains(&n), "{conns}: {n}");
        }
    }
}
