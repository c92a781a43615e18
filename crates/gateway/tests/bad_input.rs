//! Bad input the other suites leave out, over real HTTP on loopback: a request that waited for
//! its session while the gateway began to stop (503, never run, nothing stored), tool results
//! for a session that does not exist (404, nothing created), and the engine API's malformed
//! JSON and oversized bodies.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{error_of, slow, start, text, Opts, TestGateway};
use serde_json::{json, Value};

async fn wait_for_metric(gw: &TestGateway, needle: &str) {
    for _ in 0..300 {
        if gw
            .get("/metrics")
            .await
            .text()
            .await
            .unwrap()
            .contains(needle)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("/metrics never showed {needle}");
}

#[tokio::test]
async fn a_request_queued_when_the_gateway_begins_to_stop_gets_503_and_stores_nothing() {
    let mut gw = start(Opts::default()).await;
    gw.llm.push([
        slow("the first finishes", Duration::from_millis(1500)),
        text("never asked"),
    ]);
    let send = |prompt: &'static str| {
        let http = gw.http.clone();
        let url = gw.at("/v1/chat/completions");
        tokio::spawn(async move {
            let r = http
                .post(url)
                .header("x-clawctx-session", "agent:main:draining")
                .json(&json!({"messages": [{"role": "user", "content": prompt}]}))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        })
    };
    let first = send("first");
    wait_for_metric(&gw, "clawctx_gateway_turns_in_flight 1").await;
    let second = send("second");
    wait_for_metric(&gw, "clawctx_gateway_requests_waiting 1").await;
    gw.signal_stop();

    let (status, body) = first.await.unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, body) = second.await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("shutting down"),
        "{body}"
    );
    gw.join().await.unwrap();

    let stored = gw.runtime.context("agent:main:draining").unwrap();
    let users: Vec<String> = stored
        .iter()
        .filter(|m| m.role() == "user")
        .map(|m| m.plain_text())
        .collect();
    assert_eq!(users, ["first"], "the refused request left nothing behind");
    assert_eq!(gw.llm.bodies().await.len(), 1);
}

#[tokio::test]
async fn tool_results_for_a_session_that_does_not_exist_are_404_and_create_nothing() {
    let mut gw = start(Opts::default()).await;
    let body = json!({"messages": [{"role": "tool", "tool_call_id": "call_1", "content": "42"}]});
    let r = gw
        .http
        .post(gw.at("/v1/chat/completions"))
        .header("x-clawctx-session", "agent:main:ghost")
        .json(&body)
        .send()
        .await
        .unwrap();
    let e = error_of(r, 404).await;
    assert_eq!(e["param"], "x-clawctx-session", "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("agent:main:ghost"),
        "{e}"
    );
    let sessions: Value = gw.get("/v1/sessions").await.json().await.unwrap();
    assert_eq!(sessions["sessions"], json!([]), "no session was created");
    assert!(gw.llm.bodies().await.is_empty());
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn the_engine_api_names_malformed_json_and_refuses_oversized_bodies() {
    let mut gw = start(Opts {
        engine: "lossless",
        tweak: Box::new(|c| c.max_body_bytes = 1024),
        ..Default::default()
    })
    .await;
    let raw = |body: String| {
        gw.http
            .post(gw.at("/v1/engine/ingest"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };

    let e = error_of(
        raw(r#"{"sessionId": "s", "message": {"role": "user""#.into())
            .await
            .unwrap(),
        400,
    )
    .await;
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("malformed JSON at line 1"),
        "{e}"
    );
    let e = error_of(
        raw(r#"{"sessionId": 7, "message": {"role": "user", "content": "x"}}"#.into())
            .await
            .unwrap(),
        400,
    )
    .await;
    assert_eq!(e["param"], "sessionId", "{e}");
    let big = json!({"sessionId": "s", "sessionKey": "agent:main:big", "message": {"role": "user", "content": "x".repeat(4096)}});
    let e = error_of(raw(big.to_string()).await.unwrap(), 413).await;
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("gateway.http.maxBodyBytes (1024 bytes)"),
        "{e}"
    );

    let sessions: Value = gw.get("/v1/sessions").await.json().await.unwrap();
    assert_eq!(
        sessions["sessions"],
        json!([]),
        "nothing was stored: {sessions}"
    );
    gw.stop().await.unwrap();
}

/// Found by scripts/schemathesis: a commit with a blank `advancementKey` reached the engine,
/// which refused it, and the guard quarantined the engine for the process, so every later
/// `commitTurn` of every session got 501 from `legacy`. The gateway now refuses it as the
/// client's mistake, and the engine stays in charge.
#[tokio::test]
async fn a_commit_without_an_advancement_key_is_a_400_and_does_not_quarantine_the_engine() {
    let mut gw = start(Opts {
        engine: "lossless",
        ..Default::default()
    })
    .await;
    let commit = |key: &str| {
        let anchor = |entry: &str| clawctx_protocol::TranscriptEntryAnchor {
            agent_id: "main".into(),
            session_id: "s1".into(),
            session_key: "agent:main:commits".into(),
            entry_id: entry.into(),
            ..Default::default()
        };
        serde_json::to_value(clawctx_protocol::CommitTurnParams {
            advancement_key: key.into(),
            admission: clawctx_protocol::TranscriptTurnAdmission {
                anchor: anchor("e1"),
                logical_turn_id: "t1".into(),
                role: "user".into(),
            },
            terminal: anchor("e2"),
            messages: vec![
                clawctx_protocol::AgentMessage::user("the deploy is on tuesday")
                    .with_timestamp(1_000),
            ],
            session_id: "s1".into(),
            session_key: Some("agent:main:commits".into()),
            ..Default::default()
        })
        .unwrap()
    };
    for blank in ["", "   "] {
        let e = error_of(gw.post("/v1/engine/commitTurn", &commit(blank)).await, 400).await;
        assert_eq!(e["param"], "advancementKey", "{e}");
    }
    let info: Value = gw.get("/v1/engine/info").await.json().await.unwrap();
    assert_eq!(
        info["info"]["id"], "lossless",
        "the engine in charge after the bad commits: {info}"
    );
    assert_eq!(
        info["quarantined"],
        json!([]),
        "nothing was quarantined: {info}"
    );
    let r = gw.post("/v1/engine/commitTurn", &commit("adv-1")).await;
    assert_eq!(
        r.status().as_u16(),
        200,
        "a good commit after the bad ones: {}",
        r.text().await.unwrap()
    );
    let again: Value = gw
        .post("/v1/engine/commitTurn", &commit("adv-1"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        again["status"], "duplicate",
        "the lossless engine answered, not legacy: {again}"
    );
    gw.stop().await.unwrap();
}
