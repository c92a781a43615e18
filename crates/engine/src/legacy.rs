//! The built-in `legacy` engine (contract §7.3) and `delegateCompactionToRuntime` (§7.2).
//!
//! Legacy keeps OpenClaw's original behaviour: the session manager persists messages (ingest
//! is a no-op), the runtime's sanitize → validate → limit pipeline prepares the history (assemble
//! passes it through unchanged), and compaction is the runtime's built-in summarization, reached
//! through [`delegate_compaction_to_runtime`]. It never gets a quarantine wrapper: its failures
//! propagate.

use std::sync::Arc;

use async_trait::async_trait;
use clawctx_protocol::*;

use crate::engine::*;
use crate::error::EngineError;
use crate::registry::{factory, Factory};

/// The legacy engine.
#[derive(Debug, Default, Clone)]
pub struct LegacyEngine;

/// Legacy's info: all six host params accepted.
pub fn legacy_info() -> ContextEngineInfo {
    ContextEngineInfo {
        id: "legacy".into(),
        name: "Legacy Context Engine".into(),
        version: Some("1.0.0".into()),
        accepted_host_params: Some(HOST_PARAM_KEYS.iter().map(|s| (*s).to_owned()).collect()),
        ..Default::default()
    }
}

/// The factory core registers under `legacy`.
pub fn legacy_factory() -> Factory {
    factory(|_ctx| async { Ok(Arc::new(LegacyEngine) as Arc<dyn ContextEngine>) })
}

#[async_trait]
impl ContextEngine for LegacyEngine {
    fn info(&self) -> ContextEngineInfo {
        legacy_info()
    }

    fn methods(&self) -> MethodSet {
        MethodSet::REQUIRED
            .with(Method::AfterTurn)
            .with(Method::Dispose)
    }

    fn is_runtime_compaction_delegate(&self) -> bool {
        true
    }

    async fn ingest(
        &self,
        _params: &IngestParams,
        _cx: &CallContext,
    ) -> Result<IngestResult, EngineError> {
        Ok(IngestResult { ingested: false })
    }

    async fn assemble(
        &self,
        params: &AssembleParams,
        _cx: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        Ok(AssembleResult {
            messages: params.messages.clone(),
            estimated_tokens: 0,
            ..Default::default()
        })
    }

    async fn compact(
        &self,
        params: &CompactParams,
        cx: &CallContext,
    ) -> Result<CompactResult, EngineError> {
        delegate_compaction_to_runtime(params, cx).await
    }

    async fn after_turn(
        &self,
        _params: &AfterTurnParams,
        _cx: &CallContext,
    ) -> Result<(), EngineError> {
        Ok(())
    }
}

/// The identity-conflict error text.
pub const SUCCESSOR_CONFLICT: &str =
    "Context-engine successor target conflicts with the caller session identity";
/// The successor key/agent conflict error text.
pub const SUCCESSOR_KEY_AGENT_CONFLICT: &str =
    "Context-engine successor session key conflicts with its agent identity";

/// The agent id in a session key of the form `agent:<agentId>:...`.
pub fn agent_id_from_session_key(key: &str) -> Option<&str> {
    let rest = key.trim().strip_prefix("agent:")?;
    let id = rest.split(':').next()?;
    (!id.is_empty()).then_some(id)
}

fn trimmed(s: Option<&str>) -> Option<&str> {
    s.map(str::trim).filter(|s| !s.is_empty())
}

fn all_agree<'a>(values: impl IntoIterator<Item = Option<&'a str>>) -> bool {
    let mut seen: Option<&str> = None;
    for v in values.into_iter().flatten() {
        match seen {
            None => seen = Some(v),
            Some(s) if s != v => return false,
            Some(_) => {}
        }
    }
    true
}

/// Builds the runtime request from compact params (§7.2) and checks identity consistency
/// before the runtime runs. Split out so it can be tested without a runtime.
pub fn build_runtime_compaction_request(
    params: &CompactParams,
    cx: &CallContext,
) -> Result<RuntimeCompactionRequest, EngineError> {
    let rc = params.runtime_context.as_ref();
    let agent_id = params
        .agent_id
        .clone()
        .or_else(|| rc.and_then(|r| r.agent_id.clone()));
    let session_key = params
        .session_key
        .clone()
        .or_else(|| rc.and_then(|r| r.session_key.clone()));
    let session_target = params
        .session_target
        .clone()
        .or_else(|| rc.and_then(|r| r.session_target.clone()));
    let current_token_count = params.current_token_count.or_else(|| {
        rc.and_then(|r| r.current_token_count)
            .filter(|n| n.is_finite() && *n > 0.0)
            .map(|n| n.floor() as u64)
    });
    let workspace_dir = rc.and_then(|r| r.workspace_dir.clone()).unwrap_or_else(|| {
        std::env::current_dir()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
    });

    // Identity-conflict guard: every agent id, session id and session key that names the caller
    // must agree (trimmed; blank values say nothing).
    let key_agent = session_key.as_deref().and_then(agent_id_from_session_key);
    let target = session_target.as_ref();
    let target_key = target.and_then(|t| t.session_key.as_deref());
    let target_key_agent = target_key.and_then(agent_id_from_session_key);
    let agents_ok = all_agree([
        trimmed(agent_id.as_deref()),
        key_agent,
        trimmed(target.and_then(|t| t.agent_id.as_deref())),
        target_key_agent,
    ]);
    let sessions_ok = all_agree([
        trimmed(Some(params.session_id.as_str())),
        trimmed(target.and_then(|t| t.session_id.as_deref())),
    ]);
    let keys_ok = all_agree([trimmed(session_key.as_deref()), trimmed(target_key)]);
    if !(agents_ok && sessions_ok && keys_ok) {
        return Err(EngineError::failed(SUCCESSOR_CONFLICT));
    }

    let mut runtime_fields = JsonMap::new();
    if let Some(rc) = rc {
        if let Ok(serde_json::Value::Object(map)) = serde_json::to_value(rc) {
            for (k, v) in map {
                if k != "sessionFile" {
                    runtime_fields.insert(k, v);
                }
            }
        }
    }
    Ok(RuntimeCompactionRequest {
        session_id: params.session_id.clone(),
        session_key,
        agent_id,
        session_target,
        token_budget: params.token_budget,
        force: params.force,
        custom_instructions: params.custom_instructions.clone(),
        current_token_count,
        workspace_dir,
        runtime_fields,
        context_engine_runtime_context: params.runtime_context.clone(),
        abort: cx.abort.clone(),
    })
}

/// `delegateCompactionToRuntime`: runs the runtime's built-in compaction for these params and
/// maps its result (`compactionTarget` is ignored: the runtime has no such knob).
pub async fn delegate_compaction_to_runtime(
    params: &CompactParams,
    cx: &CallContext,
) -> Result<CompactResult, EngineError> {
    let request = build_runtime_compaction_request(params, cx)?;
    let services = cx.services.clone().ok_or_else(|| {
        EngineError::failed("runtime compaction is not available: no runtime context was passed")
    })?;
    let caller_agent = request.agent_id.clone().or_else(|| {
        request
            .session_key
            .as_deref()
            .and_then(agent_id_from_session_key)
            .map(str::to_owned)
    });
    let outcome = services.compact_session(request).await?;
    let result = match outcome.result {
        None => None,
        Some(d) => {
            if let (Some(key), Some(agent)) = (d.session_key.as_deref(), d.agent_id.as_deref()) {
                if agent_id_from_session_key(key).is_some_and(|a| a != agent.trim()) {
                    return Err(EngineError::failed(SUCCESSOR_KEY_AGENT_CONFLICT));
                }
            }
            if let (Some(successor_agent), Some(caller)) =
                (d.agent_id.as_deref(), caller_agent.as_deref())
            {
                if successor_agent.trim() != caller.trim() {
                    return Err(EngineError::failed(SUCCESSOR_CONFLICT));
                }
            }
            let session_target = d.session_id.as_ref().map(|sid| ContextEngineSessionTarget {
                agent_id: d.agent_id.clone().or_else(|| caller_agent.clone()),
                session_id: Some(sid.clone()),
                session_key: d.session_key.clone().or_else(|| params.session_key.clone()),
                store_path: d.store_path.clone(),
                thread_id: None,
            });
            Some(CompactResultDetail {
                summary: d.summary,
                first_kept_entry_id: d.first_kept_entry_id,
                tokens_before: d.tokens_before,
                tokens_after: d.tokens_after,
                details: d.details,
                session_id: d.session_id,
                session_target,
                session_file: None,
            })
        }
    };
    Ok(CompactResult {
        ok: outcome.ok,
        compacted: outcome.compacted,
        reason: outcome.reason,
        result,
    })
}
