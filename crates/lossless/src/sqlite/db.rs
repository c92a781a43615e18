//! The synchronous database layer the store's threads run: conversations, idempotent ingest
//! and running totals. Compaction, assembly, recall and doctor add their own `impl Db` blocks
//! in their modules. The store thread's `Db` writes; the read thread has a `Db` of its own over
//! a read-only connection, whose jobs get it by shared reference (see [`super`]), and
//! [`Db::recover_after_panic`] puts either back in order after a job panicked.

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::checkpoint::Checkpointer;
use super::encode_queue::EncodeQueue;
use super::pending_fts::{self, PendingFts};
use super::term_rows::TermRowsCache;
use crate::core::codec::Encoded;
use crate::core::conv::{now_ms, ConvKey, ConvRow, IngestOutcome, TurnCommit};
use crate::core::decoded::DecodedCache;
use crate::core::FxMap;
use crate::error::{LosslessError, Result};

const CONV_COLS: &str = "id, agent_id, session_key, active, next_seq, next_ord, msg_count, msg_tokens, raw_bytes, frontier_tokens, frontier_items, epoch";

fn conv_row(r: &Row<'_>) -> rusqlite::Result<ConvRow> {
    Ok(ConvRow {
        id: r.get(0)?,
        agent_id: r.get(1)?,
        session_key: r.get(2)?,
        active: r.get::<_, i64>(3)? != 0,
        next_seq: r.get(4)?,
        next_ord: r.get(5)?,
        msg_count: r.get(6)?,
        msg_tokens: r.get(7)?,
        raw_bytes: r.get(8)?,
        frontier_tokens: r.get(9)?,
        frontier_items: r.get(10)?,
        epoch: r.get(11)?,
    })
}

/// A store thread's state: the connection and what it keeps in memory.
pub struct Db {
    pub(crate) conn: Connection,
    pub(crate) busy_ms: u64,
    /// The database file (to open the connection again, see [`Self::recover_after_panic`]).
    path: std::path::PathBuf,
    /// The read thread's: a read-only connection.
    read_only: bool,
    checkpointer: Option<Checkpointer>,
    /// Message texts of at least this many bytes are stored once per content in `payloads`.
    large_payload_bytes: usize,
    /// Shared skeletons known to be committed, and the ones seen once (see [`Skeletons`]).
    skeletons: Skeletons,
    /// Messages assembly decoded recently (see [`DecodedCache`]).
    pub(crate) decoded: std::cell::RefCell<DecodedCache>,
    /// Newest matches of search terms (see [`TermRowsCache`]).
    pub(crate) term_rows: std::cell::RefCell<TermRowsCache>,
    /// The in-memory index of the newest messages (see [`super::pending_fts`]).
    pub(crate) pending: std::cell::Cell<PendingFts>,
    /// Index terms of large batches' messages: committed, acknowledged, not yet in any index
    /// (see [`Self::index_deferred`]).
    deferred: std::cell::RefCell<Vec<(i64, String)>>,
}

/// Which stored skeletons (see [`Encoded::stored_skeleton`]) go to the `skeletons` table.
///
/// A skeleton is stored inline the first time this process sees it and shared (one row in
/// `skeletons`, referenced by `messages.skel`) from the second time on: the skeletons of plain
/// replies repeat endlessly, those carrying a call id never do and so never cost a row of
/// their own. `ids` holds committed rows only (a rolled-back transaction's are dropped), so a
/// reference always points at a row that exists; `seen` only steers that choice (fingerprints,
/// bounded, forgotten when full).
#[derive(Default)]
struct Skeletons {
    ids: FxMap<String, i64>,
    seen: std::collections::HashSet<u64, std::hash::BuildHasherDefault<rustc_hash::FxHasher>>,
}

/// Fingerprints [`Skeletons::seen`] keeps at most.
const SEEN_SKELETONS: usize = 1 << 16;
/// Shared skeletons [`Skeletons::ids`] caches at most (more are looked up again when needed).
const CACHED_SKELETONS: usize = 1 << 12;

impl Skeletons {
    /// The id of `json`'s shared row, creating it (in the open transaction, recorded in
    /// `fresh`) when it was seen before; `None`: store it inline.
    fn resolve(
        &mut self,
        c: &Connection,
        json: &str,
        fresh: &mut Vec<(String, i64)>,
    ) -> Result<Option<i64>> {
        if let Some(id) = self.ids.get(json) {
            return Ok(Some(*id));
        }
        if let Some((_, id)) = fresh.iter().find(|(j, _)| j == json) {
            return Ok(Some(*id));
        }
        let fp = {
            use std::hash::{BuildHasher, BuildHasherDefault};
            BuildHasherDefault::<rustc_hash::FxHasher>::default().hash_one(json)
        };
        if self.seen.len() >= SEEN_SKELETONS {
            self.seen.clear();
        }
        if self.seen.insert(fp) {
            return Ok(None);
        }
        c.prepare_cached("INSERT INTO skeletons(json) VALUES(?1) ON CONFLICT(json) DO NOTHING")?
            .execute([json])?;
        let id: i64 = c
            .prepare_cached("SELECT id FROM skeletons WHERE json = ?1")?
            .query_row([json], |r| r.get(0))?;
        fresh.push((json.to_owned(), id));
        Ok(Some(id))
    }

    /// Remembers the rows a committed transaction created.
    fn committed(&mut self, fresh: Vec<(String, i64)>) {
        for (json, id) in fresh {
            if self.ids.len() >= CACHED_SKELETONS {
                self.ids.clear();
            }
            self.ids.insert(json, id);
        }
    }
}

pub use crate::config::DEFAULT_LARGE_PAYLOAD_BYTES;

impl Db {
    pub(crate) fn new(
        conn: Connection,
        path: &std::path::Path,
        busy_ms: u64,
        checkpointer: Option<Checkpointer>,
    ) -> Self {
        Self {
            conn,
            busy_ms,
            path: path.to_path_buf(),
            read_only: false,
            checkpointer,
            large_payload_bytes: DEFAULT_LARGE_PAYLOAD_BYTES,
            skeletons: Skeletons::default(),
            decoded: Default::default(),
            term_rows: Default::default(),
            pending: Default::default(),
            deferred: Default::default(),
        }
    }

    /// The read thread's state over `conn`, a read-only connection (see
    /// [`super::schema::open_reader`]).
    pub(crate) fn new_reader(conn: Connection, path: &std::path::Path, busy_ms: u64) -> Self {
        Self {
            read_only: true,
            ..Self::new(conn, path, busy_ms, None)
        }
    }

    /// Puts this state back in order after a job panicked in the middle of it, before the
    /// thread takes its next job: the open transaction (and savepoints) rolled back, and
    /// everything kept in memory that the job may have left half-updated dropped, so it is
    /// rebuilt from the file: the decoded and term-row caches, the shared-skeleton ids, the
    /// pending full-text index (temporary tables emptied, bookkeeping reset) and the terms
    /// waiting in `deferred`. The messages those indexes held are above the file's index
    /// boundary, so the next full-text query indexes them from their text
    /// ([`pending_fts::sync`] from the boundary on): nothing acknowledged is lost or hidden.
    /// When the connection cannot be rolled back or emptied, a new one replaces it.
    pub(crate) fn recover_after_panic(&mut self) {
        self.decoded.get_mut().clear();
        self.term_rows.get_mut().clear();
        self.skeletons = Skeletons::default();
        self.deferred.get_mut().clear();
        self.pending.set(PendingFts::default());
        if let Err(e) = self.reset_connection() {
            tracing::error!(
                "lossless: cannot roll the connection back after a panic ({e}); opening a new one"
            );
            if let Err(e) = self.reopen() {
                tracing::error!(
                    "lossless: cannot open a new connection ({e}); the next jobs may fail"
                );
            }
        }
    }

    /// Ends any transaction and empties the pending index's temporary tables.
    fn reset_connection(&mut self) -> Result<()> {
        if !self.conn.is_autocommit() {
            self.conn.execute_batch("ROLLBACK")?;
        }
        self.conn.flush_prepared_statement_cache();
        self.conn.execute_batch(
            "DELETE FROM temp.pending_terms;
             INSERT INTO temp.pending_fts(pending_fts) VALUES('delete-all');",
        )?;
        Ok(())
    }

    /// The database file.
    pub(crate) fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Replaces the connection with a new one to the same file (the old one is closed, which
    /// rolls back whatever it had open; its temporary tables go with it).
    pub(crate) fn reopen(&mut self) -> Result<()> {
        let conn = if self.read_only {
            super::schema::open_reader(&self.path, self.busy_ms)?
        } else {
            let c = super::schema::open(&self.path, self.busy_ms)?;
            if self.checkpointer.is_some() {
                c.execute_batch("PRAGMA wal_autocheckpoint = 0;")
                    .map_err(|e| self.err(e))?;
            }
            c
        };
        drop(std::mem::replace(&mut self.conn, conn));
        self.pending.set(PendingFts::default());
        Ok(())
    }

    /// Texts of at least `n` bytes go to the deduplicated `payloads` table (`0` = never).
    pub fn set_large_payload_bytes(&mut self, n: usize) {
        self.large_payload_bytes = if n == 0 { usize::MAX } else { n };
    }

    pub(crate) fn close(mut self) {
        // What waits for the file's index moves there now rather than being indexed from
        // its text by the next connection (nothing is lost either way).
        self.index_all_in_file();
        // The checkpoint thread's connection closes first (its channel ends here), so this
        // one, the last, checkpoints the log into the file and removes it.
        if let Some(c) = self.checkpointer {
            c.stop();
        }
        let _ = self.conn.execute_batch("PRAGMA optimize;");
        let _ = self.conn.close();
    }

    /// Tells the background checkpointer that a committed transaction wrote about `bytes`.
    pub(crate) fn wrote(&mut self, bytes: u64) {
        if let Some(c) = &mut self.checkpointer {
            c.wrote(bytes);
        }
    }

    /// Maps a rusqlite error (lock timeouts become `Busy`).
    pub(crate) fn err(&self, e: rusqlite::Error) -> LosslessError {
        LosslessError::from_sqlite(e, self.busy_ms)
    }

    /// Runs `f` inside one IMMEDIATE transaction (rolled back on error).
    pub fn tx<R>(&mut self, f: impl FnOnce(&Connection) -> Result<R>) -> Result<R> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| LosslessError::from_sqlite(e, self.busy_ms))?;
        let r = match f(&tx) {
            Ok(r) => r,
            Err(e) => {
                // Rolls back: rows a cache saw inside the transaction are gone, and their
                // ids will be given out again.
                drop(tx);
                self.term_rows.get_mut().clear();
                return Err(e);
            }
        };
        if let Err(e) = tx.commit() {
            // The commit failed (e.g. the disk is full) and was rolled back: as above, rows a
            // cache saw are gone and their ids will be given out again.
            self.term_rows.get_mut().clear();
            return Err(LosslessError::from_sqlite(e, self.busy_ms));
        }
        if let Some(c) = &mut self.checkpointer {
            if c.committed() {
                // Waits (busy timeout) for the checkpoint thread, then copies what is left;
                // a failure leaves the log longer until the next try, nothing is lost.
                let _ = self
                    .conn
                    .query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()));
            }
        }
        Ok(r)
    }

    /// Brings the in-memory index of the newest messages up to date (see
    /// [`super::pending_fts::sync`]); every full-text query of messages runs this first.
    pub fn sync_pending_index(&self) -> Result<()> {
        self.adopt_deferred();
        let mut st = self.pending.get();
        pending_fts::sync(&self.conn, &mut st)?;
        self.pending.set(st);
        Ok(())
    }

    /// Indexes the large batches' messages waiting in `deferred` into the file's index, in a
    /// transaction of its own.
    ///
    /// A large batch commits without its full-text indexing and its caller gets the answer;
    /// its index terms wait here. The store thread runs this once [`DEFER_ROWS`] messages
    /// wait, or when no job has come for [`DEFER_IDLE`] (see [`Self::after_job`]). The
    /// indexing (a third of a batch's store time) then overlaps the encoding of the next
    /// batches instead of holding them up, and it writes one index segment for many batches:
    /// FTS5 writes a segment per transaction and later merges the segments, and merging a
    /// hundred-message segment cost six times writing it. Until this has run the messages are
    /// above `fts_state.upto`, like any other connection's unindexed messages, and every
    /// reader (another connection, a process after a crash) indexes them from their text.
    /// Should it fail (the file's write lock held elsewhere past the busy timeout), this
    /// connection does the same.
    pub fn index_deferred(&mut self) {
        let mut rows = std::mem::take(self.deferred.get_mut());
        let Some(&(first, _)) = rows.first() else {
            return;
        };
        let before = self.pending.get();
        let mut st = before;
        let out = self.tx(|c| index_rows(c, &mut rows, &mut st));
        self.pending.set(match out {
            Ok(()) => st,
            Err(e) => {
                tracing::warn!(
                    "lossless: indexing {} messages failed ({e}); they will be indexed from their text",
                    rows.len()
                );
                before.unindexed_from(first)
            }
        });
        // The emptied list goes back with its capacity: growing it anew every few thousand
        // messages took fresh pages from the system each time (page faults on the store
        // thread, ~2% of a batch's time).
        rows.clear();
        *self.deferred.get_mut() = rows;
    }

    /// The text of a message row read from `messages` itself: its stored bytes (column
    /// `text`) decompressed here, or its payload's (column `payload`) when it has one. Hot
    /// paths read this way instead of through the `message_rows` view, whose `unpack()` copies
    /// the text twice more and whose skeleton lookup costs a query a row.
    pub(crate) fn stored_text(
        &self,
        r: &rusqlite::Row<'_>,
        text: usize,
        payload: usize,
    ) -> Result<String> {
        match r.get::<_, Option<i64>>(payload)? {
            Some(pid) => self
                .conn
                .prepare_cached("SELECT text FROM payloads WHERE id = ?1")?
                .query_row([pid], |x| Ok(super::unpack::column_text(x.get_ref(0)?)))?,
            None => super::unpack::column_text(r.get_ref(text)?),
        }
        .map_err(LosslessError::Corrupt)
    }

    /// Messages waiting for [`Self::index_deferred`].
    pub fn deferred_rows(&self) -> usize {
        self.deferred.borrow().len()
    }

    /// What the store thread does between jobs, once the job's caller has its answer: index
    /// the waiting messages of large batches once there are enough of them, and move the
    /// pending index to the file's once it holds [`pending_fts::FLUSH_ROWS`] messages (so no
    /// turn waits for that move). Returns whether messages still wait (then it calls
    /// [`Self::index_deferred`] when no job comes for [`DEFER_IDLE`]).
    pub(crate) fn after_job(&mut self) -> bool {
        if self.deferred_rows() >= DEFER_ROWS {
            self.index_deferred();
        }
        if self.pending.get().rows >= pending_fts::FLUSH_ROWS {
            self.flush_pending();
        }
        self.deferred_rows() > 0
    }

    /// Puts every message this connection indexed, or holds index terms for, into the file's
    /// index: the large batches' waiting terms ([`Self::index_deferred`]) and the pending
    /// index. Until then those messages are above the file's boundary, and another
    /// connection (the read thread's, another process) indexes them from their stored text,
    /// so a job that rewrites stored text runs this first ([`Db::expire_payloads`]).
    pub(crate) fn index_all_in_file(&mut self) {
        self.index_deferred();
        if self.pending.get().rows > 0 {
            self.flush_pending();
        }
    }

    /// Moves the pending index to the file's, in a transaction of its own. Should that fail,
    /// the pending index stays as it was and the move is tried after the next job.
    fn flush_pending(&mut self) {
        let before = self.pending.get();
        let mut st = before;
        let out = self.tx(|c| pending_fts::flush(c, &mut st));
        self.pending.set(match out {
            Ok(()) => st,
            Err(e) => {
                tracing::warn!("lossless: moving the pending full-text index failed ({e})");
                before
            }
        });
    }

    /// Moves the messages waiting for [`Self::index_deferred`] into the pending index, from
    /// their index terms in memory: a full-text query cannot wait for the file's index (it may
    /// run inside a read transaction). The pending index is empty while messages wait (see
    /// [`Appender::new`]), so it then holds exactly the messages above the boundary, as it
    /// must. Should that fail, they are indexed from their text by the next sync instead.
    fn adopt_deferred(&self) {
        let rows = std::mem::take(&mut *self.deferred.borrow_mut());
        let Some(&(first, _)) = rows.first() else {
            return;
        };
        let mut st = self.pending.get();
        if let Err(e) = pending_fts::adopt(&self.conn, &mut st, &rows) {
            tracing::warn!(
                "lossless: moving {} waiting messages to the pending index failed ({e}); they will be indexed from their text",
                rows.len()
            );
            st = st.unindexed_from(first);
        }
        self.pending.set(st);
    }

    /// Runs `f` inside one read transaction: a single snapshot for all its statements, and
    /// SQLite's shared-memory locks taken once instead of once per statement (with hundreds
    /// of point lookups, as in assembly and ranking, those lock calls were a tenth of the
    /// time). Inside an open transaction `f` just runs.
    pub fn read<R>(&self, f: impl FnOnce(&Self) -> Result<R>) -> Result<R> {
        if !self.conn.is_autocommit() {
            return f(self);
        }
        self.conn
            .execute_batch("BEGIN DEFERRED")
            .map_err(|e| self.err(e))?;
        let out = f(self);
        // Nothing was written, so ending it cannot lose anything; should COMMIT fail (it
        // cannot for a read), ROLLBACK still ends the transaction.
        if self.conn.execute_batch("COMMIT").is_err() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        out
    }

    /// The active conversation of `key`, if any.
    pub fn conversation(&self, key: &ConvKey) -> Result<Option<ConvRow>> {
        get_conv(&self.conn, key).map_err(|e| self.err(e))
    }

    /// A conversation by row id.
    pub fn conversation_by_id(&self, id: i64) -> Result<Option<ConvRow>> {
        self.conn
            .prepare_cached(&format!(
                "SELECT {CONV_COLS} FROM conversations WHERE id = ?1"
            ))?
            .query_row([id], conv_row)
            .optional()
            .map_err(|e| self.err(e))
    }

    /// Every conversation row (active and archived).
    pub fn conversations(&self) -> Result<Vec<ConvRow>> {
        let mut st = self.conn.prepare(&format!(
            "SELECT {CONV_COLS} FROM conversations ORDER BY id"
        ))?;
        let rows = st
            .query_map([], conv_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Whether a message with this identity (timestamp and hash, see
    /// [`Encoded`]) is stored in `conv_id`.
    pub fn has_message(&self, conv_id: i64, ts: Option<i64>, hash: i64) -> Result<bool> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT 1 FROM messages WHERE conv_id = ?1 AND ifnull(ts, 0) = ?2 AND hash = ?3",
            )?
            .query_row(params![conv_id, ts.unwrap_or(0), hash], |_| Ok(()))
            .optional()?
            .is_some())
    }

    /// Stores `msgs` (already encoded) in one transaction; duplicates (same identity in the
    /// conversation) are skipped. Appends each new message to the frontier and updates the
    /// running totals.
    pub fn ingest(&mut self, key: &ConvKey, msgs: &[Encoded]) -> Result<IngestOutcome> {
        self.append(key, msgs.len(), |app| {
            for m in msgs {
                app.push(m)?;
            }
            Ok(())
        })
    }

    /// `commitTurn` (contract §1.7): stores `msgs` like [`Self::ingest`] and records
    /// `advancement_key` in the same transaction, so either both are in the file or neither
    /// is. A key already recorded makes this write nothing and answer
    /// [`TurnCommit::Duplicate`]; the check and the insert run under the transaction's write
    /// lock, so two connections committing the same key store the turn once.
    pub fn commit_turn(
        &mut self,
        key: &ConvKey,
        advancement_key: &str,
        msgs: &[Encoded],
    ) -> Result<TurnCommit> {
        let out = self.append_turn(key, msgs.len(), Some(advancement_key), |app| {
            for m in msgs {
                app.push(m)?;
            }
            Ok(())
        })?;
        Ok(out.map_or(TurnCommit::Duplicate, TurnCommit::Committed))
    }

    /// [`Self::commit_turn`] for a batch still being encoded (see [`Self::ingest_queue`]). On
    /// a duplicate the queue is abandoned without a chunk being taken.
    pub fn commit_turn_queue(
        &mut self,
        key: &ConvKey,
        advancement_key: &str,
        queue: &EncodeQueue,
    ) -> Result<TurnCommit> {
        let _abandon = AbandonOnExit(queue);
        let out = self.append_turn(key, queue.len(), Some(advancement_key), |app| {
            drain_queue(app, queue)
        })?;
        Ok(out.map_or(TurnCommit::Duplicate, TurnCommit::Committed))
    }

    /// One ingest transaction: `fill` pushes the messages (about `expected` of them) into an
    /// [`Appender`]. The in-memory state the transaction changes (the shared skeletons, the
    /// pending full-text index) is kept only when it commits.
    fn append(
        &mut self,
        key: &ConvKey,
        expected: usize,
        fill: impl FnOnce(&mut Appender<'_>) -> Result<()>,
    ) -> Result<IngestOutcome> {
        // Without a turn key nothing is skipped, so the outcome is always there.
        Ok(self
            .append_turn(key, expected, None, fill)?
            .unwrap_or_default())
    }

    /// [`Self::append`], recording `turn` (an advancement key) in the same transaction when
    /// given. `None`: `turn` was recorded already, and the transaction wrote nothing (no
    /// conversation created, no index moved, `fill` not called).
    fn append_turn(
        &mut self,
        key: &ConvKey,
        expected: usize,
        turn: Option<&str>,
        fill: impl FnOnce(&mut Appender<'_>) -> Result<()>,
    ) -> Result<Option<IngestOutcome>> {
        if expected < pending_fts::DIRECT_MIN {
            // Small batches go to the pending index, which must stay a contiguous run above
            // the boundary: what waits for the file's index goes there first.
            self.index_deferred();
        }
        let large = self.large_payload_bytes;
        let mut skel = std::mem::take(&mut self.skeletons);
        let before = self.pending.get();
        let mut pending = before;
        let mut deferred = std::mem::take(self.deferred.get_mut());
        let waiting = deferred.first().map(|&(id, _)| id);
        let out = self.tx(|c| {
            if let Some(turn) = turn {
                if turn_recorded(c, turn)? {
                    // Nothing touched: the in-memory state below stays as it was.
                    return Ok(None);
                }
            }
            let mut app = Appender::new(
                c,
                key,
                expected,
                large,
                &mut skel,
                &mut pending,
                &mut deferred,
            )?;
            fill(&mut app)?;
            if let Some(turn) = turn {
                c.prepare_cached(
                    "INSERT INTO turn_commits(advancement_key, conv_id, committed_at) VALUES(?1, ?2, ?3)",
                )?
                .execute(params![turn, app.conv.id, now_ms()])?;
            }
            app.finish().map(Some)
        });
        // A rolled-back transaction left the temporary index as it was before, and the file's
        // index too: messages that waited are indexed from their text later instead.
        self.pending.set(match (&out, waiting) {
            (Ok(_), _) => pending,
            (Err(_), Some(first)) => before.unindexed_from(first),
            (Err(_), None) => before,
        });
        let out = out.map(|done| {
            *self.deferred.get_mut() = deferred;
            done.map(|(out, fresh)| {
                skel.committed(fresh);
                out
            })
        });
        self.skeletons = skel;
        let out = out?;
        if let Some(out) = &out {
            self.wrote(out.bytes);
        }
        Ok(out)
    }

    /// [`Self::ingest`] for a batch still being encoded ([`EncodeQueue`]): chunks are
    /// inserted in order as they become ready, and this thread encodes chunks itself
    /// rather than wait for an encoder. One transaction for everything: an encoding failure
    /// rolls all of it back. The queue is abandoned when this returns, so its encoders stop.
    pub fn ingest_queue(&mut self, key: &ConvKey, queue: &EncodeQueue) -> Result<IngestOutcome> {
        let _abandon = AbandonOnExit(queue);
        self.append(key, queue.len(), |app| drain_queue(app, queue))
    }
}

/// Abandons its queue when dropped, so the queue's encoders stop whatever the job's outcome.
struct AbandonOnExit<'q>(&'q EncodeQueue);

impl Drop for AbandonOnExit<'_> {
    fn drop(&mut self) {
        self.0.abandon();
    }
}

/// Pushes `queue`'s chunks into `app` in order as they become ready (encoding chunks on this
/// thread rather than waiting for an encoder).
fn drain_queue(app: &mut Appender<'_>, queue: &EncodeQueue) -> Result<()> {
    while let Some(chunk) = queue.take_next() {
        for m in chunk? {
            app.push_owned(m)?;
        }
    }
    Ok(())
}

/// Whether `advancement_key` is in `turn_commits`.
fn turn_recorded(c: &Connection, advancement_key: &str) -> Result<bool> {
    let mut st = c.prepare_cached("SELECT 1 FROM turn_commits WHERE advancement_key = ?1")?;
    Ok(st
        .query_row([advancement_key], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Appends messages to one conversation inside an open transaction, keeping the running totals
/// in memory and writing them once at the end.
struct Appender<'c> {
    conv: ConvRow,
    stored: Vec<bool>,
    bytes: u64,
    ins: rusqlite::CachedStatement<'c>,
    /// Where a large batch's index terms wait for [`Db::index_deferred`].
    deferred: Option<&'c mut Vec<(i64, String)>>,
    frontier: rusqlite::CachedStatement<'c>,
    c: &'c Connection,
    large: usize,
    skel: &'c mut Skeletons,
    fresh: Vec<(String, i64)>,
    pending: &'c mut PendingFts,
    /// The id of the last message stored.
    last_id: Option<i64>,
}

impl<'c> Appender<'c> {
    /// Batches of [`pending_fts::DIRECT_MIN`] messages or more (`expected`) go to the file's
    /// full-text index directly, after what waits in the pending index; smaller ones to the
    /// pending index.
    fn new(
        c: &'c Connection,
        key: &ConvKey,
        expected: usize,
        large: usize,
        skel: &'c mut Skeletons,
        pending: &'c mut PendingFts,
        deferred: &'c mut Vec<(i64, String)>,
    ) -> Result<Self> {
        let direct = expected >= pending_fts::DIRECT_MIN;
        if direct {
            if !deferred.is_empty() {
                // Messages wait for the file's index. This batch's can join them only if
                // nothing else was stored since (their ids then follow on): otherwise they
                // are indexed now, so the boundary can pass the other messages.
                let newest: i64 = c
                    .prepare_cached("SELECT ifnull(max(id), 0) FROM messages")?
                    .query_row([], |r| r.get(0))?;
                if newest > pending.checked || pending.rows > 0 {
                    index_rows(c, deferred, pending)?;
                }
            }
            if deferred.is_empty() {
                pending_fts::flush(c, pending)?;
            }
        } else {
            // Messages other connections stored since: into the pending index first, so it
            // stays a contiguous run above the boundary.
            pending_fts::sync(c, pending)?;
        }
        Ok(Self {
            conv: get_or_create_conv(c, key)?,
            stored: Vec::with_capacity(expected),
            bytes: 0,
            ins: c.prepare_cached(
                "INSERT OR IGNORE INTO messages(conv_id, seq, role, tokens, ts, hash, n_calls, tool_call_id, skeleton, text, skel)
                 VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )?,
            deferred: direct.then_some(deferred),
            frontier: c.prepare_cached(
                "INSERT INTO frontier(conv_id, ord, kind, item_id, tokens) VALUES(?1, ?2, 0, ?3, ?4)",
            )?,
            c,
            large,
            skel,
            fresh: Vec::new(),
            pending,
            last_id: None,
        })
    }

    fn push(&mut self, m: &Encoded) -> Result<()> {
        self.push_parts(m, None)
    }

    /// [`Self::push`] of a message the caller is done with: its index terms move to where they
    /// wait for indexing instead of being copied (a fifth of the text a tool-heavy batch stores).
    fn push_owned(&mut self, mut m: Encoded) -> Result<()> {
        let fts = std::mem::take(&mut m.fts);
        self.push_parts(&m, Some(fts))
    }

    /// Stores `m`, whose index terms are `fts` when given (then `m.fts` is not read).
    fn push_parts(&mut self, m: &Encoded, fts: Option<String>) -> Result<()> {
        let shared = match &m.stored_skeleton {
            Some(json) => self.skel.resolve(self.c, json, &mut self.fresh)?,
            None => None,
        };
        let inline = if shared.is_some() {
            None
        } else {
            m.stored_skeleton.as_deref()
        };
        let conv = &mut self.conv;
        let external = m.text.len() >= self.large;
        let n = self.ins.execute(params![
            conv.id,
            conv.next_seq,
            m.role,
            m.tokens as i64,
            m.ts,
            m.hash,
            m.n_calls,
            m.tool_call_id,
            inline,
            stored_text(if external { None } else { Some(m) }),
            shared
        ])?;
        if n == 0 {
            self.stored.push(false);
            return Ok(());
        }
        let id = self.c.last_insert_rowid();
        if external {
            let written = store_payload(self.c, id, m)?;
            self.bytes += written;
        } else {
            self.bytes += m.packed.as_ref().map_or(m.text.len(), Vec::len) as u64;
        }
        let mut fts = fts.unwrap_or_else(|| m.fts.clone());
        crate::core::terms::push_conv_term(&mut fts, conv.id);
        let fts_len = fts.len();
        match &mut self.deferred {
            Some(rows) => {
                rows.push((id, fts));
                if rows.len() >= DEFER_MAX {
                    // A huge batch: indexed as it goes, in this transaction.
                    index_rows(self.c, rows, self.pending)?;
                }
            }
            None => {
                pending_fts::add(self.c, id, &fts)?;
                self.pending.rows += 1;
            }
        }
        self.last_id = Some(id);
        self.frontier
            .execute(params![conv.id, conv.next_ord, id, m.tokens as i64])?;
        conv.next_seq += 1;
        conv.next_ord += 1;
        conv.msg_count += 1;
        conv.msg_tokens += m.tokens as i64;
        conv.raw_bytes += m.text.len() as i64;
        conv.frontier_tokens += m.tokens as i64;
        conv.frontier_items += 1;
        self.bytes += (fts_len + inline.map_or(0, str::len)) as u64;
        self.stored.push(true);
        Ok(())
    }

    /// The outcome, and the shared skeleton rows this transaction created.
    fn finish(self) -> Result<(IngestOutcome, Vec<(String, i64)>)> {
        if let Some(last) = self.last_id {
            // Accounted for: in the pending index, in the file's, or in `deferred` for it (the
            // pending index moves to the file's after the job, see `Db::after_job`).
            self.pending.checked = self.pending.checked.max(last);
        }
        let conv = self.conv;
        if self.stored.iter().any(|s| *s) {
            self.c
                .prepare_cached(
                    "UPDATE conversations SET next_seq = ?2, next_ord = ?3, msg_count = ?4, msg_tokens = ?5, raw_bytes = ?6,
                     frontier_tokens = ?7, frontier_items = ?8 WHERE id = ?1",
                )?
                .execute(params![
                    conv.id,
                    conv.next_seq,
                    conv.next_ord,
                    conv.msg_count,
                    conv.msg_tokens,
                    conv.raw_bytes,
                    conv.frontier_tokens,
                    conv.frontier_items
                ])?;
        }
        Ok((
            IngestOutcome {
                stored: self.stored,
                conv: Some(conv),
                bytes: self.bytes,
            },
            self.fresh,
        ))
    }
}

/// Indexes `rows` (ids and index terms, ascending) into the file's index and moves the
/// boundary past them; empties `rows`. Every message up to the last of them must then be in the
/// file's index (the caller's invariant).
fn index_rows(
    c: &Connection,
    rows: &mut Vec<(i64, String)>,
    pending: &mut PendingFts,
) -> Result<()> {
    let Some(&(last, _)) = rows.last() else {
        return Ok(());
    };
    let mut ins = c.prepare_cached("INSERT INTO messages_fts(rowid, text) VALUES(?1, ?2)")?;
    for (id, terms) in rows.iter() {
        ins.execute(params![id, terms])?;
    }
    pending_fts::raise(c, pending, last)?;
    rows.clear();
    Ok(())
}

/// Messages waiting for [`Db::index_deferred`] that make the store thread run it after a job.
pub const DEFER_ROWS: usize = 4096;
/// Messages waiting at most: a batch that brings more indexes them in its own transaction
/// (bounds the memory a huge import holds).
pub const DEFER_MAX: usize = 4 * DEFER_ROWS;
/// How long the store thread waits for another job before indexing the messages that wait.
pub const DEFER_IDLE: std::time::Duration = std::time::Duration::from_millis(10);

/// The value stored for a message's text: its zstd frame (a BLOB) when it has one, else the
/// text; `None` stores the empty text (the text lives in `payloads`).
fn stored_text(m: Option<&Encoded>) -> rusqlite::types::ToSqlOutput<'_> {
    use rusqlite::types::{ToSqlOutput, ValueRef};
    ToSqlOutput::Borrowed(match m {
        None => ValueRef::Text(b""),
        Some(m) => match &m.packed {
            Some(frame) => ValueRef::Blob(frame),
            None => ValueRef::Text(m.text.as_bytes()),
        },
    })
}

/// Points message `id` at the payload holding `text`, storing the text when no payload has
/// it yet. Returns the bytes written (0 when the content was already stored).
fn store_payload(c: &Connection, id: i64, m: &Encoded) -> Result<u64> {
    use sha2::{Digest, Sha256};
    let text = &m.text;
    let hash = &Sha256::digest(text.as_bytes())[..16];
    let existing: Option<i64> = c
        .prepare_cached("UPDATE payloads SET refs = refs + 1 WHERE hash = ?1 RETURNING id")?
        .query_row([hash], |r| r.get(0))
        .optional()?;
    let (pid, written) = match existing {
        Some(pid) => (pid, 0),
        None => {
            c.prepare_cached(
                "INSERT INTO payloads(hash, bytes, refs, created_at, text) VALUES(?1, ?2, 1, ?3, ?4)",
            )?
            .execute(params![hash, text.len() as i64, now_ms(), stored_text(Some(m))])?;
            (
                c.last_insert_rowid(),
                m.packed.as_ref().map_or(text.len(), Vec::len) as u64,
            )
        }
    };
    c.prepare_cached("UPDATE messages SET payload = ?2 WHERE id = ?1")?
        .execute(params![id, pid])?;
    Ok(written)
}

pub(crate) fn get_conv(c: &Connection, key: &ConvKey) -> rusqlite::Result<Option<ConvRow>> {
    c.prepare_cached(&format!(
        "SELECT {CONV_COLS} FROM conversations WHERE agent_id = ?1 AND session_key = ?2 AND active = 1"
    ))?
    .query_row(params![key.agent_id, key.session_key], conv_row)
    .optional()
}

pub(crate) fn get_or_create_conv(c: &Connection, key: &ConvKey) -> Result<ConvRow> {
    if let Some(row) = get_conv(c, key)? {
        return Ok(row);
    }
    c.execute(
        "INSERT INTO conversations(agent_id, session_key, active, created_at) VALUES(?1, ?2, 1, ?3)",
        params![key.agent_id, key.session_key, now_ms()],
    )?;
    get_conv(c, key)?
        .ok_or_else(|| LosslessError::Corrupt("conversation vanished after insert".into()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::core::recall::{GrepQuery, Scope};
    use clawctx_protocol::AgentMessage;

    fn key() -> ConvKey {
        ConvKey::from_host(Some("agent:main:t"), "s")
    }

    fn encoded(word: &str, t: i64) -> Encoded {
        crate::core::codec::encode(
            &AgentMessage::user(format!("note {word} here")).with_timestamp(t),
        )
        .unwrap()
    }

    fn open(path: &std::path::Path) -> Db {
        Db::new(
            super::super::schema::open(path, 1_000).unwrap(),
            path,
            1_000,
            None,
        )
    }

    fn found(db: &Db, word: &str) -> usize {
        let q = GrepQuery::new(word, Scope::Session(key()));
        db.read(|db| db.grep(&q)).unwrap().hits.len()
    }

    /// A panic inside a large batch's ingest transaction, while an earlier batch's terms wait
    /// in memory (taken out of `deferred` by the transaction): after the recovery the waiting
    /// messages are found (indexed from their text), also once the pending index moved to the
    /// file's; the rolled-back batch is not there.
    #[test]
    fn a_panic_inside_an_ingest_loses_no_waiting_message() {
        let dir = tempfile::tempdir().unwrap();
        let mut db = open(&dir.path().join("p.db"));
        let first: Vec<Encoded> = (0..70).map(|i| encoded(&format!("first{i}x"), i)).collect();
        db.ingest(&key(), &first).unwrap();
        assert_eq!(db.deferred_rows(), 70, "the batch's terms wait in memory");
        let second: Vec<Encoded> = (0..70)
            .map(|i| encoded(&format!("second{i}x"), 100 + i))
            .collect();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            db.append(&key(), second.len(), |app| {
                app.push(&second[0])?;
                panic!("boom inside the transaction")
            })
        }));
        assert!(panicked.is_err());
        db.recover_after_panic();
        assert!(db.conn.is_autocommit());
        for w in ["first0x", "first69x"] {
            assert_eq!(found(&db, w), 1, "{w}");
        }
        assert_eq!(found(&db, "second0x"), 0, "rolled back");
        db.flush_pending();
        let upto: i64 = db
            .conn
            .query_row("SELECT upto FROM fts_state", [], |r| r.get(0))
            .unwrap();
        assert_eq!(upto, 70, "the file's index holds them now");
        for w in ["first0x", "first69x"] {
            assert_eq!(found(&db, w), 1, "{w}");
        }
        db.ingest(&key(), &second).unwrap();
        assert_eq!(found(&db, "second69x"), 1);
    }

    /// A connection replaced mid-transaction: what the transaction wrote is gone, the new
    /// connection writes, and the messages the old one had in its (temporary) pending index
    /// are found through the new one.
    #[test]
    fn a_reopened_connection_drops_the_open_transaction_and_finds_every_message() {
        let dir = tempfile::tempdir().unwrap();
        let mut db = open(&dir.path().join("r.db"));
        for t in 0..3 {
            db.ingest(&key(), &[encoded(&format!("turn{t}x"), t)])
                .unwrap();
        }
        assert_eq!(found(&db, "turn1x"), 1);
        db.conn
            .execute_batch(
                "BEGIN IMMEDIATE; INSERT INTO conversations(agent_id, session_key, active, created_at) VALUES('main', 'ghost', 1, 0);",
            )
            .unwrap();
        db.reopen().unwrap();
        assert!(db.conn.is_autocommit());
        let ghost = db
            .conversation(&ConvKey::from_host(Some("ghost"), "ghost"))
            .unwrap();
        assert!(ghost.is_none(), "the open transaction was rolled back");
        for w in ["turn0x", "turn2x"] {
            assert_eq!(found(&db, w), 1, "{w}");
        }
        db.ingest(&key(), &[encoded("later", 10)]).unwrap();
        assert_eq!(found(&db, "later"), 1);
        assert_eq!(db.conversation(&key()).unwrap().unwrap().msg_count, 4);
    }
}
