//! Fault injection: a plugin that crashes, hangs, breaks the framing or the contract is
//! quarantined with a reason naming the fault, the call is answered by `legacy`, and no child
//! process is left behind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clawctx_engine::{CallContext, ContextEngineRegistry};
use clawctx_plugin::register_plugin;
use clawctx_protocol::*;
use common::*;
use serde_json::json;

/// Children of this test process whose working directory is `dir`.
fn children_in(dir: &Path) -> Vec<u32> {
    let me = std::process::id();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid != Some(me) {
            continue;
        }
        if std::fs::read_link(format!("/proc/{pid}/cwd"))
            .ok()
            .as_deref()
            == Some(dir)
        {
            out.push(pid);
        }
    }
    out
}

fn copy_fixture(to: &Path) -> PathBuf {
    let src = fixture("node-faulty");
    let dst = to.join("faulty");
    std::fs::create_dir_all(&dst).unwrap();
    for f in ["openclaw.plugin.json", "index.cjs"] {
        std::fs::copy(src.join(f), dst.join(f)).unwrap();
    }
    dst.canonicalize().unwrap()
}

/// Loads the fixture in `mode`, resolves, assembles, and checks legacy answered, the
/// quarantine record, and that no process is left.
async fn run_fault(mode: &str, operation: &str, reason_has: &[&str]) {
    require("node");
    let tmp = tempfile::tempdir().unwrap();
    let plugin_dir = copy_fixture(tmp.path());
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    // The 100 MB line needs time to be produced and read (debug builds); the rest use 800 ms.
    let timeout_ms = if mode == "huge-line" { 10_000 } else { 800 };
    let config = config(
        "faulty",
        "faulty",
        json!({"config": {"mode": mode}, "timeoutMs": timeout_ms}),
    );
    let mut opts = options(&tmp.path().join("runtime"));
    opts.call_timeout = None;
    let loaded = register_plugin(&registry, &plugin_dir, &config, opts).await;
    if mode == "crash-on-load" {
        let err = loaded.as_ref().unwrap_err().to_string();
        assert!(err.contains("crash on load"), "{err}");
    }
    let seen_pids = children_in(&plugin_dir);

    let resolved = registry
        .resolve(Some(Arc::new(config)), None, None)
        .await
        .unwrap();
    let messages = conversation();
    let params = AssembleParams {
        session_id: "s".into(),
        messages: messages.clone(),
        token_budget: Some(500),
        ..Default::default()
    };
    let result = resolved
        .engine
        .assemble(&params, &CallContext::none())
        .await
        .expect("legacy answers");
    assert_eq!(
        result.messages, messages,
        "{mode}: legacy passes the history through"
    );
    assert_eq!(result.estimated_tokens, 0, "{mode}: legacy estimates 0");

    let q = registry.quarantines();
    let rec = q
        .iter()
        .find(|r| r.engine_id == "faulty")
        .unwrap_or_else(|| panic!("{mode}: no quarantine in {q:?}"));
    assert_eq!(rec.operation, operation, "{mode}: {rec:?}");
    for needle in reason_has {
        assert!(
            rec.reason.contains(needle),
            "{mode}: reason {:?} lacks {needle:?}",
            rec.reason
        );
    }
    assert_eq!(rec.owner.as_deref(), Some("plugin:faulty"));

    drop((resolved, loaded, registry));
    tokio::time::sleep(Duration::from_millis(50)).await;
    for pid in seen_pids {
        assert_pid_gone(pid).await;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !children_in(&plugin_dir).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "{mode}: plugin children left: {:?}",
            children_in(&plugin_dir)
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_on_load() {
    // A process that exits while loading is a load failure (#16 item 5), quarantined at once.
    run_fault(
        "crash-on-load",
        "load",
        &["plugin process exited (code 3)", "boom: crash on load"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_mid_call() {
    run_fault(
        "crash-mid-call",
        "assemble",
        &["plugin process exited (code 7)", "boom: crash mid-call"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hang_times_out() {
    run_fault(
        "hang",
        "assemble",
        &["engine/assemble", "timed out after 800 ms"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_json_output() {
    run_fault(
        "non-json",
        "assemble",
        &["not a JSON-RPC message", "this is not json"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_result_types() {
    run_fault(
        "wrong-types",
        "assemble",
        &["contract violation", "assemble returned an invalid result"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_tool_pair() {
    run_fault(
        "split-pair",
        "assemble",
        &["contract violation", "tool pairing", "call-1"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_megabyte_line() {
    run_fault(
        "huge-line",
        "assemble",
        &["protocol violation", "exceeds the 16777216-byte limit"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_result_without_a_tool_call_id() {
    // conversation() has 5 messages: the fixture's toolResult is at index 5.
    run_fault(
        "tool-result-no-id",
        "assemble",
        &["contract violation", "at index 5", "toolCallId"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assemble_throws() {
    run_fault(
        "throws",
        "assemble",
        &["assemble exploded: the memory store is locked"],
    )
    .await;
}

/// A `system`-role message is not a fault (a deliberate deviation: the runtime folds it into
/// the system prompt): no quarantine, and the plugin's answer is used as it came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_role_message_is_not_a_fault() {
    require("node");
    let tmp = tempfile::tempdir().unwrap();
    let plugin_dir = copy_fixture(tmp.path());
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    let config = config(
        "faulty",
        "faulty",
        json!({"config": {"mode": "system-role"}}),
    );
    let _loaded = register_plugin(
        &registry,
        &plugin_dir,
        &config,
        options(&tmp.path().join("runtime")),
    )
    .await
    .unwrap();
    let resolved = registry
        .resolve(Some(Arc::new(config)), None, None)
        .await
        .unwrap();
    let params = AssembleParams {
        session_id: "s".into(),
        messages: conversation(),
        token_budget: Some(500),
        ..Default::default()
    };
    let result = resolved
        .engine
        .assemble(&params, &CallContext::none())
        .await
        .unwrap();
    assert!(
        registry.quarantines().is_empty(),
        "{:?}",
        registry.quarantines()
    );
    assert_eq!(result.messages[0].role(), "system");
    assert_eq!(result.messages[0].plain_text(), "you are a pirate");
    assert_eq!(&result.messages[1..], &params.messages[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn factory_throws() {
    run_fault("factory-throws", "factory", &["factory exploded"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn factory_returns_null() {
    run_fault(
        "factory-null",
        "factory",
        &["Context engine \"faulty\" factory returned null instead of a ContextEngine object."],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_required_method() {
    run_fault(
        "missing-assemble",
        "contract-validation",
        &["Context engine \"faulty\" factory returned an invalid ContextEngine: missing assemble()."],
    )
    .await;
}
