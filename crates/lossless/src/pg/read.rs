//! Reads of the PostgreSQL store on a turn's path: assembly (with its prompt-recall search)
//! and the ranked any-term search both it and `lcm_grep` use.
//!
//! Assembly reads in one repeatable-read, read-only transaction, so the conversation row,
//! the frontier and the recall search see one snapshot, as SQLite's read transaction does.
//! The frontier is read newest first a page at a time (each page a query with its own LIMIT) and the walk stops
//! where the packer does (the budget is full), so a long frontier costs what is shown, not
//! what is stored. Nothing is cached between calls: another node's write is seen by the next
//! assembly.

use std::collections::HashSet;

use deadpool_postgres::{GenericClient, Transaction};

use super::store::PgStore;
use crate::core::assemble::{Assembled, Hysteresis, Item, Packer, Stored};
use crate::core::backend::{live_tail, recall_for, AssembleRequest};
use crate::core::conv::ConvRow;
use crate::core::prompt_recall::{block_of, wanted, PromptRecall, RecalledBlock};
use crate::core::search::{
    finish_ranking, lookup_bound, ranking_pool, score_terms, sort_candidates, Corpus, RankFor,
    RankedMessage, MAX_TERMS,
};
use crate::core::terms::{normalize, words, MAX_SCOPED_CONVS};
use crate::error::Result;

/// Frontier rows read per page of the walk (a context of 32k tokens of chat is about 100).
const PAGE: i64 = 128;

/// The `tsquery` matching rows that hold every term of `word` (one search word, as
/// [`crate::core::terms::fts_term`] makes FTS5's), each a quoted lexeme: nothing in `word` is
/// ever read as query syntax. `None` when `word` has no term (such a word matches nothing).
pub(crate) fn tsquery_of(word: &str) -> Option<String> {
    let mut out = String::new();
    for t in words(word).filter_map(normalize) {
        if !out.is_empty() {
            out.push_str(" & ");
        }
        out.push('\'');
        for ch in t.chars() {
            match ch {
                '\'' => out.push_str("''"),
                '\\' => out.push_str("\\\\"),
                c => out.push(c),
            }
        }
        out.push('\'');
    }
    (!out.is_empty()).then_some(out)
}

impl PgStore {
    /// The conversations of `key`'s session (active and archived): prompt recall's scope.
    async fn session_conversations(
        c: &impl GenericClient,
        agent_id: &str,
        session_key: &str,
    ) -> Result<Vec<i64>> {
        let st = c
            .prepare_cached(
                "SELECT id FROM conversations WHERE agent_id = $1 AND session_key = $2 ORDER BY id",
            )
            .await?;
        let rows = c.query(&st, &[&agent_id, &session_key]).await?;
        rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
    }

    /// See [`crate::core::backend::Backend::assemble`].
    pub(crate) async fn assemble_context(
        &self,
        req: &AssembleRequest,
    ) -> Result<Option<(ConvRow, Assembled)>> {
        let mut client = self.client().await?;
        let tx = Self::snapshot(&mut client).await?;
        let Some(conv) = Self::conversation_on(&tx, &req.key).await? else {
            return Ok(None);
        };
        let mut ids = Vec::with_capacity(req.recent.len());
        for m in &req.recent {
            ids.push(crate::core::codec::identity(m)?);
        }
        let held = super::store::stored_identities(&tx, conv.id, &ids).await?;
        let first_live = live_tail(&req.recent, |ts, hash| {
            Ok(held.contains(&(ts.unwrap_or(0), hash)))
        })?;
        let live = req.recent[first_live..].to_vec();
        // The session's conversations are read only when the block is wanted.
        let convs = if req.recall_reserve > 0 {
            Self::session_conversations(&tx, &req.key.agent_id, &req.key.session_key).await?
        } else {
            Vec::new()
        };
        let recall = recall_for(req, &live, || Ok(convs))?;
        let hysteresis = Hysteresis {
            front: self.fronts.get(conv.id, req.budget),
            block_share: req.cache_block_share,
            whole_first: req.whole_first,
        };
        let mut p = Packer::new(
            live,
            req.budget,
            recall.as_ref(),
            Some(conv.frontier_tokens.max(0) as u64),
            hysteresis,
        );
        // Page by page, newest first, each page a query of its own with its LIMIT: planned for
        // the rows it returns (a portal over the whole frontier is planned for all of them, and
        // joined every message's text before the first row came back).
        let page = tx
            .prepare_cached(
                "SELECT f.ord, f.kind::bigint, f.item_id, f.tokens, m.role::bigint, m.n_calls::bigint, m.text,
                        m.skeleton, m.ts, s.depth::bigint, s.from_ts, s.to_ts, s.text
                 FROM frontier f
                 LEFT JOIN messages m ON f.kind = 0 AND m.id = f.item_id
                 LEFT JOIN summaries s ON f.kind = 1 AND s.id = f.item_id
                 WHERE f.conv_id = $1 AND f.ord < $2 ORDER BY f.ord DESC LIMIT $3",
            )
            .await?;
        let mut before = i64::MAX;
        'walk: while !p.done() {
            let rows = tx.query(&page, &[&conv.id, &before, &PAGE]).await?;
            let last_page = rows.len() < PAGE as usize;
            for r in &rows {
                if p.done() {
                    break 'walk;
                }
                before = r.try_get(0)?;
                let kind: i64 = r.try_get(1)?;
                let tokens = r.try_get::<_, i64>(3)?.max(0) as u64;
                let item = if kind == 0 {
                    let text: Option<String> = r.try_get(6)?;
                    let Some(text) = text else {
                        return Err(crate::error::LosslessError::Corrupt(format!(
                            "frontier names message {}, which is not stored",
                            r.try_get::<_, i64>(2)?
                        )));
                    };
                    Item::Message {
                        id: r.try_get(2)?,
                        role: r.try_get(4)?,
                        n_calls: r.try_get(5)?,
                        tokens,
                        stored: Stored::Raw {
                            text,
                            skeleton: r.try_get(7)?,
                            ts: r.try_get(8)?,
                        },
                    }
                } else {
                    Item::Summary {
                        id: r.try_get(2)?,
                        depth: r.try_get(9)?,
                        from_ts: r.try_get(10)?,
                        to_ts: r.try_get(11)?,
                        text: r.try_get(12)?,
                        tokens,
                    }
                };
                p.push(item);
            }
            if last_page {
                break;
            }
        }
        let packed = p.finish(req.budget, None)?;
        let block = match &packed.recall {
            Some(r) => Self::recalled_block(&tx, r, &packed.shown).await?,
            None => None,
        };
        let out = packed.with_recall(block);
        tx.commit().await?;
        self.fronts.set(conv.id, req.budget, out.front);
        Ok(Some((conv, out)))
    }

    /// The `<recalled>` block for `r` (see [`crate::core::prompt_recall`]).
    async fn recalled_block(
        tx: &Transaction<'_>,
        r: &PromptRecall,
        exclude: &HashSet<i64>,
    ) -> Result<Option<RecalledBlock>> {
        if !wanted(r) {
            return Ok(None);
        }
        let ranked = Self::ranked_messages(
            tx,
            &r.terms,
            &r.convs,
            r.max_messages,
            exclude,
            RankFor::Prompt,
        )
        .await?;
        let ranked = crate::core::prompt_recall::fused(ranked, r, exclude);
        if ranked.is_empty() {
            return Ok(None);
        }
        let ids: Vec<i64> = ranked.iter().map(|h| h.id).collect();
        let rows = tx
            .query(
                "SELECT id, role::bigint, ts, text FROM messages WHERE id = ANY($1)",
                &[&ids],
            )
            .await?;
        let mut texts = std::collections::HashMap::with_capacity(rows.len());
        for row in &rows {
            let id: i64 = row.try_get(0)?;
            texts.insert(id, (row.try_get(1)?, row.try_get(2)?, row.try_get(3)?));
        }
        // The message after each hit, which the block quotes after a hit that asks something
        // (see `block_of`), read with the hits in one statement.
        let rows = tx
            .query(
                "SELECT h.id, n.id, n.tokens, n.role::bigint, n.ts, n.text FROM messages h \
                 JOIN messages n ON n.conv_id = h.conv_id AND n.seq = h.seq + 1 \
                 WHERE h.id = ANY($1)",
                &[&ids],
            )
            .await?;
        let mut next = std::collections::HashMap::with_capacity(rows.len());
        for row in &rows {
            let (hit, id, tokens): (i64, i64, i64) =
                (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
            next.insert(hit, (id, tokens.max(0) as u64));
            texts
                .entry(id)
                .or_insert((row.try_get(3)?, row.try_get(4)?, row.try_get(5)?));
        }
        block_of(
            r,
            ranked,
            exclude,
            |id| {
                texts.remove(&id).ok_or_else(|| {
                    crate::error::LosslessError::Corrupt(format!(
                        "ranked message {id} is not stored"
                    ))
                })
            },
            |id| Ok(next.get(&id).copied()),
        )
    }

    /// The corpus the ranking normalizes by: the messages of conversations `convs` (of the
    /// whole store past [`MAX_SCOPED_CONVS`], as the term lookups then are).
    pub(crate) async fn corpus(c: &impl GenericClient, convs: &[i64]) -> Result<Corpus> {
        let r = if convs.len() > MAX_SCOPED_CONVS {
            let st = c
                .prepare_cached(
                    "SELECT coalesce(sum(msg_count), 0)::bigint, coalesce(sum(msg_tokens), 0)::bigint FROM conversations",
                )
                .await?;
            c.query_one(&st, &[]).await?
        } else {
            let st = c
                .prepare_cached(
                    "SELECT coalesce(sum(msg_count), 0)::bigint, coalesce(sum(msg_tokens), 0)::bigint FROM conversations WHERE id = ANY($1)",
                )
                .await?;
            c.query_one(&st, &[&convs]).await?
        };
        Ok(Corpus::from_totals(r.try_get(0)?, r.try_get(1)?))
    }

    /// The newest messages of conversations `convs` (of any, past [`MAX_SCOPED_CONVS`])
    /// holding every term of the search word `word`, at most `window`, newest first (see
    /// [`crate::sqlite::Db::term_rows`]).
    pub(crate) async fn term_rows(
        c: &impl GenericClient,
        word: &str,
        window: usize,
        convs: &[i64],
    ) -> Result<Vec<i64>> {
        let Some(q) = tsquery_of(word) else {
            return Ok(Vec::new());
        };
        let rows = if convs.is_empty() || convs.len() > MAX_SCOPED_CONVS {
            c.query(
                "SELECT id FROM messages WHERE terms @@ $1::text::tsquery ORDER BY id DESC LIMIT $2",
                &[&q, &(window as i64)],
            )
            .await?
        } else {
            c.query(
                "SELECT id FROM messages WHERE conv_id = ANY($3) AND terms @@ $1::text::tsquery
                 ORDER BY id DESC LIMIT $2",
                &[&q, &(window as i64), &convs],
            )
            .await?
        };
        rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
    }

    /// The `k` best messages of conversations `convs` for `terms`, as
    /// [`crate::sqlite::Db::ranked_messages`] ranks them.
    pub(crate) async fn ranked_messages(
        c: &impl GenericClient,
        terms: &[String],
        convs: &[i64],
        k: usize,
        exclude: &HashSet<i64>,
        rank_for: RankFor,
    ) -> Result<Vec<RankedMessage>> {
        if terms.is_empty() || convs.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        let corpus = Self::corpus(c, convs).await?;
        let mut term_rows = Vec::with_capacity(terms.len().min(MAX_TERMS));
        for t in terms.iter().take(MAX_TERMS) {
            let rows = Self::term_rows(c, t, rank_for.window(), convs).await?;
            if rank_for.keeps(&corpus, rows.len()) {
                term_rows.push(rows);
            }
        }
        let cands = score_terms(&corpus, &term_rows, exclude);
        Self::finish_ranking(c, &corpus, cands, convs, k, ranking_pool(k)).await
    }

    /// [`finish_ranking`] with the rows of the candidates it may look at read by id: the first
    /// `pool` of them, and the rest of its bound only when fewer than `k` of those are in
    /// scope (the only case in which it looks further).
    pub(crate) async fn finish_ranking(
        c: &impl GenericClient,
        corpus: &Corpus,
        mut cands: Vec<(i64, f64, usize)>,
        convs: &[i64],
        k: usize,
        pool: usize,
    ) -> Result<Vec<RankedMessage>> {
        sort_candidates(&mut cands);
        let bound = lookup_bound(pool).max(pool).min(cands.len());
        let first = pool.min(bound);
        let st = c
            .prepare_cached("SELECT id, conv_id, tokens FROM messages WHERE id = ANY($1)")
            .await?;
        let mut found = std::collections::HashMap::with_capacity(first);
        let read = |ids: Vec<i64>| {
            let st = &st;
            async move { c.query(st, &[&ids]).await }
        };
        for r in &read(cands[..first].iter().map(|c| c.0).collect()).await? {
            found.insert(
                r.try_get::<_, i64>(0)?,
                (r.try_get::<_, i64>(1)?, r.try_get::<_, i64>(2)?),
            );
        }
        let in_scope = found
            .values()
            .filter(|(conv, _)| convs.contains(conv))
            .count();
        if in_scope < k && bound > first {
            for r in &read(cands[first..bound].iter().map(|c| c.0).collect()).await? {
                found.insert(
                    r.try_get::<_, i64>(0)?,
                    (r.try_get::<_, i64>(1)?, r.try_get::<_, i64>(2)?),
                );
            }
        }
        finish_ranking(corpus, cands, convs, k, pool, |id| {
            Ok(found.get(&id).copied())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_word_becomes_quoted_lexemes_only() {
        assert_eq!(tsquery_of("Deployments").as_deref(), Some("'deploy'"));
        assert_eq!(tsquery_of("!!!"), None);
        // Query syntax in the word stays text.
        let q = tsquery_of("a&b|c:*").unwrap_or_default();
        assert!(!q.contains('|') && !q.contains(":*"), "{q}");
    }
}
