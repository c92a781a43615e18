//! The PostgreSQL schema and its versioned migrations.
//!
//! `clawctx_lossless_schema` holds one row: the schema version and the application that owns
//! the database. [`migrate`] runs in one transaction under a transaction-scoped advisory lock,
//! so gateways starting together apply each version exactly once (the later ones wait, then
//! find the schema current). A database whose schema is newer than this build, or that belongs
//! to another application (or has our table names without our schema row), is refused and
//! left untouched.

use crate::error::{LosslessError, Result};
use crate::pg::connect::{connect_pool, PgTarget};

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i32 = 4;

/// The `app` recorded in the schema table: the database belongs to the lossless engine.
pub const APP: &str = "clawctx-lossless";

/// The advisory lock key migrations take (`pg_advisory_xact_lock`): "clawctx_l" in ASCII.
const MIGRATION_LOCK_KEY: i64 = 0x636c_6177_6374_785f;

/// The schema table (created before the first migration, in the same transaction).
const SCHEMA_TABLE_DDL: &str = "CREATE TABLE clawctx_lossless_schema(
  k int PRIMARY KEY CHECK (k = 1),
  version int NOT NULL,
  app text NOT NULL
)";

/// Version 1: conversations, messages, summaries and their DAG, the frontier, the summarizer
/// guard's state and committed turns, with full-text (`tsvector`) indexes.
///
/// Sizes (issue #19's target: the store at most 3× the raw text). Message rows are compressed
/// from 128 bytes (`toast_tuple_target`) instead of PostgreSQL's default of about 2 KiB: a
/// turn's texts are mostly shorter than that and compress about in half. Messages have no
/// trigram index: one would cost 1.4× the raw text on its own (15 MB for 10.5 MB of text at
/// 10k messages), and the regex search it would serve reads at most the newest
/// `grepMaxScanRows` messages anyway, as the SQLite store's does, filtering them on the
/// server (`LIKE` on the pattern's required literals) before Rust's regex confirms each.
/// Summaries, few and searched whole, keep theirs. The full-text indexes keep their list of
/// entries waiting to be merged short (`gin_pending_list_limit`, 128 kB instead of 4 MB): every
/// search reads that list through whole, which with the default made a search of a rare term
/// after a few thousand new messages take 20 ms instead of 0.1 (merging every entry at once,
/// `fastupdate = off`, cost a turn's ingest a third more).
const V1: &str = "
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE TABLE conversations(
  id bigserial PRIMARY KEY,
  agent_id text NOT NULL,
  session_key text NOT NULL,
  active boolean NOT NULL DEFAULT true,
  created_at bigint NOT NULL,
  next_seq bigint NOT NULL DEFAULT 0,
  next_ord bigint NOT NULL DEFAULT 0,
  msg_count bigint NOT NULL DEFAULT 0,
  msg_tokens bigint NOT NULL DEFAULT 0,
  raw_bytes bigint NOT NULL DEFAULT 0,
  frontier_tokens bigint NOT NULL DEFAULT 0,
  frontier_items bigint NOT NULL DEFAULT 0,
  epoch bigint NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX conversations_active ON conversations(agent_id, session_key) WHERE active;
CREATE INDEX conversations_key ON conversations(agent_id, session_key);
CREATE TABLE messages(
  id bigserial PRIMARY KEY,
  conv_id bigint NOT NULL REFERENCES conversations(id),
  seq bigint NOT NULL,
  role smallint NOT NULL,
  tokens bigint NOT NULL,
  ts bigint,
  hash bigint NOT NULL,
  n_calls integer NOT NULL DEFAULT 0,
  tool_call_id text,
  skeleton text,
  text text NOT NULL,
  terms tsvector NOT NULL
);
CREATE UNIQUE INDEX messages_identity ON messages(conv_id, coalesce(ts, 0), hash);
CREATE UNIQUE INDEX messages_seq ON messages(conv_id, seq);
CREATE INDEX messages_tool_call ON messages(conv_id, tool_call_id) WHERE tool_call_id IS NOT NULL;
CREATE INDEX messages_terms ON messages USING gin(terms) WITH (gin_pending_list_limit = 128);
ALTER TABLE messages SET (toast_tuple_target = 128);
CREATE TABLE summaries(
  id bigserial PRIMARY KEY,
  conv_id bigint NOT NULL REFERENCES conversations(id),
  depth integer NOT NULL,
  tokens bigint NOT NULL,
  source_tokens bigint NOT NULL,
  first_seq bigint NOT NULL,
  last_seq bigint NOT NULL,
  from_ts bigint,
  to_ts bigint,
  summarizer text NOT NULL,
  created_at bigint NOT NULL,
  text text NOT NULL,
  terms tsvector NOT NULL
);
CREATE INDEX summaries_conv ON summaries(conv_id, depth);
CREATE INDEX summaries_terms ON summaries USING gin(terms) WITH (gin_pending_list_limit = 128);
CREATE INDEX summaries_trgm ON summaries USING gin(text gin_trgm_ops);
ALTER TABLE summaries SET (toast_tuple_target = 128);
CREATE TABLE summary_children(
  summary_id bigint NOT NULL REFERENCES summaries(id),
  ord integer NOT NULL,
  kind smallint NOT NULL,
  child_id bigint NOT NULL,
  PRIMARY KEY(summary_id, ord)
);
CREATE INDEX summary_children_child ON summary_children(kind, child_id);
CREATE TABLE frontier(
  conv_id bigint NOT NULL,
  ord bigint NOT NULL,
  kind smallint NOT NULL,
  item_id bigint NOT NULL,
  tokens bigint NOT NULL,
  PRIMARY KEY(conv_id, ord)
);
CREATE TABLE guard_state(
  conv_id bigint PRIMARY KEY,
  window_start_ms bigint NOT NULL DEFAULT 0,
  calls_in_window bigint NOT NULL DEFAULT 0,
  consecutive_failures bigint NOT NULL DEFAULT 0,
  breaker_open_until_ms bigint NOT NULL DEFAULT 0,
  total_failures bigint NOT NULL DEFAULT 0
);
CREATE TABLE turn_commits(
  advancement_key text PRIMARY KEY,
  conv_id bigint NOT NULL,
  committed_at bigint NOT NULL
);
";

/// Version 2: the `tsvector` columns are kept in their rows (compressed, `STORAGE MAIN`)
/// instead of in the TOAST table. A search for the newest rows of a common term walks the
/// primary key backwards testing each row's terms; with the terms out of line every row tested
/// cost a TOAST index lookup, and in line the walk took half as long (2.5 → 1.2 ms for a term
/// in a third of 100,000 messages) for the same store size. Rows written before version 2 keep
/// their terms where they are until rewritten; both kinds read the same.
const V2: &str = "
ALTER TABLE messages ALTER COLUMN terms SET STORAGE MAIN;
ALTER TABLE summaries ALTER COLUMN terms SET STORAGE MAIN;
";

/// Version 3 changes no table: Chinese, Japanese and Korean text is indexed as pairs of
/// characters and single characters ([`crate::core::terms`]); the rows holding such text get
/// their `terms` again ([`reterm_cjk_rows`]), the others keep theirs, which are unchanged.
const CJK_TERMS: i32 = 3;

/// Recomputes `terms` of the rows of `table` (`messages`, `summaries`) whose text has CJK.
async fn reterm_cjk_rows(tx: &tokio_postgres::Transaction<'_>, table: &str) -> Result<u64> {
    let rows = tx
        .query(
            &format!("SELECT id, text FROM {table} WHERE text ~ $1"),
            &[&crate::core::terms::cjk_class()],
        )
        .await?;
    let update = tx
        .prepare(&format!(
            "UPDATE {table} SET terms = array_to_tsvector(string_to_array($2, ' ')) WHERE id = $1"
        ))
        .await?;
    for row in &rows {
        let (id, text): (i64, String) = (row.get(0), row.get(1));
        tx.execute(&update, &[&id, &crate::core::terms::index_terms(&text)])
            .await?;
    }
    Ok(rows.len() as u64)
}

/// Version 4: sentence vectors for semantic recall, as SQLite's v11 (see
/// [`crate::sqlite::schema::V11`]): `embed_models` with each model's progress, `vectors` one row
/// per embedded message or summary, quantized to bytes (`bytea`; no extension needed).
const V4: &str = "
CREATE TABLE embed_models(
  id bigserial PRIMARY KEY,
  name text NOT NULL UNIQUE,
  dim integer NOT NULL,
  msg_done bigint NOT NULL DEFAULT 0,
  sum_done bigint NOT NULL DEFAULT 0
);
CREATE TABLE vectors(
  vid bigserial PRIMARY KEY,
  model bigint NOT NULL REFERENCES embed_models(id),
  kind smallint NOT NULL,
  item_id bigint NOT NULL,
  conv_id bigint NOT NULL,
  tokens bigint NOT NULL,
  scale real NOT NULL,
  vec bytea NOT NULL
);
CREATE INDEX vectors_by_conv ON vectors(model, conv_id, vid);
";

/// The migrations in order: `(version, DDL)`; applying version N takes the schema from N-1.
const MIGRATIONS: &[(i32, &str)] = &[(1, V1), (2, V2), (4, V4)];

/// The tables version 1 creates: finding one in a database without our schema row means the
/// database belongs to someone else.
const V1_TABLES: &[&str] = &[
    "conversations",
    "messages",
    "summaries",
    "summary_children",
    "frontier",
    "guard_state",
    "turn_commits",
];

/// Brings the database's schema to [`SCHEMA_VERSION`], in one transaction under an advisory
/// lock: a current schema is left as is; a newer one, another application's, or a database
/// holding our table names without our schema table is refused with
/// [`LosslessError::Refused`] (`path` = `target_display`, the redacted target) and not modified.
pub async fn migrate(client: &mut tokio_postgres::Client, target_display: &str) -> Result<()> {
    let refused = |reason: String| LosslessError::Refused {
        path: target_display.to_string(),
        reason,
    };
    let tx = client.transaction().await?;
    tx.batch_execute(&format!(
        "SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})"
    ))
    .await?;

    let has_schema_table: bool = tx
        .query_one(
            "SELECT to_regclass('clawctx_lossless_schema') IS NOT NULL",
            &[],
        )
        .await?
        .get(0);
    let current = if has_schema_table {
        let row = tx
            .query_opt(
                "SELECT version, app FROM clawctx_lossless_schema WHERE k = 1",
                &[],
            )
            .await?;
        let Some(row) = row else {
            return Err(refused(
                "its clawctx_lossless_schema table has no version row (damaged or foreign)"
                    .to_string(),
            ));
        };
        let (version, app): (i32, String) = (row.get(0), row.get(1));
        if app != APP {
            return Err(refused(format!(
                "the database belongs to {app:?}, not {APP:?}"
            )));
        }
        if version > SCHEMA_VERSION {
            return Err(refused(format!(
                "schema version {version} is newer than this build ({SCHEMA_VERSION})"
            )));
        }
        version
    } else {
        let names: Vec<String> = V1_TABLES.iter().map(|t| (*t).to_string()).collect();
        let clash: Option<String> = tx
            .query_opt(
                "SELECT c.relname::text FROM pg_class c
                 WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY($1)
                 ORDER BY c.relname LIMIT 1",
                &[&names],
            )
            .await?
            .map(|row| row.get(0));
        if let Some(table) = clash {
            return Err(refused(format!(
                "it has a {table:?} table but no clawctx_lossless_schema: not a clawctx lossless database"
            )));
        }
        tx.batch_execute(SCHEMA_TABLE_DDL).await?;
        0
    };
    if current == SCHEMA_VERSION {
        // Nothing to do; the transaction only held the lock.
        tx.commit().await?;
        return Ok(());
    }
    for (version, ddl) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        tx.batch_execute(ddl).await.map_err(|e| {
            LosslessError::Postgres(format!(
                "applying schema version {version} to {target_display}: {}",
                crate::pg::connect::describe_pg_error(&e)
            ))
        })?;
    }
    if (1..CJK_TERMS).contains(&current) {
        let n = reterm_cjk_rows(&tx, "messages").await? + reterm_cjk_rows(&tx, "summaries").await?;
        if n > 0 {
            tracing::info!("lossless: {n} rows with CJK text indexed again (schema v3, once)");
        }
    }
    tx.execute(
        "INSERT INTO clawctx_lossless_schema(k, version, app) VALUES (1, $1, $2)
         ON CONFLICT (k) DO UPDATE SET version = EXCLUDED.version",
        &[&SCHEMA_VERSION, &APP],
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// A pool of up to `max_size` connections to `target` with its schema migrated:
/// [`connect_pool`] (fails at once when the database is unreachable) and [`migrate`] on one of
/// its connections.
pub async fn open(target: &PgTarget, max_size: usize) -> Result<deadpool_postgres::Pool> {
    let pool = connect_pool(target, max_size).await?;
    {
        let mut client = pool.get().await?;
        let client: &mut tokio_postgres::Client = &mut client;
        migrate(client, &target.redacted()).await?;
    }
    Ok(pool)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use clawctx_test_support::pg::test_database;

    async fn names(pool: &deadpool_postgres::Pool, sql: &str) -> Vec<String> {
        let client = pool.get().await.unwrap();
        let rows = client.query(sql, &[]).await.unwrap();
        rows.iter().map(|r| r.get(0)).collect()
    }

    async fn version(pool: &deadpool_postgres::Pool) -> (i32, String) {
        let client = pool.get().await.unwrap();
        let row = client
            .query_one("SELECT version, app FROM clawctx_lossless_schema", &[])
            .await
            .unwrap();
        (row.get(0), row.get(1))
    }

    #[tokio::test]
    async fn a_fresh_database_gets_the_tables_and_pg_trgm() {
        let Some(db) = test_database("pg schema fresh") else {
            return;
        };
        let target = PgTarget::parse(&db.url).unwrap();
        let pool = open(&target, 2).await.unwrap();
        let tables = names(
            &pool,
            "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY 1",
        )
        .await;
        let mut expected: Vec<String> = V1_TABLES.iter().map(|t| t.to_string()).collect();
        expected.push("clawctx_lossless_schema".to_string());
        // Version 4's.
        expected.extend(["embed_models".to_string(), "vectors".to_string()]);
        expected.sort();
        assert_eq!(tables, expected);
        assert_eq!(
            names(
                &pool,
                "SELECT extname::text FROM pg_extension WHERE extname = 'pg_trgm'"
            )
            .await,
            ["pg_trgm"]
        );
        assert_eq!(version(&pool).await, (SCHEMA_VERSION, APP.to_string()));
        // The trigram and full-text indexes are usable.
        let client = pool.get().await.unwrap();
        client
            .batch_execute(
                "INSERT INTO conversations(agent_id, session_key, created_at) VALUES ('a', 's', 0);
                 INSERT INTO messages(conv_id, seq, role, tokens, hash, text, terms)
                 SELECT id, 0, 1, 3, 42, 'hello wonderful world', to_tsvector('simple', 'hello wonderful world')
                 FROM conversations",
            )
            .await
            .unwrap();
        let hits = client
            .query(
                "SELECT id FROM messages WHERE text ILIKE '%onderf%' AND terms @@ to_tsquery('simple', 'world')",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(hits.len(), 1);
    }

    /// How `table.column` is stored (`pg_attribute.attstorage`: `m` main, `x` extended).
    async fn storage(pool: &deadpool_postgres::Pool, table: &str, column: &str) -> String {
        let client = pool.get().await.unwrap();
        let row = client
            .query_one(
                "SELECT a.attstorage::text FROM pg_attribute a
                 WHERE a.attrelid = $1::text::regclass AND a.attname = $2",
                &[&table, &column],
            )
            .await
            .unwrap();
        row.get(0)
    }

    #[tokio::test]
    async fn a_version_1_database_is_brought_to_the_current_version_with_its_rows() {
        let Some(db) = test_database("pg schema from v1") else {
            return;
        };
        let target = PgTarget::parse(&db.url).unwrap();
        let pool = connect_pool(&target, 2).await.unwrap();
        // A database as version 1 left it, with a message in it.
        pool.get()
            .await
            .unwrap()
            .batch_execute(&format!(
                "{SCHEMA_TABLE_DDL};
                 {V1}
                 INSERT INTO clawctx_lossless_schema(k, version, app) VALUES (1, 1, '{APP}');
                 INSERT INTO conversations(agent_id, session_key, created_at) VALUES ('a', 's', 0);
                 INSERT INTO messages(conv_id, seq, role, tokens, hash, text, terms)
                 SELECT id, 0, 1, 3, 42, 'hello world', to_tsvector('simple', 'hello world')
                 FROM conversations;
                 INSERT INTO messages(conv_id, seq, role, tokens, hash, text, terms)
                 SELECT id, 1, 1, 9, 43, '请把账本七号放好', array_to_tsvector(ARRAY['请把账本七号放好'])
                 FROM conversations"
            ))
            .await
            .unwrap();
        assert_eq!(storage(&pool, "messages", "terms").await, "x");
        let opened = open(&target, 1).await.unwrap();
        assert_eq!(version(&opened).await, (SCHEMA_VERSION, APP.to_string()));
        assert_eq!(storage(&opened, "messages", "terms").await, "m");
        assert_eq!(storage(&opened, "summaries", "terms").await, "m");
        assert_eq!(
            names(
                &opened,
                "SELECT text FROM messages WHERE terms @@ to_tsquery('simple', 'world')"
            )
            .await,
            ["hello world"]
        );
        // Version 3: the CJK clause, one term before, is found by a word inside it; the
        // other row's terms are unchanged.
        assert_eq!(
            names(
                &opened,
                "SELECT text FROM messages WHERE terms @@ '账本 & 本七 & 七号'::tsquery"
            )
            .await,
            ["请把账本七号放好"]
        );
        assert_eq!(
            names(&opened, "SELECT terms::text FROM messages WHERE seq = 0").await,
            ["'hello':1 'world':2"]
        );
    }

    #[tokio::test]
    async fn migrating_twice_is_a_no_op() {
        let Some(db) = test_database("pg schema twice") else {
            return;
        };
        let target = PgTarget::parse(&db.url).unwrap();
        let pool = open(&target, 2).await.unwrap();
        {
            let client = pool.get().await.unwrap();
            client
                .batch_execute(
                    "INSERT INTO conversations(agent_id, session_key, created_at) VALUES ('a', 's', 7)",
                )
                .await
                .unwrap();
        }
        let mut client = pool.get().await.unwrap();
        migrate(&mut client, &target.redacted()).await.unwrap();
        drop(client);
        let again = open(&target, 1).await.unwrap();
        assert_eq!(version(&again).await, (SCHEMA_VERSION, APP.to_string()));
        assert_eq!(
            names(&again, "SELECT agent_id || created_at FROM conversations").await,
            ["a7"]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_opens_of_a_fresh_database_both_succeed() {
        let Some(db) = test_database("pg schema concurrent") else {
            return;
        };
        let target = PgTarget::parse(&db.url).unwrap();
        let opens: Vec<_> = (0..4)
            .map(|_| {
                let target = target.clone();
                tokio::spawn(async move { open(&target, 1).await })
            })
            .collect();
        for handle in opens {
            let pool = handle.await.unwrap().unwrap();
            assert_eq!(version(&pool).await, (SCHEMA_VERSION, APP.to_string()));
        }
    }

    #[tokio::test]
    async fn a_newer_schema_is_refused_and_left_alone() {
        let Some(db) = test_database("pg schema newer") else {
            return;
        };
        let target = PgTarget::parse(&db.url).unwrap();
        let pool = open(&target, 1).await.unwrap();
        pool.get()
            .await
            .unwrap()
            .batch_execute("UPDATE clawctx_lossless_schema SET version = 99")
            .await
            .unwrap();
        let err = open(&target, 1).await.unwrap_err();
        let text = err.to_string();
        eprintln!("{text}");
        assert!(matches!(err, LosslessError::Refused { .. }), "{text}");
        assert!(
            text.contains(&format!(
                "schema version 99 is newer than this build ({SCHEMA_VERSION})"
            )),
            "{text}"
        );
        assert!(text.contains(&target.redacted()), "{text}");
        assert_eq!(version(&pool).await, (99, APP.to_string()));
    }

    #[tokio::test]
    async fn another_apps_database_is_refused() {
        let Some(db) = test_database("pg schema foreign") else {
            return;
        };
        let target = PgTarget::parse(&db.url).unwrap();
        let pool = connect_pool(&target, 1).await.unwrap();
        pool.get()
            .await
            .unwrap()
            .batch_execute("CREATE TABLE messages(id int)")
            .await
            .unwrap();
        let err = open(&target, 1).await.unwrap_err();
        let text = err.to_string();
        eprintln!("{text}");
        assert!(matches!(err, LosslessError::Refused { .. }), "{text}");
        assert!(
            text.contains("\"messages\" table but no clawctx_lossless_schema"),
            "{text}"
        );
        // Nothing was created.
        assert!(names(
            &pool,
            "SELECT 'x' WHERE to_regclass('clawctx_lossless_schema') IS NOT NULL"
        )
        .await
        .is_empty());

        let Some(db2) = test_database("pg schema other app") else {
            return;
        };
        let target2 = PgTarget::parse(&db2.url).unwrap();
        let pool2 = open(&target2, 1).await.unwrap();
        pool2
            .get()
            .await
            .unwrap()
            .batch_execute("UPDATE clawctx_lossless_schema SET app = 'someone-else'")
            .await
            .unwrap();
        let err = open(&target2, 1).await.unwrap_err();
        assert!(
            err.to_string().contains("belongs to \"someone-else\""),
            "{err}"
        );
    }
}
