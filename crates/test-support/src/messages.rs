//! Deterministic conversation builders.

use clawctx_protocol::AgentMessage;
use serde_json::json;

/// A tiny deterministic PRNG (xorshift) so generated conversations are reproducible.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
}

const WORDS: &[&str] = &[
    "engine",
    "context",
    "budget",
    "summary",
    "session",
    "ingest",
    "assemble",
    "compact",
    "cargo",
    "build",
    "registry",
    "plugin",
    "fallback",
    "quarantine",
    "token",
    "message",
    "transcript",
    "window",
    "reserve",
    "release",
    "deadline",
    "Alice",
    "Berlin",
    "invoice",
    "database",
    "migration",
    "schema",
    "index",
    "query",
];

/// `n_words` deterministic words, unique per `tag`.
pub fn sentence(rng: &mut Rng, tag: &str, n_words: usize) -> String {
    let mut s = format!("[{tag}]");
    for _ in 0..n_words {
        s.push(' ');
        s.push_str(WORDS[(rng.next() % WORDS.len() as u64) as usize]);
    }
    s
}

/// A conversation of `turns` turns; every `tool_every`-th turn calls a tool (call + result).
/// Every message is unique and timestamped.
pub fn conversation(seed: u64, turns: usize, tool_every: usize) -> Vec<AgentMessage> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    let mut ts = 1_700_000_000_000i64;
    for t in 0..turns {
        ts += 1_000;
        let words = rng.range(20, 60) as usize;
        out.push(
            AgentMessage::user(sentence(&mut rng, &format!("u{t}"), words)).with_timestamp(ts),
        );
        if tool_every > 0 && t % tool_every == tool_every - 1 {
            let id = format!("call_{t}");
            ts += 1;
            out.push(
                AgentMessage::tool_call(
                    &id,
                    "read_file",
                    json!({"path": format!("src/mod_{t}.rs")}),
                )
                .with_timestamp(ts),
            );
            ts += 1;
            let words = rng.range(40, 120) as usize;
            out.push(
                AgentMessage::tool_result(
                    &id,
                    "read_file",
                    sentence(&mut rng, &format!("r{t}"), words),
                )
                .with_timestamp(ts),
            );
        }
        ts += 1;
        let words = rng.range(30, 90) as usize;
        out.push(
            AgentMessage::assistant(sentence(&mut rng, &format!("a{t}"), words)).with_timestamp(ts),
        );
    }
    out
}

/// A user message of roughly `tokens` tokens.
pub fn huge_user_message(tokens: usize) -> AgentMessage {
    let mut s = String::from("HUGE-START ");
    for i in 0..tokens / 2 {
        s.push_str(&format!("w{} ", i % 97));
    }
    s.push_str("HUGE-END");
    AgentMessage::user(s)
}
