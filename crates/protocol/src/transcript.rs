//! Transcript JSONL entry shapes (contract §10): the header line and the `id`/`parentId`
//! entries of an OpenClaw (Pi SessionManager) session file.
//!
//! These are wire types shared by the transcript store (which reads and writes files) and the
//! built-in compaction (which chooses cut points over entries). Entry types this crate does
//! not know are kept verbatim.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{AgentMessage, JsonMap};

/// Line 1 of a session file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SessionHeader {
    /// Always `session`.
    #[serde(rename = "type")]
    pub kind: String,
    /// File format version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<Value>,
    /// Session id.
    pub id: String,
    /// ISO timestamp.
    pub timestamp: String,
    /// Working directory.
    #[serde(default)]
    pub cwd: String,
    /// Parent session (forks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<String>,
    /// Fields this type does not name.
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// A `compaction` entry's payload.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CompactionEntryData {
    /// The summary text.
    pub summary: String,
    /// First entry kept after the summary.
    pub first_kept_entry_id: String,
    /// Tokens before compaction.
    #[serde(default)]
    pub tokens_before: u64,
    /// `{readFiles, modifiedFiles}` and the like.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// Set when a hook produced the summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_hook: Option<bool>,
    /// Fields this type does not name (`customInstructions`, `usage`, ...).
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// A `branch_summary` entry's payload.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct BranchSummaryEntryData {
    /// Entry the branch left from.
    pub from_id: String,
    /// Summary text.
    pub summary: String,
    /// Fields this type does not name.
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// A `custom_message` entry's payload (in model context).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CustomMessageEntryData {
    /// Extension tag.
    pub custom_type: String,
    /// Content shown to the model.
    pub content: Value,
    /// Fields this type does not name (`display`, `details`).
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// The typed part of an entry.
#[derive(Clone, Debug, PartialEq)]
pub enum EntryKind {
    /// `message`.
    Message(AgentMessage),
    /// `compaction`.
    Compaction(CompactionEntryData),
    /// `branch_summary`.
    BranchSummary(BranchSummaryEntryData),
    /// `custom_message`.
    CustomMessage(CustomMessageEntryData),
    /// Any other entry type (`custom`, `model_change`, `label`, ...), its payload verbatim
    /// (without `type`, `id`, `parentId`, `timestamp`).
    Other {
        /// The entry `type`.
        kind: String,
        /// Its other fields.
        fields: JsonMap,
    },
}

/// One transcript entry.
#[derive(Clone, Debug, PartialEq)]
pub struct TranscriptEntry {
    /// Short id.
    pub id: String,
    /// Parent entry (`null` for the root).
    pub parent_id: Option<String>,
    /// ISO timestamp.
    pub timestamp: String,
    /// The payload.
    pub kind: EntryKind,
}

impl TranscriptEntry {
    /// The entry `type` string.
    pub fn type_name(&self) -> &str {
        match &self.kind {
            EntryKind::Message(_) => "message",
            EntryKind::Compaction(_) => "compaction",
            EntryKind::BranchSummary(_) => "branch_summary",
            EntryKind::CustomMessage(_) => "custom_message",
            EntryKind::Other { kind, .. } => kind,
        }
    }

    /// The message, for `message` entries.
    pub fn message(&self) -> Option<&AgentMessage> {
        match &self.kind {
            EntryKind::Message(m) => Some(m),
            _ => None,
        }
    }

    /// Serializes to one JSON object (one JSONL line without the newline).
    pub fn to_json(&self) -> Result<JsonMap, serde_json::Error> {
        let mut out = JsonMap::new();
        out.insert("type".into(), Value::String(self.type_name().to_owned()));
        out.insert("id".into(), Value::String(self.id.clone()));
        out.insert(
            "parentId".into(),
            self.parent_id
                .clone()
                .map(Value::String)
                .unwrap_or(Value::Null),
        );
        out.insert("timestamp".into(), Value::String(self.timestamp.clone()));
        let payload = match &self.kind {
            EntryKind::Message(m) => {
                let mut p = JsonMap::new();
                p.insert("message".into(), serde_json::to_value(m)?);
                p
            }
            EntryKind::Compaction(c) => as_map(serde_json::to_value(c)?),
            EntryKind::BranchSummary(b) => as_map(serde_json::to_value(b)?),
            EntryKind::CustomMessage(c) => as_map(serde_json::to_value(c)?),
            EntryKind::Other { fields, .. } => fields.clone(),
        };
        for (k, v) in payload {
            out.insert(k, v);
        }
        Ok(out)
    }

    /// Parses one JSON object. The error names the key that was wrong.
    pub fn from_json(mut map: JsonMap) -> Result<Self, String> {
        let kind = take_string(&mut map, "type")?;
        let id = take_string(&mut map, "id")?;
        let parent_id = match map.remove("parentId") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(other) => return Err(format!("`parentId` must be a string or null, got {other}")),
        };
        let timestamp = match map.remove("timestamp") {
            Some(Value::String(s)) => s,
            Some(other) => other.to_string(),
            None => String::new(),
        };
        let typed = |map: JsonMap| Value::Object(map);
        let kind = match kind.as_str() {
            "message" => {
                let msg = match map.remove("message") {
                    Some(Value::Object(m)) => AgentMessage::from_map(m)?,
                    Some(_) => return Err("`message` must be an object".into()),
                    None => return Err("message entry has no `message`".into()),
                };
                EntryKind::Message(msg)
            }
            "compaction" => EntryKind::Compaction(
                serde_json::from_value(typed(map))
                    .map_err(|e| format!("invalid compaction entry: {e}"))?,
            ),
            "branch_summary" => EntryKind::BranchSummary(
                serde_json::from_value(typed(map))
                    .map_err(|e| format!("invalid branch_summary entry: {e}"))?,
            ),
            "custom_message" => EntryKind::CustomMessage(
                serde_json::from_value(typed(map))
                    .map_err(|e| format!("invalid custom_message entry: {e}"))?,
            ),
            _ => EntryKind::Other { kind, fields: map },
        };
        Ok(TranscriptEntry {
            id,
            parent_id,
            timestamp,
            kind,
        })
    }
}

fn as_map(v: Value) -> JsonMap {
    match v {
        Value::Object(m) => m,
        _ => JsonMap::new(),
    }
}

fn take_string(map: &mut JsonMap, key: &str) -> Result<String, String> {
    match map.remove(key) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(format!("`{key}` must be a string, got {other}")),
        None => Err(format!("entry has no `{key}`")),
    }
}

impl TranscriptEntry {
    /// The message this entry contributes to the model context, if any: `message` entries
    /// as-is, `custom_message` as a `custom` message, `branch_summary` as a `branchSummary`
    /// message, `compaction` as a `compactionSummary` message. Other entry types (settings,
    /// labels, custom data) are not in model context.
    pub fn context_message(&self) -> Option<AgentMessage> {
        use crate::message::{CustomMessage, SummaryMessage};
        match &self.kind {
            EntryKind::Message(m) => Some(m.clone()),
            EntryKind::CustomMessage(c) => {
                let content = serde_json::from_value(c.content.clone()).unwrap_or_default();
                Some(AgentMessage::Custom(CustomMessage {
                    custom_type: c.custom_type.clone(),
                    content,
                    timestamp: None,
                    extra: JsonMap::new(),
                }))
            }
            EntryKind::BranchSummary(b) => Some(AgentMessage::BranchSummary(SummaryMessage {
                summary: b.summary.clone(),
                timestamp: None,
                extra: JsonMap::new(),
            })),
            EntryKind::Compaction(c) => Some(AgentMessage::CompactionSummary(SummaryMessage {
                summary: c.summary.clone(),
                timestamp: None,
                extra: JsonMap::new(),
            })),
            EntryKind::Other { .. } => None,
        }
    }
}

/// The model-visible message for a summary-carrying message: compaction and branch summaries
/// become **user** messages wrapped in the fixed prefix/suffix (contract §7.4); every other
/// message is returned unchanged.
pub fn to_model_message(message: &AgentMessage) -> AgentMessage {
    use crate::message::*;
    match message {
        AgentMessage::CompactionSummary(s) => AgentMessage::user(format!(
            "{COMPACTION_SUMMARY_PREFIX}{}{COMPACTION_SUMMARY_SUFFIX}",
            s.summary
        )),
        AgentMessage::BranchSummary(s) => AgentMessage::user(format!(
            "{BRANCH_SUMMARY_PREFIX}{}{BRANCH_SUMMARY_SUFFIX}",
            s.summary
        )),
        other => other.clone(),
    }
}

/// The compaction-aware context of an active path (root → leaf): when a compaction entry is
/// on the path, its summary (as a `compactionSummary` message) followed by the entries from its
/// `firstKeptEntryId` on (skipping the compaction entry itself and earlier compactions);
/// otherwise every context message. Use [`to_model_message`] for what the model sees.
pub fn context_messages(path: &[TranscriptEntry]) -> Vec<AgentMessage> {
    let last_compaction = path
        .iter()
        .rposition(|e| matches!(e.kind, EntryKind::Compaction(_)));
    let Some(ci) = last_compaction else {
        return path
            .iter()
            .filter_map(TranscriptEntry::context_message)
            .collect();
    };
    let EntryKind::Compaction(c) = &path[ci].kind else {
        return Vec::new();
    };
    let mut out = Vec::new();
    out.extend(path[ci].context_message());
    let start = path
        .iter()
        .position(|e| e.id == c.first_kept_entry_id)
        .unwrap_or(ci + 1);
    for (i, e) in path.iter().enumerate().skip(start) {
        if i == ci || matches!(e.kind, EntryKind::Compaction(_)) {
            continue;
        }
        out.extend(e.context_message());
    }
    out
}

/// A read of the transcript's visible messages after a cursor: OpenClaw's
/// `readSessionTranscriptVisibleMessageDelta` (`openclaw/plugin-sdk/session-transcript-runtime`,
/// contract §1.7), which plugins use to read history the host never handed them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptDeltaRequest {
    /// The session to read (must be the session of the call that asks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Its session key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// Its agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The opaque cursor of the previous page; absent: from the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// At most this many messages (1 to 10,000; default 1,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_messages: Option<f64>,
    /// At most this many bytes of serialized messages (1 to 64 MiB; default 1,000,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<f64>,
    /// `"reset-window"`: from the latest reset of the session (a clawctx session file has
    /// none inside it: `/new` starts a new session), which is its start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
}

/// One visible message of a [`TranscriptDelta::Page`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptDeltaEntry {
    /// The transcript entry id.
    pub entry_id: String,
    /// The entry before it on the active branch.
    pub parent_id: Option<String>,
    /// Its position in the file (ordered, not a cursor).
    pub seq: u64,
    /// The message.
    pub message: AgentMessage,
    /// The message's role.
    pub role: String,
    /// The entry's timestamp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
}

/// The answer to a [`TranscriptDeltaRequest`], in OpenClaw's shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum TranscriptDelta {
    /// The messages after the cursor (at most the limits), and the cursor to read on from.
    #[serde(rename_all = "camelCase")]
    Page {
        /// Read on from here.
        cursor: String,
        /// The messages, oldest first.
        entries: Vec<TranscriptDeltaEntry>,
        /// More messages wait after this page.
        has_more: bool,
        /// Bytes of the page's serialized messages.
        serialized_bytes: u64,
    },
    /// The cursor does not fit the transcript (rewritten, replaced, another session, not a
    /// cursor): read again from its start with `cursor`.
    #[serde(rename_all = "camelCase")]
    Reset {
        /// The cursor of the transcript's start.
        cursor: String,
        /// `invalid_cursor`, `scope_mismatch`, `generation_mismatch`, `anchor_missing` or
        /// `anchor_moved`.
        reason: String,
    },
    /// The session has no transcript.
    Missing,
}
