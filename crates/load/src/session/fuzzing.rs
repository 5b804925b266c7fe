//! The generator's HTTP/2 connection fed any server bytes, without a socket: a fuzz target's
//! body (`fuzz/fuzz_targets/` calls it; the committed corpus is replayed through it as an
//! ordinary test). Streams are opened as the load opens them (a GET and a POST with a body,
//! so that flow control is exercised), the server's bytes arrive in reads of a size the first
//! byte gives, and what the connection writes is taken as a socket would take it.

use std::time::Instant;

use super::h2::Http2;
use super::{Absorbed, Req};
use crate::template::Ids;
use crate::{LoadConfig, LoadOptions};

/// Streams a connection keeps open.
const STREAMS: usize = 4;

pub fn h2_client(data: &[u8]) {
    let Some((&size, input)) = data.split_first() else { return };
    let o = LoadOptions {
        urls: vec!["http://127.0.0.1:1/a".into()],
        h2: true,
        streams: STREAMS,
        connections: Some(1),
        method: "POST".into(),
        body: Some(crate::options::Body(vec![b'x'; 70_000])),
        ..LoadOptions::default()
    };
    let Ok(cfg) = LoadConfig::from_options(&o) else { panic!("the fuzz target's options") };
    let (Some(settings), Some(group)) = (cfg.h2, cfg.groups().first()) else {
        panic!("an HTTP/2 group")
    };
    let mut s = Http2::new(0, settings);
    let (mut ids, mut cursor, mut opened, mut answered) = (Ids::new(0, 1, 0, 1), 0, 0, 0);
    let now = Instant::now();
    let make = |_, target, pos| Req {
        sent_at: now,
        intended: now,
        counted: true,
        warm: false,
        retried: false,
        target,
        pos,
        id: 0,
    };
    for read in input.chunks(usize::from(size) + 1) {
        let room = s.capacity(STREAMS).saturating_sub(s.in_flight());
        s.queue(group, &mut cursor, room, &mut ids, make);
        opened += room;
        let n = s.pending().len();
        s.wrote(n);
        match s.absorb(read, group, false, |_, _| answered += 1) {
            Ok(Absorbed::Keep) => {}
            // The connection ends (a GOAWAY, or an error it names): the load reconnects.
            Ok(Absorbed::Close) | Err(_) => return,
        }
        while s.take_reset().is_some() {
            answered += 1;
        }
        assert!(answered <= opened, "{answered} answers to {opened} requests");
        assert!(s.in_flight() <= STREAMS);
    }
    let _ = s.eof();
}
