//! The runs store: every `bench` and `sweep` run (and `load --save`) in one SQLite file, so the
//! table of experiments is kept, compared and drawn by qpslab instead of a spreadsheet.
//!
//! `$XDG_DATA_HOME/qpslab/runs.sqlite` (`~/.local/share/qpslab/runs.sqlite`) unless
//! `QPSLAB_STORE` or `--store` names another file. The schema is versioned (`PRAGMA
//! user_version`) and migrated forward when an older one is opened; a store written by a newer
//! qpslab is refused, never rewritten. Write-ahead logging, and each run in a transaction of
//! its own committed right after the run: a crash or Ctrl-C mid-sweep keeps every finished run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

/// The schema this build writes.
pub const SCHEMA_VERSION: i64 = 2;

/// The migrations, in order: `MIGRATIONS[v]` takes a store from version v to v + 1. Version 1
/// kept each run's report and figures; version 2 adds labels, the provenance and the latency
/// histogram beside them, and the process of a running sweep.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE sweeps (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        started_at TEXT NOT NULL,
        finished_at TEXT,
        status TEXT NOT NULL,
        file TEXT NOT NULL
    );
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        kind TEXT NOT NULL,
        sweep_id INTEGER REFERENCES sweeps(id) ON DELETE SET NULL,
        variant TEXT,
        repeat INTEGER,
        started_at TEXT NOT NULL,
        config TEXT NOT NULL,
        facts TEXT NOT NULL,
        report TEXT NOT NULL,
        text TEXT NOT NULL,
        throughput_rps REAL NOT NULL
    );",
    "ALTER TABLE runs ADD COLUMN label TEXT;
    ALTER TABLE runs ADD COLUMN provenance TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE runs ADD COLUMN histogram TEXT NOT NULL DEFAULT '';
    ALTER TABLE sweeps ADD COLUMN pid INTEGER;
    CREATE INDEX runs_by_sweep ON runs(sweep_id, started_at);",
];

/// Why the store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The user's to fix (exit 2): an unwritable path, a newer schema, a lock held elsewhere.
    #[error("{0}")]
    Usage(String),
    #[error("store {path}: {source}")]
    Sqlite { path: PathBuf, source: rusqlite::Error },
    #[error("store {path}: stored run {id} is not readable: {source}")]
    Corrupt { path: PathBuf, id: i64, source: serde_json::Error },
}

/// A run to store.
#[derive(Debug, Clone)]
pub struct NewRun<'a> {
    /// `bench` or `load`.
    pub kind: &'a str,
    pub sweep: Option<i64>,
    pub variant: Option<&'a str>,
    pub repeat: Option<u32>,
    pub label: Option<&'a str>,
    pub started_at: &'a str,
    /// The options as the sweep file (or the command line) names them.
    pub config: &'a serde_json::Value,
    pub facts: &'a RunFacts,
    /// The whole report, as `--json` prints it.
    pub report: &'a serde_json::Value,
    /// The report as the command printed it.
    pub text: &'a str,
    pub histogram: &'a str,
    pub provenance: &'a serde_json::Value,
}

/// The figures of a run that `runs`, `compare` and `report` read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunFacts {
    pub target: String,
    pub duration_s: f64,
    pub throughput_rps: f64,
    pub ok: u64,
    pub failed: u64,
    pub latency_us: Percentiles,
    pub server_cpu: Option<f64>,
    pub generator_cpu: Option<f64>,
    pub requests_per_server_cpu_s: Option<f64>,
    /// Responses per second, second by second.
    pub rps: Vec<f64>,
    /// Failed requests, second by second.
    #[serde(default)]
    pub errors: Vec<u64>,
    /// Per-CPU shares, sample interval by interval.
    pub cpu: CpuSeries,
    pub findings: Vec<FindingFact>,
    /// With `--profile`: each CPU's profile samples by category.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profile: Vec<CpuCategories>,
    /// HTTP/3 runs: what the generator's QUIC transport did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic: Option<QuicFacts>,
    /// gRPC runs: the calls by status name (`OK`, `UNAVAILABLE`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc: Option<std::collections::BTreeMap<String, u64>>,
}

/// An HTTP/3 run's transport: how well its system calls were batched and what was lost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct QuicFacts {
    pub datagrams_per_send_call: f64,
    pub datagrams_per_recv_call: f64,
    /// Packets declared lost (and sent again).
    pub lost_packets: u64,
    /// Those over the datagrams sent.
    pub packet_loss: f64,
}

/// One CPU's profile samples by category (`tcp-receive` = 0.21, ...).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuCategories {
    pub cpu: usize,
    pub samples: u64,
    pub shares: std::collections::BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

/// Per-CPU user, system and softirq shares over time (the doctor's intervals).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuSeries {
    pub cpus: Vec<usize>,
    /// End of each interval, in seconds since sampling began.
    pub t_s: Vec<f64>,
    /// `[interval][cpu]`.
    pub user: Vec<Vec<f64>>,
    pub system: Vec<Vec<f64>>,
    pub softirq: Vec<Vec<f64>>,
    /// Idle share (the rest went to hard IRQs, steal and the like).
    #[serde(default)]
    pub idle: Vec<Vec<f64>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FindingFact {
    pub name: String,
    pub severity: String,
    pub summary: String,
    #[serde(default)]
    pub evidence: Vec<String>,
    #[serde(default)]
    pub remedy: String,
}

/// One stored run as listed.
#[derive(Debug, Clone, Serialize)]
pub struct RunRow {
    pub id: i64,
    pub kind: String,
    pub sweep: Option<i64>,
    pub variant: Option<String>,
    pub repeat: Option<u32>,
    pub label: Option<String>,
    pub started_at: String,
    pub config: serde_json::Value,
    pub throughput_rps: f64,
    /// What it ran against: `builtin`, `nginx` or the URL (its facts' target).
    pub target: String,
    /// A signal ended its measured window early.
    pub stopped_early: bool,
}

/// One stored run, whole.
#[derive(Debug, Clone)]
pub struct StoredRun {
    pub row: RunRow,
    pub facts: RunFacts,
    pub report: serde_json::Value,
    pub text: String,
    pub histogram: String,
    pub provenance: serde_json::Value,
}

/// A sweep as stored.
#[derive(Debug, Clone, Serialize)]
pub struct SweepRow {
    pub id: i64,
    pub name: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    /// `running`, `done`, `stopped`, `failed`, or `interrupted` (its process ended without
    /// saying how: killed, or the machine went down).
    pub status: String,
    pub runs: u64,
}

/// Which runs to list.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub sweep: Option<i64>,
    pub label: Option<String>,
    /// RFC 3339; runs started at or after it.
    pub since: Option<String>,
    pub ids: Vec<i64>,
}

/// An open store.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl Store {
    /// `QPSLAB_STORE`, else `$XDG_DATA_HOME/qpslab/runs.sqlite`, else
    /// `$HOME/.local/share/qpslab/runs.sqlite`.
    pub fn default_path() -> PathBuf {
        if let Some(p) = std::env::var_os("QPSLAB_STORE").filter(|p| !p.is_empty()) {
            return PathBuf::from(p);
        }
        let data = std::env::var_os("XDG_DATA_HOME")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
            .unwrap_or_else(|| PathBuf::from("."));
        data.join("qpslab/runs.sqlite")
    }

    /// Opens (creating it and its directory if needed) and migrates the store at `path`, and
    /// checks that it can be written now: an unwritable path, a store from a newer qpslab and
    /// a store another process keeps locked are refused here, before any run.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let usage = |m: String| StoreError::Usage(m);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                usage(format!(
                    "--store {}: cannot create {}: {e}; give a writable file (--store or QPSLAB_STORE)",
                    path.display(),
                    dir.display()
                ))
            })?;
        }
        let conn = Connection::open(path).map_err(|e| {
            usage(format!("--store {}: cannot open: {e}; give a writable file", path.display()))
        })?;
        let store = Store { conn, path: path.to_path_buf() };
        // SQLite answers "busy" at once, without waiting in its busy handler, where waiting
        // could deadlock (a reader asking to write, the switch to WAL while another command
        // opens the new file): such a refusal is tried again for up to 2 s.
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        let prepared = loop {
            match store.prepare() {
                Err(StoreError::Sqlite { source, .. })
                    if is_busy(&source) && std::time::Instant::now() < deadline =>
                {
                    let _ = store.conn.execute_batch("ROLLBACK");
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => break other,
            }
        };
        prepared.map_err(|e| match e {
            StoreError::Sqlite { source, .. } if is_busy(&source) => usage(format!(
                "--store {}: locked by another process (a sweep still running?); wait for it or \
                 give another file",
                path.display()
            )),
            StoreError::Sqlite { source, .. } if is_read_only(&source) => usage(format!(
                "--store {}: not writable ({source}); give a writable file",
                path.display()
            )),
            other => other,
        })?;
        // Opening answers within 2 s; a finished run waits longer for a busy store rather
        // than be lost.
        store.conn.busy_timeout(Duration::from_secs(30)).map_err(|e| store.err(e))?;
        Ok(store)
    }

    fn prepare(&self) -> Result<(), StoreError> {
        let c = &self.conn;
        c.busy_timeout(Duration::from_secs(2)).map_err(|e| self.err(e))?;
        // The version first: a newer store is refused before anything (even the journal
        // mode, which lives in the file's header) is written to it.
        self.refuse_newer()?;
        c.pragma_update(None, "journal_mode", "WAL").map_err(|e| self.err(e))?;
        c.pragma_update(None, "foreign_keys", "ON").map_err(|e| self.err(e))?;
        // Migrates forward, or (already current) only proves the store can be written now. The
        // version is read again under the write lock: another qpslab may have migrated it
        // since (two commands opening a new store at once).
        c.execute_batch("BEGIN IMMEDIATE").map_err(|e| self.err(e))?;
        let version = match self.refuse_newer() {
            Ok(v) => v,
            Err(e) => {
                let _ = c.execute_batch("ROLLBACK");
                return Err(e);
            }
        };
        for (v, sql) in MIGRATIONS.iter().enumerate().skip(usize::try_from(version).unwrap_or(0)) {
            c.execute_batch(sql).map_err(|e| self.err(e))?;
            c.pragma_update(None, "user_version", v as i64 + 1).map_err(|e| self.err(e))?;
        }
        c.execute_batch("COMMIT").map_err(|e| self.err(e))
    }

    /// The store's schema version; a newer one than this build's is refused.
    fn refuse_newer(&self) -> Result<i64, StoreError> {
        let version: i64 = self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| self.err(e))?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::Usage(format!(
                "--store {}: written by a newer qpslab (schema {version}, this one knows \
                 {SCHEMA_VERSION}); upgrade qpslab or give another file",
                self.path.display()
            )));
        }
        Ok(version)
    }

    fn err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sqlite { path: self.path.clone(), source }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records that a sweep starts; returns its id.
    pub fn begin_sweep(&self, name: &str, started_at: &str, file: &str) -> Result<i64, StoreError> {
        self.conn
            .execute(
                "INSERT INTO sweeps (name, started_at, status, file, pid)
                 VALUES (?1, ?2, 'running', ?3, ?4)",
                params![name, started_at, file, std::process::id()],
            )
            .map_err(|e| self.err(e))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Records how a sweep ended.
    pub fn end_sweep(&self, id: i64, finished_at: &str, status: &str) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE sweeps SET finished_at = ?2, status = ?3 WHERE id = ?1",
                params![id, finished_at, status],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Stores one run in a transaction of its own; returns its id.
    pub fn insert_run(&mut self, run: &NewRun<'_>) -> Result<i64, StoreError> {
        let path = self.path.clone();
        let err = |source| StoreError::Sqlite { path: path.clone(), source };
        let tx = self.conn.transaction().map_err(err)?;
        tx.execute(
            "INSERT INTO runs (kind, sweep_id, variant, repeat, label, started_at, config, facts,
                report, text, throughput_rps, provenance, histogram)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            params![
                run.kind,
                run.sweep,
                run.variant,
                run.repeat,
                run.label,
                run.started_at,
                run.config.to_string(),
                serde_json::to_string(run.facts).unwrap_or_default(),
                run.report.to_string(),
                run.text,
                run.facts.throughput_rps,
                run.provenance.to_string(),
                run.histogram,
            ],
        )
        .map_err(err)?;
        let id = tx.last_insert_rowid();
        tx.commit().map_err(err)?;
        Ok(id)
    }

    /// The runs `filter` selects, oldest first.
    pub fn runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>, StoreError> {
        let mut sql = String::from(
            "SELECT id, kind, sweep_id, variant, repeat, label, started_at, config, throughput_rps,
                json_extract(facts, '$.target'), COALESCE(json_extract(report, '$.load.stopped_early'),
                    json_extract(report, '$.stopped_early'), 0)
             FROM runs WHERE 1 = 1",
        );
        let mut args: Vec<Box<dyn rusqlite::ToSql>> = Vec::new();
        if let Some(s) = filter.sweep {
            sql += " AND sweep_id = ?";
            args.push(Box::new(s));
        }
        if let Some(l) = &filter.label {
            sql += " AND label = ?";
            args.push(Box::new(l.clone()));
        }
        if let Some(t) = &filter.since {
            sql += " AND started_at >= ?";
            args.push(Box::new(t.clone()));
        }
        if !filter.ids.is_empty() {
            let marks = vec!["?"; filter.ids.len()].join(", ");
            sql += &format!(" AND id IN ({marks})");
            args.extend(filter.ids.iter().map(|i| Box::new(*i) as Box<dyn rusqlite::ToSql>));
        }
        sql += " ORDER BY started_at, id";
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(args.iter().map(|a| a.as_ref())), row_of)
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// One run, whole; None when there is no such id.
    pub fn run(&self, id: i64) -> Result<Option<StoredRun>, StoreError> {
        let found = self
            .conn
            .query_row(
                "SELECT id, kind, sweep_id, variant, repeat, label, started_at, config,
                    throughput_rps, json_extract(facts, '$.target'), COALESCE(json_extract(report, '$.load.stopped_early'),
                    json_extract(report, '$.stopped_early'), 0), facts, report,
                    text, histogram, provenance
                 FROM runs WHERE id = ?1",
                [id],
                |r| {
                    let row = row_of(r)?;
                    let texts: (String, String, String, String, String) =
                        (r.get(11)?, r.get(12)?, r.get(13)?, r.get(14)?, r.get(15)?);
                    Ok((row, texts))
                },
            )
            .optional()
            .map_err(|e| self.err(e))?;
        let Some((row, (facts, report, text, histogram, provenance))) = found else {
            return Ok(None);
        };
        let corrupt = |source| StoreError::Corrupt { path: self.path.clone(), id, source };
        Ok(Some(StoredRun {
            facts: serde_json::from_str(&facts).map_err(corrupt)?,
            report: serde_json::from_str(&report).map_err(corrupt)?,
            provenance: serde_json::from_str(&provenance).map_err(corrupt)?,
            row,
            text,
            histogram,
        }))
    }

    /// Every sweep, oldest first, with its number of runs.
    pub fn sweeps(&self) -> Result<Vec<SweepRow>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT s.id, s.name, s.started_at, s.finished_at, s.status,
                    (SELECT COUNT(*) FROM runs r WHERE r.sweep_id = s.id), s.pid
                 FROM sweeps s ORDER BY s.started_at, s.id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                let status: String = r.get(4)?;
                let pid: Option<u32> = r.get(6)?;
                let gone = pid.is_none_or(|p| !qpslab_sys::process::alive(p));
                Ok(SweepRow {
                    id: r.get(0)?,
                    name: r.get(1)?,
                    started_at: r.get(2)?,
                    finished_at: r.get(3)?,
                    status: if status == "running" && gone { "interrupted".into() } else { status },
                    runs: r.get(5)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// The sweep file a sweep ran, by id.
    pub fn sweep_file(&self, id: i64) -> Result<Option<String>, StoreError> {
        self.conn
            .query_row("SELECT file FROM sweeps WHERE id = ?1", [id], |r| r.get(0))
            .optional()
            .map_err(|e| self.err(e))
    }

    /// Replaces what a sweep keeps as its file: a climb keeps its steps there as they are
    /// decided (JSON), for the report's staircase.
    pub fn set_sweep_file(&self, id: i64, file: &str) -> Result<(), StoreError> {
        self.conn
            .execute("UPDATE sweeps SET file = ?2 WHERE id = ?1", params![id, file])
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Removes runs by id; returns how many there were.
    pub fn remove(&mut self, ids: &[i64]) -> Result<usize, StoreError> {
        let path = self.path.clone();
        let err = |source| StoreError::Sqlite { path: path.clone(), source };
        let tx = self.conn.transaction().map_err(err)?;
        let mut n = 0;
        for id in ids {
            n += tx.execute("DELETE FROM runs WHERE id = ?1", [id]).map_err(err)?;
        }
        tx.execute("DELETE FROM sweeps WHERE id NOT IN (SELECT sweep_id FROM runs WHERE sweep_id IS NOT NULL) AND status != 'running'", [])
            .map_err(err)?;
        tx.commit().map_err(err)?;
        Ok(n)
    }
}

fn row_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
    let config: String = r.get(7)?;
    Ok(RunRow {
        id: r.get(0)?,
        kind: r.get(1)?,
        sweep: r.get(2)?,
        variant: r.get(3)?,
        repeat: r.get(4)?,
        label: r.get(5)?,
        started_at: r.get(6)?,
        config: serde_json::from_str(&config).unwrap_or(serde_json::Value::Null),
        throughput_rps: r.get(8)?,
        target: r.get::<_, Option<String>>(9)?.unwrap_or_default(),
        stopped_early: r.get::<_, Option<bool>>(10)?.unwrap_or(false),
    })
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

fn is_read_only(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(
            rusqlite::ErrorCode::ReadOnly
                | rusqlite::ErrorCode::CannotOpen
                | rusqlite::ErrorCode::PermissionDenied
        )
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    fn facts(rps: f64) -> RunFacts {
        RunFacts { throughput_rps: rps, target: "builtin".into(), ..RunFacts::default() }
    }

    fn add(store: &mut Store, sweep: Option<i64>, variant: &str, at: &str, rps: f64) -> i64 {
        let config = serde_json::json!({"connections": 10});
        store
            .insert_run(&NewRun {
                kind: "bench",
                sweep,
                variant: Some(variant),
                repeat: Some(1),
                label: None,
                started_at: at,
                config: &config,
                facts: &facts(rps),
                report: &serde_json::json!({"x": 1}),
                text: "text",
                histogram: "",
                provenance: &serde_json::json!({}),
            })
            .unwrap()
    }

    #[test]
    fn runs_go_in_and_come_out_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deep/dir/runs.sqlite");
        let mut store = Store::open(&path).unwrap();
        let sweep = store.begin_sweep("knee", "2026-01-01T00:00:00Z", "name = 'knee'").unwrap();
        let a = add(&mut store, Some(sweep), "a", "2026-01-01T00:00:01Z", 100.0);
        let b = add(&mut store, None, "b", "2026-01-01T00:00:02Z", 200.0);
        store.end_sweep(sweep, "2026-01-01T00:01:00Z", "done").unwrap();
        let all = store.runs(&RunFilter::default()).unwrap();
        assert_eq!(all.iter().map(|r| r.id).collect::<Vec<_>>(), vec![a, b]);
        let in_sweep =
            store.runs(&RunFilter { sweep: Some(sweep), ..RunFilter::default() }).unwrap();
        assert_eq!(in_sweep.len(), 1);
        let run = store.run(a).unwrap().unwrap();
        assert_eq!(run.facts, facts(100.0));
        assert_eq!(run.row.config["connections"], 10);
        assert!(store.run(999).unwrap().is_none());
        assert_eq!(store.sweeps().unwrap()[0].runs, 1);
        assert_eq!(store.remove(&[a]).unwrap(), 1);
        assert!(store.sweeps().unwrap().is_empty(), "a sweep without runs goes with its last run");
        drop(store);
        // Reopened: still there, schema current.
        let store = Store::open(&path).unwrap();
        assert_eq!(store.runs(&RunFilter::default()).unwrap().len(), 1);
    }
}
