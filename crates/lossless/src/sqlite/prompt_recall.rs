//! The `<recalled>` block's reads on SQLite: the ranked hits' rows, the message after a quoted
//! question, the quotes' texts; [`crate::core::prompt_recall`] decides what is quoted.

use std::collections::HashSet;

use rusqlite::OptionalExtension;

use crate::core::prompt_recall::{block_of, fused, wanted, PromptRecall, RecalledBlock};
use crate::error::Result;
use crate::sqlite::Db;

impl Db {
    /// The `<recalled>` block for `r`, leaving out the messages in `exclude` (already in the
    /// context). `None` when nothing matches or nothing fits.
    pub fn recalled_block(
        &self,
        r: &PromptRecall,
        exclude: &HashSet<i64>,
    ) -> Result<Option<RecalledBlock>> {
        if !wanted(r) {
            return Ok(None);
        }
        let ranked = self.ranked_messages(
            &r.terms,
            &r.convs,
            r.max_messages,
            exclude,
            crate::core::search::RankFor::Prompt,
        )?;
        let ranked = fused(ranked, r, exclude);
        let mut st = self
            .conn
            .prepare_cached("SELECT role, ts, text FROM message_rows WHERE id = ?1")?;
        // The file has no `(conv_id, seq)` index (schema v8 dropped it: ingest pays for every
        // index): a conversation's messages take increasing ids, so the next one is looked
        // for among the few ids after the hit's, at most NEXT_WITHIN of them (other sessions'
        // writes in between beyond that: the answer is not brought along). `CROSS JOIN` and
        // `+n.conv_id` keep SQLite on the rowid range (the identity index would walk the whole
        // conversation).
        let mut next = self.conn.prepare_cached(
            "SELECT n.id, n.tokens FROM messages h CROSS JOIN messages n \
             WHERE h.id = ?1 AND n.id > h.id AND n.id <= h.id + ?2 \
             AND +n.conv_id = h.conv_id AND n.seq = h.seq + 1",
        )?;
        block_of(
            r,
            ranked,
            exclude,
            |id| Ok(st.query_row([id], |x| Ok((x.get(0)?, x.get(1)?, x.get(2)?)))?),
            |id| {
                Ok(next
                    .query_row([id, NEXT_WITHIN], |x| {
                        Ok((x.get::<_, i64>(0)?, x.get::<_, i64>(1)?.max(0) as u64))
                    })
                    .optional()?)
            },
        )
    }
}

/// How many ids after a hit the SQLite store looks for the message after it.
const NEXT_WITHIN: i64 = 256;
