//! The one token estimator used everywhere in clawctx.
//!
//! Threshold checks, assembly budgets and the final clamp must agree, or an engine can believe
//! a context fits that the next check rejects. So there is exactly one function that turns a
//! message into a token count, [`message_tokens`], and everything calls it (or reads a count it
//! produced earlier and stored: counting sits on the ingest path, so engines compute it once per
//! message and keep it).
//!
//! Text is counted exactly with OpenAI's o200k BPE (the `bpe-openai` crate: vocabularies
//! compiled in, works offline, ~5× faster than tiktoken-rs). Counting is on the ingest path of
//! every engine, so [`text_tokens`] does not call the crate's `count` directly: it splits text
//! with our own byte scanner (`pretokenize`, identical pieces, the crate's regex only around
//! non-ASCII text) and looks piece counts up in a per-thread cache (`count`), 5–10× faster and
//! equal to the crate's count on every input (see `tests/exactness.rs`). Images cost what OpenClaw's runtime
//! charges for them: 4,800 characters, i.e. [`IMAGE_TOKENS`] tokens (contract §7.4). Each
//! message also pays a small framing overhead ([`MESSAGE_OVERHEAD_TOKENS`]) for its role and
//! separators, as chat APIs do.

use std::sync::LazyLock;

use clawctx_protocol::{AgentMessage, Content, ContentBlock};

mod count;
mod pretokenize;

/// Characters OpenClaw charges per image (contract §7.4).
pub const IMAGE_CHARS: u64 = 4_800;
/// Tokens per image: `IMAGE_CHARS / 4`.
pub const IMAGE_TOKENS: u64 = IMAGE_CHARS / 4;
/// Per-message framing overhead (role, separators).
pub const MESSAGE_OVERHEAD_TOKENS: u64 = 4;

/// Exact o200k token count of `text`: always equal to `bpe_openai::o200k_base().count(text)`,
/// computed several times faster (see the `count` and `pretokenize` modules).
pub fn text_tokens(text: &str) -> u64 {
    if text.is_empty() {
        return 0;
    }
    count::count(text) as u64
}

/// Tokens of a content value (text blocks, thinking, tool calls as name + JSON arguments,
/// images at [`IMAGE_TOKENS`]).
pub fn content_tokens(content: &Content) -> u64 {
    match content {
        Content::Text(t) => text_tokens(t),
        Content::Blocks(blocks) => blocks.iter().map(block_tokens).sum(),
    }
}

fn block_tokens(block: &ContentBlock) -> u64 {
    match block {
        ContentBlock::Text(t) => text_tokens(&t.text),
        ContentBlock::Thinking(t) => text_tokens(&t.thinking),
        ContentBlock::Image(_) => IMAGE_TOKENS,
        ContentBlock::ToolCall(c) => {
            let args = match &c.arguments {
                serde_json::Value::String(s) => text_tokens(s),
                other => text_tokens(&other.to_string()),
            };
            text_tokens(&c.name) + args
        }
        ContentBlock::Unknown(m) => match m.get("text").and_then(|v| v.as_str()) {
            Some(t) => text_tokens(t),
            None => text_tokens(&map_json(m)),
        },
    }
}

/// The JSON text of an object, as `Value::Object(m.clone()).to_string()` renders it, without
/// cloning the map.
fn map_json(m: &serde_json::Map<String, serde_json::Value>) -> String {
    // Serializing a map of JSON values to a `String` cannot fail.
    serde_json::to_string(m).unwrap_or_default()
}

/// Tokens one message costs in a prompt. This is the estimator: every budget decision in
/// clawctx is made with it.
///
/// Hosts re-count the same history every turn (threshold checks, the pipeline's budget fit,
/// the final clamp), so counts are memoized by a hash of the message's counted content: hashing
/// (foldhash, ~0.1 µs per KB) is far cheaper than counting. The memo is bounded (sharded, each
/// shard cleared when full) and keyed by the content's hash *and* byte length, so a collision
/// would need both to agree.
pub fn message_tokens(message: &AgentMessage) -> u64 {
    let key = content_key(message);
    if let Some(n) = memo::get(key) {
        return n;
    }
    let n = count_message(message);
    memo::put(key, n);
    n
}

mod memo {
    //! The message-count memo: sharded so concurrent sessions (and the ingest path, which
    //! always misses) do not serialize on one lock.
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex, PoisonError};

    /// Entries kept before the memo is cleared (a few MB), split evenly across the shards;
    /// each shard is cleared when its share is full.
    const CAPACITY: usize = 200_000;
    const SHARDS: usize = 16;

    type Shard = Mutex<HashMap<(u64, u64), u64, foldhash::fast::FixedState>>;

    static MEMO: LazyLock<[Shard; SHARDS]> =
        LazyLock::new(|| std::array::from_fn(|_| Mutex::default()));

    fn shard(key: (u64, u64)) -> &'static Shard {
        // The top bits of the content hash pick the shard (the map hashes the whole key).
        &MEMO[(key.0 >> 60) as usize % SHARDS]
    }

    pub(super) fn get(key: (u64, u64)) -> Option<u64> {
        shard(key)
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .copied()
    }

    pub(super) fn put(key: (u64, u64), n: u64) {
        let mut m = shard(key).lock().unwrap_or_else(PoisonError::into_inner);
        if m.len() >= CAPACITY / SHARDS {
            m.clear();
        }
        m.insert(key, n);
    }
}

/// The seed of the memo's content hash: random per process, so colliding contents cannot be
/// crafted in advance.
static CONTENT_HASH: LazyLock<foldhash::quality::RandomState> = LazyLock::new(Default::default);

/// A hash and the byte length of everything [`count_message`] counts, in order, with the
/// role and block kinds mixed in. foldhash rather than SipHash: this runs on every call,
/// including every first sight of a message on the ingest path, over the whole content.
fn content_key(message: &AgentMessage) -> (u64, u64) {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = CONTENT_HASH.build_hasher();
    let mut len = 0u64;
    let mut feed = |tag: u8, s: &str| {
        tag.hash(&mut h);
        s.hash(&mut h);
        len += s.len() as u64 + 1;
    };
    fn feed_content(feed: &mut dyn FnMut(u8, &str), content: &Content) {
        match content {
            Content::Text(t) => feed(1, t),
            Content::Blocks(blocks) => {
                for b in blocks {
                    match b {
                        ContentBlock::Text(t) => feed(2, &t.text),
                        ContentBlock::Thinking(t) => feed(3, &t.thinking),
                        ContentBlock::Image(_) => feed(4, ""),
                        ContentBlock::ToolCall(c) => {
                            feed(5, &c.name);
                            feed(6, &c.arguments.to_string());
                        }
                        ContentBlock::Unknown(m) => feed(7, &map_json(m)),
                    }
                }
            }
        }
    }
    feed(0, message.role());
    match message {
        AgentMessage::User(m) => feed_content(&mut feed, &m.content),
        AgentMessage::Assistant(m) => feed_content(&mut feed, &m.content),
        AgentMessage::ToolResult(m) => {
            feed(8, &m.tool_name);
            feed_content(&mut feed, &m.content)
        }
        AgentMessage::Custom(m) => feed_content(&mut feed, &m.content),
        AgentMessage::BashExecution(m) => {
            feed(9, &m.command);
            feed(10, &m.output)
        }
        AgentMessage::BranchSummary(m) | AgentMessage::CompactionSummary(m) => feed(11, &m.summary),
        AgentMessage::Other(m) => feed(
            12,
            &m.get("content").map(|v| v.to_string()).unwrap_or_default(),
        ),
    }
    (h.finish(), len)
}

/// The uncached count behind [`message_tokens`].
fn count_message(message: &AgentMessage) -> u64 {
    let body = match message {
        AgentMessage::User(m) => content_tokens(&m.content),
        AgentMessage::Assistant(m) => content_tokens(&m.content),
        AgentMessage::ToolResult(m) => content_tokens(&m.content) + text_tokens(&m.tool_name),
        AgentMessage::Custom(m) => content_tokens(&m.content),
        AgentMessage::BashExecution(m) => text_tokens(&m.command) + text_tokens(&m.output),
        AgentMessage::BranchSummary(m) => {
            text_tokens(&m.summary) + text_tokens(clawctx_protocol::BRANCH_SUMMARY_PREFIX)
        }
        AgentMessage::CompactionSummary(m) => {
            text_tokens(&m.summary) + text_tokens(clawctx_protocol::COMPACTION_SUMMARY_PREFIX)
        }
        AgentMessage::Other(m) => match m.get("content") {
            Some(serde_json::Value::String(s)) => text_tokens(s),
            Some(v) => match serde_json::from_value::<Content>(v.clone()) {
                Ok(c) => content_tokens(&c),
                Err(_) => text_tokens(&v.to_string()),
            },
            None => 0,
        },
    };
    body + MESSAGE_OVERHEAD_TOKENS
}

/// Sum of [`message_tokens`] over `messages`.
pub fn messages_tokens<'a>(messages: impl IntoIterator<Item = &'a AgentMessage>) -> u64 {
    messages.into_iter().map(message_tokens).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clawctx_protocol::{ImageContent, UserMessage};

    #[test]
    fn counts_are_exact_o200k() {
        // "Hello, world!" is 4 tokens in o200k ("Hello", ",", " world", "!").
        assert_eq!(text_tokens("Hello, world!"), 4);
        assert_eq!(text_tokens(""), 0);
    }

    #[test]
    fn images_cost_4800_chars_per_spec_7_4() {
        let msg = AgentMessage::User(UserMessage {
            content: Content::Blocks(vec![ContentBlock::Image(ImageContent {
                data: "aGVsbG8=".into(),
                mime_type: "image/png".into(),
                extra: Default::default(),
            })]),
            ..Default::default()
        });
        assert_eq!(message_tokens(&msg), 1_200 + MESSAGE_OVERHEAD_TOKENS);
    }

    #[test]
    fn memoized_counts_equal_fresh_counts_and_distinguish_roles_and_blocks() {
        let msgs = [
            AgentMessage::user("the same words"),
            AgentMessage::assistant("the same words"),
            AgentMessage::tool_result("c1", "read", "the same words"),
            AgentMessage::tool_call("c1", "read", serde_json::json!({"path": "the same words"})),
        ];
        for m in &msgs {
            let first = message_tokens(m);
            assert_eq!(first, count_message(m));
            assert_eq!(
                message_tokens(m),
                first,
                "a memoized count is the same count"
            );
        }
        let keys: std::collections::HashSet<_> = msgs.iter().map(content_key).collect();
        assert_eq!(
            keys.len(),
            msgs.len(),
            "different roles/blocks never share a memo entry"
        );
    }

    #[test]
    fn tool_calls_count_name_and_arguments() {
        let small = AgentMessage::tool_call("c1", "read", serde_json::json!({"path": "a"}));
        let big = AgentMessage::tool_call(
            "c1",
            "read",
            serde_json::json!({"path": "a/very/long/path/to/some/file.rs"}),
        );
        assert!(message_tokens(&big) > message_tokens(&small));
    }
}

/// The marker inserted where [`truncate_middle`] cut text out.
pub fn truncation_marker(omitted_tokens: u64) -> String {
    format!("\n[... {omitted_tokens} tokens omitted to fit the context budget ...]\n")
}

/// Shortens `text` to at most `max_tokens` tokens by cutting out its middle (the head and the
/// tail of a long tool output are usually what matters) and inserting a marker that says how
/// much was omitted. Returns `text` unchanged when it already fits. Always cuts on `char`
/// boundaries; never returns more than `max_tokens` tokens (it may return an empty string when
/// `max_tokens` cannot even hold the marker).
pub fn truncate_middle(text: &str, max_tokens: u64) -> String {
    let total = text_tokens(text);
    if total <= max_tokens {
        return text.to_owned();
    }
    let marker_cost = text_tokens(&truncation_marker(total)) + 2;
    if max_tokens <= marker_cost {
        return String::new();
    }
    let mut keep_tokens = max_tokens - marker_cost;
    let chars: Vec<char> = text.chars().collect();
    loop {
        // Characters per token of this text, measured, to size the cut without re-encoding
        // at every candidate length.
        let ratio = chars.len() as f64 / total.max(1) as f64;
        let keep_chars = ((keep_tokens as f64) * ratio) as usize;
        let head_len = keep_chars * 2 / 3;
        let tail_len = keep_chars - head_len;
        let head: String = chars[..head_len.min(chars.len())].iter().collect();
        let tail: String = chars[chars.len().saturating_sub(tail_len)..]
            .iter()
            .collect();
        let out = format!(
            "{head}{}{tail}",
            truncation_marker(total.saturating_sub(keep_tokens))
        );
        if text_tokens(&out) <= max_tokens || keep_tokens == 0 {
            if text_tokens(&out) <= max_tokens {
                return out;
            }
            return String::new();
        }
        keep_tokens = keep_tokens * 9 / 10;
    }
}

#[cfg(test)]
mod truncate_tests {
    use super::*;

    #[test]
    fn truncate_middle_fits_and_keeps_both_ends() {
        let text = format!(
            "HEAD-MARK {} TAIL-MARK",
            "lorem ipsum dolor sit amet ".repeat(2_000)
        );
        let out = truncate_middle(&text, 300);
        assert!(text_tokens(&out) <= 300, "{} tokens", text_tokens(&out));
        assert!(out.starts_with("HEAD-MARK"));
        assert!(out.ends_with("TAIL-MARK"));
        assert!(out.contains("tokens omitted"));
    }

    #[test]
    fn truncate_middle_is_identity_when_it_fits_and_safe_on_unicode() {
        assert_eq!(truncate_middle("short", 10), "short");
        let text = "日本語のテキスト🙂".repeat(500);
        let out = truncate_middle(&text, 100);
        assert!(text_tokens(&out) <= 100);
    }
}
