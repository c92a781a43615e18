//! The store's threads under faults and load: a job that panics costs only its caller (the
//! store keeps serving and nothing acknowledged is lost or hidden), and a long read runs on the
//! read thread while other sessions' turns go on. Ordering is asserted with channels that hold
//! a job while the rest happens, never with timings.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use clawctx_engine::{ContextEngine, ToolCallContext};
use clawctx_lossless::core::codec;
use clawctx_lossless::*;
use clawctx_protocol::*;
use common::*;

const OTHER: &str = "agent:main:test:direct:2";

fn batch_for(key: &str, messages: Vec<AgentMessage>) -> IngestBatchParams {
    IngestBatchParams {
        session_id: key.into(),
        session_key: Some(key.into()),
        messages,
        is_heartbeat: None,
    }
}

fn assemble_for(key: &str, messages: Vec<AgentMessage>) -> AssembleParams {
    AssembleParams {
        session_id: key.into(),
        session_key: Some(key.into()),
        messages,
        token_budget: Some(100_000),
        ..Default::default()
    }
}

fn msg(word: &str, t: i64) -> AgentMessage {
    AgentMessage::user(format!("note {word} and common words")).with_timestamp(t)
}

/// Hits of the full-text search for `word` in `key`'s session.
async fn hits(store: &LosslessStore, key: &str, word: &str) -> usize {
    let q = GrepQuery::new(word, Scope::Session(ConvKey::from_host(Some(key), key)));
    store.grep(q).await.unwrap().hits.len()
}

/// The same search on the store thread (its own pending index).
async fn hits_on_store_thread(store: &LosslessStore, key: &str, word: &str) -> usize {
    let q = GrepQuery::new(word, Scope::Session(ConvKey::from_host(Some(key), key)));
    store
        .call(move |db| db.read(|db| db.grep(&q)))
        .await
        .unwrap()
        .hits
        .len()
}

fn texts(msgs: &[AgentMessage]) -> Vec<String> {
    msgs.iter().map(AgentMessage::plain_text).collect()
}

/// A job that panics (on the store thread inside a read transaction, inside a write
/// transaction, after an ingest it committed, and on the read thread) fails its caller with
/// `Panicked`, naming the job and the message; the store keeps serving: the next ingest and
/// assembly work, every acknowledged message (in the store thread's pending index, or a large
/// batch's waiting in memory) is still found exactly once from both threads, and what the
/// panicking write transaction did is gone.
#[tokio::test]
async fn a_panicking_job_fails_its_caller_only_and_the_store_keeps_every_message() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir, LosslessConfig::default());
    let store = e.store().unwrap().clone();

    // Acknowledged: small turns (the pending index) and a large batch (its terms wait in memory).
    let mut history = Vec::new();
    for t in 0..4 {
        let m = msg(&format!("small{t}x"), t);
        history.push(m.clone());
        e.ingest_batch(&batch_for(KEY, vec![m]), &cx())
            .await
            .unwrap();
    }
    let large: Vec<AgentMessage> = (0..80)
        .map(|i| msg(&format!("large{i}x"), 100 + i))
        .collect();
    history.extend(large.clone());
    e.ingest_batch(&batch_for(KEY, large), &cx()).await.unwrap();

    // 1. Inside a read transaction on the store thread (left open, it would pin the snapshot
    // and refuse every later write transaction).
    let err = store
        .call(|db| db.read(|_| -> clawctx_lossless::error::Result<()> { panic!("boom in a read") }))
        .await
        .unwrap_err();
    match &err {
        LosslessError::Panicked { job, message } => {
            assert!(
                job.contains("a_panicking_job_fails_its_caller_only"),
                "the job is named by the function that sent it: {job}"
            );
            assert_eq!(message, "boom in a read");
        }
        other => panic!("expected Panicked, got {other:?}"),
    }
    assert!(err.to_string().contains("boom in a read"), "{err}");

    // 2. Inside a write transaction, after writing a row: rolled back.
    let err = store
        .call(|db| {
            db.tx(|c| -> clawctx_lossless::error::Result<()> {
                c.execute(
                    "INSERT INTO conversations(agent_id, session_key, active, created_at) VALUES('main', 'ghost', 1, 0)",
                    [],
                )?;
                panic!("boom in a write")
            })
        })
        .await
        .unwrap_err();
    assert!(
        matches!(err, LosslessError::Panicked { ref message, .. } if message == "boom in a write"),
        "{err}"
    );

    // 3. After an ingest in the same job committed (its pending index half updated by a
    // search), and with a large batch's terms waiting in memory.
    let extra = codec::encode(&msg("afterpanicx", 1_000)).unwrap();
    let more: Vec<codec::Encoded> = (0..70)
        .map(|i| codec::encode(&msg(&format!("waiting{i}x"), 2_000 + i)).unwrap())
        .collect();
    let key = ConvKey::from_host(Some(KEY), KEY);
    let err = store
        .call(move |db| -> clawctx_lossless::error::Result<()> {
            db.ingest(&key, &[extra])?;
            db.sync_pending_index()?;
            db.ingest(&key, &more)?;
            assert!(db.deferred_rows() > 0, "the batch's terms wait in memory");
            panic!("boom after an ingest")
        })
        .await
        .unwrap_err();
    assert!(matches!(err, LosslessError::Panicked { .. }), "{err}");

    // 4. On the read thread.
    let err = store
        .call_read(|_| -> clawctx_lossless::error::Result<()> { panic!("boom on the read thread") })
        .await
        .unwrap_err();
    assert!(
        matches!(err, LosslessError::Panicked { ref message, .. } if message == "boom on the read thread"),
        "{err}"
    );

    // The store keeps serving: a new turn is stored and assembled.
    let next = msg("nextturnx", 3_000);
    let out = e
        .ingest_batch(&batch_for(KEY, vec![next.clone()]), &cx())
        .await
        .unwrap();
    assert_eq!(out.ingested_count, 1);
    history.push(next);
    let assembled = e
        .assemble(&assemble_for(KEY, history.clone()), &cx())
        .await
        .unwrap();
    let seen = texts(&assembled.messages);
    for m in &history {
        assert!(
            seen.contains(&m.plain_text()),
            "assembly lost {:?}",
            m.plain_text()
        );
    }

    // Nothing acknowledged is lost or hidden from search, on either thread, and nothing is
    // found twice; the messages the panicking job committed are found too.
    let words = [
        "small0x",
        "small3x",
        "large0x",
        "large79x",
        "afterpanicx",
        "waiting0x",
        "waiting69x",
        "nextturnx",
    ];
    for w in words {
        assert_eq!(hits(&store, KEY, w).await, 1, "read thread, {w}");
        assert_eq!(
            hits_on_store_thread(&store, KEY, w).await,
            1,
            "store thread, {w}"
        );
    }
    let conv = store
        .call(|db| db.conversation(&ConvKey::from_host(Some(KEY), KEY)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(conv.msg_count, 4 + 80 + 1 + 70 + 1);
    let ghost = store
        .call(|db| db.conversation(&ConvKey::from_host(Some("ghost"), "ghost")))
        .await
        .unwrap();
    assert!(
        ghost.is_none(),
        "the panicking write transaction was rolled back"
    );

    // Committed, not stuck in a transaction: another connection sees the new turn.
    e.dispose().await.ok();
    drop(e);
    let path = dir.path().join("lcm.db");
    let other = tokio::task::spawn_blocking(move || LosslessStore::open(path).unwrap())
        .await
        .unwrap();
    assert_eq!(hits(&other, KEY, "nextturnx").await, 1);
    store.close_wait().await;
    other.close_wait().await;
}

/// A long read (held on the read thread by a channel) does not hold up another session: its
/// ingest and assembly complete while the read provably still runs, and the reads queued
/// behind it (`lcm_grep` by the library API and by the agent tool, `doctor`) are still
/// waiting then, so they run on the read thread, not in front of turns. Once released, every
/// read answers, and a search sees the turn stored meanwhile.
#[tokio::test]
async fn a_long_read_never_holds_up_another_sessions_turn() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir, LosslessConfig::default());
    let store = e.store().unwrap().clone();
    let mut other_history = Vec::new();
    for t in 0..3 {
        let a = msg(&format!("first{t}x"), t);
        e.ingest_batch(&batch_for(KEY, vec![a]), &cx())
            .await
            .unwrap();
        let b = msg(&format!("second{t}x"), t);
        other_history.push(b.clone());
        e.ingest_batch(&batch_for(OTHER, vec![b]), &cx())
            .await
            .unwrap();
    }

    // The long read: it tells us it runs, then waits until we release it.
    let (running_tx, running_rx) = tokio::sync::oneshot::channel::<()>();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let s = store.clone();
    let long = tokio::spawn(async move {
        s.call_read(move |db| {
            let _ = running_tx.send(());
            release_rx.recv().unwrap();
            db.doctor()
        })
        .await
    });
    running_rx.await.unwrap();

    // Reads sent now queue behind it on the read thread.
    let q = GrepQuery {
        mode: GrepMode::Regex,
        ..GrepQuery::new(
            "first[0-9]x|third",
            Scope::Session(ConvKey::from_host(Some(KEY), KEY)),
        )
    };
    let mut grep = std::pin::pin!(store.grep(q));
    assert!(futures::poll!(grep.as_mut()).is_pending());
    let mut doctor = std::pin::pin!(store.doctor());
    assert!(futures::poll!(doctor.as_mut()).is_pending());
    let tool = e
        .recall_tools()
        .into_iter()
        .find(|t| t.name() == "lcm_grep")
        .unwrap();
    let tool_cx = ToolCallContext {
        session_id: KEY.into(),
        session_key: Some(KEY.into()),
        tool_call_id: None,
    };
    let args = serde_json::json!({"query": "first1x"});
    let mut tool_grep = std::pin::pin!(tool.execute(args, tool_cx));
    assert!(futures::poll!(tool_grep.as_mut()).is_pending());

    // Meanwhile the other session's turn: stored and assembled (the timeout only turns a
    // hang into a failure).
    let turn = async {
        let m = msg("third0x", 10);
        other_history.push(m.clone());
        e.ingest_batch(&batch_for(OTHER, vec![m]), &cx())
            .await
            .unwrap();
        e.assemble(&assemble_for(OTHER, other_history.clone()), &cx())
            .await
            .unwrap()
    };
    let assembled = tokio::time::timeout(Duration::from_secs(120), turn)
        .await
        .expect("the other session's turn waited for the long read");
    assert!(texts(&assembled.messages).contains(&msg("third0x", 10).plain_text()));

    // The long read still runs, and the reads behind it still wait.
    assert!(!long.is_finished(), "the long read is still held");
    assert!(
        futures::poll!(grep.as_mut()).is_pending(),
        "lcm_grep waits on the read thread"
    );
    assert!(
        futures::poll!(doctor.as_mut()).is_pending(),
        "doctor waits on the read thread"
    );
    assert!(
        futures::poll!(tool_grep.as_mut()).is_pending(),
        "the lcm_grep tool waits on the read thread"
    );

    release_tx.send(()).unwrap();
    let report = long.await.unwrap().unwrap();
    assert!(report.issues.is_empty(), "{:?}", report.issues);
    let found = grep.await.unwrap();
    assert_eq!(
        found.hits.len(),
        3,
        "session one's messages, not the other's"
    );
    assert!(doctor.await.unwrap().issues.is_empty());
    let out = tool_grep.await.unwrap();
    assert!(out.contains("first1x"), "{out}");
    // A read sent after the turn sees it.
    assert_eq!(hits(&store, OTHER, "third0x").await, 1);
    e.dispose().await.ok();
    store.close_wait().await;
}

/// Messages the store thread committed whose index terms it still holds in memory (small
/// turns in its pending index, a large batch's terms waiting to be indexed) are found by the
/// read thread, exactly once, even while the store thread is busy with another job.
#[tokio::test]
async fn the_read_thread_finds_what_the_store_thread_holds_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let store = tokio::task::spawn_blocking({
        let path = dir.path().join("r.db");
        move || LosslessStore::open(path).unwrap()
    })
    .await
    .unwrap();
    let key = ConvKey::from_host(Some(KEY), KEY);
    for t in 0..3 {
        let m = codec::encode(&msg(&format!("turn{t}x"), t)).unwrap();
        let k = key.clone();
        store.call(move |db| db.ingest(&k, &[m])).await.unwrap();
    }
    // A large batch committed by a job that then holds the store thread: its terms wait in
    // the store thread's memory while the read thread searches.
    let big: Vec<codec::Encoded> = (0..100)
        .map(|i| codec::encode(&msg(&format!("big{i}x"), 100 + i)).unwrap())
        .collect();
    let (stored_tx, stored_rx) = tokio::sync::oneshot::channel::<usize>();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let k = key.clone();
    let s = store.clone();
    let held = tokio::spawn(async move {
        s.call(move |db| {
            db.ingest(&k, &big)?;
            let _ = stored_tx.send(db.deferred_rows());
            release_rx.recv().unwrap();
            Ok(())
        })
        .await
    });
    assert_eq!(
        stored_rx.await.unwrap(),
        100,
        "the batch's terms wait in memory"
    );
    // (The timeout only turns a hang into a failure: these reads must not wait for the store
    // thread.)
    let reads = async {
        for w in ["turn0x", "turn2x", "big0x", "big99x"] {
            assert_eq!(hits(&store, KEY, w).await, 1, "{w}");
        }
        let q = GrepQuery {
            limit: 1_000,
            ..GrepQuery::new("common", Scope::Session(key.clone()))
        };
        store.grep(q).await.unwrap().hits.len()
    };
    let common_hits = tokio::time::timeout(Duration::from_secs(120), reads)
        .await
        .expect("a read waited for the store thread's job");
    assert_eq!(common_hits, 103, "every message once");
    release_tx.send(()).unwrap();
    held.await.unwrap().unwrap();
    // After the store thread indexed them (and moved its pending index), still once each.
    store
        .call(|db| {
            db.index_deferred();
            Ok(())
        })
        .await
        .unwrap();
    for w in ["turn0x", "big0x", "big99x"] {
        assert_eq!(hits(&store, KEY, w).await, 1, "{w}");
    }
    store.close_wait().await;
}
