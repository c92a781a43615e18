//! A plugin written for OpenClaw 2026.8+ reads the history through
//! `openclaw/plugin-sdk/session-transcript-runtime` (`readSessionTranscriptVisibleMessageDelta`,
//! cursor based). The Node runner provides the module backed by clawctx's transcript (issue #28):
//! a real `node` plugin engine that imports it (ES `import`, and CommonJS `require`) reads the
//! delta in each `assemble` of three turns of the runtime against a mock model on loopback. The
//! cursor advances, no message is read twice, the turn in progress is fenced off (it reaches the
//! engine through `afterTurn`), and what was read is the transcript's messages, in order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use clawctx_engine::*;
use clawctx_plugin::PluginOptions;
use clawctx_runtime::*;
use common::*;
use serde_json::{json, Value};

const KEY: &str = "agent:main:main";

/// The engine: `assemble` reads the transcript delta after its cursor for the session and logs
/// what it got (`{kind, entries: [{entryId, role, text}]}`), then passes the history through.
/// `IMPORT` is replaced by the module import of each flavour.
const ENGINE: &str = r#"
IMPORT
const fs = FS;
const cursors = new Map();
function text(m) {
  if (typeof m.content === 'string') return m.content;
  return (m.content || []).filter((b) => b.type === 'text').map((b) => b.text).join('');
}
function register(api) {
  api.registerContextEngine('delta-reader', () => ({
    info: { id: 'delta-reader', name: 'delta reader', ownsCompaction: false },
    async ingest() { return { ingested: true }; },
    async afterTurn() {},
    async compact() { return { ok: true, compacted: false, reason: 'nothing to do' }; },
    async assemble(params) {
      const r = await readSessionTranscriptVisibleMessageDelta({
        sessionId: params.sessionId,
        sessionKey: params.sessionKey,
        cursor: cursors.get(params.sessionId),
        maxMessages: 1,
      });
      const entries = [];
      let page = r;
      // Pages of one message: the cursor must carry the read on.
      while (page.kind === 'page') {
        for (const e of page.entries) entries.push({ entryId: e.entryId, role: e.role, text: text(e.message) });
        cursors.set(params.sessionId, page.cursor);
        if (!page.hasMore) break;
        page = await readSessionTranscriptVisibleMessageDelta({ sessionId: params.sessionId, cursor: page.cursor, maxMessages: 1 });
      }
      let unsupported = null;
      try {
        await readSessionTranscriptEvents({ sessionId: params.sessionId });
      } catch (err) {
        unsupported = err.message;
      }
      fs.appendFileSync(api.pluginConfig.log, JSON.stringify({ kind: r.kind, entries, unsupported }) + '\n');
      return { messages: params.messages, estimatedTokens: 0 };
    },
  }));
}
EXPORT
"#;

fn source(flavour: &str) -> (&'static str, String) {
    match flavour {
        "esm" => (
            "index.mjs",
            ENGINE
                .replace("IMPORT", "import { readSessionTranscriptVisibleMessageDelta, readSessionTranscriptEvents } from 'openclaw/plugin-sdk/session-transcript-runtime';\nimport * as nodeFs from 'node:fs';")
                .replace("FS", "nodeFs")
                .replace("EXPORT", "export default register;"),
        ),
        _ => (
            "index.cjs",
            ENGINE
                .replace("IMPORT", "const { readSessionTranscriptVisibleMessageDelta, readSessionTranscriptEvents } = require('openclaw/plugin-sdk/session-transcript-runtime');")
                .replace("FS", "require('node:fs')")
                .replace("EXPORT", "module.exports = register;"),
        ),
    }
}

fn reads(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

async fn three_turns(flavour: &str) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("delta-reader");
    std::fs::create_dir_all(&root).unwrap();
    let (entry, code) = source(flavour);
    std::fs::write(
        root.join("openclaw.plugin.json"),
        json!({"id": "delta-reader", "entry": entry, "configSchema": {"type": "object"}})
            .to_string(),
    )
    .unwrap();
    std::fs::write(root.join(entry), code).unwrap();
    let log = dir.path().join("reads.log");
    let config = json!({"plugins": {
        "slots": {"contextEngine": "delta-reader"},
        "entries": {"delta-reader": {"enabled": true, "config": {"log": log}}}
    }});
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    let options = PluginOptions {
        runtime_dir: Some(dir.path().join("runtime")),
        call_timeout: Some(Duration::from_secs(20)),
        ..Default::default()
    };
    let loaded = clawctx_plugin::register_plugin(&registry, &root, &config, options)
        .await
        .unwrap();
    let resolved = registry
        .resolve(Some(Arc::new(config)), None, None)
        .await
        .unwrap();
    assert_eq!(resolved.effective_id, "delta-reader", "{flavour}");

    let llm = MockLlm::start().await;
    let rt = AgentRuntime::builder(
        dir.path().join("state"),
        resolved.engine.clone(),
        llm.backend(8192, 512),
    )
    .build();
    for i in 1..=3 {
        llm.push([text(&format!("answer {i}"))]);
        let out = rt
            .run_turn(TurnRequest::new(KEY, format!("question {i}")))
            .await
            .unwrap();
        assert_eq!(out.reply, format!("answer {i}"), "{flavour}");
    }
    assert!(
        registry.quarantines().is_empty(),
        "{flavour}: {:?}",
        registry.quarantines()
    );

    let reads = reads(&log);
    assert_eq!(
        reads.len(),
        3,
        "{flavour}: one assemble per turn: {reads:?}"
    );
    let texts = |r: &Value| -> Vec<String> {
        r["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                format!(
                    "{}: {}",
                    e["role"].as_str().unwrap(),
                    e["text"].as_str().unwrap()
                )
            })
            .collect()
    };
    // The module's other exports are there (the plugin loaded) and say they are not offered.
    assert_eq!(
        reads[0]["unsupported"],
        "readSessionTranscriptEvents() of openclaw/plugin-sdk/session-transcript-runtime is not supported by clawctx",
        "{flavour}"
    );
    // Turn 1: nothing before the turn (its prompt is fenced off).
    assert_eq!(reads[0]["kind"], "page", "{flavour}: {reads:?}");
    assert!(texts(&reads[0]).is_empty(), "{flavour}: {reads:?}");
    // Each later turn reads exactly the turn before it.
    assert_eq!(
        texts(&reads[1]),
        vec!["user: question 1", "assistant: answer 1"],
        "{flavour}: {reads:?}"
    );
    assert_eq!(
        texts(&reads[2]),
        vec!["user: question 2", "assistant: answer 2"],
        "{flavour}: {reads:?}"
    );
    // No entry twice, and what was read is the transcript before the last turn, in order.
    let ids: Vec<&str> = reads
        .iter()
        .flat_map(|r| r["entries"].as_array().unwrap().iter())
        .map(|e| e["entryId"].as_str().unwrap())
        .collect();
    let unique: std::collections::HashSet<&&str> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "{flavour}: {ids:?}");
    let file =
        clawctx_transcript::SessionFile::open(rt.session(KEY).unwrap().transcript_path).unwrap();
    let stored: Vec<String> = file
        .active_path()
        .iter()
        .filter(|e| e.message().is_some())
        .map(|e| e.id.clone())
        .collect();
    assert_eq!(ids, stored[..4].to_vec(), "{flavour}");
    loaded.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_es_module_plugin_reads_the_transcript_delta_across_turns() {
    three_turns("esm").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commonjs_plugin_reads_the_transcript_delta_across_turns() {
    three_turns("cjs").await;
}
