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

/// A system prompt of more than 1,024 tokens, the shortest prefix either provider caches
/// (OpenClaw's own system prompts are several thousand tokens).
fn long_system_prompt() -> String {
    let mut s = String::from("You are a careful assistant.\n");
    for i in 0..200 {
        s.push_str(&format!("Rule {i}: answer briefly. "));
    }
    s
}

/// A user message of about 600 tokens (both providers cache nothing under 1,024), different
/// for each `t`.
fn long_message(t: usize) -> String {
    let mut s = format!("turn {t}: the deploy failed again, what now?");
    for i in 0..100 {
        s.push_str(&format!(" step {t}.{i} retried"));
    }
    s
}

/// The `cache_control` breakpoints of an Anthropic body: `system`, then the text (or type) of
/// each marked message block.
fn breakpoints(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for b in body["system"].as_array().into_iter().flatten() {
        if b.get("cache_control").is_some() {
            out.push("system".to_owned());
        }
    }
    for turn in body["messages"].as_array().unwrap() {
        for b in turn["content"].as_array().unwrap() {
            if b.get("cache_control").is_some() {
                out.push(
                    b["text"]
                        .as_str()
                        .unwrap_or(b["type"].as_str().unwrap_or_default())
                        .to_owned(),
                );
            }
        }
    }
    out
}

/// Scrapes `/metrics` until `name` reads `want` (the figures are recorded a moment after each
/// reply), and answers the exposition.
async fn metrics_until(http: &reqwest::Client, url: &str, name: &str, want: f64) -> String {
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
        if sample(&m, name) == Some(want) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    m
}

#[tokio::test]
async fn anthropic_requests_through_the_gateway_carry_breakpoints_and_the_cache_is_read() {
    use clawctx_test_support::mock_model::MockAnthropic;
    let model = MockAnthropic::start().await;
    let state = tempfile::tempdir().unwrap();
    let config = json!({
        "models": {"providers": {"mock": {
            "api": "anthropic-messages",
            "baseUrl": model.base_url,
            "models": [{"id": "test-model", "contextWindow": 16000, "maxTokens": 256}],
            "maxRetries": 0, "timeoutMs": 20000
        }}},
        "agents": {"defaults": {
            "model": {"primary": "mock/test-model"},
            "systemPrompt": long_system_prompt()
        }},
        "plugins": {"slots": {"contextEngine": "lossless"}}
    });
    let mut gw = serve(Serve::new(config, state.path(), "lossless")).await;
    let (url, http) = (gw.url.clone(), gw.http.clone());
    const TURNS: usize = 8;
    for t in 0..TURNS {
        let r = http
            .post(format!("{url}/v1/chat/completions"))
            .header("x-clawctx-session", KEY)
            .json(&json!({"messages": [{"role": "user", "content": long_message(t)}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    }
    let bodies = model.requests();
    assert!(bodies.len() >= TURNS, "{}", bodies.len());
    for (i, body) in bodies.iter().enumerate() {
        let marks = breakpoints(body);
        assert!(marks.len() <= 4, "request {i}: {marks:?}");
        assert_eq!(marks.first().map(String::as_str), Some("system"), "{body}");
    }
    // From the second turn on, the previous reply (the end of the stable history) is marked.
    let last = breakpoints(bodies.last().unwrap());
    assert!(
        last.iter().any(|m| m.starts_with("Noted (reply")),
        "{last:?}"
    );
    let totals = model.totals();
    assert!(
        totals.cached_tokens > 0 && totals.written_tokens > 0,
        "{totals:?}"
    );
    assert!(totals.cached_share() > 0.5, "{totals:?}");

    // What the provider reported reaches /metrics, cache writes included.
    let written =
        format!(r#"clawctx_gateway_session_cache_write_prompt_tokens_total{{session="{KEY}"}}"#);
    // Every request's writes, the first one's included (the totals count follow-ups).
    let want = (model.totals().written_tokens + first_written(&model)) as f64;
    let m = metrics_until(&http, &url, &written, want).await;
    assert_eq!(
        sample(&m, &written),
        Some((model.totals().written_tokens + first_written(&model)) as f64),
        "{m}"
    );
    assert!(
        sample(
            &m,
            &format!(r#"clawctx_gateway_session_cached_prompt_tokens_total{{session="{KEY}"}}"#)
        ) == Some(model.totals().cached_tokens as f64),
        "{m}"
    );
    // The same calls under both documented rules.
    for rule in ["openai", "anthropic"] {
        let cached = sample(
            &m,
            &format!(r#"clawctx_gateway_modelled_cached_prompt_tokens_total{{rule="{rule}"}}"#),
        )
        .unwrap_or_else(|| panic!("{m}"));
        assert!(cached > 0.0, "{rule}: {m}");
    }
    gw.stop().await.unwrap();
}

/// The tokens the first request of the mock's only session wrote (its totals count only the
/// follow-ups): the system prompt and the first turn.
fn first_written(model: &clawctx_test_support::mock_model::MockAnthropic) -> u64 {
    use clawctx_test_support::mock_model::{anthropic_blocks, CacheRule, PrefixCache};
    let first = &model.requests()[0];
    PrefixCache::with_rule(CacheRule::anthropic())
        .observe_at("s", 0, &anthropic_blocks(first))
        .written_tokens
}

#[tokio::test]
async fn openai_requests_through_the_gateway_carry_the_sessions_prompt_cache_key() {
    let model = MockModel::start().await;
    let state = tempfile::tempdir().unwrap();
    let config = json!({
        "models": {"providers": {"mock": {
            "api": "openai-completions",
            "baseUrl": model.base_url,
            "models": [{"id": "test-model", "contextWindow": 16000, "maxTokens": 256}],
            "maxRetries": 0, "timeoutMs": 20000
        }}},
        "agents": {"defaults": {
            "model": {"primary": "mock/test-model"},
            "systemPrompt": long_system_prompt()
        }},
        "plugins": {"slots": {"contextEngine": "lossless"}}
    });
    let mut gw = serve(Serve::new(config, state.path(), "lossless")).await;
    let (url, http) = (gw.url.clone(), gw.http.clone());
    for (session, turns) in [("agent:main:alice", 3), ("agent:main:bob", 2)] {
        for t in 0..turns {
            let r = http
                .post(format!("{url}/v1/chat/completions"))
                .header("x-clawctx-session", session)
                .json(&json!({"messages": [{"role": "user", "content": long_message(t)}]}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
        }
    }
    let keys: Vec<String> = model
        .requests()
        .iter()
        .map(|b| {
            b["prompt_cache_key"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    let alice = clawctx_model::prompt_cache_key("agent:main:alice");
    let bob = clawctx_model::prompt_cache_key("agent:main:bob");
    assert_eq!(keys.iter().filter(|k| **k == alice).count(), 3, "{keys:?}");
    assert_eq!(keys.iter().filter(|k| **k == bob).count(), 2, "{keys:?}");
    // Routed by the key, a session's follow-ups read its own cache once past 1,024 tokens.
    let totals = model.totals();
    assert!(totals.cached_tokens > 0, "{totals:?}");
    gw.stop().await.unwrap();
}
