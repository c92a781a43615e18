//! The provider's prompt cache, per session, in `/metrics` and on the dashboard's session view:
//! a gateway on lossless against the mock model of `clawctx_test_support::mock_model`, which
//! reports `usage.prompt_tokens_details.cached_tokens` as OpenAI does (the longest prefix this
//! request shares with an earlier one of its session). What the mock reported is what the
//! gateway shows: the runtime records it as the turn's `cacheRead`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use clawctx_engine::ContextEngineRegistry;
use clawctx_gateway::{Gateway, GatewayConfig, GatewayParts};
use clawctx_protocol::SelectionSource;
use clawctx_runtime::{select_backend, AgentRuntime};
use clawctx_test_support::mock_model::MockModel;
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
    let config = Arc::new(json!({
        "models": {"providers": {"mock": {
            "api": "openai-completions",
            "baseUrl": model.base_url,
            "models": [{"id": "test-model", "contextWindow": 6000, "maxTokens": 256}],
            "maxRetries": 0, "timeoutMs": 20000
        }}},
        "agents": {"defaults": {"model": {"primary": "mock/test-model"}}},
        "plugins": {"slots": {"contextEngine": "lossless"}}
    }));
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    clawctx_lossless::register(&registry).unwrap();
    let agent_dir = state.path().join("agents").join("main");
    let backend = select_backend(&config, None, &|_| None).unwrap();
    let resolved = registry
        .resolve(
            Some(config.clone()),
            Some(agent_dir.clone()),
            Some(agent_dir.clone()),
        )
        .await
        .unwrap();
    assert_eq!(resolved.effective_id, "lossless");
    let runtime = AgentRuntime::builder(state.path(), resolved.engine.clone(), backend)
        .selection(resolved.effective_id.clone(), SelectionSource::Configured)
        .workspace_dir(agent_dir.to_string_lossy().into_owned())
        .build();
    let gateway = Gateway::new(GatewayParts {
        runtime,
        registry: Some(registry),
        host_config: config,
        model: "mock/test-model".into(),
        config: GatewayConfig::loopback(0),
    });
    let listener = gateway.bind().await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(gateway.serve(listener, async move {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::new();

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

    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}
