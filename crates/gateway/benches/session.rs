//! One session on the user's path (issue #40 "Figures"): what the provider's prompt cache and
//! the model's context look like when an OpenAI client talks to the real gateway, turn after
//! turn, while compaction summarizes with a model of its own. The other benches time engines
//! or the gateway under load; this one asks what the user gets: how much of each prompt a
//! provider would serve from its cache, how often the front of the prompt moves, which turns
//! lose history with no summary in its place, and which replies waited.
//!
//! ```sh
//! SESSION_ENGINE=lossless SESSION_WINDOW=8000 SESSION_SUMMARIZER=useless \
//!   cargo bench -p clawctx-gateway --bench session
//! scripts/session-bench      # the whole matrix, as a markdown table
//! ```
//!
//! One run: a gateway in process on loopback over a temporary state dir (as the `load` bench
//! starts it, the runtime built by `clawctx_runtime::setup::runtime_from_config` as `clawctx
//! gateway` builds it), whose chat model is `clawctx_test_support::mock_model::MockModel` (an
//! OpenAI-compatible server on loopback that records every request and answers a short reply)
//! with a context window of `SESSION_WINDOW` tokens, and whose summary model
//! (`agents.defaults.compaction.model`) is a second mock on loopback that answers after
//! `SESSION_SUMMARY_DELAY_MS`, either `good` (the first sentence of each message it was sent,
//! in its words, at most half the size asked for) or `useless` (a fixed sentence that repeats
//! none of the source's words). One session of `SESSION_TURNS` turns goes through
//! `POST /v1/chat/completions` as an OpenAI client sends it: the whole history each time, the
//! session in the `x-clawctx-session` header, each user message 20 to 120 words drawn from a
//! mixed vocabulary by a fixed-seed generator (so runs compare), `SESSION_PAUSE_MS` apart.
//!
//! Figures, one per line as `FIGURE <name> <value>` (`scripts/session-bench` parses them):
//!
//! - `cached_share`, `breaks_per_100`: OpenAI's documented caching rule applied to the requests
//!   the chat model received (`clawctx_model::prefix_cache`, through the mock; the same totals
//!   and the same definition of a break as `clawctx bench`: a request sharing less than half of
//!   the previous one), over the requests after the first.
//! - `losing_turns`: turns whose trace (`/v1/dashboard/trace/turn`) lists a raw stored message
//!   left out of the context, or warns "no summary reached the model" (each is printed with
//!   the trace's words). `left_out_unknown` counts the turns whose trace could not tell what
//!   was left out (not counted as losing). A useless summary in place of the history is a
//!   summary to the trace: `model_summary_turns` is what shows it.
//! - `slow_replies` (≥ 1 s, client-side, end to end), `reply_ms_p50`, `reply_ms_max`.
//! - `compactions` (`/v1/sessions`), `summary_requests` (what the summary model was asked),
//!   `summarizer_llm_ok` / `summarizer_llm_failed` / `summarizer_extractive` (`/metrics`: an
//!   "ok" LLM call is an answer, which the engine may still refuse), and
//!   `model_summary_turns`: chat requests that carried an answer of the summary model.
//!
//! `SESSION_SHOW_TURNS=17,36` prints those turns' traces in full (what was sent and left out).
//!
//! `SESSION_PG_URL` (an admin URL, e.g. `CLAWCTX_TEST_PG_URL`): the lossless store is a fresh
//! PostgreSQL database on that server (dropped afterwards); otherwise SQLite in the state dir.
//! `legacy` has no store but its transcripts (`FIGURE store transcript`). Nothing here is
//! asserted: the figures are what the gateway did.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

/// The allocator the `clawctx` binary ships with, as in the `load` bench.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clawctx_engine::ContextEngineRegistry;
use clawctx_gateway::{Gateway, GatewayConfig, GatewayParts};
use clawctx_runtime::setup::{runtime_from_config, SetupOptions};
use clawctx_test_support::messages::Rng;
use clawctx_test_support::mock_model::MockModel;
use serde_json::{json, Value};

/// The session every turn belongs to.
const KEY: &str = "agent:main:session-bench";
/// The seed of the messages' generator: every run sends the same messages.
const SEED: u64 = 40;
/// The `useless` summary model's answer: none of its words is in the vocabulary.
const USELESS: &str = "I am unable to summarize this conversation at this time.";
/// Replies at least this slow are counted.
const SLOW_MS: f64 = 1000.0;

/// Words of the user messages: everyday words, technical terms, identifiers and numbers, names
/// (the kinds of term the summarizers and the salience check treat differently). None of
/// [`USELESS`]'s words is among them.
const VOCABULARY: &str = "\
    the a and of in on for with from after before while because then when we they it was is \
    were should could still again maybe quickly carefully yesterday tomorrow morning evening \
    week report meeting plan draft review change issue result reason question budget invoice \
    order shipment warehouse customer vendor contract schedule deadline garden river museum \
    kitchen recipe tomato basil harbor crane pallet forklift ledger kernel thread mutex socket \
    buffer latency cache replica shard index query deploy rollback migration parser config \
    build branch commit merge pipeline cluster node container endpoint token retry backoff \
    failed passed broke fixed moved renamed approved src/lib.rs crates/gateway/src/openai.rs \
    parse_config() run_turn() OrderStatus MAX_RETRIES --release v2.4.1 8080 2023-05-08 14:30 \
    #4127 PR-311 3.5% $1,200 Alice Bruno Chen Dmitri Elena Farah Berlin Lisbon Osaka Nairobi \
    Acme Globex";

fn env_num(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a whole number, got {v:?}")),
        Err(_) => default,
    }
}

fn env_choice(name: &str, choices: &[&'static str]) -> &'static str {
    match std::env::var(name) {
        Err(_) => choices[0],
        Ok(v) => choices
            .iter()
            .find(|c| **c == v.trim())
            .copied()
            .unwrap_or_else(|| panic!("{name} must be one of {choices:?}, got {v:?}")),
    }
}

/// The run's parameters (see the module docs).
struct Params {
    engine: &'static str,
    window: u64,
    summarizer: &'static str,
    turns: u64,
    pause: Duration,
    summary_delay: Duration,
    pg_url: Option<String>,
}

impl Params {
    fn from_env() -> Self {
        Params {
            engine: env_choice("SESSION_ENGINE", &["lossless", "legacy"]),
            window: env_num("SESSION_WINDOW", 8000),
            summarizer: env_choice("SESSION_SUMMARIZER", &["good", "useless"]),
            turns: env_num("SESSION_TURNS", 120),
            pause: Duration::from_millis(env_num("SESSION_PAUSE_MS", 300)),
            summary_delay: Duration::from_millis(env_num("SESSION_SUMMARY_DELAY_MS", 2000)),
            pg_url: std::env::var("SESSION_PG_URL")
                .ok()
                .filter(|u| !u.trim().is_empty()),
        }
    }
}

/// A user message of 20 to 120 words in sentences of 5 to 14 words.
fn user_message(rng: &mut Rng) -> String {
    let words: Vec<&str> = VOCABULARY.split_whitespace().collect();
    let mut left = rng.range(20, 121);
    let mut out = String::new();
    while left > 0 {
        let mut n = rng.range(5, 15).min(left);
        if left - n < 5 {
            n = left;
        }
        left -= n;
        for i in 0..n {
            let word = words[rng.next() as usize % words.len()];
            if !out.is_empty() {
                out.push(' ');
            }
            if i == 0 {
                let mut c = word.chars();
                out.extend(c.next().map(|f| f.to_ascii_uppercase()));
                out.push_str(c.as_str());
            } else {
                out.push_str(word);
            }
        }
        out.push(if rng.next() % 5 == 0 { '?' } else { '.' });
    }
    out
}

/// The text of a chat message (a string, or its text parts).
fn message_text(m: &Value) -> String {
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// A text's first sentence (up to its first `.`, `?` or `!` followed by a space).
fn first_sentence(text: &str) -> &str {
    let b = text.as_bytes();
    (0..b.len().saturating_sub(1))
        .find(|&i| matches!(b[i], b'.' | b'?' | b'!') && b[i + 1] == b' ')
        .map_or(text, |i| &text[..=i])
}

/// The `good` summary of a summary request: a bullet with the first sentence of each message
/// (or of each line of the summaries a condensed request is sent), in order, its speaker kept,
/// stopping at half the `max_tokens` asked for.
fn good_summary(body: &Value) -> String {
    let prompt = body["messages"]
        .as_array()
        .and_then(|ms| ms.iter().rev().find(|m| m["role"] == "user"))
        .map(message_text)
        .unwrap_or_default();
    let source = prompt
        .split_once("<conversation>")
        .and_then(|(_, rest)| rest.split_once("</conversation>"))
        .map_or("", |(c, _)| c);
    let room = body["max_tokens"].as_u64().unwrap_or(1024) / 2;
    let (mut out, mut used) = (String::new(), 0);
    for line in source.lines().map(str::trim).filter(|l| !l.is_empty()) {
        // A condensed request heads each summary with its time span, `[from - to]`.
        if line.starts_with('[') && line.ends_with(']') {
            continue;
        }
        let line = line.trim_start_matches("- ");
        let bullet = match line.strip_prefix('[').and_then(|l| l.split_once("]: ")) {
            Some((who, text)) => format!("- {who}: {}\n", first_sentence(text)),
            None => format!("- {}\n", first_sentence(line)),
        };
        let tokens = clawctx_tokens::text_tokens(&bullet);
        if used + tokens > room {
            break;
        }
        used += tokens;
        out.push_str(&bullet);
    }
    out
}

/// Starts the summary model on loopback: every request waits `delay`, then gets the `good` or
/// the `useless` answer, which is kept in `answers`. Answers its base URL.
async fn start_summary_model(
    kind: &'static str,
    delay: Duration,
    answers: Arc<Mutex<Vec<String>>>,
) -> String {
    let handler = move |axum::Json(body): axum::Json<Value>| {
        let answers = answers.clone();
        async move {
            tokio::time::sleep(delay).await;
            let text = match kind {
                "good" => good_summary(&body),
                _ => USELESS.to_owned(),
            };
            answers.lock().unwrap().push(text.clone());
            axum::Json(json!({
                "id": "chatcmpl-summary",
                "object": "chat.completion",
                "created": 0,
                "model": "summary-model",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}
            }))
        }
    };
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the summary model on loopback");
    let url = format!("http://{}/v1", listener.local_addr().expect("its address"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The value of the sample `name` (labels included) in a Prometheus exposition.
fn sample(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

fn main() {
    let p = Params::from_env();
    // The database is made before the runtime starts (it blocks) and dropped after it ends.
    let database = p
        .pg_url
        .as_deref()
        .filter(|_| p.engine == "lossless")
        .map(|url| clawctx_test_support::pg::test_database_at(url, "session"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(run(&p, database.as_ref().map(|d| d.url.clone())));
    drop(rt);
    drop(database);
}

async fn run(p: &Params, db_url: Option<String>) {
    let store = match (p.engine, &db_url) {
        ("legacy", _) => "transcript",
        (_, Some(_)) => "postgres",
        (_, None) => "sqlite",
    };
    println!(
        "session: engine {}, window {}, summarizer {} ({} ms), {} turns {} ms apart, store {store}",
        p.engine,
        p.window,
        p.summarizer,
        p.summary_delay.as_millis(),
        p.turns,
        p.pause.as_millis()
    );
    let chat = MockModel::start().await;
    let answers = Arc::new(Mutex::new(Vec::new()));
    let summary_url = start_summary_model(p.summarizer, p.summary_delay, answers.clone()).await;
    let summary_timeout_ms = 30_000 + 2 * p.summary_delay.as_millis() as u64;
    let mut config = json!({
        "models": {"providers": {
            "chat": {
                "api": "openai-completions",
                "baseUrl": chat.base_url,
                "models": [{"id": "chat-model", "contextWindow": p.window, "maxTokens": 1024}],
                "maxRetries": 0, "timeoutMs": 30000
            },
            "summary": {
                "api": "openai-completions",
                "baseUrl": summary_url,
                "models": [{"id": "summary-model", "contextWindow": 128000, "maxTokens": 4096}],
                "maxRetries": 0, "timeoutMs": summary_timeout_ms
            }
        }},
        "agents": {"defaults": {
            "model": {"primary": "chat/chat-model"},
            "compaction": {"model": "summary/summary-model"}
        }},
        "plugins": {"slots": {"contextEngine": p.engine}}
    });
    if let Some(url) = &db_url {
        config["plugins"]["entries"] = json!({"lossless": {"config": {"database": url}}});
    }
    let config = Arc::new(config);

    // The runtime as `clawctx gateway` builds it: the summary model serves the runtime's
    // compaction (legacy) and the engines the registry builds (lossless).
    let state = tempfile::tempdir().expect("a temp state dir");
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    clawctx_lossless::register(&registry).expect("register lossless");
    let runtime = runtime_from_config(SetupOptions {
        config: config.clone(),
        state_dir: state.path().to_path_buf(),
        registry: registry.clone(),
        model: None,
        env: &|_| None,
        agent_id: "main".into(),
        hooks: None,
        tools: Vec::new(),
        model_optional: false,
    })
    .await
    .expect("the runtime");
    assert_eq!(runtime.engine_id(), p.engine, "the engine asked for serves");
    let gateway = Gateway::new(GatewayParts {
        runtime: runtime.clone(),
        registry: Some(registry),
        host_config: config.clone(),
        model: "chat/chat-model".into(),
        config: GatewayConfig::loopback(0),
    });
    let listener = gateway.bind().await.expect("bind the gateway on loopback");
    let url = format!("http://{}", listener.local_addr().expect("gateway address"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serve = tokio::spawn(gateway.serve(listener, async move {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .expect("an HTTP client");

    // The session, as an OpenAI client sends it: the whole history every turn.
    let mut rng = Rng::new(SEED);
    let mut history: Vec<Value> = Vec::new();
    let mut latencies = Vec::new();
    let mut errors = Vec::new();
    let t0 = Instant::now();
    for t in 0..p.turns {
        if t > 0 {
            tokio::time::sleep(p.pause).await;
        }
        history.push(json!({"role": "user", "content": user_message(&mut rng)}));
        let body = json!({"model": "chat/chat-model", "messages": history});
        let start = Instant::now();
        let answer = async {
            let r = http
                .post(format!("{url}/v1/chat/completions"))
                .header("x-clawctx-session", KEY)
                .json(&body)
                .send()
                .await
                .map_err(|e| format!("request: {e}"))?;
            let status = r.status();
            let v: Value = r.json().await.map_err(|e| format!("body: {e}"))?;
            match v["choices"][0]["message"]["content"].as_str() {
                Some(reply) if status.is_success() => Ok(reply.to_owned()),
                _ => Err(format!("{status}: {v}")),
            }
        }
        .await;
        let ms = start.elapsed().as_secs_f64() * 1000.0;
        match answer {
            Ok(reply) => {
                latencies.push(ms);
                history.push(json!({"role": "assistant", "content": reply}));
            }
            Err(e) => {
                errors.push(format!("turn {}: {e}", t + 1));
                history.pop();
            }
        }
    }
    let wall = t0.elapsed().as_secs_f64();

    // Background maintenance settles, then the last turns' traces are written.
    runtime.wait_for_maintenance().await;
    let get = |path: String| {
        let (http, url) = (http.clone(), url.clone());
        async move {
            http.get(format!("{url}{path}"))
                .send()
                .await
                .expect("a GET to the gateway")
        }
    };
    let mut traced = 0;
    for _ in 0..600 {
        let page: Value = get(format!("/v1/dashboard/trace/turns?key={KEY}&limit=1"))
            .await
            .json()
            .await
            .unwrap_or(Value::Null);
        traced = page["total"].as_u64().unwrap_or(0);
        if traced >= latencies.len() as u64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // What each turn's context left out.
    let (mut losing, mut unknown) = (Vec::new(), 0);
    let mut summaries_sent: HashSet<String> = HashSet::new();
    let show: Vec<u64> = std::env::var("SESSION_SHOW_TURNS")
        .unwrap_or_default()
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    for n in 1..=traced {
        let view: Value = get(format!("/v1/dashboard/trace/turn?key={KEY}&turn={n}"))
            .await
            .json()
            .await
            .expect("a turn's trace");
        if view["source"] != "turn" {
            continue;
        }
        if show.contains(&n) {
            println!("trace of turn {n}: {view:#}");
        }
        // A turn whose trace cannot tell what was left out (its counts are estimates) is
        // counted apart; the first turn's cannot (the store has no conversation yet) and has
        // nothing to leave out.
        let left = &view["leftOut"];
        if left["known"] == false {
            unknown += u64::from(n > 1);
        } else {
            let raw_left_out: Vec<&Value> = left["listed"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|i| i["id"].as_str().is_some_and(|id| id.starts_with("msg_")))
                .collect();
            let no_summary = view["warnings"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .find(|w| w.starts_with("no summary reached the model"));
            if let Some(w) = no_summary {
                losing.push(format!("turn {n}: {w}"));
            } else if let Some(newest) = raw_left_out.first() {
                losing.push(format!(
                    "turn {n}: {} raw messages left out, the newest {} {}",
                    raw_left_out.len(),
                    newest["id"].as_str().unwrap_or("?"),
                    newest["reason"].as_str().unwrap_or_default()
                ));
            }
        }
        for part in view["parts"].as_array().into_iter().flatten() {
            if part["kind"] == "summary" {
                let id = part["id"].as_str().or(part["digest"].as_str());
                summaries_sent.extend(id.map(str::to_owned));
            }
        }
    }

    let sessions: Value = get("/v1/sessions".into())
        .await
        .json()
        .await
        .expect("/v1/sessions");
    let row = sessions["sessions"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["sessionKey"] == KEY))
        .cloned()
        .unwrap_or(Value::Null);
    let metrics = get("/metrics".into()).await.text().await.expect("/metrics");
    let calls = |s: &str| {
        sample(
            &metrics,
            &format!("clawctx_gateway_summarizer_calls_total{{summarizer=\"{s}\"}}"),
        )
    };
    let failures = |s: &str| {
        sample(
            &metrics,
            &format!("clawctx_gateway_summarizer_failures_total{{summarizer=\"{s}\"}}"),
        )
    };

    // The chat model's side: the cache under OpenAI's rule, and the requests that carried
    // an answer of the summary model.
    let cache = chat.totals();
    let requests = chat.requests();
    let answered: HashSet<String> = answers
        .lock()
        .unwrap()
        .iter()
        .map(|a| a.trim().to_owned())
        .filter(|a| !a.is_empty())
        .collect();
    let model_summary_turns = requests
        .iter()
        .filter(|r| {
            r["messages"].as_array().is_some_and(|ms| {
                ms.iter().any(|m| {
                    let text = message_text(m);
                    answered.iter().any(|a| text.contains(a.as_str()))
                })
            })
        })
        .count();

    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(60), serve).await;
    runtime.shutdown().await;
    drop(state);

    latencies.sort_by(f64::total_cmp);
    let slow = latencies.iter().filter(|ms| **ms >= SLOW_MS).count();
    for e in errors.iter().take(5) {
        println!("error: {e}");
    }
    println!(
        "{} of {} turns answered in {wall:.1} s; {} requests reached the chat model, {} the summary model",
        latencies.len(),
        p.turns,
        requests.len(),
        answers.lock().unwrap().len()
    );
    println!(
        "prompt cache (OpenAI rule): {:.1}% of {} prompt tokens after the first request, {} breaks",
        cache.cached_share() * 100.0,
        cache.prompt_tokens,
        cache.breaks
    );
    println!(
        "turns losing history with no summary in its place: {}; {unknown} traced turns could not tell",
        losing.len()
    );
    for line in &losing {
        println!("  {line}");
    }
    println!(
        "replies: p50 {:.0} ms, max {:.0} ms, {slow} took 1 s or more",
        percentile(&latencies, 50.0),
        latencies.last().copied().unwrap_or(f64::NAN)
    );
    println!("FIGURE engine {}", p.engine);
    println!("FIGURE window {}", p.window);
    println!("FIGURE summarizer {}", p.summarizer);
    println!("FIGURE store {store}");
    println!("FIGURE turns {}", p.turns);
    println!("FIGURE turns_ok {}", latencies.len());
    println!("FIGURE errors {}", errors.len());
    println!("FIGURE model_requests {}", requests.len());
    println!("FIGURE cached_share {:.3}", cache.cached_share());
    println!("FIGURE breaks_per_100 {:.1}", cache.breaks_per_100());
    println!("FIGURE losing_turns {}", losing.len());
    println!("FIGURE left_out_unknown {unknown}");
    println!("FIGURE slow_replies {slow}");
    println!("FIGURE reply_ms_p50 {:.0}", percentile(&latencies, 50.0));
    println!(
        "FIGURE reply_ms_max {:.0}",
        latencies.last().copied().unwrap_or(f64::NAN)
    );
    println!(
        "FIGURE compactions {}",
        row["compactions"].as_u64().unwrap_or(0)
    );
    println!("FIGURE summary_requests {}", answers.lock().unwrap().len());
    println!(
        "FIGURE summarizer_llm_ok {}",
        calls("llm") - failures("llm")
    );
    println!("FIGURE summarizer_llm_failed {}", failures("llm"));
    println!("FIGURE summarizer_extractive {}", calls("extractive"));
    println!("FIGURE summaries_sent {}", summaries_sent.len());
    println!("FIGURE model_summary_turns {model_summary_turns}");
    if let Some(n) = row["losslessMessages"].as_u64() {
        println!("FIGURE stored_messages {n}");
    }
}
