//! The identical-request fast path: a worker remembers the last few request heads it parsed
//! (their bytes and the plan they gave), so a request whose bytes start with one of them is
//! answered without parsing. Load generators send the same head over and over. The cache is
//! the worker's, not each connection's: an idle connection then holds no copy of its last
//! request, and a connection's first request can already hit. Each connection keeps only the
//! index of the entry it last hit, tried first.

use crate::respond::Plan;

/// Heads remembered per worker (replaced in turn).
const ENTRIES: usize = 4;

#[derive(Debug, Default)]
pub(crate) struct RequestCache {
    entries: Vec<(Vec<u8>, Plan)>,
    /// The entry the next new head replaces, once all are taken.
    next: usize,
}

impl RequestCache {
    /// The plan of the remembered head `input` starts with, and that head's length; `hint` (the
    /// entry to try first) is updated to the one found.
    #[inline]
    pub(crate) fn lookup(&self, input: &[u8], hint: &mut u8) -> Option<(usize, Plan)> {
        let first = usize::from(*hint);
        if let Some((bytes, plan)) = self.entries.get(first) {
            if input.starts_with(bytes) {
                return Some((bytes.len(), *plan));
            }
        }
        let (i, (bytes, plan)) = self
            .entries
            .iter()
            .enumerate()
            .find(|(i, (bytes, _))| *i != first && input.starts_with(bytes))?;
        *hint = i as u8;
        Some((bytes.len(), *plan))
    }

    /// Remembers `head` and its plan; returns the entry's index (the connection's next hint).
    pub(crate) fn insert(&mut self, head: &[u8], plan: Plan) -> u8 {
        if self.entries.len() < ENTRIES {
            self.entries.push((head.to_vec(), plan));
            return (self.entries.len() - 1) as u8;
        }
        let i = self.next;
        self.next = (i + 1) % ENTRIES;
        let (bytes, p) = &mut self.entries[i];
        bytes.clear();
        bytes.extend_from_slice(head);
        *p = plan;
        i as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(status: u16) -> Plan {
        Plan::plain(status, 0)
    }

    #[test]
    fn finds_any_remembered_head_and_replaces_the_oldest() {
        let mut c = RequestCache::default();
        let mut hint = 0;
        assert!(c.lookup(b"GET /a HTTP/1.1\r\n\r\n", &mut hint).is_none());
        for (i, path) in ["/a", "/b", "/c", "/d"].iter().enumerate() {
            let head = format!("GET {path} HTTP/1.1\r\n\r\n");
            assert_eq!(c.insert(head.as_bytes(), plan(200 + i as u16)), i as u8);
        }
        let (n, p) = c.lookup(b"GET /c HTTP/1.1\r\n\r\nGET /a", &mut hint).unwrap();
        assert_eq!((n, p.status, hint), (19, 202, 2));
        assert!(c.lookup(b"GET /c HTTP/1.1\r\n", &mut hint).is_none(), "a head cut short");
        // A fifth head takes the first entry's place.
        assert_eq!(c.insert(b"GET /e HTTP/1.1\r\n\r\n", plan(299)), 0);
        assert!(c.lookup(b"GET /a HTTP/1.1\r\n\r\n", &mut hint).is_none());
        assert_eq!(c.lookup(b"GET /e HTTP/1.1\r\n\r\n", &mut hint).unwrap().1.status, 299);
        assert_eq!(hint, 0);
    }
}
