//! `maintain` over the engine API beside the same session's `assemble` (issue #40 item 6): a
//! gateway in-process on loopback with the lossless engine (SQLite) summarizing with the model,
//! against a mock OpenAI-compatible model (axum, on loopback) that answers chat turns at once
//! and holds summary requests until the test releases them (`background_compaction`'s mock).
//! A deferred `maintain` (OpenClaw's background maintenance after the reply) answers at once and compacts on the gateway's own maintenance lane, and an `assemble` of the
//! same session answers while the summary is provably still pending (before, both waited
//! behind maintain's summarizer call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::background_compaction::{start_model, Seen, SUMMARY_MARK};
use crate::common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::{serve, Serve, Served};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

/// A gateway on lossless summarizing with the mock model at `model_url`.
async fn gateway(model_url: &str, state: &std::path::Path) -> Served {
    let config = json!({
        "models": {"providers": {"mock": {
            "api": "openai-completions",
            "baseUrl": format!("{model_url}/v1"),
            "models": [{"id": "test-model", "contextWindow": 200_000, "maxTokens": 1024}],
            "maxRetries": 0, "timeoutMs": 120_000
        }}},
        "agents": {"defaults": {"model": {"primary": "mock/test-model"}}},
        "plugins": {
            "slots": {"contextEngine": "lossless"},
            "entries": {"lossless": {"config": {
                "freshTailCount": 4, "leafMinFanout": 2, "leafChunkTokens": 600
            }}}
        }
    });
    serve(Serve {
        llm_summarizer: true,
        ..Serve::new(config, state, "lossless")
    })
    .await
}

fn prompt(t: usize) -> String {
    format!(
        "turn {t}: the invoice for order {} was sent to the warehouse in bay {} and the courier \
         confirmed the pickup window between nine and eleven on dock {}",
        4000 + t * 37,
        t % 13,
        t % 7
    )
}

async fn post_ok(gw: &Served, path: &str, body: Value) -> Value {
    let r = gw
        .http
        .post(format!("{}{path}", gw.url))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 200, "{path}: {text}");
    serde_json::from_str(&text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assemble_answers_while_maintain_waits_for_its_summary_on_the_same_session() {
    let seen = Arc::new(Seen::default());
    let release = Arc::new(Semaphore::new(0));
    let model_url = start_model(seen.clone(), release.clone()).await;
    let state = tempfile::tempdir().unwrap();
    let mut gw = gateway(&model_url, state.path()).await;
    let runtime = gw.runtime.clone();
    const KEY: &str = "agent:main:bridge";
    let session = json!({"sessionId": "s-bridge", "sessionKey": KEY});
    let with = |extra: Value| {
        let mut v = session.clone();
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };

    // A history well over the threshold of a 2,000-token budget.
    let messages: Vec<Value> = (0..40)
        .flat_map(|t| {
            [
                json!({"role": "user", "content": prompt(t), "timestamp": 1_000 + t as i64 * 10}),
                json!({"role": "assistant", "content": [{"type": "text", "text": format!("Noted for turn {t}: order {} goes out from bay {}.", 4000 + t * 37, t % 13)}],
                       "stopReason": "stop", "timestamp": 1_005 + t as i64 * 10}),
            ]
        })
        .collect();
    post_ok(
        &gw,
        "/v1/engine/ingestBatch",
        with(json!({"messages": messages})),
    )
    .await;
    // The host assembles with a budget the history fits (nothing to compact on the reply's
    // path); maintenance compacts against the 2,000 tokens it is given.
    let assemble = with(json!({"messages": [], "tokenBudget": 8_000}));
    post_ok(&gw, "/v1/engine/assemble", assemble.clone()).await;

    // OpenClaw's background maintenance (deferred): answered at once, its compaction running
    // on the gateway's own maintenance lane, where the summary is held.
    let deferred = with(json!({"sessionFile": "", "runtimeContext": {
        "allowDeferredCompactionExecution": true, "tokenBudget": 2_000}}));
    let answer = tokio::time::timeout(
        Duration::from_secs(60),
        post_ok(&gw, "/v1/engine/maintain", deferred),
    )
    .await
    .expect("a deferred maintain answered behind its summarizer call");
    assert!(
        answer["reason"]
            .as_str()
            .is_some_and(|r| r.contains("maintenance lane")),
        "{answer}"
    );
    let waited = std::time::Instant::now();
    while seen.summaries_started.load(Ordering::SeqCst) == 0 {
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "the lane's compaction never asked for a summary"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // The same session's assemble answers while the summarizer is still running. (The bound
    // only turns a wait behind maintain into a failure instead of a hang: the summary is
    // never released before the assemble has answered.)
    let answered = tokio::time::timeout(
        Duration::from_secs(60),
        post_ok(&gw, "/v1/engine/assemble", assemble.clone()),
    )
    .await
    .expect("assemble waited behind maintain's summarizer call");
    assert!(
        answered["messages"]
            .as_array()
            .is_some_and(|m| !m.is_empty()),
        "{answered}"
    );
    assert_eq!(
        seen.summaries_answered.load(Ordering::SeqCst),
        0,
        "the summary was still pending while maintain and assemble answered"
    );

    // Released: the lane's compaction commits its summaries; the next assemble shows them.
    release.add_permits(1_000);
    runtime.wait_for_maintenance().await;
    let after = post_ok(&gw, "/v1/engine/assemble", assemble).await;
    assert!(
        after.to_string().contains(SUMMARY_MARK),
        "the held summary reached the context: {after}"
    );

    gw.stop().await.unwrap();
    runtime.shutdown().await;
}
