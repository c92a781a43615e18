//! Plugin hooks: OpenClaw's typed `api.on(hook, handler, opts)` hooks, as a host fires them.
//!
//! The runtime knows *when* a hook fires (points of a turn) and the plugin crate knows *where*
//! its handlers live (plugin processes); neither may depend on the other. So the interface
//! between them, [`HookDispatcher`], lives in the contract crate, together with what OpenClaw's
//! hook runner does with handler results: how each hook's handlers run ([`hook_mode`]), their
//! default time budgets, and the merge rules, as pure functions over the handlers' outputs in
//! the order they ran ([`PromptBuild::merge`], [`decide_tool_call`], [`persisted_message`]).
//! Keeping the merges here means one implementation for every dispatcher, and lets them be
//! tested without a process.
//!
//! Failure policy (OpenClaw's `catchErrors: true`): a handler that throws or times out is
//! logged as `[hooks] <hook> handler from <pluginId> failed: <error>` and the others go on;
//! a hook never fails a turn. `before_tool_call` is fail-closed: a failed handler blocks that
//! tool call (not the turn) with OpenClaw's reason text.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::engine::CallContext;

/// How the handlers of one hook run, in priority order (higher `priority` first, ties in
/// registration order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookMode {
    /// Observe-only ("void") hooks: every handler runs at once; results are ignored.
    Parallel,
    /// Modifying hooks: one handler after the other, each result kept for the merge; a
    /// terminal result ([`is_terminal`]) stops the rest.
    Sequential,
    /// Synchronous chains (`tool_result_persist`, `before_message_write`): one after the
    /// other, each handler seeing the `message` the previous one returned.
    Chain,
}

impl HookMode {
    /// The wire name (`hook/run`'s `mode`).
    pub fn as_str(self) -> &'static str {
        match self {
            HookMode::Parallel => "parallel",
            HookMode::Sequential => "sequential",
            HookMode::Chain => "chain",
        }
    }
}

/// The hooks this host fires (docs/plugin-protocol.md, "Hooks"). Others may be registered
/// and are never called.
pub const FIRED_HOOKS: [&str; 14] = [
    "message_received",
    "session_start",
    "session_end",
    "before_reset",
    "before_prompt_build",
    "before_agent_start",
    "llm_input",
    "llm_output",
    "before_tool_call",
    "after_tool_call",
    "tool_result_persist",
    "agent_end",
    "before_compaction",
    "after_compaction",
];

/// How `hook`'s handlers run (OpenClaw's hook runner).
pub fn hook_mode(hook: &str) -> HookMode {
    match hook {
        "before_model_resolve"
        | "before_prompt_build"
        | "before_agent_start"
        | "before_tool_call"
        | "message_sending"
        | "subagent_spawning"
        | "subagent_delivery_target"
        | "before_install"
        | "inbound_claim"
        | "before_agent_reply"
        | "before_dispatch"
        | "reply_dispatch"
        | "before_agent_run" => HookMode::Sequential,
        "tool_result_persist" | "before_message_write" => HookMode::Chain,
        _ => HookMode::Parallel,
    }
}

/// The default per-handler budget of `hook` (OpenClaw's newest defaults); `None`: unbounded
/// by the hook (the host still bounds the whole call).
pub fn default_timeout(hook: &str) -> Option<Duration> {
    match hook {
        "before_agent_run"
        | "before_tool_call"
        | "before_install"
        | "before_prompt_build"
        | "before_agent_finalize"
        | "message_sending"
        | "reply_payload_sending"
        | "resolve_exec_env" => Some(Duration::from_secs(15)),
        "agent_end" | "before_compaction" | "after_compaction" => Some(Duration::from_secs(30)),
        "gateway_stop" => Some(Duration::from_secs(5)),
        "channel_pairing_requested" => Some(Duration::from_secs(2)),
        _ => None,
    }
}

/// Whether each handler of `hook` gets its own copy of the event (`before_tool_call`: a
/// handler that edits `event.params` in place must not change what the next one sees).
pub fn isolates_event(hook: &str) -> bool {
    hook == "before_tool_call"
}

/// A result that ends a sequential hook: `block: true` or `cancel: true`.
pub fn is_terminal(result: &Value) -> bool {
    result.get("block").and_then(Value::as_bool) == Some(true)
        || result.get("cancel").and_then(Value::as_bool) == Some(true)
}

/// What one handler did, in the order the handlers ran.
#[derive(Clone, Debug, PartialEq)]
pub struct HookOutput {
    /// The plugin whose handler it was.
    pub plugin_id: String,
    /// Its result (`None` for `undefined`/`null`), or why it failed (thrown, timed out, the
    /// process died).
    pub result: Result<Option<Value>, String>,
}

impl HookOutput {
    /// The result, when the handler returned one.
    pub fn value(&self) -> Option<&Value> {
        self.result.as_ref().ok().and_then(Option::as_ref)
    }
}

/// Runs plugin hook handlers. The runtime holds one (`RuntimeBuilder::hooks`); a host without
/// plugins has none and fires nothing.
#[async_trait]
pub trait HookDispatcher: Send + Sync + std::fmt::Debug {
    /// Whether any handler is registered for `hook` (the runtime builds no payload otherwise).
    fn has(&self, hook: &str) -> bool;

    /// Runs `hook`'s handlers as [`hook_mode`] says, with `event` and `ctx` (OpenClaw's
    /// payloads, camelCase JSON). Never fails: a handler's failure is its [`HookOutput`], and
    /// is logged here. `cx` carries the services a handler's `api.runtime.llm` uses.
    async fn run(&self, hook: &str, event: Value, ctx: Value, cx: &CallContext) -> Vec<HookOutput>;
}

/// The line OpenClaw logs for a failed handler.
pub fn failure_line(hook: &str, plugin_id: &str, error: &str) -> String {
    format!("[hooks] {hook} handler from {plugin_id} failed: {error}")
}

/// The merged `before_prompt_build` result (also `before_agent_start`'s prompt part).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PromptBuild {
    /// Replaces the whole system prompt when non-empty after trimming.
    pub system_prompt: Option<String>,
    /// Goes before the user's prompt, `"\n\n"` between.
    pub prepend_context: Option<String>,
    /// Goes after the user's prompt.
    pub append_context: Option<String>,
    /// Goes before the system prompt.
    pub prepend_system_context: Option<String>,
    /// Goes after the system prompt.
    pub append_system_context: Option<String>,
}

fn join(a: Option<String>, b: Option<String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => Some(format!("{a}\n\n{b}")),
        (a, b) => a.or(b),
    }
}

fn text_field(v: &Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .map(str::to_owned)
}

impl PromptBuild {
    /// OpenClaw's merge over handler results in priority order: the first defined
    /// `systemPrompt` wins; the context fields are joined with `"\n\n"` in priority order.
    pub fn merge(outputs: &[HookOutput]) -> Self {
        outputs
            .iter()
            .filter_map(HookOutput::value)
            .fold(Self::default(), |acc, v| Self {
                system_prompt: acc.system_prompt.or_else(|| text_field(v, "systemPrompt")),
                prepend_context: join(acc.prepend_context, text_field(v, "prependContext")),
                append_context: join(acc.append_context, text_field(v, "appendContext")),
                prepend_system_context: join(
                    acc.prepend_system_context,
                    text_field(v, "prependSystemContext"),
                ),
                append_system_context: join(
                    acc.append_system_context,
                    text_field(v, "appendSystemContext"),
                ),
            })
    }

    /// `self` (from `before_prompt_build`) followed by the legacy `before_agent_start` result,
    /// as OpenClaw's `resolvePromptBuildHookResult` combines them.
    pub fn then(self, legacy: PromptBuild) -> Self {
        Self {
            system_prompt: self.system_prompt.or(legacy.system_prompt),
            prepend_context: join(self.prepend_context, legacy.prepend_context),
            append_context: join(self.append_context, legacy.append_context),
            prepend_system_context: join(
                self.prepend_system_context,
                legacy.prepend_system_context,
            ),
            append_system_context: join(self.append_system_context, legacy.append_system_context),
        }
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Whether it changes the system prompt.
    pub fn changes_system(&self) -> bool {
        self.system_prompt.is_some()
            || self.prepend_system_context.is_some()
            || self.append_system_context.is_some()
    }

    /// Whether it changes the user's prompt.
    pub fn changes_prompt(&self) -> bool {
        self.prepend_context.is_some() || self.append_context.is_some()
    }

    /// The prompt the model gets: `prepend + "\n\n" + prompt (+ "\n\n" + append)`.
    pub fn apply_prompt(&self, prompt: &str) -> String {
        let mut out = String::new();
        for part in [
            self.prepend_context.as_deref(),
            Some(prompt),
            self.append_context.as_deref(),
        ]
        .into_iter()
        .flatten()
        {
            if !out.is_empty() {
                out.push_str("\n\n");
            }
            out.push_str(part);
        }
        out
    }

    /// The system prompt the model gets: `systemPrompt` (when set) replaces `system`, then the
    /// system contexts go around it, `"\n\n"` between.
    pub fn apply_system(&self, system: &str) -> String {
        let base = self
            .system_prompt
            .as_deref()
            .map(str::trim)
            .unwrap_or(system);
        let mut out = String::new();
        for part in [
            self.prepend_system_context.as_deref(),
            Some(base),
            self.append_system_context.as_deref(),
        ]
        .into_iter()
        .flatten()
        {
            if part.is_empty() {
                continue;
            }
            if !out.is_empty() {
                out.push_str("\n\n");
            }
            out.push_str(part);
        }
        out
    }
}

/// What happens to a tool call after `before_tool_call`.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolCallDecision {
    /// Run the tool with these arguments.
    Run(Value),
    /// Do not run it: this is the tool's error result the model sees.
    Block(String),
}

/// The reason of a block without one (OpenClaw's text).
pub const DEFAULT_BLOCK_REASON: &str = "Tool call blocked by plugin hook";
/// The reason when a handler failed (the hook is fail-closed; OpenClaw's text).
pub const HOOK_FAILURE_BLOCK_REASON: &str =
    "Tool call blocked because before_tool_call hook failed";
/// The reason when a handler asks for an approval: this host has no approval route (OpenClaw's
/// text for a gateway that has none).
pub const NO_APPROVAL_ROUTE_REASON: &str = "Plugin approval unavailable (no approval route)";

/// OpenClaw's `before_tool_call` semantics over the handlers' outputs in the order they ran:
/// a failed handler blocks (fail-closed); `block: true` blocks with its `blockReason` (terminal:
/// the dispatcher ran no handler after it); `requireApproval` blocks, as no approval can be
/// asked here; otherwise the last `params` given is merged over the call's arguments
/// (`{...params, ...hookParams}`).
pub fn decide_tool_call(params: &Value, outputs: &[HookOutput]) -> ToolCallDecision {
    let mut hook_params: Option<&Value> = None;
    for out in outputs {
        let v = match &out.result {
            Err(_) => return ToolCallDecision::Block(HOOK_FAILURE_BLOCK_REASON.to_owned()),
            Ok(None) => continue,
            Ok(Some(v)) => v,
        };
        if v.get("block").and_then(Value::as_bool) == Some(true) {
            let reason =
                text_field(v, "blockReason").unwrap_or_else(|| DEFAULT_BLOCK_REASON.to_owned());
            return ToolCallDecision::Block(reason);
        }
        if v.get("requireApproval").is_some_and(Value::is_object) {
            return ToolCallDecision::Block(NO_APPROVAL_ROUTE_REASON.to_owned());
        }
        if let Some(p) = v.get("params").filter(|p| !p.is_null()) {
            hook_params = Some(p);
        }
    }
    match (hook_params, params) {
        (Some(Value::Object(h)), Value::Object(orig)) => {
            let mut merged = orig.clone();
            merged.extend(h.iter().map(|(k, v)| (k.clone(), v.clone())));
            ToolCallDecision::Run(Value::Object(merged))
        }
        (Some(h @ Value::Object(_)), _) => ToolCallDecision::Run(h.clone()),
        _ => ToolCallDecision::Run(params.clone()),
    }
}

/// The `message` a `tool_result_persist` chain ends with: the last one a handler returned
/// (each handler saw the one before), or `None` when none replaced it.
pub fn persisted_message(outputs: &[HookOutput]) -> Option<Value> {
    outputs
        .iter()
        .rev()
        .filter_map(HookOutput::value)
        .filter_map(|v| v.get("message"))
        .find(|m| m.is_object())
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(v: Value) -> HookOutput {
        HookOutput {
            plugin_id: "p".into(),
            result: Ok(Some(v)),
        }
    }

    #[test]
    fn prompt_build_merges_in_priority_order_and_the_first_system_prompt_wins() {
        let merged = PromptBuild::merge(&[
            ok(json!({"prependContext": "A", "systemPrompt": "first"})),
            HookOutput {
                plugin_id: "q".into(),
                result: Err("boom".into()),
            },
            HookOutput {
                plugin_id: "q".into(),
                result: Ok(None),
            },
            ok(
                json!({"prependContext": "B", "systemPrompt": "second", "appendSystemContext": "Z"}),
            ),
        ]);
        assert_eq!(merged.prepend_context.as_deref(), Some("A\n\nB"));
        assert_eq!(merged.system_prompt.as_deref(), Some("first"));
        assert_eq!(merged.apply_prompt("hi"), "A\n\nB\n\nhi");
        assert_eq!(merged.apply_system("base"), "first\n\nZ");
        let legacy = PromptBuild {
            prepend_context: Some("C".into()),
            ..Default::default()
        };
        assert_eq!(
            merged.then(legacy).prepend_context.as_deref(),
            Some("A\n\nB\n\nC")
        );
        assert!(PromptBuild::merge(&[]).is_empty());
    }

    #[test]
    fn tool_call_decisions_follow_openclaw() {
        let params = json!({"path": "a.rs", "mode": "r"});
        assert_eq!(
            decide_tool_call(&params, &[]),
            ToolCallDecision::Run(params.clone())
        );
        assert_eq!(
            decide_tool_call(&params, &[ok(json!({"params": {"path": "b.rs"}}))]),
            ToolCallDecision::Run(json!({"path": "b.rs", "mode": "r"}))
        );
        assert_eq!(
            decide_tool_call(
                &params,
                &[
                    ok(json!({"params": {"path": "b.rs"}})),
                    ok(json!({"block": true, "blockReason": "no"}))
                ]
            ),
            ToolCallDecision::Block("no".into())
        );
        assert_eq!(
            decide_tool_call(&params, &[ok(json!({"block": true}))]),
            ToolCallDecision::Block(DEFAULT_BLOCK_REASON.into())
        );
        assert_eq!(
            decide_tool_call(
                &params,
                &[HookOutput {
                    plugin_id: "p".into(),
                    result: Err("x".into())
                }]
            ),
            ToolCallDecision::Block(HOOK_FAILURE_BLOCK_REASON.into())
        );
        assert_eq!(
            decide_tool_call(
                &params,
                &[ok(
                    json!({"requireApproval": {"title": "t", "description": "d"}})
                )]
            ),
            ToolCallDecision::Block(NO_APPROVAL_ROUTE_REASON.into())
        );
    }

    #[test]
    fn the_persisted_message_is_the_last_one_returned() {
        assert_eq!(persisted_message(&[ok(json!({}))]), None);
        assert_eq!(
            persisted_message(&[
                ok(json!({"message": {"n": 1}})),
                ok(json!({"other": 1})),
                ok(json!({"message": {"n": 2}}))
            ]),
            Some(json!({"n": 2}))
        );
    }

    #[test]
    fn modes_and_terminal_results() {
        assert_eq!(hook_mode("before_tool_call"), HookMode::Sequential);
        assert_eq!(hook_mode("tool_result_persist"), HookMode::Chain);
        assert_eq!(hook_mode("agent_end"), HookMode::Parallel);
        assert!(is_terminal(&json!({"block": true})));
        assert!(!is_terminal(&json!({"block": false, "params": {}})));
        assert_eq!(default_timeout("agent_end"), Some(Duration::from_secs(30)));
        assert_eq!(default_timeout("llm_output"), None);
    }
}
