//! Ranked any-term search on SQLite: each term's newest matches from the full-text indexes (the
//! newest messages' in-memory index first, then the file's; lists kept between queries), scored
//! by [`crate::core::search`]'s BM25 over those windows.

use std::collections::HashSet;

use rusqlite::{params, OptionalExtension};

use crate::core::search::{
    finish_ranking, ranking_pool, score_terms, Corpus, RankFor, RankedMessage, MAX_TERMS,
    TERM_WINDOW,
};
use crate::core::terms::{fts_term, scoped_query, MAX_SCOPED_CONVS};
use crate::error::Result;
use crate::sqlite::Db;

impl Db {
    /// The corpus of conversations `convs` (of the whole store past
    /// [`crate::core::terms::MAX_SCOPED_CONVS`], as the term lookups then are), and the
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

impl Db {
    /// The newest rows whose message contains `term`, at most `window`, newest first; `None`
    /// when the term cannot be searched (the tokenizer reduces it to nothing). Reads the
    /// newest messages' index and then the file's (see [`super::pending_fts`]; callers run
    /// [`Db::sync_pending_index`] first).
    ///
    /// `convs`: only the rows of these conversations (see [`crate::core::terms::scoped_query`]).
    pub fn term_rows(&self, term: &str, window: usize, convs: &[i64]) -> Result<Option<Vec<i64>>> {
        let query = scoped_query(&fts_term(term), convs);
        let key = (query.clone(), window);
        let upto = self.pending.get().upto;
        let cached = self.term_rows.borrow().lists.get(&key).cloned();
        // The file's index has not changed since the list was read: nothing new there.
        let file_unchanged = cached.as_ref().is_some_and(|(_, at)| *at == upto);
        let cached = cached.map(|(rows, _)| rows);
        let above = cached.as_ref().and_then(|rows| rows.first().copied());
        let mut rows = Vec::new();
        for (sql, skip) in [
            (
                "SELECT rowid FROM temp.pending_fts WHERE pending_fts MATCH ?1 AND rowid > ?2
                 ORDER BY rowid DESC LIMIT ?3",
                false,
            ),
            (
                "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?1 AND rowid > ?2
                 ORDER BY rowid DESC LIMIT ?3",
                file_unchanged,
            ),
        ] {
            let left = window.saturating_sub(rows.len());
            if left == 0 || skip {
                break;
            }
            let fresh = self
                .conn
                .prepare_cached(sql)?
                .query_map(
                    params![query, above.unwrap_or(i64::MIN), left as i64],
                    |r| r.get::<_, i64>(0),
                )
                .and_then(|it| it.collect::<rusqlite::Result<Vec<i64>>>());
            match fresh {
                Ok(found) => rows.extend(found),
                Err(_) => return Ok(None),
            }
        }
        if let Some(old) = cached {
            // `old` was the whole window when it was read; the new rows go on top.
            rows.extend(old.into_iter().take(window.saturating_sub(rows.len())));
        }
        self.term_rows.borrow_mut().put(key, rows.clone(), upto);
        Ok(Some(rows))
    }
}

#[cfg(test)]
mod fts5_tests {
    use crate::core::search::fts5_bm25;

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
