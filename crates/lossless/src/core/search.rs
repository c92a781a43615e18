//! Any-term ranked search: the messages that share the most (and rarest) words with a free-text
//! query, such as a user's question.
//!
//! An FTS5 `OR` query ordered by `bm25()` cannot be bounded well: its cost is the sum of all
//! the terms' document lists, and a window over its newest matches is flooded by the common
//! terms (a speaker's name) so older rows matching the rare ones fall out of it. So each term
//! is looked up on its own, newest first, capped at [`TERM_WINDOW`] rows: a rare term's whole
//! list, a common term's newest stretch. The document frequency of each term comes out of the
//! same lookup (exact below the cap), the scores are summed here, and BM25's length
//! normalization is applied to the best candidates only, from the token counts stored with
//! every message. Every indexed row holds each of its words once (see
//! [`crate::core::terms::index_terms`]), so BM25's term frequency is 1 and a row's score is
//! the sum of its matched terms' IDFs, scaled by its length.
//!
//! Cost: at most `terms × TERM_WINDOW` index entries plus one row lookup per candidate, at any
//! history length.

use std::collections::HashSet;

type FastMap<K, V> =
    std::collections::HashMap<K, V, std::hash::BuildHasherDefault<rustc_hash::FxHasher>>;

use crate::error::Result;

/// Newest matches read per term by `lcm_grep` (and for document frequencies).
pub const TERM_WINDOW: usize = 4_000;
/// Newest matches read per term by prompt recall, which runs on every assembly: a term found
/// in more rows than this is common enough that its IDF barely counts (LoCoMo reachability
/// was the same at 1,000).
pub const PROMPT_TERM_WINDOW: usize = 500;
/// What a ranked search is for: how many rows each term reads, and which terms count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RankFor {
    /// `lcm_grep`: every term, [`TERM_WINDOW`] rows each.
    Grep,
    /// Prompt recall, on every assembly: [`PROMPT_TERM_WINDOW`] rows a term, and only the
    /// terms that cue recall ([`RankFor::keeps`]).
    Prompt,
}

impl RankFor {
    /// Newest matches read per term.
    pub fn window(self) -> usize {
        match self {
            RankFor::Grep => TERM_WINDOW,
            RankFor::Prompt => PROMPT_TERM_WINDOW,
        }
    }

    /// Whether a term found in `df` stored messages (read up to [`RankFor::window`]) counts,
    /// in a corpus of `corpus` messages. For prompt recall only a telling word does: one in
    /// fewer than one stored message in ten, and in fewer than the window. A prompt made of
    /// common words ("what do you think about it now?") then quotes nothing instead of a
    /// block of messages that share those words with it, which would fill a quarter of the
    /// context with noise that is never cached (issue #29).
    pub(crate) fn keeps(self, corpus: &Corpus, df: usize) -> bool {
        match self {
            RankFor::Grep => true,
            RankFor::Prompt => df < self.window() && df as f64 * 10.0 <= corpus.n,
        }
    }
}

/// Terms of one query at most (the first ones win).
pub const MAX_TERMS: usize = 24;
/// Terms of a prompt searched by prompt recall at most: the longest ones (long words tend to
/// be the rare, telling ones), so a long prompt does not cost a lookup per word.
pub const MAX_PROMPT_TERMS: usize = 12;

/// [`query_terms`] of a prompt, cut to its [`MAX_PROMPT_TERMS`] longest words.
pub fn prompt_terms(text: &str) -> Vec<String> {
    let mut terms = query_terms(text);
    if terms.len() > MAX_PROMPT_TERMS {
        // Stable: equally long words keep their order.
        terms.sort_by_key(|t| std::cmp::Reverse(t.chars().count()));
        terms.truncate(MAX_PROMPT_TERMS);
    }
    terms
}
/// BM25 parameters (the usual defaults, as FTS5's `bm25()`).
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// English function words and question words: they match nearly every row and say nothing
/// about which one the query is after.
pub const STOPWORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "down",
    "during",
    "each",
    "ever",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "me",
    "might",
    "more",
    "most",
    "must",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "same",
    "shall",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "us",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "whose",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
    "s",
    "t",
    "don",
    "didn",
    "doesn",
    "isn",
    "wasn",
    "won",
    "ll",
    "ve",
    "re",
    "d",
    "m",
    "o",
    "y",
];

/// The words of `text` worth searching for: lowercase alphanumeric runs, stopwords and
/// one-character words dropped, each once, in order, at most [`MAX_TERMS`]. When nothing
/// survives the stopword filter the plain words are used, so a query of only common words
/// still searches.
pub fn query_terms(text: &str) -> Vec<String> {
    let words = || crate::core::terms::words(text).map(str::to_lowercase);
    let mut seen = HashSet::new();
    let mut out: Vec<String> = words()
        .filter(|w| w.chars().count() > 1 && !STOPWORDS.contains(&w.as_str()))
        .filter(|w| seen.insert(w.clone()))
        .take(MAX_TERMS)
        .collect();
    if out.is_empty() {
        out = words()
            .filter(|w| seen.insert(w.clone()))
            .take(MAX_TERMS)
            .collect();
    }
    out
}

/// One ranked message.
#[derive(Clone, Debug, PartialEq)]
pub struct RankedMessage {
    /// `messages.id`.
    pub id: i64,
    /// Its conversation.
    pub conv_id: i64,
    /// BM25 (higher is better).
    pub score: f64,
    /// Query terms it contains.
    pub matched: usize,
    /// Its stored token count.
    pub tokens: u64,
}

/// Corpus size and mean message length (tokens), over the conversations searched: one
/// conversation's recall does not depend on what the others of a shared store say.
pub(crate) struct Corpus {
    n: f64,
    avg_len: f64,
}

impl Corpus {
    /// The corpus of `n_docs` messages totalling `n_tokens` tokens.
    pub(crate) fn from_totals(n_docs: i64, n_tokens: i64) -> Self {
        let n = n_docs.max(1) as f64;
        Corpus {
            n,
            avg_len: (n_tokens as f64 / n).max(1.0),
        }
    }

    pub(crate) fn idf(&self, df: f64) -> f64 {
        ((self.n - df + 0.5) / (df + 0.5) + 1.0).ln()
    }
    /// BM25's length factor for a row of `len` tokens (every term at frequency 1).
    pub(crate) fn norm(&self, len: f64) -> f64 {
        (K1 + 1.0) / (1.0 + K1 * (1.0 - B + B * len / self.avg_len))
    }
}

/// Accumulates per-term matches into candidates `(id, sum of matched terms' IDF, terms
/// matched)`: `term_rows` holds, per query term, the newest matching ids (at most the
/// window), whose count is the term's document frequency. Ids in `exclude` are dropped.
pub(crate) fn score_terms(
    corpus: &Corpus,
    term_rows: &[Vec<i64>],
    exclude: &HashSet<i64>,
) -> Vec<(i64, f64, usize)> {
    let mut acc: FastMap<i64, (f64, usize)> = FastMap::default();
    for rows in term_rows.iter().filter(|r| !r.is_empty()) {
        let idf = corpus.idf(rows.len() as f64);
        for id in rows {
            let e = acc.entry(*id).or_insert((0.0, 0));
            e.0 += idf;
            e.1 += 1;
        }
    }
    acc.into_iter()
        .filter(|(id, _)| !exclude.contains(id))
        .map(|(id, (s, m))| (id, s, m))
        .collect()
}

/// The order candidates are looked at in: best IDF sum first, ties to the newer message.
pub(crate) fn sort_candidates(cands: &mut [(i64, f64, usize)]) {
    cands.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
}

/// How many of the sorted candidates [`finish_ranking`] may look at, at most.
pub(crate) fn lookup_bound(pool: usize) -> usize {
    pool * 8
}

/// The candidates [`finish_ranking`] applies the length factor to for `k` results.
pub(crate) fn ranking_pool(k: usize) -> usize {
    (k * 8).max(200)
}

/// Scores candidates `(id, sum of matched terms' IDF, terms matched)`: best by IDF first,
/// then BM25's length factor from the stored token counts (`row` reads a message's
/// `(conv_id, tokens)`), conversations outside `convs` dropped. Best first; ties go to the
/// newer message. Shared by every backend.
pub(crate) fn finish_ranking(
    corpus: &Corpus,
    mut cands: Vec<(i64, f64, usize)>,
    convs: &[i64],
    k: usize,
    pool: usize,
    mut row: impl FnMut(i64) -> Result<Option<(i64, i64)>>,
) -> Result<Vec<RankedMessage>> {
    // The length factor changes a score by a bounded ratio, so the best rows by IDF alone
    // are a safe pool to apply it to.
    sort_candidates(&mut cands);
    let in_scope: HashSet<i64> = convs.iter().copied().collect();
    let mut out = Vec::with_capacity(pool.min(cands.len()));
    let mut looked = 0usize;
    for (id, idf_sum, matched) in cands {
        // Out-of-scope rows do not count against the pool, up to a bound.
        if looked >= pool && (out.len() >= k || looked >= lookup_bound(pool)) {
            break;
        }
        looked += 1;
        let Some((conv_id, tokens)) = row(id)? else {
            continue;
        };
        if !in_scope.contains(&conv_id) {
            continue;
        }
        out.push(RankedMessage {
            id,
            conv_id,
            score: idf_sum * corpus.norm(tokens.max(1) as f64),
            matched,
            tokens: tokens.max(0) as u64,
        });
    }
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.id.cmp(&a.id)));
    out.truncate(k);
    Ok(out)
}

/// FTS5's `bm25()` of one row of a full-text index in which every row holds each of its terms
/// once (as [`crate::core::terms::index_terms`] makes them), computed as SQLite does it, so a
/// backend without FTS5 ranks summaries exactly as the SQLite store's `summaries_fts` does:
/// `n_rows` rows in the index, `n_tokens` terms in all of them, `phrase_rows[i]` the rows
/// holding phrase `i` of the query, `present[i]` whether this row holds it, `row_len` its
/// terms. Lower is better (negated, as FTS5 returns it).
pub(crate) fn fts5_bm25(
    n_rows: i64,
    n_tokens: i64,
    phrase_rows: &[i64],
    present: &[bool],
    row_len: i64,
) -> f64 {
    let avgdl = n_tokens as f64 / n_rows as f64;
    let d = row_len as f64;
    let mut score = 0.0;
    for (hits, here) in phrase_rows.iter().zip(present) {
        let mut idf = (((n_rows - hits) as f64 + 0.5) / (*hits as f64 + 0.5)).ln();
        if idf <= 0.0 {
            idf = 1e-6;
        }
        let f = if *here { 1.0 } else { 0.0 };
        score += idf * ((f * (K1 + 1.0)) / (f + K1 * (1.0 - B + B * d / avgdl)));
    }
    -score
}
