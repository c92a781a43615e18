//! A plugin that does not load says why, precisely (#16 item 5): a package that is not
//! installed, a module with a syntax error, an entry without a register function, a
//! `register(api)` that throws, and an entry declaring another plugin id are each a
//! [`PluginError::Load`] of their own kind, naming the module at fault, carrying what the
//! plugin wrote to stderr and a suggested fix, and quarantined with operation `load` (not
//! `factory`), so the selected engine falls back to `legacy` with that reason. Real `node`
//! processes over the fixtures in `tests/fixtures/node-load-*`. Needs `node`: fails loudly
//! without it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clawctx_engine::*;
use clawctx_plugin::{register_plugin, LoadError, LoadErrorKind, PluginError};
use clawctx_protocol::*;
use common::*;
use serde_json::json;

/// Loads `fixture` selecting engine `id`; returns the load error, after checking that the
/// registry quarantined the engine with operation `load` and the same reason, and that
/// resolution serves `legacy` naming it.
async fn load_failure(fixture_name: &str, id: &str) -> (LoadError, PathBuf) {
    require("node");
    let root = fixture(fixture_name).canonicalize().unwrap();
    let runtime = tempfile::tempdir().unwrap();
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    let config = config(id, id, json!({}));
    let err = register_plugin(&registry, &root, &config, options(runtime.path()))
        .await
        .expect_err("the plugin must not load");
    let PluginError::Load(load) = &err else {
        panic!("{fixture_name}: expected a load error, got {err:?}");
    };
    let quarantines = registry.quarantines();
    let rec = quarantines
        .iter()
        .find(|r| r.engine_id == id)
        .unwrap_or_else(|| panic!("{fixture_name}: no quarantine in {quarantines:?}"));
    assert_eq!(rec.operation, "load", "{rec:?}");
    assert_eq!(rec.reason, err.to_string());
    assert_eq!(rec.owner.as_deref(), Some(format!("plugin:{id}").as_str()));

    let resolved = registry
        .resolve(Some(Arc::new(config)), None, None)
        .await
        .unwrap();
    assert_eq!(resolved.effective_id, "legacy");
    assert!(
        matches!(&resolved.reason, clawctx_engine::resolve::SelectionReason::Quarantined { operation, .. } if operation == "load"),
        "{:?}",
        resolved.reason
    );
    let out = resolved
        .engine
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
    assert_eq!(out.messages, conversation(), "legacy answers");
    (*load.clone(), root)
}

fn fix_of(load: &LoadError) -> String {
    load.fix
        .clone()
        .unwrap_or_else(|| panic!("no fix suggested for {load:?}"))
}

fn path_str(p: &Path) -> String {
    p.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_package_that_is_not_installed_names_it_its_importer_and_npm_install() {
    let (load, root) = load_failure("node-load-missing-package", "missing-package").await;
    let importer = root.join("dist/engine.js");
    assert_eq!(load.kind, LoadErrorKind::MissingPackage, "{load:?}");
    assert_eq!(load.package.as_deref(), Some("tiny-token-counter"));
    assert_eq!(load.module.as_deref(), Some(importer.as_path()), "{load:?}");
    assert!(
        load.message.starts_with("failed to load plugin: "),
        "OpenClaw's words: {}",
        load.message
    );
    assert_eq!(
        fix_of(&load),
        format!(
            "package `tiny-token-counter` is imported by {} but is not installed: run `npm install tiny-token-counter` in {}",
            path_str(&importer),
            path_str(&root)
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_syntax_error_names_the_file_and_line() {
    let (load, root) = load_failure("node-load-syntax", "syntax-error").await;
    assert_eq!(load.kind, LoadErrorKind::Syntax, "{load:?}");
    // Node's own parse error names no file: the location comes from jiti's parse.
    assert_eq!(
        load.module.as_deref(),
        Some(root.join("dist/engine.js").as_path()),
        "{load:?}"
    );
    assert_eq!(load.line, Some(5), "{load:?}");
    let shown = PluginError::Load(Box::new(load.clone())).to_string();
    assert!(
        shown.contains(&format!("{}:5", path_str(&root.join("dist/engine.js")))),
        "{shown}"
    );
    assert!(fix_of(&load).contains("npm run build"), "{load:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_without_register_says_what_it_exports() {
    let (load, root) = load_failure("node-load-no-register", "no-register").await;
    assert_eq!(load.kind, LoadErrorKind::NoRegister, "{load:?}");
    assert_eq!(
        load.module.as_deref(),
        Some(root.join("index.cjs").as_path())
    );
    assert!(
        load.message
            .starts_with("plugin export missing register/activate: ")
            && load.message.contains("createEngine"),
        "{}",
        load.message
    );
    assert!(fix_of(&load).contains("openclaw.extensions"), "{load:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throwing_register_names_where_and_keeps_its_stderr() {
    let (load, root) = load_failure("node-load-register-throws", "register-throws").await;
    assert_eq!(load.kind, LoadErrorKind::RegisterThrew, "{load:?}");
    assert_eq!(
        load.message,
        "plugin failed during register: SUMMARY_STORE_KEY_THAT_IS_NEVER_SET is not set"
    );
    assert_eq!(
        load.module.as_deref(),
        Some(root.join("index.js").as_path())
    );
    assert_eq!(load.line, Some(6), "{load:?}");
    assert!(
        load.stderr_tail
            .contains("summary-store: opening the archive"),
        "{load:?}"
    );
    let shown = PluginError::Load(Box::new(load.clone())).to_string();
    assert!(
        shown.contains("stderr: summary-store: opening the archive"),
        "the recorded reason carries the stderr tail: {shown}"
    );
    assert!(
        fix_of(&load).contains("plugins.entries.register-throws.config"),
        "{load:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_declaring_another_id_is_refused_as_openclaw_does() {
    let (load, _) = load_failure("node-load-id-mismatch", "id-mismatch").await;
    assert_eq!(load.kind, LoadErrorKind::IdMismatch, "{load:?}");
    assert_eq!(
        load.message,
        "plugin id mismatch (config uses \"id-mismatch\", export uses \"some-other-plugin\")"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_export_clawctx_lacks_is_named_not_hidden_behind_jiti() {
    let (load, root) = load_failure("node-load-missing-sdk", "missing-sdk").await;
    assert_eq!(load.kind, LoadErrorKind::MissingSdkExport, "{load:?}");
    assert_eq!(load.export_name.as_deref(), Some("createDedupeCache"));
    assert_eq!(load.specifier.as_deref(), Some("openclaw/plugin-sdk/core"));
    assert_eq!(
        load.module.as_deref(),
        Some(root.join("index.mjs").as_path())
    );
    assert!(fix_of(&load).contains("openclaw-compat.md"), "{load:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_module_clawctx_lacks_is_named_with_its_importer() {
    let (load, root) = load_failure("node-load-missing-sdk-module", "missing-sdk-module").await;
    assert_eq!(load.kind, LoadErrorKind::MissingSdkModule, "{load:?}");
    assert_eq!(
        load.specifier.as_deref(),
        Some("openclaw/plugin-sdk/routing")
    );
    assert_eq!(
        load.module.as_deref(),
        Some(root.join("index.mjs").as_path())
    );
}
