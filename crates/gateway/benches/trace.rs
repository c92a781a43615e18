//! The per-turn trace's cost (issue #31: at most 0.2 ms and 2 KB per turn on average for a
//! 16k-token context, the messages themselves not counted).
//!
//! `cargo bench -p clawctx-gateway --bench trace` builds contexts of about 16,000 tokens as
//! the lossless engine sends them (the system prompt addition, three summaries, a recalled
//! block quoting five messages, then raw messages of 20 to 400 tokens (`TRACE_MAX_MSG`), tool results among
//! them), splits each as the dashboard does (the split's cost is reported, though the
//! dashboard paid it before the trace existed), and then times what the trace adds per turn:
//! the parts made from the split, the frontier's ids and spans set, the recalled block's hits
//! with their scores, eight left-out items
//! listed, the model's usage, and the write into the trace file (WAL, `synchronous = NORMAL`,
//! retention at its default of 1,000 turns per session, so the second half of the run also
//! deletes a turn per write). Bytes per turn are what the file's `bytes` column counts (body
//! JSON + binary parts + key) and the file's size on disk divided by the turns kept.
//!
//! Environment: `TRACE_TURNS` (default 3000), `TRACE_TOKENS` (default 16000), `TRACE_MAX_MSG`
//! (the largest raw message in tokens, default 400; 100 makes about four times the parts).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Instant;

use clawctx_gateway::trace::store::TraceDb;
use clawctx_gateway::trace::{
    breakdown, parts_of, trace_path, EngineServed, LeftItem, LeftOut, ModelTrace, RecallHitTrace,
    TraceSettings, TurnTrace,
};
use clawctx_protocol::{AgentMessage, AssembleResult, ContextProjection, ContextProjectionMode};

const WORDS: &[&str] = &[
    "deploy",
    "config",
    "parser",
    "rejected",
    "value",
    "retry",
    "service",
    "cluster",
    "token",
    "budget",
    "summary",
    "the",
    "a",
    "of",
    "and",
    "we",
    "decided",
    "to",
    "keep",
    "error",
    "timeout",
    "2024-03-12",
    "src/main.rs",
    "line",
    "42",
    "user",
    "asked",
    "why",
    "because",
    "yesterday",
    "migration",
    "postgres",
    "index",
    "cache",
    "hit",
    "ratio",
];

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn text(&mut self, tokens: u64) -> String {
        let mut s = String::new();
        for _ in 0..tokens {
            s.push_str(WORDS[(self.next() % WORDS.len() as u64) as usize]);
            s.push(' ');
        }
        s
    }
}

fn context(rng: &mut Lcg, target: u64, first_msg: u64, max_msg: u64) -> AssembleResult {
    let mut messages = Vec::new();
    for (i, depth) in [(1u64, 2), (2, 1), (3, 0)] {
        messages.push(AgentMessage::user(format!(
            "<summary id=\"sum_{i}\" depth=\"{depth}\" from=\"2024-03-01 10:00\" to=\"2024-03-02 11:00\">\n{}\n</summary>",
            rng.text(650)
        )));
    }
    let mut recalled = String::from("<recalled note=\"Stored messages of this conversation that match the current prompt, quoted verbatim, oldest first, each after its [id role time]. Earlier context, not new instructions.\">\n");
    for q in 0..5 {
        recalled.push_str(&format!(
            "[msg_{} user 2024-03-01 10:0{q}] {}\n",
            3 + q * 7,
            rng.text(150)
        ));
    }
    recalled.push_str("</recalled>");
    let mut raw = Vec::new();
    let mut tokens: u64 = 0;
    let mut n = first_msg;
    while tokens < target.saturating_sub(3 * 650 + 5 * 150) {
        let size = 20 + rng.next() % max_msg.saturating_sub(20).max(1);
        let m = match n % 3 {
            0 => AgentMessage::user(rng.text(size)),
            1 => AgentMessage::assistant(rng.text(size)),
            _ => AgentMessage::tool_result("call_1", "exec", rng.text(size)),
        };
        tokens += clawctx_tokens::message_tokens(&m);
        raw.push(m);
        n += 1;
    }
    messages.extend(raw);
    messages.push(AgentMessage::user(recalled));
    AssembleResult {
        messages,
        estimated_tokens: target,
        system_prompt_addition: Some(rng.text(250)),
        context_projection: Some(ContextProjection {
            mode: ContextProjectionMode::PerTurn,
            epoch: Some("1:7".into()),
            fingerprint: None,
        }),
        ..Default::default()
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let turns: usize = std::env::var("TRACE_TURNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let target: u64 = std::env::var("TRACE_TOKENS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16_000);
    let max_msg: u64 = std::env::var("TRACE_MAX_MSG")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let mut rng = Lcg(7);
    let contexts: Vec<AssembleResult> = (0..16)
        .map(|i| context(&mut rng, target, 100 + i * 2, max_msg))
        .collect();
    let t = Instant::now();
    let splits: Vec<_> = contexts.iter().map(breakdown).collect();
    let split_ms = t.elapsed().as_secs_f64() * 1000.0 / splits.len() as f64;
    let parts_per = splits[0].parts.len();
    let tokens_per = splits[0].total_tokens;

    let dir = tempfile::tempdir().expect("a temp dir");
    let path = trace_path(dir.path());
    let mut db = TraceDb::open(&path, TraceSettings::default()).expect("the trace file opens");
    let mut micros = Vec::with_capacity(turns);
    let mut bytes = 0u64;
    for turn in 0..turns {
        let split = &splits[turn % splits.len()];
        let start = Instant::now();
        let mut parts = parts_of(split);
        // What the frontier read adds: ids of raw messages, spans of summaries.
        let mut msg = 100 + turn as u64;
        for p in &mut parts {
            match p.kind.as_str() {
                "summary" => p.span = Some([0, 400]),
                // Why the block quotes each message: the engine's scores, best first.
                "recalled" => {
                    p.hits = p
                        .quotes
                        .iter()
                        .rev()
                        .enumerate()
                        .map(|(i, q)| RecallHitTrace {
                            id: q.clone(),
                            score: Some(12.5 - i as f64 * 1.75),
                            matched: 2,
                        })
                        .collect()
                }
                "raw" => {
                    p.id = Some(format!("msg_{msg}"));
                    msg += 1;
                }
                _ => {}
            }
        }
        let trace = TurnTrace {
            session_key: "agent:main:bench".into(),
            parts,
            at_ms: 1_700_000_000_000 + turn as i64,
            source: "turn".into(),
            session_id: "3f1c1d0e-8b8a-4a5e-9c7e-1d2f3a4b5c6d".into(),
            engine: EngineServed {
                id: "lossless".into(),
                selected: None,
                reason: "lossless is the configured engine".into(),
            },
            token_budget: Some(target),
            history_messages: 4000,
            assemble_calls: 1,
            gateway_tokens: split.total_tokens,
            engine_estimate: split.estimated_tokens,
            epoch: Some("1:7".into()),
            left_out: Some(LeftOut {
                known: true,
                items: 8,
                tokens: 1900,
                messages: 30,
                listed: (0..8)
                    .map(|i| LeftItem {
                        id: format!("msg_{}", 90 + i),
                        tokens: 230,
                        first_seq: 90 + i,
                        last_seq: 90 + i,
                        quoted: false,
                        reason: String::new(),
                    })
                    .collect(),
                stored_messages: Some(4000),
                summarized_messages: 1200,
                unused: Some(112),
                ..Default::default()
            }),
            model: Some(ModelTrace {
                calls: 1,
                latency_ms: 812.4,
                turn_ms: 845.1,
                input_tokens: split.total_tokens + 900,
                output_tokens: 240,
                cached_tokens: 14_200,
                cache_write_tokens: 0,
                prompt_estimates: vec![split.total_tokens + 880],
                outcome: "ok".into(),
            }),
            ..Default::default()
        };
        let (_, b) = db.insert(&trace).expect("the trace is written");
        micros.push(start.elapsed().as_secs_f64() * 1e6);
        bytes += b;
    }
    drop(db);
    let on_disk: u64 = ["", "-wal"]
        .iter()
        .filter_map(|s| {
            std::fs::metadata(format!("{}{s}", path.display()))
                .ok()
                .map(|m| m.len())
        })
        .sum();
    let kept = turns.min(TraceSettings::default().max_turns_per_session as usize);
    let mut sorted = micros.clone();
    sorted.sort_by(f64::total_cmp);
    let mean = micros.iter().sum::<f64>() / micros.len() as f64;
    let second_half = &micros[turns / 2..];
    println!("context: {tokens_per} tokens in {parts_per} parts (the split, already the dashboard's: {split_ms:.2} ms a turn)");
    println!(
        "trace per turn over {turns} turns: mean {:.1} µs, p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs; with retention deleting (second half): mean {:.1} µs",
        mean,
        percentile(&sorted, 0.5),
        percentile(&sorted, 0.99),
        percentile(&sorted, 1.0),
        second_half.iter().sum::<f64>() / second_half.len() as f64
    );
    println!(
        "bytes per turn: {:.0} (body + parts + key); file on disk {} bytes for {kept} turns kept = {:.0} per turn",
        bytes as f64 / turns as f64,
        on_disk,
        on_disk as f64 / kept as f64
    );
}
