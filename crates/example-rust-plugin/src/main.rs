//! An example context-engine plugin in Rust: a budgeted recent-window engine served over the
//! clawctx plugin protocol with `clawctx-plugin-sdk`.
//!
//! `assemble` keeps the newest messages that fit the token budget, measured with the host's own
//! estimator (`clawctx_tokens`), never starting the window at a tool result; `ingest` counts
//! messages per session; `compact` is delegated to the host runtime; `afterTurn`, subagent hooks
//! and `dispose` show the optional surface. The manifest lives in `examples/plugins/rust-engine`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use clawctx_engine::*;
use clawctx_protocol::*;

/// The engine id this plugin registers.
const ENGINE_ID: &str = "rust-engine";

#[derive(Default)]
struct RecentWindow {
    ingested: Mutex<HashMap<String, u64>>,
    turns: Mutex<u64>,
    children: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl ContextEngine for RecentWindow {
    fn info(&self) -> ContextEngineInfo {
        ContextEngineInfo {
            version: Some(env!("CARGO_PKG_VERSION").into()),
            ..ContextEngineInfo::new(ENGINE_ID, "Rust Recent Window")
        }
    }

    fn methods(&self) -> MethodSet {
        MethodSet::REQUIRED
            .with(Method::AfterTurn)
            .with(Method::PrepareSubagentSpawn)
            .with(Method::OnSubagentEnded)
            .with(Method::Dispose)
    }

    fn is_runtime_compaction_delegate(&self) -> bool {
        true
    }

    async fn ingest(
        &self,
        params: &IngestParams,
        _cx: &CallContext,
    ) -> Result<IngestResult, EngineError> {
        let mut map = self
            .ingested
            .lock()
            .map_err(|_| EngineError::failed("state poisoned"))?;
        *map.entry(params.session_id.clone()).or_default() += 1;
        Ok(IngestResult { ingested: true })
    }

    async fn assemble(
        &self,
        params: &AssembleParams,
        _cx: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        let msgs = &params.messages;
        let mut start = msgs.len();
        let mut used = 0;
        while start > 0 {
            let cost = clawctx_tokens::message_tokens(&msgs[start - 1]);
            if params.token_budget.is_some_and(|b| used + cost > b) {
                break;
            }
            used += cost;
            start -= 1;
        }
        while start < msgs.len() && msgs[start].tool_result_id().is_some() {
            used -= clawctx_tokens::message_tokens(&msgs[start]);
            start += 1;
        }
        let turns = self.turns.lock().map(|t| *t).unwrap_or(0);
        let children = self
            .children
            .lock()
            .map(|c| c.join(","))
            .unwrap_or_default();
        Ok(AssembleResult {
            messages: msgs[start..].to_vec(),
            estimated_tokens: used,
            system_prompt_addition: Some(format!("rust-engine: turns={turns} children={children}")),
            ..Default::default()
        })
    }

    async fn compact(
        &self,
        _params: &CompactParams,
        _cx: &CallContext,
    ) -> Result<CompactResult, EngineError> {
        // Never reached over the protocol: the SDK answers with the runtime-delegation marker.
        Ok(CompactResult {
            ok: true,
            compacted: false,
            reason: Some("delegated-to-runtime".into()),
            result: None,
        })
    }

    async fn after_turn(
        &self,
        _params: &AfterTurnParams,
        _cx: &CallContext,
    ) -> Result<(), EngineError> {
        if let Ok(mut t) = self.turns.lock() {
            *t += 1;
        }
        Ok(())
    }

    async fn prepare_subagent_spawn(
        &self,
        params: &PrepareSubagentSpawnParams,
        _cx: &CallContext,
    ) -> Result<Option<SubagentSpawnPreparation>, EngineError> {
        let key = params.child_session_key.clone();
        if let Ok(mut c) = self.children.lock() {
            c.push(key.clone());
        }
        let children = self.children.clone();
        Ok(Some(SubagentSpawnPreparation::new(move || async move {
            if let Ok(mut c) = children.lock() {
                c.retain(|k| *k != key);
            }
            Ok(())
        })))
    }

    async fn on_subagent_ended(
        &self,
        params: &SubagentEndedParams,
        _cx: &CallContext,
    ) -> Result<(), EngineError> {
        if let Ok(mut c) = self.children.lock() {
            c.retain(|k| *k != params.child_session_key);
        }
        Ok(())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), clawctx_plugin_sdk::SdkError> {
    let plugin = clawctx_plugin_sdk::Plugin::new().engine(
        ENGINE_ID,
        factory(|_ctx| async { Ok(Arc::new(RecentWindow::default()) as Arc<dyn ContextEngine>) }),
    );
    clawctx_plugin_sdk::serve(plugin).await
}
