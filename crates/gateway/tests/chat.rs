//! `/v1/chat/completions` and `/v1/models` over real HTTP on loopback, the model a mock
//! OpenAI-compatible server: plain and streamed replies, a client re-sending its history, the
//! session from the header or `user`, bad requests (malformed JSON, wrong types, oversized
//! bodies) with OpenAI's error shape naming the field, a client that disconnects mid-stream
//! (the turn is aborted, the transcript stays valid, the session serves the next turn), one
//! turn at a time per session with a bounded queue, and a stop that lets an in-flight turn
//! finish.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use clawctx_protocol::AgentMessage;
use common::{error_of, slow, start, text, Opts, TestGateway};
use serde_json::{json, Value};

fn chat(messages: Value) -> Value {
    json!({"model": "whatever-the-client-says", "messages": messages})
}

async fn post_session(gw: &TestGateway, session: &str, body: &Value) -> reqwest::Response {
    gw.http
        .post(gw.at("/v1/chat/completions"))
        .header("x-clawctx-session", session)
        .json(body)
        .send()
        .await
        .unwrap()
}

/// The `data:` payloads of an SSE body.
fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|event| {
            event
                .lines()
                .find_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
        })
        .map(|d| d.trim().to_owned())
        .collect()
}

fn roles_and_texts(messages: &[AgentMessage]) -> Vec<(String, String)> {
    messages
        .iter()
        .map(|m| (m.role().to_owned(), m.plain_text()))
        .collect()
}

/// `/v1/engine/lcm_grep` with `request`: the answer and its hits' snippets.
async fn grep_snippets(gw: &TestGateway, request: Value) -> (Value, Vec<String>) {
    let grep: Value = gw
        .post("/v1/engine/lcm_grep", &request)
        .await
        .json()
        .await
        .unwrap();
    let snippets = grep["hits"].as_array().map_or(Vec::new(), |h| {
        h.iter()
            .filter_map(|h| h["snippet"].as_str().map(str::to_owned))
            .collect()
    });
    (grep, snippets)
}

/// Polls `/metrics` until `needle` appears (bounded).
async fn wait_for_metric(gw: &TestGateway, needle: &str) -> String {
    let mut text = String::new();
    for _ in 0..300 {
        text = gw.get("/metrics").await.text().await.unwrap();
        if text.contains(needle) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("/metrics never showed {needle}:\n{text}");
}

#[tokio::test]
async fn plain_completions_store_one_turn_per_request_even_when_the_client_resends_its_history() {
    let mut gw = start(Opts::default()).await;
    gw.llm
        .push([text("Hello, Ann."), text("You said your name is Ann.")]);

    let r = post_session(
        &gw,
        "agent:main:ann",
        &chat(json!([{"role": "user", "content": "Hi, I am Ann"}])),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-clawctx-session"], "agent:main:ann");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(body["model"], "whatever-the-client-says");
    assert_eq!(
        body["choices"][0]["message"],
        json!({"role": "assistant", "content": "Hello, Ann."})
    );
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110})
    );

    // The client re-sends everything plus its new message: only the new message is a turn.
    let history = json!([
        {"role": "system", "content": "client system prompt"},
        {"role": "user", "content": "Hi, I am Ann"},
        {"role": "assistant", "content": "Hello, Ann."},
        {"role": "user", "content": "What is my name?"}
    ]);
    let r = post_session(&gw, "agent:main:ann", &chat(history)).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "You said your name is Ann."
    );

    let stored = roles_and_texts(&gw.runtime.context("agent:main:ann").unwrap());
    assert_eq!(
        stored,
        vec![
            ("user".to_owned(), "Hi, I am Ann".to_owned()),
            ("assistant".to_owned(), "Hello, Ann.".to_owned()),
            ("user".to_owned(), "What is my name?".to_owned()),
            (
                "assistant".to_owned(),
                "You said your name is Ann.".to_owned()
            ),
        ],
        "the transcript holds each message once"
    );
    // The model saw the stored conversation, the new prompt last.
    let bodies = gw.llm.bodies().await;
    let sent = bodies.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .clone();
    let last = sent.last().unwrap();
    assert_eq!(last["role"], "user");
    assert!(
        last["content"].to_string().contains("What is my name?"),
        "{last}"
    );
    assert!(
        sent.iter()
            .any(|m| m["content"].to_string().contains("Hi, I am Ann")),
        "the earlier turn is in the context"
    );

    let models: Value = gw.get("/v1/models").await.json().await.unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "mock/test-model");

    // Turn metrics are recorded when the turn's bookkeeping ends, just after its response.
    wait_for_metric(&gw, r#"clawctx_gateway_turns_total{outcome="ok"} 2"#).await;
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn the_user_field_names_the_session_and_lossless_serves_turns() {
    let mut gw = start(Opts {
        engine: "lossless",
        ..Default::default()
    })
    .await;
    gw.llm.push([text("noted"), text("it was 4417")]);
    let body =
        json!({"messages": [{"role": "user", "content": "the door code is 4417"}], "user": "bob"});
    let r = gw.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["x-clawctx-session"],
        "agent:main:openai-user:bob"
    );
    let body = json!({"messages": [{"role": "user", "content": "what was the door code?"}], "user": "bob"});
    let r = gw.post("/v1/chat/completions", &body).await;
    let reply: Value = r.json().await.unwrap();
    assert_eq!(reply["choices"][0]["message"]["content"], "it was 4417");
    // Read your writes: the answer a client was just given is already searchable (the
    // response waits for the engine's commit, not for the session's bookkeeping after it).
    let (grep, snippets) = grep_snippets(
        &gw,
        json!({"sessionKey": "agent:main:openai-user:bob", "query": "4417"}),
    )
    .await;
    assert!(
        snippets.iter().any(|s| s.contains("it was 4417")),
        "the last answer must be found at once: {grep}"
    );
    let stored = gw.runtime.context("agent:main:openai-user:bob").unwrap();
    assert_eq!(stored.len(), 4, "{:?}", roles_and_texts(&stored));
    assert_eq!(gw.runtime.engine_id(), "lossless");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn words_inside_chinese_and_japanese_clauses_are_found_through_the_gateway() {
    let mut gw = start(Opts {
        engine: "lossless",
        ..Default::default()
    })
    .await;
    let turns = [
        ("请把账本七号放在三楼的保险柜里。", "好的，我明天去放。"),
        (
            "明日の会議は第二会議室で午後三時からです。",
            "了解しました。",
        ),
        ("今天天气很好，我们去公园散步吧。", "好主意。"),
    ];
    gw.llm.push(turns.iter().map(|(_, reply)| text(reply)));
    for (prompt, _) in turns {
        let body = json!({"messages": [{"role": "user", "content": prompt}], "user": "mei"});
        assert_eq!(gw.post("/v1/chat/completions", &body).await.status(), 200);
    }
    for (query, mode, want) in [
        ("账本七号", "full_text", "请把账本七号放在三楼的保险柜里。"),
        ("保险柜", "any_term", "请把账本七号放在三楼的保险柜里。"),
        (
            "会議室",
            "full_text",
            "明日の会議は第二会議室で午後三時からです。",
        ),
        ("明天", "full_text", "好的，我明天去放。"),
    ] {
        let (grep, snippets) = grep_snippets(
            &gw,
            json!({"sessionKey": "agent:main:openai-user:mei", "query": query, "mode": mode}),
        )
        .await;
        assert_eq!(snippets, [want], "{query} ({mode}): {grep}");
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn streaming_sends_role_content_finish_usage_and_done() {
    let mut gw = start(Opts::default()).await;
    gw.llm.push([text("Streaming works fine.")]);
    let body = json!({
        "model": "m", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "stream please"}]
    });
    let r = post_session(&gw, "agent:main:stream", &body).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    assert_eq!(r.headers()["x-clawctx-session"], "agent:main:stream");
    let data = sse_data(&r.text().await.unwrap());
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{data:?}");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk" && c["model"] == "m"),
        "{chunks:?}"
    );
    let id = &chunks[0]["id"];
    assert!(
        chunks.iter().all(|c| &c["id"] == id),
        "one id for the whole stream"
    );
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "Streaming works fine.");
    let deltas = chunks
        .iter()
        .filter(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|s| !s.is_empty())
        })
        .count();
    assert!(
        deltas >= 2,
        "the text arrives in deltas as the model streams it: {chunks:?}"
    );
    let finish = chunks
        .iter()
        .find(|c| c["choices"][0]["finish_reason"].is_string())
        .unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["total_tokens"], 110);
    let stored = roles_and_texts(&gw.runtime.context("agent:main:stream").unwrap());
    assert_eq!(
        stored.last().unwrap(),
        &("assistant".to_owned(), "Streaming works fine.".to_owned())
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn bad_requests_get_openai_errors_naming_the_problem() {
    let mut gw = start(Opts {
        tweak: Box::new(|c| c.max_body_bytes = 2048),
        ..Default::default()
    })
    .await;
    let raw = |body: &'static str| {
        gw.http
            .post(gw.at("/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };

    let e = error_of(
        raw(r#"{"messages": [{"role": "user", "content": "hi"}"#)
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
    assert_eq!(e["type"], "invalid_request_error");

    let e = error_of(raw(r#"{"messages": "hi"}"#).await.unwrap(), 400).await;
    assert_eq!(e["param"], "messages", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("invalid type: string"),
        "{e}"
    );

    let e = error_of(
        raw(r#"{"messages": [{"role": 1, "content": "x"}]}"#)
            .await
            .unwrap(),
        400,
    )
    .await;
    assert_eq!(e["param"], "messages[0].role", "{e}");

    let e = error_of(raw(r#"{"model": "m"}"#).await.unwrap(), 400).await;
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("missing field `messages`"),
        "{e}"
    );

    let e = error_of(raw(r#"{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}"#).await.unwrap(), 400).await;
    assert_eq!(e["param"], "messages[1].role", "{e}");

    let e = error_of(raw("").await.unwrap(), 400).await;
    assert!(e["message"].as_str().unwrap().contains("empty"), "{e}");

    let big = json!({"messages": [{"role": "user", "content": "x".repeat(4096)}]});
    let e = error_of(gw.post("/v1/chat/completions", &big).await, 413).await;
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("gateway.http.maxBodyBytes (2048 bytes)"),
        "{e}"
    );

    let e = error_of(
        gw.http
            .post(gw.at("/v1/chat/completions"))
            .header("content-type", "text/plain")
            .body("{}")
            .send()
            .await
            .unwrap(),
        415,
    )
    .await;
    assert!(
        e["message"].as_str().unwrap().contains("Content-Type"),
        "{e}"
    );

    // Nothing was stored and nothing reached the model.
    assert!(gw.llm.bodies().await.is_empty());
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_client_that_disconnects_mid_stream_aborts_the_turn_and_the_session_goes_on() {
    let mut gw = start(Opts::default()).await;
    gw.llm.push([
        slow("this reply is never seen", Duration::from_secs(20)),
        text("second answer"),
    ]);
    let body = json!({"stream": true, "messages": [{"role": "user", "content": "first question"}]});
    let mut r = post_session(&gw, "agent:main:gone", &body).await;
    assert_eq!(r.status(), 200);
    let first = tokio::time::timeout(Duration::from_secs(10), r.chunk())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&first).contains("\"role\":\"assistant\""),
        "{first:?}"
    );
    // The role chunk goes out before the model is asked: leave only once the slow reply is
    // being served, or (on a loaded machine) the next turn would take it from the queue.
    tokio::time::timeout(Duration::from_secs(30), async {
        while gw.llm.bodies().await.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the model is asked for the first reply");
    drop(r);

    wait_for_metric(&gw, r#"clawctx_gateway_turns_total{outcome="aborted"} 1"#).await;

    let next = json!({"messages": [{"role": "user", "content": "second question"}]});
    let r = post_session(&gw, "agent:main:gone", &next).await;
    assert_eq!(r.status(), 200, "the session's lane was released");
    let reply: Value = r.json().await.unwrap();
    assert_eq!(reply["choices"][0]["message"]["content"], "second answer");

    let stored = gw.runtime.context("agent:main:gone").unwrap();
    let texts = roles_and_texts(&stored);
    assert_eq!(
        texts.first().unwrap(),
        &("user".to_owned(), "first question".to_owned()),
        "the aborted turn's prompt is kept: {texts:?}"
    );
    assert!(
        !texts.iter().any(|(_, t)| t.contains("never seen")),
        "{texts:?}"
    );
    assert_eq!(
        texts[texts.len() - 2..].to_vec(),
        vec![
            ("user".to_owned(), "second question".to_owned()),
            ("assistant".to_owned(), "second answer".to_owned())
        ]
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn one_turn_at_a_time_per_session_a_bounded_queue_then_429_and_other_sessions_in_parallel() {
    let mut gw = start(Opts {
        tweak: Box::new(|c| c.max_queued_per_session = 1),
        ..Default::default()
    })
    .await;
    gw.llm
        .push([slow("a", Duration::from_secs(3)), text("d"), text("b")]);
    let send = |session: &'static str, prompt: &'static str| {
        let http = gw.http.clone();
        let url = gw.at("/v1/chat/completions");
        tokio::spawn(async move {
            let r = http
                .post(url)
                .header("x-clawctx-session", session)
                .json(&json!({"messages": [{"role": "user", "content": prompt}]}))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap())
        })
    };
    let a = send("agent:main:busy", "A");
    wait_for_metric(&gw, "clawctx_gateway_turns_in_flight 1").await;
    let d = send("agent:main:other", "D");
    let (status, body) = d.await.unwrap();
    assert_eq!(
        (status, body["choices"][0]["message"]["content"].as_str()),
        (200, Some("d"))
    );
    assert!(
        !a.is_finished(),
        "another session ran while the busy one's turn was still running"
    );

    let b = send("agent:main:busy", "B");
    // B waits for A; with B queued, the next request on the session is refused at once.
    wait_for_metric(&gw, "clawctx_gateway_requests_waiting 1").await;
    let r = post_session(
        &gw,
        "agent:main:busy",
        &json!({"messages": [{"role": "user", "content": "C"}]}),
    )
    .await;
    assert_eq!(r.headers()["retry-after"], "1");
    let e = error_of(r, 429).await;
    assert_eq!(e["type"], "rate_limit_error");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("session \"agent:main:busy\" is busy"),
        "{e}"
    );

    let (sa, ba) = a.await.unwrap();
    let (sb, bb) = b.await.unwrap();
    assert_eq!(
        (sa, ba["choices"][0]["message"]["content"].as_str()),
        (200, Some("a"))
    );
    assert_eq!(
        (sb, bb["choices"][0]["message"]["content"].as_str()),
        (200, Some("b"))
    );
    let texts = roles_and_texts(&gw.runtime.context("agent:main:busy").unwrap());
    let users: Vec<&str> = texts
        .iter()
        .filter(|(r, _)| r == "user")
        .map(|(_, t)| t.as_str())
        .collect();
    assert_eq!(
        users,
        ["A", "B"],
        "turns of one session never interleave: {texts:?}"
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_stop_lets_the_in_flight_turn_finish_then_shuts_the_runtime_down() {
    let mut gw = start(Opts::default()).await;
    gw.llm
        .push([slow("finished after the stop", Duration::from_millis(1500))]);
    let http = gw.http.clone();
    let url = gw.at("/v1/chat/completions");
    let inflight = tokio::spawn(async move {
        let r = http
            .post(url)
            .header("x-clawctx-session", "agent:main:drain")
            .json(&json!({"messages": [{"role": "user", "content": "slow one"}]}))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    });
    wait_for_metric(&gw, "clawctx_gateway_turns_in_flight 1").await;
    gw.signal_stop();
    let (status, body) = inflight.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "finished after the stop"
    );
    gw.join().await.unwrap();
    let texts = roles_and_texts(&gw.runtime.context("agent:main:drain").unwrap());
    assert_eq!(texts.last().unwrap().1, "finished after the stop");
}

#[tokio::test]
async fn a_turn_past_the_deadline_is_aborted_with_504() {
    let mut gw = start(Opts {
        tweak: Box::new(|c| c.request_timeout = Duration::from_millis(700)),
        ..Default::default()
    })
    .await;
    gw.llm
        .push([slow("too late", Duration::from_secs(20)), text("in time")]);
    let e = error_of(
        post_session(
            &gw,
            "agent:main:late",
            &chat(json!([{"role": "user", "content": "q1"}])),
        )
        .await,
        504,
    )
    .await;
    assert_eq!(e["type"], "timeout_error");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("gateway.http.requestTimeoutMs (700 ms)"),
        "{e}"
    );
    wait_for_metric(&gw, r#"clawctx_gateway_turns_total{outcome="aborted"} 1"#).await;
    let r = post_session(
        &gw,
        "agent:main:late",
        &chat(json!([{"role": "user", "content": "q2"}])),
    )
    .await;
    assert_eq!(r.status(), 200);
    gw.stop().await.unwrap();
}
