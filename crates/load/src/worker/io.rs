//! The one interface between a load thread and its event loop. The worker asks for
//! operations ([`Op`]: connect, receive, send, close) by queueing them, answers the loop's
//! questions ([`Handler`]: a connection's socket, its peer, what it has to send) and is told
//! what happened on a connection ([`Event`]). How the bytes move is the loop's business:
//! [`super::epoll`] (readiness: a send goes at once, reads follow readability) or
//! [`super::uring`] (completions: one `io_uring_enter` submits a turn's operations and waits
//! for the next completions). Nothing in the worker depends on which loop runs.
//!
//! The contract both loops keep: an operation is carried out in the order queued, after the
//! event being handled (epoll) or with the next submission (io_uring); a connection has at
//! most one send under way, which an [`Event::Sent`] ends; events come only for a connection
//! that is still the one they were for (its socket open, its generation the same).

use std::io;
use std::time::Duration;

use socket2::{SockAddr, Socket};

/// A connection as a loop names it: its slot in the thread, and its generation (moved on by
/// every close, so what a loop reports about a closed socket is not taken for its
/// successor's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ConnId {
    pub idx: usize,
    pub gen: u32,
}

/// Generations are told apart by their low bits (all a loop's token may have room for).
pub(super) const GEN_BITS: u32 = 10;

impl ConnId {
    /// Whether this names the connection of generation `gen`.
    pub(super) fn is(self, gen: u32) -> bool {
        (self.gen ^ gen) & ((1 << GEN_BITS) - 1) == 0
    }
}

/// What the worker asks of its loop.
#[derive(Debug)]
pub(super) enum Op {
    /// Connect the connection's new socket to its peer ([`Event::Connected`] tells how).
    Connect(ConnId),
    /// The connection is open: report what arrives ([`Event::Data`], `Eof`, `ReadFailed`).
    Receive(ConnId),
    /// The connection has bytes to send: taken from [`Handler::output`] when they can go.
    Send(ConnId),
    /// Close the socket (already taken from the connection), after sending `last` (a TLS
    /// alert telling the server why) if there is any.
    Close { conn: ConnId, sock: Socket, last: Vec<u8> },
}

/// Bytes to send (an [`Out::Owned`] buffer comes back with [`Event::Sent`]).
pub(super) use crate::session::Out;

/// What happened on a connection.
#[derive(Debug)]
pub(super) enum Event<'a> {
    Connected(io::Result<()>),
    /// Bytes arrived (never empty).
    Data(&'a [u8]),
    /// The server closed its side.
    Eof,
    ReadFailed(io::Error),
    /// A send ended: how many bytes went, or why none did; an [`Out::Owned`] buffer comes
    /// back with where its send began.
    Sent(io::Result<usize>, Option<(Vec<u8>, usize)>),
}

/// The worker, as a loop sees it.
pub(super) trait Handler {
    /// Moves the operations queued since the last call into `ops` (empty); false when there
    /// are none.
    fn take_ops(&mut self, ops: &mut Vec<Op>) -> bool;
    /// The connection's socket, if `conn` is still the connection.
    fn socket(&self, conn: ConnId) -> Option<&Socket>;
    /// Where the connection connects.
    fn peer(&self, conn: ConnId) -> &SockAddr;
    /// What the connection sends now, and its socket; none when it has nothing to send (its
    /// send is then over). `at_once`: the loop sends during the call, so the bytes may be
    /// lent.
    fn output(&mut self, conn: ConnId, at_once: bool) -> Option<(&Socket, Out<'_>)>;
    fn event(&mut self, conn: ConnId, ev: Event<'_>);
    /// Whether waiting for more completions (or ready connections) pays now, and how many one
    /// wait may hold out for (None: it does not).
    fn holds_out(&self) -> Option<usize>;
    /// The longest this turn may hold out for more completions in all.
    fn linger(&self) -> Duration;
    /// The loop waits for more completions in this turn.
    fn lingering(&mut self);
    /// A wait found many more completions than it held out for: the worker is behind.
    fn behind(&mut self);
}

/// An event loop.
pub(super) trait Loop {
    /// Carries out the queued operations, waits up to `timeout` for something to happen
    /// and hands it to `h`; while [`Handler::holds_out`] says it pays, the wait gathers a
    /// batch for up to the turn's linger, so what it frees leaves together. Returns how many
    /// events or completions there were.
    fn wait<H: Handler>(&mut self, timeout: Duration, h: &mut H) -> io::Result<usize>;
    /// Before the thread stops: carries out what is queued (closes above all, so no socket
    /// stays open until the process exits).
    fn settle<H: Handler>(&mut self, h: &mut H);
}
