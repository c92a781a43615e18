//! `status`, `doctor` and payload retention on the PostgreSQL store.
//!
//! Doctor runs the checks the SQLite store's runs ([`crate::core::doctor`]'s `check_conversation`
//! and `check_dag`, shared): coverage of every message by its frontier, tool pairs, running
//! totals, unique sequence numbers, orphan and childless summaries, missing children, depth
//! consistency. What is SQLite's own has a PostgreSQL counterpart or none:
//!
//! - `sqliteCheck`: PostgreSQL checks its own storage; the report has `postgresCheck` instead,
//!   the schema check (`ok` when the schema row names this application at this build's
//!   version);
//! - the deduplicated-payload checks: PostgreSQL keeps every text inline (no `payloads`
//!   table), so there is nothing to count.
//!
//! Status: `dbBytes` is `pg_total_relation_size` (table, indexes, TOAST) summed over the
//! store's tables; `freeBytes` is 0 (PostgreSQL's free space is not a figure of the database
//! we could report cheaply); `payloads`, `payloadBytes`, `payloadRefs` are 0 (no payload
//! table). Every count and token figure is the SQLite store's for the same data.

use std::collections::{HashMap, HashSet};

use deadpool_postgres::GenericClient;

use super::store::{conv_row, PgStore, CONV_COLS};
use crate::core::doctor::{
    check_conversation, check_dag, sort_issues, Children, DagLevel, DoctorIssue, DoctorReport,
    StatusReport, StoreCheck,
};
use crate::core::retention::{expires, placeholder, rewritten, Referrer, RetentionReport};
use crate::error::Result;

/// The store's tables, for the database size.
const TABLES: &[&str] = &[
    "conversations",
    "messages",
    "summaries",
    "summary_children",
    "frontier",
    "guard_state",
    "turn_commits",
    "clawctx_lossless_schema",
];

impl PgStore {
    /// Size, counts, growth (see the module docs for the fields PostgreSQL has no figure for).
    pub(crate) async fn status_report(&self) -> Result<StatusReport> {
        let mut client = self.client().await?;
        let tx = Self::snapshot(&mut client).await?;
        let s = Self::status_on(&tx).await?;
        tx.commit().await?;
        Ok(s)
    }

    async fn status_on(c: &impl GenericClient) -> Result<StatusReport> {
        let tables: Vec<String> = TABLES.iter().map(|t| t.to_string()).collect();
        let db_bytes: i64 = c
            .query_one(
                "SELECT coalesce(sum(pg_total_relation_size(to_regclass(t))), 0)::bigint
                 FROM unnest($1::text[]) AS t WHERE to_regclass(t) IS NOT NULL",
                &[&tables],
            )
            .await?
            .try_get(0)?;
        let mut s = StatusReport {
            db_bytes: db_bytes.max(0) as u64,
            ..Default::default()
        };
        let r = c
            .query_one(
                "SELECT count(*), coalesce(sum(raw_bytes), 0)::bigint, coalesce(sum(msg_tokens), 0)::bigint,
                        coalesce(sum(msg_count), 0)::bigint,
                        coalesce(sum(frontier_tokens) FILTER (WHERE active), 0)::bigint
                 FROM conversations",
                &[],
            )
            .await?;
        s.conversations = r.try_get::<_, i64>(0)?.max(0) as u64;
        s.raw_text_bytes = r.try_get::<_, i64>(1)?.max(0) as u64;
        s.message_tokens = r.try_get::<_, i64>(2)?.max(0) as u64;
        s.messages = r.try_get::<_, i64>(3)?.max(0) as u64;
        s.frontier_tokens = r.try_get::<_, i64>(4)?.max(0) as u64;
        let rows = c
            .query(
                "SELECT depth::bigint, count(*) FROM summaries GROUP BY depth ORDER BY depth",
                &[],
            )
            .await?;
        s.depth_histogram = rows
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get::<_, i64>(1)?.max(0) as u64)))
            .collect::<Result<_>>()?;
        s.summaries = s.depth_histogram.iter().map(|d| d.1).sum();
        s.max_depth = s.depth_histogram.last().map(|d| d.0).unwrap_or(-1);
        let rows = c
            .query(
                "SELECT s.depth::bigint, count(*), avg(c.n)::float8, max(c.n)
                 FROM summaries s
                 JOIN (SELECT summary_id, count(*) AS n FROM summary_children GROUP BY summary_id) c
                   ON c.summary_id = s.id
                 GROUP BY s.depth ORDER BY s.depth",
                &[],
            )
            .await?;
        s.dag = rows
            .iter()
            .map(|r| {
                Ok(DagLevel {
                    depth: r.try_get(0)?,
                    count: r.try_get::<_, i64>(1)?.max(0) as u64,
                    mean_fanout: r.try_get(2)?,
                    max_fanout: r.try_get::<_, i64>(3)?.max(0) as u64,
                })
            })
            .collect::<Result<_>>()?;
        let r = c
            .query_one(
                "SELECT count(*) FILTER (WHERE f.kind = 0), count(*) FILTER (WHERE f.kind = 1)
                 FROM frontier f JOIN conversations c ON c.id = f.conv_id AND c.active",
                &[],
            )
            .await?;
        s.frontier_messages = r.try_get::<_, i64>(0)?.max(0) as u64;
        s.frontier_summaries = r.try_get::<_, i64>(1)?.max(0) as u64;
        if s.raw_text_bytes > 0 {
            s.bytes_per_raw_byte = s.db_bytes as f64 / s.raw_text_bytes as f64;
        }
        if s.messages > 0 {
            s.bytes_per_message = s.db_bytes as f64 / s.messages as f64;
        }
        Ok(s)
    }

    /// Integrity checks (see the module docs), in one snapshot.
    pub(crate) async fn doctor_report(&self) -> Result<DoctorReport> {
        let mut client = self.client().await?;
        let tx = Self::snapshot(&mut client).await?;
        let mut issues = Vec::new();
        let schema = tx
            .query_opt(
                "SELECT version, app FROM clawctx_lossless_schema WHERE k = 1",
                &[],
            )
            .await?;
        let schema_check = match schema {
            Some(r) => {
                let (version, app): (i32, String) = (r.try_get(0)?, r.try_get(1)?);
                if version == super::schema::SCHEMA_VERSION && app == super::schema::APP {
                    "ok".to_owned()
                } else {
                    format!(
                        "schema version {version} of {app:?}, this build reads version {} of {:?}",
                        super::schema::SCHEMA_VERSION,
                        super::schema::APP
                    )
                }
            }
            None => "the schema row is missing".to_owned(),
        };
        if schema_check != "ok" {
            issues.push(DoctorIssue {
                conversation_id: 0,
                code: "schema".into(),
                detail: schema_check.clone(),
            });
        }
        let mut children: Children = HashMap::new();
        for r in tx
            .query(
                "SELECT summary_id, kind::bigint, child_id FROM summary_children ORDER BY summary_id, ord",
                &[],
            )
            .await?
        {
            children
                .entry(r.try_get(0)?)
                .or_default()
                .push((r.try_get(1)?, r.try_get(2)?));
        }
        let mut summary_conv: HashMap<i64, (i64, i64)> = HashMap::new();
        for r in tx
            .query("SELECT id, conv_id, depth::bigint FROM summaries", &[])
            .await?
        {
            summary_conv.insert(r.try_get(0)?, (r.try_get(1)?, r.try_get(2)?));
        }
        let convs = tx
            .query(
                &format!("SELECT {CONV_COLS} FROM conversations ORDER BY id"),
                &[],
            )
            .await?
            .iter()
            .map(conv_row)
            .collect::<Result<Vec<_>>>()?;
        // Every conversation's messages and frontier in two reads, grouped here.
        let mut msgs: HashMap<i64, Vec<(i64, i64, i64)>> = HashMap::new();
        let mut all_msgs: HashSet<i64> = HashSet::new();
        for r in tx
            .query(
                "SELECT conv_id, id, seq, role::bigint FROM messages ORDER BY conv_id, seq, id",
                &[],
            )
            .await?
        {
            let id: i64 = r.try_get(1)?;
            all_msgs.insert(id);
            msgs.entry(r.try_get(0)?)
                .or_default()
                .push((id, r.try_get(2)?, r.try_get(3)?));
        }
        let mut frontiers: HashMap<i64, Vec<(i64, i64, i64)>> = HashMap::new();
        let mut in_frontier: HashSet<i64> = HashSet::new();
        for r in tx
            .query(
                "SELECT conv_id, kind::bigint, item_id, tokens FROM frontier ORDER BY conv_id, ord",
                &[],
            )
            .await?
        {
            let (kind, item): (i64, i64) = (r.try_get(1)?, r.try_get(2)?);
            if kind == 1 {
                in_frontier.insert(item);
            }
            frontiers
                .entry(r.try_get(0)?)
                .or_default()
                .push((kind, item, r.try_get(3)?));
        }
        for conv in &convs {
            let by_seq = msgs.remove(&conv.id).unwrap_or_default();
            let frontier = frontiers.remove(&conv.id).unwrap_or_default();
            check_conversation(conv, &by_seq, &frontier, &children, &mut issues);
        }
        check_dag(
            &children,
            &summary_conv,
            &in_frontier,
            |id| Ok(all_msgs.contains(&id)),
            &mut issues,
        )?;
        sort_issues(&mut issues);
        let status = Self::status_on(&tx).await?;
        tx.commit().await?;
        Ok(DoctorReport {
            ok: issues.is_empty(),
            store_check: StoreCheck::Postgres(schema_check),
            issues,
            conversations_checked: convs.len(),
            status,
        })
    }

    /// Payload retention, PostgreSQL's closest equivalent of the SQLite store's (see
    /// [`crate::core::retention`]).
    ///
    /// SQLite keeps a large text once per content in `payloads`, with the time it was first
    /// stored; PostgreSQL keeps every text inline in its message and records no storage time.
    /// So here a "payload" is a distinct large text (at least the configured
    /// `largePayloadBytes`, [`PgStore::with_large_payload_bytes`]) among the messages, keyed by
    /// the same content hash (the first 16 bytes of its SHA-256), and its age is the newest of
    /// its first message's timestamp and its conversation's creation time (no message is
    /// stored before its conversation exists: the best estimate of when SQLite would have
    /// stored it; a host's clock or an import of old sessions can make it earlier than that).
    /// The rules are SQLite's: a payload older than `cutoff_ms` is expired unless one of its
    /// messages is raw in a frontier; each of its messages gets its large text slots replaced
    /// by the placeholder, keeps its identity hash, its place in the DAG and its full-text
    /// terms, and its conversation's `msg_tokens` drops by the tokens saved. `bytesFreed`
    /// counts every copy removed (SQLite's counts the one stored copy). One transaction;
    /// conversations' rows are locked as writes lock them. Texts are read one payload at a
    /// time (the hashes are computed by the server), so memory stays small at any store size.
    pub(crate) async fn expire(&self, cutoff_ms: i64, apply: bool) -> Result<RetentionReport> {
        let large = i64::try_from(self.large_payload_bytes).unwrap_or(i64::MAX);
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let mut report = RetentionReport {
            dry_run: !apply,
            ..Default::default()
        };
        let rows = tx
            .query(
                "SELECT m.id, m.conv_id, m.role::bigint, m.skeleton, m.ts, m.tokens,
                        octet_length(m.text)::bigint,
                        substring(sha256(convert_to(m.text, 'UTF8')) from 1 for 16),
                        greatest(coalesce(m.ts, c.created_at), c.created_at),
                        EXISTS(SELECT 1 FROM frontier f WHERE f.conv_id = m.conv_id AND f.kind = 0 AND f.item_id = m.id)
                 FROM messages m JOIN conversations c ON c.id = m.conv_id
                 WHERE octet_length(m.text) >= $1::bigint
                 ORDER BY m.id",
                &[&large],
            )
            .await?;
        struct Payload {
            age: i64,
            bytes: i64,
            refs: Vec<Referrer>,
        }
        // Payloads in order of first storage, each with its messages.
        let mut order: Vec<Vec<u8>> = Vec::new();
        let mut payloads: HashMap<Vec<u8>, Payload> = HashMap::new();
        for r in &rows {
            let hash: Vec<u8> = r.try_get(7)?;
            let age: i64 = r.try_get(8)?;
            let referrer = Referrer {
                id: r.try_get(0)?,
                conv_id: r.try_get(1)?,
                role: r.try_get(2)?,
                skeleton: r.try_get(3)?,
                ts: r.try_get(4)?,
                tokens: r.try_get(5)?,
                raw_in_frontier: r.try_get(9)?,
            };
            match payloads.get_mut(&hash) {
                // Stored when its first message was.
                Some(p) => p.refs.push(referrer),
                None => {
                    order.push(hash.clone());
                    let bytes = r.try_get(6)?;
                    payloads.insert(
                        hash,
                        Payload {
                            age,
                            bytes,
                            refs: vec![referrer],
                        },
                    );
                }
            }
        }
        for hash in order {
            let Some(p) = payloads.remove(&hash) else {
                continue;
            };
            if p.age >= cutoff_ms {
                continue;
            }
            // Each of its messages holds the text.
            let freed = p.bytes.max(0) as u64 * p.refs.len() as u64;
            if !expires(&mut report, &p.refs, freed) || !apply {
                continue;
            }
            let stub = placeholder(p.bytes, &hash);
            for r in p.refs {
                // The conversation's row first, as every write to a conversation does.
                tx.execute(
                    "SELECT 1 FROM conversations WHERE id = $1 FOR UPDATE",
                    &[&r.conv_id],
                )
                .await?;
                let text: String = tx
                    .query_one("SELECT text FROM messages WHERE id = $1", &[&r.id])
                    .await?
                    .try_get(0)?;
                let e = rewritten(&r, &text, &stub)?;
                let tokens = e.tokens as i64;
                // The identity hash and the full-text terms stay.
                tx.execute(
                    "UPDATE messages SET text = $2, skeleton = $3, tokens = $4 WHERE id = $1",
                    &[&r.id, &e.text, &e.skeleton, &tokens],
                )
                .await?;
                tx.execute(
                    "UPDATE conversations SET msg_tokens = msg_tokens - $2 WHERE id = $1",
                    &[&r.conv_id, &(r.tokens - tokens)],
                )
                .await?;
            }
        }
        tx.commit().await?;
        Ok(report)
    }
}
