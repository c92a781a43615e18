//! Handshake and every lifecycle method through the Node runner, plus tools, host LLM
//! callbacks, rollback, runtime-delegated compaction, and config validation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use async_trait::async_trait;
use clawctx_engine::*;
use clawctx_plugin::{register_plugin, PluginError};
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
            text: format!("echo({})", request.prompt),
            usage: None,
        })
    }

    async fn rewrite_transcript_entries(
        &self,
        request: TranscriptRewriteRequest,
    ) -> TranscriptRewriteResult {
        let ids: Vec<String> = request
            .replacements
            .iter()
            .map(|r| format!("{}={}", r.entry_id, r.message.plain_text()))
            .collect();
        TranscriptRewriteResult {
            changed: true,
            bytes_freed: 7,
            rewritten_entries: request.replacements.len() as u64,
            reason: Some(format!("host rewrote {}", ids.join(","))),
        }
    }

    async fn compact_session(
        &self,
        request: RuntimeCompactionRequest,
    ) -> Result<RuntimeCompactionOutcome, EngineError> {
        Ok(RuntimeCompactionOutcome {
            ok: true,
            compacted: true,
            reason: None,
            result: Some(RuntimeCompactionDetail {
                summary: Some(format!("runtime summary of {}", request.session_id)),
                tokens_before: 99,
                ..Default::default()
            }),
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lifecycle_method_over_rpc() {
    require("node");
    let runtime = tempfile::tempdir().unwrap();
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    let config = config("full", "full", json!({"config": {"greeting": "hi"}}));
    let loaded = register_plugin(
        &registry,
        &fixture("node-full"),
        &config,
        options(runtime.path()),
    )
    .await
    .unwrap();
    let pid = loaded.host.pid().unwrap();
    let mut tool_names: Vec<_> = loaded.tools.iter().map(|t| t.name.clone()).collect();
    tool_names.sort();
    assert_eq!(tool_names, vec!["full_echo", "full_fail"]);

    let resolved = registry
        .resolve(Some(Arc::new(config)), None, Some("/ws".into()))
        .await
        .unwrap();
    assert_eq!(resolved.effective_id, "full");
    let e = resolved.engine.clone();
    assert_eq!(e.info().id, "full-info");
    for m in Method::ALL {
        if m != Method::CommitTurn {
            assert!(e.methods().has(m), "{m:?}");
        }
    }
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
    let batch = e
        .ingest_batch(
            &IngestBatchParams {
                session_id: "s".into(),
                messages: msgs.clone(),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap();
    assert_eq!(batch.ingested_count, msgs.len() as u64);
    let boot = e
        .bootstrap(
            &BootstrapParams {
                session_id: "s".into(),
                session_file: "/tmp/s.jsonl".into(),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap();
    assert!(boot.bootstrapped);
    assert_eq!(boot.reason.as_deref(), Some("file=/tmp/s.jsonl"));
    let maint = e
        .maintain(
            &MaintainParams {
                session_id: "s".into(),
                session_file: "f".into(),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap();
    assert_eq!(maint.reason.as_deref(), Some("nothing to do"));
    // With a runtime context, `runtimeContext.rewriteTranscriptEntries` reaches the host's
    // services and its answer comes back as the engine's result.
    let maint = e
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
            maint.changed,
            maint.bytes_freed,
            maint.rewritten_entries,
            maint.reason.as_deref()
        ),
        (true, 7, 1, Some("host rewrote e1=[trimmed]")),
        "rewriteTranscriptEntries was not forwarded to the host"
    );
    e.after_turn(
        &AfterTurnParams {
            session_id: "s".into(),
            session_file: "f".into(),
            messages: msgs.clone(),
            pre_prompt_message_count: 3,
            ..Default::default()
        },
        &cx,
    )
    .await
    .unwrap();

    let spawn = PrepareSubagentSpawnParams {
        parent_session_key: "agent:main:main".into(),
        child_session_key: "agent:main:subagent:1".into(),
        ..Default::default()
    };
    let prep = e
        .prepare_subagent_spawn(&spawn, &cx)
        .await
        .unwrap()
        .expect("rollback handle");
    prep.rollback().await.unwrap();
    e.on_subagent_ended(
        &SubagentEndedParams {
            child_session_key: "agent:main:subagent:1".into(),
            reason: SubagentEndReason::Completed,
        },
        &cx,
    )
    .await
    .unwrap();

    let assembled = e
        .assemble(
            &AssembleParams {
                session_id: "s".into(),
                messages: msgs.clone(),
                token_budget: Some(10_000),
                available_tools: Some(vec!["read".into()]),
                prompt: Some("ping".into()),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap();
    assert_eq!(assembled.messages, msgs);
    assert_eq!(assembled.estimated_tokens, 7);
    let addition = assembled.system_prompt_addition.unwrap();
    assert_eq!(
        addition,
        "greeting=hi stored=6 turns=1 rolledBack=agent:main:subagent:1 ended=agent:main:subagent:1:completed tools=set workspace=/ws llm=echo(ping)"
    );

    let own = e
        .compact(
            &CompactParams {
                session_id: "s".into(),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap();
    assert_eq!(own.result.as_ref().map(|r| r.tokens_before), Some(10));
    let delegated = e
        .compact(
            &CompactParams {
                session_id: "s".into(),
                custom_instructions: Some("delegate".into()),
                ..Default::default()
            },
            &cx,
        )
        .await
        .unwrap();
    assert!(delegated.ok && delegated.compacted);
    assert_eq!(
        delegated.result.as_ref().and_then(|r| r.summary.as_deref()),
        Some("runtime summary of s")
    );

    let tools = e.tools();
    let echo = tools.iter().find(|t| t.name() == "full_echo").unwrap();
    assert_eq!(
        echo.execute(json!({"text": "x"}), ToolCallContext::default())
            .await
            .unwrap(),
        "echo:x"
    );
    let fail = tools.iter().find(|t| t.name() == "full_fail").unwrap();
    assert!(fail
        .execute(json!({}), ToolCallContext::default())
        .await
        .unwrap_err()
        .contains("tool exploded"));

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
async fn config_schema_errors_name_the_path() {
    let runtime = tempfile::tempdir().unwrap();
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    let config = config("full", "full", json!({"config": {"maxMessages": 0}}));
    let err = register_plugin(
        &registry,
        &fixture("node-full"),
        &config,
        options(runtime.path()),
    )
    .await
    .unwrap_err();
    match &err {
        PluginError::ConfigInvalid { path, .. } => {
            assert_eq!(path, "plugins.entries.full.config.maxMessages")
        }
        other => panic!("unexpected {other:?}"),
    }
    let config = config_with_unknown_key();
    let err = register_plugin(
        &registry,
        &fixture("node-full"),
        &config,
        options(runtime.path()),
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains("plugins.entries.full.config"),
        "{err}"
    );
    assert!(err.to_string().contains("colour"), "{err}");
}

fn config_with_unknown_key() -> serde_json::Value {
    config("full", "full", json!({"config": {"colour": "red"}}))
}

/// Resolves the `node-refs` fixture in `mode` with `opts`.
async fn refs_engine(
    mode: &str,
    opts: clawctx_plugin::PluginOptions,
) -> (
    Arc<ContextEngineRegistry>,
    Arc<dyn ContextEngine>,
    clawctx_plugin::LoadedPlugin,
) {
    require("node");
    let config = config("refs", "refs", json!({"config": {"mode": mode}}));
    load_selected(&fixture("node-refs"), config, "refs", opts).await
}

fn assemble_params(messages: Vec<AgentMessage>) -> AssembleParams {
    AssembleParams {
        session_id: "s".into(),
        messages,
        token_budget: Some(100_000),
        ..Default::default()
    }
}

/// What the fixture reports: (first input frozen, inputs that are objects it saw before).
fn report(r: &AssembleResult) -> (bool, u64) {
    let v: serde_json::Value =
        serde_json::from_str(r.system_prompt_addition.as_deref().unwrap()).unwrap();
    (
        v["frozen"].as_bool().unwrap(),
        v["reused"].as_u64().unwrap(),
    )
}

/// The fixture's answer for `input`: its summary, then every input message but the first.
fn expected_window(input: &[AgentMessage]) -> Vec<AgentMessage> {
    let mut out = vec![AgentMessage::user(format!(
        "summary: {} messages",
        input.len()
    ))];
    out.extend_from_slice(&input[1..]);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assemble_messages_are_parsed_once_and_handed_back_by_reference() {
    let runtime = tempfile::tempdir().unwrap();
    let (registry, e, loaded) = refs_engine("observe", options(runtime.path())).await;
    let cx = CallContext::none();
    let mut history = conversation();
    let first = e
        .assemble(&assemble_params(history.clone()), &cx)
        .await
        .unwrap();
    assert_eq!(
        report(&first),
        (true, 0),
        "first call: held messages are frozen"
    );
    assert_eq!(first.messages, expected_window(&history));
    // The conversation goes on: the runner hands out the objects it already holds.
    for turn in 0..3 {
        history.push(AgentMessage::user(format!("turn {turn}")));
        let r = e
            .assemble(&assemble_params(history.clone()), &cx)
            .await
            .unwrap();
        assert_eq!(
            report(&r),
            (true, history.len() as u64 - 1),
            "turn {turn}: every message but the new one should be the object parsed before"
        );
        assert_eq!(r.messages, expected_window(&history), "turn {turn}");
    }
    assert!(registry.quarantines().is_empty());
    loaded.host.shutdown().await;

    // Switched off: every call parses every message anew.
    let runtime = tempfile::tempdir().unwrap();
    let opts = clawctx_plugin::PluginOptions {
        no_message_refs: true,
        ..options(runtime.path())
    };
    let (_, e, loaded) = refs_engine("observe", opts).await;
    for _ in 0..2 {
        let r = e
            .assemble(&assemble_params(history.clone()), &cx)
            .await
            .unwrap();
        assert_eq!(report(&r), (false, 0));
        assert_eq!(r.messages, expected_window(&history));
    }
    loaded.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_evicted_from_the_runner_are_sent_again() {
    let runtime = tempfile::tempdir().unwrap();
    let opts = clawctx_plugin::PluginOptions {
        message_ref_limits: Some(clawctx_plugin::message_refs::Limits {
            max_messages: 6,
            max_bytes: usize::MAX,
        }),
        ..options(runtime.path())
    };
    let (registry, e, loaded) = refs_engine("observe", opts).await;
    let cx = CallContext::none();
    let a = conversation();
    let b: Vec<AgentMessage> = (0..5)
        .map(|i| AgentMessage::user(format!("other session {i}")))
        .collect();
    for (round, (input, reused)) in [(&a, 0), (&a, 5), (&b, 0), (&a, 0), (&a, 5)]
        .into_iter()
        .enumerate()
    {
        let r = e
            .assemble(&assemble_params(input.clone()), &cx)
            .await
            .unwrap();
        assert_eq!(r.messages, expected_window(input), "round {round}");
        assert_eq!(
            report(&r).1,
            reused,
            "round {round}: `a` is evicted by `b` (6 messages fit), so it comes anew"
        );
    }
    assert!(registry.quarantines().is_empty());
    loaded.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_that_writes_to_its_input_gets_copies_and_its_edit_stands() {
    let runtime = tempfile::tempdir().unwrap();
    let (registry, e, loaded) = refs_engine("mutate", options(runtime.path())).await;
    let cx = CallContext::none();
    let history = conversation();
    for call in 0..3 {
        let r = e
            .assemble(&assemble_params(history.clone()), &cx)
            .await
            .unwrap();
        let mut expected = expected_window(&history);
        let last = expected.len() - 1;
        let mut edited = serde_json::to_value(&expected[last]).unwrap();
        edited["content"] = json!("edited by the plugin");
        expected[last] = serde_json::from_value(edited).unwrap();
        assert_eq!(
            r.messages, expected,
            "call {call}: the plugin's edit is kept"
        );
        assert!(!report(&r).0, "call {call}: copies are not frozen");
    }
    assert!(
        registry.quarantines().is_empty(),
        "writing to an input message is legal: {:?}",
        registry.quarantines()
    );
    loaded.host.shutdown().await;
}
