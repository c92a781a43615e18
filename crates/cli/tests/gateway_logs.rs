//! `clawctx gateway`'s log as an operator's log file gets it (issue #27 item 6): stderr is a
//! pipe here, not a terminal, so it must hold no ANSI colour codes, and the lines a turn writes
//! when it ends ("turn done", "turn failed") carry the request id (`x-request-id`) as every
//! other line of the request does. A real child process against a mock model on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

#[tokio::test]
async fn the_log_has_no_colour_codes_off_a_terminal_and_turn_lines_carry_the_request_id() {
    let model = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "logged"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}
        })))
        .up_to_n_times(1)
        .mount(&model)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(401).set_body_json(json!({"error": {"message": "bad key"}})),
        )
        .mount(&model)
        .await;
    let state = tempfile::tempdir().unwrap();
    let config = json!({
        "models": {"providers": {"mock": {"api": "openai-completions", "baseUrl": format!("{}/v1", model.uri()),
            "models": [{"id": "test-model", "contextWindow": 16000, "maxTokens": 512}], "maxRetries": 0}}},
        "agents": {"defaults": {"model": {"primary": "mock/test-model"}}}
    });
    std::fs::write(state.path().join("clawctx.json"), config.to_string()).unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args(["--state-dir"])
        .arg(state.path())
        .args(["gateway", "--port", "0"])
        .env("CLAWCTX_LOG", "info")
        .env_remove("NO_COLOR")
        .env_remove("CLAWCTX_GATEWAY_TOKEN")
        .env_remove("CLAWCTX_GATEWAY_PORT")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_MODEL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    tokio::time::timeout(Duration::from_secs(120), stdout.read_line(&mut first))
        .await
        .expect("the gateway prints its address")
        .unwrap();
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {first:?}"))
        .to_owned();

    let http = reqwest::Client::new();
    for (id, status) in [("req-done-4711", 200), ("req-failed-4712", 502)] {
        let r = http
            .post(format!("{url}/v1/chat/completions"))
            .header("x-request-id", id)
            // Two requests by the client's word (an identical re-send is answered again).
            .header("idempotency-key", id)
            .header("x-clawctx-session", "agent:main:logs")
            .json(&json!({"messages": [{"role": "user", "content": "hello"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{}", r.text().await.unwrap());
    }

    let ok = std::process::Command::new("kill")
        .args(["-TERM", &child.id().unwrap().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("the gateway exits on SIGTERM")
        .unwrap();
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .await
        .unwrap();

    assert!(
        !log.contains('\u{1b}'),
        "no ANSI escape codes in a log that is not a terminal:\n{log}"
    );
    let line_of = |needle: &str| {
        log.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} line in\n{log}"))
            .to_owned()
    };
    let done = line_of("turn done");
    assert!(done.contains("req-done-4711"), "{done}");
    let failed = line_of("turn failed");
    assert!(failed.contains("req-failed-4712"), "{failed}");
}
