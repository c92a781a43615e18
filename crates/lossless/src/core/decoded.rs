//! Decoded messages kept between assemblies.
//!
//! Consecutive turns assemble nearly the same suffix of a conversation, and turning a stored
//! row back into an [`AgentMessage`] (decompressing its text, parsing its skeleton, building
//! the typed message) costs several times more than cloning the result. So assembly keeps
//! what it decoded here, by message id, and the next turn clones it instead.
//!
//! Stored messages never change, with one exception: retention rewrites the text of messages
//! already summarized, and it clears this cache when it does. (Such messages are outside the
//! frontier, so assembly would not read them anyway; clearing keeps that an implementation
//! detail rather than an invariant to remember.)
//!
//! Bounded by two generations: lookups move entries from the previous generation to the
//! current one, and when the current one is full it becomes the previous one and the oldest
//! is dropped, so what the last few assemblies used stays and the rest ages out.

use clawctx_protocol::AgentMessage;

use super::FxMap;

/// Messages a generation holds at most. (Holding a gateway's whole working set, e.g. 65,536
/// for 50 conversations of 1,000 messages, raised its load throughput by a fifth but its peak
/// memory from 369 to 644 MB: BENCHMARKS section 9.)
pub const GENERATION_MESSAGES: usize = 4_096;
/// Approximate bytes (texts and skeletons) a generation holds at most.
pub const GENERATION_BYTES: usize = 16 << 20;

/// See the module header.
#[derive(Default)]
pub struct DecodedCache {
    current: FxMap<i64, (AgentMessage, usize)>,
    current_bytes: usize,
    previous: FxMap<i64, (AgentMessage, usize)>,
}

impl DecodedCache {
    /// A copy of message `id`, when cached.
    pub fn get(&mut self, id: i64) -> Option<AgentMessage> {
        if let Some((m, _)) = self.current.get(&id) {
            return Some(m.clone());
        }
        let (m, bytes) = self.previous.remove(&id)?;
        let copy = m.clone();
        self.insert_sized(id, m, bytes);
        Some(copy)
    }

    /// Keeps `m` as message `id`, `bytes` being about its size.
    pub fn insert(&mut self, id: i64, m: AgentMessage, bytes: usize) {
        self.insert_sized(id, m, bytes + 64);
    }

    fn insert_sized(&mut self, id: i64, m: AgentMessage, bytes: usize) {
        if bytes > GENERATION_BYTES / 4 {
            return; // a huge message would push out everything else
        }
        if self.current.len() >= GENERATION_MESSAGES
            || self.current_bytes + bytes > GENERATION_BYTES
        {
            self.previous = std::mem::take(&mut self.current);
            self.current_bytes = 0;
        }
        if let Some((_, old)) = self.current.insert(id, (m, bytes)) {
            self.current_bytes -= old;
        }
        self.current_bytes += bytes;
    }

    /// Forgets everything (stored messages were rewritten).
    pub fn clear(&mut self) {
        self.current = FxMap::default();
        self.previous = FxMap::default();
        self.current_bytes = 0;
    }

    /// Messages held (both generations).
    #[cfg(any(test, feature = "internals"))]
    pub fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }

    /// Whether nothing is held.
    #[cfg(any(test, feature = "internals"))]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(i: i64) -> AgentMessage {
        AgentMessage::user(format!("m{i}"))
    }

    #[test]
    fn returns_what_was_kept_and_ages_out_the_unused() {
        let mut c = DecodedCache::default();
        c.insert(1, msg(1), 10);
        assert_eq!(c.get(1), Some(msg(1)));
        assert_eq!(c.get(2), None);
        // Fill a generation and a half: entry 1 is used along the way, so it survives two
        // generation flips while entry 2 (never used again) is dropped.
        c.insert(2, msg(2), 10);
        for i in 3..(3 + GENERATION_MESSAGES as i64 * 3 / 2) {
            c.insert(i, msg(i), 10);
            if i % 1_000 == 0 {
                assert_eq!(c.get(1), Some(msg(1)));
            }
        }
        for i in 0..GENERATION_MESSAGES as i64 {
            c.insert(100_000 + i, msg(i), 10);
        }
        assert!(c.len() <= 2 * GENERATION_MESSAGES);
        assert_eq!(c.get(2), None, "unused entries age out");
        c.clear();
        assert!(c.is_empty());
    }

    #[test]
    fn a_generation_is_bounded_by_bytes_and_huge_messages_are_not_kept() {
        let mut c = DecodedCache::default();
        c.insert(1, msg(1), GENERATION_BYTES);
        assert_eq!(c.get(1), None, "a huge message is not kept");
        for i in 0..8 {
            c.insert(i, msg(i), GENERATION_BYTES / 5);
        }
        assert!(c.current_bytes <= GENERATION_BYTES);
        assert!(c.get(7).is_some());
    }
}
