//! Opening the SQLite file safely and migrating its schema.
//!
//! The file is checked before anything is written: a non-SQLite file (bad header), a SQLite
//! file that belongs to someone else (`application_id` not ours, or tables without our id), or
//! one from a newer schema is refused with [`LosslessError::Refused`] and left byte-for-byte
//! untouched (WAL mode, which rewrites the header, is only switched on after the check).
//! Migrations are versioned with `PRAGMA user_version` and run in one transaction each.

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::error::{LosslessError, Result};

/// `PRAGMA application_id` of a lossless store ("clsx").
pub const APPLICATION_ID: i32 = 0x636c_7378;
/// Current schema version.
pub const SCHEMA_VERSION: i32 = 11;

const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// The schema as version 1 created it; migrations start from here (public so tests can build
/// a database of every older version).
pub const V1: &str = r#"
CREATE TABLE conversations(
  id INTEGER PRIMARY KEY,
  agent_id TEXT NOT NULL,
  session_key TEXT NOT NULL,
  active INTEGER NOT NULL DEFAULT 1,
  created_at INTEGER NOT NULL,
  next_seq INTEGER NOT NULL DEFAULT 0,
  next_ord INTEGER NOT NULL DEFAULT 0,
  msg_count INTEGER NOT NULL DEFAULT 0,
  msg_tokens INTEGER NOT NULL DEFAULT 0,
  raw_bytes INTEGER NOT NULL DEFAULT 0,
  frontier_tokens INTEGER NOT NULL DEFAULT 0,
  frontier_items INTEGER NOT NULL DEFAULT 0,
  epoch INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX conversations_active ON conversations(agent_id, session_key) WHERE active = 1;
CREATE INDEX conversations_key ON conversations(agent_id, session_key);

CREATE TABLE messages(
  id INTEGER PRIMARY KEY,
  conv_id INTEGER NOT NULL REFERENCES conversations(id),
  seq INTEGER NOT NULL,
  role INTEGER NOT NULL,
  tokens INTEGER NOT NULL,
  ts INTEGER,
  hash INTEGER NOT NULL,
  n_calls INTEGER NOT NULL DEFAULT 0,
  tool_call_id TEXT,
  skeleton TEXT,
  text TEXT NOT NULL
);
CREATE UNIQUE INDEX messages_identity ON messages(conv_id, hash);
CREATE UNIQUE INDEX messages_seq ON messages(conv_id, seq);
CREATE INDEX messages_tool_call ON messages(conv_id, tool_call_id) WHERE tool_call_id IS NOT NULL;

CREATE VIRTUAL TABLE messages_fts USING fts5(
  text, content='messages', content_rowid='id', detail=none, tokenize='porter unicode61 remove_diacritics 2'
);

CREATE TABLE summaries(
  id INTEGER PRIMARY KEY,
  conv_id INTEGER NOT NULL REFERENCES conversations(id),
  depth INTEGER NOT NULL,
  tokens INTEGER NOT NULL,
  source_tokens INTEGER NOT NULL,
  first_seq INTEGER NOT NULL,
  last_seq INTEGER NOT NULL,
  from_ts INTEGER,
  to_ts INTEGER,
  summarizer TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  text TEXT NOT NULL
);
CREATE INDEX summaries_conv ON summaries(conv_id, depth);

CREATE VIRTUAL TABLE summaries_fts USING fts5(
  text, content='summaries', content_rowid='id', detail=none, tokenize='porter unicode61 remove_diacritics 2'
);

-- DAG edges: a summary's children, in order (kind 0 = message, 1 = summary).
CREATE TABLE summary_children(
  summary_id INTEGER NOT NULL REFERENCES summaries(id),
  ord INTEGER NOT NULL,
  kind INTEGER NOT NULL,
  child_id INTEGER NOT NULL,
  PRIMARY KEY(summary_id, ord)
) WITHOUT ROWID;
CREATE INDEX summary_children_child ON summary_children(kind, child_id);

-- The active frontier: ordered items, gap-tolerant ordinals (a replaced range keeps its first
-- ordinal; nothing is renumbered). kind 0 = message, 1 = summary. tokens = model-visible cost.
CREATE TABLE frontier(
  conv_id INTEGER NOT NULL,
  ord INTEGER NOT NULL,
  kind INTEGER NOT NULL,
  item_id INTEGER NOT NULL,
  tokens INTEGER NOT NULL,
  PRIMARY KEY(conv_id, ord)
) WITHOUT ROWID;

-- Spend guard and circuit breaker, per conversation, persisted across restarts.
CREATE TABLE guard_state(
  conv_id INTEGER PRIMARY KEY,
  window_start_ms INTEGER NOT NULL DEFAULT 0,
  calls_in_window INTEGER NOT NULL DEFAULT 0,
  consecutive_failures INTEGER NOT NULL DEFAULT 0,
  breaker_open_until_ms INTEGER NOT NULL DEFAULT 0,
  total_failures INTEGER NOT NULL DEFAULT 0
);
"#;

/// Version 2: ingest cost that stays flat as history grows, and a cheaper full-text index.
///
/// - The identity index leads with the timestamp, so inserting a new (newer) message touches
///   the right edge of the B-tree instead of a random page: v1 keyed it by the hash alone,
///   and once the index outgrew the page cache every insert dirtied a page of its own.
///   Timeless messages share the key 0 and are told apart by their hash.
/// - Both full-text tables become contentless and index [`crate::core::terms::index_terms`] (the
///   distinct words) instead of the whole text: the same terms per row, a fraction of the
///   tokenizing. Texts are read from `messages`/`summaries`, which always had them. Message
///   rows keep no positions (`detail=none`): they are ranked in Rust ([`crate::core::search`]), since
///   FTS5's `bm25()` scores every row 0 on a contentless `detail=none` table (and with v1's
///   external content it re-read and re-tokenized every ranked row). Summaries, few, keep
///   positions and `bm25()`.
pub const V2: &str = r#"
DROP INDEX messages_identity;
CREATE UNIQUE INDEX messages_identity ON messages(conv_id, ifnull(ts, 0), hash);
DROP TABLE messages_fts;
CREATE VIRTUAL TABLE messages_fts USING fts5(
  text, content='', contentless_delete=1, detail=none, tokenize='porter unicode61 remove_diacritics 2'
);
DROP TABLE summaries_fts;
CREATE VIRTUAL TABLE summaries_fts USING fts5(
  text, content='', contentless_delete=1, tokenize='porter unicode61 remove_diacritics 2'
);
"#;

/// Version 3: large payloads stored once.
///
/// The text of a large message (a tool output of [`crate::sqlite::Db`]'s `large_payload_bytes`
/// or more) lives in `payloads`, keyed by its content hash, and its `messages.text` is empty:
/// the same file read ten times is stored once. `message_rows` is `messages` with the text
/// resolved (and decompressed, see [`crate::core::pack`]); everything that reads message text reads
/// it there. A retention policy may later
/// replace the payload of an already-summarized message with a short placeholder (see
/// `crate::core::retention`); `refs` counts the messages still pointing at a payload.
pub const V3: &str = r#"
CREATE TABLE payloads(
  id INTEGER PRIMARY KEY,
  hash BLOB NOT NULL,
  bytes INTEGER NOT NULL,
  refs INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  text TEXT NOT NULL
);
CREATE UNIQUE INDEX payloads_hash ON payloads(hash);
ALTER TABLE messages ADD COLUMN payload INTEGER;
CREATE INDEX messages_payload ON messages(payload) WHERE payload IS NOT NULL;
CREATE VIEW message_rows AS
  SELECT m.id, m.conv_id, m.seq, m.role, m.tokens, m.ts, m.hash, m.n_calls, m.tool_call_id,
         m.skeleton, m.payload,
         CASE WHEN m.payload IS NULL THEN unpack(m.text)
              ELSE (SELECT unpack(p.text) FROM payloads p WHERE p.id = m.payload) END AS text
  FROM messages m;
"#;

/// Version 4: fewer bytes a message (issue #4's database-size target on plain chat).
///
/// - Skeletons shared: a message's skeleton is stored with its last length marker replaced by
///   [`crate::core::codec::REST`], so skeletons that differ only in text length (every plain
///   assistant reply of one model) are equal, and a skeleton seen more than once is stored
///   once in `skeletons` and referenced by `messages.skel` (`messages.skeleton` is then NULL).
///   Rows written before keep their inline skeleton; `message_rows` resolves both.
/// - The message index keeps no document sizes (`columnsize=0`): nothing reads them (messages
///   are ranked in Rust from the token counts of `messages`), and they cost a row per message.
///   FTS5 allows that only without `contentless_delete`, which messages never needed (their
///   index rows are never deleted). The index is rebuilt (since v7, once, by the last step).
pub const V4: &str = r#"
CREATE TABLE skeletons(
  id INTEGER PRIMARY KEY,
  json TEXT NOT NULL
);
CREATE UNIQUE INDEX skeletons_json ON skeletons(json);
ALTER TABLE messages ADD COLUMN skel INTEGER;
DROP VIEW message_rows;
CREATE VIEW message_rows AS
  SELECT m.id, m.conv_id, m.seq, m.role, m.tokens, m.ts, m.hash, m.n_calls, m.tool_call_id,
         CASE WHEN m.skel IS NULL THEN m.skeleton
              ELSE (SELECT k.json FROM skeletons k WHERE k.id = m.skel) END AS skeleton,
         m.payload,
         CASE WHEN m.payload IS NULL THEN unpack(m.text)
              ELSE (SELECT unpack(p.text) FROM payloads p WHERE p.id = m.payload) END AS text
  FROM messages m;
DROP TABLE messages_fts;
CREATE VIRTUAL TABLE messages_fts USING fts5(
  text, content='', columnsize=0, detail=none, tokenize='porter unicode61 remove_diacritics 2'
);
"#;

/// Version 5: the newest messages are indexed in memory first (see
/// [`super::pending_fts`]). `fts_state.upto` is the boundary: every message with an id up to it
/// is in `messages_fts`, none above it. Every message of an older store is indexed.
pub const V5: &str = r#"
CREATE TABLE fts_state(
  k INTEGER PRIMARY KEY CHECK (k = 1),
  upto INTEGER NOT NULL
);
INSERT INTO fts_state(k, upto) SELECT 1, ifnull(max(id), 0) FROM messages;
"#;

/// Version 6: the message index merges its segments 16 at a time instead of FTS5's default 4.
///
/// Large batches are indexed a few thousand messages at a time (`Db::index_deferred`), and with
/// the default every fourth such segment started a merge that cost more than writing the
/// segments had (in a 10k-message run, the seventh thousand took 1.4–1.7× the others). With 16,
/// each message is rewritten by merges about half as often: over a 1M-message run the store
/// thread's CPU per message in the last tenth fell from 36 to 30 µs. Queries read more
/// segments: `lcm_grep` at 1M went from 0.4–6.7 to 0.8–6.5 ms, assembly from 5.9–6.5 to 6.7
/// ms (targets 50 and 10 ms). A setting of the index, kept in the file.
pub const V6: &str = r#"
INSERT INTO messages_fts(messages_fts, rank) VALUES('automerge', 16);
"#;

/// Version 7: the full-text indexes hold terms made in Rust ([`crate::core::terms`]) and use FTS5's
/// `ascii` tokenizer, which only splits them at spaces: splitting, case folding and stemming
/// (now Snowball English, before FTS5's Porter) moved off the store thread, a fifth of its work
/// per tool-heavy message. Both indexes are rebuilt from the texts (by [`migrate`], for every
/// older version), so every message is in the file's index and the boundary moves to the
/// newest one. The message index keeps v6's merge width.
pub const V7: &str = r#"
DROP TABLE messages_fts;
CREATE VIRTUAL TABLE messages_fts USING fts5(
  text, content='', columnsize=0, detail=none, tokenize='ascii'
);
INSERT INTO messages_fts(messages_fts, rank) VALUES('automerge', 16);
DROP TABLE summaries_fts;
CREATE VIRTUAL TABLE summaries_fts USING fts5(
  text, content='', contentless_delete=1, tokenize='ascii'
);
UPDATE fts_state SET upto = (SELECT ifnull(max(id), 0) FROM messages);
"#;

/// Version 8: no index on `(conv_id, seq)`. Every message paid for an insert into it (a tenth
/// of the store thread's instructions per tool-heavy message, and one more page written by
/// every commit), and no query needs it: messages are found by id, by identity (whose index
/// starts with `conv_id`) or through the frontier. A message's `seq` is still assigned under
/// the write lock from `conversations.next_seq`, so it stays unique within its conversation,
/// and `lcm doctor` checks it. Dropping the unique index also means a duplicate `seq`
/// could never again make `INSERT OR IGNORE` drop a message silently.
pub const V8: &str = r#"
DROP INDEX IF EXISTS messages_seq;
"#;

/// Version 9: durable admitted turns (contract §1.7). `commitTurn` stores a turn's messages
/// and records its `advancementKey` here in the same transaction, so a retried commit (the
/// host's outbox, possibly after a restart) finds its key and writes nothing again
/// (`Db::commit_turn`). `conv_id` is the conversation the turn was stored in; rows are never
/// deleted (an archived conversation's keys stay committed).
pub const V9: &str = r#"
CREATE TABLE turn_commits(
  advancement_key TEXT PRIMARY KEY,
  conv_id INTEGER NOT NULL,
  committed_at INTEGER NOT NULL
) WITHOUT ROWID;
"#;

/// Opens (creating when absent) and migrates the store at `path`.
pub fn open(path: &Path, busy_timeout_ms: u64) -> Result<Connection> {
    let shown = path.display().to_string();
    let refuse = |reason: String| LosslessError::Refused {
        path: shown.clone(),
        reason,
    };
    let exists_nonempty = std::fs::metadata(path)
        .map(|m| m.len() > 0)
        .unwrap_or(false);
    if exists_nonempty {
        let mut header = [0u8; 16];
        let mut f = std::fs::File::open(path)?;
        let n = f.read(&mut header)?;
        if n < 16 || &header != SQLITE_HEADER {
            return Err(refuse("not a SQLite database (bad header)".into()));
        }
    } else if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)?;
        }
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::from_millis(busy_timeout_ms))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    super::unpack::register(&conn)?;
    // A disk that is full or cannot be written is not a damaged file: it is said as such
    // (`on_file`), not as a refusal, which would tell the user never to retry this file.
    let map =
        |e: rusqlite::Error| match LosslessError::from_sqlite(e, busy_timeout_ms).on_file(path) {
            LosslessError::Sqlite(e) => refuse(format!("unreadable database: {e}")),
            other => other,
        };
    // The three are read in one read transaction: another process creating this store at
    // the same moment commits its application id, version and tables at once, and reads
    // taken one by one could see its application id from before that commit and its tables
    // from after, and refuse a good store as foreign (found by `clawctx bench crash`).
    conn.execute_batch("BEGIN").map_err(map)?;
    let read = (|| -> rusqlite::Result<(i32, i32, i64)> {
        Ok((
            conn.query_row("PRAGMA application_id", [], |r| r.get(0))?,
            conn.query_row("PRAGMA user_version", [], |r| r.get(0))?,
            conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?,
        ))
    })();
    // Ending a read transaction cannot lose anything; a failure to end it shows in the
    // statements that follow.
    let _ = conn.execute_batch("COMMIT");
    let (app_id, version, tables) = read.map_err(map)?;
    if app_id == 0 && (tables > 0 || version != 0) {
        return Err(refuse(
            "a SQLite database that is not a clawctx lossless store".into(),
        ));
    }
    if app_id != 0 && app_id != APPLICATION_ID {
        return Err(refuse(format!(
            "foreign SQLite database (application_id {app_id:#x})"
        )));
    }
    if version > SCHEMA_VERSION {
        return Err(refuse(format!(
            "schema version {version} is newer than this build ({SCHEMA_VERSION})"
        )));
    }
    if version == 0 {
        // A fresh file: set the page size before the first table exists.
        // 4 KiB pages: a turn's commit (a few small messages) writes a handful of pages to the
        // log, and larger pages would multiply that; large texts are compressed anyway.
        // `synchronous = EXTRA` while the new file is still in rollback-journal mode: the
        // transactions that create it (its header, then the switch to WAL below) unlink their
        // journal and sync the directory. Without that sync a power cut can bring the last
        // journal back (an unlink is durable only once its directory is synced), and SQLite
        // plays a journal it finds over the file even once it is in WAL mode, corrupting it
        // (found by `tests/power_loss.rs`). The setting below replaces it.
        conn.execute_batch(
            "PRAGMA synchronous = EXTRA; PRAGMA page_size = 4096; PRAGMA auto_vacuum = INCREMENTAL;",
        )?;
    }
    // Reads go through a memory map (2 GiB of file; beyond it, through the page cache), so
    // the page cache mostly holds pages being written and stays small: past 1 GiB of file
    // SQLite walks the whole page cache on every commit (its lock-byte page at 1 GiB keeps
    // the cache's largest page number above the file's end), which a 32 MiB cache made a
    // tenth of the ingest time of a million-message store.
    enable_wal(&conn, busy_timeout_ms)
        .map_err(|e| LosslessError::from_sqlite(e, busy_timeout_ms))?;
    conn.execute_batch(
        "PRAGMA synchronous = NORMAL; PRAGMA temp_store = MEMORY;
         PRAGMA cache_size = -4096; PRAGMA foreign_keys = OFF; PRAGMA mmap_size = 2147483648;
         PRAGMA journal_size_limit = 67108864;",
    )
    .map_err(|e| LosslessError::from_sqlite(e, busy_timeout_ms))?;
    migrate(&conn, version).map_err(|e| match e {
        LosslessError::Sqlite(e) => LosslessError::from_sqlite(e, busy_timeout_ms),
        other => other,
    })?;
    conn.execute_batch(super::pending_fts::CREATE_TEMP)
        .map_err(|e| LosslessError::from_sqlite(e, busy_timeout_ms))?;
    Ok(conn)
}

/// `PRAGMA journal_mode = WAL`, retried for up to the busy timeout while another connection
/// holds the file: switching a file still in rollback-journal mode (a new store) needs it to
/// itself, and SQLite answers busy at once there instead of calling the busy handler, so
/// several processes opening a new store at the same moment failed with "locked" (found by
/// `clawctx bench crash`). A file already in WAL mode answers at once.
fn enable_wal(conn: &Connection, busy_timeout_ms: u64) -> rusqlite::Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_millis(busy_timeout_ms);
    loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0)) {
            Ok(_) => return Ok(()),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Prepared statements a connection keeps. One turn runs a few dozen distinct statements
/// (ingest, assembly, prompt recall, compaction); rusqlite's default of 16 evicted them in
/// turn, and re-parsing SQL was 7% of a long replay.
const STATEMENT_CACHE: usize = 256;

/// Opens a read-only connection to the store at `path`, which an open store thread's
/// connection ([`open`]) checked and migrated: the read thread's (see [`super`]). It writes
/// only its temporary tables (its own pending full-text index).
pub(crate) fn open_reader(path: &Path, busy_timeout_ms: u64) -> Result<Connection> {
    let sqlite = |e| LosslessError::from_sqlite(e, busy_timeout_ms);
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sqlite)?;
    conn.busy_timeout(Duration::from_millis(busy_timeout_ms))
        .map_err(sqlite)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    super::unpack::register(&conn).map_err(sqlite)?;
    conn.execute_batch(
        "PRAGMA temp_store = MEMORY; PRAGMA cache_size = -4096; PRAGMA mmap_size = 2147483648;",
    )
    .map_err(sqlite)?;
    conn.execute_batch(super::pending_fts::CREATE_TEMP)
        .map_err(sqlite)?;
    Ok(conn)
}

/// Refills a (new, empty) contentless full-text table from the texts of `source`
/// (`message_rows`, whose rows also get their conversation's term, or `summaries`).
fn reindex(conn: &Connection, fts: &str, source: &str) -> Result<()> {
    let messages = source == "message_rows";
    let conv = if messages { "conv_id" } else { "0" };
    let mut read = conn.prepare(&format!(
        "SELECT id, text, {conv} FROM {source} ORDER BY id"
    ))?;
    let mut write = conn.prepare(&format!("INSERT INTO {fts}(rowid, text) VALUES(?1, ?2)"))?;
    let mut rows = read.query([])?;
    while let Some(row) = rows.next()? {
        let id: i64 = row.get(0)?;
        let text: String = row.get(1)?;
        let terms = if messages {
            super::pending_fts::message_terms(&text, row.get(2)?)
        } else {
            crate::core::terms::index_terms(&text)
        };
        write.execute(rusqlite::params![id, terms])?;
    }
    Ok(())
}

/// Version 11: sentence vectors for semantic recall (issue #43, [`crate::core::semantic`]).
///
/// `embed_models` records each embedding model that wrote vectors here, by its identity
/// (`clawctx_embed::Embedder::model_id`), with how far it got: every message with an id up to
/// `msg_done` and every summary up to `sum_done` has its vector (or had no text). A different
/// model is a different row, so vectors of two models never mix and a new model embeds from the
/// start. `vectors` holds one row per embedded message (`kind` 0) or summary (`kind` 1): the
/// vector quantized to signed bytes with its scale ([`crate::core::semantic::quant`]), with the
/// conversation and token count that recall needs without reading the item. Read by
/// conversation, in insertion order (`vid`), so a reader's in-memory copy catches up with one
/// range read.
pub const V11: &str = r#"
CREATE TABLE embed_models(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  dim INTEGER NOT NULL,
  msg_done INTEGER NOT NULL DEFAULT 0,
  sum_done INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE vectors(
  vid INTEGER PRIMARY KEY,
  model INTEGER NOT NULL REFERENCES embed_models(id),
  kind INTEGER NOT NULL,
  item_id INTEGER NOT NULL,
  conv_id INTEGER NOT NULL,
  tokens INTEGER NOT NULL,
  scale REAL NOT NULL,
  vec BLOB NOT NULL
);
CREATE INDEX vectors_by_conv ON vectors(model, conv_id, vid);
"#;

/// Drops and refills both full-text indexes with v7's tables (for the migration to `version`).
fn rebuild_indexes(conn: &Connection, version: i32) -> Result<()> {
    let n: i64 = conn.query_row("SELECT count(*) FROM messages", [], |r| r.get(0))?;
    if n > 0 {
        // ~35 µs a message: a store of a million messages takes about half a minute.
        tracing::info!(
            "lossless: rebuilding the full-text index of {n} messages for schema v{version} (once)"
        );
    }
    conn.execute_batch(V7)?;
    reindex(conn, "messages_fts", "message_rows")?;
    reindex(conn, "summaries_fts", "summaries")
}

fn migrate(conn: &Connection, from: i32) -> Result<()> {
    if from >= SCHEMA_VERSION {
        return Ok(());
    }
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let run = || -> Result<()> {
        // Another process may have migrated while we waited for the write lock.
        let now: i32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if now < 1 {
            conn.execute_batch(V1)?;
            conn.execute_batch(&format!(
                "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 1;"
            ))?;
        }
        if now < 2 {
            // The indexes are rebuilt once, at v7.
            conn.execute_batch(V2)?;
            conn.execute_batch("PRAGMA user_version = 2;")?;
        }
        if now < 3 {
            conn.execute_batch(V3)?;
            conn.execute_batch("PRAGMA user_version = 3;")?;
        }
        if now < 4 {
            conn.execute_batch(V4)?;
            conn.execute_batch("PRAGMA user_version = 4;")?;
        }
        if now < 5 {
            conn.execute_batch(V5)?;
            conn.execute_batch("PRAGMA user_version = 5;")?;
        }
        if now < 6 {
            conn.execute_batch(V6)?;
            conn.execute_batch("PRAGMA user_version = 6;")?;
        }
        if now < 7 {
            rebuild_indexes(conn, 7)?;
            conn.execute_batch("PRAGMA user_version = 7;")?;
        }
        if now < 8 {
            conn.execute_batch(V8)?;
            conn.execute_batch("PRAGMA user_version = 8;")?;
        }
        if now < 9 {
            conn.execute_batch(V9)?;
            conn.execute_batch("PRAGMA user_version = 9;")?;
        }
        if now < 10 {
            // Version 10: Chinese, Japanese and Korean text is indexed as pairs of characters
            // and single characters (before, a run of it was one term, found only whole), and
            // every message carries its conversation's term (`terms::conv_term`), so one
            // conversation's search reads only its rows. Both indexes are rebuilt as at v7
            // (which, for an older store, already made them so).
            if now >= 7 {
                rebuild_indexes(conn, 10)?;
            }
            conn.execute_batch("PRAGMA user_version = 10;")?;
        }
        if now < 11 {
            conn.execute_batch(V11)?;
            conn.execute_batch("PRAGMA user_version = 11;")?;
        }
        Ok(())
    };
    match run() {
        Ok(()) => {
            conn.execute_batch("COMMIT")?;
            Ok(())
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}
