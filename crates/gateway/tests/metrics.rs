//! `/metrics` after real turns and engine-API calls over loopback HTTP: the latency of
//! `assemble` (in turns and through the engine API), of compactions (in a turn and through the
//! engine API), summarizer calls and failures, the stores' sizes on disk, and the per-turn
//! trace's writes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{start, text, Opts, TestGateway};
use serde_json::{json, Value};

/// The exposition once `ready` holds for it. A chat response is sent once the engine has the
/// turn; the turn's metrics are recorded when its bookkeeping ends, a moment later.
async fn metrics_once(gw: &TestGateway, ready: impl Fn(&str) -> bool) -> String {
    let mut m = String::new();
    for _ in 0..300 {
        m = gw.get("/metrics").await.text().await.unwrap();
        if ready(&m) {
            return m;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    m
}

/// The value of the sample `name` (with its labels) in the exposition, if present.
fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    })
}

#[tokio::test]
async fn assemble_latency_and_store_sizes_for_turns_and_engine_api_calls_on_lossless() {
    let mut gw = start(Opts {
        engine: "lossless",
        ..Default::default()
    })
    .await;
    gw.llm.push([text("one"), text("two")]);
    gw.chat("agent:main:m1", "first").await;
    gw.chat("agent:main:m1", "second").await;
    let r = gw.post("/v1/engine/assemble", &json!({"sessionId": "x", "sessionKey": "agent:main:m1", "messages": [], "tokenBudget": 1000})).await;
    assert_eq!(r.status(), 200);

    let m = metrics_once(&gw, |m| {
        sample(
            m,
            r#"clawctx_gateway_assemble_seconds_count{source="turn"}"#,
        )
        .is_some_and(|n| n >= 2.0)
    })
    .await;
    let turn = sample(
        &m,
        r#"clawctx_gateway_assemble_seconds_count{source="turn"}"#,
    )
    .unwrap_or_else(|| panic!("{m}"));
    assert!(turn >= 2.0, "every turn assembles at least once: {turn}");
    assert_eq!(
        sample(
            &m,
            r#"clawctx_gateway_assemble_seconds_count{source="engine_api"}"#
        ),
        Some(1.0),
        "{m}"
    );
    let db = sample(&m, r#"clawctx_gateway_store_bytes{store="lossless_db"}"#)
        .unwrap_or_else(|| panic!("{m}"));
    let transcripts = sample(&m, r#"clawctx_gateway_store_bytes{store="transcripts"}"#)
        .unwrap_or_else(|| panic!("{m}"));
    assert!(
        db > 0.0 && transcripts > 0.0,
        "db {db}, transcripts {transcripts}"
    );
    let on_disk: u64 = std::fs::read_dir(gw.state.path().join("agents/main/sessions"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert_eq!(
        transcripts as u64, on_disk,
        "the transcripts' bytes on disk"
    );
    // Two turns and one engine-API assemble: three traces written, none failed or dropped,
    // and the trace file measured.
    let m = metrics_once(&gw, |m| {
        sample(m, r#"clawctx_gateway_trace_turns_total{outcome="written"}"#) == Some(3.0)
    })
    .await;
    assert_eq!(
        sample(
            m.as_str(),
            r#"clawctx_gateway_trace_turns_total{outcome="written"}"#
        ),
        Some(3.0),
        "{m}"
    );
    for outcome in ["failed", "dropped"] {
        assert_eq!(
            sample(
                &m,
                &format!(r#"clawctx_gateway_trace_turns_total{{outcome="{outcome}"}}"#)
            ),
            Some(0.0),
            "{m}"
        );
    }
    let trace = sample(&m, r#"clawctx_gateway_store_bytes{store="turn_trace"}"#)
        .unwrap_or_else(|| panic!("{m}"));
    assert!(trace > 0.0, "{m}");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn compaction_latency_and_summarizer_calls_and_failures_in_a_turn_and_through_the_engine_api()
{
    let mut gw = start(Opts {
        llm_summarizer: true,
        ..Default::default()
    })
    .await;
    // Two turns whose prompts do not fit the budget together: the second turn compacts the
    // first (preflight) with a summary by the model.
    let words = (gw.runtime.limits().prompt_budget * 6 / 10) as usize;
    let big = |word: &str| format!("{word} ").repeat(words);
    gw.llm.push([
        text("noted the first"),
        text("the summary of the first turn"),
        text("noted the second"),
    ]);
    gw.chat(
        "agent:main:big",
        &format!("remember alpha-7: {}", big("alpha")),
    )
    .await;
    gw.chat(
        "agent:main:big",
        &format!("remember beta-9: {}", big("beta")),
    )
    .await;
    let m = metrics_once(&gw, |m| {
        m.contains(r#"clawctx_gateway_compaction_seconds_count{source="turn""#)
    })
    .await;
    let in_turn: Vec<&str> = m
        .lines()
        .filter(|l| l.starts_with("clawctx_gateway_compaction_seconds_count{source=\"turn\""))
        .collect();
    assert!(!in_turn.is_empty(), "a compaction in a turn is timed:\n{m}");
    let llm_calls = sample(
        &m,
        r#"clawctx_gateway_summarizer_calls_total{summarizer="llm"}"#,
    )
    .unwrap_or_else(|| panic!("{m}"));
    assert!(llm_calls >= 1.0, "{m}");

    // Through the engine API, with the model's queue empty: the summarizer fails and the
    // extractive one answers.
    let sessions: Value = gw.get("/v1/sessions").await.json().await.unwrap();
    let id = sessions["sessions"][0]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let failures_before = sample(
        &m,
        r#"clawctx_gateway_summarizer_failures_total{summarizer="llm"}"#,
    )
    .unwrap_or(0.0);
    let r = gw
        .post(
            "/v1/engine/compact",
            &json!({"sessionId": id, "sessionKey": "agent:main:big", "force": true}),
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let m = gw.get("/metrics").await.text().await.unwrap();
    assert_eq!(
        sample(
            &m,
            r#"clawctx_gateway_compaction_seconds_count{source="engine_api",trigger="api"}"#
        ),
        Some(1.0),
        "{m}"
    );
    let failures = sample(
        &m,
        r#"clawctx_gateway_summarizer_failures_total{summarizer="llm"}"#,
    )
    .unwrap_or_else(|| panic!("{m}"));
    assert!(
        failures > failures_before,
        "the failed summary is counted: {failures}\n{m}"
    );
    let extractive = sample(
        &m,
        r#"clawctx_gateway_summarizer_calls_total{summarizer="extractive"}"#,
    )
    .unwrap_or_else(|| panic!("{m}"));
    assert!(extractive >= 1.0, "the fallback is counted: {m}");
    gw.stop().await.unwrap();
}
