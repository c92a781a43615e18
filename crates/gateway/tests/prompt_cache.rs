//! The provider's prompt cache, per session, in `/metrics` and on the dashboard's session view:
//! a gateway on lossless against the mock model of `clawctx_test_support::mock_model`, which
//! reports `usage.prompt_tokens_details.cached_tokens` as OpenAI does (the longest prefix this
//! request shares with an earlier one of its session). What the mock reported is what the
//! gateway shows: the runtime records it as the turn's `cacheRead`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use clawctx_test_support::mock_model::MockModel;
use common::{serve, Serve};
use serde_json::{json, Value};

const KEY: &str = "agent:main:cache1";

/// The value of the sample `name` (labels included) in the exposition.
fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    })
}

#[tokio::test]
async fn each_sessions_cache_hit_ratio_is_what_the_provider_reported() {
    let model = MockModel::start().await;
    let state = tempfile::tempdir().unwrap();
    let config = json!({
        "models": {"providers": {"mock": {
            "api": "openai-completions",
            "baseUrl": model.base_url,
            "models": [{"id": "test-model", "contextWindow": 6000, "maxTokens": 256}],
            "maxRetries": 0, "timeoutMs": 20000
        }}},
        "agents": {"defaults": {"model": {"primary": "mock/test-model"}}},
        "plugins": {"slots": {"contextEngine": "lossless"}}
    });
    let mut gw = serve(Serve::new(config, state.path(), "lossless")).await;
    let (url, http) = (gw.url.clone(), gw.http.clone());

    let words = "the deploy failed because the config parser rejected a value so we retried";
    for t in 0..30 {
        let r = http
            .post(format!("{url}/v1/chat/completions"))
            .header("x-clawctx-session", KEY)
            .json(&json!({"messages": [{"role": "user", "content": format!("turn {t}: {words} {words}")}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    }
    let requests = model.requests().len();
    assert!(requests >= 30, "one model call per turn: {requests}");

    // The figures are recorded when a turn's bookkeeping ends, a moment after its reply.
    let cached_name =
        format!(r#"clawctx_gateway_session_cached_prompt_tokens_total{{session="{KEY}"}}"#);
    let mut m = String::new();
    for _ in 0..300 {
        m = http
            .get(format!("{url}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if sample(&m, &cached_name) == Some(model.totals().cached_tokens as f64) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let totals = model.totals();
    assert!(
        totals.cached_tokens > 0,
        "the mock reported cache hits: {totals:?}"
    );
    assert_eq!(
        sample(&m, &cached_name),
        Some(totals.cached_tokens as f64),
        "the cached tokens the provider reported: {m}"
    );
    let prompt = sample(
        &m,
        &format!(r#"clawctx_gateway_session_prompt_tokens_total{{session="{KEY}"}}"#),
    )
    .unwrap_or_else(|| panic!("{m}"));
    let ratio = sample(
        &m,
        &format!(r#"clawctx_gateway_session_cache_hit_ratio{{session="{KEY}"}}"#),
    )
    .unwrap_or_else(|| panic!("{m}"));
    assert!(
        (ratio - totals.cached_tokens as f64 / prompt).abs() < 1e-9,
        "the ratio is cached / prompt tokens: {ratio} vs {} / {prompt}",
        totals.cached_tokens
    );
    assert!(
        ratio > 0.5,
        "most of each request repeats the last one: {ratio}"
    );

    let view: Value = http
        .get(format!("{url}/v1/dashboard/session?key={KEY}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(view["cache"]["cachedTokens"], json!(totals.cached_tokens));
    assert_eq!(view["cache"]["promptTokens"], json!(prompt as u64));
    assert!((view["cache"]["hitRatio"].as_f64().unwrap() - ratio).abs() < 1e-9);

    gw.stop().await.unwrap();
}
