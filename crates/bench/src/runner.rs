//! `clawctx bench`: feeds one workload through the lifecycle of every chosen engine and
//! measures each the same way.
//!
//! Per turn, as a host does: the user message is appended to the transcript; the host prepares
//! its history (the runtime pipeline) and calls `assemble` (timed, output checked against the
//! budget); the rest of the turn is appended; the turn is delivered (`afterTurn` > `ingestBatch` >
//! `ingest`, timed); then the threshold is checked — the runtime's trigger for engines that
//! delegate compaction (then `compact` is called, timed), the engine's own running total for
//! engines that own it (they compact inside `afterTurn`: a turn during which the summarizer was
//! called is counted as a compaction, not as an ingest sample). Every engine gets the same fake
//! summarizer ([`HeadTenPercent`]) wrapped in a counter, so a compaction's engine overhead is its
//! wall time minus the time spent inside the summarizer.
//!
//! After the run: recall latency (`lcm_grep` full-text and regex, when the engine has it),
//! bytes on disk against raw text bytes, peak RSS (`VmHWM`, reset before each engine when the
//! kernel allows).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clawctx_engine::compaction::CompactionSettings;
use clawctx_engine::pipeline::{prepare_history, PipelineOptions};
use clawctx_engine::{Method, ToolCallContext};
use clawctx_lossless::{ConvKey, LosslessConfig};
use clawctx_protocol::*;
use clawctx_tokens::messages_tokens;
use serde::Serialize;
use serde_json::json;

use crate::engines::{open_engine, EngineUnderTest};
use crate::error::{BenchError, Result};
use crate::host::BenchHost;
use crate::stats::{peak_rss_bytes, percentile_u64, reset_peak_rss, Latency};
use crate::summarizer::{CountingSummarizer, HeadTenPercent, SummarizerTotals};
use crate::workload::{JsonlTurns, Turn, Workload, WorkloadSpec};

/// Session id used for every run.
pub const SESSION_ID: &str = "bench-session";
/// Session key used for every run.
pub const SESSION_KEY: &str = "agent:bench:bench:1";

/// Where the turns come from.
#[derive(Clone, Debug)]
pub enum WorkloadSource {
    /// Generated in memory, one turn at a time.
    Generated(WorkloadSpec),
    /// Read from a session file (see `docs/workload-format.md`).
    File(PathBuf),
}

impl WorkloadSource {
    fn turns(&self) -> Result<Box<dyn Iterator<Item = Result<Turn>>>> {
        Ok(match self {
            WorkloadSource::Generated(spec) => Box::new(Workload::new(*spec).map(Ok)),
            WorkloadSource::File(p) => Box::new(JsonlTurns::open(p)?),
        })
    }
}

/// Progress callback: engine id, messages fed so far.
pub type Progress = Arc<dyn Fn(&str, u64) + Send + Sync>;

/// Bench settings.
#[derive(Clone)]
pub struct BenchOptions {
    /// Engines, in report order (the first is the baseline of the ratios).
    pub engines: Vec<String>,
    /// The workload.
    pub source: WorkloadSource,
    /// Token budget (the model's context window).
    pub budget: u64,
    /// Directory for the engines' files (a fresh subdirectory per engine).
    pub work_dir: PathBuf,
    /// Assemble before every `assemble_every`-th turn (1 = every turn).
    pub assemble_every: u64,
    /// Newest host messages handed to engines that own their history (`legacy` always gets its
    /// whole compaction-aware context, as the runtime gives it).
    pub host_window: usize,
    /// Progress reports.
    pub progress: Option<Progress>,
}

impl BenchOptions {
    /// Defaults for `engines` over `source`: budget 128,000, assemble every turn.
    pub fn new(engines: Vec<String>, source: WorkloadSource, work_dir: PathBuf) -> Self {
        Self {
            engines,
            source,
            budget: 128_000,
            work_dir,
            assemble_every: 1,
            host_window: 128,
            progress: None,
        }
    }
}

/// Compaction figures.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionFigures {
    /// Compactions that ran (summarizer called or runtime compaction done).
    pub count: u64,
    /// Summarizer calls.
    pub summarizer_calls: u64,
    /// Summarizer input tokens.
    pub summarizer_input_tokens: u64,
    /// Time inside the summarizer (ms).
    pub summarizer_ms: f64,
    /// Wall time of each compaction minus the time inside the summarizer.
    pub engine_overhead: Latency,
}

/// Recall figures (engines with `lcm_grep`).
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GrepFigures {
    /// Full-text queries.
    pub full_text: Latency,
    /// Regex queries.
    pub regex: Latency,
    /// Hits of the full-text queries (sanity: > 0).
    pub full_text_hits: u64,
}

/// One engine's figures.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineReport {
    /// Engine id.
    pub engine: String,
    /// Messages fed.
    pub messages: u64,
    /// Turns fed.
    pub turns: u64,
    /// Everything, host work included (s).
    pub wall_secs: f64,
    /// Ingest + threshold checks + compactions (the peer's "total loop") (s).
    pub loop_secs: f64,
    /// Turn delivery (afterTurn / ingestBatch / ingest) on turns without a compaction.
    pub ingest: Latency,
    /// Deciding whether to compact.
    pub threshold_check: Latency,
    /// Compactions.
    pub compaction: CompactionFigures,
    /// The host's history preparation before assemble (pipeline).
    pub host_prepare: Latency,
    /// `assemble`.
    pub assemble: Latency,
    /// Assembled tokens: median.
    pub assembled_tokens_p50: u64,
    /// Assembled tokens: maximum.
    pub assembled_tokens_max: u64,
    /// Assembled tokens of the last assemble.
    pub assembled_tokens_last: u64,
    /// Assembled messages of the last assemble.
    pub assembled_messages_last: u64,
    /// Assembles whose output exceeded the budget (must be 0).
    pub over_budget: u64,
    /// The provider's prompt cache over the assembled requests (the system prompt addition,
    /// then the messages), as OpenAI and Anthropic would report it under their documented
    /// rules (`clawctx_model::prefix_cache`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheFigures>,
    /// Recall latency.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grep: Option<GrepFigures>,
    /// Bytes the engine keeps on disk (database + WAL).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<u64>,
    /// Bytes of message text fed.
    pub raw_text_bytes: u64,
    /// `disk_bytes / raw_text_bytes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_per_raw_byte: Option<f64>,
    /// The database itself (pages in use, the log's committed pages counted once): what stays
    /// on disk once the log is checkpointed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_bytes: Option<u64>,
    /// Summaries stored and their deepest depth (engines with a DAG).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summaries: Option<u64>,
    /// Deepest summary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<i64>,
    /// Peak RSS during this engine's run (bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_rss_bytes: Option<u64>,
    /// Whether the peak was reset before this engine (otherwise it includes earlier runs).
    pub peak_rss_isolated: bool,
}

/// Prompt-cache figures of one engine (see [`EngineReport::cache`]).
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheFigures {
    /// Requests after the first (those that could hit the cache).
    pub requests: u64,
    /// Share of their prompt tokens OpenAI would serve from its cache (its rule: prefixes of
    /// 1,024 tokens and more, in 128-token steps, 5 minutes idle).
    pub cached_share: f64,
    /// Share of their prompt tokens Anthropic would serve from its cache (read at the client's
    /// `cache_control` breakpoints).
    pub anthropic_cached_share: f64,
    /// Share of their prompt tokens Anthropic would write to its cache (billed at 1.25×).
    pub anthropic_written_share: f64,
    /// Requests sharing less than half of the previous one, per 100.
    pub breaks_per_100: f64,
}

/// A ratio between an engine and the baseline (first engine).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ratio {
    /// Metric name.
    pub metric: String,
    /// Engine.
    pub engine: String,
    /// Baseline engine.
    pub baseline: String,
    /// `engine / baseline` (None when the baseline is 0).
    pub ratio: Option<f64>,
}

/// The whole bench result.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BenchReport {
    /// Workload description.
    pub workload: serde_json::Value,
    /// Token budget.
    pub budget: u64,
    /// Per engine.
    pub engines: Vec<EngineReport>,
    /// Ratios to the first engine.
    pub ratios: Vec<Ratio>,
}

/// Runs the bench for every engine.
pub async fn run_bench(opts: &BenchOptions) -> Result<BenchReport> {
    if opts.budget < 1_000 {
        return Err(BenchError::InvalidArgument(format!(
            "budget {} is too small (at least 1000)",
            opts.budget
        )));
    }
    let mut engines = Vec::new();
    for id in &opts.engines {
        engines.push(run_engine(opts, id).await?);
    }
    let ratios = ratios(&engines);
    let workload = match &opts.source {
        WorkloadSource::Generated(spec) => {
            json!({"kind": spec.kind, "messages": spec.messages, "seed": spec.seed})
        }
        WorkloadSource::File(p) => {
            json!({"file": p.file_name().map(|f| f.to_string_lossy().into_owned())})
        }
    };
    Ok(BenchReport {
        workload,
        budget: opts.budget,
        engines,
        ratios,
    })
}

fn ratios(engines: &[EngineReport]) -> Vec<Ratio> {
    let Some(base) = engines.first() else {
        return Vec::new();
    };
    type Metric = (&'static str, fn(&EngineReport) -> f64);
    let metrics: [Metric; 7] = [
        ("loopSecs", |e| e.loop_secs),
        ("wallSecs", |e| e.wall_secs),
        ("ingestP50", |e| e.ingest.p50_ms),
        ("ingestP99", |e| e.ingest.p99_ms),
        ("assembleP50", |e| e.assemble.p50_ms),
        ("assembledTokensLast", |e| e.assembled_tokens_last as f64),
        ("peakRss", |e| e.peak_rss_bytes.unwrap_or(0) as f64),
    ];
    let mut out = Vec::new();
    for e in &engines[1..] {
        for (name, f) in metrics {
            let b = f(base);
            out.push(Ratio {
                metric: name.into(),
                engine: e.engine.clone(),
                baseline: base.engine.clone(),
                ratio: (b > 0.0).then(|| f(e) / b),
            });
        }
    }
    out
}

/// Delivers a finished turn the way the runtime does: `afterTurn` beats `ingestBatch` beats
/// `ingest` (the turn's messages only; `prePromptMessageCount` 0).
pub async fn deliver_turn(
    eut: &EngineUnderTest,
    session_id: &str,
    session_key: &str,
    turn: &[AgentMessage],
    budget: u64,
) -> Result<()> {
    let methods = eut.engine.methods();
    let cx = clawctx_engine::CallContext::none();
    let err = |stage: &str, e: clawctx_engine::EngineError| BenchError::engine(&eut.id, stage, e);
    if methods.has(Method::AfterTurn) {
        let p = AfterTurnParams {
            session_id: session_id.into(),
            session_key: Some(session_key.into()),
            session_file: format!("{session_id}.jsonl"),
            messages: turn.to_vec(),
            pre_prompt_message_count: 0,
            token_budget: Some(budget),
            ..Default::default()
        };
        eut.engine
            .after_turn(&p, &cx)
            .await
            .map_err(|e| err("afterTurn", e))
    } else if methods.has(Method::IngestBatch) {
        let p = IngestBatchParams {
            session_id: session_id.into(),
            session_key: Some(session_key.into()),
            messages: turn.to_vec(),
            is_heartbeat: None,
        };
        eut.engine
            .ingest_batch(&p, &cx)
            .await
            .map(|_| ())
            .map_err(|e| err("ingestBatch", e))
    } else {
        for m in turn {
            let p = IngestParams {
                session_id: session_id.into(),
                session_key: Some(session_key.into()),
                message: m.clone(),
                is_heartbeat: None,
            };
            eut.engine
                .ingest(&p, &cx)
                .await
                .map_err(|e| err("ingest", e))?;
        }
        Ok(())
    }
}

/// The lossless config every bench run uses: the fake summarizer keeps a head, not the
/// salient terms, so the salient-retention check is off (the summary's size checks stay on).
pub fn bench_lossless_config() -> serde_json::Value {
    json!({"minSalientRetention": 0})
}

async fn run_engine(opts: &BenchOptions, id: &str) -> Result<EngineReport> {
    let dir = opts.work_dir.join(id);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| BenchError::io(&dir, e))?;
    }
    std::fs::create_dir_all(&dir).map_err(|e| BenchError::io(&dir, e))?;
    let isolated = reset_peak_rss();
    let (counting, counters) = CountingSummarizer::new(Arc::new(HeadTenPercent));
    let summarizer: Arc<dyn clawctx_summarize::Summarizer> = Arc::new(counting);
    let lossless_cfg = bench_lossless_config();
    let eut = open_engine(id, &dir, summarizer.clone(), &lossless_cfg).await?;
    let host = BenchHost::new(CompactionSettings::default(), summarizer.clone());
    let threshold = LosslessConfig::from_value(&lossless_cfg).threshold_tokens(opts.budget);
    let key = ConvKey::from_host(Some(SESSION_KEY), SESSION_ID);
    let budget = opts.budget;

    let mut report = EngineReport {
        engine: id.to_owned(),
        peak_rss_isolated: isolated,
        ..Default::default()
    };
    let (mut ingest, mut check, mut prep, mut assemble, mut overhead) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut assembled_tokens: Vec<u64> = Vec::new();
    let mut cache = clawctx_model::prefix_cache::RequestCaches::new()
        .map_err(|e| BenchError::engine(id, "cache model", e))?;
    let cache_key = clawctx_model::prompt_cache_key(SESSION_KEY);
    let started = Instant::now();
    let mut loop_time = Duration::ZERO;
    for turn in opts.source.turns()? {
        let turn = turn?;
        let Some((first, rest)) = turn.messages.split_first() else {
            continue;
        };
        report.turns += 1;
        report.messages += turn.messages.len() as u64;
        report.raw_text_bytes += turn
            .messages
            .iter()
            .map(|m| m.plain_text().len() as u64)
            .sum::<u64>();

        // The prompt arrives; the host prepares its history and assembles.
        host.append(first.clone());
        if turn.index % opts.assemble_every.max(1) == 0 {
            let t0 = Instant::now();
            let history = if eut.owns_compaction {
                host.recent(opts.host_window)
            } else {
                host.context()
            };
            let prepared = prepare_history(
                history,
                &PipelineOptions {
                    token_budget: Some(budget),
                    ..Default::default()
                },
            );
            prep.push(t0.elapsed());
            let params = AssembleParams {
                session_id: SESSION_ID.into(),
                session_key: Some(SESSION_KEY.into()),
                messages: prepared.messages,
                token_budget: Some(budget),
                prompt: Some(first.plain_text()),
                ..Default::default()
            };
            let cx = host.call_context();
            let t1 = Instant::now();
            let out = eut
                .engine
                .assemble(&params, &cx)
                .await
                .map_err(|e| BenchError::engine(id, "assemble", e))?;
            assemble.push(t1.elapsed());
            let used = messages_tokens(&out.messages);
            if used > budget {
                report.over_budget += 1;
            }
            assembled_tokens.push(used);
            // The request a client would send: the addition as the system prompt, then the
            // messages, at the time the prompt arrived.
            let request = clawctx_model::CompletionRequest {
                model: "bench".into(),
                system_prompt: out.system_prompt_addition.clone(),
                messages: out.messages.clone(),
                cache_key: Some(cache_key.clone()),
                ..Default::default()
            };
            let at = first.timestamp_ms().unwrap_or(0);
            cache.observe(SESSION_ID, at, &request);
            report.assembled_tokens_last = used;
            report.assembled_messages_last = out.messages.len() as u64;
        }

        // The model answers; the turn is delivered.
        for m in rest {
            host.append(m.clone());
        }
        let before = counters.totals();
        let t2 = Instant::now();
        deliver_turn(&eut, SESSION_ID, SESSION_KEY, &turn.messages, budget).await?;
        if eut.owns_compaction && eut.engine.methods().has(Method::Maintain) {
            // The host's maintenance after the reply, where a background engine compacts.
            let p = MaintainParams {
                session_id: SESSION_ID.into(),
                session_key: Some(SESSION_KEY.into()),
                session_file: format!("{SESSION_ID}.jsonl"),
                runtime_context: Some(ContextEngineRuntimeContext {
                    allow_deferred_compaction_execution: Some(true),
                    token_budget: Some(budget),
                    ..Default::default()
                }),
                ..Default::default()
            };
            eut.engine
                .maintain(&p, &host.call_context())
                .await
                .map_err(|e| BenchError::engine(id, "maintain", e))?;
        }
        let dt = t2.elapsed();
        loop_time += dt;
        let during = counters.totals().since(before);
        if during.calls > 0 {
            report.compaction.count += 1;
            overhead.push(dt.saturating_sub(Duration::from_micros(during.micros)));
        } else {
            ingest.push(dt);
        }

        // Threshold check, and the runtime's compaction for engines that delegate it.
        let t3 = Instant::now();
        let over = if eut.owns_compaction {
            match &eut.store {
                Some(store) => {
                    let k = key.clone();
                    let conv = store
                        .call(move |db| db.conversation(&k))
                        .await
                        .map_err(|e| BenchError::engine(id, "threshold", e))?;
                    conv.map(|c| c.frontier_tokens.max(0) as u64 > threshold)
                        .unwrap_or(false)
                }
                None => false,
            }
        } else {
            host.should_compact(budget)
        };
        let dc = t3.elapsed();
        check.push(dc);
        loop_time += dc;
        if over && !eut.owns_compaction {
            let before = counters.totals();
            let t4 = Instant::now();
            let params = CompactParams {
                session_id: SESSION_ID.into(),
                session_key: Some(SESSION_KEY.into()),
                token_budget: Some(budget),
                current_token_count: Some(host.context_tokens()),
                ..Default::default()
            };
            let r = eut
                .engine
                .compact(&params, &host.call_context())
                .await
                .map_err(|e| BenchError::engine(id, "compact", e))?;
            let dt = t4.elapsed();
            loop_time += dt;
            let during = counters.totals().since(before);
            if r.compacted || during.calls > 0 {
                report.compaction.count += 1;
                overhead.push(dt.saturating_sub(Duration::from_micros(during.micros)));
            }
        }
        if let Some(p) = &opts.progress {
            p(id, report.messages);
        }
    }
    report.wall_secs = started.elapsed().as_secs_f64();
    report.loop_secs = loop_time.as_secs_f64();
    report.ingest = Latency::of(&ingest);
    report.threshold_check = Latency::of(&check);
    report.host_prepare = Latency::of(&prep);
    report.assemble = Latency::of(&assemble);
    let totals: SummarizerTotals = counters.totals();
    report.compaction.summarizer_calls = totals.calls;
    report.compaction.summarizer_input_tokens = totals.input_tokens;
    report.compaction.summarizer_ms = totals.micros as f64 / 1e3;
    report.compaction.engine_overhead = Latency::of(&overhead);
    assembled_tokens.sort_unstable();
    report.assembled_tokens_p50 = percentile_u64(&assembled_tokens, 50.0);
    report.assembled_tokens_max = assembled_tokens.last().copied().unwrap_or(0);
    let (c, a) = cache.totals();
    if c.follow_ups > 0 {
        report.cache = Some(CacheFigures {
            requests: c.follow_ups,
            cached_share: c.cached_share(),
            anthropic_cached_share: a.cached_share(),
            anthropic_written_share: a.written_tokens as f64 / a.prompt_tokens.max(1) as f64,
            breaks_per_100: c.breaks_per_100(),
        });
    }

    report.grep = grep_figures(&eut).await?;
    if let Some(store) = &eut.store {
        let status = store
            .status()
            .await
            .map_err(|e| BenchError::engine(id, "status", e))?;
        report.summaries = Some(status.summaries);
        report.max_depth = Some(status.max_depth);
        report.database_bytes = Some(status.db_bytes);
    }
    report.disk_bytes = eut.disk_bytes();
    report.disk_per_raw_byte = report
        .disk_bytes
        .map(|d| d as f64 / report.raw_text_bytes.max(1) as f64);
    report.peak_rss_bytes = peak_rss_bytes();
    let _ = eut.engine.dispose().await;
    Ok(report)
}

/// Full-text queries the recall measurement runs (words the generator uses).
pub const GREP_FULL_TEXT_QUERIES: &[&str] = &[
    "invoice",
    "migration deadline",
    "Berlin",
    "rollback",
    "quarantine threshold",
    "certificate",
    "Farah",
    "snapshot volume",
    "regression",
    "marathon",
];
/// Regex queries the recall measurement runs.
pub const GREP_REGEX_QUERIES: &[&str] = &[
    r"invoice \d+",
    r"call_\d{7}",
    r"(Berlin|Lisbon) \w+",
    r"ref 1\.\d",
    r"Osaka",
];

async fn grep_figures(eut: &EngineUnderTest) -> Result<Option<GrepFigures>> {
    let Some(tool) = eut.grep_tool() else {
        return Ok(None);
    };
    let cx = ToolCallContext {
        session_id: SESSION_ID.into(),
        session_key: Some(SESSION_KEY.into()),
        tool_call_id: None,
    };
    let mut g = GrepFigures::default();
    let mut ft = Vec::new();
    let mut rx = Vec::new();
    for _round in 0..2 {
        for q in GREP_FULL_TEXT_QUERIES {
            let t = Instant::now();
            let out = tool
                .execute(json!({"query": q, "limit": 20}), cx.clone())
                .await;
            ft.push(t.elapsed());
            let out = out.map_err(|e| BenchError::engine(&eut.id, "lcm_grep", e))?;
            let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
            g.full_text_hits += v
                .get("hits")
                .and_then(|h| h.as_array())
                .map(|a| a.len() as u64)
                .unwrap_or(0);
        }
        for q in GREP_REGEX_QUERIES {
            let t = Instant::now();
            let out = tool
                .execute(
                    json!({"query": q, "mode": "regex", "limit": 20}),
                    cx.clone(),
                )
                .await;
            rx.push(t.elapsed());
            out.map_err(|e| BenchError::engine(&eut.id, "lcm_grep regex", e))?;
        }
    }
    g.full_text = Latency::of(&ft);
    g.regex = Latency::of(&rx);
    Ok(Some(g))
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
}

/// Renders the report as a plain-text table (one column per engine).
pub fn render_table(r: &BenchReport) -> String {
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |name: &str, f: &dyn Fn(&EngineReport) -> String| {
        rows.push((name.to_owned(), r.engines.iter().map(f).collect()));
    };
    row("messages / turns", &|e| {
        format!("{} / {}", e.messages, e.turns)
    });
    row("wall time (all, host included)", &|e| {
        format!("{:.2} s", e.wall_secs)
    });
    row("loop (ingest+checks+compactions)", &|e| {
        format!("{:.2} s", e.loop_secs)
    });
    row("ingest per turn p50 / p99", &|e| {
        format!("{:.3} / {:.3} ms", e.ingest.p50_ms, e.ingest.p99_ms)
    });
    row("threshold check p50 / p99", &|e| {
        format!(
            "{:.4} / {:.4} ms",
            e.threshold_check.p50_ms, e.threshold_check.p99_ms
        )
    });
    row("compactions", &|e| e.compaction.count.to_string());
    row("summarizer calls / input tokens", &|e| {
        format!(
            "{} / {}",
            e.compaction.summarizer_calls, e.compaction.summarizer_input_tokens
        )
    });
    row("compaction overhead mean / max", &|e| {
        format!(
            "{:.1} / {:.1} ms",
            e.compaction.engine_overhead.mean_ms, e.compaction.engine_overhead.max_ms
        )
    });
    row("host history prep p50", &|e| {
        format!("{:.3} ms", e.host_prepare.p50_ms)
    });
    row("assemble p50 / p99", &|e| {
        format!("{:.3} / {:.3} ms", e.assemble.p50_ms, e.assemble.p99_ms)
    });
    row("assembled tokens p50 / last (msgs)", &|e| {
        format!(
            "{} / {} ({})",
            e.assembled_tokens_p50, e.assembled_tokens_last, e.assembled_messages_last
        )
    });
    row("over budget", &|e| e.over_budget.to_string());
    row(
        "prompt cache, OpenAI rule: cached / breaks per 100",
        &|e| match &e.cache {
            Some(c) => format!("{:.1}% / {:.1}", c.cached_share * 100.0, c.breaks_per_100),
            None => "n/a".into(),
        },
    );
    row(
        "prompt cache, Anthropic rule: read / written",
        &|e| match &e.cache {
            Some(c) => format!(
                "{:.1}% / {:.1}%",
                c.anthropic_cached_share * 100.0,
                c.anthropic_written_share * 100.0
            ),
            None => "n/a".into(),
        },
    );
    row("grep full-text / regex p50", &|e| match &e.grep {
        Some(g) => format!("{:.2} / {:.2} ms", g.full_text.p50_ms, g.regex.p50_ms),
        None => "n/a".into(),
    });
    row(
        "summaries (max depth)",
        &|e| match (e.summaries, e.max_depth) {
            (Some(s), Some(d)) => format!("{s} (d{d})"),
            _ => "n/a".into(),
        },
    );
    row("database / raw text", &|e| match e.database_bytes {
        Some(d) => format!(
            "{} / {} ({:.2}x)",
            mib(d),
            mib(e.raw_text_bytes),
            d as f64 / e.raw_text_bytes.max(1) as f64
        ),
        None => "n/a".into(),
    });
    row("disk incl. log / raw text", &|e| match e.disk_bytes {
        Some(d) => format!(
            "{} / {} ({:.2}x)",
            mib(d),
            mib(e.raw_text_bytes),
            e.disk_per_raw_byte.unwrap_or(0.0)
        ),
        None => format!("n/a / {}", mib(e.raw_text_bytes)),
    });
    row("peak RSS", &|e| match e.peak_rss_bytes {
        Some(b) => format!(
            "{}{}",
            mib(b),
            if e.peak_rss_isolated {
                ""
            } else {
                " (cumulative)"
            }
        ),
        None => "n/a".into(),
    });
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(6);
    let widths: Vec<usize> = (0..r.engines.len())
        .map(|i| {
            rows.iter()
                .map(|row| row.1[i].len())
                .chain([r.engines[i].engine.len()])
                .max()
                .unwrap_or(8)
        })
        .collect();
    let mut s = format!("workload {}  budget {}\n", r.workload, r.budget);
    s.push_str(&format!("{:<w0$}", "metric"));
    for (e, w) in r.engines.iter().zip(&widths) {
        s.push_str(&format!("  {:>w$}", e.engine, w = *w));
    }
    s.push('\n');
    for (name, vals) in &rows {
        s.push_str(&format!("{name:<w0$}"));
        for (v, w) in vals.iter().zip(&widths) {
            s.push_str(&format!("  {v:>w$}", w = *w));
        }
        s.push('\n');
    }
    if !r.ratios.is_empty() {
        s.push_str("\nratios (engine / baseline):\n");
        for q in &r.ratios {
            let v = q
                .ratio
                .map(|x| format!("{x:.2}x"))
                .unwrap_or_else(|| "n/a".into());
            s.push_str(&format!(
                "  {:<20} {} / {}: {v}\n",
                q.metric, q.engine, q.baseline
            ));
        }
    }
    s
}
