//! The live bus: turn events as they happen, for whoever listens (the dashboard's
//! `/v1/dashboard/events`, [`crate::dashboard`]).
//!
//! A turn publishes `turnStarted`, then `assembled` for every `assemble` result (with the
//! split's totals), then `compaction` when the session's stored history was compacted during
//! the turn (the lossless epoch or the transcript's compaction count moved), then `turnDone`
//! (all from [`super::watch`], the turn's watcher). Publishing never blocks a turn: the bus is
//! a bounded `tokio::sync::broadcast` channel and a listener that falls behind gets a `lagged`
//! event telling it to reload. Without listeners the turn path does nothing but record the
//! assembly.

use serde::Serialize;
use serde_json::Value;
use tokio::sync::broadcast;

/// Events kept for a slow listener before it lags.
const CAPACITY: usize = 256;

/// One live event.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveEvent {
    /// The session it is about.
    pub session_key: String,
    /// `turnStarted`, `assembled`, `compaction`, `turnDone`.
    pub kind: &'static str,
    /// When (epoch ms).
    pub at_ms: i64,
    /// Details.
    pub data: Value,
}

/// The bus.
pub struct Live {
    tx: broadcast::Sender<LiveEvent>,
}

impl Default for Live {
    fn default() -> Self {
        Live {
            tx: broadcast::channel(CAPACITY).0,
        }
    }
}

impl Live {
    /// Sends `kind` for `key` to every listener (none: dropped).
    pub fn publish(&self, key: &str, kind: &'static str, data: Value) {
        let _ = self.tx.send(LiveEvent {
            session_key: key.to_owned(),
            kind,
            at_ms: super::now_ms(),
            data,
        });
    }

    /// Whether anyone listens.
    pub fn listened(&self) -> bool {
        self.tx.receiver_count() > 0
    }

    /// A receiver of every event published from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<LiveEvent> {
        self.tx.subscribe()
    }
}
