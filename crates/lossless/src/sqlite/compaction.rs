//! Compaction's store steps on SQLite ([`crate::core::compaction::CompactionSteps`]): the
//! frontier as planning reads it, a round planned, and a round's summaries committed in one
//! transaction (a chunk whose range changed since it was planned is skipped). The rounds, the
//! guard and the summaries themselves are `core`'s.

use std::collections::HashSet;
use std::sync::Arc;

use clawctx_protocol::AgentMessage;
use clawctx_summarize::serialize_conversation;
use clawctx_tokens::{message_tokens, text_tokens};
use rusqlite::params;

use crate::config::LosslessConfig;
use crate::core::assemble::render_summary;
use crate::core::codec::{self};
use crate::core::compaction::{
    choose_ranges, condensed_input, early_stop, make_chunk, Chunk, CompactionOptions,
    CompactionSteps, FItem, Guard, Produced, NOTHING_ELIGIBLE,
};
use crate::error::Result;
use crate::sqlite::{Db, LosslessStore};

impl Db {
    pub(crate) fn load_frontier(&self, conv_id: i64) -> Result<Vec<FItem>> {
        let mut st = self.conn.prepare_cached(
            "SELECT f.ord, f.kind, f.item_id, f.tokens, m.role, m.seq, m.ts, s.depth, s.first_seq, s.last_seq, s.from_ts, s.to_ts
             FROM frontier f
             LEFT JOIN messages m ON f.kind = 0 AND m.id = f.item_id
             LEFT JOIN summaries s ON f.kind = 1 AND s.id = f.item_id
             WHERE f.conv_id = ?1 ORDER BY f.ord",
        )?;
        let rows = st.query_map([conv_id], |r| {
            let (ord, kind, id) = (r.get(0)?, r.get::<_, i64>(1)?, r.get(2)?);
            let tokens = r.get::<_, i64>(3)?.max(0) as u64;
            Ok(if kind == 0 {
                FItem::message(ord, id, tokens, r.get(4)?, r.get(5)?, r.get(6)?)
            } else {
                FItem::summary(
                    ord,
                    id,
                    tokens,
                    r.get(7)?,
                    (r.get(8)?, r.get(9)?),
                    (r.get(10)?, r.get(11)?),
                )
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Plans the next round for `conv_id`: the chunks to summarize (empty = done), and a
    /// reason when empty. The decisions are [`early_stop`] and [`choose_ranges`], shared with
    /// every backend; this reads what they need from the SQLite file.
    pub(crate) fn plan_round(
        &self,
        conv_id: i64,
        cfg: &LosslessConfig,
        opts: &CompactionOptions,
        first_round: bool,
        exclude: &HashSet<i64>,
    ) -> Result<(Vec<Chunk>, String)> {
        let Some(conv) = self.conversation_by_id(conv_id)? else {
            return Ok((Vec::new(), "no conversation".into()));
        };
        let total = conv.frontier_tokens.max(0) as u64;
        if let Some(reason) = early_stop(total, cfg, opts, first_round) {
            return Ok((Vec::new(), reason));
        }
        let items = self.load_frontier(conv_id)?;
        let chosen = choose_ranges(&items, total, cfg, opts, first_round, exclude);
        if chosen.is_empty() {
            return Ok((Vec::new(), NOTHING_ELIGIBLE.into()));
        }
        let mut chunks = Vec::with_capacity(chosen.len());
        for (s, e, depth) in chosen {
            chunks.push(self.build_chunk(conv_id, &items[s..e], depth, cfg, opts.budget)?);
        }
        Ok((chunks, String::new()))
    }

    fn build_chunk(
        &self,
        conv_id: i64,
        items: &[FItem],
        depth: i64,
        cfg: &LosslessConfig,
        budget: u64,
    ) -> Result<Chunk> {
        let input = if depth == 0 {
            let mut st = self.conn.prepare_cached(
                "SELECT role, text, skeleton, ts FROM message_rows WHERE id = ?1",
            )?;
            let mut msgs: Vec<AgentMessage> = Vec::with_capacity(items.len());
            for it in items {
                let (r, text, sk, ts): (i64, String, Option<String>, Option<i64>) = st
                    .query_row([it.id], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                    })?;
                msgs.push(codec::decode(r, &text, sk.as_deref(), ts)?);
            }
            serialize_conversation(&msgs)
        } else {
            let mut st = self
                .conn
                .prepare_cached("SELECT text, from_ts, to_ts FROM summaries WHERE id = ?1")?;
            let mut sources = Vec::with_capacity(items.len());
            for it in items {
                sources.push(st.query_row([it.id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?);
            }
            condensed_input(&sources)
        };
        Ok(make_chunk(conv_id, items, depth, cfg, budget, input))
    }

    /// Commits the round's summaries in one transaction. A chunk whose range changed since it
    /// was planned is skipped. Returns how many were committed.
    pub(crate) fn commit_round(&mut self, produced: Vec<Produced>) -> Result<usize> {
        if produced.is_empty() {
            return Ok(0);
        }
        let bytes: u64 = produced.iter().map(|p| p.text.len() as u64 * 2).sum();
        // One time for the round's summaries: the dashboard's timeline shows summaries of one
        // time and depth as one pass, whatever the commit's own duration.
        let created_at = crate::core::conv::now_ms();
        let committed = self.tx(|c| {
            let mut committed = 0;
            let mut touched = HashSet::new();
            for p in produced {
                let ch = &p.chunk;
                let last_ord = {
                    let mut st = c.prepare_cached(
                        "SELECT ord, kind, item_id FROM frontier WHERE conv_id = ?1 AND ord >= ?2 ORDER BY ord LIMIT ?3",
                    )?;
                    let rows: Vec<(i64, i64, i64)> = st
                        .query_map(params![ch.conv_id, ch.first_ord, ch.items.len() as i64], |r| {
                            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                        })?
                        .collect::<rusqlite::Result<_>>()?;
                    let same = rows.len() == ch.items.len()
                        && rows.first().map(|r| r.0) == Some(ch.first_ord)
                        && rows.iter().zip(&ch.items).all(|(r, it)| (r.1, r.2) == *it);
                    if !same {
                        tracing::warn!("lossless: frontier changed under a planned chunk; skipping it");
                        continue;
                    }
                    rows.last().map(|r| r.0).unwrap_or(ch.first_ord)
                };
                c.prepare_cached(
                    "INSERT INTO summaries(conv_id, depth, tokens, source_tokens, first_seq, last_seq, from_ts, to_ts, summarizer, created_at, text)
                     VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                )?
                .execute(params![
                    ch.conv_id,
                    ch.depth,
                    text_tokens(&p.text) as i64,
                    ch.source_tokens as i64,
                    ch.seq_lo,
                    ch.seq_hi,
                    ch.ts_lo,
                    ch.ts_hi,
                    p.summarizer,
                    created_at,
                    p.text
                ])?;
                let sid = c.last_insert_rowid();
                c.prepare_cached("INSERT INTO summaries_fts(rowid, text) VALUES(?1, ?2)")?
                    .execute(params![sid, crate::core::terms::index_terms(&p.text)])?;
                {
                    let mut ins = c.prepare_cached("INSERT INTO summary_children(summary_id, ord, kind, child_id) VALUES(?1, ?2, ?3, ?4)")?;
                    for (i, (kind, id)) in ch.items.iter().enumerate() {
                        ins.execute(params![sid, i as i64, kind, id])?;
                    }
                }
                let rendered = render_summary(sid, ch.depth, ch.ts_lo, ch.ts_hi, &p.text);
                let item_tokens = message_tokens(&rendered);
                c.prepare_cached("DELETE FROM frontier WHERE conv_id = ?1 AND ord BETWEEN ?2 AND ?3")?
                    .execute(params![ch.conv_id, ch.first_ord, last_ord])?;
                c.prepare_cached("INSERT INTO frontier(conv_id, ord, kind, item_id, tokens) VALUES(?1, ?2, 1, ?3, ?4)")?
                    .execute(params![ch.conv_id, ch.first_ord, sid, item_tokens as i64])?;
                let removed: u64 = ch.item_tokens.iter().sum();
                c.prepare_cached(
                    "UPDATE conversations SET frontier_tokens = frontier_tokens - ?2 + ?3, frontier_items = frontier_items - ?4 + 1 WHERE id = ?1",
                )?
                .execute(params![ch.conv_id, removed as i64, item_tokens as i64, ch.items.len() as i64])?;
                touched.insert(ch.conv_id);
                committed += 1;
            }
            for conv in touched {
                c.prepare_cached("UPDATE conversations SET epoch = epoch + 1 WHERE id = ?1")?.execute([conv])?;
            }
            Ok(committed)
        })?;
        self.wrote(bytes);
        Ok(committed)
    }

    pub(crate) fn guard_load(&self, conv_id: i64) -> Result<Guard> {
        use rusqlite::OptionalExtension;
        Ok(self
            .conn
            .prepare_cached(
                "SELECT window_start_ms, calls_in_window, consecutive_failures, breaker_open_until_ms FROM guard_state WHERE conv_id = ?1",
            )?
            .query_row([conv_id], |r| {
                Ok(Guard {
                    window_start_ms: r.get(0)?,
                    calls_in_window: r.get(1)?,
                    consecutive_failures: r.get(2)?,
                    breaker_open_until_ms: r.get(3)?,
                })
            })
            .optional()?
            .unwrap_or_default())
    }

    pub(crate) fn guard_store(&mut self, conv_id: i64, g: &Guard, new_failures: i64) -> Result<()> {
        self.tx(|c| {
            c.prepare_cached(
                "INSERT INTO guard_state(conv_id, window_start_ms, calls_in_window, consecutive_failures, breaker_open_until_ms, total_failures)
                 VALUES(?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT(conv_id) DO UPDATE SET window_start_ms = ?2, calls_in_window = ?3, consecutive_failures = ?4,
                   breaker_open_until_ms = ?5, total_failures = total_failures + ?6",
            )?
            .execute(params![
                conv_id,
                g.window_start_ms,
                g.calls_in_window,
                g.consecutive_failures,
                g.breaker_open_until_ms,
                new_failures
            ])?;
            Ok(())
        })
    }
}

#[async_trait::async_trait]
impl CompactionSteps for LosslessStore {
    async fn frontier_tokens(&self, conv_id: i64) -> Result<i64> {
        self.call(move |db| {
            Ok(db
                .conversation_by_id(conv_id)?
                .map(|c| c.frontier_tokens)
                .unwrap_or(0))
        })
        .await
    }

    async fn plan_round(
        &self,
        conv_id: i64,
        cfg: Arc<LosslessConfig>,
        opts: CompactionOptions,
        first_round: bool,
        exclude: HashSet<i64>,
    ) -> Result<(Vec<Chunk>, String, Guard)> {
        self.call(move |db| {
            let (chunks, reason) = db.plan_round(conv_id, &cfg, &opts, first_round, &exclude)?;
            let guard = db.guard_load(conv_id)?;
            Ok((chunks, reason, guard))
        })
        .await
    }

    async fn commit_round(
        &self,
        conv_id: i64,
        produced: Vec<Produced>,
        guard: Guard,
        failures: i64,
    ) -> Result<usize> {
        self.call(move |db| {
            let n = db.commit_round(produced)?;
            db.guard_store(conv_id, &guard, failures)?;
            Ok(n)
        })
        .await
    }
}
