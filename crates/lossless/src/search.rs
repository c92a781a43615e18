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
//! [`crate::store::terms::index_terms`]), so BM25's term frequency is 1 and a row's score is
//! the sum of its matched terms' IDFs, scaled by its length.
//!
//! Cost: at most `terms × TERM_WINDOW` index entries plus one row lookup per candidate, at any
//! history length.

use std::collections::HashSet;

type FastMap<K, V> =
    std::collections::HashMap<K, V, std::hash::BuildHasherDefault<rustc_hash::FxHasher>>;

use rusqlite::{params, OptionalExtension};

use crate::error::Result;
use crate::store::terms::{fts_term, scoped_query, MAX_SCOPED_CONVS};
use crate::store::Db;

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
    let words = || crate::store::terms::words(text).map(str::to_lowercase);
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

impl Db {
    /// The corpus of conversations `convs` (of the whole store past
    /// [`crate::store::terms::MAX_SCOPED_CONVS`], as the term lookups then are), and the
    /// conversations the term lookups are to be scoped to: none when `convs` are every
    /// conversation of the store (a store of one conversation, the common case, then reads its
    /// index unscoped, which is the same rows for less work).
    fn corpus<'a>(&self, convs: &'a [i64]) -> Result<(Corpus, &'a [i64])> {
        let totals = |r: &rusqlite::Row<'_>| Ok((r.get(0)?, r.get(1)?, r.get(2)?));
        let (n_docs, n_tokens, all): (i64, i64, i64) = if convs.len() > MAX_SCOPED_CONVS {
            self.conn.query_row(
                "SELECT ifnull(sum(msg_count), 0), ifnull(sum(msg_tokens), 0), count(*) FROM conversations",
                [],
                totals,
            )?
        } else {
            let mut st = self.conn.prepare_cached(
                "SELECT ifnull(sum(msg_count), 0), ifnull(sum(msg_tokens), 0),
                        (SELECT count(*) FROM conversations)
                 FROM conversations WHERE id IN (SELECT value FROM json_each(?1))",
            )?;
            st.query_row([serde_json::to_string(convs).unwrap_or_default()], totals)?
        };
        let scope = if convs.len() as i64 >= all {
            &[][..]
        } else {
            convs
        };
        Ok((Corpus::from_totals(n_docs, n_tokens), scope))
    }

    /// [`finish_ranking`] reading candidates' rows from the file.
    fn finish_ranking(
        &self,
        corpus: &Corpus,
        cands: Vec<(i64, f64, usize)>,
        convs: &[i64],
        k: usize,
        pool: usize,
    ) -> Result<Vec<RankedMessage>> {
        let mut row = self
            .conn
            .prepare_cached("SELECT conv_id, tokens FROM messages WHERE id = ?1")?;
        finish_ranking(corpus, cands, convs, k, pool, |id| {
            Ok(row
                .query_row([id], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))
                .optional()?)
        })
    }

    /// The `k` best messages of conversations `convs` for `terms` (see the module docs),
    /// skipping the ids in `exclude`, with the terms and rows `rank_for` says. Best first;
    /// ties go to the newer message.
    pub fn ranked_messages(
        &self,
        terms: &[String],
        convs: &[i64],
        k: usize,
        exclude: &HashSet<i64>,
        rank_for: RankFor,
    ) -> Result<Vec<RankedMessage>> {
        if terms.is_empty() || convs.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        self.sync_pending_index()?;
        let (corpus, scope) = self.corpus(convs)?;
        let mut term_rows = Vec::with_capacity(terms.len().min(MAX_TERMS));
        for t in terms.iter().take(MAX_TERMS) {
            if let Some(rows) = self.term_rows(t, rank_for.window(), scope)? {
                if rank_for.keeps(&corpus, rows.len()) {
                    term_rows.push(rows);
                }
            }
        }
        let cands = score_terms(&corpus, &term_rows, exclude);
        self.finish_ranking(&corpus, cands, convs, k, ranking_pool(k))
    }

    /// Ranks `rows`, each known to contain every one of `terms` (an AND query's newest
    /// matches), the same way: document frequencies from the bounded per-term lookups, BM25
    /// with every term at frequency 1. FTS5's own `bm25()` would count every term's whole
    /// document list first, which at a million rows costs more than the search.
    pub fn ranked_rows(
        &self,
        terms: &[String],
        rows: Vec<i64>,
        convs: &[i64],
        k: usize,
    ) -> Result<Vec<RankedMessage>> {
        if rows.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        let (corpus, scope) = self.corpus(convs)?;
        let mut idf_sum = 0.0;
        let mut matched = 0;
        // Both indexes: the newest messages' (in memory) and the file's.
        let mut count = self.conn.prepare_cached(
            "SELECT count(*) FROM (SELECT 1 FROM messages_fts WHERE messages_fts MATCH ?1 LIMIT ?2)",
        )?;
        let mut count_newest = self.conn.prepare_cached(
            "SELECT count(*) FROM (SELECT 1 FROM temp.pending_fts WHERE pending_fts MATCH ?1 LIMIT ?2)",
        )?;
        for t in terms.iter().take(MAX_TERMS) {
            let query = scoped_query(&fts_term(t), scope);
            let newest: i64 = count_newest
                .query_row(params![query, TERM_WINDOW as i64], |r| r.get(0))
                .unwrap_or(0);
            let df: i64 = newest
                + count
                    .query_row(params![query, TERM_WINDOW as i64], |r| r.get::<_, i64>(0))
                    .unwrap_or(0);
            let df = df.min(TERM_WINDOW as i64);
            if df > 0 {
                idf_sum += corpus.idf(df as f64);
                matched += 1;
            }
        }
        // Every row has the same IDF sum: only the length factor tells them apart, so all of
        // them are looked at.
        let pool = rows.len();
        let cands = rows.into_iter().map(|id| (id, idf_sum, matched)).collect();
        self.finish_ranking(&corpus, cands, convs, k, pool)
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
/// once (as [`crate::store::terms::index_terms`] makes them), computed as SQLite does it, so a
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

#[cfg(test)]
mod fts5_tests {
    use super::*;

    /// The same scores as SQLite's own `bm25()` on an index like `summaries_fts`.
    #[test]
    fn fts5_bm25_is_sqlites() {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        c.execute_batch(
            "CREATE VIRTUAL TABLE t USING fts5(text, content='', contentless_delete=1, tokenize='ascii')",
        )
        .unwrap();
        let docs = [
            "deploy server latenc",
            "deploy cach chang improv after",
            "user ask about migrat schema version",
            "deploy",
            "build fail becaus config parser reject valu",
            "日本語 cafe e0425 deploy schema",
        ];
        let terms: Vec<Vec<&str>> = docs.iter().map(|d| d.split(' ').collect()).collect();
        for (i, d) in docs.iter().enumerate() {
            c.execute(
                "INSERT INTO t(rowid, text) VALUES(?1, ?2)",
                rusqlite::params![i as i64 + 1, d],
            )
            .unwrap();
        }
        let n_tokens: i64 = terms.iter().map(|t| t.len() as i64).sum();
        for (query, phrases, or) in [
            ("\"deploy\"", vec!["deploy"], false),
            ("\"deploy\" \"schema\"", vec!["deploy", "schema"], false),
            (
                "\"deploy\" OR \"schema\" OR \"日本語\"",
                vec!["deploy", "schema", "日本語"],
                true,
            ),
            ("\"deploy\" \"deploy\"", vec!["deploy", "deploy"], false),
            ("\"ask\" OR \"valu\"", vec!["ask", "valu"], true),
        ] {
            let mut st = c
                .prepare("SELECT rowid, bm25(t) FROM t WHERE t MATCH ?1 ORDER BY rowid")
                .unwrap();
            let got: Vec<(i64, f64)> = st
                .query_map([query], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            assert!(!got.is_empty(), "{query}");
            let hits: Vec<i64> = phrases
                .iter()
                .map(|p| terms.iter().filter(|t| t.contains(p)).count() as i64)
                .collect();
            for (rowid, score) in got {
                let row = &terms[rowid as usize - 1];
                let present: Vec<bool> = phrases.iter().map(|p| row.contains(p)).collect();
                assert!(or || present.iter().all(|p| *p));
                let ours = fts5_bm25(
                    docs.len() as i64,
                    n_tokens,
                    &hits,
                    &present,
                    row.len() as i64,
                );
                assert_eq!(
                    ours.to_bits(),
                    score.to_bits(),
                    "{query} row {rowid}: {ours} vs {score}"
                );
            }
        }
    }
}
