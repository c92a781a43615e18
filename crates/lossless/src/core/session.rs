//! Session lifecycle operations beyond ingest: `/new` resets (carry deep summaries over) and
//! subagent forks (the child starts from the parent's summaries).
//!
//! Summaries are shared, not copied: the new frontier points at the same summary rows (the
//! DAG allows a node to appear in several conversations' frontiers), so recall on either side
//! reaches the same sources. Carried items are placed before anything the target already has,
//! using ordinals below its current minimum (gap-tolerant ordinals make that free).

use serde::Serialize;

/// What a reset or fork carried over.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CarryReport {
    /// The source conversation was archived (same-key `/new`).
    pub archived_conversation: Option<i64>,
    /// The target conversation.
    pub conversation_id: i64,
    /// Summaries carried over.
    pub carried_summaries: usize,
    /// Their frontier tokens.
    pub carried_tokens: u64,
}
