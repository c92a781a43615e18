//! One turn on a generic CLI backend host (contract §5).
//!
//! The backend keeps its own thread history and the host cannot control its prompt
//! (`assemble-before-prompt` is not offered). The host still persists the transcript, bootstraps
//! the engine, projects the engine's assembled context into the backend's instructions
//! (`per_turn`: every turn; `thread_bootstrap` + `epoch`: once per epoch), delivers the finished
//! turn to the engine and runs maintenance. The host-requirement check has already run before
//! this module starts the process.

use std::sync::Arc;

use clawctx_engine::pipeline::{prepare_history, PipelineOptions};
use clawctx_engine::*;
use clawctx_protocol::*;

use crate::error::{Result, RuntimeError};
use crate::maintain::MaintenanceReason;
use crate::model::Backend;
use crate::runtime::{lock, now_ms, tokens_of, Inner};
use crate::turn::{TurnOutcome, TurnRequest};

/// Whether the assembled context must be injected this turn, and the epoch to remember.
fn needs_injection(
    inner: &Inner,
    key: &str,
    projection: Option<&ContextProjection>,
) -> Result<(bool, Option<String>)> {
    match projection {
        Some(p) if p.mode == ContextProjectionMode::ThreadBootstrap => {
            let epoch = p.epoch.clone().unwrap_or_default();
            let last = lock(&inner.projection_epochs)?.get(key).cloned();
            Ok((last.as_deref() != Some(epoch.as_str()), Some(epoch)))
        }
        _ => Ok((true, None)),
    }
}

pub(crate) async fn run(inner: Arc<Inner>, request: TurnRequest) -> Result<TurnOutcome> {
    let Backend::Cli(spec) = &inner.backend else {
        return Err(RuntimeError::Internal("cli turn on a model backend".into()));
    };
    let abort = request.abort.clone().unwrap_or_default();
    let session = inner.session(&request.session_key)?;
    let history: Vec<AgentMessage> = inner
        .history(&session)?
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    let mut out = TurnOutcome {
        session_key: session.key.clone(),
        session_id: session.entry.session_id.clone(),
        token_budget: inner.limits().prompt_budget,
        context_tokens_before: tokens_of(&history),
        ..Default::default()
    };
    // Bootstrap only a session file that existed, before the prompt is in it (as the
    // embedded runner does).
    if inner.transcript_is_empty(&session)? {
        inner.mark_bootstrapped(&session)?;
    } else {
        inner.ensure_bootstrapped(&session, &abort).await?;
    }
    let user = AgentMessage::user(request.prompt.clone()).with_timestamp(now_ms());
    inner.append(&session, user.clone())?;
    let mut turn = vec![user];

    let engine = inner.engine.clone();
    let engine_id = engine.info().id;
    let cx = inner.call_context(&session, Some(&abort));
    let budget = inner
        .limits()
        .prompt_budget
        .saturating_sub(tokens_of(&turn))
        .max(1);
    let prepared = prepare_history(
        history.clone(),
        &PipelineOptions {
            history_turn_limit: inner.history_turn_limit,
            token_budget: Some(budget),
        },
    );
    let params = AssembleParams {
        session_id: session.entry.session_id.clone(),
        session_key: Some(session.key.clone()),
        messages: prepared.messages,
        token_budget: Some(budget),
        prompt: Some(request.prompt.clone()),
        runtime_settings: Some(inner.runtime_settings()),
        runtime_context: Some(inner.runtime_context(
            &session,
            Some(prepared.report.tokens),
            None,
            false,
        )),
        ..Default::default()
    };
    let mut assembled = engine
        .assemble(&params, &cx)
        .await
        .map_err(|e| RuntimeError::engine(&engine_id, "assemble", e))?;
    // System-role messages go into the system prompt, as on the embedded runner.
    let folded = crate::turn::take_system_messages(&mut assembled);
    if !folded.is_empty() {
        out.warnings.extend(crate::turn::warn_system_messages_once(
            &engine_id,
            folded.len(),
        ));
    }
    let (inject, epoch) =
        needs_injection(&inner, &session.key, assembled.context_projection.as_ref())?;
    let prompt = if inject {
        let (system, _) = crate::turn::compose_system(
            &inner.system_prompt,
            assembled.system_prompt_addition.as_deref(),
            &folded,
        );
        crate::cli_backend::project_prompt(&system, &assembled.messages, &request.prompt)
    } else {
        request.prompt.clone()
    };
    out.prompt_tokens.push(clawctx_tokens::text_tokens(&prompt));
    out.model_calls = 1;
    let reply = spec
        .invoke(&prompt, &session.key, &session.entry.session_id, &abort)
        .await?;
    if let Some(epoch) = epoch {
        lock(&inner.projection_epochs)?.insert(session.key.clone(), epoch);
    }
    let assistant = AgentMessage::Assistant(AssistantMessage {
        content: Content::Blocks(vec![ContentBlock::text(reply.clone())]),
        api: Some("cli-backend".into()),
        provider: Some(format!("cli:{}", spec.id)),
        model: Some(spec.id.clone()),
        stop_reason: Some("stop".into()),
        timestamp: Some(serde_json::Number::from(now_ms())),
        ..Default::default()
    });
    inner.append(&session, assistant.clone())?;
    turn.push(assistant);
    out.reply = reply;

    let all: Vec<AgentMessage> = history.iter().chain(turn.iter()).cloned().collect();
    let methods = engine.methods();
    let delivered = if methods.has(Method::AfterTurn) && inner.host.has(HostCapability::AFTER_TURN)
    {
        let params = AfterTurnParams {
            session_id: session.entry.session_id.clone(),
            session_key: Some(session.key.clone()),
            session_target: Some(inner.session_target(&session)),
            session_file: session.transcript_path.to_string_lossy().into_owned(),
            messages: all.clone(),
            pre_prompt_message_count: history.len() as u64,
            token_budget: Some(inner.limits().prompt_budget),
            current_token_count: Some(tokens_of(&all)),
            runtime_settings: Some(inner.runtime_settings()),
            runtime_context: Some(inner.runtime_context(
                &session,
                Some(tokens_of(&all)),
                None,
                false,
            )),
            is_heartbeat: request.is_heartbeat.then_some(true),
            ..Default::default()
        };
        engine.after_turn(&params, &cx).await
    } else if methods.has(Method::IngestBatch) {
        let params = IngestBatchParams {
            session_id: session.entry.session_id.clone(),
            session_key: Some(session.key.clone()),
            messages: turn.clone(),
            is_heartbeat: request.is_heartbeat.then_some(true),
        };
        engine.ingest_batch(&params, &cx).await.map(|_| ())
    } else {
        let mut r = Ok(());
        for m in &turn {
            let params = IngestParams {
                session_id: session.entry.session_id.clone(),
                session_key: Some(session.key.clone()),
                message: m.clone(),
                is_heartbeat: request.is_heartbeat.then_some(true),
            };
            if let Err(e) = engine.ingest(&params, &cx).await {
                r = Err(e);
                break;
            }
        }
        r
    };
    if let Err(e) = delivered {
        out.warnings
            .push(format!("context engine afterTurn failed: {e}"));
    }
    inner.maintain(&session, MaintenanceReason::Turn).await;
    out.context_tokens_after = tokens_of(&all);
    out.engine = engine.info().id;
    out.messages = turn;
    Ok(out)
}
