//! Logical-turn resolution and the turn lease (contract §3.5B; checklist §12.1 "Default selection
//! and logical turns", §12.3 logical-turn path).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clawctx_engine::host::{cli_backend_host, embedded_host};
use clawctx_engine::logical_turn::*;
use clawctx_engine::registry::RegisterOptions;
use clawctx_engine::*;
use clawctx_protocol::*;
use clawctx_test_support::logs::CollectingLogger;
use clawctx_test_support::test_engine::{shared_factory, TestEngine};
use serde_json::{json, Value};

fn slot(id: &str) -> Option<Arc<Value>> {
    Some(Arc::new(
        json!({"plugins": {"slots": {"contextEngine": id}}}),
    ))
}

fn registry() -> (Arc<ContextEngineRegistry>, Arc<CollectingLogger>) {
    let r = Arc::new(ContextEngineRegistry::with_legacy());
    let logs = CollectingLogger::new();
    r.set_logger(logs.clone());
    (r, logs)
}

fn fenced(id: &str) -> TestEngine {
    TestEngine::new(id).with_info(|i| {
        i.transcript_semantics = Some(TranscriptSemantics {
            current_turn_fence: Some(TranscriptSemantics::FENCE_V1.into()),
            turn_advancement_idempotency: Some(TranscriptSemantics::IDEMPOTENCY_V1.into()),
        })
    })
}

// §12.1: missing, discovery-only or factory-failing configured engines degrade to legacy with one
// warning containing `Context engine "<id>" degraded to "legacy"` and the exact §3.5B reasons; no quarantine.
#[tokio::test]
async fn unusable_configured_engines_degrade_for_the_turn_without_quarantine() {
    let (r, logs) = registry();
    r.register_for_owner(
        "disc",
        shared_factory(Arc::new(TestEngine::new("disc")), Default::default()),
        "plugin:disc",
        RegisterOptions {
            lifecycle: Lifecycle::ReadOnlyDiscovery,
            ..Default::default()
        },
    )
    .unwrap();
    r.register_for_owner(
        "boom",
        factory(|_| async { Err(EngineError::failed("factory exploded")) }),
        "plugin:boom",
        RegisterOptions::default(),
    )
    .unwrap();
    for (id, reason) in [
        ("ghost", "context engine \"ghost\" is not registered"),
        (
            "disc",
            "context engine \"disc\" is available for discovery only",
        ),
        ("boom", "factory exploded"),
    ] {
        let before = logs.warnings().len();
        let lease = LogicalTurnLease::create(r.clone(), slot(id), None, None)
            .await
            .unwrap();
        assert!(lease.degraded(), "{id}");
        assert_eq!(lease.degraded_reason().as_deref(), Some(reason));
        assert_eq!(lease.effective_engine_id(), "legacy");
        assert_eq!(lease.engine().info().id, "legacy");
        let new: Vec<String> = logs.warnings()[before..].to_vec();
        assert_eq!(new.len(), 1, "exactly one warning for {id}: {new:?}");
        assert!(
            new[0].contains(&format!("Context engine \"{id}\" degraded to \"legacy\"")),
            "{}",
            new[0]
        );
    }
    assert!(
        r.quarantines().is_empty(),
        "the logical-turn path never quarantines"
    );
}

// §12.1: configured legacy (explicit or implicit) never warns and is never degraded, even with a
// receipt but no fencing.
#[tokio::test]
async fn configured_legacy_is_never_degraded() {
    let (r, logs) = registry();
    for config in [None, slot("legacy")] {
        let lease = LogicalTurnLease::create(r.clone(), config, None, None)
            .await
            .unwrap();
        lease.begin().unwrap();
        for rec in [
            TurnRecorderState {
                persisted: true,
                has_receipt: false,
            },
            TurnRecorderState {
                persisted: true,
                has_receipt: true,
            },
        ] {
            assert_eq!(
                lease.select_for_transcript_host(rec).unwrap().info().id,
                "legacy"
            );
        }
        assert!(!lease.degraded());
    }
    assert!(logs.lines().is_empty());
}

// §12.1 recorder state: persisted without receipt → legacy ("admission receipt is unavailable");
// not persisted and fenced → configured; not persisted and unfenced → legacy ("fencing is not declared").
#[tokio::test]
async fn transcript_host_selection_follows_the_recorder() {
    let (r, _) = registry();
    r.register_for_owner(
        "fenced",
        shared_factory(Arc::new(fenced("fenced")), Default::default()),
        "plugin:fenced",
        RegisterOptions::default(),
    )
    .unwrap();
    r.register_for_owner(
        "plain",
        shared_factory(Arc::new(TestEngine::new("plain")), Default::default()),
        "plugin:plain",
        RegisterOptions::default(),
    )
    .unwrap();

    let lease = LogicalTurnLease::create(r.clone(), slot("fenced"), None, None)
        .await
        .unwrap();
    let e = lease
        .select_for_transcript_host(TurnRecorderState {
            persisted: true,
            has_receipt: false,
        })
        .unwrap();
    assert_eq!(
        (e.info().id.as_str(), lease.degraded_reason().as_deref()),
        ("legacy", Some(RECEIPT_UNAVAILABLE))
    );

    let lease = LogicalTurnLease::create(r.clone(), slot("fenced"), None, None)
        .await
        .unwrap();
    let e = lease
        .select_for_transcript_host(TurnRecorderState::default())
        .unwrap();
    assert_eq!(e.info().id, "fenced");
    assert!(!lease.degraded());

    let lease = LogicalTurnLease::create(r.clone(), slot("plain"), None, None)
        .await
        .unwrap();
    let e = lease
        .select_for_transcript_host(TurnRecorderState::default())
        .unwrap();
    assert_eq!(
        (e.info().id.as_str(), lease.degraded_reason().as_deref()),
        ("legacy", Some(FENCING_NOT_DECLARED))
    );
}

// §12.1 [G2]: a custom engine whose info.id is "legacy" but whose registered id differs still
// degrades with "current-turn transcript fencing is not declared".
#[tokio::test]
async fn registered_identity_counts_not_info_id() {
    let (r, _) = registry();
    r.register_for_owner(
        "impostor",
        shared_factory(Arc::new(TestEngine::new("legacy")), Default::default()),
        "plugin:impostor",
        RegisterOptions::default(),
    )
    .unwrap();
    let lease = LogicalTurnLease::create(r, slot("impostor"), None, None)
        .await
        .unwrap();
    lease
        .select_for_transcript_host(TurnRecorderState::default())
        .unwrap();
    assert_eq!(
        lease.degraded_reason().as_deref(),
        Some(FENCING_NOT_DECLARED)
    );
}

// §12.1: begin() pins: degradeBeforeStart throws "already pinned"; a change to a host missing a
// required capability throws the exact message; the same host again returns the same engine.
#[tokio::test]
async fn begin_pins_the_selection() {
    let (r, _) = registry();
    let engine = TestEngine::new("needs").with_info(|i| {
        let mut reqs = std::collections::BTreeMap::new();
        reqs.insert(
            ContextEngineOperation::AgentRun,
            ContextEngineHostRequirements {
                required_capabilities: vec!["assemble-before-prompt".into()],
                unsupported_message: None,
            },
        );
        i.host_requirements = Some(reqs);
    });
    r.register_for_owner(
        "needs",
        shared_factory(Arc::new(engine), Default::default()),
        "plugin:needs",
        RegisterOptions::default(),
    )
    .unwrap();
    let lease = LogicalTurnLease::create(r, slot("needs"), None, None)
        .await
        .unwrap();
    let first = lease.select_host(&embedded_host()).unwrap();
    lease.begin().unwrap();
    assert_eq!(
        lease.degrade_before_start("late").unwrap_err().to_string(),
        ALREADY_PINNED
    );
    let again = lease.select_host(&embedded_host()).unwrap();
    assert!(
        Arc::ptr_eq(&first, &again),
        "repeating the same host returns the same engine"
    );
    let err = lease
        .select_host(&cli_backend_host("claude-cli", None))
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        err,
        "context-engine logical turn cannot change to incompatible agent harness \"CLI backend \"claude-cli\"\": host \"cli:claude-cli\" is missing assemble-before-prompt"
    );
}

// §12.1: a failing started operation is not replayed; the turn is not degraded; the next turn
// retries the configured engine (assemble called twice in total).
#[tokio::test]
async fn failures_inside_a_turn_propagate_and_the_next_turn_retries() {
    let (r, _) = registry();
    let engine = Arc::new(TestEngine::new("flaky").failing(Method::Assemble, "assemble failed"));
    let calls = Arc::new(AtomicUsize::new(0));
    r.register_for_owner(
        "flaky",
        shared_factory(engine.clone(), calls.clone()),
        "plugin:flaky",
        RegisterOptions::default(),
    )
    .unwrap();
    let p = AssembleParams {
        session_id: "s".into(),
        ..Default::default()
    };
    for _turn in 0..2 {
        let lease = LogicalTurnLease::create(r.clone(), slot("flaky"), None, None)
            .await
            .unwrap();
        lease.begin().unwrap();
        let err = lease
            .engine()
            .assemble(&p, &CallContext::none())
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "assemble failed");
        assert!(!lease.degraded());
        lease.dispose().await;
    }
    assert_eq!(engine.call_count(Method::Assemble), 2);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "a fresh instance per logical turn"
    );
    assert!(r.quarantines().is_empty());
}

// §12.1: dispose runs once; a double dispose is a no-op; begin() after dispose throws "already
// disposed"; a transcript-host selection after disposal throws "already pinned".
#[tokio::test]
async fn dispose_is_idempotent_and_final() {
    let (r, _) = registry();
    let engine = Arc::new(fenced("d"));
    r.register_for_owner(
        "d",
        shared_factory(engine.clone(), Default::default()),
        "plugin:d",
        RegisterOptions::default(),
    )
    .unwrap();
    let lease = LogicalTurnLease::create(r, slot("d"), None, None)
        .await
        .unwrap();
    assert_eq!(lease.dispose().await, CleanupOutcome::Clean);
    assert_eq!(lease.dispose().await, CleanupOutcome::Clean);
    assert_eq!(engine.call_count(Method::Dispose), 1);
    assert_eq!(lease.begin().unwrap_err().to_string(), ALREADY_DISPOSED);
    assert_eq!(
        lease
            .select_for_transcript_host(TurnRecorderState::default())
            .err()
            .unwrap()
            .to_string(),
        ALREADY_PINNED
    );
}

// §12.1: disposal is bounded by the cleanup deadline; a stall makes the outcome "uncertain" and
// does not hold up the caller; a fast failure is also "uncertain".
#[tokio::test]
async fn stalled_or_failed_disposal_is_uncertain() {
    struct Slow(Duration, bool);
    #[async_trait::async_trait]
    impl ContextEngine for Slow {
        fn info(&self) -> ContextEngineInfo {
            ContextEngineInfo::new("slow", "Slow")
        }
        async fn ingest(
            &self,
            _: &IngestParams,
            _: &CallContext,
        ) -> Result<IngestResult, EngineError> {
            Ok(IngestResult::default())
        }
        async fn assemble(
            &self,
            p: &AssembleParams,
            _: &CallContext,
        ) -> Result<AssembleResult, EngineError> {
            Ok(AssembleResult {
                messages: p.messages.clone(),
                ..Default::default()
            })
        }
        async fn compact(
            &self,
            _: &CompactParams,
            _: &CallContext,
        ) -> Result<CompactResult, EngineError> {
            Ok(CompactResult::default())
        }
        async fn dispose(&self) -> Result<(), EngineError> {
            tokio::time::sleep(self.0).await;
            if self.1 {
                Err(EngineError::failed("dispose failed"))
            } else {
                Ok(())
            }
        }
    }
    for (engine, expect) in [
        (Slow(Duration::from_secs(5), false), "timed out"),
        (Slow(Duration::ZERO, true), "dispose failed"),
    ] {
        let (r, _) = registry();
        let e: Arc<dyn ContextEngine> = Arc::new(engine);
        r.register_for_owner(
            "slow",
            factory(move |_| {
                let e = e.clone();
                async move { Ok(e) }
            }),
            "plugin:slow",
            RegisterOptions::default(),
        )
        .unwrap();
        let lease = LogicalTurnLease::create(r, slot("slow"), None, None)
            .await
            .unwrap()
            .with_cleanup_deadline(Duration::from_millis(25));
        let started = std::time::Instant::now();
        let outcome = lease.dispose().await;
        assert!(
            matches!(&outcome, CleanupOutcome::Uncertain(m) if m.contains(expect)),
            "{outcome:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "the caller is not held past the deadline"
        );
    }
}

// §12.3 logical-turn path: policy-disabled selections are ordinary legacy turns (no warning, no
// factory call, not degraded); enabled engines work with equal or distinct owner ids.
#[tokio::test]
async fn policy_and_owner_on_the_logical_turn_path() {
    let (r, logs) = registry();
    let calls = Arc::new(AtomicUsize::new(0));
    r.register_for_owner(
        "lcm",
        shared_factory(Arc::new(TestEngine::new("lcm")), calls.clone()),
        "plugin:lossless-claw",
        RegisterOptions::default(),
    )
    .unwrap();
    let disabled = Some(Arc::new(
        json!({"plugins": {"slots": {"contextEngine": "lcm"}, "entries": {"lossless-claw": {"enabled": false}}}}),
    ));
    let lease = LogicalTurnLease::create(r.clone(), disabled, None, None)
        .await
        .unwrap();
    assert!(!lease.degraded());
    assert_eq!(lease.effective_engine_id(), "legacy");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert!(logs.lines().is_empty());
    let engines = r
        .resolve_logical_turn(slot("lcm"), None, None)
        .await
        .unwrap();
    assert_eq!(engines.configured.registered_id, "lcm");
    assert_eq!(
        engines.configured.owner_plugin_id.as_deref(),
        Some("lossless-claw")
    );
    assert!(engines.configured_failure.is_none());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}
