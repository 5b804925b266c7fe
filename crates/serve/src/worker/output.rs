//! The output path of a worker: turning a plan into response bytes, error responses, and
//! writing them out within a per-turn budget, streaming large bodies piece by piece.

use std::cmp::Reverse;
use std::io::{self, Write};
use std::net::Shutdown;
use std::time::{Duration, Instant};

use super::{Conn, Deadline, Phase, PhaseCell, Stream, Worker, FLUSH_BUDGET, LINGER};
use crate::respond::{
    push_body, push_chunk, write_error, write_head, ErrorReply, Plan, BODY_PIECE,
};

impl Conn {
    /// Puts the next piece of a streamed body (or its last chunk) into the empty output
    /// buffer. False when no body is streaming.
    fn next_stream_piece(&mut self) -> bool {
        let Some(s) = self.stream.as_mut() else { return false };
        if s.left == 0 {
            if s.chunked {
                push_chunk(&mut self.out, 0, s.sent);
            }
            self.stream = None;
            return true;
        }
        let n = s.left.min(BODY_PIECE as u64) as usize;
        if s.chunked {
            push_chunk(&mut self.out, n, s.sent);
        } else {
            push_body(&mut self.out, n, s.sent);
        }
        s.left -= n as u64;
        s.sent += n as u64;
        true
    }
}

impl Worker<'_> {
    /// Writes the response (or schedules it, for `t=`).
    pub(super) fn respond(&mut self, idx: usize, plan: Plan, now: Instant) {
        let cfg = self.cfg;
        let draining = self.draining_since.is_some();
        let c = &mut self.conns[idx];
        if plan.delay_ms > 0 {
            let until = now + Duration::from_millis(u64::from(plan.delay_ms));
            c.plan = Some(Plan { delay_ms: 0, ..plan });
            c.phase = PhaseCell(Phase::Delayed);
            c.deadline = None;
            self.delays.push(Reverse((until, idx, c.gen)));
            return;
        }
        let close = !plan.keep_alive || c.requests >= cfg.settings.keepalive_requests || draining;
        if self.template.matches(&plan, close) {
            c.out.extend_from_slice(&self.template.bytes);
        } else {
            write_head(&mut c.out, &plan, close, &self.date);
            if plan.head_only || matches!(plan.status, 204 | 304) {
            } else if plan.streams_body() {
                c.stream = Some(Stream { left: plan.body_len, sent: 0, chunked: plan.chunked });
            } else if plan.chunked {
                if plan.body_len > 0 {
                    push_chunk(&mut c.out, plan.body_len as usize, 0);
                }
                push_chunk(&mut c.out, 0, 0);
            } else {
                push_body(&mut c.out, plan.body_len as usize, 0);
            }
        }
        c.phase = PhaseCell(Phase::Head);
        c.deadline = Some((now + cfg.settings.idle_timeout, Deadline::Idle));
        if close {
            c.close_after = true;
        }
    }

    /// Answers with an error status and closes after it (lingering).
    pub(super) fn reject(&mut self, idx: usize, e: ErrorReply) {
        self.counters.rejected += 1;
        let c = &mut self.conns[idx];
        write_error(&mut c.out, e.status, e.reason, &self.date);
        c.inbuf.clear();
        c.body = None;
        c.plan = None;
        c.phase = PhaseCell(Phase::Head);
        c.close_after = true;
        c.linger_after = true;
    }

    /// Writes pending output (and pieces of a streamed body); closes or lingers when done.
    pub(super) fn flush(&mut self, idx: usize) {
        let now = self.now;
        let mut written = 0;
        if self.conns[idx].yielded {
            return;
        }
        loop {
            let c = &mut self.conns[idx];
            let Some(sock) = c.sock.as_ref() else { return };
            if c.out_pos == c.out.len() {
                c.out.clear();
                c.out_pos = 0;
                if c.next_stream_piece() {
                    continue;
                }
                break;
            }
            match (&*sock).write(&c.out[c.out_pos..]) {
                Ok(n) => {
                    c.out_pos += n;
                    written += n;
                    // Idle and write deadlines are for a client that stops reading: progress
                    // moves them.
                    if matches!(c.deadline, Some((_, Deadline::Write | Deadline::Idle))) {
                        c.deadline = Some((now + self.cfg.settings.idle_timeout, Deadline::Write));
                    }
                    let more = c.out_pos < c.out.len() || c.stream.is_some();
                    if written >= FLUSH_BUDGET && more {
                        c.yielded = true;
                        self.yielded.push((idx, c.gen));
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !matches!(c.deadline, Some((_, Deadline::Write))) {
                        c.deadline = Some((now + self.cfg.settings.idle_timeout, Deadline::Write));
                    }
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.close(idx),
            }
        }
        let c = &mut self.conns[idx];
        if matches!(c.deadline, Some((_, Deadline::Write))) {
            c.deadline = Some((now + self.cfg.settings.idle_timeout, Deadline::Idle));
        }
        if c.close_after && c.phase.0 != Phase::Lingering {
            if c.linger_after {
                if let Some(sock) = c.sock.as_ref() {
                    let _ = sock.shutdown(Shutdown::Write);
                }
                c.phase = PhaseCell(Phase::Lingering);
                c.inbuf.clear();
                c.deadline = Some((now + LINGER, Deadline::Linger));
            } else {
                self.close(idx);
            }
        }
    }

    /// Gives connections that yielded their turn another one.
    pub(super) fn resume_yielded(&mut self) {
        std::mem::swap(&mut self.yielded, &mut self.yielded_next);
        let mut list = std::mem::take(&mut self.yielded_next);
        for &(idx, gen) in &list {
            if self.conns[idx].gen == gen && self.conns[idx].sock.is_some() {
                self.conns[idx].yielded = false;
                self.flush(idx);
                self.drive(idx);
            }
        }
        list.clear();
        self.yielded_next = list;
    }
}
