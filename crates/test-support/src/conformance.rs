//! The engine conformance suite: one harness every engine implementation is run against.
//!
//! Each check takes a fresh engine from the caller's maker and drives it the way a host does
//! (through [`InMemoryHost`] for the transcript and the runtime's compaction, and through the
//! runtime's history pipeline for assemble's input). A failing check panics with the check's
//! name, the engine's id and what was observed, so a red test explains itself.
//!
//! Checks: info and contract; the lifecycle in host order; the token budget is never exceeded
//! (including a message larger than the whole budget); tool call/result pairs stay intact;
//! ingest is idempotent; forced compaction shrinks the context; a failing engine is answered
//! by `legacy` in the same call and quarantined.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use clawctx_engine::pipeline::{prepare_history, PipelineOptions};
use clawctx_engine::registry::RegisterOptions;
use clawctx_engine::*;
use clawctx_protocol::*;

use crate::host::InMemoryHost;
use crate::messages::{conversation, huge_user_message};

/// Makes a fresh engine for each check.
pub type Maker =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Arc<dyn ContextEngine>> + Send>> + Send + Sync>;

/// Wraps a synchronous constructor as a [`Maker`].
pub fn maker<F>(f: F) -> Maker
where
    F: Fn() -> Arc<dyn ContextEngine> + Send + Sync + 'static,
{
    let f = Arc::new(f);
    Arc::new(move || {
        let f = f.clone();
        Box::pin(async move { f() })
    })
}

/// Runs every check. `label` names the engine in failure messages.
pub async fn run_all(label: &str, make: Maker) {
    check_info_contract(label, make().await).await;
    check_lifecycle_in_host_order(label, make().await).await;
    check_budget_never_exceeded(label, make.clone()).await;
    check_tool_pairs_intact(label, make().await).await;
    check_idempotent_ingest(label, make().await).await;
    check_compaction_shrinks(label, make().await).await;
    check_failure_falls_back_to_legacy(label, make.clone()).await;
}

fn session_key(s: &str) -> Option<String> {
    Some(format!("agent:conformance:{s}"))
}

/// Delivers a finished turn the way the runtime does: afterTurn beats ingestBatch beats ingest.
pub async fn deliver_turn(
    engine: &dyn ContextEngine,
    session: &str,
    all: &[AgentMessage],
    pre_prompt_count: usize,
    budget: Option<u64>,
) -> Result<(), EngineError> {
    let methods = engine.methods();
    let cx = CallContext::none();
    if methods.has(Method::AfterTurn) {
        engine
            .after_turn(
                &AfterTurnParams {
                    session_id: session.into(),
                    session_key: session_key(session),
                    session_file: format!("{session}.jsonl"),
                    messages: all.to_vec(),
                    pre_prompt_message_count: pre_prompt_count as u64,
                    token_budget: budget,
                    ..Default::default()
                },
                &cx,
            )
            .await?;
    } else if methods.has(Method::IngestBatch) {
        engine
            .ingest_batch(
                &IngestBatchParams {
                    session_id: session.into(),
                    session_key: session_key(session),
                    messages: all[pre_prompt_count..].to_vec(),
                    is_heartbeat: None,
                },
                &cx,
            )
            .await?;
    } else {
        for m in &all[pre_prompt_count..] {
            engine
                .ingest(
                    &IngestParams {
                        session_id: session.into(),
                        session_key: session_key(session),
                        message: m.clone(),
                        is_heartbeat: None,
                    },
                    &cx,
                )
                .await?;
        }
    }
    Ok(())
}

/// Feeds `messages` turn by turn (a turn ends before each user message) into `engine` and
/// `host`.
pub async fn feed(
    engine: &dyn ContextEngine,
    host: &InMemoryHost,
    session: &str,
    messages: &[AgentMessage],
) {
    let mut all: Vec<AgentMessage> = Vec::new();
    let mut turn_start = 0;
    for (i, m) in messages.iter().enumerate() {
        if i > 0 && matches!(m, AgentMessage::User(_)) {
            deliver_turn(engine, session, &all, turn_start, Some(1_000_000))
                .await
                .expect("delivering a turn");
            turn_start = all.len();
        }
        host.append(session, m.clone());
        all.push(m.clone());
    }
    deliver_turn(engine, session, &all, turn_start, Some(1_000_000))
        .await
        .expect("delivering the last turn");
}

/// Assembles the way the host does: history through the pipeline, then the engine.
pub async fn host_assemble(
    engine: &dyn ContextEngine,
    host: &Arc<InMemoryHost>,
    session: &str,
    budget: u64,
) -> Result<AssembleResult, EngineError> {
    let prepared = prepare_history(
        host.context(session),
        &PipelineOptions {
            token_budget: Some(budget),
            ..Default::default()
        },
    );
    engine
        .assemble(
            &AssembleParams {
                session_id: session.into(),
                session_key: session_key(session),
                messages: prepared.messages,
                token_budget: Some(budget),
                ..Default::default()
            },
            &host.services(),
        )
        .await
}

/// Panics unless every tool result follows its call and every call is answered.
pub fn assert_tool_pairs(label: &str, messages: &[AgentMessage]) {
    let mut pending: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        match m {
            AgentMessage::ToolResult(r) => {
                let pos = pending.iter().position(|id| *id == r.tool_call_id);
                assert!(
                    pos.is_some(),
                    "[{label}] tool pairs: result {:?} at index {i} has no preceding call",
                    r.tool_call_id
                );
                if let Some(p) = pos {
                    pending.remove(p);
                }
            }
            _ => {
                assert!(
                    pending.is_empty(),
                    "[{label}] tool pairs: calls {pending:?} are not answered before message {i} ({})",
                    m.role()
                );
                pending.extend(m.tool_calls().map(|c| c.id.clone()));
            }
        }
    }
    assert!(
        pending.is_empty(),
        "[{label}] tool pairs: calls {pending:?} are never answered"
    );
}

/// The engine declares a usable info and passes contract validation.
pub async fn check_info_contract(label: &str, engine: Arc<dyn ContextEngine>) {
    let info = engine.info();
    assert!(!info.id.trim().is_empty(), "[{label}] info.id is blank");
    assert!(!info.name.trim().is_empty(), "[{label}] info.name is blank");
    assert_eq!(
        clawctx_engine::resolve::contract_error(label, engine.as_ref()),
        None,
        "[{label}] contract validation failed"
    );
    engine.dispose().await.expect("dispose");
}

/// bootstrap → turns (ingest/afterTurn) → assemble → compact → assemble → dispose, all Ok.
pub async fn check_lifecycle_in_host_order(label: &str, engine: Arc<dyn ContextEngine>) {
    let host = Arc::new(InMemoryHost::default());
    let session = "conf-lifecycle";
    if engine.methods().has(Method::Bootstrap) {
        let r = engine
            .bootstrap(
                &BootstrapParams {
                    session_id: session.into(),
                    session_key: session_key(session),
                    session_file: format!("{session}.jsonl"),
                    ..Default::default()
                },
                &host.services(),
            )
            .await;
        assert!(r.is_ok(), "[{label}] lifecycle: bootstrap failed: {r:?}");
    }
    feed(engine.as_ref(), &host, session, &conversation(7, 12, 3)).await;
    let a = host_assemble(engine.as_ref(), &host, session, 50_000).await;
    assert!(
        a.as_ref().is_ok_and(|a| !a.messages.is_empty()),
        "[{label}] lifecycle: first assemble: {a:?}"
    );
    let c = engine
        .compact(
            &CompactParams {
                session_id: session.into(),
                session_key: session_key(session),
                force: Some(true),
                ..Default::default()
            },
            &host.services(),
        )
        .await;
    assert!(
        c.as_ref().is_ok_and(|c| c.ok),
        "[{label}] lifecycle: compact: {c:?}"
    );
    let a = host_assemble(engine.as_ref(), &host, session, 50_000).await;
    assert!(
        a.as_ref().is_ok_and(|a| !a.messages.is_empty()),
        "[{label}] lifecycle: assemble after compact: {a:?}"
    );
    engine.dispose().await.expect("dispose");
}

/// The assembled context never exceeds the budget, including when one message alone is larger
/// than the whole budget.
pub async fn check_budget_never_exceeded(label: &str, make: Maker) {
    for (i, budget) in [300u64, 2_000, 8_000, 40_000].into_iter().enumerate() {
        let engine = make().await;
        let host = Arc::new(InMemoryHost::default());
        let session = format!("conf-budget-{i}");
        let mut msgs = conversation(11 + i as u64, 60, 2);
        msgs.push(huge_user_message(budget as usize * 2));
        feed(engine.as_ref(), &host, &session, &msgs).await;
        let r = host_assemble(engine.as_ref(), &host, &session, budget)
            .await
            .unwrap_or_else(|e| panic!("[{label}] budget {budget}: assemble failed: {e}"));
        let used = clawctx_tokens::messages_tokens(&r.messages);
        assert!(
            used <= budget,
            "[{label}] budget {budget} exceeded: the assembled context is {used} tokens"
        );
        assert!(
            !r.messages.is_empty(),
            "[{label}] budget {budget}: assembled nothing"
        );
        assert_tool_pairs(label, &r.messages);
        engine.dispose().await.expect("dispose");
    }
}

/// Tool calls and results stay paired in a tool-heavy conversation at a tight budget.
pub async fn check_tool_pairs_intact(label: &str, engine: Arc<dyn ContextEngine>) {
    let host = Arc::new(InMemoryHost::default());
    let session = "conf-tools";
    feed(engine.as_ref(), &host, session, &conversation(21, 80, 1)).await;
    for budget in [700u64, 3_000, 12_000] {
        let r = host_assemble(engine.as_ref(), &host, session, budget)
            .await
            .expect("assemble");
        assert_tool_pairs(&format!("{label} @ {budget}"), &r.messages);
    }
    engine.dispose().await.expect("dispose");
}

/// The same message ingested twice is stored once: the second ingest says `ingested: false`
/// and the assembled context does not show it twice.
pub async fn check_idempotent_ingest(label: &str, engine: Arc<dyn ContextEngine>) {
    let host = Arc::new(InMemoryHost::default());
    let session = "conf-idem";
    let msg = AgentMessage::user("idempotency probe 8c1f").with_timestamp(1_700_000_000_000);
    let p = IngestParams {
        session_id: session.into(),
        session_key: session_key(session),
        message: msg.clone(),
        is_heartbeat: None,
    };
    let _first = engine
        .ingest(&p, &CallContext::none())
        .await
        .expect("first ingest");
    let second = engine
        .ingest(&p, &CallContext::none())
        .await
        .expect("second ingest");
    assert!(
        !second.ingested,
        "[{label}] idempotent ingest: the second delivery of the same message was stored again"
    );
    host.append(session, msg.clone());
    let r = host_assemble(engine.as_ref(), &host, session, 10_000)
        .await
        .expect("assemble");
    let copies = r
        .messages
        .iter()
        .filter(|m| m.plain_text().contains("idempotency probe 8c1f"))
        .count();
    assert_eq!(
        copies, 1,
        "[{label}] idempotent ingest: the message appears {copies} times in the context"
    );
    engine.dispose().await.expect("dispose");
}

/// A forced compaction of a long conversation compacts and the context shrinks.
pub async fn check_compaction_shrinks(label: &str, engine: Arc<dyn ContextEngine>) {
    let host = Arc::new(InMemoryHost::default());
    let session = "conf-compact";
    feed(engine.as_ref(), &host, session, &conversation(31, 250, 4)).await;
    let before = host_assemble(engine.as_ref(), &host, session, 2_000_000)
        .await
        .expect("assemble before");
    let before_tokens = clawctx_tokens::messages_tokens(&before.messages);
    let c = engine
        .compact(
            &CompactParams {
                session_id: session.into(),
                session_key: session_key(session),
                force: Some(true),
                token_budget: Some(128_000),
                ..Default::default()
            },
            &host.services(),
        )
        .await
        .unwrap_or_else(|e| panic!("[{label}] compaction: compact failed: {e}"));
    assert!(
        c.ok && c.compacted,
        "[{label}] compaction: a forced compaction of {before_tokens} tokens did nothing: {c:?}"
    );
    let after = host_assemble(engine.as_ref(), &host, session, 2_000_000)
        .await
        .expect("assemble after");
    let after_tokens = clawctx_tokens::messages_tokens(&after.messages);
    assert!(
        after_tokens < before_tokens,
        "[{label}] compaction: context did not shrink ({before_tokens} → {after_tokens})"
    );
    assert_tool_pairs(label, &after.messages);
    engine.dispose().await.expect("dispose");
}

/// Wraps an engine and fails one method; everything else is delegated.
pub struct Faulty {
    pub inner: Arc<dyn ContextEngine>,
    pub fail: Method,
}

impl Faulty {
    fn check(&self, m: Method) -> Result<(), EngineError> {
        if m == self.fail {
            Err(EngineError::failed(format!(
                "injected fault in {}",
                m.name()
            )))
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl ContextEngine for Faulty {
    fn info(&self) -> ContextEngineInfo {
        self.inner.info()
    }
    fn methods(&self) -> MethodSet {
        self.inner.methods()
    }
    async fn ingest(
        &self,
        p: &IngestParams,
        cx: &CallContext,
    ) -> Result<IngestResult, EngineError> {
        self.check(Method::Ingest)?;
        self.inner.ingest(p, cx).await
    }
    async fn assemble(
        &self,
        p: &AssembleParams,
        cx: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        self.check(Method::Assemble)?;
        self.inner.assemble(p, cx).await
    }
    async fn compact(
        &self,
        p: &CompactParams,
        cx: &CallContext,
    ) -> Result<CompactResult, EngineError> {
        self.check(Method::Compact)?;
        self.inner.compact(p, cx).await
    }
    async fn after_turn(&self, p: &AfterTurnParams, cx: &CallContext) -> Result<(), EngineError> {
        self.check(Method::AfterTurn)?;
        self.inner.after_turn(p, cx).await
    }
    async fn ingest_batch(
        &self,
        p: &IngestBatchParams,
        cx: &CallContext,
    ) -> Result<IngestBatchResult, EngineError> {
        self.check(Method::IngestBatch)?;
        self.inner.ingest_batch(p, cx).await
    }
    async fn dispose(&self) -> Result<(), EngineError> {
        self.inner.dispose().await
    }
}

/// Selected through a registry slot, an engine whose assemble fails is answered by `legacy`
/// in the same call (the host-prepared history, unchanged) and quarantined with operation
/// `assemble`; its compact failure is rethrown (fail closed).
pub async fn check_failure_falls_back_to_legacy(label: &str, make: Maker) {
    for fail in [Method::Assemble, Method::Compact] {
        let registry = Arc::new(ContextEngineRegistry::with_legacy());
        let make = make.clone();
        let f = factory(move |_ctx| {
            let make = make.clone();
            async move {
                Ok(Arc::new(Faulty {
                    inner: make().await,
                    fail,
                }) as Arc<dyn ContextEngine>)
            }
        });
        registry
            .register_for_owner(
                "under-test",
                f,
                "test:under-test",
                RegisterOptions::default(),
            )
            .expect("register");
        let config =
            Arc::new(serde_json::json!({"plugins": {"slots": {"contextEngine": "under-test"}}}));
        let resolved = registry
            .resolve(Some(config), None, None)
            .await
            .expect("resolve");
        assert_eq!(
            resolved.effective_id, "under-test",
            "[{label}] fallback: the slot did not select the engine"
        );
        let host = Arc::new(InMemoryHost::default());
        let session = "conf-fallback";
        feed(
            resolved.engine.as_ref(),
            &host,
            session,
            &conversation(41, 10, 2),
        )
        .await;
        match fail {
            Method::Assemble => {
                let prepared = prepare_history(
                    host.context(session),
                    &PipelineOptions {
                        token_budget: Some(5_000),
                        ..Default::default()
                    },
                );
                let r = host_assemble(resolved.engine.as_ref(), &host, session, 5_000)
                    .await
                    .unwrap_or_else(|e| {
                        panic!("[{label}] fallback: assemble was not answered by legacy: {e}")
                    });
                assert_eq!(
                    r.messages, prepared.messages,
                    "[{label}] fallback: legacy did not pass the prepared history through"
                );
            }
            _ => {
                let r = resolved
                    .engine
                    .compact(
                        &CompactParams {
                            session_id: session.into(),
                            force: Some(true),
                            ..Default::default()
                        },
                        &host.services(),
                    )
                    .await;
                assert!(
                    r.is_err(),
                    "[{label}] fallback: a failing compact must fail closed, got {r:?}"
                );
            }
        }
        let q = registry.quarantines();
        assert_eq!(
            q.len(),
            1,
            "[{label}] fallback: expected one quarantine record, got {q:?}"
        );
        assert_eq!(
            q[0].operation,
            fail.name(),
            "[{label}] fallback: wrong quarantine operation"
        );
        assert_eq!(
            resolved.engine.info().id,
            "legacy",
            "[{label}] fallback: the wrapper must report legacy info after quarantine"
        );
        resolved.engine.dispose().await.expect("dispose");
    }
}
