//! `migrate::sqlite_to_postgres`: a SQLite store with real content (tool calls, large payloads
//! stored once, shared skeletons, leaf and condensed summaries, an archived conversation, a
//! committed turn) copied into PostgreSQL, then read back on both sides and compared: the same
//! rows and ids, the same decoded messages, the same assembled context, ids that continue, a
//! second migration refused and a dry run that writes nothing.
//!
//! Needs `CLAWCTX_TEST_PG_URL` (skips without it, except under `CI=true`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use clawctx_engine::ContextEngine;
use clawctx_lossless::core::codec;
use clawctx_lossless::migrate::{sqlite_to_postgres, TABLES};
use clawctx_lossless::pg::PgStore;
use clawctx_lossless::*;
use clawctx_protocol::*;
use clawctx_test_support::pg::test_database;
use common::*;
use serde_json::json;

/// A turn with a large tool output (≥ 8 KiB, stored once per content: every third turn reads
/// the same file again).
fn big_turn(rng: &mut Lcg, t: usize) -> Vec<AgentMessage> {
    let ts = 1_800_000_000_000i64 + (t as i64) * 60_000;
    let id = format!("big_{t}");
    let body = if t % 3 == 0 {
        // The same content each time: one payload row in SQLite.
        "shared payload line with words config parser schema\n".repeat(200)
    } else {
        format!("nd{t}x5 {}\n", words(rng, 40)).repeat(40)
    };
    assert!(body.len() >= 8 * 1024);
    vec![
        AgentMessage::user(format!("nd{t}x0 read the big file {}", words(rng, 20)))
            .with_timestamp(ts),
        AgentMessage::tool_call(&id, "read", json!({"path": format!("logs/big{t}.log")}))
            .with_timestamp(ts + 1),
        AgentMessage::tool_result(&id, "read", body).with_timestamp(ts + 2),
        AgentMessage::assistant(format!("nd{t}x9 {}", words(rng, 50))).with_timestamp(ts + 3),
    ]
}

fn history(turns: usize) -> Vec<AgentMessage> {
    let mut rng = Lcg(11);
    let mut h = Vec::new();
    for t in 0..turns {
        if t % 4 == 1 {
            h.extend(big_turn(&mut rng, t));
        } else {
            h.extend(turn(&mut rng, t, t % 2 == 0, 60));
        }
    }
    h
}

/// Feeds `h` turn by turn (afterTurn compacts over the threshold).
async fn feed(e: &LosslessEngine, h: &[AgentMessage], from: usize) {
    let mut pre = from;
    for end in (from + 8..=h.len()).step_by(8) {
        e.after_turn(&after_turn(&h[..end], pre, 8_000), &cx())
            .await
            .unwrap();
        pre = end;
    }
    e.after_turn(&after_turn(h, pre, 8_000), &cx())
        .await
        .unwrap();
}

/// `(id, role, text, skeleton, ts)` of every message of the SQLite file, texts resolved.
/// A stored message: `(id, role, text, skeleton, ts)`.
type Stored = (i64, i64, String, Option<String>, Option<i64>);

fn sqlite_messages(path: &std::path::Path) -> Vec<Stored> {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    clawctx_lossless::sqlite::unpack::register(&conn).unwrap();
    let mut st = conn
        .prepare("SELECT id, role, text, skeleton, ts FROM message_rows ORDER BY id")
        .unwrap();
    st.query_map([], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
    })
    .unwrap()
    .collect::<rusqlite::Result<Vec<_>>>()
    .unwrap()
}

fn sqlite_scalar(path: &std::path::Path, sql: &str) -> i64 {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    clawctx_lossless::sqlite::unpack::register(&conn).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

async fn pg_client(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

async fn pg_scalar(c: &tokio_postgres::Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).await.unwrap().get(0)
}

async fn pg_counts(c: &tokio_postgres::Client) -> Vec<i64> {
    let mut out = Vec::new();
    for t in TABLES {
        out.push(pg_scalar(c, &format!("SELECT count(*) FROM {t}")).await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sqlite_store_moves_to_postgres_whole() {
    let Some(db) = test_database("migrate whole") else {
        return;
    };
    let cfg = small_cfg();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lcm.db");
    let sqlite = engine(&dir, cfg.clone());

    // The first conversation: turns with tools and large outputs, compacted as it goes, then
    // forced until summaries are condensed; a committed turn; `/new` archives it.
    let h = history(48);
    feed(&sqlite, &h, 0).await;
    for _ in 0..6 {
        sqlite
            .compact(&compact_params(true, 8_000), &cx())
            .await
            .unwrap();
    }
    let commit = CommitTurnParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        advancement_key: "turn-after-48".into(),
        messages: history(50)[h.len()..].to_vec(),
        ..Default::default()
    };
    assert_eq!(
        sqlite.commit_turn(&commit, &cx()).await.unwrap().status,
        CommitTurnStatus::Committed
    );
    let carried = sqlite.on_session_reset(KEY, KEY).await.unwrap();
    assert!(carried.archived_conversation.is_some());
    // The new conversation gets a history of its own.
    let mut rng = Lcg(99);
    let mut h2 = Vec::new();
    for t in 100..118 {
        h2.extend(if t % 3 == 0 {
            big_turn(&mut rng, t)
        } else {
            turn(&mut rng, t, true, 50)
        });
    }
    feed(&sqlite, &h2, 0).await;

    // The store exercises what changes form in the copy.
    assert!(
        sqlite_scalar(&path, "SELECT count(*) FROM payloads") > 0,
        "large payloads"
    );
    assert!(
        sqlite_scalar(
            &path,
            "SELECT count(*) FROM messages WHERE payload IS NOT NULL"
        ) > sqlite_scalar(&path, "SELECT count(*) FROM payloads"),
        "a payload shared by several messages"
    );
    assert!(
        sqlite_scalar(
            &path,
            "SELECT count(*) FROM messages WHERE skel IS NOT NULL"
        ) > 0,
        "shared skeletons"
    );
    assert!(
        sqlite_scalar(&path, "SELECT count(*) FROM summaries WHERE depth = 0") > 0,
        "leaf summaries"
    );
    assert!(
        sqlite_scalar(&path, "SELECT count(*) FROM summaries WHERE depth > 0") > 0,
        "condensed summaries"
    );
    assert_eq!(
        sqlite_scalar(&path, "SELECT count(*) FROM conversations WHERE active = 0"),
        1
    );
    assert!(sqlite_scalar(&path, "SELECT count(*) FROM guard_state") > 0);

    let store = sqlite.store().unwrap().clone();
    let pg = PgStore::open_url(&db.url).await.unwrap();
    let c = pg_client(&db.url).await;

    // A dry run reads everything and writes nothing.
    let dry = sqlite_to_postgres(&store, &pg, false).await.unwrap();
    assert!(dry.dry_run);
    assert_eq!(dry.tables.len(), TABLES.len());
    assert!(dry.tables.iter().all(|t| t.written == 0 && !t.verified));
    assert!(dry.table("messages").unwrap().read > 100);
    assert_eq!(
        pg_counts(&c).await,
        vec![0; TABLES.len()],
        "a dry run wrote rows"
    );

    // The copy.
    let report = sqlite_to_postgres(&store, &pg, true).await.unwrap();
    eprintln!("{}", serde_json::to_string_pretty(&report).unwrap());
    assert!(!report.dry_run);
    assert_eq!(report.messages_copied_verbatim, 0);
    assert_eq!(report.target, pg.target().redacted());
    let got = pg_counts(&c).await;
    for (i, t) in TABLES.iter().enumerate() {
        let want = sqlite_scalar(&path, &format!("SELECT count(*) FROM {t}"));
        let r = report.table(t).unwrap();
        assert_eq!(
            (r.read, r.written, r.verified),
            (want as u64, want as u64, true),
            "{t}"
        );
        assert_eq!(got[i], want, "{t}: rows in PostgreSQL");
        assert_eq!(
            dry.table(t).unwrap().read,
            r.read,
            "{t}: the dry run counted the same"
        );
    }

    // Every message decodes to the same message on both sides, under the same id; the
    // PostgreSQL skeleton is the canonical one its own ingest writes.
    let lite = sqlite_messages(&path);
    let rows = c
        .query(
            "SELECT id, role::bigint, text, skeleton, ts FROM messages ORDER BY id",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(lite.len(), rows.len());
    for ((id, role, text, skel, ts), r) in lite.iter().zip(&rows) {
        assert_eq!(*id, r.get::<_, i64>(0));
        let a = codec::decode(*role, text, skel.as_deref(), *ts).unwrap();
        let ptext: String = r.get(2);
        let pskel: Option<String> = r.get(3);
        let b = codec::decode(r.get(1), &ptext, pskel.as_deref(), r.get(4)).unwrap();
        assert_eq!(a, b, "message {id} differs");
        assert_eq!(
            pskel,
            codec::encode(&a).unwrap().skeleton,
            "message {id}: skeleton"
        );
    }
    // Full-text terms were made: a needle finds its message.
    let needle = clawctx_lossless::core::terms::index_terms("nd7x0");
    let hits: i64 = c
        .query_one(
            "SELECT count(*) FROM messages WHERE terms @@ to_tsquery('simple', $1)",
            &[&needle],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(hits, 1);
    // Conversations, summaries and the DAG are the same rows.
    let shape = |v: &[clawctx_lossless::ConvRow]| {
        v.iter()
            .map(|c| {
                (
                    c.id,
                    c.agent_id.clone(),
                    c.session_key.clone(),
                    c.active,
                    c.next_seq,
                    c.next_ord,
                    c.msg_count,
                    c.msg_tokens,
                    c.raw_bytes,
                    c.frontier_tokens,
                    c.frontier_items,
                    c.epoch,
                )
            })
            .collect::<Vec<_>>()
    };
    let pg = Arc::new(pg);
    let pg_engine = LosslessEngine::over(pg.clone(), cfg.clone()).unwrap();
    assert_eq!(
        shape(&sqlite.backend().conversations().await.unwrap()),
        shape(&pg_engine.backend().conversations().await.unwrap())
    );
    assert_eq!(
        sqlite_scalar(&path, "SELECT sum(id * 7 + depth + tokens + first_seq + last_seq + length(text)) FROM summaries"),
        pg_scalar(&c, "SELECT sum(id * 7 + depth + tokens + first_seq + last_seq + length(text))::bigint FROM summaries").await
    );
    assert_eq!(
        sqlite_scalar(&path, "SELECT sum(summary_id * 1000003 + ord * 31 + kind * 7 + child_id) FROM summary_children"),
        pg_scalar(&c, "SELECT sum(summary_id * 1000003 + ord * 31 + kind * 7 + child_id)::bigint FROM summary_children").await
    );

    // The copied store is whole by the doctor's checks, and its status counts what SQLite's do.
    let doctor = pg_engine.backend().doctor().await.unwrap();
    assert!(doctor.ok, "{doctor:#?}");
    let (sa, sb) = (
        sqlite.backend().status().await.unwrap(),
        pg_engine.backend().status().await.unwrap(),
    );
    assert_eq!(
        (
            sa.conversations,
            sa.messages,
            sa.summaries,
            sa.max_depth,
            sa.message_tokens,
            sa.frontier_tokens
        ),
        (
            sb.conversations,
            sb.messages,
            sb.summaries,
            sb.max_depth,
            sb.message_tokens,
            sb.frontier_tokens
        )
    );

    // The same context on both stores, with a prompt that recalls an archived message.
    let mut host = h2.clone();
    host.push(AgentMessage::user("what did nd5x0 ask about?"));
    let a = sqlite
        .assemble(&assemble_params(host.clone(), 8_000), &cx())
        .await
        .unwrap();
    let b = pg_engine
        .assemble(&assemble_params(host, 8_000), &cx())
        .await
        .unwrap();
    assert!(a.messages.len() > 4);
    for (i, (x, y)) in a.messages.iter().zip(&b.messages).enumerate() {
        assert_eq!(
            x, y,
            "context message {i} differs between SQLite (left) and PostgreSQL (right)"
        );
    }
    assert_eq!(a.messages.len(), b.messages.len());
    assert_eq!(a.estimated_tokens, b.estimated_tokens);

    // The committed turn stays committed.
    let again = pg_engine.commit_turn(&commit, &cx()).await.unwrap();
    assert_eq!(again.status, CommitTurnStatus::Duplicate);

    // Writing continues after the copied ids.
    let (max_msg, max_sum, max_conv) = (
        pg_scalar(&c, "SELECT max(id) FROM messages").await,
        pg_scalar(&c, "SELECT max(id) FROM summaries").await,
        pg_scalar(&c, "SELECT max(id) FROM conversations").await,
    );
    assert_eq!(
        report
            .next_ids
            .iter()
            .map(|(t, n)| (t.as_str(), *n))
            .collect::<Vec<_>>(),
        [
            ("conversations", max_conv + 1),
            // No model embedded this store: its vector tables start at 1.
            ("embed_models", 1),
            ("messages", max_msg + 1),
            ("summaries", max_sum + 1),
            ("vectors", 1)
        ]
    );
    let mut more = h2.clone();
    let mut rng = Lcg(5);
    for t in 200..212 {
        more.extend(turn(&mut rng, t, true, 60));
    }
    feed(&pg_engine, &more, h2.len()).await;
    pg_engine
        .compact(&compact_params(true, 8_000), &cx())
        .await
        .unwrap();
    assert_eq!(
        pg_scalar(
            &c,
            &format!("SELECT min(id) FROM messages WHERE id > {max_msg}")
        )
        .await,
        max_msg + 1,
        "new messages continue after the copied ids"
    );
    assert!(
        pg_scalar(&c, "SELECT max(id) FROM messages").await
            >= max_msg + (more.len() - h2.len()) as i64
    );
    assert_eq!(
        pg_scalar(
            &c,
            &format!("SELECT count(*) FROM summaries WHERE id > {max_sum}")
        )
        .await,
        pg_scalar(&c, "SELECT max(id) FROM summaries").await - max_sum,
        "new summaries continue after the copied ids"
    );
    pg_engine.on_session_reset(KEY, KEY).await.unwrap();
    assert_eq!(
        pg_scalar(&c, "SELECT max(id) FROM conversations").await,
        max_conv + 1
    );

    // A second migration into the now non-empty target is refused, naming it without the
    // password, and changes nothing.
    let before = pg_counts(&c).await;
    for apply in [true, false] {
        let err = sqlite_to_postgres(&store, &pg, apply).await.unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, LosslessError::Refused { .. }), "{text}");
        assert!(text.contains(&pg.target().redacted()), "{text}");
        assert!(text.contains("conversations"), "{text}");
        if let Some(pw) = pg.target().config().get_password() {
            let pw = String::from_utf8_lossy(pw);
            assert!(!text.contains(pw.as_ref()), "the password leaked: {text}");
        }
    }
    assert_eq!(pg_counts(&c).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_store_migrates_and_ids_start_at_one() {
    let Some(db) = test_database("migrate empty") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = LosslessStore::open(dir.path().join("empty.db")).unwrap();
    let pg = PgStore::open_url(&db.url).await.unwrap();
    let report = sqlite_to_postgres(&store, &pg, true).await.unwrap();
    assert!(report
        .tables
        .iter()
        .all(|t| t.read == 0 && t.written == 0 && t.verified));
    assert!(
        report.next_ids.values().all(|n| *n == 1),
        "{:?}",
        report.next_ids
    );
    let pg: Arc<dyn Backend> = Arc::new(pg);
    let key = ConvKey::from_host(Some(KEY), "s1");
    let out = pg
        .ingest(&key, vec![AgentMessage::user("hello").with_timestamp(1)])
        .await
        .unwrap();
    assert_eq!(out.conv.unwrap().id, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_larger_than_a_page_is_copied_page_by_page() {
    let Some(db) = test_database("migrate pages") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pages.db");
    let store = LosslessStore::open(&path).unwrap();
    // 3 conversations of 4,100 messages: messages span 13 pages, the frontier (keyed by
    // conversation and ordinal) 3 pages, with page ends inside a conversation.
    for c in 0..3 {
        let key = ConvKey::from_host(Some(&format!("agent:main:pages:{c}")), "s");
        let msgs: Vec<AgentMessage> = (0..4_100)
            .map(|i| AgentMessage::user(format!("m{c}x{i} paging words")).with_timestamp(1 + i))
            .collect();
        Backend::ingest(&store, &key, msgs).await.unwrap();
    }
    let pg = PgStore::open_url(&db.url).await.unwrap();
    let report = sqlite_to_postgres(&store, &pg, true).await.unwrap();
    assert_eq!(report.table("messages").unwrap().written, 12_300);
    assert_eq!(report.table("frontier").unwrap().written, 12_300);
    let c = pg_client(&db.url).await;
    assert_eq!(
        pg_scalar(
            &c,
            "SELECT sum(id * 3 + seq + length(text))::bigint FROM messages"
        )
        .await,
        sqlite_scalar(
            &path,
            "SELECT sum(id * 3 + seq + length(text)) FROM message_rows"
        )
    );
    assert_eq!(
        pg_scalar(
            &c,
            "SELECT sum(conv_id * 100003 + ord * 7 + item_id)::bigint FROM frontier"
        )
        .await,
        sqlite_scalar(
            &path,
            "SELECT sum(conv_id * 100003 + ord * 7 + item_id) FROM frontier"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_mid_copy_leaves_the_target_empty() {
    let Some(db) = test_database("migrate rollback") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dup.db");
    let store = LosslessStore::open(&path).unwrap();
    let key = ConvKey::from_host(Some(KEY), "s1");
    let msgs: Vec<AgentMessage> = (0..10)
        .map(|i| AgentMessage::user(format!("hello {i}")).with_timestamp(1 + i))
        .collect();
    Backend::ingest(&store, &key, msgs).await.unwrap();
    store.close_wait().await;
    // A damaged source: two messages of one conversation share a sequence number, which
    // PostgreSQL's unique index refuses after the conversations were written.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute("UPDATE messages SET seq = 0 WHERE id = 5", [])
        .unwrap();
    let store = LosslessStore::open(&path).unwrap();
    let pg = PgStore::open_url(&db.url).await.unwrap();
    let err = sqlite_to_postgres(&store, &pg, true)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("table messages"), "{err}");
    let c = pg_client(&db.url).await;
    assert_eq!(
        pg_counts(&c).await,
        vec![0; TABLES.len()],
        "a failed copy left rows behind"
    );
    // The sequences were not advanced either: a later ingest starts at id 1.
    let out = Backend::ingest(&pg, &key, vec![AgentMessage::user("x").with_timestamp(1)])
        .await
        .unwrap();
    assert_eq!(out.conv.unwrap().id, 1);
}

/// A store whose history the real model embedded moves with its vectors: the same rows and
/// model on PostgreSQL, the model's progress complete there (nothing to embed again), and a
/// search by meaning answers the same on both sides.
#[tokio::test]
async fn vectors_move_with_the_store_and_are_not_embedded_again() {
    use clawctx_lossless::semantic::Semantic;
    let Some(db) = test_database("migrate vectors") else {
        return;
    };
    let Some(dir) = clawctx_test_support::embed_model::model_dir() else {
        return;
    };
    let model: Arc<dyn clawctx_embed::Embedder> =
        Arc::new(clawctx_embed::LocalEmbedder::load(&dir).expect("the test model loads"));
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("lcm.db");
    let sqlite = engine(&tmp, small_cfg());
    let h = history(6);
    feed(&sqlite, &h, 0).await;
    let lite = sqlite.backend().clone();
    let on_sqlite = Semantic::new(model.clone());
    let embedded = on_sqlite.embed_all(&*lite, |_, _| {}).await.unwrap();
    assert!(embedded > 10, "{embedded} items embedded");
    let vectors = sqlite_scalar(&path, "SELECT count(*) FROM vectors");
    assert!(vectors > 10);

    let store = sqlite.store().unwrap().clone();
    let pg = PgStore::open_url(&db.url).await.unwrap();
    let report = sqlite_to_postgres(&store, &pg, true).await.unwrap();
    for t in ["embed_models", "vectors"] {
        let r = report.table(t).unwrap();
        assert!(r.verified, "{t}");
        assert_eq!(r.written, r.read, "{t}");
    }
    assert_eq!(report.table("vectors").unwrap().written, vectors as u64);
    let c = pg_client(&db.url).await;
    assert_eq!(pg_scalar(&c, "SELECT count(*) FROM vectors").await, vectors);
    assert_eq!(
        pg_scalar(&c, "SELECT sum(length(vec))::bigint FROM vectors").await,
        sqlite_scalar(&path, "SELECT sum(length(vec)) FROM vectors")
    );

    // The same model on PostgreSQL finds its progress complete: nothing is embedded again.
    let pg: Arc<dyn Backend> = Arc::new(pg);
    let on_pg = Semantic::new(model.clone());
    let (done, total) = on_pg.progress(&*pg).await.unwrap();
    assert_eq!(done, total, "the copied progress covers every item");
    assert_eq!(on_pg.embed_all(&*pg, |_, _| {}).await.unwrap(), 0);

    // And a search by meaning ranks the same items on both stores.
    let q = GrepQuery {
        mode: GrepMode::Semantic,
        limit: 5,
        ..GrepQuery::new("reading a large log file", Scope::All)
    };
    let ids = |r: GrepReport| r.hits.into_iter().map(|h| h.id).collect::<Vec<_>>();
    let a = ids(on_sqlite.grep(&*lite, q.clone()).await.unwrap());
    let b = ids(on_pg.grep(&*pg, q).await.unwrap());
    assert!(!a.is_empty());
    assert_eq!(a, b, "the same hits on both stores");
    // Ids continue after the copied vectors.
    assert!(report.next_ids["vectors"] > vectors);
}
