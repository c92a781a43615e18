//! Recall: search, describe and expand stored history. These are the operations behind the
//! `lcm_*` tools and the `clawctx lcm` CLI; each returns a serializable report.
//!
//! Written once for every store: [`grep`], [`describe`] and [`expand`] decide (modes, targets,
//! scope checks, ordering, paging, the expansion cap) and ask a store's [`GrepReads`] /
//! [`RecordReads`] for rows. Full-text search reduces the model's query to quoted alphanumeric
//! terms joined by AND ([`sanitize_fts_query`]), so no query syntax from the model reaches a
//! database (`foo" OR (` searches for `foo` and `or`). Regex search scans newest-first with the
//! `regex` crate (linear time, no ReDoS), bounded by `grepMaxScanRows`. Every query is scoped:
//! one session (its active and archived conversations), one agent, or everything (CLI only).

use clawctx_tokens::{text_tokens, truncate_middle};
use serde::Serialize;

use crate::core::codec;
use crate::core::conv::ConvKey;
use crate::core::ids::{self, RecordId};
use crate::core::inspect::{MessageRow, SummaryRow};
use crate::error::{LosslessError, Result};

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
    /// ranked (see [`crate::core::search`]); stopwords ignored. `any_term`; `any` is accepted too.
    #[serde(alias = "any")]
    AnyTerm,
    /// By meaning: the rows whose sentence vectors are closest to the query's, cosine ranked
    /// (needs an embedding model, see [`crate::core::semantic`]). `semantic`.
    Semantic,
    /// `any_term` and `semantic` fused by reciprocal rank ([`crate::core::semantic::fuse`]); with no
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
/// ANDed (see [`crate::core::terms`]). Returns `None` when no term remains.
pub fn sanitize_fts_query(q: &str) -> Option<String> {
    crate::core::terms::fts_and_query(q, 16)
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
        .map(|t| crate::core::terms::fts_term(t))
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

/// What one step of [`grep`] asks a store for.
pub(crate) struct Ask<'a> {
    /// The conversations searched.
    pub convs: &'a [i64],
    /// Hits wanted at most.
    pub want: usize,
    /// The query's words: a full-text query's needles, or the any-term query's terms.
    pub words: &'a [String],
    /// The query as a full-text query (any-term: its words ORed); the regex scans' pattern.
    pub query: &'a str,
    /// Newest first or by relevance.
    pub sort: GrepSort,
}

/// What `lcm_grep` reads from a store, each step one query (or one scan) of its dialect;
/// [`grep`] decides the rest (modes, targets, ordering, paging) once for every store. Each
/// step returns hits built by [`message_hit_of`] / [`summary_hit_of`], at most `ask.want`.
pub(crate) trait GrepReads {
    /// The conversations `scope` covers.
    async fn scope(&self, scope: &Scope) -> Result<Vec<i64>>;
    /// Messages holding every word of the full-text query: `Recency`, newest first;
    /// `Relevance`, the newest [`RELEVANCE_WINDOW`] matches ranked.
    async fn full_text_messages(&self, ask: &Ask<'_>) -> Result<Vec<RankedHit>>;
    /// Summaries holding every word of the full-text query, by BM25 or newest first.
    async fn full_text_summaries(&self, ask: &Ask<'_>) -> Result<Vec<RankedHit>>;
    /// Messages sharing the most and rarest of the words (ranked any-term search).
    async fn any_term_messages(&self, ask: &Ask<'_>) -> Result<Vec<RankedHit>>;
    /// Summaries holding any of the words, by BM25.
    async fn any_term_summaries(&self, ask: &Ask<'_>) -> Result<Vec<RankedHit>>;
    /// Messages `re` matches, newest first, scanning at most `max_scan` rows; whether the
    /// scan stopped there.
    async fn regex_messages(
        &self,
        re: &regex::Regex,
        ask: &Ask<'_>,
        max_scan: i64,
    ) -> Result<(Vec<RankedHit>, bool)>;
    /// Summaries `re` matches, newest first, appended to `hits` until it holds `ask.want`.
    async fn regex_summaries(
        &self,
        re: &regex::Regex,
        ask: &Ask<'_>,
        hits: &mut Vec<RankedHit>,
    ) -> Result<()>;
}

/// `lcm_grep` over a store's [`GrepReads`]. The semantic modes get their lexical half here
/// ([`crate::core::semantic`] adds the vectors above it); `auto` without a model is full-text.
pub(crate) async fn grep(r: &impl GrepReads, q: &GrepQuery) -> Result<GrepReport> {
    let limit = q.limit.clamp(1, 200);
    let convs = r.scope(&q.scope).await?;
    let mut report = empty_report();
    if convs.is_empty() {
        return Ok(report);
    }
    let want = q.offset + limit + 1;
    let mut hits: Vec<RankedHit> = Vec::new();
    let (messages, summaries) = (
        q.target != GrepTarget::Summaries,
        q.target != GrepTarget::Messages,
    );
    match q.mode {
        GrepMode::FullText | GrepMode::Auto => {
            let Some(fts) = sanitize_fts_query(&q.pattern) else {
                return Ok(report);
            };
            let needles = fts_needles(&fts);
            let ask = Ask {
                convs: &convs,
                want,
                words: &needles,
                query: &fts,
                sort: q.sort,
            };
            if messages {
                hits.extend(r.full_text_messages(&ask).await?);
            }
            if summaries {
                hits.extend(r.full_text_summaries(&ask).await?);
            }
            order_hits(&mut hits, q.sort);
            report.fts_query = Some(fts);
        }
        GrepMode::AnyTerm | GrepMode::Semantic | GrepMode::Hybrid => {
            let terms = crate::core::search::query_terms(&q.pattern);
            if terms.is_empty() {
                return Ok(report);
            }
            let fts = any_term_fts(&terms);
            let ask = Ask {
                convs: &convs,
                want,
                words: &terms,
                query: &fts,
                sort: GrepSort::Relevance,
            };
            if messages {
                hits.extend(r.any_term_messages(&ask).await?);
            }
            if summaries {
                hits.extend(r.any_term_summaries(&ask).await?);
            }
            order_hits(&mut hits, GrepSort::Relevance);
            report.fts_query = Some(fts);
        }
        GrepMode::Regex => {
            let re = grep_regex(&q.pattern)?;
            let ask = Ask {
                convs: &convs,
                want,
                words: &[],
                query: &q.pattern,
                sort: GrepSort::Recency,
            };
            if messages {
                let max_scan = (q.max_scan_rows as i64).max(1);
                let (found, truncated) = r.regex_messages(&re, &ask, max_scan).await?;
                report.scan_truncated = truncated;
                hits.extend(found);
            }
            if summaries && hits.len() < want {
                r.regex_summaries(&re, &ask, &mut hits).await?;
            }
        }
    }
    page_hits(&mut report, hits, q.offset, limit);
    Ok(report)
}

/// A stored summary as `lcm_describe` shows it: the dashboard's row, its conversation and its
/// whole text.
pub(crate) struct SummaryRecord {
    pub row: SummaryRow,
    pub conv_id: i64,
    pub text: String,
}

/// A stored message as `lcm_describe` shows it: the dashboard's row (the codec's columns), its
/// conversation and its tool call id.
pub(crate) struct MessageRecord {
    pub row: MessageRow,
    pub conv_id: i64,
    pub tool_call_id: Option<String>,
}

/// What `lcm_describe` and `lcm_expand` read from a store, each one query; [`describe`] and
/// [`expand`] decide the rest, once for every store. A store answers them from one snapshot
/// (SQLite: one read-thread job; PostgreSQL: one repeatable-read transaction). `kind` is the
/// stored item kind: 0 a message, 1 a summary.
pub(crate) trait RecordReads {
    /// Summary `id`'s row, `None` when there is none.
    async fn summary(&self, id: i64) -> Result<Option<SummaryRecord>>;
    /// Message `id`'s row, `None` when there is none.
    async fn message(&self, id: i64) -> Result<Option<MessageRecord>>;
    /// The conversation an item is stored in, `None` when there is no such item.
    async fn conversation_of(&self, id: RecordId) -> Result<Option<i64>>;
    /// The agent a conversation belongs to.
    async fn agent_of(&self, conv_id: i64) -> Result<Option<String>>;
    /// A summary's children, in order.
    async fn children(&self, id: i64) -> Result<Vec<RecordId>>;
    /// The summaries holding item `(kind, id)`, in id order.
    async fn parents(&self, kind: i64, id: i64) -> Result<Vec<String>>;
    /// Whether item `(kind, id)` is in some conversation's frontier.
    async fn in_frontier(&self, kind: i64, id: i64) -> Result<bool>;
    /// The expansion items of `ids`, in their order (an id not stored is an error in its
    /// place).
    async fn expanded(&self, ids: &[RecordId]) -> Result<Vec<Result<ExpandedItem>>>;
}

/// `NotFound(id)` when `agent` is given and conversation `conv_id` is not its own.
async fn check_scope(
    r: &impl RecordReads,
    conv_id: i64,
    agent: Option<&str>,
    id: &str,
) -> Result<()> {
    if let Some(agent) = agent {
        if r.agent_of(conv_id).await?.as_deref() != Some(agent) {
            return Err(LosslessError::NotFound(id.to_owned()));
        }
    }
    Ok(())
}

/// `lcm_describe`: a summary's metadata and links, or a message decoded; `agent` restricts it
/// to that agent's conversations (`None`: the operator's, unrestricted).
pub(crate) async fn describe(
    r: &impl RecordReads,
    id: &str,
    agent: Option<&str>,
) -> Result<DescribeReport> {
    let not_found = || LosslessError::NotFound(id.to_owned());
    match ids::parse(id)? {
        RecordId::Summary(sid) => {
            let SummaryRecord { row, conv_id, text } =
                r.summary(sid).await?.ok_or_else(not_found)?;
            check_scope(r, conv_id, agent, id).await?;
            let children = r
                .children(sid)
                .await?
                .into_iter()
                .map(|c| c.to_string())
                .collect();
            Ok(DescribeReport::Summary(SummaryInfo {
                id: ids::summary_id(sid),
                conversation_id: conv_id,
                depth: row.depth,
                tokens: row.tokens,
                source_tokens: row.source_tokens,
                seq_range: (row.first_seq, row.last_seq),
                from_ts: row.from_ts,
                to_ts: row.to_ts,
                summarizer: row.summarizer,
                in_frontier: r.in_frontier(1, sid).await?,
                parents: r.parents(1, sid).await?,
                children,
                text,
            }))
        }
        RecordId::Message(mid) => {
            let MessageRecord {
                row,
                conv_id,
                tool_call_id,
            } = r.message(mid).await?.ok_or_else(not_found)?;
            check_scope(r, conv_id, agent, id).await?;
            let message = codec::decode(row.role, &row.text, row.skeleton.as_deref(), row.ts)?;
            Ok(DescribeReport::Message(MessageInfo {
                id: ids::message_id(mid),
                conversation_id: conv_id,
                seq: row.seq,
                role: message.role().to_owned(),
                tokens: row.tokens,
                ts: row.ts,
                tool_call_id,
                in_frontier: r.in_frontier(0, mid).await?,
                parents: r.parents(0, mid).await?,
                message,
            }))
        }
    }
}

/// `lcm_expand`: a summary's children (a message: itself) within `max_tokens`, scoped as
/// [`describe`].
pub(crate) async fn expand(
    r: &impl RecordReads,
    id: &str,
    max_tokens: u64,
    agent: Option<&str>,
) -> Result<ExpandReport> {
    let rid = ids::parse(id)?;
    let conv = r
        .conversation_of(rid)
        .await?
        .ok_or_else(|| LosslessError::NotFound(id.to_owned()))?;
    check_scope(r, conv, agent, id).await?;
    let children = match rid {
        RecordId::Summary(sid) => r.children(sid).await?,
        RecordId::Message(_) => vec![rid],
    };
    let items = r.expanded(&children).await?;
    cap_expansion(rid.to_string(), children.len(), items, max_tokens)
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
