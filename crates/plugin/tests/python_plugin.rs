//! Python plugins through the embedded Python runner: the sliding-window example and a fixture
//! that implements every lifecycle method; and a `command` plugin in Python that takes message
//! references and loses them, to see the host recover.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use async_trait::async_trait;
use clawctx_engine::*;
use clawctx_plugin::register_plugin;
use clawctx_protocol::*;
use common::*;
use serde_json::json;

struct Services;

#[async_trait]
impl RuntimeServices for Services {
    async fn llm_complete(
        &self,
        request: LlmCompleteRequest,
    ) -> Result<LlmCompleteResult, EngineError> {
        Ok(LlmCompleteResult {
            text: format!("py({})", request.prompt),
            usage: None,
        })
    }

    async fn rewrite_transcript_entries(
        &self,
        request: TranscriptRewriteRequest,
    ) -> TranscriptRewriteResult {
        let ids: Vec<&str> = request
            .replacements
            .iter()
            .map(|r| r.entry_id.as_str())
            .collect();
        TranscriptRewriteResult {
            changed: true,
            rewritten_entries: ids.len() as u64,
            reason: Some(format!("host rewrote {}", ids.join(","))),
            ..Default::default()
        }
    }

    async fn compact_session(
        &self,
        _request: RuntimeCompactionRequest,
    ) -> Result<RuntimeCompactionOutcome, EngineError> {
        Ok(RuntimeCompactionOutcome {
            ok: true,
            compacted: true,
            reason: Some("runtime".into()),
            result: None,
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_window_example() {
    require("python3");
    let runtime = tempfile::tempdir().unwrap();
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    let config = config(
        "python-sliding-window",
        "python-sliding-window",
        json!({"config": {"maxMessages": 3}}),
    );
    let loaded = register_plugin(
        &registry,
        &example("python-sliding-window"),
        &config,
        options(runtime.path()),
    )
    .await
    .unwrap();
    let pid = loaded.host.pid().unwrap();
    let resolved = registry
        .resolve(Some(Arc::new(config)), None, None)
        .await
        .unwrap();
    assert_eq!(resolved.effective_id, "python-sliding-window");
    let e = resolved.engine.clone();
    assert_eq!(e.info().name, "Python Sliding Window");
    assert!(e.methods().has(Method::AfterTurn));
    let cx = CallContext::none().with_services(Arc::new(Services));
    let msgs = conversation();

    // maxMessages = 3 would start the window at the tool result: it is dropped with its call.
    let r = e
        .assemble(
            &AssembleParams {
                session_id: "s".into(),
                messages: msgs.clone(),
                token_budget: Some(100_000),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap();
    assert_eq!(r.messages, msgs[3..].to_vec());
    assert!(pairs_intact(&r.messages));

    // A tight budget keeps what fits.
    // (The SDK sizes with a byte-count upper bound of the host's estimate: 40 for the last
    // message, 48 for the one before.)
    let budget = 60;
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
    assert_eq!(r.messages, msgs[4..].to_vec());
    assert!(clawctx_tokens::messages_tokens(&r.messages) <= budget);
    assert!(pairs_intact(&r.messages));

    assert!(
        !e.ingest(
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
    assert_eq!(
        c.reason.as_deref(),
        Some("runtime"),
        "compaction was delegated to the host runtime"
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
    assert!(
        registry.quarantines().is_empty(),
        "{:?}",
        registry.quarantines()
    );
    drop((e, resolved, loaded, registry));
    assert_pid_gone(pid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lifecycle_method_python() {
    require("python3");
    let runtime = tempfile::tempdir().unwrap();
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    let config = config("pyfull", "pyfull", json!({}));
    let loaded = register_plugin(
        &registry,
        &fixture("python-full"),
        &config,
        options(runtime.path()),
    )
    .await
    .unwrap();
    assert_eq!(loaded.tools.len(), 1);
    let pid = loaded.host.pid().unwrap();
    let resolved = registry
        .resolve(Some(Arc::new(config)), None, Some("/pyws".into()))
        .await
        .unwrap();
    let e = resolved.engine.clone();
    assert!(e.info().owns_compaction());
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
    assert_eq!(
        e.ingest_batch(
            &IngestBatchParams {
                session_id: "s".into(),
                messages: msgs.clone(),
                ..Default::default()
            },
            &cx
        )
        .await
        .unwrap()
        .ingested_count,
        5
    );
    assert_eq!(
        e.bootstrap(
            &BootstrapParams {
                session_id: "s".into(),
                session_file: "/x.jsonl".into(),
                ..Default::default()
            },
            &cx
        )
        .await
        .unwrap()
        .reason
        .as_deref(),
        Some("file=/x.jsonl")
    );
    assert_eq!(
        e.maintain(
            &MaintainParams {
                session_id: "s".into(),
                session_file: "f".into(),
                ..Default::default()
            },
            &cx
        )
        .await
        .unwrap()
        .reason
        .as_deref(),
        Some("py")
    );
    let rewritten = e
        .maintain(
            &MaintainParams {
                session_id: "s".into(),
                session_file: "f".into(),
                runtime_context: Some(Default::default()),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap();
    assert_eq!(
        (
            rewritten.changed,
            rewritten.rewritten_entries,
            rewritten.reason.as_deref()
        ),
        (true, 1, Some("host rewrote e9")),
        "the Python runner did not forward rewriteTranscriptEntries"
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
                child_session_key: "c1".into(),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap()
        .expect("rollback");
    prep.rollback().await.unwrap();
    e.on_subagent_ended(
        &SubagentEndedParams {
            child_session_key: "c1".into(),
            reason: SubagentEndReason::Swept,
        },
        &cx,
    )
    .await
    .unwrap();
    let r = e
        .assemble(
            &AssembleParams {
                session_id: "s".into(),
                messages: msgs.clone(),
                prompt: Some("hi".into()),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap();
    assert_eq!(
        r.system_prompt_addition.as_deref(),
        Some("stored=6 turns=1 rolled=c1 ended=c1:swept ws=/pyws llm=py(hi)")
    );
    assert_eq!(
        e.compact(
            &CompactParams {
                session_id: "s".into(),
                ..Default::default()
            },
            &cx
        )
        .await
        .unwrap()
        .result
        .map(|r| r.tokens_before),
        Some(5)
    );
    let tool = e.tools().into_iter().next().unwrap();
    assert_eq!(
        tool.execute(json!({"text": "t"}), ToolCallContext::default())
            .await
            .unwrap(),
        "echo:t"
    );
    assert!(
        registry.quarantines().is_empty(),
        "{:?}",
        registry.quarantines()
    );
    e.dispose().await.unwrap();
    loaded.host.shutdown().await;
    drop((e, resolved, loaded, registry));
    assert_pid_gone(pid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_that_lost_its_messages_gets_them_all_again() {
    require("python3");
    let runtime = tempfile::tempdir().unwrap();
    let config = config("forgetful", "forgetful", json!({}));
    let (registry, e, loaded) = load_selected(
        &fixture("command-forgetful"),
        config,
        "forgetful",
        options(runtime.path()),
    )
    .await;
    let cx = CallContext::none();
    let mut history = conversation();
    let mut log = serde_json::Value::Null;
    for call in 0..3 {
        if call > 0 {
            history.push(AgentMessage::user(format!("follow-up {call}")));
        }
        let p = AssembleParams {
            session_id: "s".into(),
            messages: history.clone(),
            token_budget: Some(100_000),
            ..Default::default()
        };
        let r = e.assemble(&p, &cx).await.unwrap();
        assert_eq!(r.messages, history, "call {call}");
        log = serde_json::from_str(r.system_prompt_addition.as_deref().unwrap()).unwrap();
    }
    // [reset, messages defined, resolved]: five new, then one; the third request finds the
    // table gone (-32010), and the host sends it again with a reset and all seven defined.
    assert_eq!(
        log,
        json!([
            [false, 5, true],
            [false, 1, true],
            [false, 1, false],
            [true, 7, true]
        ])
    );
    assert!(registry.quarantines().is_empty());
    loaded.host.shutdown().await;
}
