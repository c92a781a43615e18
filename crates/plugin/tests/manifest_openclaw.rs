//! Manifest and entry rules as OpenClaw's (#16 item 2; `src/plugins/manifest.ts`,
//! `src/plugins/discovery.ts`): JSON5 manifests of at most 256 KiB; `configSchema` required
//! (OpenClaw's message, the file, the key, and the fix); reserved ids; `openclaw.extensions`
//! with `openclaw.runtimeExtensions` and the built JavaScript OpenClaw infers for a
//! TypeScript entry; declaration files refused; `index.ts|js|mjs|cjs` before clawctx's own
//! fallbacks. No plugin code runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use clawctx_plugin::manifest::built_entry_candidates;
use clawctx_plugin::{load_manifest, PluginEntry, PluginError};

fn write(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, text).unwrap();
}

const SCHEMA: &str = r#""configSchema": {"type": "object"}"#;

fn entry_of(dir: &Path) -> String {
    match load_manifest(dir).unwrap().entry {
        PluginEntry::Node(p) | PluginEntry::Python(p) => p
            .strip_prefix(dir.canonicalize().unwrap())
            .unwrap()
            .display()
            .to_string(),
        other => panic!("unexpected entry {other:?}"),
    }
}

#[test]
fn a_manifest_without_config_schema_is_refused_with_openclaws_message_and_the_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write(d, "openclaw.plugin.json", r#"{"id": "no-schema"}"#);
    write(d, "index.js", "export default function register() {}");
    let err = load_manifest(d).unwrap_err();
    let PluginError::Manifest { file, key, message } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(key, "configSchema");
    assert!(file.ends_with("openclaw.plugin.json"), "{err}");
    assert!(
        message.starts_with("plugin manifest requires configSchema"),
        "OpenClaw's words: {message}"
    );
    let fix = err.suggested_fix().unwrap();
    assert!(
        fix.contains(
            r#""configSchema": {"type": "object", "additionalProperties": false, "properties": {}}"#
        ) && fix.contains(&file.display().to_string()),
        "{fix}"
    );

    // `true` is a JSON Schema, but OpenClaw wants an object.
    write(
        d,
        "openclaw.plugin.json",
        r#"{"id": "no-schema", "configSchema": true}"#,
    );
    let err = load_manifest(d).unwrap_err();
    assert!(
        matches!(&err, PluginError::Manifest { key, .. } if key == "configSchema"),
        "{err}"
    );
}

#[test]
fn manifests_are_json5_and_parse_errors_say_where() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write(
        d,
        "openclaw.plugin.json",
        "// a comment\n{ id: 'five', configSchema: { type: 'object', }, }\n",
    );
    write(d, "index.js", "export default function register() {}");
    assert_eq!(load_manifest(d).unwrap().id, "five");

    write(
        d,
        "openclaw.plugin.json",
        "{ id: 'five',\n  configSchema: { ]\n}\n",
    );
    let err = load_manifest(d).unwrap_err().to_string();
    assert!(
        err.contains("failed to parse plugin manifest") && err.contains("line 2"),
        "{err}"
    );

    write(
        d,
        "openclaw.plugin.json",
        &format!(
            "{{\"id\": \"big\", {SCHEMA}, \"description\": \"{}\"}}",
            "x".repeat(300 * 1024)
        ),
    );
    let err = load_manifest(d).unwrap_err().to_string();
    assert!(err.contains("262144"), "{err}");
}

#[test]
fn reserved_ids_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    write(
        tmp.path(),
        "openclaw.plugin.json",
        &format!(r#"{{"id": "node-mcp", {SCHEMA}}}"#),
    );
    write(tmp.path(), "index.js", "");
    let err = load_manifest(tmp.path()).unwrap_err().to_string();
    assert!(
        err.contains("plugin manifest id \"node-mcp\" is reserved by OpenClaw core"),
        "{err}"
    );
}

#[test]
fn extensions_resolve_as_openclaw_resolves_them() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write(
        d,
        "openclaw.plugin.json",
        &format!(r#"{{"id": "ext", {SCHEMA}}}"#),
    );

    // A TypeScript entry that was not shipped: the inferred build, dist/ first.
    write(
        d,
        "package.json",
        r#"{"openclaw": {"extensions": ["./src/plugin.ts"]}}"#,
    );
    write(d, "dist/plugin.mjs", "");
    write(d, "src/plugin.js", "");
    assert_eq!(entry_of(d), "dist/plugin.mjs");
    // When the source is there, it is what OpenClaw loads (through jiti).
    write(d, "src/plugin.ts", "");
    assert_eq!(entry_of(d), "src/plugin.ts");
    // A declared runtime twin wins when it exists.
    write(
        d,
        "package.json",
        r#"{"openclaw": {"extensions": ["./src/plugin.ts"], "runtimeExtensions": ["./build/plugin.cjs"]}}"#,
    );
    assert_eq!(entry_of(d), "src/plugin.ts", "the twin does not exist yet");
    write(d, "build/plugin.cjs", "");
    assert_eq!(entry_of(d), "build/plugin.cjs");

    // The lists must pair up.
    write(
        d,
        "package.json",
        r#"{"openclaw": {"extensions": ["./a.js", "./b.js"], "runtimeExtensions": ["./a.cjs"]}}"#,
    );
    let err = load_manifest(d).unwrap_err().to_string();
    assert!(
        err.contains(
            "openclaw.runtimeExtensions length (1) must match openclaw.extensions length (2)"
        ),
        "{err}"
    );

    // A declaration file is not loadable; a missing entry names what was looked for.
    write(
        d,
        "package.json",
        r#"{"openclaw": {"extensions": ["./index.d.ts"]}}"#,
    );
    write(d, "index.d.ts", "");
    assert!(load_manifest(d)
        .unwrap_err()
        .to_string()
        .contains("type declaration"));
    write(
        d,
        "package.json",
        r#"{"openclaw": {"extensions": ["./lib/entry.ts"]}}"#,
    );
    let err = load_manifest(d).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("extension entry not found") && text.contains("./dist/lib/entry.js"),
        "{text}"
    );
    assert!(
        err.suggested_fix().unwrap().contains("npm run build"),
        "{err:?}"
    );
    // An entry escaping the package is refused even when a built twin would exist.
    write(
        d,
        "package.json",
        r#"{"openclaw": {"extensions": ["../outside.ts"]}}"#,
    );
    assert!(load_manifest(d)
        .unwrap_err()
        .to_string()
        .contains("escapes the plugin root"));
}

#[test]
fn without_extensions_the_index_files_come_first_in_openclaws_order() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write(
        d,
        "openclaw.plugin.json",
        &format!(r#"{{"id": "idx", {SCHEMA}}}"#),
    );
    write(d, "package.json", r#"{"main": "lib/main.js"}"#);
    write(d, "lib/main.js", "");
    assert_eq!(
        entry_of(d),
        "lib/main.js",
        "package.json main is the last resort"
    );
    write(d, "index.cjs", "");
    assert_eq!(entry_of(d), "index.cjs");
    write(d, "index.js", "");
    assert_eq!(entry_of(d), "index.js");
    write(d, "index.ts", "");
    assert_eq!(entry_of(d), "index.ts");
}

#[test]
fn built_candidates_follow_openclaw() {
    assert_eq!(
        built_entry_candidates("./src/index.ts"),
        [
            "./dist/index.js",
            "./dist/index.mjs",
            "./dist/index.cjs",
            "./src/index.js",
            "./src/index.mjs",
            "./src/index.cjs"
        ]
    );
    assert_eq!(
        built_entry_candidates("index.mts")[..3],
        ["./dist/index.js", "./dist/index.mjs", "./dist/index.cjs"]
    );
    assert!(built_entry_candidates("./index.js").is_empty());
}
