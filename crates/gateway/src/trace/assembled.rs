//! What `assemble` last returned, per session, and how it splits into parts: the record each
//! turn's trace is built from ([`super::build`]) and the dashboard reads (its session list and
//! session view).
//!
//! Two paths update it, both through [`super::watch`]: the turn path (`openai`: the runtime
//! hands every `assemble` result of a turn to [`clawctx_runtime::TurnRequest::assembled`], the
//! last one wins) and `POST /v1/engine/assemble`. The record is kept in memory only (a restart
//! forgets it; the next turn records again) and holds at most [`MAX_SESSIONS`] sessions, the
//! oldest dropped first.
//!
//! The split reads the engine's answer as the model sees it: a user-role message that opens
//! with `<summary id="sum_N" depth="D"` is a summary (lossless renders summaries so), one that
//! opens with `<recalled` is the lossless prompt-recall block, everything else is a raw
//! message. Tokens are counted with the one estimator (`clawctx_tokens`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use clawctx_lossless::inspect;
use clawctx_protocol::AssembleResult;
use serde::Serialize;

/// Sessions remembered at most.
pub const MAX_SESSIONS: usize = 4096;

/// One recorded answer of `assemble`.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// When (epoch ms).
    pub at_ms: i64,
    /// `turn` or `engine-api`.
    pub source: &'static str,
    /// The session id the call named.
    pub session_id: String,
    /// The budget the engine was given, when one was.
    pub token_budget: Option<u64>,
    /// Stored messages the engine was given.
    pub history_messages: usize,
    /// The answer (its messages dropped once split: see `watch::record`).
    pub result: AssembleResult,
    /// The lossless conversation's epoch when it answered (`None`: not lossless). A later
    /// epoch means the store was compacted since, so what this answer left out of the frontier
    /// can no longer be told from the frontier.
    pub epoch: Option<i64>,
    /// The engine that answered instead of the one in charge (its fallback), when one did.
    pub fallback: Option<clawctx_engine::Fallback>,
    /// The split, computed once: on the first page view that needs it, or at once while a page
    /// listens for live events (see `watch::record`).
    pub split: OnceLock<Breakdown>,
}

impl Recorded {
    /// The answer split into its parts (computed on first use, then kept).
    pub fn breakdown(&self) -> &Breakdown {
        self.split.get_or_init(|| breakdown(&self.result))
    }
}

/// Per-session records.
#[derive(Default)]
pub struct Recorder {
    sessions: Mutex<HashMap<String, Arc<Recorded>>>,
}

impl Recorder {
    /// Keeps `r` as `key`'s last assembly.
    pub fn record(&self, key: &str, r: Arc<Recorded>) {
        let Ok(mut map) = self.sessions.lock() else {
            return;
        };
        if map.len() >= MAX_SESSIONS && !map.contains_key(key) {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, v)| v.at_ms)
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        map.insert(key.to_owned(), r);
    }

    /// `key`'s last assembly.
    pub fn last(&self, key: &str) -> Option<Arc<Recorded>> {
        self.sessions.lock().ok()?.get(key).cloned()
    }

    /// Session keys with a record, and when.
    pub fn keys(&self) -> Vec<(String, i64)> {
        self.sessions
            .lock()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.at_ms)).collect())
            .unwrap_or_default()
    }
}

/// One part of the assembled context.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    /// `systemPromptAddition`, `summary`, `recalled` or `raw`.
    pub kind: &'static str,
    /// Position in the assembled messages (`systemPromptAddition`: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    /// `sum_<n>` for summaries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Summary depth.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depth: Option<i64>,
    /// Message role.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Estimated tokens.
    pub tokens: u64,
    /// The start of its text.
    pub preview: String,
    /// FNV-1a hash of its role and text: how the turn trace refers to a message without
    /// keeping it ([`crate::trace`]).
    #[serde(skip)]
    pub digest: u32,
    /// The stored messages a `<recalled>` block quotes (`msg_<n>` numbers).
    #[serde(skip)]
    pub quotes: Vec<u64>,
}

/// FNV-1a (32 bits) of `role`, a zero byte and `text`: stable across builds and processes,
/// which the stored traces need.
pub fn digest(role: &str, text: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in role.bytes().chain([0u8]).chain(text.bytes()) {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The `msg_<n>` numbers a `<recalled>` block quotes (its `[msg_n role time]` lines).
pub fn recalled_quotes(text: &str) -> Vec<u64> {
    clawctx_lossless::quoted_ids(text)
        .into_iter()
        .filter_map(|n| u64::try_from(n).ok())
        .collect()
}

/// Totals per kind.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    /// Tokens of the system prompt addition.
    pub system_prompt_addition: u64,
    /// Tokens of summaries.
    pub summaries: u64,
    /// Tokens of the recalled block.
    pub recalled: u64,
    /// Tokens of raw messages.
    pub raw: u64,
    /// Number of summaries.
    pub summary_count: usize,
    /// Number of raw messages.
    pub raw_count: usize,
    /// Number of recalled blocks.
    pub recalled_count: usize,
}

/// The split of one answer.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Breakdown {
    /// Parts in the order the model sees them (the addition first).
    pub parts: Vec<Part>,
    /// Totals per kind.
    pub totals: Totals,
    /// Sum of every part.
    pub total_tokens: u64,
    /// The engine's own `estimatedTokens` (0: the caller estimates).
    pub estimated_tokens: u64,
    /// Messages returned.
    pub message_count: usize,
}

/// Splits an answer into its parts.
pub fn breakdown(result: &AssembleResult) -> Breakdown {
    let mut parts = Vec::new();
    let mut totals = Totals::default();
    if let Some(add) = result
        .system_prompt_addition
        .as_deref()
        .filter(|a| !a.trim().is_empty())
    {
        let tokens = clawctx_tokens::text_tokens(add);
        totals.system_prompt_addition = tokens;
        parts.push(Part {
            kind: "systemPromptAddition",
            index: None,
            id: None,
            depth: None,
            role: None,
            tokens,
            preview: inspect::preview(add),
            digest: digest("system", add),
            quotes: Vec::new(),
        });
    }
    for (i, m) in result.messages.iter().enumerate() {
        let tokens = clawctx_tokens::message_tokens(m);
        let text = inspect::message_text(m);
        let role = m.role().to_owned();
        let (kind, id, depth) = if role == "user" {
            if let Some((id, depth)) = clawctx_lossless::parse_summary_header(&text) {
                (("summary"), Some(id), Some(depth))
            } else if text.trim_start().starts_with("<recalled") {
                ("recalled", None, None)
            } else {
                ("raw", None, None)
            }
        } else {
            ("raw", None, None)
        };
        match kind {
            "summary" => {
                totals.summaries += tokens;
                totals.summary_count += 1;
            }
            "recalled" => {
                totals.recalled += tokens;
                totals.recalled_count += 1;
            }
            _ => {
                totals.raw += tokens;
                totals.raw_count += 1;
            }
        }
        let quotes = if kind == "recalled" {
            recalled_quotes(&text)
        } else {
            Vec::new()
        };
        parts.push(Part {
            kind,
            index: Some(i),
            id,
            depth,
            digest: digest(&role, &text),
            role: Some(role),
            tokens,
            preview: inspect::preview(&text),
            quotes,
        });
    }
    let total_tokens = parts.iter().map(|p| p.tokens).sum();
    Breakdown {
        parts,
        totals,
        total_tokens,
        estimated_tokens: result.estimated_tokens,
        message_count: result.messages.len(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use clawctx_protocol::AgentMessage;

    #[test]
    fn summaries_recalled_blocks_and_raw_messages_are_told_apart() {
        let result = AssembleResult {
            messages: vec![
                AgentMessage::user("<summary id=\"sum_7\" depth=\"2\" from=\"a\" to=\"b\">\nolder things\n</summary>"),
                AgentMessage::user("<recalled note=\"x\">\nquoted\n</recalled>"),
                AgentMessage::assistant("plain answer"),
                AgentMessage::user("the prompt"),
            ],
            estimated_tokens: 42,
            system_prompt_addition: Some("use lcm_grep".into()),
            ..Default::default()
        };
        let b = breakdown(&result);
        let kinds: Vec<&str> = b.parts.iter().map(|p| p.kind).collect();
        assert_eq!(
            kinds,
            ["systemPromptAddition", "summary", "recalled", "raw", "raw"]
        );
        assert_eq!(b.parts[1].id.as_deref(), Some("sum_7"));
        assert_eq!(b.parts[1].depth, Some(2));
        assert_eq!(b.totals.summary_count, 1);
        assert_eq!(b.totals.raw_count, 2);
        assert_eq!(
            b.total_tokens,
            b.parts.iter().map(|p| p.tokens).sum::<u64>()
        );
        assert_eq!(
            b.totals.raw,
            clawctx_tokens::message_tokens(&result.messages[2])
                + clawctx_tokens::message_tokens(&result.messages[3])
        );
        assert_eq!(b.estimated_tokens, 42);
        assert_ne!(b.parts[3].digest, b.parts[4].digest);
        assert_eq!(b.parts[3].digest, digest("assistant", "plain answer"));
        assert_eq!(b.message_count, 4);
    }

    #[test]
    fn a_recalled_blocks_quotes_are_read_from_its_quote_lines() {
        let text = "<recalled note=\"x\">\n[msg_12 user 2024-03-01 10:00] hello\n\
                    [msg_345 assistant 2024-03-01 10:01] msg_9 is not a quote\n</recalled>";
        assert_eq!(recalled_quotes(text), vec![12, 345]);
        assert!(recalled_quotes("no quotes").is_empty());
        // Pinned: stored traces compare digests written by earlier builds.
        assert_eq!(digest("", ""), 0x050c_5d1f);
    }

    #[test]
    fn the_recorder_keeps_the_last_answer_per_session() {
        let r = Recorder::default();
        let rec = |n: u64| Recorded {
            at_ms: n as i64,
            source: "turn",
            session_id: "s".into(),
            token_budget: Some(n),
            history_messages: 0,
            result: AssembleResult::default(),
            epoch: None,
            fallback: None,
            split: OnceLock::new(),
        };
        r.record("a", Arc::new(rec(1)));
        r.record("a", Arc::new(rec(2)));
        r.record("b", Arc::new(rec(3)));
        assert_eq!(r.last("a").unwrap().token_budget, Some(2));
        assert_eq!(r.keys().len(), 2);
        assert!(r.last("c").is_none());
    }
}
