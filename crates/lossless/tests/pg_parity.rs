//! The recall tools, `status`, `doctor` and retention answer the same on SQLite and
//! PostgreSQL for the same data: the same hits in the same order, with the same snippets and
//! scores, the same descriptions and expansions, the same counts.
//!
//! Both stores get the same operations in the same order, so their ids agree and hits can be
//! compared by id. The PostgreSQL half needs `CLAWCTX_TEST_PG_URL` (a fresh database per test);
//! without it the tests skip, except under `CI=true`. The LoCoMo test reads the dev split from
//! `../shared/data/locomo/` (relative to the repo root, never bundled) and skips when it is
//! absent, except under `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use clawctx_engine::ContextEngine;
use clawctx_lossless::pg::PgStore;
use clawctx_lossless::*;
use clawctx_protocol::*;
use clawctx_test_support::pg::{test_database, TestDatabase};
use common::*;
use serde_json::json;

const OTHER_KEY: &str = "agent:other:test:direct:2";
const THIRD_KEY: &str = "agent:main:test:direct:3";

/// An engine on each backend (the PostgreSQL one on a fresh database), or `None` when no
/// PostgreSQL server is configured.
async fn both(
    hint: &str,
    cfg: LosslessConfig,
) -> Option<(
    tempfile::TempDir,
    LosslessEngine,
    TestDatabase,
    LosslessEngine,
)> {
    let db = test_database(hint)?;
    let dir = tempfile::tempdir().unwrap();
    let sqlite = engine(&dir, cfg.clone());
    let pg = PgStore::open_url(&db.url).await.unwrap();
    let pg = LosslessEngine::over(Arc::new(pg), cfg).unwrap();
    Some((dir, sqlite, db, pg))
}

/// Whether this is a CI run (`CI=true`), where `../shared/data/` is provisioned.
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// Asserts two grep reports are the same, naming the query and the first difference.
fn same_report(a: &GrepReport, b: &GrepReport, what: &str) {
    assert_eq!(a.fts_query, b.fts_query, "{what}: FTS query");
    let ids = |r: &GrepReport| r.hits.iter().map(|h| h.id.clone()).collect::<Vec<_>>();
    assert_eq!(
        ids(a),
        ids(b),
        "{what}: hit ids (SQLite left, PostgreSQL right)"
    );
    for (x, y) in a.hits.iter().zip(&b.hits) {
        assert_eq!(
            (x.conversation_id, &x.role, x.depth, x.ts, &x.snippet),
            (y.conversation_id, &y.role, y.depth, y.ts, &y.snippet),
            "{what}: hit {}",
            x.id
        );
        match (x.score, y.score) {
            (None, None) => {}
            (Some(s), Some(t)) => assert!(
                (s - t).abs() <= 1e-9,
                "{what}: hit {} scores {s} on SQLite, {t} on PostgreSQL",
                x.id
            ),
            (s, t) => panic!("{what}: hit {} scores {s:?} vs {t:?}", x.id),
        }
    }
    assert_eq!(a.next_offset, b.next_offset, "{what}: next offset");
    assert_eq!(a.scan_truncated, b.scan_truncated, "{what}: scan truncated");
}

/// `q` on both engines: the same answer, or the same error.
async fn same_grep(a: &LosslessEngine, b: &LosslessEngine, q: GrepQuery) -> usize {
    let what = format!(
        "{:?} {:?} {:?} {:?} {:?} limit {} offset {} scan {}",
        q.pattern, q.mode, q.target, q.sort, q.scope, q.limit, q.offset, q.max_scan_rows
    );
    let ra = a.backend().grep(q.clone()).await;
    let rb = b.backend().grep(q).await;
    match (ra, rb) {
        (Ok(ra), Ok(rb)) => {
            same_report(&ra, &rb, &what);
            ra.hits.len()
        }
        (Err(ea), Err(eb)) => {
            assert_eq!(ea.to_string(), eb.to_string(), "{what}: errors");
            0
        }
        (ra, rb) => panic!("{what}: SQLite {ra:?}, PostgreSQL {rb:?}"),
    }
}

/// A value's JSON, for comparing reports that have no `PartialEq`.
fn js<T: serde::Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap()
}

/// One conversation's history: turns with tool calls (some outputs large enough to be
/// payloads), punctuation, accents and numbers in the texts.
fn history(seed: u64, turns: usize) -> Vec<AgentMessage> {
    let mut rng = Lcg(seed);
    let mut h = Vec::new();
    for t in 0..turns {
        let mut msgs = turn(&mut rng, t, t % 3 == 0, 40);
        if t % 7 == 2 {
            let ts = 1_700_000_000_000i64 + (t as i64) * 60_000 + 4;
            msgs.push(
                AgentMessage::user(format!(
                    "Café naïve: 50% of (a+b) — cost $5 at src/main.rs:{t}? ОДОС 日本語 E0425 deployments"
                ))
                .with_timestamp(ts),
            );
        }
        if t % 5 == 1 {
            // A role the store does not name (its name lives in the skeleton).
            let ts = 1_700_000_000_000i64 + (t as i64) * 60_000 + 7;
            let m: AgentMessage = serde_json::from_value(json!({
                "role": "system",
                "content": format!("system note {t}: deploy policy changed, retry timeout"),
                "timestamp": ts,
            }))
            .unwrap();
            msgs.push(m);
        }
        if t % 11 == 5 {
            // A large tool output (a payload on SQLite).
            let id = format!("big_{seed}_{t}");
            let ts = 1_700_000_000_000i64 + (t as i64) * 60_000 + 5;
            msgs.push(
                AgentMessage::tool_call(&id, "read", json!({"path": "big.log"})).with_timestamp(ts),
            );
            msgs.push(
                AgentMessage::tool_result(
                    &id,
                    "read",
                    format!("log{t} {}", words(&mut rng, 2_000)),
                )
                .with_timestamp(ts + 1),
            );
        }
        h.extend(msgs);
    }
    h
}

fn after_turn_for(key: &str, history: &[AgentMessage], pre: usize) -> AfterTurnParams {
    AfterTurnParams {
        session_key: Some(key.into()),
        ..after_turn(history, pre, 8_000)
    }
}

/// Stores `h` in `key`'s conversation turn by turn (compacting as a host's turns would), then
/// forces a compaction.
async fn play(e: &LosslessEngine, key: &str, h: &[AgentMessage]) {
    let mut pre = 0;
    for end in (8..=h.len()).step_by(8) {
        e.after_turn(&after_turn_for(key, &h[..end], pre), &cx())
            .await
            .unwrap();
        pre = end;
    }
    e.after_turn(&after_turn_for(key, h, pre), &cx())
        .await
        .unwrap();
    let force = CompactParams {
        session_key: Some(key.into()),
        ..compact_params(true, 8_000)
    };
    e.compact(&force, &cx()).await.unwrap();
}

fn query(
    pattern: &str,
    mode: GrepMode,
    target: GrepTarget,
    sort: GrepSort,
    scope: Scope,
) -> GrepQuery {
    GrepQuery {
        mode,
        target,
        sort,
        ..GrepQuery::new(pattern, scope)
    }
}

#[tokio::test]
async fn recall_doctor_and_status_agree_on_both_backends() {
    let Some((_dir, sqlite, _db, pg)) = both("parity", small_cfg()).await else {
        return;
    };
    let plan = [(KEY, 1u64, 36usize), (OTHER_KEY, 2, 24), (THIRD_KEY, 3, 14)];
    for e in [&sqlite, &pg] {
        for (key, seed, turns) in plan {
            play(e, key, &history(seed, turns)).await;
        }
        // `/new` on the first session: an archived conversation, summaries carried.
        e.on_session_reset(KEY, KEY).await.unwrap();
        play(e, KEY, &history(4, 10)).await;
    }

    let status_a = sqlite.backend().status().await.unwrap();
    let status_b = pg.backend().status().await.unwrap();
    assert!(status_a.summaries > 0, "the scenario must have summaries");
    assert!(
        status_a.max_depth >= 1,
        "the scenario must have condensed summaries"
    );
    let counts = |s: &StatusReport| {
        (
            s.conversations,
            s.messages,
            s.summaries,
            s.max_depth,
            s.depth_histogram.clone(),
            s.raw_text_bytes,
            s.message_tokens,
            s.frontier_tokens,
            s.frontier_messages,
            s.frontier_summaries,
        )
    };
    assert_eq!(counts(&status_a), counts(&status_b), "status counts");
    assert_eq!(status_a.dag, status_b.dag, "the DAG's levels");
    assert!(status_b.db_bytes > 0);

    let doc_a = sqlite.backend().doctor().await.unwrap();
    let doc_b = pg.backend().doctor().await.unwrap();
    assert!(doc_a.ok, "SQLite doctor: {:?}", doc_a.issues);
    assert!(doc_b.ok, "PostgreSQL doctor: {:?}", doc_b.issues);
    use clawctx_lossless::StoreCheck;
    assert_eq!(doc_a.store_check, StoreCheck::Sqlite("ok".into()));
    assert_eq!(doc_b.store_check, StoreCheck::Postgres("ok".into()));
    // Each report names its own backend's check (`lcm doctor --database postgres://…` said
    // `sqliteCheck`).
    let json_a = serde_json::to_value(&doc_a).unwrap();
    let json_b = serde_json::to_value(&doc_b).unwrap();
    assert_eq!(json_a["sqliteCheck"], "ok");
    assert!(json_a.get("postgresCheck").is_none(), "{json_a}");
    assert_eq!(json_b["postgresCheck"], "ok");
    assert!(json_b.get("sqliteCheck").is_none(), "{json_b}");
    assert_eq!(doc_a.conversations_checked, doc_b.conversations_checked);

    let session = |k: &str| Scope::Session(ConvKey::from_host(Some(k), "s1"));
    let scopes = [
        session(KEY),
        session(OTHER_KEY),
        Scope::Agent("main".into()),
        Scope::Agent("other".into()),
        Scope::Agent("nobody".into()),
        Scope::All,
    ];
    let full_text = [
        "deploy server",
        "Deployments",
        "nd3x0",
        "nd12x9",
        "cache latency",
        "src/main.rs",
        "café naive",
        "ОДОС",
        "日本語 e0425",
        "foo\" OR (bar",
        "the",
        "!!!",
        "log16",
        "config parser rejected value migration schema",
    ];
    let any_term = [
        "what did the user ask about the migration schema?",
        "Why did the build fail?",
        "nd5x2 timeout retry policy",
        "deployed caches",
        "the and of",
        "E0425 café",
    ];
    let regexes = [
        "nd1\\dx\\d",
        "deploy.*server",
        "(?i)DEPLOY",
        "src/main\\.rs:\\d+",
        "50% of \\(a\\+b\\)",
        "\\$5",
        "caf[eé]",
        "colou?r|cache",
        "\\bretry\\b policy",
        "log\\d+ ",
        "[",
        "x{2,",
        "ОДОС 日本語",
        "zzzz-never",
    ];
    let mut total = 0;
    for scope in &scopes {
        for target in [
            GrepTarget::Both,
            GrepTarget::Messages,
            GrepTarget::Summaries,
        ] {
            for sort in [GrepSort::Relevance, GrepSort::Recency] {
                for p in full_text {
                    total += same_grep(
                        &sqlite,
                        &pg,
                        query(p, GrepMode::FullText, target, sort, scope.clone()),
                    )
                    .await;
                }
            }
            for p in any_term {
                total += same_grep(
                    &sqlite,
                    &pg,
                    query(
                        p,
                        GrepMode::AnyTerm,
                        target,
                        GrepSort::Relevance,
                        scope.clone(),
                    ),
                )
                .await;
            }
            for p in regexes {
                total += same_grep(
                    &sqlite,
                    &pg,
                    query(p, GrepMode::Regex, target, GrepSort::Recency, scope.clone()),
                )
                .await;
            }
        }
    }
    let sys = pg
        .backend()
        .grep(query(
            "system note",
            GrepMode::Regex,
            GrepTarget::Messages,
            GrepSort::Recency,
            Scope::All,
        ))
        .await
        .unwrap();
    assert!(
        sys.hits.iter().any(|h| h.role == "system"),
        "{:?}",
        sys.hits
    );
    assert!(total > 500, "the battery must find things ({total} hits)");

    // Paging, and the regex scan bound.
    for (limit, offset) in [(1, 0), (3, 0), (3, 3), (7, 14), (20, 40), (200, 0), (0, 2)] {
        for (p, mode) in [
            ("deploy", GrepMode::FullText),
            ("cache latency timeout", GrepMode::AnyTerm),
            ("nd\\d+x[29]", GrepMode::Regex),
        ] {
            for sort in [GrepSort::Relevance, GrepSort::Recency] {
                let q = GrepQuery {
                    limit,
                    offset,
                    ..query(p, mode, GrepTarget::Both, sort, Scope::All)
                };
                same_grep(&sqlite, &pg, q).await;
            }
        }
    }
    let mut truncated = 0;
    for max_scan in [1u64, 10, 50, 120, 400, 100_000, u64::MAX] {
        for (p, scope) in [
            ("nd\\d+x0", Scope::All),
            ("nd\\d+x0", session(OTHER_KEY)),
            ("timeout", Scope::Agent("main".into())),
            ("zzzz-never", Scope::All),
        ] {
            for target in [GrepTarget::Both, GrepTarget::Messages] {
                let q = GrepQuery {
                    max_scan_rows: max_scan,
                    limit: 30,
                    ..query(p, GrepMode::Regex, target, GrepSort::Recency, scope.clone())
                };
                let r = sqlite.backend().grep(q.clone()).await.unwrap();
                truncated += usize::from(r.scan_truncated);
                same_grep(&sqlite, &pg, q).await;
            }
        }
    }
    assert!(truncated > 0, "some scans must hit the bound");

    // Describe and expand: every summary, a spread of messages; scoped and not.
    let n_msgs = status_a.messages as i64;
    let mut ids: Vec<String> = (1..=status_a.summaries as i64)
        .map(|i| format!("sum_{i}"))
        .collect();
    ids.extend((1..=n_msgs).step_by(7).map(|i| format!("msg_{i}")));
    ids.extend([
        "msg_0".into(),
        format!("msg_{}", n_msgs + 1),
        "sum_999999".into(),
        "bogus".into(),
    ]);
    for id in &ids {
        for agent in [None, Some("main"), Some("other")] {
            let da = sqlite.backend().describe(id, agent).await;
            let db = pg.backend().describe(id, agent).await;
            match (&da, &db) {
                (Ok(x), Ok(y)) => assert_eq!(js(x), js(y), "describe {id} as {agent:?}"),
                (Err(x), Err(y)) => {
                    assert_eq!(x.to_string(), y.to_string(), "describe {id} as {agent:?}")
                }
                _ => panic!("describe {id} as {agent:?}: SQLite {da:?}, PostgreSQL {db:?}"),
            }
            for cap in [5u64, 300, 100_000] {
                let ea = sqlite.backend().expand(id, cap, agent).await;
                let eb = pg.backend().expand(id, cap, agent).await;
                match (&ea, &eb) {
                    (Ok(x), Ok(y)) => {
                        assert_eq!(js(x), js(y), "expand {id} cap {cap} as {agent:?}")
                    }
                    (Err(x), Err(y)) => assert_eq!(x.to_string(), y.to_string(), "expand {id}"),
                    _ => panic!("expand {id} as {agent:?}: SQLite {ea:?}, PostgreSQL {eb:?}"),
                }
            }
        }
    }

    // Retention: the same payloads expire, the same messages change, doctor stays clean.
    // Stored just now: an hour-old cutoff expires nothing on either store (PostgreSQL has no
    // storage time; its estimate is never older than the conversation).
    let hour_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - 3_600_000;
    for e in [&sqlite, &pg] {
        let r = e.backend().expire_payloads(hour_ago, false).await.unwrap();
        assert_eq!(r.candidates, 0, "{r:?}");
    }
    let cutoff = i64::MAX;
    let ra = sqlite
        .backend()
        .expire_payloads(cutoff, false)
        .await
        .unwrap();
    let rb = pg.backend().expire_payloads(cutoff, false).await.unwrap();
    assert!(
        ra.payloads_expired > 0,
        "some payloads must be summarized: {ra:?}"
    );
    let shape = |r: &RetentionReport| {
        (
            r.dry_run,
            r.candidates,
            r.payloads_expired,
            r.payloads_in_context,
            r.messages_rewritten,
        )
    };
    assert_eq!(shape(&ra), shape(&rb), "retention dry run");
    let ra = sqlite
        .backend()
        .expire_payloads(cutoff, true)
        .await
        .unwrap();
    let rb = pg.backend().expire_payloads(cutoff, true).await.unwrap();
    assert_eq!(shape(&ra), shape(&rb), "retention");
    for id in (1..=n_msgs).map(|i| format!("msg_{i}")) {
        let x = sqlite.backend().describe(&id, None).await.unwrap();
        let y = pg.backend().describe(&id, None).await.unwrap();
        assert_eq!(js(&x), js(&y), "describe {id} after retention");
    }
    for p in ["log16", "deploy"] {
        same_grep(
            &sqlite,
            &pg,
            query(
                p,
                GrepMode::FullText,
                GrepTarget::Both,
                GrepSort::Relevance,
                Scope::All,
            ),
        )
        .await;
    }
    assert!(pg.backend().doctor().await.unwrap().ok);
    let again = pg.backend().expire_payloads(cutoff, true).await.unwrap();
    assert_eq!(again.payloads_expired, 0, "expired payloads are gone");
}

/// The LoCoMo dev split's conversations as host messages (speaker A as the user, B as the
/// assistant), with its questions; `None` (skipped) when the data is absent outside CI.
fn locomo(max_convs: usize) -> Option<Vec<(Vec<AgentMessage>, Vec<String>)>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/locomo/locomo-dev.json");
    if !path.exists() {
        assert!(
            !in_ci(),
            "CI=true but the LoCoMo dev split is missing at {}: CI must provide ../shared/data/locomo/locomo-dev.json (relative to the repo root)",
            path.display()
        );
        eprintln!(
            "SKIPPED pg_parity locomo: LoCoMo dev split not found at ../shared/data/locomo/locomo-dev.json (relative to the repo root); it is never bundled"
        );
        return None;
    }
    let raw = std::fs::read_to_string(&path).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&raw).unwrap();
    let mut out = Vec::new();
    for conv in doc.as_array().unwrap().iter().take(max_convs) {
        let c = &conv["conversation"];
        let a = c["speaker_a"].as_str().unwrap().to_owned();
        let mut msgs = Vec::new();
        for n in 1.. {
            let Some(turns) = c.get(format!("session_{n}")).and_then(|s| s.as_array()) else {
                if c.get(format!("session_{n}_date_time")).is_some() {
                    continue;
                }
                break;
            };
            for (i, t) in turns.iter().enumerate() {
                let speaker = t["speaker"].as_str().unwrap_or_default();
                let text = format!("{speaker}: {}", t["text"].as_str().unwrap_or_default());
                let ts = 1_680_000_000_000i64 + n * 86_400_000 + i as i64 * 60_000;
                let m = if speaker == a {
                    AgentMessage::user(text)
                } else {
                    AgentMessage::assistant(text)
                };
                msgs.push(m.with_timestamp(ts));
            }
        }
        let questions = conv["qa"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|q| q["question"].as_str().map(str::to_owned))
            .collect();
        out.push((msgs, questions));
    }
    Some(out)
}

#[tokio::test]
async fn locomo_questions_find_the_same_turns_on_both_backends() {
    let Some(data) = locomo(2) else {
        return;
    };
    let Some((_dir, sqlite, _db, pg)) = both("locomo", small_cfg()).await else {
        return;
    };
    let keys = ["agent:main:locomo:direct:1", "agent:main:locomo:direct:2"];
    for e in [&sqlite, &pg] {
        for ((msgs, _), key) in data.iter().zip(keys) {
            // Session by session, as turns arrive, compacting along the way.
            let mut pre = 0;
            for end in (40..=msgs.len()).step_by(40).chain([msgs.len()]) {
                e.after_turn(&after_turn_for(key, &msgs[..end], pre), &cx())
                    .await
                    .unwrap();
                pre = end;
            }
        }
    }
    let status = pg.backend().status().await.unwrap();
    assert!(status.summaries > 0, "LoCoMo must have been compacted");
    let started = std::time::Instant::now();
    let mut compared = 0;
    let mut hits = 0;
    for ((_, questions), key) in data.iter().zip(keys) {
        let session = Scope::Session(ConvKey::from_host(Some(key), "s1"));
        for q in questions.iter().take(30) {
            for (mode, sort, scope) in [
                (GrepMode::AnyTerm, GrepSort::Relevance, session.clone()),
                (GrepMode::AnyTerm, GrepSort::Relevance, Scope::All),
                (GrepMode::FullText, GrepSort::Relevance, Scope::All),
                (GrepMode::FullText, GrepSort::Recency, session.clone()),
            ] {
                hits +=
                    same_grep(&sqlite, &pg, query(q, mode, GrepTarget::Both, sort, scope)).await;
                compared += 1;
            }
            // The question's longest word, as a regex.
            if let Some(w) = q
                .split(|c: char| !c.is_alphanumeric())
                .max_by_key(|w| w.len())
                .filter(|w| w.len() > 3)
            {
                hits += same_grep(
                    &sqlite,
                    &pg,
                    query(
                        w,
                        GrepMode::Regex,
                        GrepTarget::Both,
                        GrepSort::Recency,
                        Scope::All,
                    ),
                )
                .await;
                compared += 1;
            }
        }
    }
    println!(
        "locomo parity: {compared} queries, {hits} hits compared in {:?}",
        started.elapsed()
    );
    assert!(hits > 100, "the questions must find turns ({hits} hits)");
}

#[tokio::test]
async fn doctor_finds_the_same_damage_on_both_backends() {
    let Some((dir, sqlite, db, pg)) = both("doctor", small_cfg()).await else {
        return;
    };
    for e in [&sqlite, &pg] {
        play(e, KEY, &history(9, 30)).await;
    }
    assert!(sqlite.backend().doctor().await.unwrap().ok);
    assert!(pg.backend().doctor().await.unwrap().ok);
    let newest_leaf = db.scalar("SELECT max(id) FROM summaries WHERE depth = 0");
    let deepest = db.scalar("SELECT max(id) FROM summaries WHERE depth > 0");
    let damage = [
        "UPDATE conversations SET msg_count = msg_count + 1 WHERE id = 1".to_owned(),
        format!("DELETE FROM summary_children WHERE summary_id = {newest_leaf}"),
        format!("UPDATE summaries SET depth = depth + 5 WHERE id = {deepest}"),
        format!("INSERT INTO summary_children(summary_id, ord, kind, child_id) VALUES({deepest}, 999, 1, 987654)"),
    ];
    let file = rusqlite::Connection::open(dir.path().join("lcm.db")).unwrap();
    for sql in &damage {
        file.execute(sql, []).unwrap();
        db.scalar(&format!(
            "WITH d AS ({sql} RETURNING 1) SELECT count(*) FROM d"
        ));
    }
    let a = sqlite.backend().doctor().await.unwrap();
    let b = pg.backend().doctor().await.unwrap();
    assert!(!a.ok && !b.ok);
    let issues = |r: &DoctorReport| {
        let mut v: Vec<(i64, String, String)> = r
            .issues
            .iter()
            .map(|i| (i.conversation_id, i.code.clone(), i.detail.clone()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        issues(&a),
        issues(&b),
        "the same issues on SQLite (left) and PostgreSQL (right)"
    );
    let codes: Vec<String> = issues(&b).into_iter().map(|i| i.1).collect();
    for code in [
        "totals",
        "childless-summary",
        "uncovered",
        "depth-mismatch",
        "dangling-child",
    ] {
        assert!(
            codes.iter().any(|c| c == code),
            "{code} not found in {codes:?}"
        );
    }
}

/// Past the search windows (`RELEVANCE_WINDOW` matches, `TERM_WINDOW` rows per term): both
/// stores cut at the same rows, so a common word's hits still agree.
#[tokio::test]
async fn search_windows_cut_at_the_same_rows_on_both_backends() {
    let Some((_dir, sqlite, _db, pg)) = both("windows", small_cfg()).await else {
        return;
    };
    let keys = [KEY, OTHER_KEY, THIRD_KEY];
    let mut rng = Lcg(11);
    let batches: Vec<Vec<AgentMessage>> = (0..keys.len())
        .map(|k| {
            (0..1_700)
                .map(|i| {
                    let ts = 1_700_000_000_000i64 + (k * 10_000 + i) as i64 * 1_000;
                    let text = format!(
                        "the common w{} {} {}",
                        i % 97,
                        words(&mut rng, 6),
                        if i % 13 == 0 { "rare" } else { "" }
                    );
                    if i % 2 == 0 {
                        AgentMessage::user(text).with_timestamp(ts)
                    } else {
                        AgentMessage::assistant(text).with_timestamp(ts)
                    }
                })
                .collect()
        })
        .collect();
    for e in [&sqlite, &pg] {
        // Small and large batches (the SQLite store indexes them in different places).
        for (key, batch) in keys.iter().zip(&batches) {
            for chunk in batch.chunks(if *key == KEY { 7 } else { 600 }) {
                let p = IngestBatchParams {
                    session_id: "s1".into(),
                    session_key: Some((*key).into()),
                    messages: chunk.to_vec(),
                    is_heartbeat: None,
                };
                e.ingest_batch(&p, &cx()).await.unwrap();
            }
        }
    }
    let session = |k: &str| Scope::Session(ConvKey::from_host(Some(k), "s1"));
    for scope in [
        Scope::All,
        session(KEY),
        session(THIRD_KEY),
        Scope::Agent("main".into()),
    ] {
        for (p, mode, sort) in [
            ("the common", GrepMode::FullText, GrepSort::Relevance),
            ("common w5", GrepMode::FullText, GrepSort::Relevance),
            ("common", GrepMode::FullText, GrepSort::Recency),
            (
                "the common rare w7 deploy",
                GrepMode::AnyTerm,
                GrepSort::Relevance,
            ),
            ("common rare", GrepMode::AnyTerm, GrepSort::Relevance),
            ("rare", GrepMode::Regex, GrepSort::Recency),
        ] {
            for offset in [0, 40] {
                let q = GrepQuery {
                    limit: 50,
                    offset,
                    max_scan_rows: 3_000,
                    ..query(p, mode, GrepTarget::Messages, sort, scope.clone())
                };
                same_grep(&sqlite, &pg, q).await;
            }
        }
    }
}
