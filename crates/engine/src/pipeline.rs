//! The runtime's history pipeline: sanitize → validate → limit (contract §7.5).
//!
//! Before a prompt is sent the host prepares the session history; `legacy` passes the result
//! through unchanged and every other engine receives it as `assemble`'s `messages`. The
//! pipeline keeps two invariants no engine may break: a tool call and its result are never
//! separated, and the prepared history never exceeds the token budget. A single message larger
//! than the whole budget is shortened (its middle cut out, with a marker) rather than breaking
//! assembly.

use std::collections::HashSet;

use clawctx_protocol::{AgentMessage, Content, ContentBlock, TextContent, ToolResultMessage};
use clawctx_tokens::{message_tokens, truncate_middle, MESSAGE_OVERHEAD_TOKENS};

/// The text of a synthetic result inserted for a tool call that never got one.
pub const SYNTHETIC_TOOL_RESULT_TEXT: &str = "No result provided: the tool call was interrupted.";

/// Pipeline knobs.
#[derive(Clone, Debug, Default)]
pub struct PipelineOptions {
    /// Keep only the last N user turns (`dmHistoryLimit`); `None` = no limit.
    pub history_turn_limit: Option<usize>,
    /// Token budget; `None` = no budget step.
    pub token_budget: Option<u64>,
}

/// What the pipeline did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PipelineReport {
    /// Orphan tool results dropped.
    pub orphan_results_dropped: usize,
    /// Synthetic results inserted for unanswered calls.
    pub synthetic_results_inserted: usize,
    /// Empty errored/aborted assistant turns dropped.
    pub broken_assistant_dropped: usize,
    /// Messages dropped by the turn limit and the budget.
    pub messages_dropped: usize,
    /// Messages whose text was cut to fit.
    pub messages_truncated: usize,
    /// Estimated tokens of the result.
    pub tokens: u64,
}

/// The prepared history.
#[derive(Clone, Debug, Default)]
pub struct Prepared {
    /// Messages to hand to `assemble`.
    pub messages: Vec<AgentMessage>,
    /// What was changed.
    pub report: PipelineReport,
}

/// Runs the whole pipeline.
pub fn prepare_history(messages: Vec<AgentMessage>, options: &PipelineOptions) -> Prepared {
    let mut report = PipelineReport::default();
    let mut messages = sanitize(messages, &mut report);
    if let Some(limit) = options.history_turn_limit {
        let before = messages.len();
        messages = limit_history_turns(messages, limit);
        report.messages_dropped += before - messages.len();
    }
    if let Some(budget) = options.token_budget {
        messages = fit_budget(messages, budget, &mut report);
    }
    report.tokens = messages.iter().map(message_tokens).sum();
    Prepared { messages, report }
}

fn is_broken_assistant(m: &AgentMessage) -> bool {
    match m {
        AgentMessage::Assistant(a) => {
            let failed = matches!(a.stop_reason.as_deref(), Some("error") | Some("aborted"));
            let empty = match &a.content {
                Content::Text(t) => t.trim().is_empty(),
                Content::Blocks(b) => b.iter().all(|b| match b {
                    ContentBlock::Text(t) => t.text.trim().is_empty(),
                    ContentBlock::Thinking(_) => true,
                    _ => false,
                }),
            };
            failed && empty
        }
        _ => false,
    }
}

fn synthetic_result(call_id: &str, name: &str) -> AgentMessage {
    AgentMessage::ToolResult(ToolResultMessage {
        tool_call_id: call_id.to_owned(),
        tool_name: name.to_owned(),
        content: Content::Blocks(vec![ContentBlock::Text(TextContent::new(
            SYNTHETIC_TOOL_RESULT_TEXT,
        ))]),
        is_error: Some(true),
        ..Default::default()
    })
}

/// Repairs tool-call/result pairing and drops empty errored/aborted assistant turns.
///
/// Each assistant message with tool calls must be followed by one result per call; results
/// that answer no pending call are dropped, calls with no result get a synthetic error result
/// placed right after the other results of that assistant message.
pub fn sanitize(messages: Vec<AgentMessage>, report: &mut PipelineReport) -> Vec<AgentMessage> {
    let mut out: Vec<AgentMessage> = Vec::with_capacity(messages.len());
    let mut s = Sanitizer::default();
    for m in messages {
        s.push(m, |m| out.push(m));
    }
    s.flush(|m| out.push(m));
    report.orphan_results_dropped += s.report.orphan_results_dropped;
    report.synthetic_results_inserted += s.report.synthetic_results_inserted;
    report.broken_assistant_dropped += s.report.broken_assistant_dropped;
    out
}

/// [`sanitize`] one message at a time. Its state is the tool calls of the latest assistant
/// message still waiting for a result, so a history kept between turns can be extended with
/// each turn's messages instead of being sanitized again from the start.
#[derive(Clone, Debug, Default)]
pub struct Sanitizer {
    /// Calls of the latest assistant message still waiting for a result, in call order.
    pending: Vec<(String, String)>,
    /// What was changed so far.
    pub report: PipelineReport,
}

impl Sanitizer {
    /// Takes the next message; `emit` receives what goes into the sanitized history, in order.
    pub fn push(&mut self, m: AgentMessage, mut emit: impl FnMut(AgentMessage)) {
        if is_broken_assistant(&m) {
            self.report.broken_assistant_dropped += 1;
            return;
        }
        match &m {
            AgentMessage::ToolResult(r) => {
                if let Some(pos) = self
                    .pending
                    .iter()
                    .position(|(id, _)| *id == r.tool_call_id)
                {
                    self.pending.remove(pos);
                    emit(m);
                } else {
                    self.report.orphan_results_dropped += 1;
                }
            }
            AgentMessage::Assistant(_) => {
                self.flush(&mut emit);
                let mut seen = HashSet::new();
                for c in m.tool_calls() {
                    if seen.insert(c.id.clone()) {
                        self.pending.push((c.id.clone(), c.name.clone()));
                    }
                }
                emit(m);
            }
            _ => {
                self.flush(&mut emit);
                emit(m);
            }
        }
    }

    /// Closes the calls still waiting with synthetic error results (the end of the history,
    /// or the next message that is not their result).
    pub fn flush(&mut self, mut emit: impl FnMut(AgentMessage)) {
        for (id, name) in self.pending.drain(..) {
            emit(synthetic_result(&id, &name));
            self.report.synthetic_results_inserted += 1;
        }
    }

    /// Whether tool calls are waiting for their results.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}

/// Keeps the last `limit` user turns (a turn starts at a user message).
pub fn limit_history_turns(messages: Vec<AgentMessage>, limit: usize) -> Vec<AgentMessage> {
    let start = turn_limit_start(&messages, limit);
    if start == 0 {
        return messages;
    }
    messages.into_iter().skip(start).collect()
}

/// Where the last `limit` user turns of `messages` start (`0` for no limit or fewer turns).
/// Walks back from the end, so its cost is that of the kept turns, not of the history.
pub fn turn_limit_start(messages: &[AgentMessage], limit: usize) -> usize {
    if limit == 0 {
        return 0;
    }
    let mut seen = 0;
    for (i, m) in messages.iter().enumerate().rev() {
        if matches!(m, AgentMessage::User(_)) {
            seen += 1;
            if seen == limit {
                // Fewer turns than the limit before this one: keep everything.
                return if messages[..i]
                    .iter()
                    .rev()
                    .any(|m| matches!(m, AgentMessage::User(_)))
                {
                    i
                } else {
                    0
                };
            }
        }
    }
    0
}

/// Groups of messages that must stay together: an assistant message with tool calls plus its
/// results; every other message alone.
pub fn pairing_units(messages: &[AgentMessage]) -> Vec<std::ops::Range<usize>> {
    let mut units = Vec::new();
    let mut i = 0;
    while i < messages.len() {
        let start = i;
        i += 1;
        if messages[start].tool_calls().next().is_some() {
            while i < messages.len() && matches!(messages[i], AgentMessage::ToolResult(_)) {
                i += 1;
            }
        }
        units.push(start..i);
    }
    units
}

/// Drops the oldest pairing units until the history fits `budget`; when even the newest unit
/// alone does not fit, shortens its largest text blocks.
pub fn fit_budget(
    messages: Vec<AgentMessage>,
    budget: u64,
    report: &mut PipelineReport,
) -> Vec<AgentMessage> {
    let costs: Vec<u64> = messages.iter().map(message_tokens).collect();
    let mut total: u64 = costs.iter().sum();
    if total <= budget {
        return messages;
    }
    let units = pairing_units(&messages);
    let mut first_kept_unit = 0;
    while total > budget && first_kept_unit + 1 < units.len() {
        let u = &units[first_kept_unit];
        total -= costs[u.clone()].iter().sum::<u64>();
        first_kept_unit += 1;
    }
    let start = units.get(first_kept_unit).map(|u| u.start).unwrap_or(0);
    report.messages_dropped += start;
    let mut kept: Vec<AgentMessage> = messages.into_iter().skip(start).collect();
    if total > budget {
        shrink_to_fit(&mut kept, budget, report);
    }
    kept
}

/// Shortens text blocks (largest first) until `messages` fits `budget`.
fn shrink_to_fit(messages: &mut [AgentMessage], budget: u64, report: &mut PipelineReport) {
    let overhead = messages.len() as u64 * MESSAGE_OVERHEAD_TOKENS;
    for _ in 0..messages.len() * 2 + 2 {
        let costs: Vec<u64> = messages.iter().map(message_tokens).collect();
        let total: u64 = costs.iter().sum();
        if total <= budget {
            return;
        }
        let Some((idx, &largest)) = costs.iter().enumerate().max_by_key(|(_, c)| **c) else {
            return;
        };
        let excess = total - budget;
        let target = largest
            .saturating_sub(excess)
            .saturating_sub(MESSAGE_OVERHEAD_TOKENS + 8);
        let target = target.min(budget.saturating_sub(overhead));
        shrink_message(&mut messages[idx], target);
        report.messages_truncated += 1;
    }
}

fn shrink_text_blocks(blocks: &mut [ContentBlock], target: u64) {
    // Images cannot be shortened: when they alone exceed the target, they go.
    let image_cost = blocks
        .iter()
        .filter(|b| matches!(b, ContentBlock::Image(_)))
        .count() as u64
        * clawctx_tokens::IMAGE_TOKENS;
    if image_cost > target / 2 {
        for b in blocks.iter_mut() {
            if matches!(b, ContentBlock::Image(_)) {
                *b = ContentBlock::text("[image omitted to fit the context budget]");
            }
        }
    }
    // Share the target between text blocks in proportion to their size.
    let sizes: Vec<u64> = blocks
        .iter()
        .map(|b| match b {
            ContentBlock::Text(t) => clawctx_tokens::text_tokens(&t.text),
            ContentBlock::Thinking(t) => clawctx_tokens::text_tokens(&t.thinking),
            _ => 0,
        })
        .collect();
    let total: u64 = sizes.iter().sum::<u64>().max(1);
    for (b, size) in blocks.iter_mut().zip(sizes) {
        let share = target * size / total;
        match b {
            ContentBlock::Text(t) => t.text = truncate_middle(&t.text, share),
            ContentBlock::Thinking(t) => t.thinking = truncate_middle(&t.thinking, share),
            _ => {}
        }
    }
}

fn shrink_content(content: &mut Content, target: u64) {
    match content {
        Content::Text(t) => *t = truncate_middle(t, target),
        Content::Blocks(b) => shrink_text_blocks(b, target),
    }
}

fn shrink_message(m: &mut AgentMessage, target: u64) {
    match m {
        AgentMessage::User(u) => shrink_content(&mut u.content, target),
        AgentMessage::Assistant(a) => shrink_content(&mut a.content, target),
        AgentMessage::ToolResult(r) => shrink_content(&mut r.content, target),
        AgentMessage::Custom(c) => shrink_content(&mut c.content, target),
        AgentMessage::BashExecution(b) => {
            b.output = truncate_middle(
                &b.output,
                target.saturating_sub(clawctx_tokens::text_tokens(&b.command)),
            )
        }
        AgentMessage::BranchSummary(s) | AgentMessage::CompactionSummary(s) => {
            s.summary = truncate_middle(&s.summary, target.saturating_sub(60))
        }
        AgentMessage::Other(map) => {
            if let Some(serde_json::Value::String(s)) = map.get_mut("content") {
                *s = truncate_middle(s, target);
            }
        }
    }
}
