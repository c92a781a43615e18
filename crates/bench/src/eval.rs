//! `clawctx eval locomo`: is the evidence for a question still reachable after an engine has
//! managed a long conversation at a small budget?
//!
//! Each conversation is replayed through each engine at each budget as a host would (one turn
//! per dialogue message, delivered with `afterTurn` > `ingestBatch` > `ingest`; the runtime's
//! trigger and built-in compaction for engines that delegate it; the extractive summarizer).
//! Then each question arrives as the next user prompt: the host's prepared history plus the
//! question is assembled with `prompt` set, as a runtime turn would. Per question:
//!
//! - **(a) raw evidence in context**: every evidence turn's text appears verbatim in the
//!   assembled context, the question itself excluded (a summary that merely points at a turn
//!   does not count; a turn an engine quotes because the prompt asks about it does);
//! - **(b) evidence recall@k**: the engine's recall search (`lcm_grep` in `any_term` mode),
//!   scoped to the conversation and queried with the question text alone, returns every
//!   evidence turn in its top `k` (n/a for engines without recall);
//! - **(c) answer in context**: the normalized answer occurs, as whole words, in the normalized
//!   context (n/a for questions without an answer);
//! - **reachable** = (a) or (b);
//! - **(d) answer kept in summary**: of the evidence turns (of questions with an answer) that
//!   were compacted, i.e. covered by a summary standing for them at question time (a summary of
//!   the lossless frontier, or the runtime's compaction summary for `legacy`), the share whose
//!   covering summary holds the normalized answer as whole words. Whether the summary reached
//!   the context does not matter: this measures what summaries carry, not what assembly picks.
//!   Of the same turns, how many hold the answer in their own text, and of those how many
//!   kept it, are reported beside it (an answer worked out from several turns or from a date
//!   cannot be copied from one turn).
//!
//! Engines: `legacy` and `lossless` at each budget, and **`full`**, the ceiling: the whole
//! conversation verbatim, no budget and no compaction (run once whatever the budgets, reported
//! with budget 0 and its context tokens per question), so the judged mode and the presence
//! figures show what a model does with everything in front of it.
//!
//! - **J score** (with `--answer-model` and `--judge-model`, [`crate::judged`]): the share of
//!   questions with a gold answer (categories 1–4) whose answer from the assembled context the
//!   judge model grades CORRECT.
//!
//! `lcm_grep` in its default mode ANDs its terms, which almost never matches a whole
//! question; that figure is reported separately (`grepAnd`, queried with the question's
//! content words) so the difference is visible.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clawctx_engine::compaction::CompactionSettings;
use clawctx_engine::pipeline::{prepare_history, PipelineOptions};
use clawctx_engine::ToolCallContext;
use clawctx_protocol::{AgentMessage, AssembleParams, CompactParams};
use clawctx_summarize::{ExtractiveSummarizer, Summarizer};
use serde::Serialize;
use serde_json::json;

use clawctx_engine::LegacyEngine;
use clawctx_lossless::inspect::Inspect;
use clawctx_lossless::{Backend, ConvKey, DescribeReport, LosslessConfig, RecallMethod};

use crate::engines::{open_engine, parse_engine_list_of, EngineUnderTest};
use crate::error::{BenchError, Result};
use crate::host::BenchHost;
use crate::judged::{cache_key, judge, JudgedCost, Judging, Verdict};
use crate::locomo::Conversation;
use crate::runner::deliver_turn;

/// The `full` baseline: the whole conversation, no budget.
pub const FULL_ENGINE: &str = "full";

/// Engine ids the eval runs: the instruments' engines and the `full` baseline.
pub const EVAL_ENGINES: &[&str] = &["legacy", "lossless", FULL_ENGINE];

/// Parses `--engine a,b,c` for the eval, checking each is one of [`EVAL_ENGINES`].
pub fn parse_eval_engines(list: &str) -> Result<Vec<String>> {
    parse_engine_list_of(list, EVAL_ENGINES)
}

/// Eval settings.
#[derive(Clone, Debug)]
pub struct EvalOptions {
    /// Engines.
    pub engines: Vec<String>,
    /// Budgets.
    pub budgets: Vec<u64>,
    /// Top-k of the recall search.
    pub k: usize,
    /// Directory for the engines' files.
    pub work_dir: PathBuf,
    /// The lossless engine's config object (defaults when empty).
    pub lossless_config: serde_json::Value,
    /// Only the first this many questions of each conversation (all when `None`).
    pub questions: Option<usize>,
    /// The judged mode: answer and judge models (off when `None`).
    pub judging: Option<Judging>,
}

/// Counts for one group of questions.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Scores {
    /// Questions.
    pub questions: u64,
    /// (a) every evidence turn verbatim in context.
    pub raw_in_context: u64,
    /// (b) every evidence turn in the recall top k (None: engine has no recall).
    pub recall_at_k: Option<u64>,
    /// `lcm_grep` as shipped (terms ANDed): every evidence turn in its top k.
    pub grep_and_at_k: Option<u64>,
    /// (a) or (b).
    pub reachable: u64,
    /// Questions with an answer string.
    pub answerable: u64,
    /// (c) normalized answer in the normalized context.
    pub answer_in_context: u64,
    /// Questions whose evidence names a turn the conversation does not have (never reachable).
    pub unresolved_evidence: u64,
    /// Questions the judge graded (judged mode).
    pub judged: u64,
    /// Of those, graded CORRECT.
    pub judged_correct: u64,
    /// (d) evidence turns of questions with an answer that a summary covered at question time.
    pub compacted_evidence: u64,
    /// Of those, the covering summary holds the answer.
    pub answer_in_summary: u64,
    /// Of those, the turn's own text holds the answer.
    pub compacted_answer_in_turn: u64,
    /// Of those (answer in the turn's text), the covering summary holds it too.
    pub compacted_answer_in_turn_kept: u64,
}

impl Scores {
    fn add(&mut self, o: &QuestionScore) {
        self.questions += 1;
        self.raw_in_context += o.raw as u64;
        if let Some(r) = o.recall {
            *self.recall_at_k.get_or_insert(0) += r as u64;
        }
        if let Some(r) = o.grep_and {
            *self.grep_and_at_k.get_or_insert(0) += r as u64;
        }
        self.reachable += (o.raw || o.recall.unwrap_or(false)) as u64;
        if let Some(a) = o.answer {
            self.answerable += 1;
            self.answer_in_context += a as u64;
        }
        self.unresolved_evidence += o.unresolved as u64;
        if let Some(v) = &o.verdict {
            self.judged += 1;
            self.judged_correct += v.correct as u64;
        }
        self.compacted_evidence += o.compacted_evidence;
        self.answer_in_summary += o.answer_in_summary;
        self.compacted_answer_in_turn += o.compacted_answer_in_turn;
        self.compacted_answer_in_turn_kept += o.compacted_answer_in_turn_kept;
    }

    /// (d) as a percentage of the compacted evidence turns (`None`: none was compacted).
    pub fn summary_pct(&self) -> Option<f64> {
        (self.compacted_evidence > 0)
            .then(|| 100.0 * self.answer_in_summary as f64 / self.compacted_evidence as f64)
    }

    /// The J score: graded CORRECT as a percentage of the graded (judged mode).
    pub fn j_pct(&self) -> Option<f64> {
        (self.judged > 0).then(|| 100.0 * self.judged_correct as f64 / self.judged as f64)
    }

    /// `n / questions` as a percentage.
    pub fn pct(&self, n: u64) -> f64 {
        if self.questions == 0 {
            0.0
        } else {
            100.0 * n as f64 / self.questions as f64
        }
    }

    /// (c) as a percentage of answerable questions.
    pub fn answer_pct(&self) -> Option<f64> {
        (self.answerable > 0)
            .then(|| 100.0 * self.answer_in_context as f64 / self.answerable as f64)
    }
}

/// One question's outcome (kept for tests and `--json`).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuestionScore {
    /// Conversation.
    pub sample_id: String,
    /// Question index in the conversation.
    pub index: usize,
    /// Category.
    pub category: u8,
    /// (a).
    pub raw: bool,
    /// (b) (None without recall).
    pub recall: Option<bool>,
    /// `lcm_grep` AND search (None without recall).
    pub grep_and: Option<bool>,
    /// (c) (None without an answer).
    pub answer: Option<bool>,
    /// Evidence names an unknown turn.
    pub unresolved: bool,
    /// Context tokens assembled for it.
    pub context_tokens: u64,
    /// (d) its evidence turns a summary covered (0 without an answer).
    pub compacted_evidence: u64,
    /// Of those, the covering summary holds the answer.
    pub answer_in_summary: u64,
    /// Of those, the turn's own text holds the answer.
    pub compacted_answer_in_turn: u64,
    /// Of those (answer in the turn's text), the covering summary holds it too.
    pub compacted_answer_in_turn_kept: u64,
    /// The answer and the judge's verdict (judged mode, questions with a gold answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
}

/// One engine at one budget.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EvalRun {
    /// Engine.
    pub engine: String,
    /// Budget (0 for `full`, which has none).
    pub budget: u64,
    /// The engine was given no budget (`full`): the context is the whole conversation.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ignores_budget: bool,
    /// All questions.
    pub overall: Scores,
    /// Per category (`1`..`5`).
    pub categories: BTreeMap<u8, Scores>,
    /// The paraphrase set: questions of categories 1-4 none of whose evidence turns shares a
    /// content word with the question (what word search cannot find; issue #43).
    pub paraphrased: Scores,
    /// Context tokens used per conversation (mean).
    pub context_tokens_mean: f64,
    /// Context tokens used (max over conversations).
    pub context_tokens_max: u64,
    /// How the context was spent, mean tokens per question by part.
    pub context_split: ContextSplit,
    /// Per question.
    pub questions: Vec<QuestionScore>,
    /// The judged mode's calls and tokens (`None`: not judged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judged: Option<JudgedCost>,
}

/// Mean context tokens per question spent on each kind of part: how an engine split its
/// budget (README "How lossless spends the budget"). The question itself is not counted.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextSplit {
    /// Summaries: the lossless frontier's `<summary>` blocks, legacy's compaction summary.
    pub summaries: f64,
    /// The lossless `<recalled>` block.
    pub recalled: f64,
    /// Messages of the conversation as they were.
    pub raw: f64,
}

impl ContextSplit {
    /// Adds one context's parts (the question, its last message, excluded).
    fn add(&mut self, context: &[AgentMessage]) {
        for m in &context[..context.len().saturating_sub(1)] {
            let tokens = clawctx_tokens::message_tokens(m) as f64;
            let text = m.plain_text();
            if matches!(
                m,
                AgentMessage::CompactionSummary(_) | AgentMessage::BranchSummary(_)
            ) || text.starts_with(clawctx_protocol::COMPACTION_SUMMARY_PREFIX)
                || clawctx_lossless::parse_summary_header(&text).is_some()
            {
                self.summaries += tokens;
            } else if clawctx_lossless::is_recalled_block(&text) {
                self.recalled += tokens;
            } else {
                self.raw += tokens;
            }
        }
    }

    fn mean_over(&mut self, n: u64) {
        let n = n.max(1) as f64;
        self.summaries /= n;
        self.recalled /= n;
        self.raw /= n;
    }
}

/// The eval result.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EvalReport {
    /// Dataset file name.
    pub dataset: String,
    /// Conversations.
    pub conversations: usize,
    /// Questions per run.
    pub questions: usize,
    /// Recall top-k.
    pub k: usize,
    /// The lossless engine's config object the runs used (`{}`: the defaults).
    pub lossless_config: serde_json::Value,
    /// The answer and judge models (judged mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub models: Option<JudgeModels>,
    /// Runs.
    pub runs: Vec<EvalRun>,
}

/// The models of a judged eval, by ref.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JudgeModels {
    /// Answers the questions.
    pub answer: String,
    /// Grades the answers.
    pub judge: String,
}

/// Content words of a question, as the lossless engine's search picks them
/// ([`clawctx_lossless::query_terms`]: its stopword list and tokenizer, each word once,
/// order kept), so the AND grep is asked what `lcm_grep` would make of the question.
pub fn content_words(question: &str) -> Vec<String> {
    clawctx_lossless::query_terms(question)
}

/// Lowercase, punctuation to spaces, whitespace collapsed.
pub fn normalize(s: &str) -> String {
    let mapped: String = s
        .chars()
        .map(|c| {
            if c.is_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                ' '
            }
        })
        .collect();
    mapped.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn session_key(sample_id: &str) -> String {
    let safe: String = sample_id
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("agent:eval:locomo:{safe}")
}

/// Top-k message timestamps from `lcm_grep` in `any_term` mode, queried with the question
/// text alone (the engine picks the words: stopwords dropped, BM25 over shared rare words).
async fn grep_any(
    eut: &EngineUnderTest,
    key: &str,
    question: &str,
    k: usize,
    mode: &str,
) -> Result<Option<Vec<i64>>> {
    grep_tool_ts(
        eut,
        key,
        json!({"query": question, "mode": mode, "target": "messages", "limit": k}),
    )
    .await
}

async fn grep_tool_ts(
    eut: &EngineUnderTest,
    key: &str,
    args: serde_json::Value,
) -> Result<Option<Vec<i64>>> {
    let Some(tool) = eut.grep_tool() else {
        return Ok(None);
    };
    let cx = ToolCallContext {
        session_id: key.into(),
        session_key: Some(key.into()),
        tool_call_id: None,
    };
    let out = tool
        .execute(args, cx)
        .await
        .map_err(|e| BenchError::engine(&eut.id, "lcm_grep", e))?;
    let v: serde_json::Value = serde_json::from_str(&out)
        .map_err(|e| BenchError::engine(&eut.id, "lcm_grep output", e))?;
    Ok(Some(
        v.get("hits")
            .and_then(|h| h.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|h| h.get("ts").and_then(|t| t.as_i64()))
                    .collect()
            })
            .unwrap_or_default(),
    ))
}

/// Top-k message timestamps from `lcm_grep` in its default mode (every term must match),
/// queried with the question's content words.
async fn grep_and(
    eut: &EngineUnderTest,
    key: &str,
    question: &str,
    k: usize,
) -> Result<Option<Vec<i64>>> {
    if eut.grep_tool().is_none() {
        return Ok(None);
    }
    let words = content_words(question);
    if words.is_empty() {
        return Ok(Some(Vec::new()));
    }
    grep_tool_ts(
        eut,
        key,
        json!({"query": words.join(" "), "target": "messages", "limit": k}),
    )
    .await
}

/// Replays one conversation through one engine at one budget (ingest, and compaction for
/// engines that delegate it; none for the `full` baseline, `budget` `None`).
async fn replay(
    eut: &EngineUnderTest,
    host: &Arc<BenchHost>,
    conv: &Conversation,
    budget: Option<u64>,
) -> Result<()> {
    let key = session_key(&conv.sample_id);
    for m in conv.replay() {
        host.append(m.message.clone());
        let Some(budget) = budget else {
            continue;
        };
        deliver_turn(eut, &key, &key, std::slice::from_ref(&m.message), budget).await?;
        if !eut.owns_compaction && host.should_compact(budget) {
            let p = CompactParams {
                session_id: key.clone(),
                session_key: Some(key.clone()),
                token_budget: Some(budget),
                current_token_count: Some(host.context_tokens()),
                ..Default::default()
            };
            eut.engine
                .compact(&p, &host.call_context())
                .await
                .map_err(|e| BenchError::engine(&eut.id, "compact", e))?;
        }
    }
    Ok(())
}

/// The context the engine assembles when the question arrives as the next user prompt (the
/// host's prepared history plus the question, `prompt` set, as a runtime turn does). The
/// question itself is part of what is returned; evidence is never the question's own text.
/// With `budget` `None` (the `full` baseline) nothing is cut: the whole transcript and the
/// question.
async fn assemble_for(
    eut: &EngineUnderTest,
    host: &Arc<BenchHost>,
    conv: &Conversation,
    budget: Option<u64>,
    question: &str,
) -> Result<Vec<AgentMessage>> {
    let key = session_key(&conv.sample_id);
    let mut history = if eut.owns_compaction {
        host.recent(128)
    } else {
        host.context()
    };
    let last_ts = history
        .iter()
        .filter_map(AgentMessage::timestamp_ms)
        .max()
        .unwrap_or(0);
    history.push(AgentMessage::user(question).with_timestamp(last_ts + 60_000));
    let prepared = prepare_history(
        history,
        &PipelineOptions {
            token_budget: budget,
            ..Default::default()
        },
    );
    let p = AssembleParams {
        session_id: key.clone(),
        session_key: Some(key.clone()),
        messages: prepared.messages,
        token_budget: budget,
        prompt: Some(question.to_owned()),
        ..Default::default()
    };
    let out = eut
        .engine
        .assemble(&p, &host.call_context())
        .await
        .map_err(|e| BenchError::engine(&eut.id, "assemble", e))?;
    let Some(budget) = budget else {
        return Ok(out.messages);
    };
    let used = clawctx_tokens::messages_tokens(&out.messages);
    if used > budget {
        return Err(BenchError::Invariant {
            engine: eut.id.clone(),
            message: format!("assembled {used} tokens at budget {budget}"),
        });
    }
    Ok(out.messages)
}

/// Runs the eval over `conversations`.
pub async fn run_eval(
    dataset: &Path,
    conversations: &[Conversation],
    opts: &EvalOptions,
) -> Result<EvalReport> {
    if opts.k == 0 {
        return Err(BenchError::InvalidArgument("--k must be at least 1".into()));
    }
    let mut runs = Vec::new();
    for engine in &opts.engines {
        if engine == FULL_ENGINE {
            // No budget: one run stands for every budget.
            runs.push(run_one(conversations, opts, engine, None).await?);
            continue;
        }
        for &budget in &opts.budgets {
            runs.push(run_one(conversations, opts, engine, Some(budget)).await?);
        }
    }
    Ok(EvalReport {
        dataset: dataset
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default(),
        conversations: conversations.len(),
        questions: conversations
            .iter()
            .map(|c| c.questions.len().min(opts.questions.unwrap_or(usize::MAX)))
            .sum(),
        k: opts.k,
        lossless_config: opts.lossless_config.clone(),
        models: opts.judging.as_ref().map(|j| JudgeModels {
            answer: j.answer.model_ref.clone(),
            judge: j.judge.model_ref.clone(),
        }),
        runs,
    })
}

/// A summary standing for compacted turns at question time: the span of message timestamps
/// it covers and its normalized text (padded with spaces for whole-word matching).
#[derive(Clone, Debug)]
struct CoveringSummary {
    from_ts: i64,
    to_ts: i64,
    words: String,
}

/// The summaries that stand for the compacted part of the conversation of `key` now: the
/// lossless frontier's summaries (their full text, by `describe`), or the runtime's last
/// compaction summary, which covers everything before its first kept entry. Reads no question.
async fn covering_summaries(
    eut: &EngineUnderTest,
    host: &BenchHost,
    key: &str,
) -> Result<Vec<CoveringSummary>> {
    let Some(store) = &eut.store else {
        return Ok(host
            .compacted()
            .map(|c| CoveringSummary {
                from_ts: i64::MIN,
                to_ts: c.through_ts,
                words: format!(" {} ", normalize(&c.summary)),
            })
            .into_iter()
            .collect());
    };
    let err = |stage: &str, e: clawctx_lossless::LosslessError| {
        BenchError::engine(&eut.id, &format!("{stage} ({key})"), e)
    };
    let Some(view) = store
        .frontier_view(&ConvKey::from_host(Some(key), key))
        .await
        .map_err(|e| err("frontier", e))?
    else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for item in view.frontier.iter().filter(|i| i.id.starts_with("sum_")) {
        let DescribeReport::Summary(s) = Backend::describe(store, &item.id, None)
            .await
            .map_err(|e| err(&format!("describe {}", item.id), e))?
        else {
            continue;
        };
        let (Some(from_ts), Some(to_ts)) = (s.from_ts, s.to_ts) else {
            return Err(BenchError::Invariant {
                engine: eut.id.clone(),
                message: format!("summary {} of {key} has no time range", s.id),
            });
        };
        out.push(CoveringSummary {
            from_ts,
            to_ts,
            words: format!(" {} ", normalize(&s.text)),
        });
    }
    Ok(out)
}

/// (d) of one question's evidence turns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct SummaryCounts {
    compacted: u64,
    kept: u64,
    in_turn: u64,
    in_turn_kept: u64,
}

/// (d) of one question (scoring: reads the gold answer) over its evidence turns' timestamps
/// and texts.
fn summary_scores(
    summaries: &[CoveringSummary],
    answer: Option<&str>,
    evidence: &[(i64, &str)],
) -> SummaryCounts {
    let mut counts = SummaryCounts::default();
    let Some(answer) = answer.map(normalize).filter(|a| !a.is_empty()) else {
        return counts;
    };
    let needle = format!(" {answer} ");
    for (ts, text) in evidence {
        let Some(s) = summaries
            .iter()
            .find(|s| s.from_ts <= *ts && *ts <= s.to_ts)
        else {
            continue;
        };
        let kept = s.words.contains(&needle);
        let in_turn = format!(" {} ", normalize(text)).contains(&needle);
        counts.compacted += 1;
        counts.kept += kept as u64;
        counts.in_turn += in_turn as u64;
        counts.in_turn_kept += (kept && in_turn) as u64;
    }
    counts
}

async fn run_one(
    conversations: &[Conversation],
    opts: &EvalOptions,
    engine: &str,
    budget: Option<u64>,
) -> Result<EvalRun> {
    let dir = opts
        .work_dir
        .join(format!("{engine}-{}", budget.unwrap_or(0)));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| BenchError::io(&dir, e))?;
    }
    let summarizer: Arc<dyn Summarizer> = Arc::new(ExtractiveSummarizer);
    let eut = if engine == FULL_ENGINE {
        // The host's whole transcript, passed through: legacy's assemble with no budget and
        // no compaction.
        EngineUnderTest {
            id: engine.to_owned(),
            engine: Arc::new(LegacyEngine),
            store: None,
            database_path: None,
            owns_compaction: false,
            semantic: None,
        }
    } else {
        open_engine(engine, &dir, summarizer.clone(), &opts.lossless_config).await?
    };
    let mut run = EvalRun {
        engine: engine.to_owned(),
        budget: budget.unwrap_or(0),
        ignores_budget: budget.is_none(),
        overall: Scores::default(),
        categories: BTreeMap::new(),
        paraphrased: Scores::default(),
        context_tokens_mean: 0.0,
        context_tokens_max: 0,
        context_split: ContextSplit::default(),
        questions: Vec::new(),
        judged: opts.judging.as_ref().map(|_| JudgedCost::default()),
    };
    // The recall search of (b): `any_term` (words), or with an embedding model the
    // `recallMethod`'s: `semantic` (meaning) or `hybrid` (both, fused).
    let recall_mode = match (
        &eut.semantic,
        LosslessConfig::from_value(&opts.lossless_config).recall_method,
    ) {
        (None, _) | (_, RecallMethod::Lexical) => "any_term",
        (Some(_), RecallMethod::Semantic) => "semantic",
        (Some(_), RecallMethod::Hybrid) => "hybrid",
    };
    let mut token_sum = 0u64;
    let mut assembled = 0u64;
    for conv in conversations {
        let host = BenchHost::new(CompactionSettings::default(), summarizer.clone());
        replay(&eut, &host, conv, budget).await?;
        // The questions come once the background embedder has caught up (a user's question
        // comes long after the words it asks about).
        if let (Some(s), Some(store)) = (&eut.semantic, &eut.store) {
            s.embed_all(store, |_, _| {})
                .await
                .map_err(|e| BenchError::engine(&eut.id, "embed", e))?;
        }
        let texts = conv.turn_texts();
        let ts_to_dia: HashMap<i64, String> = conv
            .replay()
            .into_iter()
            .filter_map(|m| Some((m.message.timestamp_ms()?, m.dia_id?)))
            .collect();
        let key = session_key(&conv.sample_id);
        // Questions are not ingested and assembly does not compact: the summaries after the
        // replay are those of every question's time.
        let summaries = covering_summaries(&eut, &host, &key).await?;
        let dia_to_ts: HashMap<&str, i64> =
            ts_to_dia.iter().map(|(ts, d)| (d.as_str(), *ts)).collect();
        let n_questions = opts.questions.unwrap_or(usize::MAX);
        for (i, q) in conv.questions.iter().enumerate().take(n_questions) {
            let context = assemble_for(&eut, &host, conv, budget, &q.question).await?;
            let used = clawctx_tokens::messages_tokens(&context);
            token_sum += used;
            assembled += 1;
            run.context_tokens_max = run.context_tokens_max.max(used);
            run.context_split.add(&context);
            // The question (the last message) is not evidence of itself.
            let context_text: String = context[..context.len().saturating_sub(1)]
                .iter()
                .map(AgentMessage::plain_text)
                .collect::<Vec<_>>()
                .join("\n");
            // Whole-word matching: the answer `No` must not match inside `not`.
            let context_words = format!(" {} ", normalize(&context_text));
            let evidence: Vec<&String> = q.evidence.iter().collect();
            let resolved: Option<Vec<&String>> = evidence.iter().map(|d| texts.get(*d)).collect();
            let unresolved = evidence.is_empty() || resolved.is_none();
            let raw = !unresolved
                && resolved
                    .as_ref()
                    .is_some_and(|ts| ts.iter().all(|t| context_text.contains(t.as_str())));
            let covers = |hits: &[i64]| -> bool {
                let found: HashSet<&str> = hits
                    .iter()
                    .filter_map(|t| ts_to_dia.get(t).map(String::as_str))
                    .collect();
                !unresolved && evidence.iter().all(|d| found.contains(d.as_str()))
            };
            let recall = grep_any(&eut, &key, &q.question, opts.k, recall_mode)
                .await?
                .map(|h| covers(&h));
            let grep = grep_and(&eut, &key, &q.question, opts.k)
                .await?
                .map(|h| covers(&h));
            let answer = q
                .answer
                .as_deref()
                .map(normalize)
                .filter(|a| !a.is_empty())
                .map(|a| context_words.contains(&format!(" {a} ")));
            let evidence_turns: Vec<(i64, &str)> = evidence
                .iter()
                .filter_map(|d| Some((*dia_to_ts.get(d.as_str())?, texts.get(*d)?.as_str())))
                .collect();
            let d = summary_scores(&summaries, q.answer.as_deref(), &evidence_turns);
            let gold = q
                .answer
                .as_deref()
                .filter(|a| !a.trim().is_empty() && q.category != 5);
            let verdict = match (&opts.judging, gold) {
                (Some(j), Some(gold)) => {
                    let ck =
                        cache_key(j, engine, budget.unwrap_or(0), &conv.sample_id, i, &context);
                    let (v, cached) = judge(j, &ck, &context, &q.question, gold).await?;
                    if let Some(cost) = run.judged.as_mut() {
                        cost.add(&v, cached);
                    }
                    Some(v)
                }
                _ => None,
            };
            let score = QuestionScore {
                sample_id: conv.sample_id.clone(),
                index: i,
                category: q.category,
                raw,
                recall,
                grep_and: grep,
                answer,
                unresolved,
                context_tokens: used,
                compacted_evidence: d.compacted,
                answer_in_summary: d.kept,
                compacted_answer_in_turn: d.in_turn,
                compacted_answer_in_turn_kept: d.in_turn_kept,
                verdict,
            };
            run.overall.add(&score);
            run.categories.entry(q.category).or_default().add(&score);
            // Scoring only: which questions share no content word with their evidence.
            let question_words: HashSet<String> = content_words(&q.question).into_iter().collect();
            let paraphrased = (1..=4).contains(&q.category)
                && resolved.as_ref().is_some_and(|turns| {
                    !turns.is_empty()
                        && turns
                            .iter()
                            .all(|t| content_words(t).iter().all(|w| !question_words.contains(w)))
                });
            if paraphrased {
                run.paraphrased.add(&score);
            }
            run.questions.push(score);
        }
    }
    run.context_tokens_mean = token_sum as f64 / assembled.max(1) as f64;
    run.context_split.mean_over(assembled);
    let _ = eut.engine.dispose().await;
    Ok(run)
}

/// The category's name.
pub fn category_name(c: u8) -> &'static str {
    match c {
        1 => "multi-hop",
        2 => "temporal",
        3 => "open-domain",
        4 => "single-hop",
        5 => "adversarial",
        _ => "other",
    }
}

/// Renders the report as a table: one block per run, one row per category plus overall.
pub fn render_table(r: &EvalReport) -> String {
    let mut s = format!(
        "LoCoMo {}: {} conversations, {} questions, recall top-{}\n",
        r.dataset, r.conversations, r.questions, r.k
    );
    if r.runs.iter().any(|run| run.engine == "lossless") {
        let shown = match &r.lossless_config {
            serde_json::Value::Object(m) if !m.is_empty() => r.lossless_config.to_string(),
            _ => "defaults".to_owned(),
        };
        s.push_str(&format!("lossless config: {shown}\n"));
    }
    if let Some(m) = &r.models {
        s.push_str(&format!(
            "judged: answers by {}, graded by {} (J = graded CORRECT, categories 1-4)\n",
            m.answer, m.judge
        ));
    }
    for run in &r.runs {
        if run.ignores_budget {
            s.push_str(&format!(
                "\n{} (the whole conversation, no budget; context tokens: mean {:.0}, max {})\n",
                run.engine, run.context_tokens_mean, run.context_tokens_max
            ));
        } else {
            let split = &run.context_split;
            s.push_str(&format!(
                "\n{} @ budget {} (context tokens: mean {:.0}, max {}; summaries {:.0}, recalled {:.0}, raw {:.0})\n",
                run.engine,
                run.budget,
                run.context_tokens_mean,
                run.context_tokens_max,
                split.summaries,
                split.recalled,
                split.raw
            ));
        }
        let judged = run.judged.is_some();
        s.push_str(&format!(
            "  {:<16} {:>5}  {:>9}  {:>9}  {:>9}  {:>9}  {:>10}  {:>11}{}\n",
            "category",
            "n",
            "(a) raw",
            "(b) rec@k",
            "grep-AND",
            "reachable",
            "(c) answer",
            "(d) summary",
            if judged { "          J" } else { "" }
        ));
        let rows = run
            .categories
            .iter()
            .map(|(c, sc)| (format!("{c} {}", category_name(*c)), sc))
            .chain([
                ("overall".to_owned(), &run.overall),
                ("paraphrased".to_owned(), &run.paraphrased),
            ]);
        for (name, sc) in rows {
            let opt = |v: Option<u64>| {
                v.map(|n| format!("{:.1}%", sc.pct(n)))
                    .unwrap_or_else(|| "n/a".into())
            };
            let j = if judged {
                format!(
                    "  {:>9}",
                    sc.j_pct()
                        .map(|p| format!("{p:.1}%"))
                        .unwrap_or_else(|| "n/a".into())
                )
            } else {
                String::new()
            };
            let pct_or_na = |p: Option<f64>| {
                p.map(|p| format!("{p:.1}%"))
                    .unwrap_or_else(|| "n/a".into())
            };
            s.push_str(&format!(
                "  {:<16} {:>5}  {:>8.1}%  {:>9}  {:>9}  {:>8.1}%  {:>10}  {:>11}{j}\n",
                name,
                sc.questions,
                sc.pct(sc.raw_in_context),
                opt(sc.recall_at_k),
                opt(sc.grep_and_at_k),
                sc.pct(sc.reachable),
                pct_or_na(sc.answer_pct()),
                pct_or_na(sc.summary_pct()),
            ));
        }
        let o = &run.overall;
        s.push_str(&format!(
            "  (d) answer kept in summary: {} of {} compacted evidence turns; of the {} whose own text holds the answer, {} kept\n",
            o.answer_in_summary,
            o.compacted_evidence,
            o.compacted_answer_in_turn,
            o.compacted_answer_in_turn_kept
        ));
        if let Some(c) = &run.judged {
            s.push_str(&format!(
                "  judged {} questions ({} asked now, {} from the answer cache, {} unparsed verdicts); tokens: answers {} in / {} out, judge {} in / {} out\n",
                c.asked + c.cached,
                c.asked,
                c.cached,
                c.unparsed,
                c.answer_tokens.input,
                c.answer_tokens.output,
                c.judge_tokens.input,
                c.judge_tokens.output
            ));
        }
    }
    s
}
