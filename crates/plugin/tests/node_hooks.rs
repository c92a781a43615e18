//! The Node runner's hook surface through the host: `api.on` registrations in the handshake,
//! `hook/run` with OpenClaw's order (priority across plugins, one request per run of a
//! plugin's handlers), modes (parallel, sequential with a terminal block, synchronous chains),
//! per-handler time budgets, and the SDK's `emptyPluginConfigSchema` from both modules.
//! Plugins are real `node` processes written to temp dirs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clawctx_engine::hooks::{persisted_message, PromptBuild};
use clawctx_engine::{CallContext, ContextEngineRegistry, HookDispatcher};
use clawctx_plugin::{LoadedPlugin, PluginHooks};
use serde_json::{json, Value};

async fn load(dir: &Path, id: &str, entry: &str, source: &str) -> LoadedPlugin {
    common::require("node");
    let root = dir.join(id);
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(
        root.join("openclaw.plugin.json"),
        json!({"id": id, "entry": entry, "configSchema": {"type": "object"}}).to_string(),
    )
    .unwrap();
    std::fs::write(root.join(entry), source).unwrap();
    let registry = ContextEngineRegistry::with_legacy();
    let config = json!({"plugins": {"entries": {id: {"enabled": true}}}});
    clawctx_plugin::register_plugin(
        &registry,
        &root,
        &config,
        common::options(&dir.join("runtime")),
    )
    .await
    .unwrap()
}

fn values(outputs: &[clawctx_engine::HookOutput]) -> Vec<Value> {
    outputs
        .iter()
        .map(|o| match &o.result {
            Ok(v) => v.clone().unwrap_or(Value::Null),
            Err(e) => json!({ "error": e }),
        })
        .collect()
}

#[tokio::test]
async fn the_handshake_reports_handlers_with_priorities() {
    let dir = tempfile::tempdir().unwrap();
    let p = load(
        dir.path(),
        "reg",
        "index.mjs",
        r#"export default function register(api) {
  api.on("before_prompt_build", () => {}, { priority: 5 });
  api.on("tool_result_persist", () => {});
  api.on("not_a_hook", () => {});
  api.on("before_tool_call", "not a function");
}"#,
    )
    .await;
    let hooks: Vec<(String, f64)> = p
        .hooks
        .iter()
        .map(|h| (h.name.clone(), h.priority))
        .collect();
    assert_eq!(
        hooks,
        [
            ("before_prompt_build".to_owned(), 5.0),
            ("tool_result_persist".to_owned(), 0.0)
        ]
    );
    let dispatcher = PluginHooks::new(std::slice::from_ref(&p));
    assert!(dispatcher.has("before_prompt_build"));
    assert!(!dispatcher.has("not_a_hook"));
    assert!(!dispatcher.has("before_tool_call"));
}

#[tokio::test]
async fn handlers_run_in_priority_order_across_plugins() {
    let dir = tempfile::tempdir().unwrap();
    let a = load(
        dir.path(),
        "a",
        "index.mjs",
        r#"export default function register(api) {
  api.on("before_prompt_build", (e) => ({ prependContext: `a0 saw ${e.prompt}` }));
  api.on("before_prompt_build", () => ({ prependContext: "a10", systemPrompt: "from a10" }), { priority: 10 });
}"#,
    )
    .await;
    let b = load(
        dir.path(),
        "b",
        "index.mjs",
        r#"export default function register(api) {
  api.on("before_prompt_build", (e, ctx) => ({ prependContext: `b5 ${ctx.sessionKey}`, systemPrompt: "from b5" }), { priority: 5 });
  api.on("before_prompt_build", () => undefined, { priority: -1 });
}"#,
    )
    .await;
    let dispatcher = PluginHooks::new(&[a, b]);
    let out = dispatcher
        .run(
            "before_prompt_build",
            json!({"prompt": "hi", "messages": []}),
            json!({"sessionKey": "k"}),
            &CallContext::none(),
        )
        .await;
    let plugins: Vec<&str> = out.iter().map(|o| o.plugin_id.as_str()).collect();
    assert_eq!(plugins, ["a", "b", "a", "b"]);
    let merged = PromptBuild::merge(&out);
    assert_eq!(
        merged.prepend_context.as_deref(),
        Some("a10\n\nb5 k\n\na0 saw hi")
    );
    assert_eq!(merged.system_prompt.as_deref(), Some("from a10"));
}

#[tokio::test]
async fn a_block_ends_before_tool_call_and_each_handler_gets_its_own_event() {
    let dir = tempfile::tempdir().unwrap();
    let p = load(
        dir.path(),
        "policy",
        "index.mjs",
        r#"let later = 0;
export default function register(api) {
  api.on("before_tool_call", (e) => { e.params.path = "mutated"; return { params: { path: "first" } }; }, { priority: 3 });
  api.on("before_tool_call", (e) => ({ block: true, blockReason: `saw ${e.params.path}` }), { priority: 2 });
  api.on("before_tool_call", () => { later += 1; return { params: { later } }; }, { priority: 1 });
  api.on("message_received", () => ({ later }));
}"#,
    )
    .await;
    let dispatcher = PluginHooks::new(&[p]);
    let out = dispatcher
        .run(
            "before_tool_call",
            json!({"toolName": "read", "params": {"path": "orig"}}),
            json!({}),
            &CallContext::none(),
        )
        .await;
    assert_eq!(
        values(&out),
        [
            json!({"params": {"path": "first"}}),
            json!({"block": true, "blockReason": "saw orig"})
        ]
    );
    let later = dispatcher
        .run(
            "message_received",
            json!({}),
            json!({}),
            &CallContext::none(),
        )
        .await;
    assert_eq!(
        values(&later),
        [json!({"later": 0})],
        "no handler ran after the block"
    );
}

#[tokio::test]
async fn tool_result_persist_is_a_synchronous_chain() {
    let dir = tempfile::tempdir().unwrap();
    let p = load(
        dir.path(),
        "chain",
        "index.mjs",
        r#"export default function register(api) {
  api.on("tool_result_persist", (e) => ({ message: { ...e.message, content: "one" } }), { priority: 3 });
  api.on("tool_result_persist", async (e) => ({ message: { ...e.message, content: "async" } }), { priority: 2 });
  api.on("tool_result_persist", (e) => ({ message: { ...e.message, content: `${e.message.content}+three` } }), { priority: 1 });
}"#,
    )
    .await;
    let q = load(
        dir.path(),
        "chain2",
        "index.mjs",
        r#"export default function register(api) {
  api.on("tool_result_persist", (e) => ({ message: { ...e.message, content: `${e.message.content}+four` } }));
}"#,
    )
    .await;
    let dispatcher = PluginHooks::new(&[p, q]);
    let message =
        json!({"role": "toolResult", "toolCallId": "c1", "toolName": "t", "content": "raw"});
    let out = dispatcher
        .run(
            "tool_result_persist",
            json!({"toolName": "t", "toolCallId": "c1", "message": message}),
            json!({}),
            &CallContext::none(),
        )
        .await;
    assert_eq!(out.len(), 4);
    assert_eq!(out[1].result, Ok(None), "a Promise is ignored");
    assert_eq!(
        persisted_message(&out),
        Some(
            json!({"role": "toolResult", "toolCallId": "c1", "toolName": "t", "content": "one+three+four"})
        )
    );
}

#[tokio::test]
async fn slow_and_throwing_handlers_fail_alone_within_their_budget() {
    let dir = tempfile::tempdir().unwrap();
    let p = load(
        dir.path(),
        "slow",
        "index.mjs",
        r#"export default function register(api) {
  api.on("session_start", () => new Promise(() => {}), { timeoutMs: 150 });
  api.on("session_start", () => { throw new Error("nope"); });
  api.on("session_start", () => "fine");
}"#,
    )
    .await;
    let pid = p.host.pid();
    let host = p.host.clone();
    let dispatcher = Arc::new(PluginHooks::new(&[p]));
    let started = Instant::now();
    let out = dispatcher
        .run("session_start", json!({}), json!({}), &CallContext::none())
        .await;
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(
        values(&out),
        [
            json!({"error": "timed out after 150ms"}),
            json!({"error": "nope"}),
            json!("fine")
        ]
    );
    assert_eq!(host.pid(), pid, "the process was not restarted");
}

#[tokio::test]
async fn empty_plugin_config_schema_imports_from_plugin_entry_and_core() {
    let dir = tempfile::tempdir().unwrap();
    let esm = load(
        dir.path(),
        "esm",
        "index.mjs",
        r#"import { definePluginEntry, emptyPluginConfigSchema } from "openclaw/plugin-sdk/plugin-entry";
import { emptyPluginConfigSchema as fromCore } from "openclaw/plugin-sdk/core";
export default definePluginEntry({
  id: "esm",
  configSchema: emptyPluginConfigSchema(),
  register(api) {
    api.on("session_start", () => ({ entry: emptyPluginConfigSchema(), core: fromCore() }));
  },
});"#,
    )
    .await;
    let cjs = load(
        dir.path(),
        "cjs",
        "index.cjs",
        r#"const { emptyPluginConfigSchema } = require("openclaw/plugin-sdk/plugin-entry");
const core = require("openclaw/plugin-sdk/core");
module.exports = function register(api) {
  api.on("session_start", () => ({ entry: emptyPluginConfigSchema(), core: core.emptyPluginConfigSchema() }));
};"#,
    )
    .await;
    let dispatcher = PluginHooks::new(&[esm, cjs]);
    let out = dispatcher
        .run("session_start", json!({}), json!({}), &CallContext::none())
        .await;
    let schema = json!({"type": "object", "additionalProperties": false, "properties": {}});
    assert_eq!(
        values(&out),
        [
            json!({"entry": schema, "core": schema}),
            json!({"entry": schema, "core": schema})
        ]
    );
}
