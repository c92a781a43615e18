//! Registry, slot selection, resolution and quarantine: contract §3, §4 and the checklist §12.1,
//! §12.3. Test names carry the checklist line they cover.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use clawctx_engine::registry::{quarantine_log_line, RegisterOptions, RegisterOutcome};
use clawctx_engine::*;
use clawctx_protocol::*;
use clawctx_test_support::logs::CollectingLogger;
use clawctx_test_support::test_engine::{shared_factory, Fault, TestEngine};
use serde_json::{json, Value};

fn cfg(v: Value) -> Option<Arc<Value>> {
    Some(Arc::new(v))
}

fn slot(id: &str) -> Option<Arc<Value>> {
    cfg(json!({"plugins": {"slots": {"contextEngine": id}}}))
}

fn registry() -> (Arc<ContextEngineRegistry>, Arc<CollectingLogger>) {
    let r = Arc::new(ContextEngineRegistry::with_legacy());
    let logs = CollectingLogger::new();
    r.set_logger(logs.clone());
    (r, logs)
}

fn register_test(
    r: &ContextEngineRegistry,
    id: &str,
    owner: &str,
    engine: Arc<TestEngine>,
) -> Arc<AtomicUsize> {
    let n = Arc::new(AtomicUsize::new(0));
    let out = r
        .register_for_owner(
            id,
            shared_factory(engine, n.clone()),
            owner,
            RegisterOptions::default(),
        )
        .unwrap();
    assert_eq!(out, RegisterOutcome::Ok);
    n
}

fn assemble_params(messages: Vec<AgentMessage>) -> AssembleParams {
    AssembleParams {
        session_id: "s1".into(),
        messages,
        token_budget: Some(10_000),
        ..Default::default()
    }
}

// §12.1 Registry [G2/G3]: a different owner is rejected and the original factory is kept.
#[tokio::test]
async fn different_owner_is_rejected_and_original_factory_kept() {
    let (r, _) = registry();
    let a = Arc::new(TestEngine::new("shared"));
    let calls_a = register_test(&r, "shared", "owner-a", a);
    let b = Arc::new(TestEngine::new("other"));
    let out = r
        .register_for_owner(
            "shared",
            shared_factory(b, Arc::new(AtomicUsize::new(0))),
            "owner-b",
            RegisterOptions::default(),
        )
        .unwrap();
    assert_eq!(
        out,
        RegisterOutcome::Conflict {
            existing_owner: "owner-a".into()
        }
    );
    let resolved = r.resolve(slot("shared"), None, None).await.unwrap();
    assert_eq!(resolved.engine.info().id, "shared");
    assert_eq!(calls_a.load(Ordering::SeqCst), 1);
}

// §12.1 Registry [G2/G3]: "legacy" is reserved even in an empty builder registry.
#[tokio::test]
async fn legacy_id_is_reserved_even_in_an_empty_registry() {
    let r = ContextEngineRegistry::new_builder();
    let out = r
        .register_for_owner(
            "legacy",
            shared_factory(Arc::new(TestEngine::new("x")), Default::default()),
            "plugin:x",
            RegisterOptions::default(),
        )
        .unwrap();
    assert_eq!(
        out,
        RegisterOutcome::Conflict {
            existing_owner: "core".into()
        }
    );
    assert!(
        r.get("legacy").is_none(),
        "nothing may be stored under the reserved id"
    );
}

// §3.1 check 1: an empty owner is an error with the exact text.
#[tokio::test]
async fn empty_owner_is_an_error() {
    let r = ContextEngineRegistry::new();
    let err = r
        .register_for_owner(
            "x",
            shared_factory(Arc::new(TestEngine::new("x")), Default::default()),
            "  ",
            RegisterOptions::default(),
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "registerContextEngineForOwner: owner must be a non-empty string, got \"\""
    );
}

// §12.1 Registry [G2]: the same owner with allowSameOwnerRefresh replaces the factory; without it, it does not.
#[tokio::test]
async fn same_owner_refresh_needs_the_flag() {
    let (r, _) = registry();
    register_test(&r, "e", "plugin:p", Arc::new(TestEngine::new("first")));
    let second = Arc::new(TestEngine::new("second"));
    let refused = r
        .register_for_owner(
            "e",
            shared_factory(second.clone(), Default::default()),
            "plugin:p",
            RegisterOptions::default(),
        )
        .unwrap();
    assert_eq!(
        refused,
        RegisterOutcome::Conflict {
            existing_owner: "plugin:p".into()
        }
    );
    let ok = r
        .register_for_owner(
            "e",
            shared_factory(second, Default::default()),
            "plugin:p",
            RegisterOptions {
                allow_same_owner_refresh: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(ok, RegisterOutcome::Ok);
    assert_eq!(
        r.resolve(slot("e"), None, None)
            .await
            .unwrap()
            .engine
            .info()
            .id,
        "second"
    );
}

// §12.1 listContextEngineIds is sorted (G3).
#[test]
fn ids_are_sorted() {
    let r = ContextEngineRegistry::with_legacy();
    for id in ["zeta", "alpha", "mid"] {
        register_test(&r, id, &format!("test:{id}"), Arc::new(TestEngine::new(id)));
    }
    assert_eq!(r.ids(), vec!["alpha", "legacy", "mid", "zeta"]);
}

// §12.1 Init: ensureContextEnginesInitialized is idempotent and registers legacy.
#[test]
fn ensure_initialized_is_idempotent() {
    let r = ContextEngineRegistry::new();
    r.ensure_initialized();
    r.ensure_initialized();
    assert_eq!(r.ids(), vec!["legacy"]);
    assert_eq!(r.get("legacy").unwrap().owner, "core");
}

// §12.1 Default selection [G1+]: no config → legacy; slot "legacy" → legacy; slot "test-engine" → the engine.
#[tokio::test]
async fn default_selection() {
    let (r, logs) = registry();
    register_test(
        &r,
        "test-engine",
        "test:test-engine",
        Arc::new(TestEngine::new("test-engine")),
    );
    let none = r.resolve(None, None, None).await.unwrap();
    assert_eq!(
        (none.engine.info().id.as_str(), none.reason.clone()),
        ("legacy", SelectionReason::SlotUnset)
    );
    let legacy = r.resolve(slot("legacy"), None, None).await.unwrap();
    assert_eq!(
        (legacy.engine.info().id.as_str(), legacy.reason.clone()),
        ("legacy", SelectionReason::SlotIsDefault)
    );
    let custom = r
        .resolve(slot("  test-engine  "), None, None)
        .await
        .unwrap();
    assert_eq!(custom.engine.info().id, "test-engine");
    assert_eq!(custom.reason, SelectionReason::Configured);
    assert!(logs.lines().is_empty());
}

// §12.1 Factory context (G2): the factory receives {config (same object), agentDir, workspaceDir}; with no config all are undefined.
#[tokio::test]
async fn factory_receives_the_same_config_object_and_dirs() {
    let (r, _) = registry();
    let seen: Arc<std::sync::Mutex<Vec<FactoryContext>>> = Default::default();
    let seen2 = seen.clone();
    let f = factory(move |ctx: FactoryContext| {
        seen2.lock().unwrap().push(ctx);
        async { Ok(Arc::new(TestEngine::new("ctx")) as Arc<dyn ContextEngine>) }
    });
    r.register_for_owner("ctx", f, "test:ctx", RegisterOptions::default())
        .unwrap();
    let config = slot("ctx").unwrap();
    r.resolve(
        Some(config.clone()),
        Some("/agents/a".into()),
        Some("/ws".into()),
    )
    .await
    .unwrap();
    let ctx = seen.lock().unwrap()[0].clone();
    assert!(
        Arc::ptr_eq(ctx.config.as_ref().unwrap(), &config),
        "factory must get the very config object"
    );
    assert_eq!(
        ctx.agent_dir.as_deref(),
        Some(std::path::Path::new("/agents/a"))
    );
    assert_eq!(
        ctx.workspace_dir.as_deref(),
        Some(std::path::Path::new("/ws"))
    );
}

// Not in the contract (clawctx): the host's summarizer set on the registry reaches every factory,
// through standalone and logical-turn resolution alike, and can be withdrawn.
#[tokio::test]
async fn factories_get_the_host_summarizer_the_registry_offers() {
    let (r, _) = registry();
    let seen: Arc<std::sync::Mutex<Vec<Option<String>>>> = Default::default();
    let seen2 = seen.clone();
    let f = factory(move |ctx: FactoryContext| {
        seen2
            .lock()
            .unwrap()
            .push(ctx.host_summarizer.as_ref().map(|s| s.name().to_owned()));
        async { Ok(Arc::new(TestEngine::new("ctx")) as Arc<dyn ContextEngine>) }
    });
    r.register_for_owner("ctx", f, "test:ctx", RegisterOptions::default())
        .unwrap();
    r.resolve(slot("ctx"), None, None).await.unwrap();
    r.set_host_summarizer(Some(Arc::new(clawctx_summarize::ExtractiveSummarizer)));
    r.resolve(slot("ctx"), None, None).await.unwrap();
    r.resolve_logical_turn(slot("ctx"), None, None)
        .await
        .unwrap();
    r.set_host_summarizer(None);
    r.resolve(slot("ctx"), None, None).await.unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [
            None,
            Some("extractive".to_owned()),
            Some("extractive".to_owned()),
            None
        ],
        "each resolution's factory must see the summarizer offered at that moment"
    );
}

// §12.1 Invalid engine fallback [G2/G3]: missing → legacy + quarantine(resolve) + exact log line without owner.
#[tokio::test]
async fn missing_engine_quarantines_with_operation_resolve() {
    let (r, logs) = registry();
    let resolved = r.resolve(slot("ghost"), None, None).await.unwrap();
    assert_eq!(resolved.engine.info().id, "legacy");
    assert_eq!(resolved.configured_id, "ghost");
    let q = r.quarantines();
    assert_eq!(
        (
            q[0].engine_id.as_str(),
            q[0].operation.as_str(),
            q[0].reason.as_str()
        ),
        ("ghost", "resolve", "not registered")
    );
    assert_eq!(q[0].owner, None);
    assert_eq!(
        logs.errors(),
        vec!["[context-engine] Context engine \"ghost\" failed during resolve: not registered; quarantining it for this process and falling back to default engine \"legacy\"."]
    );
}

// §12.1 [G2/G3]: a missing-engine quarantine clears when the plugin registers later.
#[tokio::test]
async fn missing_engine_quarantine_clears_on_registration() {
    let (r, _) = registry();
    r.resolve(slot("late"), None, None).await.unwrap();
    assert!(r.is_quarantined("late"));
    register_test(&r, "late", "plugin:late", Arc::new(TestEngine::new("late")));
    assert!(!r.is_quarantined("late"));
    assert_eq!(
        r.resolve(slot("late"), None, None)
            .await
            .unwrap()
            .engine
            .info()
            .id,
        "late"
    );
}

// §12.1 [G2/G3]: a builder-context registration does not clear quarantine until activation.
#[tokio::test]
async fn builder_registration_defers_quarantine_clear_until_activate() {
    let r = ContextEngineRegistry::new_builder();
    r.ensure_initialized();
    r.quarantine("late", None, "resolve", "not registered");
    register_test(&r, "late", "plugin:late", Arc::new(TestEngine::new("late")));
    assert!(
        r.is_quarantined("late"),
        "a builder registry must not clear on registration"
    );
    r.activate();
    assert!(!r.is_quarantined("late"));
}

// §12.1 [G2/G3]: factory throw → legacy + quarantine(factory) with owner in the log line.
#[tokio::test]
async fn factory_failure_quarantines_with_operation_factory() {
    let (r, logs) = registry();
    let calls = Arc::new(AtomicUsize::new(0));
    let c2 = calls.clone();
    let f = factory(move |_| {
        c2.fetch_add(1, Ordering::SeqCst);
        async { Err(EngineError::failed("Async work scope is closed")) }
    });
    r.register_for_owner("broken", f, "plugin:broken", RegisterOptions::default())
        .unwrap();
    let resolved = r.resolve(slot("broken"), None, None).await.unwrap();
    assert_eq!(resolved.engine.info().id, "legacy");
    let q = &r.quarantines()[0];
    assert_eq!(
        (q.operation.as_str(), q.reason.as_str(), q.owner.as_deref()),
        (
            "factory",
            "Async work scope is closed",
            Some("plugin:broken")
        )
    );
    assert_eq!(
        logs.errors()[0],
        quarantine_log_line(
            "broken",
            Some("plugin:broken"),
            "factory",
            "Async work scope is closed",
            "legacy"
        )
    );
    assert!(logs.errors()[0].contains(" owner=plugin:broken failed during factory: "));
    // §12.4: called only once across two resolves.
    r.resolve(slot("broken"), None, None).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

// §12.4: factory cancellation propagates with no fallback and no quarantine.
#[tokio::test]
async fn factory_cancellation_propagates_without_quarantine() {
    let (r, logs) = registry();
    let f = factory(|_| async {
        Err(EngineError::Aborted {
            reason: "caller went away".into(),
        })
    });
    r.register_for_owner("cancel", f, "plugin:cancel", RegisterOptions::default())
        .unwrap();
    let err = r.resolve(slot("cancel"), None, None).await.err().unwrap();
    assert!(matches!(err, EngineError::Aborted { .. }));
    assert!(r.quarantines().is_empty());
    assert!(logs.lines().is_empty());
}

// §12.1 [G2/G3]: missing info / missing methods → contract-validation with the exact message.
#[tokio::test]
async fn invalid_contract_quarantines_with_exact_message() {
    let (r, _) = registry();
    let bad = Arc::new(
        TestEngine::new(" ")
            .with_info(|i| i.name = "".into())
            .with_methods(&[Method::Ingest]),
    );
    register_test(&r, "bad", "plugin:bad", bad.clone());
    let resolved = r.resolve(slot("bad"), None, None).await.unwrap();
    assert_eq!(resolved.engine.info().id, "legacy");
    let q = &r.quarantines()[0];
    assert_eq!(q.operation, "contract-validation");
    assert_eq!(
        q.reason,
        "Context engine \"bad\" factory returned an invalid ContextEngine: missing info.id, missing info.name, missing assemble(), missing compact()."
    );
    // G3 raw path: the rejected object is disposed.
    assert_eq!(bad.call_count(Method::Dispose), 1);
}

// §12.1 [G2/G3]: an unregistered default throws "not registered"; a default factory throw propagates;
// a default contract failure throws `Context engine "legacy" factory returned an invalid ContextEngine`.
#[tokio::test]
async fn default_engine_failures_propagate() {
    let empty = Arc::new(ContextEngineRegistry::new());
    let err = empty
        .resolve(None, None, None)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("default engine \"legacy\" is not registered. Available engines: (none)"),
        "{err}"
    );

    let r = Arc::new(ContextEngineRegistry::new());
    r.register_for_owner(
        "legacy",
        factory(|_| async { Err(EngineError::failed("legacy boom")) }),
        "core",
        RegisterOptions::default(),
    )
    .unwrap();
    assert_eq!(
        r.resolve(None, None, None).await.err().unwrap().to_string(),
        "legacy boom"
    );

    let r = Arc::new(ContextEngineRegistry::new());
    let bad = Arc::new(TestEngine::new("").with_info(|i| i.id = "".into()));
    r.register_for_owner(
        "legacy",
        shared_factory(bad, Default::default()),
        "core",
        RegisterOptions::default(),
    )
    .unwrap();
    let err = r.resolve(None, None, None).await.err().unwrap().to_string();
    assert!(
        err.starts_with(
            "[context-engine] Context engine \"legacy\" factory returned an invalid ContextEngine"
        ),
        "{err}"
    );
    assert!(
        r.quarantines().is_empty(),
        "the default engine is never quarantined"
    );
}

// §12.1 Read-only discovery: never constructed or quarantined; one warning with the exact text;
// a later runtime registration is used; a later discovery re-registration does not replace it.
#[tokio::test]
async fn read_only_discovery_falls_back_without_quarantine() {
    let (r, logs) = registry();
    let calls = Arc::new(AtomicUsize::new(0));
    let disc = RegisterOptions {
        lifecycle: Lifecycle::ReadOnlyDiscovery,
        ..Default::default()
    };
    r.register_for_owner(
        "disc",
        shared_factory(Arc::new(TestEngine::new("disc")), calls.clone()),
        "plugin:disc",
        disc,
    )
    .unwrap();
    let resolved = r.resolve(slot("disc"), None, None).await.unwrap();
    assert_eq!(resolved.engine.info().id, "legacy");
    assert_eq!(resolved.reason, SelectionReason::DiscoveryOnly);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert!(r.quarantines().is_empty());
    assert_eq!(
        logs.warnings(),
        vec!["[context-engine] Context engine \"disc\" owner=plugin:disc is registered for read-only discovery only; falling back to default engine \"legacy\" without quarantine until runtime activation registers it."]
    );
    let runtime_calls = Arc::new(AtomicUsize::new(0));
    r.register_for_owner(
        "disc",
        shared_factory(Arc::new(TestEngine::new("disc")), runtime_calls.clone()),
        "plugin:disc",
        RegisterOptions {
            allow_same_owner_refresh: true,
            ..Default::default()
        },
    )
    .unwrap();
    r.resolve(slot("disc"), None, None).await.unwrap();
    // Discovery re-registration must not downgrade the runtime factory.
    r.register_for_owner(
        "disc",
        shared_factory(Arc::new(TestEngine::new("x")), calls.clone()),
        "plugin:disc",
        disc,
    )
    .unwrap();
    let again = r.resolve(slot("disc"), None, None).await.unwrap();
    assert_eq!(again.engine.info().id, "disc");
    assert_eq!(
        runtime_calls.load(Ordering::SeqCst),
        2,
        "the runtime factory is called once per resolve"
    );
}

// §12.1 [G2]: a lifecycle (assemble) failure returns legacy's pass-through in the same call; the next
// resolve is legacy without calling the factory; the record has owner/operation/reason; the log line.
#[tokio::test]
async fn assemble_failure_is_answered_by_legacy_and_quarantined() {
    let (r, logs) = registry();
    let engine = Arc::new(TestEngine::new("flaky").failing(Method::Assemble, "assemble exploded"));
    let calls = register_test(&r, "flaky", "plugin:flaky", engine.clone());
    let resolved = r.resolve(slot("flaky"), None, None).await.unwrap();
    let msgs = vec![AgentMessage::user("hello").with_timestamp(1)];
    let out = resolved
        .engine
        .assemble(&assemble_params(msgs.clone()), &CallContext::none())
        .await
        .unwrap();
    assert_eq!(out.messages, msgs, "legacy passes the host history through");
    assert_eq!(out.estimated_tokens, 0);
    let q = &r.quarantines()[0];
    assert_eq!(
        (q.owner.as_deref(), q.operation.as_str(), q.reason.as_str()),
        (Some("plugin:flaky"), "assemble", "assemble exploded")
    );
    assert_eq!(
        logs.errors(),
        vec!["[context-engine] Context engine \"flaky\" owner=plugin:flaky failed during assemble: assemble exploded; quarantining it for this process and falling back to default engine \"legacy\"."]
    );
    let next = r.resolve(slot("flaky"), None, None).await.unwrap();
    assert_eq!(next.engine.info().id, "legacy");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "a quarantined engine's factory is not called again"
    );
    // Later calls on the same wrapper go to legacy without touching the engine.
    resolved
        .engine
        .ingest(
            &IngestParams {
                session_id: "s1".into(),
                session_key: None,
                message: AgentMessage::user("x"),
                is_heartbeat: None,
            },
            &CallContext::none(),
        )
        .await
        .unwrap();
    assert_eq!(engine.call_count(Method::Ingest), 0);
}

// §12.1 [G2]: after a lifecycle quarantine the same wrapper exposes legacy info: ownsCompaction undefined,
// owner plugin id undefined, compact is the runtime delegate. First failure wins.
#[tokio::test]
async fn quarantined_wrapper_reports_legacy_identity_and_first_failure_wins() {
    let (r, _) = registry();
    let engine = Arc::new(
        TestEngine::new("e")
            .failing(Method::Ingest, "first")
            .failing(Method::AfterTurn, "second"),
    );
    register_test(&r, "e", "plugin:lossless-claw", engine);
    let resolved = r.resolve(slot("e"), None, None).await.unwrap();
    assert_eq!(resolved.owner_plugin_id(), Some("lossless-claw"));
    assert_eq!(resolved.engine.info().owns_compaction, Some(true));
    assert!(!resolved.engine.is_runtime_compaction_delegate());
    let cx = CallContext::none();
    let r1 = resolved
        .engine
        .ingest(
            &IngestParams {
                session_id: "s".into(),
                session_key: None,
                message: AgentMessage::user("x"),
                is_heartbeat: None,
            },
            &cx,
        )
        .await
        .unwrap();
    assert!(!r1.ingested, "legacy's ingest answers {{ingested:false}}");
    resolved
        .engine
        .after_turn(
            &AfterTurnParams {
                session_id: "s".into(),
                session_file: "f".into(),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap();
    let q = r.quarantines();
    assert_eq!(
        (q.len(), q[0].reason.as_str()),
        (1, "first"),
        "first failure wins"
    );
    let info = resolved.engine.info();
    assert_eq!((info.id.as_str(), info.owns_compaction), ("legacy", None));
    assert!(resolved.engine.is_runtime_compaction_delegate());
    assert_eq!(
        r.health_line().unwrap(),
        "Context engine: warning (1 quarantined; downgraded to legacy: e)"
    );
}

// §4.1 canned results: methods legacy lacks answer with the contract's canned values.
#[tokio::test]
async fn canned_fallback_results_for_methods_legacy_lacks() {
    let (r, _) = registry();
    let engine = Arc::new(TestEngine::new("e"));
    for m in [
        Method::Bootstrap,
        Method::Maintain,
        Method::IngestBatch,
        Method::OnSubagentEnded,
    ] {
        engine.set_fault(m, Some(Fault::Error(format!("{} failed", m.name()))));
    }
    register_test(&r, "e", "plugin:e", engine);
    let resolved = r.resolve(slot("e"), None, None).await.unwrap();
    let cx = CallContext::none();
    let b = resolved
        .engine
        .bootstrap(
            &BootstrapParams {
                session_id: "s".into(),
                session_file: "f".into(),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap();
    assert_eq!(
        b,
        BootstrapResult {
            bootstrapped: false,
            imported_messages: None,
            reason: Some("context engine downgraded to legacy".into())
        }
    );
    let m = resolved
        .engine
        .maintain(
            &MaintainParams {
                session_id: "s".into(),
                session_file: "f".into(),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap();
    assert_eq!(
        m,
        TranscriptRewriteResult {
            changed: false,
            bytes_freed: 0,
            rewritten_entries: 0,
            reason: Some("context engine downgraded to legacy".into())
        }
    );
    let ib = resolved
        .engine
        .ingest_batch(
            &IngestBatchParams {
                session_id: "s".into(),
                session_key: None,
                messages: vec![],
                is_heartbeat: None,
            },
            &cx,
        )
        .await
        .unwrap();
    assert_eq!(ib.ingested_count, 0);
    resolved
        .engine
        .on_subagent_ended(
            &SubagentEndedParams {
                child_session_key: "k".into(),
                reason: SubagentEndReason::Completed,
            },
            &cx,
        )
        .await
        .unwrap();
}

// §12.1 [G2/G3]: a compact failure quarantines but rethrows with no same-call fallback.
#[tokio::test]
async fn compact_failure_fails_closed() {
    let (r, _) = registry();
    register_test(
        &r,
        "e",
        "plugin:e",
        Arc::new(TestEngine::new("e").failing(Method::Compact, "compact broke")),
    );
    let resolved = r.resolve(slot("e"), None, None).await.unwrap();
    let err = resolved
        .engine
        .compact(
            &CompactParams {
                session_id: "s".into(),
                ..Default::default()
            },
            &CallContext::none(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "compact broke");
    assert_eq!(r.quarantines()[0].operation, "compact");
    assert_eq!(resolved.engine.info().id, "legacy");
}

// §12.1 [G2/G3]: a prepareSubagentSpawn failure rejects the spawn and quarantines.
#[tokio::test]
async fn prepare_subagent_spawn_failure_fails_closed() {
    let (r, _) = registry();
    register_test(
        &r,
        "e",
        "plugin:e",
        Arc::new(TestEngine::new("e").failing(Method::PrepareSubagentSpawn, "no spawn")),
    );
    let resolved = r.resolve(slot("e"), None, None).await.unwrap();
    let p = PrepareSubagentSpawnParams {
        parent_session_key: "agent:a:main".into(),
        child_session_key: "agent:a:subagent:1".into(),
        ..Default::default()
    };
    assert!(resolved
        .engine
        .prepare_subagent_spawn(&p, &CallContext::none())
        .await
        .is_err());
    assert_eq!(r.quarantines()[0].operation, "prepareSubagentSpawn");
    assert_eq!(
        r.resolve(slot("e"), None, None)
            .await
            .unwrap()
            .engine
            .info()
            .id,
        "legacy"
    );
}

// §12.1 [G2/G3]: concurrent failures coalesce the fallback: the legacy factory is called once.
#[tokio::test]
async fn concurrent_failures_share_one_fallback() {
    let r = Arc::new(ContextEngineRegistry::new());
    let legacy_calls = Arc::new(AtomicUsize::new(0));
    let lc = legacy_calls.clone();
    r.register_for_owner(
        "legacy",
        factory(move |_| {
            lc.fetch_add(1, Ordering::SeqCst);
            async {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                Ok(Arc::new(LegacyEngine) as Arc<dyn ContextEngine>)
            }
        }),
        "core",
        RegisterOptions::default(),
    )
    .unwrap();
    register_test(
        &r,
        "e",
        "plugin:e",
        Arc::new(TestEngine::new("e").failing(Method::Assemble, "boom")),
    );
    let resolved = r.resolve(slot("e"), None, None).await.unwrap();
    let before = legacy_calls.load(Ordering::SeqCst);
    let a = assemble_params(vec![AgentMessage::user("one")]);
    let b = assemble_params(vec![AgentMessage::user("two")]);
    let cx = CallContext::none();
    let (ra, rb) = tokio::join!(
        resolved.engine.assemble(&a, &cx),
        resolved.engine.assemble(&b, &cx)
    );
    assert_eq!(ra.unwrap().messages, a.messages);
    assert_eq!(rb.unwrap().messages, b.messages);
    assert_eq!(
        legacy_calls.load(Ordering::SeqCst) - before,
        1,
        "the fallback factory runs once per wrapper"
    );
}

// §12.1 abort cases: a pre-aborted signal rejects with the reason and never calls the engine; an abort
// error while the signal is aborted is rethrown without quarantine; an AbortError with a live signal
// quarantines and resolves to the fallback {changed:false}.
#[tokio::test]
async fn abort_before_during_and_never() {
    let (r, _logs) = registry();
    let engine = Arc::new(TestEngine::new("e"));
    register_test(&r, "e", "plugin:e", engine.clone());
    let resolved = r.resolve(slot("e"), None, None).await.unwrap();
    let p = MaintainParams {
        session_id: "s".into(),
        session_file: "f".into(),
        ..Default::default()
    };

    let before = AbortController::new();
    before.abort("stop now");
    let err = resolved
        .engine
        .maintain(&p, &CallContext::none().with_abort(before.signal()))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "stop now");
    assert_eq!(
        engine.call_count(Method::Maintain),
        0,
        "maintain must not be called"
    );

    // During: the caller aborts while the engine works; the engine rejects with an abort error.
    let during = Arc::new(AbortController::new());
    let aborting = Arc::new(AbortsDuringCompact {
        controller: during.clone(),
    });
    let (r2, logs2) = registry();
    r2.register_for_owner(
        "ad",
        factory(move |_| {
            let e = aborting.clone();
            async move { Ok(e as Arc<dyn ContextEngine>) }
        }),
        "plugin:ad",
        RegisterOptions::default(),
    )
    .unwrap();
    let ad = r2.resolve(slot("ad"), None, None).await.unwrap();
    let err = ad
        .engine
        .compact(
            &CompactParams {
                session_id: "s".into(),
                ..Default::default()
            },
            &CallContext::none().with_abort(during.signal()),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::Aborted { .. }), "{err:?}");
    assert!(
        r2.quarantines().is_empty(),
        "an abort while the caller's signal is aborted never quarantines"
    );
    assert!(logs2.errors().is_empty());

    engine.set_fault(
        Method::Maintain,
        Some(Fault::Abort("AbortError: aborted".into())),
    );
    let never = AbortController::new();
    let out = resolved
        .engine
        .maintain(&p, &CallContext::none().with_abort(never.signal()))
        .await
        .unwrap();
    assert!(!out.changed);
    assert_eq!(
        r.quarantines()[0].operation,
        "maintain",
        "an AbortError with a live signal is an ordinary failure"
    );
}

// §12.3 selection policy: disabled, globally disabled, denied (registered or not) → legacy, no owner,
// no quarantine, no factory call, no logs; the slot value is preserved.
#[tokio::test]
async fn policy_disabled_selection_is_silent_legacy() {
    let cases = [
        json!({"plugins": {"slots": {"contextEngine": "pe"}, "entries": {"pe": {"enabled": false}}}}),
        json!({"plugins": {"enabled": false, "slots": {"contextEngine": "pe"}}}),
        json!({"plugins": {"deny": ["pe"], "slots": {"contextEngine": "pe"}}}),
        json!({"plugins": {"allow": ["someone-else"], "slots": {"contextEngine": "pe"}}}),
    ];
    for registered in [true, false] {
        for c in &cases {
            let (r, logs) = registry();
            let calls = Arc::new(AtomicUsize::new(0));
            if registered {
                r.register_for_owner(
                    "pe",
                    shared_factory(Arc::new(TestEngine::new("pe")), calls.clone()),
                    "plugin:pe",
                    RegisterOptions::default(),
                )
                .unwrap();
            }
            let config = Arc::new(c.clone());
            let resolved = r.resolve(Some(config.clone()), None, None).await.unwrap();
            assert_eq!(resolved.effective_id, "legacy", "case {c}");
            assert!(
                matches!(resolved.reason, SelectionReason::PolicyDisabled { .. }),
                "case {c}: {:?}",
                resolved.reason
            );
            assert_eq!(resolved.owner_plugin_id(), None);
            assert!(
                r.quarantines().is_empty()
                    && logs.lines().is_empty()
                    && calls.load(Ordering::SeqCst) == 0,
                "case {c}"
            );
            assert_eq!(
                config["plugins"]["slots"]["contextEngine"], "pe",
                "the slot is preserved"
            );
        }
    }
}

// §12.3: the distinct-owner plugin disabled → legacy; enabled with a different engine id works and
// the owner is the owner plugin id; re-enabling restores the selection without re-registration.
#[tokio::test]
async fn distinct_owner_policy_and_reenable() {
    let (r, _) = registry();
    let calls = Arc::new(AtomicUsize::new(0));
    r.register_for_owner(
        "lcm",
        shared_factory(Arc::new(TestEngine::new("lcm")), calls.clone()),
        "plugin:lossless-claw",
        RegisterOptions::default(),
    )
    .unwrap();
    let disabled = json!({"plugins": {"slots": {"contextEngine": "lcm"}, "entries": {"lossless-claw": {"enabled": false}}}});
    let d = r.resolve(cfg(disabled), None, None).await.unwrap();
    assert_eq!(d.effective_id, "legacy");
    let enabled = json!({"plugins": {"slots": {"contextEngine": "lcm"}, "entries": {"lossless-claw": {"enabled": true}}}});
    let e = r.resolve(cfg(enabled), None, None).await.unwrap();
    assert_eq!(
        (e.effective_id.as_str(), e.owner_plugin_id()),
        ("lcm", Some("lossless-claw"))
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(r.quarantines().is_empty());
}

// §12.3: slot undefined, "", "legacy", or "none" with plugins globally disabled → legacy.
#[tokio::test]
async fn blank_and_default_slots_resolve_to_legacy() {
    let (r, logs) = registry();
    for c in [
        json!({}),
        json!({"plugins": {"slots": {"contextEngine": ""}}}),
        json!({"plugins": {"slots": {"contextEngine": "   "}}}),
        json!({"plugins": {"slots": {"contextEngine": 42}}}),
        json!({"plugins": {"slots": {"contextEngine": "legacy"}}}),
        json!({"plugins": {"enabled": false, "slots": {"contextEngine": "none"}}}),
    ] {
        assert_eq!(
            r.resolve(cfg(c.clone()), None, None)
                .await
                .unwrap()
                .effective_id,
            "legacy",
            "case {c}"
        );
    }
    assert!(r.quarantines().is_empty() && logs.lines().is_empty());
}

// §12.1 [G2]: info.id may differ from the registered id (#66601); the engine is usable and its id preserved.
#[tokio::test]
async fn info_id_may_differ_from_registered_id() {
    let (r, _) = registry();
    register_test(
        &r,
        "lossless-claw",
        "plugin:lossless-claw",
        Arc::new(TestEngine::new("lcm")),
    );
    let resolved = r.resolve(slot("lossless-claw"), None, None).await.unwrap();
    assert_eq!(
        (
            resolved.effective_id.as_str(),
            resolved.engine.info().id.as_str()
        ),
        ("lossless-claw", "lcm")
    );
    let out = resolved
        .engine
        .assemble(
            &assemble_params(vec![AgentMessage::user("hi")]),
            &CallContext::none(),
        )
        .await
        .unwrap();
    assert_eq!(out.messages.len(), 1);
}

// §12.1 Bundle chunk isolation (#40096): the global registry is shared process-wide.
#[tokio::test]
async fn global_registry_is_shared() {
    let a = global_registry();
    let b = global_registry();
    assert!(Arc::ptr_eq(&a, &b));
    assert!(a.get("legacy").is_some());
}

// §4.1: clearContextEnginesForOwner removes entries and their quarantines.
#[tokio::test]
async fn clear_owner_removes_entries_and_quarantines() {
    let (r, _) = registry();
    register_test(
        &r,
        "e",
        "plugin:p",
        Arc::new(TestEngine::new("e").failing(Method::Assemble, "x")),
    );
    let resolved = r.resolve(slot("e"), None, None).await.unwrap();
    resolved
        .engine
        .assemble(&assemble_params(vec![]), &CallContext::none())
        .await
        .unwrap();
    assert!(r.is_quarantined("e"));
    r.clear_owner("plugin:p");
    assert!(!r.is_quarantined("e"));
    assert!(r.get("e").is_none());
}

/// An engine whose compact aborts the caller's controller mid-call, then rejects with an abort.
struct AbortsDuringCompact {
    controller: Arc<AbortController>,
}

#[async_trait::async_trait]
impl ContextEngine for AbortsDuringCompact {
    fn info(&self) -> ContextEngineInfo {
        ContextEngineInfo::new("ad", "Aborts during compact")
    }
    async fn ingest(&self, _: &IngestParams, _: &CallContext) -> Result<IngestResult, EngineError> {
        Ok(IngestResult { ingested: false })
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
        cx: &CallContext,
    ) -> Result<CompactResult, EngineError> {
        assert!(
            cx.abort.is_some(),
            "compact always receives the abort signal"
        );
        self.controller.abort("caller cancelled");
        Err(EngineError::Aborted {
            reason: "caller cancelled".into(),
        })
    }
}
