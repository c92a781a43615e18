//! A Rust engine served by the SDK reaches the host's transcript rewrite through its
//! `CallContext` services: `rewrite_transcript_entries` becomes a
//! `host/rewriteTranscriptEntries` request and the host's answer comes back to the engine.
//! Driven over in-memory pipes, playing the host by hand.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use async_trait::async_trait;
use clawctx_engine::*;
use clawctx_plugin_sdk::{serve_io, Plugin};
use clawctx_protocol::*;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Trims one transcript entry through the host on `maintain`.
struct Trimmer;

#[async_trait]
impl ContextEngine for Trimmer {
    fn info(&self) -> ContextEngineInfo {
        serde_json::from_value(json!({"id": "trimmer", "name": "Trimmer"})).unwrap()
    }

    fn methods(&self) -> MethodSet {
        MethodSet::of(&[
            Method::Ingest,
            Method::Assemble,
            Method::Compact,
            Method::Maintain,
        ])
    }

    async fn ingest(&self, _: &IngestParams, _: &CallContext) -> Result<IngestResult, EngineError> {
        Ok(IngestResult::default())
    }

    async fn assemble(
        &self,
        p: &AssembleParams,
        _: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        Ok(AssembleResult {
            messages: p.messages.clone(),
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
            ..Default::default()
        })
    }

    async fn maintain(
        &self,
        _: &MaintainParams,
        cx: &CallContext,
    ) -> Result<TranscriptRewriteResult, EngineError> {
        let services = cx
            .services
            .clone()
            .ok_or_else(|| EngineError::failed("no runtime services"))?;
        let request = TranscriptRewriteRequest {
            replacements: vec![TranscriptReplacement {
                entry_id: "e3".into(),
                message: AgentMessage::user("[trimmed]"),
            }],
            allowed_rewrite_suffix_entry_ids: None,
        };
        Ok(services.rewrite_transcript_entries(request).await)
    }
}

async fn next_message(lines: &mut tokio::io::Lines<BufReader<tokio::io::DuplexStream>>) -> Value {
    let line = tokio::time::timeout(std::time::Duration::from_secs(10), lines.next_line())
        .await
        .expect("the plugin answered in time")
        .expect("reading the plugin's output")
        .expect("the plugin closed its output early");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("plugin wrote non-JSON ({e}): {line}"))
}

#[tokio::test]
async fn maintain_rewrites_the_transcript_through_the_host() {
    let (host_out, plugin_in) = tokio::io::duplex(64 * 1024);
    let (plugin_out, host_in) = tokio::io::duplex(64 * 1024);
    let plugin = Plugin::new().engine(
        "trimmer",
        factory(|_| async { Ok(Arc::new(Trimmer) as Arc<dyn ContextEngine>) }),
    );
    let server = tokio::spawn(serve_io(plugin, plugin_in, plugin_out));
    let mut to_plugin = host_out;
    let mut lines = BufReader::new(host_in).lines();
    let send = |msg: Value| {
        let mut line = serde_json::to_vec(&msg).unwrap();
        line.push(b'\n');
        line
    };

    to_plugin.write_all(&send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}))).await.unwrap();
    assert!(
        next_message(&mut lines).await.get("result").is_some(),
        "initialize failed"
    );
    to_plugin.write_all(&send(json!({"jsonrpc": "2.0", "id": 2, "method": "engine/create", "params": {"engineId": "trimmer"}}))).await.unwrap();
    let created = next_message(&mut lines).await;
    let instance = created["result"]["instanceId"].clone();
    assert!(!instance.is_null(), "engine/create failed: {created}");

    to_plugin
        .write_all(&send(json!({"jsonrpc": "2.0", "id": 3, "method": "engine/maintain", "params": {"instanceId": instance,
            "params": {"sessionId": "s", "sessionFile": "s.jsonl", "runtimeContext": {}}}})))
        .await
        .unwrap();
    let callback = next_message(&mut lines).await;
    assert_eq!(
        callback["method"], "host/rewriteTranscriptEntries",
        "expected the rewrite callback, got {callback}"
    );
    assert_eq!(
        callback["params"]["callId"], 3,
        "the callback names the call it serves: {callback}"
    );
    assert_eq!(
        callback["params"]["request"]["replacements"][0]["entryId"], "e3",
        "{callback}"
    );
    to_plugin
        .write_all(&send(json!({"jsonrpc": "2.0", "id": callback["id"], "result": {"changed": true, "bytesFreed": 12, "rewrittenEntries": 1}})))
        .await
        .unwrap();
    let answer = next_message(&mut lines).await;
    assert_eq!(answer["id"], 3, "{answer}");
    assert_eq!(
        answer["result"],
        json!({"changed": true, "bytesFreed": 12, "rewrittenEntries": 1}),
        "the host's answer is the engine's result"
    );

    to_plugin
        .write_all(&send(
            json!({"jsonrpc": "2.0", "id": 4, "method": "shutdown", "params": null}),
        ))
        .await
        .unwrap();
    drop(to_plugin);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), server).await;
}
