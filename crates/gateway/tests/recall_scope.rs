//! One conversation's recall through the gateway does not depend on the other sessions of the
//! store (issue #43 item 5): a fact told in a short chat session is the first hit of
//! `/v1/engine/lcm_grep` for a question about it, although 20 other sessions (stored through
//! `/v1/engine/ingestBatch`) say every word of the question hundreds of times. On SQLite and on
//! PostgreSQL (`CLAWCTX_TEST_PG_URL`; skips without it, fails under `CI=true`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};

use crate::dashboard_fixture::{on_postgres, start, Setup};

const KEY: &str = "agent:main:openai:planted";
const FACT: &str = "FYI the invoice job moved to queue Q-7731 on Tuesday.";

/// The `n`th message of an operations chat: every one says which queue an invoice job moved to
/// (10,000 in all: each word of the question is in more rows than a term's window of 4,000).
fn ops_message(session: usize, n: usize) -> Value {
    const OPS: &[&str] = &[
        "the invoice job moved to queue {q} after the deploy",
        "which queue? the nightly invoice job moved to {q}",
        "we moved the invoice export job off queue {q}",
    ];
    let q = format!("Q-{}", 1000 + (session * 500 + n) % 5000);
    let line = OPS[(session + n) % OPS.len()].replace("{q}", &q);
    json!({"role": "user", "content": format!("{line} (run {session}-{n})"),
           "timestamp": 1_760_000_000_000u64 + n as u64})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_recall_ignores_what_other_sessions_say_on_sqlite() {
    recall_of_one_session(Setup::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_recall_ignores_what_other_sessions_say_on_postgres() {
    let Some((_db, setup)) = on_postgres("recall_scope") else {
        return;
    };
    recall_of_one_session(setup).await;
}

async fn recall_of_one_session(setup: Setup) {
    let mut f = start(setup).await;
    // The short session, through real chat turns; then the other sessions, all newer.
    f.turn(KEY, FACT, "Noted.").await;
    f.turn(KEY, "Lunch was fine, the soup was good.", "Glad to hear.")
        .await;
    for s in 0..20 {
        let messages: Vec<Value> = (0..500).map(|n| ops_message(s, n)).collect();
        f.post_json(
            "/v1/engine/ingestBatch",
            &json!({"sessionId": format!("ops-{s}"), "sessionKey": format!("agent:main:ops:{s}"),
                    "messages": messages}),
        )
        .await;
    }
    let grep = f
        .post_json(
            "/v1/engine/lcm_grep",
            &json!({"sessionKey": KEY, "query": "Which queue did the invoice job move to?",
                    "mode": "any_term", "target": "messages"}),
        )
        .await;
    let first = grep["hits"][0]["snippet"].as_str().unwrap_or("");
    assert!(
        first.contains("Q-7731 on Tuesday"),
        "the fact ranks first: {grep}"
    );
    // And the turn asking it gets it quoted or in its context.
    f.turn(KEY, "Which queue did the invoice job move to?", "Q-7731.")
        .await;
    let bodies = f.llm.bodies().await;
    let asked = bodies.last().unwrap().to_string();
    assert!(asked.contains("Q-7731 on Tuesday"), "{asked}");
    f.stop().await;
}
