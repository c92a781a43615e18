//! A plugin call's deadline does not count the time the host spends serving the call's own
//! `host/llm.complete` (issue #27 item 6): a compaction that summarizes through the host for
//! longer than the plugin's timeout was killed for the host's slowness. Here each of the three
//! completions of one `assemble` (fixture `tests/fixtures/lazy-llm`) takes 1.5 s on the host,
//! 4.5 s in all, against a 2 s call timeout; the plugin's own time is a few milliseconds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use clawctx_engine::*;
use clawctx_protocol::*;
use common::*;
use serde_json::json;

/// A host model that takes its time.
#[derive(Default)]
struct SlowModel {
    calls: AtomicUsize,
}

#[async_trait]
impl RuntimeServices for SlowModel {
    async fn llm_complete(
        &self,
        request: LlmCompleteRequest,
    ) -> Result<LlmCompleteResult, EngineError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        Ok(LlmCompleteResult {
            text: format!("answer to {}", request.prompt),
            usage: None,
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosts_time_serving_llm_complete_does_not_count_against_the_plugins_deadline() {
    require("node");
    let tmp = tempfile::tempdir().unwrap();
    let mut opts = options(tmp.path());
    opts.call_timeout = Some(Duration::from_secs(2));
    let (registry, engine, loaded) = load_selected(
        &fixture("lazy-llm"),
        config("lazy-llm", "lazy-llm", json!({})),
        "lazy-llm",
        opts,
    )
    .await;
    let model = Arc::new(SlowModel::default());
    let cx = CallContext::none().with_services(model.clone());
    let params = AssembleParams {
        session_id: "s".into(),
        messages: conversation(),
        token_budget: Some(10_000),
        ..Default::default()
    };
    let got = engine.assemble(&params, &cx).await;
    let got = got.unwrap_or_else(|e| {
        panic!(
            "the call failed: {e}; quarantines: {:?}",
            registry.quarantines()
        )
    });
    assert_eq!(
        got.system_prompt_addition.as_deref(),
        Some("answer to one | answer to two | answer to three"),
        "quarantines: {:?}",
        registry.quarantines()
    );
    assert_eq!(model.calls.load(Ordering::SeqCst), 3);
    assert!(
        registry.quarantines().is_empty(),
        "{:?}",
        registry.quarantines()
    );
    loaded.host.shutdown().await;
}
