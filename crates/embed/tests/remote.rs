//! `RemoteEmbedder` against a mock OpenAI-compatible server on 127.0.0.1 (wiremock) that
//! records each request: what is sent (model, inputs, key, dimensions), answers put back in
//! order and normalized, the dimension probe, and each failure's message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use clawctx_embed::remote::MAX_INPUTS;
use clawctx_embed::{
    resolve, EmbedError, EmbedSpec, Embedder, RemoteConfig, RemoteEmbedder, ResolveError,
};
use serde_json::{json, Value};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + Sync {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |k| map.get(k).cloned()
}

fn config(server: &MockServer) -> RemoteConfig {
    RemoteConfig {
        base_url: format!("{}/v1/", server.uri()),
        model: "text-embedding-test".to_owned(),
        api_key_env: Some("TEST_EMBED_KEY".to_owned()),
        dimensions: None,
        timeout_ms: None,
    }
}

/// Answers each input `i` with the vector `[i + 1, 2 * (i + 1), 0]` (not unit length), in
/// reverse order, as some servers do.
struct Echo;

impl Respond for Echo {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let n = body["input"].as_array().map(Vec::len).unwrap_or(0);
        let data: Vec<Value> = (0..n)
            .rev()
            .map(|i| {
                let x = (i + 1) as f32;
                json!({"object": "embedding", "index": i, "embedding": [x, 2.0 * x, 0.0]})
            })
            .collect();
        ResponseTemplate::new(200).set_body_json(json!({
            "object": "list", "data": data, "model": body["model"],
            "usage": {"prompt_tokens": n, "total_tokens": n}
        }))
    }
}

async fn requests(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

#[tokio::test]
async fn sends_the_texts_and_returns_unit_vectors_in_order() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .and(header("authorization", "Bearer sk-test"))
        .respond_with(Echo)
        .mount(&server)
        .await;
    let env = env_of(&[("TEST_EMBED_KEY", "sk-test")]);
    let embedder = RemoteEmbedder::connect(&config(&server), &env)
        .await
        .unwrap();
    assert_eq!(embedder.dim(), 3, "learned from the probe");
    assert!(embedder.model_id().contains("text-embedding-test"));
    assert_eq!(embedder.url(), format!("{}/v1/embeddings", server.uri()));

    let texts = vec!["first".to_owned(), "second".to_owned(), "third".to_owned()];
    let got = embedder.embed(&texts).await.unwrap();
    let s5 = 5f32.sqrt();
    for (i, v) in got.iter().enumerate() {
        // [k, 2k, 0] normalized is [1/√5, 2/√5, 0] whatever k: check order by index via the
        // request, and normalization here.
        assert!(
            (v[0] - 1.0 / s5).abs() < 1e-6 && (v[1] - 2.0 / s5).abs() < 1e-6,
            "{i}: {v:?}"
        );
    }

    let sent = requests(&server).await;
    assert_eq!(sent.len(), 2, "the probe, then the batch");
    assert_eq!(sent[0]["input"], json!(["dimension probe"]));
    assert_eq!(
        sent[1],
        json!({"model": "text-embedding-test", "input": texts, "encoding_format": "float"})
    );
    assert!(sent[1].get("dimensions").is_none());
}

/// Answers with distinct vectors per input so that the order is checkable: input `i` gets a
/// one-hot vector at position `i % 4`.
struct OneHot;

impl Respond for OneHot {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let inputs = body["input"].as_array().cloned().unwrap_or_default();
        let data: Vec<Value> = inputs
            .iter()
            .enumerate()
            .rev()
            .map(|(i, text)| {
                let k: usize = text.as_str().unwrap().parse().unwrap();
                let mut v = vec![0.0f32; 4];
                v[k % 4] = 3.0;
                json!({"index": i, "embedding": v})
            })
            .collect();
        ResponseTemplate::new(200).set_body_json(json!({ "data": data }))
    }
}

#[tokio::test]
async fn large_batches_are_split_and_dimensions_are_sent_when_configured() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(OneHot)
        .mount(&server)
        .await;
    let cfg = RemoteConfig {
        api_key_env: None,
        dimensions: Some(4),
        ..config(&server)
    };
    let embedder = RemoteEmbedder::connect(&cfg, &env_of(&[])).await.unwrap();
    assert_eq!(embedder.dim(), 4);
    assert!(
        requests(&server).await.is_empty(),
        "no probe when dimensions is configured"
    );
    let texts: Vec<String> = (0..MAX_INPUTS + 3).map(|i| i.to_string()).collect();
    let got = embedder.embed(&texts).await.unwrap();
    assert_eq!(got.len(), texts.len());
    for (i, v) in got.iter().enumerate() {
        let mut want = vec![0.0f32; 4];
        want[i % 4] = 1.0;
        assert_eq!(v, &want, "input {i}");
    }
    let sent = requests(&server).await;
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0]["input"].as_array().unwrap().len(), MAX_INPUTS);
    assert_eq!(sent[1]["input"].as_array().unwrap().len(), 3);
    assert_eq!(sent[0]["dimensions"], json!(4));
    let received = server.received_requests().await.unwrap();
    assert!(
        received[0].headers.get("authorization").is_none(),
        "no key named, none sent"
    );
}

#[tokio::test]
async fn an_error_status_names_the_status_and_the_bodys_start() {
    let server = MockServer::start().await;
    let long_tail = "x".repeat(5000);
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(429).set_body_string(format!(
            "{{\"error\":{{\"message\":\"Rate limit reached for text-embedding-test\"}}}}\n{long_tail}"
        )))
        .mount(&server)
        .await;
    let cfg = RemoteConfig {
        dimensions: Some(3),
        ..config(&server)
    };
    let embedder = RemoteEmbedder::connect(&cfg, &env_of(&[("TEST_EMBED_KEY", "k")]))
        .await
        .unwrap();
    let err = embedder.embed(&["a".to_owned()]).await.unwrap_err();
    match &err {
        EmbedError::Status { status, body, url } => {
            assert_eq!(*status, 429);
            assert!(body.contains("Rate limit reached"), "{body}");
            assert!(body.chars().count() <= 501, "excerpt only: {}", body.len());
            assert!(url.ends_with("/v1/embeddings"));
        }
        other => panic!("expected a status error, got {other}"),
    }
    let message = err.to_string();
    assert!(
        message.contains("HTTP 429") && message.contains("Rate limit"),
        "{message}"
    );
}

#[tokio::test]
async fn a_slow_server_times_out() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(5)))
        .mount(&server)
        .await;
    let cfg = RemoteConfig {
        dimensions: Some(3),
        timeout_ms: Some(300),
        ..config(&server)
    };
    let embedder = RemoteEmbedder::connect(&cfg, &env_of(&[("TEST_EMBED_KEY", "k")]))
        .await
        .unwrap();
    let start = Instant::now();
    let err = embedder.embed(&["a".to_owned()]).await.unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert!(
        matches!(&err, EmbedError::Transport { message, .. } if message.contains("timed out")),
        "{err}"
    );
}

#[tokio::test]
async fn malformed_answers_are_refused() {
    let cases = [
        (json!({"data": []}), "0 embeddings for 1 inputs"),
        (
            json!({"data": [{"index": 0, "embedding": [1.0, 2.0]}]}),
            "2 dimensions",
        ),
        (
            json!({"data": [{"index": 5, "embedding": [1.0, 2.0, 3.0]}]}),
            "out of range",
        ),
        (json!({"nope": true}), "missing field"),
    ];
    for (body, expected) in cases {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_json(body.clone()))
            .mount(&server)
            .await;
        let cfg = RemoteConfig {
            dimensions: Some(3),
            ..config(&server)
        };
        let embedder = RemoteEmbedder::connect(&cfg, &env_of(&[("TEST_EMBED_KEY", "k")]))
            .await
            .unwrap();
        let err = embedder.embed(&["a".to_owned()]).await.unwrap_err();
        assert!(
            matches!(&err, EmbedError::BadResponse { message, .. } if message.contains(expected)),
            "{body}: {err}"
        );
    }
}

#[tokio::test]
async fn config_errors_name_what_to_fix() {
    let server = MockServer::start().await;
    let err = RemoteEmbedder::connect(&config(&server), &env_of(&[]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ResolveError::Remote { message, .. } if message.contains("TEST_EMBED_KEY")),
        "{err}"
    );
    let bad_url = RemoteConfig {
        base_url: "ftp://example.invalid/v1".to_owned(),
        ..config(&server)
    };
    let err = RemoteEmbedder::connect(&bad_url, &env_of(&[("TEST_EMBED_KEY", "k")]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("http"), "{err}");
    // The probe's failure is reported as such.
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(401).set_body_string("invalid api key"))
        .mount(&server)
        .await;
    let err = RemoteEmbedder::connect(&config(&server), &env_of(&[("TEST_EMBED_KEY", "k")]))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            ResolveError::Probe(EmbedError::Status { status: 401, .. })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("invalid api key"), "{err}");
}

#[tokio::test]
async fn resolve_builds_the_configured_endpoint() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(Echo)
        .mount(&server)
        .await;
    let spec = EmbedSpec::Remote(config(&server));
    let state = tempfile::tempdir().unwrap();
    // The variable would name a model directory: the config wins.
    let env = env_of(&[
        ("TEST_EMBED_KEY", "k"),
        ("CLAWCTX_EMBED_MODEL", "/nonexistent/model"),
    ]);
    let embedder = resolve(Some(&spec), state.path(), &env)
        .await
        .unwrap()
        .expect("an embedder");
    assert_eq!(embedder.dim(), 3);
    let v = embedder.embed(&["x".to_owned()]).await.unwrap();
    assert_eq!(v.len(), 1);
}
