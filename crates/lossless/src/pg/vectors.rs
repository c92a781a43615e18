//! The PostgreSQL queries of semantic recall (schema v4), as the SQLite store's
//! ([`crate::sqlite`]'s `vectors`): vectors are `bytea`, so no extension is needed.

use super::PgStore;
use crate::core::recall::{message_hit_of, summary_hit_of, GrepHit};
use crate::core::semantic::quant;
use crate::core::semantic::rows::{
    embed_text, Done, EmbedItem, EmbedModel, ItemKind, NewVector, VectorRow,
};
use crate::error::{LosslessError, Result};

impl PgStore {
    /// See [`crate::core::backend::Backend::embed_model`].
    pub(crate) async fn embed_model_row(&self, name: &str, dim: usize) -> Result<EmbedModel> {
        let c = self.client().await?;
        c.execute(
            "INSERT INTO embed_models(name, dim) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
            &[&name, &(dim as i32)],
        )
        .await?;
        let r = c
            .query_one(
                "SELECT id, dim, msg_done, sum_done FROM embed_models WHERE name = $1",
                &[&name],
            )
            .await?;
        let m = EmbedModel {
            id: r.try_get(0)?,
            name: name.to_owned(),
            dim: r.try_get::<_, i32>(1)?.max(0) as usize,
            msg_done: r.try_get(2)?,
            sum_done: r.try_get(3)?,
        };
        if m.dim != dim {
            return Err(LosslessError::InvalidInput(format!(
                "embedding model {name} is recorded with {} dimensions, but gives {dim}",
                m.dim
            )));
        }
        Ok(m)
    }

    /// See [`crate::core::backend::Backend::embed_todo`].
    pub(crate) async fn embed_todo_rows(&self, model: i64, limit: usize) -> Result<Vec<EmbedItem>> {
        let c = self.client().await?;
        let r = c
            .query_one(
                "SELECT msg_done, sum_done FROM embed_models WHERE id = $1",
                &[&model],
            )
            .await?;
        let (msg_done, sum_done): (i64, i64) = (r.try_get(0)?, r.try_get(1)?);
        let mut out = Vec::new();
        let rows = c
            .query(
                "SELECT id, conv_id, tokens, CASE WHEN role IN (0, 1) THEN text ELSE '' END
                 FROM messages WHERE id > $1 ORDER BY id LIMIT $2",
                &[&msg_done, &(limit as i64)],
            )
            .await?;
        for r in &rows {
            out.push(item(ItemKind::Message, r)?);
        }
        if out.len() < limit {
            let rows = c
                .query(
                    "SELECT id, conv_id, tokens, text FROM summaries WHERE id > $1 ORDER BY id LIMIT $2",
                    &[&sum_done, &((limit - out.len()) as i64)],
                )
                .await?;
            for r in &rows {
                out.push(item(ItemKind::Summary, r)?);
            }
        }
        Ok(out)
    }

    /// See [`crate::core::backend::Backend::store_vectors`]. The model's row is locked for the
    /// transaction, so two embedders never store one item twice.
    pub(crate) async fn store_vector_rows(
        &self,
        model: i64,
        rows: Vec<NewVector>,
        done: Done,
    ) -> Result<usize> {
        let mut c = self.client().await?;
        let tx = c.transaction().await?;
        let r = tx
            .query_one(
                "SELECT msg_done, sum_done FROM embed_models WHERE id = $1 FOR UPDATE",
                &[&model],
            )
            .await?;
        let stored = Done {
            msg_done: r.try_get(0)?,
            sum_done: r.try_get(1)?,
        };
        let ins = tx
            .prepare_cached(
                "INSERT INTO vectors(model, kind, item_id, conv_id, tokens, scale, vec)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .await?;
        let mut n = 0;
        for v in rows {
            if stored.covers(v.kind, v.item_id) {
                continue;
            }
            tx.execute(
                &ins,
                &[
                    &model,
                    &(v.kind.code() as i16),
                    &v.item_id,
                    &v.conv_id,
                    &(v.tokens as i64),
                    &v.scale,
                    &quant::to_bytes(&v.vec),
                ],
            )
            .await?;
            n += 1;
        }
        tx.execute(
            "UPDATE embed_models SET msg_done = greatest(msg_done, $2), sum_done = greatest(sum_done, $3)
             WHERE id = $1",
            &[&model, &done.msg_done, &done.sum_done],
        )
        .await?;
        tx.commit().await?;
        Ok(n)
    }

    /// See [`crate::core::backend::Backend::vectors_since`].
    pub(crate) async fn vector_rows_since(
        &self,
        model: i64,
        dim: usize,
        wants: &[(i64, i64)],
    ) -> Result<Vec<VectorRow>> {
        let c = self.client().await?;
        let st = c
            .prepare_cached(
                "SELECT vid, kind::bigint, item_id, conv_id, tokens, scale, vec FROM vectors
                 WHERE model = $1 AND conv_id = $2 AND vid > $3 ORDER BY vid",
            )
            .await?;
        let mut out = Vec::new();
        for &(conv, after) in wants {
            for r in c.query(&st, &[&model, &conv, &after]).await? {
                let bytes: Vec<u8> = r.try_get(6)?;
                out.extend(VectorRow::read(
                    r.try_get(0)?,
                    r.try_get(1)?,
                    r.try_get(2)?,
                    r.try_get(3)?,
                    r.try_get(4)?,
                    r.try_get(5)?,
                    &bytes,
                    dim,
                ));
            }
        }
        Ok(out)
    }

    /// See [`crate::core::backend::Backend::embed_progress`].
    pub(crate) async fn embed_progress_of(&self, model: i64) -> Result<(u64, u64)> {
        let c = self.client().await?;
        let r = c
            .query_one(
                "SELECT (SELECT count(*) FROM messages) + (SELECT count(*) FROM summaries),
                        (SELECT count(*) FROM messages WHERE id > e.msg_done)
                          + (SELECT count(*) FROM summaries WHERE id > e.sum_done)
                 FROM embed_models e WHERE e.id = $1",
                &[&model],
            )
            .await?;
        let (total, left): (i64, i64) = (r.try_get(0)?, r.try_get(1)?);
        let total = total.max(0) as u64;
        Ok((total - (left.max(0) as u64).min(total), total))
    }

    /// See [`crate::core::backend::Backend::item_hits`].
    pub(crate) async fn item_hit_rows(
        &self,
        items: &[(ItemKind, i64, f64)],
    ) -> Result<Vec<GrepHit>> {
        let c = self.client().await?;
        let msg = c
            .prepare_cached(
                "SELECT conv_id, role::bigint, ts, text, skeleton FROM messages WHERE id = $1",
            )
            .await?;
        let sum = c
            .prepare_cached(
                "SELECT conv_id, depth::bigint, to_ts, text FROM summaries WHERE id = $1",
            )
            .await?;
        let mut out = Vec::with_capacity(items.len());
        for &(kind, id, score) in items {
            match kind {
                ItemKind::Message => {
                    if let Some(r) = c.query_opt(&msg, &[&id]).await? {
                        let text: String = r.try_get(3)?;
                        let sk: Option<String> = r.try_get(4)?;
                        out.push(
                            message_hit_of(
                                id,
                                r.try_get(0)?,
                                r.try_get(1)?,
                                sk.as_deref(),
                                r.try_get(2)?,
                                &text,
                                Some(score),
                                &[],
                            )
                            .2,
                        );
                    }
                }
                ItemKind::Summary => {
                    if let Some(r) = c.query_opt(&sum, &[&id]).await? {
                        let text: String = r.try_get(3)?;
                        out.push(
                            summary_hit_of(
                                id,
                                r.try_get(0)?,
                                r.try_get(1)?,
                                r.try_get(2)?,
                                &text,
                                Some(score),
                                &[],
                                None,
                            )
                            .2,
                        );
                    }
                }
            }
        }
        Ok(out)
    }
}

fn item(kind: ItemKind, r: &tokio_postgres::Row) -> Result<EmbedItem> {
    let text: String = r.try_get(3)?;
    Ok(EmbedItem {
        kind,
        item_id: r.try_get(0)?,
        conv_id: r.try_get(1)?,
        tokens: r.try_get::<_, i64>(2)?.max(0) as u64,
        text: embed_text(&text).to_owned(),
    })
}
