//! The SQLite queries of semantic recall (schema v11): models, the items still to embed,
//! storing vectors, reading them back by conversation, and grep hits for found items. The
//! logic around them is [`crate::core::semantic`]'s, written once for both backends.

use rusqlite::{params, OptionalExtension};

use super::Db;
use crate::core::recall::{message_hit_of, summary_hit_of, GrepHit};
use crate::core::semantic::quant;
use crate::core::semantic::rows::{
    embed_text, Done, EmbedItem, EmbedModel, ItemKind, NewVector, VectorRow,
};
use crate::error::{LosslessError, Result};

impl Db {
    /// The row of model `name`, registered with `dim` when new; an error when it was
    /// registered with another length.
    pub fn embed_model(&mut self, name: &str, dim: usize) -> Result<EmbedModel> {
        let name = name.to_owned();
        self.tx(move |c| {
            c.execute(
                "INSERT INTO embed_models(name, dim) VALUES (?1, ?2) ON CONFLICT(name) DO NOTHING",
                params![name, dim as i64],
            )?;
            let m = c.query_row(
                "SELECT id, dim, msg_done, sum_done FROM embed_models WHERE name = ?1",
                [&name],
                |r| {
                    Ok(EmbedModel {
                        id: r.get(0)?,
                        name: name.clone(),
                        dim: r.get::<_, i64>(1)?.max(0) as usize,
                        msg_done: r.get(2)?,
                        sum_done: r.get(3)?,
                    })
                },
            )?;
            if m.dim != dim {
                return Err(LosslessError::InvalidInput(format!(
                    "embedding model {name} is recorded with {} dimensions, but gives {dim}",
                    m.dim
                )));
            }
            Ok(m)
        })
    }

    /// The model's progress now.
    pub fn embed_done(&self, model: i64) -> Result<Done> {
        Ok(self.conn.query_row(
            "SELECT msg_done, sum_done FROM embed_models WHERE id = ?1",
            [model],
            |r| {
                Ok(Done {
                    msg_done: r.get(0)?,
                    sum_done: r.get(1)?,
                })
            },
        )?)
    }

    /// Up to `limit` items after `done`, messages first, oldest first. Only the user's and the
    /// assistant's messages come with their text (see [`crate::core::semantic::rows::EMBEDDED_ROLES`]).
    pub fn embed_todo(&self, done: Done, limit: usize) -> Result<Vec<EmbedItem>> {
        let mut out = Vec::new();
        let mut st = self.conn.prepare_cached(
            "SELECT id, conv_id, tokens, CASE WHEN role IN (0, 1) THEN text ELSE '' END
             FROM message_rows WHERE id > ?1 ORDER BY id LIMIT ?2",
        )?;
        let mut rows = st.query(params![done.msg_done, limit as i64])?;
        while let Some(r) = rows.next()? {
            out.push(item(ItemKind::Message, r)?);
        }
        if out.len() < limit {
            let mut st = self.conn.prepare_cached(
                "SELECT id, conv_id, tokens, text FROM summaries WHERE id > ?1 ORDER BY id LIMIT ?2",
            )?;
            let mut rows = st.query(params![done.sum_done, (limit - out.len()) as i64])?;
            while let Some(r) = rows.next()? {
                out.push(item(ItemKind::Summary, r)?);
            }
        }
        Ok(out)
    }

    /// Stores `rows` of `model` and moves its progress to `done`, in one transaction; rows at or
    /// below the progress stored meanwhile (another process embedded them) are skipped.
    /// Returns the vectors stored.
    pub fn store_vectors(&mut self, model: i64, rows: Vec<NewVector>, done: Done) -> Result<usize> {
        self.tx(move |c| {
            let stored = c.query_row(
                "SELECT msg_done, sum_done FROM embed_models WHERE id = ?1",
                [model],
                |r| {
                    Ok(Done {
                        msg_done: r.get(0)?,
                        sum_done: r.get(1)?,
                    })
                },
            )?;
            let mut ins = c.prepare_cached(
                "INSERT INTO vectors(model, kind, item_id, conv_id, tokens, scale, vec)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?;
            let mut n = 0;
            for v in rows {
                if stored.covers(v.kind, v.item_id) {
                    continue;
                }
                ins.execute(params![
                    model,
                    v.kind.code(),
                    v.item_id,
                    v.conv_id,
                    v.tokens as i64,
                    f64::from(v.scale),
                    quant::to_bytes(&v.vec)
                ])?;
                n += 1;
            }
            c.execute(
                "UPDATE embed_models SET msg_done = max(msg_done, ?2), sum_done = max(sum_done, ?3)
                 WHERE id = ?1",
                params![model, done.msg_done, done.sum_done],
            )?;
            Ok(n)
        })
    }

    /// The vectors of `model` stored after row `after` in each `(conversation, after)`.
    pub fn vectors_since(
        &self,
        model: i64,
        dim: usize,
        wants: &[(i64, i64)],
    ) -> Result<Vec<VectorRow>> {
        let mut st = self.conn.prepare_cached(
            "SELECT vid, kind, item_id, conv_id, tokens, scale, vec FROM vectors
             WHERE model = ?1 AND conv_id = ?2 AND vid > ?3 ORDER BY vid",
        )?;
        let mut out = Vec::new();
        for &(conv, after) in wants {
            let mut rows = st.query(params![model, conv, after])?;
            while let Some(r) = rows.next()? {
                let bytes: Vec<u8> = r.get(6)?;
                out.extend(VectorRow::read(
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get::<_, f64>(5)? as f32,
                    &bytes,
                    dim,
                ));
            }
        }
        Ok(out)
    }

    /// `(items embedded, items stored)` for `model`: messages and summaries.
    pub fn embed_progress(&self, model: i64) -> Result<(u64, u64)> {
        let done = self.embed_done(model)?;
        let count = |sql: &str, upto: i64| -> Result<u64> {
            Ok(self
                .conn
                .query_row(sql, [upto], |r| r.get::<_, i64>(0))?
                .max(0) as u64)
        };
        let total = count("SELECT count(*) FROM messages WHERE id > ?1", -1)?
            + count("SELECT count(*) FROM summaries WHERE id > ?1", -1)?;
        let left = count("SELECT count(*) FROM messages WHERE id > ?1", done.msg_done)?
            + count(
                "SELECT count(*) FROM summaries WHERE id > ?1",
                done.sum_done,
            )?;
        Ok((total - left.min(total), total))
    }

    /// Grep hits for `items`, in their order (items no longer stored are left out); each
    /// snippet is the start of the text (the match is by meaning, not by a word).
    pub fn item_hits(&self, items: &[(ItemKind, i64, f64)]) -> Result<Vec<GrepHit>> {
        let mut msg = self.conn.prepare_cached(
            "SELECT conv_id, role, ts, text, skeleton FROM message_rows WHERE id = ?1",
        )?;
        let mut sum = self
            .conn
            .prepare_cached("SELECT conv_id, depth, to_ts, text FROM summaries WHERE id = ?1")?;
        let mut out = Vec::with_capacity(items.len());
        for &(kind, id, score) in items {
            let hit = match kind {
                ItemKind::Message => msg
                    .query_row([id], |r| {
                        Ok((
                            r.get::<_, i64>(0)?,
                            r.get::<_, i64>(1)?,
                            r.get::<_, Option<i64>>(2)?,
                            r.get::<_, String>(3)?,
                            r.get::<_, Option<String>>(4)?,
                        ))
                    })
                    .optional()?
                    .map(|(conv, role, ts, text, sk)| {
                        message_hit_of(id, conv, role, sk.as_deref(), ts, &text, Some(score), &[]).2
                    }),
                ItemKind::Summary => sum
                    .query_row([id], |r| {
                        Ok((
                            r.get::<_, i64>(0)?,
                            r.get::<_, i64>(1)?,
                            r.get::<_, Option<i64>>(2)?,
                            r.get::<_, String>(3)?,
                        ))
                    })
                    .optional()?
                    .map(|(conv, depth, to_ts, text)| {
                        summary_hit_of(id, conv, depth, to_ts, &text, Some(score), &[], None).2
                    }),
            };
            out.extend(hit);
        }
        Ok(out)
    }
}

fn item(kind: ItemKind, r: &rusqlite::Row<'_>) -> Result<EmbedItem> {
    let text: String = r.get(3)?;
    Ok(EmbedItem {
        kind,
        item_id: r.get(0)?,
        conv_id: r.get(1)?,
        tokens: r.get::<_, i64>(2)?.max(0) as u64,
        text: embed_text(&text).to_owned(),
    })
}
