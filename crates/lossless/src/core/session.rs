//! Session lifecycle operations beyond ingest: `/new` resets (carry deep summaries over) and
//! subagent forks (the child starts from the parent's summaries).
//!
//! Summaries are shared, not copied: the new frontier points at the same summary rows (the
//! DAG allows a node to appear in several conversations' frontiers), so recall on either side
//! reaches the same sources. Carried items are placed before anything the target already has,
//! using ordinals below its current minimum (gap-tolerant ordinals make that free).

use serde::Serialize;

use crate::core::conv::{ConvKey, ConvRow};
use crate::error::Result;

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

/// What a carry writes, each one statement of a store's dialect, all inside one transaction
/// the store opens and commits around [`carry`].
pub(crate) trait CarryWrites {
    /// The active conversation of `key`.
    async fn conversation(&self, key: &ConvKey) -> Result<Option<ConvRow>>;
    /// The active conversation of `key`, created when absent (and held for this transaction
    /// where the store has row locks).
    async fn open_conversation(&self, key: &ConvKey) -> Result<ConvRow>;
    /// `(summary id, tokens)` of the summaries of depth ≥ `min_depth` in `conv_id`'s frontier,
    /// in frontier order.
    async fn deep_summaries(&self, conv_id: i64, min_depth: i64) -> Result<Vec<(i64, i64)>>;
    /// Makes `conv_id` no longer its key's active conversation.
    async fn archive(&self, conv_id: i64) -> Result<()>;
    /// The smallest ordinal of `conv_id`'s frontier (0 when it is empty).
    async fn min_ord(&self, conv_id: i64) -> Result<i64>;
    /// Puts `(ordinal, summary id, tokens)` into `conv_id`'s frontier and adds them to its
    /// running totals (a new epoch).
    async fn prepend(&self, conv_id: i64, rows: &[(i64, i64, i64)]) -> Result<()>;
}

/// Carries summaries of depth ≥ `min_depth` from `from`'s active frontier to `to` (created
/// when absent). When `from == to` the old conversation is archived first and `to` is a fresh
/// conversation for the same key. A negative `min_depth` carries nothing.
pub(crate) async fn carry(
    w: &impl CarryWrites,
    from: &ConvKey,
    to: &ConvKey,
    min_depth: i64,
) -> Result<CarryReport> {
    let mut report = CarryReport::default();
    let Some(src) = w.conversation(from).await? else {
        report.conversation_id = w.open_conversation(to).await?.id;
        return Ok(report);
    };
    let items = if min_depth >= 0 {
        w.deep_summaries(src.id, min_depth).await?
    } else {
        Vec::new()
    };
    if from == to {
        w.archive(src.id).await?;
        report.archived_conversation = Some(src.id);
    }
    let dst = w.open_conversation(to).await?;
    report.conversation_id = dst.id;
    if items.is_empty() {
        return Ok(report);
    }
    // Before everything the target holds: ordinals below its smallest (and below 0).
    let start = w.min_ord(dst.id).await?.min(0) - items.len() as i64;
    let rows: Vec<(i64, i64, i64)> = items
        .iter()
        .zip(start..)
        .map(|(&(sid, tokens), ord)| (ord, sid, tokens))
        .collect();
    w.prepend(dst.id, &rows).await?;
    report.carried_summaries = items.len();
    report.carried_tokens = items.iter().map(|(_, t)| *t).sum::<i64>() as u64;
    Ok(report)
}
