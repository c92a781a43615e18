//! Which engine holds a session, and how many compactions it has had: one rule, read the same
//! by `clawctx sessions list`, the gateway's `GET /v1/sessions` and the dashboard.
//!
//! Why: each front end used to answer from what it had at hand (the engine its own config
//! selects, a counter of the transcript or of the lossless store), so a session written by
//! `clawctx replay --engine lossless` showed as `legacy` in a gateway whose config selects
//! legacy, and `sessions list` said 0 compactions where the dashboard said 10 (issue #39).
//!
//! The rule: a session the runtime has run a turn of (`run`, `chat`, `replay`, the gateway's
//! chat completions) has an entry in `sessions.json`, on which every turn records the engine
//! that served it (`contextEngine`) and every compaction counts (`compactionCount`: the
//! host's, and those the engine ran on its own, which the runtime attributes to the session):
//! that entry is the answer. A session the runtime never ran (made through the engine API or
//! the OpenClaw bridge), or one recorded before the entry named its engine, is held by
//! `lossless` when the lossless store has an active conversation for its key (its compactions:
//! the store's passes), else by `legacy`, whose context is the transcript.

use clawctx_transcript::SessionEntry;

/// The engine that holds a session: see the module header. `in_lossless_store`: the lossless
/// store has an active conversation for the session's key.
pub fn engine(entry: Option<&SessionEntry>, in_lossless_store: bool) -> String {
    entry
        .and_then(|e| e.context_engine.clone())
        .unwrap_or_else(|| {
            if in_lossless_store {
                clawctx_lossless::ENGINE_ID.to_owned()
            } else {
                "legacy".to_owned()
            }
        })
}

/// A session's compactions: see the module header. `lossless_passes`: the lossless store's
/// compaction passes for its key, when it has a conversation for it.
pub fn compactions(entry: Option<&SessionEntry>, lossless_passes: Option<i64>) -> u64 {
    match entry {
        Some(e) => e.compaction_count.unwrap_or(0),
        None => lossless_passes.unwrap_or(0).max(0) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_answers_and_the_store_only_without_one() {
        let served = SessionEntry {
            context_engine: Some("lossless".into()),
            compaction_count: Some(3),
            ..Default::default()
        };
        assert_eq!(engine(Some(&served), false), "lossless");
        assert_eq!(compactions(Some(&served), Some(9)), 3);
        let old = SessionEntry::default();
        assert_eq!(engine(Some(&old), true), "lossless");
        assert_eq!(engine(Some(&old), false), "legacy");
        assert_eq!(compactions(Some(&old), Some(9)), 0);
        assert_eq!(engine(None, true), "lossless");
        assert_eq!(compactions(None, Some(9)), 9);
        assert_eq!(compactions(None, None), 0);
    }
}
