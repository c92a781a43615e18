//! `clawctx lcm …` against a real lossless database built by `lcm import`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;

use common::clawctx;
use serde_json::{json, Value};

fn write_session(path: &Path, turns: usize) {
    let mut lines = vec![json!({"type": "session", "version": 3, "id": "sess-1", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/"}).to_string()];
    let mut parent = Value::Null;
    for i in 0..turns {
        for (role, text) in [
            (
                "user",
                format!(
                    "turn {i}: note the order number ORD-{} for Berlin",
                    5000 + i
                ),
            ),
            (
                "assistant",
                format!("Recorded ORD-{} and scheduled the delivery.", 5000 + i),
            ),
        ] {
            let id = format!("{:08x}", lines.len());
            let content = if role == "user" {
                json!(text)
            } else {
                json!([{"type": "text", "text": text}])
            };
            lines.push(
                json!({"type": "message", "id": id, "parentId": parent, "timestamp": "2026-01-01T00:00:01.000Z",
                       "message": {"role": role, "content": content, "timestamp": 1_767_225_600_000i64 + lines.len() as i64}})
                .to_string(),
            );
            parent = json!(id);
        }
    }
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

#[test]
fn import_dry_run_then_apply_then_grep_describe_status_doctor() {
    let dir = tempfile::tempdir().unwrap();
    let session = dir.path().join("sess-1.jsonl");
    write_session(&session, 30);
    let db = dir.path().join("lossless.db");
    let dbs = db.to_str().unwrap();

    let (code, _out, err) = clawctx(dir.path(), &["lcm", "--db", dbs, "status"]);
    assert_ne!(code, 0);
    assert!(err.contains("no lossless database"), "{err}");

    let (code, out, err) = clawctx(
        dir.path(),
        &[
            "lcm",
            "--db",
            dbs,
            "import",
            session.to_str().unwrap(),
            "--apply",
        ],
    );
    assert_eq!(code, 0, "{out}\n{err}");

    let (code, out, err) = clawctx(
        dir.path(),
        &["lcm", "--db", dbs, "import", session.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("dry run"), "{err}");
    let backups = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains(".bak-")
        })
        .count();
    assert_eq!(backups, 0, "a dry run writes no backup");

    let (code, out, err) = clawctx(
        dir.path(),
        &[
            "lcm",
            "--db",
            dbs,
            "import",
            session.to_str().unwrap(),
            "--apply",
        ],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("backup written to"),
        "--apply on an existing database backs it up first: {err}"
    );

    let (code, out, err) = clawctx(dir.path(), &["lcm", "--db", dbs, "grep", "ORD-5007"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.lines().next().is_some_and(|l| l.contains("ORD-5007")),
        "{out}"
    );

    let (_, out, _) = clawctx(
        dir.path(),
        &[
            "lcm",
            "--db",
            dbs,
            "--json",
            "grep",
            "ORD-5007",
            "--session",
            "agent:main:main",
        ],
    );
    let j: Value = serde_json::from_str(&out).unwrap();
    let first = j["hits"][0]["id"].as_str().unwrap().to_owned();
    let (code, out, _) = clawctx(dir.path(), &["lcm", "--db", dbs, "describe", &first]);
    assert_eq!(code, 0);
    assert!(out.contains("ORD-5007"), "{out}");

    let (_, out, _) = clawctx(dir.path(), &["lcm", "--db", dbs, "grep", "foo\" OR ("]);
    assert!(
        out.contains("no matches"),
        "model-style FTS syntax never errors: {out}"
    );

    let (code, out, _) = clawctx(dir.path(), &["lcm", "--db", dbs, "status"]);
    assert_eq!(code, 0);
    let status: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        status["messages"], 60,
        "imported once, idempotent on the second apply: {status:#}"
    );
    let (code, out, _) = clawctx(dir.path(), &["lcm", "--db", dbs, "doctor"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["ok"], true);
}

#[test]
fn grep_any_mode_and_prune_dry_run_then_apply() {
    let dir = tempfile::tempdir().unwrap();
    let session = dir.path().join("sess-1.jsonl");
    write_session(&session, 30);
    let db = dir.path().join("lossless.db");
    let dbs = db.to_str().unwrap();
    let (code, out, err) = clawctx(
        dir.path(),
        &[
            "lcm",
            "--db",
            dbs,
            "import",
            session.to_str().unwrap(),
            "--apply",
        ],
    );
    assert_eq!(code, 0, "{out}\n{err}");

    // A whole question finds the turn in any-term mode; the AND mode finds nothing for it.
    let q = "Which order number was noted for Berlin in turn 12?";
    let (code, out, err) = clawctx(
        dir.path(),
        &["lcm", "--db", dbs, "--json", "grep", "--mode", "any", q],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["hits"][0]["snippet"]
            .as_str()
            .unwrap_or("")
            .contains("turn 12"),
        "{out}"
    );
    let (_, out, _) = clawctx(dir.path(), &["lcm", "--db", dbs, "--json", "grep", q]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["hits"].as_array().map(Vec::len), Some(0), "{out}");

    // Nothing large in this session: prune reports no candidates, dry run by default.
    let (code, out, err) = clawctx(
        dir.path(),
        &["lcm", "--db", dbs, "prune", "--older-than-days", "0"],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["dryRun"].as_bool(), v["candidates"].as_u64()),
        (Some(true), Some(0)),
        "{out}"
    );
    assert!(err.contains("dry run"), "{err}");
    let (code, out, err) = clawctx(
        dir.path(),
        &[
            "lcm",
            "--db",
            dbs,
            "prune",
            "--older-than-days",
            "0",
            "--apply",
        ],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("backup written to"), "{err}");
    let (code, out, err) = clawctx(
        dir.path(),
        &["lcm", "--db", dbs, "prune", "--older-than-days", "-1"],
    );
    assert_ne!(code, 0, "a negative age is refused: {out}");
    assert!(err.contains("older-than-days"), "{err}");
}
