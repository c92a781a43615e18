//! The gateway load driver (issue #17 "Performance"): a gateway in-process on loopback over a
//! temp state dir, against a mock OpenAI-compatible model server (a tiny axum handler, also on
//! loopback) that answers at once; `LOAD_SESSIONS` sessions pre-filled with `LOAD_PREFILL`
//! messages each, then driven concurrently, `LOAD_TURNS` turns each, through
//! `POST /v1/chat/completions`. Bounded in count and in time (`LOAD_TIMEOUT_SECS`).
//!
//! ```sh
//! LOAD_ENGINE=lossless cargo bench -p clawctx-gateway --bench load
//! LOAD_ENGINE=legacy LOAD_SESSIONS=5 LOAD_TURNS=10 LOAD_PREFILL=100 cargo bench -p clawctx-gateway --bench load
//! ```
//!
//! The history is pre-filled by writing each session's transcript the way the gateway's session
//! store reads it (before the session's first turn), so `legacy` reads it as its context and
//! `lossless` bootstraps from it on the first turn. The model's context window is set large
//! (1,000,000 tokens) so that no compaction runs: this measures turns, not summaries.
//!
//! `LOAD_GATEWAYS=N` (default 1) runs N gateways, each with its own state dir and runtime, and
//! sends turn `t` of session `i` to gateway `(i + t) % N`, so every session is served by every
//! node. With `LOAD_PG=1` the lossless store is a PostgreSQL database all of them share (a fresh
//! one on the server of `CLAWCTX_TEST_PG_URL`, dropped afterwards): several gateways on one
//! store, as issue #19 measures them.
//!
//! ```sh
//! LOAD_ENGINE=lossless LOAD_PG=1 LOAD_GATEWAYS=2 LOAD_SESSIONS=20 LOAD_TURNS=50 cargo bench -p clawctx-gateway --bench load
//! ```
//!
//! `LOAD_THINK_MS` (default 0) is each session's mean pause between a reply and its next turn
//! (sessions start spread over one pause, and each pause is 0.5–1.5× the mean). At 0
//! the driver is a closed loop that saturates the machine, so by Little's law each turn waits
//! for the other sessions' turns (latency ≈ sessions / throughput); with a pause the sessions
//! offer a steady rate below capacity, as agents whose model takes time do, and the latency is
//! what one turn costs under that load.
//!
//! `LOAD_SUMMARY_MS=N` (issue #29 "replies never wait for summaries") makes compaction summarize
//! with the model, as `clawctx gateway` does with a configured one: the mock answers a summary
//! request (the summarizer's system prompt) after N ms, with the first tenth of its input.
//! `LOAD_WINDOW` (default 1,000,000) is the model's context window: set it small (8,000) for
//! compactions to run. It adds `turns_waiting_1s` (turns whose added latency was 1 s or more),
//! `summary_calls` and, on lossless, `stored_messages` (read after background maintenance has
//! settled: every acknowledged turn's two messages, nothing lost).
//!
//! ```sh
//! LOAD_ENGINE=lossless LOAD_SESSIONS=1 LOAD_TURNS=500 LOAD_PREFILL=0 LOAD_WINDOW=8000 LOAD_SUMMARY_MS=2000 cargo bench -p clawctx-gateway --bench load
//! ```
//!
//! Output: plain lines `FIGURE <name> <value>`. "Added latency" is the client-measured request
//! time minus the model server's own time for that request (from its request head arriving,
//! reading and parsing the body, to its answer; matched by the turn's unique prompt): loopback
//! HTTP both ways, the turn, the transcript writes, the engine's work. The mock model, the
//! driver and the gateway share the machine's cores.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

/// The allocator the `clawctx` binary ships with (see its `main.rs`), so the gateway is
/// measured as it runs: with the system allocator a third of a lossless turn's CPU went to
/// `malloc`/`free` and their arena locks.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::post;
use axum::Router;
use clawctx_engine::ContextEngineRegistry;
use clawctx_gateway::{Gateway, GatewayConfig, GatewayParts};
use clawctx_protocol::{AgentMessage, SelectionSource};
use clawctx_runtime::{select_backend, AgentRuntime};
use clawctx_transcript::SessionFile;
use serde_json::{json, Value};

fn env_num(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a whole number, got {v:?}")),
        Err(_) => default,
    }
}

/// The model server's own time, summed over its calls (nanoseconds), and the call count.
#[derive(Default)]
struct ModelTime {
    nanos: AtomicU64,
    calls: AtomicU64,
    /// Summary requests answered (`LOAD_SUMMARY_MS`), not counted in `nanos`/`calls`.
    summary_calls: AtomicU64,
    /// Each request's model time by its last user message (unique per session and turn), so a
    /// driver subtracts exactly its own model call even while others run.
    by_prompt: std::sync::Mutex<std::collections::HashMap<String, u64>>,
}

/// The text of the last user message in a chat completions request body.
fn last_user_text(body: &Value) -> Option<String> {
    let messages = body.get("messages")?.as_array()?;
    let m = messages.iter().rev().find(|m| m["role"] == "user")?;
    match &m["content"] {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => parts
            .iter()
            .find_map(|p| p["text"].as_str().map(str::to_owned)),
        _ => None,
    }
}

/// Whether a request is the summarizer's (its system prompt), not a chat turn.
fn is_summary_request(body: &Value) -> bool {
    body["messages"].as_array().is_some_and(|ms| {
        ms.iter().any(|m| {
            m["role"] == "system"
                && m["content"]
                    .as_str()
                    .is_some_and(|c| c.contains("handoff notes"))
        })
    })
}

/// A summary request's answer after `delay`: the first tenth of its last user message.
async fn summary_response(body: &Value, delay: Duration) -> axum::response::Response {
    tokio::time::sleep(delay).await;
    let source = last_user_text(body).unwrap_or_default();
    let words: Vec<&str> = source.split_whitespace().collect();
    let text = words[..words.len() / 10].join(" ");
    let reply = json!({
        "id": "chatcmpl-summary",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    });
    axum::response::Response::builder()
        .header("content-type", "application/json")
        .body(axum::body::Body::from(reply.to_string()))
        .expect("a JSON response")
}

async fn start_model(time: Arc<ModelTime>, summary_delay: Option<Duration>) -> String {
    // The model's own time starts when its request's head has arrived: reading and parsing the
    // body (the whole assembled context) is work the model server does, not the gateway.
    let handler = move |request: axum::extract::Request| {
        let time = time.clone();
        async move {
            let t0 = Instant::now();
            let bytes = axum::body::to_bytes(request.into_body(), usize::MAX)
                .await
                .unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            if let Some(delay) = summary_delay.filter(|_| is_summary_request(&body)) {
                time.summary_calls.fetch_add(1, Ordering::Relaxed);
                return summary_response(&body, delay).await;
            }
            let stream = body.get("stream").and_then(Value::as_bool) == Some(true);
            let usage = json!({"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110});
            let response = if stream {
                let chunks = [
                    json!({"choices": [{"index": 0, "delta": {"content": "ok, "}}]}),
                    json!({"choices": [{"index": 0, "delta": {"content": "noted."}}]}),
                    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage}),
                ];
                let mut sse: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
                sse.push_str("data: [DONE]\n\n");
                axum::response::Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(axum::body::Body::from(sse))
                    .expect("an SSE response")
            } else {
                let reply = json!({
                    "id": "chatcmpl-load",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok, noted."}, "finish_reason": "stop"}],
                    "usage": usage
                });
                axum::response::Response::builder()
                    .header("content-type", "application/json")
                    .body(axum::body::Body::from(reply.to_string()))
                    .expect("a JSON response")
            };
            let nanos = t0.elapsed().as_nanos() as u64;
            time.nanos.fetch_add(nanos, Ordering::Relaxed);
            time.calls.fetch_add(1, Ordering::Relaxed);
            if let (Some(prompt), Ok(mut map)) = (last_user_text(&body), time.by_prompt.lock()) {
                *map.entry(prompt).or_default() += nanos;
            }
            response
        }
    };
    let app = Router::new().route("/v1/chat/completions", post(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the mock model on loopback");
    let url = format!("http://{}", listener.local_addr().expect("mock address"));
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

fn vm_hwm_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    // `cargo bench` passes `--bench`; a bench filter argument selects nothing here.
    let engine: &'static str = match std::env::var("LOAD_ENGINE").as_deref() {
        Ok("lossless") => "lossless",
        Ok("legacy") | Err(_) => "legacy",
        Ok(other) => panic!("LOAD_ENGINE must be legacy or lossless, got {other:?}"),
    };
    let sessions = env_num("LOAD_SESSIONS", 50);
    let turns = env_num("LOAD_TURNS", 200);
    let prefill = env_num("LOAD_PREFILL", 1000);
    let timeout = Duration::from_secs(env_num("LOAD_TIMEOUT_SECS", 600));
    let workers = env_num("LOAD_WORKERS", 2) as usize;
    let think = Duration::from_millis(env_num("LOAD_THINK_MS", 0));
    let nodes = env_num("LOAD_GATEWAYS", 1).max(1) as usize;
    let window = env_num("LOAD_WINDOW", 1_000_000);
    let summary_delay = std::env::var("LOAD_SUMMARY_MS")
        .is_ok()
        .then(|| Duration::from_millis(env_num("LOAD_SUMMARY_MS", 0)));
    let pg = std::env::var("LOAD_PG").is_ok_and(|v| v == "1");
    assert!(
        !pg || engine == "lossless",
        "LOAD_PG=1 needs LOAD_ENGINE=lossless"
    );
    // A fresh database on the test server, created before the runtime starts (it blocks).
    let database = pg.then(|| {
        clawctx_test_support::pg::test_database("load")
            .expect("LOAD_PG=1 needs CLAWCTX_TEST_PG_URL (scripts/pg-throwaway start DIR)")
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers.max(1))
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let db_url = database.as_ref().map(|d| d.url.clone());
    rt.block_on(run(
        engine,
        sessions,
        turns,
        prefill,
        timeout,
        think,
        nodes,
        db_url,
        Summaries {
            window,
            delay: summary_delay,
        },
    ));
    drop(rt);
    drop(database);
}

/// The model's window and, with `LOAD_SUMMARY_MS`, how long a summary takes.
#[derive(Clone, Copy)]
struct Summaries {
    window: u64,
    delay: Option<Duration>,
}

/// One gateway of the run.
struct Node {
    runtime: AgentRuntime,
    url: String,
    stop: tokio::sync::oneshot::Sender<()>,
    serve: tokio::task::JoinHandle<clawctx_gateway::Result<()>>,
    _state: tempfile::TempDir,
}

#[allow(clippy::too_many_arguments)]
async fn run(
    engine: &'static str,
    sessions: u64,
    turns: u64,
    prefill: u64,
    timeout: Duration,
    think: Duration,
    nodes: usize,
    db_url: Option<String>,
    summaries: Summaries,
) {
    println!(
        "load: engine {engine}, {sessions} sessions x {turns} turns, {prefill} messages pre-filled, think {} ms, timeout {} s, {nodes} gateway(s), store {}",
        think.as_millis(),
        timeout.as_secs(),
        if db_url.is_some() { "PostgreSQL" } else { "SQLite" }
    );
    let model_time = Arc::new(ModelTime::default());
    let model_url = start_model(model_time.clone(), summaries.delay).await;
    // A summary call must not time out before the mock answers it.
    let model_timeout_ms = 20_000 + summaries.delay.map_or(0, |d| d.as_millis() as u64 * 2);
    let mut config = json!({
        "models": {"providers": {"mock": {
            "api": "openai-completions",
            "baseUrl": format!("{model_url}/v1"),
            "models": [{"id": "test-model", "contextWindow": summaries.window, "maxTokens": 1024}],
            "maxRetries": 0, "timeoutMs": model_timeout_ms
        }}},
        "agents": {"defaults": {"model": {"primary": "mock/test-model"}}},
        "plugins": {"slots": {"contextEngine": engine}}
    });
    if let Some(url) = &db_url {
        config["plugins"]["entries"] = json!({"lossless": {"config": {"database": url}}});
    }
    if summaries.delay.is_some() {
        // The mock's summary (the first tenth of its input) keeps few of the source's salient
        // terms: accept it, so every compaction waits for the model (no extractive fallback).
        config["plugins"]["entries"]["lossless"]["config"]["minSalientRetention"] = json!(0);
    }
    let config = Arc::new(config);
    let keys: Vec<String> = (0..sessions)
        .map(|i| format!("agent:main:load-{i}"))
        .collect();
    let t_fill = Instant::now();
    let mut gateways = Vec::with_capacity(nodes);
    for _ in 0..nodes {
        gateways.push(start_node(engine, &config, &keys, prefill, summaries.delay.is_some()).await);
    }
    println!(
        "FIGURE prefill_seconds {:.2}",
        t_fill.elapsed().as_secs_f64()
    );
    let urls: Vec<String> = gateways.iter().map(|n| n.url.clone()).collect();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(sessions as usize + 8)
        .build()
        .expect("an HTTP client");

    let deadline = Instant::now() + timeout;
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for (i, key) in keys.clone().into_iter().enumerate() {
        let http = http.clone();
        let urls = urls.clone();
        let model_time = model_time.clone();
        tasks.push(tokio::spawn(async move {
            // Paced sessions start spread over one pause and pause 0.5–1.5× `think` (a fixed
            // pseudo-random sequence per session), so they do not arrive in lockstep waves.
            let mut rng = 0x9E37_79B9_7F4A_7C15_u64 ^ (i as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            let mut jitter = move || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                0.5 + (rng >> 11) as f64 / (1u64 << 53) as f64
            };
            if !think.is_zero() {
                tokio::time::sleep(think.mul_f64(i as f64 / sessions as f64)).await;
            }
            let mut lat = Vec::with_capacity(turns as usize);
            let mut added = Vec::with_capacity(turns as usize);
            let mut errors: Vec<String> = Vec::new();
            for t in 0..turns {
                if Instant::now() >= deadline {
                    break;
                }
                if t > 0 && !think.is_zero() {
                    tokio::time::sleep(think.mul_f64(jitter())).await;
                }
                let prompt = format!("{key} turn {t}: where did order {} go?", 1000 + t);
                let body = json!({"model": "mock/test-model", "messages": [{"role": "user", "content": prompt}]});
                let start = Instant::now();
                let url = &urls[(i + t as usize) % urls.len()];
                let r = http.post(url).header("x-clawctx-session", &key).json(&body).send().await;
                let ok = match r {
                    Ok(r) if r.status().is_success() => match r.json::<Value>().await {
                        Ok(v) if v["choices"][0]["message"]["content"].is_string() => Ok(()),
                        Ok(v) => Err(format!("unexpected body {v}")),
                        Err(e) => Err(format!("body: {e}")),
                    },
                    Ok(r) => {
                        let status = r.status();
                        Err(format!("{status}: {}", r.text().await.unwrap_or_default()))
                    }
                    Err(e) => Err(format!("request: {e}")),
                };
                let elapsed = start.elapsed().as_secs_f64() * 1000.0;
                // This request's own model time (its prompt is unique).
                let model_ns = model_time.by_prompt.lock().ok().and_then(|mut m| m.remove(&prompt)).unwrap_or(0);
                let model_ms = model_ns as f64 / 1e6;
                match ok {
                    Ok(()) => {
                        lat.push(elapsed);
                        added.push((elapsed - model_ms).max(0.0));
                    }
                    Err(e) => errors.push(e),
                }
            }
            (lat, added, errors)
        }));
    }
    let mut lat = Vec::new();
    let mut added = Vec::new();
    let mut errors = Vec::new();
    for t in tasks {
        let (l, a, e) = t.await.expect("a session driver");
        lat.extend(l);
        added.extend(a);
        errors.extend(e);
    }
    let wall = t0.elapsed().as_secs_f64();
    // Background maintenance settles (the debt is paid) before the store is counted.
    let mut stored_messages = None;
    if summaries.delay.is_some() {
        for n in &gateways {
            n.runtime.wait_for_maintenance().await;
        }
        if let Some(recall) = gateways
            .first()
            .and_then(|n| clawctx_lossless::Recall::of(n.runtime.engine().as_ref()))
        {
            let convs = recall
                .conversations()
                .await
                .expect("the lossless conversations");
            stored_messages = Some(convs.iter().map(|c| c.msg_count).sum::<i64>());
        }
    }
    let mut runtimes = Vec::new();
    for n in gateways {
        let _ = n.stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(60), n.serve).await;
        runtimes.push((n.runtime, n._state));
    }

    lat.sort_by(f64::total_cmp);
    added.sort_by(f64::total_cmp);
    let done = lat.len() as u64;
    let planned = sessions * turns;
    let calls = model_time.calls.load(Ordering::Relaxed);
    let model_mean_us = if calls > 0 {
        model_time.nanos.load(Ordering::Relaxed) as f64 / calls as f64 / 1000.0
    } else {
        0.0
    };
    for e in errors.iter().take(5) {
        println!("error: {e}");
    }
    println!("FIGURE engine {engine}");
    println!("FIGURE gateways {nodes}");
    println!(
        "FIGURE store {}",
        if db_url.is_some() {
            "postgres"
        } else {
            "sqlite"
        }
    );
    println!("FIGURE sessions {sessions}");
    println!("FIGURE turns_per_session {turns}");
    println!("FIGURE prefill_messages {prefill}");
    println!("FIGURE think_ms {}", think.as_millis());
    println!("FIGURE turns_planned {planned}");
    println!("FIGURE turns_ok {done}");
    println!(
        "FIGURE turns_not_run {}",
        planned - done - errors.len() as u64
    );
    println!("FIGURE errors {}", errors.len());
    println!("FIGURE wall_seconds {wall:.2}");
    println!("FIGURE turns_per_second {:.1}", done as f64 / wall);
    println!("FIGURE request_ms_p50 {:.2}", percentile(&lat, 50.0));
    println!("FIGURE request_ms_p99 {:.2}", percentile(&lat, 99.0));
    println!(
        "FIGURE added_latency_ms_p50 {:.2}",
        percentile(&added, 50.0)
    );
    println!(
        "FIGURE added_latency_ms_p99 {:.2}",
        percentile(&added, 99.0)
    );
    println!(
        "FIGURE added_latency_ms_max {:.2}",
        added.last().copied().unwrap_or(f64::NAN)
    );
    println!(
        "FIGURE turns_waiting_1s {}",
        added.iter().filter(|ms| **ms >= 1000.0).count()
    );
    if let Some(delay) = summaries.delay {
        println!("FIGURE window_tokens {}", summaries.window);
        println!("FIGURE summary_ms {}", delay.as_millis());
        println!(
            "FIGURE summary_calls {}",
            model_time.summary_calls.load(Ordering::Relaxed)
        );
    }
    if let Some(n) = stored_messages {
        println!("FIGURE stored_messages {n}");
    }
    println!("FIGURE model_calls {calls}");
    println!("FIGURE model_time_us_mean {model_mean_us:.1}");
    println!("FIGURE peak_rss_mb {:.1}", vm_hwm_kb() as f64 / 1024.0);
    for (runtime, state) in runtimes {
        runtime.shutdown().await;
        drop(state);
    }
}

/// Starts one gateway: its state dir, engine, runtime and pre-filled transcripts.
async fn start_node(
    engine: &'static str,
    config: &Arc<Value>,
    keys: &[String],
    prefill: u64,
    llm_summaries: bool,
) -> Node {
    let state = tempfile::tempdir().expect("a temp state dir");
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    clawctx_lossless::register(&registry).expect("register lossless");
    let agent_dir = state.path().join("agents").join("main");
    let backend = select_backend(config, None, &|_| None).expect("the mock backend");
    // Summaries by the model (the mock), as `clawctx gateway` sets up a configured model.
    let summarizer = llm_summaries.then(|| {
        let h = clawctx_runtime::setup::host_summarizer(
            config,
            Some(&backend),
            &|_| None,
            state.path(),
        )
        .expect("the model summarizer");
        registry.set_host_summarizer(h.llm.clone());
        h.for_runtime()
    });
    let resolved = registry
        .resolve(
            Some(config.clone()),
            Some(agent_dir.clone()),
            Some(agent_dir.clone()),
        )
        .await
        .expect("resolve the engine");
    assert_eq!(
        resolved.effective_id, engine,
        "the engine under load must serve"
    );
    let mut builder = AgentRuntime::builder(state.path(), resolved.engine.clone(), backend)
        .selection(resolved.effective_id.clone(), SelectionSource::Configured)
        .workspace_dir(agent_dir.to_string_lossy().into_owned());
    if let Some(s) = summarizer {
        builder = builder.summarizer(s);
    }
    let runtime = builder.build();
    // Pre-fill: each session's transcript, before its first turn (the same messages on every
    // node, so their identities are the same in a shared store).
    for (i, key) in keys.iter().enumerate() {
        let s = runtime.session(key).expect("resolve a session");
        let mut file = if s.transcript_path.exists() {
            SessionFile::open(&s.transcript_path).expect("open the transcript")
        } else {
            SessionFile::create(&s.transcript_path, &s.entry.session_id, "/")
                .expect("create the transcript")
        };
        for m in 0..prefill {
            let text = format!(
                "session {i} message {m}: the shipment for order {} left the warehouse in bay {} at {}:{:02}",
                1000 + m * 7 % 9973,
                m % 17,
                8 + m % 10,
                m % 60
            );
            let msg = if m % 2 == 0 {
                AgentMessage::user(text)
            } else {
                AgentMessage::assistant(text)
            };
            file.append_message(msg).expect("append a pre-fill message");
        }
    }
    let gateway = Gateway::new(GatewayParts {
        runtime: runtime.clone(),
        registry: Some(registry),
        host_config: config.clone(),
        model: "mock/test-model".into(),
        config: GatewayConfig::loopback(0),
    });
    let listener = gateway.bind().await.expect("bind the gateway on loopback");
    let url = format!(
        "http://{}/v1/chat/completions",
        listener.local_addr().expect("gateway address")
    );
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serve = tokio::spawn(gateway.serve(listener, async move {
        let _ = stop_rx.await;
    }));
    Node {
        runtime,
        url,
        stop,
        serve,
        _state: state,
    }
}
