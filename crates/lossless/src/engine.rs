//! `LosslessEngine`: the `ContextEngine` implementation, its factory and registration.
//!
//! Lifecycle mapping: `ingest`/`ingestBatch` store messages idempotently; `afterTurn` stores
//! the turn's new messages (those past `prePromptMessageCount`); `commitTurn` (durable admitted
//! turns, declared in `info`) stores an accepted turn and its `advancementKey` in one
//! transaction, once per key; `assemble` returns the budgeted frontier plus the host's messages
//! the store has not seen yet (the current prompt); `compact` compacts (now, with `force`);
//! `bootstrap` imports the session transcript into an empty conversation; `prepareSubagentSpawn`
//! gives a forked child the parent's summaries. One compaction per conversation runs at a time
//! (a process lock on SQLite, an advisory lock on PostgreSQL, so also across gateways).
//!
//! Replies never wait for summaries: `info.turnMaintenanceMode` is `"background"`, so the host
//! calls `maintain` after the reply on a per-session lane with
//! `runtimeContext.allowDeferredCompactionExecution`, and that call pays the threshold
//! compaction a turn left as debt (the frontier over `contextThreshold × budget`: the debt is
//! the stored state itself, nothing else to persist or lose). `afterTurn`/`commitTurn` compact in
//! the foreground only when the frontier is over the whole budget (the model's window would be
//! exceeded: assembly would have to leave stored messages out) and the host has not been seen
//! maintaining the conversation in the background (then that call pays it, whatever the size),
//! and never wait for a compaction already running. A background pass that is aborted (runtime shutdown, gateway SIGTERM) is
//! dropped between or inside rounds: each round commits its summaries in one transaction, so
//! what it leaves is either committed or never written, and the next turn's maintenance picks
//! the debt up again. `backgroundCompaction: false` restores inline compaction.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use clawctx_engine::registry::{
    factory, ContextEngineRegistry, Factory, FactoryContext, RegisterOutcome,
};
use clawctx_engine::{
    AgentTool, CallContext, ContextEngine, EngineError, Method, MethodSet, SubagentSpawnPreparation,
};
use clawctx_protocol::*;
use clawctx_summarize::{ExtractiveSummarizer, Summarizer};

use crate::config::{LosslessConfig, StoreLocation};
use crate::core::backend::{AssembleRequest, Backend};
use crate::core::compaction::{CompactionOptions, CompactionReport};
use crate::core::conv::{ConvKey, ConvRow, TurnCommit};
use crate::core::session::CarryReport;
use crate::error::{LosslessError, Result};
use crate::pg::connect::PgTarget;
use crate::pg::PgStore;
use crate::policy::{SessionMode, SessionPolicy};
use crate::sqlite::LosslessStore;
use crate::ENGINE_ID;

/// An assemble budget under this is not one history is compacted into before an assembly
/// (`LosslessEngine::make_room`): OpenClaw passes a budget of 1 when its system prompt alone
/// fills the window, and compacting for it would summarize everything.
const MIN_ROOM_BUDGET: u64 = 1_000;

/// The lossless engine.
pub struct LosslessEngine {
    store: Arc<dyn Backend>,
    cfg: Arc<LosslessConfig>,
    policy: SessionPolicy,
    summarizer: Arc<dyn Summarizer>,
    message_budgets: MessageBudgets,
    last_recalls: Arc<crate::api::LastRecalls>,
    own_blocks: OwnBlocks,
    /// Semantic recall, when the engine has an embedding model ([`Self::with_embedder`]).
    semantic: Option<Arc<crate::core::semantic::Semantic>>,
    /// Its background embedder, stopped with the engine.
    embed_task: Option<crate::core::semantic::EmbedTask>,
}

/// The summary and `<recalled>` blocks of each conversation's last assembly, by the SHA-256
/// of their text: how the host's second assemble of one model call (which passes the first
/// result back) is told from a conversation whose user typed something that merely looks like
/// a block (`<summary id="sum_1" depth="1">…`). Kept in memory; a summary block not found here
/// (another gateway on the same store assembled it, or this one restarted) is checked against
/// the store instead ([`LosslessEngine::own_blocks_of`]).
#[derive(Debug, Default)]
struct OwnBlocks {
    inner: std::sync::Mutex<HashMap<ConvKey, Vec<[u8; 32]>>>,
}

impl OwnBlocks {
    /// Conversations remembered at most; past it the map starts over (a second assemble then
    /// checks its summaries against the store).
    const MAX: usize = 4096;
    /// Summary blocks looked up in the store at most per assemble (a message that looks like
    /// one and is not costs a lookup).
    const MAX_LOOKUPS: usize = 8;

    fn digest(text: &str) -> [u8; 32] {
        use sha2::Digest;
        sha2::Sha256::digest(text.as_bytes()).into()
    }

    /// Records the blocks among `messages` (an assembly's output) as `key`'s, leaving out
    /// any message the host passed in (`input`): a user's look-alike kept in the output as a
    /// conversation message is not a block the engine made.
    fn set(&self, key: &ConvKey, messages: &[AgentMessage], input: &[AgentMessage]) {
        let given: std::collections::HashSet<[u8; 32]> = input
            .iter()
            .filter(|m| crate::core::assemble::is_own_block(m))
            .map(|m| Self::digest(&m.plain_text()))
            .collect();
        let digests: Vec<[u8; 32]> = messages
            .iter()
            .filter(|m| crate::core::assemble::is_own_block(m))
            .map(|m| Self::digest(&m.plain_text()))
            .filter(|d| !given.contains(d))
            .collect();
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= Self::MAX && !map.contains_key(key) {
            map.clear();
        }
        map.insert(key.clone(), digests);
    }

    fn contains(&self, key: &ConvKey, text: &str) -> bool {
        let map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key)
            .is_some_and(|d| d.contains(&Self::digest(text)))
    }
}

/// The message budget each conversation's host last assembled with, for the compaction
/// thresholds of the turn's end and of maintenance.
///
/// A host that renders its own system prompt and tool schemas (OpenClaw: about 12.6k tokens)
/// passes `assemble` the window less that overhead, but `afterTurn`, `commitTurn` and
/// `maintain` the whole window (`runtimeContext.tokenBudget`). An engine that owns compaction
/// makes OpenClaw skip its own overflow precheck, so compacting against the whole window would
/// let the stored history grow past what the next request has room for. The engine therefore
/// compacts against the smaller of the budget it is given and the smallest assemble budget of
/// the conversation's last turn (OpenClaw assembles twice per call, the second time with a
/// larger budget). A degenerate assemble budget is left out: one smaller than the fresh tail
/// at the given budget (OpenClaw passes `tokenBudget = 1` when its system prompt alone does not
/// fit the window) is no room compaction could ever bring the history down to, and taking it
/// would summarize everything on every turn. Kept in memory: after a restart the first turn's
/// assemble sets it again.
///
/// It also remembers which conversations a host maintains in the background (`maintain` with
/// `allowDeferredCompactionExecution`, after the reply): their turns leave all compaction to
/// that call, so a reply never waits for a summary (`commitTurn`, `afterTurn`).
#[derive(Default)]
struct MessageBudgets {
    inner: std::sync::Mutex<HashMap<ConvKey, TurnBudget>>,
}

#[derive(Clone, Default)]
struct TurnBudget {
    /// The assemble budgets since the turn began (at most [`MessageBudgets::PER_TURN`], the
    /// smallest kept when more come).
    budgets: Vec<u64>,
    /// A turn ended since they were set: the next assemble starts a new turn.
    ended: bool,
    /// The host ran background maintenance (`allowDeferredCompactionExecution`) for it.
    maintained_in_background: bool,
}

impl MessageBudgets {
    /// Conversations remembered at most; past it the map starts over (an engine serving more
    /// sessions than this loses only the refinement for one turn each).
    const MAX: usize = 65_536;
    /// Assemble budgets kept per turn (a tool loop assembles once per model call).
    const PER_TURN: usize = 16;

    fn entry<'a>(map: &'a mut HashMap<ConvKey, TurnBudget>, key: &ConvKey) -> &'a mut TurnBudget {
        if map.len() >= Self::MAX && !map.contains_key(key) {
            map.clear();
        }
        // A new conversation starts as if its last turn had ended.
        map.entry(key.clone()).or_insert(TurnBudget {
            ended: true,
            ..Default::default()
        })
    }

    fn assembled(&self, key: &ConvKey, budget: u64) {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let entry = Self::entry(&mut map, key);
        if entry.ended {
            entry.budgets.clear();
            entry.ended = false;
        }
        entry.budgets.push(budget);
        if entry.budgets.len() > Self::PER_TURN {
            entry.budgets.sort_unstable();
            entry.budgets.truncate(Self::PER_TURN);
        }
    }

    /// The host maintains `key` in the background.
    fn maintained_in_background(&self, key: &ConvKey) {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        Self::entry(&mut map, key).maintained_in_background = true;
    }

    /// Whether the host maintains `key` in the background.
    fn host_maintains(&self, key: &ConvKey) -> bool {
        let map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key).is_some_and(|e| e.maintained_in_background)
    }

    /// The budget to compact against: `given`, or less when the host assembled with less,
    /// leaving out assemble budgets under `floor` (degenerate ones). `end_turn` marks the turn
    /// over (`afterTurn`, `commitTurn`).
    fn limit(&self, key: &ConvKey, given: u64, floor: u64, end_turn: bool) -> u64 {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        match map.get_mut(key) {
            Some(entry) => {
                entry.ended |= end_turn;
                entry
                    .budgets
                    .iter()
                    .copied()
                    .filter(|b| *b >= floor.max(2))
                    .fold(given, u64::min)
            }
            None => given,
        }
    }
}

impl std::fmt::Debug for LosslessEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LosslessEngine")
            .field("store", &self.store)
            .field("summarizer", &self.summarizer.name())
            .finish()
    }
}

impl LosslessEngine {
    /// An engine over an open SQLite store, with the extractive summarizer.
    pub fn new(store: LosslessStore, cfg: LosslessConfig) -> Result<Self> {
        let large = cfg.large_payload_bytes;
        store.call_blocking(move |db| {
            db.set_large_payload_bytes(large);
            Ok(())
        })?;
        Self::over(Arc::new(store), cfg)
    }

    /// An engine over any open backend, with the extractive summarizer.
    pub fn over(store: Arc<dyn Backend>, cfg: LosslessConfig) -> Result<Self> {
        let policy = SessionPolicy::new(
            &cfg.ignore_session_patterns,
            &cfg.read_only_session_patterns,
        )?;
        Ok(Self {
            store,
            cfg: Arc::new(cfg),
            policy,
            summarizer: Arc::new(ExtractiveSummarizer),
            message_budgets: MessageBudgets::default(),
            last_recalls: Arc::default(),
            own_blocks: OwnBlocks::default(),
            semantic: None,
            embed_task: None,
        })
    }

    /// Turns semantic recall on with `embedder` (see [`crate::core::semantic`]): the `<recalled>`
    /// block and `lcm_grep` fuse vector hits with the lexical ranking, and a background task
    /// (on the current tokio runtime, stopped with the engine) embeds what is stored.
    pub fn with_embedder(mut self, embedder: Arc<dyn clawctx_embed::Embedder>) -> Self {
        let semantic = Arc::new(
            crate::core::semantic::Semantic::new(embedder)
                .with_min_score(self.cfg.semantic_min_score),
        );
        self.embed_task = Some(semantic.spawn(self.store.clone()));
        semantic.wake();
        self.semantic = Some(semantic);
        self
    }

    /// The engine's semantic recall, when it has an embedding model.
    pub fn semantic(&self) -> Option<&Arc<crate::core::semantic::Semantic>> {
        self.semantic.as_ref()
    }

    /// Tells the background embedder that messages were stored.
    fn stored(&self) {
        if let Some(s) = &self.semantic {
            s.wake();
        }
    }

    /// The session's messages most like the prompt of this assembly by meaning (none without
    /// a model, a prompt or room for the `<recalled>` block): the host's `prompt`, else its
    /// newest message when that is the user's.
    async fn semantic_hits(
        &self,
        key: &ConvKey,
        params: &AssembleParams,
        reserve: u64,
    ) -> Vec<crate::core::search::RankedMessage> {
        let Some(s) = &self.semantic else {
            return Vec::new();
        };
        if self.cfg.recall_method == crate::config::RecallMethod::Lexical {
            return Vec::new();
        }
        let text = match params.prompt.as_deref().filter(|p| !p.trim().is_empty()) {
            Some(p) => p.to_owned(),
            None => match params.messages.last() {
                Some(m @ AgentMessage::User(_)) => m.plain_text(),
                _ => return Vec::new(),
            },
        };
        if reserve == 0 || text.trim().is_empty() {
            return Vec::new();
        }
        s.prompt_hits(
            &*self.store,
            key,
            &text,
            self.cfg.prompt_recall_max_messages,
        )
        .await
    }

    /// Opens the store at `path` (blocking) and builds an engine.
    pub fn open(path: impl AsRef<Path>, cfg: LosslessConfig) -> Result<Self> {
        let store = LosslessStore::open_durable(path, cfg.busy_timeout_ms, cfg.durability)?;
        Self::new(store, cfg)
    }

    /// Replaces the summarizer (e.g. an LLM-backed one); the extractive summarizer stays the
    /// last resort.
    pub fn with_summarizer(mut self, summarizer: Arc<dyn Summarizer>) -> Self {
        self.summarizer = summarizer;
        self
    }

    /// The SQLite store, when the engine runs on one.
    pub fn store(&self) -> Option<&LosslessStore> {
        self.store.as_sqlite()
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.store
    }

    /// The configuration.
    pub fn config(&self) -> &LosslessConfig {
        &self.cfg
    }

    /// Recall and inspection over this engine's own store, with its configuration.
    pub fn recall(&self) -> crate::api::Recall {
        crate::api::Recall::new(
            self.store.clone(),
            self.cfg.clone(),
            self.policy.clone(),
            self.last_recalls.clone(),
            self.semantic.clone(),
        )
    }

    /// Which of `messages` are blocks this engine made for `key`'s conversation: byte for byte
    /// a block of its last assembly, or a summary block equal to the store's rendering of that
    /// summary of this conversation. A message that only looks like one is not.
    async fn own_blocks_of(&self, key: &ConvKey, messages: &[AgentMessage]) -> Result<Vec<bool>> {
        let mut ours = vec![false; messages.len()];
        let mut conv_id = None;
        let mut lookups = 0;
        for (i, m) in messages.iter().enumerate() {
            if !crate::core::assemble::is_own_block(m) {
                continue;
            }
            let text = m.plain_text();
            if self.own_blocks.contains(key, &text) {
                ours[i] = true;
                continue;
            }
            let Some((id, _)) = crate::core::assemble::parse_summary_header(&text) else {
                continue;
            };
            let Ok(crate::core::ids::RecordId::Summary(n)) = crate::core::ids::parse(&id) else {
                continue;
            };
            if lookups == OwnBlocks::MAX_LOOKUPS {
                continue;
            }
            lookups += 1;
            if conv_id.is_none() {
                match self.store.conversation(key).await? {
                    Some(conv) => conv_id = Some(conv.id),
                    None => break,
                }
            }
            let Ok(crate::core::recall::DescribeReport::Summary(info)) =
                self.store.describe(&id, None).await
            else {
                continue;
            };
            let rendered = crate::core::assemble::render_summary(
                n,
                info.depth,
                info.from_ts,
                info.to_ts,
                &info.text,
            );
            ours[i] = Some(info.conversation_id) == conv_id && rendered.plain_text() == text;
        }
        Ok(ours)
    }

    fn mode(&self, key: &ConvKey) -> SessionMode {
        if !self.cfg.enabled {
            return SessionMode::Ignored;
        }
        self.policy.mode(&key.session_key)
    }

    fn budget(&self, given: Option<u64>, rc: Option<&ContextEngineRuntimeContext>) -> u64 {
        given
            .or_else(|| rc.and_then(|r| r.token_budget))
            .filter(|b| *b > 0)
            .unwrap_or(self.cfg.default_token_budget)
    }

    /// The budget `key` compacts against when it is given `given` (see [`MessageBudgets`]).
    fn turn_budget(&self, key: &ConvKey, given: u64, end_turn: bool) -> u64 {
        let floor = self.cfg.fresh_tail_tokens(given);
        self.message_budgets.limit(key, given, floor, end_turn)
    }

    /// The frontier size above which a turn (`afterTurn`, `commitTurn`) compacts before it
    /// returns: the threshold when compaction is inline, the whole budget (the model's window)
    /// when it is background maintenance's debt.
    fn foreground_limit(&self, budget: u64) -> u64 {
        if self.cfg.background_compaction {
            budget
        } else {
            self.cfg.threshold_tokens(budget)
        }
    }

    /// Compacts the conversation of `key` when its frontier is over `limit` tokens (a
    /// compaction then goes down to the low-water mark of `budget`). `conv` is the
    /// conversation as the storing transaction left it; `None` reads it. Never waits for a
    /// compaction of the same conversation already running (here or, on PostgreSQL, in another
    /// gateway): that one covers this turn too. `Some(report)` when it compacted.
    async fn compact_over(
        &self,
        key: &ConvKey,
        conv: Option<ConvRow>,
        budget: u64,
        limit: u64,
    ) -> Result<Option<CompactionReport>> {
        let conv = match conv {
            Some(conv) => conv,
            None => match self.store.conversation(key).await? {
                Some(conv) => conv,
                None => return Ok(None),
            },
        };
        if (conv.frontier_tokens.max(0) as u64) <= limit {
            return Ok(None);
        }
        let Some(_lock) = self.store.lock_compaction(conv.id, false).await? else {
            return Ok(None);
        };
        let opts = CompactionOptions {
            budget,
            ..Default::default()
        };
        let report = self
            .store
            .compact(conv.id, self.summarizer.clone(), self.cfg.clone(), opts)
            .await?;
        tracing::debug!(?report, "lossless: threshold compaction");
        Ok(Some(report))
    }

    /// The compaction a turn cannot leave to background maintenance: over the threshold when
    /// compaction is inline, over the whole budget when it is background debt.
    async fn compact_after_turn(
        &self,
        key: &ConvKey,
        conv: Option<ConvRow>,
        budget: u64,
    ) -> Result<()> {
        if self.cfg.background_compaction && self.message_budgets.host_maintains(key) {
            // The host's `maintain` after the reply pays it: the reply never waits for a summary.
            return Ok(());
        }
        self.compact_over(key, conv, budget, self.foreground_limit(budget))
            .await
            .map(|_| ())
    }

    /// Background maintenance's part of `maintain`: pays the conversation's compaction debt
    /// (frontier over the threshold) unless `abort` fires first, in which case the pass is
    /// dropped (each round is one transaction: nothing half-written) and the debt stays for
    /// the next run.
    async fn pay_compaction_debt(
        &self,
        key: &ConvKey,
        budget: u64,
        abort: Option<&clawctx_engine::AbortSignal>,
    ) -> Result<()> {
        let work = self.compact_over(key, None, budget, self.cfg.threshold_tokens(budget));
        let outcome = match abort {
            Some(signal) => {
                tokio::select! {
                    r = work => Some(r?),
                    _ = signal.aborted() => None,
                }
            }
            None => Some(work.await?),
        };
        match outcome {
            None => tracing::info!(
                session = %key.session_key,
                "lossless: background compaction abandoned (shutting down); the next turn's maintenance compacts"
            ),
            Some(Some(report)) => tracing::debug!(?report, "lossless: background compaction"),
            Some(None) => {}
        }
        Ok(())
    }

    /// Stored history is about to leave the context of a conversation the host maintains in
    /// the background (the frontier does not fit the budget: maintenance after the last reply
    /// has not caught up, or its summary model is slow; a host that does not maintain in the
    /// background has its turns compact over the whole budget instead). Only for a turn's
    /// assembly (one given the prompt, or with messages of the host's not stored yet): an
    /// inspection through the engine API at another budget leaves history out rather than
    /// rewrite the turns' context.
    /// Compacts
    /// conversation `conv_id` now with the extractive summarizer (no model call, milliseconds)
    /// so that summaries take the history's place instead of a sliding window. A background
    /// pass running meanwhile is not waited for: whichever commits second finds its planned
    /// ranges changed and skips them. `true` when it compacted (the caller assembles again).
    async fn make_room(&self, conv_id: i64, budget: u64) -> Result<bool> {
        let _lock = self.store.lock_compaction(conv_id, false).await?;
        let opts = CompactionOptions {
            budget,
            ..Default::default()
        };
        let report = self
            .store
            .compact(
                conv_id,
                Arc::new(ExtractiveSummarizer),
                self.cfg.clone(),
                opts,
            )
            .await?;
        tracing::debug!(
            ?report,
            "lossless: compacted before the assembly dropped history"
        );
        Ok(report.created() > 0)
    }

    /// Compacts the active conversation of `key` (waits for a running compaction of the same
    /// conversation). `None` when there is no conversation.
    pub async fn compact_session(
        &self,
        key: &ConvKey,
        opts: CompactionOptions,
    ) -> Result<Option<CompactionReport>> {
        let Some(conv) = self.store.conversation(key).await? else {
            return Ok(None);
        };
        let _lock = self.store.lock_compaction(conv.id, true).await?;
        self.store
            .compact(conv.id, self.summarizer.clone(), self.cfg.clone(), opts)
            .await
            .map(Some)
    }

    /// `/new` or `/reset`: summaries of depth ≥ `newSessionRetainDepth` carry over from the
    /// old session's frontier to the new one. With the same key the old conversation is
    /// archived (still searchable) and a fresh one starts.
    pub async fn on_session_reset(
        &self,
        old_session_key: &str,
        new_session_key: &str,
    ) -> Result<CarryReport> {
        let from = ConvKey::from_host(Some(old_session_key), old_session_key);
        let to = ConvKey::from_host(Some(new_session_key), new_session_key);
        if self.mode(&to) != SessionMode::Normal {
            return Ok(CarryReport::default());
        }
        let depth = self.cfg.new_session_retain_depth;
        self.store.carry_summaries(&from, &to, depth).await
    }

    /// The recall tools (also returned by [`ContextEngine::tools`]).
    pub fn recall_tools(&self) -> Vec<Arc<dyn AgentTool>> {
        crate::tools::recall_tools(self.store.clone(), self.cfg.clone(), self.semantic.clone())
    }
}

/// The engine's `info`.
pub fn lossless_info() -> ContextEngineInfo {
    ContextEngineInfo {
        id: ENGINE_ID.into(),
        name: "Lossless Context Engine".into(),
        version: Some(env!("CARGO_PKG_VERSION").into()),
        owns_compaction: Some(true),
        // Threshold compaction is paid by `maintain` after the reply (see the module header).
        turn_maintenance_mode: Some(TurnMaintenanceMode::Background),
        // The engine owns compaction and builds the prompt itself: on a host that does not
        // let assemble() control the prompt (a generic CLI backend) its history would diverge
        // from what the model saw, so it refuses to run there (contract §5).
        host_requirements: Some(
            [(
                clawctx_protocol::ContextEngineOperation::AgentRun,
                clawctx_protocol::ContextEngineHostRequirements {
                    required_capabilities: vec!["assemble-before-prompt".into(), "after-turn".into()],
                    unsupported_message: Some(
                        "Use the embedded runtime for this agent, or select the legacy context engine.".into(),
                    ),
                },
            )]
            .into_iter()
            .collect(),
        ),
        accepted_host_params: Some(
            [
                "sessionKey",
                "prompt",
                "runtimeSettings",
                "sessionTarget",
                "runtimeContext",
                "abortSignal",
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect(),
        ),
        // Durable admitted turns (contract §1.7): assemble returns the stored history plus
        // the host's messages the store has not seen, never storing them, so the host may
        // append the current turn after assembly; `commitTurn` stores an accepted turn once
        // per `advancementKey`.
        transcript_semantics: Some(TranscriptSemantics {
            current_turn_fence: Some(TranscriptSemantics::FENCE_V1.into()),
            turn_advancement_idempotency: Some(TranscriptSemantics::IDEMPOTENCY_V1.into()),
        }),
        ..Default::default()
    }
}

impl crate::api::Recall {
    /// The handle of `engine` when it is a lossless engine (also behind the quarantine guard,
    /// which hands out the engine it wraps); `None` for any other engine.
    pub fn of(engine: &dyn ContextEngine) -> Option<crate::api::Recall> {
        engine
            .as_any()?
            .downcast_ref::<LosslessEngine>()
            .map(LosslessEngine::recall)
    }
}

#[async_trait]
impl ContextEngine for LosslessEngine {
    fn info(&self) -> ContextEngineInfo {
        let mut info = lossless_info();
        if !self.cfg.background_compaction {
            info.turn_maintenance_mode = Some(TurnMaintenanceMode::Foreground);
        }
        info
    }

    fn methods(&self) -> MethodSet {
        MethodSet::REQUIRED
            .with(Method::IngestBatch)
            .with(Method::Bootstrap)
            .with(Method::Maintain)
            .with(Method::AfterTurn)
            .with(Method::CommitTurn)
            .with(Method::PrepareSubagentSpawn)
            .with(Method::OnSubagentEnded)
            .with(Method::Dispose)
    }

    fn tools(&self) -> Vec<Arc<dyn AgentTool>> {
        self.recall_tools()
    }

    /// For [`crate::api::Recall::of`].
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    async fn ingest(
        &self,
        params: &IngestParams,
        _cx: &CallContext,
    ) -> Result<IngestResult, EngineError> {
        let key = ConvKey::from_host(params.session_key.as_deref(), &params.session_id);
        if self.mode(&key) != SessionMode::Normal {
            return Ok(IngestResult { ingested: false });
        }
        let stored = self
            .store
            .ingest(&key, vec![params.message.clone()])
            .await?
            .stored;
        self.stored();
        Ok(IngestResult {
            ingested: stored.first().copied().unwrap_or(false),
        })
    }

    async fn ingest_batch(
        &self,
        params: &IngestBatchParams,
        _cx: &CallContext,
    ) -> Result<IngestBatchResult, EngineError> {
        let key = ConvKey::from_host(params.session_key.as_deref(), &params.session_id);
        if self.mode(&key) != SessionMode::Normal {
            return Ok(IngestBatchResult { ingested_count: 0 });
        }
        let stored = self
            .store
            .ingest(&key, params.messages.clone())
            .await?
            .stored;
        self.stored();
        Ok(IngestBatchResult {
            ingested_count: stored.iter().filter(|s| **s).count() as u64,
        })
    }

    async fn assemble(
        &self,
        params: &AssembleParams,
        _cx: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        let key = ConvKey::from_host(params.session_key.as_deref(), &params.session_id);
        let budget = self.budget(params.token_budget, params.runtime_context.as_ref());
        let mode = self.mode(&key);
        self.message_budgets.assembled(&key, budget);
        if mode != SessionMode::Ignored {
            // The host's second assemble of one model call passes the first result back.
            let ours = self.own_blocks_of(&key, &params.messages).await?;
            if let Some(out) =
                crate::core::assemble::reassemble_own_output(&params.messages, budget, &ours)
            {
                let conv = self.store.conversation(&key).await?;
                return Ok(AssembleResult {
                    messages: out.messages,
                    estimated_tokens: out.tokens,
                    system_prompt_addition: Some(crate::core::assemble::system_prompt_addition(
                        params.available_tools.as_deref(),
                    )),
                    prompt_authority: None,
                    context_projection: conv.map(|conv| ContextProjection {
                        mode: ContextProjectionMode::ThreadBootstrap,
                        epoch: Some(format!("{}:{}", conv.id, conv.epoch)),
                        fingerprint: None,
                    }),
                });
            }
        }
        // Live candidates: the host's newest messages, checked newest-first against the store.
        let window = (self.cfg.fresh_tail_count + 16).min(params.messages.len());
        let recent = || params.messages[params.messages.len() - window..].to_vec();
        let stored = if mode == SessionMode::Ignored {
            None
        } else {
            let maintained = self.message_budgets.host_maintains(&key);
            let semantic = self
                .semantic_hits(&key, params, self.cfg.prompt_recall_reserve(budget))
                .await;
            let request = |recent: Vec<AgentMessage>| AssembleRequest {
                key: key.clone(),
                recent,
                budget,
                prompt: params.prompt.clone(),
                recall_reserve: self.cfg.prompt_recall_reserve(budget),
                recall_max_messages: self.cfg.prompt_recall_max_messages,
                recall_max_tokens: self.cfg.prompt_recall_max_tokens,
                cache_block_share: self.cfg.cache_block_share,
                whole_first: maintained,
                semantic: semantic.clone(),
                lexical_recall: self.cfg.recall_method != crate::config::RecallMethod::Semantic,
            };
            match self.store.assemble(request(recent())).await? {
                Some((conv, out))
                    if out.truncated
                        && maintained
                        && mode == SessionMode::Normal
                        && (params.prompt.is_some() || out.live > 0)
                        && budget >= MIN_ROOM_BUDGET
                        && self.make_room(conv.id, budget).await? =>
                {
                    // Rare (maintenance behind): the request is built again rather than
                    // cloned on every assembly.
                    self.store.assemble(request(recent())).await?
                }
                stored => stored,
            }
        };
        if let Some((_, out)) = &stored {
            self.last_recalls.set(&key, out.recall_hits.clone());
            self.own_blocks.set(&key, &out.messages, &params.messages);
        }
        let Some((conv, out)) = stored else {
            // No stored conversation (or an ignored session): the host's messages, clamped.
            let mut report = Default::default();
            let messages =
                clawctx_engine::pipeline::fit_budget(params.messages.clone(), budget, &mut report);
            let mut messages = messages;
            crate::core::assemble::shrink_to_fit(&mut messages, budget);
            let estimated_tokens = clawctx_tokens::messages_tokens(&messages);
            return Ok(AssembleResult {
                messages,
                estimated_tokens,
                ..Default::default()
            });
        };
        Ok(AssembleResult {
            messages: out.messages,
            estimated_tokens: out.tokens,
            system_prompt_addition: Some(crate::core::assemble::system_prompt_addition(
                params.available_tools.as_deref(),
            )),
            prompt_authority: None,
            context_projection: Some(ContextProjection {
                mode: ContextProjectionMode::ThreadBootstrap,
                epoch: Some(format!("{}:{}", conv.id, conv.epoch)),
                fingerprint: None,
            }),
        })
    }

    async fn compact(
        &self,
        params: &CompactParams,
        _cx: &CallContext,
    ) -> Result<CompactResult, EngineError> {
        let key = ConvKey::from_host(params.session_key.as_deref(), &params.session_id);
        if self.mode(&key) != SessionMode::Normal {
            return Ok(CompactResult {
                ok: true,
                compacted: false,
                reason: Some("session is not compacted by policy".into()),
                result: None,
            });
        }
        let mut opts = CompactionOptions {
            budget: self.budget(params.token_budget, params.runtime_context.as_ref()),
            force: params.force.unwrap_or(false),
            custom_instructions: params.custom_instructions.clone(),
            fresh_tail: None,
        };
        let Some(mut report) = self.compact_session(&key, opts.clone()).await? else {
            return Ok(CompactResult {
                ok: true,
                compacted: false,
                reason: Some("no stored conversation".into()),
                result: None,
            });
        };
        // Overflow recovery: the host's request did not fit (`force` with `compactionTarget:
        // "budget"`, OpenClaw after a provider's context overflow), and a failed recovery fails
        // the user's turn. When the pass freed less than the host says is needed
        // (`currentTokenCount` over the budget; unknown: anything at all), reach into the fresh
        // tail: first keeping the newest exchange, then keeping nothing raw. A user's manual
        // `/compact` (`forceReason: "manual"`) is not a recovery: it keeps the fresh tail.
        let manual = params.force_reason == Some(ForceReason::Manual);
        let budget_target = !manual
            && match params.compaction_target {
                Some(clawctx_protocol::CompactionTarget::Budget) => true,
                Some(clawctx_protocol::CompactionTarget::Threshold) => false,
                None => params.current_token_count.is_some(),
            };
        if opts.force && budget_target {
            let needed = params
                .current_token_count
                .or_else(|| {
                    params
                        .runtime_context
                        .as_ref()
                        .and_then(|r| r.current_token_count)
                        .map(|n| n.max(0.0) as u64)
                })
                .map_or(1, |n| n.saturating_sub(opts.budget).max(1));
            for tail in [2usize, 0] {
                let freed = report.tokens_before.saturating_sub(report.tokens_after);
                if (report.created() > 0 && freed >= needed) || self.cfg.fresh_tail_count <= tail {
                    continue;
                }
                opts.fresh_tail = Some(tail);
                if let Some(r) = self.compact_session(&key, opts.clone()).await? {
                    report.rounds += r.rounds;
                    report.leaf_created += r.leaf_created;
                    report.condensed_created += r.condensed_created;
                    report.failed += r.failed;
                    report.extractive_used += r.extractive_used;
                    report.engine_micros += r.engine_micros;
                    report.summarizer_micros += r.summarizer_micros;
                    report.tokens_after = r.tokens_after;
                    report.reason = format!(
                        "{} (reaching into the fresh tail, {tail} raw messages kept)",
                        r.reason
                    );
                }
            }
        }
        Ok(CompactResult {
            ok: true,
            compacted: report.created() > 0,
            reason: Some(report.reason.clone()),
            result: Some(CompactResultDetail {
                tokens_before: report.tokens_before,
                tokens_after: Some(report.tokens_after),
                details: serde_json::to_value(&report).ok(),
                ..Default::default()
            }),
        })
    }

    async fn after_turn(
        &self,
        params: &AfterTurnParams,
        _cx: &CallContext,
    ) -> Result<(), EngineError> {
        let key = ConvKey::from_host(params.session_key.as_deref(), &params.session_id);
        if self.mode(&key) != SessionMode::Normal {
            return Ok(());
        }
        let start = (params.pre_prompt_message_count as usize).min(params.messages.len());
        let outcome = self
            .store
            .ingest(&key, params.messages[start..].to_vec())
            .await?;
        self.stored();
        let given = self.budget(params.token_budget, params.runtime_context.as_ref());
        let budget = self.turn_budget(&key, given, true);
        self.compact_after_turn(&key, outcome.conv, budget).await?;
        Ok(())
    }

    /// One atomic, idempotent write keyed by `advancementKey` (contract §1.7): the turn's
    /// messages and the key go into the store in one transaction (`Db::commit_turn`). The
    /// first write answers `committed` and runs the same turn compaction as `afterTurn`;
    /// a key committed before (a retry from the host's outbox, also after a restart) answers
    /// `duplicate` and writes nothing.
    ///
    /// A session the engine never writes (ignored or read-only by policy, or the engine
    /// disabled) answers `committed` without storing or recording anything: there is nothing
    /// the host could ever retry into the store, and an error would only keep the turn in the
    /// host's outbox forever. A compaction failure after the commit is logged, not returned:
    /// the turn is durable, and the next committed turn compacts again. A blank
    /// `advancementKey` is refused: without a key there is nothing to be idempotent by.
    async fn commit_turn(
        &self,
        params: &CommitTurnParams,
        _cx: &CallContext,
    ) -> Result<CommitTurnResult, EngineError> {
        if params.advancement_key.trim().is_empty() {
            return Err(LosslessError::InvalidInput(
                "commitTurn needs a non-empty advancementKey".into(),
            )
            .into());
        }
        let key = ConvKey::from_host(params.session_key.as_deref(), &params.session_id);
        if self.mode(&key) != SessionMode::Normal {
            return Ok(CommitTurnResult {
                status: CommitTurnStatus::Committed,
            });
        }
        let written = self
            .store
            .commit_turn(&key, &params.advancement_key, params.messages.clone())
            .await?;
        self.stored();
        let TurnCommit::Committed(outcome) = written else {
            return Ok(CommitTurnResult {
                status: CommitTurnStatus::Duplicate,
            });
        };
        let given = self.budget(None, params.runtime_context.as_ref());
        let budget = self.turn_budget(&key, given, true);
        if let Err(e) = self.compact_after_turn(&key, outcome.conv, budget).await {
            tracing::warn!("lossless: threshold compaction after commitTurn failed: {e}");
        }
        Ok(CommitTurnResult {
            status: CommitTurnStatus::Committed,
        })
    }

    async fn bootstrap(
        &self,
        params: &BootstrapParams,
        _cx: &CallContext,
    ) -> Result<BootstrapResult, EngineError> {
        let key = ConvKey::from_host(params.session_key.as_deref(), &params.session_id);
        if self.mode(&key) != SessionMode::Normal {
            return Ok(BootstrapResult {
                bootstrapped: false,
                reason: Some("session is not stored by policy".into()),
                ..Default::default()
            });
        }
        let path = PathBuf::from(&params.session_file);
        if params.session_file.is_empty() || !path.exists() {
            return Ok(BootstrapResult {
                bootstrapped: false,
                reason: Some("no session file".into()),
                ..Default::default()
            });
        }
        // OpenClaw 2026.8+ keeps transcripts in SQLite and passes the session key here as a
        // legacy marker ("agent:main:x"): never read a relative name from the working
        // directory as a transcript. Its history comes through `ingestBatch` (the bridge).
        if !path.is_absolute() || !path.is_file() {
            return Ok(BootstrapResult {
                bootstrapped: false,
                reason: Some(format!(
                    "sessionFile {:?} is not a transcript file's absolute path (OpenClaw 2026.8+ passes the session key); history is taken through ingestBatch",
                    params.session_file
                )),
                ..Default::default()
            });
        }
        let imported = self
            .store
            .import_jsonl(&key, path, true, true)
            .await?
            .map(|report| report.new_messages as u64);
        Ok(match imported {
            Some(n) => BootstrapResult {
                bootstrapped: true,
                imported_messages: Some(n),
                reason: None,
            },
            None => BootstrapResult {
                bootstrapped: false,
                reason: Some("conversation already has history".into()),
                ..Default::default()
            },
        })
    }

    /// Background maintenance (`allowDeferredCompactionExecution`, after the reply) pays the
    /// session's compaction debt first; every call then applies payload retention. Inline
    /// maintenance (bootstrap, after a compaction) has no permission to compact.
    async fn maintain(
        &self,
        params: &MaintainParams,
        cx: &CallContext,
    ) -> Result<TranscriptRewriteResult, EngineError> {
        let rc = params.runtime_context.as_ref();
        let deferred_allowed = rc
            .and_then(|r| r.allow_deferred_compaction_execution)
            .unwrap_or(false);
        let key = ConvKey::from_host(params.session_key.as_deref(), &params.session_id);
        if self.cfg.background_compaction
            && deferred_allowed
            && self.mode(&key) == SessionMode::Normal
        {
            self.message_budgets.maintained_in_background(&key);
            let budget = self.turn_budget(&key, self.budget(None, rc), false);
            self.pay_compaction_debt(&key, budget, cx.abort.as_ref())
                .await?;
        }
        if let Some(days) = self.cfg.payload_retention_days {
            let cutoff = crate::core::conv::now_ms() - (days * 86_400_000.0) as i64;
            let report = self.store.expire_payloads(cutoff, true).await?;
            if report.payloads_expired > 0 {
                tracing::info!(
                    "lossless: retention removed {} payloads ({} bytes, {} messages)",
                    report.payloads_expired,
                    report.bytes_freed,
                    report.messages_rewritten
                );
            }
        }
        Ok(TranscriptRewriteResult {
            reason: Some("lossless keeps its own store; the transcript is not rewritten".into()),
            ..Default::default()
        })
    }

    async fn prepare_subagent_spawn(
        &self,
        params: &PrepareSubagentSpawnParams,
        _cx: &CallContext,
    ) -> Result<Option<SubagentSpawnPreparation>, EngineError> {
        if params.context_mode != Some(SubagentContextMode::Fork) {
            return Ok(None);
        }
        let from = ConvKey::from_host(Some(&params.parent_session_key), &params.parent_session_key);
        let to = ConvKey::from_host(Some(&params.child_session_key), &params.child_session_key);
        if self.mode(&to) != SessionMode::Normal {
            return Ok(None);
        }
        self.store.carry_summaries(&from, &to, 0).await?;
        let store = self.store.clone();
        Ok(Some(SubagentSpawnPreparation::new(move || async move {
            store
                .archive(&to)
                .await
                .map(|_| ())
                .map_err(EngineError::from)
        })))
    }

    async fn probe(&self) -> Result<(), EngineError> {
        self.store.ping().await.map_err(EngineError::from)
    }

    async fn on_subagent_ended(
        &self,
        _params: &SubagentEndedParams,
        _cx: &CallContext,
    ) -> Result<(), EngineError> {
        Ok(())
    }

    async fn dispose(&self) -> Result<(), EngineError> {
        // Waits for the connection to close, so a host that exits after `dispose` leaves the
        // log checkpointed and the newest messages' index in the file.
        self.store.close().await;
        Ok(())
    }
}

/// Where the database goes when `databasePath` is not set.
pub fn default_database_path(ctx: &FactoryContext) -> PathBuf {
    if let Some(dir) = &ctx.agent_dir {
        return dir.join("lossless.db");
    }
    let state = std::env::var_os("CLAWCTX_STATE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".clawctx"))
                .unwrap_or_else(|| PathBuf::from(".clawctx"))
        });
    state.join("lossless.db")
}

/// The factory: reads `plugins.entries.lossless.config`, opens the store (SQLite off the
/// runtime, or connects to PostgreSQL, see [`LosslessConfig::store_location`]), and summarizes
/// with the host's summarizer ([`FactoryContext::host_summarizer`]) when there is one.
pub fn lossless_factory() -> Factory {
    factory(|ctx: FactoryContext| async move {
        let cfg = ctx
            .config
            .as_deref()
            .map(LosslessConfig::from_host_config)
            .unwrap_or_default();
        let engine = match cfg.store_location()? {
            StoreLocation::Postgres(url) => {
                let target = PgTarget::parse(&url)?;
                tracing::info!("lossless: store in PostgreSQL at {}", target.redacted());
                // A server that is down at start is waited for (degraded until it answers).
                let store = PgStore::open_or_wait(target, cfg.pool_size)
                    .await?
                    .with_large_payload_bytes(cfg.large_payload_bytes);
                LosslessEngine::over(Arc::new(store), cfg)?
            }
            StoreLocation::Sqlite(path) => {
                let path = path.unwrap_or_else(|| default_database_path(&ctx));
                tokio::task::spawn_blocking(move || LosslessEngine::open(&path, cfg))
                    .await
                    .map_err(|e| {
                        EngineError::failed(format!("lossless: open task failed: {e}"))
                    })??
            }
        };
        // The host's model summarizes when it offers one; the compaction's own guard and
        // breaker fall back to the extractive summarizer when it keeps failing.
        let state_dir = default_database_path(&ctx)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let engine = match ctx.host_summarizer {
            Some(summarizer) => engine.with_summarizer(summarizer),
            None => engine,
        };
        // Semantic recall when a model is configured or found; a model named but unusable is
        // logged (and shown by `doctor`), and recall stays lexical rather than the engine
        // failing over to legacy.
        let lexical_only = engine.config().recall_method == crate::config::RecallMethod::Lexical;
        let found = if lexical_only {
            Ok(None)
        } else {
            crate::core::semantic::model::embedder_for(engine.config(), &state_dir).await
        };
        let engine = match found {
            Ok(Some(embedder)) => engine.with_embedder(embedder),
            Ok(None) => engine,
            Err(e) => {
                tracing::error!("lossless: semantic recall off: {e}");
                engine
            }
        };
        Ok(Arc::new(engine) as Arc<dyn ContextEngine>)
    })
}

/// Registers the engine as plugin `lossless` (owner `plugin:lossless`, slot id `lossless`).
pub fn register(registry: &ContextEngineRegistry) -> Result<RegisterOutcome, EngineError> {
    registry.register_plugin_engine(ENGINE_ID, ENGINE_ID, lossless_factory())
}

#[cfg(test)]
mod durability_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::config::Durability;
    use crate::sqlite::LosslessStore;

    fn synchronous(store: &LosslessStore) -> i64 {
        store
            .call_blocking(|db| {
                Ok(db
                    .conn
                    .query_row("PRAGMA synchronous", [], |r| r.get::<_, i64>(0))?)
            })
            .unwrap()
    }

    #[test]
    fn durability_full_syncs_every_commit_and_normal_is_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LosslessConfig::from_value(&serde_json::json!({}));
        assert_eq!(cfg.durability, Durability::Normal);
        let normal = LosslessStore::open(dir.path().join("n.db")).unwrap();
        assert_eq!(synchronous(&normal), 1, "NORMAL");
        let cfg = LosslessConfig::from_value(&serde_json::json!({"durability": "full"}));
        assert_eq!(cfg.durability, Durability::Full);
        let e = crate::LosslessEngine::open(dir.path().join("f.db"), cfg).unwrap();
        assert_eq!(synchronous(e.store().unwrap()), 2, "FULL");
    }
}
