//! Where the ingest time goes: token counting, the message codec, the store's transaction, and
//! bare SQLite (+FTS5 with and without the porter stemmer) on the same texts. Prints figures;
//! it is a measuring aid for BENCHMARKS.md section 7, not a criterion benchmark.
//!
//! `cargo bench -p clawctx-lossless --bench ingest_parts` (`INGEST_PARTS_N`, default 10,000).
//! For a profiler, `INGEST_PARTS_ENCODE_ONLY`, `INGEST_PARTS_TERMS_ONLY`,
//! `INGEST_PARTS_STORE_ONLY` and `INGEST_PARTS_E2E_ONLY` (each a repeat count) run one part
//! alone.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use clawctx_lossless::core::{codec, terms};
use clawctx_lossless::*;
use clawctx_protocol::AgentMessage;

mod common;
use common::*;

fn per_msg(t: Instant, n: usize) -> f64 {
    t.elapsed().as_secs_f64() * 1e6 / n as f64
}

/// The distinct ASCII-lowercased words of `text` (split at ASCII non-alphanumerics), joined by
/// spaces: what a `detail=none` index needs.
fn distinct_words(text: &str) -> String {
    let mut seen = std::collections::HashSet::new();
    let mut out = String::with_capacity(text.len() / 2);
    for w in text.split(|c: char| c.is_ascii() && !c.is_ascii_alphanumeric()) {
        if w.is_empty() {
            continue;
        }
        let w = w.to_ascii_lowercase();
        if seen.insert(w.clone()) {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(&w);
        }
    }
    out
}

fn bare_sqlite(texts: &[String], fts: Option<&str>) -> f64 {
    bare_sqlite_with(texts, fts, 100, false)
}

fn bare_sqlite_with(texts: &[String], fts: Option<&str>, per_tx: usize, contentless: bool) -> f64 {
    bare_sqlite_in(texts, fts, per_tx, contentless, "")
}

/// Ingests `msgs` through a fresh engine at `path` in batches of 100 (cloned per call, as a
/// host hands them over), waits for the indexing they cause, and prints the time and CPU per
/// message under `label`.
fn end_to_end(
    rt: &tokio::runtime::Runtime,
    path: &std::path::Path,
    msgs: &[AgentMessage],
    label: &str,
) -> LosslessEngine {
    let n = msgs.len();
    let engine = LosslessEngine::open(path, LosslessConfig::default()).unwrap();
    let cx = clawctx_engine::CallContext::none();
    let cpu = thread_cpu();
    let t = Instant::now();
    rt.block_on(async {
        use clawctx_engine::ContextEngine;
        for ch in msgs.chunks(100) {
            let p = clawctx_protocol::IngestBatchParams {
                session_id: "s".into(),
                session_key: Some(KEY.into()),
                messages: ch.to_vec(),
                is_heartbeat: None,
            };
            engine.ingest_batch(&p, &cx).await.unwrap();
        }
        common::settle(engine.store().unwrap()).await;
    });
    println!(
        "engine ingest_batch, {label}, 100/batch: {:6.1} µs/msg",
        per_msg(t, n)
    );
    println!("    CPU µs/msg by thread: {}", cpu_since(&cpu, n));
    engine
}

/// Makes the index terms of every encoded message's text and prints the time per message.
fn time_index_terms(enc: &[codec::Encoded]) {
    let t = Instant::now();
    for e in enc {
        std::hint::black_box(terms::index_terms(&e.text));
    }
    println!(
        "  index terms:                   {:6.1} µs/msg",
        per_msg(t, enc.len())
    );
}

fn main() {
    let n: usize = std::env::var("INGEST_PARTS_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    // A seed no other bench uses, so the token memo starts cold.
    let msgs: Vec<AgentMessage> = workload(n, 4242);
    let bytes: usize = msgs.iter().map(|m| m.plain_text().len()).sum();
    println!(
        "workload: {n} messages, {:.0} text bytes/message",
        bytes as f64 / n as f64
    );

    let t = Instant::now();
    for m in &msgs {
        std::hint::black_box(clawctx_tokens::message_tokens(m));
    }
    println!(
        "token counting (cold):          {:6.1} µs/msg",
        per_msg(t, n)
    );

    if let Some(reps) = std::env::var("INGEST_PARTS_E2E_ONLY")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
    {
        // For a profiler: the engine's batched ingest alone (tool-heavy), `reps` fresh stores.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        for r in 0..reps {
            let fresh: Vec<AgentMessage> = workload(n, 4343 + u64::from(r));
            end_to_end(
                &rt,
                &dir.path().join(format!("e2e{r}.db")),
                &fresh,
                "cold tokens",
            );
        }
        return;
    }

    let t = Instant::now();
    let enc: Vec<_> = msgs.iter().map(|m| codec::encode(m).unwrap()).collect();
    println!(
        "codec::encode (tokens memoized): {:6.1} µs/msg",
        per_msg(t, n)
    );
    if let Some(reps) = std::env::var("INGEST_PARTS_ENCODE_ONLY")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        // For a profiler: encoding alone (tokens memoized), `reps` more times.
        for _ in 0..reps {
            for m in &msgs {
                std::hint::black_box(codec::encode(m).unwrap());
            }
        }
        return;
    }
    if let Some(reps) = std::env::var("INGEST_PARTS_TERMS_ONLY")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        // For a profiler: index terms alone, `reps` times, each pass timed.
        for _ in 0..reps {
            time_index_terms(&enc);
        }
        return;
    }
    // Its parts, each alone over the same messages.
    let t = Instant::now();
    for m in &msgs {
        std::hint::black_box(codec::identity(m).unwrap());
    }
    println!(
        "  identity (skeleton + hash):    {:6.1} µs/msg",
        per_msg(t, n)
    );
    time_index_terms(&enc);
    let t = Instant::now();
    for e in &enc {
        std::hint::black_box(clawctx_lossless::core::pack::pack(&e.text));
    }
    println!(
        "  compression:                   {:6.1} µs/msg",
        per_msg(t, n)
    );
    if std::env::var_os("LEVELS").is_some() {
        let tool_sized: Vec<String> = enc
            .iter()
            .map(|e| e.text.clone())
            .filter(|t| t.len() >= 2048)
            .collect();
        compression_levels(
            "texts of 2 KiB or more",
            &tool_sized,
            &[3, 1, -1, -3, -5, -10],
        );
        let plain: Vec<String> = workload_plain(n, 4444)
            .iter()
            .map(|m| m.plain_text())
            .collect();
        compression_levels("plain chat", &plain, &[1, -1, -3, -5]);
        return;
    }

    let dir = tempfile::tempdir().unwrap();
    let store = LosslessStore::open(dir.path().join("parts.db")).unwrap();
    let key = ConvKey::from_host(Some(KEY), "s");
    let t = Instant::now();
    for ch in enc.chunks(100) {
        let ch = ch.to_vec();
        let key = key.clone();
        store.call_blocking(move |db| db.ingest(&key, &ch)).unwrap();
    }
    store
        .call_blocking(|db| {
            db.index_deferred();
            Ok(())
        })
        .unwrap();
    println!(
        "Db::ingest (pre-encoded, 100/tx): {:6.1} µs/msg",
        per_msg(t, n)
    );
    if let Some(reps) = std::env::var("INGEST_PARTS_STORE_ONLY")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        // For a profiler: the store side alone, `reps` more times into fresh stores.
        for r in 0..reps {
            let store = LosslessStore::open(dir.path().join(format!("only{r}.db"))).unwrap();
            for ch in enc.chunks(100) {
                let ch = ch.to_vec();
                let key = key.clone();
                store.call_blocking(move |db| db.ingest(&key, &ch)).unwrap();
            }
        }
        return;
    }

    // End to end through the engine, tokens cold again (another seed), batches of 100.
    let fresh: Vec<AgentMessage> = workload(n, 4343);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let engine = end_to_end(&rt, &dir.path().join("e2e.db"), &fresh, "cold tokens");
    let cx = clawctx_engine::CallContext::none();
    // The same on plain chat (~600-byte messages, no tool outputs).
    let plain: Vec<AgentMessage> = workload_plain(n, 4444);
    let plain_bytes: usize = plain.iter().map(|m| m.plain_text().len()).sum();
    end_to_end(
        &rt,
        &dir.path().join("plain.db"),
        &plain,
        &format!(
            "plain chat ({:.0} bytes/msg)",
            plain_bytes as f64 / n as f64
        ),
    );
    // Turn by turn, as a host delivers them: two messages per call.
    let turns: Vec<AgentMessage> = workload_plain(n, 4545);
    let te = LosslessEngine::open(dir.path().join("turns.db"), LosslessConfig::default()).unwrap();
    let batches: Vec<clawctx_protocol::IngestBatchParams> = turns
        .chunks(2)
        .map(|ch| clawctx_protocol::IngestBatchParams {
            session_id: "s".into(),
            session_key: Some(KEY.into()),
            messages: ch.to_vec(),
            is_heartbeat: None,
        })
        .collect();
    let mut per_turn = Vec::with_capacity(batches.len());
    let cpu = thread_cpu();
    let t = Instant::now();
    rt.block_on(async {
        use clawctx_engine::ContextEngine;
        for b in &batches {
            let t = Instant::now();
            te.ingest_batch(b, &cx).await.unwrap();
            per_turn.push(t.elapsed().as_secs_f64() * 1e6);
        }
    });
    let total = per_msg(t, n);
    per_turn.sort_by(f64::total_cmp);
    println!(
        "engine ingest_batch, plain chat, 2/batch (a turn): {total:6.1} µs/msg; per turn p50 {:.0} µs, p99 {:.0} µs",
        per_turn[per_turn.len() / 2],
        per_turn[per_turn.len() * 99 / 100]
    );
    println!("    CPU µs/msg by thread: {}", cpu_since(&cpu, n));
    let st = rt.block_on(engine.store().unwrap().status()).unwrap();
    let raw: usize = fresh.iter().map(|m| m.plain_text().len()).sum();
    println!(
        "  database {:.2}x the raw text bytes",
        st.db_bytes as f64 / raw as f64
    );

    // Assembly over the store just built (nothing compacted: the walk stops at the budget).
    let mut tail = fresh[fresh.len() - 4..].to_vec();
    tail.push(AgentMessage::user("next").with_timestamp(i64::MAX / 2));
    let ap = clawctx_protocol::AssembleParams {
        session_id: "s".into(),
        session_key: Some(KEY.into()),
        messages: tail,
        token_budget: Some(128_000),
        ..Default::default()
    };
    let reps = 100;
    let t = Instant::now();
    let mut kept = 0;
    for _ in 0..reps {
        use clawctx_engine::ContextEngine;
        kept = rt
            .block_on(engine.assemble(&ap, &cx))
            .unwrap()
            .messages
            .len();
    }
    println!(
        "assemble 128k over {n} messages ({kept} kept): {:6.0} µs",
        t.elapsed().as_secs_f64() * 1e6 / reps as f64
    );

    if std::env::var_os("INGEST_PARTS_BARE").is_none() {
        println!("(set INGEST_PARTS_BARE=1 for the bare SQLite comparisons)");
        return;
    }
    let texts: Vec<String> = enc.iter().map(|e| e.text.clone()).collect();
    println!(
        "bare insert, no FTS:             {:6.1} µs/msg",
        bare_sqlite(&texts, None)
    );
    println!(
        "bare insert + FTS5 unicode61:    {:6.1} µs/msg",
        bare_sqlite(&texts, Some("unicode61 remove_diacritics 2"))
    );
    println!(
        "bare insert + FTS5 porter:       {:6.1} µs/msg",
        bare_sqlite(&texts, Some("porter unicode61 remove_diacritics 2"))
    );
    println!(
        "bare insert + FTS5 porter, 1000/tx: {:6.1} µs/msg",
        bare_sqlite_with(
            &texts,
            Some("porter unicode61 remove_diacritics 2"),
            1000,
            false
        )
    );
    let distinct: Vec<String> = texts.iter().map(|s| terms::index_terms(s)).collect();
    println!(
        "bare insert, no FTS, 2/tx:       {:6.1} µs/msg",
        bare_sqlite_with(&texts, None, 2, false)
    );
    println!(
        "bare insert + FTS5 ascii on index terms (contentless), 2/tx: {:6.1} µs/msg",
        bare_sqlite_with(&distinct, Some(terms::TOKENIZER), 2, true)
    );
    println!(
        "bare insert + temp FTS5 ascii on index terms, 2/tx: {:6.1} µs/msg",
        bare_sqlite_in(&distinct, Some(terms::TOKENIZER), 2, false, "temp.")
    );
    let t = Instant::now();
    let distinct: Vec<String> = texts.iter().map(|s| distinct_words(s)).collect();
    println!(
        "distinct words in Rust:          {:6.1} µs/msg",
        per_msg(t, n)
    );
    let dbytes: usize = distinct.iter().map(String::len).sum();
    println!("  ({:.0} bytes/msg after dedupe)", dbytes as f64 / n as f64);
    println!(
        "bare insert + FTS5 ascii on index terms (contentless): {:6.1} µs/msg",
        bare_sqlite_with(
            &texts
                .iter()
                .map(|s| terms::index_terms(s))
                .collect::<Vec<_>>(),
            Some(terms::TOKENIZER),
            100,
            true
        )
    );
    println!(
        "bare insert + FTS5 porter on distinct words (contentless): {:6.1} µs/msg",
        bare_sqlite_with(
            &distinct,
            Some("porter unicode61 remove_diacritics 2"),
            100,
            true
        )
    );
    println!(
        "bare insert + FTS5 unicode61 on distinct words (contentless): {:6.1} µs/msg",
        bare_sqlite_with(&distinct, Some("unicode61 remove_diacritics 2"), 100, true)
    );
    println!(
        "bare insert + FTS5 porter (contentless, full text): {:6.1} µs/msg",
        bare_sqlite_with(
            &texts,
            Some("porter unicode61 remove_diacritics 2"),
            100,
            true
        )
    );
}

/// zstd at `levels` and LZ4 on `texts` (`LEVELS=1`): time per text and compressed size over
/// raw, the figures behind `store/pack.rs`'s choice.
fn compression_levels(label: &str, texts: &[String], levels: &[i32]) {
    let raw: usize = texts.iter().map(String::len).sum::<usize>().max(1);
    let report = |name: String, t: Instant, out: usize| {
        println!(
            "{label}, {name}: {:6.1} µs/text, ratio {:.3}",
            per_msg(t, texts.len().max(1)),
            out as f64 / raw as f64
        );
    };
    for &level in levels {
        let mut c = zstd::bulk::Compressor::new(level).unwrap();
        let t = Instant::now();
        let out: usize = texts
            .iter()
            .map(|s| c.compress(s.as_bytes()).unwrap().len())
            .sum();
        report(format!("zstd {level:>3}"), t, out);
    }
    let t = Instant::now();
    let out: usize = texts
        .iter()
        .map(|s| clawctx_lossless::core::pack::pack(s).map_or(s.len(), |f| f.len()))
        .sum();
    report("lz4".into(), t, out);
}
