//! The demo: as a library call (the detail leaves the raw context, recall finds it, the DAG
//! exists) and as the `clawctx demo` binary (exit 0, prints the found detail).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use clawctx_bench::demo::{render, run_demo, DemoOptions, PLANTED_INVOICE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_recalls_the_compacted_detail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = DemoOptions {
        messages: 800,
        budget: 16_000,
        state_dir: dir.path().to_owned(),
        progress: false,
    };
    let r = run_demo(&opts).await.expect("demo");
    println!("{}", render(&r));
    assert_eq!(r.stored_messages, 802);
    assert!(
        !r.detail_in_raw_context,
        "the planted message must have been compacted away"
    );
    assert!(
        r.recall_hit
            .as_deref()
            .is_some_and(|h| h.starts_with("msg_")),
        "recall must find the message: {r:?}"
    );
    assert!(r
        .recall_snippet
        .as_deref()
        .is_some_and(|s| s.contains(PLANTED_INVOICE)));
    // Within the budget, and more than the fresh tail alone (a sixteenth of it): a
    // compaction leaves summaries and the raw messages since, well under the budget, and the
    // context grows back by appending until the next one (cache-stable, issue #29).
    assert!(
        r.context_tokens <= 16_000 && r.context_tokens > 16_000 / 16,
        "context {} tokens",
        r.context_tokens
    );
    assert!(
        r.dag
            .first()
            .is_some_and(|l| l.depth == 0 && l.count > 1 && l.mean_fanout > 1.0),
        "{:?}",
        r.dag
    );
    assert!(r.context_summaries >= 1, "the context must show summaries");
    let text = render(&r);
    assert!(
        text.contains("FOUND") && text.contains(PLANTED_INVOICE) && text.contains("depth 0"),
        "{text}"
    );
}

/// `target/<profile>/clawctx` next to this test's own binary (`target/<profile>/deps/…`),
/// (re)built first so a stale binary is never tested. A CLI that does not build fails the test
/// with cargo's own words: a broken build is never a pass.
fn clawctx_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("{} is not under target/<profile>/deps", exe.display()));
    let bin = profile_dir.join(format!("clawctx{}", std::env::consts::EXE_SUFFIX));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.args(["build", "-q", "-p", "clawctx-cli", "--bin", "clawctx"]);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{cargo} build -p clawctx-cli`: {e}"));
    assert!(
        out.status.success(),
        "the clawctx binary does not build ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        bin.exists(),
        "`cargo build -p clawctx-cli` succeeded but {} does not exist",
        bin.display()
    );
    bin
}

#[test]
fn demo_binary_exits_zero_and_prints_the_found_detail() {
    let bin = clawctx_binary();
    let out = Command::new(&bin)
        .args(["demo", "--messages", "600", "--budget", "16000"])
        .output()
        .expect("run clawctx demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let shown = format!("command: {} demo --messages 600 --budget 16000\nstatus: {}\nstdout:\n{stdout}\nstderr:\n{stderr}", bin.display(), out.status);
    assert!(out.status.success(), "{shown}");
    assert!(
        stdout.contains("FOUND msg_") && stdout.contains(PLANTED_INVOICE),
        "{shown}"
    );
    assert!(
        stdout.contains("NO - its message was compacted away"),
        "{shown}"
    );
    assert!(
        stderr.contains("replayed"),
        "progress lines expected on a non-TTY stderr: {shown}"
    );
}
