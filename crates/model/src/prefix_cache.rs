//! The prompt cache a provider keeps, modelled offline, so tests and benches can measure whether
//! a context engine keeps it warm.
//!
//! Providers cache the longest unchanged prefix of a prompt and report it in the usage
//! (OpenAI `usage.prompt_tokens_details.cached_tokens`, Anthropic `cache_read_input_tokens`).
//! [`PrefixCache`] computes the same figure: a request is its messages serialized (one JSON
//! object per message, the system prompt first, `\n` between them), and its cached tokens are
//! the tokens of the longest byte prefix it shares with an earlier request of the same session.
//! Tokens are estimated as [`BYTES_PER_TOKEN`] bytes each (rounded up for the prompt, down for
//! the cached part), the usual provider-agnostic rule of thumb: the figure compares engines, it
//! bills no one. Only the session's last [`KEEP_REQUESTS`] requests are compared (a provider's
//! cache also forgets).
//!
//! A *cache break* is a request that shares less than half of the previous request of its
//! session: the front of the prompt changed, so most of it is paid for again (a request that
//! only drops the previous turn's per-turn tail, e.g. a recalled block before the prompt, is
//! not a break).

use std::collections::{HashMap, VecDeque};

/// Earlier requests of one session a new request is compared with.
pub const KEEP_REQUESTS: usize = 16;

/// Bytes per estimated token.
pub const BYTES_PER_TOKEN: usize = 4;

/// The cache figures of one request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheUsage {
    /// Estimated tokens of the whole request.
    pub prompt_tokens: u64,
    /// Estimated tokens of its longest prefix shared with an earlier request of the session.
    pub cached_tokens: u64,
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

/// The provider-side prefix cache (see the module docs).
#[derive(Debug, Default)]
pub struct PrefixCache {
    sessions: HashMap<String, VecDeque<String>>,
    totals: CacheTotals,
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

fn common_prefix(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

impl PrefixCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a request of `session` whose messages serialize to `parts` and answers its
    /// cache figures.
    pub fn observe<S: AsRef<str>>(&mut self, session: &str, parts: &[S]) -> CacheUsage {
        let text = serialize_parts(parts);
        let earlier = self.sessions.entry(session.to_owned()).or_default();
        let shared = earlier
            .iter()
            .map(|e| common_prefix(e, &text))
            .max()
            .unwrap_or(0);
        let prompt_tokens = text.len().div_ceil(BYTES_PER_TOKEN) as u64;
        let cached_tokens = (shared / BYTES_PER_TOKEN) as u64;
        let broke = earlier
            .back()
            .is_some_and(|prev| common_prefix(prev, &text) * 2 < prev.len());
        let follow_up = !earlier.is_empty();
        earlier.push_back(text);
        if earlier.len() > KEEP_REQUESTS {
            earlier.pop_front();
        }
        self.totals.requests += 1;
        if follow_up {
            self.totals.follow_ups += 1;
            self.totals.prompt_tokens += prompt_tokens;
            self.totals.cached_tokens += cached_tokens;
            self.totals.breaks += u64::from(broke);
        }
        CacheUsage {
            prompt_tokens,
            cached_tokens,
            broke,
        }
    }

    /// Totals so far.
    pub fn totals(&self) -> CacheTotals {
        self.totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_tokens_are_the_longest_prefix_shared_with_an_earlier_request() {
        let mut c = PrefixCache::new();
        let first = c.observe("s", &["system prompt!", "hello there"]);
        assert_eq!(first.cached_tokens, 0);
        assert!(!first.broke);
        // Same front, one more message: everything before it is cached.
        let second = c.observe("s", &["system prompt!", "hello there", "more"]);
        assert_eq!(second.cached_tokens, 26 / 4);
        assert!(!second.broke);
        // Another session shares nothing.
        assert_eq!(c.observe("t", &["system prompt!"]).cached_tokens, 0);
        // The front changed: only the system prompt (and its newline) is shared: a break.
        let third = c.observe("s", &["system prompt!", "other", "more"]);
        assert_eq!(third.cached_tokens, 15 / 4);
        assert!(third.broke);
        let t = c.totals();
        assert_eq!((t.requests, t.follow_ups, t.breaks), (4, 2, 1));
    }
}
