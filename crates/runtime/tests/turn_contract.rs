//! The turn loop as OpenClaw's (issue #15): engines see the whole prepared history (§7.5),
//! non-owning engines are compacted rather than truncated, everything sent counts against the
//! budget (§1.3 `systemPromptAddition`), bootstrap runs only for a session file that existed
//! and before the prompt is in it (§1.2), durable engines get `commitTurn` through an outbox
//! that survives a crash (§1.7), and the remaining runtime-context fields (§1.4, §6).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use clawctx_engine::legacy::{delegate_compaction_to_runtime, LegacyEngine};
use clawctx_engine::pipeline::{fit_budget, PipelineReport};
use clawctx_engine::*;
use clawctx_model::{Exhaustion, ScriptedProvider, ScriptedReply};
use clawctx_protocol::transcript::EntryKind;
use clawctx_protocol::*;
use clawctx_runtime::outbox::{inspect_outbox, outbox_dir};
use clawctx_runtime::*;
use clawctx_transcript::SessionFile;
use serde_json::{json, Value};

const KEY: &str = "agent:main:main";

/// What a [`Probe`] engine's durable store holds: commits by advancement key.
#[derive(Default)]
struct CommitLog {
    /// Keys in the order they were first committed, with their messages.
    committed: Vec<(String, Vec<AgentMessage>)>,
    /// Every answer given, in order.
    answers: Vec<(String, CommitTurnStatus)>,
}

/// A small engine for these tests: it records every call, assembles the host's messages fitted
/// to the budget it is given (optionally with a `systemPromptAddition`), delegates compaction
/// to the runtime as legacy does, and keeps durable commits in a [`CommitLog`] shared across
/// "restarts" (new instances over the same log).
struct Probe {
    info: ContextEngineInfo,
    methods: MethodSet,
    addition: Option<String>,
    calls: Mutex<Vec<(Method, Value)>>,
    /// User messages the session file held when `bootstrap` ran.
    bootstrap_saw: Mutex<Vec<Vec<String>>>,
    commits: Arc<Mutex<CommitLog>>,
    hang_commit: bool,
    hang_compact: bool,
}

impl Probe {
    fn new(id: &str, owns: bool) -> Self {
        Probe {
            info: ContextEngineInfo {
                owns_compaction: Some(owns),
                ..ContextEngineInfo::new(id, format!("Probe {id}"))
            },
            methods: MethodSet::of(&[
                Method::Ingest,
                Method::Assemble,
                Method::Compact,
                Method::AfterTurn,
                Method::Bootstrap,
            ]),
            addition: None,
            calls: Mutex::new(Vec::new()),
            bootstrap_saw: Mutex::new(Vec::new()),
            commits: Arc::new(Mutex::new(CommitLog::default())),
            hang_commit: false,
            hang_compact: false,
        }
    }

    /// The full durable-turn declaration (§1.7) and `commitTurn`.
    fn durable(mut self, commits: Arc<Mutex<CommitLog>>) -> Self {
        self.info.transcript_semantics = Some(TranscriptSemantics {
            current_turn_fence: Some("before-current-turn-entry-v1".into()),
            turn_advancement_idempotency: Some("atomic-idempotent-v1".into()),
        });
        self.methods = self.methods.with(Method::CommitTurn);
        self.commits = commits;
        self
    }

    fn params(&self, m: Method) -> Vec<Value> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(x, _)| *x == m)
            .map(|(_, v)| v.clone())
            .collect()
    }

    fn order(&self) -> Vec<Method> {
        self.calls.lock().unwrap().iter().map(|(m, _)| *m).collect()
    }

    fn record<T: serde::Serialize>(&self, m: Method, p: &T) {
        self.calls
            .lock()
            .unwrap()
            .push((m, serde_json::to_value(p).unwrap()));
    }
}

#[async_trait]
impl ContextEngine for Probe {
    fn info(&self) -> ContextEngineInfo {
        self.info.clone()
    }
    fn methods(&self) -> MethodSet {
        self.methods
    }
    fn is_runtime_compaction_delegate(&self) -> bool {
        true
    }
    async fn ingest(
        &self,
        p: &IngestParams,
        _cx: &CallContext,
    ) -> Result<IngestResult, EngineError> {
        self.record(Method::Ingest, p);
        Ok(IngestResult { ingested: true })
    }
    async fn assemble(
        &self,
        p: &AssembleParams,
        _cx: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        self.record(Method::Assemble, p);
        let messages = fit_budget(
            p.messages.clone(),
            p.token_budget.unwrap_or(u64::MAX),
            &mut PipelineReport::default(),
        );
        let estimated_tokens = clawctx_tokens::messages_tokens(&messages);
        Ok(AssembleResult {
            messages,
            estimated_tokens,
            system_prompt_addition: self.addition.clone(),
            ..Default::default()
        })
    }
    async fn compact(
        &self,
        p: &CompactParams,
        cx: &CallContext,
    ) -> Result<CompactResult, EngineError> {
        self.record(Method::Compact, p);
        if self.hang_compact {
            futures::future::pending::<()>().await;
        }
        delegate_compaction_to_runtime(p, cx).await
    }
    async fn bootstrap(
        &self,
        p: &BootstrapParams,
        _cx: &CallContext,
    ) -> Result<BootstrapResult, EngineError> {
        self.record(Method::Bootstrap, p);
        let file = SessionFile::open(&p.session_file).unwrap();
        let users = file
            .build_context()
            .iter()
            .filter(|m| m.role() == "user")
            .map(|m| m.plain_text())
            .collect();
        self.bootstrap_saw.lock().unwrap().push(users);
        Ok(BootstrapResult {
            bootstrapped: true,
            imported_messages: Some(0),
            reason: None,
        })
    }
    async fn after_turn(&self, p: &AfterTurnParams, _cx: &CallContext) -> Result<(), EngineError> {
        self.record(Method::AfterTurn, p);
        Ok(())
    }
    async fn commit_turn(
        &self,
        p: &CommitTurnParams,
        _cx: &CallContext,
    ) -> Result<CommitTurnResult, EngineError> {
        self.record(Method::CommitTurn, p);
        if self.hang_commit {
            // The process "dies" here: the test drops the turn while this waits.
            futures::future::pending::<()>().await;
        }
        let mut log = self.commits.lock().unwrap();
        let status = if log.committed.iter().any(|(k, _)| *k == p.advancement_key) {
            CommitTurnStatus::Duplicate
        } else {
            log.committed
                .push((p.advancement_key.clone(), p.messages.clone()));
            CommitTurnStatus::Committed
        };
        log.answers.push((p.advancement_key.clone(), status));
        Ok(CommitTurnResult { status })
    }
}

fn scripted(replies: usize) -> Arc<ScriptedProvider> {
    Arc::new(ScriptedProvider::new(
        (0..replies)
            .map(|i| ScriptedReply::text(format!("reply {i}")))
            .collect(),
        Exhaustion::Cycle,
    ))
}

/// A runtime over `dir` with `engine`, a scripted model and a prompt budget of `budget`.
fn runtime(
    dir: &std::path::Path,
    engine: Arc<dyn ContextEngine>,
    provider: Arc<ScriptedProvider>,
    budget: u64,
) -> AgentRuntime {
    let backend = Backend::Model(ModelBinding::new(provider, "m", budget * 2, 256));
    let compaction = clawctx_engine::compaction::CompactionSettings {
        reserve_tokens: budget / 4,
        reserve_tokens_floor: 0,
        ..Default::default()
    };
    AgentRuntime::builder(dir, engine, backend)
        .compaction(compaction)
        .prompt_budget(Some(budget))
        .build()
}

/// Writes `turns` stored turns of ~`words` words each into the session's transcript, as a
/// session recorded earlier (by another process) would be.
fn stored_session(rt: &AgentRuntime, turns: usize, words: usize) -> usize {
    let s = rt.session(KEY).unwrap();
    let mut f = SessionFile::open(&s.transcript_path).unwrap();
    let text = |i: usize, who: &str| format!("{who} {i}: ") + &format!("detail{i} ").repeat(words);
    for i in 0..turns {
        f.append_message(AgentMessage::user(text(i, "question")))
            .unwrap();
        f.append_message(AgentMessage::assistant(text(i, "answer")))
            .unwrap();
    }
    turns * 2
}

fn tokens_sent(provider: &ScriptedProvider) -> Vec<u64> {
    provider
        .requests()
        .iter()
        .map(|r| {
            clawctx_tokens::messages_tokens(&r.messages)
                + r.system_prompt
                    .as_deref()
                    .map(clawctx_tokens::text_tokens)
                    .unwrap_or(0)
        })
        .collect()
}

#[tokio::test]
async fn an_engine_receives_the_whole_prepared_history_not_a_budget_cut_s7_5() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(Probe::new("viewer", true));
    let provider = scripted(1);
    let rt = runtime(dir.path(), engine.clone(), provider.clone(), 8_000);
    let stored = stored_session(&rt, 63, 60) + 1; // 127 messages, well over the budget
    let history_tokens = clawctx_tokens::messages_tokens(&rt.context(KEY).unwrap());
    assert!(
        history_tokens > 16_000,
        "the stored session must be far larger than the budget ({history_tokens})"
    );
    // One more stored message so the count is odd, as in the report.
    {
        let s = rt.session(KEY).unwrap();
        SessionFile::open(&s.transcript_path)
            .unwrap()
            .append_message(AgentMessage::user("one more"))
            .unwrap();
    }
    rt.run_turn(TurnRequest::new(KEY, "what did we decide?"))
        .await
        .unwrap();
    let assemble = engine.params(Method::Assemble);
    assert_eq!(
        assemble[0]["messages"].as_array().unwrap().len(),
        stored,
        "§7.5: assemble gets every message of the stored session (sanitized, limited only by a turn count); the engine decides what fits"
    );
    let after = engine.params(Method::AfterTurn);
    assert_eq!(
        after[0]["messages"].as_array().unwrap().len(),
        stored + 2,
        "afterTurn: the history plus this turn's two messages"
    );
    assert_eq!(after[0]["prePromptMessageCount"], stored);
    assert!(
        tokens_sent(&provider)[0] <= 8_000,
        "what the engine returned still fits the budget"
    );
}

#[tokio::test]
async fn legacy_over_its_budget_is_compacted_before_the_call_not_truncated_s7_5() {
    let dir = tempfile::tempdir().unwrap();
    let provider = scripted(1);
    let rt = runtime(dir.path(), Arc::new(LegacyEngine), provider.clone(), 8_000);
    stored_session(&rt, 40, 60);
    let outcome = rt
        .run_turn(TurnRequest::new(KEY, "and now?"))
        .await
        .unwrap();
    assert!(
        outcome.compactions.iter().any(|c| c.trigger == "preflight"),
        "the history did not fit: the runtime compacts before the model call ({:?})",
        outcome.compactions
    );
    let sent = &provider.requests()[0].messages;
    assert!(
        matches!(&sent[0], AgentMessage::CompactionSummary(_))
            || sent[0].plain_text().contains("<summary>"),
        "the first message sent summarizes what no longer fits, nothing is dropped silently: {:?}",
        sent[0]
    );
    assert_eq!(sent.last().unwrap().plain_text(), "and now?");
    let s = rt.session(KEY).unwrap();
    let f = SessionFile::open(&s.transcript_path).unwrap();
    assert!(
        f.active_path()
            .iter()
            .any(|e| matches!(e.kind, EntryKind::Compaction(_))),
        "the compaction is in the transcript"
    );
    assert!(tokens_sent(&provider)[0] <= 8_000);
}

#[tokio::test]
async fn the_system_prompt_addition_counts_against_the_budget_s1_3() {
    let dir = tempfile::tempdir().unwrap();
    let mut probe = Probe::new("adds", true);
    let addition = "Remember the house rules. ".repeat(300);
    let addition_tokens = clawctx_tokens::text_tokens(addition.trim());
    probe.addition = Some(addition);
    let engine = Arc::new(probe);
    let provider = scripted(3);
    let budget = 6_000;
    let rt = runtime(dir.path(), engine.clone(), provider.clone(), budget);
    stored_session(&rt, 40, 60);
    for i in 0..3 {
        rt.run_turn(TurnRequest::new(KEY, format!("turn {i}")))
            .await
            .unwrap();
    }
    for (i, sent) in tokens_sent(&provider).iter().enumerate() {
        assert!(*sent <= budget, "request {i}: system prompt (with the {addition_tokens}-token addition) + messages = {sent} > budget {budget}");
    }
    let budgets: Vec<u64> = engine
        .params(Method::Assemble)
        .iter()
        .map(|p| p["tokenBudget"].as_u64().unwrap())
        .collect();
    let last = *budgets.last().unwrap();
    assert!(
        last + addition_tokens <= budget,
        "once the engine's addition is known, its budget leaves room for it: {budgets:?} (addition {addition_tokens})"
    );
}

#[tokio::test]
async fn bootstrap_runs_only_for_an_existing_session_file_and_before_the_prompt_is_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let first = Arc::new(Probe::new("importer", true));
    let rt = runtime(dir.path(), first.clone(), scripted(1), 8_000);
    rt.run_turn(TurnRequest::new(KEY, "first prompt"))
        .await
        .unwrap();
    rt.shutdown().await;
    assert_eq!(
        first.params(Method::Bootstrap).len(),
        0,
        "a brand-new session has no file to import: no bootstrap"
    );

    // A new process over the same state dir: the session file exists now.
    let second = Arc::new(Probe::new("importer", true));
    let rt = runtime(dir.path(), second.clone(), scripted(1), 8_000);
    rt.run_turn(TurnRequest::new(KEY, "second prompt"))
        .await
        .unwrap();
    rt.run_turn(TurnRequest::new(KEY, "third prompt"))
        .await
        .unwrap();
    assert_eq!(
        second.params(Method::Bootstrap).len(),
        1,
        "bootstrap once per session per process"
    );
    assert_eq!(
        second.bootstrap_saw.lock().unwrap()[0],
        vec!["first prompt".to_owned()],
        "bootstrap ran before the new prompt was appended, so an importing engine cannot take it twice"
    );
    let order = second.order();
    assert_eq!(
        order.iter().position(|m| *m == Method::Bootstrap),
        Some(0),
        "bootstrap comes before assemble: {order:?}"
    );
}

#[tokio::test]
async fn a_durable_engine_gets_commit_turn_once_even_when_the_process_dies_before_the_answer_s1_7()
{
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Mutex::new(CommitLog::default()));

    // Process 1 persists the turn and dies inside commitTurn.
    let mut dying = Probe::new("durable", true).durable(log.clone());
    dying.hang_commit = true;
    let dying = Arc::new(dying);
    let rt = runtime(dir.path(), dying.clone(), scripted(1), 8_000);
    let killed = tokio::time::timeout(
        Duration::from_millis(500),
        rt.run_turn(TurnRequest::new(KEY, "remember the blue door")),
    )
    .await;
    assert!(killed.is_err(), "the turn was cut off inside commitTurn");
    drop(rt);
    assert_eq!(
        dying.params(Method::AfterTurn).len(),
        0,
        "a durable engine gets commitTurn, not afterTurn"
    );
    assert!(log.lock().unwrap().committed.is_empty());
    assert_eq!(
        inspect_outbox(dir.path()).pending,
        1,
        "the commit waits in the outbox on disk"
    );
    let waiting: Vec<_> = std::fs::read_dir(outbox_dir(dir.path()))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    let saved = std::fs::read(&waiting[0]).unwrap();

    // Process 2: the waiting commit is delivered before the engine sees anything else.
    let engine = Arc::new(Probe::new("durable", true).durable(log.clone()));
    let rt = runtime(dir.path(), engine.clone(), scripted(1), 8_000);
    rt.run_turn(TurnRequest::new(KEY, "which door?"))
        .await
        .unwrap();
    let order = engine.order();
    assert_eq!(
        order.first(),
        Some(&Method::CommitTurn),
        "outbox recovery comes before bootstrap and assemble: {order:?}"
    );
    {
        let log = log.lock().unwrap();
        assert_eq!(
            log.committed.len(),
            2,
            "the interrupted turn and this one, each once"
        );
        let texts: Vec<String> = log.committed[0]
            .1
            .iter()
            .map(AgentMessage::plain_text)
            .collect();
        assert_eq!(
            texts,
            vec!["remember the blue door".to_owned(), "reply 0".to_owned()],
            "the interrupted turn's messages, user first"
        );
        assert!(log.committed[0].0 != log.committed[1].0);
    }
    let assembled = &engine.params(Method::Assemble)[0];
    assert_eq!(
        assembled["messages"].as_array().unwrap().len(),
        2,
        "a durable engine assembles the history before the current turn; the pending messages are appended by the host"
    );
    assert_eq!(
        inspect_outbox(dir.path()).pending,
        0,
        "acknowledged commits leave the outbox"
    );
    let commit = &engine.params(Method::CommitTurn)[1];
    assert_eq!(commit["admission"]["role"], "user");
    assert_eq!(commit["messages"].as_array().unwrap().len(), 2);
    assert!(commit["advancementKey"]
        .as_str()
        .unwrap()
        .contains(commit["terminal"]["entryId"].as_str().unwrap()));

    // The same commit delivered again (a retry after a lost answer) is a duplicate and leaves.
    std::fs::write(&waiting[0], &saved).unwrap();
    rt.run_turn(TurnRequest::new(KEY, "again")).await.unwrap();
    let log = log.lock().unwrap();
    assert_eq!(log.committed.len(), 3, "the retry stored nothing new");
    assert!(log
        .answers
        .iter()
        .any(|(k, s)| *k == log.committed[0].0 && *s == CommitTurnStatus::Duplicate));
    assert!(
        !waiting[0].exists(),
        "a duplicate is an acknowledgement too"
    );
}

#[tokio::test]
async fn a_corrupt_outbox_file_is_reported_and_kept_and_the_turn_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Mutex::new(CommitLog::default()));
    let engine = Arc::new(Probe::new("durable", true).durable(log.clone()));
    let rt = runtime(dir.path(), engine.clone(), scripted(2), 8_000);
    rt.run_turn(TurnRequest::new(KEY, "one")).await.unwrap();
    let sid = rt.session(KEY).unwrap().entry.session_id;
    let bad = outbox_dir(dir.path()).join(format!("{sid}.torn.json"));
    std::fs::write(&bad, b"{\"version\": 1, \"sessionKey\": ").unwrap();
    let outcome = rt.run_turn(TurnRequest::new(KEY, "two")).await.unwrap();
    assert_eq!(outcome.reply, "reply 1", "the turn is answered");
    assert!(
        bad.exists(),
        "an unreadable commit is never dropped silently"
    );
    let report = inspect_outbox(dir.path());
    assert_eq!(report.problems.len(), 1);
    assert_eq!(report.problems[0].path, bad);
    assert!(
        report.problems[0].problem.contains("line 1"),
        "{}",
        report.problems[0].problem
    );
    assert_eq!(
        log.lock().unwrap().committed.len(),
        2,
        "both good turns were committed"
    );
}

#[tokio::test]
async fn runtime_context_fields_heartbeat_harness_and_auto_compaction_summary_s1_4() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(Probe::new("delegating", false));
    let provider = scripted(1);
    let rt = runtime(dir.path(), engine.clone(), provider, 4_000);
    rt.run_turn(TurnRequest {
        is_heartbeat: true,
        ..TurnRequest::new(KEY, "heartbeat")
    })
    .await
    .unwrap();
    let after = engine.params(Method::AfterTurn);
    assert_eq!(
        after[0]["isHeartbeat"], true,
        "§1.2: a heartbeat run says so"
    );
    let assemble = &engine.params(Method::Assemble)[0];
    assert_eq!(
        assemble["runtimeSettings"]["runtime"]["harnessId"], "openclaw-embedded",
        "§6: harnessId from the host"
    );
    assert_eq!(
        assemble["runtimeContext"]["agentHarnessId"], "openclaw-embedded",
        "§1.4"
    );

    // Turns until the threshold compaction runs after one of them.
    let mut summary = None;
    for i in 0..40 {
        let outcome = rt
            .run_turn(TurnRequest::new(
                KEY,
                format!("turn {i}: ") + &"words ".repeat(200),
            ))
            .await
            .unwrap();
        if outcome.compactions.iter().any(|c| c.trigger == "auto") {
            summary = Some(i);
            break;
        }
    }
    assert!(summary.is_some(), "the threshold compaction ran");
    let after = engine.params(Method::AfterTurn);
    let last = after.last().unwrap();
    assert!(
        last.get("isHeartbeat").is_none(),
        "a normal turn carries no heartbeat flag"
    );
    let s = rt.session(KEY).unwrap();
    let f = SessionFile::open(&s.transcript_path).unwrap();
    let compaction = f
        .active_path()
        .iter()
        .rev()
        .find_map(|e| match &e.kind {
            EntryKind::Compaction(c) => Some(c.summary.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        last["autoCompactionSummary"],
        json!(compaction),
        "§1.2: afterTurn gets the automatic compaction's summary"
    );
    let messages = last["messages"].as_array().unwrap();
    let pre = last["prePromptMessageCount"].as_u64().unwrap() as usize;
    assert_eq!(
        messages.len() - pre,
        2,
        "afterTurn sees the whole turn as it happened, not the compacted context"
    );
    assert!(
        messages[pre]["content"]
            .as_str()
            .unwrap_or_default()
            .starts_with(&format!("turn {}:", summary.unwrap())),
        "{:?}",
        messages[pre]
    );
}

#[tokio::test]
async fn an_in_process_engine_compact_is_bounded_by_the_runtime_timeout_s1_2() {
    let dir = tempfile::tempdir().unwrap();
    let mut probe = Probe::new("slow", true);
    probe.hang_compact = true;
    let engine = Arc::new(probe);
    let backend = Backend::Model(ModelBinding::new(scripted(1), "m", 16_000, 256));
    let rt = AgentRuntime::builder(dir.path(), engine, backend)
        .compact_timeout(Duration::from_millis(200))
        .build();
    rt.run_turn(TurnRequest::new(KEY, "hello")).await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), rt.compact(KEY, None))
        .await
        .expect("the runtime's timeout fired")
        .unwrap_err();
    assert!(err.to_string().contains("compact timed out"), "{err}");
}

#[tokio::test]
async fn runtime_settings_report_degraded_after_a_quarantine_s6() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    let failing = Arc::new(
        clawctx_test_support::test_engine::TestEngine::new("flaky")
            .failing(Method::Assemble, "boom"),
    );
    let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    registry
        .register_plugin_engine(
            "flaky",
            "flaky",
            clawctx_test_support::test_engine::shared_factory(failing, counter),
        )
        .unwrap();
    let config = Arc::new(json!({"plugins": {"slots": {"contextEngine": "flaky"}}}));
    let resolved = registry.resolve(Some(config), None, None).await.unwrap();
    let backend = Backend::Model(ModelBinding::new(scripted(2), "m", 16_000, 256));
    let rt = AgentRuntime::builder(dir.path(), resolved.engine, backend).build();
    assert_eq!(rt.runtime_settings().runtime.mode, RuntimeMode::Normal);
    let outcome = rt.run_turn(TurnRequest::new(KEY, "hello")).await.unwrap();
    assert_eq!(
        outcome.engine, "legacy",
        "the quarantined engine's turn was answered on legacy"
    );
    let settings = rt.runtime_settings();
    assert_eq!(
        settings.runtime.mode,
        RuntimeMode::Degraded,
        "§6: the run is degraded once its engine is quarantined"
    );
    assert_eq!(
        settings.diagnostics.degraded_reason,
        Some(ReasonCode::RuntimeUnavailable)
    );
}

/// A tool that answers at once.
struct Echo;

#[async_trait]
impl AgentTool for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    fn description(&self) -> &str {
        "Echoes."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }
    async fn execute(
        &self,
        _arguments: Value,
        _context: ToolCallContext,
    ) -> Result<String, String> {
        Ok("echoed".into())
    }
}

#[tokio::test]
async fn an_owning_engine_with_only_ingest_gets_each_turn_message_once_through_the_tool_loop_s7_1()
{
    let dir = tempfile::tempdir().unwrap();
    let mut probe = Probe::new("ingest-only", true);
    probe.methods = MethodSet::of(&[Method::Ingest, Method::Assemble, Method::Compact]);
    let engine = Arc::new(probe);
    let call = |id: &str| ScriptedReply::Reply {
        content: String::new(),
        thinking: None,
        tool_calls: vec![clawctx_model::ScriptedToolCall {
            id: Some(id.into()),
            name: "echo".into(),
            arguments: json!({}),
        }],
        usage: None,
        stop_reason: None,
        error_message: None,
    };
    let provider = Arc::new(ScriptedProvider::new(
        vec![call("c1"), call("c2"), ScriptedReply::text("done")],
        Exhaustion::Error,
    ));
    let backend = Backend::Model(ModelBinding::new(provider, "m", 16_000, 256));
    let rt = AgentRuntime::builder(dir.path(), engine.clone(), backend)
        .tool(Arc::new(Echo))
        .build();
    let outcome = rt
        .run_turn(TurnRequest::new(KEY, "use the tool twice"))
        .await
        .unwrap();
    assert_eq!(outcome.tool_calls, 2);
    let ingested: Vec<Value> = engine
        .params(Method::Ingest)
        .into_iter()
        .map(|p| p["message"].clone())
        .collect();
    assert_eq!(
        ingested.len(),
        outcome.messages.len(),
        "the in-loop hook delivers only new messages and the end of the turn the rest: each of the {} turn messages once, got {}",
        outcome.messages.len(),
        ingested.len()
    );
    let roles: Vec<&str> = ingested
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "toolResult",
            "assistant",
            "toolResult",
            "assistant"
        ]
    );
}

#[tokio::test]
async fn runtime_settings_report_fallback_when_the_configured_engine_could_not_be_used_s6() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    let config = Arc::new(json!({"plugins": {"slots": {"contextEngine": "missing-engine"}}}));
    let resolved = registry.resolve(Some(config), None, None).await.unwrap();
    let backend = Backend::Model(ModelBinding::new(scripted(1), "m", 16_000, 256));
    let rt = AgentRuntime::builder(dir.path(), resolved.engine, backend)
        .selection(
            resolved.effective_id.clone(),
            clawctx_runtime::setup::selection_source(&resolved.reason),
        )
        .fallback_reason(clawctx_runtime::setup::fallback_reason(&resolved.reason))
        .build();
    let settings = rt.runtime_settings();
    assert_eq!(
        settings.runtime.mode,
        RuntimeMode::Fallback,
        "§6: the default serves because the configured engine is missing"
    );
    assert_eq!(
        settings.diagnostics.fallback_reason,
        Some(ReasonCode::RuntimeUnavailable)
    );
}
