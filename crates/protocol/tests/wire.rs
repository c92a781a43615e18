//! Wire compatibility: JSON written from the contract (§1–§2, §6) must parse into our types and
//! serialize back to the same JSON. A field renamed, dropped or added on the way out fails here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use clawctx_protocol::*;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Parses `v` as `T` and checks it serializes back to exactly `v`.
fn round_trip<T: Serialize + DeserializeOwned>(what: &str, v: &Value) -> T {
    let typed: T = serde_json::from_value(v.clone())
        .unwrap_or_else(|e| panic!("{what}: does not parse: {e}\n{v:#}"));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(&back, v, "{what}: round trip changed the JSON");
    typed
}

#[test]
fn every_message_shape_round_trips_losslessly() {
    let msgs = fixture("messages.json");
    let parsed: Vec<AgentMessage> = round_trip("messages", &msgs);
    let roles: Vec<&str> = parsed.iter().map(AgentMessage::role).collect();
    assert_eq!(
        roles,
        [
            "user",
            "user",
            "assistant",
            "toolResult",
            "assistant",
            "bashExecution",
            "custom",
            "branchSummary",
            "compactionSummary",
            "system",
            "assistant"
        ]
    );
    assert!(
        matches!(parsed[9], AgentMessage::Other(_)),
        "unknown roles are kept verbatim"
    );
    let AgentMessage::Assistant(a) = &parsed[2] else {
        panic!("not assistant")
    };
    assert_eq!(a.usage.as_ref().unwrap().total_tokens, 1235);
    assert_eq!(
        a.extra.get("responseId"),
        Some(&json!("resp_abc")),
        "unknown assistant fields are kept"
    );
    assert_eq!(parsed[2].tool_calls().next().unwrap().id, "call_1");
    assert_eq!(parsed[3].tool_result_id(), Some("call_1"));
    let AgentMessage::Assistant(last) = &parsed[10] else {
        panic!("not assistant")
    };
    assert!(
        matches!(last.content.block_slice()[0], ContentBlock::Unknown(_)),
        "unknown block types are kept"
    );
    assert_eq!(parsed[1].image_count(), 1);
}

#[test]
fn minimal_test_messages_parse() {
    // Tests in the contract build `{role:"user", content:"hello", timestamp:1}`.
    let m: AgentMessage =
        serde_json::from_value(json!({"role": "user", "content": "hello", "timestamp": 1}))
            .unwrap();
    assert_eq!(m.plain_text(), "hello");
    assert_eq!(m.timestamp_ms(), Some(1));
}

#[test]
fn malformed_messages_are_errors_naming_the_role() {
    let err = serde_json::from_value::<AgentMessage>(json!({"role": "toolResult", "content": []}))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("invalid `toolResult` message") && err.contains("toolCallId"),
        "{err}"
    );
    let err = serde_json::from_value::<AgentMessage>(json!({"content": "x"}))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no `role`"), "{err}");
}

#[test]
fn engine_info_has_every_field_of_spec_1_1() {
    let v = fixture("info.json");
    let info: ContextEngineInfo = round_trip("info", &v);
    assert!(info.owns_compaction());
    assert_eq!(info.maintenance_mode(), TurnMaintenanceMode::Background);
    let reqs = info.host_requirements.as_ref().unwrap();
    assert_eq!(
        reqs[&ContextEngineOperation::AgentRun].required_capabilities[0].as_str(),
        "assemble-before-prompt"
    );
    assert!(
        reqs.contains_key(&ContextEngineOperation::SubagentSpawn),
        "unknown capability strings are accepted"
    );
    assert!(info.transcript_semantics.as_ref().unwrap().is_full());
    assert!(info.accepts_host_param("prompt") && !info.accepts_host_param("sessionTarget"));
    let bare = ContextEngineInfo::new("x", "X");
    assert!(
        bare.accepts_host_param("sessionTarget"),
        "unset acceptedHostParams accepts everything"
    );
    assert_eq!(
        serde_json::to_value(&bare).unwrap(),
        json!({"id": "x", "name": "X"})
    );
}

#[test]
fn lifecycle_params_and_results_match_the_contract() {
    let c = fixture("calls.json");
    let a: AssembleParams = round_trip("assembleParams", &c["assembleParams"]);
    assert_eq!(
        a.available_tools.as_deref(),
        Some(&["lcm_grep".to_owned(), "read".to_owned()][..])
    );
    let r: AssembleResult = round_trip("assembleResult", &c["assembleResult"]);
    assert_eq!(
        r.prompt_authority,
        Some(PromptAuthority::PreassemblyMayOverflow)
    );
    let cp: CompactParams = round_trip("compactParams", &c["compactParams"]);
    assert_eq!(cp.force_reason, Some(ForceReason::Manual));
    assert_eq!(
        cp.runtime_context.as_ref().unwrap().extra.get("provider"),
        Some(&json!("anthropic"))
    );
    let cr: CompactResult = round_trip("compactResult", &c["compactResult"]);
    assert_eq!(
        cr.result.as_ref().unwrap().successor_session_id(),
        Some("1aa2")
    );
    round_trip::<AfterTurnParams>("afterTurnParams", &c["afterTurnParams"]);
    round_trip::<TranscriptRewriteResult>("maintainResult", &c["maintainResult"]);
    round_trip::<PrepareSubagentSpawnParams>(
        "prepareSubagentSpawnParams",
        &c["prepareSubagentSpawnParams"],
    );
    let ended: SubagentEndedParams = round_trip("subagentEndedParams", &c["subagentEndedParams"]);
    assert_eq!(ended.reason, SubagentEndReason::Swept);
    round_trip::<CommitTurnResult>("commitTurnResult", &c["commitTurnResult"]);
    round_trip::<BootstrapResult>("bootstrapResult", &c["bootstrapResult"]);
    round_trip::<IngestBatchResult>("ingestBatchResult", &c["ingestBatchResult"]);
    // commitTurn anchors: effectiveParentId is `null` at the root and stays `null` (not absent).
    let ct: CommitTurnParams = serde_json::from_value(c["commitTurnParams"].clone()).unwrap();
    assert_eq!(ct.admission.anchor.effective_parent_id, None);
    assert_eq!(
        serde_json::to_value(&ct).unwrap()["admission"]["effectiveParentId"],
        Value::Null
    );
    assert_eq!(ct.terminal.effective_parent_id.as_deref(), Some("e4"));
}

#[test]
fn prompt_is_absent_not_null_when_the_caller_has_none() {
    let p = AssembleParams {
        session_id: "s".into(),
        ..Default::default()
    };
    let v = serde_json::to_value(&p).unwrap();
    assert!(
        v.get("prompt").is_none() && v.get("sessionKey").is_none(),
        "{v}"
    );
}

#[test]
fn plugin_results_with_fractional_or_missing_numbers_do_not_fail() {
    let r: AssembleResult =
        serde_json::from_value(json!({"messages": [], "estimatedTokens": 12.2, "extra": 1}))
            .unwrap();
    assert_eq!(r.estimated_tokens, 13);
    let r: AssembleResult = serde_json::from_value(json!({"messages": []})).unwrap();
    assert_eq!(r.estimated_tokens, 0);
    let r: CompactResult =
        serde_json::from_value(json!({"ok": true, "compacted": false, "exhausted": true})).unwrap();
    assert!(r.ok && !r.compacted);
}

#[test]
fn runtime_settings_v1_uses_nulls_not_absent_fields() {
    let v = json!({
        "schemaVersion": 1,
        "runtime": {"host": "openclaw", "mode": "degraded", "harnessId": null, "runtimeId": "r1"},
        "model": {"requested": "anthropic/claude", "resolved": null, "provider": "anthropic", "family": null},
        "contextEngineSelection": {"selectedId": "lossless", "source": "configured"},
        "executionHost": {"id": "openclaw-embedded", "label": "OpenClaw embedded runner"},
        "limits": {"promptTokenBudget": 128000.0, "maxOutputTokens": null},
        "diagnostics": {"fallbackReason": "rate_limited", "degradedReason": "context_overflow"}
    });
    let s: RuntimeSettings = round_trip("runtimeSettings", &v);
    assert_eq!(s.runtime.mode, RuntimeMode::Degraded);
    assert_eq!(s.diagnostics.fallback_reason, Some(ReasonCode::RateLimited));
}

#[test]
fn transcript_entries_round_trip_and_rebuild_context() {
    let lines = [
        json!({"type": "message", "id": "a1", "parentId": null, "timestamp": "2026-01-01T00:00:00.000Z", "message": {"role": "user", "content": "one", "timestamp": 1}}),
        json!({"type": "model_change", "id": "a2", "parentId": "a1", "timestamp": "2026-01-01T00:00:01.000Z", "provider": "openai", "modelId": "gpt-4o"}),
        json!({"type": "message", "id": "a3", "parentId": "a2", "timestamp": "2026-01-01T00:00:02.000Z", "message": {"role": "assistant", "content": [{"type": "text", "text": "two"}]}}),
        json!({"type": "compaction", "id": "a4", "parentId": "a3", "timestamp": "2026-01-01T00:00:03.000Z", "summary": "S", "firstKeptEntryId": "a3", "tokensBefore": 50, "details": {"readFiles": []}}),
        json!({"type": "custom_message", "id": "a5", "parentId": "a4", "timestamp": "2026-01-01T00:00:04.000Z", "customType": "note", "content": "three", "display": true}),
    ];
    let entries: Vec<transcript::TranscriptEntry> = lines
        .iter()
        .map(|l| {
            let e = transcript::TranscriptEntry::from_json(l.as_object().unwrap().clone()).unwrap();
            assert_eq!(&Value::Object(e.to_json().unwrap()), l, "entry round trip");
            e
        })
        .collect();
    let ctx = transcript::context_messages(&entries);
    let roles: Vec<&str> = ctx.iter().map(AgentMessage::role).collect();
    assert_eq!(
        roles,
        ["compactionSummary", "assistant", "custom"],
        "summary, then from firstKeptEntryId on"
    );
    let first = transcript::to_model_message(&ctx[0]);
    assert_eq!(
        first.plain_text(),
        format!("{COMPACTION_SUMMARY_PREFIX}S{COMPACTION_SUMMARY_SUFFIX}")
    );
    assert_eq!(first.role(), "user");
}
