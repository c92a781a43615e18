//! A TypeScript entry's compiled output is cached between starts (issue #39 item 4): jiti
//! compiled it on every start (`fsCache: false`), seconds for a large plugin on a loaded
//! machine. The cache lives under the host's runtime directory, one private directory per
//! plugin; an edited source is compiled again, an unchanged one is not. Fixture:
//! `tests/fixtures/node-typescript`, copied so it can be edited.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use clawctx_engine::*;
use clawctx_protocol::*;
use common::*;
use serde_json::json;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The cached files: name → (modified time, text).
fn cached(dir: &Path) -> Vec<(PathBuf, SystemTime, String)> {
    let paths: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(d) => d.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    };
    let mut files: Vec<_> = paths
        .into_iter()
        .map(|p| {
            let meta = std::fs::metadata(&p).unwrap();
            let text = std::fs::read_to_string(&p).unwrap();
            (p, meta.modified().unwrap(), text)
        })
        .collect();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    files
}

/// Starts the plugin in `dir` and returns its engine's `systemPromptAddition`.
async fn addition_of(dir: &Path, runtime: &Path) -> String {
    let (_registry, engine, loaded) = load_selected(
        dir,
        config("ts-engine", "ts-engine", json!({})),
        "ts-engine",
        options(runtime),
    )
    .await;
    let got = engine
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
    loaded.host.shutdown().await;
    got.system_prompt_addition.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compiled_typescript_is_cached_per_plugin_and_recompiled_when_edited() {
    require("node");
    let tmp = tempfile::tempdir().unwrap();
    let plugin = tmp.path().join("ts-plugin");
    copy_dir(&fixture("node-typescript"), &plugin);
    let runtime = tmp.path().join("runtime");

    assert_eq!(addition_of(&plugin, &runtime).await, "engine label: ts");
    let cache = runtime.join("jiti-cache").join("ts-engine");
    let first = cached(&cache);
    assert!(
        first.len() >= 2,
        "the entry and the module it imports are cached: {first:?}"
    );
    assert_eq!(
        std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777,
        0o700,
        "the cache is private: its files run as the plugin's code"
    );
    assert!(
        !plugin.join("node_modules").exists(),
        "nothing is written into the plugin"
    );

    // Unchanged sources: every file comes from the cache (none is written again).
    assert_eq!(addition_of(&plugin, &runtime).await, "engine label: ts");
    let second = cached(&cache);
    assert_eq!(
        first, second,
        "a start with unchanged sources compiles nothing"
    );

    // An edited module is compiled again; the entry, unchanged, still comes from the cache.
    let engine_ts = plugin.join("src/engine.ts");
    let source = std::fs::read_to_string(&engine_ts).unwrap();
    std::fs::write(
        &engine_ts,
        source.replace(
            "`engine label: ${this.label}`",
            "`edited label: ${this.label}`",
        ),
    )
    .unwrap();
    assert_eq!(addition_of(&plugin, &runtime).await, "edited label: ts");
    let third = cached(&cache);
    let changed: Vec<&PathBuf> = third
        .iter()
        .filter(|f| !first.contains(f))
        .map(|f| &f.0)
        .collect();
    assert_eq!(changed.len(), 1, "only the edited module: {changed:?}");
    assert!(
        changed[0].to_string_lossy().contains("engine"),
        "{changed:?}"
    );
}
