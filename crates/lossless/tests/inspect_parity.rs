//! The dashboard's views ([`clawctx_lossless::inspect::Inspect`]) answer the same on SQLite and
//! PostgreSQL for the same data: the sessions list, each session's timeline and frontier, the
//! DAG's overview, every summary's children, every node's path, every page of every
//! conversation at several page sizes, pages around messages, and the same errors for the same
//! bad requests.
//!
//! Both stores get the same operations in the same order (turns with tool calls and large tool
//! outputs, compaction to depth ≥ 1, `/new` with summaries carried over, several sessions of
//! two agents), so their ids agree and views compare as JSON. Summaries are stamped with the
//! wall clock when written, which differs between the two runs, so before comparing, the test
//! gives both stores the same times (three summaries a stamp, so passes of several summaries
//! are grouped too). The PostgreSQL half needs `CLAWCTX_TEST_PG_URL` (a fresh database per
//! test); without it the test skips, except under `CI=true`, where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;

use clawctx_engine::ContextEngine;
use clawctx_lossless::inspect::{DagNode, PageAt};
use clawctx_lossless::pg::PgStore;
use clawctx_lossless::*;
use clawctx_protocol::*;
use clawctx_test_support::pg::test_database;
use common::*;
use serde_json::json;

const OTHER_KEY: &str = "agent:other:test:direct:2";
const THIRD_KEY: &str = "agent:main:test:direct:3";
const NOBODY_KEY: &str = "agent:main:test:direct:nobody";

/// The SQL both stores get so their summaries' times agree (valid on both databases: integer
/// division on both).
const SAME_TIMES: &str = "UPDATE summaries SET created_at = 1700000000000 + (id / 3) * 1000";

/// One conversation's history: turns, every third with a tool call, some with a large tool
/// output, some with a role the store does not name.
fn history(seed: u64, turns: usize) -> Vec<AgentMessage> {
    let mut rng = Lcg(seed);
    let mut h = Vec::new();
    for t in 0..turns {
        let mut msgs = turn(&mut rng, t, t % 3 == 0, 40);
        if t % 5 == 1 {
            let ts = 1_700_000_000_000i64 + (t as i64) * 60_000 + 7;
            let m: AgentMessage = serde_json::from_value(json!({
                "role": "system",
                "content": format!("system note {t}: deploy policy changed"),
                "timestamp": ts,
            }))
            .unwrap();
            msgs.push(m);
        }
        if t % 11 == 5 {
            let id = format!("big_{seed}_{t}");
            let ts = 1_700_000_000_000i64 + (t as i64) * 60_000 + 5;
            msgs.push(
                AgentMessage::tool_call(&id, "read", json!({"path": "big.log"})).with_timestamp(ts),
            );
            msgs.push(
                AgentMessage::tool_result(
                    &id,
                    "read",
                    format!("   \n\n  log{t} {}", words(&mut rng, 1_500)),
                )
                .with_timestamp(ts + 1),
            );
        }
        h.extend(msgs);
    }
    h
}

/// Stores `h` in `key`'s conversation eight messages a turn (compacting as a host's turns
/// would), then forces a compaction.
async fn play(e: &LosslessEngine, key: &str, h: &[AgentMessage]) {
    let params = |end: usize, pre: usize| AfterTurnParams {
        session_key: Some(key.into()),
        ..after_turn(&h[..end], pre, 8_000)
    };
    let mut pre = 0;
    for end in (8..=h.len()).step_by(8) {
        e.after_turn(&params(end, pre), &cx()).await.unwrap();
        pre = end;
    }
    e.after_turn(&params(h.len(), pre), &cx()).await.unwrap();
    let force = CompactParams {
        session_key: Some(key.into()),
        ..compact_params(true, 8_000)
    };
    e.compact(&force, &cx()).await.unwrap();
}

/// Runs `sql` on the SQLite store of `e`.
async fn sqlite_execute(e: &LosslessEngine, sql: &'static str) {
    e.store()
        .unwrap()
        .call(move |db| {
            db.tx(|c| {
                c.execute_batch(sql)?;
                Ok(())
            })
        })
        .await
        .unwrap();
}

/// Runs `sql` on the PostgreSQL database at `url`.
async fn pg_execute(url: &str, sql: &str) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    client.batch_execute(sql).await.unwrap();
    drop(client);
    let _ = conn.await;
}

/// The two answers to `what` are the same: equal JSON, or errors with equal text. Returns the
/// SQLite answer when there is one.
fn same<T: serde::Serialize + std::fmt::Debug>(
    what: &str,
    sqlite: clawctx_lossless::error::Result<T>,
    pg: clawctx_lossless::error::Result<T>,
) -> Option<T> {
    match (sqlite, pg) {
        (Ok(a), Ok(b)) => {
            let (ja, jb) = (
                serde_json::to_value(&a).unwrap(),
                serde_json::to_value(&b).unwrap(),
            );
            if ja != jb {
                panic!("{what}: SQLite and PostgreSQL differ\nSQLite:     {ja}\nPostgreSQL: {jb}");
            }
            Some(a)
        }
        (Err(a), Err(b)) => {
            assert_eq!(
                a.to_string(),
                b.to_string(),
                "{what}: errors (SQLite left, PostgreSQL right)"
            );
            None
        }
        (a, b) => panic!("{what}: SQLite answered {a:?}, PostgreSQL {b:?}"),
    }
}

/// Two stores' views compared, with counts of what was compared.
struct Compare<'a> {
    sqlite: &'a dyn Backend,
    pg: &'a dyn Backend,
    pages: usize,
    children: usize,
    paths: usize,
}

impl Compare<'_> {
    async fn children(&mut self, key: &ConvKey, id: &str) -> Option<Vec<DagNode>> {
        self.children += 1;
        same(
            &format!("children of {id} in {}", key.session_key),
            self.sqlite.dag_children(key, id).await,
            self.pg.dag_children(key, id).await,
        )
    }

    async fn path(&mut self, key: &ConvKey, id: &str) -> Option<Vec<String>> {
        self.paths += 1;
        same(
            &format!("path of {id} in {}", key.session_key),
            self.sqlite.dag_path(key, id).await,
            self.pg.dag_path(key, id).await,
        )
    }

    async fn page(
        &mut self,
        key: &ConvKey,
        at: PageAt,
        limit: usize,
    ) -> Option<inspect::MessagePage> {
        self.pages += 1;
        same(
            &format!("page {at:?} limit {limit} of {}", key.session_key),
            self.sqlite.message_page(key, at.clone(), limit).await,
            self.pg.message_page(key, at, limit).await,
        )
    }

    /// Every view of `key`'s conversation; returns its message ids.
    async fn conversation(&mut self, key: &ConvKey) -> Vec<String> {
        let name = &key.session_key;
        let view = same(
            &format!("session view of {name}"),
            self.sqlite.session_view(key).await,
            self.pg.session_view(key).await,
        )
        .flatten();
        // The frontier alone: the session view's, on both backends.
        let frontier = same(
            &format!("frontier view of {name}"),
            self.sqlite.frontier_view(key).await,
            self.pg.frontier_view(key).await,
        )
        .flatten();
        assert_eq!(
            frontier.as_ref().map(|f| serde_json::to_value(f).unwrap()),
            view.as_ref().map(|v| serde_json::json!({
                "conversation": v.conversation, "frontier": v.frontier
            })),
            "the frontier view of {name} is the session view's"
        );
        let overview = same(
            &format!("DAG overview of {name}"),
            self.sqlite.dag_overview(key).await,
            self.pg.dag_overview(key).await,
        );
        let (Some(view), Some(overview)) = (view, overview) else {
            return Vec::new();
        };

        // The DAG, down from its roots: every summary's children, every node's path.
        let mut pending: Vec<DagNode> = overview.roots.clone();
        let mut seen = BTreeSet::new();
        while let Some(node) = pending.pop() {
            if !seen.insert(node.id.clone()) {
                continue;
            }
            let path = self.path(key, &node.id).await.unwrap();
            assert_eq!(path.last(), Some(&node.id), "{name}: path of {}", node.id);
            if node.kind == "summary" {
                let children = self.children(key, &node.id).await.unwrap();
                assert_eq!(
                    children.len() as i64,
                    node.child_count,
                    "{name}: childCount of {}",
                    node.id
                );
                pending.extend(children);
            } else {
                assert!(
                    self.children(key, &node.id).await.is_none(),
                    "a message has no children"
                );
            }
        }

        // Every page, at several sizes (0 and too many are clamped).
        let total = view.conversation.msg_count;
        let mut ids = Vec::new();
        for limit in [1usize, 7, 50, 500, 0, 10_000] {
            let mut from = 0;
            let mut listed = 0;
            loop {
                let page = self.page(key, PageAt::From(from), limit).await.unwrap();
                listed += page.messages.len() as i64;
                if limit == 50 {
                    ids.extend(page.messages.iter().map(|m| m.id.clone()));
                }
                match page.next_seq {
                    Some(next) => from = next,
                    None => break,
                }
            }
            assert_eq!(listed, total, "{name}: pages of {limit} list every message");
        }
        for limit in [1usize, 10, 500] {
            self.page(key, PageAt::Newest, limit).await.unwrap();
        }
        self.page(key, PageAt::From(-5), 10).await.unwrap();
        let past = self
            .page(key, PageAt::From(view.conversation.next_seq + 10), 10)
            .await
            .unwrap();
        assert!(past.messages.is_empty());
        for id in ids.iter().step_by(5) {
            let page = self
                .page(key, PageAt::Around(id.clone()), 10)
                .await
                .unwrap();
            assert!(
                page.messages.iter().any(|m| &m.id == id),
                "{name}: around {id}"
            );
        }
        // Every message's path (those under no summary too).
        for id in &ids {
            self.path(key, id).await.unwrap();
        }
        ids
    }
}

#[tokio::test]
async fn every_dashboard_view_is_the_same_on_both_backends() {
    let Some(db) = test_database("inspect") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sqlite = engine(&dir, small_cfg());
    let pg = LosslessEngine::over(
        Arc::new(PgStore::open_url(&db.url).await.unwrap()),
        small_cfg(),
    )
    .unwrap();
    let plan = [(KEY, 1u64, 34usize), (OTHER_KEY, 2, 44), (THIRD_KEY, 3, 12)];
    for e in [&sqlite, &pg] {
        for (key, seed, turns) in plan {
            play(e, key, &history(seed, turns)).await;
        }
        // `/new` on the first session: an archived conversation, summaries carried over.
        e.on_session_reset(KEY, KEY).await.unwrap();
        play(e, KEY, &history(4, 10)).await;
    }
    // With their own times, each store's timeline already shows a round of several summaries
    // as one pass (a round's summaries share one time, however long its commit takes).
    for (name, e) in [("SQLite", &sqlite), ("PostgreSQL", &pg)] {
        let view = e
            .backend()
            .session_view(&ConvKey::from_host(Some(OTHER_KEY), "s1"))
            .await
            .unwrap()
            .unwrap();
        assert!(
            view.timeline.iter().any(|p| p.summaries > 1),
            "{name}: no pass of several summaries in {:?}",
            view.timeline
        );
    }
    sqlite_execute(&sqlite, SAME_TIMES).await;
    pg_execute(&db.url, SAME_TIMES).await;

    let mut cmp = Compare {
        sqlite: sqlite.backend().as_ref(),
        pg: pg.backend().as_ref(),
        pages: 0,
        children: 0,
        paths: 0,
    };
    let stats = same(
        "conversation stats",
        cmp.sqlite.conversation_stats().await,
        cmp.pg.conversation_stats().await,
    )
    .unwrap();
    assert_eq!(
        stats.len(),
        4,
        "three sessions and one archived conversation"
    );
    assert!(
        stats.iter().all(|s| s.compactions > 0),
        "every conversation was compacted: {stats:?}"
    );
    let used = same(
        "summarizers used",
        cmp.sqlite.summarizers_used().await,
        cmp.pg.summarizers_used().await,
    )
    .unwrap();
    assert!(!used.is_empty());

    let key = |k: &str| ConvKey::from_host(Some(k), "s1");
    let mut own_ids = Vec::new();
    for k in [KEY, OTHER_KEY, THIRD_KEY, NOBODY_KEY] {
        let ids = cmp.conversation(&key(k)).await;
        if k == THIRD_KEY {
            own_ids = ids;
        }
    }
    let overview = cmp.sqlite.dag_overview(&key(OTHER_KEY)).await.unwrap();
    assert!(
        overview.layers.iter().any(|l| l.depth >= 1),
        "the scenario must have condensed summaries: {:?}",
        overview.layers
    );
    let mut timeline = Vec::new();
    for k in [KEY, OTHER_KEY, THIRD_KEY] {
        timeline.extend(
            cmp.sqlite
                .session_view(&key(k))
                .await
                .unwrap()
                .unwrap()
                .timeline,
        );
    }
    assert!(
        timeline.iter().any(|e| e.summaries > 1) && timeline.iter().any(|e| e.kind == "condensed"),
        "passes of several summaries and condensed ones: {timeline:?}"
    );
    // Each pass names the summaries it wrote (the first few dozen): summaries of its depth
    // whose path the DAG finds.
    for e in &timeline {
        assert_eq!(
            e.summary_ids.len() as i64,
            e.summaries
                .min(clawctx_lossless::inspect::PASS_IDS_LISTED as i64),
            "{e:?}"
        );
    }
    let listed = &cmp
        .sqlite
        .session_view(&key(OTHER_KEY))
        .await
        .unwrap()
        .unwrap()
        .timeline;
    for e in listed {
        for id in &e.summary_ids {
            let path = cmp.sqlite.dag_path(&key(OTHER_KEY), id).await.unwrap();
            assert_eq!(path.last(), Some(id), "{e:?}");
        }
    }
    assert!(
        cmp.children > 50 && cmp.paths > 200 && cmp.pages > 300,
        "the walk must cover the stores: {} children lists, {} paths, {} pages",
        cmp.children,
        cmp.paths,
        cmp.pages
    );

    // Bad requests: the same error on both.
    let other_summary = overview.roots[0].id.clone();
    let third_message = own_ids[0].clone();
    let bad_ids = [
        other_summary.as_str(),
        third_message.as_str(),
        "sum_999999",
        "msg_999999",
        "bogus",
        "sum_",
        "",
    ];
    for id in bad_ids {
        cmp.children(&key(KEY), id).await;
        cmp.path(&key(KEY), id).await;
        cmp.page(&key(KEY), PageAt::Around(id.to_owned()), 10).await;
    }
    assert!(cmp.children(&key(KEY), &other_summary).await.is_none());
    assert!(cmp.path(&key(KEY), &third_message).await.is_none());
    assert!(cmp
        .page(&key(KEY), PageAt::Around(other_summary.clone()), 10)
        .await
        .is_none());
    assert!(cmp
        .page(&key(NOBODY_KEY), PageAt::Newest, 10)
        .await
        .is_none());
    assert!(cmp.children(&key(NOBODY_KEY), "sum_1").await.is_none());
}
