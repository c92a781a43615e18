//! Writes to the PostgreSQL store: ingest and `commitTurn`, the compaction's steps and its
//! cross-node lock, `/new` carries.
//!
//! Each write is one transaction that starts by locking its conversation's row (see
//! [`super::store`]), so what SQLite's single writer guarantees holds across nodes: a batch's
//! duplicate check and its sequence numbers see every committed message, and a compaction's
//! commit sees the frontier as it is.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use clawctx_protocol::AgentMessage;
use clawctx_tokens::{message_tokens, text_tokens};
use deadpool_postgres::GenericClient;

use super::store::PgStore;
use crate::config::LosslessConfig;
use crate::core::assemble::render_summary;
use crate::core::backend::CompactionLock;
use crate::core::codec::{self, Encoded};
use crate::core::compaction::{
    choose_ranges, condensed_input, early_stop, make_chunk, Chunk, CompactionOptions,
    CompactionSteps, FItem, Guard, Produced, NOTHING_ELIGIBLE,
};
use crate::core::conv::{now_ms, ConvKey, ConvRow, IngestOutcome};
use crate::core::session::CarryReport;
use crate::core::terms::index_terms;
use crate::error::{LosslessError, Result};

/// Advisory-lock key space of compactions: `(COMPACTION_LOCK_CLASS, conversation id)` as the
/// two-integer form of `pg_advisory_lock`, apart from the schema migration's lock.
const COMPACTION_LOCK_CLASS: i32 = 0x636c_7363;

/// Encodes `msgs` off the async runtime when there are many (token counting and the codec
/// cost tens of microseconds a message).
async fn encode_all(msgs: Vec<AgentMessage>) -> Result<Vec<Encoded>> {
    if msgs.len() < 16 {
        return msgs.iter().map(codec::encode).collect();
    }
    tokio::task::spawn_blocking(move || msgs.iter().map(codec::encode).collect()).await?
}

impl PgStore {
    /// Stores `msgs` in `key`'s conversation in one transaction, skipping those it holds
    /// already; with `turn`, records that advancement key in the same transaction, and writes
    /// nothing (`None`) when it was recorded before.
    pub(crate) async fn append(
        &self,
        key: &ConvKey,
        turn: Option<&str>,
        msgs: Vec<AgentMessage>,
    ) -> Result<Option<IngestOutcome>> {
        let encoded = encode_all(msgs).await?;
        self.retrying(|| self.write_encoded(key, turn, &encoded))
            .await
    }

    /// [`Self::append`]'s transaction, for messages already encoded.
    async fn write_encoded(
        &self,
        key: &ConvKey,
        turn: Option<&str>,
        encoded: &[Encoded],
    ) -> Result<Option<IngestOutcome>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let mut conv = Self::lock_conversation(&tx, key).await?;
        if let Some(turn) = turn {
            let record = tx
                .prepare_cached(
                    "INSERT INTO turn_commits(advancement_key, conv_id, committed_at) VALUES($1, $2, $3)
                     ON CONFLICT (advancement_key) DO NOTHING",
                )
                .await?;
            let fresh = tx.execute(&record, &[&turn, &conv.id, &now_ms()]).await?;
            if fresh == 0 {
                tx.rollback().await?;
                return Ok(None);
            }
        }
        let ids: Vec<(Option<i64>, i64)> = encoded.iter().map(|e| (e.ts, e.hash)).collect();
        let held = super::store::stored_identities(&tx, conv.id, &ids).await?;
        // In order, skipping what the conversation holds and repeats within the batch.
        let mut seen = HashSet::with_capacity(encoded.len());
        let stored: Vec<bool> = encoded
            .iter()
            .map(|e| {
                let id = (e.ts.unwrap_or(0), e.hash);
                !held.contains(&id) && seen.insert(id)
            })
            .collect();
        let new: Vec<&Encoded> = encoded
            .iter()
            .zip(&stored)
            .filter_map(|(e, s)| s.then_some(e))
            .collect();
        let mut bytes = 0u64;
        if !new.is_empty() {
            let n = new.len() as i64;
            let seqs: Vec<i64> = (0..n).map(|i| conv.next_seq + i).collect();
            let roles: Vec<i16> = new.iter().map(|e| e.role as i16).collect();
            let tokens: Vec<i64> = new.iter().map(|e| e.tokens as i64).collect();
            let ts: Vec<Option<i64>> = new.iter().map(|e| e.ts).collect();
            let hashes: Vec<i64> = new.iter().map(|e| e.hash).collect();
            let calls: Vec<i32> = new.iter().map(|e| e.n_calls as i32).collect();
            let call_ids: Vec<Option<&str>> =
                new.iter().map(|e| e.tool_call_id.as_deref()).collect();
            let skeletons: Vec<Option<&str>> = new.iter().map(|e| e.skeleton.as_deref()).collect();
            let texts: Vec<&str> = new.iter().map(|e| e.text.as_str()).collect();
            let terms: Vec<&str> = new.iter().map(|e| e.fts.as_str()).collect();
            // The messages and their frontier items in one statement; ordinals follow the
            // sequence numbers one for one.
            let insert = tx
                .prepare_cached(
                    "WITH ins AS (
                       INSERT INTO messages(conv_id, seq, role, tokens, ts, hash, n_calls, tool_call_id, skeleton, text, terms)
                       SELECT $1, t.seq, t.role, t.tokens, t.ts, t.hash, t.calls, t.call_id, t.skeleton, t.text,
                              array_to_tsvector(string_to_array(t.terms, ' '))
                       FROM unnest($2::bigint[], $3::smallint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::int[],
                                   $8::text[], $9::text[], $10::text[], $11::text[])
                            AS t(seq, role, tokens, ts, hash, calls, call_id, skeleton, text, terms)
                       ORDER BY t.seq
                       RETURNING id, seq, tokens)
                     INSERT INTO frontier(conv_id, ord, kind, item_id, tokens)
                     SELECT $1, $12 + (seq - $13), 0, id, tokens FROM ins",
                )
                .await?;
            tx.execute(
                &insert,
                &[
                    &conv.id,
                    &seqs,
                    &roles,
                    &tokens,
                    &ts,
                    &hashes,
                    &calls,
                    &call_ids,
                    &skeletons,
                    &texts,
                    &terms,
                    &conv.next_ord,
                    &conv.next_seq,
                ],
            )
            .await?;
            let added_tokens: i64 = tokens.iter().sum();
            let raw: i64 = new.iter().map(|e| e.text.len() as i64).sum();
            bytes = new
                .iter()
                .map(|e| {
                    (e.text.len() + e.fts.len() + e.skeleton.as_ref().map_or(0, String::len)) as u64
                })
                .sum();
            conv.next_seq += n;
            conv.next_ord += n;
            conv.msg_count += n;
            conv.msg_tokens += added_tokens;
            conv.raw_bytes += raw;
            conv.frontier_tokens += added_tokens;
            conv.frontier_items += n;
            let update = tx
                .prepare_cached(
                    "UPDATE conversations SET next_seq = $2, next_ord = $3, msg_count = $4, msg_tokens = $5,
                     raw_bytes = $6, frontier_tokens = $7, frontier_items = $8 WHERE id = $1",
                )
                .await?;
            tx.execute(
                &update,
                &[
                    &conv.id,
                    &conv.next_seq,
                    &conv.next_ord,
                    &conv.msg_count,
                    &conv.msg_tokens,
                    &conv.raw_bytes,
                    &conv.frontier_tokens,
                    &conv.frontier_items,
                ],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(Some(IngestOutcome {
            stored,
            conv: Some(conv),
            bytes,
        }))
    }

    /// The compaction lock of `conv_id` across every node (see [`super::store`]): a
    /// session-level advisory lock on a connection of its own, released when the returned
    /// guard drops (the connection is then closed, not returned to the pool, so the lock
    /// cannot outlive the guard).
    ///
    /// The connection leaves the pool before the lock is asked for: a caller that goes away
    /// while waiting (its future dropped) must not hand back a connection on which the wait
    /// goes on, or the lock would later be granted to an idle pooled connection and held
    /// forever. The dropped wait's statement is cancelled and its connection closed.
    pub(crate) async fn compaction_lock(
        &self,
        conv_id: i64,
        wait: bool,
    ) -> Result<Option<CompactionLock>> {
        let client = deadpool_postgres::Object::take(self.client().await?);
        // The two-integer form takes 32-bit halves: a conversation id past 2^31 wraps, which
        // can only make two conversations share a lock (they then compact one at a time).
        let key = conv_id as i32;
        if wait {
            let mut cancel = CancelOnDrop {
                target: self.target.clone(),
                token: Some(client.cancel_token()),
            };
            client
                .execute(
                    "SELECT pg_advisory_lock($1, $2)",
                    &[&COMPACTION_LOCK_CLASS, &key],
                )
                .await?;
            cancel.token = None;
        } else {
            let got: bool = client
                .query_one(
                    "SELECT pg_try_advisory_lock($1, $2)",
                    &[&COMPACTION_LOCK_CLASS, &key],
                )
                .await?
                .try_get(0)?;
            if !got {
                return Ok(None);
            }
        }
        Ok(Some(Box::new(HeldLock(client))))
    }

    /// `/new` and forks: [`crate::core::session::carry`] in one transaction.
    pub(crate) async fn carry(
        &self,
        from: &ConvKey,
        to: &ConvKey,
        min_depth: i64,
    ) -> Result<CarryReport> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let report = crate::core::session::carry(&Carry(&tx), from, to, min_depth).await?;
        tx.commit().await?;
        Ok(report)
    }

    /// The frontier of `conv_id` as compaction planning reads it, oldest first.
    async fn load_frontier(c: &impl GenericClient, conv_id: i64) -> Result<Vec<FItem>> {
        let rows = c
            .query(
                "SELECT f.ord, f.kind::bigint, f.item_id, f.tokens, m.role::bigint, m.seq, m.ts,
                        s.depth::bigint, s.first_seq, s.last_seq, s.from_ts, s.to_ts
                 FROM frontier f
                 LEFT JOIN messages m ON f.kind = 0 AND m.id = f.item_id
                 LEFT JOIN summaries s ON f.kind = 1 AND s.id = f.item_id
                 WHERE f.conv_id = $1 ORDER BY f.ord",
                &[&conv_id],
            )
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let (ord, kind, id) = (r.try_get(0)?, r.try_get::<_, i64>(1)?, r.try_get(2)?);
            let tokens = r.try_get::<_, i64>(3)?.max(0) as u64;
            out.push(if kind == 0 {
                FItem::message(ord, id, tokens, r.try_get(4)?, r.try_get(5)?, r.try_get(6)?)
            } else {
                FItem::summary(
                    ord,
                    id,
                    tokens,
                    r.try_get(7)?,
                    (r.try_get(8)?, r.try_get(9)?),
                    (r.try_get(10)?, r.try_get(11)?),
                )
            });
        }
        Ok(out)
    }

    /// The summarizer input of a chunk over `items` of `depth`.
    async fn chunk_input(c: &impl GenericClient, items: &[FItem], depth: i64) -> Result<String> {
        let ids: Vec<i64> = items.iter().map(|x| x.id).collect();
        if depth == 0 {
            let rows = c
                .query(
                    "SELECT m.role::bigint, m.text, m.skeleton, m.ts FROM unnest($1::bigint[]) WITH ORDINALITY AS t(id, n)
                     JOIN messages m ON m.id = t.id ORDER BY t.n",
                    &[&ids],
                )
                .await?;
            if rows.len() != ids.len() {
                return Err(LosslessError::Corrupt(
                    "the frontier names a message that is not stored".into(),
                ));
            }
            let mut msgs = Vec::with_capacity(rows.len());
            for r in &rows {
                let text: String = r.try_get(1)?;
                let skeleton: Option<String> = r.try_get(2)?;
                msgs.push(codec::decode(
                    r.try_get(0)?,
                    &text,
                    skeleton.as_deref(),
                    r.try_get(3)?,
                )?);
            }
            Ok(clawctx_summarize::serialize_conversation(&msgs))
        } else {
            let rows = c
                .query(
                    "SELECT s.text, s.from_ts, s.to_ts FROM unnest($1::bigint[]) WITH ORDINALITY AS t(id, n)
                     JOIN summaries s ON s.id = t.id ORDER BY t.n",
                    &[&ids],
                )
                .await?;
            let mut sources = Vec::with_capacity(rows.len());
            for r in &rows {
                sources.push((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?));
            }
            Ok(condensed_input(&sources))
        }
    }
}

/// A held compaction lock: the connection holding the advisory lock, taken out of the pool,
/// so dropping it closes the connection and the server releases the session's advisory lock.
struct HeldLock(#[allow(dead_code)] deadpool_postgres::ClientWrapper);

/// Cancels a `pg_advisory_lock` wait whose future was dropped (the caller went away): without
/// it the closed client's connection would stay in the lock's queue until the lock came free,
/// and be granted it for a moment before it closes.
struct CancelOnDrop {
    target: Arc<super::connect::PgTarget>,
    token: Option<tokio_postgres::CancelToken>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(token) = self.token.take() else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let target = self.target.clone();
            runtime.spawn(async move { super::connect::cancel_query(&target, token).await });
        }
    }
}

#[async_trait]
impl CompactionSteps for PgStore {
    async fn frontier_tokens(&self, conv_id: i64) -> Result<i64> {
        let c = self.client().await?;
        Ok(Self::conversation_by_id_on(&c, conv_id)
            .await?
            .map_or(0, |c| c.frontier_tokens))
    }

    async fn plan_round(
        &self,
        conv_id: i64,
        cfg: Arc<LosslessConfig>,
        opts: CompactionOptions,
        first_round: bool,
        exclude: HashSet<i64>,
    ) -> Result<(Vec<Chunk>, String, Guard)> {
        let mut client = self.client().await?;
        // One snapshot for the whole plan: the frontier and the texts agree.
        let tx = Self::snapshot(&mut client).await?;
        let guard = guard_load(&tx, conv_id).await?;
        let Some(conv) = Self::conversation_by_id_on(&tx, conv_id).await? else {
            return Ok((Vec::new(), "no conversation".into(), guard));
        };
        let total = conv.frontier_tokens.max(0) as u64;
        if let Some(reason) = early_stop(total, &cfg, &opts, first_round) {
            return Ok((Vec::new(), reason, guard));
        }
        let items = Self::load_frontier(&tx, conv_id).await?;
        let chosen = choose_ranges(&items, total, &cfg, &opts, first_round, &exclude);
        if chosen.is_empty() {
            return Ok((Vec::new(), NOTHING_ELIGIBLE.into(), guard));
        }
        let mut chunks = Vec::with_capacity(chosen.len());
        for (s, e, depth) in chosen {
            let input = Self::chunk_input(&tx, &items[s..e], depth).await?;
            chunks.push(make_chunk(
                conv_id,
                &items[s..e],
                depth,
                &cfg,
                opts.budget,
                input,
            ));
        }
        tx.commit().await?;
        Ok((chunks, String::new(), guard))
    }

    async fn commit_round(
        &self,
        conv_id: i64,
        produced: Vec<Produced>,
        guard: Guard,
        failures: i64,
    ) -> Result<usize> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        // The conversation's row lock orders this commit after any ingest in flight.
        tx.execute(
            "SELECT 1 FROM conversations WHERE id = $1 FOR UPDATE",
            &[&conv_id],
        )
        .await?;
        // One time for the round's summaries (see the SQLite store's `commit_round`): one
        // pass on the dashboard's timeline however long the round's statements take.
        let created_at = now_ms();
        let mut committed = 0;
        for p in produced {
            let ch = &p.chunk;
            let rows = tx
                .query(
                    "SELECT ord, kind::bigint, item_id FROM frontier WHERE conv_id = $1 AND ord >= $2 ORDER BY ord LIMIT $3",
                    &[&ch.conv_id, &ch.first_ord, &(ch.items.len() as i64)],
                )
                .await?;
            let mut now: Vec<(i64, i64, i64)> = Vec::with_capacity(rows.len());
            for r in &rows {
                now.push((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?));
            }
            let same = now.len() == ch.items.len()
                && now.first().map(|r| r.0) == Some(ch.first_ord)
                && now.iter().zip(&ch.items).all(|(r, it)| (r.1, r.2) == *it);
            if !same {
                tracing::warn!("lossless: frontier changed under a planned chunk; skipping it");
                continue;
            }
            let last_ord = now.last().map_or(ch.first_ord, |r| r.0);
            let depth = ch.depth as i32;
            let sid: i64 = tx
                .query_one(
                    "INSERT INTO summaries(conv_id, depth, tokens, source_tokens, first_seq, last_seq, from_ts, to_ts,
                                           summarizer, created_at, text, terms)
                     VALUES($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, array_to_tsvector(string_to_array($12, ' ')))
                     RETURNING id",
                    &[
                        &ch.conv_id,
                        &depth,
                        &(text_tokens(&p.text) as i64),
                        &(ch.source_tokens as i64),
                        &ch.seq_lo,
                        &ch.seq_hi,
                        &ch.ts_lo,
                        &ch.ts_hi,
                        &p.summarizer,
                        &created_at,
                        &p.text,
                        &index_terms(&p.text),
                    ],
                )
                .await?
                .try_get(0)?;
            let ords: Vec<i32> = (0..ch.items.len() as i32).collect();
            let kinds: Vec<i16> = ch.items.iter().map(|(k, _)| *k as i16).collect();
            let children: Vec<i64> = ch.items.iter().map(|(_, id)| *id).collect();
            tx.execute(
                "INSERT INTO summary_children(summary_id, ord, kind, child_id)
                 SELECT $1, t.ord, t.kind, t.child FROM unnest($2::int[], $3::smallint[], $4::bigint[]) AS t(ord, kind, child)",
                &[&sid, &ords, &kinds, &children],
            )
            .await?;
            let rendered = render_summary(sid, ch.depth, ch.ts_lo, ch.ts_hi, &p.text);
            let item_tokens = message_tokens(&rendered) as i64;
            tx.execute(
                "DELETE FROM frontier WHERE conv_id = $1 AND ord BETWEEN $2 AND $3",
                &[&ch.conv_id, &ch.first_ord, &last_ord],
            )
            .await?;
            tx.execute(
                "INSERT INTO frontier(conv_id, ord, kind, item_id, tokens) VALUES($1, $2, 1, $3, $4)",
                &[&ch.conv_id, &ch.first_ord, &sid, &item_tokens],
            )
            .await?;
            let removed: i64 = ch.item_tokens.iter().sum::<u64>() as i64;
            tx.execute(
                "UPDATE conversations SET frontier_tokens = frontier_tokens - $2 + $3,
                 frontier_items = frontier_items - $4 + 1 WHERE id = $1",
                &[
                    &ch.conv_id,
                    &removed,
                    &item_tokens,
                    &(ch.items.len() as i64),
                ],
            )
            .await?;
            committed += 1;
        }
        if committed > 0 {
            tx.execute(
                "UPDATE conversations SET epoch = epoch + 1 WHERE id = $1",
                &[&conv_id],
            )
            .await?;
        }
        tx.execute(
            "INSERT INTO guard_state(conv_id, window_start_ms, calls_in_window, consecutive_failures, breaker_open_until_ms, total_failures)
             VALUES($1, $2, $3, $4, $5, $6)
             ON CONFLICT (conv_id) DO UPDATE SET window_start_ms = $2, calls_in_window = $3, consecutive_failures = $4,
               breaker_open_until_ms = $5, total_failures = guard_state.total_failures + $6",
            &[
                &conv_id,
                &guard.window_start_ms,
                &guard.calls_in_window,
                &guard.consecutive_failures,
                &guard.breaker_open_until_ms,
                &failures,
            ],
        )
        .await?;
        tx.commit().await?;
        Ok(committed)
    }
}

/// The persisted guard state of `conv_id` (defaults when none).
async fn guard_load(c: &impl GenericClient, conv_id: i64) -> Result<Guard> {
    let row = c
        .query_opt(
            "SELECT window_start_ms, calls_in_window, consecutive_failures, breaker_open_until_ms
             FROM guard_state WHERE conv_id = $1",
            &[&conv_id],
        )
        .await?;
    Ok(match row {
        Some(r) => Guard {
            window_start_ms: r.try_get(0)?,
            calls_in_window: r.try_get(1)?,
            consecutive_failures: r.try_get(2)?,
            breaker_open_until_ms: r.try_get(3)?,
        },
        None => Guard::default(),
    })
}

/// A carry's writes inside one PostgreSQL transaction (the target's row locked by
/// `lock_conversation`, as every write takes it first).
struct Carry<'a, 'b>(&'a deadpool_postgres::Transaction<'b>);

impl crate::core::session::CarryWrites for Carry<'_, '_> {
    async fn conversation(&self, key: &ConvKey) -> Result<Option<ConvRow>> {
        PgStore::conversation_on(self.0, key).await
    }

    async fn open_conversation(&self, key: &ConvKey) -> Result<ConvRow> {
        PgStore::lock_conversation(self.0, key).await
    }

    async fn deep_summaries(&self, conv_id: i64, min_depth: i64) -> Result<Vec<(i64, i64)>> {
        let depth = i32::try_from(min_depth).unwrap_or(i32::MAX);
        let rows = self
            .0
            .query(
                "SELECT f.item_id, f.tokens FROM frontier f JOIN summaries s ON s.id = f.item_id
                 WHERE f.conv_id = $1 AND f.kind = 1 AND s.depth >= $2 ORDER BY f.ord",
                &[&conv_id, &depth],
            )
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect()
    }

    async fn archive(&self, conv_id: i64) -> Result<()> {
        self.0
            .execute(
                "UPDATE conversations SET active = false WHERE id = $1",
                &[&conv_id],
            )
            .await?;
        Ok(())
    }

    async fn min_ord(&self, conv_id: i64) -> Result<i64> {
        Ok(self
            .0
            .query_one(
                "SELECT coalesce(min(ord), 0) FROM frontier WHERE conv_id = $1",
                &[&conv_id],
            )
            .await?
            .try_get(0)?)
    }

    async fn prepend(&self, conv_id: i64, rows: &[(i64, i64, i64)]) -> Result<()> {
        let ords: Vec<i64> = rows.iter().map(|r| r.0).collect();
        let sids: Vec<i64> = rows.iter().map(|r| r.1).collect();
        let toks: Vec<i64> = rows.iter().map(|r| r.2).collect();
        self.0
            .execute(
                "INSERT INTO frontier(conv_id, ord, kind, item_id, tokens)
                 SELECT $1, t.ord, 1, t.sid, t.tokens FROM unnest($2::bigint[], $3::bigint[], $4::bigint[]) AS t(ord, sid, tokens)",
                &[&conv_id, &ords, &sids, &toks],
            )
            .await?;
        let tokens: i64 = toks.iter().sum();
        self.0
            .execute(
                "UPDATE conversations SET frontier_tokens = frontier_tokens + $2, frontier_items = frontier_items + $3,
                 epoch = epoch + 1 WHERE id = $1",
                &[&conv_id, &tokens, &(rows.len() as i64)],
            )
            .await?;
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::pg::connect::PgTarget;
    use clawctx_test_support::pg::test_database;

    /// Advisory compaction locks of conversation `conv_id` in this database: (granted,
    /// waiting).
    async fn lock_rows(store: &PgStore, conv_id: i32) -> (i64, i64) {
        let c = store.client().await.unwrap();
        let row = c
            .query_one(
                "SELECT count(*) FILTER (WHERE granted), count(*) FILTER (WHERE NOT granted)
                 FROM pg_locks l JOIN pg_database d ON d.oid = l.database
                 WHERE l.locktype = 'advisory' AND d.datname = current_database()
                   AND l.classid::bigint = $1 AND l.objid::bigint = $2 AND l.objsubid = 2",
                &[&i64::from(COMPACTION_LOCK_CLASS), &i64::from(conv_id)],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    }

    /// Polls `check` every 20 ms, at most 500 times (10 s: a bound on a hang, not a timing
    /// claim), until it holds.
    async fn eventually<F, Fut>(mut check: F) -> bool
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        for _ in 0..500 {
            if check().await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// A node that stops waiting for the compaction lock (its caller went away) must not leave
    /// the wait behind on a pooled connection: the lock would later be granted to that idle
    /// connection and held forever, and every other node's compactions skipped or blocked.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_lock_wait_leaves_no_lock_behind() {
        let Some(db) = test_database("pg lock dropped wait") else {
            return;
        };
        let target = PgTarget::parse(&db.url).unwrap();
        let node_a = PgStore::open(target.clone(), 2).await.unwrap();
        let node_b = PgStore::open(target.clone(), 2).await.unwrap();
        let node_c = PgStore::open(target, 2).await.unwrap();
        let held = node_a.compaction_lock(7, true).await.unwrap().unwrap();
        assert_eq!(lock_rows(&node_a, 7).await, (1, 0));

        // Node B waits, and goes away once its wait is in the server's queue.
        {
            let wait = node_b.compaction_lock(7, true);
            tokio::pin!(wait);
            let mut queued = false;
            for _ in 0..500 {
                tokio::select! {
                    r = &mut wait => panic!("granted while node A holds it: {:?}", r.map(|l| l.is_some())),
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
                if lock_rows(&node_a, 7).await.1 == 1 {
                    queued = true;
                    break;
                }
            }
            assert!(queued, "node B's wait never reached the server");
        }
        // The dropped wait is cancelled: nobody waits any more.
        assert!(
            eventually(|| async { lock_rows(&node_a, 7).await == (1, 0) }).await,
            "the dropped wait is still queued: {:?}",
            lock_rows(&node_a, 7).await
        );

        // Node A releases; node C can take the lock (before the fix, node B's pooled idle
        // connection got it and held it forever).
        drop(held);
        let mut lock_c = None;
        for _ in 0..500 {
            lock_c = node_c.compaction_lock(7, false).await.unwrap();
            if lock_c.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            lock_c.is_some(),
            "node C never got the lock: {:?}",
            lock_rows(&node_a, 7).await
        );
        assert_eq!(lock_rows(&node_a, 7).await, (1, 0), "only node C holds it");
        // Node B's pool still serves it (its connections were not spoiled), and it waits its
        // turn behind node C again.
        assert!(node_b.compaction_lock(7, false).await.unwrap().is_none());
        drop(lock_c);
        assert!(
            eventually(|| async { node_b.compaction_lock(7, false).await.unwrap().is_some() })
                .await
        );
    }
}
