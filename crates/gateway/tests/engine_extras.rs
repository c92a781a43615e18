//! More of the engine API over real HTTP on loopback: `prepareSubagentSpawn` with its rollback
//! kept in the gateway (`POST /v1/engine/rollback`) and dropped by `onSubagentEnded`; `compact`
//! on `legacy`, which compacts the gateway's own stored session through the runtime's
//! summarization (and refuses a session it does not store, or another session id); the session
//! list with lossless conversations the engine API created.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use clawctx_protocol::AgentMessage;
use common::{error_of, start, text, Opts, TestGateway};
use serde_json::{json, Value};

async fn ok(gw: &TestGateway, path: &str, body: Value) -> Value {
    let r = gw.post(path, &body).await;
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 200, "{path}: {text}");
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn prepare_subagent_spawn_keeps_its_rollback_until_run_once_or_the_child_ends() {
    let mut gw = start(Opts {
        engine: "lossless",
        ..Default::default()
    })
    .await;
    let parent = "agent:main:parent";
    ok(&gw, "/v1/engine/ingest", json!({"sessionId": "p1", "sessionKey": parent,
        "message": {"role": "user", "content": "the build runs on host basalt-9", "timestamp": 1_000}})).await;

    let r = ok(&gw, "/v1/engine/prepareSubagentSpawn", json!({
        "parentSessionKey": parent, "childSessionKey": "agent:main:subagent:one", "contextMode": "fork"})).await;
    assert_eq!(r["hasRollback"], true, "{r}");
    let first = r["rollbackId"].as_str().unwrap().to_owned();

    let r = ok(&gw, "/v1/engine/prepareSubagentSpawn", json!({
        "parentSessionKey": parent, "childSessionKey": "agent:main:subagent:iso", "contextMode": "isolated"})).await;
    assert_eq!(r, json!({"hasRollback": false, "rollbackId": null}));

    assert_eq!(
        ok(&gw, "/v1/engine/rollback", json!({"rollbackId": first})).await,
        Value::Null
    );
    let e = error_of(
        gw.post("/v1/engine/rollback", &json!({"rollbackId": first}))
            .await,
        404,
    )
    .await;
    assert_eq!(e["param"], "rollbackId", "a rollback runs once: {e}");

    // A child that ended takes its rollback with it.
    let r = ok(&gw, "/v1/engine/prepareSubagentSpawn", json!({
        "parentSessionKey": parent, "childSessionKey": "agent:main:subagent:two", "contextMode": "fork"})).await;
    let second = r["rollbackId"].as_str().unwrap().to_owned();
    assert_ne!(second, first);
    let r = ok(
        &gw,
        "/v1/engine/onSubagentEnded",
        json!({"childSessionKey": "agent:main:subagent:two", "reason": "completed"}),
    )
    .await;
    assert_eq!(r, Value::Null);
    error_of(
        gw.post("/v1/engine/rollback", &json!({"rollbackId": second}))
            .await,
        404,
    )
    .await;

    let e = error_of(
        gw.post(
            "/v1/engine/prepareSubagentSpawn",
            &json!({"parentSessionKey": parent}),
        )
        .await,
        400,
    )
    .await;
    assert!(
        e["message"].as_str().unwrap().contains("childSessionKey"),
        "{e}"
    );
    let e = error_of(
        gw.post(
            "/v1/engine/prepareSubagentSpawn",
            &json!({"parentSessionKey": parent, "childSessionKey": "c", "contextMode": "clone"}),
        )
        .await,
        400,
    )
    .await;
    assert_eq!(e["param"], "contextMode", "{e}");

    let doc: Value = gw.get("/openapi.json").await.json().await.unwrap();
    for path in [
        "/v1/engine/prepareSubagentSpawn",
        "/v1/engine/rollback",
        "/v1/engine/onSubagentEnded",
    ] {
        assert!(
            doc["paths"][path]["post"].is_object(),
            "{path} is documented"
        );
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn legacy_lacks_prepare_subagent_spawn_and_compacts_the_gateways_own_session_through_the_runtime(
) {
    let mut gw = start(Opts::default()).await;
    let e = error_of(
        gw.post(
            "/v1/engine/prepareSubagentSpawn",
            &json!({"parentSessionKey": "agent:main:a", "childSessionKey": "agent:main:b"}),
        )
        .await,
        501,
    )
    .await;
    assert_eq!(e["code"], "not_implemented");

    let key = "agent:main:long";
    gw.llm.push([
        text("first answer"),
        text("second answer"),
        text("third answer"),
    ]);
    for prompt in [
        "the deploy key lives in vault path ops/deploy",
        "rotate it every 90 days",
        "who owns it? team Falcon",
    ] {
        gw.chat(key, prompt).await;
    }
    let sessions: Value = gw.get("/v1/sessions").await.json().await.unwrap();
    let row = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["sessionKey"] == key)
        .cloned()
        .unwrap();
    let session_id = row["sessionId"].as_str().unwrap().to_owned();

    let e = error_of(
        gw.post(
            "/v1/engine/compact",
            &json!({"sessionId": "nope", "sessionKey": "agent:main:unknown", "force": true}),
        )
        .await,
        404,
    )
    .await;
    assert_eq!(e["param"], "sessionKey", "{e}");
    let e = error_of(
        gw.post(
            "/v1/engine/compact",
            &json!({"sessionId": "other-id", "sessionKey": key, "force": true}),
        )
        .await,
        409,
    )
    .await;
    assert_eq!(e["param"], "sessionId", "{e}");
    assert!(e["message"].as_str().unwrap().contains(&session_id), "{e}");

    let r = ok(
        &gw,
        "/v1/engine/compact",
        json!({"sessionId": session_id, "sessionKey": key, "force": true}),
    )
    .await;
    assert_eq!(
        (r["ok"].as_bool(), r["compacted"].as_bool()),
        (Some(true), Some(true)),
        "{r}"
    );
    let summary = r["result"]["summary"].as_str().unwrap();
    assert!(
        summary.contains("ops/deploy"),
        "the summary keeps what matters: {summary}"
    );
    let context = gw.runtime.context(key).unwrap();
    assert!(
        matches!(context.first(), Some(AgentMessage::CompactionSummary(_))),
        "{context:?}"
    );

    // The next turn runs on the compacted session.
    gw.llm.push([text("Falcon")]);
    gw.chat(key, "who owns the deploy key?").await;
    let sent = gw.llm.bodies().await.last().unwrap()["messages"].to_string();
    assert!(
        sent.contains("ops/deploy"),
        "the summary reaches the model: {sent}"
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn the_session_list_holds_the_gateways_sessions_and_the_lossless_conversations_of_the_engine_api(
) {
    let mut gw = start(Opts {
        engine: "lossless",
        ..Default::default()
    })
    .await;
    ok(&gw, "/v1/engine/ingestBatch", json!({"sessionId": "b1", "sessionKey": "agent:main:bridge-only", "messages": [
        {"role": "user", "content": "from the bridge", "timestamp": 1_000},
        {"role": "assistant", "content": [{"type": "text", "text": "stored"}], "stopReason": "stop", "timestamp": 2_000}]})).await;
    gw.llm.push([text("hello")]);
    gw.chat("agent:main:chatted", "hi there").await;

    let list: Value = gw.get("/v1/sessions").await.json().await.unwrap();
    let rows = list["sessions"].as_array().unwrap();
    let row = |key: &str| {
        rows.iter()
            .find(|r| r["sessionKey"] == key)
            .cloned()
            .unwrap_or_else(|| panic!("{key} not in {list}"))
    };
    let bridge = row("agent:main:bridge-only");
    assert_eq!(bridge["stores"], json!(["lossless"]), "{bridge}");
    assert_eq!(bridge["losslessMessages"], 2);
    assert!(bridge.get("sessionId").is_none(), "{bridge}");
    let chatted = row("agent:main:chatted");
    assert_eq!(
        chatted["stores"],
        json!(["transcript", "lossless"]),
        "{chatted}"
    );
    assert_eq!(chatted["losslessMessages"], 2, "{chatted}");
    assert!(
        chatted["sessionId"].is_string() && chatted["updatedAt"].is_i64(),
        "{chatted}"
    );
    assert_eq!(
        rows[0]["sessionKey"], "agent:main:chatted",
        "the gateway's own sessions first: {list}"
    );
    gw.stop().await.unwrap();
}
