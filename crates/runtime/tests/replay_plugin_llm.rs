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

/// The same with a real Node plugin (as in the issue, a published plugin summarizing through
/// `runtimeContext.llm.complete` in `assemble`): its completions fail with the error naming the
/// key to set, and every recorded reply still goes to its own turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_plugins_completions_do_not_take_the_recordings_replies() {
    let dir = tempfile::tempdir().unwrap();
    let turns = 4;
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

    let root = dir.path().join("asks-node");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(
        root.join("openclaw.plugin.json"),
        serde_json::json!({"id": "asks-node", "entry": "index.mjs", "configSchema": {"type": "object"}})
            .to_string(),
    )
    .unwrap();
    let log = dir.path().join("answers.log");
    std::fs::write(
        root.join("index.mjs"),
        r#"
import * as fs from 'node:fs';
export default function register(api) {
  api.registerContextEngine('asks-node', () => ({
    info: { id: 'asks-node', name: 'asks the model', ownsCompaction: false },
    async ingest() { return { ingested: true }; },
    async compact() { return { ok: true, compacted: false }; },
    async assemble(params) {
      let line;
      try {
        const r = await params.runtimeContext.llm.complete({ prompt: 'summarize this' });
        line = { ok: r.text };
      } catch (err) {
        line = { err: String(err && err.message) };
      }
      fs.appendFileSync(api.pluginConfig.log, JSON.stringify(line) + '\n');
      return { messages: params.messages, estimatedTokens: 0 };
    },
  }));
}
"#,
    )
    .unwrap();
    let config = serde_json::json!({"plugins": {
        "slots": {"contextEngine": "asks-node"},
        "entries": {"asks-node": {"enabled": true, "config": {"log": log}}}
    }});
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    let loaded = clawctx_plugin::register_plugin(
        &registry,
        &root,
        &config,
        clawctx_plugin::PluginOptions {
            runtime_dir: Some(dir.path().join("runtime")),
            call_timeout: Some(std::time::Duration::from_secs(20)),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let options = ReplayOptions {
        engine: Some("asks-node".into()),
        budget: 4_000,
        state_dir: dir.path().join("state"),
        config,
        hooks: None,
    };
    let report = replay(registry.clone(), rec, options, &mut |_| {})
        .await
        .expect("the replay runs every turn");
    assert_eq!(report.turns.len(), turns);
    assert!(
        report.turns.iter().all(|t| t.engine == "asks-node"),
        "{:?} {:?}",
        report.turns,
        registry.quarantines()
    );
    let answers = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> = answers
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.len() >= turns, "{answers}");
    for l in &lines {
        let e = l["err"]
            .as_str()
            .expect("no model configured: the completion fails");
        assert!(
            e.contains("no model is configured") && e.contains("agents.defaults.model.primary"),
            "{e}"
        );
    }
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
    loaded.host.shutdown().await;
}
