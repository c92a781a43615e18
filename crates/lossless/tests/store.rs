//! The store layer on its own: schema migration from older versions, the streamed ingest
//! transaction, the distinct-word full-text index, and the background checkpointer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use clawctx_engine::ContextEngine;
use std::sync::Arc;

use clawctx_lossless::core::{codec, terms};
use clawctx_lossless::sqlite::encode_queue::EncodeFn;
use clawctx_lossless::sqlite::{schema, EncodeQueue};
use clawctx_lossless::*;
use clawctx_protocol::*;
use common::*;
use proptest::prelude::*;
use rusqlite::OptionalExtension;

fn key() -> ConvKey {
    ConvKey::from_host(Some(KEY), "s1")
}

fn batch(messages: Vec<AgentMessage>) -> IngestBatchParams {
    IngestBatchParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        messages,
        is_heartbeat: None,
    }
}

/// Writes a version-1 database the way version 1 stored messages (full text in an
/// external-content FTS table, identity indexed by hash alone).
fn write_v1_database(path: &std::path::Path, msgs: &[AgentMessage]) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(schema::V1).unwrap();
    conn.execute_batch(&format!(
        "PRAGMA application_id = {}; PRAGMA user_version = 1;",
        schema::APPLICATION_ID
    ))
    .unwrap();
    let k = key();
    conn.execute(
        "INSERT INTO conversations(agent_id, session_key, active, created_at, next_seq, next_ord, msg_count)
         VALUES(?1, ?2, 1, 0, ?3, ?3, ?3)",
        rusqlite::params![k.agent_id, k.session_key, msgs.len() as i64],
    )
    .unwrap();
    for (i, m) in msgs.iter().enumerate() {
        let e = codec::encode(m).unwrap();
        conn.execute(
            "INSERT INTO messages(id, conv_id, seq, role, tokens, ts, hash, n_calls, tool_call_id, skeleton, text)
             VALUES(?1, 1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            rusqlite::params![
                i as i64 + 1,
                i as i64,
                e.role,
                e.tokens as i64,
                e.ts,
                e.hash,
                e.n_calls,
                e.tool_call_id,
                e.skeleton,
                e.text
            ],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO messages_fts(rowid, text) VALUES(?1, ?2)",
            rusqlite::params![i as i64 + 1, e.text],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO frontier(conv_id, ord, kind, item_id, tokens) VALUES(1, ?1, 0, ?2, ?3)",
            rusqlite::params![i as i64, i as i64 + 1, e.tokens as i64],
        )
        .unwrap();
    }
    conn.execute(
        "UPDATE conversations SET msg_tokens = (SELECT sum(tokens) FROM messages),
         frontier_tokens = (SELECT sum(tokens) FROM messages), frontier_items = ?1,
         raw_bytes = (SELECT sum(length(CAST(text AS BLOB))) FROM messages)",
        [msgs.len() as i64],
    )
    .unwrap();
}

/// Asserts that the engine's store was migrated to the current schema version.
async fn assert_migrated(e: &LosslessEngine) {
    let version: i32 = e
        .store()
        .unwrap()
        .call(|db| db.tx(|c| Ok(c.query_row("PRAGMA user_version", [], |r| r.get(0))?)))
        .await
        .unwrap();
    assert_eq!(version, schema::SCHEMA_VERSION, "the file was not migrated");
}

#[tokio::test]
async fn a_version_1_database_migrates_and_stays_searchable_and_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let old = vec![
        AgentMessage::user("the Zanzibar deployment failed with E0425").with_timestamp(10),
        AgentMessage::assistant("Fixed it in src/zanzibar.rs, rerunning").with_timestamp(20),
        AgentMessage::user("no timestamp on this one, pelican"),
    ];
    write_v1_database(&path, &old);

    let e = LosslessEngine::open(&path, LosslessConfig::default()).unwrap();
    assert_migrated(&e).await;

    // Words of the old rows are found through the rebuilt index (with stemming: "deployments").
    for (q, want) in [("zanzibar deployments", "msg_1"), ("pelican", "msg_3")] {
        let hits = e
            .store()
            .unwrap()
            .grep(GrepQuery::new(q, Scope::Session(key())))
            .await
            .unwrap()
            .hits;
        assert!(
            hits.iter().any(|h| h.id == want),
            "query {q:?} should find {want} after migration, got {hits:?}"
        );
    }
    // Re-delivering the old messages (timestamped or not) stores nothing new.
    let again = e.ingest_batch(&batch(old.clone()), &cx()).await.unwrap();
    assert_eq!(
        again.ingested_count, 0,
        "migrated identities must still match"
    );
    let new = AgentMessage::user("a new message after the upgrade").with_timestamp(30);
    let r = e.ingest_batch(&batch(vec![new]), &cx()).await.unwrap();
    assert_eq!(r.ingested_count, 1);
    let report = e.store().unwrap().doctor().await.unwrap();
    assert!(report.ok, "doctor after migration: {:?}", report.issues);
}

/// Writes a version-3 database the way version 3 stored messages: skeletons inline in their
/// canonical form, texts compressed, the distinct-word index with document sizes.
fn write_v3_database(path: &std::path::Path, msgs: &[AgentMessage]) {
    let conn = rusqlite::Connection::open(path).unwrap();
    clawctx_lossless::sqlite::unpack::register(&conn).unwrap();
    for v in [schema::V1, schema::V2, schema::V3] {
        conn.execute_batch(v).unwrap();
    }
    conn.execute_batch(&format!(
        "PRAGMA application_id = {}; PRAGMA user_version = 3;",
        schema::APPLICATION_ID
    ))
    .unwrap();
    let k = key();
    conn.execute(
        "INSERT INTO conversations(agent_id, session_key, active, created_at, next_seq, next_ord, msg_count)
         VALUES(?1, ?2, 1, 0, ?3, ?3, ?3)",
        rusqlite::params![k.agent_id, k.session_key, msgs.len() as i64],
    )
    .unwrap();
    for (i, m) in msgs.iter().enumerate() {
        let e = codec::encode(m).unwrap();
        let text = match &e.packed {
            Some(frame) => rusqlite::types::Value::Blob(frame.clone()),
            None => rusqlite::types::Value::Text(e.text.clone()),
        };
        conn.execute(
            "INSERT INTO messages(id, conv_id, seq, role, tokens, ts, hash, n_calls, tool_call_id, skeleton, text)
             VALUES(?1, 1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            rusqlite::params![
                i as i64 + 1,
                i as i64,
                e.role,
                e.tokens as i64,
                e.ts,
                e.hash,
                e.n_calls,
                e.tool_call_id,
                e.skeleton,
                text
            ],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO messages_fts(rowid, text) VALUES(?1, ?2)",
            rusqlite::params![i as i64 + 1, e.fts],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO frontier(conv_id, ord, kind, item_id, tokens) VALUES(1, ?1, 0, ?2, ?3)",
            rusqlite::params![i as i64, i as i64 + 1, e.tokens as i64],
        )
        .unwrap();
    }
    conn.execute(
        "UPDATE conversations SET msg_tokens = (SELECT sum(tokens) FROM messages),
         frontier_tokens = (SELECT sum(tokens) FROM messages), frontier_items = ?1,
         raw_bytes = (SELECT sum(length(CAST(unpack(text) AS BLOB))) FROM messages)",
        [msgs.len() as i64],
    )
    .unwrap();
}

#[tokio::test]
async fn a_version_3_database_migrates_reads_back_and_shares_new_skeletons() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v3.db");
    let mut rng = Lcg(5);
    let mut old = Vec::new();
    for t in 0..6 {
        old.extend(turn(&mut rng, t, t % 2 == 0, 60));
    }
    write_v3_database(&path, &old);

    let e = LosslessEngine::open(&path, LosslessConfig::default()).unwrap();
    assert_migrated(&e).await;
    let automerge: i64 = e
        .store()
        .unwrap()
        .call(|db| {
            db.tx(|c| {
                Ok(c.query_row(
                    "SELECT v FROM messages_fts_config WHERE k = 'automerge'",
                    [],
                    |r| r.get(0),
                )?)
            })
        })
        .await
        .unwrap();
    assert_eq!(automerge, 16, "v6 sets the message index's merge width");
    // Old rows (inline canonical skeletons, compressed texts) read back exactly.
    for (i, m) in old.iter().enumerate() {
        match e
            .store()
            .unwrap()
            .describe(&format!("msg_{}", i + 1))
            .await
            .unwrap()
        {
            DescribeReport::Message(info) => assert_eq!(&info.message, m, "msg_{}", i + 1),
            other => panic!("{other:?}"),
        }
    }
    // The rebuilt index finds old rows.
    let hits = e
        .store()
        .unwrap()
        .grep(GrepQuery::new("nd4x9", Scope::Session(key())))
        .await
        .unwrap()
        .hits;
    assert_eq!(hits.len(), 1, "{hits:?}");
    // Re-delivering the old messages stores nothing new.
    let again = e.ingest_batch(&batch(old.clone()), &cx()).await.unwrap();
    assert_eq!(
        again.ingested_count, 0,
        "migrated identities must still match"
    );
    // New messages: the plain replies' skeletons are shared after the first one.
    let mut new = Vec::new();
    for t in 6..12 {
        new.extend(turn(&mut rng, t, t % 2 == 0, 60));
    }
    let r = e.ingest_batch(&batch(new.clone()), &cx()).await.unwrap();
    assert_eq!(r.ingested_count as usize, new.len());
    let (shared, referencing): (i64, i64) = e
        .store()
        .unwrap()
        .call(|db| {
            db.tx(|c| {
                Ok(c.query_row(
                    "SELECT (SELECT count(*) FROM skeletons), (SELECT count(*) FROM messages WHERE skel IS NOT NULL)",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?)
            })
        })
        .await
        .unwrap();
    assert_eq!(shared, 1, "one skeleton for the plain replies");
    // The re-delivered old replies were its first sighting, so all six new replies share it.
    assert_eq!(referencing, 6, "every new plain reply references it");
    for (i, m) in new.iter().enumerate() {
        let id = format!("msg_{}", old.len() + i + 1);
        match e.store().unwrap().describe(&id).await.unwrap() {
            DescribeReport::Message(info) => assert_eq!(&info.message, m, "{id}"),
            other => panic!("{other:?}"),
        }
    }
    let assembled = e
        .assemble(&assemble_params(Vec::new(), 100_000), &cx())
        .await
        .unwrap();
    let mut all = old.clone();
    all.extend(new);
    assert_eq!(
        assembled.messages, all,
        "assembly reads old and new rows back exactly"
    );
    let again = e.ingest_batch(&batch(all), &cx()).await.unwrap();
    assert_eq!(again.ingested_count, 0);
    let report = e.store().unwrap().doctor().await.unwrap();
    assert!(report.ok, "doctor after migration: {:?}", report.issues);
}

#[tokio::test]
async fn a_large_batch_streams_in_order_and_skips_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir, small_cfg());
    let mut rng = Lcg(7);
    let mut msgs = Vec::new();
    for t in 0..40 {
        msgs.extend(turn(&mut rng, t, t % 3 == 0, 40));
    }
    // Repeats inside the batch (the host re-sent a stretch) and a timeless duplicate pair.
    let mut sent = msgs.clone();
    sent.extend_from_slice(&msgs[10..30]);
    sent.push(AgentMessage::user("timeless"));
    sent.push(AgentMessage::user("timeless"));
    assert!(sent.len() > 100, "the batch must be large enough to stream");
    let r = e.ingest_batch(&batch(sent), &cx()).await.unwrap();
    assert_eq!(r.ingested_count as usize, msgs.len() + 1);
    // Stored in input order: message n is the n-th distinct input.
    for (i, m) in msgs.iter().enumerate().step_by(17) {
        match e
            .store()
            .unwrap()
            .describe(&format!("msg_{}", i + 1))
            .await
            .unwrap()
        {
            DescribeReport::Message(info) => assert_eq!(&info.message, m, "msg_{}", i + 1),
            other => panic!("msg_{} is not a message: {other:?}", i + 1),
        }
    }
    assert!(e.store().unwrap().doctor().await.unwrap().ok);
}

fn fails_on_m4(m: &AgentMessage) -> clawctx_lossless::error::Result<codec::Encoded> {
    if m.plain_text() == "m4" {
        return Err(LosslessError::InvalidInput("bad message 4".into()));
    }
    codec::encode(m)
}

fn panics_on_m4(m: &AgentMessage) -> clawctx_lossless::error::Result<codec::Encoded> {
    assert_ne!(m.plain_text(), "m4", "this encoder gives up on m4");
    codec::encode(m)
}

#[test]
fn an_encoding_failure_rolls_the_whole_batch_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = LosslessStore::open(dir.path().join("s.db")).unwrap();
    let msgs: Vec<_> = (0..40)
        .map(|i| AgentMessage::user(format!("m{i}")).with_timestamp(i))
        .collect();

    // Message 4 sits in the second chunk: the first chunk is inserted before it fails. Once
    // with an encoder thread, once with the store thread encoding everything itself.
    for f in [fails_on_m4 as EncodeFn, panics_on_m4] {
        for threaded in [false, true] {
            let q = Arc::new(EncodeQueue::with_encoder(msgs.clone(), 4, f));
            let encoder = threaded.then(|| {
                let q = q.clone();
                std::thread::spawn(move || q.run_encoder())
            });
            let sq = q.clone();
            let err = store
                .call_blocking(move |db| db.ingest_queue(&key(), &sq))
                .unwrap_err();
            let err = err.to_string();
            assert!(
                err.contains("bad message 4") || err.contains("panicked"),
                "{err}"
            );
            if let Some(h) = encoder {
                h.join().unwrap();
            }
        }
    }
    let count = store
        .call_blocking(|db| Ok(db.conversation(&key())?.map_or(0, |c| c.msg_count)))
        .unwrap();
    assert_eq!(count, 0, "a failed batch must leave nothing behind");

    // The whole batch commits, in order.
    let q = Arc::new(EncodeQueue::new(msgs.clone(), 4));
    let encoder = {
        let q = q.clone();
        std::thread::spawn(move || q.run_encoder())
    };
    let out = store
        .call_blocking(move |db| db.ingest_queue(&key(), &q))
        .unwrap();
    encoder.join().unwrap();
    assert_eq!(out.stored, vec![true; 40]);
    store.close();
    let conn = rusqlite::Connection::open(dir.path().join("s.db")).unwrap();
    let seq_texts: Vec<String> = conn
        .prepare("SELECT text FROM messages ORDER BY seq")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    let want: Vec<String> = (0..40).map(|i| format!("m{i}")).collect();
    assert_eq!(seq_texts, want, "stored in batch order");
}

#[tokio::test]
async fn megabytes_written_are_checkpointed_and_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.db");
    let mut rng = Lcg(3);
    let mut n = 0usize;
    {
        let e = LosslessEngine::open(&path, LosslessConfig::default()).unwrap();
        // ~9 MB of text: past the checkpoint threshold twice.
        for b in 0..30 {
            let msgs: Vec<AgentMessage> = (0..50)
                .map(|i| {
                    AgentMessage::user(format!("b{b} i{i} {}", words(&mut rng, 1_000)))
                        .with_timestamp((b * 100 + i) as i64)
                })
                .collect();
            n += msgs.len();
            e.ingest_batch(&batch(msgs), &cx()).await.unwrap();
        }
        e.store().unwrap().close();
    }
    // The close is asynchronous (the store thread finishes its queue): wait for the log to
    // be folded into the file, which the last connection does when it closes.
    let wal = dir.path().join("big.db-wal");
    for _ in 0..200 {
        if !wal.exists() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(
        !wal.exists(),
        "the log should be checkpointed and removed on close"
    );
    let e = LosslessEngine::open(&path, LosslessConfig::default()).unwrap();
    let convs = e.store().unwrap().conversations().await.unwrap();
    assert_eq!(convs[0].msg_count as usize, n);
    assert!(e.store().unwrap().doctor().await.unwrap().ok);
}

/// The `CREATE` statements of the two full-text tables.
fn fts_tables(c: &rusqlite::Connection) -> Vec<String> {
    let mut st = c
        .prepare("SELECT sql FROM sqlite_master WHERE name IN ('messages_fts', 'summaries_fts') ORDER BY name")
        .unwrap();
    let sql = st
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .collect::<rusqlite::Result<Vec<_>>>()
        .unwrap();
    sql
}

#[tokio::test]
async fn a_version_6_database_is_reindexed_with_terms_made_in_rust() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lcm.db");
    // A store with messages and summaries, then put back into v6's shape: the same tables but
    // full-text indexes tokenized (and stemmed) by FTS5, filled from the texts.
    let mut rng = Lcg(61);
    let mut msgs = vec![AgentMessage::user("the Zanzibar deployments failed").with_timestamp(1)];
    for t in 0..30 {
        msgs.extend(turn(&mut rng, t + 10, t % 3 == 0, 30));
    }
    let summary_word = {
        let e = engine(&dir, small_cfg());
        e.ingest_batch(&batch(msgs.clone()), &cx()).await.unwrap();
        e.compact(&compact_params(true, 8_000), &cx())
            .await
            .unwrap();
        e.store().unwrap().close_wait().await;
        let c = rusqlite::Connection::open(&path).unwrap();
        let text: String = c
            .query_row("SELECT text FROM summaries ORDER BY id LIMIT 1", [], |r| {
                r.get(0)
            })
            .expect("compaction made a summary");
        let word = terms::words(&text)
            .find(|w| w.len() > 6 && w.bytes().all(|b| b.is_ascii_lowercase()))
            .expect("a long word in the summary")
            .to_owned();
        clawctx_lossless::sqlite::unpack::register(&c).unwrap();
        c.execute_batch(
            "DROP TABLE messages_fts; DROP TABLE summaries_fts;
             CREATE VIRTUAL TABLE messages_fts USING fts5(
               text, content='', columnsize=0, detail=none, tokenize='porter unicode61 remove_diacritics 2');
             INSERT INTO messages_fts(messages_fts, rank) VALUES('automerge', 16);
             CREATE VIRTUAL TABLE summaries_fts USING fts5(
               text, content='', contentless_delete=1, tokenize='porter unicode61 remove_diacritics 2');
             INSERT INTO messages_fts(rowid, text) SELECT id, text FROM message_rows;
             INSERT INTO summaries_fts(rowid, text) SELECT id, text FROM summaries;
             UPDATE fts_state SET upto = 0;
             DROP TABLE turn_commits;
             DROP TABLE vectors; DROP TABLE embed_models;
             PRAGMA user_version = 6;",
        )
        .unwrap();
        word
    };

    let e = LosslessEngine::open(&path, LosslessConfig::default()).unwrap();
    let (version, tables, upto, newest) = e
        .store()
        .unwrap()
        .call(|db| {
            db.tx(|c| {
                let v: i32 = c.query_row("PRAGMA user_version", [], |r| r.get(0))?;
                let (upto, newest): (i64, i64) = c.query_row(
                    "SELECT (SELECT upto FROM fts_state), (SELECT max(id) FROM messages)",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?;
                Ok((v, fts_tables(c), upto, newest))
            })
        })
        .await
        .unwrap();
    assert_eq!(version, schema::SCHEMA_VERSION, "the file was not migrated");
    assert_eq!(tables.len(), 2);
    for sql in &tables {
        assert!(
            sql.contains(&format!("tokenize='{}'", terms::TOKENIZER)),
            "an index kept its old tokenizer: {sql}"
        );
    }
    assert_eq!(upto, newest, "every message is in the rebuilt file index");
    for (q, target, want) in [
        ("deployment", GrepTarget::Messages, "msg_1".to_owned()),
        (
            summary_word.as_str(),
            GrepTarget::Summaries,
            "sum_".to_owned(),
        ),
    ] {
        let mut query = GrepQuery::new(q, Scope::Session(key()));
        query.target = target;
        let hits = e.store().unwrap().grep(query).await.unwrap().hits;
        assert!(
            hits.iter().any(|h| h.id.starts_with(&want)),
            "{q:?} should find {want} in the rebuilt index, got {hits:?}"
        );
    }
    assert!(e.store().unwrap().doctor().await.unwrap().ok);
}

/// Whether the store at `path` has a schema object of `kind` (`index`, `table`) named `name`.
fn has_object(path: &std::path::Path, kind: &str, name: &str) -> bool {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = ?1 AND name = ?2",
            [kind, name],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
        == 1
}

/// Whether the store at `path` has an index named `name`.
fn has_index(path: &std::path::Path, name: &str) -> bool {
    has_object(path, "index", name)
}

#[tokio::test]
async fn a_version_7_database_loses_the_seq_index_and_keeps_every_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lcm.db");
    let mut rng = Lcg(71);
    let mut msgs = Vec::new();
    for t in 0..20 {
        msgs.extend(turn(&mut rng, t + 10, t % 3 == 0, 30));
    }
    {
        let e = engine(&dir, small_cfg());
        e.ingest_batch(&batch(msgs.clone()), &cx()).await.unwrap();
        e.store().unwrap().close_wait().await;
    }
    assert!(
        !has_index(&path, "messages_seq"),
        "a new store has no seq index"
    );
    // Back into v7's shape: the same tables plus the unique (conv_id, seq) index, without
    // v9's `turn_commits`.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE UNIQUE INDEX messages_seq ON messages(conv_id, seq);
             DROP TABLE turn_commits; DROP TABLE vectors; DROP TABLE embed_models;
             PRAGMA user_version = 7;",
        )
        .unwrap();

    let e = LosslessEngine::open(&path, LosslessConfig::default()).unwrap();
    assert_migrated(&e).await;
    let again = e.ingest_batch(&batch(msgs.clone()), &cx()).await.unwrap();
    assert_eq!(
        again.ingested_count, 0,
        "every message is still there, once"
    );
    let more = e
        .ingest_batch(&batch(turn(&mut rng, 100, true, 30)), &cx())
        .await
        .unwrap();
    assert!(more.ingested_count > 0);
    let report = e.store().unwrap().doctor().await.unwrap();
    assert!(report.ok, "doctor after migration: {:?}", report.issues);
    e.store().unwrap().close_wait().await;
    assert!(
        !has_index(&path, "messages_seq"),
        "the migration dropped the seq index"
    );
}

fn has_table(path: &std::path::Path, name: &str) -> bool {
    has_object(path, "table", name)
}

#[tokio::test]
async fn a_version_8_database_gains_turn_commits_and_keeps_every_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lcm.db");
    let mut rng = Lcg(89);
    let mut msgs = Vec::new();
    for t in 0..20 {
        msgs.extend(turn(&mut rng, t + 10, t % 3 == 0, 30));
    }
    {
        let e = engine(&dir, small_cfg());
        e.ingest_batch(&batch(msgs.clone()), &cx()).await.unwrap();
        e.store().unwrap().close_wait().await;
    }
    // Back into v8's shape: the same tables without `turn_commits`.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "DROP TABLE turn_commits; DROP TABLE vectors; DROP TABLE embed_models; \
             PRAGMA user_version = 8;",
        )
        .unwrap();
    assert!(!has_table(&path, "turn_commits"));

    let e = LosslessEngine::open(&path, LosslessConfig::default()).unwrap();
    assert_migrated(&e).await;
    assert!(
        has_table(&path, "turn_commits"),
        "the v9 migration creates the table commitTurn records its keys in (§1.7)"
    );
    let again = e.ingest_batch(&batch(msgs.clone()), &cx()).await.unwrap();
    assert_eq!(
        again.ingested_count, 0,
        "every message is still there, once"
    );
    let turn_msgs = turn(&mut rng, 100, true, 30);
    let p = CommitTurnParams {
        advancement_key: "adv-after-migration".into(),
        messages: turn_msgs.clone(),
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        ..Default::default()
    };
    assert_eq!(
        e.commit_turn(&p, &cx()).await.unwrap().status,
        CommitTurnStatus::Committed,
        "§1.7: a migrated store commits turns"
    );
    assert_eq!(
        e.commit_turn(&p, &cx()).await.unwrap().status,
        CommitTurnStatus::Duplicate,
        "§1.7: and knows a committed key again"
    );
    let conv = e.store().unwrap().conversations().await.unwrap();
    assert_eq!(
        conv[0].msg_count as usize,
        msgs.len() + turn_msgs.len(),
        "the old messages and the committed turn, each once"
    );
    let report = e.store().unwrap().doctor().await.unwrap();
    assert!(report.ok, "doctor after migration: {:?}", report.issues);
}

#[tokio::test]
async fn doctor_reports_two_messages_sharing_a_seq() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lcm.db");
    {
        let e = engine(&dir, small_cfg());
        let msgs = vec![
            AgentMessage::user("first").with_timestamp(1),
            AgentMessage::assistant("second").with_timestamp(2),
        ];
        e.ingest_batch(&batch(msgs), &cx()).await.unwrap();
        e.store().unwrap().close_wait().await;
    }
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("UPDATE messages SET seq = 0")
        .unwrap();
    let e = LosslessEngine::open(&path, LosslessConfig::default()).unwrap();
    let report = e.store().unwrap().doctor().await.unwrap();
    assert!(
        report.issues.iter().any(|i| i.code == "duplicate-seq"),
        "doctor missed the shared seq: {:?}",
        report.issues
    );
}

/// An in-memory index with our tokenizer settings holding `index_terms(text)` as row 1, and
/// the terms FTS5 made of it.
fn index_of(text: &str) -> (rusqlite::Connection, Vec<String>) {
    let conn = rusqlite::Connection::open_in_memory().unwrap();
    conn.execute_batch(&format!(
        "CREATE VIRTUAL TABLE f USING fts5(text, content='', detail=none, tokenize='{}');
         CREATE VIRTUAL TABLE v USING fts5vocab(f, 'row');",
        terms::TOKENIZER
    ))
    .unwrap();
    conn.execute(
        "INSERT INTO f(rowid, text) VALUES(1, ?1)",
        [terms::index_terms(text)],
    )
    .unwrap();
    let mut st = conn.prepare("SELECT term FROM v ORDER BY term").unwrap();
    let vocab = st
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .collect::<rusqlite::Result<Vec<_>>>()
        .unwrap();
    drop(st);
    (conn, vocab)
}

fn text_strategy() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[A-Za-z]{1,12}",
        "[0-9]{1,6}",
        "[ \t\r\n.,;:!?/\\\\_'\"()\\[\\]{}<>=+*&^%$#@~`|-]{1,3}",
        "(Café|naïve|Straße|ÉCOLE|日本語|Привет|emoji🙂x|ﬁle|İstanbul|x\u{301}y|ΟΔΟΣ|οδος|café2)",
        ".{1,4}",
    ];
    proptest::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// The index holds exactly the terms `index_terms` made (the tokenizer splits them nowhere
    /// else), and every word of the text, queried as a user's or the model's query is, finds
    /// the row.
    #[test]
    fn every_word_of_a_text_finds_it_through_the_index(text in text_strategy()) {
        let (conn, vocab) = index_of(&text);
        let mut made: Vec<String> = terms::index_terms(&text)
            .split(' ')
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect();
        made.sort();
        prop_assert_eq!(&vocab, &made, "FTS5 split the terms of {:?} differently", text);
        // As written, and lowercased the way `search::query_terms` lowercases a prompt's words.
        let queries = text
            .split_whitespace()
            .chain(terms::words(&text))
            .flat_map(|w| [w.to_owned(), w.to_lowercase()]);
        for w in queries {
            let Some(q) = terms::fts_and_query(&w, usize::MAX) else { continue };
            let hit: Option<i64> = conn
                .query_row("SELECT rowid FROM f WHERE f MATCH ?1", [&q], |r| r.get(0))
                .optional()
                .unwrap();
            prop_assert_eq!(hit, Some(1), "{:?} (query {}) does not find {:?}", w, q, text);
        }
    }
}

/// A tool call and its (large) result.
fn big_read(id: &str, t: i64, body: &str) -> Vec<AgentMessage> {
    vec![
        AgentMessage::tool_call(id, "read", serde_json::json!({"path": "src/big.rs"}))
            .with_timestamp(t),
        AgentMessage::tool_result(id, "read", body).with_timestamp(t + 1),
    ]
}

fn big_body(rng: &mut Lcg, marker: &str) -> String {
    format!("{marker} {}", words(rng, 4_000))
}

#[tokio::test]
async fn identical_large_outputs_are_stored_once_and_read_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir, LosslessConfig::default());
    let mut rng = Lcg(21);
    let body = big_body(&mut rng, "platypusmarker");
    assert!(body.len() > 16_000);
    let mut msgs = big_read("c1", 10, &body);
    msgs.extend(big_read("c2", 20, &body));
    msgs.push(AgentMessage::assistant("read it twice").with_timestamp(30));
    e.ingest_batch(&batch(msgs), &cx()).await.unwrap();

    let (payloads, refs, inline_bytes): (i64, i64, i64) = e
        .store()
        .unwrap()
        .call(|db| {
            db.tx(|c| {
                Ok(c.query_row(
                    "SELECT (SELECT count(*) FROM payloads), (SELECT sum(refs) FROM payloads),
                            (SELECT sum(length(text)) FROM messages)",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )?)
            })
        })
        .await
        .unwrap();
    assert_eq!(
        (payloads, refs),
        (1, 2),
        "the same output must be stored once, used twice"
    );
    assert!(
        inline_bytes < 1_000,
        "message rows must not hold the text: {inline_bytes} bytes"
    );

    for id in ["msg_2", "msg_4"] {
        match e.store().unwrap().describe(id).await.unwrap() {
            DescribeReport::Message(info) => assert_eq!(info.message.plain_text(), body, "{id}"),
            other => panic!("{id}: {other:?}"),
        }
    }
    let hits = e
        .store()
        .unwrap()
        .grep(GrepQuery::new("platypusmarker", Scope::Session(key())))
        .await
        .unwrap()
        .hits;
    assert_eq!(hits.len(), 2, "{hits:?}");
    let out = e
        .assemble(
            &assemble_params(vec![AgentMessage::user("next").with_timestamp(40)], 100_000),
            &cx(),
        )
        .await
        .unwrap();
    let n = out
        .messages
        .iter()
        .filter(|m| m.plain_text() == body)
        .count();
    assert_eq!(n, 2, "assembly must show both results whole");
    assert!(e.store().unwrap().doctor().await.unwrap().ok);
}

#[tokio::test]
async fn retention_replaces_only_summarized_payloads_and_keeps_them_findable() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir, small_cfg());
    let mut rng = Lcg(22);
    let old_body = big_body(&mut rng, "wombatmarker");
    let new_body = big_body(&mut rng, "echidnamarker");
    let mut msgs = vec![AgentMessage::user("read the big file").with_timestamp(1)];
    msgs.extend(big_read("c1", 2, &old_body));
    for t in 0..30 {
        msgs.extend(turn(&mut rng, t + 10, false, 30));
    }
    msgs.extend(big_read("c9", 9_000_000_000_000, &new_body));
    e.ingest_batch(&batch(msgs.clone()), &cx()).await.unwrap();
    e.compact(&compact_params(true, 8_000), &cx())
        .await
        .unwrap();

    // Everything is "old" for a cutoff in the future; only the summarized payload may go.
    let cutoff = i64::MAX;
    let dry = e
        .store()
        .unwrap()
        .call(move |db| db.expire_payloads(cutoff, false))
        .await
        .unwrap();
    assert_eq!(
        (
            dry.candidates,
            dry.payloads_expired,
            dry.payloads_in_context
        ),
        (2, 1, 1),
        "{dry:?}"
    );
    assert!(dry.dry_run);
    let report = e
        .store()
        .unwrap()
        .call(move |db| db.expire_payloads(cutoff, true))
        .await
        .unwrap();
    assert_eq!(
        (report.payloads_expired, report.messages_rewritten),
        (1, 1),
        "{report:?}"
    );
    assert!(report.bytes_freed as usize >= old_body.len());

    let text_of = |id: &'static str| {
        let store = e.store().unwrap().clone();
        async move {
            match store.describe(id).await.unwrap() {
                DescribeReport::Message(info) => info.message.plain_text(),
                other => panic!("{id}: {other:?}"),
            }
        }
    };
    let old = text_of("msg_3").await;
    assert!(old.contains("removed by the retention policy"), "{old}");
    assert!(!old.contains("wombatmarker"));
    let newest = e.store().unwrap().conversations().await.unwrap()[0].msg_count;
    let last = format!("msg_{newest}");
    let new_text = match e.store().unwrap().describe(&last).await.unwrap() {
        DescribeReport::Message(info) => info.message.plain_text(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        new_text, new_body,
        "a payload still in context is never touched"
    );

    // Still found by a word of the original, still recognized when re-delivered.
    let hits = e
        .store()
        .unwrap()
        .grep(GrepQuery::new("wombatmarker", Scope::Session(key())))
        .await
        .unwrap()
        .hits;
    assert!(hits.iter().any(|h| h.id == "msg_3"), "{hits:?}");
    let again = e.ingest_batch(&batch(msgs), &cx()).await.unwrap();
    assert_eq!(again.ingested_count, 0);
    let doctor = e.store().unwrap().doctor().await.unwrap();
    assert!(doctor.ok, "{:?}", doctor.issues);
}

#[tokio::test]
async fn long_texts_are_stored_compressed_and_read_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir, LosslessConfig::default());
    let mut rng = Lcg(31);
    let long = format!("aardvark {}", words(&mut rng, 1_200));
    let short = "a short reply".to_owned();
    let msgs = vec![
        AgentMessage::user(long.clone()).with_timestamp(1),
        AgentMessage::assistant(short.clone()).with_timestamp(2),
    ];
    e.ingest_batch(&batch(msgs), &cx()).await.unwrap();
    let (kinds, stored): (Vec<String>, i64) = e
        .store()
        .unwrap()
        .call(|db| {
            db.tx(|c| {
                let kinds = c
                    .prepare("SELECT typeof(text) FROM messages ORDER BY id")?
                    .query_map([], |r| r.get(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()?;
                let stored: i64 =
                    c.query_row("SELECT length(text) FROM messages WHERE id = 1", [], |r| {
                        r.get(0)
                    })?;
                Ok((kinds, stored))
            })
        })
        .await
        .unwrap();
    assert_eq!(
        kinds,
        vec!["blob", "text"],
        "long text compressed, short text as is"
    );
    assert!(
        (stored as usize) * 2 < long.len(),
        "{stored} stored bytes for {} text bytes",
        long.len()
    );
    for (id, want) in [("msg_1", &long), ("msg_2", &short)] {
        match e.store().unwrap().describe(id).await.unwrap() {
            DescribeReport::Message(info) => assert_eq!(&info.message.plain_text(), want),
            other => panic!("{other:?}"),
        }
    }
    let hits = e
        .store()
        .unwrap()
        .grep(GrepQuery::new("aardvark", Scope::Session(key())))
        .await
        .unwrap()
        .hits;
    assert_eq!(hits.len(), 1);
    assert!(hits[0].snippet.contains("aardvark"), "{hits:?}");
}

#[tokio::test]
async fn the_log_stays_bounded_when_every_turn_commits_a_little() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("turns.db");
    let e = LosslessEngine::open(&path, LosslessConfig::default()).unwrap();
    let mut rng = Lcg(41);
    // 3,000 small commits: without background checkpoints the log would hold every page each
    // of them touched (tens of MB).
    for t in 0..3_000i64 {
        let m = AgentMessage::user(format!("turn {t} {}", words(&mut rng, 12))).with_timestamp(t);
        e.ingest(
            &IngestParams {
                session_id: "s1".into(),
                session_key: Some(KEY.into()),
                message: m,
                is_heartbeat: None,
            },
            &cx(),
        )
        .await
        .unwrap();
    }
    let wal = std::fs::metadata(dir.path().join("turns.db-wal"))
        .map(|m| m.len())
        .unwrap_or(0);
    assert!(
        wal < 48 << 20,
        "the write-ahead log grew to {wal} bytes (137 MB without checkpoints)"
    );
    assert_eq!(
        e.store().unwrap().conversations().await.unwrap()[0].msg_count,
        3_000
    );
}

/// A term's cached newest rows are brought up to date by later messages, and always equal
/// what a fresh connection (no cache) reads.
#[test]
fn cached_term_rows_follow_new_messages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let store = LosslessStore::open(&path).unwrap();
    let mut ts = 0i64;
    let mut batch = |n: usize, word: &str| -> Vec<codec::Encoded> {
        (0..n)
            .map(|i| {
                ts += 1;
                let text = if i % 3 == 0 {
                    format!("{word} marker {ts}")
                } else {
                    format!("other {ts}")
                };
                codec::encode(&AgentMessage::user(text).with_timestamp(ts)).unwrap()
            })
            .collect()
    };
    let rows = |store: &LosslessStore, window: usize| {
        store
            .call_blocking(move |db| {
                db.read(|db| {
                    // Another connection's newest messages are indexed from their text here.
                    db.sync_pending_index()?;
                    let all = db.term_rows("marker", window, &[])?;
                    // Every message is the one conversation's: scoped to it, the same rows.
                    let scoped = db.term_rows("marker", window, &[1])?;
                    assert_eq!(all, scoped, "window {window}");
                    Ok(all)
                })
            })
            .unwrap()
            .unwrap()
    };
    // Small batches wait in the in-memory index of the newest messages, large ones go to the
    // file's index directly, and a second connection's writes move the file index's boundary
    // under the first one's cache: each must show up in the cached lists.
    let other = LosslessStore::open(&path).unwrap();
    for (round, n) in [30usize, 37, 80, 44, 600, 20, 9, 70]
        .into_iter()
        .enumerate()
    {
        let b = batch(n, "alpha");
        let writer = if round % 3 == 2 { &other } else { &store };
        writer
            .call_blocking(move |db| db.ingest(&key(), &b))
            .unwrap();
        for window in [5, 12, 1_000] {
            let cached = rows(&store, window);
            let fresh_store = LosslessStore::open(&path).unwrap();
            let fresh = rows(&fresh_store, window);
            fresh_store.close();
            assert_eq!(cached, fresh, "round {round}, window {window}");
            assert!(
                cached.windows(2).all(|w| w[0] > w[1]),
                "newest first: {cached:?}"
            );
            assert!(cached.len() <= window);
        }
    }
}

fn upto(path: &std::path::Path) -> i64 {
    let c = rusqlite::Connection::open(path).unwrap();
    c.query_row("SELECT upto FROM fts_state WHERE k = 1", [], |r| r.get(0))
        .unwrap()
}

/// The boundary once the store thread has indexed what waits (it does when idle): polls until
/// it reaches the newest message, or gives up after ten seconds and returns what it is.
fn settled(path: &std::path::Path) -> i64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let b = upto(path);
        if b == max_id(path) || std::time::Instant::now() > deadline {
            return b;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn max_id(path: &std::path::Path) -> i64 {
    let c = rusqlite::Connection::open(path).unwrap();
    c.query_row("SELECT max(id) FROM messages", [], |r| r.get(0))
        .unwrap()
}

/// Small batches are indexed in memory first and moved to the file's index in bulk; other
/// connections index them from their text meanwhile; large batches go to the file's index
/// directly. Every message is found exactly once at every step.
#[tokio::test]
async fn the_newest_messages_index_is_searchable_from_every_connection() {
    use clawctx_lossless::sqlite::pending_fts::{DIRECT_MIN, FLUSH_ROWS};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let writer = LosslessStore::open(&path).unwrap();
    let mut next = 0i64;
    let turn = |next: &mut i64, n: usize| -> Vec<codec::Encoded> {
        (0..n)
            .map(|_| {
                *next += 1;
                let m = AgentMessage::user(format!("turn word{next}x and common"))
                    .with_timestamp(*next);
                codec::encode(&m).unwrap()
            })
            .collect()
    };
    let hits = |store: &LosslessStore, n: i64| {
        let q = GrepQuery::new(format!("word{n}x"), Scope::Session(key()));
        let store = store.clone();
        async move { store.grep(q).await.unwrap().hits.len() }
    };

    // A few turns: nothing reaches the file's index yet.
    for _ in 0..5 {
        let b = turn(&mut next, 2);
        writer
            .call_blocking(move |db| db.ingest(&key(), &b))
            .unwrap();
    }
    assert_eq!(upto(&path), 0, "two-message turns wait in memory");
    assert_eq!(
        hits(&writer, 3).await,
        1,
        "the writer finds its pending messages"
    );
    let reader = LosslessStore::open(&path).unwrap();
    assert_eq!(
        hits(&reader, 3).await,
        1,
        "another connection indexes them from their text"
    );

    // Enough turns to move them: the boundary passes every message, and neither connection
    // sees a message twice (the reader's copies of moved rows are dropped).
    while (next as usize) < FLUSH_ROWS + 10 {
        let b = turn(&mut next, 2);
        writer
            .call_blocking(move |db| db.ingest(&key(), &b))
            .unwrap();
    }
    // The move runs after a job's answer: any later job sees it done.
    writer.call_blocking(|_| Ok(())).unwrap();
    let moved = upto(&path);
    assert!(
        moved >= FLUSH_ROWS as i64,
        "moved to the file's index at {moved}"
    );
    for n in [1, 3, moved, next] {
        assert_eq!(hits(&writer, n).await, 1, "writer, message {n}");
        assert_eq!(hits(&reader, n).await, 1, "reader, message {n}");
    }

    // The reader writes a turn of its own, then a large batch goes to the file's index
    // directly, after everything pending; the boundary is then every message.
    let b = turn(&mut next, 2);
    let reader_turn = next;
    reader
        .call_blocking(move |db| db.ingest(&key(), &b))
        .unwrap();
    assert_eq!(
        hits(&writer, reader_turn).await,
        1,
        "the writer sees the reader's turn"
    );
    let b = turn(&mut next, DIRECT_MIN);
    writer
        .call_blocking(move |db| db.ingest(&key(), &b))
        .unwrap();
    // The batch is indexed once the store thread is idle.
    assert_eq!(
        settled(&path),
        max_id(&path),
        "a large batch leaves nothing pending"
    );
    for n in [reader_turn, next - 1, next] {
        assert_eq!(hits(&writer, n).await, 1, "writer, message {n}");
        assert_eq!(hits(&reader, n).await, 1, "reader, message {n}");
    }

    // Pending messages of a connection that closes are moved to the file's index.
    let b = turn(&mut next, 2);
    reader
        .call_blocking(move |db| db.ingest(&key(), &b))
        .unwrap();
    reader.close_blocking();
    writer.close_blocking();
    assert_eq!(upto(&path), max_id(&path), "closing moves what waits");
    let again = LosslessStore::open(&path).unwrap();
    assert_eq!(hits(&again, next).await, 1);
}

/// A large batch is acknowledged before it is indexed: the store thread indexes large batches
/// together between jobs. A full-text query before that moves them to the pending index; an
/// indexing transaction that cannot get the write lock falls back to indexing them from their
/// text; either way every message is found exactly once, and the boundary ends up past every
/// message.
#[tokio::test]
async fn a_large_batch_is_indexed_after_its_answer_and_never_lost_from_search() {
    use clawctx_lossless::sqlite::pending_fts::DIRECT_MIN;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.db");
    let batch = |from: i64| -> Vec<codec::Encoded> {
        (from..from + DIRECT_MIN as i64)
            .map(|i| {
                let m = AgentMessage::user(format!("batch word{i}x and common")).with_timestamp(i);
                codec::encode(&m).unwrap()
            })
            .collect()
    };
    let found = |db: &clawctx_lossless::sqlite::Db, i: i64| {
        let q = GrepQuery::new(format!("word{i}x"), Scope::Session(key()));
        db.grep(&q).unwrap().hits.len()
    };

    // 1. Searched in the same job, before the batch's own indexing ran.
    let store = LosslessStore::open_with(&path, 200).unwrap();
    let first = batch(1);
    let p = path.clone();
    let (before, hits) = store
        .call_blocking(move |db| {
            db.ingest(&key(), &first)?;
            Ok((upto(&p), (found(db, 1), found(db, DIRECT_MIN as i64))))
        })
        .unwrap();
    assert_eq!(before, 0, "the batch is not indexed inside its own job");
    assert_eq!(hits, (1, 1), "a query in the same job finds it");
    store.call_blocking(|_| Ok(())).unwrap();
    assert_eq!(
        upto(&path),
        0,
        "moved to the pending index by the query, it waits with the newest messages"
    );

    // 2. The next large batches move those first. Then they wait together, and are indexed
    // in one go when the store thread is idle.
    let (second, more) = (batch(100), batch(400));
    let p = path.clone();
    let (moved, waiting) = store
        .call_blocking(move |db| {
            db.ingest(&key(), &second)?;
            db.ingest(&key(), &more)?;
            Ok((upto(&p), db.deferred_rows()))
        })
        .unwrap();
    assert_eq!(
        moved, DIRECT_MIN as i64,
        "the first batch moved to the file's index"
    );
    assert_eq!(waiting, 2 * DIRECT_MIN, "two batches wait together");
    assert_eq!(
        settled(&path),
        max_id(&path),
        "all batches are in the file's index"
    );

    // Another connection stores a message between two large batches: the waiting batch is
    // indexed in the next one's transaction, so the boundary can pass the other message.
    let other_path = path.clone();
    let p = path.clone();
    let (boundary, other_id, waiting) = store
        .call_blocking(move |db| {
            db.ingest(&key(), &batch(500))?;
            let other = LosslessStore::open(&other_path)?;
            let m = codec::encode(&AgentMessage::user("other word600x").with_timestamp(600))?;
            other.call_blocking(move |odb| odb.ingest(&key(), &[m]))?;
            other.close_blocking();
            let other_id = max_id(&p);
            db.ingest(&key(), &batch(700))?;
            Ok((upto(&p), other_id, db.deferred_rows()))
        })
        .unwrap();
    assert!(
        boundary >= other_id,
        "boundary {boundary} passed the other message {other_id}"
    );
    assert_eq!(waiting, DIRECT_MIN, "only the newest batch waits");
    let counts = store
        .call_blocking(move |db| {
            Ok([500, 600, 700, 763]
                .into_iter()
                .map(|i| found(db, i))
                .collect::<Vec<usize>>())
        })
        .unwrap();
    assert_eq!(counts, vec![1, 1, 1, 1], "every message found once");

    // 3. Another connection holds the write lock when the batch's indexing runs: it gives up
    // after the busy timeout, and the batch is indexed from its text instead.
    let third = batch(200);
    let lock_path = path.clone();
    let locker = store
        .call_blocking(move |db| {
            db.ingest(&key(), &third)?;
            let c = rusqlite::Connection::open(&lock_path).unwrap();
            c.execute_batch("BEGIN IMMEDIATE").unwrap();
            Ok(c)
        })
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(600));
    locker.execute_batch("ROLLBACK").unwrap();
    drop(locker);
    let counts = store
        .call_blocking(move |db| {
            Ok([1, 100, 200, 200 + DIRECT_MIN as i64 - 1]
                .into_iter()
                .map(|i| found(db, i))
                .collect::<Vec<usize>>())
        })
        .unwrap();
    let boundary = upto(&path);
    assert_eq!(counts, vec![1, 1, 1, 1], "every message found once");
    assert!(
        boundary < max_id(&path),
        "the third batch was not indexed into the file"
    );
    let reader = LosslessStore::open(&path).unwrap();
    let q = GrepQuery::new("word230x", Scope::Session(key()));
    assert_eq!(
        reader.grep(q).await.unwrap().hits.len(),
        1,
        "another connection finds it"
    );
    reader.close_blocking();

    // 4. A batch past the deferral bound indexes all but its tail in its own transaction.
    use clawctx_lossless::sqlite::DEFER_MAX;
    let huge: Vec<codec::Encoded> = (1_000..1_000 + DEFER_MAX as i64 + 5)
        .map(|i| {
            let m = AgentMessage::user(format!("huge word{i}x")).with_timestamp(i);
            codec::encode(&m).unwrap()
        })
        .collect();
    let p = path.clone();
    let (start, boundary) = store
        .call_blocking(move |db| {
            let start = max_id(&p);
            db.ingest(&key(), &huge)?;
            Ok((start, upto(&p)))
        })
        .unwrap();
    assert_eq!(
        boundary,
        start + DEFER_MAX as i64,
        "the first {DEFER_MAX} messages of the batch are indexed with it"
    );
    assert_eq!(settled(&path), max_id(&path), "and the tail when idle");
    let counts = store
        .call_blocking(move |db| {
            Ok([1_000, 1_000 + DEFER_MAX as i64 + 4, 230]
                .into_iter()
                .map(|i| found(db, i))
                .collect::<Vec<usize>>())
        })
        .unwrap();
    assert_eq!(counts, vec![1, 1, 1]);

    // Closing moves the waiting messages to the file's index.
    store.close_blocking();
    assert_eq!(upto(&path), max_id(&path));
    let again = LosslessStore::open(&path).unwrap();
    let q = GrepQuery::new("word230x", Scope::Session(key()));
    assert_eq!(again.grep(q).await.unwrap().hits.len(), 1);
}

/// A store of schema v9 indexed a run of CJK text as one term; v10 cuts it into pairs of
/// characters, so the migration rebuilds the index of a store that holds such text and a word
/// inside the clause is found after it.
#[tokio::test]
async fn a_version_9_store_with_cjk_text_is_indexed_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lcm.db");
    let clauses = ["请把账本七号放在三楼的保险柜里", "明日の会議は第二会議室で"];
    {
        let e = engine(&dir, small_cfg());
        let msgs = clauses
            .iter()
            .enumerate()
            .map(|(i, c)| AgentMessage::user(*c).with_timestamp(i as i64 + 1))
            .collect();
        e.ingest_batch(&batch(msgs), &cx()).await.unwrap();
        e.store().unwrap().close_wait().await;
    }
    // Back into v9's index: each clause one term, as v9 made it, every row in the file's index.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(&format!(
        "DROP TABLE messages_fts;
         CREATE VIRTUAL TABLE messages_fts USING fts5(
           text, content='', columnsize=0, detail=none, tokenize='ascii');
         INSERT INTO messages_fts(rowid, text) VALUES (1, '{}'), (2, '{}');
         UPDATE fts_state SET upto = 2;
         DROP TABLE vectors; DROP TABLE embed_models;
         PRAGMA user_version = 9;",
        clauses[0], clauses[1]
    ))
    .unwrap();
    drop(conn);

    let e = LosslessEngine::open(&path, LosslessConfig::default()).unwrap();
    assert_migrated(&e).await;
    for (query, want) in [("账本七号", "msg_1"), ("会議室", "msg_2")] {
        let r = e
            .backend()
            .grep(GrepQuery::new(query, Scope::All))
            .await
            .unwrap();
        let ids: Vec<&str> = r.hits.iter().map(|h| h.id.as_str()).collect();
        assert_eq!(ids, [want], "{query}");
    }
    e.store().unwrap().close_wait().await;
}
