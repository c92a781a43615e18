//! The host's own prompt overhead (issue #28 item 6). OpenClaw renders its system prompt and
//! tool schemas itself and passes `assemble` the window less that overhead, but `commitTurn`
//! and `maintain` the whole window; since the engine owns compaction OpenClaw skips its own
//! overflow precheck. Compacting against the whole window let the stored history grow past
//! the room the next request has (one request reached ~47k tokens against a 40k window). The
//! engine compacts against the smallest budget the conversation's last turn assembled with.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use clawctx_engine::ContextEngine;
use clawctx_lossless::*;
use clawctx_protocol::*;
use common::*;

/// The model's window, as OpenClaw passes it to `commitTurn` and `maintain`.
const WINDOW: u64 = 2_000;
/// The first assemble's budget: the window less the host's system prompt and tools.
const MESSAGE_BUDGET: u64 = 1_200;
/// The second assemble's budget (the window less the pending prompt).
const SECOND_ASSEMBLE: u64 = 1_800;

fn cfg() -> LosslessConfig {
    LosslessConfig {
        fresh_tail_count: 4,
        leaf_chunk_tokens: 300,
        leaf_min_fanout: 2,
        min_salient_retention: 0.0,
        ..Default::default()
    }
}

fn whole_window() -> Option<ContextEngineRuntimeContext> {
    Some(ContextEngineRuntimeContext {
        token_budget: Some(WINDOW),
        ..Default::default()
    })
}

fn commit(t: usize, messages: Vec<AgentMessage>) -> CommitTurnParams {
    CommitTurnParams {
        runtime_context: whole_window(),
        ..commit_params(t, messages)
    }
}

fn background_maintain() -> MaintainParams {
    MaintainParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        runtime_context: Some(ContextEngineRuntimeContext {
            allow_deferred_compaction_execution: Some(true),
            ..whole_window().unwrap()
        }),
        ..Default::default()
    }
}

async fn frontier_tokens(e: &LosslessEngine) -> u64 {
    let convs = e.recall().conversations().await.unwrap();
    convs.first().map_or(0, |c| c.frontier_tokens.max(0) as u64)
}

/// Turns the way OpenClaw 2026.9 runs them: two assembles, `commitTurn`, then background
/// maintenance, the last three with the whole window. After every turn the stored history
/// fits the first assemble's budget: background maintenance compacts at that budget's
/// threshold, not the window's (which would let it grow to 1,500 tokens here).
#[tokio::test]
async fn compaction_counts_the_room_the_host_left_for_messages_not_the_whole_window() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir, cfg());
    let mut rng = Lcg(28);
    let mut history: Vec<AgentMessage> = Vec::new();
    let mut highest = 0;
    let mut compacted = false;
    for t in 0..60 {
        let msgs = turn(&mut rng, t, false, 12);
        let mut prompt = history.clone();
        prompt.push(msgs[0].clone());
        let first = e
            .assemble(&assemble_params(prompt.clone(), MESSAGE_BUDGET), &cx())
            .await
            .unwrap();
        e.assemble(&assemble_params(first.messages, SECOND_ASSEMBLE), &cx())
            .await
            .unwrap();
        history.extend(msgs.clone());
        let before = frontier_tokens(&e).await;
        e.commit_turn(&commit(t, msgs), &cx()).await.unwrap();
        let after_commit = frontier_tokens(&e).await;
        assert!(
            after_commit <= MESSAGE_BUDGET,
            "turn {t}: commitTurn left {after_commit} tokens stored, over the {MESSAGE_BUDGET} the host has room for"
        );
        e.maintain(&background_maintain(), &cx()).await.unwrap();
        let settled = frontier_tokens(&e).await;
        assert!(
            settled <= after_commit,
            "turn {t}: maintenance's compaction grew the history from {after_commit} to {settled} tokens"
        );
        compacted |= settled < before;
        highest = highest.max(settled);
    }
    assert!(compacted, "the history never reached the threshold");
    assert!(
        highest <= MESSAGE_BUDGET,
        "background maintenance let the history reach {highest} tokens, over the {MESSAGE_BUDGET} the host has room for (the window's threshold is {})",
        e.config().threshold_tokens(WINDOW),
    );
}

/// A conversation the host never assembled (an engine-API `afterTurn` only, or the first turn
/// after a restart) compacts against the budget it is given, and another session's smaller
/// assemble budget does not apply to it.
#[tokio::test]
async fn without_an_assemble_the_given_budget_counts() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir, cfg());
    let mut other = assemble_params(vec![AgentMessage::user("hello")], 400);
    other.session_key = Some("agent:main:other".into());
    other.session_id = "s2".into();
    e.assemble(&other, &cx()).await.unwrap();
    let mut rng = Lcg(29);
    let mut history = Vec::new();
    let mut highest = 0;
    for t in 0..30 {
        let pre = history.len();
        history.extend(turn(&mut rng, t, false, 12));
        e.after_turn(&after_turn(&history, pre, WINDOW), &cx())
            .await
            .unwrap();
        e.maintain(&background_maintain(), &cx()).await.unwrap();
        highest = highest.max(frontier_tokens(&e).await);
    }
    assert!(
        highest > e.config().threshold_tokens(MESSAGE_BUDGET),
        "the history was held to a budget nobody assembled with ({highest} tokens)"
    );
    assert!(highest <= e.config().threshold_tokens(WINDOW));
}

/// A small window (issue #41 item 3): OpenClaw's system prompt alone does not fit it, so its
/// first assemble passes `tokenBudget = 1`; the second passes the window less the prompt. That
/// degenerate budget must not become the turn's compaction limit (it summarized on every
/// turn), and since the host maintains the conversation in the background, `commitTurn` never
/// calls the summarizer: the reply never waits for a summary, `maintain` after it pays the debt
/// at the second assemble's budget.
#[tokio::test]
async fn a_degenerate_assemble_budget_does_not_drive_compaction_and_commit_turn_never_summarizes() {
    let dir = tempfile::tempdir().unwrap();
    let summarizer = FakeSummarizer::new(0);
    let e = engine(&dir, cfg()).with_summarizer(summarizer.clone());
    let mut rng = Lcg(41);
    let mut history: Vec<AgentMessage> = Vec::new();
    let mut maintained_compaction = false;
    let mut highest = 0;
    for t in 0..60 {
        let msgs = turn(&mut rng, t, false, 12);
        let mut prompt = history.clone();
        prompt.push(msgs[0].clone());
        let first = e
            .assemble(&assemble_params(prompt, 1), &cx())
            .await
            .unwrap();
        e.assemble(&assemble_params(first.messages, SECOND_ASSEMBLE), &cx())
            .await
            .unwrap();
        history.extend(msgs.clone());
        let calls = summarizer.calls();
        e.commit_turn(&commit(t, msgs), &cx()).await.unwrap();
        // The first turn comes before the host's first background maintenance: the engine does
        // not know yet, and its history is far below any limit.
        assert_eq!(
            summarizer.calls(),
            calls,
            "turn {t}: commitTurn summarized on the reply path"
        );
        let before = frontier_tokens(&e).await;
        e.maintain(&background_maintain(), &cx()).await.unwrap();
        let settled = frontier_tokens(&e).await;
        maintained_compaction |= settled < before;
        highest = highest.max(settled);
    }
    assert!(maintained_compaction, "maintenance never compacted");
    assert!(
        highest > e.config().threshold_tokens(1_000),
        "the history was held far below the second assemble's budget ({highest} tokens): the degenerate budget drove compaction"
    );
    assert!(
        highest <= e.config().threshold_tokens(SECOND_ASSEMBLE),
        "maintenance compacts at the second assemble's budget ({highest} tokens)"
    );
}
