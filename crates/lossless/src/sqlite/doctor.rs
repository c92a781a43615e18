//! Status and doctor on SQLite: the file's sizes and counts, `PRAGMA quick_check`, and the
//! rows [`crate::core::doctor`]'s checks read per conversation.

use std::collections::{HashMap, HashSet};

use rusqlite::params;

use crate::core::doctor::{
    check_conversation, check_dag, sort_issues, DagLevel, DoctorIssue, DoctorReport, StatusReport,
    StoreCheck,
};
use crate::error::Result;
use crate::sqlite::Db;

impl Db {
    /// Size, counts and growth.
    pub fn status(&self) -> Result<StatusReport> {
        let page_size: i64 = self.conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        let pages: i64 = self.conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
        let free: i64 = self
            .conn
            .query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
        let mut s = StatusReport {
            db_bytes: (page_size * pages) as u64,
            free_bytes: (page_size * free) as u64,
            ..Default::default()
        };
        let (convs, raw, tokens): (i64, i64, i64) = self.conn.query_row(
            "SELECT count(*), coalesce(sum(raw_bytes), 0), coalesce(sum(msg_tokens), 0) FROM conversations",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        s.conversations = convs as u64;
        s.raw_text_bytes = raw as u64;
        s.message_tokens = tokens as u64;
        s.frontier_tokens = self.conn.query_row(
            "SELECT coalesce(sum(frontier_tokens), 0) FROM conversations WHERE active = 1",
            [],
            |r| r.get::<_, i64>(0),
        )? as u64;
        s.messages = self.conn.query_row(
            "SELECT coalesce(sum(msg_count), 0) FROM conversations",
            [],
            |r| r.get::<_, i64>(0),
        )? as u64;
        let mut st = self
            .conn
            .prepare("SELECT depth, count(*) FROM summaries GROUP BY depth ORDER BY depth")?;
        s.depth_histogram = st
            .query_map([], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)? as u64))
            })?
            .collect::<rusqlite::Result<_>>()?;
        s.summaries = s.depth_histogram.iter().map(|d| d.1).sum();
        s.max_depth = s.depth_histogram.last().map(|d| d.0).unwrap_or(-1);
        let mut st = self.conn.prepare(
            "SELECT s.depth, count(*), avg(c.n), max(c.n) FROM summaries s
             JOIN (SELECT summary_id, count(*) AS n FROM summary_children GROUP BY summary_id) c
               ON c.summary_id = s.id
             GROUP BY s.depth ORDER BY s.depth",
        )?;
        s.dag = st
            .query_map([], |r| {
                Ok(DagLevel {
                    depth: r.get(0)?,
                    count: r.get::<_, i64>(1)? as u64,
                    mean_fanout: r.get(2)?,
                    max_fanout: r.get::<_, i64>(3)? as u64,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        let (fm, fs): (i64, i64) = self.conn.query_row(
            "SELECT ifnull(sum(f.kind = 0), 0), ifnull(sum(f.kind = 1), 0) FROM frontier f
             JOIN conversations c ON c.id = f.conv_id AND c.active = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        s.frontier_messages = fm as u64;
        s.frontier_summaries = fs as u64;
        let (np, pb, pr): (i64, i64, i64) = self.conn.query_row(
            "SELECT count(*), ifnull(sum(bytes), 0), ifnull(sum(refs), 0) FROM payloads",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        s.payloads = np as u64;
        s.payload_bytes = pb as u64;
        s.payload_refs = pr as u64;
        if s.raw_text_bytes > 0 {
            s.bytes_per_raw_byte = s.db_bytes as f64 / s.raw_text_bytes as f64;
        }
        if s.messages > 0 {
            s.bytes_per_message = s.db_bytes as f64 / s.messages as f64;
        }
        Ok(s)
    }

    /// Checks every invariant (see the module docs).
    pub fn doctor(&self) -> Result<DoctorReport> {
        let sqlite_check: String = self
            .conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))?;
        let mut issues = Vec::new();
        if sqlite_check != "ok" {
            issues.push(DoctorIssue {
                conversation_id: 0,
                code: "sqlite".into(),
                detail: sqlite_check.clone(),
            });
        }
        // Whole-DB maps: summary children, summary owners.
        let mut children: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
        {
            let mut st = self.conn.prepare(
                "SELECT summary_id, kind, child_id FROM summary_children ORDER BY summary_id, ord",
            )?;
            let mut rows = st.query([])?;
            while let Some(r) = rows.next()? {
                children
                    .entry(r.get(0)?)
                    .or_default()
                    .push((r.get(1)?, r.get(2)?));
            }
        }
        let mut summary_conv: HashMap<i64, (i64, i64)> = HashMap::new();
        {
            let mut st = self
                .conn
                .prepare("SELECT id, conv_id, depth FROM summaries")?;
            let mut rows = st.query([])?;
            while let Some(r) = rows.next()? {
                summary_conv.insert(r.get(0)?, (r.get(1)?, r.get(2)?));
            }
        }
        let convs = self.conversations()?;
        for conv in &convs {
            // Messages of this conversation, by id: (seq, role).
            let mut by_seq: Vec<(i64, i64, i64)> = Vec::new();
            {
                let mut st = self.conn.prepare_cached(
                    "SELECT id, seq, role FROM messages WHERE conv_id = ?1 ORDER BY seq",
                )?;
                let mut rows = st.query([conv.id])?;
                while let Some(r) = rows.next()? {
                    let (id, seq, ro): (i64, i64, i64) = (r.get(0)?, r.get(1)?, r.get(2)?);
                    by_seq.push((id, seq, ro));
                }
            }
            let mut frontier: Vec<(i64, i64, i64)> = Vec::new();
            {
                let mut st = self.conn.prepare_cached(
                    "SELECT kind, item_id, tokens FROM frontier WHERE conv_id = ?1 ORDER BY ord",
                )?;
                let mut rows = st.query([conv.id])?;
                while let Some(r) = rows.next()? {
                    frontier.push((r.get(0)?, r.get(1)?, r.get(2)?));
                }
            }
            check_conversation(conv, &by_seq, &frontier, &children, &mut issues);
        }
        // Orphans: summaries in no frontier and child of no summary.
        let in_frontier: HashSet<i64> = {
            let mut st = self
                .conn
                .prepare("SELECT item_id FROM frontier WHERE kind = 1")?;
            let v = st
                .query_map([], |r| r.get::<_, i64>(0))?
                .collect::<rusqlite::Result<HashSet<_>>>()?;
            v
        };
        let mut exists = self
            .conn
            .prepare_cached("SELECT 1 FROM messages WHERE id = ?1")?;
        check_dag(
            &children,
            &summary_conv,
            &in_frontier,
            |cid| Ok(exists.exists(params![cid])?),
            &mut issues,
        )?;

        // Deduplicated payloads: reference counts match, no message points at a missing one.
        {
            let mut st = self.conn.prepare(
                "SELECT p.id, p.refs, (SELECT count(*) FROM messages m WHERE m.payload = p.id) FROM payloads p",
            )?;
            let mut rows = st.query([])?;
            while let Some(r) = rows.next()? {
                let (id, refs, actual): (i64, i64, i64) = (r.get(0)?, r.get(1)?, r.get(2)?);
                if refs != actual {
                    issues.push(DoctorIssue {
                        conversation_id: 0,
                        code: "payload-refs".into(),
                        detail: format!(
                            "payload {id} counts {refs} references, {actual} messages use it"
                        ),
                    });
                }
            }
            let mut st = self.conn.prepare(
                "SELECT m.id, m.conv_id FROM messages m WHERE m.payload IS NOT NULL
                 AND NOT EXISTS (SELECT 1 FROM payloads p WHERE p.id = m.payload)",
            )?;
            let mut rows = st.query([])?;
            while let Some(r) = rows.next()? {
                let id: i64 = r.get(0)?;
                issues.push(DoctorIssue {
                    conversation_id: r.get(1)?,
                    code: "missing-payload".into(),
                    detail: format!(
                        "{} points at a payload that does not exist",
                        crate::core::ids::message_id(id)
                    ),
                });
            }
        }
        sort_issues(&mut issues);
        Ok(DoctorReport {
            ok: issues.is_empty(),
            store_check: StoreCheck::Sqlite(sqlite_check),
            issues,
            conversations_checked: convs.len(),
            status: self.status()?,
        })
    }
}
