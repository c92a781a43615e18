//! [`PgStore`]: the lossless store in a PostgreSQL database, and its [`Backend`]
//! implementation.
//!
//! Every call checks a connection out of the pool and runs its statements there; a write is
//! one transaction. There is no cache and no index of our own in the process: what one node
//! acknowledged, every node's next read sees (PostgreSQL's read-committed snapshots start at
//! each statement). What SQLite gets from its single writer, PostgreSQL gets from row locks:
//!
//! - every write to a conversation (ingest, `commitTurn`, a compaction's commit, a carry)
//!   first locks the conversation's row (`SELECT … FOR UPDATE`), so sequence numbers and
//!   frontier ordinals are handed out by one transaction at a time, on every node, and the
//!   duplicate check of an ingest cannot race a concurrent re-send;
//! - `commitTurn`'s key is a primary key: the second of two concurrent commits of one key waits
//!   for the first and then finds it;
//! - one compaction per conversation across nodes: a session-level advisory lock held on a
//!   connection of its own for the compaction's length ([`PgStore::lock_compaction`]); a node
//!   that dies mid-compaction loses its connection and with it the lock, and its uncommitted
//!   round with it.
//!
//! Full text: each row's `terms` is a `tsvector` of exactly the terms the SQLite store indexes
//! ([`crate::core::terms::index_terms`], made in Rust, so both backends find the same rows)
//! with a GIN index; searches ask for those terms with a `tsquery` of quoted lexemes (no
//! parsing on the server side). Regex search uses `pg_trgm`'s index.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use clawctx_protocol::AgentMessage;
use clawctx_summarize::Summarizer;
use deadpool_postgres::Pool;
use tokio_postgres::Row;

use super::connect::PgTarget;
use crate::config::LosslessConfig;
use crate::core::assemble::Assembled;
use crate::core::backend::{AssembleRequest, Backend, BackendKind, CompactionLock};
use crate::core::compaction::{CompactionOptions, CompactionReport};
use crate::core::conv::{ConvKey, ConvRow, IngestOutcome, TurnCommit};
use crate::core::doctor::{DoctorReport, StatusReport};
use crate::core::import::ImportReport;
use crate::core::recall::{DescribeReport, ExpandReport, GrepHit, GrepQuery, GrepReport, Scope};
use crate::core::retention::RetentionReport;
use crate::core::semantic::rows::{Done, EmbedItem, EmbedModel, ItemKind, NewVector, VectorRow};
use crate::core::session::CarryReport;
use crate::error::{LosslessError, Result};

pub use crate::config::DEFAULT_POOL_SIZE;

/// A lossless store in a PostgreSQL database. Cheap to clone (the pool is shared).
#[derive(Clone)]
pub struct PgStore {
    pub(crate) pool: Pool,
    pub(crate) target: Arc<PgTarget>,
    /// Texts this large count as payloads for retention (`largePayloadBytes`).
    pub(crate) large_payload_bytes: usize,
    /// Set once the schema is known to be up to date: at [`PgStore::open`], or, for a store
    /// opened while its server was down ([`PgStore::open_or_wait`]), by the first connection
    /// made once it is back.
    schema_ready: Arc<tokio::sync::OnceCell<()>>,
    /// Where each conversation's last assembly by this process started (cache-stable front).
    pub(crate) fronts: Arc<crate::core::assemble::Fronts>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("target", &self.target.redacted())
            .finish()
    }
}

/// The columns of [`ConvRow`], in [`conv_row`]'s order.
pub(crate) const CONV_COLS: &str = "id, agent_id, session_key, active, next_seq, next_ord, msg_count, msg_tokens, raw_bytes, frontier_tokens, frontier_items, epoch";

/// A conversation row read with [`CONV_COLS`].
pub(crate) fn conv_row(r: &Row) -> Result<ConvRow> {
    Ok(ConvRow {
        id: r.try_get(0)?,
        agent_id: r.try_get(1)?,
        session_key: r.try_get(2)?,
        active: r.try_get(3)?,
        next_seq: r.try_get(4)?,
        next_ord: r.try_get(5)?,
        msg_count: r.try_get(6)?,
        msg_tokens: r.try_get(7)?,
        raw_bytes: r.try_get(8)?,
        frontier_tokens: r.try_get(9)?,
        frontier_items: r.try_get(10)?,
        epoch: r.try_get(11)?,
    })
}

impl PgStore {
    /// Connects to `target` (failing at once, naming host and port, when it cannot) and
    /// brings its schema up to date.
    pub async fn open(target: PgTarget, pool_size: usize) -> Result<Self> {
        let pool = super::schema::open(&target, pool_size).await?;
        Ok(Self {
            pool,
            target: Arc::new(target),
            large_payload_bytes: crate::config::DEFAULT_LARGE_PAYLOAD_BYTES,
            schema_ready: Arc::new(tokio::sync::OnceCell::new_with(Some(()))),
            fronts: Arc::default(),
        })
    }

    /// [`Self::open`], except that a server that does not answer (refused, timed out: an
    /// outage, not a refused login or a missing database) gives a store that is not connected
    /// yet: every call fails with [`LosslessError::Unreachable`] until the server answers, and
    /// the first connection then brings the schema up to date. A host that starts while its
    /// database is down so serves degraded and recovers by itself.
    pub async fn open_or_wait(target: PgTarget, pool_size: usize) -> Result<Self> {
        match Self::open(target.clone(), pool_size).await {
            Err(LosslessError::Unreachable {
                target: shown,
                reason,
            }) if super::connect::outage_only(&target).await => {
                tracing::warn!(
                    "lossless: cannot reach the PostgreSQL database at {shown} ({reason}); starting without it, every call waits for it to come back"
                );
                Ok(Self {
                    pool: super::connect::build_pool(&target, pool_size)?,
                    target: Arc::new(target),
                    large_payload_bytes: crate::config::DEFAULT_LARGE_PAYLOAD_BYTES,
                    schema_ready: Arc::new(tokio::sync::OnceCell::new()),
                    fronts: Arc::default(),
                })
            }
            other => other,
        }
    }

    /// Texts of at least `bytes` count as large payloads for retention (`largePayloadBytes`;
    /// `0`: none). PostgreSQL stores every text in its message row either way.
    pub fn with_large_payload_bytes(mut self, bytes: usize) -> Self {
        self.large_payload_bytes = if bytes == 0 { usize::MAX } else { bytes };
        self
    }

    /// [`Self::open`] from a connection string.
    pub async fn open_url(url: &str) -> Result<Self> {
        Self::open(PgTarget::parse(url)?, DEFAULT_POOL_SIZE).await
    }

    /// The database, as it may be shown (no password).
    pub fn target(&self) -> &PgTarget {
        &self.target
    }

    /// Bytes the store's tables take on disk, with their indexes and TOAST (the database's
    /// own catalog, which every database has, not counted).
    pub async fn relation_bytes(&self) -> Result<u64> {
        let c = self.client().await?;
        let bytes: i64 = c
            .query_one(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = current_schema() AND c.relkind = 'r'",
                &[],
            )
            .await?
            .try_get(0)?;
        Ok(bytes.max(0) as u64)
    }

    /// A read-only, repeatable-read transaction on `client`: one snapshot for a call that
    /// reads several times (assembly, a compaction's plan, recall, status, doctor).
    pub(crate) async fn snapshot(
        client: &mut deadpool_postgres::Object,
    ) -> Result<deadpool_postgres::Transaction<'_>> {
        Ok(client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?)
    }

    /// A pooled connection. The pool makes a new connection for every one that broke, so a
    /// store whose server went away reconnects by itself once the server is back; until then
    /// this fails with [`LosslessError::Unreachable`] naming the database (no password), which
    /// the engine reports as a transient outage, not a fault.
    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object> {
        let mut c = self
            .pool
            .get()
            .await
            .map_err(|e| self.named(LosslessError::from(e)))?;
        if !self.schema_ready.initialized() {
            let shown = self.target.redacted();
            let client: &mut tokio_postgres::Client = &mut c;
            self.schema_ready
                .get_or_try_init(|| async {
                    super::schema::migrate(client, &shown).await?;
                    tracing::info!("lossless: reached the PostgreSQL database at {shown}");
                    Ok::<(), LosslessError>(())
                })
                .await
                .map_err(|e| self.named(e))?;
        }
        Ok(c)
    }

    /// A lost connection as an outage of this database: [`LosslessError::Unreachable`] naming
    /// it (redacted). Other errors as they are.
    pub(crate) fn named(&self, e: LosslessError) -> LosslessError {
        match e {
            LosslessError::ConnectionLost(reason) => LosslessError::Unreachable {
                target: self.target.redacted(),
                reason,
            },
            other => other,
        }
    }

    /// One round trip to the server on a pooled connection (a readiness probe).
    pub async fn ping(&self) -> Result<()> {
        let c = self.client().await?;
        c.simple_query("SELECT 1")
            .await
            .map_err(|e| self.named(LosslessError::from(e)))?;
        Ok(())
    }

    /// Runs `op`, and once more on a new connection when its connection broke
    /// ([`LosslessError::ConnectionLost`]: the server restarted, the connection was
    /// terminated). Only for operations a second run cannot get wrong: reads, and writes that
    /// are idempotent (ingest by message identity, `commitTurn` by key, a compaction round by
    /// its frontier check), whose first run the server rolled back or committed whole.
    pub(crate) async fn retrying<T, F, Fut>(&self, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let first = match op().await {
            Err(LosslessError::Unreachable { reason, .. }) => {
                Err(LosslessError::ConnectionLost(reason))
            }
            other => other,
        };
        match first {
            Err(LosslessError::ConnectionLost(why)) => {
                tracing::warn!(
                    "lossless: lost the connection to {} ({why}); retrying on a new one",
                    self.target.redacted()
                );
                // The pool's idle connections were most likely cut too (a restart, a network
                // cut), and one whose end has not been noticed yet passes the pool's check:
                // drop them all, so the retry really runs on a new connection.
                self.pool.retain(|_, _| false);
                op().await.map_err(|e| self.named(e))
            }
            other => other,
        }
    }

    /// The active conversation of `key`, read on `c`.
    pub(crate) async fn conversation_on(
        c: &impl deadpool_postgres::GenericClient,
        key: &ConvKey,
    ) -> Result<Option<ConvRow>> {
        let st = c
            .prepare_cached(&format!(
                "SELECT {CONV_COLS} FROM conversations WHERE agent_id = $1 AND session_key = $2 AND active"
            ))
            .await?;
        let row = c.query_opt(&st, &[&key.agent_id, &key.session_key]).await?;
        row.as_ref().map(conv_row).transpose()
    }

    /// Conversation `id`, read on `c`.
    pub(crate) async fn conversation_by_id_on(
        c: &impl deadpool_postgres::GenericClient,
        id: i64,
    ) -> Result<Option<ConvRow>> {
        let st = c
            .prepare_cached(&format!(
                "SELECT {CONV_COLS} FROM conversations WHERE id = $1"
            ))
            .await?;
        let row = c.query_opt(&st, &[&id]).await?;
        row.as_ref().map(conv_row).transpose()
    }

    /// The active conversation of `key`, created when absent, locked for the rest of the
    /// transaction `tx` (see the module header).
    pub(crate) async fn lock_conversation(
        tx: &deadpool_postgres::Transaction<'_>,
        key: &ConvKey,
    ) -> Result<ConvRow> {
        let select = format!(
            "SELECT {CONV_COLS} FROM conversations WHERE agent_id = $1 AND session_key = $2 AND active FOR UPDATE"
        );
        let select = tx.prepare_cached(&select).await?;
        if let Some(r) = tx
            .query_opt(&select, &[&key.agent_id, &key.session_key])
            .await?
        {
            return conv_row(&r);
        }
        // Created only when absent, so ids are not spent on conflicts: conversation ids stay
        // dense, as SQLite's are. Two nodes creating it at once: one insert wins, the other
        // does nothing and reads the winner's row.
        tx.execute(
            "INSERT INTO conversations(agent_id, session_key, active, created_at) VALUES($1, $2, true, $3)
             ON CONFLICT (agent_id, session_key) WHERE active DO NOTHING",
            &[&key.agent_id, &key.session_key, &crate::core::conv::now_ms()],
        )
        .await?;
        match tx
            .query_opt(&select, &[&key.agent_id, &key.session_key])
            .await?
        {
            Some(r) => conv_row(&r),
            // Archived between our insert and our read by another node's `/new`.
            None => Err(LosslessError::Postgres(format!(
                "conversation {}/{} was archived while being written; retry",
                key.agent_id, key.session_key
            ))),
        }
    }
}

#[async_trait]
impl Backend for PgStore {
    fn kind(&self) -> BackendKind {
        BackendKind::Postgres
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn location(&self) -> String {
        self.target.redacted()
    }

    async fn ping(&self) -> Result<()> {
        PgStore::ping(self).await
    }

    async fn conversation(&self, key: &ConvKey) -> Result<Option<ConvRow>> {
        self.retrying(|| async {
            let c = self.client().await?;
            Self::conversation_on(&c, key).await
        })
        .await
    }

    async fn conversations(&self) -> Result<Vec<ConvRow>> {
        self.retrying(|| async {
            let c = self.client().await?;
            let rows = c
                .query(
                    &format!("SELECT {CONV_COLS} FROM conversations ORDER BY id"),
                    &[],
                )
                .await?;
            rows.iter().map(conv_row).collect()
        })
        .await
    }

    async fn ingest(&self, key: &ConvKey, msgs: Vec<AgentMessage>) -> Result<IngestOutcome> {
        if msgs.is_empty() {
            return Ok(IngestOutcome::default());
        }
        self.append(key, None, msgs)
            .await
            .map(Option::unwrap_or_default)
    }

    async fn commit_turn(
        &self,
        key: &ConvKey,
        advancement_key: &str,
        msgs: Vec<AgentMessage>,
    ) -> Result<TurnCommit> {
        Ok(self
            .append(key, Some(advancement_key), msgs)
            .await?
            .map_or(TurnCommit::Duplicate, TurnCommit::Committed))
    }

    async fn assemble(&self, req: AssembleRequest) -> Result<Option<(ConvRow, Assembled)>> {
        self.retrying(|| self.assemble_context(&req)).await
    }

    async fn lock_compaction(&self, conv_id: i64, wait: bool) -> Result<Option<CompactionLock>> {
        self.compaction_lock(conv_id, wait).await
    }

    async fn compact(
        &self,
        conv_id: i64,
        summarizer: Arc<dyn Summarizer>,
        cfg: Arc<LosslessConfig>,
        opts: CompactionOptions,
    ) -> Result<CompactionReport> {
        crate::core::compaction::compact_conversation(self, summarizer, cfg, conv_id, opts).await
    }

    async fn carry_summaries(
        &self,
        from: &ConvKey,
        to: &ConvKey,
        min_depth: i64,
    ) -> Result<CarryReport> {
        // Not retried: a carry that committed before its connection broke would carry twice.
        self.carry(from, to, min_depth).await
    }

    async fn archive(&self, key: &ConvKey) -> Result<bool> {
        let c = self.client().await?;
        let n = c
            .execute(
                "UPDATE conversations SET active = false WHERE agent_id = $1 AND session_key = $2 AND active",
                &[&key.agent_id, &key.session_key],
            )
            .await?;
        Ok(n > 0)
    }

    async fn expire_payloads(&self, cutoff_ms: i64, apply: bool) -> Result<RetentionReport> {
        self.expire(cutoff_ms, apply).await
    }

    async fn import_jsonl(
        &self,
        key: &ConvKey,
        path: PathBuf,
        apply: bool,
        only_into_empty: bool,
    ) -> Result<Option<ImportReport>> {
        if only_into_empty
            && self
                .conversation(key)
                .await?
                .is_some_and(|c| c.msg_count > 0)
        {
            return Ok(None);
        }
        let (msgs, mut report) =
            tokio::task::spawn_blocking(move || crate::core::import::read_openclaw_jsonl(&path))
                .await??;
        if apply {
            let outcome = self.ingest(key, msgs).await?;
            report.new_messages = outcome.stored.iter().filter(|s| **s).count();
            report.applied = true;
        } else {
            report.new_messages = msgs_not_stored(self, key, &msgs).await?;
        }
        Ok(Some(report))
    }

    async fn grep(&self, query: GrepQuery) -> Result<GrepReport> {
        self.grep_history(query).await
    }

    async fn describe(&self, id: &str, agent: Option<&str>) -> Result<DescribeReport> {
        self.describe_item(id, agent).await
    }

    async fn expand(&self, id: &str, max_tokens: u64, agent: Option<&str>) -> Result<ExpandReport> {
        self.expand_item(id, max_tokens, agent).await
    }

    async fn status(&self) -> Result<StatusReport> {
        self.status_report().await
    }

    async fn doctor(&self) -> Result<DoctorReport> {
        self.doctor_report().await
    }

    async fn close(&self) {
        self.pool.close();
    }

    async fn scope_conversations(&self, scope: Scope) -> Result<Vec<i64>> {
        let c = self.client().await?;
        Self::scope_conv_ids(&c, &scope).await
    }

    async fn embed_model(&self, name: &str, dim: usize) -> Result<EmbedModel> {
        self.embed_model_row(name, dim).await
    }

    async fn embed_todo(&self, model: i64, limit: usize) -> Result<Vec<EmbedItem>> {
        self.embed_todo_rows(model, limit).await
    }

    async fn store_vectors(&self, model: i64, rows: Vec<NewVector>, done: Done) -> Result<usize> {
        self.store_vector_rows(model, rows, done).await
    }

    async fn vectors_since(
        &self,
        model: i64,
        dim: usize,
        wants: Vec<(i64, i64)>,
    ) -> Result<Vec<VectorRow>> {
        self.vector_rows_since(model, dim, &wants).await
    }

    async fn embed_progress(&self, model: i64) -> Result<(u64, u64)> {
        self.embed_progress_of(model).await
    }

    async fn item_hits(&self, items: Vec<(ItemKind, i64, f64)>) -> Result<Vec<GrepHit>> {
        self.item_hit_rows(&items).await
    }
}

/// How many of `msgs` `key`'s conversation does not hold yet (an import's dry run).
async fn msgs_not_stored(store: &PgStore, key: &ConvKey, msgs: &[AgentMessage]) -> Result<usize> {
    let Some(conv) = store.conversation(key).await? else {
        return Ok(msgs.len());
    };
    let c = store.client().await?;
    let mut ids = Vec::with_capacity(msgs.len());
    for m in msgs {
        ids.push(crate::core::codec::identity(m)?);
    }
    let stored = stored_identities(&c, conv.id, &ids).await?;
    // Counted as the SQLite store counts: once per hash.
    let mut seen = std::collections::HashSet::new();
    Ok(ids
        .into_iter()
        .filter(|(_, h)| seen.insert(*h))
        .filter(|(ts, h)| !stored.contains(&(ts.unwrap_or(0), *h)))
        .count())
}

/// The identities `(ifnull(ts, 0), hash)` of `ids` that conversation `conv_id` holds.
pub(crate) async fn stored_identities(
    c: &impl deadpool_postgres::GenericClient,
    conv_id: i64,
    ids: &[(Option<i64>, i64)],
) -> Result<std::collections::HashSet<(i64, i64)>> {
    if ids.is_empty() {
        return Ok(std::collections::HashSet::new());
    }
    let ts: Vec<i64> = ids.iter().map(|(t, _)| t.unwrap_or(0)).collect();
    let hashes: Vec<i64> = ids.iter().map(|(_, h)| *h).collect();
    let st = c
        .prepare_cached(
            "SELECT t.ts, t.h FROM unnest($2::bigint[], $3::bigint[]) AS t(ts, h)
             WHERE EXISTS (SELECT 1 FROM messages m
                           WHERE m.conv_id = $1 AND coalesce(m.ts, 0) = t.ts AND m.hash = t.h)",
        )
        .await?;
    let rows = c.query(&st, &[&conv_id, &ts, &hashes]).await?;
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect()
}
