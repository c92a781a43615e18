//! `clawctx plugins install` selects the engine a plugin registers, not its plugin id (issue #28
//! item 1, #33 item 3): OpenClaw's convention is engine id = plugin id, but a plugin may
//! register another id, and selecting its plugin id then names an engine that does not exist
//! (`doctor`: "not registered"). Each case is a small real Node plugin written here; a plugin
//! registering several engines, none of them its id, is refused with the ids to choose from.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};

use common::clawctx;
use serde_json::Value;

/// A Node plugin `id` registering `engines` (each a trivial pass-through engine).
fn plugin(root: &Path, id: &str, engines: &[&str]) -> PathBuf {
    let dir = root.join(id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("openclaw.plugin.json"),
        format!(
            r#"{{"id": "{id}", "kind": "context-engine", "configSchema": {{"type": "object"}}}}"#
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("package.json"),
        r#"{"type": "module", "openclaw": {"extensions": ["./index.js"]}}"#,
    )
    .unwrap();
    let ids = serde_json::to_string(engines).unwrap();
    std::fs::write(
        dir.join("index.js"),
        format!(
            "export default function register(api) {{\n  for (const id of {ids}) {{\n    \
             api.registerContextEngine(id, () => ({{\n      info: {{ id, name: id }},\n      \
             async ingest() {{ return {{ ingested: true }}; }},\n      \
             async assemble({{ messages }}) {{ return {{ messages, estimatedTokens: 0 }}; }},\n      \
             async compact() {{ return {{ ok: true, compacted: false }}; }},\n    }}));\n  }}\n}}\n"
        ),
    )
    .unwrap();
    dir
}

fn doctor(state: &Path) -> Value {
    let (code, out, err) = clawctx(state, &["doctor", "--json"]);
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("doctor --json is not JSON ({e}); exit {code}\n{out}\n{err}"))
}

#[test]
fn install_selects_the_engine_the_plugin_registers() {
    let state = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    let dir = plugin(src.path(), "acme-context", &["acme"]);
    let (code, out, err) = clawctx(
        state.path(),
        &["plugins", "install", "-l", dir.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(r#"set plugins.slots.contextEngine = "acme""#),
        "the registered engine is selected, not the plugin id:\n{out}\n{err}"
    );
    let j = doctor(state.path());
    assert_eq!(j["contextEngine"]["configured"], "acme", "{j:#}");
    assert_eq!(j["contextEngine"]["effective"], "acme", "{j:#}");
    assert_eq!(j["contextEngine"]["loads"], true, "{j:#}");
}

#[test]
fn install_prefers_the_engine_named_like_the_plugin() {
    let state = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    let dir = plugin(src.path(), "twin", &["twin-lite", "twin"]);
    let (code, out, err) = clawctx(
        state.path(),
        &["plugins", "install", "-l", dir.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(r#"set plugins.slots.contextEngine = "twin""#),
        "{out}\n{err}"
    );
}

#[test]
fn install_refuses_to_guess_between_several_engines_and_names_them() {
    let state = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    let dir = plugin(src.path(), "multi", &["fast", "thorough"]);
    let (code, out, err) = clawctx(
        state.path(),
        &["plugins", "install", "-l", dir.to_str().unwrap()],
    );
    assert_eq!(code, 0, "the install itself succeeds:\n{out}\n{err}");
    assert!(
        !out.contains("config: set plugins.slots.contextEngine"),
        "no engine is selected:\n{out}"
    );
    assert!(
        out.contains("engine not selected")
            && out.contains("fast, thorough")
            && out.contains("clawctx config set plugins.slots.contextEngine <id>"),
        "the refusal names the engines to choose from and how:\n{out}"
    );
    let j = doctor(state.path());
    assert_eq!(j["contextEngine"]["configured"], "legacy", "{j:#}");
}

#[test]
fn the_openclaw_bridge_registers_its_plugin_id() {
    let state = tempfile::tempdir().unwrap();
    let bridge = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk/openclaw-bridge");
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(bridge.join("openclaw.plugin.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["id"], "clawctx");
    let (code, out, err) = clawctx(
        state.path(),
        &["plugins", "install", "-l", bridge.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(r#"set plugins.slots.contextEngine = "clawctx""#),
        "{out}\n{err}"
    );
    let j = doctor(state.path());
    assert_eq!(j["contextEngine"]["configured"], "clawctx", "{j:#}");
    let plugins = j["plugins"].as_array().unwrap();
    assert_eq!(plugins.len(), 1, "{j:#}");
    assert_eq!(plugins[0]["id"], "clawctx", "{j:#}");
    assert_eq!(plugins[0]["loaded"], true, "{j:#}");
}
