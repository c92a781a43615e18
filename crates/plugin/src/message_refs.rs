//! Message references: sending a message to a plugin process once, then naming it by number.
//!
//! Why: `assemble` carries the whole history on every model call, and between two calls of a
//! conversation only a message or two is new. Parsing the rest again costs a Node plugin more
//! than everything else the call does (V8's `JSON.parse` and `JSON.stringify` of 100 chat
//! messages take ~200 µs; see BENCHMARKS §6). With references, a request names messages the
//! runner already holds by id (`"messages":[7,8]`) and carries only the new ones in full
//! (`"messageRefs":{"define":[[8,{…}]],…}`); the runner answers with the bare id for a
//! message it hands back untouched.
//!
//! The protocol side (negotiation, wire shapes, the runner's duties) is in
//! `docs/plugin-protocol.md`, "Message references". This module is the host's table: the
//! encoded bytes of every message the live process holds, by id and by content hash.
//!
//! Finding a held message must cost less than encoding it (that is what the table saves), so
//! it is looked up by a cheap fingerprint of the typed message (role, timestamp, tool-call ids,
//! a sketch of each text) and confirmed by comparing the typed values; only new messages are
//! encoded. Equal values are the same JSON object, maybe with `extra` keys in another order.
//!
//! Invariants:
//! - a request may reference an id only if a line defining it was written before it; the
//!   connection builds each request line while holding the pipe's write lock, and defines
//!   every id in the same step, so "defined before referenced" is the write order itself;
//! - the table is bounded ([`Limits`]); evicting an id queues it in `drops`, which the next
//!   request tells the runner (after resolving its own references), so the runner's table
//!   mirrors this one;
//! - an id is never evicted by the request that uses it (eviction skips the current tick);
//! - the table belongs to one process: a restarted process starts with an empty one, and a
//!   runner that reports an unknown id gets a reset (the table is cleared and the request sent
//!   again with every message defined).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use clawctx_protocol::{AgentMessage, Content, ContentBlock};

/// How many messages, and how many encoded bytes, the table (and so the runner) may hold.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most messages held.
    pub max_messages: usize,
    /// Most encoded bytes held.
    pub max_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_messages: 16_384,
            max_bytes: 32 * 1024 * 1024,
        }
    }
}

struct Entry {
    message: AgentMessage,
    bytes: Arc<[u8]>,
    hash: u64,
    used: u64,
}

/// The host's table of messages the plugin process holds.
pub struct MessageRefs {
    limits: Limits,
    entries: HashMap<u32, Entry, foldhash::fast::FixedState>,
    by_hash: HashMap<u64, Vec<u32>, foldhash::fast::FixedState>,
    hasher: foldhash::fast::FixedState,
    next_id: u32,
    tick: u64,
    bytes: usize,
    drops: Vec<u32>,
    reset: bool,
}

impl std::fmt::Debug for MessageRefs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageRefs")
            .field("messages", &self.entries.len())
            .field("bytes", &self.bytes)
            .finish()
    }
}

/// What the table says of one message in a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interned {
    /// Already held by the process: send its id only.
    Held(u32),
    /// New: send its id, and define it (`[id, message]`).
    New(u32),
}

impl Interned {
    /// The id either way.
    pub fn id(self) -> u32 {
        match self {
            Interned::Held(id) | Interned::New(id) => id,
        }
    }
}

/// The envelope member a request carries for the runner (`"messageRefs":{…}`): whether to
/// clear its table first, and which ids to forget afterwards.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Housekeeping {
    /// Clear the table before resolving this request.
    pub reset: bool,
    /// Forget these ids after resolving this request.
    pub drop: Vec<u32>,
}

impl MessageRefs {
    /// An empty table.
    pub fn new(limits: Limits) -> Self {
        MessageRefs {
            limits,
            entries: HashMap::default(),
            by_hash: HashMap::default(),
            hasher: foldhash::fast::FixedState::with_seed(0x636c_6177),
            next_id: 1,
            tick: 0,
            bytes: 0,
            drops: Vec::new(),
            reset: false,
        }
    }

    /// Starts a request: ids used from here on are safe from this request's eviction.
    pub fn begin(&mut self) {
        self.tick += 1;
    }

    /// Looks a message up, defining it when new; answers its id and its JSON (encoded now
    /// only if it is new).
    pub fn intern(&mut self, message: &AgentMessage) -> serde_json::Result<(Interned, Arc<[u8]>)> {
        let hash = fingerprint(&self.hasher, message);
        if let Some(ids) = self.by_hash.get(&hash) {
            for id in ids {
                if let Some(e) = self.entries.get_mut(id) {
                    if e.message == *message {
                        e.used = self.tick;
                        return Ok((Interned::Held(*id), e.bytes.clone()));
                    }
                }
            }
        }
        let bytes: Arc<[u8]> = serde_json::to_vec(message)?.into();
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        self.bytes += bytes.len();
        self.entries.insert(
            id,
            Entry {
                message: message.clone(),
                bytes: bytes.clone(),
                hash,
                used: self.tick,
            },
        );
        self.by_hash.entry(hash).or_default().push(id);
        Ok((Interned::New(id), bytes))
    }

    /// The JSON of a held message.
    pub fn bytes(&self, id: u32) -> Option<&[u8]> {
        self.entries.get(&id).map(|e| &*e.bytes)
    }

    /// Ends a request: evicts the least recently used messages (never this request's) while
    /// the table is over its limits, down to three quarters of them so eviction is rare, and
    /// answers what the request must tell the runner.
    pub fn finish(&mut self) -> Housekeeping {
        if self.entries.len() > self.limits.max_messages || self.bytes > self.limits.max_bytes {
            let mut old: Vec<(u64, u32)> = self
                .entries
                .iter()
                .filter(|(_, e)| e.used < self.tick)
                .map(|(id, e)| (e.used, *id))
                .collect();
            old.sort_unstable();
            let (keep_n, keep_b) = (
                self.limits.max_messages / 4 * 3,
                self.limits.max_bytes / 4 * 3,
            );
            for (_, id) in old {
                if self.entries.len() <= keep_n && self.bytes <= keep_b {
                    break;
                }
                self.remove(id);
                self.drops.push(id);
            }
        }
        Housekeeping {
            reset: std::mem::take(&mut self.reset),
            drop: std::mem::take(&mut self.drops),
        }
    }

    /// Forgets everything; the next request tells the runner to do the same.
    pub fn reset(&mut self) {
        self.entries.clear();
        self.by_hash.clear();
        self.bytes = 0;
        self.drops.clear();
        self.reset = true;
    }

    /// Messages held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn remove(&mut self, id: u32) {
        if let Some(e) = self.entries.remove(&id) {
            self.bytes -= e.bytes.len();
            if let Some(ids) = self.by_hash.get_mut(&e.hash) {
                ids.retain(|i| *i != id);
                if ids.is_empty() {
                    self.by_hash.remove(&e.hash);
                }
            }
        }
    }
}

/// A cheap hash of what tells messages of one conversation apart; collisions only cost a
/// comparison.
fn fingerprint(state: &foldhash::fast::FixedState, m: &AgentMessage) -> u64 {
    fn sketch(h: &mut impl Hasher, text: &str) {
        let b = text.as_bytes();
        h.write_usize(b.len());
        h.write(&b[..b.len().min(32)]);
        h.write(&b[b.len().saturating_sub(32)..]);
    }
    let mut h = state.build_hasher();
    m.role().hash(&mut h);
    m.timestamp_ms().hash(&mut h);
    let content = match m {
        AgentMessage::User(u) => Some(&u.content),
        AgentMessage::Assistant(a) => Some(&a.content),
        AgentMessage::ToolResult(t) => {
            t.tool_call_id.hash(&mut h);
            Some(&t.content)
        }
        _ => None,
    };
    match content {
        Some(Content::Text(text)) => sketch(&mut h, text),
        Some(Content::Blocks(blocks)) => {
            h.write_usize(blocks.len());
            for block in blocks {
                match block {
                    ContentBlock::Text(t) => sketch(&mut h, &t.text),
                    ContentBlock::Thinking(t) => sketch(&mut h, &t.thinking),
                    ContentBlock::ToolCall(c) => c.id.hash(&mut h),
                    _ => {}
                }
            }
        }
        None => {}
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(text: &str) -> AgentMessage {
        AgentMessage::user(text)
    }

    fn id(t: &mut MessageRefs, m: &AgentMessage) -> Interned {
        t.intern(m).expect("encodes").0
    }

    #[test]
    fn the_same_message_is_held_and_new_messages_get_new_ids() {
        let mut t = MessageRefs::new(Limits::default());
        t.begin();
        let a = id(&mut t, &msg("a"));
        let b = id(&mut t, &msg("b"));
        assert!(matches!(a, Interned::New(_)) && matches!(b, Interned::New(_)));
        assert_ne!(a.id(), b.id());
        assert_eq!(t.finish(), Housekeeping::default());
        t.begin();
        assert_eq!(id(&mut t, &msg("a")), Interned::Held(a.id()));
        let encoded = serde_json::to_vec(&msg("b")).expect("encodes");
        assert_eq!(t.bytes(b.id()), Some(&encoded[..]));
        // Same fingerprint (role, timestamp, length, both ends of the text), other message.
        let long_a = format!("{}-a-{}", "x".repeat(40), "y".repeat(40));
        let long_b = format!("{}-b-{}", "x".repeat(40), "y".repeat(40));
        let la = id(&mut t, &msg(&long_a));
        let lb = id(&mut t, &msg(&long_b));
        assert!(
            matches!(lb, Interned::New(i) if i != la.id()),
            "a fingerprint collision must not make two messages one"
        );
        assert_eq!(id(&mut t, &msg(&long_b)), Interned::Held(lb.id()));
    }

    #[test]
    fn eviction_drops_the_least_recently_used_but_never_the_current_request() {
        let mut t = MessageRefs::new(Limits {
            max_messages: 4,
            max_bytes: usize::MAX,
        });
        let mut ids = Vec::new();
        for i in 0..4 {
            t.begin();
            ids.push(id(&mut t, &msg(&format!("m{i}"))).id());
            assert!(t.finish().drop.is_empty());
        }
        // m0 used again: m1 is now the oldest.
        t.begin();
        id(&mut t, &msg("m0"));
        t.finish();
        // A request with five new messages: over the limit, but its own are kept; the older
        // ones go, oldest first.
        t.begin();
        let fresh: Vec<u32> = (10..15)
            .map(|i| id(&mut t, &msg(&format!("m{i}"))).id())
            .collect();
        let h = t.finish();
        assert_eq!(h.drop, vec![ids[1], ids[2], ids[3], ids[0]]);
        for id in &fresh {
            assert!(
                t.bytes(*id).is_some(),
                "message {id} of this request evicted"
            );
        }
        // Still over the limit: the next request evicts down to three quarters of it, then
        // nothing more is said.
        t.begin();
        assert_eq!(t.finish().drop, fresh[..2].to_vec());
        t.begin();
        assert!(t.finish().drop.is_empty());
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn a_reset_forgets_everything_and_is_said_once() {
        let mut t = MessageRefs::new(Limits::default());
        t.begin();
        let a = id(&mut t, &msg("x")).id();
        t.finish();
        t.reset();
        assert!(t.is_empty());
        t.begin();
        assert!(matches!(id(&mut t, &msg("x")), Interned::New(i) if i != a));
        assert_eq!(
            t.finish(),
            Housekeeping {
                reset: true,
                drop: Vec::new()
            }
        );
        t.begin();
        assert!(!t.finish().reset);
    }
}
