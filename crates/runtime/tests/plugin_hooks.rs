//! Plugin hooks and plugin tools end to end: real `node` plugin processes (written to temp
//! dirs, loaded with `clawctx_plugin::register_plugin`) whose `api.on` handlers and
//! `registerTool` tools take part in turns of the runtime against a scripted model. Handlers
//! record what they saw in a JSON-lines file named by their plugin config, so each test checks
//! OpenClaw's payloads as a plugin receives them, and what the hook's result changed (the
//! transcript, the model's requests, the tool that ran or did not).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use clawctx_engine::*;
use clawctx_model::{Exhaustion, ScriptedProvider, ScriptedReply, ScriptedToolCall};
use clawctx_plugin::{LoadedPlugin, PluginHooks, PluginOptions};
use clawctx_protocol::*;
use clawctx_runtime::*;
use serde_json::{json, Value};

const KEY: &str = "agent:main:main";

/// A plugin in `<dir>/<id>` with `index.mjs` = `source`; its config is `{log: <file>}` plus
/// `hooks` (the operator's `plugins.entries.<id>.hooks`). Returns the loaded plugin and the
/// log file.
async fn plugin(dir: &Path, id: &str, source: &str, hooks: Value) -> (LoadedPlugin, PathBuf) {
    let root = dir.join(id);
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(
        root.join("openclaw.plugin.json"),
        json!({"id": id, "entry": "index.mjs", "configSchema": {"type": "object"}}).to_string(),
    )
    .unwrap();
    std::fs::write(root.join("index.mjs"), source).unwrap();
    let log = dir.join(format!("{id}.log"));
    let config = json!({"plugins": {"entries": {id: {"enabled": true, "config": {"log": log}, "hooks": hooks}}}});
    let registry = ContextEngineRegistry::with_legacy();
    let options = PluginOptions {
        runtime_dir: Some(dir.join("runtime")),
        call_timeout: Some(Duration::from_secs(10)),
        ..Default::default()
    };
    let loaded = clawctx_plugin::register_plugin(&registry, &root, &config, options)
        .await
        .unwrap();
    assert!(
        loaded.engines.is_empty(),
        "a hooks-only plugin registers no engine"
    );
    (loaded, log)
}

/// The JS that appends `{hook, event, ctx}` to the plugin's log.
const RECORD: &str = r#"
import * as fs from "node:fs";
function recorder(api) {
  return (hook, event, ctx) => fs.appendFileSync(api.pluginConfig.log, JSON.stringify({ hook, event, ctx }) + "\n");
}
"#;

/// What the plugin recorded, in order.
fn records(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn of<'a>(records: &'a [Value], hook: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["hook"] == hook).collect()
}

fn tool_call(id: &str, name: &str, args: Value) -> ScriptedReply {
    ScriptedReply::Reply {
        content: String::new(),
        thinking: None,
        tool_calls: vec![ScriptedToolCall {
            id: Some(id.into()),
            name: name.into(),
            arguments: args,
        }],
        usage: None,
        stop_reason: None,
        error_message: None,
    }
}

/// A runtime tool that records its arguments and call ids and answers `output`.
struct Probe {
    name: &'static str,
    output: String,
    calls: Mutex<Vec<(Value, Option<String>)>>,
}

impl Probe {
    fn new(name: &'static str, output: impl Into<String>) -> Arc<Self> {
        Arc::new(Self {
            name,
            output: output.into(),
            calls: Mutex::new(Vec::new()),
        })
    }
    fn calls(&self) -> Vec<(Value, Option<String>)> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl AgentTool for Probe {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "A probe."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }
    async fn execute(&self, arguments: Value, context: ToolCallContext) -> Result<String, String> {
        self.calls
            .lock()
            .unwrap()
            .push((arguments, context.tool_call_id));
        Ok(self.output.clone())
    }
}

struct Setup {
    rt: AgentRuntime,
    provider: Arc<ScriptedProvider>,
    plugins: Vec<LoadedPlugin>,
}

fn runtime(
    dir: &Path,
    plugins: Vec<LoadedPlugin>,
    replies: Vec<ScriptedReply>,
    tools: Vec<Arc<dyn AgentTool>>,
) -> Setup {
    let provider = Arc::new(ScriptedProvider::new(replies, Exhaustion::Error));
    let backend = Backend::Model(ModelBinding::new(provider.clone(), "m", 64_000, 1024));
    let mut builder = AgentRuntime::builder(dir.join("state"), Arc::new(LegacyEngine), backend)
        .system_prompt("You are a test assistant.")
        .hooks(Arc::new(PluginHooks::new(&plugins)));
    for t in tools
        .into_iter()
        .chain(plugins.iter().flat_map(LoadedPlugin::agent_tools))
    {
        builder = builder.tool(t);
    }
    Setup {
        rt: builder.build(),
        provider,
        plugins: plugins,
    }
}

fn tool_results(messages: &[AgentMessage]) -> Vec<&ToolResultMessage> {
    messages
        .iter()
        .filter_map(|m| match m {
            AgentMessage::ToolResult(r) => Some(r),
            _ => None,
        })
        .collect()
}

fn text_of(r: &ToolResultMessage) -> String {
    AgentMessage::ToolResult(r.clone()).plain_text()
}

#[tokio::test]
async fn tool_result_persist_shrinks_a_large_output_before_it_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let source = format!(
        "{RECORD}\nexport default function register(api) {{
  const record = recorder(api);
  api.on('tool_result_persist', (event, ctx) => {{
    record('tool_result_persist', {{ ...event, message: {{ role: event.message.role, chars: JSON.stringify(event.message).length }} }}, ctx);
    const text = event.message.content.map((b) => b.text || '').join('');
    if (text.length < 1000) return undefined;
    return {{ message: {{ ...event.message, content: [{{ type: 'text', text: `[shrunk: ${{text.length}} chars]` }}] }} }};
  }});
}}"
    );
    let (loaded, log) = plugin(dir.path(), "shrinker", &source, json!({})).await;
    let big = "x".repeat(50_000);
    let probe = Probe::new("dump", big.clone());
    let s = runtime(
        dir.path(),
        vec![loaded],
        vec![
            tool_call("call_big", "dump", json!({})),
            ScriptedReply::text("done"),
        ],
        vec![probe.clone()],
    );
    let outcome =
        s.rt.run_turn(TurnRequest::new(KEY, "dump it"))
            .await
            .unwrap();
    assert_eq!(probe.calls().len(), 1, "the tool ran");
    // The transcript stores the shrunk result, and the next model call sees that one.
    let context = s.rt.context(KEY).unwrap();
    let stored = tool_results(&context);
    assert_eq!(stored.len(), 1);
    assert_eq!(text_of(stored[0]), "[shrunk: 50000 chars]");
    assert_eq!(stored[0].tool_call_id, "call_big", "the pair is kept");
    assert_eq!(tool_results(&outcome.messages).len(), 1);
    let second = &s.provider.requests()[1];
    let sent = tool_results(&second.messages);
    assert_eq!(text_of(sent[0]), "[shrunk: 50000 chars]");
    let seen = records(&log);
    let persist = of(&seen, "tool_result_persist");
    assert_eq!(persist.len(), 1);
    assert_eq!(persist[0]["event"]["toolName"], "dump");
    assert_eq!(persist[0]["event"]["toolCallId"], "call_big");
    assert_eq!(persist[0]["event"]["message"]["role"], "toolResult");
    assert!(persist[0]["event"]["message"]["chars"].as_u64().unwrap() > 50_000);
    assert_eq!(persist[0]["ctx"]["sessionKey"], KEY);
    assert_eq!(persist[0]["ctx"]["toolCallId"], "call_big");
}

#[tokio::test]
async fn before_tool_call_block_reaches_the_model_and_the_tool_never_runs() {
    let dir = tempfile::tempdir().unwrap();
    let source = format!(
        "{RECORD}\nexport default function register(api) {{
  const record = recorder(api);
  api.on('before_tool_call', (event, ctx) => {{
    record('before_tool_call', event, ctx);
    if (event.toolName === 'rm') return {{ block: true, blockReason: `refusing to delete ${{event.params.path}}` }};
  }});
}}"
    );
    let (loaded, log) = plugin(dir.path(), "guard", &source, json!({})).await;
    let rm = Probe::new("rm", "deleted");
    let s = runtime(
        dir.path(),
        vec![loaded],
        vec![
            tool_call("call_rm", "rm", json!({"path": "/etc"})),
            ScriptedReply::text("ok, I will not"),
        ],
        vec![rm.clone()],
    );
    let outcome =
        s.rt.run_turn(TurnRequest::new(KEY, "delete /etc"))
            .await
            .unwrap();
    assert!(rm.calls().is_empty(), "a blocked tool never runs");
    let results = tool_results(&outcome.messages);
    assert_eq!(results.len(), 1);
    assert_eq!(text_of(results[0]), "refusing to delete /etc");
    assert_eq!(results[0].is_error, Some(true));
    let second = &s.provider.requests()[1];
    assert_eq!(
        text_of(tool_results(&second.messages)[0]),
        "refusing to delete /etc",
        "the model sees the reason"
    );
    let seen = records(&log);
    let calls = of(&seen, "before_tool_call");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["event"]["toolName"], "rm");
    assert_eq!(calls[0]["event"]["params"], json!({"path": "/etc"}));
    assert_eq!(calls[0]["event"]["toolCallId"], "call_rm");
    assert_eq!(calls[0]["event"]["runId"], calls[0]["ctx"]["runId"]);
    assert!(calls[0]["ctx"]["runId"]
        .as_str()
        .is_some_and(|r| !r.is_empty()));
    assert_eq!(calls[0]["ctx"]["toolName"], "rm");
    assert_eq!(calls[0]["ctx"]["sessionKey"], KEY);
}

#[tokio::test]
async fn before_tool_call_rewrites_params_and_after_tool_call_sees_them() {
    let dir = tempfile::tempdir().unwrap();
    let source = format!(
        "{RECORD}\nexport default function register(api) {{
  const record = recorder(api);
  api.on('before_tool_call', (event) => ({{ params: {{ path: event.params.path.replace('secret', 'public') }} }}));
  api.on('after_tool_call', (event, ctx) => record('after_tool_call', event, ctx));
}}"
    );
    let (loaded, log) = plugin(dir.path(), "rewriter", &source, json!({})).await;
    let read = Probe::new("read", "contents");
    let s = runtime(
        dir.path(),
        vec![loaded],
        vec![
            tool_call("call_r", "read", json!({"path": "secret.txt", "lines": 10})),
            ScriptedReply::text("read it"),
        ],
        vec![read.clone()],
    );
    s.rt.run_turn(TurnRequest::new(KEY, "read secret.txt"))
        .await
        .unwrap();
    let calls = read.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].0,
        json!({"path": "public.txt", "lines": 10}),
        "hook params are merged over the call's"
    );
    let seen = records(&log);
    let after = of(&seen, "after_tool_call");
    assert_eq!(after.len(), 1);
    assert_eq!(
        after[0]["event"]["params"],
        json!({"path": "public.txt", "lines": 10})
    );
    assert_eq!(after[0]["event"]["result"], "contents");
    assert_eq!(after[0]["event"]["toolCallId"], "call_r");
}

#[tokio::test]
async fn before_prompt_build_context_reaches_the_model_request() {
    let dir = tempfile::tempdir().unwrap();
    let source = format!(
        "{RECORD}\nexport default function register(api) {{
  const record = recorder(api);
  api.on('before_prompt_build', (event, ctx) => {{
    record('before_prompt_build', event, ctx);
    return {{ prependContext: `<memories>seen ${{event.messages.length}} messages</memories>`, appendSystemContext: 'Plugin rule: be brief.' }};
  }}, {{ priority: 1 }});
  api.on('before_prompt_build', () => ({{ prependContext: 'second handler', systemPrompt: '   ' }}));
  api.on('llm_input', (event, ctx) => record('llm_input', event, ctx));
}}"
    );
    let hooks = json!({"allowConversationAccess": true});
    let (loaded, log) = plugin(dir.path(), "memory", &source, hooks).await;
    let probe = Probe::new("look", "looked");
    let s = runtime(
        dir.path(),
        vec![loaded],
        vec![
            ScriptedReply::text("first"),
            tool_call("call_l", "look", json!({})),
            ScriptedReply::text("second"),
        ],
        vec![probe],
    );
    s.rt.run_turn(TurnRequest::new(KEY, "hello")).await.unwrap();
    s.rt.run_turn(TurnRequest::new(KEY, "what now?"))
        .await
        .unwrap();
    let requests = s.provider.requests();
    assert_eq!(requests.len(), 3);
    let expected_system = "You are a test assistant.\n\nPlugin rule: be brief.";
    let last_user = |r: &clawctx_model::CompletionRequest| {
        r.messages
            .iter()
            .rev()
            .find(|m| matches!(m, AgentMessage::User(_)))
            .map(AgentMessage::plain_text)
            .unwrap()
    };
    assert_eq!(requests[0].system_prompt.as_deref(), Some(expected_system));
    assert_eq!(
        last_user(&requests[0]),
        "<memories>seen 0 messages</memories>\n\nsecond handler\n\nhello"
    );
    // The second turn: its hook saw the first turn's messages; both model calls of the turn
    // (before and after the tool) get the context.
    for r in &requests[1..] {
        assert_eq!(r.system_prompt.as_deref(), Some(expected_system));
        assert_eq!(
            last_user(r),
            "<memories>seen 2 messages</memories>\n\nsecond handler\n\nwhat now?"
        );
    }
    // The transcript keeps the prompts as typed.
    let context = s.rt.context(KEY).unwrap();
    let users: Vec<String> = context
        .iter()
        .filter(|m| matches!(m, AgentMessage::User(_)))
        .map(AgentMessage::plain_text)
        .collect();
    assert_eq!(users, ["hello", "what now?"]);
    let seen = records(&log);
    let builds = of(&seen, "before_prompt_build");
    assert_eq!(builds.len(), 2, "once per turn");
    assert_eq!(builds[1]["event"]["prompt"], "what now?");
    assert_eq!(builds[1]["event"]["messages"][0]["content"], "hello");
    assert_eq!(builds[1]["ctx"]["sessionKey"], KEY);
    assert_eq!(builds[1]["ctx"]["agentId"], "main");
    assert_eq!(builds[1]["ctx"]["modelId"], "m");
    assert_eq!(builds[1]["ctx"]["trigger"], "user");
    let inputs = of(&seen, "llm_input");
    assert_eq!(inputs.len(), 2);
    assert_eq!(inputs[1]["event"]["systemPrompt"], expected_system);
    assert_eq!(
        inputs[1]["event"]["prompt"],
        "<memories>seen 2 messages</memories>\n\nsecond handler\n\nwhat now?"
    );
    assert_eq!(
        inputs[1]["event"]["historyMessages"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(inputs[1]["event"]["tools"], json!(["look"]));
}

#[tokio::test]
async fn observing_hooks_get_openclaw_payloads() {
    let dir = tempfile::tempdir().unwrap();
    let source = format!(
        "{RECORD}\nexport default function register(api) {{
  const record = recorder(api);
  for (const hook of ['message_received', 'llm_output', 'agent_end', 'session_start']) {{
    api.on(hook, (event, ctx) => record(hook, event, ctx));
  }}
}}"
    );
    let hooks = json!({"allowConversationAccess": true});
    let (loaded, log) = plugin(dir.path(), "observer", &source, hooks).await;
    let probe = Probe::new("look", "looked");
    let s = runtime(
        dir.path(),
        vec![loaded],
        vec![
            tool_call("call_1", "look", json!({})),
            ScriptedReply::Reply {
                content: "All done.".into(),
                thinking: None,
                tool_calls: vec![],
                usage: Some(Usage {
                    input: 120,
                    output: 7,
                    total_tokens: 127,
                    ..Default::default()
                }),
                stop_reason: None,
                error_message: None,
            },
            ScriptedReply::text("again"),
        ],
        vec![probe],
    );
    s.rt.run_turn(TurnRequest::new(KEY, "look around"))
        .await
        .unwrap();
    s.rt.run_turn(TurnRequest::new(KEY, "and again"))
        .await
        .unwrap();
    let seen = records(&log);
    let order: Vec<&str> = seen.iter().map(|r| r["hook"].as_str().unwrap()).collect();
    assert_eq!(
        order,
        [
            "session_start",
            "message_received",
            "llm_output",
            "agent_end",
            "message_received",
            "llm_output",
            "agent_end"
        ],
        "session_start only for the new session's first turn"
    );
    let start = &seen[0];
    assert_eq!(start["event"]["sessionKey"], KEY);
    assert_eq!(start["event"]["sessionId"], start["ctx"]["sessionId"]);
    assert_eq!(start["ctx"]["agentId"], "main");
    let received = &seen[1];
    assert_eq!(received["event"]["content"], "look around");
    assert_eq!(received["event"]["from"], "user");
    assert!(received["event"]["timestamp"].as_i64().unwrap() > 0);
    assert_eq!(received["ctx"]["channelId"], "clawctx");
    assert_eq!(received["ctx"]["sessionKey"], KEY);
    let output = &seen[2];
    assert_eq!(output["event"]["assistantTexts"], json!(["All done."]));
    assert_eq!(output["event"]["lastAssistant"]["role"], "assistant");
    assert_eq!(output["event"]["model"], "m");
    assert!(output["event"]["usage"]["input"].as_u64().unwrap() >= 120);
    assert_eq!(
        output["event"]["runId"], received["event"]["runId"],
        "one runId per turn"
    );
    let end = &seen[3];
    assert_eq!(end["event"]["success"], true);
    assert_eq!(end["event"]["runId"], received["event"]["runId"]);
    let roles: Vec<&str> = end["event"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "toolResult", "assistant"]);
    assert!(end["event"]["durationMs"].as_u64().is_some());
    assert_eq!(end["ctx"]["sessionKey"], KEY);
    assert_ne!(
        seen[4]["event"]["runId"], received["event"]["runId"],
        "a new runId per turn"
    );
    assert_eq!(seen[6]["event"]["messages"].as_array().unwrap().len(), 6);
}

#[tokio::test]
async fn a_failed_turn_ends_with_agent_end_success_false() {
    let dir = tempfile::tempdir().unwrap();
    let source = format!(
        "{RECORD}\nexport default function register(api) {{
  const record = recorder(api);
  api.on('agent_end', (event, ctx) => record('agent_end', event, ctx));
}}"
    );
    let (loaded, log) = plugin(
        dir.path(),
        "ender",
        &source,
        json!({"allowConversationAccess": true}),
    )
    .await;
    let s = runtime(dir.path(), vec![loaded], vec![], vec![]);
    assert!(
        s.rt.run_turn(TurnRequest::new(KEY, "hi")).await.is_err(),
        "the script is empty: the model call fails"
    );
    let seen = records(&log);
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["event"]["success"], false);
    assert!(seen[0]["event"]["error"]
        .as_str()
        .unwrap()
        .contains("model call failed"));
}

#[tokio::test]
async fn conversation_hooks_need_allow_conversation_access() {
    let dir = tempfile::tempdir().unwrap();
    let source = format!(
        "{RECORD}\nexport default function register(api) {{
  const record = recorder(api);
  api.on('agent_end', (event, ctx) => record('agent_end', event, ctx));
  api.on('message_received', (event, ctx) => record('message_received', event, ctx));
  api.on('no_such_hook', () => {{}});
}}"
    );
    let (loaded, log) = plugin(dir.path(), "nosy", &source, json!({})).await;
    let names: Vec<&str> = loaded.hooks.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(
        names,
        ["message_received"],
        "agent_end is refused without the operator's consent; unknown names are dropped"
    );
    let s = runtime(
        dir.path(),
        vec![loaded],
        vec![ScriptedReply::text("hi")],
        vec![],
    );
    s.rt.run_turn(TurnRequest::new(KEY, "hi")).await.unwrap();
    let seen = records(&log);
    assert_eq!(
        seen.iter()
            .map(|r| r["hook"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["message_received"]
    );
}

#[tokio::test]
async fn compaction_hooks_fire_around_a_manual_compact() {
    let dir = tempfile::tempdir().unwrap();
    let source = format!(
        "{RECORD}\nexport default function register(api) {{
  const record = recorder(api);
  api.on('before_compaction', (event, ctx) => record('before_compaction', {{ ...event, messages: event.messages.length }}, ctx));
  api.on('after_compaction', (event, ctx) => record('after_compaction', event, ctx));
}}"
    );
    let (loaded, log) = plugin(dir.path(), "compactwatch", &source, json!({})).await;
    let words = |n: usize, w: &str| vec![w; n].join(" ");
    let mut replies = Vec::new();
    for i in 0..6 {
        replies.push(ScriptedReply::text(&format!(
            "answer {i}: {}",
            words(300, "lorem")
        )));
    }
    let s = runtime(dir.path(), vec![loaded], replies, vec![]);
    for i in 0..6 {
        s.rt.run_turn(TurnRequest::new(
            KEY,
            format!("question {i}: {}", words(300, "ipsum")),
        ))
        .await
        .unwrap();
    }
    assert!(records(&log).is_empty(), "no compaction yet");
    let result = s.rt.compact(KEY, None).await.unwrap();
    assert!(result.ok && result.compacted, "{result:?}");
    let seen = records(&log);
    let order: Vec<&str> = seen.iter().map(|r| r["hook"].as_str().unwrap()).collect();
    assert_eq!(order, ["before_compaction", "after_compaction"]);
    let before = &seen[0]["event"];
    assert_eq!(before["messageCount"], 12);
    assert_eq!(before["messages"], 12);
    assert!(before["tokenCount"].as_u64().unwrap() > 3000);
    assert!(before["sessionFile"].as_str().unwrap().ends_with(".jsonl"));
    let after = &seen[1]["event"];
    let left = after["messageCount"].as_u64().unwrap();
    assert!(left < 12, "{after}");
    assert_eq!(after["compactedCount"].as_u64().unwrap(), 12 - left);
    assert!(after["tokenCount"].as_u64().unwrap() < before["tokenCount"].as_u64().unwrap());
    assert_eq!(seen[1]["ctx"]["sessionKey"], KEY);
}

#[tokio::test]
async fn new_session_ends_the_old_one_and_the_next_turn_starts_the_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let source = format!(
        "{RECORD}\nexport default function register(api) {{
  const record = recorder(api);
  for (const hook of ['session_start', 'session_end', 'before_reset']) {{
    api.on(hook, (event, ctx) => record(hook, event, ctx));
  }}
}}"
    );
    let (loaded, log) = plugin(dir.path(), "sessions", &source, json!({})).await;
    let s = runtime(
        dir.path(),
        vec![loaded],
        vec![ScriptedReply::text("one"), ScriptedReply::text("two")],
        vec![],
    );
    s.rt.run_turn(TurnRequest::new(KEY, "first")).await.unwrap();
    let old = s.rt.session(KEY).unwrap();
    let new = s.rt.new_session(KEY).await.unwrap();
    s.rt.run_turn(TurnRequest::new(KEY, "second"))
        .await
        .unwrap();
    let seen = records(&log);
    let order: Vec<&str> = seen.iter().map(|r| r["hook"].as_str().unwrap()).collect();
    assert_eq!(
        order,
        [
            "session_start",
            "before_reset",
            "session_end",
            "session_start"
        ]
    );
    assert_eq!(seen[0]["event"]["sessionId"], old.entry.session_id.as_str());
    assert_eq!(seen[1]["event"]["reason"], "new");
    assert_eq!(seen[1]["event"]["messages"].as_array().unwrap().len(), 2);
    let end = &seen[2]["event"];
    assert_eq!(end["sessionId"], old.entry.session_id.as_str());
    assert_eq!(end["reason"], "new");
    assert_eq!(end["messageCount"], 2);
    assert_eq!(end["nextSessionId"], new.entry.session_id.as_str());
    assert_eq!(end["nextSessionKey"], KEY);
    assert_eq!(seen[3]["event"]["sessionId"], new.entry.session_id.as_str());
}

#[tokio::test]
async fn failing_and_slow_handlers_never_fail_the_turn_and_a_failed_before_tool_call_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let source = format!(
        "{RECORD}\nexport default function register(api) {{
  const record = recorder(api);
  api.on('message_received', () => {{ throw new Error('observer exploded'); }});
  api.on('message_received', () => new Promise(() => {{}}), {{ timeoutMs: 200 }});
  api.on('message_received', (event, ctx) => record('message_received', event, ctx));
  api.on('before_prompt_build', () => {{ throw new Error('prompt hook exploded'); }});
  api.on('before_tool_call', () => {{ throw new Error('policy exploded'); }});
  api.on('tool_result_persist', async () => ({{ message: {{ role: 'toolResult', toolCallId: 'call_x', content: 'async result ignored' }} }}));
}}"
    );
    let (loaded, log) = plugin(dir.path(), "flaky", &source, json!({})).await;
    let pid = loaded.host.pid();
    let probe = Probe::new("look", "looked");
    let s = runtime(
        dir.path(),
        vec![loaded],
        vec![
            tool_call("call_x", "look", json!({})),
            ScriptedReply::text("fine"),
        ],
        vec![probe.clone()],
    );
    let started = std::time::Instant::now();
    let outcome = s.rt.run_turn(TurnRequest::new(KEY, "go")).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a stuck handler is given up after its timeout"
    );
    assert_eq!(outcome.reply, "fine");
    assert_eq!(records(&log).len(), 1, "the other handlers still ran");
    assert!(probe.calls().is_empty(), "before_tool_call is fail-closed");
    let results = tool_results(&outcome.messages);
    assert_eq!(
        text_of(results[0]),
        "Tool call blocked because before_tool_call hook failed"
    );
    assert_eq!(results[0].is_error, Some(true));
    assert_eq!(
        s.provider.requests()[0]
            .messages
            .last()
            .map(AgentMessage::plain_text)
            .as_deref(),
        Some("go")
    );
    assert_eq!(s.plugins[0].host.pid(), pid, "the plugin process survived");
}

#[tokio::test]
async fn both_register_tool_forms_get_the_real_call_id() {
    let dir = tempfile::tempdir().unwrap();
    let source = r#"
export default function register(api) {
  api.registerTool({
    name: "object_tool",
    description: "Object form.",
    parameters: { type: "object", properties: { n: { type: "number" } } },
    async execute(toolCallId, params) {
      return { content: [{ type: "text", text: `object ${toolCallId} n=${params.n}` }] };
    },
  });
  api.registerTool(() => ({
    name: "factory_tool",
    description: "Factory form.",
    parameters: { type: "object" },
    execute(toolCallId) {
      return `factory ${toolCallId}`;
    },
  }));
}
"#;
    let (loaded, _log) = plugin(dir.path(), "tools", source, json!({})).await;
    let names: Vec<&str> = loaded.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["object_tool", "factory_tool"]);
    let s = runtime(
        dir.path(),
        vec![loaded],
        vec![
            tool_call("call_obj_1", "object_tool", json!({"n": 3})),
            tool_call("call_fac_2", "factory_tool", json!({})),
            ScriptedReply::text("both ran"),
        ],
        vec![],
    );
    let first = s.provider.clone();
    let outcome =
        s.rt.run_turn(TurnRequest::new(KEY, "use both"))
            .await
            .unwrap();
    let tools: Vec<String> = first.requests()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(
        tools,
        ["object_tool", "factory_tool"],
        "a plugin's tools reach the model without its engine"
    );
    let texts: Vec<String> = tool_results(&outcome.messages)
        .into_iter()
        .map(text_of)
        .collect();
    assert_eq!(texts, ["object call_obj_1 n=3", "factory call_fac_2"]);
}
