//! Shared helper of the CLI integration tests: the built `clawctx` binary run as a user runs it.
#![allow(dead_code, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

/// Runs `clawctx args…` with `state` as its state directory: (exit code, stdout, stderr).
pub fn clawctx(state: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args(args)
        .env("CLAWCTX_STATE_DIR", state)
        .output()
        .expect("running clawctx");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
