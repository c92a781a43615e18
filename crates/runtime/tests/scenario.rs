//! The done-means scenario, end to end against a mock OpenAI-compatible server on loopback:
//! a multi-turn conversation with a tool call, a `/compact`, a provider overflow followed by
//! compaction and a successful retry, a background `maintain()`, and a forked subagent — on
//! `legacy` (with a background maintain that rewrites the transcript) and on a test engine that
//! owns compaction. At the end the transcript is re-read from disk and checked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use clawctx_engine::*;
use clawctx_protocol::transcript::EntryKind;
use clawctx_protocol::*;
use clawctx_runtime::*;
use clawctx_test_support::conformance::assert_tool_pairs;
use clawctx_test_support::test_engine::TestEngine;
use clawctx_transcript::{SessionFile, SessionStore};
use common::*;
use serde_json::{json, Value};

const KEY: &str = "agent:main:main";

enum Kind {
    Legacy(Arc<MaintainingLegacy>),
    Owning(Arc<TestEngine>),
}

impl Kind {
    fn engine(&self) -> Arc<dyn ContextEngine> {
        match self {
            Kind::Legacy(e) => e.clone(),
            Kind::Owning(e) => e.clone(),
        }
    }
    fn count(&self, m: Method) -> usize {
        match self {
            Kind::Legacy(e) => e.count(m),
            Kind::Owning(e) => e.call_count(m),
        }
    }
    fn params(&self, m: Method) -> Vec<Value> {
        match self {
            Kind::Legacy(e) => e.params(m),
            Kind::Owning(e) => e
                .calls()
                .into_iter()
                .filter(|(x, _)| *x == m)
                .map(|(_, v)| v)
                .collect(),
        }
    }
}

fn user_texts(file: &SessionFile) -> Vec<String> {
    file.active_path()
        .iter()
        .filter_map(|e| match e.message() {
            Some(m @ AgentMessage::User(_)) => Some(m.plain_text()),
            _ => None,
        })
        .collect()
}

async fn scenario(kind: Kind) {
    let owning = matches!(kind, Kind::Owning(_));
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let runtime = AgentRuntime::builder(dir.path(), kind.engine(), llm.backend(8192, 512))
        .tool(Arc::new(ReadFile))
        .build();
    let budget = runtime.limits().prompt_budget;
    // Window − max output − reserve: the reserve capped at half the window, and at a quarter
    // of it for an engine that owns compaction (docs/budget.md).
    let reserve = if owning { 8192 / 4 } else { 8192 / 2 };
    assert_eq!(
        budget,
        8192 - 512 - reserve,
        "window − max output − reserve"
    );

    // Turn 1: plain text.
    llm.push([text("Hi there, how can I help?")]);
    let t1 = runtime
        .run_turn(TurnRequest::new(KEY, "hello"))
        .await
        .unwrap();
    assert_eq!(t1.reply, "Hi there, how can I help?");
    assert_eq!(
        kind.count(Method::Bootstrap),
        0,
        "a brand-new session has no file to import: bootstrap only when the session file existed"
    );

    // Turn 2: a tool call, its result, then the answer.
    llm.push([
        tool("call_1", "read_file", json!({"path": "src/lib.rs"})),
        text("The file defines main."),
    ]);
    let t2 = runtime
        .run_turn(TurnRequest::new(KEY, "read src/lib.rs please"))
        .await
        .unwrap();
    assert_eq!(
        (t2.tool_calls, t2.model_calls, t2.reply.as_str()),
        (1, 2, "The file defines main.")
    );
    assert_tool_pairs("turn 2", &t2.messages);
    if owning {
        // The in-loop hook: afterTurn then assemble before the second model call.
        let after = kind.params(Method::AfterTurn);
        let in_loop = &after[after.len() - 2];
        assert_eq!(in_loop["prePromptMessageCount"], 2);
        assert_eq!(
            in_loop["messages"].as_array().unwrap().len(),
            5,
            "history + user + call + result"
        );
    } else {
        assert!(kind.count(Method::AfterTurn) >= 2);
    }
    let after = kind.params(Method::AfterTurn);
    let last = after.last().unwrap();
    assert_eq!(last["prePromptMessageCount"], 2);
    assert_eq!(last["messages"].as_array().unwrap().len(), 6);
    assert_eq!(last["runtimeSettings"]["schemaVersion"], 1);
    assert_eq!(
        last["runtimeSettings"]["executionHost"]["id"],
        "openclaw-embedded"
    );
    assert_eq!(
        last["runtimeSettings"]["model"]["resolved"],
        "mock/test-model"
    );
    assert_eq!(
        last["runtimeSettings"]["limits"]["promptTokenBudget"],
        budget as f64
    );

    // Background maintenance ran (and coalesced) without holding up the replies.
    runtime.wait_for_maintenance().await;
    assert!(kind.count(Method::Maintain) >= 1, "background maintain ran");
    assert!(
        runtime.maintain_failures().is_empty(),
        "{:?}",
        runtime.maintain_failures()
    );
    let maintain = kind.params(Method::Maintain);
    assert_eq!(
        maintain.last().unwrap()["runtimeContext"]["allowDeferredCompactionExecution"],
        true
    );

    // /compact with instructions: the engine's compact, force + manual.
    let compacted = runtime
        .compact(KEY, Some("focus on files".into()))
        .await
        .unwrap();
    assert!(compacted.ok && compacted.compacted, "{compacted:?}");
    let c = kind.params(Method::Compact);
    let manual = c.last().unwrap();
    assert_eq!(
        (manual["force"].clone(), manual["forceReason"].clone()),
        (json!(true), json!("manual"))
    );
    assert_eq!(manual["customInstructions"], "focus on files");
    assert_eq!(manual["sessionKey"], KEY);

    // Turn 3: the provider overflows; the engine compacts with the observed count; one retry.
    llm.push([Reply::Overflow, text("Recovered after compaction.")]);
    let t3 = runtime
        .run_turn(TurnRequest::new(KEY, "and what about the tests?"))
        .await
        .unwrap();
    assert!(t3.overflow_recovered);
    assert_eq!(
        (t3.model_calls, t3.reply.as_str()),
        (2, "Recovered after compaction.")
    );
    let overflow = kind.params(Method::Compact).last().cloned().unwrap();
    assert_eq!(
        overflow["currentTokenCount"], 9100,
        "the provider's observed count is forwarded"
    );
    assert_eq!(overflow["force"], true);

    // A forked subagent: child transcript starts from the parent's branch; hooks see both keys.
    llm.push([text("child done")]);
    let child = runtime
        .spawn_subagent(SpawnRequest {
            parent_session_key: KEY.into(),
            mode: SubagentContextMode::Fork,
            agent_id: None,
            ttl_ms: Some(60_000),
            prompt: Some("summarize the work so far".into()),
        })
        .await
        .unwrap();
    assert_eq!(child.mode, SubagentContextMode::Fork);
    assert!(child.child_session_key.starts_with("agent:main:subagent:"));
    assert_eq!(child.first_turn.as_ref().unwrap().reply, "child done");
    let child_file = SessionFile::open(&child.child_session_file).unwrap();
    let child_users = user_texts(&child_file);
    assert_eq!(
        child_users.first().map(String::as_str),
        Some("hello"),
        "forked from the parent: {child_users:?}"
    );
    assert_eq!(
        child_users.last().map(String::as_str),
        Some("summarize the work so far")
    );
    if owning {
        let prep = kind.params(Method::PrepareSubagentSpawn);
        assert_eq!(prep[0]["parentSessionKey"], KEY);
        assert_eq!(prep[0]["childSessionKey"], child.child_session_key.as_str());
        assert_eq!(prep[0]["contextMode"], "fork");
        assert_eq!(prep[0]["ttlMs"], 60_000);
        runtime
            .end_subagent(&child.child_session_key, SubagentEndReason::Completed)
            .await
            .unwrap();
        let ended = kind.params(Method::OnSubagentEnded);
        assert_eq!(
            ended[0],
            json!({"childSessionKey": child.child_session_key, "reason": "completed"})
        );
    }
    let store = SessionStore::new(dir.path());
    assert_eq!(
        store
            .get(&child.child_session_key)
            .unwrap()
            .unwrap()
            .forked_from_parent,
        Some(true)
    );

    runtime.wait_for_maintenance().await;
    runtime.shutdown().await;

    // What the provider received: every request within the budget, tool pairs intact, the
    // tool offered.
    let bodies = llm.bodies().await;
    assert_eq!(
        bodies.len(),
        6,
        "turn1 1 + turn2 2 + turn3 (overflow + retry) 2 + child 1"
    );
    assert_eq!(llm.pending(), 0);
    for b in &bodies {
        assert!(
            b["tools"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["function"]["name"] == "read_file"),
            "{b}"
        );
    }
    for (i, o) in [&t1, &t2, &t3].iter().enumerate() {
        assert!(
            o.prompt_tokens.iter().all(|t| *t <= budget),
            "turn {}: {:?} > {budget}",
            i + 1,
            o.prompt_tokens
        );
    }

    // The transcript, re-read from disk.
    let entry = store.get(KEY).unwrap().unwrap();
    let path = store.transcript_path("main", &entry).unwrap();
    let file = SessionFile::open(&path).unwrap();
    assert!(file.warnings().is_empty());
    assert_eq!(
        user_texts(&file),
        [
            "hello",
            "read src/lib.rs please",
            "and what about the tests?"
        ]
    );
    let messages: Vec<AgentMessage> = file
        .active_path()
        .iter()
        .filter_map(|e| e.message().cloned())
        .collect();
    assert_tool_pairs("transcript", &messages);
    let assistant_texts: Vec<String> = messages
        .iter()
        .filter(|m| matches!(m, AgentMessage::Assistant(_)) && m.tool_calls().next().is_none())
        .map(AgentMessage::plain_text)
        .collect();
    assert_eq!(
        assistant_texts,
        [
            "Hi there, how can I help?",
            "The file defines main.",
            "Recovered after compaction."
        ]
    );
    let tool_result = messages
        .iter()
        .find(|m| matches!(m, AgentMessage::ToolResult(_)))
        .unwrap();
    let compactions = file
        .active_path()
        .iter()
        .filter(|e| matches!(e.kind, EntryKind::Compaction(_)))
        .count();
    if owning {
        assert!(tool_result.plain_text().contains("contents of src/lib.rs"));
        assert_eq!(
            compactions, 0,
            "an owning engine compacts its own store, not the transcript"
        );
    } else {
        // legacy: /compact wrote a compaction entry; the background maintain trimmed the tool
        // result through rewriteTranscriptEntries (the original stays on an abandoned branch).
        assert!(compactions >= 1);
        assert_eq!(tool_result.plain_text(), "[trimmed] read_file");
        assert!(file.entries().iter().any(|e| e
            .message()
            .is_some_and(|m| m.plain_text().contains("contents of src/lib.rs"))));
        let summary = file
            .active_path()
            .iter()
            .find_map(|e| match &e.kind {
                EntryKind::Compaction(c) => Some(c.summary.clone()),
                _ => None,
            })
            .unwrap();
        assert!(!summary.trim().is_empty());
    }
    assert!(
        entry.compaction_count.unwrap_or(0) >= 1,
        "sessions.json counts compactions: {entry:?}"
    );
    assert!(entry.context_tokens.is_some());
}

#[tokio::test]
async fn done_means_scenario_on_legacy() {
    scenario(Kind::Legacy(Arc::new(MaintainingLegacy::new()))).await;
}

#[tokio::test]
async fn done_means_scenario_on_an_engine_that_owns_compaction() {
    let engine = TestEngine::new("owning")
        .with_info(|i| i.turn_maintenance_mode = Some(TurnMaintenanceMode::Background));
    scenario(Kind::Owning(Arc::new(engine))).await;
}
