//! Where compaction cuts (contract §7.4 "Preparation").
//!
//! Walking back from the newest entry, recent messages are kept until at least
//! `keepRecentTokens` are covered; the cut then moves to the nearest *valid cut point* at or
//! after that entry. A tool result is never a valid cut point: cutting there would separate
//! it from its call. When the cut lands inside a turn (not on a user message) the turn is
//! *split*: the part of the turn before the cut is summarized on its own so the kept suffix
//! still makes sense.

use clawctx_protocol::transcript::{CompactionEntryData, EntryKind, TranscriptEntry};
use clawctx_protocol::AgentMessage;
use clawctx_tokens::message_tokens;

/// Whether an entry is a valid place for the kept part to start.
pub fn is_valid_cut_point(entry: &TranscriptEntry) -> bool {
    match &entry.kind {
        EntryKind::Message(m) => matches!(
            m,
            AgentMessage::User(_)
                | AgentMessage::Assistant(_)
                | AgentMessage::Custom(_)
                | AgentMessage::BashExecution(_)
                | AgentMessage::BranchSummary(_)
                | AgentMessage::CompactionSummary(_)
        ),
        EntryKind::BranchSummary(_) | EntryKind::CustomMessage(_) => true,
        EntryKind::Compaction(_) | EntryKind::Other { .. } => false,
    }
}

/// Whether an entry starts a turn (user message, bash execution, custom message, branch summary).
fn starts_turn(entry: &TranscriptEntry) -> bool {
    match &entry.kind {
        EntryKind::Message(m) => {
            matches!(m, AgentMessage::User(_) | AgentMessage::BashExecution(_))
        }
        EntryKind::BranchSummary(_) | EntryKind::CustomMessage(_) => true,
        _ => false,
    }
}

/// A chosen cut.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CutPoint {
    /// Index (in the path) of the first entry kept raw.
    pub first_kept_index: usize,
    /// For a split turn, the index where that turn starts.
    pub turn_start_index: Option<usize>,
}

impl CutPoint {
    /// Whether the cut splits a turn.
    pub fn is_split_turn(&self) -> bool {
        self.turn_start_index.is_some()
    }
}

fn entry_tokens(e: &TranscriptEntry) -> u64 {
    e.context_message().map(|m| message_tokens(&m)).unwrap_or(0)
}

/// Finds the cut in `path[start..end]` keeping at least `keep_recent_tokens` raw. `None` when
/// the window has no valid cut point.
pub fn find_cut_point(
    path: &[TranscriptEntry],
    start: usize,
    end: usize,
    keep_recent_tokens: u64,
) -> Option<CutPoint> {
    let end = end.min(path.len());
    if start >= end {
        return None;
    }
    let first_valid = (start..end).find(|&i| is_valid_cut_point(&path[i]))?;
    // Walk back until the kept tokens reach the target.
    let mut acc = 0u64;
    let mut candidate = None;
    for i in (start..end).rev() {
        acc += entry_tokens(&path[i]);
        if acc >= keep_recent_tokens {
            candidate = Some(i);
            break;
        }
    }
    let mut cut = match candidate {
        // Nearest valid cut point at or after the candidate; none after it means we can only
        // keep less than asked, from the last valid point.
        Some(c) => (c..end)
            .find(|&i| is_valid_cut_point(&path[i]))
            .or_else(|| (start..c).rev().find(|&i| is_valid_cut_point(&path[i])))?,
        None => first_valid,
    };
    // Extend backwards over non-message entries (settings, model changes), stopping at a
    // message or a compaction entry.
    while cut > start {
        let prev = &path[cut - 1];
        if matches!(prev.kind, EntryKind::Other { .. }) {
            cut -= 1;
        } else {
            break;
        }
    }
    let cut_entry_index = (cut..end)
        .find(|&i| !matches!(path[i].kind, EntryKind::Other { .. }))
        .unwrap_or(cut);
    let turn_start_index = if starts_turn(&path[cut_entry_index]) {
        None
    } else {
        (start..cut_entry_index)
            .rev()
            .find(|&i| starts_turn(&path[i]))
    };
    Some(CutPoint {
        first_kept_index: cut,
        turn_start_index,
    })
}

/// Everything compaction needs from a path.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactionPreparation {
    /// Messages summarized into the history summary.
    pub messages_to_summarize: Vec<AgentMessage>,
    /// The early part of a split turn, summarized separately.
    pub turn_prefix_messages: Vec<AgentMessage>,
    /// Id of the first entry kept raw.
    pub first_kept_entry_id: String,
    /// The previous compaction's summary (update mode).
    pub previous_summary: Option<String>,
    /// The previous compaction's `details` (unless it came from a hook).
    pub previous_details: Option<serde_json::Value>,
    /// Context tokens before compaction.
    pub tokens_before: u64,
    /// Context tokens of what is kept (summary excluded).
    pub kept_tokens: u64,
}

impl CompactionPreparation {
    /// Whether the cut splits a turn.
    pub fn is_split_turn(&self) -> bool {
        !self.turn_prefix_messages.is_empty()
    }
}

/// `tokensBefore`: the last successful assistant usage (`totalTokens`, else the sum of its
/// parts), else the estimate of the current context.
fn tokens_before(path: &[TranscriptEntry]) -> u64 {
    for e in path.iter().rev() {
        if let EntryKind::Message(AgentMessage::Assistant(a)) = &e.kind {
            if matches!(a.stop_reason.as_deref(), Some("aborted") | Some("error")) {
                continue;
            }
            if let Some(u) = &a.usage {
                let t = if u.total_tokens > 0 {
                    u.total_tokens
                } else {
                    u.input + u.output + u.cache_read + u.cache_write
                };
                if t > 0 {
                    return t;
                }
            }
        }
    }
    clawctx_protocol::transcript::context_messages(path)
        .iter()
        .map(message_tokens)
        .sum()
}

/// Prepares a compaction of `path` (root → leaf). `None` when there is nothing to do: the last
/// entry already is a compaction, or nothing lies before the cut.
///
/// The window starts at the previous compaction's first kept entry (not after the compaction
/// entry): the entries it kept raw are part of the context and are summarized now rather than
/// silently dropped.
pub fn prepare_compaction(
    path: &[TranscriptEntry],
    keep_recent_tokens: u64,
) -> Option<CompactionPreparation> {
    let last = path.last()?;
    if matches!(last.kind, EntryKind::Compaction(_)) {
        return None;
    }
    let prev = path
        .iter()
        .rposition(|e| matches!(e.kind, EntryKind::Compaction(_)));
    let (window_start, previous_summary, previous_details) = match prev {
        Some(pi) => {
            let EntryKind::Compaction(CompactionEntryData {
                summary,
                first_kept_entry_id,
                details,
                from_hook,
                ..
            }) = &path[pi].kind
            else {
                return None;
            };
            let kept_from = path[..pi]
                .iter()
                .position(|e| &e.id == first_kept_entry_id)
                .unwrap_or(pi + 1);
            let details = if *from_hook == Some(true) {
                None
            } else {
                details.clone()
            };
            (kept_from, Some(summary.clone()), details)
        }
        None => (0, None, None),
    };
    let cut = find_cut_point(path, window_start, path.len(), keep_recent_tokens)?;
    let summarize_end = cut.turn_start_index.unwrap_or(cut.first_kept_index);
    let collect = |range: std::ops::Range<usize>| -> Vec<AgentMessage> {
        path[range]
            .iter()
            .filter(|e| !matches!(e.kind, EntryKind::Compaction(_)))
            .filter_map(TranscriptEntry::context_message)
            .collect()
    };
    let messages_to_summarize = collect(window_start..summarize_end);
    let turn_prefix_messages = match cut.turn_start_index {
        Some(ts) => collect(ts..cut.first_kept_index),
        None => Vec::new(),
    };
    if messages_to_summarize.is_empty() && turn_prefix_messages.is_empty() {
        return None;
    }
    let kept_tokens = path[cut.first_kept_index..]
        .iter()
        .filter(|e| !matches!(e.kind, EntryKind::Compaction(_)))
        .map(entry_tokens)
        .sum();
    Some(CompactionPreparation {
        messages_to_summarize,
        turn_prefix_messages,
        first_kept_entry_id: path[cut.first_kept_index].id.clone(),
        previous_summary,
        previous_details,
        tokens_before: tokens_before(path),
        kept_tokens,
    })
}
