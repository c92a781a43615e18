//! Overflow recovery (issue #28 item 6): after a provider's context overflow OpenClaw calls
//! `compact({force: true, compactionTarget: "budget", currentTokenCount})` and retries; a
//! compaction that frees nothing fails the user's turn. When every stored message is inside the
//! fresh tail, a forced budget compaction must still summarize (reaching into the fresh tail),
//! never answer `compacted: false` while something could be summarized. Both backends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use clawctx_engine::ContextEngine;
use clawctx_lossless::*;
use clawctx_protocol::*;
use common::*;

/// Six long messages: all inside the default fresh tail (8).
async fn short_heavy_history(e: &LosslessEngine) {
    let mut rng = Lcg(3);
    let mut msgs = Vec::new();
    for t in 0..3 {
        msgs.push(AgentMessage::user(words(&mut rng, 900)).with_timestamp(10 + t * 2));
        msgs.push(AgentMessage::assistant(words(&mut rng, 900)).with_timestamp(11 + t * 2));
    }
    let b = IngestBatchParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        messages: msgs,
        is_heartbeat: None,
    };
    e.ingest_batch(&b, &cx()).await.unwrap();
}

on_both_backends! {
async fn a_forced_budget_compaction_reaches_into_the_fresh_tail(store) {
    // The tail protected by its count alone (six messages of 900 words, far over the default
    // token cap, which would let a plain compaction take them).
    let cfg = LosslessConfig { fresh_tail_max_tokens: u64::MAX / 4, ..Default::default() };
    let e = store.engine(cfg).await;
    short_heavy_history(&e).await;

    // A plain forced compaction keeps the fresh tail: nothing eligible.
    let plain = e.compact(&compact_params(true, 4_000), &cx()).await.unwrap();
    assert!(!plain.compacted, "{plain:?}");
    let mut p = compact_params(true, 4_000);
    p.compaction_target = Some(CompactionTarget::Threshold);
    let threshold = e.compact(&p, &cx()).await.unwrap();
    assert!(!threshold.compacted, "a threshold target keeps the fresh tail: {threshold:?}");

    // The overflow recovery: the host says the request was 9,000 tokens against 4,000.
    let mut p = compact_params(true, 4_000);
    p.compaction_target = Some(CompactionTarget::Budget);
    p.current_token_count = Some(9_000);
    let r = e.compact(&p, &cx()).await.unwrap();
    assert!(r.compacted, "a forced budget compaction must free something: {r:?}");
    let detail = r.result.as_ref().unwrap();
    let before = detail.tokens_before;
    let after = detail.tokens_after.unwrap();
    assert!(after < before, "{r:?}");

    // The context now fits the budget, with the newest message still raw.
    let out = e.assemble(&assemble_params(vec![], 4_000), &cx()).await.unwrap();
    assert!(out.estimated_tokens <= 4_000);
    let texts: Vec<String> = out.messages.iter().map(|m| m.plain_text()).collect();
    assert!(texts.iter().any(|t| t.starts_with("<summary")), "{texts:?}");
}
}
