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
use rusqlite::{params, Connection};
use serde::Serialize;

use crate::error::Result;
use crate::store::codec;
use crate::store::Db;

/// Text slots shorter than this are kept as they are in a rewritten message.
const KEEP_SLOT_BYTES: usize = 512;

/// What [`Db::expire_payloads`] did (or would do).
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
    for slot in crate::assemble::text_slots(m) {
        if slot.len() >= KEEP_SLOT_BYTES {
            *slot = text.to_owned();
        }
    }
}

struct Referrer {
    id: i64,
    conv_id: i64,
    role: i64,
    skeleton: Option<String>,
    ts: Option<i64>,
    tokens: i64,
    raw_in_frontier: bool,
}

fn referrers(c: &Connection, payload: i64) -> Result<Vec<Referrer>> {
    let mut st = c.prepare_cached(
        "SELECT m.id, m.conv_id, m.role, m.skeleton, m.ts, m.tokens,
                EXISTS(SELECT 1 FROM frontier f WHERE f.conv_id = m.conv_id AND f.kind = 0 AND f.item_id = m.id)
         FROM message_rows m WHERE m.payload = ?1",
    )?;
    let rows = st.query_map([payload], |r| {
        Ok(Referrer {
            id: r.get(0)?,
            conv_id: r.get(1)?,
            role: r.get(2)?,
            skeleton: r.get(3)?,
            ts: r.get(4)?,
            tokens: r.get(5)?,
            raw_in_frontier: r.get(6)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

impl Db {
    /// Expires payloads created before `cutoff_ms` (epoch ms) whose messages are all
    /// summarized; `apply = false` only counts. One transaction.
    pub fn expire_payloads(&mut self, cutoff_ms: i64, apply: bool) -> Result<RetentionReport> {
        if apply {
            self.decoded.get_mut().clear();
            // The index keeps the original words only for messages already in the file's
            // index: any other connection indexes the rest from their stored text, which this
            // rewrites.
            self.index_all_in_file();
        }
        self.tx(|c| {
            let mut report = RetentionReport {
                dry_run: !apply,
                ..Default::default()
            };
            let due: Vec<(i64, Vec<u8>, i64, String)> = c
                .prepare("SELECT id, hash, bytes, unpack(text) FROM payloads WHERE created_at < ?1 ORDER BY id")?
                .query_map([cutoff_ms], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect::<rusqlite::Result<_>>()?;
            report.candidates = due.len();
            for (pid, hash, bytes, text) in due {
                let refs = referrers(c, pid)?;
                if refs.iter().any(|r| r.raw_in_frontier) {
                    report.payloads_in_context += 1;
                    continue;
                }
                report.payloads_expired += 1;
                report.messages_rewritten += refs.len();
                report.bytes_freed += bytes.max(0) as u64;
                if !apply {
                    continue;
                }
                let stub = placeholder(bytes, &hash);
                for r in refs {
                    let mut m = codec::decode(r.role, &text, r.skeleton.as_deref(), r.ts)?;
                    replace_large_slots(&mut m, &stub);
                    let e = codec::encode(&m)?;
                    // The identity hash stays: the host re-sending the original is still a
                    // duplicate.
                    c.prepare_cached(
                        "UPDATE messages SET text = ?2, skeleton = ?3, skel = NULL, tokens = ?4, payload = NULL WHERE id = ?1",
                    )?
                    .execute(params![r.id, e.text, e.stored_skeleton, e.tokens as i64])?;
                    c.prepare_cached("UPDATE conversations SET msg_tokens = msg_tokens - ?2 WHERE id = ?1")?
                        .execute(params![r.conv_id, r.tokens - e.tokens as i64])?;
                }
                c.prepare_cached("DELETE FROM payloads WHERE id = ?1")?.execute([pid])?;
            }
            Ok(report)
        })
    }
}
