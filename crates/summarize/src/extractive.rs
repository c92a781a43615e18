//! The deterministic extractive summarizer: the embedded, offline default summarizer of every
//! engine and the last resort when an LLM summary fails.
//!
//! Head truncation ("fallback-truncation summaries") is what users of lossless-claw complain
//! about (lossless notes §3.5, §10.4): it keeps the greeting and drops the error, the path and
//! the decision. This summarizer instead scores every unit (sentence of prose, line of tool
//! output) by what it contains ([`crate::salience`]: identifiers, paths, commands, numbers,
//! dates, names, decisions, errors, next steps), by position (the first user request, the most
//! recent material) and by the caller's focus, picks the best units within the token budget with
//! a lazy greedy that discounts terms already covered, and emits them in their original order
//! under their speaker labels, so the result reads as a condensed transcript. Salient terms that
//! did not make it into a chosen unit are listed in a final `Key facts:` line.
//!
//! Guarantees: the same request always yields the same bytes (no randomness, time, or hash
//! iteration order reaches the output); the summary has strictly fewer tokens than its input
//! (the conversation plus any previous summary) and never more than `max_tokens`. Each unit is
//! token-counted once; the output is counted once at the end and trimmed if the join margins
//! were too optimistic.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet};

use async_trait::async_trait;
use clawctx_tokens::text_tokens;

use crate::salience::{extract_terms, signals, Term, TermKind};
use crate::segment::{self, floor_char_boundary, Doc, Role};
use crate::{SummarizeError, Summarizer, Summary, SummaryKind, SummaryRequest};

/// Keeps the most informative sentences and lines of its input, in order and under their
/// speaker labels, within the token target, followed by a `Key facts:` line of salient terms
/// that did not fit. Deterministic; works offline; always shorter than its input.
#[derive(Clone, Debug, Default)]
pub struct ExtractiveSummarizer;

impl ExtractiveSummarizer {
    /// Summarizes synchronously (the [`Summarizer`] impl calls this). It cannot fail, so callers
    /// on a blocking thread or in a fallback path can use it directly.
    pub fn summarize_now(&self, request: &SummaryRequest) -> Summary {
        let started = std::time::Instant::now();
        let summary = summarize(request);
        crate::observe::report(crate::observe::SummaryCall {
            summarizer: "extractive",
            took: started.elapsed(),
            ok: true,
        });
        summary
    }
}

#[async_trait]
impl Summarizer for ExtractiveSummarizer {
    fn name(&self) -> &str {
        "extractive"
    }

    async fn summarize(&self, request: SummaryRequest) -> Result<Summary, SummarizeError> {
        Ok(self.summarize_now(&request))
    }
}

/// Prefix of the salient-terms tail line.
const FACTS_PREFIX: &str = "Key facts: ";
/// Section line before the previous summary's content in update mode.
const EARLIER_LINE: &str = "Earlier summary:";
/// Section line before the new material in update mode.
const SINCE_LINE: &str = "Since then:";
/// Budget below which no heading or section lines are written.
const HEADING_MIN_BUDGET: u64 = 80;
/// Tokens allowed for joining a unit to the previous one in the same message (` ` or ` … `).
const JOIN_TOKENS: u64 = 2;
/// Tokens allowed for the newline that starts a message line.
const LINE_TOKENS: u64 = 1;
/// A unit is only clipped to fit if at least this many tokens of it can be kept.
const MIN_CLIP_TOKENS: u64 = 12;
/// Terms longer than this (bytes) are not listed as key facts.
const MAX_FACT_BYTES: usize = 80;

/// The heading line for a kind of summary.
fn heading(kind: &SummaryKind) -> String {
    match kind {
        SummaryKind::History => "Summary of earlier conversation (extractive):".to_owned(),
        SummaryKind::TurnPrefix => "Turn context, split turn (extractive):".to_owned(),
        SummaryKind::Leaf => "Segment summary (extractive):".to_owned(),
        SummaryKind::Condensed { depth } => {
            format!("Condensed summary, depth {depth} (extractive):")
        }
    }
}

/// Whether a line of a previous summary is this summarizer's own structure (heading, section
/// line), which is rewritten rather than carried over.
fn is_structure_line(line: &str) -> bool {
    let line = line.trim();
    line == EARLIER_LINE
        || line == SINCE_LINE
        || (line.ends_with("(extractive):")
            && (line.starts_with("Summary of earlier conversation")
                || line.starts_with("Turn context, split turn")
                || line.starts_with("Segment summary")
                || line.starts_with("Condensed summary, depth")))
}

/// Everything known about the terms of the input, indexed by term id.
#[derive(Default)]
struct TermTable<'a> {
    ids: HashMap<&'a str, usize>,
    entries: Vec<TermEntry<'a>>,
}

struct TermEntry<'a> {
    text: &'a str,
    kind: TermKind,
    /// Occurrences in the input.
    freq: u32,
    /// Listed in a previous summary's key facts: carried forward first.
    carried: bool,
    /// Highest fixed score of a unit containing the term (a path in an error line outranks one
    /// in a directory listing).
    context: u32,
}

impl<'a> TermTable<'a> {
    fn intern(&mut self, text: &'a str, kind: TermKind) -> usize {
        if let Some(&id) = self.ids.get(text) {
            if let Some(e) = self.entries.get_mut(id) {
                e.freq += 1;
            }
            return id;
        }
        let id = self.entries.len();
        self.entries.push(TermEntry {
            text,
            kind,
            freq: 1,
            carried: false,
            context: 0,
        });
        self.ids.insert(text, id);
        id
    }

    fn weight(&self, id: usize) -> u32 {
        self.entries.get(id).map_or(0, |e| e.kind.weight())
    }
}

/// Per-unit analysis.
struct UnitInfo {
    tokens: u64,
    /// Score from signals, role and position (does not change during selection).
    fixed: u32,
    /// Distinct term ids of the unit.
    terms: Vec<usize>,
    /// Byte offset of the first heavy term, to centre a clip on it.
    anchor: Option<usize>,
    /// False for duplicates, injection attempts and units without letters or digits.
    eligible: bool,
}

/// A parsed and analyzed input (the conversation, or a previous summary).
struct Analyzed<'a> {
    doc: Doc<'a>,
    units: Vec<UnitInfo>,
    /// Tokens of `[label]: ` per message (0 for unlabelled messages).
    label_tokens: Vec<u64>,
}

/// Focus words from custom instructions, lowercased.
fn focus_words(instructions: Option<&str>) -> Vec<String> {
    const STOP: &[&str] = &[
        "the",
        "and",
        "for",
        "with",
        "that",
        "this",
        "from",
        "into",
        "about",
        "keep",
        "focus",
        "summary",
        "summarize",
        "please",
        "what",
        "which",
        "only",
        "all",
        "any",
        "are",
        "was",
        "were",
        "our",
        "you",
        "your",
        "its",
        "not",
        "but",
        "also",
        "more",
        "most",
        "on",
        "of",
        "to",
        "in",
    ];
    let Some(text) = instructions else {
        return Vec::new();
    };
    let words: BTreeSet<String> = text
        .split(|c: char| {
            !(c.is_alphanumeric() || c == '_' || c == '-' || c == '.' || c == '/' || c == ':')
        })
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .filter(|w| w.chars().count() >= 3 && !STOP.contains(&w.as_str()))
        .collect();
    words.into_iter().collect()
}

/// Score for the role of the message a unit belongs to.
fn role_score(role: Role) -> u32 {
    match role {
        Role::User => 4,
        Role::BashCommand => 6,
        Role::ToolCall | Role::Summary => 4,
        Role::ToolError => 5,
        Role::Assistant | Role::Plain => 2,
        Role::Note | Role::Other => 1,
        Role::Thinking | Role::ToolResult | Role::BashOutput => 0,
    }
}

/// Parses and scores `doc`, interning its terms into `table`. `positional` enables the
/// first-request and recency bonuses (for the conversation, not for a previous summary).
fn analyze<'a>(
    doc: Doc<'a>,
    table: &mut TermTable<'a>,
    focus: &[String],
    positional: bool,
) -> Analyzed<'a> {
    let n = doc.units.len();
    let first_user = doc.messages.iter().position(|m| m.role == Role::User);
    let last_user = doc.messages.iter().rposition(|m| m.role == Role::User);
    let mut seen: HashSet<&str> = HashSet::new();
    let mut label_cache: HashMap<&str, u64> = HashMap::new();
    let label_tokens = doc
        .messages
        .iter()
        .map(|m| match m.label {
            Some(l) => *label_cache
                .entry(l)
                .or_insert_with(|| text_tokens(&format!("[{l}]: "))),
            None => 0,
        })
        .collect();
    let mut terms: Vec<Term<'a>> = Vec::new();
    let mut units = Vec::with_capacity(n);
    let mut rank_in_first_user = 0u32;
    let mut error_at: Vec<usize> = Vec::new();
    for (index, unit) in doc.units.iter().enumerate() {
        let role = doc
            .messages
            .get(unit.message)
            .map_or(Role::Plain, |m| m.role);
        terms.clear();
        extract_terms(unit.text, &mut terms);
        let mut ids: Vec<usize> = Vec::with_capacity(terms.len());
        let mut anchor = None;
        for t in &terms {
            let id = table.intern(t.text, t.kind);
            if !ids.contains(&id) {
                ids.push(id);
            }
            if anchor.is_none() && t.kind.weight() >= 5 {
                anchor = Some(t.start);
            }
        }
        let sig = signals(unit.text);
        let term_score: u32 = ids.iter().map(|&id| table.weight(id)).sum();
        let mut content = 0u32;
        if sig.decision {
            content += 14;
        }
        if sig.error {
            content += 7;
        }
        if sig.todo {
            content += 7;
        }
        if sig.constraint {
            content += 3;
        }
        if sig.progress {
            content += 5;
        }
        // Lines of tool output right after an error line (the `--> file:line` location, the
        // note) belong to the error.
        let same_message = |k: usize| doc.units.get(k).is_some_and(|u| u.message == unit.message);
        if !role.is_prose_role()
            && (1..=2)
                .any(|d| index >= d && same_message(index - d) && error_at.contains(&(index - d)))
        {
            content += 4;
        }
        if sig.error && !role.is_prose_role() {
            error_at.push(index);
        }
        let filler = sig.filler && term_score == 0 && content == 0;
        let mut fixed = 1;
        if !filler {
            fixed += content + role_score(role);
            if positional {
                if Some(unit.message) == first_user {
                    fixed += match rank_in_first_user {
                        0 => 14,
                        1 => 8,
                        2 => 5,
                        _ => 0,
                    };
                    rank_in_first_user += 1;
                } else if Some(unit.message) == last_user {
                    fixed += 4;
                }
                // Recency: the last fifth of the material earns up to 8 points.
                let tail_start = n - n / 5;
                if n >= 5 && index >= tail_start {
                    let span = (n - tail_start).max(1);
                    fixed += (8 * (index - tail_start + 1) / span) as u32;
                }
            }
        }
        if !focus.is_empty() {
            let lower = unit.text.to_lowercase();
            let hits = focus.iter().filter(|w| lower.contains(w.as_str())).count() as u32;
            fixed += 16 * hits.min(3);
        }
        for &id in &ids {
            if let Some(e) = table.entries.get_mut(id) {
                e.context = e.context.max(fixed);
            }
        }
        let has_content = unit.text.chars().any(char::is_alphanumeric);
        let eligible = has_content && !filler && !sig.injection && seen.insert(unit.text);
        units.push(UnitInfo {
            tokens: text_tokens(unit.text),
            fixed,
            terms: ids,
            anchor,
            eligible,
        });
    }
    Analyzed {
        doc,
        units,
        label_tokens,
    }
}

/// A chosen unit: its index and the text emitted for it (clipped if needed).
struct Chosen {
    unit: usize,
    text: String,
    score: u32,
}

/// The marginal score of a unit given the terms already covered.
fn marginal(info: &UnitInfo, table: &TermTable<'_>, covered: &[bool]) -> u32 {
    info.fixed
        + info
            .terms
            .iter()
            .map(|&id| {
                let w = table.weight(id);
                if covered.get(id).copied().unwrap_or(false) {
                    w / 4
                } else {
                    w
                }
            })
            .sum::<u32>()
}

/// Heap key: score per square root of cost, scaled to an integer so ordering is total.
fn priority(score: u32, tokens: u64) -> u64 {
    // The constant damps the preference for very short units.
    let cost = (tokens + 8) as f64;
    (f64::from(score) * 1000.0 / cost.sqrt()) as u64
}

/// Greedily picks units of `an` within `budget` tokens (label and join margins included) and
/// returns them in original order with the tokens they were charged.
fn select(
    an: &Analyzed<'_>,
    table: &TermTable<'_>,
    covered: &mut [bool],
    budget: u64,
    clip_cap: u64,
) -> (Vec<Chosen>, u64) {
    let mut heap: BinaryHeap<(u64, Reverse<usize>)> = an
        .units
        .iter()
        .enumerate()
        .filter(|(_, u)| u.eligible)
        .map(|(i, u)| {
            (
                priority(marginal(u, table, covered), u.tokens.min(clip_cap)),
                Reverse(i),
            )
        })
        .collect();
    let mut open = vec![false; an.doc.messages.len()];
    let mut chosen = Vec::new();
    let mut used = 0u64;
    while let Some((key, Reverse(i))) = heap.pop() {
        let remaining = budget.saturating_sub(used);
        if remaining < 2 {
            break;
        }
        let (Some(info), Some(unit)) = (an.units.get(i), an.doc.units.get(i)) else {
            continue;
        };
        let score = marginal(info, table, covered);
        let fresh = priority(score, info.tokens.min(clip_cap));
        if fresh < key {
            heap.push((fresh, Reverse(i)));
            continue;
        }
        let is_open = open.get(unit.message).copied().unwrap_or(false);
        let overhead = if is_open {
            JOIN_TOKENS
        } else {
            an.label_tokens.get(unit.message).copied().unwrap_or(0) + LINE_TOKENS
        };
        let (text, tokens) = if info.tokens <= clip_cap && info.tokens + overhead <= remaining {
            (unit.text.to_owned(), info.tokens)
        } else {
            let room = remaining.saturating_sub(overhead).min(clip_cap);
            // Clip to the cap freely, but to leftover room only if most of the unit survives:
            // a fragment of a sentence is worth less than a whole shorter one.
            let wanted = info.tokens.min(clip_cap);
            if room < MIN_CLIP_TOKENS || room * 3 < wanted * 2 {
                continue;
            }
            match clip(unit.text, room, info.anchor) {
                Some(c) => c,
                None => continue,
            }
        };
        used += tokens + overhead;
        if let Some(o) = open.get_mut(unit.message) {
            *o = true;
        }
        for &id in &info.terms {
            let contained = table.entries.get(id).is_some_and(|e| text.contains(e.text));
            if contained {
                if let Some(c) = covered.get_mut(id) {
                    *c = true;
                }
            }
        }
        chosen.push(Chosen {
            unit: i,
            text,
            score,
        });
    }
    chosen.sort_by_key(|c| c.unit);
    (chosen, used)
}

/// Cuts `text` to at most `max_tokens` tokens, marking the cuts with `…`. The window starts at
/// the head, or a little before `anchor` (the first heavy term) when the head would miss it.
/// Returns the clipped text and its token count, or `None` if nothing useful fits.
fn clip(text: &str, max_tokens: u64, anchor: Option<usize>) -> Option<(String, u64)> {
    if max_tokens < 3 || text.is_empty() {
        return None;
    }
    let full = text_tokens(text).max(1);
    let estimate = (text.len() as u64 * max_tokens / full) as usize;
    let mut start = 0;
    if let Some(a) = anchor {
        if a > estimate * 2 / 3 {
            // Start a little before the anchor, but not so late that the window runs past the
            // end of the text with room to spare.
            let back = floor_char_boundary(
                text,
                a.saturating_sub(24)
                    .min(text.len().saturating_sub(estimate * 3 / 4)),
            );
            start = match text.get(back..a).and_then(|s| s.find(char::is_whitespace)) {
                Some(ws) => back + ws,
                None => back,
            };
            start = floor_char_boundary(text, start);
        }
    }
    let body = text.get(start..).unwrap_or("").trim_start();
    let lead = if start > 0 { "…" } else { "" };
    let render = |len: usize| -> String {
        let cut = body.get(..len).unwrap_or("").trim_end();
        let tail = if len < body.len() { "…" } else { "" };
        format!("{lead}{cut}{tail}")
    };
    // Binary search over char boundaries for the longest prefix that fits.
    let (mut lo, mut hi) = (0usize, body.len());
    while lo < hi {
        let mid = floor_char_boundary(body, lo + (hi - lo).div_ceil(2));
        if mid <= lo {
            // No char boundary strictly between lo and hi other than hi itself.
            if text_tokens(&render(hi)) <= max_tokens {
                lo = hi;
            }
            break;
        }
        if text_tokens(&render(mid)) <= max_tokens {
            lo = mid;
        } else {
            hi = mid - 1;
            hi = floor_char_boundary(body, hi);
        }
    }
    if lo == 0 {
        return None;
    }
    // Prefer ending at a word boundary when one is near.
    let mut len = lo;
    if let Some(ws) = body.get(..lo).and_then(|s| s.rfind(char::is_whitespace)) {
        if ws * 10 >= lo * 7 {
            len = ws;
        }
    }
    let out = render(len);
    let tokens = text_tokens(&out);
    if tokens <= max_tokens && out.chars().any(char::is_alphanumeric) {
        Some((out, tokens))
    } else {
        None
    }
}

/// Renders chosen units of `an` as lines, one per message: `[label]: unit unit … unit`.
fn render_lines(an: &Analyzed<'_>, chosen: &[Chosen], out: &mut Vec<String>) {
    let mut current: Option<usize> = None;
    let mut last_unit = 0usize;
    for c in chosen {
        let Some(unit) = an.doc.units.get(c.unit) else {
            continue;
        };
        if current == Some(unit.message) {
            if let Some(line) = out.last_mut() {
                line.push_str(if c.unit == last_unit + 1 {
                    " "
                } else {
                    " … "
                });
                line.push_str(&c.text);
            }
        } else {
            let label = an.doc.messages.get(unit.message).and_then(|m| m.label);
            out.push(match label {
                Some(l) => format!("[{l}]: {}", c.text),
                None => c.text.clone(),
            });
            current = Some(unit.message);
        }
        last_unit = c.unit;
    }
}

/// Splits a previous summary into its content lines and the terms of its `Key facts:` line.
fn split_previous(prev: &str) -> (String, Vec<&str>) {
    let mut content = String::with_capacity(prev.len());
    let mut facts = Vec::new();
    for line in prev.lines() {
        if let Some(list) = line.trim().strip_prefix(FACTS_PREFIX.trim_end()) {
            facts.extend(list.split(", ").map(str::trim).filter(|t| !t.is_empty()));
        } else if !is_structure_line(line) {
            content.push_str(line);
            content.push('\n');
        }
    }
    (content, facts)
}

fn empty(input_tokens: u64) -> Summary {
    Summary {
        text: String::new(),
        input_tokens,
        output_tokens: 0,
    }
}

/// The summarizer proper.
fn summarize(request: &SummaryRequest) -> Summary {
    let conversation = request.conversation.as_str();
    let previous = request
        .previous_summary
        .as_deref()
        .map(str::trim)
        .filter(|p| !p.is_empty());
    let input_tokens = text_tokens(conversation) + previous.map_or(0, text_tokens);
    let budget = request.max_tokens.min(input_tokens.saturating_sub(1));
    if budget == 0 {
        return empty(input_tokens);
    }
    let focus = focus_words(request.custom_instructions.as_deref());
    let (prev_content, prev_facts) = previous.map(split_previous).unwrap_or_default();

    let mut table = TermTable::default();
    let prev = analyze(
        segment::parse(&prev_content, true),
        &mut table,
        &focus,
        false,
    );
    let conv = analyze(
        segment::parse(conversation, false),
        &mut table,
        &focus,
        true,
    );
    for fact in &prev_facts {
        let mut found = Vec::new();
        extract_terms(fact, &mut found);
        let kind = found.first().map_or(TermKind::Code, |t| t.kind);
        let id = table.intern(fact, kind);
        if let Some(e) = table.entries.get_mut(id) {
            e.carried = true;
        }
    }
    let mut covered = vec![false; table.entries.len()];
    let update = !prev.units.is_empty() || !prev_facts.is_empty();

    // Layout: optional heading and section lines, a reserve for key facts, the body.
    let mut fixed_lines: Vec<String> = Vec::new();
    let mut fixed_cost = 0u64;
    if budget >= HEADING_MIN_BUDGET {
        let h = heading(&request.kind);
        fixed_cost += text_tokens(&h) + LINE_TOKENS;
        fixed_lines.push(h);
        if update && !conv.units.is_empty() && !prev.units.is_empty() {
            fixed_cost += text_tokens(EARLIER_LINE) + text_tokens(SINCE_LINE) + 2 * LINE_TOKENS;
        }
    }
    let has_facts = table
        .entries
        .iter()
        .any(|e| e.kind.must_keep() || e.carried);
    let carried_cost: u64 = prev_facts.iter().map(|f| text_tokens(f) + 1).sum();
    let facts_reserve = if has_facts && budget >= 48 {
        let carried = if carried_cost > 0 {
            carried_cost + text_tokens(FACTS_PREFIX) + LINE_TOKENS
        } else {
            0
        };
        (budget / 6).max(carried.min(budget / 4))
    } else {
        0
    };
    let body = budget.saturating_sub(fixed_cost + facts_reserve);
    let clip_cap = (budget / 4).clamp(16, 160).min(body);

    // Update mode: the previous summary first, leaving the new material a guaranteed share.
    let conv_need: u64 = conv
        .doc
        .units
        .iter()
        .zip(&conv.units)
        .filter(|(_, u)| u.eligible)
        .map(|(_, u)| u.tokens.min(clip_cap) + JOIN_TOKENS)
        .sum::<u64>()
        + conv.label_tokens.iter().sum::<u64>();
    let new_reserve = if prev.units.is_empty() {
        0
    } else {
        conv_need.min(body * 2 / 5)
    };
    let (prev_chosen, prev_used) = select(
        &prev,
        &table,
        &mut covered,
        body.saturating_sub(new_reserve),
        clip_cap,
    );
    let (conv_chosen, conv_used) = select(
        &conv,
        &table,
        &mut covered,
        body.saturating_sub(prev_used),
        clip_cap,
    );

    let mut prev_lines = Vec::new();
    render_lines(&prev, &prev_chosen, &mut prev_lines);
    let mut conv_lines = Vec::new();
    render_lines(&conv, &conv_chosen, &mut conv_lines);
    let body_text = format!("{}\n{}", prev_lines.join("\n"), conv_lines.join("\n"));

    // Key facts: must-keep terms missing from the chosen lines, best first.
    let facts_budget = budget.saturating_sub(fixed_cost + prev_used + conv_used);
    let facts = key_facts(&table, &body_text, facts_budget);

    let sections =
        update && !prev_lines.is_empty() && !conv_lines.is_empty() && !fixed_lines.is_empty();
    let assemble = |prev_lines: &[String], conv_lines: &[String], facts: &[&str]| -> String {
        let mut lines: Vec<&str> = fixed_lines.iter().map(String::as_str).collect();
        if sections && !prev_lines.is_empty() && !conv_lines.is_empty() {
            lines.push(EARLIER_LINE);
        }
        lines.extend(prev_lines.iter().map(String::as_str));
        if sections && !prev_lines.is_empty() && !conv_lines.is_empty() {
            lines.push(SINCE_LINE);
        }
        lines.extend(conv_lines.iter().map(String::as_str));
        let facts_line = if facts.is_empty() {
            String::new()
        } else {
            format!("{FACTS_PREFIX}{}", facts.join(", "))
        };
        if !facts_line.is_empty() {
            lines.push(&facts_line);
        }
        lines.join("\n")
    };

    let mut text = assemble(&prev_lines, &conv_lines, &facts);
    let mut tokens = text_tokens(&text);
    if tokens > budget {
        // The join margins were too optimistic: drop facts, then the weakest units, recounting
        // once per step (rare; the margins normally overestimate).
        let mut facts = facts;
        let mut prev_chosen = prev_chosen;
        let mut conv_chosen = conv_chosen;
        while tokens > budget {
            if !facts.is_empty() {
                let excess = (tokens - budget) as usize;
                let drop = (excess / 2).max(1).min(facts.len());
                facts.truncate(facts.len() - drop);
            } else if !drop_weakest(&mut prev_chosen, &mut conv_chosen) {
                text = truncate_to_tokens(&text, budget);
                tokens = text_tokens(&text);
                break;
            }
            let mut p = Vec::new();
            render_lines(&prev, &prev_chosen, &mut p);
            let mut c = Vec::new();
            render_lines(&conv, &conv_chosen, &mut c);
            text = assemble(&p, &c, &facts);
            tokens = text_tokens(&text);
        }
    }
    Summary {
        text,
        input_tokens,
        output_tokens: tokens,
    }
}

/// Removes the lowest-scoring chosen unit (latest on ties) from either list; false if both are
/// empty.
fn drop_weakest(prev: &mut Vec<Chosen>, conv: &mut Vec<Chosen>) -> bool {
    let weakest_prev = prev
        .iter()
        .enumerate()
        .min_by_key(|(i, c)| (c.score, Reverse(*i)))
        .map(|(i, c)| (c.score, i));
    let weakest_conv = conv
        .iter()
        .enumerate()
        .min_by_key(|(i, c)| (c.score, Reverse(*i)))
        .map(|(i, c)| (c.score, i));
    match (weakest_prev, weakest_conv) {
        (Some((sp, ip)), Some((sc, _))) if sp < sc => {
            prev.remove(ip);
        }
        (_, Some((_, ic))) => {
            conv.remove(ic);
        }
        (Some((_, ip)), None) => {
            prev.remove(ip);
        }
        (None, None) => return false,
    }
    true
}

/// Picks key facts: must-keep (or carried-over) terms absent from `body`, by carried-over
/// first, then weight plus a small frequency bonus, then first appearance; within `budget`
/// tokens including the line prefix.
fn key_facts<'a>(table: &TermTable<'a>, body: &str, budget: u64) -> Vec<&'a str> {
    let prefix_tokens = text_tokens(FACTS_PREFIX) + LINE_TOKENS;
    if budget <= prefix_tokens + 1 {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..table.entries.len())
        .filter(|&i| {
            table.entries.get(i).is_some_and(|e| {
                (e.kind.must_keep() || e.carried) && e.text.len() <= MAX_FACT_BYTES
            })
        })
        .collect();
    order.sort_by_key(|&i| {
        let e = table.entries.get(i);
        let carried = e.is_some_and(|e| e.carried);
        let rank = e.map_or(0, |e| {
            e.kind.weight() + e.freq.saturating_sub(1).min(3) + e.context / 4
        });
        (Reverse(carried), Reverse(rank), i)
    });
    let mut remaining = budget - prefix_tokens;
    let mut out = Vec::new();
    for i in order {
        if remaining < 2 {
            break;
        }
        let Some(e) = table.entries.get(i) else {
            continue;
        };
        if body.contains(e.text) {
            continue;
        }
        let cost = text_tokens(e.text) + 1;
        if cost <= remaining {
            remaining -= cost;
            out.push(e.text);
        }
    }
    out
}

/// The longest prefix of `text` (at a char boundary) with at most `max_tokens` tokens. Last
/// resort of the final check.
fn truncate_to_tokens(text: &str, max_tokens: u64) -> String {
    let (mut lo, mut hi) = (0usize, text.len());
    while lo < hi {
        let mid = floor_char_boundary(text, lo + (hi - lo).div_ceil(2));
        if mid <= lo {
            if text_tokens(text.get(..hi).unwrap_or("")) <= max_tokens {
                lo = hi;
            }
            break;
        }
        if text_tokens(text.get(..mid).unwrap_or("")) <= max_tokens {
            lo = mid;
        } else {
            hi = floor_char_boundary(text, mid - 1);
        }
    }
    text.get(..lo).unwrap_or("").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(conversation: &str, max_tokens: u64) -> SummaryRequest {
        SummaryRequest {
            kind: SummaryKind::History,
            conversation: conversation.to_owned(),
            previous_summary: None,
            custom_instructions: None,
            max_tokens,
        }
    }

    #[test]
    fn empty_input_gives_empty_summary() {
        let s = summarize(&request("", 100));
        assert_eq!(s.text, "");
        assert_eq!((s.input_tokens, s.output_tokens), (0, 0));
    }

    #[test]
    fn tiny_input_still_shrinks() {
        let s = summarize(&request("[User]: hi", 100));
        assert!(s.output_tokens < text_tokens("[User]: hi"), "{s:?}");
        assert_eq!(s.output_tokens, text_tokens(&s.text));
    }

    #[test]
    fn clip_centres_on_anchor_and_fits() {
        let text = format!(
            "{} the failure is in src/engine/registry.rs:42 today",
            "filler words here ".repeat(40)
        );
        let anchor = text.find("src/");
        let (out, tokens) = clip(&text, 20, anchor).unwrap_or_default();
        assert!(tokens <= 20 && tokens == text_tokens(&out), "{out}");
        assert!(out.contains("src/engine/registry.rs"), "{out}");
        assert!(out.starts_with('…'), "{out}");
        let (head, _) = clip(&text, 20, None).unwrap_or_default();
        assert!(
            head.starts_with("filler") && head.ends_with('…') && !head.contains("src/"),
            "{head}"
        );
    }

    #[test]
    fn truncate_to_tokens_respects_limit_on_multibyte_text() {
        let text = "日本語のテキスト🙂".repeat(50);
        let cut = truncate_to_tokens(&text, 17);
        assert!(text_tokens(&cut) <= 17);
        assert!(!cut.is_empty() && text.starts_with(&cut));
    }

    #[test]
    fn focus_words_are_sorted_lowercase_and_filtered() {
        assert_eq!(
            focus_words(Some("Focus on the Database and SQLite")),
            vec!["database".to_owned(), "sqlite".to_owned()]
        );
    }

    #[test]
    fn previous_summary_structure_is_stripped() {
        let (content, facts) =
            split_previous("Segment summary (extractive):\n[User]: fix it\nKey facts: a.rs, E0277");
        assert_eq!(content, "[User]: fix it\n");
        assert_eq!(facts, vec!["a.rs", "E0277"]);
    }
}
