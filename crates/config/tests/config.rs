//! Config file: JSON5 in, precise errors, atomic writes that keep unknown keys.

use clawctx_config::*;
use serde_json::json;

#[test]
fn missing_file_is_empty_and_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("clawctx.json");
    let c = ConfigFile::load(&path).unwrap();
    assert!(!c.exists());
    assert_eq!(c.value(), &json!({}));
    assert!(!path.exists());
}

#[test]
fn reads_openclaw_json5_with_comments_and_trailing_commas() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("openclaw.json");
    std::fs::write(
        &path,
        "// openclaw.json\n{\n  plugins: {\n    slots: { contextEngine: 'lossless-claw', }, // the engine\n    entries: { 'lossless-claw': { enabled: true } },\n  },\n  gateway: { port: 18789 },\n}\n",
    )
    .unwrap();
    let c = ConfigFile::load(&path).unwrap();
    assert_eq!(
        c.get("plugins.slots.contextEngine").unwrap(),
        Some(&json!("lossless-claw"))
    );
    assert_eq!(
        c.get("plugins.entries.lossless-claw.enabled").unwrap(),
        Some(&json!(true))
    );
}

#[test]
fn syntax_error_names_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("clawctx.json");
    std::fs::write(
        &path,
        "{\n  plugins: {\n    slots: { contextEngine: \"x\" }\n    entries: {}\n  }\n}\n",
    )
    .unwrap();
    let err = ConfigFile::load(&path).unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with(&format!("{}:", path.display())), "{text}");
    assert!(
        text.contains("hint:") && !text.contains("-->"),
        "one clean line plus a hint: {text}"
    );
    let ConfigError::Syntax { line, column, .. } = err else {
        panic!("not a syntax error")
    };
    assert!(
        (3..=4).contains(&line) && column > 0,
        "the missing comma is at the end of line 3: {line}:{column}"
    );
}

#[test]
fn top_level_must_be_an_object() {
    let err = ConfigFile::parse(std::path::Path::new("c.json"), "[1, 2]").unwrap_err();
    assert_eq!(
        err.to_string(),
        "c.json: the config must be a JSON object at the top level, found an array"
    );
}

#[test]
fn set_and_unset_keep_unknown_keys_and_write_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("clawctx.json");
    std::fs::write(
        &path,
        "{ gateway: { port: 1 }, plugins: { slots: { contextEngine: 'legacy' } } }",
    )
    .unwrap();
    let mut c = ConfigFile::load(&path).unwrap();
    c.set("plugins.slots.contextEngine", json!("lossless"))
        .unwrap();
    c.set("plugins.entries.lossless.config.freshTailCount", json!(32))
        .unwrap();
    c.save().unwrap();
    let reread = ConfigFile::load(&path).unwrap();
    assert_eq!(
        reread.get("gateway.port").unwrap(),
        Some(&json!(1)),
        "unknown keys survive"
    );
    assert_eq!(
        reread
            .get("plugins.entries.lossless.config.freshTailCount")
            .unwrap(),
        Some(&json!(32))
    );
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("\n  \"plugins\""),
        "indented, readable output: {text}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "no temporary files left: {leftovers:?}");

    let mut c = reread;
    assert_eq!(
        c.unset("plugins.slots.contextEngine", true).unwrap(),
        Some(json!("lossless"))
    );
    assert_eq!(
        c.get("plugins.slots").unwrap(),
        None,
        "an emptied slots object is pruned"
    );
    assert_eq!(c.unset("no.such.key", true).unwrap(), None);
}

#[test]
fn set_through_a_scalar_is_a_clear_error() {
    let mut c = ConfigFile::from_value("c.json", json!({"plugins": 3}));
    let err = c
        .set("plugins.slots.contextEngine", json!("x"))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "c.json: cannot set `plugins.slots.contextEngine`: `plugins` is a number, not an object"
    );
    assert!(matches!(
        c.set("a..b", json!(1)),
        Err(ConfigError::InvalidKey(_))
    ));
}

#[test]
fn cli_values_parse_as_json5_or_string() {
    assert_eq!(parse_cli_value("true"), json!(true));
    assert_eq!(parse_cli_value("42"), json!(42));
    assert_eq!(parse_cli_value("{a: 1}"), json!({"a": 1}));
    assert_eq!(parse_cli_value("lossless"), json!("lossless"));
}

#[test]
fn problems_name_their_keys() {
    let problems = check(&json!({
        "plugins": {"slots": {"contextEngine": 7}, "entries": {"x": {"enabled": "yes"}}, "deny": "x"}
    }));
    let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(
        keys,
        vec![
            "plugins.deny",
            "plugins.slots.contextEngine",
            "plugins.entries.x.enabled"
        ]
    );
    assert!(check(&json!({"plugins": {"slots": {"contextEngine": "legacy"}}})).is_empty());
}
