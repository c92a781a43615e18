//! `clawctx doctor` says why an installed plugin does not load and what to do about it (#16
//! items 2 and 5), as a user sees it: a linked plugin importing a package that is not
//! installed is a `missing-package` load error, quarantined with operation `load`, with the
//! `npm install` that fixes it; a `register(api)` that throws shows the plugin's stderr; a
//! manifest that lost its `configSchema` is refused with OpenClaw's message and the line to
//! add. The plugins are the fixtures of `crates/plugin/tests/fixtures`, run by real `node`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::clawctx;
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../plugin/tests/fixtures")
        .join(name)
        .canonicalize()
        .unwrap()
}

fn require_node() {
    assert!(
        Command::new("node")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "node is required for plugin tests"
    );
}

fn link(state: &Path, plugin: &Path) {
    let (code, out, err) = clawctx(
        state,
        &["plugins", "install", "-l", plugin.to_str().unwrap()],
    );
    assert_eq!(code, 0, "install -l failed:\n{out}\n{err}");
}

fn doctor_json(state: &Path) -> Value {
    let (code, out, err) = clawctx(state, &["doctor", "--json"]);
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("doctor --json is not JSON ({e}); exit {code}\n{out}\n{err}"))
}

#[test]
fn doctor_names_a_missing_package_and_the_npm_install_that_fixes_it() {
    require_node();
    let state = tempfile::tempdir().unwrap();
    let plugin = fixture("node-load-missing-package");
    link(state.path(), &plugin);
    let importer = plugin.join("dist/engine.js");
    let fix = format!(
        "package `tiny-token-counter` is imported by {} but is not installed: run `npm install tiny-token-counter` in {}",
        importer.display(),
        plugin.display()
    );

    let j = doctor_json(state.path());
    let p = &j["plugins"][0];
    assert_eq!(p["id"], "missing-package", "{j:#}");
    assert_eq!(p["loaded"], false);
    assert_eq!(p["loadError"]["kind"], "missing-package", "{p:#}");
    assert_eq!(p["loadError"]["package"], "tiny-token-counter");
    assert_eq!(p["loadError"]["module"], importer.to_str().unwrap());
    assert_eq!(p["fix"], fix.as_str(), "{p:#}");
    assert_eq!(j["contextEngine"]["effective"], "legacy");
    assert_eq!(j["contextEngine"]["reason"]["operation"], "load", "{j:#}");
    let q = j["quarantines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["engineId"] == "missing-package")
        .unwrap_or_else(|| panic!("not quarantined: {j:#}"));
    assert_eq!(q["operation"], "load", "not a factory failure: {q:#}");
    assert!(
        q["reason"]
            .as_str()
            .unwrap()
            .contains("Cannot find package 'tiny-token-counter'"),
        "{q:#}"
    );

    let (_, text, _) = clawctx(state.path(), &["doctor"]);
    assert!(text.contains(&format!("fix: {fix}")), "{text}");
    assert!(
        text.contains("\"missing-package\" failed during load"),
        "{text}"
    );
    let (code, text, _) = clawctx(state.path(), &["plugins", "doctor"]);
    assert_ne!(code, 0);
    assert!(text.contains(&format!("fix: {fix}")), "{text}");
}

#[test]
fn doctor_shows_what_a_failing_register_printed() {
    require_node();
    let state = tempfile::tempdir().unwrap();
    let plugin = fixture("node-load-register-throws");
    link(state.path(), &plugin);
    let j = doctor_json(state.path());
    let p = &j["plugins"][0];
    assert_eq!(p["loadError"]["kind"], "register-threw", "{p:#}");
    assert_eq!(
        p["loadError"]["stderrTail"],
        "summary-store: opening the archive"
    );
    let (_, text, _) = clawctx(state.path(), &["doctor"]);
    assert!(
        text.contains(&format!(
            "plugin failed during register: SUMMARY_STORE_KEY_THAT_IS_NEVER_SET is not set (plugin \"register-throws\": its register(api) threw, in {}:6:",
            plugin.join("index.js").display()
        )),
        "{text}"
    );
    assert!(
        text.contains("stderr | summary-store: opening the archive"),
        "{text}"
    );
}

#[test]
fn a_manifest_without_config_schema_is_refused_with_the_line_to_add() {
    let state = tempfile::tempdir().unwrap();
    let plugin = tempfile::tempdir().unwrap();
    let src = fixture("node-load-register-throws");
    for f in ["openclaw.plugin.json", "package.json", "index.js"] {
        std::fs::copy(src.join(f), plugin.path().join(f)).unwrap();
    }
    let manifest = plugin
        .path()
        .canonicalize()
        .unwrap()
        .join("openclaw.plugin.json");
    link(state.path(), plugin.path());
    // The manifest loses its schema after the install (edited, or an older clawctx took it).
    std::fs::write(
        &manifest,
        r#"{"id": "register-throws", "kind": "context-engine"}"#,
    )
    .unwrap();

    let j = doctor_json(state.path());
    let p = &j["plugins"][0];
    assert_eq!(p["loaded"], false, "{j:#}");
    let error = p["error"].as_str().unwrap();
    assert!(
        error.contains(&manifest.display().to_string())
            && error.contains("`configSchema`")
            && error.contains("plugin manifest requires configSchema"),
        "{error}"
    );
    let fix = format!(
        r#"add "configSchema": {{"type": "object", "additionalProperties": false, "properties": {{}}}} to {}"#,
        manifest.display()
    );
    assert!(p["fix"].as_str().unwrap().starts_with(&fix), "{p:#}");
    let (_, text, _) = clawctx(state.path(), &["doctor"]);
    assert!(text.contains(&format!("fix: {fix}")), "{text}");

    // A fresh install is refused with the same words.
    let other = tempfile::tempdir().unwrap();
    let (code, out, err) = clawctx(
        other.path(),
        &["plugins", "install", "-l", plugin.path().to_str().unwrap()],
    );
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("plugin manifest requires configSchema"),
        "{err}"
    );
}
