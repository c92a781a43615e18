//! What the runtime delivers to an engine after a turn, and what it does not do for it, against
//! a mock OpenAI-compatible server on loopback (issue #15):
//! - §7.1: an engine that owns compaction never gets the runtime's threshold auto-compaction,
//!   while `legacy` crossing the same threshold does;
//! - the afterTurn > ingestBatch > ingest precedence: only the highest method present is called,
//!   with exactly the turn's messages (afterTurn: the whole view and `prePromptMessageCount`);
//! - §7.2: legacy's result-derived successor checks: a runtime compaction result naming a
//!   successor whose identity conflicts with the caller fails with the contract's exact text
//!   and the session key is not moved.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use async_trait::async_trait;
use clawctx_engine::legacy::{
    delegate_compaction_to_runtime, legacy_info, SUCCESSOR_CONFLICT, SUCCESSOR_KEY_AGENT_CONFLICT,
};
use clawctx_engine::*;
use clawctx_protocol::transcript::EntryKind;
use clawctx_protocol::*;
use clawctx_runtime::*;
use clawctx_test_support::messages::{sentence, Rng};
use clawctx_test_support::test_engine::TestEngine;
use clawctx_transcript::SessionFile;
use common::*;
use serde_json::{json, Value};

const KEY: &str = "agent:main:main";

/// Context window and max output of the mock model: prompt budget 3,584, reserve 4,096, so the
/// §7.4 threshold (`contextTokens > contextWindow − reserveTokens`) is 4,096 tokens.
const WINDOW: u64 = 8192;
const MAX_OUT: u64 = 512;

/// Compaction entries anywhere in the session's transcript file.
fn compaction_entries(rt: &AgentRuntime) -> usize {
    let s = rt.session(KEY).unwrap();
    SessionFile::open(&s.transcript_path)
        .unwrap()
        .entries()
        .iter()
        .filter(|e| matches!(e.kind, EntryKind::Compaction(_)))
        .count()
}

/// Three short questions answered at ~1,500 tokens each: the history before the third turn
/// still fits the prompt budget (no preflight compaction), the context after it is over the
/// threshold. Returns the outcomes, the threshold, and the compaction entries written.
async fn three_long_answers(engine: Arc<dyn ContextEngine>) -> (Vec<TurnOutcome>, u64, usize) {
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let rt = AgentRuntime::builder(dir.path(), engine, llm.backend(WINDOW, MAX_OUT)).build();
    let limits = rt.limits();
    // The runtime's threshold as legacy has it (an owning engine keeps a smaller reserve,
    // docs/budget.md, but never gets the runtime's auto-compaction at all).
    let legacy_reserve = clawctx_engine::compaction::effective_reserve_tokens(
        &clawctx_engine::compaction::CompactionSettings::default(),
        Some(limits.context_window),
    );
    let threshold = limits.context_window - legacy_reserve;
    let mut rng = Rng::new(15);
    llm.push((0..3).map(|i| Reply::Text(sentence(&mut rng, &format!("answer {i}"), 1_400))));
    let mut outcomes = Vec::new();
    for i in 0..3 {
        outcomes.push(
            rt.run_turn(TurnRequest::new(KEY, format!("question {i}")))
                .await
                .unwrap(),
        );
    }
    rt.wait_for_maintenance().await;
    let written = compaction_entries(&rt);
    rt.shutdown().await;
    (outcomes, threshold, written)
}

#[tokio::test]
async fn legacy_crossing_the_threshold_gets_the_runtime_auto_compaction_s7_4() {
    let (outcomes, threshold, written) = three_long_answers(Arc::new(LegacyEngine)).await;
    let last = &outcomes[2];
    assert!(
        outcomes[..2].iter().all(|o| o.compactions.is_empty()),
        "the first two turns stay under the threshold ({threshold}) and the budget: {:?}",
        outcomes.iter().map(|o| &o.compactions).collect::<Vec<_>>()
    );
    assert!(
        last.compactions.iter().any(|c| c.trigger == "auto" && c.by == "runtime"),
        "§7.4: legacy crossing the threshold ({threshold} tokens) after a turn gets the runtime's auto-compaction: {:?}",
        last.compactions
    );
    assert!(
        written >= 1,
        "§7.4: the auto-compaction appends a `compaction` entry to the transcript"
    );
    assert!(
        last.context_tokens_after <= threshold,
        "the compaction brought the context under the threshold: {}",
        last.context_tokens_after
    );
}

#[tokio::test]
async fn an_engine_that_owns_compaction_never_gets_the_runtime_auto_compaction_s7_1() {
    let engine = Arc::new(TestEngine::new("owning"));
    assert!(
        engine.info().owns_compaction(),
        "the test engine declares ownsCompaction: true"
    );
    let (outcomes, threshold, written) = three_long_answers(engine.clone()).await;
    for (i, o) in outcomes.iter().enumerate() {
        assert!(
            o.compactions.is_empty(),
            "§7.1: ownsCompaction disables the runtime's auto-compaction, yet turn {} compacted: {:?}",
            i + 1,
            o.compactions
        );
    }
    assert_eq!(
        written, 0,
        "§7.1: the runtime appended a `compaction` entry for an engine that owns compaction"
    );
    assert_eq!(
        engine.call_count(Method::Compact),
        0,
        "§7.1: threshold compaction is the owning engine's own business, not a host call"
    );
    let last = &outcomes[2];
    assert!(
        last.context_tokens_after > threshold,
        "the premise: the transcript's context ({}) crossed the threshold ({threshold}), as legacy's did",
        last.context_tokens_after
    );
}

/// A test engine that does not own compaction and declares only `methods` (plus the required
/// three), so the host must pick the delivery method from what is declared.
fn delivering(id: &str, methods: &[Method]) -> Arc<TestEngine> {
    let mut all = vec![Method::Ingest, Method::Assemble, Method::Compact];
    all.extend_from_slice(methods);
    Arc::new(
        TestEngine::new(id)
            .with_info(|i| i.owns_compaction = Some(false))
            .with_methods(&all),
    )
}

/// Two turns through `engine`: a plain one, then one with a tool call. Returns both outcomes.
async fn two_turns(engine: Arc<TestEngine>) -> (TurnOutcome, TurnOutcome) {
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let rt = AgentRuntime::builder(dir.path(), engine, llm.backend(WINDOW, MAX_OUT))
        .tool(Arc::new(ReadFile))
        .build();
    llm.push([
        text("Hi, what can I do?"),
        tool("call_1", "read_file", json!({"path": "src/lib.rs"})),
        text("It defines main."),
    ]);
    let first = rt.run_turn(TurnRequest::new(KEY, "hello")).await.unwrap();
    let second = rt
        .run_turn(TurnRequest::new(KEY, "read src/lib.rs"))
        .await
        .unwrap();
    rt.shutdown().await;
    let roles: Vec<&str> = second.messages.iter().map(AgentMessage::role).collect();
    assert_eq!(
        roles,
        ["user", "assistant", "toolResult", "assistant"],
        "the premise: the second turn has a tool call and its result"
    );
    (first, second)
}

fn as_json(messages: &[AgentMessage]) -> Vec<Value> {
    messages
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect()
}

fn params_of(engine: &TestEngine, m: Method) -> Vec<Value> {
    engine
        .calls()
        .into_iter()
        .filter(|(x, _)| *x == m)
        .map(|(_, v)| v)
        .collect()
}

#[tokio::test]
async fn an_engine_with_only_ingest_gets_one_ingest_per_turn_message_in_order() {
    let engine = delivering("ingest-only", &[]);
    let (first, second) = two_turns(engine.clone()).await;
    let delivered: Vec<Value> = params_of(&engine, Method::Ingest)
        .into_iter()
        .map(|p| p["message"].clone())
        .collect();
    let expected = as_json(&[first.messages, second.messages].concat());
    assert_eq!(
        delivered, expected,
        "ingest (no ingestBatch, no afterTurn): exactly one call per message of each turn — user, assistant, tool result — in order"
    );
    assert_eq!(
        engine.call_count(Method::IngestBatch),
        0,
        "ingestBatch is not declared: never called"
    );
    assert_eq!(
        engine.call_count(Method::AfterTurn),
        0,
        "afterTurn is not declared: never called"
    );
}

#[tokio::test]
async fn an_engine_with_ingest_batch_gets_one_batch_of_exactly_the_turns_messages() {
    let engine = delivering("batch", &[Method::IngestBatch]);
    let (first, second) = two_turns(engine.clone()).await;
    let batches: Vec<Vec<Value>> = params_of(&engine, Method::IngestBatch)
        .into_iter()
        .map(|p| p["messages"].as_array().unwrap().clone())
        .collect();
    assert_eq!(
        batches,
        [as_json(&first.messages), as_json(&second.messages)],
        "ingestBatch beats ingest: one batch per turn, holding exactly that turn's messages"
    );
    assert_eq!(
        engine.call_count(Method::Ingest),
        0,
        "ingestBatch beats ingest: no per-message ingest as well"
    );
    assert_eq!(
        engine.call_count(Method::AfterTurn),
        0,
        "afterTurn is not declared: never called"
    );
}

#[tokio::test]
async fn an_engine_with_after_turn_gets_the_view_and_the_pre_prompt_count_and_no_ingest() {
    let engine = delivering("after-turn", &[Method::IngestBatch, Method::AfterTurn]);
    let (first, second) = two_turns(engine.clone()).await;
    let after = params_of(&engine, Method::AfterTurn);
    assert_eq!(after.len(), 2, "one afterTurn per turn: {after:#?}");
    assert_eq!(
        after[0]["prePromptMessageCount"], 0,
        "the first turn has no history before it"
    );
    assert_eq!(
        after[0]["messages"].as_array().unwrap(),
        &as_json(&first.messages),
        "afterTurn of turn 1: its messages"
    );
    assert_eq!(
        after[1]["prePromptMessageCount"],
        first.messages.len(),
        "prePromptMessageCount = the history messages before the turn (turn 1's user and assistant)"
    );
    let view = after[1]["messages"].as_array().unwrap();
    let pre = first.messages.len();
    assert_eq!(
        &view[..pre],
        &as_json(&first.messages)[..],
        "the view starts with the history"
    );
    assert_eq!(
        &view[pre..],
        &as_json(&second.messages)[..],
        "past prePromptMessageCount: exactly the turn's messages"
    );
    assert_eq!(
        engine.call_count(Method::IngestBatch),
        0,
        "afterTurn beats ingestBatch"
    );
    assert_eq!(
        engine.call_count(Method::Ingest),
        0,
        "afterTurn beats ingest"
    );
}

/// Where the runtime's compaction outcome gets a successor identity pinned on: the runtime's
/// own services with `compact_session`'s result naming a successor session.
struct ReportsSuccessor {
    runtime: Arc<dyn RuntimeServices>,
    agent_id: Option<&'static str>,
    session_key: Option<&'static str>,
}

const SUCCESSOR: &str = "successor-session-1";

#[async_trait]
impl RuntimeServices for ReportsSuccessor {
    async fn compact_session(
        &self,
        request: RuntimeCompactionRequest,
    ) -> Result<RuntimeCompactionOutcome, EngineError> {
        let mut outcome = self.runtime.compact_session(request).await?;
        let detail = outcome
            .result
            .as_mut()
            .expect("the runtime's compaction produced a result to name a successor in");
        detail.session_id = Some(SUCCESSOR.into());
        detail.agent_id = self.agent_id.map(str::to_owned);
        detail.session_key = self.session_key.map(str::to_owned);
        Ok(outcome)
    }
}

/// `legacy` whose runtime compaction reports a successor with the given identity.
struct LegacyWithSuccessor {
    agent_id: Option<&'static str>,
    session_key: Option<&'static str>,
}

#[async_trait]
impl ContextEngine for LegacyWithSuccessor {
    fn info(&self) -> ContextEngineInfo {
        ContextEngineInfo {
            id: "legacy-successor".into(),
            ..legacy_info()
        }
    }
    fn methods(&self) -> MethodSet {
        LegacyEngine.methods()
    }
    fn is_runtime_compaction_delegate(&self) -> bool {
        true
    }
    async fn ingest(
        &self,
        p: &IngestParams,
        cx: &CallContext,
    ) -> Result<IngestResult, EngineError> {
        LegacyEngine.ingest(p, cx).await
    }
    async fn assemble(
        &self,
        p: &AssembleParams,
        cx: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        LegacyEngine.assemble(p, cx).await
    }
    async fn after_turn(&self, p: &AfterTurnParams, cx: &CallContext) -> Result<(), EngineError> {
        LegacyEngine.after_turn(p, cx).await
    }
    async fn compact(
        &self,
        p: &CompactParams,
        cx: &CallContext,
    ) -> Result<CompactResult, EngineError> {
        let runtime = cx
            .services
            .clone()
            .expect("the runtime passes its services to compact");
        let services: Arc<dyn RuntimeServices> = Arc::new(ReportsSuccessor {
            runtime,
            agent_id: self.agent_id,
            session_key: self.session_key,
        });
        delegate_compaction_to_runtime(
            p,
            &CallContext {
                abort: cx.abort.clone(),
                services: Some(services),
                served: None,
            },
        )
        .await
    }
}

/// Three turns, then `/compact` through [`LegacyWithSuccessor`]: the compaction's result and the
/// session id the key points at before and after.
async fn compact_reporting(
    agent_id: Option<&'static str>,
    session_key: Option<&'static str>,
) -> (
    std::result::Result<CompactResult, RuntimeError>,
    String,
    String,
) {
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let engine = Arc::new(LegacyWithSuccessor {
        agent_id,
        session_key,
    });
    let rt = AgentRuntime::builder(dir.path(), engine, llm.backend(WINDOW, MAX_OUT)).build();
    llm.push([
        text("First answer."),
        text("Second answer."),
        text("Third answer."),
    ]);
    for i in 0..3 {
        rt.run_turn(TurnRequest::new(
            KEY,
            format!("question {i} about the registry"),
        ))
        .await
        .unwrap();
    }
    let before = rt.session(KEY).unwrap().entry.session_id;
    let result = rt.compact(KEY, None).await;
    let after = rt.session(KEY).unwrap().entry.session_id;
    rt.shutdown().await;
    (result, before, after)
}

fn assert_fails_with(
    result: std::result::Result<CompactResult, RuntimeError>,
    expected: &str,
    case: &str,
) {
    match result {
        Err(RuntimeError::Engine { method, source, .. }) => {
            assert_eq!(method, "compact", "{case}");
            assert_eq!(source.to_string(), expected, "§7.2 {case}: the exact error text");
        }
        other => panic!("§7.2 {case}: the runtime reported a conflicting successor, so compact must fail with {expected:?}; got {other:?}"),
    }
}

#[tokio::test]
async fn a_runtime_successor_from_another_agent_is_rejected_with_the_exact_text_s7_2() {
    let (result, before, after) = compact_reporting(Some("ops"), None).await;
    assert_fails_with(
        result,
        SUCCESSOR_CONFLICT,
        "successor agent `ops` for caller agent `main`",
    );
    assert_eq!(
        after, before,
        "§7.2: a rejected successor never moves the session key"
    );
}

#[tokio::test]
async fn a_runtime_successor_whose_key_names_another_agent_is_rejected_with_the_exact_text_s7_2() {
    let (result, before, after) = compact_reporting(Some("main"), Some("agent:ops:main")).await;
    assert_fails_with(
        result,
        SUCCESSOR_KEY_AGENT_CONFLICT,
        "successor key `agent:ops:main` with agent id `main`",
    );
    assert_eq!(
        after, before,
        "§7.2: a rejected successor never moves the session key"
    );
}

#[tokio::test]
async fn a_runtime_successor_of_the_same_identity_is_followed_s7_2() {
    // The control for the two above: the same successor with an agreeing identity (trimmed)
    // is accepted, so what they reject is the conflict and nothing else.
    let (result, before, after) = compact_reporting(Some(" main "), Some("agent:main:main")).await;
    let result =
        result.unwrap_or_else(|e| panic!("§7.2: an agreeing successor identity is accepted: {e}"));
    assert!(result.ok && result.compacted, "{result:?}");
    let target = result
        .result
        .and_then(|r| r.session_target)
        .expect("§7.2: the typed successor sessionTarget is derived");
    assert_eq!(target.session_id.as_deref(), Some(SUCCESSOR));
    assert_ne!(before, SUCCESSOR);
    assert_eq!(
        after, SUCCESSOR,
        "§1.3: the session key follows the compaction successor"
    );
}
