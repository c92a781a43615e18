//! The vector half of a hybrid assembly at scale: `VectorCache::search` over the vectors of
//! one conversation of 100,000 messages (384 dimensions, all-MiniLM-L6-v2's), the 40 nearest.
//! The vectors are random: the search compares every one, whatever they say. With the query's
//! embedding (`clawctx bench stores --semantic`) and the lexical assembly at the same size,
//! this is what semantic recall adds to `assemble` (BENCHMARKS.md §17).
//!
//! `cargo bench -p clawctx-lossless --bench vector_search`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)] // criterion_group! generates an undocumented function.

use clawctx_lossless::semantic::cache::{ItemKind, VectorCache, VectorRow};
use clawctx_lossless::semantic::quant;
use criterion::{criterion_group, criterion_main, Criterion};

const DIM: usize = 384;

fn unit(seed: &mut u64) -> Vec<f32> {
    let mut v: Vec<f32> = (0..DIM)
        .map(|_| {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((*seed >> 33) as f32 / (1u64 << 31) as f32) - 0.5
        })
        .collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= n);
    v
}

fn benches(c: &mut Criterion) {
    let mut seed = 1u64;
    for n in [10_000usize, 100_000] {
        let cache = VectorCache::new(DIM);
        let rows = (0..n)
            .map(|i| {
                let (scale, vec) = quant::quantize(&unit(&mut seed));
                VectorRow {
                    vid: i as i64 + 1,
                    kind: ItemKind::Message,
                    item_id: i as i64 + 1,
                    conv_id: 1,
                    tokens: 20,
                    scale,
                    vec,
                }
            })
            .collect();
        cache.extend(rows);
        let query = unit(&mut seed);
        let mut g = c.benchmark_group("vector_search");
        g.sample_size(30);
        g.bench_function(format!("{n}_vectors_top_40"), |b| {
            b.iter(|| cache.search(&[1], &query, 40, 0.35, |_| true))
        });
        g.finish();
    }
}

criterion_group!(vector_search, benches);
criterion_main!(vector_search);
