//! Assembly on SQLite: the conversation's frontier read in `ord` order, each item decoded from
//! its row or taken from the store thread's decoded-message cache, and handed to the packer
//! ([`crate::core::assemble::Packer`]) with the recall block's hits. Runs as one store-thread job
//! so the frontier it packs is one snapshot.

use clawctx_protocol::AgentMessage;
use rusqlite::params;

use crate::core::assemble::{Assembled, Hysteresis, Item, Packer, Stored};
use crate::core::prompt_recall::PromptRecall;
use crate::error::Result;
use crate::sqlite::Db;

impl Db {
    /// Assembles conversation `conv_id` (or only `live` when `conv_id` is `None`) within
    /// `budget` tokens. `live` are the host's newest messages the store has not stored yet, in
    /// order. With `recall`, and when the newest live message is a user prompt, the block of
    /// [`crate::core::prompt_recall`] goes right before that prompt, within its own reserve (or last,
    /// when the prompt follows the assembled context: [`PromptRecall::prompt_follows`]).
    pub fn assemble(
        &self,
        conv_id: Option<i64>,
        live: Vec<AgentMessage>,
        budget: u64,
        recall: Option<&PromptRecall>,
    ) -> Result<Assembled> {
        self.assemble_stable(conv_id, live, budget, recall, Hysteresis::default())
    }

    /// [`Db::assemble`] keeping the front still as `hysteresis` says (see the module docs);
    /// the result's [`Assembled::front`] is the next call's `hysteresis.front`.
    pub fn assemble_stable(
        &self,
        conv_id: Option<i64>,
        live: Vec<AgentMessage>,
        budget: u64,
        recall: Option<&PromptRecall>,
        hysteresis: Hysteresis,
    ) -> Result<Assembled> {
        let frontier_tokens = match conv_id {
            Some(id) => Some(
                self.conn
                    .prepare_cached("SELECT frontier_tokens FROM conversations WHERE id = ?1")?
                    .query_row(params![id], |r| r.get::<_, i64>(0))?
                    .max(0) as u64,
            ),
            None => None,
        };
        let mut p = Packer::new(live, budget, recall, frontier_tokens, hysteresis);
        if let Some(conv_id) = conv_id {
            // The walk reads only what packing needs; a message's stored columns are read (by
            // its key) only when it is not decoded already, which on consecutive turns is the
            // newest message or two.
            let mut st = self.conn.prepare_cached(
                "SELECT f.kind, f.item_id, f.tokens, m.role, m.n_calls,
                        s.depth, s.from_ts, s.to_ts, s.text
                 FROM frontier f
                 LEFT JOIN messages m ON f.kind = 0 AND m.id = f.item_id
                 LEFT JOIN summaries s ON f.kind = 1 AND s.id = f.item_id
                 WHERE f.conv_id = ?1 ORDER BY f.ord DESC",
            )?;
            let mut rows = st.query(params![conv_id])?;
            while !p.done() {
                let Some(r) = rows.next()? else { break };
                let kind: i64 = r.get(0)?;
                let tokens = r.get::<_, i64>(2)? as u64;
                let item = if kind == 0 {
                    let id: i64 = r.get(1)?;
                    let cached = self.decoded.borrow_mut().get(id);
                    let stored = match cached {
                        Some(m) => Stored::Decoded(m),
                        None => self.stored_columns(id)?,
                    };
                    Item::Message {
                        id,
                        role: r.get(3)?,
                        n_calls: r.get(4)?,
                        tokens,
                        stored,
                    }
                } else {
                    Item::Summary {
                        id: r.get(1)?,
                        depth: r.get(5)?,
                        from_ts: r.get(6)?,
                        to_ts: r.get(7)?,
                        text: r.get(8)?,
                        tokens,
                    }
                };
                p.push(item);
            }
        }
        let packed = p.finish(budget, Some(&mut self.decoded.borrow_mut()))?;
        let block = match &packed.recall {
            Some(r) => self.recalled_block(r, &packed.shown)?,
            None => None,
        };
        Ok(packed.with_recall(block))
    }

    /// The stored columns of message `id`, for decoding.
    fn stored_columns(&self, id: i64) -> Result<Stored> {
        let mut st = self.conn.prepare_cached(
            "SELECT m.text,
                    CASE WHEN m.skel IS NULL THEN m.skeleton
                         ELSE (SELECT k.json FROM skeletons k WHERE k.id = m.skel) END,
                    m.ts, m.payload
             FROM messages m WHERE m.id = ?1",
        )?;
        let mut rows = st.query(params![id])?;
        let r = rows.next()?.ok_or_else(|| {
            crate::error::LosslessError::Corrupt(format!(
                "frontier names message {id}, which is not stored"
            ))
        })?;
        Ok(Stored::Raw {
            text: self.stored_text(r, 0, 3)?,
            skeleton: r.get(1)?,
            ts: r.get(2)?,
        })
    }
}
