//! What the model sees from a transcript: the compaction-aware rebuild of §7.4 ("Rebuilt
//! context") and the visible-delta cursor of §1.7.
//!
//! The rebuild walks the active branch, finds the latest `compaction` entry on it, and emits
//! its summary as a **user** message (wrapped in the fixed compaction prefix/suffix), then the
//! kept entries from `firstKeptEntryId` up to the compaction, then everything after it.
//! `custom_message` entries become `custom` role messages; `branch_summary` entries become user
//! messages with the branch prefix/suffix. Entries outside model context (`custom`,
//! `model_change`, `label`, `session_info`, `thinking_level_change`, unknown types) are skipped.

use clawctx_protocol::transcript::{EntryKind, TranscriptEntry};
use clawctx_protocol::{
    AgentMessage, Content, CustomMessage, UserMessage, BRANCH_SUMMARY_PREFIX,
    BRANCH_SUMMARY_SUFFIX, COMPACTION_SUMMARY_PREFIX, COMPACTION_SUMMARY_SUFFIX,
};
use serde_json::Number;

use crate::error::{Result, TranscriptError};
use crate::session_file::{iso_to_ms, SessionFile, VisibleMessage};

/// A user message carrying a summary inside `prefix` / `suffix`.
fn summary_user_message(
    prefix: &str,
    summary: &str,
    suffix: &str,
    timestamp: Option<i64>,
) -> AgentMessage {
    AgentMessage::User(UserMessage {
        content: Content::Text(format!("{prefix}{summary}{suffix}")),
        timestamp: timestamp.map(Number::from),
        ..Default::default()
    })
}

/// The model-visible message of one entry, or `None` for entries outside model context.
/// Compaction entries are handled by the caller (their position matters).
fn context_message(entry: &TranscriptEntry) -> Option<AgentMessage> {
    let ts = || iso_to_ms(&entry.timestamp);
    match &entry.kind {
        EntryKind::Message(m) => Some(match m {
            // Summary roles stored as messages reach the model the same way as summary entries.
            AgentMessage::CompactionSummary(s) => summary_user_message(
                COMPACTION_SUMMARY_PREFIX,
                &s.summary,
                COMPACTION_SUMMARY_SUFFIX,
                m.timestamp_ms(),
            ),
            AgentMessage::BranchSummary(s) => summary_user_message(
                BRANCH_SUMMARY_PREFIX,
                &s.summary,
                BRANCH_SUMMARY_SUFFIX,
                m.timestamp_ms(),
            ),
            other => other.clone(),
        }),
        EntryKind::CustomMessage(c) => {
            let content = serde_json::from_value::<Content>(c.content.clone())
                .unwrap_or_else(|_| Content::Text(c.content.to_string()));
            Some(AgentMessage::Custom(CustomMessage {
                custom_type: c.custom_type.clone(),
                content,
                timestamp: ts().map(Number::from),
                extra: c.extra.clone(),
            }))
        }
        EntryKind::BranchSummary(b) if !b.summary.is_empty() => Some(summary_user_message(
            BRANCH_SUMMARY_PREFIX,
            &b.summary,
            BRANCH_SUMMARY_SUFFIX,
            ts(),
        )),
        EntryKind::BranchSummary(_) | EntryKind::Compaction(_) | EntryKind::Other { .. } => None,
    }
}

fn compaction_message(entry: &TranscriptEntry) -> Option<AgentMessage> {
    match &entry.kind {
        EntryKind::Compaction(c) => Some(summary_user_message(
            COMPACTION_SUMMARY_PREFIX,
            &c.summary,
            COMPACTION_SUMMARY_SUFFIX,
            iso_to_ms(&entry.timestamp),
        )),
        _ => None,
    }
}

impl SessionFile {
    /// The context the model sees for the active branch (§7.4 "Rebuilt context").
    ///
    /// With a compaction on the path: its summary as a user message, then the entries from
    /// `firstKeptEntryId` up to the compaction, then everything after the compaction. If
    /// `firstKeptEntryId` is not on the path before the compaction, only the summary and the
    /// entries after the compaction remain. Without a compaction: every in-context entry.
    pub fn build_context(&self) -> Vec<AgentMessage> {
        let path = self.active_path();
        let latest = path
            .iter()
            .rposition(|e| matches!(e.kind, EntryKind::Compaction(_)));
        let Some(ci) = latest else {
            return path.iter().filter_map(|e| context_message(e)).collect();
        };
        let compaction = path[ci];
        let mut out: Vec<AgentMessage> = compaction_message(compaction).into_iter().collect();
        if let EntryKind::Compaction(c) = &compaction.kind {
            if let Some(kept) = path[..ci]
                .iter()
                .position(|e| e.id == c.first_kept_entry_id)
            {
                out.extend(path[kept..ci].iter().filter_map(|e| context_message(e)));
            }
        }
        out.extend(path[ci + 1..].iter().filter_map(|e| context_message(e)));
        out
    }

    /// The model-visible messages of the active branch after the cursor entry `after`
    /// (`None` = from the start), each with its entry id: the "read visible transcript delta"
    /// helper of §1.7. Compaction entries appear as their summary message. Fails with
    /// [`TranscriptError::CursorNotOnActiveBranch`] if the cursor was rewritten or abandoned,
    /// so the caller knows its cursor is stale.
    pub fn visible_messages_after(&self, after: Option<&str>) -> Result<Vec<VisibleMessage>> {
        let path = self.active_path();
        let start = match after {
            None => 0,
            Some(id) => path
                .iter()
                .position(|e| e.id == id)
                .map(|i| i + 1)
                .ok_or_else(|| TranscriptError::CursorNotOnActiveBranch {
                    id: id.to_owned(),
                    path: self.path.clone(),
                })?,
        };
        Ok(path[start..]
            .iter()
            .filter_map(|e| {
                let message = compaction_message(e).or_else(|| context_message(e))?;
                Some(VisibleMessage {
                    entry_id: e.id.clone(),
                    message,
                })
            })
            .collect())
    }
}
