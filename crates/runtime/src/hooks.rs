//! Plugin hooks at the points of a turn: the events and contexts OpenClaw passes its typed
//! hooks (`api.on`), built here and handed to the runtime's [`HookDispatcher`]; what the
//! results mean comes from [`clawctx_engine::hooks`].
//!
//! Why a module of its own: the turn loop should only say *where* a hook fires; the payloads
//! (OpenClaw's field names) and the policy (a hook never fails a turn) live in one place. A
//! payload is built only when some plugin registered a handler for the hook
//! ([`HookDispatcher::has`]), so a host without hooks pays one check per point.
//!
//! Every hook is awaited where it fires, observe-only ones included (OpenClaw's channel paths
//! fire some of those and go on): a CLI host has no gateway that outlives the turn, so a
//! `clawctx run` must not exit before its `agent_end` ran, and handlers see events in the order
//! they happened. Handlers are bounded by their budgets (see `clawctx_plugin::hooks`).

use std::sync::Arc;

use clawctx_engine::hooks::{decide_tool_call, persisted_message, PromptBuild, ToolCallDecision};
use clawctx_engine::{HookDispatcher, HookOutput};
use clawctx_protocol::*;
use clawctx_transcript::ResolvedSession;
use serde_json::{json, Value};

use crate::model::Backend;
use crate::runtime::Inner;

/// The channel this host reports in hook contexts (`channelId`, `messageProvider`).
pub const HOOK_CHANNEL: &str = "clawctx";

/// A new run id (`runId` of the hook payloads): one per turn.
pub(crate) fn new_run_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Where a hook fires: the runtime, the session, and the turn (its run id, whether it is a
/// heartbeat).
pub(crate) struct HookSite<'a> {
    pub(crate) rt: &'a Arc<Inner>,
    pub(crate) session: &'a ResolvedSession,
    pub(crate) run_id: Option<&'a str>,
    pub(crate) heartbeat: bool,
}

fn to_json<T: serde::Serialize + ?Sized>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

impl<'a> HookSite<'a> {
    /// A site outside a turn (`/compact`, `/new`).
    pub(crate) fn session(rt: &'a Arc<Inner>, session: &'a ResolvedSession) -> Self {
        Self {
            rt,
            session,
            run_id: None,
            heartbeat: false,
        }
    }

    /// Whether some handler is registered for `hook`.
    pub(crate) fn wants(&self, hook: &str) -> bool {
        self.rt.hooks.as_ref().is_some_and(|d| d.has(hook))
    }

    async fn fire(&self, hook: &str, event: Value, ctx: Value) -> Vec<HookOutput> {
        let Some(dispatcher) = self.rt.hooks.as_ref().filter(|d| d.has(hook)) else {
            return Vec::new();
        };
        let cx = self.rt.call_context(self.session, None);
        dispatcher.run(hook, event, ctx, &cx).await
    }

    fn model(&self) -> (Option<String>, Option<String>) {
        match &self.rt.backend {
            Backend::Model(b) => (Some(b.provider_id.clone()), Some(b.model_id.clone())),
            Backend::Cli(spec) => (Some(format!("cli:{}", spec.id)), None),
        }
    }

    /// `PluginHookAgentContext`.
    fn agent_ctx(&self) -> Value {
        let (provider, model) = self.model();
        json!({
            "runId": self.run_id,
            "agentId": self.session.agent_id,
            "sessionKey": self.session.key,
            "sessionId": self.session.entry.session_id,
            "workspaceDir": self.rt.workspace_dir,
            "modelProviderId": provider,
            "modelId": model,
            "messageProvider": HOOK_CHANNEL,
            "channelId": HOOK_CHANNEL,
            "trigger": if self.heartbeat { "heartbeat" } else { "user" },
            "contextTokenBudget": self.rt.limits().prompt_budget,
        })
    }

    /// `PluginHookSessionContext`.
    fn session_ctx(&self, session: &ResolvedSession) -> Value {
        json!({"sessionId": session.entry.session_id, "agentId": session.agent_id, "sessionKey": session.key})
    }

    /// `message_received`: the user's message reached the agent.
    pub(crate) async fn message_received(&self, prompt: &str, timestamp: i64) {
        if !self.wants("message_received") {
            return;
        }
        let event = json!({
            "from": "user",
            "content": prompt,
            "timestamp": timestamp,
            "sessionKey": self.session.key,
            "runId": self.run_id,
        });
        let ctx = json!({"channelId": HOOK_CHANNEL, "sessionKey": self.session.key, "runId": self.run_id});
        self.fire("message_received", event, ctx).await;
    }

    /// `session_start`: the first turn of a new session.
    pub(crate) async fn session_start(&self) {
        if !self.wants("session_start") {
            return;
        }
        let event =
            json!({"sessionId": self.session.entry.session_id, "sessionKey": self.session.key});
        self.fire("session_start", event, self.session_ctx(self.session))
            .await;
    }

    /// `before_prompt_build` (then the legacy `before_agent_start`), after the engine's
    /// assembly: `messages` is what it assembled before this turn's prompt.
    pub(crate) async fn before_prompt_build(
        &self,
        prompt: &str,
        messages: &[AgentMessage],
    ) -> PromptBuild {
        let mut merged = PromptBuild::default();
        for hook in ["before_prompt_build", "before_agent_start"] {
            if !self.wants(hook) {
                continue;
            }
            let event =
                json!({"prompt": prompt, "messages": to_json(messages), "runId": self.run_id});
            let outputs = self.fire(hook, event, self.agent_ctx()).await;
            merged = merged.then(PromptBuild::merge(&outputs));
        }
        merged
    }

    /// `llm_input`: what the first model call of the turn is given.
    pub(crate) async fn llm_input(
        &self,
        system: &str,
        prompt: &str,
        history: &[AgentMessage],
        tools: &[String],
    ) {
        if !self.wants("llm_input") {
            return;
        }
        let (provider, model) = self.model();
        let event = json!({
            "runId": self.run_id,
            "sessionId": self.session.entry.session_id,
            "provider": provider,
            "model": model,
            "systemPrompt": system,
            "prompt": prompt,
            "historyMessages": to_json(history),
            "imagesCount": 0,
            "tools": tools,
        });
        self.fire("llm_input", event, self.agent_ctx()).await;
    }

    fn tool_ctx(&self, call: &ToolCall) -> Value {
        json!({
            "toolName": call.name,
            "agentId": self.session.agent_id,
            "sessionKey": self.session.key,
            "sessionId": self.session.entry.session_id,
            "runId": self.run_id,
            "toolCallId": call.id,
            "channelId": HOOK_CHANNEL,
        })
    }

    /// `before_tool_call`: run (with these arguments) or block.
    pub(crate) async fn before_tool_call(&self, call: &ToolCall) -> ToolCallDecision {
        if !self.wants("before_tool_call") {
            return ToolCallDecision::Run(call.arguments.clone());
        }
        let event = json!({"toolName": call.name, "params": call.arguments, "runId": self.run_id, "toolCallId": call.id});
        let outputs = self
            .fire("before_tool_call", event, self.tool_ctx(call))
            .await;
        decide_tool_call(&call.arguments, &outputs)
    }

    /// `after_tool_call`: what the tool answered.
    pub(crate) async fn after_tool_call(
        &self,
        call: &ToolCall,
        params: &Value,
        text: &str,
        is_error: bool,
        duration_ms: u64,
    ) {
        if !self.wants("after_tool_call") {
            return;
        }
        let mut event = json!({
            "toolName": call.name,
            "params": params,
            "runId": self.run_id,
            "toolCallId": call.id,
            "durationMs": duration_ms,
        });
        event[if is_error { "error" } else { "result" }] = Value::String(text.to_owned());
        self.fire("after_tool_call", event, self.tool_ctx(call))
            .await;
    }

    /// `tool_result_persist`: the tool result as it will be stored (and seen by the model).
    /// A replacement that is not a `toolResult` for the same call is refused with a warning:
    /// the transcript must keep its tool pairs.
    pub(crate) async fn tool_result_persist(&self, message: AgentMessage) -> AgentMessage {
        if !self.wants("tool_result_persist") {
            return message;
        }
        let (id, name) = match &message {
            AgentMessage::ToolResult(r) => (r.tool_call_id.clone(), r.tool_name.clone()),
            _ => return message,
        };
        let event = json!({"toolName": name, "toolCallId": id, "message": to_json(&message), "isSynthetic": false});
        let ctx = json!({"agentId": self.session.agent_id, "sessionKey": self.session.key, "toolName": name, "toolCallId": id});
        let outputs = self.fire("tool_result_persist", event, ctx).await;
        let Some(replacement) = persisted_message(&outputs) else {
            return message;
        };
        match serde_json::from_value::<AgentMessage>(replacement) {
            Ok(AgentMessage::ToolResult(r)) if r.tool_call_id == id => AgentMessage::ToolResult(r),
            Ok(other) => {
                tracing::warn!(
                    "[hooks] tool_result_persist returned a {} message{}; the tool result is kept as it was",
                    other.role(),
                    if other.tool_result_id().is_some() { " for another tool call" } else { "" }
                );
                message
            }
            Err(e) => {
                tracing::warn!("[hooks] tool_result_persist returned a message that is not one: {e}; the tool result is kept as it was");
                message
            }
        }
    }

    /// `llm_output`: the turn's model output, once the tool loop is done.
    pub(crate) async fn llm_output(&self, prompt: &str, turn: &[AgentMessage], usage: &Usage) {
        if !self.wants("llm_output") {
            return;
        }
        let (provider, model) = self.model();
        let assistants: Vec<&AgentMessage> = turn
            .iter()
            .filter(|m| matches!(m, AgentMessage::Assistant(_)))
            .collect();
        let texts: Vec<String> = assistants
            .iter()
            .filter_map(|m| match m {
                AgentMessage::Assistant(a) => Some(assistant_text(&a.content)),
                _ => None,
            })
            .filter(|t| !t.is_empty())
            .collect();
        let event = json!({
            "runId": self.run_id,
            "sessionId": self.session.entry.session_id,
            "provider": provider,
            "model": model,
            "assistantTexts": texts,
            "lastAssistant": assistants.last().map(|m| to_json(*m)),
            "usage": {
                "input": usage.input,
                "output": usage.output,
                "cacheRead": usage.cache_read,
                "cacheWrite": usage.cache_write,
                "total": usage.total_tokens,
            },
            "prompt": prompt,
            "contextTokenBudget": self.rt.limits().prompt_budget,
        });
        self.fire("llm_output", event, self.agent_ctx()).await;
    }

    /// `agent_end`: the turn ended; `messages` is the session's context after it.
    pub(crate) async fn agent_end(
        &self,
        messages: &[AgentMessage],
        error: Option<String>,
        duration_ms: u64,
    ) {
        if !self.wants("agent_end") {
            return;
        }
        let mut event = json!({
            "runId": self.run_id,
            "messages": to_json(messages),
            "success": error.is_none(),
            "durationMs": duration_ms,
        });
        if let Some(e) = error {
            event["error"] = Value::String(e);
        }
        self.fire("agent_end", event, self.agent_ctx()).await;
    }

    /// `before_compaction`: `messages` is the context about to be compacted.
    pub(crate) async fn before_compaction(&self, messages: &[AgentMessage], tokens: u64) {
        if !self.wants("before_compaction") {
            return;
        }
        let event = json!({
            "messageCount": messages.len(),
            "compactingCount": messages.len(),
            "tokenCount": tokens,
            "messages": to_json(messages),
            "sessionFile": self.session.transcript_path.to_string_lossy(),
        });
        self.fire("before_compaction", event, self.agent_ctx())
            .await;
    }

    /// `after_compaction` (only after a compaction that succeeded, also when it removed
    /// nothing): the context it left.
    pub(crate) async fn after_compaction(
        &self,
        before: usize,
        after: &[AgentMessage],
        tokens: u64,
    ) {
        if !self.wants("after_compaction") {
            return;
        }
        let event = json!({
            "messageCount": after.len(),
            "tokenCount": tokens,
            "compactedCount": before.saturating_sub(after.len()),
            "sessionFile": self.session.transcript_path.to_string_lossy(),
        });
        self.fire("after_compaction", event, self.agent_ctx()).await;
    }

    /// `/new`: `before_reset` with the old session's context, then `session_end` (reason
    /// `new`) naming the session that replaces it.
    pub(crate) async fn session_reset(&self, messages: &[AgentMessage], next: &ResolvedSession) {
        if self.wants("before_reset") {
            let event = json!({
                "sessionFile": self.session.transcript_path.to_string_lossy(),
                "messages": to_json(messages),
                "reason": "new",
            });
            self.fire("before_reset", event, self.agent_ctx()).await;
        }
        if self.wants("session_end") {
            let event = json!({
                "sessionId": self.session.entry.session_id,
                "sessionKey": self.session.key,
                "messageCount": messages.len(),
                "reason": "new",
                "sessionFile": self.session.transcript_path.to_string_lossy(),
                "nextSessionId": next.entry.session_id,
                "nextSessionKey": next.key,
            });
            self.fire("session_end", event, self.session_ctx(self.session))
                .await;
        }
    }
}

/// The text blocks of an assistant message, joined (what OpenClaw collects as
/// `assistantTexts`).
fn assistant_text(content: &Content) -> String {
    match content {
        Content::Text(t) => t.clone(),
        Content::Blocks(blocks) => blocks
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text(t) => Some(t.text.as_str()),
                _ => None,
            })
            .collect(),
    }
}

/// The dispatcher type the runtime holds.
pub(crate) type Hooks = Option<Arc<dyn HookDispatcher>>;

/// `agent_end` after an embedded turn (`error`: why it failed), with the session's context as
/// the turn left it (read only when a plugin has the hook).
pub(crate) async fn agent_end(
    rt: &Arc<Inner>,
    key: &str,
    run_id: &str,
    heartbeat: bool,
    error: Option<&crate::error::RuntimeError>,
    started: std::time::Instant,
) {
    if !rt.hooks.as_ref().is_some_and(|d| d.has("agent_end")) {
        return;
    }
    let session = match rt.session(key) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("[hooks] agent_end: cannot resolve session {key}: {e}");
            return;
        }
    };
    let messages: Vec<AgentMessage> = match rt.history(&session) {
        Ok(h) => h.into_iter().map(|(_, m)| m).collect(),
        Err(e) => {
            tracing::warn!("[hooks] agent_end: cannot read the context: {e}");
            Vec::new()
        }
    };
    let site = HookSite {
        rt,
        session: &session,
        run_id: Some(run_id),
        heartbeat,
    };
    let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    site.agent_end(&messages, error.map(ToString::to_string), ms)
        .await;
}
