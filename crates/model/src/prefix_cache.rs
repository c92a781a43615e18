//! The prompt cache a provider keeps, modelled offline under the provider's documented rules,
//! so tests, benches and the gateway can measure whether a context engine keeps it warm.
//!
//! Providers serve the unchanged front of a prompt from a cache and report it in the usage
//! (OpenAI `usage.prompt_tokens_details.cached_tokens`, Anthropic `cache_read_input_tokens` and
//! `cache_creation_input_tokens`). [`PrefixCache`] computes the same figures for a sequence of
//! requests under one of two rules ([`CacheRule`]):
//!
//! - **OpenAI** ([`CacheRule::openai`]): caching is automatic for prompts of at least 1,024
//!   tokens; a request reads the longest prefix it shares with an earlier prompt still in the
//!   cache, counted in 128-token increments (so 0, or 1,024 and up); a cached prompt is dropped
//!   after 5 to 10 minutes without use (the model takes 5). Requests are routed by
//!   `prompt_cache_key`, which is what the model's session stands for.
//! - **Anthropic** ([`CacheRule::anthropic`]): only explicit `cache_control` breakpoints write
//!   the prefix ending at them (at most 4 per request, and only a prefix of at least the model's
//!   minimum cacheable length: 1,024 tokens for Sonnet and Opus 4.1 and earlier); a request reads
//!   the longest previously written prefix ending at one of its breakpoints or at one of the 20
//!   block boundaries before each (the documented lookback); an entry lives 5 minutes, refreshed
//!   each time it is read. What it writes past what it read is its `cache_creation` figure.
//!
//! A request is a list of [`Block`]s: one per message for OpenAI (its JSON), one per content
//! block for Anthropic (tools, then system, then each message's blocks), built from the request
//! body the provider receives by [`openai_blocks`] and [`anthropic_blocks`]. Tokens are real
//! o200k counts of each block's text (`clawctx_tokens`, the one estimator); inside the first
//! block that differs from an earlier request, the shared part counts the tokens of the common
//! text less one (its last token may be cut). Entries are kept per session (a provider's cache is
//! wider, but a conversation's prefixes are its own). The figure compares engines under each
//! provider's rules; it bills no one.
//!
//! A *cache break* is a request that shares less than half of the previous request of its
//! session (in tokens, whatever the rule): the front of the prompt changed, so most of it is
//! paid for again (a request that only drops the previous turn's per-turn tail, e.g. a recalled
//! block before the prompt, is not a break).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde_json::Value;

/// OpenAI and Anthropic (Sonnet, Opus 4.1 and earlier): the shortest prefix cached.
pub const MIN_CACHED_TOKENS: u64 = 1_024;
/// OpenAI: cache hits are counted in increments of this many tokens.
pub const OPENAI_INCREMENT: u64 = 128;
/// OpenAI: a cached prompt is dropped after this long without use (5 to 10 minutes documented;
/// the model takes the shorter).
pub const OPENAI_IDLE_MS: i64 = 5 * 60_000;
/// Anthropic: an entry lives this long after it was written or last read.
pub const ANTHROPIC_TTL_MS: i64 = 5 * 60_000;
/// Anthropic: block boundaries before a breakpoint checked for an earlier entry.
pub const ANTHROPIC_LOOKBACK_BLOCKS: usize = 20;
/// Anthropic: breakpoints a request may carry.
pub const ANTHROPIC_MAX_BREAKPOINTS: usize = 4;
/// Earlier prompts of one session kept at most (OpenAI rule), least recently used dropped
/// first; with turns seconds apart, far more than the idle expiry leaves.
pub const KEEP_REQUESTS: usize = 64;

/// How a provider caches (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheRule {
    /// Automatic prefix caching (OpenAI).
    OpenAi {
        /// Shortest prompt (and prefix) cached.
        min_tokens: u64,
        /// Cached tokens are a multiple of this.
        increment: u64,
        /// A prompt unused this long is dropped (ms).
        idle_ms: i64,
    },
    /// Caching at explicit breakpoints (Anthropic).
    Anthropic {
        /// Shortest prefix a breakpoint writes.
        min_tokens: u64,
        /// An entry unused this long is dropped (ms); a read refreshes it.
        ttl_ms: i64,
        /// Block boundaries before a breakpoint checked for an entry.
        lookback_blocks: usize,
        /// Breakpoints honoured per request (the first ones).
        max_breakpoints: usize,
    },
}

impl CacheRule {
    /// OpenAI's documented rule.
    pub const fn openai() -> Self {
        CacheRule::OpenAi {
            min_tokens: MIN_CACHED_TOKENS,
            increment: OPENAI_INCREMENT,
            idle_ms: OPENAI_IDLE_MS,
        }
    }

    /// Anthropic's documented rule, for a model whose minimum cacheable length is 1,024 tokens.
    pub const fn anthropic() -> Self {
        CacheRule::Anthropic {
            min_tokens: MIN_CACHED_TOKENS,
            ttl_ms: ANTHROPIC_TTL_MS,
            lookback_blocks: ANTHROPIC_LOOKBACK_BLOCKS,
            max_breakpoints: ANTHROPIC_MAX_BREAKPOINTS,
        }
    }

    /// `openai` or `anthropic`.
    pub fn name(&self) -> &'static str {
        match self {
            CacheRule::OpenAi { .. } => "openai",
            CacheRule::Anthropic { .. } => "anthropic",
        }
    }
}

/// One block of a request as the cache sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// Its text (what is compared and counted).
    pub text: String,
    /// Whether it carries a cache breakpoint (Anthropic's `cache_control`).
    pub breakpoint: bool,
}

impl Block {
    /// A block without a breakpoint.
    pub fn new(text: impl Into<String>) -> Self {
        Block {
            text: text.into(),
            breakpoint: false,
        }
    }

    /// A block carrying a breakpoint.
    pub fn breakpoint(text: impl Into<String>) -> Self {
        Block {
            text: text.into(),
            breakpoint: true,
        }
    }
}

/// The cache figures of one request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheUsage {
    /// Tokens of the whole request.
    pub prompt_tokens: u64,
    /// Tokens served from the cache.
    pub cached_tokens: u64,
    /// Tokens written to the cache beyond what was read (Anthropic's `cache_creation`; 0 under
    /// the OpenAI rule, which bills no write).
    pub written_tokens: u64,
    /// Whether it shares less than half of the session's previous request.
    pub broke: bool,
}

/// Totals over the requests seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheTotals {
    /// Requests seen (the first of each session included).
    pub requests: u64,
    /// Requests after the first of their session (those that could hit the cache).
    pub follow_ups: u64,
    /// Prompt tokens of the follow-ups.
    pub prompt_tokens: u64,
    /// Cached tokens of the follow-ups.
    pub cached_tokens: u64,
    /// Tokens the follow-ups wrote to the cache.
    pub written_tokens: u64,
    /// Follow-ups that broke the cache.
    pub breaks: u64,
}

impl CacheTotals {
    /// Cached share of the follow-ups' prompt tokens (0 when there were none).
    pub fn cached_share(&self) -> f64 {
        if self.prompt_tokens == 0 {
            return 0.0;
        }
        self.cached_tokens as f64 / self.prompt_tokens as f64
    }

    /// Cache breaks per 100 follow-up requests.
    pub fn breaks_per_100(&self) -> f64 {
        if self.follow_ups == 0 {
            return 0.0;
        }
        self.breaks as f64 * 100.0 / self.follow_ups as f64
    }
}

/// A block's text and tokens, shared by every request of the session that holds it.
#[derive(Debug)]
struct Interned {
    text: Arc<str>,
    tokens: u64,
}

/// An earlier prompt (OpenAI rule).
#[derive(Debug)]
struct Entry {
    blocks: Vec<u64>,
    last_used_ms: i64,
}

#[derive(Debug, Default)]
struct Session {
    blocks: HashMap<u64, Interned>,
    /// OpenAI rule: earlier prompts.
    prompts: Vec<Entry>,
    /// Anthropic rule: written prefixes (chained hash of their blocks) and their last use.
    prefixes: HashMap<u64, i64>,
    /// The previous request's blocks and tokens (for breaks).
    previous: Option<(Vec<u64>, u64)>,
}

/// The provider-side prompt cache (see the module docs).
#[derive(Debug)]
pub struct PrefixCache {
    rule: CacheRule,
    sessions: HashMap<String, Session>,
    totals: CacheTotals,
}

impl Default for PrefixCache {
    fn default() -> Self {
        Self::new()
    }
}

/// The serialized form of a request: `parts` (one per message) joined by `\n`.
pub fn serialize_parts<S: AsRef<str>>(parts: &[S]) -> String {
    let mut out = String::new();
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(p.as_ref());
    }
    out
}

fn hash_text(text: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

fn chain(prev: u64, block: u64) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (prev, block).hash(&mut h);
    h.finish()
}

/// Tokens of the text two blocks start with: their common text, cut at a character boundary,
/// less its last token (which the rest of the block may tokenize differently).
fn partial_tokens(a: &str, b: &str) -> u64 {
    let mut n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    while n > 0 && !a.is_char_boundary(n) {
        n -= 1;
    }
    clawctx_tokens::text_tokens(&a[..n]).saturating_sub(1)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Session {
    fn intern(&mut self, block: &Block) -> u64 {
        let h = hash_text(&block.text);
        self.blocks.entry(h).or_insert_with(|| Interned {
            text: Arc::from(block.text.as_str()),
            tokens: clawctx_tokens::text_tokens(&block.text),
        });
        h
    }

    fn tokens(&self, h: u64) -> u64 {
        self.blocks.get(&h).map_or(0, |b| b.tokens)
    }

    /// Tokens of the longest prefix `request` shares with `earlier`.
    fn shared(&self, request: &[u64], earlier: &[u64]) -> u64 {
        let mut tokens = 0;
        for (a, b) in request.iter().zip(earlier) {
            if a == b {
                tokens += self.tokens(*a);
                continue;
            }
            if let (Some(x), Some(y)) = (self.blocks.get(a), self.blocks.get(b)) {
                tokens += partial_tokens(&x.text, &y.text);
            }
            break;
        }
        tokens
    }

    /// Drops interned blocks no kept prompt and not the previous request refer to.
    fn prune(&mut self, current: &[u64]) {
        let referenced: usize = self.prompts.iter().map(|e| e.blocks.len()).sum::<usize>()
            + self.previous.as_ref().map_or(0, |p| p.0.len())
            + current.len();
        if self.blocks.len() <= 2 * referenced + 64 {
            return;
        }
        let mut keep: std::collections::HashSet<u64> = current.iter().copied().collect();
        keep.extend(self.prompts.iter().flat_map(|e| e.blocks.iter().copied()));
        if let Some((p, _)) = &self.previous {
            keep.extend(p.iter().copied());
        }
        self.blocks.retain(|h, _| keep.contains(h));
    }
}

impl PrefixCache {
    /// An empty cache under OpenAI's rule.
    pub fn new() -> Self {
        Self::with_rule(CacheRule::openai())
    }

    /// An empty cache under `rule`.
    pub fn with_rule(rule: CacheRule) -> Self {
        PrefixCache {
            rule,
            sessions: HashMap::new(),
            totals: CacheTotals::default(),
        }
    }

    /// The rule it applies.
    pub fn rule(&self) -> CacheRule {
        self.rule
    }

    /// Records a request of `session` made now whose messages serialize to `parts` (one block
    /// each, no breakpoints) and answers its cache figures.
    pub fn observe<S: AsRef<str>>(&mut self, session: &str, parts: &[S]) -> CacheUsage {
        let blocks: Vec<Block> = parts.iter().map(|p| Block::new(p.as_ref())).collect();
        self.observe_at(session, now_ms(), &blocks)
    }

    /// Records a request of `session` made at `at_ms` (epoch ms; any clock that only moves
    /// forward) and answers its cache figures.
    pub fn observe_at(&mut self, session: &str, at_ms: i64, blocks: &[Block]) -> CacheUsage {
        let rule = self.rule;
        let s = self.sessions.entry(session.to_owned()).or_default();
        let hashes: Vec<u64> = blocks.iter().map(|b| s.intern(b)).collect();
        let ends: Vec<u64> = hashes
            .iter()
            .scan(0u64, |acc, h| {
                *acc += s.tokens(*h);
                Some(*acc)
            })
            .collect();
        let prompt_tokens = ends.last().copied().unwrap_or(0);
        let (cached_tokens, written_tokens) = match rule {
            CacheRule::OpenAi {
                min_tokens,
                increment,
                idle_ms,
            } => {
                s.prompts.retain(|e| at_ms - e.last_used_ms <= idle_ms);
                let best = s
                    .prompts
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (s.shared(&hashes, &e.blocks), i))
                    .max();
                let cached = match best {
                    Some((shared, i)) if shared >= min_tokens => {
                        s.prompts[i].last_used_ms = at_ms;
                        shared / increment.max(1) * increment.max(1)
                    }
                    _ => 0,
                };
                if prompt_tokens >= min_tokens {
                    match s.prompts.iter_mut().find(|e| e.blocks == hashes) {
                        Some(e) => e.last_used_ms = at_ms,
                        None => s.prompts.push(Entry {
                            blocks: hashes.clone(),
                            last_used_ms: at_ms,
                        }),
                    }
                    if s.prompts.len() > KEEP_REQUESTS {
                        s.prompts.sort_by_key(|e| std::cmp::Reverse(e.last_used_ms));
                        s.prompts.truncate(KEEP_REQUESTS);
                    }
                }
                (cached, 0)
            }
            CacheRule::Anthropic {
                min_tokens,
                ttl_ms,
                lookback_blocks,
                max_breakpoints,
            } => {
                s.prefixes.retain(|_, last| at_ms - *last <= ttl_ms);
                let prefix: Vec<u64> = hashes
                    .iter()
                    .scan(0u64, |acc, h| {
                        *acc = chain(*acc, *h);
                        Some(*acc)
                    })
                    .collect();
                let breakpoints: Vec<usize> = blocks
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| b.breakpoint)
                    .map(|(i, _)| i)
                    .take(max_breakpoints)
                    .collect();
                let mut read: Option<usize> = None;
                for &j in &breakpoints {
                    let from = (j + 1).saturating_sub(lookback_blocks.max(1));
                    if let Some(i) = (from..=j)
                        .rev()
                        .find(|i| s.prefixes.contains_key(&prefix[*i]))
                    {
                        if read.is_none_or(|r| i > r) {
                            read = Some(i);
                        }
                    }
                }
                let cached = read.map_or(0, |i| ends[i]);
                if let Some(i) = read {
                    s.prefixes.insert(prefix[i], at_ms);
                }
                let mut written_to = cached;
                for &j in &breakpoints {
                    if ends[j] >= min_tokens {
                        s.prefixes.insert(prefix[j], at_ms);
                        written_to = written_to.max(ends[j]);
                    }
                }
                (cached, written_to - cached)
            }
        };
        let (broke, follow_up) = match &s.previous {
            Some((prev, prev_tokens)) => (s.shared(&hashes, prev) * 2 < *prev_tokens, true),
            None => (false, false),
        };
        s.previous = Some((hashes.clone(), prompt_tokens));
        s.prune(&hashes);
        self.totals.requests += 1;
        if follow_up {
            self.totals.follow_ups += 1;
            self.totals.prompt_tokens += prompt_tokens;
            self.totals.cached_tokens += cached_tokens;
            self.totals.written_tokens += written_tokens;
            self.totals.breaks += u64::from(broke);
        }
        CacheUsage {
            prompt_tokens,
            cached_tokens,
            written_tokens,
            broke,
        }
    }

    /// Forgets sessions that hold nothing the cache could still serve at `at_ms`, so a
    /// long-lived process keeps only the sessions of the last minutes.
    pub fn forget_idle(&mut self, at_ms: i64) {
        let rule = self.rule;
        self.sessions.retain(|_, s| match rule {
            CacheRule::OpenAi { idle_ms, .. } => {
                s.prompts.iter().any(|e| at_ms - e.last_used_ms <= idle_ms)
            }
            CacheRule::Anthropic { ttl_ms, .. } => {
                s.prefixes.values().any(|last| at_ms - *last <= ttl_ms)
            }
        });
    }

    /// Totals so far.
    pub fn totals(&self) -> CacheTotals {
        self.totals
    }
}

/// Both rules over the requests clawctx's own clients would send: each [`CompletionRequest`]
/// is turned into the OpenAI body ([`crate::OpenAiProvider::request_body`]) and the Anthropic
/// body ([`crate::AnthropicProvider::request_body`], with its breakpoints), and each body goes
/// through the cache of its rule. What `clawctx bench` and the gateway's `/metrics` report.
#[derive(Debug)]
pub struct RequestCaches {
    openai: PrefixCache,
    anthropic: PrefixCache,
    openai_client: crate::OpenAiProvider,
    anthropic_client: crate::AnthropicProvider,
}

impl RequestCaches {
    /// Empty caches (the clients are built only to convert requests; they never connect).
    pub fn new() -> Result<Self, crate::ModelError> {
        let settings = crate::HttpSettings::default();
        Ok(RequestCaches {
            openai: PrefixCache::with_rule(CacheRule::openai()),
            anthropic: PrefixCache::with_rule(CacheRule::anthropic()),
            openai_client: crate::OpenAiProvider::new(
                "cache-model",
                "http://127.0.0.1:9",
                None,
                settings.clone(),
            )?,
            anthropic_client: crate::AnthropicProvider::new(
                "cache-model",
                "http://127.0.0.1:9",
                None,
                settings,
            )?,
        })
    }

    /// Records `request` of `session` made at `at_ms`; answers its figures under OpenAI's rule
    /// and under Anthropic's.
    pub fn observe(
        &mut self,
        session: &str,
        at_ms: i64,
        request: &crate::CompletionRequest,
    ) -> (CacheUsage, CacheUsage) {
        let openai = openai_blocks(&self.openai_client.request_body(request, false));
        let anthropic = anthropic_blocks(&self.anthropic_client.request_body(request, false));
        (
            self.openai.observe_at(session, at_ms, &openai),
            self.anthropic.observe_at(session, at_ms, &anthropic),
        )
    }

    /// Totals under OpenAI's rule and under Anthropic's.
    pub fn totals(&self) -> (CacheTotals, CacheTotals) {
        (self.openai.totals(), self.anthropic.totals())
    }

    /// Forgets sessions that hold nothing either cache could still serve at `at_ms`.
    pub fn forget_idle(&mut self, at_ms: i64) {
        self.openai.forget_idle(at_ms);
        self.anthropic.forget_idle(at_ms);
    }
}

/// The blocks of an OpenAI Chat Completions request body: the tools (one block, when there
/// are any), then each message's JSON.
pub fn openai_blocks(body: &Value) -> Vec<Block> {
    let mut out = Vec::new();
    if let Some(tools) = body
        .get("tools")
        .and_then(Value::as_array)
        .filter(|t| !t.is_empty())
    {
        out.push(Block::new(Value::Array(tools.clone()).to_string()));
    }
    for m in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        out.push(Block::new(m.to_string()));
    }
    out
}

/// A content block's JSON without its `cache_control` (a marker moved elsewhere leaves the
/// prefix the same), and whether it had one.
fn strip_marker(block: &Value) -> (String, bool) {
    match block {
        Value::Object(o) if o.contains_key("cache_control") => {
            let mut o = o.clone();
            o.remove("cache_control");
            (Value::Object(o).to_string(), true)
        }
        other => (other.to_string(), false),
    }
}

/// The blocks of an Anthropic Messages request body, in the order Anthropic caches them: each
/// tool, the system prompt's blocks (a string is one block), then each message's content blocks
/// (the first of a message carries its role). A block with `cache_control` is a breakpoint.
pub fn anthropic_blocks(body: &Value) -> Vec<Block> {
    let mut out = Vec::new();
    for tool in body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let (text, marked) = strip_marker(tool);
        out.push(Block {
            text,
            breakpoint: marked,
        });
    }
    match body.get("system") {
        Some(Value::String(s)) if !s.is_empty() => out.push(Block::new(s.clone())),
        Some(Value::Array(blocks)) => {
            for b in blocks {
                let (text, marked) = strip_marker(b);
                out.push(Block {
                    text,
                    breakpoint: marked,
                });
            }
        }
        _ => {}
    }
    for m in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        let blocks: Vec<(String, bool)> = match m.get("content") {
            Some(Value::String(s)) => vec![(Value::String(s.clone()).to_string(), false)],
            Some(Value::Array(bs)) => bs.iter().map(strip_marker).collect(),
            _ => Vec::new(),
        };
        for (i, (text, marked)) in blocks.into_iter().enumerate() {
            let text = if i == 0 {
                format!("{role}: {text}")
            } else {
                text
            };
            out.push(Block {
                text,
                breakpoint: marked,
            });
        }
    }
    out
}

/// The session a request body belongs to, for the cache: its `prompt_cache_key` (OpenAI),
/// else its `user` (OpenAI) or `metadata.user_id` (Anthropic), else the content of its first
/// non-system message, breakpoints left out (a conversation's opening message identifies it
/// until that message leaves the context, which is a cache break anyway).
pub fn session_of(body: &Value) -> String {
    for key in ["/prompt_cache_key", "/user", "/metadata/user_id"] {
        if let Some(k) = body.pointer(key).and_then(Value::as_str) {
            return k.to_owned();
        }
    }
    body.get("messages")
        .and_then(Value::as_array)
        .and_then(|ms| {
            ms.iter()
                .find(|m| m.get("role").and_then(Value::as_str) != Some("system"))
        })
        .map(|m| match m.get("content") {
            Some(Value::Array(blocks)) => blocks.iter().map(|b| strip_marker(b).0).collect(),
            Some(other) => other.to_string(),
            None => String::new(),
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block of about `n` tokens ("w0 w1 ..." costs about two tokens a word).
    fn text(tag: &str, n: usize) -> String {
        let mut s = String::new();
        while clawctx_tokens::text_tokens(&s) < n as u64 {
            for i in 0..10 {
                s.push_str(&format!("{tag}{i} "));
            }
        }
        s
    }

    #[test]
    fn openai_caches_the_longest_shared_prefix_in_128_token_steps_from_1024() {
        let mut c = PrefixCache::new();
        let sys = Block::new(text("system", 1_100));
        let a = Block::new(text("alpha", 1_500));
        let first = c.observe_at("s", 0, &[sys.clone(), a.clone()]);
        assert_eq!((first.cached_tokens, first.broke), (0, false));
        let second = c.observe_at("s", 1_000, &[sys.clone(), a.clone(), Block::new("more")]);
        let shared = first.prompt_tokens;
        assert_eq!(
            second.cached_tokens,
            shared / 128 * 128,
            "{first:?} {second:?}"
        );
        assert!(second.cached_tokens >= 1_024 && !second.broke);
        // Another session shares nothing.
        assert_eq!(c.observe_at("t", 1_000, &[sys.clone()]).cached_tokens, 0);
        // The front changed after the system prompt: only it is shared, a break.
        let third = c.observe_at("s", 2_000, &[sys.clone(), Block::new(text("beta", 400))]);
        assert!(third.broke);
        assert_eq!(third.cached_tokens % 128, 0);
        assert!(third.cached_tokens >= 1_024 && third.cached_tokens < first.prompt_tokens);
        let t = c.totals();
        assert_eq!((t.requests, t.follow_ups, t.breaks), (4, 2, 1));
    }

    #[test]
    fn openai_caches_nothing_under_1024_tokens() {
        let mut c = PrefixCache::new();
        let small = [Block::new(text("small", 600))];
        c.observe_at("s", 0, &small);
        assert_eq!(c.observe_at("s", 10, &small).cached_tokens, 0);
    }

    #[test]
    fn openai_entries_expire_when_idle_and_a_hit_keeps_them() {
        let mut c = PrefixCache::new();
        let req = [Block::new(text("x", 1_500))];
        c.observe_at("s", 0, &req);
        // Within the idle time: a hit, which refreshes the entry.
        assert!(c.observe_at("s", 4 * 60_000, &req).cached_tokens > 0);
        assert!(c.observe_at("s", 8 * 60_000, &req).cached_tokens > 0);
        // Idle for longer: gone.
        assert_eq!(c.observe_at("s", 14 * 60_000, &req).cached_tokens, 0);
    }

    #[test]
    fn anthropic_reads_only_prefixes_written_at_breakpoints() {
        let mut c = PrefixCache::with_rule(CacheRule::anthropic());
        let sys = text("system", 1_200);
        let history = text("history", 500);
        // No breakpoint: nothing is written, nothing read.
        c.observe_at("s", 0, &[Block::new(&sys), Block::new(&history)]);
        let none = c.observe_at("s", 1, &[Block::new(&sys), Block::new(&history)]);
        assert_eq!((none.cached_tokens, none.written_tokens), (0, 0));
        // A breakpoint on the system prompt writes it; the next request reads it.
        let w = c.observe_at("s", 2, &[Block::breakpoint(&sys), Block::new(&history)]);
        assert_eq!(w.cached_tokens, 0);
        let sys_tokens = clawctx_tokens::text_tokens(&sys);
        assert_eq!(w.written_tokens, sys_tokens);
        let r = c.observe_at(
            "s",
            3,
            &[Block::breakpoint(&sys), Block::breakpoint(&history)],
        );
        assert_eq!(r.cached_tokens, sys_tokens);
        assert_eq!(r.written_tokens, r.prompt_tokens - sys_tokens);
        // The history written at its breakpoint is read back through the lookback by a
        // request whose breakpoint is a block later.
        let next = c.observe_at(
            "s",
            4,
            &[
                Block::breakpoint(&sys),
                Block::new(&history),
                Block::breakpoint("a new turn"),
            ],
        );
        assert_eq!(next.cached_tokens, r.prompt_tokens);
    }

    #[test]
    fn anthropic_skips_short_prefixes_and_expires_unread_entries() {
        let mut c = PrefixCache::with_rule(CacheRule::anthropic());
        let short = [Block::breakpoint(text("short", 500))];
        c.observe_at("s", 0, &short);
        let again = c.observe_at("s", 1, &short);
        assert_eq!((again.cached_tokens, again.written_tokens), (0, 0));
        let long = [Block::breakpoint(text("long", 1_500))];
        c.observe_at("s", 0, &long);
        // Read at 4 minutes, which refreshes the entry: still there at 8.
        assert!(c.observe_at("s", 4 * 60_000, &long).cached_tokens > 0);
        assert!(c.observe_at("s", 8 * 60_000, &long).cached_tokens > 0);
        // Unread for more than 5 minutes: written again.
        let late = c.observe_at("s", 14 * 60_000, &long);
        assert_eq!(late.cached_tokens, 0);
        assert_eq!(late.written_tokens, late.prompt_tokens);
    }

    #[test]
    fn anthropic_blocks_strip_markers_and_keep_the_order() {
        let body = serde_json::json!({
            "system": [{"type": "text", "text": "be terse", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "there", "cache_control": {"type": "ephemeral"}}]},
                {"role": "assistant", "content": "hello"}
            ]
        });
        let blocks = anthropic_blocks(&body);
        let marks: Vec<bool> = blocks.iter().map(|b| b.breakpoint).collect();
        assert_eq!(marks, [true, false, true, false]);
        assert!(!blocks.iter().any(|b| b.text.contains("cache_control")));
        assert!(blocks[1].text.starts_with("user: "));
    }
}
