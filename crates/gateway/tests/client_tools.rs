//! A client's own tools through `/v1/chat/completions` over real HTTP on loopback, the model a
//! mock OpenAI-compatible server: the client's tools are offered next to the engine's recall
//! tools, an engine tool call runs inside the gateway, a client tool call comes back to the
//! client unchanged (plain and streamed, `finish_reason: "tool_calls"`), the client's `tool`
//! messages continue the turn, and the session stores the call and the result once however
//! often the client re-sends them. Also what else a request carries: its system messages,
//! sampling settings, `tool_choice` and images reach the provider.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use clawctx_protocol::{AgentMessage, ContentBlock};
use common::{calls, error_of, start, text, Opts, TestGateway};
use serde_json::{json, Value};

const SESSION: &str = "agent:main:tools";

async fn post(gw: &TestGateway, body: &Value) -> reqwest::Response {
    gw.http
        .post(gw.at("/v1/chat/completions"))
        .header("x-clawctx-session", SESSION)
        .json(body)
        .send()
        .await
        .unwrap()
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather", "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    }})
}

/// The `data:` payloads of an SSE body, `[DONE]` excluded, parsed.
fn sse_chunks(body: &str) -> (Vec<Value>, bool) {
    let data: Vec<&str> = body
        .split("\n\n")
        .filter_map(|event| {
            event
                .lines()
                .find_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
        })
        .map(str::trim)
        .collect();
    let done = data.last() == Some(&"[DONE]");
    (
        data.iter()
            .filter(|d| **d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect(),
        done,
    )
}

/// Every tool call id and every tool result id the session stores, in order.
fn stored_calls_and_results(gw: &TestGateway) -> (Vec<String>, Vec<String>) {
    let stored = gw.runtime.context(SESSION).unwrap();
    let calls = stored
        .iter()
        .flat_map(|m| m.tool_calls().map(|c| c.id.clone()).collect::<Vec<_>>())
        .collect();
    let results = stored
        .iter()
        .filter_map(|m| m.tool_result_id().map(str::to_owned))
        .collect();
    (calls, results)
}

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"].as_array().map_or_else(Vec::new, |t| {
        t.iter()
            .map(|t| {
                t["function"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    })
}

#[tokio::test]
async fn a_client_tool_call_comes_back_to_the_client_and_its_result_continues_the_turn_stored_once()
{
    let mut gw = start(Opts {
        engine: "lossless",
        ..Default::default()
    })
    .await;
    gw.llm.push([
        // The model first searches with the engine's recall tool, which the gateway runs…
        calls("", &[("call_grep", "lcm_grep", json!({"query": "Paris"}))]),
        // …then calls the client's tool, which goes back to the client.
        calls(
            "Let me check.",
            &[("call_w", "get_weather", json!({"city": "Paris"}))],
        ),
        text("It is sunny and 21 °C in Paris."),
    ]);
    let first = json!({
        "model": "m",
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [weather_tool()],
        "tool_choice": "auto"
    });
    let r = post(&gw, &first).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    let choice = &body["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{body}");
    assert_eq!(choice["message"]["content"], "Let me check.");
    assert_eq!(
        choice["message"]["tool_calls"],
        json!([{"id": "call_w", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]),
        "only the client's call, as the model made it"
    );

    let bodies = gw.llm.bodies().await;
    assert_eq!(
        bodies.len(),
        2,
        "the engine's tool ran inside the gateway's loop"
    );
    let names = tool_names(&bodies[0]);
    assert!(
        names.contains(&"get_weather".to_owned()) && names.contains(&"lcm_grep".to_owned()),
        "{names:?}"
    );
    assert_eq!(bodies[0]["tool_choice"], "auto");
    let grep_result = bodies[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap();
    assert_eq!(grep_result["tool_call_id"], "call_grep");

    // The client runs its tool and re-sends the whole conversation with the result.
    let assistant = choice["message"].clone();
    let second = json!({
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are a weather bot."},
            {"role": "user", "content": "What is the weather in Paris?"},
            assistant,
            {"role": "tool", "tool_call_id": "call_w", "content": "sunny, 21 C"}
        ],
        "tools": [weather_tool()]
    });
    let r = post(&gw, &second).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "It is sunny and 21 °C in Paris."
    );
    assert!(
        body["choices"][0]["message"].get("tool_calls").is_none(),
        "{body}"
    );

    // The model saw the call and its result once each, and no second user message.
    let bodies = gw.llm.bodies().await;
    let sent = bodies[2]["messages"].as_array().unwrap();
    let results: Vec<&Value> = sent
        .iter()
        .filter(|m| m["tool_call_id"] == "call_w")
        .collect();
    assert_eq!(results.len(), 1, "{sent:?}");
    assert!(results[0]["content"].to_string().contains("sunny, 21 C"));
    assert_eq!(
        sent.iter().filter(|m| m["role"] == "user").count(),
        1,
        "{sent:?}"
    );

    let (stored_calls, stored_results) = stored_calls_and_results(&gw);
    assert_eq!(stored_calls, ["call_grep", "call_w"]);
    assert_eq!(stored_results, ["call_grep", "call_w"]);
    let stored = gw.runtime.context(SESSION).unwrap();
    let roles: Vec<&str> = stored.iter().map(AgentMessage::role).collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "toolResult",
            "assistant",
            "toolResult",
            "assistant"
        ]
    );
    let AgentMessage::ToolResult(r) = &stored[4] else {
        panic!("{stored:?}")
    };
    assert_eq!(
        (r.tool_name.as_str(), r.content.block_slice()),
        ("get_weather", &[ContentBlock::text("sunny, 21 C")][..])
    );

    // The same request again right away (a client retry) is answered again: it stores
    // nothing and calls no model.
    let again = post(&gw, &second).await;
    assert_eq!(again.status(), 200);
    assert!(again.headers().get("x-clawctx-replayed").is_some());
    // Sent as a new request (its own Idempotency-Key), its results answer no open call.
    let e = error_of(
        gw.http
            .post(gw.at("/v1/chat/completions"))
            .header("x-clawctx-session", SESSION)
            .header("Idempotency-Key", "a-new-request")
            .json(&second)
            .send()
            .await
            .unwrap(),
        400,
    )
    .await;
    assert!(
        e["message"].as_str().unwrap().contains("already answered"),
        "{e}"
    );
    assert_eq!(gw.llm.bodies().await.len(), 3);
    assert_eq!(
        stored_calls_and_results(&gw),
        (
            vec!["call_grep".into(), "call_w".into()],
            vec!["call_grep".into(), "call_w".into()]
        )
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn streamed_client_tool_calls_and_a_continuation_that_sends_only_the_result() {
    let mut gw = start(Opts::default()).await;
    gw.llm.push([
        calls(
            "",
            &[
                ("call_a", "get_weather", json!({"city": "Oslo"})),
                ("call_b", "get_weather", json!({"city": "Rome"})),
            ],
        ),
        text("Oslo is cold, Rome is warm."),
    ]);
    let first = json!({
        "stream": true,
        "messages": [{"role": "user", "content": "Oslo and Rome?"}],
        "tools": [weather_tool()],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}}
    });
    let r = post(&gw, &first).await;
    assert_eq!(r.status(), 200);
    let (chunks, done) = sse_chunks(&r.text().await.unwrap());
    assert!(done);
    let deltas: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"].get("tool_calls"))
        .collect();
    let streamed: Vec<Value> = deltas
        .iter()
        .flat_map(|d| d.as_array().unwrap().clone())
        .collect();
    assert_eq!(
        streamed,
        vec![
            json!({"index": 0, "id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}),
            json!({"index": 1, "id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}),
        ]
    );
    let finish: Vec<&Value> = chunks
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .filter(|f| f.is_string())
        .collect();
    assert_eq!(finish, [&json!("tool_calls")]);
    let body = &gw.llm.bodies().await[0];
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "function": {"name": "get_weather"}})
    );

    // One result missing: refused, naming it, nothing stored.
    let only_a = json!({"messages": [{"role": "tool", "tool_call_id": "call_a", "content": "-5 C"}], "tools": [weather_tool()]});
    let e = error_of(post(&gw, &only_a).await, 400).await;
    assert!(e["message"].as_str().unwrap().contains("call_b"), "{e}");
    // A result for a call that does not exist: refused, naming the message.
    let wrong = json!({"messages": [
        {"role": "tool", "tool_call_id": "call_a", "content": "-5 C"},
        {"role": "tool", "tool_call_id": "call_zzz", "content": "?"}
    ]});
    let e = error_of(post(&gw, &wrong).await, 400).await;
    assert_eq!(e["param"], "messages[1].tool_call_id", "{e}");
    assert_eq!(
        stored_calls_and_results(&gw).1,
        Vec::<String>::new(),
        "no half-stored continuation"
    );

    // Only the new messages, streamed.
    let results = json!({"stream": true, "tools": [weather_tool()], "messages": [
        {"role": "tool", "tool_call_id": "call_a", "content": "-5 C"},
        {"role": "tool", "tool_call_id": "call_b", "content": "24 C"}
    ]});
    let r = post(&gw, &results).await;
    assert_eq!(r.status(), 200);
    let (chunks, done) = sse_chunks(&r.text().await.unwrap());
    assert!(done);
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "Oslo is cold, Rome is warm.");
    assert!(chunks
        .iter()
        .any(|c| c["choices"][0]["finish_reason"] == "stop"));
    assert_eq!(
        stored_calls_and_results(&gw),
        (
            vec!["call_a".into(), "call_b".into()],
            vec!["call_a".into(), "call_b".into()]
        )
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn system_messages_sampling_and_images_reach_the_provider_and_bad_ones_are_named() {
    let mut gw = start(Opts::default()).await;
    gw.llm.push([text("A red square.")]);
    let body = json!({
        "messages": [
            {"role": "system", "content": "Answer in five words."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
            ]}
        ],
        "temperature": 0.25, "top_p": 0.5, "max_tokens": 100, "stop": ["\n\n"], "seed": 42,
        "presence_penalty": 0.5, "frequency_penalty": 0.25
    });
    let r = post(&gw, &body).await;
    assert_eq!(r.status(), 200);
    let sent = &gw.llm.bodies().await[0];
    assert_eq!(sent["temperature"], 0.25);
    assert_eq!(sent["top_p"], 0.5);
    assert_eq!(sent["max_tokens"], 100);
    assert_eq!(sent["stop"], json!(["\n\n"]));
    assert_eq!(sent["seed"], 42);
    assert_eq!(sent["presence_penalty"], 0.5);
    assert_eq!(sent["frequency_penalty"], 0.25);
    assert!(
        sent.get("tools").is_none() && sent.get("tool_choice").is_none(),
        "{sent}"
    );
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    assert!(
        messages[0]["content"]
            .as_str()
            .unwrap()
            .ends_with("Answer in five words."),
        "{}",
        messages[0]
    );
    let user = messages.iter().rfind(|m| m["role"] == "user").unwrap();
    assert!(
        user["content"]
            .to_string()
            .contains("data:image/png;base64,iVBORw0KGgo="),
        "{user}"
    );
    // The image is stored with the prompt; the client's system message is not stored.
    let stored = gw.runtime.context(SESSION).unwrap();
    let AgentMessage::User(u) = &stored[0] else {
        panic!("{stored:?}")
    };
    assert!(
        u.content
            .block_slice()
            .iter()
            .any(|b| matches!(b, ContentBlock::Image(_))),
        "{stored:?}"
    );
    assert!(!stored.iter().any(|m| m.plain_text().contains("five words")));

    // Above the model's configured maxTokens (1024) is refused as OpenAI refuses it, naming
    // the limit (it was capped silently); the model is not called.
    let e = error_of(
        post(
            &gw,
            &json!({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 100000}),
        )
        .await,
        400,
    )
    .await;
    assert_eq!(e["param"], "max_completion_tokens", "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("at most 1024"),
        "{e}"
    );
    assert_eq!(gw.llm.bodies().await.len(), 1);

    let remote = json!({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "and this?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    ]}]});
    let e = error_of(post(&gw, &remote).await, 400).await;
    assert_eq!(e["param"], "messages[0].content[1].image_url.url", "{e}");
    assert!(e["message"].as_str().unwrap().contains("data: URLs"), "{e}");
    let e = error_of(
        post(
            &gw,
            &json!({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}),
        )
        .await,
        400,
    )
    .await;
    assert_eq!(e["param"], "temperature", "{e}");
    let e = error_of(post(&gw, &json!({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})).await, 400).await;
    assert_eq!(e["param"], "tools[0].function", "{e}");
    assert_eq!(
        gw.llm.bodies().await.len(),
        1,
        "refused requests reach no model"
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_client_tool_may_not_take_the_name_of_an_engine_tool() {
    let mut gw = start(Opts {
        engine: "lossless",
        ..Default::default()
    })
    .await;
    let body = json!({
        "messages": [{"role": "user", "content": "x"}],
        "tools": [weather_tool(), {"type": "function", "function": {"name": "lcm_grep"}}]
    });
    let e = error_of(post(&gw, &body).await, 400).await;
    assert_eq!(e["param"], "tools[1].function.name", "{e}");
    assert!(e["message"].as_str().unwrap().contains("lcm_grep"), "{e}");
    assert!(gw.llm.bodies().await.is_empty());
    gw.stop().await.unwrap();
}
