//! Recall over MCP with a real MCP client (issue #32): the official Python `mcp` package
//! (`tests/mcp/client.py`) against `clawctx mcp` over stdio and against a `clawctx gateway`'s
//! `/mcp` over streamable HTTP, on a lossless store prefilled by `clawctx replay` (messages and
//! summaries): every tool listed and called, the resources read, every tool schema checked with
//! Python's `jsonschema` and compiled by Ajv in strict mode (`tests/mcp/ajv_strict.mjs`; ajv is
//! installed with npm into `CLAWCTX_AJV_DIR`, else `$HOME/.cache/clawctx-ajv`), a missing,
//! unknown or mistyped argument answered with JSON-RPC `invalid_params` and other bad arguments
//! with MCP errors while the server keeps serving, `lcm_ingest` offered only with
//! `mcp.allowIngest`, and with a token set, HTTP without it refused. A PostgreSQL variant runs
//! the whole check on the same store migrated into PostgreSQL.
//!
//! The client runs in the Python of `CLAWCTX_MCP_PYTHON`, else the virtualenv `.ci/run` makes
//! (`$HOME/.cache/clawctx-mcp-venv`). Without it the tests skip with a message, except under
//! `CI=true`, where they fail. The PostgreSQL test needs `CLAWCTX_TEST_PG_URL` the same way.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// The word the recording repeats, so every mode of grep finds it.
const WORD: &str = "obsidian";
const TOKEN: &str = "mcp-test-token-8086";

/// The Python with the `mcp` package, or `None` (after saying why) outside CI.
fn python() -> Option<PathBuf> {
    let candidate = std::env::var_os("CLAWCTX_MCP_PYTHON")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache/clawctx-mcp-venv/bin/python"))
        })?;
    let ok = std::process::Command::new(&candidate)
        .args(["-c", "import mcp.client.stdio, mcp.client.streamable_http"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(candidate);
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!(
            "CI=true but {} cannot import the Python `mcp` package: .ci/run installs it \
             (or set CLAWCTX_MCP_PYTHON to a Python that has it)",
            candidate.display()
        );
    }
    eprintln!(
        "skipping: no Python with the `mcp` package at {} (set CLAWCTX_MCP_PYTHON)",
        candidate.display()
    );
    None
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py")
}

fn clawctx() -> &'static str {
    env!("CARGO_BIN_EXE_clawctx")
}

/// Runs a finished command, returning (code, stdout, stderr) and the line for messages.
async fn run(cmd: &mut Command, line: &str) -> (i32, String, String) {
    let out = tokio::time::timeout(Duration::from_secs(300), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("$ {line}\ndid not finish within 300 s"))
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn clawctx_ok(state: &Path, args: &[&str]) -> String {
    let mut cmd = Command::new(clawctx());
    cmd.arg("--state-dir")
        .arg(state)
        .args(args)
        .env_remove("CLAWCTX_LOG");
    let line = format!("clawctx --state-dir {} {}", state.display(), args.join(" "));
    let (code, out, err) = run(&mut cmd, &line).await;
    assert_eq!(code, 0, "$ {line}\n--- stdout\n{out}\n--- stderr\n{err}");
    out
}

/// The config: lossless with small compaction settings, so a short recording gets summaries.
fn write_config(state: &Path, extra: Value) {
    let mut config = json!({
        "plugins": {"slots": {"contextEngine": "lossless"},
                    "entries": {"lossless": {"config": {"freshTailCount": 8, "leafChunkTokens": 1200, "leafMinFanout": 4}}}}
    });
    if let (Some(c), Value::Object(e)) = (config.as_object_mut(), extra) {
        for (k, v) in e {
            c.insert(k, v);
        }
    }
    std::fs::create_dir_all(state).unwrap();
    std::fs::write(state.join("clawctx.json"), config.to_string()).unwrap();
}

/// Prefills the lossless store of `state` with `clawctx replay`: 60 turns about stored items,
/// every fifth one naming the word, through a small budget so older turns are summarized.
async fn prefill(state: &Path) {
    let mut lines = Vec::new();
    for i in 0..60 {
        let user = if i % 5 == 0 {
            format!("turn {i}: the {WORD} key number {i} is kept in drawer {} of cabinet {}; please remember where it went", i % 7, i % 3)
        } else {
            format!("turn {i}: notes about harbor logistics, crate {i}, shipment window {} and the berth schedule for week {}", i * 3, i % 4)
        };
        lines.push(json!({"role": "user", "content": user}).to_string());
        lines.push(
            json!({"role": "assistant", "content": format!("Noted turn {i}: I will keep that in mind for later questions about it.")})
                .to_string(),
        );
    }
    let file = state.join("recording.jsonl");
    std::fs::write(&file, lines.join("\n")).unwrap();
    clawctx_ok(
        state,
        &[
            "replay",
            file.to_str().unwrap(),
            "--engine",
            "lossless",
            "--budget",
            "1500",
        ],
    )
    .await;
    assert!(
        state.join("agents/main/lossless.db").exists(),
        "replay stored into the state dir's lossless store"
    );
}

/// Runs the Python client; returns its JSON line (asserting `ok`).
async fn client(python: &Path, args: &[&str]) -> Value {
    let mut cmd = Command::new(python);
    cmd.arg(script()).args(args).env_remove("CLAWCTX_LOG");
    let line = format!(
        "{} {} {}",
        python.display(),
        script().display(),
        args.join(" ")
    );
    let (code, out, err) = run(&mut cmd, &line).await;
    let last = out.lines().last().unwrap_or("");
    let v: Value = serde_json::from_str(last).unwrap_or_else(|e| {
        panic!("$ {line}\nexit {code}: no JSON ({e})\n--- stdout\n{out}\n--- stderr\n{err}")
    });
    assert!(
        code == 0 && v["ok"] == true,
        "$ {line}\nexit {code}\n--- stdout\n{out}\n--- stderr\n{err}"
    );
    v
}

/// The Ajv release the schema check installs (the TypeScript MCP SDK's validator).
const AJV_VERSION: &str = "8.20.0";

/// A directory with `node_modules/ajv` ([`AJV_VERSION`]): `CLAWCTX_AJV_DIR`, else
/// `$HOME/.cache/clawctx-ajv`, installed there with npm when missing (outside the repo). `None`
/// (after saying why) when node or npm is missing, outside CI.
fn ajv_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("CLAWCTX_AJV_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/clawctx-ajv"))
        })?;
    let installed = std::fs::read_to_string(dir.join("node_modules/ajv/package.json"))
        .is_ok_and(|p| p.contains(&format!("\"version\": \"{AJV_VERSION}\"")));
    if installed {
        return Some(dir);
    }
    let npm = std::process::Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(&dir)
        .arg(format!("ajv@{AJV_VERSION}"))
        .output();
    match npm {
        Ok(o) if o.status.success() => Some(dir),
        other => {
            let why = match other {
                Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
                Err(e) => e.to_string(),
            };
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!(
                    "CI=true but npm cannot install ajv@{AJV_VERSION} into {}: {why}",
                    dir.display()
                );
            }
            eprintln!(
                "skipping the Ajv check: npm cannot install ajv@{AJV_VERSION} into {}: {why}",
                dir.display()
            );
            None
        }
    }
}

/// Compiles every tool input schema the client saw (`seen["schemas"]`) with Ajv in strict
/// mode (`tests/mcp/ajv_strict.mjs`): stricter MCP clients refuse a tool whose schema does not.
async fn assert_ajv_strict_compiles(seen: &Value) {
    let Some(ajv) = ajv_dir() else {
        return;
    };
    let schemas = &seen["schemas"];
    assert!(
        schemas.as_object().is_some_and(|m| !m.is_empty()),
        "the client returns the schemas: {seen}"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("schemas.json");
    std::fs::write(&file, schemas.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/ajv_strict.mjs");
    let mut cmd = Command::new("node");
    cmd.arg(&script).arg(&ajv).arg(&file);
    let line = format!(
        "node {} {} {}",
        script.display(),
        ajv.display(),
        file.display()
    );
    let (code, out, err) = run(&mut cmd, &line).await;
    assert_eq!(
        code, 0,
        "every tool schema must compile in Ajv's strict mode\n$ {line}\n--- stdout\n{out}\n--- stderr\n{err}"
    );
}

fn assert_saw_everything(seen: &Value) {
    assert_eq!(seen["server"], "clawctx", "{seen}");
    assert!(seen["messages"].as_i64().unwrap() >= 100, "{seen}");
    for mode in ["full_text", "any_term", "regex"] {
        assert!(
            seen["grepHits"][mode].as_i64().unwrap() > 0,
            "{mode}: {seen}"
        );
    }
    assert!(
        seen["badCallsRefused"].as_i64().unwrap() >= 12,
        "every bad call was an MCP error: {seen}"
    );
}

#[tokio::test]
async fn the_python_mcp_client_over_stdio_calls_every_tool_and_reads_the_summaries() {
    let Some(python) = python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    write_config(state, json!({}));
    prefill(state).await;

    let state_arg = state.display().to_string();
    let seen = client(
        &python,
        &[
            "check",
            "--word",
            WORD,
            "--stdio",
            clawctx(),
            "--state-dir",
            &state_arg,
            "mcp",
        ],
    )
    .await;
    assert_saw_everything(&seen);
    assert_eq!(seen["session"], "agent:main:replay", "{seen}");
    assert!(
        seen["tools"].as_array().unwrap().len() == 5,
        "read-only: {seen}"
    );

    // mcp.allowIngest offers lcm_ingest; what it stores is searchable at once.
    write_config(state, json!({"mcp": {"allowIngest": true}}));
    let seen = client(
        &python,
        &[
            "check",
            "--word",
            WORD,
            "--expect-ingest",
            "--stdio",
            clawctx(),
            "--state-dir",
            &state_arg,
            "mcp",
        ],
    )
    .await;
    assert_eq!(seen["ingested"], 2, "{seen}");
    // Every tool's schema (lcm_ingest's too), in the validator stricter MCP clients use.
    assert_eq!(seen["schemas"].as_object().unwrap().len(), 6, "{seen}");
    assert_ajv_strict_compiles(&seen).await;
}

/// A `clawctx gateway` child and the URL it printed.
struct Gateway {
    child: tokio::process::Child,
    url: String,
}

async fn spawn_gateway(state: &Path) -> Gateway {
    let mut cmd = Command::new(clawctx());
    cmd.arg("--state-dir")
        .arg(state)
        .args(["gateway", "--port", "0"])
        .env_remove("CLAWCTX_LOG")
        .env_remove("CLAWCTX_GATEWAY_TOKEN")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    let n = tokio::time::timeout(Duration::from_secs(120), stdout.read_line(&mut first))
        .await
        .expect("the gateway prints its address within 120 s")
        .unwrap();
    assert!(n > 0, "the gateway printed no address");
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {first:?}"))
        .trim_end_matches('/')
        .to_owned();
    // Keep reading its stdout so it never blocks on a full pipe.
    tokio::spawn(async move {
        let mut sink = String::new();
        while stdout.read_line(&mut sink).await.is_ok_and(|n| n > 0) {
            sink.clear();
        }
    });
    Gateway { child, url }
}

#[tokio::test]
async fn the_python_mcp_client_over_http_needs_the_gateways_token() {
    let Some(python) = python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    write_config(state, json!({}));
    prefill(state).await;
    // A model the gateway never calls here (MCP reads the store), and the token.
    write_config(
        state,
        json!({
            "models": {"providers": {"mock": {"api": "openai-completions", "baseUrl": "http://127.0.0.1:9/v1",
                "models": [{"id": "m", "contextWindow": 16000, "maxTokens": 512}], "maxRetries": 0}}},
            "agents": {"defaults": {"model": {"primary": "mock/m"}}},
            "gateway": {"auth": {"token": TOKEN}}
        }),
    );
    let mut gw = spawn_gateway(state).await;
    let mcp = format!("{}/mcp", gw.url);

    // Without the token: 401 before the MCP server sees anything.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let http = reqwest::Client::new();
    let r = http
        .post(&mcp)
        .header("accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "{}", r.text().await.unwrap());
    let r = http
        .post(&mcp)
        .bearer_auth("wrong")
        .header("accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let refused = client(&python, &["refused", "--http", &mcp]).await;
    assert!(refused["refused"].is_string(), "{refused}");
    let refused = client(&python, &["refused", "--http", &mcp, "--token", "wrong"]).await;
    assert!(refused["refused"].is_string(), "{refused}");

    // With it: everything.
    let seen = client(
        &python,
        &["check", "--word", WORD, "--http", &mcp, "--token", TOKEN],
    )
    .await;
    assert_saw_everything(&seen);
    gw.child.start_kill().unwrap();
    let _ = gw.child.wait().await;
}

/// A gateway whose engine is not lossless has no store to serve over MCP: `/mcp` answers 409
/// naming the engine in charge, not a bare 500.
#[tokio::test]
async fn mcp_on_a_gateway_without_lossless_says_which_engine_is_in_charge() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    write_config(
        state,
        json!({
            "plugins": {"slots": {"contextEngine": "legacy"}},
            "models": {"providers": {"mock": {"api": "openai-completions", "baseUrl": "http://127.0.0.1:9/v1",
                "models": [{"id": "m", "contextWindow": 16000, "maxTokens": 512}], "maxRetries": 0}}},
            "agents": {"defaults": {"model": {"primary": "mock/m"}}}
        }),
    );
    let mut gw = spawn_gateway(state).await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let r = reqwest::Client::new()
        .post(format!("{}/mcp", gw.url))
        .header("accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body = r.text().await.unwrap();
    assert_eq!(status, 409, "{body}");
    let message = serde_json::from_str::<Value>(&body).unwrap()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains("lossless") && message.contains("\"legacy\""),
        "the error names what is needed and the engine in charge: {body}"
    );
    gw.child.start_kill().unwrap();
    let _ = gw.child.wait().await;
}

#[tokio::test]
async fn the_python_mcp_client_reads_a_postgresql_store() {
    let Some(python) = python() else {
        return;
    };
    let Some(db) = clawctx_test_support::pg::test_database("mcp_stdio") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    write_config(state, json!({}));
    prefill(state).await;
    // The same store, copied into PostgreSQL, served from there.
    let mut cmd = Command::new(clawctx());
    cmd.arg("--state-dir")
        .arg(state)
        .args(["lcm", "migrate", "--to", "env:MCP_TEST_PG", "--apply"])
        .env("MCP_TEST_PG", &db.url);
    let (code, out, err) = run(&mut cmd, "clawctx lcm migrate --to env:MCP_TEST_PG --apply").await;
    assert_eq!(code, 0, "--- stdout\n{out}\n--- stderr\n{err}");
    std::fs::remove_file(state.join("agents/main/lossless.db")).unwrap();

    // The client starts the server with a minimal environment, so the URL goes on the
    // command line (a throwaway test database).
    let state_arg = state.display().to_string();
    let db_arg = db.url.clone();
    let seen = client(
        &python,
        &[
            "check",
            "--word",
            WORD,
            "--stdio",
            clawctx(),
            "--state-dir",
            &state_arg,
            "mcp",
            "--db",
            &db_arg,
        ],
    )
    .await;
    assert_saw_everything(&seen);
    assert!(
        !state.join("agents/main/lossless.db").exists(),
        "the server read PostgreSQL, not a new SQLite file"
    );
}
