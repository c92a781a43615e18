//! Payload retention on SQLite: large payloads whose every referrer is summarized become a
//! placeholder ([`crate::core::retention::placeholder`]), in one transaction.

use rusqlite::{params, Connection};

use crate::core::retention::{expires, placeholder, rewritten, Referrer, RetentionReport};
use crate::error::Result;
use crate::sqlite::Db;

impl Db {
    /// Expires payloads created before `cutoff_ms` (epoch ms) whose messages are all
    /// summarized; `apply = false` only counts. One transaction.
    pub fn expire_payloads(&mut self, cutoff_ms: i64, apply: bool) -> Result<RetentionReport> {
        if apply {
            self.decoded.get_mut().clear();
            // The index keeps the original words only for messages already in the file's
            // index: any other connection indexes the rest from their stored text, which this
            // rewrites.
            self.index_all_in_file();
        }
        self.tx(|c| {
            let mut report = RetentionReport {
                dry_run: !apply,
                ..Default::default()
            };
            let due: Vec<(i64, Vec<u8>, i64, String)> = c
                .prepare("SELECT id, hash, bytes, unpack(text) FROM payloads WHERE created_at < ?1 ORDER BY id")?
                .query_map([cutoff_ms], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect::<rusqlite::Result<_>>()?;
            for (pid, hash, bytes, text) in due {
                let refs = referrers(c, pid)?;
                // Stored once, whatever the number of its messages.
                if !expires(&mut report, &refs, bytes.max(0) as u64) || !apply {
                    continue;
                }
                let stub = placeholder(bytes, &hash);
                for r in refs {
                    let e = rewritten(&r, &text, &stub)?;
                    c.prepare_cached(
                        "UPDATE messages SET text = ?2, skeleton = ?3, skel = NULL, tokens = ?4, payload = NULL WHERE id = ?1",
                    )?
                    .execute(params![r.id, e.text, e.stored_skeleton, e.tokens as i64])?;
                    c.prepare_cached("UPDATE conversations SET msg_tokens = msg_tokens - ?2 WHERE id = ?1")?
                        .execute(params![r.conv_id, r.tokens - e.tokens as i64])?;
                }
                c.prepare_cached("DELETE FROM payloads WHERE id = ?1")?.execute([pid])?;
            }
            Ok(report)
        })
    }
}

fn referrers(c: &Connection, payload: i64) -> Result<Vec<Referrer>> {
    let mut st = c.prepare_cached(
        "SELECT m.id, m.conv_id, m.role, m.skeleton, m.ts, m.tokens,
                EXISTS(SELECT 1 FROM frontier f WHERE f.conv_id = m.conv_id AND f.kind = 0 AND f.item_id = m.id)
         FROM message_rows m WHERE m.payload = ?1",
    )?;
    let rows = st.query_map([payload], |r| {
        Ok(Referrer {
            id: r.get(0)?,
            conv_id: r.get(1)?,
            role: r.get(2)?,
            skeleton: r.get(3)?,
            ts: r.get(4)?,
            tokens: r.get(5)?,
            raw_in_frontier: r.get(6)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}
