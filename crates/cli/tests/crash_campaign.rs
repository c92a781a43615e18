//! The crash campaign's short run as an ordinary test: `clawctx bench crash` with a few
//! SIGKILLs per backend (per-turn ingest, batched ingest, a replay through the runtime,
//! compaction, import and, on PostgreSQL, migration), every acknowledged message checked
//! after each restart. The full
//! campaign (at least 100 kills per backend) is the same command with `--kills 100`.
//!
//! The `reply-commit` kill point gets a run of its own: a host killed between a turn's reply
//! and its `commitTurn` must leave no complete turn in its transcript that the engine never
//! receives, and the engine must hold the turns in order (issue #27 item 3).
//!
//! The PostgreSQL half needs `CLAWCTX_TEST_PG_URL` (the campaign creates its databases on that
//! server and drops them); it skips without it, except under `CI=true`, where a missing server
//! is a failure.
//!
//! A second test checks the harness itself: children that acknowledge before they write (the
//! bug the campaign exists to catch) must make it report losses and exit 1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use clawctx_test_support::pg::{test_url, URL_VAR};
use serde_json::Value;

/// Runs `clawctx bench crash --json` with `args`: (exit code, report, stderr).
fn campaign(work: &std::path::Path, args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args(["bench", "crash", "--json", "--work-dir"])
        .arg(work)
        .args(args)
        .env_remove("CLAWCTX_LOG")
        .output()
        .expect("running clawctx bench crash");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("the report is not JSON ({e}):\n{stdout}\n--- stderr\n{stderr}")
    });
    (out.status.code().unwrap_or(-1), report, stderr)
}

fn sum(report: &Value, backend: &str, field: &str) -> u64 {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["backend"] == backend)
        .map(|r| r[field].as_u64().unwrap())
        .sum()
}

#[test]
fn a_few_kills_per_backend_lose_and_duplicate_nothing() {
    let work = tempfile::tempdir().unwrap();
    let pg = test_url();
    let mut args = vec!["--kills", "6", "--seed", "20260101"];
    if pg.is_some() {
        args.extend(["--backends", "sqlite,postgres", "--pg-url-env", URL_VAR]);
    } else {
        args.extend(["--backends", "sqlite"]);
    }
    let (code, report, stderr) = campaign(work.path(), &args);
    let shown = serde_json::to_string_pretty(&report).unwrap();
    assert_eq!(
        code, 0,
        "the campaign failed:\n{shown}\n--- stderr\n{stderr}"
    );
    let mut backends = vec!["sqlite"];
    if pg.is_some() {
        backends.push("postgres");
    }
    for b in backends {
        assert!(
            sum(&report, b, "kills") >= 5,
            "{b}: fewer than 5 kills:\n{shown}"
        );
        assert!(
            sum(&report, b, "acknowledged") > 0,
            "{b}: nothing acknowledged:\n{shown}"
        );
        for field in [
            "lost",
            "duplicated",
            "unexpected",
            "doctorFailures",
            "integrityFailures",
            "readbackFailures",
            "searchMisses",
        ] {
            assert_eq!(sum(&report, b, field), 0, "{b}: {field}:\n{shown}");
        }
    }
}

#[test]
fn a_host_killed_between_reply_and_commit_leaves_no_turn_the_engine_never_gets() {
    let work = tempfile::tempdir().unwrap();
    let pg = test_url();
    let mut args = vec![
        "--points",
        "reply-commit",
        "--kills",
        "8",
        "--seed",
        "20261203",
    ];
    if pg.is_some() {
        args.extend(["--backends", "sqlite,postgres", "--pg-url-env", URL_VAR]);
    } else {
        args.extend(["--backends", "sqlite"]);
    }
    let (code, report, stderr) = campaign(work.path(), &args);
    let shown = serde_json::to_string_pretty(&report).unwrap();
    assert_eq!(
        code, 0,
        "the campaign failed:\n{shown}\n--- stderr\n{stderr}"
    );
    let mut backends = vec!["sqlite"];
    if pg.is_some() {
        backends.push("postgres");
    }
    for b in backends {
        assert!(
            sum(&report, b, "kills") >= 8,
            "{b}: fewer than 8 kills:\n{shown}"
        );
        // Where a kill lands is timing: on a loaded CI machine none of 8 may fall between a
        // reply and its commit, so that count is reported, and the losses below are asserted.
        if sum(&report, b, "killedAfterReply") == 0 {
            eprintln!("{b}: no kill landed between a reply and its commit this run");
        }
        for field in [
            "turnsMissingFromEngine",
            "outOfOrder",
            "lost",
            "duplicated",
            "unexpected",
            "runFailures",
        ] {
            assert_eq!(sum(&report, b, field), 0, "{b}: {field}:\n{shown}");
        }
    }
}

#[test]
fn a_child_that_acknowledges_before_it_writes_is_caught() {
    let work = tempfile::tempdir().unwrap();
    let (code, report, stderr) = campaign(
        work.path(),
        &[
            "--backends",
            "sqlite",
            "--points",
            "batch",
            "--kills",
            "6",
            "--seed",
            "7",
            "--ack-before-write",
        ],
    );
    let shown = serde_json::to_string_pretty(&report).unwrap();
    assert!(
        sum(&report, "sqlite", "lost") > 0,
        "no loss reported although the children lied:\n{shown}\n--- stderr\n{stderr}"
    );
    assert_eq!(code, 1, "a loss must fail the campaign:\n{shown}");
}
