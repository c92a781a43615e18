//! `clawctx lcm migrate --to postgres://…` and the `lcm` commands on a PostgreSQL store, run
//! as a user runs them: a dry run, the copy, a refused second copy, and nowhere the password.
//!
//! Needs `CLAWCTX_TEST_PG_URL` (skips without it, except under `CI=true`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use clawctx_lossless::pg::connect::PgTarget;
use clawctx_test_support::pg::test_database;
use serde_json::{json, Value};

/// Runs `clawctx args…` with `state` as its state directory and `env` set: (exit code,
/// stdout, stderr).
fn clawctx(state: &Path, env: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args(args)
        .env("CLAWCTX_STATE_DIR", state)
        .envs(env.iter().copied())
        .output()
        .expect("running clawctx");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An OpenClaw session file of `turns` user/assistant pairs.
fn write_session(path: &Path, turns: usize) {
    let mut lines = vec![json!({"type": "session", "version": 3, "id": "sess-1",
        "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/"})
    .to_string()];
    let mut parent = Value::Null;
    for i in 0..turns {
        for role in ["user", "assistant"] {
            let id = format!("{:08x}", lines.len());
            let text = format!("turn {i} {role}: order ORD-{} ships to Lisbon", 7000 + i);
            let content = if role == "user" {
                json!(text)
            } else {
                json!([{"type": "text", "text": text}])
            };
            lines.push(
                json!({"type": "message", "id": id, "parentId": parent,
                       "timestamp": "2026-01-01T00:00:01.000Z",
                       "message": {"role": role, "content": content,
                                   "timestamp": 1_767_225_600_000i64 + lines.len() as i64}})
                .to_string(),
            );
            parent = json!(id);
        }
    }
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

#[test]
fn lcm_migrate_dry_run_apply_refusal_and_commands_on_postgres() {
    let Some(db) = test_database("cli lcm migrate") else {
        return;
    };
    let password = PgTarget::parse(&db.url)
        .unwrap()
        .config()
        .get_password()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .filter(|p| !p.is_empty());
    let shown = PgTarget::parse(&db.url).unwrap().redacted();
    let no_secret = |out: &str, err: &str| {
        if let Some(pw) = &password {
            assert!(
                !out.contains(pw.as_str()) && !err.contains(pw.as_str()),
                "the password was printed:\n{out}\n{err}"
            );
        }
    };

    let dir = tempfile::tempdir().unwrap();
    let session = dir.path().join("sess-1.jsonl");
    write_session(&session, 25);
    let sqlite = dir.path().join("lossless.db");
    let dbs = sqlite.to_str().unwrap();
    let (code, out, err) = clawctx(
        dir.path(),
        &[],
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

    // Dry run (the default): counts, nothing written.
    let (code, out, err) = clawctx(
        dir.path(),
        &[],
        &["lcm", "--db", dbs, "migrate", "--to", &db.url],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    no_secret(&out, &err);
    assert!(out.starts_with("dry run:"), "{out}");
    assert!(out.contains(&shown), "the target is named, redacted: {out}");
    let messages_line = out.lines().find(|l| l.starts_with("messages ")).unwrap();
    assert!(
        messages_line.split_whitespace().collect::<Vec<_>>() == ["messages", "50", "0", "-"],
        "{out}"
    );
    assert!(err.contains("nothing was written"), "{err}");
    assert_eq!(db.scalar("SELECT count(*) FROM messages"), 0);
    assert_eq!(db.scalar("SELECT count(*) FROM conversations"), 0);

    // The copy, the URL read from the environment; JSON report.
    let env = [("LCM_TARGET_URL", db.url.as_str())];
    let (code, out, err) = clawctx(
        dir.path(),
        &env,
        &[
            "lcm",
            "--db",
            dbs,
            "migrate",
            "--to",
            "env:LCM_TARGET_URL",
            "--apply",
        ],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    no_secret(&out, &err);
    assert!(out.starts_with("migrated"), "{out}");
    let tables = clawctx_lossless::migrate::TABLES;
    let rows: Vec<&str> = out.lines().skip(2).take(tables.len()).collect();
    for (line, table) in rows.iter().zip(tables) {
        assert!(line.starts_with(table), "table {table} in its place: {out}");
        assert!(line.ends_with("yes"), "every table verified: {out}");
    }
    assert_eq!(db.scalar("SELECT count(*) FROM messages"), 50);
    assert_eq!(db.scalar("SELECT count(*) FROM conversations"), 1);

    // A second copy into the now non-empty target is refused and fails the command.
    let (code, out, err) = clawctx(
        dir.path(),
        &[],
        &[
            "lcm", "--db", dbs, "migrate", "--to", &db.url, "--apply", "--json",
        ],
    );
    assert_ne!(code, 0, "{out}\n{err}");
    no_secret(&out, &err);
    assert!(
        err.contains("already holds") && err.contains(&shown),
        "{err}"
    );
    assert_eq!(db.scalar("SELECT count(*) FROM messages"), 50);

    // An unset variable and a non-URL target are clear errors.
    let (code, _, err) = clawctx(
        dir.path(),
        &[],
        &[
            "lcm",
            "--db",
            dbs,
            "migrate",
            "--to",
            "env:LCM_NOT_SET_ANYWHERE",
        ],
    );
    assert_ne!(code, 0);
    assert!(err.contains("LCM_NOT_SET_ANYWHERE is not set"), "{err}");
    let (code, _, err) = clawctx(
        dir.path(),
        &[],
        &["lcm", "--db", dbs, "migrate", "--to", dbs],
    );
    assert_ne!(code, 0);
    assert!(err.contains("postgres:// URL"), "{err}");

    // The lcm commands on the PostgreSQL store, by URL (`--database`) and by variable.
    let (code, out, err) = clawctx(
        dir.path(),
        &env,
        &["lcm", "--db", "env:LCM_TARGET_URL", "describe", "msg_3"],
    );
    no_secret(&out, &err);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("ORD-7001"), "{out}");
    let (code, out, err) = clawctx(
        dir.path(),
        &[],
        &["lcm", "grep", "ORD-7007", "--database", &db.url],
    );
    no_secret(&out, &err);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.lines().next().is_some_and(|l| l.contains("ORD-7007")),
        "{out}"
    );
    let (code, out, err) = clawctx(dir.path(), &[], &["lcm", "status", "--database", &db.url]);
    no_secret(&out, &err);
    assert_eq!(code, 0, "{out}\n{err}");
    let status: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (
            status["messages"].as_i64(),
            status["conversations"].as_i64()
        ),
        (Some(50), Some(1)),
        "{status:#}"
    );
    let (code, out, err) = clawctx(dir.path(), &[], &["lcm", "doctor", "--database", &db.url]);
    no_secret(&out, &err);
    assert_eq!(code, 0, "{out}\n{err}");
    let doctor: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doctor["ok"], true, "{doctor:#}");
    // migrate from a PostgreSQL store is refused.
    let (code, out, err) = clawctx(
        dir.path(),
        &[],
        &["lcm", "--db", &db.url, "migrate", "--to", &db.url],
    );
    assert_ne!(code, 0);
    no_secret(&out, &err);
    assert!(err.contains("copies a SQLite store"), "{err}");
}
