//! Config file: JSON5 in, precise errors, atomic writes that keep unknown keys.
#![allow(clippy::unwrap_used, clippy::expect_used)]

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
    // The file is edited in place, in its own style: unquoted keys, single quotes.
    assert!(
        text.starts_with("{ gateway: { port: 1 }, plugins: {"),
        "untouched text kept: {text}"
    );
    assert!(text.contains("contextEngine: 'lossless'"), "{text}");
    assert!(text.contains("freshTailCount: 32"), "{text}");
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

/// A user's `openclaw.json`, as OpenClaw's users write it: comments of both kinds, unquoted
/// keys, trailing commas, a comment after a value.
const OPENCLAW_JSON: &str = r#"// OpenClaw config — mine, shared with OpenClaw
{
  /* models */
  models: {
    providers: {
      local: { api: "openai-completions", baseUrl: "http://127.0.0.1:8000/v1" }, // my box
    },
  },
  plugins: {
    // the engine
    slots: { contextEngine: "legacy" },   // change me
    entries: {
      lossless: {
        enabled: true,
        config: {
          freshTailCount: 8,  // small
          contextThreshold: 0.75,
        },
      },
    },
  },
}
"#;

#[allow(clippy::unwrap_used)]
fn edited(edit: impl FnOnce(&mut ConfigFile)) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("openclaw.json");
    std::fs::write(&path, OPENCLAW_JSON).unwrap();
    let mut c = ConfigFile::load(&path).unwrap();
    edit(&mut c);
    c.save().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        json5::from_str::<serde_json::Value>(&text).unwrap(),
        *c.value(),
        "the file reads back as the config in memory:\n{text}"
    );
    text
}

#[test]
fn set_replaces_only_the_value_byte_for_byte() {
    let text = edited(|c| {
        c.set("plugins.slots.contextEngine", json!("lossless"))
            .unwrap()
    });
    assert_eq!(
        text,
        OPENCLAW_JSON.replace(
            "contextEngine: \"legacy\" }",
            "contextEngine: \"lossless\" }"
        )
    );
    let text = edited(|c| {
        c.set("plugins.entries.lossless.config.freshTailCount", json!(32))
            .unwrap()
    });
    assert_eq!(
        text,
        OPENCLAW_JSON.replace("freshTailCount: 8,", "freshTailCount: 32,")
    );
}

#[test]
fn unset_removes_only_the_property() {
    let text = edited(|c| {
        c.unset("plugins.entries.lossless.config.freshTailCount", false)
            .unwrap();
    });
    assert_eq!(
        text,
        OPENCLAW_JSON.replace("          freshTailCount: 8,  // small\n", "")
    );
}

#[test]
fn a_new_key_goes_into_its_object_in_the_files_style() {
    let text = edited(|c| {
        c.set(
            "plugins.entries.lossless.config.leafChunkTokens",
            json!(2000),
        )
        .unwrap()
    });
    assert_eq!(
        text,
        OPENCLAW_JSON.replace(
            "          contextThreshold: 0.75,\n",
            "          contextThreshold: 0.75,\n          leafChunkTokens: 2000,\n"
        )
    );
    // A new object under an existing one: only the enclosing object gains lines.
    let text = edited(|c| {
        c.set("plugins.entries.memory.enabled", json!(false))
            .unwrap()
    });
    let (before, after) = OPENCLAW_JSON.split_at(OPENCLAW_JSON.find("    },\n  },\n}").unwrap());
    assert!(text.starts_with(before), "{text}");
    assert!(text.ends_with(after), "{text}");
    assert!(text.contains("\n      memory: {\n"), "{text}");
}

#[test]
fn a_file_that_cannot_be_edited_in_place_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("openclaw.json");
    // A duplicated key: JSON5 reads the last one, the tree editor would change the first.
    let original =
        "{ plugins: { slots: { contextEngine: 'a' }, slots: { contextEngine: 'b' } } }\n";
    std::fs::write(&path, original).unwrap();
    let mut c = ConfigFile::load(&path).unwrap();
    c.set("plugins.slots.contextEngine", json!("lossless"))
        .unwrap();
    let err = c.save().unwrap_err().to_string();
    assert!(err.contains("nothing was written"), "{err}");
    assert!(
        err.contains("edit it by hand: set `plugins.slots.contextEngine` to \"lossless\""),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), original);
}

#[test]
fn a_replaced_value_is_saved_as_in_place_edits() {
    let text = edited(|c| {
        let mut v = c.value().clone();
        v["plugins"]["slots"]["contextEngine"] = json!("last-ten");
        v["plugins"]["entries"]["last-ten"] = json!({"enabled": true});
        v["plugins"]["entries"]["lossless"]["config"]
            .as_object_mut()
            .unwrap()
            .remove("contextThreshold");
        c.replace_value(v);
    });
    let expected = OPENCLAW_JSON
        .replace(
            "contextEngine: \"legacy\" }",
            "contextEngine: \"last-ten\" }",
        )
        .replace("          contextThreshold: 0.75,\n", "");
    // Everything above the new entry is as it was.
    let head = &expected[..expected.find("    },\n  },\n}").unwrap()];
    assert!(text.starts_with(head), "{text}");
    assert!(text.contains("\n      \"last-ten\": {\n"), "{text}");
}
