//! Old (`bpe_openai::o200k_base().count`) vs new (`clawctx_tokens::text_tokens`) counting.
//!
//! ```sh
//! cargo bench -p clawctx-tokens --bench count -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! Each benchmark cycles through a pool of distinct, deterministic texts (so neither counter
//! sees the same input twice in a row, as on the ingest path; vocabulary repeats across texts
//! as it does in real conversations).

#![allow(missing_docs)]

use std::hint::black_box;

use clawctx_protocol::AgentMessage;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

const WORDS: &[&str] = &[
    "the",
    "a",
    "we",
    "it",
    "this",
    "that",
    "should",
    "could",
    "will",
    "after",
    "before",
    "when",
    "because",
    "file",
    "function",
    "error",
    "config",
    "test",
    "build",
    "server",
    "request",
    "response",
    "database",
    "cache",
    "index",
    "value",
    "return",
    "update",
    "deploy",
    "branch",
    "merge",
    "commit",
    "review",
    "latency",
    "throughput",
    "memory",
    "thread",
    "budget",
    "tokens",
    "context",
    "summary",
    "message",
    "session",
    "agent",
    "tool",
    "output",
    "input",
    "parser",
    "don't",
    "it's",
    "we're",
    "they'll",
    "HTTPServer",
    "JSON",
    "README",
    "parseConfig",
    "i",
];
const DIRS: &[&str] = &[
    "src",
    "crates/core/src",
    "docs",
    "tests",
    "web/app",
    "infra/terraform",
];
const EXTS: &[&str] = &["rs", "ts", "md", "toml", "json", "py"];
const NON_ASCII: &[&str] = &[
    "café",
    "naïve",
    "über",
    "señor",
    "déjà",
    "vu",
    "日本語",
    "テキスト",
    "中文",
    "词语",
    "Привет",
    "мир",
    "🙂",
    "🚀",
    "—",
    "“quoted”",
    "Ωmega",
    "straße",
    "ação",
    "ÉCOLE",
];

/// A small deterministic generator (xorshift64*), so runs are comparable.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
}

/// Sentences of words, numbers and paths, ~`target` bytes.
fn english(rng: &mut Rng, target: usize) -> String {
    let mut s = String::new();
    while s.len() < target {
        let n = 5 + rng.below(11);
        for w in 0..n {
            if w > 0 {
                s.push(' ');
            }
            match rng.below(25) {
                0 => s.push_str(&rng.below(99_999).to_string()),
                1 => s.push_str(&format!(
                    "{}/{}_{}.{}",
                    rng.pick(DIRS),
                    rng.pick(WORDS),
                    rng.below(400),
                    rng.pick(EXTS)
                )),
                _ if w == 0 => {
                    let word = rng.pick(WORDS);
                    let mut c = word.chars();
                    if let Some(f) = c.next() {
                        s.extend(f.to_uppercase());
                        s.push_str(c.as_str());
                    }
                }
                _ => s.push_str(rng.pick(WORDS)),
            }
        }
        s.push_str(if rng.below(6) == 0 { "? " } else { ". " });
    }
    s
}

/// JSON objects and log lines, ~`target` bytes.
fn tool_output(rng: &mut Rng, target: usize) -> String {
    let mut s = String::new();
    while s.len() < target {
        match rng.below(3) {
            0 => s.push_str(&format!(
                "{{\"path\": \"{}/{}.{}\", \"line\": {}, \"matches\": [{}, {}], \"ok\": true}}\n",
                rng.pick(DIRS),
                rng.pick(WORDS),
                rng.pick(EXTS),
                rng.below(2_000),
                rng.below(90),
                rng.below(90)
            )),
            1 => s.push_str(&format!(
                "[{:02}:{:02}:{:02}] INFO  {}: {}\n",
                rng.below(24),
                rng.below(60),
                rng.below(60),
                rng.pick(WORDS),
                english(rng, 40).trim_end()
            )),
            _ => s.push_str(&format!(
                "{:>5}  {}\n",
                rng.below(900),
                english(rng, 60).trim_end()
            )),
        }
    }
    s
}

/// Accented, Cyrillic, CJK and emoji words mixed with English, ~`target` bytes.
fn non_ascii(rng: &mut Rng, target: usize) -> String {
    let mut s = String::new();
    while s.len() < target {
        let w = if rng.below(2) == 0 {
            rng.pick(NON_ASCII)
        } else {
            rng.pick(WORDS)
        };
        s.push_str(w);
        s.push(if rng.below(8) == 0 { '\n' } else { ' ' });
    }
    s
}

/// Every string under a `"text"` key (the dialogue turns).
fn collect_turn_texts<'a>(v: &'a serde_json::Value, out: &mut Vec<&'a str>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("text", serde_json::Value::String(s)) => out.push(s),
                    _ => collect_turn_texts(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| collect_turn_texts(v, out)),
        _ => {}
    }
}

fn pool(seed: u64, make: impl Fn(&mut Rng) -> String) -> Vec<String> {
    let mut rng = Rng(seed);
    (0..256).map(|_| make(&mut rng)).collect()
}

fn bench(c: &mut Criterion) {
    let tok = bpe_openai::o200k_base();
    let cases = [
        ("english_1k", pool(1, |r| english(r, 1_050))),
        ("tool_output_4k", pool(2, |r| tool_output(r, 4_000))),
        ("non_ascii_1k", pool(3, |r| non_ascii(r, 1_000))),
    ];
    for (name, texts) in &cases {
        for t in texts {
            assert_eq!(clawctx_tokens::text_tokens(t), tok.count(t.as_str()) as u64);
        }
        let mean = texts.iter().map(String::len).sum::<usize>() / texts.len();
        let mut g = c.benchmark_group(format!("text_tokens/{name}"));
        g.throughput(Throughput::Bytes(mean as u64));
        let mut i = 0;
        g.bench_function("old_bpe_openai_count", |b| {
            b.iter(|| {
                i = (i + 1) % texts.len();
                black_box(tok.count(black_box(texts[i].as_str())))
            })
        });
        let mut i = 0;
        g.bench_function("new_text_tokens", |b| {
            b.iter(|| {
                i = (i + 1) % texts.len();
                black_box(clawctx_tokens::text_tokens(black_box(&texts[i])))
            })
        });
        let mut i = 0;
        g.bench_function("regex_split_only", |b| {
            b.iter(|| {
                i = (i + 1) % texts.len();
                black_box(tok.split(black_box(texts[i].as_str())).count())
            })
        });
        g.finish();
    }

    // Real conversational text with a long vocabulary tail: every LoCoMo dialogue turn, if the
    // data set is present next to the repository.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/locomo/locomo-dev.json");
    match std::fs::read_to_string(&path)
        .ok()
        .and_then(|raw| serde_json::from_str::<serde_json::Value>(&raw).ok())
    {
        Some(doc) => {
            let mut turns = Vec::new();
            collect_turn_texts(&doc, &mut turns);
            let bytes: usize = turns.iter().map(|t| t.len()).sum();
            let mut g = c.benchmark_group(format!("text_tokens/locomo_{}_turns", turns.len()));
            g.throughput(Throughput::Bytes(bytes as u64));
            g.bench_function("old_bpe_openai_count", |b| {
                b.iter(|| {
                    turns
                        .iter()
                        .map(|t| tok.count(black_box(*t)))
                        .sum::<usize>()
                })
            });
            g.bench_function("new_text_tokens", |b| {
                b.iter(|| {
                    turns
                        .iter()
                        .map(|t| clawctx_tokens::text_tokens(black_box(t)))
                        .sum::<u64>()
                })
            });
            g.finish();
        }
        None => println!("skipping text_tokens/locomo: {} not found", path.display()),
    }

    // `message_tokens` on a message never seen before (content hash + count + memo insert, as
    // on the ingest path) and on one seen before (hash + memo hit).
    let texts = &cases[0].1;
    let mut g = c.benchmark_group("message_tokens/english_1k");
    let mut n = 0u64;
    g.bench_function("first_seen", |b| {
        b.iter_batched(
            || {
                n += 1;
                AgentMessage::user(format!("{n} {}", texts[n as usize % texts.len()]))
            },
            |m| black_box(clawctx_tokens::message_tokens(&m)),
            BatchSize::SmallInput,
        )
    });
    let m = AgentMessage::user(texts[0].clone());
    g.bench_function("memo_hit", |b| {
        b.iter(|| black_box(clawctx_tokens::message_tokens(black_box(&m))))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
