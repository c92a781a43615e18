//! Operations over real HTTP on loopback: health, readiness, Prometheus metrics, request ids,
//! the bearer-token rules, closed CORS, the 404 shape, and a clean stop.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{error_of, start, Opts};
use serde_json::Value;

#[tokio::test]
async fn health_readiness_metrics_and_request_ids() {
    let mut gw = start(Opts::default()).await;

    let r = gw.get("/healthz").await;
    assert_eq!(r.status(), 200);
    let id = r
        .headers()
        .get("x-request-id")
        .expect("every response has a request id")
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(id.len(), 36, "a generated request id is a UUID: {id}");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["status"], "ok");
    assert_eq!(body["pid"], std::process::id());

    let r = gw
        .http
        .get(gw.at("/readyz"))
        .header("x-request-id", "client-chosen-42")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["x-request-id"],
        "client-chosen-42",
        "a client's request id is kept"
    );
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["status"], "ready");
    assert_eq!(body["engine"], "legacy");

    let r = gw.get("/metrics").await;
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/openmetrics-text"));
    let text = r.text().await.unwrap();
    for name in [
        "clawctx_gateway_http_requests_total{",
        "clawctx_gateway_turn_seconds_bucket",
        "clawctx_gateway_assemble_seconds_bucket",
        "clawctx_gateway_quarantined_engines 0",
        "clawctx_gateway_turns_in_flight 0",
    ] {
        assert!(text.contains(name), "/metrics lacks {name}:\n{text}");
    }
    assert!(
        text.contains(
            r#"clawctx_gateway_http_requests_total{route="/healthz",method="GET",status="200"} 1"#
        ),
        "the /healthz request is counted:\n{text}"
    );

    let e = error_of(gw.get("/v1/nothing-here").await, 404).await;
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("GET /v1/nothing-here"),
        "{e}"
    );

    gw.stop().await.unwrap();
}

#[tokio::test]
async fn with_a_token_every_route_but_health_needs_it_and_a_wrong_one_gets_401() {
    let secret = "tok-9f8e7d6c5b4a";
    let mut gw = start(Opts {
        token: Some(secret),
        ..Default::default()
    })
    .await;

    assert_eq!(
        gw.get("/healthz").await.status(),
        200,
        "health needs no token"
    );
    assert_eq!(
        gw.get("/readyz").await.status(),
        200,
        "readiness needs no token"
    );

    let r = gw.get("/metrics").await;
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    let e = error_of(r, 401).await;
    assert_eq!(e["type"], "authentication_error");

    for wrong in [
        "Bearer tok-9f8e7d6c5b4",
        "Bearer tok-9f8e7d6c5b4a-and-more",
        "tok-9f8e7d6c5b4a",
        "Basic dG9rOg==",
    ] {
        let r = gw
            .http
            .get(gw.at("/metrics"))
            .header("authorization", wrong)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        assert_eq!(status, 401, "{wrong}: {text}");
        assert!(
            !text.contains(secret),
            "an error body never carries the token: {text}"
        );
    }
    let r = gw
        .http
        .get(gw.at("/metrics"))
        .bearer_auth(secret)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = gw
        .http
        .post(gw.at("/v1/chat/completions"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "the OpenAI endpoint needs the token too");

    gw.stop().await.unwrap();
}

#[tokio::test]
async fn cors_is_closed_unless_origins_are_listed() {
    let mut closed = start(Opts::default()).await;
    let preflight = |gw: &common::TestGateway, origin: &str| {
        gw.http
            .request(reqwest::Method::OPTIONS, gw.at("/v1/chat/completions"))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .send()
    };
    let r = preflight(&closed, "https://evil.example").await.unwrap();
    assert!(
        r.headers().get("access-control-allow-origin").is_none(),
        "{:?}",
        r.headers()
    );
    let r = closed
        .http
        .get(closed.at("/healthz"))
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert!(r.headers().get("access-control-allow-origin").is_none());
    closed.stop().await.unwrap();

    let mut open = start(Opts {
        tweak: Box::new(|c| c.allowed_origins = vec!["https://app.example".into()]),
        ..Default::default()
    })
    .await;
    let r = preflight(&open, "https://app.example").await.unwrap();
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    let r = preflight(&open, "https://evil.example").await.unwrap();
    assert!(r.headers().get("access-control-allow-origin").is_none());
    open.stop().await.unwrap();
}

#[tokio::test]
async fn stopping_closes_the_listener() {
    let mut gw = start(Opts::default()).await;
    assert_eq!(gw.get("/healthz").await.status(), 200);
    gw.stop().await.unwrap();
    let fresh = reqwest::Client::new();
    assert!(
        fresh.get(gw.at("/healthz")).send().await.is_err(),
        "nothing listens after the stop"
    );
}
