//! `clawctx eval locomo` runs the lossless engine with the config file's
//! `plugins.entries.lossless.config` and `--set key=value` over it (issue #30 item 4), on the
//! bench crate's hand-written fixture: the settings change what the context holds, the report
//! names the config in effect, and a key the engine does not read or a value of the wrong type
//! is an error naming it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::Run;

use std::path::{Path, PathBuf};

use serde_json::Value;

fn clawctx(state: &Path, args: &[&str]) -> Run {
    common::run(state, args)
}

/// Not LoCoMo data: the bench crate's tiny fixture (its tests explain the expected scores).
fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/tests/fixtures/tiny-locomo.json")
}

fn eval_json(state: &Path, extra: &[&str]) -> (Run, Value) {
    let f = fixture();
    let mut args = vec![
        "eval",
        "locomo",
        f.to_str().unwrap(),
        "--engine",
        "lossless",
        "--budget",
        "600",
        "--json",
    ];
    args.extend_from_slice(extra);
    let run = clawctx(state, &args);
    assert_eq!(run.code, 0, "{run}");
    let v = serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{run}"));
    (run, v)
}

fn raw_in_context(report: &Value) -> u64 {
    report["runs"][0]["overall"]["rawInContext"]
        .as_u64()
        .expect("rawInContext")
}

#[test]
fn the_config_file_and_set_reach_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("eval.json5");
    std::fs::write(
        &config,
        "// recall off: only what compaction leaves is in context\n\
         {plugins: {entries: {lossless: {config: {freshTailCount: 8, promptRecallShare: 0, databasePath: '/nonexistent/x.db'}}}}}\n",
    )
    .unwrap();
    let cfg = config.to_str().unwrap();

    // The file's settings: prompt recall off, so only what compaction leaves is in context;
    // the store key is the eval's own.
    let (run, off) = eval_json(dir.path(), &["--config", cfg]);
    assert_eq!(
        off["losslessConfig"],
        serde_json::json!({"freshTailCount": 8, "promptRecallShare": 0}),
        "{run}"
    );
    assert!(raw_in_context(&off) < 4, "recall off: {run}");

    // `--set` over the file: recall back on brings every resolvable evidence turn into
    // context (bench's tiny_fixture_with_prompt_recall: 4 of 5, one names no turn).
    let (run, on) = eval_json(
        dir.path(),
        &["--config", cfg, "--set", "promptRecallShare=0.25"],
    );
    assert_eq!(
        on["losslessConfig"],
        serde_json::json!({"freshTailCount": 8, "promptRecallShare": 0.25}),
        "{run}"
    );
    assert_eq!(raw_in_context(&on), 4, "{run}");

    // The whole dotted path works too, and the table names the config in effect.
    let f = fixture();
    let run = clawctx(
        dir.path(),
        &[
            "--config",
            cfg,
            "eval",
            "locomo",
            f.to_str().unwrap(),
            "--engine",
            "lossless",
            "--budget",
            "600",
            "--set",
            "plugins.entries.lossless.config.freshTailCount=12",
        ],
    );
    assert_eq!(run.code, 0, "{run}");
    assert!(
        run.stdout
            .contains(r#"lossless config: {"freshTailCount":12,"promptRecallShare":0}"#),
        "{run}"
    );
}

#[test]
fn a_bad_setting_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture();
    let base = [
        "eval",
        "locomo",
        f.to_str().unwrap(),
        "--engine",
        "lossless",
    ];
    let with = |extra: &[&str]| {
        let mut a: Vec<&str> = base.to_vec();
        a.extend_from_slice(extra);
        clawctx(dir.path(), &a)
    };

    let run = with(&["--set", "freshTailCont=8"]);
    assert_ne!(run.code, 0, "{run}");
    assert!(
        run.stderr.contains("--set freshTailCont=8")
            && run
                .stderr
                .contains("`freshTailCont` is not a lossless setting")
            && run.stderr.contains("freshTailCount"),
        "{run}"
    );

    let run = with(&["--set", "freshTailCount=many"]);
    assert_ne!(run.code, 0, "{run}");
    assert!(
        run.stderr.contains("--set freshTailCount=many") && run.stderr.contains("`freshTailCount`"),
        "{run}"
    );

    let run = with(&["--set", "promptRecallShare"]);
    assert_ne!(run.code, 0, "{run}");
    assert!(run.stderr.contains("expected KEY=VALUE"), "{run}");

    // A wrong key in the file names the file and the key.
    let config = dir.path().join("bad.json");
    std::fs::write(
        &config,
        r#"{"plugins": {"entries": {"lossless": {"config": {"promptRecallShare": "lots"}}}}}"#,
    )
    .unwrap();
    let run = with(&["--config", config.to_str().unwrap()]);
    assert_ne!(run.code, 0, "{run}");
    assert!(
        run.stderr.contains("bad.json")
            && run
                .stderr
                .contains("plugins.entries.lossless.config.promptRecallShare"),
        "{run}"
    );
}
