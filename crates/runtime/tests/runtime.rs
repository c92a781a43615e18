//! The runtime at its boundaries: exact request bodies (insta), the conformance invariants on
//! what the provider received, bad input (unknown model, garbage and cut streams, a malformed
//! transcript), host requirements and the CLI backend host, maintenance lanes, subagent
//! rollback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use clawctx_engine::*;
use clawctx_model::{Exhaustion, ScriptedProvider, ScriptedReply, ScriptedToolCall};
use clawctx_protocol::*;
use clawctx_runtime::*;
use clawctx_test_support::conformance::assert_tool_pairs;
use clawctx_test_support::messages::{sentence, Rng};
use clawctx_test_support::test_engine::TestEngine;
use common::*;
use serde_json::json;

const KEY: &str = "agent:main:main";

#[tokio::test]
async fn request_bodies_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let rt = AgentRuntime::builder(
        dir.path(),
        Arc::new(AdditionEngine::new()),
        llm.backend(8192, 512),
    )
    .system_prompt("You are a test assistant.")
    .tool(Arc::new(ReadFile))
    .build();
    llm.push([
        text("First answer."),
        tool("call_7", "read_file", json!({"path": "README.md"})),
        text("It is a readme."),
    ]);
    rt.run_turn(TurnRequest::new(KEY, "first question"))
        .await
        .unwrap();
    rt.run_turn(TurnRequest::new(KEY, "read README.md"))
        .await
        .unwrap();
    let bodies = llm.bodies().await;
    assert_eq!(bodies.len(), 3);
    insta::assert_json_snapshot!("turn1_plain", bodies[0]);
    insta::assert_json_snapshot!("turn2_tool_call", bodies[1]);
    insta::assert_json_snapshot!("turn2_after_tool_result", bodies[2]);
}

/// A conversation through the runtime (scripted provider) with a small window: every request
/// the provider received is within the budget and keeps tool pairs intact.
async fn conformance_through_runtime(label: &str, engine: Arc<dyn ContextEngine>) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(42);
    let mut replies = Vec::new();
    let turns = 24;
    for t in 0..turns {
        if t % 3 == 2 {
            replies.push(ScriptedReply::Reply {
                content: String::new(),
                thinking: None,
                tool_calls: vec![ScriptedToolCall {
                    id: Some(format!("c{t}")),
                    name: "read_file".into(),
                    arguments: json!({"path": format!("f{t}.rs")}),
                }],
                usage: None,
                stop_reason: None,
                error_message: None,
            });
        }
        replies.push(ScriptedReply::text(sentence(
            &mut rng,
            &format!("a{t}"),
            60,
        )));
    }
    let provider = Arc::new(ScriptedProvider::new(replies, Exhaustion::Error));
    let backend = Backend::Model(ModelBinding::new(provider.clone(), "m", 4000, 256));
    let rt = AgentRuntime::builder(dir.path(), engine, backend)
        .tool(Arc::new(ReadFile))
        .build();
    let budget = rt.limits().prompt_budget;
    for t in 0..turns {
        let prompt = sentence(&mut rng, &format!("u{t}"), 70);
        let o = rt
            .run_turn(TurnRequest::new(KEY, prompt))
            .await
            .unwrap_or_else(|e| panic!("[{label}] turn {t}: {e}"));
        assert!(!o.reply.is_empty());
    }
    rt.wait_for_maintenance().await;
    let requests = provider.requests();
    assert_eq!(requests.len(), turns + turns / 3);
    for (i, r) in requests.iter().enumerate() {
        let tokens = clawctx_tokens::messages_tokens(&r.messages);
        assert!(
            tokens <= budget,
            "[{label}] request {i}: {tokens} tokens > budget {budget}"
        );
        assert_tool_pairs(label, &r.messages);
        assert!(
            matches!(
                r.messages.last(),
                Some(AgentMessage::User(_)) | Some(AgentMessage::ToolResult(_))
            ),
            "[{label}] request {i} ends with the pending message"
        );
    }
    let status = rt.status(KEY).unwrap();
    assert!(status.context_messages > 0);
    rt.shutdown().await;
}

#[tokio::test]
async fn conformance_invariants_through_the_runtime_on_every_engine() {
    conformance_through_runtime("legacy", Arc::new(LegacyEngine)).await;
    conformance_through_runtime("test-owning", Arc::new(TestEngine::new("owning"))).await;
    let db = tempfile::tempdir().unwrap();
    let lossless = clawctx_lossless::LosslessEngine::open(
        db.path().join("l.db"),
        clawctx_lossless::LosslessConfig::default(),
    )
    .unwrap();
    conformance_through_runtime("lossless", Arc::new(lossless)).await;
}

#[test]
fn unknown_model_or_provider_names_the_config_key() {
    let cfg = json!({"models": {"providers": {"mock": {"baseUrl": "http://127.0.0.1:9/v1", "models": [{"id": "m1"}]}}}});
    let e = select_backend(&cfg, Some("nope/m1"), &|_| None).unwrap_err();
    assert!(
        matches!(&e, RuntimeError::Config { key, .. } if key == "models.providers.nope"),
        "{e}"
    );
    let e = select_backend(&cfg, Some("mock/m2"), &|_| None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("models.providers.mock.models") && e.contains("m2"),
        "{e}"
    );
    let e = select_backend(&json!({}), None, &|_| None).unwrap_err();
    assert!(matches!(e, RuntimeError::NoModel));
    assert!(
        e.to_string().contains("agents.defaults.model.primary"),
        "{e}"
    );
    let cfg = json!({"agents": {"defaults": {"cliBackends": {"echo": {"args": []}}}}});
    let e = select_backend(&cfg, Some("echo/x"), &|_| None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("agents.defaults.cliBackends.echo.command"),
        "{e}"
    );
}

#[tokio::test]
async fn garbage_and_cut_streams_fail_the_turn_with_the_providers_words_and_the_next_turn_works() {
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let rt =
        AgentRuntime::builder(dir.path(), Arc::new(LegacyEngine), llm.backend(8192, 512)).build();
    llm.push([Reply::Garbage]);
    let e = rt
        .run_turn(TurnRequest::new(KEY, "first try"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, RuntimeError::Provider(_))
            && e.to_string().contains("502 upstream proxy hiccup"),
        "{e}"
    );

    llm.push([Reply::CutStream("The answer is".into())]);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut req = TurnRequest::new(KEY, "second try");
    req.events = Some(tx);
    let e = rt.run_turn(req).await.unwrap_err();
    assert!(e.to_string().contains("The answer is"), "{e}");
    assert!(
        matches!(rx.recv().await, Some(clawctx_model::StreamEvent::TextDelta(t)) if t == "The answer is")
    );

    llm.push([text("Finally.")]);
    let o = rt
        .run_turn(TurnRequest::new(KEY, "third try"))
        .await
        .unwrap();
    assert_eq!(o.reply, "Finally.");
    let users: Vec<String> = rt
        .context(KEY)
        .unwrap()
        .iter()
        .filter(|m| matches!(m, AgentMessage::User(_)))
        .map(AgentMessage::plain_text)
        .collect();
    assert_eq!(
        users,
        ["first try", "second try", "third try"],
        "failed turns keep the user message"
    );
}

#[tokio::test]
async fn a_malformed_session_file_names_file_line_and_what_was_expected() {
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let rt =
        AgentRuntime::builder(dir.path(), Arc::new(LegacyEngine), llm.backend(8192, 512)).build();
    llm.push([text("ok")]);
    rt.run_turn(TurnRequest::new(KEY, "hello")).await.unwrap();
    let path = rt.session(KEY).unwrap().transcript_path;
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(2, "{this is not json");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    // A fresh runtime (nothing cached) reads the file.
    let rt =
        AgentRuntime::builder(dir.path(), Arc::new(LegacyEngine), llm.backend(8192, 512)).build();
    let e = rt
        .run_turn(TurnRequest::new(KEY, "again"))
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("{}:3:", path.display())) && msg.contains("expected"),
        "{msg}"
    );
}

#[tokio::test]
async fn cli_backend_rejects_engines_needing_assemble_before_prompt_before_starting_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    let cfg = json!({"agents": {"defaults": {"cliBackends": {"mycli": {
        "command": "sh", "args": ["-c", format!("touch {}; cat >/dev/null; echo hi", marker.display())]
    }}}}});
    let backend = select_backend(&cfg, Some("mycli/default"), &|_| None).unwrap();
    let engine = AdditionEngine {
        requires: Some(vec!["assemble-before-prompt".into()]),
        ..AdditionEngine::new()
    };
    let rt = AgentRuntime::builder(dir.path(), Arc::new(engine), backend).build();
    let e = rt
        .run_turn(TurnRequest::new(KEY, "hello"))
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "Context engine \"addition\" cannot run operation \"agent-run\" on CLI backend \"mycli\". Missing host capabilities: assemble-before-prompt. Required capabilities: assemble-before-prompt. Host capabilities: bootstrap, after-turn, maintain. Use the embedded runner."
    );
    assert!(!marker.exists(), "the backend process must not start");
}

#[tokio::test]
async fn cli_backend_projects_context_once_per_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("prompts.log");
    let cfg = json!({"agents": {"defaults": {"cliBackends": {"mycli": {
        "command": "sh", "args": ["-c", format!("cat >> {}; echo '<<END>>' >> {}; echo \"reply from $CLAWCTX_SESSION_KEY\"", log.display(), log.display())]
    }}}}});
    let backend = select_backend(&cfg, Some("mycli/default"), &|_| None).unwrap();
    let engine = Arc::new(AdditionEngine {
        projection: true,
        ..AdditionEngine::new()
    });
    let rt = AgentRuntime::builder(dir.path(), engine, backend).build();
    assert_eq!(rt.host().id, "cli:mycli");
    let o = rt.run_turn(TurnRequest::new(KEY, "one")).await.unwrap();
    assert_eq!(o.reply, format!("reply from {KEY}"));
    rt.run_turn(TurnRequest::new(KEY, "two")).await.unwrap();
    // The engine's compaction starts a new epoch: the next turn projects the context again.
    rt.compact(KEY, None).await.unwrap();
    rt.run_turn(TurnRequest::new(KEY, "three")).await.unwrap();
    let logged = std::fs::read_to_string(&log).unwrap();
    let prompts: Vec<&str> = logged
        .split("<<END>>\n")
        .filter(|p| !p.is_empty())
        .collect();
    assert_eq!(prompts.len(), 3, "{logged}");
    assert!(
        prompts[0].contains("<instructions>")
            && prompts[0].contains("Falcon")
            && prompts[0].ends_with("one"),
        "{}",
        prompts[0]
    );
    assert_eq!(prompts[1], "two", "same epoch: only the prompt");
    assert!(
        prompts[2].contains("<conversation_context>")
            && prompts[2].contains("user: one")
            && prompts[2].ends_with("three"),
        "{}",
        prompts[2]
    );
    let users: Vec<String> = rt
        .context(KEY)
        .unwrap()
        .iter()
        .filter(|m| matches!(m, AgentMessage::User(_)))
        .map(AgentMessage::plain_text)
        .collect();
    assert_eq!(
        users,
        ["one", "two", "three"],
        "the host keeps the transcript"
    );
}

/// An engine whose background maintain is slow, to watch lanes coalesce.
struct SlowMaintain(TestEngine);

#[async_trait::async_trait]
impl ContextEngine for SlowMaintain {
    fn info(&self) -> ContextEngineInfo {
        ContextEngineInfo {
            turn_maintenance_mode: Some(TurnMaintenanceMode::Background),
            ..self.0.info()
        }
    }
    fn methods(&self) -> MethodSet {
        self.0.methods()
    }
    async fn ingest(
        &self,
        p: &IngestParams,
        cx: &CallContext,
    ) -> Result<IngestResult, EngineError> {
        self.0.ingest(p, cx).await
    }
    async fn assemble(
        &self,
        p: &AssembleParams,
        cx: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        self.0.assemble(p, cx).await
    }
    async fn compact(
        &self,
        p: &CompactParams,
        cx: &CallContext,
    ) -> Result<CompactResult, EngineError> {
        self.0.compact(p, cx).await
    }
    async fn after_turn(&self, p: &AfterTurnParams, cx: &CallContext) -> Result<(), EngineError> {
        self.0.after_turn(p, cx).await
    }
    async fn maintain(
        &self,
        p: &MaintainParams,
        cx: &CallContext,
    ) -> Result<TranscriptRewriteResult, EngineError> {
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        self.0.maintain(p, cx).await?;
        Err(EngineError::failed("disk full"))
    }
    async fn on_subagent_ended(
        &self,
        p: &SubagentEndedParams,
        cx: &CallContext,
    ) -> Result<(), EngineError> {
        self.0.on_subagent_ended(p, cx).await
    }
    async fn prepare_subagent_spawn(
        &self,
        p: &PrepareSubagentSpawnParams,
        cx: &CallContext,
    ) -> Result<Option<SubagentSpawnPreparation>, EngineError> {
        self.0.prepare_subagent_spawn(p, cx).await?;
        let flag = ROLLED_BACK.clone();
        Ok(Some(SubagentSpawnPreparation::new(move || async move {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        })))
    }
}

static ROLLED_BACK: std::sync::LazyLock<Arc<std::sync::atomic::AtomicBool>> =
    std::sync::LazyLock::new(|| Arc::new(std::sync::atomic::AtomicBool::new(false)));

#[tokio::test]
async fn background_maintenance_coalesces_logs_failures_and_spawn_failures_roll_back() {
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let engine = Arc::new(SlowMaintain(TestEngine::new("slow")));
    let rt = AgentRuntime::builder(dir.path(), engine.clone(), llm.backend(8192, 512)).build();
    llm.push([text("a"), text("b"), text("c")]);
    for p in ["one", "two", "three"] {
        rt.run_turn(TurnRequest::new(KEY, p)).await.unwrap();
    }
    assert_eq!(
        rt.scheduler().runs(),
        0,
        "replies do not wait for the (slow) background maintain"
    );
    rt.wait_for_maintenance().await;
    // One run in progress + one coalesced rerun with the latest params (the third request
    // replaced the second).
    assert_eq!(rt.scheduler().runs(), 2);
    let failures = rt.maintain_failures();
    // The two background runs (a brand-new session is not bootstrapped, so no inline
    // maintain after bootstrap); none of them failed a turn.
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert!(
        failures
            .iter()
            .all(|f| f.starts_with("context engine maintain failed (turn): disk full")),
        "{failures:?}"
    );

    // A launch failure after preparation runs the rollback.
    llm.push([Reply::Garbage]);
    let e = rt
        .spawn_subagent(SpawnRequest {
            parent_session_key: KEY.into(),
            mode: SubagentContextMode::Isolated,
            agent_id: None,
            ttl_ms: None,
            prompt: Some("go".into()),
        })
        .await
        .unwrap_err();
    assert!(matches!(e, RuntimeError::Spawn(_)), "{e}");
    assert!(
        ROLLED_BACK.load(std::sync::atomic::Ordering::SeqCst),
        "rollback ran"
    );
    assert_eq!(engine.0.call_count(Method::PrepareSubagentSpawn), 1);

    // A ttl-expired child is swept with reason `swept`.
    let child = rt
        .spawn_subagent(SpawnRequest {
            parent_session_key: KEY.into(),
            mode: SubagentContextMode::Isolated,
            agent_id: None,
            ttl_ms: Some(0),
            prompt: None,
        })
        .await
        .unwrap();
    let swept = rt.sweep_subagents().await.unwrap();
    assert_eq!(swept, vec![child.child_session_key.clone()]);
    let ended: Vec<_> = engine
        .0
        .calls()
        .into_iter()
        .filter(|(m, _)| *m == Method::OnSubagentEnded)
        .map(|(_, v)| v)
        .collect();
    assert_eq!(
        ended,
        vec![json!({"childSessionKey": child.child_session_key, "reason": "swept"})]
    );
    rt.shutdown().await;
}

/// An engine whose first background maintain panics (issue #40 item 6).
struct PanicsOnce(TestEngine, std::sync::atomic::AtomicUsize);

#[async_trait::async_trait]
impl ContextEngine for PanicsOnce {
    fn info(&self) -> ContextEngineInfo {
        ContextEngineInfo {
            turn_maintenance_mode: Some(TurnMaintenanceMode::Background),
            ..self.0.info()
        }
    }
    fn methods(&self) -> MethodSet {
        self.0.methods()
    }
    async fn ingest(
        &self,
        p: &IngestParams,
        cx: &CallContext,
    ) -> Result<IngestResult, EngineError> {
        self.0.ingest(p, cx).await
    }
    async fn assemble(
        &self,
        p: &AssembleParams,
        cx: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        self.0.assemble(p, cx).await
    }
    async fn compact(
        &self,
        p: &CompactParams,
        cx: &CallContext,
    ) -> Result<CompactResult, EngineError> {
        self.0.compact(p, cx).await
    }
    async fn after_turn(&self, p: &AfterTurnParams, cx: &CallContext) -> Result<(), EngineError> {
        self.0.after_turn(p, cx).await
    }
    async fn maintain(
        &self,
        p: &MaintainParams,
        cx: &CallContext,
    ) -> Result<TranscriptRewriteResult, EngineError> {
        if self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            panic!("the engine's maintain blew up");
        }
        self.0.maintain(p, cx).await
    }
}

#[tokio::test]
async fn a_panicking_background_maintain_fails_its_run_and_the_lane_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let engine = Arc::new(PanicsOnce(
        TestEngine::new("panics"),
        std::sync::atomic::AtomicUsize::new(0),
    ));
    let rt = AgentRuntime::builder(dir.path(), engine.clone(), llm.backend(8192, 512)).build();
    llm.push([text("a"), text("b")]);
    rt.run_turn(TurnRequest::new(KEY, "one")).await.unwrap();
    // Without the fix the panicked lane is never dropped: this wait (and shutdown's) never
    // ends. The bound only keeps a failure from hanging the suite.
    tokio::time::timeout(
        std::time::Duration::from_secs(60),
        rt.wait_for_session_maintenance(KEY),
    )
    .await
    .expect("the panicked lane is dropped");
    let failures = rt.maintain_failures();
    assert!(
        failures.len() == 1
            && failures[0].starts_with("context engine maintain failed (turn): maintain panicked")
            && failures[0].contains("blew up"),
        "{failures:?}"
    );
    // The next turn's maintenance runs on a fresh lane.
    rt.run_turn(TurnRequest::new(KEY, "two")).await.unwrap();
    tokio::time::timeout(
        std::time::Duration::from_secs(60),
        rt.wait_for_maintenance(),
    )
    .await
    .expect("the second run settles");
    assert_eq!(rt.scheduler().runs(), 2);
    assert_eq!(engine.1.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(rt.maintain_failures().len(), 1, "the second run succeeded");
    rt.shutdown().await;
}
