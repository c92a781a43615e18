//! Replies never wait for summaries (issue #29 item 3): a gateway in-process on loopback with
//! the lossless engine (SQLite) summarizing with the model, against a mock OpenAI-compatible
//! model (axum, on loopback) that answers chat turns at once but holds every summary request
//! until the test releases it. The turn whose commit puts the conversation over the threshold
//! is answered while its compaction's summarizer call is still pending, and so are the turns
//! after it; once released, the summary is written by background maintenance.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::routing::post;
use axum::Router;
use common::{serve, Serve};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

/// The mock's text for a summary: marked, and much shorter than its source.
pub(crate) const SUMMARY_MARK: &str = "SUMMARY-BY-MOCK";

/// What the mock model saw.
#[derive(Default)]
pub(crate) struct Seen {
    /// Summary requests that arrived.
    pub(crate) summaries_started: AtomicUsize,
    /// Summary requests answered.
    pub(crate) summaries_answered: AtomicUsize,
}

fn is_summary_request(body: &Value) -> bool {
    body["messages"].as_array().is_some_and(|ms| {
        ms.iter().any(|m| {
            m["role"] == "system"
                && m["content"]
                    .as_str()
                    .is_some_and(|c| c.contains("handoff notes"))
        })
    })
}

fn user_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|ms| ms.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Starts the mock model; summary requests wait for a permit of `release`.
pub(crate) async fn start_model(seen: Arc<Seen>, release: Arc<Semaphore>) -> String {
    let handler = move |request: axum::extract::Request| {
        let seen = seen.clone();
        let release = release.clone();
        async move {
            let bytes = axum::body::to_bytes(request.into_body(), usize::MAX)
                .await
                .unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let text = if is_summary_request(&body) {
                seen.summaries_started.fetch_add(1, Ordering::SeqCst);
                let permit = release.acquire().await.expect("the release semaphore");
                permit.forget();
                seen.summaries_answered.fetch_add(1, Ordering::SeqCst);
                let source = user_text(&body);
                let words: Vec<&str> = source.split_whitespace().take(30).collect();
                format!("{SUMMARY_MARK} {}", words.join(" "))
            } else {
                "Noted; the figures are in the ledger and the deploy is scheduled for Friday, \
                 after the migration of the billing tables has been checked twice."
                    .to_owned()
            };
            let reply = json!({
                "id": "chatcmpl-bg",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
            });
            axum::response::Response::builder()
                .header("content-type", "application/json")
                .body(axum::body::Body::from(reply.to_string()))
                .expect("a JSON response")
        }
    };
    let app = Router::new().route("/v1/chat/completions", post(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

fn count(db: &std::path::Path, sql: &str) -> i64 {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_is_sent_while_its_compactions_summary_is_still_pending() {
    let seen = Arc::new(Seen::default());
    let release = Arc::new(Semaphore::new(0));
    let model_url = start_model(seen.clone(), release.clone()).await;
    let state = tempfile::tempdir().unwrap();
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
                "freshTailCount": 4, "leafMinFanout": 2, "leafChunkTokens": 600,
                "minSalientRetention": 0
            }}}
        }
    });
    // The model summarizes (held by the mock until released). A small prompt budget
    // (threshold 0.75 × 2,000 tokens): a few turns put the conversation over it, far from the
    // model's window.
    let mut gw = serve(Serve {
        llm_summarizer: true,
        prompt_budget: Some(2_000),
        ..Serve::new(config, state.path(), "lossless")
    })
    .await;
    let runtime = gw.runtime.clone();
    let url = format!("{}/v1/chat/completions", gw.url);
    let agent_dir = state.path().join("agents").join("main");
    let http = reqwest::Client::new();
    let db = agent_dir.join("lossless.db");

    // One turn; a reply that does not come within 60 s waited for the held summary.
    let chat = |t: usize| {
        let http = http.clone();
        let url = url.clone();
        async move {
            let prompt = format!(
                "turn {t}: the invoice for order {} was sent to the warehouse in bay {} and \
                 the courier confirmed the pickup window between nine and eleven on dock {}",
                4000 + t * 37,
                t % 13,
                t % 7
            );
            let r = tokio::time::timeout(
                Duration::from_secs(60),
                http.post(&url)
                    .header("x-clawctx-session", "agent:main:bg")
                    .json(&json!({"messages": [{"role": "user", "content": prompt}]}))
                    .send(),
            )
            .await
            .unwrap_or_else(|_| panic!("turn {t} was not answered: it waits for the summary"))
            .unwrap();
            assert_eq!(r.status(), 200, "turn {t}: {}", r.text().await.unwrap());
            let v: Value = r.json().await.unwrap();
            assert!(v["choices"][0]["message"]["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("Noted")));
        }
    };

    // Turns until background maintenance asks for a summary (it is held).
    let mut turns = 0;
    while seen.summaries_started.load(Ordering::SeqCst) == 0 {
        assert!(turns < 60, "no compaction started in {turns} turns");
        chat(turns).await;
        turns += 1;
        if seen.summaries_started.load(Ordering::SeqCst) == 0 {
            // The lane starts right after the reply; let it reach the model.
            for _ in 0..20 {
                if seen.summaries_started.load(Ordering::SeqCst) > 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    // The reply of the turn that started it came back, and so do the next ones, while the
    // summary is still pending and nothing is summarized yet.
    for _ in 0..3 {
        chat(turns).await;
        turns += 1;
    }
    assert_eq!(
        seen.summaries_answered.load(Ordering::SeqCst),
        0,
        "the summary was held"
    );
    assert_eq!(count(&db, "SELECT count(*) FROM summaries"), 0);
    assert_eq!(
        count(&db, "SELECT count(*) FROM messages"),
        2 * turns as i64,
        "every turn is stored while its compaction waits"
    );

    // Released: background maintenance writes the summaries.
    release.add_permits(1_000);
    tokio::time::timeout(Duration::from_secs(120), runtime.wait_for_maintenance())
        .await
        .expect("background maintenance settles once the summaries are released");
    let summaries = count(
        &db,
        &format!("SELECT count(*) FROM summaries WHERE text LIKE '%{SUMMARY_MARK}%'"),
    );
    assert!(
        summaries >= 1,
        "the model's summary is written after the reply"
    );
    assert!(seen.summaries_answered.load(Ordering::SeqCst) >= 1);
    assert_eq!(
        count(&db, "SELECT count(*) FROM messages"),
        2 * turns as i64
    );

    gw.stop().await.unwrap();
    runtime.shutdown().await;
}
