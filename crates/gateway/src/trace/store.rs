//! The trace file: schema, writes with retention, and the queries the API and the CLI read.
//!
//! One row per turn: a few columns the turn list shows without decoding (time, engine,
//! budget, tokens, counts), the trace as JSON without its parts (`body`), and the parts in
//! `codec`'s binary form. WAL with `synchronous = NORMAL`: a write costs no fsync, a process
//! crash loses nothing committed, an OS crash at most the last turns' traces (they are a
//! record, not the conversation). Retention runs in the write's transaction: a session's
//! turns beyond `maxTurnsPerSession` and then the oldest turns of any session while the
//! stored bytes exceed `maxBytes` are deleted (oldest first). Turn numbers are never reused.
//!
//! The gateway's writer thread is the connection's one owner; `clawctx sessions trace` opens
//! the file read-only ([`TraceDb::open_read_only`]), which WAL lets it do while the gateway
//! writes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use schemars::JsonSchema;
use serde::Serialize;

use super::{codec, TraceError, TraceSettings, TurnTrace};

/// The schema version this build writes.
const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS turns (
    id INTEGER PRIMARY KEY,
    session_key TEXT NOT NULL,
    turn INTEGER NOT NULL,
    at_ms INTEGER NOT NULL,
    source TEXT NOT NULL,
    engine TEXT NOT NULL,
    budget INTEGER,
    tokens INTEGER NOT NULL,
    summaries INTEGER NOT NULL,
    recalled INTEGER NOT NULL,
    raw INTEGER NOT NULL,
    left_out INTEGER,
    input_tokens INTEGER,
    cached_tokens INTEGER,
    bytes INTEGER NOT NULL,
    body TEXT NOT NULL,
    parts BLOB NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS turns_by_session ON turns (session_key, turn);
";

/// A connection to the trace file.
pub struct TraceDb {
    conn: Connection,
    path: PathBuf,
    settings: TraceSettings,
    /// Bytes of trace data stored (the `bytes` column's sum).
    stored_bytes: u64,
    /// The last turn number per session seen by this connection.
    last_turn: HashMap<String, u64>,
}

/// One turn in a session's list.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnRow {
    /// Its number in the session.
    pub turn: u64,
    /// When (epoch ms).
    pub at_ms: i64,
    /// `turn` or `engine-api`.
    pub source: String,
    /// The engine that served it.
    pub engine: String,
    /// The budget it was assembled in.
    pub token_budget: Option<u64>,
    /// The gateway's count of what was sent.
    pub tokens: u64,
    /// Summaries sent.
    pub summaries: u64,
    /// Recalled blocks sent.
    pub recalled: u64,
    /// Raw messages sent.
    pub raw: u64,
    /// Items left out, when known.
    pub left_out: Option<u64>,
    /// Input tokens the model reported.
    pub input_tokens: Option<u64>,
    /// Of them, read from the prompt cache.
    pub cached_tokens: Option<u64>,
    /// Bytes the trace takes.
    pub bytes: u64,
}

/// A page of a session's turns, newest first.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnPage {
    /// The session key.
    pub session_key: String,
    /// Turns kept for the session.
    pub total: u64,
    /// The page, newest first.
    pub turns: Vec<TurnRow>,
    /// `before=` for the next (older) page, when there is one.
    pub next_before: Option<u64>,
}

/// How one engine served a session.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EngineUse {
    /// The engine id.
    pub engine: String,
    /// Turns it served (of those kept).
    pub turns: u64,
    /// The first of them.
    pub first_turn: u64,
    /// The last of them.
    pub last_turn: u64,
    /// When it last served (epoch ms).
    pub last_at_ms: i64,
}

/// A session with traces.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TracedSession {
    /// The session key.
    pub session_key: String,
    /// Turns kept.
    pub turns: u64,
    /// The last turn's number.
    pub last_turn: u64,
    /// When it ran (epoch ms).
    pub last_at_ms: i64,
}

fn u(v: Option<i64>) -> Option<u64> {
    v.map(|x| x.max(0) as u64)
}

impl TraceDb {
    fn sqlite(&self) -> impl Fn(rusqlite::Error) -> TraceError + '_ {
        |source| TraceError::Sqlite {
            path: self.path.display().to_string(),
            source,
        }
    }

    /// Opens (creating it and its directory) the trace file for writing.
    pub fn open(path: &Path, settings: TraceSettings) -> Result<TraceDb, TraceError> {
        let shown = path.display().to_string();
        let sqlite = |source| TraceError::Sqlite {
            path: shown.clone(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| TraceError::Io {
                path: shown.clone(),
                source,
            })?;
        }
        let conn = Connection::open(path).map_err(sqlite)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(sqlite)?;
        let found: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(sqlite)?;
        if found > SCHEMA_VERSION {
            return Err(TraceError::NewerSchema {
                path: shown,
                found,
                supported: SCHEMA_VERSION,
            });
        }
        conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
            .map_err(sqlite)?;
        conn.execute_batch("PRAGMA synchronous = NORMAL;")
            .map_err(sqlite)?;
        conn.execute_batch(SCHEMA).map_err(sqlite)?;
        conn.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION};"))
            .map_err(sqlite)?;
        let stored: i64 = conn
            .query_row("SELECT coalesce(sum(bytes), 0) FROM turns", [], |r| {
                r.get(0)
            })
            .map_err(sqlite)?;
        Ok(TraceDb {
            conn,
            path: path.to_path_buf(),
            settings,
            stored_bytes: stored.max(0) as u64,
            last_turn: HashMap::new(),
        })
    }

    /// Opens the file read-only (the CLI), `None` when there is none yet.
    pub fn open_read_only(path: &Path) -> Result<Option<TraceDb>, TraceError> {
        if !path.exists() {
            return Ok(None);
        }
        let sqlite = |source| TraceError::Sqlite {
            path: path.display().to_string(),
            source,
        };
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sqlite)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(sqlite)?;
        let found: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(sqlite)?;
        if found > SCHEMA_VERSION {
            return Err(TraceError::NewerSchema {
                path: path.display().to_string(),
                found,
                supported: SCHEMA_VERSION,
            });
        }
        Ok(Some(TraceDb {
            conn,
            path: path.to_path_buf(),
            settings: TraceSettings::default(),
            stored_bytes: 0,
            last_turn: HashMap::new(),
        }))
    }

    /// Bytes of trace data stored (what `maxBytes` bounds).
    pub fn stored_bytes(&self) -> u64 {
        self.stored_bytes
    }

    /// Writes `trace` as the session's next turn, then applies retention; returns the turn's
    /// number and the bytes it takes.
    pub fn insert(&mut self, trace: &TurnTrace) -> Result<(u64, u64), TraceError> {
        let parts = codec::encode(&trace.parts);
        let body = body_json(trace).map_err(|e| TraceError::Corrupt {
            path: self.path.display().to_string(),
            what: e.to_string(),
        })?;
        let key = trace.session_key.as_str();
        // The next number is read in the write's own (immediate) transaction: `clawctx run`
        // and a gateway on the same state dir may both write this file.
        let tx = rusqlite::Transaction::new_unchecked(
            &self.conn,
            rusqlite::TransactionBehavior::Immediate,
        )
        .map_err(self.sqlite())?;
        let max: Option<i64> = tx
            .query_row(
                "SELECT max(turn) FROM turns WHERE session_key = ?1",
                [key],
                |r| r.get(0),
            )
            .map_err(self.sqlite())?;
        let turn = max
            .unwrap_or(0)
            .max(0)
            .max(self.last_turn.get(key).copied().unwrap_or(0) as i64) as u64
            + 1;
        let bytes = (parts.len() + body.len() + key.len()) as u64;
        let count = |kind: &str| trace.parts.iter().filter(|p| p.kind == kind).count() as i64;
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO turns (session_key, turn, at_ms, source, engine, budget, tokens, summaries, \
                     recalled, raw, left_out, input_tokens, cached_tokens, bytes, body, parts) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
                )
                .map_err(self.sqlite())?;
            insert
                .execute(params![
                    key,
                    turn as i64,
                    trace.at_ms,
                    trace.source,
                    trace.engine.id,
                    trace.token_budget.map(|b| b as i64),
                    trace.gateway_tokens as i64,
                    count("summary"),
                    count("recalled"),
                    count("raw"),
                    trace
                        .left_out
                        .as_ref()
                        .filter(|l| l.known)
                        .map(|l| l.items as i64),
                    trace.model.as_ref().map(|m| m.input_tokens as i64),
                    trace.model.as_ref().map(|m| m.cached_tokens as i64),
                    bytes as i64,
                    body,
                    parts,
                ])
                .map_err(self.sqlite())?;
        }
        let mut freed = 0u64;
        let max_turns = self.settings.max_turns_per_session.max(1);
        if turn > max_turns {
            freed += delete_returning_bytes(
                &tx,
                "DELETE FROM turns WHERE session_key = ?1 AND turn <= ?2 RETURNING bytes",
                params![key, (turn - max_turns) as i64],
            )
            .map_err(self.sqlite())?;
        }
        let new_id = tx.last_insert_rowid();
        let mut total = (self.stored_bytes + bytes).saturating_sub(freed);
        while total > self.settings.max_bytes {
            // Oldest first, one turn at a time (over the cap by one turn's bytes at most, as
            // a steady state is), never the turn just written.
            let gone = delete_returning_bytes(
                &tx,
                "DELETE FROM turns WHERE id = (SELECT min(id) FROM turns WHERE id < ?1) RETURNING bytes",
                params![new_id],
            )
            .map_err(self.sqlite())?;
            if gone == 0 {
                break;
            }
            total = total.saturating_sub(gone);
        }
        tx.commit().map_err(self.sqlite())?;
        self.stored_bytes = total;
        self.last_turn.insert(key.to_owned(), turn);
        Ok((turn, bytes))
    }

    /// A page of `key`'s turns, newest first, those before turn `before` (all when `None`).
    pub fn list(
        &self,
        key: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<TurnPage, TraceError> {
        let limit = limit.clamp(1, 500);
        let total: i64 = self
            .conn
            .query_row(
                "SELECT count(*) FROM turns WHERE session_key = ?1",
                [key],
                |r| r.get(0),
            )
            .map_err(self.sqlite())?;
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT turn, at_ms, source, engine, budget, tokens, summaries, recalled, raw, left_out, \
                 input_tokens, cached_tokens, bytes FROM turns WHERE session_key = ?1 AND turn < ?2 \
                 ORDER BY turn DESC LIMIT ?3",
            )
            .map_err(self.sqlite())?;
        let before = before.map_or(i64::MAX, |b| b.min(i64::MAX as u64) as i64);
        let mut turns: Vec<TurnRow> = stmt
            .query_map(params![key, before, (limit + 1) as i64], |r| {
                Ok(TurnRow {
                    turn: r.get::<_, i64>(0)?.max(0) as u64,
                    at_ms: r.get(1)?,
                    source: r.get(2)?,
                    engine: r.get(3)?,
                    token_budget: u(r.get(4)?),
                    tokens: r.get::<_, i64>(5)?.max(0) as u64,
                    summaries: r.get::<_, i64>(6)?.max(0) as u64,
                    recalled: r.get::<_, i64>(7)?.max(0) as u64,
                    raw: r.get::<_, i64>(8)?.max(0) as u64,
                    left_out: u(r.get(9)?),
                    input_tokens: u(r.get(10)?),
                    cached_tokens: u(r.get(11)?),
                    bytes: r.get::<_, i64>(12)?.max(0) as u64,
                })
            })
            .map_err(self.sqlite())?
            .collect::<Result<_, _>>()
            .map_err(self.sqlite())?;
        let next_before = if turns.len() > limit {
            turns.truncate(limit);
            turns.last().map(|t| t.turn)
        } else {
            None
        };
        Ok(TurnPage {
            session_key: key.to_owned(),
            total: total.max(0) as u64,
            turns,
            next_before,
        })
    }

    /// Turn `turn` of `key` (`None`: the newest), with its parts.
    pub fn get(&self, key: &str, turn: Option<u64>) -> Result<Option<TurnTrace>, TraceError> {
        let row: Option<(i64, String, Vec<u8>)> = match turn {
            Some(n) => self
                .conn
                .query_row(
                    "SELECT turn, body, parts FROM turns WHERE session_key = ?1 AND turn = ?2",
                    params![key, n.min(i64::MAX as u64) as i64],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional(),
            None => self
                .conn
                .query_row(
                    "SELECT turn, body, parts FROM turns WHERE session_key = ?1 ORDER BY turn DESC LIMIT 1",
                    params![key],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional(),
        }
        .map_err(self.sqlite())?;
        row.map(|(n, body, parts)| self.decode(key, n, &body, &parts))
            .transpose()
    }

    /// The turn of `key` kept just before `turn`.
    pub fn previous(&self, key: &str, turn: u64) -> Result<Option<TurnTrace>, TraceError> {
        let row: Option<(i64, String, Vec<u8>)> = self
            .conn
            .query_row(
                "SELECT turn, body, parts FROM turns WHERE session_key = ?1 AND turn < ?2 \
                 ORDER BY turn DESC LIMIT 1",
                params![key, turn.min(i64::MAX as u64) as i64],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(self.sqlite())?;
        row.map(|(n, body, parts)| self.decode(key, n, &body, &parts))
            .transpose()
    }

    fn decode(
        &self,
        key: &str,
        turn: i64,
        body: &str,
        parts: &[u8],
    ) -> Result<TurnTrace, TraceError> {
        let corrupt = |what: String| TraceError::Corrupt {
            path: self.path.display().to_string(),
            what: format!("turn {turn}: {what}"),
        };
        let mut t: TurnTrace = serde_json::from_str(body).map_err(|e| corrupt(e.to_string()))?;
        t.parts = codec::decode(parts).map_err(corrupt)?;
        t.turn = turn.max(0) as u64;
        t.session_key = key.to_owned();
        Ok(t)
    }

    /// The engines that served `key`, in the order they first did.
    pub fn engines(&self, key: &str) -> Result<Vec<EngineUse>, TraceError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT engine, count(*), min(turn), max(turn), max(at_ms) FROM turns \
                 WHERE session_key = ?1 GROUP BY engine ORDER BY min(turn)",
            )
            .map_err(self.sqlite())?;
        let rows = stmt
            .query_map([key], |r| {
                Ok(EngineUse {
                    engine: r.get(0)?,
                    turns: r.get::<_, i64>(1)?.max(0) as u64,
                    first_turn: r.get::<_, i64>(2)?.max(0) as u64,
                    last_turn: r.get::<_, i64>(3)?.max(0) as u64,
                    last_at_ms: r.get(4)?,
                })
            })
            .map_err(self.sqlite())?
            .collect::<Result<_, _>>()
            .map_err(self.sqlite())?;
        Ok(rows)
    }

    /// Every session with traces, most recent first.
    pub fn sessions(&self) -> Result<Vec<TracedSession>, TraceError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT session_key, count(*), max(turn), max(at_ms) FROM turns \
                 GROUP BY session_key ORDER BY max(at_ms) DESC",
            )
            .map_err(self.sqlite())?;
        let rows = stmt
            .query_map([], |r| {
                Ok(TracedSession {
                    session_key: r.get(0)?,
                    turns: r.get::<_, i64>(1)?.max(0) as u64,
                    last_turn: r.get::<_, i64>(2)?.max(0) as u64,
                    last_at_ms: r.get(3)?,
                })
            })
            .map_err(self.sqlite())?
            .collect::<Result<_, _>>()
            .map_err(self.sqlite())?;
        Ok(rows)
    }
}

/// The trace as JSON without its parts (those go to the `parts` column) nor the key and
/// number (columns of their own).
fn body_json(t: &TurnTrace) -> serde_json::Result<String> {
    serde_json::to_string(&Body {
        at_ms: t.at_ms,
        source: &t.source,
        session_id: &t.session_id,
        engine: &t.engine,
        token_budget: t.token_budget,
        history_messages: t.history_messages,
        assemble_calls: t.assemble_calls,
        gateway_tokens: t.gateway_tokens,
        engine_estimate: t.engine_estimate,
        epoch: t.epoch.as_deref(),
        left_out: t.left_out.as_ref(),
        model: t.model.as_ref(),
        compactions: &t.compactions,
        summarizer: &t.summarizer,
        summarizer_breaker: t.summarizer_breaker.as_ref(),
        runtime_warnings: &t.runtime_warnings,
    })
}

/// [`TurnTrace`]'s stored fields, borrowed (read back as a `TurnTrace`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Body<'a> {
    at_ms: i64,
    source: &'a str,
    session_id: &'a str,
    engine: &'a super::EngineServed,
    #[serde(skip_serializing_if = "Option::is_none")]
    token_budget: Option<u64>,
    history_messages: u64,
    assemble_calls: u64,
    gateway_tokens: u64,
    engine_estimate: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    epoch: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    left_out: Option<&'a super::LeftOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a super::ModelTrace>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    compactions: &'a [super::CompactionTrace],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    summarizer: &'a [super::SummarizerTrace],
    #[serde(skip_serializing_if = "Option::is_none")]
    summarizer_breaker: Option<&'a super::BreakerTrace>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    runtime_warnings: &'a [String],
}

fn delete_returning_bytes(
    tx: &rusqlite::Transaction<'_>,
    sql: &str,
    p: impl rusqlite::Params,
) -> rusqlite::Result<u64> {
    let mut stmt = tx.prepare_cached(sql)?;
    let freed: Vec<i64> = stmt.query_map(p, |r| r.get(0))?.collect::<Result<_, _>>()?;
    Ok(freed.into_iter().map(|b| b.max(0) as u64).sum())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::super::{TracePart, TurnTrace};
    use super::*;

    fn trace(key: &str, raw: usize) -> TurnTrace {
        TurnTrace {
            session_key: key.into(),
            source: "turn".into(),
            at_ms: 1,
            gateway_tokens: 100,
            parts: (0..raw)
                .map(|i| TracePart {
                    kind: "raw".into(),
                    index: Some(i as u32),
                    id: Some(format!("msg_{i}")),
                    depth: None,
                    role: Some("user".into()),
                    tokens: 20,
                    digest: format!("{i:08x}"),
                    span: None,
                    quotes: Vec::new(),
                    hits: Vec::new(),
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn retention_drops_a_sessions_oldest_turns_and_then_the_oldest_of_all_past_the_byte_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runtime").join("t.sqlite");
        let settings = TraceSettings {
            enabled: true,
            max_turns_per_session: 3,
            max_bytes: u64::MAX,
        };
        let mut db = TraceDb::open(&path, settings.clone()).unwrap();
        for _ in 0..5 {
            db.insert(&trace("a", 4)).unwrap();
        }
        let page = db.list("a", None, 10).unwrap();
        let turns: Vec<u64> = page.turns.iter().map(|t| t.turn).collect();
        assert_eq!(
            turns,
            [5, 4, 3],
            "the newest three are kept, numbers not reused"
        );
        assert!(db.get("a", Some(2)).unwrap().is_none());
        let back = db.get("a", Some(4)).unwrap().unwrap();
        // Parts named by an id are stored without their digest (the id is the reference).
        let mut expected = trace("a", 4).parts;
        for p in &mut expected {
            p.digest = String::new();
        }
        assert_eq!(back.parts, expected);
        assert_eq!(back.turn, 4);
        assert_eq!(db.previous("a", 4).unwrap().unwrap().turn, 3);

        // Reopened (a restart): numbering goes on, the byte total is read back.
        let bytes = db.stored_bytes();
        drop(db);
        let one = {
            let mut probe =
                TraceDb::open(&dir.path().join("probe.sqlite"), settings.clone()).unwrap();
            probe.insert(&trace("x", 4)).unwrap().1
        };
        let mut db = TraceDb::open(
            &path,
            TraceSettings {
                max_bytes: bytes + 2 * one,
                ..settings
            },
        )
        .unwrap();
        assert_eq!(db.stored_bytes(), bytes);
        assert_eq!(db.insert(&trace("a", 4)).unwrap().0, 6);
        // Over the byte cap: the oldest turns of any session go first.
        db.insert(&trace("b", 4)).unwrap();
        db.insert(&trace("b", 4)).unwrap();
        assert!(
            db.stored_bytes() <= bytes + 2 * one,
            "{} {bytes} {one}",
            db.stored_bytes()
        );
        let a: Vec<u64> = db
            .list("a", None, 10)
            .unwrap()
            .turns
            .iter()
            .map(|t| t.turn)
            .collect();
        let b: Vec<u64> = db
            .list("b", None, 10)
            .unwrap()
            .turns
            .iter()
            .map(|t| t.turn)
            .collect();
        assert_eq!(b, [2, 1], "the newest turns stay");
        assert!(
            !a.contains(&3) && a.contains(&6),
            "a's oldest went first: {a:?}"
        );
        let sessions = db.sessions().unwrap();
        assert_eq!(sessions.len(), 2);

        // Read-only, as the CLI opens it.
        let ro = TraceDb::open_read_only(&path).unwrap().unwrap();
        assert_eq!(ro.list("b", None, 1).unwrap().next_before, Some(2));
        assert!(TraceDb::open_read_only(&dir.path().join("none.sqlite"))
            .unwrap()
            .is_none());
    }
}
