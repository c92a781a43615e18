//! A gateway on loopback over a temp state dir with a pre-filled lossless session, for the
//! dashboard's HTTP and browser tests: the session's transcript is written the way the session
//! store reads it (a planted message early, tool calls and results along the way), then one
//! chat turn makes `lossless` bootstrap from it, store it and compact it into a DAG.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use clawctx_engine::ContextEngineRegistry;
use clawctx_gateway::{GatewayConfig, Token};
use clawctx_protocol::AgentMessage;
use clawctx_runtime::AgentRuntime;
use clawctx_transcript::SessionFile;
use serde_json::{json, Value};

use super::common::{serve, text, MockLlm, Serve, Served};

/// The planted message's distinctive words.
pub const PLANTED: &str = "heliotrope quokka-7731";
/// The planted message's text.
pub const PLANTED_TEXT: &str =
    "Remember this: the launch code for project heliotrope quokka-7731 is 4242.";

/// A word only the planted tool call's arguments hold (message 10, folded in the transcript).
pub const PLANTED_CALL_WORD: &str = "wolframite";
/// A word only the planted tool result holds (message 11, folded in the transcript).
pub const PLANTED_RESULT_WORD: &str = "tourmaline";

/// A running gateway.
pub struct Fixture {
    pub url: String,
    pub http: reqwest::Client,
    pub llm: MockLlm,
    pub runtime: AgentRuntime,
    pub registry: Arc<ContextEngineRegistry>,
    pub state: tempfile::TempDir,
    pub token: Option<String>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    join: Option<tokio::task::JoinHandle<clawctx_gateway::Result<()>>>,
}

/// What to start.
pub struct Setup {
    pub engine: &'static str,
    pub token: Option<&'static str>,
    /// Merged into the host config's top level.
    pub extra_config: Value,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            engine: "lossless",
            token: None,
            extra_config: small_chunks(),
        }
    }
}

/// Lossless settings that make a few hundred messages a DAG of several layers.
pub fn small_chunks() -> Value {
    json!({"plugins": {"entries": {"lossless": {"config": {
        "leafChunkTokens": 1000, "leafTargetTokens": 150, "condensedTargetTokens": 300
    }}}}})
}

/// The default setup with the lossless store in a fresh PostgreSQL database
/// (`plugins.entries.lossless.config.database`; the database is dropped with the returned
/// value), or `None` when no server is configured (`CLAWCTX_TEST_PG_URL`): the test skips,
/// except under `CI=true`, where a missing server fails it.
pub fn on_postgres(hint: &str) -> Option<(clawctx_test_support::pg::TestDatabase, Setup)> {
    let db = clawctx_test_support::pg::test_database(hint)?;
    let mut extra = small_chunks();
    extra["plugins"]["entries"]["lossless"]["config"]["database"] = json!(db.url);
    Some((
        db,
        Setup {
            extra_config: extra,
            ..Setup::default()
        },
    ))
}

/// The `n`th pre-filled message of a session: the planted one at 3, a tool call and its result
/// every 50 (the first pair with a planted word each, [`PLANTED_CALL_WORD`] in the call's
/// arguments and [`PLANTED_RESULT_WORD`] in the result), plain user and assistant lines otherwise.
pub fn prefill_message(n: usize) -> AgentMessage {
    let v = if n == 3 {
        json!({"role": "user", "content": PLANTED_TEXT})
    } else if n == 10 {
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "Let me look at the first shipment."},
            {"type": "toolCall", "id": "call_10", "name": "read_manifest",
             "arguments": {"shipment": n, "note": format!("crates of {PLANTED_CALL_WORD} ore")}}
        ]})
    } else if n == 11 {
        json!({"role": "toolResult", "toolCallId": "call_10", "toolName": "read_manifest",
               "content": [{"type": "text", "text": format!("manifest 10: 12 pallets of {PLANTED_RESULT_WORD} and copper wire, bay 11")}], "isError": false})
    } else if n % 50 == 10 {
        json!({"role": "assistant", "content": [
            {"type": "text", "text": format!("Let me look at shipment {n}.")},
            {"type": "toolCall", "id": format!("call_{n}"), "name": "read_manifest", "arguments": {"shipment": n}}
        ]})
    } else if n % 50 == 11 {
        json!({"role": "toolResult", "toolCallId": format!("call_{}", n - 1), "toolName": "read_manifest",
               "content": [{"type": "text", "text": format!("manifest {}: 12 pallets of copper wire, bay {}", n - 1, n % 17)}], "isError": false})
    } else {
        let text = format!(
            "message {n}: the shipment for order {} left the warehouse in bay {} at {}:{:02}",
            1000 + n * 7 % 9973,
            n % 17,
            8 + n % 10,
            n % 60
        );
        if n % 2 == 0 {
            json!({"role": "user", "content": text})
        } else {
            json!({"role": "assistant", "content": [{"type": "text", "text": text}]})
        }
    };
    serde_json::from_value(v).unwrap()
}

fn merge(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v.clone(),
    }
}

pub async fn start(setup: Setup) -> Fixture {
    let llm = MockLlm::start().await;
    let state = tempfile::tempdir().unwrap();
    let mut config = llm.config(setup.engine);
    merge(&mut config, &setup.extra_config);
    let mut settings = GatewayConfig::loopback(0);
    settings.token = setup.token.map(Token::new);
    let Served {
        url,
        runtime,
        registry,
        stop,
        join,
        ..
    } = serve(Serve {
        gateway: settings,
        ..Serve::new(config, state.path(), setup.engine)
    })
    .await;
    // Loading the 10,000-message session's views takes longer than a turn.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    Fixture {
        url,
        http,
        llm,
        runtime,
        registry,
        state,
        token: setup.token.map(str::to_owned),
        stop,
        join,
    }
}

impl Fixture {
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    fn auth(&self, r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.auth(self.http.get(self.at(path)))
            .send()
            .await
            .unwrap()
    }

    pub async fn get_json(&self, path: &str) -> Value {
        let r = self.get(path).await;
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        assert!(status.is_success(), "GET {path}: {status} {body}");
        body
    }

    pub async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.auth(self.http.post(self.at(path)))
            .json(body)
            .send()
            .await
            .unwrap()
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Value {
        let r = self.post(path, body).await;
        let status = r.status();
        let answer: Value = r.json().await.unwrap();
        assert!(status.is_success(), "POST {path}: {status} {answer}");
        answer
    }

    /// Writes `n` messages into `key`'s transcript (before its first turn).
    pub fn prefill(&self, key: &str, n: usize) {
        let s = self.runtime.session(key).unwrap();
        let mut file = if s.transcript_path.exists() {
            SessionFile::open(&s.transcript_path).unwrap()
        } else {
            SessionFile::create(&s.transcript_path, &s.entry.session_id, "/").unwrap()
        };
        for m in 0..n {
            file.append_message(prefill_message(m)).unwrap();
        }
    }

    /// One chat turn on `key` (the model answers `reply`).
    pub async fn turn(&self, key: &str, prompt: &str, reply: &str) -> Value {
        self.llm.push([text(reply)]);
        let r = self
            .auth(self.http.post(self.at("/v1/chat/completions")))
            .header("x-clawctx-session", key)
            .json(&json!({"model": "m", "messages": [{"role": "user", "content": prompt}]}))
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        assert!(status.is_success(), "turn on {key}: {status} {body}");
        body
    }

    /// A lossless session of `n` pre-filled messages, stored by one turn and compacted by its
    /// background maintenance (waited for: the reply does not wait for it).
    pub async fn lossless_session(&self, key: &str, n: usize) -> Duration {
        let started = Instant::now();
        self.prefill(key, n);
        self.turn(key, "What was the launch code?", "I will look it up.")
            .await;
        self.runtime.wait_for_maintenance().await;
        started.elapsed()
    }

    /// The session's id (for engine API calls).
    pub fn session_id(&self, key: &str) -> String {
        self.runtime.session(key).unwrap().entry.session_id.clone()
    }

    /// Writes a quarantine row of another (gone) process into the persisted mirror.
    pub fn mirror_quarantine(&self, engine: &str, operation: &str, reason: &str) {
        let dir = self.state.path().join("runtime");
        std::fs::create_dir_all(&dir).unwrap();
        let file = json!({
            "version": 1, "owner": "core:context-engine-quarantine-health", "namespace": "runtime-quarantines",
            "quarantines": [{
                "engineId": engine, "owner": format!("plugin:{engine}"), "operation": operation, "reason": reason,
                "failedAtMs": 1_760_000_000_000u64, "processId": 999_999, "processToken": "gone", "processStartTime": 1
            }]
        });
        std::fs::write(
            dir.join("context-engine-quarantines.json"),
            serde_json::to_vec_pretty(&file).unwrap(),
        )
        .unwrap();
    }

    pub async fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(join) = self.join.take() {
            let _ = tokio::time::timeout(Duration::from_secs(60), join).await;
        }
    }
}
