//! Semantic recall (issue #43): sentence vectors of messages and summaries, written in the
//! background, searched by meaning and fused with the lexical ranking wherever recall happens.
//!
//! Why: lexical recall finds only what shares the question's words ("what did we pick for
//! storage?" misses "let's go with PostgreSQL"); a sentence-embedding model
//! ([`clawctx_embed::Embedder`]) finds it. Every part is written once here over the
//! [`Backend`] trait; each store only answers its queries (`store/vectors.rs`,
//! `pg/vectors.rs`):
//!
//! - **Writing** ([`Semantic::embed_batch`], [`Semantic::spawn`]): a background task takes the
//!   items the model has not embedded (messages, then summaries, in id order), embeds a batch
//!   and stores the vectors with the model's progress in one transaction. Ingest never waits
//!   for it: a turn's messages are stored as before and the task is woken. `clawctx lcm embed`
//!   runs the same batches to the end with a progress bar (a backfill, resumable: the progress
//!   is in the store). The model's identity is stored with its vectors, so a different model
//!   embeds from the start instead of mixing spaces.
//! - **Searching** ([`Semantic::search`]): exact, over the conversations asked, from the
//!   in-memory [`cache::VectorCache`] caught up with the store first.
//! - **Fusing** ([`fuse::rrf`]): the `<recalled>` block fuses the lexical ranking with the
//!   vector hits above [`Semantic::min_score`] ([`Semantic::prompt_hits`], used by
//!   [`crate::core::prompt_recall`]); `lcm_grep` `semantic` and `hybrid` ([`Semantic::grep`]).
//!
//! Without a model (no config, no `CLAWCTX_EMBED_MODEL`, nothing in the default directory)
//! the engine has no [`Semantic`] and recall is lexical, as before.

pub mod cache;
pub mod fuse;
pub mod model;
pub mod quant;
pub mod rows;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use clawctx_embed::Embedder;

use crate::core::backend::Backend;
use crate::core::conv::ConvKey;
use crate::core::ids::{self, RecordId};
use crate::core::recall::{GrepHit, GrepMode, GrepQuery, GrepReport, GrepTarget, Scope};
use crate::core::search::RankedMessage;
use crate::error::{LosslessError, Result};
use cache::{ItemKind, VectorCache, VectorHit};
use rows::{Done, EmbedModel, NewVector};

/// Items embedded per batch: large enough for the model to batch, small enough that a turn
/// waiting for the CPU waits for little.
pub const BATCH: usize = 32;
pub use crate::config::DEFAULT_MIN_SCORE;
/// How long the background embedder sleeps when there is nothing to embed and nobody wakes it
/// (another process may write to a shared store).
const IDLE: Duration = Duration::from_secs(5);

/// A lossless engine's semantic recall: its embedder and the vectors it has read (see the
/// module header). One per engine, over the engine's backend.
pub struct Semantic {
    embedder: Arc<dyn Embedder>,
    cache: VectorCache,
    model: tokio::sync::OnceCell<EmbedModel>,
    wake: tokio::sync::Notify,
    min_score: f32,
    /// The last query embedded and its vector (see [`Semantic::embed_query`]).
    last_query: Mutex<Option<(String, Vec<f32>)>>,
}

impl std::fmt::Debug for Semantic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semantic")
            .field("model", &self.embedder.model_id())
            .finish()
    }
}

/// Stops the background embedder when dropped.
#[derive(Debug)]
pub struct EmbedTask(tokio::task::JoinHandle<()>);

impl Drop for EmbedTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Semantic {
    /// Semantic recall with `embedder`.
    pub fn new(embedder: Arc<dyn Embedder>) -> Self {
        Self {
            cache: VectorCache::new(embedder.dim()),
            embedder,
            model: tokio::sync::OnceCell::new(),
            wake: tokio::sync::Notify::new(),
            min_score: DEFAULT_MIN_SCORE,
            last_query: Mutex::new(None),
        }
    }

    /// With another threshold for the `<recalled>` block (`semanticMinScore`).
    pub fn with_min_score(mut self, min_score: f32) -> Self {
        self.min_score = min_score;
        self
    }

    /// The embedding model's identity.
    pub fn model_id(&self) -> &str {
        self.embedder.model_id()
    }

    /// The cosine below which a vector hit does not cue the `<recalled>` block.
    pub fn min_score(&self) -> f32 {
        self.min_score
    }

    async fn model(&self, store: &dyn Backend) -> Result<&EmbedModel> {
        self.model
            .get_or_try_init(|| store.embed_model(self.embedder.model_id(), self.embedder.dim()))
            .await
    }

    /// Embeds one batch of what the model has not embedded; returns the items done (0: none
    /// was left).
    pub async fn embed_batch(&self, store: &dyn Backend) -> Result<usize> {
        let model = self.model(store).await?;
        let todo = store.embed_todo(model.id, BATCH).await?;
        if todo.is_empty() {
            return Ok(0);
        }
        let mut done = Done::default();
        for it in &todo {
            match it.kind {
                ItemKind::Message => done.msg_done = done.msg_done.max(it.item_id),
                ItemKind::Summary => done.sum_done = done.sum_done.max(it.item_id),
            }
        }
        let with_text: Vec<&rows::EmbedItem> = todo
            .iter()
            .filter(|it| !it.text.trim().is_empty())
            .collect();
        let texts: Vec<String> = with_text.iter().map(|it| it.text.clone()).collect();
        let vectors = self.embedder.embed(&texts).await.map_err(|e| {
            LosslessError::Embedding(format!("embedding with {}: {e}", self.model_id()))
        })?;
        let rows = with_text
            .iter()
            .zip(vectors)
            .map(|(it, v)| {
                let (scale, vec) = quant::quantize(&v);
                NewVector {
                    kind: it.kind,
                    item_id: it.item_id,
                    conv_id: it.conv_id,
                    tokens: it.tokens,
                    scale,
                    vec,
                }
            })
            .collect();
        store.store_vectors(model.id, rows, done).await?;
        Ok(todo.len())
    }

    /// `(items embedded, items stored)`.
    pub async fn progress(&self, store: &dyn Backend) -> Result<(u64, u64)> {
        let model = self.model(store).await?;
        store.embed_progress(model.id).await
    }

    /// Embeds everything not embedded yet, calling `progress(done, total)` after each batch.
    pub async fn embed_all(
        &self,
        store: &dyn Backend,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<u64> {
        let mut n = 0u64;
        loop {
            let k = self.embed_batch(store).await?;
            if k == 0 {
                return Ok(n);
            }
            n += k as u64;
            let (done, total) = self.progress(store).await?;
            progress(done, total);
        }
    }

    /// Tells the background embedder that new items were stored.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Starts the background embedder over `store` (on the current tokio runtime); it stops
    /// when the returned task is dropped. A failing model or store is retried with a growing
    /// pause (up to a minute), logged once per failure streak.
    pub fn spawn(self: &Arc<Self>, store: Arc<dyn Backend>) -> EmbedTask {
        let me = Arc::clone(self);
        EmbedTask(tokio::spawn(async move {
            let mut pause = Duration::from_secs(1);
            let mut failing = false;
            loop {
                match me.embed_batch(&*store).await {
                    Ok(0) => {
                        failing = false;
                        let _ = tokio::time::timeout(IDLE, me.wake.notified()).await;
                    }
                    Ok(_) => {
                        failing = false;
                        pause = Duration::from_secs(1);
                        tokio::task::yield_now().await;
                    }
                    Err(e) => {
                        if !failing {
                            tracing::warn!("lossless: background embedding failed (retrying): {e}");
                        }
                        failing = true;
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(60));
                    }
                }
            }
        }))
    }

    /// The unit vector of `text`. The last query's vector is kept: a host assembles twice per
    /// model call with the same prompt (OpenClaw does), and `lcm_grep` often follows with it,
    /// so the model (~18 ms on 2 cores) runs once for them.
    pub async fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
        let text = rows::embed_text(text);
        if let Some((last, v)) = &*self
            .last_query
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
        {
            if last == text {
                return Ok(v.clone());
            }
        }
        let mut v = self.embedder.embed(&[text.to_owned()]).await.map_err(|e| {
            LosslessError::Embedding(format!("embedding the query with {}: {e}", self.model_id()))
        })?;
        let v = v
            .pop()
            .ok_or_else(|| LosslessError::Embedding("the model returned no vector".into()))?;
        *self
            .last_query
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((text.to_owned(), v.clone()));
        Ok(v)
    }

    /// The `k` items of `convs` most like `query`, at least `min_score` alike, after catching
    /// the cache up with the store.
    pub async fn search(
        &self,
        store: &dyn Backend,
        convs: &[i64],
        query: &[f32],
        k: usize,
        min_score: f32,
        kinds: impl Fn(ItemKind) -> bool,
    ) -> Result<Vec<VectorHit>> {
        let model = self.model(store).await?;
        let fresh = store
            .vectors_since(model.id, model.dim, self.cache.stale(convs))
            .await?;
        self.cache.extend(fresh);
        Ok(self.cache.search(convs, query, k, min_score, kinds))
    }

    /// The `k` messages of `key`'s session most like `text` for the `<recalled>` block (best
    /// first, at least [`Semantic::min_score`] alike): the block fuses them with as many
    /// lexical hits (`promptRecallMaxMessages` each) and leaves out what the context already
    /// shows. A failing model gives none (logged): the block is then lexical, and the turn goes
    /// on.
    pub async fn prompt_hits(
        &self,
        store: &dyn Backend,
        key: &ConvKey,
        text: &str,
        k: usize,
    ) -> Vec<RankedMessage> {
        let run = async {
            let convs = store
                .scope_conversations(Scope::Session(key.clone()))
                .await?;
            let query = self.embed_query(text).await?;
            self.search(store, &convs, &query, k, self.min_score, |k| {
                k == ItemKind::Message
            })
            .await
        };
        match run.await {
            Ok(hits) => hits
                .into_iter()
                .map(|h| RankedMessage {
                    id: h.item_id,
                    conv_id: h.conv_id,
                    score: f64::from(h.score),
                    matched: 0,
                    tokens: h.tokens,
                })
                .collect(),
            Err(e) => {
                tracing::warn!("lossless: semantic recall skipped for this turn: {e}");
                Vec::new()
            }
        }
    }

    /// `lcm_grep` in `semantic` or `hybrid` mode (see [`grep`] for the routing).
    pub async fn grep(&self, store: &dyn Backend, q: GrepQuery) -> Result<GrepReport> {
        /// Candidates each ranking gives the fusion.
        const POOL: usize = 100;
        let limit = q.limit.clamp(1, 200);
        let want = q.offset + limit + 1;
        let pool = want.max(POOL);
        let convs = store.scope_conversations(q.scope.clone()).await?;
        let query = self.embed_query(&q.pattern).await?;
        let target = q.target;
        let vector = self
            .search(store, &convs, &query, pool, 0.0, |k| match target {
                GrepTarget::Both => true,
                GrepTarget::Messages => k == ItemKind::Message,
                GrepTarget::Summaries => k == ItemKind::Summary,
            })
            .await?;
        // Fused with the words, only the items alike enough to cue the `<recalled>` block
        // count: below that, a vector ranking only pushes word matches down (BENCHMARKS.md §17).
        let vector_keys: Vec<(ItemKind, i64)> = vector
            .iter()
            .filter(|h| h.score >= self.min_score)
            .map(|h| (h.kind, h.item_id))
            .collect();
        let (ranked, mut lexical_hits): (Vec<((ItemKind, i64), f64)>, Vec<GrepHit>) =
            if q.mode == GrepMode::Semantic {
                let ranked = vector
                    .iter()
                    .map(|h| ((h.kind, h.item_id), f64::from(h.score)))
                    .collect();
                (ranked, Vec::new())
            } else {
                let lexical = store
                    .grep(GrepQuery {
                        mode: GrepMode::AnyTerm,
                        limit: pool.min(200),
                        offset: 0,
                        ..q.clone()
                    })
                    .await?;
                let keys: Vec<(ItemKind, i64)> = lexical
                    .hits
                    .iter()
                    .filter_map(|h| item_key(&h.id))
                    .collect();
                (fuse::rrf(&[&keys, &vector_keys]), lexical.hits)
            };
        let page: Vec<((ItemKind, i64), f64)> =
            ranked.iter().skip(q.offset).take(limit).cloned().collect();
        // Hits the lexical ranking rendered keep their snippet (around the words matched);
        // the others are read.
        let missing: Vec<(ItemKind, i64, f64)> = page
            .iter()
            .filter(|(key, _)| !lexical_hits.iter().any(|h| item_key(&h.id) == Some(*key)))
            .map(|&((kind, id), score)| (kind, id, score))
            .collect();
        let mut read = store.item_hits(missing).await?;
        let mut hits = Vec::with_capacity(page.len());
        for ((kind, id), score) in &page {
            let key = Some((*kind, *id));
            let found = match lexical_hits.iter().position(|h| item_key(&h.id) == key) {
                Some(i) => Some(lexical_hits.swap_remove(i)),
                None => read
                    .iter()
                    .position(|h| item_key(&h.id) == key)
                    .map(|i| read.swap_remove(i)),
            };
            if let Some(mut h) = found {
                h.score = Some(*score);
                hits.push(h);
            }
        }
        Ok(GrepReport {
            fts_query: None,
            hits,
            next_offset: (ranked.len() > q.offset + limit).then_some(q.offset + limit),
            scan_truncated: false,
        })
    }
}

fn item_key(id: &str) -> Option<(ItemKind, i64)> {
    match ids::parse(id).ok()? {
        RecordId::Message(n) => Some((ItemKind::Message, n)),
        RecordId::Summary(n) => Some((ItemKind::Summary, n)),
    }
}

/// `lcm_grep` by its mode: `semantic` and `hybrid` through `semantic` when there is one
/// (`hybrid` is `any_term` without; `semantic` is an error saying how to get a model),
/// `auto` is `hybrid` with a model and `full_text` without, the others the store's own.
pub async fn grep(
    store: &dyn Backend,
    semantic: Option<&Semantic>,
    mut q: GrepQuery,
) -> Result<GrepReport> {
    match (q.mode, semantic) {
        (GrepMode::Semantic | GrepMode::Hybrid, Some(s)) => s.grep(store, q).await,
        (GrepMode::Auto, Some(s)) => {
            q.mode = GrepMode::Hybrid;
            s.grep(store, q).await
        }
        (GrepMode::Semantic, None) => Err(LosslessError::InvalidInput(format!(
            "mode semantic needs an embedding model: set {} to a sentence-transformers model \
             directory (scripts/fetch-embed-model fetches all-MiniLM-L6-v2) or configure \
             \"embeddings\"",
            clawctx_embed::MODEL_ENV
        ))),
        (GrepMode::Hybrid, None) => {
            q.mode = GrepMode::AnyTerm;
            store.grep(q).await
        }
        (GrepMode::Auto, None) => {
            q.mode = GrepMode::FullText;
            store.grep(q).await
        }
        _ => store.grep(q).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Debug, Default)]
    struct Counting(AtomicUsize);

    #[async_trait::async_trait]
    impl Embedder for Counting {
        fn model_id(&self) -> &str {
            "counting"
        }
        fn dim(&self) -> usize {
            2
        }
        async fn embed(
            &self,
            texts: &[String],
        ) -> std::result::Result<Vec<Vec<f32>>, clawctx_embed::EmbedError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(texts.iter().map(|t| vec![t.len() as f32, 1.0]).collect())
        }
    }

    #[tokio::test]
    async fn the_same_query_twice_runs_the_model_once() {
        let model = Arc::new(Counting::default());
        let s = Semantic::new(model.clone());
        let a = s.embed_query("which database?").await.unwrap();
        let b = s.embed_query("which database?").await.unwrap();
        assert_eq!(a, b);
        assert_eq!(model.0.load(Ordering::SeqCst), 1);
        let c = s.embed_query("another question").await.unwrap();
        assert_ne!(a, c);
        assert_eq!(model.0.load(Ordering::SeqCst), 2);
    }
}
