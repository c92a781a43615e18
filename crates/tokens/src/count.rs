//! Exact o200k counting, fast: our pretokenizer plus a per-thread piece-count cache.
//!
//! `bpe_openai::o200k_base().count(text)` splits `text` with a regex and runs a BPE encoder
//! on every piece. Both halves are expensive relative to what the ingest path can afford, and
//! both are avoidable for the text clawctx actually sees:
//!
//! - the split: [`crate::pretokenize`] produces the crate's pieces with a byte scanner (falling
//!   back to the crate's regex, one piece at a time, around non-ASCII text);
//! - the BPE: a piece's count is a pure function of its bytes, and pieces of natural text and
//!   tool output are Zipfian (" the", ",", " file", "\n", digits), so a small per-thread cache
//!   answers most pieces without encoding. The encoder (`BytePairEncoding::count`) allocates
//!   and walks an Aho–Corasick automaton per piece; a cache hit is a multiply and a compare.
//!
//! The cache is direct-mapped over pieces of at most [`MAX_KEY`] bytes, packed with their
//! length into a `u128` key, so a lookup never allocates and memory stays fixed
//! ([`SLOTS`] × 17 bytes per thread). A collision just overwrites the slot. Longer pieces are
//! rare and encoded directly. Thread-local, so no locking: counting runs on whatever threads the
//! host uses, and each warms its own cache within a few messages.

use std::cell::RefCell;

use crate::pretokenize::Pieces;

/// Longest piece the cache stores (bytes); the 16th byte of the key holds the length.
const MAX_KEY: usize = 15;
/// Cache slots per thread (a power of two).
const SLOTS: usize = 1 << 13;

struct PieceCache {
    keys: Vec<u128>,
    counts: Vec<u8>,
}

impl PieceCache {
    fn new() -> Self {
        PieceCache { keys: vec![0; SLOTS], counts: vec![0; SLOTS] }
    }

    /// Count of `piece` (1..=15 bytes), from the cache or the encoder.
    #[inline]
    fn count(&mut self, bpe: &bpe_openai::byte_pair_encoding::BytePairEncoding, piece: &[u8]) -> usize {
        let key = pack(piece);
        let slot = slot_of(key);
        // `slot < SLOTS` by construction; `get` keeps this panic-free regardless.
        if let (Some(k), Some(n)) = (self.keys.get(slot), self.counts.get(slot)) {
            if *k == key {
                return *n as usize;
            }
        }
        let n = bpe.count(piece);
        // A piece of at most 15 bytes has at most 15 tokens, so `n` fits a `u8`.
        if let (Some(k), Some(c), Ok(n8)) = (self.keys.get_mut(slot), self.counts.get_mut(slot), u8::try_from(n)) {
            *k = key;
            *c = n8;
        }
        n
    }
}

/// The piece's bytes, little-endian, with its length in the top byte. A zero key (empty slot)
/// is impossible because pieces are never empty.
#[inline(always)]
fn pack(piece: &[u8]) -> u128 {
    let mut buf = [0u8; 16];
    let n = piece.len().min(MAX_KEY);
    buf[..n].copy_from_slice(&piece[..n]);
    buf[15] = n as u8;
    u128::from_le_bytes(buf)
}

#[inline(always)]
fn slot_of(key: u128) -> usize {
    let lo = key as u64;
    let hi = (key >> 64) as u64;
    let h = (lo ^ hi.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> (64 - SLOTS.trailing_zeros())) as usize
}

thread_local! {
    static CACHE: RefCell<PieceCache> = RefCell::new(PieceCache::new());
}

/// Exact o200k token count of `text`; equal to `bpe_openai::o200k_base().count(text)`.
pub(crate) fn count(text: &str) -> usize {
    let bpe = &bpe_openai::o200k_base().bpe;
    let with_cache = CACHE.try_with(|cell| match cell.try_borrow_mut() {
        Ok(mut cache) => Some(count_pieces(text, |piece| {
            if piece.len() <= MAX_KEY {
                cache.count(bpe, piece)
            } else {
                bpe.count(piece)
            }
        })),
        Err(_) => None,
    });
    match with_cache {
        Ok(Some(n)) => n,
        // Thread-local storage torn down (counting from a destructor) or re-entered: count
        // without the cache.
        _ => count_pieces(text, |piece| bpe.count(piece)),
    }
}

#[inline]
fn count_pieces(text: &str, mut piece_count: impl FnMut(&[u8]) -> usize) -> usize {
    Pieces::new(text).map(|piece| piece_count(piece.as_bytes())).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_hits_equal_fresh_counts() {
        let tok = bpe_openai::o200k_base();
        let text = "the cat sat on the mat; the cat sat on the mat. internationalization!!";
        for _ in 0..3 {
            assert_eq!(count(text), tok.count(text));
        }
    }

    #[test]
    fn keys_distinguish_length_and_trailing_zero_bytes() {
        assert_ne!(pack(b"a"), pack(b"a\0"));
        assert_ne!(pack(b"ab"), pack(b"ba"));
        assert_ne!(pack(b"\0"), 0);
    }
}
