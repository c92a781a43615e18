//! The host the instruments drive engines through: a linear in-memory transcript with the
//! runtime's built-in compaction (for engines that delegate to it, such as `legacy`).
//!
//! It mirrors `clawctx-test-support`'s `InMemoryHost` but is built for long runs: per-entry
//! token counts are computed once at append, the compaction-aware context is rebuilt from the
//! last compaction's window only (not from the whole path), and the runtime's trigger reads a
//! running total. Compaction goes through the real algorithm
//! (`clawctx_engine::compaction::compact_path`) with whatever summarizer the bench chose.

use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use clawctx_engine::compaction::{
    compact_path, effective_reserve_tokens, should_compact, CompactionSettings,
};
use clawctx_engine::{
    CallContext, EngineError, RuntimeCompactionOutcome, RuntimeCompactionRequest, RuntimeServices,
};
use clawctx_protocol::transcript::{
    context_messages, to_model_message, EntryKind, TranscriptEntry,
};
use clawctx_protocol::AgentMessage;
use clawctx_summarize::Summarizer;
use clawctx_tokens::message_tokens;

#[derive(Default)]
struct State {
    path: Vec<TranscriptEntry>,
    /// Model-visible tokens per entry (0 for compaction entries).
    tokens: Vec<u64>,
    /// Index of the first entry of the current context window (the last compaction's first
    /// kept entry, 0 before any compaction).
    window_start: usize,
    /// Index of the last compaction entry.
    last_compaction: Option<usize>,
    /// Tokens of the last compaction's summary message.
    summary_tokens: u64,
    /// Running total of the compaction-aware context.
    context_tokens: u64,
    next_id: u64,
}

/// What the runtime's compaction left standing for the oldest messages ([`BenchHost::compacted`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compacted {
    /// The last compaction's summary text (an update of the ones before, so it covers them).
    pub summary: String,
    /// The newest timestamp (ms) of the messages it covers.
    pub through_ts: i64,
}

/// A single-session in-memory host.
pub struct BenchHost {
    state: Mutex<State>,
    /// Runtime compaction settings (reserve, keep-recent).
    pub settings: CompactionSettings,
    summarizer: Arc<dyn Summarizer>,
}

impl BenchHost {
    /// A host whose runtime compaction uses `summarizer`.
    pub fn new(settings: CompactionSettings, summarizer: Arc<dyn Summarizer>) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State::default()),
            settings,
            summarizer,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends a message to the transcript.
    pub fn append(&self, message: AgentMessage) {
        let mut s = self.lock();
        let tokens = message_tokens(&message);
        let id = format!("{:08x}", s.next_id);
        s.next_id += 1;
        let parent_id = s.path.last().map(|e| e.id.clone());
        s.path.push(TranscriptEntry {
            id,
            parent_id,
            timestamp: String::new(),
            kind: EntryKind::Message(message),
        });
        s.tokens.push(tokens);
        s.context_tokens += tokens;
    }

    /// Messages in the transcript (all entries).
    pub fn len(&self) -> usize {
        self.lock().path.len()
    }

    /// Whether the transcript is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The compaction-aware context as the model sees it (summary first, then kept entries).
    pub fn context(&self) -> Vec<AgentMessage> {
        let s = self.lock();
        context_messages(&s.path[s.window_start..])
            .iter()
            .map(to_model_message)
            .collect()
    }

    /// The newest `n` messages of the context (the summary counts as the oldest one).
    pub fn recent(&self, n: usize) -> Vec<AgentMessage> {
        let s = self.lock();
        let start = s.path.len().saturating_sub(n).max(s.window_start);
        let mut out: Vec<AgentMessage> = s.path[start..]
            .iter()
            .filter_map(|e| e.message().cloned())
            .collect();
        if start == s.window_start {
            if let Some(m) = s
                .last_compaction
                .and_then(|ci| s.path[ci].context_message())
            {
                out.insert(0, to_model_message(&m));
            }
        }
        out
    }

    /// The last compaction's summary and the newest message timestamp it stands for (every
    /// message before its first kept entry), or `None` before any compaction or when no message
    /// before that entry has a timestamp.
    pub fn compacted(&self) -> Option<Compacted> {
        let s = self.lock();
        let ci = s.last_compaction?;
        let EntryKind::Compaction(c) = &s.path[ci].kind else {
            return None;
        };
        let through_ts = s.path[..s.window_start]
            .iter()
            .rev()
            .find_map(|e| e.message().and_then(AgentMessage::timestamp_ms))?;
        Some(Compacted {
            summary: c.summary.clone(),
            through_ts,
        })
    }

    /// The runtime's estimate of the current context (running total).
    pub fn context_tokens(&self) -> u64 {
        self.lock().context_tokens
    }

    /// The runtime's trigger: `context > window − reserve`.
    pub fn should_compact(&self, budget: u64) -> bool {
        should_compact(self.context_tokens(), budget, &self.settings)
    }

    /// A call context that offers this host's runtime services.
    pub fn call_context(self: &Arc<Self>) -> CallContext {
        CallContext::none().with_services(self.clone())
    }
}

#[async_trait]
impl RuntimeServices for BenchHost {
    async fn compact_session(
        &self,
        request: RuntimeCompactionRequest,
    ) -> Result<RuntimeCompactionOutcome, EngineError> {
        let (window, offset) = {
            let s = self.lock();
            (s.path[s.window_start..].to_vec(), s.window_start)
        };
        let keep = if request.force == Some(true) {
            0
        } else {
            self.settings.keep_recent_tokens
        };
        let reserve = effective_reserve_tokens(&self.settings, request.token_budget);
        let outcome = compact_path(
            &window,
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
        let mut s = self.lock();
        let first_kept = window
            .iter()
            .position(|e| e.id == outcome.entry.first_kept_entry_id)
            .map(|i| i + offset)
            .unwrap_or(s.window_start);
        let id = format!("{:08x}", s.next_id);
        s.next_id += 1;
        let parent_id = s.path.last().map(|e| e.id.clone());
        s.path.push(TranscriptEntry {
            id,
            parent_id,
            timestamp: String::new(),
            kind: EntryKind::Compaction(outcome.entry.clone()),
        });
        s.tokens.push(0);
        let ci = s.path.len() - 1;
        s.last_compaction = Some(ci);
        s.window_start = first_kept;
        s.summary_tokens = s.path[ci]
            .context_message()
            .map(|m| message_tokens(&to_model_message(&m)))
            .unwrap_or(0);
        let kept: u64 = s.tokens[first_kept..].iter().sum();
        s.context_tokens = s.summary_tokens + kept;
        Ok(outcome.into())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use clawctx_summarize::ExtractiveSummarizer;

    /// What the eval's (d) reads for `legacy`: after a runtime compaction, the summary and the
    /// newest timestamp it stands for (the message just before the first kept one).
    #[tokio::test]
    async fn compacted_names_the_summary_and_what_it_covers() {
        let settings = CompactionSettings {
            keep_recent_tokens: 200,
            ..Default::default()
        };
        let host = BenchHost::new(settings, Arc::new(ExtractiveSummarizer));
        for i in 0..40 {
            let text = if i == 0 {
                "Ana: my passport expires on 14 March 2027.".to_owned()
            } else {
                format!("Ben: filler line number {i} about nothing in particular at all")
            };
            host.append(AgentMessage::user(text).with_timestamp(1_000 + i));
        }
        assert_eq!(host.compacted(), None, "before any compaction");
        let outcome = host
            .compact_session(RuntimeCompactionRequest {
                token_budget: Some(2_000),
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(outcome.compacted, "{outcome:?}");
        let c = host.compacted().expect("a compaction summary");
        let first_kept = host
            .context()
            .iter()
            .filter_map(AgentMessage::timestamp_ms)
            .min()
            .unwrap();
        assert!(
            c.through_ts < first_kept && c.through_ts >= 1_000,
            "{c:?}, first kept {first_kept}"
        );
        assert!(c.summary.contains("14 March 2027"), "{}", c.summary);
    }
}
