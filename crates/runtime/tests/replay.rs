//! `replay` through the library: recordings in both formats, bad recordings name `file:line`,
//! and a long conversation on `legacy` never exceeds the budget.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use clawctx_engine::ContextEngineRegistry;
use clawctx_runtime::replay::{replay, Recording, ReplayOptions};
use clawctx_runtime::RuntimeError;

fn registry() -> Arc<ContextEngineRegistry> {
    let r = Arc::new(ContextEngineRegistry::with_legacy());
    clawctx_lossless::register(&r).unwrap();
    r
}

fn write_recording(dir: &std::path::Path, turns: usize) -> std::path::PathBuf {
    let messages = clawctx_test_support::messages::conversation(11, turns, 4);
    let text: String = messages
        .iter()
        .map(|m| format!("{}\n", serde_json::to_string(m).unwrap()))
        .collect();
    let path = dir.join("rec.jsonl");
    std::fs::write(&path, text).unwrap();
    path
}

async fn run(engine: &str, turns: usize, budget: u64) -> clawctx_runtime::replay::ReplayReport {
    let dir = tempfile::tempdir().unwrap();
    let rec = Recording::load(&write_recording(dir.path(), turns)).unwrap();
    assert_eq!(rec.turns.len(), turns);
    let options = ReplayOptions {
        engine: Some(engine.into()),
        budget,
        state_dir: dir.path().join("state"),
        config: serde_json::json!({}),
        hooks: None,
    };
    let mut seen = 0;
    let report = replay(registry(), rec, options, &mut |_t| seen += 1)
        .await
        .unwrap();
    assert_eq!(seen, turns);
    report
}

#[tokio::test]
async fn long_replay_on_legacy_stays_within_budget_and_compacts() {
    let started = std::time::Instant::now();
    let report = run("legacy", 400, 2000).await;
    eprintln!("400 turns in {:?}", started.elapsed());
    assert_eq!(report.turns.len(), 400);
    assert_eq!(
        report.over_budget_turns, 0,
        "max sent {}",
        report.max_prompt_tokens
    );
    assert!(report
        .turns
        .iter()
        .all(|t| t.prompt_tokens <= 2000 && t.engine == "legacy"));
    assert!(report.total_compactions > 0);
    assert!(report.turns.iter().any(|t| t.tool_calls > 0));
}

#[tokio::test]
async fn replay_on_lossless_stays_within_budget() {
    let report = run("lossless", 60, 1500).await;
    assert_eq!(
        report.over_budget_turns, 0,
        "max sent {}",
        report.max_prompt_tokens
    );
    assert!(
        report.turns.iter().all(|t| t.engine == "lossless"),
        "{:?}",
        report.turns.last()
    );
}

#[test]
fn openclaw_session_files_are_recordings_and_bad_lines_name_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let mut f = clawctx_transcript::SessionFile::create(&path, "s1", "/").unwrap();
    f.append_message(clawctx_protocol::AgentMessage::user("first question"))
        .unwrap();
    f.append_message(clawctx_protocol::AgentMessage::assistant("first answer"))
        .unwrap();
    f.append_message(clawctx_protocol::AgentMessage::user("second"))
        .unwrap();
    let rec = Recording::load(&path).unwrap();
    assert_eq!(rec.turns.len(), 2);
    assert_eq!(rec.turns[0].prompt, "first question");
    assert_eq!(rec.turns[0].replies.len(), 1);

    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"role\":\"user\",\"content\":\"ok\"}\n{\"content\":\"no role\"}\n",
    )
    .unwrap();
    let e = Recording::load(&bad).unwrap_err();
    assert!(matches!(e, RuntimeError::Recording { line: 2, .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("bad.jsonl:2:") && text.contains("expected a string `role`"),
        "{text}"
    );
}
