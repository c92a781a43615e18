//! A plugin that first reads `api.llm` lazily, inside an engine call, can complete more than
//! once in that call (issue #28 item 8): the Node runner used to start tracking calls only at
//! that first read, so the second `complete` (after an await) named no call and the host
//! refused it ("callId missing"), quarantining the plugin. Fixture: `tests/fixtures/lazy-llm`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use clawctx_engine::*;
use clawctx_protocol::*;
use common::*;
use serde_json::json;

#[derive(Default)]
struct Model {
    calls: AtomicUsize,
}

#[async_trait]
impl RuntimeServices for Model {
    async fn llm_complete(
        &self,
        request: LlmCompleteRequest,
    ) -> Result<LlmCompleteResult, EngineError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(LlmCompleteResult {
            text: format!("answer to {}", request.prompt),
            usage: None,
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_first_read_of_api_llm_still_completes_twice_in_one_call() {
    require("node");
    let tmp = tempfile::tempdir().unwrap();
    let (registry, engine, loaded) = load_selected(
        &fixture("lazy-llm"),
        config("lazy-llm", "lazy-llm", json!({})),
        "lazy-llm",
        options(tmp.path()),
    )
    .await;
    let model = Arc::new(Model::default());
    let cx = CallContext::none().with_services(model.clone());
    let params = AssembleParams {
        session_id: "s".into(),
        messages: conversation(),
        token_budget: Some(10_000),
        ..Default::default()
    };
    for round in 0..2 {
        let got = engine.assemble(&params, &cx).await.unwrap();
        assert_eq!(
            got.system_prompt_addition.as_deref(),
            Some("answer to one | answer to two | answer to three"),
            "round {round}: every complete of the call is served: {:?}",
            registry.quarantines()
        );
    }
    assert_eq!(model.calls.load(Ordering::SeqCst), 6);
    assert!(
        registry.quarantines().is_empty(),
        "{:?}",
        registry.quarantines()
    );
    loaded.host.shutdown().await;
}
