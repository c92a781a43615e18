//! Out of space and read-only disks (issue #20, item 4), on a real tiny file system: the store
//! lives on a `tmpfs` the test mounts (`clawctx_test_support::small_fs`; skipped without root
//! outside CI, a failure under `CI=true`).
//!
//! What is promised and checked here:
//! - a full disk makes ingest fail with an error that says the disk is full and names the
//!   store's file, never a panic;
//! - every ingest that returned `Ok` before, during and after the full disk is in the store,
//!   exactly once; `PRAGMA integrity_check` is `ok` and `doctor` is clean;
//! - when space returns, the same engine (same process, no restart) ingests again, and a
//!   reopened store has everything;
//! - a read-only state dir fails at open with an error naming the path.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use clawctx_engine::ContextEngine;
use clawctx_lossless::*;
use clawctx_protocol::{AgentMessage, IngestBatchParams};
use clawctx_test_support::small_fs::SmallFs;
use common::*;

/// One turn whose texts are hard to compress (so the disk fills in a few dozen turns), each
/// message carrying the needle `nd<t>x<k>` first.
fn bulky_turn(rng: &mut Lcg, t: usize, kib: usize) -> Vec<AgentMessage> {
    let noise = |rng: &mut Lcg| -> String {
        (0..kib * 1024 / 16)
            .map(|_| format!("{:016x}", rng.next() ^ (rng.next() << 31)))
            .collect()
    };
    let ts = 1_700_000_000_000i64 + (t as i64) * 60_000;
    vec![
        AgentMessage::user(format!("nd{t}x0 {}", noise(rng))).with_timestamp(ts),
        AgentMessage::assistant(format!("nd{t}x9 {}", noise(rng))).with_timestamp(ts + 1),
    ]
}

/// Ingests `msgs`; on `Ok` their needles join `acked`.
async fn ingest(
    e: &LosslessEngine,
    msgs: Vec<AgentMessage>,
    acked: &mut Vec<String>,
) -> Result<(), clawctx_engine::EngineError> {
    let needles = needles_of(&msgs);
    let p = IngestBatchParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        messages: msgs,
        is_heartbeat: None,
    };
    e.ingest_batch(&p, &cx()).await?;
    acked.extend(needles);
    Ok(())
}

/// How many times each needle (`nd<t>x<k>`) is stored, read through the store's own view.
async fn needles(store: &LosslessStore) -> BTreeMap<String, usize> {
    store
        .call(|db| {
            db.tx(|c| {
                let mut st = c.prepare("SELECT text FROM message_rows")?;
                let mut out = BTreeMap::new();
                for text in st.query_map([], |r| r.get::<_, String>(0))? {
                    let text = text?;
                    let needle = text.split(' ').next().unwrap_or_default().to_owned();
                    *out.entry(needle).or_insert(0) += 1;
                }
                Ok(out)
            })
        })
        .await
        .unwrap()
}

/// A batch of `n` small messages (takes the batched path from 64 on), needles `nd<t>x<k>`.
fn batch(rng: &mut Lcg, t: usize, n: usize) -> Vec<AgentMessage> {
    let ts = 1_700_000_000_000i64 + (t as i64) * 60_000;
    (0..n)
        .map(|k| {
            let text = format!("nd{t}x{k} {}", words(rng, 120));
            if k % 2 == 0 {
                AgentMessage::user(text).with_timestamp(ts + k as i64)
            } else {
                AgentMessage::assistant(text).with_timestamp(ts + k as i64)
            }
        })
        .collect()
}

/// The needles of `msgs` (acknowledged once their ingest returned `Ok`).
fn needles_of(msgs: &[AgentMessage]) -> Vec<String> {
    msgs.iter()
        .map(|m| {
            let text = serde_json::to_value(m).unwrap()["content"].to_string();
            let start = text.find("nd").unwrap();
            text[start..].split(' ').next().unwrap().to_owned()
        })
        .collect()
}

/// Every acknowledged message is stored exactly once, and nothing else is.
async fn check_acked(store: &LosslessStore, acked: &[String], when: &str) {
    let found = needles(store).await;
    for needle in acked {
        let n = found.get(needle).copied().unwrap_or(0);
        assert_eq!(
            n, 1,
            "{when}: acknowledged message {needle} is stored {n} times"
        );
    }
    assert_eq!(
        found.len(),
        acked.len(),
        "{when}: the store holds messages of turns that were never acknowledged (a failed ingest must store nothing): {:?}",
        found.keys().collect::<Vec<_>>()
    );
}

fn integrity(path: &Path, when: &str) {
    let c = rusqlite::Connection::open(path).unwrap();
    let r: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        r,
        "ok",
        "{when}: PRAGMA integrity_check of {}",
        path.display()
    );
}

async fn doctor_clean(store: &LosslessStore, when: &str) {
    let doc = store.doctor().await.unwrap();
    assert!(doc.ok, "{when}: doctor found issues: {:#?}", doc.issues);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_ingest_clearly_loses_nothing_and_recovers() {
    let Some(fs) = SmallFs::mount("lossless-full", 24 << 20) else {
        return;
    };
    let path = fs.path().join("state").join("lcm.db");
    let e = LosslessEngine::open(&path, small_cfg()).unwrap();
    let store = e.store().unwrap().clone();
    let mut rng = Lcg(7);
    let mut acked = Vec::new();
    let mut t = 0usize;
    for _ in 0..10 {
        ingest(&e, bulky_turn(&mut rng, t, 8), &mut acked)
            .await
            .unwrap();
        t += 1;
    }
    ingest(&e, batch(&mut rng, t, 100), &mut acked)
        .await
        .unwrap();
    t += 1;

    // The disk fills up: keep ingesting until the store says so (the log reuses space it
    // already holds, so the first turns after the fill may still fit).
    let filled = fs.fill("filler");
    assert!(filled > 0, "the filler took the free space");
    let mut failure = None;
    let mut fit = 0;
    for _ in 0..400 {
        match ingest(&e, bulky_turn(&mut rng, t, 32), &mut acked).await {
            Ok(()) => fit += 1,
            Err(err) => {
                failure = Some(err.to_string());
                t += 1;
                break;
            }
        }
        t += 1;
    }
    let failure = failure.expect("ingest never failed on a full disk");
    let shown = path.display().to_string();
    assert!(
        failure.contains("disk is full") && failure.contains(&shown),
        "the error must say the disk is full and name the store file ({shown}): {failure}"
    );
    eprintln!("{fit} turns fit in the space the store already held; then: {failure}");
    // Still full: more ingests fail the same way (a turn, a large batch on the batched path,
    // a turn through commitTurn), nothing panics; a compaction fails or succeeds, never
    // half-way; reads still work.
    for _ in 0..3 {
        let err = ingest(&e, bulky_turn(&mut rng, t, 32), &mut acked)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("disk is full"), "{err}");
        t += 1;
    }
    let err = ingest(&e, batch(&mut rng, t, 400), &mut acked)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("disk is full"), "{err}");
    t += 1;
    let compacted = e.compact(&compact_params(true, 2_000), &cx()).await;
    eprintln!(
        "compaction on the full disk: {:?}",
        compacted.as_ref().map(|r| r.compacted)
    );
    check_acked(&store, &acked, "on the full disk").await;
    doctor_clean(&store, "on the full disk").await;

    // Space returns: the same engine ingests again, without a restart.
    std::fs::remove_file(fs.path().join("filler")).unwrap();
    for _ in 0..5 {
        ingest(&e, bulky_turn(&mut rng, t, 32), &mut acked)
            .await
            .unwrap_or_else(|err| panic!("ingest after space returned: {err}"));
        t += 1;
    }
    ingest(&e, batch(&mut rng, t, 400), &mut acked)
        .await
        .unwrap_or_else(|err| panic!("a large batch after space returned: {err}"));
    t += 1;
    e.compact(&compact_params(true, 2_000), &cx())
        .await
        .unwrap_or_else(|err| panic!("compaction after space returned: {err}"));
    check_acked(&store, &acked, "after space returned").await;
    doctor_clean(&store, "after space returned").await;

    // And after a restart.
    drop(e);
    store.close_wait().await;
    integrity(&path, "after close");
    let e = LosslessEngine::open(&path, small_cfg()).unwrap();
    let store = e.store().unwrap().clone();
    check_acked(&store, &acked, "reopened").await;
    doctor_clean(&store, "reopened").await;
    ingest(&e, bulky_turn(&mut rng, t, 8), &mut acked)
        .await
        .unwrap();
    check_acked(&store, &acked, "reopened, one more turn").await;
    drop(e);
    store.close_wait().await;
    integrity(&path, "at the end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_state_dir_fails_at_open_naming_the_path() {
    let Some(fs) = SmallFs::mount("lossless-ro", 8 << 20) else {
        return;
    };
    // An existing store on a file system that became read-only, and a new store there.
    let existing = fs.path().join("state").join("lcm.db");
    let mut acked = Vec::new();
    {
        let e = LosslessEngine::open(&existing, small_cfg()).unwrap();
        ingest(&e, batch(&mut Lcg(3), 0, 10), &mut acked)
            .await
            .unwrap();
        let store = e.store().unwrap().clone();
        drop(e);
        store.close_wait().await;
    }
    fs.set_read_only(true);
    let fresh = fs.path().join("other").join("lcm.db");
    for path in [&existing, &fresh] {
        let err = LosslessEngine::open(path, small_cfg()).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, LosslessError::ReadOnly { .. })
                && text.contains(&path.display().to_string())
                && text.contains("read-only file system"),
            "opening {} on a read-only file system: {text}",
            path.display()
        );
    }
    // Nothing was modified: writable again, the store opens with everything in it.
    fs.set_read_only(false);
    integrity(&existing, "after the read-only open");
    let e = LosslessEngine::open(&existing, small_cfg()).unwrap();
    let store = e.store().unwrap().clone();
    check_acked(&store, &acked, "reopened writable").await;
    drop(e);
    store.close_wait().await;
}
