//! A re-sent chat request is one turn (issue #27 item 5): the same `Idempotency-Key` on the
//! session gets the first answer again (a different body under it is a 409), and so does a
//! byte-identical re-send without a key right after the answer; the model is asked once and
//! the session holds the prompt once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{start, text, Opts, TestGateway};
use serde_json::{json, Value};

const KEY: &str = "agent:main:resend";

async fn send(gw: &TestGateway, body: &Value, idempotency: Option<&str>) -> (u16, bool, Value) {
    let mut r = gw
        .http
        .post(gw.at("/v1/chat/completions"))
        .header("x-clawctx-session", KEY)
        .json(body);
    if let Some(k) = idempotency {
        r = r.header("Idempotency-Key", k);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let replayed = r.headers().get("x-clawctx-replayed").is_some();
    (status, replayed, r.json().await.unwrap())
}

/// The texts of the session's stored messages, oldest first.
fn stored_texts(gw: &TestGateway) -> Vec<String> {
    gw.runtime
        .context(KEY)
        .unwrap()
        .iter()
        .map(|m| m.plain_text())
        .collect()
}

fn ask(prompt: &str) -> Value {
    json!({"model": "mock/test-model", "messages": [{"role": "user", "content": prompt}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_sent_requests_are_one_turn() {
    let gw = start(Opts::default()).await;
    gw.llm.push([
        text("first answer"),
        text("second answer"),
        text("third answer"),
    ]);

    // With a key: the second send is answered again.
    let (s1, r1, a1) = send(&gw, &ask("where is the cache?"), Some("req-1")).await;
    assert_eq!((s1, r1), (200, false), "{a1}");
    let (s2, r2, a2) = send(&gw, &ask("where is the cache?"), Some("req-1")).await;
    assert_eq!((s2, r2), (200, true), "{a2}");
    assert_eq!(a1, a2);
    assert_eq!(gw.llm.bodies().await.len(), 1, "the model was asked once");
    // The same key for another request is refused, naming the header.
    let (s3, _, e3) = send(&gw, &ask("something else"), Some("req-1")).await;
    assert_eq!(s3, 409, "{e3}");
    assert_eq!(e3["error"]["param"], "Idempotency-Key", "{e3}");

    // Without a key: a byte-identical re-send right after the answer is the same request.
    let (s4, r4, a4) = send(&gw, &ask("and the database?"), None).await;
    assert_eq!((s4, r4), (200, false), "{a4}");
    assert_eq!(a4["choices"][0]["message"]["content"], "second answer");
    let (s5, r5, a5) = send(&gw, &ask("and the database?"), None).await;
    assert_eq!((s5, r5), (200, true), "{a5}");
    assert_eq!(a4, a5);
    // A new key is a new request, even with the same words.
    let (s6, r6, a6) = send(&gw, &ask("and the database?"), Some("req-2")).await;
    assert_eq!((s6, r6), (200, false), "{a6}");
    assert_eq!(a6["choices"][0]["message"]["content"], "third answer");
    assert_eq!(gw.llm.bodies().await.len(), 3);

    assert_eq!(
        stored_texts(&gw),
        vec![
            "where is the cache?",
            "first answer",
            "and the database?",
            "second answer",
            "and the database?",
            "third answer"
        ]
    );
}

/// Sends a streamed request; answers whether it was replayed, the reply text put together
/// from its deltas, its finish reason and whether it ended with `[DONE]`.
async fn send_streamed(
    gw: &TestGateway,
    body: &Value,
    idempotency: Option<&str>,
) -> (bool, String, String, bool) {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let mut r = gw
        .http
        .post(gw.at("/v1/chat/completions"))
        .header("x-clawctx-session", KEY)
        .json(&body);
    if let Some(k) = idempotency {
        r = r.header("Idempotency-Key", k);
    }
    let r = r.send().await.unwrap();
    assert_eq!(r.status(), 200);
    let replayed = r.headers().get("x-clawctx-replayed").is_some();
    let text = r.text().await.unwrap();
    let (mut reply, mut finish, mut done) = (String::new(), String::new(), false);
    for data in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let chunk: Value = serde_json::from_str(data).unwrap();
        let choice = &chunk["choices"][0];
        reply.push_str(choice["delta"]["content"].as_str().unwrap_or_default());
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = f.to_owned();
        }
    }
    (replayed, reply, finish, done)
}

/// A streamed answer is kept once its stream has ended: a streamed re-send gets the same reply
/// as a stream, a plain re-send (a client retrying a broken stream without it) as JSON, and the
/// model is asked once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_sent_streamed_requests_are_one_turn() {
    let gw = start(Opts::default()).await;
    gw.llm
        .push([text("streamed answer"), text("another answer")]);

    let first = send_streamed(&gw, &ask("what did the audit find?"), Some("s-1")).await;
    assert_eq!(
        first,
        (false, "streamed answer".into(), "stop".into(), true)
    );
    let again = send_streamed(&gw, &ask("what did the audit find?"), Some("s-1")).await;
    assert_eq!(again, (true, "streamed answer".into(), "stop".into(), true));
    let (status, replayed, plain) = send(&gw, &ask("what did the audit find?"), Some("s-1")).await;
    assert_eq!((status, replayed), (200, true), "{plain}");
    assert_eq!(plain["choices"][0]["message"]["content"], "streamed answer");
    // Without a key, a byte-identical streamed re-send right after is the same request too.
    let keyless = send_streamed(&gw, &ask("and the follow-up?"), None).await;
    assert_eq!(keyless.1, "another answer");
    assert!(!keyless.0);
    let keyless_again = send_streamed(&gw, &ask("and the follow-up?"), None).await;
    assert_eq!(
        keyless_again,
        (true, "another answer".into(), "stop".into(), true)
    );
    assert_eq!(gw.llm.bodies().await.len(), 2, "the model was asked twice");
    assert_eq!(
        stored_texts(&gw),
        vec![
            "what did the audit find?",
            "streamed answer",
            "and the follow-up?",
            "another answer"
        ]
    );
}

#[tokio::test]
async fn a_bad_idempotency_key_is_refused_naming_the_header() {
    let gw = start(Opts::default()).await;
    let (status, _, e) = send(&gw, &ask("hi"), Some(&"k".repeat(300))).await;
    assert_eq!(status, 400, "{e}");
    assert_eq!(e["error"]["param"], "Idempotency-Key", "{e}");
}
