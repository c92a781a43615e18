//! `TurnRequest::answered`: a server's client gets the turn's answer once it is in the
//! transcript and the engine has the turn, without waiting for the session's counters and the
//! engine's turn maintenance; the turn's own future still ends after those.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use clawctx_engine::*;
use clawctx_protocol::*;
use clawctx_runtime::*;
use clawctx_test_support::test_engine::TestEngine;
use common::*;

const KEY: &str = "agent:main:main";

/// A foreground engine (the turn waits for its maintain) whose maintain holds until released.
struct HeldMaintain {
    inner: TestEngine,
    release: tokio::sync::Semaphore,
}

#[async_trait::async_trait]
impl ContextEngine for HeldMaintain {
    fn info(&self) -> ContextEngineInfo {
        ContextEngineInfo {
            turn_maintenance_mode: Some(TurnMaintenanceMode::Foreground),
            ..self.inner.info()
        }
    }
    fn methods(&self) -> MethodSet {
        self.inner.methods()
    }
    async fn ingest(
        &self,
        p: &IngestParams,
        cx: &CallContext,
    ) -> Result<IngestResult, EngineError> {
        self.inner.ingest(p, cx).await
    }
    async fn assemble(
        &self,
        p: &AssembleParams,
        cx: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        self.inner.assemble(p, cx).await
    }
    async fn compact(
        &self,
        p: &CompactParams,
        cx: &CallContext,
    ) -> Result<CompactResult, EngineError> {
        self.inner.compact(p, cx).await
    }
    async fn after_turn(&self, p: &AfterTurnParams, cx: &CallContext) -> Result<(), EngineError> {
        self.inner.after_turn(p, cx).await
    }
    async fn maintain(
        &self,
        p: &MaintainParams,
        cx: &CallContext,
    ) -> Result<TranscriptRewriteResult, EngineError> {
        let permit = self
            .release
            .acquire()
            .await
            .map_err(|_| EngineError::failed("closed"))?;
        permit.forget();
        self.inner.maintain(p, cx).await
    }
}

#[tokio::test]
async fn the_answer_is_sent_after_the_engine_has_the_turn_and_before_turn_maintenance() {
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let engine = Arc::new(HeldMaintain {
        inner: TestEngine::new("held"),
        release: tokio::sync::Semaphore::new(0),
    });
    let rt = AgentRuntime::builder(dir.path(), engine.clone(), llm.backend(8192, 512)).build();
    llm.push([text("the answer")]);

    let (tx, mut answered) = tokio::sync::mpsc::unbounded_channel();
    let request = TurnRequest {
        answered: Some(tx),
        ..TurnRequest::new(KEY, "the question")
    };
    let turn = tokio::spawn({
        let rt = rt.clone();
        async move { rt.run_turn(request).await }
    });

    let early = tokio::time::timeout(Duration::from_secs(20), answered.recv())
        .await
        .expect("the answer must come while the engine's maintain is still held")
        .expect("the answer is sent");
    assert_eq!(early.reply, "the answer");
    assert_eq!(early.engine, "held");
    assert!(
        !turn.is_finished(),
        "the turn itself waits for its maintenance"
    );
    let stored: Vec<String> = engine
        .inner
        .stored(&early.session_id)
        .iter()
        .map(AgentMessage::plain_text)
        .collect();
    assert!(
        stored.iter().any(|t| t == "the question") && stored.iter().any(|t| t == "the answer"),
        "the engine has the turn before the caller is answered: {stored:?}"
    );

    engine.release.add_permits(16);
    let full = tokio::time::timeout(Duration::from_secs(20), turn)
        .await
        .expect("the turn ends")
        .unwrap()
        .unwrap();
    assert_eq!(full.reply, early.reply);
    assert!(
        engine.inner.call_count(Method::Maintain) >= 1,
        "maintenance ran after the answer"
    );
    assert!(answered.recv().await.is_none(), "the answer is sent once");
}

#[tokio::test]
async fn a_turn_that_fails_before_its_answer_sends_none() {
    let dir = tempfile::tempdir().unwrap();
    // No reply scripted: the model call fails, so the turn has no answer.
    let llm = MockLlm::start().await;
    let rt = AgentRuntime::builder(
        dir.path(),
        Arc::new(TestEngine::new("plain")),
        llm.backend(8192, 512),
    )
    .build();
    let (tx, mut answered) = tokio::sync::mpsc::unbounded_channel();
    let request = TurnRequest {
        answered: Some(tx),
        ..TurnRequest::new(KEY, "q")
    };
    let result = rt.run_turn(request).await;
    assert!(
        result.is_err(),
        "a model without a reply fails the turn: {result:?}"
    );
    assert!(
        answered.recv().await.is_none(),
        "nothing is announced for a turn without an answer"
    );
}
