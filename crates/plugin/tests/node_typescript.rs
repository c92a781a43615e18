//! A TypeScript plugin entry (`src/index.ts`, `definePluginEntry` from
//! `openclaw/plugin-sdk/plugin-entry`, extension-less relative imports, enums, parameter
//! properties) linked with `install -l` semantics and loaded through jiti, then run against the
//! engine conformance suite. The fixture ships no `node_modules`: jiti is the copy vendored in
//! `sdk/node`, so this passes offline. Needs `node`: fails loudly without it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use clawctx_engine::*;
use clawctx_plugin::{apply_changes, install_with, load_plugins, InstallOptions, PluginEngine};
use clawctx_protocol::*;
use clawctx_test_support::conformance;
use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_entry_linked_and_conformant() {
    require("node");
    let plugin = fixture("node-typescript");
    assert!(
        !plugin.join("node_modules").exists(),
        "the fixture must not carry its own jiti: the test is about the vendored one"
    );
    let state = tempfile::tempdir().unwrap();
    let runtime = tempfile::tempdir().unwrap();

    // `clawctx plugins install -l <dir>`: record the link, enable and select the engine.
    let report = install_with(
        plugin.to_str().unwrap(),
        state.path(),
        &InstallOptions {
            link: true,
            force: false,
        },
    )
    .expect("install -l of the TypeScript plugin");
    assert_eq!(report.manifest.id, "ts-engine");
    let mut config =
        json!({"plugins": {"entries": {"ts-engine": {"config": {"label": "from-config"}}}}});
    apply_changes(&mut config, &report.config_changes);
    assert_eq!(
        config.pointer("/plugins/slots/contextEngine"),
        Some(&json!("ts-engine")),
        "install -l selects the engine: {config:#}"
    );

    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    let loaded = load_plugins(&registry, state.path(), &config, options(runtime.path()))
        .await
        .expect("listing the installed plugins");
    assert_eq!(loaded.len(), 1, "exactly the linked plugin loads");
    let (_, result) = loaded.into_iter().next().unwrap();
    let loaded = result.unwrap_or_else(|e| panic!("the TypeScript plugin failed to load: {e}"));
    assert_eq!(
        loaded
            .engines
            .iter()
            .map(|e| e.id.as_str())
            .collect::<Vec<_>>(),
        ["ts-engine"]
    );
    assert!(
        runtime
            .path()
            .join("node/vendor/jiti/lib/jiti.mjs")
            .exists(),
        "the vendored jiti is written for a TypeScript entry"
    );

    // A full lifecycle through the registry, as a host runs it.
    let config = Arc::new(config);
    let resolved = registry
        .resolve(Some(config.clone()), None, None)
        .await
        .unwrap();
    assert_eq!(
        resolved.effective_id,
        "ts-engine",
        "{:?}",
        registry.quarantines()
    );
    let engine = resolved.engine.clone();
    assert_eq!(engine.info().name, "TypeScript pass-through engine");
    let cx = CallContext::none();
    let ingest = IngestParams {
        session_id: "s1".into(),
        session_key: None,
        message: AgentMessage::user("typed hello"),
        is_heartbeat: None,
    };
    assert!(engine.ingest(&ingest, &cx).await.unwrap().ingested);
    assert!(
        !engine.ingest(&ingest, &cx).await.unwrap().ingested,
        "a duplicate is not stored twice"
    );
    let assembled = engine
        .assemble(
            &AssembleParams {
                session_id: "s1".into(),
                messages: conversation(),
                token_budget: Some(10_000),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap();
    assert_eq!(assembled.messages, conversation());
    assert_eq!(
        assembled.system_prompt_addition.as_deref(),
        Some("engine label: from-config"),
        "the plugin config reaches the TypeScript engine"
    );
    assert!(
        registry.quarantines().is_empty(),
        "{:?}",
        registry.quarantines()
    );

    // The conformance suite, each check on a fresh instance in the same process.
    let host = loaded.host.clone();
    let make: conformance::Maker = Arc::new(move || {
        let host = host.clone();
        Box::pin(async move {
            PluginEngine::create(host, "ts-engine".into(), FactoryContext::default())
                .await
                .expect("engine/create of the TypeScript engine")
        })
    });
    conformance::run_all("ts-engine (TypeScript via jiti)", make).await;

    let pid = loaded.host.pid().unwrap();
    loaded.host.shutdown().await;
    assert_pid_gone(pid).await;
}
