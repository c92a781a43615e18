//! The SQLite side of [`crate::core::session`].

use crate::core::conv::ConvKey;
use crate::core::session::CarryReport;
use crate::error::Result;
use crate::sqlite::Db;
use rusqlite::params;

impl Db {
    /// Carries summaries of depth ≥ `min_depth` from `from`'s active frontier to `to` (created
    /// when absent). When `from == to` the old conversation is archived first and `to` is a
    /// fresh conversation for the same key. A negative `min_depth` carries nothing.
    pub fn carry_summaries(
        &mut self,
        from: &ConvKey,
        to: &ConvKey,
        min_depth: i64,
    ) -> Result<CarryReport> {
        self.tx(|c| {
            let mut report = CarryReport::default();
            let Some(src) = crate::sqlite::db_get_conv(c, from)? else {
                let conv = crate::sqlite::db_get_or_create_conv(c, to)?;
                report.conversation_id = conv.id;
                return Ok(report);
            };
            let mut items: Vec<(i64, i64)> = Vec::new();
            if min_depth >= 0 {
                let mut st = c.prepare_cached(
                    "SELECT f.item_id, f.tokens FROM frontier f JOIN summaries s ON s.id = f.item_id
                     WHERE f.conv_id = ?1 AND f.kind = 1 AND s.depth >= ?2 ORDER BY f.ord",
                )?;
                items = st.query_map(params![src.id, min_depth], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<rusqlite::Result<_>>()?;
            }
            if from == to {
                c.execute("UPDATE conversations SET active = 0 WHERE id = ?1", [src.id])?;
                report.archived_conversation = Some(src.id);
            }
            let dst = crate::sqlite::db_get_or_create_conv(c, to)?;
            report.conversation_id = dst.id;
            if items.is_empty() {
                return Ok(report);
            }
            let min_ord: i64 = c.query_row(
                "SELECT coalesce(min(ord), 0) FROM frontier WHERE conv_id = ?1",
                [dst.id],
                |r| r.get(0),
            )?;
            let start = min_ord.min(0) - items.len() as i64;
            let mut ins = c.prepare_cached("INSERT INTO frontier(conv_id, ord, kind, item_id, tokens) VALUES(?1, ?2, 1, ?3, ?4)")?;
            let mut tokens = 0i64;
            for (i, (sid, t)) in items.iter().enumerate() {
                ins.execute(params![dst.id, start + i as i64, sid, t])?;
                tokens += t;
            }
            c.execute(
                "UPDATE conversations SET frontier_tokens = frontier_tokens + ?2, frontier_items = frontier_items + ?3, epoch = epoch + 1 WHERE id = ?1",
                params![dst.id, tokens, items.len() as i64],
            )?;
            report.carried_summaries = items.len();
            report.carried_tokens = tokens as u64;
            Ok(report)
        })
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
