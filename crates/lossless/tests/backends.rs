//! The same engine scenarios on both backends, SQLite and PostgreSQL, with their results
//! compared: the engine logic is written once above the storage boundary, so the same calls on
//! the same data must give the same context, summaries and answers on either store.
//!
//! The PostgreSQL half needs `CLAWCTX_TEST_PG_URL` (a fresh database is made per test); it
//! skips without one, except under `CI=true`, where `.ci/run` provides the server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use clawctx_engine::ContextEngine;
use clawctx_lossless::pg::PgStore;
use clawctx_lossless::*;
use clawctx_protocol::*;
use clawctx_test_support::pg::{test_database, TestDatabase};
use common::*;

/// An engine on each backend (the PostgreSQL one on a fresh database), or `None` when no
/// PostgreSQL server is configured.
async fn both(
    hint: &str,
    cfg: LosslessConfig,
) -> Option<(
    tempfile::TempDir,
    LosslessEngine,
    TestDatabase,
    LosslessEngine,
)> {
    let db = test_database(hint)?;
    let dir = tempfile::tempdir().unwrap();
    let sqlite = engine(&dir, cfg.clone());
    let pg = PgStore::open_url(&db.url).await.unwrap();
    let pg = LosslessEngine::over(Arc::new(pg), cfg).unwrap();
    Some((dir, sqlite, db, pg))
}

/// Asserts two contexts are equal, naming the first message that differs.
fn same_context(a: &[AgentMessage], b: &[AgentMessage], when: &str) {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(
            x, y,
            "{when}: message {i} differs between SQLite (left) and PostgreSQL (right)"
        );
    }
    assert_eq!(
        a.len(),
        b.len(),
        "{when}: SQLite assembled {} messages, PostgreSQL {}",
        a.len(),
        b.len()
    );
}

fn history(turns: usize) -> Vec<AgentMessage> {
    let mut rng = Lcg(7);
    let mut h = Vec::new();
    for t in 0..turns {
        h.extend(turn(&mut rng, t, t % 3 == 0, 60));
    }
    h
}

#[tokio::test]
async fn ingest_compaction_and_assembly_agree_on_both_backends() {
    let Some((_dir, sqlite, _db, pg)) = both("agree", small_cfg()).await else {
        return;
    };
    let h = history(40);
    let mut stored_at = 0;
    for (i, e) in [&sqlite, &pg].into_iter().enumerate() {
        // Turn by turn, as a host would: afterTurn stores and compacts over the threshold.
        let mut pre = 0;
        for end in (6..=h.len()).step_by(6) {
            e.after_turn(&after_turn(&h[..end], pre, 8_000), &cx())
                .await
                .unwrap();
            pre = end;
        }
        e.after_turn(&after_turn(&h, pre, 8_000), &cx())
            .await
            .unwrap();
        // Re-sent whole: nothing new, on either store.
        let again = IngestBatchParams {
            session_id: "s1".into(),
            session_key: Some(KEY.into()),
            messages: h.clone(),
            is_heartbeat: None,
        };
        assert_eq!(
            e.ingest_batch(&again, &cx()).await.unwrap().ingested_count,
            0,
            "backend {i}"
        );
        stored_at = h.len();
    }
    let key = ConvKey::from_host(Some(KEY), "s1");
    let a = sqlite.backend().conversation(&key).await.unwrap().unwrap();
    let b = pg.backend().conversation(&key).await.unwrap().unwrap();
    assert_eq!(a.msg_count, stored_at as i64);
    assert_eq!(
        (
            a.msg_count,
            a.msg_tokens,
            a.frontier_tokens,
            a.frontier_items,
            a.epoch
        ),
        (
            b.msg_count,
            b.msg_tokens,
            b.frontier_tokens,
            b.frontier_items,
            b.epoch
        ),
        "the conversation's totals differ between SQLite and PostgreSQL"
    );
    assert!(a.epoch > 0, "the scenario must have compacted");

    // The same context, message for message, with a prompt that recalls an old message.
    let mut host = h.clone();
    host.push(AgentMessage::user("what was nd3x0 about?"));
    let sa = sqlite
        .assemble(&assemble_params(host.clone(), 8_000), &cx())
        .await
        .unwrap();
    let sb = pg
        .assemble(&assemble_params(host, 8_000), &cx())
        .await
        .unwrap();
    same_context(&sa.messages, &sb.messages, "with a prompt");
    let recalled = |m: &[AgentMessage]| m.iter().any(|m| m.plain_text().starts_with("<recalled"));
    assert!(
        recalled(&sb.messages),
        "the prompt names a summarized message: recall must quote it"
    );
    assert_eq!(sa.estimated_tokens, sb.estimated_tokens);
    assert_eq!(sa.context_projection, sb.context_projection);
    assert_pairs_intact(&sb.messages);

    // A forced compaction does the same on both.
    let ra = sqlite
        .compact(&compact_params(true, 8_000), &cx())
        .await
        .unwrap();
    let rb = pg
        .compact(&compact_params(true, 8_000), &cx())
        .await
        .unwrap();
    assert_eq!(ra.compacted, rb.compacted);
    assert_eq!(
        ra.result.as_ref().map(|r| r.tokens_after),
        rb.result.as_ref().map(|r| r.tokens_after)
    );
    let sa = sqlite
        .assemble(&assemble_params(h.clone(), 8_000), &cx())
        .await
        .unwrap();
    let sb = pg
        .assemble(&assemble_params(h, 8_000), &cx())
        .await
        .unwrap();
    same_context(&sa.messages, &sb.messages, "after a forced compaction");
}

#[tokio::test]
async fn commit_turn_is_once_per_key_and_forks_carry_summaries_on_both() {
    let Some((_dir, sqlite, _db, pg)) = both("commit", small_cfg()).await else {
        return;
    };
    let h = history(30);
    for e in [&sqlite, &pg] {
        let p = CommitTurnParams {
            session_id: "s1".into(),
            session_key: Some(KEY.into()),
            advancement_key: "turn-1".into(),
            messages: h.clone(),
            ..Default::default()
        };
        let first = e.commit_turn(&p, &cx()).await.unwrap();
        assert_eq!(first.status, CommitTurnStatus::Committed);
        let again = e.commit_turn(&p, &cx()).await.unwrap();
        assert_eq!(
            again.status,
            CommitTurnStatus::Duplicate,
            "a key commits once"
        );
        e.compact(&compact_params(true, 8_000), &cx())
            .await
            .unwrap();
        // `/new` with the same key: the old conversation is archived, summaries carried.
        let carried = e.on_session_reset(KEY, KEY).await.unwrap();
        assert!(carried.archived_conversation.is_some());
    }
    let all_a = sqlite.backend().conversations().await.unwrap();
    let all_b = pg.backend().conversations().await.unwrap();
    let shape = |v: &[clawctx_lossless::ConvRow]| {
        v.iter()
            .map(|c| {
                (
                    c.id,
                    c.active,
                    c.msg_count,
                    c.frontier_items,
                    c.frontier_tokens,
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(shape(&all_a), shape(&all_b));
    assert_eq!(all_b.len(), 2, "the archived conversation and the new one");
}

#[tokio::test]
async fn concurrent_resends_store_each_message_once() {
    let Some(db) = test_database("resend") else {
        return;
    };
    // Two stores on one database: two nodes.
    let n1 = Arc::new(PgStore::open_url(&db.url).await.unwrap());
    let n2 = Arc::new(PgStore::open_url(&db.url).await.unwrap());
    let h = history(20);
    let key = ConvKey::from_host(Some(KEY), "s1");
    let mut tasks = Vec::new();
    for i in 0..8 {
        let node: Arc<dyn Backend> = if i % 2 == 0 { n1.clone() } else { n2.clone() };
        let (h, key) = (h.clone(), key.clone());
        tasks.push(tokio::spawn(
            async move { node.ingest(&key, h).await.unwrap() },
        ));
    }
    let mut stored = 0;
    for t in tasks {
        stored += t.await.unwrap().stored.iter().filter(|s| **s).count();
    }
    assert_eq!(
        stored,
        h.len(),
        "every message stored exactly once across the re-sends"
    );
    let conv = n2.conversation(&key).await.unwrap().unwrap();
    assert_eq!(conv.msg_count, h.len() as i64);
    assert_eq!(conv.next_seq, h.len() as i64);
    assert_eq!(conv.frontier_items, h.len() as i64);
}

/// Ends every other connection to the test database, as a server restart or a network cut
/// would.
fn cut_connections(db: &TestDatabase) -> i64 {
    db.scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()) t",
    )
}

#[tokio::test]
async fn a_lost_connection_is_retried_and_loses_nothing() {
    let Some(db) = test_database("reconnect") else {
        return;
    };
    let store = Arc::new(PgStore::open_url(&db.url).await.unwrap());
    let key = ConvKey::from_host(Some(KEY), "s1");
    let h = history(30);
    store.ingest(&key, h[..10].to_vec()).await.unwrap();
    assert!(
        cut_connections(&db) > 0,
        "the pool's connections must have been cut"
    );
    // The next calls run on new connections.
    let out = store.ingest(&key, h[10..20].to_vec()).await.unwrap();
    assert!(out.stored.iter().all(|s| *s));
    let req = AssembleRequest {
        key: key.clone(),
        recent: Vec::new(),
        budget: 100_000,
        prompt: None,
        recall_reserve: 0,
        recall_max_messages: 0,
        recall_max_tokens: 0,
        cache_block_share: 0.0,
        whole_first: true,
        semantic: Vec::new(),
        lexical_recall: true,
    };
    let (_, assembled) = store.assemble(req).await.unwrap().unwrap();
    assert_eq!(assembled.messages.len(), 20);

    // Cut while a large batch is being written: the call either stores all of it or fails
    // with a clear error and stores none of it; a re-send then stores what is missing.
    let big: Vec<AgentMessage> = (0..3_000)
        .map(|i| AgentMessage::user(format!("bulk {i} of the batch")).with_timestamp(2_000_000 + i))
        .collect();
    let (s2, k2, b2) = (store.clone(), key.clone(), big.clone());
    let writing = tokio::spawn(async move { s2.ingest(&k2, b2).await });
    tokio::time::sleep(std::time::Duration::from_millis(15)).await;
    cut_connections(&db);
    let conv = |db: &TestDatabase| db.scalar("SELECT count(*) FROM messages");
    match writing.await.unwrap() {
        Ok(out) => assert_eq!(out.stored.len(), big.len()),
        Err(e) => {
            let shown = e.to_string();
            assert!(shown.contains("connection"), "a clear error: {shown}");
            assert_eq!(conv(&db), 20, "a failed batch leaves nothing behind");
        }
    }
    store.ingest(&key, big.clone()).await.unwrap();
    assert_eq!(conv(&db), 20 + big.len() as i64, "every message once");
    let row = store.conversation(&key).await.unwrap().unwrap();
    assert_eq!(
        row.msg_count,
        20 + big.len() as i64,
        "the totals match the rows"
    );
}
