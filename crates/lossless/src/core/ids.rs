//! Public ids of stored records: `msg_<n>` for messages, `sum_<n>` for summaries.
//!
//! Row ids are what the store uses; the prefixes make ids in the model's tool calls
//! unambiguous and let `describe`/`expand` reject garbage before touching SQL.

use crate::error::{LosslessError, Result};

/// A parsed record id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordId {
    /// A message row.
    Message(i64),
    /// A summary row.
    Summary(i64),
}

/// `sum_<n>`.
pub fn summary_id(id: i64) -> String {
    format!("sum_{id}")
}

/// `msg_<n>`.
pub fn message_id(id: i64) -> String {
    format!("msg_{id}")
}

/// Parses `msg_<n>` / `sum_<n>`.
pub fn parse(s: &str) -> Result<RecordId> {
    let s = s.trim();
    let bad =
        || LosslessError::InvalidInput(format!("expected an id like sum_12 or msg_34, got {s:?}"));
    if let Some(n) = s.strip_prefix("sum_") {
        return n.parse().map(RecordId::Summary).map_err(|_| bad());
    }
    if let Some(n) = s.strip_prefix("msg_") {
        return n.parse().map(RecordId::Message).map_err(|_| bad());
    }
    Err(bad())
}

impl std::fmt::Display for RecordId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordId::Message(n) => write!(f, "msg_{n}"),
            RecordId::Summary(n) => write!(f, "sum_{n}"),
        }
    }
}
