//! `lcm_grep`, `lcm_describe` and `lcm_expand` on SQLite: this store's answers to
//! [`crate::core::recall::GrepReads`] and [`crate::core::recall::RecordReads`] (FTS5 queries,
//! the regex scan that reads rows on the read thread and matches them on a thread of its own),
//! driven by the functions written once in `core`.

use rusqlite::{params, OptionalExtension};

use crate::core::codec;
use crate::core::ids::{self, RecordId};
use crate::core::recall::{
    message_hit_of, role_label, snippet, summary_hit_of, Ask, DescribeReport, ExpandReport,
    ExpandedItem, GrepHit, GrepQuery, GrepReads, GrepReport, GrepSort, MessageRecord, RankedHit,
    RecordReads, Scope, SummaryRecord, RELEVANCE_WINDOW,
};
use crate::error::{LosslessError, Result};
use crate::sqlite::inspect::{message_row, summary_cols, summary_row};
use crate::sqlite::Db;

impl Db {
    /// The skeleton of message `id` (where a message of an unusual role keeps its role name).
    fn message_skeleton(&self, id: i64) -> Result<Option<String>> {
        Ok(self
            .conn
            .prepare_cached("SELECT skeleton FROM message_rows WHERE id = ?1")?
            .query_row([id], |x| x.get(0))
            .optional()?
            .flatten())
    }

    /// The newest messages of conversations `convs` whose text matches `re`, at most `want`,
    /// newest first, each with its snippet, reading at most `max_scan` rows (of any
    /// conversation); and whether that bound ended the scan short of `want` hits.
    ///
    /// Two threads share the work: this one reads the rows (SQLite, about half the time) and
    /// hands their stored bytes over in batches, and a scoped thread decompresses and matches
    /// them (the other half) in order, so hits stay newest first. The rows come from the
    /// `messages` table itself, not the `message_rows` view, which would decompress every
    /// text in SQL, copy it twice more and look a skeleton up for every row; only hits of a
    /// role the store does not name need their skeleton (for the role's name).
    fn regex_scan_messages(
        &self,
        re: &regex::Regex,
        convs: &[i64],
        want: usize,
        max_scan: i64,
    ) -> Result<(Vec<(ScanRow, String)>, bool)> {
        // The same pattern over bytes: texts are matched in the buffer they were decompressed
        // into, with no UTF-8 check or copy (valid UTF-8, which every stored text is, matches
        // the same either way).
        let scan_re = regex::bytes::RegexBuilder::new(re.as_str())
            .size_limit(1 << 20)
            .build()
            .map_err(|e| LosslessError::InvalidInput(format!("regex: {e}")))?;
        let in_scope: std::collections::HashSet<i64> = convs.iter().copied().collect();
        let enough = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<ScanBatch>(4);
            let matcher = std::thread::Builder::new()
                .name("lossless-regex".into())
                .spawn_scoped(s, || match_rows(rx, &scan_re, re, want, &enough))?;
            let read = self.read_scan_rows(&tx, &in_scope, max_scan, &enough);
            drop(tx);
            let found = matcher.join().map_err(|_| {
                LosslessError::Corrupt(
                    "the regex scan stopped: its matching thread panicked".into(),
                )
            })??;
            let bounded = read?;
            let short = found.len() < want;
            Ok((found, bounded && short))
        })
    }

    /// The reading half of [`Self::regex_scan_messages`]: rows newest first in rowid order,
    /// which needs no sort (a `conv_id` filter in SQL made SQLite sort the whole scope before
    /// the first row); rows of other conversations are skipped here and count against the
    /// bound. Returns whether the bound stopped it.
    fn read_scan_rows(
        &self,
        tx: &std::sync::mpsc::SyncSender<ScanBatch>,
        in_scope: &std::collections::HashSet<i64>,
        max_scan: i64,
        enough: &std::sync::atomic::AtomicBool,
    ) -> Result<bool> {
        use rusqlite::types::ValueRef;
        let mut st = self.conn.prepare_cached(
            "SELECT id, conv_id, role, ts, text, payload FROM messages ORDER BY id DESC",
        )?;
        let mut rows = st.query([])?;
        let mut batch = ScanBatch::default();
        let mut scanned = 0i64;
        while let Some(r) = rows.next()? {
            if enough.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            scanned += 1;
            if scanned > max_scan {
                let _ = tx.send(batch);
                return Ok(true);
            }
            let conv_id: i64 = r.get(1)?;
            if !in_scope.contains(&conv_id) {
                continue;
            }
            let row = ScanRow {
                id: r.get(0)?,
                conv_id,
                role: r.get(2)?,
                ts: r.get(3)?,
                text: 0..0,
                frame: false,
            };
            match (r.get_ref(5)?, r.get_ref(4)?) {
                (ValueRef::Null, ValueRef::Text(t)) => batch.push(row, t),
                (ValueRef::Null, ValueRef::Blob(frame)) => {
                    batch.push(ScanRow { frame: true, ..row }, frame)
                }
                _ => batch.push(row, self.stored_text(r, 4, 5)?.as_bytes()),
            }
            // A failed send: the matcher has stopped (enough hits, or an error it reports).
            if batch.rows.len() == SCAN_BATCH && tx.send(std::mem::take(&mut batch)).is_err() {
                return Ok(false);
            }
        }
        let _ = tx.send(batch);
        Ok(false)
    }

    /// A grep hit for message `id` (score: lower is better, as FTS5's `bm25()`).
    fn message_hit(
        &self,
        id: i64,
        score: Option<f64>,
        needles: &[String],
    ) -> Result<(f64, i64, GrepHit)> {
        let (conv_id, role, ts, text, sk) = self
            .conn
            .prepare_cached(
                "SELECT conv_id, role, ts, text, skeleton FROM message_rows WHERE id = ?1",
            )?
            .query_row([id], |x| {
                Ok((
                    x.get::<_, i64>(0)?,
                    x.get::<_, i64>(1)?,
                    x.get::<_, Option<i64>>(2)?,
                    x.get::<_, String>(3)?,
                    x.get::<_, Option<String>>(4)?,
                ))
            })?;
        Ok(message_hit_of(
            id,
            conv_id,
            role,
            sk.as_deref(),
            ts,
            &text,
            score,
            needles,
        ))
    }

    /// Full-text hits among the summaries of conversations `in_list` (a comma-separated id
    /// list), ordered by `order` (`score` or `summaries_fts.rowid DESC`); summaries are few, so
    /// FTS5's own `bm25()` ranks them.
    fn summary_hits(
        &self,
        fts: &str,
        in_list: &str,
        order: &str,
        want: usize,
        needles: &[String],
    ) -> Result<Vec<(f64, i64, GrepHit)>> {
        let sql = format!(
            "SELECT s.id, s.conv_id, s.depth, s.to_ts, s.text, bm25(summaries_fts) AS score
             FROM summaries_fts CROSS JOIN summaries s ON s.id = summaries_fts.rowid
             WHERE summaries_fts MATCH ?1 AND s.conv_id IN ({in_list}) ORDER BY {order} LIMIT ?2"
        );
        let mut st = self.conn.prepare(&sql)?;
        let mut rows = st.query(params![fts, want as i64])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            let text: String = r.get(4)?;
            let score: f64 = r.get(5)?;
            out.push(summary_hit_of(
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                &text,
                Some(score),
                needles,
                None,
            ));
        }
        Ok(out)
    }

    /// Conversation rows a scope covers.
    pub fn scope_conversations(&self, scope: &Scope) -> Result<Vec<i64>> {
        let ids: Vec<i64> = match scope {
            Scope::Session(k) => self
                .conn
                .prepare_cached(
                    "SELECT id FROM conversations WHERE agent_id = ?1 AND session_key = ?2",
                )?
                .query_map(params![k.agent_id, k.session_key], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?,
            Scope::Agent(a) => self
                .conn
                .prepare_cached("SELECT id FROM conversations WHERE agent_id = ?1")?
                .query_map(params![a], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?,
            Scope::All => self
                .conn
                .prepare_cached("SELECT id FROM conversations")?
                .query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?,
        };
        Ok(ids)
    }

    /// Message ids matching the FTS query `fts`, newest first, at most `limit`: from the newest
    /// messages' index and then the file's (see `store::pending_fts`: every id in the first is
    /// above every id in the second). `sql(index, name)` is the query for one index (`?1` the
    /// FTS query, `?2` the limit).
    fn newest_matches(
        &self,
        fts: &str,
        limit: usize,
        sql: impl Fn(&str, &str) -> String,
    ) -> Result<Vec<i64>> {
        self.sync_pending_index()?;
        let mut ids = Vec::new();
        for (index, name) in [
            ("temp.pending_fts", "pending_fts"),
            ("messages_fts", "messages_fts"),
        ] {
            let left = limit.saturating_sub(ids.len());
            if left == 0 {
                break;
            }
            ids.extend(
                self.conn
                    .prepare_cached(&sql(index, name))?
                    .query_map(params![fts, left as i64], |r| r.get::<_, i64>(0))?
                    .collect::<rusqlite::Result<Vec<i64>>>()?,
            );
        }
        Ok(ids)
    }

    /// `lcm_grep` (see [`crate::core::recall::grep`]), on this thread.
    pub fn grep(&self, q: &GrepQuery) -> Result<GrepReport> {
        // The reads are synchronous: the future is ready at its first poll.
        futures::executor::block_on(crate::core::recall::grep(self, q))
    }

    /// `lcm_describe` (see [`crate::core::recall::describe`]), on this thread.
    pub fn describe(&self, id: &str, agent: Option<&str>) -> Result<DescribeReport> {
        // The reads are synchronous: the future is ready at its first poll.
        futures::executor::block_on(crate::core::recall::describe(self, id, agent))
    }

    /// `lcm_expand` (see [`crate::core::recall::expand`]), on this thread.
    pub fn expand(&self, id: &str, max_tokens: u64, agent: Option<&str>) -> Result<ExpandReport> {
        futures::executor::block_on(crate::core::recall::expand(self, id, max_tokens, agent))
    }
}

/// `in (…)` list of conversation ids (integers: nothing to quote).
fn in_list(convs: &[i64]) -> String {
    convs
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

impl GrepReads for Db {
    async fn scope(&self, scope: &Scope) -> Result<Vec<i64>> {
        self.scope_conversations(scope)
    }

    async fn full_text_messages(&self, ask: &Ask<'_>) -> Result<Vec<RankedHit>> {
        let in_list = in_list(ask.convs);
        match ask.sort {
            // FTS drives the loop (CROSS JOIN fixes the join order) newest-first and stops at
            // the page. The newest messages' index first: its rows are all newer than the
            // file's (see `sqlite::pending_fts`).
            GrepSort::Recency => {
                let ids = self.newest_matches(ask.query, ask.want, |index, name| {
                    format!(
                        "SELECT m.id FROM {index} CROSS JOIN messages m ON m.id = {name}.rowid
                         WHERE {name} MATCH ?1 AND m.conv_id IN ({in_list})
                         ORDER BY {name}.rowid DESC LIMIT ?2"
                    )
                })?;
                ids.into_iter()
                    .map(|id| self.message_hit(id, None, ask.words))
                    .collect()
            }
            // The newest RELEVANCE_WINDOW matches, ranked (see `search`): bounded at any
            // history length.
            GrepSort::Relevance => {
                let rows = self.newest_matches(ask.query, RELEVANCE_WINDOW, |index, name| {
                    format!(
                        "SELECT rowid FROM {index} WHERE {name} MATCH ?1
                         ORDER BY rowid DESC LIMIT ?2"
                    )
                })?;
                self.ranked_rows(ask.words, rows, ask.convs, ask.want)?
                    .into_iter()
                    .map(|r| self.message_hit(r.id, Some(-r.score), ask.words))
                    .collect()
            }
        }
    }

    async fn full_text_summaries(&self, ask: &Ask<'_>) -> Result<Vec<RankedHit>> {
        let order = match ask.sort {
            GrepSort::Relevance => "score",
            GrepSort::Recency => "summaries_fts.rowid DESC",
        };
        self.summary_hits(ask.query, &in_list(ask.convs), order, ask.want, ask.words)
    }

    async fn any_term_messages(&self, ask: &Ask<'_>) -> Result<Vec<RankedHit>> {
        let grep = crate::core::search::RankFor::Grep;
        self.ranked_messages(ask.words, ask.convs, ask.want, &Default::default(), grep)?
            .into_iter()
            .map(|r| self.message_hit(r.id, Some(-r.score), ask.words))
            .collect()
    }

    async fn any_term_summaries(&self, ask: &Ask<'_>) -> Result<Vec<RankedHit>> {
        self.full_text_summaries(ask).await
    }

    async fn regex_messages(
        &self,
        re: &regex::Regex,
        ask: &Ask<'_>,
        max_scan: i64,
    ) -> Result<(Vec<RankedHit>, bool)> {
        let (found, truncated) = self.regex_scan_messages(re, ask.convs, ask.want, max_scan)?;
        let mut hits = Vec::with_capacity(found.len());
        for (row, snippet) in found {
            let sk = match row.role {
                codec::role::OTHER => self.message_skeleton(row.id)?,
                _ => None,
            };
            hits.push((
                0.0,
                row.ts.unwrap_or(0),
                GrepHit {
                    id: ids::message_id(row.id),
                    conversation_id: row.conv_id,
                    role: role_label(row.role, sk.as_deref()),
                    depth: None,
                    ts: row.ts,
                    snippet,
                    score: None,
                },
            ));
        }
        Ok((hits, truncated))
    }

    async fn regex_summaries(
        &self,
        re: &regex::Regex,
        ask: &Ask<'_>,
        hits: &mut Vec<RankedHit>,
    ) -> Result<()> {
        let sql = format!(
            "SELECT id, conv_id, depth, to_ts, text FROM summaries WHERE conv_id IN ({}) ORDER BY id DESC",
            in_list(ask.convs)
        );
        let mut st = self.conn.prepare(&sql)?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            let text: String = r.get(4)?;
            if re.is_match(&text) {
                let (id, conv, depth, ts) = (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
                hits.push(summary_hit_of(
                    id,
                    conv,
                    depth,
                    ts,
                    &text,
                    None,
                    &[],
                    Some(re),
                ));
                if hits.len() >= ask.want {
                    break;
                }
            }
        }
        Ok(())
    }
}

impl RecordReads for Db {
    async fn summary(&self, id: i64) -> Result<Option<SummaryRecord>> {
        let sql = format!(
            "SELECT {}, s.conv_id, s.text FROM summaries s WHERE s.id = ?1",
            summary_cols()
        );
        Ok(self
            .conn
            .prepare_cached(&sql)?
            .query_row([id], |r| {
                Ok(SummaryRecord {
                    row: summary_row(r)?,
                    conv_id: r.get(11)?,
                    text: r.get(12)?,
                })
            })
            .optional()?)
    }

    async fn message(&self, id: i64) -> Result<Option<MessageRecord>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT m.id, m.seq, m.role, m.tokens, m.ts, m.skeleton, m.text, m.conv_id, m.tool_call_id
                 FROM message_rows m WHERE m.id = ?1",
            )?
            .query_row([id], |r| {
                Ok(MessageRecord {
                    row: message_row(r)?,
                    conv_id: r.get(7)?,
                    tool_call_id: r.get(8)?,
                })
            })
            .optional()?)
    }

    async fn conversation_of(&self, id: RecordId) -> Result<Option<i64>> {
        let (sql, id) = match id {
            RecordId::Summary(s) => ("SELECT conv_id FROM summaries WHERE id = ?1", s),
            RecordId::Message(m) => ("SELECT conv_id FROM messages WHERE id = ?1", m),
        };
        Ok(self
            .conn
            .prepare_cached(sql)?
            .query_row([id], |r| r.get(0))
            .optional()?)
    }

    async fn agent_of(&self, conv_id: i64) -> Result<Option<String>> {
        Ok(self
            .conn
            .prepare_cached("SELECT agent_id FROM conversations WHERE id = ?1")?
            .query_row([conv_id], |r| r.get(0))
            .optional()?)
    }

    async fn children(&self, id: i64) -> Result<Vec<RecordId>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT kind, child_id FROM summary_children WHERE summary_id = ?1 ORDER BY ord",
            )?
            .query_map([id], |r| {
                let k: i64 = r.get(0)?;
                let id: i64 = r.get(1)?;
                Ok(if k == 0 {
                    RecordId::Message(id)
                } else {
                    RecordId::Summary(id)
                })
            })?
            .collect::<rusqlite::Result<_>>()?)
    }

    async fn parents(&self, kind: i64, id: i64) -> Result<Vec<String>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT summary_id FROM summary_children WHERE kind = ?1 AND child_id = ?2",
            )?
            .query_map(params![kind, id], |r| r.get::<_, i64>(0))?
            .map(|r| r.map(ids::summary_id))
            .collect::<rusqlite::Result<_>>()?)
    }

    async fn in_frontier(&self, kind: i64, id: i64) -> Result<bool> {
        // Frontier rows are keyed by (conv, ord); this lookup is for describe only.
        Ok(self
            .conn
            .prepare_cached("SELECT 1 FROM frontier WHERE kind = ?1 AND item_id = ?2 LIMIT 1")?
            .query_row(params![kind, id], |_| Ok(()))
            .optional()?
            .is_some())
    }

    async fn expanded(&self, ids: &[RecordId]) -> Result<Vec<Result<ExpandedItem>>> {
        Ok(ids.iter().map(|id| self.expanded_item(*id)).collect())
    }
}

impl Db {
    fn expanded_item(&self, id: RecordId) -> Result<ExpandedItem> {
        match id {
            RecordId::Message(mid) => {
                let (role, text, sk, ts): (i64, String, Option<String>, Option<i64>) = self
                    .conn
                    .prepare_cached(
                        "SELECT role, text, skeleton, ts FROM message_rows WHERE id = ?1",
                    )?
                    .query_row([mid], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
                Ok(ExpandedItem {
                    id: id.to_string(),
                    role: role_label(role, sk.as_deref()),
                    depth: None,
                    ts,
                    text,
                })
            }
            RecordId::Summary(sid) => {
                let (depth, text, ts): (i64, String, Option<i64>) = self
                    .conn
                    .prepare_cached("SELECT depth, text, to_ts FROM summaries WHERE id = ?1")?
                    .query_row([sid], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
                Ok(ExpandedItem {
                    id: id.to_string(),
                    role: "summary".into(),
                    depth: Some(depth),
                    ts,
                    text,
                })
            }
        }
    }
}

impl Db {
    /// The active frontier of a conversation, oldest first, as `(id, tokens)`.
    pub fn frontier(&self, conv_id: i64) -> Result<Vec<(String, u64)>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT kind, item_id, tokens FROM frontier WHERE conv_id = ?1 ORDER BY ord",
            )?
            .query_map([conv_id], |r| {
                let k: i64 = r.get(0)?;
                let id: i64 = r.get(1)?;
                let t: i64 = r.get(2)?;
                Ok((
                    if k == 0 {
                        ids::message_id(id)
                    } else {
                        ids::summary_id(id)
                    },
                    t as u64,
                ))
            })?
            .collect::<rusqlite::Result<_>>()?)
    }
}

/// Rows a regex scan hands to its matching thread at a time.
const SCAN_BATCH: usize = 256;

/// A message row of a regex scan, as read by the scanning thread; its text is in its batch.
struct ScanRow {
    id: i64,
    conv_id: i64,
    role: i64,
    ts: Option<i64>,
    /// Where the stored text is in [`ScanBatch::bytes`].
    text: std::ops::Range<usize>,
    /// Whether that is a compressed frame (see [`crate::core::pack`]) or the text itself.
    frame: bool,
}

/// Rows handed over together, their stored texts back to back in one buffer (one allocation a
/// batch instead of one a row).
#[derive(Default)]
struct ScanBatch {
    rows: Vec<ScanRow>,
    bytes: Vec<u8>,
}

impl ScanBatch {
    fn push(&mut self, mut row: ScanRow, stored: &[u8]) {
        let at = self.bytes.len();
        self.bytes.extend_from_slice(stored);
        row.text = at..self.bytes.len();
        self.rows.push(row);
    }
}

/// The matching half of [`Db::regex_scan_messages`]: the rows' texts in the order they come,
/// decompressed into one reused buffer and matched by `scan_re`; each hit with the snippet
/// `re` finds. Stops (and says so in `enough`) at `want` hits.
fn match_rows(
    rx: std::sync::mpsc::Receiver<ScanBatch>,
    scan_re: &regex::bytes::Regex,
    re: &regex::Regex,
    want: usize,
    enough: &std::sync::atomic::AtomicBool,
) -> Result<Vec<(ScanRow, String)>> {
    let mut buf = Vec::new();
    let mut found = Vec::new();
    for batch in rx {
        for row in batch.rows {
            let stored = batch.bytes.get(row.text.clone()).unwrap_or_default();
            let bytes: &[u8] = if row.frame {
                crate::core::pack::unpack_into(stored, &mut buf).map_err(LosslessError::Corrupt)?;
                &buf
            } else {
                stored
            };
            if !scan_re.is_match(bytes) {
                continue;
            }
            let text = std::str::from_utf8(bytes)
                .map_err(|e| LosslessError::Corrupt(format!("stored text is not UTF-8: {e}")))?;
            let snip = snippet(text, &[], Some(re));
            found.push((row, snip));
            if found.len() >= want {
                enough.store(true, std::sync::atomic::Ordering::Relaxed);
                return Ok(found);
            }
        }
    }
    Ok(found)
}
