//! `clawctx doctor --json` against its documented schema (`docs/doctor.schema.json`, described
//! in `docs/doctor.md`): real reports of several setups — fresh, a plugin switched off by
//! policy, an unregistered slot, wrong config types, a plugin config its schema refuses, an
//! unparseable file, lossless selected — must each validate, with every key camelCase; and the
//! example in docs/doctor.md must validate too. Also: an unparseable config is reported as
//! existing and invalid with its position, never as absent; a wrong type fails doctor naming
//! its key; `CLAWCTX_LOG=debug` shows doctor's steps.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::Run;
use serde_json::Value;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn clawctx(state: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clawctx"));
    cmd.args(args)
        .env("CLAWCTX_STATE_DIR", state)
        .env_remove("CLAWCTX_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("running clawctx");
    Run {
        cmd: format!("clawctx {}", args.join(" ")),
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn schema() -> jsonschema::Validator {
    let text = std::fs::read_to_string(repo_root().join("docs/doctor.schema.json")).unwrap();
    let schema: Value = serde_json::from_str(&text).expect("docs/doctor.schema.json is JSON");
    jsonschema::validator_for(&schema).expect("docs/doctor.schema.json is a valid JSON Schema")
}

/// Every object key outside `contextEngine.info` (OpenClaw's own shape) is camelCase.
fn snake_or_kebab_keys(v: &Value, at: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let path = format!("{at}.{k}");
                if path == ".contextEngine.info" {
                    continue;
                }
                let camel = k.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                    && k.chars().all(|c| c.is_ascii_alphanumeric());
                if !camel {
                    out.push(path.clone());
                }
                snake_or_kebab_keys(child, &path, out);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                snake_or_kebab_keys(item, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Runs `doctor --json` and checks the report against the schema; returns it.
fn checked_report(state: &Path) -> Value {
    let run = clawctx(state, &["doctor", "--json"], &[]);
    let report: Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{run}"));
    let validator = schema();
    let errors: Vec<String> = validator
        .iter_errors(&report)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "doctor --json does not match docs/doctor.schema.json:\n{}\n{run}",
        errors.join("\n")
    );
    let mut bad = Vec::new();
    snake_or_kebab_keys(&report, "", &mut bad);
    assert!(bad.is_empty(), "keys not camelCase: {bad:?}\n{run}");
    report
}

fn write_config(state: &Path, text: &str) {
    std::fs::write(state.join("clawctx.json"), text).unwrap();
}

#[test]
fn every_report_matches_the_documented_schema() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    // Fresh.
    let r = checked_report(state);
    assert_eq!(r["configExists"], false);
    assert_eq!(r["configError"], Value::Null);
    // A slot that names no engine: a quarantine entry.
    write_config(state, "{ plugins: { slots: { contextEngine: 'nope' } } }");
    let r = checked_report(state);
    assert_eq!(r["quarantines"][0]["engineId"], "nope");
    // Lossless selected: its store is named.
    write_config(
        state,
        "{ plugins: { slots: { contextEngine: 'lossless' } } }",
    );
    let r = checked_report(state);
    assert_eq!(r["losslessStore"]["backend"], "sqlite");
    assert_eq!(r["losslessStore"]["ok"], true);
    // Every kind of policy block carries its plugin id as `pluginId`.
    for (config, kind) in [
        (
            "{ plugins: { slots: { contextEngine: 'lossless' }, entries: { lossless: { enabled: false } } } }",
            "pluginDisabled",
        ),
        (
            "{ plugins: { slots: { contextEngine: 'lossless' }, deny: ['lossless'] } }",
            "pluginDenied",
        ),
        (
            "{ plugins: { slots: { contextEngine: 'lossless' }, allow: ['other'] } }",
            "pluginNotAllowed",
        ),
    ] {
        write_config(state, config);
        let r = checked_report(state);
        let block = &r["contextEngine"]["reason"]["block"];
        assert_eq!(block["kind"], kind, "{r:#}");
        assert_eq!(block["pluginId"], "lossless", "{r:#}");
        assert!(block.get("plugin_id").is_none(), "{r:#}");
    }
}

#[test]
fn an_unparseable_config_exists_and_is_invalid_at_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    // Line 4 lacks the comma after line 3's object.
    write_config(
        state,
        "{\n  plugins: {\n    slots: { contextEngine: \"x\" }\n    entries: {}\n  }\n}\n",
    );
    let r = checked_report(state);
    assert_eq!(r["status"], "error");
    assert_eq!(r["configExists"], true, "{r:#}");
    let line = r["configError"]["line"].as_u64().expect("a line");
    assert!((3..=4).contains(&line), "{r:#}");
    assert!(r["configError"]["column"].as_u64().is_some(), "{r:#}");
    let text = clawctx(state, &["doctor"], &[]);
    assert_eq!(text.code, 1, "{text}");
    assert!(!text.stdout.contains("not found"), "{text}");
    assert!(
        text.stdout
            .contains(&format!("(exists but is invalid at line {line}, column ")),
        "{text}"
    );
}

#[test]
fn a_wrong_type_in_an_engine_config_fails_doctor_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    // A plugin whose manifest declares its config's schema; its config breaks it.
    let plugin = state.join("strict-plugin");
    std::fs::create_dir_all(&plugin).unwrap();
    std::fs::write(
        plugin.join("openclaw.plugin.json"),
        r#"{"id": "strict", "kind": "context-engine", "entry": "./index.js",
            "configSchema": {"type": "object", "properties": {"depth": {"type": "integer"}}}}"#,
    )
    .unwrap();
    std::fs::write(plugin.join("index.js"), "export default () => {};").unwrap();
    write_config(
        state,
        &format!(
            "{{ plugins: {{ slots: {{ contextEngine: 'lossless' }}, load: {{ paths: [{}] }},
               entries: {{ strict: {{ config: {{ depth: 'deep' }} }},
                          lossless: {{ config: {{ freshTailCount: 'lots', contextThreshold: 0.6, freshTailcount: 4 }} }} }} }} }}",
            serde_json::to_string(&plugin.display().to_string()).unwrap()
        ),
    );
    let r = checked_report(state);
    assert_eq!(r["status"], "error", "{r:#}");
    let problems: Vec<(String, String)> = r["configProblems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["key"].as_str().unwrap().to_owned(),
                p["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        problems.contains(&(
            "plugins.entries.lossless.config.freshTailCount".into(),
            "expected a non-negative integer, got \"lots\"".into()
        )),
        "{problems:?}"
    );
    assert!(
        !problems
            .iter()
            .any(|(k, _)| k.ends_with("contextThreshold")),
        "a right value is not a problem: {problems:?}"
    );
    assert!(
        problems.iter().any(
            |(k, m)| k == "plugins.entries.lossless.config.freshTailcount"
                && m.contains("not a lossless setting")
        ),
        "a misspelt key is named: {problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|(k, m)| k == "plugins.entries.strict.config.depth" && m.contains("integer")),
        "{problems:?}"
    );
    let text = clawctx(state, &["doctor"], &[]);
    assert_eq!(text.code, 1, "{text}");
    assert!(
        text.stdout.contains(
            "[!!] config     plugins.entries.lossless.config.freshTailCount: expected a non-negative integer, got \"lots\""
        ),
        "{text}"
    );
}

#[test]
fn the_example_in_docs_doctor_md_matches_the_schema() {
    let md = std::fs::read_to_string(repo_root().join("docs/doctor.md")).unwrap();
    let marker = "Example (fresh state dir):\n\n```json\n";
    let start = md.find(marker).expect("docs/doctor.md has its example") + marker.len();
    let end = start + md[start..].find("\n```").unwrap();
    let example: Value = serde_json::from_str(&md[start..end]).expect("the example is JSON");
    let errors: Vec<String> = schema()
        .iter_errors(&example)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(errors.is_empty(), "docs/doctor.md's example: {errors:?}");
}

#[test]
fn debug_logging_shows_doctors_steps() {
    let dir = tempfile::tempdir().unwrap();
    let run = clawctx(dir.path(), &["doctor"], &[("CLAWCTX_LOG", "debug")]);
    assert_eq!(run.code, 0, "{run}");
    for step in [
        "doctor: config",
        "doctor: engines loaded",
        "doctor: engine resolved",
        "doctor: report built",
    ] {
        assert!(
            run.stderr.contains(step),
            "no `{step}` in the debug log:\n{run}"
        );
    }
    let quiet = clawctx(dir.path(), &["doctor"], &[]);
    assert!(!quiet.stderr.contains("doctor: config"), "{quiet}");
}

#[test]
fn doctor_names_the_postgresql_store_without_its_password_reachable_or_not() {
    let Some(db) = clawctx_test_support::pg::test_database("doctor") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    write_config(
        state,
        "{ plugins: { slots: { contextEngine: 'lossless' }, entries: { lossless: { config: { databaseEnv: 'CLAWCTX_LCM_DATABASE' } } } } }",
    );
    let password = db
        .url
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split('@').next())
        .and_then(|userinfo| userinfo.split_once(':'))
        .map(|(_, p)| p.to_owned())
        .filter(|p| !p.is_empty());
    // Reachable.
    let run = clawctx(
        state,
        &["doctor", "--json"],
        &[("CLAWCTX_LCM_DATABASE", db.url.as_str())],
    );
    let r: Value = serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}\n{run}"));
    assert_eq!(r["losslessStore"]["backend"], "postgres", "{run}");
    assert_eq!(r["losslessStore"]["ok"], true, "{run}");
    let target = r["losslessStore"]["target"].as_str().unwrap().to_owned();
    assert!(target.starts_with("postgres://"), "{target}");
    assert!(target.ends_with(&format!("/{}", db.name)), "{target}");
    let text = clawctx(
        state,
        &["doctor"],
        &[("CLAWCTX_LCM_DATABASE", db.url.as_str())],
    );
    assert!(
        text.stdout
            .contains(&format!("[ok] store       postgres {target}")),
        "{text}"
    );
    // Unreachable: the same target shape, and why.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let down = format!("postgres://clawctx:s3cret-pw@127.0.0.1:{port}/lcm");
    let run = clawctx(
        state,
        &["doctor", "--json"],
        &[("CLAWCTX_LCM_DATABASE", down.as_str())],
    );
    let r: Value = serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}\n{run}"));
    assert_eq!(r["losslessStore"]["ok"], false, "{run}");
    assert_eq!(
        r["losslessStore"]["target"],
        format!("postgres://clawctx@127.0.0.1:{port}/lcm"),
        "{run}"
    );
    for out in [&run.stdout, &run.stderr, &text.stdout, &text.stderr] {
        assert!(!out.contains("s3cret-pw"), "a password is shown: {out}");
        if let Some(p) = &password {
            assert!(!out.contains(p.as_str()), "the password is shown: {out}");
        }
    }
}

#[test]
fn a_plugin_that_does_not_load_matches_the_schema_with_its_load_error() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let plugin = state.join("broken-plugin");
    std::fs::create_dir_all(&plugin).unwrap();
    std::fs::write(
        plugin.join("openclaw.plugin.json"),
        r#"{"id": "broken", "kind": "context-engine", "entry": "./index.js", "configSchema": {"type": "object"}}"#,
    )
    .unwrap();
    std::fs::write(
        plugin.join("index.js"),
        "import counter from \"no-such-package-for-clawctx\";\nexport default function register(api) { counter(api); }\n",
    )
    .unwrap();
    write_config(
        state,
        &format!(
            "{{ plugins: {{ slots: {{ contextEngine: 'broken' }}, load: {{ paths: [{}] }} }} }}",
            serde_json::to_string(&plugin.display().to_string()).unwrap()
        ),
    );
    let r = checked_report(state);
    let p = &r["plugins"][0];
    assert_eq!(p["loaded"], false, "{r:#}");
    assert_eq!(p["loadError"]["kind"], "missing-package", "{r:#}");
    assert!(p["loadError"]["stderrTail"].is_string(), "{r:#}");
}
