//! What a plugin process can read of the host's environment: the variables an interpreter needs
//! (`PATH`, `HOME`, the locale, ...) and those the operator names in
//! `plugins.entries.<id>.passEnv`; never the rest (model API keys, the gateway token, database
//! URLs), which a host process commonly holds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use clawctx_engine::CallContext;
use clawctx_protocol::*;
use common::*;
use serde_json::{json, Value};

/// A Python plugin whose `assemble` answers with its whole environment as JSON.
fn env_plugin(dir: &std::path::Path) {
    std::fs::write(
        dir.join("openclaw.plugin.json"),
        json!({"id": "envdump", "kind": "context-engine", "entry": "plugin.py", "configSchema": {"type": "object"}}).to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("plugin.py"),
        r#"import json, os

def register(api):
    def factory(ctx):
        class Engine:
            info = {"id": "envdump", "name": "env dump"}
            def ingest(self, p):
                return {"ingested": True}
            def assemble(self, p):
                return {"messages": p["messages"], "estimatedTokens": 0,
                        "systemPromptAddition": json.dumps(dict(os.environ))}
            def compact(self, p):
                return {"ok": True, "compacted": False}
        return Engine()
    api.register_context_engine("envdump", factory)
"#,
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_reads_only_the_allowed_environment() {
    require("python3");
    // Names no other test uses, so setting them here cannot disturb one.
    std::env::set_var(
        "CLAWCTX_ENVTEST_SECRET_KEY",
        "sk-should-never-reach-a-plugin",
    );
    std::env::set_var("CLAWCTX_ENVTEST_PASSED", "passed-on-purpose");
    let dir = tempfile::tempdir().unwrap();
    env_plugin(dir.path());
    let runtime = tempfile::tempdir().unwrap();
    let config = config(
        "envdump",
        "envdump",
        json!({"passEnv": ["CLAWCTX_ENVTEST_PASSED"]}),
    );
    let (_registry, engine, _loaded) =
        load_selected(dir.path(), config, "envdump", options(runtime.path())).await;
    let out = engine
        .assemble(
            &AssembleParams {
                session_id: "s".into(),
                messages: vec![AgentMessage::user("hi")],
                token_budget: Some(10_000),
                ..Default::default()
            },
            &CallContext::none(),
        )
        .await
        .unwrap();
    let env: Value = serde_json::from_str(out.system_prompt_addition.as_deref().unwrap()).unwrap();
    let names: Vec<&str> = env
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        env["CLAWCTX_ENVTEST_PASSED"], "passed-on-purpose",
        "passEnv names it: {names:?}"
    );
    assert!(
        env.get("CLAWCTX_ENVTEST_SECRET_KEY").is_none(),
        "a variable nobody allowed reached the plugin: {names:?}"
    );
    assert!(
        env.get("PATH").is_some(),
        "the interpreter's PATH is kept: {names:?}"
    );
    // Every other variable the plugin sees with the host's value must be on the allowlist (an
    // interpreter's launcher, such as a pyenv shim, may set variables of its own, `PWD` say).
    for name in &names {
        let from_host = std::env::var(name).ok().as_deref() == env[*name].as_str();
        let allowed =
            clawctx_plugin::process::inherited_env(name, &["CLAWCTX_ENVTEST_PASSED".into()])
                || ["PYTHONPATH", "PYTHONUNBUFFERED"].contains(name);
        assert!(
            allowed || !from_host,
            "the host's {name} reached the plugin but is not on the allowlist"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_env_that_is_not_a_list_of_names_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    env_plugin(dir.path());
    let runtime = tempfile::tempdir().unwrap();
    let registry = std::sync::Arc::new(clawctx_engine::ContextEngineRegistry::with_legacy());
    let config = config("envdump", "envdump", json!({"passEnv": "OPENAI_API_KEY"}));
    let err =
        clawctx_plugin::register_plugin(&registry, dir.path(), &config, options(runtime.path()))
            .await
            .expect_err("a string is not a list");
    let text = err.to_string();
    assert!(text.contains("plugins.entries.envdump.passEnv"), "{text}");
}
