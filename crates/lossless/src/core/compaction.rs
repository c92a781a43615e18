//! Compaction: replacing old frontier ranges with summaries that form a DAG.
//!
//! Triggered when frontier tokens pass `contextThreshold × budget`, a compaction runs rounds
//! until the frontier is at or below the low-water mark (`lowWaterRatio × budget`), so it is
//! rare and large rather than a small rewrite every turn. Each round is planned on the store
//! thread from the frontier and its running totals:
//!
//! * **leaf** round: runs of raw messages before the protected fresh tail, cut into chunks of
//!   at most `leafChunkTokens` (never before a tool result, so a call and its results stay in
//!   one chunk), oldest first, as many as the low-water goal needs;
//! * **condensed** round (when no leaf chunk is due): contiguous runs of same-depth summaries
//!   with at least `condensedMinFanout` members, up to `incrementalMaxDepth`, when the summary
//!   prefix is over its target or the goal is not reached; under pressure (still above the
//!   threshold) with the hard fanout and no depth cap.
//!
//! The chunks of a round are independent and are summarized concurrently (bounded). Every
//! summary is validated (non-empty, fewer tokens than its source, within its target × overage,
//! keeps enough of the source's salient terms, repeats some of its words). A model summary that
//! fails or is rejected is replaced, for that range, by the extractive summary (recorded as
//! [`FALLBACK_SUMMARIZER`]) and counts toward the circuit breaker: a weak summary model never
//! stops compaction, so the assembly never has to drop history that no summary covers. Only
//! when the extractive summary fails too does the range stay raw (a later compaction retries
//! it). All good summaries of a round are committed
//! in one transaction that checks the planned range is unchanged, inserts the node and its
//! child edges and replaces the range by one frontier item (the first ordinal is reused: no
//! renumbering). The spend guard and circuit breaker live in the `guard_state` table; while the
//! breaker is open or the window's call budget is spent, the extractive summarizer (local, free)
//! is used instead: it is the last resort.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use clawctx_summarize::{
    salient_terms, ExtractiveSummarizer, Summarizer, SummaryKind, SummaryRequest,
};
use clawctx_tokens::{message_tokens, text_tokens};
use futures::StreamExt;
use serde::Serialize;

use crate::config::LosslessConfig;
use crate::core::assemble::render_summary;
use crate::core::codec::role;
use crate::error::{LosslessError, Result};

/// How one compaction was asked for.
#[derive(Clone, Debug, Default)]
pub struct CompactionOptions {
    /// Token budget the thresholds are fractions of.
    pub budget: u64,
    /// Compact now even below the threshold.
    pub force: bool,
    /// Extra summary instructions.
    pub custom_instructions: Option<String>,
    /// Raw messages kept out of the summaries instead of `freshTailCount` (a forced overflow
    /// recovery reaching into the fresh tail, see `LosslessEngine::compact`).
    pub fresh_tail: Option<usize>,
}

/// What a compaction did.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionReport {
    /// Rounds run.
    pub rounds: usize,
    /// Leaf summaries created.
    pub leaf_created: usize,
    /// Condensed summaries created.
    pub condensed_created: usize,
    /// Model summaries that failed or were rejected (their ranges summarized extractively
    /// instead, or left raw when that failed too).
    pub failed: usize,
    /// Summaries produced by the extractive last resort (the breaker open, the call budget
    /// spent, or a model summary failed).
    pub extractive_used: usize,
    /// Frontier tokens before.
    pub tokens_before: u64,
    /// Frontier tokens after.
    pub tokens_after: u64,
    /// Engine time (planning, input building, validation, commit), summarizer excluded.
    pub engine_micros: u64,
    /// Time spent waiting for summaries.
    pub summarizer_micros: u64,
    /// Why nothing (more) happened.
    pub reason: String,
}

impl CompactionReport {
    /// Summaries created.
    pub fn created(&self) -> usize {
        self.leaf_created + self.condensed_created
    }
}

#[derive(Clone, Debug)]
/// One frontier item as compaction planning sees it (a message's seq and time twice, a
/// summary's span).
pub(crate) struct FItem {
    pub(crate) ord: i64,
    pub(crate) kind: i64,
    pub(crate) id: i64,
    pub(crate) tokens: u64,
    pub(crate) role: i64,
    pub(crate) seq_lo: i64,
    pub(crate) seq_hi: i64,
    pub(crate) ts_lo: Option<i64>,
    pub(crate) ts_hi: Option<i64>,
    pub(crate) depth: i64,
}

impl FItem {
    /// A raw message at ordinal `ord` of the frontier.
    pub(crate) fn message(
        ord: i64,
        id: i64,
        tokens: u64,
        role: i64,
        seq: i64,
        ts: Option<i64>,
    ) -> Self {
        FItem {
            ord,
            kind: 0,
            id,
            tokens,
            role,
            seq_lo: seq,
            seq_hi: seq,
            ts_lo: ts,
            ts_hi: ts,
            depth: -1,
        }
    }

    /// A summary at ordinal `ord` of the frontier, covering `seq` and `ts` spans.
    pub(crate) fn summary(
        ord: i64,
        id: i64,
        tokens: u64,
        depth: i64,
        seq: (i64, i64),
        ts: (Option<i64>, Option<i64>),
    ) -> Self {
        FItem {
            ord,
            kind: 1,
            id,
            tokens,
            role: -1,
            seq_lo: seq.0,
            seq_hi: seq.1,
            ts_lo: ts.0,
            ts_hi: ts.1,
            depth,
        }
    }
}

/// One planned summary: a contiguous frontier range and its summarizer input.
#[derive(Clone, Debug)]
pub(crate) struct Chunk {
    pub(crate) conv_id: i64,
    pub(crate) depth: i64,
    pub(crate) first_ord: i64,
    pub(crate) items: Vec<(i64, i64)>,
    pub(crate) item_tokens: Vec<u64>,
    pub(crate) source_tokens: u64,
    pub(crate) seq_lo: i64,
    pub(crate) seq_hi: i64,
    pub(crate) ts_lo: Option<i64>,
    pub(crate) ts_hi: Option<i64>,
    pub(crate) max_tokens: u64,
    pub(crate) input: String,
}

/// The summary produced for a chunk.
pub(crate) struct Produced {
    pub(crate) chunk: Chunk,
    pub(crate) text: String,
    pub(crate) summarizer: String,
}

/// Persisted guard state of one conversation.
#[derive(Clone, Debug, Default)]
pub(crate) struct Guard {
    pub(crate) window_start_ms: i64,
    pub(crate) calls_in_window: i64,
    pub(crate) consecutive_failures: i64,
    pub(crate) breaker_open_until_ms: i64,
}

/// A leaf summary's target: at most what leaves room for its `<summary …>` wrapper within the
/// source, so that the summary in the frontier is smaller than what it replaces.
fn leaf_target(cfg: &LosslessConfig, source: u64, budget: u64) -> u64 {
    let t = cfg
        .leaf_target_tokens
        .min(summary_cap(budget))
        .min(source * 35 / 100)
        .max(192);
    t.min(source.saturating_sub(RENDER_OVERHEAD + 1)).max(1)
}

/// The most a summary may take of a `budget` (a tenth; no cap when the budget is not known):
/// at a small window the configured targets (2,400 and 2,000 tokens, sized for a 128k one)
/// would fill a compaction's low point with a few summaries, leaving the context little room
/// to grow before the next compaction (prompt cache) and the recall block little room for
/// quotes. A sixteenth (issue #29) kept the cache as warm but left summaries a mean of ~580
/// tokens of a 4,000-token context, which kept the answer of 3.5% of the compacted LoCoMo
/// turns that stated it; a tenth gives them ~760 and keeps 13.5%, reachability +1.5 points,
/// the cache figures unchanged (issue #30, BENCHMARKS.md §3).
fn summary_cap(budget: u64) -> u64 {
    if budget == 0 {
        u64::MAX
    } else {
        budget / 10
    }
}

/// A condensed summary's target, with the same room for its wrapper.
fn condensed_target(cfg: &LosslessConfig, source: u64, budget: u64) -> u64 {
    let t = cfg
        .condensed_target_tokens
        .min(summary_cap(budget))
        .min(source / 2)
        .max(128);
    t.min(source.saturating_sub(RENDER_OVERHEAD + 1)).max(1)
}

/// Per-summary rendering overhead (the `<summary …>` wrapper), for projections.
const RENDER_OVERHEAD: u64 = 40;

/// Why a compaction round need not run, from the frontier's total alone: below the threshold
/// (first round, not forced) or at the low-water mark. `None`: plan the round.
pub(crate) fn early_stop(
    total: u64,
    cfg: &LosslessConfig,
    opts: &CompactionOptions,
    first_round: bool,
) -> Option<String> {
    let threshold = cfg.threshold_tokens(opts.budget);
    let goal = cfg.low_water_tokens(opts.budget);
    if first_round && !opts.force && total <= threshold {
        return Some(format!("below threshold ({total} <= {threshold} tokens)"));
    }
    if !(opts.force && first_round) && total <= goal {
        return Some(format!(
            "at or below low-water mark ({total} <= {goal} tokens)"
        ));
    }
    None
}

/// Why a round planned nothing although the frontier is over its goal.
pub(crate) const NOTHING_ELIGIBLE: &str = "nothing eligible (fresh tail, fanout or depth limits)";

/// The ranges of `items` (the whole frontier, oldest first, totalling `total` tokens) that the
/// round summarizes, as `(start, end, depth of the new summary)`: leaf chunks when any are due,
/// else condensed ones (see the module header). Ranges starting at an ordinal in `exclude`
/// (their summary failed earlier in this compaction) are skipped. Written once for every
/// backend: only reading `items` differs.
pub(crate) fn choose_ranges(
    items: &[FItem],
    total: u64,
    cfg: &LosslessConfig,
    opts: &CompactionOptions,
    first_round: bool,
    exclude: &HashSet<i64>,
) -> Vec<(usize, usize, i64)> {
    let threshold = cfg.threshold_tokens(opts.budget);
    let goal = cfg.low_water_tokens(opts.budget);
    let force_now = opts.force && first_round;
    // Fresh tail: the newest `freshTailCount` raw messages within the tail's token cap (the
    // newest user message and what follows it whatever their size), extended back so it
    // never starts with a tool result. An explicit `opts.fresh_tail` (overflow recovery) is
    // a count only.
    let mut b = items.len();
    let mut raw_seen = 0usize;
    let fresh_tail = opts.fresh_tail.unwrap_or(cfg.fresh_tail_count);
    let cap = match opts.fresh_tail {
        Some(_) => u64::MAX,
        None => cfg.fresh_tail_tokens(opts.budget),
    };
    let newest_user = items
        .iter()
        .rposition(|x| x.kind == 0 && x.role == role::USER);
    let mut tail_tokens = 0u64;
    while b > 0 && raw_seen < fresh_tail {
        let cand = &items[b - 1];
        let must = newest_user.is_some_and(|u| b > u);
        if !must && tail_tokens + cand.tokens > cap {
            break;
        }
        b -= 1;
        tail_tokens += cand.tokens;
        if cand.kind == 0 {
            raw_seen += 1;
        }
    }
    while b > 0 && b < items.len() && items[b].kind == 0 && items[b].role == role::TOOL_RESULT {
        b -= 1;
    }
    let eligible = &items[..b];

    // Leaf chunks. A run's last chunk under the fanout rule (fewer than `leafMinFanout`
    // messages, under half a chunk) waits for more messages, as `partial`, unless nothing
    // else brings the frontier under the threshold (below).
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    let mut partial: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < eligible.len() {
        if eligible[i].kind != 0 {
            i += 1;
            continue;
        }
        let s = i;
        while i < eligible.len() && eligible[i].kind == 0 {
            i += 1;
        }
        let e = i;
        let mut start = s;
        let mut acc = 0u64;
        for j in s..e {
            if j > start
                && acc + eligible[j].tokens > cfg.leaf_chunk_tokens
                && eligible[j].role != role::TOOL_RESULT
            {
                ranges.push((start, j));
                start = j;
                acc = 0;
            }
            acc += eligible[j].tokens;
        }
        if start < e {
            let n = e - start;
            if opts.force || n >= cfg.leaf_min_fanout || acc >= cfg.leaf_chunk_tokens / 2 {
                ranges.push((start, e));
            } else {
                partial.push((start, e));
            }
        }
    }
    let mut projected = total;
    let mut chosen = Vec::new();
    for (s, e) in ranges {
        if exclude.contains(&eligible[s].ord) {
            continue;
        }
        if !force_now && projected <= goal {
            break;
        }
        let src: u64 = eligible[s..e].iter().map(|x| x.tokens).sum();
        let est = leaf_target(cfg, src, opts.budget) + RENDER_OVERHEAD;
        projected = projected.saturating_sub(src.saturating_sub(est));
        chosen.push((s, e, 0i64));
    }

    if chosen.is_empty() {
        // Condensed chunks: shallowest depth with a qualifying run.
        let prefix: u64 = eligible
            .iter()
            .filter(|x| x.kind == 1)
            .map(|x| x.tokens)
            .sum();
        let routine_due = prefix > cfg.prefix_target_tokens(opts.budget) || projected > goal;
        let phases: [(usize, bool); 2] = [
            (cfg.condensed_min_fanout, true),
            (cfg.condensed_min_fanout_hard, false),
        ];
        for (fanout, routine) in phases {
            if routine && !routine_due {
                continue;
            }
            if !routine && projected <= threshold {
                continue;
            }
            let mut depths: Vec<i64> = eligible
                .iter()
                .filter(|x| x.kind == 1)
                .map(|x| x.depth)
                .collect();
            depths.sort_unstable();
            depths.dedup();
            for d in depths {
                if routine && cfg.incremental_max_depth >= 0 && d + 1 > cfg.incremental_max_depth {
                    continue;
                }
                let mut i = 0;
                while i < eligible.len() {
                    if !(eligible[i].kind == 1 && eligible[i].depth == d) {
                        i += 1;
                        continue;
                    }
                    let s = i;
                    while i < eligible.len() && eligible[i].kind == 1 && eligible[i].depth == d {
                        i += 1;
                    }
                    let e = i;
                    let mut start = s;
                    let mut acc = 0u64;
                    for j in s..=e {
                        let boundary = j == e
                            || (acc + eligible[j].tokens > cfg.leaf_chunk_tokens
                                && j - start >= fanout);
                        if boundary {
                            if j - start >= fanout && !exclude.contains(&eligible[start].ord) {
                                chosen.push((start, j, d + 1));
                            }
                            start = j;
                            acc = 0;
                        }
                        if j < e {
                            acc += eligible[j].tokens;
                        }
                    }
                }
                if !chosen.is_empty() {
                    break;
                }
            }
            if !chosen.is_empty() {
                break;
            }
        }
    }
    // Compaction always makes progress: over the threshold with nothing else to take (a few
    // long messages between the summaries and the fresh tail, short of the fanout), the
    // waiting chunks go, oldest first, each where its summary is smaller than it.
    if chosen.is_empty() && projected > threshold {
        for (s, e) in partial {
            if exclude.contains(&eligible[s].ord) || projected <= goal {
                continue;
            }
            let src: u64 = eligible[s..e].iter().map(|x| x.tokens).sum();
            let est = leaf_target(cfg, src, opts.budget) + RENDER_OVERHEAD;
            if est < src {
                projected -= src - est;
                chosen.push((s, e, 0i64));
            }
        }
    }
    chosen
}

/// The summarizer input of a condensed chunk: its summaries' texts `(text, from_ts, to_ts)`,
/// each headed by its time span.
pub(crate) fn condensed_input(sources: &[(String, Option<i64>, Option<i64>)]) -> String {
    let mut out = String::new();
    for (text, f, t) in sources {
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(&format!("[{} - {}]\n{text}", fmt_ts(*f), fmt_ts(*t)));
    }
    out
}

/// The chunk summarizing `items` (a contiguous frontier range of `conv_id`) into a summary of
/// `depth`, with its summarizer `input` ([`clawctx_summarize::serialize_conversation`] of the messages, or
/// [`condensed_input`]).
pub(crate) fn make_chunk(
    conv_id: i64,
    items: &[FItem],
    depth: i64,
    cfg: &LosslessConfig,
    budget: u64,
    input: String,
) -> Chunk {
    let source_tokens: u64 = items.iter().map(|x| x.tokens).sum();
    let max_tokens = if depth == 0 {
        leaf_target(cfg, source_tokens, budget)
    } else {
        condensed_target(cfg, source_tokens, budget)
    };
    Chunk {
        conv_id,
        depth,
        first_ord: items.first().map_or(0, |x| x.ord),
        items: items.iter().map(|x| (x.kind, x.id)).collect(),
        item_tokens: items.iter().map(|x| x.tokens).collect(),
        source_tokens,
        seq_lo: items.iter().map(|x| x.seq_lo).min().unwrap_or(0),
        seq_hi: items.iter().map(|x| x.seq_hi).max().unwrap_or(0),
        ts_lo: items.iter().filter_map(|x| x.ts_lo).min(),
        ts_hi: items.iter().filter_map(|x| x.ts_hi).max(),
        max_tokens,
        input,
    }
}

pub(crate) fn fmt_ts(t: Option<i64>) -> String {
    t.and_then(chrono::DateTime::from_timestamp_millis)
        .map(|d| d.format("%Y-%m-%d %H:%M").to_string())
        .unwrap_or_else(|| "?".into())
}

/// Why a summary was rejected, or `None` when it is acceptable.
pub fn validate_summary(
    cfg: &LosslessConfig,
    source_text: &str,
    source_tokens: u64,
    max_tokens: u64,
    summary: &str,
) -> Option<String> {
    let t = text_tokens(summary);
    if summary.trim().is_empty() {
        return Some("empty summary".into());
    }
    if t >= source_tokens {
        return Some(format!(
            "summary ({t} tokens) is not smaller than its source ({source_tokens})"
        ));
    }
    let cap = (max_tokens as f64 * cfg.summary_max_overage_factor).ceil() as u64;
    if t > cap {
        return Some(format!(
            "summary ({t} tokens) exceeds its target ({max_tokens} × {})",
            cfg.summary_max_overage_factor
        ));
    }
    if let Some(shared) = shares_too_few_words(source_text, summary) {
        return Some(format!(
            "summary repeats {shared} of its source's words, needs {MIN_SHARED_WORDS}"
        ));
    }
    if cfg.min_salient_retention > 0.0 {
        let terms = salient_terms(source_text);
        let considered = terms.len().min((max_tokens / 16).max(1) as usize);
        let needed = (cfg.min_salient_retention * considered as f64).ceil() as usize;
        if needed > 0 {
            let lower = summary.to_lowercase();
            let kept = terms
                .iter()
                .filter(|term| lower.contains(&term.to_lowercase()))
                .count();
            if kept < needed {
                return Some(format!(
                    "summary keeps {kept} of the source's salient terms, needs {needed}"
                ));
            }
        }
    }
    None
}

/// Distinct words of its source a summary must repeat.
const MIN_SHARED_WORDS: usize = 2;

/// Besides the search's stopwords, words that do not show a summary speaks of its source: the
/// serialized conversation's own labels ("User:", "Assistant:", "Tool result"), which every
/// source has, and what a model's generic refusal is made of.
const GENERIC_WORDS: &[&str] = &[
    "assistant",
    "conversation",
    "result",
    "summarize",
    "summary",
    "thinking",
    "time",
    "tool",
    "user",
];

/// The summary's count of shared words when it repeats fewer than [`MIN_SHARED_WORDS`] of
/// its source's content words (four letters or more, stopwords and [`GENERIC_WORDS`] aside),
/// or `None`. The salient-term rule counts names, numbers and paths, which plain chat may not
/// have at all: without this rule a model's "I cannot summarize this conversation" passed for
/// a summary of it. Words in Chinese, Japanese or Korean script are not counted (those texts are not
/// split into words by spaces), and a source with too few words of its own is not judged.
fn shares_too_few_words(source: &str, summary: &str) -> Option<usize> {
    fn words(text: &str) -> HashSet<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| {
                w.chars().count() >= 4
                    && w.chars().any(char::is_alphabetic)
                    && !w.chars().any(crate::core::terms::is_cjk)
            })
            .map(str::to_lowercase)
            .filter(|w| {
                !crate::core::search::STOPWORDS.contains(&w.as_str())
                    && !GENERIC_WORDS.contains(&w.as_str())
            })
            .collect()
    }
    let source = words(source);
    if source.len() < 2 * MIN_SHARED_WORDS {
        return None;
    }
    let shared = words(summary).intersection(&source).count();
    (shared < MIN_SHARED_WORDS).then_some(shared)
}

enum Outcome {
    /// A summary, and whether the extractive summarizer wrote it as the primary.
    Ok(Produced, bool),
    /// The model's summary failed or was rejected (why), and the extractive summarizer's
    /// summary of the same range takes its place.
    Fallback(Produced, String),
    /// No summary: the range stays raw this round.
    Failed(String),
}

async fn summarize_chunk(
    chunk: Chunk,
    summarizer: Arc<dyn Summarizer>,
    use_primary: bool,
    cfg: Arc<LosslessConfig>,
    custom: Option<String>,
) -> (Outcome, u64, u64) {
    let extractive = !use_primary || summarizer.name() == "extractive";
    let (first, mut summarizer_us, mut validator_us) =
        attempt(&chunk, &summarizer, extractive, &cfg, custom.clone()).await;
    let outcome = match first {
        Ok(text) => {
            let name = if extractive {
                "extractive".to_owned()
            } else {
                summarizer.name().to_owned()
            };
            Outcome::Ok(
                Produced {
                    chunk,
                    text,
                    summarizer: name,
                },
                extractive,
            )
        }
        Err(why) if extractive => Outcome::Failed(why),
        Err(why) => {
            // Compaction always makes progress: the range is summarized extractively now
            // rather than left raw for a later compaction that may never come.
            let (second, s_us, v_us) = attempt(&chunk, &summarizer, true, &cfg, custom).await;
            summarizer_us += s_us;
            validator_us += v_us;
            match second {
                Ok(text) => Outcome::Fallback(
                    Produced {
                        chunk,
                        text,
                        summarizer: FALLBACK_SUMMARIZER.to_owned(),
                    },
                    why,
                ),
                Err(again) => {
                    Outcome::Failed(format!("{why}; the extractive summary too: {again}"))
                }
            }
        }
    };
    (outcome, summarizer_us, validator_us)
}

/// The summarizer name a summary carries (in the DAG, the trace and the dashboard) when the
/// extractive summarizer wrote it because the model's summary of the same range failed or
/// was rejected.
pub const FALLBACK_SUMMARIZER: &str = "extractive-fallback";

/// One summary of `chunk`, validated: its text, or why there is none; with the time spent in
/// the summarizer and in validation (µs).
async fn attempt(
    chunk: &Chunk,
    summarizer: &Arc<dyn Summarizer>,
    extractive: bool,
    cfg: &Arc<LosslessConfig>,
    custom: Option<String>,
) -> (std::result::Result<String, String>, u64, u64) {
    let started = Instant::now();
    let kind = if chunk.depth == 0 {
        SummaryKind::Leaf
    } else {
        SummaryKind::Condensed {
            depth: chunk.depth as u32,
        }
    };
    let req = SummaryRequest {
        kind,
        conversation: chunk.input.clone(),
        previous_summary: None,
        custom_instructions: custom,
        max_tokens: chunk.max_tokens,
    };
    let result = if extractive {
        tokio::task::spawn_blocking(move || Ok(ExtractiveSummarizer.summarize_now(&req)))
            .await
            .unwrap_or_else(|e| Err(clawctx_summarize::SummarizeError::Failed(e.to_string())))
    } else {
        summarizer.summarize(req).await
    };
    let summarizer_us = started.elapsed().as_micros() as u64;
    let v0 = Instant::now();
    let text = match result {
        Err(e) => return (Err(e.to_string()), summarizer_us, 0),
        Ok(s) => s.text,
    };
    let check = {
        let (cfg, input, text2) = (cfg.clone(), chunk.input.clone(), text.clone());
        let (src, max) = (chunk.source_tokens, chunk.max_tokens);
        tokio::task::spawn_blocking(move || validate_summary(&cfg, &input, src, max, &text2))
            .await
            .unwrap_or_else(|e| Some(e.to_string()))
    };
    // The summary takes its items' place in the frontier wrapped in `<summary …>`: a
    // compaction must never make the context larger (a condensation of small summaries with a
    // summary close to its source's size would). The id is a placeholder of ten digits,
    // longer than any real one.
    let check = check.or_else(|| {
        let rendered = render_summary(9_999_999_999, chunk.depth, chunk.ts_lo, chunk.ts_hi, &text);
        let tokens = message_tokens(&rendered);
        (tokens >= chunk.source_tokens).then(|| {
            format!(
                "summary with its wrapper ({tokens} tokens) is not smaller than what it replaces ({})",
                chunk.source_tokens
            )
        })
    });
    let validator_us = v0.elapsed().as_micros() as u64;
    match check {
        Some(why) => (Err(why), summarizer_us, validator_us),
        None => (Ok(text), summarizer_us, validator_us),
    }
}

/// What a compaction needs from a backend: its three store steps. The rounds, the guard and
/// the summaries ([`compact_conversation`]) are the same on every backend.
#[async_trait::async_trait]
pub(crate) trait CompactionSteps: Send + Sync {
    /// The conversation's frontier tokens (0 when it is gone).
    async fn frontier_tokens(&self, conv_id: i64) -> Result<i64>;
    /// Plans a round (see [`crate::sqlite::Db::plan_round`]) and reads the conversation's guard state.
    async fn plan_round(
        &self,
        conv_id: i64,
        cfg: Arc<LosslessConfig>,
        opts: CompactionOptions,
        first_round: bool,
        exclude: HashSet<i64>,
    ) -> Result<(Vec<Chunk>, String, Guard)>;
    /// Commits a round's summaries in one transaction (a chunk whose range changed since it
    /// was planned is skipped) and stores the guard state; returns how many were committed.
    async fn commit_round(
        &self,
        conv_id: i64,
        produced: Vec<Produced>,
        guard: Guard,
        failures: i64,
    ) -> Result<usize>;
}

/// Runs one compaction of conversation `conv_id`.
pub(crate) async fn compact_conversation(
    store: &dyn CompactionSteps,
    summarizer: Arc<dyn Summarizer>,
    cfg: Arc<LosslessConfig>,
    conv_id: i64,
    opts: CompactionOptions,
) -> Result<CompactionReport> {
    // Every pass that did something is reported to the host's observers (the gateway's
    // `/metrics`): the engine's own threshold compactions happen inside `afterTurn` and
    // `commitTurn`, where the host cannot time them.
    let started = Instant::now();
    let result = compact_rounds(store, summarizer, cfg, conv_id, opts).await;
    let summaries = result.as_ref().map_or(0, |r| r.created());
    if result.is_err() || summaries > 0 {
        clawctx_summarize::observe::report_compaction(clawctx_summarize::observe::CompactionCall {
            engine: crate::ENGINE_ID,
            took: started.elapsed(),
            summaries: u32::try_from(summaries).unwrap_or(u32::MAX),
            ok: result.is_ok(),
        });
    }
    result
}

async fn compact_rounds(
    store: &dyn CompactionSteps,
    summarizer: Arc<dyn Summarizer>,
    cfg: Arc<LosslessConfig>,
    conv_id: i64,
    opts: CompactionOptions,
) -> Result<CompactionReport> {
    let mut report = CompactionReport::default();
    let before = store.frontier_tokens(conv_id).await?;
    report.tokens_before = before.max(0) as u64;
    let mut exclude: HashSet<i64> = HashSet::new();
    let custom = opts
        .custom_instructions
        .clone()
        .or_else(|| cfg.custom_instructions.clone());
    for round in 0..cfg.max_compaction_rounds {
        let t0 = Instant::now();
        let (chunks, reason, guard) = store
            .plan_round(
                conv_id,
                cfg.clone(),
                opts.clone(),
                round == 0,
                exclude.clone(),
            )
            .await?;
        report.engine_micros += t0.elapsed().as_micros() as u64;
        if chunks.is_empty() {
            report.reason = reason;
            break;
        }
        report.rounds += 1;
        let now = crate::core::conv::now_ms();
        let mut guard = guard;
        if now - guard.window_start_ms > cfg.summary_call_window_ms as i64 {
            guard.window_start_ms = now;
            guard.calls_in_window = 0;
        }
        let breaker_open = guard.breaker_open_until_ms > now;
        let spent = guard.calls_in_window >= cfg.summary_max_calls_per_window as i64;
        let use_primary = !breaker_open && !spent;
        // Only a model's calls count in the guard: an extractive pass (the engine's
        // summarizer when no model is configured, or one run to make room before an
        // assembly) neither spends the call budget nor closes the breaker.
        let guarded = use_primary && summarizer.name() != "extractive";
        let n = chunks.len();
        let firsts: Vec<i64> = chunks.iter().map(|c| c.first_ord).collect();
        let round_start = Instant::now();
        let results: Vec<(usize, (Outcome, u64, u64))> =
            futures::stream::iter(chunks.into_iter().enumerate())
                .map(|(i, ch)| {
                    let s = summarizer.clone();
                    let cfg = cfg.clone();
                    let custom = custom.clone();
                    async move { (i, summarize_chunk(ch, s, use_primary, cfg, custom).await) }
                })
                .buffer_unordered(cfg.summary_concurrency)
                .collect()
                .await;
        let wall = round_start.elapsed().as_micros() as u64;
        let mut max_sum_us = 0;
        let mut produced = Vec::new();
        let mut failures = 0i64;
        for (i, (outcome, sum_us, val_us)) in results {
            max_sum_us = max_sum_us.max(sum_us);
            report.engine_micros += val_us / (n as u64).max(1);
            match outcome {
                Outcome::Ok(p, was_extractive) => {
                    if was_extractive && use_primary {
                        // primary is the extractive summarizer itself
                    } else if was_extractive {
                        report.extractive_used += 1;
                    }
                    if guarded {
                        guard.consecutive_failures = 0;
                    }
                    produced.push(p);
                }
                Outcome::Fallback(p, why) => {
                    tracing::warn!(
                        "lossless: the model's summary rejected, the range summarized extractively instead: {why}"
                    );
                    report.failed += 1;
                    report.extractive_used += 1;
                    // A rejection counts toward the circuit breaker like an error: a model
                    // that keeps answering badly stops being asked for a while.
                    failures += 1;
                    guard.consecutive_failures += 1;
                    produced.push(p);
                }
                Outcome::Failed(why) => {
                    tracing::warn!("lossless: summary rejected, range stays raw: {why}");
                    report.failed += 1;
                    exclude.insert(firsts[i]);
                    if guarded {
                        failures += 1;
                        guard.consecutive_failures += 1;
                    }
                }
            }
        }
        report.summarizer_micros += max_sum_us.min(wall);
        if guarded {
            guard.calls_in_window += n as i64;
            if guard.consecutive_failures >= cfg.circuit_breaker_threshold as i64 {
                guard.breaker_open_until_ms = now + cfg.circuit_breaker_cooldown_ms as i64;
                tracing::warn!("lossless: summarizer circuit breaker open; extractive summaries until it closes");
            } else if guard.consecutive_failures == 0 {
                guard.breaker_open_until_ms = 0;
            }
        }
        let leaves = produced.iter().filter(|p| p.chunk.depth == 0).count();
        let condensed = produced.len() - leaves;
        // Committed oldest range first whatever order the summaries came back in, so
        // summary ids follow the history on every run and every backend.
        produced.sort_by_key(|p| p.chunk.first_ord);
        let t1 = Instant::now();
        let committed = store
            .commit_round(conv_id, produced, guard, failures)
            .await?;
        report.engine_micros += t1.elapsed().as_micros() as u64;
        // A round commits all of its summaries or none: only committed ones are counted.
        if committed > 0 {
            report.leaf_created += leaves;
            report.condensed_created += condensed;
        }
        if committed == 0 && failures == 0 {
            report.reason = "planned ranges changed concurrently".into();
            break;
        }
    }
    let after = store.frontier_tokens(conv_id).await?;
    report.tokens_after = after.max(0) as u64;
    // The reason says what happened: a compaction that created summaries says so, not why its
    // last round found nothing more to do ("compacted: true" with "nothing eligible" read as
    // a contradiction).
    if report.created() > 0 {
        report.reason = format!(
            "compacted: {} summaries in {} rounds",
            report.created(),
            report.rounds
        );
    } else if report.reason.is_empty() {
        report.reason = "nothing compacted".into();
    }
    Ok(report)
}

impl From<tokio::task::JoinError> for LosslessError {
    fn from(e: tokio::task::JoinError) -> Self {
        LosslessError::Corrupt(format!("worker task failed: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` raw messages of `tokens` each, alternating user and assistant.
    fn raw(n: usize, tokens: u64) -> Vec<FItem> {
        (0..n)
            .map(|i| {
                let r = if i % 2 == 0 {
                    role::USER
                } else {
                    role::ASSISTANT
                };
                FItem::message(i as i64, i as i64 + 1, tokens, r, i as i64, None)
            })
            .collect()
    }

    fn leaf_end(items: &[FItem], cfg: &LosslessConfig, budget: u64) -> Option<usize> {
        let total = items.iter().map(|x| x.tokens).sum();
        let opts = CompactionOptions {
            budget,
            ..Default::default()
        };
        choose_ranges(items, total, cfg, &opts, true, &HashSet::new())
            .first()
            .map(|(_, e, _)| *e)
    }

    #[test]
    fn the_fresh_tail_is_capped_in_tokens() {
        // 100 messages of 100 tokens at a budget of 8,000: 64 messages (6,400 tokens) would be
        // more than the low-water mark; the cap (8,000 / 16 = 500 tokens) keeps 5.
        let items = raw(100, 100);
        let cfg = LosslessConfig::default();
        assert_eq!(cfg.fresh_tail_tokens(8_000), 500);
        assert_eq!(leaf_end(&items, &cfg, 8_000), Some(95));

        // By count only (the cap lifted): the newest 64 stay raw.
        let cfg = LosslessConfig {
            fresh_tail_max_tokens: u64::MAX / 4,
            ..Default::default()
        };
        assert_eq!(leaf_end(&items, &cfg, 8_000), Some(36));
    }

    #[test]
    fn over_the_threshold_a_few_long_messages_are_summarized_below_the_fanout() {
        // Summaries, then two long raw messages (one exchange, under the fanout of 8 and
        // under half a chunk), then the newest exchange: 7,900 tokens at a budget of 6,000.
        let mut items = vec![FItem::summary(0, 1, 600, 0, (0, 9), (None, None))];
        items.push(FItem::message(1, 11, 3_600, role::USER, 10, None));
        items.push(FItem::message(2, 12, 20, role::ASSISTANT, 11, None));
        items.push(FItem::message(3, 13, 3_660, role::USER, 12, None));
        items.push(FItem::message(4, 14, 20, role::ASSISTANT, 13, None));
        let cfg = LosslessConfig::default();
        assert_eq!(leaf_end(&items, &cfg, 6_000), Some(3), "the older exchange");

        // Under the threshold (3,640 tokens) the same exchange waits for more messages.
        items[1].tokens = 2_000;
        items[3].tokens = 1_000;
        assert_eq!(leaf_end(&items, &cfg, 6_000), None);
    }

    #[test]
    fn the_newest_prompt_and_what_follows_stay_raw_whatever_their_size() {
        // The newest user message is 3,000 tokens, over the cap: it and the reply after it
        // stay in the tail.
        let mut items = raw(40, 100);
        items[38].tokens = 3_000;
        let cfg = LosslessConfig::default();
        assert_eq!(leaf_end(&items, &cfg, 8_000), Some(38));
    }
}
