//! Recall: search, describe and expand stored history. These are the operations behind the
//! `lcm_*` tools and the `clawctx lcm` CLI; each returns a serializable report.
//!
//! Full-text search goes through FTS5 (BM25 ranking or recency); the model's query is reduced
//! to quoted alphanumeric terms joined by AND, so no FTS syntax from the model can reach SQLite
//! (`foo" OR (` searches for `foo` and `or`). Regex search scans newest-first with the `regex`
//! crate (linear time, no ReDoS), bounded by `grepMaxScanRows`. Every query is scoped: one
//! session (its active and archived conversations), one agent, or everything (CLI only).

use clawctx_tokens::{text_tokens, truncate_middle};
use rusqlite::{params, OptionalExtension};
use serde::Serialize;

use crate::error::{LosslessError, Result};
use crate::ids::{self, RecordId};
use crate::store::codec;
use crate::store::{ConvKey, Db};

/// Full-text relevance ranks at most this many of the newest matches (bounded cost).
pub const RELEVANCE_WINDOW: usize = 2_000;

/// Search mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrepMode {
    /// FTS5 full-text (terms ANDed). `full_text`; `fts` is accepted too.
    #[default]
    #[serde(alias = "fts")]
    FullText,
    /// Regular expression (Rust `regex` syntax), newest first. `regex`.
    Regex,
    /// Free text (a question): rows sharing the most and rarest of its words first, BM25
    /// ranked (see [`crate::search`]); stopwords ignored. `any_term`; `any` is accepted too.
    #[serde(alias = "any")]
    AnyTerm,
    /// By meaning: the rows whose sentence vectors are closest to the query's, cosine ranked
    /// (needs an embedding model, see [`crate::semantic`]). `semantic`.
    Semantic,
    /// `any_term` and `semantic` fused by reciprocal rank ([`crate::semantic::fuse`]); with no
    /// embedding model, `any_term` alone. `hybrid`.
    Hybrid,
    /// `hybrid` when the engine has an embedding model, else `full_text`: what the front ends
    /// use when no mode is given. `auto`.
    Auto,
}

impl GrepMode {
    /// The mode named `name`: the names every front end uses (`full_text`, `any_term`,
    /// `regex`: the CLI, the engine API, MCP, the agent tool), or a former alias (`fts`,
    /// `any`), `semantic`, `hybrid`, `auto`; `None` for anything else.
    pub fn from_name(name: &str) -> Option<GrepMode> {
        match name {
            "full_text" | "fts" => Some(GrepMode::FullText),
            "any_term" | "any" => Some(GrepMode::AnyTerm),
            "regex" => Some(GrepMode::Regex),
            "semantic" => Some(GrepMode::Semantic),
            "hybrid" => Some(GrepMode::Hybrid),
            "auto" => Some(GrepMode::Auto),
            _ => None,
        }
    }
}

/// What to search.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrepTarget {
    /// Messages and summaries.
    #[default]
    Both,
    /// Raw messages only.
    Messages,
    /// Summaries only.
    Summaries,
}

/// Ordering of full-text hits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrepSort {
    /// BM25.
    #[default]
    Relevance,
    /// Newest first.
    Recency,
}

/// Which conversations a query may see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// One session key (its active and archived conversations).
    Session(ConvKey),
    /// Every conversation of one agent.
    Agent(String),
    /// Everything (CLI / operators only).
    All,
}

/// A grep request.
#[derive(Clone, Debug)]
pub struct GrepQuery {
    /// The pattern or terms.
    pub pattern: String,
    /// Mode.
    pub mode: GrepMode,
    /// Target.
    pub target: GrepTarget,
    /// Sort (full-text only; regex is always newest first).
    pub sort: GrepSort,
    /// Scope.
    pub scope: Scope,
    /// Page size (1..=200).
    pub limit: usize,
    /// Hits to skip (pagination).
    pub offset: usize,
    /// Regex mode: rows scanned at most (newest first).
    pub max_scan_rows: u64,
}

impl GrepQuery {
    /// A full-text query over everything with default paging.
    pub fn new(pattern: impl Into<String>, scope: Scope) -> Self {
        Self {
            pattern: pattern.into(),
            mode: GrepMode::FullText,
            target: GrepTarget::Both,
            sort: GrepSort::Relevance,
            scope,
            limit: 20,
            offset: 0,
            max_scan_rows: 50_000,
        }
    }
}

/// One hit.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GrepHit {
    /// `msg_<n>` or `sum_<n>`.
    pub id: String,
    /// Conversation row.
    pub conversation_id: i64,
    /// `user`, `assistant`, `toolResult`, ... or `summary`.
    pub role: String,
    /// Summary depth (summaries only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depth: Option<i64>,
    /// Timestamp (ms) of the message or the end of the summary range.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ts: Option<i64>,
    /// Text around the first match.
    pub snippet: String,
    /// BM25 score (lower is better), full-text only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
}

/// A page of hits.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GrepReport {
    /// The FTS query actually run (full-text only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fts_query: Option<String>,
    /// Hits.
    pub hits: Vec<GrepHit>,
    /// Offset of the next page, when there may be more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<usize>,
    /// Regex mode: the scan stopped at `grepMaxScanRows` before the end of history.
    pub scan_truncated: bool,
}

/// Reduces a model-written query to safe FTS5 syntax: the terms of its first 16 words, quoted,
/// ANDed (see [`crate::store::terms`]). Returns `None` when no term remains.
pub fn sanitize_fts_query(q: &str) -> Option<String> {
    crate::store::terms::fts_and_query(q, 16)
}

/// The text around the first match of `re` (regex mode) or of the first needle found
/// (full-text modes: the lowercased text searched for each needle), on one line, with `…`
/// where it was cut. Shared by every backend.
pub(crate) fn snippet(text: &str, needles: &[String], re: Option<&regex::Regex>) -> String {
    const RADIUS: usize = 120;
    let pos = if let Some(re) = re {
        re.find(text).map(|m| m.start())
    } else {
        let lower = text.to_lowercase();
        // Positions in `lower` match `text` only when lowercasing kept byte lengths; fall back to 0.
        needles
            .iter()
            .filter_map(|n| lower.find(n.as_str()))
            .min()
            .filter(|_| lower.len() == text.len())
    }
    .unwrap_or(0);
    let mut start = pos.saturating_sub(RADIUS);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (pos + RADIUS).min(text.len());
    while !text.is_char_boundary(end) {
        end += 1;
    }
    let mut s = String::new();
    if start > 0 {
        s.push('…');
    }
    s.push_str(&text[start..end].replace('\n', " "));
    if end < text.len() {
        s.push('…');
    }
    s
}

/// The role name of a stored role code; a message of another role keeps its name in its
/// skeleton. Shared by every backend.
pub(crate) fn role_label(code: i64, skeleton: Option<&str>) -> String {
    match code {
        0 => "user".into(),
        1 => "assistant".into(),
        2 => "toolResult".into(),
        _ => skeleton
            .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
            .and_then(|v| v.get("role").and_then(|r| r.as_str()).map(str::to_owned))
            .unwrap_or_else(|| "other".into()),
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
    /// Whether that is a compressed frame (see [`crate::store::pack`]) or the text itself.
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
                crate::store::pack::unpack_into(stored, &mut buf)
                    .map_err(LosslessError::Corrupt)?;
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

/// A hit as ordered before paging: `(score, tiebreak, hit)`. The score is lower-is-better
/// (BM25 negated; 0 in regex mode); the tiebreak is the message id for message hits and the
/// summary's end timestamp (0 when unknown) for summary hits, as the SQLite store has always
/// ordered them.
pub(crate) type RankedHit = (f64, i64, GrepHit);

/// A grep hit for a message (score: lower is better, as FTS5's `bm25()`). Shared by every
/// backend.
#[allow(clippy::too_many_arguments)]
pub(crate) fn message_hit_of(
    id: i64,
    conv_id: i64,
    role: i64,
    skeleton: Option<&str>,
    ts: Option<i64>,
    text: &str,
    score: Option<f64>,
    needles: &[String],
) -> RankedHit {
    (
        score.unwrap_or(0.0),
        id,
        GrepHit {
            id: ids::message_id(id),
            conversation_id: conv_id,
            role: role_label(role, skeleton),
            depth: None,
            ts,
            snippet: snippet(text, needles, None),
            score,
        },
    )
}

/// A grep hit for a summary: full-text (`score` its BM25, `needles` its terms) or regex (`re`,
/// no score). Shared by every backend.
#[allow(clippy::too_many_arguments)]
pub(crate) fn summary_hit_of(
    id: i64,
    conv_id: i64,
    depth: i64,
    to_ts: Option<i64>,
    text: &str,
    score: Option<f64>,
    needles: &[String],
    re: Option<&regex::Regex>,
) -> RankedHit {
    (
        score.unwrap_or(0.0),
        to_ts.unwrap_or(0),
        GrepHit {
            id: ids::summary_id(id),
            conversation_id: conv_id,
            role: "summary".into(),
            depth: Some(depth),
            ts: to_ts,
            snippet: snippet(text, needles, re),
            score,
        },
    )
}

/// The words a full-text query's snippets look for: the terms of its FTS query, as quoted
/// there. Shared by every backend.
pub(crate) fn fts_needles(fts: &str) -> Vec<String> {
    fts.split('"')
        .filter(|t| !t.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// Orders a full-text page's hits, messages' first then summaries' as found: by score
/// (stable, lower first) or newest first (by timestamp, then the tiebreak). Shared by every
/// backend.
pub(crate) fn order_hits(hits: &mut [RankedHit], sort: GrepSort) {
    match sort {
        GrepSort::Relevance => hits.sort_by(|a, b| a.0.total_cmp(&b.0)),
        GrepSort::Recency => hits.sort_by(|a, b| b.2.ts.cmp(&a.2.ts).then(b.1.cmp(&a.1))),
    }
}

/// The page `offset..offset + limit` of the ordered `hits` into `report`, with the next
/// page's offset when there are more (`hits` holds up to one more than the page). Shared by
/// every backend.
pub(crate) fn page_hits(
    report: &mut GrepReport,
    hits: Vec<RankedHit>,
    offset: usize,
    limit: usize,
) {
    let more = hits.len() > offset + limit;
    report.hits = hits
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(|h| h.2)
        .collect();
    if more {
        report.next_offset = Some(offset + limit);
    }
}

/// The regex of a regex-mode query: at most 500 characters, compiled with the size limit
/// every backend uses (linear-time matching, bounded memory).
pub(crate) fn grep_regex(pattern: &str) -> Result<regex::Regex> {
    if pattern.len() > 500 {
        return Err(LosslessError::InvalidInput(
            "regex longer than 500 characters".into(),
        ));
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| LosslessError::InvalidInput(format!("regex: {e}")))
}

/// The empty report every grep starts from.
pub(crate) fn empty_report() -> GrepReport {
    GrepReport {
        fts_query: None,
        hits: Vec::new(),
        next_offset: None,
        scan_truncated: false,
    }
}

/// The FTS query of an any-term search over `terms` (each term's own query, ORed). Shared by
/// every backend.
pub(crate) fn any_term_fts(terms: &[String]) -> String {
    terms
        .iter()
        .map(|t| crate::store::terms::fts_term(t))
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// `lcm_expand`'s cap: the items (children, or the message itself) in order while their
/// tokens fit `max_tokens`; a first item alone over the cap is shortened in the middle.
/// `items` is read lazily, so what is past the cap is never fetched. Shared by every backend.
pub(crate) fn cap_expansion(
    id: String,
    total: usize,
    items: impl IntoIterator<Item = Result<ExpandedItem>>,
    max_tokens: u64,
) -> Result<ExpandReport> {
    let mut report = ExpandReport {
        id,
        items: Vec::new(),
        tokens: 0,
        omitted: 0,
        truncated: false,
    };
    for (i, item) in items.into_iter().enumerate() {
        let mut item = item?;
        let t = text_tokens(&item.text);
        if report.tokens + t > max_tokens {
            if report.items.is_empty() {
                item.text = truncate_middle(&item.text, max_tokens);
                report.tokens += text_tokens(&item.text);
                report.items.push(item);
                report.omitted = total - i - 1;
            } else {
                report.omitted = total - i;
            }
            report.truncated = true;
            break;
        }
        report.tokens += t;
        report.items.push(item);
    }
    Ok(report)
}

/// A summary's metadata and links.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SummaryInfo {
    /// `sum_<n>`.
    pub id: String,
    /// Conversation row.
    pub conversation_id: i64,
    /// 0 = leaf.
    pub depth: i64,
    /// Tokens of the summary text.
    pub tokens: i64,
    /// Tokens of what it summarizes.
    pub source_tokens: i64,
    /// First and last message sequence covered.
    pub seq_range: (i64, i64),
    /// Time range (ms).
    pub from_ts: Option<i64>,
    /// Time range (ms).
    pub to_ts: Option<i64>,
    /// Which summarizer produced it.
    pub summarizer: String,
    /// Whether it is in its conversation's active frontier.
    pub in_frontier: bool,
    /// Summaries that contain this one.
    pub parents: Vec<String>,
    /// Children in order (`msg_…` for leaves, `sum_…` for condensed).
    pub children: Vec<String>,
    /// The text.
    pub text: String,
}

/// A message's metadata and content.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageInfo {
    /// `msg_<n>`.
    pub id: String,
    /// Conversation row.
    pub conversation_id: i64,
    /// Sequence in the conversation.
    pub seq: i64,
    /// Role.
    pub role: String,
    /// Stored token count.
    pub tokens: i64,
    /// Timestamp (ms).
    pub ts: Option<i64>,
    /// Tool call id answered (tool results).
    pub tool_call_id: Option<String>,
    /// Whether it is raw in the active frontier.
    pub in_frontier: bool,
    /// The leaf summary that covers it, if any.
    pub parents: Vec<String>,
    /// The original message as received.
    pub message: clawctx_protocol::AgentMessage,
}

/// `describe` result.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum DescribeReport {
    /// A summary.
    Summary(SummaryInfo),
    /// A message.
    Message(MessageInfo),
}

/// One expanded child.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpandedItem {
    /// `msg_…` or `sum_…`.
    pub id: String,
    /// Role, or `summary`.
    pub role: String,
    /// Depth (summaries).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depth: Option<i64>,
    /// Timestamp (ms) or summary end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ts: Option<i64>,
    /// Text (shortened when it alone exceeded the cap).
    pub text: String,
}

/// `expand` result.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpandReport {
    /// What was expanded.
    pub id: String,
    /// Its children (or the message itself), in order, within the cap.
    pub items: Vec<ExpandedItem>,
    /// Tokens of the returned texts.
    pub tokens: u64,
    /// Children left out because of the cap.
    pub omitted: usize,
    /// Whether the cap cut the expansion.
    pub truncated: bool,
}

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

    /// Searches stored messages and summaries.
    pub fn grep(&self, q: &GrepQuery) -> Result<GrepReport> {
        let limit = q.limit.clamp(1, 200);
        let convs = self.scope_conversations(&q.scope)?;
        let mut report = empty_report();
        if convs.is_empty() {
            return Ok(report);
        }
        let in_list = convs
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let want = q.offset + limit + 1;
        let mut hits: Vec<(f64, i64, GrepHit)> = Vec::new();
        match q.mode {
            // A store answers the lexical half of the semantic modes ([`crate::semantic`] adds
            // the vectors above it); `auto` without a model is full-text.
            GrepMode::FullText | GrepMode::Auto => {
                let Some(fts) = sanitize_fts_query(&q.pattern) else {
                    return Ok(report);
                };
                let needles = fts_needles(&fts);
                if q.target != GrepTarget::Summaries {
                    match q.sort {
                        // FTS drives the loop (CROSS JOIN fixes the join order) newest-first
                        // and stops at the page.
                        // The newest messages' index first: its rows are all newer than the
                        // file's (see `store::pending_fts`).
                        GrepSort::Recency => {
                            let ids = self.newest_matches(&fts, want, |index, name| {
                                format!(
                                    "SELECT m.id FROM {index} CROSS JOIN messages m ON m.id = {name}.rowid
                                     WHERE {name} MATCH ?1 AND m.conv_id IN ({in_list})
                                     ORDER BY {name}.rowid DESC LIMIT ?2"
                                )
                            })?;
                            for id in ids {
                                hits.push(self.message_hit(id, None, &needles)?);
                            }
                        }
                        // The newest RELEVANCE_WINDOW matches, ranked (see `search`): bounded
                        // at any history length.
                        GrepSort::Relevance => {
                            let rows =
                                self.newest_matches(&fts, RELEVANCE_WINDOW, |index, name| {
                                    format!(
                                        "SELECT rowid FROM {index} WHERE {name} MATCH ?1
                                     ORDER BY rowid DESC LIMIT ?2"
                                    )
                                })?;
                            for r in self.ranked_rows(&needles, rows, &convs, want)? {
                                hits.push(self.message_hit(r.id, Some(-r.score), &needles)?);
                            }
                        }
                    }
                }
                if q.target != GrepTarget::Messages {
                    let order = match q.sort {
                        GrepSort::Relevance => "score",
                        GrepSort::Recency => "summaries_fts.rowid DESC",
                    };
                    hits.extend(self.summary_hits(&fts, &in_list, order, want, &needles)?);
                }
                order_hits(&mut hits, q.sort);
                report.fts_query = Some(fts);
            }
            GrepMode::AnyTerm | GrepMode::Semantic | GrepMode::Hybrid => {
                let terms = crate::search::query_terms(&q.pattern);
                if terms.is_empty() {
                    return Ok(report);
                }
                let fts = any_term_fts(&terms);
                if q.target != GrepTarget::Summaries {
                    let ranked = self.ranked_messages(
                        &terms,
                        &convs,
                        want,
                        &Default::default(),
                        crate::search::RankFor::Grep,
                    )?;
                    for r in ranked {
                        hits.push(self.message_hit(r.id, Some(-r.score), &terms)?);
                    }
                }
                if q.target != GrepTarget::Messages {
                    hits.extend(self.summary_hits(&fts, &in_list, "score", want, &terms)?);
                }
                order_hits(&mut hits, GrepSort::Relevance);
                report.fts_query = Some(fts);
            }
            GrepMode::Regex => {
                let re = grep_regex(&q.pattern)?;
                if q.target != GrepTarget::Summaries {
                    let max_scan = (q.max_scan_rows as i64).max(1);
                    let (found, truncated) =
                        self.regex_scan_messages(&re, &convs, want, max_scan)?;
                    report.scan_truncated = truncated;
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
                }
                if q.target != GrepTarget::Messages && hits.len() < want {
                    let sql = format!(
                        "SELECT id, conv_id, depth, to_ts, text FROM summaries WHERE conv_id IN ({in_list}) ORDER BY id DESC"
                    );
                    let mut st = self.conn.prepare(&sql)?;
                    let mut rows = st.query([])?;
                    while let Some(r) = rows.next()? {
                        let text: String = r.get(4)?;
                        if re.is_match(&text) {
                            hits.push(summary_hit_of(
                                r.get(0)?,
                                r.get(1)?,
                                r.get(2)?,
                                r.get(3)?,
                                &text,
                                None,
                                &[],
                                Some(&re),
                            ));
                            if hits.len() >= want {
                                break;
                            }
                        }
                    }
                }
            }
        }
        page_hits(&mut report, hits, q.offset, limit);
        Ok(report)
    }

    fn conv_agent(&self, conv_id: i64) -> Result<Option<String>> {
        Ok(self
            .conn
            .prepare_cached("SELECT agent_id FROM conversations WHERE id = ?1")?
            .query_row([conv_id], |r| r.get(0))
            .optional()?)
    }

    fn check_scope(&self, conv_id: i64, agent: Option<&str>, id: &str) -> Result<()> {
        if let Some(agent) = agent {
            if self.conv_agent(conv_id)?.as_deref() != Some(agent) {
                return Err(LosslessError::NotFound(id.to_owned()));
            }
        }
        Ok(())
    }

    /// Describes a summary or message; `agent` restricts to that agent's conversations.
    pub fn describe(&self, id: &str, agent: Option<&str>) -> Result<DescribeReport> {
        match ids::parse(id)? {
            RecordId::Summary(sid) => {
                let row = self
                    .conn
                    .prepare_cached(
                        "SELECT conv_id, depth, tokens, source_tokens, first_seq, last_seq, from_ts, to_ts, summarizer, text
                         FROM summaries WHERE id = ?1",
                    )?
                    .query_row([sid], |r| {
                        Ok((
                            r.get::<_, i64>(0)?,
                            r.get::<_, i64>(1)?,
                            r.get::<_, i64>(2)?,
                            r.get::<_, i64>(3)?,
                            r.get::<_, i64>(4)?,
                            r.get::<_, i64>(5)?,
                            r.get::<_, Option<i64>>(6)?,
                            r.get::<_, Option<i64>>(7)?,
                            r.get::<_, String>(8)?,
                            r.get::<_, String>(9)?,
                        ))
                    })
                    .optional()?
                    .ok_or_else(|| LosslessError::NotFound(id.to_owned()))?;
                self.check_scope(row.0, agent, id)?;
                let children = self
                    .children(sid)?
                    .into_iter()
                    .map(|c| c.to_string())
                    .collect();
                Ok(DescribeReport::Summary(SummaryInfo {
                    id: ids::summary_id(sid),
                    conversation_id: row.0,
                    depth: row.1,
                    tokens: row.2,
                    source_tokens: row.3,
                    seq_range: (row.4, row.5),
                    from_ts: row.6,
                    to_ts: row.7,
                    summarizer: row.8,
                    in_frontier: self.in_frontier(1, sid)?,
                    parents: self.parents(1, sid)?,
                    children,
                    text: row.9,
                }))
            }
            RecordId::Message(mid) => {
                let row = self
                    .conn
                    .prepare_cached("SELECT conv_id, seq, role, tokens, ts, tool_call_id, skeleton, text FROM message_rows WHERE id = ?1")?
                    .query_row([mid], |r| {
                        Ok((
                            r.get::<_, i64>(0)?,
                            r.get::<_, i64>(1)?,
                            r.get::<_, i64>(2)?,
                            r.get::<_, i64>(3)?,
                            r.get::<_, Option<i64>>(4)?,
                            r.get::<_, Option<String>>(5)?,
                            r.get::<_, Option<String>>(6)?,
                            r.get::<_, String>(7)?,
                        ))
                    })
                    .optional()?
                    .ok_or_else(|| LosslessError::NotFound(id.to_owned()))?;
                self.check_scope(row.0, agent, id)?;
                let message = codec::decode(row.2, &row.7, row.6.as_deref(), row.4)?;
                Ok(DescribeReport::Message(MessageInfo {
                    id: ids::message_id(mid),
                    conversation_id: row.0,
                    seq: row.1,
                    role: message.role().to_owned(),
                    tokens: row.3,
                    ts: row.4,
                    tool_call_id: row.5,
                    in_frontier: self.in_frontier(0, mid)?,
                    parents: self.parents(0, mid)?,
                    message,
                }))
            }
        }
    }

    pub(crate) fn children(&self, sid: i64) -> Result<Vec<RecordId>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT kind, child_id FROM summary_children WHERE summary_id = ?1 ORDER BY ord",
            )?
            .query_map([sid], |r| {
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

    fn parents(&self, kind: i64, id: i64) -> Result<Vec<String>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT summary_id FROM summary_children WHERE kind = ?1 AND child_id = ?2",
            )?
            .query_map(params![kind, id], |r| r.get::<_, i64>(0))?
            .map(|r| r.map(ids::summary_id))
            .collect::<rusqlite::Result<_>>()?)
    }

    fn in_frontier(&self, kind: i64, id: i64) -> Result<bool> {
        // Frontier rows are keyed by (conv, ord); this lookup is for describe only.
        Ok(self
            .conn
            .prepare_cached("SELECT 1 FROM frontier WHERE kind = ?1 AND item_id = ?2 LIMIT 1")?
            .query_row(params![kind, id], |_| Ok(()))
            .optional()?
            .is_some())
    }

    /// Expands a summary into its children (or returns a message), within `max_tokens`.
    pub fn expand(&self, id: &str, max_tokens: u64, agent: Option<&str>) -> Result<ExpandReport> {
        let rid = ids::parse(id)?;
        let children = match rid {
            RecordId::Summary(sid) => {
                let conv: i64 = self
                    .conn
                    .prepare_cached("SELECT conv_id FROM summaries WHERE id = ?1")?
                    .query_row([sid], |r| r.get(0))
                    .optional()?
                    .ok_or_else(|| LosslessError::NotFound(id.to_owned()))?;
                self.check_scope(conv, agent, id)?;
                self.children(sid)?
            }
            RecordId::Message(mid) => {
                let conv: i64 = self
                    .conn
                    .prepare_cached("SELECT conv_id FROM messages WHERE id = ?1")?
                    .query_row([mid], |r| r.get(0))
                    .optional()?
                    .ok_or_else(|| LosslessError::NotFound(id.to_owned()))?;
                self.check_scope(conv, agent, id)?;
                vec![rid]
            }
        };
        let total = children.len();
        cap_expansion(
            rid.to_string(),
            total,
            children.into_iter().map(|c| self.expand_item(c)),
            max_tokens,
        )
    }

    fn expand_item(&self, id: RecordId) -> Result<ExpandedItem> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(id: &str, ts: Option<i64>) -> GrepHit {
        GrepHit {
            id: id.into(),
            conversation_id: 1,
            role: "user".into(),
            depth: None,
            ts,
            snippet: String::new(),
            score: None,
        }
    }

    fn ids_of(hits: &[RankedHit]) -> Vec<&str> {
        hits.iter().map(|h| h.2.id.as_str()).collect()
    }

    #[test]
    fn hits_order_by_score_stably_or_newest_first() {
        let mut hits = vec![
            (-2.0, 5, hit("msg_5", Some(50))),
            (-3.0, 7, hit("msg_7", Some(70))),
            (-2.0, 90, hit("sum_1", Some(90))),
            (-3.0, 0, hit("sum_2", None)),
        ];
        order_hits(&mut hits, GrepSort::Relevance);
        // Ties keep their order: messages' before summaries'.
        assert_eq!(ids_of(&hits), ["msg_7", "sum_2", "msg_5", "sum_1"]);
        order_hits(&mut hits, GrepSort::Recency);
        assert_eq!(ids_of(&hits), ["sum_1", "msg_7", "msg_5", "sum_2"]);
        // Equal timestamps: the larger tiebreak first.
        let mut same = vec![(0.0, 3, hit("a", Some(1))), (0.0, 9, hit("b", Some(1)))];
        order_hits(&mut same, GrepSort::Recency);
        assert_eq!(ids_of(&same), ["b", "a"]);
    }

    #[test]
    fn a_page_says_whether_more_follow() {
        let hits = |n: usize| -> Vec<RankedHit> {
            (0..n)
                .map(|i| (0.0, i as i64, hit(&format!("msg_{i}"), None)))
                .collect()
        };
        let mut r = empty_report();
        page_hits(&mut r, hits(6), 2, 3);
        assert_eq!(
            r.hits.iter().map(|h| h.id.as_str()).collect::<Vec<_>>(),
            ["msg_2", "msg_3", "msg_4"]
        );
        assert_eq!(r.next_offset, Some(5));
        let mut r = empty_report();
        page_hits(&mut r, hits(5), 2, 3);
        assert_eq!(r.hits.len(), 3);
        assert_eq!(r.next_offset, None);
        let mut r = empty_report();
        page_hits(&mut r, hits(1), 4, 3);
        assert!(r.hits.is_empty() && r.next_offset.is_none());
    }

    #[test]
    fn snippets_centre_on_the_match_and_roles_are_named() {
        let text = format!("{} needle here\nand more", "x".repeat(300));
        let s = snippet(&text, &["needle".into()], None);
        assert!(
            s.starts_with('…') && s.contains("needle here and more"),
            "{s}"
        );
        let re = regex::Regex::new("ne+dle").unwrap();
        assert_eq!(snippet(&text, &[], Some(&re)), s);
        assert_eq!(snippet("short", &["absent".into()], None), "short");
        assert_eq!(role_label(0, None), "user");
        assert_eq!(role_label(2, None), "toolResult");
        assert_eq!(role_label(3, Some(r#"{"role":"system"}"#)), "system");
        assert_eq!(role_label(3, Some("not json")), "other");
    }

    #[test]
    fn hits_carry_their_tiebreaks() {
        let m = message_hit_of(12, 3, 1, None, Some(40), "text", Some(-1.5), &[]);
        assert_eq!(
            (m.0, m.1, m.2.id.as_str(), m.2.role.as_str()),
            (-1.5, 12, "msg_12", "assistant")
        );
        let s = summary_hit_of(4, 3, 1, Some(99), "text", None, &[], None);
        assert_eq!(
            (s.0, s.1, s.2.id.as_str(), s.2.depth),
            (0.0, 99, "sum_4", Some(1))
        );
        let s = summary_hit_of(4, 3, 1, None, "text", None, &[], None);
        assert_eq!(s.1, 0);
    }

    #[test]
    fn queries_make_needles_and_regexes_are_bounded() {
        assert_eq!(fts_needles("\"deploy\" \"server\""), ["deploy", "server"]);
        assert_eq!(
            any_term_fts(&["deploys".into(), "cache".into()]),
            "\"deploy\" OR \"cach\""
        );
        assert!(grep_regex(&"a".repeat(501)).is_err());
        let e = grep_regex("(").unwrap_err().to_string();
        assert!(e.contains("regex"), "{e}");
        assert!(grep_regex("a+b").is_ok());
    }

    #[test]
    fn expansion_stops_at_the_cap() {
        let item = |i: usize, words: usize| -> Result<ExpandedItem> {
            Ok(ExpandedItem {
                id: format!("msg_{i}"),
                role: "user".into(),
                depth: None,
                ts: None,
                text: "word ".repeat(words),
            })
        };
        let r = cap_expansion("sum_1".into(), 3, (0..3).map(|i| item(i, 10)), 1_000).unwrap();
        assert_eq!((r.items.len(), r.omitted, r.truncated), (3, 0, false));
        assert_eq!(
            r.tokens,
            (0..3)
                .map(|_| text_tokens(&"word ".repeat(10)))
                .sum::<u64>()
        );
        let one = text_tokens(&"word ".repeat(10));
        let r = cap_expansion("sum_1".into(), 3, (0..3).map(|i| item(i, 10)), one + 1).unwrap();
        assert_eq!((r.items.len(), r.omitted, r.truncated), (1, 2, true));
        // A first item alone over the cap is shortened, not dropped.
        let r = cap_expansion("sum_1".into(), 2, (0..2).map(|i| item(i, 500)), 20).unwrap();
        assert_eq!((r.items.len(), r.omitted, r.truncated), (1, 1, true));
        assert!(r.tokens <= 20 + 8, "{}", r.tokens);
        // Items past the cap are never read.
        let mut read = 0;
        let items = (0..5).map(|i| {
            read += 1;
            item(i, 10)
        });
        cap_expansion("sum_1".into(), 5, items, one).unwrap();
        assert_eq!(read, 2);
    }
}
