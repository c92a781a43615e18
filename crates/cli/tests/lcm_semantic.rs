//! Semantic recall from the command line (issue #43), with the real sentence model:
//! `clawctx lcm embed` backfills a store with a progress report and resumes where it stopped,
//! `lcm grep` finds a fact asked about in other words (`semantic`, `hybrid`, and `auto`, the
//! default, once a model is named), says how to get a model when `semantic` has none, and
//! `doctor` says in one line whether recall is hybrid or lexical.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

/// Runs `clawctx args…` with `state` as its state dir and `CLAWCTX_EMBED_MODEL=model`.
fn clawctx(state: &Path, model: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args(args)
        .env("CLAWCTX_STATE_DIR", state)
        .env("CLAWCTX_EMBED_MODEL", model)
        .env_remove("CLAWCTX_LOG")
        .output()
        .expect("running clawctx");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An OpenClaw session file: a fact, then small talk.
fn write_session(path: &Path) {
    let mut lines = vec![json!({"type": "session", "version": 3, "id": "sess-1", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/"}).to_string()];
    let mut texts = vec![
        "After a long debate the team settled on PostgreSQL to keep all the records.".to_owned(),
    ];
    for i in 0..40 {
        texts.push(format!(
            "Weekly sync {i}: the slides for the offsite still need a cover image."
        ));
    }
    let mut parent = Value::Null;
    for (i, text) in texts.iter().enumerate() {
        let id = format!("{:08x}", i + 1);
        lines.push(
            json!({"type": "message", "id": id, "parentId": parent, "timestamp": "2026-01-01T00:00:01.000Z",
                   "message": {"role": "user", "content": text, "timestamp": 1_767_225_600_000i64 + i as i64}})
            .to_string(),
        );
        parent = json!(id);
    }
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

#[test]
fn embed_backfills_and_grep_finds_by_meaning() {
    let Some(model) = clawctx_test_support::embed_model::model_dir() else {
        return;
    };
    let model = model.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let session = dir.path().join("sess-1.jsonl");
    write_session(&session);
    let db = dir.path().join("lossless.db");
    let dbs = db.to_str().unwrap();
    let (code, _, err) = clawctx(
        dir.path(),
        "off",
        &[
            "lcm",
            "--db",
            dbs,
            "import",
            session.to_str().unwrap(),
            "--apply",
        ],
    );
    assert_eq!(code, 0, "{err}");

    // Without a model: `auto` is full-text (the question's words are not in the fact), and
    // `semantic` says how to get a model.
    let question = "Which database did we pick?";
    let (code, out, err) = clawctx(
        dir.path(),
        "off",
        &["lcm", "--db", dbs, "--json", "grep", question],
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v["hits"].as_array().unwrap().is_empty(), "{out}");
    let (code, _, err) = clawctx(
        dir.path(),
        "off",
        &["lcm", "--db", dbs, "grep", "--mode", "semantic", question],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("CLAWCTX_EMBED_MODEL") && err.contains("fetch-embed-model"),
        "{err}"
    );
    let (code, _, err) = clawctx(dir.path(), "off", &["lcm", "--db", dbs, "embed"]);
    assert_ne!(code, 0);
    assert!(err.contains("no embedding model"), "{err}");

    // The backfill embeds all 41 messages and reports it; run again, it has nothing to do.
    let (code, out, err) = clawctx(dir.path(), model, &["lcm", "--db", dbs, "--json", "embed"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["embedded"].as_u64(), v["total"].as_u64()),
        (Some(41), Some(41)),
        "{out}"
    );
    assert_eq!(v["embeddedNow"].as_u64(), Some(41), "{out}");
    assert!(
        v["model"].as_str().unwrap().contains("all-MiniLM-L6-v2"),
        "{out}"
    );
    let (code, out, err) = clawctx(dir.path(), model, &["lcm", "--db", dbs, "--json", "embed"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["embeddedNow"].as_u64(),
        Some(0),
        "{out}"
    );

    // With the model: the fact first, by meaning alone, fused, and by default.
    for mode in ["semantic", "hybrid", "auto"] {
        let (code, out, err) = clawctx(
            dir.path(),
            model,
            &[
                "lcm", "--db", dbs, "--json", "grep", "--mode", mode, "--limit", "3", question,
            ],
        );
        assert_eq!(code, 0, "{mode}: {err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["hits"][0]["id"], "msg_1", "{mode}: {out}");
        assert!(
            v["hits"][0]["snippet"]
                .as_str()
                .unwrap()
                .contains("PostgreSQL"),
            "{out}"
        );
    }
}

#[test]
fn doctor_says_whether_recall_is_hybrid_or_lexical() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = clawctx(
        dir.path(),
        "off",
        &["config", "set", "plugins.slots.contextEngine", "lossless"],
    );
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = clawctx(dir.path(), "off", &["doctor", "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let sem = &v["semanticRecall"];
    assert_eq!(sem["on"], false, "{sem}");
    assert!(
        sem["howToEnable"]
            .as_str()
            .unwrap()
            .contains("CLAWCTX_EMBED_MODEL"),
        "{sem}"
    );
    let (_, out, _) = clawctx(dir.path(), "off", &["doctor"]);
    assert!(out.contains("lexical only (no embedding model)"), "{out}");
    let (_, out, _) = clawctx(dir.path(), "/nonexistent/model", &["doctor", "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["semanticRecall"]["problem"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/model"),
        "{out}"
    );
    let Some(model) = clawctx_test_support::embed_model::model_dir() else {
        return;
    };
    let (_, out, _) = clawctx(dir.path(), model.to_str().unwrap(), &["doctor"]);
    assert!(out.contains("[ok] recall      hybrid"), "{out}");
}
