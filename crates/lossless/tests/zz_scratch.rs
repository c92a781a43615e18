#![allow(clippy::unwrap_used, clippy::expect_used)]
#[macro_use]
mod common;
use clawctx_engine::ContextEngine;
use clawctx_lossless::*;
use clawctx_protocol::*;
use clawctx_test_support::mock_model::{CacheTotals, PrefixCache};
use common::*;
const BUDGET: u64 = 8_000;

async fn run(e: &LosslessEngine, turns: usize) -> (CacheTotals, f64) {
    let mut rng = Lcg(29);
    let mut cache = PrefixCache::new();
    let mut history: Vec<AgentMessage> = Vec::new();
    let mut ctx_sum = 0u64;
    for t in 0..turns {
        let ts = 1_700_000_000_000i64 + t as i64 * 60_000;
        let pre = history.len();
        let n = 20 + rng.below(101) as usize;
        let prompt = format!("q{t} {}", words(&mut rng, n));
        history.push(AgentMessage::user(prompt.clone()).with_timestamp(ts));
        let mut p = assemble_params(history.clone(), BUDGET);
        p.prompt = Some(prompt);
        let out = e.assemble(&p, &cx()).await.unwrap();
        let used = clawctx_tokens::messages_tokens(&out.messages);
        ctx_sum += used;
        assert!(used <= BUDGET);
        let add = out.system_prompt_addition.clone().unwrap_or_default();
        let mut parts = vec![add];
        parts.extend(
            out.messages
                .iter()
                .map(|m| serde_json::to_string(m).unwrap()),
        );
        cache.observe("s1", &parts);
        if std::env::var("VERBOSE").is_ok() {
            let summ = out
                .messages
                .iter()
                .filter(|m| serde_json::to_string(m).unwrap().contains("<summary"))
                .count();
            eprintln!(
                "t{t} used {used} msgs {} summaries {summ}",
                out.messages.len()
            );
        }
        let n = 20 + rng.below(101) as usize;
        history.push(
            AgentMessage::assistant(format!("a{t} {}", words(&mut rng, n))).with_timestamp(ts + 1),
        );
        e.after_turn(&after_turn(&history, pre, BUDGET), &cx())
            .await
            .unwrap();
        let m = MaintainParams {
            session_id: "s1".into(),
            session_key: Some(KEY.into()),
            runtime_context: Some(ContextEngineRuntimeContext {
                allow_deferred_compaction_execution: Some(true),
                token_budget: Some(BUDGET),
                ..Default::default()
            }),
            ..Default::default()
        };
        e.maintain(&m, &cx()).await.unwrap();
    }
    (cache.totals(), ctx_sum as f64 / turns as f64)
}

#[tokio::test]
async fn grid() {
    let grid = std::env::var("GRID").unwrap_or_default();
    for spec in grid.split(';').filter(|s| !s.is_empty()) {
        let v: serde_json::Value = serde_json::from_str(spec).unwrap();
        let cfg = LosslessConfig::from_value(&v);
        let dir = tempfile::tempdir().unwrap();
        let e = engine(&dir, cfg);
        let turns: usize = std::env::var("TURNS")
            .ok()
            .and_then(|t| t.parse().ok())
            .unwrap_or(300);
        let (t, avg) = run(&e, turns).await;
        eprintln!(
            "{spec}: cached {:.3} breaks {:.1} avg ctx {avg:.0}",
            t.cached_share(),
            t.breaks_per_100()
        );
    }
}
