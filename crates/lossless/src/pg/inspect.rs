//! The dashboard's views ([`crate::core::inspect::Inspect`]) over the PostgreSQL store: the same
//! queries as the SQLite store's (`store/inspect.rs`), in PostgreSQL's dialect. Each view reads
//! in one repeatable-read snapshot ([`PgStore::snapshot`]), so its conversation row, frontier
//! and rows agree while other nodes write, and is retried once on a new connection when its
//! connection broke (a read cannot be got wrong twice). Rows go to [`crate::core::inspect`]'s shared
//! builders, so the views are the SQLite store's for the same data (`tests/inspect_parity.rs`).
//!
//! Dialect notes: `smallint`/`integer` columns (`role`, `kind`, `depth`, `ord`) are read as
//! `bigint`, as are `sum`s (numeric otherwise); text is ordered `COLLATE "C"` (bytes, as SQLite
//! orders it) where an order is shown.

use async_trait::async_trait;
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::store::{conv_row, PgStore, CONV_COLS};
use crate::core::conv::{ConvKey, ConvRow};
use crate::core::inspect::{
    self, children_of, frontier_item, item_of, no_conversation, not_in, page_of, path_from,
    roots_of, stats_of, summary_of, timeline_of, uncovered_from, CompactionEvent,
    ConversationStats, DagLayer, DagNode, DagOverview, Frontier, FrontierItem, FrontierView,
    Inspect, MessagePage, MessageRow, PageAt, SessionView, SummaryRow, SummaryStamp,
    UncoveredRange, PATH_MAX_HOPS, SUMMARY_HEAD_CHARS,
};
use crate::error::Result;

/// The columns of a [`SummaryRow`] of `summaries s`, in [`summary_row`]'s order.
pub(super) fn summary_cols() -> String {
    format!(
        "s.id, s.depth::bigint, s.tokens, s.source_tokens, s.first_seq, s.last_seq, s.from_ts, s.to_ts, s.summarizer, \
         substr(s.text, 1, {SUMMARY_HEAD_CHARS}), \
         (SELECT count(*) FROM summary_children c WHERE c.summary_id = s.id)"
    )
}

pub(super) fn summary_row(r: &Row) -> Result<SummaryRow> {
    Ok(SummaryRow {
        id: r.try_get(0)?,
        depth: r.try_get(1)?,
        tokens: r.try_get(2)?,
        source_tokens: r.try_get(3)?,
        first_seq: r.try_get(4)?,
        last_seq: r.try_get(5)?,
        from_ts: r.try_get(6)?,
        to_ts: r.try_get(7)?,
        summarizer: r.try_get(8)?,
        head: r.try_get(9)?,
        child_count: r.try_get(10)?,
    })
}

/// The columns of a [`MessageRow`] of `messages m`, in [`message_row`]'s order.
pub(super) const MESSAGE_COLS: &str =
    "m.id, m.seq, m.role::bigint, m.tokens, m.ts, m.skeleton, m.text";

pub(super) fn message_row(r: &Row) -> Result<MessageRow> {
    Ok(MessageRow {
        id: r.try_get(0)?,
        seq: r.try_get(1)?,
        role: r.try_get(2)?,
        tokens: r.try_get(3)?,
        ts: r.try_get(4)?,
        skeleton: r.try_get(5)?,
        text: r.try_get(6)?,
    })
}

/// The active conversation of `key`, or `NotFound` naming it.
async fn conversation_of(c: &impl GenericClient, key: &ConvKey) -> Result<ConvRow> {
    PgStore::conversation_on(c, key)
        .await?
        .ok_or_else(|| no_conversation(key))
}

async fn frontier_of(c: &impl GenericClient, conv_id: i64) -> Result<Frontier> {
    let st = c
        .prepare_cached("SELECT kind::bigint, item_id FROM frontier WHERE conv_id = $1")
        .await?;
    let rows = c.query(&st, &[&conv_id]).await?;
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect()
}

/// The conversation a summary or message row belongs to, when it exists.
async fn owner_of(c: &impl GenericClient, kind: i64, id: i64) -> Result<Option<i64>> {
    let sql = if kind == 0 {
        "SELECT conv_id FROM messages WHERE id = $1"
    } else {
        "SELECT conv_id FROM summaries WHERE id = $1"
    };
    let st = c.prepare_cached(sql).await?;
    Ok(c.query_opt(&st, &[&id])
        .await?
        .map(|r| r.try_get(0))
        .transpose()?)
}

async fn dag_overview(c: &impl GenericClient, conv: &ConvRow) -> Result<DagOverview> {
    let st = c
        .prepare_cached(
            "SELECT s.depth::bigint, count(*), sum(s.tokens)::bigint, sum(s.source_tokens)::bigint,
                    (SELECT count(*) FROM frontier f JOIN summaries t ON t.id = f.item_id
                     WHERE f.conv_id = $1 AND f.kind = 1 AND t.depth = s.depth)
             FROM summaries s WHERE s.conv_id = $1 GROUP BY s.depth ORDER BY s.depth DESC",
        )
        .await?;
    let layers = c
        .query(&st, &[&conv.id])
        .await?
        .iter()
        .map(|r| {
            Ok(DagLayer {
                depth: r.try_get(0)?,
                count: r.try_get(1)?,
                tokens: r.try_get(2)?,
                source_tokens: r.try_get(3)?,
                in_frontier: r.try_get(4)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let st = c
        .prepare_cached(&format!(
            "SELECT {} FROM summaries s WHERE s.conv_id = $1
             AND NOT EXISTS(SELECT 1 FROM summary_children c WHERE c.kind = 1 AND c.child_id = s.id)
             ORDER BY s.first_seq, s.id",
            summary_cols()
        ))
        .await?;
    let roots = c
        .query(&st, &[&conv.id])
        .await?
        .iter()
        .map(summary_row)
        .collect::<Result<Vec<_>>>()?;
    let roots = roots_of(roots, &frontier_of(c, conv.id).await?);
    let st = c
        .prepare_cached("SELECT max(last_seq) FROM summaries WHERE conv_id = $1")
        .await?;
    let covered_to: Option<i64> = c.query_one(&st, &[&conv.id]).await?.try_get(0)?;
    let st = c
        .prepare_cached(
            "SELECT count(*), coalesce(sum(tokens), 0)::bigint, min(seq), max(seq)
             FROM messages WHERE conv_id = $1 AND seq >= $2",
        )
        .await?;
    let r = c
        .query_one(&st, &[&conv.id, &uncovered_from(covered_to)])
        .await?;
    let uncovered = UncoveredRange {
        count: r.try_get(0)?,
        tokens: r.try_get(1)?,
        first_seq: r.try_get(2)?,
        last_seq: r.try_get(3)?,
    };
    Ok(DagOverview {
        conversation: conv.clone(),
        layers,
        roots,
        uncovered,
    })
}

async fn dag_children(c: &impl GenericClient, conv: &ConvRow, id: &str) -> Result<Vec<DagNode>> {
    let sid = summary_of(id)?;
    if owner_of(c, 1, sid).await? != Some(conv.id) {
        return Err(not_in(id, conv));
    }
    let st = c
        .prepare_cached(&format!(
            "SELECT {} FROM summary_children c JOIN summaries s ON s.id = c.child_id
             WHERE c.summary_id = $1 AND c.kind = 1 ORDER BY c.ord",
            summary_cols()
        ))
        .await?;
    let summaries = c
        .query(&st, &[&sid])
        .await?
        .iter()
        .map(summary_row)
        .collect::<Result<Vec<_>>>()?;
    let st = c
        .prepare_cached(&format!(
            "SELECT {MESSAGE_COLS} FROM summary_children c JOIN messages m ON m.id = c.child_id
             WHERE c.summary_id = $1 AND c.kind = 0 ORDER BY c.ord"
        ))
        .await?;
    let messages = c
        .query(&st, &[&sid])
        .await?
        .iter()
        .map(message_row)
        .collect::<Result<Vec<_>>>()?;
    children_of(summaries, messages, &frontier_of(c, conv.id).await?)
}

async fn dag_path(c: &impl GenericClient, conv: &ConvRow, id: &str) -> Result<Vec<String>> {
    let (mut kind, mut item) = item_of(id)?;
    if owner_of(c, kind, item).await? != Some(conv.id) {
        return Err(not_in(id, conv));
    }
    let st = c
        .prepare_cached(
            "SELECT summary_id FROM summary_children WHERE kind = $1 AND child_id = $2
             ORDER BY summary_id LIMIT 1",
        )
        .await?;
    let mut parents = Vec::new();
    for _ in 0..PATH_MAX_HOPS {
        let Some(r) = c.query_opt(&st, &[&(kind as i16), &item]).await? else {
            break;
        };
        let p: i64 = r.try_get(0)?;
        parents.push(p);
        (kind, item) = (1, p);
    }
    Ok(path_from(id, parents))
}

async fn message_page(
    c: &impl GenericClient,
    conv: &ConvRow,
    at: &PageAt,
    limit: usize,
) -> Result<MessagePage> {
    let around = match at.around()? {
        Some((mid, id)) => {
            let st = c
                .prepare_cached("SELECT seq FROM messages WHERE id = $1 AND conv_id = $2")
                .await?;
            let seq = c
                .query_opt(&st, &[&mid, &conv.id])
                .await?
                .ok_or_else(|| not_in(id, conv))?
                .try_get(0)?;
            Some(seq)
        }
        None => None,
    };
    let limit = inspect::page_limit(limit);
    let from_seq = at.start(conv, around, limit);
    let st = c
        .prepare_cached(&format!(
            "SELECT {MESSAGE_COLS},
                    (SELECT c.summary_id FROM summary_children c WHERE c.kind = 0 AND c.child_id = m.id
                     ORDER BY c.summary_id LIMIT 1)
             FROM messages m WHERE m.conv_id = $1 AND m.seq >= $2 ORDER BY m.seq LIMIT $3"
        ))
        .await?;
    let rows = c
        .query(&st, &[&conv.id, &from_seq, &(limit as i64 + 1)])
        .await?
        .iter()
        .map(|r| Ok((message_row(r)?, r.try_get::<_, Option<i64>>(7)?)))
        .collect::<Result<Vec<_>>>()?;
    page_of(conv, from_seq, limit, rows, &frontier_of(c, conv.id).await?)
}

async fn compaction_timeline(
    c: &impl GenericClient,
    conv: &ConvRow,
) -> Result<Vec<CompactionEvent>> {
    let st = c
        .prepare_cached(
            "SELECT created_at, depth::bigint, source_tokens, tokens, first_seq, last_seq, summarizer, id
             FROM summaries WHERE conv_id = $1 ORDER BY created_at, depth, id",
        )
        .await?;
    let stamps = c
        .query(&st, &[&conv.id])
        .await?
        .iter()
        .map(|r| {
            Ok(SummaryStamp {
                created_at: r.try_get(0)?,
                depth: r.try_get(1)?,
                source_tokens: r.try_get(2)?,
                tokens: r.try_get(3)?,
                first_seq: r.try_get(4)?,
                last_seq: r.try_get(5)?,
                summarizer: r.try_get(6)?,
                id: r.try_get(7)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(timeline_of(stamps))
}

async fn frontier_items(c: &impl GenericClient, conv: &ConvRow) -> Result<Vec<FrontierItem>> {
    let st = c
        .prepare_cached(
            "SELECT f.kind::bigint, f.item_id, f.tokens,
                    CASE WHEN f.kind = 0 THEN m.seq ELSE s.first_seq END,
                    CASE WHEN f.kind = 0 THEN m.seq ELSE s.last_seq END
             FROM frontier f
             LEFT JOIN messages m ON f.kind = 0 AND m.id = f.item_id
             LEFT JOIN summaries s ON f.kind = 1 AND s.id = f.item_id
             WHERE f.conv_id = $1 ORDER BY f.ord",
        )
        .await?;
    c.query(&st, &[&conv.id])
        .await?
        .iter()
        .map(|r| {
            Ok(frontier_item(
                r.try_get(0)?,
                r.try_get(1)?,
                r.try_get(2)?,
                r.try_get(3)?,
                r.try_get(4)?,
            ))
        })
        .collect()
}

/// Runs `$body` (a `Result`) with `$tx` bound to a read-only snapshot of `$store`, retried once
/// on a new connection when the connection broke.
macro_rules! in_snapshot {
    ($store:expr, |$tx:ident| $body:expr) => {
        $store
            .retrying(|| async {
                let mut client = $store.client().await?;
                let $tx = PgStore::snapshot(&mut client).await?;
                let out = {
                    let $tx = &$tx;
                    $body
                }?;
                $tx.commit().await?;
                Ok(out)
            })
            .await
    };
}

async fn conversation_stats(c: &impl GenericClient) -> Result<Vec<ConversationStats>> {
    let convs = c
        .query(
            &format!("SELECT {CONV_COLS} FROM conversations ORDER BY id"),
            &[],
        )
        .await?
        .iter()
        .map(conv_row)
        .collect::<Result<Vec<_>>>()?;
    let passes = c
        .query(
            "SELECT conv_id, count(*) FROM (SELECT conv_id FROM summaries GROUP BY conv_id, created_at, depth) p
             GROUP BY conv_id",
            &[],
        )
        .await?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<Vec<_>>>()?;
    Ok(stats_of(convs, passes))
}

async fn session_view(c: &impl GenericClient, key: &ConvKey) -> Result<Option<SessionView>> {
    let Some(conv) = PgStore::conversation_on(c, key).await? else {
        return Ok(None);
    };
    Ok(Some(SessionView {
        timeline: compaction_timeline(c, &conv).await?,
        frontier: frontier_items(c, &conv).await?,
        conversation: conv,
    }))
}

async fn frontier_view(c: &impl GenericClient, key: &ConvKey) -> Result<Option<FrontierView>> {
    let Some(conv) = PgStore::conversation_on(c, key).await? else {
        return Ok(None);
    };
    Ok(Some(FrontierView {
        frontier: frontier_items(c, &conv).await?,
        conversation: conv,
    }))
}

async fn summarizers_used(c: &impl GenericClient) -> Result<Vec<(String, i64)>> {
    c.query(
        "SELECT summarizer, count(*) FROM summaries GROUP BY summarizer
         ORDER BY count(*) DESC, summarizer COLLATE \"C\"",
        &[],
    )
    .await?
    .iter()
    .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
    .collect()
}

#[async_trait]
impl Inspect for PgStore {
    async fn conversation_stats(&self) -> Result<Vec<ConversationStats>> {
        in_snapshot!(self, |tx| conversation_stats(tx).await)
    }

    async fn session_view(&self, key: &ConvKey) -> Result<Option<SessionView>> {
        in_snapshot!(self, |tx| session_view(tx, key).await)
    }

    async fn frontier_view(&self, key: &ConvKey) -> Result<Option<FrontierView>> {
        in_snapshot!(self, |tx| frontier_view(tx, key).await)
    }

    async fn dag_overview(&self, key: &ConvKey) -> Result<DagOverview> {
        in_snapshot!(self, |tx| dag_overview(
            tx,
            &conversation_of(tx, key).await?
        )
        .await)
    }

    async fn dag_children(&self, key: &ConvKey, id: &str) -> Result<Vec<DagNode>> {
        in_snapshot!(self, |tx| dag_children(
            tx,
            &conversation_of(tx, key).await?,
            id
        )
        .await)
    }

    async fn dag_path(&self, key: &ConvKey, id: &str) -> Result<Vec<String>> {
        in_snapshot!(self, |tx| dag_path(
            tx,
            &conversation_of(tx, key).await?,
            id
        )
        .await)
    }

    async fn message_page(&self, key: &ConvKey, at: PageAt, limit: usize) -> Result<MessagePage> {
        in_snapshot!(self, |tx| message_page(
            tx,
            &conversation_of(tx, key).await?,
            &at,
            limit
        )
        .await)
    }

    async fn summarizers_used(&self) -> Result<Vec<(String, i64)>> {
        in_snapshot!(self, |tx| summarizers_used(tx).await)
    }
}
