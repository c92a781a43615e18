//! Encoding a batch of messages on several threads while the store thread inserts them.
//!
//! Encoding a message (exact token count, skeleton and identity hash, index terms,
//! compression) costs about as much CPU as inserting it, so a large batch is cut into chunks
//! that encoder threads encode while the store thread inserts the chunks already done, in
//! order, inside one open transaction. Two rules keep every core busy without
//! oversubscribing them:
//!
//! - The store thread never waits idle while work is left: when the chunk it needs next is
//!   not ready and some chunk is still unclaimed, it claims and encodes that one itself. So a
//!   batch needs no encoder thread at all to finish (one core, or a blocking pool that is
//!   busy elsewhere), and with one encoder thread on two cores both stay busy whichever side
//!   is the slower.
//! - Encoders stay at most [`LOOKAHEAD`] chunks ahead of the store, so a huge batch is never
//!   held encoded in memory all at once.
//!
//! Chunks are claimed in order from one counter, so each is encoded exactly once; results
//! are taken in order, so messages are stored in batch order. An encoding error or panic
//! fails its chunk, and the store thread's transaction rolls back the whole batch. A store job that fails or is dropped abandons the
//! queue, and the encoders stop at their next claim.

use std::ops::Range;
use std::sync::{Condvar, Mutex, MutexGuard};

use clawctx_protocol::AgentMessage;

use crate::core::codec::{self, Encoded};
use crate::error::{LosslessError, Result};

/// How many chunks encoders may run ahead of the chunk the store is inserting: enough for a
/// whole 100-message batch (the host's usual size) to be encoded while the store thread is
/// still indexing the batch before it (see `Db::index_deferred`), few enough that a huge
/// batch is never held encoded all at once.
pub const LOOKAHEAD: usize = 16;

/// What encodes one message: [`codec::encode`], or a stand-in in tests.
pub type EncodeFn = fn(&AgentMessage) -> Result<Encoded>;

/// A batch being encoded, shared by the encoder threads and the store thread.
pub struct EncodeQueue {
    msgs: Vec<AgentMessage>,
    chunks: Vec<Range<usize>>,
    encode: EncodeFn,
    state: Mutex<State>,
    changed: Condvar,
}

struct State {
    /// The next chunk nobody has claimed.
    next_claim: usize,
    /// The chunk the store takes next (everything before it was taken).
    next_take: usize,
    /// Finished chunks not yet taken, by chunk index.
    done: Vec<Option<Result<Vec<Encoded>>>>,
    /// The store side gave up (its job failed or was dropped): encoders stop.
    abandoned: bool,
}

impl std::fmt::Debug for EncodeQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncodeQueue")
            .field("messages", &self.msgs.len())
            .field("chunks", &self.chunks.len())
            .finish_non_exhaustive()
    }
}

impl EncodeQueue {
    /// A queue encoding `msgs` with [`codec::encode`] in chunks of at most `chunk` messages.
    pub fn new(msgs: Vec<AgentMessage>, chunk: usize) -> Self {
        Self::with_encoder(msgs, chunk, codec::encode)
    }

    /// [`Self::new`] with another encoding function (tests inject failures with it).
    pub fn with_encoder(msgs: Vec<AgentMessage>, chunk: usize, encode: EncodeFn) -> Self {
        let chunks = chunk_bounds(msgs.len(), chunk);
        let done = (0..chunks.len()).map(|_| None).collect();
        Self {
            msgs,
            chunks,
            encode,
            state: Mutex::new(State {
                next_claim: 0,
                next_take: 0,
                done,
                abandoned: false,
            }),
            changed: Condvar::new(),
        }
    }

    /// Number of messages in the batch.
    pub fn len(&self) -> usize {
        self.msgs.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.msgs.is_empty()
    }

    /// Number of chunks the batch is cut into.
    pub fn chunks(&self) -> usize {
        self.chunks.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the state consistent (every update is a
        // single assignment), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Encodes chunk `i`; a panic in the encoding function fails the chunk instead of
    /// unwinding through the store thread or leaving the store waiting for an encoder.
    fn encode_chunk(&self, i: usize) -> Result<Vec<Encoded>> {
        let range = self.chunks.get(i).cloned().unwrap_or(0..0);
        let msgs = self.msgs.get(range).unwrap_or_default();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            msgs.iter().map(self.encode).collect()
        }))
        .unwrap_or_else(|_| {
            Err(LosslessError::InvalidInput(
                "ingest aborted: encoding a message panicked".into(),
            ))
        })
    }

    fn finish(&self, i: usize, result: Result<Vec<Encoded>>) {
        let mut st = self.lock();
        if let Some(slot) = st.done.get_mut(i) {
            *slot = Some(result);
        }
        drop(st);
        self.changed.notify_all();
    }

    /// An encoder thread's loop: claims chunks in order and encodes them until none is left
    /// or the store side gave up, staying at most [`LOOKAHEAD`] chunks ahead of the store.
    pub fn run_encoder(&self) {
        loop {
            let i = {
                let mut st = self.lock();
                loop {
                    if st.abandoned || st.next_claim >= self.chunks.len() {
                        return;
                    }
                    if st.next_claim < st.next_take + LOOKAHEAD {
                        break;
                    }
                    st = self.changed.wait(st).unwrap_or_else(|p| p.into_inner());
                }
                st.next_claim += 1;
                st.next_claim - 1
            };
            let result = self.encode_chunk(i);
            self.finish(i, result);
        }
    }

    /// The store side: the next chunk in batch order, or `None` once all were taken. While it
    /// is not ready, encodes an unclaimed chunk here rather than waiting.
    pub fn take_next(&self) -> Option<Result<Vec<Encoded>>> {
        let mut st = self.lock();
        let want = st.next_take;
        if want >= self.chunks.len() {
            return None;
        }
        loop {
            if let Some(result) = st.done.get_mut(want).and_then(Option::take) {
                st.next_take += 1;
                drop(st);
                // Encoders held back by the lookahead may go on.
                self.changed.notify_all();
                return Some(result);
            }
            if st.next_claim < self.chunks.len() {
                let j = st.next_claim;
                st.next_claim += 1;
                drop(st);
                let result = self.encode_chunk(j);
                if j == want {
                    let mut st = self.lock();
                    st.next_take += 1;
                    drop(st);
                    self.changed.notify_all();
                    return Some(result);
                }
                st = self.lock();
                if let Some(slot) = st.done.get_mut(j) {
                    *slot = Some(result);
                }
                continue;
            }
            // Everything is claimed and ours is in progress on an encoder.
            st = self.changed.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Tells the encoders to stop (the store job failed, or is done).
    pub fn abandon(&self) {
        self.lock().abandoned = true;
        self.changed.notify_all();
    }
}

/// Chunk boundaries covering `0..n` in order: small first chunks (a quarter, then half of
/// `chunk`) so the store thread starts inserting early, then chunks of `chunk`.
pub fn chunk_bounds(n: usize, chunk: usize) -> Vec<Range<usize>> {
    let chunk = chunk.max(1);
    let mut out = Vec::with_capacity(n / chunk + 4);
    let mut at = 0;
    let mut size = (chunk / 4).max(1);
    while at < n {
        let end = (at + size).min(n);
        out.push(at..end);
        at = end;
        size = (size * 2).min(chunk);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_start_small_and_cover_every_message_once_in_order() {
        for n in [0usize, 1, 3, 4, 5, 16, 17, 100, 1000] {
            let b = chunk_bounds(n, 16);
            let mut at = 0;
            for r in &b {
                assert_eq!(r.start, at);
                assert!(!r.is_empty() && r.len() <= 16, "{r:?}");
                at = r.end;
            }
            assert_eq!(at, n);
            if n >= 4 {
                assert_eq!(b[0], 0..4, "the first chunk is small");
            }
        }
    }

    fn msgs(n: usize) -> Vec<AgentMessage> {
        (0..n)
            .map(|i| AgentMessage::user(format!("message {i}")).with_timestamp(i as i64))
            .collect()
    }

    fn texts(q: &EncodeQueue) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(chunk) = q.take_next() {
            out.extend(chunk.unwrap().into_iter().map(|e| e.text));
        }
        out
    }

    #[test]
    fn the_store_side_alone_encodes_everything_in_order() {
        let q = EncodeQueue::new(msgs(100), 16);
        let want: Vec<String> = (0..100).map(|i| format!("message {i}")).collect();
        assert_eq!(texts(&q), want);
        assert!(q.take_next().is_none(), "nothing after the last chunk");
    }

    #[test]
    fn with_encoder_threads_every_chunk_arrives_once_in_order() {
        for encoders in 1..=3 {
            let q = EncodeQueue::new(msgs(1_000), 7);
            let got = std::thread::scope(|s| {
                for _ in 0..encoders {
                    s.spawn(|| q.run_encoder());
                }
                let got = texts(&q);
                q.abandon();
                got
            });
            let want: Vec<String> = (0..1_000).map(|i| format!("message {i}")).collect();
            assert_eq!(got, want, "{encoders} encoder thread(s)");
        }
    }

    #[test]
    fn encoders_stay_within_the_lookahead() {
        let q = EncodeQueue::new(msgs(400), 4);
        std::thread::scope(|s| {
            s.spawn(|| q.run_encoder());
            // Without the store taking anything the encoder stops after LOOKAHEAD chunks.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while q.lock().next_claim < LOOKAHEAD && std::time::Instant::now() < deadline {
                std::thread::yield_now();
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert_eq!(
                q.lock().next_claim,
                LOOKAHEAD,
                "the encoder ran past the lookahead"
            );
            q.abandon();
        });
    }

    fn fails_on_seven(m: &AgentMessage) -> Result<Encoded> {
        if m.plain_text() == "message 7" {
            return Err(LosslessError::InvalidInput("bad message 7".into()));
        }
        codec::encode(m)
    }

    fn panics_on_seven(m: &AgentMessage) -> Result<Encoded> {
        assert_ne!(m.plain_text(), "message 7", "test encoder gives up");
        codec::encode(m)
    }

    #[test]
    fn a_failed_or_panicked_chunk_is_reported_in_its_place() {
        for (f, what) in [
            (fails_on_seven as EncodeFn, "bad message 7"),
            (panics_on_seven, "panicked"),
        ] {
            let q = EncodeQueue::with_encoder(msgs(40), 8, f);
            let results = std::thread::scope(|s| {
                let enc = s.spawn(|| q.run_encoder());
                let mut results = Vec::new();
                while let Some(r) = q.take_next() {
                    results.push(r.map(|c| c.len()).map_err(|e| e.to_string()));
                }
                q.abandon();
                let _ = enc.join();
                results
            });
            // Chunks: 0..2, 2..6, 6..14 (holds message 7), 14..22, ...
            assert!(results[..2].iter().all(Result::is_ok), "{results:?}");
            let err = results[2].as_ref().unwrap_err();
            assert!(err.contains(what), "{err}");
        }
    }
}
