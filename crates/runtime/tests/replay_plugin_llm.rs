//! In `replay`, an engine's or plugin's own LLM calls (`llm.complete`) do not consume the
//! recording's assistant replies (issue #28 item 9): they used to take the next recorded reply,
//! shifting every later turn and ending the replay early ("script exhausted"). They go to the
//! configured model, else fail with an error naming the key to set; the replay runs every turn.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use clawctx_engine::*;
use clawctx_protocol::*;
use clawctx_runtime::replay::{replay, Recording, ReplayOptions};

/// Passes the history through, and asks the host's model for a completion on every assemble
/// (as summarizing plugins do), keeping what it got.
struct AsksTheModel {
    answers: Arc<Mutex<Vec<Result<String, String>>>>,
}

#[async_trait]
impl ContextEngine for AsksTheModel {
    fn info(&self) -> ContextEngineInfo {
        ContextEngineInfo::new("asks", "asks the model")
    }

    fn methods(&self) -> MethodSet {
        MethodSet::of(&[Method::Ingest, Method::Assemble, Method::Compact])
    }

    async fn ingest(
        &self,
        _p: &IngestParams,
        _cx: &CallContext,
    ) -> Result<IngestResult, EngineError> {
        Ok(IngestResult { ingested: true })
    }

    async fn assemble(
        &self,
        p: &AssembleParams,
        cx: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        if let Some(services) = &cx.services {
            let r = services
                .llm_complete(LlmCompleteRequest {
                    prompt: "summarize this".into(),
                    ..Default::default()
                })
                .await;
            self.answers
                .lock()
                .unwrap()
                .push(r.map(|a| a.text).map_err(|e| e.to_string()));
        }
        Ok(AssembleResult {
            messages: p.messages.clone(),
            estimated_tokens: clawctx_tokens::messages_tokens(&p.messages),
            ..Default::default()
        })
    }

    async fn compact(
        &self,
        _p: &CompactParams,
        _cx: &CallContext,
    ) -> Result<CompactResult, EngineError> {
        Ok(CompactResult {
            ok: true,
            compacted: false,
            reason: None,
            result: None,
        })
    }
}

#[tokio::test]
async fn an_engines_own_completions_do_not_take_the_recordings_replies() {
    let dir = tempfile::tempdir().unwrap();
    let turns = 6;
    let mut text = String::new();
    for i in 0..turns {
        for m in [
            AgentMessage::user(format!("question {i}")),
            AgentMessage::assistant(format!("recorded answer {i}")),
        ] {
            text.push_str(&serde_json::to_string(&m).unwrap());
            text.push('\n');
        }
    }
    let path = dir.path().join("rec.jsonl");
    std::fs::write(&path, text).unwrap();
    let rec = Recording::load(&path).unwrap();

    let answers = Arc::new(Mutex::new(Vec::new()));
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    let a = answers.clone();
    registry
        .register_plugin_engine(
            "asks",
            "asks",
            factory(move |_ctx| {
                let answers = a.clone();
                async move { Ok(Arc::new(AsksTheModel { answers }) as Arc<dyn ContextEngine>) }
            }),
        )
        .unwrap();
    let options = ReplayOptions {
        engine: Some("asks".into()),
        budget: 4_000,
        state_dir: dir.path().join("state"),
        config: serde_json::json!({}),
        hooks: None,
    };
    let report = replay(registry, rec, options, &mut |_| {})
        .await
        .expect("the replay runs every turn");
    assert_eq!(report.turns.len(), turns);
    assert!(
        report.turns.iter().all(|t| t.engine == "asks"),
        "{:?}",
        report.turns
    );
    let answers = answers.lock().unwrap();
    assert!(answers.len() >= turns, "{answers:?}");
    for a in answers.iter() {
        let e = a
            .as_ref()
            .expect_err("no model configured: the completion fails");
        assert!(
            e.contains("no model is configured") && e.contains("agents.defaults.model.primary"),
            "{e}"
        );
        assert!(!e.contains("recorded answer"), "{e}");
    }
    // Every turn's recorded reply went to its own turn, in order.
    let transcript: String = walk(&dir.path().join("state"));
    for i in 0..turns {
        assert_eq!(
            transcript
                .matches(&format!("recorded answer {i}\""))
                .count(),
            1,
            "turn {i}'s reply is in the transcript once"
        );
    }
}

/// Every file's text under `dir`.
fn walk(dir: &std::path::Path) -> String {
    let mut out = String::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.push_str(&walk(&p));
        } else if let Ok(t) = std::fs::read_to_string(&p) {
            out.push_str(&t);
        }
    }
    out
}
