//! How the Node runner loads entries: the OpenClaw SDK module names resolve for an ES module
//! that imports them only through other modules of the plugin (the runner decides from a scan
//! of the plugin's sources whether ES resolution hooks are needed on this Node, so the scan
//! must follow relative imports and re-exports). Needs `node`: fails loudly without it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use clawctx_engine::*;
use clawctx_plugin::register_plugin;
use clawctx_protocol::*;
use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_imported_two_modules_deep_resolves() {
    require("node");
    let runtime = tempfile::tempdir().unwrap();
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    let config = config("nested", "nested", json!({}));
    let loaded = register_plugin(
        &registry,
        &fixture("node-nested-sdk"),
        &config,
        options(runtime.path()),
    )
    .await
    .unwrap_or_else(|e| {
        panic!("the plugin importing the SDK through lib/impl.js failed to load: {e}")
    });
    let resolved = registry
        .resolve(Some(Arc::new(config)), None, None)
        .await
        .unwrap();
    assert_eq!(
        resolved.effective_id,
        "nested",
        "{:?}",
        registry.quarantines()
    );
    let result = resolved
        .engine
        .assemble(
            &AssembleParams {
                session_id: "s".into(),
                messages: conversation(),
                token_budget: Some(10_000),
                available_tools: Some(vec!["memory_search".into()]),
                ..Default::default()
            },
            &CallContext::none(),
        )
        .await
        .unwrap();
    assert_eq!(result.messages, conversation());
    let addition = result.system_prompt_addition.unwrap_or_default();
    assert!(
        addition.contains("memory_search"),
        "the SDK's buildMemorySystemPromptAddition did not run: {addition:?}"
    );
    loaded.host.shutdown().await;
}
