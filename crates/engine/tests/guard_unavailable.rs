//! A store outage is not a plugin fault (issue #27 item 2): an engine whose calls fail with
//! [`EngineError::Unavailable`] is not quarantined; `assemble` is answered by `legacy` for
//! that call only, `commitTurn` and the other calls return the error (the host keeps the
//! commit), and the engine serves again as soon as its store is back. A real fault still
//! quarantines as the contract says.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use clawctx_engine::*;
use clawctx_protocol::*;

/// An engine whose store is down while `down` is set, or that fails for real with `broken`.
#[derive(Default)]
struct Flaky {
    down: AtomicBool,
    broken: AtomicBool,
    assembled: AtomicUsize,
}

impl Flaky {
    fn check(&self) -> Result<(), EngineError> {
        if self.broken.load(Ordering::SeqCst) {
            return Err(EngineError::failed("flaky: a real bug"));
        }
        if self.down.load(Ordering::SeqCst) {
            return Err(EngineError::Unavailable(
                "cannot reach the PostgreSQL database at db.example:5432/ctx: connection refused"
                    .into(),
            ));
        }
        Ok(())
    }
}

struct Engine(Arc<Flaky>);

#[async_trait]
impl ContextEngine for Engine {
    fn info(&self) -> ContextEngineInfo {
        ContextEngineInfo::new("flaky", "Flaky")
    }
    fn methods(&self) -> MethodSet {
        MethodSet::of(&[Method::Ingest, Method::Assemble, Method::Compact]).with(Method::CommitTurn)
    }
    async fn probe(&self) -> Result<(), EngineError> {
        self.0.check()
    }
    async fn ingest(&self, _: &IngestParams, _: &CallContext) -> Result<IngestResult, EngineError> {
        self.0.check()?;
        Ok(IngestResult { ingested: true })
    }
    async fn assemble(
        &self,
        p: &AssembleParams,
        _: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        self.0.check()?;
        self.0.assembled.fetch_add(1, Ordering::SeqCst);
        Ok(AssembleResult {
            messages: vec![AgentMessage::user("from the engine's store")],
            estimated_tokens: 10 + p.messages.len() as u64,
            ..Default::default()
        })
    }
    async fn compact(
        &self,
        _: &CompactParams,
        _: &CallContext,
    ) -> Result<CompactResult, EngineError> {
        self.0.check()?;
        Ok(CompactResult::default())
    }
    async fn commit_turn(
        &self,
        _: &CommitTurnParams,
        _: &CallContext,
    ) -> Result<CommitTurnResult, EngineError> {
        self.0.check()?;
        Ok(CommitTurnResult {
            status: CommitTurnStatus::Committed,
        })
    }
}

fn guarded(flaky: &Arc<Flaky>) -> (Arc<ContextEngineRegistry>, GuardedEngine) {
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    let g = GuardedEngine::new(
        Arc::new(Engine(flaky.clone())),
        "flaky",
        Some("plugin:flaky".into()),
        registry.clone(),
        Default::default(),
    );
    (registry, g)
}

fn assemble_params() -> AssembleParams {
    AssembleParams {
        session_id: "s".into(),
        messages: vec![AgentMessage::user("from the transcript")],
        token_budget: Some(1_000),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_store_outage_does_not_quarantine_and_the_engine_serves_again_when_it_is_back() {
    let flaky = Arc::new(Flaky::default());
    let (registry, g) = guarded(&flaky);
    let cx = CallContext::none();
    flaky.down.store(true, Ordering::SeqCst);

    let a = g.assemble(&assemble_params(), &cx).await.unwrap();
    assert_eq!(
        a.messages[0].plain_text(),
        "from the transcript",
        "legacy answers this call from the host's messages"
    );
    let commit = g.commit_turn(&CommitTurnParams::default(), &cx).await;
    assert!(
        matches!(&commit, Err(EngineError::Unavailable(m)) if m.contains("db.example:5432")),
        "the commit is not acknowledged (the host keeps it), and the error names the database: {commit:?}"
    );
    assert!(g.compact(&CompactParams::default(), &cx).await.is_err());
    assert!(!g.is_quarantined(), "an outage is not a fault");
    assert!(registry.quarantines().is_empty());
    assert!(g.unavailable().unwrap().contains("connection refused"));
    assert!(g.probe().await.is_err());

    flaky.down.store(false, Ordering::SeqCst);
    g.probe().await.unwrap();
    assert_eq!(
        g.unavailable(),
        None,
        "a probe that reaches the store clears it"
    );
    let a = g.assemble(&assemble_params(), &cx).await.unwrap();
    assert_eq!(a.messages[0].plain_text(), "from the engine's store");
    assert_eq!(flaky.assembled.load(Ordering::SeqCst), 1);
    g.commit_turn(&CommitTurnParams::default(), &cx)
        .await
        .unwrap();
    assert_eq!(g.info().id, "flaky");
}

#[tokio::test]
async fn a_real_fault_still_quarantines() {
    let flaky = Arc::new(Flaky::default());
    let (registry, g) = guarded(&flaky);
    flaky.broken.store(true, Ordering::SeqCst);
    let a = g
        .assemble(&assemble_params(), &CallContext::none())
        .await
        .unwrap();
    assert_eq!(a.messages[0].plain_text(), "from the transcript");
    assert!(g.is_quarantined());
    assert_eq!(registry.quarantines().len(), 1);
}
