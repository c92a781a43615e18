//! The dashboard's HTTP side over loopback: its page and assets, auth (bearer, the `/?token=`
//! cookie, the login page), the JSON endpoints over a pre-filled lossless session (sessions,
//! the last assembly matching the engine API's `assemble`, transcript paging, the DAG's
//! children and paths down to a planted message), quarantines from the persisted mirror,
//! secrets masked in the config, live events over SSE.
//!
//! The views of a lossless session and its live events run twice: with the store in a SQLite
//! file and in PostgreSQL (`*_on_postgres`, a fresh database per test; they skip without
//! `CLAWCTX_TEST_PG_URL`, except under `CI=true`, where they fail).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::dashboard_fixture;

use dashboard_fixture::{on_postgres, start, Setup, PLANTED};
use serde_json::{json, Value};

const KEY: &str = "agent:main:dash";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefilled_lossless_session_is_seen_whole() {
    seen_whole(Setup::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefilled_lossless_session_is_seen_whole_on_postgres() {
    let Some((_db, setup)) = on_postgres("dashboard_whole") else {
        return;
    };
    seen_whole(setup).await;
}

async fn seen_whole(setup: Setup) {
    let mut f = start(setup).await;
    // More than the engine's budget of a 32,000-token window (about 22,500 tokens).
    f.lossless_session(KEY, 1_000).await;

    // Sessions: listed with its counts.
    let list = f.get_json("/v1/dashboard/sessions").await;
    let row = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["sessionKey"] == KEY)
        .expect("the session is listed")
        .clone();
    assert!(row["messages"].as_i64().unwrap() >= 600, "{row}");
    assert!(row["storedTokens"].as_i64().unwrap() > 0, "{row}");
    assert!(
        row["assembledTokens"].as_u64().unwrap() > 0,
        "the turn's assembly is recorded: {row}"
    );
    assert!(
        row["compactions"].as_i64().unwrap() >= 1,
        "the prefill is compacted: {row}"
    );

    // The engine API's assemble is recorded and the session view splits exactly its answer.
    let sid = f.session_id(KEY);
    let before = f
        .get_json(&format!("/v1/dashboard/session?key={}", urlenc(KEY)))
        .await;
    assert_eq!(before["lastAssembled"]["source"], "turn");
    // The turn assembled before its afterTurn compacted: what it left out is not told from
    // today's frontier.
    assert_eq!(before["leftOut"]["stale"], true, "{}", before["leftOut"]);
    // The raw tail and half the summaries: assembly has to leave the older half out.
    let dag = f
        .get_json(&format!("/v1/dashboard/dag?key={}", urlenc(KEY)))
        .await;
    let raw = dag["uncovered"]["tokens"].as_u64().unwrap();
    let budget = raw + (before["stats"]["frontierTokens"].as_u64().unwrap() - raw) / 2;
    let assembled = f
        .post_json(
            "/v1/engine/assemble",
            &json!({"sessionId": sid, "sessionKey": KEY, "messages": [], "tokenBudget": budget}),
        )
        .await;
    let s = f
        .get_json(&format!("/v1/dashboard/session?key={}", urlenc(KEY)))
        .await;
    let last = &s["lastAssembled"];
    assert_eq!(last["source"], "engine-api");
    assert_eq!(last["tokenBudget"], budget);
    let b = &last["breakdown"];
    assert_eq!(b["estimatedTokens"], assembled["estimatedTokens"]);
    let messages = assembled["messages"].as_array().unwrap();
    assert_eq!(b["messageCount"].as_u64().unwrap() as usize, messages.len());
    let summaries = messages
        .iter()
        .filter(|m| {
            m["content"]
                .as_str()
                .is_some_and(|t| t.starts_with("<summary "))
        })
        .count();
    assert!(summaries > 0, "the assembly shows summaries");
    assert_eq!(
        b["totals"]["summaryCount"].as_u64().unwrap() as usize,
        summaries
    );
    let parts_sum: u64 = b["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(b["totalTokens"].as_u64().unwrap(), parts_sum);
    assert!(
        b["totalTokens"].as_u64().unwrap()
            <= budget + b["totals"]["systemPromptAddition"].as_u64().unwrap()
    );
    let left = &s["leftOut"];
    assert!(
        left["items"].as_u64().unwrap() > 0,
        "half the frontier's budget leaves history out: {left}"
    );
    assert_eq!(
        left["firstSeq"], 0,
        "what is left out is the oldest: {left}"
    );
    let kept =
        b["totals"]["summaryCount"].as_u64().unwrap() + b["totals"]["rawCount"].as_u64().unwrap();
    assert_eq!(
        left["items"].as_u64().unwrap() + kept,
        s["stats"]["frontierItems"].as_u64().unwrap(),
        "{left}"
    );
    assert!(!s["timeline"].as_array().unwrap().is_empty());
    assert_eq!(s["timeline"][0]["kind"], "leaf");
    // `timelineTotal` counts every event (the view sends the newest ones: see
    // dashboard_browser.rs for a session with more than fit).
    let all = s["timeline"].as_array().unwrap().clone();
    assert_eq!(s["timelineTotal"].as_u64(), Some(all.len() as u64));

    // Transcript paging: the first page starts at seq 0 and holds the planted message; the
    // default page is the newest.
    let p0 = f
        .get_json(&format!(
            "/v1/dashboard/transcript?key={}&from=0&limit=10",
            urlenc(KEY)
        ))
        .await;
    assert_eq!(p0["messages"].as_array().unwrap().len(), 10);
    assert_eq!(p0["messages"][0]["seq"], 0);
    assert_eq!(p0["nextSeq"], 10);
    assert!(p0["messages"][3]["message"]["content"]
        .as_str()
        .unwrap()
        .contains(PLANTED));
    let planted_id = p0["messages"][3]["id"].as_str().unwrap().to_owned();
    let latest = f
        .get_json(&format!(
            "/v1/dashboard/transcript?key={}&limit=10",
            urlenc(KEY)
        ))
        .await;
    assert!(
        latest["nextSeq"].is_null(),
        "the default page is the last: {}",
        latest["nextSeq"]
    );
    let around = f
        .get_json(&format!(
            "/v1/dashboard/transcript?key={}&limit=10&around={planted_id}",
            urlenc(KEY)
        ))
        .await;
    assert!(around["messages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["id"] == planted_id.as_str()));

    // The DAG: roots, then children one level at a time down to the planted message.
    let roots = dag["roots"].as_array().unwrap();
    assert!(!roots.is_empty());
    assert!(!dag["layers"].as_array().unwrap().is_empty());
    let mut node = roots
        .iter()
        .find(|r| r["firstSeq"].as_i64().unwrap() <= 3 && r["lastSeq"].as_i64().unwrap() >= 3)
        .unwrap()
        .clone();
    let mut hops = 0;
    while node["kind"] == "summary" {
        let id = node["id"].as_str().unwrap();
        let c = f
            .get_json(&format!(
                "/v1/dashboard/dag/children?key={}&id={id}",
                urlenc(KEY)
            ))
            .await;
        let children = c["children"].as_array().unwrap();
        assert_eq!(
            children.len() as i64,
            node["childCount"].as_i64().unwrap(),
            "childCount matches the children of {id}"
        );
        node = children
            .iter()
            .find(|n| n["firstSeq"].as_i64().unwrap() <= 3 && n["lastSeq"].as_i64().unwrap() >= 3)
            .expect("a child covers seq 3")
            .clone();
        hops += 1;
        assert!(hops < 20);
    }
    assert_eq!(node["id"], planted_id.as_str());
    assert!(node["preview"].as_str().unwrap().contains(PLANTED));
    let path = f
        .get_json(&format!(
            "/v1/dashboard/dag/path?key={}&id={planted_id}",
            urlenc(KEY)
        ))
        .await;
    let path = path["path"].as_array().unwrap();
    assert_eq!(
        path.len(),
        hops + 1,
        "the path has one step per level: {path:?}"
    );
    assert_eq!(path.last().unwrap(), planted_id.as_str());

    // Errors name what is wrong.
    let r = f
        .get("/v1/dashboard/dag/children?key=agent:main:dash&id=msg_1")
        .await;
    assert_eq!(r.status(), 400);
    let r = f
        .get("/v1/dashboard/dag/children?key=agent:main:nobody&id=sum_1")
        .await;
    assert_eq!(r.status(), 404);
    let r = f.get("/v1/dashboard/session").await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["param"], "key");
    let r = f
        .get(&format!(
            "/v1/dashboard/transcript?key={}&around=sum_1",
            urlenc(KEY)
        ))
        .await;
    assert_eq!(r.status(), 400, "a page is centred on a message");

    // The summarizers the store's summaries name.
    let e = f.get_json("/v1/dashboard/engines").await;
    let stored = e["summarizer"]["stored"].as_array().unwrap();
    assert!(
        stored.iter().any(|s| s[1].as_i64().unwrap() > 0),
        "{stored:?}"
    );
    f.stop().await;
}

fn urlenc(s: &str) -> String {
    s.replace(':', "%3A")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_the_page_wants_it_once_and_the_cookie_stands_in_for_the_header() {
    const TOKEN: &str = "page-token-77 with space";
    let mut f = start(Setup {
        token: Some(TOKEN),
        ..Setup::default()
    })
    .await;
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    // No credentials: the page is a 401 page saying how; the API and assets are 401 JSON.
    let r = plain.get(f.at("/")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let page = r.text().await.unwrap();
    assert!(page.contains("?token="));
    assert!(
        page.contains("<form method=\"post\" action=\"/login\">")
            && page.contains("type=\"password\" name=\"token\""),
        "the page offers a form that keeps the token out of the URL: {page}"
    );
    for path in [
        "/v1/dashboard/sessions",
        "/dashboard/app.js",
        "/v1/dashboard/events",
    ] {
        let r = plain.get(f.at(path)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
        assert_eq!(
            r.json::<Value>().await.unwrap()["error"]["code"],
            "invalid_api_key",
            "{path}"
        );
    }

    // A wrong token: 401, no cookie.
    let r = plain.get(f.at("/?token=nope")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers().get("set-cookie").is_none());

    // The right one (percent-encoded): a redirect to / setting the cookie, which is not the token.
    let r = plain
        .get(f.at("/?token=page-token-77%20with+space"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/");
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly")
            && cookie.contains("SameSite=Strict")
            && cookie.contains("Path=/"),
        "{cookie}"
    );
    assert!(
        !cookie.contains("page-token"),
        "the cookie holds a hash, not the token: {cookie}"
    );
    assert!(
        cookie.contains(&format!(
            "Max-Age={}",
            clawctx_gateway::dashboard::COOKIE_MAX_AGE_SECS
        )),
        "the cookie expires: {cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_owned();

    // The form posts the token in the body: the same redirect and cookie, no token in a URL.
    let form = |token: &str| {
        plain
            .post(f.at("/login"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!(
                "token={}",
                token.replace('%', "%25").replace(' ', "+")
            ))
    };
    let r = form("nope").send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers().get("set-cookie").is_none());
    let r = form(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/");
    let posted = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert_eq!(posted, cookie, "the form sets the cookie the link does");
    let r = plain
        .post(f.at("/login"))
        .body(vec![b'a'; 64 * 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413, "an oversized login body is refused");
    assert_eq!(
        r.headers()["connection"],
        "close",
        "its unread rest leaves the connection unusable, and the answer says so"
    );

    // The cookie opens the page, its assets, the API.
    let r = plain
        .get(f.at("/"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("default-src 'self'") && csp.contains("connect-src 'self'"),
        "{csp}"
    );
    let html = r.text().await.unwrap();
    assert!(
        html.contains("/dashboard/app.js")
            && !html.contains("http://")
            && !html.contains("https://"),
        "no outside resource"
    );
    for (path, ty) in [
        ("/dashboard/app.js", "text/javascript"),
        ("/dashboard/style.css", "text/css"),
        ("/dashboard/favicon.svg", "image/svg+xml"),
    ] {
        let r = plain
            .get(f.at(path))
            .header("cookie", &pair)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert!(
            r.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with(ty),
            "{path}"
        );
    }
    let r = plain
        .get(f.at("/dashboard/nope.js"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = plain
        .get(f.at("/v1/dashboard/sessions"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // A cookie of another token does not.
    let r = plain
        .get(f.at("/v1/dashboard/sessions"))
        .header("cookie", "clawctx_gateway=0000")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // The bearer header still works.
    assert_eq!(f.get("/v1/dashboard/sessions").await.status(), 200);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engines_view_lists_mirror_quarantines_and_masks_secrets() {
    let mut extra = dashboard_fixture::small_chunks();
    extra["models"]["providers"]["mock"]["apiKey"] = json!("sk-live-secret-123");
    extra["gateway"] = json!({"auth": {"tokenEnv": "SOME_VAR"}});
    extra["plugins"]["entries"]["lossless"]["config"]["databaseUrl"] =
        json!("postgres://lcm:hunter2@db.internal:5432/lcm");
    let mut f = start(Setup {
        extra_config: extra,
        ..Setup::default()
    })
    .await;
    f.mirror_quarantine(
        "vector-memory",
        "assemble",
        "vector store unreachable (connection refused)",
    );
    f.registry
        .quarantine("inproc-broken", None, "factory", "boom in the factory");

    let e = f.get_json("/v1/dashboard/engines").await;
    assert_eq!(e["engine"]["info"]["id"], "lossless");
    assert_eq!(e["selection"]["selectedId"], "lossless");
    let q = e["quarantines"].as_array().unwrap();
    let mirrored = q
        .iter()
        .find(|q| q["engineId"] == "vector-memory")
        .expect("the mirror's row is listed");
    assert_eq!(mirrored["operation"], "assemble");
    assert_eq!(
        mirrored["reason"],
        "vector store unreachable (connection refused)"
    );
    assert_eq!(mirrored["source"], "mirror");
    assert_eq!(mirrored["processRunning"], false);
    let own = q
        .iter()
        .find(|q| q["engineId"] == "inproc-broken")
        .expect("this process's quarantine is listed");
    assert_eq!(own["source"], "process");
    assert!(e["registered"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["id"] == "lossless" && r["owner"].is_string()));

    let text = e["config"].to_string() + &e["plugins"].to_string();
    assert!(
        !text.contains("sk-live-secret-123") && !text.contains("hunter2"),
        "a secret leaked: {text}"
    );
    assert_eq!(
        e["config"]["models"]["providers"]["mock"]["apiKey"],
        clawctx_gateway::dashboard::secrets::MASK
    );
    assert_eq!(e["config"]["gateway"]["auth"]["tokenEnv"], "SOME_VAR");
    assert!(e["plugins"]["entries"]["lossless"]["config"]["databaseUrl"]
        .as_str()
        .unwrap()
        .starts_with("postgres://lcm:"));
    assert_eq!(
        e["plugins"]["entries"]["lossless"]["config"]["leafChunkTokens"],
        1000
    );
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_streams_live_events_to_a_listener_of_its_session() {
    live_events(Setup::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_streams_live_events_to_a_listener_of_its_session_on_postgres() {
    let Some((_db, setup)) = on_postgres("dashboard_live") else {
        return;
    };
    live_events(setup).await;
}

async fn live_events(setup: Setup) {
    let mut f = start(setup).await;
    // Enough history that the first turn's afterTurn compacts it.
    f.prefill(KEY, 1_000);
    let mut events = f
        .http
        .get(f.at(&format!("/v1/dashboard/events?key={}", urlenc(KEY))))
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    assert!(events.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut seen = String::new();
    // The hello event first: the listener is registered.
    while !seen.contains("\"hello\"") {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), events.chunk())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    // A turn on another session is not this listener's.
    f.turn("agent:main:other", "hello there", "hi").await;
    f.turn(KEY, "What was the launch code?", "Looking.").await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while ![
        "\"turnStarted\"",
        "\"assembled\"",
        "\"compaction\"",
        "\"turnDone\"",
    ]
    .iter()
    .all(|k| seen.contains(k))
    {
        let chunk = tokio::time::timeout_at(deadline, events.chunk())
            .await
            .expect("the turn's events within 20 s")
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let kinds: Vec<String> = seen
        .lines()
        .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .inspect(|e| {
            assert!(
                e["kind"] == "hello" || e["sessionKey"] == KEY,
                "another session's event: {e}"
            )
        })
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect();
    for kind in ["turnStarted", "assembled", "compaction", "turnDone"] {
        assert!(
            kinds.iter().any(|k| k == kind),
            "no {kind} event in {kinds:?}"
        );
    }
    // An open event stream does not hold up shutdown: it ends when the gateway stops.
    let started = std::time::Instant::now();
    f.stop().await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "shutdown waited {:?} for the event stream",
        started.elapsed()
    );
    let rest = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while let Ok(Some(_)) = events.chunk().await {}
    })
    .await;
    assert!(rest.is_ok(), "the event stream ends at shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_legacy_looking_at_an_unknown_key_creates_no_session() {
    let f = start(Setup {
        engine: "legacy",
        extra_config: json!({}),
        ..Setup::default()
    })
    .await;
    let nobody = "agent:main:nobody-used-this";
    let transcripts = || -> Vec<_> {
        walk(f.state.path())
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .collect()
    };
    let before = transcripts();
    assert!(!f.runtime.knows(nobody).unwrap(), "unknown at the start");
    let r = f
        .get(&format!("/v1/dashboard/transcript?key={}", urlenc(nobody)))
        .await;
    assert_eq!(r.status(), 404, "an unknown key's transcript");
    assert!(
        !f.runtime.knows(nobody).unwrap(),
        "the transcript page created it"
    );
    let s = f
        .get_json(&format!("/v1/dashboard/session?key={}", urlenc(nobody)))
        .await;
    assert!(s.get("stats").is_none(), "no stats for nobody: {s}");
    assert_eq!(f.runtime.knows(nobody).unwrap(), false, "sessions.json");
    assert_eq!(transcripts(), before, "no transcript file for nobody");
    let list = f.get_json("/v1/dashboard/sessions").await;
    assert!(
        !list.to_string().contains("nobody-used-this"),
        "not listed: {list}"
    );
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_legacy_the_transcript_pages_the_context_and_the_dag_says_it_needs_lossless() {
    let mut f = start(Setup {
        engine: "legacy",
        extra_config: json!({}),
        ..Setup::default()
    })
    .await;
    f.prefill(KEY, 30);
    f.turn(KEY, "hello", "hi").await;
    let list = f.get_json("/v1/dashboard/sessions").await;
    let row = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["sessionKey"] == KEY)
        .unwrap()
        .clone();
    assert_eq!(row["engine"], "legacy");
    assert_eq!(row["messages"], 32);
    assert!(row["assembledTokens"].as_u64().unwrap() > 0);
    let page = f
        .get_json(&format!(
            "/v1/dashboard/transcript?key={}&from=0&limit=20",
            urlenc(KEY)
        ))
        .await;
    assert_eq!(page["total"], 32);
    assert_eq!(page["messages"].as_array().unwrap().len(), 20);
    assert_eq!(page["nextSeq"], 20);
    let s = f
        .get_json(&format!("/v1/dashboard/session?key={}", urlenc(KEY)))
        .await;
    assert_eq!(s["lossless"], false);
    assert_eq!(s["lastAssembled"]["breakdown"]["totals"]["summaryCount"], 0);
    assert_eq!(s["timeline"], json!([]), "no compaction yet");
    // A manual compaction through the runtime is a timeline entry with its tokens.
    f.runtime.compact(KEY, None).await.unwrap();
    let s = f
        .get_json(&format!("/v1/dashboard/session?key={}", urlenc(KEY)))
        .await;
    let timeline = s["timeline"].as_array().unwrap();
    assert_eq!(timeline.len(), 1, "{timeline:?}");
    assert_eq!(timeline[0]["kind"], "compaction");
    assert!(timeline[0]["tokensBefore"].as_u64().unwrap() > 0);
    assert!(
        timeline[0]["tokensAfter"].as_u64().unwrap() > 0,
        "the summary's tokens"
    );
    assert!(
        timeline[0]["at"].as_str().unwrap().contains('T'),
        "an ISO timestamp"
    );
    assert_eq!(s["stats"]["compactions"], 1);
    let r = f
        .get(&format!("/v1/dashboard/dag?key={}", urlenc(KEY)))
        .await;
    assert_eq!(r.status(), 409);
    assert!(r.json::<Value>().await.unwrap()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("lossless"));
    f.stop().await;
}
