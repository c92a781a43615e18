//! The cursor-based read of a transcript's visible messages that OpenClaw offers plugins as
//! `readSessionTranscriptVisibleMessageDelta` (`openclaw/plugin-sdk/session-transcript-runtime`,
//! contract §1.7). Plugins written for OpenClaw 2026.8+ read history the host never handed
//! them through it (OpenClaw keeps transcripts in SQLite, so `sessionFile` is no path); the
//! Node runner offers the module, and the host answers from this file.
//!
//! Same semantics as OpenClaw's: the `message` entries of the active branch, in order, after
//! an opaque cursor, bounded by `maxMessages` and `maxBytes`; a cursor that no longer fits
//! (the branch was rewritten under it, the file replaced, another session) is answered with
//! `reset` and the cursor of the start, never with a page that skips or repeats messages. The
//! host may fence the turn in progress (its admitted prompt and what follows are the turn's,
//! handed over by `afterTurn`/`commitTurn`): a page ends before the fence, and a cursor past
//! it is an error, as in OpenClaw.
//!
//! The cursor is hex of a small JSON record (version, agent, session, generation = the file's
//! header timestamp, the last entry read and its position among the visible messages).

use clawctx_protocol::transcript::{
    EntryKind, TranscriptDelta, TranscriptDeltaEntry, TranscriptDeltaRequest,
};
use serde::{Deserialize, Serialize};

use crate::session_file::SessionFile;

const CURSOR_VERSION: u32 = 1;
const DEFAULT_MAX_MESSAGES: u64 = 1_000;
const MAX_MAX_MESSAGES: u64 = 10_000;
const DEFAULT_MAX_BYTES: u64 = 1_000_000;
const MAX_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// Longest cursor accepted (OpenClaw's bound).
const MAX_CURSOR_CHARS: usize = 4096;

/// Why a delta read was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DeltaError {
    /// A limit outside its range (OpenClaw throws a `RangeError` with these words).
    #[error("{name} must be an integer between 1 and {max}")]
    Limit {
        /// `maxMessages` or `maxBytes`.
        name: &'static str,
        /// Its largest value.
        max: u64,
    },
    /// The cursor is at or past the turn in progress (OpenClaw's
    /// `SessionTranscriptReadFenceError`).
    #[error("Transcript read cursor has crossed the current-turn admission fence")]
    FenceCrossed,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Cursor {
    version: u32,
    agent_id: String,
    session_id: String,
    generation: String,
    /// The last message entry read; `None` before the first.
    last_entry_id: Option<String>,
    /// Its position among the visible messages; -1 before the first.
    last_position: i64,
}

impl Cursor {
    fn encode(&self) -> String {
        hex::encode(serde_json::to_vec(self).unwrap_or_default())
    }

    fn decode(text: &str) -> Option<Self> {
        if text.len() > MAX_CURSOR_CHARS {
            return None;
        }
        let c: Cursor = serde_json::from_slice(&hex::decode(text).ok()?).ok()?;
        let consistent = (c.last_entry_id.is_none() && c.last_position == -1)
            || (c.last_entry_id.is_some() && c.last_position >= 0);
        (c.version == CURSOR_VERSION && consistent).then_some(c)
    }
}

fn limit(
    value: Option<f64>,
    default: u64,
    max: u64,
    name: &'static str,
) -> Result<u64, DeltaError> {
    match value {
        None => Ok(default),
        Some(v) if v.fract() == 0.0 && v >= 1.0 && v <= max as f64 => Ok(v as u64),
        Some(_) => Err(DeltaError::Limit { name, max }),
    }
}

impl SessionFile {
    /// One page of the visible messages after `request.cursor` (see the module docs).
    /// `agent_id` is the session's agent; `fence`, the entry id of the turn in progress (its
    /// first entry): the page ends before it.
    pub fn visible_message_delta(
        &self,
        request: &TranscriptDeltaRequest,
        agent_id: &str,
        fence: Option<&str>,
    ) -> Result<TranscriptDelta, DeltaError> {
        let max_messages = limit(
            request.max_messages,
            DEFAULT_MAX_MESSAGES,
            MAX_MAX_MESSAGES,
            "maxMessages",
        )?;
        let max_bytes = limit(
            request.max_bytes,
            DEFAULT_MAX_BYTES,
            MAX_MAX_BYTES,
            "maxBytes",
        )?;
        let start = Cursor {
            version: CURSOR_VERSION,
            agent_id: agent_id.to_owned(),
            session_id: self.header.id.clone(),
            generation: self.header.timestamp.clone(),
            last_entry_id: None,
            last_position: -1,
        };
        let reset = |reason: &str| TranscriptDelta::Reset {
            cursor: start.encode(),
            reason: reason.to_owned(),
        };
        let cursor = match request.cursor.as_deref() {
            None => None,
            Some(text) => match Cursor::decode(text) {
                None => return Ok(reset("invalid_cursor")),
                Some(c) if c.agent_id != start.agent_id || c.session_id != start.session_id => {
                    return Ok(reset("scope_mismatch"))
                }
                Some(c) if c.generation != start.generation => {
                    return Ok(reset("generation_mismatch"))
                }
                Some(c) => Some(c),
            },
        };
        let visible: Vec<_> = self
            .active_path()
            .into_iter()
            .filter(|e| matches!(e.kind, EntryKind::Message(_)))
            .collect();
        let end = fence
            .and_then(|f| visible.iter().position(|e| e.id == f))
            .unwrap_or(visible.len());
        let from = match &cursor {
            None => 0,
            Some(c) => {
                let Some(last) = c.last_entry_id.as_deref() else {
                    return self.page(&visible, 0, end, max_messages, max_bytes, start);
                };
                match visible.iter().position(|e| e.id == last) {
                    None => return Ok(reset("anchor_missing")),
                    Some(p) if p as i64 != c.last_position => return Ok(reset("anchor_moved")),
                    Some(p) if p >= end => return Err(DeltaError::FenceCrossed),
                    Some(p) => p + 1,
                }
            }
        };
        let base = cursor.unwrap_or(start);
        self.page(&visible, from, end, max_messages, max_bytes, base)
    }

    fn page(
        &self,
        visible: &[&clawctx_protocol::transcript::TranscriptEntry],
        from: usize,
        end: usize,
        max_messages: u64,
        max_bytes: u64,
        mut cursor: Cursor,
    ) -> Result<TranscriptDelta, DeltaError> {
        let mut entries = Vec::new();
        let mut bytes = 0u64;
        let mut next = from;
        while next < end && (entries.len() as u64) < max_messages {
            let e = visible[next];
            let EntryKind::Message(message) = &e.kind else {
                next += 1;
                continue;
            };
            let size = serde_json::to_vec(message).map_or(0, |v| v.len() as u64);
            if bytes + size > max_bytes {
                break;
            }
            bytes += size;
            entries.push(TranscriptDeltaEntry {
                entry_id: e.id.clone(),
                parent_id: e.parent_id.clone(),
                seq: self.index.get(&e.id).map_or(0, |i| *i as u64 + 1),
                role: message.role().to_owned(),
                message: message.clone(),
                created_at: (!e.timestamp.is_empty()).then(|| e.timestamp.clone()),
            });
            cursor.last_entry_id = Some(e.id.clone());
            cursor.last_position = next as i64;
            next += 1;
        }
        Ok(TranscriptDelta::Page {
            cursor: cursor.encode(),
            entries,
            has_more: next < end,
            serialized_bytes: bytes,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use clawctx_protocol::AgentMessage;

    fn request(cursor: Option<String>, max: u64) -> TranscriptDeltaRequest {
        TranscriptDeltaRequest {
            cursor,
            max_messages: Some(max as f64),
            ..Default::default()
        }
    }

    fn page(d: TranscriptDelta) -> (String, Vec<String>, bool) {
        match d {
            TranscriptDelta::Page {
                cursor,
                entries,
                has_more,
                ..
            } => (
                cursor,
                entries.iter().map(|e| e.message.plain_text()).collect(),
                has_more,
            ),
            other => panic!("not a page: {other:?}"),
        }
    }

    #[test]
    fn pages_follow_the_cursor_and_never_repeat_a_message() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = SessionFile::create(dir.path().join("s.jsonl"), "s1", "/").unwrap();
        for t in ["a", "b", "c"] {
            f.append_message(AgentMessage::user(t)).unwrap();
        }
        let (c1, got, more) = page(
            f.visible_message_delta(&request(None, 2), "main", None)
                .unwrap(),
        );
        assert_eq!((got, more), (vec!["a".to_owned(), "b".to_owned()], true));
        let (c2, got, more) = page(
            f.visible_message_delta(&request(Some(c1), 2), "main", None)
                .unwrap(),
        );
        assert_eq!((got, more), (vec!["c".to_owned()], false));
        f.append_message(AgentMessage::user("d")).unwrap();
        let (_, got, _) = page(
            f.visible_message_delta(&request(Some(c2), 2), "main", None)
                .unwrap(),
        );
        assert_eq!(got, vec!["d".to_owned()]);
    }

    #[test]
    fn the_turn_in_progress_is_fenced_off() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = SessionFile::create(dir.path().join("s.jsonl"), "s1", "/").unwrap();
        f.append_message(AgentMessage::user("before")).unwrap();
        let fence = f.append_message(AgentMessage::user("the turn")).unwrap();
        let (c, got, more) = page(
            f.visible_message_delta(&request(None, 10), "main", Some(&fence))
                .unwrap(),
        );
        assert_eq!((got, more), (vec!["before".to_owned()], false));
        // Without the fence the cursor reads on to the turn; with it, a cursor past it throws.
        let (past, _, _) = page(
            f.visible_message_delta(&request(Some(c), 10), "main", None)
                .unwrap(),
        );
        assert_eq!(
            f.visible_message_delta(&request(Some(past), 10), "main", Some(&fence)),
            Err(DeltaError::FenceCrossed)
        );
    }

    #[test]
    fn a_cursor_that_does_not_fit_is_a_reset_to_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = SessionFile::create(dir.path().join("s.jsonl"), "s1", "/").unwrap();
        let first = f.append_message(AgentMessage::user("a")).unwrap();
        f.append_message(AgentMessage::user("b")).unwrap();
        let (c, _, _) = page(
            f.visible_message_delta(&request(None, 10), "main", None)
                .unwrap(),
        );
        let reason = |d: TranscriptDelta| match d {
            TranscriptDelta::Reset { reason, .. } => reason,
            other => panic!("not a reset: {other:?}"),
        };
        // The branch is rewritten under the cursor ("b" abandoned).
        f.branch_from(&first).unwrap();
        f.append_message(AgentMessage::user("b2")).unwrap();
        let d = f.visible_message_delta(&request(Some(c.clone()), 10), "main", None);
        assert_eq!(reason(d.unwrap()), "anchor_missing");
        let d = f.visible_message_delta(&request(Some("zz".into()), 10), "main", None);
        assert_eq!(reason(d.unwrap()), "invalid_cursor");
        let d = f.visible_message_delta(&request(Some(c), 10), "other-agent", None);
        assert_eq!(reason(d.unwrap()), "scope_mismatch");
        assert_eq!(
            f.visible_message_delta(&request(None, 0), "main", None),
            Err(DeltaError::Limit {
                name: "maxMessages",
                max: 10_000
            })
        );
    }
}
