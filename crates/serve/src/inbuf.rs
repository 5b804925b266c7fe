//! A connection's input buffer: read into its free tail, parse from its filled part, consume
//! from the front. Allocated and zeroed once, compacted instead of reallocated, grown only for
//! a head larger than what it holds (up to the configured limits). An idle connection gives
//! its storage back to the worker's pool ([`InBuf::release`]) and takes one again when data
//! arrives ([`InBuf::ensure`]).

use crate::bufpool::BufPool;

#[derive(Debug, Default)]
pub(crate) struct InBuf {
    data: Vec<u8>,
    start: usize,
    end: usize,
}

impl InBuf {
    pub(crate) fn filled(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    pub(crate) fn filled_mut(&mut self) -> &mut [u8] {
        &mut self.data[self.start..self.end]
    }

    pub(crate) fn len(&self) -> usize {
        self.end - self.start
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.start == self.end
    }

    pub(crate) fn consume(&mut self, n: usize) {
        self.start += n.min(self.len());
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    pub(crate) fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }

    /// Takes storage from `pool` if it has none (the connection was idle).
    #[inline]
    pub(crate) fn ensure(&mut self, pool: &mut BufPool) {
        if self.data.is_empty() {
            self.data = pool.input();
        }
    }

    /// Gives the storage back to `pool`, when nothing is buffered.
    pub(crate) fn release(&mut self, pool: &mut BufPool) {
        if self.is_empty() && !self.data.is_empty() {
            pool.give_input(std::mem::take(&mut self.data));
            self.clear();
        }
    }

    /// Free space to read into, at least `min` bytes: compacts, then grows if it must.
    pub(crate) fn spare(&mut self, min: usize) -> &mut [u8] {
        if self.data.len() - self.end < min {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.data.len() - self.end < min {
                self.data.resize(self.end + min, 0);
            }
        }
        &mut self.data[self.end..]
    }

    /// Marks `n` bytes of the spare space as filled.
    pub(crate) fn filled_by(&mut self, n: usize) {
        self.end += n;
    }

    /// Appends `bytes` (received elsewhere: a ring's buffer, TLS plaintext).
    // Inlined: on the plain io_uring path it is the copy of every receive, and as a call it
    // cost 18 instructions per request (callgrind).
    #[inline(always)]
    pub(crate) fn extend(&mut self, bytes: &[u8]) {
        self.spare(bytes.len())[..bytes.len()].copy_from_slice(bytes);
        self.filled_by(bytes.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_consume_compact() {
        let mut b = InBuf::default();
        let s = b.spare(8);
        s[..5].copy_from_slice(b"hello");
        b.filled_by(5);
        b.consume(2);
        assert_eq!(b.filled(), b"llo");
        let cap = b.spare(1).len();
        assert!(cap >= 1);
        let s = b.spare(6);
        s[..3].copy_from_slice(b"abc");
        b.filled_by(3);
        assert_eq!(b.filled(), b"lloabc");
        b.consume(6);
        assert!(b.is_empty());
    }

    #[test]
    fn released_storage_goes_back_to_the_pool_and_comes_back_initialized() {
        let mut pool = BufPool::default();
        let mut b = InBuf::default();
        b.ensure(&mut pool);
        b.extend(b"GET / HTTP/1.1\r\n");
        b.release(&mut pool);
        assert_eq!(pool.held(), (0, 0), "storage holding input is kept");
        b.consume(b.len());
        b.release(&mut pool);
        assert_eq!(pool.held(), (1, 0));
        let mut c = InBuf::default();
        c.ensure(&mut pool);
        assert_eq!(pool.held(), (0, 0));
        c.extend(b"x");
        assert_eq!(c.filled(), b"x");
    }
}
