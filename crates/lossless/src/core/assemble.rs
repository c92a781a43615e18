//! Budgeted assembly: what the model sees this turn.
//!
//! Items are taken newest-first — the host's live messages the store has not seen yet (the
//! current prompt), then the frontier read backwards through its primary key — and grouped into
//! pairing units (an assistant message with tool calls plus its results; every other item alone)
//! so a tool result is never first without its call. Units are kept while they fit; the first
//! that does not fit ends the walk, so the kept set is a contiguous suffix and the prefix bytes
//! stay stable between turns (prompt cache). Costs come from the stored token counts; only kept
//! rows are decoded, so the work is proportional to what is returned, not to history length.
//! The sum of the returned messages' estimates never exceeds the budget: a lone unit that is
//! too big is shortened with `truncate_middle`, and dropped if even that cannot fit.
//!
//! Cache-stable front: providers cache the longest unchanged prefix of a request, so the oldest
//! item shown must not move every turn. Mostly compaction sees to it: with the fresh tail capped
//! in tokens (`freshTailMaxTokens`), a compaction brings the whole frontier under the budget,
//! the context is then the whole frontier (summaries first, then the raw messages since) and
//! grows by appending until the next compaction, which rewrites the front once for many turns.
//! When the frontier is over the history budget anyway (compaction failed or is not done yet),
//! the rule below keeps the front still.
//!
//! Hysteresis: the oldest message shown must not move every turn. Dropping just the oldest unit that no
//! longer fits would shift the whole conversation part of the prompt by one message each turn
//! once the budget is full (a cache miss on every turn). Instead each conversation's assembly
//! remembers where it started (its [`FrontKey`], kept by the backend in [`Fronts`]): while
//! everything from that front to the newest message fits, the walk stops there even when older
//! items would fit too (growing the front backwards changes the prefix as much as shrinking
//! it); when it no longer fits, or the front was compacted away, the oldest units are dropped
//! in one block so that what is kept is at most `1 − cacheBlockShare` of the history budget,
//! and the next many turns fit behind the same front. A compaction rewrites the front once for
//! many turns. A first assembly (no front known for this budget), and one over the same
//! stored history as the last (another prompt over it, nothing new stored), is packed as full
//! as the budget allows. The per-turn `<recalled>` block stays after the stable part (before the prompt).
//!
//! The whole frontier first, for a conversation its host maintains in the background
//! ([`Hysteresis::whole_first`]): when it fits the whole budget with the live messages, all of it
//! is shown, whatever the recall reserve and the remembered front (nothing is left out with room
//! to spare); the rules below apply only when it does not fit, which the engine avoids by
//! compacting first (`LosslessEngine::assemble`).
//!
//! The budget split: the history gets the budget less the recall reserve (`promptRecallShare`);
//! behind a kept front it may also grow into half of that reserve before a block is dropped;
//! the `<recalled>` block then gets what the history left, at least its reserve when packed
//! plainly and at most `promptRecallMaxTokens`. Summaries are frontier items like raw messages:
//! they are shown whenever the frontier from them on fits (after a compaction, always).

use clawctx_protocol::{AgentMessage, Content, ContentBlock};
use clawctx_tokens::{message_tokens, truncate_middle};

use crate::core::codec::{self, role};
use crate::core::decoded::DecodedCache;
use crate::core::prompt_recall::{PromptRecall, RecalledBlock};
use crate::error::Result;

/// The system-prompt addition explaining the recall tools (static: cache-stable).
pub const SYSTEM_PROMPT_ADDITION: &str = include_str!("../prompts/recall_policy.md");

/// The recall tools [`SYSTEM_PROMPT_ADDITION`] names.
pub const RECALL_TOOL_NAMES: [&str; 3] = ["lcm_grep", "lcm_describe", "lcm_expand"];

/// [`SYSTEM_PROMPT_ADDITION`] naming only the recall tools the model is offered: `available`
/// is the host's `availableTools` (`None`: the host did not say, so all of them). A model told
/// to call a tool it does not have wastes a turn on it (OpenClaw offers a context engine's
/// tools only when its plugin registers them). Deterministic for one tool set (cache-stable).
pub fn system_prompt_addition(available: Option<&[String]>) -> String {
    let Some(available) = available else {
        return SYSTEM_PROMPT_ADDITION.to_owned();
    };
    let offered = |name: &str| available.iter().any(|t| t == name);
    if RECALL_TOOL_NAMES.iter().all(|t| offered(t)) {
        return SYSTEM_PROMPT_ADDITION.to_owned();
    }
    let mut out = String::new();
    let mut skipping = false;
    for line in SYSTEM_PROMPT_ADDITION.lines() {
        if let Some(rest) = line.strip_prefix("- `") {
            skipping = RECALL_TOOL_NAMES
                .iter()
                .any(|t| rest.starts_with(&format!("{t}`")) && !offered(t));
        } else if !line.starts_with("  ") {
            skipping = false;
        }
        // The closing advice is about expanding summaries.
        if line.starts_with("Before quoting") && !offered("lcm_expand") {
            skipping = true;
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    if !RECALL_TOOL_NAMES.iter().any(|t| offered(t)) {
        out = out.replace(
            "every\noriginal message is still stored and can be recalled:",
            "every\noriginal message is still stored:",
        );
    }
    out.trim_end().to_owned() + "\n"
}

/// The first frontier item an assembly showed: where the next assembly of the same
/// conversation starts while everything after it fits (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrontKey {
    /// A stored message (its id).
    Message(i64),
    /// A summary (its id).
    Summary(i64),
}

/// Where an assembly started and the newest stored item it saw: the next assembly of the same
/// conversation keeps `start` as its front when the history grew since (a new turn), and packs
/// plainly otherwise (the same history asked again, e.g. another prompt over it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Front {
    /// The first frontier item shown.
    pub start: FrontKey,
    /// The newest stored item shown.
    pub newest: FrontKey,
}

/// How assembly keeps the front of the context still (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Hysteresis {
    /// Where the previous assembly of this conversation (at this budget) started. `None`: not
    /// known, so the context is packed as full as the budget allows, and the next assembly
    /// keeps that front.
    pub front: Option<Front>,
    /// Share of the history budget dropped at once when the context no longer fits behind
    /// `front` (`cacheBlockShare`); `0` drops only what does not fit (the front moves every turn
    /// once the budget is full).
    pub block_share: f64,
    /// Show the whole frontier when it and the live messages fit the whole budget, whatever
    /// the recall reserve and `front` (the block gets what is left). Set for a conversation
    /// its host maintains in the background: compaction then runs at the threshold after
    /// every reply, so a frontier larger than the history's share is a passing state, and
    /// leaving its oldest messages out would drop history no summary covers. A host that
    /// compacts only when the frontier is over the whole budget (an engine driven by
    /// `afterTurn` alone, as `clawctx eval` does) keeps the reserve: there the frontier sits
    /// near the whole budget between compactions and would leave the block no room.
    pub whole_first: bool,
}

/// Each conversation's [`FrontKey`] with the budget it was assembled for, kept by a backend for
/// the life of the process (a restart, or another gateway on the same PostgreSQL store, starts
/// a fresh front once: one cache miss). An assembly for another budget (a one-off through the
/// engine API, an inspection) is packed plainly, as full as the budget allows, and becomes the
/// front for that budget.
#[derive(Debug, Default)]
pub(crate) struct Fronts(std::sync::Mutex<std::collections::HashMap<i64, (Front, u64)>>);

impl Fronts {
    /// The remembered front of conversation `conv_id`, when it was assembled for `budget`.
    pub(crate) fn get(&self, conv_id: i64, budget: u64) -> Option<Front> {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&conv_id)
            .filter(|(_, b)| *b == budget)
            .map(|(f, _)| *f)
    }

    /// Remembers (or, with `None`, forgets) the front of conversation `conv_id` at `budget`.
    pub(crate) fn set(&self, conv_id: i64, budget: u64, front: Option<Front>) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match front {
            Some(f) => map.insert(conv_id, (f, budget)),
            None => map.remove(&conv_id),
        };
    }
}

/// What [`crate::sqlite::Db::assemble`] produced.
#[derive(Clone, Debug, Default)]
pub struct Assembled {
    /// Messages in order.
    pub messages: Vec<AgentMessage>,
    /// Sum of `message_tokens` over `messages` (≤ budget).
    pub tokens: u64,
    /// Summaries included.
    pub summaries: usize,
    /// Live (not yet stored) host messages included.
    pub live: usize,
    /// Frontier items not shown because the budget was reached.
    pub truncated: bool,
    /// Stored messages quoted in the `<recalled>` block (0 = no block).
    pub recalled: usize,
    /// Why each quoted message is there, best first (empty: no block).
    pub recall_hits: Vec<crate::core::prompt_recall::RecallHit>,
    /// The first and newest stored items shown (`None`: no stored item shown), for the next
    /// assembly's [`Hysteresis::front`].
    pub front: Option<Front>,
}

/// Renders a summary as the user-role block the model sees. Deterministic bytes.
pub fn render_summary(
    id: i64,
    depth: i64,
    from_ts: Option<i64>,
    to_ts: Option<i64>,
    text: &str,
) -> AgentMessage {
    let fmt = crate::core::relative_dates::fmt_minute;
    let body = text.replace("</summary", "&lt;/summary");
    AgentMessage::user(format!(
        "<summary id=\"{}\" depth=\"{depth}\" from=\"{}\" to=\"{}\">\n{body}\n</summary>",
        crate::core::ids::summary_id(id),
        fmt(from_ts),
        fmt(to_ts)
    ))
}

/// The summary id and depth a block made by [`render_summary`] opens with
/// (`<summary id="sum_12" depth="1" …>` → (`sum_12`, 1)); `None` for any other text.
pub fn parse_summary_header(text: &str) -> Option<(String, i64)> {
    let rest = text.trim_start().strip_prefix("<summary ")?;
    let head = &rest[..rest.find('>')?];
    let attr = |name: &str| -> Option<&str> {
        let start = head.find(&format!("{name}=\""))? + name.len() + 2;
        let len = head[start..].find('"')?;
        Some(&head[start..start + len])
    };
    Some((attr("id")?.to_owned(), attr("depth")?.parse().ok()?))
}

/// One item of the newest-first walk: a live host message, a stored message or a summary.
pub(crate) enum Item {
    Live(AgentMessage, u64),
    Message {
        id: i64,
        role: i64,
        n_calls: i64,
        tokens: u64,
        stored: Stored,
    },
    Summary {
        id: i64,
        depth: i64,
        from_ts: Option<i64>,
        to_ts: Option<i64>,
        text: String,
        tokens: u64,
    },
}

impl Item {
    fn tokens(&self) -> u64 {
        match self {
            Item::Live(_, t) => *t,
            Item::Message { tokens, .. } | Item::Summary { tokens, .. } => *tokens,
        }
    }
    fn is_tool_result(&self) -> bool {
        match self {
            Item::Live(m, _) => matches!(m, AgentMessage::ToolResult(_)),
            Item::Message { role: r, .. } => *r == role::TOOL_RESULT,
            Item::Summary { .. } => false,
        }
    }
    fn front_key(&self) -> Option<FrontKey> {
        match self {
            Item::Live(..) => None,
            Item::Message { id, .. } => Some(FrontKey::Message(*id)),
            Item::Summary { id, .. } => Some(FrontKey::Summary(*id)),
        }
    }
    fn calls(&self) -> bool {
        match self {
            Item::Live(m, _) => m.tool_calls().next().is_some(),
            Item::Message { n_calls, .. } => *n_calls > 0,
            Item::Summary { .. } => false,
        }
    }
    /// The message the model sees; stored messages decoded here are kept in `cache`.
    fn into_message(self, cache: &mut Option<&mut DecodedCache>) -> Result<AgentMessage> {
        Ok(match self {
            Item::Live(m, _) => m,
            Item::Message {
                id, role, stored, ..
            } => match stored {
                Stored::Decoded(m) => m,
                Stored::Raw { text, skeleton, ts } => {
                    let m = codec::decode(role, &text, skeleton.as_deref(), ts)?;
                    if let Some(cache) = cache {
                        let bytes = text.len() + skeleton.map_or(0, |s| s.len());
                        cache.insert(id, m.clone(), bytes);
                    }
                    m
                }
            },
            Item::Summary {
                id,
                depth,
                from_ts,
                to_ts,
                text,
                ..
            } => render_summary(id, depth, from_ts, to_ts, &text),
        })
    }
}

/// A stored message as read by the frontier walk: already decoded (from the cache of
/// [`DecodedCache`]) or its stored columns. (Held briefly, a few hundred per assembly: boxing
/// the decoded variant would only add an allocation each.)
#[allow(clippy::large_enum_variant)]
pub(crate) enum Stored {
    Decoded(AgentMessage),
    Raw {
        text: String,
        skeleton: Option<String>,
        ts: Option<i64>,
    },
}

/// Groups newest-first items into units and keeps them while they fit: the part of assembly
/// every backend shares. A backend makes one with [`Packer::new`] (which takes the live
/// messages and the recall reserve), pushes its frontier items newest-first until
/// [`Packer::done`], and finishes with [`Packer::finish`]; only reading the frontier and the
/// recall search differ between backends.
pub(crate) struct Packer<'r> {
    budget: u64,
    used: u64,
    pending: Vec<Item>,
    kept: Vec<Vec<Item>>,
    oversized: Option<Vec<Item>>,
    done: bool,
    recall: Option<&'r PromptRecall>,
    n_live: usize,
    has_conv: bool,
    hysteresis: Hysteresis,
    /// The unit holding [`Hysteresis::front`] was kept: the walk ends at the next item.
    at_front: bool,
    /// The newest stored item pushed.
    newest: Option<FrontKey>,
    /// The history grew since the remembered front was set: keep it (else pack plainly).
    follow_front: bool,
    /// Older items exist that the walk did not take.
    older_left: bool,
}

impl<'r> Packer<'r> {
    /// A packer for `budget` tokens, holding the host's `live` messages (see [`crate::sqlite::Db::assemble`]);
    /// `frontier_tokens`: the stored conversation that follows, by its frontier's tokens
    /// (`None`: there is none; recall needs one).
    ///
    /// With [`Hysteresis::whole_first`], when the whole frontier and the live messages fit the
    /// whole budget, all of it is shown: no history is left out for the recall reserve or to
    /// keep a remembered front (the `<recalled>` block gets what is left). History then leaves
    /// the context only when it cannot fit, and the engine compacts before that happens
    /// (`LosslessEngine::assemble`).
    pub(crate) fn new(
        live: Vec<AgentMessage>,
        budget: u64,
        recall: Option<&'r PromptRecall>,
        frontier_tokens: Option<u64>,
        mut hysteresis: Hysteresis,
    ) -> Self {
        let has_conv = frontier_tokens.is_some();
        let live_tokens: u64 = live.iter().map(message_tokens).sum();
        let whole_fits =
            hysteresis.whole_first && frontier_tokens.is_some_and(|f| f + live_tokens <= budget);
        if whole_fits {
            hysteresis.front = None;
        }
        let recall = recall.filter(|r| {
            r.reserve > 0
                && r.reserve < budget
                && has_conv
                && (r.prompt_follows || matches!(live.last(), Some(AgentMessage::User(_))))
        });
        let mut p = Packer {
            budget: if whole_fits {
                budget
            } else {
                budget - recall.map_or(0, |r| r.reserve)
            },
            used: 0,
            pending: Vec::new(),
            kept: Vec::new(),
            oversized: None,
            done: false,
            recall,
            n_live: live.len(),
            has_conv,
            hysteresis,
            at_front: false,
            newest: None,
            follow_front: false,
            older_left: false,
        };
        for m in live.into_iter().rev() {
            let t = message_tokens(&m);
            p.push(Item::Live(m, t));
        }
        p
    }

    /// Whether the walk is over: a unit did not fit.
    pub(crate) fn done(&self) -> bool {
        self.done
    }

    /// Adds the next older item.
    pub(crate) fn push(&mut self, item: Item) {
        if self.done {
            return;
        }
        if self.at_front {
            // Everything from the remembered front on fits: keep the front where it was.
            self.older_left = true;
            self.done = true;
            return;
        }
        if self.newest.is_none() {
            if let Some(k) = item.front_key() {
                self.newest = Some(k);
                self.follow_front = self.hysteresis.front.is_some_and(|f| f.newest != k);
                if self.follow_front {
                    // Behind a kept front the history may grow into half of the recall
                    // reserve before a block is dropped (the block gets what is left).
                    self.budget += self.recall.map_or(0, |r| r.reserve / 2);
                }
            }
        }
        if item.is_tool_result() {
            self.pending.push(item);
            return;
        }
        let mut unit = Vec::with_capacity(1 + self.pending.len());
        let calls = item.calls();
        unit.push(item);
        if calls {
            unit.extend(self.pending.drain(..).rev());
        } else {
            // Results whose call is not right before them: never shown alone.
            self.pending.clear();
        }
        let cost: u64 = unit.iter().map(Item::tokens).sum();
        if self.used + cost <= self.budget {
            self.used += cost;
            let start = self.hysteresis.front.map(|f| f.start);
            if self.follow_front && unit.iter().any(|i| i.front_key() == start) {
                self.at_front = true;
            }
            self.kept.push(unit);
        } else {
            if self.kept.is_empty() {
                self.oversized = Some(unit);
            } else {
                self.evict_block();
            }
            self.older_left = true;
            self.done = true;
        }
    }

    /// The context no longer fits behind the remembered front: drops the oldest kept units
    /// until at most `1 − block_share` of the budget is used, so that the next turns fit
    /// behind the new front (the newest unit is always kept).
    fn evict_block(&mut self) {
        let share = self.hysteresis.block_share.clamp(0.0, 0.95);
        if share <= 0.0 || !self.follow_front {
            return;
        }
        let keep = ((1.0 - share) * self.budget as f64).floor() as u64;
        while self.used > keep && self.kept.len() > 1 {
            // Live messages (the current prompt) are never dropped for the block: they are
            // the newest units, so the oldest kept unit is stored whenever one is.
            let Some(oldest) = self.kept.last() else {
                break;
            };
            if oldest.iter().any(|i| matches!(i, Item::Live(..))) {
                break;
            }
            let cost: u64 = oldest.iter().map(Item::tokens).sum();
            self.kept.pop();
            self.used -= cost;
        }
    }

    /// The kept units in order, decoded (stored messages decoded here go into `cache`, when
    /// the backend keeps one), and the recall the block is still wanted for with the ids of
    /// the stored messages shown (which the block must not quote again).
    pub(crate) fn finish(
        mut self,
        full_budget: u64,
        mut cache: Option<&mut DecodedCache>,
    ) -> Result<Packed> {
        let mut out = Assembled {
            // Only the stored history counts as truncated, not the live messages alone.
            truncated: self.older_left && self.has_conv,
            ..Default::default()
        };
        let oversized = self.oversized.take();
        let mut units = std::mem::take(&mut self.kept);
        units.reverse();
        let start = units
            .first()
            .and_then(|u| u.first())
            .and_then(Item::front_key);
        out.front = start
            .zip(self.newest)
            .map(|(start, newest)| Front { start, newest });
        let mut shown = std::collections::HashSet::new();
        for unit in units {
            for item in unit {
                match &item {
                    Item::Summary { .. } => out.summaries += 1,
                    Item::Live(..) => out.live += 1,
                    Item::Message { id, .. } => {
                        shown.insert(*id);
                    }
                }
                out.tokens += item.tokens();
                out.messages.push(item.into_message(&mut cache)?);
            }
        }
        debug_assert!(out.live <= self.n_live);
        if let Some(unit) = oversized {
            // Nothing fit: shorten the newest unit instead of returning nothing.
            let mut msgs = unit
                .into_iter()
                .map(|item| item.into_message(&mut cache))
                .collect::<Result<Vec<_>>>()?;
            shrink_to_fit(&mut msgs, full_budget);
            let t: u64 = msgs.iter().map(message_tokens).sum();
            if t <= full_budget && !msgs.is_empty() {
                out.tokens = t;
                out.messages = msgs;
            }
            out.front = None;
            return Ok(Packed {
                out,
                recall: None,
                shown,
            });
        }
        let recall = self
            .recall
            .filter(|r| {
                let prompt_kept =
                    out.live > 0 && matches!(out.messages.last(), Some(AgentMessage::User(_)));
                prompt_kept || r.prompt_follows
            })
            .map(|r| PromptRecall {
                // What the history left, up to the reserve.
                reserve: full_budget.saturating_sub(out.tokens).min(r.max_tokens),
                ..r.clone()
            });
        Ok(Packed { out, recall, shown })
    }
}

/// A packed context waiting for its recall block (see [`Packer::finish`]).
pub(crate) struct Packed {
    /// The context so far.
    pub(crate) out: Assembled,
    /// The recall to search for, when the block is wanted, with the room the history left it.
    pub(crate) recall: Option<PromptRecall>,
    /// Stored messages already in the context.
    pub(crate) shown: std::collections::HashSet<i64>,
}

impl Packed {
    /// The context with `block` (the search's result for [`Packed::recall`]) in place: right
    /// before the prompt, or last when the prompt follows the context.
    pub(crate) fn with_recall(mut self, block: Option<RecalledBlock>) -> Assembled {
        if let (Some(r), Some(block)) = (self.recall.as_ref(), block) {
            let at = if r.prompt_follows {
                self.out.messages.len()
            } else {
                self.out.messages.len().saturating_sub(1)
            };
            self.out.messages.insert(at, block.message);
            self.out.tokens += block.tokens;
            self.out.recalled = block.quoted;
            self.out.recall_hits = block.hits;
        }
        self.out
    }
}

/// The text-bearing strings of `m`, mutable (shrinking, retention placeholders).
pub(crate) fn text_slots(m: &mut AgentMessage) -> Vec<&mut String> {
    let content = match m {
        AgentMessage::User(u) => &mut u.content,
        AgentMessage::Assistant(a) => &mut a.content,
        AgentMessage::ToolResult(t) => &mut t.content,
        AgentMessage::Custom(c) => &mut c.content,
        AgentMessage::BashExecution(b) => return vec![&mut b.output],
        AgentMessage::BranchSummary(s) | AgentMessage::CompactionSummary(s) => {
            return vec![&mut s.summary]
        }
        AgentMessage::Other(_) => return Vec::new(),
    };
    match content {
        Content::Text(t) => vec![t],
        Content::Blocks(bs) => bs
            .iter_mut()
            .filter_map(|b| match b {
                ContentBlock::Text(t) => Some(&mut t.text),
                ContentBlock::Thinking(t) => Some(&mut t.thinking),
                _ => None,
            })
            .collect(),
    }
}

/// Whether `m` is a block this engine renders into assembled context: a summary
/// ([`render_summary`]) or the prompt-recall block ([`crate::core::prompt_recall`]). Such a block is
/// never a message of the conversation: the host stores raw messages.
pub fn is_own_block(m: &AgentMessage) -> bool {
    let AgentMessage::User(user) = m else {
        return false;
    };
    let looks_like = |text: &str| {
        // Most messages open with a letter: no need to look further (a block opens with `<`,
        // a summary block perhaps after whitespace, which may be non-ASCII).
        let first = text.as_bytes().first().copied().unwrap_or(b' ');
        if first != b'<' && first.is_ascii() && !first.is_ascii_whitespace() {
            return false;
        }
        parse_summary_header(text).is_some() || crate::core::prompt_recall::is_recalled_block(text)
    };
    // Called on every live message of every assembly: a plain-text message is judged on its
    // own bytes, and a message of blocks is flattened only when one of its pieces opens like
    // a block (a flattened text can open like one only then: pieces are joined by newlines).
    match &user.content {
        clawctx_protocol::message::Content::Text(text) => looks_like(text),
        content => {
            let opens_like = content.block_slice().iter().any(|b| match b {
                clawctx_protocol::message::ContentBlock::Text(t) => {
                    t.text.trim_start().starts_with("<summary ")
                        || crate::core::prompt_recall::is_recalled_block(&t.text)
                }
                clawctx_protocol::message::ContentBlock::Image(_) => false,
                _ => true,
            });
            opens_like && looks_like(&m.plain_text())
        }
    }
}

/// Assembly over this engine's own output. OpenClaw assembles twice per model call: before the
/// prompt, and again in its context hook with the first result as `messages` (and another
/// budget). Assembling that again from the store would add a second `<recalled>` block and
/// re-add raw messages the first call had summarized away. So when `messages` carries one of
/// this engine's blocks, the answer is `messages` itself: each block once (a repeated summary
/// or recalled block is dropped, the later recalled block kept when they differ), the host's
/// messages after it kept as they are, the oldest units dropped only if the new budget is
/// smaller. Assembling the result again returns it unchanged. `None`: no block of ours.
///
/// `ours[i]` says whether `messages[i]` is a block this engine made (the engine checks a
/// block's bytes against what it emitted or what the store holds): a user's message that only
/// looks like one (it opens with `<summary id=…>`) is an ordinary message, kept as it is and
/// never a reason to skip the stored history. A missing entry is not ours.
pub fn reassemble_own_output(
    messages: &[AgentMessage],
    budget: u64,
    ours: &[bool],
) -> Option<Assembled> {
    let ours_at = |i: usize| ours.get(i).copied().unwrap_or(false);
    if !(0..messages.len()).any(|i| ours_at(i) && is_own_block(&messages[i])) {
        return None;
    }
    let last_recalled = messages.iter().enumerate().rposition(|(i, m)| {
        ours_at(i)
            && matches!(m, AgentMessage::User(_))
            && crate::core::prompt_recall::is_recalled_block(&m.plain_text())
    });
    let mut seen_summaries = std::collections::HashSet::new();
    let mut kept = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        if let (true, AgentMessage::User(_)) = (ours_at(i), m) {
            let text = m.plain_text();
            if let Some((id, _)) = parse_summary_header(&text) {
                if !seen_summaries.insert(id) {
                    continue;
                }
            } else if crate::core::prompt_recall::is_recalled_block(&text)
                && Some(i) != last_recalled
            {
                continue;
            }
        }
        kept.push(m.clone());
    }
    let mut report = Default::default();
    let mut kept = clawctx_engine::pipeline::fit_budget(kept, budget, &mut report);
    shrink_to_fit(&mut kept, budget);
    let mut out = Assembled {
        tokens: kept.iter().map(message_tokens).sum(),
        truncated: kept.len() < messages.len(),
        ..Assembled::default()
    };
    for m in &kept {
        if let AgentMessage::User(_) = m {
            let text = m.plain_text();
            if parse_summary_header(&text).is_some() {
                out.summaries += 1;
            } else if crate::core::prompt_recall::is_recalled_block(&text) {
                out.recalled += crate::core::prompt_recall::quoted_ids(&text).len();
            }
        }
    }
    out.messages = kept;
    Some(out)
}

/// Shortens the largest text slots of `msgs` until their estimate fits `budget`; clears
/// `msgs` when that is impossible (e.g. a huge tool-call argument).
pub(crate) fn shrink_to_fit(msgs: &mut Vec<AgentMessage>, budget: u64) {
    for _ in 0..8 {
        let costs: Vec<u64> = msgs.iter().map(message_tokens).collect();
        let total: u64 = costs.iter().sum();
        if total <= budget {
            return;
        }
        let over = total - budget;
        let Some((idx, _)) = costs.iter().enumerate().max_by_key(|(_, c)| **c) else {
            return;
        };
        let mut slots = text_slots(&mut msgs[idx]);
        let Some(slot) = slots.iter_mut().max_by_key(|s| s.len()) else {
            break;
        };
        let slot_tokens = clawctx_tokens::text_tokens(slot);
        if slot_tokens == 0 {
            break;
        }
        let target = slot_tokens.saturating_sub(over + 8);
        **slot = truncate_middle(slot, target);
    }
    let total: u64 = msgs.iter().map(message_tokens).sum();
    if total > budget {
        msgs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_header_parser_reads_what_render_summary_writes() {
        let m = render_summary(12, 1, Some(0), Some(60_000), "facts");
        assert_eq!(
            parse_summary_header(&m.plain_text()),
            Some(("sum_12".to_owned(), 1))
        );
        assert_eq!(parse_summary_header("<recalled>x</recalled>"), None);
        assert_eq!(parse_summary_header("plain"), None);
    }

    #[test]
    fn own_blocks_are_told_apart_in_either_content_shape() {
        use clawctx_protocol::message::{Content, ContentBlock, TextContent};
        let summary = render_summary(3, 0, None, None, "facts").plain_text();
        let with_blocks = |texts: &[&str]| {
            let mut m = AgentMessage::user("");
            if let AgentMessage::User(u) = &mut m {
                u.content = Content::Blocks(
                    texts
                        .iter()
                        .map(|t| ContentBlock::Text(TextContent::new(*t)))
                        .collect(),
                );
            }
            m
        };
        assert!(is_own_block(&AgentMessage::user(summary.clone())));
        assert!(is_own_block(&with_blocks(&[&summary])));
        // Flattened, an empty first piece adds nothing and a blank one is trimmed away.
        assert!(is_own_block(&with_blocks(&["", &summary])));
        assert!(is_own_block(&with_blocks(&["  ", &summary])));
        assert!(!is_own_block(&with_blocks(&["see:", &summary])));
        assert!(!is_own_block(&with_blocks(&["plain", "text"])));
        assert!(!is_own_block(&AgentMessage::user("plain")));
        assert!(!is_own_block(&AgentMessage::assistant(summary)));
    }
}
