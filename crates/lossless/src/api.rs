//! The library API: async methods on [`LosslessStore`] behind `clawctx lcm
//! grep|describe|expand|status|doctor|import`, returning serializable reports, and [`Recall`],
//! the recall and inspection handle over a running engine's own store. Synchronous callers can
//! use [`LosslessStore::call_read_blocking`] (reads) and [`LosslessStore::call_blocking`]
//! (writes) with the same [`Db`](crate::sqlite::Db) methods. Every read here runs on the store's
//! read thread (SQLite) or a pooled connection (PostgreSQL), off the path of turns (see
//! [`crate::sqlite`]).
//!
//! Why [`Recall`]: a host that serves recall next to turns (the gateway's recall routes, its
//! dashboard, its MCP server) must read the store the engine writes, with the engine's own
//! configuration (pool size, large-payload setting, where the file is). Opening a second store
//! from config re-derived those and diverged; [`Recall::of`] takes them from the engine.

use std::path::PathBuf;
use std::sync::Arc;

use crate::config::LosslessConfig;
use crate::core::assemble::SYSTEM_PROMPT_ADDITION;
use crate::core::backend::{AssembleRequest, Backend};
use crate::core::conv::{ConvKey, ConvRow};
use crate::core::doctor::{DoctorReport, StatusReport};
use crate::core::import::ImportReport;
use crate::core::recall::{DescribeReport, ExpandReport, GrepQuery, GrepReport};
use crate::error::Result;
use crate::policy::{SessionMode, SessionPolicy};
use crate::sqlite::LosslessStore;

/// Recall and inspection over a lossless engine's own store (see the module header). Cheap to
/// clone: the store and the configuration are shared with the engine.
#[derive(Clone, Debug)]
pub struct Recall {
    store: Arc<dyn Backend>,
    cfg: Arc<LosslessConfig>,
    policy: SessionPolicy,
    last_recalls: Arc<LastRecalls>,
    semantic: Option<Arc<crate::core::semantic::Semantic>>,
}

/// What [`Recall::assemble`] answers: the context the engine would send.
#[derive(Clone, Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AssembledContext {
    /// The messages, oldest first (summaries, the `<recalled>` block, raw messages).
    pub messages: Vec<clawctx_protocol::AgentMessage>,
    /// Their tokens (within the budget).
    pub estimated_tokens: u64,
    /// The engine's system prompt addition, when a stored conversation answered.
    pub system_prompt_addition: Option<String>,
    /// Summaries among the messages.
    pub summaries: usize,
    /// Stored messages quoted because they match the prompt.
    pub recalled: usize,
    /// Whether older frontier items were left out for the budget.
    pub truncated: bool,
}

/// What [`Recall::ingest`] did.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IngestCount {
    /// Messages stored now.
    pub stored: usize,
    /// Messages the conversation already held (ingest is idempotent).
    pub duplicates: usize,
    /// Whether the session's policy lets the engine write it at all.
    pub writable: bool,
}

impl Recall {
    pub(crate) fn new(
        store: Arc<dyn Backend>,
        cfg: Arc<LosslessConfig>,
        policy: SessionPolicy,
        last_recalls: Arc<LastRecalls>,
        semantic: Option<Arc<crate::core::semantic::Semantic>>,
    ) -> Self {
        Self {
            store,
            cfg,
            policy,
            last_recalls,
            semantic,
        }
    }

    /// The engine's semantic recall, when it has an embedding model.
    pub fn semantic(&self) -> Option<&Arc<crate::core::semantic::Semantic>> {
        self.semantic.as_ref()
    }

    /// Why each message of `key`'s last `<recalled>` block was quoted, best first (empty: the
    /// engine's last assembly for it quoted nothing); `None` when this process has not
    /// assembled it. In memory, for the per-turn trace.
    pub fn last_recall(&self, key: &ConvKey) -> Option<Vec<crate::core::prompt_recall::RecallHit>> {
        self.last_recalls.get(key)
    }

    fn mode(&self, key: &ConvKey) -> SessionMode {
        if !self.cfg.enabled {
            return SessionMode::Ignored;
        }
        self.policy.mode(&key.session_key)
    }

    /// The engine's store; its [`crate::core::inspect::Inspect`] views are the dashboard's.
    pub fn store(&self) -> &Arc<dyn Backend> {
        &self.store
    }

    /// The engine's configuration.
    pub fn config(&self) -> &LosslessConfig {
        &self.cfg
    }

    /// Where the store is, for errors: the SQLite file, or the PostgreSQL URL without its
    /// password.
    pub fn location(&self) -> String {
        self.store.location()
    }

    /// Searches history (see [`GrepQuery`]).
    pub async fn grep(&self, query: GrepQuery) -> Result<GrepReport> {
        crate::core::semantic::grep(&*self.store, self.semantic.as_deref(), query).await
    }

    /// Describes `sum_<n>` or `msg_<n>`, within `agent`'s conversations when given.
    pub async fn describe(&self, id: &str, agent: Option<&str>) -> Result<DescribeReport> {
        self.store.describe(id, agent).await
    }

    /// Expands `sum_<n>` (or shows `msg_<n>`) within `max_tokens` (default: the engine's
    /// `maxExpandTokens`), within `agent`'s conversations when given.
    pub async fn expand(
        &self,
        id: &str,
        max_tokens: Option<u64>,
        agent: Option<&str>,
    ) -> Result<ExpandReport> {
        let max = max_tokens.unwrap_or(self.cfg.max_expand_tokens).max(1);
        self.store.expand(id, max, agent).await
    }

    /// Every conversation row.
    pub async fn conversations(&self) -> Result<Vec<ConvRow>> {
        self.store.conversations().await
    }

    /// What the engine's `assemble` would answer for the stored conversation of `key` within
    /// `budget` (default: the engine's `defaultTokenBudget`) for `prompt`, with no new
    /// messages from a host: the same packing, summaries and prompt recall. A session the
    /// engine ignores, or one it never stored, answers an empty context. On SQLite this runs on
    /// the store thread, as a turn's assembly does.
    pub async fn assemble(
        &self,
        key: &ConvKey,
        budget: Option<u64>,
        prompt: Option<String>,
    ) -> Result<AssembledContext> {
        if self.mode(key) == SessionMode::Ignored {
            return Ok(AssembledContext::default());
        }
        let budget = budget
            .filter(|b| *b > 0)
            .unwrap_or(self.cfg.default_token_budget);
        let semantic = match (&self.semantic, prompt.as_deref()) {
            (Some(s), Some(p)) if !p.trim().is_empty() => {
                s.prompt_hits(&*self.store, key, p, self.cfg.prompt_recall_max_messages)
                    .await
            }
            _ => Vec::new(),
        };
        let found = self
            .store
            .assemble(AssembleRequest {
                key: key.clone(),
                recent: Vec::new(),
                budget,
                prompt,
                recall_reserve: self.cfg.prompt_recall_reserve(budget),
                recall_max_messages: self.cfg.prompt_recall_max_messages,
                recall_max_tokens: self.cfg.prompt_recall_max_tokens,
                cache_block_share: self.cfg.cache_block_share,
                // As for a session its host maintains in the background (every host of ours).
                whole_first: true,
                semantic,
                lexical_recall: self.cfg.recall_method != crate::config::RecallMethod::Semantic,
            })
            .await?;
        Ok(match found {
            Some((_, out)) => AssembledContext {
                messages: out.messages,
                estimated_tokens: out.tokens,
                system_prompt_addition: Some(SYSTEM_PROMPT_ADDITION.to_owned()),
                summaries: out.summaries,
                recalled: out.recalled,
                truncated: out.truncated,
            },
            None => AssembledContext::default(),
        })
    }

    /// Stores `messages` in `key`'s conversation as the engine's `ingestBatch` does
    /// (idempotent; nothing for a session the engine's policy ignores or keeps read-only).
    pub async fn ingest(
        &self,
        key: &ConvKey,
        messages: Vec<clawctx_protocol::AgentMessage>,
    ) -> Result<IngestCount> {
        if self.mode(key) != SessionMode::Normal {
            return Ok(IngestCount::default());
        }
        let total = messages.len();
        let stored = self
            .store
            .ingest(key, messages)
            .await?
            .stored
            .iter()
            .filter(|s| **s)
            .count();
        Ok(IngestCount {
            stored,
            duplicates: total - stored,
            writable: true,
        })
    }
}

impl LosslessStore {
    /// Searches history (see [`GrepQuery`]).
    pub async fn grep(&self, query: GrepQuery) -> Result<GrepReport> {
        self.call_read(move |db| db.grep(&query)).await
    }

    /// Describes `sum_<n>` or `msg_<n>` (unscoped: operator view).
    pub async fn describe(&self, id: &str) -> Result<DescribeReport> {
        let id = id.to_owned();
        self.call_read(move |db| db.describe(&id, None)).await
    }

    /// Expands `sum_<n>` into its children (or shows `msg_<n>`) within `max_tokens`.
    pub async fn expand(&self, id: &str, max_tokens: u64) -> Result<ExpandReport> {
        let id = id.to_owned();
        self.call_read(move |db| db.expand(&id, max_tokens, None))
            .await
    }

    /// Size, counts, growth.
    pub async fn status(&self) -> Result<StatusReport> {
        self.call_read(|db| db.status()).await
    }

    /// Integrity checks.
    pub async fn doctor(&self) -> Result<DoctorReport> {
        self.call_read(|db| db.doctor()).await
    }

    /// Every conversation row.
    pub async fn conversations(&self) -> Result<Vec<ConvRow>> {
        self.call_read(|db| db.conversations()).await
    }

    /// Imports an OpenClaw JSONL session file into `key`'s conversation; `apply = false` only
    /// reports what would be imported.
    pub async fn import_openclaw_jsonl(
        &self,
        path: impl Into<PathBuf>,
        key: ConvKey,
        apply: bool,
    ) -> Result<ImportReport> {
        let path = path.into();
        self.call(move |db| {
            let (msgs, mut report) = crate::core::import::read_openclaw_jsonl(&path)?;
            db.import_messages(&key, &msgs, apply, &mut report)?;
            Ok(report)
        })
        .await
    }
}

/// Why each message of a conversation's last `<recalled>` block was quoted (scores, the
/// question an answer follows), for the per-turn trace: the block's text says which messages,
/// not why. Kept in memory, newest assembly per conversation; the host's second assemble of a
/// model call passes the first block back and leaves this as it is.
#[derive(Debug, Default)]
pub(crate) struct LastRecalls {
    inner: std::sync::Mutex<
        std::collections::HashMap<ConvKey, Vec<crate::core::prompt_recall::RecallHit>>,
    >,
}

impl LastRecalls {
    /// Conversations remembered at most; past it the map starts over (a trace then lacks the
    /// scores of one turn).
    const MAX: usize = 4096;

    pub(crate) fn set(&self, key: &ConvKey, hits: Vec<crate::core::prompt_recall::RecallHit>) {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= Self::MAX && !map.contains_key(key) {
            map.clear();
        }
        map.insert(key.clone(), hits);
    }

    /// The hits of `key`'s last assembly (empty: it quoted nothing), `None` if none is known.
    pub(crate) fn get(&self, key: &ConvKey) -> Option<Vec<crate::core::prompt_recall::RecallHit>> {
        let map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key).cloned()
    }
}
