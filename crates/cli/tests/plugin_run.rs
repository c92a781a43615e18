//! Issue "plugins" done-means, as a user runs it: a Node plugin installed with `-l` answers
//! `clawctx run` against a real OpenAI-compatible server on loopback; a plugin whose process
//! dies in the middle of the run is quarantined and the reply still arrives, from `legacy`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::clawctx;
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

#[tokio::test]
async fn run_answers_through_a_plugin_and_survives_its_crash() {
    assert!(
        Command::new("node")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "node is required"
    );
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Pong from the mock."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}
        })))
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let config = json!({
        "models": {"providers": {"mock": {"api": "openai-completions", "baseUrl": format!("{}/v1", server.uri()),
            "models": [{"id": "m", "contextWindow": 16000, "maxTokens": 512}], "maxRetries": 0}}},
        "agents": {"defaults": {"model": {"primary": "mock/m"}}}
    });
    std::fs::write(dir.path().join("clawctx.json"), config.to_string()).unwrap();

    let seed = repo("examples/plugins/seed-node-engine");
    let (code, out, err) = clawctx(
        dir.path(),
        &["plugins", "install", "-l", seed.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let (code, out, err) = clawctx(dir.path(), &["run", "ping", "--json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["reply"], "Pong from the mock.");
    assert_eq!(v["engine"], "my-engine", "the plugin is in charge: {v:#}");
    assert!(v["quarantines"].as_array().unwrap().is_empty(), "{v:#}");

    // A plugin that exits in the middle of assemble.
    clawctx(
        dir.path(),
        &[
            "config",
            "set",
            "plugins.entries.faulty.config.mode",
            "crash-mid-call",
        ],
    );
    let faulty = repo("crates/plugin/tests/fixtures/node-faulty");
    let (code, out, err) = clawctx(
        dir.path(),
        &["plugins", "install", "-l", faulty.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let (code, out, err) = clawctx(dir.path(), &["run", "ping again", "--json"]);
    assert_eq!(code, 0, "the reply must still arrive:\n{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["reply"], "Pong from the mock.");
    let q = &v["quarantines"][0];
    assert_eq!(q["engineId"], "faulty", "{v:#}");
    assert_eq!(q["operation"], "assemble", "{v:#}");
    assert!(q["reason"].as_str().unwrap().contains("exited"), "{v:#}");
    assert!(
        err.contains(
            "[context-engine] Context engine \"faulty\" owner=plugin:faulty failed during assemble"
        ),
        "{err}"
    );

    // The transcript of both turns is intact.
    let (code, out, _) = clawctx(dir.path(), &["sessions", "show", "agent:main:main"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("ping again") && out.matches("Pong from the mock.").count() >= 2,
        "{out}"
    );
}
