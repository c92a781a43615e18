//! Two `clawctx gateway` processes on one PostgreSQL store, as a deployment with more than one
//! node runs them: concurrent turns in different sessions and in the same session on both
//! nodes, then one node killed (SIGKILL) in the middle of a background compaction (its turn
//! answered while the summary is pending). Afterwards every
//! acknowledged message is stored exactly once, the killed node left no half-written summary,
//! and the surviving node compacts the same conversation (the dead node's compaction lock died
//! with its connection).
//!
//! Needs `CLAWCTX_TEST_PG_URL` (a fresh database is made for the test); skips without it,
//! except under `CI=true`, where `.ci/run` provides the server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clawctx_test_support::pg::{test_database, TestDatabase};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The environment variable the gateways' config names for the store's URL
/// (`databaseEnv`), so the password is in no file.
const DB_VAR: &str = "CLAWCTX_TEST_LCM_DATABASE";

/// The model: chat replies at once; summary requests (the summarizer's system prompt) get a
/// short valid summary, or hang while `slow` is set.
#[derive(Clone, Default)]
struct Model {
    slow: Arc<AtomicBool>,
    summaries_asked: Arc<AtomicUsize>,
}

impl Respond for Model {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let system = body
            .pointer("/messages/0/content")
            .and_then(Value::as_str)
            .unwrap_or("");
        let summary = system == clawctx_model::summarizer::SYSTEM_PROMPT.trim();
        let text = if summary {
            self.summaries_asked.fetch_add(1, Ordering::SeqCst);
            "Earlier turns: the user sent numbered notes and the assistant acknowledged each."
        } else {
            "noted"
        };
        let reply = ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-mock",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        }));
        if summary && self.slow.load(Ordering::SeqCst) {
            reply.set_delay(Duration::from_secs(300))
        } else {
            reply
        }
    }
}

fn write_config(state: &Path, server: &MockServer) {
    let config = json!({
        "models": {"providers": {"mock": {"api": "openai-completions", "baseUrl": format!("{}/v1", server.uri()),
            "models": [{"id": "test-model", "contextWindow": 2400, "maxTokens": 256}], "maxRetries": 0,
            "timeoutMs": 600000}}},
        "agents": {"defaults": {"model": {"primary": "mock/test-model"}}},
        "plugins": {
            "slots": {"contextEngine": "lossless"},
            "entries": {"lossless": {"config": {
                "databaseEnv": DB_VAR,
                "freshTailCount": 4,
                "leafChunkTokens": 400,
                "leafMinFanout": 2,
                "contextThreshold": 0.5,
                "minSalientRetention": 0,
                "promptRecallShare": 0
            }}}
        }
    });
    std::fs::write(state.join("clawctx.json"), config.to_string()).unwrap();
}

/// A gateway child process and the URL it printed.
struct Node {
    child: Child,
    url: String,
}

async fn spawn_node(state: &Path, db: &TestDatabase) -> Node {
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
    .env(DB_VAR, &db.url)
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
    // Keep reading its stdout so it never blocks on a full pipe.
    tokio::spawn(async move {
        let mut line = String::new();
        while matches!(stdout.read_line(&mut line).await, Ok(n) if n > 0) {
            line.clear();
        }
    });
    Node { child, url }
}

impl Node {
    fn kill9(&mut self) {
        let pid = self.child.id().unwrap().to_string();
        let ok = std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .unwrap();
        assert!(ok.success(), "kill -KILL {pid} failed");
    }
}

/// One turn in session `key` on `node`; `Ok` when the gateway answered 200.
async fn turn(http: &reqwest::Client, node: &str, key: &str, prompt: &str) -> Result<(), String> {
    let r = http
        .post(format!("{node}/v1/chat/completions"))
        .header("x-clawctx-session", key)
        .json(&json!({"messages": [{"role": "user", "content": prompt}]}))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = r.status();
    if status == 200 {
        Ok(())
    } else {
        Err(format!("{status}: {}", r.text().await.unwrap_or_default()))
    }
}

/// A prompt long enough that a dozen turns pass the compaction threshold; unique by `tag`.
fn prompt(tag: &str) -> String {
    format!(
        "note {tag}: the deployment pipeline runs the migration step before the cache warmup, \
         then the parser tests, then the release gate checks latency and error budgets again"
    )
}

/// How many stored messages hold exactly `text`.
fn stored(db: &TestDatabase, text: &str) -> i64 {
    db.scalar(&format!(
        "SELECT count(*) FROM messages WHERE text = '{}'",
        text.replace('\'', "''")
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_gateways_share_one_store_and_survive_a_node_killed_mid_compaction() {
    let Some(db) = test_database("two_gateways") else {
        return;
    };
    let server = MockServer::start().await;
    let model = Model::default();
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(model.clone())
        .mount(&server)
        .await;
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write_config(dir_a.path(), &server);
    write_config(dir_b.path(), &server);
    let mut a = spawn_node(dir_a.path(), &db).await;
    let b = spawn_node(dir_b.path(), &db).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()
        .unwrap();

    // Concurrent turns: three sessions, each turn on a node chosen by its number, all
    // sessions at once; and a session both nodes serve at the same moment.
    let mut acknowledged = Vec::new();
    let mut tasks = Vec::new();
    for s in 0..3 {
        let (http, na, nb) = (http.clone(), a.url.clone(), b.url.clone());
        tasks.push(tokio::spawn(async move {
            let mut done = Vec::new();
            for t in 0..10 {
                let node = if (s + t) % 2 == 0 { &na } else { &nb };
                let p = prompt(&format!("s{s}t{t}"));
                turn(&http, node, &format!("agent:main:s{s}"), &p)
                    .await
                    .unwrap();
                done.push(p);
            }
            done
        }));
    }
    for t in 0..6 {
        let (pa, pb) = (
            prompt(&format!("shared-a{t}")),
            prompt(&format!("shared-b{t}")),
        );
        let (ra, rb) = tokio::join!(
            turn(&http, &a.url, "agent:main:shared", &pa),
            turn(&http, &b.url, "agent:main:shared", &pb)
        );
        ra.unwrap();
        rb.unwrap();
        acknowledged.extend([pa, pb]);
    }
    for task in tasks {
        acknowledged.extend(task.await.unwrap());
    }
    for p in &acknowledged {
        assert_eq!(
            stored(&db, p),
            1,
            "acknowledged prompt stored {} times: {p}",
            stored(&db, p)
        );
    }
    assert_eq!(
        db.scalar(
            "SELECT count(*) FROM (SELECT 1 FROM messages GROUP BY conv_id, coalesce(ts, 0), hash HAVING count(*) > 1) d"
        ),
        0,
        "no message identity may be stored twice"
    );
    assert!(
        db.scalar("SELECT count(*) FROM summaries") > 0,
        "the sessions must have compacted"
    );

    // Node A compacts a conversation with a summarizer that never answers; it is killed
    // while waiting.
    model.slow.store(true, Ordering::SeqCst);
    let summaries_before = db.scalar("SELECT count(*) FROM summaries");
    let asked_before = model.summaries_asked.load(Ordering::SeqCst);
    let mut victim_prompts = Vec::new();
    let started = Instant::now();
    let mut hanging = None;
    for t in 0.. {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "node A never started a compaction"
        );
        let p = prompt(&format!("victim{t}"));
        let (http, url) = (http.clone(), a.url.clone());
        let p2 = p.clone();
        let task = tokio::spawn(async move { turn(&http, &url, "agent:main:victim", &p2).await });
        // The turn either answers (no compaction yet) or hangs in the summarizer.
        let waited = Instant::now();
        while !task.is_finished() && model.summaries_asked.load(Ordering::SeqCst) == asked_before {
            assert!(
                waited.elapsed() < Duration::from_secs(60),
                "a turn neither answered nor compacted"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if model.summaries_asked.load(Ordering::SeqCst) > asked_before {
            hanging = Some((task, p));
            break;
        }
        task.await.unwrap().unwrap();
        victim_prompts.push(p);
    }
    let (hung_turn, hung_prompt) = hanging.unwrap();
    // The compaction is background maintenance: the turn in flight is answered while the
    // summary it asked for is still pending (replies never wait for summaries).
    tokio::time::timeout(Duration::from_secs(60), hung_turn)
        .await
        .expect("a turn is answered while its node's compaction waits for the summary")
        .unwrap()
        .unwrap();
    assert!(model.slow.load(Ordering::SeqCst));
    a.kill9();
    let _ = a.child.wait().await;
    assert_eq!(
        db.scalar("SELECT count(*) FROM summaries"),
        summaries_before,
        "the killed compaction must leave no summary behind"
    );
    // The turn was answered, so stored: it is there, once.
    assert_eq!(stored(&db, &hung_prompt), 1);
    for p in &victim_prompts {
        assert_eq!(stored(&db, p), 1, "{p}");
    }

    // Node B compacts the same conversation: the dead node's lock is gone.
    model.slow.store(false, Ordering::SeqCst);
    let victim = db
        .scalar("SELECT id FROM conversations WHERE session_key = 'agent:main:victim' AND active");
    let victim_summaries = |db: &TestDatabase| {
        db.scalar(&format!(
            "SELECT count(*) FROM summaries WHERE conv_id = {victim}"
        ))
    };
    let before = victim_summaries(&db);
    let started = Instant::now();
    let mut t = 0;
    while victim_summaries(&db) == before {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "node B never compacted the conversation node A was compacting when it died"
        );
        let p = prompt(&format!("after{t}"));
        turn(&http, &b.url, "agent:main:victim", &p).await.unwrap();
        assert_eq!(stored(&db, &p), 1);
        t += 1;
    }
    // Every summary has its children, and every frontier item exists.
    assert_eq!(
        db.scalar("SELECT count(*) FROM summaries s WHERE NOT EXISTS (SELECT 1 FROM summary_children c WHERE c.summary_id = s.id)"),
        0
    );
    assert_eq!(
        db.scalar(
            "SELECT count(*) FROM frontier f WHERE (f.kind = 0 AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = f.item_id))
             OR (f.kind = 1 AND NOT EXISTS (SELECT 1 FROM summaries s WHERE s.id = f.item_id))"
        ),
        0
    );
    drop(b);
}
