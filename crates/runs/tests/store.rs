//! The runs store on disk: an older schema is migrated with its runs intact, a newer one is
//! refused and left byte for byte as it was, a store another process holds locked is refused
//! with a message that says so, and an unwritable path names the flag.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use qpslab_runs::store::{RunFilter, Store, StoreError, SCHEMA_VERSION};

fn usage(r: Result<Store, StoreError>) -> String {
    match r {
        Err(StoreError::Usage(m)) => m,
        other => panic!("expected a usage error, got {other:?}"),
    }
}

#[test]
fn a_first_schema_store_is_migrated_and_its_runs_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite");
    let old = rusqlite::Connection::open(&path).unwrap();
    old.execute_batch(include_str!("fixtures/store-v1.sql")).unwrap();
    drop(old);
    let store = Store::open(&path).unwrap();
    let v: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(v, SCHEMA_VERSION);
    let rows = store.runs(&RunFilter::default()).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].sweep, rows[0].variant.as_deref()), (Some(1), Some("connections=10")));
    assert_eq!(rows[0].label, None, "the column the migration added");
    let run = store.run(1).unwrap().unwrap();
    assert_eq!(run.facts.throughput_rps, 95000.5);
    assert_eq!(run.facts.cpu.softirq[0][0], 0.27);
    assert_eq!(run.facts.findings[0].name, "server-bound");
    assert!(run.facts.findings[0].evidence.is_empty(), "absent in the old layout: empty");
    assert_eq!(run.provenance, serde_json::json!({}));
    assert_eq!(run.histogram, "");
    let sweeps = store.sweeps().unwrap();
    assert_eq!(
        (sweeps[0].name.as_str(), sweeps[0].status.as_str(), sweeps[0].runs),
        ("knee", "done", 1)
    );
}

#[test]
fn a_store_from_a_newer_qpslab_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite");
    let newer = rusqlite::Connection::open(&path).unwrap();
    newer
        .execute_batch(
            "CREATE TABLE future (x); INSERT INTO future VALUES (1); PRAGMA user_version = 99;",
        )
        .unwrap();
    drop(newer);
    let before = std::fs::read(&path).unwrap();
    let m = usage(Store::open(&path));
    assert!(m.contains("written by a newer qpslab (schema 99, this one knows"), "{m}");
    assert!(m.contains("upgrade qpslab or give another file"), "{m}");
    assert!(std::fs::read(&path).unwrap() == before, "the file was changed");
}

#[test]
fn a_store_locked_by_another_process_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite");
    drop(Store::open(&path).unwrap());
    let holder = rusqlite::Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let started = std::time::Instant::now();
    let m = usage(Store::open(&path));
    assert!(m.contains("locked by another process"), "{m}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "waits a little, not forever");
    holder.execute_batch("COMMIT").unwrap();
    Store::open(&path).unwrap();
}

#[test]
fn an_unwritable_path_names_the_flag() {
    let m = usage(Store::open(std::path::Path::new("/proc/qpslab/runs.sqlite")));
    assert!(m.starts_with("--store /proc/qpslab/runs.sqlite: cannot create /proc/qpslab"), "{m}");
    let dir = tempfile::tempdir().unwrap();
    let m = usage(Store::open(dir.path()));
    assert!(m.starts_with(&format!("--store {}", dir.path().display())), "{m}");
}

/// Two commands opening a new store at once (a sweep creating it while `qpslab runs` polls)
/// once both migrated it: "table sweeps already exists".
#[test]
fn commands_opening_a_new_store_at_once_migrate_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite");
    let opened: Vec<Result<Store, StoreError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8).map(|_| s.spawn(|| Store::open(&path))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in opened {
        r.unwrap();
    }
}
