//! The runtime's built-in compaction (§7.4), the history pipeline (§7.5), and the conformance
//! suite run against `legacy` and the test engine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use clawctx_engine::compaction::cut::is_valid_cut_point;
use clawctx_engine::compaction::*;
use clawctx_engine::pipeline::*;
use clawctx_engine::*;
use clawctx_protocol::transcript::{context_messages, EntryKind, TranscriptEntry};
use clawctx_protocol::*;
use clawctx_test_support::conformance::{self, assert_tool_pairs, maker};
use clawctx_test_support::host::InMemoryHost;
use clawctx_test_support::messages::{conversation, huge_user_message};
use clawctx_test_support::test_engine::TestEngine;
use proptest::prelude::*;
use serde_json::json;

fn path_of(messages: &[AgentMessage]) -> Vec<TranscriptEntry> {
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| TranscriptEntry {
            id: format!("e{i}"),
            parent_id: (i > 0).then(|| format!("e{}", i - 1)),
            timestamp: String::new(),
            kind: EntryKind::Message(m.clone()),
        })
        .collect()
}

// §7.4: a tool result is never a valid cut point; walking back to keepRecentTokens then moving
// forward to the nearest valid cut point. Checked for keep values across the whole window
// against the suffix sums: the cut is a valid cut point, never before the newest entry at which
// the kept tokens reach `keep` (it does not keep more than asked), with no valid cut point
// skipped on the way there; the whole window is kept only when it is smaller than `keep`.
#[test]
fn cut_never_lands_on_a_tool_result() {
    let msgs = conversation(3, 40, 1);
    let path = path_of(&msgs);
    let tokens: Vec<u64> = path
        .iter()
        .map(|e| clawctx_tokens::message_tokens(e.message().unwrap()))
        .collect();
    let kept_from = |i: usize| -> u64 { tokens[i..].iter().sum() };
    let total = kept_from(0);
    let mut moved_forward = 0;
    let keeps = [1u64, 50, 200, 800, 2_000, 5_000]
        .into_iter()
        .chain((1..=total + 200).step_by(97));
    for keep in keeps {
        let cut = find_cut_point(&path, 0, path.len(), keep).unwrap_or_else(|| {
            panic!("§7.4 keep={keep}: a window starting with a user message always has a cut point")
        });
        let first = cut.first_kept_index;
        let entry = &path[first];
        assert!(
            !matches!(entry.kind, EntryKind::Message(AgentMessage::ToolResult(_))),
            "§7.4 keep={keep}: cut at a tool result ({})",
            entry.id
        );
        assert!(
            is_valid_cut_point(entry),
            "§7.4 keep={keep}: the cut ({}) is not a valid cut point",
            entry.id
        );
        if total < keep {
            assert_eq!(
                first, 0,
                "§7.4 keep={keep} > the window's {total} tokens: the whole window is kept"
            );
            continue;
        }
        // Walking back from the newest entry: the first entry at which `keep` is reached.
        let reached = (0..path.len())
            .rev()
            .find(|&i| kept_from(i) >= keep)
            .unwrap();
        assert!(
            first >= reached,
            "§7.4 keep={keep}: the cut at {first} keeps {} tokens, more than needed (the target is reached at {reached})",
            kept_from(first)
        );
        assert!(
            (reached..first).all(|i| !is_valid_cut_point(&path[i])),
            "§7.4 keep={keep}: the cut at {first} skips a valid cut point after {reached}"
        );
        if first == reached {
            assert!(
                kept_from(first) >= keep,
                "§7.4 keep={keep}: kept {} < keep",
                kept_from(first)
            );
        } else {
            moved_forward += 1;
        }
    }
    assert!(moved_forward > 0, "§7.4: some keep value must land on a tool result and move forward, or the test checks nothing of it");
}

// §7.4 split turn: a cut on an assistant message inside a turn summarizes the turn prefix separately.
#[test]
fn split_turn_is_detected() {
    let msgs = vec![
        AgentMessage::user("first request about src/a.rs"),
        AgentMessage::assistant("done with a"),
        AgentMessage::user("second request: refactor the registry"),
        AgentMessage::tool_call("c1", "read_file", json!({"path": "src/registry.rs"})),
        AgentMessage::tool_result("c1", "read_file", "fn register() {}"),
        AgentMessage::assistant(format!("long analysis {}", "word ".repeat(400))),
    ];
    let path = path_of(&msgs);
    let last_tokens = clawctx_tokens::message_tokens(&msgs[5]);
    let cut = find_cut_point(&path, 0, path.len(), last_tokens).unwrap();
    assert_eq!(
        cut.first_kept_index, 5,
        "the cut moves to the assistant message"
    );
    assert_eq!(
        cut.turn_start_index,
        Some(2),
        "the turn starts at the second user message"
    );
    let prep = prepare_compaction(&path, last_tokens).unwrap();
    assert!(prep.is_split_turn());
    assert_eq!(prep.messages_to_summarize.len(), 2);
    assert_eq!(prep.turn_prefix_messages.len(), 3);
    assert_eq!(prep.first_kept_entry_id, "e5");
}

// §7.4: nothing to do when the last entry already is a compaction or the history is short.
#[test]
fn nothing_to_compact_cases() {
    let short = path_of(&[AgentMessage::user("hi"), AgentMessage::assistant("hello")]);
    assert!(prepare_compaction(&short, 20_000).is_none());
    let mut with_compaction = path_of(&conversation(1, 30, 0));
    with_compaction.push(TranscriptEntry {
        id: "c".into(),
        parent_id: None,
        timestamp: String::new(),
        kind: EntryKind::Compaction(clawctx_protocol::transcript::CompactionEntryData {
            summary: "s".into(),
            first_kept_entry_id: "e50".into(),
            ..Default::default()
        }),
    });
    assert!(prepare_compaction(&with_compaction, 10).is_none());
}

// §7.4 end to end through legacy: the summary is injected as a user message with the exact
// prefix/suffix, the kept part follows, update mode carries the previous summary, file ops tracked.
#[tokio::test]
async fn legacy_compaction_through_the_runtime() {
    let host = Arc::new(InMemoryHost::new(CompactionSettings {
        keep_recent_tokens: 2_000,
        ..Default::default()
    }));
    for m in conversation(5, 120, 3) {
        host.append("s", m);
    }
    let before = clawctx_tokens::messages_tokens(&host.context("s"));
    let p = CompactParams {
        session_id: "s".into(),
        session_key: Some("agent:main:main".into()),
        ..Default::default()
    };
    let r = LegacyEngine.compact(&p, &host.services()).await.unwrap();
    assert!(r.ok && r.compacted, "{r:?}");
    let detail = r.result.unwrap();
    assert!(detail.tokens_before > 0 && detail.tokens_after.unwrap() < before);
    let ctx = host.context("s");
    let first = ctx[0].plain_text();
    assert!(
        first.starts_with(COMPACTION_SUMMARY_PREFIX) && first.ends_with(COMPACTION_SUMMARY_SUFFIX),
        "{first:.200}"
    );
    assert!(
        first.contains("<read-files>") && first.contains("src/mod_"),
        "file ops tracked: {first:.400}"
    );
    let after = clawctx_tokens::messages_tokens(&ctx);
    assert!(after < before / 2, "{before} → {after}");
    assert_tool_pairs("legacy", &ctx);
    assert_eq!(
        detail.details.unwrap()["readFiles"]
            .as_array()
            .map(|a| a.is_empty()),
        Some(false)
    );

    // Update mode: a second compaction gets the previous summary and keeps its file list.
    for m in conversation(6, 60, 0) {
        host.append("s", m);
    }
    let r2 = LegacyEngine.compact(&p, &host.services()).await.unwrap();
    assert!(r2.compacted);
    let ctx2 = host.context("s");
    assert!(
        ctx2[0].plain_text().contains("src/mod_2.rs"),
        "previous details are inherited"
    );
    assert_eq!(
        context_messages(&host.path("s"))
            .iter()
            .filter(|m| matches!(m, AgentMessage::CompactionSummary(_)))
            .count(),
        1
    );
}

// §7.4: an error from the summarizer surfaces as "Summarization failed: ...".
#[tokio::test]
async fn summarizer_failure_surfaces() {
    struct Broken;
    #[async_trait::async_trait]
    impl clawctx_summarize::Summarizer for Broken {
        fn name(&self) -> &str {
            "broken"
        }
        async fn summarize(
            &self,
            _r: clawctx_summarize::SummaryRequest,
        ) -> Result<clawctx_summarize::Summary, clawctx_summarize::SummarizeError> {
            Err(clawctx_summarize::SummarizeError::Failed(
                "provider said no".into(),
            ))
        }
    }
    let path = path_of(&conversation(9, 60, 0));
    let err = compact_path(&path, 100, &Broken, 16_384, None)
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "Summarization failed: provider said no");
}

// §7.5 sanitize: orphan results dropped, unanswered calls get a synthetic result, empty aborted
// assistant turns dropped; unknown roles pass through unchanged.
#[test]
fn sanitize_repairs_pairing() {
    let mut weird = JsonMap::new();
    weird.insert("role".into(), json!("system"));
    weird.insert("content".into(), json!("from a plugin"));
    weird.insert("x-extra".into(), json!({"kept": true}));
    let msgs = vec![
        AgentMessage::user("go"),
        AgentMessage::tool_result("ghost", "x", "orphan"),
        AgentMessage::tool_call("c1", "bash", json!({"cmd": "ls"})),
        AgentMessage::user("interrupted"),
        AgentMessage::Assistant(AssistantMessage {
            stop_reason: Some("aborted".into()),
            ..Default::default()
        }),
        AgentMessage::Other(weird.clone()),
    ];
    let mut report = PipelineReport::default();
    let out = sanitize(msgs, &mut report);
    assert_eq!(report.orphan_results_dropped, 1);
    assert_eq!(report.synthetic_results_inserted, 1);
    assert_eq!(report.broken_assistant_dropped, 1);
    assert_eq!(out[2].tool_result_id(), Some("c1"));
    assert!(out[2].plain_text().contains(SYNTHETIC_TOOL_RESULT_TEXT));
    assert_eq!(out.last().unwrap(), &AgentMessage::Other(weird));
    assert_tool_pairs("sanitize", &out);
}

// §7.5 limit: keeps the last N user turns.
#[test]
fn history_turn_limit() {
    let msgs = conversation(2, 10, 0);
    let out = limit_history_turns(msgs.clone(), 3);
    assert_eq!(
        out.iter()
            .filter(|m| matches!(m, AgentMessage::User(_)))
            .count(),
        3
    );
    assert_eq!(out.last(), msgs.last());
}

// Bad input: a message larger than the whole budget is cut, not an error; the result fits.
#[test]
fn oversized_message_is_cut_to_fit() {
    let msgs = vec![AgentMessage::user("hello"), huge_user_message(50_000)];
    let out = prepare_history(
        msgs,
        &PipelineOptions {
            token_budget: Some(1_000),
            ..Default::default()
        },
    );
    assert!(out.report.tokens <= 1_000, "{}", out.report.tokens);
    let text = out.messages.last().unwrap().plain_text();
    assert!(
        text.starts_with("HUGE-START")
            && text.ends_with("HUGE-END")
            && text.contains("tokens omitted")
    );
    assert_eq!(out.report.messages_truncated, 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    // Invariants: the prepared history never exceeds the budget and tool pairs stay intact.
    #[test]
    fn pipeline_never_exceeds_budget(seed in 0u64..10_000, turns in 1usize..40, tool_every in 0usize..4, budget in 50u64..6_000) {
        let msgs = conversation(seed, turns, tool_every);
        let out = prepare_history(msgs, &PipelineOptions { token_budget: Some(budget), ..Default::default() });
        prop_assert!(out.report.tokens <= budget, "{} > {}", out.report.tokens, budget);
        prop_assert_eq!(out.report.tokens, clawctx_tokens::messages_tokens(&out.messages));
        assert_tool_pairs("proptest", &out.messages);
    }
}

#[tokio::test]
async fn conformance_legacy() {
    conformance::run_all(
        "legacy",
        maker(|| Arc::new(LegacyEngine) as Arc<dyn ContextEngine>),
    )
    .await;
}

#[tokio::test]
async fn conformance_test_engine() {
    conformance::run_all(
        "test-engine",
        maker(|| Arc::new(TestEngine::new("test-engine")) as Arc<dyn ContextEngine>),
    )
    .await;
}

/// A summarizer whose turn-prefix summaries come back empty (a prefix with nothing to keep).
struct EmptyPrefix;

#[async_trait::async_trait]
impl clawctx_summarize::Summarizer for EmptyPrefix {
    fn name(&self) -> &str {
        "empty-prefix"
    }
    async fn summarize(
        &self,
        request: clawctx_summarize::SummaryRequest,
    ) -> Result<clawctx_summarize::Summary, clawctx_summarize::SummarizeError> {
        let text = match request.kind {
            clawctx_summarize::SummaryKind::TurnPrefix => String::new(),
            _ => "## Goal\nthe history".to_owned(),
        };
        Ok(clawctx_summarize::Summary {
            text,
            input_tokens: 1,
            output_tokens: 1,
        })
    }
}

// §7.4 split turn: an empty prefix summary adds no empty "Turn Context (split turn)" section.
#[tokio::test]
async fn an_empty_turn_prefix_summary_adds_no_empty_section() {
    let msgs = vec![
        AgentMessage::user("first request about src/a.rs"),
        AgentMessage::assistant("done with a"),
        AgentMessage::user("second request"),
        AgentMessage::assistant(format!("long analysis {}", "word ".repeat(400))),
    ];
    let path = path_of(&msgs);
    let prep = prepare_compaction(&path, clawctx_tokens::message_tokens(&msgs[3])).unwrap();
    assert!(
        prep.is_split_turn(),
        "the cut lands on the last assistant message"
    );
    let out = generate_summary(&prep, &EmptyPrefix, 16_384, None)
        .await
        .unwrap();
    assert!(
        !out.entry.summary.contains("Turn Context"),
        "{}",
        out.entry.summary
    );
    assert!(
        out.entry.summary.starts_with("## Goal\nthe history"),
        "{}",
        out.entry.summary
    );
}
