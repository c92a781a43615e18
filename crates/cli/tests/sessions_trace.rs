//! `clawctx sessions trace KEY [--turn N] [--json]` over a turn trace in the state dir (written
//! here with the gateway's own store, as the gateway writes it): the turn table, one turn's
//! parts, left-out reasons, warnings and diff to the turn before, the same as JSON, and the
//! errors when there is nothing to show.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use clawctx_gateway::trace::store::TraceDb;
use clawctx_gateway::trace::{
    trace_path, EngineServed, LeftItem, LeftOut, ModelTrace, RecallHitTrace, TracePart,
    TraceSettings, TurnTrace,
};

const KEY: &str = "agent:main:cli-trace";

fn part(kind: &str, index: u32, id: Option<&str>, tokens: u64) -> TracePart {
    TracePart {
        kind: kind.into(),
        index: Some(index),
        id: id.map(str::to_owned),
        depth: (kind == "summary").then_some(1),
        role: Some("user".into()),
        tokens,
        digest: format!("{index:08x}"),
        span: (kind == "summary").then_some([0, 9]),
        quotes: if kind == "recalled" {
            vec!["msg_3".into()]
        } else {
            Vec::new()
        },
        // Why the recalled block quotes its message: the engine's score.
        hits: if kind == "recalled" {
            vec![RecallHitTrace {
                id: "msg_3".into(),
                score: Some(4.5),
                matched: 2,
            }]
        } else {
            Vec::new()
        },
    }
}

fn write_traces(state: &std::path::Path) {
    let mut db = TraceDb::open(&trace_path(state), TraceSettings::default()).unwrap();
    let engine = EngineServed {
        id: "lossless".into(),
        selected: None,
        reason: "lossless is the configured engine".into(),
    };
    let first = TurnTrace {
        session_key: KEY.into(),
        at_ms: 1_700_000_000_000,
        source: "turn".into(),
        session_id: "s1".into(),
        engine: engine.clone(),
        token_budget: Some(1000),
        parts: vec![
            part("raw", 0, Some("msg_10"), 300),
            part("raw", 1, Some("msg_11"), 300),
        ],
        gateway_tokens: 600,
        model: Some(ModelTrace {
            calls: 1,
            latency_ms: 12.5,
            input_tokens: 700,
            output_tokens: 20,
            cached_tokens: 0,
            outcome: "ok".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    db.insert(&first).unwrap();
    let second = TurnTrace {
        at_ms: 1_700_000_060_000,
        parts: vec![
            part("summary", 0, Some("sum_4"), 200),
            part("recalled", 1, None, 150),
            part("raw", 2, Some("msg_11"), 300),
            part("raw", 3, Some("msg_12"), 400),
        ],
        gateway_tokens: 1050,
        left_out: Some(LeftOut {
            known: true,
            items: 1,
            tokens: 300,
            messages: 1,
            listed: vec![LeftItem {
                id: "msg_10".into(),
                tokens: 300,
                first_seq: 10,
                last_seq: 10,
                quoted: false,
                reason: String::new(),
            }],
            unused: Some(0),
            stored_messages: Some(13),
            summarized_messages: 10,
            ..Default::default()
        }),
        model: Some(ModelTrace {
            calls: 1,
            latency_ms: 15.0,
            input_tokens: 1100,
            output_tokens: 30,
            cached_tokens: 640,
            outcome: "ok".into(),
            ..Default::default()
        }),
        ..first
    };
    db.insert(&second).unwrap();
}

#[test]
fn the_trace_of_a_session_is_shown_as_a_table_a_turn_and_json() {
    let state = tempfile::tempdir().unwrap();

    // No trace file yet: a clear error.
    let r = common::run(state.path(), &["sessions", "trace", KEY]);
    assert_ne!(r.code, 0, "{r}");
    assert!(r.stderr.contains("no turn trace"), "{r}");

    write_traces(state.path());
    let r = common::run(state.path(), &["sessions", "trace", KEY]);
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stdout.contains("2 turns kept"), "{r}");
    assert!(r.stdout.contains("engine lossless: turns 1..2"), "{r}");
    assert!(
        r.stdout
            .contains("last assembly (turn 2): 1050 tokens of 1000 (105%)"),
        "{r}"
    );
    let rows: Vec<&str> = r
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with(['1', '2']) && l.contains("lossless"))
        .collect();
    assert_eq!(rows.len(), 2, "{r}");
    assert!(rows[0].trim_start().starts_with('2'), "newest first: {r}");
    assert!(rows[0].contains("2023-11-14 22:14:20"), "{r}");
    assert!(rows[0].trim_end().ends_with("640"), "cached tokens: {r}");

    let r = common::run(state.path(), &["sessions", "trace", KEY, "--turn", "2"]);
    assert_eq!(r.code, 0, "{r}");
    for expected in [
        "turn 2 (turn, 2023-11-14 22:14:20 UTC)",
        "engine lossless: lossless is the configured engine",
        "sum_4",
        "depth 1, messages 0..9",
        "quotes msg_3 (score 4.50, 2 matched)",
        "msg_12",
        "left out: 1 items, 300 tokens",
        "msg_10",
        "over budget: 300 tokens",
        "warning: over budget by 50 tokens",
        "640 cached",
        "since turn 1:",
        "1 new summaries (sum_4) standing for 10 messages",
        "parts went out",
    ] {
        assert!(r.stdout.contains(expected), "{expected:?} in\n{r}");
    }

    let r = common::run(
        state.path(),
        &["sessions", "trace", KEY, "--turn", "2", "--json"],
    );
    assert_eq!(r.code, 0, "{r}");
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["turn"]["turn"], 2);
    assert_eq!(v["turn"]["leftOut"]["listed"][0]["id"], "msg_10");
    assert_eq!(v["diff"]["previous"], 1);
    assert_eq!(v["diff"]["wentOut"][0]["reference"], "msg_10");
    assert_eq!(v["diff"]["summarized"][0]["reference"], "sum_4");

    let r = common::run(state.path(), &["sessions", "trace", KEY, "--json"]);
    assert_eq!(r.code, 0, "{r}");
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["page"]["total"], 2);
    assert_eq!(v["session"]["engines"][0]["engine"], "lossless");

    let r = common::run(state.path(), &["sessions", "trace", KEY, "--turn", "9"]);
    assert_ne!(r.code, 0, "{r}");
    assert!(r.stderr.contains("no turn 9"), "{r}");
    let r = common::run(state.path(), &["sessions", "trace", "agent:main:other"]);
    assert_ne!(r.code, 0, "{r}");
    assert!(r.stderr.contains("no traced turns"), "{r}");
}

/// A mock OpenAI-compatible model on loopback (plain and streamed answers) and a config in
/// `state` that selects it, with `engine` in the context-engine slot.
async fn mock_model_config(state: &std::path::Path, engine: &str) -> wiremock::MockServer {
    use wiremock::matchers::{body_partial_json, method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let server = MockServer::start().await;
    let sse = concat!(
        "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"Pong from the mock.\"}}]}\n\n",
        "data: {\"choices\": [{\"index\": 0, \"delta\": {}, \"finish_reason\": \"stop\"}]}\n\n",
        "data: [DONE]\n\n"
    );
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_partial_json(serde_json::json!({"stream": true})))
        .respond_with(ResponseTemplate::new(200).set_body_raw(sse, "text/event-stream"))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Pong from the mock."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}
        })))
        .mount(&server)
        .await;
    let config = serde_json::json!({
        "models": {"providers": {"mock": {"api": "openai-completions", "baseUrl": format!("{}/v1", server.uri()),
            "models": [{"id": "test-model", "contextWindow": 16000, "maxTokens": 512}], "maxRetries": 0}}},
        "agents": {"defaults": {"model": {"primary": "mock/test-model"}}},
        "plugins": {"slots": {"contextEngine": engine}}
    });
    std::fs::write(state.join("clawctx.json"), config.to_string()).unwrap();
    server
}

/// `clawctx args…` on `state` with its `clawctx.json`, `stdin` as its input.
async fn clawctx_in(state: &std::path::Path, args: &[&str], stdin: &str) -> common::Run {
    use tokio::io::AsyncWriteExt;
    let config = state.join("clawctx.json");
    let mut full = vec![
        "--state-dir",
        state.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ];
    full.extend_from_slice(args);
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args(&full)
        .env_remove("CLAWCTX_LOG")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_MODEL")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running clawctx");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).await.unwrap();
    drop(input);
    let out = child.wait_with_output().await.unwrap();
    common::Run {
        cmd: format!("clawctx {}", full.join(" ")),
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Issue #39: the turns of `clawctx run` and `clawctx chat` are traced into the state dir as
/// the gateway's are, so `sessions trace` shows them (it said "has no traced turns").
#[tokio::test]
async fn turns_of_run_and_chat_are_traced_in_the_state_dir() {
    for engine in ["legacy", "lossless"] {
        let state = tempfile::tempdir().unwrap();
        let _model = mock_model_config(state.path(), engine).await;
        let r = clawctx_in(state.path(), &["run", "ping", "--json"], "").await;
        assert_eq!(r.code, 0, "{r}");
        let r = clawctx_in(state.path(), &["chat"], "hello there\n/quit\n").await;
        assert_eq!(r.code, 0, "{r}");
        assert!(r.stdout.contains("Pong from the mock."), "{r}");

        let r = clawctx_in(
            state.path(),
            &["sessions", "trace", "agent:main:main", "--json"],
            "",
        )
        .await;
        assert_eq!(r.code, 0, "{engine}: {r}");
        let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
        assert_eq!(v["page"]["total"], 2, "{engine}: {r}");
        for row in v["page"]["turns"].as_array().unwrap() {
            assert_eq!(row["source"], "turn", "{engine}: {r}");
            assert_eq!(row["engine"], engine, "{engine}: {r}");
        }
        // `run --json`'s call (not streamed) reports the mock's usage; the trace has it.
        let first = v["page"]["turns"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert_eq!(first["turn"], 1, "{engine}: {r}");
        assert_eq!(first["inputTokens"], 20, "{engine}: {r}");
        // The second turn (chat's) has the first one's exchange in its context.
        let r = clawctx_in(
            state.path(),
            &[
                "sessions",
                "trace",
                "agent:main:main",
                "--turn",
                "2",
                "--json",
            ],
            "",
        )
        .await;
        assert_eq!(r.code, 0, "{engine}: {r}");
        let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
        assert_eq!(v["turn"]["model"]["outcome"], "ok", "{engine}: {r}");
        let raw = v["turn"]["parts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["kind"] == "raw")
            .count();
        assert!(raw >= 2, "{engine}: the first exchange was sent: {r}");
        assert!(
            v["turn"]["gatewayTokens"].as_u64().unwrap() > 0,
            "{engine}: {r}"
        );
    }
}
