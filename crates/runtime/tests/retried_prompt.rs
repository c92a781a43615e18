//! A client that retries a failed request (the official OpenAI client re-sends a 502 twice)
//! must not leave a copy of its prompt per attempt in the session: a turn whose prompt is the
//! session's last entry, unanswered, continues from it. Issue #27 item 5.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use clawctx_protocol::*;
use clawctx_runtime::*;
use clawctx_test_support::test_engine::TestEngine;
use common::*;

const KEY: &str = "agent:main:main";

fn texts(messages: &[AgentMessage]) -> Vec<(String, String)> {
    messages
        .iter()
        .map(|m| {
            let role = serde_json::to_value(m).unwrap()["role"]
                .as_str()
                .unwrap()
                .to_owned();
            (role, m.plain_text())
        })
        .collect()
}

#[tokio::test]
async fn a_prompt_retried_after_failed_turns_is_stored_once_with_one_answer() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing scripted: the mock model answers 500 until a reply is pushed.
    let llm = MockLlm::start().await;
    let engine = Arc::new(TestEngine::new("plain"));
    let rt = AgentRuntime::builder(dir.path(), engine.clone(), llm.backend(8192, 512)).build();
    rt.run_turn(TurnRequest::new(KEY, "first question"))
        .await
        .unwrap_err();
    rt.run_turn(TurnRequest::new(KEY, "first question"))
        .await
        .unwrap_err();
    llm.push([text("the answer")]);
    let out = rt
        .run_turn(TurnRequest::new(KEY, "first question"))
        .await
        .unwrap();
    assert_eq!(out.reply, "the answer");
    assert_eq!(
        texts(&rt.context(KEY).unwrap()),
        vec![
            ("user".to_owned(), "first question".to_owned()),
            ("assistant".to_owned(), "the answer".to_owned())
        ]
    );
    // The model saw the prompt once, and so did the engine.
    let last = llm.bodies().await.pop().unwrap();
    let users = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .count();
    assert_eq!(users, 1, "{last}");
    let stored = texts(&engine.stored(&out.session_id));
    assert_eq!(
        stored.iter().filter(|(_, t)| t == "first question").count(),
        1,
        "{stored:?}"
    );

    // A different prompt after a failure is a new message (the failed one stays: the
    // transcript keeps what the user said).
    rt.run_turn(TurnRequest::new(KEY, "second question"))
        .await
        .unwrap_err();
    llm.push([text("second answer")]);
    rt.run_turn(TurnRequest::new(KEY, "third question"))
        .await
        .unwrap();
    let all = texts(&rt.context(KEY).unwrap());
    assert_eq!(
        all.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>(),
        vec![
            "first question",
            "the answer",
            "second question",
            "third question",
            "second answer"
        ]
    );
    // And an answered prompt sent again is a new turn (the user asked twice).
    llm.push([text("again")]);
    rt.run_turn(TurnRequest::new(KEY, "third question"))
        .await
        .unwrap();
    assert_eq!(rt.context(KEY).unwrap().len(), 7);
}
