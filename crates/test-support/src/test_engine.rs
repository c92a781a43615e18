//! A scriptable engine for registry, guard and runtime tests.
//!
//! It is a real (small) engine: it stores ingested messages per session (deduplicated), assembles
//! them newest-first within the budget keeping tool pairs, and compacts by replacing its older
//! half with an extractive summary. Tests can make any method fail, record the params each call
//! received (as JSON), and declare any `info`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use clawctx_engine::pipeline::{fit_budget, PipelineReport};
use clawctx_engine::*;
use clawctx_protocol::*;
use clawctx_summarize::{
    serialize_conversation, ExtractiveSummarizer, Summarizer, SummaryKind, SummaryRequest,
};

#[derive(Clone, Debug)]
pub enum Fault {
    /// Fail with this message.
    Error(String),
    /// Fail with an abort error.
    Abort(String),
}

#[derive(Default)]
struct State {
    sessions: HashMap<String, Vec<AgentMessage>>,
    seen: HashSet<String>,
}

pub struct TestEngine {
    pub info: ContextEngineInfo,
    pub methods: MethodSet,
    faults: Mutex<HashMap<Method, Fault>>,
    calls: Mutex<Vec<(Method, serde_json::Value)>>,
    state: Mutex<State>,
    successor: Mutex<Option<String>>,
}

impl TestEngine {
    /// An engine that owns compaction and implements every optional method.
    pub fn new(id: &str) -> Self {
        Self {
            info: ContextEngineInfo {
                owns_compaction: Some(true),
                ..ContextEngineInfo::new(id, format!("Test engine {id}"))
            },
            methods: MethodSet::of(&Method::ALL),
            faults: Mutex::new(HashMap::new()),
            calls: Mutex::new(Vec::new()),
            state: Mutex::new(State::default()),
            successor: Mutex::new(None),
        }
    }

    /// Makes the next successful `compact` report a successor session (`result.sessionTarget`
    /// and `result.sessionId`), as an engine that rotates the session on compaction does.
    pub fn with_successor(self, session_id: &str) -> Self {
        *self.successor.lock().unwrap() = Some(session_id.to_owned());
        self
    }

    pub fn with_info(mut self, f: impl FnOnce(&mut ContextEngineInfo)) -> Self {
        f(&mut self.info);
        self
    }

    pub fn with_methods(mut self, methods: &[Method]) -> Self {
        self.methods = MethodSet::of(methods);
        self
    }

    pub fn failing(self, method: Method, message: &str) -> Self {
        self.faults
            .lock()
            .unwrap()
            .insert(method, Fault::Error(message.into()));
        self
    }

    pub fn set_fault(&self, method: Method, fault: Option<Fault>) {
        let mut f = self.faults.lock().unwrap();
        match fault {
            Some(x) => f.insert(method, x),
            None => f.remove(&method),
        };
    }

    pub fn calls(&self) -> Vec<(Method, serde_json::Value)> {
        self.calls.lock().unwrap().clone()
    }

    pub fn call_count(&self, m: Method) -> usize {
        self.calls().iter().filter(|(x, _)| *x == m).count()
    }

    pub fn stored(&self, session: &str) -> Vec<AgentMessage> {
        self.state
            .lock()
            .unwrap()
            .sessions
            .get(session)
            .cloned()
            .unwrap_or_default()
    }

    fn enter(&self, m: Method, params: serde_json::Value) -> Result<(), EngineError> {
        self.calls.lock().unwrap().push((m, params));
        match self.faults.lock().unwrap().get(&m) {
            Some(Fault::Error(msg)) => Err(EngineError::failed(msg.clone())),
            Some(Fault::Abort(msg)) => Err(EngineError::Aborted {
                reason: msg.clone(),
            }),
            None => Ok(()),
        }
    }

    fn store(&self, session: &str, message: &AgentMessage) -> bool {
        let key = format!("{session}\u{0}{}", serde_json::to_string(message).unwrap());
        let mut st = self.state.lock().unwrap();
        if !st.seen.insert(key) {
            return false;
        }
        st.sessions
            .entry(session.to_owned())
            .or_default()
            .push(message.clone());
        true
    }
}

fn json<T: serde::Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap()
}

#[async_trait]
impl ContextEngine for TestEngine {
    fn info(&self) -> ContextEngineInfo {
        self.info.clone()
    }

    fn methods(&self) -> MethodSet {
        self.methods
    }

    async fn ingest(
        &self,
        params: &IngestParams,
        _cx: &CallContext,
    ) -> Result<IngestResult, EngineError> {
        self.enter(Method::Ingest, json(params))?;
        Ok(IngestResult {
            ingested: self.store(&params.session_id, &params.message),
        })
    }

    async fn ingest_batch(
        &self,
        params: &IngestBatchParams,
        _cx: &CallContext,
    ) -> Result<IngestBatchResult, EngineError> {
        self.enter(Method::IngestBatch, json(params))?;
        let n = params
            .messages
            .iter()
            .filter(|m| self.store(&params.session_id, m))
            .count();
        Ok(IngestBatchResult {
            ingested_count: n as u64,
        })
    }

    async fn assemble(
        &self,
        params: &AssembleParams,
        _cx: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        self.enter(Method::Assemble, json(params))?;
        let stored = self.stored(&params.session_id);
        let source = if stored.is_empty() {
            params.messages.clone()
        } else {
            stored
        };
        let messages = match params.token_budget {
            Some(b) => fit_budget(source, b, &mut PipelineReport::default()),
            None => source,
        };
        let estimated_tokens = clawctx_tokens::messages_tokens(&messages);
        Ok(AssembleResult {
            messages,
            estimated_tokens,
            ..Default::default()
        })
    }

    async fn compact(
        &self,
        params: &CompactParams,
        _cx: &CallContext,
    ) -> Result<CompactResult, EngineError> {
        self.enter(Method::Compact, json(params))?;
        let stored = self.stored(&params.session_id);
        if stored.len() < 4 {
            return Ok(CompactResult {
                ok: true,
                compacted: false,
                reason: Some("nothing to compact".into()),
                result: None,
            });
        }
        // Cut at a pairing-unit boundary near the middle.
        let units = clawctx_engine::pipeline::pairing_units(&stored);
        let cut = units[units.len() / 2].start;
        let (old, kept) = stored.split_at(cut);
        let tokens_before = clawctx_tokens::messages_tokens(&stored);
        let summary = ExtractiveSummarizer
            .summarize(SummaryRequest {
                kind: SummaryKind::History,
                conversation: serialize_conversation(old),
                previous_summary: None,
                custom_instructions: params.custom_instructions.clone(),
                max_tokens: 512,
            })
            .await
            .map_err(|e| EngineError::failed(e.to_string()))?;
        let mut next = vec![AgentMessage::user(format!("[summary] {}", summary.text))];
        next.extend_from_slice(kept);
        let tokens_after = clawctx_tokens::messages_tokens(&next);
        self.state
            .lock()
            .unwrap()
            .sessions
            .insert(params.session_id.clone(), next);
        let successor = self.successor.lock().unwrap().clone();
        Ok(CompactResult {
            ok: true,
            compacted: true,
            reason: None,
            result: Some(CompactResultDetail {
                summary: Some(summary.text),
                tokens_before,
                tokens_after: Some(tokens_after),
                session_id: successor.clone(),
                session_target: successor.map(|sid| ContextEngineSessionTarget {
                    session_id: Some(sid),
                    session_key: params.session_key.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        })
    }

    async fn bootstrap(
        &self,
        params: &BootstrapParams,
        _cx: &CallContext,
    ) -> Result<BootstrapResult, EngineError> {
        self.enter(Method::Bootstrap, json(params))?;
        Ok(BootstrapResult {
            bootstrapped: true,
            imported_messages: Some(0),
            reason: None,
        })
    }

    async fn maintain(
        &self,
        params: &MaintainParams,
        _cx: &CallContext,
    ) -> Result<TranscriptRewriteResult, EngineError> {
        self.enter(Method::Maintain, json(params))?;
        Ok(TranscriptRewriteResult {
            reason: Some("nothing to maintain".into()),
            ..Default::default()
        })
    }

    async fn after_turn(
        &self,
        params: &AfterTurnParams,
        _cx: &CallContext,
    ) -> Result<(), EngineError> {
        self.enter(Method::AfterTurn, json(params))?;
        for m in params
            .messages
            .iter()
            .skip(params.pre_prompt_message_count as usize)
        {
            self.store(&params.session_id, m);
        }
        Ok(())
    }

    async fn commit_turn(
        &self,
        params: &CommitTurnParams,
        _cx: &CallContext,
    ) -> Result<CommitTurnResult, EngineError> {
        self.enter(Method::CommitTurn, json(params))?;
        Ok(CommitTurnResult {
            status: CommitTurnStatus::Committed,
        })
    }

    async fn prepare_subagent_spawn(
        &self,
        params: &PrepareSubagentSpawnParams,
        _cx: &CallContext,
    ) -> Result<Option<SubagentSpawnPreparation>, EngineError> {
        self.enter(Method::PrepareSubagentSpawn, json(params))?;
        Ok(None)
    }

    async fn on_subagent_ended(
        &self,
        params: &SubagentEndedParams,
        _cx: &CallContext,
    ) -> Result<(), EngineError> {
        self.enter(Method::OnSubagentEnded, json(params))
    }

    async fn dispose(&self) -> Result<(), EngineError> {
        self.calls
            .lock()
            .unwrap()
            .push((Method::Dispose, serde_json::Value::Null));
        Ok(())
    }
}

/// A factory that returns the same shared instance every time (so tests can inspect it) and
/// counts its calls.
pub fn shared_factory(
    engine: Arc<TestEngine>,
    counter: Arc<std::sync::atomic::AtomicUsize>,
) -> Factory {
    factory(move |_ctx| {
        let engine = engine.clone();
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(engine as Arc<dyn ContextEngine>)
        }
    })
}
