//! The dashboard's views ([`crate::core::inspect::Inspect`]) over the SQLite file: the SQL, run on
//! the store's read thread in one read transaction per view ([`LosslessStore::call_read`]), off
//! the path of turns. Rows go to [`crate::core::inspect`]'s shared builders, which make the views the
//! PostgreSQL store's make from the same rows.

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};

use crate::core::conv::{ConvKey, ConvRow};
use crate::core::inspect::{
    self, children_of, frontier_item, item_of, no_conversation, not_in, page_of, path_from,
    roots_of, stats_of, summary_of, timeline_of, uncovered_from, CompactionEvent,
    ConversationStats, DagLayer, DagNode, DagOverview, Frontier, FrontierItem, FrontierView,
    Inspect, MessagePage, MessageRow, PageAt, SessionView, SummaryRow, SummaryStamp,
    UncoveredRange, PATH_MAX_HOPS, SUMMARY_HEAD_CHARS,
};
use crate::error::Result;
use crate::sqlite::{Db, LosslessStore};

/// The columns of a [`SummaryRow`] of `summaries s`, in [`summary_row`]'s order.
pub(super) fn summary_cols() -> String {
    format!(
        "s.id, s.depth, s.tokens, s.source_tokens, s.first_seq, s.last_seq, s.from_ts, s.to_ts, s.summarizer, \
         substr(s.text, 1, {SUMMARY_HEAD_CHARS}), \
         (SELECT count(*) FROM summary_children c WHERE c.summary_id = s.id)"
    )
}

pub(super) fn summary_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SummaryRow> {
    Ok(SummaryRow {
        id: r.get(0)?,
        depth: r.get(1)?,
        tokens: r.get(2)?,
        source_tokens: r.get(3)?,
        first_seq: r.get(4)?,
        last_seq: r.get(5)?,
        from_ts: r.get(6)?,
        to_ts: r.get(7)?,
        summarizer: r.get(8)?,
        head: r.get(9)?,
        child_count: r.get(10)?,
    })
}

/// A [`MessageRow`] from `m.id, m.seq, m.role, m.tokens, m.ts, m.skeleton, m.text` of
/// `message_rows m` (the view that unpacks the stored text).
pub(super) fn message_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<MessageRow> {
    Ok(MessageRow {
        id: r.get(0)?,
        seq: r.get(1)?,
        role: r.get(2)?,
        tokens: r.get(3)?,
        ts: r.get(4)?,
        skeleton: r.get(5)?,
        text: r.get(6)?,
    })
}

impl Db {
    fn frontier_of(&self, conv_id: i64) -> Result<Frontier> {
        let mut st = self
            .conn
            .prepare_cached("SELECT kind, item_id FROM frontier WHERE conv_id = ?1")?;
        let rows = st
            .query_map([conv_id], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows.into_iter().collect())
    }

    /// The active conversation of a session key, or `NotFound` naming it.
    pub fn conversation_of(&self, key: &ConvKey) -> Result<ConvRow> {
        self.conversation(key)?.ok_or_else(|| no_conversation(key))
    }

    /// Layers, roots and the raw tail of `conv`'s DAG.
    pub fn dag_overview(&self, conv: &ConvRow) -> Result<DagOverview> {
        let layers = self
            .conn
            .prepare_cached(
                "SELECT s.depth, count(*), sum(s.tokens), sum(s.source_tokens),
                        (SELECT count(*) FROM frontier f JOIN summaries t ON t.id = f.item_id
                         WHERE f.conv_id = s.conv_id AND f.kind = 1 AND t.depth = s.depth)
                 FROM summaries s WHERE s.conv_id = ?1 GROUP BY s.depth ORDER BY s.depth DESC",
            )?
            .query_map([conv.id], |r| {
                Ok(DagLayer {
                    depth: r.get(0)?,
                    count: r.get(1)?,
                    tokens: r.get(2)?,
                    source_tokens: r.get(3)?,
                    in_frontier: r.get(4)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let roots = self
            .conn
            .prepare_cached(&format!(
                "SELECT {} FROM summaries s WHERE s.conv_id = ?1
                 AND NOT EXISTS(SELECT 1 FROM summary_children c WHERE c.kind = 1 AND c.child_id = s.id)
                 ORDER BY s.first_seq, s.id",
                summary_cols()
            ))?
            .query_map([conv.id], summary_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let roots = roots_of(roots, &self.frontier_of(conv.id)?);
        let covered_to: Option<i64> = self
            .conn
            .prepare_cached("SELECT max(last_seq) FROM summaries WHERE conv_id = ?1")?
            .query_row([conv.id], |r| r.get(0))?;
        let uncovered = self
            .conn
            .prepare_cached(
                "SELECT count(*), ifnull(sum(tokens), 0), min(seq), max(seq) FROM messages WHERE conv_id = ?1 AND seq >= ?2",
            )?
            .query_row(params![conv.id, uncovered_from(covered_to)], |r| {
                Ok(UncoveredRange {
                    count: r.get(0)?,
                    tokens: r.get(1)?,
                    first_seq: r.get(2)?,
                    last_seq: r.get(3)?,
                })
            })?;
        Ok(DagOverview {
            conversation: conv.clone(),
            layers,
            roots,
            uncovered,
        })
    }

    /// The children of summary `id` (summaries, or the messages of a leaf), in order; `conv`
    /// scopes the lookup.
    pub fn dag_children(&self, conv: &ConvRow, id: &str) -> Result<Vec<DagNode>> {
        let sid = summary_of(id)?;
        let owner: Option<i64> = self
            .conn
            .prepare_cached("SELECT conv_id FROM summaries WHERE id = ?1")?
            .query_row([sid], |r| r.get(0))
            .optional()?;
        if owner != Some(conv.id) {
            return Err(not_in(id, conv));
        }
        let summaries = self
            .conn
            .prepare_cached(&format!(
                "SELECT {} FROM summary_children c JOIN summaries s ON s.id = c.child_id
                 WHERE c.summary_id = ?1 AND c.kind = 1 ORDER BY c.ord",
                summary_cols()
            ))?
            .query_map([sid], summary_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let messages = self
            .conn
            .prepare_cached(
                "SELECT m.id, m.seq, m.role, m.tokens, m.ts, m.skeleton, m.text
                 FROM summary_children c JOIN message_rows m ON m.id = c.child_id
                 WHERE c.summary_id = ?1 AND c.kind = 0 ORDER BY c.ord",
            )?
            .query_map([sid], message_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        children_of(summaries, messages, &self.frontier_of(conv.id)?)
    }

    /// The summaries from `id` up to its root, root first (`id` itself last).
    pub fn dag_path(&self, conv: &ConvRow, id: &str) -> Result<Vec<String>> {
        let (mut kind, mut item) = item_of(id)?;
        let owner_sql = if kind == 0 {
            "SELECT conv_id FROM messages WHERE id = ?1"
        } else {
            "SELECT conv_id FROM summaries WHERE id = ?1"
        };
        let owner: Option<i64> = self
            .conn
            .prepare_cached(owner_sql)?
            .query_row([item], |r| r.get(0))
            .optional()?;
        if owner != Some(conv.id) {
            return Err(not_in(id, conv));
        }
        let mut parent = self.conn.prepare_cached(
            "SELECT summary_id FROM summary_children WHERE kind = ?1 AND child_id = ?2 ORDER BY summary_id LIMIT 1",
        )?;
        let mut parents = Vec::new();
        for _ in 0..PATH_MAX_HOPS {
            let Some(p) = parent
                .query_row(params![kind, item], |r| r.get::<_, i64>(0))
                .optional()?
            else {
                break;
            };
            parents.push(p);
            (kind, item) = (1, p);
        }
        Ok(path_from(id, parents))
    }

    /// Stored messages from sequence `from_seq` on, at most `limit` (1 to
    /// [`inspect::MAX_PAGE`]).
    pub fn message_page(&self, conv: &ConvRow, from_seq: i64, limit: usize) -> Result<MessagePage> {
        let limit = inspect::page_limit(limit);
        let rows = self
            .conn
            .prepare_cached(
                "SELECT m.id, m.seq, m.role, m.tokens, m.ts, m.skeleton, m.text,
                        (SELECT c.summary_id FROM summary_children c WHERE c.kind = 0 AND c.child_id = m.id
                         ORDER BY c.summary_id LIMIT 1)
                 FROM message_rows m WHERE m.conv_id = ?1 AND m.seq >= ?2 ORDER BY m.seq LIMIT ?3",
            )?
            .query_map(params![conv.id, from_seq, limit as i64 + 1], |r| {
                Ok((message_row(r)?, r.get::<_, Option<i64>>(7)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        page_of(conv, from_seq, limit, rows, &self.frontier_of(conv.id)?)
    }

    /// The sequence of message `id` in `conv`.
    pub fn message_seq(&self, conv: &ConvRow, id: &str) -> Result<i64> {
        let mid = inspect::message_of(id)?;
        self.conn
            .prepare_cached("SELECT seq FROM messages WHERE id = ?1 AND conv_id = ?2")?
            .query_row(params![mid, conv.id], |r| r.get(0))
            .optional()?
            .ok_or_else(|| not_in(id, conv))
    }

    /// A page of `conv` starting `at` (see [`PageAt`]).
    pub fn message_page_at(
        &self,
        conv: &ConvRow,
        at: &PageAt,
        limit: usize,
    ) -> Result<MessagePage> {
        let around = match at.around()? {
            Some((_, id)) => Some(self.message_seq(conv, id)?),
            None => None,
        };
        self.message_page(conv, at.start(conv, around, limit), limit)
    }

    /// Every compaction pass of `conv`, oldest first: summaries written together (same time,
    /// same depth) are one event.
    pub fn compaction_timeline(&self, conv: &ConvRow) -> Result<Vec<CompactionEvent>> {
        let stamps = self
            .conn
            .prepare_cached(
                "SELECT created_at, depth, source_tokens, tokens, first_seq, last_seq, summarizer, id
                 FROM summaries WHERE conv_id = ?1 ORDER BY created_at, depth, id",
            )?
            .query_map([conv.id], |r| {
                Ok(SummaryStamp {
                    created_at: r.get(0)?,
                    depth: r.get(1)?,
                    source_tokens: r.get(2)?,
                    tokens: r.get(3)?,
                    first_seq: r.get(4)?,
                    last_seq: r.get(5)?,
                    summarizer: r.get(6)?,
                    id: r.get(7)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(timeline_of(stamps))
    }

    /// `conv`'s active frontier in order, with sequence ranges.
    pub fn frontier_items(&self, conv: &ConvRow) -> Result<Vec<FrontierItem>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT f.kind, f.item_id, f.tokens,
                        CASE WHEN f.kind = 0 THEN m.seq ELSE s.first_seq END,
                        CASE WHEN f.kind = 0 THEN m.seq ELSE s.last_seq END
                 FROM frontier f
                 LEFT JOIN messages m ON f.kind = 0 AND m.id = f.item_id
                 LEFT JOIN summaries s ON f.kind = 1 AND s.id = f.item_id
                 WHERE f.conv_id = ?1 ORDER BY f.ord",
            )?
            .query_map([conv.id], |r| {
                Ok(frontier_item(
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Compaction passes per conversation (`(conversation row, passes)`).
    pub fn compaction_passes(&self) -> Result<Vec<(i64, i64)>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT conv_id, count(*) FROM (SELECT conv_id FROM summaries GROUP BY conv_id, created_at, depth) GROUP BY conv_id",
            )?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Every summarizer that wrote a stored summary, with how many.
    pub fn summarizers_used(&self) -> Result<Vec<(String, i64)>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT summarizer, count(*) FROM summaries GROUP BY summarizer ORDER BY count(*) DESC, summarizer",
            )?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?)
    }
}

#[async_trait]
impl Inspect for LosslessStore {
    async fn conversation_stats(&self) -> Result<Vec<ConversationStats>> {
        self.call_read(|db| Ok(stats_of(db.conversations()?, db.compaction_passes()?)))
            .await
    }

    async fn session_view(&self, key: &ConvKey) -> Result<Option<SessionView>> {
        let key = key.clone();
        self.call_read(move |db| {
            let Some(conv) = db.conversation(&key)? else {
                return Ok(None);
            };
            Ok(Some(SessionView {
                timeline: db.compaction_timeline(&conv)?,
                frontier: db.frontier_items(&conv)?,
                conversation: conv,
            }))
        })
        .await
    }

    async fn frontier_view(&self, key: &ConvKey) -> Result<Option<FrontierView>> {
        let key = key.clone();
        self.call_read(move |db| {
            let Some(conv) = db.conversation(&key)? else {
                return Ok(None);
            };
            Ok(Some(FrontierView {
                frontier: db.frontier_items(&conv)?,
                conversation: conv,
            }))
        })
        .await
    }

    async fn dag_overview(&self, key: &ConvKey) -> Result<DagOverview> {
        let key = key.clone();
        self.call_read(move |db| db.dag_overview(&db.conversation_of(&key)?))
            .await
    }

    async fn dag_children(&self, key: &ConvKey, id: &str) -> Result<Vec<DagNode>> {
        let (key, id) = (key.clone(), id.to_owned());
        self.call_read(move |db| db.dag_children(&db.conversation_of(&key)?, &id))
            .await
    }

    async fn dag_path(&self, key: &ConvKey, id: &str) -> Result<Vec<String>> {
        let (key, id) = (key.clone(), id.to_owned());
        self.call_read(move |db| db.dag_path(&db.conversation_of(&key)?, &id))
            .await
    }

    async fn message_page(&self, key: &ConvKey, at: PageAt, limit: usize) -> Result<MessagePage> {
        let key = key.clone();
        self.call_read(move |db| db.message_page_at(&db.conversation_of(&key)?, &at, limit))
            .await
    }

    async fn summarizers_used(&self) -> Result<Vec<(String, i64)>> {
        self.call_read(|db| db.summarizers_used()).await
    }
}
