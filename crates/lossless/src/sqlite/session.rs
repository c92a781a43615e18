//! `/new` and forks on SQLite: summaries carried from one conversation's frontier to another's,
//! and a conversation archived.

use rusqlite::params;

use crate::core::conv::{ConvKey, ConvRow};
use crate::core::session::{carry, CarryReport, CarryWrites};
use crate::error::Result;
use crate::sqlite::Db;

impl Db {
    /// Carries summaries of depth ≥ `min_depth` from `from`'s frontier to `to` in one
    /// transaction (see [`crate::core::session::carry`]).
    pub fn carry_summaries(
        &mut self,
        from: &ConvKey,
        to: &ConvKey,
        min_depth: i64,
    ) -> Result<CarryReport> {
        // The writes are synchronous: the future is ready at its first poll.
        self.tx(|c| futures::executor::block_on(carry(&Carry(c), from, to, min_depth)))
    }

    /// Archives the active conversation of `key` (subagent rollback).
    pub fn archive(&mut self, key: &ConvKey) -> Result<bool> {
        self.tx(|c| {
            let n = c.execute(
                "UPDATE conversations SET active = 0 WHERE agent_id = ?1 AND session_key = ?2 AND active = 1",
                params![key.agent_id, key.session_key],
            )?;
            Ok(n > 0)
        })
    }
}

/// A carry's writes inside one SQLite transaction.
struct Carry<'a>(&'a rusqlite::Connection);

impl CarryWrites for Carry<'_> {
    async fn conversation(&self, key: &ConvKey) -> Result<Option<ConvRow>> {
        crate::sqlite::db_get_conv(self.0, key).map_err(Into::into)
    }

    async fn open_conversation(&self, key: &ConvKey) -> Result<ConvRow> {
        crate::sqlite::db_get_or_create_conv(self.0, key)
    }

    async fn deep_summaries(&self, conv_id: i64, min_depth: i64) -> Result<Vec<(i64, i64)>> {
        let mut st = self.0.prepare_cached(
            "SELECT f.item_id, f.tokens FROM frontier f JOIN summaries s ON s.id = f.item_id
             WHERE f.conv_id = ?1 AND f.kind = 1 AND s.depth >= ?2 ORDER BY f.ord",
        )?;
        let rows = st.query_map(params![conv_id, min_depth], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    async fn archive(&self, conv_id: i64) -> Result<()> {
        self.0.execute(
            "UPDATE conversations SET active = 0 WHERE id = ?1",
            [conv_id],
        )?;
        Ok(())
    }

    async fn min_ord(&self, conv_id: i64) -> Result<i64> {
        Ok(self.0.query_row(
            "SELECT coalesce(min(ord), 0) FROM frontier WHERE conv_id = ?1",
            [conv_id],
            |r| r.get(0),
        )?)
    }

    async fn prepend(&self, conv_id: i64, rows: &[(i64, i64, i64)]) -> Result<()> {
        let mut ins = self.0.prepare_cached(
            "INSERT INTO frontier(conv_id, ord, kind, item_id, tokens) VALUES(?1, ?2, 1, ?3, ?4)",
        )?;
        for (ord, sid, tokens) in rows {
            ins.execute(params![conv_id, ord, sid, tokens])?;
        }
        let tokens: i64 = rows.iter().map(|r| r.2).sum();
        self.0.execute(
            "UPDATE conversations SET frontier_tokens = frontier_tokens + ?2, frontier_items = frontier_items + ?3, epoch = epoch + 1 WHERE id = ?1",
            params![conv_id, tokens, rows.len() as i64],
        )?;
        Ok(())
    }
}
