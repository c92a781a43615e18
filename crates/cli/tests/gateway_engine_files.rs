//! Which files an engine-API caller may name (issue #39 item 1), through the `clawctx gateway`
//! process with the lossless engine: `bootstrap` imports the session's own transcript from the
//! state dir, and refuses with 403 `path_not_allowed` (naming the field and the path, nothing
//! imported) `/etc/passwd`, a JSONL transcript outside the state dir, a path that climbs out of
//! the state dir with `..`, a link in the state dir that leads outside, and a relative name that
//! is not the call's own session key. A directory listed in
//! `gateway.engineApi.transcriptRoots` (the config file) opens its files to `bootstrap`. The
//! other calls that carry a file pass on only what the caller may name and still answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const OWN: &str = "agent:main:main";
const PROBE: &str = "agent:main:probe";

fn write_config(state: &Path, server: &MockServer, extra: Value) {
    let mut config = json!({
        "models": {"providers": {"mock": {"api": "openai-completions", "baseUrl": format!("{}/v1", server.uri()),
            "models": [{"id": "m", "contextWindow": 16000, "maxTokens": 256}], "maxRetries": 0}}},
        "agents": {"defaults": {"model": {"primary": "mock/m"}}}
    });
    if let (Some(c), Value::Object(e)) = (config.as_object_mut(), extra) {
        c.extend(e);
    }
    std::fs::write(state.join("clawctx.json"), config.to_string()).unwrap();
}

/// A gateway child process and the URL it printed.
struct Gateway {
    _child: Child,
    url: String,
    http: reqwest::Client,
}

async fn spawn_gateway(state: &Path) -> Gateway {
    let mut child = Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args(["gateway", "--port", "0"])
        .env("CLAWCTX_STATE_DIR", state)
        .env_remove("CLAWCTX_LOG")
        .env_remove("CLAWCTX_GATEWAY_TOKEN")
        .env_remove("CLAWCTX_GATEWAY_PORT")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    let read = tokio::time::timeout(Duration::from_secs(120), stdout.read_line(&mut first)).await;
    assert!(
        matches!(read, Ok(Ok(n)) if n > 0),
        "the gateway printed no address (its stderr is above)"
    );
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {first:?}"))
        .to_owned();
    tokio::spawn(async move {
        let mut line = String::new();
        while matches!(stdout.read_line(&mut line).await, Ok(n) if n > 0) {
            line.clear();
        }
    });
    Gateway {
        _child: child,
        url,
        http: reqwest::Client::new(),
    }
}

impl Gateway {
    async fn post(&self, route: &str, body: Value) -> (u16, Value) {
        let r = self
            .http
            .post(format!("{}{route}", self.url))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn bootstrap(&self, key: &str, id: &str, file: &str) -> (u16, Value) {
        self.post(
            "/v1/engine/bootstrap",
            json!({"sessionId": id, "sessionKey": key, "sessionFile": file}),
        )
        .await
    }

    /// What `assemble` gives back for `key` (no messages of the caller's), as text.
    async fn assembled(&self, key: &str) -> String {
        let (status, body) = self
            .post(
                "/v1/engine/assemble",
                json!({"sessionId": "probe-1", "sessionKey": key, "messages": [], "tokenBudget": 8000}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body.to_string()
    }
}

/// A 403 `path_not_allowed` on `sessionFile` naming `path`; its message.
fn refused((status, body): (u16, Value), path: &str) -> String {
    assert_eq!(status, 403, "{path}: {body}");
    let e = &body["error"];
    assert_eq!(e["code"], "path_not_allowed", "{body}");
    assert_eq!(e["param"], "sessionFile", "{body}");
    let message = e["message"].as_str().unwrap().to_owned();
    assert!(message.contains(path), "the refusal names the path: {body}");
    assert!(
        message.contains("gateway.engineApi.transcriptRoots"),
        "and says how to allow one: {body}"
    );
    message
}

/// The stored session of `key` in `state`: its id and its transcript.
fn stored(state: &Path, key: &str) -> (String, PathBuf) {
    let map: Value = serde_json::from_str(
        &std::fs::read_to_string(state.join("agents/main/sessions/sessions.json")).unwrap(),
    )
    .unwrap();
    let entry = &map[key];
    let file = PathBuf::from(entry["sessionFile"].as_str().unwrap());
    assert!(file.is_file(), "{}", file.display());
    (entry["sessionId"].as_str().unwrap().to_owned(), file)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_reads_the_sessions_own_transcript_and_refuses_any_other_file() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Noted."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22}
        })))
        .mount(&server)
        .await;
    // A session with a turn, made on legacy (the lossless store has nothing of it yet).
    let state = tempfile::tempdir().unwrap();
    write_config(state.path(), &server, json!({}));
    let run = common::run(
        state.path(),
        &["run", "remember that the vault code is 7719", "--json"],
    );
    assert_eq!(run.code, 0, "{run}");
    let (own_id, own_file) = stored(state.path(), OWN);
    // A transcript outside the state dir, and a link to it inside.
    let outside = tempfile::tempdir().unwrap();
    let foreign = outside.path().join("foreign.jsonl");
    std::fs::write(
        &foreign,
        std::fs::read_to_string(&own_file)
            .unwrap()
            .replace("vault code is 7719", "launch phrase is heliotrope"),
    )
    .unwrap();
    let link = own_file.with_file_name("link.jsonl");
    std::os::unix::fs::symlink(&foreign, &link).unwrap();

    write_config(
        state.path(),
        &server,
        json!({"plugins": {"slots": {"contextEngine": "lossless"}}}),
    );
    let gw = spawn_gateway(state.path()).await;

    let passwd = "/etc/passwd";
    let m = refused(gw.bootstrap(PROBE, "p1", passwd).await, passwd);
    assert!(m.contains("the gateway stores no session"), "{m}");
    let foreign_s = foreign.to_str().unwrap();
    refused(gw.bootstrap(PROBE, "p1", foreign_s).await, foreign_s);
    let climbing = format!(
        "{}/../../../../../../../../..{}",
        own_file.parent().unwrap().display(),
        foreign.display()
    );
    refused(gw.bootstrap(OWN, &own_id, &climbing).await, &climbing);
    let link_s = link.to_str().unwrap();
    let m = refused(gw.bootstrap(OWN, &own_id, link_s).await, link_s);
    assert!(m.contains("it leads to"), "{m}");
    assert!(
        m.contains(own_file.to_str().unwrap()),
        "names the session's own transcript: {m}"
    );
    refused(
        gw.bootstrap(PROBE, "p1", "../foreign.jsonl").await,
        "../foreign.jsonl",
    );
    // The session key as a marker (what OpenClaw 2026.8+ sends) is not a path: nothing to read.
    let (status, body) = gw.bootstrap(PROBE, "p1", PROBE).await;
    assert_eq!(status, 200, "{body}");

    // Nothing of the refused files reached the store.
    for key in [PROBE, OWN] {
        let text = gw.assembled(key).await;
        assert!(
            !text.contains("heliotrope") && !text.contains("root:"),
            "{text}"
        );
    }

    // The session's own transcript is read.
    let (status, r) = gw.bootstrap(OWN, &own_id, own_file.to_str().unwrap()).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["bootstrapped"], true, "{r}");
    assert!(r["importedMessages"].as_u64().unwrap() >= 2, "{r}");
    assert!(gw.assembled(OWN).await.contains("7719"));

    // The other calls that carry a file still answer; what they may not name is not passed on.
    for (route, body) in [
        (
            "/v1/engine/maintain",
            json!({"sessionId": own_id, "sessionKey": OWN, "sessionFile": passwd}),
        ),
        (
            "/v1/engine/afterTurn",
            json!({"sessionId": own_id, "sessionKey": OWN, "sessionFile": passwd,
                   "messages": [], "prePromptMessageCount": 0,
                   "runtimeContext": {"sessionFile": foreign_s}}),
        ),
    ] {
        let (status, body) = gw.post(route, body).await;
        assert_eq!(status, 200, "{route}: {body}");
    }
    drop(gw);

    // A root the operator lists opens its files to bootstrap.
    let root = outside.path().to_str().unwrap();
    write_config(
        state.path(),
        &server,
        json!({"plugins": {"slots": {"contextEngine": "lossless"}},
               "gateway": {"engineApi": {"transcriptRoots": [root]}}}),
    );
    let gw = spawn_gateway(state.path()).await;
    let (status, r) = gw.bootstrap(PROBE, "p2", foreign_s).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["bootstrapped"], true, "{r}");
    assert!(gw.assembled(PROBE).await.contains("heliotrope"));
    let m = refused(
        gw.bootstrap("agent:main:probe-2", "p3", passwd).await,
        passwd,
    );
    assert!(
        m.contains(
            std::fs::canonicalize(outside.path())
                .unwrap()
                .to_str()
                .unwrap()
        ),
        "names the roots: {m}"
    );
}
