//! The gateway's smaller defects of issue #27 item 6 and #33 item 7, each over real HTTP against
//! the mock model server: a JSON document followed by anything is refused naming where; the
//! engine API's session keys are limited as chat's are; every error is JSON (405, a dashboard
//! query that does not parse) and a missing field is the error's `param`; `max_tokens` above the
//! model's limit is refused as OpenAI refuses it; a client's orphan tool result is its own
//! mistake, not a failed turn; numbers reach the provider as the client sent them; `/metrics`
//! has the time in the model and the lossless engine's own compactions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{error_of, start, text, Opts, TestGateway};
use serde_json::{json, Value};

async fn raw(gw: &TestGateway, path: &str, body: &str) -> reqwest::Response {
    gw.http
        .post(gw.at(path))
        .header("content-type", "application/json")
        .header("x-clawctx-session", "agent:main:hardening")
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

/// The value of the sample `name` (with its labels), if present.
fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    })
}

#[tokio::test]
async fn anything_after_the_json_document_is_refused_naming_where_it_begins() {
    let mut gw = start(Opts {
        engine: "lossless",
        ..Default::default()
    })
    .await;
    let ingest = json!({"sessionId": "s1", "sessionKey": "agent:main:trail", "message": {"role": "user", "content": "x"}});
    let bodies = [
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hi"}]}),
        ),
        ("/v1/engine/ingest", ingest.clone()),
        (
            "/v1/engine/assemble",
            json!({"sessionId": "s1", "sessionKey": "agent:main:trail", "messages": [], "tokenBudget": 1000}),
        ),
        (
            "/v1/engine/lcm_grep",
            json!({"sessionKey": "agent:main:trail", "query": "x"}),
        ),
        ("/v1/engine/rollback", json!({"rollbackId": "nope"})),
    ];
    for (path, body) in &bodies {
        let text = body.to_string();
        for tail in [" trailing", "{}", "\n]"] {
            let sent = format!("{text}{tail}");
            let e = error_of(raw(&gw, path, &sent).await, 400).await;
            assert_eq!(e["code"], "invalid_json", "{path} {sent}: {e}");
            let column = text.len() + 1 + usize::from(tail.starts_with(' '));
            let want = if tail.starts_with('\n') {
                "at line 2 column 1: trailing characters".to_owned()
            } else {
                format!("at line 1 column {column}: trailing characters")
            };
            assert!(
                e["message"].as_str().unwrap().contains(&want),
                "{path} {sent:?}: {e} (wanted {want:?})"
            );
        }
    }
    // Trailing whitespace is fine.
    let r = raw(&gw, "/v1/engine/ingest", &format!("{ingest}\n\t \n")).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert!(
        gw.llm.bodies().await.is_empty(),
        "no turn ran on a refused body"
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn engine_api_session_keys_are_limited_as_chats_are() {
    let mut gw = start(Opts {
        engine: "lossless",
        ..Default::default()
    })
    .await;
    let ingest = |id: &str, key: Option<&str>| {
        let mut p = json!({"sessionId": id, "message": {"role": "user", "content": "x"}});
        if let Some(k) = key {
            p["sessionKey"] = json!(k);
        }
        p
    };
    let long = "k".repeat(513);
    let huge = "s".repeat(1 << 20);
    for (body, param) in [
        (ingest("s1", Some(&long)), "sessionKey"),
        (ingest("s1", Some("agent:main:bell\u{7}")), "sessionKey"),
        (ingest("s1", Some("agent:main:line\nbreak")), "sessionKey"),
        (ingest(&huge, None), "sessionId"),
        (ingest("tab\there", Some("agent:main:ok")), "sessionId"),
    ] {
        let e = error_of(gw.post("/v1/engine/ingest", &body).await, 400).await;
        assert_eq!(e["param"], param, "{e}");
        assert!(
            e["message"].as_str().unwrap().contains("at most 512 bytes"),
            "{e}"
        );
    }
    let e = error_of(
        gw.post(
            "/v1/engine/assemble",
            &json!({"sessionId": "s", "sessionKey": long, "messages": [], "tokenBudget": 100}),
        )
        .await,
        400,
    )
    .await;
    assert_eq!(e["param"], "sessionKey", "{e}");
    for (body, param) in [
        (
            json!({"parentSessionKey": "agent:main:p", "childSessionKey": long}),
            "childSessionKey",
        ),
        (
            json!({"parentSessionKey": "agent:main:p\u{0}", "childSessionKey": "agent:main:c"}),
            "parentSessionKey",
        ),
    ] {
        let e = error_of(gw.post("/v1/engine/prepareSubagentSpawn", &body).await, 400).await;
        assert_eq!(e["param"], param, "{e}");
        assert!(
            e["message"].as_str().unwrap().contains("at most 512 bytes"),
            "{e}"
        );
    }
    let e = error_of(
        gw.post(
            "/v1/engine/onSubagentEnded",
            &json!({"childSessionKey": long, "reason": "completed"}),
        )
        .await,
        400,
    )
    .await;
    assert_eq!(e["param"], "childSessionKey", "{e}");
    // The recall routes take the same keys.
    for (route, body) in [
        (
            "/v1/engine/lcm_grep",
            json!({"sessionKey": long, "query": "x"}),
        ),
        (
            "/v1/engine/lcm_describe",
            json!({"sessionKey": long, "id": "sum_1"}),
        ),
        (
            "/v1/engine/lcm_expand",
            json!({"sessionKey": "agent:main:\u{1b}[2J", "id": "sum_1"}),
        ),
    ] {
        let e = error_of(gw.post(route, &body).await, 400).await;
        assert_eq!(e["param"], "sessionKey", "{route}: {e}");
    }
    // Exactly 512 is accepted, as chat accepts it.
    let ok = "k".repeat(512);
    let r = gw.post("/v1/engine/ingest", &ingest("s1", Some(&ok))).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let listed = gw.get("/v1/sessions").await.text().await.unwrap();
    assert!(listed.len() < 4096, "{} bytes", listed.len());
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn every_error_is_json_and_a_missing_field_is_the_param() {
    let mut gw = start(Opts::default()).await;
    // 405: axum's own answer, with an empty body before.
    let r = gw.http.post(gw.at("/v1/models")).send().await.unwrap();
    let allow = r
        .headers()
        .get("allow")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let e = error_of(r, 405).await;
    assert_eq!(e["code"], "method_not_allowed", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("POST is not allowed on /v1/models"),
        "{e}"
    );
    assert_eq!(
        allow.as_deref(),
        Some("GET,HEAD"),
        "the Allow header is kept"
    );
    let r = gw
        .http
        .get(gw.at("/v1/chat/completions"))
        .send()
        .await
        .unwrap();
    error_of(r, 405).await;
    let r = gw
        .http
        .delete(gw.at("/v1/engine/ingest"))
        .send()
        .await
        .unwrap();
    error_of(r, 405).await;

    // A dashboard query that does not parse: plain text before.
    let r = gw
        .get("/v1/dashboard/transcript?key=agent:main:x&limit=lots")
        .await;
    let e = error_of(r, 400).await;
    assert_eq!(e["type"], "invalid_request_error", "{e}");
    assert!(e["message"].as_str().unwrap().contains("limit"), "{e}");
    let r = gw.get("/v1/dashboard/session").await;
    let e = error_of(r, 400).await;
    assert_eq!(e["param"], "key", "a missing query field is named: {e}");

    // A missing body field is the param, at the top and nested.
    let e = error_of(
        raw(&gw, "/v1/chat/completions", r#"{"model": "m"}"#).await,
        400,
    )
    .await;
    assert_eq!(e["param"], "messages", "{e}");
    let e = error_of(
        raw(
            &gw,
            "/v1/chat/completions",
            r#"{"messages": [{"content": "hi"}]}"#,
        )
        .await,
        400,
    )
    .await;
    assert_eq!(e["param"], "messages[0].role", "{e}");
    let e = error_of(
        raw(&gw, "/v1/engine/ingest", r#"{"sessionId": "s"}"#).await,
        400,
    )
    .await;
    assert_eq!(e["param"], "message", "{e}");
    assert!(gw.llm.bodies().await.is_empty());
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn max_tokens_over_the_models_limit_is_refused_naming_the_limit() {
    // The mock model's configured maxTokens is 1024.
    let mut gw = start(Opts::default()).await;
    let chat = |extra: Value| {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    for (extra, param) in [
        (json!({"max_tokens": 5000}), "max_tokens"),
        (
            json!({"max_completion_tokens": 1025}),
            "max_completion_tokens",
        ),
        (
            json!({"max_tokens": 10, "max_completion_tokens": 99999}),
            "max_completion_tokens",
        ),
    ] {
        let e = error_of(gw.post("/v1/chat/completions", &chat(extra)).await, 400).await;
        assert_eq!(e["param"], param, "{e}");
        assert_eq!(e["code"], "invalid_value", "{e}");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("supports at most 1024 completion tokens"),
            "{e}"
        );
    }
    let sessions: Value = gw.get("/v1/sessions").await.json().await.unwrap();
    assert_eq!(sessions["sessions"], json!([]), "nothing stored");
    assert!(gw.llm.bodies().await.is_empty(), "the model got nothing");

    gw.llm.push([text("ok")]);
    let r = gw
        .post("/v1/chat/completions", &chat(json!({"max_tokens": 1024})))
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(gw.llm.bodies().await[0]["max_tokens"], 1024);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn an_orphan_tool_result_is_the_clients_mistake_not_a_failed_turn() {
    let mut gw = start(Opts::default()).await;
    gw.llm.push([text("hello")]);
    gw.chat("agent:main:orphan", "hi").await;
    let r = gw
        .http
        .post(gw.at("/v1/chat/completions"))
        .header("x-clawctx-session", "agent:main:orphan")
        .json(&json!({"messages": [{"role": "tool", "tool_call_id": "call_nobody_made", "content": "42"}]}))
        .send()
        .await
        .unwrap();
    let e = error_of(r, 400).await;
    assert_eq!(e["param"], "messages[0].tool_call_id", "{e}");
    let m = gw.get("/metrics").await.text().await.unwrap();
    assert_eq!(
        sample(&m, r#"clawctx_gateway_errors_total{kind="turn"}"#),
        None,
        "not counted as a failed turn:\n{m}"
    );
    assert_eq!(
        sample(&m, r#"clawctx_gateway_turns_total{outcome="error"}"#),
        None,
        "{m}"
    );
    assert_eq!(
        sample(&m, r#"clawctx_gateway_turns_total{outcome="rejected"}"#),
        Some(1.0),
        "{m}"
    );
    assert_eq!(gw.llm.bodies().await.len(), 1, "the model was not called");
    gw.stop().await.unwrap();
}

/// The number a JSON text holds after `"name":`, as written.
fn number_after(text: &str, name: &str) -> String {
    let key = format!("\"{name}\":");
    let at = text
        .find(&key)
        .unwrap_or_else(|| panic!("no {key} in {text}"));
    text[at + key.len()..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | 'e' | 'E' | '+'))
        .collect()
}

#[tokio::test]
async fn sampling_numbers_reach_the_provider_as_the_client_sent_them() {
    let mut gw = start(Opts::default()).await;
    gw.llm.push([text("ok")]);
    let r = raw(
        &gw,
        "/v1/chat/completions",
        r#"{"messages": [{"role": "user", "content": "hi"}], "temperature": 0.3, "top_p": 0.9,
            "presence_penalty": 0.1, "frequency_penalty": -0.7}"#,
    )
    .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let received = gw.llm.server.received_requests().await.unwrap();
    let body = String::from_utf8_lossy(&received[0].body).into_owned();
    for (name, sent) in [
        ("temperature", "0.3"),
        ("top_p", "0.9"),
        ("presence_penalty", "0.1"),
        ("frequency_penalty", "-0.7"),
    ] {
        assert_eq!(number_after(&body, name), sent, "{name} in {body}");
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn metrics_time_the_model_and_the_lossless_engines_own_compactions() {
    let mut gw = start(Opts {
        engine: "lossless",
        ..Default::default()
    })
    .await;
    gw.llm.push([text("one")]);
    gw.chat("agent:main:metrics", "first").await;
    let mut m = String::new();
    for _ in 0..300 {
        m = gw.get("/metrics").await.text().await.unwrap();
        if sample(&m, "clawctx_gateway_turn_model_seconds_count").is_some_and(|n| n >= 1.0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        sample(&m, "clawctx_gateway_turn_model_seconds_count"),
        Some(1.0),
        "{m}"
    );
    assert!(sample(&m, "clawctx_gateway_turn_model_seconds_sum").is_some_and(|s| s > 0.0));

    // A turn's afterTurn over a long history: the engine compacts on its own, inside the call.
    let messages: Vec<Value> = (0..200)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            let words: String = (0..150).map(|w| format!("w{i}x{w} ")).collect();
            json!({"role": role, "content": words, "timestamp": 1_000 + i})
        })
        .collect();
    let r = gw
        .post(
            "/v1/engine/afterTurn",
            &json!({"sessionId": "own-1", "sessionKey": "agent:main:own", "sessionFile": "/nonexistent/own-1.jsonl",
                    "messages": messages, "prePromptMessageCount": 0, "tokenBudget": 8000}),
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let m = gw.get("/metrics").await.text().await.unwrap();
    let passes = sample(
        &m,
        r#"clawctx_gateway_engine_compactions_total{engine="lossless",outcome="ok"}"#,
    )
    .unwrap_or_else(|| panic!("no lossless compaction counted:\n{m}"));
    assert!(passes >= 1.0, "{m}");
    let timed = sample(
        &m,
        r#"clawctx_gateway_engine_compaction_seconds_count{engine="lossless"}"#,
    )
    .unwrap_or_else(|| panic!("{m}"));
    assert!(timed >= 1.0, "{m}");
    gw.stop().await.unwrap();
}
