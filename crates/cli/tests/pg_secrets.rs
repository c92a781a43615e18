//! The PostgreSQL password never leaves the config: everything a run prints (logs at debug
//! level, `doctor` and `doctor --json`, `lcm` errors, the gateway's answers, its dashboard's
//! config view, its metrics) is searched for it, with the database reachable and not.
//!
//! Needs `CLAWCTX_TEST_PG_URL` (its password is the secret looked for; a fresh database is made
//! for the test); skips without it, except under `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use clawctx_test_support::pg::test_database;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// The password of a `postgres://user:password@…` URL.
fn password_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let userinfo = rest.split_once('@').map_or("", |(u, _)| u);
    userinfo
        .split_once(':')
        .map(|(_, p)| p.to_owned())
        .unwrap_or_default()
}

fn write_config(state: &Path, server: &MockServer, database: &str) {
    let config = json!({
        "models": {"providers": {"mock": {"api": "openai-completions", "baseUrl": format!("{}/v1", server.uri()),
            "models": [{"id": "test-model", "contextWindow": 16000, "maxTokens": 256}], "maxRetries": 0}}},
        "agents": {"defaults": {"model": {"primary": "mock/test-model"}}},
        "plugins": {"slots": {"contextEngine": "lossless"},
                    "entries": {"lossless": {"config": {"database": database}}}}
    });
    std::fs::write(state.join("clawctx.json"), config.to_string()).unwrap();
}

/// Runs `clawctx` with debug logs; stdout and stderr together.
async fn clawctx(state: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args(["--state-dir", &state.display().to_string()])
        .args(args)
        .env("CLAWCTX_LOG", "debug")
        .env_remove("OPENAI_API_KEY")
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), out)
        .await
        .unwrap()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn assert_clean(what: &str, text: &str, secret: &str) {
    assert!(
        !text.contains(secret),
        "{what} shows the database password:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_password_is_in_no_output() {
    let Some(db) = test_database("secrets") else {
        return;
    };
    let secret = password_of(&db.url);
    assert!(
        secret.len() >= 8,
        "the test server's URL must carry a password to look for"
    );
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-mock",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "noted"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}
        })))
        .mount(&server)
        .await;

    // Unreachable: the same credentials on a port nothing listens on.
    let dead = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dead_url = format!("postgres://clawctx:{secret}@127.0.0.1:{closed}/nowhere");
    write_config(dead.path(), &server, &dead_url);
    let doctor = clawctx(dead.path(), &["doctor"]).await;
    assert!(
        doctor.contains(&format!("127.0.0.1:{closed}")),
        "doctor names host and port:\n{doctor}"
    );
    assert_clean("doctor (database down)", &doctor, &secret);
    assert_clean(
        "doctor --json (database down)",
        &clawctx(dead.path(), &["doctor", "--json"]).await,
        &secret,
    );
    let status = clawctx(dead.path(), &["lcm", "status"]).await;
    assert!(
        status.contains("cannot reach"),
        "lcm status says why:\n{status}"
    );
    assert_clean("lcm status (database down)", &status, &secret);

    // Reachable: a gateway serving a turn on it, its dashboard and metrics, then its logs.
    let live = tempfile::tempdir().unwrap();
    write_config(live.path(), &server, &db.url);
    assert_clean(
        "doctor --json",
        &clawctx(live.path(), &["doctor", "--json"]).await,
        &secret,
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args([
            "--state-dir",
            &live.path().display().to_string(),
            "gateway",
            "--port",
            "0",
        ])
        .env("CLAWCTX_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    tokio::time::timeout(Duration::from_secs(120), stdout.read_line(&mut first))
        .await
        .unwrap()
        .unwrap();
    let base = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {first:?}"))
        .trim_end_matches('/')
        .to_owned();
    let http = reqwest::Client::new();
    let mut seen = String::new();
    let r = http
        .post(format!("{base}/v1/chat/completions"))
        .header("x-clawctx-session", "agent:main:secrets")
        .json(&json!({"messages": [{"role": "user", "content": "hello"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    seen.push_str(&r.text().await.unwrap());
    for route in [
        "/v1/dashboard/engines",
        "/v1/dashboard/sessions",
        "/metrics",
        "/v1/sessions",
    ] {
        let r = http.get(format!("{base}{route}")).send().await.unwrap();
        assert!(r.status().is_success(), "{route}: {}", r.status());
        seen.push_str(&r.text().await.unwrap());
    }
    // A recall call with a bad id: an error body from the store.
    let r = http
        .post(format!("{base}/v1/engine/lcm_describe"))
        .json(&json!({"sessionKey": "agent:main:secrets", "id": "msg_999999"}))
        .send()
        .await
        .unwrap();
    seen.push_str(&r.text().await.unwrap());
    let engines: Value = http
        .get(format!("{base}/v1/dashboard/engines"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        engines.to_string().contains("127.0.0.1"),
        "the config view still shows where the store is"
    );
    assert_clean("the gateway's answers", &seen, &secret);
    let pid = child.id().unwrap().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(60), child.wait()).await;
    let mut logs = String::new();
    let _ = stdout.read_to_string(&mut logs).await;
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut logs).await;
    }
    assert!(!logs.is_empty(), "the gateway logged at debug level");
    assert_clean("the gateway's logs", &logs, &secret);
}
