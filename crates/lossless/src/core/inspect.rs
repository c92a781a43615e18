//! Read-only views of one conversation for the gateway's dashboard: the summary DAG a layer at
//! a time (roots, then the children of one node on demand), a page of stored messages by
//! sequence, the path from a record up to its root, the compaction timeline, the frontier with
//! its spans, and per-conversation counts for the sessions list.
//!
//! The dashboard must show the same thing whichever database holds the store, so the views
//! are one trait, [`Inspect`], that every [`crate::Backend`] implements (it is a supertrait of
//! it): `store/inspect.rs` reads SQLite, `pg/inspect.rs` PostgreSQL. Each backend only runs SQL
//! and hands back rows (`SummaryRow`, `MessageRow`, `SummaryStamp`, frontier pairs);
//! everything else is here, written once: building nodes and their previews, marking what is
//! in the frontier, the paging rules ([`PageAt`], `page_of`), grouping summaries into
//! compaction passes (`timeline_of`), the path's order, and the errors with their wording.
//!
//! Every query is bounded by an index (summaries by conversation, `summary_children` both
//! ways, messages by `(conv_id, seq)`) and by its page size, so a 10,000-message conversation
//! costs what is shown, not what is stored. A view that reads several times reads one snapshot
//! (SQLite's read transaction on the store's read thread, PostgreSQL's repeatable-read
//! transaction), so its parts agree. Nothing here writes, and nothing runs on the path of
//! turns.

use std::collections::HashSet;

use async_trait::async_trait;
use serde::Serialize;

use crate::core::codec;
use crate::core::conv::{ConvKey, ConvRow};
use crate::core::ids::{self, RecordId};
use crate::error::{LosslessError, Result};

/// Characters of text a node carries as its preview.
pub const PREVIEW_CHARS: usize = 240;

/// One node of the DAG: a summary, or a stored message under a leaf summary.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DagNode {
    /// `sum_<n>` or `msg_<n>`.
    pub id: String,
    /// `summary` or `message`.
    pub kind: &'static str,
    /// Summary depth (0 = leaf); messages have none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depth: Option<i64>,
    /// Message role (`user`, `assistant`, `toolResult`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Tokens of the node's own text (what the model pays to see it).
    pub tokens: i64,
    /// Tokens of what a summary covers (a message: its own tokens).
    pub source_tokens: i64,
    /// First message sequence covered.
    pub first_seq: i64,
    /// Last message sequence covered.
    pub last_seq: i64,
    /// Time range start (ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_ts: Option<i64>,
    /// Time range end (ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to_ts: Option<i64>,
    /// Which summarizer wrote it (summaries).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summarizer: Option<String>,
    /// In the active frontier (what assembly draws from).
    pub in_frontier: bool,
    /// Direct children (summaries).
    pub child_count: i64,
    /// The start of its text.
    pub preview: String,
}

/// One depth of the DAG.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DagLayer {
    /// Depth (0 = leaf summaries).
    pub depth: i64,
    /// Summaries at this depth.
    pub count: i64,
    /// Their tokens.
    pub tokens: i64,
    /// Tokens they cover.
    pub source_tokens: i64,
    /// How many of them are in the active frontier.
    pub in_frontier: i64,
}

/// The top of a conversation's DAG.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DagOverview {
    /// The conversation.
    pub conversation: ConvRow,
    /// Layers, deepest first.
    pub layers: Vec<DagLayer>,
    /// Summaries no other summary contains, in message order.
    pub roots: Vec<DagNode>,
    /// Stored messages no summary covers (the raw tail): count and sequence range.
    pub uncovered: UncoveredRange,
}

/// Messages outside every summary.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UncoveredRange {
    /// How many.
    pub count: i64,
    /// Their tokens.
    pub tokens: i64,
    /// First sequence, when any.
    pub first_seq: Option<i64>,
    /// Last sequence, when any.
    pub last_seq: Option<i64>,
}

/// One stored message of a page.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredMessage {
    /// `msg_<n>`.
    pub id: String,
    /// Sequence in the conversation.
    pub seq: i64,
    /// Stored token count.
    pub tokens: i64,
    /// Raw in the active frontier (not summarized away).
    pub in_frontier: bool,
    /// The leaf summary covering it, when one does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The message as received.
    pub message: clawctx_protocol::AgentMessage,
}

/// A page of stored messages.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessagePage {
    /// Messages stored in the conversation.
    pub total: i64,
    /// Sequence of the first message returned.
    pub from_seq: i64,
    /// The page.
    pub messages: Vec<StoredMessage>,
    /// Where the next page starts, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_seq: Option<i64>,
}

/// One compaction as the store saw it: the summaries one pass wrote at one depth.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionEvent {
    /// When (ms).
    pub at: i64,
    /// `leaf` (messages into depth-0 summaries) or `condensed` (summaries into a deeper one).
    pub kind: &'static str,
    /// Depth written.
    pub depth: i64,
    /// Summaries written.
    pub summaries: i64,
    /// Tokens of what they replaced.
    pub tokens_before: i64,
    /// Tokens of the summaries.
    pub tokens_after: i64,
    /// Message range covered.
    pub first_seq: i64,
    /// Message range covered.
    pub last_seq: i64,
    /// Summarizer(s) used, comma-separated.
    pub summarizer: String,
    /// The summaries written, in write order: the first [`PASS_IDS_LISTED`] (`summaries` is
    /// the count), so the dashboard can open what a pass made without a pass of thousands
    /// weighing on every session view.
    pub summary_ids: Vec<String>,
}

/// Summary ids a [`CompactionEvent`] lists.
pub const PASS_IDS_LISTED: usize = 32;

/// The start of `text`, at most [`PREVIEW_CHARS`] characters, `…` when cut.
pub fn preview(text: &str) -> String {
    let t = text.trim();
    match t.char_indices().nth(PREVIEW_CHARS) {
        Some((i, _)) => format!("{}…", &t[..i]),
        None => t.to_owned(),
    }
}

/// A conversation with its compaction passes (the sessions list).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversationStats {
    /// The conversation, archived ones included.
    pub conversation: ConvRow,
    /// Compaction passes that wrote its summaries (summaries of one time and depth are one).
    pub compactions: i64,
}

/// What the session view shows of a conversation, read in one snapshot.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    /// The conversation.
    pub conversation: ConvRow,
    /// Its compaction passes, oldest first.
    pub timeline: Vec<CompactionEvent>,
    /// Its active frontier in order.
    pub frontier: Vec<FrontierItem>,
}

/// A conversation with its frontier only: what the per-turn trace reads after every assembly
/// (the timeline, every summary's stamp, is not read for it).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FrontierView {
    /// The conversation.
    pub conversation: ConvRow,
    /// Its active frontier in order.
    pub frontier: Vec<FrontierItem>,
}

/// Where a page of stored messages starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PageAt {
    /// At this sequence (negative: 0).
    From(i64),
    /// Centred on this message (`msg_<n>`).
    Around(String),
    /// The newest page.
    Newest,
}

/// Messages a page holds at most.
pub const MAX_PAGE: usize = 500;

/// The dashboard's read-only views of a lossless store (see the module header). Every
/// [`crate::Backend`] implements it; the views of one backend and the other are the same for
/// the same data (`tests/inspect_parity.rs`).
#[async_trait]
pub trait Inspect: Send + Sync {
    /// Every conversation, archived ones included, with its compaction passes, in id order.
    async fn conversation_stats(&self) -> Result<Vec<ConversationStats>>;
    /// The active conversation of `key` with its timeline and frontier; `None` when the store
    /// has no conversation for it.
    async fn session_view(&self, key: &ConvKey) -> Result<Option<SessionView>>;
    /// The active conversation of `key` with its frontier (no timeline), in one snapshot.
    async fn frontier_view(&self, key: &ConvKey) -> Result<Option<FrontierView>>;
    /// Layers, roots and the raw tail of the DAG of `key`'s active conversation.
    async fn dag_overview(&self, key: &ConvKey) -> Result<DagOverview>;
    /// The children of summary `id` (summaries, or the messages of a leaf) in order.
    async fn dag_children(&self, key: &ConvKey, id: &str) -> Result<Vec<DagNode>>;
    /// The summaries from `id` up to its root, root first (`id` itself last).
    async fn dag_path(&self, key: &ConvKey, id: &str) -> Result<Vec<String>>;
    /// A page of at most `limit` (1 to [`MAX_PAGE`]) stored messages starting `at`.
    async fn message_page(&self, key: &ConvKey, at: PageAt, limit: usize) -> Result<MessagePage>;
    /// Every summarizer that wrote a stored summary, with how many, most first.
    async fn summarizers_used(&self) -> Result<Vec<(String, i64)>>;
}

// ---------------------------------------------------------------------------------------------
// What both backends share: rows in, views out.

/// Characters of a summary's text a backend reads for its preview (more than
/// [`PREVIEW_CHARS`], so leading whitespace trimmed away still leaves enough).
pub(crate) const SUMMARY_HEAD_CHARS: i64 = 1000;

/// Levels [`path_from`]'s walk climbs at most: a DAG of depth d has d + 1 levels; the bound only
/// guards against a corrupt cycle.
pub(crate) const PATH_MAX_HOPS: usize = 256;

/// `NotFound` for a session key without a conversation.
pub(crate) fn no_conversation(key: &ConvKey) -> LosslessError {
    LosslessError::NotFound(format!("no lossless conversation for {}", key.session_key))
}

/// `NotFound` for an id that is not in `conv`.
pub(crate) fn not_in(id: &str, conv: &ConvRow) -> LosslessError {
    LosslessError::NotFound(format!("{id} in {}", conv.session_key))
}

/// The summary row id of `id`, or `InvalidInput` when it names a message (only summaries have
/// children) or nothing.
pub(crate) fn summary_of(id: &str) -> Result<i64> {
    match ids::parse(id)? {
        RecordId::Summary(sid) => Ok(sid),
        RecordId::Message(_) => Err(LosslessError::InvalidInput(format!(
            "{id} is a message; only summaries have children"
        ))),
    }
}

/// `id` as a frontier/`summary_children` item: `(kind, row id)`, kind 0 = message, 1 = summary.
pub(crate) fn item_of(id: &str) -> Result<(i64, i64)> {
    Ok(match ids::parse(id)? {
        RecordId::Message(m) => (0, m),
        RecordId::Summary(s) => (1, s),
    })
}

/// The message row id of `id`, or `InvalidInput` when it is not a message id.
pub(crate) fn message_of(id: &str) -> Result<i64> {
    match ids::parse(id)? {
        RecordId::Message(mid) => Ok(mid),
        RecordId::Summary(_) => Err(LosslessError::InvalidInput(format!(
            "{id} is not a message id"
        ))),
    }
}

/// A summary as a backend reads it for a node.
#[derive(Clone, Debug)]
pub(crate) struct SummaryRow {
    pub id: i64,
    pub depth: i64,
    pub tokens: i64,
    pub source_tokens: i64,
    pub first_seq: i64,
    pub last_seq: i64,
    pub from_ts: Option<i64>,
    pub to_ts: Option<i64>,
    pub summarizer: String,
    /// The first [`SUMMARY_HEAD_CHARS`] characters of its text.
    pub head: String,
    /// Its direct children (summaries or messages).
    pub child_count: i64,
}

impl SummaryRow {
    /// The DAG node (not yet marked for the frontier).
    pub(crate) fn into_node(self) -> DagNode {
        DagNode {
            id: ids::summary_id(self.id),
            kind: "summary",
            depth: Some(self.depth),
            role: None,
            tokens: self.tokens,
            source_tokens: self.source_tokens,
            first_seq: self.first_seq,
            last_seq: self.last_seq,
            from_ts: self.from_ts,
            to_ts: self.to_ts,
            summarizer: Some(self.summarizer),
            in_frontier: false,
            child_count: self.child_count,
            preview: preview(&self.head),
        }
    }
}

/// A stored message as a backend reads it: the codec's columns.
#[derive(Clone, Debug)]
pub(crate) struct MessageRow {
    pub id: i64,
    pub seq: i64,
    pub role: i64,
    pub tokens: i64,
    pub ts: Option<i64>,
    pub skeleton: Option<String>,
    pub text: String,
}

impl MessageRow {
    fn decode(&self) -> Result<clawctx_protocol::AgentMessage> {
        codec::decode(self.role, &self.text, self.skeleton.as_deref(), self.ts)
    }

    /// The DAG node (not yet marked for the frontier).
    pub(crate) fn into_node(self) -> Result<DagNode> {
        let message = self.decode()?;
        Ok(DagNode {
            id: ids::message_id(self.id),
            kind: "message",
            depth: None,
            role: Some(message.role().to_owned()),
            tokens: self.tokens,
            source_tokens: self.tokens,
            first_seq: self.seq,
            last_seq: self.seq,
            from_ts: self.ts,
            to_ts: self.ts,
            summarizer: None,
            in_frontier: false,
            child_count: 0,
            preview: preview(&message_text(&message)),
        })
    }
}

/// The ids in a conversation's active frontier: messages, summaries.
#[derive(Debug, Default)]
pub(crate) struct Frontier {
    messages: HashSet<i64>,
    summaries: HashSet<i64>,
}

impl FromIterator<(i64, i64)> for Frontier {
    /// From `(kind, item id)` pairs (kind 0 = message, 1 = summary).
    fn from_iter<I: IntoIterator<Item = (i64, i64)>>(items: I) -> Self {
        let mut f = Frontier::default();
        for (kind, id) in items {
            if kind == 0 {
                f.messages.insert(id);
            } else {
                f.summaries.insert(id);
            }
        }
        f
    }
}

impl Frontier {
    /// Sets `in_frontier` on each node.
    pub(crate) fn mark(&self, nodes: &mut [DagNode]) {
        for n in nodes {
            n.in_frontier = match ids::parse(&n.id) {
                Ok(RecordId::Summary(id)) => self.summaries.contains(&id),
                Ok(RecordId::Message(id)) => self.messages.contains(&id),
                Err(_) => false,
            };
        }
    }
}

/// The children of a summary: its summary children, then its message children, each in their
/// order under it, marked for the frontier.
pub(crate) fn children_of(
    summaries: Vec<SummaryRow>,
    messages: Vec<MessageRow>,
    frontier: &Frontier,
) -> Result<Vec<DagNode>> {
    let mut out: Vec<DagNode> = summaries.into_iter().map(SummaryRow::into_node).collect();
    for m in messages {
        out.push(m.into_node()?);
    }
    frontier.mark(&mut out);
    Ok(out)
}

/// The roots of a DAG in message order, marked for the frontier.
pub(crate) fn roots_of(roots: Vec<SummaryRow>, frontier: &Frontier) -> Vec<DagNode> {
    let mut out: Vec<DagNode> = roots.into_iter().map(SummaryRow::into_node).collect();
    frontier.mark(&mut out);
    out
}

/// The first sequence the raw tail can start at: messages after the last one a summary
/// covers (summaries cover a prefix in order).
pub(crate) fn uncovered_from(covered_to: Option<i64>) -> i64 {
    covered_to.map_or(0, |s| s + 1)
}

/// The path of `id` given the summaries above it, nearest first: root first, `id` last.
pub(crate) fn path_from(id: &str, parents: Vec<i64>) -> Vec<String> {
    let mut path = vec![id.trim().to_owned()];
    path.extend(parents.into_iter().map(ids::summary_id));
    path.reverse();
    path
}

impl PageAt {
    /// The message id a page is centred on, when it is: its row id (`InvalidInput` when `at`
    /// names no message).
    pub(crate) fn around(&self) -> Result<Option<(i64, &str)>> {
        match self {
            PageAt::Around(id) => Ok(Some((message_of(id)?, id.as_str()))),
            _ => Ok(None),
        }
    }

    /// Where a page of `limit` starts in `conv`; `around_seq`: the sequence of the message of
    /// [`PageAt::Around`].
    pub(crate) fn start(&self, conv: &ConvRow, around_seq: Option<i64>, limit: usize) -> i64 {
        let limit = page_limit(limit) as i64;
        match self {
            PageAt::Around(_) => (around_seq.unwrap_or(0) - limit / 2).max(0),
            PageAt::From(f) => (*f).max(0),
            PageAt::Newest => (conv.next_seq - limit).max(0),
        }
    }
}

/// A page size within 1 and [`MAX_PAGE`].
pub fn page_limit(limit: usize) -> usize {
    limit.clamp(1, MAX_PAGE)
}

/// A page from up to `limit + 1` rows read from `from_seq` on, in sequence order, each with
/// the leaf summary covering it (the extra row only tells where the next page starts).
pub(crate) fn page_of(
    conv: &ConvRow,
    from_seq: i64,
    limit: usize,
    rows: Vec<(MessageRow, Option<i64>)>,
    frontier: &Frontier,
) -> Result<MessagePage> {
    let limit = page_limit(limit);
    let mut messages = Vec::with_capacity(rows.len().min(limit));
    let mut next_seq = None;
    for (i, (row, parent)) in rows.into_iter().enumerate() {
        if i == limit {
            next_seq = Some(row.seq);
            break;
        }
        messages.push(StoredMessage {
            id: ids::message_id(row.id),
            seq: row.seq,
            tokens: row.tokens,
            in_frontier: frontier.messages.contains(&row.id),
            parent: parent.map(ids::summary_id),
            message: row.decode()?,
        });
    }
    Ok(MessagePage {
        total: conv.msg_count,
        from_seq,
        messages,
        next_seq,
    })
}

/// A summary as the timeline reads it.
#[derive(Clone, Debug)]
pub(crate) struct SummaryStamp {
    /// The summary's row id.
    pub id: i64,
    pub created_at: i64,
    pub depth: i64,
    pub source_tokens: i64,
    pub tokens: i64,
    pub first_seq: i64,
    pub last_seq: i64,
    pub summarizer: String,
}

/// Compaction passes from a conversation's summaries in `(created_at, depth, id)` order:
/// summaries written together (same time, same depth) are one event, its summarizers listed
/// once each in the order they first wrote.
pub(crate) fn timeline_of(stamps: Vec<SummaryStamp>) -> Vec<CompactionEvent> {
    let mut out: Vec<CompactionEvent> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for s in stamps {
        match out.last_mut() {
            Some(e) if e.at == s.created_at && e.depth == s.depth => {
                e.summaries += 1;
                e.tokens_before += s.source_tokens;
                e.tokens_after += s.tokens;
                e.first_seq = e.first_seq.min(s.first_seq);
                e.last_seq = e.last_seq.max(s.last_seq);
                if e.summary_ids.len() < PASS_IDS_LISTED {
                    e.summary_ids.push(ids::summary_id(s.id));
                }
                if !names.contains(&s.summarizer) {
                    e.summarizer.push(',');
                    e.summarizer.push_str(&s.summarizer);
                    names.push(s.summarizer);
                }
            }
            _ => {
                out.push(CompactionEvent {
                    at: s.created_at,
                    kind: if s.depth == 0 { "leaf" } else { "condensed" },
                    depth: s.depth,
                    summaries: 1,
                    tokens_before: s.source_tokens,
                    tokens_after: s.tokens,
                    first_seq: s.first_seq,
                    last_seq: s.last_seq,
                    summarizer: s.summarizer.clone(),
                    summary_ids: vec![ids::summary_id(s.id)],
                });
                names.clear();
                names.push(s.summarizer);
            }
        }
    }
    out
}

/// A frontier row as the view shows it: `(kind, item id, tokens, first seq, last seq)`, the
/// sequences `-1` when the item's row is gone.
pub(crate) fn frontier_item(
    kind: i64,
    id: i64,
    tokens: i64,
    first_seq: Option<i64>,
    last_seq: Option<i64>,
) -> FrontierItem {
    FrontierItem {
        id: if kind == 0 {
            ids::message_id(id)
        } else {
            ids::summary_id(id)
        },
        tokens,
        first_seq: first_seq.unwrap_or(-1),
        last_seq: last_seq.unwrap_or(-1),
    }
}

/// Conversations with their pass counts (`(conversation row id, passes)`).
pub(crate) fn stats_of(convs: Vec<ConvRow>, passes: Vec<(i64, i64)>) -> Vec<ConversationStats> {
    let passes: std::collections::HashMap<i64, i64> = passes.into_iter().collect();
    convs
        .into_iter()
        .map(|c| ConversationStats {
            compactions: passes.get(&c.id).copied().unwrap_or(0),
            conversation: c,
        })
        .collect()
}

/// The text a preview shows: text blocks, tool calls by name, tool results' text.
pub fn message_text(m: &clawctx_protocol::AgentMessage) -> String {
    use clawctx_protocol::{AgentMessage, Content, ContentBlock};
    let content = match m {
        AgentMessage::User(u) => &u.content,
        AgentMessage::Assistant(a) => &a.content,
        AgentMessage::ToolResult(t) => &t.content,
        AgentMessage::Custom(c) => &c.content,
        // Kinds without content blocks (bash runs, summaries, unknown roles): their text.
        _ => return m.plain_text(),
    };
    let mut out = String::new();
    match content {
        Content::Text(t) => out.push_str(t),
        Content::Blocks(blocks) => {
            for b in blocks {
                let piece = match b {
                    ContentBlock::Text(t) => Some(std::borrow::Cow::Borrowed(t.text.as_str())),
                    ContentBlock::ToolCall(c) => Some(format!("[tool call {}]", c.name).into()),
                    ContentBlock::Thinking(_) => None,
                    ContentBlock::Image(_) => Some("[image]".into()),
                    ContentBlock::Unknown(map) => map
                        .get("type")
                        .and_then(|t| t.as_str())
                        .map(|t| format!("[{t}]").into()),
                };
                if let Some(p) = piece {
                    if !out.is_empty() {
                        out.push(' ');
                    }
                    out.push_str(&p);
                }
            }
        }
    }
    out
}

/// One item of the active frontier with the messages it stands for.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FrontierItem {
    /// `msg_<n>` or `sum_<n>`.
    pub id: String,
    /// Model-visible tokens.
    pub tokens: i64,
    /// First message sequence it stands for.
    pub first_seq: i64,
    /// Last message sequence it stands for.
    pub last_seq: i64,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn stamp(at: i64, depth: i64, seqs: (i64, i64), by: &str) -> SummaryStamp {
        SummaryStamp {
            id: at * 100 + seqs.0,
            created_at: at,
            depth,
            source_tokens: 100,
            tokens: 10,
            first_seq: seqs.0,
            last_seq: seqs.1,
            summarizer: by.into(),
        }
    }

    #[test]
    fn summaries_of_one_time_and_depth_are_one_pass_naming_each_summarizer_once() {
        let t = timeline_of(vec![
            stamp(5, 0, (0, 9), "llm"),
            stamp(5, 0, (10, 19), "extractive"),
            stamp(5, 0, (20, 29), "llm"),
            stamp(5, 1, (0, 29), "llm"),
            stamp(9, 0, (30, 39), "llm"),
        ]);
        let got: Vec<_> = t
            .iter()
            .map(|e| {
                (
                    e.at,
                    e.kind,
                    e.summaries,
                    e.tokens_before,
                    e.first_seq,
                    e.last_seq,
                    e.summarizer.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (5, "leaf", 3, 300, 0, 29, "llm,extractive"),
                (5, "condensed", 1, 100, 0, 29, "llm"),
                (9, "leaf", 1, 100, 30, 39, "llm"),
            ]
        );
        let ids: Vec<_> = t.iter().map(|e| e.summary_ids.join(" ")).collect();
        assert_eq!(ids, ["sum_500 sum_510 sum_520", "sum_500", "sum_930"]);
    }

    #[test]
    fn a_pass_lists_its_first_summary_ids_and_counts_them_all() {
        let many: Vec<_> = (0..PASS_IDS_LISTED as i64 + 8)
            .map(|i| stamp(5, 0, (i, i), "llm"))
            .collect();
        let t = timeline_of(many);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].summaries, PASS_IDS_LISTED as i64 + 8);
        assert_eq!(t[0].summary_ids.len(), PASS_IDS_LISTED);
        assert_eq!(t[0].summary_ids[0], "sum_500");
    }

    #[test]
    fn pages_start_where_asked_within_the_conversation() {
        let conv = ConvRow {
            id: 1,
            agent_id: "main".into(),
            session_key: "k".into(),
            active: true,
            next_seq: 100,
            next_ord: 0,
            msg_count: 100,
            msg_tokens: 0,
            raw_bytes: 0,
            frontier_tokens: 0,
            frontier_items: 0,
            epoch: 0,
        };
        assert_eq!(PageAt::Newest.start(&conv, None, 30), 70);
        assert_eq!(
            PageAt::Newest.start(&conv, None, 10_000),
            0,
            "clamped to 500"
        );
        assert_eq!(PageAt::From(-3).start(&conv, None, 10), 0);
        let around = PageAt::Around("msg_7".into());
        assert_eq!(around.around().unwrap().map(|(id, _)| id), Some(7));
        assert_eq!(around.start(&conv, Some(50), 10), 45);
        assert_eq!(around.start(&conv, Some(2), 10), 0);
        assert!(matches!(
            PageAt::Around("sum_7".into()).around(),
            Err(LosslessError::InvalidInput(m)) if m.contains("not a message id")
        ));
    }

    #[test]
    fn a_path_is_root_first_and_previews_are_cut_with_an_ellipsis() {
        assert_eq!(
            path_from(" msg_3 ", vec![7, 9]),
            ["sum_9", "sum_7", "msg_3"]
        );
        let long = "é".repeat(PREVIEW_CHARS + 5);
        let p = preview(&format!("  {long}  "));
        assert_eq!(p.chars().count(), PREVIEW_CHARS + 1);
        assert!(p.ends_with('…'));
        assert_eq!(preview("  short  "), "short");
    }
}
