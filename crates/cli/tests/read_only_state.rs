//! A read-only state dir (issue #20, item 4): `clawctx run` and `clawctx gateway` fail at start
//! with one clear error naming the directory, instead of failing inside the first turn (or
//! quarantining engines first). The state dir is a tmpfs the test mounts and remounts
//! read-only (`clawctx_test_support::small_fs`; root ignores `chmod`); skipped without root
//! outside CI, a failure under `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use clawctx_test_support::small_fs::SmallFs;

#[test]
fn run_and_gateway_refuse_a_read_only_state_dir_at_start() {
    let Some(fs) = SmallFs::mount("cli-ro", 4 << 20) else {
        return;
    };
    let cfg_dir = tempfile::tempdir().unwrap();
    let script = cfg_dir.path().join("script.jsonl");
    std::fs::write(&script, "\"hi there\"\n").unwrap();
    let config = cfg_dir.path().join("clawctx.json5");
    std::fs::write(
        &config,
        serde_json::json!({
            "models": {"providers": {"s": {
                "api": "scripted", "script": script, "onExhausted": "cycle",
                "models": [{"id": "m", "contextWindow": 100000, "maxTokens": 1000}]
            }}},
            "agents": {"defaults": {"model": {"primary": "s/m"}}},
            "plugins": {"slots": {"contextEngine": "lossless"}}
        })
        .to_string(),
    )
    .unwrap();
    let existing = fs.path().join("state");
    std::fs::create_dir_all(&existing).unwrap();
    fs.set_read_only(true);
    let absent = fs.path().join("absent");
    for (state, what) in [
        (&existing, "is not writable"),
        (&absent, "cannot be created"),
    ] {
        for args in [&["run", "hello"][..], &["gateway", "--port", "0"][..]] {
            let out = Command::new(env!("CARGO_BIN_EXE_clawctx"))
                .args(args)
                .arg("--config")
                .arg(&config)
                .arg("--state-dir")
                .arg(state)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            let expected = format!(
                "the state directory {} {what}: read-only file system",
                state.display()
            );
            assert!(
                !out.status.success() && stderr.contains(&expected),
                "clawctx {args:?} on a read-only state dir must fail at start with {expected:?}; exit {:?}, stderr:\n{stderr}",
                out.status.code()
            );
            assert!(
                !stderr.contains("quarantin"),
                "clawctx {args:?}: the check comes before any engine starts:\n{stderr}"
            );
        }
    }
    // Writable again: the same command works (the check is not in the way).
    fs.set_read_only(false);
    let out = Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args(["run", "hello", "--config"])
        .arg(&config)
        .arg("--state-dir")
        .arg(&existing)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "hi there");
}
