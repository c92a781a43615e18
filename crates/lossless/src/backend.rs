//! The storage boundary: what the lossless engine asks of a store, whichever database holds it.
//!
//! Two backends implement [`Backend`]: the embedded SQLite store ([`LosslessStore`], the
//! default, one file per agent) and the PostgreSQL store ([`crate::pg::PgStore`], one database
//! several gateways share). The engine ([`crate::engine`]) and the recall tools
//! ([`crate::tools`]) hold an `Arc<dyn Backend>` and never see SQL. What a backend does is
//! storage and reads; the decisions are written once, above it, and each backend calls them:
//! compaction planning and the summary rounds ([`crate::compaction`]), packing the budgeted
//! context ([`crate::assemble`]'s packer), the prompt-recall block
//! ([`crate::prompt_recall`]), ranking ([`crate::search`]) and the message codec
//! ([`crate::store::codec`]).
//!
//! Invariants every backend keeps (the engine relies on them, the backend test suite checks
//! them on both):
//! - an acknowledged write is durable and visible to every later call on any handle of the
//!   same store (for PostgreSQL: on any node);
//! - ingest is idempotent by message identity within a conversation, and `commitTurn` by
//!   `advancementKey`, also under concurrent re-sends;
//! - a compaction round commits all of its summaries or none, and never over a frontier range
//!   that changed since it was planned;
//! - errors name what failed; a connection string's password never appears in one.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use clawctx_protocol::AgentMessage;
use clawctx_summarize::Summarizer;

use crate::assemble::Assembled;
use crate::compaction::{CompactionOptions, CompactionReport};
use crate::config::LosslessConfig;
use crate::doctor::{DoctorReport, StatusReport};
use crate::error::Result;
use crate::import::ImportReport;
use crate::prompt_recall::PromptRecall;
use crate::recall::GrepHit;
use crate::recall::{DescribeReport, ExpandReport, GrepQuery, GrepReport, Scope};
use crate::retention::RetentionReport;
use crate::semantic::rows::{Done, EmbedItem, EmbedModel, ItemKind, NewVector, VectorRow};
use crate::session::CarryReport;
use crate::store::codec::{self, Encoded};
use crate::store::{ConvKey, ConvRow, Db, EncodeQueue, IngestOutcome, LosslessStore, TurnCommit};

/// What `assemble` asks the store for (see [`Backend::assemble`]).
#[derive(Clone, Debug)]
pub struct AssembleRequest {
    /// The conversation.
    pub key: ConvKey,
    /// The host's newest messages (oldest first): those the store has not seen are the live
    /// tail of the context.
    pub recent: Vec<AgentMessage>,
    /// Token budget.
    pub budget: u64,
    /// The host's `prompt`, when it gave one.
    pub prompt: Option<String>,
    /// Tokens reserved for the prompt-recall block (0 = no recall).
    pub recall_reserve: u64,
    /// Messages the block quotes at most.
    pub recall_max_messages: usize,
    /// Tokens the block may use at most when the history leaves more room than the reserve
    /// (`promptRecallMaxTokens`).
    pub recall_max_tokens: u64,
    /// Share of the history budget dropped at once when the context is full
    /// (`cacheBlockShare`, see [`crate::assemble`]); `0`: the front moves every turn.
    pub cache_block_share: f64,
    /// Show the whole frontier when it fits the whole budget, the recall reserve and the
    /// remembered front notwithstanding (see [`crate::assemble::Hysteresis::whole_first`]).
    pub whole_first: bool,
    /// The session's messages most like the prompt by meaning, for the `<recalled>` block
    /// ([`crate::semantic::Semantic::prompt_hits`]; empty without an embedding model).
    pub semantic: Vec<crate::search::RankedMessage>,
    /// Whether the block ranks by words too (`false`: `recallMethod` `semantic`, meaning only).
    pub lexical_recall: bool,
}

/// Which kind of database a backend is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// The embedded SQLite file.
    Sqlite,
    /// A PostgreSQL database.
    Postgres,
}

/// A held compaction lock of one conversation; dropping it releases the lock.
pub type CompactionLock = Box<dyn Send + Sync>;

/// The operations of a lossless store (see the module header). The dashboard's read-only
/// views are its supertrait [`crate::inspect::Inspect`].
#[async_trait]
pub trait Backend: crate::inspect::Inspect + Send + Sync + std::fmt::Debug {
    /// Which database this is.
    fn kind(&self) -> BackendKind;
    /// Where it is, fit for logs and errors: a file path, or a connection string without
    /// its password.
    fn location(&self) -> String;
    /// The SQLite store, when this is one (for the operator tools that are SQLite-only).
    fn as_sqlite(&self) -> Option<&LosslessStore> {
        None
    }

    /// Whether the store answers now (a readiness probe: one round trip to a database server,
    /// nothing for a local file).
    async fn ping(&self) -> Result<()> {
        Ok(())
    }

    /// The active conversation of `key`.
    async fn conversation(&self, key: &ConvKey) -> Result<Option<ConvRow>>;

    /// Every conversation, archived ones included.
    async fn conversations(&self) -> Result<Vec<ConvRow>>;
    /// Stores `msgs` in one transaction, skipping those already stored (by identity).
    async fn ingest(&self, key: &ConvKey, msgs: Vec<AgentMessage>) -> Result<IngestOutcome>;
    /// `commitTurn`: stores `msgs` and records `advancement_key` in one transaction, once per
    /// key ([`TurnCommit::Duplicate`] the second time).
    async fn commit_turn(
        &self,
        key: &ConvKey,
        advancement_key: &str,
        msgs: Vec<AgentMessage>,
    ) -> Result<TurnCommit>;
    /// The budgeted context of `req.key`'s conversation, with the conversation; `None` when
    /// the store has no conversation for it.
    async fn assemble(&self, req: AssembleRequest) -> Result<Option<(ConvRow, Assembled)>>;
    /// Takes the compaction lock of conversation `conv_id` (one compaction at a time per
    /// conversation, across every process sharing the store): waits for it with `wait`,
    /// else `None` when someone holds it.
    async fn lock_compaction(&self, conv_id: i64, wait: bool) -> Result<Option<CompactionLock>>;
    /// Runs one compaction of `conv_id` (the caller holds its lock).
    async fn compact(
        &self,
        conv_id: i64,
        summarizer: Arc<dyn Summarizer>,
        cfg: Arc<LosslessConfig>,
        opts: CompactionOptions,
    ) -> Result<CompactionReport>;
    /// `/new` and forks: carries summaries of depth ≥ `min_depth` from `from`'s frontier to
    /// `to` (see [`Db::carry_summaries`]).
    async fn carry_summaries(
        &self,
        from: &ConvKey,
        to: &ConvKey,
        min_depth: i64,
    ) -> Result<CarryReport>;
    /// Archives the active conversation of `key`.
    async fn archive(&self, key: &ConvKey) -> Result<bool>;
    /// Payload retention (see [`crate::retention`]).
    async fn expire_payloads(&self, cutoff_ms: i64, apply: bool) -> Result<RetentionReport>;
    /// Imports an OpenClaw JSONL session file into `key`'s conversation (`apply = false`:
    /// report only). With `only_into_empty`, a conversation that has messages already is
    /// left alone and `None` comes back (`bootstrap`).
    async fn import_jsonl(
        &self,
        key: &ConvKey,
        path: PathBuf,
        apply: bool,
        only_into_empty: bool,
    ) -> Result<Option<ImportReport>>;

    /// `lcm_grep`.
    async fn grep(&self, query: GrepQuery) -> Result<GrepReport>;
    /// `lcm_describe` (`agent`: the caller's agent, which scopes it; `None` = operator).
    async fn describe(&self, id: &str, agent: Option<&str>) -> Result<DescribeReport>;
    /// `lcm_expand`.
    async fn expand(&self, id: &str, max_tokens: u64, agent: Option<&str>) -> Result<ExpandReport>;
    /// Size, counts, growth.
    async fn status(&self) -> Result<StatusReport>;
    /// Integrity checks.
    async fn doctor(&self) -> Result<DoctorReport>;
    /// Closes the store, waiting until what it holds is on disk.
    async fn close(&self);

    /// Conversation rows a scope covers.
    async fn scope_conversations(&self, scope: Scope) -> Result<Vec<i64>>;

    // Semantic recall's queries; the logic around them is [`crate::semantic`]'s.

    /// The row of embedding model `name`, registered with `dim` when new (an error when it
    /// was registered with another length).
    async fn embed_model(&self, name: &str, dim: usize) -> Result<EmbedModel>;
    /// Up to `limit` items `model` has not embedded: messages, then summaries, oldest first.
    async fn embed_todo(&self, model: i64, limit: usize) -> Result<Vec<EmbedItem>>;
    /// Stores `rows` of `model` and moves its progress to `done` in one transaction, skipping
    /// rows another embedder stored meanwhile. Returns the vectors stored.
    async fn store_vectors(&self, model: i64, rows: Vec<NewVector>, done: Done) -> Result<usize>;
    /// The vectors of `model` stored after row `after` in each `(conversation, after)`.
    async fn vectors_since(
        &self,
        model: i64,
        dim: usize,
        wants: Vec<(i64, i64)>,
    ) -> Result<Vec<VectorRow>>;
    /// `(items embedded, items stored)` for `model`.
    async fn embed_progress(&self, model: i64) -> Result<(u64, u64)>;
    /// Grep hits for `(kind, id, score)` items, in their order (items gone are left out).
    async fn item_hits(&self, items: Vec<(ItemKind, i64, f64)>) -> Result<Vec<GrepHit>>;
}

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

/// Which of the host's `recent` messages (oldest first) are live, i.e. not stored yet: the
/// newest ones after the last stored one. `stored` tells whether a message's identity is in
/// the conversation. Shared by every backend.
pub(crate) fn live_tail(
    recent: &[AgentMessage],
    mut stored: impl FnMut(Option<i64>, i64) -> Result<bool>,
) -> Result<usize> {
    let mut first_live = recent.len();
    while first_live > 0 {
        let (ts, hash) = codec::identity(&recent[first_live - 1])?;
        if stored(ts, hash)? {
            break;
        }
        first_live -= 1;
    }
    Ok(first_live)
}

/// What prompt recall searches for this assembly, from the live messages: a new user prompt
/// (the host's `prompt`, else its text); a prompt the host appends after the context (every
/// host message already stored) gets the block last. `convs`: the session's conversations.
pub(crate) fn recall_for(
    req: &AssembleRequest,
    live: &[AgentMessage],
    convs: impl FnOnce() -> Result<Vec<i64>>,
) -> Result<Option<PromptRecall>> {
    let prompt = req.prompt.clone().filter(|p| !p.trim().is_empty());
    let wanted = match live.last() {
        Some(last @ AgentMessage::User(_)) => {
            Some((prompt.unwrap_or_else(|| last.plain_text()), false))
        }
        None => prompt.map(|p| (p, true)),
        _ => None,
    };
    Ok(match wanted {
        Some((text, prompt_follows)) if req.recall_reserve > 0 => Some(PromptRecall {
            terms: if req.lexical_recall {
                crate::search::prompt_terms(&text)
            } else {
                Vec::new()
            },
            convs: convs()?,
            reserve: req.recall_reserve,
            max_tokens: req.recall_max_tokens.max(req.recall_reserve),
            max_messages: req.recall_max_messages,
            semantic: req.semantic.clone(),
            prompt_follows,
        }),
        _ => None,
    })
}

#[async_trait]
impl Backend for LosslessStore {
    fn kind(&self) -> BackendKind {
        BackendKind::Sqlite
    }

    fn location(&self) -> String {
        self.path().display().to_string()
    }

    fn as_sqlite(&self) -> Option<&LosslessStore> {
        Some(self)
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
                let hysteresis = crate::assemble::Hysteresis {
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
        crate::compaction::compact_conversation(self, summarizer, cfg, conv_id, opts).await
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
            let (msgs, mut report) = crate::import::read_openclaw_jsonl(&path)?;
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
