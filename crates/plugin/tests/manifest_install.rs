//! Manifest errors name the file and key; install/link/list/info/uninstall keep the index and
//! describe config changes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use clawctx_plugin::install::{apply_changes, read_index, InstallSource};
use clawctx_plugin::{install, list, load_manifest, uninstall, PluginEntry, PluginError};
use common::*;
use serde_json::json;

fn write(dir: &std::path::Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

#[test]
fn manifest_errors_name_file_and_key() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write(d, "openclaw.plugin.json", r#"{"name": "x"}"#);
    let err = load_manifest(d).unwrap_err();
    assert!(
        matches!(&err, PluginError::Manifest { key, .. } if key == "id"),
        "{err}"
    );
    assert!(err.to_string().contains("openclaw.plugin.json"), "{err}");

    write(
        d,
        "openclaw.plugin.json",
        r#"{"id": "x", "entry": "../outside.js", "configSchema": {}}"#,
    );
    let err = load_manifest(d).unwrap_err();
    assert!(
        err.to_string().contains("`entry`") && err.to_string().contains("escapes the plugin root"),
        "{err}"
    );

    write(
        d,
        "openclaw.plugin.json",
        r#"{"id": "x", "kind": 3, "entry": "index.js"}"#,
    );
    assert!(load_manifest(d).unwrap_err().to_string().contains("`kind`"));

    write(
        d,
        "openclaw.plugin.json",
        r#"{"id": "x", "configSchema": {"type": 12}}"#,
    );
    write(d, "index.js", "export default function register() {}");
    assert!(load_manifest(d)
        .unwrap_err()
        .to_string()
        .contains("`configSchema`"));

    // package.json openclaw.extensions is an entry source.
    write(
        d,
        "openclaw.plugin.json",
        r#"{"id": "x", "kind": ["context-engine"], "configSchema": {"type": "object"}}"#,
    );
    write(
        d,
        "package.json",
        r#"{"openclaw": {"extensions": ["./index.js"]}}"#,
    );
    let m = load_manifest(d).unwrap();
    assert!(matches!(m.entry, PluginEntry::Node(_)));
    assert!(m.is_context_engine());
}

#[test]
fn install_link_uninstall() {
    let state = tempfile::tempdir().unwrap();
    let seed = example("seed-node-engine");

    // Copy install.
    let report = install(seed.to_str().unwrap(), state.path(), false).unwrap();
    assert_eq!(report.record.id, "my-engine");
    assert_eq!(report.record.source, InstallSource::Path);
    assert!(state
        .path()
        .join("plugins/my-engine/openclaw.plugin.json")
        .is_file());
    let mut config = json!({});
    apply_changes(&mut config, &report.config_changes);
    assert_eq!(
        config.pointer("/plugins/entries/my-engine/enabled"),
        Some(&json!(true))
    );
    assert_eq!(
        config.pointer("/plugins/slots/contextEngine"),
        Some(&json!("my-engine"))
    );
    assert!(install(seed.to_str().unwrap(), state.path(), false)
        .unwrap_err()
        .to_string()
        .contains("already installed"));

    // Uninstall resets the slot and removes the copy.
    let un = uninstall(state.path(), "my-engine", &config, false).unwrap();
    assert!(un.removed_files);
    apply_changes(&mut config, &un.config_changes);
    assert_eq!(
        config.pointer("/plugins/slots/contextEngine"),
        Some(&json!("legacy"))
    );
    assert!(config.pointer("/plugins/entries/my-engine").is_none());
    assert!(!state.path().join("plugins/my-engine").exists());

    // Link install records the path and adds it to plugins.load.paths.
    let report = install(
        example("python-sliding-window").to_str().unwrap(),
        state.path(),
        true,
    )
    .unwrap();
    assert_eq!(report.record.source, InstallSource::Link);
    apply_changes(&mut config, &report.config_changes);
    assert_eq!(
        config
            .pointer("/plugins/load/paths")
            .and_then(|p| p.as_array())
            .map(Vec::len),
        Some(1)
    );
    assert_eq!(list(state.path()).unwrap().len(), 1);
    assert_eq!(read_index(state.path()).unwrap().installs.len(), 1);
    let un = uninstall(state.path(), "python-sliding-window", &config, false).unwrap();
    assert!(
        !un.removed_files,
        "a link never deletes the linked directory"
    );
    apply_changes(&mut config, &un.config_changes);
    assert_eq!(
        config
            .pointer("/plugins/load/paths")
            .and_then(|p| p.as_array())
            .map(Vec::len),
        Some(0)
    );
    assert!(example("python-sliding-window").join("plugin.py").is_file());
    assert!(matches!(
        uninstall(state.path(), "nope", &config, false),
        Err(PluginError::NotInstalled(_))
    ));
}
