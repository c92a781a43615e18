//! The deterministic synthetic workload and the fake summarizer shared by the lossless
//! benchmarks: user 150–450 chars, assistant 300–1,500 chars, every other turn a tool call
//! with a 2–6k-char result; the summarizer keeps the first 10% of its input.

#![allow(dead_code)] // each bench uses part of this module.

/// The allocator the `clawctx` binary ships with (see `crates/cli/src/main.rs`), so the figures
/// are the ones a user of the binary gets.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use async_trait::async_trait;
use clawctx_protocol::*;
use clawctx_summarize::{SummarizeError, Summarizer, Summary, SummaryRequest};

pub const KEY: &str = "agent:main:bench:1";

pub struct Head10;
#[async_trait]
impl Summarizer for Head10 {
    fn name(&self) -> &str {
        "head10"
    }
    async fn summarize(&self, req: SummaryRequest) -> Result<Summary, SummarizeError> {
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

pub struct Lcg(pub u64);
impl Lcg {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

pub const WORDS: &[&str] = &[
    "the",
    "build",
    "failed",
    "because",
    "config",
    "parser",
    "rejected",
    "value",
    "we",
    "fixed",
    "it",
    "by",
    "updating",
    "src/main.rs",
    "and",
    "rerunning",
    "tests",
    "deploy",
    "server",
    "latency",
    "improved",
    "after",
    "cache",
    "change",
    "user",
    "asked",
    "about",
    "migration",
    "schema",
    "version",
    "check",
    "logs",
    "error",
    "timeout",
    "retry",
    "policy",
    "FooBar::baz()",
    "2024-05-01",
    "E0425",
    "api.example.com",
    "v1.2.3",
    "PR#1234",
    "deadbeef42",
];

pub fn text(rng: &mut Lcg, lo: u64, hi: u64) -> String {
    let target = (lo + rng.below(hi - lo)) as usize;
    let mut s = String::with_capacity(target + 16);
    while s.len() < target {
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
    }
    s
}

pub fn workload(n: usize, seed: u64) -> Vec<AgentMessage> {
    let mut rng = Lcg(seed);
    let mut out = Vec::with_capacity(n + 4);
    let mut t = 0i64;
    while out.len() < n {
        let ts = 1_700_000_000_000 + t * 60_000;
        out.push(
            AgentMessage::user(format!("t{t} {}", text(&mut rng, 150, 450))).with_timestamp(ts),
        );
        if t % 2 == 0 {
            let id = format!("call_{t}");
            out.push(
                AgentMessage::tool_call(
                    &id,
                    "read",
                    serde_json::json!({"path": format!("src/m{t}.rs")}),
                )
                .with_timestamp(ts + 1),
            );
            out.push(
                AgentMessage::tool_result(&id, "read", text(&mut rng, 2_000, 6_000))
                    .with_timestamp(ts + 2),
            );
        }
        out.push(AgentMessage::assistant(text(&mut rng, 300, 1_500)).with_timestamp(ts + 3));
        t += 1;
    }
    out.truncate(n);
    out
}

/// Plain chat only (no tool calls): user 150–450 chars, assistant 300–1,500 chars, ~600 bytes a
/// message on average, the size the ingest target was set for.
pub fn workload_plain(n: usize, seed: u64) -> Vec<AgentMessage> {
    let mut rng = Lcg(seed);
    let mut out = Vec::with_capacity(n + 2);
    let mut t = 0i64;
    while out.len() < n {
        let ts = 1_700_000_000_000 + t * 60_000;
        out.push(
            AgentMessage::user(format!("t{t} {}", text(&mut rng, 150, 450))).with_timestamp(ts),
        );
        out.push(AgentMessage::assistant(text(&mut rng, 300, 1_500)).with_timestamp(ts + 3));
        t += 1;
    }
    out.truncate(n);
    out
}

/// CPU nanoseconds each thread of this process has run, by thread name (Linux
/// `/proc/self/task/*/schedstat`; empty elsewhere). Threads of one name are summed.
pub fn thread_cpu() -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for t in tasks.flatten() {
        let p = t.path();
        let name = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        let ns = std::fs::read_to_string(p.join("schedstat"))
            .ok()
            .and_then(|s| {
                s.split_whitespace()
                    .next()
                    .and_then(|x| x.parse::<u64>().ok())
            })
            .unwrap_or(0);
        *out.entry(name.trim().to_owned()).or_default() += ns;
    }
    out
}

/// The CPU time per message each kind of thread spent since `before`, as text (threads that
/// ended in between are not counted: the runtime's threads outlive the measurement).
pub fn cpu_since(before: &std::collections::BTreeMap<String, u64>, n: usize) -> String {
    let after = thread_cpu();
    let mut total = 0.0;
    let mut parts = Vec::new();
    for (name, ns) in &after {
        let d = ns.saturating_sub(before.get(name).copied().unwrap_or(0)) as f64 / 1e3 / n as f64;
        if d >= 0.1 {
            parts.push(format!("{name} {d:.1}"));
            total += d;
        }
    }
    format!("{} (total {total:.1})", parts.join(", "))
}

/// Waits until the store has indexed the messages of every batch ingested so far (it does that
/// between jobs, see `Db::index_deferred`): a timed ingest ends with this, so it pays for all of
/// its full-text indexing.
pub async fn settle(store: &clawctx_lossless::LosslessStore) {
    store
        .call(|db| {
            db.index_deferred();
            Ok(())
        })
        .await
        .expect("the store is open");
}

/// Microseconds per text to insert `texts` into a bare SQLite table (WAL, `synchronous =
/// NORMAL`, as the store), `per_tx` a transaction, with a `detail=none` FTS5 index of tokenizer
/// `fts` when given (external content, or contentless), named `{schema}f`. The floor the store's
/// ingest is compared with: the reference machine did this (external content) in ~11
/// µs per 600-byte message.
pub fn bare_sqlite_in(
    texts: &[String],
    fts: Option<&str>,
    per_tx: usize,
    contentless: bool,
    schema: &str,
) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("bare.db")).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA temp_store = MEMORY;
         CREATE TABLE m(id INTEGER PRIMARY KEY, text TEXT NOT NULL);",
    )
    .unwrap();
    if let Some(tok) = fts {
        conn.execute_batch(&format!(
            "CREATE VIRTUAL TABLE {schema}f USING fts5(text, {}, detail=none, tokenize='{tok}');",
            if contentless {
                "content=''"
            } else {
                "content='m', content_rowid='id'"
            }
        ))
        .unwrap();
    }
    let t = std::time::Instant::now();
    for ch in texts.chunks(per_tx) {
        conn.execute_batch("BEGIN").unwrap();
        for s in ch {
            conn.prepare_cached("INSERT INTO m(text) VALUES(?1)")
                .unwrap()
                .execute([s])
                .unwrap();
            if fts.is_some() {
                let id = conn.last_insert_rowid();
                conn.prepare_cached("INSERT INTO f(rowid, text) VALUES(?1, ?2)")
                    .unwrap()
                    .execute(rusqlite::params![id, s])
                    .unwrap();
            }
        }
        conn.execute_batch("COMMIT").unwrap();
    }
    t.elapsed().as_secs_f64() * 1e6 / texts.len().max(1) as f64
}

/// [`bare_sqlite_in`] on the texts of 10k plain-chat messages (607 bytes each on average),
/// 100 a transaction, external-content `unicode61` index: how fast the machine is right now,
/// in the issue's own terms. Printed next to the ingest figures, which vary with it.
pub fn bare_floor() -> f64 {
    let texts: Vec<String> = workload_plain(10_000, 77)
        .iter()
        .map(AgentMessage::plain_text)
        .collect();
    bare_sqlite_in(
        &texts,
        Some("unicode61 remove_diacritics 2"),
        100,
        false,
        "",
    )
}
