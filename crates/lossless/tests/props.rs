//! Property tests: over random conversations with tool calls, random compactions and random
//! budgets, assembly is never over budget, reports its estimate exactly, keeps tool pairs
//! intact, and doctor stays clean; on both backends (a fresh PostgreSQL database per case).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use clawctx_engine::ContextEngine;
use clawctx_lossless::*;
use clawctx_protocol::AgentMessage;
use clawctx_tokens::message_tokens;
use common::*;
use proptest::prelude::*;

/// One case on `store` (`None`: no PostgreSQL server, skip).
fn run(
    store: Option<TestStore>,
    seed: u64,
    turns: usize,
    sizes: Vec<usize>,
    compact_every: usize,
    budgets: Vec<u64>,
) {
    let Some(store) = store else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let cfg = LosslessConfig {
            fresh_tail_count: 3,
            leaf_chunk_tokens: 300,
            leaf_min_fanout: 2,
            ..Default::default()
        };
        let e = store.engine(cfg).await;
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
            assert!(
                sum <= b,
                "{}: assembled {sum} tokens over budget {b}",
                store.name()
            );
            assert_eq!(r.estimated_tokens, sum);
            assert_pairs_intact(&r.messages);
        }
        let doc = e.backend().doctor().await.unwrap();
        assert!(doc.ok, "{}: {:#?}", store.name(), doc.issues);
        Ok::<(), TestCaseError>(())
    })
    .unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn never_over_budget_and_pairs_intact_on_sqlite(
        seed in any::<u64>(),
        turns in 1usize..40,
        sizes in proptest::collection::vec(1usize..120, 1..5),
        compact_every in 0usize..6,
        budgets in proptest::collection::vec(1u64..6_000, 1..6),
    ) {
        run(Some(TestStore::sqlite()), seed, turns, sizes, compact_every, budgets);
    }

    #[test]
    fn never_over_budget_and_pairs_intact_on_postgres(
        seed in any::<u64>(),
        turns in 1usize..40,
        sizes in proptest::collection::vec(1usize..120, 1..5),
        compact_every in 0usize..6,
        budgets in proptest::collection::vec(1u64..6_000, 1..6),
    ) {
        run(TestStore::postgres("props"), seed, turns, sizes, compact_every, budgets);
    }
}
