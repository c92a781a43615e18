//! The edges of the JSON-RPC exchange with a real plugin process: reply objects with members
//! beside `result` (JSON-RPC allows them; an `"error"` that is not null still makes the reply
//! an error), and plugin→host callbacks that name no call, which must never be served with
//! another call's (another session's) runtime services. Each test ends with `legacy`
//! answering through the quarantine guard and no plugin process left.
//!
//! The plugin is `tests/fixtures/command-faults`, a Python protocol server that writes these
//! lines byte for byte.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clawctx_engine::*;
use clawctx_protocol::*;
use common::*;
use serde_json::json;

fn assemble(session: &str) -> AssembleParams {
    AssembleParams {
        session_id: session.into(),
        messages: conversation(),
        token_budget: Some(10_000),
        ..Default::default()
    }
}

fn quarantine_of(registry: &ContextEngineRegistry) -> (String, String) {
    let q = registry.quarantines();
    let rec = q
        .iter()
        .find(|r| r.engine_id == "faults")
        .unwrap_or_else(|| panic!("no quarantine of faults in {q:?}"));
    (rec.operation.clone(), rec.reason.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_with_extra_members_are_accepted_and_an_error_beside_a_result_is_an_error() {
    require("python3");
    let tmp = tempfile::tempdir().unwrap();
    let config = config(
        "faults",
        "faults",
        json!({"config": {"mode": "extra-members"}}),
    );
    let (registry, engine, loaded) = load_selected(
        &fixture("command-faults"),
        config,
        "faults",
        options(tmp.path()),
    )
    .await;
    let pid = loaded.host.pid().unwrap();
    let cx = CallContext::none();

    // `"error":null` after the result; an unknown member with brackets and quotes in its
    // strings after it; `"error":null` before it with another unknown member.
    for call in 1..=3 {
        let got = engine.assemble(&assemble("s"), &cx).await.unwrap();
        assert_eq!(
            (got.system_prompt_addition.as_deref(), got.estimated_tokens),
            (Some(format!("extra-members reply {call}").as_str()), 1),
            "reply {call} was not the plugin's: {:?}",
            registry.quarantines()
        );
        assert_eq!(got.messages, conversation());
    }
    assert!(registry.quarantines().is_empty());

    // A non-null error beside a result: an error, whatever the result says.
    let got = engine.assemble(&assemble("s"), &cx).await.unwrap();
    assert_eq!(
        (
            got.messages,
            got.estimated_tokens,
            got.system_prompt_addition
        ),
        (conversation(), 0, None),
        "legacy answers"
    );
    let (operation, reason) = quarantine_of(&registry);
    assert_eq!(
        (operation.as_str(), reason.as_str()),
        ("assemble", "both a result and an error: the error wins")
    );

    loaded.host.shutdown().await;
    drop((engine, registry, loaded));
    assert_pid_gone(pid).await;
}

/// Runtime services that count how often the plugin reached them.
#[derive(Default)]
struct Counted {
    llm: AtomicUsize,
    rewrite: AtomicUsize,
}

#[async_trait]
impl RuntimeServices for Counted {
    async fn llm_complete(
        &self,
        _request: LlmCompleteRequest,
    ) -> Result<LlmCompleteResult, EngineError> {
        self.llm.fetch_add(1, Ordering::SeqCst);
        Ok(LlmCompleteResult {
            text: "served with a session's services".into(),
            usage: None,
        })
    }

    async fn rewrite_transcript_entries(
        &self,
        _request: TranscriptRewriteRequest,
    ) -> TranscriptRewriteResult {
        self.rewrite.fetch_add(1, Ordering::SeqCst);
        TranscriptRewriteResult {
            changed: true,
            reason: Some("rewritten with a session's services".into()),
            ..Default::default()
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_without_a_call_id_never_reaches_another_sessions_services() {
    require("python3");
    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("holding-a");
    let config = config(
        "faults",
        "faults",
        json!({"config": {"mode": "callbacks", "marker": marker.display().to_string()}}),
    );
    let (registry, engine, loaded) = load_selected(
        &fixture("command-faults"),
        config,
        "faults",
        options(&tmp.path().join("runtime")),
    )
    .await;
    let pid = loaded.host.pid().unwrap();
    let (services_a, services_b) = (Arc::new(Counted::default()), Arc::new(Counted::default()));

    // Session a's call is in flight (the plugin holds it) with its services...
    let call_a = {
        let engine = engine.clone();
        let cx = CallContext::none().with_services(services_a.clone());
        tokio::spawn(async move { engine.assemble(&assemble("a"), &cx).await })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !marker.exists() {
        assert!(
            Instant::now() < deadline,
            "the plugin never received session a's call"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ...when, during session b's call, the plugin calls back naming no call, or an unknown
    // one. Every such callback is refused; host/log needs no session and is answered.
    let cx_b = CallContext::none().with_services(services_b.clone());
    let got_b = engine.assemble(&assemble("b"), &cx_b).await.unwrap();
    assert_eq!(
        (
            got_b.messages,
            got_b.estimated_tokens,
            got_b.system_prompt_addition
        ),
        (conversation(), 0, None),
        "legacy answers session b"
    );
    let got_a = tokio::time::timeout(Duration::from_secs(10), call_a)
        .await
        .expect("session a's call was never answered")
        .unwrap()
        .unwrap();
    assert_eq!(
        got_a.system_prompt_addition.as_deref(),
        Some("from the plugin")
    );

    for (session, services) in [("a", &services_a), ("b", &services_b)] {
        assert_eq!(
            (
                services.llm.load(Ordering::SeqCst),
                services.rewrite.load(Ordering::SeqCst)
            ),
            (0, 0),
            "a callback naming no call reached session {session}'s services"
        );
    }
    let (operation, reason) = quarantine_of(&registry);
    assert_eq!(operation, "assemble");
    for needle in [
        "host/llm.complete without callId: error host/llm.complete needs the callId of the host request it serves (callId missing)",
        "host/llm.complete with callId 999999: error host/llm.complete names callId 999999, which is not a host request in progress (callId unknown)",
        "host/rewriteTranscriptEntries without callId: error host/rewriteTranscriptEntries needs the callId",
        "host/rewriteTranscriptEntries with callId 999999: error host/rewriteTranscriptEntries names callId 999999",
        "host/log without callId: result null",
    ] {
        assert!(reason.contains(needle), "reason {reason:?} lacks {needle:?}");
    }

    loaded.host.shutdown().await;
    drop((engine, registry, loaded));
    assert_pid_gone(pid).await;
}
