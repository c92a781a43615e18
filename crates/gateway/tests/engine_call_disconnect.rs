//! An engine-API call whose client goes away mid-call runs to completion (issue #27 item 4):
//! the call runs in a task of its own that holds the session's lane, as a chat turn does, so a
//! disconnect or the request deadline never drops a write half done. Shown with a `compact`
//! whose summary comes from a slow model: the client disconnects while the summary is being
//! written, and the summary is committed all the same.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{slow, start, Opts};
use serde_json::{json, Value};

const KEY: &str = "agent:main:sidecar-disconnect";

fn words(i: usize) -> String {
    let pool = [
        "river", "stone", "window", "garden", "lantern", "harbor", "meadow", "candle", "forest",
        "bridge", "valley", "thunder",
    ];
    (0..40)
        .map(|j| pool[(i * 7 + j * 3) % pool.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compact_whose_client_disconnects_still_commits_its_summary() {
    let gw = start(Opts {
        engine: "lossless",
        llm_summarizer: true,
        ..Default::default()
    })
    .await;
    let messages: Vec<Value> = (0..120)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            if role == "user" {
                json!({"role": "user", "content": words(i), "timestamp": 1_000 + i})
            } else {
                json!({"role": "assistant", "content": [{"type": "text", "text": words(i)}],
                       "stopReason": "stop", "timestamp": 1_000 + i})
            }
        })
        .collect();
    let r = gw
        .post(
            "/v1/engine/ingestBatch",
            &json!({"sessionId": "s1", "sessionKey": KEY, "messages": messages}),
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());

    // Every summary the compaction asks for takes a while.
    gw.llm.push((0..4).map(|_| {
        slow(
            "the conversation walked through river stone window and garden",
            Duration::from_millis(1_500),
        )
    }));
    let before = gw.llm.bodies().await.len();
    let request = tokio::spawn({
        let http = gw.http.clone();
        let url = gw.at("/v1/engine/compact");
        async move {
            http.post(url)
                .json(&json!({"sessionId": "s1", "sessionKey": KEY, "tokenBudget": 8000, "force": true}))
                .send()
                .await
        }
    });
    // Once the summary is being written, the client goes away.
    let mut asked = false;
    for _ in 0..500 {
        if gw.llm.bodies().await.len() > before {
            asked = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(asked, "the compaction never asked the model for a summary");
    request.abort();
    assert!(request.await.unwrap_err().is_cancelled());

    // The compaction goes on and commits: the next call on the session waits for it (same
    // lane), then the assembled context starts with the summary.
    let r = gw
        .post(
            "/v1/engine/assemble",
            &json!({"sessionId": "s1", "sessionKey": KEY, "messages": [], "tokenBudget": 8000}),
        )
        .await;
    let status = r.status();
    let body: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    let text = serde_json::to_string(&body["messages"]).unwrap();
    assert!(
        text.contains("<summary id=\\\"sum_"),
        "the compaction the client left was committed: {}",
        &text[..text.len().min(600)]
    );
}
