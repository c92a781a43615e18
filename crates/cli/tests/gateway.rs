//! `clawctx gateway` as an operator runs it: a child process on loopback against a mock model
//! server (also on loopback), the refusal to bind off loopback without a token, the refusal of
//! a second gateway on the same state dir (naming the first one's pid), `gateway status`, and
//! SIGTERM: an in-flight request completes, the process exits 0 and frees the state dir. A failing test prints the
//! command with its output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::Run;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use wiremock::matchers::{body_partial_json, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn command(state: &Path, args: &[&str]) -> (Command, String) {
    let mut full = vec!["--state-dir".to_owned(), state.display().to_string()];
    full.extend(args.iter().map(|a| (*a).to_owned()));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clawctx"));
    cmd.args(&full)
        .env_remove("CLAWCTX_LOG")
        .env_remove("CLAWCTX_GATEWAY_TOKEN")
        .env_remove("CLAWCTX_GATEWAY_PORT")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_MODEL")
        // The token of the test whose config names this variable (gateway.auth.tokenEnv).
        .env("GW_TEST_TOKEN", "test-token-5150")
        .kill_on_drop(true);
    (cmd, format!("clawctx {}", full.join(" ")))
}

async fn clawctx(state: &Path, args: &[&str]) -> Run {
    let (mut cmd, line) = command(state, args);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("clawctx finishes")
        .unwrap();
    Run {
        cmd: line,
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A gateway child process and the URL it printed.
struct Child_ {
    child: Child,
    url: String,
    cmd: String,
    stdout: BufReader<tokio::process::ChildStdout>,
}

async fn spawn_gateway(state: &Path, extra: &[&str]) -> Child_ {
    let mut args = vec!["gateway", "--port", "0"];
    args.extend_from_slice(extra);
    let (mut cmd, line) = command(state, &args);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    let read = tokio::time::timeout(Duration::from_secs(120), stdout.read_line(&mut first)).await;
    if !matches!(read, Ok(Ok(n)) if n > 0) {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), e.read_to_string(&mut err)).await;
        }
        panic!("$ {line}\nthe gateway printed no address\n--- stderr\n{err}");
    }
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {first:?}"))
        .to_owned();
    Child_ {
        child,
        url,
        cmd: line,
        stdout,
    }
}

impl Child_ {
    fn pid(&self) -> u32 {
        self.child.id().unwrap()
    }

    fn sigterm(&self) {
        let ok = std::process::Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(ok.success(), "kill -TERM failed");
    }

    /// Waits (bounded) for the exit; returns the code and the rest of the output.
    async fn wait(mut self) -> (i32, String) {
        let status = tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("$ {}\ndid not exit within 60 s of SIGTERM", self.cmd))
            .unwrap();
        let mut rest = String::new();
        let _ = self.stdout.read_to_string(&mut rest).await;
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut rest).await;
        }
        (status.code().unwrap_or(-1), rest)
    }
}

async fn write_config(state: &Path, server: &MockServer, extra: Value) {
    let mut config = json!({
        "models": {"providers": {"mock": {"api": "openai-completions", "baseUrl": format!("{}/v1", server.uri()),
            "models": [{"id": "test-model", "contextWindow": 16000, "maxTokens": 512}], "maxRetries": 0}}},
        "agents": {"defaults": {"model": {"primary": "mock/test-model"}}}
    });
    if let (Some(c), Value::Object(e)) = (config.as_object_mut(), extra) {
        c.extend(e);
    }
    std::fs::write(state.join("clawctx.json"), config.to_string()).unwrap();
}

#[tokio::test]
async fn off_loopback_without_a_token_refuses_to_start() {
    let server = MockServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &server, json!({})).await;
    let r = clawctx(dir.path(), &["gateway", "--bind", "lan", "--port", "0"]).await;
    assert_ne!(r.code, 0, "{r}");
    assert!(
        r.stderr
            .contains("refusing to bind gateway to 0.0.0.0:0 without auth"),
        "{r}"
    );
    assert!(
        r.stderr.contains("gateway.auth.token"),
        "the refusal says what to set: {r}"
    );
    write_config(dir.path(), &server, json!({"gateway": {"bind": "lan"}})).await;
    let r = clawctx(dir.path(), &["gateway", "--port", "0"]).await;
    assert!(
        r.code != 0 && r.stderr.contains("without auth"),
        "gateway.bind from the config is checked too: {r}"
    );
}

#[tokio::test]
async fn a_second_gateway_on_one_state_dir_is_refused_status_reports_and_sigterm_exits_zero() {
    let server = MockServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &server, json!({})).await;

    let r = clawctx(dir.path(), &["gateway", "status"]).await;
    assert_eq!(r.code, 3, "not running: {r}");
    assert!(r.stdout.contains("no gateway is running"), "{r}");

    let first = spawn_gateway(dir.path(), &[]).await;
    let health: Value = reqwest::get(format!("{}/healthz", first.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["pid"], first.pid());

    let second = clawctx(dir.path(), &["gateway", "--port", "0"]).await;
    assert_ne!(second.code, 0, "{second}");
    assert!(
        second
            .stderr
            .contains(&format!("another clawctx gateway (pid {}", first.pid()))
            && second.stderr.contains(&first.url),
        "the refusal names the running gateway: {second}"
    );

    let r = clawctx(dir.path(), &["gateway", "status", "--json"]).await;
    assert_eq!(r.code, 0, "{r}");
    let s: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r}"));
    assert_eq!(s["running"], true, "{r}");
    assert_eq!(s["healthy"], true, "{r}");
    assert_eq!(s["pid"], first.pid(), "{r}");
    assert_eq!(s["url"], first.url, "{r}");

    first.sigterm();
    let (code, rest) = first.wait().await;
    assert_eq!(code, 0, "SIGTERM is a clean stop:\n{rest}");
    assert!(rest.contains("clawctx gateway stopped"), "{rest}");
    let r = clawctx(dir.path(), &["gateway", "status"]).await;
    assert_eq!(r.code, 3, "the lock went with the process: {r}");

    // The state dir is free again.
    let again = spawn_gateway(dir.path(), &[]).await;
    again.sigterm();
    assert_eq!(again.wait().await.0, 0);
}

/// A model that answers after `delay`, streaming or not.
async fn slow_model(reply: &str, delay: Duration) -> MockServer {
    let server = MockServer::start().await;
    let sse = format!(
        "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
        json!({"choices": [{"index": 0, "delta": {"content": reply}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    );
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_partial_json(json!({"stream": true})))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(sse, "text/event-stream")
                .set_delay(delay),
        )
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}
                }))
                .set_delay(delay),
        )
        .mount(&server)
        .await;
    server
}

#[tokio::test]
async fn sigterm_lets_the_in_flight_request_complete_and_exits_zero() {
    let server = slow_model("answered while draining", Duration::from_millis(2000)).await;
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &server,
        json!({"gateway": {"auth": {"tokenEnv": "GW_TEST_TOKEN"}}}),
    )
    .await;
    let gw = spawn_gateway(dir.path(), &[]).await;
    let http = reqwest::Client::new();
    let url = format!("{}/v1/chat/completions", gw.url);
    let request = tokio::spawn({
        let http = http.clone();
        async move {
            let r = http
                .post(url)
                .bearer_auth("test-token-5150")
                .header("x-clawctx-session", "agent:main:sigterm")
                .json(&json!({"model": "m", "messages": [{"role": "user", "content": "take your time"}]}))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    });
    // Wait (bounded) until the turn is running, then stop the gateway.
    let mut running = false;
    for _ in 0..300 {
        let m = http
            .get(format!("{}/metrics", gw.url))
            .bearer_auth("test-token-5150")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if m.contains("clawctx_gateway_turns_in_flight 1") {
            running = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(running, "the turn never started");
    gw.sigterm();
    let (status, body) = tokio::time::timeout(Duration::from_secs(60), request)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "answered while draining"
    );
    let (code, rest) = gw.wait().await;
    assert_eq!(code, 0, "{rest}");

    let r = clawctx(dir.path(), &["sessions", "show", "agent:main:sigterm"]).await;
    assert!(
        r.code == 0 && r.stdout.contains("answered while draining"),
        "the turn was stored: {r}"
    );
}
