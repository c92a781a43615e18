//! Crash safety: a child process compacts in a loop and is killed with SIGKILL mid-compaction;
//! the reopened store passes doctor and holds every message whose ingest was acknowledged.
//!
//! The child is this test binary re-executed with `LCM_CRASH_DB` set, running only
//! `crash_child` (which does nothing in a normal run).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use clawctx_engine::ContextEngine;
use clawctx_lossless::*;
use clawctx_protocol::IngestBatchParams;
use clawctx_summarize::{SummarizeError, Summarizer, Summary, SummaryRequest};
use common::*;

struct SlowSummarizer;

#[async_trait]
impl Summarizer for SlowSummarizer {
    fn name(&self) -> &str {
        "slow"
    }
    async fn summarize(&self, req: SummaryRequest) -> Result<Summary, SummarizeError> {
        tokio::time::sleep(Duration::from_millis(3)).await;
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

fn crash_cfg() -> LosslessConfig {
    LosslessConfig {
        fresh_tail_count: 4,
        leaf_chunk_tokens: 400,
        leaf_min_fanout: 2,
        condensed_min_fanout: 2,
        summary_prefix_target_tokens: 300,
        min_salient_retention: 0.0,
        ..Default::default()
    }
}

#[tokio::test]
async fn crash_child() {
    let Ok(path) = std::env::var("LCM_CRASH_DB") else {
        return;
    };
    let start: usize = std::env::var("LCM_CRASH_START")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let e = LosslessEngine::open(&path, crash_cfg())
        .unwrap()
        .with_summarizer(Arc::new(SlowSummarizer));
    let mut rng = Lcg(start as u64 + 1);
    let mut out = std::io::stdout();
    for t in start.. {
        let msgs = turn(&mut rng, t, t % 3 == 0, 20);
        let p = IngestBatchParams {
            session_id: "s1".into(),
            session_key: Some(KEY.into()),
            messages: msgs,
            is_heartbeat: None,
        };
        e.ingest_batch(&p, &cx()).await.unwrap();
        writeln!(out, "ACK {t}").unwrap();
        writeln!(out, "COMPACT {t}").unwrap();
        out.flush().unwrap();
        e.compact(&compact_params(true, 2_000), &cx())
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn sigkill_mid_compaction_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db");
    let exe = std::env::current_exe().unwrap();
    let mut acked: Vec<usize> = Vec::new();
    let mut next = 0usize;
    for (round, delay_us) in [0u64, 700, 2_500, 6_000].into_iter().enumerate() {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash::crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("LCM_CRASH_DB", &db)
            .env("LCM_CRASH_START", next.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let mut compacts = 0;
        while let Some(Ok(line)) = lines.next() {
            if let Some(t) = line.strip_prefix("ACK ") {
                acked.push(t.trim().parse().unwrap());
            } else if line.starts_with("COMPACT ") {
                compacts += 1;
                if compacts >= 15 + round * 5 {
                    std::thread::sleep(Duration::from_micros(delay_us));
                    child.kill().unwrap(); // SIGKILL
                    break;
                }
            }
        }
        child.wait().unwrap();
        // Lines the child wrote before dying still count as acknowledged.
        for line in lines.map_while(Result::ok) {
            if let Some(t) = line.strip_prefix("ACK ") {
                acked.push(t.trim().parse().unwrap());
            }
        }
        next = acked.iter().max().map(|m| m + 1).unwrap_or(0) + 1;

        let store = LosslessStore::open(&db).unwrap();
        let doc = store.doctor().await.unwrap();
        assert!(doc.ok, "round {round}: {:#?}", doc.issues);
        assert!(doc.status.summaries > 0, "the child did compact");
        for t in &acked {
            let q = GrepQuery {
                target: GrepTarget::Messages,
                ..GrepQuery::new(format!("nd{t}x0"), Scope::All)
            };
            let g = store.grep(q).await.unwrap();
            assert_eq!(
                g.hits.len(),
                1,
                "acknowledged turn {t} missing after kill in round {round}"
            );
        }
        store.close();
    }
    assert!(acked.len() > 40);
}
