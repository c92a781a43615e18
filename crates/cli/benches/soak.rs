//! The soak (issue #20, item 6): `clawctx gateway` processes under a bounded loopback load for
//! a long time, with faults injected, watched from outside the way an operator would.
//!
//! ```sh
//! cargo bench -p clawctx-cli --bench soak                 # 30 minutes
//! SOAK_SECS=120 cargo bench -p clawctx-cli --bench soak   # a quick look
//! ```
//!
//! Knobs (environment, defaults in brackets): `SOAK_SECS` [1800], `SOAK_SESSIONS` [6 per
//! node], `SOAK_THINK_MS` [300], `SOAK_RESTART_SECS` [60], `SOAK_SAMPLE_SECS` [15],
//! `SOAK_SESSION_TURNS` [150: then the session ends and a new one takes its place],
//! `SOAK_FAULT_EVERY` [5], `SOAK_SUMMARY_FAIL_EVERY` [5], `SOAK_RSS_GROWTH_PCT` [20],
//! `SOAK_CLAWCTX` (the binary to run, default the one cargo built).
//!
//! Three gateway child processes (the real binary) share one mock OpenAI-compatible model
//! server on loopback:
//!
//! - `lossless`: the lossless engine on SQLite, a small context window so compaction runs all
//!   the time, and a summarizer (the model) that fails every `SOAK_SUMMARY_FAIL_EVERY`-th call
//!   (the extractive fallback takes over). It lives for the whole run: its resident memory and
//!   open descriptors are sampled every `SOAK_SAMPLE_SECS` and must stay flat.
//! - `crashy` and `hangy`: a Python plugin engine (`benches/fixtures/soak-faults`) that exits,
//!   or stops answering, on every `SOAK_FAULT_EVERY`-th call. A faulty engine is quarantined
//!   for the life of its process (the contract), so these two are drained with SIGTERM and
//!   started again every `SOAK_RESTART_SECS`: each life injects a fault. Before each stop the
//!   node's `/metrics` must show the quarantine; after it no plugin process may be left.
//!
//! `SOAK_SESSIONS` sessions per node at a time (mixed: each has its own history, and after
//! `SOAK_SESSION_TURNS` turns it ends and a new one begins) send turns one after
//! another with a pause of `SOAK_THINK_MS` (0.5–1.5×) between them; every turn must be answered
//! 200 (after a fault, `legacy` answers the same call). A node being restarted holds its
//! sessions' next turns until it is back, so no turn is sent to a process that is going away.
//! At the end the lossless node is drained and `clawctx lcm doctor` must find its store clean.
//!
//! Every node runs with a token (`gateway.auth.token`); the sessions, the samplers and the
//! restarts present it. An intruder probes every node all through the run without it, with a
//! wrong one of the same length, with another scheme, on every kind of route (a turn, the engine
//! API, the recall tools, the dashboard, `/metrics`, an unknown path): each probe must get 401,
//! and no intruder turn may ever reach the model or a store.
//!
//! Output: a table, `FIGURE <name> <value>` lines, and a non-zero exit with the reasons when any
//! promise failed: a turn not answered, a quarantine not recorded, a plugin process or a zombie
//! left behind, memory or descriptors that grew from the first sample after a quarter of the run
//! to the last (anonymous resident memory more than `SOAK_RSS_GROWTH_PCT` percent, default 20,
//! plus 16 MiB; descriptors more than 8), a drained gateway that did not exit 0, a store
//! doctor would not pass.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clawctx_runtime::warm::WARM_SESSIONS;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::RwLock;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

fn env_num(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a whole number, got {v:?}")),
        Err(_) => default,
    }
}

const PLUGIN_ID: &str = "soak-faults";

/// The gateways' token (`gateway.auth.token`); every legitimate request presents it.
const TOKEN: &str = "soak-gateway-token-5b7e0c1d9a";

/// The mark of an intruder's turn: it must never reach the model.
const INTRUDER_MARK: &str = "intruderturnmark";

/// The model: chat turns answered at once; summary requests answered with a short summary,
/// except every `fail_every`-th, which gets a 500 (the lossless engine falls back to its
/// extractive summarizer).
#[derive(Clone)]
struct Model {
    summaries: Arc<AtomicU64>,
    chats: Arc<AtomicU64>,
    /// Requests that carried an intruder's turn (must stay 0).
    intruders: Arc<AtomicU64>,
    fail_every: u64,
}

impl Respond for Model {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        if req
            .body
            .windows(INTRUDER_MARK.len())
            .any(|w| w == INTRUDER_MARK.as_bytes())
        {
            self.intruders.fetch_add(1, Ordering::SeqCst);
        }
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let system = body
            .pointer("/messages/0/content")
            .and_then(Value::as_str)
            .unwrap_or("");
        let summary = system == clawctx_model::summarizer::SYSTEM_PROMPT.trim();
        let text = if summary {
            let n = self.summaries.fetch_add(1, Ordering::SeqCst) + 1;
            if self.fail_every > 0 && n % self.fail_every == 0 {
                return ResponseTemplate::new(500).set_body_json(json!({"error": {"message": "soak: injected summarizer failure", "type": "server_error"}}));
            }
            "Earlier turns: the user sent numbered soak notes and the assistant acknowledged each."
        } else {
            self.chats.fetch_add(1, Ordering::SeqCst);
            "noted"
        };
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-soak",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        }))
    }
}

/// The binary under test: `SOAK_CLAWCTX` (a copy, so a rebuild during a long run does not
/// swap it), else the one cargo built.
fn clawctx() -> String {
    std::env::var("SOAK_CLAWCTX").unwrap_or_else(|_| env!("CARGO_BIN_EXE_clawctx").to_owned())
}

/// Runs `clawctx --state-dir <state> <args>`; its stdout, or a panic with what it printed.
fn run_cli(state: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(clawctx())
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .env_remove("CLAWCTX_LOG")
        .output()
        .expect("run clawctx");
    assert!(
        out.status.success(),
        "clawctx {args:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn write_config(state: &Path, model: &str, plugins: Value) {
    let config = json!({
        "models": {"providers": {"mock": {"api": "openai-completions", "baseUrl": format!("{model}/v1"),
            "models": [{"id": "soak-model", "contextWindow": 2400, "maxTokens": 256}], "maxRetries": 0,
            "timeoutMs": 60000}}},
        "agents": {"defaults": {"model": {"primary": "mock/soak-model"}}},
        "plugins": plugins,
        "gateway": {"auth": {"token": TOKEN}},
    });
    std::fs::create_dir_all(state).unwrap();
    std::fs::write(
        state.join("clawctx.json"),
        serde_json::to_string_pretty(&config).unwrap(),
    )
    .unwrap();
}

/// Links the faulty plugin into `state` (`plugins install -l`, which selects it), then sets
/// its mode and a short call deadline in the config.
fn install_faulty(state: &Path, plugin_dir: &Path, mode: &str, every: u64) {
    run_cli(
        state,
        &[
            "plugins",
            "install",
            "-l",
            &plugin_dir.display().to_string(),
        ],
    );
    let file = state.join("clawctx.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap())
        .expect("plugins install keeps the config JSON");
    config["plugins"]["slots"]["contextEngine"] = json!(PLUGIN_ID);
    let entry = &mut config["plugins"]["entries"][PLUGIN_ID];
    entry["enabled"] = json!(true);
    entry["timeoutMs"] = json!(1500);
    entry["config"] = json!({"mode": mode, "every": every});
    std::fs::write(&file, serde_json::to_string_pretty(&config).unwrap()).unwrap();
}

/// A gateway child process and the URL it printed.
struct Node {
    child: Child,
    url: String,
    pid: u32,
}

async fn spawn_node(state: &Path) -> Node {
    let mut cmd = Command::new(clawctx());
    cmd.args([
        "--state-dir",
        &state.display().to_string(),
        "gateway",
        "--port",
        "0",
    ])
    .env_remove("CLAWCTX_LOG")
    .env_remove("CLAWCTX_GATEWAY_TOKEN")
    .env_remove("OPENAI_BASE_URL")
    .env_remove("OPENAI_API_KEY")
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn clawctx gateway");
    let pid = child.id().expect("a running child has a pid");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    let read = tokio::time::timeout(Duration::from_secs(120), stdout.read_line(&mut first)).await;
    assert!(
        matches!(read, Ok(Ok(n)) if n > 0),
        "the gateway in {} printed no address",
        state.display()
    );
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {first:?}"))
        .to_owned();
    tokio::spawn(async move {
        let mut line = String::new();
        while matches!(stdout.read_line(&mut line).await, Ok(n) if n > 0) {
            line.clear();
        }
    });
    Node { child, url, pid }
}

/// SIGTERM, then the exit status (`None` when it did not exit within a minute; then killed).
async fn drain(node: &mut Node) -> Option<std::process::ExitStatus> {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &node.pid.to_string()])
        .status();
    match tokio::time::timeout(Duration::from_secs(60), node.child.wait()).await {
        Ok(Ok(status)) => Some(status),
        _ => {
            let _ = node.child.kill().await;
            None
        }
    }
}

/// One process as `/proc` shows it.
struct Proc {
    pid: u32,
    ppid: u32,
    state: char,
    cmdline: String,
}

fn processes() -> Vec<Proc> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let state = f.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let ppid = f.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        out.push(Proc {
            pid,
            ppid,
            state,
            cmdline,
        });
    }
    out
}

/// One sample of a process: resident memory in all and its anonymous part (KiB), and open
/// descriptors. The rest of the resident memory is file-backed: the pages of the store file the
/// SQLite store maps (`mmap_size`), which grow with the file and are the OS's cache to take
/// back, not memory the process holds; so flatness is judged on the anonymous part.
#[derive(Clone, Copy, Default)]
struct Sample {
    at: u64,
    /// Sessions the node had begun by then.
    sessions: u64,
    rss: u64,
    anon: u64,
    fds: usize,
}

fn sample_of(pid: u32, at: u64, sessions: u64) -> Sample {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0);
    Sample {
        at,
        sessions,
        rss: field("VmRSS:"),
        anon: field("RssAnon:"),
        fds,
    }
}

async fn quarantined(http: &reqwest::Client, url: &str) -> Option<u64> {
    let text = http
        .get(format!("{url}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("clawctx_gateway_quarantined_engines "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

/// What the run counted.
#[derive(Default)]
struct Tally {
    sent: AtomicU64,
    answered: AtomicU64,
    failures: Mutex<Vec<String>>,
}

impl Tally {
    fn fail(&self, what: String) {
        let mut f = self.failures.lock().unwrap();
        if f.len() < 50 {
            f.push(what);
        }
    }
}

/// A node that can be swapped for a fresh process while its sessions wait.
struct Slot {
    name: &'static str,
    state: PathBuf,
    node: RwLock<Node>,
    /// Sessions begun on this node.
    sessions_started: AtomicU64,
}

async fn drive_session(
    slot: Arc<Slot>,
    session: String,
    deadline: Instant,
    think_ms: u64,
    tally: Arc<Tally>,
    seed: u64,
    session_turns: u64,
) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let mut rng = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut turn = 0u64;
    let mut generation = 0u64;
    let base = session;
    let mut session = format!("{base}-g0");
    slot.sessions_started.fetch_add(1, Ordering::Relaxed);
    while Instant::now() < deadline {
        turn += 1;
        // Sessions end and new ones begin, as a gateway's do over days.
        if session_turns > 0 && turn % session_turns == 0 {
            generation += 1;
            session = format!("{base}-g{generation}");
            slot.sessions_started.fetch_add(1, Ordering::Relaxed);
        }
        let prompt = format!(
            "soak note {turn} of {session}: remember the number {}",
            rng % 100_000
        );
        let result = {
            let node = slot.node.read().await;
            tally.sent.fetch_add(1, Ordering::Relaxed);
            http.post(format!("{}/v1/chat/completions", node.url))
                .bearer_auth(TOKEN)
                .header("x-clawctx-session", &session)
                .json(&json!({"messages": [{"role": "user", "content": prompt}]}))
                .send()
                .await
        };
        match result {
            Ok(r) if r.status() == 200 => {
                tally.answered.fetch_add(1, Ordering::Relaxed);
            }
            Ok(r) => {
                let status = r.status();
                let body = r.text().await.unwrap_or_default();
                tally.fail(format!(
                    "{} {session} turn {turn}: HTTP {status}: {}",
                    slot.name,
                    body.chars().take(300).collect::<String>()
                ));
            }
            Err(e) => tally.fail(format!("{} {session} turn {turn}: {e}", slot.name)),
        }
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        if think_ms > 0 {
            let pause = think_ms / 2 + rng % think_ms.max(1);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }
}

/// What the intruder tried, and what it got.
#[derive(Default)]
struct Intrusions {
    probes: AtomicU64,
    refused: AtomicU64,
}

/// Probes every node, round after round until `deadline`, with requests a legitimate client
/// would make but without the right token: each must be refused with 401, whatever the route.
/// A probe that finds its node restarting (no connection) is not counted.
async fn intrude(
    slots: Vec<Arc<Slot>>,
    deadline: Instant,
    pause: Duration,
    intrusions: Arc<Intrusions>,
    tally: Arc<Tally>,
) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    // Same length as the token, one character off: a comparison that stops at the length
    // or at a prefix would let it in.
    let mut near = TOKEN.to_owned();
    near.pop();
    near.push('X');
    let credentials: [Option<String>; 4] = [
        None,
        Some(format!("Bearer {near}")),
        Some(format!("Basic {TOKEN}")),
        Some(format!("Bearer {}", &TOKEN[..TOKEN.len() - 1])),
    ];
    let turn = json!({"messages": [{"role": "user", "content": format!("{INTRUDER_MARK}: tell me your secrets")}]});
    let ingest =
        json!({"sessionId": "intruder", "message": {"role": "user", "content": INTRUDER_MARK}});
    let grep = json!({"sessionKey": "lossless-0-g0", "query": "soak"});
    let routes: Vec<(reqwest::Method, &str, Option<&Value>)> = vec![
        (reqwest::Method::POST, "/v1/chat/completions", Some(&turn)),
        (reqwest::Method::POST, "/v1/engine/ingest", Some(&ingest)),
        (reqwest::Method::POST, "/v1/engine/lcm_grep", Some(&grep)),
        (reqwest::Method::GET, "/v1/engine/info", None),
        (reqwest::Method::GET, "/v1/sessions", None),
        (reqwest::Method::GET, "/v1/models", None),
        (reqwest::Method::GET, "/metrics", None),
        (reqwest::Method::GET, "/openapi.json", None),
        (reqwest::Method::GET, "/", None),
        (reqwest::Method::GET, "/no/such/route", None),
    ];
    let mut round = 0usize;
    while Instant::now() < deadline {
        for slot in &slots {
            let url = slot.node.read().await.url.clone();
            let (method, route, body) = &routes[round % routes.len()];
            let auth = &credentials[(round / routes.len()) % credentials.len()];
            let mut req = http
                .request(method.clone(), format!("{url}{route}"))
                .header("x-clawctx-session", "intruder");
            if let Some(a) = auth {
                req = req.header("authorization", a);
            }
            if let Some(b) = body {
                req = req.json(b);
            }
            let Ok(resp) = req.send().await else { continue };
            intrusions.probes.fetch_add(1, Ordering::Relaxed);
            if resp.status() == 401 {
                intrusions.refused.fetch_add(1, Ordering::Relaxed);
            } else {
                tally.fail(format!(
                    "{}: {method} {route} with authorization {auth:?} answered {} instead of 401",
                    slot.name,
                    resp.status()
                ));
            }
        }
        round += 1;
        tokio::time::sleep(pause).await;
    }
}

/// Drains and restarts a faulty node every `every` until `deadline`; each life must end with
/// its quarantine on `/metrics`, a clean exit, and no plugin process left.
async fn cycle_faulty(
    slot: Arc<Slot>,
    every: Duration,
    deadline: Instant,
    plugin_dir: PathBuf,
    tally: Arc<Tally>,
    lives: Arc<AtomicU64>,
    recorded: Arc<AtomicU64>,
) {
    let http = reqwest::Client::new();
    while Instant::now() + every < deadline {
        tokio::time::sleep(every).await;
        let mut node = slot.node.write().await;
        lives.fetch_add(1, Ordering::Relaxed);
        match quarantined(&http, &node.url).await {
            Some(n) if n >= 1 => {
                recorded.fetch_add(1, Ordering::Relaxed);
            }
            other => tally.fail(format!(
                "{}: a life ended without its quarantine on /metrics ({other:?})",
                slot.name
            )),
        }
        check_drained(&slot, &mut node, &plugin_dir, &tally).await;
        *node = spawn_node(&slot.state).await;
    }
}

async fn check_drained(slot: &Slot, node: &mut Node, plugin_dir: &Path, tally: &Tally) {
    match drain(node).await {
        Some(s) if s.success() => {}
        Some(s) => tally.fail(format!(
            "{}: the drained gateway exited with {s}",
            slot.name
        )),
        None => tally.fail(format!(
            "{}: the gateway did not exit within 60 s of SIGTERM",
            slot.name
        )),
    }
    // Plugin processes go with their gateway (their process group is killed on shutdown).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let marker = plugin_dir.display().to_string();
    let left: Vec<u32> = processes()
        .into_iter()
        .filter(|p| p.cmdline.contains(&marker) || p.ppid == node.pid)
        .map(|p| p.pid)
        .collect();
    if !left.is_empty() {
        tally.fail(format!(
            "{}: processes left after the gateway exited: {left:?}",
            slot.name
        ));
    }
}

fn main() {
    let secs = env_num("SOAK_SECS", 1800);
    let sessions = env_num("SOAK_SESSIONS", 6);
    let think_ms = env_num("SOAK_THINK_MS", 300);
    let restart = env_num("SOAK_RESTART_SECS", 60);
    let sample = env_num("SOAK_SAMPLE_SECS", 15);
    let fault_every = env_num("SOAK_FAULT_EVERY", 5);
    let summary_fail_every = env_num("SOAK_SUMMARY_FAIL_EVERY", 5);
    let growth_pct = env_num("SOAK_RSS_GROWTH_PCT", 20);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let code = rt.block_on(run(
        secs,
        sessions,
        think_ms,
        restart,
        sample,
        fault_every,
        summary_fail_every,
        growth_pct,
    ));
    std::process::exit(code);
}

#[allow(clippy::too_many_arguments)]
async fn run(
    secs: u64,
    sessions: u64,
    think_ms: u64,
    restart: u64,
    sample: u64,
    fault_every: u64,
    summary_fail_every: u64,
    growth_pct: u64,
) -> i32 {
    let root = tempfile::tempdir().unwrap();
    let model = Model {
        summaries: Arc::default(),
        chats: Arc::default(),
        intruders: Arc::default(),
        fail_every: summary_fail_every,
    };
    let server = MockServer::builder()
        .disable_request_recording()
        .start()
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(model.clone())
        .mount(&server)
        .await;

    // The plugin is copied into the run's directory, so its path marks its processes.
    let plugin_dir = root.path().join("soak-faults");
    std::fs::create_dir_all(&plugin_dir).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/fixtures/soak-faults");
    for f in ["openclaw.plugin.json", "plugin.py"] {
        std::fs::copy(fixture.join(f), plugin_dir.join(f)).unwrap();
    }

    let lossless_state = root.path().join("lossless");
    write_config(
        &lossless_state,
        &server.uri(),
        json!({
            "slots": {"contextEngine": "lossless"},
            "entries": {"lossless": {"config": {"freshTailCount": 4, "leafChunkTokens": 400, "leafMinFanout": 2, "contextThreshold": 0.5}}}
        }),
    );
    let mut slots = vec![Arc::new(Slot {
        sessions_started: AtomicU64::new(0),
        name: "lossless",
        node: RwLock::new(spawn_node(&lossless_state).await),
        state: lossless_state,
    })];
    for (name, mode) in [("crashy", "crash"), ("hangy", "hang")] {
        let state = root.path().join(name);
        write_config(&state, &server.uri(), json!({}));
        install_faulty(&state, &plugin_dir, mode, fault_every);
        slots.push(Arc::new(Slot {
            sessions_started: AtomicU64::new(0),
            name,
            node: RwLock::new(spawn_node(&state).await),
            state,
        }));
    }
    println!("soak: {secs} s, {sessions} sessions per node, faults every {fault_every} plugin calls, restarts every {restart} s");

    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    let tally = Arc::new(Tally::default());
    let lives = Arc::new(AtomicU64::new(0));
    let recorded = Arc::new(AtomicU64::new(0));
    let session_turns = env_num("SOAK_SESSION_TURNS", 150);
    let mut tasks = Vec::new();
    for (n, slot) in slots.iter().enumerate() {
        for s in 0..sessions {
            tasks.push(tokio::spawn(drive_session(
                slot.clone(),
                format!("{}-{s}", slot.name),
                deadline,
                think_ms,
                tally.clone(),
                (n as u64) * 1000 + s + 1,
                session_turns,
            )));
        }
    }
    let mut cyclers = Vec::new();
    for slot in &slots[1..] {
        cyclers.push(tokio::spawn(cycle_faulty(
            slot.clone(),
            Duration::from_secs(restart),
            deadline,
            plugin_dir.clone(),
            tally.clone(),
            lives.clone(),
            recorded.clone(),
        )));
    }

    let intrusions = Arc::new(Intrusions::default());
    let intruder = tokio::spawn(intrude(
        slots.clone(),
        deadline,
        Duration::from_millis(env_num("SOAK_INTRUDE_MS", 250)),
        intrusions.clone(),
        tally.clone(),
    ));

    // Samples of the long-lived node; zombies of any node.
    let mut samples: Vec<Sample> = Vec::new();
    let mut zombies = 0usize;
    while Instant::now() < deadline {
        tokio::time::sleep(
            Duration::from_secs(sample).min(deadline.saturating_duration_since(Instant::now())),
        )
        .await;
        let pid = slots[0].node.read().await.pid;
        let now = sample_of(
            pid,
            start.elapsed().as_secs(),
            slots[0].sessions_started.load(Ordering::Relaxed),
        );
        samples.push(now);
        let mut pids = Vec::new();
        for slot in &slots {
            if let Ok(node) = slot.node.try_read() {
                pids.push(node.pid);
            }
        }
        let z: Vec<u32> = processes()
            .into_iter()
            .filter(|p| p.state == 'Z' && pids.contains(&p.ppid))
            .map(|p| p.pid)
            .collect();
        if !z.is_empty() {
            zombies += z.len();
            tally.fail(format!(
                "zombie children of the gateways at {} s: {z:?}",
                start.elapsed().as_secs()
            ));
        }
        eprintln!(
            "soak: {:>5} s  answered {:>6}  lossless rss {:>7} KiB (anonymous {:>7}) fds {:>3}",
            now.at,
            tally.answered.load(Ordering::Relaxed),
            now.rss,
            now.anon,
            now.fds
        );
    }
    for t in tasks {
        let _ = t.await;
    }
    for c in cyclers {
        let _ = c.await;
    }
    let _ = intruder.await;
    // The last lives of the faulty nodes, then the lossless node.
    let http = reqwest::Client::new();
    for slot in &slots[1..] {
        let mut node = slot.node.write().await;
        lives.fetch_add(1, Ordering::Relaxed);
        match quarantined(&http, &node.url).await {
            Some(n) if n >= 1 => {
                recorded.fetch_add(1, Ordering::Relaxed);
            }
            other => tally.fail(format!(
                "{}: the last life ended without its quarantine on /metrics ({other:?})",
                slot.name
            )),
        }
        check_drained(slot, &mut node, &plugin_dir, &tally).await;
    }
    {
        let mut node = slots[0].node.write().await;
        check_drained(&slots[0], &mut node, &plugin_dir, &tally).await;
    }
    let doctor = std::process::Command::new(clawctx())
        .arg("--state-dir")
        .arg(&slots[0].state)
        .args(["lcm", "doctor", "--json"])
        .output()
        .expect("run lcm doctor");
    let doctor_json: Value = serde_json::from_slice(&doctor.stdout).unwrap_or(Value::Null);
    // No intruder turn reached the model or the store.
    // (The same search for the sessions' own words must find them, or it proves nothing.)
    let hits = |term: &str| -> usize {
        let out = run_cli(&slots[0].state, &["lcm", "grep", term, "--json"]);
        serde_json::from_str::<Value>(&out)
            .ok()
            .and_then(|v| v["hits"].as_array().map(Vec::len))
            .unwrap_or_else(|| panic!("lcm grep --json printed no hits array: {out}"))
    };
    if hits("soak") == 0 {
        tally.fail("lcm grep finds no soak note in the lossless store".to_owned());
    }
    let intruder_hits = hits(INTRUDER_MARK);
    if intruder_hits > 0 {
        tally.fail(format!(
            "{intruder_hits} messages of an intruder are in the lossless store"
        ));
    }
    let leaked = model.intruders.load(Ordering::SeqCst);
    if leaked > 0 {
        tally.fail(format!("{leaked} intruder turns reached the model"));
    }
    if !doctor.status.success() {
        tally.fail(format!(
            "lcm doctor on the lossless store failed: {}",
            String::from_utf8_lossy(&doctor.stdout)
                .chars()
                .take(600)
                .collect::<String>()
        ));
    }

    // Flatness: from the first sample after the runtime's warm set could be full (it keeps
    // WARM_SESSIONS sessions: until that many have begun, memory rightly grows with them) to
    // the last. A run too short to fill it is judged from its middle, and says so.
    let full_at = WARM_SESSIONS as u64 + sessions;
    let warm = match samples.iter().find(|s| s.sessions >= full_at) {
        Some(s) => *s,
        None => {
            println!(
                "soak: the lossless node began {} sessions, fewer than the {full_at} that fill its warm set; memory judged from the middle of the run",
                samples.last().map_or(0, |s| s.sessions)
            );
            samples
                .iter()
                .find(|s| s.at >= secs / 2)
                .or(samples.first())
                .copied()
                .unwrap_or_default()
        }
    };
    let last = samples.last().copied().unwrap_or(warm);
    let anon_limit = warm.anon + warm.anon * growth_pct / 100 + 16 * 1024;
    if last.anon > anon_limit {
        tally.fail(format!(
            "lossless node memory grew: {} KiB anonymous at {} s -> {} KiB at {} s",
            warm.anon, warm.at, last.anon, last.at
        ));
    }
    if last.fds > warm.fds + 8 {
        tally.fail(format!(
            "lossless node descriptors grew: {} at {} s -> {} at {} s",
            warm.fds, warm.at, last.fds, last.at
        ));
    }
    let peak_rss = samples.iter().map(|s| s.rss).max().unwrap_or(0);
    let sent = tally.sent.load(Ordering::Relaxed);
    let answered = tally.answered.load(Ordering::Relaxed);
    let failures = tally.failures.lock().unwrap().clone();
    println!(
        "\nsoak: {} s, {} nodes",
        start.elapsed().as_secs(),
        slots.len()
    );
    println!("turns sent / answered                  {sent} / {answered}");
    println!(
        "faulty-node lives (faults injected)    {}",
        lives.load(Ordering::Relaxed)
    );
    println!(
        "quarantines recorded on /metrics       {}",
        recorded.load(Ordering::Relaxed)
    );
    println!(
        "summarizer calls / injected failures   {} / {}",
        model.summaries.load(Ordering::Relaxed),
        model.summaries.load(Ordering::Relaxed) / summary_fail_every.max(1)
    );
    println!(
        "lossless rss after warm-up / end / peak {} / {} / {} KiB",
        warm.rss, last.rss, peak_rss
    );
    println!(
        "lossless anonymous after warm-up / end {} / {} KiB (warm-up: {} s, {} sessions begun)",
        warm.anon, last.anon, warm.at, warm.sessions
    );
    println!(
        "lossless fds after warm-up / end       {} / {}",
        warm.fds, last.fds
    );
    println!("zombies seen                           {zombies}");
    println!(
        "intruder probes / refused 401          {} / {}",
        intrusions.probes.load(Ordering::Relaxed),
        intrusions.refused.load(Ordering::Relaxed)
    );
    println!(
        "lcm doctor                             {}",
        if doctor.status.success() {
            "clean"
        } else {
            "FAILED"
        }
    );
    println!("FIGURE soak_secs {}", start.elapsed().as_secs());
    println!("FIGURE turns_sent {sent}");
    println!("FIGURE turns_answered {answered}");
    println!("FIGURE faults_injected {}", lives.load(Ordering::Relaxed));
    println!(
        "FIGURE quarantines_recorded {}",
        recorded.load(Ordering::Relaxed)
    );
    println!("FIGURE rss_kib_start {}", warm.rss);
    println!("FIGURE rss_kib_end {}", last.rss);
    println!("FIGURE anon_kib_start {}", warm.anon);
    println!("FIGURE anon_kib_end {}", last.anon);
    println!("FIGURE fds_start {}", warm.fds);
    println!("FIGURE fds_end {}", last.fds);
    println!("FIGURE zombies {zombies}");
    println!(
        "FIGURE intruder_probes {}",
        intrusions.probes.load(Ordering::Relaxed)
    );
    println!(
        "FIGURE intruder_refused {}",
        intrusions.refused.load(Ordering::Relaxed)
    );
    if let Some(summary) = doctor_json.get("summary") {
        println!("doctor summary: {summary}");
    }
    if failures.is_empty() && answered == sent {
        println!("soak: every promise held");
        0
    } else {
        println!("soak: FAILED");
        if answered != sent {
            println!("  {} turns not answered", sent - answered);
        }
        for f in failures {
            println!("  {f}");
        }
        1
    }
}
