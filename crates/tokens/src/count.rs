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
//! The cache holds pieces of at most [`MAX_KEY`] bytes, packed with their length into a `u128`
//! key, so a lookup never allocates and memory stays fixed: [`SETS`] sets of two entries,
//! 256 KiB per thread, allocated on a thread's first count. Two-way rather than direct-mapped
//! because real conversations have a long vocabulary tail: on the LoCoMo turns a direct-mapped
//! table of the same size thrashed (15 µs/KB at 8k slots vs ~5 µs/KB two-way at 16k entries;
//! the crate's `count` is ~38 µs/KB there). A miss evicts the set's least recently used entry.
//! Longer pieces are rare and encoded directly. Thread-local, so no locking: counting runs on
//! whatever threads the host uses, and each warms its own cache within a few messages.

use std::cell::RefCell;

use crate::pretokenize::Pieces;

/// Longest piece the cache stores (bytes); the 16th byte of the key holds the length.
const MAX_KEY: usize = 15;
/// Cache sets per thread (a power of two), two entries each.
const SETS: usize = 1 << 13;

/// Two-way set-associative: each set holds the two most recently used pieces that hash to it
/// (most recent first). An entry is the packed key (see [`pack`]) with the piece's token count
/// in the top four bits; a piece of at most 15 bytes has at most 15 tokens, so the count fits.
struct PieceCache {
    sets: Vec<[u128; 2]>,
}

const COUNT_SHIFT: u32 = 124;
const COUNT_MASK: u128 = 0xF << COUNT_SHIFT;

impl PieceCache {
    fn new() -> Self {
        PieceCache {
            sets: vec![[0; 2]; SETS],
        }
    }

    /// Count of `piece` (1..=15 bytes, found at byte `at` of `text`), from the cache or the
    /// encoder.
    #[inline]
    fn count(
        &mut self,
        bpe: &bpe_openai::byte_pair_encoding::BytePairEncoding,
        text: &[u8],
        at: usize,
        piece: &[u8],
    ) -> usize {
        let key = pack_at(text, at, piece);
        // `set_of < SETS` by construction; `get_mut` keeps this panic-free regardless.
        let Some(ways) = self.sets.get_mut(set_of(key)) else {
            return bpe.count(piece);
        };
        if ways[0] & !COUNT_MASK == key {
            return (ways[0] >> COUNT_SHIFT) as usize;
        }
        if ways[1] & !COUNT_MASK == key {
            ways.swap(0, 1);
            return (ways[0] >> COUNT_SHIFT) as usize;
        }
        let n = bpe.count(piece);
        if n <= 15 {
            ways[1] = ways[0];
            ways[0] = key | (n as u128) << COUNT_SHIFT;
        }
        n
    }
}

/// The piece's bytes (at most 15), little-endian, with its length in bits 120..124. A zero key
/// (an empty slot) is impossible because pieces are never empty.
///
/// Built from a few (possibly overlapping) word loads rather than a byte copy into a buffer:
/// the copy-then-load version stalls on store forwarding and cost more than the lookup.
#[inline(always)]
fn pack(piece: &[u8]) -> u128 {
    let n = piece.len();
    let (lo, hi) = match n {
        0 => (0, 0),
        1..=3 => {
            let (a, b, c) = (piece[0] as u64, piece[n / 2] as u64, piece[n - 1] as u64);
            (a | b << (8 * (n / 2)) | c << (8 * (n - 1)), 0)
        }
        4..=7 => {
            let a = u32::from_le_bytes([piece[0], piece[1], piece[2], piece[3]]) as u64;
            let b =
                u32::from_le_bytes([piece[n - 4], piece[n - 3], piece[n - 2], piece[n - 1]]) as u64;
            (a | b << (8 * (n - 4)), 0)
        }
        _ => {
            let word = |at: usize| {
                let mut w = [0u8; 8];
                w.copy_from_slice(&piece[at..at + 8]);
                u64::from_le_bytes(w)
            };
            let lo = word(0);
            // Bytes 8..n are the top `n - 8` bytes of the last eight.
            let hi = if n == 8 {
                0
            } else {
                word(n - 8) >> (8 * (16 - n))
            };
            (lo, hi)
        }
    };
    let n = n.min(MAX_KEY) as u128;
    (lo as u128) | (hi as u128) << 64 | n << 120
}
/// [`pack`] of `piece`, which starts at byte `at` of `text`: one 16-byte load from the text,
/// masked to the piece, when the text extends far enough past the piece (always but at the very
/// end), instead of length-dependent loads whose branches mispredict on every other word.
#[inline(always)]
fn pack_at(text: &[u8], at: usize, piece: &[u8]) -> u128 {
    let n = piece.len();
    match text.get(at..at + 16) {
        Some(chunk) if n <= MAX_KEY => {
            let mut w = [0u8; 16];
            w.copy_from_slice(chunk);
            let mask = (1u128 << (8 * n)) - 1;
            (u128::from_le_bytes(w) & mask) | (n as u128) << 120
        }
        _ => pack(piece),
    }
}

#[inline(always)]
fn set_of(key: u128) -> usize {
    let lo = key as u64;
    let hi = (key >> 64) as u64;
    let h = (lo ^ hi.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> (64 - SETS.trailing_zeros())) as usize
}

thread_local! {
    static CACHE: RefCell<PieceCache> = RefCell::new(PieceCache::new());
}

/// Exact o200k token count of `text`; equal to `bpe_openai::o200k_base().count(text)`.
pub(crate) fn count(text: &str) -> usize {
    let bpe = &bpe_openai::o200k_base().bpe;
    let with_cache = CACHE.try_with(|cell| match cell.try_borrow_mut() {
        Ok(mut cache) => Some(count_pieces(text, |at, piece| {
            if piece.len() <= MAX_KEY {
                cache.count(bpe, text.as_bytes(), at, piece)
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
        _ => count_pieces(text, |_, piece| bpe.count(piece)),
    }
}

/// Sum of `piece_count(offset, piece)` over the pieces of `text`.
#[inline]
fn count_pieces(text: &str, mut piece_count: impl FnMut(usize, &[u8]) -> usize) -> usize {
    let mut at = 0;
    Pieces::new(text)
        .map(|piece| {
            let n = piece_count(at, piece.as_bytes());
            at += piece.len();
            n
        })
        .sum()
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
    fn counts_survive_eviction() {
        // Far more distinct pieces than the cache holds, so sets evict and refill, twice over.
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut words = String::new();
        for _ in 0..60_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = 2 + (x % 11) as usize;
            words.push(' ');
            words.extend((0..len).map(|i| (b'a' + ((x >> (5 * i)) % 26) as u8) as char));
        }
        let tok = bpe_openai::o200k_base();
        let expected = tok.count(words.as_str());
        for _ in 0..2 {
            assert_eq!(count(&words), expected);
            for chunk in words
                .as_bytes()
                .chunks(997)
                .filter_map(|c| std::str::from_utf8(c).ok())
            {
                assert_eq!(count(chunk), tok.count(chunk), "{chunk:?}");
            }
        }
    }

    #[test]
    fn keys_distinguish_length_and_trailing_zero_bytes() {
        assert_ne!(pack(b"a"), pack(b"a\0"));
        assert_ne!(pack(b"ab"), pack(b"ba"));
        assert_ne!(pack(b"\0"), 0);
    }

    #[test]
    fn keys_are_the_bytes_and_the_length() {
        let text: Vec<u8> = (1..=15u8).map(|b| b.wrapping_mul(37)).collect();
        for n in 1..=MAX_KEY {
            let piece = &text[..n];
            let mut buf = [0u8; 16];
            buf[..n].copy_from_slice(piece);
            buf[15] = n as u8;
            assert_eq!(pack(piece), u128::from_le_bytes(buf), "n = {n}");
            let mut long = text.clone();
            long.extend_from_slice(&[0xAB; 16]);
            assert_eq!(pack_at(&long, 0, &long[..n]), pack(piece), "n = {n}");
            assert_eq!(
                pack_at(&long, 1, &long[1..1 + n]),
                pack(&long[1..1 + n]),
                "n = {n}"
            );
            assert_eq!(pack(piece) & COUNT_MASK, 0);
        }
    }
}
