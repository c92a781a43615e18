//! What the campaign reads from a store after a kill, through a fresh open (the restart): the
//! doctor's verdict, SQLite's `PRAGMA integrity_check`, every stored message's tokens counted,
//! every conversation assembled back through the storage boundary the engine uses, and a
//! sample of acknowledged messages found by full-text search (the index is written apart from
//! the rows on both backends, on SQLite partly after the answer: a kill must not leave a
//! stored message unfindable).

use std::collections::HashMap;
use std::sync::Arc;

use clawctx_lossless::pg::PgStore;
use clawctx_lossless::{
    AssembleRequest, Backend, ConvKey, GrepQuery, GrepTarget, LosslessStore, Scope,
};

use super::workload::{token, tokens_in};
use crate::error::{BenchError, Result};

/// One store as a restart finds it.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Stored messages per token id.
    pub counts: HashMap<u64, u32>,
    /// Message rows that carry no token, or more than one.
    pub untokened: u64,
    /// `lcm doctor`'s verdict.
    pub doctor_ok: bool,
    /// The doctor's issues, as `code: detail` (conversation id first).
    pub doctor_issues: Vec<String>,
    /// SQLite's `PRAGMA integrity_check` rows (`["ok"]` when clean); `None` on PostgreSQL.
    pub integrity: Option<Vec<String>>,
    /// Conversations that did not assemble back, with the reason.
    pub readback: Vec<String>,
    /// Searched tokens not found exactly once by `lcm_grep`: (id, hits).
    pub search_misses: Vec<(u64, usize)>,
    /// Message rows.
    pub messages: u64,
    /// Summary rows.
    pub summaries: u64,
}

impl Snapshot {
    /// Whether `PRAGMA integrity_check` said `ok` (always true on PostgreSQL).
    pub fn integrity_ok(&self) -> bool {
        self.integrity
            .as_ref()
            .is_none_or(|rows| rows.len() == 1 && rows[0] == "ok")
    }
}

fn failed(stage: &'static str) -> impl Fn(clawctx_lossless::LosslessError) -> BenchError {
    move |e| BenchError::engine("lossless", stage, e)
}

fn count_tokens(texts: &[String], snap: &mut Snapshot) {
    for text in texts {
        let ids = tokens_in(text);
        if ids.len() != 1 {
            snap.untokened += 1;
        }
        for id in ids {
            *snap.counts.entry(id).or_default() += 1;
        }
    }
    snap.messages = texts.len() as u64;
}

/// Doctor, status, the read-back of every conversation and the search of `search`'s tokens,
/// through the backend.
async fn common(store: &dyn Backend, search: &[u64], snap: &mut Snapshot) -> Result<()> {
    for &id in search {
        let q = GrepQuery {
            target: GrepTarget::Messages,
            ..GrepQuery::new(token(id), Scope::All)
        };
        let hits = store.grep(q).await.map_err(failed("lcm_grep"))?.hits.len();
        if hits != 1 {
            snap.search_misses.push((id, hits));
        }
    }
    let doctor = store.doctor().await.map_err(failed("doctor"))?;
    snap.doctor_ok = doctor.ok;
    snap.doctor_issues = doctor
        .issues
        .iter()
        .map(|i| {
            format!(
                "conversation {}: {}: {}",
                i.conversation_id, i.code, i.detail
            )
        })
        .collect();
    snap.summaries = doctor.status.summaries;
    for conv in store
        .conversations()
        .await
        .map_err(failed("conversations"))?
    {
        let req = AssembleRequest {
            key: ConvKey {
                agent_id: conv.agent_id.clone(),
                session_key: conv.session_key.clone(),
            },
            recent: Vec::new(),
            budget: 16_000,
            prompt: None,
            recall_reserve: 0,
            recall_max_messages: 0,
            recall_max_tokens: 0,
            cache_block_share: 0.0,
            whole_first: true,
            semantic: Vec::new(),
            lexical_recall: true,
        };
        match store.assemble(req).await {
            Ok(Some((_, a))) if conv.msg_count == 0 || !a.messages.is_empty() => {}
            Ok(Some(_)) => snap.readback.push(format!(
                "{}: {} messages stored, none assembled",
                conv.session_key, conv.msg_count
            )),
            Ok(None) if conv.msg_count == 0 || !conv.active => {}
            Ok(None) => snap.readback.push(format!(
                "{}: the conversation was not found",
                conv.session_key
            )),
            Err(e) => snap.readback.push(format!("{}: {e}", conv.session_key)),
        }
    }
    Ok(())
}

/// Opens the SQLite store at `path` and reads it (see the module header).
pub async fn sqlite(path: &std::path::Path, search: &[u64]) -> Result<Snapshot> {
    let p = path.to_owned();
    let store = tokio::task::spawn_blocking(move || LosslessStore::open(&p))
        .await
        .map_err(|e| BenchError::engine("lossless", "open", e))?
        .map_err(failed("open"))?;
    let mut snap = Snapshot::default();
    let out = async {
        common(&store, search, &mut snap).await?;
        let integrity = store
            .call(|db| {
                db.tx(|c| {
                    let mut st = c.prepare("PRAGMA integrity_check")?;
                    let rows = st
                        .query_map([], |r| r.get::<_, String>(0))?
                        .collect::<Result<Vec<_>, _>>()?;
                    Ok(rows)
                })
            })
            .await
            .map_err(failed("integrity_check"))?;
        snap.integrity = Some(integrity);
        let texts = store
            .call(|db| {
                db.tx(|c| {
                    let mut st = c.prepare("SELECT text FROM message_rows")?;
                    let rows = st
                        .query_map([], |r| r.get::<_, String>(0))?
                        .collect::<Result<Vec<_>, _>>()?;
                    Ok(rows)
                })
            })
            .await
            .map_err(failed("reading messages"))?;
        count_tokens(&texts, &mut snap);
        Ok::<_, BenchError>(())
    }
    .await;
    store.close_wait().await;
    out.map(|()| snap)
}

/// Opens the PostgreSQL store at `url` and reads it (see the module header).
pub async fn postgres(url: &str, search: &[u64]) -> Result<Snapshot> {
    let store = Arc::new(PgStore::open_url(url).await.map_err(failed("open"))?);
    let mut snap = Snapshot::default();
    let out = async {
        common(store.as_ref(), search, &mut snap).await?;
        let texts = pg_texts(url, "SELECT text FROM messages").await?;
        count_tokens(&texts, &mut snap);
        Ok::<_, BenchError>(())
    }
    .await;
    store.close().await;
    out.map(|()| snap)
}

/// The first column of every row of `sql`, as text, on a connection of its own.
async fn pg_texts(url: &str, sql: &str) -> Result<Vec<String>> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| BenchError::engine("postgres", "connect", e))?;
    let driver = tokio::spawn(conn);
    let rows = client
        .query(sql, &[])
        .await
        .map_err(|e| BenchError::engine("postgres", "read", format!("{sql}: {e}")));
    drop(client);
    let _ = driver.await;
    Ok(rows?.iter().map(|r| r.get::<_, String>(0)).collect())
}

/// The token ids of `session_key`'s stored messages in the order the SQLite store at `path`
/// holds them (by conversation, then sequence).
pub async fn sqlite_session_order(path: &std::path::Path, session_key: &str) -> Result<Vec<u64>> {
    let p = path.to_owned();
    let store = tokio::task::spawn_blocking(move || LosslessStore::open(&p))
        .await
        .map_err(|e| BenchError::engine("lossless", "open", e))?
        .map_err(failed("open"))?;
    let key = session_key.to_owned();
    let texts = store
        .call(move |db| {
            db.tx(|c| {
                let mut st = c.prepare(
                    "SELECT m.text FROM message_rows m JOIN conversations c ON c.id = m.conv_id
                     WHERE c.session_key = ?1 ORDER BY m.conv_id, m.seq",
                )?;
                let rows = st
                    .query_map([&key], |r| r.get::<_, String>(0))?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
        })
        .await
        .map_err(failed("reading the session's messages"));
    store.close_wait().await;
    Ok(texts?
        .iter()
        .filter_map(|t| tokens_in(t).first().copied())
        .collect())
}

/// [`sqlite_session_order`] on the PostgreSQL store at `url`.
pub async fn postgres_session_order(url: &str, session_key: &str) -> Result<Vec<u64>> {
    if session_key.contains('\'') {
        return Err(BenchError::InvalidArgument(format!(
            "a session key with a quote: {session_key}"
        )));
    }
    let texts = pg_texts(
        url,
        &format!(
            "SELECT m.text FROM messages m JOIN conversations c ON c.id = m.conv_id
             WHERE c.session_key = '{session_key}' ORDER BY m.conv_id, m.seq"
        ),
    )
    .await?;
    Ok(texts
        .iter()
        .filter_map(|t| tokens_in(t).first().copied())
        .collect())
}
