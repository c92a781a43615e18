//! The real OpenClaw (npm `openclaw` 2026.9.x on Node 24) on clawctx through the bridge plugin
//! (issue #28, "Done means"). `.ci/run` installs both under `$HOME/.cache/clawctx-openclaw`
//! (`node24/` and `oc/`; `CLAWCTX_OPENCLAW_DIR` names another place); without them the test
//! fails under `CI=true` and is skipped with a note elsewhere.
//!
//! One scratch OpenClaw (its own `HOME`, state dir and config) talks to a mock model on loopback
//! (`tests/openclaw/mock_model.py`, which logs every request) and a `clawctx gateway` started
//! without a model (lossless). In order:
//! 1. a turn on OpenClaw's own engine, before the bridge: history the gateway never saw;
//! 2. the bridge installed as its README says (`--force --accept-capabilities`), which selects
//!    it; `openclaw doctor` reports nothing about it;
//! 3. a turn with `openclaw agent --local`: the earlier turn reaches the store (the bridge sends
//!    the transcript delta), the recall tools are offered;
//! 4. the model calls `lcm_grep` (through OpenClaw's `tool_call`): the bridge's tool answers
//!    from the gateway's store;
//! 5. the clawctx gateway is stopped: the turn is answered (OpenClaw falls back to `legacy`);
//!    started again, the next turn brings the missed turn into the store;
//! 6. a provider overflow (`context_length_exceeded`) is recovered by a forced compaction;
//! 7. OpenClaw's gateway mode (`openclaw gateway run` with a token, then `openclaw agent`) loads
//!    the bridge (the slot is its plugin id) and `openclaw sessions compact` runs the engine's
//!    compaction.
//!
//! Every turn's prompt carries a marker word; at the end each marker's prompt and reply are in
//! the lossless store exactly once, and no request to the model carried a summary or a
//! `<recalled>` block twice. A failing step prints OpenClaw's output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub(crate) fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// Where `.ci/run` installs Node 24 and OpenClaw.
pub(crate) fn install_dir() -> PathBuf {
    std::env::var_os("CLAWCTX_OPENCLAW_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/clawctx-openclaw")
        })
}

pub(crate) struct Scratch {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) path: String,
    pub(crate) config: PathBuf,
}

/// One finished command: its output, printed when a step fails.
pub(crate) struct Out {
    pub(crate) cmd: String,
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl std::fmt::Display for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tail = |s: &str| {
            let start = s.len().saturating_sub(6000);
            let mut i = start;
            while !s.is_char_boundary(i) {
                i += 1;
            }
            s[i..].to_owned()
        };
        write!(
            f,
            "$ {}\nexit {}\n--- stdout (end)\n{}\n--- stderr (end)\n{}",
            self.cmd,
            self.code,
            tail(&self.stdout),
            tail(&self.stderr)
        )
    }
}

impl Scratch {
    pub(crate) fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new(program);
        c.args(args)
            .current_dir(self.dir.path())
            .env("PATH", &self.path)
            .env("HOME", self.dir.path().join("home"))
            .env("OPENCLAW_STATE_DIR", self.dir.path().join("state"))
            .env("OPENCLAW_CONFIG_PATH", &self.config)
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        c
    }

    pub(crate) async fn openclaw(&self, args: &[&str]) -> Out {
        let child = self
            .command("openclaw", args)
            .spawn()
            .expect("running openclaw");
        let out = tokio::time::timeout(Duration::from_secs(300), child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("openclaw {args:?} ran over 5 minutes"))
            .unwrap();
        Out {
            cmd: format!("openclaw {}", args.join(" ")),
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// One `openclaw agent` turn (`--local`, or through OpenClaw's gateway): its JSON.
    pub(crate) async fn turn(&self, local: bool, key: &str, prompt: &str) -> (Value, Out) {
        let mut args = vec!["agent"];
        if local {
            args.push("--local");
        }
        args.extend(["--session-key", key, "-m", prompt, "--json"]);
        let out = self.openclaw(&args).await;
        assert_eq!(out.code, 0, "{out}");
        let start = out.stdout.find('{').unwrap_or(0);
        let v: Value = serde_json::from_str(&out.stdout[start..])
            .unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"));
        (v, out)
    }

    pub(crate) fn edit_config(&self, f: impl FnOnce(&mut Value)) {
        let mut c: Value =
            serde_json::from_str(&std::fs::read_to_string(&self.config).unwrap()).unwrap();
        f(&mut c);
        std::fs::write(&self.config, serde_json::to_string_pretty(&c).unwrap()).unwrap();
    }
}

pub(crate) fn reply_of(v: &Value) -> String {
    let meta = v.get("meta").unwrap_or(v);
    meta.pointer("/finalAssistantVisibleText")
        .or_else(|| v.pointer("/result/meta/finalAssistantVisibleText"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| v.to_string())
}

/// Starts `clawctx gateway` (lossless, no model) on `port` (0: any); returns it and its URL.
pub(crate) async fn clawctx_gateway(state: &Path, port: u16) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args(["gateway", "--port", &port.to_string()])
        .env("CLAWCTX_STATE_DIR", state)
        .env_remove("CLAWCTX_GATEWAY_TOKEN")
        .env_remove("CLAWCTX_GATEWAY_PORT")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_MODEL")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    tokio::time::timeout(Duration::from_secs(120), stdout.read_line(&mut first))
        .await
        .expect("the clawctx gateway starts")
        .unwrap();
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {first:?}"))
        .to_owned();
    // Keep reading its stdout so it never blocks on a full pipe.
    tokio::spawn(async move {
        let mut line = String::new();
        while stdout.read_line(&mut line).await.is_ok_and(|n| n > 0) {
            line.clear();
        }
    });
    (child, url)
}

pub(crate) async fn stop(mut child: Child) {
    if let Some(pid) = child.id() {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
    }
    let _ = tokio::time::timeout(Duration::from_secs(60), child.wait()).await;
    let _ = child.start_kill();
}

/// The store's rows holding `marker` (lossless full-text search), as (role, snippet).
async fn stored(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    marker: &str,
) -> Vec<(String, String)> {
    let r: Value = http
        .post(format!("{url}/v1/engine/lcm_grep"))
        .json(&json!({"sessionKey": key, "query": marker, "target": "messages", "limit": 50}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    r["hits"]
        .as_array()
        .unwrap_or_else(|| panic!("lcm_grep answered {r:#}"))
        .iter()
        .map(|h| {
            (
                h["role"].as_str().unwrap_or_default().to_owned(),
                h["snippet"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openclaw_2026_9_runs_on_clawctx_through_the_bridge() {
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

    // The mock model.
    let scratch_dir = tempfile::tempdir().unwrap();
    let model_log = scratch_dir.path().join("model.jsonl");
    let mut mock = Command::new("python3")
        .arg(repo("crates/cli/tests/openclaw/mock_model.py"))
        .arg(&model_log)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3");
    let mut line = String::new();
    BufReader::new(mock.stdout.take().unwrap())
        .read_line(&mut line)
        .await
        .unwrap();
    let model_port: u16 = line
        .trim()
        .strip_prefix("listening ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the mock model said {line:?}"));

    // The clawctx gateway: lossless, no model.
    let gw_state = tempfile::tempdir().unwrap();
    std::fs::write(
        gw_state.path().join("clawctx.json"),
        json!({"plugins": {"slots": {"contextEngine": "lossless"}}}).to_string(),
    )
    .unwrap();
    let (gateway, url) = clawctx_gateway(gw_state.path(), 0).await;
    let gw_port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let http = reqwest::Client::new();

    // A private OpenClaw.
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
                    "contextWindow": 40000, "maxTokens": 1024}]}}},
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
    let key = "agent:main:invoice";

    // 1. History before the bridge, on OpenClaw's own engine.
    let (v, out) = oc
        .turn(
            true,
            key,
            "m1before the invoice number is INV-4242, keep it",
        )
        .await;
    assert!(reply_of(&v).contains("m1before"), "{out}");

    // 2. The bridge, installed as its README says.
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
        assert_eq!(
            c.pointer("/plugins/slots/contextEngine"),
            Some(&json!("clawctx")),
            "the installer selects the bridge: {c:#}"
        );
        c["plugins"]["entries"]["clawctx"]["config"] =
            json!({"gatewayUrl": url, "timeoutMs": 20000});
    });
    let out = oc.openclaw(&["doctor", "--json"]).await;
    let start = out.stdout.find('{').unwrap_or(0);
    let doctor: Value = serde_json::from_str(&out.stdout[start..])
        .unwrap_or_else(|e| panic!("doctor --json ({e}):\n{out}"));
    for f in doctor["findings"].as_array().cloned().unwrap_or_default() {
        let text = f.to_string();
        assert!(
            !text.contains("clawctx") && !text.contains("contextEngine"),
            "openclaw doctor has a problem with the bridge: {f:#}"
        );
    }

    // 3. A turn through the bridge: the earlier turn reaches the store.
    let (v, out) = oc
        .turn(true, key, "m2bridge hello through the bridge")
        .await;
    assert!(reply_of(&v).contains("m2bridge"), "{out}");
    assert!(
        out.stderr.contains("owns compaction") || !out.stderr.contains("legacy"),
        "the bridge's engine ran the turn:\n{out}"
    );

    // 4. Recall tools: offered, and answering from the store.
    let prompt = "m3recall what was the invoice number?\nCALL_TOOL tool_call {\"id\": \"lcm_grep\", \"args\": {\"query\": \"INV-4242\"}}";
    let (v, out) = oc.turn(true, key, prompt).await;
    let reply = reply_of(&v);
    assert!(
        reply.contains("tool answered m3recall")
            && reply.contains("INV-4242")
            && reply.contains("msg_"),
        "lcm_grep answered from the store: {reply}\n{out}"
    );

    // 5. The clawctx gateway goes away: the turn is still answered, and caught up later.
    stop(gateway).await;
    let (v, out) = oc
        .turn(true, key, "m4outage answered while clawctx is down")
        .await;
    assert!(reply_of(&v).contains("m4outage"), "{out}");
    let (gateway, url2) = clawctx_gateway(gw_state.path(), gw_port).await;
    assert_eq!(url2, url);
    let (v, out) = oc.turn(true, key, "m5back the gateway is back").await;
    assert!(reply_of(&v).contains("m5back"), "{out}");

    // 6. A provider overflow: OpenClaw forces a budget compaction and asks again.
    let (v, out) = oc
        .turn(
            true,
            key,
            "m7overflow this request overflows once OVERFLOW_ONCE",
        )
        .await;
    assert!(
        reply_of(&v).contains("m7overflow"),
        "the overflow was recovered: {}\n{out}",
        reply_of(&v)
    );
    let log = std::fs::read_to_string(&model_log).unwrap();
    assert!(
        log.lines().filter(|l| l.contains("m7overflow")).count() >= 2,
        "asked, overflowed, compacted, asked again"
    );

    // 7. OpenClaw's gateway mode loads the bridge; `sessions compact` runs the engine's.
    let port = oc_gateway_port.to_string();
    let mut oc_gateway = oc
        .command(
            "openclaw",
            &["gateway", "run", "--port", &port, "--bind", "loopback"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ready = async {
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", oc_gateway_port))
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(180), ready)
        .await
        .expect("openclaw gateway listens");
    let gw_key = "agent:main:gwmode";
    let (v, out) = oc
        .turn(false, gw_key, "m6gateway through OpenClaw's gateway")
        .await;
    assert!(reply_of(&v).contains("m6gateway"), "{out}");
    let out = oc.openclaw(&["sessions", "compact", key, "--json"]).await;
    assert_eq!(out.code, 0, "{out}");
    let _ = oc_gateway.start_kill();
    let _ = oc_gateway.wait().await;

    // Every turn's prompt and reply in the store exactly once.
    for (k, marker) in [
        (key, "m1before"),
        (key, "m2bridge"),
        (key, "m3recall"),
        (key, "m4outage"),
        (key, "m5back"),
        (key, "m7overflow"),
        (gw_key, "m6gateway"),
    ] {
        let rows = stored(&http, &url, k, marker).await;
        // The turn's own rows: its prompt, and the mock's reply naming its marker (a later
        // turn's recall output quotes earlier turns: not theirs).
        let users = rows
            .iter()
            .filter(|(r, s)| r == "user" && !s.contains("hits"))
            .count();
        let assistants = rows
            .iter()
            .filter(|(r, s)| {
                r == "assistant"
                    && (s.contains(&format!("reply to {marker}"))
                        || s.contains(&format!("tool answered {marker}")))
            })
            .count();
        if marker == "m7overflow" {
            // After the overflow OpenClaw keeps the first prompt ("orphaned") and sends it again
            // as a queued message: two transcript messages, each stored once.
            assert!((1..=2).contains(&users), "{marker}: {rows:#?}");
        } else {
            assert_eq!(
                users, 1,
                "{marker}: the prompt once in the store: {rows:#?}"
            );
        }
        assert_eq!(
            assistants, 1,
            "{marker}: the reply once in the store: {rows:#?}"
        );
    }

    // No request to the model carried a block twice; the recall tools were offered.
    let log = std::fs::read_to_string(&model_log).unwrap();
    let mut offered = false;
    for (i, line) in log.lines().enumerate() {
        let text = line.replace("\\\"", "\"");
        assert!(
            text.matches("<recalled note=").count() <= 1,
            "request {i} carries the recalled block twice"
        );
        let mut ids: Vec<&str> = text
            .match_indices("<summary id=\"")
            .map(|(at, _)| &text[at..(at + 24).min(text.len())])
            .collect();
        let n = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), n, "request {i} carries a summary twice");
        offered |= line.contains("lcm_grep");
    }
    assert!(offered, "the recall tools were offered to the model");
    stop(gateway).await;
    let _ = mock.start_kill();
}
