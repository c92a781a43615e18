//! The newest messages' full-text index, kept in memory until there are enough of them.
//!
//! An FTS5 index writes a new segment at every commit, and a turn commits two to four
//! messages: the segment (and the merges that keep the segment count down) was about two
//! thirds of a turn's ingest, and the many small segments slowed every later query, which
//! opens all of them. So small batches index into a temporary (per-connection, in-memory)
//! index, `temp.pending_fts`, and once [`FLUSH_ROWS`] messages wait there they move to the
//! file's index, `messages_fts`, in one go. Large batches (from [`DIRECT_MIN`] messages) go to
//! the file's index directly, after moving whatever waits, in a later transaction of their own
//! that the store thread runs once the batches' callers have their answers and enough of them
//! wait, or it is idle (`Db::index_deferred`): until then they are above the boundary and
//! unindexed, like another connection's messages.
//!
//! `fts_state.upto` (schema v5) is the boundary: every message with an id up to it is in the
//! file's index, none above it is. Messages above it are either in this connection's pending
//! index or were written by another connection (another process, or one that crashed before
//! moving them); [`sync`] finds those by id and indexes them into the pending index from their
//! stored text, and drops pending rows another connection moved meanwhile. A full-text query
//! reads the pending index first (its ids are all above `upto`, so newer than everything in
//! the file's index) and then the file's. The temporary tables take part in transactions, so a
//! rolled-back ingest leaves them as they were; the in-memory [`PendingFts`] is put back
//! by the caller then. Nothing is lost by a crash: the messages are in `messages`, and the next
//! connection indexes them.

use rusqlite::{params, Connection, OptionalExtension};

use crate::core::terms::index_terms;
use crate::error::Result;

/// Messages waiting in the pending index that trigger a move to the file's index.
pub const FLUSH_ROWS: usize = 512;
/// Batches of at least this many messages are indexed into the file's index directly.
pub const DIRECT_MIN: usize = 64;

/// The per-connection tables: the index terms of each pending message (to move them later)
/// and the pending index itself (contentless, so emptying it is one command).
pub const CREATE_TEMP: &str = "
CREATE TEMP TABLE IF NOT EXISTS pending_terms(id INTEGER PRIMARY KEY, text TEXT NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS temp.pending_fts USING fts5(
  text, content='', columnsize=0, detail=none, tokenize='ascii'
);";

/// What this connection knows about the pending index (see the module header).
#[derive(Clone, Copy, Debug, Default)]
pub struct PendingFts {
    /// Messages in the pending index.
    pub rows: usize,
    /// Every message with an id up to this is in the file's index or the pending one.
    pub checked: i64,
    /// `fts_state.upto` when last read.
    pub upto: i64,
}

impl PendingFts {
    /// This state with the messages from id `first` on counted as not yet indexed anywhere:
    /// the next [`sync`] indexes them from their stored text (the fallback when their index
    /// terms waiting in memory could not be indexed).
    pub fn unindexed_from(self, first: i64) -> Self {
        Self {
            checked: self.checked.min(first - 1),
            ..self
        }
    }
}

fn read_upto(c: &Connection) -> Result<i64> {
    Ok(c.prepare_cached("SELECT upto FROM fts_state WHERE k = 1")?
        .query_row([], |r| r.get(0))
        .optional()?
        .unwrap_or(0))
}

/// The index terms of a message of conversation `conv` with text `text`: its words' terms and
/// the conversation's ([`crate::core::terms::conv_term`]).
pub fn message_terms(text: &str, conv: i64) -> String {
    let mut terms = index_terms(text);
    crate::core::terms::push_conv_term(&mut terms, conv);
    terms
}

/// Adds message `id` with index terms `terms` to the pending index.
pub fn add(c: &Connection, id: i64, terms: &str) -> Result<()> {
    c.prepare_cached("INSERT INTO temp.pending_terms(id, text) VALUES(?1, ?2)")?
        .execute(params![id, terms])?;
    c.prepare_cached("INSERT INTO temp.pending_fts(rowid, text) VALUES(?1, ?2)")?
        .execute(params![id, terms])?;
    Ok(())
}

/// Brings the pending index up to date with the file: drops what another connection moved
/// to the file's index, and indexes messages above the boundary this connection has not
/// seen. Writes only the temporary tables, so it runs inside read transactions too.
pub fn sync(c: &Connection, st: &mut PendingFts) -> Result<()> {
    all_or_nothing(c, st, sync_inner)
}

/// Adds messages to the pending index from their index terms in memory (`rows`: ids and
/// terms, ascending, all above the boundary and not in it yet). Writes only the temporary
/// tables, so it runs inside read transactions too.
pub fn adopt(c: &Connection, st: &mut PendingFts, rows: &[(i64, String)]) -> Result<()> {
    all_or_nothing(c, st, |c, st| {
        for (id, terms) in rows {
            add(c, *id, terms)?;
        }
        st.rows += rows.len();
        Ok(())
    })
}

/// Runs `f` inside a savepoint on a copy of `st`, keeping both its writes and the copy only
/// when it succeeds: a failure halfway must not leave rows in the temporary tables that `st`
/// does not count (they would be added a second time later).
fn all_or_nothing(
    c: &Connection,
    st: &mut PendingFts,
    f: impl FnOnce(&Connection, &mut PendingFts) -> Result<()>,
) -> Result<()> {
    c.execute_batch("SAVEPOINT pending_fts")?;
    let mut next = *st;
    match f(c, &mut next) {
        Ok(()) => {
            c.execute_batch("RELEASE pending_fts")?;
            *st = next;
            Ok(())
        }
        Err(e) => {
            let _ = c.execute_batch("ROLLBACK TO pending_fts; RELEASE pending_fts");
            Err(e)
        }
    }
}

fn sync_inner(c: &Connection, st: &mut PendingFts) -> Result<()> {
    let upto = read_upto(c)?;
    if upto > st.upto {
        if st.rows > 0 {
            c.prepare_cached("DELETE FROM temp.pending_terms WHERE id <= ?1")?
                .execute([upto])?;
            rebuild(c)?;
            st.rows = c.query_row("SELECT count(*) FROM temp.pending_terms", [], |r| {
                r.get::<_, i64>(0)
            })? as usize;
        }
        st.upto = upto;
    }
    let from = upto.max(st.checked);
    let ids = c
        .prepare_cached("SELECT id, conv_id FROM messages WHERE id > ?1 ORDER BY id")?
        .query_map([from], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?
        .collect::<rusqlite::Result<Vec<(i64, i64)>>>()?;
    let mut text = c.prepare_cached("SELECT text FROM message_rows WHERE id = ?1")?;
    for (id, conv) in &ids {
        // A row whose stored text cannot be read (`lcm doctor` reports it) is indexed
        // without words rather than failing every search.
        let t: String = text.query_row([id], |r| r.get(0)).unwrap_or_default();
        add(c, *id, &message_terms(&t, *conv))?;
    }
    st.rows += ids.len();
    st.checked = ids.last().map_or(from, |(id, _)| *id);
    Ok(())
}

/// Re-creates the pending index from `pending_terms` (after rows were dropped from it).
fn rebuild(c: &Connection) -> Result<()> {
    c.execute_batch(
        "INSERT INTO temp.pending_fts(pending_fts) VALUES('delete-all');
         INSERT INTO temp.pending_fts(rowid, text) SELECT id, text FROM temp.pending_terms;",
    )?;
    Ok(())
}

/// Moves every pending message to the file's index and raises the boundary past them. Runs
/// inside a write transaction.
pub fn flush(c: &Connection, st: &mut PendingFts) -> Result<()> {
    sync(c, st)?;
    let boundary = st.checked.max(st.upto);
    if st.rows > 0 {
        c.execute_batch(
            "INSERT INTO messages_fts(rowid, text) SELECT id, text FROM temp.pending_terms ORDER BY id;
             DELETE FROM temp.pending_terms;
             INSERT INTO temp.pending_fts(pending_fts) VALUES('delete-all');",
        )?;
    }
    if boundary > st.upto {
        raise(c, st, boundary)?;
    }
    st.rows = 0;
    Ok(())
}

/// Records that every message up to `id` is in the file's index.
pub fn raise(c: &Connection, st: &mut PendingFts, id: i64) -> Result<()> {
    c.prepare_cached("UPDATE fts_state SET upto = max(upto, ?1) WHERE k = 1")?
        .execute([id])?;
    st.upto = st.upto.max(id);
    st.checked = st.checked.max(id);
    Ok(())
}
