//! What is derived from stored traces on reading, written once for the API and the CLI:
//! warnings in words, the diff between a turn and the one kept before it, and a session's
//! record (the engines that served it, usage against the budget of its own last assembly).

use std::collections::HashMap;

use schemars::JsonSchema;
use serde::Serialize;

use super::store::{EngineUse, TraceDb};
use super::{TraceError, TracePart, TurnTrace};

/// A turn with what it means, as the API answers it.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnView {
    /// The stored trace.
    #[serde(flatten)]
    pub trace: TurnTrace,
    /// Tokens per kind of part.
    pub totals: PartTotals,
    /// Problems in words.
    pub warnings: Vec<String>,
}

/// Tokens and counts per kind of part.
#[derive(Clone, Debug, Default, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PartTotals {
    /// The system prompt addition's tokens.
    pub system_prompt_addition: u64,
    /// Summaries' tokens.
    pub summaries: u64,
    /// Summaries sent.
    pub summary_count: u64,
    /// The recalled block's tokens.
    pub recalled: u64,
    /// Messages the recalled block quotes.
    pub recalled_messages: u64,
    /// Raw messages' tokens.
    pub raw: u64,
    /// Raw messages sent.
    pub raw_count: u64,
}

/// Totals of `parts`.
pub fn totals(parts: &[TracePart]) -> PartTotals {
    let mut t = PartTotals::default();
    for p in parts {
        match p.kind.as_str() {
            "systemPromptAddition" => t.system_prompt_addition += p.tokens,
            "summary" => {
                t.summaries += p.tokens;
                t.summary_count += 1;
            }
            "recalled" => {
                t.recalled += p.tokens;
                t.recalled_messages += p.quotes.len() as u64;
            }
            _ => {
                t.raw += p.tokens;
                t.raw_count += 1;
            }
        }
    }
    t
}

/// A trace's problems in words.
pub fn warnings(t: &TurnTrace) -> Vec<String> {
    let mut out = Vec::new();
    let tot = totals(&t.parts);
    if let Some(b) = t.token_budget {
        // The system prompt addition is not counted against the engine's budget.
        let counted = t.gateway_tokens.saturating_sub(tot.system_prompt_addition);
        if counted > b {
            out.push(format!(
                "over budget by {} tokens ({counted} sent against a budget of {b})",
                counted - b
            ));
        }
    }
    if t.engine.selected.is_some() {
        out.push(format!("served by {}: {}", t.engine.id, t.engine.reason));
    }
    let lossless = t.engine.id == clawctx_lossless::ENGINE_ID;
    if let Some(l) = &t.left_out {
        if !l.known {
            if let Some(why) = &l.unknown {
                out.push(format!("left-out reasons not known: {why}"));
            }
        }
        if tot.summary_count == 0 && (l.items > 0 || l.messages > 0) {
            out.push(format!(
                "no summary reached the model: {} earlier items ({} messages) were left out",
                l.items, l.messages
            ));
        }
        if let Some(stored) = l.stored_messages {
            let direct = tot.raw_count as i64;
            let only = stored - direct - l.summarized_messages as i64 - l.messages as i64;
            if tot.recalled_messages > 0 && l.summarized_messages == 0 && stored > direct + 1 {
                out.push(format!(
                    "{} stored messages were represented only by the recalled block ({} quoted)",
                    stored - direct,
                    tot.recalled_messages
                ));
            } else if only > 0 && l.known {
                out.push(format!(
                    "{only} stored messages are in no part sent nor in the frontier"
                ));
            }
        }
    }
    if lossless && t.source == "turn" && tot.recalled_messages == 0 {
        out.push("recall empty: no stored message was quoted for this prompt".into());
    }
    if t.engine_estimate > 0 {
        // Engines estimate the messages; the addition is the system prompt's.
        let counted = t.gateway_tokens.saturating_sub(tot.system_prompt_addition);
        let (a, b) = (counted as f64, t.engine_estimate as f64);
        if (a - b).abs() > 0.1 * b.max(1.0) {
            out.push(format!(
                "the engine estimated {} tokens for the messages, the gateway counts {counted}",
                t.engine_estimate
            ));
        }
    }
    if let Some(m) = &t.model {
        if m.outcome != "ok" {
            out.push(format!("the turn failed: {}", m.outcome));
        }
    }
    if let Some(b) = &t.summarizer_breaker {
        let what = if b.state == "open" {
            "is open"
        } else {
            "is letting one probe call through"
        };
        out.push(format!(
            "the summarizer's circuit breaker {what} after {} failures in a row{}: compaction summarizes extractively meanwhile",
            b.consecutive_failures,
            b.last_error
                .as_deref()
                .map(|e| format!(" (last: {e})"))
                .unwrap_or_default()
        ));
    }
    for s in &t.summarizer {
        if s.failed > 0 {
            out.push(format!(
                "{} of {} summarizer calls ({}) failed during the turn",
                s.failed,
                s.failed + s.ok,
                s.summarizer
            ));
        }
    }
    out
}

/// Each listed left-out item's reason in words, from its tokens and what the budget left.
pub fn reasons(t: &mut TurnTrace) {
    let Some(l) = &mut t.left_out else {
        return;
    };
    let unused = l.unused;
    for item in &mut l.listed {
        let mut reason = match unused {
            Some(room) if item.tokens <= room => format!(
                "left out with room to spare ({room} tokens unused): the assembly keeps the \
                 cache-stable front it started from"
            ),
            Some(room) => format!(
                "over budget: {} tokens, {} left of the budget",
                item.tokens,
                room.max(0)
            ),
            None => "not sent (no budget was given)".to_owned(),
        };
        if item.quoted {
            reason.push_str("; quoted in the recalled block");
        }
        item.reason = reason;
    }
}

/// A turn with its totals, warnings and left-out reasons in words.
pub fn view(mut trace: TurnTrace) -> TurnView {
    reasons(&mut trace);
    TurnView {
        totals: totals(&trace.parts),
        warnings: warnings(&trace),
        trace,
    }
}

/// A part in a diff.
#[derive(Clone, Debug, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DiffItem {
    /// `summary`, `raw`, `recalled` or `systemPromptAddition`.
    pub kind: String,
    /// Its id when known, else `#<digest>`.
    pub reference: String,
    /// Its role.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Its tokens.
    pub tokens: u64,
    /// A summary's depth.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depth: Option<i64>,
    /// A summary's message span.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span: Option<[i64; 2]>,
}

/// What changed between a turn and the one kept before it.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnDiff {
    /// The session key.
    pub session_key: String,
    /// The turn.
    pub turn: u64,
    /// The turn compared with (none: the first kept).
    pub previous: Option<u64>,
    /// Parts sent now and not before.
    pub came_in: Vec<DiffItem>,
    /// Parts sent before and not now.
    pub went_out: Vec<DiffItem>,
    /// Summaries sent now and not before (what was summarized between the turns).
    pub summarized: Vec<DiffItem>,
    /// Messages the recalled block quotes now and did not before.
    pub recalled_in: Vec<String>,
    /// Messages it quoted before and not now.
    pub recalled_out: Vec<String>,
    /// Tokens sent before.
    pub tokens_before: u64,
    /// Tokens sent now.
    pub tokens_after: u64,
    /// The changes in words.
    pub words: Vec<String>,
}

fn reference(p: &TracePart) -> String {
    p.id.clone().unwrap_or_else(|| format!("#{}", p.digest))
}

fn item(p: &TracePart) -> DiffItem {
    DiffItem {
        kind: p.kind.clone(),
        reference: reference(p),
        role: p.role.clone(),
        tokens: p.tokens,
        depth: p.depth,
        span: p.span,
    }
}

/// The identity a part is compared by: the recalled block by what it quotes (compared on
/// its own), anything else by id when it has one, else by kind and digest.
fn identity(p: &TracePart) -> String {
    match &p.id {
        Some(id) => id.clone(),
        None => format!("{}#{}", p.kind, p.digest),
    }
}

/// The diff of `now` against `before`.
pub fn diff(now: &TurnTrace, before: Option<&TurnTrace>) -> TurnDiff {
    let empty = TurnTrace::default();
    let prev = before.unwrap_or(&empty);
    let compared = |t: &TurnTrace| -> Vec<TracePart> {
        t.parts
            .iter()
            .filter(|p| p.kind != "recalled")
            .cloned()
            .collect()
    };
    let (a, b) = (compared(prev), compared(now));
    // Multisets: two equal raw messages count twice.
    let mut count: HashMap<String, i64> = HashMap::new();
    for p in &a {
        *count.entry(identity(p)).or_default() += 1;
    }
    let mut came_in = Vec::new();
    for p in &b {
        let c = count.entry(identity(p)).or_default();
        if *c > 0 {
            *c -= 1;
        } else {
            came_in.push(item(p));
        }
    }
    let mut left: HashMap<String, i64> = HashMap::new();
    for p in &b {
        *left.entry(identity(p)).or_default() += 1;
    }
    let mut went_out = Vec::new();
    for p in &a {
        let c = left.entry(identity(p)).or_default();
        if *c > 0 {
            *c -= 1;
        } else {
            went_out.push(item(p));
        }
    }
    let summarized: Vec<DiffItem> = came_in
        .iter()
        .filter(|d| d.kind == "summary")
        .cloned()
        .collect();
    let quotes = |t: &TurnTrace| -> Vec<String> {
        t.parts
            .iter()
            .flat_map(|p| p.quotes.iter().cloned())
            .collect()
    };
    let (qa, qb) = (quotes(prev), quotes(now));
    let recalled_in: Vec<String> = qb.iter().filter(|q| !qa.contains(q)).cloned().collect();
    let recalled_out: Vec<String> = qa.iter().filter(|q| !qb.contains(q)).cloned().collect();
    let mut words = Vec::new();
    let sum = |v: &[DiffItem]| v.iter().map(|d| d.tokens).sum::<u64>();
    if before.is_none() {
        words.push("the first turn kept for this session: everything came in".into());
    }
    let raw_in = came_in.iter().filter(|d| d.kind == "raw").count();
    if raw_in > 0 {
        words.push(format!(
            "{raw_in} raw messages came in ({} tokens)",
            came_in
                .iter()
                .filter(|d| d.kind == "raw")
                .map(|d| d.tokens)
                .sum::<u64>()
        ));
    }
    if !went_out.is_empty() {
        words.push(format!(
            "{} parts went out ({} tokens)",
            went_out.len(),
            sum(&went_out)
        ));
    }
    if !summarized.is_empty() {
        let covered: i64 = summarized
            .iter()
            .filter_map(|d| d.span)
            .map(|[x, y]| y - x + 1)
            .sum();
        words.push(format!(
            "{} new summaries ({}){}",
            summarized.len(),
            summarized
                .iter()
                .map(|d| d.reference.clone())
                .collect::<Vec<_>>()
                .join(", "),
            if covered > 0 {
                format!(" standing for {covered} messages")
            } else {
                String::new()
            }
        ));
    }
    if let (Some(x), Some(y)) = (&prev.epoch, &now.epoch) {
        if x != y && before.is_some() {
            words.push(format!(
                "the engine compacted between the turns (epoch {x} → {y})"
            ));
        }
    }
    if !recalled_in.is_empty() || !recalled_out.is_empty() {
        words.push(format!(
            "recall: {} messages quoted anew, {} no longer",
            recalled_in.len(),
            recalled_out.len()
        ));
    }
    TurnDiff {
        session_key: now.session_key.clone(),
        turn: now.turn,
        previous: before.map(|t| t.turn),
        came_in,
        went_out,
        summarized,
        recalled_in,
        recalled_out,
        tokens_before: prev.gateway_tokens,
        tokens_after: now.gateway_tokens,
        words,
    }
}

/// A session's record across its kept turns.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    /// The session key.
    pub session_key: String,
    /// Turns kept.
    pub turns: u64,
    /// The engines that served it, in the order they first did.
    pub engines: Vec<EngineUse>,
    /// Its last assembly.
    pub last: Option<LastUse>,
}

/// The last assembly of a session against its own budget.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastUse {
    /// Its turn.
    pub turn: u64,
    /// The engine that served it.
    pub engine: String,
    /// Tokens sent.
    pub tokens: u64,
    /// The budget it was assembled in.
    pub token_budget: Option<u64>,
    /// Tokens sent over that budget (`null`: no budget).
    pub usage: Option<f64>,
    /// Input tokens the model reported, and of them cached.
    pub input_tokens: Option<u64>,
    /// Cached input tokens.
    pub cached_tokens: Option<u64>,
}

/// `key`'s record.
pub fn session_record(db: &TraceDb, key: &str) -> Result<SessionRecord, TraceError> {
    let engines = db.engines(key)?;
    let page = db.list(key, None, 1)?;
    let last = page.turns.first().map(|r| LastUse {
        turn: r.turn,
        engine: r.engine.clone(),
        tokens: r.tokens,
        token_budget: r.token_budget,
        usage: r
            .token_budget
            .filter(|b| *b > 0)
            .map(|b| r.tokens as f64 / b as f64),
        input_tokens: r.input_tokens,
        cached_tokens: r.cached_tokens,
    });
    Ok(SessionRecord {
        session_key: key.to_owned(),
        turns: page.total,
        engines,
        last,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn raw(id: &str, tokens: u64) -> TracePart {
        TracePart {
            kind: "raw".into(),
            index: None,
            id: Some(id.into()),
            depth: None,
            role: Some("user".into()),
            tokens,
            digest: "00000000".into(),
            span: None,
            quotes: Vec::new(),
            hits: Vec::new(),
        }
    }

    fn summary(id: &str, span: [i64; 2]) -> TracePart {
        TracePart {
            kind: "summary".into(),
            depth: Some(0),
            span: Some(span),
            ..raw(id, 50)
        }
    }

    #[test]
    fn the_diff_names_what_came_in_went_out_and_was_summarized() {
        let before = TurnTrace {
            turn: 4,
            parts: vec![raw("msg_1", 10), raw("msg_2", 20), raw("msg_3", 30)],
            gateway_tokens: 60,
            epoch: Some("1:0".into()),
            ..Default::default()
        };
        let now = TurnTrace {
            turn: 5,
            parts: vec![summary("sum_1", [0, 1]), raw("msg_3", 30), raw("msg_4", 5)],
            gateway_tokens: 85,
            epoch: Some("1:1".into()),
            ..Default::default()
        };
        let d = diff(&now, Some(&before));
        let refs = |v: &[DiffItem]| v.iter().map(|d| d.reference.clone()).collect::<Vec<_>>();
        assert_eq!(refs(&d.came_in), ["sum_1", "msg_4"]);
        assert_eq!(refs(&d.went_out), ["msg_1", "msg_2"]);
        assert_eq!(refs(&d.summarized), ["sum_1"]);
        assert_eq!(d.previous, Some(4));
        assert!(
            d.words
                .iter()
                .any(|w| w.contains("standing for 2 messages")),
            "{:?}",
            d.words
        );
        assert!(d.words.iter().any(|w| w.contains("epoch 1:0 → 1:1")));
    }

    #[test]
    fn warnings_say_over_budget_by_how_much_and_no_summary() {
        let t = TurnTrace {
            token_budget: Some(100),
            gateway_tokens: 130,
            parts: vec![raw("msg_9", 130)],
            left_out: Some(super::super::LeftOut {
                known: true,
                items: 3,
                messages: 3,
                ..Default::default()
            }),
            ..Default::default()
        };
        let w = warnings(&t);
        assert!(
            w.iter().any(|w| w.starts_with("over budget by 30 tokens")),
            "{w:?}"
        );
        assert!(
            w.iter()
                .any(|w| w.starts_with("no summary reached the model")),
            "{w:?}"
        );
    }
}
