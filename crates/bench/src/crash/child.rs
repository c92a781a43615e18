//! The process the campaign kills: `clawctx bench crash-child`. It opens the lossless engine
//! on the store it is given, as a host does at start, and drives one kind of work through the
//! engine's lifecycle, saying on stdout what it is about to send (`SEND first count`) and what
//! the engine acknowledged (`ACK first count`, printed only after the call returned), flushed
//! line by line so a line the parent read is a fact. `OPEN` says the engine is open (the
//! parent's kill delays count from it), `COMPACT` / `COMPACTED` bracket a forced compaction
//! (so a kill's phase is known), `DONE` ends a run that was not killed.
//!
//! A unit whose answer a kill swallowed is sent again first (`resend`), with the same ids and
//! the same `advancementKey`, as a host's outbox re-delivers a turn after a restart.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use clawctx_engine::{CallContext, ContextEngine};
use clawctx_lossless::pg::PgStore;
use clawctx_lossless::{LosslessConfig, LosslessEngine};
use clawctx_protocol::{
    AfterTurnParams, CommitTurnParams, CommitTurnStatus, CompactParams, IngestBatchParams,
    TranscriptEntryAnchor, TranscriptTurnAdmission,
};
use clawctx_summarize::{SummarizeError, Summarizer, Summary, SummaryRequest};

use super::workload::unit;
use crate::error::{BenchError, Result};

/// What the child does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildMode {
    /// Per-turn ingest: `commitTurn` (two turns in three) and `afterTurn`, each followed by
    /// the engine's own threshold compaction.
    Turns,
    /// Batched ingest: `ingestBatch` of long runs of messages.
    Batch,
    /// A turn, then a forced compaction with a slow summarizer, again and again.
    Compact,
}

impl ChildMode {
    /// The mode's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ChildMode::Turns => "turns",
            ChildMode::Batch => "batch",
            ChildMode::Compact => "compact",
        }
    }

    /// The mode named `s`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "turns" => Ok(ChildMode::Turns),
            "batch" => Ok(ChildMode::Batch),
            "compact" => Ok(ChildMode::Compact),
            other => Err(BenchError::InvalidArgument(format!(
                "crash-child --mode: `{other}` is not turns, batch or compact"
            ))),
        }
    }

    /// Messages in the unit starting at `first`.
    pub fn unit_len(self, first: u64) -> u64 {
        match self {
            ChildMode::Turns | ChildMode::Compact => 4 + first % 4,
            ChildMode::Batch => 1_500,
        }
    }

    /// The session key of the mode's conversation.
    pub fn session_key(self) -> &'static str {
        match self {
            ChildMode::Turns => "agent:main:crash-turns",
            ChildMode::Batch => "agent:main:crash-batch",
            ChildMode::Compact => "agent:main:crash-compact",
        }
    }

    /// The summarizer's delay per call: long enough in `compact` mode that kills land inside
    /// compactions.
    fn summary_delay(self) -> Duration {
        match self {
            ChildMode::Compact => Duration::from_millis(40),
            _ => Duration::from_millis(3),
        }
    }
}

/// One child run.
#[derive(Clone, Debug)]
pub struct ChildOptions {
    /// What to do.
    pub mode: ChildMode,
    /// A SQLite file, or a `postgres://` URL.
    pub store: String,
    /// The first message id of the first new unit.
    pub first: u64,
    /// New units to send.
    pub units: u64,
    /// A unit to send again first: (first id, count).
    pub resend: Option<(u64, u64)>,
    /// The harness's self-check: say `ACK` before the write instead of after it, which is
    /// the bug the campaign exists to catch (its report must show losses).
    pub ack_before_write: bool,
}

/// A summarizer that waits, then keeps the first tenth of its input (the benchmark's fake).
struct SlowSummarizer(Duration);

#[async_trait]
impl Summarizer for SlowSummarizer {
    fn name(&self) -> &str {
        "crash-slow"
    }
    async fn summarize(&self, req: SummaryRequest) -> std::result::Result<Summary, SummarizeError> {
        tokio::time::sleep(self.0).await;
        let mut end = req.conversation.len() / 10;
        while !req.conversation.is_char_boundary(end) {
            end -= 1;
        }
        let text = req.conversation[..end].to_owned();
        Ok(Summary {
            output_tokens: clawctx_tokens::text_tokens(&text),
            text,
            input_tokens: 0,
        })
    }
}

/// The engine's config for the campaign: small thresholds, so turns compact often.
pub fn crash_config() -> LosslessConfig {
    LosslessConfig {
        fresh_tail_count: 4,
        leaf_chunk_tokens: 400,
        leaf_min_fanout: 2,
        condensed_min_fanout: 2,
        summary_prefix_target_tokens: 300,
        min_salient_retention: 0.0,
        default_token_budget: 3_000,
        context_threshold: 0.5,
        summary_max_calls_per_window: 1_000_000,
        ..Default::default()
    }
}

/// Opens the engine on `store` (a SQLite path or a `postgres://` URL).
pub async fn open_engine(store: &str, summarizer: Arc<dyn Summarizer>) -> Result<LosslessEngine> {
    let engine = if store.starts_with("postgres://") || store.starts_with("postgresql://") {
        let pg = PgStore::open_url(store)
            .await
            .map_err(|e| BenchError::engine("lossless", "open", e))?;
        LosslessEngine::over(Arc::new(pg), crash_config())
    } else {
        let path = store.to_owned();
        tokio::task::spawn_blocking(move || LosslessEngine::open(&path, crash_config()))
            .await
            .map_err(|e| BenchError::engine("lossless", "open", e))?
    };
    Ok(engine
        .map_err(|e| BenchError::engine("lossless", "open", e))?
        .with_summarizer(summarizer))
}

fn say(line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| BenchError::io("stdout", e))
}

fn anchor(key: &str, entry: String) -> TranscriptEntryAnchor {
    TranscriptEntryAnchor {
        agent_id: "main".into(),
        session_id: key.into(),
        session_key: key.into(),
        entry_id: entry,
        ..Default::default()
    }
}

/// Sends the unit `first..first + count` the way `mode` sends it.
pub(crate) async fn send(
    engine: &LosslessEngine,
    mode: ChildMode,
    first: u64,
    count: u64,
) -> Result<()> {
    let key = mode.session_key();
    let messages = unit(first, count);
    let cx = CallContext::none();
    let failed = |stage: &'static str| move |e| BenchError::engine("lossless", stage, e);
    match mode {
        ChildMode::Batch => {
            let p = IngestBatchParams {
                session_id: key.into(),
                session_key: Some(key.into()),
                messages,
                is_heartbeat: None,
            };
            engine
                .ingest_batch(&p, &cx)
                .await
                .map_err(failed("ingestBatch"))?;
        }
        ChildMode::Turns if first % 3 == 0 => {
            let p = AfterTurnParams {
                session_id: key.into(),
                session_key: Some(key.into()),
                messages,
                pre_prompt_message_count: 0,
                token_budget: Some(3_000),
                ..Default::default()
            };
            engine
                .after_turn(&p, &cx)
                .await
                .map_err(failed("afterTurn"))?;
        }
        ChildMode::Turns | ChildMode::Compact => {
            let advancement = format!("turn-{first}");
            let p = CommitTurnParams {
                advancement_key: advancement.clone(),
                admission: TranscriptTurnAdmission {
                    anchor: anchor(key, format!("{advancement}:user")),
                    logical_turn_id: advancement.clone(),
                    role: "user".into(),
                },
                terminal: anchor(key, format!("{advancement}:terminal")),
                messages,
                session_id: key.into(),
                session_key: Some(key.into()),
                ..Default::default()
            };
            let r = engine
                .commit_turn(&p, &cx)
                .await
                .map_err(failed("commitTurn"))?;
            if !matches!(
                r.status,
                CommitTurnStatus::Committed | CommitTurnStatus::Duplicate
            ) {
                return Err(BenchError::engine(
                    "lossless",
                    "commitTurn",
                    format!("{:?}", r.status),
                ));
            }
        }
    }
    Ok(())
}

/// Runs the child (see the module header).
pub async fn run_child(opts: &ChildOptions) -> Result<()> {
    let summarizer = Arc::new(SlowSummarizer(opts.mode.summary_delay()));
    let engine = open_engine(&opts.store, summarizer).await?;
    say("OPEN")?;
    let mut units: Vec<(u64, u64)> = opts.resend.into_iter().collect();
    let mut first = opts.first;
    for _ in 0..opts.units {
        let n = opts.mode.unit_len(first);
        units.push((first, n));
        first += n;
    }
    let key = opts.mode.session_key();
    for (first, count) in units {
        if opts.ack_before_write {
            say(&format!("ACK {first} {count}"))?;
        }
        say(&format!("SEND {first} {count}"))?;
        send(&engine, opts.mode, first, count).await?;
        if !opts.ack_before_write {
            say(&format!("ACK {first} {count}"))?;
        }
        if opts.mode == ChildMode::Compact {
            let p = CompactParams {
                session_id: key.into(),
                session_key: Some(key.into()),
                force: Some(true),
                token_budget: Some(2_000),
                ..Default::default()
            };
            say("COMPACT")?;
            engine
                .compact(&p, &CallContext::none())
                .await
                .map_err(|e| BenchError::engine("lossless", "compact", e))?;
            say("COMPACTED")?;
        }
    }
    say("DONE")?;
    engine.backend().close().await;
    Ok(())
}
