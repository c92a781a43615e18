//! `clawctx demo`: the lossless engine's main job, offline, in one command.
//!
//! A long synthetic conversation is generated at run time (the chat workload, seeded) with one
//! early detail planted in its second turn — an invoice number and a config value. It is
//! replayed through `lossless` with the extractive summarizer in a temporary state directory:
//! every turn is delivered with `afterTurn`, and the engine compacts on its own when its
//! frontier passes the threshold. At the end the demo shows the summary DAG (depths, fanout,
//! counts), the assembled context against the budget, and a recall query (`lcm_grep`) that finds
//! the early detail although it is no longer among the raw messages of the context.
//!
//! No network, no API key: the summarizer is the deterministic extractive one.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clawctx_engine::pipeline::{prepare_history, PipelineOptions};
use clawctx_engine::ToolCallContext;
use clawctx_protocol::{AgentMessage, AssembleParams};
use clawctx_summarize::{ExtractiveSummarizer, Summarizer};
use serde::Serialize;
use serde_json::json;

use crate::engines::open_engine;
use crate::error::{BenchError, Result};
use crate::host::BenchHost;
use crate::runner::deliver_turn;
use crate::workload::{Workload, WorkloadKind, WorkloadSpec, BASE_TIMESTAMP_MS};

/// The planted invoice number.
pub const PLANTED_INVOICE: &str = "INV-2024-88417";
/// The planted config value.
pub const PLANTED_CONFIG: &str = "max_connections = 371";
/// The recall query the demo runs (what an agent would search for).
pub const RECALL_QUERY: &str = "vendor invoice number";

const SESSION: &str = "agent:demo:main:1";

/// Demo settings.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// Messages in the conversation (after the planted turn).
    pub messages: u64,
    /// Token budget.
    pub budget: u64,
    /// Where the engine keeps its database.
    pub state_dir: PathBuf,
    /// Show a progress bar (TTY) or periodic lines on stderr.
    pub progress: bool,
}

/// One depth of the summary DAG.
pub use clawctx_lossless::DagLevel;

/// What the demo found.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DemoReport {
    /// Messages replayed.
    pub messages: u64,
    /// Turns.
    pub turns: u64,
    /// Wall time (s).
    pub seconds: f64,
    /// Messages stored.
    pub stored_messages: u64,
    /// Summary DAG by depth.
    pub dag: Vec<DagLevel>,
    /// Items in the active frontier: raw messages, summaries.
    pub frontier_messages: u64,
    /// Summaries in the frontier.
    pub frontier_summaries: u64,
    /// Budget.
    pub budget: u64,
    /// Assembled context: tokens.
    pub context_tokens: u64,
    /// Assembled context: raw messages.
    pub context_raw_messages: u64,
    /// Assembled context: summary blocks.
    pub context_summaries: u64,
    /// Whether the planted detail is in a raw message of the context.
    pub detail_in_raw_context: bool,
    /// Whether a summary in the context still mentions it.
    pub detail_in_summary: bool,
    /// The recall query.
    pub recall_query: String,
    /// Id of the hit holding the detail (`msg_…`), if recall found it.
    pub recall_hit: Option<String>,
    /// Rank of that hit (1-based).
    pub recall_rank: Option<usize>,
    /// Its snippet.
    pub recall_snippet: Option<String>,
}

fn planted_turn() -> Vec<AgentMessage> {
    let t = BASE_TIMESTAMP_MS - 60_000;
    vec![
        AgentMessage::user(format!(
            "Before I forget: the vendor invoice number for the March hosting bill is {PLANTED_INVOICE}, and staging \
             must keep {PLANTED_CONFIG} in db.toml or the load test fails."
        ))
        .with_timestamp(t),
        AgentMessage::assistant(format!(
            "Noted: invoice {PLANTED_INVOICE} (March hosting) and staging db.toml keeps {PLANTED_CONFIG}. I will keep both in mind."
        ))
        .with_timestamp(t + 5_000),
    ]
}

enum Progress {
    Bar(indicatif::ProgressBar),
    Lines { every: u64, next: u64 },
    Off,
}

impl Progress {
    fn new(enabled: bool, total: u64) -> Self {
        if !enabled {
            return Progress::Off;
        }
        if std::io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::with_draw_target(
                Some(total),
                indicatif::ProgressDrawTarget::stderr(),
            );
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{spinner} replaying [{bar:40}] {pos}/{len} messages {msg}",
            ) {
                bar.set_style(style.progress_chars("=> "));
            }
            Progress::Bar(bar)
        } else {
            let every = (total / 10).max(1);
            Progress::Lines { every, next: every }
        }
    }

    fn update(&mut self, done: u64, total: u64, note: &str) {
        match self {
            Progress::Bar(b) => {
                b.set_position(done);
                b.set_message(note.to_owned());
            }
            Progress::Lines { every, next } => {
                if done >= *next || done == total {
                    eprintln!("replayed {done}/{total} messages {note}");
                    *next = done - done % *every + *every;
                }
            }
            Progress::Off => {}
        }
    }

    fn finish(self) {
        if let Progress::Bar(b) = self {
            b.finish_and_clear();
        }
    }
}

/// Runs the demo.
pub async fn run_demo(opts: &DemoOptions) -> Result<DemoReport> {
    let started = Instant::now();
    let summarizer: Arc<dyn Summarizer> = Arc::new(ExtractiveSummarizer);
    let eut = open_engine("lossless", &opts.state_dir, summarizer.clone(), &json!({})).await?;
    let store = eut
        .store
        .clone()
        .ok_or_else(|| BenchError::engine("lossless", "open", "no store"))?;
    let host = BenchHost::new(Default::default(), summarizer);
    let spec = WorkloadSpec {
        kind: WorkloadKind::Chat,
        messages: opts.messages,
        seed: 2026,
    };
    let total = opts.messages + 2;
    let mut progress = Progress::new(opts.progress, total);
    let (mut done, mut turns) = (0u64, 0u64);
    let turns_iter = std::iter::once(planted_turn()).chain(Workload::new(spec).map(|t| t.messages));
    for turn in turns_iter {
        for m in &turn {
            host.append(m.clone());
        }
        deliver_turn(&eut, SESSION, SESSION, &turn, opts.budget).await?;
        done += turn.len() as u64;
        turns += 1;
        if turns % 25 == 0 || done == total {
            let status = store
                .status()
                .await
                .map_err(|e| BenchError::engine("lossless", "status", e))?;
            progress.update(
                done,
                total,
                &format!(
                    "({} summaries, depth {})",
                    status.summaries, status.max_depth
                ),
            );
        }
    }
    progress.finish();

    // The summary DAG and the frontier, from the store's status.
    let status = store
        .status()
        .await
        .map_err(|e| BenchError::engine("lossless", "status", e))?;

    // The context the model would see now.
    let prepared = prepare_history(
        host.recent(128),
        &PipelineOptions {
            token_budget: Some(opts.budget),
            ..Default::default()
        },
    );
    let params = AssembleParams {
        session_id: SESSION.into(),
        session_key: Some(SESSION.into()),
        messages: prepared.messages,
        token_budget: Some(opts.budget),
        ..Default::default()
    };
    let out = eut
        .engine
        .assemble(&params, &host.call_context())
        .await
        .map_err(|e| BenchError::engine("lossless", "assemble", e))?;
    let is_summary = |m: &AgentMessage| m.plain_text().starts_with("<summary");
    let context_tokens = clawctx_tokens::messages_tokens(&out.messages);
    let detail_in_raw_context = out
        .messages
        .iter()
        .filter(|m| !is_summary(m))
        .any(|m| m.plain_text().contains(PLANTED_INVOICE));
    let detail_in_summary = out
        .messages
        .iter()
        .filter(|m| is_summary(m))
        .any(|m| m.plain_text().contains(PLANTED_INVOICE));

    // Recall, the way the model would ask.
    let (mut recall_hit, mut recall_rank, mut recall_snippet) = (None, None, None);
    if let Some(tool) = eut.grep_tool() {
        let cx = ToolCallContext {
            session_id: SESSION.into(),
            session_key: Some(SESSION.into()),
            tool_call_id: None,
        };
        let raw = tool
            .execute(
                json!({"query": RECALL_QUERY, "target": "messages", "limit": 10}),
                cx,
            )
            .await
            .map_err(|e| BenchError::engine("lossless", "lcm_grep", e))?;
        let v: serde_json::Value = serde_json::from_str(&raw)
            .map_err(|e| BenchError::engine("lossless", "lcm_grep output", e))?;
        if let Some(hits) = v.get("hits").and_then(|h| h.as_array()) {
            for (i, h) in hits.iter().enumerate() {
                let snippet = h
                    .get("snippet")
                    .and_then(|s| s.as_str())
                    .unwrap_or_default();
                if snippet.contains(PLANTED_INVOICE) {
                    recall_hit = h.get("id").and_then(|s| s.as_str()).map(str::to_owned);
                    recall_rank = Some(i + 1);
                    recall_snippet = Some(snippet.to_owned());
                    break;
                }
            }
        }
    }
    let report = DemoReport {
        messages: total,
        turns,
        seconds: started.elapsed().as_secs_f64(),
        stored_messages: status.messages,
        dag: status.dag.clone(),
        frontier_messages: status.frontier_messages,
        frontier_summaries: status.frontier_summaries,
        budget: opts.budget,
        context_tokens,
        context_raw_messages: out.messages.iter().filter(|m| !is_summary(m)).count() as u64,
        context_summaries: out.messages.iter().filter(|m| is_summary(m)).count() as u64,
        detail_in_raw_context,
        detail_in_summary,
        recall_query: RECALL_QUERY.into(),
        recall_hit,
        recall_rank,
        recall_snippet,
    };
    let _ = eut.engine.dispose().await;
    Ok(report)
}

/// Renders the report for a terminal.
pub fn render(r: &DemoReport) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "Replayed {} messages ({} turns) through `lossless` with the extractive summarizer in {:.1} s; {} messages stored.\n\n",
        r.messages, r.turns, r.seconds, r.stored_messages
    ));
    s.push_str("Summary DAG:\n");
    if r.dag.is_empty() {
        s.push_str("  (no summaries)\n");
    }
    for l in &r.dag {
        let what = if l.depth == 0 {
            "leaf summaries of raw messages"
        } else {
            "condensed summaries"
        };
        s.push_str(&format!(
            "  depth {}: {:>4} {what}, fanout mean {:.1}, max {}\n",
            l.depth, l.count, l.mean_fanout, l.max_fanout
        ));
    }
    s.push_str(&format!(
        "  active frontier: {} summaries + {} raw messages\n\n",
        r.frontier_summaries, r.frontier_messages
    ));
    s.push_str(&format!(
        "Assembled context: {} / {} tokens ({:.0}% of the budget): {} summary blocks + {} raw messages.\n\n",
        r.context_tokens,
        r.budget,
        100.0 * r.context_tokens as f64 / r.budget.max(1) as f64,
        r.context_summaries,
        r.context_raw_messages
    ));
    s.push_str(&format!(
        "Early detail planted in turn 1: invoice {PLANTED_INVOICE} ({PLANTED_CONFIG}).\n"
    ));
    s.push_str(&format!(
        "  in the raw context now:   {}\n",
        if r.detail_in_raw_context {
            "YES (the conversation is still short enough)"
        } else {
            "NO - its message was compacted away"
        }
    ));
    s.push_str(&format!(
        "  mentioned by a summary:   {}\n",
        if r.detail_in_summary { "yes" } else { "no" }
    ));
    match (&r.recall_hit, r.recall_rank, &r.recall_snippet) {
        (Some(id), Some(rank), Some(snippet)) => s.push_str(&format!(
            "  recall (lcm_grep \"{}\"): FOUND {id} at rank {rank}:\n    {snippet}\n",
            r.recall_query
        )),
        _ => s.push_str(&format!(
            "  recall (lcm_grep \"{}\"): NOT FOUND\n",
            r.recall_query
        )),
    }
    s
}
