//! The SQLite store as a [`Backend`]: each operation a job on the store thread (writes) or the
//! read thread (reads), over the `impl Db` blocks of this folder.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use clawctx_protocol::AgentMessage;
use clawctx_summarize::Summarizer;

use crate::config::LosslessConfig;
use crate::core::assemble::Assembled;
use crate::core::backend::{
    live_tail, recall_for, AssembleRequest, Backend, BackendKind, CompactionLock,
};
use crate::core::codec::{self, Encoded};
use crate::core::compaction::{CompactionOptions, CompactionReport};
use crate::core::conv::{ConvKey, ConvRow, IngestOutcome, TurnCommit};
use crate::core::doctor::{DoctorReport, StatusReport};
use crate::core::import::ImportReport;
use crate::core::recall::GrepHit;
use crate::core::recall::{DescribeReport, ExpandReport, GrepQuery, GrepReport, Scope};
use crate::core::retention::RetentionReport;
use crate::core::semantic::rows::{Done, EmbedItem, EmbedModel, ItemKind, NewVector, VectorRow};
use crate::core::session::CarryReport;
use crate::error::Result;
use crate::sqlite::{Db, EncodeQueue, LosslessStore};

impl LosslessStore {
    /// Encodes `msgs` and hands them to one store job: `small` gets a small batch encoded on
    /// the store thread, `streamed` a larger one's [`EncodeQueue`]: encoder threads encode
    /// chunks while the store thread inserts the ones ready (and encodes chunks itself rather
    /// than wait), so token counting and the codec run alongside SQLite instead of before it.
    async fn store_encoded<R: Send + 'static>(
        &self,
        msgs: Vec<AgentMessage>,
        small: impl FnOnce(&mut Db, &[Encoded]) -> Result<R> + Send + 'static,
        streamed: impl FnOnce(&mut Db, &EncodeQueue) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        /// Below this many messages the extra thread hop costs more than the overlap saves.
        const STREAM_MIN: usize = 16;
        /// Messages per chunk.
        const CHUNK: usize = 8;
        if msgs.len() < STREAM_MIN {
            return self
                .call(move |db| {
                    let enc = msgs.iter().map(codec::encode).collect::<Result<Vec<_>>>()?;
                    small(db, &enc)
                })
                .await;
        }
        let queue = Arc::new(EncodeQueue::new(msgs, CHUNK));
        // The store thread is one of the busy threads, so one encoder fewer than the cores
        // keeps every core busy without making the store thread share one; more than the
        // chunks would only idle.
        let encoders = encoder_threads().min(queue.chunks().saturating_sub(1));
        let mut handles = Vec::with_capacity(encoders);
        for _ in 0..encoders {
            let q = queue.clone();
            handles.push(tokio::task::spawn_blocking(move || q.run_encoder()));
        }
        let q = queue.clone();
        let stored = self.call(move |db| streamed(db, &q)).await;
        // The store job abandons the queue when it ends, and a job that never ran (a closed
        // store) drops its closure, whose queue handle is then the last but ours; abandon
        // here as well so no encoder waits on a store that is gone.
        queue.abandon();
        for h in handles {
            let _ = h.await;
        }
        stored
    }
}

/// Encoder threads for a large ingest batch: one fewer than the cores this process may use
/// (the store thread takes the last), at least one, at most three (beyond that the store
/// thread is the bottleneck).
fn encoder_threads() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::thread::available_parallelism()
            .map(|n| n.get().saturating_sub(1))
            .unwrap_or(1)
            .clamp(1, 3)
    })
}

impl dyn Backend {
    /// The SQLite store, when this is one (for the operator tools that are SQLite-only).
    pub fn as_sqlite(&self) -> Option<&LosslessStore> {
        self.as_any().downcast_ref()
    }
}

#[async_trait]
impl Backend for LosslessStore {
    fn kind(&self) -> BackendKind {
        BackendKind::Sqlite
    }

    fn location(&self) -> String {
        self.path().display().to_string()
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    async fn conversation(&self, key: &ConvKey) -> Result<Option<ConvRow>> {
        let k = key.clone();
        self.call(move |db| db.conversation(&k)).await
    }

    async fn conversations(&self) -> Result<Vec<ConvRow>> {
        LosslessStore::conversations(self).await
    }

    async fn ingest(&self, key: &ConvKey, msgs: Vec<AgentMessage>) -> Result<IngestOutcome> {
        if msgs.is_empty() {
            return Ok(IngestOutcome::default());
        }
        let (k, kq) = (key.clone(), key.clone());
        self.store_encoded(
            msgs,
            move |db, enc| db.ingest(&k, enc),
            move |db, queue| db.ingest_queue(&kq, queue),
        )
        .await
    }

    async fn commit_turn(
        &self,
        key: &ConvKey,
        advancement_key: &str,
        msgs: Vec<AgentMessage>,
    ) -> Result<TurnCommit> {
        let (k, kq) = (key.clone(), key.clone());
        let (a, aq) = (advancement_key.to_owned(), advancement_key.to_owned());
        self.store_encoded(
            msgs,
            move |db, enc| db.commit_turn(&k, &a, enc),
            move |db, queue| db.commit_turn_queue(&kq, &aq, queue),
        )
        .await
    }

    async fn assemble(&self, req: AssembleRequest) -> Result<Option<(ConvRow, Assembled)>> {
        let fronts = self.fronts();
        self.call(move |db| {
            db.read(|db| {
                let Some(conv) = db.conversation(&req.key)? else {
                    return Ok(None);
                };
                let first_live =
                    live_tail(&req.recent, |ts, hash| db.has_message(conv.id, ts, hash))?;
                let live = req.recent[first_live..].to_vec();
                let recall = recall_for(&req, &live, || {
                    db.scope_conversations(&Scope::Session(req.key.clone()))
                })?;
                let hysteresis = crate::core::assemble::Hysteresis {
                    front: fronts.get(conv.id, req.budget),
                    block_share: req.cache_block_share,
                    whole_first: req.whole_first,
                };
                let out = db.assemble_stable(
                    Some(conv.id),
                    live,
                    req.budget,
                    recall.as_ref(),
                    hysteresis,
                )?;
                fronts.set(conv.id, req.budget, out.front);
                Ok(Some((conv, out)))
            })
        })
        .await
    }

    async fn lock_compaction(&self, conv_id: i64, wait: bool) -> Result<Option<CompactionLock>> {
        // One process owns a SQLite store's compactions (another process's would only find
        // its planned ranges changed and skip them): a lock of this process is enough.
        let lock = self.compaction_mutex(conv_id);
        let guard = if wait {
            lock.lock_owned().await
        } else {
            match lock.try_lock_owned() {
                Ok(g) => g,
                Err(_) => return Ok(None),
            }
        };
        Ok(Some(Box::new(guard)))
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
        let (f, t) = (from.clone(), to.clone());
        self.call(move |db| db.carry_summaries(&f, &t, min_depth))
            .await
    }

    async fn archive(&self, key: &ConvKey) -> Result<bool> {
        let k = key.clone();
        self.call(move |db| db.archive(&k)).await
    }

    async fn expire_payloads(&self, cutoff_ms: i64, apply: bool) -> Result<RetentionReport> {
        self.call(move |db| db.expire_payloads(cutoff_ms, apply))
            .await
    }

    async fn import_jsonl(
        &self,
        key: &ConvKey,
        path: PathBuf,
        apply: bool,
        only_into_empty: bool,
    ) -> Result<Option<ImportReport>> {
        let k = key.clone();
        self.call(move |db| {
            if only_into_empty
                && db
                    .conversation(&k)?
                    .map(|c| c.msg_count > 0)
                    .unwrap_or(false)
            {
                return Ok(None);
            }
            let (msgs, mut report) = crate::core::import::read_openclaw_jsonl(&path)?;
            db.import_messages(&k, &msgs, apply, &mut report)?;
            Ok(Some(report))
        })
        .await
    }

    async fn grep(&self, query: GrepQuery) -> Result<GrepReport> {
        LosslessStore::grep(self, query).await
    }

    async fn describe(&self, id: &str, agent: Option<&str>) -> Result<DescribeReport> {
        let (id, agent) = (id.to_owned(), agent.map(str::to_owned));
        self.call_read(move |db| db.describe(&id, agent.as_deref()))
            .await
    }

    async fn expand(&self, id: &str, max_tokens: u64, agent: Option<&str>) -> Result<ExpandReport> {
        let (id, agent) = (id.to_owned(), agent.map(str::to_owned));
        self.call_read(move |db| db.expand(&id, max_tokens, agent.as_deref()))
            .await
    }

    async fn status(&self) -> Result<StatusReport> {
        LosslessStore::status(self).await
    }

    async fn doctor(&self) -> Result<DoctorReport> {
        LosslessStore::doctor(self).await
    }

    async fn close(&self) {
        self.close_wait().await;
    }

    async fn scope_conversations(&self, scope: Scope) -> Result<Vec<i64>> {
        self.call_read(move |db| db.scope_conversations(&scope))
            .await
    }

    async fn embed_model(&self, name: &str, dim: usize) -> Result<EmbedModel> {
        let name = name.to_owned();
        self.call(move |db| db.embed_model(&name, dim)).await
    }

    async fn embed_todo(&self, model: i64, limit: usize) -> Result<Vec<EmbedItem>> {
        self.call_read(move |db| db.embed_todo(db.embed_done(model)?, limit))
            .await
    }

    async fn store_vectors(&self, model: i64, rows: Vec<NewVector>, done: Done) -> Result<usize> {
        self.call(move |db| db.store_vectors(model, rows, done))
            .await
    }

    async fn vectors_since(
        &self,
        model: i64,
        dim: usize,
        wants: Vec<(i64, i64)>,
    ) -> Result<Vec<VectorRow>> {
        self.call_read(move |db| db.vectors_since(model, dim, &wants))
            .await
    }

    async fn embed_progress(&self, model: i64) -> Result<(u64, u64)> {
        self.call_read(move |db| db.embed_progress(model)).await
    }

    async fn item_hits(&self, items: Vec<(ItemKind, i64, f64)>) -> Result<Vec<GrepHit>> {
        self.call_read(move |db| db.item_hits(&items)).await
    }
}
