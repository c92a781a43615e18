//! Moving a SQLite store into PostgreSQL (`clawctx lcm migrate --to postgres://…`).
//!
//! [`sqlite_to_postgres`] copies every conversation, message, summary, DAG link, frontier item,
//! summarizer guard state, committed turn key, embedding model and stored vector from a
//! [`LosslessStore`] into an empty [`PgStore`], keeping every id, so `msg_N` / `sum_N`
//! references (in summaries, in the model's context, in an operator's notes) mean the same rows
//! afterwards, and semantic recall on the new store does not embed the history again (the
//! models' progress is copied with their vectors).
//!
//! - **Nothing is merged.** A target that holds any row already is refused, naming the target
//!   without its password.
//! - **All or nothing.** Every row is written inside one PostgreSQL transaction, which also
//!   locks the target's conversations table against writers: a failure, a failed check or a
//!   killed process leaves the target as it was.
//! - **Checked before commit.** Per table, the row count and a few column sums the target
//!   holds must equal what was read from the source; the source's counts are read again at the
//!   end, so a store written during the copy (a gateway still running) fails instead of being
//!   copied half. A mismatch rolls back and names the table.
//! - **Bounded memory.** The source is read on its read thread in pages by primary key, and
//!   each page is written as one multi-row `INSERT … SELECT FROM unnest(…)` statement.
//! - **What changes form.** SQLite keeps large texts compressed, large payloads once per
//!   content and shared skeletons in tables of their own; PostgreSQL keeps each message's text
//!   and skeleton in its row. Texts are read resolved through `message_rows`; a message's
//!   skeleton is written in the canonical form PostgreSQL's own ingest writes (the message is
//!   decoded and encoded again; a message that does not decode is copied verbatim and
//!   counted). The full-text `terms` are made from the texts with
//!   [`crate::core::terms::index_terms`], as the PostgreSQL store does.
//! - **Ids continue.** Every `bigserial` sequence is set to its table's largest id, so rows
//!   written after the migration get fresh ids.
//!
//! A dry run (`apply = false`) reads and converts everything, checks that the target is
//! reachable and empty, and writes nothing.

use async_trait::async_trait;
use deadpool_postgres::Transaction;
use serde::Serialize;

use crate::core::codec;
use crate::core::terms::index_terms;
use crate::error::{LosslessError, Result};
use crate::pg::PgStore;
use crate::sqlite::{Db, LosslessStore};

/// Rows a page of a small-row table holds.
const PAGE: usize = 5_000;
/// Rows a page of messages or summaries holds (their texts may be large).
const TEXT_PAGE: usize = 1_000;
/// Text bytes one insert statement of messages or summaries carries at most (a page is split
/// into several statements beyond this).
const STATEMENT_BYTES: usize = 16 << 20;

/// The tables copied, in the order they are written (parents before children).
pub const TABLES: &[&str] = &[
    "conversations",
    "messages",
    "summaries",
    "summary_children",
    "frontier",
    "guard_state",
    "turn_commits",
    "embed_models",
    "vectors",
];

/// What happened to one table.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TableReport {
    /// The table.
    pub table: String,
    /// Rows read from the SQLite store.
    pub read: u64,
    /// Rows written to PostgreSQL (0 in a dry run).
    pub written: u64,
    /// The target's count and column sums equal the source's (false in a dry run).
    pub verified: bool,
}

/// What [`sqlite_to_postgres`] did (or, in a dry run, would do).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MigrateReport {
    /// Nothing was written.
    pub dry_run: bool,
    /// The SQLite file.
    pub source: String,
    /// The PostgreSQL database, without its password.
    pub target: String,
    /// Per table, in [`TABLES`] order.
    pub tables: Vec<TableReport>,
    /// Messages whose stored form did not decode: copied verbatim (text and skeleton as
    /// stored). `lcm doctor` on the source names them.
    pub messages_copied_verbatim: u64,
    /// The id the next row of each table with a sequence gets (empty in a dry run).
    pub next_ids: std::collections::BTreeMap<String, i64>,
}

impl MigrateReport {
    /// The report of `table`.
    pub fn table(&self, table: &str) -> Option<&TableReport> {
        self.tables.iter().find(|t| t.table == table)
    }
}

/// Copies `source` into the empty `target` (see the module header); with `apply = false`
/// reads and checks everything and writes nothing.
///
/// Errors: [`LosslessError::Refused`] when the target holds rows already (nothing merged,
/// nothing written); [`LosslessError::Postgres`] naming the table when a check fails after
/// the copy (rolled back); whatever reading or writing fails with, naming the table.
pub async fn sqlite_to_postgres(
    source: &LosslessStore,
    target: &PgStore,
    apply: bool,
) -> Result<MigrateReport> {
    let shown = target.target().redacted();
    let mut report = MigrateReport {
        dry_run: !apply,
        source: source.path().display().to_string(),
        target: shown.clone(),
        ..Default::default()
    };
    let mut client = target.client().await?;
    let tx = client.transaction().await?;
    if apply {
        // Writers wait (readers do not) until the copy commits or rolls back: a gateway
        // already started on the target cannot create a conversation with a copied id.
        tx.batch_execute("LOCK TABLE conversations IN EXCLUSIVE MODE")
            .await
            .map_err(|e| in_table("conversations", "locking", &LosslessError::from(e)))?;
    }
    refuse_unless_empty(&tx, &shown).await?;
    let out = apply.then_some(&tx);
    let mut sums = Vec::with_capacity(TABLES.len());
    sums.push(copy::<ConvIn>(source, out, &mut report).await?);
    sums.push(copy::<MsgIn>(source, out, &mut report).await?);
    sums.push(copy::<SumIn>(source, out, &mut report).await?);
    sums.push(copy::<ChildIn>(source, out, &mut report).await?);
    sums.push(copy::<FrontIn>(source, out, &mut report).await?);
    sums.push(copy::<GuardIn>(source, out, &mut report).await?);
    sums.push(copy::<TurnIn>(source, out, &mut report).await?);
    sums.push(copy::<ModelIn>(source, out, &mut report).await?);
    sums.push(copy::<VectorIn>(source, out, &mut report).await?);
    source_unchanged(source, &report).await?;
    if !apply {
        tx.rollback().await?;
        return Ok(report);
    }
    for (t, (check, want)) in report.tables.iter_mut().zip(&sums) {
        let got = target_sums(&tx, &t.table, check).await?;
        if got != *want {
            // Dropping the transaction rolls it back; say so explicitly all the same.
            let _ = tx.rollback().await;
            return Err(LosslessError::Postgres(format!(
                "migration check failed for table {}: the source has {} rows (sums of {check}: {:?}), \
                 {shown} would hold {} rows (sums {:?}); rolled back, nothing was written",
                t.table, want.rows, want.sums, got.rows, got.sums
            )));
        }
        t.verified = true;
    }
    for (table, id) in [
        ("conversations", "id"),
        ("messages", "id"),
        ("summaries", "id"),
        ("embed_models", "id"),
        ("vectors", "vid"),
    ] {
        let next: i64 = tx
            .query_one(
                &format!(
                    "SELECT setval(pg_get_serial_sequence('{table}', '{id}'), greatest(max({id}), 1), max({id}) IS NOT NULL)
                       + (max({id}) IS NOT NULL)::int
                     FROM {table}"
                ),
                &[],
            )
            .await
            .map_err(|e| in_table(table, "setting the id sequence of", &LosslessError::from(e)))?
            .try_get(0)?;
        report.next_ids.insert(table.to_string(), next);
    }
    tx.commit().await?;
    Ok(report)
}

/// [`LosslessError::Refused`] unless every copied table of the target is empty.
async fn refuse_unless_empty(tx: &Transaction<'_>, shown: &str) -> Result<()> {
    let mut held = Vec::new();
    for table in TABLES {
        let n: i64 = tx
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await?
            .try_get(0)?;
        if n > 0 {
            held.push(format!("{n} {table}"));
        }
    }
    if held.is_empty() {
        return Ok(());
    }
    Err(LosslessError::Refused {
        path: shown.to_string(),
        reason: format!(
            "the target already holds {}; migrate copies into an empty database only and merges nothing \
             (use a new database, or drop this one's rows first)",
            held.join(", ")
        ),
    })
}

/// A row count and column sums, compared between source and target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Sums {
    rows: u64,
    sums: [i128; 3],
}

impl Sums {
    fn add(&mut self, s: [i128; 3]) {
        self.rows += 1;
        for (a, b) in self.sums.iter_mut().zip(s) {
            *a += b;
        }
    }
}

/// The count and sums of `check` (three SQL expressions) the target's `table` holds.
async fn target_sums(tx: &Transaction<'_>, table: &str, check: &str) -> Result<Sums> {
    let cols: Vec<String> = check
        .split(", ")
        .map(|c| format!("coalesce(sum({c}), 0)::text"))
        .collect();
    let row = tx
        .query_one(
            &format!("SELECT count(*), {} FROM {table}", cols.join(", ")),
            &[],
        )
        .await
        .map_err(|e| in_table(table, "checking", &LosslessError::from(e)))?;
    let mut out = Sums {
        rows: row.try_get::<_, i64>(0)?.max(0) as u64,
        sums: [0; 3],
    };
    for (i, s) in out.sums.iter_mut().enumerate() {
        let text: String = row.try_get(i + 1)?;
        *s = text.parse().map_err(|_| {
            LosslessError::Postgres(format!("checking {table}: unexpected sum {text:?}"))
        })?;
    }
    Ok(out)
}

/// Fails when the source's row counts moved since they were read (it was written during the
/// copy).
async fn source_unchanged(source: &LosslessStore, report: &MigrateReport) -> Result<()> {
    let now = source
        .call_read(|db| {
            let mut out = Vec::with_capacity(TABLES.len());
            for table in TABLES {
                let n: i64 =
                    db.conn
                        .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))?;
                out.push(n.max(0) as u64);
            }
            Ok(out)
        })
        .await?;
    for (t, n) in report.tables.iter().zip(now) {
        if t.read != n {
            return Err(LosslessError::InvalidInput(format!(
                "the source {} changed during the migration ({} now has {n} rows, {} were read); \
                 stop every process using it and run the migration again (nothing was written)",
                report.source, t.table, t.read
            )));
        }
    }
    Ok(())
}

/// Names the table (and what was being done) in an error.
fn in_table(table: &str, doing: &str, e: &LosslessError) -> LosslessError {
    LosslessError::Postgres(format!("{doing} table {table}: {e}"))
}

/// One copied table's rows: how a page is read from SQLite and written to PostgreSQL.
#[async_trait]
trait Copied: Sized + Send + Sync + 'static {
    /// The table.
    const TABLE: &'static str;
    /// Rows a page holds.
    const PAGE: usize = PAGE;
    /// Three SQL expressions over a row whose sums (with the count) are compared.
    const CHECK: &'static str;
    /// The page key (the primary key).
    type Key: Clone + Send + 'static;
    /// The key before the first row.
    fn first() -> Self::Key;
    /// This row's key.
    fn key(&self) -> Self::Key;
    /// Up to `limit` rows after `after`, in key order.
    fn read(db: &Db, after: &Self::Key, limit: usize) -> Result<Vec<Self>>;
    /// The values of [`Self::CHECK`] for this row.
    fn sums(&self) -> [i128; 3];
    /// Turns a page read into the rows to write (off the async runtime).
    fn convert(rows: Vec<Self>, _verbatim: &mut u64) -> Vec<Self> {
        rows
    }
    /// Writes `rows`, returning how many were inserted.
    async fn write(tx: &Transaction<'_>, rows: &[Self]) -> Result<u64>;
}

/// Copies table `T` page by page (writing when `out` is given) and adds its report.
async fn copy<T: Copied>(
    source: &LosslessStore,
    out: Option<&Transaction<'_>>,
    report: &mut MigrateReport,
) -> Result<(&'static str, Sums)> {
    let mut t = TableReport {
        table: T::TABLE.to_string(),
        ..Default::default()
    };
    let mut sums = Sums::default();
    let mut after = T::first();
    loop {
        let from = after.clone();
        let page = source
            .call_read(move |db| T::read(db, &from, T::PAGE))
            .await
            .map_err(|e| in_source(T::TABLE, &e))?;
        let Some(last) = page.last() else {
            break;
        };
        after = last.key();
        let full = page.len() == T::PAGE;
        let (rows, verbatim) = tokio::task::spawn_blocking(move || {
            let mut verbatim = 0;
            let rows = T::convert(page, &mut verbatim);
            (rows, verbatim)
        })
        .await?;
        report.messages_copied_verbatim += verbatim;
        for r in &rows {
            sums.add(r.sums());
        }
        t.read += rows.len() as u64;
        if let Some(tx) = out {
            t.written += T::write(tx, &rows)
                .await
                .map_err(|e| in_table(T::TABLE, "writing", &e))?;
        }
        if !full {
            break;
        }
    }
    report.tables.push(t);
    Ok((T::CHECK, sums))
}

/// Names the table in an error reading the source.
fn in_source(table: &str, e: &LosslessError) -> LosslessError {
    match e {
        LosslessError::Sqlite(_) | LosslessError::Corrupt(_) => {
            LosslessError::Corrupt(format!("reading table {table} of the source: {e}"))
        }
        _ => LosslessError::InvalidInput(format!("reading table {table} of the source: {e}")),
    }
}

/// Text bytes in a string sum (PostgreSQL's `octet_length`).
fn bytes(s: &str) -> i128 {
    s.len() as i128
}

/// Splits `rows` into runs whose texts stay under [`STATEMENT_BYTES`] (at least one row each).
fn by_bytes<T>(rows: &[T], size: impl Fn(&T) -> usize) -> Vec<&[T]> {
    let mut out = Vec::new();
    let (mut start, mut acc) = (0, 0);
    for (i, r) in rows.iter().enumerate() {
        let n = size(r);
        if i > start && acc + n > STATEMENT_BYTES {
            out.push(&rows[start..i]);
            start = i;
            acc = 0;
        }
        acc += n;
    }
    if start < rows.len() {
        out.push(&rows[start..]);
    }
    out
}

struct ConvIn {
    id: i64,
    agent_id: String,
    session_key: String,
    active: bool,
    created_at: i64,
    /// next_seq, next_ord, msg_count, msg_tokens, raw_bytes, frontier_tokens,
    /// frontier_items, epoch.
    n: [i64; 8],
}

#[async_trait]
impl Copied for ConvIn {
    const TABLE: &'static str = "conversations";
    const CHECK: &'static str = "id, msg_tokens + frontier_tokens, next_seq + next_ord + epoch";
    type Key = i64;
    fn first() -> i64 {
        i64::MIN
    }
    fn key(&self) -> i64 {
        self.id
    }
    fn read(db: &Db, after: &i64, limit: usize) -> Result<Vec<Self>> {
        let mut st = db.conn.prepare(
            "SELECT id, agent_id, session_key, active, created_at, next_seq, next_ord, msg_count,
                    msg_tokens, raw_bytes, frontier_tokens, frontier_items, epoch
             FROM conversations WHERE id > ?1 ORDER BY id LIMIT ?2",
        )?;
        let rows = st.query_map(rusqlite::params![after, limit as i64], |r| {
            let mut n = [0i64; 8];
            for (i, v) in n.iter_mut().enumerate() {
                *v = r.get(5 + i)?;
            }
            Ok(ConvIn {
                id: r.get(0)?,
                agent_id: r.get(1)?,
                session_key: r.get(2)?,
                active: r.get::<_, i64>(3)? != 0,
                created_at: r.get(4)?,
                n,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }
    fn sums(&self) -> [i128; 3] {
        let [next_seq, next_ord, _, msg_tokens, _, frontier_tokens, _, epoch] = self.n;
        [
            self.id.into(),
            i128::from(msg_tokens) + i128::from(frontier_tokens),
            i128::from(next_seq) + i128::from(next_ord) + i128::from(epoch),
        ]
    }
    async fn write(tx: &Transaction<'_>, rows: &[Self]) -> Result<u64> {
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        let agents: Vec<&str> = rows.iter().map(|r| r.agent_id.as_str()).collect();
        let keys: Vec<&str> = rows.iter().map(|r| r.session_key.as_str()).collect();
        let active: Vec<bool> = rows.iter().map(|r| r.active).collect();
        let created: Vec<i64> = rows.iter().map(|r| r.created_at).collect();
        let col = |i: usize| rows.iter().map(|r| r.n[i]).collect::<Vec<i64>>();
        let (c0, c1, c2, c3, c4, c5, c6, c7) = (
            col(0),
            col(1),
            col(2),
            col(3),
            col(4),
            col(5),
            col(6),
            col(7),
        );
        Ok(tx
            .execute(
                "INSERT INTO conversations(id, agent_id, session_key, active, created_at, next_seq, next_ord,
                   msg_count, msg_tokens, raw_bytes, frontier_tokens, frontier_items, epoch)
                 SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::boolean[], $5::bigint[],
                   $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[],
                   $12::bigint[], $13::bigint[])",
                &[
                    &ids, &agents, &keys, &active, &created, &c0, &c1, &c2, &c3, &c4, &c5, &c6, &c7,
                ],
            )
            .await?)
    }
}

struct MsgIn {
    id: i64,
    conv_id: i64,
    seq: i64,
    role: i64,
    tokens: i64,
    ts: Option<i64>,
    hash: i64,
    n_calls: i64,
    tool_call_id: Option<String>,
    skeleton: Option<String>,
    text: String,
    /// Filled by `convert`.
    terms: String,
}

#[async_trait]
impl Copied for MsgIn {
    const TABLE: &'static str = "messages";
    const PAGE: usize = TEXT_PAGE;
    const CHECK: &'static str = "id, tokens + seq, octet_length(text)";
    type Key = i64;
    fn first() -> i64 {
        i64::MIN
    }
    fn key(&self) -> i64 {
        self.id
    }
    fn read(db: &Db, after: &i64, limit: usize) -> Result<Vec<Self>> {
        let mut st = db.conn.prepare(
            "SELECT id, conv_id, seq, role, tokens, ts, hash, n_calls, tool_call_id, skeleton, text
             FROM message_rows WHERE id > ?1 ORDER BY id LIMIT ?2",
        )?;
        let rows = st.query_map(rusqlite::params![after, limit as i64], |r| {
            Ok(MsgIn {
                id: r.get(0)?,
                conv_id: r.get(1)?,
                seq: r.get(2)?,
                role: r.get(3)?,
                tokens: r.get(4)?,
                ts: r.get(5)?,
                hash: r.get(6)?,
                n_calls: r.get(7)?,
                tool_call_id: r.get(8)?,
                skeleton: r.get(9)?,
                text: r.get(10)?,
                terms: String::new(),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }
    fn sums(&self) -> [i128; 3] {
        [
            self.id.into(),
            i128::from(self.tokens) + i128::from(self.seq),
            bytes(&self.text),
        ]
    }
    fn convert(mut rows: Vec<Self>, verbatim: &mut u64) -> Vec<Self> {
        for m in &mut rows {
            // The stored skeleton may be the shared form (its last length replaced by "the
            // rest"); PostgreSQL rows hold the canonical one its ingest writes.
            let canonical = codec::decode(m.role, &m.text, m.skeleton.as_deref(), m.ts)
                .and_then(|msg| codec::encode(&msg));
            match canonical {
                Ok(e) if e.text == m.text => {
                    m.skeleton = e.skeleton;
                    m.terms = e.fts;
                }
                _ => {
                    *verbatim += 1;
                    m.terms = index_terms(&m.text);
                }
            }
        }
        rows
    }
    async fn write(tx: &Transaction<'_>, rows: &[Self]) -> Result<u64> {
        let mut n = 0;
        for part in by_bytes(rows, |m| m.text.len() + m.terms.len()) {
            let ids: Vec<i64> = part.iter().map(|m| m.id).collect();
            let convs: Vec<i64> = part.iter().map(|m| m.conv_id).collect();
            let seqs: Vec<i64> = part.iter().map(|m| m.seq).collect();
            let roles: Vec<i16> = part.iter().map(|m| m.role as i16).collect();
            let tokens: Vec<i64> = part.iter().map(|m| m.tokens).collect();
            let ts: Vec<Option<i64>> = part.iter().map(|m| m.ts).collect();
            let hashes: Vec<i64> = part.iter().map(|m| m.hash).collect();
            let calls: Vec<i32> = part.iter().map(|m| m.n_calls as i32).collect();
            let call_ids: Vec<Option<&str>> =
                part.iter().map(|m| m.tool_call_id.as_deref()).collect();
            let skeletons: Vec<Option<&str>> = part.iter().map(|m| m.skeleton.as_deref()).collect();
            let texts: Vec<&str> = part.iter().map(|m| m.text.as_str()).collect();
            let terms: Vec<&str> = part.iter().map(|m| m.terms.as_str()).collect();
            n += tx
                .execute(
                    "INSERT INTO messages(id, conv_id, seq, role, tokens, ts, hash, n_calls, tool_call_id, skeleton, text, terms)
                     SELECT t.id, t.conv, t.seq, t.role, t.tokens, t.ts, t.hash, t.calls, t.call_id, t.skeleton, t.text,
                            array_to_tsvector(string_to_array(t.terms, ' '))
                     FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::smallint[], $5::bigint[], $6::bigint[],
                                 $7::bigint[], $8::int[], $9::text[], $10::text[], $11::text[], $12::text[])
                          AS t(id, conv, seq, role, tokens, ts, hash, calls, call_id, skeleton, text, terms)",
                    &[
                        &ids, &convs, &seqs, &roles, &tokens, &ts, &hashes, &calls, &call_ids,
                        &skeletons, &texts, &terms,
                    ],
                )
                .await?;
        }
        Ok(n)
    }
}

struct SumIn {
    id: i64,
    conv_id: i64,
    depth: i64,
    tokens: i64,
    source_tokens: i64,
    first_seq: i64,
    last_seq: i64,
    from_ts: Option<i64>,
    to_ts: Option<i64>,
    summarizer: String,
    created_at: i64,
    text: String,
}

#[async_trait]
impl Copied for SumIn {
    const TABLE: &'static str = "summaries";
    const PAGE: usize = TEXT_PAGE;
    const CHECK: &'static str = "id, tokens + source_tokens + depth, octet_length(text)";
    type Key = i64;
    fn first() -> i64 {
        i64::MIN
    }
    fn key(&self) -> i64 {
        self.id
    }
    fn read(db: &Db, after: &i64, limit: usize) -> Result<Vec<Self>> {
        let mut st = db.conn.prepare(
            "SELECT id, conv_id, depth, tokens, source_tokens, first_seq, last_seq, from_ts, to_ts,
                    summarizer, created_at, text
             FROM summaries WHERE id > ?1 ORDER BY id LIMIT ?2",
        )?;
        let rows = st.query_map(rusqlite::params![after, limit as i64], |r| {
            Ok(SumIn {
                id: r.get(0)?,
                conv_id: r.get(1)?,
                depth: r.get(2)?,
                tokens: r.get(3)?,
                source_tokens: r.get(4)?,
                first_seq: r.get(5)?,
                last_seq: r.get(6)?,
                from_ts: r.get(7)?,
                to_ts: r.get(8)?,
                summarizer: r.get(9)?,
                created_at: r.get(10)?,
                text: r.get(11)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }
    fn sums(&self) -> [i128; 3] {
        [
            self.id.into(),
            i128::from(self.tokens) + i128::from(self.source_tokens) + i128::from(self.depth),
            bytes(&self.text),
        ]
    }
    async fn write(tx: &Transaction<'_>, rows: &[Self]) -> Result<u64> {
        let mut n = 0;
        for part in by_bytes(rows, |s| 2 * s.text.len()) {
            let ids: Vec<i64> = part.iter().map(|s| s.id).collect();
            let convs: Vec<i64> = part.iter().map(|s| s.conv_id).collect();
            let depths: Vec<i32> = part.iter().map(|s| s.depth as i32).collect();
            let tokens: Vec<i64> = part.iter().map(|s| s.tokens).collect();
            let source: Vec<i64> = part.iter().map(|s| s.source_tokens).collect();
            let first: Vec<i64> = part.iter().map(|s| s.first_seq).collect();
            let last: Vec<i64> = part.iter().map(|s| s.last_seq).collect();
            let from: Vec<Option<i64>> = part.iter().map(|s| s.from_ts).collect();
            let to: Vec<Option<i64>> = part.iter().map(|s| s.to_ts).collect();
            let by: Vec<&str> = part.iter().map(|s| s.summarizer.as_str()).collect();
            let created: Vec<i64> = part.iter().map(|s| s.created_at).collect();
            let texts: Vec<&str> = part.iter().map(|s| s.text.as_str()).collect();
            let terms: Vec<String> = part.iter().map(|s| index_terms(&s.text)).collect();
            n += tx
                .execute(
                    "INSERT INTO summaries(id, conv_id, depth, tokens, source_tokens, first_seq, last_seq, from_ts, to_ts,
                                           summarizer, created_at, text, terms)
                     SELECT t.id, t.conv, t.depth, t.tokens, t.source, t.first, t.last, t.from_ts, t.to_ts, t.by,
                            t.created, t.text, array_to_tsvector(string_to_array(t.terms, ' '))
                     FROM unnest($1::bigint[], $2::bigint[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[],
                                 $7::bigint[], $8::bigint[], $9::bigint[], $10::text[], $11::bigint[], $12::text[],
                                 $13::text[])
                          AS t(id, conv, depth, tokens, source, first, last, from_ts, to_ts, by, created, text, terms)",
                    &[
                        &ids, &convs, &depths, &tokens, &source, &first, &last, &from, &to, &by,
                        &created, &texts, &terms,
                    ],
                )
                .await?;
        }
        Ok(n)
    }
}

struct ChildIn {
    summary_id: i64,
    ord: i64,
    kind: i64,
    child_id: i64,
}

#[async_trait]
impl Copied for ChildIn {
    const TABLE: &'static str = "summary_children";
    const CHECK: &'static str = "summary_id, child_id, ord + kind";
    type Key = (i64, i64);
    fn first() -> (i64, i64) {
        (i64::MIN, i64::MIN)
    }
    fn key(&self) -> (i64, i64) {
        (self.summary_id, self.ord)
    }
    fn read(db: &Db, after: &(i64, i64), limit: usize) -> Result<Vec<Self>> {
        let mut st = db.conn.prepare(
            "SELECT summary_id, ord, kind, child_id FROM summary_children
             WHERE (summary_id, ord) > (?1, ?2) ORDER BY summary_id, ord LIMIT ?3",
        )?;
        let rows = st.query_map(rusqlite::params![after.0, after.1, limit as i64], |r| {
            Ok(ChildIn {
                summary_id: r.get(0)?,
                ord: r.get(1)?,
                kind: r.get(2)?,
                child_id: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }
    fn sums(&self) -> [i128; 3] {
        [
            self.summary_id.into(),
            self.child_id.into(),
            i128::from(self.ord) + i128::from(self.kind),
        ]
    }
    async fn write(tx: &Transaction<'_>, rows: &[Self]) -> Result<u64> {
        let sids: Vec<i64> = rows.iter().map(|r| r.summary_id).collect();
        let ords: Vec<i32> = rows.iter().map(|r| r.ord as i32).collect();
        let kinds: Vec<i16> = rows.iter().map(|r| r.kind as i16).collect();
        let children: Vec<i64> = rows.iter().map(|r| r.child_id).collect();
        Ok(tx
            .execute(
                "INSERT INTO summary_children(summary_id, ord, kind, child_id)
                 SELECT * FROM unnest($1::bigint[], $2::int[], $3::smallint[], $4::bigint[])",
                &[&sids, &ords, &kinds, &children],
            )
            .await?)
    }
}

struct FrontIn {
    conv_id: i64,
    ord: i64,
    kind: i64,
    item_id: i64,
    tokens: i64,
}

#[async_trait]
impl Copied for FrontIn {
    const TABLE: &'static str = "frontier";
    const CHECK: &'static str = "item_id, tokens, ord + kind + conv_id";
    type Key = (i64, i64);
    fn first() -> (i64, i64) {
        (i64::MIN, i64::MIN)
    }
    fn key(&self) -> (i64, i64) {
        (self.conv_id, self.ord)
    }
    fn read(db: &Db, after: &(i64, i64), limit: usize) -> Result<Vec<Self>> {
        let mut st = db.conn.prepare(
            "SELECT conv_id, ord, kind, item_id, tokens FROM frontier
             WHERE (conv_id, ord) > (?1, ?2) ORDER BY conv_id, ord LIMIT ?3",
        )?;
        let rows = st.query_map(rusqlite::params![after.0, after.1, limit as i64], |r| {
            Ok(FrontIn {
                conv_id: r.get(0)?,
                ord: r.get(1)?,
                kind: r.get(2)?,
                item_id: r.get(3)?,
                tokens: r.get(4)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }
    fn sums(&self) -> [i128; 3] {
        [
            self.item_id.into(),
            self.tokens.into(),
            i128::from(self.ord) + i128::from(self.kind) + i128::from(self.conv_id),
        ]
    }
    async fn write(tx: &Transaction<'_>, rows: &[Self]) -> Result<u64> {
        let convs: Vec<i64> = rows.iter().map(|r| r.conv_id).collect();
        let ords: Vec<i64> = rows.iter().map(|r| r.ord).collect();
        let kinds: Vec<i16> = rows.iter().map(|r| r.kind as i16).collect();
        let items: Vec<i64> = rows.iter().map(|r| r.item_id).collect();
        let tokens: Vec<i64> = rows.iter().map(|r| r.tokens).collect();
        Ok(tx
            .execute(
                "INSERT INTO frontier(conv_id, ord, kind, item_id, tokens)
                 SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::smallint[], $4::bigint[], $5::bigint[])",
                &[&convs, &ords, &kinds, &items, &tokens],
            )
            .await?)
    }
}

struct GuardIn {
    conv_id: i64,
    /// window_start_ms, calls_in_window, consecutive_failures, breaker_open_until_ms,
    /// total_failures.
    n: [i64; 5],
}

#[async_trait]
impl Copied for GuardIn {
    const TABLE: &'static str = "guard_state";
    const CHECK: &'static str =
        "conv_id, calls_in_window + consecutive_failures + total_failures, \
                                 window_start_ms + breaker_open_until_ms";
    type Key = i64;
    fn first() -> i64 {
        i64::MIN
    }
    fn key(&self) -> i64 {
        self.conv_id
    }
    fn read(db: &Db, after: &i64, limit: usize) -> Result<Vec<Self>> {
        let mut st = db.conn.prepare(
            "SELECT conv_id, window_start_ms, calls_in_window, consecutive_failures,
                    breaker_open_until_ms, total_failures
             FROM guard_state WHERE conv_id > ?1 ORDER BY conv_id LIMIT ?2",
        )?;
        let rows = st.query_map(rusqlite::params![after, limit as i64], |r| {
            let mut n = [0i64; 5];
            for (i, v) in n.iter_mut().enumerate() {
                *v = r.get(1 + i)?;
            }
            Ok(GuardIn {
                conv_id: r.get(0)?,
                n,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }
    fn sums(&self) -> [i128; 3] {
        let [window, calls, consecutive, breaker, total] = self.n.map(i128::from);
        [
            self.conv_id.into(),
            calls + consecutive + total,
            window + breaker,
        ]
    }
    async fn write(tx: &Transaction<'_>, rows: &[Self]) -> Result<u64> {
        let convs: Vec<i64> = rows.iter().map(|r| r.conv_id).collect();
        let col = |i: usize| rows.iter().map(|r| r.n[i]).collect::<Vec<i64>>();
        let (c0, c1, c2, c3, c4) = (col(0), col(1), col(2), col(3), col(4));
        Ok(tx
            .execute(
                "INSERT INTO guard_state(conv_id, window_start_ms, calls_in_window, consecutive_failures,
                   breaker_open_until_ms, total_failures)
                 SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[],
                   $6::bigint[])",
                &[&convs, &c0, &c1, &c2, &c3, &c4],
            )
            .await?)
    }
}

struct TurnIn {
    key: String,
    conv_id: i64,
    committed_at: i64,
}

#[async_trait]
impl Copied for TurnIn {
    const TABLE: &'static str = "turn_commits";
    const CHECK: &'static str = "conv_id, committed_at, octet_length(advancement_key)";
    type Key = Option<String>;
    fn first() -> Option<String> {
        None
    }
    fn key(&self) -> Option<String> {
        Some(self.key.clone())
    }
    fn read(db: &Db, after: &Option<String>, limit: usize) -> Result<Vec<Self>> {
        let mut st = db.conn.prepare(
            "SELECT advancement_key, conv_id, committed_at FROM turn_commits
             WHERE ?1 IS NULL OR advancement_key > ?1 ORDER BY advancement_key LIMIT ?2",
        )?;
        let rows = st.query_map(rusqlite::params![after, limit as i64], |r| {
            Ok(TurnIn {
                key: r.get(0)?,
                conv_id: r.get(1)?,
                committed_at: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }
    fn sums(&self) -> [i128; 3] {
        [
            self.conv_id.into(),
            self.committed_at.into(),
            bytes(&self.key),
        ]
    }
    async fn write(tx: &Transaction<'_>, rows: &[Self]) -> Result<u64> {
        let keys: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
        let convs: Vec<i64> = rows.iter().map(|r| r.conv_id).collect();
        let at: Vec<i64> = rows.iter().map(|r| r.committed_at).collect();
        Ok(tx
            .execute(
                "INSERT INTO turn_commits(advancement_key, conv_id, committed_at)
                 SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[])",
                &[&keys, &convs, &at],
            )
            .await?)
    }
}

struct ModelIn {
    id: i64,
    name: String,
    dim: i64,
    msg_done: i64,
    sum_done: i64,
}

#[async_trait]
impl Copied for ModelIn {
    const TABLE: &'static str = "embed_models";
    const CHECK: &'static str = "id, dim + msg_done + sum_done, octet_length(name)";
    type Key = i64;
    fn first() -> i64 {
        i64::MIN
    }
    fn key(&self) -> i64 {
        self.id
    }
    fn read(db: &Db, after: &i64, limit: usize) -> Result<Vec<Self>> {
        let mut st = db.conn.prepare(
            "SELECT id, name, dim, msg_done, sum_done FROM embed_models
             WHERE id > ?1 ORDER BY id LIMIT ?2",
        )?;
        let rows = st.query_map(rusqlite::params![after, limit as i64], |r| {
            Ok(ModelIn {
                id: r.get(0)?,
                name: r.get(1)?,
                dim: r.get(2)?,
                msg_done: r.get(3)?,
                sum_done: r.get(4)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }
    fn sums(&self) -> [i128; 3] {
        [
            self.id.into(),
            i128::from(self.dim) + i128::from(self.msg_done) + i128::from(self.sum_done),
            bytes(&self.name),
        ]
    }
    async fn write(tx: &Transaction<'_>, rows: &[Self]) -> Result<u64> {
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        let dims: Vec<i32> = rows
            .iter()
            .map(|r| i32::try_from(r.dim).unwrap_or(i32::MAX))
            .collect();
        let msgs: Vec<i64> = rows.iter().map(|r| r.msg_done).collect();
        let sums: Vec<i64> = rows.iter().map(|r| r.sum_done).collect();
        Ok(tx
            .execute(
                "INSERT INTO embed_models(id, name, dim, msg_done, sum_done)
                 SELECT * FROM unnest($1::bigint[], $2::text[], $3::integer[], $4::bigint[], $5::bigint[])",
                &[&ids, &names, &dims, &msgs, &sums],
            )
            .await?)
    }
}

/// A stored vector: `(vid, model, kind, item id, conversation, tokens)`, its scale and bytes.
struct VectorIn {
    n: [i64; 6],
    scale: f32,
    vec: Vec<u8>,
}

#[async_trait]
impl Copied for VectorIn {
    const TABLE: &'static str = "vectors";
    const CHECK: &'static str = "vid, model + kind + item_id + conv_id + tokens, octet_length(vec)";
    type Key = i64;
    fn first() -> i64 {
        i64::MIN
    }
    fn key(&self) -> i64 {
        self.n[0]
    }
    fn read(db: &Db, after: &i64, limit: usize) -> Result<Vec<Self>> {
        let mut st = db.conn.prepare(
            "SELECT vid, model, kind, item_id, conv_id, tokens, scale, vec FROM vectors
             WHERE vid > ?1 ORDER BY vid LIMIT ?2",
        )?;
        let rows = st.query_map(rusqlite::params![after, limit as i64], |r| {
            let mut n = [0i64; 6];
            for (i, v) in n.iter_mut().enumerate() {
                *v = r.get(i)?;
            }
            Ok(VectorIn {
                n,
                scale: r.get::<_, f64>(6)? as f32,
                vec: r.get(7)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }
    fn sums(&self) -> [i128; 3] {
        let [vid, model, kind, item, conv, tokens] = self.n.map(i128::from);
        [
            vid,
            model + kind + item + conv + tokens,
            self.vec.len() as i128,
        ]
    }
    async fn write(tx: &Transaction<'_>, rows: &[Self]) -> Result<u64> {
        let col = |i: usize| rows.iter().map(|r| r.n[i]).collect::<Vec<i64>>();
        let kinds: Vec<i16> = rows
            .iter()
            .map(|r| i16::try_from(r.n[2]).unwrap_or(i16::MAX))
            .collect();
        let scales: Vec<f32> = rows.iter().map(|r| r.scale).collect();
        let vecs: Vec<&[u8]> = rows.iter().map(|r| r.vec.as_slice()).collect();
        let (vids, models, items, convs, tokens) = (col(0), col(1), col(3), col(4), col(5));
        Ok(tx
            .execute(
                "INSERT INTO vectors(vid, model, kind, item_id, conv_id, tokens, scale, vec)
                 SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::smallint[], $4::bigint[],
                   $5::bigint[], $6::bigint[], $7::real[], $8::bytea[])",
                &[
                    &vids, &models, &kinds, &items, &convs, &tokens, &scales, &vecs,
                ],
            )
            .await?)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_split_by_text_size() {
        let sizes = [
            STATEMENT_BYTES / 2,
            STATEMENT_BYTES / 2,
            1,
            STATEMENT_BYTES * 2,
            3,
        ];
        let parts = by_bytes(&sizes, |n| *n);
        let lens: Vec<usize> = parts.iter().map(|p| p.len()).collect();
        assert_eq!(lens, [2, 1, 1, 1]);
        assert!(by_bytes(&[] as &[usize], |n| *n).is_empty());
    }
}
