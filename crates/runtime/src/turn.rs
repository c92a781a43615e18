//! One agent turn on the embedded runner (contract §1.2, §7, §9).
//!
//! The order of a turn: check host requirements → persist the user message → `bootstrap` the
//! first time the engine sees the session → assemble the pre-prompt history (compaction-aware
//! transcript context through `prepare_history`, budget = window − max output − reserve, minus
//! the system prompt, the tools and the pending turn messages) → precheck (non-owning engines,
//! or `promptAuthority: "preassembly_may_overflow"`) → model call, streaming → tool loop
//! (owning engines get afterTurn→assemble before every further call) → persist every message as
//! it happens → afterTurn / ingestBatch / ingest → built-in auto-compaction for non-owning
//! engines → `maintain`. A provider context overflow makes the engine compact and the call is
//! retried exactly once. Whatever fails, the transcript stays a valid conversation: the user
//! message is kept, and tool calls cut short by an abort get error results.

use std::collections::HashSet;
use std::sync::Arc;

use clawctx_engine::compaction::should_compact;
use clawctx_engine::pipeline::{fit_budget, prepare_history, sanitize, PipelineOptions, PipelineReport};
use clawctx_engine::*;
use clawctx_model::{Completion, CompletionRequest, EventSender, ModelError, StopReason, ToolSpec};
use clawctx_protocol::*;
use clawctx_transcript::{ResolvedSession, TokenCounters};
use serde::Serialize;

use crate::error::{Result, RuntimeError};
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
}

impl TurnRequest {
    /// A request for `prompt` on `session_key`.
    pub fn new(session_key: impl Into<String>, prompt: impl Into<String>) -> Self {
        Self { session_key: session_key.into(), prompt: prompt.into(), ..Default::default() }
    }
}

/// A compaction that happened during a turn.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionRecord {
    /// `auto` (built-in threshold), `overflow`, `preflight` or `manual`.
    pub trigger: String,
    /// Who compacted: the engine id, or `runtime` for the built-in auto-compaction.
    pub by: String,
    /// Tokens before, as reported.
    pub tokens_before: u64,
    /// Tokens after, when reported.
    pub tokens_after: Option<u64>,
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
    /// Summed provider usage.
    pub usage: Usage,
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
    /// Non-fatal problems (engine afterTurn failures and the like).
    pub warnings: Vec<String>,
}

impl AgentRuntime {
    /// Runs one turn.
    pub async fn run_turn(&self, request: TurnRequest) -> Result<TurnOutcome> {
        check_host(&self.inner, ContextEngineOperation::AgentRun)?;
        match &self.inner.backend {
            Backend::Model(_) => EmbeddedTurn::start(self.inner.clone(), request)?.run().await,
            Backend::Cli(_) => crate::cli_turn::run(self.inner.clone(), request).await,
        }
    }

    /// `/compact [instructions]`: the engine's `compact` with `force: true` and
    /// `forceReason: "manual"` (after the `manual-compact` host check).
    pub async fn compact(&self, session_key: &str, instructions: Option<String>) -> Result<CompactResult> {
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
        let (result, _) = self.inner.engine_compact(&s, params, "manual", None).await?;
        Ok(result)
    }
}

struct EmbeddedTurn {
    rt: Arc<Inner>,
    session: ResolvedSession,
    abort: AbortSignal,
    events: Option<EventSender>,
    prompt: String,
    /// The pre-prompt context (compaction-aware), unwindowed.
    history: Vec<AgentMessage>,
    /// Its estimated tokens.
    history_tokens: u64,
    /// This turn's messages so far (user first).
    turn: Vec<AgentMessage>,
    turn_ids: HashSet<String>,
    /// The assembled history the pending turn messages are appended to (non-owning path).
    prefix: Option<Vec<AgentMessage>>,
    system: String,
    tools: Vec<Arc<dyn AgentTool>>,
    specs: Vec<ToolSpec>,
    fixed_tokens: u64,
    precheck_done: bool,
    out: TurnOutcome,
}

impl EmbeddedTurn {
    fn start(rt: Arc<Inner>, request: TurnRequest) -> Result<Self> {
        let session = rt.session(&request.session_key)?;
        let tools = rt.tools();
        let specs: Vec<ToolSpec> = tools
            .iter()
            .map(|t| ToolSpec { name: t.name().to_owned(), description: t.description().to_owned(), parameters: t.parameters() })
            .collect();
        let specs_tokens =
            if specs.is_empty() { 0 } else { clawctx_tokens::text_tokens(&serde_json::to_string(&specs).unwrap_or_default()) };
        let limits = rt.limits();
        Ok(Self {
            out: TurnOutcome {
                session_key: session.key.clone(),
                session_id: session.entry.session_id.clone(),
                token_budget: limits.prompt_budget,
                ..Default::default()
            },
            system: rt.system_prompt.clone(),
            fixed_tokens: clawctx_tokens::text_tokens(&rt.system_prompt) + specs_tokens,
            rt,
            session,
            abort: request.abort.unwrap_or_default(),
            events: request.events,
            prompt: request.prompt,
            history: Vec::new(),
            history_tokens: 0,
            turn: Vec::new(),
            turn_ids: HashSet::new(),
            prefix: None,
            tools,
            specs,
            precheck_done: false,
        })
    }

    fn engine(&self) -> &Arc<dyn ContextEngine> {
        &self.rt.engine
    }

    fn budget(&self) -> u64 {
        self.rt.limits().prompt_budget
    }

    fn cx(&self) -> CallContext {
        self.rt.call_context(&self.session, Some(&self.abort))
    }

    /// Re-reads the pre-prompt history from the transcript (this turn's entries excluded).
    fn reload_history(&mut self) -> Result<()> {
        let entries = self.rt.history(&self.session)?;
        self.history = entries.into_iter().filter(|(id, _)| !self.turn_ids.contains(id)).map(|(_, m)| m).collect();
        self.history_tokens = tokens_of(&self.history);
        Ok(())
    }

    fn persist(&mut self, message: AgentMessage) -> Result<()> {
        let id = self.rt.append(&self.session, message.clone())?;
        self.turn_ids.insert(id);
        self.turn.push(message);
        Ok(())
    }

    async fn run(mut self) -> Result<TurnOutcome> {
        self.reload_history()?;
        self.out.context_tokens_before = self.history_tokens;
        self.persist(AgentMessage::user(self.prompt.clone()).with_timestamp(now_ms()))?;
        self.rt.ensure_bootstrapped(&self.session, &self.abort).await?;

        let owns = self.engine().info().owns_compaction();
        let mut overflow_retried = false;
        let mut iteration = 0usize;
        loop {
            if self.abort.is_aborted() {
                return Err(self.aborted());
            }
            let (view, view_tokens) = self.build_view(iteration > 0 && owns).await?;
            self.out.prompt_tokens.push(view_tokens);
            self.out.model_calls += 1;
            let completion = match self.call_model(view).await {
                Ok(c) => c,
                Err(ModelError::ContextOverflow { observed_tokens, message, provider }) if !overflow_retried => {
                    overflow_retried = true;
                    let original = ModelError::ContextOverflow { observed_tokens, message, provider };
                    self.recover_overflow(observed_tokens, original).await?;
                    continue;
                }
                Err(ModelError::Aborted) => return Err(self.aborted()),
                Err(e) => return Err(RuntimeError::Provider(e)),
            };
            if completion.stop_reason() == StopReason::Error {
                let msg = completion.message.error_message.clone().unwrap_or_else(|| "the provider reported an error".into());
                return Err(RuntimeError::Provider(ModelError::BadResponse {
                    provider: completion.message.provider.clone().unwrap_or_default(),
                    message: msg,
                }));
            }
            let usage = completion.usage();
            add_usage(&mut self.out.usage, &usage);
            let calls: Vec<ToolCall> = completion.tool_calls().into_iter().cloned().collect();
            self.out.reply = completion.text();
            self.persist(completion.into_agent_message())?;
            if calls.is_empty() {
                break;
            }
            self.run_tools(&calls).await?;
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
        self.finish().await
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
            let all: Vec<AgentMessage> = self.history.iter().chain(self.turn.iter()).cloned().collect();
            if let Err(e) = self.deliver(all).await {
                self.out.warnings.push(format!("in-loop afterTurn failed: {e}"));
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
        // budget, and never a split tool pair.
        let limit = self.budget().saturating_sub(self.fixed_tokens).max(1);
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
    async fn assemble(&mut self, include_turn: bool) -> Result<Vec<AgentMessage>> {
        let pending = if include_turn { 0 } else { tokens_of(&self.turn) };
        let limit = self.budget().saturating_sub(self.fixed_tokens);
        let msg_budget = limit.saturating_sub(pending).max(1);
        let source: Vec<AgentMessage> = if include_turn {
            self.history.iter().chain(self.turn.iter()).cloned().collect()
        } else {
            self.history.clone()
        };
        let result = self.assemble_once(source, msg_budget).await?;
        let estimate = result.estimated_tokens.max(tokens_of(&result.messages)) + pending;
        let authority = result.prompt_authority.unwrap_or_default();
        let may_overflow = authority == PromptAuthority::PreassemblyMayOverflow;
        let precheck = !self.engine().info().owns_compaction() || may_overflow;
        let source_tokens = if include_turn { self.history_tokens + tokens_of(&self.turn) } else { self.history_tokens };
        let estimate = if may_overflow { estimate.max(source_tokens + pending) } else { estimate };
        let result = if precheck && !self.precheck_done && estimate > limit {
            self.precheck_done = true;
            let params = CompactParams {
                force: Some(true),
                force_reason: Some(ForceReason::PreflightRequired),
                preflight_compaction_trigger: Some(PreflightCompactionTrigger::Tokens),
                current_token_count: Some(estimate),
                ..Default::default()
            };
            self.compact_with_engine(params, "preflight").await?;
            let source: Vec<AgentMessage> = if include_turn {
                self.history.iter().chain(self.turn.iter()).cloned().collect()
            } else {
                self.history.clone()
            };
            self.assemble_once(source, msg_budget).await?
        } else {
            result
        };
        if let Some(epoch) = result.context_projection.as_ref().and_then(|p| p.epoch.clone()) {
            self.out.context_epoch = Some(epoch);
        }
        if let Some(addition) = result.system_prompt_addition.as_deref().map(str::trim).filter(|a| !a.is_empty()) {
            self.system = format!("{addition}\n\n{}", self.rt.system_prompt);
        } else {
            self.system = self.rt.system_prompt.clone();
        }
        Ok(result.messages)
    }

    async fn assemble_once(&self, source: Vec<AgentMessage>, budget: u64) -> Result<AssembleResult> {
        let prepared = prepare_history(
            source,
            &PipelineOptions { history_turn_limit: self.rt.history_turn_limit, token_budget: Some(budget) },
        );
        let model = match &self.rt.backend {
            Backend::Model(b) => Some(b.model_id.clone()),
            Backend::Cli(_) => None,
        };
        let params = AssembleParams {
            session_id: self.session.entry.session_id.clone(),
            session_key: Some(self.session.key.clone()),
            messages: prepared.messages,
            token_budget: Some(budget),
            available_tools: Some(self.specs.iter().map(|s| s.name.clone()).collect()),
            citations_mode: None,
            model,
            prompt: Some(self.prompt.clone()),
            runtime_settings: Some(self.rt.runtime_settings()),
            runtime_context: Some(self.rt.runtime_context(&self.session, Some(prepared.report.tokens), None, false)),
        };
        let engine_id = self.engine().info().id;
        self.engine().assemble(&params, &self.cx()).await.map_err(|e| RuntimeError::engine(&engine_id, "assemble", e))
    }

    async fn call_model(&mut self, messages: Vec<AgentMessage>) -> std::result::Result<Completion, ModelError> {
        let Backend::Model(binding) = &self.rt.backend else {
            return Err(ModelError::config("agents.defaults.model", "the embedded runner needs a model provider"));
        };
        let request = CompletionRequest {
            model: binding.model_id.clone(),
            system_prompt: Some(self.system.clone()),
            messages,
            tools: self.specs.clone(),
            max_output_tokens: Some(binding.max_output_tokens),
            temperature: None,
        };
        binding.provider.complete(request, self.events.as_ref(), self.abort.token()).await
    }

    async fn run_tools(&mut self, calls: &[ToolCall]) -> Result<()> {
        for call in calls {
            if self.abort.is_aborted() {
                return Err(self.aborted());
            }
            let tool = self.tools.iter().find(|t| t.name() == call.name).cloned();
            let (text, is_error) = match tool {
                None => (format!("Unknown tool `{}`.", call.name), true),
                Some(tool) => {
                    let ctx = ToolCallContext {
                        session_id: self.session.entry.session_id.clone(),
                        session_key: Some(self.session.key.clone()),
                    };
                    let abort = self.abort.clone();
                    tokio::select! {
                        r = tool.execute(call.arguments.clone(), ctx) => match r {
                            Ok(t) => (t, false),
                            Err(e) => (e, true),
                        },
                        _ = abort.aborted() => return Err(self.aborted()),
                    }
                }
            };
            self.out.tool_calls += 1;
            self.persist(tool_result(&call.id, &call.name, text, is_error))?;
        }
        Ok(())
    }

    /// afterTurn > ingestBatch > ingest, with the full view and `prePromptMessageCount`.
    async fn deliver(&self, all: Vec<AgentMessage>) -> std::result::Result<(), EngineError> {
        let methods = self.engine().methods();
        let cx = self.cx();
        let sid = self.session.entry.session_id.clone();
        let key = Some(self.session.key.clone());
        if methods.has(Method::AfterTurn) {
            let current = self.history_tokens + tokens_of(&self.turn);
            let params = AfterTurnParams {
                session_id: sid,
                session_key: key,
                session_target: Some(self.rt.session_target(&self.session)),
                session_file: self.session.transcript_path.to_string_lossy().into_owned(),
                messages: all,
                pre_prompt_message_count: self.history.len() as u64,
                auto_compaction_summary: None,
                is_heartbeat: None,
                token_budget: Some(self.budget()),
                current_token_count: Some(current),
                runtime_settings: Some(self.rt.runtime_settings()),
                runtime_context: Some(self.rt.runtime_context(&self.session, Some(current), None, false)),
            };
            self.engine().after_turn(&params, &cx).await
        } else if methods.has(Method::IngestBatch) {
            let params =
                IngestBatchParams { session_id: sid, session_key: key, messages: self.turn.clone(), is_heartbeat: None };
            self.engine().ingest_batch(&params, &cx).await.map(|_| ())
        } else {
            for m in &self.turn {
                let params =
                    IngestParams { session_id: sid.clone(), session_key: key.clone(), message: m.clone(), is_heartbeat: None };
                self.engine().ingest(&params, &cx).await?;
            }
            Ok(())
        }
    }

    async fn compact_with_engine(&mut self, params: CompactParams, trigger: &str) -> Result<CompactResult> {
        let (result, successor) = self.rt.engine_compact(&self.session, params, trigger, Some(&self.abort)).await?;
        if let Some(next) = successor {
            self.move_to_successor(next)?;
        }
        if result.compacted {
            self.out.compactions.push(CompactionRecord {
                trigger: trigger.to_owned(),
                by: self.engine().info().id,
                tokens_before: result.result.as_ref().map(|r| r.tokens_before).unwrap_or(0),
                tokens_after: result.result.as_ref().and_then(|r| r.tokens_after),
            });
        }
        self.reload_history()?;
        self.prefix = None;
        Ok(result)
    }

    /// Moves the rest of the turn to a compaction successor; a fresh successor transcript gets
    /// this turn's messages so far, so the retried turn is complete there.
    fn move_to_successor(&mut self, next: ResolvedSession) -> Result<()> {
        let fresh = self.rt.history(&next)?.is_empty();
        self.session = next;
        self.out.session_id = self.session.entry.session_id.clone();
        self.turn_ids.clear();
        if fresh {
            for m in self.turn.clone() {
                let id = self.rt.append(&self.session, m)?;
                self.turn_ids.insert(id);
            }
        }
        Ok(())
    }

    /// Provider overflow: the engine compacts (observed token count, else a minimally
    /// over-budget one), then the call is retried once. If compaction fails, the provider's
    /// error is returned and the session mapping is left as it was.
    async fn recover_overflow(&mut self, observed: Option<u64>, original: ModelError) -> Result<()> {
        let count = observed.unwrap_or_else(|| self.budget() + 1);
        let params = CompactParams { force: Some(true), current_token_count: Some(count), ..Default::default() };
        match self.compact_with_engine(params, "overflow").await {
            Ok(r) if r.ok => {
                self.out.overflow_recovered = true;
                Ok(())
            }
            Ok(r) => {
                tracing::warn!("overflow recovery: compaction did not succeed: {:?}", r.reason);
                Err(RuntimeError::Provider(original))
            }
            Err(e) => {
                tracing::warn!("overflow recovery: compaction failed: {e}");
                Err(RuntimeError::Provider(original))
            }
        }
    }

    async fn finish(mut self) -> Result<TurnOutcome> {
        let all: Vec<AgentMessage> = self.history.iter().chain(self.turn.iter()).cloned().collect();
        if let Err(e) = self.deliver(all).await {
            let line = format!("context engine afterTurn failed: {e}");
            tracing::warn!("{line}");
            self.out.warnings.push(line);
        }
        // Built-in auto-compaction: only for engines that do not own compaction (§7.1).
        let owns = self.engine().info().owns_compaction();
        let limits = self.rt.limits();
        // The context now is the history plus this turn (until something compacts it).
        let mut context_tokens = self.history_tokens + tokens_of(&self.turn);
        let window = limits.context_window.min(limits.prompt_budget + limits.reserve_tokens + limits.max_output_tokens);
        if !owns && should_compact(context_tokens, window, &self.rt.compaction) {
            let keep = self.rt.keep_for(Some("threshold"), false);
            match self.rt.builtin_compact(&self.session, keep, None, Some(&self.abort)).await {
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
                    });
                    self.rt.maintain(&self.session, MaintenanceReason::Compaction).await;
                    let context = self.rt.history(&self.session)?;
                    context_tokens = tokens_of(&context.into_iter().map(|(_, m)| m).collect::<Vec<_>>());
                }
                Ok(_) => {}
                Err(e) => self.out.warnings.push(format!("auto-compaction failed: {e}")),
            }
        }
        self.out.context_tokens_after = context_tokens;
        let counters = TokenCounters {
            input: Some(self.out.usage.input),
            output: Some(self.out.usage.output),
            total: Some(self.out.usage.total_tokens),
            context: Some(context_tokens),
        };
        if let Err(e) = self.rt.store.record_tokens(&self.session.key, counters) {
            self.out.warnings.push(format!("cannot record token counters: {e}"));
        }
        self.rt.maintain(&self.session, MaintenanceReason::Turn).await;
        self.out.engine = self.engine().info().id;
        self.out.messages = std::mem::take(&mut self.turn);
        Ok(self.out)
    }
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
