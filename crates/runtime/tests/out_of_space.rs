//! The runtime's session files on a full disk (issue #20, item 4), on a real tiny file system
//! (`clawctx_test_support::small_fs`: a tmpfs the test mounts; skipped without root outside
//! CI, a failure under `CI=true`).
//!
//! A turn on a full disk fails with an error that says so and names the file; no transcript
//! is left with a half-written line and `sessions.json` still parses; when space returns the
//! next turn in the same process works and every earlier turn is still there.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clawctx_engine::legacy::LegacyEngine;
use clawctx_model::{Exhaustion, ScriptedProvider, ScriptedReply};
use clawctx_protocol::transcript::EntryKind;
use clawctx_runtime::*;
use clawctx_test_support::small_fs::SmallFs;
use clawctx_transcript::SessionFile;

const KEY: &str = "agent:main:main";

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            files_under(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// Every transcript under `state` reads back without a torn line, every `sessions.json`
/// parses, and no temporary file is left; returns the user prompts found, in order.
fn check_files(state: &Path, when: &str) -> Vec<String> {
    let mut files = Vec::new();
    files_under(state, &mut files);
    let mut prompts = Vec::new();
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            !name.ends_with(".tmp"),
            "{when}: a temporary file was left behind: {}",
            f.display()
        );
        if name.ends_with(".jsonl") {
            let s = SessionFile::open(f)
                .unwrap_or_else(|e| panic!("{when}: {} does not read back: {e}", f.display()));
            assert!(
                s.warnings().is_empty(),
                "{when}: {} has a half-written line: {:?}",
                f.display(),
                s.warnings()
            );
            for e in s.entries() {
                if let EntryKind::Message(m) = &e.kind {
                    if m.role() == "user" {
                        prompts.push(m.plain_text());
                    }
                }
            }
        } else if name == "sessions.json" {
            let text = std::fs::read_to_string(f).unwrap();
            serde_json::from_str::<serde_json::Value>(&text)
                .unwrap_or_else(|e| panic!("{when}: {} does not parse: {e}", f.display()));
        }
    }
    prompts
}

#[tokio::test]
async fn a_turn_on_a_full_disk_fails_clearly_and_leaves_no_half_written_file() {
    let Some(fs) = SmallFs::mount("runtime-full", 4 << 20) else {
        return;
    };
    let state = fs.path().join("state");
    let provider = Arc::new(ScriptedProvider::new(
        vec![ScriptedReply::text("noted. ".repeat(200))],
        Exhaustion::Cycle,
    ));
    let backend = Backend::Model(ModelBinding::new(provider, "m", 200_000, 256));
    let rt = AgentRuntime::builder(&state, Arc::new(LegacyEngine), backend).build();
    let prompt = |i: usize| {
        format!(
            "question {i}: {}",
            "please look at the deployment logs again ".repeat(200)
        )
    };
    for i in 0..3 {
        rt.run_turn(TurnRequest::new(KEY, prompt(i))).await.unwrap();
    }
    assert_eq!(check_files(&state, "before the disk filled").len(), 3);

    fs.fill("filler");
    let mut failures = Vec::new();
    for i in 3..6 {
        match rt.run_turn(TurnRequest::new(KEY, prompt(i))).await {
            Ok(_) => panic!("turn {i} succeeded on a full disk"),
            Err(e) => failures.push(e.to_string()),
        }
    }
    eprintln!("a turn on the full disk: {}", failures[0]);
    for f in &failures {
        assert!(
            f.contains("No space left on device") && f.contains(&fs.path().display().to_string()),
            "the error must say the disk is full and name the file: {f}"
        );
    }
    let prompts = check_files(&state, "on the full disk");
    assert_eq!(
        prompts.len(),
        3,
        "a failed turn stored nothing: {prompts:?}"
    );

    // The session map on the full disk: the write fails naming `sessions.json`, which keeps
    // its old content (it is replaced atomically), and no temporary file is left.
    let store = clawctx_transcript::SessionStore::new(&state);
    let map = store.sessions_json_path("main").unwrap();
    let before = std::fs::read(&map).unwrap();
    let err = store
        .update(KEY, |e| {
            e.display_name = Some("x".repeat(1 << 20));
        })
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("No space left on device") && err.contains(&map.display().to_string()),
        "updating the session map on a full disk: {err}"
    );
    assert_eq!(
        std::fs::read(&map).unwrap(),
        before,
        "sessions.json kept its old content"
    );
    check_files(&state, "after a failed session-map update");

    std::fs::remove_file(fs.path().join("filler")).unwrap();
    rt.run_turn(TurnRequest::new(KEY, prompt(6)))
        .await
        .unwrap_or_else(|e| panic!("a turn after space returned: {e}"));
    let prompts = check_files(&state, "after space returned");
    assert_eq!(prompts.len(), 4, "{prompts:?}");
    assert!(prompts[3].contains("question 6"), "{prompts:?}");
}
