//! One story across the front ends (issue #39 item 5): which engine holds a session and how
//! many compactions it has had, as `clawctx sessions list`, a gateway's `GET /v1/sessions`
//! and its dashboard show them, and the compactions `clawctx run --json` lists for its turn.
//!
//! A session written by `clawctx replay --engine lossless` into a state dir was listed by a
//! gateway on that dir (whose config selects `legacy`) as `legacy`, and `sessions list` said 0
//! compactions where the dashboard said 10; `run --json` showed `compactions: []` on turns
//! where the lossless engine compacted. Real processes: the binary, a gateway child, a model
//! on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::common::Run;

const KEY: &str = "agent:main:replay";

async fn clawctx(state: &Path, args: &[&str]) -> Run {
    let mut full = vec!["--state-dir", state.to_str().unwrap()];
    full.extend_from_slice(args);
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args(&full)
        .env_remove("CLAWCTX_LOG")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_MODEL")
        .output()
        .await
        .expect("running clawctx");
    Run {
        cmd: format!("clawctx {}", full.join(" ")),
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn json_of(r: &Run) -> Value {
    assert_eq!(r.code, 0, "{r}");
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{r}"))
}

/// `sessions list --json`'s row of `key`.
async fn listed(state: &Path, key: &str) -> Value {
    let r = clawctx(state, &["sessions", "list", "--json"]).await;
    json_of(&r)[key].clone()
}

/// A `clawctx gateway` on `state` (its config as it is); killed when dropped.
async fn gateway(state: &Path) -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .arg("--state-dir")
        .arg(state)
        .args(["gateway", "--port", "0"])
        .env_remove("CLAWCTX_LOG")
        .env_remove("CLAWCTX_GATEWAY_TOKEN")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    tokio::time::timeout(Duration::from_secs(120), stdout.read_line(&mut first))
        .await
        .expect("the gateway prints its address within 120 s")
        .unwrap();
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {first:?}"))
        .trim_end_matches('/')
        .to_owned();
    tokio::spawn(async move {
        let mut sink = String::new();
        while stdout.read_line(&mut sink).await.is_ok_and(|n| n > 0) {
            sink.clear();
        }
    });
    (child, url)
}

async fn get(url: &str) -> Value {
    let r = reqwest::get(url).await.unwrap();
    assert_eq!(r.status(), 200, "{url}");
    r.json().await.unwrap()
}

fn row<'a>(rows: &'a Value, key: &str) -> &'a Value {
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["sessionKey"] == key)
        .unwrap_or_else(|| panic!("{key} is listed: {rows}"))
}

/// A model on loopback that answers every call with one short reply.
async fn mock_model() -> wiremock::MockServer {
    use wiremock::matchers::{body_partial_json, method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let server = MockServer::start().await;
    let sse = concat!(
        "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"Noted, all of it.\"}}]}\n\n",
        "data: {\"choices\": [{\"index\": 0, \"delta\": {}, \"finish_reason\": \"stop\"}]}\n\n",
        "data: [DONE]\n\n"
    );
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_partial_json(json!({"stream": true})))
        .respond_with(ResponseTemplate::new(200).set_body_raw(sse, "text/event-stream"))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Noted, all of it."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}
        })))
        .mount(&server)
        .await;
    server
}

#[tokio::test]
async fn the_cli_the_gateway_and_the_dashboard_tell_one_story_of_a_session() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    // A lossless replay into the state dir, whose config selects no engine (legacy).
    let lines: Vec<String> = (0..60)
        .flat_map(|i| {
            [
                json!({"role": "user", "content": format!("turn {i}: notes about harbor logistics, crate {i}, shipment window {} and the berth schedule for week {}", i * 3, i % 4)}).to_string(),
                json!({"role": "assistant", "content": format!("Noted turn {i}: I will keep that in mind for later questions about it.")}).to_string(),
            ]
        })
        .collect();
    let recording = state.join("recording.jsonl");
    std::fs::write(&recording, lines.join("\n")).unwrap();
    let r = clawctx(
        state,
        &[
            "replay",
            recording.to_str().unwrap(),
            "--engine",
            "lossless",
            "--budget",
            "1500",
            "--json",
        ],
    )
    .await;
    let report = json_of(&r);
    assert!(
        report["turns"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["compactions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c == "engine")),
        "the replay compacts: {report}"
    );

    // `sessions list`: held by lossless, with the engine's compactions counted.
    let cli = listed(state, KEY).await;
    assert_eq!(cli["engine"], "lossless", "{cli}");
    assert_eq!(cli["contextEngine"], "lossless", "{cli}");
    let compactions = cli["compactions"].as_u64().unwrap();
    assert!(compactions > 0, "the engine's own compactions count: {cli}");
    assert_eq!(cli["compactionCount"].as_u64(), Some(compactions), "{cli}");

    // A gateway on the dir, its config selecting legacy: the same engine and count.
    {
        let (_child, url) = gateway(state).await;
        let sessions = get(&format!("{url}/v1/sessions")).await;
        let g = row(&sessions["sessions"], KEY);
        assert_eq!(g["engine"], "lossless", "GET /v1/sessions: {g}");
        assert_eq!(
            g["compactions"].as_u64(),
            Some(compactions),
            "GET /v1/sessions: {g}"
        );
        let dashboard = get(&format!("{url}/v1/dashboard/sessions")).await;
        assert_eq!(dashboard["engine"], "legacy", "the gateway runs legacy");
        let d = row(&dashboard["sessions"], KEY);
        assert_eq!(d["engine"], "lossless", "the dashboard's list: {d}");
        assert_eq!(
            d["compactions"].as_u64(),
            Some(compactions),
            "the dashboard's list: {d}"
        );
        let view = get(&format!(
            "{url}/v1/dashboard/session?key={}",
            KEY.replace(':', "%3A")
        ))
        .await;
        assert_eq!(view["heldBy"], "lossless", "the session view: {view}");
    }

    // `run --json` on lossless with a model. Two long prompts: the first leaves a long raw
    // message before the second's fresh tail (what the replay left raw depends on when its
    // last background pass ran), so the second turn surely compacts after its reply; the turn
    // lists it, and the count grows by as many.
    let model = mock_model().await;
    let config = json!({
        "models": {"providers": {"mock": {"api": "openai-completions", "baseUrl": format!("{}/v1", model.uri()),
            "models": [{"id": "test-model", "contextWindow": 8000, "maxTokens": 256}], "maxRetries": 0}}},
        "agents": {"defaults": {"model": {"primary": "mock/test-model"}}},
        "plugins": {"slots": {"contextEngine": "lossless"}}
    });
    std::fs::write(state.join("clawctx.json"), config.to_string()).unwrap();
    let prompt = |run: usize| -> String {
        (0..250)
            .map(|i| {
                format!(
                    "run {run} note {i} about crate {} and dock {}; ",
                    i * 37 % 1009,
                    i % 23
                )
            })
            .collect()
    };
    let config_path = state.join("clawctx.json");
    let mut out = Value::Null;
    let mut before_run = 0;
    for run in 1..=2 {
        before_run = listed(state, KEY).await["compactions"].as_u64().unwrap();
        let r = clawctx(
            state,
            &[
                "--config",
                config_path.to_str().unwrap(),
                "run",
                &prompt(run),
                "--session",
                KEY,
                "--json",
            ],
        )
        .await;
        out = json_of(&r);
    }
    assert!(before_run >= compactions, "counts only grow");
    let listed_now = out["compactions"].as_array().unwrap();
    assert!(
        listed_now.iter().any(|c| c["by"] == "lossless"
            && (c["trigger"] == "engine" || c["trigger"] == "maintenance")),
        "run --json lists the engine's own compaction: {}",
        out["compactions"]
    );
    let after = listed(state, KEY).await;
    assert_eq!(
        after["compactions"].as_u64().unwrap(),
        before_run + listed_now.len() as u64,
        "sessions list counts what run listed: {after} after {}",
        out["compactions"]
    );
    // The second run's turn is traced with the same compactions.
    let r = clawctx(state, &["sessions", "trace", KEY, "--turn", "2", "--json"]).await;
    let traced = json_of(&r);
    assert_eq!(
        traced["turn"]["compactions"].as_array().map(Vec::len),
        Some(listed_now.len()),
        "{traced}"
    );
}
