//! The persisted quarantine mirror (contract §4.4, checklist §12.11) on real files and real
//! processes: siblings are child processes of this test (running, or exited and reaped), so
//! their PIDs and start times are the kernel's.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use clawctx_engine::health_mirror::{
    mirror_path, process_start_time, HealthMirror, PersistedQuarantine, ProcessIdentity,
    QuarantineSource, MAX_ENTRIES,
};
use clawctx_engine::{ContextEngineRegistry, EngineError, QuarantineRecord};

/// A running child process and the identity a mirror would give it.
struct Sibling {
    child: Child,
    identity: ProcessIdentity,
}

impl Sibling {
    fn start(token: &str) -> Self {
        let child = Command::new("sleep").arg("60").spawn().expect("sleep runs");
        let pid = child.id();
        let identity = ProcessIdentity {
            process_id: pid,
            process_token: token.into(),
            process_start_time: process_start_time(pid),
        };
        assert!(
            identity.process_start_time.is_some(),
            "a running child has a start time"
        );
        Self { child, identity }
    }

    fn mirror(&self, path: &Path) -> HealthMirror {
        HealthMirror::with_identity(path, self.identity.clone())
    }

    /// Ends the process (and reaps it, so its PID no longer exists).
    fn exit(mut self) -> ProcessIdentity {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.identity.clone()
    }
}

impl Drop for Sibling {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn record(engine: &str, operation: &str, at_ms: u64) -> QuarantineRecord {
    QuarantineRecord {
        engine_id: engine.into(),
        owner: Some(format!("plugin:{engine}")),
        operation: operation.into(),
        reason: format!("{engine} broke during {operation}"),
        failed_at: UNIX_EPOCH + Duration::from_millis(at_ms),
    }
}

fn rows(mirror: &HealthMirror) -> Vec<(String, u32)> {
    let mut r: Vec<(String, u32)> = mirror
        .read()
        .unwrap()
        .into_iter()
        .map(|r| (r.engine_id, r.process_id))
        .collect();
    r.sort();
    r
}

// §12.11: persisted quarantines are listed when in-memory state is empty (exact record shape,
// `failedAt` as a time).
#[test]
fn persisted_quarantines_are_listed_when_memory_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = mirror_path(dir.path());
    let sibling = Sibling::start("sibling");
    let theirs = ContextEngineRegistry::with_legacy();
    theirs
        .attach_health_mirror(Arc::new(sibling.mirror(&path)))
        .unwrap();
    theirs.quarantine(
        "faulty",
        Some("plugin:faulty"),
        "assemble",
        "assemble exploded",
    );
    theirs.quarantine(
        "faulty",
        Some("plugin:faulty"),
        "ingest",
        "a later failure does not overwrite",
    );
    let in_memory = theirs.quarantines();

    let persisted = HealthMirror::new(&path).read().unwrap();
    assert_eq!(
        persisted,
        vec![PersistedQuarantine {
            engine_id: "faulty".into(),
            owner: Some("plugin:faulty".into()),
            operation: "assemble".into(),
            reason: "assemble exploded".into(),
            failed_at_ms: in_memory[0]
                .failed_at
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64,
            process_id: sibling.identity.process_id,
            process_token: "sibling".into(),
            process_start_time: sibling.identity.process_start_time,
        }]
    );
    let ours = ContextEngineRegistry::with_legacy();
    let listed = HealthMirror::new(&path).list(&ours.quarantines()).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].record.engine_id, "faulty");
    assert_eq!(listed[0].record.operation, "assemble");
    assert_eq!(listed[0].record.reason, "assemble exploded");
    // Millisecond precision on disk.
    let ms = |t: std::time::SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_millis();
    assert_eq!(ms(listed[0].record.failed_at), ms(in_memory[0].failed_at));
    assert_eq!(listed[0].source, QuarantineSource::Mirror);
    assert_eq!(listed[0].process_id, sibling.identity.process_id);
    assert!(listed[0].process_running);
}

// §12.11: clearing for this process keeps live sibling records, per engine and for all.
#[test]
fn clearing_for_this_process_keeps_live_sibling_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = mirror_path(dir.path());
    let sibling = Sibling::start("sibling");
    let theirs = sibling.mirror(&path);
    let mine = HealthMirror::new(&path);
    let me = mine.identity().process_id;
    let them = sibling.identity.process_id;
    for (i, engine) in ["a", "b"].into_iter().enumerate() {
        theirs
            .record(&record(engine, "assemble", i as u64))
            .unwrap();
        mine.record(&record(engine, "assemble", 10 + i as u64))
            .unwrap();
    }
    mine.clear(Some("a")).unwrap();
    let mut want = vec![
        ("a".to_owned(), them),
        ("b".to_owned(), them),
        ("b".to_owned(), me),
    ];
    want.sort();
    assert_eq!(rows(&mine), want);
    mine.clear(None).unwrap();
    assert_eq!(
        rows(&mine),
        [("a".to_owned(), them), ("b".to_owned(), them)]
    );

    // Through the registry: a re-registration clears the in-memory record and this process's row.
    let registry = ContextEngineRegistry::with_legacy();
    registry
        .attach_health_mirror(Arc::new(HealthMirror::new(&path)))
        .unwrap();
    registry.quarantine("a", None, "factory", "boom");
    assert_eq!(rows(&mine).len(), 3);
    registry.clear_quarantine("a");
    assert_eq!(
        rows(&mine),
        [("a".to_owned(), them), ("b".to_owned(), them)]
    );
}

// §12.11 with the deliberate deviation: rows of processes that are not running (exited, an
// earlier incarnation of this PID) are listed as such, and dropped when the next process that
// runs engines attaches the mirror; running siblings' rows stay.
#[test]
fn rows_of_exited_processes_are_listed_until_the_next_process_attaches() {
    let dir = tempfile::tempdir().unwrap();
    let path = mirror_path(dir.path());
    let gone = Sibling::start("gone");
    gone.mirror(&path)
        .record(&record("exited", "assemble", 1))
        .unwrap();
    let gone = gone.exit();
    let live = Sibling::start("live");
    live.mirror(&path)
        .record(&record("running", "factory", 2))
        .unwrap();
    let mut earlier_me = ProcessIdentity::current();
    earlier_me.process_token = "an earlier incarnation".into();
    HealthMirror::with_identity(&path, earlier_me)
        .record(&record("reincarnated", "ingest", 3))
        .unwrap();

    let mine = HealthMirror::new(&path);
    let listed = mine.list(&[]).unwrap();
    let seen: Vec<(&str, u32, bool)> = listed
        .iter()
        .map(|l| (l.record.engine_id.as_str(), l.process_id, l.process_running))
        .collect();
    assert_eq!(
        seen,
        [
            ("exited", gone.process_id, false),
            ("reincarnated", std::process::id(), false),
            ("running", live.identity.process_id, true),
        ]
    );

    let registry = ContextEngineRegistry::with_legacy();
    registry
        .attach_health_mirror(Arc::new(HealthMirror::new(&path)))
        .unwrap();
    assert_eq!(
        rows(&mine),
        [("running".to_owned(), live.identity.process_id)]
    );
}

// §12.11: clearing an absent mirror creates no state.
#[test]
fn clearing_an_absent_mirror_creates_no_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = mirror_path(dir.path());
    let mirror = HealthMirror::new(&path);
    mirror.clear(None).unwrap();
    mirror.clear(Some("x")).unwrap();
    assert_eq!(mirror.begin().unwrap(), 0);
    let registry = ContextEngineRegistry::with_legacy();
    registry
        .attach_health_mirror(Arc::new(HealthMirror::new(&path)))
        .unwrap();
    registry.activate();
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing was created"
    );
    assert!(mirror.list(&[]).unwrap().is_empty());
}

#[test]
fn a_corrupt_mirror_is_an_error_naming_it_and_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = mirror_path(dir.path());
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    for garbage in [
        "{\"version\": 1, \"quarantines\": [ {",
        "{\"version\": 99, \"quarantines\": []}",
    ] {
        std::fs::write(&path, garbage).unwrap();
        let mirror = HealthMirror::new(&path);
        for err in [
            mirror.read().map(|_| ()),
            mirror.record(&record("x", "assemble", 1)),
            mirror.list(&[]).map(|_| ()),
        ] {
            match err {
                Err(EngineError::HealthMirror { path: p, problem }) => {
                    assert_eq!(p, path);
                    assert!(!problem.is_empty());
                }
                other => panic!("{garbage}: {other:?}"),
            }
        }
        // The registry keeps working: the quarantine is in memory, the file untouched.
        let registry = ContextEngineRegistry::with_legacy();
        assert!(registry
            .attach_health_mirror(Arc::new(HealthMirror::new(&path)))
            .is_err());
        registry.quarantine("x", None, "assemble", "boom");
        assert!(registry.is_quarantined("x"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), garbage);
    }
}

#[test]
fn the_first_record_of_a_key_wins_and_at_most_64_rows_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = mirror_path(dir.path());
    let mirror = HealthMirror::new(&path);
    mirror.record(&record("a", "assemble", 5)).unwrap();
    mirror.record(&record("a", "ingest", 6)).unwrap();
    let read = mirror.read().unwrap();
    assert_eq!((read.len(), read[0].operation.as_str()), (1, "assemble"));
    for i in 0..(MAX_ENTRIES as u64 + 10) {
        mirror
            .record(&record(&format!("e{i:03}"), "factory", 100 + i))
            .unwrap();
    }
    let read = mirror.read().unwrap();
    assert_eq!(read.len(), MAX_ENTRIES);
    let oldest = read.iter().map(|r| r.failed_at_ms).min().unwrap();
    // 75 rows were written: "a" (at 5) and e000..e009 (at 100..109) went.
    assert_eq!(oldest, 110, "the oldest rows went first");
    assert!(!read.iter().any(|r| r.engine_id == "a"));
}

#[test]
fn concurrent_writers_lose_no_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = mirror_path(dir.path());
    let threads: Vec<_> = (0..8u32)
        .map(|t| {
            let path = path.clone();
            std::thread::spawn(move || {
                // Each thread is a process of its own as far as the mirror can tell.
                let me = ProcessIdentity {
                    process_id: 1_000_000 + t,
                    process_token: format!("t{t}"),
                    process_start_time: None,
                };
                let mirror = HealthMirror::with_identity(&path, me);
                for e in 0..6 {
                    mirror
                        .record(&record(
                            &format!("engine-{e}"),
                            "assemble",
                            u64::from(t) * 10 + e,
                        ))
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(HealthMirror::new(&path).read().unwrap().len(), 48);
}
