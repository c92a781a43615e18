//! Read-only views of one conversation for the gateway's dashboard: the summary DAG a layer at
//! a time (roots, then the children of one node on demand), a page of stored messages by
//! sequence, the path from a record up to its root, and the compaction timeline.
//!
//! Every query is bounded by an index (`summaries_conv`, `summary_children` and its
//! `summary_children_child` index, `messages_seq`) and by its page size, so a 10,000-message
//! conversation costs what is shown, not what is stored. Nothing here writes: callers run these
//! views with [`crate::store::LosslessStore::call_read`], on the store's read thread, off the
//! path of turns.

use rusqlite::{params, OptionalExtension};
use serde::Serialize;

use crate::error::{LosslessError, Result};
use crate::ids::{self, RecordId};
use crate::store::codec;
use crate::store::{ConvKey, ConvRow, Db};

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
}

/// The start of `text`, at most [`PREVIEW_CHARS`] characters, `…` when cut.
pub fn preview(text: &str) -> String {
    let t = text.trim();
    match t.char_indices().nth(PREVIEW_CHARS) {
        Some((i, _)) => format!("{}…", &t[..i]),
        None => t.to_owned(),
    }
}

const SUMMARY_NODE_COLS: &str = "s.id, s.depth, s.tokens, s.source_tokens, s.first_seq, s.last_seq, s.from_ts, s.to_ts, s.summarizer, \
     substr(s.text, 1, 1000), \
     (SELECT count(*) FROM summary_children c WHERE c.summary_id = s.id)";

fn summary_node(r: &rusqlite::Row<'_>) -> rusqlite::Result<DagNode> {
    let text: String = r.get(9)?;
    Ok(DagNode {
        id: ids::summary_id(r.get(0)?),
        kind: "summary",
        depth: Some(r.get(1)?),
        role: None,
        tokens: r.get(2)?,
        source_tokens: r.get(3)?,
        first_seq: r.get(4)?,
        last_seq: r.get(5)?,
        from_ts: r.get(6)?,
        to_ts: r.get(7)?,
        summarizer: Some(r.get(8)?),
        in_frontier: false,
        child_count: r.get(10)?,
        preview: preview(&text),
    })
}

/// The ids in a conversation's active frontier: messages, summaries.
struct Frontier {
    messages: std::collections::HashSet<i64>,
    summaries: std::collections::HashSet<i64>,
}

impl Frontier {
    fn mark(&self, nodes: &mut [DagNode]) {
        for n in nodes {
            n.in_frontier = match ids::parse(&n.id) {
                Ok(RecordId::Summary(id)) => self.summaries.contains(&id),
                Ok(RecordId::Message(id)) => self.messages.contains(&id),
                Err(_) => false,
            };
        }
    }
}

impl Db {
    fn frontier_of(&self, conv_id: i64) -> Result<Frontier> {
        let mut f = Frontier {
            messages: Default::default(),
            summaries: Default::default(),
        };
        let mut st = self
            .conn
            .prepare_cached("SELECT kind, item_id FROM frontier WHERE conv_id = ?1")?;
        let rows = st.query_map([conv_id], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
        })?;
        for row in rows {
            let (kind, id) = row?;
            if kind == 0 {
                f.messages.insert(id);
            } else {
                f.summaries.insert(id);
            }
        }
        Ok(f)
    }

    /// The active conversation of a session key, or `NotFound` naming it.
    pub fn conversation_of(&self, key: &ConvKey) -> Result<ConvRow> {
        self.conversation(key)?.ok_or_else(|| {
            LosslessError::NotFound(format!("no lossless conversation for {}", key.session_key))
        })
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
        let mut roots = self
            .conn
            .prepare_cached(&format!(
                "SELECT {SUMMARY_NODE_COLS} FROM summaries s WHERE s.conv_id = ?1
                 AND NOT EXISTS(SELECT 1 FROM summary_children c WHERE c.kind = 1 AND c.child_id = s.id)
                 ORDER BY s.first_seq"
            ))?
            .query_map([conv.id], summary_node)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        self.frontier_of(conv.id)?.mark(&mut roots);
        // Messages after the last one a summary covers (summaries cover a prefix in order).
        let covered_to: Option<i64> = self
            .conn
            .prepare_cached("SELECT max(last_seq) FROM summaries WHERE conv_id = ?1")?
            .query_row([conv.id], |r| r.get(0))?;
        let from = covered_to.map_or(0, |s| s + 1);
        let uncovered = self
            .conn
            .prepare_cached(
                "SELECT count(*), ifnull(sum(tokens), 0), min(seq), max(seq) FROM messages WHERE conv_id = ?1 AND seq >= ?2",
            )?
            .query_row(params![conv.id, from], |r| {
                Ok(UncoveredRange { count: r.get(0)?, tokens: r.get(1)?, first_seq: r.get(2)?, last_seq: r.get(3)? })
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
        let RecordId::Summary(sid) = ids::parse(id)? else {
            return Err(LosslessError::InvalidInput(format!(
                "{id} is a message; only summaries have children"
            )));
        };
        let owner: Option<i64> = self
            .conn
            .prepare_cached("SELECT conv_id FROM summaries WHERE id = ?1")?
            .query_row([sid], |r| r.get(0))
            .optional()?;
        if owner != Some(conv.id) {
            return Err(LosslessError::NotFound(format!(
                "{id} in {}",
                conv.session_key
            )));
        }
        let mut out = Vec::new();
        let mut summaries = self.conn.prepare_cached(&format!(
            "SELECT {SUMMARY_NODE_COLS} FROM summary_children c JOIN summaries s ON s.id = c.child_id
             WHERE c.summary_id = ?1 AND c.kind = 1 ORDER BY c.ord"
        ))?;
        out.extend(
            summaries
                .query_map([sid], summary_node)?
                .collect::<rusqlite::Result<Vec<_>>>()?,
        );
        let mut messages = self.conn.prepare_cached(
            "SELECT m.id, m.seq, m.role, m.tokens, m.ts, m.skeleton, m.text
             FROM summary_children c JOIN message_rows m ON m.id = c.child_id
             WHERE c.summary_id = ?1 AND c.kind = 0 ORDER BY c.ord",
        )?;
        let rows = messages
            .query_map([sid], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                    r.get::<_, Option<String>>(5)?,
                    r.get::<_, String>(6)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        for (mid, seq, role, tokens, ts, skeleton, text) in rows {
            let message = codec::decode(role, &text, skeleton.as_deref(), ts)?;
            out.push(DagNode {
                id: ids::message_id(mid),
                kind: "message",
                depth: None,
                role: Some(message.role().to_owned()),
                tokens,
                source_tokens: tokens,
                first_seq: seq,
                last_seq: seq,
                from_ts: ts,
                to_ts: ts,
                summarizer: None,
                in_frontier: false,
                child_count: 0,
                preview: preview(&message_text(&message)),
            });
        }
        self.frontier_of(conv.id)?.mark(&mut out);
        Ok(out)
    }

    /// The summaries from `id` up to its root, root first (`id` itself last).
    pub fn dag_path(&self, conv: &ConvRow, id: &str) -> Result<Vec<String>> {
        let (mut kind, mut item) = match ids::parse(id)? {
            RecordId::Message(m) => (0, m),
            RecordId::Summary(s) => (1, s),
        };
        let owner: Option<i64> = if kind == 0 {
            self.conn
                .prepare_cached("SELECT conv_id FROM messages WHERE id = ?1")?
                .query_row([item], |r| r.get(0))
                .optional()?
        } else {
            self.conn
                .prepare_cached("SELECT conv_id FROM summaries WHERE id = ?1")?
                .query_row([item], |r| r.get(0))
                .optional()?
        };
        if owner != Some(conv.id) {
            return Err(LosslessError::NotFound(format!(
                "{id} in {}",
                conv.session_key
            )));
        }
        let mut path = vec![id.trim().to_owned()];
        let mut parent = self.conn.prepare_cached(
            "SELECT summary_id FROM summary_children WHERE kind = ?1 AND child_id = ?2 ORDER BY summary_id LIMIT 1",
        )?;
        // A DAG of depth d has d + 1 levels; the bound only guards against a corrupt cycle.
        for _ in 0..256 {
            let Some(p) = parent
                .query_row(params![kind, item], |r| r.get::<_, i64>(0))
                .optional()?
            else {
                break;
            };
            path.push(ids::summary_id(p));
            (kind, item) = (1, p);
        }
        path.reverse();
        Ok(path)
    }

    /// Stored messages from sequence `from_seq` on, at most `limit`.
    pub fn message_page(&self, conv: &ConvRow, from_seq: i64, limit: usize) -> Result<MessagePage> {
        let limit = limit.clamp(1, 500);
        let rows = self
            .conn
            .prepare_cached(
                "SELECT m.id, m.seq, m.role, m.tokens, m.ts, m.skeleton, m.text,
                        (SELECT c.summary_id FROM summary_children c WHERE c.kind = 0 AND c.child_id = m.id LIMIT 1)
                 FROM message_rows m WHERE m.conv_id = ?1 AND m.seq >= ?2 ORDER BY m.seq LIMIT ?3",
            )?
            .query_map(params![conv.id, from_seq, limit as i64 + 1], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                    r.get::<_, Option<String>>(5)?,
                    r.get::<_, String>(6)?,
                    r.get::<_, Option<i64>>(7)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let frontier = self.frontier_of(conv.id)?;
        let mut messages = Vec::with_capacity(rows.len().min(limit));
        let mut next_seq = None;
        for (i, (mid, seq, role, tokens, ts, skeleton, text, parent)) in
            rows.into_iter().enumerate()
        {
            if i == limit {
                next_seq = Some(seq);
                break;
            }
            messages.push(StoredMessage {
                id: ids::message_id(mid),
                seq,
                tokens,
                in_frontier: frontier.messages.contains(&mid),
                parent: parent.map(ids::summary_id),
                message: codec::decode(role, &text, skeleton.as_deref(), ts)?,
            });
        }
        Ok(MessagePage {
            total: conv.msg_count,
            from_seq,
            messages,
            next_seq,
        })
    }

    /// The sequence of message `id` in `conv`.
    pub fn message_seq(&self, conv: &ConvRow, id: &str) -> Result<i64> {
        let RecordId::Message(mid) = ids::parse(id)? else {
            return Err(LosslessError::InvalidInput(format!(
                "{id} is not a message id"
            )));
        };
        self.conn
            .prepare_cached("SELECT seq FROM messages WHERE id = ?1 AND conv_id = ?2")?
            .query_row(params![mid, conv.id], |r| r.get(0))
            .optional()?
            .ok_or_else(|| LosslessError::NotFound(format!("{id} in {}", conv.session_key)))
    }

    /// Every compaction pass of `conv`, oldest first: summaries written together (same time,
    /// same depth) are one event.
    pub fn compaction_timeline(&self, conv: &ConvRow) -> Result<Vec<CompactionEvent>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT created_at, depth, count(*), sum(source_tokens), sum(tokens), min(first_seq), max(last_seq),
                        group_concat(DISTINCT summarizer)
                 FROM summaries WHERE conv_id = ?1 GROUP BY created_at, depth ORDER BY created_at, depth",
            )?
            .query_map([conv.id], |r| {
                let depth: i64 = r.get(1)?;
                Ok(CompactionEvent {
                    at: r.get(0)?,
                    kind: if depth == 0 { "leaf" } else { "condensed" },
                    depth,
                    summaries: r.get(2)?,
                    tokens_before: r.get(3)?,
                    tokens_after: r.get(4)?,
                    first_seq: r.get(5)?,
                    last_seq: r.get(6)?,
                    summarizer: r.get::<_, Option<String>>(7)?.unwrap_or_default(),
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?)
    }
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
                    ContentBlock::Unknown(map) => {
                        map.get("type").and_then(|t| t.as_str()).map(|t| format!("[{t}]").into())
                    }
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

impl Db {
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
                let kind: i64 = r.get(0)?;
                let id: i64 = r.get(1)?;
                Ok(FrontierItem {
                    id: if kind == 0 {
                        ids::message_id(id)
                    } else {
                        ids::summary_id(id)
                    },
                    tokens: r.get(2)?,
                    first_seq: r.get::<_, Option<i64>>(3)?.unwrap_or(-1),
                    last_seq: r.get::<_, Option<i64>>(4)?.unwrap_or(-1),
                })
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
}

impl Db {
    /// Every summarizer that wrote a stored summary, with how many.
    pub fn summarizers_used(&self) -> Result<Vec<(String, i64)>> {
        Ok(self
            .conn
            .prepare_cached("SELECT summarizer, count(*) FROM summaries GROUP BY summarizer ORDER BY count(*) DESC")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?)
    }
}
