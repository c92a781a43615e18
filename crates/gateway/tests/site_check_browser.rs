//! A hostile web page in a real browser (issue #27 item 1): headless Chromium (the
//! distribution's `chromium`, or `$CLAWCTX_CHROMIUM`) driven by `playwright-core` from
//! `tests/browser/site_check.test.mjs`, against a gateway on loopback without a token (the
//! default). A page served from another loopback port (a small HTTP server here) sends what an
//! attacker's page sent when the issue was filed (`fetch(gateway + "/v1/chat/completions",
//! {method: "POST", mode: "no-cors", body: new Blob([json])})`, the same as `text/plain`, and a
//! `text/plain` form) and tries to read `/v1/sessions`; a name of the attacker's resolving to
//! 127.0.0.1 (DNS rebinding) tries to read and post as the gateway's own origin. The gateway
//! must refuse all of it: no session is stored and the mock model gets no request. The
//! dashboard must keep working at `http://localhost:PORT` and `http://127.0.0.1:PORT` (its pages,
//! its live stream and its own POST).
//!
//! Without node or Chromium the test says so and passes, except with `CI=true`, where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::browser_support;
use crate::common;

use axum::response::Html;
use axum::routing::get;
use common::{start, text, Opts};
use serde_json::Value;

const KEY: &str = "agent:main:seen";

/// The attacker's page: three writes the browser sends without asking the gateway (no
/// preflight), and a read.
fn attack_page(gateway: &str) -> String {
    r#"<!doctype html>
<html><head><meta charset="utf-8"><title>totally harmless</title></head><body>
<iframe name="sink" id="sink"></iframe>
<form id="f" method="POST" action="GATEWAY/v1/chat/completions" enctype="text/plain" target="sink">
<input name='{"messages":[{"role":"user","content":"csrf: the form","x":"' value='"}]}'>
</form>
<script type="module">
const gw = "GATEWAY";
const results = {};
const body = JSON.stringify({ messages: [{ role: "user", content: "csrf: send me the notes" }] });
try {
  await fetch(gw + "/v1/chat/completions", { method: "POST", mode: "no-cors", body: new Blob([body]) });
  results.noCorsBlob = "sent";
} catch (e) { results.noCorsBlob = "error: " + e; }
try {
  await fetch(gw + "/v1/chat/completions", { method: "POST", mode: "no-cors", headers: { "content-type": "text/plain" }, body });
  results.noCorsText = "sent";
} catch (e) { results.noCorsText = "error: " + e; }
try {
  const r = await fetch(gw + "/v1/sessions");
  results.read = r.status + " " + (await r.text());
} catch (e) { results.read = "blocked: " + e; }
await new Promise((resolve) => {
  document.getElementById("sink").onload = resolve;
  setTimeout(resolve, 5000);
  document.getElementById("f").submit();
});
results.form = "submitted";
window.attackResults = results;
window.attackDone = true;
</script></body></html>"#
        .replace("GATEWAY", gateway)
}

fn sample(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_another_origin_cannot_drive_the_gateway_and_the_dashboard_still_works() {
    let Some((browser_dir, chromium)) = browser_support::ready("site check browser test") else {
        return;
    };

    let mut gw = start(Opts {
        engine: "lossless",
        ..Default::default()
    })
    .await;
    gw.llm.push([text("hello there")]);
    gw.chat(KEY, "hello, remember the blue notebook").await;

    // The attacker's page server, on another loopback port.
    let page = attack_page(&gw.url);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let attack_url = format!("http://{}/", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/",
        get(move || {
            let page = page.clone();
            async move { Html(page) }
        }),
    );
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    browser_support::run_script(
        browser_dir,
        "site_check.test.mjs",
        vec![
            ("GATEWAY_URL".into(), gw.url.clone()),
            ("ATTACK_URL".into(), attack_url),
            ("SESSION_KEY".into(), KEY.into()),
            ("CHROMIUM".into(), chromium.to_string_lossy().into_owned()),
        ],
    )
    .await;
    server.abort();

    // Nothing the pages sent was stored or reached the model.
    let sessions: Value = gw.get("/v1/sessions").await.json().await.unwrap();
    let keys: Vec<&str> = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["sessionKey"].as_str())
        .collect();
    assert_eq!(keys, [KEY], "only the session the test made: {sessions}");
    let bodies = gw.llm.bodies().await;
    assert_eq!(bodies.len(), 1, "the model got only the test's own turn");
    let transcript = serde_json::to_string(&bodies).unwrap();
    assert!(!transcript.contains("csrf") && !transcript.contains("rebinding"));
    let m = gw.get("/metrics").await.text().await.unwrap();
    let origin = sample(
        &m,
        r#"clawctx_gateway_refused_requests_total{reason="origin"}"#,
    );
    let host = sample(
        &m,
        r#"clawctx_gateway_refused_requests_total{reason="host"}"#,
    );
    assert!(
        origin >= 4.0,
        "two fetches, the form and the read were refused by Origin: {origin}"
    );
    assert!(
        host >= 3.0,
        "the rebound page, its read and its post were refused by Host: {host}"
    );
    gw.stop().await.unwrap();
}
