//! One agent turn on the embedded runner (contract §1.2, §1.7, §7, §9).
//!
//! The order of a turn: check host requirements → deliver commits waiting in the outbox
//! (durable engines) → `bootstrap` the first time the engine sees a session whose file already
//! existed, before the prompt is in it → persist the user message → assemble the pre-prompt
//! history (the session's whole prepared history, kept between turns by [`crate::history`];
//! budget = window − max output − reserve, minus the system prompt with the engine's addition,
//! the tool schemas and the pending turn messages) → precheck (non-owning engines, or
//! `promptAuthority: "preassembly_may_overflow"`): compact when it does not fit → model call,
//! streaming → tool loop (owning engines get afterTurn→assemble before every further call) →
//! persist every message as it happens → built-in auto-compaction for non-owning engines →
//! afterTurn / ingestBatch / ingest (or `commitTurn` through the outbox for durable engines) →
//! `maintain`. A provider context overflow makes the engine compact and the call is retried
//! exactly once. Whatever fails, the transcript stays a valid conversation: the user message is
//! kept, and tool calls cut short by an abort get error results. A turn whose prompt is the
//! session's last message, unanswered (a client retrying a failed request; entries outside
//! the context after it, such as the compaction of a failed overflow recovery, do not count),
//! continues from that entry instead of storing the prompt again.

use std::collections::HashSet;
use std::sync::Arc;

use clawctx_engine::compaction::should_compact;
use clawctx_engine::hooks::{PromptBuild, ToolCallDecision};
use clawctx_engine::pipeline::{fit_budget, sanitize, turn_limit_start, PipelineReport};
use clawctx_engine::*;
use clawctx_model::{
    Completion, CompletionRequest, EventSender, ModelError, Sampling, StopReason, ToolSpec,
};
use clawctx_protocol::*;
use clawctx_transcript::{ResolvedSession, TokenCounters};
use serde::Serialize;

use crate::error::{Result, RuntimeError};
use crate::history::History;
use crate::hooks::HookSite;
use crate::maintain::MaintenanceReason;
use crate::model::Backend;
use crate::runtime::{check_host, now_ms, tokens_of, AgentRuntime, Inner};

/// One user message to run.
#[derive(Clone, Debug, Default)]
pub struct TurnRequest {
    /// Session key (`agent:<id>:<bucket>`).
    pub session_key: String,
    /// The user's prompt.
    pub prompt: String,
    /// Cancels the turn (Ctrl-C). The transcript stays valid.
    pub abort: Option<AbortSignal>,
    /// Receives the model's streaming events (text deltas, tool-call starts).
    pub events: Option<EventSender>,
    /// A heartbeat run: the engine calls of this turn carry `isHeartbeat: true` (§1.2).
    pub is_heartbeat: bool,
    /// The caller's own tools (the gateway's OpenAI clients): offered to the model next to
    /// the runtime's, never run here. A reply that calls one ends the turn with the calls in
    /// [`TurnOutcome::client_tool_calls`] (the runtime's own calls in the same reply are run
    /// first); the caller answers them with [`TurnRequest::tool_results`].
    pub client_tools: Vec<ToolSpec>,
    /// Results of the client tool calls the session's last turn ended on. When not empty the
    /// turn continues that one: the results are stored in place of a user message (one the
    /// session already holds is skipped, so a caller may re-send them) and `prompt` is not
    /// used. Every open call must be answered; nothing is stored when they do not fit.
    pub tool_results: Vec<ToolResultMessage>,
    /// Appended to the configured system prompt for this turn's model calls (a client's own
    /// system messages); not stored in the transcript.
    pub system_extra: Option<String>,
    /// Images sent with the prompt (stored in the user message after its text).
    pub images: Vec<ImageContent>,
    /// The caller's settings for this turn's model calls.
    pub model_options: ModelOptions,
    /// Receives every `assemble` result of the turn with its budget (the gateway's dashboard
    /// shows the last one). Nothing is copied when absent.
    pub assembled: Option<tokio::sync::mpsc::UnboundedSender<AssembledView>>,
    /// Receives the turn's outcome once its answer is in the transcript and the engine has the
    /// turn (afterTurn or commitTurn done), before the session's counters are written and
    /// maintenance runs; the turn's future still resolves after those, with the complete
    /// outcome. A server answers its client from this so that bookkeeping is not on the
    /// client's wait (the session's next turn still waits for it). Not sent when the turn
    /// fails before its answer.
    pub answered: Option<tokio::sync::mpsc::UnboundedSender<TurnOutcome>>,
}

/// What one `assemble` call of a turn returned, and what it was given.
#[derive(Clone, Debug)]
pub struct AssembledView {
    /// The session id the call named.
    pub session_id: String,
    /// The `tokenBudget` the engine got.
    pub token_budget: u64,
    /// Stored messages it was given.
    pub history_messages: usize,
    /// The engine's answer, as returned (before the host folds system messages).
    pub result: AssembleResult,
}

/// A caller's settings for a turn's model calls (unset: the configured ones).
#[derive(Clone, Debug, Default)]
pub struct ModelOptions {
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Output token limit, at most the model's configured `maxTokens` (the context budget
    /// leaves room for that much only).
    pub max_output_tokens: Option<u64>,
    /// Further sampling settings and the tool choice.
    pub sampling: Sampling,
}

impl TurnRequest {
    /// A request for `prompt` on `session_key`.
    pub fn new(session_key: impl Into<String>, prompt: impl Into<String>) -> Self {
        Self {
            session_key: session_key.into(),
            prompt: prompt.into(),
            ..Default::default()
        }
    }
}

/// A compaction that happened during a turn.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionRecord {
    /// `auto` (built-in threshold), `overflow`, `preflight` or `manual`; `engine` for a
    /// compaction the engine ran on its own during the turn (lossless's, inside
    /// `afterTurn`/`commitTurn`), `maintenance` for one on the session's background lane
    /// after the reply (listed by `clawctx run --json`).
    pub trigger: String,
    /// Who compacted: the engine id, or `runtime` for the built-in auto-compaction.
    pub by: String,
    /// Tokens before, as reported (0 for an engine's own compaction: it reports none).
    pub tokens_before: u64,
    /// Tokens after, when reported.
    pub tokens_after: Option<u64>,
    /// How long it took (microseconds).
    pub micros: u64,
}

/// What a turn did.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnOutcome {
    /// Session key.
    pub session_key: String,
    /// Session id the turn ended on (a compaction successor when one was followed).
    pub session_id: String,
    /// The final assistant text.
    pub reply: String,
    /// The turn's messages, user message first, as persisted.
    pub messages: Vec<AgentMessage>,
    /// Tool calls executed.
    pub tool_calls: usize,
    /// Model calls made (retries included).
    pub model_calls: usize,
    /// Microseconds spent waiting for the model (every call, streaming included).
    pub model_micros: u64,
    /// Microseconds spent inside the engine's assemble, delivery (afterTurn, ingest,
    /// commitTurn), compact and maintain calls. What is left of a turn's wall time after the model and
    /// the engine is the host's own work.
    pub engine_micros: u64,
    /// Summed provider usage.
    pub usage: Usage,
    /// Microseconds of each `assemble` call of the turn, in order.
    pub assemble_micros: Vec<u64>,
    /// The engine in charge at the end of the turn.
    pub engine: String,
    /// The prompt token budget.
    pub token_budget: u64,
    /// Estimated tokens of the messages sent, per model call.
    pub prompt_tokens: Vec<u64>,
    /// Context tokens of the transcript before the turn.
    pub context_tokens_before: u64,
    /// Context tokens of the transcript after the turn (and any compaction).
    pub context_tokens_after: u64,
    /// Compactions during the turn that the host ran or asked for.
    pub compactions: Vec<CompactionRecord>,
    /// `contextProjection.epoch` of the turn's last assembly, when the engine gives one. An
    /// engine that compacts on its own (inside `afterTurn`, as `lossless` does) changes it, so
    /// a change between turns is how the host sees those compactions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_epoch: Option<String>,
    /// Whether a provider overflow was recovered by compaction and a retry.
    pub overflow_recovered: bool,
    /// The tool loop hit its bound before the model gave a final answer.
    pub tool_iterations_exhausted: bool,
    /// The turn ended on these calls of the caller's tools ([`TurnRequest::client_tools`]),
    /// stored and waiting for [`TurnRequest::tool_results`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub client_tool_calls: Vec<ToolCall>,
    /// Non-fatal problems (engine afterTurn failures and the like).
    pub warnings: Vec<String>,
    /// Why the turn's commit did not reach its durable engine (its store is down): the turn
    /// is in the transcript and its commit waits in the outbox, retried until the engine has
    /// it ([`crate::outbox`]). `None` when the engine acknowledged it (or got no commit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit_waiting: Option<String>,
}

impl AgentRuntime {
    /// Runs one turn.
    pub async fn run_turn(&self, request: TurnRequest) -> Result<TurnOutcome> {
        check_host(&self.inner, ContextEngineOperation::AgentRun)?;
        match &self.inner.backend {
            Backend::Model(_) => {
                let turn = EmbeddedTurn::start(self.inner.clone(), request)?;
                let (key, run_id, heartbeat) = (
                    turn.session.key.clone(),
                    turn.run_id.clone(),
                    turn.is_heartbeat,
                );
                let started = std::time::Instant::now();
                // The engine's own compactions during the turn are the turn's too.
                let count_in = Some((self.inner.store.clone(), key.clone()));
                let (result, passes) =
                    crate::engine_passes::collect(count_in, Box::pin(turn.run())).await;
                let result = result.map(|mut o| {
                    o.compactions
                        .extend(self.inner.engine_pass_records(&passes));
                    o
                });
                crate::hooks::agent_end(
                    &self.inner,
                    &key,
                    &run_id,
                    heartbeat,
                    result.as_ref().err(),
                    started,
                )
                .await;
                result
            }
            Backend::Cli(_) => {
                let count_in = Some((self.inner.store.clone(), request.session_key.clone()));
                let turn = Box::pin(crate::cli_turn::run(self.inner.clone(), request));
                let (result, passes) = crate::engine_passes::collect(count_in, turn).await;
                result.map(|mut o| {
                    o.compactions
                        .extend(self.inner.engine_pass_records(&passes));
                    o
                })
            }
        }
    }

    /// `/compact [instructions]`: the engine's `compact` with `force: true` and
    /// `forceReason: "manual"` (after the `manual-compact` host check).
    pub async fn compact(
        &self,
        session_key: &str,
        instructions: Option<String>,
    ) -> Result<CompactResult> {
        check_host(&self.inner, ContextEngineOperation::ManualCompact)?;
        let s = self.inner.session(session_key)?;
        let history = self.inner.history(&s)?;
        let current: Vec<AgentMessage> = history.into_iter().map(|(_, m)| m).collect();
        let params = CompactParams {
            force: Some(true),
            force_reason: Some(ForceReason::Manual),
            current_token_count: Some(tokens_of(&current)),
            custom_instructions: instructions.filter(|i| !i.trim().is_empty()),
            ..Default::default()
        };
        let (result, _) = self
            .inner
            .engine_compact(&s, params, "manual", None)
            .await?;
        Ok(result)
    }
}

struct EmbeddedTurn {
    rt: Arc<Inner>,
    session: ResolvedSession,
    abort: AbortSignal,
    events: Option<EventSender>,
    assembled: Option<tokio::sync::mpsc::UnboundedSender<AssembledView>>,
    answered: Option<tokio::sync::mpsc::UnboundedSender<TurnOutcome>>,
    prompt: String,
    is_heartbeat: bool,
    /// The session's prepared history; once synced after the prompt is persisted it also holds
    /// this turn's messages (after `history_len`).
    history: History,
    /// Messages of `history` that came before this turn.
    history_len: usize,
    /// Their estimated tokens.
    history_tokens: u64,
    /// This turn's messages so far (user first).
    turn: Vec<AgentMessage>,
    turn_ids: HashSet<String>,
    /// Transcript entry ids of this turn's messages, in order (the durable commit's anchors).
    turn_entry_ids: Vec<String>,
    /// This turn's messages already handed to `ingest`/`ingestBatch` (by the in-loop hook):
    /// each is delivered once (§7.1: the hook delivers the new messages).
    delivered: usize,
    /// The assembled history the pending turn messages are appended to (non-owning and
    /// durable paths).
    prefix: Option<Vec<AgentMessage>>,
    system: String,
    tools: Vec<Arc<dyn AgentTool>>,
    specs: Vec<ToolSpec>,
    /// Tokens of the tool schemas.
    specs_tokens: u64,
    /// Tokens sent besides the messages: the system prompt (with the engine's addition) and
    /// the tool schemas.
    fixed_tokens: u64,
    precheck_done: bool,
    /// The engine has the full durable-turn declaration (§1.7): it gets `commitTurn` for the
    /// accepted turn instead of afterTurn/ingest, and sees only history before the turn.
    durable: bool,
    /// The next persisted message ends the turn (durable engines: its commit goes to the
    /// outbox before it goes to the transcript, see [`crate::outbox`]).
    terminal_next: bool,
    /// The commit [`EmbeddedTurn::persist`] wrote with the terminal entry, and the session it
    /// belongs to; delivered by `finish`.
    pending_commit: Option<(ResolvedSession, crate::outbox::TurnCommit)>,
    /// This turn's `runId` in plugin hook payloads.
    run_id: String,
    /// The merged `before_prompt_build` result, once it ran (first model call of the turn).
    prompt_hook: Option<PromptBuild>,
    /// The configured system prompt with the caller's `system_extra`.
    base_system: String,
    /// Names of the caller's tools (their specs are in `specs`, after the runtime's).
    client_names: HashSet<String>,
    /// The caller's results continuing the last turn (see [`TurnRequest::tool_results`]).
    tool_results: Vec<ToolResultMessage>,
    images: Vec<ImageContent>,
    model_options: ModelOptions,
    /// The system prompt as the prompt hook last left it (so it is applied once per
    /// assembled system prompt).
    hooked_system: Option<String>,
    /// The transcript read fence of this turn (see [`TurnFence`]).
    fence: Option<TurnFence>,
    out: TurnOutcome,
}

/// While a turn runs, a plugin's transcript delta read (OpenClaw's
/// `readSessionTranscriptVisibleMessageDelta`) ends before the turn's first entry, as
/// OpenClaw's current-turn admission fence does: the turn reaches the engine through
/// `afterTurn`/`commitTurn`, not through the transcript. Lifted when the turn ends.
struct TurnFence {
    rt: Arc<Inner>,
    session_id: String,
}

impl TurnFence {
    fn set(rt: &Arc<Inner>, session_id: &str, first_entry: &str) -> Option<Self> {
        let mut fences = crate::runtime::lock(&rt.turn_fences).ok()?;
        fences.insert(session_id.to_owned(), first_entry.to_owned());
        Some(Self {
            rt: rt.clone(),
            session_id: session_id.to_owned(),
        })
    }
}

impl Drop for TurnFence {
    fn drop(&mut self) {
        if let Ok(mut fences) = self.rt.turn_fences.lock() {
            fences.remove(&self.session_id);
        }
    }
}

impl EmbeddedTurn {
    fn start(rt: Arc<Inner>, request: TurnRequest) -> Result<Self> {
        let session = rt.session(&request.session_key)?;
        let tools = rt.tools();
        let mut specs: Vec<ToolSpec> = tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name().to_owned(),
                description: t.description().to_owned(),
                parameters: t.parameters(),
            })
            .collect();
        let client_names: HashSet<String> = request
            .client_tools
            .iter()
            .map(|t| t.name.clone())
            .collect();
        if let Some(own) = specs.iter().find(|s| client_names.contains(&s.name)) {
            return Err(RuntimeError::ToolResults {
                index: None,
                message: format!("the caller's tool `{}` has the name of one of the agent's own tools; rename it", own.name),
            });
        }
        specs.extend(request.client_tools);
        let base_system = match request
            .system_extra
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            Some(extra) if rt.system_prompt.trim().is_empty() => extra.to_owned(),
            Some(extra) => format!("{}\n\n{extra}", rt.system_prompt),
            None => rt.system_prompt.clone(),
        };
        let specs_tokens = if specs.is_empty() {
            0
        } else {
            clawctx_tokens::text_tokens(&serde_json::to_string(&specs).unwrap_or_default())
        };
        let limits = rt.limits();
        let info = rt.engine.info();
        let durable = info
            .transcript_semantics
            .as_ref()
            .is_some_and(|t| t.is_full())
            && rt.engine.methods().has(Method::CommitTurn);
        Ok(Self {
            out: TurnOutcome {
                session_key: session.key.clone(),
                session_id: session.entry.session_id.clone(),
                token_budget: limits.prompt_budget,
                ..Default::default()
            },
            system: base_system.clone(),
            fixed_tokens: clawctx_tokens::text_tokens(&base_system) + specs_tokens,
            base_system,
            client_names,
            tool_results: request.tool_results,
            images: request.images,
            model_options: request.model_options,
            specs_tokens,
            rt,
            session,
            abort: request.abort.unwrap_or_default(),
            events: request.events,
            assembled: request.assembled,
            answered: request.answered,
            prompt: request.prompt,
            is_heartbeat: request.is_heartbeat,
            history: History::default(),
            history_len: 0,
            history_tokens: 0,
            turn: Vec::new(),
            turn_ids: HashSet::new(),
            turn_entry_ids: Vec::new(),
            delivered: 0,
            prefix: None,
            tools,
            specs,
            precheck_done: false,
            durable,
            terminal_next: false,
            pending_commit: None,
            run_id: crate::hooks::new_run_id(),
            prompt_hook: None,
            hooked_system: None,
            fence: None,
        })
    }

    fn engine(&self) -> &Arc<dyn ContextEngine> {
        &self.rt.engine
    }

    fn budget(&self) -> u64 {
        self.rt.limits().prompt_budget
    }

    /// What the messages may use: the budget less the system prompt and the tool schemas.
    fn message_limit(&self) -> u64 {
        self.budget().saturating_sub(self.fixed_tokens)
    }

    fn cx(&self) -> CallContext {
        self.rt.call_context(&self.session, Some(&self.abort))
    }

    fn heartbeat(&self) -> Option<bool> {
        self.is_heartbeat.then_some(true)
    }

    /// Where this turn's plugin hooks fire.
    fn site(&self) -> HookSite<'_> {
        HookSite {
            rt: &self.rt,
            session: &self.session,
            run_id: Some(&self.run_id),
            heartbeat: self.is_heartbeat,
        }
    }

    /// Brings the history up to date with the transcript and finds where this turn's
    /// messages start in it (after a compaction rebuilt it, they follow the summary).
    fn sync_history(&mut self) -> Result<()> {
        self.rt.sync_history(&self.session, &mut self.history)?;
        if self.turn_ids.is_empty() {
            self.history.close_pending();
            self.history_len = self.history.len();
        } else {
            self.history_len = self
                .history
                .position_of_first(&self.turn_ids)
                .unwrap_or(self.history.len());
        }
        self.history_tokens = self.history.tokens_of(0..self.history_len);
        Ok(())
    }

    /// The session's last message (id and message) when it is a user message with `content`
    /// that nothing answered: the prompt of a turn that failed before any reply (a provider
    /// error, an abort). A re-send of the same prompt continues that turn rather than leave
    /// consecutive copies of one prompt in the session, which every later model call would
    /// see. Entries outside the model's context after it (a compaction the failed turn's
    /// overflow recovery appended, a label) do not answer it; a compaction that summarized the
    /// prompt away does (the prompt is no longer a message of the context). Reads back from
    /// the leaf only over such entries, so the cost does not grow with the session.
    fn unanswered_prompt(&self, content: &Content) -> Result<Option<(String, AgentMessage)>> {
        let file = self.rt.file(&self.session.transcript_path)?;
        let mut f = crate::runtime::lock(&file)?;
        f.refresh()?;
        let mut at = f.leaf_id().map(str::to_owned);
        let mut compaction: Option<String> = None;
        let mut skipped: Vec<String> = Vec::new();
        while let Some(id) = at {
            let Some(entry) = f.entry(&id) else {
                return Ok(None);
            };
            match &entry.kind {
                transcript::EntryKind::Message(m @ AgentMessage::User(u))
                    if u.content == *content =>
                {
                    let kept = match &compaction {
                        None => true,
                        // The prompt stays in the rebuilt context only when the latest
                        // compaction keeps it (its first kept entry is the prompt or earlier).
                        Some(first_kept) => {
                            !skipped.contains(first_kept)
                                && (first_kept == &id
                                    || f.active_path()
                                        .iter()
                                        .take_while(|e| e.id != id)
                                        .any(|e| &e.id == first_kept))
                        }
                    };
                    return Ok(kept.then(|| (id.clone(), m.clone())));
                }
                transcript::EntryKind::Compaction(c) => {
                    if compaction.is_none() {
                        compaction = Some(c.first_kept_entry_id.clone());
                    }
                }
                transcript::EntryKind::Other { .. } => {}
                _ => return Ok(None),
            }
            skipped.push(id.clone());
            at = entry.parent_id.clone();
        }
        Ok(None)
    }

    fn persist(&mut self, message: AgentMessage) -> Result<()> {
        let terminal = std::mem::take(&mut self.terminal_next);
        let first = self.turn_entry_ids.first().cloned();
        let id = match first {
            Some(first) if terminal && self.durable => {
                // The commit is on disk before the turn is complete in the transcript.
                self.sync_history()?;
                let positions = (self.history_len, self.history.len());
                let (id, commit) = self.rt.append_terminal(
                    &self.session,
                    message.clone(),
                    &first,
                    positions,
                    self.turn.clone(),
                    self.heartbeat(),
                )?;
                self.pending_commit = commit.map(|c| (self.session.clone(), c));
                id
            }
            _ => self.rt.append(&self.session, message.clone())?,
        };
        self.turn_ids.insert(id.clone());
        self.turn_entry_ids.push(id);
        self.turn.push(message);
        Ok(())
    }

    async fn run(mut self) -> Result<TurnOutcome> {
        // Commits a crash or a failure left waiting reach the engine before it sees anything
        // else of the session (§1.7 pre-run outbox recovery).
        if self.durable {
            let started = std::time::Instant::now();
            let delivery = self.rt.deliver_outbox(&self.session, None, true).await;
            if let Some(line) = delivery.blocked {
                tracing::warn!("{line}");
            }
            self.out.engine_micros += started.elapsed().as_micros() as u64;
        }
        // Bootstrap only for a session file that already existed, and before the prompt is in
        // it: an engine that imports the file must not import this turn's prompt too.
        if self.rt.transcript_is_empty(&self.session)? {
            self.rt.mark_bootstrapped(&self.session)?;
            self.site().session_start().await;
        } else {
            self.rt
                .ensure_bootstrapped(&self.session, &self.abort)
                .await?;
        }
        self.history = self.rt.take_history(&self.session)?;
        if self.tool_results.is_empty() {
            self.sync_history()?;
            self.out.context_tokens_before = self.history_tokens;
            let received = now_ms();
            self.site().message_received(&self.prompt, received).await;
            let mut user = AgentMessage::user(self.prompt.clone()).with_timestamp(received);
            if let (AgentMessage::User(u), false) = (&mut user, self.images.is_empty()) {
                let mut blocks = vec![ContentBlock::text(self.prompt.clone())];
                blocks.extend(self.images.drain(..).map(ContentBlock::Image));
                u.content = Content::Blocks(blocks);
            }
            let unanswered = match &user {
                AgentMessage::User(u) => self.unanswered_prompt(&u.content)?,
                _ => None,
            };
            match unanswered {
                Some((id, stored)) => {
                    // A retry of a turn that failed before its answer (the official OpenAI
                    // client re-sends a 502 twice): the prompt is in the transcript already,
                    // so this turn continues from it instead of storing a second copy.
                    tracing::info!(
                        session = %self.session.entry.session_id,
                        "the session's last prompt was never answered and is sent again: the turn continues from it"
                    );
                    self.turn_ids.insert(id.clone());
                    self.turn_entry_ids.push(id);
                    self.turn.push(stored);
                    // The history counted it as before the turn: it is the turn's now.
                    self.sync_history()?;
                    self.out.context_tokens_before = self.history_tokens;
                }
                None => self.persist(user)?,
            }
        } else {
            // A continuation: the caller's results go where the user message would.
            self.rt.sync_history(&self.session, &mut self.history)?;
            let before = self.history.tokens_of(0..self.history.len());
            for result in self.accept_tool_results()? {
                self.persist(AgentMessage::ToolResult(result))?;
            }
            self.sync_history()?;
            self.out.context_tokens_before = before;
        }
        self.set_fence();

        let owns = self.engine().info().owns_compaction();
        let mut overflow_retried = false;
        let mut iteration = 0usize;
        loop {
            if self.abort.is_aborted() {
                return Err(self.aborted());
            }
            let (view, view_tokens) = self
                .build_view(iteration > 0 && owns && !self.durable)
                .await?;
            let (view, view_tokens) = self.prompt_hooks(view, view_tokens).await;
            self.out.prompt_tokens.push(view_tokens);
            self.out.model_calls += 1;
            let called = std::time::Instant::now();
            let completion = self.call_model(view).await;
            self.out.model_micros += called.elapsed().as_micros() as u64;
            let completion = match completion {
                Ok(c) => c,
                Err(ModelError::ContextOverflow {
                    observed_tokens,
                    message,
                    provider,
                }) if !overflow_retried => {
                    overflow_retried = true;
                    let original = ModelError::ContextOverflow {
                        observed_tokens,
                        message,
                        provider,
                    };
                    self.recover_overflow(observed_tokens, original).await?;
                    continue;
                }
                Err(ModelError::Aborted) => return Err(self.aborted()),
                Err(e) => return Err(RuntimeError::Provider(e)),
            };
            if completion.stop_reason() == StopReason::Error {
                let msg = completion
                    .message
                    .error_message
                    .clone()
                    .unwrap_or_else(|| "the provider reported an error".into());
                return Err(RuntimeError::Provider(ModelError::BadResponse {
                    provider: completion.message.provider.clone().unwrap_or_default(),
                    message: msg,
                }));
            }
            let usage = completion.usage();
            add_usage(&mut self.out.usage, &usage);
            let mut calls: Vec<ToolCall> = completion.tool_calls().into_iter().cloned().collect();
            let client: Vec<ToolCall> = calls
                .iter()
                .filter(|c| self.client_names.contains(&c.name))
                .cloned()
                .collect();
            calls.retain(|c| !self.client_names.contains(&c.name));
            // The turn ends with this message when it asks for no tool the runtime runs, and
            // with the last tool result when the caller's tools wait or the loop is at its
            // bound: that entry is the terminal one.
            let ends_here = calls.is_empty();
            let ends_after_tools =
                !client.is_empty() || iteration + 1 >= self.rt.max_tool_iterations;
            self.out.reply = completion.text();
            self.terminal_next = ends_here;
            self.persist(completion.into_agent_message())?;
            if ends_here {
                if !client.is_empty() {
                    self.out.client_tool_calls = client;
                }
                break;
            }
            self.run_tools(&calls, ends_after_tools).await?;
            if !client.is_empty() {
                // The caller runs these; the turn ends here and its next request continues it.
                self.out.client_tool_calls = client;
                break;
            }
            iteration += 1;
            if iteration >= self.rt.max_tool_iterations {
                self.out.tool_iterations_exhausted = true;
                self.out.warnings.push(format!(
                    "the tool loop stopped after {} model calls without a final answer",
                    self.rt.max_tool_iterations
                ));
                break;
            }
        }
        self.site()
            .llm_output(&self.prompt, &self.turn, &self.out.usage)
            .await;
        self.finish().await
    }

    /// The caller's results that continue the session: each must answer a call the session's
    /// last assistant message left open (a result the session already holds is skipped), and
    /// every open call needs one. Checked before anything is stored.
    fn accept_tool_results(&self) -> Result<Vec<ToolResultMessage>> {
        let messages = self.history.messages();
        let answered: HashSet<&str> = messages.iter().filter_map(|m| m.tool_result_id()).collect();
        let open: Vec<&ToolCall> = messages
            .iter()
            .rev()
            .find(|m| m.role() != "toolResult")
            .filter(|m| m.role() == "assistant")
            .map(|m| {
                m.tool_calls()
                    .filter(|c| !answered.contains(c.id.as_str()))
                    .collect()
            })
            .unwrap_or_default();
        let mut accepted: Vec<ToolResultMessage> = Vec::new();
        for (index, result) in self.tool_results.iter().enumerate() {
            let id = result.tool_call_id.as_str();
            if accepted.iter().any(|r| r.tool_call_id == id) || answered.contains(id) {
                continue;
            }
            let Some(call) = open.iter().find(|c| c.id == id) else {
                return Err(RuntimeError::ToolResults {
                    index: Some(index),
                    message: format!("no open tool call of this session has the id \"{id}\""),
                });
            };
            let mut result = result.clone();
            if result.tool_name.is_empty() {
                result.tool_name = call.name.clone();
            }
            accepted.push(result);
        }
        if let Some(missing) = open
            .iter()
            .find(|c| !accepted.iter().any(|r| r.tool_call_id == c.id))
        {
            return Err(RuntimeError::ToolResults {
                index: None,
                message: format!(
                    "the tool call \"{}\" ({}) has no result; send a tool message for every call of the assistant's message",
                    missing.id, missing.name
                ),
            });
        }
        if accepted.is_empty() && messages.last().is_none_or(|m| m.role() != "toolResult") {
            return Err(RuntimeError::ToolResults {
                index: None,
                message:
                    "these tool results are stored and already answered; send a new user message"
                        .into(),
            });
        }
        Ok(accepted)
    }

    fn aborted(&mut self) -> RuntimeError {
        // Close tool calls left without results so the transcript stays a valid conversation.
        let mut pending: Vec<(String, String)> = Vec::new();
        for m in &self.turn {
            if let Some(id) = m.tool_result_id() {
                pending.retain(|(p, _)| p != id);
            }
            pending.extend(m.tool_calls().map(|c| (c.id.clone(), c.name.clone())));
        }
        for (id, name) in pending {
            let msg = tool_result(&id, &name, "Tool call aborted by the user.".into(), true);
            if let Err(e) = self.persist(msg) {
                tracing::warn!("cannot close an aborted tool call in the transcript: {e}");
            }
        }
        RuntimeError::Aborted(self.abort.reason())
    }

    /// The messages for the next model call.
    async fn build_view(&mut self, in_loop_hook: bool) -> Result<(Vec<AgentMessage>, u64)> {
        let mut view = if in_loop_hook {
            // Owning engines see the loop's new messages before each further call (§7.1).
            self.sync_history()?;
            if let Err(e) = self.deliver(None).await {
                self.out
                    .warnings
                    .push(format!("in-loop afterTurn failed: {e}"));
            }
            self.assemble(true).await?
        } else {
            if self.prefix.is_none() {
                let assembled = self.assemble(false).await?;
                self.prefix = Some(assembled);
            }
            let mut v = self.prefix.clone().unwrap_or_default();
            v.extend(self.turn.iter().cloned());
            v
        };
        // Final clamp: whatever the engine returned, the provider never gets more than the
        // budget (system prompt and tool schemas counted), and never a split tool pair.
        let limit = self.message_limit().max(1);
        let mut report = PipelineReport::default();
        view = sanitize(view, &mut report);
        let mut tokens = tokens_of(&view);
        if tokens > limit {
            view = fit_budget(view, limit, &mut report);
            tokens = tokens_of(&view);
        }
        Ok((view, tokens))
    }

    /// Assembles history (`include_turn` = also this turn's messages, for the in-loop hook).
    /// Returns what goes before the pending turn messages (or the whole view with
    /// `include_turn`).
    ///
    /// The engine's budget is what the messages may use (§7.5: the engine decides what fits;
    /// the history it gets is not trimmed first), less the pending turn messages and the
    /// `systemPromptAddition` it returned last time; an addition that grew past that reserve
    /// gets one more assembly with the budget it leaves. For engines that do not own
    /// compaction (or say their assembly may overflow), a context that still does not fit is
    /// compacted before the model call, so nothing leaves the model's view without a summary.
    async fn assemble(&mut self, include_turn: bool) -> Result<Vec<AgentMessage>> {
        if include_turn {
            self.sync_history()?;
        }
        let pending = if include_turn {
            0
        } else {
            tokens_of(&self.turn)
        };
        let base_limit = self
            .budget()
            .saturating_sub(clawctx_tokens::text_tokens(&self.base_system) + self.specs_tokens);
        let reserved = self.history.addition_tokens;
        let mut result = self
            .assemble_once(
                include_turn,
                base_limit.saturating_sub(pending + reserved).max(1),
            )
            .await?;
        let mut addition = self.set_system(&mut result);
        self.history.addition_tokens = addition;
        if addition > reserved && estimate(&result) + pending > base_limit.saturating_sub(addition)
        {
            result = self
                .assemble_once(
                    include_turn,
                    base_limit.saturating_sub(pending + addition).max(1),
                )
                .await?;
            addition = self.set_system(&mut result);
        }
        let limit = base_limit.saturating_sub(addition);
        let authority = result.prompt_authority.unwrap_or_default();
        let may_overflow = authority == PromptAuthority::PreassemblyMayOverflow;
        let precheck = !self.engine().info().owns_compaction() || may_overflow;
        let source_tokens = if include_turn {
            self.history.tokens_of(0..self.history.len())
        } else {
            self.history_tokens
        };
        let mut estimate = estimate(&result) + pending;
        if may_overflow {
            estimate = estimate.max(source_tokens + pending);
        }
        if precheck && !self.precheck_done && estimate > limit {
            self.precheck_done = true;
            let params = CompactParams {
                force: Some(true),
                force_reason: Some(ForceReason::PreflightRequired),
                preflight_compaction_trigger: Some(PreflightCompactionTrigger::Tokens),
                current_token_count: Some(estimate),
                ..Default::default()
            };
            self.compact_with_engine(params, "preflight").await?;
            result = self
                .assemble_once(include_turn, limit.saturating_sub(pending).max(1))
                .await?;
            self.set_system(&mut result);
        }
        if let Some(epoch) = result
            .context_projection
            .as_ref()
            .and_then(|p| p.epoch.clone())
        {
            self.out.context_epoch = Some(epoch);
        }
        Ok(result.messages)
    }

    /// Puts the engine's `systemPromptAddition`, and the text of any `system`-role messages it
    /// returned (taken out of `result`, see [`take_system_messages`]), before the system
    /// prompt; returns the tokens added. Both count like the addition always has: in the
    /// system prompt the final clamp leaves room for, and in the reserve of the next assembly.
    fn set_system(&mut self, result: &mut AssembleResult) -> u64 {
        let folded = take_system_messages(result);
        if !folded.is_empty() {
            if let Some(line) = warn_system_messages_once(&self.engine().info().id, folded.len()) {
                self.out.warnings.push(line);
            }
        }
        let (system, added) = compose_system(
            &self.base_system,
            result.system_prompt_addition.as_deref(),
            &folded,
        );
        self.system = system;
        self.fixed_tokens = clawctx_tokens::text_tokens(&self.system) + self.specs_tokens;
        added
    }

    /// One `assemble` call over the prepared history (before this turn, or with it), lent to
    /// the engine without a copy.
    async fn assemble_once(&mut self, include_turn: bool, budget: u64) -> Result<AssembleResult> {
        let end = if include_turn {
            self.history.len()
        } else {
            self.history_len
        };
        let start = match self.rt.history_turn_limit {
            Some(limit) => turn_limit_start(&self.history.messages()[..end], limit),
            None => 0,
        };
        let model = match &self.rt.backend {
            Backend::Model(b) => Some(b.model_id.clone()),
            Backend::Cli(_) => None,
        };
        let current = self.history.tokens_of(start..end);
        let params = AssembleParams {
            session_id: self.session.entry.session_id.clone(),
            session_key: Some(self.session.key.clone()),
            messages: self.history.lend(start, end),
            token_budget: Some(budget),
            available_tools: Some(self.specs.iter().map(|s| s.name.clone()).collect()),
            citations_mode: None,
            model,
            prompt: Some(self.prompt.clone()).filter(|_| self.tool_results.is_empty()),
            runtime_settings: Some(self.rt.runtime_settings()),
            runtime_context: Some(self.rt.runtime_context(
                &self.session,
                Some(current),
                None,
                false,
            )),
        };
        let engine_id = self.engine().info().id;
        let started = std::time::Instant::now();
        let result = self.engine().assemble(&params, &self.cx()).await;
        let took = started.elapsed().as_micros() as u64;
        self.out.engine_micros += took;
        self.out.assemble_micros.push(took);
        if let (Some(tx), Ok(r)) = (&self.assembled, &result) {
            let view = AssembledView {
                session_id: params.session_id.clone(),
                token_budget: budget,
                history_messages: params.messages.len(),
                result: r.clone(),
            };
            let _ = tx.send(view);
        }
        self.history.give_back(params.messages);
        result.map_err(|e| RuntimeError::engine(&engine_id, "assemble", e))
    }

    async fn call_model(
        &mut self,
        messages: Vec<AgentMessage>,
    ) -> std::result::Result<Completion, ModelError> {
        let Backend::Model(binding) = &self.rt.backend else {
            return Err(ModelError::config(
                "agents.defaults.model",
                "the embedded runner needs a model provider",
            ));
        };
        let request = CompletionRequest {
            model: binding.model_id.clone(),
            system_prompt: Some(self.system.clone()),
            messages,
            tools: self.specs.clone(),
            max_output_tokens: Some(
                self.model_options
                    .max_output_tokens
                    .map_or(binding.max_output_tokens, |m| {
                        m.min(binding.max_output_tokens)
                    }),
            ),
            temperature: self.model_options.temperature,
            sampling: self.model_options.sampling.clone(),
        };
        binding
            .provider
            .complete(request, self.events.as_ref(), self.abort.token())
            .await
    }

    /// Runs the model's tool calls in order. Plugin hooks: `before_tool_call` may block a call
    /// (its reason is the tool's error result) or rewrite its arguments; `after_tool_call`
    /// sees what the tool answered; `tool_result_persist` may rewrite the result before it is
    /// stored (and so before the model sees it).
    async fn run_tools(&mut self, calls: &[ToolCall], ends_turn: bool) -> Result<()> {
        for (i, call) in calls.iter().enumerate() {
            if self.abort.is_aborted() {
                return Err(self.aborted());
            }
            let tool = self.tools.iter().find(|t| t.name() == call.name).cloned();
            let (text, is_error) = match tool {
                None => (format!("Unknown tool `{}`.", call.name), true),
                Some(tool) => match self.site().before_tool_call(call).await {
                    ToolCallDecision::Block(reason) => (reason, true),
                    ToolCallDecision::Run(arguments) => {
                        if self.abort.is_aborted() {
                            return Err(self.aborted());
                        }
                        let ctx = ToolCallContext {
                            session_id: self.session.entry.session_id.clone(),
                            session_key: Some(self.session.key.clone()),
                            tool_call_id: Some(call.id.clone()),
                        };
                        let abort = self.abort.clone();
                        let started = std::time::Instant::now();
                        let (text, is_error) = tokio::select! {
                            r = tool.execute(arguments.clone(), ctx) => match r {
                                Ok(t) => (t, false),
                                Err(e) => (e, true),
                            },
                            _ = abort.aborted() => return Err(self.aborted()),
                        };
                        let ms = started.elapsed().as_millis() as u64;
                        self.site()
                            .after_tool_call(call, &arguments, &text, is_error, ms)
                            .await;
                        (text, is_error)
                    }
                },
            };
            self.out.tool_calls += 1;
            let message = self
                .site()
                .tool_result_persist(tool_result(&call.id, &call.name, text, is_error))
                .await;
            self.terminal_next = ends_turn && i + 1 == calls.len();
            self.persist(message)?;
        }
        Ok(())
    }

    /// Plugin hooks on the view of a model call. `before_prompt_build` (and the legacy
    /// `before_agent_start`) runs once per turn, on the first view: its `messages` are what the
    /// engine assembled before the prompt. Its result applies to every model call of the turn:
    /// the system prompt, and the turn's user message in the view (the transcript keeps the
    /// prompt as typed). A view that this pushes over the budget is clamped again.
    /// `llm_input` then sees what the first call is given.
    async fn prompt_hooks(
        &mut self,
        mut view: Vec<AgentMessage>,
        mut tokens: u64,
    ) -> (Vec<AgentMessage>, u64) {
        let first = self.prompt_hook.is_none();
        if first {
            let site = self.site();
            if !["before_prompt_build", "before_agent_start", "llm_input"]
                .iter()
                .any(|h| site.wants(h))
            {
                self.prompt_hook = Some(PromptBuild::default());
                return (view, tokens);
            }
            let assembled = self
                .prefix
                .clone()
                .unwrap_or_else(|| view[..view.len().saturating_sub(self.turn.len())].to_vec());
            let merged = site.before_prompt_build(&self.prompt, &assembled).await;
            self.prompt_hook = Some(merged);
        }
        let Some(hook) = self.prompt_hook.clone() else {
            return (view, tokens);
        };
        if !hook.is_empty() {
            if hook.changes_system() && self.hooked_system.as_deref() != Some(self.system.as_str())
            {
                self.system = hook.apply_system(&self.system);
                self.fixed_tokens = clawctx_tokens::text_tokens(&self.system) + self.specs_tokens;
                self.hooked_system = Some(self.system.clone());
            }
            if hook.changes_prompt() {
                if let Some(AgentMessage::User(typed)) = self.turn.first().cloned() {
                    let shown = UserMessage {
                        content: Content::Text(hook.apply_prompt(&self.prompt)),
                        ..typed.clone()
                    };
                    let typed = AgentMessage::User(typed);
                    if let Some(pos) = view.iter().rposition(|m| *m == typed) {
                        view[pos] = AgentMessage::User(shown);
                        tokens = tokens_of(&view);
                    }
                }
            }
            let limit = self.message_limit().max(1);
            if tokens > limit {
                view = fit_budget(view, limit, &mut PipelineReport::default());
                tokens = tokens_of(&view);
            }
        }
        if first && self.site().wants("llm_input") {
            let history = self.prefix.clone().unwrap_or_default();
            let tools: Vec<String> = self.specs.iter().map(|s| s.name.clone()).collect();
            self.site()
                .llm_input(
                    &self.system,
                    &hook.apply_prompt(&self.prompt),
                    &history,
                    &tools,
                )
                .await;
        }
        (view, tokens)
    }

    /// afterTurn > ingestBatch > ingest. afterTurn gets the whole prepared view (this turn's
    /// messages included, lent without a copy) and `prePromptMessageCount`; the ingest
    /// methods get this turn's messages. The view is the history as last synced: `finish`
    /// syncs before its auto-compaction, so afterTurn sees the turn as it happened, not the
    /// compacted context (which would hide the part of the turn a compaction summarized).
    async fn deliver(
        &mut self,
        auto_compaction_summary: Option<String>,
    ) -> std::result::Result<(), EngineError> {
        let methods = self.engine().methods();
        let cx = self.cx();
        let sid = self.session.entry.session_id.clone();
        let key = Some(self.session.key.clone());
        if methods.has(Method::AfterTurn) {
            let end = self.history.len();
            let start = match self.rt.history_turn_limit {
                Some(limit) => {
                    turn_limit_start(&self.history.messages()[..self.history_len], limit)
                }
                None => 0,
            };
            let current = self.history.tokens_of(start..end);
            let params = AfterTurnParams {
                session_id: sid,
                session_key: key,
                session_target: Some(self.rt.session_target(&self.session)),
                session_file: self.session.transcript_path.to_string_lossy().into_owned(),
                messages: self.history.lend(start, end),
                pre_prompt_message_count: (self.history_len - start) as u64,
                auto_compaction_summary,
                is_heartbeat: self.heartbeat(),
                token_budget: Some(self.budget()),
                current_token_count: Some(current),
                runtime_settings: Some(self.rt.runtime_settings()),
                runtime_context: Some(self.rt.runtime_context(
                    &self.session,
                    Some(current),
                    None,
                    false,
                )),
            };
            let started = std::time::Instant::now();
            let result = self.engine().after_turn(&params, &cx).await;
            self.out.engine_micros += started.elapsed().as_micros() as u64;
            self.history.give_back(params.messages);
            result
        } else if methods.has(Method::IngestBatch) {
            let new = self.turn[self.delivered.min(self.turn.len())..].to_vec();
            if new.is_empty() {
                return Ok(());
            }
            let n = new.len();
            let params = IngestBatchParams {
                session_id: sid,
                session_key: key,
                messages: new,
                is_heartbeat: self.heartbeat(),
            };
            let started = std::time::Instant::now();
            let result = self.engine().ingest_batch(&params, &cx).await;
            self.out.engine_micros += started.elapsed().as_micros() as u64;
            result?;
            self.delivered += n;
            Ok(())
        } else {
            while self.delivered < self.turn.len() {
                let params = IngestParams {
                    session_id: sid.clone(),
                    session_key: key.clone(),
                    message: self.turn[self.delivered].clone(),
                    is_heartbeat: self.heartbeat(),
                };
                let started = std::time::Instant::now();
                let result = self.engine().ingest(&params, &cx).await;
                self.out.engine_micros += started.elapsed().as_micros() as u64;
                result?;
                self.delivered += 1;
            }
            Ok(())
        }
    }

    async fn compact_with_engine(
        &mut self,
        params: CompactParams,
        trigger: &str,
    ) -> Result<CompactResult> {
        let started = std::time::Instant::now();
        let compacted = self
            .rt
            .engine_compact(&self.session, params, trigger, Some(&self.abort))
            .await;
        self.out.engine_micros += started.elapsed().as_micros() as u64;
        let micros = started.elapsed().as_micros() as u64;
        let (result, successor) = compacted?;
        if let Some(next) = successor {
            self.move_to_successor(next)?;
        }
        if result.compacted {
            self.out.compactions.push(CompactionRecord {
                trigger: trigger.to_owned(),
                by: self.engine().info().id,
                tokens_before: result.result.as_ref().map(|r| r.tokens_before).unwrap_or(0),
                tokens_after: result.result.as_ref().and_then(|r| r.tokens_after),
                micros,
            });
        }
        self.sync_history()?;
        self.prefix = None;
        Ok(result)
    }

    /// Moves the rest of the turn to a compaction successor; a fresh successor transcript gets
    /// this turn's messages so far, so the retried turn is complete there.
    fn move_to_successor(&mut self, next: ResolvedSession) -> Result<()> {
        let addition_tokens = self.history.addition_tokens;
        self.history = self.rt.take_history(&next)?;
        self.history.addition_tokens = addition_tokens;
        let fresh = self.history.len() == 0;
        self.session = next;
        self.out.session_id = self.session.entry.session_id.clone();
        self.turn_ids.clear();
        self.turn_entry_ids.clear();
        if fresh {
            for m in self.turn.clone() {
                let id = self.rt.append(&self.session, m)?;
                self.turn_ids.insert(id.clone());
                self.turn_entry_ids.push(id);
            }
        }
        self.set_fence();
        Ok(())
    }

    /// Fences this turn's entries off transcript delta reads (see [`TurnFence`]).
    fn set_fence(&mut self) {
        self.fence = None;
        if let Some(first) = self.turn_entry_ids.first() {
            self.fence = TurnFence::set(&self.rt, &self.session.entry.session_id, first);
        }
    }

    /// Provider overflow: the engine compacts (observed token count, else a minimally
    /// over-budget one), then the call is retried once. If compaction fails, the provider's
    /// error is returned and the session mapping is left as it was.
    async fn recover_overflow(
        &mut self,
        observed: Option<u64>,
        original: ModelError,
    ) -> Result<()> {
        let count = observed.unwrap_or_else(|| self.budget() + 1);
        let params = CompactParams {
            force: Some(true),
            current_token_count: Some(count),
            ..Default::default()
        };
        match self.compact_with_engine(params, "overflow").await {
            Ok(r) if r.ok => {
                self.out.overflow_recovered = true;
                Ok(())
            }
            Ok(r) => {
                tracing::warn!(
                    "overflow recovery: compaction did not succeed: {:?}",
                    r.reason
                );
                Err(RuntimeError::Provider(original))
            }
            Err(e) => {
                tracing::warn!("overflow recovery: compaction failed: {e}");
                Err(RuntimeError::Provider(original))
            }
        }
    }

    /// The built-in auto-compaction after a turn, for engines that do not own compaction
    /// (§7.1): when the context crossed the threshold, returns the summary for `afterTurn`.
    async fn auto_compact(&mut self, context_tokens: u64) -> Option<String> {
        let limits = self.rt.limits();
        let window = limits
            .context_window
            .min(limits.prompt_budget + limits.reserve_tokens + limits.max_output_tokens);
        if self.engine().info().owns_compaction()
            || !should_compact(context_tokens, window, &self.rt.compaction)
        {
            return None;
        }
        let keep = self.rt.keep_for(Some("threshold"), false);
        let hooked = self.rt.compaction_hooks_before(&self.session).await;
        let started = std::time::Instant::now();
        let compacted = self
            .rt
            .builtin_compact(&self.session, keep, None, Some(&self.abort))
            .await;
        let micros = started.elapsed().as_micros() as u64;
        if let (Some(before), Ok(o)) = (hooked, &compacted) {
            if o.ok {
                self.rt.compaction_hooks_after(&self.session, before).await;
            }
        }
        match compacted {
            Ok(o) if o.compacted => {
                if let Err(e) = self.rt.store.record_compaction(&self.session.key) {
                    tracing::warn!("cannot record the compaction in sessions.json: {e}");
                }
                let detail = o.result.unwrap_or_default();
                self.out.compactions.push(CompactionRecord {
                    trigger: "auto".into(),
                    by: "runtime".into(),
                    tokens_before: detail.tokens_before,
                    tokens_after: detail.tokens_after,
                    micros,
                });
                detail.summary
            }
            Ok(_) => None,
            Err(e) => {
                self.out
                    .warnings
                    .push(format!("auto-compaction failed: {e}"));
                None
            }
        }
    }

    async fn finish(mut self) -> Result<TurnOutcome> {
        self.sync_history()?;
        let mut context_tokens = self.history.tokens_of(0..self.history.len());
        let auto_summary = self.auto_compact(context_tokens).await;
        let compacted = auto_summary.is_some();
        if self.durable {
            self.commit().await;
        } else if let Err(e) = self.deliver(auto_summary).await {
            let line = format!("context engine afterTurn failed: {e}");
            tracing::warn!("{line}");
            self.out.warnings.push(line);
        }
        if compacted {
            self.rt
                .maintain(&self.session, MaintenanceReason::Compaction)
                .await;
            self.sync_history()?;
            context_tokens = self.history.tokens_of(0..self.history.len());
        }
        self.out.context_tokens_after = context_tokens;
        if let Some(tx) = self.answered.take() {
            // The answer is in the transcript and the engine has the turn (what the caller is
            // told is kept, and searchable); only the counters and maintenance remain.
            let mut early = self.out.clone();
            early.engine = self.engine().info().id;
            early.messages = self.turn.clone();
            let _ = tx.send(early);
        }
        let counters = TokenCounters {
            input: Some(self.out.usage.input),
            output: Some(self.out.usage.output),
            total: Some(self.out.usage.total_tokens),
            context: Some(context_tokens),
        };
        let served = self.engine().info().id;
        if let Err(e) = self
            .rt
            .store
            .record_turn(&self.session.key, counters, Some(&served))
        {
            self.out
                .warnings
                .push(format!("cannot record token counters: {e}"));
        }
        let started = std::time::Instant::now();
        self.rt
            .maintain(&self.session, MaintenanceReason::Turn)
            .await;
        self.out.engine_micros += started.elapsed().as_micros() as u64;
        self.out.engine = self.engine().info().id;
        self.out.messages = std::mem::take(&mut self.turn);
        self.rt
            .put_history(&self.session, std::mem::take(&mut self.history));
        Ok(self.out)
    }

    /// The accepted turn goes to the engine's `commitTurn` through the outbox (§1.7): the
    /// commit was written with the terminal entry ([`EmbeddedTurn::persist`]) and leaves the
    /// outbox only once acknowledged; earlier commits of the session still waiting go first.
    async fn commit(&mut self) {
        let Some((session, commit)) = self.pending_commit.take() else {
            return;
        };
        let started = std::time::Instant::now();
        let delivery = self.rt.deliver_outbox(&session, Some(commit), false).await;
        self.out.engine_micros += started.elapsed().as_micros() as u64;
        if let Some(line) = delivery.blocked {
            tracing::warn!("{line}");
            self.out.commit_waiting = Some(line.clone());
            self.out.warnings.push(line);
        }
    }
}

/// An assembly's token estimate: the engine's, or the count of what it returned if larger.
fn estimate(result: &AssembleResult) -> u64 {
    result.estimated_tokens.max(tokens_of(&result.messages))
}

/// Takes the `system`-role messages out of an engine's assemble result and answers their
/// texts, in order (empty texts left out). The engine's `estimatedTokens` loses what they
/// counted as messages: they are counted in the system prompt instead.
///
/// Deliberate deviation (ARCHITECTURE.md, "Cross-cutting decisions"): OpenClaw's message model
/// has no `system` role and its provider adapters drop such messages; plugins written for it
/// still return them (recalled memories first, say). Dropping loses what the engine meant the
/// model to see and sending them as messages misplaces it, so every engine's are folded into
/// the run's system prompt the way `systemPromptAddition` is.
pub fn take_system_messages(result: &mut AssembleResult) -> Vec<String> {
    if !result.messages.iter().any(|m| m.role() == "system") {
        return Vec::new();
    }
    let mut texts = Vec::new();
    let mut counted = 0u64;
    result.messages.retain(|m| {
        if m.role() != "system" {
            return true;
        }
        counted += clawctx_tokens::message_tokens(m);
        let text = m.plain_text();
        if !text.trim().is_empty() {
            texts.push(text.trim().to_owned());
        }
        false
    });
    result.estimated_tokens = result.estimated_tokens.saturating_sub(counted);
    texts
}

/// The system prompt of a run: the engine's addition and the folded `system` messages (in that
/// order, each a paragraph) before `base`. Answers the prompt and the tokens of what was added.
pub fn compose_system(base: &str, addition: Option<&str>, folded: &[String]) -> (String, u64) {
    let parts: Vec<&str> = addition
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .into_iter()
        .chain(folded.iter().map(String::as_str))
        .collect();
    if parts.is_empty() {
        return (base.to_owned(), 0);
    }
    let added = parts.join("\n\n");
    let tokens = clawctx_tokens::text_tokens(&added);
    (format!("{added}\n\n{base}"), tokens)
}

/// Engines already warned about `system` messages in this process.
static SYSTEM_MESSAGE_WARNINGS: std::sync::LazyLock<std::sync::Mutex<HashSet<String>>> =
    std::sync::LazyLock::new(Default::default);

/// The warning about an engine's `system` messages, logged and answered the first time in this
/// process only (a plugin that does this does it every turn).
pub(crate) fn warn_system_messages_once(engine_id: &str, count: usize) -> Option<String> {
    let first = SYSTEM_MESSAGE_WARNINGS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(engine_id.to_owned());
    if !first {
        return None;
    }
    let line = format!(
        "context engine \"{engine_id}\" returned {count} system-role message(s) from assemble: their text was added to the system prompt (OpenClaw has no system role in messages; engines should use systemPromptAddition). Said once per engine."
    );
    tracing::warn!("{line}");
    Some(line)
}

pub(crate) fn tool_result(id: &str, name: &str, text: String, is_error: bool) -> AgentMessage {
    AgentMessage::ToolResult(ToolResultMessage {
        tool_call_id: id.to_owned(),
        tool_name: name.to_owned(),
        content: Content::Blocks(vec![ContentBlock::text(text)]),
        details: None,
        is_error: Some(is_error),
        timestamp: Some(serde_json::Number::from(now_ms())),
        extra: JsonMap::new(),
    })
}

pub(crate) fn add_usage(total: &mut Usage, u: &Usage) {
    total.input += u.input;
    total.output += u.output;
    total.cache_read += u.cache_read;
    total.cache_write += u.cache_write;
    total.total_tokens += u.total_tokens;
}
