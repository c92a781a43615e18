//! The `reply-commit` kill point's child: `clawctx bench crash-child --mode runtime`. A whole
//! host in one process (the runtime's turn loop over a session transcript, its durable-turn
//! outbox, the lossless engine on the campaign's store), killed in the moment between the
//! model's reply and the engine's `commitTurn`: where a host that appended the reply before it
//! wrote the commit left a finished turn the engine never receives (issue #27 item 3).
//!
//! Each turn is two messages: the user's prompt carries the token of id `first`, the model's
//! reply the token of `first + 1` ([`super::workload::token`]). The child says on stdout, each
//! line flushed: `OPEN` once the runtime is up and has delivered what the outbox kept from the
//! last run (the restart's recovery), `SEND first 2` before a turn, `REPLY first 2` when the
//! model has answered (the parent's kill delays for this point count from this line),
//! `COMMIT first 2` when the engine's `commitTurn` for the turn starts, `ACK first 2` when the
//! turn returned to its caller, `DONE` at the end. A run with no units only recovers.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use clawctx_engine::*;
use clawctx_model::{
    Completion, CompletionRequest, EventSender, Exhaustion, ModelError, ModelProvider,
    ScriptedProvider, ScriptedReply,
};
use clawctx_protocol::*;
use clawctx_runtime::{AgentRuntime, Backend, ModelBinding, TurnRequest};
use tokio_util::sync::CancellationToken;

use super::child::open_engine;
use super::workload::{token, tokens_in};
use crate::error::{BenchError, Result};

/// The session the child's turns run in.
pub const RUNTIME_SESSION_KEY: &str = "agent:main:crash-runtime";

fn say(line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| BenchError::io("stdout", e))
}

/// The first token id in a message's text.
fn first_id(m: &AgentMessage) -> Option<u64> {
    tokens_in(&m.plain_text()).first().copied()
}

/// A model that answers the prompt carrying token `id` with a reply carrying `id + 1`, and
/// says `REPLY id 2` once it has.
#[derive(Debug)]
struct TokenModel;

#[async_trait]
impl ModelProvider for TokenModel {
    fn id(&self) -> &str {
        "crash"
    }
    fn api(&self) -> &str {
        "scripted"
    }
    async fn complete(
        &self,
        request: CompletionRequest,
        events: Option<&EventSender>,
        cancel: &CancellationToken,
    ) -> std::result::Result<Completion, ModelError> {
        let id = request
            .messages
            .iter()
            .rev()
            .find(|m| m.role() == "user")
            .and_then(first_id)
            .ok_or_else(|| ModelError::BadResponse {
                provider: "crash".into(),
                message: "the prompt carries no token".into(),
            })?;
        let reply = ScriptedProvider::new(
            vec![ScriptedReply::text(format!(
                "{} noted, the build passed after the cache change",
                token(id + 1)
            ))],
            Exhaustion::Cycle,
        );
        let completion = reply.complete(request, events, cancel).await?;
        say(&format!("REPLY {id} 2")).map_err(|e| ModelError::BadResponse {
            provider: "crash".into(),
            message: e.to_string(),
        })?;
        Ok(completion)
    }
}

/// The lossless engine, saying `COMMIT first n` when a `commitTurn` starts.
struct Watched(Arc<dyn ContextEngine>);

#[async_trait]
impl ContextEngine for Watched {
    fn info(&self) -> ContextEngineInfo {
        self.0.info()
    }
    fn methods(&self) -> MethodSet {
        self.0.methods()
    }
    fn is_runtime_compaction_delegate(&self) -> bool {
        self.0.is_runtime_compaction_delegate()
    }
    fn tools(&self) -> Vec<Arc<dyn AgentTool>> {
        self.0.tools()
    }
    async fn ingest(
        &self,
        p: &IngestParams,
        cx: &CallContext,
    ) -> Result<IngestResult, EngineError> {
        self.0.ingest(p, cx).await
    }
    async fn assemble(
        &self,
        p: &AssembleParams,
        cx: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        self.0.assemble(p, cx).await
    }
    async fn compact(
        &self,
        p: &CompactParams,
        cx: &CallContext,
    ) -> Result<CompactResult, EngineError> {
        self.0.compact(p, cx).await
    }
    async fn ingest_batch(
        &self,
        p: &IngestBatchParams,
        cx: &CallContext,
    ) -> Result<IngestBatchResult, EngineError> {
        self.0.ingest_batch(p, cx).await
    }
    async fn bootstrap(
        &self,
        p: &BootstrapParams,
        cx: &CallContext,
    ) -> Result<BootstrapResult, EngineError> {
        self.0.bootstrap(p, cx).await
    }
    async fn maintain(
        &self,
        p: &MaintainParams,
        cx: &CallContext,
    ) -> Result<TranscriptRewriteResult, EngineError> {
        self.0.maintain(p, cx).await
    }
    async fn after_turn(&self, p: &AfterTurnParams, cx: &CallContext) -> Result<(), EngineError> {
        self.0.after_turn(p, cx).await
    }
    async fn commit_turn(
        &self,
        p: &CommitTurnParams,
        cx: &CallContext,
    ) -> Result<CommitTurnResult, EngineError> {
        if let Some(id) = p.messages.first().and_then(first_id) {
            say(&format!("COMMIT {id} {}", p.messages.len()))
                .map_err(|e| EngineError::failed(e.to_string()))?;
        }
        self.0.commit_turn(p, cx).await
    }
    async fn prepare_subagent_spawn(
        &self,
        p: &PrepareSubagentSpawnParams,
        cx: &CallContext,
    ) -> Result<Option<SubagentSpawnPreparation>, EngineError> {
        self.0.prepare_subagent_spawn(p, cx).await
    }
    async fn on_subagent_ended(
        &self,
        p: &SubagentEndedParams,
        cx: &CallContext,
    ) -> Result<(), EngineError> {
        self.0.on_subagent_ended(p, cx).await
    }
    async fn dispose(&self) -> Result<(), EngineError> {
        self.0.dispose().await
    }
}

/// One run of the `runtime` child: `units` turns from id `first` in the session of
/// [`RUNTIME_SESSION_KEY`] under `state_dir` (see the module header).
pub async fn run_runtime_child(
    store: &str,
    state_dir: PathBuf,
    first: u64,
    units: u64,
) -> Result<()> {
    let summarizer = Arc::new(clawctx_summarize::ExtractiveSummarizer);
    let engine: Arc<dyn ContextEngine> = Arc::new(open_engine(store, summarizer).await?);
    let watched: Arc<dyn ContextEngine> = Arc::new(Watched(engine.clone()));
    let backend = Backend::Model(ModelBinding::new(Arc::new(TokenModel), "m", 32_000, 512));
    let rt = AgentRuntime::builder(state_dir, watched, backend).build();
    rt.deliver_pending_commits().await;
    let waiting = rt.commit_retry_status();
    if waiting.sessions > 0 {
        return Err(BenchError::engine(
            "lossless",
            "commitTurn",
            waiting.last_failure.unwrap_or_default(),
        ));
    }
    say("OPEN")?;
    for i in 0..units {
        let id = first + 2 * i;
        say(&format!("SEND {id} 2"))?;
        let outcome = rt
            .run_turn(TurnRequest::new(
                RUNTIME_SESSION_KEY,
                format!("{} did the build pass after the cache change", token(id)),
            ))
            .await
            .map_err(|e| BenchError::engine("runtime", "turn", e))?;
        // A commit that did not reach the engine would make the `ACK` a lie.
        if let Some(w) = outcome.warnings.iter().find(|w| w.contains("commitTurn")) {
            return Err(BenchError::engine("runtime", "turn", w));
        }
        say(&format!("ACK {id} 2"))?;
    }
    say("DONE")?;
    let _ = engine.dispose().await;
    Ok(())
}
