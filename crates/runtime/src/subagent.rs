//! Subagent spawn and end (contract §8).
//!
//! A spawn creates a child session — `isolated` (empty) or `fork` (a copy of the parent's
//! active branch, through the transcript crate; an oversized parent branch starts isolated) —
//! then offers the engine `prepareSubagentSpawn` with both keys, ids and files, the mode and
//! the ttl. If the launch (the child's first turn) fails after preparation succeeded, the
//! returned rollback runs. `onSubagentEnded` reports the end: `completed` when the caller says
//! so, `swept` when the ttl ran out, `deleted`/`released` on explicit cleanup.

use std::time::{Duration, Instant};

use clawctx_engine::*;
use clawctx_protocol::*;
use clawctx_transcript::new_subagent_session_key;

use crate::error::{Result, RuntimeError};
use crate::runtime::{check_host, lock, tokens_of, AgentRuntime};
use crate::turn::{TurnOutcome, TurnRequest};

/// The exact error of a failed fork (§8).
pub const FORK_FAILED: &str = "context=\"fork\" could not fork the requester transcript.";

/// A subagent spawn request.
#[derive(Clone, Debug)]
pub struct SpawnRequest {
    /// The requester's session key.
    pub parent_session_key: String,
    /// `isolated` or `fork`.
    pub mode: SubagentContextMode,
    /// Target agent (default: the parent's).
    pub agent_id: Option<String>,
    /// Time to live; the child is swept after it.
    pub ttl_ms: Option<u64>,
    /// The child's first prompt (the launch). `None` prepares the child without running it.
    pub prompt: Option<String>,
}

/// A spawned subagent.
#[derive(Clone, Debug)]
pub struct SubagentHandle {
    /// Child session key (`agent:<id>:subagent:<uuid>`).
    pub child_session_key: String,
    /// Child session id.
    pub child_session_id: String,
    /// Child transcript.
    pub child_session_file: String,
    /// The mode actually used (a fork of an oversized parent starts isolated).
    pub mode: SubagentContextMode,
    /// The child's first turn, when a prompt was given.
    pub first_turn: Option<TurnOutcome>,
}

pub(crate) struct SubagentRecord {
    pub(crate) deadline: Option<Instant>,
}

impl AgentRuntime {
    /// Spawns a subagent (see the module docs).
    pub async fn spawn_subagent(&self, request: SpawnRequest) -> Result<SubagentHandle> {
        let inner = &self.inner;
        check_host(inner, ContextEngineOperation::SubagentSpawn)?;
        let parent = inner.session(&request.parent_session_key)?;
        let agent_id = request
            .agent_id
            .clone()
            .unwrap_or_else(|| parent.agent_id.clone());
        let child_key = new_subagent_session_key(&agent_id)?;

        let mut mode = request.mode;
        if mode == SubagentContextMode::Fork {
            let parent_context: Vec<AgentMessage> = inner
                .history(&parent)?
                .into_iter()
                .map(|(_, m)| m)
                .collect();
            if tokens_of(&parent_context) > inner.limits().prompt_budget {
                tracing::info!(parent = %parent.key, "parent branch exceeds the budget: the subagent starts isolated");
                mode = SubagentContextMode::Isolated;
            }
        }
        let child = match mode {
            SubagentContextMode::Fork => inner
                .store
                .fork_session(&parent.key, &child_key)
                .map_err(|e| {
                    tracing::warn!("subagent fork failed: {e}");
                    RuntimeError::Spawn(FORK_FAILED.to_owned())
                })?,
            SubagentContextMode::Isolated => inner.store.resolve(&child_key)?,
        };
        let engine = inner.engine.clone();
        let engine_id = engine.info().id;
        let preparation = if engine.methods().has(Method::PrepareSubagentSpawn) {
            let params = PrepareSubagentSpawnParams {
                parent_session_key: parent.key.clone(),
                child_session_key: child.key.clone(),
                context_mode: Some(mode),
                parent_session_id: Some(parent.entry.session_id.clone()),
                parent_session_file: Some(parent.transcript_path.to_string_lossy().into_owned()),
                child_session_id: Some(child.entry.session_id.clone()),
                child_session_file: Some(child.transcript_path.to_string_lossy().into_owned()),
                ttl_ms: request.ttl_ms,
            };
            engine
                .prepare_subagent_spawn(&params, &inner.call_context(&parent, None))
                .await
                .map_err(|e| {
                    RuntimeError::Spawn(format!(
                        "context engine \"{engine_id}\" prepareSubagentSpawn failed: {e}"
                    ))
                })?
        } else {
            None
        };
        let deadline = request
            .ttl_ms
            .map(|ms| Instant::now() + Duration::from_millis(ms));
        lock(&inner.subagents)?.insert(child.key.clone(), SubagentRecord { deadline });

        let first_turn = match request.prompt {
            None => None,
            Some(prompt) => match self
                .run_turn(TurnRequest::new(child.key.clone(), prompt))
                .await
            {
                Ok(o) => Some(o),
                Err(launch) => {
                    lock(&inner.subagents)?.remove(&child.key);
                    if let Some(p) = preparation {
                        if let Err(e) = p.rollback().await {
                            tracing::warn!("subagent spawn rollback failed: {e}");
                        }
                    }
                    return Err(RuntimeError::Spawn(format!(
                        "the subagent launch failed: {launch}"
                    )));
                }
            },
        };
        Ok(SubagentHandle {
            child_session_key: child.key.clone(),
            child_session_id: child.entry.session_id.clone(),
            child_session_file: child.transcript_path.to_string_lossy().into_owned(),
            mode,
            first_turn,
        })
    }

    /// Reports a subagent's end to the engine (`onSubagentEnded`). Engine failures are logged.
    pub async fn end_subagent(
        &self,
        child_session_key: &str,
        reason: SubagentEndReason,
    ) -> Result<()> {
        lock(&self.inner.subagents)?.remove(child_session_key);
        let engine = &self.inner.engine;
        if !engine.methods().has(Method::OnSubagentEnded) {
            return Ok(());
        }
        let params = SubagentEndedParams {
            child_session_key: child_session_key.to_owned(),
            reason,
        };
        if let Err(e) = engine
            .on_subagent_ended(&params, &CallContext::none())
            .await
        {
            tracing::warn!("context engine onSubagentEnded failed: {e}");
        }
        Ok(())
    }

    /// Ends every subagent whose ttl has run out with reason `swept`; returns their keys.
    pub async fn sweep_subagents(&self) -> Result<Vec<String>> {
        let now = Instant::now();
        let expired: Vec<String> = lock(&self.inner.subagents)?
            .iter()
            .filter(|(_, r)| r.deadline.is_some_and(|d| d <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in &expired {
            self.end_subagent(key, SubagentEndReason::Swept).await?;
        }
        Ok(expired)
    }
}
