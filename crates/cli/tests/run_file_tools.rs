//! `clawctx run "summarize README.md"`, the README's example, against a model on loopback that
//! does what a real one does with that prompt: it calls `read` on the file, then answers from
//! what it read. The model must be offered the file tools, the file's text must reach it as
//! the tool's result, and a path out of the working directory must be refused (issue #39
//! item 7).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const MARKER: &str = "The quokka ledger reconciles every Tuesday.";
const SECRET: &str = "outside-secret-6621";

/// A model that calls `read` with `path` while no tool result is in the request, then answers.
struct ReadingModel {
    path: &'static str,
}

impl Respond for ReadingModel {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        let has_result = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "tool");
        let stream = body["stream"] == true;
        let args = json!({"path": self.path}).to_string();
        match (has_result, stream) {
            (false, true) => {
                let call = json!({"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": "read", "arguments": args}});
                ResponseTemplate::new(200).set_body_raw(
                    format!(
                        "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
                        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]}}]}),
                        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
                    ),
                    "text/event-stream",
                )
            }
            (false, false) => ResponseTemplate::new(200).set_body_json(json!({
                "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
                    "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "read", "arguments": args}}]},
                    "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}
            })),
            (true, true) => ResponseTemplate::new(200).set_body_raw(
                format!(
                    "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
                    json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Summarized."}}]}),
                    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                ),
                "text/event-stream",
            ),
            (true, false) => ResponseTemplate::new(200).set_body_json(json!({
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "Summarized."},
                    "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}
            })),
        }
    }
}

/// Runs `clawctx run <prompt> --json` in `cwd` against `model`; returns the model's requests.
async fn run_in(cwd: &Path, state: &Path, model: &MockServer, prompt: &str) -> Vec<Value> {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args(["run", prompt, "--json"])
        .current_dir(cwd)
        .env("CLAWCTX_STATE_DIR", state)
        .env_remove("CLAWCTX_LOG")
        .env("OPENAI_BASE_URL", format!("{}/v1", model.uri()))
        .env("OPENAI_MODEL", "mock-model")
        .env_remove("OPENAI_API_KEY")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "clawctx run failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let outcome: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(outcome["reply"], "Summarized.", "{outcome}");
    model
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

/// The text of the `tool` message of the model's last request.
fn tool_result(requests: &[Value]) -> String {
    let last = requests.last().unwrap();
    let m = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("no tool result in {last}"));
    match &m["content"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_reads_the_file_the_prompt_names_and_nothing_outside_the_directory() {
    let outer = tempfile::tempdir().unwrap();
    let work = outer.path().join("project");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("README.md"), format!("# Project\n\n{MARKER}\n")).unwrap();
    std::fs::write(outer.path().join("outside.txt"), SECRET).unwrap();
    let state = outer.path().join("state");

    let model = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ReadingModel { path: "README.md" })
        .mount(&model)
        .await;
    let requests = run_in(&work, &state, &model, "summarize README.md").await;
    assert_eq!(requests.len(), 2, "a call of read, then the answer");
    let offered: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools offered: {}", requests[0]))
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(
        offered.contains(&"read") && offered.contains(&"ls"),
        "{offered:?}"
    );
    let result = tool_result(&requests);
    assert!(
        result.contains(MARKER),
        "the file reached the model: {result}"
    );

    // A path out of the working directory is refused; the model is told why.
    let model = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ReadingModel {
            path: "../outside.txt",
        })
        .mount(&model)
        .await;
    // A fresh state dir: the first turn's tool result is not in this one's history.
    let state = outer.path().join("state2");
    let requests = run_in(&work, &state, &model, "read ../outside.txt").await;
    let result = tool_result(&requests);
    assert!(!result.contains(SECRET), "{result}");
    assert!(result.contains("outside the working directory"), "{result}");
}
