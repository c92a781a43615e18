//! One lossless store per gateway (issue #27 item 7) and store failures on the recall routes
//! (item 6): the recall routes, the session list and the dashboard read the engine's own store,
//! wherever the engine put it, and never open a second one; a store that cannot be reached
//! answers 503 and a damaged one 500, each naming the store, never a 400.
//!
//! The PostgreSQL test needs `CLAWCTX_TEST_PG_URL` (skips without it, fails under `CI=true`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{error_of, MockLlm};
use serde_json::{json, Value};

const KEY: &str = "agent:main:recall-store";

/// A gateway over `config` whose engine gets `agent_dir` (as `clawctx gateway` passes the
/// agent's directory to the registry).
struct Served(common::Served);

impl Served {
    async fn start(config: Value, state: &Path, agent_dir: PathBuf) -> Served {
        Served(
            common::serve(common::Serve {
                agent_dir: Some(agent_dir),
                ..common::Serve::new(config, state, "lossless")
            })
            .await,
        )
    }

    async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.0
            .http
            .post(format!("{}{path}", self.0.url))
            .json(body)
            .send()
            .await
            .unwrap()
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.0
            .http
            .get(format!("{}{path}", self.0.url))
            .send()
            .await
            .unwrap()
    }

    async fn ok(&self, path: &str, body: Value) -> Value {
        let r = self.post(path, &body).await;
        let status = r.status();
        let text = r.text().await.unwrap();
        assert_eq!(status, 200, "{path}: {text}");
        serde_json::from_str(&text).unwrap()
    }

    /// Stores a few messages in [`KEY`]'s conversation through the engine API.
    async fn fill(&self) {
        let messages: Vec<Value> = (0..6)
            .map(|i| {
                if i % 2 == 0 {
                    json!({"role": "user", "content": format!("note {i}: the obsidian-42 key is in drawer {i}"), "timestamp": 1_000 + i})
                } else {
                    json!({"role": "assistant", "content": [{"type": "text", "text": format!("noted {i}")}], "stopReason": "stop", "timestamp": 1_000 + i})
                }
            })
            .collect();
        self.ok(
            "/v1/engine/ingestBatch",
            json!({"sessionId": KEY, "sessionKey": KEY, "messages": messages}),
        )
        .await;
    }

    async fn stop(&mut self) {
        self.0.stop().await.unwrap();
    }
}

fn lossless_config(llm: &MockLlm, store: Value) -> Value {
    let mut c = llm.config("lossless");
    c["plugins"]["entries"] = json!({"lossless": {"config": store}});
    c
}

#[tokio::test]
async fn recall_the_session_list_and_the_dashboard_read_the_engines_own_store() {
    let llm = MockLlm::start().await;
    let state = tempfile::tempdir().unwrap();
    // The engine's store is where the engine's agent directory says, not where a gateway
    // would guess (`<state>/agents/main/lossless.db`).
    let agent_dir = state.path().join("agents").join("elsewhere");
    let mut gw = Served::start(
        lossless_config(&llm, json!({})),
        state.path(),
        agent_dir.clone(),
    )
    .await;
    gw.fill().await;

    let grep = gw
        .ok(
            "/v1/engine/lcm_grep",
            json!({"sessionKey": KEY, "query": "obsidian-42"}),
        )
        .await;
    let hits = grep["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 3, "every stored note is found: {grep}");
    let id = hits[0]["id"].as_str().unwrap().to_owned();
    let d = gw
        .ok(
            "/v1/engine/lcm_describe",
            json!({"sessionKey": KEY, "id": id}),
        )
        .await;
    assert!(d.to_string().contains("obsidian-42"), "{d}");

    let sessions: Value = gw.get("/v1/sessions").await.json().await.unwrap();
    let row = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sessionKey"] == KEY)
        .cloned()
        .unwrap_or_else(|| panic!("{KEY} is listed: {sessions}"));
    assert_eq!(row["losslessMessages"], 6, "{row}");

    let page: Value = gw
        .get(&format!("/v1/dashboard/transcript?key={KEY}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        page["total"], 6,
        "the dashboard pages the engine's store: {page}"
    );
    let dash: Value = gw.get("/v1/dashboard/sessions").await.json().await.unwrap();
    assert!(
        dash["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["sessionKey"] == KEY && s["messages"] == 6),
        "{dash}"
    );

    gw.stop().await;
    assert!(agent_dir.join("lossless.db").exists());
    assert!(
        !state.path().join("agents/main/lossless.db").exists(),
        "the gateway opened no second store"
    );
}

#[tokio::test]
async fn a_damaged_sqlite_row_is_a_500_naming_the_store_not_a_400() {
    let llm = MockLlm::start().await;
    let state = tempfile::tempdir().unwrap();
    let db = state.path().join("store").join("lossless.db");
    let mut gw = Served::start(
        lossless_config(&llm, json!({"databasePath": db.display().to_string()})),
        state.path(),
        state.path().join("agents").join("main"),
    )
    .await;
    gw.fill().await;
    let grep = gw
        .ok(
            "/v1/engine/lcm_grep",
            json!({"sessionKey": KEY, "query": "obsidian-42"}),
        )
        .await;
    let id = grep["hits"][0]["id"].as_str().unwrap().to_owned();
    let n: i64 = id.trim_start_matches("msg_").parse().unwrap();

    // Damage the row the way a bad disk or a foreign writer would: its skeleton is no longer
    // JSON.
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    let changed = conn
        .execute(
            "UPDATE messages SET skeleton = '{not json' WHERE id = ?1",
            [n],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);

    let e = error_of(
        gw.post(
            "/v1/engine/lcm_describe",
            &json!({"sessionKey": KEY, "id": id}),
        )
        .await,
        500,
    )
    .await;
    let message = e["message"].as_str().unwrap();
    assert!(message.contains(&db.display().to_string()), "{e}");
    assert!(message.contains("lcm_describe failed"), "{e}");
    assert_eq!(e["code"], "store_error", "{e}");

    // The caller's own mistakes stay 4xx.
    error_of(
        gw.post(
            "/v1/engine/lcm_describe",
            &json!({"sessionKey": KEY, "id": "nonsense"}),
        )
        .await,
        400,
    )
    .await;
    error_of(
        gw.post(
            "/v1/engine/lcm_describe",
            &json!({"sessionKey": KEY, "id": "msg_999999"}),
        )
        .await,
        404,
    )
    .await;
    let metrics = gw.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains(r#"route="/v1/engine/lcm_describe",method="POST",status="500""#),
        "the failure counts as a 5xx: {metrics}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_postgresql_store_that_cannot_be_reached_is_a_503_naming_the_database() {
    let Some(db) = clawctx_test_support::pg::test_database("recall_503") else {
        return;
    };
    let llm = MockLlm::start().await;
    let state = tempfile::tempdir().unwrap();
    let mut gw = Served::start(
        lossless_config(&llm, json!({"database": db.url, "poolSize": 2})),
        state.path(),
        state.path().join("agents").join("main"),
    )
    .await;
    gw.fill().await;
    gw.ok(
        "/v1/engine/lcm_grep",
        json!({"sessionKey": KEY, "query": "obsidian-42"}),
    )
    .await;

    // The database goes away for this gateway: no new connections, the open ones ended.
    let admin = clawctx_test_support::pg::test_url().unwrap();
    let name = db.name.clone();
    tokio::task::spawn_blocking(move || {
        let mut c = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
        c.batch_execute(&format!(
            "ALTER DATABASE \"{name}\" ALLOW_CONNECTIONS false; \
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}';"
        ))
        .unwrap();
    })
    .await
    .unwrap();

    for (path, body) in [
        (
            "/v1/engine/lcm_grep",
            json!({"sessionKey": KEY, "query": "obsidian-42"}),
        ),
        (
            "/v1/engine/lcm_expand",
            json!({"sessionKey": KEY, "id": "msg_1"}),
        ),
    ] {
        let e = error_of(gw.post(path, &body).await, 503).await;
        let message = e["message"].as_str().unwrap();
        assert!(message.contains(&db.name), "{path} names the database: {e}");
        assert!(
            !message.contains("plugins.slots"),
            "{path} blames the store, not the slot: {e}"
        );
        assert_eq!(e["code"], "store_unavailable", "{e}");
    }
    let r = gw.get(&format!("/v1/dashboard/transcript?key={KEY}")).await;
    let e = error_of(r, 503).await;
    assert!(e["message"].as_str().unwrap().contains(&db.name), "{e}");

    let admin = clawctx_test_support::pg::test_url().unwrap();
    let name = db.name.clone();
    tokio::task::spawn_blocking(move || {
        let mut c = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
        c.batch_execute(&format!("ALTER DATABASE \"{name}\" ALLOW_CONNECTIONS true"))
            .unwrap();
    })
    .await
    .unwrap();
    gw.stop().await;
}
