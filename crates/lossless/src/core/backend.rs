//! The storage boundary: what the lossless engine asks of a store, whichever database holds it.
//!
//! Two backends implement [`Backend`]: the embedded SQLite store ([`crate::LosslessStore`], the
//! default, one file per agent) and the PostgreSQL store ([`crate::pg::PgStore`], one database
//! several gateways share). The engine ([`crate::engine`]) and the recall tools
//! ([`crate::tools`]) hold an `Arc<dyn Backend>` and never see SQL. What a backend does is
//! storage and reads; the decisions are written once, above it, and each backend calls them:
//! compaction planning and the summary rounds ([`crate::core::compaction`]), packing the budgeted
//! context ([`crate::core::assemble`]'s packer), the prompt-recall block
//! ([`crate::core::prompt_recall`]), ranking ([`crate::core::search`]) and the message codec
//! ([`crate::core::codec`]).
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

use crate::config::LosslessConfig;
use crate::core::assemble::Assembled;
use crate::core::codec;
use crate::core::compaction::{CompactionOptions, CompactionReport};
use crate::core::conv::{ConvKey, ConvRow, IngestOutcome, TurnCommit};
use crate::core::doctor::{DoctorReport, StatusReport};
use crate::core::import::ImportReport;
use crate::core::prompt_recall::PromptRecall;
use crate::core::recall::GrepHit;
use crate::core::recall::{DescribeReport, ExpandReport, GrepQuery, GrepReport, Scope};
use crate::core::retention::RetentionReport;
use crate::core::semantic::rows::{Done, EmbedItem, EmbedModel, ItemKind, NewVector, VectorRow};
use crate::core::session::CarryReport;
use crate::error::Result;

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
    /// (`cacheBlockShare`, see [`crate::core::assemble`]); `0`: the front moves every turn.
    pub cache_block_share: f64,
    /// Show the whole frontier when it fits the whole budget, the recall reserve and the
    /// remembered front notwithstanding (see [`crate::core::assemble::Hysteresis::whole_first`]).
    pub whole_first: bool,
    /// The session's messages most like the prompt by meaning, for the `<recalled>` block
    /// ([`crate::core::semantic::Semantic::prompt_hits`]; empty without an embedding model).
    pub semantic: Vec<crate::core::search::RankedMessage>,
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
/// views are its supertrait [`crate::core::inspect::Inspect`].
#[async_trait]
pub trait Backend: crate::core::inspect::Inspect + Send + Sync + std::fmt::Debug {
    /// Which database this is.
    fn kind(&self) -> BackendKind;
    /// Where it is, fit for logs and errors: a file path, or a connection string without
    /// its password.
    fn location(&self) -> String;
    /// The store itself, for the operator tools that work on one kind of store only (see
    /// `as_sqlite` on `dyn Backend`).
    fn as_any(&self) -> &dyn std::any::Any;

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
    /// `to` (see [`crate::sqlite::Db::carry_summaries`]).
    async fn carry_summaries(
        &self,
        from: &ConvKey,
        to: &ConvKey,
        min_depth: i64,
    ) -> Result<CarryReport>;
    /// Archives the active conversation of `key`.
    async fn archive(&self, key: &ConvKey) -> Result<bool>;
    /// Payload retention (see [`crate::core::retention`]).
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

    // Semantic recall's queries; the logic around them is [`crate::core::semantic`]'s.

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
                crate::core::search::prompt_terms(&text)
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
