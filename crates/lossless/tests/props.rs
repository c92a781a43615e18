//! Property tests: over random conversations with tool calls, random compactions and random
//! budgets, assembly is never over budget, reports its estimate exactly, keeps tool pairs
//! intact, and doctor stays clean.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use clawctx_engine::ContextEngine;
use clawctx_lossless::*;
use clawctx_protocol::AgentMessage;
use clawctx_tokens::message_tokens;
use common::*;
use proptest::prelude::*;

fn run(seed: u64, turns: usize, sizes: Vec<usize>, compact_every: usize, budgets: Vec<u64>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LosslessConfig {
            fresh_tail_count: 3,
            leaf_chunk_tokens: 300,
            leaf_min_fanout: 2,
            ..Default::default()
        };
        let e = engine(&dir, cfg);
        let mut rng = Lcg(seed);
        let mut history: Vec<AgentMessage> = Vec::new();
        for t in 0..turns {
            let size = sizes[t % sizes.len()];
            let pre = history.len();
            let tools = rng.below(3) as usize;
            let ts = 1_000 + t as i64 * 10;
            history.push(
                AgentMessage::user(format!("u{t} {}", words(&mut rng, size))).with_timestamp(ts),
            );
            if tools > 0 {
                // One assistant message with several calls, then their results.
                let calls: Vec<_> = (0..tools)
                    .map(|k| {
                        clawctx_protocol::ContentBlock::ToolCall(clawctx_protocol::ToolCall {
                            id: format!("c{t}_{k}"),
                            name: "exec".into(),
                            arguments: serde_json::json!({"cmd": words(&mut rng, 3)}),
                            thought_signature: None,
                            extra: Default::default(),
                        })
                    })
                    .collect();
                history.push(AgentMessage::Assistant(
                    clawctx_protocol::AssistantMessage {
                        content: clawctx_protocol::Content::Blocks(calls),
                        timestamp: Some((ts + 1).into()),
                        ..Default::default()
                    },
                ));
                for k in 0..tools {
                    history.push(
                        AgentMessage::tool_result(
                            format!("c{t}_{k}"),
                            "exec",
                            words(&mut rng, size * 4),
                        )
                        .with_timestamp(ts + 2),
                    );
                }
            }
            history.push(AgentMessage::assistant(words(&mut rng, size)).with_timestamp(ts + 3));
            e.after_turn(&after_turn(&history, pre, 2_000), &cx())
                .await
                .unwrap();
            if compact_every > 0 && t % compact_every == compact_every - 1 {
                e.compact(&compact_params(true, 2_000), &cx())
                    .await
                    .unwrap();
            }
        }
        let mut live = history.clone();
        live.push(AgentMessage::user("the prompt").with_timestamp(99_999));
        for b in budgets {
            let r = e
                .assemble(&assemble_params(live.clone(), b), &cx())
                .await
                .unwrap();
            let sum: u64 = r.messages.iter().map(message_tokens).sum();
            prop_assert_le(sum, b);
            assert_eq!(r.estimated_tokens, sum);
            assert_pairs_intact(&r.messages);
        }
        let doc = e.store().unwrap().doctor().await.unwrap();
        assert!(doc.ok, "{:#?}", doc.issues);
        Ok::<(), TestCaseError>(())
    })
    .unwrap();
}

fn prop_assert_le(a: u64, b: u64) {
    assert!(a <= b, "assembled {a} tokens over budget {b}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn never_over_budget_and_pairs_intact(
        seed in any::<u64>(),
        turns in 1usize..40,
        sizes in proptest::collection::vec(1usize..120, 1..5),
        compact_every in 0usize..6,
        budgets in proptest::collection::vec(1u64..6_000, 1..6),
    ) {
        run(seed, turns, sizes, compact_every, budgets);
    }
}
