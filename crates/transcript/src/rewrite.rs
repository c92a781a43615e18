//! `rewriteTranscriptEntries` (contract §9): replace message entries on the active branch
//! without deleting anything.
//!
//! The transcript is append-only, so a rewrite *branches and re-appends*: the leaf moves to the
//! parent of the first replaced entry (or to the root), and every active-branch entry from
//! there on is appended again in order, with the matched messages replaced and every other
//! entry replayed under a new id. References into the replayed suffix are remapped to the new
//! ids (`label.targetId`, `branch_summary.fromId`, and also `compaction.firstKeptEntryId`, so a
//! replayed compaction still keeps what it kept). The old entries stay in the file on an
//! abandoned branch. The whole operation holds the session write lock and writes all new lines
//! in one `write`; it never fails loudly: every failure is `{changed:false, reason}`.

use std::collections::{HashMap, HashSet};

use clawctx_protocol::transcript::{EntryKind, TranscriptEntry};
use clawctx_protocol::{AgentMessage, TranscriptRewriteRequest, TranscriptRewriteResult};
use serde_json::Value;

use crate::error::Result;
use crate::session_file::SessionFile;

/// Reason when no replacement has a non-blank entry id.
pub const REASON_NO_REPLACEMENTS: &str = "no replacements requested";
/// Reason when the active branch is empty.
pub const REASON_EMPTY_SESSION: &str = "empty session";
/// Reason when no replacement names an entry on the active branch.
pub const REASON_NO_MATCH: &str = "no matching message entries";
/// Reason when the first matched entry is not a `message` entry.
pub const REASON_INVALID_FIRST_TARGET: &str = "invalid first rewrite target";
/// Reason prefix when `allowedRewriteSuffixEntryIds` does not cover the suffix.
pub const REASON_SUFFIX_NOT_ALLOWED: &str = "rewrite suffix not allowed";

fn unchanged(reason: impl Into<String>) -> TranscriptRewriteResult {
    TranscriptRewriteResult {
        changed: false,
        bytes_freed: 0,
        rewritten_entries: 0,
        reason: Some(reason.into()),
    }
}

fn serialized_len(message: &AgentMessage) -> Result<u64> {
    Ok(serde_json::to_vec(message)?.len() as u64)
}

fn remap_field(
    fields: &mut serde_json::Map<String, Value>,
    key: &str,
    remap: &HashMap<String, String>,
) {
    if let Some(Value::String(old)) = fields.get(key) {
        if let Some(new) = remap.get(old) {
            fields.insert(key.to_owned(), Value::String(new.clone()));
        }
    }
}

impl SessionFile {
    /// Applies `request` as §9 specifies; never fails loudly. On success `changed` is true,
    /// `rewrittenEntries` is the number of replaced messages and `bytesFreed` the sum over them
    /// of `max(0, original − replacement)` serialized message bytes.
    ///
    /// No-op reasons: [`REASON_NO_REPLACEMENTS`], [`REASON_EMPTY_SESSION`], [`REASON_NO_MATCH`],
    /// [`REASON_INVALID_FIRST_TARGET`], [`REASON_SUFFIX_NOT_ALLOWED`] (`: entry <id> ...`), or
    /// the text of an I/O / lock error.
    pub fn rewrite_transcript_entries(
        &mut self,
        request: &TranscriptRewriteRequest,
    ) -> TranscriptRewriteResult {
        match self.try_rewrite(request) {
            Ok(result) => result,
            Err(e) => unchanged(e.to_string()),
        }
    }

    fn try_rewrite(
        &mut self,
        request: &TranscriptRewriteRequest,
    ) -> Result<TranscriptRewriteResult> {
        // First replacement for an id wins; blank ids are ignored.
        let mut wanted: HashMap<&str, &AgentMessage> = HashMap::new();
        for r in &request.replacements {
            if !r.entry_id.trim().is_empty() {
                wanted.entry(r.entry_id.as_str()).or_insert(&r.message);
            }
        }
        if wanted.is_empty() {
            return Ok(unchanged(REASON_NO_REPLACEMENTS));
        }

        let lock = self.lock_and_sync()?;
        let path: Vec<TranscriptEntry> = self.active_path().into_iter().cloned().collect();
        if path.is_empty() {
            return Ok(unchanged(REASON_EMPTY_SESSION));
        }
        let Some(first) = path.iter().position(|e| wanted.contains_key(e.id.as_str())) else {
            return Ok(unchanged(REASON_NO_MATCH));
        };
        if !matches!(path[first].kind, EntryKind::Message(_)) {
            return Ok(unchanged(REASON_INVALID_FIRST_TARGET));
        }
        if let Some(allowed) = &request.allowed_rewrite_suffix_entry_ids {
            let allowed: HashSet<&str> = allowed.iter().map(String::as_str).collect();
            if let Some(e) = path[first..]
                .iter()
                .find(|e| !allowed.contains(e.id.as_str()))
            {
                return Ok(unchanged(format!(
                    "{REASON_SUFFIX_NOT_ALLOWED}: active-branch entry {:?} after the first replacement is not in allowedRewriteSuffixEntryIds",
                    e.id
                )));
            }
        }

        let mut remap: HashMap<String, String> = HashMap::new();
        let mut reserved: HashSet<String> = HashSet::new();
        let mut parent = path[first].parent_id.clone();
        let mut batch = Vec::with_capacity(path.len() - first);
        let (mut bytes_freed, mut rewritten) = (0u64, 0u64);
        for old in &path[first..] {
            let kind = match &old.kind {
                EntryKind::Message(original) => match wanted.get(old.id.as_str()) {
                    Some(replacement) => {
                        rewritten += 1;
                        bytes_freed +=
                            serialized_len(original)?.saturating_sub(serialized_len(replacement)?);
                        EntryKind::Message((*replacement).clone())
                    }
                    None => old.kind.clone(),
                },
                EntryKind::BranchSummary(b) => {
                    let mut b = b.clone();
                    if let Some(new) = remap.get(&b.from_id) {
                        b.from_id = new.clone();
                    }
                    EntryKind::BranchSummary(b)
                }
                EntryKind::Compaction(c) => {
                    let mut c = c.clone();
                    if let Some(new) = remap.get(&c.first_kept_entry_id) {
                        c.first_kept_entry_id = new.clone();
                    }
                    EntryKind::Compaction(c)
                }
                EntryKind::Other { kind, fields } => {
                    let mut fields = fields.clone();
                    if kind == "label" {
                        remap_field(&mut fields, "targetId", &remap);
                    }
                    EntryKind::Other {
                        kind: kind.clone(),
                        fields,
                    }
                }
                EntryKind::CustomMessage(_) => old.kind.clone(),
            };
            let id = self.fresh_id(&reserved);
            reserved.insert(id.clone());
            remap.insert(old.id.clone(), id.clone());
            batch.push(TranscriptEntry {
                id: id.clone(),
                parent_id: parent.replace(id),
                timestamp: old.timestamp.clone(),
                kind,
            });
        }
        self.write_entries(&lock, batch)?;
        drop(lock);
        tracing::info!(
            "[transcript-rewrite] rewrote {rewritten} {} bytesFreed={bytes_freed} sessionId={}",
            if rewritten == 1 { "entry" } else { "entries" },
            self.session_id()
        );
        Ok(TranscriptRewriteResult {
            changed: true,
            bytes_freed,
            rewritten_entries: rewritten,
            reason: None,
        })
    }
}
