//! An in-memory host: a linear transcript per session plus the runtime's built-in compaction.
//!
//! It implements [`RuntimeServices`] so `legacy`'s delegated compaction runs the real
//! compaction algorithm (`clawctx_engine::compaction`) over real transcript entries; only the
//! storage is memory instead of a JSONL file.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use clawctx_engine::compaction::{compact_path, CompactionSettings};
use clawctx_engine::*;
use clawctx_protocol::transcript::{
    context_messages, to_model_message, EntryKind, TranscriptEntry,
};
use clawctx_protocol::AgentMessage;
use clawctx_summarize::{ExtractiveSummarizer, Summarizer};

pub struct InMemoryHost {
    sessions: Mutex<HashMap<String, Vec<TranscriptEntry>>>,
    next_id: AtomicU64,
    pub settings: CompactionSettings,
    pub summarizer: Arc<dyn Summarizer>,
    pub compact_requests: Mutex<Vec<RuntimeCompactionRequest>>,
}

impl Default for InMemoryHost {
    fn default() -> Self {
        Self::new(CompactionSettings::default())
    }
}

impl InMemoryHost {
    pub fn new(settings: CompactionSettings) -> Self {
        Self {
            sessions: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            settings,
            summarizer: Arc::new(ExtractiveSummarizer),
            compact_requests: Mutex::new(Vec::new()),
        }
    }

    fn push(&self, session: &str, kind: EntryKind) -> String {
        let id = format!("{:08x}", self.next_id.fetch_add(1, Ordering::SeqCst));
        let mut s = self.sessions.lock().unwrap();
        let path = s.entry(session.to_owned()).or_default();
        let parent_id = path.last().map(|e| e.id.clone());
        path.push(TranscriptEntry {
            id: id.clone(),
            parent_id,
            timestamp: "2026-01-01T00:00:00.000Z".into(),
            kind,
        });
        id
    }

    /// Appends a message; returns its entry id.
    pub fn append(&self, session: &str, message: AgentMessage) -> String {
        self.push(session, EntryKind::Message(message))
    }

    pub fn path(&self, session: &str) -> Vec<TranscriptEntry> {
        self.sessions
            .lock()
            .unwrap()
            .get(session)
            .cloned()
            .unwrap_or_default()
    }

    /// The compaction-aware context, as the model sees it.
    pub fn context(&self, session: &str) -> Vec<AgentMessage> {
        context_messages(&self.path(session))
            .iter()
            .map(to_model_message)
            .collect()
    }

    pub fn services(self: &Arc<Self>) -> CallContext {
        CallContext::none().with_services(self.clone())
    }
}

#[async_trait]
impl RuntimeServices for InMemoryHost {
    async fn compact_session(
        &self,
        request: RuntimeCompactionRequest,
    ) -> Result<RuntimeCompactionOutcome, EngineError> {
        self.compact_requests.lock().unwrap().push(request.clone());
        let path = self.path(&request.session_id);
        let keep = if request.force == Some(true) {
            0
        } else {
            self.settings.keep_recent_tokens
        };
        let reserve = compaction::effective_reserve_tokens(&self.settings, request.token_budget);
        let outcome = compact_path(
            &path,
            keep,
            self.summarizer.as_ref(),
            reserve,
            request.custom_instructions.as_deref(),
        )
        .await?;
        let Some(outcome) = outcome else {
            return Ok(RuntimeCompactionOutcome {
                ok: true,
                compacted: false,
                reason: Some("nothing to compact".into()),
                result: None,
            });
        };
        self.push(
            &request.session_id,
            EntryKind::Compaction(outcome.entry.clone()),
        );
        Ok(outcome.into())
    }
}
