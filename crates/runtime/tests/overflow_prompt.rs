//! A provider overflow must not leave the turn's prompt twice in the session (issue #28): the
//! runtime's overflow recovery compacts (for `legacy`, the built-in compaction, which appends a
//! compaction entry after the persisted prompt) and retries once. Whether the retry succeeds,
//! or fails and the client sends the same prompt again, the transcript holds the prompt once,
//! the model's requests carry it once, and the engine stores it once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use clawctx_engine::legacy::LegacyEngine;
use clawctx_engine::*;
use clawctx_runtime::*;
use clawctx_test_support::test_engine::TestEngine;
use common::*;
use serde_json::Value;

const KEY: &str = "agent:main:main";
const PROMPT: &str = "and now the overflowing question";

/// A history long enough for the built-in compaction to have something to summarize.
async fn history(rt: &AgentRuntime, llm: &MockLlm) {
    for i in 0..6 {
        llm.push([text(&format!("answer {i}: {}", "detail ".repeat(120)))]);
        rt.run_turn(TurnRequest::new(
            KEY,
            format!("question {i}: {}", "context ".repeat(120)),
        ))
        .await
        .unwrap();
    }
}

fn prompts_in_context(rt: &AgentRuntime) -> usize {
    rt.context(KEY)
        .unwrap()
        .iter()
        .filter(|m| m.role() == "user" && m.plain_text() == PROMPT)
        .count()
}

fn prompts_in_request(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user" && m.to_string().contains(PROMPT))
        .count()
}

/// Every model request that carried the prompt, carried it once.
async fn each_request_once(llm: &MockLlm) {
    let bodies = llm.bodies().await;
    let with: Vec<&Value> = bodies
        .iter()
        .filter(|b| prompts_in_request(b) > 0)
        .collect();
    assert!(!with.is_empty());
    for b in with {
        assert_eq!(prompts_in_request(b), 1, "{b}");
    }
}

type Case = (
    &'static str,
    Arc<dyn ContextEngine>,
    Option<Arc<TestEngine>>,
);

/// `legacy` (built-in compaction), an engine that owns compaction, and `lossless` (owns
/// compaction, durable turns through `commitTurn`). `db` holds the lossless store.
fn engines(db: &std::path::Path) -> Vec<Case> {
    let owning = Arc::new(TestEngine::new("owning"));
    let lossless = clawctx_lossless::LosslessEngine::open(
        db.join("lossless.db"),
        clawctx_lossless::LosslessConfig::default(),
    )
    .unwrap();
    vec![
        ("legacy", Arc::new(LegacyEngine), None),
        ("owning", owning.clone(), Some(owning)),
        ("lossless", Arc::new(lossless), None),
    ]
}

fn stored_prompts(engine: &Option<Arc<TestEngine>>, session_id: &str) -> Option<usize> {
    engine.as_ref().map(|e| {
        e.stored(session_id)
            .iter()
            .filter(|m| m.role() == "user" && m.plain_text() == PROMPT)
            .count()
    })
}

#[tokio::test]
async fn a_recovered_overflow_keeps_the_prompt_once() {
    let db = tempfile::tempdir().unwrap();
    for (name, engine, test_engine) in engines(db.path()) {
        let dir = tempfile::tempdir().unwrap();
        let llm = MockLlm::start().await;
        let rt = AgentRuntime::builder(dir.path(), engine, llm.backend(8192, 512)).build();
        history(&rt, &llm).await;
        llm.push([Reply::Overflow, text("recovered")]);
        let out = rt.run_turn(TurnRequest::new(KEY, PROMPT)).await.unwrap();
        assert!(out.overflow_recovered, "{name}");
        assert_eq!(out.reply, "recovered", "{name}");
        assert_eq!(prompts_in_context(&rt), 1, "{name}: {:?}", rt.context(KEY));
        each_request_once(&llm).await;
        if let Some(n) = stored_prompts(&test_engine, &out.session_id) {
            assert_eq!(n, 1, "{name}: the engine stored the prompt once");
        }
        rt.wait_for_maintenance().await;
    }
}

#[tokio::test]
async fn a_prompt_sent_again_after_a_failed_overflow_recovery_is_stored_once() {
    let db = tempfile::tempdir().unwrap();
    for (name, engine, test_engine) in engines(db.path()) {
        let dir = tempfile::tempdir().unwrap();
        let llm = MockLlm::start().await;
        let rt = AgentRuntime::builder(dir.path(), engine, llm.backend(8192, 512)).build();
        history(&rt, &llm).await;
        // The call overflows, recovery compacts, the retry overflows too: the turn fails.
        llm.push([Reply::Overflow, Reply::Overflow]);
        rt.run_turn(TurnRequest::new(KEY, PROMPT))
            .await
            .unwrap_err();
        assert_eq!(prompts_in_context(&rt), 1, "{name}: {:?}", rt.context(KEY));
        // The client sends the same prompt again: the turn continues the unanswered prompt.
        llm.push([text("answered at last")]);
        let out = rt.run_turn(TurnRequest::new(KEY, PROMPT)).await.unwrap();
        assert_eq!(out.reply, "answered at last", "{name}");
        assert_eq!(prompts_in_context(&rt), 1, "{name}: {:?}", rt.context(KEY));
        each_request_once(&llm).await;
        if let Some(n) = stored_prompts(&test_engine, &out.session_id) {
            assert_eq!(n, 1, "{name}: the engine stored the prompt once");
        }
        rt.wait_for_maintenance().await;
    }
}
