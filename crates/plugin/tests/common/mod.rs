//! Shared helpers of the plugin integration tests: real `node`/`python3` children (a missing
//! interpreter fails the test loudly), message builders, and process-liveness checks.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clawctx_plugin::PluginOptions;
use clawctx_protocol::AgentMessage;
use serde_json::json;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repo root")
}

/// `examples/plugins/<name>`.
pub fn example(name: &str) -> PathBuf {
    repo_root().join("examples/plugins").join(name)
}

/// `crates/plugin/tests/fixtures/<name>`.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Panics unless `program --version` runs: these tests need real interpreters.
pub fn require(program: &str) {
    let ok = std::process::Command::new(program)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "`{program}` is required for the plugin integration tests but could not be run"
    );
}

/// Options with a per-test runtime dir and short timeouts.
pub fn options(runtime: &Path) -> PluginOptions {
    PluginOptions {
        runtime_dir: Some(runtime.to_path_buf()),
        call_timeout: Some(Duration::from_secs(10)),
        init_timeout: Some(Duration::from_secs(10)),
        ..Default::default()
    }
}

/// Whether a process with this pid still exists (zombies count as alive).
pub fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Waits up to 5 s for the pid to disappear; panics otherwise.
pub async fn assert_pid_gone(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while pid_alive(pid) {
        if Instant::now() > deadline {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            panic!("plugin process {pid} is still there: {stat}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A config selecting `engine` from plugin `plugin` with extra entry fields.
pub fn config(plugin: &str, engine: &str, entry_extra: serde_json::Value) -> serde_json::Value {
    let mut entry = json!({"enabled": true});
    if let (Some(e), Some(x)) = (entry.as_object_mut(), entry_extra.as_object()) {
        for (k, v) in x {
            e.insert(k.clone(), v.clone());
        }
    }
    json!({"plugins": {"slots": {"contextEngine": engine}, "entries": {plugin: entry}}})
}

/// A short conversation with one tool call/result pair.
pub fn conversation() -> Vec<AgentMessage> {
    vec![
        AgentMessage::user("hello, please read the file").with_timestamp(1),
        AgentMessage::tool_call("call-1", "read", json!({"path": "README.md"})).with_timestamp(2),
        AgentMessage::tool_result("call-1", "read", "# clawctx\nA context engine.")
            .with_timestamp(3),
        AgentMessage::assistant("The README says clawctx is a context engine.").with_timestamp(4),
        AgentMessage::user("thanks! now summarize our discussion").with_timestamp(5),
    ]
}

/// Checks tool pairing in a message list.
pub fn pairs_intact(messages: &[AgentMessage]) -> bool {
    let mut calls = std::collections::HashSet::new();
    for m in messages {
        for c in m.tool_calls() {
            calls.insert(c.id.clone());
        }
        if let Some(id) = m.tool_result_id() {
            if !calls.contains(id) {
                return false;
            }
        }
    }
    true
}

/// A registry with `legacy`, the plugin in `dir` loaded into it with `config`, and the engine
/// that config selects, which must be `engine` (not a quarantine fallback).
pub async fn load_selected(
    dir: &Path,
    config: serde_json::Value,
    engine: &str,
    opts: PluginOptions,
) -> (
    std::sync::Arc<clawctx_engine::ContextEngineRegistry>,
    std::sync::Arc<dyn clawctx_engine::ContextEngine>,
    clawctx_plugin::LoadedPlugin,
) {
    let registry = std::sync::Arc::new(clawctx_engine::ContextEngineRegistry::with_legacy());
    let loaded = clawctx_plugin::register_plugin(&registry, dir, &config, opts)
        .await
        .unwrap();
    let resolved = registry
        .resolve(Some(std::sync::Arc::new(config)), None, None)
        .await
        .unwrap();
    assert_eq!(
        resolved.effective_id,
        engine,
        "{:?}",
        registry.quarantines()
    );
    (registry, resolved.engine.clone(), loaded)
}
