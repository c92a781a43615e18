//! Issue #17 item 4 end to end: the OpenClaw bridge plugin (`sdk/openclaw-bridge`) installed into
//! clawctx itself with `plugins install -l` (the host loads OpenClaw plugins unchanged) against a
//! live `clawctx gateway` on loopback whose slot is `lossless`, so a turn goes host → bridge →
//! gateway → lossless. With the gateway stopped, the reply still arrives, from `legacy`, with a
//! quarantine naming the bridge. A second process on the same session bootstraps with a
//! transcript the gateway may not read, and the bridge stays in charge. A failing test prints
//! the commands' output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::clawctx;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// The gateway's token, which the bridge sends and no output may show.
const TOKEN: &str = "e2e-secret-4417";

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

fn write_config(state: &Path, server: &MockServer, extra: Value) {
    let mut config = json!({
        "models": {"providers": {"mock": {"api": "openai-completions", "baseUrl": format!("{}/v1", server.uri()),
            "models": [{"id": "m", "contextWindow": 16000, "maxTokens": 512}], "maxRetries": 0}}},
        "agents": {"defaults": {"model": {"primary": "mock/m"}}}
    });
    if let (Some(c), Value::Object(e)) = (config.as_object_mut(), extra) {
        c.extend(e);
    }
    std::fs::write(state.join("clawctx.json"), config.to_string()).unwrap();
}

fn json_out(out: &str, err: &str) -> Value {
    serde_json::from_str(out)
        .unwrap_or_else(|e| panic!("{e}:\n--- stdout\n{out}\n--- stderr\n{err}"))
}

#[tokio::test]
async fn a_turn_goes_host_bridge_gateway_lossless_and_falls_back_to_legacy_when_the_gateway_is_down(
) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Pong through the bridge."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}
        })))
        .mount(&server)
        .await;

    // The gateway: lossless, on loopback, port chosen by the OS.
    let gw_dir = tempfile::tempdir().unwrap();
    write_config(
        gw_dir.path(),
        &server,
        json!({"plugins": {"slots": {"contextEngine": "lossless"}}, "gateway": {"auth": {"token": TOKEN}}}),
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args(["gateway", "--port", "0"])
        .env("CLAWCTX_STATE_DIR", gw_dir.path())
        .env_remove("CLAWCTX_GATEWAY_TOKEN")
        .env_remove("CLAWCTX_GATEWAY_PORT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    let read = tokio::time::timeout(Duration::from_secs(120), stdout.read_line(&mut first)).await;
    if !matches!(read, Ok(Ok(n)) if n > 0) {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), e.read_to_string(&mut err)).await;
        }
        panic!("the gateway printed no address\n--- stderr\n{err}");
    }
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {first:?}"))
        .to_owned();
    let http = reqwest::Client::new();
    let unauthorized = http
        .get(format!("{url}/v1/engine/info"))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorized.status(), 401, "the gateway wants its token");
    let info: Value = http
        .get(format!("{url}/v1/engine/info"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(info["info"]["id"], "lossless", "{info}");

    // The host: the bridge installed, pointed at the gateway, its engine selected.
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &server, json!({}));
    let bridge = repo("sdk/openclaw-bridge");
    let (code, out, err) = clawctx(
        dir.path(),
        &["plugins", "install", "-l", bridge.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(r#"set plugins.slots.contextEngine = "clawctx""#),
        "install selects the engine the bridge registers, which is its plugin id:\n{out}\n{err}"
    );
    for (key, value) in [
        ("plugins.entries.clawctx.config.gatewayUrl", url.as_str()),
        ("plugins.entries.clawctx.config.token", TOKEN),
        ("plugins.entries.clawctx.config.timeoutMs", "20000"),
    ] {
        let (code, out, err) = clawctx(dir.path(), &["config", "set", key, value]);
        assert_eq!(code, 0, "config set {key}: {out}\n{err}");
    }

    let (code, out, err) = clawctx(
        dir.path(),
        &["run", "remember the walrus named Ferdinand", "--json"],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let v = json_out(&out, &err);
    assert_eq!(v["reply"], "Pong through the bridge.", "{v:#}\n{err}");
    assert_eq!(
        v["engine"], "clawctx",
        "the bridge is in charge: {v:#}\n{err}"
    );
    assert!(
        v["quarantines"].as_array().is_none_or(|q| q.is_empty()),
        "{v:#}\n{err}"
    );

    // The gateway's lossless store holds the turn, under the host's session key (the gateway's
    // own session list is of its chat sessions, which this turn is not).
    let key = "agent:main:main";
    let grep: Value = http
        .post(format!("{url}/v1/engine/lcm_grep"))
        .bearer_auth(TOKEN)
        .json(&json!({"sessionKey": key, "query": "Ferdinand"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        grep.to_string().contains("walrus named Ferdinand"),
        "the turn is in the lossless store: {grep:#}\n{err}"
    );

    // A second process on the same session: the host bootstraps the engine with its own
    // transcript, a file in the host's state dir that the gateway may not read (issue #39 item
    // 1). The gateway refuses it (403 path_not_allowed), the bridge answers `bootstrapped:
    // false`, and the bridge stays in charge.
    let (code, out, err) = clawctx(dir.path(), &["run", "what is the walrus called?", "--json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let v = json_out(&out, &err);
    assert_eq!(v["engine"], "clawctx", "{v:#}\n{err}");
    assert!(
        v["quarantines"].as_array().is_none_or(|q| q.is_empty()),
        "a refused bootstrap is not an engine failure: {v:#}\n{err}"
    );

    // The gateway stops: the reply still arrives, from legacy, the bridge quarantined.
    let pid = child.id().unwrap();
    let ok = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("the gateway exits")
        .unwrap();
    assert_eq!(status.code(), Some(0));

    let (code, out, err) = clawctx(dir.path(), &["run", "are you there?", "--json"]);
    assert_eq!(code, 0, "the reply must still arrive:\n{out}\n{err}");
    let v = json_out(&out, &err);
    assert_eq!(v["reply"], "Pong through the bridge.", "{v:#}");
    assert_eq!(v["engine"], "legacy", "{v:#}\n{err}");
    let q = &v["quarantines"][0];
    assert_eq!(q["engineId"], "clawctx", "{v:#}\n{err}");
    assert_eq!(q["owner"], "plugin:clawctx", "{v:#}");
    assert_eq!(
        q["operation"], "factory",
        "info is fetched when the engine is created: {v:#}"
    );
    let reason = q["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!("{url}/v1/engine/info")) && reason.contains("unreachable"),
        "the failure names the gateway's URL and the cause: {v:#}"
    );
    assert!(
        !out.contains(TOKEN) && !err.contains(TOKEN),
        "the token is never shown:\n{out}\n{err}"
    );
}
