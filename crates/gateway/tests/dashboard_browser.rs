//! The dashboard in a real browser: headless Chromium (the distribution's `chromium`, or
//! `$CLAWCTX_CHROMIUM`) driven by `playwright-core` from `tests/browser/dashboard.test.mjs`,
//! against a token-protected gateway on loopback over a temp state dir holding a 3,000-message
//! lossless session (a message planted early) and a 10,000-message one. The script logs in with
//! `/?token=`, checks the sessions page, that the session page's context bar shows exactly what
//! `POST /v1/engine/assemble` answered (its figures recomputed here with the one estimator),
//! opens DAG nodes down to the planted message (by mouse and keyboard), finds it with recall
//! search (highlighted, expanded, shown in the transcript and the DAG), follows hits inside a
//! folded tool call and tool result (the fold opens on the match), reloads to find the search,
//! the message and the DAG node named in the URL again (Back and Forward too), opens a
//! compaction pass's summaries and the context card's left-out summaries and raw messages,
//! watches a live turn compact, reads a quarantined plugin's reason from the persisted mirror,
//! checks phone width (the DAG's breadcrumb down a real and a synthetic ten-level path, the
//! layer table's labels, no horizontal scroll), pages a timeline of 250 (synthetic) compaction
//! passes 100 at a time, checks that no console error was logged, and measures the
//! 10,000-message view's load.
//! Screenshots go to `target/test-artifacts/dashboard/`.
//!
//! Without node or Chromium the test says so and passes, except with `CI=true`, where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::browser_support;
use crate::common;
use crate::dashboard_fixture;

use clawctx_protocol::AgentMessage;
use dashboard_fixture::{start, Setup, PLANTED, PLANTED_CALL_WORD, PLANTED_RESULT_WORD};
use serde_json::{json, Value};

const KEY: &str = "agent:main:browser-3k";
const BIG_KEY: &str = "agent:main:browser-10k";
const TOKEN: &str = "dashboard-test-token-8812";
const SECRET: &str = "sk-test-do-not-show-5531";

fn tokens_of(m: &Value) -> u64 {
    let m: AgentMessage = serde_json::from_value(m.clone()).unwrap();
    clawctx_tokens::message_tokens(&m)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_works_in_a_real_browser() {
    let Some((browser_dir, chromium)) = browser_support::ready("dashboard browser test") else {
        return;
    };

    let mut extra = dashboard_fixture::small_chunks();
    extra["models"]["providers"]["mock"]["apiKey"] = json!(SECRET);
    let mut f = start(Setup {
        engine: "lossless",
        token: Some(TOKEN),
        extra_config: extra,
    })
    .await;
    let t = f.lossless_session(KEY, 3000).await;
    eprintln!(
        "3,000-message session stored and compacted in {:.1} s",
        t.as_secs_f64()
    );
    let t = f.lossless_session(BIG_KEY, 10_000).await;
    eprintln!(
        "10,000-message session stored and compacted in {:.1} s",
        t.as_secs_f64()
    );
    f.mirror_quarantine(
        "vector-memory",
        "factory",
        "cannot reach the vector store at 127.0.0.1:6333 (connection refused)",
    );

    // The 10,000-message session's timeline: the newest passes by default, all on request.
    let big = |q: &str| {
        format!(
            "/v1/dashboard/session?key={}{q}",
            BIG_KEY.replace(':', "%3A")
        )
    };
    let newest = f.get_json(&big("")).await;
    let all = f.get_json(&big("&timelineLimit=0")).await;
    let (newest, all, total) = (
        newest["timeline"].as_array().unwrap().clone(),
        all["timeline"].as_array().unwrap().clone(),
        all["timelineTotal"].as_u64().unwrap() as usize,
    );
    assert_eq!(all.len(), total);
    assert!(total > 1, "the big session has several compaction passes");
    assert_eq!(newest.len(), total.min(100));
    assert_eq!(newest.last(), all.last(), "the newest pass is kept");
    // Each pass names what it wrote (the first 32 summaries; `summaries` counts them all).
    for e in &all {
        let ids = e["summaryIds"].as_array().unwrap();
        let n = e["summaries"].as_u64().unwrap() as usize;
        assert_eq!(ids.len(), n.min(32), "{e}");
        assert!(ids.iter().all(|i| i.as_str().unwrap().starts_with("sum_")));
    }
    let one = f.get_json(&big("&timelineLimit=1")).await;
    assert_eq!(one["timeline"].as_array().unwrap().len(), 1);
    assert_eq!(one["timeline"][0], *all.last().unwrap());

    // The planted messages' ids and sequences.
    let page = f
        .get_json(&format!(
            "/v1/dashboard/transcript?key={}&from=0&limit=15",
            KEY.replace(':', "%3A")
        ))
        .await;
    let stored = |word: &str| {
        page["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["message"].to_string().contains(word))
            .unwrap_or_else(|| panic!("the message planted with {word} is stored"))
            .clone()
    };
    let planted = stored(PLANTED);
    let (call, result) = (stored(PLANTED_CALL_WORD), stored(PLANTED_RESULT_WORD));
    assert_eq!(call["message"]["role"], "assistant");
    assert_eq!(result["message"]["role"], "toolResult");

    // What assemble answers now: the page must show exactly this.
    let stats = f
        .get_json(&format!(
            "/v1/dashboard/session?key={}",
            KEY.replace(':', "%3A")
        ))
        .await;
    let dag = f
        .get_json(&format!(
            "/v1/dashboard/dag?key={}",
            KEY.replace(':', "%3A")
        ))
        .await;
    let raw = dag["uncovered"]["tokens"].as_u64().unwrap();
    let budget = raw + (stats["stats"]["frontierTokens"].as_u64().unwrap() - raw) / 2;
    let sid = f.session_id(KEY);
    let assembled = f
        .post_json(
            "/v1/engine/assemble",
            &json!({"sessionId": sid, "sessionKey": KEY, "messages": [], "tokenBudget": budget}),
        )
        .await;
    let messages = assembled["messages"].as_array().unwrap();
    let is_summary = |m: &Value| {
        m["content"]
            .as_str()
            .is_some_and(|t| t.starts_with("<summary "))
    };
    let summary_tokens: u64 = messages
        .iter()
        .filter(|m| is_summary(m))
        .map(tokens_of)
        .sum();
    let raw_tokens: u64 = messages
        .iter()
        .filter(|m| !is_summary(m))
        .map(tokens_of)
        .sum();
    let addition = assembled["systemPromptAddition"]
        .as_str()
        .map_or(0, clawctx_tokens::text_tokens);
    let summary_count = messages.iter().filter(|m| is_summary(m)).count();
    assert!(
        summary_count > 0,
        "the 3,000-message session assembles with summaries"
    );
    let stored = f.get_json("/v1/dashboard/sessions").await;
    let stored_messages = stored["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["sessionKey"] == KEY)
        .unwrap()["messages"]
        .clone();

    // The live turn: a long prompt, so the engine compacts in its afterTurn.
    let live_prompt: String = (0..900)
        .map(|i| {
            format!(
                "note {i} about crate {} and dock {}; ",
                i * 37 % 1009,
                i % 23
            )
        })
        .collect();
    f.llm.push([common::text("Noted, all of it.")]);

    let expect = json!({
        "key": KEY, "bigKey": BIG_KEY, "storedMessages": stored_messages,
        "estimatedTokens": assembled["estimatedTokens"], "messageCount": messages.len(),
        "totalTokens": summary_tokens + raw_tokens + addition, "summaryTokens": summary_tokens, "rawTokens": raw_tokens,
        "summaryCount": summary_count, "budget": budget,
        // An assembly narrower than the raw tail: raw messages are left out too.
        "sessionId": sid, "narrowBudget": raw / 3,
        "plantedId": planted["id"], "plantedSeq": planted["seq"], "plantedWords": PLANTED,
        "toolCallId": call["id"], "toolCallWord": PLANTED_CALL_WORD,
        "toolResultId": result["id"], "toolResultWord": PLANTED_RESULT_WORD,
        "quarantinedEngine": "vector-memory", "quarantineReason": "cannot reach the vector store at 127.0.0.1:6333",
        "secret": SECRET, "livePrompt": live_prompt,
    });
    browser_support::run_script(
        browser_dir,
        "dashboard.test.mjs",
        vec![
            ("DASHBOARD_URL".into(), f.url.clone()),
            ("DASHBOARD_TOKEN".into(), TOKEN.into()),
            ("DASHBOARD_EXPECT".into(), expect.to_string()),
            ("CHROMIUM".into(), chromium.to_string_lossy().into_owned()),
            (
                "ARTIFACTS".into(),
                browser_support::artifacts("dashboard")
                    .to_string_lossy()
                    .into_owned(),
            ),
        ],
    )
    .await;
    f.stop().await;
}
