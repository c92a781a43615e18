//! `system`-role messages in an engine's assemble result (issue #16 item 4, a deliberate
//! deviation from OpenClaw, which drops them): their text is folded into the run's system
//! prompt the way `systemPromptAddition` is, counted in the budget, and warned about once per
//! engine, not per turn. The same holds on the CLI-backend host.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use async_trait::async_trait;
use clawctx_engine::*;
use clawctx_model::{Exhaustion, ScriptedProvider, ScriptedReply};
use clawctx_protocol::*;
use clawctx_runtime::*;
use clawctx_test_support::logs::capture_tracing;
use serde_json::json;

const KEY: &str = "agent:main:main";
const BUDGET: u64 = 1_500;

/// Returns its recalled memories as a `system` message first, then the whole history it was
/// given, whatever the budget (an engine that overspends: the final clamp must make room for
/// the memories in the system prompt).
struct Memories {
    id: &'static str,
    memories: String,
}

impl Memories {
    fn system_message(&self) -> AgentMessage {
        AgentMessage::from_map(
            json!({"role": "system", "content": self.memories})
                .as_object()
                .cloned()
                .unwrap(),
        )
        .unwrap()
    }
}

#[async_trait]
impl ContextEngine for Memories {
    fn info(&self) -> ContextEngineInfo {
        let mut info = ContextEngineInfo::new(self.id, "Memories first");
        info.owns_compaction = Some(true);
        info
    }

    async fn ingest(&self, _: &IngestParams, _: &CallContext) -> Result<IngestResult, EngineError> {
        Ok(IngestResult { ingested: true })
    }

    async fn assemble(
        &self,
        params: &AssembleParams,
        _: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        let mut messages = vec![self.system_message()];
        messages.extend(params.messages.iter().cloned());
        let estimated_tokens = clawctx_tokens::messages_tokens(&messages);
        Ok(AssembleResult {
            messages,
            estimated_tokens,
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

fn memories(id: &'static str) -> Arc<Memories> {
    let facts: Vec<String> = (0..60)
        .map(|i| format!("fact {i}: the deploy key for region {i} lives in vault/ops/{i}."))
        .collect();
    Arc::new(Memories {
        id,
        memories: format!("Recalled memories:\n{}", facts.join("\n")),
    })
}

#[tokio::test]
async fn system_messages_are_folded_into_the_system_prompt_counted_and_warned_once() {
    let dir = tempfile::tempdir().unwrap();
    let engine = memories("memories-embedded");
    let memory_tokens = clawctx_tokens::text_tokens(&engine.memories);
    assert!(
        memory_tokens > BUDGET / 4,
        "the memories are a large part of the budget: {memory_tokens}"
    );
    let provider = Arc::new(ScriptedProvider::new(
        vec![ScriptedReply::text("noted, ".repeat(40))],
        Exhaustion::Cycle,
    ));
    let backend = Backend::Model(clawctx_runtime::ModelBinding::new(
        provider.clone(),
        "m",
        8_000,
        256,
    ));
    let rt = AgentRuntime::builder(dir.path(), engine.clone(), backend)
        .prompt_budget(Some(BUDGET))
        .build();

    let (_guard, logs) = capture_tracing();
    let mut outcomes = Vec::new();
    for i in 0..4 {
        let prompt =
            format!("question {i}: ") + &"please look into the deployment logs again ".repeat(30);
        outcomes.push(rt.run_turn(TurnRequest::new(KEY, prompt)).await.unwrap());
    }

    let requests = provider.requests();
    assert_eq!(requests.len(), 4);
    for (i, (request, outcome)) in requests.iter().zip(&outcomes).enumerate() {
        let system = request.system_prompt.as_deref().unwrap_or_default();
        assert!(
            system.starts_with("Recalled memories:\nfact 0:"),
            "turn {i}: the memories lead the system prompt"
        );
        assert!(
            system.ends_with(clawctx_runtime::runtime::DEFAULT_SYSTEM_PROMPT.trim()),
            "turn {i}: the base prompt follows them"
        );
        assert!(
            request
                .messages
                .iter()
                .all(|m| m.role() != "system" && !m.plain_text().contains("vault/ops")),
            "turn {i}: no system message is sent as a message"
        );
        let sent = clawctx_tokens::text_tokens(system)
            + clawctx_tokens::messages_tokens(&request.messages);
        assert!(
            sent <= BUDGET,
            "turn {i}: {sent} tokens sent, over the budget of {BUDGET}"
        );
        assert_eq!(
            outcome.prompt_tokens,
            vec![clawctx_tokens::messages_tokens(&request.messages)]
        );
        assert_eq!(outcome.token_budget, BUDGET);
        assert_eq!(outcome.engine, "memories-embedded", "no quarantine");
    }
    assert!(
        outcomes.last().unwrap().context_tokens_before + memory_tokens > BUDGET,
        "the history grew past what fits next to the memories, so the clamp had work to do"
    );
    let warned: Vec<usize> = outcomes
        .iter()
        .map(|o| {
            o.warnings
                .iter()
                .filter(|w| w.contains("system-role"))
                .count()
        })
        .collect();
    assert_eq!(
        warned,
        [1, 0, 0, 0],
        "{:?}",
        outcomes.iter().map(|o| &o.warnings).collect::<Vec<_>>()
    );
    assert!(
        outcomes[0].warnings[0].contains("\"memories-embedded\""),
        "{}",
        outcomes[0].warnings[0]
    );
    let logged = logs
        .warnings()
        .into_iter()
        .filter(|w| w.contains("system-role"))
        .count();
    assert_eq!(
        logged,
        1,
        "one warning over four turns: {:?}",
        logs.warnings()
    );
}

#[test]
fn the_fold_keeps_order_and_moves_the_engines_estimate() {
    let system = |t: &str| {
        AgentMessage::from_map(
            json!({"role": "system", "content": t})
                .as_object()
                .cloned()
                .unwrap(),
        )
        .unwrap()
    };
    let blocks = AgentMessage::from_map(
        json!({"role": "system", "content": [{"type": "text", "text": "second"}, {"type": "text", "text": "part"}]})
            .as_object()
            .cloned()
            .unwrap(),
    )
    .unwrap();
    let user = AgentMessage::user("hello");
    let mut result = AssembleResult {
        messages: vec![system("first"), user.clone(), blocks, system("   ")],
        estimated_tokens: 1_000,
        system_prompt_addition: Some("addition".into()),
        ..Default::default()
    };
    let folded_tokens =
        clawctx_tokens::messages_tokens(&result.messages) - clawctx_tokens::message_tokens(&user);
    let texts = clawctx_runtime::turn::take_system_messages(&mut result);
    assert_eq!(texts, ["first", "second\npart"]);
    assert_eq!(result.messages, [user]);
    assert_eq!(result.estimated_tokens, 1_000 - folded_tokens);
    let (prompt, added) = clawctx_runtime::turn::compose_system(
        "base",
        result.system_prompt_addition.as_deref(),
        &texts,
    );
    assert_eq!(prompt, "addition\n\nfirst\n\nsecond\npart\n\nbase");
    assert_eq!(
        added,
        clawctx_tokens::text_tokens("addition\n\nfirst\n\nsecond\npart")
    );
    assert_eq!(
        clawctx_runtime::turn::compose_system("base", Some("  "), &[]),
        ("base".to_owned(), 0)
    );
}
