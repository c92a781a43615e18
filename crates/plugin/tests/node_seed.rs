//! The seed document's example plugin, unchanged, through the Node runner.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use clawctx_engine::{CallContext, ContextEngineRegistry, Method};
use clawctx_plugin::register_plugin;
use clawctx_protocol::*;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_example_runs_unchanged() {
    require("node");
    let runtime = tempfile::tempdir().unwrap();
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    let config = config("my-engine", "my-engine", serde_json::json!({}));
    let loaded = register_plugin(
        &registry,
        &example("seed-node-engine"),
        &config,
        options(runtime.path()),
    )
    .await
    .unwrap();
    assert_eq!(
        loaded
            .engines
            .iter()
            .map(|e| e.id.as_str())
            .collect::<Vec<_>>(),
        vec!["my-engine"]
    );
    let pid = loaded.host.pid().unwrap();

    let resolved = registry
        .resolve(Some(Arc::new(config)), None, None)
        .await
        .unwrap();
    assert_eq!(resolved.effective_id, "my-engine");
    let engine = resolved.engine.clone();
    let info = engine.info();
    assert_eq!(info.id, "my-engine");
    assert_eq!(info.name, "My Context Engine");
    assert!(info.owns_compaction());
    assert!(engine.methods().has(Method::Assemble));
    assert!(!engine.methods().has(Method::AfterTurn));

    let cx = CallContext::none();
    let ingested = engine
        .ingest(
            &IngestParams {
                session_id: "s1".into(),
                session_key: None,
                message: AgentMessage::user("hi"),
                is_heartbeat: None,
            },
            &cx,
        )
        .await
        .unwrap();
    assert!(ingested.ingested);

    let messages = conversation();
    let full = engine
        .assemble(
            &AssembleParams {
                session_id: "s1".into(),
                session_key: Some("agent:ops:main".into()),
                messages: messages.clone(),
                token_budget: Some(100_000),
                available_tools: Some(vec!["memory_search".into(), "read".into()]),
                citations_mode: Some("on".into()),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap();
    assert_eq!(full.messages, messages);
    assert!(full.estimated_tokens > 0);
    let addition = full.system_prompt_addition.expect("memory addition");
    assert!(
        addition.contains("memory_search") && addition.contains("\"ops\""),
        "{addition}"
    );

    // A budget that cuts between the tool call and its result keeps the pairing intact.
    let budget = clawctx_tokens::messages_tokens(&messages[2..]) + 40;
    let trimmed = engine
        .assemble(
            &AssembleParams {
                session_id: "s1".into(),
                messages: messages.clone(),
                token_budget: Some(budget),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap();
    assert!(trimmed.messages.len() < messages.len());
    assert!(pairs_intact(&trimmed.messages));
    assert!(trimmed.system_prompt_addition.is_none());

    let compacted = engine
        .compact(
            &CompactParams {
                session_id: "s1".into(),
                force: Some(true),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap();
    assert!(compacted.ok && compacted.compacted);
    assert!(
        registry.quarantines().is_empty(),
        "{:?}",
        registry.quarantines()
    );

    engine.dispose().await.unwrap();
    drop((engine, resolved, loaded, registry));
    assert_pid_gone(pid).await;
}
