//! Retention of large payloads: what a deployment may give up, and what it never does.
//!
//! Large tool outputs dominate a store's size, and most are worth keeping only until they have
//! been summarized. With `payloadRetentionDays` set (off by default: the engine is lossless
//! unless told otherwise), payloads older than that are replaced, in every message that points
//! at them, by a short placeholder naming their size and content hash. Only payloads whose
//! messages have all been summarized away are touched, so nothing the model currently sees
//! changes; the message rows, their identity (re-delivery is still recognized), their place in
//! the summary DAG and their full-text index entries stay, so `lcm_grep` still finds the
//! message and `lcm_describe` explains what happened to it.

use clawctx_protocol::AgentMessage;
use serde::Serialize;

/// Text slots shorter than this are kept as they are in a rewritten message.
const KEEP_SLOT_BYTES: usize = 512;

/// What [`crate::Backend::expire_payloads`] did (or would do).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RetentionReport {
    /// Nothing was written.
    pub dry_run: bool,
    /// Payloads past the cutoff.
    pub candidates: usize,
    /// Payloads removed.
    pub payloads_expired: usize,
    /// Payloads kept because a message using them is still raw in a context.
    pub payloads_in_context: usize,
    /// Messages rewritten with the placeholder.
    pub messages_rewritten: usize,
    /// Payload bytes removed.
    pub bytes_freed: u64,
}

/// The placeholder that replaces an expired payload's text.
pub fn placeholder(bytes: i64, hash: &[u8]) -> String {
    format!(
        "[tool output removed by the retention policy after it was summarized: {bytes} bytes, content sha256 {}…]",
        hex::encode(hash)
    )
}

/// Replaces every large text slot of `m` by `text`. Shared by every backend.
pub(crate) fn replace_large_slots(m: &mut AgentMessage, text: &str) {
    for slot in crate::core::assemble::text_slots(m) {
        if slot.len() >= KEEP_SLOT_BYTES {
            *slot = text.to_owned();
        }
    }
}
