//! Integration tests of the lossless engine, each on both backends (a SQLite file and a fresh
//! PostgreSQL database, see [`on_both_backends!`]) except the few about the SQLite file itself.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::HashSet;
use std::sync::Arc;

use clawctx_engine::ContextEngine;
use clawctx_lossless::core::compaction;
use clawctx_lossless::*;
use clawctx_protocol::*;
use clawctx_tokens::message_tokens;
use common::*;

fn key() -> ConvKey {
    ConvKey::from_host(Some(KEY), "s1")
}

on_both_backends! {
async fn ingest_is_idempotent(store) {
    let e = store.engine(small_cfg()).await;
    let m = AgentMessage::user("hello there").with_timestamp(1);
    let p = IngestParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        message: m.clone(),
        is_heartbeat: None,
    };
    assert!(e.ingest(&p, &cx()).await.unwrap().ingested);
    assert!(
        !e.ingest(&p, &cx()).await.unwrap().ingested,
        "same message twice must be stored once"
    );
    let mut rng = Lcg(1);
    let t = turn(&mut rng, 1, true, 10);
    let mut history = vec![m.clone()];
    history.extend(t.clone());
    e.after_turn(&after_turn(&history, 1, 100_000), &cx())
        .await
        .unwrap();
    // The host re-delivers the whole transcript (double afterTurn, restarts): nothing new.
    e.after_turn(&after_turn(&history, 0, 100_000), &cx())
        .await
        .unwrap();
    let b = IngestBatchParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        messages: history.clone(),
        is_heartbeat: None,
    };
    assert_eq!(e.ingest_batch(&b, &cx()).await.unwrap().ingested_count, 0);
    let convs = e.backend().conversations().await.unwrap();
    assert_eq!(convs.len(), 1);
    assert_eq!(convs[0].msg_count, history.len() as i64);
    // Round trip: describe returns the original message.
    let r = e.backend().describe("msg_1", None).await.unwrap();
    match r {
        DescribeReport::Message(info) => assert_eq!(info.message, m),
        other => panic!("{other:?}"),
    }
}
}

on_both_backends! {
async fn assemble_fits_budget_keeps_pairs_and_includes_live_prompt(store) {
    let e = store.engine(small_cfg()).await;
    let mut rng = Lcg(7);
    let mut history = Vec::new();
    for t in 0..40 {
        history.extend(turn(&mut rng, t, t % 2 == 0, 20));
    }
    ingest_all(&e, &history).await;
    let prompt = AgentMessage::user("what about nd-live-prompt?").with_timestamp(9);
    let mut live = history.clone();
    live.push(prompt.clone());
    for budget in [300u64, 1_000, 3_000, 50_000] {
        let r = e
            .assemble(&assemble_params(live.clone(), budget), &cx())
            .await
            .unwrap();
        let sum: u64 = r.messages.iter().map(message_tokens).sum();
        assert!(sum <= budget, "{sum} > {budget}");
        assert_eq!(r.estimated_tokens, sum);
        assert_pairs_intact(&r.messages);
        assert_eq!(
            r.messages.last(),
            Some(&prompt),
            "the unstored prompt is appended"
        );
        assert!(r
            .system_prompt_addition
            .as_deref()
            .unwrap_or("")
            .contains("lcm_grep"));
    }
    // Everything fits: all stored messages in order, plus the prompt.
    let r = e
        .assemble(&assemble_params(live.clone(), 1_000_000), &cx())
        .await
        .unwrap();
    assert_eq!(r.messages, live);
    // Again: now every stored message comes from the messages decoded by the last call.
    let again = e
        .assemble(&assemble_params(live.clone(), 1_000_000), &cx())
        .await
        .unwrap();
    assert_eq!(
        again.messages, live,
        "a second assembly returns the same messages"
    );
    // A single huge message is shortened, never over budget.
    let huge = AgentMessage::user("start ".repeat(20_000) + "END").with_timestamp(11);
    let r = e
        .assemble(&assemble_params(vec![huge], 500), &cx())
        .await
        .unwrap();
    let sum: u64 = r.messages.iter().map(message_tokens).sum();
    assert!(sum <= 500 && !r.messages.is_empty(), "{sum}");
    assert!(r.messages[0].plain_text().contains("tokens omitted"));
}
}

on_both_backends! {
async fn compaction_builds_dag_doctor_passes_and_epoch_changes(store) {
    let e = store.engine(small_cfg()).await;
    let mut rng = Lcg(3);
    let mut history = Vec::new();
    for t in 0..60 {
        history.extend(turn(&mut rng, t, t % 3 == 0, 30));
    }
    ingest_all(&e, &history).await;
    let before = e
        .assemble(&assemble_params(history.clone(), 8_000), &cx())
        .await
        .unwrap();
    let epoch0 = before.context_projection.clone().unwrap().epoch;
    let r = e
        .compact(&compact_params(true, 8_000), &cx())
        .await
        .unwrap();
    assert!(r.ok && r.compacted, "{r:?}");
    // `compacted: true` comes with a reason that says so (it said "nothing eligible", the
    // last round's), and the summaries it counts are committed ones.
    let reason = r.reason.clone().unwrap();
    assert!(reason.starts_with("compacted: "), "{reason}");
    let details = r.result.as_ref().unwrap().details.clone().unwrap();
    let created = details["leafCreated"].as_u64().unwrap() + details["condensedCreated"].as_u64().unwrap();
    assert!(created > 0, "{details}");
    assert_eq!(e.backend().status().await.unwrap().summaries, created);
    // Compacting until nothing is left: each answer is consistent with itself.
    for _ in 0..10 {
        let again = e.compact(&compact_params(true, 8_000), &cx()).await.unwrap();
        let reason = again.reason.clone().unwrap();
        assert_eq!(again.compacted, reason.starts_with("compacted: "), "{again:?}");
        if !again.compacted {
            break;
        }
    }
    let after = e
        .assemble(&assemble_params(history.clone(), 8_000), &cx())
        .await
        .unwrap();
    assert_ne!(
        after.context_projection.unwrap().epoch,
        epoch0,
        "epoch changes after compaction"
    );
    assert!(after
        .messages
        .iter()
        .any(|m| m.plain_text().starts_with("<summary id=\"sum_")));
    assert_pairs_intact(&after.messages);
    // Stable bytes between turns: assembling twice gives identical output.
    let again = e
        .assemble(&assemble_params(history.clone(), 8_000), &cx())
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_string(&after.messages).unwrap(),
        serde_json::to_string(&again.messages).unwrap()
    );
    let doc = e.backend().doctor().await.unwrap();
    assert!(doc.ok, "{:#?}", doc.issues);
    assert!(doc.status.summaries > 0);
    // The fresh tail stays raw: the newest 8 messages are the last 8 assembled.
    let n = after.messages.len();
    assert_eq!(&after.messages[n - 8..], &history[history.len() - 8..]);
}
}

on_both_backends! {
async fn doctor_detects_broken_coverage(store) {
    // Guard against a doctor that always says ok: damage the frontier by hand.
    let e = store.engine(small_cfg()).await;
    let mut rng = Lcg(5);
    let mut history = Vec::new();
    for t in 0..10 {
        history.extend(turn(&mut rng, t, false, 5));
    }
    ingest_all(&e, &history).await;
    assert!(e.backend().doctor().await.unwrap().ok);
    store.execute(&e, "DELETE FROM frontier WHERE ord = 3").await;
    let doc = e.backend().doctor().await.unwrap();
    assert!(!doc.ok);
    assert!(doc.issues.iter().any(|i| i.code == "uncovered"), "{:#?}", doc.issues);
    assert!(doc.issues.iter().any(|i| i.code == "totals"), "{:#?}", doc.issues);
}
}

on_both_backends! {
async fn a_failing_summarizer_never_stops_compaction(store) {
    // A model that errors (or whose summaries the validator rejects) does not leave its ranges
    // raw: each is summarized extractively in the same round, marked as a fallback in the DAG,
    // and the model is asked again by the next compaction.
    let cfg = LosslessConfig {
        min_salient_retention: 0.0,
        circuit_breaker_threshold: 100,
        ..small_cfg()
    };
    let fake = FakeSummarizer::new(1_000_000);
    let e = store.engine(cfg.clone()).await.with_summarizer(fake.clone());
    let mut rng = Lcg(9);
    let mut history = Vec::new();
    for t in 0..30 {
        history.extend(turn(&mut rng, t, false, 30));
    }
    ingest_all(&e, &history).await;
    let frontier_before = store.frontier(&e, 1).await;
    let r = e
        .compact(&compact_params(true, 8_000), &cx())
        .await
        .unwrap();
    assert!(r.ok && r.compacted, "{r:?}");
    let details = r.result.as_ref().unwrap().details.clone().unwrap();
    let failed = details["failed"].as_u64().unwrap();
    assert!(failed > 0, "{details}");
    assert_eq!(details["extractiveUsed"].as_u64().unwrap(), failed, "{details}");
    let first_calls = fake.calls();
    assert_eq!(first_calls as u64, failed, "one model call per range");
    assert!(store.frontier(&e, 1).await.len() < frontier_before.len());
    let by = store
        .texts(&e, "SELECT DISTINCT summarizer FROM summaries")
        .await;
    assert_eq!(by, vec![compaction::FALLBACK_SUMMARIZER.to_owned()]);
    assert!(e.backend().doctor().await.unwrap().ok);
    // The next compaction asks the model again; once it works, its summaries are kept.
    drop(e);
    let ok = FakeSummarizer::new(0);
    let e = store.engine(cfg).await.with_summarizer(ok.clone());
    for t in 30..60 {
        let more = turn(&mut rng, t, false, 30);
        ingest_all(&e, &more).await;
    }
    let r = e
        .compact(&compact_params(true, 8_000), &cx())
        .await
        .unwrap();
    assert!(r.compacted, "{r:?}");
    assert!(ok.calls() > 0);
    let by = store
        .texts(&e, "SELECT DISTINCT summarizer FROM summaries ORDER BY 1")
        .await;
    assert!(by.contains(&"fake-10pct".to_owned()), "{by:?}");
    assert!(e.backend().doctor().await.unwrap().ok);
}
}

on_both_backends! {
async fn invalid_summaries_are_rejected_and_breaker_falls_back_to_extractive(store) {
    // Default retention threshold: the 10% head loses most salient terms of later messages.
    let cfg = LosslessConfig {
        circuit_breaker_threshold: 1,
        ..small_cfg()
    };
    // Always fails: the first round opens the breaker (threshold 1); after that the extractive
    // summarizer is the last resort.
    let fake = FakeSummarizer::new(usize::MAX / 2);
    let e = store.engine(cfg).await.with_summarizer(fake.clone());
    let mut rng = Lcg(11);
    let mut history = Vec::new();
    for t in 0..30 {
        history.extend(turn(&mut rng, t, t % 2 == 0, 30));
    }
    ingest_all(&e, &history).await;
    let mut extractive = 0;
    let mut failed = 0;
    for _ in 0..2 {
        let r = e
            .compact(&compact_params(true, 8_000), &cx())
            .await
            .unwrap();
        let details = r.result.unwrap().details.unwrap();
        extractive += details["extractiveUsed"].as_u64().unwrap();
        failed += details["failed"].as_u64().unwrap();
    }
    assert!(failed >= 1, "the scripted failure was seen");
    assert!(
        extractive > 0,
        "the open breaker routes to the extractive summarizer"
    );
    let st = e.backend().status().await.unwrap();
    assert!(st.summaries > 0);
    let doc = e.backend().doctor().await.unwrap();
    assert!(doc.ok, "{:#?}", doc.issues);
}
}

#[test]
fn validation_rules() {
    let cfg = LosslessConfig::default();
    let src = "We changed src/main.rs and FooBar::baz() at 2024-05-01 with error E0425 on host api.example.com";
    assert!(
        compaction::validate_summary(&cfg, src, 1000, 100, "").is_some(),
        "empty"
    );
    assert!(
        compaction::validate_summary(
            &cfg,
            src,
            5,
            100,
            "a much longer text than five tokens here"
        )
        .is_some(),
        "not smaller"
    );
    assert!(
        compaction::validate_summary(&cfg, src, 10_000, 10, &"word ".repeat(100)).is_some(),
        "over target"
    );
    assert!(
        compaction::validate_summary(&cfg, src, 1000, 100, "nothing relevant").is_some(),
        "loses terms"
    );
    assert!(compaction::validate_summary(
        &cfg,
        src,
        1000,
        100,
        "changed src/main.rs FooBar::baz() E0425 api.example.com 2024-05-01"
    )
    .is_none());

    // Plain chat has no names, numbers or paths for the salient-term rule to count: a model's
    // refusal must still not pass for a summary of it.
    let chat = "User: we walked along the river before dinner and talked about the garden \
                fence, the tomatoes and the neighbour's apple tree\nAssistant: sounds lovely, \
                the tomatoes should ripen soon";
    let why = compaction::validate_summary(
        &cfg,
        chat,
        1000,
        100,
        "I am unable to summarize this conversation at this time.",
    );
    assert!(
        why.as_deref().is_some_and(|w| w.contains("words")),
        "{why:?}"
    );
    assert!(compaction::validate_summary(
        &cfg,
        chat,
        1000,
        100,
        "A walk along the river; the garden fence, tomatoes ripening soon."
    )
    .is_none());
    // Chinese and Japanese text is not split into words by spaces: not judged by this rule.
    let cjk =
        "用户：我们在河边散步，然后讨论了花园的栅栏和番茄。\n助手：トマトはもうすぐ熟します。";
    assert!(
        compaction::validate_summary(&cfg, cjk, 1000, 100, "河边散步，花园栅栏，番茄。").is_none()
    );
}

on_both_backends! {
async fn fts_syntax_from_the_model_never_errors(store) {
    let e = store.engine(small_cfg()).await;
    ingest_all(
        &e,
        &[AgentMessage::user("foo or bar (baz)").with_timestamp(1)],
    )
    .await;
    for q in [
        "foo\" OR (",
        "\"",
        "*",
        "NEAR(",
        ")))",
        "",
        "foo AND",
        "a:b",
        "col:foo",
        "^foo",
        "-foo",
        "foo*",
    ] {
        let r = e.backend().grep(GrepQuery::new(q, Scope::All)).await;
        assert!(r.is_ok(), "{q}: {r:?}");
    }
    let r = e
        .backend()
        .grep(GrepQuery::new("foo\" OR (", Scope::All))
        .await
        .unwrap();
    assert_eq!(r.hits.len(), 1);
    assert_eq!(r.hits[0].id, "msg_1");
    let mut rq = GrepQuery::new("(unclosed", Scope::All);
    rq.mode = GrepMode::Regex;
    let r = e.backend().grep(rq).await;
    assert!(matches!(r, Err(LosslessError::InvalidInput(_))), "{r:?}");
}
}

on_both_backends! {
async fn grep_paginates_and_scopes_by_session_and_agent(store) {
    let e = store.engine(small_cfg()).await;
    let msgs: Vec<AgentMessage> = (0..25)
        .map(|i| AgentMessage::user(format!("needle item {i}")).with_timestamp(i))
        .collect();
    ingest_all(&e, &msgs).await;
    let other = IngestBatchParams {
        session_id: "x".into(),
        session_key: Some("agent:other:s".into()),
        messages: vec![AgentMessage::user("needle from another agent").with_timestamp(1)],
        is_heartbeat: None,
    };
    e.ingest_batch(&other, &cx()).await.unwrap();
    let mut q = GrepQuery::new("needle", Scope::Session(key()));
    q.limit = 10;
    q.sort = GrepSort::Recency;
    let p1 = e.backend().grep(q.clone()).await.unwrap();
    assert_eq!(p1.hits.len(), 10);
    assert_eq!(p1.next_offset, Some(10));
    q.offset = 20;
    let p3 = e.backend().grep(q.clone()).await.unwrap();
    assert_eq!(p3.hits.len(), 5);
    assert_eq!(p3.next_offset, None);
    let agent = e
        .backend()
        .grep(GrepQuery {
            limit: 100,
            ..GrepQuery::new("needle", Scope::Agent("main".into()))
        })
        .await
        .unwrap();
    assert_eq!(agent.hits.len(), 25, "other agents are invisible");
    // The model-facing tool is scoped to the caller's agent.
    let tools = e.tools();
    let grep = tools.iter().find(|t| t.name() == "lcm_grep").unwrap();
    let out = grep
        .execute(
            serde_json::json!({"query": "another agent"}),
            clawctx_engine::ToolCallContext {
                session_id: "s1".into(),
                session_key: Some(KEY.into()),
                tool_call_id: None,
            },
        )
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["hits"].as_array().unwrap().len(), 0);
    let describe = tools.iter().find(|t| t.name() == "lcm_describe").unwrap();
    let cross = describe
        .execute(
            serde_json::json!({"id": "msg_26"}),
            clawctx_engine::ToolCallContext {
                session_id: "s1".into(),
                session_key: Some(KEY.into()),
                tool_call_id: None,
            },
        )
        .await;
    assert!(
        cross.is_err(),
        "describe across agents must fail: {cross:?}"
    );
}
}

// SQLite-only: about foreign and damaged SQLite files (their bytes and WAL).
#[tokio::test]
async fn foreign_and_corrupt_files_are_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, b"this is not a database at all, just some bytes").unwrap();
    let before = std::fs::read(&junk).unwrap();
    let err = LosslessStore::open(&junk).unwrap_err();
    assert!(matches!(err, LosslessError::Refused { .. }), "{err}");
    assert_eq!(std::fs::read(&junk).unwrap(), before);

    let foreign = dir.path().join("foreign.db");
    {
        let c = rusqlite::Connection::open(&foreign).unwrap();
        c.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
            .unwrap();
    }
    let before = std::fs::read(&foreign).unwrap();
    let err = LosslessStore::open(&foreign).unwrap_err();
    assert!(matches!(err, LosslessError::Refused { .. }), "{err}");
    assert!(
        err.to_string().contains("not a clawctx lossless store"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&foreign).unwrap(),
        before,
        "foreign file modified"
    );
    assert!(!dir.path().join("foreign.db-wal").exists());

    // A damaged store (valid header, garbage after) is refused too.
    let good = dir.path().join("good.db");
    drop(LosslessStore::open(&good).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(50));
    let mut bytes = std::fs::read(&good).unwrap();
    for b in bytes.iter_mut().skip(100) {
        *b = 0x5a;
    }
    std::fs::write(&good, &bytes).unwrap();
    let r = LosslessStore::open(&good);
    assert!(r.is_err(), "damaged store must not open");
    assert_eq!(std::fs::read(&good).unwrap(), bytes);
}

// SQLite-only: SQLite's file lock and busy timeout, taken by a rusqlite connection.
#[tokio::test]
async fn locked_database_gives_a_clear_busy_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lcm.db");
    let e = LosslessEngine::open(
        &path,
        LosslessConfig {
            busy_timeout_ms: 100,
            ..small_cfg()
        },
    )
    .unwrap();
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let p = IngestParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        message: AgentMessage::user("x"),
        is_heartbeat: None,
    };
    let err = e.ingest(&p, &cx()).await.unwrap_err();
    assert!(err.to_string().contains("locked"), "{err}");
    other.execute_batch("ROLLBACK").unwrap();
    assert!(e.ingest(&p, &cx()).await.unwrap().ingested);
}

on_both_backends! {
async fn ignored_and_read_only_session_globs(store) {
    // Seed a read-only session's history with a normal engine first.
    {
        let e = store.engine(small_cfg()).await;
        let p = IngestBatchParams {
            session_id: "r".into(),
            session_key: Some("agent:main:subagent:a:b".into()),
            messages: vec![AgentMessage::user("seeded history").with_timestamp(1)],
            is_heartbeat: None,
        };
        assert_eq!(e.ingest_batch(&p, &cx()).await.unwrap().ingested_count, 1);
    }
    let cfg = LosslessConfig {
        ignore_session_patterns: vec!["agent:*:cron:*".into()],
        read_only_session_patterns: vec!["agent:*:subagent:**".into()],
        ..small_cfg()
    };
    let e = store.engine(cfg).await;
    let cron = IngestParams {
        session_id: "c".into(),
        session_key: Some("agent:main:cron:nightly".into()),
        message: AgentMessage::user("tick"),
        is_heartbeat: None,
    };
    assert!(!e.ingest(&cron, &cx()).await.unwrap().ingested);
    let ro = IngestParams {
        session_id: "r".into(),
        session_key: Some("agent:main:subagent:a:b".into()),
        message: AgentMessage::user("new in read-only").with_timestamp(2),
        is_heartbeat: None,
    };
    assert!(!e.ingest(&ro, &cx()).await.unwrap().ingested);
    let convs = e.backend().conversations().await.unwrap();
    assert_eq!(convs.len(), 1, "ignored session created nothing");
    assert_eq!(convs[0].msg_count, 1, "read-only session not written");
    // Read-only assemble serves the stored history plus the live prompt.
    let a = AssembleParams {
        session_id: "r".into(),
        session_key: Some("agent:main:subagent:a:b".into()),
        messages: vec![AgentMessage::user("prompt").with_timestamp(3)],
        token_budget: Some(1000),
        ..Default::default()
    };
    let r = e.assemble(&a, &cx()).await.unwrap();
    assert_eq!(r.messages.len(), 2);
    assert_eq!(r.messages[0].plain_text(), "seeded history");
    // Ignored: pass-through, clamped.
    let a = AssembleParams {
        session_id: "c".into(),
        session_key: Some("agent:main:cron:nightly".into()),
        messages: vec![AgentMessage::user("tick")],
        token_budget: Some(1000),
        ..Default::default()
    };
    let r = e.assemble(&a, &cx()).await.unwrap();
    assert_eq!(r.messages, vec![AgentMessage::user("tick")]);
    let c = e
        .compact(
            &CompactParams {
                session_id: "c".into(),
                session_key: Some("agent:main:cron:nightly".into()),
                force: Some(true),
                ..Default::default()
            },
            &cx(),
        )
        .await
        .unwrap();
    assert!(!c.compacted);
}
}

on_both_backends! {
async fn reset_carries_deep_summaries_only(store) {
    let cfg = LosslessConfig {
        fresh_tail_count: 4,
        leaf_chunk_tokens: 300,
        leaf_min_fanout: 2,
        condensed_min_fanout: 2,
        summary_prefix_target_tokens: 200,
        new_session_retain_depth: 1,
        max_compaction_rounds: 16,
        ..small_cfg()
    };
    let e = store.engine(cfg).await;
    let mut rng = Lcg(21);
    let mut history = Vec::new();
    for t in 0..40 {
        history.extend(turn(&mut rng, t, false, 25));
    }
    ingest_all(&e, &history).await;
    for _ in 0..3 {
        e.compact(&compact_params(true, 4_000), &cx())
            .await
            .unwrap();
    }
    let st = e.backend().status().await.unwrap();
    assert!(st.max_depth >= 1, "{st:?}");
    let old_frontier = store.frontier(&e, 1).await;
    let deep: Vec<String> = {
        let mut v = Vec::new();
        for (id, _) in &old_frontier {
            if id.starts_with("sum_") {
                if let DescribeReport::Summary(s) = e.backend().describe(id, None).await.unwrap() {
                    if s.depth >= 1 {
                        v.push(id.clone());
                    }
                }
            }
        }
        v
    };
    assert!(!deep.is_empty());
    assert!(
        old_frontier.len() > deep.len(),
        "the old frontier also has raw/shallow items"
    );
    let rep = e.on_session_reset(KEY, KEY).await.unwrap();
    assert_eq!(rep.carried_summaries, deep.len());
    assert_eq!(rep.archived_conversation, Some(1));
    let new_frontier: Vec<String> = store
        .frontier(&e, rep.conversation_id)
        .await
        .into_iter()
        .map(|x| x.0)
        .collect();
    assert_eq!(new_frontier, deep);
    // Old messages are still searchable from the session.
    let g = e
        .backend()
        .grep(GrepQuery::new("nd0x0", Scope::Session(key())))
        .await
        .unwrap();
    assert!(!g.hits.is_empty());
    // New turns go to the new conversation; doctor is happy with both.
    ingest_all(&e, &turn(&mut rng, 99, true, 5)).await;
    let doc = e.backend().doctor().await.unwrap();
    assert!(doc.ok, "{:#?}", doc.issues);
    let a = e
        .assemble(&assemble_params(vec![], 100_000), &cx())
        .await
        .unwrap();
    assert_eq!(a.messages.len(), deep.len() + 4);
}
}

on_both_backends! {
async fn ten_thousand_messages_stay_retrievable_through_many_compactions(store) {
    let cfg = LosslessConfig {
        fresh_tail_count: 16,
        leaf_chunk_tokens: 2_000,
        ..Default::default()
    };
    let e = store.engine(cfg).await;
    let mut rng = Lcg(42);
    let mut history: Vec<AgentMessage> = Vec::new();
    let budget = 12_000;
    let mut t = 0;
    while history.len() < 10_000 {
        let pre = history.len();
        history.extend(turn(&mut rng, t, t % 4 == 0, 6));
        // The host's transcript view (only its recent part, to keep the test linear).
        let from = pre.saturating_sub(12);
        e.after_turn(&after_turn(&history[from..], pre - from, budget), &cx())
            .await
            .unwrap();
        if t % 200 == 0 {
            let r = e
                .assemble(&assemble_params(history.clone(), budget), &cx())
                .await
                .unwrap();
            assert!(r.estimated_tokens <= budget);
            assert_pairs_intact(&r.messages);
        }
        t += 1;
    }
    let st = e.backend().status().await.unwrap();
    assert_eq!(st.messages as usize, history.len());
    assert!(st.summaries > 20, "{st:?}");
    let doc = e.backend().doctor().await.unwrap();
    assert!(doc.ok, "{:#?}", &doc.issues[..doc.issues.len().min(5)]);
    // Walk the DAG from the frontier with expand: every message exactly once.
    let frontier = store.frontier(&e, 1).await;
    let mut stack: Vec<String> = frontier.into_iter().map(|x| x.0).collect();
    let mut seen = HashSet::new();
    while let Some(id) = stack.pop() {
        if id.starts_with("msg_") {
            assert!(seen.insert(id), "message reached twice");
            continue;
        }
        let r = e.backend().expand(&id, u64::MAX, None).await.unwrap();
        assert!(!r.truncated);
        stack.extend(r.items.into_iter().map(|i| i.id));
    }
    assert_eq!(seen.len(), history.len());
    // Grep finds sampled needles in the original message.
    for turn_no in (0..t).step_by(97) {
        let needle = format!("nd{turn_no}x9");
        let g = e
            .backend()
            .grep(GrepQuery {
                target: GrepTarget::Messages,
                ..GrepQuery::new(&needle, Scope::Session(key()))
            })
            .await
            .unwrap();
        assert_eq!(g.hits.len(), 1, "{needle}");
        match e.backend().describe(&g.hits[0].id, None).await.unwrap() {
            DescribeReport::Message(m) => assert!(m.message.plain_text().starts_with(&needle)),
            other => panic!("{other:?}"),
        }
    }
}
}

on_both_backends! {
async fn import_openclaw_jsonl_is_idempotent(store) {
    let e = store.engine(small_cfg()).await;
    let path = store.dir.path().join("s.jsonl");
    let lines = [
        serde_json::json!({"type":"session","id":"sess-1","version":3}),
        serde_json::json!({"type":"message","id":"a","parentId":null,"message":{"role":"user","content":"first","timestamp":1}}),
        serde_json::json!({"type":"message","id":"b","parentId":"a","message":{"role":"assistant","content":[{"type":"text","text":"dead branch"}],"timestamp":2}}),
        serde_json::json!({"type":"message","id":"c","parentId":"a","message":{"role":"assistant","content":[{"type":"text","text":"kept"}],"timestamp":3}}),
    ];
    std::fs::write(
        &path,
        lines
            .iter()
            .map(|l| l.to_string() + "\n")
            .collect::<String>(),
    )
    .unwrap();
    let import = |apply: bool| {
        let (e, path) = (&e, path.clone());
        async move {
            e.backend()
                .import_jsonl(&key(), path, apply, false)
                .await
                .unwrap()
                .expect("an import that may write into a non-empty conversation reports")
        }
    };
    let dry = import(false).await;
    assert_eq!((dry.messages, dry.new_messages, dry.applied), (2, 2, false));
    assert!(e.backend().conversations().await.unwrap().is_empty());
    let r = import(true).await;
    assert_eq!(r.new_messages, 2);
    let r = import(true).await;
    assert_eq!(r.new_messages, 0);
}
}

on_both_backends! {
async fn registers_as_plugin_engine_with_config(store) {
    let reg = clawctx_engine::ContextEngineRegistry::with_legacy();
    assert_eq!(register(&reg).unwrap(), clawctx_engine::RegisterOutcome::Ok);
    let r = reg.get("lossless").unwrap();
    assert_eq!(r.owner, "plugin:lossless");
    let mut config = store.location_config();
    config["freshTailCount"] = 5.into();
    let cfg = serde_json::json!({"plugins": {"entries": {"lossless": {"config": config}}}});
    let ctx = clawctx_engine::FactoryContext {
        config: Some(Arc::new(cfg)),
        ..Default::default()
    };
    let engine = (r.factory)(ctx).await.unwrap();
    let info = engine.info();
    assert_eq!(info.id, "lossless");
    assert_eq!(info.owns_compaction, Some(true));
    assert_eq!(engine.tools().len(), 3);
    // The engine writes to the configured store.
    let p = IngestParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        message: AgentMessage::user("through the factory").with_timestamp(1),
        is_heartbeat: None,
    };
    assert!(engine.ingest(&p, &cx()).await.unwrap().ingested);
    engine.dispose().await.unwrap();
    let e = store.engine(small_cfg()).await;
    let convs = e.backend().conversations().await.unwrap();
    assert_eq!(convs.len(), 1, "the factory's engine used the configured store");
    assert_eq!(convs[0].msg_count, 1);
}
}

on_both_backends! {
/// `lcm_grep` in regex mode reads every kind of stored text: short (kept as TEXT), chat-sized
/// (an LZ4 frame), a large tool output (a zstd frame in `payloads`), and a message of a role the
/// store does not name (its role kept in the skeleton); hits come newest first, each labelled
/// with its role and a snippet around the match.
async fn regex_grep_reads_every_kind_of_stored_text(store) {
    let e = store.engine(small_cfg()).await;
    let filler = "the build failed because the parser rejected the value ".repeat(12);
    let system: AgentMessage = serde_json::from_value(serde_json::json!({
        "role": "system", "content": "policy note, see ticket-404", "timestamp": 4
    }))
    .unwrap();
    let msgs = vec![
        AgentMessage::user("short one about ticket-101").with_timestamp(1),
        AgentMessage::assistant(format!("{filler} then ticket-202 {filler}")).with_timestamp(2),
        AgentMessage::tool_result(
            "c1",
            "read",
            format!("{} ticket-303 {}", "log line 42 ok\n".repeat(700), filler),
        )
        .with_timestamp(3),
        system,
        AgentMessage::user("nothing to see here").with_timestamp(5),
    ];
    ingest_all(&e, &msgs).await;
    if store.is_sqlite() {
        // SQLite's layout: a large tool output goes to `payloads` (PostgreSQL keeps it inline).
        let st = e.backend().status().await.unwrap();
        assert_eq!(st.payloads, 1, "the tool output is stored as a payload");
    }
    let mut q = GrepQuery::new(r"ticket-\d{3}", Scope::Session(key()));
    q.mode = GrepMode::Regex;
    let r = e.backend().grep(q).await.unwrap();
    let got: Vec<(&str, &str)> = r
        .hits
        .iter()
        .map(|h| (h.id.as_str(), h.role.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("msg_4", "system"),
            ("msg_3", "toolResult"),
            ("msg_2", "assistant"),
            ("msg_1", "user")
        ],
        "{r:?}"
    );
    for (hit, n) in r.hits.iter().zip(["404", "303", "202", "101"]) {
        assert!(
            hit.snippet.contains(&format!("ticket-{n}")),
            "the snippet of {} shows the match: {:?}",
            hit.id,
            hit.snippet
        );
    }
    let mut none = GrepQuery::new(r"ticket-9\d\d", Scope::Session(key()));
    none.mode = GrepMode::Regex;
    assert!(e.backend().grep(none).await.unwrap().hits.is_empty());
}
}

on_both_backends! {
/// A regex scan over many batches of rows: hits come newest first across batch boundaries,
/// pages follow on, the scan bound stops it (and says so), and rows of another conversation
/// count against that bound but are never hits.
async fn regex_grep_pages_and_bounds_a_long_scan(store) {
    let e = store.engine(small_cfg()).await;
    let msgs: Vec<AgentMessage> = (0..1200)
        .map(|i| {
            let text = if i % 7 == 0 {
                format!("entry {i}: order ord-{i:05} shipped")
            } else {
                format!("entry {i}: nothing of note")
            };
            AgentMessage::user(text).with_timestamp(i)
        })
        .collect();
    ingest_all(&e, &msgs).await;
    let other = IngestBatchParams {
        session_id: "x".into(),
        session_key: Some("agent:other:s".into()),
        messages: (0..300)
            .map(|i| AgentMessage::user(format!("other ord-{i:05}")).with_timestamp(i))
            .collect(),
        is_heartbeat: None,
    };
    e.ingest_batch(&other, &cx()).await.unwrap();
    let matching: Vec<i64> = (0..1200).rev().filter(|i| i % 7 == 0).collect();
    let query = |offset: usize, max_scan_rows: u64| {
        let mut q = GrepQuery::new(r"ord-\d{5} shipped", Scope::Session(key()));
        q.mode = GrepMode::Regex;
        q.limit = 20;
        q.offset = offset;
        q.max_scan_rows = max_scan_rows;
        q
    };
    let stamps = |r: &GrepReport| r.hits.iter().map(|h| h.ts.unwrap()).collect::<Vec<_>>();
    let first = e.backend().grep(query(0, 50_000)).await.unwrap();
    assert_eq!(
        stamps(&first),
        matching[..20],
        "the newest 20, newest first"
    );
    assert!(!first.scan_truncated);
    assert_eq!(first.next_offset, Some(20));
    let second = e.backend().grep(query(20, 50_000)).await.unwrap();
    assert_eq!(stamps(&second), matching[20..40], "the next page");
    // The other conversation's 300 rows are the newest: a bound of 400 rows reaches only the
    // newest 100 of this one, 14 of them matching.
    let bounded = e.backend().grep(query(0, 400)).await.unwrap();
    assert!(
        bounded.scan_truncated,
        "the bound ended the scan short of a page"
    );
    let newest_hundred: Vec<i64> = matching.iter().copied().filter(|&i| i >= 1100).collect();
    assert_eq!(stamps(&bounded), newest_hundred);
}
}
