//! The newest full-text matches of one term, kept between queries.
//!
//! Ranked search and prompt recall look every query term up on its own, newest rows first, up
//! to a window (see [`crate::core::search`]); prompt recall does that on every assembly, and the
//! terms of one conversation's prompts repeat turn after turn. The message index only ever
//! grows, and a new message always gets a larger id than every message before it, so a
//! term's newest rows change only by new rows arriving on top: a cached list is brought up to
//! date by reading the matches above its newest row (`rowid > ?`, which FTS5 answers from the
//! end of the term's document list) instead of the whole window again.
//!
//! The file's index holds exactly the messages up to `fts_state.upto` (see
//! [`super::pending_fts`]), so while that boundary has not moved since a list was brought up to
//! date, nothing new can be in the file's index for it: only the small in-memory index of the
//! newest messages is read. A turn's lookups then never seek through the file index's segments,
//! which grow with the store.
//!
//! Rows are never deleted from the message index (messages are kept forever; retention
//! rewrites the text of summarized messages but leaves their index rows), so nothing cached
//! becomes wrong. The one way a seen row can vanish is a write transaction rolling back after
//! a lookup inside it; [`Db::tx`] drops the cache then. Bounded by [`MAX_CACHED_TERMS`]
//! lists and [`MAX_CACHED_IDS`] ids, dropped all at once when full.

use crate::core::FxMap;

/// Term lists kept at most (each at most its window of ids).
pub const MAX_CACHED_TERMS: usize = 2_048;
/// Ids kept at most over all lists (8 MiB).
pub const MAX_CACHED_IDS: usize = 1 << 20;

/// See the module header: `(query, window)` (a term's query, scoped to the conversations
/// searched) → its newest matching rows, newest first, and the file index's boundary
/// (`fts_state.upto`) when they were read.
#[derive(Default)]
pub struct TermRowsCache {
    pub(super) lists: FxMap<(String, usize), (Vec<i64>, i64)>,
    ids: usize,
}

impl TermRowsCache {
    /// Forgets every list.
    pub fn clear(&mut self) {
        self.lists.clear();
        self.ids = 0;
    }

    pub(super) fn put(&mut self, key: (String, usize), rows: Vec<i64>, upto: i64) {
        let len = rows.len();
        if let Some((old, _)) = self.lists.remove(&key) {
            self.ids -= old.len();
        }
        if self.lists.len() >= MAX_CACHED_TERMS || self.ids + len > MAX_CACHED_IDS {
            self.clear();
        }
        self.ids += len;
        self.lists.insert(key, (rows, upto));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_stays_within_its_bounds() {
        let mut c = TermRowsCache::default();
        for i in 0..(MAX_CACHED_TERMS * 2) {
            c.put((format!("t{i}"), 4_000), vec![1; 4_000], 0);
            assert!(c.lists.len() <= MAX_CACHED_TERMS);
            assert!(c.ids <= MAX_CACHED_IDS, "{} ids", c.ids);
            assert_eq!(c.ids, c.lists.values().map(|(l, _)| l.len()).sum::<usize>());
        }
        // Replacing a list counts only the new one.
        c.clear();
        c.put(("a".into(), 10), vec![3, 2, 1], 0);
        c.put(("a".into(), 10), vec![5, 4, 3, 2, 1], 0);
        assert_eq!(c.ids, 5);
    }
}
