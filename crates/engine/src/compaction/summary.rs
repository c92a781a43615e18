//! Generating the compaction summary (contract §7.4 "Summary generation").
//!
//! The history before the cut becomes one summary (updating the previous one when there is
//! one). A split turn also summarizes the turn's early part, concurrently, and the two are
//! joined under a "Turn Context (split turn)" heading. Files the summarized tool calls read or
//! modified are tracked (merged with the previous compaction's lists) and appended, so a later
//! model still knows which files were touched.

use std::collections::BTreeSet;

use clawctx_protocol::transcript::{CompactionEntryData, TranscriptEntry};
use clawctx_protocol::AgentMessage;
use clawctx_summarize::{serialize_conversation, Summarizer, SummaryKind, SummaryRequest};
use serde_json::{json, Value};

use super::cut::{prepare_compaction, CompactionPreparation};
use crate::error::EngineError;

/// Files read and modified by summarized tool calls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileOps {
    /// Paths read (and not modified).
    pub read: BTreeSet<String>,
    /// Paths written or edited.
    pub modified: BTreeSet<String>,
}

impl FileOps {
    /// Collects from tool calls: a `path`/`file_path`/`filePath`/`file` argument of a tool
    /// whose name says it writes (write, edit, create, patch, delete, move, rename) is
    /// modified; of any other tool, read.
    pub fn collect(&mut self, messages: &[AgentMessage]) {
        for m in messages {
            for call in m.tool_calls() {
                let Some(path) = ["path", "file_path", "filePath", "file"]
                    .iter()
                    .find_map(|k| call.arguments.get(*k).and_then(Value::as_str))
                else {
                    continue;
                };
                let name = call.name.to_ascii_lowercase();
                let writes = [
                    "write", "edit", "create", "patch", "delete", "move", "rename", "replace",
                ]
                .iter()
                .any(|w| name.contains(w));
                if writes {
                    self.modified.insert(path.to_owned());
                } else {
                    self.read.insert(path.to_owned());
                }
            }
        }
    }

    /// Merges the lists of a previous compaction's `details`.
    pub fn merge_details(&mut self, details: &Value) {
        let list = |k: &str| -> Vec<String> {
            details
                .get(k)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        self.read.extend(list("readFiles"));
        self.modified.extend(list("modifiedFiles"));
    }

    fn finish(&mut self) {
        let modified = self.modified.clone();
        self.read.retain(|p| !modified.contains(p));
    }

    /// `{readFiles, modifiedFiles}`.
    pub fn to_details(&self) -> Value {
        json!({ "readFiles": self.read, "modifiedFiles": self.modified })
    }

    fn render(&self) -> String {
        let mut out = String::new();
        if !self.read.is_empty() {
            out.push_str("\n\n<read-files>\n");
            for p in &self.read {
                out.push_str(p);
                out.push('\n');
            }
            out.push_str("</read-files>");
        }
        if !self.modified.is_empty() {
            out.push_str("\n\n<modified-files>\n");
            for p in &self.modified {
                out.push_str(p);
                out.push('\n');
            }
            out.push_str("</modified-files>");
        }
        out
    }
}

/// What a compaction produced: the payload of the `compaction` entry to append.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactionOutcome {
    /// The entry payload.
    pub entry: CompactionEntryData,
    /// How many messages the summary replaced.
    pub summarized_messages: usize,
    /// Estimated context tokens after compaction (summary + kept entries).
    pub tokens_after: u64,
}

/// The separator between the history summary and the split-turn summary.
pub const SPLIT_TURN_HEADING: &str = "\n\n---\n\n**Turn Context (split turn):**\n\n";
/// What the history part says when there was none.
pub const NO_PRIOR_HISTORY: &str = "No prior history.";

/// The size a summary aims at: a fifth of what it replaces (at least 512 tokens), never more
/// than `cap`. A summary as large as its source saves nothing; a cap alone would let the
/// extractive summarizer return almost all of a short history.
pub fn summary_target(input_tokens: u64, cap: u64) -> u64 {
    cap.min((input_tokens / 5).max(512))
}

/// Generates the summary for `prep` with `summarizer`. `reserve_tokens` caps the outputs: 80%
/// of it for the history summary, 50% for a turn prefix; within the caps each aims at
/// [`summary_target`].
pub async fn generate_summary(
    prep: &CompactionPreparation,
    summarizer: &dyn Summarizer,
    reserve_tokens: u64,
    custom_instructions: Option<&str>,
) -> Result<CompactionOutcome, EngineError> {
    let fail = |e: clawctx_summarize::SummarizeError| match e {
        clawctx_summarize::SummarizeError::Aborted => EngineError::Aborted {
            reason: "compaction aborted".into(),
        },
        clawctx_summarize::SummarizeError::Failed(m) => {
            EngineError::failed(format!("Summarization failed: {m}"))
        }
        other => EngineError::failed(format!("Summarization failed: {other}")),
    };
    let history_request = (!prep.messages_to_summarize.is_empty()).then(|| {
        let conversation = serialize_conversation(&prep.messages_to_summarize);
        let input = clawctx_tokens::text_tokens(&conversation)
            + prep
                .previous_summary
                .as_deref()
                .map(clawctx_tokens::text_tokens)
                .unwrap_or(0);
        SummaryRequest {
            kind: SummaryKind::History,
            conversation,
            previous_summary: prep.previous_summary.clone(),
            custom_instructions: custom_instructions.map(str::to_owned),
            max_tokens: summary_target(input, reserve_tokens * 8 / 10),
        }
    });
    let prefix_request = prep.is_split_turn().then(|| {
        let conversation = serialize_conversation(&prep.turn_prefix_messages);
        let input = clawctx_tokens::text_tokens(&conversation);
        SummaryRequest {
            kind: SummaryKind::TurnPrefix,
            conversation,
            previous_summary: None,
            custom_instructions: custom_instructions.map(str::to_owned),
            max_tokens: summary_target(input, reserve_tokens / 2),
        }
    });
    let (history, prefix) = futures::join!(
        async {
            match history_request {
                Some(r) => summarizer.summarize(r).await.map(|s| Some(s.text)),
                None => Ok(None),
            }
        },
        async {
            match prefix_request {
                Some(r) => summarizer.summarize(r).await.map(|s| Some(s.text)),
                None => Ok(None),
            }
        }
    );
    let history = history.map_err(fail)?;
    // A prefix with nothing worth keeping (a single short request) adds no empty section.
    let prefix = prefix.map_err(fail)?.filter(|p| !p.trim().is_empty());
    let history_text = history.or_else(|| prep.previous_summary.clone());
    let mut summary = match prefix {
        Some(p) => format!(
            "{}{SPLIT_TURN_HEADING}{p}",
            history_text.as_deref().unwrap_or(NO_PRIOR_HISTORY)
        ),
        None => history_text.unwrap_or_else(|| NO_PRIOR_HISTORY.to_owned()),
    };
    let mut files = FileOps::default();
    if let Some(d) = &prep.previous_details {
        files.merge_details(d);
    }
    files.collect(&prep.messages_to_summarize);
    files.collect(&prep.turn_prefix_messages);
    files.finish();
    summary.push_str(&files.render());
    let details =
        (!files.read.is_empty() || !files.modified.is_empty()).then(|| files.to_details());
    let summary_tokens = clawctx_tokens::text_tokens(&summary)
        + clawctx_tokens::text_tokens(clawctx_protocol::COMPACTION_SUMMARY_PREFIX)
        + clawctx_tokens::MESSAGE_OVERHEAD_TOKENS;
    Ok(CompactionOutcome {
        entry: CompactionEntryData {
            summary,
            first_kept_entry_id: prep.first_kept_entry_id.clone(),
            tokens_before: prep.tokens_before,
            details,
            from_hook: None,
            extra: Default::default(),
        },
        summarized_messages: prep.messages_to_summarize.len() + prep.turn_prefix_messages.len(),
        tokens_after: summary_tokens + prep.kept_tokens,
    })
}

/// Prepares and generates in one step. `Ok(None)` when there is nothing to compact.
pub async fn compact_path(
    path: &[TranscriptEntry],
    keep_recent_tokens: u64,
    summarizer: &dyn Summarizer,
    reserve_tokens: u64,
    custom_instructions: Option<&str>,
) -> Result<Option<CompactionOutcome>, EngineError> {
    let Some(prep) = prepare_compaction(path, keep_recent_tokens) else {
        return Ok(None);
    };
    generate_summary(&prep, summarizer, reserve_tokens, custom_instructions)
        .await
        .map(Some)
}

impl From<CompactionOutcome> for crate::engine::RuntimeCompactionOutcome {
    /// The runtime's report of a compaction it performed (same session, no successor).
    fn from(outcome: CompactionOutcome) -> Self {
        crate::engine::RuntimeCompactionOutcome {
            ok: true,
            compacted: true,
            reason: None,
            result: Some(crate::engine::RuntimeCompactionDetail {
                summary: Some(outcome.entry.summary),
                first_kept_entry_id: Some(outcome.entry.first_kept_entry_id),
                tokens_before: outcome.entry.tokens_before,
                tokens_after: Some(outcome.tokens_after),
                details: outcome.entry.details,
                ..Default::default()
            }),
        }
    }
}
