//! The checks every engine's `assemble` result gets behind the guard (contract §2, §4.1), for
//! in-process engines as for plugins: a `toolResult` without a `toolCallId` quarantines with a
//! reason naming the index and the field; a `system`-role message does not (the runtime folds
//! it into the system prompt, a deliberate deviation).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use async_trait::async_trait;
use clawctx_engine::registry::RegisterOptions;
use clawctx_engine::*;
use clawctx_protocol::*;
use serde_json::json;

/// An engine whose assemble answers `prepend` followed by the history.
struct Prepending {
    prepend: Vec<AgentMessage>,
}

#[async_trait]
impl ContextEngine for Prepending {
    fn info(&self) -> ContextEngineInfo {
        ContextEngineInfo::new("prepending", "Prepending")
    }

    async fn ingest(&self, _: &IngestParams, _: &CallContext) -> Result<IngestResult, EngineError> {
        Ok(IngestResult { ingested: true })
    }

    async fn assemble(
        &self,
        params: &AssembleParams,
        _: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        let mut messages = self.prepend.clone();
        messages.extend(params.messages.iter().cloned());
        Ok(AssembleResult {
            messages,
            estimated_tokens: 1,
            ..Default::default()
        })
    }

    async fn compact(
        &self,
        _: &CompactParams,
        _: &CallContext,
    ) -> Result<CompactResult, EngineError> {
        Ok(CompactResult {
            ok: true,
            compacted: false,
            ..Default::default()
        })
    }
}

async fn assemble_through_the_guard(
    prepend: Vec<AgentMessage>,
) -> (Arc<ContextEngineRegistry>, AssembleParams, AssembleResult) {
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    let engine: Arc<dyn ContextEngine> = Arc::new(Prepending { prepend });
    registry
        .register_for_owner(
            "prepending",
            factory(move |_| {
                let e = engine.clone();
                async move { Ok(e) }
            }),
            "test:prepending",
            RegisterOptions::default(),
        )
        .unwrap();
    let config = Arc::new(json!({"plugins": {"slots": {"contextEngine": "prepending"}}}));
    let resolved = registry.resolve(Some(config), None, None).await.unwrap();
    let params = AssembleParams {
        session_id: "s".into(),
        messages: vec![
            AgentMessage::user("read a.rs"),
            AgentMessage::tool_call("c1", "read", json!({"path": "a.rs"})),
            AgentMessage::tool_result("c1", "read", "fn main() {}"),
        ],
        token_budget: Some(10_000),
        ..Default::default()
    };
    let result = resolved
        .engine
        .assemble(&params, &CallContext::none())
        .await
        .expect("an answer, from legacy at worst");
    (registry, params, result)
}

#[tokio::test]
async fn a_tool_result_without_a_tool_call_id_quarantines_naming_the_index_and_field() {
    let orphan = AgentMessage::ToolResult(ToolResultMessage {
        tool_call_id: String::new(),
        tool_name: "read".into(),
        content: Content::Text("lost its call".into()),
        ..Default::default()
    });
    let (registry, params, result) =
        assemble_through_the_guard(vec![AgentMessage::user("recalled"), orphan]).await;
    assert_eq!(
        result.messages, params.messages,
        "legacy answered the same call"
    );
    let q = registry.quarantines();
    assert_eq!(q.len(), 1, "{q:?}");
    assert_eq!(q[0].engine_id, "prepending");
    assert_eq!(q[0].operation, "assemble");
    assert!(
        q[0].reason.starts_with("contract violation: "),
        "{}",
        q[0].reason
    );
    assert!(
        q[0].reason.contains("at index 1") && q[0].reason.contains("toolCallId"),
        "{}",
        q[0].reason
    );
}

#[tokio::test]
async fn a_system_message_passes_the_guard_for_the_runtime_to_fold() {
    let system = AgentMessage::from_map(
        json!({"role": "system", "content": "Recalled: the build uses cargo."})
            .as_object()
            .cloned()
            .unwrap(),
    )
    .unwrap();
    let (registry, params, result) = assemble_through_the_guard(vec![system.clone()]).await;
    assert!(
        registry.quarantines().is_empty(),
        "{:?}",
        registry.quarantines()
    );
    assert_eq!(result.messages.first(), Some(&system));
    assert_eq!(&result.messages[1..], &params.messages[..]);
}

#[test]
fn the_check_accepts_paired_results_and_names_the_first_bad_one() {
    let ok = vec![
        AgentMessage::tool_call("c1", "read", json!({})),
        AgentMessage::tool_result("c1", "read", "x"),
    ];
    assert_eq!(guard::check_assembled_messages(&ok), Ok(()));
    let mut bad = ok.clone();
    bad.push(AgentMessage::tool_result("  ", "read", "y"));
    assert_eq!(
        guard::check_assembled_messages(&bad),
        Err(guard::missing_tool_call_id(2))
    );
}
