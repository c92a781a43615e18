//! Background compaction (issue #29 item 3), on both backends: a turn over the threshold but
//! within the budget is stored without a summarizer call (the debt), inline maintenance has no
//! permission to pay it, background maintenance (`allowDeferredCompactionExecution`) does, one
//! at a time per conversation (a second maintenance, from the same engine or, on PostgreSQL,
//! from another gateway's engine over the same database, returns at once without a summary),
//! turns stored meanwhile do not wait for it, and an aborted pass (shutdown) leaves no summary
//! and no lock behind. A turn over the whole budget still compacts in the foreground.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use clawctx_engine::{AbortController, CallContext, ContextEngine};
use clawctx_lossless::*;
use clawctx_protocol::*;
use clawctx_summarize::{SummarizeError, Summarizer, Summary, SummaryRequest};
use common::*;
use tokio::sync::Semaphore;

const BUDGET: u64 = 2_000;

/// Keeps the first 10% of its input, once the test hands it a permit.
struct HeldSummarizer {
    started: AtomicUsize,
    release: Semaphore,
}

impl HeldSummarizer {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            started: AtomicUsize::new(0),
            release: Semaphore::new(0),
        })
    }
    fn started(&self) -> usize {
        self.started.load(Ordering::SeqCst)
    }
    async fn wait_started(&self, n: usize) {
        tokio::time::timeout(Duration::from_secs(60), async {
            while self.started() < n {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the background compaction reaches the summarizer");
    }
}

#[async_trait]
impl Summarizer for HeldSummarizer {
    fn name(&self) -> &str {
        "held"
    }
    async fn summarize(&self, req: SummaryRequest) -> Result<Summary, SummarizeError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        self.release
            .acquire()
            .await
            .map_err(|e| SummarizeError::Unavailable(e.to_string()))?
            .forget();
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

fn cfg() -> LosslessConfig {
    LosslessConfig {
        fresh_tail_count: 4,
        leaf_chunk_tokens: 600,
        leaf_min_fanout: 2,
        min_salient_retention: 0.0,
        ..Default::default()
    }
}

fn maintain_params(background: bool) -> MaintainParams {
    MaintainParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        runtime_context: Some(ContextEngineRuntimeContext {
            token_budget: Some(BUDGET),
            allow_deferred_compaction_execution: background.then_some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn frontier_tokens(e: &LosslessEngine) -> u64 {
    let convs = e.recall().conversations().await.unwrap();
    convs.first().map_or(0, |c| c.frontier_tokens.max(0) as u64)
}

async fn summaries(store: &TestStore, e: &LosslessEngine) -> i64 {
    store.count(e, "SELECT count(*) FROM summaries").await
}

/// Stores turns (never waiting for a summary: bounded) until the frontier is over the
/// threshold; answers the history.
async fn turns_over_threshold(e: &LosslessEngine, history: &mut Vec<AgentMessage>, rng: &mut Lcg) {
    let threshold = e.config().threshold_tokens(BUDGET);
    let mut t = history.len();
    while frontier_tokens(e).await <= threshold {
        store_turn(e, history, rng, t).await;
        t += 1;
        assert!(t < 200, "the frontier never passed the threshold");
    }
}

async fn store_turn(e: &LosslessEngine, history: &mut Vec<AgentMessage>, rng: &mut Lcg, t: usize) {
    let pre = history.len();
    history.extend(turn(rng, t, false, 8));
    tokio::time::timeout(
        Duration::from_secs(60),
        e.after_turn(&after_turn(history, pre, BUDGET), &cx()),
    )
    .await
    .expect("afterTurn waits for no summary")
    .unwrap();
}

on_both_backends! {
async fn background_maintenance_pays_the_debt_once_and_turns_never_wait(store) {
    let held = HeldSummarizer::new();
    let e = Arc::new(store.engine(cfg()).await.with_summarizer(held.clone()));
    assert_eq!(e.info().turn_maintenance_mode, Some(TurnMaintenanceMode::Background));
    let mut rng = Lcg(11);
    let mut history = Vec::new();
    turns_over_threshold(&e, &mut history, &mut rng).await;
    let before = frontier_tokens(&e).await;
    assert!(before <= BUDGET, "the debt is within the budget: {before}");
    assert_eq!(held.started(), 0, "the turn left the compaction as debt");

    // Inline maintenance (bootstrap, after a compaction) has no permission to compact.
    e.maintain(&maintain_params(false), &cx()).await.unwrap();
    assert_eq!(held.started(), 0);

    // Background maintenance pays it: held inside the summarizer.
    let bg = {
        let e = e.clone();
        tokio::spawn(async move { e.maintain(&maintain_params(true), &cx()).await })
    };
    held.wait_started(1).await;
    let calls = held.started();

    // Single flight: a second pass of this engine, and on PostgreSQL another gateway's engine
    // over the same database, finds the compaction running and returns without a summary.
    tokio::time::timeout(Duration::from_secs(60), e.maintain(&maintain_params(true), &cx()))
        .await
        .expect("a second maintenance does not wait")
        .unwrap();
    if !store.is_sqlite() {
        let other = store.engine(cfg()).await.with_summarizer(held.clone());
        tokio::time::timeout(Duration::from_secs(60), other.maintain(&maintain_params(true), &cx()))
            .await
            .expect("another gateway's maintenance does not wait")
            .unwrap();
        other.dispose().await.unwrap();
    }
    // Turns meanwhile are stored without waiting.
    for _ in 0..2 {
        let t = history.len();
        store_turn(&e, &mut history, &mut rng, t).await;
    }
    assert_eq!(held.started(), calls, "nothing else called the summarizer");
    assert_eq!(summaries(store, &e).await, 0, "nothing is written before the summary");

    held.release.add_permits(1_000);
    tokio::time::timeout(Duration::from_secs(60), bg)
        .await
        .expect("the background pass ends once released")
        .unwrap()
        .unwrap();
    assert!(summaries(store, &e).await >= 1, "the background pass wrote summaries");
    assert!(
        frontier_tokens(&e).await <= e.config().threshold_tokens(BUDGET),
        "the debt is paid"
    );
    let stored = store.count(&e, "SELECT count(*) FROM messages").await;
    assert_eq!(stored, history.len() as i64, "every turn is stored");
}
}

on_both_backends! {
async fn an_aborted_background_pass_leaves_no_summary_and_the_next_one_compacts(store) {
    let held = HeldSummarizer::new();
    let e = Arc::new(store.engine(cfg()).await.with_summarizer(held.clone()));
    let mut rng = Lcg(12);
    let mut history = Vec::new();
    turns_over_threshold(&e, &mut history, &mut rng).await;
    let before = frontier_tokens(&e).await;

    let shutdown = AbortController::new();
    let bg = {
        let e = e.clone();
        let cx = CallContext::none().with_abort(shutdown.signal());
        tokio::spawn(async move { e.maintain(&maintain_params(true), &cx).await })
    };
    held.wait_started(1).await;
    shutdown.abort("runtime shutting down");
    tokio::time::timeout(Duration::from_secs(60), bg)
        .await
        .expect("an aborted pass returns while its summary is pending")
        .unwrap()
        .unwrap();
    assert_eq!(summaries(store, &e).await, 0, "no half-written summary");
    assert_eq!(frontier_tokens(&e).await, before, "the debt is still there");

    // The lock went with the pass (on PostgreSQL once the server has seen its connection
    // close): the next background maintenance compacts.
    held.release.add_permits(1_000);
    for _ in 0..200 {
        e.maintain(&maintain_params(true), &cx()).await.unwrap();
        if summaries(store, &e).await >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(summaries(store, &e).await >= 1);
    assert!(frontier_tokens(&e).await <= e.config().threshold_tokens(BUDGET));
}
}

on_both_backends! {
async fn a_turn_over_the_whole_budget_compacts_in_the_foreground(store) {
    let held = HeldSummarizer::new();
    held.release.add_permits(1_000);
    let e = store.engine(cfg()).await.with_summarizer(held.clone());
    let mut rng = Lcg(13);
    let mut history = Vec::new();
    let mut t = 0;
    // No background maintenance runs: the debt grows until a turn passes the budget.
    while held.started() == 0 {
        store_turn(&e, &mut history, &mut rng, t).await;
        t += 1;
        assert!(t < 400, "no foreground compaction");
    }
    assert!(summaries(store, &e).await >= 1);
    assert!(frontier_tokens(&e).await <= BUDGET);
}
}

#[tokio::test]
async fn background_compaction_off_compacts_inline_and_says_foreground() {
    let dir = tempfile::tempdir().unwrap();
    let held = HeldSummarizer::new();
    held.release.add_permits(1_000);
    let e = engine(
        &dir,
        LosslessConfig {
            background_compaction: false,
            ..cfg()
        },
    )
    .with_summarizer(held.clone());
    assert_eq!(
        e.info().turn_maintenance_mode,
        Some(TurnMaintenanceMode::Foreground)
    );
    let mut rng = Lcg(14);
    let mut history = Vec::new();
    let mut t = 0;
    while held.started() == 0 {
        store_turn(&e, &mut history, &mut rng, t).await;
        t += 1;
        assert!(t < 200, "no inline compaction");
    }
    assert!(frontier_tokens(&e).await <= e.config().threshold_tokens(BUDGET));
}

on_both_backends! {
async fn an_assembly_that_would_drop_history_compacts_it_first(store) {
    // The host maintains the conversation in the background, but its summary model is slow
    // (held): turns arrive faster than maintenance pays the debt, until the frontier no longer
    // fits the budget. The next assembly does not drop the oldest history as a sliding window
    // would: it compacts it first, extractively, and shows the summaries in its place.
    let held = HeldSummarizer::new();
    let e = Arc::new(store.engine(cfg()).await.with_summarizer(held.clone()));
    e.maintain(&maintain_params(true), &cx()).await.unwrap();
    let mut rng = Lcg(15);
    let mut history = Vec::new();
    turns_over_threshold(&e, &mut history, &mut rng).await;
    let bg = {
        let e = e.clone();
        tokio::spawn(async move { e.maintain(&maintain_params(true), &cx()).await })
    };
    held.wait_started(1).await;
    let mut t = history.len();
    while frontier_tokens(&e).await <= BUDGET {
        store_turn(&e, &mut history, &mut rng, t).await;
        t += 1;
        assert!(t < 400, "the frontier never passed the budget");
    }
    assert_eq!(summaries(store, &e).await, 0, "maintenance is still held");

    let prompt = AgentMessage::user("and what next?").with_timestamp(1);
    let mut live = history.clone();
    live.push(prompt.clone());
    let r = e
        .assemble(&assemble_params(live, BUDGET), &cx())
        .await
        .unwrap();
    assert!(r.estimated_tokens <= BUDGET);
    assert!(summaries(store, &e).await >= 1, "the assembly compacted first");
    let by = store.texts(&e, "SELECT DISTINCT summarizer FROM summaries").await;
    assert_eq!(by, vec!["extractive".to_owned()]);
    assert!(frontier_tokens(&e).await <= BUDGET);
    // Every frontier item is shown: nothing is left out without a summary in its place.
    let shown = r
        .messages
        .iter()
        .filter(|m| !m.plain_text().starts_with("<recalled"))
        .count();
    let conv = e.recall().conversations().await.unwrap()[0].id;
    assert_eq!(shown, store.frontier(&e, conv).await.len() + 1, "{:?}", r.messages.len());
    assert!(r.messages[0].plain_text().starts_with("<summary "));
    assert_eq!(r.messages.last(), Some(&prompt));

    // The held model pass ends without harm: its planned ranges are gone.
    held.release.add_permits(1_000);
    tokio::time::timeout(Duration::from_secs(60), bg)
        .await
        .expect("the background pass ends once released")
        .unwrap()
        .unwrap();
    assert!(e.backend().doctor().await.unwrap().ok);
}
}
