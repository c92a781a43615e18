//! The durable turn path after a crash and while the engine is down (issue #27 items 2 and 3):
//! a commit is on disk before its turn is complete in the transcript, a reply a crash kept
//! out of the transcript is put back from the outbox, a session's commits reach the engine in
//! turn order (never past a failed one), and waiting commits are retried in the background and
//! at a runtime's start, without a new turn.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use clawctx_engine::*;
use clawctx_model::{Exhaustion, ScriptedProvider, ScriptedReply};
use clawctx_protocol::*;
use clawctx_runtime::outbox::{inspect_outbox, outbox_dir};
use clawctx_runtime::*;
use clawctx_transcript::SessionFile;

const KEY: &str = "agent:main:main";

/// A durable engine whose store can be "down" (its `commitTurn` and `assemble` fail as a
/// database outage does), recording every `commitTurn` it was asked for.
#[derive(Default)]
struct Store {
    down: AtomicBool,
    /// Every key asked for, in order (also while down).
    attempts: Mutex<Vec<String>>,
    /// Keys stored, in order, with the texts of their messages.
    committed: Mutex<Vec<(String, Vec<String>)>>,
}

struct Durable(Arc<Store>);

#[async_trait]
impl ContextEngine for Durable {
    fn info(&self) -> ContextEngineInfo {
        ContextEngineInfo {
            owns_compaction: Some(true),
            transcript_semantics: Some(TranscriptSemantics {
                current_turn_fence: Some("before-current-turn-entry-v1".into()),
                turn_advancement_idempotency: Some("atomic-idempotent-v1".into()),
            }),
            ..ContextEngineInfo::new("durable", "Durable")
        }
    }
    fn methods(&self) -> MethodSet {
        MethodSet::of(&[
            Method::Ingest,
            Method::Assemble,
            Method::Compact,
            Method::CommitTurn,
        ])
    }
    async fn ingest(
        &self,
        _p: &IngestParams,
        _cx: &CallContext,
    ) -> Result<IngestResult, EngineError> {
        Ok(IngestResult { ingested: true })
    }
    async fn assemble(
        &self,
        p: &AssembleParams,
        _cx: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        Ok(AssembleResult {
            estimated_tokens: clawctx_tokens::messages_tokens(&p.messages),
            messages: p.messages.clone(),
            ..Default::default()
        })
    }
    async fn compact(
        &self,
        _p: &CompactParams,
        _cx: &CallContext,
    ) -> Result<CompactResult, EngineError> {
        Ok(CompactResult::default())
    }
    async fn commit_turn(
        &self,
        p: &CommitTurnParams,
        _cx: &CallContext,
    ) -> Result<CommitTurnResult, EngineError> {
        self.0
            .attempts
            .lock()
            .unwrap()
            .push(p.advancement_key.clone());
        if self.0.down.load(Ordering::SeqCst) {
            return Err(EngineError::failed("the store is down"));
        }
        let mut log = self.0.committed.lock().unwrap();
        let status = if log.iter().any(|(k, _)| *k == p.advancement_key) {
            CommitTurnStatus::Duplicate
        } else {
            log.push((
                p.advancement_key.clone(),
                p.messages.iter().map(AgentMessage::plain_text).collect(),
            ));
            CommitTurnStatus::Committed
        };
        Ok(CommitTurnResult { status })
    }
}

fn runtime(dir: &std::path::Path, store: &Arc<Store>) -> AgentRuntime {
    let provider = Arc::new(ScriptedProvider::new(
        (0..10)
            .map(|i| ScriptedReply::text(format!("reply {i}")))
            .collect(),
        Exhaustion::Cycle,
    ));
    let backend = Backend::Model(ModelBinding::new(provider, "m", 16_000, 256));
    AgentRuntime::builder(dir, Arc::new(Durable(store.clone())), backend)
        .prompt_budget(Some(8_000))
        .build()
}

fn committed_texts(store: &Store) -> Vec<Vec<String>> {
    store
        .committed
        .lock()
        .unwrap()
        .iter()
        .map(|(_, t)| t.clone())
        .collect()
}

/// The message texts of the session's transcript, in file order.
fn transcript_texts(rt: &AgentRuntime) -> Vec<String> {
    let s = rt.session(KEY).unwrap();
    let f = SessionFile::open(&s.transcript_path).unwrap();
    f.entries()
        .iter()
        .filter_map(|e| match &e.kind {
            clawctx_protocol::transcript::EntryKind::Message(m) => Some(m.plain_text()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_reply_a_crash_kept_out_of_the_transcript_is_restored_from_the_outbox_and_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::default());
    store.down.store(true, Ordering::SeqCst);
    let rt = runtime(dir.path(), &store);
    rt.run_turn(TurnRequest::new(KEY, "remember the blue door"))
        .await
        .unwrap();
    assert_eq!(inspect_outbox(dir.path()).pending, 1, "the commit waits");
    let path = rt.session(KEY).unwrap().transcript_path;
    drop(rt);
    // The process "died" after the commit was on disk and before the reply was appended:
    // the reply's line is not in the file.
    let text = std::fs::read_to_string(&path).unwrap();
    let kept: Vec<&str> = text.lines().collect();
    assert!(kept.last().unwrap().contains("reply 0"));
    std::fs::write(&path, kept[..kept.len() - 1].join("\n") + "\n").unwrap();

    store.down.store(false, Ordering::SeqCst);
    let rt = runtime(dir.path(), &store);
    rt.run_turn(TurnRequest::new(KEY, "which door?"))
        .await
        .unwrap();
    assert_eq!(
        transcript_texts(&rt),
        // (A new process: the scripted model starts its replies over.)
        vec![
            "remember the blue door",
            "reply 0",
            "which door?",
            "reply 0"
        ],
        "the reply the outbox held is back in the transcript, before the next turn"
    );
    assert_eq!(
        committed_texts(&store),
        vec![
            vec!["remember the blue door".to_owned(), "reply 0".to_owned()],
            vec!["which door?".to_owned(), "reply 0".to_owned()],
        ]
    );
    assert_eq!(inspect_outbox(dir.path()).pending, 0);
}

#[tokio::test]
async fn a_sessions_commits_reach_the_engine_in_turn_order_and_never_past_a_failed_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::default());
    store.down.store(true, Ordering::SeqCst);
    let rt = runtime(dir.path(), &store);
    for prompt in ["one", "two", "three"] {
        rt.run_turn(TurnRequest::new(KEY, prompt)).await.unwrap();
    }
    assert_eq!(inspect_outbox(dir.path()).pending, 3);
    let attempts = store.attempts.lock().unwrap().clone();
    let first = attempts[0].clone();
    assert!(
        attempts.iter().all(|k| *k == first),
        "while the first commit fails, no later one is tried: {attempts:?}"
    );
    // Files written in the reverse order of their turns (modification times say nothing).
    let mut files: Vec<_> = std::fs::read_dir(outbox_dir(dir.path()))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    let base = std::time::SystemTime::now();
    for (i, f) in files.iter().enumerate() {
        let t = base - Duration::from_secs(100 * i as u64);
        std::fs::File::options()
            .write(true)
            .open(f)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }
    drop(rt);

    store.down.store(false, Ordering::SeqCst);
    let rt = runtime(dir.path(), &store);
    rt.run_turn(TurnRequest::new(KEY, "four")).await.unwrap();
    let firsts: Vec<String> = committed_texts(&store)
        .into_iter()
        .map(|t| t[0].clone())
        .collect();
    assert_eq!(firsts, vec!["one", "two", "three", "four"]);
    assert_eq!(inspect_outbox(dir.path()).pending, 0);
}

#[tokio::test]
async fn waiting_commits_reach_the_engine_once_it_is_back_without_a_new_turn() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::default());
    store.down.store(true, Ordering::SeqCst);
    let rt = runtime(dir.path(), &store);
    let outcome = rt
        .run_turn(TurnRequest::new(KEY, "during the outage"))
        .await
        .unwrap();
    assert_eq!(outcome.reply, "reply 0", "the turn is answered");
    assert!(
        outcome.commit_waiting.is_some(),
        "the caller is told the engine does not have the turn yet"
    );
    assert!(
        outcome.warnings.iter().any(|w| w.contains("retried")),
        "{:?}",
        outcome.warnings
    );
    let status = rt.commit_retry_status();
    assert_eq!(status.sessions, 1);
    assert!(status.last_failure.unwrap().contains("the store is down"));

    store.down.store(false, Ordering::SeqCst);
    // The retry task delivers it (first after 1 s); bounded, not timed.
    for _ in 0..200 {
        if !store.committed.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        committed_texts(&store),
        vec![vec!["during the outage".to_owned(), "reply 0".to_owned()]]
    );
    for _ in 0..100 {
        if rt.commit_retry_status().sessions == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(rt.commit_retry_status().sessions, 0);
    assert_eq!(inspect_outbox(dir.path()).pending, 0);
}

#[tokio::test]
async fn a_new_runtime_delivers_what_the_outbox_holds_when_asked_at_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::default());
    store.down.store(true, Ordering::SeqCst);
    let rt = runtime(dir.path(), &store);
    rt.run_turn(TurnRequest::new(KEY, "before the restart"))
        .await
        .unwrap();
    drop(rt);
    store.down.store(false, Ordering::SeqCst);
    let rt = runtime(dir.path(), &store);
    assert_eq!(rt.deliver_pending_commits().await, 1);
    assert_eq!(
        committed_texts(&store),
        vec![vec!["before the restart".to_owned(), "reply 0".to_owned()]]
    );
    assert_eq!(inspect_outbox(dir.path()).pending, 0);
}
