//! Legacy parity, delegated compaction, host-param projection, host requirements and
//! runtimeSettings: contract §1.6, §5, §6, §7.2, §7.3 and checklist §12.1, §12.8–§12.10.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use clawctx_engine::host::*;
use clawctx_engine::legacy::*;
use clawctx_engine::runtime_settings::*;
use clawctx_engine::*;
use clawctx_protocol::*;
use clawctx_test_support::host::InMemoryHost;
use clawctx_test_support::test_engine::TestEngine;
use serde_json::json;

// §12.1 Legacy parity: ingest {ingested:false}; assemble returns the same messages with
// estimatedTokens 0 and no systemPromptAddition; dispose resolves.
#[tokio::test]
async fn legacy_parity() {
    let legacy = LegacyEngine;
    let cx = CallContext::none();
    let r = legacy
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
    assert!(!r.ingested);
    let msgs = vec![
        AgentMessage::user("hello").with_timestamp(1),
        AgentMessage::assistant("hi"),
    ];
    let a = legacy
        .assemble(
            &AssembleParams {
                session_id: "s".into(),
                messages: msgs.clone(),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap();
    assert_eq!(a.messages, msgs);
    assert_eq!(a.estimated_tokens, 0);
    assert_eq!(a.system_prompt_addition, None);
    legacy.dispose().await.unwrap();
    let info = legacy.info();
    assert_eq!(
        (
            info.id.as_str(),
            info.name.as_str(),
            info.version.as_deref()
        ),
        ("legacy", "Legacy Context Engine", Some("1.0.0"))
    );
    assert_eq!(info.accepted_host_params.unwrap(), HOST_PARAM_KEYS.to_vec());
    assert!(legacy.tools().is_empty());
    assert!(
        legacy.is_runtime_compaction_delegate(),
        "legacy keeps the runtime-compaction-delegate marker"
    );
    assert!(!legacy.methods().has(Method::Bootstrap) && !legacy.methods().has(Method::Maintain));
}

fn rc(v: serde_json::Value) -> Option<ContextEngineRuntimeContext> {
    Some(serde_json::from_value(v).unwrap())
}

// §12.1 [G2/G3] delegateCompactionToRuntime forwards sessionId, sessionKey, sessionTarget,
// tokenBudget, currentTokenCount (from runtimeContext), workspaceDir and abortSignal; never
// sessionFile; passes runtimeContext through as contextEngineRuntimeContext.
#[tokio::test]
async fn delegate_forwards_params_and_never_session_file() {
    let ctrl = AbortController::new();
    let params = CompactParams {
        session_id: "sess-1".into(),
        session_key: Some("agent:main:main".into()),
        session_target: Some(ContextEngineSessionTarget {
            agent_id: Some("main".into()),
            session_id: Some("sess-1".into()),
            ..Default::default()
        }),
        token_budget: Some(1000),
        runtime_context: rc(
            json!({"currentTokenCount": 812.7, "workspaceDir": "/ws", "sessionFile": "/x.jsonl", "provider": "p"}),
        ),
        ..Default::default()
    };
    let req =
        build_runtime_compaction_request(&params, &CallContext::none().with_abort(ctrl.signal()))
            .unwrap();
    assert_eq!(req.session_id, "sess-1");
    assert_eq!(req.session_key.as_deref(), Some("agent:main:main"));
    assert_eq!(
        req.session_target.as_ref().unwrap().session_id.as_deref(),
        Some("sess-1")
    );
    assert_eq!(req.token_budget, Some(1000));
    assert_eq!(
        req.current_token_count,
        Some(812),
        "lifted from runtimeContext and floored (§12.1 [G2] 277403)"
    );
    assert_eq!(req.workspace_dir, "/ws");
    assert!(req.abort.is_some());
    assert!(
        !req.runtime_fields.contains_key("sessionFile"),
        "the raw sessionFile is never passed"
    );
    assert_eq!(req.runtime_fields.get("provider"), Some(&json!("p")));
    assert_eq!(req.context_engine_runtime_context, params.runtime_context);
}

// §12.1 [G3]: explicit params win over runtimeContext; [G2]: explicit empty values are kept.
#[tokio::test]
async fn explicit_params_win_over_runtime_context() {
    let params = CompactParams {
        session_id: "s".into(),
        session_key: Some("".into()),
        session_target: Some(ContextEngineSessionTarget::default()),
        agent_id: Some("a".into()),
        runtime_context: rc(
            json!({"sessionKey": "agent:b:main", "agentId": "b", "sessionTarget": {"agentId": "b"}}),
        ),
        ..Default::default()
    };
    let req = build_runtime_compaction_request(&params, &CallContext::none()).unwrap();
    assert_eq!(req.session_key.as_deref(), Some(""));
    assert_eq!(
        req.session_target,
        Some(ContextEngineSessionTarget::default())
    );
    assert_eq!(req.agent_id.as_deref(), Some("a"));
}

// §12.1 [G2/G3]: a successor target from another agent is rejected before the runtime runs;
// each conflict case (agent, physical session, key, target-only key) rejects.
#[tokio::test]
async fn identity_conflicts_reject_before_the_runtime_runs() {
    let host = Arc::new(InMemoryHost::default());
    let target = |v: serde_json::Value| {
        Some(serde_json::from_value::<ContextEngineSessionTarget>(v).unwrap())
    };
    let cases = vec![
        CompactParams {
            session_id: "s".into(),
            agent_id: Some("a".into()),
            session_target: target(json!({"agentId": "b"})),
            ..Default::default()
        },
        CompactParams {
            session_id: "s".into(),
            session_target: target(json!({"sessionId": "other"})),
            ..Default::default()
        },
        CompactParams {
            session_id: "s".into(),
            session_key: Some("agent:a:main".into()),
            session_target: target(json!({"sessionKey": "agent:a:x"})),
            ..Default::default()
        },
        CompactParams {
            session_id: "s".into(),
            agent_id: Some(" a ".into()),
            session_target: target(json!({"sessionKey": "agent:b:main"})),
            ..Default::default()
        },
        CompactParams {
            session_id: "s".into(),
            agent_id: Some("a".into()),
            session_key: Some("agent:b:main".into()),
            ..Default::default()
        },
    ];
    for p in cases {
        let err = LegacyEngine
            .compact(&p, &host.services())
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), SUCCESSOR_CONFLICT, "{p:?}");
    }
    assert!(
        host.compact_requests.lock().unwrap().is_empty(),
        "the runtime must not be called"
    );
    // Trimmed values that agree are fine.
    let ok = CompactParams {
        session_id: "s".into(),
        agent_id: Some(" a ".into()),
        session_key: Some("agent:a:main".into()),
        ..Default::default()
    };
    assert!(LegacyEngine.compact(&ok, &host.services()).await.is_ok());
}

// §7.2: a result with no nested runtime result maps to result: undefined.
#[tokio::test]
async fn no_nested_result_maps_to_none() {
    let host = Arc::new(InMemoryHost::default());
    let r = LegacyEngine
        .compact(
            &CompactParams {
                session_id: "empty".into(),
                ..Default::default()
            },
            &host.services(),
        )
        .await
        .unwrap();
    assert_eq!(
        r,
        CompactResult {
            ok: true,
            compacted: false,
            reason: Some("nothing to compact".into()),
            result: None
        }
    );
}

fn engine_with(accepted: Option<&[&str]>) -> TestEngine {
    TestEngine::new("proj").with_info(|i| {
        i.accepted_host_params = accepted.map(|a| a.iter().map(|s| s.to_string()).collect())
    })
}

// §12.8: declared host params are all passed; a ["runtimeSettings"] declaration strips sessionKey and
// prompt from assemble and sessionTarget/runtimeContext from compact; undeclared engines get all;
// acceptedHostParams: [] strips sessionKey. The caller's params are not mutated.
#[tokio::test]
async fn host_param_projection() {
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    let settings = build_runtime_settings(&RuntimeSettingsInput::default());
    let assemble = AssembleParams {
        session_id: "s".into(),
        session_key: Some("agent:a:main".into()),
        prompt: Some("hi".into()),
        runtime_settings: Some(settings.clone()),
        messages: vec![],
        ..Default::default()
    };
    let compact = CompactParams {
        session_id: "s".into(),
        session_key: Some("agent:a:main".into()),
        session_target: Some(ContextEngineSessionTarget {
            agent_id: Some("a".into()),
            ..Default::default()
        }),
        runtime_context: rc(json!({"cwd": "/"})),
        runtime_settings: Some(settings),
        ..Default::default()
    };
    for (accepted, expect_assemble, expect_compact) in [
        (
            None,
            vec!["sessionKey", "prompt", "runtimeSettings"],
            vec![
                "sessionKey",
                "runtimeSettings",
                "sessionTarget",
                "runtimeContext",
            ],
        ),
        (
            Some(&["runtimeSettings"][..]),
            vec!["runtimeSettings"],
            vec!["runtimeSettings"],
        ),
        (Some(&[][..]), vec![], vec![]),
    ] {
        let engine = Arc::new(engine_with(accepted));
        let guarded = GuardedEngine::new(
            engine.clone(),
            "proj",
            Some("plugin:proj".into()),
            registry.clone(),
            Default::default(),
        );
        let ctrl = AbortController::new();
        let cx = CallContext::none().with_abort(ctrl.signal());
        guarded.assemble(&assemble, &cx).await.unwrap();
        guarded.compact(&compact, &cx).await.unwrap();
        let calls = engine.calls();
        let keys = |v: &serde_json::Value| -> Vec<String> {
            HOST_PARAM_KEYS
                .iter()
                .filter(|k| v.get(**k).is_some())
                .map(|k| k.to_string())
                .collect()
        };
        assert_eq!(
            keys(&calls[0].1),
            expect_assemble,
            "assemble with {accepted:?}"
        );
        assert_eq!(
            keys(&calls[1].1),
            expect_compact,
            "compact with {accepted:?}"
        );
        assert_eq!(calls[0].1["sessionId"], "s", "non-host keys always pass");
        assert_eq!(
            assemble.session_key.as_deref(),
            Some("agent:a:main"),
            "caller params are not mutated"
        );
    }
}

// §1.6: the compact abort signal is always preserved; other methods drop it when undeclared.
#[tokio::test]
async fn compact_always_keeps_the_abort_signal() {
    let info = ContextEngineInfo {
        accepted_host_params: Some(vec![]),
        ..ContextEngineInfo::new("x", "x")
    };
    let ctrl = AbortController::new();
    let cx = CallContext::none()
        .with_abort(ctrl.signal())
        .with_services(Arc::new(InMemoryHost::default()));
    let compact = clawctx_engine::projection::project_context(&cx, &info, Method::Compact);
    assert!(compact.abort.is_some());
    assert!(
        compact.services.is_none(),
        "runtimeContext not accepted → no runtime services"
    );
    let maintain = clawctx_engine::projection::project_context(&cx, &info, Method::Maintain);
    assert!(maintain.abort.is_none());
}

// §12.8: a validator-shaped rejection is not retried: one call, then quarantine with operation assemble.
#[tokio::test]
async fn validator_shaped_rejection_is_not_retried() {
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    let engine = Arc::new(TestEngine::new("strict").failing(
        Method::Assemble,
        "Unrecognized key(s) in object: 'runtimeSettings'",
    ));
    let guarded = GuardedEngine::new(
        engine.clone(),
        "strict",
        Some("plugin:strict".into()),
        registry.clone(),
        Default::default(),
    );
    let p = AssembleParams {
        session_id: "s".into(),
        runtime_settings: Some(build_runtime_settings(&Default::default())),
        ..Default::default()
    };
    guarded.assemble(&p, &CallContext::none()).await.unwrap();
    assert_eq!(engine.call_count(Method::Assemble), 1);
    assert_eq!(registry.quarantines()[0].operation, "assemble");
}

fn requiring(op: ContextEngineOperation, caps: &[&str], msg: Option<&str>) -> ContextEngineInfo {
    let mut reqs = std::collections::BTreeMap::new();
    reqs.insert(
        op,
        ContextEngineHostRequirements {
            required_capabilities: caps.iter().map(|c| HostCapability::from(*c)).collect(),
            unsupported_message: msg.map(str::to_owned),
        },
    );
    ContextEngineInfo {
        host_requirements: Some(reqs),
        ..ContextEngineInfo::new("lossless-claw", "Lossless")
    }
}

// §12.9: no requirements → allowed on a CLI host; runtime-llm-complete rejected on a generic CLI host
// with the exact text; evaluation returns the missing list without throwing; embedded and Codex satisfy
// assemble-before-prompt; only Codex satisfies thread-bootstrap-projection.
#[test]
fn host_requirements() {
    let cli = cli_backend_host("claude-cli", None);
    assert!(assert_host_requirements(
        &ContextEngineInfo::new("x", "x"),
        ContextEngineOperation::AgentRun,
        &cli
    )
    .is_ok());
    let info = requiring(
        ContextEngineOperation::AgentRun,
        &["runtime-llm-complete"],
        None,
    );
    let eval = evaluate(&info, ContextEngineOperation::AgentRun, &cli);
    assert!(!eval.ok);
    assert_eq!(eval.missing_capabilities, vec!["runtime-llm-complete"]);
    let err = assert_host_requirements(&info, ContextEngineOperation::AgentRun, &cli)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "Context engine \"lossless-claw\" cannot run operation \"agent-run\" on CLI backend \"claude-cli\". Missing host capabilities: runtime-llm-complete. Required capabilities: runtime-llm-complete. Host capabilities: bootstrap, after-turn, maintain."
    );
    let abp = requiring(
        ContextEngineOperation::AgentRun,
        &["assemble-before-prompt"],
        Some("Use the embedded runtime or select legacy."),
    );
    assert!(evaluate(&abp, ContextEngineOperation::AgentRun, &embedded_host()).ok);
    assert!(
        evaluate(
            &abp,
            ContextEngineOperation::AgentRun,
            &codex_app_server_host()
        )
        .ok
    );
    let cli_err = assert_host_requirements(&abp, ContextEngineOperation::AgentRun, &cli)
        .unwrap_err()
        .to_string();
    assert!(
        cli_err.ends_with(" Use the embedded runtime or select legacy."),
        "{cli_err}"
    );
    let tbp = requiring(
        ContextEngineOperation::AgentRun,
        &["thread-bootstrap-projection"],
        None,
    );
    assert!(
        evaluate(
            &tbp,
            ContextEngineOperation::AgentRun,
            &codex_app_server_host()
        )
        .ok
    );
    assert!(!evaluate(&tbp, ContextEngineOperation::AgentRun, &embedded_host()).ok);
    // Requirements for another operation do not apply; an empty host lists "(none)".
    assert!(evaluate(&tbp, ContextEngineOperation::ManualCompact, &cli).ok);
    let bare = cli_backend_host("bare", Some(vec![]));
    assert!(
        assert_host_requirements(&abp, ContextEngineOperation::AgentRun, &bare)
            .unwrap_err()
            .to_string()
            .contains("Host capabilities: (none).")
    );
}

// §6: nullability, normalization, mode derivation, source default, and exact JSON shape.
#[test]
fn runtime_settings_v1() {
    let s = build_runtime_settings(&RuntimeSettingsInput::default());
    let v = serde_json::to_value(&s).unwrap();
    assert_eq!(
        v,
        json!({
            "schemaVersion": 1,
            "runtime": {"host": "openclaw", "mode": "normal", "harnessId": null, "runtimeId": null},
            "model": {"requested": null, "resolved": null, "provider": null, "family": null},
            "contextEngineSelection": {"selectedId": null, "source": "unknown"},
            "executionHost": {"id": null, "label": null},
            "limits": {"promptTokenBudget": null, "maxOutputTokens": null},
            "diagnostics": {"fallbackReason": null, "degradedReason": null}
        })
    );
    let s = build_runtime_settings(&RuntimeSettingsInput {
        requested_model: Some(" gpt-4o ".into()),
        resolved_model: Some("gpt-4o-mini".into()),
        selected_id: Some("lossless".into()),
        host: Some(embedded_host()),
        prompt_token_budget: Some(f64::NAN),
        max_output_tokens: Some(4096.0),
        harness_id: Some("   ".into()),
        ..Default::default()
    });
    assert_eq!(
        s.runtime.mode,
        RuntimeMode::Fallback,
        "requested ≠ resolved → fallback"
    );
    assert_eq!(s.model.requested.as_deref(), Some("gpt-4o"));
    assert_eq!(s.runtime.harness_id, None);
    assert_eq!(
        s.context_engine_selection.source,
        SelectionSource::Configured
    );
    assert_eq!(s.execution_host.id.as_deref(), Some("openclaw-embedded"));
    assert_eq!(
        (s.limits.prompt_token_budget, s.limits.max_output_tokens),
        (None, Some(4096.0))
    );
    let d = build_runtime_settings(&RuntimeSettingsInput {
        degraded_reason: Some("x".into()),
        fallback_reason: Some("y".into()),
        ..Default::default()
    });
    assert_eq!(d.runtime.mode, RuntimeMode::Degraded);
    let explicit = build_runtime_settings(&RuntimeSettingsInput {
        mode: Some(RuntimeMode::Normal),
        fallback_reason: Some("timeout".into()),
        ..Default::default()
    });
    assert_eq!(
        explicit.runtime.mode,
        RuntimeMode::Normal,
        "an explicit mode wins"
    );
    for (input, code) in [
        ("primary_unavailable", ReasonCode::ProviderUnavailable),
        ("context_pressure_high", ReasonCode::ContextOverflow),
        ("Request TIMEOUT", ReasonCode::ProviderTimeout),
        ("HTTP 429", ReasonCode::RateLimited),
        ("runtime crashed", ReasonCode::RuntimeUnavailable),
        ("rate_limited", ReasonCode::RateLimited),
        ("weird", ReasonCode::Unknown),
    ] {
        assert_eq!(normalize_reason(input), Some(code), "{input}");
    }
}
