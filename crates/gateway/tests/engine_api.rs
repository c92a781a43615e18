//! The engine API and the OpenAPI document over real HTTP on loopback: every lifecycle method
//! with the protocol's camelCase types against `lossless` (ingest, ingestBatch, bootstrap,
//! assemble, afterTurn, compact, commitTurn twice: committed then duplicate, maintain,
//! onSubagentEnded), recall (grep, describe, expand) scoped to the session, the session list,
//! the engine's info; `legacy`'s 501 for a method it lacks and 409 for recall; bad params
//! naming the field; and `/openapi.json`: every route is in it, every documented operation is
//! served, every schema reference resolves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeSet;

use clawctx_protocol::*;
use common::{error_of, start, text, Opts, TestGateway};
use serde_json::{json, Value};

const KEY: &str = "agent:main:sidecar";

async fn ok(gw: &TestGateway, path: &str, body: Value) -> Value {
    let r = gw.post(path, &body).await;
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 200, "{path}: {text}");
    serde_json::from_str(&text).unwrap()
}

fn user(t: &str, ts: i64) -> Value {
    json!({"role": "user", "content": t, "timestamp": ts})
}

fn assistant(t: &str, ts: i64) -> Value {
    json!({"role": "assistant", "content": [{"type": "text", "text": t}], "stopReason": "stop", "timestamp": ts})
}

#[tokio::test]
async fn every_lifecycle_method_and_recall_over_http_on_lossless() {
    let mut gw = start(Opts {
        engine: "lossless",
        ..Default::default()
    })
    .await;

    let info: Value = gw.get("/v1/engine/info").await.json().await.unwrap();
    assert_eq!(info["info"]["id"], "lossless");
    let methods: Vec<&str> = info["methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    for m in [
        "ingest",
        "assemble",
        "compact",
        "ingestBatch",
        "bootstrap",
        "afterTurn",
        "commitTurn",
    ] {
        assert!(methods.contains(&m), "{m} missing from {methods:?}");
    }

    let r = ok(
        &gw,
        "/v1/engine/bootstrap",
        json!({"sessionId": "s1", "sessionKey": KEY, "sessionFile": KEY}),
    )
    .await;
    assert!(r.get("bootstrapped").is_some(), "{r}");

    let r = ok(
        &gw,
        "/v1/engine/ingest",
        json!({"sessionId": "s1", "sessionKey": KEY,
        "message": user("the staging database lives on host quartz-17", 1_000)}),
    )
    .await;
    assert_eq!(r["ingested"], true, "{r}");
    let r = ok(
        &gw,
        "/v1/engine/ingest",
        json!({"sessionId": "s1", "sessionKey": KEY,
        "message": user("the staging database lives on host quartz-17", 1_000)}),
    )
    .await;
    assert_eq!(r["ingested"], false, "ingest is idempotent: {r}");

    let r = ok(
        &gw,
        "/v1/engine/ingestBatch",
        json!({"sessionId": "s1", "sessionKey": KEY, "messages": [
        assistant("noted: quartz-17", 2_000), user("and the cache is on ember-4", 3_000)]}),
    )
    .await;
    assert_eq!(r["ingestedCount"], 2, "{r}");

    let history = json!([
        user("the staging database lives on host quartz-17", 1_000),
        assistant("noted: quartz-17", 2_000),
        user("and the cache is on ember-4", 3_000)
    ]);
    let r = ok(
        &gw,
        "/v1/engine/assemble",
        json!({"sessionId": "s1", "sessionKey": KEY, "messages": history,
        "tokenBudget": 4000, "prompt": "where is the cache?"}),
    )
    .await;
    let assembled = r["messages"].as_array().unwrap();
    assert!(!assembled.is_empty(), "{r}");
    assert!(r["estimatedTokens"].as_u64().unwrap() <= 4000, "{r}");
    let as_text = serde_json::to_string(assembled).unwrap();
    assert!(
        as_text.contains("ember-4"),
        "the assembled context has the stored messages: {r}"
    );
    let _: AssembleResult = serde_json::from_value(r).unwrap();

    let mut after = history.as_array().unwrap().clone();
    after.push(user("thanks", 4_000));
    after.push(assistant("you are welcome", 5_000));
    let r = ok(
        &gw,
        "/v1/engine/afterTurn",
        json!({"sessionId": "s1", "sessionKey": KEY, "sessionFile": "/nonexistent/s1.jsonl",
        "messages": after, "prePromptMessageCount": 3, "tokenBudget": 4000}),
    )
    .await;
    assert_eq!(r, Value::Null);

    let r = ok(
        &gw,
        "/v1/engine/compact",
        json!({"sessionId": "s1", "sessionKey": KEY, "tokenBudget": 4000, "force": true}),
    )
    .await;
    assert_eq!(r["ok"], true, "{r}");
    let _: CompactResult = serde_json::from_value(r).unwrap();

    let anchor = |entry: &str| TranscriptEntryAnchor {
        agent_id: "main".into(),
        session_id: "s1".into(),
        session_key: KEY.into(),
        entry_id: entry.into(),
        ..Default::default()
    };
    let commit = CommitTurnParams {
        advancement_key: "adv-1".into(),
        admission: TranscriptTurnAdmission {
            anchor: anchor("adv-1:user"),
            logical_turn_id: "turn-1".into(),
            role: "user".into(),
        },
        terminal: anchor("adv-1:terminal"),
        messages: vec![
            AgentMessage::user("the deploy window is tuesday 14:00").with_timestamp(6_000),
            AgentMessage::assistant("booked").with_timestamp(7_000),
        ],
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        ..Default::default()
    };
    let body = serde_json::to_value(&commit).unwrap();
    assert_eq!(
        ok(&gw, "/v1/engine/commitTurn", body.clone()).await["status"],
        "committed"
    );
    assert_eq!(
        ok(&gw, "/v1/engine/commitTurn", body).await["status"],
        "duplicate",
        "a retried commit writes nothing"
    );

    // maintain and onSubagentEnded: answered by the engine, or 501 when it lacks them.
    for (path, body) in [
        (
            "/v1/engine/maintain",
            json!({"sessionId": "s1", "sessionKey": KEY, "sessionFile": "/nonexistent/s1.jsonl"}),
        ),
        (
            "/v1/engine/onSubagentEnded",
            json!({"childSessionKey": "agent:main:subagent:x", "reason": "completed"}),
        ),
    ] {
        let r = gw.post(path, &body).await;
        assert!(
            r.status() == 200 || r.status() == 501,
            "{path}: {}",
            r.text().await.unwrap()
        );
    }

    // Recall through the lossless store, scoped to the session.
    let grep = ok(
        &gw,
        "/v1/engine/lcm_grep",
        json!({"sessionKey": KEY, "query": "quartz"}),
    )
    .await;
    let hits = grep["hits"]
        .as_array()
        .unwrap_or_else(|| panic!("no hits array: {grep}"));
    assert!(!hits.is_empty(), "{grep}");
    let id = hits[0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no id: {grep}"))
        .to_owned();
    let other = ok(
        &gw,
        "/v1/engine/lcm_grep",
        json!({"sessionKey": "agent:main:someone-else", "query": "quartz"}),
    )
    .await;
    assert_eq!(
        other["hits"].as_array().map(Vec::len),
        Some(0),
        "another session does not see it: {other}"
    );
    let d = ok(
        &gw,
        "/v1/engine/lcm_describe",
        json!({"sessionKey": KEY, "id": id}),
    )
    .await;
    assert!(d.to_string().contains("quartz-17"), "{d}");
    let e = ok(
        &gw,
        "/v1/engine/lcm_expand",
        json!({"sessionKey": KEY, "id": id, "maxTokens": 500}),
    )
    .await;
    assert!(e.to_string().contains("quartz-17"), "{e}");
    let bad = error_of(
        gw.post(
            "/v1/engine/lcm_describe",
            &json!({"sessionKey": KEY, "id": "nonsense"}),
        )
        .await,
        400,
    )
    .await;
    assert!(
        bad["message"]
            .as_str()
            .unwrap()
            .contains("lcm_describe failed"),
        "{bad}"
    );

    // A chat turn's session shows up in the listing.
    gw.llm.push([text("hi")]);
    let r = gw
        .http
        .post(gw.at("/v1/chat/completions"))
        .header("x-clawctx-session", "agent:main:listed")
        .json(&json!({"messages": [{"role": "user", "content": "hello"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let sessions: Value = gw.get("/v1/sessions").await.json().await.unwrap();
    assert!(
        sessions["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["sessionKey"] == "agent:main:listed"),
        "{sessions}"
    );

    let metrics = gw.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains(r#"clawctx_gateway_engine_calls_total{method="assemble"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"clawctx_gateway_assemble_seconds_count{source="engine_api"} 1"#),
        "{metrics}"
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn legacy_answers_501_for_a_method_it_lacks_409_for_recall_and_400_naming_bad_params() {
    let mut gw = start(Opts::default()).await;
    let info: Value = gw.get("/v1/engine/info").await.json().await.unwrap();
    assert_eq!(info["info"]["id"], "legacy");
    let lacks: Vec<&str> = ["commitTurn", "ingestBatch", "bootstrap", "maintain"]
        .into_iter()
        .filter(|m| !info["methods"].as_array().unwrap().iter().any(|x| x == m))
        .collect();
    let missing = *lacks.first().expect("legacy lacks an optional method");
    let body = match missing {
        "commitTurn" => serde_json::to_value(CommitTurnParams {
            session_id: "s".into(),
            advancement_key: "k1".into(),
            ..Default::default()
        })
        .unwrap(),
        "ingestBatch" => json!({"sessionId": "s", "messages": []}),
        _ => json!({"sessionId": "s", "sessionFile": "f"}),
    };
    let e = error_of(gw.post(&format!("/v1/engine/{missing}"), &body).await, 501).await;
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains(&format!("does not implement {missing}")),
        "{e}"
    );
    assert_eq!(e["code"], "not_implemented");

    let e = error_of(
        gw.post(
            "/v1/engine/lcm_grep",
            &json!({"sessionKey": KEY, "query": "x"}),
        )
        .await,
        409,
    )
    .await;
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("the engine in charge is \"legacy\""),
        "{e}"
    );

    let e = error_of(
        gw.post(
            "/v1/engine/assemble",
            &json!({"sessionId": "s", "messages": [], "tokenBudget": "lots"}),
        )
        .await,
        400,
    )
    .await;
    assert_eq!(e["param"], "tokenBudget", "{e}");
    let e = error_of(
        gw.post(
            "/v1/engine/ingest",
            &json!({"sessionId": "s", "message": {"content": "no role"}}),
        )
        .await,
        400,
    )
    .await;
    assert_eq!(e["param"], "message", "{e}");
    assert!(e["message"].as_str().unwrap().contains("role"), "{e}");
    let e = error_of(
        gw.post(
            "/v1/engine/ingest",
            &json!({"sessionId": "", "message": {"role": "user", "content": "x"}}),
        )
        .await,
        400,
    )
    .await;
    assert_eq!(e["param"], "sessionId", "{e}");
    gw.stop().await.unwrap();
}

/// Every `$ref` in `v`.
fn refs(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref") {
                out.insert(r.clone());
            }
            m.values().for_each(|x| refs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
        _ => {}
    }
}

#[tokio::test]
async fn the_openapi_document_lists_every_route_and_every_route_in_it_is_served() {
    let mut gw = start(Opts {
        token: Some("doc-token"),
        ..Default::default()
    })
    .await;
    let r = gw
        .http
        .get(gw.at("/openapi.json"))
        .bearer_auth("doc-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let doc: Value = r.json().await.unwrap();
    assert_eq!(doc["openapi"], "3.1.0");

    let documented: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .map(move |m| (m.clone(), path.clone()))
        })
        .collect();
    let expected: BTreeSet<(String, String)> = [
        ("post", "/v1/chat/completions"),
        ("get", "/v1/models"),
        ("post", "/v1/engine/bootstrap"),
        ("post", "/v1/engine/ingest"),
        ("post", "/v1/engine/ingestBatch"),
        ("post", "/v1/engine/assemble"),
        ("post", "/v1/engine/compact"),
        ("post", "/v1/engine/maintain"),
        ("post", "/v1/engine/afterTurn"),
        ("post", "/v1/engine/commitTurn"),
        ("post", "/v1/engine/onSubagentEnded"),
        ("post", "/v1/engine/prepareSubagentSpawn"),
        ("post", "/v1/engine/rollback"),
        ("get", "/v1/engine/info"),
        ("post", "/v1/engine/lcm_grep"),
        ("post", "/v1/engine/lcm_describe"),
        ("post", "/v1/engine/lcm_expand"),
        ("get", "/v1/sessions"),
        ("get", "/v1/dashboard/trace/turns"),
        ("get", "/v1/dashboard/trace/turn"),
        ("get", "/v1/dashboard/trace/diff"),
        ("get", "/v1/dashboard/trace/session"),
        ("get", "/openapi.json"),
        ("get", "/metrics"),
        ("get", "/healthz"),
        ("get", "/readyz"),
    ]
    .into_iter()
    .map(|(m, p)| (m.to_owned(), p.to_owned()))
    .collect();
    assert_eq!(
        documented, expected,
        "the document lists exactly the gateway's routes"
    );

    // Every documented operation is served (a route that exists answers something other than
    // 404/405: with an empty object a POST gets its 400 naming the missing field).
    for (method, path) in &documented {
        let req = match method.as_str() {
            "get" => gw.http.get(gw.at(path)),
            _ => gw.http.post(gw.at(path)).json(&json!({})),
        };
        let r = req.bearer_auth("doc-token").send().await.unwrap();
        assert!(
            ![404, 405].contains(&r.status().as_u16()),
            "{method} {path}: {}",
            r.status()
        );
        if method == "post" {
            let e = error_of(r, 400).await;
            assert!(
                e["message"].as_str().unwrap().contains("missing field"),
                "{path}: {e}"
            );
        }
    }

    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for name in [
        "AssembleParams",
        "AssembleResult",
        "AgentMessage",
        "ContentBlock",
        "ChatCompletionRequest",
        "ErrorBody",
        "CommitTurnParams",
    ] {
        assert!(
            schemas.contains_key(name),
            "components.schemas lacks {name}"
        );
    }
    let props = schemas["AssembleParams"]["properties"].as_object().unwrap();
    assert!(
        props.contains_key("tokenBudget") && props.contains_key("sessionKey"),
        "camelCase as on the wire: {props:?}"
    );
    let assemble = &doc["paths"]["/v1/engine/assemble"]["post"];
    assert_eq!(
        assemble["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/AssembleParams"
    );
    assert_eq!(
        doc["paths"]["/healthz"]["get"]["security"],
        json!([]),
        "health needs no token"
    );
    let mut all = BTreeSet::new();
    refs(&doc, &mut all);
    for r in &all {
        let name = r
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("a reference outside components: {r}"));
        assert!(schemas.contains_key(name), "dangling reference {r}");
    }
    gw.stop().await.unwrap();
}
