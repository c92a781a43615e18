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

use crate::core::codec::{self, Encoded};

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

/// A message that holds a due payload, as a store reads it.
pub(crate) struct Referrer {
    pub id: i64,
    pub conv_id: i64,
    pub role: i64,
    pub skeleton: Option<String>,
    pub ts: Option<i64>,
    pub tokens: i64,
    /// Whether it is still raw in its conversation's frontier (what the model sees).
    pub raw_in_frontier: bool,
}

/// Counts one due payload (`freed`: the bytes its removal frees) and says whether it expires:
/// not while any of its messages is still raw in a context. The same rule on every store.
pub(crate) fn expires(report: &mut RetentionReport, refs: &[Referrer], freed: u64) -> bool {
    report.candidates += 1;
    if refs.iter().any(|r| r.raw_in_frontier) {
        report.payloads_in_context += 1;
        return false;
    }
    report.payloads_expired += 1;
    report.messages_rewritten += refs.len();
    report.bytes_freed += freed;
    true
}

/// `r`'s message, whose stored text is `text`, with its large slots replaced by `stub`, encoded
/// again (its identity hash is the store's to keep: a re-sent original is still a duplicate).
pub(crate) fn rewritten(r: &Referrer, text: &str, stub: &str) -> crate::error::Result<Encoded> {
    let mut m = codec::decode(r.role, text, r.skeleton.as_deref(), r.ts)?;
    replace_large_slots(&mut m, stub);
    codec::encode(&m)
}

/// Replaces every large text slot of `m` by `text`.
fn replace_large_slots(m: &mut AgentMessage, text: &str) {
    for slot in crate::core::assemble::text_slots(m) {
        if slot.len() >= KEEP_SLOT_BYTES {
            *slot = text.to_owned();
        }
    }
}
