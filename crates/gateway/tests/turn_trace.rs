//! The per-turn trace (issue #31) over loopback: turns through `/v1/chat/completions` on the
//! lossless engine against the mock model of `clawctx_test_support::mock_model` (which reports
//! cached tokens as providers do), an engine-API `assemble` in a budget too small for the
//! frontier, then a new gateway on the same state dir reading turn N back through
//! `/v1/dashboard/trace/*`: its parts in order with references and tokens, the left-out items
//! with their reasons, warnings in words, the diff to turn N−1, the session's record, and why
//! the recalled block quotes each message. A second test holds the retention setting to its
//! word through the gateway; a third shows an open summarizer circuit breaker in a turn's
//! trace and on the engines page.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::time::Duration;

use clawctx_gateway::GatewayConfig;
use clawctx_runtime::setup::summarizer_breaker_path;
use clawctx_test_support::mock_model::MockModel;
use common::{serve, Serve, Served};
use serde_json::{json, Value};

const KEY: &str = "agent:main:trace1";

/// A served gateway and the trace routes' helpers.
struct Running(Served);

async fn start(state: &Path, model: &MockModel, tweak: impl FnOnce(&mut GatewayConfig)) -> Running {
    start_with(state, model, false, tweak).await
}

/// [`start`], with the host's LLM summarizer (the mock model, behind its persisted circuit
/// breaker) when `llm_summarizer`.
async fn start_with(
    state: &Path,
    model: &MockModel,
    llm_summarizer: bool,
    tweak: impl FnOnce(&mut GatewayConfig),
) -> Running {
    let config = json!({
        "models": {"providers": {"mock": {
            "api": "openai-completions",
            "baseUrl": model.base_url,
            // The prompt budget 1,744 (2,666 − 256 output − a quarter of the window reserved).
            "models": [{"id": "test-model", "contextWindow": 2666, "maxTokens": 256}],
            "maxRetries": 0, "timeoutMs": 20000
        }}},
        "agents": {"defaults": {"model": {"primary": "mock/test-model"}}},
        "plugins": {"slots": {"contextEngine": "lossless"}}
    });
    let mut settings = GatewayConfig::loopback(0);
    tweak(&mut settings);
    Running(
        serve(Serve {
            llm_summarizer,
            gateway: settings,
            ..Serve::new(config, state, "lossless")
        })
        .await,
    )
}

impl Running {
    async fn chat(&self, key: &str, prompt: &str) {
        let r = self
            .0
            .http
            .post(format!("{}/v1/chat/completions", self.0.url))
            .header("x-clawctx-session", key)
            .json(&json!({"messages": [{"role": "user", "content": prompt}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    }

    /// `POST /v1/engine/assemble` with `body`, which must succeed; its answer.
    async fn assemble(&self, body: Value) -> Value {
        let r = self
            .0
            .http
            .post(format!("{}/v1/engine/assemble", self.0.url))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.json().await.unwrap()
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let r = self
            .0
            .http
            .get(format!("{}{path}", self.0.url))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn ok(&self, path: &str) -> Value {
        let (status, body) = self.get(path).await;
        assert_eq!(status, 200, "{path}: {body}");
        body
    }

    /// Waits until `key` has `n` traced turns (traces are written after the answer).
    async fn wait_turns(&self, key: &str, n: u64) -> Value {
        for _ in 0..200 {
            let page = self
                .ok(&format!("/v1/dashboard/trace/turns?key={key}&limit=500"))
                .await;
            if page["total"].as_u64() == Some(n) {
                return page;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{key} never had {n} traced turns");
    }

    async fn stop(mut self) {
        self.0.stop().await.unwrap();
    }
}

fn prompt(t: usize) -> String {
    let words =
        "the deploy of service number {t} failed because the config parser rejected a value in \
                 section {t} so the team retried with a patched parser and wrote down what changed";
    // The first turn names a part no other turn does, for recall to find later.
    let planted = if t == 0 { " the zephyrine valve" } else { "" };
    format!(
        "turn {t}: {} {}{planted}",
        words.replace("{t}", &t.to_string()),
        words.replace("{t}", &t.to_string())
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_turn_is_read_back_after_a_restart_with_its_parts_reasons_and_diff() {
    let model = MockModel::start().await;
    let state = tempfile::tempdir().unwrap();
    let gw = start(state.path(), &model, |_| {}).await;
    const TURNS: u64 = 14;
    for t in 0..TURNS as usize {
        gw.chat(KEY, &prompt(t)).await;
        // A turn's compaction runs in the background after its reply: let it land before the
        // next turn assembles, so the turns' diffs show what it summarized.
        tokio::time::timeout(Duration::from_secs(60), gw.0.runtime.wait_for_maintenance())
            .await
            .expect("maintenance settles");
    }
    let page = gw.wait_turns(KEY, TURNS).await;
    assert_eq!(page["turns"][0]["turn"], TURNS, "newest first: {page}");
    assert_eq!(page["turns"][0]["source"], "turn");
    assert_eq!(page["turns"][0]["engine"], "lossless");
    // Cached tokens as the model reported them: from the second turn on, the prefix is shared.
    let cached: u64 = page["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["cachedTokens"].as_u64().unwrap())
        .sum();
    assert!(cached > 0, "{page}");
    let totals = model.totals();
    assert_eq!(
        cached, totals.cached_tokens,
        "what the model reported: {totals:?}"
    );

    // An engine-API assemble in a budget smaller than the frontier leaves items out.
    let last = gw.ok(&format!("/v1/dashboard/trace/turn?key={KEY}")).await;
    let sid = last["sessionId"].as_str().unwrap().to_owned();
    // The last turn's background compaction may still run: a trace whose frontier was read
    // after a compaction says its reasons are not known, so assemble again until one is.
    let mut n = TURNS;
    let mut assembled = Value::Null;
    for _ in 0..20 {
        assembled = gw
            .assemble(
                json!({"sessionId": sid, "sessionKey": KEY, "messages": [], "tokenBudget": 300}),
            )
            .await;
        n += 1;
        gw.wait_turns(KEY, n).await;
        let t = gw
            .ok(&format!("/v1/dashboard/trace/turn?key={KEY}&turn={n}"))
            .await;
        if t["leftOut"]["known"] == true {
            break;
        }
        assert!(t["warnings"].as_array().unwrap().iter().any(|w| w
            .as_str()
            .unwrap()
            .starts_with("left-out reasons not known")));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gw.stop().await;

    // A new gateway on the same state dir reads it all back.
    let gw = start(state.path(), &model, |_| {}).await;
    let turn = gw
        .ok(&format!("/v1/dashboard/trace/turn?key={KEY}&turn={n}"))
        .await;
    assert_eq!(turn["turn"], n);
    assert_eq!(turn["source"], "engine-api");
    assert_eq!(turn["tokenBudget"], 300);
    assert_eq!(turn["engine"]["id"], "lossless");
    assert!(
        turn["engine"]["reason"]
            .as_str()
            .unwrap()
            .contains("configured"),
        "{turn}"
    );
    // The parts are the answer's, in order, with the gateway's token counts.
    let parts = turn["parts"].as_array().unwrap();
    let messages = assembled["messages"].as_array().unwrap();
    let sent: Vec<&Value> = parts
        .iter()
        .filter(|p| p["kind"] != "systemPromptAddition")
        .collect();
    assert_eq!(sent.len(), messages.len(), "{turn}");
    for (i, p) in sent.iter().enumerate() {
        assert_eq!(p["index"], i, "{p}");
        // A part the store names is referred to by its id; a digest only where no id is.
        match p["id"].as_str() {
            Some(_) => assert!(p["digest"].is_null(), "{p}"),
            None => assert_eq!(p["digest"].as_str().unwrap().len(), 8, "{p}"),
        }
        let text = messages[i]["content"].to_string();
        match p["kind"].as_str().unwrap() {
            "summary" => {
                let id = p["id"].as_str().unwrap();
                assert!(text.contains(&format!("id=\\\"{id}\\\"")), "{id} in {text}");
                assert!(p["span"].is_array(), "a summary's span: {p}");
            }
            "raw" => assert!(
                p["id"].as_str().unwrap().starts_with("msg_"),
                "a raw message is referenced by its stored id: {p}"
            ),
            _ => {}
        }
    }
    let sum: u64 = parts.iter().map(|p| p["tokens"].as_u64().unwrap()).sum();
    assert_eq!(turn["gatewayTokens"], sum);
    assert_eq!(turn["engineEstimate"], assembled["estimatedTokens"]);
    // No whole message text is stored: nothing longer than an id or a reason.
    assert!(!turn.to_string().contains("patched parser"), "{turn}");
    // Left out, with a reason per item.
    let left = &turn["leftOut"];
    assert_eq!(left["known"], true, "{left}");
    assert!(left["items"].as_u64().unwrap() > 0, "{left}");
    let listed = left["listed"].as_array().unwrap();
    assert!(!listed.is_empty());
    for item in listed {
        let reason = item["reason"].as_str().unwrap();
        assert!(
            reason.starts_with("over budget") || reason.starts_with("left out with room"),
            "{item}"
        );
        let id = item["id"].as_str().unwrap();
        assert!(
            !sent.iter().any(|p| p["id"] == id),
            "{id} is both sent and left out"
        );
    }
    // Words: what the engine estimated matches the gateway's count of what it budgets (the
    // system prompt addition is outside the budget), and no summary was sent.
    let words: Vec<&str> = turn["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert!(
        !words.iter().any(|w| w.starts_with("the engine estimated")),
        "{words:?}"
    );
    if turn["totals"]["summaryCount"] == 0 {
        assert!(
            words
                .iter()
                .any(|w| w.starts_with("no summary reached the model")),
            "{words:?}"
        );
    }

    // A chat turn: model latency and usage, cached tokens included.
    let chat = gw
        .ok(&format!("/v1/dashboard/trace/turn?key={KEY}&turn={TURNS}"))
        .await;
    assert_eq!(chat["model"]["outcome"], "ok", "{chat}");
    assert!(chat["model"]["calls"].as_u64().unwrap() >= 1);
    assert!(chat["model"]["inputTokens"].as_u64().unwrap() > 0);
    // (Whether this one turn read the cache depends on whether a background compaction
    // rewrote the front just before it; the sum over the turns is checked against the model's
    // own report above.)
    assert!(chat["model"]["cachedTokens"].is_u64(), "{chat}");
    assert!(chat["model"]["latencyMs"].as_f64().unwrap() > 0.0);

    // The diff between the engine-API assembly (tight budget) and the turn before it (the
    // last chat turn, or an earlier try in the same budget).
    let diff = gw
        .ok(&format!("/v1/dashboard/trace/diff?key={KEY}&turn={n}"))
        .await;
    assert_eq!(diff["previous"], n - 1, "{diff}");
    if n == TURNS + 1 {
        // Against the last chat turn (a retry's diff to an earlier try may be empty).
        assert!(!diff["wentOut"].as_array().unwrap().is_empty(), "{diff}");
        assert!(
            diff["tokensAfter"].as_u64().unwrap() < diff["tokensBefore"].as_u64().unwrap(),
            "{diff}"
        );
        assert!(diff["words"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("went out")));
    }
    // And between two chat turns: the new turn's messages came in, and somewhere along the
    // session compaction made summaries (what was summarized).
    let mut summarized = 0;
    for t in 2..=TURNS {
        let d = gw
            .ok(&format!("/v1/dashboard/trace/diff?key={KEY}&turn={t}"))
            .await;
        assert_eq!(d["previous"], t - 1);
        assert!(!d["cameIn"].as_array().unwrap().is_empty(), "turn {t}: {d}");
        summarized += d["summarized"].as_array().unwrap().len();
    }
    assert!(
        summarized > 0,
        "compaction made summaries that reached the model"
    );

    // The session's record: the engine that served it and its last assembly's usage.
    let rec = gw
        .ok(&format!("/v1/dashboard/trace/session?key={KEY}"))
        .await;
    assert_eq!(rec["turns"], n);
    assert_eq!(rec["engines"][0]["engine"], "lossless");
    assert_eq!(rec["engines"][0]["turns"], n);
    assert_eq!(rec["engines"].as_array().unwrap().len(), 1);
    assert_eq!(rec["last"]["turn"], n);
    assert_eq!(rec["last"]["tokenBudget"], 300);

    // Paging, unknown turns, a missing key.
    let page = gw
        .ok(&format!("/v1/dashboard/trace/turns?key={KEY}&limit=5"))
        .await;
    assert_eq!(page["turns"].as_array().unwrap().len(), 5);
    let next = page["nextBefore"].as_u64().unwrap();
    let older = gw
        .ok(&format!(
            "/v1/dashboard/trace/turns?key={KEY}&limit=5&before={next}"
        ))
        .await;
    assert_eq!(older["turns"][0]["turn"], next - 1);
    assert_eq!(
        gw.get(&format!("/v1/dashboard/trace/turn?key={KEY}&turn=999"))
            .await
            .0,
        404
    );
    assert_eq!(gw.get("/v1/dashboard/trace/turn").await.0, 400);
    // Numbering goes on after the restart.
    gw.chat(KEY, &prompt(99)).await;
    gw.wait_turns(KEY, n + 1).await;

    // A prompt naming what only the first turn said: the trace tells why each message of the
    // recalled block is there (its score and the terms it matched).
    let assembled = gw
        .assemble(
            json!({"sessionId": sid, "sessionKey": KEY, "messages": [], "tokenBudget": 1000,
            "prompt": "Which one was the zephyrine valve?"}),
        )
        .await;
    assert!(
        assembled.to_string().contains("<recalled"),
        "the planted word is recalled: {assembled}"
    );
    gw.wait_turns(KEY, n + 2).await;
    let turn = gw
        .ok(&format!(
            "/v1/dashboard/trace/turn?key={KEY}&turn={}",
            n + 2
        ))
        .await;
    let block = turn["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["kind"] == "recalled")
        .unwrap_or_else(|| panic!("a recalled part: {turn}"));
    let hits = block["hits"].as_array().unwrap();
    let quotes = block["quotes"].as_array().unwrap();
    assert_eq!(hits.len(), quotes.len(), "{block}");
    assert!(hits.iter().all(|h| quotes.contains(&h["id"])), "{block}");
    assert!(hits[0]["score"].as_f64().unwrap() > 0.0, "{block}");
    assert!(hits[0]["matched"].as_u64().unwrap() >= 1, "{block}");
    // In the OpenAPI document.
    let doc = gw.ok("/openapi.json").await;
    for p in ["turns", "turn", "diff", "session"] {
        assert!(
            doc["paths"][format!("/v1/dashboard/trace/{p}")]["get"].is_object(),
            "{p}"
        );
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_keeps_the_newest_turns_of_a_session() {
    let model = MockModel::start().await;
    let state = tempfile::tempdir().unwrap();
    let gw = start(state.path(), &model, |c| c.trace.max_turns_per_session = 3).await;
    for t in 0..5 {
        gw.chat("agent:main:kept", &prompt(t)).await;
    }
    // The writer is behind the answers: wait for the fifth turn.
    let mut turns = Vec::new();
    for _ in 0..200 {
        let page = gw.ok("/v1/dashboard/trace/turns?key=agent:main:kept").await;
        turns = page["turns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["turn"].as_u64().unwrap())
            .collect();
        if turns.first() == Some(&5) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(turns, [5, 4, 3]);
    let (status, body) = gw
        .get("/v1/dashboard/trace/turn?key=agent:main:kept&turn=2")
        .await;
    assert_eq!(status, 404, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("retention"));
    // The diff of the oldest kept turn says there is none before it.
    let d = gw
        .ok("/v1/dashboard/trace/diff?key=agent:main:kept&turn=3")
        .await;
    assert_eq!(d["previous"], Value::Null);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_summarizer_breaker_is_said_in_the_turn_and_on_the_engines_page() {
    let model = MockModel::start().await;
    let state = tempfile::tempdir().unwrap();
    // A previous process's summarizer failed three times in a row: its breaker, persisted in
    // the state dir, is open.
    let breaker = clawctx_model::CircuitBreaker::with_state_file(
        3,
        Duration::from_secs(600),
        summarizer_breaker_path(state.path()),
    );
    for _ in 0..3 {
        breaker.on_failure("401 invalid api key");
    }
    let gw = start_with(state.path(), &model, true, |_| {}).await;
    let key = "agent:main:breaker";
    gw.chat(key, &prompt(1)).await;
    gw.wait_turns(key, 1).await;
    let turn = gw
        .ok(&format!("/v1/dashboard/trace/turn?key={key}&turn=1"))
        .await;
    let b = &turn["summarizerBreaker"];
    assert_eq!(b["state"], "open", "{turn}");
    assert_eq!(b["consecutiveFailures"], 3);
    assert!(b["lastError"].as_str().unwrap().contains("401"));
    assert!(
        turn["warnings"].as_array().unwrap().iter().any(|w| w
            .as_str()
            .unwrap()
            .starts_with("the summarizer's circuit breaker is open after 3 failures")),
        "{turn}"
    );
    let engines = gw.ok("/v1/dashboard/engines").await;
    assert_eq!(
        engines["summarizer"]["breaker"]["state"], "open",
        "{engines}"
    );

    // Closed again (a call went through): neither says anything.
    breaker.on_success();
    gw.chat(key, &prompt(2)).await;
    gw.wait_turns(key, 2).await;
    let turn = gw
        .ok(&format!("/v1/dashboard/trace/turn?key={key}&turn=2"))
        .await;
    assert!(turn["summarizerBreaker"].is_null(), "{turn}");
    let engines = gw.ok("/v1/dashboard/engines").await;
    assert!(engines["summarizer"]["breaker"].is_null(), "{engines}");
    gw.stop().await;
}
