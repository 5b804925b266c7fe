//! The coordinator <-> agent protocol: one JSON object per line, each with a `type`, over any
//! byte pipe to a process (the ssh channel's stdin and stdout, or a local child's). The agent
//! speaks first (`hello`, with the protocol number); a coordinator refuses another protocol.
//!
//! ```text
//! agent        -> hello {protocol, version, hash, hostname, cpus}
//! coordinator  -> load {spec, files}    the agent's share (load options, their big files
//!                                       apart by digest: [`crate::files`])
//! agent        -> need {sha256}         the files it does not keep (none: straight to ready)
//! coordinator  -> file {sha256, text}   each once; the agent keeps it, resolves, opens its
//!                                       connections
//! agent        -> ready {threads, connections, notes}
//! coordinator  -> ping {id}  (x8)       agent -> pong {id, clock_ns}: the clock offset
//! coordinator  -> start {at_ns}         in the agent's clock
//! agent        -> started {late_ns}, then progress {..} and interval {index, hist} each second
//! agent        -> done {part, report}   or error {message, usage}
//! coordinator  -> stop                  (Ctrl-C); closing the pipe stops the agent too
//! ```
//!
//! On the server host of a bench the same agent answers calls instead of running a load:
//!
//! ```text
//! coordinator  -> call {id, method, params}      start the target, examine, diagnose, tune...
//! agent        -> reply {id, result | error}
//! ```
//!
//! The methods and their parameters belong to the caller (the lab's server host); here they
//! are names and JSON values.

use std::io::Write;

use serde::{Deserialize, Serialize};

use qpslab_load::LoadOptions;

/// The protocol this build speaks; bumped on any incompatible change.
/// 5: HTTP/2 options, the `reset` error class and the HTTP/2 counts in results.
/// 6: progress carries the live feed's counters (ok, errors by class, open connections,
/// reconnects, send lag, CPU).
/// 7: a load's big files travel apart, by digest (`files`, `need`, `file`).
pub const PROTOCOL: u32 = 7;

/// What the coordinator sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Command {
    /// The agent's share of the load: the load's own options, self-contained.
    Load {
        spec: Box<LoadOptions>,
        /// Files taken out of `spec`, to be put back from the agent's store or a `file`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        files: Vec<crate::files::Detached>,
    },
    /// A file the agent asked for.
    File {
        sha256: String,
        text: String,
    },
    Ping {
        id: u32,
    },
    /// Start the run's clock at this instant of the agent's own clock.
    Start {
        at_ns: u64,
    },
    Stop,
    /// Do `method` on the agent's host; answered by a `reply` with the same id.
    Call {
        id: u32,
        method: String,
        params: serde_json::Value,
    },
}

/// What an agent sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    Hello {
        protocol: u32,
        version: String,
        /// SHA-256 of the agent's executable, hex.
        hash: String,
        hostname: String,
        cpus: usize,
        /// The address of the agent's host that the ssh connection reached (from
        /// `SSH_CONNECTION`), when it came over ssh.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ssh_addr: Option<String>,
    },
    /// The files of the load the agent does not keep, by digest.
    Need {
        sha256: Vec<String>,
    },
    Ready {
        threads: usize,
        connections: usize,
        notes: Vec<String>,
    },
    Pong {
        id: u32,
        /// The agent's clock: nanoseconds since it started.
        clock_ns: u64,
    },
    /// The run's clock started `late_ns` after the instant asked.
    Started {
        late_ns: u64,
    },
    /// The live counters, about once a second.
    Progress {
        progress: Box<qpslab_load::Progress>,
    },
    /// Second `index` of the measured window is complete: its corrected latency (V2, base64).
    Interval {
        index: u32,
        hist: String,
    },
    Done {
        /// What it measured (histograms as HdrHistogram V2: `qpslab_load::wire`).
        part: Box<qpslab_load::RunResult>,
        /// The agent's own report (the load JSON contract), for its row.
        report: serde_json::Value,
    },
    Error {
        message: String,
        /// The user's to fix (a bad option, an unreachable target): exit 2.
        usage: bool,
    },
    /// The answer to a `call`: its result, or why it failed.
    Reply {
        id: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<serde_json::Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
}

/// Writes one message as one line and flushes.
pub fn send<T: Serialize>(out: &mut dyn Write, message: &T) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    line.push(b'\n');
    out.write_all(&line)?;
    out.flush()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn messages_are_one_line_of_json_with_a_type() {
        let mut out = Vec::new();
        send(&mut out, &Command::Start { at_ns: 42 }).unwrap();
        assert_eq!(out, b"{\"type\":\"start\",\"at_ns\":42}\n");
        let e: Event = serde_json::from_str(r#"{"type":"pong","id":3,"clock_ns":7}"#).unwrap();
        assert_eq!(e, Event::Pong { id: 3, clock_ns: 7 });
        assert!(serde_json::from_str::<Event>(r#"{"type":"nonsense"}"#).is_err());
    }

    #[test]
    fn a_result_travels_inside_a_tagged_message() {
        // Tagged enums buffer their fields: every number in a part must fit that buffer.
        let part = qpslab_load::wire::merge_parts(&[]);
        let done = Event::Done { part: Box::new(part), report: serde_json::json!({"x": 1}) };
        let mut out = Vec::new();
        send(&mut out, &done).unwrap();
        let back: Event = serde_json::from_slice(&out).unwrap();
        assert_eq!(back, done);
    }
}
