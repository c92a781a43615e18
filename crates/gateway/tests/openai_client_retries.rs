//! The official `openai` Python client against the gateway when the model provider fails: the
//! client retries a 502 twice by default, and each failed turn used to keep its prompt, so one
//! call left three copies of it in the session (issue #27 item 5). Now a retry continues the
//! unanswered prompt: afterwards the session holds the prompt once and one answer.
//!
//! The client comes from a venv: `CLAWCTX_OPENAI_PYTHON` names its python, else
//! `$HOME/.cache/clawctx/openai-venv/bin/python` (`.ci/run` installs `openai` there). Without
//! it the test skips, except under `CI=true`, where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use clawctx_protocol::AgentMessage;
use common::*;
use wiremock::matchers::{method, path};
use wiremock::{Mock, ResponseTemplate};

/// The venv's python with `openai` importable, or `None` (the test skips) outside CI.
fn openai_python() -> Option<PathBuf> {
    let python = std::env::var_os("CLAWCTX_OPENAI_PYTHON")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache/clawctx/openai-venv/bin/python"))
        })?;
    let ok = std::process::Command::new(&python)
        .args(["-c", "import openai"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(python);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but {} cannot import openai (.ci/run installs it)",
        python.display()
    );
    eprintln!(
        "skipping: {} cannot import openai (python3 -m venv ~/.cache/clawctx/openai-venv && \
         ~/.cache/clawctx/openai-venv/bin/pip install openai)",
        python.display()
    );
    None
}

const CLIENT: &str = r#"
import sys
from openai import OpenAI

client = OpenAI(base_url=sys.argv[1] + "/v1", api_key="unused", max_retries=2,
                default_headers={"x-clawctx-session": sys.argv[2]})
r = client.chat.completions.create(model="mock/test-model",
                                   messages=[{"role": "user", "content": "what is the port of the staging db?"}])
print(r.choices[0].message.content)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_client_retrying_a_failing_provider_leaves_one_prompt_and_one_answer() {
    let Some(python) = openai_python() else {
        return;
    };
    let gw = start(Opts::default()).await;
    // The provider fails the first two calls (each is one gateway turn: the model's own
    // retries are off, so the gateway answers 502 and the client retries), then answers.
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(502)
                .set_body_json(serde_json::json!({"error": {"message": "bad gateway upstream"}})),
        )
        .up_to_n_times(2)
        .with_priority(1)
        .mount(&gw.llm.server)
        .await;
    gw.llm.push([text("5433, behind the bastion")]);

    let key = "agent:main:openai-retries";
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(&python)
            .args(["-c", CLIENT, &gw.url, key])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the client finishes")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "client failed:\n{stdout}\n{stderr}");
    assert_eq!(stdout.trim(), "5433, behind the bastion", "{stderr}");
    assert_eq!(
        gw.llm.bodies().await.len(),
        3,
        "two failed calls and the answer"
    );

    let session: Vec<(String, String)> = gw
        .runtime
        .context(key)
        .unwrap()
        .iter()
        .map(|m| {
            let role = match m {
                AgentMessage::User(_) => "user",
                AgentMessage::Assistant(_) => "assistant",
                _ => "other",
            };
            (role.to_owned(), m.plain_text())
        })
        .collect();
    assert_eq!(
        session,
        vec![
            (
                "user".to_owned(),
                "what is the port of the staging db?".to_owned()
            ),
            (
                "assistant".to_owned(),
                "5433, behind the bastion".to_owned()
            ),
        ],
        "the session has the prompt once and one answer"
    );
    // The model's last call saw the prompt once.
    let last = gw.llm.bodies().await.pop().unwrap();
    let users = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .count();
    assert_eq!(users, 1, "{last}");
}
