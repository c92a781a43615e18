//! Crash in the middle of background compaction (issue #29 item 3): a child process stores
//! turns with `afterTurn` and, like the runtime's background lane, runs `maintain` with
//! `allowDeferredCompactionExecution` after each one (one at a time); its summarizer answers a
//! few calls, then holds one forever. While it is held the child goes on storing turns; then it
//! is killed with SIGKILL. The reopened store passes doctor, holds every acknowledged turn, and
//! the next run's background maintenance compacts it under the threshold.
//!
//! The child is this test binary re-executed with `LCM_BG_CRASH_DB` set, running only
//! `background_crash_child` (which does nothing in a normal run).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use clawctx_engine::ContextEngine;
use clawctx_lossless::*;
use clawctx_summarize::{SummarizeError, Summarizer, Summary, SummaryRequest};
use common::*;

const BUDGET: u64 = 2_000;

tokio::task_local! {
    /// Set in the child's maintenance lane: only background calls are held.
    static IN_LANE: bool;
}

/// Keeps the first 10% of its input; after `free` calls, the next call of the maintenance
/// lane never answers (it prints `HELD` first). Calls of a foreground compaction (a turn over
/// the whole budget) always answer.
struct HoldsAfter {
    free: usize,
    calls: AtomicUsize,
}

#[async_trait]
impl Summarizer for HoldsAfter {
    fn name(&self) -> &str {
        "holds-after"
    }
    async fn summarize(&self, req: SummaryRequest) -> Result<Summary, SummarizeError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        if n >= self.free && IN_LANE.try_with(|l| *l).unwrap_or(false) {
            let mut out = std::io::stdout();
            writeln!(out, "HELD {n}").unwrap();
            out.flush().unwrap();
            std::future::pending::<()>().await;
        }
        let mut end = req.conversation.len() / 10;
        while !req.conversation.is_char_boundary(end) {
            end -= 1;
        }
        Ok(Summary {
            text: req.conversation[..end].to_owned(),
            input_tokens: 0,
            output_tokens: 0,
        })
    }
}

fn cfg() -> LosslessConfig {
    LosslessConfig {
        fresh_tail_count: 4,
        leaf_chunk_tokens: 400,
        leaf_min_fanout: 2,
        condensed_min_fanout: 2,
        summary_concurrency: 1,
        min_salient_retention: 0.0,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_crash_child() {
    let Ok(path) = std::env::var("LCM_BG_CRASH_DB") else {
        return;
    };
    let free: usize = std::env::var("LCM_BG_CRASH_FREE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let e = Arc::new(
        LosslessEngine::open(&path, cfg())
            .unwrap()
            .with_summarizer(Arc::new(HoldsAfter {
                free,
                calls: AtomicUsize::new(0),
            })),
    );
    let mut rng = Lcg(free as u64 + 7);
    let mut history = Vec::new();
    let mut lane: Option<tokio::task::JoinHandle<()>> = None;
    let mut out = std::io::stdout();
    for t in 0..2_000 {
        let pre = history.len();
        history.extend(turn(&mut rng, t, t % 3 == 0, 10));
        e.after_turn(&after_turn(&history, pre, BUDGET), &cx())
            .await
            .unwrap();
        writeln!(out, "ACK {t}").unwrap();
        out.flush().unwrap();
        // The runtime's lane: one maintenance at a time, the next after it settles.
        if lane.as_ref().is_none_or(|l| l.is_finished()) {
            let e = e.clone();
            lane = Some(tokio::spawn(IN_LANE.scope(true, async move {
                e.maintain(&deferred_maintain(BUDGET), &cx()).await.unwrap();
            })));
        }
        tokio::task::yield_now().await;
    }
}

async fn frontier_tokens(store: &LosslessStore) -> u64 {
    let convs = store.conversations().await.unwrap();
    convs.first().map_or(0, |c| c.frontier_tokens.max(0) as u64)
}

#[tokio::test]
async fn sigkill_while_a_background_summary_is_pending_leaves_a_consistent_store() {
    let exe = std::env::current_exe().unwrap();
    // 0: killed in the first compaction's first call; 3: in the middle of its first round
    // (summaries produced, none committed: a round commits all or nothing); 40: in a later
    // compaction, earlier ones committed.
    for free in [0usize, 3, 40] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("bg-crash.db");
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "background_crash::background_crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("LCM_BG_CRASH_DB", &db)
            .env("LCM_BG_CRASH_FREE", free.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let mut acked: Vec<usize> = Vec::new();
        let mut held = false;
        let mut after_held = 0;
        while let Some(Ok(line)) = lines.next() {
            if let Some(t) = line.strip_prefix("ACK ") {
                acked.push(t.trim().parse().unwrap());
                if held {
                    after_held += 1;
                    // Turns stored while the summary is pending, then the kill.
                    if after_held >= 3 {
                        break;
                    }
                }
            } else if line.starts_with("HELD ") {
                held = true;
            }
        }
        assert!(held, "free {free}: the child never reached a held summary");
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        for line in lines.map_while(Result::ok) {
            if let Some(t) = line.strip_prefix("ACK ") {
                acked.push(t.trim().parse().unwrap());
            }
        }

        let store = LosslessStore::open(&db).unwrap();
        let doc = store.doctor().await.unwrap();
        assert!(doc.ok, "free {free}: {:#?}", doc.issues);
        match free {
            0 => assert_eq!(doc.status.summaries, 0, "no summary of the killed pass"),
            40 => assert!(doc.status.summaries > 0, "earlier passes' summaries stay"),
            _ => {}
        }
        let summaries_before = doc.status.summaries;
        let threshold = cfg().threshold_tokens(BUDGET);
        // The debt survives the crash (a pass killed in a later round may have brought the
        // frontier under the threshold already).
        let in_debt = frontier_tokens(&store).await > threshold;
        assert!(
            in_debt || free > 0,
            "free {free}: the debt survives the crash"
        );
        for t in &acked {
            let q = GrepQuery {
                target: GrepTarget::Messages,
                ..GrepQuery::new(format!("nd{t}x0"), Scope::All)
            };
            let g = store.grep(q).await.unwrap();
            assert_eq!(
                g.hits.len(),
                1,
                "free {free}: acknowledged turn {t} missing"
            );
        }
        store.close();

        // The next run: its first background maintenance compacts.
        let e = LosslessEngine::open(&db, cfg())
            .unwrap()
            .with_summarizer(FakeSummarizer::new(0));
        e.maintain(&deferred_maintain(BUDGET), &cx()).await.unwrap();
        let store = e.store().unwrap();
        assert!(frontier_tokens(store).await <= threshold, "free {free}");
        let doc = store.doctor().await.unwrap();
        assert!(doc.ok, "free {free} after the next run: {:#?}", doc.issues);
        if in_debt {
            assert!(doc.status.summaries > summaries_before, "free {free}");
        }
        e.dispose().await.unwrap();
    }
}
