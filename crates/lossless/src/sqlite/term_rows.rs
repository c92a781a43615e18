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

use rusqlite::params;

use super::Db;
use crate::core::terms::{fts_term, scoped_query};
use crate::core::FxMap;
use crate::error::Result;

/// Term lists kept at most (each at most its window of ids).
pub const MAX_CACHED_TERMS: usize = 2_048;
/// Ids kept at most over all lists (8 MiB).
pub const MAX_CACHED_IDS: usize = 1 << 20;

/// See the module header: `(query, window)` (a term's query, scoped to the conversations
/// searched) → its newest matching rows, newest first, and the file index's boundary
/// (`fts_state.upto`) when they were read.
#[derive(Default)]
pub struct TermRowsCache {
    lists: FxMap<(String, usize), (Vec<i64>, i64)>,
    ids: usize,
}

impl TermRowsCache {
    /// Forgets every list.
    pub fn clear(&mut self) {
        self.lists.clear();
        self.ids = 0;
    }

    fn put(&mut self, key: (String, usize), rows: Vec<i64>, upto: i64) {
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

impl Db {
    /// The newest rows whose message contains `term`, at most `window`, newest first; `None`
    /// when the term cannot be searched (the tokenizer reduces it to nothing). Reads the
    /// newest messages' index and then the file's (see [`super::pending_fts`]; callers run
    /// [`Db::sync_pending_index`] first).
    ///
    /// `convs`: only the rows of these conversations (see [`crate::core::terms::scoped_query`]).
    pub fn term_rows(&self, term: &str, window: usize, convs: &[i64]) -> Result<Option<Vec<i64>>> {
        let query = scoped_query(&fts_term(term), convs);
        let key = (query.clone(), window);
        let upto = self.pending.get().upto;
        let cached = self.term_rows.borrow().lists.get(&key).cloned();
        // The file's index has not changed since the list was read: nothing new there.
        let file_unchanged = cached.as_ref().is_some_and(|(_, at)| *at == upto);
        let cached = cached.map(|(rows, _)| rows);
        let above = cached.as_ref().and_then(|rows| rows.first().copied());
        let mut rows = Vec::new();
        for (sql, skip) in [
            (
                "SELECT rowid FROM temp.pending_fts WHERE pending_fts MATCH ?1 AND rowid > ?2
                 ORDER BY rowid DESC LIMIT ?3",
                false,
            ),
            (
                "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?1 AND rowid > ?2
                 ORDER BY rowid DESC LIMIT ?3",
                file_unchanged,
            ),
        ] {
            let left = window.saturating_sub(rows.len());
            if left == 0 || skip {
                break;
            }
            let fresh = self
                .conn
                .prepare_cached(sql)?
                .query_map(
                    params![query, above.unwrap_or(i64::MIN), left as i64],
                    |r| r.get::<_, i64>(0),
                )
                .and_then(|it| it.collect::<rusqlite::Result<Vec<i64>>>());
            match fresh {
                Ok(found) => rows.extend(found),
                Err(_) => return Ok(None),
            }
        }
        if let Some(old) = cached {
            // `old` was the whole window when it was read; the new rows go on top.
            rows.extend(old.into_iter().take(window.saturating_sub(rows.len())));
        }
        self.term_rows.borrow_mut().put(key, rows.clone(), upto);
        Ok(Some(rows))
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
