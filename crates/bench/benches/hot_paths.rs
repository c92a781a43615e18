//! Criterion micro-benchmarks of the hot paths every turn goes through: token counting, the
//! host's history pipeline, legacy's assemble, and lossless ingest/assemble over a store that
//! already holds a few thousand messages. Inputs come from the deterministic workload.
//!
//! `cargo bench -p clawctx-bench --bench hot_paths`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use clawctx_bench::engines::open_engine;
use clawctx_bench::runner::deliver_turn;
use clawctx_bench::summarizer::HeadTenPercent;
use clawctx_bench::workload::{Workload, WorkloadKind, WorkloadSpec};
use clawctx_engine::pipeline::{prepare_history, PipelineOptions};
use clawctx_engine::{CallContext, ContextEngine, LegacyEngine};
use clawctx_protocol::{AgentMessage, AssembleParams};
use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion};

fn messages(kind: WorkloadKind, n: u64) -> Vec<AgentMessage> {
    Workload::new(WorkloadSpec {
        kind,
        messages: n,
        seed: 5,
    })
    .flat_map(|t| t.messages)
    .collect()
}

fn tokens(c: &mut Criterion) {
    let chat = messages(WorkloadKind::Chat, 200);
    let tools = messages(WorkloadKind::Tools, 200);
    let mut g = c.benchmark_group("tokens");
    g.bench_function("message_tokens/chat (200 msgs)", |b| {
        b.iter(|| chat.iter().map(clawctx_tokens::message_tokens).sum::<u64>())
    });
    g.bench_function("message_tokens/tools (200 msgs)", |b| {
        b.iter(|| {
            tools
                .iter()
                .map(clawctx_tokens::message_tokens)
                .sum::<u64>()
        })
    });
    g.finish();
}

fn pipeline_and_legacy(c: &mut Criterion) {
    // About 120k tokens of mixed history: what legacy carries near a 128k budget.
    let history = messages(WorkloadKind::Mixed, 500);
    let mut g = c.benchmark_group("host");
    g.sample_size(20);
    g.bench_function("prepare_history/500 mixed msgs @128k", |b| {
        b.iter_batched(
            || history.clone(),
            |h| {
                prepare_history(
                    h,
                    &PipelineOptions {
                        token_budget: Some(128_000),
                        ..Default::default()
                    },
                )
            },
            BatchSize::LargeInput,
        )
    });
    g.bench_function("prepare_history/500 mixed msgs @32k", |b| {
        b.iter_batched(
            || history.clone(),
            |h| {
                prepare_history(
                    h,
                    &PipelineOptions {
                        token_budget: Some(32_000),
                        ..Default::default()
                    },
                )
            },
            BatchSize::LargeInput,
        )
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let params = AssembleParams {
        session_id: "s".into(),
        messages: history.clone(),
        token_budget: Some(128_000),
        ..Default::default()
    };
    g.bench_function("legacy assemble/500 msgs", |b| {
        b.iter(|| {
            rt.block_on(async {
                black_box(LegacyEngine.assemble(&params, &CallContext::none()).await)
            })
        })
    });
    g.finish();
}

fn lossless(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let key = "agent:bench:hot:1";
    let eut = rt
        .block_on(open_engine(
            "lossless",
            dir.path(),
            Arc::new(HeadTenPercent),
            &serde_json::json!({"minSalientRetention": 0}),
        ))
        .expect("open lossless");
    // Preload 4,000 chat messages at a budget large enough that nothing compacts.
    let turns: Vec<Vec<AgentMessage>> = Workload::new(WorkloadSpec {
        kind: WorkloadKind::Chat,
        messages: 4_000,
        seed: 9,
    })
    .map(|t| t.messages)
    .collect();
    rt.block_on(async {
        for t in &turns {
            deliver_turn(&eut, key, key, t, 10_000_000)
                .await
                .expect("preload");
        }
    });
    let mut extra = Workload::new(WorkloadSpec {
        kind: WorkloadKind::Chat,
        messages: 2_000_000,
        seed: 10,
    });
    let mut g = c.benchmark_group("lossless");
    g.sample_size(30);
    g.measurement_time(Duration::from_secs(5));
    g.bench_function("afterTurn/chat turn into 4k-msg store", |b| {
        b.iter_batched(
            || extra.next().map(|t| t.messages).unwrap_or_default(),
            |t| rt.block_on(deliver_turn(&eut, key, key, &t, 10_000_000)),
            BatchSize::SmallInput,
        )
    });
    for budget in [32_000u64, 128_000] {
        let params = AssembleParams {
            session_id: key.into(),
            session_key: Some(key.into()),
            token_budget: Some(budget),
            ..Default::default()
        };
        g.bench_function(format!("assemble/4k-msg store @{}k", budget / 1000), |b| {
            b.iter(|| {
                rt.block_on(async {
                    black_box(eut.engine.assemble(&params, &CallContext::none()).await)
                })
            })
        });
    }
    g.finish();
}

criterion_group!(benches, tokens, pipeline_and_legacy, lossless);
criterion_main!(benches);
