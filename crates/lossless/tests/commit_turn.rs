//! `commitTurn` (contract §1.7, durable admitted turns): one atomic, idempotent write keyed by
//! `advancementKey`, on both backends (a SQLite file and a fresh PostgreSQL database, see
//! [`on_both_backends!`]). The host retries a failed commit from its outbox, possibly after a
//! restart, so the same key may arrive again at any time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use clawctx_engine::{ContextEngine, Method};
use clawctx_lossless::*;
use clawctx_protocol::*;
use common::*;

/// A turn's messages as the host commits them: the admitted user entry to the accepted
/// terminal entry. `large` makes it long enough (≥ 16 messages) for the streamed ingest path.
fn turn_messages(t: usize, large: bool) -> Vec<AgentMessage> {
    let mut rng = Lcg(t as u64 + 1);
    let mut msgs = turn(&mut rng, t, true, 20);
    if large {
        let ts = 1_700_000_000_000i64 + (t as i64) * 60_000;
        let last = msgs.pop().unwrap();
        for k in 0..8 {
            let id = format!("call_{t}_{k}");
            msgs.push(
                AgentMessage::tool_call(&id, "read", serde_json::json!({"path": format!("f{k}")}))
                    .with_timestamp(ts + 10 + 2 * k as i64),
            );
            msgs.push(
                AgentMessage::tool_result(
                    &id,
                    "read",
                    format!("nd{t}y{k} {}", words(&mut rng, 40)),
                )
                .with_timestamp(ts + 11 + 2 * k as i64),
            );
        }
        msgs.push(last);
    }
    msgs
}

fn anchor(session: &str, key: &str, entry: &str) -> TranscriptEntryAnchor {
    TranscriptEntryAnchor {
        agent_id: "main".into(),
        session_id: session.into(),
        session_key: key.into(),
        entry_id: entry.into(),
        ..Default::default()
    }
}

/// `commitTurn` params for session `s1` (key [`KEY`]).
fn commit(advancement_key: &str, messages: Vec<AgentMessage>) -> CommitTurnParams {
    commit_in("s1", KEY, advancement_key, messages)
}

fn commit_in(
    session: &str,
    key: &str,
    advancement_key: &str,
    messages: Vec<AgentMessage>,
) -> CommitTurnParams {
    CommitTurnParams {
        advancement_key: advancement_key.into(),
        admission: TranscriptTurnAdmission {
            anchor: anchor(session, key, &format!("{advancement_key}:user")),
            logical_turn_id: format!("turn-{advancement_key}"),
            role: "user".into(),
        },
        terminal: anchor(session, key, &format!("{advancement_key}:terminal")),
        messages,
        session_id: session.into(),
        session_key: Some(key.into()),
        ..Default::default()
    }
}

/// Message rows in the whole store.
async fn message_rows(store: &TestStore, e: &LosslessEngine) -> i64 {
    store.count(e, "SELECT count(*) FROM messages").await
}

/// The advancement keys recorded, sorted.
async fn recorded_keys(store: &TestStore, e: &LosslessEngine) -> Vec<String> {
    store
        .texts(e, "SELECT advancement_key FROM turn_commits ORDER BY 1")
        .await
}

async fn status_of(e: &LosslessEngine, p: &CommitTurnParams) -> CommitTurnStatus {
    e.commit_turn(p, &cx()).await.unwrap().status
}

async fn assert_doctor_ok(e: &LosslessEngine) {
    let report = e.backend().doctor().await.unwrap();
    assert!(report.ok, "doctor after commits: {:?}", report.issues);
}

on_both_backends! {
async fn info_declares_full_durable_turn_semantics_and_lists_commit_turn(store) {
    let e = store.engine(small_cfg()).await;
    let semantics = e.info().transcript_semantics.unwrap_or_default();
    assert!(
        semantics.is_full(),
        "§1.7: the full declaration needs currentTurnFence = before-current-turn-entry-v1 and \
         turnAdvancementIdempotency = atomic-idempotent-v1, got {semantics:?}"
    );
    assert_eq!(
        e.info(),
        lossless_info(),
        "the engine's info is lossless_info()"
    );
    assert!(
        e.methods().has(Method::CommitTurn),
        "§1.7: a full declaration also needs commitTurn in methods(), or the host degrades \
         every turn to the legacy path"
    );
    assert_eq!(
        clawctx_engine::resolve::contract_error("lossless", &e),
        None,
        "the declaration passes contract validation"
    );
    let json = serde_json::to_value(e.info()).unwrap();
    assert_eq!(
        json["transcriptSemantics"],
        serde_json::json!({
            "currentTurnFence": "before-current-turn-entry-v1",
            "turnAdvancementIdempotency": "atomic-idempotent-v1"
        }),
        "§1.7: the wire form of the declaration"
    );
}
}

on_both_backends! {
async fn first_commit_answers_committed_and_stores_the_turn_once(first_store) {
    for large in [false, true] {
        let second;
        let store = if large {
            second = first_store.another();
            &second
        } else {
            first_store
        };
        let e = store.engine(small_cfg()).await;
        let msgs = turn_messages(1, large);
        assert_eq!(
            status_of(&e, &commit("adv-1", msgs.clone())).await,
            CommitTurnStatus::Committed,
            "§1.7: the first write of a key answers committed (large turn: {large})"
        );
        assert_eq!(
            message_rows(store, &e).await,
            msgs.len() as i64,
            "every message of the turn is stored once (large turn: {large})"
        );
        assert_eq!(recorded_keys(store, &e).await, vec!["adv-1".to_owned()]);
        // The stored turn is what assembly serves: the messages, in order.
        let a = e
            .assemble(&assemble_params(Vec::new(), 100_000), &cx())
            .await
            .unwrap();
        assert_eq!(a.messages, msgs, "assembly serves the committed turn");
        let again = IngestBatchParams {
            session_id: "s1".into(),
            session_key: Some(KEY.into()),
            messages: msgs.clone(),
            is_heartbeat: None,
        };
        assert_eq!(
            e.ingest_batch(&again, &cx()).await.unwrap().ingested_count,
            0,
            "the committed messages have the identities ingest uses"
        );
        assert_doctor_ok(&e).await;
    }
}
}

on_both_backends! {
async fn the_same_key_again_is_a_duplicate_and_stores_nothing(first_store) {
    for large in [false, true] {
        let second;
        let store = if large {
            second = first_store.another();
            &second
        } else {
            first_store
        };
        let e = store.engine(small_cfg()).await;
        let msgs = turn_messages(2, large);
        assert_eq!(
            status_of(&e, &commit("adv-2", msgs.clone())).await,
            CommitTurnStatus::Committed
        );
        let rows = message_rows(store, &e).await;
        assert_eq!(
            status_of(&e, &commit("adv-2", msgs.clone())).await,
            CommitTurnStatus::Duplicate,
            "§1.7: a retry that presents a committed key answers duplicate (large turn: {large})"
        );
        // A retry carrying a message the first write did not have still writes nothing: the
        // key, not message identity, makes the commit idempotent.
        let mut more = msgs.clone();
        more.push(AgentMessage::assistant("never stored").with_timestamp(9));
        assert_eq!(
            status_of(&e, &commit("adv-2", more)).await,
            CommitTurnStatus::Duplicate,
            "§1.7: the key decides, whatever the retry carries"
        );
        assert_eq!(message_rows(store, &e).await, rows, "a duplicate stores nothing");
        assert_eq!(recorded_keys(store, &e).await, vec!["adv-2".to_owned()]);
        assert_doctor_ok(&e).await;
    }
}
}

on_both_backends! {
async fn the_same_key_after_a_restart_is_a_duplicate(store) {
    let msgs = turn_messages(3, false);
    {
        let e = store.engine(small_cfg()).await;
        assert_eq!(
            status_of(&e, &commit("adv-3", msgs.clone())).await,
            CommitTurnStatus::Committed
        );
        e.dispose().await.unwrap();
    }
    // A new process: the host's outbox retries the commit it never saw acknowledged.
    let e = store.engine(small_cfg()).await;
    assert_eq!(
        status_of(&e, &commit("adv-3", msgs.clone())).await,
        CommitTurnStatus::Duplicate,
        "§1.7: the committed key survives a restart (it is in the store, not in memory)"
    );
    assert_eq!(message_rows(store, &e).await, msgs.len() as i64, "stored once");
    assert_eq!(
        status_of(&e, &commit("adv-4", turn_messages(4, false))).await,
        CommitTurnStatus::Committed,
        "a new key after the restart commits"
    );
}
}

on_both_backends! {
async fn different_keys_with_overlapping_messages_store_each_message_once(store) {
    let e = store.engine(small_cfg()).await;
    let first = turn_messages(5, false);
    let second = turn_messages(6, true);
    // The second commit repeats the first turn's messages before its own.
    let overlapping: Vec<AgentMessage> = first.iter().chain(&second).cloned().collect();
    assert_eq!(
        status_of(&e, &commit("adv-5", first.clone())).await,
        CommitTurnStatus::Committed
    );
    assert_eq!(
        status_of(&e, &commit("adv-6", overlapping.clone())).await,
        CommitTurnStatus::Committed,
        "§1.7: a new key commits even when its messages overlap a committed turn"
    );
    assert_eq!(
        message_rows(store, &e).await,
        (first.len() + second.len()) as i64,
        "each message is stored once (ingest is idempotent by identity)"
    );
    assert_eq!(
        recorded_keys(store, &e).await,
        vec!["adv-5".to_owned(), "adv-6".to_owned()]
    );
    let a = e
        .assemble(&assemble_params(Vec::new(), 100_000), &cx())
        .await
        .unwrap();
    assert_eq!(
        a.messages, overlapping,
        "the frontier holds each message once, in order"
    );
    assert_doctor_ok(&e).await;
}
}

on_both_backends! {
async fn a_failed_commit_records_no_key_and_the_retry_commits(store) {
    let e = store
        .engine(LosslessConfig {
            busy_timeout_ms: 100,
            ..small_cfg()
        })
        .await;
    // Failures injected into the store's own transaction by triggers: while a message is
    // inserted (some of the turn written already), and when the key is recorded (the whole
    // turn written already). Both must roll everything back.
    let injections = if store.is_sqlite() {
        [
            "CREATE TRIGGER inject BEFORE INSERT ON messages WHEN NEW.seq >= 2
             BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
            "CREATE TRIGGER inject AFTER INSERT ON turn_commits
             BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
        ]
    } else {
        [
            "CREATE FUNCTION inject() RETURNS trigger LANGUAGE plpgsql
             AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$;
             CREATE TRIGGER inject BEFORE INSERT ON messages FOR EACH ROW
             WHEN (NEW.seq >= 2) EXECUTE FUNCTION inject();",
            "CREATE FUNCTION inject() RETURNS trigger LANGUAGE plpgsql
             AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$;
             CREATE TRIGGER inject AFTER INSERT ON turn_commits FOR EACH ROW
             EXECUTE FUNCTION inject();",
        ]
    };
    let remove = if store.is_sqlite() {
        "DROP TRIGGER inject"
    } else {
        "DROP TRIGGER IF EXISTS inject ON messages; DROP TRIGGER IF EXISTS inject ON turn_commits;
         DROP FUNCTION inject()"
    };
    let mut t = 10;
    for injection in injections {
        for large in [false, true] {
            t += 1;
            let session = format!("agent:main:fail:{t}");
            let msgs = turn_messages(t, large);
            let p = commit_in("f", &session, &format!("adv-{t}"), msgs.clone());
            let rows = message_rows(store, &e).await;
            store.execute(&e, injection).await;
            let err = e.commit_turn(&p, &cx()).await.unwrap_err();
            assert!(err.to_string().contains("injected failure"), "{err}");
            assert_eq!(
                message_rows(store, &e).await,
                rows,
                "§1.7: a failed commit writes nothing (large turn: {large}, {injection})"
            );
            assert!(
                !recorded_keys(store, &e).await.contains(&p.advancement_key),
                "§1.7: a failed commit records no key, or the outbox's retry would be \
                 acknowledged as a duplicate of a turn that was never stored ({injection})"
            );
            store.execute(&e, remove).await;
            assert_eq!(
                status_of(&e, &p).await,
                CommitTurnStatus::Committed,
                "§1.7: the retry of a failed commit commits (large turn: {large}, {injection})"
            );
            assert_eq!(message_rows(store, &e).await, rows + msgs.len() as i64);
            // The retried turn is found by search (the full-text state survived the rollback).
            let hits = e
                .backend()
                .grep(GrepQuery::new(
                    format!("nd{t}x0"),
                    Scope::Session(ConvKey::from_host(Some(&session), "f")),
                ))
                .await
                .unwrap();
            assert_eq!(
                hits.hits.len(),
                1,
                "the retried turn's user message is searchable once"
            );
        }
    }
    // SQLite-only: SQLite's file lock held by another connection past the busy timeout (a
    // PostgreSQL writer waits for row locks instead): the commit fails before writing.
    if store.is_sqlite() {
        let p = commit("adv-locked", turn_messages(30, false));
        let other = rusqlite::Connection::open(store.sqlite_path()).unwrap();
        other.execute_batch("BEGIN EXCLUSIVE").unwrap();
        let err = e.commit_turn(&p, &cx()).await.unwrap_err();
        assert!(err.to_string().contains("locked"), "{err}");
        other.execute_batch("ROLLBACK").unwrap();
        assert!(!recorded_keys(store, &e).await.contains(&p.advancement_key));
        assert_eq!(status_of(&e, &p).await, CommitTurnStatus::Committed);
    }
    assert_doctor_ok(&e).await;
}
}

on_both_backends! {
[flavor = "multi_thread", worker_threads = 2]
async fn two_connections_committing_one_key_store_it_once(store) {
    // Two engines over one store (two processes, or a retry racing the first attempt).
    let a = Arc::new(store.engine(small_cfg()).await);
    let b = Arc::new(store.engine(small_cfg()).await);
    for t in 0..8 {
        let msgs = turn_messages(40 + t, t % 2 == 1);
        let p = commit(&format!("adv-race-{t}"), msgs);
        let (pa, pb) = (p.clone(), p.clone());
        let (ea, eb) = (a.clone(), b.clone());
        let ra = tokio::spawn(async move { ea.commit_turn(&pa, &cx()).await.unwrap().status });
        let rb = tokio::spawn(async move { eb.commit_turn(&pb, &cx()).await.unwrap().status });
        let mut got = vec![ra.await.unwrap(), rb.await.unwrap()];
        got.sort_by_key(|s| *s == CommitTurnStatus::Duplicate);
        assert_eq!(
            got,
            vec![CommitTurnStatus::Committed, CommitTurnStatus::Duplicate],
            "§1.7: of two commits of one key exactly one writes"
        );
    }
    assert_eq!(recorded_keys(store, &a).await.len(), 8);
    assert_doctor_ok(&a).await;
}
}

on_both_backends! {
async fn committed_turns_over_the_threshold_compact_like_after_turn(store) {
    async fn run(store: &TestStore, budget: u64) -> u64 {
        let e = store.engine(small_cfg()).await;
        for t in 0..40 {
            let mut p = commit(&format!("adv-{t}"), turn_messages(100 + t, t % 4 == 0));
            // commitTurn has no tokenBudget of its own: the runtime's goes in runtimeContext.
            p.runtime_context = Some(ContextEngineRuntimeContext {
                token_budget: Some(budget),
                ..Default::default()
            });
            assert_eq!(status_of(&e, &p).await, CommitTurnStatus::Committed);
        }
        let report = e.backend().doctor().await.unwrap();
        assert!(report.ok, "doctor: {:?}", report.issues);
        report.status.summaries
    }
    assert!(
        run(store, 4_000).await > 0,
        "a committed turn that leaves the frontier over the threshold compacts, as afterTurn does"
    );
    assert_eq!(
        run(&store.another(), 1_000_000).await,
        0,
        "under the threshold of runtimeContext.tokenBudget nothing is compacted"
    );
}
}

on_both_backends! {
async fn sessions_the_engine_never_writes_answer_committed_and_store_nothing(store) {
    let cfg = LosslessConfig {
        ignore_session_patterns: vec!["agent:*:cron:*".into()],
        read_only_session_patterns: vec!["agent:*:subagent:**".into()],
        ..small_cfg()
    };
    let e = store.engine(cfg).await;
    for key in ["agent:main:cron:nightly", "agent:main:subagent:a:b"] {
        let p = commit_in("x", key, "adv-policy", turn_messages(50, false));
        for _ in 0..2 {
            assert_eq!(
                status_of(&e, &p).await,
                CommitTurnStatus::Committed,
                "a session stored by no policy acknowledges the commit (the host must not \
                 retry it forever): {key}"
            );
        }
    }
    assert_eq!(message_rows(store, &e).await, 0, "nothing stored");
    assert!(recorded_keys(store, &e).await.is_empty(), "no key recorded");
    assert!(e.backend().conversations().await.unwrap().is_empty());

    let off = store.another();
    let disabled = off
        .engine(LosslessConfig {
            enabled: false,
            ..small_cfg()
        })
        .await;
    assert_eq!(
        status_of(&disabled, &commit("adv-off", turn_messages(51, false))).await,
        CommitTurnStatus::Committed
    );
    assert_eq!(
        message_rows(&off, &disabled).await,
        0,
        "a disabled engine stores nothing"
    );
}
}

on_both_backends! {
async fn an_empty_turn_records_its_key_and_a_blank_key_is_refused(store) {
    let e = store.engine(small_cfg()).await;
    assert_eq!(
        status_of(&e, &commit("adv-empty", Vec::new())).await,
        CommitTurnStatus::Committed
    );
    assert_eq!(
        status_of(&e, &commit("adv-empty", Vec::new())).await,
        CommitTurnStatus::Duplicate,
        "§1.7: a turn without messages is still one advancement, committed once"
    );
    let err = e
        .commit_turn(&commit("  ", turn_messages(60, false)), &cx())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("advancementKey"), "{err}");
    assert_eq!(message_rows(store, &e).await, 0, "a refused commit stores nothing");
}
}
