//! Recall by meaning through the gateway (issue #43), with the real sentence model named in
//! the config (`plugins.entries.lossless.config.embeddings`): a fact stored through
//! `/v1/engine/ingestBatch` before 300 newer messages is found for a question that shares none of its words,
//! by `/v1/engine/lcm_grep` (`semantic`, and `auto`, the default) once the background
//! embedder has caught up, and quoted in the `<recalled>` block of `/v1/engine/assemble` for
//! that question. On SQLite and PostgreSQL (`CLAWCTX_TEST_PG_URL`; skips without it, fails
//! under `CI=true`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::json;

use crate::dashboard_fixture::{on_postgres, start, Setup};

const KEY: &str = "agent:main:openai:semantic";
const FACT: &str = "After a long debate the team settled on PostgreSQL to keep all the records.";
const QUESTION: &str = "Which database did we pick?";

fn with_model(mut setup: Setup, model: &str) -> Setup {
    setup.extra_config["plugins"]["entries"]["lossless"]["config"]["embeddings"] =
        json!({"provider": "local", "model": model});
    setup
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fact_asked_in_other_words_is_found_through_the_gateway_on_sqlite() {
    let Some(model) = clawctx_test_support::embed_model::model_dir() else {
        return;
    };
    by_meaning(with_model(Setup::default(), model.to_str().unwrap())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fact_asked_in_other_words_is_found_through_the_gateway_on_postgres() {
    let Some((_db, setup)) = on_postgres("semantic_recall") else {
        return;
    };
    let Some(model) = clawctx_test_support::embed_model::model_dir() else {
        return;
    };
    by_meaning(with_model(setup, model.to_str().unwrap())).await;
}

async fn by_meaning(setup: Setup) {
    let mut f = start(setup).await;
    let mut messages =
        vec![json!({"role": "user", "content": FACT, "timestamp": 1_769_000_000_000u64})];
    messages.extend((0..300).map(|n| {
        json!({"role": "user",
               "content": format!("Weekly sync {n}: the slides for the offsite still need a cover image."),
               "timestamp": 1_770_000_000_000u64 + n as u64})
    }));
    let sid = KEY.rsplit(':').next().unwrap();
    f.post_json(
        "/v1/engine/ingestBatch",
        &json!({"sessionId": sid, "sessionKey": KEY, "messages": messages}),
    )
    .await;
    // The background embedder catches up on its own; meanwhile the fact may not be found yet.
    let deadline = Instant::now() + Duration::from_secs(120);
    let grep = loop {
        let grep = f
            .post_json(
                "/v1/engine/lcm_grep",
                &json!({"sessionKey": KEY, "query": QUESTION, "mode": "semantic", "target": "messages"}),
            )
            .await;
        if grep["hits"][0]["snippet"]
            .as_str()
            .is_some_and(|s| s.contains("PostgreSQL"))
        {
            break grep;
        }
        assert!(Instant::now() < deadline, "never found: {grep}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(grep["hits"][0]["score"].as_f64().unwrap() > 0.3, "{grep}");
    // `auto` (no mode given) is hybrid with a model: the fact first too.
    let auto = f
        .post_json(
            "/v1/engine/lcm_grep",
            &json!({"sessionKey": KEY, "query": QUESTION, "target": "messages"}),
        )
        .await;
    assert!(
        auto["hits"][0]["snippet"]
            .as_str()
            .unwrap_or("")
            .contains("PostgreSQL"),
        "{auto}"
    );
    // The question's assembly, far too small for 300 messages, quotes the fact.
    let assembled = f
        .post_json(
            "/v1/engine/assemble",
            &json!({"sessionId": sid, "sessionKey": KEY, "messages": [], "tokenBudget": 2000,
                    "prompt": QUESTION}),
        )
        .await;
    let recalled = assembled["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .find(|t| t.starts_with("<recalled"))
        .unwrap_or_else(|| panic!("no recalled block: {assembled}"));
    assert!(recalled.contains("PostgreSQL"), "{recalled}");
    f.stop().await;
}
