//! One-shot import of an OpenClaw JSONL session transcript into the store.
//!
//! The engine does not track the host's transcript file turn by turn (one source of truth:
//! the engine ingests what the host hands it). Importing a transcript is an explicit operation
//! (`clawctx lcm import`, or `bootstrap` of an empty conversation): the active branch (leaf to
//! root through `parentId`) is read, its `message` entries are ingested idempotently, so
//! importing twice, or importing what was already ingested live, stores nothing new.

use std::collections::HashMap;
use std::path::Path;

use clawctx_protocol::AgentMessage;
use serde::Serialize;
use serde_json::Value;

use crate::error::{LosslessError, Result};

/// What an import found and did.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportReport {
    /// Lines parsed.
    pub entries: usize,
    /// Messages on the active branch.
    pub messages: usize,
    /// Messages not yet stored.
    pub new_messages: usize,
    /// Lines that were not valid JSON or not valid messages (skipped).
    pub skipped_lines: usize,
    /// Whether the new messages were written.
    pub applied: bool,
    /// Session id from the header, when present.
    pub session_id: Option<String>,
}

/// Reads the active branch's messages of a session file.
pub fn read_openclaw_jsonl(path: &Path) -> Result<(Vec<AgentMessage>, ImportReport)> {
    let text = std::fs::read_to_string(path)?;
    let mut report = ImportReport::default();
    let mut entries: Vec<Value> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(v) => {
                if v.get("type").and_then(Value::as_str) == Some("session") {
                    report.session_id = v.get("id").and_then(Value::as_str).map(str::to_owned);
                    continue;
                }
                entries.push(v);
            }
            Err(_) => report.skipped_lines += 1,
        }
    }
    report.entries = entries.len();
    let index: HashMap<&str, usize> = entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| e.get("id").and_then(Value::as_str).map(|id| (id, i)))
        .collect();
    // Active branch: from the last entry with an id up through parentId; without ids, file order.
    let order: Vec<usize> = match entries
        .iter()
        .rposition(|e| e.get("id").and_then(Value::as_str).is_some())
    {
        Some(mut i) => {
            let mut path = vec![i];
            let mut guard = 0;
            while let Some(p) = entries[i]
                .get("parentId")
                .and_then(Value::as_str)
                .and_then(|p| index.get(p))
            {
                i = *p;
                path.push(i);
                guard += 1;
                if guard > entries.len() {
                    return Err(LosslessError::InvalidInput(
                        "transcript parentId chain has a cycle".into(),
                    ));
                }
            }
            path.reverse();
            path
        }
        None => (0..entries.len()).collect(),
    };
    let mut msgs = Vec::new();
    for i in order {
        let e = &entries[i];
        let is_msg = e
            .get("type")
            .and_then(Value::as_str)
            .map(|t| t == "message")
            .unwrap_or(false);
        if let (true, Some(Value::Object(m))) = (is_msg, e.get("message")) {
            match AgentMessage::from_map(m.clone()) {
                Ok(m) => msgs.push(m),
                Err(_) => report.skipped_lines += 1,
            }
        }
    }
    report.messages = msgs.len();
    Ok((msgs, report))
}
