//! Shared helpers for the lossless integration tests: engines over temp files, message
//! builders, deterministic workloads and fake summarizers, and [`TestStore`] with
//! [`on_both_backends!`] to run one test body on SQLite and on PostgreSQL.
#![allow(dead_code, unused_macros)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use clawctx_engine::{CallContext, ContextEngine};
use clawctx_lossless::{LosslessConfig, LosslessEngine};
use clawctx_protocol::*;
use clawctx_summarize::{SummarizeError, Summarizer, Summary, SummaryRequest};
use serde_json::json;

pub const KEY: &str = "agent:main:test:direct:1";

pub fn cx() -> CallContext {
    CallContext::none()
}

pub fn engine(dir: &tempfile::TempDir, cfg: LosslessConfig) -> LosslessEngine {
    LosslessEngine::open(dir.path().join("lcm.db"), cfg).unwrap()
}

/// One test's store on one backend: a SQLite file in a temp dir, or a fresh PostgreSQL
/// database (dropped with this value). Either way [`TestStore::dir`] is a scratch dir for the
/// test's other files. [`TestStore::engine`] opens a new engine on the same store each call
/// (a restart, or a second process/node).
pub struct TestStore {
    /// Scratch files; the SQLite store is `lcm.db` in it.
    pub dir: tempfile::TempDir,
    db: Option<clawctx_test_support::pg::TestDatabase>,
}

impl TestStore {
    pub fn sqlite() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            db: None,
        }
    }

    /// A store in a fresh PostgreSQL database, or `None` (the test skips) without a server
    /// (`CLAWCTX_TEST_PG_URL`; under `CI=true` a missing server panics).
    pub fn postgres(hint: &str) -> Option<Self> {
        let db = clawctx_test_support::pg::test_database(hint)?;
        Some(Self {
            dir: tempfile::tempdir().unwrap(),
            db: Some(db),
        })
    }

    /// Another fresh, empty store on the same backend (for a test that needs a second one).
    pub fn another(&self) -> TestStore {
        if self.is_sqlite() {
            TestStore::sqlite()
        } else {
            TestStore::postgres("another").expect("the server that made this store")
        }
    }

    pub fn name(&self) -> &'static str {
        if self.db.is_some() {
            "PostgreSQL"
        } else {
            "SQLite"
        }
    }

    pub fn is_sqlite(&self) -> bool {
        self.db.is_none()
    }

    /// The SQLite file (meaningful on SQLite only).
    pub fn sqlite_path(&self) -> std::path::PathBuf {
        self.dir.path().join("lcm.db")
    }

    /// A new engine on this store.
    pub async fn engine(&self, cfg: LosslessConfig) -> LosslessEngine {
        match &self.db {
            None => LosslessEngine::open(self.sqlite_path(), cfg).unwrap(),
            Some(db) => {
                let store = clawctx_lossless::pg::PgStore::open_url(&db.url)
                    .await
                    .unwrap();
                LosslessEngine::over(Arc::new(store), cfg).unwrap()
            }
        }
    }

    /// The plugin config keys that put the store here (`databasePath` or `database`).
    pub fn location_config(&self) -> serde_json::Value {
        match &self.db {
            None => json!({"databasePath": self.sqlite_path()}),
            Some(db) => json!({"database": db.url}),
        }
    }

    /// A PostgreSQL connection to the test database (for direct checks).
    async fn pg(&self) -> Option<tokio_postgres::Client> {
        let db = self.db.as_ref()?;
        let (client, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        Some(client)
    }

    /// Runs `sql` (valid on both databases) directly against the store's tables.
    pub async fn execute(&self, e: &LosslessEngine, sql: &str) {
        if let Some(c) = self.pg().await {
            c.batch_execute(sql).await.unwrap();
            return;
        }
        let sql = sql.to_owned();
        e.store()
            .unwrap()
            .call(move |db| {
                db.tx(|c| {
                    c.execute_batch(&sql)?;
                    Ok(())
                })
            })
            .await
            .unwrap();
    }

    /// The first column of the first row of `sql` (a `count(*)`), read directly.
    pub async fn count(&self, e: &LosslessEngine, sql: &str) -> i64 {
        if let Some(c) = self.pg().await {
            return c.query_one(sql, &[]).await.unwrap().get(0);
        }
        let sql = sql.to_owned();
        e.store()
            .unwrap()
            .call(move |db| db.tx(|c| Ok(c.query_row(&sql, [], |r| r.get(0))?)))
            .await
            .unwrap()
    }

    /// The first column of every row of `sql`, as text, read directly.
    pub async fn texts(&self, e: &LosslessEngine, sql: &str) -> Vec<String> {
        if let Some(c) = self.pg().await {
            let rows = c.query(sql, &[]).await.unwrap();
            return rows.iter().map(|r| r.get(0)).collect();
        }
        let sql = sql.to_owned();
        e.store()
            .unwrap()
            .call(move |db| {
                db.tx(|c| {
                    let mut st = c.prepare(&sql)?;
                    let v = st
                        .query_map([], |r| r.get(0))?
                        .collect::<rusqlite::Result<Vec<String>>>()?;
                    Ok(v)
                })
            })
            .await
            .unwrap()
    }

    /// The frontier of conversation `conv_id`: `(id, tokens)` in order, read directly.
    pub async fn frontier(&self, e: &LosslessEngine, conv_id: i64) -> Vec<(String, u64)> {
        if let Some(c) = self.pg().await {
            let rows = c
                .query(
                    "SELECT kind, item_id, tokens FROM frontier WHERE conv_id = $1 ORDER BY ord",
                    &[&conv_id],
                )
                .await
                .unwrap();
            return rows
                .iter()
                .map(|r| {
                    let (kind, id, tokens): (i16, i64, i64) = (r.get(0), r.get(1), r.get(2));
                    let id = if kind == 0 {
                        format!("msg_{id}")
                    } else {
                        format!("sum_{id}")
                    };
                    (id, tokens as u64)
                })
                .collect();
        }
        e.store()
            .unwrap()
            .call(move |db| db.frontier(conv_id))
            .await
            .unwrap()
    }
}

/// Defines a test on both backends from one body: `async fn $name(store: &TestStore)` and
/// `mod $name { sqlite, postgres }`, so a failure's test name says the backend (the
/// PostgreSQL one skips without a server). An optional `[flavor = …]` goes to `tokio::test`.
macro_rules! on_both_backends {
    ($(#[$meta:meta])* $([$($tokio:tt)*])? async fn $name:ident($store:ident) $body:block) => {
        $(#[$meta])*
        async fn $name($store: &TestStore) $body

        mod $name {
            use super::*;

            #[tokio::test$(($($tokio)*))?]
            async fn sqlite() {
                super::$name(&TestStore::sqlite()).await;
            }

            #[tokio::test$(($($tokio)*))?]
            async fn postgres() {
                if let Some(store) = TestStore::postgres(stringify!($name)) {
                    super::$name(&store).await;
                }
            }
        }
    };
}

/// A small config so tests compact quickly.
pub fn small_cfg() -> LosslessConfig {
    LosslessConfig {
        fresh_tail_count: 8,
        leaf_chunk_tokens: 1_500,
        leaf_min_fanout: 4,
        default_token_budget: 8_000,
        // The tail by count only, as these tests' histories were written for (with the
        // token cap a forced compaction leaves nothing to condense in them).
        fresh_tail_max_tokens: u64::MAX / 4,
        ..Default::default()
    }
}

/// Deterministic pseudo-random numbers.
pub struct Lcg(pub u64);
impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const WORDS: &[&str] = &[
    "the",
    "build",
    "failed",
    "because",
    "config",
    "parser",
    "rejected",
    "value",
    "we",
    "fixed",
    "it",
    "by",
    "updating",
    "src/main.rs",
    "and",
    "rerunning",
    "tests",
    "deploy",
    "server",
    "latency",
    "improved",
    "after",
    "cache",
    "change",
    "user",
    "asked",
    "about",
    "migration",
    "schema",
    "version",
    "check",
    "logs",
    "error",
    "timeout",
    "retry",
    "policy",
];

pub fn words(rng: &mut Lcg, n: usize) -> String {
    (0..n)
        .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
        .collect::<Vec<_>>()
        .join(" ")
}

/// One turn: user, optionally a tool call + result, then an assistant answer. Every message
/// carries a unique needle `nd<turn>x<k>` and a timestamp.
pub fn turn(rng: &mut Lcg, t: usize, tool: bool, size: usize) -> Vec<AgentMessage> {
    let ts = 1_700_000_000_000i64 + (t as i64) * 60_000;
    let mut out =
        vec![AgentMessage::user(format!("nd{t}x0 {}", words(rng, size))).with_timestamp(ts)];
    if tool {
        let id = format!("call_{t}");
        out.push(
            AgentMessage::tool_call(&id, "read", json!({"path": format!("src/f{t}.rs")}))
                .with_timestamp(ts + 1),
        );
        out.push(
            AgentMessage::tool_result(&id, "read", format!("nd{t}x2 {}", words(rng, size * 3)))
                .with_timestamp(ts + 2),
        );
    }
    out.push(
        AgentMessage::assistant(format!("nd{t}x9 {}", words(rng, size * 2))).with_timestamp(ts + 3),
    );
    out
}

/// The host's `maintain` after a reply of session `s1` (key [`KEY`]) at `budget`: background
/// (deferred) compaction allowed, as the runtime calls it.
pub fn deferred_maintain(budget: u64) -> MaintainParams {
    MaintainParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        runtime_context: Some(ContextEngineRuntimeContext {
            token_budget: Some(budget),
            allow_deferred_compaction_execution: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn after_turn(history: &[AgentMessage], pre: usize, budget: u64) -> AfterTurnParams {
    AfterTurnParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        session_file: String::new(),
        messages: history.to_vec(),
        pre_prompt_message_count: pre as u64,
        token_budget: Some(budget),
        ..Default::default()
    }
}

/// `commitTurn` params for turn `t` of session `s1` (key [`KEY`]): advancement key `k<t>`.
pub fn commit_params(t: usize, messages: Vec<AgentMessage>) -> CommitTurnParams {
    let anchor = |entry: String| TranscriptEntryAnchor {
        agent_id: "main".into(),
        session_id: "s1".into(),
        session_key: KEY.into(),
        entry_id: entry,
        ..Default::default()
    };
    CommitTurnParams {
        advancement_key: format!("k{t}"),
        admission: TranscriptTurnAdmission {
            anchor: anchor(format!("k{t}:user")),
            logical_turn_id: format!("turn-{t}"),
            role: "user".into(),
        },
        terminal: anchor(format!("k{t}:terminal")),
        messages,
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        ..Default::default()
    }
}

pub fn assemble_params(messages: Vec<AgentMessage>, budget: u64) -> AssembleParams {
    AssembleParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        messages,
        token_budget: Some(budget),
        ..Default::default()
    }
}

pub fn compact_params(force: bool, budget: u64) -> CompactParams {
    CompactParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        force: Some(force),
        token_budget: Some(budget),
        ..Default::default()
    }
}

pub async fn ingest_all(e: &LosslessEngine, msgs: &[AgentMessage]) {
    let p = IngestBatchParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        messages: msgs.to_vec(),
        is_heartbeat: None,
    };
    e.ingest_batch(&p, &cx()).await.unwrap();
}

/// Keeps the first 10% of its input (the benchmark's fake), optionally failing first.
pub struct FakeSummarizer {
    pub calls: AtomicUsize,
    pub fail_first: usize,
}

impl FakeSummarizer {
    pub fn new(fail_first: usize) -> Arc<Self> {
        Arc::new(Self {
            calls: AtomicUsize::new(0),
            fail_first,
        })
    }
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Summarizer for FakeSummarizer {
    fn name(&self) -> &str {
        "fake-10pct"
    }
    async fn summarize(&self, req: SummaryRequest) -> Result<Summary, SummarizeError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        if n < self.fail_first {
            return Err(SummarizeError::Unavailable("scripted failure".into()));
        }
        let mut end = req.conversation.len() / 10;
        while !req.conversation.is_char_boundary(end) {
            end -= 1;
        }
        let text = req.conversation[..end].to_owned();
        Ok(Summary {
            output_tokens: clawctx_tokens::text_tokens(&text),
            text,
            input_tokens: 0,
        })
    }
}

/// Tool pairing in an assembled list: every tool result directly follows its call's
/// assistant message (or a sibling result), and the list never starts with a result.
pub fn assert_pairs_intact(msgs: &[AgentMessage]) {
    for (i, m) in msgs.iter().enumerate() {
        if let Some(id) = m.tool_result_id() {
            let mut j = i;
            while j > 0 && msgs[j - 1].tool_result_id().is_some() {
                j -= 1;
            }
            assert!(j > 0, "tool result {id} at {i} has no call before it");
            assert!(
                msgs[j - 1].tool_calls().any(|c| c.id == id),
                "tool result {id} at {i} does not follow its call"
            );
        }
    }
}
