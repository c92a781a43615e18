//! The real OpenClaw (npm `openclaw` 2026.9.x on Node 24) on clawctx through the bridge, turn
//! after turn (issue #41, "Done means"), at a 40,000-token window and at a 6,000-token one
//! (where OpenClaw's own system prompt does not fit and its first `assemble` passes
//! `tokenBudget = 1`). Installed as `openclaw_real.rs` says; skipped with a note without it
//! (failing under `CI=true`).
//!
//! Per window: a mock model on loopback that logs every request (`tests/openclaw/
//! mock_model.py`, summary requests answered after 3 s: a slow summarizer), a `clawctx gateway`
//! (lossless, summarizing with that model) behind a recording proxy (`tests/openclaw/
//! engine_proxy.py`: every engine call the bridge makes, its body and when it ran), and a
//! scratch OpenClaw: one turn on its own engine, then the bridge installed and 30 turns: 3 with `openclaw agent --local` (a new
//! OpenClaw process each), 12 through `openclaw gateway run`, the OpenClaw gateway restarted,
//! 15 more. Then:
//! 1. no request to the model holds the turn's prompt twice (the bridge's transcript sync
//!    stored the turn in progress as history before OpenClaw's second `assemble`);
//! 2. no `ingestBatch` carries a message the bridge had sent before, in `ingestBatch` or
//!    `commitTurn` (the cursor lived in the engine object, which OpenClaw makes per turn: turn N
//!    posted 2N-1 messages), across processes and the restart, and the turn from before the
//!    bridge was sent;
//! 3. no summary request reached the model while a `commitTurn` ran, no `maintain` call waited
//!    for a summary (the gateway answers a deferred one at once), and no turn's output
//!    waited for a summary (one asked after the model's answer and answered before the
//!    output: at 6,000 the turn's degenerate budget made `commitTurn` summarize before
//!    `openclaw agent` returned), and at 6,000 the history was compacted (in `maintain`).
//!
//! It prints, per window, how long each turn's output came after the model's answer (the
//! figures in docs/openclaw-compat.md).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::openclaw_real::{
    clawctx_gateway, free_port, install_dir, reply_of, repo, stop, Out, Scratch,
};

/// Seconds the mock model takes to answer a summary request.
const SUMMARY_DELAY_S: &str = "3";
const TURNS: usize = 30;
const LOCAL_TURNS: usize = 3;

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Starts a helper script that prints `listening <port>` first; returns it and the port.
async fn listening(script: &str, args: &[&str], env: &[(&str, &str)]) -> (Child, u16) {
    let mut child = Command::new("python3");
    child
        .arg(repo(script))
        .args(args)
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        child.env(k, v);
    }
    let mut child = child.spawn().expect("python3");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .await
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("listening ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{script} said {line:?}"));
    (child, port)
}

/// One timed `openclaw agent` turn: its JSON, its output, and when its output came (the last
/// stdout bytes; the process may go on with OpenClaw's deferred maintenance before it exits).
async fn timed_turn(oc: &Scratch, local: bool, key: &str, prompt: &str) -> (Value, Out, f64) {
    let mut args = vec!["agent"];
    if local {
        args.push("--local");
    }
    args.extend(["--session-key", key, "-m", prompt, "--json"]);
    let mut child = oc.command("openclaw", &args).spawn().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let read_out = tokio::spawn(async move {
        let mut all = Vec::new();
        let mut last = now();
        let mut buf = [0u8; 8192];
        loop {
            match stdout.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    all.extend_from_slice(&buf[..n]);
                    last = now();
                }
            }
        }
        (all, last)
    });
    let read_err = tokio::spawn(async move {
        let mut all = Vec::new();
        let _ = stderr.read_to_end(&mut all).await;
        all
    });
    let status = tokio::time::timeout(Duration::from_secs(300), child.wait())
        .await
        .unwrap_or_else(|_| panic!("openclaw {args:?} ran over 5 minutes"))
        .unwrap();
    let (stdout, output_at) = read_out.await.unwrap();
    let stderr = read_err.await.unwrap();
    let out = Out {
        cmd: format!("openclaw {}", args.join(" ")),
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    };
    assert_eq!(out.code, 0, "{out}");
    let start = out.stdout.find('{').unwrap_or(0);
    let v: Value = serde_json::from_str(&out.stdout[start..])
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"));
    (v, out, output_at)
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// The user messages of a model request, OpenClaw's own context message left out.
fn user_texts(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| text_of(&m["content"]))
        .filter(|t| !t.starts_with("<<<BEGIN_OPENCLAW_INTERNAL"))
        .collect()
}

/// The marker word (`m<turn>w<window>`) of a model request's newest user message: its turn.
fn newest_marker(request: &Value) -> Option<String> {
    let users = user_texts(request);
    let newest = users.last()?;
    newest
        .split_whitespace()
        .find(|w| {
            let mut parts = w.strip_prefix('m').unwrap_or("").splitn(2, 'w');
            let (a, b) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            !a.is_empty()
                && !b.is_empty()
                && a.chars().all(|c| c.is_ascii_digit())
                && b.chars().all(|c| c.is_ascii_digit())
        })
        .map(str::to_owned)
}

/// The JSON lines of a log file.
fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A turn's prompt: its marker word first (`m<turn>w<window>`), then about 300 tokens.
fn prompt(t: usize, window: u64) -> String {
    format!(
        "m{t}w{window} fact {t}: {}",
        format!("the code word for day {t} is ORCHID-{t}-{window} and the gate is G{t}; ")
            .repeat(18)
    )
}

fn marker(t: usize, window: u64) -> String {
    format!("m{t}w{window}")
}

async fn openclaw_gateway(oc: &Scratch, port: u16) -> Child {
    let port_s = port.to_string();
    let child = oc
        .command(
            "openclaw",
            &["gateway", "run", "--port", &port_s, "--bind", "loopback"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ready = async {
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(180), ready)
        .await
        .expect("openclaw gateway listens");
    child
}

async fn stop_openclaw_gateway(mut child: Child) {
    stop_child(&mut child).await;
}

async fn stop_child(child: &mut Child) {
    if let Some(pid) = child.id() {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
    }
    let _ = tokio::time::timeout(Duration::from_secs(60), child.wait()).await;
    let _ = child.start_kill();
    let _ = child.wait().await;
}

/// The three checks at one window (see the module header).
async fn thirty_turns(window: u64) {
    let base = install_dir();
    let node_bin = base.join("node24/node_modules/.bin");
    let oc_bin = base.join("oc/node_modules/.bin");
    if !oc_bin.join("openclaw").exists() || !node_bin.join("node").exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "OpenClaw is not installed under {} (.ci/run installs node@24 and openclaw there)",
            base.display()
        );
        eprintln!(
            "skipped: OpenClaw is not installed under {} (run .ci/run's OpenClaw step)",
            base.display()
        );
        return;
    }
    let scratch_dir = tempfile::tempdir().unwrap();
    let model_log = scratch_dir.path().join("model.jsonl");
    let engine_log = scratch_dir.path().join("engine.jsonl");

    // The mock model, whose summaries take 3 s.
    let (mut mock, model_port) = listening(
        "crates/cli/tests/openclaw/mock_model.py",
        &[model_log.to_str().unwrap()],
        &[("MOCK_SUMMARY_DELAY_S", SUMMARY_DELAY_S)],
    )
    .await;

    // The clawctx gateway: lossless, summarizing with the mock model; the proxy in front.
    let gw_state = tempfile::tempdir().unwrap();
    std::fs::write(
        gw_state.path().join("clawctx.json"),
        json!({
            "models": {"providers": {"mock": {
                "api": "openai-completions", "baseUrl": format!("http://127.0.0.1:{model_port}/v1"),
                "apiKey": "sk-mock",
                "models": [{"id": "mock-1", "contextWindow": window, "maxTokens": 1024}]}}},
            "agents": {"defaults": {"model": {"primary": "mock/mock-1"}}},
            "plugins": {"slots": {"contextEngine": "lossless"}}
        })
        .to_string(),
    )
    .unwrap();
    let (gateway, url) = clawctx_gateway(gw_state.path(), 0).await;
    let (mut proxy, proxy_port) = listening(
        "crates/cli/tests/openclaw/engine_proxy.py",
        &[url.as_str(), engine_log.to_str().unwrap()],
        &[],
    )
    .await;
    let proxy_url = format!("http://127.0.0.1:{proxy_port}");

    // A private OpenClaw at `window`, the bridge installed and pointed at the proxy.
    for d in ["home", "state"] {
        std::fs::create_dir_all(scratch_dir.path().join(d)).unwrap();
    }
    let oc_gateway_port = free_port();
    let config = scratch_dir.path().join("openclaw.json");
    std::fs::write(
        &config,
        serde_json::to_string_pretty(&json!({
            "gateway": {"mode": "local", "port": oc_gateway_port,
                "auth": {"mode": "token", "token": "openclaw-test-token"}},
            "logging": {"file": scratch_dir.path().join("openclaw.log")},
            "models": {"mode": "merge", "providers": {"mock": {
                "baseUrl": format!("http://127.0.0.1:{model_port}/v1"), "apiKey": "sk-mock",
                "api": "openai-completions",
                "models": [{"id": "mock-1", "name": "Mock", "reasoning": false, "input": ["text"],
                    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                    "contextWindow": window, "maxTokens": 1024}]}}},
            "agents": {"defaults": {"model": {"primary": "mock/mock-1"}}}
        }))
        .unwrap(),
    )
    .unwrap();
    let path = format!(
        "{}:{}:{}",
        node_bin.display(),
        oc_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let oc = Scratch {
        dir: scratch_dir,
        path,
        config,
    };
    // A turn on OpenClaw's own engine first: history the gateway never saw.
    let (v, out) = oc
        .turn(true, &format!("agent:main:w{window}"), &prompt(0, window))
        .await;
    assert!(reply_of(&v).contains(&marker(0, window)), "{out}");

    let bridge = repo("sdk/openclaw-bridge");
    let out = oc
        .openclaw(&[
            "plugins",
            "install",
            bridge.to_str().unwrap(),
            "--force",
            "--accept-capabilities",
        ])
        .await;
    assert_eq!(out.code, 0, "{out}");
    oc.edit_config(|c| {
        c["plugins"]["entries"]["clawctx"]["config"] =
            json!({"gatewayUrl": proxy_url, "timeoutMs": 120000});
    });

    let key = format!("agent:main:w{window}");
    // (turn, when the output came)
    let mut outputs: Vec<(usize, f64)> = Vec::new();
    let mut oc_gateway = None;
    for t in 1..=TURNS {
        let local = t <= LOCAL_TURNS;
        if !local && oc_gateway.is_none() {
            oc_gateway = Some(openclaw_gateway(&oc, oc_gateway_port).await);
        }
        if t == LOCAL_TURNS + 13 {
            // An OpenClaw restart: the bridge's cursor must survive it.
            stop_openclaw_gateway(oc_gateway.take().unwrap()).await;
            oc_gateway = Some(openclaw_gateway(&oc, oc_gateway_port).await);
        }
        let (v, out, output_at) = timed_turn(&oc, local, &key, &prompt(t, window)).await;
        assert!(
            reply_of(&v).contains(&marker(t, window)),
            "turn {t}: {}\n{out}",
            reply_of(&v)
        );
        outputs.push((t, output_at));
    }
    if let Some(g) = oc_gateway.take() {
        stop_openclaw_gateway(g).await;
    }

    let model = lines(&oc.dir.path().join("model.jsonl"));
    let calls = lines(&oc.dir.path().join("engine.jsonl"));
    // The engine calls answered, and when each call ran (one still running: until now).
    let engine: Vec<&Value> = calls.iter().filter(|c| c["phase"] == "end").collect();
    let ran = |method: &str| -> Vec<(f64, f64)> {
        calls
            .iter()
            .filter(|c| c["phase"] == "start")
            .filter(|c| c["path"].as_str().is_some_and(|p| p.ends_with(method)))
            .filter_map(|c| {
                let end = engine
                    .iter()
                    .find(|e| e["id"] == c["id"])
                    .and_then(|e| e["end"].as_f64())
                    .unwrap_or(f64::INFINITY);
                Some((c["start"].as_f64()?, end))
            })
            .collect()
    };

    // Every problem found, reported together at the end (each check's count).
    let mut problems: Vec<String> = Vec::new();

    // 1. No request to the model holds the turn's prompt twice.
    let turn_requests: Vec<&Value> = model
        .iter()
        .filter(|r| r.get("messages").is_some() && r.get("_summary").is_none())
        .collect();
    assert!(turn_requests.len() >= TURNS);
    for (i, r) in turn_requests.iter().enumerate() {
        let users = user_texts(r);
        let Some(m) = newest_marker(r) else { continue };
        let times = users.iter().filter(|u| u.contains(&m)).count();
        if times != 1 {
            problems.push(format!(
                "model request {i} holds the prompt of {m} {times} times"
            ));
        }
    }

    // 2. No ingestBatch re-sends a message the bridge sent before.
    let sig = |m: &Value| format!("{}\u{0}{}", m["role"], text_of(&m["content"]));
    let mut seen: HashSet<String> = HashSet::new();
    let mut batches = 0;
    for call in &engine {
        let path = call["path"].as_str().unwrap_or_default();
        let messages = call["body"]["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if path.ends_with("/ingestBatch") {
            batches += 1;
            let again: Vec<String> = messages
                .iter()
                .map(sig)
                .filter(|s| !s.ends_with('\u{0}') && seen.contains(s))
                .map(|s| s.chars().take(60).collect())
                .collect();
            if !again.is_empty() {
                problems.push(format!(
                    "an ingestBatch re-sent {} of its {} messages: {:?}",
                    again.len(),
                    messages.len(),
                    &again[..again.len().min(3)]
                ));
            }
        }
        if path.ends_with("/ingestBatch") || path.ends_with("/commitTurn") {
            seen.extend(messages.iter().map(sig));
        }
    }
    // The turn from before the bridge was sent, once (the re-sends are counted above).
    let before_bridge = seen
        .iter()
        .filter(|s| s.contains(&marker(0, window)))
        .count();
    if before_bridge < 2 {
        problems.push(format!(
            "the turn from before the bridge reached the gateway with {before_bridge} messages"
        ));
    }
    let commits = engine
        .iter()
        .filter(|c| {
            c["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/commitTurn"))
        })
        .count();
    assert!(
        commits >= TURNS,
        "window {window}: {commits} commitTurn calls"
    );

    // 3. No summary while a commitTurn ran, nor between a turn's answer and its output.
    let summaries: Vec<f64> = model
        .iter()
        .filter(|r| r.get("_summary").is_some())
        .filter_map(|r| r["_at"].as_f64())
        .collect();
    // (asked, answered) of each summary request answered.
    let summarized: Vec<(f64, f64)> = model
        .iter()
        .filter_map(|r| Some((r["_at"].as_f64()?, r["_summary_done"].as_f64()?)))
        .collect();
    for (start, end) in ran("/commitTurn") {
        let during = summaries
            .iter()
            .filter(|s| **s >= start && **s <= end)
            .count();
        if during > 0 {
            problems.push(format!(
                "{during} summary requests while a commitTurn ran ({:.1} s)",
                end - start
            ));
        }
    }
    // Nor did a `maintain` call wait for one: OpenClaw's deferred maintenance (after the reply)
    // held its side of the turn until the call answered (one turn's output came 10.75 s after
    // the model's answer at 6,000); the gateway answers it at once and compacts on its own lane.
    for (start, end) in ran("/maintain") {
        let waited = summarized
            .iter()
            .filter(|(asked, done)| *asked >= start && *done <= end)
            .count();
        if waited > 0 {
            problems.push(format!(
                "a maintain call waited for {waited} summaries ({:.1} s)",
                end - start
            ));
        }
    }
    let mut waits = Vec::new();
    for (t, output_at) in &outputs {
        let m = marker(*t, window);
        let answered = turn_requests
            .iter()
            .filter(|r| newest_marker(r).as_deref() == Some(m.as_str()))
            .filter_map(|r| r["_at"].as_f64())
            .fold(f64::MIN, f64::max);
        // The output waited for a summary asked after the answer and answered before it.
        let between = summarized
            .iter()
            .filter(|(asked, done)| *asked >= answered && *done <= *output_at)
            .count();
        if between > 0 {
            problems.push(format!(
                "turn {t}'s output came {:.1} s after the answer, waiting for {between} summaries",
                output_at - answered
            ));
        }
        waits.push(output_at - answered);
        if output_at - answered > 2.0 {
            // What ran on the engine meanwhile (a diagnostic for the figures, not a check).
            let during: Vec<String> = calls
                .iter()
                .filter(|c| c["phase"] == "start")
                .filter_map(|c| {
                    let start = c["start"].as_f64()?;
                    let end = engine
                        .iter()
                        .find(|e| e["id"] == c["id"])
                        .and_then(|e| e["end"].as_f64())
                        .unwrap_or(f64::INFINITY);
                    (end >= answered && start <= *output_at).then(|| {
                        format!(
                            "{} {:+.2}..{:+.2} s",
                            c["path"].as_str().unwrap_or("?"),
                            start - answered,
                            end - answered
                        )
                    })
                })
                .collect();
            eprintln!(
                "window {window}: turn {t}'s output came {:.2} s after the answer; engine calls meanwhile: {during:?}",
                output_at - answered
            );
        }
    }
    if window <= 6_000 && summaries.is_empty() {
        problems.push("the history was never compacted".into());
    }
    eprintln!(
        "window {window}: output after the answer, per turn (s): {:?}",
        waits
            .iter()
            .map(|w| (w * 100.0).round() / 100.0)
            .collect::<Vec<_>>()
    );
    let max = waits.iter().copied().fold(0.0, f64::max);
    let min = waits.iter().copied().fold(f64::MAX, f64::min);
    eprintln!(
        "window {window}: {TURNS} turns, {} model requests, {} summaries, {batches} ingestBatch calls, {commits} commitTurn calls; output after the answer: {min:.2}-{max:.2} s",
        turn_requests.len(),
        summaries.len()
    );

    stop(gateway).await;
    stop_child(&mut proxy).await;
    let _ = mock.start_kill();
    assert!(
        problems.is_empty(),
        "window {window}: {} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openclaw_turns_at_a_40k_window_send_the_prompt_and_the_transcript_once() {
    thirty_turns(40_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openclaw_turns_at_a_6k_window_never_wait_for_a_summary() {
    thirty_turns(6_000).await;
}
