//! A PostgreSQL outage under two serving gateways (issue #27 item 2): a throwaway cluster of
//! this test's own (`scripts/pg-throwaway`) is stopped for ten seconds while both nodes take a
//! bounded load, then started again, and no gateway is restarted. During the outage every turn
//! is still answered (from the transcript; its commit waits in the node's outbox), the engine
//! is not quarantined, and `/readyz` answers 503 naming the database (never its password).
//! Afterwards both nodes are ready again by themselves, every acknowledged turn is in
//! PostgreSQL exactly once, and what one node accepted during the outage is visible from the
//! other.
//!
//! Runs where the other PostgreSQL tests run (`CLAWCTX_TEST_PG_URL` set, which says the
//! machine has a PostgreSQL server; under `CI=true` it must), since it needs `initdb`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use clawctx_test_support::pg::{test_database_at, test_url};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The variable the gateways' config names for the store's URL (no password in any file).
const DB_VAR: &str = "CLAWCTX_TEST_LCM_DATABASE";

/// A throwaway cluster, stopped and removed when dropped.
struct Cluster {
    dir: PathBuf,
    url: String,
    password: String,
    port: u16,
    _parent: tempfile::TempDir,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pg-throwaway")
}

fn pg_throwaway(verb: &str, dir: &Path) {
    let out = std::process::Command::new("bash")
        .arg(script())
        .arg(verb)
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pg-throwaway {verb} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Cluster {
    fn start() -> Cluster {
        // Short: the cluster's unix socket lives in it.
        let parent = tempfile::Builder::new()
            .prefix("pgout")
            .tempdir_in("/tmp")
            .unwrap();
        let dir = parent.path().join("c");
        pg_throwaway("start", &dir);
        let url = std::fs::read_to_string(dir.join("url"))
            .unwrap()
            .trim()
            .to_owned();
        let rest = url.strip_prefix("postgres://clawctx:").unwrap();
        let (password, rest) = rest.split_once("@127.0.0.1:").unwrap();
        let port = rest.split_once('/').unwrap().0.parse().unwrap();
        Cluster {
            password: password.to_owned(),
            port,
            url,
            dir,
            _parent: parent,
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg(script())
            .arg("stop")
            .arg(&self.dir)
            .output();
    }
}

/// The model: every request answered at once (chat and summaries alike).
struct Model;

impl Respond for Model {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let system = body
            .pointer("/messages/0/content")
            .and_then(Value::as_str)
            .unwrap_or("");
        let text = if system == clawctx_model::summarizer::SYSTEM_PROMPT.trim() {
            "Earlier turns: the user sent numbered notes and the assistant acknowledged each."
        } else {
            "noted"
        };
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-mock",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        }))
    }
}

fn write_config(state: &Path, server: &MockServer) {
    let config = json!({
        "models": {"providers": {"mock": {"api": "openai-completions", "baseUrl": format!("{}/v1", server.uri()),
            "models": [{"id": "test-model", "contextWindow": 32000, "maxTokens": 256}], "maxRetries": 0}}},
        "agents": {"defaults": {"model": {"primary": "mock/test-model"}}},
        "plugins": {
            "slots": {"contextEngine": "lossless"},
            "entries": {"lossless": {"config": {"databaseEnv": DB_VAR, "promptRecallShare": 0}}}
        }
    });
    std::fs::write(state.join("clawctx.json"), config.to_string()).unwrap();
}

/// A gateway child process and the URL it printed.
struct Node {
    _child: Child,
    url: String,
}

async fn spawn_node(state: &Path, db_url: &str) -> Node {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clawctx"));
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
    .env(DB_VAR, db_url)
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit())
    .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    let read = tokio::time::timeout(Duration::from_secs(120), stdout.read_line(&mut first)).await;
    assert!(
        matches!(read, Ok(Ok(n)) if n > 0),
        "the gateway printed no address (its stderr is above)"
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
    Node { _child: child, url }
}

/// One turn in session `key` on `node`: the status and the body (with the `x-clawctx-commit`
/// header's value appended after a newline when there is one).
async fn turn(http: &reqwest::Client, node: &str, key: &str, prompt: &str) -> (u16, String) {
    let r = http
        .post(format!("{node}/v1/chat/completions"))
        .header("x-clawctx-session", key)
        .json(&json!({"messages": [{"role": "user", "content": prompt}]}))
        .send()
        .await
        .unwrap();
    let commit = r
        .headers()
        .get("x-clawctx-commit")
        .map(|v| format!("\nx-clawctx-commit: {}", v.to_str().unwrap_or("")))
        .unwrap_or_default();
    (
        r.status().as_u16(),
        r.text().await.unwrap_or_default() + &commit,
    )
}

/// `/readyz`: the status and the body.
async fn readyz(http: &reqwest::Client, node: &str) -> (u16, Value) {
    let r = http.get(format!("{node}/readyz")).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_gateways_ride_out_a_postgres_outage_without_a_restart() {
    if test_url().is_none() {
        return;
    }
    let cluster = Cluster::start();
    // The store's database, made on this test's own cluster.
    let db = test_database_at(&cluster.url, "pg_outage");
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(Model)
        .mount(&server)
        .await;
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write_config(dir_a.path(), &server);
    write_config(dir_b.path(), &server);
    let a = spawn_node(dir_a.path(), &db.url).await;
    let b = spawn_node(dir_b.path(), &db.url).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let nodes = [(&a.url, "agent:main:on-a"), (&b.url, "agent:main:on-b")];
    let mut acknowledged: Vec<String> = Vec::new();
    let mut n = 0;
    let mut one_round = |phase: &'static str| {
        n += 1;
        let i = n;
        let http = http.clone();
        let nodes: Vec<(String, &'static str)> =
            nodes.iter().map(|(u, k)| ((*u).clone(), *k)).collect();
        async move {
            let mut done = Vec::new();
            for (url, key) in nodes {
                let p = format!("note {phase} {i} for {key}: the release gate checks latency");
                let (status, body) = turn(&http, &url, key, &p).await;
                assert_eq!(status, 200, "{phase}: a turn on {url} was refused: {body}");
                // The client can tell a turn the engine does not have yet.
                assert_eq!(
                    body.ends_with("x-clawctx-commit: waiting"),
                    phase == "during",
                    "{phase}: {body}"
                );
                done.push(p);
            }
            done
        }
    };
    for _ in 0..3 {
        acknowledged.extend(one_round("before").await);
    }
    for (url, _) in nodes {
        let (status, body) = readyz(&http, url).await;
        assert_eq!(status, 200, "{url} is ready before: {body}");
    }

    // The outage: ten seconds of load with the server stopped.
    pg_throwaway("pause", &cluster.dir);
    let started = Instant::now();
    let mut during: Vec<String> = Vec::new();
    let mut not_ready: Vec<Value> = Vec::new();
    while started.elapsed() < Duration::from_secs(10) {
        during.extend(one_round("during").await);
        for (url, _) in nodes {
            let (status, body) = readyz(&http, url).await;
            if status == 503 {
                not_ready.push(body);
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(!during.is_empty());
    assert!(
        !not_ready.is_empty(),
        "/readyz never said 503 while the database was down"
    );
    for body in &not_ready {
        let problem = body["problem"].as_str().unwrap_or("");
        assert!(
            problem.contains(&format!("127.0.0.1:{}", cluster.port)),
            "/readyz names the database: {body}"
        );
        assert!(
            !body.to_string().contains(&cluster.password),
            "the password is never shown: {body}"
        );
        assert_eq!(
            body["quarantined"],
            json!([]),
            "an outage is not a plugin fault: {body}"
        );
    }
    pg_throwaway("resume", &cluster.dir);

    // Both nodes recover by themselves: ready again, the waiting commits delivered.
    let resumed = Instant::now();
    let deadline = resumed + Duration::from_secs(90);
    for (url, _) in nodes {
        loop {
            let (status, body) = readyz(&http, url).await;
            if status == 200 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{url} did not become ready after the database came back: {body}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    let ready_after = resumed.elapsed();
    for _ in 0..2 {
        acknowledged.extend(one_round("after").await);
    }
    acknowledged.extend(during.iter().cloned());

    for p in &acknowledged {
        let stored = db.scalar(&format!(
            "SELECT count(*) FROM messages WHERE text = '{}'",
            p.replace('\'', "''")
        ));
        assert_eq!(
            stored, 1,
            "an acknowledged turn is stored {stored} times: {p}"
        );
    }

    eprintln!(
        "outage figures: {} turns acknowledged in all, {} of them during the 10 s outage; \
         /readyz said 503 {} times during it; both nodes ready {} ms after the server was back",
        acknowledged.len(),
        during.len(),
        not_ready.len(),
        ready_after.as_millis()
    );

    // What node A accepted during the outage is visible from node B.
    let from_a = during
        .iter()
        .find(|p| p.ends_with("agent:main:on-a: the release gate checks latency"))
        .unwrap();
    let r = http
        .post(format!("{}/v1/engine/assemble", b.url))
        .json(&json!({
            "sessionId": "seen-from-b",
            "sessionKey": "agent:main:on-a",
            "messages": [],
            "tokenBudget": 30000
        }))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let body = r.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(from_a.as_str()),
        "node B's engine assembles node A's outage turn from the store: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_started_while_its_database_is_down_is_not_ready_and_says_why() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(Model)
        .mount(&server)
        .await;
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &server);
    let url = format!("postgres://clawctx:hunter2-not-shown@127.0.0.1:{port}/store");
    let node = spawn_node(dir.path(), &url).await;
    let http = reqwest::Client::new();
    let (status, body) = readyz(&http, &node.url).await;
    assert_eq!(status, 503, "{body}");
    let problem = body["problem"].as_str().unwrap_or("");
    assert!(
        problem.contains(&format!("127.0.0.1:{port}")) && problem.contains("lossless"),
        "{body}"
    );
    assert!(!body.to_string().contains("hunter2"), "{body}");
    // The turn is still answered (by legacy, from the transcript).
    let (status, reply) = turn(&http, &node.url, "agent:main:main", "hello").await;
    assert_eq!(status, 200, "{reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_started_while_its_database_is_down_recovers_when_it_comes_back() {
    if test_url().is_none() {
        return;
    }
    let cluster = Cluster::start();
    let db = test_database_at(&cluster.url, "pg_down_at_start");
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(Model)
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &server);
    pg_throwaway("pause", &cluster.dir);
    let node = spawn_node(dir.path(), &db.url).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let (status, body) = readyz(&http, &node.url).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["quarantined"], json!([]), "{body}");
    let prompt = "note while the database was down at start: the release gate checks latency";
    let (status, reply) = turn(&http, &node.url, "agent:main:main", prompt).await;
    assert_eq!(status, 200, "{reply}");
    assert!(reply.ends_with("x-clawctx-commit: waiting"), "{reply}");

    pg_throwaway("resume", &cluster.dir);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (status, body) = readyz(&http, &node.url).await;
        if status == 200 {
            assert_eq!(body["engine"], "lossless", "{body}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the gateway did not become ready after the database came back: {body}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let stored = db.scalar(&format!(
        "SELECT count(*) FROM messages WHERE text = '{prompt}'"
    ));
    assert_eq!(
        stored, 1,
        "the turn accepted while the database was down reached it"
    );
}

/// Issue #39 item 2, on one gateway whose PostgreSQL is stopped then started again: the
/// engine API's writes answer 503 with `Retry-After` (not 500) while the database is down; the
/// turn trace of a turn assembled meanwhile names the engine that really served it (`legacy`,
/// in place of `lossless`, and why); and once the database answers again, `/readyz` delivers the
/// waiting commit when it is asked and says 200 at once, without waiting for the retry task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_answers_503_to_writes_traces_the_fallback_and_readyz_turns_when_asked() {
    if test_url().is_none() {
        return;
    }
    let cluster = Cluster::start();
    let db = test_database_at(&cluster.url, "pg_outage_answers");
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(Model)
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &server);
    let node = spawn_node(dir.path(), &db.url).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let key = "agent:main:outage-answers";
    let (status, body) = turn(&http, &node.url, key, "note before: the gate is at 40 ms").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(readyz(&http, &node.url).await.0, 200);

    pg_throwaway("pause", &cluster.dir);
    // Engine-API writes: 503 with Retry-After, the store named, never its password.
    for (route, body) in [
        (
            "ingest",
            json!({"sessionId": "api-1", "sessionKey": "agent:main:api",
                   "message": {"role": "user", "content": "written while the database is down", "timestamp": 1}}),
        ),
        (
            "ingestBatch",
            json!({"sessionId": "api-1", "sessionKey": "agent:main:api",
                   "messages": [{"role": "user", "content": "a batch while it is down", "timestamp": 2}]}),
        ),
    ] {
        let r = http
            .post(format!("{}/v1/engine/{route}", node.url))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let retry_after = r
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = r.text().await.unwrap();
        assert_eq!(status, 503, "{route}: {text}");
        assert!(
            retry_after.is_some_and(|v| v.parse::<u64>().is_ok()),
            "{route}: Retry-After"
        );
        let e: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(e["error"]["code"], "store_unavailable", "{text}");
        assert!(
            text.contains(&format!("127.0.0.1:{}", cluster.port)),
            "{route} names the database: {text}"
        );
        assert!(!text.contains(&cluster.password), "{text}");
    }
    // A turn meanwhile is answered, assembled by legacy from the transcript.
    let (status, body) = turn(&http, &node.url, key, "note during: the gate is at 45 ms").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.ends_with("x-clawctx-commit: waiting"), "{body}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let traced = loop {
        let r = http
            .get(format!("{}/v1/dashboard/trace/turn", node.url))
            .query(&[("key", key)])
            .send()
            .await
            .unwrap();
        let v: Value = r.json().await.unwrap_or(Value::Null);
        if v["turn"] == 2 {
            break v;
        }
        assert!(Instant::now() < deadline, "the turn was not traced: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let engine = &traced["engine"];
    assert_eq!(engine["id"], "legacy", "the engine that served: {traced}");
    assert_eq!(engine["selected"], "lossless", "{traced}");
    let reason = engine["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("lossless cannot reach its store") && reason.contains("legacy answered"),
        "{traced}"
    );
    assert!(!traced.to_string().contains(&cluster.password));
    assert_eq!(readyz(&http, &node.url).await.0, 503);

    pg_throwaway("resume", &cluster.dir);
    // Once the store answers again (a read through the engine's store), /readyz says 200 the
    // first time it is asked: it delivers the waiting commit itself.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let r = http
            .get(format!("{}/v1/sessions", node.url))
            .send()
            .await
            .unwrap();
        if r.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the store did not come back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, body) = readyz(&http, &node.url).await;
    assert_eq!(status, 200, "ready as soon as the store answers: {body}");
    let stored =
        db.scalar("SELECT count(*) FROM messages WHERE text = 'note during: the gate is at 45 ms'");
    assert_eq!(stored, 1, "the waiting commit was delivered, once");
}
