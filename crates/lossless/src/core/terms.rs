//! The terms the full-text indexes hold, made in Rust, and the same terms for queries.
//!
//! Until schema v7, FTS5's `porter unicode61` tokenizer split, case-folded and stemmed every
//! indexed word on the store thread, the one thread every write goes through: a fifth of its
//! instructions per tool-heavy message. Now [`index_terms`] does all of that on the encoding
//! side (in parallel with the store) and hands the index finished terms separated by single
//! spaces, and the indexes use FTS5's plain `ascii` tokenizer, which only splits at those
//! spaces (every character of a term is an ASCII letter or digit, or not ASCII at all, which
//! `ascii` keeps inside a token).
//!
//! Queries go through the same code ([`fts_term`], [`fts_and_query`]), so a word finds the
//! rows that contain it by construction, whatever the normalization is. The normalization:
//!
//! - words are maximal runs of alphanumeric characters and combining marks ([`words`]);
//!   Chinese, Japanese and Korean text, which does not put spaces between its words, gives
//!   each pair of neighbouring characters as a word instead ("账本七号": "账本", "本七",
//!   "七号"; a query finds a phrase as the rows holding all its pairs), and the index also
//!   holds each of its characters alone, so a one-character query finds them;
//! - case is folded (Unicode lowercase);
//! - accents are removed from Latin letters (`é` → `e`, `İ` → `i`), as `unicode61
//!   remove_diacritics 2` did; letters of other scripts keep theirs (`й` stays `й`);
//! - words of 3 to 64 ASCII letters are stemmed with the Snowball English stemmer ("Porter 2":
//!   `deployments`, `deployed` → `deploy`).
//!
//! All of it is memoized per thread, word → term id (see `Memo`): real text repeats its
//! vocabulary, and the stemmer costs ~250 ns a word where a lookup costs a few. Words are found
//! eight bytes at a time ([`ascii_word_run`]), so the whole of [`index_terms`] costs less than
//! the plain split-and-deduplicate it replaced.

use std::cell::RefCell;

use hashbrown::hash_table::HashTable;

/// The FTS5 tokenizer of every full-text table: [`index_terms`] did the rest.
#[cfg(any(test, feature = "internals"))]
pub const TOKENIZER: &str = "ascii";

/// Words stemmed at most: longer runs (hashes, base64) are kept as they are.
const MAX_STEMMED: usize = 64;
/// Words memoized per thread before the memo starts over (words are at most [`MAX_STEMMED`]
/// bytes, so a few MB at most).
const MEMO_MAX: usize = 50_000;

/// A memoized word: its [`hash_of`] and the id of its term (`None`: it has no term).
struct Word {
    hash: u64,
    /// [`pack`] of the word: equal keys, equal words.
    key: u128,
    /// The word itself, only when it is too long to pack (`key` is 0).
    long: Option<Box<str>>,
    term: Option<u32>,
}

/// Per thread: every word seen (up to [`MEMO_MAX`]) with the id of its term, and the terms.
/// Words with one term ("runs", "running") share its id, so [`index_terms`] removes repeats by
/// id, with no hashing of terms.
struct Memo {
    stemmer: rust_stemmers::Stemmer,
    words: HashTable<Word>,
    /// Term text by id.
    terms: Vec<Box<str>>,
    /// Term ids by the [`hash_of`] their text.
    term_ids: HashTable<(u64, u32)>,
    /// By term id: the [`index_terms`] call (its `generation`) that last wrote the term.
    written: Vec<u32>,
    generation: u32,
}

impl Memo {
    /// Starts over when full; between calls only, so ids stay stable within one.
    fn make_room(&mut self) {
        let full = self.words.len().max(self.terms.len()) >= MEMO_MAX;
        if full || self.generation == u32::MAX {
            self.clear();
        }
    }

    fn clear(&mut self) {
        self.words.clear();
        self.terms.clear();
        self.term_ids.clear();
        self.written.clear();
        self.generation = 0;
    }

    /// The id of `term`'s text, added when new.
    fn term_id(&mut self, term: &str) -> u32 {
        let hash = hash_of(term);
        let Memo {
            terms,
            term_ids,
            written,
            ..
        } = self;
        let found = term_ids.find(hash, |e| {
            e.0 == hash && terms.get(e.1 as usize).map(|t| &**t) == Some(term)
        });
        if let Some(&(_, id)) = found {
            return id;
        }
        let id = terms.len() as u32;
        terms.push(term.into());
        written.push(0);
        term_ids.insert_unique(hash, (hash, id), |e| e.0);
        id
    }

    /// The id of the term of `word` (one item of [`words`]), given its [`hash_with_key`].
    #[inline(always)]
    fn term_of(&mut self, word: &str, (hash, key): (u64, u128)) -> Option<u32> {
        let found = self.words.find(hash, |e| {
            e.hash == hash && e.key == key && e.long.as_deref().is_none_or(|l| l == word)
        });
        if let Some(e) = found {
            return e.term;
        }
        let term = fold_and_stem(&self.stemmer, word);
        let id = term.as_deref().map(|t| self.term_id(t));
        self.words.insert_unique(
            hash,
            Word {
                hash,
                key,
                long: (key == 0).then(|| word.into()),
                term: id,
            },
            |e| e.hash,
        );
        id
    }
}

thread_local! {
    static MEMO: RefCell<Memo> = RefCell::new(Memo {
        stemmer: rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English),
        words: HashTable::new(),
        terms: Vec::new(),
        term_ids: HashTable::new(),
        written: Vec::new(),
        generation: 0,
    });
}

/// Whether `c` belongs to a word: letters, digits and combining marks (so a letter written
/// with a separate accent stays one word).
fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || (!c.is_ascii() && unicode_normalization::char::is_combining_mark(c))
}

/// The words of `text`, in order, as written (not yet [`normalize`]d).
pub fn words(text: &str) -> Words<'_> {
    Words { text, pos: 0 }
}

/// The iterator of [`words`]: a byte scan that decodes a character only where a byte is not
/// ASCII.
pub struct Words<'a> {
    text: &'a str,
    pos: usize,
}

/// Whether byte `b` is an ASCII letter or digit (lowercase letters tested first: most text).
#[inline(always)]
fn ascii_word(b: u8) -> bool {
    b.wrapping_sub(b'a') < 26 || b.wrapping_sub(b'0') < 10 || b.wrapping_sub(b'A') < 26
}

/// How many of the first bytes of `x` (little-endian: its low bytes first) are ASCII letters or
/// digits, eight bytes tested at once, and which kinds of byte that run holds ([`DIGIT`],
/// [`UPPER`]).
///
/// For an ASCII byte `b`, `b + (0x80 - lo)` has its high bit set exactly when `b >= lo`, and
/// never carries into the next byte (at most 0x7f + 0x50). A byte that is not ASCII may carry,
/// but only into later bytes, which no longer count once it has ended the run.
#[inline(always)]
fn ascii_word_run(x: u64) -> (usize, u8) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let at_least = |lo: u8| x.wrapping_add(ONES * u64::from(0x80 - lo));
    let within = |lo: u8, hi: u8| at_least(lo) & !at_least(hi + 1) & !x & HIGH;
    let (digits, upper) = (within(b'0', b'9'), within(b'A', b'Z'));
    let word = within(b'a', b'z') | digits | upper;
    let run = ((!word & HIGH).trailing_zeros() / 8) as usize;
    let prefix = if run >= 8 {
        !0
    } else {
        (1u64 << (run * 8)) - 1
    };
    let flags =
        if digits & prefix != 0 { DIGIT } else { 0 } | if upper & prefix != 0 { UPPER } else { 0 };
    (run, flags)
}

/// What [`Words::next_classified`] says a word holds: an ASCII digit,
pub const DIGIT: u8 = 1;
/// an ASCII capital,
pub const UPPER: u8 = 2;
/// a character that is not ASCII.
pub const WIDE: u8 = 4;

/// The class flags of one ASCII byte.
#[inline(always)]
fn byte_flags(b: u8) -> u8 {
    if b.is_ascii_digit() {
        DIGIT
    } else if b.is_ascii_uppercase() {
        UPPER
    } else {
        0
    }
}

/// A letter of the Chinese, Japanese or Korean scripts (ideographs, kana, hangul): text in
/// them does not separate its words by spaces, so [`words`] cuts it into overlapping pairs of
/// characters instead (see [`Words`]).
pub fn is_cjk(c: char) -> bool {
    let c32 = c as u32;
    CJK_RANGES.iter().any(|(lo, hi)| (*lo..=*hi).contains(&c32)) && is_word_char(c)
    // not the blocks' punctuation (`・`, `゠`)
}

/// The code point ranges of [`is_cjk`].
const CJK_RANGES: &[(u32, u32)] = &[
    (0x1100, 0x11FF),   // hangul jamo
    (0x3040, 0x30FF),   // hiragana, katakana
    (0x3130, 0x318F),   // hangul compatibility jamo
    (0x31F0, 0x31FF),   // katakana phonetic extensions
    (0x3400, 0x4DBF),   // CJK extension A
    (0x4E00, 0x9FFF),   // CJK unified ideographs
    (0xAC00, 0xD7AF),   // hangul syllables
    (0xF900, 0xFAFF),   // CJK compatibility ideographs
    (0xFF66, 0xFF9F),   // halfwidth katakana
    (0x20000, 0x2FFFF), // CJK extensions B and later
];

/// A regular-expression bracket class of the [`is_cjk`] blocks (`[一-鿿…]`), for finding rows
/// with CJK text in SQL.
pub fn cjk_class() -> String {
    let mut out = String::from("[");
    for (lo, hi) in CJK_RANGES {
        if let (Some(lo), Some(hi)) = (char::from_u32(*lo), char::from_u32(*hi)) {
            out.push(lo);
            out.push('-');
            out.push(hi);
        }
    }
    out.push(']');
    out
}

/// What a (not ASCII) character is to [`words`].
enum Wide {
    /// Not part of a word (punctuation, symbols, spaces).
    Gap,
    /// A letter, digit or mark of a script that separates words by spaces.
    Letter,
    /// A CJK character ([`is_cjk`]).
    Cjk,
}

impl Words<'_> {
    /// What the (not ASCII) character at byte `i` is, and its length.
    #[cold]
    fn wide(&self, i: usize) -> (Wide, usize) {
        match self.text.get(i..).and_then(|rest| rest.chars().next()) {
            Some(c) if is_cjk(c) => (Wide::Cjk, c.len_utf8()),
            Some(c) if is_word_char(c) => (Wide::Letter, c.len_utf8()),
            Some(c) => (Wide::Gap, c.len_utf8()),
            None => (Wide::Gap, 1),
        }
    }

    /// Whether the character at byte `i` (a char boundary) is CJK.
    fn cjk_at(&self, i: usize) -> bool {
        self.text
            .get(i..)
            .and_then(|rest| rest.chars().next())
            .is_some_and(is_cjk)
    }

    /// Whether the character before byte `i` (a char boundary) is CJK.
    fn cjk_before(&self, i: usize) -> bool {
        self.text
            .get(..i)
            .and_then(|before| before.chars().next_back())
            .is_some_and(is_cjk)
    }
}

impl<'a> Words<'a> {
    /// The next word, with the [`DIGIT`], [`UPPER`] and [`WIDE`] flags of what it holds
    /// (found by the same scan, so callers need not look at the word again).
    #[inline(always)]
    pub fn next_classified(&mut self) -> Option<(&'a str, u8)> {
        let bytes = self.text.as_bytes();
        let mut i = self.pos;
        loop {
            let Some(&b) = bytes.get(i) else {
                self.pos = i;
                return None;
            };
            if ascii_word(b) {
                break;
            }
            if b.is_ascii() {
                i += 1;
                continue;
            }
            match self.wide(i) {
                (Wide::Letter, _) => break,
                (Wide::Gap, n) => i += n,
                // A run of CJK characters gives each pair of neighbours as a word ("账本七号":
                // "账本", "本七", "七号"), and a character alone between other text as itself:
                // a pair starts at every character but the run's last, which the pair before it
                // already holds.
                (Wide::Cjk, n) => {
                    if self.cjk_at(i + n) {
                        let m = self.wide(i + n).1;
                        self.pos = i + n;
                        return self.text.get(i..i + n + m).map(|w| (w, WIDE));
                    }
                    if !self.cjk_before(i) {
                        self.pos = i + n;
                        return self.text.get(i..i + n).map(|w| (w, WIDE));
                    }
                    i += n;
                }
            }
        }
        let start = i;
        let mut flags = 0;
        // Most words are ASCII letters and digits: eight bytes a step while the text lasts.
        while let Some(chunk) = bytes.get(i..i + 8) {
            let (run, f) = ascii_word_run(u64::from_le_bytes(chunk.try_into().unwrap_or_default()));
            i += run;
            flags |= f;
            if run < 8 {
                break;
            }
        }
        while let Some(&b) = bytes.get(i) {
            if ascii_word(b) {
                flags |= byte_flags(b);
                i += 1;
            } else if b.is_ascii() {
                break;
            } else {
                match self.wide(i) {
                    (Wide::Letter, n) => {
                        flags |= WIDE;
                        i += n;
                    }
                    // A CJK character ends the word: it starts its own ("Q7账本": "Q7", "账本").
                    (Wide::Gap | Wide::Cjk, _) => break,
                }
            }
        }
        self.pos = i;
        self.text.get(start..i).map(|w| (w, flags))
    }
}

impl<'a> Iterator for Words<'a> {
    type Item = &'a str;

    #[inline]
    fn next(&mut self) -> Option<&'a str> {
        self.next_classified().map(|(w, _)| w)
    }
}

/// `s` packed with its length when it has 1 to 15 bytes (equal keys, equal words; never 0),
/// else 0.
fn pack(s: &str) -> u128 {
    pack_at(s.as_bytes(), 0, s.len())
}

/// [`pack`] of the `len` bytes of `bytes` at `at`. Whole eight-byte loads where `bytes` goes on
/// far enough (in [`index_terms`], nearly always), else the bytes one at a time, assembled in
/// registers: a byte-wise copy into a buffer read back as one word stalls on store forwarding.
#[inline]
fn pack_at(bytes: &[u8], at: usize, len: usize) -> u128 {
    if len == 0 || len > 15 {
        return 0;
    }
    let part = |from: usize, n: usize| -> u64 {
        match bytes.get(from..from + 8) {
            Some(w) => {
                let w = u64::from_le_bytes(w.try_into().unwrap_or_default());
                if n >= 8 {
                    w
                } else {
                    w & ((1u64 << (n * 8)) - 1)
                }
            }
            None => bytes
                .get(from..from + n)
                .unwrap_or_default()
                .iter()
                .rev()
                .fold(0, |x, &c| x << 8 | u64::from(c)),
        }
    };
    let lo = part(at, len.min(8));
    let hi = if len > 8 { part(at + 8, len - 8) } else { 0 };
    u128::from(hi | (len as u64) << 56) << 64 | u128::from(lo)
}

/// A hash for [`Memo`]'s tables: of the packed key for a short word, else FxHash's step over
/// eight bytes at a time; rotated so the low bits (the tables' bucket index) depend on every
/// byte.
fn hash_of(s: &str) -> u64 {
    hash_with_key(s, pack(s)).0
}

/// [`hash_of`] of `s` and its [`pack`], given.
#[inline]
fn hash_with_key(s: &str, key: u128) -> (u64, u128) {
    const K: u64 = 0xf135_7aea_2e62_a9c5;
    let step = |h: u64, x: u64| (h.rotate_left(5) ^ x).wrapping_mul(K);
    if key != 0 {
        let h = step(step(0, key as u64), (key >> 64) as u64).rotate_left(26);
        return (h, key);
    }
    let bytes = s.as_bytes();
    let mut h = bytes.len() as u64;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        h = step(h, u64::from_le_bytes(c.try_into().unwrap_or_default()));
    }
    let x = chunks
        .remainder()
        .iter()
        .rev()
        .fold(0u64, |x, &b| x << 8 | u64::from(b));
    (step(h, x).rotate_left(26), 0)
}

/// The combining marks that `remove_diacritics` removes: the Combining Diacritical Marks block.
fn is_diacritic(c: char) -> bool {
    ('\u{300}'..='\u{36f}').contains(&c)
}

/// Appends `c` lowercased, without its accent when it is a Latin letter with one.
fn push_folded(c: char, out: &mut String) {
    let mut base = None;
    let mut plain_marks = true;
    unicode_normalization::char::decompose_canonical(c, |d| {
        if base.is_none() {
            base = Some(d);
        } else if !is_diacritic(d) {
            plain_marks = false;
        }
    });
    match base {
        Some(b) if b.is_ascii() && b != c && plain_marks => out.push(b.to_ascii_lowercase()),
        // Final sigma folds like any sigma: "ΟΔΟΣ" and "οδος" are one word.
        _ => out.extend(c.to_lowercase().map(|l| if l == 'ς' { 'σ' } else { l })),
    }
}

/// The term of one word: case folded, Latin accents removed, stemmed when it is 3 to
/// [`MAX_STEMMED`] ASCII letters; `None` when nothing is left (a word of accents alone).
fn fold_and_stem(stemmer: &rust_stemmers::Stemmer, word: &str) -> Option<String> {
    let mut folded = String::with_capacity(word.len());
    if word.is_ascii() {
        folded.push_str(word);
        folded.make_ascii_lowercase();
    } else {
        for c in word.chars().filter(|c| !is_diacritic(*c)) {
            push_folded(c, &mut folded);
        }
    }
    if folded.is_empty() {
        return None;
    }
    let stemmable =
        (3..=MAX_STEMMED).contains(&folded.len()) && folded.bytes().all(|b| b.is_ascii_lowercase());
    if stemmable {
        if let std::borrow::Cow::Owned(stem) = stemmer.stem(&folded) {
            return Some(stem);
        }
    }
    Some(folded)
}

/// The index term of one word (one item of [`words`]); `None` when nothing is left (a word of
/// accents alone).
pub fn normalize(word: &str) -> Option<String> {
    if word.len() > MAX_STEMMED {
        return MEMO.with(|m| fold_and_stem(&m.borrow().stemmer, word));
    }
    MEMO.with(|m| {
        let mut memo = m.borrow_mut();
        memo.make_room();
        let id = memo.term_of(word, hash_with_key(word, pack(word)))?;
        memo.terms.get(id as usize).map(|t| t.to_string())
    })
}

/// What a full-text index gets for `text`: the distinct terms of its words, once each, in
/// first-seen order, separated by single spaces.
///
/// Every row holds each term once: the message index keeps no positions or counts
/// (`detail=none`), and [`crate::core::search`] ranks with a term frequency of 1. A word of letters
/// costs a lookup in the per-thread memo (a text repeats its words, and so does a
/// conversation), and its term is written unless this call already wrote its id. Words with
/// digits (numbers, ids, hashes: most are seen once, and their term is the word lowercased)
/// and words too long to stem are not memoized; their terms are deduplicated by text, for
/// this call only. The two ways never see the same term: a term with an ASCII digit or longer
/// than [`MAX_STEMMED`] bytes is always deduplicated by text, any other by id.
pub fn index_terms(text: &str) -> String {
    let mut out = String::with_capacity(text.len() / 3);
    // Terms deduplicated by text, as (hash, start, end) in `out`.
    let mut by_text: HashTable<(u64, usize, usize)> = HashTable::with_capacity(16);
    let mut scratch = String::new();
    MEMO.with(|m| {
        let mut memo = m.borrow_mut();
        memo.make_room();
        memo.generation += 1;
        let generation = memo.generation;
        let mut scan = words(text);
        while let Some((w, flags)) = scan.next_classified() {
            let ascii = flags & WIDE == 0;
            if !ascii && w.chars().next().is_some_and(is_cjk) {
                // A pair of CJK characters (or one alone), and each character of it as well, so
                // a search for one character finds it. Its terms are CJK only: no word of the
                // memoized kind ever has them.
                write_once(&mut out, &mut by_text, w);
                if w.chars().nth(1).is_some() {
                    for (k, c) in w.char_indices() {
                        write_once(&mut out, &mut by_text, &w[k..k + c.len_utf8()]);
                    }
                }
                continue;
            }
            if ascii && (flags & DIGIT != 0 || w.len() > MAX_STEMMED) {
                let t = if flags & UPPER != 0 {
                    scratch.clear();
                    scratch.push_str(w);
                    scratch.make_ascii_lowercase();
                    scratch.as_str()
                } else {
                    w
                };
                write_once(&mut out, &mut by_text, t);
                continue;
            }
            // Words are memoized as written: "Word" and "word" are two entries, one term id.
            let id = if w.len() > MAX_STEMMED {
                let Some(t) = fold_and_stem(&memo.stemmer, w) else {
                    continue;
                };
                if by_text_only(&t) {
                    write_once(&mut out, &mut by_text, &t);
                    continue;
                }
                // Folding shortened it (accents): a term like any other.
                memo.term_id(&t)
            } else {
                // `w` is a slice of `text`: its offset there lets `pack_at` load whole words.
                let at = (w.as_ptr() as usize).wrapping_sub(text.as_ptr() as usize);
                let key = pack_at(text.as_bytes(), at, w.len());
                match memo.term_of(w, hash_with_key(w, key)) {
                    Some(id) => id,
                    None => continue,
                }
            };
            let id = id as usize;
            let Memo { terms, written, .. } = &mut *memo;
            let (Some(last), Some(term)) = (written.get_mut(id), terms.get(id)) else {
                continue;
            };
            if !ascii && by_text_only(term) {
                // "café2" → "cafe2": the term of an ASCII word with digits.
                write_once(&mut out, &mut by_text, term);
            } else if *last != generation {
                *last = generation;
                push_term(&mut out, term);
            }
        }
    });
    out
}

/// Whether [`index_terms`] deduplicates `term` by its text, never by a memo id: it has an
/// ASCII digit or is longer than [`MAX_STEMMED`] bytes (the terms of the words it does not
/// memoize).
fn by_text_only(term: &str) -> bool {
    term.len() > MAX_STEMMED || term.bytes().any(|b| b.is_ascii_digit())
}

/// Appends `t` to the space-separated terms in `out`.
fn push_term(out: &mut String, t: &str) {
    if !out.is_empty() {
        out.push(' ');
    }
    out.push_str(t);
}

/// Appends `t` to `out` unless `seen` (ranges of `out`) already holds it.
fn write_once(out: &mut String, seen: &mut HashTable<(u64, usize, usize)>, t: &str) {
    let h = hash_of(t);
    if seen
        .find(h, |e| e.0 == h && out.get(e.1..e.2) == Some(t))
        .is_some()
    {
        return;
    }
    push_term(out, t);
    let start = out.len() - t.len();
    seen.insert_unique(h, (h, start, out.len()), |e| e.0);
}

/// Conversations a search is restricted to by their index terms at most; a search over more
/// (a whole agent's or store's) reads the index as a whole, which such a scope nearly is.
pub const MAX_SCOPED_CONVS: usize = 32;

/// The index term every message of conversation `conv` carries besides its words: a search of
/// one conversation reads only that conversation's rows (its statistics are its own, whatever
/// other conversations of the store say). `§` is not a word character, so no word of any text
/// or query ever makes this term; FTS5's `ascii` tokenizer keeps it inside the token.
pub fn conv_term(conv: i64) -> String {
    let mut term = String::new();
    push_conv_term(&mut term, conv);
    term
}

/// Appends conversation `conv`'s term ([`conv_term`]) to the space-separated index terms
/// `terms` (a message's, as [`index_terms`] made them): every message is indexed with it.
pub fn push_conv_term(terms: &mut String, conv: i64) {
    use std::fmt::Write;
    if !terms.is_empty() {
        terms.push(' ');
    }
    let _ = write!(terms, "§c{conv}");
}

/// `fts` (an FTS5 query of quoted terms) restricted to the rows of conversations `convs`, or
/// `fts` itself when they are none or more than [`MAX_SCOPED_CONVS`].
pub fn scoped_query(fts: &str, convs: &[i64]) -> String {
    if convs.is_empty() || convs.len() > MAX_SCOPED_CONVS {
        return fts.to_owned();
    }
    let any: Vec<String> = convs
        .iter()
        .map(|c| format!("\"{}\"", conv_term(*c)))
        .collect();
    format!("({fts}) AND ({})", any.join(" OR "))
}

/// The FTS5 query for one search word: its term quoted (or the terms, ANDed, when `word` holds
/// more than one [`words`] item). `""` (which matches nothing) when it has no term.
pub fn fts_term(word: &str) -> String {
    fts_and_query(word, usize::MAX).unwrap_or_else(|| "\"\"".into())
}

/// An FTS5 query matching the rows that hold every one of the first `max_words` words of
/// `text`, each as a quoted term: whatever `text` holds, the query is never anything but
/// terms. `None` when `text` has no word.
pub fn fts_and_query(text: &str, max_words: usize) -> Option<String> {
    let mut out = String::new();
    for t in words(text).take(max_words).filter_map(normalize) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push('"');
        out.push_str(&t);
        out.push('"');
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cjk_text_is_cut_into_pairs_of_characters() {
        fn w(t: &str) -> Vec<&str> {
            words(t).collect()
        }
        assert_eq!(w("账本七号"), ["账本", "本七", "七号"]);
        assert_eq!(
            w("请查账本七号。谢谢"),
            ["请查", "查账", "账本", "本七", "七号", "谢谢"]
        );
        // Japanese: kanji and kana alike; a character alone is a word of its own.
        assert_eq!(w("東京で会議"), ["東京", "京で", "で会", "会議"]);
        assert_eq!(w("猫 と 犬"), ["猫", "と", "犬"]);
        // Korean separates words by spaces; the pairs still find a stem inside a word.
        assert_eq!(
            w("안녕하세요 세계"),
            ["안녕", "녕하", "하세", "세요", "세계"]
        );
        // Mixed with other scripts: a CJK character ends the word before it.
        assert_eq!(w("queue Q7账本 done"), ["queue", "Q7", "账本", "done"]);
        assert_eq!(w("账本v2"), ["账本", "v2"]);
        assert_eq!(w("Привет世界"), ["Привет", "世界"]);
    }

    #[test]
    fn cjk_terms_hold_pairs_and_single_characters_and_queries_find_them() {
        let terms = index_terms("账本七号在这里");
        let terms: Vec<&str> = terms.split(' ').collect();
        for t in [
            "账本", "本七", "七号", "账", "本", "七", "号", "在这", "这里",
        ] {
            assert!(terms.contains(&t), "{t} in {terms:?}");
        }
        assert_eq!(fts_term("账本七号"), "\"账本\" \"本七\" \"七号\"");
        assert_eq!(fts_term("账"), "\"账\"");
        assert_eq!(index_terms("猫"), "猫");
    }

    #[test]
    fn words_are_folded_unaccented_and_stemmed() {
        for (word, term) in [
            ("Deployments", "deploy"),
            ("deployed", "deploy"),
            ("RUNNING", "run"),
            ("naïve", "naiv"),
            ("Café", "cafe"),
            ("ÉCOLE", "ecol"),
            ("İstanbul", "istanbul"),
            ("x\u{301}y", "xy"),
            ("Привет", "привет"),
            ("ΟΔΟΣ", "οδοσ"),
            ("οδος", "οδοσ"),
            ("мій", "мій"),
            ("日本語", "日本語"),
            ("E0425", "e0425"),
            ("ab", "ab"),
        ] {
            assert_eq!(normalize(word).as_deref(), Some(term), "{word:?}");
        }
        assert_eq!(normalize("\u{301}"), None, "a lone accent is no term");
        let long = "a".repeat(MAX_STEMMED + 1) + "ing";
        assert_eq!(
            normalize(&long).as_deref(),
            Some(long.as_str()),
            "too long to stem"
        );
    }

    /// The plain reading of [`index_terms`]: every word normalized, first occurrences kept.
    fn index_terms_reference(text: &str) -> String {
        let mut seen = std::collections::HashSet::new();
        words(text)
            .flat_map(|w| {
                // A CJK pair is indexed with each of its characters.
                let mut all = vec![w.to_owned()];
                if w.chars().all(is_cjk) && w.chars().count() == 2 {
                    all.extend(w.chars().map(String::from));
                }
                all
            })
            .filter_map(|w| normalize(&w))
            .filter(|t| seen.insert(t.clone()))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// [`words`] the plain way: the runs of word characters, each cut where CJK begins and
    /// ends, a run of CJK characters given as its pairs (a character alone as itself).
    fn words_reference(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        for run in text.split(|c: char| !is_word_char(c)) {
            let chars: Vec<char> = run.chars().collect();
            let mut k = 0;
            while k < chars.len() {
                let cjk = is_cjk(chars[k]);
                let end = (k..chars.len())
                    .find(|&j| is_cjk(chars[j]) != cjk)
                    .unwrap_or(chars.len());
                let piece = &chars[k..end];
                if !cjk {
                    out.push(piece.iter().collect());
                } else if piece.len() == 1 {
                    out.push(piece[0].to_string());
                } else {
                    out.extend(piece.windows(2).map(|p| p.iter().collect::<String>()));
                }
                k = end;
            }
        }
        out
    }

    #[test]
    fn index_terms_are_exact_past_the_filter_of_recent_words() {
        // 3,000 distinct words (far more than the filter's slots, so they collide), each
        // repeated in other cases and forms, with non-ASCII words mixed in.
        let mut text = String::new();
        for i in 0..3_000 {
            text.push_str(&format!("Word{i} naïve-{i} WORD{i} walking walked, "));
            if i % 7 == 0 {
                text.push_str(&format!("word{} Привет ПРИВЕТ\n", i / 2));
            }
        }
        let got = index_terms(&text);
        assert_eq!(got, index_terms_reference(&text));
        assert_eq!(got.split(' ').filter(|w| *w == "word42").count(), 1);
        assert_eq!(got.split(' ').filter(|w| *w == "walk").count(), 1);
        assert_eq!(got.split(' ').filter(|w| *w == "привет").count(), 1);
    }

    proptest::proptest! {
        #[test]
        fn index_terms_match_their_plain_reading(text in "([A-Za-z]{1,6}|[0-9]{1,3}|[ ,.-]|\\PC){0,60}") {
            proptest::prop_assert_eq!(index_terms(&text), index_terms_reference(&text));
        }

        #[test]
        fn words_are_the_runs_of_word_chars(text in "(\\PC|[a-z0-9 ,.\u{300}-\u{36f}]){0,40}") {
            proptest::prop_assert_eq!(words(&text).collect::<Vec<_>>(), words_reference(&text));
            let mut scan = words(&text);
            while let Some((w, flags)) = scan.next_classified() {
                let want = w.bytes().fold(0, |f, b| f | if b.is_ascii() { byte_flags(b) } else { WIDE });
                proptest::prop_assert_eq!(flags, want, "flags of {:?}", w);
            }
            for w in words(&text) {
                let at = (w.as_ptr() as usize) - (text.as_ptr() as usize);
                proptest::prop_assert_eq!(pack_at(text.as_bytes(), at, w.len()), pack(w), "{:?}", w);
            }
        }
    }

    #[test]
    fn eight_bytes_at_once_count_what_one_at_a_time_counts() {
        let one_at_a_time = |x: u64| {
            let run: Vec<u8> = x
                .to_le_bytes()
                .iter()
                .copied()
                .take_while(|b| ascii_word(*b))
                .collect();
            (run.len(), run.iter().fold(0, |f, &b| f | byte_flags(b)))
        };
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut samples: Vec<u64> = b"abcdefghzZaA09/:@[`{\x7f\x80\xff "
            .windows(8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default()))
            .collect();
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            samples.push(x);
            // Mostly word bytes, like text.
            samples.push((x & 0x1f1f_1f1f_1f1f_1f1f) | 0x6060_6060_6060_6060);
        }
        for x in samples {
            assert_eq!(ascii_word_run(x), one_at_a_time(x), "{:#018x}", x);
        }
    }

    #[test]
    fn packed_keys_tell_words_apart() {
        let samples = [
            "a",
            "b",
            "ab",
            "ba",
            "abcdefgh",
            "abcdefg",
            "abcdefghi",
            "abcdefghijklmno",
        ];
        for x in samples {
            for y in samples {
                assert_eq!(pack(x) == pack(y), x == y, "{x:?} {y:?}");
            }
            assert_ne!(pack(x), 0);
        }
        assert_eq!(pack(""), 0);
        // Whole-word loads give the same keys, at any offset, near the end of the text too.
        let text = "xx abcdefghijklmno abcdefgh ab a";
        for w in words(text) {
            let at = text.find(w).unwrap_or_default();
            assert_eq!(pack_at(text.as_bytes(), at, w.len()), pack(w), "{w:?}");
        }
        assert_eq!(
            pack("abcdefghijklmnop"),
            0,
            "16 bytes are compared, not packed"
        );
        assert_eq!(hash_of("abcdefghijklmnopq"), hash_of("abcdefghijklmnopq"));
        assert_ne!(hash_of("abcdefghijklmnopq"), hash_of("abcdefghijklmnopr"));
    }

    #[test]
    fn words_split_where_the_char_rule_splits() {
        let text = "Word42 naïve-x Привет\u{a0}мир 🙂x ﬁle x_y tab\there x\u{301}y 日本語。end";
        assert_eq!(words(text).collect::<Vec<_>>(), words_reference(text));
        assert!(words(text).any(|w| w == "本語"));
        assert_eq!(words("").next(), None);
        assert_eq!(words(" -- ").next(), None);
    }

    #[test]
    fn index_terms_keep_each_term_once_in_first_seen_order() {
        assert_eq!(
            index_terms("Runs, running: RUN src/main.rs — naïve NAÏVE"),
            "run src main rs naiv"
        );
        assert_eq!(index_terms(""), "");
        assert_eq!(index_terms(" ,;\u{301} "), "");
        // Every term is one `ascii` token: ASCII letters and digits, or not ASCII.
        let text = "Word42 naïve-x Привет\u{a0}мир 🙂x ﬁle x_y tab\there";
        for t in index_terms(text).split(' ') {
            assert!(!t.is_empty());
            assert!(
                t.chars()
                    .all(|c| !c.is_ascii() || c.is_ascii_lowercase() || c.is_ascii_digit()),
                "{t:?} would be split by the ascii tokenizer"
            );
        }
    }

    #[test]
    fn numbers_and_ids_are_written_once_and_not_memoized() {
        assert_eq!(
            index_terms("café2 cafe2 CAFE2 x1 X1 E0425 e0425 run2 running"),
            "cafe2 x1 e0425 run2 run"
        );
        let before = MEMO.with(|m| m.borrow().words.len());
        let numbers: String = (0..20_000).map(|i| format!("{} ID{i}x ", i * 7)).collect();
        let got = index_terms(&numbers);
        let after = MEMO.with(|m| m.borrow().words.len());
        assert!(
            after <= before + 2,
            "numbers went into the memo: {before} -> {after}"
        );
        // (The reference goes through `normalize`, which memoizes: checked after.)
        assert_eq!(got, index_terms_reference(&numbers));
    }

    #[test]
    fn queries_are_quoted_terms_only() {
        assert_eq!(
            fts_and_query("Deployments \"OR\" NEAR(x*) -- ;", 16).as_deref(),
            Some("\"deploy\" \"or\" \"near\" \"x\"")
        );
        assert_eq!(fts_and_query("a b c", 2).as_deref(), Some("\"a\" \"b\""));
        assert_eq!(fts_and_query("!!!", 16), None);
        assert_eq!(fts_term("Running"), "\"run\"");
        assert_eq!(fts_term("\u{301}"), "\"\"");
    }

    #[test]
    fn the_memo_gives_what_the_stemmer_gives_across_a_reset() {
        let stemmer = rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English);
        // Distinct letters-only words, more than the memo holds: "aing", "bing", ... "baing".
        let word = |i: usize| {
            let letters: String = i
                .to_string()
                .bytes()
                .map(|d| char::from(b'a' + (d - b'0')))
                .collect();
            letters + "ing"
        };
        let text: String = (0..(MEMO_MAX + 10))
            .map(|i| word(i) + " walking ")
            .collect();
        for round in 0..2 {
            let got = index_terms(&text);
            assert_eq!(got, index_terms_reference(&text), "round {round}");
            assert_eq!(index_terms("Walked walks WALKING"), "walk", "round {round}");
            let held = MEMO.with(|m| m.borrow().words.len());
            assert!(
                held < MEMO_MAX,
                "round {round}: the memo started over ({held} words)"
            );
            for i in (0..(MEMO_MAX + 10)).step_by(997) {
                let w = word(i);
                assert_eq!(
                    normalize(&w).as_deref(),
                    Some(stemmer.stem(&w).as_ref()),
                    "{w}"
                );
            }
        }
        assert_eq!(
            normalize("walking0").as_deref(),
            Some("walking0"),
            "digits are never stemmed"
        );
        let long = "Été".to_string() + &"x".repeat(MAX_STEMMED);
        assert_eq!(
            index_terms(&format!("{long} {long}")),
            "ete".to_string() + &"x".repeat(MAX_STEMMED)
        );
    }
}
