//! `clawctx … | head`: every command exits quietly when the reader closes its stdout early,
//! never "failed printing to stdout: Broken pipe" with a panic and a backtrace. Each command
//! runs with its stdout on a real pipe whose read end is closed before it prints anything (what
//! `head -2` does to the lines after the second), so every write it makes fails with `EPIPE`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs `clawctx args…` with stdout on a pipe nobody reads (read end closed at once): (exit
/// code, stderr).
fn with_closed_stdout(state: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args(args)
        .env("CLAWCTX_STATE_DIR", state)
        .env("RUST_BACKTRACE", "1")
        .env_remove("CLAWCTX_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning clawctx");
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    (status.code(), stderr)
}

fn assert_quiet(state: &Path, args: &[&str]) {
    let (code, stderr) = with_closed_stdout(state, args);
    assert!(
        !stderr.contains("panicked") && !stderr.to_lowercase().contains("broken pipe"),
        "clawctx {}: {stderr}",
        args.join(" ")
    );
    assert_eq!(
        code,
        Some(0),
        "clawctx {} with a closed stdout: {stderr}",
        args.join(" ")
    );
}

#[test]
fn commands_exit_quietly_when_stdout_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    // A recording long enough to print many lines.
    let recording = state.join("conversation.jsonl");
    let mut lines = String::new();
    for i in 0..40 {
        lines.push_str(&format!(
            "{{\"role\": \"user\", \"content\": \"question {i} about the invoice queue\"}}\n{{\"role\": \"assistant\", \"content\": \"answer {i}: the invoice job moved\"}}\n"
        ));
    }
    std::fs::write(&recording, lines).unwrap();
    let recording = recording.to_str().unwrap();
    for args in [
        &["doctor"][..],
        &["doctor", "--json"],
        &["config", "path"],
        &["replay", recording, "--json"],
        &["replay", recording],
        &["sessions", "list"],
        &["lcm", "--help"],
        &["--version"],
    ] {
        assert_quiet(state, args);
    }
}

#[test]
fn a_failing_command_still_reports_its_error_with_stdout_closed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("clawctx.json"), "{ plugins: ").unwrap();
    let (code, stderr) = with_closed_stdout(dir.path(), &["config", "get", "plugins"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("clawctx.json"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
