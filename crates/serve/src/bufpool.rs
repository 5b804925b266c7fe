//! A worker's spare connection buffers. A connection takes an input and an output buffer when
//! data arrives and gives them back once it is idle again (every request answered, nothing to
//! send), as nginx frees its buffers between requests: an idle keep-alive connection then holds
//! no buffer at all, and a busy worker reuses the same few instead of allocating per request.
//! What it does not own: when a connection is idle (the session decides) and the io_uring
//! ring's receive buffers (the ring's).

/// Spare buffers kept of each kind; more are freed (they served a burst of busy connections).
const KEEP: usize = 256;
/// Buffers larger than this are freed rather than kept (a large head, a large response).
const KEEP_CAPACITY: usize = 64 * 1024;

#[derive(Debug, Default)]
pub(crate) struct BufPool {
    /// Input buffers, their length their initialized size (so they are never zeroed again).
    inputs: Vec<Vec<u8>>,
    /// Output buffers, empty, with their capacity.
    outputs: Vec<Vec<u8>>,
}

impl BufPool {
    /// An input buffer (initialized bytes, possibly none).
    pub(crate) fn input(&mut self) -> Vec<u8> {
        self.inputs.pop().unwrap_or_default()
    }

    /// An empty output buffer.
    pub(crate) fn output(&mut self) -> Vec<u8> {
        self.outputs.pop().unwrap_or_default()
    }

    pub(crate) fn give_input(&mut self, buf: Vec<u8>) {
        keep(&mut self.inputs, buf);
    }

    pub(crate) fn give_output(&mut self, mut buf: Vec<u8>) {
        buf.clear();
        keep(&mut self.outputs, buf);
    }

    /// Spare buffers held (inputs, outputs).
    #[cfg(test)]
    pub(crate) fn held(&self) -> (usize, usize) {
        (self.inputs.len(), self.outputs.len())
    }
}

fn keep(list: &mut Vec<Vec<u8>>, buf: Vec<u8>) {
    if buf.capacity() > 0 && buf.capacity() <= KEEP_CAPACITY && list.len() < KEEP {
        list.push(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_a_bounded_number_of_ordinary_buffers() {
        let mut p = BufPool::default();
        assert_eq!(p.input().capacity(), 0, "an empty pool hands out unallocated buffers");
        for _ in 0..KEEP + 10 {
            p.give_input(vec![0; 4096]);
        }
        p.give_output(Vec::with_capacity(KEEP_CAPACITY + 1));
        p.give_output(Vec::new());
        let mut out = Vec::with_capacity(300);
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        p.give_output(out);
        assert_eq!(p.held(), (KEEP, 1));
        assert_eq!(p.input().len(), 4096, "an input buffer keeps its initialized size");
        let out = p.output();
        assert!(out.is_empty() && out.capacity() >= 300);
    }
}
