//! The dashboard's HTTP side over loopback: its page and assets, auth (bearer, the `/?token=`
//! cookie, the login page), the JSON endpoints over a pre-filled lossless session (sessions,
//! the last assembly matching the engine API's `assemble`, transcript paging, the DAG's
//! children and paths down to a planted message), quarantines from the persisted mirror,
//! secrets masked in the config, live events over SSE.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod dashboard_fixture;

use dashboard_fixture::{start, Setup, PLANTED};
use serde_json::{json, Value};

const KEY: &str = "agent:main:dash";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefilled_lossless_session_is_seen_whole() {
    let mut f = start(Setup::default()).await;
    f.lossless_session(KEY, 600).await;

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
    f.stop().await;
}

fn urlenc(s: &str) -> String {
    s.replace(':', "%3A")
}
