//! An over-budget `assemble` is never a reason to quarantine (OpenClaw quarantines only on a
//! throw). From a plugin that lets the host compact (`ownsCompaction: false`) it is clamped with
//! one warning (issue #28 item 7): published plugins that delegate compaction return the
//! history they were given. From a plugin that owns compaction it is used as returned, with one
//! warning (issue #39 item 4): OpenClaw 2026.9 skips its precheck for an owning engine and
//! sends its messages. Fixture: `tests/fixtures/history-echo`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use clawctx_engine::*;
use clawctx_protocol::*;
use common::*;
use serde_json::json;

fn long_history() -> Vec<AgentMessage> {
    (0..40)
        .map(|i| {
            let text = format!("message {i}: {}", "lorem ipsum dolor sit amet ".repeat(20));
            if i % 2 == 0 {
                AgentMessage::user(text)
            } else {
                AgentMessage::assistant(text)
            }
            .with_timestamp(i)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegating_plugin_over_budget_is_clamped_with_one_warning_not_quarantined() {
    require("node");
    let (_guard, logs) = clawctx_test_support::logs::capture_tracing();
    let tmp = tempfile::tempdir().unwrap();
    let (registry, engine, loaded) = load_selected(
        &fixture("history-echo"),
        config("history-echo", "history-echo", json!({})),
        "history-echo",
        options(tmp.path()),
    )
    .await;
    let history = long_history();
    let total = clawctx_tokens::messages_tokens(&history);
    let budget = total / 3;
    let params = AssembleParams {
        session_id: "s".into(),
        messages: history.clone(),
        token_budget: Some(budget),
        ..Default::default()
    };
    for _ in 0..3 {
        let got = engine
            .assemble(&params, &CallContext::none())
            .await
            .unwrap();
        assert!(
            registry.quarantines().is_empty(),
            "not quarantined for size: {:?}",
            registry.quarantines()
        );
        let tokens = clawctx_tokens::messages_tokens(&got.messages);
        assert!(
            tokens <= budget,
            "clamped to the budget: {tokens} > {budget}"
        );
        assert_eq!(got.estimated_tokens, tokens);
        assert!(!got.messages.is_empty());
        assert!(
            history.ends_with(&got.messages),
            "the newest messages are kept, as they were"
        );
    }
    let warnings: Vec<String> = logs
        .warnings()
        .into_iter()
        .filter(|w| w.contains("over the token budget"))
        .collect();
    assert_eq!(warnings.len(), 1, "one warning per engine: {warnings:#?}");
    assert!(warnings[0].contains("history-echo"), "{warnings:?}");
    loaded.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_that_owns_compaction_over_budget_is_used_as_returned_not_quarantined() {
    require("node");
    let (_guard, logs) = clawctx_test_support::logs::capture_tracing();
    let tmp = tempfile::tempdir().unwrap();
    let (registry, engine, loaded) = load_selected(
        &fixture("history-echo"),
        config("history-echo", "history-echo-owns", json!({})),
        "history-echo-owns",
        options(tmp.path()),
    )
    .await;
    assert!(engine.info().owns_compaction(), "{:?}", engine.info());
    let history = long_history();
    let total = clawctx_tokens::messages_tokens(&history);
    // A few tokens over, as published plugins are, and far over.
    for budget in [total - 3, total / 3] {
        let params = AssembleParams {
            session_id: "s".into(),
            messages: history.clone(),
            token_budget: Some(budget),
            ..Default::default()
        };
        for _ in 0..2 {
            let got = engine
                .assemble(&params, &CallContext::none())
                .await
                .unwrap();
            assert!(
                registry.quarantines().is_empty(),
                "not quarantined for size: {:?}",
                registry.quarantines()
            );
            assert_eq!(
                got.messages, history,
                "the engine's own answer, as returned"
            );
            assert_ne!(
                got.estimated_tokens, 0,
                "not legacy's answer (it estimates 0)"
            );
        }
    }
    let warnings: Vec<String> = logs
        .warnings()
        .into_iter()
        .filter(|w| w.contains("over the token budget"))
        .collect();
    assert_eq!(warnings.len(), 1, "one warning per engine: {warnings:#?}");
    assert!(
        warnings[0].contains("history-echo-owns") && warnings[0].contains("used as returned"),
        "{warnings:?}"
    );
    loaded.host.shutdown().await;
}
