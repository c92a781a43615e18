//! What a conversation is to every backend: its key, its row with running totals, and what a
//! write of messages reports.

use serde::Serialize;

/// Which conversation: agent plus session key (the active row of that pair).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ConvKey {
    /// Agent id (`agent:<id>:...` keys give theirs; others use `default`).
    pub agent_id: String,
    /// Stable session key (or the session id when the host gave no key).
    pub session_key: String,
}

impl ConvKey {
    /// Builds the key from what the host passes (`sessionKey`, falling back to `sessionId`).
    pub fn from_host(session_key: Option<&str>, session_id: &str) -> Self {
        let key = session_key
            .filter(|k| !k.trim().is_empty())
            .unwrap_or(session_id)
            .trim()
            .to_owned();
        let agent = clawctx_engine::legacy::agent_id_from_session_key(&key)
            .unwrap_or("default")
            .to_owned();
        Self {
            agent_id: agent,
            session_key: key,
        }
    }
}

/// A conversation row with its running totals.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConvRow {
    /// Row id.
    pub id: i64,
    /// Agent.
    pub agent_id: String,
    /// Session key.
    pub session_key: String,
    /// Whether this is the active row of its key (archived rows come from resets).
    pub active: bool,
    /// Next message sequence number.
    pub next_seq: i64,
    /// Next frontier ordinal.
    pub next_ord: i64,
    /// Messages stored.
    pub msg_count: i64,
    /// Tokens of all messages stored.
    pub msg_tokens: i64,
    /// Text bytes of all messages stored.
    pub raw_bytes: i64,
    /// Tokens of the frontier (what assembly could show).
    pub frontier_tokens: i64,
    /// Items in the frontier.
    pub frontier_items: i64,
    /// Changes on every compaction (context projection epoch).
    pub epoch: i64,
}

/// What one ingest job did.
#[derive(Clone, Debug, Default)]
pub struct IngestOutcome {
    /// Per input message: stored now (false = duplicate).
    pub stored: Vec<bool>,
    /// The conversation after the batch.
    pub conv: Option<ConvRow>,
    /// Bytes of text (and index text) stored by the batch.
    pub bytes: u64,
}

/// What a `commitTurn` write did ([`crate::Backend::commit_turn`]).
#[derive(Clone, Debug)]
pub enum TurnCommit {
    /// The first write of the advancement key: the turn's messages went in (those not already
    /// stored) and the key was recorded, in one transaction.
    Committed(IngestOutcome),
    /// The key was committed before: nothing was written.
    Duplicate,
}

/// Current wall-clock time in epoch ms.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
