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

/// Runs `clawctx args…` with `state` as its state directory and no `CLAWCTX_LOG`, as a
/// [`Run`] that prints the command with its output.
pub fn run(state: &Path, args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args(args)
        .env("CLAWCTX_STATE_DIR", state)
        .env_remove("CLAWCTX_LOG")
        .output()
        .expect("running clawctx");
    Run {
        cmd: format!("clawctx {}", args.join(" ")),
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A finished `clawctx` run; printed, it shows the command with its exit code, stdout and
/// stderr (what a failing test should say).
pub struct Run {
    /// The command line, as a user would type it.
    pub cmd: String,
    /// Exit code (`-1` when killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "$ {}\nexit: {}\n--- stdout\n{}\n--- stderr\n{}",
            self.cmd, self.code, self.stdout, self.stderr
        )
    }
}
