//! Published OpenClaw plugins load as under OpenClaw (#16 items 1 and 2), with real `node`
//! processes:
//! - a built ES module entry importing a named export from a CommonJS package Node cannot
//!   scan (`tests/fixtures/node-cjs-named-import`, its package committed in its
//!   `node_modules`): Node's loader refuses it with a SyntaxError, OpenClaw's loader (jiti,
//!   native first) accepts it, and so must the runner, falling back to jiti;
//! - a package whose `openclaw.extensions` names `./src/index.ts` but ships only `dist/`
//!   (`node-built-entry`, its manifest JSON5): the built JavaScript OpenClaw infers is loaded,
//!   and its `definePluginEntry` + `buildJsonPluginConfigSchema` from the SDK work;
//! - an entry exporting `activate(api)` (`node-export-activate`): OpenClaw's
//!   `resolvePluginModuleExport` reads `register ?? activate`.
//!
//! Needs `node`: fails loudly without it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use clawctx_engine::*;
use clawctx_plugin::{load_manifest, PluginEntry};
use clawctx_protocol::*;
use common::*;
use serde_json::json;

async fn addition_of(engine: &dyn ContextEngine) -> (usize, String) {
    let out = engine
        .assemble(
            &AssembleParams {
                session_id: "s".into(),
                messages: conversation(),
                token_budget: Some(10_000),
                ..Default::default()
            },
            &CallContext::none(),
        )
        .await
        .unwrap();
    (
        out.messages.len(),
        out.system_prompt_addition.unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_import_from_a_commonjs_package_loads_through_jiti() {
    require("node");
    let dir = fixture("node-cjs-named-import");
    assert!(
        dir.join("node_modules/sliding-window-cjs/index.js")
            .is_file(),
        "the fixture's CommonJS package must be committed with it"
    );
    let runtime = tempfile::tempdir().unwrap();
    let (_registry, engine, loaded) = load_selected(
        &dir,
        config("cjs-named", "cjs-named", json!({})),
        "cjs-named",
        options(runtime.path()),
    )
    .await;
    // The package's own code ran: it keeps the newest 3 messages, widened so as not to
    // start on a tool result (the conversation's third message).
    let (kept, addition) = addition_of(engine.as_ref()).await;
    assert_eq!((kept, addition.as_str()), (4, "window kept 4"));
    loaded.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typescript_extension_shipped_only_as_built_javascript_loads_the_build() {
    require("node");
    let dir = fixture("node-built-entry");
    assert!(!dir.join("src").exists(), "the fixture ships dist/ only");
    let manifest = load_manifest(&dir).unwrap();
    assert_eq!(
        manifest.entry,
        PluginEntry::Node(dir.canonicalize().unwrap().join("dist/index.js"))
    );
    let runtime = tempfile::tempdir().unwrap();
    let (_registry, engine, loaded) = load_selected(
        &dir,
        config(
            "built-entry",
            "built-entry",
            json!({"config": {"label": "from-config"}}),
        ),
        "built-entry",
        options(runtime.path()),
    )
    .await;
    let (_, addition) = addition_of(engine.as_ref()).await;
    assert_eq!(addition, "label=from-config");
    loaded.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_activate_export_registers_as_openclaw_reads_it() {
    require("node");
    let runtime = tempfile::tempdir().unwrap();
    let (_registry, engine, loaded) = load_selected(
        &fixture("node-export-activate"),
        config("activate-export", "activate-export", json!({})),
        "activate-export",
        options(runtime.path()),
    )
    .await;
    let (_, addition) = addition_of(engine.as_ref()).await;
    assert_eq!(addition, "activated");
    loaded.host.shutdown().await;
}
