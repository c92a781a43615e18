//! The Rust example plugin served by clawctx-plugin-sdk, loaded by the clawctx host from
//! `examples/plugins/rust-engine` (its manifest runs `clawctx-example-rust-plugin` from PATH).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use clawctx_engine::*;
use clawctx_plugin::{register_plugin, PluginOptions};
use clawctx_protocol::*;
use serde_json::json;

struct Services;

#[async_trait]
impl RuntimeServices for Services {
    async fn compact_session(
        &self,
        request: RuntimeCompactionRequest,
    ) -> Result<RuntimeCompactionOutcome, EngineError> {
        Ok(RuntimeCompactionOutcome {
            ok: true,
            compacted: true,
            reason: Some(format!("runtime:{}", request.session_id)),
            result: None,
        })
    }
}

fn conversation() -> Vec<AgentMessage> {
    vec![
        AgentMessage::user("read the file").with_timestamp(1),
        AgentMessage::tool_call("c1", "read", json!({"path": "a"})).with_timestamp(2),
        AgentMessage::tool_result("c1", "read", "contents of a").with_timestamp(3),
        AgentMessage::assistant("done").with_timestamp(4),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_plugin_every_method() {
    let bin = Path::new(env!("CARGO_BIN_EXE_clawctx-example-rust-plugin"));
    let bin_dir = bin.parent().unwrap().display().to_string();
    let path = format!("{bin_dir}:{}", std::env::var("PATH").unwrap_or_default());
    let plugin_dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/plugins/rust-engine");
    let runtime = tempfile::tempdir().unwrap();
    let options = PluginOptions {
        runtime_dir: Some(runtime.path().into()),
        env: vec![("PATH".into(), path)],
        ..Default::default()
    };
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    let config = json!({"plugins": {"slots": {"contextEngine": "rust-engine"}, "entries": {"rust-engine": {"enabled": true, "timeoutMs": 5000}}}});
    let loaded = register_plugin(&registry, &plugin_dir, &config, options)
        .await
        .unwrap();
    let pid = loaded.host.pid().unwrap();
    let resolved = registry
        .resolve(Some(Arc::new(config)), None, None)
        .await
        .unwrap();
    assert_eq!(resolved.effective_id, "rust-engine");
    let e = resolved.engine.clone();
    assert_eq!(e.info().name, "Rust Recent Window");
    let cx = CallContext::none().with_services(Arc::new(Services));
    let msgs = conversation();

    assert!(
        e.ingest(
            &IngestParams {
                session_id: "s".into(),
                session_key: None,
                message: msgs[0].clone(),
                is_heartbeat: None
            },
            &cx
        )
        .await
        .unwrap()
        .ingested
    );
    e.after_turn(
        &AfterTurnParams {
            session_id: "s".into(),
            session_file: "f".into(),
            messages: msgs.clone(),
            ..Default::default()
        },
        &cx,
    )
    .await
    .unwrap();
    let prep = e
        .prepare_subagent_spawn(
            &PrepareSubagentSpawnParams {
                parent_session_key: "p".into(),
                child_session_key: "kid".into(),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap()
        .unwrap();
    let r = e
        .assemble(
            &AssembleParams {
                session_id: "s".into(),
                messages: msgs.clone(),
                token_budget: Some(10_000),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap();
    assert_eq!(r.messages, msgs);
    assert_eq!(
        r.system_prompt_addition.as_deref(),
        Some("rust-engine: turns=1 children=kid")
    );
    prep.rollback().await.unwrap();
    e.on_subagent_ended(
        &SubagentEndedParams {
            child_session_key: "kid".into(),
            reason: SubagentEndReason::Deleted,
        },
        &cx,
    )
    .await
    .unwrap();

    // Budget just over the last two messages: the window would start at the tool result.
    let budget = clawctx_tokens::messages_tokens(&msgs[2..]);
    let r = e
        .assemble(
            &AssembleParams {
                session_id: "s".into(),
                messages: msgs.clone(),
                token_budget: Some(budget),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap();
    assert_eq!(r.messages, msgs[3..].to_vec());
    assert_eq!(
        r.system_prompt_addition.as_deref(),
        Some("rust-engine: turns=1 children=")
    );

    let c = e
        .compact(
            &CompactParams {
                session_id: "s".into(),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap();
    assert_eq!(c.reason.as_deref(), Some("runtime:s"));
    assert!(
        registry.quarantines().is_empty(),
        "{:?}",
        registry.quarantines()
    );
    e.dispose().await.unwrap();
    loaded.host.shutdown().await;
    drop((e, resolved, loaded, registry));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "plugin process {pid} left behind"
        );
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}
